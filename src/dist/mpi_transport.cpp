// mpi_transport.cpp -- the MPI transport: libampx_mpi.so (dist/mpi_plugin.h),
// found next to libampx (or where AMPX_MPI_PLUGIN names it) and loaded the
// first time a program makes a communicator from an MPI_Comm. Every
// collective is nonblocking in the plugin; waits poll it against the
// communicator's timeout.
#include <mutex>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/optional_library.h"
#include "dist/communicator.h"
#include "dist/mpi_plugin.h"
#include "platform/platform.h"

namespace ampx::impl {
namespace {

constexpr size_t kErrorBytes = 512;

// The directory of the object holding this code (libampx.so, ampx.dll, or
// a program linking ampx statically), with a trailing separator.
std::string own_directory() {
  const std::string path = platform::file_of_code(reinterpret_cast<const void*>(&own_directory));
  const size_t slash = path.find_last_of(platform::kPathSeparators);
  return slash == std::string::npos ? "" : path.substr(0, slash + 1);
}

// The plugin, by the loader rule of optional libraries
// (core/optional_library.h): AMPX_MPI_PLUGIN, else libampx_mpi.so beside
// this library, then by the dynamic loader's search.
const ampx_mpi_plugin* load_plugin() {
  static std::mutex mutex;
  static const ampx_mpi_plugin* plugin = nullptr;
  std::lock_guard<std::mutex> lock(mutex);
  if (plugin) return plugin;
  const std::string file = platform::library_file_names("ampx_mpi", "").front();
  std::vector<std::string> defaults;
  const std::string beside = own_directory();
  if (!beside.empty()) defaults.push_back(beside + file);
  defaults.push_back(file);
  LibrarySearch search("the MPI plugin " + file, "AMPX_MPI_PLUGIN", std::move(defaults));
  // RTLD_GLOBAL is not needed: the program that made the MPI_Comm has
  // loaded libmpi already, and the plugin binds to that copy.
  void* handle = search.open();
  if (!handle)
    fail(AMPX_ERR_NOT_SUPPORTED,
         "MPI support is not available (the plugin is built where MPI was found and needs that "
         "MPI's libmpi at run time): ",
         search.error());
  auto entry = reinterpret_cast<ampx_mpi_plugin_entry>(platform::library_symbol(handle, "ampx_mpi_plugin_v1"));
  const ampx_mpi_plugin* table = entry ? entry() : nullptr;
  if (!table || table->abi != AMPX_MPI_PLUGIN_ABI) {
    platform::close_library(handle);
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
