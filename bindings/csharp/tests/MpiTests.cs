// Data-parallel training over MPI, run by run_tests.sh as
//   mpirun -np 2 mono AmpxTests.exe --mpi
// Each rank trains on its half of a batch through a DataParallel wrapper;
// the ranks must end with bitwise-equal parameters, equal (to fp32 rounding)
// to one process training on the whole batch. libmpi is reached through its
// C interface only (dlopen/dlsym): MPI_Init, MPI_Barrier, MPI_Finalize and
// Open MPI's MPI_COMM_WORLD, which is the address of ompi_mpi_comm_world.
using System;
using System.IO;
using System.Linq;
using System.Runtime.InteropServices;
using Ampx;

namespace AmpxTests
{
    public static class MpiTests
    {
        [DllImport("libdl.so.2")]
        private static extern IntPtr dlopen(string file, int mode);

        [DllImport("libdl.so.2")]
        private static extern IntPtr dlsym(IntPtr handle, string name);

        [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
        private delegate int InitFn(IntPtr argc, IntPtr argv);

        [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
        private delegate int BarrierFn(IntPtr comm);

        [UnmanagedFunctionPointer(CallingConvention.Cdecl)]
        private delegate int FinalizeFn();

        private static T Function<T>(IntPtr library, string name) where T : class
        {
            var address = dlsym(library, name);
            if (address == IntPtr.Zero) throw new InvalidOperationException("libmpi has no " + name);
            return (T)(object)Marshal.GetDelegateForFunctionPointer(address, typeof(T));
        }

        private const int Rows = 8, In = 3, Out = 2, Steps = 5;

        /// <summary>SGD (lr 0.1) on rows [first, first + count) of the batch; returns the weights.</summary>
        private static float[] Train(Context ctx, float[] xs, float[] ys, float[] w0, int first, int count,
                                     Comm comm, out DataParallelStats stats)
        {
            using (var x = Tensor.FromArray(ctx, xs.Skip(first * In).Take(count * In).ToArray(),
                                            new long[] { count, In }))
            using (var y = Tensor.FromArray(ctx, ys.Skip(first * Out).Take(count * Out).ToArray(),
                                            new long[] { count, Out }))
            using (var w = Common.Param(ctx, w0, "w", Out, In))
            using (var opt = Optimizer.Sgd(ctx, new[] { w }, new SgdOptions { Lr = 0.1 }))
            using (var dp = comm == null ? null : new DataParallel(comm, opt))
            {
                for (int step = 0; step < Steps; ++step)
                {
                    using (ctx.Scope())
                    {
                        Tensor.MseLoss(Tensor.Linear(x, w), y).Backward();
                        opt.Step();
                        opt.ZeroGrad();
                    }
                }
                stats = dp == null ? default(DataParallelStats) : dp.Stats;
                return w.ToFloatArray();
            }
        }

        public static int Run()
        {
            var path = Environment.GetEnvironmentVariable("AMPX_MPI_LIBRARY") ?? "libmpi.so.40";
            var mpi = dlopen(path, 0x102); // RTLD_NOW | RTLD_GLOBAL: Open MPI's plugins need its symbols
            if (mpi == IntPtr.Zero) throw new InvalidOperationException("cannot load " + path);
            Function<InitFn>(mpi, "MPI_Init")(IntPtr.Zero, IntPtr.Zero);
            var world = dlsym(mpi, "ompi_mpi_comm_world");
            if (world == IntPtr.Zero) throw new InvalidOperationException(path + " is not Open MPI's");
            var commHolder = Marshal.AllocHGlobal(IntPtr.Size); // an MPI_Comm variable
            Marshal.WriteIntPtr(commHolder, world);
            var barrier = Function<BarrierFn>(mpi, "MPI_Barrier");
            int rank = -1;
            try
            {
                var rng = new Common.Lcg(11);
                var xs = rng.Take(Rows * In, 1);
                var ys = rng.Take(Rows * Out, 1);
                var w0 = rng.Take(Out * In, 0.5f);
                float[] mine;
                DataParallelStats stats;
                using (var ctx = new Context(new ContextOptions { NumThreads = 1 }))
                using (var comm = Comm.FromMpi(ctx, commHolder))
                {
                    rank = comm.Rank;
                    Assert.Equal(2, comm.Size, "ranks (run with mpirun -np 2)");
                    // Rank 1 starts elsewhere: the wrapper broadcasts rank 0's parameters.
                    var start = rank == 0 ? w0 : w0.Select(v => v + 1).ToArray();
                    int half = Rows / comm.Size;
                    mine = Train(ctx, xs, ys, start, rank * half, half, comm, out stats);
                }
                // An FP8 recipe attached to a wrapper takes the MAX of the ranks'
                // step amaxes (rank r quantizes a tensor of amax 2 (r + 1)): every
                // rank's scale is 448 / 4 (delayed scaling, margin 0).
                using (var ctx = new Context(new ContextOptions { NumThreads = 1 }))
                using (var comm = Comm.FromMpi(ctx, commHolder))
                using (var p = Common.Param(ctx, new float[4], "p", 4))
                using (var opt = Optimizer.Sgd(ctx, new[] { p }))
                using (var dp = new DataParallel(comm, opt))
                using (var recipe = new Fp8Recipe(ctx, new Fp8RecipeOptions { AmaxHistoryLen = 2 }))
                using (var x = Tensor.FromArray(ctx, new[] { 0.5f, -2f * (rank + 1) }, new long[] { 2 }))
                {
                    long slot = recipe.AddTensor(Fp8Role.Forward, "x");
                    dp.SetFp8Recipe(recipe);
                    recipe.Quantize(slot, x).Dispose();
                    recipe.Update(); // no unscale came first: the update reduces itself
                    var info = recipe.Slot(slot);
                    Assert.Equal(448f / 4f, info.Scale, "FP8 scale from the MAX over the ranks");
                    Assert.True(info.History.SequenceEqual(new[] { 0f, 4f }), "FP8 history " +
                                string.Join(" ", info.History));
                    dp.SetFp8Recipe(null);
                }
                Assert.Equal(2, stats.WorldSize, "world size in the stats");
                Assert.Equal((long)Steps, stats.Reductions, "one reduction per step");

                var dir = Common.Env("AMPX_TEST_TMP");
                File.WriteAllText(Path.Combine(dir, "mpi-rank" + rank + ".txt"),
                                  string.Join(" ", mine.Select(Common.Hex)));
                barrier(world);
                if (rank == 0)
                {
                    var other = File.ReadAllText(Path.Combine(dir, "mpi-rank1.txt"));
                    Assert.Equal(string.Join(" ", mine.Select(Common.Hex)), other, "the ranks' weights, bit for bit");
                    // The mean of the halves' mean-squared-error gradients is the
                    // whole batch's: one process on all rows takes the same steps.
                    float[] whole;
                    DataParallelStats none;
                    using (var single = new Context())
                        whole = Train(single, xs, ys, w0, 0, Rows, null, out none);
                    for (int i = 0; i < whole.Length; ++i)
                        Assert.Close(whole[i], mine[i], 1e-6, "weight " + i + " against one process on the whole batch");
                }
                barrier(world);
                Console.WriteLine("mpi rank {0}: data-parallel weights agree", rank);
                return 0;
            }
            catch (Exception e)
            {
                Console.WriteLine("FAIL  mpi rank {0}: {1}", rank, e);
                return 1;
            }
            finally
            {
                Function<FinalizeFn>(mpi, "MPI_Finalize")();
                Marshal.FreeHGlobal(commHolder);
            }
        }
    }
}
