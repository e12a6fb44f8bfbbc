package ampx

// The precision doctor (section 15 of ampx.h): gradient statistics, loss
// scale history and findings of one optimizer.

// #include <stdlib.h>
// #include <ampx/ampx.h>
import "C"

import (
	"fmt"
	"strings"
	"unsafe"
)

// Histogram bins of a DoctorParamStats: bin DoctorBinZero counts u == 0,
// DoctorBinTiny 0 < |u| < 2^-64, DoctorBinBinade(e) 2^e <= |u| < 2^(e+1)
// for e in [-64, 15], DoctorBinHuge 2^16 <= |u| < inf, DoctorBinNonfinite
// inf and NaN. fp16's subnormals are the binades -24..-15, its normals
// -14..15.
const (
	DoctorBins         = C.AMPX_DOCTOR_BINS
	DoctorBinZero      = C.AMPX_DOCTOR_BIN_ZERO
	DoctorBinTiny      = C.AMPX_DOCTOR_BIN_TINY
	DoctorBinHuge      = C.AMPX_DOCTOR_BIN_HUGE
	DoctorBinNonfinite = C.AMPX_DOCTOR_BIN_NONFINITE
	// DoctorMinBinade and DoctorMaxBinade bound the binades with a bin of their own.
	DoctorMinBinade, DoctorMaxBinade = -64, 15
)

// DoctorBinBinade is the bin of 2^e <= |u| < 2^(e+1)
// (AMPX_DOCTOR_BIN_BINADE), for e in [DoctorMinBinade, DoctorMaxBinade];
// -1 outside.
func DoctorBinBinade(e int) int {
	if e < DoctorMinBinade || e > DoctorMaxBinade {
		return -1
	}
	return DoctorBinTiny + 1 + e - DoctorMinBinade
}

// FindingCode is what a DoctorFinding is (ampx_doctor_finding_code).
type FindingCode int32

// Finding codes; their meaning is documented in ampx.h.
const (
	FindingScaleOscillation  FindingCode = C.AMPX_DOCTOR_SCALE_OSCILLATION
	FindingScaleAtMinimum    FindingCode = C.AMPX_DOCTOR_SCALE_AT_MINIMUM
	FindingScaleTooLow       FindingCode = C.AMPX_DOCTOR_SCALE_TOO_LOW
	FindingGradientsVanished FindingCode = C.AMPX_DOCTOR_GRADIENTS_VANISHED
)

// String is the code's name ("scale_too_low"), or FindingCode(n) for a
// value ampx does not know.
func (c FindingCode) String() string {
	return nameOr(C.ampx_doctor_finding_code_name(C.int32_t(c)), "FindingCode", int32(c))
}

// nameOr is a static C name, or kind(value) where ampx has none.
func nameOr(name *C.char, kind string, value int32) string {
	if name != nil {
		return C.GoString(name)
	}
	return fmt.Sprintf("%s(%d)", kind, value)
}

// Cause is a finding's likely cause (ampx_doctor_cause).
type Cause int32

// Causes; their meaning is documented in ampx.h.
const (
	CauseNone           Cause = C.AMPX_DOCTOR_CAUSE_NONE
	CauseLearningRate   Cause = C.AMPX_DOCTOR_CAUSE_LEARNING_RATE
	CauseUnstableOp     Cause = C.AMPX_DOCTOR_CAUSE_UNSTABLE_OP
	CauseOutlierBatches Cause = C.AMPX_DOCTOR_CAUSE_OUTLIER_BATCHES
	CauseNoLossScaling  Cause = C.AMPX_DOCTOR_CAUSE_NO_LOSS_SCALING
)

// String is the cause's name ("no_loss_scaling"; "" for CauseNone), or
// Cause(n) for a value ampx does not know.
func (c Cause) String() string {
	return nameOr(C.ampx_doctor_cause_name(C.int32_t(c)), "Cause", int32(c))
}

// DoctorOptions configures NewDoctor. Start from DefaultDoctorOptions.
type DoctorOptions struct {
	Interval int32 // sample every Interval-th step; 0: off (default 100)
	History  int32 // steps kept in the history ring (default 4096, at most 16777216)
}

// DefaultDoctorOptions returns the library's defaults.
func DefaultDoctorOptions() DoctorOptions {
	c := C.ampx_doctor_options_default()
	return DoctorOptions{int32(c.interval), int32(c.history)}
}

// Doctor is a precision doctor watching one optimizer (ampx_doctor) and the
// scaler attached to it, if any. Every interval-th step (steps 1, 1 +
// interval, ...) it takes, on the device, an exponent histogram of each
// parameter's true (unscaled) gradient and which elements fp16 would lose;
// every step with a scaler goes into a history ring. The read methods
// (Examine, ParamStats, History, Findings, Summary, WriteReport)
// synchronize and diagnose the history into findings. Use it from the
// optimizer's goroutine.
type Doctor struct {
	ref[C.ampx_doctor]
	opt      *Optimizer
	interval int32
	history  int32
}

// NewDoctor attaches a doctor to opt, in ctx (the optimizer's context);
// opts nil means the defaults. An optimizer has at most one doctor at a
// time.
func NewDoctor(ctx *Context, opt *Optimizer, opts *DoctorOptions) (*Doctor, error) {
	var h C.ampx_doctor
	options := C.ampx_doctor_options_default()
	if opts != nil {
		options.interval, options.history = C.int32_t(opts.Interval), C.int32_t(opts.History)
	}
	c, o := ctx.handle(), opt.handle()
	if err := call(func() C.ampx_status { return C.ampx_doctor_create(c, o, &options, &h) }, ctx, opt); err != nil {
		return nil, err
	}
	d := &Doctor{ref[C.ampx_doctor]{h}, opt, int32(options.interval), int32(options.history)}
	return own(d, (*Doctor).Close), nil
}

// Close detaches the doctor from its optimizer and releases it. Closing
// again does nothing.
func (d *Doctor) Close() {
	closeRef(d, func(h C.ampx_doctor) { C.ampx_doctor_release(h) })
}

func (d *Doctor) handle() C.ampx_doctor { return handleOf[C.ampx_doctor](d) }

// Interval returns the sampling interval (0: off).
func (d *Doctor) Interval() int { return int(d.interval) }

// HistoryCapacity returns the number of steps the history ring keeps.
func (d *Doctor) HistoryCapacity() int { return int(d.history) }

// SetInterval changes the sampling interval from the next step (0: off).
func (d *Doctor) SetInterval(interval int) error {
	h := d.handle()
	if interval < -1<<31 || interval > 1<<31-1 {
		return &Error{Status: ErrInvalidArgument, Message: fmt.Sprintf(
			"ampx.Doctor.SetInterval: %d does not fit an int32", interval)}
	}
	err := call(func() C.ampx_status { return C.ampx_doctor_set_interval(h, C.int32_t(interval)) }, d)
	if err == nil {
		d.interval = int32(interval)
	}
	return err
}

// DoctorOverview is what Doctor.Examine reports.
type DoctorOverview struct {
	Steps        int64   // optimizer steps seen
	SampleStep   int64   // the latest sampled step (0: none yet)
	SampleScale  float64 // the loss scale of that step (1 without a scaler)
	ParamCount   int     // parameters with statistics (ParamStats)
	HistoryCount int     // entries in the history
	FindingCount int     // findings (Findings)
	MissedSteps  int64   // steps not observed for lack of memory
}

// Examine reads the doctor's device state (synchronizes when steps were
// taken since the last read), diagnoses it and returns the overview.
func (d *Doctor) Examine() (DoctorOverview, error) {
	o := C.ampx_doctor_overview{struct_size: C.sizeof_ampx_doctor_overview}
	h := d.handle()
	err := call(func() C.ampx_status { return C.ampx_doctor_examine(h, &o) }, d)
	return DoctorOverview{int64(o.steps), int64(o.sample_step), float64(o.sample_scale),
		int(o.param_count), int(o.history_count), int(o.finding_count), int64(o.missed_steps)}, err
}

// DoctorParamStats is one parameter's statistics of the latest sampled step.
// For a gradient element x as stored (scaled by the loss scale S) and its
// true value u = x / S, the fp16 fractions are of all the parameter's
// elements, "Unscaled" ones of u and "Scaled" ones of x: zero means it
// rounds to 0 in fp16 (|v| <= 2^-25), subnormal 0 < |fp16(v)| < 2^-14,
// overflow infinite.
type DoctorParamStats struct {
	Index                 int    // the parameter's index in the optimizer
	Name                  string // "" if unnamed
	ParamDType, GradDType DType  // GradDType F32 also when it had no gradient
	Elements              int64  // elements sampled (0: no gradient on that step)
	Histogram             [DoctorBins]int64
	Amax                  float64 // max |u| over finite elements
	AmaxScaled            float64 // max |x| over finite elements
	GradNorm              float64 // L2 norm of u over finite elements
	FP16ZeroUnscaled      float64
	FP16SubnormalUnscaled float64
	FP16ZeroScaled        float64
	FP16SubnormalScaled   float64
	FP16OverflowScaled    float64
	// Headroom is the doublings of the scale left: the largest k with
	// AmaxScaled * 2^k <= 65504 (negative: overflowing); HeadroomUnbounded
	// when every element is zero.
	Headroom          int
	HeadroomUnbounded bool
	// LostUpdateFraction: 16-bit parameters, the fraction of elements whose
	// fp32 master changed in the sampled step while the parameter kept its
	// value; LostWithoutMasterFraction the same without a master. -1 for
	// fp32 parameters.
	LostUpdateFraction        float64
	LostWithoutMasterFraction float64
}

// ParamStats returns parameter index's statistics of the latest sampled
// step: ErrOrder before any step was sampled, ErrInvalidArgument for an
// index outside [0, Examine().ParamCount).
func (d *Doctor) ParamStats(index int) (DoctorParamStats, error) {
	s := C.ampx_doctor_param_stats{struct_size: C.sizeof_ampx_doctor_param_stats}
	var out DoctorParamStats
	err := callThen(func() C.ampx_status {
		return C.ampx_doctor_get_param_stats(d.handle(), C.int32_t(clampInt32(index)), &s)
	}, func() { out.Name = C.GoString(s.name) }, d)
	if err != nil {
		return out, err
	}
	out.Index, out.ParamDType, out.GradDType, out.Elements = int(s.index), DType(s.param_dtype),
		DType(s.grad_dtype), int64(s.elements)
	for i, c := range s.histogram {
		out.Histogram[i] = int64(c)
	}
	out.Amax, out.AmaxScaled, out.GradNorm = float64(s.amax), float64(s.amax_scaled), float64(s.grad_norm)
	out.FP16ZeroUnscaled, out.FP16SubnormalUnscaled = float64(s.fp16_zero_unscaled), float64(s.fp16_subnormal_unscaled)
	out.FP16ZeroScaled, out.FP16SubnormalScaled = float64(s.fp16_zero_scaled), float64(s.fp16_subnormal_scaled)
	out.FP16OverflowScaled = float64(s.fp16_overflow_scaled)
	out.Headroom, out.HeadroomUnbounded = int(s.headroom), s.headroom_unbounded != 0
	out.LostUpdateFraction = float64(s.lost_update_fraction)
	out.LostWithoutMasterFraction = float64(s.lost_without_master_fraction)
	return out, nil
}

// clampInt32 keeps an out-of-range index out of range in int32 (ampx then
// refuses it) instead of wrapping it into range.
func clampInt32(i int) int32 {
	if i > 1<<31-1 {
		return 1<<31 - 1
	}
	if i < -1<<31 {
		return -1 << 31
	}
	return int32(i)
}

// Params returns every parameter's statistics of the latest sampled step,
// in the optimizer's order (none before a step was sampled).
func (d *Doctor) Params() ([]DoctorParamStats, error) {
	o, err := d.Examine()
	if err != nil || o.SampleStep == 0 {
		return nil, err
	}
	out := make([]DoctorParamStats, o.ParamCount)
	for i := range out {
		if out[i], err = d.ParamStats(i); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// DoctorSample is one step of the history.
type DoctorSample struct {
	Step     int64   // the optimizer step, counted from 1
	Scale    float64 // the scale the step's gradients carried
	FoundInf bool    // a gradient was not finite (with an enabled scaler: the step was skipped)
	Sampled  bool    // statistics were taken on this step
	GradNorm float64 // sampled steps: L2 norm of the finite true gradients
	// FirstOverflowParam is the parameter backward reached first among
	// those with a non-finite gradient; -1: none.
	FirstOverflowParam int
	OverflowParams     int     // parameters with a non-finite gradient
	FP16LostScaled     float64 // sampled: fraction zero or subnormal in fp16 at the scale
	FP16LostUnscaled   float64 // ... without loss scaling
}

// History returns the recorded steps, oldest first: every step with an
// enabled scaler, else only the sampled ones; at most HistoryCapacity of
// the latest.
func (d *Doctor) History() ([]DoctorSample, error) {
	h := d.handle()
	var count C.int32_t
	if err := call(func() C.ampx_status { return C.ampx_doctor_get_history(h, nil, 0, &count) }, d); err != nil {
		return nil, err
	}
	if count == 0 {
		return nil, nil
	}
	samples := make([]C.ampx_doctor_sample, count)
	capacity := count
	if err := call(func() C.ampx_status {
		return C.ampx_doctor_get_history(h, &samples[0], capacity, &count)
	}, d); err != nil {
		return nil, err
	}
	if int(count) < len(samples) {
		samples = samples[:count]
	}
	out := make([]DoctorSample, len(samples))
	for i, s := range samples {
		out[i] = DoctorSample{int64(s.step), float64(s.scale), s.found_inf != 0, s.sampled != 0,
			float64(s.grad_norm), int(s.first_overflow_param), int(s.overflow_params),
			float64(s.fp16_lost_scaled), float64(s.fp16_lost_unscaled)}
	}
	return out, nil
}

// DoctorFinding is one diagnosis, with its evidence.
type DoctorFinding struct {
	Code      FindingCode
	Cause     Cause
	Param     int    // the parameter named (an unstable op), or -1
	ParamName string // its name, or ""
	FirstStep int64  // the first step that shows it
	LastStep  int64  // the last step that shows it
	Message   string // one or two English sentences with the evidence
}

// Finding returns finding index (most important first; see
// Examine().FindingCount).
func (d *Doctor) Finding(index int) (DoctorFinding, error) {
	f := C.ampx_doctor_finding{struct_size: C.sizeof_ampx_doctor_finding}
	var out DoctorFinding
	err := callThen(func() C.ampx_status {
		return C.ampx_doctor_get_finding(d.handle(), C.int32_t(clampInt32(index)), &f)
	}, func() { out.ParamName, out.Message = C.GoString(f.param_name), C.GoString(f.message) }, d)
	out.Code, out.Cause, out.Param = FindingCode(f.code), Cause(f.cause), int(f.param)
	out.FirstStep, out.LastStep = int64(f.first_step), int64(f.last_step)
	return out, err
}

// Findings returns every finding, most important first.
func (d *Doctor) Findings() ([]DoctorFinding, error) {
	o, err := d.Examine()
	if err != nil {
		return nil, err
	}
	out := make([]DoctorFinding, o.FindingCount)
	for i := range out {
		if out[i], err = d.Finding(i); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Summary returns a one-line summary for logs: steps, the latest sample's
// fp16 losses and headroom, overflows, the findings' codes.
func (d *Doctor) Summary() (string, error) {
	return readString(func(text **C.char) C.ampx_status { return C.ampx_doctor_summary(d.handle(), text) }, d)
}

// WriteReport writes the report -- one self-contained HTML file (inline CSS
// and SVG, no script): findings, scale history, and per parameter its
// histogram over fp16's range -- to path (replaced if it exists). ErrIO
// when it cannot be written (a partial file is removed).
func (d *Doctor) WriteReport(path string) error {
	cpath, err := cString(path, "ampx.Doctor.WriteReport", "path")
	if err != nil {
		return err
	}
	defer C.free(unsafe.Pointer(cpath))
	h := d.handle()
	return call(func() C.ampx_status { return C.ampx_doctor_write_report(h, cpath) }, d)
}

// cString copies s for C (free it with C.free); a NUL inside s, which C
// would read as the end, is refused.
func cString(s, function, what string) (*C.char, error) {
	if strings.IndexByte(s, 0) >= 0 {
		return nil, &Error{Status: ErrInvalidArgument, Message: fmt.Sprintf(
			"%s: %s contains a NUL character", function, what)}
	}
	return C.CString(s), nil
}
