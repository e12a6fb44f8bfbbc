// error.h -- how failures travel inside the library.
//
// Internal code throws ampx::Error (a status plus a message); the C entry
// points in src/api catch everything and turn it into a status and the
// thread's last-error message. Messages name the argument and the values
// involved; the entry point prefixes the function name.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#include "ampx/ampx.h"

namespace ampx {

class Error : public std::runtime_error {
 public:
  Error(ampx_status status, const std::string& message)
      : std::runtime_error(message), status_(status) {}
  ampx_status status() const { return status_; }

 private:
  ampx_status status_;
};

// Concatenates its arguments with operator<< into a string.
template <class... Parts>
std::string cat(Parts&&... parts) {
  std::ostringstream out;
  (out << ... << std::forward<Parts>(parts));
  return out.str();
}

template <class... Parts>
[[noreturn]] void fail(ampx_status status, Parts&&... parts) {
  throw Error(status, cat(std::forward<Parts>(parts)...));
}

}  // namespace ampx
