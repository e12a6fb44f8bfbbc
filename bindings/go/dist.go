package ampx

// Data-parallel training (section 14 of ampx.h): one process per device,
// every process runs the same loop on its own part of each batch, and a
// DataParallel reduces the gradients over the ranks during Backward. ampx
// moves no bytes itself: it uses the host's MPI (CPU contexts) or NCCL
// (CUDA contexts), loaded at run time, so this package needs neither to
// build.
//
// Collective calls -- CommFromMPI, CommInitNCCL, NewDataParallel, every call
// that completes a reduction (Backward, Scaler.Unscale and Step, clipping,
// Optimizer.Step, DataParallel.Reduce) and DataParallel.Close -- must be
// made by every rank, in the same order.

// #include <stdlib.h>
// #include <ampx/ampx.h>
import "C"

import "unsafe"

// NCCLUniqueIDBytes is the size of an NCCL unique id (NCCLUniqueID).
const NCCLUniqueIDBytes = C.AMPX_NCCL_UNIQUE_ID_BYTES

// Comm is a group of ranks bound to one context (ampx_comm).
type Comm struct {
	ref[C.ampx_comm]
	ctx *Context
}

func newComm(ctx *Context, create func(out *C.ampx_comm) C.ampx_status) (*Comm, error) {
	var h C.ampx_comm
	if err := call(func() C.ampx_status { return create(&h) }, ctx); err != nil {
		return nil, err
	}
	return own(&Comm{ref[C.ampx_comm]{h}, ctx}, (*Comm).Close), nil
}

// CommFromMPI makes a communicator for a CPU context from the host's MPI
// communicator (ampx_comm_from_mpi): mpiComm points to an MPI_Comm, e.g.
// the address of a C variable holding MPI_COMM_WORLD (with Open MPI, whose
// MPI_COMM_WORLD is the address of ompi_mpi_comm_world, any MPI_Comm
// variable's address). ampx duplicates it; the host keeps its own. MPI must
// be initialised (MPI_Init) by the host, with the MPI libampx_mpi.so (next
// to libampx) was built against. Collective over the MPI communicator.
// Errors: ErrNotSupported for a CUDA context or where the plugin or libmpi
// cannot be loaded; ErrInvalidArgument for nil or MPI not initialised.
func CommFromMPI(ctx *Context, mpiComm unsafe.Pointer) (*Comm, error) {
	h := ctx.handle()
	return newComm(ctx, func(out *C.ampx_comm) C.ampx_status { return C.ampx_comm_from_mpi(h, mpiComm, out) })
}

// CommFromNCCL makes a communicator for a CUDA context from the host's
// ncclComm_t (ampx_comm_from_nccl), on the context's device. The host keeps
// owning it and destroys it after closing the Comm, unless ampx aborted it
// after a timeout (SetTimeout).
func CommFromNCCL(ctx *Context, ncclComm unsafe.Pointer) (*Comm, error) {
	h := ctx.handle()
	return newComm(ctx, func(out *C.ampx_comm) C.ampx_status { return C.ampx_comm_from_nccl(h, ncclComm, out) })
}

// NCCLUniqueID makes a new NCCL unique id on rank 0 (ampx_nccl_unique_id),
// for hosts without MPI: send its bytes to every other rank by any means,
// then every rank calls CommInitNCCL. ErrNotSupported where NCCL cannot be
// loaded.
func NCCLUniqueID() ([]byte, error) {
	id := make([]byte, NCCLUniqueIDBytes)
	ptr, bytes := sliceBytes(id)
	if err := call(func() C.ampx_status { return C.ampx_nccl_unique_id(ptr, bytes) }); err != nil {
		return nil, err
	}
	return id, nil
}

// CommInitNCCL makes an NCCL communicator of worldSize ranks, this process
// being rank, from the id rank 0 made with NCCLUniqueID
// (ampx_comm_init_nccl); ampx owns the NCCL communicator. Collective.
func CommInitNCCL(ctx *Context, id []byte, worldSize, rank int) (*Comm, error) {
	h := ctx.handle()
	ptr, bytes := sliceBytes(id)
	return newComm(ctx, func(out *C.ampx_comm) C.ampx_status {
		return C.ampx_comm_init_nccl(h, ptr, bytes, C.int32_t(worldSize), C.int32_t(rank), out)
	})
}

// Close releases the communicator; it lives on while a DataParallel uses
// it. Closing again does nothing.
func (c *Comm) Close() {
	closeRef(c, func(h C.ampx_comm) { C.ampx_comm_release(h) })
}

func (c *Comm) handle() C.ampx_comm { return handleOf[C.ampx_comm](c) }

// Rank returns this process's rank and the number of ranks.
func (c *Comm) Rank() (rank, size int, err error) {
	var r, s C.int32_t
	h := c.handle()
	err = call(func() C.ampx_status { return C.ampx_comm_rank(h, &r, &s) }, c)
	return int(r), int(s), err
}

// SetTimeout sets the longest a host wait on the communicator's NCCL
// collectives may take, in seconds (finite, > 0; default 600), before ampx
// aborts the communicator and the call fails with ErrDevice. MPI waits
// cannot be interrupted: there the launcher ends a job whose rank died.
func (c *Comm) SetTimeout(seconds float64) error {
	h := c.handle()
	return call(func() C.ampx_status { return C.ampx_comm_set_timeout(h, C.double(seconds)) }, c)
}

// DataParallelOptions configures NewDataParallel. Start from
// DefaultDataParallelOptions.
type DataParallelOptions struct {
	BucketBytes      uint64 // gradient bytes per bucket (25 MiB, DDP's bucket_cap_mb)
	FirstBucketBytes uint64 // the first bucket of each dtype, reduced first (1 MiB)
	Average          bool   // gradients averaged over the ranks (true) or summed
	ReduceInFP32     bool   // F16/BF16 gradients reduced in fp32 and rounded back once
	Overlap          bool   // buckets reduced while backward runs (true) or all after it
	// ZeroStage 1 shards the optimizer state over the ranks (ZeRO stage 1;
	// see ampx_data_parallel_options); 0 keeps it whole on every rank.
	ZeroStage int32
}

// DefaultDataParallelOptions returns the library's defaults.
func DefaultDataParallelOptions() DataParallelOptions {
	c := C.ampx_data_parallel_options_default()
	return DataParallelOptions{uint64(c.bucket_bytes), uint64(c.first_bucket_bytes),
		c.average != 0, c.reduce_in_fp32 != 0, c.overlap != 0, int32(c.zero_stage)}
}

func (o *DataParallelOptions) toC() *C.ampx_data_parallel_options {
	if o == nil {
		return nil
	}
	c := C.ampx_data_parallel_options_default()
	c.bucket_bytes, c.first_bucket_bytes = C.size_t(o.BucketBytes), C.size_t(o.FirstBucketBytes)
	c.average, c.reduce_in_fp32, c.overlap = cbool(o.Average), cbool(o.ReduceInFP32), cbool(o.Overlap)
	c.zero_stage = C.int32_t(o.ZeroStage)
	return &c
}

// DataParallel is an optimizer whose gradients are reduced over a
// communicator's ranks (ampx_data_parallel; torch's DistributedDataParallel).
// Every parameter's gradient becomes a view of a flat bucket: keep those
// gradients attached (Optimizer.ZeroGrad zeroes them in place; SetGrad on a
// parameter makes the next Backward fail with ErrOrder). Backward reduces
// the buckets as their gradients become final; each Scaler.Unscale reduces
// found-inf too, so every rank skips the same steps and the parameters
// stay bitwise identical on every rank.
type DataParallel struct {
	ref[C.ampx_data_parallel]
	comm *Comm
	opt  *Optimizer
}

// NewDataParallel wraps opt for data-parallel training over comm
// (ampx_data_parallel_create); opts nil means the defaults. Collective:
// every rank passes an optimizer with the same parameters (in order, with
// equal dtypes and shapes; a mismatch fails on every rank, naming the first
// difference). Rank 0's parameters, fp32 masters and moments are then
// broadcast to every rank.
func NewDataParallel(comm *Comm, opt *Optimizer, opts *DataParallelOptions) (*DataParallel, error) {
	var h C.ampx_data_parallel
	c, o, options := comm.handle(), opt.handle(), opts.toC()
	if err := call(func() C.ampx_status { return C.ampx_data_parallel_create(c, o, options, &h) }, comm, opt); err != nil {
		return nil, err
	}
	return own(&DataParallel{ref[C.ampx_data_parallel]{h}, comm, opt}, (*DataParallel).Close), nil
}

// Close releases the wrapper (collective: pending reductions are completed
// first); the optimizer then reads its gradients as they are, and the
// gradient views stay attached. Closing again does nothing.
func (d *DataParallel) Close() {
	closeRef(d, func(h C.ampx_data_parallel) { C.ampx_data_parallel_release(h) })
}

func (d *DataParallel) handle() C.ampx_data_parallel { return handleOf[C.ampx_data_parallel](d) }

// SetSync turns gradient reduction off (false: backward passes only
// accumulate, as DDP's no_sync) or back on before the last micro-batch's
// backward, whose pass reduces the sum. Reading the gradients for an update
// while it is off is refused with ErrOrder.
func (d *DataParallel) SetSync(sync bool) error {
	h := d.handle()
	return call(func() C.ampx_status { return C.ampx_data_parallel_set_sync(h, cbool(sync)) }, d)
}

// Reduce completes the reduction now (ampx_data_parallel_reduce), for
// engines that report gradients themselves with Tensor.GradReady. Does
// nothing when the gradients are reduced already. Collective.
func (d *DataParallel) Reduce() error {
	h := d.handle()
	return call(func() C.ampx_status { return C.ampx_data_parallel_reduce(h) }, d)
}

// DataParallelStats is what DataParallel.Stats reports.
type DataParallelStats struct {
	Rank, WorldSize     int
	BucketCount         int
	BucketBytes         uint64 // gradient buckets and fp32 reduction buffers
	BucketsLaunched     int    // of the iteration under way, so far
	LastLaunchedEarly   int    // of the last reduction: buckets sent during backward
	Reductions          int64  // reductions completed
	OptimizerStateBytes uint64 // this rank's fp32 masters and moments
	ShardElements       int64  // parameter elements this rank's optimizer updates
}

// Stats reads the wrapper's statistics (no sync).
func (d *DataParallel) Stats() (DataParallelStats, error) {
	s := C.ampx_data_parallel_stats{struct_size: C.sizeof_ampx_data_parallel_stats}
	h := d.handle()
	err := call(func() C.ampx_status { return C.ampx_data_parallel_get_stats(h, &s) }, d)
	return DataParallelStats{int(s.rank), int(s.world_size), int(s.bucket_count),
		uint64(s.bucket_bytes), int(s.buckets_launched), int(s.last_launched_early),
		int64(s.reductions), uint64(s.optimizer_state_bytes), int64(s.shard_elements)}, err
}
