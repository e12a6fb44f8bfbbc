// Package ampx is the Go binding of ampx, an embeddable mixed-precision
// training library: autocast, dynamic loss scaling (after torch.amp's
// GradScaler) and SGD/Adam/AdamW with fp32 master weights, over the C API of
// include/ampx/ampx.h. The header is the reference documentation; this
// package states only what differs in Go.
//
// # Objects and lifetimes
//
// Context, Tensor, Optimizer, Scaler, Autocast, Comm, DataParallel, Doctor,
// SafetensorsFile and FP8Recipe each own one reference to a C object. Call Close when
// done with one: it releases the reference at once, and calling it again
// does nothing. A finalizer
// (runtime.SetFinalizer) releases whatever a program forgets to Close when
// the garbage collector finds it unreachable; it is a safety net, not a
// schedule -- memory held by a forgotten tensor is returned only whenever
// the collector runs. The C library allows its release functions on any
// thread, which is where finalizers run.
//
// Tensors made by ops (Add, Linear, ...) while a scope is open on their
// context (Context.PushScope) are borrowed from that scope, as in C:
// Context.PopScope releases them and marks their Go values closed, so a
// later use returns an error instead of touching freed memory. Retain one
// to keep it past the scope.
//
// # Callbacks
//
// Context.Checkpoint and Context.SetGradReadyHook hand Go functions to
// ampx, which calls them from inside its own calls (the checkpointed
// segment again during Backward, the hook during Backward and GradReady),
// on the calling goroutine. ampx holds each closure through a
// runtime/cgo.Handle until it says it is done with it. An error a callback
// returns becomes the failed call's status and message (ampx_set_error),
// and the *Error that call returns has it as Cause; a panic is recovered
// before it reaches C and raised again, as a *CallbackPanic, by the Go call
// that ran the callback once ampx has returned. A callback must not call
// runtime.Goexit (testing's t.FailNow and t.Fatal do): that would unwind
// through ampx's C frames.
//
// # Threads
//
// A Context and everything made from it may be used by one goroutine at a
// time; different contexts are independent. Errors are returned as *Error,
// which carries the status and the message of ampx_last_error(). That
// message is kept per OS thread by the library, so each call locks its
// goroutine to its OS thread from the C call until the message is read:
// a goroutine that migrates between calls cannot read another call's
// message.
//
// # Building
//
// The package uses the experimental tier of ampx.h (autograd, autocast,
// ops, views and hooks, data parallel, the precision doctor, safetensors:
// -DAMPX_EXPERIMENTAL, set below) and links -lampx; point cgo at the
// library and header with CGO_CFLAGS=-I<include dir> and
// CGO_LDFLAGS="-L<lib dir> -Wl,-rpath,<lib dir>". It needs neither MPI nor
// NCCL to build: ampx loads them at run time.
package ampx

// #cgo CFLAGS: -DAMPX_EXPERIMENTAL
// #cgo LDFLAGS: -lampx
// #include <ampx/ampx.h>
import "C"

import (
	"runtime"
	"unsafe"
)

// HeaderVersion is the version of the header this package was compiled
// against (major*10000 + minor*100 + patch); compare it with Version.
const HeaderVersion = uint32(C.AMPX_VERSION_NUMBER)

// Version is the version of the library loaded at run time, in
// HeaderVersion's form.
func Version() uint32 { return uint32(C.ampx_version()) }

// VersionString is the run-time version as text, e.g. "0.1.0".
func VersionString() string { return C.GoString(C.ampx_version_string()) }

// HasCUDA reports whether the library was built with its CUDA backend.
func HasCUDA() bool { return C.ampx_has_cuda() != 0 }

// CUDADeviceCount is the number of CUDA devices ampx can use (0 without the
// backend or a device).
func CUDADeviceCount() int { return int(C.ampx_cuda_device_count()) }

// Status is an ampx status code. The values are pinned by the C API. A
// Status is also an error, so errors.Is(err, ampx.ErrShape) tests the status
// of an *Error.
type Status int32

// Status codes (ampx_status).
const (
	OK                 Status = C.AMPX_OK
	ErrInvalidArgument Status = C.AMPX_ERR_INVALID_ARGUMENT
	ErrShape           Status = C.AMPX_ERR_SHAPE
	ErrDType           Status = C.AMPX_ERR_DTYPE
	ErrDevice          Status = C.AMPX_ERR_DEVICE
	ErrOutOfMemory     Status = C.AMPX_ERR_OUT_OF_MEMORY
	ErrNoDevice        Status = C.AMPX_ERR_NO_DEVICE
	ErrNotSupported    Status = C.AMPX_ERR_NOT_SUPPORTED
	ErrOrder           Status = C.AMPX_ERR_ORDER
	ErrStaleHandle     Status = C.AMPX_ERR_STALE_HANDLE
	ErrIO              Status = C.AMPX_ERR_IO
	ErrCorrupt         Status = C.AMPX_ERR_CORRUPT
	ErrInternal        Status = C.AMPX_ERR_INTERNAL
)

// String is the status's C name, e.g. "AMPX_ERR_SHAPE".
func (s Status) String() string { return C.GoString(C.ampx_status_string(C.ampx_status(s))) }

// Error makes a Status usable as an error (and as an errors.Is target).
func (s Status) Error() string { return s.String() }

// Error is a failed ampx call: its status and the library's message, which
// names the function, the argument and the shapes or dtypes involved.
type Error struct {
	Status  Status
	Message string
	// Cause is the error a Go callback (a checkpointed segment, a
	// grad-ready hook) returned when that is what made the call fail; nil
	// otherwise. Message then ends with its text.
	Cause error
}

func (e *Error) Error() string {
	if e.Message == "" {
		return e.Status.String()
	}
	return e.Status.String() + ": " + e.Message
}

// Is reports whether target is this error's status, so that
// errors.Is(err, ampx.ErrOrder) works.
func (e *Error) Is(target error) bool {
	s, ok := target.(Status)
	return ok && s == e.Status
}

// Unwrap returns Cause when a callback's error caused the failure (so
// errors.Is and errors.As reach it), else the status.
func (e *Error) Unwrap() error {
	if e.Cause != nil {
		return e.Cause
	}
	return e.Status
}

// call runs one C call that returns an ampx_status and turns a failure into
// an *Error. The goroutine stays on its OS thread from the call until the
// thread-local message has been copied. keep lists the Go objects whose
// handles the call uses: they stay reachable (their finalizers cannot
// release the handles) until the call has returned.
func call(f func() C.ampx_status, keep ...any) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	status := f()
	runtime.KeepAlive(keep)
	if status == C.AMPX_OK {
		return nil
	}
	return &Error{Status: Status(status), Message: C.GoString(C.ampx_last_error())}
}

// callThen is call that runs copyOut right after a successful C call, on
// the same locked thread: the strings such a call hands out are the C
// object's, valid only until its next call.
func callThen(f func() C.ampx_status, copyOut func(), keep ...any) error {
	return call(func() C.ampx_status {
		status := f()
		if status == C.AMPX_OK {
			copyOut()
		}
		return status
	}, keep...)
}

// readString is callThen for a C call that hands out one string, which it
// returns copied.
func readString(f func(**C.char) C.ampx_status, keep ...any) (string, error) {
	var text *C.char
	var out string
	err := callThen(func() C.ampx_status { return f(&text) }, func() { out = C.GoString(text) }, keep...)
	return out, err
}

// number is a Go or C numeric type.
type number interface {
	~int | ~int32 | ~int64 | ~uint | ~uint32 | ~uint64 | ~float32 | ~float64
}

// read runs a C call that writes one number through the pointer f is given
// (a getter) and returns that number as an R; keep is as for call.
func read[R, T number](f func(*T) C.ampx_status, keep ...any) (R, error) {
	var v T
	err := call(func() C.ampx_status { return f(&v) }, keep...)
	return R(v), err
}

// readFlag is read for a C int32 that is a flag.
func readFlag(f func(*C.int32_t) C.ampx_status, keep ...any) (bool, error) {
	v, err := read[int32](f, keep...)
	return v != 0, err
}

// ref is the reference to a C object that each wrapper (Context, Tensor,
// Optimizer, ...) embeds: the object's handle, nil once released.
type ref[H comparable] struct{ h H }

func (r *ref[H]) cref() *ref[H] { return r }

// wrapper is a pointer to a type that embeds ref[H].
type wrapper[H comparable] interface {
	comparable
	cref() *ref[H]
}

// handleOf is w's handle: nil for a nil or closed w, which the C API
// refuses with AMPX_ERR_INVALID_ARGUMENT (or AMPX_ERR_STALE_HANDLE).
func handleOf[H comparable, W wrapper[H]](w W) H {
	var none W
	if w == none {
		var zero H
		return zero
	}
	return w.cref().h
}

// own sets the finalizer that closes w (close is w's Close method) if the
// program forgets to, and returns w.
func own[W any](w *W, close func(*W)) *W {
	runtime.SetFinalizer(w, close)
	return w
}

// closeRef releases w's reference with release, unless w is nil or
// released already, and cancels w's finalizer: the body of every Close.
func closeRef[H comparable, W wrapper[H]](w W, release func(H)) {
	var none W
	var zero H
	if w == none || w.cref().h == zero {
		return
	}
	release(w.cref().h)
	w.cref().h = zero
	runtime.SetFinalizer(w, nil)
}

// DType is an element type.
type DType int32

// Element types (ampx_dtype).
const (
	F32  DType = C.AMPX_F32
	F16  DType = C.AMPX_F16
	BF16 DType = C.AMPX_BF16
	I32  DType = C.AMPX_I32
	I64  DType = C.AMPX_I64
	// F8E4M3 is OCP FP8 E4M3 (E4M3FN, torch.float8_e4m3fn): max 448, no
	// infinities; storage and FP8 products only.
	F8E4M3 DType = C.AMPX_F8E4M3
	// F8E5M2 is OCP FP8 E5M2 (torch.float8_e5m2): max 57344, IEEE inf and NaN.
	F8E5M2 DType = C.AMPX_F8E5M2
)

// Size is the size of one element in bytes (0 for an invalid value).
func (d DType) Size() int { return int(C.ampx_dtype_size(C.ampx_dtype(d))) }

// String is the dtype's name: "f32", "f16", "bf16", "i32", "i64", ... or "invalid".
func (d DType) String() string { return C.GoString(C.ampx_dtype_name(C.ampx_dtype(d))) }

// DeviceType is a kind of device.
type DeviceType int32

// Device kinds (ampx_device_type).
const (
	DeviceCPU  DeviceType = C.AMPX_DEVICE_CPU
	DeviceCUDA DeviceType = C.AMPX_DEVICE_CUDA
)

func cbool(b bool) C.int32_t {
	if b {
		return 1
	}
	return 0
}

// sliceBytes is the address and byte size of a slice's elements (nil, 0
// for an empty slice), for passing host memory to C for one call.
func sliceBytes[T any](s []T) (unsafe.Pointer, C.size_t) {
	if len(s) == 0 {
		return nil, 0
	}
	return unsafe.Pointer(&s[0]), C.size_t(uintptr(len(s)) * unsafe.Sizeof(s[0]))
}

// shapeArg is the (ndim, pointer) pair the C API takes for a shape.
func shapeArg(shape []int64) (C.int32_t, *C.int64_t) {
	if len(shape) == 0 {
		return 0, nil
	}
	return C.int32_t(len(shape)), (*C.int64_t)(unsafe.Pointer(&shape[0]))
}

// arrayArg is the (pointer to the first element, count) pair the C API
// takes for an array (nil, 0 when it is empty).
func arrayArg[T any](s []T) (*T, C.size_t) {
	if len(s) == 0 {
		return nil, 0
	}
	return &s[0], C.size_t(len(s))
}
