package ampx

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// A recorded linear layer exported: the file is a protobuf message that
// starts with ModelProto's ir_version (field 1, value 8); an output that no
// recorded op made is refused with no file left. (The Python test runs
// every exported model in ONNX Runtime.)
func TestExportOnnx(t *testing.T) {
	ctx := must(NewContext(nil))(t)
	defer ctx.Close()
	w := must(FromSlice(ctx, []float32{0.5, -1, 0.25, 2, 0, -0.5}, 2, 3))(t)
	ok(t, w.SetRequiresGrad(true))
	x := must(FromSlice(ctx, []float32{1, 2, 3}, 1, 3))(t)
	ok(t, x.SetRequiresGrad(true))
	y := must(Linear(x, w, nil, ActivationReLU))(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "linear.onnx")
	ok(t, ExportOnnx(path, []OnnxNamed{{"x", x}}, []OnnxNamed{{"y", y}},
		&OnnxOptions{BatchDim: "batch", Constants: []OnnxNamed{{"version_number", x}}}))
	data := must(os.ReadFile(path))(t)
	if len(data) < 2 || data[0] != 0x08 || data[1] != 8 {
		t.Fatalf("the file starts with % x, not ModelProto.ir_version = 8", data[:2])
	}
	lone := must(FromSlice(ctx, []float32{1}, 1))(t)
	bad := filepath.Join(dir, "bad.onnx")
	err := ExportOnnx(bad, []OnnxNamed{{"x", x}}, []OnnxNamed{{"lone", lone}}, nil)
	var e *Error
	if !errors.As(err, &e) || e.Status != ErrInvalidArgument {
		t.Fatalf("an output depending on no input gave %v", err)
	}
	if _, err := os.Stat(bad); !os.IsNotExist(err) {
		t.Fatalf("a failed export left %s", bad)
	}
}
