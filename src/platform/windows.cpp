// windows.cpp -- platform.h on Windows (Win32 API; built with MinGW-w64 and
// tested under Wine). Paths arrive as UTF-8 and go to the wide (UTF-16)
// calls, so any file name Windows allows works, whatever the code page.
#ifndef NOMINMAX
#define NOMINMAX
#endif
#ifndef WIN32_LEAN_AND_MEAN
#define WIN32_LEAN_AND_MEAN
#endif
#include <windows.h>

#include <malloc.h>

#include <cerrno>
#include <cstdlib>
#include <system_error>

#include "core/error.h"
#include "platform/platform.h"

namespace ampx::impl::platform {
namespace {

std::wstring widen(const std::string& text) {
  if (text.empty()) return std::wstring();
  const int n = MultiByteToWideChar(CP_UTF8, MB_ERR_INVALID_CHARS, text.data(),
                                    static_cast<int>(text.size()), nullptr, 0);
  if (n <= 0) fail(AMPX_ERR_INVALID_ARGUMENT, "the path '", text, "' is not valid UTF-8");
  std::wstring wide(static_cast<size_t>(n), L'\0');
  MultiByteToWideChar(CP_UTF8, 0, text.data(), static_cast<int>(text.size()), &wide[0], n);
  return wide;
}

std::string narrow(const wchar_t* wide) {
  const int n = WideCharToMultiByte(CP_UTF8, 0, wide, -1, nullptr, 0, nullptr, nullptr);
  if (n <= 1) return std::string();
  std::string text(static_cast<size_t>(n), '\0');
  WideCharToMultiByte(CP_UTF8, 0, wide, -1, &text[0], n, nullptr, nullptr);
  text.resize(static_cast<size_t>(n - 1));
  return text;
}

// The system's words for a GetLastError() code: for the errors a file
// operation commonly meets, the C library's (strerror's) words for the
// same errno, so that a message reads the same on every system; others as
// Windows words them.
std::string message_of(DWORD error) {
  int same = 0;
  switch (error) {
    case ERROR_FILE_NOT_FOUND:
    case ERROR_PATH_NOT_FOUND:
    case ERROR_INVALID_NAME: same = ENOENT; break;
    case ERROR_ACCESS_DENIED:
    case ERROR_SHARING_VIOLATION:
    case ERROR_LOCK_VIOLATION: same = EACCES; break;
    case ERROR_FILE_EXISTS:
    case ERROR_ALREADY_EXISTS: same = EEXIST; break;
    case ERROR_DISK_FULL:
    case ERROR_HANDLE_DISK_FULL: same = ENOSPC; break;
    case ERROR_NOT_ENOUGH_MEMORY:
    case ERROR_OUTOFMEMORY: same = ENOMEM; break;
    default: break;
  }
  if (same != 0) return std::error_code(same, std::generic_category()).message();
  wchar_t* buffer = nullptr;
  const DWORD n = FormatMessageW(
      FORMAT_MESSAGE_ALLOCATE_BUFFER | FORMAT_MESSAGE_FROM_SYSTEM | FORMAT_MESSAGE_IGNORE_INSERTS,
      nullptr, error, 0, reinterpret_cast<wchar_t*>(&buffer), 0, nullptr);
  std::string text = n && buffer ? narrow(buffer) : std::string();
  if (buffer) LocalFree(buffer);
  while (!text.empty() && (text.back() == '\n' || text.back() == '\r' || text.back() == '.'))
    text.pop_back();
  return text.empty() ? cat("Windows error ", error) : text;
}

[[noreturn]] void fail_win(DWORD error, const std::string& what) {
  fail(AMPX_ERR_IO, what, ": ", message_of(error));
}

HANDLE handle_of(intptr_t handle) { return reinterpret_cast<HANDLE>(handle); }
intptr_t from_handle(HANDLE handle) { return reinterpret_cast<intptr_t>(handle); }

// Largest piece for ReadFile/WriteFile, which count in 32 bits.
constexpr size_t kIoPiece = size_t{1} << 30;

}  // namespace

File::~File() {
  if (handle_ != kNone) CloseHandle(handle_of(handle_));
}

File& File::operator=(File&& other) noexcept {
  if (this != &other) {
    if (handle_ != kNone) CloseHandle(handle_of(handle_));
    handle_ = other.handle_;
    other.handle_ = kNone;
  }
  return *this;
}

File File::open_for_reading(const std::string& path) {
  // Others may go on reading, writing and replacing the file meanwhile,
  // as on POSIX.
  const HANDLE h =
      CreateFileW(widen(path).c_str(), GENERIC_READ,
                  FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE, nullptr, OPEN_EXISTING,
                  FILE_ATTRIBUTE_NORMAL, nullptr);
  if (h == INVALID_HANDLE_VALUE) {
    const DWORD error = GetLastError();
    // A directory does not open as a file at all (ERROR_ACCESS_DENIED).
    const DWORD attributes = GetFileAttributesW(widen(path).c_str());
    if (attributes != INVALID_FILE_ATTRIBUTES && (attributes & FILE_ATTRIBUTE_DIRECTORY))
      fail(AMPX_ERR_IO, "'", path, "' is not a regular file");
    fail_win(error, cat("cannot open '", path, "'"));
  }
  File file(from_handle(h));
  if (GetFileType(h) != FILE_TYPE_DISK) fail(AMPX_ERR_IO, "'", path, "' is not a regular file");
  return file;
}

File File::create_new(const std::string& path, const std::string& what) {
  // Sharing no FILE_SHARE_DELETE: while this handle is open nobody can
  // delete the file, which is how remove_if_abandoned knows a live writer.
  const HANDLE h = CreateFileW(widen(path).c_str(), GENERIC_WRITE, FILE_SHARE_READ, nullptr,
                               CREATE_NEW, FILE_ATTRIBUTE_NORMAL, nullptr);
  if (h == INVALID_HANDLE_VALUE) {
    const DWORD error = GetLastError();
    if (error == ERROR_FILE_EXISTS || error == ERROR_ALREADY_EXISTS) return File();
    fail_win(error, what);
  }
  return File(from_handle(h));
}

uint64_t File::size(const std::string& path) const {
  LARGE_INTEGER size{};
  if (!GetFileSizeEx(handle_of(handle_), &size))
    fail_win(GetLastError(), cat("cannot find the size of '", path, "'"));
  return static_cast<uint64_t>(size.QuadPart);
}

size_t File::read(void* dst, size_t bytes, const std::string& path) {
  DWORD n = 0;
  if (!ReadFile(handle_of(handle_), dst, static_cast<DWORD>(bytes < kIoPiece ? bytes : kIoPiece),
                &n, nullptr))
    fail_win(GetLastError(), cat("cannot read '", path, "'"));
  return n;
}

void File::write_all(const unsigned char* data, size_t bytes, const std::string& path) {
  while (bytes > 0) {
    DWORD n = 0;
    if (!WriteFile(handle_of(handle_), data,
                   static_cast<DWORD>(bytes < kIoPiece ? bytes : kIoPiece), &n, nullptr))
      fail_win(GetLastError(), cat("cannot write '", path, "'"));
    if (n == 0) fail_win(ERROR_DISK_FULL, cat("cannot write '", path, "'"));
    data += n;
    bytes -= n;
  }
}

void File::flush_to_disk(const std::string& path) {
  if (!FlushFileBuffers(handle_of(handle_)))
    fail_win(GetLastError(), cat("cannot flush '", path, "' to disk"));
}

void File::close(const std::string& path) {
  const HANDLE h = handle_of(handle_);
  handle_ = kNone;
  if (!CloseHandle(h)) fail_win(GetLastError(), cat("cannot close '", path, "'"));
}

// MOVEFILE_WRITE_THROUGH returns once the move is on disk, which is what
// the directory fsync does on POSIX.
void replace_file(const std::string& from, const std::string& to) {
  if (!MoveFileExW(widen(from).c_str(), widen(to).c_str(),
                   MOVEFILE_REPLACE_EXISTING | MOVEFILE_WRITE_THROUGH))
    fail_win(GetLastError(), cat("cannot rename '", from, "' to '", to, "'"));
}

void remove_file(const std::string& path) noexcept {
  try {
    DeleteFileW(widen(path).c_str());
  } catch (...) {
  }
}

std::vector<std::string> list_directory(const std::string& directory) noexcept {
  std::vector<std::string> names;
  try {
    const std::string pattern = (directory.empty() ? std::string(".") : directory) + "\\*";
    WIN32_FIND_DATAW entry;
    const HANDLE find = FindFirstFileW(widen(pattern).c_str(), &entry);
    if (find == INVALID_HANDLE_VALUE) return names;
    do {
      names.push_back(narrow(entry.cFileName));
    } while (FindNextFileW(find, &entry));
    FindClose(find);
  } catch (...) {
  }
  return names;
}

// A live writer's handle shares no deletion (File::create_new), so the
// delete fails while it lives; the system closes it however the writer
// ends. Creating and opening are one step here, so no young file needs
// sparing as on POSIX.
void remove_if_abandoned(const std::string& path) noexcept { remove_file(path); }

MappedFile::MappedFile(const std::string& path) {
  File file = File::open_for_reading(path);
  size_ = file.size(path);
  if (size_ == 0) return;  // an empty file cannot be mapped
  const HANDLE mapping =
      CreateFileMappingW(handle_of(file.handle_), nullptr, PAGE_WRITECOPY, 0, 0, nullptr);
  if (!mapping) fail_win(GetLastError(), cat("cannot map '", path, "' into memory"));
  void* view = MapViewOfFile(mapping, FILE_MAP_COPY, 0, 0, 0);
  const DWORD error = GetLastError();
  CloseHandle(mapping);  // the view keeps the mapping and the file
  if (!view) fail_win(error, cat("cannot map '", path, "' into memory"));
  data_ = static_cast<unsigned char*>(view);
}

MappedFile::~MappedFile() {
  if (data_) UnmapViewOfFile(data_);
}

std::vector<std::string> library_file_names(const std::string& name, const std::string&) {
  return {name + ".dll", "lib" + name + ".dll"};
}

void* open_library(const std::string& path, bool, std::string* why) {
  // No "cannot find" dialog box for a missing dependency: an absent
  // optional library is an ordinary outcome.
  DWORD old_mode = 0;
  SetThreadErrorMode(SEM_FAILCRITICALERRORS | SEM_NOOPENFILEERRORBOX, &old_mode);
  HMODULE module = LoadLibraryW(widen(path).c_str());
  const DWORD error = GetLastError();
  SetThreadErrorMode(old_mode, nullptr);
  if (!module) *why = message_of(error);
  return reinterpret_cast<void*>(module);
}

void* loaded_library(const std::string& name) {
  return reinterpret_cast<void*>(GetModuleHandleW(widen(name).c_str()));
}

void* library_symbol(void* library, const char* name) {
  return reinterpret_cast<void*>(GetProcAddress(static_cast<HMODULE>(library), name));
}

void close_library(void* library) { FreeLibrary(static_cast<HMODULE>(library)); }

std::string file_of_code(const void* address) {
  HMODULE module = nullptr;
  if (!GetModuleHandleExW(
          GET_MODULE_HANDLE_EX_FLAG_FROM_ADDRESS | GET_MODULE_HANDLE_EX_FLAG_UNCHANGED_REFCOUNT,
          static_cast<LPCWSTR>(address), &module))
    return "";
  wchar_t path[32768];
  const DWORD n = GetModuleFileNameW(module, path, 32768);
  if (n == 0 || n >= 32768) return "";
  return narrow(path);
}

// _putenv_s changes the C runtime's copy, which getenv reads.
void set_environment(const char* name, const char* value) { _putenv_s(name, value); }
void unset_environment(const char* name) { _putenv_s(name, ""); }

// MinGW's C library has no aligned_alloc.
void* aligned_alloc(size_t alignment, size_t bytes) noexcept {
  return _aligned_malloc(bytes, alignment);
}
void aligned_free(void* ptr) noexcept { _aligned_free(ptr); }

int64_t monotonic_ns() noexcept {
  static const int64_t frequency = [] {
    LARGE_INTEGER f{};
    QueryPerformanceFrequency(&f);
    return static_cast<int64_t>(f.QuadPart);
  }();
  LARGE_INTEGER now{};
  QueryPerformanceCounter(&now);
  const int64_t ticks = now.QuadPart;
  return ticks / frequency * 1000000000 + ticks % frequency * 1000000000 / frequency;
}

int64_t thread_cpu_ns() noexcept {
  FILETIME creation, exit, kernel, user;
  if (!GetThreadTimes(GetCurrentThread(), &creation, &exit, &kernel, &user)) return 0;
  const auto ticks = [](const FILETIME& t) {
    return (static_cast<int64_t>(t.dwHighDateTime) << 32) | t.dwLowDateTime;
  };
  return (ticks(kernel) + ticks(user)) * 100;  // FILETIME counts 100 ns
}

}  // namespace ampx::impl::platform
