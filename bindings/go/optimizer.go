package ampx

// #include <ampx/ampx.h>
import "C"

// SGDOptions configures NewSGD (torch.optim.SGD). Start from
// DefaultSGDOptions.
type SGDOptions struct {
	LR, Momentum, Dampening, WeightDecay float64
	Nesterov, Maximize                   bool
}

// DefaultSGDOptions returns the library's SGD defaults (lr 1e-3).
func DefaultSGDOptions() SGDOptions {
	c := C.ampx_sgd_options_default()
	return SGDOptions{float64(c.lr), float64(c.momentum), float64(c.dampening),
		float64(c.weight_decay), c.nesterov != 0, c.maximize != 0}
}

func (o *SGDOptions) toC() *C.ampx_sgd_options {
	if o == nil {
		return nil
	}
	c := C.ampx_sgd_options_default()
	c.lr, c.momentum, c.dampening, c.weight_decay = C.double(o.LR), C.double(o.Momentum),
		C.double(o.Dampening), C.double(o.WeightDecay)
	c.nesterov, c.maximize = cbool(o.Nesterov), cbool(o.Maximize)
	return &c
}

// AdamOptions configures NewAdam: Adam, or AdamW when
// DecoupledWeightDecay is set. Start from DefaultAdamOptions or
// DefaultAdamWOptions.
type AdamOptions struct {
	LR, Beta1, Beta2, Eps, WeightDecay      float64
	AMSGrad, Maximize, DecoupledWeightDecay bool
}

func adamOptionsFromC(c C.ampx_adam_options) AdamOptions {
	return AdamOptions{float64(c.lr), float64(c.beta1), float64(c.beta2), float64(c.eps),
		float64(c.weight_decay), c.amsgrad != 0, c.maximize != 0, c.decoupled_weight_decay != 0}
}

// DefaultAdamOptions returns the library's Adam defaults.
func DefaultAdamOptions() AdamOptions { return adamOptionsFromC(C.ampx_adam_options_default()) }

// DefaultAdamWOptions returns the library's AdamW defaults (weight decay 1e-2).
func DefaultAdamWOptions() AdamOptions { return adamOptionsFromC(C.ampx_adamw_options_default()) }

func (o *AdamOptions) toC() *C.ampx_adam_options {
	if o == nil {
		return nil
	}
	c := C.ampx_adam_options_default()
	c.lr, c.beta1, c.beta2, c.eps, c.weight_decay = C.double(o.LR), C.double(o.Beta1),
		C.double(o.Beta2), C.double(o.Eps), C.double(o.WeightDecay)
	c.amsgrad, c.maximize, c.decoupled_weight_decay = cbool(o.AMSGrad), cbool(o.Maximize),
		cbool(o.DecoupledWeightDecay)
	return &c
}

// Optimizer updates a fixed list of parameters, in groups with their own
// learning rate and weight decay, from their attached gradients. F16/BF16
// parameters get fp32 master weights.
type Optimizer struct {
	ref[C.ampx_optimizer]
	ctx    *Context
	params []*Tensor // in parameter order, to name FindNonfiniteGrads' results
}

// NewSGD creates an SGD optimizer over params (group 0); opts nil means the
// defaults.
func NewSGD(ctx *Context, params []*Tensor, opts *SGDOptions) (*Optimizer, error) {
	c := opts.toC()
	return newOptimizer(ctx, params, func(p *C.ampx_tensor, n C.size_t, out *C.ampx_optimizer) C.ampx_status {
		return C.ampx_optimizer_create_sgd(ctx.handle(), p, n, c, out)
	})
}

// NewAdam creates an Adam or AdamW optimizer over params (group 0); opts
// nil means Adam's defaults.
func NewAdam(ctx *Context, params []*Tensor, opts *AdamOptions) (*Optimizer, error) {
	c := opts.toC()
	return newOptimizer(ctx, params, func(p *C.ampx_tensor, n C.size_t, out *C.ampx_optimizer) C.ampx_status {
		return C.ampx_optimizer_create_adam(ctx.handle(), p, n, c, out)
	})
}

func newOptimizer(ctx *Context, params []*Tensor,
	create func(*C.ampx_tensor, C.size_t, *C.ampx_optimizer) C.ampx_status) (*Optimizer, error) {
	var h C.ampx_optimizer
	ptr, count := arrayArg(handlesOf(params))
	if err := call(func() C.ampx_status { return create(ptr, count, &h) }, ctx, params); err != nil {
		return nil, err
	}
	o := &Optimizer{ref[C.ampx_optimizer]{h}, ctx, append([]*Tensor(nil), params...)}
	return own(o, (*Optimizer).Close), nil
}

// Close releases the optimizer. Closing again does nothing.
func (o *Optimizer) Close() {
	closeRef(o, func(h C.ampx_optimizer) {
		C.ampx_optimizer_release(h)
		o.params = nil
	})
}

func (o *Optimizer) handle() C.ampx_optimizer { return handleOf[C.ampx_optimizer](o) }

// AddGroup adds a param group with its own lr and weight decay and
// returns its index.
func (o *Optimizer) AddGroup(params []*Tensor, lr, weightDecay float64) (int, error) {
	var index C.int32_t
	h := o.handle()
	ptr, count := arrayArg(handlesOf(params))
	err := call(func() C.ampx_status {
		return C.ampx_optimizer_add_group(h, ptr, count, C.double(lr), C.double(weightDecay), &index)
	}, o, params)
	if err != nil {
		return 0, err
	}
	o.params = append(o.params, params...)
	return int(index), nil
}

// GroupCount returns the number of param groups.
func (o *Optimizer) GroupCount() (int, error) {
	return read[int](func(n *C.int32_t) C.ampx_status { return C.ampx_optimizer_group_count(o.handle(), n) }, o)
}

// SetLR sets a group's learning rate for the following steps.
func (o *Optimizer) SetLR(group int, lr float64) error {
	h := o.handle()
	return call(func() C.ampx_status { return C.ampx_optimizer_set_lr(h, C.int32_t(group), C.double(lr)) }, o)
}

// LR returns a group's learning rate as last set.
func (o *Optimizer) LR(group int) (float64, error) {
	return read[float64](func(lr *C.double) C.ampx_status { return C.ampx_optimizer_get_lr(o.handle(), C.int32_t(group), lr) }, o)
}

// LRDecay is what follows a learning-rate schedule's warm-up (ampx_lr_decay).
type LRDecay int32

const (
	LRConstant LRDecay = C.AMPX_LR_CONSTANT // the group's rate
	LRLinear   LRDecay = C.AMPX_LR_LINEAR   // linear to EndFactor times the rate at TotalSteps
	LRCosine   LRDecay = C.AMPX_LR_COSINE   // cosine to MinLR at TotalSteps (periodic after it)
	LRStep     LRDecay = C.AMPX_LR_STEP     // times Gamma every StepSize steps
)

// LRSchedule is a param group's learning-rate schedule, computed on the
// device from the optimizer's count of taken steps (ampx_lr_schedule; the
// formulas are in ampx.h section 17). Start from DefaultLRSchedule.
type LRSchedule struct {
	WarmupSteps       int64
	WarmupStartFactor float64
	Decay             LRDecay
	TotalSteps        int64 // linear, cosine: the step the decay ends at, warm-up included
	EndFactor         float64
	MinLR             float64
	StepSize          int64
	Gamma             float64
}

// DefaultLRSchedule returns the library's default: the group's constant rate.
func DefaultLRSchedule() LRSchedule { return lrScheduleFromC(C.ampx_lr_schedule_default()) }

func lrScheduleFromC(c C.ampx_lr_schedule) LRSchedule {
	return LRSchedule{int64(c.warmup_steps), float64(c.warmup_start_factor), LRDecay(c.decay),
		int64(c.total_steps), float64(c.end_factor), float64(c.min_lr), int64(c.step_size),
		float64(c.gamma)}
}

func (s *LRSchedule) toC() *C.ampx_lr_schedule {
	if s == nil {
		return nil
	}
	c := C.ampx_lr_schedule_default()
	c.warmup_steps, c.warmup_start_factor = C.int64_t(s.WarmupSteps), C.double(s.WarmupStartFactor)
	c.decay, c.total_steps = C.ampx_lr_decay(s.Decay), C.int64_t(s.TotalSteps)
	c.end_factor, c.min_lr = C.double(s.EndFactor), C.double(s.MinLR)
	c.step_size, c.gamma = C.int64_t(s.StepSize), C.double(s.Gamma)
	return &c
}

// Value returns the rate the schedule gives a group of rate baseLR after
// step taken steps, in double (ampx_lr_schedule_value).
func (s LRSchedule) Value(baseLR float64, step int64) (float64, error) {
	c := s.toC()
	return read[float64](func(lr *C.double) C.ampx_status {
		return C.ampx_lr_schedule_value(c, C.double(baseLR), C.int64_t(step), lr)
	})
}

// SetLRSchedule gives a group a schedule from its next step on (the group's
// rate is its base); nil: the constant rate again.
func (o *Optimizer) SetLRSchedule(group int, schedule *LRSchedule) error {
	h := o.handle()
	c := schedule.toC()
	return call(func() C.ampx_status {
		return C.ampx_optimizer_set_lr_schedule(h, C.int32_t(group), c)
	}, o)
}

// LRSchedule returns a group's schedule (fields its decay does not use read
// as their defaults).
func (o *Optimizer) LRSchedule(group int) (LRSchedule, error) {
	c := C.ampx_lr_schedule_default()
	h := o.handle()
	err := call(func() C.ampx_status { return C.ampx_optimizer_get_lr_schedule(h, C.int32_t(group), &c) }, o)
	return lrScheduleFromC(c), err
}

// StepCount returns the steps taken (skipped ones do not count), the
// position of every group's schedule. Synchronizes with the device.
func (o *Optimizer) StepCount() (int64, error) {
	return read[int64](func(n *C.int64_t) C.ampx_status { return C.ampx_optimizer_step_count(o.handle(), n) }, o)
}

// Step takes one step with the gradients as they are (use Scaler.Step when
// the gradients are scaled).
func (o *Optimizer) Step() error {
	h := o.handle()
	return call(func() C.ampx_status { return C.ampx_optimizer_step(h) }, o)
}

// ZeroGrad zeroes every attached gradient of the parameters.
func (o *Optimizer) ZeroGrad() error {
	h := o.handle()
	return call(func() C.ampx_status { return C.ampx_optimizer_zero_grad(h) }, o)
}

// LastStepTaken reports whether the most recent step was taken (false: it
// was skipped for inf/NaN gradients).
func (o *Optimizer) LastStepTaken() (bool, error) {
	return readFlag(func(taken *C.int32_t) C.ampx_status { return C.ampx_optimizer_last_step_taken(o.handle(), taken) }, o)
}

// StateKind names a per-parameter optimizer state tensor.
type StateKind int32

// Optimizer state kinds (ampx_optimizer_state).
const (
	StateMaster      StateKind = C.AMPX_STATE_MASTER
	StateMomentum    StateKind = C.AMPX_STATE_MOMENTUM
	StateExpAvgSq    StateKind = C.AMPX_STATE_EXP_AVG_SQ
	StateMaxExpAvgSq StateKind = C.AMPX_STATE_MAX_EXP_AVG_SQ
)

// StateTensor returns a new reference to one F32 state tensor of param;
// writing to it changes the optimizer's state.
func (o *Optimizer) StateTensor(param *Tensor, kind StateKind) (*Tensor, error) {
	var out C.ampx_tensor
	h, p := o.handle(), param.handle()
	err := call(func() C.ampx_status {
		return C.ampx_optimizer_state_tensor(h, p, C.ampx_optimizer_state(kind), &out)
	}, o, param)
	return param.context().owned(out, err)
}

// ParamSteps returns the number of steps param has taken.
func (o *Optimizer) ParamSteps(param *Tensor) (int64, error) {
	return read[int64](func(n *C.int64_t) C.ampx_status {
		return C.ampx_optimizer_param_steps(o.handle(), param.handle(), n)
	}, o, param)
}

// SaveState serialises the optimizer's state (versioned, checksummed).
func (o *Optimizer) SaveState() ([]byte, error) {
	var size C.size_t
	h := o.handle()
	if err := call(func() C.ampx_status { return C.ampx_optimizer_state_size(h, &size) }, o); err != nil {
		return nil, err
	}
	buf := make([]byte, size)
	ptr, bytes := sliceBytes(buf)
	return buf, call(func() C.ampx_status { return C.ampx_optimizer_save_state(h, ptr, bytes) }, o)
}

// LoadState restores state saved by SaveState; nothing changes on error.
func (o *Optimizer) LoadState(state []byte) error {
	h := o.handle()
	ptr, bytes := sliceBytes(state)
	return call(func() C.ampx_status { return C.ampx_optimizer_load_state(h, ptr, bytes) }, o)
}

// ClipGradNorm multiplies every gradient by min(maxNorm/(total+1e-6), 1),
// where total is the norm (normType 2, or math.Inf(1)) of all gradients.
// It is refused with ErrOrder while the gradients are still scaled.
func (o *Optimizer) ClipGradNorm(maxNorm, normType float64, errorIfNonfinite bool) error {
	h := o.handle()
	return call(func() C.ampx_status {
		return C.ampx_clip_grad_norm(h, C.double(maxNorm), C.double(normType), cbool(errorIfNonfinite), nil)
	}, o)
}

// ClipGradNormTotal is ClipGradNorm that also returns the total norm as a
// new one-element F32 tensor.
func (o *Optimizer) ClipGradNormTotal(maxNorm, normType float64, errorIfNonfinite bool) (*Tensor, error) {
	var total C.ampx_tensor
	h := o.handle()
	err := call(func() C.ampx_status {
		return C.ampx_clip_grad_norm(h, C.double(maxNorm), C.double(normType), cbool(errorIfNonfinite), &total)
	}, o)
	if err != nil {
		return nil, err
	}
	return o.ctx.owned(total, nil)
}

// ClipGradValue clamps every gradient element to [-clipValue, clipValue].
func (o *Optimizer) ClipGradValue(clipValue float64) error {
	h := o.handle()
	return call(func() C.ampx_status { return C.ampx_clip_grad_value(h, C.double(clipValue)) }, o)
}

// NonfiniteGrad is a parameter whose gradient holds NaN or inf.
type NonfiniteGrad struct {
	Param              *Tensor // as given to the optimizer; nil if that *Tensor was closed
	Name               string
	NaNCount, InfCount int64
}

// FindNonfiniteGrads lists, in parameter order, the parameters whose
// gradients (as the next step would use them) hold NaN or inf.
func (o *Optimizer) FindNonfiniteGrads() ([]NonfiniteGrad, error) {
	h := o.handle()
	entries := make([]C.ampx_nonfinite_grad, len(o.params))
	ptr, capacity := arrayArg(entries)
	var found C.size_t
	var out []NonfiniteGrad
	err := call(func() C.ampx_status {
		status := C.ampx_find_nonfinite_grads(h, ptr, capacity, &found)
		if status != C.AMPX_OK {
			return status
		}
		if int(found) < len(entries) {
			entries = entries[:found]
		}
		for _, e := range entries {
			g := NonfiniteGrad{Name: C.GoString(e.name), NaNCount: int64(e.nan_count), InfCount: int64(e.inf_count)}
			for _, p := range o.params {
				if p.h == e.param {
					g.Param = p
				}
			}
			out = append(out, g)
		}
		return status
	}, o)
	return out, err
}
