package ampx

// #include <ampx/ampx.h>
import "C"

import "unsafe"

// ContextOptions configures NewContext. Start from DefaultContextOptions.
// The C allocator hooks are not exposed: Go code cannot hand ampx memory
// allocated by the Go runtime to keep.
type ContextOptions struct {
	DeviceType  DeviceType
	DeviceIndex int32 // CUDA device ordinal
	NumThreads  int32 // CPU worker threads; 0: one per hardware thread
	Seed        uint64
	// CUDAStream is a cudaStream_t to adopt (it must outlive the context);
	// nil: the context creates its own. Must be nil for the CPU.
	CUDAStream unsafe.Pointer
}

// DefaultContextOptions returns the library's defaults (a CPU context).
func DefaultContextOptions() ContextOptions {
	c := C.ampx_context_options_default()
	return ContextOptions{
		DeviceType:  DeviceType(c.device_type),
		DeviceIndex: int32(c.device_index),
		NumThreads:  int32(c.num_threads),
		Seed:        uint64(c.seed),
		CUDAStream:  c.cuda_stream,
	}
}

func (o *ContextOptions) toC() *C.ampx_context_options {
	if o == nil {
		return nil
	}
	c := C.ampx_context_options_default()
	c.device_type = C.ampx_device_type(o.DeviceType)
	c.device_index = C.int32_t(o.DeviceIndex)
	c.num_threads = C.int32_t(o.NumThreads)
	c.seed = C.uint64_t(o.Seed)
	c.cuda_stream = o.CUDAStream
	return &c
}

// Context owns a device, an allocator and memory statistics; every tensor
// belongs to one. Use it from one goroutine at a time.
type Context struct {
	ref[C.ampx_context]
	st *contextState
}

// contextState is what every Go value of one C context shares (Retain
// makes more than one), so that they agree on the open scopes.
type contextState struct {
	// raw is the C context, borrowed: callbacks use it, which ampx runs only
	// while the program holds a reference.
	raw C.ampx_context
	// scopes holds, per open scope, the Go tensors borrowed from it; it
	// includes the scopes ampx opens around a running callback.
	scopes [][]*Tensor
	// floor is the number of scopes a running callback found open: it may
	// not pop them.
	floor int
	// failure is what the latest callback that failed returned or panicked
	// with, until the Go call that ran it returns (settle).
	failure *callbackFailure
}

// NewContext creates a context; opts nil means the defaults (a CPU context).
func NewContext(opts *ContextOptions) (*Context, error) {
	var h C.ampx_context
	c := opts.toC()
	if err := call(func() C.ampx_status { return C.ampx_context_create(c, &h) }); err != nil {
		return nil, err
	}
	return contextValue(h, &contextState{raw: h}), nil
}

// contextValue wraps one reference to a C context; st is what the Go
// values of that context share.
func contextValue(h C.ampx_context, st *contextState) *Context {
	return own(&Context{ref[C.ampx_context]{h}, st}, (*Context).Close)
}

// Retain returns a new Go value holding its own reference to the same
// context (ampx_context_retain), for a part of a program that closes what
// it holds independently of the rest. Both values share the scopes and the
// grad-ready hook; the C context lives until every reference (and every
// tensor) is released.
func (c *Context) Retain() (*Context, error) {
	h := c.handle()
	if err := call(func() C.ampx_status { return C.ampx_context_retain(h) }, c); err != nil {
		return nil, err
	}
	return contextValue(h, c.st), nil
}

// Close releases this reference to the context. Its tensors keep the C
// context alive until they are released too; once the program's last
// reference is gone, the grad-ready hook is released and ops are no longer
// recorded. Closing again does nothing.
func (c *Context) Close() {
	closeRef(c, func(h C.ampx_context) { C.ampx_context_release(h) })
}

func (c *Context) handle() C.ampx_context { return handleOf[C.ampx_context](c) }

// Device returns the context's device kind and index.
func (c *Context) Device() (DeviceType, int, error) {
	var kind C.ampx_device_type
	var index C.int32_t
	err := call(func() C.ampx_status { return C.ampx_context_device(c.handle(), &kind, &index) }, c)
	return DeviceType(kind), int(index), err
}

// Synchronize waits for all work enqueued on the context's device.
func (c *Context) Synchronize() error {
	return call(func() C.ampx_status { return C.ampx_context_synchronize(c.handle()) }, c)
}

// MemoryStats are a context's tensor-memory statistics, in bytes.
type MemoryStats struct {
	CurrentBytes    uint64 // held by live tensors
	PeakBytes       uint64 // maximum of CurrentBytes since creation or ResetPeakMemory
	AllocationCount uint64
	ReservedBytes   uint64 // held by the allocator, cache included
}

// MemoryStats reads the context's memory statistics.
func (c *Context) MemoryStats() (MemoryStats, error) {
	s := C.ampx_memory_stats{struct_size: C.sizeof_ampx_memory_stats}
	err := call(func() C.ampx_status { return C.ampx_memory_stats_get(c.handle(), &s) }, c)
	return MemoryStats{uint64(s.current_bytes), uint64(s.peak_bytes),
		uint64(s.allocation_count), uint64(s.reserved_bytes)}, err
}

// ResetPeakMemory sets the peak statistic to the current one.
func (c *Context) ResetPeakMemory() error {
	return call(func() C.ampx_status { return C.ampx_memory_reset_peak(c.handle()) }, c)
}

// SetTF32 lets f32 matrix products and convolutions run in TF32 on CUDA
// (ampx_context_set_tf32; the CPU has none) and returns the previous setting.
func (c *Context) SetTF32(allowed bool) (previous bool, err error) {
	return readFlag(func(prev *C.int32_t) C.ampx_status {
		return C.ampx_context_set_tf32(c.handle(), cbool(allowed), prev)
	}, c)
}

// SetGradEnabled turns recording of ops for backward on or off and returns
// the previous setting.
func (c *Context) SetGradEnabled(enabled bool) (previous bool, err error) {
	return readFlag(func(prev *C.int32_t) C.ampx_status {
		return C.ampx_set_grad_enabled(c.handle(), cbool(enabled), prev)
	}, c)
}

// PushScope opens a scope: until the matching PopScope, tensors returned by
// ops on this context are borrowed from it.
func (c *Context) PushScope() error {
	if err := call(func() C.ampx_status { return C.ampx_scope_push(c.handle()) }, c); err != nil {
		return err
	}
	c.st.scopes = append(c.st.scopes, nil)
	return nil
}

// PopScope closes the innermost scope, releasing the tensors ops made in it
// and marking their Go values closed (Retain a tensor to keep it). A
// callback (a checkpointed segment, a grad-ready hook) may pop only the
// scopes it pushed: popping one it found open is refused with ErrOrder.
func (c *Context) PopScope() error {
	if c != nil && c.h != nil && c.st.floor > 0 && len(c.st.scopes) <= c.st.floor {
		return &Error{Status: ErrOrder, Message: "ampx.Context.PopScope: a callback may pop only " +
			"the scopes it pushed itself"}
	}
	if err := call(func() C.ampx_status { return C.ampx_scope_pop(c.handle()) }, c); err != nil {
		return err
	}
	c.st.popped()
	return nil
}

// popped forgets the innermost scope, which ampx has just closed, and marks
// the Go values of the tensors it owned closed.
func (st *contextState) popped() {
	last := len(st.scopes) - 1
	if last < 0 {
		return
	}
	for _, t := range st.scopes[last] {
		t.h = nil
	}
	st.scopes = st.scopes[:last]
}

// ScopeDepth returns the number of scopes open on the context
// (ampx_scope_depth), the scopes ampx opens around a running checkpointed
// segment included.
func (c *Context) ScopeDepth() (int, error) {
	return read[int](func(depth *C.int32_t) C.ampx_status { return C.ampx_scope_depth(c.handle(), depth) }, c)
}

// Empty creates a tensor with uninitialised contents.
func (c *Context) Empty(dtype DType, shape ...int64) (*Tensor, error) {
	var h C.ampx_tensor
	ndim, dims := shapeArg(shape)
	err := call(func() C.ampx_status {
		return C.ampx_tensor_empty(c.handle(), C.ampx_dtype(dtype), ndim, dims, &h)
	}, c)
	return c.owned(h, err)
}

// Zeros creates a tensor filled with zeros.
func (c *Context) Zeros(dtype DType, shape ...int64) (*Tensor, error) {
	var h C.ampx_tensor
	ndim, dims := shapeArg(shape)
	err := call(func() C.ampx_status {
		return C.ampx_tensor_zeros(c.handle(), C.ampx_dtype(dtype), ndim, dims, &h)
	}, c)
	return c.owned(h, err)
}

// FromHost creates a tensor holding a copy of data, the raw little-endian
// bytes of its elements (len(data) must be numel * dtype.Size()).
func (c *Context) FromHost(dtype DType, shape []int64, data []byte) (*Tensor, error) {
	return fromHost(c, dtype, shape, data)
}

// FromSlice creates a tensor of shape holding a copy of data, whose
// element type gives the dtype (float32: F32, int32: I32, int64: I64).
func FromSlice[T Element](c *Context, data []T, shape ...int64) (*Tensor, error) {
	return fromHost(c, dtypeOf[T](), shape, data)
}

func fromHost[T any](c *Context, dtype DType, shape []int64, data []T) (*Tensor, error) {
	var h C.ampx_tensor
	ndim, dims := shapeArg(shape)
	ptr, bytes := sliceBytes(data)
	err := call(func() C.ampx_status {
		return C.ampx_tensor_from_host(c.handle(), C.ampx_dtype(dtype), ndim, dims, ptr, bytes, &h)
	}, c)
	return c.owned(h, err)
}

// Wrap makes a tensor of the memory at data (bytes long) without copying.
// The memory must not be Go memory (cgo forbids C keeping Go pointers): use
// C allocations, mmap'ed memory or device memory. ampx never frees it; it
// must outlive every tensor that shares it (views such as Reshape's output
// included).
func (c *Context) Wrap(dtype DType, shape []int64, data unsafe.Pointer, bytes uintptr) (*Tensor, error) {
	var h C.ampx_tensor
	ndim, dims := shapeArg(shape)
	err := call(func() C.ampx_status {
		return C.ampx_tensor_wrap(c.handle(), C.ampx_dtype(dtype), ndim, dims, data,
			C.size_t(bytes), nil, nil, &h)
	}, c)
	return c.owned(h, err)
}

// FromDLPack imports a DLManagedTensor (a *C.DLManagedTensor from another
// library) without copying. On success ampx owns it and calls its deleter
// when done; on failure it stays the caller's.
func (c *Context) FromDLPack(managed unsafe.Pointer) (*Tensor, error) {
	var h C.ampx_tensor
	err := call(func() C.ampx_status {
		return C.ampx_tensor_from_dlpack(c.handle(), (*C.struct_DLManagedTensor)(managed), &h)
	}, c)
	return c.owned(h, err)
}

// owned wraps a tensor handle the caller owns (after a successful call).
func (c *Context) owned(h C.ampx_tensor, err error) (*Tensor, error) {
	if err != nil {
		return nil, err
	}
	return own(&Tensor{ref[C.ampx_tensor]{h}, c, false}, (*Tensor).Close), nil
}

// borrow wraps a tensor lent by a scope or a callback, which releases it.
func (c *Context) borrow(h C.ampx_tensor) *Tensor {
	return &Tensor{ref[C.ampx_tensor]{h}, c, true}
}

// results wraps the outputs of an op that makes several (see result).
func (c *Context) results(hs []C.ampx_tensor, err error) ([]*Tensor, error) {
	if err != nil {
		return nil, err
	}
	ts := make([]*Tensor, len(hs))
	for i, h := range hs {
		ts[i], _ = c.result(h, nil)
	}
	return ts, nil
}

// result wraps the output of an op: borrowed from the innermost scope when
// one is open, else owned.
func (c *Context) result(h C.ampx_tensor, err error) (*Tensor, error) {
	if err != nil || len(c.st.scopes) == 0 {
		return c.owned(h, err)
	}
	t := c.borrow(h)
	last := len(c.st.scopes) - 1
	c.st.scopes[last] = append(c.st.scopes[last], t)
	return t, nil
}
