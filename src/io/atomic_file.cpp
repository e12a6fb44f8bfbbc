#include "io/atomic_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <ctime>
#include <iomanip>
#include <random>
#include <system_error>
#include <vector>

#include "core/error.h"

namespace ampx::impl::io {

[[noreturn]] void fail_io(int error, const std::string& what) {
  fail(AMPX_ERR_IO, what, ": ", std::error_code(error, std::generic_category()).message());
}

namespace {

std::string directory_of(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

constexpr size_t kNameMax = 255;  // NAME_MAX on Linux's file systems
constexpr size_t kRandomDigits = 16;

TempNaming temp_naming(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  TempNaming naming;
  naming.directory = slash == std::string::npos ? std::string() : path.substr(0, slash + 1);
  const std::string tail = ".tmp-";
  if (base.size() + tail.size() + kRandomDigits <= kNameMax) {
    naming.prefix = base + tail;
  } else {
    uint64_t hash = 0xcbf29ce484222325ull;  // FNV-1a
    for (unsigned char c : base) hash = (hash ^ c) * 0x100000001b3ull;
    const std::string hashed = cat("~", std::hex, std::setw(16), std::setfill('0'), hash);
    naming.prefix =
        base.substr(0, kNameMax - hashed.size() - tail.size() - kRandomDigits) + hashed + tail;
  }
  return naming;
}

bool is_temp_of(const TempNaming& naming, const char* name) {
  const size_t length = std::strlen(name);
  if (length != naming.prefix.size() + kRandomDigits ||
      std::memcmp(name, naming.prefix.data(), naming.prefix.size()) != 0)
    return false;
  for (size_t i = naming.prefix.size(); i < length; ++i)
    if (!std::isxdigit(static_cast<unsigned char>(name[i]))) return false;
  return true;
}

// Removes the temporaries a killed save to the same target left behind. A
// writer holds an exclusive flock on its temporary while it lives, so one
// whose lock can be taken has no writer; an empty one younger than a minute
// is spared, as its writer may not have locked it yet. Best effort: the save
// has succeeded whatever happens here.
void remove_stale_temporaries(const TempNaming& naming) noexcept {
  try {
    const std::string dir = naming.directory.empty() ? std::string(".") : naming.directory;
    DIR* listing = ::opendir(dir.c_str());
    if (!listing) return;
    std::vector<std::string> stale;
    while (const dirent* entry = ::readdir(listing))
      if (is_temp_of(naming, entry->d_name)) stale.push_back(naming.directory + entry->d_name);
    ::closedir(listing);
    for (const std::string& candidate : stale) {
      const int fd = ::open(candidate.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC);
      if (fd < 0) continue;
      struct stat info {};
      const bool unlocked =
          ::fstat(fd, &info) == 0 && S_ISREG(info.st_mode) && ::flock(fd, LOCK_EX | LOCK_NB) == 0;
      const bool fresh_and_empty = info.st_size == 0 && ::time(nullptr) - info.st_mtime < 60;
      if (unlocked && !fresh_and_empty) ::unlink(candidate.c_str());
      ::close(fd);
    }
  } catch (...) {
  }
}

}  // namespace

AtomicFile::AtomicFile(const std::string& path) : path_(path), naming_(temp_naming(path)) {
  std::random_device random;
  for (int attempt = 0;; ++attempt) {
    const uint64_t suffix = (static_cast<uint64_t>(random()) << 32) ^ random();
    temp_ =
        cat(naming_.directory, naming_.prefix, std::hex, std::setw(16), std::setfill('0'), suffix);
    // O_EXCL: never write into a file another writer is filling. Mode
    // 0666 lets the umask decide, as for a file the program creates.
    fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (fd_ >= 0) {
      // Marks the file as having a live writer (remove_stale_temporaries);
      // released by the kernel however the process ends.
      ::flock(fd_, LOCK_EX | LOCK_NB);
      return;
    }
    const int error = errno;
    if (error != EEXIST || attempt == 15)
      fail_io(error, cat("cannot create the temporary file '", temp_, "' next to '", path, "'"));
  }
}

AtomicFile::~AtomicFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(temp_.c_str());
}

void AtomicFile::write(const unsigned char* data, size_t bytes) {
  while (bytes > 0) {
    const ssize_t n = ::write(fd_, data, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) fail_io(n < 0 ? errno : ENOSPC, cat("cannot write '", temp_, "'"));
    data += n;
    bytes -= static_cast<size_t>(n);
  }
}

void AtomicFile::commit() {
  // The data must be on disk before the rename makes it the target, or a
  // power loss could leave the new name pointing at missing blocks.
  if (::fsync(fd_) != 0) fail_io(errno, cat("cannot flush '", temp_, "' to disk"));
  const int fd = fd_;
  fd_ = -1;
  // close() reports write errors some file systems (NFS) defer until then.
  if (::close(fd) != 0) fail_io(errno, cat("cannot close '", temp_, "'"));
  if (::rename(temp_.c_str(), path_.c_str()) != 0)
    fail_io(errno, cat("cannot rename '", temp_, "' to '", path_, "'"));
  committed_ = true;
  sync_directory();
  remove_stale_temporaries(naming_);
}

// The rename lives in the directory; without this a power loss may bring
// back the old directory entry (the old file, which is still complete).
void AtomicFile::sync_directory() {
  const std::string dir = directory_of(path_);
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0)
    fail_io(errno, cat("'", path_, "' was replaced, but its directory '", dir,
                       "' could not be opened to make that durable"));
  const int result = ::fsync(fd);
  const int error = errno;
  ::close(fd);
  // EINVAL: the file system has nothing to sync for directories.
  if (result != 0 && error != EINVAL)
    fail_io(error, cat("'", path_, "' was replaced, but syncing its directory '", dir,
                       "' failed, so the replacement may not survive a power loss"));
}

}  // namespace ampx::impl::io
