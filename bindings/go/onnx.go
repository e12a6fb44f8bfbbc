package ampx

// ONNX export (section 19 of ampx.h): a forward pass recorded on the tape
// written as an ONNX model for ONNX Runtime and the engines' runtimes.

// #include <stdlib.h>
// #include <ampx/ampx.h>
import "C"

import (
	"fmt"
	"unsafe"
)

// OnnxNamed is a tensor with its name in the exported graph.
type OnnxNamed struct {
	Name   string
	Tensor *Tensor
}

// OnnxOptions are ExportOnnx's options (ampx_onnx_options); the zero value
// is the header's default: opset 17, IR 8, static shapes, F32 weights.
type OnnxOptions struct {
	Opset        int32  // 9 to 23; 0: 17
	IRVersion    int32  // 0: 8 (or the opset's, if newer)
	BatchDim     string // "": static shapes; else the name of dim 0 of inputs and outputs
	F16Weights   bool   // FLOAT16 initializers, each followed by a Cast to FLOAT
	ExternalData int32  // AMPX_ONNX_EXTERNAL_*; 0: beyond 2 GiB only
	Constants    []OnnxNamed
}

// ExportOnnx writes the recorded computation of outputs from inputs to
// path as an ONNX model (ampx_onnx_export). Record the forward with grad
// mode on and each input requiring grad; export before Backward. An output
// that is an input passes it through. The file is replaced atomically; on
// an error no file is left.
func ExportOnnx(path string, inputs, outputs []OnnxNamed, options *OnnxOptions) error {
	const function = "ampx.ExportOnnx"
	if options == nil {
		options = &OnnxOptions{}
	}
	cpath, err := cString(path, function, "path")
	if err != nil {
		return err
	}
	defer C.free(unsafe.Pointer(cpath))
	// Every array C reads lives in C memory: the options struct points to
	// some of them, and cgo forbids Go memory holding Go pointers there.
	var frees []func()
	defer func() {
		for _, f := range frees {
			f()
		}
	}()
	lists := func(named []OnnxNamed, what string) (*C.ampx_tensor, **C.char, error) {
		if len(named) == 0 {
			return nil, nil, nil
		}
		n := C.size_t(len(named))
		handles := (*[1 << 28]C.ampx_tensor)(C.malloc(n * C.size_t(unsafe.Sizeof(C.ampx_tensor(nil)))))[:len(named):len(named)]
		names := (*[1 << 28]*C.char)(C.malloc(n * C.size_t(unsafe.Sizeof((*C.char)(nil)))))[:len(named):len(named)]
		frees = append(frees, func() { C.free(unsafe.Pointer(&handles[0])); C.free(unsafe.Pointer(&names[0])) })
		for i, t := range named {
			if t.Tensor == nil {
				return nil, nil, &Error{Status: ErrInvalidArgument, Message: fmt.Sprintf(
					"%s: %s[%d] has no tensor", function, what, i)}
			}
			names[i] = nil
			c, err := cString(t.Name, function, fmt.Sprintf("%s[%d].Name", what, i))
			if err != nil {
				return nil, nil, err
			}
			names[i] = c
			frees = append(frees, func() { C.free(unsafe.Pointer(c)) })
			handles[i] = t.Tensor.handle()
		}
		return &handles[0], &names[0], nil
	}
	ins, inNames, err := lists(inputs, "inputs")
	if err != nil {
		return err
	}
	outs, outNames, err := lists(outputs, "outputs")
	if err != nil {
		return err
	}
	consts, constNames, err := lists(options.Constants, "Constants")
	if err != nil {
		return err
	}
	o := C.ampx_onnx_options_default()
	o.opset = C.int32_t(options.Opset)
	o.ir_version = C.int32_t(options.IRVersion)
	if options.BatchDim != "" {
		b, err := cString(options.BatchDim, function, "BatchDim")
		if err != nil {
			return err
		}
		frees = append(frees, func() { C.free(unsafe.Pointer(b)) })
		o.batch_dim = b
	}
	o.weight_type = C.int32_t(C.AMPX_ONNX_WEIGHTS_F32)
	if options.F16Weights {
		o.weight_type = C.int32_t(C.AMPX_ONNX_WEIGHTS_F16)
	}
	o.external_data = C.int32_t(options.ExternalData)
	o.constant_outputs = consts
	o.constant_output_names = constNames
	o.constant_output_count = C.size_t(len(options.Constants))
	return call(func() C.ampx_status {
		return C.ampx_onnx_export(cpath, ins, inNames, C.size_t(len(inputs)), outs, outNames,
			C.size_t(len(outputs)), &o)
	}, inputs, outputs, options)
}
