//! Raw FFI declarations of ampx's C ABI, `include/ampx/ampx.h` (ABI 0.1,
//! sections 1-15).
//!
//! Written by hand (no bindgen): every `AMPX_API` function, every struct with
//! `#[repr(C)]` and the header's field order, and every enum as a
//! `pub type ... = i32` with its pinned values as constants (the C enums are
//! `int`-sized: each has a `..._MAX_ENUM = 0x7fffffff` member). Handles are
//! pointers to opaque, unconstructible structs.
//!
//! The header's comments are the documentation of these functions; they are
//! summarised here only. Everything in this crate is `unsafe` to call: the
//! `ampx` crate is the safe layer over it.
//!
//! The build script links `libampx` from `$AMPX_LIB_DIR` (see `build.rs`).
#![allow(non_camel_case_types)]
use std::marker::{PhantomData, PhantomPinned};
use std::os::raw::{c_char, c_double, c_int, c_void};

// ---------------------------------------------------------------------------
// 1. Versions
// ---------------------------------------------------------------------------

/// `AMPX_VERSION_MAJOR` of the header these declarations follow.
pub const AMPX_VERSION_MAJOR: u32 = 0;
/// `AMPX_VERSION_MINOR` of the header these declarations follow.
pub const AMPX_VERSION_MINOR: u32 = 1;
/// `AMPX_VERSION_PATCH` of the header these declarations follow.
pub const AMPX_VERSION_PATCH: u32 = 0;
/// `AMPX_VERSION_NUMBER`: major * 10000 + minor * 100 + patch.
pub const AMPX_VERSION_NUMBER: u32 =
    AMPX_VERSION_MAJOR * 10000 + AMPX_VERSION_MINOR * 100 + AMPX_VERSION_PATCH;

// ---------------------------------------------------------------------------
// 2. Status codes
// ---------------------------------------------------------------------------

/// `ampx_status` (a C enum; the numbers are pinned).
pub type ampx_status = c_int;
pub const AMPX_OK: ampx_status = 0;
pub const AMPX_ERR_INVALID_ARGUMENT: ampx_status = 1;
pub const AMPX_ERR_SHAPE: ampx_status = 2;
pub const AMPX_ERR_DTYPE: ampx_status = 3;
pub const AMPX_ERR_DEVICE: ampx_status = 4;
pub const AMPX_ERR_OUT_OF_MEMORY: ampx_status = 5;
pub const AMPX_ERR_NO_DEVICE: ampx_status = 6;
pub const AMPX_ERR_NOT_SUPPORTED: ampx_status = 7;
pub const AMPX_ERR_ORDER: ampx_status = 8;
pub const AMPX_ERR_STALE_HANDLE: ampx_status = 9;
pub const AMPX_ERR_IO: ampx_status = 10;
pub const AMPX_ERR_CORRUPT: ampx_status = 11;
pub const AMPX_ERR_INTERNAL: ampx_status = 12;
pub const AMPX_STATUS_MAX_ENUM: ampx_status = 0x7fff_ffff;

// ---------------------------------------------------------------------------
// 3. Data types and devices
// ---------------------------------------------------------------------------

/// `ampx_dtype` (a C enum; 0 is never valid).
pub type ampx_dtype = c_int;
pub const AMPX_F32: ampx_dtype = 1;
pub const AMPX_F16: ampx_dtype = 2;
pub const AMPX_BF16: ampx_dtype = 3;
pub const AMPX_I32: ampx_dtype = 4;
pub const AMPX_I64: ampx_dtype = 5;
pub const AMPX_DTYPE_MAX_ENUM: ampx_dtype = 0x7fff_ffff;

/// `ampx_device_type` (a C enum).
pub type ampx_device_type = c_int;
pub const AMPX_DEVICE_CPU: ampx_device_type = 1;
pub const AMPX_DEVICE_CUDA: ampx_device_type = 2;
pub const AMPX_DEVICE_MAX_ENUM: ampx_device_type = 0x7fff_ffff;

// ---------------------------------------------------------------------------
// Handles (opaque)
// ---------------------------------------------------------------------------

macro_rules! opaque {
    ($(#[$doc:meta] $name:ident => $handle:ident;)*) => {$(
        #[$doc]
        #[repr(C)]
        pub struct $name {
            _private: [u8; 0],
            _marker: PhantomData<(*mut u8, PhantomPinned)>,
        }
        #[doc = concat!("Handle: a pointer to the opaque `", stringify!($name), "`.")]
        pub type $handle = *mut $name;
    )*};
}

opaque! {
    /// The struct behind `ampx_context`.
    ampx_context_s => ampx_context;
    /// The struct behind `ampx_tensor`.
    ampx_tensor_s => ampx_tensor;
    /// The struct behind `ampx_optimizer`.
    ampx_optimizer_s => ampx_optimizer;
    /// The struct behind `ampx_scaler`.
    ampx_scaler_s => ampx_scaler;
    /// The struct behind `ampx_autocast`.
    ampx_autocast_s => ampx_autocast;
    /// The struct behind `ampx_comm`.
    ampx_comm_s => ampx_comm;
    /// The struct behind `ampx_data_parallel`.
    ampx_data_parallel_s => ampx_data_parallel;
    /// The struct behind `ampx_doctor`.
    ampx_doctor_s => ampx_doctor;
    /// The struct behind `ampx_safetensors`.
    ampx_safetensors_s => ampx_safetensors;
}

/// DLPack's `DLManagedTensor`, opaque here (use a DLPack definition to read
/// it; ampx only passes pointers to it).
#[repr(C)]
pub struct DLManagedTensor {
    _private: [u8; 0],
    _marker: PhantomData<(*mut u8, PhantomPinned)>,
}

/// `AMPX_MAX_DIMS`: the most dimensions a tensor has.
pub const AMPX_MAX_DIMS: usize = 8;

// ---------------------------------------------------------------------------
// 4. Contexts
// ---------------------------------------------------------------------------

/// `alloc` hook of [`ampx_allocator`].
pub type ampx_alloc_fn =
    Option<unsafe extern "C" fn(user_data: *mut c_void, bytes: usize, alignment: usize) -> *mut c_void>;
/// `free` hook of [`ampx_allocator`].
pub type ampx_free_fn =
    Option<unsafe extern "C" fn(user_data: *mut c_void, ptr: *mut c_void, bytes: usize)>;

/// `ampx_allocator`: allocation hooks of a context.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ampx_allocator {
    /// `size_of::<ampx_allocator>()`.
    pub struct_size: usize,
    pub alloc: ampx_alloc_fn,
    pub free: ampx_free_fn,
    pub user_data: *mut c_void,
}

/// `ampx_context_options` (initialise with [`ampx_context_options_default`]).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ampx_context_options {
    pub struct_size: usize,
    pub device_type: ampx_device_type,
    pub device_index: i32,
    pub num_threads: i32,
    pub seed: u64,
    pub allocator: ampx_allocator,
    pub cuda_stream: *mut c_void,
}

/// `ampx_memory_stats` (set `struct_size` before the call).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ampx_memory_stats {
    pub struct_size: usize,
    pub current_bytes: u64,
    pub peak_bytes: u64,
    pub allocation_count: u64,
    pub reserved_bytes: u64,
}

// ---------------------------------------------------------------------------
// 5. Tensors
// ---------------------------------------------------------------------------

/// `ampx_deleter`: called when a wrapped tensor's memory is no longer used.
pub type ampx_deleter = Option<unsafe extern "C" fn(user_data: *mut c_void, data: *mut c_void)>;

// ---------------------------------------------------------------------------
// 6. Optimizers
// ---------------------------------------------------------------------------

/// `ampx_sgd_options`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ampx_sgd_options {
    pub struct_size: usize,
    pub lr: c_double,
    pub momentum: c_double,
    pub dampening: c_double,
    pub weight_decay: c_double,
    pub nesterov: i32,
    pub maximize: i32,
}

/// `ampx_adam_options` (Adam and AdamW).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ampx_adam_options {
    pub struct_size: usize,
    pub lr: c_double,
    pub beta1: c_double,
    pub beta2: c_double,
    pub eps: c_double,
    pub weight_decay: c_double,
    pub amsgrad: i32,
    pub maximize: i32,
    pub decoupled_weight_decay: i32,
}

/// `ampx_optimizer_state` (a C enum): kinds of per-parameter state.
pub type ampx_optimizer_state = c_int;
pub const AMPX_STATE_MASTER: ampx_optimizer_state = 1;
pub const AMPX_STATE_MOMENTUM: ampx_optimizer_state = 2;
pub const AMPX_STATE_EXP_AVG_SQ: ampx_optimizer_state = 3;
pub const AMPX_STATE_MAX_EXP_AVG_SQ: ampx_optimizer_state = 4;
pub const AMPX_STATE_MAX_ENUM: ampx_optimizer_state = 0x7fff_ffff;

// ---------------------------------------------------------------------------
// 7. Loss scaling
// ---------------------------------------------------------------------------

/// `ampx_scaler_options`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ampx_scaler_options {
    pub struct_size: usize,
    pub init_scale: c_double,
    pub growth_factor: c_double,
    pub backoff_factor: c_double,
    pub growth_interval: i32,
    pub enabled: i32,
    pub hysteresis: i32,
    pub min_scale: c_double,
    pub max_scale: c_double,
    pub consecutive_hysteresis: i32,
    pub clamp_to_max_scale: i32,
}

/// `ampx_scaler_counters` (set `struct_size` before the call).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ampx_scaler_counters {
    pub struct_size: usize,
    pub updates: i64,
    pub skipped: i64,
    pub backoffs: i64,
    pub growths: i64,
}

/// `ampx_scaler_state` (set `struct_size` before the call).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct ampx_scaler_state {
    pub struct_size: usize,
    pub scale: c_double,
    pub growth_factor: c_double,
    pub backoff_factor: c_double,
    pub growth_interval: i32,
    pub growth_tracker: i32,
    pub hysteresis: i32,
    pub hysteresis_left: i32,
    pub min_scale: c_double,
    pub max_scale: c_double,
    pub counters: ampx_scaler_counters,
    pub consecutive_hysteresis: i32,
    pub clamp_to_max_scale: i32,
}

// ---------------------------------------------------------------------------
// 8. Clipping and diagnostics
// ---------------------------------------------------------------------------

/// `ampx_nonfinite_grad`: one parameter whose gradient holds NaN or inf.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ampx_nonfinite_grad {
    /// Borrowed.
    pub param: ampx_tensor,
    /// Borrowed ("" if unnamed).
    pub name: *const c_char,
    pub nan_count: i64,
    pub inf_count: i64,
}

// ---------------------------------------------------------------------------
// 9. Autograd
// ---------------------------------------------------------------------------

/// `ampx_segment_fn`: a segment of a forward pass for [`ampx_checkpoint`].
pub type ampx_segment_fn = Option<
    unsafe extern "C" fn(
        user_data: *mut c_void,
        inputs: *const ampx_tensor,
        input_count: usize,
        outputs: *mut ampx_tensor,
        output_count: usize,
    ) -> ampx_status,
>;

/// `ampx_segment`: a segment for [`ampx_checkpoint_segment`], with the hook
/// that ampx calls exactly once when it no longer needs `user_data`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ampx_segment {
    /// `size_of::<ampx_segment>()`.
    pub struct_size: usize,
    pub fn_: ampx_segment_fn,
    pub user_data: *mut c_void,
    pub release: Option<unsafe extern "C" fn(user_data: *mut c_void)>,
}

// ---------------------------------------------------------------------------
// 13. Tensor views and gradient hooks
// ---------------------------------------------------------------------------

/// `ampx_grad_ready_fn`: told that `param`'s gradient is final for the
/// running backward pass (see [`ampx_set_grad_ready_hook`]).
pub type ampx_grad_ready_fn =
    Option<unsafe extern "C" fn(user_data: *mut c_void, param: ampx_tensor) -> ampx_status>;

/// The `release` callback of [`ampx_set_grad_ready_hook`].
pub type ampx_release_fn = Option<unsafe extern "C" fn(user_data: *mut c_void)>;

// ---------------------------------------------------------------------------
// 14. Data-parallel training
// ---------------------------------------------------------------------------

/// `AMPX_NCCL_UNIQUE_ID_BYTES`: the bytes of an NCCL unique id.
pub const AMPX_NCCL_UNIQUE_ID_BYTES: usize = 128;

/// `ampx_data_parallel_options`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ampx_data_parallel_options {
    pub struct_size: usize,
    pub bucket_bytes: usize,
    pub first_bucket_bytes: usize,
    pub average: i32,
    pub reduce_in_fp32: i32,
    pub overlap: i32,
    pub zero_stage: i32,
}

/// `ampx_data_parallel_stats` (set `struct_size` before the call).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ampx_data_parallel_stats {
    pub struct_size: usize,
    pub rank: i32,
    pub world_size: i32,
    pub bucket_count: i32,
    pub bucket_bytes: u64,
    pub buckets_launched: i32,
    pub last_launched_early: i32,
    pub reductions: i64,
    pub optimizer_state_bytes: u64,
    pub shard_elements: i64,
}

// ---------------------------------------------------------------------------
// 15. The precision doctor (EXPERIMENTAL)
// ---------------------------------------------------------------------------

/// `AMPX_DOCTOR_BINS`: bins of [`ampx_doctor_param_stats::histogram`].
pub const AMPX_DOCTOR_BINS: usize = 84;
/// `AMPX_DOCTOR_BIN_ZERO`: u == 0.
pub const AMPX_DOCTOR_BIN_ZERO: usize = 0;
/// `AMPX_DOCTOR_BIN_TINY`: 0 < |u| < 2^-64.
pub const AMPX_DOCTOR_BIN_TINY: usize = 1;
/// `AMPX_DOCTOR_BIN_HUGE`: 2^16 <= |u| < inf.
pub const AMPX_DOCTOR_BIN_HUGE: usize = 82;
/// `AMPX_DOCTOR_BIN_NONFINITE`: inf and NaN.
pub const AMPX_DOCTOR_BIN_NONFINITE: usize = 83;

/// `AMPX_DOCTOR_BIN_BINADE(e)`: the bin of 2^e <= |u| < 2^(e+1), e in [-64, 15].
pub const fn ampx_doctor_bin_binade(e: i32) -> usize {
    (2 + e + 64) as usize
}

/// `ampx_doctor_options`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ampx_doctor_options {
    pub struct_size: usize,
    pub interval: i32,
    pub history: i32,
}

/// `ampx_doctor_overview` (set `struct_size` before the call).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ampx_doctor_overview {
    pub struct_size: usize,
    pub steps: i64,
    pub sample_step: i64,
    pub sample_scale: c_double,
    pub param_count: i32,
    pub history_count: i32,
    pub finding_count: i32,
    pub missed_steps: i64,
}

/// `ampx_doctor_param_stats` (set `struct_size` before the call).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ampx_doctor_param_stats {
    pub struct_size: usize,
    pub index: i32,
    /// Owned by the doctor, valid until its next read ("" if unnamed).
    pub name: *const c_char,
    pub param_dtype: ampx_dtype,
    pub grad_dtype: ampx_dtype,
    pub elements: i64,
    pub histogram: [i64; AMPX_DOCTOR_BINS],
    pub amax: c_double,
    pub amax_scaled: c_double,
    pub grad_norm: c_double,
    pub fp16_zero_unscaled: c_double,
    pub fp16_subnormal_unscaled: c_double,
    pub fp16_zero_scaled: c_double,
    pub fp16_subnormal_scaled: c_double,
    pub fp16_overflow_scaled: c_double,
    pub headroom: i32,
    pub headroom_unbounded: i32,
    pub lost_update_fraction: c_double,
    pub lost_without_master_fraction: c_double,
}

/// `ampx_doctor_sample`: one history entry (no `struct_size`).
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ampx_doctor_sample {
    pub step: i64,
    pub scale: c_double,
    pub found_inf: i32,
    pub sampled: i32,
    pub grad_norm: c_double,
    pub first_overflow_param: i32,
    pub overflow_params: i32,
    pub fp16_lost_scaled: c_double,
    pub fp16_lost_unscaled: c_double,
}

/// `ampx_doctor_finding_code` (a C enum; the struct field is an `int32_t`).
pub type ampx_doctor_finding_code = c_int;
pub const AMPX_DOCTOR_SCALE_OSCILLATION: ampx_doctor_finding_code = 1;
pub const AMPX_DOCTOR_SCALE_AT_MINIMUM: ampx_doctor_finding_code = 2;
pub const AMPX_DOCTOR_SCALE_TOO_LOW: ampx_doctor_finding_code = 3;
pub const AMPX_DOCTOR_GRADIENTS_VANISHED: ampx_doctor_finding_code = 4;

/// `ampx_doctor_cause` (a C enum; the struct field is an `int32_t`).
pub type ampx_doctor_cause = c_int;
pub const AMPX_DOCTOR_CAUSE_NONE: ampx_doctor_cause = 0;
pub const AMPX_DOCTOR_CAUSE_LEARNING_RATE: ampx_doctor_cause = 1;
pub const AMPX_DOCTOR_CAUSE_UNSTABLE_OP: ampx_doctor_cause = 2;
pub const AMPX_DOCTOR_CAUSE_OUTLIER_BATCHES: ampx_doctor_cause = 3;
pub const AMPX_DOCTOR_CAUSE_NO_LOSS_SCALING: ampx_doctor_cause = 4;

/// `ampx_doctor_finding` (set `struct_size` before the call).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ampx_doctor_finding {
    pub struct_size: usize,
    pub code: i32,
    pub cause: i32,
    pub param: i32,
    /// Owned by the doctor, valid until its next read.
    pub param_name: *const c_char,
    pub first_step: i64,
    pub last_step: i64,
    /// Owned by the doctor, valid until its next read.
    pub message: *const c_char,
}

// ---------------------------------------------------------------------------
// 10. Autocast
// ---------------------------------------------------------------------------

/// `ampx_op_class` (a C enum): precision classes under autocast.
pub type ampx_op_class = c_int;
pub const AMPX_OP_LOWER_PRECISION: ampx_op_class = 1;
pub const AMPX_OP_FP32: ampx_op_class = 2;
pub const AMPX_OP_PROMOTE: ampx_op_class = 3;
pub const AMPX_OP_KEEP: ampx_op_class = 4;
pub const AMPX_OP_CLASS_MAX_ENUM: ampx_op_class = 0x7fff_ffff;

/// `ampx_autocast_options`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ampx_autocast_options {
    pub struct_size: usize,
    pub dtype: ampx_dtype,
    pub enabled: i32,
    pub cache: i32,
}

// ---------------------------------------------------------------------------
// 11. Ops
// ---------------------------------------------------------------------------

/// `ampx_reduction` (a C enum).
pub type ampx_reduction = c_int;
pub const AMPX_REDUCTION_MEAN: ampx_reduction = 1;
pub const AMPX_REDUCTION_SUM: ampx_reduction = 2;
pub const AMPX_REDUCTION_NONE: ampx_reduction = 3;
pub const AMPX_REDUCTION_MAX_ENUM: ampx_reduction = 0x7fff_ffff;

/// `ampx_activation` (a C enum).
pub type ampx_activation = c_int;
pub const AMPX_ACTIVATION_NONE: ampx_activation = 0;
pub const AMPX_ACTIVATION_RELU: ampx_activation = 1;
pub const AMPX_ACTIVATION_GELU: ampx_activation = 2;
pub const AMPX_ACTIVATION_MAX_ENUM: ampx_activation = 0x7fff_ffff;

// ---------------------------------------------------------------------------
// 16. safetensors files (EXPERIMENTAL)
// ---------------------------------------------------------------------------

/// `AMPX_SAFETENSORS_CONVERT`: `ampx_safetensors_load_into` converts dtypes.
pub const AMPX_SAFETENSORS_CONVERT: u32 = 1;
/// `AMPX_SAFETENSORS_COPY`: `ampx_safetensors_load_tensor` always copies.
pub const AMPX_SAFETENSORS_COPY: u32 = 2;

/// `ampx_safetensors_entry` (set `struct_size` before the call).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ampx_safetensors_entry {
    pub struct_size: usize,
    /// Owned by the file handle, valid until it is released.
    pub name: *const c_char,
    /// 0 when ampx has no such type (see `dtype_name`).
    pub dtype: ampx_dtype,
    pub dtype_name: *const c_char,
    pub ndim: i32,
    pub shape: [i64; AMPX_MAX_DIMS],
    pub offset: u64,
    pub nbytes: u64,
}

// ---------------------------------------------------------------------------
// 17. Learning-rate schedules on the device
// ---------------------------------------------------------------------------

/// `ampx_lr_decay`.
pub type ampx_lr_decay = c_int;
pub const AMPX_LR_CONSTANT: ampx_lr_decay = 0;
pub const AMPX_LR_LINEAR: ampx_lr_decay = 1;
pub const AMPX_LR_COSINE: ampx_lr_decay = 2;
pub const AMPX_LR_STEP: ampx_lr_decay = 3;
pub const AMPX_LR_DECAY_MAX_ENUM: ampx_lr_decay = 0x7fff_ffff;

/// `ampx_lr_schedule`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ampx_lr_schedule {
    pub struct_size: usize,
    pub warmup_steps: i64,
    pub warmup_start_factor: c_double,
    pub decay: ampx_lr_decay,
    pub total_steps: i64,
    pub end_factor: c_double,
    pub min_lr: c_double,
    pub step_size: i64,
    pub gamma: c_double,
}

/// `ampx_cross_entropy_options`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ampx_cross_entropy_options {
    pub struct_size: usize,
    pub reduction: ampx_reduction,
    pub ignore_index: i64,
    pub label_smoothing: c_double,
}

/// `ampx_attention_options`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ampx_attention_options {
    pub struct_size: usize,
    pub causal: i32,
    pub scale: c_double,
    pub dropout_p: c_double,
}

/// `ampx_conv2d_options`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ampx_conv2d_options {
    pub struct_size: usize,
    pub stride: [i64; 2],
    pub padding: [i64; 2],
    pub dilation: [i64; 2],
    pub groups: i64,
}

/// `ampx_pool2d_options`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ampx_pool2d_options {
    pub struct_size: usize,
    pub stride: [i64; 2],
    pub padding: [i64; 2],
    pub dilation: [i64; 2],
    pub ceil_mode: i32,
    pub count_include_pad: i32,
    pub divisor_override: i64,
}

// ---------------------------------------------------------------------------
// The functions, in the header's order.
// ---------------------------------------------------------------------------

extern "C" {
    // 1. Versions
    pub fn ampx_version() -> u32;
    pub fn ampx_version_string() -> *const c_char;
    pub fn ampx_has_cuda() -> c_int;

    // 2. Status codes and errors
    pub fn ampx_status_string(status: ampx_status) -> *const c_char;
    pub fn ampx_last_error() -> *const c_char;
    pub fn ampx_last_status() -> ampx_status;
    pub fn ampx_set_error(status: ampx_status, message: *const c_char) -> ampx_status;

    // 3. Data types and devices
    pub fn ampx_dtype_size(dtype: ampx_dtype) -> usize;
    pub fn ampx_dtype_name(dtype: ampx_dtype) -> *const c_char;
    pub fn ampx_cuda_device_count() -> i32;

    // 4. Contexts
    pub fn ampx_context_options_default() -> ampx_context_options;
    pub fn ampx_context_create(options: *const ampx_context_options, out: *mut ampx_context) -> ampx_status;
    pub fn ampx_context_release(ctx: ampx_context);
    pub fn ampx_context_retain(ctx: ampx_context) -> ampx_status;
    pub fn ampx_context_device(
        ctx: ampx_context,
        device_type: *mut ampx_device_type,
        device_index: *mut i32,
    ) -> ampx_status;
    pub fn ampx_context_synchronize(ctx: ampx_context) -> ampx_status;
    pub fn ampx_memory_stats_get(ctx: ampx_context, stats: *mut ampx_memory_stats) -> ampx_status;
    pub fn ampx_memory_reset_peak(ctx: ampx_context) -> ampx_status;
    pub fn ampx_context_set_tf32(ctx: ampx_context, allowed: i32, previous: *mut i32) -> ampx_status;

    // 5. Tensors
    pub fn ampx_tensor_empty(
        ctx: ampx_context,
        dtype: ampx_dtype,
        ndim: i32,
        shape: *const i64,
        out: *mut ampx_tensor,
    ) -> ampx_status;
    pub fn ampx_tensor_zeros(
        ctx: ampx_context,
        dtype: ampx_dtype,
        ndim: i32,
        shape: *const i64,
        out: *mut ampx_tensor,
    ) -> ampx_status;
    pub fn ampx_tensor_from_host(
        ctx: ampx_context,
        dtype: ampx_dtype,
        ndim: i32,
        shape: *const i64,
        data: *const c_void,
        bytes: usize,
        out: *mut ampx_tensor,
    ) -> ampx_status;
    pub fn ampx_tensor_wrap(
        ctx: ampx_context,
        dtype: ampx_dtype,
        ndim: i32,
        shape: *const i64,
        data: *mut c_void,
        bytes: usize,
        deleter: ampx_deleter,
        deleter_user_data: *mut c_void,
        out: *mut ampx_tensor,
    ) -> ampx_status;
    pub fn ampx_tensor_retain(tensor: ampx_tensor) -> ampx_status;
    pub fn ampx_tensor_release(tensor: ampx_tensor);
    pub fn ampx_tensor_to_host(tensor: ampx_tensor, dst: *mut c_void, bytes: usize) -> ampx_status;
    pub fn ampx_tensor_copy_from_host(tensor: ampx_tensor, src: *const c_void, bytes: usize) -> ampx_status;
    pub fn ampx_tensor_copy(dst: ampx_tensor, src: ampx_tensor) -> ampx_status;
    pub fn ampx_tensor_cast(src: ampx_tensor, dtype: ampx_dtype, out: *mut ampx_tensor) -> ampx_status;
    pub fn ampx_tensor_fill(tensor: ampx_tensor, value: c_double) -> ampx_status;
    pub fn ampx_tensor_set_name(tensor: ampx_tensor, name: *const c_char) -> ampx_status;
    pub fn ampx_tensor_name(tensor: ampx_tensor, name: *mut *const c_char) -> ampx_status;
    pub fn ampx_tensor_dtype(tensor: ampx_tensor, dtype: *mut ampx_dtype) -> ampx_status;
    pub fn ampx_tensor_ndim(tensor: ampx_tensor, ndim: *mut i32) -> ampx_status;
    pub fn ampx_tensor_shape(tensor: ampx_tensor, dims: *mut i64, capacity: i32) -> ampx_status;
    pub fn ampx_tensor_numel(tensor: ampx_tensor, numel: *mut i64) -> ampx_status;
    pub fn ampx_tensor_nbytes(tensor: ampx_tensor, nbytes: *mut usize) -> ampx_status;
    pub fn ampx_tensor_data(tensor: ampx_tensor, data: *mut *mut c_void) -> ampx_status;
    pub fn ampx_tensor_context(tensor: ampx_tensor, ctx: *mut ampx_context) -> ampx_status;
    pub fn ampx_tensor_set_grad(tensor: ampx_tensor, grad: ampx_tensor) -> ampx_status;
    pub fn ampx_tensor_grad(tensor: ampx_tensor, grad: *mut ampx_tensor) -> ampx_status;
    pub fn ampx_tensor_to_dlpack(tensor: ampx_tensor, out: *mut *mut DLManagedTensor) -> ampx_status;
    pub fn ampx_tensor_from_dlpack(
        ctx: ampx_context,
        src: *mut DLManagedTensor,
        out: *mut ampx_tensor,
    ) -> ampx_status;

    // 6. Optimizers
    pub fn ampx_sgd_options_default() -> ampx_sgd_options;
    pub fn ampx_adam_options_default() -> ampx_adam_options;
    pub fn ampx_adamw_options_default() -> ampx_adam_options;
    pub fn ampx_optimizer_create_sgd(
        ctx: ampx_context,
        params: *const ampx_tensor,
        count: usize,
        options: *const ampx_sgd_options,
        out: *mut ampx_optimizer,
    ) -> ampx_status;
    pub fn ampx_optimizer_create_adam(
        ctx: ampx_context,
        params: *const ampx_tensor,
        count: usize,
        options: *const ampx_adam_options,
        out: *mut ampx_optimizer,
    ) -> ampx_status;
    pub fn ampx_optimizer_release(optimizer: ampx_optimizer);
    pub fn ampx_optimizer_add_group(
        optimizer: ampx_optimizer,
        params: *const ampx_tensor,
        count: usize,
        lr: c_double,
        weight_decay: c_double,
        group_index: *mut i32,
    ) -> ampx_status;
    pub fn ampx_optimizer_group_count(optimizer: ampx_optimizer, count: *mut i32) -> ampx_status;
    pub fn ampx_optimizer_set_lr(optimizer: ampx_optimizer, group: i32, lr: c_double) -> ampx_status;
    pub fn ampx_optimizer_get_lr(optimizer: ampx_optimizer, group: i32, lr: *mut c_double) -> ampx_status;
    pub fn ampx_optimizer_step(optimizer: ampx_optimizer) -> ampx_status;
    pub fn ampx_optimizer_zero_grad(optimizer: ampx_optimizer) -> ampx_status;
    pub fn ampx_optimizer_state_tensor(
        optimizer: ampx_optimizer,
        param: ampx_tensor,
        kind: ampx_optimizer_state,
        out: *mut ampx_tensor,
    ) -> ampx_status;
    pub fn ampx_optimizer_param_steps(
        optimizer: ampx_optimizer,
        param: ampx_tensor,
        steps: *mut i64,
    ) -> ampx_status;
    pub fn ampx_optimizer_state_size(optimizer: ampx_optimizer, bytes: *mut usize) -> ampx_status;
    pub fn ampx_optimizer_save_state(optimizer: ampx_optimizer, buffer: *mut c_void, bytes: usize) -> ampx_status;
    pub fn ampx_optimizer_load_state(optimizer: ampx_optimizer, buffer: *const c_void, bytes: usize) -> ampx_status;

    // 7. Loss scaling
    pub fn ampx_scaler_options_default() -> ampx_scaler_options;
    pub fn ampx_scaler_create(
        ctx: ampx_context,
        options: *const ampx_scaler_options,
        out: *mut ampx_scaler,
    ) -> ampx_status;
    pub fn ampx_scaler_release(scaler: ampx_scaler);
    pub fn ampx_scaler_attach(scaler: ampx_scaler, optimizer: ampx_optimizer) -> ampx_status;
    pub fn ampx_scaler_scale_loss(scaler: ampx_scaler, loss: ampx_tensor, out: *mut ampx_tensor) -> ampx_status;
    pub fn ampx_scaler_scale_tensor(scaler: ampx_scaler, out: *mut ampx_tensor) -> ampx_status;
    pub fn ampx_scaler_get_scale(scaler: ampx_scaler, scale: *mut c_double) -> ampx_status;
    pub fn ampx_scaler_unscale(scaler: ampx_scaler, optimizer: ampx_optimizer) -> ampx_status;
    pub fn ampx_scaler_step(scaler: ampx_scaler, optimizer: ampx_optimizer) -> ampx_status;
    pub fn ampx_scaler_update(scaler: ampx_scaler) -> ampx_status;
    pub fn ampx_scaler_update_to(scaler: ampx_scaler, new_scale: c_double) -> ampx_status;
    pub fn ampx_scaler_found_inf(scaler: ampx_scaler, optimizer: ampx_optimizer, found: *mut i32) -> ampx_status;
    pub fn ampx_optimizer_last_step_taken(optimizer: ampx_optimizer, taken: *mut i32) -> ampx_status;
    pub fn ampx_scaler_get_counters(scaler: ampx_scaler, counters: *mut ampx_scaler_counters) -> ampx_status;
    pub fn ampx_scaler_get_state(scaler: ampx_scaler, state: *mut ampx_scaler_state) -> ampx_status;
    pub fn ampx_scaler_set_state(scaler: ampx_scaler, state: *const ampx_scaler_state) -> ampx_status;

    // 8. Gradient clipping and diagnostics
    pub fn ampx_clip_grad_norm(
        optimizer: ampx_optimizer,
        max_norm: c_double,
        norm_type: c_double,
        error_if_nonfinite: i32,
        total_norm: *mut ampx_tensor,
    ) -> ampx_status;
    pub fn ampx_clip_grad_value(optimizer: ampx_optimizer, clip_value: c_double) -> ampx_status;
    pub fn ampx_find_nonfinite_grads(
        optimizer: ampx_optimizer,
        entries: *mut ampx_nonfinite_grad,
        capacity: usize,
        found: *mut usize,
    ) -> ampx_status;

    // 9. Autograd
    pub fn ampx_tensor_set_requires_grad(tensor: ampx_tensor, requires_grad: i32) -> ampx_status;
    pub fn ampx_tensor_requires_grad(tensor: ampx_tensor, requires_grad: *mut i32) -> ampx_status;
    pub fn ampx_set_grad_enabled(ctx: ampx_context, enabled: i32, previous: *mut i32) -> ampx_status;
    pub fn ampx_backward(loss: ampx_tensor, scaler: ampx_scaler) -> ampx_status;
    pub fn ampx_scope_push(ctx: ampx_context) -> ampx_status;
    pub fn ampx_scope_pop(ctx: ampx_context) -> ampx_status;
    pub fn ampx_scope_depth(ctx: ampx_context, depth: *mut i32) -> ampx_status;
    pub fn ampx_checkpoint_segment(
        ctx: ampx_context,
        segment: *const ampx_segment,
        inputs: *const ampx_tensor,
        input_count: usize,
        outputs: *mut ampx_tensor,
        output_count: usize,
    ) -> ampx_status;
    pub fn ampx_checkpoint(
        ctx: ampx_context,
        fn_: ampx_segment_fn,
        user_data: *mut c_void,
        inputs: *const ampx_tensor,
        input_count: usize,
        outputs: *mut ampx_tensor,
        output_count: usize,
    ) -> ampx_status;

    // 10. Autocast
    pub fn ampx_autocast_options_default() -> ampx_autocast_options;
    pub fn ampx_autocast_create(
        ctx: ampx_context,
        options: *const ampx_autocast_options,
        out: *mut ampx_autocast,
    ) -> ampx_status;
    pub fn ampx_autocast_release(autocast: ampx_autocast);
    pub fn ampx_autocast_set_op_class(
        autocast: ampx_autocast,
        op_name: *const c_char,
        op_class: ampx_op_class,
    ) -> ampx_status;
    pub fn ampx_autocast_op_class(
        autocast: ampx_autocast,
        op_name: *const c_char,
        op_class: *mut ampx_op_class,
    ) -> ampx_status;
    pub fn ampx_autocast_enter(autocast: ampx_autocast) -> ampx_status;
    pub fn ampx_autocast_exit(autocast: ampx_autocast) -> ampx_status;
    pub fn ampx_autocast_cache_stats(autocast: ampx_autocast, hits: *mut i64, misses: *mut i64) -> ampx_status;

    // 11. Ops
    pub fn ampx_add(a: ampx_tensor, b: ampx_tensor, out: *mut ampx_tensor) -> ampx_status;
    pub fn ampx_sub(a: ampx_tensor, b: ampx_tensor, out: *mut ampx_tensor) -> ampx_status;
    pub fn ampx_mul(a: ampx_tensor, b: ampx_tensor, out: *mut ampx_tensor) -> ampx_status;
    pub fn ampx_div(a: ampx_tensor, b: ampx_tensor, out: *mut ampx_tensor) -> ampx_status;
    pub fn ampx_affine(a: ampx_tensor, scale: c_double, shift: c_double, out: *mut ampx_tensor) -> ampx_status;
    pub fn ampx_relu(x: ampx_tensor, out: *mut ampx_tensor) -> ampx_status;
    pub fn ampx_gelu(x: ampx_tensor, out: *mut ampx_tensor) -> ampx_status;
    pub fn ampx_gelu_tanh(x: ampx_tensor, out: *mut ampx_tensor) -> ampx_status;
    pub fn ampx_silu(x: ampx_tensor, out: *mut ampx_tensor) -> ampx_status;
    pub fn ampx_sigmoid(x: ampx_tensor, out: *mut ampx_tensor) -> ampx_status;
    pub fn ampx_tanh(x: ampx_tensor, out: *mut ampx_tensor) -> ampx_status;
    pub fn ampx_exp(x: ampx_tensor, out: *mut ampx_tensor) -> ampx_status;
    pub fn ampx_log(x: ampx_tensor, out: *mut ampx_tensor) -> ampx_status;
    pub fn ampx_sqrt(x: ampx_tensor, out: *mut ampx_tensor) -> ampx_status;
    pub fn ampx_rsqrt(x: ampx_tensor, out: *mut ampx_tensor) -> ampx_status;
    pub fn ampx_sum(x: ampx_tensor, out: *mut ampx_tensor) -> ampx_status;
    pub fn ampx_mean(x: ampx_tensor, out: *mut ampx_tensor) -> ampx_status;
    pub fn ampx_softmax(x: ampx_tensor, out: *mut ampx_tensor) -> ampx_status;
    pub fn ampx_log_softmax(x: ampx_tensor, out: *mut ampx_tensor) -> ampx_status;
    pub fn ampx_softmax_dim(x: ampx_tensor, dim: i32, out: *mut ampx_tensor) -> ampx_status;
    pub fn ampx_log_softmax_dim(x: ampx_tensor, dim: i32, out: *mut ampx_tensor) -> ampx_status;
    pub fn ampx_sum_dims(x: ampx_tensor, dims: *const i32, ndims: i32, keepdim: i32, out: *mut ampx_tensor)
        -> ampx_status;
    pub fn ampx_mean_dims(x: ampx_tensor, dims: *const i32, ndims: i32, keepdim: i32, out: *mut ampx_tensor)
        -> ampx_status;
    pub fn ampx_amax(x: ampx_tensor, dims: *const i32, ndims: i32, keepdim: i32, out: *mut ampx_tensor)
        -> ampx_status;
    pub fn ampx_cross_entropy(
        logits: ampx_tensor,
        labels: ampx_tensor,
        reduction: ampx_reduction,
        ignore_index: i64,
        out: *mut ampx_tensor,
    ) -> ampx_status;
    pub fn ampx_mse_loss(
        input: ampx_tensor,
        target: ampx_tensor,
        reduction: ampx_reduction,
        out: *mut ampx_tensor,
    ) -> ampx_status;
    pub fn ampx_matmul(a: ampx_tensor, b: ampx_tensor, out: *mut ampx_tensor) -> ampx_status;
    pub fn ampx_linear(
        x: ampx_tensor,
        weight: ampx_tensor,
        bias: ampx_tensor,
        activation: ampx_activation,
        out: *mut ampx_tensor,
    ) -> ampx_status;
    pub fn ampx_cross_entropy_options_default() -> ampx_cross_entropy_options;
    pub fn ampx_cross_entropy_ex(
        logits: ampx_tensor,
        labels: ampx_tensor,
        weight: ampx_tensor,
        options: *const ampx_cross_entropy_options,
        out: *mut ampx_tensor,
    ) -> ampx_status;
    pub fn ampx_rms_norm(x: ampx_tensor, weight: ampx_tensor, eps: c_double, out: *mut ampx_tensor) -> ampx_status;
    pub fn ampx_split(x: ampx_tensor, sizes: *const i64, count: usize, dim: i32, outs: *mut ampx_tensor)
        -> ampx_status;
    pub fn ampx_chunk(x: ampx_tensor, chunks: i32, dim: i32, outs: *mut ampx_tensor, count: *mut i32)
        -> ampx_status;
    pub fn ampx_masked_fill(x: ampx_tensor, mask: ampx_tensor, value: c_double, out: *mut ampx_tensor)
        -> ampx_status;
    pub fn ampx_pow(x: ampx_tensor, exponent: c_double, out: *mut ampx_tensor) -> ampx_status;
    pub fn ampx_rotary_embedding(
        x: ampx_tensor,
        cos: ampx_tensor,
        sin: ampx_tensor,
        interleaved: i32,
        out: *mut ampx_tensor,
    ) -> ampx_status;
    pub fn ampx_layer_norm(
        x: ampx_tensor,
        weight: ampx_tensor,
        bias: ampx_tensor,
        eps: c_double,
        out: *mut ampx_tensor,
    ) -> ampx_status;
    pub fn ampx_batch_norm(
        x: ampx_tensor,
        weight: ampx_tensor,
        bias: ampx_tensor,
        running_mean: ampx_tensor,
        running_var: ampx_tensor,
        training: i32,
        momentum: c_double,
        eps: c_double,
        out: *mut ampx_tensor,
    ) -> ampx_status;
    pub fn ampx_dropout(x: ampx_tensor, p: c_double, training: i32, out: *mut ampx_tensor) -> ampx_status;
    pub fn ampx_embedding(weight: ampx_tensor, indices: ampx_tensor, out: *mut ampx_tensor) -> ampx_status;
    pub fn ampx_reshape(x: ampx_tensor, ndim: i32, shape: *const i64, out: *mut ampx_tensor) -> ampx_status;
    pub fn ampx_transpose(x: ampx_tensor, dim0: i32, dim1: i32, out: *mut ampx_tensor) -> ampx_status;
    pub fn ampx_permute(x: ampx_tensor, ndim: i32, dims: *const i32, out: *mut ampx_tensor) -> ampx_status;
    pub fn ampx_concat(
        tensors: *const ampx_tensor,
        count: usize,
        dim: i32,
        out: *mut ampx_tensor,
    ) -> ampx_status;
    pub fn ampx_bce_with_logits(
        logits: ampx_tensor,
        targets: ampx_tensor,
        reduction: ampx_reduction,
        out: *mut ampx_tensor,
    ) -> ampx_status;
    pub fn ampx_attention_options_default() -> ampx_attention_options;
    pub fn ampx_scaled_dot_product_attention(
        q: ampx_tensor,
        k: ampx_tensor,
        v: ampx_tensor,
        mask: ampx_tensor,
        options: *const ampx_attention_options,
        out: *mut ampx_tensor,
    ) -> ampx_status;
    pub fn ampx_conv2d_options_default() -> ampx_conv2d_options;
    pub fn ampx_conv2d(
        x: ampx_tensor,
        weight: ampx_tensor,
        bias: ampx_tensor,
        options: *const ampx_conv2d_options,
        out: *mut ampx_tensor,
    ) -> ampx_status;
    pub fn ampx_pool2d_options_default() -> ampx_pool2d_options;
    pub fn ampx_max_pool2d(
        x: ampx_tensor,
        kernel_h: i64,
        kernel_w: i64,
        options: *const ampx_pool2d_options,
        out: *mut ampx_tensor,
    ) -> ampx_status;
    pub fn ampx_avg_pool2d(
        x: ampx_tensor,
        kernel_h: i64,
        kernel_w: i64,
        options: *const ampx_pool2d_options,
        out: *mut ampx_tensor,
    ) -> ampx_status;
    pub fn ampx_global_avg_pool2d(x: ampx_tensor, out: *mut ampx_tensor) -> ampx_status;

    // 12. Training checkpoint files
    pub fn ampx_checkpoint_file_save(
        path: *const c_char,
        params: *const ampx_tensor,
        count: usize,
        optimizer: ampx_optimizer,
        scaler: ampx_scaler,
    ) -> ampx_status;
    pub fn ampx_checkpoint_file_load(
        path: *const c_char,
        params: *const ampx_tensor,
        count: usize,
        optimizer: ampx_optimizer,
        scaler: ampx_scaler,
    ) -> ampx_status;

    // 13. Tensor views and gradient hooks
    pub fn ampx_tensor_view(
        base: ampx_tensor,
        byte_offset: usize,
        dtype: ampx_dtype,
        ndim: i32,
        shape: *const i64,
        out: *mut ampx_tensor,
    ) -> ampx_status;
    pub fn ampx_set_grad_ready_hook(
        ctx: ampx_context,
        fn_: ampx_grad_ready_fn,
        user_data: *mut c_void,
        release: ampx_release_fn,
    ) -> ampx_status;
    pub fn ampx_grad_ready(param: ampx_tensor) -> ampx_status;

    // 14. Data-parallel training (EXPERIMENTAL)
    pub fn ampx_comm_from_mpi(ctx: ampx_context, mpi_comm: *const c_void, out: *mut ampx_comm) -> ampx_status;
    pub fn ampx_comm_from_nccl(ctx: ampx_context, nccl_comm: *mut c_void, out: *mut ampx_comm) -> ampx_status;
    pub fn ampx_nccl_unique_id(id: *mut c_void, bytes: usize) -> ampx_status;
    pub fn ampx_comm_init_nccl(
        ctx: ampx_context,
        id: *const c_void,
        bytes: usize,
        world_size: i32,
        rank: i32,
        out: *mut ampx_comm,
    ) -> ampx_status;
    pub fn ampx_comm_rank(comm: ampx_comm, rank: *mut i32, size: *mut i32) -> ampx_status;
    pub fn ampx_comm_set_timeout(comm: ampx_comm, seconds: c_double) -> ampx_status;
    pub fn ampx_comm_release(comm: ampx_comm);
    pub fn ampx_data_parallel_options_default() -> ampx_data_parallel_options;
    pub fn ampx_data_parallel_create(
        comm: ampx_comm,
        optimizer: ampx_optimizer,
        options: *const ampx_data_parallel_options,
        out: *mut ampx_data_parallel,
    ) -> ampx_status;
    pub fn ampx_data_parallel_set_sync(dp: ampx_data_parallel, sync: i32) -> ampx_status;
    pub fn ampx_data_parallel_reduce(dp: ampx_data_parallel) -> ampx_status;
    pub fn ampx_data_parallel_get_stats(dp: ampx_data_parallel, stats: *mut ampx_data_parallel_stats) -> ampx_status;
    pub fn ampx_data_parallel_release(dp: ampx_data_parallel);

    // 15. The precision doctor (EXPERIMENTAL)
    pub fn ampx_doctor_options_default() -> ampx_doctor_options;
    pub fn ampx_doctor_create(
        ctx: ampx_context,
        optimizer: ampx_optimizer,
        options: *const ampx_doctor_options,
        out: *mut ampx_doctor,
    ) -> ampx_status;
    pub fn ampx_doctor_set_interval(doctor: ampx_doctor, interval: i32) -> ampx_status;
    pub fn ampx_doctor_examine(doctor: ampx_doctor, overview: *mut ampx_doctor_overview) -> ampx_status;
    pub fn ampx_doctor_get_param_stats(
        doctor: ampx_doctor,
        index: i32,
        stats: *mut ampx_doctor_param_stats,
    ) -> ampx_status;
    pub fn ampx_doctor_get_history(
        doctor: ampx_doctor,
        samples: *mut ampx_doctor_sample,
        capacity: i32,
        count: *mut i32,
    ) -> ampx_status;
    pub fn ampx_doctor_get_finding(
        doctor: ampx_doctor,
        index: i32,
        finding: *mut ampx_doctor_finding,
    ) -> ampx_status;
    pub fn ampx_doctor_finding_code_name(code: i32) -> *const c_char;
    pub fn ampx_doctor_cause_name(cause: i32) -> *const c_char;
    pub fn ampx_doctor_summary(doctor: ampx_doctor, text: *mut *const c_char) -> ampx_status;
    pub fn ampx_doctor_write_report(doctor: ampx_doctor, path: *const c_char) -> ampx_status;
    pub fn ampx_doctor_release(doctor: ampx_doctor);

    // 16. safetensors files (EXPERIMENTAL)
    pub fn ampx_safetensors_save(
        path: *const c_char,
        tensors: *const ampx_tensor,
        names: *const *const c_char,
        count: usize,
        metadata_keys: *const *const c_char,
        metadata_values: *const *const c_char,
        metadata_count: usize,
    ) -> ampx_status;
    pub fn ampx_safetensors_open(
        ctx: ampx_context,
        path: *const c_char,
        out: *mut ampx_safetensors,
    ) -> ampx_status;
    pub fn ampx_safetensors_release(file: ampx_safetensors);
    pub fn ampx_safetensors_count(file: ampx_safetensors, count: *mut usize) -> ampx_status;
    pub fn ampx_safetensors_entry_get(
        file: ampx_safetensors,
        index: usize,
        entry: *mut ampx_safetensors_entry,
    ) -> ampx_status;
    pub fn ampx_safetensors_find(
        file: ampx_safetensors,
        name: *const c_char,
        index: *mut usize,
    ) -> ampx_status;
    pub fn ampx_safetensors_metadata_count(file: ampx_safetensors, count: *mut usize) -> ampx_status;
    pub fn ampx_safetensors_metadata_get(
        file: ampx_safetensors,
        index: usize,
        key: *mut *const c_char,
        value: *mut *const c_char,
    ) -> ampx_status;
    pub fn ampx_safetensors_load_into(
        file: ampx_safetensors,
        names: *const *const c_char,
        tensors: *const ampx_tensor,
        count: usize,
        flags: u32,
    ) -> ampx_status;
    pub fn ampx_safetensors_load_tensor(
        file: ampx_safetensors,
        name: *const c_char,
        flags: u32,
        out: *mut ampx_tensor,
    ) -> ampx_status;

    // 17. Learning-rate schedules on the device
    pub fn ampx_lr_schedule_default() -> ampx_lr_schedule;
    pub fn ampx_optimizer_set_lr_schedule(
        optimizer: ampx_optimizer,
        group: i32,
        schedule: *const ampx_lr_schedule,
    ) -> ampx_status;
    pub fn ampx_optimizer_get_lr_schedule(
        optimizer: ampx_optimizer,
        group: i32,
        out: *mut ampx_lr_schedule,
    ) -> ampx_status;
    pub fn ampx_optimizer_step_count(optimizer: ampx_optimizer, steps: *mut i64) -> ampx_status;
    pub fn ampx_lr_schedule_value(
        schedule: *const ampx_lr_schedule,
        base_lr: c_double,
        step: i64,
        lr: *mut c_double,
    ) -> ampx_status;
}

/// Sizes, alignments and field offsets of the header's structs as a C
/// compiler sees them (filled in by `build.rs`; empty when no C compiler
/// ran). Used by this crate's `layout` test.
#[doc(hidden)]
pub mod c_layout {
    include!(concat!(env!("OUT_DIR"), "/c_layout.rs"));
}
