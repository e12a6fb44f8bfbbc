//go:build ampx_mpi

// Command mpitest checks the Go binding's data-parallel training over MPI
// ranks. run_tests.sh builds it with -tags ampx_mpi and mpicc's flags (so
// the ampx package itself needs no MPI) and runs it under
//
//	mpirun -np 2 mpitest
//
// The program calls MPI_Init through cgo and hands ampx the address of a C
// variable holding MPI_COMM_WORLD. Each rank trains on its slice of every
// global batch from its own random parameters; after every step all ranks'
// parameters must be bitwise identical (rank 0's were broadcast) and close
// to one process training on the whole batch without the wrapper, which
// every rank also runs. Gradient accumulation with sync off must equal one
// backward over the slice, and ranks whose parameters differ must all fail
// (none hangs). Prints one line per failed check and a summary on rank 0;
// exits 1 if any rank failed a check.
package main

/*
#include <stdlib.h>
#include <string.h>
#include <mpi.h>

static MPI_Comm world;

static int mpi_start(void) {
  if (MPI_Init(NULL, NULL) != MPI_SUCCESS) return 0;
  world = MPI_COMM_WORLD;
  return 1;
}
static void *world_comm(void) { return &world; }
static int world_rank(void) { int r = -1; MPI_Comm_rank(world, &r); return r; }
static int world_size(void) { int s = 0; MPI_Comm_size(world, &s); return s; }

// 1 when data (bytes long) equals rank 0's on every rank.
static int same_on_every_rank(const void *data, int bytes) {
  void *root = malloc(bytes > 0 ? bytes : 1);
  memcpy(root, data, bytes);
  MPI_Bcast(root, bytes, MPI_BYTE, 0, world);
  int same = memcmp(root, data, bytes) == 0, all = 0;
  free(root);
  MPI_Allreduce(&same, &all, 1, MPI_INT, MPI_MIN, world);
  return all;
}
static int sum_over_ranks(int value) {
  int total = 0;
  MPI_Allreduce(&value, &total, 1, MPI_INT, MPI_SUM, world);
  return total;
}
static void mpi_end(void) { MPI_Finalize(); }
static void mpi_abort(void) { MPI_Abort(world, 1); }
*/
import "C"

import (
	"errors"
	"fmt"
	"math"
	"math/rand"
	"os"
	"runtime/debug"
	"strings"
	"unsafe"

	"ampx"
)

const in, hidden, out, batchRows = 8, 16, 4, 32

var (
	rank, size int
	failed     int
	passed     int
)

func check(condition bool, format string, args ...any) {
	if condition {
		passed++
		return
	}
	failed++
	fmt.Printf("rank %d: FAILED: %s\n", rank, fmt.Sprintf(format, args...))
}

// must ends the whole job on an error no check expects: the other ranks
// would otherwise wait for this one in their next collective.
func must[T any](v T, err error) T {
	if err != nil {
		fmt.Fprintf(os.Stderr, "rank %d: %v\n%s", rank, err, debug.Stack())
		C.mpi_abort()
	}
	return v
}

func ok(err error) { must(0, err) }

func sameOnEveryRank(data []byte) bool {
	if len(data) == 0 {
		return C.same_on_every_rank(nil, 0) != 0
	}
	return C.same_on_every_rank(unsafe.Pointer(&data[0]), C.int(len(data))) != 0
}

// batch is global batch step: inputs and targets, the same on every rank.
func batch(step int) (x, y []float32) {
	r := rand.New(rand.NewSource(int64(1000 + step)))
	x, y = make([]float32, batchRows*in), make([]float32, batchRows*out)
	for i := range x {
		x[i] = float32(r.Float64()*2 - 1)
	}
	for i := 0; i < batchRows; i++ {
		for j := 0; j < out; j++ {
			y[i*out+j] = float32(math.Sin(float64(x[i*in+j] + 2*x[i*in+4+j])))
		}
	}
	return x, y
}

// trainer is a two-layer network with a scaler; "autocast": f16 autocast
// and AdamW, "f32": SGD with momentum and no autocast. With a communicator
// its gradients are reduced by a DataParallel and it trains on this rank's
// slice of each batch.
type trainer struct {
	ctx      *ampx.Context
	params   []*ampx.Tensor
	opt      *ampx.Optimizer
	autocast *ampx.Autocast
	scaler   *ampx.Scaler
	comm     *ampx.Comm
	dp       *ampx.DataParallel
}

func newTrainer(mode string, seed int64, distributed bool, options *ampx.DataParallelOptions) *trainer {
	ctx := must(ampx.NewContext(&ampx.ContextOptions{DeviceType: ampx.DeviceCPU, NumThreads: 1}))
	r := rand.New(rand.NewSource(seed))
	param := func(bound float64, shape ...int64) *ampx.Tensor {
		n := int64(1)
		for _, d := range shape {
			n *= d
		}
		v := make([]float32, n)
		for i := range v {
			v[i] = float32((r.Float64()*2 - 1) * bound)
		}
		p := must(ampx.FromSlice(ctx, v, shape...))
		ok(p.SetRequiresGrad(true))
		return p
	}
	t := &trainer{ctx: ctx}
	t.params = []*ampx.Tensor{param(0.35, hidden, in), param(0.35, hidden), param(0.25, out, hidden), param(0.25, out)}
	if mode == "autocast" {
		o := ampx.DefaultAdamWOptions()
		o.LR = 1e-2
		t.opt = must(ampx.NewAdam(ctx, t.params, &o))
	} else {
		o := ampx.DefaultSGDOptions()
		o.LR, o.Momentum = 0.05, 0.9
		t.opt = must(ampx.NewSGD(ctx, t.params, &o))
	}
	ao := ampx.DefaultAutocastOptions()
	ao.Enabled = mode == "autocast"
	t.autocast = must(ampx.NewAutocast(ctx, &ao))
	so := ampx.DefaultScalerOptions()
	so.InitScale, so.GrowthInterval = 1024, 10
	t.scaler = must(ampx.NewScaler(ctx, &so))
	if distributed {
		t.comm = must(ampx.CommFromMPI(ctx, C.world_comm()))
		t.dp = must(ampx.NewDataParallel(t.comm, t.opt, options))
	}
	return t
}

// rows is this trainer's part of a batch: first row and row count.
func (t *trainer) rows() (int, int) {
	if t.dp == nil {
		return 0, batchRows
	}
	n := batchRows / size
	return rank * n, n
}

func (t *trainer) backward(step, first, rows int, reduction ampx.Reduction) {
	x, y := batch(step)
	ok(t.ctx.PushScope())
	ok(t.autocast.Enter())
	bx := must(ampx.FromSlice(t.ctx, x[first*in:(first+rows)*in], int64(rows), in))
	by := must(ampx.FromSlice(t.ctx, y[first*out:(first+rows)*out], int64(rows), out))
	h := must(ampx.Linear(bx, t.params[0], t.params[1], ampx.ActivationReLU))
	o := must(ampx.Linear(h, t.params[2], t.params[3], ampx.ActivationNone))
	loss := must(ampx.MSELoss(o, by, reduction))
	ok(t.autocast.Exit())
	ok(loss.Backward(t.scaler))
	ok(t.ctx.PopScope())
	bx.Close()
	by.Close()
}

func (t *trainer) update() {
	ok(t.scaler.Unscale(t.opt))
	ok(t.opt.ClipGradNorm(1.0, 2.0, false))
	ok(t.scaler.Step(t.opt))
	ok(t.scaler.Update())
}

func (t *trainer) trainStep(step int) {
	ok(t.opt.ZeroGrad())
	first, rows := t.rows()
	t.backward(step, first, rows, ampx.ReductionMean)
	if t.dp != nil {
		ok(t.dp.Reduce()) // reduced by the backward already: does nothing
	}
	t.update()
}

func (t *trainer) paramBytes() []byte {
	var out []byte
	for _, p := range t.params {
		b := make([]byte, must(p.NBytes()))
		ok(p.ToHost(b))
		out = append(out, b...)
	}
	return out
}

// close is collective for a distributed trainer (pending reductions
// complete): every rank closes here.
func (t *trainer) close() {
	t.dp.Close()
	t.comm.Close()
	t.autocast.Close()
	t.scaler.Close()
	t.opt.Close()
	for _, p := range t.params {
		p.Close()
	}
	t.ctx.Close()
}

// relativeDifference is max |a - b| over max |b|, over every parameter.
func relativeDifference(a, b *trainer) float64 {
	diff, scale := 0.0, 0.0
	for i := range a.params {
		x, y := must(ampx.ToSlice[float32](a.params[i])), must(ampx.ToSlice[float32](b.params[i]))
		for j := range x {
			diff = math.Max(diff, math.Abs(float64(x[j])-float64(y[j])))
			scale = math.Max(scale, math.Abs(float64(y[j])))
		}
	}
	return diff / scale
}

func againstOneProcess(mode string, tolerance float64, options *ampx.DataParallelOptions) {
	what := mode
	if options != nil {
		what = fmt.Sprintf("%s %+v", mode, *options)
	}
	ranks := newTrainer(mode, int64(7+rank), true, options)
	single := newTrainer(mode, 7, false, nil) // rank 0's initial parameters, the whole batch
	check(sameOnEveryRank(ranks.paramBytes()), "%s: rank 0's parameters broadcast", what)
	const steps = 6
	identical := true
	for step := 0; step < steps; step++ {
		ranks.trainStep(step)
		single.trainStep(step)
		identical = sameOnEveryRank(ranks.paramBytes()) && identical
	}
	check(identical, "%s: parameters bitwise identical on every rank after every step", what)
	check(must(ranks.scaler.Scale()) == must(single.scaler.Scale()), "%s: the same scale", what)
	difference := relativeDifference(ranks, single)
	check(difference < tolerance, "%s: %.2e from one process (want < %g)", what, difference, tolerance)
	stats := must(ranks.dp.Stats())
	check(stats.Rank == rank && stats.WorldSize == size && stats.Reductions == steps && stats.BucketCount > 0,
		"%s: stats %+v", what, stats)
	if options != nil && options.ZeroStage == 1 {
		check(stats.ShardElements < int64(hidden*in+hidden+out*hidden+out),
			"%s: this rank steps its part only: %+v", what, stats)
	}
	if rank == 0 {
		fmt.Printf("%s: %d ranks vs one process after %d steps: max relative difference %.2e\n",
			what, size, steps, difference)
	}
	ranks.close()
	single.close()
}

// accumulation: two micro-batches, the first with sync off, against the
// slice in one backward; summed losses, so the gradients add up.
func accumulation() {
	accumulating, whole := newTrainer("f32", 5, true, nil), newTrainer("f32", 5, true, nil)
	first, rows := accumulating.rows()
	launched := -1
	for step := 0; step < 4; step++ {
		ok(accumulating.opt.ZeroGrad())
		ok(accumulating.dp.SetSync(false))
		accumulating.backward(step, first, rows/2, ampx.ReductionSum)
		launched = must(accumulating.dp.Stats()).BucketsLaunched
		err := accumulating.scaler.Unscale(accumulating.opt)
		check(errors.Is(err, ampx.ErrOrder), "sync off: reading the gradients refused: %v", err)
		ok(accumulating.dp.SetSync(true))
		accumulating.backward(step, first+rows/2, rows-rows/2, ampx.ReductionSum)
		accumulating.update()
		ok(whole.opt.ZeroGrad())
		whole.backward(step, first, rows, ampx.ReductionSum)
		whole.update()
	}
	check(launched == 0, "sync off: nothing sent (%d buckets launched)", launched)
	check(must(accumulating.dp.Stats()).Reductions == 4, "sync off: one reduction per step")
	check(sameOnEveryRank(accumulating.paramBytes()), "sync off: bitwise identical")
	difference := relativeDifference(accumulating, whole)
	check(difference < 1e-5, "sync off: %.2e from one backward over the slice", difference)
	accumulating.close()
	whole.close()
}

// mismatchedParameters: ranks whose parameters differ all fail, none
// hangs, and the message names the first difference.
func mismatchedParameters() {
	ctx := must(ampx.NewContext(&ampx.ContextOptions{DeviceType: ampx.DeviceCPU, NumThreads: 1}))
	defer ctx.Close()
	comm := must(ampx.CommFromMPI(ctx, C.world_comm()))
	r, s := must2(comm.Rank())
	check(r == rank && s == size, "Comm.Rank %d of %d", r, s)
	last := size - 1
	shape := []int64{4, 3}
	if rank == last {
		shape = []int64{3, 4}
	}
	a := must(ctx.Zeros(ampx.F32, shape...))
	b := must(ctx.Zeros(ampx.F32, 4))
	ok(a.SetRequiresGrad(true))
	ok(b.SetRequiresGrad(true))
	opt := must(ampx.NewSGD(ctx, []*ampx.Tensor{b, a}, nil))
	_, err := ampx.NewDataParallel(comm, opt, nil)
	want := fmt.Sprintf("parameter 1 is f32[3, 4] on rank %d but f32[4, 3] on rank 0", last)
	check(errors.Is(err, ampx.ErrInvalidArgument) && err != nil && strings.Contains(err.Error(), want),
		"mismatch reported: %v", err)
	opt2 := must(ampx.NewSGD(ctx, []*ampx.Tensor{b}, nil))
	dp := must(ampx.NewDataParallel(comm, opt2, nil)) // the communicator still works
	dp.Close()
	opt.Close()
	opt2.Close()
	comm.Close()
}

// fp8AmaxOverRanks: a recipe attached to the wrapper takes the MAX of the
// ranks' step amaxes (rank r quantizes a tensor of amax 2 (r + 1)), so
// every rank's scale is 448 / (2 size) (delayed scaling, margin 0).
func fp8AmaxOverRanks() {
	t := newTrainer("f32", 3, true, nil)
	defer t.close()
	opts := ampx.DefaultFP8RecipeOptions()
	opts.AmaxHistoryLen = 2
	recipe := must(ampx.NewFP8Recipe(t.ctx, &opts))
	defer recipe.Close()
	slot := must(recipe.AddTensor(ampx.FP8Forward, "x"))
	ok(t.dp.SetFP8Recipe(recipe))
	x := must(ampx.FromSlice(t.ctx, []float32{0.5, -2 * float32(rank+1)}, 2))
	must(recipe.Quantized(slot, x)).Close()
	ok(recipe.Update()) // no unscale came first: the update reduces itself
	info := must(recipe.Slot(slot))
	want := float32(448) / float32(2*size)
	check(info.Scale == want, "fp8: scale %g, want 448 / (2 * %d)", info.Scale, size)
	check(len(info.History) == 2 && info.History[0] == 0 && info.History[1] == float32(2*size),
		"fp8: history %v", info.History)
	check(sameOnEveryRank([]byte(fmt.Sprint(info.Scale))), "fp8: equal scales on every rank")
	ok(t.dp.SetFP8Recipe(nil))
}

func must2(a, b int, err error) (int, int) {
	ok(err)
	return a, b
}

func main() {
	if C.mpi_start() == 0 {
		fmt.Fprintln(os.Stderr, "mpitest: MPI_Init failed")
		os.Exit(2)
	}
	rank, size = int(C.world_rank()), int(C.world_size())
	if batchRows%size != 0 {
		if rank == 0 {
			fmt.Fprintf(os.Stderr, "mpitest: %d ranks do not divide the batch of %d rows\n", size, batchRows)
		}
		C.mpi_end()
		os.Exit(2)
	}
	defer func() {
		if r := recover(); r != nil {
			fmt.Fprintf(os.Stderr, "rank %d: panic: %v\n%s", rank, r, debug.Stack())
			C.mpi_abort()
		}
	}()
	againstOneProcess("f32", 1e-5, nil)
	againstOneProcess("autocast", 1e-3, &ampx.DataParallelOptions{BucketBytes: 256, FirstBucketBytes: 64,
		Average: true, Overlap: true})
	zero := ampx.DefaultDataParallelOptions()
	zero.ZeroStage, zero.ReduceInFP32 = 1, true
	againstOneProcess("autocast", 1e-3, &zero)
	accumulation()
	mismatchedParameters()
	fp8AmaxOverRanks()
	failedAll := int(C.sum_over_ranks(C.int(failed)))
	total := int(C.sum_over_ranks(C.int(failed + passed)))
	if rank == 0 {
		fmt.Printf("mpitest (%d ranks): %d passed, %d failed\n", size, total-failedAll, failedAll)
	}
	C.mpi_end()
	if failedAll > 0 {
		os.Exit(1)
	}
}
