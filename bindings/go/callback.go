package ampx

// The C functions ampx calls back into Go (checkpointed segments, the
// grad-ready hook, their release). A file with //export may only declare C
// in its preamble; the shims that hand these to ampx are in autograd.go.

// #include <stdlib.h>
// #include <ampx/ampx.h>
import "C"

import (
	"errors"
	"fmt"
	"runtime/cgo"
	"runtime/debug"
	"sync/atomic"
	"unsafe"
)

// CallbackPanic is what a panic inside a Go callback (a SegmentFunc or a
// GradReadyFunc) becomes. The panic is recovered where ampx called the
// callback -- it must not unwind through C -- the C call fails, and the Go
// call that ran it (Context.Checkpoint, Tensor.Backward, Tensor.GradReady)
// panics again with a *CallbackPanic once ampx has returned and every
// object is consistent.
type CallbackPanic struct {
	Value any    // what the callback panicked with
	Stack []byte // the callback's goroutine stack where it panicked
}

func (p *CallbackPanic) Error() string {
	return fmt.Sprintf("ampx: panic in a Go callback: %v\n\n%s", p.Value, p.Stack)
}

// Unwrap returns the panic value when it is an error.
func (p *CallbackPanic) Unwrap() error {
	err, _ := p.Value.(error)
	return err
}

// callbackFailure is what a failed callback left for the Go call that ran it.
type callbackFailure struct {
	err   error          // returned by the callback
	panic *CallbackPanic // or the panic it raised
}

// liveCallbacks counts the closures ampx holds (cgo handles not yet
// released), for the tests.
var liveCallbacks atomic.Int64

// newCallbackHandle keeps v for ampx until ampxGoRelease deletes it.
func newCallbackHandle(v any) C.uintptr_t {
	liveCallbacks.Add(1)
	return C.uintptr_t(cgo.NewHandle(v))
}

//export ampxGoRelease
func ampxGoRelease(userData unsafe.Pointer) {
	cgo.Handle(uintptr(userData)).Delete()
	liveCallbacks.Add(-1)
}

//export ampxGoSegment
func ampxGoSegment(userData unsafe.Pointer, inputs *C.ampx_tensor, inputCount C.size_t,
	outputs *C.ampx_tensor, outputCount C.size_t) C.ampx_status {
	s := cgo.Handle(uintptr(userData)).Value().(*segment)
	return s.run(unsafe.Slice(inputs, int(inputCount)), unsafe.Slice(outputs, int(outputCount)))
}

//export ampxGoGradReady
func ampxGoGradReady(userData unsafe.Pointer, param C.ampx_tensor) C.ampx_status {
	h := cgo.Handle(uintptr(userData)).Value().(*gradReadyHook)
	return h.run(param)
}

// runCallback runs body as a callback ampx makes on st's context and turns
// its outcome into the status ampx gets. While body runs, Go's scope stack
// matches ampx's: scopes ampx opened around the callback are added, and
// the Go values of tensors they own are marked closed when it returns
// (ampx releases those tensors). borrowed are Go values of handles ampx
// lent for the call; they are marked closed too.
func runCallback(st *contextState, what string, borrowed []*Tensor, body func() error) C.ampx_status {
	base, floor := len(st.scopes), st.floor
	var depth C.int32_t
	if C.ampx_scope_depth(st.raw, &depth) == C.AMPX_OK {
		for len(st.scopes) < int(depth) {
			st.scopes = append(st.scopes, nil)
		}
	}
	st.floor = len(st.scopes)

	err, panicked := protect(body)

	if len(st.scopes) > st.floor {
		// Scopes the callback pushed and left open: ampx would take the
		// innermost for its own. Pop them, and fail the callback.
		for len(st.scopes) > st.floor {
			if C.ampx_scope_pop(st.raw) != C.AMPX_OK {
				break
			}
			st.popped()
		}
		if err == nil {
			err = &Error{Status: ErrOrder, Message: what + " pushed a scope it did not pop"}
		}
	}
	for _, scope := range st.scopes[minInt(base, len(st.scopes)):] {
		for _, t := range scope {
			t.h = nil
		}
	}
	if len(st.scopes) > base {
		st.scopes = st.scopes[:base]
	}
	st.floor = floor
	for _, t := range borrowed {
		t.h = nil
	}

	if panicked != nil {
		if st.failure == nil {
			st.failure = &callbackFailure{panic: panicked}
		}
		return setError(ErrInvalidArgument, fmt.Sprintf("%s panicked: %v", what, panicked.Value))
	}
	if err != nil {
		if st.failure == nil {
			st.failure = &callbackFailure{err: err}
		}
		return setError(statusOf(err), err.Error())
	}
	return C.AMPX_OK
}

func minInt(a, b int) int {
	if a < b {
		return a
	}
	return b
}

// protect runs body, recovering a panic into a *CallbackPanic.
func protect(body func() error) (err error, panicked *CallbackPanic) {
	defer func() {
		if r := recover(); r != nil {
			if p, ok := r.(*CallbackPanic); ok { // from a nested ampx call
				panicked = p
			} else {
				panicked = &CallbackPanic{Value: r, Stack: debug.Stack()}
			}
		}
	}()
	return body(), nil
}

// statusOf is the status a callback's error gives ampx: its own when it is
// or wraps an ampx error, else ErrInvalidArgument.
func statusOf(err error) Status {
	var e *Error
	if errors.As(err, &e) && e.Status != OK {
		return e.Status
	}
	var s Status
	if errors.As(err, &s) && s != OK {
		return s
	}
	return ErrInvalidArgument
}

// setError makes message the calling thread's last error (ampx_set_error),
// so the failed ampx call reports the callback's own words.
func setError(status Status, message string) C.ampx_status {
	cmessage := C.CString(message)
	defer C.free(unsafe.Pointer(cmessage))
	return C.ampx_set_error(C.ampx_status(status), cmessage)
}

// settle ends a Go call that may have run callbacks on c: a callback's panic
// is raised again here, and a callback's error becomes the Cause of the
// call's *Error.
func (c *Context) settle(err error) error {
	if c == nil || c.st == nil {
		return err
	}
	f := c.st.failure
	c.st.failure = nil
	if f == nil {
		return err
	}
	if f.panic != nil {
		panic(f.panic)
	}
	if e, ok := err.(*Error); ok && e.Cause == nil {
		e.Cause = f.err
	}
	return err
}
