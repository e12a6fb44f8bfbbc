//! Element types, devices and the host element types that map to them.
use std::fmt;

use ampx_sys as sys;

use crate::error::static_str;

/// Element types of tensors (`ampx_dtype`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    /// IEEE 754 binary32.
    F32,
    /// IEEE 754 binary16.
    F16,
    /// bfloat16.
    BF16,
    /// 32-bit signed integer.
    I32,
    /// 64-bit signed integer.
    I64,
    /// OCP FP8 E4M3 (E4M3FN, torch.float8_e4m3fn): max 448, no infinities.
    /// Storage and FP8 products only.
    F8E4M3,
    /// OCP FP8 E5M2 (torch.float8_e5m2): max 57344, IEEE inf and NaN.
    F8E5M2,
}

impl DType {
    /// The C value.
    pub fn to_raw(self) -> sys::ampx_dtype {
        match self {
            DType::F32 => sys::AMPX_F32,
            DType::F16 => sys::AMPX_F16,
            DType::BF16 => sys::AMPX_BF16,
            DType::I32 => sys::AMPX_I32,
            DType::I64 => sys::AMPX_I64,
            DType::F8E4M3 => sys::AMPX_F8E4M3,
            DType::F8E5M2 => sys::AMPX_F8E5M2,
        }
    }

    /// The type for a C value, `None` if it is not one.
    pub fn from_raw(raw: sys::ampx_dtype) -> Option<DType> {
        Some(match raw {
            sys::AMPX_F32 => DType::F32,
            sys::AMPX_F16 => DType::F16,
            sys::AMPX_BF16 => DType::BF16,
            sys::AMPX_I32 => DType::I32,
            sys::AMPX_I64 => DType::I64,
            sys::AMPX_F8E4M3 => DType::F8E4M3,
            sys::AMPX_F8E5M2 => DType::F8E5M2,
            _ => return None,
        })
    }

    /// Size of one element in bytes (`ampx_dtype_size`).
    pub fn size(self) -> usize {
        // SAFETY: thread-safe, accepts any value.
        unsafe { sys::ampx_dtype_size(self.to_raw()) }
    }

    /// The library's name: "f32", "f16", "bf16", "i32", "i64", ...
    /// (`ampx_dtype_name`).
    pub fn name(self) -> &'static str {
        // SAFETY: returns a static string, never NULL.
        unsafe { static_str(sys::ampx_dtype_name(self.to_raw())) }
    }

    /// True for F32, F16, BF16 and the FP8 types.
    pub fn is_floating(self) -> bool {
        matches!(self, DType::F32 | DType::F16 | DType::BF16 | DType::F8E4M3 | DType::F8E5M2)
    }

    /// True for F8E4M3 and F8E5M2.
    pub fn is_fp8(self) -> bool {
        matches!(self, DType::F8E4M3 | DType::F8E5M2)
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A device: the CPU or one CUDA device.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Device {
    /// The host CPU.
    Cpu,
    /// The CUDA device with this ordinal.
    Cuda(i32),
}

/// An IEEE binary16 value, held as its bits (Rust has no `f16` on stable).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct F16(pub u16);

/// A bfloat16 value, held as its bits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct Bf16(pub u16);

impl Bf16 {
    /// Rounds an f32 to the nearest bfloat16 (ties to even; NaN stays NaN).
    pub fn from_f32(value: f32) -> Bf16 {
        let bits = value.to_bits();
        if value.is_nan() {
            return Bf16(((bits >> 16) as u16) | 0x40);
        }
        let round = 0x7fff + ((bits >> 16) & 1);
        Bf16((bits.wrapping_add(round) >> 16) as u16)
    }

    /// The exact f32 value.
    pub fn to_f32(self) -> f32 {
        f32::from_bits(u32::from(self.0) << 16)
    }
}

/// An FP8 E4M3 value, held as its bits (ampx converts: [`crate::Tensor::cast`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct F8E4M3(pub u8);

/// An FP8 E5M2 value, held as its bits.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[repr(transparent)]
pub struct F8E5M2(pub u8);

mod sealed {
    pub trait Sealed {}
}

/// Host types whose memory layout is exactly one element of a [`DType`]:
/// `f32`, `i32`, `i64`, [`F16`], [`Bf16`], [`F8E4M3`] and [`F8E5M2`]. Sealed: the binding copies
/// raw bytes between tensors and slices of these types.
pub trait Element: Copy + Default + sealed::Sealed + 'static {
    /// The element type this host type holds.
    const DTYPE: DType;
}

macro_rules! element {
    ($($ty:ty => $dtype:ident),*) => {$(
        impl sealed::Sealed for $ty {}
        impl Element for $ty {
            const DTYPE: DType = DType::$dtype;
        }
    )*};
}
element!(f32 => F32, F16 => F16, Bf16 => BF16, i32 => I32, i64 => I64, F8E4M3 => F8E4M3,
         F8E5M2 => F8E5M2);
