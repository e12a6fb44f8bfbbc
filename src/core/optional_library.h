// optional_library.h -- the one rule every optional library ampx opens at
// run time is found by (ampx.h, "Optional libraries"): OpenBLAS (AMPX_BLAS),
// oneDNN (AMPX_DNNL_LIBRARY), the MPI plugin (AMPX_MPI_PLUGIN), NCCL
// (AMPX_NCCL_LIBRARY) and cuDNN (AMPX_CUDNN_LIBRARY).
//
//   - the variable set (not empty): only the path it names is tried;
//   - the variable "none": the library is off, nothing is opened;
//   - unset: the library's default names, in order;
//   - when nothing loads, the error names the library and lists every path
//     tried with the loader's reason.
#pragma once

#include <string>
#include <vector>

namespace ampx::impl {

class LibrarySearch {
 public:
  // `library` names it in messages ("NCCL"); `defaults` are tried in order
  // while `variable` is unset.
  LibrarySearch(std::string library, const char* variable, std::vector<std::string> defaults);

  // The variable is "none".
  bool off() const { return off_; }
  // The variable names the one path tried.
  bool chosen() const { return chosen_; }
  // What open() tries, in order (nothing when off).
  const std::vector<std::string>& paths() const { return paths_; }

  // Loads the paths in order (platform::open_library, symbols local) and
  // returns the first handle, or nullptr (when off, or when none loads:
  // error() says why). The handle is the caller's.
  void* open();
  // The path that loaded.
  const std::string& path() const { return path_; }
  // Why open() returned nullptr: the library is off, or every path tried
  // with the loader's reason, one per line.
  std::string error() const;

 private:
  std::string library_;
  const char* variable_;
  bool off_ = false;
  bool chosen_ = false;
  std::vector<std::string> paths_;
  std::string path_;
  std::string tried_;
};

}  // namespace ampx::impl
