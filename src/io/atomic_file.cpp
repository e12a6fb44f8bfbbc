#include "io/atomic_file.h"

#include <cctype>
#include <cstdint>
#include <cstring>
#include <iomanip>
#include <random>

#include "core/error.h"
#include "platform/platform.h"

namespace ampx::impl::io {

namespace {

constexpr size_t kNameMax = platform::kMaxFileName;
constexpr size_t kRandomDigits = 16;

TempNaming temp_naming(const std::string& path) {
  const size_t slash = path.find_last_of(platform::kPathSeparators);
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

// Removes the temporaries a killed save to the same target left behind
// (platform::remove_if_abandoned spares those with a live writer). Best
// effort: the save has succeeded whatever happens here.
void remove_stale_temporaries(const TempNaming& naming) noexcept {
  try {
    for (const std::string& name : platform::list_directory(naming.directory))
      if (is_temp_of(naming, name.c_str())) platform::remove_if_abandoned(naming.directory + name);
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
    // Created exclusively: never write into a file another writer is filling.
    file_ = platform::File::create_new(
        temp_, cat("cannot create the temporary file '", temp_, "' next to '", path, "'"));
    if (file_.is_open()) return;
    if (attempt == 15)
      fail(AMPX_ERR_IO, "cannot create a temporary file next to '", path, "': 16 names were taken");
  }
}

AtomicFile::~AtomicFile() {
  if (!committed_) {
    file_ = platform::File();
    platform::remove_file(temp_);
  }
}

void AtomicFile::write(const unsigned char* data, size_t bytes) {
  file_.write_all(data, bytes, temp_);
}

void AtomicFile::commit() {
  // The data must be on disk before the rename makes it the target, or a
  // power loss could leave the new name pointing at missing blocks.
  file_.flush_to_disk(temp_);
  file_.close(temp_);
  platform::replace_file(temp_, path_);
  committed_ = true;
  remove_stale_temporaries(naming_);
}

}  // namespace ampx::impl::io
