package ampx

import (
	"bytes"
	byteorder "encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// The format, as its specification writes it: an 8-byte little-endian
// header length N, N bytes of JSON {name: {"dtype", "shape",
// "data_offsets": [begin, end]}, "__metadata__": {string: string}}, then the
// data, little-endian, row-major, offsets relative to the data's start.
type stEntry struct {
	DType       string   `json:"dtype"`
	Shape       []int64  `json:"shape"`
	DataOffsets []uint64 `json:"data_offsets"`
}

type stTensor struct {
	name  string
	dtype string
	shape []int64
	data  []byte
}

// writeSafetensors writes a file of tensors, in the order given, by the
// specification alone.
func writeSafetensors(t *testing.T, path string, tensors []stTensor, metadata map[string]string) {
	header := map[string]any{}
	if metadata != nil {
		header["__metadata__"] = metadata
	}
	var data []byte
	for _, x := range tensors {
		header[x.name] = stEntry{x.dtype, x.shape, []uint64{uint64(len(data)), uint64(len(data) + len(x.data))}}
		data = append(data, x.data...)
	}
	text := must(json.Marshal(header))(t)
	for len(text)%8 != 0 {
		text = append(text, ' ')
	}
	var file bytes.Buffer
	ok(t, byteorder.Write(&file, byteorder.LittleEndian, uint64(len(text))))
	file.Write(text)
	file.Write(data)
	ok(t, os.WriteFile(path, file.Bytes(), 0o644))
}

// readSafetensors parses a file by the specification alone.
func readSafetensors(t *testing.T, path string) (map[string]stTensor, map[string]string) {
	raw := must(os.ReadFile(path))(t)
	n := byteorder.LittleEndian.Uint64(raw[:8])
	var header map[string]json.RawMessage
	ok(t, json.Unmarshal(raw[8:8+n], &header))
	data := raw[8+n:]
	tensors := map[string]stTensor{}
	var metadata map[string]string
	for name, value := range header {
		if name == "__metadata__" {
			ok(t, json.Unmarshal(value, &metadata))
			continue
		}
		var e stEntry
		ok(t, json.Unmarshal(value, &e))
		tensors[name] = stTensor{name, e.DType, e.Shape, data[e.DataOffsets[0]:e.DataOffsets[1]]}
	}
	return tensors, metadata
}

func f32Bytes(v ...float32) []byte {
	out := make([]byte, 4*len(v))
	for i, x := range v {
		byteorder.LittleEndian.PutUint32(out[4*i:], math.Float32bits(x))
	}
	return out
}

func i64Bytes(v ...int64) []byte {
	out := make([]byte, 8*len(v))
	for i, x := range v {
		byteorder.LittleEndian.PutUint64(out[8*i:], uint64(x))
	}
	return out
}

func tensorBytes(t *testing.T, x *Tensor) []byte {
	out := make([]byte, must(x.NBytes())(t))
	ok(t, x.ToHost(out))
	return out
}

// A file written by the specification loads bit for bit.
func TestSafetensorsReadsTheFormat(t *testing.T) {
	ctx := must(NewContext(nil))(t)
	defer ctx.Close()
	path := filepath.Join(t.TempDir(), "model.safetensors")
	nan := math.Float32frombits(0x7fc01234) // a NaN payload survives
	tensors := []stTensor{
		{"layer.weight", "F32", []int64{2, 3}, f32Bytes(1, -2, 3.5, nan, float32(math.Inf(-1)), 1e-40)},
		{"steps", "I64", []int64{2}, i64Bytes(-7, 1<<40)},
		{"half", "F16", []int64{1, 2}, []byte{0x00, 0x3c, 0x01, 0x80}}, // 1.0, -2^-24
		{"scalar", "BF16", []int64{}, []byte{0x80, 0x3f}},              // 1.0
		{"flags", "BOOL", []int64{3}, []byte{1, 0, 1}},                 // listed, not loadable
	}
	writeSafetensors(t, path, tensors, map[string]string{"format": "pt", "step": "7"})

	f := must(OpenSafetensors(ctx, path))(t)
	defer f.Close()
	if n := must(f.Len())(t); n != len(tensors) {
		t.Errorf("%d tensors", n)
	}
	if m := must(f.Metadata())(t); !reflect.DeepEqual(m, map[string]string{"format": "pt", "step": "7"}) {
		t.Errorf("metadata %v", m)
	}
	entries := must(f.Entries())(t)
	offset := uint64(0)
	for i, e := range entries { // numbered in the order of their data
		want := tensors[i]
		wantDType := map[string]DType{"F32": F32, "I64": I64, "F16": F16, "BF16": BF16}[want.dtype]
		if e.Name != want.name || e.DTypeName != want.dtype || e.DType != wantDType ||
			fmt.Sprint(e.Shape) != fmt.Sprint(want.shape) || e.NBytes != uint64(len(want.data)) {
			t.Errorf("entry %d: %+v, want %s %s %v", i, e, want.name, want.dtype, want.shape)
		}
		if i == 0 {
			offset = e.Offset
		} else if e.Offset != offset {
			t.Errorf("entry %d at %d, want %d", i, e.Offset, offset)
		}
		offset += uint64(len(want.data))
		if index := must(f.Find(want.name))(t); index != i {
			t.Errorf("Find(%q) = %d", want.name, index)
		}
	}
	for _, want := range tensors[:4] {
		for _, copy := range []bool{false, true} {
			x := must(f.LoadTensor(want.name, copy))(t)
			if got := tensorBytes(t, x); !bytes.Equal(got, want.data) {
				t.Errorf("%s (copy %v): % x, want % x", want.name, copy, got, want.data)
			}
			if name := must(x.Name())(t); name != want.name {
				t.Errorf("loaded tensor named %q", name)
			}
			x.Close()
		}
	}
	if _, err := f.LoadTensor("flags", false); !errors.Is(err, ErrDType) {
		t.Errorf("BOOL: %v", err)
	}
	if _, err := f.LoadTensor("missing", false); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("missing name: %v", err)
	}
	if _, err := f.Find("missing"); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("Find of a missing name: %v", err)
	}

	// Into existing tensors: all checked before any is written.
	w := must(ctx.Zeros(F32, 2, 3))(t)
	steps := must(ctx.Zeros(I64, 2))(t)
	ok(t, f.LoadInto([]*Tensor{w, steps}, []string{"layer.weight", "steps"}, false))
	if !bytes.Equal(tensorBytes(t, w), tensors[0].data) || !bytes.Equal(tensorBytes(t, steps), tensors[1].data) {
		t.Error("LoadInto did not copy the file's bits")
	}
	half := must(ctx.Zeros(F32, 1, 2))(t)
	ok(t, w.Fill(0))
	if err := f.LoadInto([]*Tensor{w, half}, []string{"layer.weight", "half"}, false); !errors.Is(err, ErrDType) {
		t.Errorf("f16 into f32 without convert: %v", err)
	}
	if v := must(ToSlice[float32](w))(t); v[0] != 0 {
		t.Error("a refused LoadInto wrote a tensor")
	}
	ok(t, f.LoadInto([]*Tensor{half}, []string{"half"}, true))
	if v := must(ToSlice[float32](half))(t); v[0] != 1 || v[1] != -float32(math.Ldexp(1, -24)) {
		t.Errorf("converted %v", v)
	}
	if err := f.LoadInto([]*Tensor{steps}, []string{"layer.weight"}, true); !errors.Is(err, ErrShape) {
		t.Errorf("shape mismatch: %v", err)
	}
	if err := f.LoadInto([]*Tensor{w}, []string{"a", "b"}, false); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("two names for one tensor: %v", err)
	}
	if err := f.LoadInto([]*Tensor{w}, nil, false); !errors.Is(err, ErrInvalidArgument) {
		t.Errorf("an unnamed tensor without names: %v", err)
	}
	f.Close()
	f.Close()
	if _, err := f.Len(); err == nil {
		t.Error("Len of a closed file succeeded")
	}
}

// What ampx writes parses by the specification, and round-trips.
func TestSafetensorsWritesTheFormat(t *testing.T) {
	ctx := must(NewContext(nil))(t)
	defer ctx.Close()
	dir := t.TempDir()
	path := filepath.Join(dir, "out.safetensors")
	w := must(FromSlice(ctx, []float32{1, -2, 0.5, 3}, 2, 2))(t)
	ok(t, w.SetName("fc.weight"))
	b := must(must(FromSlice(ctx, []float32{0.5, -0.25}, 2))(t).Cast(BF16))(t)
	ok(t, b.SetName("fc.bias"))
	n := must(FromSlice(ctx, []int64{42}, 1))(t)
	ok(t, n.SetName("count"))
	ok(t, SaveSafetensors(path, []*Tensor{w, b, n}, nil, map[string]string{"producer": "ampx", "ü": "✓"}))

	tensors, metadata := readSafetensors(t, path)
	if !reflect.DeepEqual(metadata, map[string]string{"producer": "ampx", "ü": "✓"}) {
		t.Errorf("metadata %v", metadata)
	}
	want := map[string]stTensor{
		"fc.weight": {"fc.weight", "F32", []int64{2, 2}, f32Bytes(1, -2, 0.5, 3)},
		"fc.bias":   {"fc.bias", "BF16", []int64{2}, []byte{0x00, 0x3f, 0x80, 0xbe}},
		"count":     {"count", "I64", []int64{1}, i64Bytes(42)},
	}
	if len(tensors) != len(want) {
		t.Errorf("tensors %v", tensors)
	}
	for name, x := range want {
		got := tensors[name]
		if got.dtype != x.dtype || fmt.Sprint(got.shape) != fmt.Sprint(x.shape) || !bytes.Equal(got.data, x.data) {
			t.Errorf("%s: %+v, want %+v", name, got, x)
		}
	}
	// And back through ampx: every tensor bit for bit, with its name.
	back := must(OpenSafetensors(ctx, path))(t)
	for _, x := range []*Tensor{w, b, n} {
		name := must(x.Name())(t)
		loaded := must(back.LoadTensor(name, false))(t)
		if !bytes.Equal(tensorBytes(t, loaded), tensorBytes(t, x)) ||
			must(loaded.DType())(t) != must(x.DType())(t) {
			t.Errorf("%s did not round-trip", name)
		}
		loaded.Close()
	}
	back.Close()
	// Names given explicitly win over the tensors' own.
	ok(t, SaveSafetensors(path, []*Tensor{w}, []string{"renamed"}, nil))
	f := must(OpenSafetensors(ctx, path))(t)
	defer f.Close()
	if e := must(f.Entries())(t); len(e) != 1 || e[0].Name != "renamed" {
		t.Errorf("entries %+v", e)
	}
	if m := must(f.Metadata())(t); len(m) != 0 {
		t.Errorf("metadata %v", m)
	}

	unnamed := must(FromSlice(ctx, []float32{1}, 1))(t)
	for what, err := range map[string]error{
		"an unnamed tensor":  SaveSafetensors(path, []*Tensor{unnamed}, nil, nil),
		"wrong name count":   SaveSafetensors(path, []*Tensor{w, b}, []string{"x"}, nil),
		"a repeated name":    SaveSafetensors(path, []*Tensor{w, b}, []string{"x", "x"}, nil),
		"a NUL in the path":  SaveSafetensors(path+"\x00x", []*Tensor{w}, nil, nil),
		"a NUL in a key":     SaveSafetensors(path, []*Tensor{w}, nil, map[string]string{"a\x00": "b"}),
		"a closed tensor":    SaveSafetensors(path, []*Tensor{func() *Tensor { unnamed.Close(); return unnamed }()}, []string{"x"}, nil),
		"a missing folder":   SaveSafetensors(filepath.Join(dir, "no", "x.safetensors"), []*Tensor{w}, nil, nil),
		"a missing file":     func() error { _, err := OpenSafetensors(ctx, filepath.Join(dir, "none")); return err }(),
		"an empty path open": func() error { _, err := OpenSafetensors(ctx, ""); return err }(),
	} {
		if err == nil {
			t.Errorf("%s: accepted", what)
		} else if !errors.Is(err, ErrInvalidArgument) && !errors.Is(err, ErrIO) {
			t.Errorf("%s: %v", what, err)
		}
	}
	// The file on disk is still the last good one.
	if e := must(f.Entries())(t); len(e) != 1 {
		t.Errorf("entries after failed saves %+v", e)
	}
}

func TestSafetensorsRefusesBrokenFiles(t *testing.T) {
	ctx := must(NewContext(nil))(t)
	defer ctx.Close()
	dir := t.TempDir()
	good := filepath.Join(dir, "good.safetensors")
	writeSafetensors(t, good, []stTensor{{"a", "F32", []int64{2}, f32Bytes(1, 2)}}, nil)
	raw := must(os.ReadFile(good))(t)
	overlap := filepath.Join(dir, "overlap.safetensors")
	writeSafetensors(t, overlap, []stTensor{{"a", "F32", []int64{2}, f32Bytes(1, 2)}}, nil)
	text := strings.Replace(string(must(os.ReadFile(overlap))(t)), `"shape":[2]`, `"shape":[3]`, 1)
	for what, content := range map[string][]byte{
		"truncated data":             raw[:len(raw)-1],
		"a header past the end":      append(i64Bytes(1<<20), raw[8:]...),
		"a shape unlike the offsets": []byte(text),
		"not JSON":                   append(i64Bytes(8), []byte("{{{{{{{{")...),
	} {
		path := filepath.Join(dir, "bad.safetensors")
		ok(t, os.WriteFile(path, content, 0o644))
		if _, err := OpenSafetensors(ctx, path); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: %v", what, err)
		}
	}
}
