package ampx

// #include <stdlib.h>
// #include <ampx/ampx.h>
import "C"

import "unsafe"

// FP8 training (section 18 of ampx.h, EXPERIMENTAL): scaling recipes after
// Transformer Engine, quantization with a recipe's scales, FP8 products
// under autocast (Autocast.SetFP8) and what the precision doctor sees of a
// tensor in FP8 (FP8Recipe.Inspect).

// FP8Overflow is what a conversion into FP8 does beyond the format's max.
type FP8Overflow int32

// Overflow rules (ampx_fp8_overflow).
const (
	FP8Saturate   FP8Overflow = C.AMPX_FP8_SATURATE    // +-max (TE's casts, torch's float8_e4m3fn)
	FP8NoSaturate FP8Overflow = C.AMPX_FP8_NO_SATURATE // NaN in E4M3, +-inf in E5M2
)

// FP8Scaling is how a recipe scales.
type FP8Scaling int32

// Scalings (ampx_fp8_scaling).
const (
	FP8Delayed FP8Scaling = C.AMPX_FP8_DELAYED // from the amax history (TE's DelayedScaling)
	FP8Current FP8Scaling = C.AMPX_FP8_CURRENT // from the tensor's own amax
)

// FP8Format is which FP8 type each role gets.
type FP8Format int32

// Formats (ampx_fp8_format).
const (
	FP8Hybrid  FP8Format = C.AMPX_FP8_HYBRID // E4M3 forward, E5M2 for gradients
	FP8AllE4M3 FP8Format = C.AMPX_FP8_E4M3   // E4M3 everywhere
)

// AmaxAlgo is which amax a delayed update scales by.
type AmaxAlgo int32

// Amax algorithms (ampx_fp8_amax_algo).
const (
	AmaxMax        AmaxAlgo = C.AMPX_FP8_AMAX_MAX         // the history's maximum
	AmaxMostRecent AmaxAlgo = C.AMPX_FP8_AMAX_MOST_RECENT // the step's own amax
)

// FP8Role is what a recipe slot holds, which decides its format.
type FP8Role int32

// Roles (ampx_fp8_role).
const (
	FP8Forward  FP8Role = C.AMPX_FP8_FORWARD  // an activation or a weight
	FP8Backward FP8Role = C.AMPX_FP8_BACKWARD // a gradient
)

// FP8DefaultMinGemmSize is the default of Autocast.SetFP8's minGemmSize
// (AMPX_FP8_DEFAULT_MIN_GEMM_SIZE, 2^33).
const FP8DefaultMinGemmSize int64 = C.AMPX_FP8_DEFAULT_MIN_GEMM_SIZE

// FP8RecipeOptions configures NewFP8Recipe. Start from
// DefaultFP8RecipeOptions (Transformer Engine's defaults).
type FP8RecipeOptions struct {
	Scaling          FP8Scaling // FP8Delayed
	Format           FP8Format  // FP8Hybrid
	AmaxHistoryLen   int32      // 1024; at least 1
	AmaxComputeAlgo  AmaxAlgo   // AmaxMax
	Margin           int32      // 0; 0 .. 127: scale = fp8_max / amax / 2^margin
	PowerOfTwoScales bool       // current scaling only
}

// DefaultFP8RecipeOptions returns the library's defaults.
func DefaultFP8RecipeOptions() FP8RecipeOptions {
	c := C.ampx_fp8_recipe_options_default()
	return FP8RecipeOptions{FP8Scaling(c.scaling), FP8Format(c.format), int32(c.amax_history_len),
		AmaxAlgo(c.amax_compute_algo), int32(c.margin), c.power_of_two_scales != 0}
}

func (o *FP8RecipeOptions) toC() *C.ampx_fp8_recipe_options {
	if o == nil {
		return nil
	}
	c := C.ampx_fp8_recipe_options_default()
	c.scaling, c.format = C.ampx_fp8_scaling(o.Scaling), C.ampx_fp8_format(o.Format)
	c.amax_history_len, c.amax_compute_algo = C.int32_t(o.AmaxHistoryLen), C.ampx_fp8_amax_algo(o.AmaxComputeAlgo)
	c.margin, c.power_of_two_scales = C.int32_t(o.Margin), cbool(o.PowerOfTwoScales)
	return &c
}

// FP8Recipe is an FP8 scaling recipe: per slot (a tensor it scales) a
// scale, its inverse, the step's amax and an amax history, in device
// memory. Autocast policies and data-parallel wrappers given it keep their
// own reference, so Close may come first.
type FP8Recipe struct {
	ref[C.ampx_fp8_recipe]
	ctx        *Context
	historyLen int32
}

// NewFP8Recipe creates a recipe with no slots on ctx; opts nil means the
// defaults. A bad option is ErrInvalidArgument naming it.
func NewFP8Recipe(ctx *Context, opts *FP8RecipeOptions) (*FP8Recipe, error) {
	var h C.ampx_fp8_recipe
	c := opts.toC()
	historyLen := int32(C.ampx_fp8_recipe_options_default().amax_history_len)
	if c != nil {
		historyLen = int32(c.amax_history_len)
	}
	if err := call(func() C.ampx_status { return C.ampx_fp8_recipe_create(ctx.handle(), c, &h) }, ctx); err != nil {
		return nil, err
	}
	return own(&FP8Recipe{ref[C.ampx_fp8_recipe]{h}, ctx, historyLen}, (*FP8Recipe).Close), nil
}

// Close releases this reference to the recipe. Closing again does nothing.
func (r *FP8Recipe) Close() {
	closeRef(r, func(h C.ampx_fp8_recipe) { C.ampx_fp8_recipe_release(h) })
}

func (r *FP8Recipe) handle() C.ampx_fp8_recipe { return handleOf[C.ampx_fp8_recipe](r) }

// AmaxHistoryLen is the length of every slot's amax history.
func (r *FP8Recipe) AmaxHistoryLen() int { return int(r.historyLen) }

// AddTensor adds a slot of role (scale 1, amax 0, empty history) named
// name ("" for none; unique in the recipe) and returns its index.
func (r *FP8Recipe) AddTensor(role FP8Role, name string) (int64, error) {
	h := r.handle()
	var cname *C.char
	if name != "" {
		cname = C.CString(name)
		defer C.free(unsafe.Pointer(cname))
	}
	return read[int64](func(slot *C.int64_t) C.ampx_status {
		return C.ampx_fp8_recipe_add_tensor(h, C.ampx_fp8_role(role), cname, slot)
	}, r)
}

// SlotCount is the number of slots (autocast's included).
func (r *FP8Recipe) SlotCount() (int64, error) {
	h := r.handle()
	return read[int64](func(n *C.int64_t) C.ampx_status { return C.ampx_fp8_recipe_slot_count(h, n) }, r)
}

// Quantize rounds src (F32, F16 or BF16) times slot's scale into dst and/or
// dstTransposed (src read as [rows, cols], written [cols, rows]; either
// may be nil, not both), saturating, and folds src's amax into the slot's
// step amax. The outputs are of the slot's format.
func (r *FP8Recipe) Quantize(slot int64, src, dst, dstTransposed *Tensor) error {
	h, s, d, dt := r.handle(), src.handle(), dst.handle(), dstTransposed.handle()
	return call(func() C.ampx_status { return C.ampx_fp8_quantize(h, C.int64_t(slot), s, d, dt) },
		r, src, dst, dstTransposed)
}

// Quantized is Quantize into a new tensor of the slot's format and src's
// shape (reading the format synchronizes).
func (r *FP8Recipe) Quantized(slot int64, src *Tensor) (*Tensor, error) {
	info, err := r.slotInfo(slot, false)
	if err != nil {
		return nil, err
	}
	shape, err := src.Shape()
	if err != nil {
		return nil, err
	}
	dst, err := src.context().Empty(info.DType, shape...)
	if err != nil {
		return nil, err
	}
	if err := r.Quantize(slot, src, dst, nil); err != nil {
		dst.Close()
		return nil, err
	}
	return dst, nil
}

// Update ends the step for every slot: amaxes join the histories and
// (delayed scaling) scales are recomputed. Once per step, after backward.
func (r *FP8Recipe) Update() error {
	h := r.handle()
	return call(func() C.ampx_status { return C.ampx_fp8_recipe_update(h) }, r)
}

// ScaleTensor returns slot's scale (or inverse scale) as a one-element F32
// view of the recipe's device memory: it follows every update.
func (r *FP8Recipe) ScaleTensor(slot int64, inverse bool) (*Tensor, error) {
	var out C.ampx_tensor
	h := r.handle()
	err := call(func() C.ampx_status {
		return C.ampx_fp8_recipe_scale_tensor(h, C.int64_t(slot), cbool(inverse), &out)
	}, r)
	return r.ctx.owned(out, err)
}

// FP8SlotInfo is a slot's state and its amax history, oldest first
// (entries never filled are 0).
type FP8SlotInfo struct {
	Name                  string
	Role                  FP8Role
	DType                 DType // F8E4M3 or F8E5M2
	Scale, ScaleInv, Amax float32
	HistoryLen            int
	History               []float32
}

func (r *FP8Recipe) slotInfo(slot int64, withHistory bool) (FP8SlotInfo, error) {
	info := C.ampx_fp8_slot_info{struct_size: C.sizeof_ampx_fp8_slot_info}
	var history []float32
	var ptr *C.float
	var capacity C.int32_t
	if withHistory {
		history = make([]float32, r.historyLen)
		if len(history) > 0 {
			ptr, capacity = (*C.float)(unsafe.Pointer(&history[0])), C.int32_t(r.historyLen)
		}
	}
	h := r.handle()
	var out FP8SlotInfo
	err := callThen(func() C.ampx_status { return C.ampx_fp8_recipe_slot_get(h, C.int64_t(slot), &info, ptr, capacity) },
		func() {
			out = FP8SlotInfo{C.GoString(info.name), FP8Role(info.role), DType(info.dtype), float32(info.scale),
				float32(info.scale_inv), float32(info.amax), int(info.history_len), history}
		}, r, history)
	return out, err
}

// Slot reads slot's state and amax history. Synchronizes.
func (r *FP8Recipe) Slot(slot int64) (FP8SlotInfo, error) { return r.slotInfo(slot, true) }

// FP8TensorReport is what FP8 at a slot's scale would do to a tensor: of
// its non-zero finite elements, the fractions flushed to zero or
// saturated, in each format.
type FP8TensorReport struct {
	Count                      int64
	FlushedE4M3, SaturatedE4M3 float64
	FlushedE5M2, SaturatedE5M2 float64
	Scale                      float32 // the slot's scale the fractions are for
	DType                      DType   // the slot's own format
}

// Inspect reports what FP8 at slot's current scale would do to t (the
// precision doctor's ampx_doctor_fp8_inspect). Synchronizes.
func (r *FP8Recipe) Inspect(slot int64, t *Tensor) (FP8TensorReport, error) {
	rep := C.ampx_fp8_tensor_report{struct_size: C.sizeof_ampx_fp8_tensor_report}
	h, th := r.handle(), t.handle()
	err := call(func() C.ampx_status { return C.ampx_doctor_fp8_inspect(h, C.int64_t(slot), th, &rep) }, r, t)
	return FP8TensorReport{int64(rep.count), float64(rep.flushed_e4m3), float64(rep.saturated_e4m3),
		float64(rep.flushed_e5m2), float64(rep.saturated_e5m2), float32(rep.scale), DType(rep.dtype)}, err
}

// Summary is a table of the slots: name, format, scale, step amax, history
// maximum and filled length (ampx_doctor_fp8_summary). Synchronizes.
func (r *FP8Recipe) Summary() (string, error) {
	h := r.handle()
	return readString(func(text **C.char) C.ampx_status { return C.ampx_doctor_fp8_summary(h, text) }, r)
}

// CopyFP8From sets the FP8 tensor t = src (F32, F16 or BF16, as many
// elements) rounded to nearest even, values beyond the format's max
// following overflow (CopyFrom uses torch's rules: E4M3 saturates, E5M2
// overflows to inf).
func (t *Tensor) CopyFP8From(src *Tensor, overflow FP8Overflow) error {
	dst, s := t.handle(), src.handle()
	return call(func() C.ampx_status { return C.ampx_tensor_copy_fp8(dst, s, C.ampx_fp8_overflow(overflow)) }, t, src)
}

// recipeArg is recipe's handle where nil means "none": a closed recipe
// (whose handle is nil too) is ErrStaleHandle rather than silently none.
func recipeArg(recipe *FP8Recipe, where string) (C.ampx_fp8_recipe, error) {
	r := recipe.handle()
	if recipe != nil && r == nil {
		return nil, &Error{Status: ErrStaleHandle, Message: where + ": the FP8 recipe was closed"}
	}
	return r, nil
}

// SetFP8 makes the policy an FP8 one with recipe (the policy keeps its own
// reference), or a plain one again with nil: linear and matmul with
// m * n * k >= minGemmSize run in FP8. ErrNotSupported on a device without
// FP8 products; the policy is unchanged on error.
func (a *Autocast) SetFP8(recipe *FP8Recipe, minGemmSize int64) error {
	h := a.handle()
	r, err := recipeArg(recipe, "Autocast.SetFP8")
	if err != nil {
		return err
	}
	return call(func() C.ampx_status { return C.ampx_autocast_set_fp8(h, r, C.int64_t(minGemmSize)) }, a, recipe)
}

// FP8Stats counts a policy's linear/matmul calls run in FP8 and those that
// fell back to the policy's dtype, with the last fallback's reason.
type FP8Stats struct {
	FP8Products, Fallbacks int64
	LastFallback           string
}

// FP8Stats reads the policy's FP8 counts.
func (a *Autocast) FP8Stats() (FP8Stats, error) {
	s := C.ampx_fp8_stats{struct_size: C.sizeof_ampx_fp8_stats}
	h := a.handle()
	var out FP8Stats
	err := callThen(func() C.ampx_status { return C.ampx_autocast_fp8_stats(h, &s) }, func() {
		out = FP8Stats{int64(s.fp8_products), int64(s.fallbacks), C.GoString(s.last_fallback)}
	}, a)
	return out, err
}

// SetFP8Recipe makes the wrapper MAX-reduce recipe's step amaxes over the
// ranks before its updates, so every rank's scales stay bitwise equal
// (nil detaches). Every rank attaches a recipe with the same slots.
func (d *DataParallel) SetFP8Recipe(recipe *FP8Recipe) error {
	h := d.handle()
	r, err := recipeArg(recipe, "DataParallel.SetFP8Recipe")
	if err != nil {
		return err
	}
	return call(func() C.ampx_status { return C.ampx_data_parallel_set_fp8_recipe(h, r) }, d, recipe)
}

// SaveCheckpointFP8 is SaveCheckpoint plus recipe's options and per-slot
// state (scales, amaxes, histories) in a section of its own.
func SaveCheckpointFP8(path string, params []*Tensor, opt *Optimizer, scaler *Scaler, recipe *FP8Recipe) error {
	r, err := recipeArg(recipe, "FP8 checkpoint")
	if err != nil {
		return err
	}
	return checkpointFile(path, params, opt, scaler, func(p *C.char, t *C.ampx_tensor, n C.size_t,
		o C.ampx_optimizer, s C.ampx_scaler) C.ampx_status {
		return C.ampx_checkpoint_file_save_fp8(p, t, n, o, s, r)
	}, recipe)
}

// LoadCheckpointFP8 is LoadCheckpoint plus recipe's saved state, matched
// by slot name; recipe must have the saved options (else
// ErrInvalidArgument, nothing changed).
func LoadCheckpointFP8(path string, params []*Tensor, opt *Optimizer, scaler *Scaler, recipe *FP8Recipe) error {
	r, err := recipeArg(recipe, "FP8 checkpoint")
	if err != nil {
		return err
	}
	return checkpointFile(path, params, opt, scaler, func(p *C.char, t *C.ampx_tensor, n C.size_t,
		o C.ampx_optimizer, s C.ampx_scaler) C.ampx_status {
		return C.ampx_checkpoint_file_load_fp8(p, t, n, o, s, r)
	}, recipe)
}
