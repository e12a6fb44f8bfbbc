// api_dist.cpp -- communicators and data-parallel training (section 14).
#include <cmath>
#include <cstring>

#include "api/guard.h"
#include "dist/communicator.h"
#include "dist/data_parallel.h"

using namespace ampx::impl;

namespace {

Communicator& comm_arg(ampx_comm handle, const char* arg) {
  return object_arg<Communicator>(handle, arg, "an ampx_comm");
}

DataParallel& data_parallel_arg(ampx_data_parallel handle, const char* arg) {
  return object_arg<DataParallel>(handle, arg, "an ampx_data_parallel");
}

ampx_comm to_comm_handle(Communicator* c) { return reinterpret_cast<ampx_comm>(c); }

void check_unique_id_bytes(size_t bytes) {
  if (bytes != kNcclUniqueIdBytes)
    fail(AMPX_ERR_INVALID_ARGUMENT, "bytes is ", bytes, "; an NCCL unique id has ",
         kNcclUniqueIdBytes, " (AMPX_NCCL_UNIQUE_ID_BYTES)");
}

}  // namespace

extern "C" {

ampx_status ampx_comm_from_mpi(ampx_context ctx, const void* mpi_comm, ampx_comm* out) {
  return guard(__func__, [&] {
    DeviceContext& c = context_arg(ctx, "ctx");
    require_pointer(mpi_comm, "mpi_comm");
    require_pointer(out, "out");
    if (c.backend().device_type() != AMPX_DEVICE_CPU)
      fail(AMPX_ERR_NOT_SUPPORTED, "MPI communicators move host memory; this context is ",
           c.backend().name(), " (CUDA contexts use ampx_comm_from_nccl or ampx_comm_init_nccl)");
    *out = to_comm_handle(Communicator::create(c, open_mpi_transport(mpi_comm)));
  });
}

ampx_status ampx_comm_from_nccl(ampx_context ctx, void* nccl_comm, ampx_comm* out) {
  return guard(__func__, [&] {
    DeviceContext& c = context_arg(ctx, "ctx");
    require_pointer(nccl_comm, "nccl_comm");
    require_pointer(out, "out");
    *out = to_comm_handle(Communicator::create(c, open_nccl_transport(c, nccl_comm)));
  });
}

ampx_status ampx_nccl_unique_id(void* id, size_t bytes) {
  return guard(__func__, [&] {
    require_pointer(id, "id");
    check_unique_id_bytes(bytes);
    nccl_unique_id(id);
  });
}

ampx_status ampx_comm_init_nccl(ampx_context ctx, const void* id, size_t bytes, int32_t world_size,
                                int32_t rank, ampx_comm* out) {
  return guard(__func__, [&] {
    DeviceContext& c = context_arg(ctx, "ctx");
    require_pointer(id, "id");
    require_pointer(out, "out");
    check_unique_id_bytes(bytes);
    *out = to_comm_handle(Communicator::create(c, create_nccl_transport(c, id, world_size, rank)));
  });
}

ampx_status ampx_comm_rank(ampx_comm comm, int32_t* rank, int32_t* size) {
  return guard(__func__, [&] {
    Communicator& c = comm_arg(comm, "comm");
    if (rank) *rank = c.rank();
    if (size) *size = c.size();
  });
}

ampx_status ampx_comm_set_timeout(ampx_comm comm, double seconds) {
  return guard(__func__, [&] {
    Communicator& c = comm_arg(comm, "comm");
    if (!(seconds > 0.0) || !std::isfinite(seconds))
      fail(AMPX_ERR_INVALID_ARGUMENT, "seconds is ", seconds, "; a timeout is finite and > 0");
    c.set_timeout_seconds(seconds);
  });
}

void ampx_comm_release(ampx_comm comm) {
  if (!comm) return;
  guard(__func__, [&] { comm_arg(comm, "comm").release(); });
}

ampx_data_parallel_options ampx_data_parallel_options_default(void) {
  ampx_data_parallel_options options = AMPX_DATA_PARALLEL_OPTIONS_INIT;
  return options;
}

ampx_status ampx_data_parallel_create(ampx_comm comm, ampx_optimizer optimizer,
                                      const ampx_data_parallel_options* options,
                                      ampx_data_parallel* out) {
  return guard(__func__, [&] {
    // Without a communicator this rank cannot tell the others anything.
    Communicator& c = comm_arg(comm, "comm");
    // Every other check is this rank's own: its failure is agreed on with
    // the other ranks (DataParallel::create), so that none waits for it.
    FusedOptimizer* o = nullptr;
    DataParallelOptions dp;
    DataParallel::OwnFailure own;
    try {
      o = &object_arg<FusedOptimizer>(optimizer, "optimizer", "an ampx_optimizer");
      require_pointer(out, "out");
      const ampx_data_parallel_options given =
          read_options(options, ampx_data_parallel_options_default(), "options");
      dp.bucket_bytes = given.bucket_bytes;
      dp.first_bucket_bytes = given.first_bucket_bytes;
      dp.average = given.average != 0;
      dp.reduce_in_fp32 = given.reduce_in_fp32 != 0;
      dp.overlap = given.overlap != 0;
      dp.zero_stage = given.zero_stage;
    } catch (const StatusError& e) {
      own.status = e.status();
      own.message = e.what();
    }
    DataParallel* made = DataParallel::create(c, o, dp, own);
    *out = reinterpret_cast<ampx_data_parallel>(made);
  });
}

ampx_status ampx_data_parallel_set_sync(ampx_data_parallel dp, int32_t sync) {
  return guard(__func__, [&] { data_parallel_arg(dp, "dp").set_sync(sync != 0); });
}

ampx_status ampx_data_parallel_reduce(ampx_data_parallel dp) {
  return guard(__func__, [&] { data_parallel_arg(dp, "dp").reduce_now(); });
}

ampx_status ampx_data_parallel_set_fp8_recipe(ampx_data_parallel dp, ampx_fp8_recipe recipe) {
  return guard(__func__, [&] {
    DataParallel& d = data_parallel_arg(dp, "dp");
    Fp8Recipe* r =
        recipe ? &object_arg<Fp8Recipe>(recipe, "recipe", "an ampx_fp8_recipe") : nullptr;
    d.set_fp8_recipe(r);
  });
}

ampx_status ampx_data_parallel_get_stats(ampx_data_parallel dp, ampx_data_parallel_stats* stats) {
  return guard(__func__, [&] {
    DataParallel& d = data_parallel_arg(dp, "dp");
    const DataParallelStats s = d.stats();
    ampx_data_parallel_stats full = AMPX_DATA_PARALLEL_STATS_INIT;
    full.rank = d.communicator().rank();
    full.world_size = d.communicator().size();
    full.bucket_count = s.bucket_count;
    full.bucket_bytes = s.bucket_bytes;
    full.buckets_launched = s.buckets_launched;
    full.last_launched_early = s.last_launched_early;
    full.reductions = s.reductions;
    full.optimizer_state_bytes = s.optimizer_state_bytes;
    full.shard_elements = s.shard_elements;
    write_struct(stats, full, "stats");
  });
}

void ampx_data_parallel_release(ampx_data_parallel dp) {
  if (!dp) return;
  guard(__func__, [&] { data_parallel_arg(dp, "dp").release(); });
}

}  // extern "C"
