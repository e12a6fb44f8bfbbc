// profile.cpp -- see profile.h.
#include "core/profile.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "platform/platform.h"

namespace ampx::impl {
namespace {

// Where the tables go: "" (off), "stderr", or a file name.
const std::string& destination() {
  static const std::string chosen = [] {
    const char* value = std::getenv("AMPX_PROFILE");
    if (!value || !*value || std::strcmp(value, "0") == 0) return std::string();
    if (std::strcmp(value, "1") == 0) return std::string("stderr");
    return std::string(value);
  }();
  return chosen;
}

// AMPX_PROFILE_CLOCK=thread: the calling thread's CPU time, not wall time.
bool thread_clock() {
  static const bool chosen = [] {
    const char* value = std::getenv("AMPX_PROFILE_CLOCK");
    return value && std::strcmp(value, "thread") == 0;
  }();
  return chosen;
}

int64_t now_ns() { return thread_clock() ? platform::thread_cpu_ns() : platform::monotonic_ns(); }

// The innermost open scope of this thread that records.
thread_local ProfileScope* active_scope = nullptr;

}  // namespace

PrimitiveProfile* PrimitiveProfile::make_if_enabled(const std::string& device) {
  const std::string& to = destination();
  if (to.empty()) return nullptr;
  thread_clock();  // read the environment now, not inside a timed call
  return new PrimitiveProfile(device, to);
}

PrimitiveProfile::PrimitiveProfile(std::string device, std::string destination)
    : device_(std::move(device)), destination_(std::move(destination)) {}

void PrimitiveProfile::add(const std::string& kind, double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  Entry& e = entries_[kind];
  e.calls += 1;
  e.seconds += seconds;
}

// The table: outermost kinds by time, most first, each followed by its
// details. One line per kind: milliseconds, calls, the kind last (it may
// hold spaces), so that scripts can read it.
PrimitiveProfile::~PrimitiveProfile() {
  FILE* out = destination_ == "stderr" ? stderr : std::fopen(destination_.c_str(), "a");
  if (!out) return;
  std::vector<std::pair<std::string, Entry>> rows(entries_.begin(), entries_.end());
  double total = 0.0;
  int64_t calls = 0;
  for (const auto& row : rows)
    if (row.first.find(" > ") == std::string::npos) total += row.second.seconds, calls += row.second.calls;
  // A detail sorts right after its outer kind: by the outer kind's time,
  // then by its own.
  auto outer_seconds = [this](const std::string& kind) {
    const size_t cut = kind.find(" > ");
    return cut == std::string::npos ? entries_.at(kind).seconds
                                    : entries_.at(kind.substr(0, cut)).seconds;
  };
  std::sort(rows.begin(), rows.end(), [&](const auto& a, const auto& b) {
    const double oa = outer_seconds(a.first), ob = outer_seconds(b.first);
    if (oa != ob) return oa > ob;
    const std::string ka = a.first.substr(0, a.first.find(" > "));
    const std::string kb = b.first.substr(0, b.first.find(" > "));
    if (ka != kb) return ka < kb;
    const bool da = ka != a.first, db = kb != b.first;
    if (da != db) return !da;
    return a.second.seconds > b.second.seconds;
  });
  std::fprintf(out, "ampx profile (%s backend): %lld primitive calls, %.3f ms (%s)\n",
               device_.c_str(), static_cast<long long>(calls), total * 1e3,
               thread_clock() ? "the calling thread's CPU time" : "wall time");
  std::fprintf(out, "ampx profile: %12s %10s  %s\n", "ms", "calls", "primitive");
  for (const auto& row : rows)
    std::fprintf(out, "ampx profile: %12.3f %10lld  %s\n", row.second.seconds * 1e3,
                 static_cast<long long>(row.second.calls), row.first.c_str());
  std::fprintf(out, "ampx profile: end\n");
  if (out != stderr) std::fclose(out);
}

ProfileScope::ProfileScope(const char* detail)
    : profile_(active_scope ? active_scope->profile_ : nullptr), kind_(detail), qualifier_(nullptr) {
  if (profile_) begin();
}

void ProfileScope::begin() {
  outer_ = active_scope;
  if (outer_) path_ = outer_->path_ + " > ";
  path_ += kind_;
  if (qualifier_) path_.append(" ").append(qualifier_);
  active_scope = this;
  start_ns_ = now_ns();
}

void ProfileScope::end() {
  const double seconds = 1e-9 * static_cast<double>(now_ns() - start_ns_);
  active_scope = outer_;
  profile_->add(path_, seconds);
}

}  // namespace ampx::impl
