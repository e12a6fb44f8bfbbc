#include "core/optional_library.h"

#include <cstdlib>
#include <cstring>
#include <utility>

#include "core/error.h"
#include "platform/platform.h"

namespace ampx::impl {

LibrarySearch::LibrarySearch(std::string library, const char* variable,
                             std::vector<std::string> defaults)
    : library_(std::move(library)), variable_(variable) {
  const char* value = std::getenv(variable);
  if (value && std::strcmp(value, "none") == 0) {
    off_ = true;
  } else if (value && *value) {
    chosen_ = true;
    paths_.emplace_back(value);
  } else {
    paths_ = std::move(defaults);
  }
}

void* LibrarySearch::open() {
  tried_.clear();
  path_.clear();
  for (const std::string& candidate : paths_) {
    // By its soname (its module name on Windows) the loader finds a copy
    // the program has loaded already (a framework's), so that both use one
    // library.
    std::string why;
    if (void* handle = platform::open_library(candidate, false, &why)) {
      path_ = candidate;
      return handle;
    }
    tried_ += cat("\n  ", candidate, ": ", why);
  }
  return nullptr;
}

std::string LibrarySearch::error() const {
  if (off_)
    return cat(library_, " is turned off: the environment variable ", variable_, " is \"none\"");
  if (chosen_)
    return cat(library_, " could not be loaded from the path ", variable_,
               " names (the only one tried while it is set):", tried_);
  return cat(library_, " could not be loaded (", variable_, " may name the file to load):",
             tried_.empty() ? std::string("\n  (no path to try)") : tried_);
}

}  // namespace ampx::impl
