"""Loading libampx and declaring its C functions for ctypes.

This is the only module that names C types. Everything else in the package
calls the functions through :data:`lib`, whose status-returning functions
raise :class:`ampx.Error` on their own (see ``_declare``).

The library is found, in this order:

1. at the path in the environment variable ``AMPX_LIBRARY`` (an override:
   when it does not load, importing fails and nothing else is tried);
2. inside this package (``libampx.so.0``, else ``libampx.so``, next to this
   file), where ``pip install bindings/python`` puts the one it builds: when
   that file exists but does not load, importing fails too, rather than
   quietly picking up another libampx;
3. by ``ctypes.util.find_library("ampx")`` and under the usual file names
   (``libampx.so``, ``libampx.so.0``, ``libampx.dylib``, ``ampx.dll``) on the
   loader's search path (a package used from the source tree).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import os
from ctypes import (CFUNCTYPE, POINTER, Structure, c_char_p, c_double, c_int32, c_int64,
                    c_size_t, c_uint8, c_uint16, c_uint32, c_uint64, c_void_p)

from .errors import NotSupportedError, Status, error_for

#: The ABI major version this package is written for.
ABI_MAJOR = 0

# C enums are passed as int32 (every ampx enum has a 0x7fffffff member).
c_enum = c_int32
handle = c_void_p
handle_p = POINTER(c_void_p)
int64_p = POINTER(c_int64)
int32_p = POINTER(c_int32)


def _load() -> ctypes.CDLL:
    path = os.environ.get("AMPX_LIBRARY")
    if path:
        try:
            return ctypes.CDLL(path)
        except OSError as exc:
            raise ImportError(f"ampx: cannot load AMPX_LIBRARY={path!r}: {exc}") from exc
    here = os.path.dirname(os.path.abspath(__file__))
    for name in ("libampx.so.0", "libampx.so"):
        bundled = os.path.join(here, name)
        if os.path.exists(bundled):
            try:
                return ctypes.CDLL(bundled)
            except OSError as exc:
                raise ImportError(f"ampx: cannot load the package's own library {bundled!r}: "
                                  f"{exc} (reinstall the package, or set AMPX_LIBRARY to "
                                  f"another libampx.so)") from exc
    candidates = [ctypes.util.find_library("ampx"), "libampx.so", "libampx.so.0",
                  "libampx.dylib", "ampx.dll"]
    for name in candidates:
        if not name:
            continue
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    raise ImportError("ampx: libampx was not found; install the package with "
                      "`pip install bindings/python` (which builds it in), set AMPX_LIBRARY "
                      "to the full path of libampx.so, or put it on the loader's search path")


def keep_forever(callback):
    """Makes a ctypes callback immortal and returns it.

    C code may call it at any time, late in interpreter shutdown included
    (e.g. a DLPack consumer releasing a tensor), after module globals are
    gone: one deliberate reference that is never dropped.
    """
    ctypes.pythonapi.Py_IncRef(ctypes.py_object(callback))
    return callback


# ---- structs (field for field as in ampx.h) -----------------------------------------

ALLOC_FN = CFUNCTYPE(c_void_p, c_void_p, c_size_t, c_size_t)
FREE_FN = CFUNCTYPE(None, c_void_p, c_void_p, c_size_t)
DELETER_FN = CFUNCTYPE(None, c_void_p, c_void_p)
SEGMENT_FN = CFUNCTYPE(c_int32, c_void_p, handle_p, c_size_t, handle_p, c_size_t)
GRAD_READY_FN = CFUNCTYPE(c_int32, c_void_p, c_void_p)
RELEASE_FN = CFUNCTYPE(None, c_void_p)


class Allocator(Structure):
    _fields_ = [("struct_size", c_size_t), ("alloc", ALLOC_FN), ("free", FREE_FN),
                ("user_data", c_void_p)]


class Segment(Structure):
    _fields_ = [("struct_size", c_size_t), ("fn", SEGMENT_FN), ("user_data", c_void_p),
                ("release", RELEASE_FN)]


class ContextOptions(Structure):
    _fields_ = [("struct_size", c_size_t), ("device_type", c_enum), ("device_index", c_int32),
                ("num_threads", c_int32), ("seed", c_uint64), ("allocator", Allocator),
                ("cuda_stream", c_void_p)]


class MemoryStatsStruct(Structure):
    _fields_ = [("struct_size", c_size_t), ("current_bytes", c_uint64),
                ("peak_bytes", c_uint64), ("allocation_count", c_uint64),
                ("reserved_bytes", c_uint64)]


class SgdOptions(Structure):
    _fields_ = [("struct_size", c_size_t), ("lr", c_double), ("momentum", c_double),
                ("dampening", c_double), ("weight_decay", c_double), ("nesterov", c_int32),
                ("maximize", c_int32)]


class AdamOptions(Structure):
    _fields_ = [("struct_size", c_size_t), ("lr", c_double), ("beta1", c_double),
                ("beta2", c_double), ("eps", c_double), ("weight_decay", c_double),
                ("amsgrad", c_int32), ("maximize", c_int32),
                ("decoupled_weight_decay", c_int32)]


class LrScheduleStruct(Structure):
    _fields_ = [("struct_size", c_size_t), ("warmup_steps", c_int64),
                ("warmup_start_factor", c_double), ("decay", c_enum), ("total_steps", c_int64),
                ("end_factor", c_double), ("min_lr", c_double), ("step_size", c_int64),
                ("gamma", c_double)]


class AttentionOptions(Structure):
    _fields_ = [("struct_size", c_size_t), ("causal", c_int32), ("scale", c_double),
                ("dropout_p", c_double)]


class CrossEntropyOptions(Structure):
    _fields_ = [("struct_size", c_size_t), ("reduction", c_enum), ("ignore_index", c_int64),
                ("label_smoothing", c_double)]


class Conv2dOptions(Structure):
    _fields_ = [("struct_size", c_size_t), ("stride", c_int64 * 2), ("padding", c_int64 * 2),
                ("dilation", c_int64 * 2), ("groups", c_int64)]


class Pool2dOptions(Structure):
    _fields_ = [("struct_size", c_size_t), ("stride", c_int64 * 2), ("padding", c_int64 * 2),
                ("dilation", c_int64 * 2), ("ceil_mode", c_int32),
                ("count_include_pad", c_int32), ("divisor_override", c_int64)]


class ScalerOptions(Structure):
    _fields_ = [("struct_size", c_size_t), ("init_scale", c_double),
                ("growth_factor", c_double), ("backoff_factor", c_double),
                ("growth_interval", c_int32), ("enabled", c_int32), ("hysteresis", c_int32),
                ("min_scale", c_double), ("max_scale", c_double),
                ("consecutive_hysteresis", c_int32), ("clamp_to_max_scale", c_int32)]


class ScalerCountersStruct(Structure):
    _fields_ = [("struct_size", c_size_t), ("updates", c_int64), ("skipped", c_int64),
                ("backoffs", c_int64), ("growths", c_int64)]


class ScalerStateStruct(Structure):
    _fields_ = [("struct_size", c_size_t), ("scale", c_double), ("growth_factor", c_double),
                ("backoff_factor", c_double), ("growth_interval", c_int32),
                ("growth_tracker", c_int32), ("hysteresis", c_int32),
                ("hysteresis_left", c_int32), ("min_scale", c_double),
                ("max_scale", c_double), ("counters", ScalerCountersStruct),
                ("consecutive_hysteresis", c_int32), ("clamp_to_max_scale", c_int32)]


class NonfiniteGradStruct(Structure):
    _fields_ = [("param", handle), ("name", c_char_p), ("nan_count", c_int64),
                ("inf_count", c_int64)]


class AutocastOptions(Structure):
    _fields_ = [("struct_size", c_size_t), ("dtype", c_enum), ("enabled", c_int32),
                ("cache", c_int32)]


class DLDevice(Structure):
    _fields_ = [("device_type", c_int32), ("device_id", c_int32)]


class DLDataType(Structure):
    _fields_ = [("code", c_uint8), ("bits", c_uint8), ("lanes", c_uint16)]


class DLTensor(Structure):
    _fields_ = [("data", c_void_p), ("device", DLDevice), ("ndim", c_int32),
                ("dtype", DLDataType), ("shape", int64_p), ("strides", int64_p),
                ("byte_offset", c_uint64)]


class DLManagedTensor(Structure):
    pass


DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", c_void_p),
                            ("deleter", CFUNCTYPE(None, POINTER(DLManagedTensor)))]


NCCL_UNIQUE_ID_BYTES = 128


class DataParallelOptions(Structure):
    _fields_ = [("struct_size", c_size_t), ("bucket_bytes", c_size_t),
                ("first_bucket_bytes", c_size_t), ("average", c_int32),
                ("reduce_in_fp32", c_int32), ("overlap", c_int32), ("zero_stage", c_int32)]


class DataParallelStatsStruct(Structure):
    _fields_ = [("struct_size", c_size_t), ("rank", c_int32), ("world_size", c_int32),
                ("bucket_count", c_int32), ("bucket_bytes", c_uint64),
                ("buckets_launched", c_int32), ("last_launched_early", c_int32),
                ("reductions", c_int64), ("optimizer_state_bytes", c_uint64),
                ("shard_elements", c_int64)]


DOCTOR_BINS = 84  # AMPX_DOCTOR_BINS


class DoctorOptions(Structure):
    _fields_ = [("struct_size", c_size_t), ("interval", c_int32), ("history", c_int32)]


class DoctorOverviewStruct(Structure):
    _fields_ = [("struct_size", c_size_t), ("steps", c_int64), ("sample_step", c_int64),
                ("sample_scale", c_double), ("param_count", c_int32),
                ("history_count", c_int32), ("finding_count", c_int32),
                ("missed_steps", c_int64)]


class DoctorParamStatsStruct(Structure):
    _fields_ = [("struct_size", c_size_t), ("index", c_int32), ("name", c_char_p),
                ("param_dtype", c_enum), ("grad_dtype", c_enum), ("elements", c_int64),
                ("histogram", c_int64 * DOCTOR_BINS), ("amax", c_double),
                ("amax_scaled", c_double), ("grad_norm", c_double),
                ("fp16_zero_unscaled", c_double), ("fp16_subnormal_unscaled", c_double),
                ("fp16_zero_scaled", c_double), ("fp16_subnormal_scaled", c_double),
                ("fp16_overflow_scaled", c_double), ("headroom", c_int32),
                ("headroom_unbounded", c_int32), ("lost_update_fraction", c_double),
                ("lost_without_master_fraction", c_double)]


class DoctorSampleStruct(Structure):
    # No struct_size: an array element of ampx_doctor_get_history (56 bytes).
    _fields_ = [("step", c_int64), ("scale", c_double), ("found_inf", c_int32),
                ("sampled", c_int32), ("grad_norm", c_double),
                ("first_overflow_param", c_int32), ("overflow_params", c_int32),
                ("fp16_lost_scaled", c_double), ("fp16_lost_unscaled", c_double)]


class DoctorFindingStruct(Structure):
    _fields_ = [("struct_size", c_size_t), ("code", c_int32), ("cause", c_int32),
                ("param", c_int32), ("param_name", c_char_p), ("first_step", c_int64),
                ("last_step", c_int64), ("message", c_char_p)]


class SafetensorsEntryStruct(Structure):
    _fields_ = [("struct_size", c_size_t), ("name", c_char_p), ("dtype", c_enum),
                ("dtype_name", c_char_p), ("ndim", c_int32), ("shape", c_int64 * 8),
                ("offset", c_uint64), ("nbytes", c_uint64)]


# ---- functions ------------------------------------------------------------------------

def _check_status(result, func, args):
    """ctypes errcheck of every ampx_status function: raises on non-OK."""
    if result != Status.OK:
        raise error_for(result, lib.ampx_last_error().decode("utf-8", "replace"))
    return result


def _missing(name: str):
    def call(*_args):
        raise NotSupportedError(f"{name}: the loaded libampx does not export this function "
                                f"(it is older than this binding)")
    return call


# name: (restype, argtypes). restype None below means "returns ampx_status".
_STATUS = object()
_PROTOTYPES = {
    # 1-2. versions and errors
    "ampx_version": (c_uint32, []),
    "ampx_version_string": (c_char_p, []),
    "ampx_has_cuda": (ctypes.c_int, []),
    "ampx_status_string": (c_char_p, [c_enum]),
    "ampx_last_error": (c_char_p, []),
    "ampx_last_status": (c_enum, []),
    # 3. dtypes and devices
    "ampx_dtype_size": (c_size_t, [c_enum]),
    "ampx_dtype_name": (c_char_p, [c_enum]),
    "ampx_cuda_device_count": (c_int32, []),
    # 4. contexts
    "ampx_context_options_default": (ContextOptions, []),
    "ampx_context_create": (_STATUS, [POINTER(ContextOptions), handle_p]),
    "ampx_context_release": (None, [handle]),
    "ampx_context_device": (_STATUS, [handle, int32_p, int32_p]),
    "ampx_context_synchronize": (_STATUS, [handle]),
    "ampx_memory_stats_get": (_STATUS, [handle, POINTER(MemoryStatsStruct)]),
    "ampx_memory_reset_peak": (_STATUS, [handle]),
    "ampx_context_set_tf32": (_STATUS, [handle, c_int32, int32_p]),
    # 5. tensors
    "ampx_tensor_empty": (_STATUS, [handle, c_enum, c_int32, int64_p, handle_p]),
    "ampx_tensor_zeros": (_STATUS, [handle, c_enum, c_int32, int64_p, handle_p]),
    "ampx_tensor_from_host": (_STATUS, [handle, c_enum, c_int32, int64_p, c_void_p, c_size_t,
                                        handle_p]),
    "ampx_tensor_wrap": (_STATUS, [handle, c_enum, c_int32, int64_p, c_void_p, c_size_t,
                                   DELETER_FN, c_void_p, handle_p]),
    "ampx_tensor_retain": (_STATUS, [handle]),
    "ampx_tensor_release": (None, [handle]),
    "ampx_tensor_to_host": (_STATUS, [handle, c_void_p, c_size_t]),
    "ampx_tensor_copy_from_host": (_STATUS, [handle, c_void_p, c_size_t]),
    "ampx_tensor_copy": (_STATUS, [handle, handle]),
    "ampx_tensor_cast": (_STATUS, [handle, c_enum, handle_p]),
    "ampx_tensor_fill": (_STATUS, [handle, c_double]),
    "ampx_tensor_set_name": (_STATUS, [handle, c_char_p]),
    "ampx_tensor_name": (_STATUS, [handle, POINTER(c_char_p)]),
    "ampx_tensor_dtype": (_STATUS, [handle, POINTER(c_enum)]),
    "ampx_tensor_ndim": (_STATUS, [handle, int32_p]),
    "ampx_tensor_shape": (_STATUS, [handle, int64_p, c_int32]),
    "ampx_tensor_numel": (_STATUS, [handle, int64_p]),
    "ampx_tensor_nbytes": (_STATUS, [handle, POINTER(c_size_t)]),
    "ampx_tensor_data": (_STATUS, [handle, POINTER(c_void_p)]),
    "ampx_tensor_set_grad": (_STATUS, [handle, handle]),
    "ampx_tensor_grad": (_STATUS, [handle, handle_p]),
    "ampx_tensor_to_dlpack": (_STATUS, [handle, POINTER(c_void_p)]),
    "ampx_tensor_from_dlpack": (_STATUS, [handle, c_void_p, handle_p]),
    # 6. optimizers
    "ampx_sgd_options_default": (SgdOptions, []),
    "ampx_adam_options_default": (AdamOptions, []),
    "ampx_adamw_options_default": (AdamOptions, []),
    "ampx_optimizer_create_sgd": (_STATUS, [handle, handle_p, c_size_t, POINTER(SgdOptions),
                                            handle_p]),
    "ampx_optimizer_create_adam": (_STATUS, [handle, handle_p, c_size_t, POINTER(AdamOptions),
                                             handle_p]),
    "ampx_optimizer_release": (None, [handle]),
    "ampx_optimizer_add_group": (_STATUS, [handle, handle_p, c_size_t, c_double, c_double,
                                           int32_p]),
    "ampx_optimizer_group_count": (_STATUS, [handle, int32_p]),
    "ampx_optimizer_set_lr": (_STATUS, [handle, c_int32, c_double]),
    "ampx_optimizer_get_lr": (_STATUS, [handle, c_int32, POINTER(c_double)]),
    "ampx_optimizer_step": (_STATUS, [handle]),
    "ampx_optimizer_zero_grad": (_STATUS, [handle]),
    "ampx_optimizer_state_tensor": (_STATUS, [handle, handle, c_enum, handle_p]),
    "ampx_optimizer_param_steps": (_STATUS, [handle, handle, int64_p]),
    "ampx_optimizer_state_size": (_STATUS, [handle, POINTER(c_size_t)]),
    "ampx_optimizer_save_state": (_STATUS, [handle, c_void_p, c_size_t]),
    "ampx_optimizer_load_state": (_STATUS, [handle, c_void_p, c_size_t]),
    "ampx_optimizer_last_step_taken": (_STATUS, [handle, int32_p]),
    # 17. learning-rate schedules
    "ampx_lr_schedule_default": (LrScheduleStruct, []),
    "ampx_optimizer_set_lr_schedule": (_STATUS, [handle, c_int32, POINTER(LrScheduleStruct)]),
    "ampx_optimizer_get_lr_schedule": (_STATUS, [handle, c_int32, POINTER(LrScheduleStruct)]),
    "ampx_optimizer_step_count": (_STATUS, [handle, int64_p]),
    "ampx_lr_schedule_value": (_STATUS, [POINTER(LrScheduleStruct), c_double, c_int64,
                                         POINTER(c_double)]),
    # 7. loss scaling
    "ampx_scaler_options_default": (ScalerOptions, []),
    "ampx_scaler_create": (_STATUS, [handle, POINTER(ScalerOptions), handle_p]),
    "ampx_scaler_release": (None, [handle]),
    "ampx_scaler_attach": (_STATUS, [handle, handle]),
    "ampx_scaler_scale_loss": (_STATUS, [handle, handle, handle_p]),
    "ampx_scaler_scale_tensor": (_STATUS, [handle, handle_p]),
    "ampx_scaler_get_scale": (_STATUS, [handle, POINTER(c_double)]),
    "ampx_scaler_unscale": (_STATUS, [handle, handle]),
    "ampx_scaler_step": (_STATUS, [handle, handle]),
    "ampx_scaler_update": (_STATUS, [handle]),
    "ampx_scaler_update_to": (_STATUS, [handle, c_double]),
    "ampx_scaler_found_inf": (_STATUS, [handle, handle, int32_p]),
    "ampx_scaler_get_counters": (_STATUS, [handle, POINTER(ScalerCountersStruct)]),
    "ampx_scaler_get_state": (_STATUS, [handle, POINTER(ScalerStateStruct)]),
    "ampx_scaler_set_state": (_STATUS, [handle, POINTER(ScalerStateStruct)]),
    # 8. clipping and diagnostics
    "ampx_clip_grad_norm": (_STATUS, [handle, c_double, c_double, c_int32, handle_p]),
    "ampx_clip_grad_value": (_STATUS, [handle, c_double]),
    "ampx_find_nonfinite_grads": (_STATUS, [handle, POINTER(NonfiniteGradStruct), c_size_t,
                                            POINTER(c_size_t)]),
    # 9. autograd
    "ampx_tensor_set_requires_grad": (_STATUS, [handle, c_int32]),
    "ampx_tensor_requires_grad": (_STATUS, [handle, int32_p]),
    "ampx_set_grad_enabled": (_STATUS, [handle, c_int32, int32_p]),
    "ampx_backward": (_STATUS, [handle, handle]),
    "ampx_scope_push": (_STATUS, [handle]),
    "ampx_scope_pop": (_STATUS, [handle]),
    "ampx_checkpoint_segment": (_STATUS, [handle, POINTER(Segment), handle_p, c_size_t, handle_p,
                                          c_size_t]),
    # 10. autocast
    "ampx_autocast_options_default": (AutocastOptions, []),
    "ampx_autocast_create": (_STATUS, [handle, POINTER(AutocastOptions), handle_p]),
    "ampx_autocast_release": (None, [handle]),
    "ampx_autocast_set_op_class": (_STATUS, [handle, c_char_p, c_enum]),
    "ampx_autocast_op_class": (_STATUS, [handle, c_char_p, POINTER(c_enum)]),
    "ampx_autocast_enter": (_STATUS, [handle]),
    "ampx_autocast_exit": (_STATUS, [handle]),
    "ampx_autocast_cache_stats": (_STATUS, [handle, int64_p, int64_p]),
    # 11. ops
    "ampx_add": (_STATUS, [handle, handle, handle_p]),
    "ampx_sub": (_STATUS, [handle, handle, handle_p]),
    "ampx_mul": (_STATUS, [handle, handle, handle_p]),
    "ampx_div": (_STATUS, [handle, handle, handle_p]),
    "ampx_affine": (_STATUS, [handle, c_double, c_double, handle_p]),
    "ampx_relu": (_STATUS, [handle, handle_p]),
    "ampx_gelu": (_STATUS, [handle, handle_p]),
    "ampx_gelu_tanh": (_STATUS, [handle, handle_p]),
    "ampx_silu": (_STATUS, [handle, handle_p]),
    "ampx_sigmoid": (_STATUS, [handle, handle_p]),
    "ampx_tanh": (_STATUS, [handle, handle_p]),
    "ampx_exp": (_STATUS, [handle, handle_p]),
    "ampx_log": (_STATUS, [handle, handle_p]),
    "ampx_sqrt": (_STATUS, [handle, handle_p]),
    "ampx_rsqrt": (_STATUS, [handle, handle_p]),
    "ampx_sum": (_STATUS, [handle, handle_p]),
    "ampx_mean": (_STATUS, [handle, handle_p]),
    "ampx_softmax": (_STATUS, [handle, handle_p]),
    "ampx_log_softmax": (_STATUS, [handle, handle_p]),
    "ampx_cross_entropy": (_STATUS, [handle, handle, c_enum, c_int64, handle_p]),
    "ampx_mse_loss": (_STATUS, [handle, handle, c_enum, handle_p]),
    "ampx_matmul": (_STATUS, [handle, handle, handle_p]),
    "ampx_linear": (_STATUS, [handle, handle, handle, c_enum, handle_p]),
    "ampx_layer_norm": (_STATUS, [handle, handle, handle, c_double, handle_p]),
    "ampx_batch_norm": (_STATUS, [handle, handle, handle, handle, handle, c_int32, c_double,
                                  c_double, handle_p]),
    "ampx_dropout": (_STATUS, [handle, c_double, c_int32, handle_p]),
    "ampx_embedding": (_STATUS, [handle, handle, handle_p]),
    "ampx_reshape": (_STATUS, [handle, c_int32, int64_p, handle_p]),
    "ampx_transpose": (_STATUS, [handle, c_int32, c_int32, handle_p]),
    "ampx_concat": (_STATUS, [handle_p, c_size_t, c_int32, handle_p]),
    "ampx_bce_with_logits": (_STATUS, [handle, handle, c_enum, handle_p]),
    "ampx_rms_norm": (_STATUS, [handle, handle, c_double, handle_p]),
    "ampx_cross_entropy_options_default": (CrossEntropyOptions, []),
    "ampx_cross_entropy_ex": (_STATUS, [handle, handle, handle, POINTER(CrossEntropyOptions),
                                        handle_p]),
    "ampx_masked_fill": (_STATUS, [handle, handle, c_double, handle_p]),
    "ampx_pow": (_STATUS, [handle, c_double, handle_p]),
    "ampx_rotary_embedding": (_STATUS, [handle, handle, handle, c_int32, handle_p]),
    "ampx_split": (_STATUS, [handle, int64_p, c_size_t, c_int32, handle_p]),
    "ampx_chunk": (_STATUS, [handle, c_int32, c_int32, handle_p, int32_p]),
    "ampx_permute": (_STATUS, [handle, c_int32, int32_p, handle_p]),
    "ampx_sum_dims": (_STATUS, [handle, int32_p, c_int32, c_int32, handle_p]),
    "ampx_mean_dims": (_STATUS, [handle, int32_p, c_int32, c_int32, handle_p]),
    "ampx_amax": (_STATUS, [handle, int32_p, c_int32, c_int32, handle_p]),
    "ampx_softmax_dim": (_STATUS, [handle, c_int32, handle_p]),
    "ampx_log_softmax_dim": (_STATUS, [handle, c_int32, handle_p]),
    "ampx_attention_options_default": (AttentionOptions, []),
    "ampx_scaled_dot_product_attention": (_STATUS, [handle, handle, handle, handle,
                                                    POINTER(AttentionOptions), handle_p]),
    "ampx_conv2d_options_default": (Conv2dOptions, []),
    "ampx_conv2d": (_STATUS, [handle, handle, handle, POINTER(Conv2dOptions), handle_p]),
    "ampx_pool2d_options_default": (Pool2dOptions, []),
    "ampx_max_pool2d": (_STATUS, [handle, c_int64, c_int64, POINTER(Pool2dOptions), handle_p]),
    "ampx_avg_pool2d": (_STATUS, [handle, c_int64, c_int64, POINTER(Pool2dOptions), handle_p]),
    "ampx_global_avg_pool2d": (_STATUS, [handle, handle_p]),
    # 12. training checkpoint files
    "ampx_checkpoint_file_save": (_STATUS, [c_char_p, handle_p, c_size_t, handle, handle]),
    "ampx_checkpoint_file_load": (_STATUS, [c_char_p, handle_p, c_size_t, handle, handle]),
    # 13. tensor views and gradient hooks
    "ampx_tensor_view": (_STATUS, [handle, c_size_t, c_enum, c_int32, int64_p, handle_p]),
    "ampx_set_grad_ready_hook": (_STATUS, [handle, GRAD_READY_FN, c_void_p, RELEASE_FN]),
    "ampx_grad_ready": (_STATUS, [handle]),
    # 14. data-parallel training
    "ampx_comm_from_mpi": (_STATUS, [handle, c_void_p, handle_p]),
    "ampx_comm_from_nccl": (_STATUS, [handle, c_void_p, handle_p]),
    "ampx_nccl_unique_id": (_STATUS, [c_void_p, c_size_t]),
    "ampx_comm_init_nccl": (_STATUS, [handle, c_void_p, c_size_t, c_int32, c_int32, handle_p]),
    "ampx_comm_rank": (_STATUS, [handle, int32_p, int32_p]),
    "ampx_comm_set_timeout": (_STATUS, [handle, c_double]),
    "ampx_comm_release": (None, [handle]),
    "ampx_data_parallel_options_default": (DataParallelOptions, []),
    "ampx_data_parallel_create": (_STATUS, [handle, handle, POINTER(DataParallelOptions),
                                            handle_p]),
    "ampx_data_parallel_set_sync": (_STATUS, [handle, c_int32]),
    "ampx_data_parallel_reduce": (_STATUS, [handle]),
    "ampx_data_parallel_get_stats": (_STATUS, [handle, POINTER(DataParallelStatsStruct)]),
    "ampx_data_parallel_release": (None, [handle]),
    # 15. the precision doctor (EXPERIMENTAL)
    "ampx_doctor_options_default": (DoctorOptions, []),
    "ampx_doctor_create": (_STATUS, [handle, handle, POINTER(DoctorOptions), handle_p]),
    "ampx_doctor_set_interval": (_STATUS, [handle, c_int32]),
    "ampx_doctor_examine": (_STATUS, [handle, POINTER(DoctorOverviewStruct)]),
    "ampx_doctor_get_param_stats": (_STATUS, [handle, c_int32,
                                              POINTER(DoctorParamStatsStruct)]),
    "ampx_doctor_get_history": (_STATUS, [handle, POINTER(DoctorSampleStruct), c_int32,
                                          int32_p]),
    "ampx_doctor_get_finding": (_STATUS, [handle, c_int32, POINTER(DoctorFindingStruct)]),
    "ampx_doctor_finding_code_name": (c_char_p, [c_int32]),
    "ampx_doctor_cause_name": (c_char_p, [c_int32]),
    "ampx_doctor_summary": (_STATUS, [handle, POINTER(c_char_p)]),
    "ampx_doctor_write_report": (_STATUS, [handle, c_char_p]),
    "ampx_doctor_release": (None, [handle]),
    # 16. safetensors files (EXPERIMENTAL)
    "ampx_safetensors_save": (_STATUS, [c_char_p, handle_p, POINTER(c_char_p), c_size_t,
                                        POINTER(c_char_p), POINTER(c_char_p), c_size_t]),
    "ampx_safetensors_open": (_STATUS, [handle, c_char_p, handle_p]),
    "ampx_safetensors_release": (None, [handle]),
    "ampx_safetensors_count": (_STATUS, [handle, POINTER(c_size_t)]),
    "ampx_safetensors_entry_get": (_STATUS, [handle, c_size_t,
                                             POINTER(SafetensorsEntryStruct)]),
    "ampx_safetensors_find": (_STATUS, [handle, c_char_p, POINTER(c_size_t)]),
    "ampx_safetensors_metadata_count": (_STATUS, [handle, POINTER(c_size_t)]),
    "ampx_safetensors_metadata_get": (_STATUS, [handle, c_size_t, POINTER(c_char_p),
                                                POINTER(c_char_p)]),
    "ampx_safetensors_load_into": (_STATUS, [handle, POINTER(c_char_p), handle_p, c_size_t,
                                             c_uint32]),
    "ampx_safetensors_load_tensor": (_STATUS, [handle, c_char_p, c_uint32, handle_p]),
}


class _Functions:
    """The C functions, as attributes named like in ampx.h."""


def _declare(cdll: ctypes.CDLL) -> _Functions:
    functions = _Functions()
    for name, (restype, argtypes) in _PROTOTYPES.items():
        try:
            fn = getattr(cdll, name)
        except AttributeError:
            setattr(functions, name, _missing(name))
            continue
        fn.argtypes = argtypes
        if restype is _STATUS:
            fn.restype = c_enum
            fn.errcheck = _check_status
        else:
            fn.restype = restype
        setattr(functions, name, fn)
    return functions


cdll = _load()
lib = _declare(cdll)

if lib.ampx_version() // 10000 != ABI_MAJOR:
    raise ImportError(f"ampx: the loaded libampx is version "
                      f"{lib.ampx_version_string().decode()}, but this binding needs ABI "
                      f"{ABI_MAJOR}.x")
