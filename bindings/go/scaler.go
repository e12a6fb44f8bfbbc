package ampx

// #include <ampx/ampx.h>
import "C"

// ScalerOptions configures NewScaler (torch.amp.GradScaler's options plus
// hysteresis and scale bounds). Start from DefaultScalerOptions.
type ScalerOptions struct {
	InitScale, GrowthFactor, BackoffFactor float64
	GrowthInterval                         int32
	Enabled                                bool
	// Back off from the Nth overflow since the allowance was last restored
	// (at a completed growth interval; the overflows need not be consecutive).
	Hysteresis         int32
	MinScale, MaxScale float64 // 0: no bound; a growth above MaxScale is not taken
	// Every clean update restores the allowance (ampx_scaler_options).
	ConsecutiveHysteresis bool
	// A growth above MaxScale sets the scale to MaxScale.
	ClampToMaxScale bool
}

// DefaultScalerOptions returns the library's defaults (init scale 65536,
// growth 2, backoff 0.5, interval 2000).
func DefaultScalerOptions() ScalerOptions {
	c := C.ampx_scaler_options_default()
	return ScalerOptions{float64(c.init_scale), float64(c.growth_factor), float64(c.backoff_factor),
		int32(c.growth_interval), c.enabled != 0, int32(c.hysteresis),
		float64(c.min_scale), float64(c.max_scale),
		c.consecutive_hysteresis != 0, c.clamp_to_max_scale != 0}
}

func (o *ScalerOptions) toC() *C.ampx_scaler_options {
	if o == nil {
		return nil
	}
	c := C.ampx_scaler_options_default()
	c.init_scale, c.growth_factor, c.backoff_factor = C.double(o.InitScale),
		C.double(o.GrowthFactor), C.double(o.BackoffFactor)
	c.growth_interval, c.enabled, c.hysteresis = C.int32_t(o.GrowthInterval), cbool(o.Enabled),
		C.int32_t(o.Hysteresis)
	c.min_scale, c.max_scale = C.double(o.MinScale), C.double(o.MaxScale)
	c.consecutive_hysteresis, c.clamp_to_max_scale = cbool(o.ConsecutiveHysteresis),
		cbool(o.ClampToMaxScale)
	return &c
}

// Scaler is a dynamic loss scaler. Per iteration: Backward(scaler) (or
// ScaleLoss), optionally Unscale (before clipping), Step, Update.
type Scaler struct {
	ref[C.ampx_scaler]
	ctx *Context
}

// NewScaler creates a scaler on ctx; opts nil means the defaults.
func NewScaler(ctx *Context, opts *ScalerOptions) (*Scaler, error) {
	var h C.ampx_scaler
	c := opts.toC()
	if err := call(func() C.ampx_status { return C.ampx_scaler_create(ctx.handle(), c, &h) }, ctx); err != nil {
		return nil, err
	}
	return own(&Scaler{ref[C.ampx_scaler]{h}, ctx}, (*Scaler).Close), nil
}

// Close releases the scaler (optimizers attached to it keep it alive).
// Closing again does nothing.
func (s *Scaler) Close() {
	closeRef(s, func(h C.ampx_scaler) { C.ampx_scaler_release(h) })
}

func (s *Scaler) handle() C.ampx_scaler { return handleOf[C.ampx_scaler](s) }

// Attach ties opt to this scaler before its first use, so that misuse in
// the first iteration is caught too.
func (s *Scaler) Attach(opt *Optimizer) error {
	h, o := s.handle(), opt.handle()
	return call(func() C.ampx_status { return C.ampx_scaler_attach(h, o) }, s, opt)
}

// ScaleLoss returns a new F32 tensor holding loss * scale, recorded when loss
// requires gradients (so Grad can differentiate it).
func (s *Scaler) ScaleLoss(loss *Tensor) (*Tensor, error) {
	var out C.ampx_tensor
	h, l := s.handle(), loss.handle()
	err := call(func() C.ampx_status { return C.ampx_scaler_scale_loss(h, l, &out) }, s, loss)
	return s.ctx.owned(out, err)
}

// UnscaleTensor returns x * (1 / scale) with the current scale, taken on the
// device (no host read; ampx_scaler_unscale_tensor), a new tensor of x's
// shape and dtype owned as an op output. It is recorded -- its gradient is
// the incoming one times the same 1/scale -- so gradients of ScaleLoss's
// output taken by Grad with CreateGraph can be unscaled and differentiated
// (the gradient-penalty recipe of ampx.h section 9). A disabled scaler
// gives a copy of x.
func (s *Scaler) UnscaleTensor(x *Tensor) (*Tensor, error) {
	var out C.ampx_tensor
	h, hx := s.handle(), x.handle()
	err := call(func() C.ampx_status { return C.ampx_scaler_unscale_tensor(h, hx, &out) }, s, x)
	return s.ctx.result(out, err)
}

// ScaleTensor returns a new reference to the one-element F32 device tensor
// holding the current scale (read-only; it changes at each update).
func (s *Scaler) ScaleTensor() (*Tensor, error) {
	var out C.ampx_tensor
	h := s.handle()
	err := call(func() C.ampx_status { return C.ampx_scaler_scale_tensor(h, &out) }, s)
	return s.ctx.owned(out, err)
}

// Scale returns the current scale (synchronizes; 1 when disabled).
func (s *Scaler) Scale() (float64, error) {
	return read[float64](func(scale *C.double) C.ampx_status { return C.ampx_scaler_get_scale(s.handle(), scale) }, s)
}

// Unscale divides opt's gradients by the scale and records whether any is
// inf/NaN.
func (s *Scaler) Unscale(opt *Optimizer) error {
	h, o := s.handle(), opt.handle()
	return call(func() C.ampx_status { return C.ampx_scaler_unscale(h, o) }, s, opt)
}

// Step unscales if needed, then steps opt unless an inf/NaN was found.
func (s *Scaler) Step(opt *Optimizer) error {
	h, o := s.handle(), opt.handle()
	return call(func() C.ampx_status { return C.ampx_scaler_step(h, o) }, s, opt)
}

// Update ends the iteration: backs off or grows the scale.
func (s *Scaler) Update() error {
	h := s.handle()
	return call(func() C.ampx_status { return C.ampx_scaler_update(h) }, s)
}

// UpdateTo ends the iteration setting the scale to newScale.
func (s *Scaler) UpdateTo(newScale float64) error {
	h := s.handle()
	return call(func() C.ampx_status { return C.ampx_scaler_update_to(h, C.double(newScale)) }, s)
}

// FoundInf reports whether the last unscale of opt's gradients found an
// inf/NaN (synchronizes).
func (s *Scaler) FoundInf(opt *Optimizer) (bool, error) {
	var found C.int32_t
	h, o := s.handle(), opt.handle()
	err := call(func() C.ampx_status { return C.ampx_scaler_found_inf(h, o, &found) }, s, opt)
	return found != 0, err
}

// ScalerCounters count the scaler's updates since creation or SetState.
type ScalerCounters struct {
	Updates, Skipped, Backoffs, Growths int64
}

// Counters reads the counters (synchronizes).
func (s *Scaler) Counters() (ScalerCounters, error) {
	c := C.ampx_scaler_counters{struct_size: C.sizeof_ampx_scaler_counters}
	h := s.handle()
	err := call(func() C.ampx_status { return C.ampx_scaler_get_counters(h, &c) }, s)
	return countersFromC(c), err
}

func countersFromC(c C.ampx_scaler_counters) ScalerCounters {
	return ScalerCounters{int64(c.updates), int64(c.skipped), int64(c.backoffs), int64(c.growths)}
}

// ScalerState is the scaler's persistent state, for checkpoints.
type ScalerState struct {
	Scale, GrowthFactor, BackoffFactor                        float64
	GrowthInterval, GrowthTracker, Hysteresis, HysteresisLeft int32
	MinScale, MaxScale                                        float64
	Counters                                                  ScalerCounters
	ConsecutiveHysteresis, ClampToMaxScale                    bool
}

// State reads the whole state (synchronizes).
func (s *Scaler) State() (ScalerState, error) {
	c := C.ampx_scaler_state{struct_size: C.sizeof_ampx_scaler_state}
	c.counters.struct_size = C.sizeof_ampx_scaler_counters
	h := s.handle()
	err := call(func() C.ampx_status { return C.ampx_scaler_get_state(h, &c) }, s)
	return ScalerState{float64(c.scale), float64(c.growth_factor), float64(c.backoff_factor),
		int32(c.growth_interval), int32(c.growth_tracker), int32(c.hysteresis),
		int32(c.hysteresis_left), float64(c.min_scale), float64(c.max_scale),
		countersFromC(c.counters), c.consecutive_hysteresis != 0, c.clamp_to_max_scale != 0}, err
}

// SetState restores a state read by State, between iterations only.
func (s *Scaler) SetState(state ScalerState) error {
	c := C.ampx_scaler_state{struct_size: C.sizeof_ampx_scaler_state}
	c.scale, c.growth_factor, c.backoff_factor = C.double(state.Scale),
		C.double(state.GrowthFactor), C.double(state.BackoffFactor)
	c.growth_interval, c.growth_tracker = C.int32_t(state.GrowthInterval), C.int32_t(state.GrowthTracker)
	c.hysteresis, c.hysteresis_left = C.int32_t(state.Hysteresis), C.int32_t(state.HysteresisLeft)
	c.min_scale, c.max_scale = C.double(state.MinScale), C.double(state.MaxScale)
	c.consecutive_hysteresis, c.clamp_to_max_scale = cbool(state.ConsecutiveHysteresis),
		cbool(state.ClampToMaxScale)
	c.counters = C.ampx_scaler_counters{struct_size: C.sizeof_ampx_scaler_counters,
		updates: C.int64_t(state.Counters.Updates), skipped: C.int64_t(state.Counters.Skipped),
		backoffs: C.int64_t(state.Counters.Backoffs), growths: C.int64_t(state.Counters.Growths)}
	h := s.handle()
	return call(func() C.ampx_status { return C.ampx_scaler_set_state(h, &c) }, s)
}
