package ampx

// safetensors files (section 16 of ampx.h), the format PyTorch, Hugging
// Face and JAX exchange weights in.

// #include <stdlib.h>
// #include <ampx/ampx.h>
import "C"

import (
	"fmt"
	"sort"
	"unsafe"
)

// cStrings copies strs for C: the array (pass &array[0]) and a function
// that frees the copies. A string with a NUL is refused.
func cStrings(strs []string, function, what string) ([]*C.char, func(), error) {
	out := make([]*C.char, 0, len(strs))
	free := func() {
		for _, s := range out {
			C.free(unsafe.Pointer(s))
		}
	}
	for i, s := range strs {
		c, err := cString(s, function, fmt.Sprintf("%s[%d]", what, i))
		if err != nil {
			free()
			return nil, nil, err
		}
		out = append(out, c)
	}
	return out, free, nil
}

func firstOf(strs []*C.char) **C.char {
	if len(strs) == 0 {
		return nil
	}
	return &strs[0]
}

// SaveSafetensors writes tensors to path as a safetensors file
// (ampx_safetensors_save): tensor i is named names[i], or, when names is
// nil, by its own name (Tensor.SetName). metadata becomes the file's
// "__metadata__" (nil or empty: none). Names must be unique and non-empty;
// the file is replaced atomically. Files load in safetensors.torch and the
// other readers of the format.
func SaveSafetensors(path string, tensors []*Tensor, names []string, metadata map[string]string) error {
	const function = "ampx.SaveSafetensors"
	if names != nil && len(names) != len(tensors) {
		return &Error{Status: ErrInvalidArgument, Message: fmt.Sprintf(
			"%s: %d names for %d tensors", function, len(names), len(tensors))}
	}
	cpath, err := cString(path, function, "path")
	if err != nil {
		return err
	}
	defer C.free(unsafe.Pointer(cpath))
	cnames, freeNames, err := cStrings(names, function, "names")
	if err != nil {
		return err
	}
	defer freeNames()
	keys := make([]string, 0, len(metadata))
	for k := range metadata {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	values := make([]string, len(keys))
	for i, k := range keys {
		values[i] = metadata[k]
	}
	ckeys, freeKeys, err := cStrings(keys, function, "metadata key")
	if err != nil {
		return err
	}
	defer freeKeys()
	cvalues, freeValues, err := cStrings(values, function, "metadata value")
	if err != nil {
		return err
	}
	defer freeValues()
	handles, count := arrayArg(handlesOf(tensors))
	namesArg := firstOf(cnames)
	keysArg, valuesArg := firstOf(ckeys), firstOf(cvalues)
	return call(func() C.ampx_status {
		return C.ampx_safetensors_save(cpath, handles, namesArg, count, keysArg, valuesArg,
			C.size_t(len(keys)))
	}, tensors)
}

// SafetensorsFile is an opened, validated safetensors file
// (ampx_safetensors): the file is mapped into memory, not read. A file
// that breaks the format's rules is refused with ErrCorrupt at
// OpenSafetensors.
type SafetensorsFile struct {
	ref[C.ampx_safetensors]
	ctx *Context
}

// OpenSafetensors opens path in ctx, checking its whole header.
func OpenSafetensors(ctx *Context, path string) (*SafetensorsFile, error) {
	cpath, err := cString(path, "ampx.OpenSafetensors", "path")
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(cpath))
	var h C.ampx_safetensors
	c := ctx.handle()
	if err := call(func() C.ampx_status { return C.ampx_safetensors_open(c, cpath, &h) }, ctx); err != nil {
		return nil, err
	}
	return own(&SafetensorsFile{ref[C.ampx_safetensors]{h}, ctx}, (*SafetensorsFile).Close), nil
}

// Close releases the file; the mapping stays while tensors loaded from it
// without a copy use it. Closing again does nothing.
func (f *SafetensorsFile) Close() {
	closeRef(f, func(h C.ampx_safetensors) { C.ampx_safetensors_release(h) })
}

func (f *SafetensorsFile) handle() C.ampx_safetensors { return handleOf[C.ampx_safetensors](f) }

// Len returns the number of tensors in the file.
func (f *SafetensorsFile) Len() (int, error) {
	return read[int](func(n *C.size_t) C.ampx_status { return C.ampx_safetensors_count(f.handle(), n) }, f)
}

// SafetensorsEntry describes one tensor of a file.
type SafetensorsEntry struct {
	Name      string
	DType     DType  // 0 for a format dtype ampx lacks (see DTypeName)
	DTypeName string // as the file spells it, e.g. "BF16"
	Shape     []int64
	Offset    uint64 // of its first byte, from the start of the file
	NBytes    uint64
}

// Entry returns tensor index's description; tensors are numbered in the
// order of their data in the file.
func (f *SafetensorsFile) Entry(index int) (SafetensorsEntry, error) {
	var out SafetensorsEntry
	if index < 0 {
		return out, &Error{Status: ErrInvalidArgument, Message: fmt.Sprintf(
			"ampx.SafetensorsFile.Entry: index %d is negative", index)}
	}
	e := C.ampx_safetensors_entry{struct_size: C.sizeof_ampx_safetensors_entry}
	err := callThen(func() C.ampx_status { return C.ampx_safetensors_entry_get(f.handle(), C.size_t(index), &e) },
		func() { out.Name, out.DTypeName = C.GoString(e.name), C.GoString(e.dtype_name) }, f)
	if err != nil {
		return out, err
	}
	out.DType = DType(e.dtype)
	out.Shape = make([]int64, e.ndim)
	for i := range out.Shape {
		out.Shape[i] = int64(e.shape[i])
	}
	out.Offset, out.NBytes = uint64(e.offset), uint64(e.nbytes)
	return out, nil
}

// Entries returns every tensor's description, in the order of its data.
func (f *SafetensorsFile) Entries() ([]SafetensorsEntry, error) {
	n, err := f.Len()
	if err != nil {
		return nil, err
	}
	out := make([]SafetensorsEntry, n)
	for i := range out {
		if out[i], err = f.Entry(i); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Find returns the index of the tensor named name (ErrInvalidArgument when
// the file has none).
func (f *SafetensorsFile) Find(name string) (int, error) {
	cname, err := cString(name, "ampx.SafetensorsFile.Find", "name")
	if err != nil {
		return 0, err
	}
	defer C.free(unsafe.Pointer(cname))
	return read[int](func(index *C.size_t) C.ampx_status { return C.ampx_safetensors_find(f.handle(), cname, index) }, f)
}

// Metadata returns the file's "__metadata__" (empty when it has none).
func (f *SafetensorsFile) Metadata() (map[string]string, error) {
	var n C.size_t
	h := f.handle()
	if err := call(func() C.ampx_status { return C.ampx_safetensors_metadata_count(h, &n) }, f); err != nil {
		return nil, err
	}
	out := make(map[string]string, int(n))
	for i := C.size_t(0); i < n; i++ {
		var key, value *C.char
		err := callThen(func() C.ampx_status { return C.ampx_safetensors_metadata_get(h, i, &key, &value) },
			func() { out[C.GoString(key)] = C.GoString(value) }, f)
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// LoadTensor returns the tensor named name as a new tensor of the file's
// context, with the file's dtype and shape, named name. On the CPU it lies
// on the file's mapping (no copy) when its data is aligned, unless copy is
// set; writing to it never changes the file.
func (f *SafetensorsFile) LoadTensor(name string, copy bool) (*Tensor, error) {
	cname, err := cString(name, "ampx.SafetensorsFile.LoadTensor", "name")
	if err != nil {
		return nil, err
	}
	defer C.free(unsafe.Pointer(cname))
	var flags C.uint32_t
	if copy {
		flags = C.AMPX_SAFETENSORS_COPY
	}
	var out C.ampx_tensor
	h := f.handle()
	err = call(func() C.ampx_status { return C.ampx_safetensors_load_tensor(h, cname, flags, &out) }, f)
	if err != nil {
		return nil, err
	}
	return f.ctx.owned(out, nil)
}

// LoadInto copies the file's tensor names[i] (names nil: each tensor's own
// name) into tensors[i]. Shapes must be equal, and dtypes too unless
// convert is set (then converted as Tensor.CopyFrom converts). Every pair
// is checked before any tensor is written.
func (f *SafetensorsFile) LoadInto(tensors []*Tensor, names []string, convert bool) error {
	const function = "ampx.SafetensorsFile.LoadInto"
	if names != nil && len(names) != len(tensors) {
		return &Error{Status: ErrInvalidArgument, Message: fmt.Sprintf(
			"%s: %d names for %d tensors", function, len(names), len(tensors))}
	}
	cnames, freeNames, err := cStrings(names, function, "names")
	if err != nil {
		return err
	}
	defer freeNames()
	var flags C.uint32_t
	if convert {
		flags = C.AMPX_SAFETENSORS_CONVERT
	}
	h := f.handle()
	handles, count := arrayArg(handlesOf(tensors))
	namesArg := firstOf(cnames)
	return call(func() C.ampx_status {
		return C.ampx_safetensors_load_into(h, namesArg, handles, count, flags)
	}, f, tensors)
}
