// mpi_transport.cpp -- the MPI transport: libampx_mpi.so (dist/mpi_plugin.h),
// found next to libampx (or where AMPX_MPI_PLUGIN names it) and loaded the
// first time a program makes a communicator from an MPI_Comm. Every
// collective is nonblocking in the plugin; waits poll it against the
// communicator's timeout.
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "core/error.h"
#include "dist/communicator.h"
#include "dist/mpi_plugin.h"

namespace ampx::impl {
namespace {

constexpr size_t kErrorBytes = 512;

// The directory of the object holding this code (libampx.so, or a program
// linking ampx statically), with a trailing '/'.
std::string own_directory() {
  Dl_info info{};
  if (!dladdr(reinterpret_cast<void*>(&own_directory), &info) || !info.dli_fname) return "";
  const std::string path = info.dli_fname;
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? "" : path.substr(0, slash + 1);
}

// The plugin, by the loader rule of optional libraries: where
// AMPX_MPI_PLUGIN is set, only the path it names is tried ("none": MPI
// support is off); otherwise libampx_mpi.so beside this library, then by
// the dynamic loader's search. The error lists every path tried.
const ampx_mpi_plugin* load_plugin() {
  static std::mutex mutex;
  static const ampx_mpi_plugin* plugin = nullptr;
  std::lock_guard<std::mutex> lock(mutex);
  if (plugin) return plugin;
  const char* named = std::getenv("AMPX_MPI_PLUGIN");
  const bool chosen = named && *named;
  if (chosen && std::strcmp(named, "none") == 0)
    fail(AMPX_ERR_NOT_SUPPORTED,
         "MPI support is turned off: the environment variable AMPX_MPI_PLUGIN is \"none\"");
  std::vector<std::string> candidates;
  if (chosen) {
    candidates.push_back(named);
  } else {
    const std::string beside = own_directory();
    if (!beside.empty()) candidates.push_back(beside + "libampx_mpi.so");
    candidates.push_back("libampx_mpi.so");
  }
  std::string tried;
  void* handle = nullptr;
  for (const std::string& path : candidates) {
    // RTLD_GLOBAL is not needed: the program that made the MPI_Comm has
    // loaded libmpi already, and the plugin binds to that copy.
    handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle) break;
    const char* why = dlerror();
    tried += cat("\n  ", path, ": ", why ? why : "not found");
  }
  if (!handle)
    fail(AMPX_ERR_NOT_SUPPORTED,
         "MPI support is not available: the plugin libampx_mpi.so (built where MPI was found, "
         "and needing that MPI's libmpi at run time) could not be loaded from ",
         chosen ? "the path AMPX_MPI_PLUGIN names (the only one tried while it is set)"
                : "beside libampx or the loader's search path (AMPX_MPI_PLUGIN names another)",
         ":", tried);
  auto entry = reinterpret_cast<ampx_mpi_plugin_entry>(dlsym(handle, "ampx_mpi_plugin_v1"));
  const ampx_mpi_plugin* table = entry ? entry() : nullptr;
  if (!table || table->abi != AMPX_MPI_PLUGIN_ABI) {
    dlclose(handle);
    fail(AMPX_ERR_NOT_SUPPORTED, "the MPI plugin libampx_mpi.so is from another ampx version (",
         table ? "plugin ABI " : "no entry point", table ? std::to_string(table->abi) : "",
         ", this library needs ABI ", AMPX_MPI_PLUGIN_ABI, ")");
  }
  plugin = table;  // kept loaded for the process: MPI cannot be unloaded safely
  return plugin;
}

int32_t mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return AMPX_MPI_SUM;
    case ReduceOp::Max:
      return AMPX_MPI_MAX;
    case ReduceOp::Min:
      return AMPX_MPI_MIN;
  }
  return AMPX_MPI_SUM;
}

class MpiTransport final : public Transport {
 public:
  MpiTransport(const ampx_mpi_plugin& plugin, void* comm, int32_t rank, int32_t size)
      : plugin_(plugin), comm_(comm), rank_(rank), size_(size) {}
  ~MpiTransport() override { plugin_.close(comm_); }

  const char* library() const override { return "MPI"; }
  int32_t rank() const override { return rank_; }
  int32_t size() const override { return size_; }

  void all_reduce(void* data, int64_t count, DType dtype, ReduceOp op, Stream stream) override {
    if (count == 0) return;
    char err[kErrorBytes] = {};
    if (plugin_.all_reduce(comm_, data, count, static_cast<int32_t>(dtype), mpi_op(op), err,
                           sizeof err))
      fail(AMPX_ERR_DEVICE, err);
    complete_on(stream);
  }
  void broadcast(void* data, size_t bytes, int32_t root, Stream stream) override {
    char err[kErrorBytes] = {};
    if (bytes && plugin_.broadcast(comm_, data, bytes, root, err, sizeof err))
      fail(AMPX_ERR_DEVICE, err);
    complete_on(stream);
  }
  void all_gather(const void* send, void* recv, size_t bytes, Stream stream) override {
    char err[kErrorBytes] = {};
    if (bytes && plugin_.all_gather(comm_, send, recv, bytes, err, sizeof err))
      fail(AMPX_ERR_DEVICE, err);
    complete_on(stream);
  }
  void reduce_scatter(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op,
                      Stream stream) override {
    if (count == 0) return;
    char err[kErrorBytes] = {};
    if (plugin_.reduce_scatter(comm_, send, recv, count, static_cast<int32_t>(dtype), mpi_op(op),
                               err, sizeof err))
      fail(AMPX_ERR_DEVICE, err);
    complete_on(stream);
  }
  void progress() override {
    char err[kErrorBytes] = {};
    if (plugin_.progress(comm_, err, sizeof err)) fail(AMPX_ERR_DEVICE, err);
  }
  void finish_started() override {
    char err[kErrorBytes] = {};
    const int result = plugin_.wait(comm_, timeout_seconds_, err, sizeof err);
    if (result == AMPX_MPI_TIMED_OUT) throw TimedOut(AMPX_ERR_DEVICE, err);
    if (result) fail(AMPX_ERR_DEVICE, err);
  }
  void abort() override { plugin_.abandon(comm_); }

 private:
  // The CPU backend is synchronous: a collective in the compute stream's
  // order is complete when the call returns.
  void complete_on(Stream stream) {
    if (stream == Stream::Compute) finish_started();
  }

  const ampx_mpi_plugin& plugin_;
  void* comm_;
  int32_t rank_;
  int32_t size_;
};

}  // namespace

std::unique_ptr<Transport> open_mpi_transport(const void* mpi_comm) {
  const ampx_mpi_plugin& plugin = *load_plugin();
  char err[kErrorBytes] = {};
  void* comm = nullptr;
  int32_t rank = 0, size = 0;
  if (plugin.open(mpi_comm, &comm, &rank, &size, err, sizeof err))
    fail(AMPX_ERR_INVALID_ARGUMENT, err);
  try {
    return std::make_unique<MpiTransport>(plugin, comm, rank, size);
  } catch (...) {
    plugin.close(comm);
    throw;
  }
}

}  // namespace ampx::impl
