// platform.h -- everything ampx asks of the operating system, one interface
// per concern, implemented once per system: posix.cpp (Linux and other
// POSIX systems) and windows.cpp (Win32 API, built with MinGW-w64). CMake
// compiles one of the two; no other file of the library includes a system
// header or tests which system it is built for.
//
// Paths are UTF-8 everywhere (the C API's rule); windows.cpp converts them to
// UTF-16 for the wide Win32 calls. Failures throw StatusError with
// AMPX_ERR_IO and the system's own words for what went wrong.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ampx::impl::platform {

// ---- files ------------------------------------------------------------------

// An open file, closed when the object dies.
class File {
 public:
  File() = default;
  ~File();
  File(File&& other) noexcept : handle_(other.handle_) { other.handle_ = kNone; }
  File& operator=(File&& other) noexcept;
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  // An existing regular file, for reading. A FIFO or device is refused
  // without blocking on it.
  static File open_for_reading(const std::string& path);
  // A new file for writing, or an empty File when `path` exists already
  // (never opened twice: exclusive creation). While the File is open its
  // writer is known to be alive (remove_if_abandoned). Other failures
  // begin their message with `what` ("cannot create ...").
  static File create_new(const std::string& path, const std::string& what);

  bool is_open() const { return handle_ != kNone; }
  uint64_t size(const std::string& path) const;
  // Up to `bytes`, fewer at the end of the file (0 there).
  size_t read(void* dst, size_t bytes, const std::string& path);
  void write_all(const unsigned char* data, size_t bytes, const std::string& path);
  // Waits until what was written is on the storage device.
  void flush_to_disk(const std::string& path);
  // Closes, reporting errors some file systems (NFS) defer until then.
  void close(const std::string& path);

 private:
  friend class MappedFile;
  // An int file descriptor on POSIX, a HANDLE on Windows.
  static constexpr intptr_t kNone = -1;
  explicit File(intptr_t handle) : handle_(handle) {}
  intptr_t handle_ = kNone;
};

// Makes `from` the file `to` in one step (a crash leaves either), and makes
// that durable: on POSIX rename(2) then an fsync of the directory, on Windows
// MoveFileExW with MOVEFILE_REPLACE_EXISTING | MOVEFILE_WRITE_THROUGH.
void replace_file(const std::string& from, const std::string& to);
void remove_file(const std::string& path) noexcept;
// The names in a directory ("." for ""), nothing when it cannot be read.
std::vector<std::string> list_directory(const std::string& directory) noexcept;
// Removes `path` unless a live File::create_new writer still has it open.
// Best effort.
void remove_if_abandoned(const std::string& path) noexcept;
// The longest file name (one path component) the system allows.
constexpr size_t kMaxFileName = 255;
// Where a path's last component begins: after the last of these.
#if defined(_WIN32)
constexpr const char* kPathSeparators = "/\\";
#else
constexpr const char* kPathSeparators = "/";
#endif

// A private, copy-on-write mapping of a whole file: writes to it change
// the process's copy, never the file. Unmapped when the object dies.
class MappedFile {
 public:
  // A FIFO or device is refused without blocking; an empty file maps to
  // no memory (data() null).
  explicit MappedFile(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  unsigned char* data() const { return data_; }
  uint64_t size() const { return size_; }

 private:
  unsigned char* data_ = nullptr;
  uint64_t size_ = 0;
};

// ---- optional libraries, loaded at run time ---------------------------------

// The file names a library is known by, in the order to try them: for
// ("openblas", "0") libopenblas.so.0 then libopenblas.so on POSIX, and
// openblas.dll then libopenblas.dll on Windows (where the version is not in
// the name).
std::vector<std::string> library_file_names(const std::string& name, const std::string& version);
// Loads a library (its own symbols local to it unless `global`), or returns
// nullptr with the loader's reason in `why`.
void* open_library(const std::string& path, bool global, std::string* why);
// The library of that file name if the process has loaded it already, else
// nullptr (nothing is loaded). Not to be closed.
void* loaded_library(const std::string& name);
void* library_symbol(void* library, const char* name);
void close_library(void* library);
// The path of the file holding the code at `address` (libampx.so, ampx.dll,
// or a program that links ampx statically), "" when unknown.
std::string file_of_code(const void* address);

// ---- environment ------------------------------------------------------------

void set_environment(const char* name, const char* value);
void unset_environment(const char* name);

// ---- memory -----------------------------------------------------------------

// `bytes` (a multiple of `alignment`, a power of two) aligned to
// `alignment`, or nullptr; given back with aligned_free only.
void* aligned_alloc(size_t alignment, size_t bytes) noexcept;
void aligned_free(void* ptr) noexcept;

// ---- time -------------------------------------------------------------------

// A steady clock, in nanoseconds from an unspecified start.
int64_t monotonic_ns() noexcept;
// The CPU time the calling thread has used, in nanoseconds.
int64_t thread_cpu_ns() noexcept;

}  // namespace ampx::impl::platform
