// fuzz_support.h -- what the file-loading fuzz targets share: a fatal check,
// a scratch file each input is written to, reading a file back, a valid
// file edited by the input, and the bytes of a model's tensors (the
// "nothing changed" oracle compares them).
#pragma once

#include <errno.h>  // program_invocation_short_name
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "ampx/ampx.h"

namespace fuzz_support {

// A broken harness or a broken oracle: a crash, so libFuzzer keeps the input.
inline void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "%s: %s (%s)\n", program_invocation_short_name, what, ampx_last_error());
    std::abort();
  }
}

inline std::vector<unsigned char> read_file(const std::string& path) {
  std::vector<unsigned char> bytes;
  std::FILE* f = std::fopen(path.c_str(), "rb");
  require(f != nullptr, "reading a file");
  int c;
  while ((c = std::fgetc(f)) != EOF) bytes.push_back(static_cast<unsigned char>(c));
  std::fclose(f);
  return bytes;
}

// A file under $TMPDIR (or /tmp) that each input replaces in place, removed
// with the object.
class ScratchFile {
 public:
  explicit ScratchFile(const char* tag) {
    const char* dir = std::getenv("TMPDIR");
    path_ = std::string(dir ? dir : "/tmp") + "/ampx-fuzz-" + tag + "-XXXXXX";
    fd_ = mkstemp(path_.data());
    require(fd_ >= 0, "mkstemp");
  }
  ~ScratchFile() {
    close(fd_);
    unlink(path_.c_str());
  }
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;

  const std::string& path() const { return path_; }

  void write(const std::vector<unsigned char>& bytes) {
    require(ftruncate(fd_, 0) == 0, "ftruncate");
    require(pwrite(fd_, bytes.data(), bytes.size(), 0) == static_cast<ssize_t>(bytes.size()),
            "pwrite");
  }

 private:
  std::string path_;
  int fd_ = -1;
};

// `file` edited by the input: a cut to the length in its first two bytes
// (u16, little-endian; ignored when not shorter), then edits of three bytes
// each, a u16 offset (modulo the length) and a byte to xor there.
inline std::vector<unsigned char> edited(std::vector<unsigned char> file, const uint8_t* data,
                                         size_t size) {
  if (size >= 2) {
    const size_t cut = static_cast<size_t>(data[0] | data[1] << 8);
    if (cut < file.size()) file.resize(cut);
    data += 2;
    size -= 2;
  }
  for (; size >= 3 && !file.empty(); data += 3, size -= 3)
    file[static_cast<size_t>(data[0] | data[1] << 8) % file.size()] ^= data[2];
  return file;
}

// Appends the bytes of tensors[0..count-1] to `out`.
inline void append_tensor_bytes(const ampx_tensor* tensors, size_t count,
                                std::vector<unsigned char>& out) {
  for (size_t i = 0; i < count; ++i) {
    size_t n = 0;
    require(ampx_tensor_nbytes(tensors[i], &n) == AMPX_OK, "nbytes");
    const size_t at = out.size();
    out.resize(at + n);
    require(ampx_tensor_to_host(tensors[i], out.data() + at, n) == AMPX_OK, "to_host");
  }
}

}  // namespace fuzz_support
