package ampx

import (
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// must(f())(t) is f's value, or fails the test with f's error.
func must[T any](v T, err error) func(t *testing.T) T {
	return func(t *testing.T) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func ok(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// filled returns n float32 values value(i), computed as bindings/README.md says.
func filled(n int, value func(i int) (num, den int)) []float32 {
	out := make([]float32, n)
	for i := range out {
		num, den := value(i)
		out[i] = float32(num) / float32(den)
	}
	return out
}

// referenceRun is the run of bindings/README.md; it returns its output lines.
func referenceRun(t *testing.T) []string {
	ctx := must(NewContext(nil))(t)
	defer ctx.Close()
	x := must(FromSlice(ctx, filled(32, func(i int) (int, int) { return i%7 - 3, 4 }), 8, 4))(t)
	y := must(FromSlice(ctx, filled(16, func(i int) (int, int) { return i%5 - 2, 2 }), 8, 2))(t)
	param := func(name string, values []float32, shape ...int64) *Tensor {
		p := must(FromSlice(ctx, values, shape...))(t)
		ok(t, p.SetRequiresGrad(true))
		ok(t, p.SetName(name))
		return p
	}
	w1 := param("w1", filled(64, func(i int) (int, int) { return (i*37)%17 - 8, 32 }), 16, 4)
	b1 := param("b1", filled(16, func(i int) (int, int) { return i%3 - 1, 100 }), 16)
	w2 := param("w2", filled(32, func(i int) (int, int) { return (i*29)%13 - 6, 32 }), 2, 16)
	b2 := param("b2", make([]float32, 2), 2)

	adamw := DefaultAdamWOptions()
	adamw.LR = 0.01
	opt := must(NewAdam(ctx, []*Tensor{w1, b1, w2, b2}, &adamw))(t)
	defer opt.Close()
	scalerOptions := DefaultScalerOptions()
	scalerOptions.InitScale = 1024
	scalerOptions.GrowthInterval = 3
	scaler := must(NewScaler(ctx, &scalerOptions))(t)
	defer scaler.Close()
	autocastOptions := DefaultAutocastOptions()
	autocastOptions.DType = BF16
	autocast := must(NewAutocast(ctx, &autocastOptions))(t)
	defer autocast.Close()

	var lines []string
	for step := 0; step < 12; step++ {
		ok(t, ctx.PushScope())
		ok(t, autocast.Enter())
		h := must(Linear(x, w1, b1, ActivationReLU))(t)
		out := must(Linear(h, w2, b2, ActivationNone))(t)
		loss := must(MSELoss(out, y, ReductionMean))(t)
		ok(t, autocast.Exit())
		lossValue := must(ToSlice[float32](loss))(t)[0]
		ok(t, loss.Backward(scaler))
		if step == 5 {
			g := must(w2.Grad())(t)
			values := must(ToSlice[float32](g))(t)
			values[3] = float32(math.Inf(1))
			ok(t, CopyFromSlice(g, values))
			g.Close()
		}
		ok(t, scaler.Unscale(opt))
		ok(t, opt.ClipGradNorm(1.0, 2.0, false))
		ok(t, scaler.Step(opt))
		ok(t, scaler.Update())
		scale := must(scaler.Scale())(t)
		ok(t, opt.ZeroGrad())
		ok(t, ctx.PopScope())
		// Go's %.17g prints exactly as C's.
		lines = append(lines, fmt.Sprintf("step %d loss %08x scale %.17g", step,
			math.Float32bits(lossValue), scale))
	}
	var w strings.Builder
	w.WriteString("w2")
	for _, v := range must(ToSlice[float32](w2))(t) {
		fmt.Fprintf(&w, " %08x", math.Float32bits(v))
	}
	return append(lines, w.String())
}

func TestReferenceRun(t *testing.T) {
	got := referenceRun(t)
	tiny := os.Getenv("AMPX_TINY_TRAIN")
	if tiny == "" {
		t.Skip("AMPX_TINY_TRAIN (the tiny_train executable) is not set; run_tests.sh sets it")
	}
	output, err := exec.Command(tiny).Output()
	if err != nil {
		t.Fatalf("%s: %v", tiny, err)
	}
	want := strings.Split(strings.TrimRight(string(output), "\n"), "\n")
	if len(got) != len(want) {
		t.Fatalf("%d lines, tiny_train printed %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("line %d:\n go: %s\n  C: %s", i+1, got[i], want[i])
		}
	}
}

func TestErrorCarriesStatusAndMessage(t *testing.T) {
	ctx := must(NewContext(nil))(t)
	defer ctx.Close()
	_, err := ctx.FromHost(F32, []int64{2, 3}, make([]byte, 5))
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("want an *Error, got %v", err)
	}
	if e.Status != ErrShape || !errors.Is(err, ErrShape) {
		t.Errorf("status %v, want AMPX_ERR_SHAPE", e.Status)
	}
	if !strings.Contains(e.Message, "ampx_tensor_from_host") {
		t.Errorf("message %q does not name the function", e.Message)
	}
	if !strings.HasPrefix(err.Error(), "AMPX_ERR_SHAPE: ") {
		t.Errorf("Error() = %q", err.Error())
	}

	scaler := must(NewScaler(ctx, nil))(t)
	defer scaler.Close()
	if err := scaler.Update(); !errors.Is(err, ErrOrder) || err.(*Error).Message == "" {
		t.Errorf("Update before any step: %v, want AMPX_ERR_ORDER with a message", err)
	}
	bad := DefaultScalerOptions()
	bad.GrowthFactor = 0.5
	if _, err := NewScaler(ctx, &bad); !errors.Is(err, ErrInvalidArgument) ||
		!strings.Contains(err.Error(), "growth_factor") {
		t.Errorf("growth factor 0.5: %v", err)
	}
}

// Each goroutine provokes errors whose messages carry its own shapes, many
// times, while the others do the same: a message read on the wrong OS
// thread would carry another goroutine's shape.
func TestErrorMessagesStayWithTheirGoroutine(t *testing.T) {
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			ctx, err := NewContext(&ContextOptions{DeviceType: DeviceCPU, NumThreads: 1})
			if err != nil {
				t.Error(err)
				return
			}
			defer ctx.Close()
			extent := int64(1000 + g)
			x, err := ctx.Zeros(F32, extent)
			if err != nil {
				t.Error(err)
				return
			}
			defer x.Close()
			for i := 0; i < 300; i++ {
				_, err := Reshape(x, extent+1)
				if err == nil || !strings.Contains(err.Error(), fmt.Sprint(extent+1)) ||
					!strings.Contains(err.Error(), fmt.Sprint(extent)) {
					t.Errorf("goroutine %d: %v", g, err)
					return
				}
				if _, err := x.Numel(); err != nil { // successful calls in between
					t.Error(err)
					return
				}
			}
		}(g)
	}
	wg.Wait()
}

func TestCloseTwiceAndUseAfterClose(t *testing.T) {
	ctx := must(NewContext(nil))(t)
	p := must(ctx.Zeros(F32, 4))(t)
	opt := must(NewSGD(ctx, []*Tensor{p}, nil))(t)
	scaler := must(NewScaler(ctx, nil))(t)
	autocast := must(NewAutocast(ctx, nil))(t)
	for i := 0; i < 2; i++ {
		autocast.Close()
		scaler.Close()
		opt.Close()
		p.Close()
		ctx.Close()
	}
	if err := p.Fill(1); err == nil {
		t.Error("Fill on a closed tensor succeeded")
	}
	if err := opt.Step(); err == nil {
		t.Error("Step on a closed optimizer succeeded")
	}
	var nilTensor *Tensor
	nilTensor.Close()

	ctx = must(NewContext(nil))(t)
	defer ctx.Close()
	a := must(ctx.Zeros(F32, 3))(t)
	defer a.Close()
	ok(t, ctx.PushScope())
	b := must(Affine(a, 1, 2))(t)
	kept := must(b.Retain())(t)
	defer kept.Close()
	ok(t, ctx.PopScope())
	if _, err := b.Numel(); err == nil {
		t.Error("a tensor of a popped scope is still usable")
	}
	b.Close()
	if v := must(ToSlice[float32](kept))(t); v[0] != 2 {
		t.Errorf("retained scope output holds %v", v)
	}
	if err := ctx.PopScope(); !errors.Is(err, ErrOrder) {
		t.Errorf("PopScope with no scope open: %v", err)
	}
}

func TestTensorBasics(t *testing.T) {
	ctx := must(NewContext(nil))(t)
	defer ctx.Close()
	// TF32: off by default, a setting that reads back.
	if was := must(ctx.SetTF32(true))(t); was {
		t.Error("TF32 allowed by default")
	}
	if was := must(ctx.SetTF32(false))(t); !was {
		t.Error("SetTF32(true) did not stick")
	}
	x := must(FromSlice(ctx, []float32{1, 2, 3, 4, 5, 6}, 2, 3))(t)
	defer x.Close()
	if s := must(x.Shape())(t); len(s) != 2 || s[0] != 2 || s[1] != 3 {
		t.Errorf("shape %v", s)
	}
	if d := must(x.DType())(t); d != F32 || d.String() != "f32" || d.Size() != 4 {
		t.Errorf("dtype %v", d)
	}
	ok(t, x.SetName("x"))
	if n := must(x.Name())(t); n != "x" {
		t.Errorf("name %q", n)
	}
	h := must(x.Cast(BF16))(t)
	defer h.Close()
	if n := must(h.NBytes())(t); n != 12 {
		t.Errorf("bf16 nbytes %d", n)
	}
	if _, err := ToSlice[int32](x); !errors.Is(err, ErrDType) {
		t.Errorf("ToSlice[int32] of f32: %v", err)
	}
	tr := must(Transpose(x, 0, 1))(t)
	defer tr.Close()
	if v := must(ToSlice[float32](tr))(t); fmt.Sprint(v) != "[1 4 2 5 3 6]" {
		t.Errorf("transpose %v", v)
	}
	c := must(Concat(0, x, x))(t)
	defer c.Close()
	if s := must(c.Shape())(t); s[0] != 4 {
		t.Errorf("concat shape %v", s)
	}
	if Version() != HeaderVersion || VersionString() == "" {
		t.Errorf("version %d (%s), header %d", Version(), VersionString(), HeaderVersion)
	}
}

func TestTrainingLossFalls(t *testing.T) {
	ctx := must(NewContext(nil))(t)
	defer ctx.Close()
	const n, in, hidden = 64, 8, 32
	xs, ys := make([]float32, n*in), make([]float32, n)
	for i := 0; i < n; i++ {
		sum := 0.0
		for j := 0; j < in; j++ {
			v := math.Sin(float64(i*in+j) * 0.37)
			xs[i*in+j] = float32(v)
			sum += v * float64(j%3-1)
		}
		ys[i] = float32(math.Tanh(sum))
	}
	x := must(FromSlice(ctx, xs, n, in))(t)
	y := must(FromSlice(ctx, ys, n, 1))(t)
	ws := make([]float32, hidden*in)
	for i := range ws {
		ws[i] = float32(math.Cos(float64(i)*1.7)) * 0.3
	}
	w1 := must(FromSlice(ctx, ws, hidden, in))(t)
	b1 := must(ctx.Zeros(F32, hidden))(t)
	w2 := must(FromSlice(ctx, ws[:hidden], 1, hidden))(t)
	b2 := must(ctx.Zeros(F32, 1))(t)
	params := []*Tensor{w1, b1, w2, b2}
	for _, p := range params {
		ok(t, p.SetRequiresGrad(true))
	}
	adamw := DefaultAdamWOptions()
	adamw.LR = 0.01
	opt := must(NewAdam(ctx, params, &adamw))(t)
	defer opt.Close()
	scaler := must(NewScaler(ctx, nil))(t)
	defer scaler.Close()
	ok(t, scaler.Attach(opt))
	autocast := must(NewAutocast(ctx, nil))(t) // F16
	defer autocast.Close()

	var first, last float32
	for step := 0; step < 150; step++ {
		ok(t, ctx.PushScope())
		ok(t, autocast.Enter())
		h := must(Linear(x, w1, b1, ActivationGELU))(t)
		out := must(Linear(h, w2, b2, ActivationNone))(t)
		loss := must(MSELoss(out, y, ReductionMean))(t)
		ok(t, autocast.Exit())
		last = must(ToSlice[float32](loss))(t)[0]
		if step == 0 {
			first = last
		}
		ok(t, loss.Backward(scaler))
		ok(t, scaler.Unscale(opt))
		ok(t, opt.ClipGradNorm(1.0, 2.0, false))
		ok(t, scaler.Step(opt))
		ok(t, scaler.Update())
		ok(t, opt.ZeroGrad())
		ok(t, ctx.PopScope())
	}
	if !(last < first/4) {
		t.Errorf("loss went from %g to %g", first, last)
	}
	if dtype := must(autocast.OpClass("linear"))(t); dtype != OpLowerPrecision {
		t.Errorf("linear's class %v", dtype)
	}
	if steps := must(opt.ParamSteps(w1))(t); steps == 0 || steps > 150 {
		t.Errorf("w1 took %d steps", steps)
	}

	// The state survives a checkpoint file round trip.
	for i, p := range params {
		ok(t, p.SetName(fmt.Sprintf("p%d", i)))
	}
	path := filepath.Join(t.TempDir(), "model.ampx")
	ok(t, SaveCheckpoint(path, params, opt, scaler))
	saved := must(ToSlice[float32](w2))(t)
	ok(t, w2.Fill(0))
	ok(t, LoadCheckpoint(path, params, opt, scaler))
	if restored := must(ToSlice[float32](w2))(t); fmt.Sprint(restored) != fmt.Sprint(saved) {
		t.Errorf("w2 after load %v, saved %v", restored, saved)
	}
}

func TestLRSchedule(t *testing.T) {
	ctx := must(NewContext(nil))(t)
	defer ctx.Close()
	w := must(FromSlice(ctx, []float32{0, 0}, 2))(t)
	defer w.Close()
	g := must(FromSlice(ctx, []float32{1, 1}, 2))(t)
	defer g.Close()
	ok(t, w.SetGrad(g))
	opts := DefaultSGDOptions()
	opts.LR = 0.5
	opt := must(NewSGD(ctx, []*Tensor{w}, &opts))(t)
	defer opt.Close()
	s := DefaultLRSchedule()
	s.WarmupSteps, s.WarmupStartFactor = 2, 0.5
	s.Decay, s.StepSize, s.Gamma = LRStep, 1, 0.5
	ok(t, opt.SetLRSchedule(0, &s))
	if got := must(opt.LRSchedule(0))(t); got != s {
		t.Errorf("schedule read back as %+v, set %+v", got, s)
	}
	// Rates 0.25, 0.375 (warm-up), then 0.5, 0.25, 0.125: exact in fp32.
	want := float32(0)
	for k, rate := range []float32{0.25, 0.375, 0.5, 0.25, 0.125} {
		if v := must(s.Value(0.5, int64(k)))(t); v != float64(rate) {
			t.Errorf("step %d: Value %v, want %v", k, v, rate)
		}
		ok(t, opt.Step())
		want -= rate
		if v := must(ToSlice[float32](w))(t); v[0] != want || v[1] != want {
			t.Errorf("step %d: parameter %v, want %v", k, v, want)
		}
	}
	if n := must(opt.StepCount())(t); n != 5 {
		t.Errorf("step count %d", n)
	}
	bad := DefaultLRSchedule()
	bad.WarmupSteps = -1
	if err := opt.SetLRSchedule(0, &bad); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("negative warm-up: %v", err)
	}
	bad = DefaultLRSchedule()
	bad.Decay = LRCosine
	if _, err := bad.Value(0.1, 0); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("cosine with total steps 0: %v", err)
	}
	if got := must(opt.LRSchedule(0))(t); got != s {
		t.Errorf("a refused schedule changed it to %+v", got)
	}
	ok(t, opt.SetLRSchedule(0, nil))
	if got := must(opt.LRSchedule(0))(t); got != DefaultLRSchedule() {
		t.Errorf("after nil: %+v", got)
	}
}

func TestDivExpLogSqrtRsqrt(t *testing.T) {
	ctx := must(NewContext(nil))(t)
	defer ctx.Close()
	x := must(FromSlice(ctx, []float32{0.25, 1, 4}, 3))(t)
	defer x.Close()
	q := must(Div(x, x))(t)
	if v := must(ToSlice[float32](q))(t); fmt.Sprint(v) != "[1 1 1]" {
		t.Errorf("x / x = %v", v)
	}
	q.Close()
	for _, c := range []struct {
		name string
		fn   func(*Tensor) (*Tensor, error)
		want func(float64) float64
	}{
		{"exp", Exp, math.Exp}, {"log", Log, math.Log}, {"sqrt", Sqrt, math.Sqrt},
		{"rsqrt", Rsqrt, func(v float64) float64 { return 1 / math.Sqrt(v) }},
	} {
		y := must(c.fn(x))(t)
		got := must(ToSlice[float32](y))(t)
		y.Close()
		for i, v := range []float64{0.25, 1, 4} {
			if w := c.want(v); math.Abs(float64(got[i])-w) > 4e-7*math.Max(1, math.Abs(w)) {
				t.Errorf("%s(%v) = %v, want %v", c.name, v, got[i], w)
			}
		}
	}
}

func TestScaledDotProductAttention(t *testing.T) {
	ctx := must(NewContext(nil))(t)
	defer ctx.Close()
	// One head, two positions, one feature; scores q_i k_j at scale 1.
	q := must(FromSlice(ctx, []float32{1, 2}, 1, 1, 2, 1))(t)
	defer q.Close()
	v := must(FromSlice(ctx, []float32{3, 5}, 1, 1, 2, 1))(t)
	defer v.Close()
	out := must(ScaledDotProductAttention(q, q, v, nil, AttentionOptions{Causal: true}))(t)
	got := must(ToSlice[float32](out))(t)
	out.Close()
	p1 := 1 / (1 + math.Exp(-2)) // e^4 / (e^2 + e^4)
	want := []float64{3, 3*(1-p1) + 5*p1}
	for i := range want {
		if math.Abs(float64(got[i])-want[i]) > 1e-6 {
			t.Errorf("out[%d] = %v, want %v", i, got[i], want[i])
		}
	}
	// [H, T, D]: one batch of heads, as torch; a 1-D q is refused.
	heads := must(FromSlice(ctx, []float32{1, 2}, 1, 2, 1))(t)
	defer heads.Close()
	values := must(FromSlice(ctx, []float32{3, 5}, 1, 2, 1))(t)
	defer values.Close()
	out3 := must(ScaledDotProductAttention(heads, heads, values, nil, AttentionOptions{Causal: true}))(t)
	defer out3.Close()
	got3 := must(ToSlice[float32](out3))(t)
	for i := range want {
		if math.Abs(float64(got3[i])-want[i]) > 1e-6 {
			t.Errorf("3-D out[%d] = %v, want %v", i, got3[i], want[i])
		}
	}
	flat := must(FromSlice(ctx, []float32{1, 2}, 2))(t)
	defer flat.Close()
	if _, err := ScaledDotProductAttention(flat, flat, flat, nil, AttentionOptions{}); err == nil {
		t.Error("a 1-D q was accepted")
	}
}

func TestConvAndPooling(t *testing.T) {
	ctx := must(NewContext(nil))(t)
	defer ctx.Close()
	// A 3x3 image 1..9 and a 2x2 kernel of ones: each output sums a 2x2 block.
	x := must(FromSlice(ctx, []float32{1, 2, 3, 4, 5, 6, 7, 8, 9}, 1, 1, 3, 3))(t)
	defer x.Close()
	w := must(FromSlice(ctx, []float32{1, 1, 1, 1}, 1, 1, 2, 2))(t)
	defer w.Close()
	check := func(name string, y *Tensor, want []float32) {
		t.Helper()
		defer y.Close()
		got := must(ToSlice[float32](y))(t)
		if len(got) != len(want) {
			t.Fatalf("%s: %v, want %v", name, got, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("%s: %v, want %v", name, got, want)
				return
			}
		}
	}
	check("conv", must(Conv2d(x, w, nil, Conv2dOptions{}))(t), []float32{12, 16, 24, 28})
	check("strided conv", must(Conv2d(x, w, nil, Conv2dOptions{Stride: [2]int64{2, 2}, Padding: [2]int64{1, 1}}))(t),
		[]float32{1, 5, 11, 28})
	unit := Pool2dOptions{Stride: [2]int64{1, 1}}
	check("max", must(MaxPool2d(x, 2, 2, unit))(t), []float32{5, 6, 8, 9})
	check("avg", must(AvgPool2d(x, 2, 2, unit))(t), []float32{3, 4, 6, 7})
	check("global", must(GlobalAvgPool2d(x))(t), []float32{5})
	if _, err := Conv2d(x, w, nil, Conv2dOptions{Padding: [2]int64{-1, 0}}); err == nil {
		t.Error("negative padding was accepted")
	}
}

func TestBlockOps(t *testing.T) {
	ctx := must(NewContext(nil))(t)
	defer ctx.Close()
	col := must(FromSlice(ctx, []float32{1, 2}, 2, 1))(t)
	defer col.Close()
	row := must(FromSlice(ctx, []float32{10, 20, 30}, 3))(t)
	defer row.Close()
	grid := must(Add(col, row))(t)
	defer grid.Close()
	check := func(name string, x *Tensor, want string) {
		t.Helper()
		if got := fmt.Sprint(must(ToSlice[float32](x))(t)); got != want {
			t.Errorf("%s = %s, want %s", name, got, want)
		}
		x.Close()
	}
	check("col + row", must(Add(col, row))(t), "[11 21 31 12 22 32]")
	check("sum over 0", must(SumDims(grid, []int32{0}, false))(t), "[23 43 63]")
	check("amax", must(Amax(grid, nil, false))(t), "[32]")
	check("mean over -1", must(MeanDims(grid, []int32{-1}, true))(t), "[21 22]")
	check("permute", must(Permute(grid, 1, 0))(t), "[11 12 21 22 31 32]")
	check("rms_norm", must(RMSNorm(col, nil, 0))(t), "[1 1]")
	sm := must(SoftmaxDim(grid, 0))(t)
	if v := must(ToSlice[float32](sm))(t); math.Abs(float64(v[0])-0.26894143) > 1e-6 {
		t.Errorf("softmax over 0 = %v", v)
	}
	sm.Close()
	if _, err := Permute(grid, 0, 0); err == nil {
		t.Error("a repeated dimension was accepted")
	}
}

func TestSplitMaskPowRotary(t *testing.T) {
	ctx := must(NewContext(nil))(t)
	defer ctx.Close()
	x := must(FromSlice(ctx, []float32{1, 2, 3, 4, 5, 6}, 2, 3))(t)
	defer x.Close()
	parts := must(Split(x, 1, 1, 2))(t)
	if got := fmt.Sprint(must(ToSlice[float32](parts[1]))(t)); got != "[2 3 5 6]" {
		t.Errorf("split = %s", got)
	}
	chunks := must(Chunk(x, 2, 1))(t)
	if len(chunks) != 2 {
		t.Errorf("chunk made %d pieces", len(chunks))
	}
	for _, p := range append(parts, chunks...) {
		p.Close()
	}
	mask := must(FromSlice(ctx, []int32{0, 1, 0}, 3))(t)
	defer mask.Close()
	filled := must(MaskedFill(x, mask, -1))(t)
	if got := fmt.Sprint(must(ToSlice[float32](filled))(t)); got != "[1 -1 3 4 -1 6]" {
		t.Errorf("masked_fill = %s", got)
	}
	filled.Close()
	sq := must(Pow(x, 2))(t)
	if got := fmt.Sprint(must(ToSlice[float32](sq))(t)); got != "[1 4 9 16 25 36]" {
		t.Errorf("pow = %s", got)
	}
	sq.Close()
	pair := must(FromSlice(ctx, []float32{1, 2}, 1, 2))(t)
	defer pair.Close()
	c := must(FromSlice(ctx, []float32{0}, 1, 1))(t)
	defer c.Close()
	s := must(FromSlice(ctx, []float32{1}, 1, 1))(t)
	defer s.Close()
	r := must(RotaryEmbedding(pair, c, s, false))(t)
	if got := fmt.Sprint(must(ToSlice[float32](r))(t)); got != "[-2 1]" {
		t.Errorf("rotary = %s", got)
	}
	r.Close()
}

func TestCrossEntropyEx(t *testing.T) {
	ctx := must(NewContext(nil))(t)
	defer ctx.Close()
	// Full smoothing over two equal logits: the uniform target, loss ln 2.
	logits := must(FromSlice(ctx, []float32{0, 0}, 1, 2))(t)
	defer logits.Close()
	label := must(FromSlice(ctx, []int64{1}, 1))(t)
	defer label.Close()
	ce := must(CrossEntropyEx(logits, label, nil, ReductionMean, -100, 1))(t)
	defer ce.Close()
	if v := must(ToSlice[float32](ce))(t); math.Abs(float64(v[0])-math.Ln2) > 1e-6 {
		t.Errorf("loss = %v, want ln 2", v)
	}
}
