//! safetensors files (section 16 of ampx.h, EXPERIMENTAL): the format
//! PyTorch, Hugging Face and JAX exchange weights in. ampx writes files
//! those libraries read and reads theirs; an opened file is validated whole
//! before anything is loaded, and mapped into memory rather than read.
use std::ffi::CString;
use std::fmt;
use std::os::raw::c_char;
use std::path::Path;
use std::ptr::{self, NonNull};

use ampx_sys as sys;

use crate::checkpoint_file::path_arg;
use crate::context::Context;
use crate::dtype::DType;
use crate::error::{c_string, check, owned_string, Result};
use crate::tensor::Tensor;

fn c_strings<'a>(texts: impl Iterator<Item = &'a str>, what: &str) -> Result<Vec<CString>> {
    texts.map(|t| c_string(t, what)).collect()
}

fn pointers(strings: &[CString]) -> Vec<*const c_char> {
    strings.iter().map(|s| s.as_ptr()).collect()
}

fn or_null<T>(v: &[T]) -> *const T {
    if v.is_empty() {
        ptr::null()
    } else {
        v.as_ptr()
    }
}

fn save(path: &Path, tensors: &[&Tensor], names: Option<&[&str]>, metadata: &[(&str, &str)]) -> Result<()> {
    let path = path_arg(path, "a safetensors path")?;
    let raw: Vec<sys::ampx_tensor> = tensors.iter().map(|t| t.as_raw()).collect();
    let names = names.map(|n| c_strings(n.iter().copied(), "a tensor name")).transpose()?;
    let name_ptrs = names.as_deref().map(pointers);
    let keys = c_strings(metadata.iter().map(|(k, _)| *k), "a metadata key")?;
    let values = c_strings(metadata.iter().map(|(_, v)| *v), "a metadata value")?;
    let (key_ptrs, value_ptrs) = (pointers(&keys), pointers(&values));
    // SAFETY: live tensors; every string is NUL-terminated and, with the
    // arrays, borrowed for the call only; NULL arrays go with count 0 (or,
    // for `names`, mean the tensors' own names).
    check(unsafe {
        sys::ampx_safetensors_save(
            path.as_ptr(),
            or_null(&raw),
            name_ptrs.as_deref().map_or(ptr::null(), or_null),
            raw.len(),
            or_null(&key_ptrs),
            or_null(&value_ptrs),
            key_ptrs.len(),
        )
    })
}

/// Writes `tensors` as (name, tensor) pairs to `path` as a safetensors file,
/// with `metadata` as its "__metadata__" string pairs (`ampx_safetensors_save`).
/// The tensors may be of any dtype and device; they are laid out as the
/// format's reference writer lays them out (by decreasing element size, then
/// name). The file is replaced atomically (written beside it, renamed over
/// it). Errors: `InvalidArgument` for a repeated, empty or reserved name, a
/// repeated key or a string with a NUL byte; `Io` when the file cannot be
/// written (`path` is then unchanged).
pub fn save_safetensors(path: impl AsRef<Path>, tensors: &[(&str, &Tensor)], metadata: &[(&str, &str)]) -> Result<()> {
    let names: Vec<&str> = tensors.iter().map(|(n, _)| *n).collect();
    let raw: Vec<&Tensor> = tensors.iter().map(|(_, t)| *t).collect();
    save(path.as_ref(), &raw, Some(&names), metadata)
}

/// As [`save_safetensors`], each tensor named by its own name
/// ([`Tensor::set_name`]); an unnamed tensor is `InvalidArgument`.
pub fn save_named_safetensors(path: impl AsRef<Path>, tensors: &[&Tensor], metadata: &[(&str, &str)]) -> Result<()> {
    save(path.as_ref(), tensors, None, metadata)
}

/// One tensor of a file ([`SafetensorsFile::entries`]; `ampx_safetensors_entry`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SafetensorsEntry {
    /// The tensor's name.
    pub name: String,
    /// Its dtype, `None` for a format dtype ampx has no type for (F64, U8, ...:
    /// listed, not loadable).
    pub dtype: Option<DType>,
    /// The format's name of the dtype, e.g. "F16".
    pub dtype_name: String,
    /// The shape.
    pub shape: Vec<i64>,
    /// The offset of the tensor's first byte from the file's start.
    pub offset: u64,
    /// The bytes of its data (0 for an empty tensor).
    pub nbytes: u64,
}

/// An opened, validated safetensors file (`ampx_safetensors`).
///
/// [`SafetensorsFile::open`] maps the file and checks its whole header
/// against the format's rules (a broken one is `Status::Corrupt`, naming
/// the rule). Tensors loaded without a copy live on the mapping, which
/// stays while they do, also after the file value is dropped. Belongs to
/// the context it was opened in (not `Send`).
pub struct SafetensorsFile {
    raw: NonNull<sys::ampx_safetensors_s>,
}

impl SafetensorsFile {
    /// Opens `path` in `ctx` (`ampx_safetensors_open`). Errors: `Io` (cannot
    /// be opened or mapped), `Corrupt` (a rule of the format broken),
    /// `NotSupported` (more than 8 dimensions, a NUL in a name).
    pub fn open(ctx: &Context, path: impl AsRef<Path>) -> Result<SafetensorsFile> {
        let path = path_arg(path.as_ref(), "a safetensors path")?;
        let mut out = ptr::null_mut();
        // SAFETY: live context, NUL-terminated path, valid out pointer.
        check(unsafe { sys::ampx_safetensors_open(ctx.as_raw(), path.as_ptr(), &mut out) })?;
        Ok(SafetensorsFile { raw: NonNull::new(out).expect("ampx returned a NULL safetensors file") })
    }

    /// The handle, borrowed: valid while `self` lives.
    pub fn as_raw(&self) -> sys::ampx_safetensors {
        self.raw.as_ptr()
    }

    /// The number of tensors in the file (`ampx_safetensors_count`).
    pub fn len(&self) -> Result<usize> {
        let mut count = 0;
        // SAFETY: live handle, valid out pointer.
        check(unsafe { sys::ampx_safetensors_count(self.as_raw(), &mut count) })?;
        Ok(count)
    }

    /// Whether the file holds no tensor.
    pub fn is_empty(&self) -> Result<bool> {
        Ok(self.len()? == 0)
    }

    /// Tensor `index`, numbered in the order of their data in the file
    /// (`ampx_safetensors_entry_get`); `InvalidArgument` past the end.
    pub fn entry(&self, index: usize) -> Result<SafetensorsEntry> {
        let mut e = sys::ampx_safetensors_entry::default();
        // SAFETY: live handle; struct_size set.
        check(unsafe { sys::ampx_safetensors_entry_get(self.as_raw(), index, &mut e) })?;
        let ndim = (e.ndim.max(0) as usize).min(e.shape.len());
        Ok(SafetensorsEntry {
            // SAFETY: strings owned by the handle, alive with `self`; copied now.
            name: unsafe { owned_string(e.name) },
            dtype: DType::from_raw(e.dtype),
            // SAFETY: as above.
            dtype_name: unsafe { owned_string(e.dtype_name) },
            shape: e.shape[..ndim].to_vec(),
            offset: e.offset,
            nbytes: e.nbytes,
        })
    }

    /// Every tensor of the file, in the order of their data.
    pub fn entries(&self) -> Result<Vec<SafetensorsEntry>> {
        (0..self.len()?).map(|i| self.entry(i)).collect()
    }

    /// The index of the tensor named `name` (`ampx_safetensors_find`);
    /// `InvalidArgument` (the message says so) when the file has none.
    pub fn find(&self, name: &str) -> Result<usize> {
        let name = c_string(name, "a tensor name")?;
        let mut index = 0;
        // SAFETY: live handle, NUL-terminated name, valid out pointer.
        check(unsafe { sys::ampx_safetensors_find(self.as_raw(), name.as_ptr(), &mut index) })?;
        Ok(index)
    }

    /// The "__metadata__" string pairs, ordered by key
    /// (`ampx_safetensors_metadata_count`, `_get`).
    pub fn metadata(&self) -> Result<Vec<(String, String)>> {
        let mut count = 0;
        // SAFETY: live handle, valid out pointer.
        check(unsafe { sys::ampx_safetensors_metadata_count(self.as_raw(), &mut count) })?;
        (0..count)
            .map(|index| {
                let (mut key, mut value) = (ptr::null(), ptr::null());
                // SAFETY: live handle, valid out pointers.
                check(unsafe { sys::ampx_safetensors_metadata_get(self.as_raw(), index, &mut key, &mut value) })?;
                // SAFETY: owned by the handle, alive with `self`; copied now.
                Ok(unsafe { (owned_string(key), owned_string(value)) })
            })
            .collect()
    }

    /// A new tensor of the file's context holding tensor `name`, with the
    /// file's dtype and shape, named `name` (`ampx_safetensors_load_tensor`).
    /// On a CPU context it lives on the file's mapping unless `copy` is set
    /// (or its data is misaligned in the file). Errors: `InvalidArgument` for
    /// a name the file lacks, `Dtype` for a format dtype ampx lacks.
    pub fn load(&self, name: &str, copy: bool) -> Result<Tensor> {
        let name = c_string(name, "a tensor name")?;
        let flags = if copy { sys::AMPX_SAFETENSORS_COPY } else { 0 };
        let mut out = ptr::null_mut();
        // SAFETY: live handle, NUL-terminated name, valid out pointer.
        check(unsafe { sys::ampx_safetensors_load_tensor(self.as_raw(), name.as_ptr(), flags, &mut out) })?;
        // SAFETY: a new reference owned by us.
        Ok(unsafe { Tensor::from_raw(out) })
    }

    fn load_into_raw(&self, names: Option<&[&str]>, tensors: &[&Tensor], convert: bool) -> Result<()> {
        let names = names.map(|n| c_strings(n.iter().copied(), "a tensor name")).transpose()?;
        let name_ptrs = names.as_deref().map(pointers);
        let raw: Vec<sys::ampx_tensor> = tensors.iter().map(|t| t.as_raw()).collect();
        let flags = if convert { sys::AMPX_SAFETENSORS_CONVERT } else { 0 };
        // SAFETY: live handles; names and arrays borrowed for the call.
        check(unsafe {
            sys::ampx_safetensors_load_into(
                self.as_raw(),
                name_ptrs.as_deref().map_or(ptr::null(), or_null),
                or_null(&raw),
                raw.len(),
                flags,
            )
        })
    }

    /// Loads the file's tensor of each pair's name into the pair's existing
    /// tensor (`ampx_safetensors_load_into`). Every pair is checked before
    /// any tensor is written: the name is in the file (else
    /// `InvalidArgument`), the shapes are equal (else `Shape`), and so are
    /// the dtypes (else `Dtype`) unless `convert` is set. A tensor equal in
    /// dtype ends up holding exactly the file's bits.
    pub fn load_into(&self, tensors: &[(&str, &Tensor)], convert: bool) -> Result<()> {
        let names: Vec<&str> = tensors.iter().map(|(n, _)| *n).collect();
        let raw: Vec<&Tensor> = tensors.iter().map(|(_, t)| *t).collect();
        self.load_into_raw(Some(&names), &raw, convert)
    }

    /// As [`SafetensorsFile::load_into`], each tensor loaded from the
    /// file's tensor of its own name ([`Tensor::set_name`]).
    pub fn load_into_named(&self, tensors: &[&Tensor], convert: bool) -> Result<()> {
        self.load_into_raw(None, tensors, convert)
    }
}

owns_reference!(SafetensorsFile, release: sys::ampx_safetensors_release);

impl fmt::Debug for SafetensorsFile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SafetensorsFile").field("raw", &self.raw).field("len", &self.len().ok()).finish()
    }
}
