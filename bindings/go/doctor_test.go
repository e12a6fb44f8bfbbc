package ampx

import (
	"errors"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// typed returns a tensor of dtype holding values (exact in dtype: the
// tests plant powers of two).
func typed(t *testing.T, ctx *Context, dtype DType, values []float64) *Tensor {
	t.Helper()
	v := make([]float32, len(values))
	for i, x := range values {
		v[i] = float32(x)
	}
	f := must(FromSlice(ctx, v, int64(len(v))))(t)
	if dtype == F32 {
		return f
	}
	defer f.Close()
	return must(f.Cast(dtype))(t)
}

// planted returns a leaf of dtype holding value everywhere, with grad
// attached as its gradient.
func planted(t *testing.T, ctx *Context, dtype DType, name string, value float64, grad []float64) *Tensor {
	t.Helper()
	p := typed(t, ctx, dtype, repeat(value, len(grad)))
	ok(t, p.SetRequiresGrad(true))
	if name != "" {
		ok(t, p.SetName(name))
	}
	g := typed(t, ctx, dtype, grad)
	ok(t, p.SetGrad(g))
	g.Close()
	return p
}

// bins returns the non-empty bins of a histogram.
func bins(h [DoctorBins]int64) map[int]int64 {
	out := map[int]int64{}
	for i, c := range h {
		if c != 0 {
			out[i] = c
		}
	}
	return out
}

func sameBins(t *testing.T, what string, got map[int]int64, want map[int]int64) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: bins %v, want %v", what, got, want)
		return
	}
	for b, c := range want {
		if got[b] != c {
			t.Errorf("%s: bins %v, want %v", what, got, want)
			return
		}
	}
}

func repeat(v float64, n int) []float64 {
	out := make([]float64, n)
	for i := range out {
		out[i] = v
	}
	return out
}

func concat(parts ...[]float64) []float64 {
	var out []float64
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func TestDoctorBinsAndNames(t *testing.T) {
	if DoctorBins != 84 || DoctorBinBinade(-64) != 2 || DoctorBinBinade(0) != 66 ||
		DoctorBinBinade(15) != DoctorBinHuge-1 || DoctorBinBinade(16) != -1 {
		t.Errorf("bins: %d, binade(-64) %d, binade(0) %d, binade(15) %d", DoctorBins,
			DoctorBinBinade(-64), DoctorBinBinade(0), DoctorBinBinade(15))
	}
	if FindingScaleTooLow.String() != "scale_too_low" || FindingScaleOscillation.String() != "scale_oscillation" ||
		FindingCode(99).String() != "FindingCode(99)" {
		t.Errorf("finding names %v %v %v", FindingScaleTooLow, FindingScaleOscillation, FindingCode(99))
	}
	if CauseNoLossScaling.String() != "no_loss_scaling" || CauseNone.String() != "" {
		t.Errorf("cause names %q %q", CauseNoLossScaling, CauseNone)
	}
	if d := DefaultDoctorOptions(); d.Interval != 100 || d.History != 4096 {
		t.Errorf("defaults %+v", d)
	}
}

// The planted gradients of bindings/python/tests/test_doctor.py: exact
// powers of two land in bin 2 + e + 64, exact zeros in bin 0.
func TestDoctorPlantedF32GradientWithoutScaler(t *testing.T) {
	ctx := must(NewContext(nil))(t)
	defer ctx.Close()
	grads := concat(repeat(0, 3), repeat(math.Ldexp(1, -30), 5), repeat(math.Ldexp(1, -20), 7),
		repeat(1, 11), repeat(-math.Ldexp(1, -14), 2), []float64{1024})
	extremes := []float64{math.Ldexp(1, -70), 65504, math.Ldexp(1, 20), math.Inf(1), math.NaN()}
	p := planted(t, ctx, F32, "planted", 0, grads)
	q := planted(t, ctx, F32, "", 0, extremes)
	sgd := DefaultSGDOptions()
	sgd.LR = 0
	opt := must(NewSGD(ctx, []*Tensor{p, q}, &sgd))(t)
	one := DoctorOptions{Interval: 1, History: 4096}
	doctor := must(NewDoctor(ctx, opt, &one))(t)
	defer doctor.Close()
	if stats := must(doctor.Params())(t); len(stats) != 0 {
		t.Errorf("statistics before any step: %v", stats)
	}
	if _, err := doctor.ParamStats(0); !errors.Is(err, ErrOrder) {
		t.Errorf("ParamStats before a sample: %v", err)
	}
	ok(t, opt.Step())

	o := must(doctor.Examine())(t)
	if o != (DoctorOverview{Steps: 1, SampleStep: 1, SampleScale: 1, ParamCount: 2, HistoryCount: 1,
		FindingCount: o.FindingCount}) {
		t.Errorf("overview %+v", o)
	}
	stats := must(doctor.Params())(t)
	if len(stats) != 2 {
		t.Fatalf("%d parameters", len(stats))
	}
	s := stats[0]
	if s.Index != 0 || s.Name != "planted" || s.ParamDType != F32 || s.GradDType != F32 ||
		s.Elements != int64(len(grads)) {
		t.Errorf("stats 0: %+v", s)
	}
	sameBins(t, "planted", bins(s.Histogram), map[int]int64{0: 3, DoctorBinBinade(-30): 5,
		DoctorBinBinade(-20): 7, DoctorBinBinade(0): 11, DoctorBinBinade(-14): 2, DoctorBinBinade(10): 1})
	n := float64(len(grads))
	// fp16 zero: |u| <= 2^-25 (zeros and 2^-30); subnormal: 2^-20.
	if s.FP16ZeroUnscaled != 8/n || s.FP16SubnormalUnscaled != 7/n || s.FP16ZeroScaled != 8/n ||
		s.FP16SubnormalScaled != 7/n || s.FP16OverflowScaled != 0 {
		t.Errorf("fp16 fractions %+v", s)
	}
	if s.Amax != 1024 || s.AmaxScaled != 1024 || s.Headroom != 5 || s.HeadroomUnbounded {
		t.Errorf("amax %g %g headroom %d", s.Amax, s.AmaxScaled, s.Headroom) // 1024 * 2^5 <= 65504
	}
	norm := 0.0
	for _, g := range grads {
		norm += g * g
	}
	if math.Abs(s.GradNorm-math.Sqrt(norm)) > 1e-9 {
		t.Errorf("grad norm %g, want %g", s.GradNorm, math.Sqrt(norm))
	}
	if s.LostUpdateFraction != -1 || s.LostWithoutMasterFraction != -1 {
		t.Errorf("fp32 parameters lose no updates: %g %g", s.LostUpdateFraction, s.LostWithoutMasterFraction)
	}
	e := stats[1]
	sameBins(t, "extremes", bins(e.Histogram), map[int]int64{DoctorBinTiny: 1, DoctorBinBinade(15): 1,
		DoctorBinHuge: 1, DoctorBinNonfinite: 2})
	if e.Name != "" || e.FP16OverflowScaled != 3.0/5 || e.FP16ZeroUnscaled != 1.0/5 ||
		e.Amax != math.Ldexp(1, 20) || e.Headroom != -5 {
		t.Errorf("extremes %+v", e)
	}
	if again := must(doctor.ParamStats(1))(t); again != e {
		t.Errorf("ParamStats(1) %+v differs from Params()[1]", again)
	}
	// Without a scaler only sampled steps are recorded; parameter 1's
	// non-finite gradients mark the step as overflowed.
	h := must(doctor.History())(t)
	if len(h) != 1 || h[0].Step != 1 || h[0].Scale != 1 || !h[0].Sampled || !h[0].FoundInf ||
		h[0].FirstOverflowParam != 1 || h[0].OverflowParams != 1 {
		t.Errorf("history %+v", h)
	}
	for _, index := range []int{2, -1, 1 << 40} {
		if _, err := doctor.ParamStats(index); !errors.Is(err, ErrInvalidArgument) {
			t.Errorf("ParamStats(%d): %v", index, err)
		}
	}
}

func TestDoctorPlantedF16GradientWithScaler(t *testing.T) {
	ctx := must(NewContext(nil))(t)
	defer ctx.Close()
	// Stored (scaled by 1024) values x; the true ones are u = x / 1024.
	stored := concat(repeat(0, 4), repeat(math.Ldexp(1, -14), 3), repeat(1, 5), repeat(math.Ldexp(1, -24), 2))
	p := planted(t, ctx, F16, "w16", 0, stored)
	sgd := DefaultSGDOptions()
	sgd.LR = 0
	opt := must(NewSGD(ctx, []*Tensor{p}, &sgd))(t)
	defer opt.Close()
	so := DefaultScalerOptions()
	so.InitScale = 1024
	scaler := must(NewScaler(ctx, &so))(t)
	defer scaler.Close()
	doctor := must(NewDoctor(ctx, opt, &DoctorOptions{Interval: 1, History: 16}))(t)
	ok(t, scaler.Step(opt))
	ok(t, scaler.Update())
	if o := must(doctor.Examine())(t); o.SampleScale != 1024 {
		t.Errorf("sample scale %g", o.SampleScale)
	}
	s := must(doctor.ParamStats(0))(t)
	doctor.Close()
	doctor.Close()
	if _, err := doctor.Examine(); err == nil {
		t.Error("Examine on a closed doctor succeeded")
	}
	n := float64(len(stored))
	if s.ParamDType != F16 || s.GradDType != F16 || s.Elements != int64(len(stored)) {
		t.Errorf("stats %+v", s)
	}
	// u: 0, 2^-24, 2^-10, 2^-34.
	sameBins(t, "f16", bins(s.Histogram), map[int]int64{0: 4, DoctorBinBinade(-24): 3,
		DoctorBinBinade(-10): 5, DoctorBinBinade(-34): 2})
	if s.FP16ZeroUnscaled != 6/n || s.FP16SubnormalUnscaled != 3/n || // 0, 2^-34; 2^-24
		s.FP16ZeroScaled != 4/n || s.FP16SubnormalScaled != 2/n || s.FP16OverflowScaled != 0 {
		t.Errorf("fp16 fractions %+v", s)
	}
	if s.Amax != math.Ldexp(1, -10) || s.AmaxScaled != 1 || s.Headroom != 15 {
		t.Errorf("amax %g %g headroom %d", s.Amax, s.AmaxScaled, s.Headroom)
	}
	if s.LostUpdateFraction != 0 || s.LostWithoutMasterFraction != 0 { // lr 0: nothing changed
		t.Errorf("lost updates %g %g", s.LostUpdateFraction, s.LostWithoutMasterFraction)
	}
	// Closed, the optimizer takes a doctor again.
	again := must(NewDoctor(ctx, opt, nil))(t)
	defer again.Close()
	if again.Interval() != 100 || again.HistoryCapacity() != 4096 {
		t.Errorf("defaults %d %d", again.Interval(), again.HistoryCapacity())
	}
}

func TestDoctorHistoryFindingsAndReport(t *testing.T) {
	ctx := must(NewContext(nil))(t)
	defer ctx.Close()
	// Every scaled step is recorded with its overflow; every 2nd is sampled.
	a := planted(t, ctx, F16, "", 0, repeat(0.25, 64))
	b := planted(t, ctx, F16, "", 0, repeat(1, 64))
	sgd := DefaultSGDOptions()
	sgd.LR = 0
	opt := must(NewSGD(ctx, []*Tensor{a, b}, &sgd))(t)
	doctor := must(NewDoctor(ctx, opt, &DoctorOptions{Interval: 2, History: 4096}))(t)
	so := DefaultScalerOptions()
	so.InitScale = 1024
	scaler := must(NewScaler(ctx, &so))(t)
	for step := 1; step <= 5; step++ {
		gb := repeat(1, 64)
		if step == 3 {
			gb[7] = math.Inf(1)
		}
		ok(t, a.SetGrad(typed(t, ctx, F16, repeat(0.25, 64))))
		ok(t, b.SetGrad(typed(t, ctx, F16, gb)))
		ok(t, scaler.Step(opt))
		ok(t, scaler.Update())
	}
	h := must(doctor.History())(t)
	want := []DoctorSample{
		{Step: 1, Scale: 1024, Sampled: true, FirstOverflowParam: -1},
		{Step: 2, Scale: 1024, FirstOverflowParam: -1},
		{Step: 3, Scale: 1024, FoundInf: true, Sampled: true, FirstOverflowParam: 1, OverflowParams: 1},
		{Step: 4, Scale: 512, FirstOverflowParam: -1},
		{Step: 5, Scale: 512, Sampled: true, FirstOverflowParam: -1},
	}
	if len(h) != len(want) {
		t.Fatalf("history %+v", h)
	}
	for i, w := range want {
		g := h[i]
		if g.Step != w.Step || g.Scale != w.Scale || g.FoundInf != w.FoundInf || g.Sampled != w.Sampled ||
			g.FirstOverflowParam != w.FirstOverflowParam || g.OverflowParams != w.OverflowParams {
			t.Errorf("history[%d] %+v, want %+v", i, g, w)
		}
	}
	if norm := math.Sqrt(64*(0.0625+1)) / 512; math.Abs(h[4].GradNorm-norm) > 1e-12 {
		t.Errorf("grad norm %g, want %g", h[4].GradNorm, norm)
	}
	if s := must(doctor.Summary())(t); !strings.Contains(s, "5 steps") {
		t.Errorf("summary %q", s)
	}
	ok(t, doctor.SetInterval(3))
	if err := doctor.SetInterval(-5); !errors.Is(err, ErrInvalidArgument) || doctor.Interval() != 3 {
		t.Errorf("negative interval: %v (interval now %d)", err, doctor.Interval())
	}
	if _, err := NewDoctor(ctx, opt, nil); !errors.Is(err, ErrInvalidArgument) ||
		!strings.Contains(err.Error(), "doctor") {
		t.Errorf("a second doctor: %v", err)
	}

	// fp16 gradients, all subnormal, without loss scaling: a finding.
	ctx2 := must(NewContext(nil))(t)
	defer ctx2.Close()
	p := planted(t, ctx2, F16, "encoder.<script>", 0, repeat(math.Ldexp(1, -20), 64))
	sgd.LR = 0.1
	opt2 := must(NewSGD(ctx2, []*Tensor{p}, &sgd))(t)
	d2 := must(NewDoctor(ctx2, opt2, &DoctorOptions{Interval: 1, History: 16}))(t)
	ok(t, opt2.Step())
	findings := must(d2.Findings())(t)
	if len(findings) != 1 {
		t.Fatalf("findings %+v", findings)
	}
	f := findings[0]
	if f.Code != FindingScaleTooLow || f.Cause != CauseNoLossScaling || f.Param != -1 ||
		f.FirstStep != 1 || f.LastStep != 1 || !strings.Contains(f.Message, "loss scal") {
		t.Errorf("finding %+v", f)
	}
	if _, err := d2.Finding(1); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Finding(1): %v", err)
	}
	dir := t.TempDir()
	report := filepath.Join(dir, "report.html")
	ok(t, d2.WriteReport(report))
	html := string(must(os.ReadFile(report))(t))
	if !strings.HasPrefix(html, "<!DOCTYPE html>") || strings.Contains(strings.ToLower(html), "<script") ||
		!strings.Contains(html, "scale_too_low") {
		t.Errorf("report: %.200q", html)
	}
	missing := filepath.Join(dir, "no-such-folder", "report.html")
	if err := d2.WriteReport(missing); !errors.Is(err, ErrIO) || !strings.Contains(err.Error(), missing) {
		t.Errorf("report into a missing folder: %v", err)
	}
	if err := d2.WriteReport("bad\x00path"); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("path with a NUL: %v", err)
	}
	if _, err := NewDoctor(ctx2, opt2, &DoctorOptions{Interval: -1, History: 16}); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("interval -1: %v", err)
	}
	d2.Close()
	if _, err := NewDoctor(ctx2, opt2, &DoctorOptions{Interval: 1, History: 0}); !errors.Is(err, ErrInvalidArgument) ||
		!strings.Contains(err.Error(), "history") {
		t.Errorf("history 0: %v", err)
	}
	opt2.Close()
	if _, err := NewDoctor(ctx2, opt2, nil); err == nil {
		t.Error("a doctor for a closed optimizer")
	}
}
