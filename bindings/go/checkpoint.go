package ampx

// #include <stdlib.h>
// #include <ampx/ampx.h>
import "C"

import "unsafe"

// Training checkpoint files (section 12 of ampx.h): tensors with their
// names, an optimizer's state and a scaler's state in one checksummed file,
// replaced atomically on save.

// SaveCheckpoint writes params (each named with SetName), opt and scaler
// (either may be nil) to path. Allowed between iterations only.
func SaveCheckpoint(path string, params []*Tensor, opt *Optimizer, scaler *Scaler) error {
	return checkpointFile(path, params, opt, scaler, func(p *C.char, t *C.ampx_tensor, n C.size_t,
		o C.ampx_optimizer, s C.ampx_scaler) C.ampx_status {
		return C.ampx_checkpoint_file_save(p, t, n, o, s)
	})
}

// LoadCheckpoint restores a file written by SaveCheckpoint into the same
// list of tensors and, when not nil, opt and scaler. Everything is
// validated before anything changes.
func LoadCheckpoint(path string, params []*Tensor, opt *Optimizer, scaler *Scaler) error {
	return checkpointFile(path, params, opt, scaler, func(p *C.char, t *C.ampx_tensor, n C.size_t,
		o C.ampx_optimizer, s C.ampx_scaler) C.ampx_status {
		return C.ampx_checkpoint_file_load(p, t, n, o, s)
	})
}

func checkpointFile(path string, params []*Tensor, opt *Optimizer, scaler *Scaler,
	f func(*C.char, *C.ampx_tensor, C.size_t, C.ampx_optimizer, C.ampx_scaler) C.ampx_status, keep ...any) error {
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	ptr, count := arrayArg(handlesOf(params))
	o, s := opt.handle(), scaler.handle()
	return call(func() C.ampx_status { return f(cpath, ptr, count, o, s) }, params, opt, scaler, keep)
}
