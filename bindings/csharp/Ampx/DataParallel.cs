using System;

namespace Ampx
{
    /// <summary>
    /// A group of ranks bound to one context (ampx_comm): from the host's MPI
    /// communicator (CPU contexts) or NCCL (CUDA contexts). Making one is
    /// collective: every rank calls it, in the same order. Dispose releases it
    /// (it lives on while a DataParallel uses it).
    /// </summary>
    public sealed unsafe class Comm : ContextObject
    {
        private Comm(Context context, Creator create)
            : base(new CommHandle(Create(context, create)), context, "Comm") { }

        /// <summary>
        /// From the host's MPI communicator: `mpiComm` is the address of an MPI_Comm
        /// (with Open MPI, the address of the MPI_Comm variable, e.g. of
        /// ompi_mpi_comm_world's handle). ampx duplicates it; MPI must be
        /// initialised, and be the MPI libampx_mpi.so was built against.
        /// </summary>
        public static Comm FromMpi(Context context, IntPtr mpiComm)
        {
            return new Comm(context, (raw, result) => Native.ampx_comm_from_mpi(raw, (void*)mpiComm, result));
        }

        /// <summary>From the host's ncclComm_t (which the host keeps owning).</summary>
        public static Comm FromNccl(Context context, IntPtr ncclComm)
        {
            return new Comm(context, (raw, result) => Native.ampx_comm_from_nccl(raw, (void*)ncclComm, result));
        }

        /// <summary>An NCCL unique id (rank 0 makes it and sends it to the others).</summary>
        public static byte[] NcclUniqueId()
        {
            var id = new byte[Native.AMPX_NCCL_UNIQUE_ID_BYTES];
            fixed (byte* p = id)
                Err.Check(Native.ampx_nccl_unique_id(p, (UIntPtr)id.Length));
            return id;
        }

        /// <summary>An NCCL communicator of `worldSize` ranks from rank 0's id; ampx owns it.</summary>
        public static Comm InitNccl(Context context, byte[] id, int worldSize, int rank)
        {
            if (id == null) throw new ArgumentNullException("id");
            return new Comm(context, (raw, result) =>
            {
                fixed (byte* p = id)
                    return Native.ampx_comm_init_nccl(raw, p, (UIntPtr)id.Length, worldSize, rank, result);
            });
        }

        /// <summary>This process's rank.</summary>
        public int Rank
        {
            get
            {
                int rank;
                Err.Check(Native.ampx_comm_rank(Ptr, &rank, null), this);
                return rank;
            }
        }

        /// <summary>The number of ranks.</summary>
        public int Size
        {
            get
            {
                int size;
                Err.Check(Native.ampx_comm_rank(Ptr, null, &size), this);
                return size;
            }
        }

        /// <summary>The longest a host wait on a collective may take before ampx aborts (NCCL).</summary>
        public void SetTimeout(double seconds)
        {
            Err.Check(Native.ampx_comm_set_timeout(Ptr, seconds), this);
        }
    }

    /// <summary>What DataParallel.Stats reports (ampx_data_parallel_stats).</summary>
    public struct DataParallelStats
    {
        public int Rank, WorldSize, BucketCount, BucketsLaunched, LastLaunchedEarly;
        public ulong BucketBytes, OptimizerStateBytes;
        public long Reductions, ShardElements;
    }

    /// <summary>
    /// An optimizer whose gradients are reduced over a communicator's ranks
    /// (ampx_data_parallel), in buckets overlapped with backward; every rank skips
    /// the same steps and keeps bitwise-equal parameters. Creating it is collective;
    /// Dispose completes pending reductions and releases the wrapper.
    /// </summary>
    public sealed unsafe class DataParallel : ContextObject
    {
        public DataParallel(Comm comm, Optimizer optimizer, DataParallelOptions options = null)
            : base(new DataParallelHandle(Create(comm, optimizer, options)), optimizer.Context, "DataParallel") { }

        private static IntPtr Create(Comm comm, Optimizer optimizer, DataParallelOptions options)
        {
            if (comm == null) throw new ArgumentNullException("comm");
            if (optimizer == null) throw new ArgumentNullException("optimizer");
            var o = (options ?? new DataParallelOptions()).ToNative();
            IntPtr result;
            Err.Check(Native.ampx_data_parallel_create(comm.Ptr, optimizer.Ptr, &o, &result), comm, optimizer);
            return result;
        }

        /// <summary>Gradient accumulation: false accumulates without communicating (DDP's no_sync).</summary>
        public void SetSync(bool sync)
        {
            Err.Check(Native.ampx_data_parallel_set_sync(Ptr, sync ? 1 : 0), this);
        }

        /// <summary>
        /// MAX-reduces `recipe`'s step amaxes over the ranks before its updates, so
        /// every rank's FP8 scales stay bitwise equal (null detaches; the wrapper
        /// keeps a reference). Every rank attaches a recipe with the same slots.
        /// </summary>
        public void SetFp8Recipe(Fp8Recipe recipe)
        {
            Err.Check(Native.ampx_data_parallel_set_fp8_recipe(Ptr, Fp8Recipe.RawOrNull(recipe)), this, recipe);
        }

        /// <summary>Completes the reduction now (engines that signal gradients themselves). Collective.</summary>
        public void Reduce()
        {
            Err.Check(Native.ampx_data_parallel_reduce(Ptr), this);
        }

        public DataParallelStats Stats
        {
            get
            {
                var s = Native.AMPX_DATA_PARALLEL_STATS_INIT();
                Err.Check(Native.ampx_data_parallel_get_stats(Ptr, &s), this);
                return new DataParallelStats
                {
                    Rank = s.rank, WorldSize = s.world_size, BucketCount = s.bucket_count,
                    BucketsLaunched = s.buckets_launched, LastLaunchedEarly = s.last_launched_early,
                    BucketBytes = s.bucket_bytes, OptimizerStateBytes = s.optimizer_state_bytes,
                    Reductions = s.reductions, ShardElements = s.shard_elements,
                };
            }
        }
    }
}
