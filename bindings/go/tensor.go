package ampx

// #include <stdlib.h>
// #include <ampx/ampx.h>
import "C"

import (
	"fmt"
	"unsafe"
)

// Tensor is a dense, contiguous, row-major array on its context's device.
type Tensor struct {
	ref[C.ampx_tensor]
	ctx    *Context
	scoped bool // borrowed from a scope of ctx: PopScope ends it, Close only forgets it
}

// Element is a Go type that has an ampx dtype.
type Element interface {
	float32 | int32 | int64
}

func dtypeOf[T Element]() DType {
	var zero T
	switch any(zero).(type) {
	case float32:
		return F32
	case int32:
		return I32
	default:
		return I64
	}
}

// Close releases the tensor (for a tensor borrowed from a scope it only
// forgets the handle: the scope releases it). Closing again does nothing.
func (t *Tensor) Close() {
	closeRef(t, func(h C.ampx_tensor) {
		if !t.scoped {
			C.ampx_tensor_release(h)
		}
	})
}

func (t *Tensor) handle() C.ampx_tensor { return handleOf[C.ampx_tensor](t) }

func (t *Tensor) context() *Context {
	if t == nil {
		return nil
	}
	return t.ctx
}

// Context returns the Go value of the context the tensor was made on
// (closed if the program closed that value).
func (t *Tensor) Context() *Context { return t.ctx }

// RetainContext returns a new reference to the tensor's C context
// (ampx_tensor_context, then ampx_context_retain), sharing the scopes of
// the *Context the tensor was made on; close it when done. It works while
// the program holds any reference to the context, also after the value
// Context returns was closed; ErrStaleHandle once the program closed them
// all.
func (t *Tensor) RetainContext() (*Context, error) {
	var h C.ampx_context
	th := t.handle()
	err := call(func() C.ampx_status {
		status := C.ampx_tensor_context(th, &h)
		if status == C.AMPX_OK {
			status = C.ampx_context_retain(h)
		}
		return status
	}, t)
	if err != nil {
		return nil, err
	}
	return contextValue(h, t.ctx.st), nil
}

// Retain returns a new owned reference to the same tensor, e.g. to keep a
// tensor made inside a scope after the scope is popped.
func (t *Tensor) Retain() (*Tensor, error) {
	h := t.handle()
	err := call(func() C.ampx_status { return C.ampx_tensor_retain(h) }, t)
	return t.context().owned(h, err)
}

// ToHost copies the contents into dst, which must be exactly NBytes long.
func (t *Tensor) ToHost(dst []byte) error { return toHost(t, dst) }

// CopyFromHost overwrites the contents with src (exactly NBytes long).
func (t *Tensor) CopyFromHost(src []byte) error { return copyFromHost(t, src) }

// ToSlice copies a tensor's elements into a new slice; T must match the
// tensor's dtype.
func ToSlice[T Element](t *Tensor) ([]T, error) {
	dtype, err := t.DType()
	if err != nil {
		return nil, err
	}
	if want := dtypeOf[T](); dtype != want {
		return nil, &Error{Status: ErrDType, Message: fmt.Sprintf("ampx.ToSlice: the tensor is %v, not %v", dtype, want)}
	}
	n, err := t.Numel()
	if err != nil {
		return nil, err
	}
	out := make([]T, n)
	return out, toHost(t, out)
}

// CopyFromSlice overwrites a tensor's contents with src (numel elements of
// the tensor's dtype).
func CopyFromSlice[T Element](t *Tensor, src []T) error { return copyFromHost(t, src) }

func toHost[T any](t *Tensor, dst []T) error {
	h := t.handle()
	ptr, bytes := sliceBytes(dst)
	return call(func() C.ampx_status { return C.ampx_tensor_to_host(h, ptr, bytes) }, t)
}

func copyFromHost[T any](t *Tensor, src []T) error {
	h := t.handle()
	ptr, bytes := sliceBytes(src)
	return call(func() C.ampx_status { return C.ampx_tensor_copy_from_host(h, ptr, bytes) }, t)
}

// CopyFrom sets t = src, converting the element type (same element count).
func (t *Tensor) CopyFrom(src *Tensor) error {
	dst, s := t.handle(), src.handle()
	return call(func() C.ampx_status { return C.ampx_tensor_copy(dst, s) }, t, src)
}

// Cast returns a new tensor holding t converted to dtype (torch's
// Tensor.to). When t requires grad it is the recorded ampx_cast, an op
// output like any other: with grad mode on its gradient comes back to t,
// cast to t's dtype. Otherwise the plain ampx_tensor_cast, owned by the caller.
func (t *Tensor) Cast(dtype DType) (*Tensor, error) {
	requires, err := t.RequiresGrad()
	if err != nil {
		return nil, err
	}
	h := t.handle()
	if requires {
		return unary(t, func(x C.ampx_tensor, out *C.ampx_tensor) C.ampx_status {
			return C.ampx_cast(x, C.ampx_dtype(dtype), out)
		})
	}
	var out C.ampx_tensor
	err = call(func() C.ampx_status { return C.ampx_tensor_cast(h, C.ampx_dtype(dtype), &out) }, t)
	return t.context().owned(out, err)
}

// Clone returns a copy of t in new memory with t's dtype, recorded as Cast.
func (t *Tensor) Clone() (*Tensor, error) {
	dtype, err := t.DType()
	if err != nil {
		return nil, err
	}
	return t.Cast(dtype)
}

// Fill sets every element to value (converted to the dtype).
func (t *Tensor) Fill(value float64) error {
	h := t.handle()
	return call(func() C.ampx_status { return C.ampx_tensor_fill(h, C.double(value)) }, t)
}

// SetName names the tensor for diagnostics ("" clears the name).
func (t *Tensor) SetName(name string) error {
	h := t.handle()
	cname := C.CString(name)
	defer C.free(unsafe.Pointer(cname))
	return call(func() C.ampx_status { return C.ampx_tensor_set_name(h, cname) }, t)
}

// Name returns the tensor's name ("" if none).
func (t *Tensor) Name() (string, error) {
	return readString(func(name **C.char) C.ampx_status { return C.ampx_tensor_name(t.handle(), name) }, t)
}

// DType returns the element type.
func (t *Tensor) DType() (DType, error) {
	return read[DType](func(d *C.ampx_dtype) C.ampx_status { return C.ampx_tensor_dtype(t.handle(), d) }, t)
}

// NDim returns the number of dimensions.
func (t *Tensor) NDim() (int, error) {
	return read[int](func(n *C.int32_t) C.ampx_status { return C.ampx_tensor_ndim(t.handle(), n) }, t)
}

// Shape returns the extents.
func (t *Tensor) Shape() ([]int64, error) {
	ndim, err := t.NDim()
	if err != nil {
		return nil, err
	}
	dims := make([]int64, ndim)
	capacity, ptr := shapeArg(dims)
	h := t.handle()
	err = call(func() C.ampx_status { return C.ampx_tensor_shape(h, ptr, capacity) }, t)
	return dims, err
}

// Numel returns the number of elements.
func (t *Tensor) Numel() (int64, error) {
	return read[int64](func(n *C.int64_t) C.ampx_status { return C.ampx_tensor_numel(t.handle(), n) }, t)
}

// NBytes returns the size of the contents in bytes.
func (t *Tensor) NBytes() (int, error) {
	return read[int](func(n *C.size_t) C.ampx_status { return C.ampx_tensor_nbytes(t.handle(), n) }, t)
}

// Data returns the address of the first element on the tensor's device,
// valid while the tensor lives (keep the *Tensor reachable while using it,
// e.g. with runtime.KeepAlive).
func (t *Tensor) Data() (unsafe.Pointer, error) {
	var p unsafe.Pointer
	h := t.handle()
	err := call(func() C.ampx_status { return C.ampx_tensor_data(h, &p) }, t)
	return p, err
}

// SetGrad attaches grad as t's gradient (nil detaches it). The tensor keeps
// its own reference: grad may be closed afterwards.
func (t *Tensor) SetGrad(grad *Tensor) error {
	h, g := t.handle(), grad.handle()
	return call(func() C.ampx_status { return C.ampx_tensor_set_grad(h, g) }, t, grad)
}

// Grad returns a new owned reference to t's gradient, or nil if it has none.
func (t *Tensor) Grad() (*Tensor, error) {
	var g C.ampx_tensor
	h := t.handle()
	err := call(func() C.ampx_status {
		status := C.ampx_tensor_grad(h, &g)
		if status == C.AMPX_OK && g != nil {
			status = C.ampx_tensor_retain(g)
		}
		return status
	}, t)
	if err != nil || g == nil {
		return nil, err
	}
	return t.ctx.owned(g, nil)
}

// ToDLPack exports the tensor as a *C.DLManagedTensor sharing its memory.
// The consumer calls its deleter once when done.
func (t *Tensor) ToDLPack() (unsafe.Pointer, error) {
	var out *C.struct_DLManagedTensor
	h := t.handle()
	err := call(func() C.ampx_status { return C.ampx_tensor_to_dlpack(h, &out) }, t)
	return unsafe.Pointer(out), err
}

// SetRequiresGrad marks a leaf tensor as needing a gradient (or not).
func (t *Tensor) SetRequiresGrad(requiresGrad bool) error {
	h := t.handle()
	return call(func() C.ampx_status { return C.ampx_tensor_set_requires_grad(h, cbool(requiresGrad)) }, t)
}

// RequiresGrad reports whether gradients flow to or through t.
func (t *Tensor) RequiresGrad() (bool, error) {
	return readFlag(func(r *C.int32_t) C.ampx_status { return C.ampx_tensor_requires_grad(t.handle(), r) }, t)
}

// Backward backpropagates from the one-element loss into the gradients of
// the leaves that require one. With a scaler the seed is its scale (the
// gradients come out scaled); scaler may be nil.
//
// Checkpointed segments run again and the grad-ready hook runs inside this
// call: an error one of them returns is the Cause of the returned *Error,
// and a panic in one is raised again here (see CallbackPanic).
func (t *Tensor) Backward(scaler *Scaler) error {
	h, s := t.handle(), scaler.handle()
	err := call(func() C.ampx_status { return C.ampx_backward(h, s) }, t, scaler)
	return t.context().settle(err)
}

// Same reports whether t and other are Go values of the same C tensor
// (e.g. the parameter a grad-ready hook is lent and the one the program
// made); false when either is nil or closed.
func (t *Tensor) Same(other *Tensor) bool {
	return t.handle() != nil && t.handle() == other.handle()
}

// View returns a new tensor of dtype and shape whose first element lies
// byteOffset bytes past t's first element, on t's memory (ampx_tensor_view):
// writes through either are seen by both, and the memory lives until t and
// every view are closed, in any order. The view must lie inside t's bytes,
// byteOffset be a multiple of dtype's size; any dtype may reinterpret t's
// bytes. A view is a leaf of its own: gradients do not flow between it and
// t. Views may be optimizer parameters and gradients (SetGrad), e.g. to lay
// many out in one flat buffer.
func (t *Tensor) View(byteOffset uintptr, dtype DType, shape ...int64) (*Tensor, error) {
	var out C.ampx_tensor
	h := t.handle()
	ndim, dims := shapeArg(shape)
	err := call(func() C.ampx_status {
		return C.ampx_tensor_view(h, C.size_t(byteOffset), C.ampx_dtype(dtype), ndim, dims, &out)
	}, t)
	return t.context().owned(out, err)
}
