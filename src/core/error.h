// error.h -- how failures travel inside the library.
//
// Internal code throws ampx::impl::StatusError (a status plus a message); the C entry
// points in src/api catch everything and turn it into a status and the
// thread's last-error message. Messages name the argument and the values
// involved; the entry point prefixes the function name.
#pragma once

#include <cstdint>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

#include "ampx/ampx.h"

namespace ampx::impl {

class StatusError : public std::runtime_error {
 public:
  StatusError(ampx_status status, const std::string& message)
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
  throw StatusError(status, cat(std::forward<Parts>(parts)...));
}

// The number of errors set on the calling thread so far (by a failing ampx
// call or by ampx_set_error); defined with the last error in api_core.cpp.
uint64_t thread_error_count() noexcept;

// Calls a callback of the program that returns an ampx_status (a
// checkpoint segment, a gradient hook) and throws its failure as a StatusError.
// The message is the one set while the callback ran -- through
// ampx_set_error or by an ampx call inside it that failed -- or, when it
// set none, says so: the thread's last error then belongs to some earlier
// call, and repeating it would send the program after the wrong failure.
// `what` names the callback ("the checkpointed segment").
template <class Callback>
void call_status_callback(const char* what, Callback&& callback) {
  const uint64_t errors_before = thread_error_count();
  const ampx_status status = callback();
  if (status == AMPX_OK) return;
  if (thread_error_count() != errors_before)
    fail(status, what, " returned ", ampx_status_string(status), ": ", ampx_last_error());
  fail(status, what, " returned ", ampx_status_string(status),
       " without a message (it neither called ampx_set_error nor had an ampx call fail)");
}

}  // namespace ampx::impl
