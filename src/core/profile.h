// profile.h -- AMPX_PROFILE: the host wall time a context's backend spends
// in each kind of primitive, to find where a training step's time goes.
//
// With the environment variable AMPX_PROFILE unset, empty or "0" nothing is
// measured: a backend holds no profile, and each front door's ProfileScope
// tests one null pointer. With AMPX_PROFILE=1 (or "stderr") every backend
// made afterwards times each call of its front doors (backend.h and the
// capability interfaces) and tensor allocations, and prints a table when
// its context is destroyed: per kind, the calls and their total time, to
// stderr; any other value names a file the table is appended to. A call
// made inside another (a backend implementation calling a front door, or a
// detail such as oneDNN's reorders inside a convolution) is listed under
// it as "outer > inner" and counted only in the outer call's time. On an
// asynchronous device (CUDA) the times are those of enqueueing the work.
// With AMPX_PROFILE_CLOCK=thread the calling thread's CPU time is summed
// instead of wall time: on a machine busy with other work it measures a
// single-threaded run (num_threads 1) without the time spent waiting for a
// core, but misses what other threads compute. Both variables are read
// once, at the first backend made.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>

namespace ampx::impl {

class PrimitiveProfile {
 public:
  // A profile when AMPX_PROFILE asks for one, else nullptr. `device` names
  // the backend in the table ("CPU").
  static PrimitiveProfile* make_if_enabled(const std::string& device);
  // A profile that writes its table to `destination` ("stderr" or a file),
  // whatever AMPX_PROFILE says (tests).
  PrimitiveProfile(std::string device, std::string destination);
  ~PrimitiveProfile();  // writes the table
  PrimitiveProfile(const PrimitiveProfile&) = delete;
  PrimitiveProfile& operator=(const PrimitiveProfile&) = delete;

  void add(const std::string& kind, double seconds);

 private:
  struct Entry {
    int64_t calls = 0;
    double seconds = 0.0;
  };
  std::string device_, destination_;
  std::mutex mutex_;
  std::map<std::string, Entry> entries_;
};

// Times one front-door call into `profile` (nothing when it is nullptr) as
// `kind`, or "kind qualifier" when a qualifier is given (unary relu). A
// scope opened on a thread while another is open there is a detail of the
// outer one. Detail scopes (the second constructor) record only inside a
// timed call, under the innermost one.
class ProfileScope {
 public:
  ProfileScope(PrimitiveProfile* profile, const char* kind, const char* qualifier = nullptr)
      : profile_(profile), kind_(kind), qualifier_(qualifier) {
    if (profile_) begin();
  }
  explicit ProfileScope(const char* detail);
  ~ProfileScope() {
    if (profile_) end();
  }
  ProfileScope(const ProfileScope&) = delete;
  ProfileScope& operator=(const ProfileScope&) = delete;

 private:
  void begin();
  void end();

  PrimitiveProfile* profile_;
  const char* kind_;
  const char* qualifier_;
  ProfileScope* outer_ = nullptr;
  int64_t start_ns_ = 0;
  std::string path_;  // "outer > kind"
};

}  // namespace ampx::impl
