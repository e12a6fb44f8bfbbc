package ampx

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
)

// mlp is x -> tanh(x w1^T + b1) -> h w2^T, with mean squared error against y.
type mlp struct {
	ctx                *Context
	n, in, hidden, out int
	xs, w1s, b1s, w2s  []float32
	ys                 []float32
}

func newMLP(ctx *Context) *mlp {
	m := &mlp{ctx: ctx, n: 4, in: 3, hidden: 5, out: 2}
	gen := func(n int, seed float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(math.Sin(seed*float64(i+1)) * 0.8)
		}
		return v
	}
	m.xs, m.w1s = gen(m.n*m.in, 1.3), gen(m.hidden*m.in, 0.7)
	m.b1s, m.w2s = gen(m.hidden, 2.1), gen(m.out*m.hidden, 0.45)
	m.ys = gen(m.n*m.out, 3.7)
	return m
}

// gradients returns the float64 gradients of the loss with respect to x, w1,
// b1 and w2, computed here by the chain rule.
func (m *mlp) gradients() (dx, dw1, db1, dw2 []float64) {
	h := make([]float64, m.n*m.hidden)
	for i := 0; i < m.n; i++ {
		for j := 0; j < m.hidden; j++ {
			z := float64(m.b1s[j])
			for k := 0; k < m.in; k++ {
				z += float64(m.xs[i*m.in+k]) * float64(m.w1s[j*m.in+k])
			}
			h[i*m.hidden+j] = math.Tanh(z)
		}
	}
	dout := make([]float64, m.n*m.out)
	for i := 0; i < m.n; i++ {
		for o := 0; o < m.out; o++ {
			v := 0.0
			for j := 0; j < m.hidden; j++ {
				v += h[i*m.hidden+j] * float64(m.w2s[o*m.hidden+j])
			}
			dout[i*m.out+o] = 2 * (v - float64(m.ys[i*m.out+o])) / float64(m.n*m.out)
		}
	}
	dx, dw1 = make([]float64, m.n*m.in), make([]float64, m.hidden*m.in)
	db1, dw2 = make([]float64, m.hidden), make([]float64, m.out*m.hidden)
	for i := 0; i < m.n; i++ {
		for j := 0; j < m.hidden; j++ {
			dh := 0.0
			for o := 0; o < m.out; o++ {
				dw2[o*m.hidden+j] += dout[i*m.out+o] * h[i*m.hidden+j]
				dh += dout[i*m.out+o] * float64(m.w2s[o*m.hidden+j])
			}
			dz := dh * (1 - h[i*m.hidden+j]*h[i*m.hidden+j])
			db1[j] += dz
			for k := 0; k < m.in; k++ {
				dw1[j*m.in+k] += dz * float64(m.xs[i*m.in+k])
				dx[i*m.in+k] += dz * float64(m.w1s[j*m.in+k])
			}
		}
	}
	return
}

// leaves makes x, w1, b1, w2 as leaves that require gradients.
func (m *mlp) leaves(t *testing.T) []*Tensor {
	out := []*Tensor{
		must(FromSlice(m.ctx, m.xs, int64(m.n), int64(m.in)))(t),
		must(FromSlice(m.ctx, m.w1s, int64(m.hidden), int64(m.in)))(t),
		must(FromSlice(m.ctx, m.b1s, int64(m.hidden)))(t),
		must(FromSlice(m.ctx, m.w2s, int64(m.out), int64(m.hidden)))(t),
	}
	for _, p := range out {
		ok(t, p.SetRequiresGrad(true))
	}
	return out
}

// run computes the loss, the first layer through checkpointed when it is
// not nil, and backpropagates; it returns the leaves' gradients.
func (m *mlp) run(t *testing.T, checkpointed func(x *Tensor, layer SegmentFunc) []*Tensor) [][]float32 {
	leaves := m.leaves(t)
	x, w1, b1, w2 := leaves[0], leaves[1], leaves[2], leaves[3]
	layer := func(in []*Tensor) ([]*Tensor, error) {
		z, err := Linear(in[0], w1, b1, ActivationNone)
		if err != nil {
			return nil, err
		}
		h, err := Tanh(z)
		return []*Tensor{h}, err
	}
	ok(t, m.ctx.PushScope())
	var h *Tensor
	if checkpointed != nil {
		h = checkpointed(x, layer)[0]
	} else {
		h = must(layer([]*Tensor{x}))(t)[0]
	}
	y := must(FromSlice(m.ctx, m.ys, int64(m.n), int64(m.out)))(t)
	out := must(Linear(h, w2, nil, ActivationNone))(t)
	loss := must(MSELoss(out, y, ReductionMean))(t)
	ok(t, loss.Backward(nil))
	ok(t, m.ctx.PopScope())
	var grads [][]float32
	for _, p := range leaves {
		g := must(p.Grad())(t)
		grads = append(grads, must(ToSlice[float32](g))(t))
	}
	return grads
}

func closeTo(t *testing.T, what string, got []float32, want []float64, tolerance float64) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
	}
	for i := range got {
		if d := math.Abs(float64(got[i]) - want[i]); d > tolerance*(1+math.Abs(want[i])) {
			t.Errorf("%s[%d] = %g, want %g", what, i, got[i], want[i])
		}
	}
}

func TestCheckpointGivesThePlainGradients(t *testing.T) {
	ctx := must(NewContext(nil))(t)
	defer ctx.Close()
	m := newMLP(ctx)
	before := liveCallbacks.Load()
	runs := 0
	checkpointed := m.run(t, func(x *Tensor, layer SegmentFunc) []*Tensor {
		out := must(ctx.Checkpoint(1, func(in []*Tensor) ([]*Tensor, error) {
			runs++
			if got := must(ctx.ScopeDepth())(t); got != 2 {
				t.Errorf("scope depth inside the segment %d, want 2 (the program's and ampx's)", got)
			}
			return layer(in)
		}, x))(t)
		if live := liveCallbacks.Load(); live != before+1 {
			t.Errorf("%d closures held after Checkpoint, want %d", live, before+1)
		}
		return out
	})
	if runs != 2 {
		t.Errorf("the segment ran %d times, want 2 (forward and recompute)", runs)
	}
	if live := liveCallbacks.Load(); live != before {
		t.Errorf("%d closures held after backward, want %d (released)", live, before)
	}
	plain := m.run(t, nil)
	dx, dw1, db1, dw2 := m.gradients()
	for i, want := range [][]float64{dx, dw1, db1, dw2} {
		name := []string{"dx", "dw1", "db1", "dw2"}[i]
		closeTo(t, name+" checkpointed", checkpointed[i], want, 1e-5)
		if fmt.Sprint(checkpointed[i]) != fmt.Sprint(plain[i]) {
			t.Errorf("%s: checkpointed %v, plain %v", name, checkpointed[i], plain[i])
		}
	}
}

func TestCheckpointOwnershipAndGradMode(t *testing.T) {
	ctx := must(NewContext(nil))(t)
	defer ctx.Close()
	a := must(FromSlice(ctx, []float32{1, 2, 3}, 3))(t)
	b := must(FromSlice(ctx, []float32{10, 20, 30}, 3))(t)
	before := liveCallbacks.Load()
	var inner, lent *Tensor
	segment := func(in []*Tensor) ([]*Tensor, error) {
		lent = in[0]
		inner = must(Add(in[0], in[1]))(t)
		sum, err := Mul(inner, in[1])
		return []*Tensor{sum, inner}, err
	}
	// No scope open: the outputs are the caller's.
	outs := must(ctx.Checkpoint(2, segment, a, b))(t)
	if got := must(ToSlice[float32](outs[0]))(t); fmt.Sprint(got) != "[110 440 990]" {
		t.Errorf("output 0 %v", got)
	}
	if got := must(ToSlice[float32](outs[1]))(t); fmt.Sprint(got) != "[11 22 33]" {
		t.Errorf("output 1 %v", got)
	}
	// What the segment made or was lent is closed once it returns.
	if _, err := inner.Numel(); err == nil {
		t.Error("an op output of the segment is usable after it returned")
	}
	if _, err := lent.Numel(); err == nil {
		t.Error("an input lent to the segment is usable after it returned")
	}
	if _, err := a.Numel(); err != nil {
		t.Errorf("the caller's input was closed: %v", err)
	}
	// Grad mode is on, so the segment is recorded although nothing requires
	// a gradient: ampx holds the closure until a backward clears the tape.
	if live := liveCallbacks.Load(); live != before+1 {
		t.Errorf("%d closures held after Checkpoint, want 1", live-before)
	}
	for _, o := range outs {
		o.Close()
	}
	w := must(FromSlice(ctx, []float32{1}, 1))(t)
	ok(t, w.SetRequiresGrad(true))
	ok(t, must(Sum(w))(t).Backward(nil))
	if live := liveCallbacks.Load(); live != before {
		t.Errorf("%d closures held once the tape was cleared, want 0", live-before)
	}
	// Grad mode off: fn runs once and nothing is kept.
	ok(t, ctx.PushScope())
	must(ctx.SetGradEnabled(false))(t)
	runs := 0
	outs = must(ctx.Checkpoint(1, func(in []*Tensor) ([]*Tensor, error) {
		runs++
		return []*Tensor{in[0]}, nil // an input returned as the output
	}, a))(t)
	must(ctx.SetGradEnabled(true))(t)
	if runs != 1 || liveCallbacks.Load() != before {
		t.Errorf("grad mode off: %d runs, %d closures held", runs, liveCallbacks.Load()-before)
	}
	if got := must(ToSlice[float32](outs[0]))(t); fmt.Sprint(got) != "[1 2 3]" {
		t.Errorf("returned input %v", got)
	}
	ok(t, ctx.PopScope())
	if _, err := outs[0].Numel(); err == nil {
		t.Error("an output borrowed from the caller's scope outlived it")
	}
}

func TestCheckpointBadInput(t *testing.T) {
	ctx := must(NewContext(nil))(t)
	defer ctx.Close()
	a := must(FromSlice(ctx, []float32{1, 2}, 2))(t)
	before := liveCallbacks.Load()
	identity := func(in []*Tensor) ([]*Tensor, error) { return []*Tensor{in[0]}, nil }
	if _, err := ctx.Checkpoint(1, nil, a); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("nil fn: %v", err)
	}
	if _, err := ctx.Checkpoint(0, identity, a); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("0 outputs: %v", err)
	}
	if _, err := ctx.Checkpoint(2, identity, a); !errors.Is(err, ErrInvalidArgument) ||
		!strings.Contains(err.Error(), "returned 1 tensors, not the 2") {
		t.Errorf("wrong output count: %v", err)
	}
	if _, err := ctx.Checkpoint(1, func([]*Tensor) ([]*Tensor, error) {
		return []*Tensor{nil}, nil
	}, a); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "nil or closed") {
		t.Errorf("nil output: %v", err)
	}
	// The segment's own error: its status, its words, and errors.Is reaches it.
	mine := errors.New("batch file missing")
	_, err := ctx.Checkpoint(1, func([]*Tensor) ([]*Tensor, error) { return nil, mine }, a)
	var e *Error
	if !errors.As(err, &e) || e.Cause != mine || !errors.Is(err, mine) ||
		!errors.Is(err, ErrInvalidArgument) || !strings.Contains(e.Message, "batch file missing") {
		t.Errorf("segment error: %#v", err)
	}
	_, err = ctx.Checkpoint(1, func(in []*Tensor) ([]*Tensor, error) {
		_, err := Reshape(in[0], 3) // an ampx error keeps its status
		return nil, err
	}, a)
	if !errors.Is(err, ErrShape) {
		t.Errorf("segment returning a shape error: %v", err)
	}
	// Scopes: a segment may not pop the caller's, nor leave its own open.
	_, err = ctx.Checkpoint(1, func(in []*Tensor) ([]*Tensor, error) {
		return in, ctx.PopScope()
	}, a)
	if !errors.Is(err, ErrOrder) {
		t.Errorf("segment popping a scope it did not push: %v", err)
	}
	_, err = ctx.Checkpoint(1, func(in []*Tensor) ([]*Tensor, error) {
		return in, ctx.PushScope()
	}, a)
	if !errors.Is(err, ErrOrder) || !strings.Contains(err.Error(), "did not pop") {
		t.Errorf("segment leaving a scope open: %v", err)
	}
	if d := must(ctx.ScopeDepth())(t); d != 0 {
		t.Errorf("scope depth %d after the failed segments", d)
	}
	// Released inputs and contexts.
	closed := must(FromSlice(ctx, []float32{1}, 1))(t)
	closed.Close()
	if _, err := ctx.Checkpoint(1, identity, closed); err == nil {
		t.Error("a closed input was accepted")
	}
	other := must(NewContext(nil))(t)
	other.Close()
	if _, err := other.Checkpoint(1, identity, a); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("closed context: %v", err)
	}
	if live := liveCallbacks.Load(); live != before {
		t.Errorf("%d closures leaked by failed checkpoints", live-before)
	}
}

// recovered runs f and returns what it panicked with (nil if it did not).
func recovered(f func()) (value any) {
	defer func() { value = recover() }()
	f()
	return nil
}

func TestCheckpointPanicIsRaisedAgain(t *testing.T) {
	ctx := must(NewContext(nil))(t)
	defer ctx.Close()
	w := must(FromSlice(ctx, []float32{1, -2, 3}, 3))(t)
	ok(t, w.SetRequiresGrad(true))
	before := liveCallbacks.Load()
	// In the first run: Checkpoint panics.
	p := recovered(func() {
		_, _ = ctx.Checkpoint(1, func([]*Tensor) ([]*Tensor, error) { panic("first run") }, w)
	})
	cp, isPanic := p.(*CallbackPanic)
	if !isPanic || cp.Value != "first run" || !strings.Contains(string(cp.Stack), "autograd_test.go") {
		t.Fatalf("recovered %#v", p)
	}
	// In the recompute: Backward panics, and the context is sound afterwards.
	runs := 0
	ok(t, ctx.PushScope())
	out := must(ctx.Checkpoint(1, func(in []*Tensor) ([]*Tensor, error) {
		runs++
		if runs == 2 {
			panic(fmt.Errorf("recompute %d", runs))
		}
		sq, err := Mul(in[0], in[0])
		return []*Tensor{sq}, err
	}, w))(t)
	loss := must(Sum(out[0]))(t)
	p = recovered(func() { _ = loss.Backward(nil) })
	cp, isPanic = p.(*CallbackPanic)
	if !isPanic || cp.Unwrap() == nil || cp.Unwrap().Error() != "recompute 2" ||
		!strings.Contains(cp.Error(), "recompute 2") {
		t.Fatalf("recovered %#v", p)
	}
	if d := must(ctx.ScopeDepth())(t); d != 1 {
		t.Errorf("scope depth %d after the panic, want 1", d)
	}
	ok(t, ctx.PopScope())
	if live := liveCallbacks.Load(); live != before {
		t.Errorf("%d closures leaked by the panics", live-before)
	}
	// Training goes on: a plain backward works.
	ok(t, ctx.PushScope())
	sq := must(Mul(w, w))(t)
	ok(t, must(Sum(sq))(t).Backward(nil))
	ok(t, ctx.PopScope())
	if g := must(ToSlice[float32](must(w.Grad())(t)))(t); fmt.Sprint(g) != "[2 -4 6]" {
		t.Errorf("gradient after the panic %v, want [2 -4 6]", g)
	}
}

// layers3 is three linear+ReLU layers and their loss, as the Python test's.
func layers3(t *testing.T, ctx *Context) (params []*Tensor, loss func() *Tensor) {
	for l := 0; l < 3; l++ {
		w := must(FromSlice(ctx, filled(16, func(i int) (int, int) { return (i*7+l)%9 - 4, 8 }), 4, 4))(t)
		b := must(FromSlice(ctx, filled(4, func(i int) (int, int) { return i + l, 10 }), 4))(t)
		ok(t, w.SetRequiresGrad(true))
		ok(t, b.SetRequiresGrad(true))
		params = append(params, w, b)
	}
	x := must(FromSlice(ctx, filled(8, func(i int) (int, int) { return i - 3, 4 }), 2, 4))(t)
	return params, func() *Tensor {
		h := x
		for l := 0; l < 3; l++ {
			h = must(Linear(h, params[2*l], params[2*l+1], ActivationReLU))(t)
		}
		return must(Mean(must(Mul(h, h))(t)))(t)
	}
}

func TestGradReadyHookOncePerParameterInBackwardOrder(t *testing.T) {
	ctx := must(NewContext(nil))(t)
	defer ctx.Close()
	params, loss := layers3(t, ctx)
	type seen struct {
		param *Tensor
		grad  []float32
		sum   float32
	}
	var calls []seen
	ok(t, ctx.SetGradReadyHook(func(p *Tensor) error {
		g := must(p.Grad())(t)
		defer g.Close()
		// Ops run inside the hook (not recorded; borrowed from the program's scope).
		s := must(Sum(g))(t)
		kept := must(p.Retain())(t)
		calls = append(calls, seen{kept, must(ToSlice[float32](g))(t), must(ToSlice[float32](s))(t)[0]})
		return nil
	}))
	ok(t, ctx.PushScope())
	ok(t, loss().Backward(nil))
	ok(t, ctx.PopScope())
	want := []*Tensor{params[4], params[5], params[2], params[3], params[0], params[1]}
	if len(calls) != len(want) {
		t.Fatalf("%d hook calls, want %d (once per parameter)", len(calls), len(want))
	}
	for i, c := range calls {
		if !c.param.Same(want[i]) {
			t.Errorf("call %d reported another parameter than the expected reverse order", i)
		}
		final := must(ToSlice[float32](must(want[i].Grad())(t)))(t)
		if fmt.Sprint(c.grad) != fmt.Sprint(final) {
			t.Errorf("call %d saw %v, the final gradient is %v", i, c.grad, final)
		}
		sum := 0.0
		for _, v := range final {
			sum += float64(v)
		}
		if math.Abs(float64(c.sum)-sum) > 1e-5*(1+math.Abs(sum)) {
			t.Errorf("call %d: Sum in the hook %g, want %g", i, c.sum, sum)
		}
	}
	// Engines with their own backward report by hand.
	calls = nil
	ok(t, params[0].GradReady())
	if len(calls) != 1 || !calls[0].param.Same(params[0]) {
		t.Errorf("GradReady ran the hook %d times", len(calls))
	}
	noGrad := must(ctx.Zeros(F32, 2))(t)
	if err := noGrad.GradReady(); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("GradReady without a gradient: %v", err)
	}
}

func TestGradReadyHookErrorsPanicsAndRelease(t *testing.T) {
	ctx := must(NewContext(nil))(t)
	params, loss := layers3(t, ctx)
	before := liveCallbacks.Load()
	mine := errors.New("from the hook")
	ok(t, ctx.SetGradReadyHook(func(*Tensor) error { return mine }))
	ok(t, ctx.PushScope())
	err := loss().Backward(nil)
	if !errors.Is(err, mine) || !strings.Contains(err.Error(), "from the hook") {
		t.Errorf("hook error: %v", err)
	}
	ok(t, ctx.PopScope())
	if err := params[4].GradReady(); !errors.Is(err, mine) {
		t.Errorf("GradReady with a failing hook: %v", err)
	}
	// Calls the hook must not make are refused, not crashes.
	var inner error
	ok(t, ctx.SetGradReadyHook(func(p *Tensor) error {
		inner = ctx.SetGradReadyHook(nil)
		return nil
	}))
	ok(t, params[4].GradReady())
	if !errors.Is(inner, ErrOrder) {
		t.Errorf("SetGradReadyHook inside the hook: %v", inner)
	}
	// A panic is raised again by Backward; the next step works.
	ok(t, ctx.SetGradReadyHook(func(*Tensor) error { panic("boom") }))
	if live := liveCallbacks.Load(); live != before+1 {
		t.Errorf("%d hooks held, want 1 (replaced ones are released)", live-before)
	}
	ok(t, ctx.PushScope())
	p := recovered(func() { _ = loss().Backward(nil) })
	if cp, isPanic := p.(*CallbackPanic); !isPanic || cp.Value != "boom" {
		t.Errorf("recovered %#v", p)
	}
	ok(t, ctx.PopScope())
	ok(t, ctx.SetGradReadyHook(nil))
	if live := liveCallbacks.Load(); live != before {
		t.Errorf("%d hooks held after removal", live-before)
	}
	ok(t, ctx.PushScope())
	ok(t, loss().Backward(nil))
	ok(t, ctx.PopScope())
	// The program's last reference to the context releases the hook, and a
	// closed context takes none.
	ok(t, ctx.SetGradReadyHook(func(*Tensor) error { return nil }))
	ctx.Close()
	if live := liveCallbacks.Load(); live != before {
		t.Errorf("%d hooks held after Close", live-before)
	}
	if err := ctx.SetGradReadyHook(func(*Tensor) error { return nil }); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("hook on a closed context: %v", err)
	}
	if live := liveCallbacks.Load(); live != before {
		t.Errorf("%d hooks held after a refused install", live-before)
	}
}

func TestContextRetainAndScopeDepth(t *testing.T) {
	ctx := must(NewContext(nil))(t)
	second := must(ctx.Retain())(t)
	defer second.Close()
	ok(t, ctx.PushScope())
	if d := must(second.ScopeDepth())(t); d != 1 {
		t.Errorf("depth through the second reference %d, want 1", d)
	}
	a := must(ctx.Zeros(F32, 2))(t)
	b := must(Affine(a, 1, 5))(t) // borrowed from the scope, whichever value pops it
	ok(t, second.PopScope())
	if _, err := b.Numel(); err == nil {
		t.Error("a scope popped through the second reference left its tensor usable")
	}
	ctx.Close()
	third := must(a.RetainContext())(t) // a's own Context value is closed
	if d := must(third.ScopeDepth())(t); d != 0 {
		t.Errorf("depth through the tensor's context %d", d)
	}
	ok(t, third.PushScope())
	if d := must(second.ScopeDepth())(t); d != 1 {
		t.Errorf("a scope pushed through RetainContext's value: depth %d elsewhere", d)
	}
	ok(t, second.PopScope())
	third.Close()
	// The second reference keeps the context open: ops are still recorded.
	c := must(second.Zeros(F32, 3))(t)
	ok(t, c.SetRequiresGrad(true))
	ok(t, must(Sum(must(Affine(c, 2, 0))(t)))(t).Backward(nil))
	if g := must(ToSlice[float32](must(c.Grad())(t)))(t); fmt.Sprint(g) != "[2 2 2]" {
		t.Errorf("gradient %v", g)
	}
	if _, err := ctx.Retain(); err == nil {
		t.Error("Retain of a closed value succeeded")
	}
	second.Close()
	if _, err := c.RetainContext(); !errors.Is(err, ErrStaleHandle) {
		t.Errorf("RetainContext once every reference is closed: %v", err)
	}
	var none *Tensor
	if _, err := none.RetainContext(); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("RetainContext of nil: %v", err)
	}
}

func TestTensorViews(t *testing.T) {
	ctx := must(NewContext(nil))(t)
	defer ctx.Close()
	base := must(FromSlice(ctx, []float32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, 12))(t)
	view := must(base.View(4*5, F32, 2, 3))(t)
	defer view.Close()
	if s := must(view.Shape())(t); fmt.Sprint(s) != "[2 3]" {
		t.Errorf("shape %v", s)
	}
	if v := must(ToSlice[float32](view))(t); fmt.Sprint(v) != "[5 6 7 8 9 10]" {
		t.Errorf("view %v", v)
	}
	pb, pv := must(base.Data())(t), must(view.Data())(t)
	if uintptr(pv)-uintptr(pb) != 20 {
		t.Errorf("view data at %p, base at %p", pv, pb)
	}
	ok(t, view.Fill(-1))
	if v := must(ToSlice[float32](base))(t); fmt.Sprint(v) != "[0 1 2 3 4 -1 -1 -1 -1 -1 -1 11]" {
		t.Errorf("base after filling the view %v", v)
	}
	bits := must(view.View(4, I32, 1))(t) // a view of a view may reinterpret
	defer bits.Close()
	if v := must(ToSlice[int32](bits))(t); uint32(v[0]) != math.Float32bits(-1) {
		t.Errorf("i32 view %#x", v[0])
	}
	base.Close()
	if v := must(ToSlice[float32](view))(t); fmt.Sprint(v) != "[-1 -1 -1 -1 -1 -1]" {
		t.Errorf("view after its base was closed %v", v)
	}

	h := must(ctx.Zeros(F16, 10))(t) // 20 bytes
	defer h.Close()
	for _, c := range []struct {
		offset uintptr
		dtype  DType
		shape  []int64
		want   Status
	}{
		{2, F16, []int64{10}, ErrShape},          // past the end
		{1, F16, []int64{2}, ErrInvalidArgument}, // not a multiple of 2
		{0, DType(99), []int64{1}, ErrDType},
		{^uintptr(1), F16, []int64{1}, ErrShape}, // 2^64 - 2: refused, not wrapped
	} {
		if _, err := h.View(c.offset, c.dtype, c.shape...); !errors.Is(err, c.want) {
			t.Errorf("view at %d of %v %v: %v, want %v", c.offset, c.dtype, c.shape, err, c.want)
		}
	}
	var closed *Tensor
	if _, err := closed.View(0, F32, 1); err == nil {
		t.Error("a view of nil succeeded")
	}
}
