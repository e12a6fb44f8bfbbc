// atomic_file.h -- files replaced atomically (a temporary file renamed over
// the target), shared by the checkpoint and safetensors writers so both give
// the same crash guarantee.
#pragma once

#include <cstddef>
#include <string>

#include "platform/platform.h"

namespace ampx::impl::io {

// Where a target's temporary files go, and how they are named: the target's
// name plus ".tmp-" and 16 random hex digits, in the target's directory
// (rename is atomic only within one file system). A name too long for that
// to fit in NAME_MAX keeps its first part, joined by "~" to a hash of the
// whole name, so temporaries of different long names stay apart.
struct TempNaming {
  std::string directory;
  std::string prefix;  // a temporary's name is prefix + 16 hex digits
};

// A temporary file next to `path` that becomes `path` on commit() and is
// removed if the object dies uncommitted. So a crash at any instant leaves
// either the old file or the new one, and a failure leaves the old one and
// no temporary.
class AtomicFile {
 public:
  explicit AtomicFile(const std::string& path);
  ~AtomicFile();

  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  void write(const unsigned char* data, size_t bytes);
  // Flushes the data to disk and replaces the target with the temporary,
  // durably (platform::replace_file).
  void commit();

 private:
  std::string path_;
  TempNaming naming_;
  std::string temp_;
  platform::File file_;
  bool committed_ = false;
};

}  // namespace ampx::impl::io
