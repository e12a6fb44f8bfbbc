package ampx

// #include <stdlib.h>
// #include <ampx/ampx.h>
import "C"

import "unsafe"

// AutocastOptions configures NewAutocast. Start from DefaultAutocastOptions.
type AutocastOptions struct {
	DType   DType // F16 or BF16
	Enabled bool  // a disabled policy changes nothing
	Cache   bool  // cache casts of F32 leaves for the outermost region
}

// DefaultAutocastOptions returns the library's defaults (F16, enabled, cached).
func DefaultAutocastOptions() AutocastOptions {
	c := C.ampx_autocast_options_default()
	return AutocastOptions{DType(c.dtype), c.enabled != 0, c.cache != 0}
}

// OpClass is the precision class of an op under autocast.
type OpClass int32

// Op classes (ampx_op_class).
const (
	OpLowerPrecision OpClass = C.AMPX_OP_LOWER_PRECISION // cast to the autocast dtype
	OpFP32           OpClass = C.AMPX_OP_FP32            // cast to F32
	OpPromote        OpClass = C.AMPX_OP_PROMOTE         // widest input type
	OpKeep           OpClass = C.AMPX_OP_KEEP            // no cast
)

// Autocast is a precision policy (torch.autocast): between Enter and Exit,
// ops on its context choose their compute dtype by class.
type Autocast struct {
	ref[C.ampx_autocast]
}

// NewAutocast creates a policy for ctx; opts nil means the defaults.
func NewAutocast(ctx *Context, opts *AutocastOptions) (*Autocast, error) {
	var h C.ampx_autocast
	var c *C.ampx_autocast_options
	if opts != nil {
		o := C.ampx_autocast_options_default()
		o.dtype, o.enabled, o.cache = C.ampx_dtype(opts.DType), cbool(opts.Enabled), cbool(opts.Cache)
		c = &o
	}
	if err := call(func() C.ampx_status { return C.ampx_autocast_create(ctx.handle(), c, &h) }, ctx); err != nil {
		return nil, err
	}
	return own(&Autocast{ref[C.ampx_autocast]{h}}, (*Autocast).Close), nil
}

// Close releases the policy, which must not be entered. Closing again does
// nothing.
func (a *Autocast) Close() {
	closeRef(a, func(h C.ampx_autocast) { C.ampx_autocast_release(h) })
}

func (a *Autocast) handle() C.ampx_autocast { return handleOf[C.ampx_autocast](a) }

// SetOpClass overrides the class of the op named opName (e.g. "softmax").
func (a *Autocast) SetOpClass(opName string, class OpClass) error {
	h := a.handle()
	name := C.CString(opName)
	defer C.free(unsafe.Pointer(name))
	return call(func() C.ampx_status { return C.ampx_autocast_set_op_class(h, name, C.ampx_op_class(class)) }, a)
}

// OpClass returns the class opName gets under this policy.
func (a *Autocast) OpClass(opName string) (OpClass, error) {
	var class C.ampx_op_class
	h := a.handle()
	name := C.CString(opName)
	defer C.free(unsafe.Pointer(name))
	err := call(func() C.ampx_status { return C.ampx_autocast_op_class(h, name, &class) }, a)
	return OpClass(class), err
}

// Enter makes ops on the context follow the policy until Exit; regions
// nest like a stack.
func (a *Autocast) Enter() error {
	h := a.handle()
	return call(func() C.ampx_status { return C.ampx_autocast_enter(h) }, a)
}

// Exit leaves the innermost region, which must be this policy's.
func (a *Autocast) Exit() error {
	h := a.handle()
	return call(func() C.ampx_status { return C.ampx_autocast_exit(h) }, a)
}

// CacheStats returns how many casts were served from the cache (hits) and
// performed into it (misses) since the policy was created.
func (a *Autocast) CacheStats() (hits, misses int64, err error) {
	var h64, m64 C.int64_t
	h := a.handle()
	err = call(func() C.ampx_status { return C.ampx_autocast_cache_stats(h, &h64, &m64) }, a)
	return int64(h64), int64(m64), err
}
