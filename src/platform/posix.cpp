// posix.cpp -- platform.h on Linux and other POSIX systems.
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <ctime>
#include <memory>
#include <system_error>

#include "core/error.h"
#include "platform/platform.h"

namespace ampx::impl::platform {
namespace {

[[noreturn]] void fail_errno(int error, const std::string& what) {
  fail(AMPX_ERR_IO, what, ": ", std::error_code(error, std::generic_category()).message());
}

std::string directory_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

int fd_of(intptr_t handle) { return static_cast<int>(handle); }

}  // namespace

File::~File() {
  if (handle_ != kNone) ::close(fd_of(handle_));
}

File& File::operator=(File&& other) noexcept {
  if (this != &other) {
    if (handle_ != kNone) ::close(fd_of(handle_));
    handle_ = other.handle_;
    other.handle_ = kNone;
  }
  return *this;
}

File File::open_for_reading(const std::string& path) {
  // O_NONBLOCK: the open of a FIFO does not wait for a writer; the type is
  // checked before any read, and blocking reads restored for a regular file.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) fail_errno(errno, cat("cannot open '", path, "'"));
  File file(fd);
  struct stat info {};
  if (::fstat(fd, &info) != 0) fail_errno(errno, cat("cannot stat '", path, "'"));
  if (!S_ISREG(info.st_mode)) fail(AMPX_ERR_IO, "'", path, "' is not a regular file");
  const int flags = ::fcntl(fd, F_GETFL);
  if (flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0)
    fail_errno(errno, cat("cannot read '", path, "' in blocking mode"));
  return file;
}

File File::create_new(const std::string& path, const std::string& what) {
  // Mode 0666 lets the umask decide, as for a file the program creates.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
  if (fd < 0) {
    if (errno == EEXIST) return File();
    fail_errno(errno, what);
  }
  // Marks the file as having a live writer (remove_if_abandoned); the
  // kernel releases the lock however the process ends.
  ::flock(fd, LOCK_EX | LOCK_NB);
  return File(fd);
}

uint64_t File::size(const std::string& path) const {
  struct stat info {};
  if (::fstat(fd_of(handle_), &info) != 0) fail_errno(errno, cat("cannot stat '", path, "'"));
  return static_cast<uint64_t>(info.st_size);
}

size_t File::read(void* dst, size_t bytes, const std::string& path) {
  for (;;) {
    const ssize_t n = ::read(fd_of(handle_), dst, bytes);
    if (n >= 0) return static_cast<size_t>(n);
    if (errno != EINTR) fail_errno(errno, cat("cannot read '", path, "'"));
  }
}

void File::write_all(const unsigned char* data, size_t bytes, const std::string& path) {
  while (bytes > 0) {
    const ssize_t n = ::write(fd_of(handle_), data, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail_errno(n < 0 ? errno : ENOSPC, cat("cannot write '", path, "'"));
    data += n;
    bytes -= static_cast<size_t>(n);
  }
}

void File::flush_to_disk(const std::string& path) {
  if (::fsync(fd_of(handle_)) != 0) fail_errno(errno, cat("cannot flush '", path, "' to disk"));
}

void File::close(const std::string& path) {
  const int fd = fd_of(handle_);
  handle_ = kNone;
  if (::close(fd) != 0) fail_errno(errno, cat("cannot close '", path, "'"));
}

void replace_file(const std::string& from, const std::string& to) {
  if (::rename(from.c_str(), to.c_str()) != 0)
    fail_errno(errno, cat("cannot rename '", from, "' to '", to, "'"));
  // The rename lives in the directory; without this a power loss may bring
  // back the old directory entry (the old file, which is still complete).
  const std::string dir = directory_of(to);
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    fail_errno(errno, cat("'", to, "' was replaced, but its directory '", dir,
                          "' could not be opened to make that durable"));
  const int result = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  // EINVAL: the file system has nothing to sync for directories.
  if (result != 0 && error != EINVAL)
    fail_errno(error, cat("'", to, "' was replaced, but syncing its directory '", dir,
                          "' failed, so the replacement may not survive a power loss"));
}

void remove_file(const std::string& path) noexcept { ::unlink(path.c_str()); }

std::vector<std::string> list_directory(const std::string& directory) noexcept {
  std::vector<std::string> names;
  try {
    // Closed also when a name's allocation throws (out of memory).
    std::unique_ptr<DIR, int (*)(DIR*)> listing(
        ::opendir(directory.empty() ? "." : directory.c_str()), ::closedir);
    if (!listing) return names;
    while (const dirent* entry = ::readdir(listing.get())) names.emplace_back(entry->d_name);
  } catch (...) {
  }
  return names;
}

// A writer holds an exclusive flock on its file while it lives, so one
// whose lock can be taken has no writer; an empty one younger than a minute
// is spared, as its writer may not have locked it yet.
void remove_if_abandoned(const std::string& path) noexcept {
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return;
  struct stat info {};
  const bool unlocked =
      ::fstat(fd, &info) == 0 && S_ISREG(info.st_mode) && ::flock(fd, LOCK_EX | LOCK_NB) == 0;
  const bool fresh_and_empty = info.st_size == 0 && ::time(nullptr) - info.st_mtime < 60;
  if (unlocked && !fresh_and_empty) ::unlink(path.c_str());
  ::close(fd);
}

MappedFile::MappedFile(const std::string& path) {
  File file = File::open_for_reading(path);
  size_ = file.size(path);
  // An empty file cannot be mapped.
  if (size_ == 0) return;
  void* data = ::mmap(nullptr, static_cast<size_t>(size_), PROT_READ | PROT_WRITE, MAP_PRIVATE,
                      fd_of(file.handle_), 0);
  if (data == MAP_FAILED) fail_errno(errno, cat("cannot map '", path, "' into memory"));
  data_ = static_cast<unsigned char*>(data);
}  // the mapping keeps the file; its descriptor closes here

MappedFile::~MappedFile() {
  if (data_) ::munmap(data_, static_cast<size_t>(size_));
}

std::vector<std::string> library_file_names(const std::string& name, const std::string& version) {
  std::vector<std::string> names;
  if (!version.empty()) names.push_back("lib" + name + ".so." + version);
  names.push_back("lib" + name + ".so");
  return names;
}

void* open_library(const std::string& path, bool global, std::string* why) {
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | (global ? RTLD_GLOBAL : RTLD_LOCAL));
  if (!handle) {
    const char* reason = ::dlerror();
    *why = reason ? reason : "not found";
  }
  return handle;
}

void* loaded_library(const std::string& name) {
  void* handle = ::dlopen(name.c_str(), RTLD_NOW | RTLD_NOLOAD);
  // RTLD_NOLOAD still counts a reference; the caller does not close it, and
  // the library stays loaded for the process either way.
  return handle;
}

void* library_symbol(void* library, const char* name) { return ::dlsym(library, name); }

void close_library(void* library) { ::dlclose(library); }

std::string file_of_code(const void* address) {
  Dl_info info{};
  if (!::dladdr(address, &info) || !info.dli_fname) return "";
  return info.dli_fname;
}

void set_environment(const char* name, const char* value) { ::setenv(name, value, 1); }
void unset_environment(const char* name) { ::unsetenv(name); }

void* aligned_alloc(size_t alignment, size_t bytes) noexcept {
  return std::aligned_alloc(alignment, bytes);
}
void aligned_free(void* ptr) noexcept { std::free(ptr); }

namespace {
int64_t read_clock(clockid_t clock) noexcept {
  timespec t{};
  clock_gettime(clock, &t);
  return int64_t{t.tv_sec} * 1000000000 + t.tv_nsec;
}
}  // namespace

int64_t monotonic_ns() noexcept { return read_clock(CLOCK_MONOTONIC); }
int64_t thread_cpu_ns() noexcept { return read_clock(CLOCK_THREAD_CPUTIME_ID); }

}  // namespace ampx::impl::platform
