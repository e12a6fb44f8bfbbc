// mpi_plugin.cpp -- libampx_mpi.so: the MPI calls of ampx's communicators
// (see dist/mpi_plugin.h for why they live in a plugin).
//
// Every collective is started with MPI's nonblocking call and completed by
// wait(), which polls it against a deadline: a rank that never joins makes
// the others time out instead of hanging (MPI offers no timeout itself).
// Reductions are in place (MPI_IN_PLACE). F32, F64, I32 and I64 use MPI's
// own types and ops; F16 and BF16 have none in MPI 3, so they travel as
// MPI_UINT16_T with user-defined ops that add (or compare) in fp32 and round
// once, as a GPU's half-precision reduction does. Counts beyond INT_MAX are
// split into several calls.
#include "dist/mpi_plugin.h"

#include <mpi.h>

#include <sched.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstring>
#include <new>
#include <vector>

#include "ampx/ampx.h"
#include "math/convert.h"

namespace {

struct Comm {
  MPI_Comm comm = MPI_COMM_NULL;
  std::vector<MPI_Request> started;
  bool abandoned = false;
};

// Communicators whose operations were abandoned (plugin_abandon): kept,
// reachable, for the process's life, as MPI may still complete them.
std::vector<Comm*>* abandoned_comms = nullptr;

int report(char* err, size_t err_bytes, const char* what, int code) {
  char text[MPI_MAX_ERROR_STRING] = {};
  int length = 0;
  if (code != MPI_SUCCESS) MPI_Error_string(code, text, &length);
  if (err && err_bytes) std::snprintf(err, err_bytes, "%s failed: %s", what, text);
  return 1;
}

template <float (*Load)(uint16_t), uint16_t (*Store)(float), int Op>
void reduce_16bit(void* in, void* inout, int* length, MPI_Datatype*) {
  const auto* a = static_cast<const uint16_t*>(in);
  auto* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *length; ++i) {
    const float x = Load(a[i]), y = Load(b[i]);
    float r;
    if (Op == AMPX_MPI_SUM)
      r = x + y;
    else if (Op == AMPX_MPI_MAX)
      r = (x != x || y != y) ? x + y : std::max(x, y);
    else
      r = (x != x || y != y) ? x + y : std::min(x, y);
    b[i] = Store(r);
  }
}

float load_half(uint16_t v) { return ampx::impl::math::half_to_float(v); }
uint16_t store_half(float f) { return ampx::impl::math::float_to_half(f); }
float load_bf16(uint16_t v) { return ampx::impl::math::bf16_to_float(v); }
uint16_t store_bf16(float f) { return ampx::impl::math::float_to_bf16(f); }

// [dtype F16/BF16][op]: created on first use, kept for the process (MPI
// frees user ops at MPI_Finalize).
MPI_Op ops_16bit[2][3];
bool ops_made = false;

int make_16bit_ops(char* err, size_t err_bytes) {
  if (ops_made) return 0;
  MPI_User_function* fns[2][3] = {{reduce_16bit<load_half, store_half, AMPX_MPI_SUM>,
                                   reduce_16bit<load_half, store_half, AMPX_MPI_MAX>,
                                   reduce_16bit<load_half, store_half, AMPX_MPI_MIN>},
                                  {reduce_16bit<load_bf16, store_bf16, AMPX_MPI_SUM>,
                                   reduce_16bit<load_bf16, store_bf16, AMPX_MPI_MAX>,
                                   reduce_16bit<load_bf16, store_bf16, AMPX_MPI_MIN>}};
  for (int t = 0; t < 2; ++t)
    for (int o = 0; o < 3; ++o) {
      const int code = MPI_Op_create(fns[t][o], 1, &ops_16bit[t][o]);
      if (code != MPI_SUCCESS) return report(err, err_bytes, "MPI_Op_create", code);
    }
  ops_made = true;
  return 0;
}

bool type_and_op(int32_t dtype, int32_t op, MPI_Datatype* type, MPI_Op* mpi_op) {
  if (op < AMPX_MPI_SUM || op > AMPX_MPI_MIN) return false;
  const MPI_Op builtin[3] = {MPI_SUM, MPI_MAX, MPI_MIN};
  switch (dtype) {
    case AMPX_F32:
      *type = MPI_FLOAT;
      break;
    case AMPX_I32:
      *type = MPI_INT32_T;
      break;
    case AMPX_I64:
      *type = MPI_INT64_T;
      break;
    case AMPX_F16:
      *type = MPI_UINT16_T;
      *mpi_op = ops_16bit[0][op];
      return true;
    case AMPX_BF16:
      *type = MPI_UINT16_T;
      *mpi_op = ops_16bit[1][op];
      return true;
    default:
      return false;
  }
  *mpi_op = builtin[op];
  return true;
}

// The MPI type and op of a reduction (0), or a message (1).
int reduction_of(int32_t dtype, int32_t op, MPI_Datatype* type, MPI_Op* mpi_op, char* err,
                 size_t err_bytes) {
  if ((dtype == AMPX_F16 || dtype == AMPX_BF16) && make_16bit_ops(err, err_bytes)) return 1;
  if (type_and_op(dtype, op, type, mpi_op)) return 0;
  std::snprintf(err, err_bytes, "no MPI reduction for dtype %d and op %d", dtype, op);
  return 1;
}

size_t element_bytes(int32_t dtype) {
  return dtype == AMPX_F16 || dtype == AMPX_BF16 ? 2 : dtype == AMPX_I64 ? 8 : 4;
}

int plugin_open(const void* host_comm, void** out, int32_t* rank, int32_t* size, char* err,
                size_t err_bytes) {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  if (!initialized || finalized) {
    std::snprintf(err, err_bytes, "MPI is %s; call MPI_Init before making an ampx communicator",
                  finalized ? "already finalized" : "not initialized");
    return 1;
  }
  MPI_Comm given = *static_cast<const MPI_Comm*>(host_comm);
  if (given == MPI_COMM_NULL) {
    std::snprintf(err, err_bytes, "the communicator is MPI_COMM_NULL");
    return 1;
  }
  auto* comm = new (std::nothrow) Comm;
  if (!comm) {
    std::snprintf(err, err_bytes, "out of host memory");
    return 1;
  }
  int code = MPI_Comm_dup(given, &comm->comm);
  if (code != MPI_SUCCESS) {
    delete comm;
    return report(err, err_bytes, "MPI_Comm_dup", code);
  }
  // Errors come back as codes, never as an abort inside ampx's call.
  MPI_Comm_set_errhandler(comm->comm, MPI_ERRORS_RETURN);
  int r = 0, s = 0;
  MPI_Comm_rank(comm->comm, &r);
  MPI_Comm_size(comm->comm, &s);
  *rank = r;
  *size = s;
  *out = comm;
  return 0;
}

// Polls without blocking in MPI, so that the deadline is kept: tight at
// first (a collective of small buffers completes in microseconds), then
// yielding the core, then sleeping, as ranks may share cores.
int plugin_wait(void* handle, double seconds, char* err, size_t err_bytes) {
  auto* comm = static_cast<Comm*>(handle);
  const auto start = std::chrono::steady_clock::now();
  for (long polls = 0;; ++polls) {
    if (comm->started.empty()) return 0;
    int all_done = 0;
    const int code = MPI_Testall(static_cast<int>(comm->started.size()), comm->started.data(),
                                 &all_done, MPI_STATUSES_IGNORE);
    if (code != MPI_SUCCESS) {
      comm->started.clear();
      report(err, err_bytes, "MPI_Testall", code);
      return AMPX_MPI_FAILED;
    }
    if (all_done) {
      comm->started.clear();
      return 0;
    }
    const std::chrono::duration<double> waited = std::chrono::steady_clock::now() - start;
    if (waited.count() > seconds) {
      std::snprintf(err, err_bytes, "not complete after %g s", waited.count());
      return AMPX_MPI_TIMED_OUT;
    }
    if (polls < 1000) continue;
    if (polls < 3000) {
      sched_yield();
      continue;
    }
    const timespec pause = {0, 50000};
    nanosleep(&pause, nullptr);
  }
}

void plugin_abandon(void* handle) {
  auto* comm = static_cast<Comm*>(handle);
  if (comm->abandoned) return;
  comm->abandoned = true;
  if (!abandoned_comms) abandoned_comms = new std::vector<Comm*>;
  abandoned_comms->push_back(comm);
}

void plugin_close(void* handle) {
  auto* comm = static_cast<Comm*>(handle);
  // Operations still pending (the caller gave up waiting) keep it alive.
  if (!comm->started.empty()) plugin_abandon(comm);
  if (comm->abandoned) return;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&comm->comm);
  delete comm;
}

// Records a started request, or reports why it could not start.
int started(Comm* comm, int code, MPI_Request request, const char* what, char* err,
            size_t err_bytes) {
  if (code != MPI_SUCCESS) return report(err, err_bytes, what, code);
  comm->started.push_back(request);
  return 0;
}

int plugin_all_reduce(void* handle, void* data, int64_t count, int32_t dtype, int32_t op,
                      char* err, size_t err_bytes) {
  auto* comm = static_cast<Comm*>(handle);
  MPI_Datatype type;
  MPI_Op mpi_op;
  if (reduction_of(dtype, op, &type, &mpi_op, err, err_bytes)) return 1;
  auto* bytes = static_cast<char*>(data);
  for (int64_t done = 0; done < count;) {
    const int piece = static_cast<int>(std::min<int64_t>(count - done, INT_MAX / 8));
    void* at = bytes + static_cast<size_t>(done) * element_bytes(dtype);
    MPI_Request request;
    const int code = MPI_Iallreduce(MPI_IN_PLACE, at, piece, type, mpi_op, comm->comm, &request);
    if (started(comm, code, request, "MPI_Iallreduce", err, err_bytes)) return 1;
    done += piece;
  }
  return 0;
}

int plugin_broadcast(void* handle, void* data, size_t bytes, int32_t root, char* err,
                     size_t err_bytes) {
  auto* comm = static_cast<Comm*>(handle);
  auto* at = static_cast<char*>(data);
  for (size_t done = 0; done < bytes;) {
    const int piece = static_cast<int>(std::min<size_t>(bytes - done, INT_MAX / 2));
    MPI_Request request;
    const int code = MPI_Ibcast(at + done, piece, MPI_BYTE, root, comm->comm, &request);
    if (started(comm, code, request, "MPI_Ibcast", err, err_bytes)) return 1;
    done += static_cast<size_t>(piece);
  }
  return 0;
}

int plugin_all_gather(void* handle, const void* send, void* recv, size_t bytes, char* err,
                      size_t err_bytes) {
  auto* comm = static_cast<Comm*>(handle);
  if (bytes > static_cast<size_t>(INT_MAX)) {
    std::snprintf(err, err_bytes, "all-gather of %zu bytes per rank is beyond MPI's int count",
                  bytes);
    return 1;
  }
  int rank = 0;
  MPI_Comm_rank(comm->comm, &rank);
  const bool in_place = send == static_cast<const char*>(recv) + static_cast<size_t>(rank) * bytes;
  MPI_Request request;
  const int code = MPI_Iallgather(in_place ? MPI_IN_PLACE : send, static_cast<int>(bytes), MPI_BYTE,
                                  recv, static_cast<int>(bytes), MPI_BYTE, comm->comm, &request);
  return started(comm, code, request, "MPI_Iallgather", err, err_bytes);
}

int plugin_reduce_scatter(void* handle, const void* send, void* recv, int64_t count, int32_t dtype,
                          int32_t op, char* err, size_t err_bytes) {
  auto* comm = static_cast<Comm*>(handle);
  MPI_Datatype type;
  MPI_Op mpi_op;
  if (reduction_of(dtype, op, &type, &mpi_op, err, err_bytes)) return 1;
  if (count > INT_MAX) {
    std::snprintf(err, err_bytes,
                  "a reduce-scatter of %lld elements per rank is beyond MPI's int count",
                  static_cast<long long>(count));
    return 1;
  }
  MPI_Request request;
  const int code = MPI_Ireduce_scatter_block(send, recv, static_cast<int>(count), type, mpi_op,
                                             comm->comm, &request);
  return started(comm, code, request, "MPI_Ireduce_scatter_block", err, err_bytes);
}

int plugin_progress(void* handle, char* err, size_t err_bytes) {
  auto* comm = static_cast<Comm*>(handle);
  if (comm->started.empty()) return 0;
  int all_done = 0;
  const int code = MPI_Testall(static_cast<int>(comm->started.size()), comm->started.data(),
                               &all_done, MPI_STATUSES_IGNORE);
  if (code != MPI_SUCCESS) return report(err, err_bytes, "MPI_Testall", code);
  if (all_done) comm->started.clear();
  return 0;
}

const char* plugin_library_version() {
  static char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int length = 0;
  if (!version[0]) MPI_Get_library_version(version, &length);
  return version;
}

const ampx_mpi_plugin table = {AMPX_MPI_PLUGIN_ABI,   plugin_open,      plugin_close,
                               plugin_all_reduce,     plugin_broadcast, plugin_all_gather,
                               plugin_reduce_scatter, plugin_progress,  plugin_wait,
                               plugin_abandon,        plugin_library_version};

}  // namespace

extern "C" __attribute__((visibility("default"))) const ampx_mpi_plugin* ampx_mpi_plugin_v1(void) {
  return &table;
}
