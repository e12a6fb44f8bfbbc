package ampx

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// fp8Format is an OCP FP8 format as its definition gives it.
type fp8Format struct {
	ebits, mbits, bias int
	max                float64
	e4m3               bool
}

var (
	formatE4M3 = fp8Format{4, 3, 7, 448, true}
	formatE5M2 = fp8Format{5, 2, 15, 57344, false}
)

func (f fp8Format) decode(code uint8) float64 {
	sign := 1.0
	if code&0x80 != 0 {
		sign = -1
	}
	e := int(code>>f.mbits) & (1<<f.ebits - 1)
	m := int(code) & (1<<f.mbits - 1)
	if f.e4m3 && e == 15 && m == 7 {
		return math.NaN()
	}
	if !f.e4m3 && e == 31 {
		if m == 0 {
			return sign * math.Inf(1)
		}
		return math.NaN()
	}
	if e == 0 {
		return sign * float64(m) * math.Pow(2, float64(1-f.bias-f.mbits))
	}
	return sign * (1 + float64(m)/float64(int(1)<<f.mbits)) * math.Pow(2, float64(e-f.bias))
}

// encode rounds to nearest, ties to the even code; beyond max: +-max when
// saturating, else NaN (E4M3) or +-inf (E5M2). In float64.
func (f fp8Format) encode(x float64, saturate bool) uint8 {
	if math.IsNaN(x) {
		return 0x7f
	}
	var sign uint8
	if math.Signbit(x) {
		sign = 0x80
	}
	a := math.Abs(x)
	maxCode := uint8(0x7b)
	if f.e4m3 {
		maxCode = 0x7e
	}
	ulp := f.max - f.decode(maxCode-1)
	bestD, best := math.Inf(1), uint8(0)
	for code := uint8(0); code <= maxCode+1; code++ {
		v := f.max + ulp
		if code <= maxCode {
			v = f.decode(code)
		}
		d := math.Abs(v - a)
		if d < bestD || (d == bestD && code&1 == 0) {
			bestD, best = d, code
		}
	}
	if best > maxCode || math.IsInf(a, 0) {
		switch {
		case saturate:
			return sign | maxCode
		case f.e4m3:
			return sign | 0x7f
		default:
			return sign | 0x7c
		}
	}
	return sign | best
}

func fp8Values() []float32 {
	v := []float32{0, float32(math.Copysign(0, -1)), 1, 448, 464, 465, 480, 500, -500, 57344, 61439, 61440, 65536,
		float32(math.Inf(1)), float32(math.Inf(-1)), 1.0 / 512, 1.0 / 1024, 3.0 / 1024, 1.0 / 65536, 1.0 / 131072,
		3.0 / 131072, 1.0625, 1.1875, 0.1, -0.3, 1e-6}
	state := uint32(12345)
	for i := 0; i < 500; i++ {
		state = state*1103515245 + 12345
		mantissa := float64(uint16(state>>8))/65536 + 0.5
		exponent := int(state>>24)%36 - 20
		sign := 1.0
		if state&1 != 0 {
			sign = -1
		}
		v = append(v, float32(sign*math.Ldexp(mantissa, exponent)))
	}
	return v
}

func bytesOf(t *testing.T, x *Tensor) []byte {
	t.Helper()
	n := must(x.NBytes())(t)
	out := make([]byte, n)
	ok(t, x.ToHost(out))
	return out
}

func TestFP8CastsAgainstTheDefinition(t *testing.T) {
	ctx := must(NewContext(nil))(t)
	defer ctx.Close()
	v := fp8Values()
	src := must(FromSlice(ctx, v, int64(len(v))))(t)
	// Cast follows torch: E4M3 saturates, E5M2 overflows to inf.
	for _, c := range []struct {
		dtype    DType
		f        fp8Format
		overflow FP8Overflow // 0: Cast
		saturate bool
	}{{F8E4M3, formatE4M3, 0, true}, {F8E5M2, formatE5M2, 0, false}, {F8E4M3, formatE4M3, FP8NoSaturate, false},
		{F8E5M2, formatE5M2, FP8Saturate, true}} {
		var dst *Tensor
		if c.overflow == 0 {
			dst = must(src.Cast(c.dtype))(t)
		} else {
			dst = must(ctx.Empty(c.dtype, int64(len(v))))(t)
			ok(t, dst.CopyFP8From(src, c.overflow))
		}
		bits := bytesOf(t, dst)
		for i, x := range v {
			if want := c.f.encode(float64(x), c.saturate); bits[i] != want {
				t.Fatalf("%v overflow %d of %g: %#x, want %#x", c.dtype, c.overflow, x, bits[i], want)
			}
		}
		dst.Close()
	}
	named := must(FromSlice(ctx, []float32{448, 500, 1.0 / 512, 1.0 / 1024, 1.0625, 1.1875}, 6))(t)
	if got := bytesOf(t, must(named.Cast(F8E4M3))(t)); !reflect.DeepEqual(got, []byte{0x7e, 0x7e, 0x01, 0x00, 0x38, 0x3a}) {
		t.Fatalf("E4M3 boundaries: % x", got)
	}
	named = must(FromSlice(ctx, []float32{57344, 61440, float32(math.Inf(1))}, 3))(t)
	if got := bytesOf(t, must(named.Cast(F8E5M2))(t)); !reflect.DeepEqual(got, []byte{0x7b, 0x7c, 0x7c}) {
		t.Fatalf("E5M2 boundaries: % x", got)
	}
	codes := make([]byte, 256)
	for i := range codes {
		codes[i] = byte(i)
	}
	for _, c := range []struct {
		dtype DType
		f     fp8Format
	}{{F8E4M3, formatE4M3}, {F8E5M2, formatE5M2}} {
		fp8 := must(ctx.FromHost(c.dtype, []int64{256}, codes))(t)
		back := must(ToSlice[float32](must(fp8.Cast(F32))(t)))(t)
		for code, x := range back {
			want := c.f.decode(uint8(code))
			if math.IsNaN(want) != math.IsNaN(float64(x)) || (!math.IsNaN(want) && float64(x) != want) {
				t.Fatalf("%v code %#x decodes to %g, want %g", c.dtype, code, x, want)
			}
		}
	}
}

// teScale is Transformer Engine's default delayed update (the fused CUDA
// kernel of common/recipe/delayed_scaling.cu): amax the history's max as
// fmaxf takes it (NaN skipped), (fp8_max * 2^-margin) / amax in float32;
// the previous scale for a 0 or non-finite amax; MaxFloat32 for an
// infinite quotient. (A step amax of 0 is not rolled in: see the caller.)
func teScale(fp8Max float32, history []float32, previous float32, margin int) float32 {
	var amax float32
	for _, a := range history {
		if a > amax {
			amax = a
		}
	}
	if amax == 0 || math.IsInf(float64(amax), 0) {
		return previous
	}
	scale := fp8Max * float32(math.Ldexp(1, -margin)) / amax
	if math.IsInf(float64(scale), 0) {
		return math.MaxFloat32
	}
	return scale
}

func TestFP8DelayedScalingFollowsTE(t *testing.T) {
	ctx := must(NewContext(nil))(t)
	defer ctx.Close()
	opts := DefaultFP8RecipeOptions()
	opts.AmaxHistoryLen, opts.Margin = 4, 1
	recipe := must(NewFP8Recipe(ctx, &opts))(t)
	defer recipe.Close()
	fwd := must(recipe.AddTensor(FP8Forward, "x"))(t)
	bwd := must(recipe.AddTensor(FP8Backward, "dy"))(t)
	if n := must(recipe.SlotCount())(t); n != 2 {
		t.Fatalf("%d slots", n)
	}
	nan := float32(math.NaN())
	amaxes := []float32{0, 3, 100, nan /* nothing quantized */, 0.5, float32(math.Inf(1)), 2, 1, 1, 1, 1, 1e-40, 0.25}
	history := make([]float32, 4)
	scales := map[int64]float32{fwd: 1, bwd: 1}
	slots := []struct {
		slot int64
		f    fp8Format
		max  float32
	}{{fwd, formatE4M3, 448}, {bwd, formatE5M2, 57344}}
	for _, amax := range amaxes {
		for _, s := range slots {
			scale := must(ToSlice[float32](must(recipe.ScaleTensor(s.slot, false))(t)))(t)[0]
			if scale != scales[s.slot] {
				t.Fatalf("scale tensor %g, want %g", scale, scales[s.slot])
			}
			if !math.IsNaN(float64(amax)) {
				x := []float32{amax / 2, -amax, 0}
				q := must(recipe.Quantized(s.slot, must(FromSlice(ctx, x, 3))(t)))(t)
				got := bytesOf(t, q)
				for i, xi := range x {
					if want := s.f.encode(float64(xi*scale), true); got[i] != want {
						t.Fatalf("amax %g: quantized %g to %#x, want %#x", amax, xi, got[i], want)
					}
				}
			}
		}
		ok(t, recipe.Update())
		step := amax
		if math.IsNaN(float64(amax)) {
			step = 0
		}
		if step != 0 { // a zero step amax leaves history and scale as they were
			history = append(history[1:], step)
		}
		for _, s := range slots {
			if step != 0 {
				scales[s.slot] = teScale(s.max, history, scales[s.slot], 1)
			}
			info := must(recipe.Slot(s.slot))(t)
			if !reflect.DeepEqual(info.History, history) || info.Scale != scales[s.slot] || info.ScaleInv != 1/scales[s.slot] {
				t.Fatalf("after amax %g: %+v, want history %v scale %g", amax, info, history, scales[s.slot])
			}
		}
	}
	if info := must(recipe.Slot(bwd))(t); info.Name != "dy" || info.DType != F8E5M2 || info.Role != FP8Backward {
		t.Fatalf("%+v", info)
	}
}

func TestFP8DoctorAndTransposed(t *testing.T) {
	ctx := must(NewContext(nil))(t)
	defer ctx.Close()
	recipe := must(NewFP8Recipe(ctx, nil))(t)
	defer recipe.Close()
	slot := must(recipe.AddTensor(FP8Forward, "act"))(t)
	// At scale 1: 1e-4 flushes in E4M3 only, 1000 saturates E4M3 only.
	r := must(recipe.Inspect(slot, must(FromSlice(ctx, []float32{1e-4, 1000, 1, 0}, 4))(t)))(t)
	if r.Count != 3 || math.Abs(r.FlushedE4M3-1.0/3) > 1e-12 || math.Abs(r.SaturatedE4M3-1.0/3) > 1e-12 ||
		r.FlushedE5M2 != 0 || r.SaturatedE5M2 != 0 || r.Scale != 1 || r.DType != F8E4M3 {
		t.Fatalf("%+v", r)
	}
	if s := must(recipe.Summary())(t); !strings.Contains(s, "act") {
		t.Fatalf("summary %q", s)
	}
	x := []float32{-2.5, -1.5, -0.5, 0.5, 1.5, 2.5}
	src := must(FromSlice(ctx, x, 2, 3))(t)
	qt := must(ctx.Empty(F8E4M3, 3, 2))(t)
	ok(t, recipe.Quantize(slot, src, nil, qt))
	got := bytesOf(t, qt)
	for i := 0; i < 6; i++ {
		if want := formatE4M3.encode(float64(x[(i%2)*3+i/2]), true); got[i] != want {
			t.Fatalf("transposed[%d] %#x, want %#x", i, got[i], want)
		}
	}
}

func TestFP8TrainingUnderAutocast(t *testing.T) {
	ctx := must(NewContext(nil))(t)
	defer ctx.Close()
	s := uint32(1)
	rand := func(n int, scale float32) []float32 {
		out := make([]float32, n)
		for i := range out {
			s = s*1664525 + 1013904223
			out[i] = (float32(s>>8)/float32(1<<24)*2 - 1) * scale
		}
		return out
	}
	xv, tw := rand(32*16, 1), rand(16*16, 1)
	yv := make([]float32, 32*16)
	for i := range yv {
		for k := 0; k < 16; k++ {
			yv[i] += xv[(i/16)*16+k] * tw[(i%16)*16+k]
		}
	}
	x := must(FromSlice(ctx, xv, 32, 16))(t)
	y := must(FromSlice(ctx, yv, 32, 16))(t)
	w := must(FromSlice(ctx, rand(256, 0.1), 16, 16))(t)
	ok(t, w.SetRequiresGrad(true))
	ok(t, w.SetName("w"))
	sgd := DefaultSGDOptions()
	sgd.LR = 0.5
	opt := must(NewSGD(ctx, []*Tensor{w}, &sgd))(t)
	defer opt.Close()
	opts := DefaultFP8RecipeOptions()
	opts.AmaxHistoryLen = 16
	recipe := must(NewFP8Recipe(ctx, &opts))(t)
	defer recipe.Close()
	ao := DefaultAutocastOptions()
	ao.DType = BF16
	policy := must(NewAutocast(ctx, &ao))(t)
	defer policy.Close()
	ok(t, policy.SetFP8(recipe, 0))
	var losses []float32
	for step := 0; step < 12; step++ {
		ok(t, opt.ZeroGrad())
		ok(t, policy.Enter())
		loss := must(MSELoss(must(Linear(x, w, nil, ActivationNone))(t), y, ReductionMean))(t)
		ok(t, policy.Exit())
		ok(t, loss.Backward(nil))
		losses = append(losses, must(ToSlice[float32](loss))(t)[0])
		loss.Close()
		ok(t, opt.Step())
		ok(t, recipe.Update())
	}
	for i := 1; i < len(losses); i++ {
		if losses[i] >= losses[i-1] {
			t.Fatalf("loss did not fall: %v", losses)
		}
	}
	if losses[11] >= 0.6*losses[0] {
		t.Fatalf("loss fell too little: %v", losses)
	}
	stats := must(policy.FP8Stats())(t)
	if stats.FP8Products != 12 || stats.Fallbacks != 0 {
		t.Fatalf("%+v", stats)
	}
	var names []string
	for i := int64(0); i < must(recipe.SlotCount())(t); i++ {
		names = append(names, must(recipe.Slot(i))(t).Name)
	}
	if !reflect.DeepEqual(names, []string{"w:input", "w:weight", "w:grad_output"}) {
		t.Fatalf("slots %v", names)
	}
	ok(t, policy.SetFP8(recipe, 1<<40))
	ok(t, policy.Enter())
	must(Linear(x, w, nil, ActivationNone))(t).Close()
	ok(t, policy.Exit())
	if stats := must(policy.FP8Stats())(t); stats.Fallbacks != 1 || stats.LastFallback == "" {
		t.Fatalf("%+v", stats)
	}
	ok(t, policy.SetFP8(nil, FP8DefaultMinGemmSize))

	path := filepath.Join(t.TempDir(), "fp8.ckpt")
	ok(t, SaveCheckpointFP8(path, []*Tensor{w}, nil, nil, recipe))
	restored := must(NewFP8Recipe(ctx, &opts))(t)
	defer restored.Close()
	ok(t, LoadCheckpointFP8(path, []*Tensor{w}, nil, nil, restored))
	if a, b := must(restored.Slot(1))(t), must(recipe.Slot(1))(t); !reflect.DeepEqual(a, b) {
		t.Fatalf("restored %+v, saved %+v", a, b)
	}
	other := must(NewFP8Recipe(ctx, nil))(t)
	defer other.Close()
	if err := LoadCheckpointFP8(path, []*Tensor{w}, nil, nil, other); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("other options: %v", err)
	}
	_ = os.Remove(path)
}

func TestFP8BadInput(t *testing.T) {
	ctx := must(NewContext(nil))(t)
	defer ctx.Close()
	opts := DefaultFP8RecipeOptions()
	opts.AmaxHistoryLen = 0
	if _, err := NewFP8Recipe(ctx, &opts); !errors.Is(err, ErrInvalidArgument) || !strings.Contains(err.Error(), "amax_history_len") {
		t.Fatalf("history length 0: %v", err)
	}
	opts = DefaultFP8RecipeOptions()
	opts.Margin = -1
	if _, err := NewFP8Recipe(ctx, &opts); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("margin -1: %v", err)
	}
	recipe := must(NewFP8Recipe(ctx, nil))(t)
	slot := must(recipe.AddTensor(FP8Forward, "a"))(t)
	if _, err := recipe.AddTensor(FP8Forward, "a"); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("name in use: %v", err)
	}
	src := must(FromSlice(ctx, []float32{1}, 1))(t)
	e5 := must(ctx.Empty(F8E5M2, 1))(t)
	if err := recipe.Quantize(slot, src, e5, nil); !errors.Is(err, ErrDType) {
		t.Fatalf("wrong format: %v", err)
	}
	if err := recipe.Quantize(9, src, e5, nil); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("slot out of range: %v", err)
	}
	f32 := must(ctx.Empty(F32, 1))(t)
	if err := f32.CopyFP8From(src, FP8Saturate); !errors.Is(err, ErrDType) {
		t.Fatalf("F32 destination: %v", err)
	}
	if _, err := Add(e5, e5); !errors.Is(err, ErrDType) {
		t.Fatalf("add of FP8: %v", err)
	}
	policy := must(NewAutocast(ctx, nil))(t)
	defer policy.Close()
	if err := policy.SetFP8(recipe, -1); !errors.Is(err, ErrInvalidArgument) {
		t.Fatalf("negative size: %v", err)
	}
	recipe.Close()
	if err := recipe.Update(); err == nil {
		t.Fatal("update of a closed recipe succeeded")
	}
	if _, err := recipe.SlotCount(); err == nil {
		t.Fatal("slot count of a closed recipe succeeded")
	}
	if err := policy.SetFP8(recipe, 0); !errors.Is(err, ErrStaleHandle) {
		t.Fatalf("closed recipe: %v", err)
	}
	if err := SaveCheckpointFP8(filepath.Join(t.TempDir(), "x"), nil, nil, nil, recipe); !errors.Is(err, ErrStaleHandle) {
		t.Fatalf("closed recipe: %v", err)
	}
}
