package ampx

// Grad, BackwardWith, Scaler.UnscaleTensor (issue 41) and BCEWithLogitsEx
// (issue 43) against references computed here in float64: closed forms
// (d/dx x^3 = 3x^2, d2/dx2 = 6x, d3/dx3 = 6), central differences of a small
// MLP's gradient (written out below) for a Hessian-vector product, and
// torch's formula of the weighted binary cross-entropy.
//
// Tolerances: ampx computes in fp32, a few roundings of 2^-24 per element,
// so 1e-5 relative for the closed forms and losses; the Hessian-vector
// product sums a few dozen fp32 products per element, so 1e-4 of its largest
// element, while a missing term of a formula is off by O(1) of it. The
// central difference (eps 1e-4, in float64) is exact to ~1e-8.

import (
	"errors"
	"math"
	"strings"
	"testing"
)

var cubeX = []float32{-1.5, -0.25, 0.5, 2.0}

func leafOf(t *testing.T, ctx *Context, data []float32, shape ...int64) *Tensor {
	t.Helper()
	x := must(FromSlice(ctx, data, shape...))(t)
	ok(t, x.SetRequiresGrad(true))
	return x
}

func mapped(xs []float32, f func(x float64) float64) []float64 {
	out := make([]float64, len(xs))
	for i, x := range xs {
		out[i] = f(float64(x))
	}
	return out
}

// only is must for a Grad call of one input that must give a gradient.
func only(grads []*Tensor, err error) func(t *testing.T) *Tensor {
	return func(t *testing.T) *Tensor {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		if len(grads) != 1 || grads[0] == nil {
			t.Fatalf("want one gradient, got %v", grads)
		}
		return grads[0]
	}
}

func wantStatus(t *testing.T, what string, err error, status Status) *Error {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) || e.Status != status {
		t.Fatalf("%s: got %v, want %v", what, err, status)
	}
	return e
}

func TestGradOfXCubedToThirdOrder(t *testing.T) {
	ctx := must(NewContext(nil))(t)
	defer ctx.Close()
	x := leafOf(t, ctx, cubeX, 4)
	create := &GradOptions{CreateGraph: true}
	xx := must(Mul(x, x))(t)
	for _, cube := range []*Tensor{must(Mul(xx, x))(t), must(Pow(x, 3))(t)} {
		g := only(Grad([]*Tensor{must(Sum(cube))(t)}, []*Tensor{x}, nil, create))(t)
		if !must(g.RequiresGrad())(t) {
			t.Error("a gradient taken with CreateGraph does not require grad")
		}
		closeTo(t, "3x^2", must(ToSlice[float32](g))(t), mapped(cubeX, func(v float64) float64 { return 3 * v * v }), 1e-5)
		h := only(Grad([]*Tensor{must(Sum(g))(t)}, []*Tensor{x}, nil, create))(t)
		closeTo(t, "6x", must(ToSlice[float32](h))(t), mapped(cubeX, func(v float64) float64 { return 6 * v }), 1e-5)
		d3 := only(Grad([]*Tensor{must(Sum(h))(t)}, []*Tensor{x}, nil, nil))(t)
		closeTo(t, "6", must(ToSlice[float32](d3))(t), []float64{6, 6, 6, 6}, 1e-5)
		if must(x.Grad())(t) != nil {
			t.Error("Grad accumulated into x.Grad")
		}
	}
}

func TestGradAllowUnusedGradOutputsAndScopes(t *testing.T) {
	ctx := must(NewContext(nil))(t)
	defer ctx.Close()
	x, z := leafOf(t, ctx, cubeX, 4), leafOf(t, ctx, cubeX, 4)
	loss := must(Sum(must(Mul(x, x))(t)))(t)
	_, err := Grad([]*Tensor{loss}, []*Tensor{x, z}, nil, &GradOptions{Retain: RetainGraph})
	e := wantStatus(t, "an unused input", err, ErrInvalidArgument)
	if !strings.Contains(e.Message, "inputs[1]") || !strings.Contains(e.Message, "allow_unused") {
		t.Errorf("the message does not name the input and allow_unused: %q", e.Message)
	}
	// Inside a scope the results are borrowed from it, as op outputs.
	ok(t, ctx.PushScope())
	grads := must(Grad([]*Tensor{loss}, []*Tensor{x, z}, nil, &GradOptions{AllowUnused: true}))(t)
	if len(grads) != 2 || grads[0] == nil || grads[1] != nil {
		t.Fatalf("want [gradient, nil], got %v", grads)
	}
	closeTo(t, "2x", must(ToSlice[float32](grads[0]))(t), mapped(cubeX, func(v float64) float64 { return 2 * v }), 1e-6)
	ok(t, ctx.PopScope())
	if _, err := grads[0].Numel(); err == nil {
		t.Error("a gradient borrowed from a scope is usable after PopScope")
	}

	// A vector-Jacobian product of a non-scalar output; h is an intermediate.
	h := must(Tanh(x))(t)
	y := must(Mul(h, h))(t)
	v := []float32{1, -2, 0.5, 3}
	seed := must(FromSlice(ctx, v, 4))(t)
	grads = must(Grad([]*Tensor{y}, []*Tensor{h, x}, []*Tensor{seed}, nil))(t)
	wantDh, wantDx := make([]float64, 4), make([]float64, 4)
	for i, xi := range cubeX {
		th := math.Tanh(float64(xi))
		wantDh[i] = 2 * th * float64(v[i])
		wantDx[i] = 2 * th * (1 - th*th) * float64(v[i])
	}
	closeTo(t, "dh", must(ToSlice[float32](grads[0]))(t), wantDh, 1e-5)
	closeTo(t, "dx", must(ToSlice[float32](grads[1]))(t), wantDx, 1e-5)
}

func TestGradBadInput(t *testing.T) {
	ctx := must(NewContext(nil))(t)
	defer ctx.Close()
	x := leafOf(t, ctx, cubeX, 4)
	y := must(Tanh(x))(t)
	_, err := Grad([]*Tensor{y}, []*Tensor{x}, nil, nil)
	if e := wantStatus(t, "a non-scalar output without gradOutputs", err, ErrShape); !strings.Contains(e.Message, "grad_outputs") {
		t.Errorf("message %q", e.Message)
	}
	_, err = Grad([]*Tensor{y}, []*Tensor{x}, []*Tensor{nil}, nil)
	wantStatus(t, "a nil gradOutputs entry for a non-scalar output", err, ErrShape)
	_, err = Grad([]*Tensor{y}, []*Tensor{x}, []*Tensor{must(ctx.Zeros(F32, 3))(t)}, nil)
	wantStatus(t, "gradOutputs of another shape", err, ErrShape)
	_, err = Grad([]*Tensor{y}, []*Tensor{x}, []*Tensor{must(ctx.Zeros(F16, 4))(t)}, nil)
	wantStatus(t, "gradOutputs of another dtype", err, ErrDType)
	_, err = Grad([]*Tensor{y}, []*Tensor{x}, []*Tensor{nil, nil}, nil)
	wantStatus(t, "two gradOutputs for one output", err, ErrInvalidArgument)
	s := must(Sum(y))(t)
	_, err = Grad(nil, []*Tensor{x}, nil, nil)
	wantStatus(t, "no outputs", err, ErrInvalidArgument)
	_, err = Grad([]*Tensor{s}, nil, nil, nil)
	wantStatus(t, "no inputs", err, ErrInvalidArgument)
	_, err = Grad([]*Tensor{s}, []*Tensor{nil}, nil, nil)
	wantStatus(t, "a nil input", err, ErrInvalidArgument)
	_, err = Grad([]*Tensor{s}, []*Tensor{must(FromSlice(ctx, cubeX, 4))(t)}, nil, nil)
	wantStatus(t, "an input that does not require grad", err, ErrInvalidArgument)
	// Nothing was freed by the failures.
	g := only(Grad([]*Tensor{s}, []*Tensor{x}, nil, nil))(t)
	closeTo(t, "1 - tanh^2", must(ToSlice[float32](g))(t), mapped(cubeX, func(v float64) float64 {
		return 1 - math.Tanh(v)*math.Tanh(v)
	}), 1e-5)
}

func TestGradWithoutCreateGraphAndRetain(t *testing.T) {
	ctx := must(NewContext(nil))(t)
	defer ctx.Close()
	x := leafOf(t, ctx, cubeX, 4)
	cube := must(Sum(must(Mul(must(Mul(x, x))(t), x))(t)))(t)
	g := only(Grad([]*Tensor{cube}, []*Tensor{x}, nil, &GradOptions{Retain: RetainGraph}))(t)
	if must(g.RequiresGrad())(t) {
		t.Error("a gradient taken without CreateGraph requires grad")
	}
	_, err := Grad([]*Tensor{must(Sum(g))(t)}, []*Tensor{x}, nil, nil)
	wantStatus(t, "differentiating a gradient taken without CreateGraph", err, ErrInvalidArgument)
	again := only(Grad([]*Tensor{cube}, []*Tensor{x}, nil, nil))(t)
	closeTo(t, "again", must(ToSlice[float32](again))(t), mapped(cubeX, func(v float64) float64 { return 3 * v * v }), 1e-5)
	_, err = Grad([]*Tensor{cube}, []*Tensor{x}, nil, nil)
	if e := wantStatus(t, "a third pass over a freed tape", err, ErrOrder); !strings.Contains(e.Message, "retain_graph") {
		t.Errorf("message %q", e.Message)
	}
}

func TestBackwardWithRetainAndCreateGraph(t *testing.T) {
	ctx := must(NewContext(nil))(t)
	defer ctx.Close()
	x := leafOf(t, ctx, cubeX, 4)
	loss := must(Sum(must(Mul(must(Mul(x, x))(t), x))(t)))(t)
	ok(t, loss.BackwardWith(nil, &BackwardOptions{Retain: RetainGraph}))
	ok(t, loss.Backward(nil))
	closeTo(t, "twice 3x^2", must(ToSlice[float32](must(x.Grad())(t)))(t),
		mapped(cubeX, func(v float64) float64 { return 6 * v * v }), 1e-5)
	wantStatus(t, "a backward over a freed tape", loss.BackwardWith(nil, &BackwardOptions{Retain: FreeGraph}), ErrOrder)

	y := leafOf(t, ctx, cubeX, 4)
	loss = must(Sum(must(Mul(must(Mul(y, y))(t), y))(t)))(t)
	ok(t, loss.BackwardWith(nil, &BackwardOptions{CreateGraph: true}))
	gy := must(y.Grad())(t)
	if !must(gy.RequiresGrad())(t) {
		t.Fatal("y.Grad after a backward with CreateGraph does not require grad")
	}
	h := only(Grad([]*Tensor{must(Sum(gy))(t)}, []*Tensor{y}, nil, nil))(t)
	closeTo(t, "6x", must(ToSlice[float32](h))(t), mapped(cubeX, func(v float64) float64 { return 6 * v }), 1e-5)
}

// hvpMLP is tanh(x W1^T + b1) W2^T + b2 against y under a mean squared
// error, sizes n x in -> hidden -> out.
const hvpN, hvpIn, hvpHidden, hvpOut = 6, 3, 5, 2

// hvpGradient returns the gradient of hvpMLP's loss with respect to
// [W1, b1, W2, b2], in float64.
func hvpGradient(p [][]float64, x, y []float64) [][]float64 {
	w1, b1, w2, b2 := p[0], p[1], p[2], p[3]
	a := make([]float64, hvpN*hvpHidden)
	for n := 0; n < hvpN; n++ {
		for h := 0; h < hvpHidden; h++ {
			z := b1[h]
			for i := 0; i < hvpIn; i++ {
				z += x[n*hvpIn+i] * w1[h*hvpIn+i]
			}
			a[n*hvpHidden+h] = math.Tanh(z)
		}
	}
	g := [][]float64{make([]float64, hvpHidden*hvpIn), make([]float64, hvpHidden),
		make([]float64, hvpOut*hvpHidden), make([]float64, hvpOut)}
	for n := 0; n < hvpN; n++ {
		dOut := make([]float64, hvpOut)
		for o := 0; o < hvpOut; o++ {
			out := b2[o]
			for h := 0; h < hvpHidden; h++ {
				out += a[n*hvpHidden+h] * w2[o*hvpHidden+h]
			}
			dOut[o] = 2 * (out - y[n*hvpOut+o]) / float64(hvpN*hvpOut)
			g[3][o] += dOut[o]
		}
		for h := 0; h < hvpHidden; h++ {
			dA := 0.0
			for o := 0; o < hvpOut; o++ {
				dA += dOut[o] * w2[o*hvpHidden+h]
				g[2][o*hvpHidden+h] += dOut[o] * a[n*hvpHidden+h]
			}
			dZ := dA * (1 - a[n*hvpHidden+h]*a[n*hvpHidden+h])
			g[1][h] += dZ
			for i := 0; i < hvpIn; i++ {
				g[0][h*hvpIn+i] += dZ * x[n*hvpIn+i]
			}
		}
	}
	return g
}

func TestHessianVectorProductOfASmallMLP(t *testing.T) {
	ctx := must(NewContext(nil))(t)
	defer ctx.Close()
	draw := func(n int, seed float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(math.Sin(seed*float64(i+1)) * 0.8)
		}
		return v
	}
	shapes := [][]int64{{hvpHidden, hvpIn}, {hvpHidden}, {hvpOut, hvpHidden}, {hvpOut}}
	sizes := []int{hvpHidden * hvpIn, hvpHidden, hvpOut * hvpHidden, hvpOut}
	var init, vecs [][]float32
	var params []*Tensor
	for k, n := range sizes {
		init = append(init, draw(n, 0.7+0.3*float64(k)))
		vecs = append(vecs, draw(n, 1.9+0.4*float64(k)))
		params = append(params, leafOf(t, ctx, init[k], shapes[k]...))
	}
	xs, ys := draw(hvpN*hvpIn, 1.3), draw(hvpN*hvpOut, 3.7)
	x := must(FromSlice(ctx, xs, hvpN, hvpIn))(t)
	y := must(FromSlice(ctx, ys, hvpN, hvpOut))(t)
	hidden := must(Tanh(must(Linear(x, params[0], params[1], ActivationNone))(t)))(t)
	loss := must(MSELoss(must(Linear(hidden, params[2], params[3], ActivationNone))(t), y, ReductionMean))(t)
	grads := must(Grad([]*Tensor{loss}, params, nil, &GradOptions{CreateGraph: true}))(t)
	var dot *Tensor
	for k, g := range grads {
		v := must(FromSlice(ctx, vecs[k], shapes[k]...))(t)
		term := must(Sum(must(Mul(g, v))(t)))(t)
		if dot == nil {
			dot = term
		} else {
			dot = must(Add(dot, term))(t)
		}
	}
	hv := must(Grad([]*Tensor{dot}, params, nil, nil))(t)

	f64 := func(v []float32) []float64 { return mapped(v, func(e float64) float64 { return e }) }
	shifted := func(sign float64) [][]float64 {
		var p [][]float64
		for k := range init {
			q := f64(init[k])
			for i := range q {
				q[i] += sign * 1e-4 * float64(vecs[k][i])
			}
			p = append(p, q)
		}
		return p
	}
	x64, y64 := f64(xs), f64(ys)
	plus, minus := hvpGradient(shifted(1), x64, y64), hvpGradient(shifted(-1), x64, y64)
	scale := 0.0
	want := make([][]float64, len(plus))
	for k := range plus {
		want[k] = make([]float64, len(plus[k]))
		for i := range plus[k] {
			want[k][i] = (plus[k][i] - minus[k][i]) / 2e-4
			scale = math.Max(scale, math.Abs(want[k][i]))
		}
	}
	if scale < 1e-2 {
		t.Fatalf("the Hessian-vector product is too small to test (%g)", scale)
	}
	for k := range hv {
		got := must(ToSlice[float32](hv[k]))(t)
		for i := range got {
			if d := math.Abs(float64(got[i]) - want[k][i]); d > 1e-4*scale {
				t.Errorf("Hv of parameter %d [%d] = %g, want %g", k, i, got[i], want[k][i])
			}
		}
	}
	for k, w := range hvpGradient([][]float64{f64(init[0]), f64(init[1]), f64(init[2]), f64(init[3])}, x64, y64) {
		closeTo(t, "gradient", must(ToSlice[float32](grads[k]))(t), w, 1e-5)
	}
}

func TestUnscaleTensorAndThePenaltyRecipeSkippingAnOverflow(t *testing.T) {
	ctx := must(NewContext(nil))(t)
	defer ctx.Close()
	opts := DefaultScalerOptions()
	opts.InitScale = 1024
	scaler := must(NewScaler(ctx, &opts))(t)
	x0 := []float32{-1, 0.25, 0.75}
	x := leafOf(t, ctx, x0, 3)
	scaled := must(scaler.ScaleLoss(must(Sum(must(Tanh(x))(t)))(t)))(t)
	g := only(Grad([]*Tensor{scaled}, []*Tensor{x}, nil, &GradOptions{CreateGraph: true}))(t)
	u := must(scaler.UnscaleTensor(g))(t)
	dtanh := func(v float64) float64 { return 1 - math.Tanh(v)*math.Tanh(v) }
	closeTo(t, "scaled", must(ToSlice[float32](g))(t), mapped(x0, func(v float64) float64 { return 1024 * dtanh(v) }), 1e-6)
	closeTo(t, "unscaled", must(ToSlice[float32](u))(t), mapped(x0, dtanh), 1e-6)
	h := only(Grad([]*Tensor{must(Sum(u))(t)}, []*Tensor{x}, nil, nil))(t)
	closeTo(t, "d unscaled", must(ToSlice[float32](h))(t), mapped(x0, func(v float64) float64 {
		return -2 * math.Tanh(v) * dtanh(v)
	}), 1e-5)
	_, err := scaler.UnscaleTensor(must(FromSlice(ctx, []int64{1, 2}, 2))(t))
	wantStatus(t, "an integer tensor", err, ErrDType)
	_, err = scaler.UnscaleTensor(nil)
	wantStatus(t, "nil", err, ErrInvalidArgument)

	// The recipe: with the scale at 2^127 the scaled gradients (the largest
	// > 2 unscaled: the loss is 16 times a sum) overflow fp32, the penalty
	// is inf, the step is skipped and the scale backs off by 2^-24; at
	// 2^103 the next step is taken.
	w := leafOf(t, ctx, []float32{0.5, -0.3, 0.8, 0.1, -0.6, 0.4}, 2, 3)
	xs := must(FromSlice(ctx, []float32{0.3, -0.2, 0.9, -0.7, 0.5, 0.1, 0.2, 0.8, -0.4, -0.9, 0.6, 0.3}, 4, 3))(t)
	sgd := DefaultSGDOptions()
	sgd.LR = 0.1
	opt := must(NewSGD(ctx, []*Tensor{w}, &sgd))(t)
	opts = DefaultScalerOptions()
	opts.InitScale, opts.BackoffFactor = math.Ldexp(1, 127), math.Ldexp(1, -24)
	scaler = must(NewScaler(ctx, &opts))(t)
	var taken []bool
	for step := 0; step < 2; step++ {
		before := must(ToSlice[float32](w))(t)
		loss := must(Affine(must(Sum(must(Tanh(must(Linear(xs, w, nil, ActivationNone))(t)))(t)))(t), 16, 0))(t)
		g := only(Grad([]*Tensor{must(scaler.ScaleLoss(loss))(t)}, []*Tensor{w}, nil, &GradOptions{CreateGraph: true}))(t)
		u := must(scaler.UnscaleTensor(g))(t)
		penalty := must(Affine(must(Sum(must(Mul(u, u))(t)))(t), 0.5, 0))(t)
		ok(t, must(Add(loss, penalty))(t).Backward(scaler))
		ok(t, scaler.Step(opt))
		ok(t, scaler.Update())
		ok(t, opt.ZeroGrad())
		after := must(ToSlice[float32](w))(t)
		changed := false
		for i := range after {
			changed = changed || after[i] != before[i]
		}
		taken = append(taken, changed)
	}
	if len(taken) != 2 || taken[0] || !taken[1] {
		t.Errorf("steps taken %v, want [false true]", taken)
	}
	if c := must(scaler.Counters())(t); c.Skipped != 1 {
		t.Errorf("skipped %d, want 1", c.Skipped)
	}
	if s := must(scaler.Scale())(t); s != math.Ldexp(1, 103) {
		t.Errorf("scale %g, want 2^103", s)
	}
}

// bceReference is torch's weighted binary cross-entropy in float64 for an
// output gradient of ones: the element losses, d/dlogits and d/dtargets.
func bceReference(x, t []float32, w, p []float64) (loss, dx, dt []float64) {
	for i := range x {
		xi, ti := float64(x[i]), float64(t[i])
		logSig := -math.Log1p(math.Exp(-math.Abs(xi))) + math.Min(xi, 0)
		logSigNeg := logSig - xi
		sig := 1 / (1 + math.Exp(-xi))
		loss = append(loss, -w[i]*(p[i]*ti*logSig+(1-ti)*logSigNeg))
		dx = append(dx, w[i]*((1+(p[i]-1)*ti)*sig-p[i]*ti))
		dt = append(dt, w[i]*(logSigNeg-p[i]*logSig))
	}
	return
}

func TestBCEWithLogitsExMatchesTorchsFormula(t *testing.T) {
	ctx := must(NewContext(nil))(t)
	defer ctx.Close()
	x := make([]float32, 12)
	for i := range x {
		x[i] = float32(4 * math.Sin(1.7*float64(i+1)))
	}
	tg := []float32{0, 1, 0.25, 1, 1, 0, 0.5, 0, 1, 0, 0.75, 1}
	// weight [3] (one per class), pos_weight [4, 1] (one per row).
	wCols, pRows := []float32{0.5, 1.25, 2}, []float32{0.5, 3, 1.5, 0.75}
	w, p := make([]float64, 12), make([]float64, 12)
	for i := range w {
		w[i], p[i] = float64(wCols[i%3]), float64(pRows[i/3])
	}
	loss, dx, dt := bceReference(x, tg, w, p)
	sum := 0.0
	for _, l := range loss {
		sum += l
	}
	for _, c := range []struct {
		reduction Reduction
		divisor   float64
	}{{ReductionMean, 12}, {ReductionSum, 1}, {ReductionNone, 1}} {
		logits, targets := leafOf(t, ctx, x, 4, 3), leafOf(t, ctx, tg, 4, 3)
		weight := leafOf(t, ctx, wCols, 3)
		posWeight := must(must(FromSlice(ctx, pRows, 4, 1))(t).Cast(BF16))(t)
		out := must(BCEWithLogitsEx(logits, targets, weight, posWeight, c.reduction))(t)
		ok(t, must(Sum(out))(t).Backward(nil))
		if c.reduction == ReductionNone {
			closeTo(t, "losses", must(ToSlice[float32](out))(t), loss, 1e-5)
		} else {
			closeTo(t, "loss", must(ToSlice[float32](out))(t), []float64{sum / c.divisor}, 1e-5)
		}
		scaled := func(v []float64) []float64 {
			out := make([]float64, len(v))
			for i := range v {
				out[i] = v[i] / c.divisor
			}
			return out
		}
		closeTo(t, "d/dlogits", must(ToSlice[float32](must(logits.Grad())(t)))(t), scaled(dx), 1e-5)
		closeTo(t, "d/dtargets", must(ToSlice[float32](must(targets.Grad())(t)))(t), scaled(dt), 1e-5)
		if must(weight.Grad())(t) != nil {
			t.Error("a gradient flowed to the weight")
		}
	}
	logits, targets := must(FromSlice(ctx, x, 4, 3))(t), must(FromSlice(ctx, tg, 4, 3))(t)
	plain := must(ToSlice[float32](must(BCEWithLogits(logits, targets, ReductionSum))(t)))(t)
	ex := must(ToSlice[float32](must(BCEWithLogitsEx(logits, targets, nil, nil, ReductionSum))(t)))(t)
	if plain[0] != ex[0] {
		t.Errorf("without weights %g, want bce_with_logits' %g", ex[0], plain[0])
	}
	_, err := BCEWithLogitsEx(logits, targets, must(ctx.Zeros(F32, 4))(t), nil, ReductionMean)
	wantStatus(t, "a weight that does not broadcast", err, ErrShape)
	_, err = BCEWithLogitsEx(logits, targets, nil, must(FromSlice(ctx, []int32{1, 2, 3}, 3))(t), ReductionMean)
	wantStatus(t, "an integer pos_weight", err, ErrDType)
	other := must(NewContext(nil))(t)
	defer other.Close()
	_, err = BCEWithLogitsEx(logits, targets, must(other.Zeros(F32, 3))(t), nil, ReductionMean)
	wantStatus(t, "a weight of another context", err, ErrDevice)
}

// Cast and Clone are recorded (issue 47): for loss = sum(x*x) + sum(y*y)
// with y = x cast, torch gives these x.grad (2x + 2 round(x)) and, for
// d sum(g*g)/dx, these second derivatives (torch.autograd.grad with
// create_graph); every step is exact or one rounding of the format, so
// fp32's rounding of the sums (2e-6) separates them from the 2x a dropped
// cast gives.
func TestGradientsThroughCastAndCloneMatchTorch(t *testing.T) {
	cases := []struct {
		name string
		cast func(x *Tensor) (*Tensor, error)
		grad []float64
		hess []float64
	}{
		{"bf16", func(x *Tensor) (*Tensor, error) { return x.Cast(BF16) },
			[]float64{1.201562523841858, -6.806250095367432, 9.0}, []float64{9.618749618530273, -54.474998474121094, 72.0}},
		{"f16", func(x *Tensor) (*Tensor, error) { return x.Cast(F16) },
			[]float64{1.200097680091858, -6.800390720367432, 9.0}, []float64{9.601171493530273, -54.404685974121094, 72.0}},
		{"f32", func(x *Tensor) (*Tensor, error) { return x.Cast(F32) },
			[]float64{1.2000000476837158, -6.800000190734863, 9.0}, []float64{9.600000381469727, -54.400001525878906, 72.0}},
		{"clone", (*Tensor).Clone,
			[]float64{1.2000000476837158, -6.800000190734863, 9.0}, []float64{9.600000381469727, -54.400001525878906, 72.0}},
	}
	xs := []float32{0.3, -1.7, 2.25}
	for _, c := range cases {
		ctx := must(NewContext(nil))(t)
		loss := func(x, y *Tensor) *Tensor {
			return must(Add(must(Sum(must(Mul(x, x))(t)))(t), must(Sum(must(Mul(y, y))(t)))(t)))(t)
		}
		x := leafOf(t, ctx, xs, 3)
		y := must(c.cast(x))(t)
		if !must(y.RequiresGrad())(t) {
			t.Errorf("%s: the cast of a leaf that requires grad does not", c.name)
		}
		ok(t, loss(x, y).Backward(nil))
		closeTo(t, c.name+" x.grad", must(ToSlice[float32](must(x.Grad())(t)))(t), c.grad, 2e-6)

		x = leafOf(t, ctx, xs, 3)
		y = must(c.cast(x))(t)
		g := only(Grad([]*Tensor{loss(x, y)}, []*Tensor{x}, nil, &GradOptions{CreateGraph: true}))(t)
		closeTo(t, c.name+" g", must(ToSlice[float32](g))(t), c.grad, 2e-6)
		h := only(Grad([]*Tensor{must(Sum(must(Mul(g, g))(t)))(t)}, []*Tensor{x}, nil, nil))(t)
		closeTo(t, c.name+" d sum(g*g)/dx", must(ToSlice[float32](h))(t), c.hess, 2e-6)

		plain := must(FromSlice(ctx, xs, 3))(t)
		if must(must(plain.Cast(BF16))(t).RequiresGrad())(t) {
			t.Errorf("%s: the cast of a tensor that requires no grad is recorded", c.name)
		}
		ctx.Close()
	}
}
