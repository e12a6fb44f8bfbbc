package ampx

// Gradient checkpointing and grad-ready hooks: Go functions ampx calls from
// inside its own calls (section 9 and 13 of ampx.h). The closures go to C
// as runtime/cgo handles; ampx calls ampxGoRelease exactly once when it no
// longer needs one, which deletes it.

/*
#include <stdint.h>
#include <ampx/ampx.h>

// Exported by callback.go.
extern ampx_status ampxGoSegment(void *, ampx_tensor *, size_t, ampx_tensor *, size_t);
extern ampx_status ampxGoGradReady(void *, ampx_tensor);
extern void ampxGoRelease(void *);

static ampx_status ampx_go_segment_fn(void *user_data, const ampx_tensor *inputs,
                                      size_t input_count, ampx_tensor *outputs,
                                      size_t output_count) {
  return ampxGoSegment(user_data, (ampx_tensor *)inputs, input_count, outputs, output_count);
}

static ampx_status ampx_go_grad_ready_fn(void *user_data, ampx_tensor param) {
  return ampxGoGradReady(user_data, param);
}

static void ampx_go_release_fn(void *user_data) { ampxGoRelease(user_data); }

static ampx_status ampx_go_checkpoint(ampx_context ctx, uintptr_t handle,
                                      const ampx_tensor *inputs, size_t input_count,
                                      ampx_tensor *outputs, size_t output_count) {
  ampx_segment segment = AMPX_SEGMENT_INIT;
  segment.fn = ampx_go_segment_fn;
  segment.user_data = (void *)handle;
  segment.release = ampx_go_release_fn;
  return ampx_checkpoint_segment(ctx, &segment, inputs, input_count, outputs, output_count);
}

static ampx_status ampx_go_set_grad_ready_hook(ampx_context ctx, uintptr_t handle) {
  return ampx_set_grad_ready_hook(ctx, ampx_go_grad_ready_fn, (void *)handle,
                                  ampx_go_release_fn);
}
*/
import "C"

import "fmt"

// SegmentFunc computes a checkpointed segment's outputs from its inputs with
// ampx ops (see Context.Checkpoint). It returns exactly as many tensors as
// Checkpoint was asked for, or an error.
type SegmentFunc func(inputs []*Tensor) ([]*Tensor, error)

// segment is a SegmentFunc as ampx holds it.
type segment struct {
	ctx     *Context
	fn      SegmentFunc
	outputs int
	// keep holds the latest run's outputs until ampx has taken its own
	// references (right after the callback returns): a tensor the segment
	// made outside ops has no other owner.
	keep []*Tensor
}

// Checkpoint is gradient checkpointing (torch.utils.checkpoint;
// ampx_checkpoint_segment): it runs fn(inputs) now without keeping its
// intermediate activations, and again when backward reaches it, so memory
// holds only the segment's inputs and outputs between the passes. The
// gradients are those of calling fn directly. It returns outputs tensors,
// op outputs as any op's (borrowed from the innermost scope when one is
// open).
//
// fn must be deterministic and compute its outputs with ampx ops; parameters
// it uses through its closure receive their gradients as usual. Its inputs
// are lent for the call (on the second run they are copies that collect the
// gradients). Op outputs it makes belong to a scope ampx opens around it:
// they are closed when it returns, except the outputs it returns, which
// ampx keeps. It may not call Backward. An error fn returns fails this call
// or the Backward that runs fn again, with an *Error whose Cause is that
// error; a panic in fn is raised again by this call or that Backward as a
// *CallbackPanic. fn is released when ampx no longer needs it (after the
// Backward that runs it, or when the outputs go unused).
func (c *Context) Checkpoint(outputs int, fn SegmentFunc, inputs ...*Tensor) ([]*Tensor, error) {
	if fn == nil {
		return nil, &Error{Status: ErrInvalidArgument, Message: "ampx.Context.Checkpoint: fn is nil"}
	}
	if outputs < 1 {
		return nil, &Error{Status: ErrInvalidArgument, Message: fmt.Sprintf(
			"ampx.Context.Checkpoint: a segment needs at least one output, not %d", outputs)}
	}
	if c == nil || c.h == nil {
		return nil, &Error{Status: ErrInvalidArgument, Message: "ampx.Context.Checkpoint: the context is closed"}
	}
	seg := &segment{ctx: c, fn: fn, outputs: outputs}
	in, inCount := arrayArg(handlesOf(inputs))
	out := make([]C.ampx_tensor, outputs)
	ctx := c.h
	// From here ampx owns the handle: it releases it also when the call fails.
	handle := newCallbackHandle(seg)
	err := call(func() C.ampx_status {
		return C.ampx_go_checkpoint(ctx, handle, in, inCount, &out[0], C.size_t(outputs))
	}, c, inputs)
	seg.keep = nil
	if err = c.settle(err); err != nil {
		return nil, err
	}
	return c.results(out, nil)
}

func (s *segment) run(in, out []C.ampx_tensor) C.ampx_status {
	inputs := make([]*Tensor, len(in))
	for i, h := range in {
		inputs[i] = s.ctx.borrow(h)
	}
	return runCallback(s.ctx.st, "the checkpointed Go function", inputs, func() error {
		results, err := s.fn(inputs)
		if err != nil {
			return err
		}
		if len(results) != len(out) {
			return &Error{Status: ErrInvalidArgument, Message: fmt.Sprintf(
				"the checkpointed function returned %d tensors, not the %d Checkpoint was asked for",
				len(results), len(out))}
		}
		for i, t := range results {
			if t.handle() == nil {
				return &Error{Status: ErrInvalidArgument, Message: fmt.Sprintf(
					"output %d of the checkpointed function is nil or closed", i)}
			}
		}
		for i, t := range results {
			out[i] = t.h
		}
		s.keep = results
		return nil
	})
}

// GradReadyFunc is a grad-ready hook (see Context.SetGradReadyHook).
type GradReadyFunc func(param *Tensor) error

type gradReadyHook struct {
	ctx *Context
	fn  GradReadyFunc
}

// SetGradReadyHook installs fn as the context's grad-ready hook
// (ampx_set_grad_ready_hook), replacing the previous one; nil removes it.
// During each Backward, fn(param) is called once for every leaf that
// received a gradient, as soon as that gradient is final for the pass, in
// the order backward finishes them (roughly reverse forward order;
// parameters a checkpointed segment uses come after its recompute), so a
// program can copy or reduce a gradient while the rest of backward runs.
// Tensor.GradReady reports one by hand.
//
// param is lent for the call (Retain it to keep it; Same compares it with
// your own tensors). fn may read and copy tensors, write the gradient in
// place and run ops, which are not recorded; it must not call Backward,
// GradReady or SetGradReadyHook (refused with ErrOrder). An error fn
// returns stops the backward pass, whose *Error then has it as Cause; a
// panic in fn is raised again by Backward or GradReady as a
// *CallbackPanic.
//
// The hook is kept until it is replaced or removed, or the program's last
// reference to the context is closed; until then it keeps the Context
// reachable, so a Context with a hook is released by Close, not by the
// garbage collector.
func (c *Context) SetGradReadyHook(fn GradReadyFunc) error {
	ctx := c.handle()
	if fn == nil {
		return call(func() C.ampx_status { return C.ampx_set_grad_ready_hook(ctx, nil, nil, nil) }, c)
	}
	if ctx == nil {
		return &Error{Status: ErrInvalidArgument, Message: "ampx.Context.SetGradReadyHook: the context is closed"}
	}
	// ampx owns the handle from here, also when the call fails.
	handle := newCallbackHandle(&gradReadyHook{ctx: c, fn: fn})
	return call(func() C.ampx_status { return C.ampx_go_set_grad_ready_hook(ctx, handle) }, c)
}

func (h *gradReadyHook) run(param C.ampx_tensor) C.ampx_status {
	p := h.ctx.borrow(param)
	return runCallback(h.ctx.st, "the Go grad-ready hook", []*Tensor{p}, func() error { return h.fn(p) })
}

// GradReady tells the grad-ready hook that t's gradient is final for this
// step (ampx_grad_ready), for engines that compute gradients themselves;
// the hook runs inside this call. t must have a gradient attached.
func (t *Tensor) GradReady() error {
	h := t.handle()
	err := call(func() C.ampx_status { return C.ampx_grad_ready(h) }, t)
	return t.context().settle(err)
}

// Retain says whether a backward pass keeps the tape for another one over
// the same graph (torch's retain_graph). The zero value is torch's default.
type Retain int8

const (
	// RetainDefault follows CreateGraph (torch's retain_graph=None).
	RetainDefault Retain = iota
	// RetainGraph keeps the records the pass runs, for another backward.
	RetainGraph
	// FreeGraph frees them; a later backward that needs one fails with
	// ErrOrder (its message names retain_graph).
	FreeGraph
)

func (r Retain) toC() C.int32_t {
	switch r {
	case RetainGraph:
		return 1
	case FreeGraph:
		return 0
	}
	return -1
}

// GradOptions are torch.autograd.grad's keywords (ampx_grad_options); the
// zero value, like a nil *GradOptions, is the library's defaults.
type GradOptions struct {
	// CreateGraph records the computation of the gradients, so they can be
	// differentiated again (to any order).
	CreateGraph bool
	// Retain keeps or frees the records the call runs.
	Retain Retain
	// AllowUnused gives a nil gradient for an input no output reaches,
	// instead of an error naming it.
	AllowUnused bool
}

func (o *GradOptions) toC() *C.ampx_grad_options {
	c := C.ampx_grad_options_default()
	if o != nil {
		c.create_graph, c.retain_graph, c.allow_unused = cbool(o.CreateGraph), o.Retain.toC(),
			cbool(o.AllowUnused)
	}
	return &c
}

// Grad returns the gradients of outputs with respect to inputs, as
// torch.autograd.grad (ampx_grad): element i is the sum over k of
// d<outputs[k], gradOutputs[k]>/d inputs[i], a new tensor of inputs[i]'s
// shape and dtype (owned as an op output: borrowed from the innermost scope
// when one is open), or nil for an input no output reaches when
// opts.AllowUnused (without it, such an input is an ErrInvalidArgument
// naming it).
//
// Inputs are leaves that require gradients or tensors ops made (the
// gradient flowing into that tensor). gradOutputs is nil, or one entry per
// output: a tensor of that output's shape and dtype, or nil for ones, which
// only one-element outputs may take (a larger output without one is
// ErrShape). opts nil means the defaults. Nothing accumulates into
// Tensor.Grad, and no grad-ready hook or data-parallel reduction runs. A
// failed call changes nothing.
func Grad(outputs, inputs, gradOutputs []*Tensor, opts *GradOptions) ([]*Tensor, error) {
	if gradOutputs != nil && len(gradOutputs) != len(outputs) {
		return nil, &Error{Status: ErrInvalidArgument, Message: fmt.Sprintf(
			"ampx.Grad: gradOutputs has %d entries for %d outputs; give one (or nil) per output",
			len(gradOutputs), len(outputs))}
	}
	outs, outCount := arrayArg(handlesOf(outputs))
	ins, inCount := arrayArg(handlesOf(inputs))
	var seeds *C.ampx_tensor
	if gradOutputs != nil {
		seeds, _ = arrayArg(handlesOf(gradOutputs))
	}
	o := opts.toC()
	grads := make([]C.ampx_tensor, len(inputs))
	results, _ := arrayArg(grads)
	err := call(func() C.ampx_status {
		return C.ampx_grad(outs, outCount, seeds, ins, inCount, o, results)
	}, outputs, inputs, gradOutputs)
	if err != nil {
		return nil, err
	}
	ctx := outputs[0].context()
	ts := make([]*Tensor, len(grads))
	for i, h := range grads {
		if h != nil {
			ts[i], _ = ctx.result(h, nil)
		}
	}
	return ts, nil
}

// BackwardOptions are Tensor.BackwardWith's options (ampx_backward_options);
// the zero value, like nil, makes it Backward.
type BackwardOptions struct {
	// Retain keeps the tape for another backward (gradients accumulate;
	// grad-ready hooks and data-parallel reductions wait for the final pass,
	// the one that does not retain it).
	Retain Retain
	// CreateGraph computes the gradients with recorded ops: each reached
	// leaf's gradient becomes a new tensor (the old one plus this one) that
	// can be differentiated, so a gradient attached with SetGrad is not
	// written to.
	CreateGraph bool
}

// BackwardWith is Backward with torch's retain_graph and create_graph
// (ampx_backward_ex); opts nil means the defaults. Without retaining, a
// second backward through the freed records fails with ErrOrder.
func (t *Tensor) BackwardWith(scaler *Scaler, opts *BackwardOptions) error {
	c := C.ampx_backward_options_default()
	if opts != nil {
		c.retain_graph, c.create_graph = opts.Retain.toC(), cbool(opts.CreateGraph)
	}
	h, s := t.handle(), scaler.handle()
	err := call(func() C.ampx_status { return C.ampx_backward_ex(h, s, &c) }, t, scaler)
	return t.context().settle(err)
}
