"""
    Ampx

Julia binding of ampx, an embeddable mixed-precision training library
(autocast, dynamic loss scaling after torch.amp's GradScaler, SGD/Adam/AdamW
with fp32 master weights), over the C API of `include/ampx/ampx.h`, which is
the reference documentation. This module states only what differs in Julia.

The C functions, structs and constants are declared in the submodule
`LibAmpx` (src/LibAmpx.jl), generated from the header by
tools/gen_bindings.py; this module is written by hand over it and writes no
`ccall` itself. The library is `libampx` on the loader's path, or the file
named by the environment variable `AMPX_LIB` when the module is loaded.

Objects (`Context`, `Tensor`, `Optimizer`, `Scaler`, `Autocast`, `Comm`,
`DataParallel`, `Doctor`, `SafetensorsFile`) own one reference to a C
object. `close(x)` releases it at once; closing twice does nothing. A
finalizer releases what a program forgets to close (a safety net: the C
library allows release from any thread, in any order). A closed object
passed to a function throws `AmpxError` with `ERR_STALE_HANDLE`.

Tensors made by ops while a scope is open (`push_scope!`) are borrowed from
it, as in C: `pop_scope!` releases them and marks them closed. `retain` one
to keep it.

Data crosses as flat vectors in row-major order with an explicit shape
(ampx's layout), not as column-major Julia arrays. Dimensions, parameter
groups and parameter indices are 0-based, as in C (negative dimensions
count from the end).

A failed call throws `AmpxError` with the status and the message of
`ampx_last_error()`, read right after the call on the same thread: no task
switch can happen between the two calls. An exception thrown by a Julia
callback (a checkpointed segment, a grad-ready hook) is kept and rethrown
when the C call that ran it returns.
"""
module Ampx

export Context, Tensor, Optimizer, Scaler, Autocast, AmpxError, Status, DType, DeviceType,
       OpClass, Reduction, Activation, OptimizerState, LRDecay, Comm, DataParallel, Doctor,
       SafetensorsFile, export_onnx, Fp8Recipe, Fp8Overflow, Fp8Scaling, Fp8Format, AmaxAlgo, Fp8Role

include("LibAmpx.jl")

"Path or name of the shared library (`LibAmpx.libampx`)."
const libampx = LibAmpx.libampx

# ---------------------------------------------------------------------------
# Enums (the numbers are LibAmpx's constants, generated from the header)
# ---------------------------------------------------------------------------

"Status codes (`ampx_status`)."
@enum Status::Int32 begin
    OK = LibAmpx.AMPX_OK
    ERR_INVALID_ARGUMENT = LibAmpx.AMPX_ERR_INVALID_ARGUMENT
    ERR_SHAPE = LibAmpx.AMPX_ERR_SHAPE
    ERR_DTYPE = LibAmpx.AMPX_ERR_DTYPE
    ERR_DEVICE = LibAmpx.AMPX_ERR_DEVICE
    ERR_OUT_OF_MEMORY = LibAmpx.AMPX_ERR_OUT_OF_MEMORY
    ERR_NO_DEVICE = LibAmpx.AMPX_ERR_NO_DEVICE
    ERR_NOT_SUPPORTED = LibAmpx.AMPX_ERR_NOT_SUPPORTED
    ERR_ORDER = LibAmpx.AMPX_ERR_ORDER
    ERR_STALE_HANDLE = LibAmpx.AMPX_ERR_STALE_HANDLE
    ERR_IO = LibAmpx.AMPX_ERR_IO
    ERR_CORRUPT = LibAmpx.AMPX_ERR_CORRUPT
    ERR_INTERNAL = LibAmpx.AMPX_ERR_INTERNAL
end

"Element types (`ampx_dtype`)."
@enum DType::Int32 begin
    F32 = LibAmpx.AMPX_F32
    F16 = LibAmpx.AMPX_F16
    BF16 = LibAmpx.AMPX_BF16
    I32 = LibAmpx.AMPX_I32
    I64 = LibAmpx.AMPX_I64
    F8E4M3 = LibAmpx.AMPX_F8E4M3  # OCP FP8 E4M3 (E4M3FN): max 448, no infinities
    F8E5M2 = LibAmpx.AMPX_F8E5M2  # OCP FP8 E5M2: max 57344, IEEE inf and NaN
end

"Device kinds (`ampx_device_type`)."
@enum DeviceType::Int32 begin
    DEVICE_CPU = LibAmpx.AMPX_DEVICE_CPU
    DEVICE_CUDA = LibAmpx.AMPX_DEVICE_CUDA
end

"Precision classes of ops under autocast (`ampx_op_class`)."
@enum OpClass::Int32 begin
    OP_LOWER_PRECISION = LibAmpx.AMPX_OP_LOWER_PRECISION
    OP_FP32 = LibAmpx.AMPX_OP_FP32
    OP_PROMOTE = LibAmpx.AMPX_OP_PROMOTE
    OP_KEEP = LibAmpx.AMPX_OP_KEEP
end

"Loss reductions (`ampx_reduction`)."
@enum Reduction::Int32 begin
    REDUCTION_MEAN = LibAmpx.AMPX_REDUCTION_MEAN
    REDUCTION_SUM = LibAmpx.AMPX_REDUCTION_SUM
    REDUCTION_NONE = LibAmpx.AMPX_REDUCTION_NONE
end

"Activations fused into `linear` (`ampx_activation`)."
@enum Activation::Int32 begin
    ACTIVATION_NONE = LibAmpx.AMPX_ACTIVATION_NONE
    ACTIVATION_RELU = LibAmpx.AMPX_ACTIVATION_RELU
    ACTIVATION_GELU = LibAmpx.AMPX_ACTIVATION_GELU
end

"Kinds of per-parameter optimizer state (`ampx_optimizer_state`)."
@enum OptimizerState::Int32 begin
    STATE_MASTER = LibAmpx.AMPX_STATE_MASTER
    STATE_MOMENTUM = LibAmpx.AMPX_STATE_MOMENTUM
    STATE_EXP_AVG_SQ = LibAmpx.AMPX_STATE_EXP_AVG_SQ
    STATE_MAX_EXP_AVG_SQ = LibAmpx.AMPX_STATE_MAX_EXP_AVG_SQ
end

"What follows a learning-rate schedule's warm-up (`ampx_lr_decay`)."
@enum LRDecay::Int32 begin
    LR_CONSTANT = LibAmpx.AMPX_LR_CONSTANT
    LR_LINEAR = LibAmpx.AMPX_LR_LINEAR
    LR_COSINE = LibAmpx.AMPX_LR_COSINE
    LR_STEP = LibAmpx.AMPX_LR_STEP
end

"What a conversion into FP8 does beyond the format's max (`ampx_fp8_overflow`)."
@enum Fp8Overflow::Int32 begin
    FP8_SATURATE = LibAmpx.AMPX_FP8_SATURATE        # +-max (TE's casts, torch's float8_e4m3fn)
    FP8_NO_SATURATE = LibAmpx.AMPX_FP8_NO_SATURATE  # NaN in E4M3, +-inf in E5M2
end

"How an FP8 recipe scales (`ampx_fp8_scaling`)."
@enum Fp8Scaling::Int32 begin
    FP8_DELAYED = LibAmpx.AMPX_FP8_DELAYED  # from the amax history (TE's DelayedScaling)
    FP8_CURRENT = LibAmpx.AMPX_FP8_CURRENT  # from the tensor's own amax
end

"Which FP8 type each role gets (`ampx_fp8_format`)."
@enum Fp8Format::Int32 begin
    FP8_HYBRID = LibAmpx.AMPX_FP8_HYBRID  # E4M3 forward, E5M2 for gradients
    FP8_E4M3 = LibAmpx.AMPX_FP8_E4M3      # E4M3 everywhere
end

"Which amax a delayed update scales by (`ampx_fp8_amax_algo`)."
@enum AmaxAlgo::Int32 begin
    AMAX_MAX = LibAmpx.AMPX_FP8_AMAX_MAX
    AMAX_MOST_RECENT = LibAmpx.AMPX_FP8_AMAX_MOST_RECENT
end

"What a recipe slot holds, which decides its format (`ampx_fp8_role`)."
@enum Fp8Role::Int32 begin
    FP8_FORWARD = LibAmpx.AMPX_FP8_FORWARD    # an activation or a weight
    FP8_BACKWARD = LibAmpx.AMPX_FP8_BACKWARD  # a gradient
end

# ---------------------------------------------------------------------------
# Errors and versions
# ---------------------------------------------------------------------------

"A failed ampx call: its status and the library's message."
struct AmpxError <: Exception
    status::Status
    message::String
end

Base.showerror(io::IO, e::AmpxError) = print(io, status_string(e.status), ": ", e.message)

"C name of a status, e.g. `\"AMPX_ERR_SHAPE\"`."
status_string(s::Status) = unsafe_string(LibAmpx.ampx_status_string(s))

# Throws the AmpxError of a failed call. Nothing that can switch tasks runs
# between the C call and this read of the thread-local message.
@inline function check(status::Integer)
    status == 0 && return nothing
    message = LibAmpx.ampx_last_error()
    throw(AmpxError(Status(status), unsafe_string(message)))
end

"Status of the most recent failed call on the calling OS thread (`OK` if none)."
last_status() = Status(LibAmpx.ampx_last_status())

"Version of the loaded library (major * 10000 + minor * 100 + patch)."
version() = LibAmpx.ampx_version()

"Version of the loaded library as text, e.g. `\"0.1.0\"`."
version_string() = unsafe_string(LibAmpx.ampx_version_string())

"Whether the library was built with its CUDA backend."
has_cuda() = LibAmpx.ampx_has_cuda() != 0

"Number of CUDA devices ampx can use."
cuda_device_count() = Int(LibAmpx.ampx_cuda_device_count())

"Size of one element of `dtype` in bytes."
dtype_size(dtype::DType) = Int(LibAmpx.ampx_dtype_size(dtype))

"Name of a dtype: \"f32\", \"f16\", \"bf16\", \"i32\", \"i64\", ..."
dtype_name(dtype::DType) = unsafe_string(LibAmpx.ampx_dtype_name(dtype))

# ---------------------------------------------------------------------------
# Option and result structs: LibAmpx's (C layout), under Julia names; build
# them with the keyword functions below, which start from the library's
# defaults. Enum fields hold the C integer (`DType(opts.dtype)` reads one).
# ---------------------------------------------------------------------------

"Allocator hooks (`ampx_allocator`): C function pointers, e.g. from `@cfunction`."
const Allocator = LibAmpx.ampx_allocator
"`ampx_context_options`; see `context_options`."
const ContextOptions = LibAmpx.ampx_context_options
"`ampx_memory_stats`."
const MemoryStats = LibAmpx.ampx_memory_stats
"`ampx_sgd_options`; see `sgd_options`."
const SGDOptions = LibAmpx.ampx_sgd_options
"`ampx_adam_options`; see `adam_options` and `adamw_options`."
const AdamOptions = LibAmpx.ampx_adam_options
"`ampx_scaler_options`; see `scaler_options`."
const ScalerOptions = LibAmpx.ampx_scaler_options
"`ampx_scaler_counters`."
const ScalerCounters = LibAmpx.ampx_scaler_counters
"`ampx_scaler_state`: the scaler's persistent state."
const ScalerState = LibAmpx.ampx_scaler_state
"`ampx_autocast_options`; see `autocast_options`."
const AutocastOptions = LibAmpx.ampx_autocast_options
"`ampx_lr_schedule`: a param group's learning-rate schedule; see `lr_schedule`."
const LRSchedule = LibAmpx.ampx_lr_schedule
"`ampx_attention_options`; see `attention_options`."
const AttentionOptions = LibAmpx.ampx_attention_options
"`ampx_cross_entropy_options`; see `cross_entropy_options`."
const CrossEntropyOptions = LibAmpx.ampx_cross_entropy_options
"`ampx_conv2d_options`; see `conv2d_options`."
const Conv2dOptions = LibAmpx.ampx_conv2d_options
"`ampx_pool2d_options`; see `pool2d_options`."
const Pool2dOptions = LibAmpx.ampx_pool2d_options
"`ampx_data_parallel_options`; see `data_parallel_options`."
const DataParallelOptions = LibAmpx.ampx_data_parallel_options
"`ampx_data_parallel_stats` (`stats(dp)`)."
const DataParallelStats = LibAmpx.ampx_data_parallel_stats
"`ampx_doctor_options`; see `doctor_options`."
const DoctorOptions = LibAmpx.ampx_doctor_options
"`ampx_doctor_overview` (`examine(doctor)`)."
const DoctorOverview = LibAmpx.ampx_doctor_overview
"`ampx_doctor_sample`: one step of a doctor's history (`history(doctor)`)."
const DoctorSample = LibAmpx.ampx_doctor_sample
"`ampx_fp8_recipe_options`; see `fp8_recipe_options` and `Fp8Recipe(ctx; kw...)`."
const Fp8RecipeOptions = LibAmpx.ampx_fp8_recipe_options

# A field value as the C field's type: enums become their integer, a single
# integer fills an NTuple field (`stride = 2` for (2, 2)), Bool becomes 0/1.
cfield(::Type{T}, v) where {T} = convert(T, v)
cfield(::Type{T}, v::Enum) where {T<:Integer} = T(Integer(v))
cfield(::Type{NTuple{N,T}}, v::Integer) where {N,T} = ntuple(_ -> T(v), N)

# A copy of `x` with the fields named in `kw` replaced (converted to the
# field types).
function with(x::T; kw...) where {T}
    for k in keys(kw)
        k in fieldnames(T) || throw(ArgumentError("$T has no field $k"))
    end
    T((haskey(kw, f) ? cfield(fieldtype(T, f), kw[f]) : getfield(x, f) for f in fieldnames(T))...)
end

# A zero-filled T (a C struct) with its struct_size set, for the structs
# the header gives no *_INIT macro.
function sized(::Type{T}) where {T}
    bytes = Base.zeros(UInt8, sizeof(T))
    with(GC.@preserve(bytes, unsafe_load(Ptr{T}(pointer(bytes)))); struct_size = sizeof(T))
end

"FP8 recipe options: Transformer Engine's defaults (delayed, hybrid, history 1024, max, margin 0) with the given fields replaced."
fp8_recipe_options(; kw...) = with(LibAmpx.ampx_fp8_recipe_options_default(); kw...)

"Context options: the library's defaults with the given fields replaced."
context_options(; kw...) = with(LibAmpx.ampx_context_options_default(); kw...)

"SGD options: the defaults (lr 1e-3) with the given fields replaced."
sgd_options(; kw...) = with(LibAmpx.ampx_sgd_options_default(); kw...)

"Adam options: the defaults with the given fields replaced."
adam_options(; kw...) = with(LibAmpx.ampx_adam_options_default(); kw...)

"AdamW options (decoupled weight decay 1e-2) with the given fields replaced."
adamw_options(; kw...) = with(LibAmpx.ampx_adamw_options_default(); kw...)

"Scaler options: the defaults (init_scale 65536, growth_interval 2000) with the given fields replaced."
scaler_options(; kw...) = with(LibAmpx.ampx_scaler_options_default(); kw...)

"Autocast options: the defaults (F16, enabled, cached) with the given fields replaced."
autocast_options(; kw...) = with(LibAmpx.ampx_autocast_options_default(); kw...)

"""
    lr_schedule(; decay = LR_CONSTANT, warmup_steps = 0, warmup_start_factor = 0.0,
                total_steps = 0, end_factor = 0.0, min_lr = 0.0, step_size = 1, gamma = 0.1)

A schedule (`ampx_lr_schedule`): the defaults with the given fields
replaced. See ampx.h section 17 for the formulas (torch's LinearLR,
CosineAnnealingLR and StepLR after a LinearLR warm-up).
"""
lr_schedule(; kw...) = with(LibAmpx.ampx_lr_schedule_default(); kw...)

"Attention options: the defaults (not causal, scale 1/sqrt(D), no dropout) with the given fields replaced."
attention_options(; kw...) = with(LibAmpx.ampx_attention_options_default(); kw...)

"Cross-entropy options: the defaults (mean, ignore_index -100, no smoothing) with the given fields replaced."
cross_entropy_options(; kw...) = with(LibAmpx.ampx_cross_entropy_options_default(); kw...)

"Convolution options: the defaults (stride 1, padding 0, dilation 1, groups 1) with the given fields replaced."
conv2d_options(; kw...) = with(LibAmpx.ampx_conv2d_options_default(); kw...)

"Pooling options: the defaults (stride = kernel, padding 0, dilation 1) with the given fields replaced."
pool2d_options(; kw...) = with(LibAmpx.ampx_pool2d_options_default(); kw...)

"Data-parallel options: the defaults (25 MiB buckets, averaged, overlapped) with the given fields replaced."
data_parallel_options(; kw...) = with(LibAmpx.ampx_data_parallel_options_default(); kw...)

"Doctor options: the defaults (interval 100, history 4096) with the given fields replaced."
doctor_options(; kw...) = with(LibAmpx.ampx_doctor_options_default(); kw...)

# ---------------------------------------------------------------------------
# Objects
# ---------------------------------------------------------------------------

"""
    Context(options = nothing)

A device (the CPU by default), an allocator and memory statistics; every
tensor belongs to one. Use from one task at a time.
"""
mutable struct Context
    handle::LibAmpx.ampx_context
    scopes::Vector{Vector{Any}}  # per open scope, the tensors borrowed from it
    callbacks::Vector{Any}       # Callbacks ampx holds (segments, the grad-ready hook)
    function Context(options::Union{Nothing,ContextOptions} = nothing)
        out = Ref{LibAmpx.ampx_context}(C_NULL)
        opts = options === nothing ? Ptr{ContextOptions}(C_NULL) : Ref(options)
        check(LibAmpx.ampx_context_create(opts, out))
        finalizer(close, new(out[], Vector{Any}[], Any[]))
    end
end

"""
A dense, contiguous, row-major array on its context's device.
"""
mutable struct Tensor
    handle::LibAmpx.ampx_tensor
    ctx::Context
    scoped::Bool  # borrowed (from a scope of ctx, or for a callback's duration): not released here

    # register: borrowed tensors join the innermost scope's list (pop_scope!
    # closes them), owned ones get a finalizer; a callback's borrowed
    # arguments (register = false) are closed by the callback's trampoline.
    function Tensor(ctx::Context, handle::Ptr, scoped::Bool; register::Bool = true)
        t = new(handle, ctx, scoped)
        if register
            if scoped
                push!(ctx.scopes[end], t)
            else
                finalizer(close, t)
            end
        end
        t
    end
end

"An SGD, Adam or AdamW optimizer with fp32 master weights."
mutable struct Optimizer
    handle::LibAmpx.ampx_optimizer
    ctx::Context
    params::Vector{Tensor}  # in parameter order, to name find_nonfinite_grads' results
end

"A dynamic loss scaler."
mutable struct Scaler
    handle::LibAmpx.ampx_scaler
    ctx::Context
end

"An autocast precision policy."
mutable struct Autocast
    handle::LibAmpx.ampx_autocast
end

"""
A group of ranks bound to one context (`ampx_comm`), for data-parallel
training: see `comm_from_mpi`, `comm_init_nccl` and `comm_from_nccl`.
"""
mutable struct Comm
    handle::LibAmpx.ampx_comm
    ctx::Context
end

"""
An optimizer whose gradients are reduced over a communicator's ranks
(`ampx_data_parallel`; torch's DistributedDataParallel): see
`DataParallel(comm, optimizer, options)`.
"""
mutable struct DataParallel
    handle::LibAmpx.ampx_data_parallel
    comm::Comm
    optimizer::Optimizer
    sync::Bool
end

"""
The precision doctor (`ampx_doctor`) watching one optimizer: see
`Doctor(ctx, optimizer, options)`.
"""
mutable struct Doctor
    handle::LibAmpx.ampx_doctor
    optimizer::Optimizer
end

"""
An opened, validated safetensors file (`ampx_safetensors`): see
`SafetensorsFile(ctx, path)`.
"""
mutable struct SafetensorsFile
    handle::LibAmpx.ampx_safetensors
    ctx::Context
end

"""
An FP8 scaling recipe (`ampx_fp8_recipe`): per slot (a tensor it scales) a
scale, its inverse, the step's amax and an amax history, in device memory.
See `Fp8Recipe(ctx; kw...)`.
"""
mutable struct Fp8Recipe
    handle::LibAmpx.ampx_fp8_recipe
    ctx::Context
    history_len::Int32
end

const Handle = Union{Context,Tensor,Optimizer,Scaler,Autocast,Comm,DataParallel,Doctor,
                     SafetensorsFile,Fp8Recipe}

kind(::Context) = "Context"
kind(::Tensor) = "Tensor"
kind(::Optimizer) = "Optimizer"
kind(::Scaler) = "Scaler"
kind(::Autocast) = "Autocast"
kind(::Comm) = "Comm"
kind(::DataParallel) = "DataParallel"
kind(::Doctor) = "Doctor"
kind(::SafetensorsFile) = "SafetensorsFile"
kind(::Fp8Recipe) = "Fp8Recipe"

# The handle of an open object; a closed one is a clear error here rather
# than a NULL handed to C.
function live(x::Handle)
    x.handle == C_NULL &&
        throw(AmpxError(ERR_STALE_HANDLE, "this $(kind(x)) was closed (or its scope popped)"))
    x.handle
end

# Passing an object where LibAmpx takes its handle type passes its handle
# and keeps the object rooted for the call.
Base.unsafe_convert(::Type{LibAmpx.ampx_context}, x::Context) = live(x)
Base.unsafe_convert(::Type{LibAmpx.ampx_tensor}, x::Tensor) = live(x)
Base.unsafe_convert(::Type{LibAmpx.ampx_optimizer}, x::Optimizer) = live(x)
Base.unsafe_convert(::Type{LibAmpx.ampx_scaler}, x::Scaler) = live(x)
Base.unsafe_convert(::Type{LibAmpx.ampx_autocast}, x::Autocast) = live(x)
Base.unsafe_convert(::Type{LibAmpx.ampx_comm}, x::Comm) = live(x)
Base.unsafe_convert(::Type{LibAmpx.ampx_data_parallel}, x::DataParallel) = live(x)
Base.unsafe_convert(::Type{LibAmpx.ampx_doctor}, x::Doctor) = live(x)
Base.unsafe_convert(::Type{LibAmpx.ampx_safetensors}, x::SafetensorsFile) = live(x)
Base.unsafe_convert(::Type{LibAmpx.ampx_fp8_recipe}, x::Fp8Recipe) = live(x)
# For a program's own ccalls that take a `void *`.
Base.unsafe_convert(::Type{Ptr{Cvoid}}, x::Handle) = Ptr{Cvoid}(live(x))

"Closes (releases) the object; closing again does nothing."
function Base.close(ctx::Context)
    # Every open scope of this context is given back first (as pop_scope! would).
    while !isempty(ctx.scopes) && ctx.handle != C_NULL
        LibAmpx.ampx_scope_pop(ctx.handle) == 0 || break
        for t in pop!(ctx.scopes)
            t.handle = C_NULL
        end
    end
    LibAmpx.ampx_context_release(ctx.handle)
    ctx.handle = C_NULL
    # ampx called the release hook of every callback it held.
    empty!(ctx.callbacks)
    nothing
end

function Base.close(t::Tensor)
    t.scoped || LibAmpx.ampx_tensor_release(t.handle)
    t.handle = C_NULL
    nothing
end

# The body of `close`: releases x's reference with `release(handle)`, unless
# it is closed already, and marks it closed.
function release!(release, x::Handle)
    x.handle == C_NULL || release(x.handle)
    x.handle = C_NULL
    nothing
end

function Base.close(o::Optimizer)
    release!(h -> LibAmpx.ampx_optimizer_release(h), o)
    empty!(o.params)
    nothing
end

Base.close(s::Scaler) = release!(h -> LibAmpx.ampx_scaler_release(h), s)
Base.close(a::Autocast) = release!(h -> LibAmpx.ampx_autocast_release(h), a)
Base.close(c::Comm) = release!(h -> LibAmpx.ampx_comm_release(h), c)
Base.close(dp::DataParallel) = release!(h -> LibAmpx.ampx_data_parallel_release(h), dp)
Base.close(d::Doctor) = release!(h -> LibAmpx.ampx_doctor_release(h), d)
Base.close(f::SafetensorsFile) = release!(h -> LibAmpx.ampx_safetensors_release(h), f)
Base.close(r::Fp8Recipe) = release!(h -> LibAmpx.ampx_fp8_recipe_release(h), r)

"Whether `close` was called on the object."
isclosed(x::Handle) = x.handle == C_NULL

optional(x) = x === nothing ? C_NULL : x

owned(ctx::Context, handle::Ptr) = Tensor(ctx, handle, false)
result(ctx::Context, handle::Ptr) = Tensor(ctx, handle, !isempty(ctx.scopes))

# The handles of tensors as a C array (the tensors must stay rooted while
# it is used: GC.@preserve them).
handles(tensors) = LibAmpx.ampx_tensor[live(t) for t in tensors]

# ---------------------------------------------------------------------------
# Contexts
# ---------------------------------------------------------------------------

"The device kind and index of a context."
function device(ctx::Context)
    kind, index = Ref{Cint}(0), Ref{Int32}(0)
    check(LibAmpx.ampx_context_device(ctx, kind, index))
    (DeviceType(kind[]), Int(index[]))
end

"Waits for all work enqueued on the context's device."
synchronize(ctx::Context) = check(LibAmpx.ampx_context_synchronize(ctx))

"The context's memory statistics (`MemoryStats`)."
function memory_stats(ctx::Context)
    stats = Ref(LibAmpx.AMPX_MEMORY_STATS_INIT())
    check(LibAmpx.ampx_memory_stats_get(ctx, stats))
    stats[]
end

"Sets the peak memory statistic to the current one."
reset_peak_memory!(ctx::Context) = check(LibAmpx.ampx_memory_reset_peak(ctx))

"Lets f32 products and convolutions run in TF32 on CUDA (`ampx_context_set_tf32`); returns the previous setting."
function set_tf32!(ctx::Context, allowed::Bool)
    previous = Ref{Int32}(0)
    check(LibAmpx.ampx_context_set_tf32(ctx, allowed, previous))
    previous[] != 0
end

"Turns recording for backward on or off; returns the previous setting."
function set_grad_enabled!(ctx::Context, enabled::Bool)
    previous = Ref{Int32}(0)
    check(LibAmpx.ampx_set_grad_enabled(ctx, enabled, previous))
    previous[] != 0
end

"Runs `f()` with recording for backward off (restored afterwards)."
function no_grad(f, ctx::Context)
    previous = set_grad_enabled!(ctx, false)
    try
        f()
    finally
        set_grad_enabled!(ctx, previous)
    end
end

"Opens a scope: op outputs are borrowed from it until `pop_scope!`."
function push_scope!(ctx::Context)
    check(LibAmpx.ampx_scope_push(ctx))
    push!(ctx.scopes, Any[])
    ctx
end

"Closes the innermost scope, releasing (and closing) the tensors ops made in it."
function pop_scope!(ctx::Context)
    check(LibAmpx.ampx_scope_pop(ctx))
    for t in pop!(ctx.scopes)
        t.handle = C_NULL
    end
    ctx
end

"""
    scope_depth(ctx)

The number of scopes open on the context as ampx counts them
(`ampx_scope_depth`): those `push_scope!` opened, and inside a checkpointed
segment the one ampx opens around it.
"""
function scope_depth(ctx::Context)
    depth = Ref{Int32}(0)
    check(LibAmpx.ampx_scope_depth(ctx, depth))
    Int(depth[])
end

"Runs `f()` inside a scope."
function with_scope(f, ctx::Context)
    push_scope!(ctx)
    try
        f()
    finally
        pop_scope!(ctx)
    end
end

# ---------------------------------------------------------------------------
# Tensors
# ---------------------------------------------------------------------------

const ELEMENT_TYPES = Dict{DataType,DType}(Float32 => F32, Float16 => F16, Int32 => I32,
                                           Int64 => I64)

"""
    Tensor(undef, ctx, dtype, shape)

A tensor with uninitialised contents of `dtype` and row-major `shape`.
"""
Tensor(::UndefInitializer, ctx::Context, dtype::DType, shape::Dims) = create(:empty, ctx, dtype, shape)

"A tensor of zeros of `dtype` and row-major `shape`."
Base.zeros(ctx::Context, dtype::DType, shape::Dims) = create(:zeros, ctx, dtype, shape)

function create(kind::Symbol, ctx::Context, dtype::DType, shape::Dims)
    dims = Int64[shape...]
    out = Ref{LibAmpx.ampx_tensor}(C_NULL)
    status = kind === :empty ?
        LibAmpx.ampx_tensor_empty(ctx, dtype, length(dims), dims, out) :
        LibAmpx.ampx_tensor_zeros(ctx, dtype, length(dims), dims, out)
    check(status)
    owned(ctx, out[])
end

"""
    Tensor(ctx, data::Vector, shape; dtype)

A tensor holding a copy of `data`, the elements in row-major order. The
dtype follows the element type (Float32, Float16, Int32, Int64); give
`dtype` for raw BF16 bits in a `Vector{UInt16}` or FP8 bits (F8E4M3,
F8E5M2) in a `Vector{UInt8}`.
"""
function Tensor(ctx::Context, data::Vector{T}, shape::Dims;
                dtype::DType = ELEMENT_TYPES[T]) where {T}
    dims = Int64[shape...]
    out = Ref{LibAmpx.ampx_tensor}(C_NULL)
    check(LibAmpx.ampx_tensor_from_host(ctx, dtype, length(dims), dims, data, sizeof(data), out))
    owned(ctx, out[])
end

"""
    wrap(ctx, dtype, shape, data::Ptr, bytes; deleter = C_NULL, user_data = C_NULL)

A tensor over memory the caller owns, without copying. `deleter` is a C
function pointer (`@cfunction`) called as `deleter(user_data, data)` when
ampx is done with the memory; without one the memory must outlive the
tensor. Julia arrays must stay rooted for that long.
"""
function wrap(ctx::Context, dtype::DType, shape::Dims, data::Ptr, bytes::Integer;
              deleter::Ptr{Cvoid} = C_NULL, user_data::Ptr{Cvoid} = C_NULL)
    dims = Int64[shape...]
    out = Ref{LibAmpx.ampx_tensor}(C_NULL)
    check(LibAmpx.ampx_tensor_wrap(ctx, dtype, length(dims), dims, data, bytes, deleter,
                                   user_data, out))
    owned(ctx, out[])
end

"A new owned reference to `t` (e.g. to keep a scope's tensor)."
function retain(t::Tensor)
    check(LibAmpx.ampx_tensor_retain(t))
    owned(t.ctx, t.handle)
end

"Copies the contents into `dst` (exactly `nbytes(t)` bytes)."
to_host!(dst::Vector, t::Tensor) = check(LibAmpx.ampx_tensor_to_host(t, dst, sizeof(dst)))

"The elements as a flat `Vector{T}` in row-major order (T matching the dtype)."
function to_host(::Type{T}, t::Tensor) where {T}
    dst = Vector{T}(undef, nbytes(t) ÷ sizeof(T))
    to_host!(dst, t)
    dst
end

"Overwrites the contents with `src` (exactly `nbytes(t)` bytes)."
copy_from_host!(t::Tensor, src::Vector) =
    check(LibAmpx.ampx_tensor_copy_from_host(t, src, sizeof(src)))

"`dst .= src`, converting the element type (same element count)."
Base.copyto!(dst::Tensor, src::Tensor) = (check(LibAmpx.ampx_tensor_copy(dst, src)); dst)

"""
    copy_fp8!(dst, src; overflow = FP8_SATURATE)

`dst` (F8E4M3 or F8E5M2) = `src` (F32, F16 or BF16, as many elements)
rounded to nearest even, values beyond the format's max following
`overflow` (`copyto!` uses torch's rules: E4M3 saturates, E5M2 overflows to
inf). Returns `dst`.
"""
function copy_fp8!(dst::Tensor, src::Tensor; overflow::Fp8Overflow = FP8_SATURATE)
    check(LibAmpx.ampx_tensor_copy_fp8(dst, src, overflow))
    dst
end

"""
A new tensor holding `t` converted to `dtype` (torch's `Tensor.to`). When `t`
requires grad this is the recorded `ampx_cast`, an op output like any other:
with grad mode on the gradient comes back to `t`, cast to its dtype.
Otherwise the plain `ampx_tensor_cast`.
"""
function cast(t::Tensor, dtype::DType)
    requires_grad(t) && return op(out -> LibAmpx.ampx_cast(t, dtype, out), t.ctx)
    out = Ref{LibAmpx.ampx_tensor}(C_NULL)
    check(LibAmpx.ampx_tensor_cast(t, dtype, out))
    owned(t.ctx, out[])
end

"A copy of `t` in new memory with its dtype, recorded as `cast` (torch's `Tensor.clone`)."
Base.copy(t::Tensor) = cast(t, dtype(t))

"Sets every element to `value`."
Base.fill!(t::Tensor, value::Real) = (check(LibAmpx.ampx_tensor_fill(t, value)); t)

"Names the tensor for diagnostics (\"\" clears the name)."
set_name!(t::Tensor, name::AbstractString) = check(LibAmpx.ampx_tensor_set_name(t, name))

"The tensor's name (\"\" if none)."
function name(t::Tensor)
    out = Ref{Ptr{Cchar}}(C_NULL)
    check(LibAmpx.ampx_tensor_name(t, out))
    unsafe_string(out[])
end

"The element type."
function dtype(t::Tensor)
    out = Ref{Cint}(0)
    check(LibAmpx.ampx_tensor_dtype(t, out))
    DType(out[])
end

function Base.ndims(t::Tensor)
    out = Ref{Int32}(0)
    check(LibAmpx.ampx_tensor_ndim(t, out))
    Int(out[])
end

"The row-major extents."
function Base.size(t::Tensor)
    dims = Vector{Int64}(undef, ndims(t))
    check(LibAmpx.ampx_tensor_shape(t, dims, length(dims)))
    Tuple(Int.(dims))
end

function Base.length(t::Tensor)
    out = Ref{Int64}(0)
    check(LibAmpx.ampx_tensor_numel(t, out))
    Int(out[])
end

"Size of the contents in bytes."
function nbytes(t::Tensor)
    out = Ref{Csize_t}(0)
    check(LibAmpx.ampx_tensor_nbytes(t, out))
    Int(out[])
end

"Address of the first element on the device, valid while `t` lives."
function data_pointer(t::Tensor)
    out = Ref{Ptr{Cvoid}}(C_NULL)
    check(LibAmpx.ampx_tensor_data(t, out))
    out[]
end

"""
    context_handle(t)

The raw `ampx_context` of `t` (borrowed), for passing to other C code. From
Julia use `t.ctx`.
"""
function context_handle(t::Tensor)
    out = Ref{LibAmpx.ampx_context}(C_NULL)
    check(LibAmpx.ampx_tensor_context(t, out))
    out[]
end

"Attaches `grad` as `t`'s gradient (`nothing` detaches it)."
set_grad!(t::Tensor, grad::Union{Nothing,Tensor}) =
    check(LibAmpx.ampx_tensor_set_grad(t, optional(grad)))

"A new owned reference to `t`'s gradient, or `nothing`."
function grad(t::Tensor)
    out = Ref{LibAmpx.ampx_tensor}(C_NULL)
    check(LibAmpx.ampx_tensor_grad(t, out))
    out[] == C_NULL && return nothing
    check(LibAmpx.ampx_tensor_retain(out[]))
    owned(t.ctx, out[])
end

"""
    view(base, byte_offset, shape; dtype = nothing)

A new tensor of `dtype` (`nothing`: base's) and `shape` on `base`'s
memory, starting `byte_offset` bytes past its first element
(`ampx_tensor_view`): no copy; writes through either are seen by both, and
the memory lives until the base and every view are released. The view must
lie inside base's bytes, its offset a multiple of the element size. A view
is a leaf of its own (requires_grad, gradient and name are not base's).
"""
function view(base::Tensor, byte_offset::Integer, shape::Dims;
              dtype::Union{Nothing,DType} = nothing)
    as = dtype === nothing ? Ampx.dtype(base) : dtype
    dims = Int64[shape...]
    out = Ref{LibAmpx.ampx_tensor}(C_NULL)
    check(LibAmpx.ampx_tensor_view(base, byte_offset, as, length(dims), dims, out))
    owned(base.ctx, out[])
end

"Exports `t` as a `DLManagedTensor*` sharing its memory; the consumer calls its deleter once."
function to_dlpack(t::Tensor)
    out = Ref{Ptr{Cvoid}}(C_NULL)
    check(LibAmpx.ampx_tensor_to_dlpack(t, out))
    out[]
end

"Imports a `DLManagedTensor*` without copying; ampx owns it on success."
function from_dlpack(ctx::Context, managed::Ptr{Cvoid})
    out = Ref{LibAmpx.ampx_tensor}(C_NULL)
    check(LibAmpx.ampx_tensor_from_dlpack(ctx, managed, out))
    owned(ctx, out[])
end

"Marks a leaf tensor as needing a gradient (or not)."
set_requires_grad!(t::Tensor, requires::Bool = true) =
    check(LibAmpx.ampx_tensor_set_requires_grad(t, requires))

"Whether gradients flow to or through `t`."
function requires_grad(t::Tensor)
    out = Ref{Int32}(0)
    check(LibAmpx.ampx_tensor_requires_grad(t, out))
    out[] != 0
end

# ---------------------------------------------------------------------------
# Callbacks: Julia functions ampx calls (checkpointed segments, the
# grad-ready hook). Each is rooted in its context's `callbacks` until ampx
# calls the release hook; the user_data ampx passes back is the Callback's
# address. An exception the function throws is kept in `error` (nothing
# may unwind into C) and rethrown when the C call that ran it returns.
# ---------------------------------------------------------------------------

mutable struct Callback
    f::Any
    ctx::Context
    error::Any            # the exception the last run threw, or nothing
    released::Bool        # ampx called the release hook: it will not call f again
end

# Roots a new Callback in ctx, dropping those ampx has released.
function hold!(ctx::Context, f)
    filter!(cb -> !cb.released, ctx.callbacks)
    cb = Callback(f, ctx, nothing, false)
    push!(ctx.callbacks, cb)
    cb
end

# Throws the exception a callback kept, if one did, else the call's error.
function check_callbacks(ctx::Context, status::Integer)
    status == 0 && return nothing
    for cb in ctx.callbacks
        if cb.error !== nothing
            e = cb.error
            cb.error = nothing
            throw(e)
        end
    end
    check(status)
end

error_status(e) = e isa AmpxError ? Cint(Integer(e.status)) : LibAmpx.AMPX_ERR_INVALID_ARGUMENT

# The message ampx reports for a callback's exception (C strings hold no NUL).
error_text(e) = replace("Julia exception: " * sprint(showerror, e), '\0' => ' ')

function segment_trampoline(user_data::Ptr{Cvoid}, inputs::Ptr{LibAmpx.ampx_tensor},
                            input_count::Csize_t, outputs::Ptr{LibAmpx.ampx_tensor},
                            output_count::Csize_t)::LibAmpx.ampx_status
    cb = unsafe_pointer_to_objref(user_data)::Callback
    ctx = cb.ctx
    # ampx opened a scope around the segment: the op outputs made in it, and
    # the borrowed inputs, end with it.
    push!(ctx.scopes, Any[])
    status = LibAmpx.AMPX_OK
    try
        args = [Tensor(ctx, unsafe_load(inputs, i), true) for i in 1:Int(input_count)]
        res = cb.f(args...)
        outs = res isa Tensor ? (res,) : res
        if !(outs isa Union{Tuple,AbstractVector}) || length(outs) != Int(output_count) ||
           !all(o -> o isa Tensor, outs)
            throw(ArgumentError("the checkpointed function must return $(Int(output_count)) " *
                                "Tensor(s) (num_outputs), not $(typeof(res))"))
        end
        for (i, o) in enumerate(outs)
            unsafe_store!(outputs, live(o), i)
        end
    catch e
        cb.error = e
        status = LibAmpx.ampx_set_error(error_status(e), error_text(e))
    finally
        for t in pop!(ctx.scopes)
            t.handle = C_NULL
        end
    end
    status
end

function hook_trampoline(user_data::Ptr{Cvoid}, param::LibAmpx.ampx_tensor)::LibAmpx.ampx_status
    cb = unsafe_pointer_to_objref(user_data)::Callback
    t = Tensor(cb.ctx, param, true; register = false)  # borrowed for the call
    status = LibAmpx.AMPX_OK
    try
        cb.f(t)
    catch e
        cb.error = e
        status = LibAmpx.ampx_set_error(error_status(e), error_text(e))
    finally
        t.handle = C_NULL
    end
    status
end

function release_trampoline(user_data::Ptr{Cvoid})::Cvoid
    cb = unsafe_pointer_to_objref(user_data)::Callback
    cb.released = true
    nothing
end

# C function pointers of the trampolines, made when the module is loaded
# (a @cfunction pointer does not survive precompilation).
const SEGMENT_FN = Ref{Ptr{Cvoid}}(C_NULL)
const HOOK_FN = Ref{Ptr{Cvoid}}(C_NULL)
const RELEASE_FN = Ref{Ptr{Cvoid}}(C_NULL)

function __init__()
    SEGMENT_FN[] = @cfunction(segment_trampoline, LibAmpx.ampx_status,
                              (Ptr{Cvoid}, Ptr{LibAmpx.ampx_tensor}, Csize_t,
                               Ptr{LibAmpx.ampx_tensor}, Csize_t))
    HOOK_FN[] = @cfunction(hook_trampoline, LibAmpx.ampx_status, (Ptr{Cvoid}, LibAmpx.ampx_tensor))
    RELEASE_FN[] = @cfunction(release_trampoline, Cvoid, (Ptr{Cvoid},))
    nothing
end

# torch's retain_graph = None (follow create_graph) is -1 in C.
retain_flag(retain_graph::Union{Nothing,Bool}) = retain_graph === nothing ? Int32(-1) : Int32(retain_graph)

"""
    backward!(loss, scaler = nothing; retain_graph = nothing, create_graph = false)

Backpropagates from the one-element `loss`; with a scaler the gradients
come out scaled. `retain_graph` and `create_graph` are torch's
(`ampx_backward_ex`): `retain_graph = true` keeps the tape for another
backward over the same graph (default: the value of `create_graph`;
without it a second backward through the freed records throws
`ERR_ORDER`); `create_graph = true` computes the gradients with recorded
ops, so each reached leaf's `grad` becomes a new tensor that can be
differentiated. Grad-ready hooks and data-parallel reductions run only in a
backward that does not retain the graph. An exception thrown by a
checkpointed segment (run again here) or by the grad-ready hook is rethrown
here.
"""
function backward!(loss::Tensor, scaler::Union{Nothing,Scaler} = nothing;
                   retain_graph::Union{Nothing,Bool} = nothing, create_graph::Bool = false)
    if retain_graph === nothing && !create_graph
        return check_callbacks(loss.ctx, LibAmpx.ampx_backward(loss, optional(scaler)))
    end
    options = with(LibAmpx.ampx_backward_options_default();
                   retain_graph = retain_flag(retain_graph), create_graph = create_graph)
    check_callbacks(loss.ctx, LibAmpx.ampx_backward_ex(loss, optional(scaler), Ref(options)))
end

# A tensor, or a collection of tensors (and `nothing`s where allowed), as a vector.
tensor_list(x::Tensor, what; allow_nothing = false) = Union{Nothing,Tensor}[x]
function tensor_list(xs, what; allow_nothing = false)
    list = Union{Nothing,Tensor}[]
    for (i, x) in enumerate(xs)
        x isa Tensor || (allow_nothing && x === nothing) ||
            throw(ArgumentError("$what[$i] is a $(typeof(x)), not a Tensor" *
                                (allow_nothing ? " or nothing" : "")))
        push!(list, x)
    end
    list
end

"""
    grad(outputs, inputs; grad_outputs = nothing, retain_graph = nothing,
         create_graph = false, allow_unused = false)

The gradients of `outputs` with respect to `inputs`, as torch.autograd.grad
(`ampx_grad`); each of the two is a Tensor or a collection of them. Inputs
are leaves that require grad or tensors ops made (the gradient flowing into
that tensor). `grad_outputs` is `nothing`, or one entry per output: a tensor
of that output's shape and dtype, or `nothing` for ones, which only
one-element outputs may take (a larger output without one throws
`ERR_SHAPE`).

Returns a `Vector{Union{Nothing,Tensor}}` with one new tensor per input (of
its shape and dtype, borrowed from the open scope as op outputs are), or
`nothing` for an input no output reaches when `allow_unused` (without it,
such an input throws `ERR_INVALID_ARGUMENT` naming it). `create_graph`
records the computation of the gradients, so they can be differentiated
again; `retain_graph` (default: `create_graph`) keeps the records this call
runs for another backward. Nothing accumulates into `grad(t)`, and no
grad-ready hook or data-parallel reduction runs. A failed call changes
nothing.
"""
function grad(outputs, inputs; grad_outputs = nothing,
              retain_graph::Union{Nothing,Bool} = nothing, create_graph::Bool = false,
              allow_unused::Bool = false)
    outs = tensor_list(outputs, "outputs")
    ins = tensor_list(inputs, "inputs")
    seeds = grad_outputs === nothing ? nothing :
        tensor_list(grad_outputs, "grad_outputs"; allow_nothing = true)
    if seeds !== nothing && length(seeds) != length(outs)
        throw(ArgumentError("grad_outputs has $(length(seeds)) entries for $(length(outs)) " *
                            "outputs; give one (or nothing) per output"))
    end
    out_handles = handles(outs)
    in_handles = handles(ins)
    seed_handles = seeds === nothing ? C_NULL :
        LibAmpx.ampx_tensor[t === nothing ? C_NULL : live(t) for t in seeds]
    options = with(LibAmpx.ampx_grad_options_default(); create_graph = create_graph,
                   retain_graph = retain_flag(retain_graph), allow_unused = allow_unused)
    results = fill(LibAmpx.ampx_tensor(C_NULL), length(ins))
    status = GC.@preserve outs ins seeds LibAmpx.ampx_grad(
        out_handles, length(out_handles), seed_handles, in_handles, length(in_handles),
        Ref(options), results)
    check(status)
    ctx = first(outs).ctx
    Union{Nothing,Tensor}[h == C_NULL ? nothing : result(ctx, h) for h in results]
end

"""
    checkpoint(f, inputs::Tensor...; num_outputs = 1, ctx = nothing)

Gradient checkpointing (torch.utils.checkpoint) of `f(inputs...)`, which
computes `num_outputs` tensors with ampx ops: it runs now without keeping
its intermediates, and again when backward reaches it, so it must be
deterministic. Parameters it reads (e.g. through a closure) receive their
gradients as usual. Returns one Tensor, or a tuple when `num_outputs > 1`.
`ctx` is needed only without inputs. An exception thrown by `f` propagates
from here or from the `backward!` that ran it again. `f` is kept until
ampx releases it (after that backward, or when the tape or the context
drops its record).
"""
function checkpoint(f, inputs::Tensor...; num_outputs::Integer = 1,
                    ctx::Union{Nothing,Context} = nothing)
    if ctx === nothing
        isempty(inputs) && throw(ArgumentError("checkpoint without inputs needs ctx"))
        ctx = first(inputs).ctx
    end
    num_outputs >= 1 || throw(ArgumentError("num_outputs is $num_outputs; it must be at least 1"))
    in_handles = handles(inputs)
    outs = fill(LibAmpx.ampx_tensor(C_NULL), num_outputs)
    cb = hold!(ctx, f)
    segment = with(LibAmpx.AMPX_SEGMENT_INIT(); fn = SEGMENT_FN[],
                   user_data = pointer_from_objref(cb), release = RELEASE_FN[])
    # ampx owns cb from here: it calls the release hook exactly once.
    status = GC.@preserve inputs cb LibAmpx.ampx_checkpoint_segment(
        ctx, Ref(segment), in_handles, length(in_handles), outs, num_outputs)
    if status != 0
        if cb.error !== nothing
            e = cb.error
            cb.error = nothing
            throw(e)
        end
        check(status)
    end
    results = Tuple(result(ctx, h) for h in outs)
    num_outputs == 1 ? results[1] : results
end

"""
    set_grad_ready_hook!(f, ctx)

Calls `f(param::Tensor)` during each backward pass as soon as `param`'s
gradient is final for that pass (`ampx_set_grad_ready_hook`); `f =
nothing` removes the hook. `param` is borrowed for the call (closed after
it; `retain` it to keep it). Every leaf that received a gradient is
reported once per backward, in the order backward finishes them. `f` may
read and copy tensors and run ops (not recorded); it must not call
`backward!` or `grad_ready!`. An exception it throws stops the backward
pass and is rethrown by `backward!` (or `grad_ready!`). Replaces the
context's previous hook.
"""
function set_grad_ready_hook!(f, ctx::Context)
    if f === nothing
        check(LibAmpx.ampx_set_grad_ready_hook(ctx, C_NULL, C_NULL, C_NULL))
        return nothing
    end
    live(ctx)  # a closed context is an error before ampx owns anything
    cb = hold!(ctx, f)
    # ampx owns cb from here: it calls the release hook exactly once, also
    # when this call fails.
    status = GC.@preserve cb LibAmpx.ampx_set_grad_ready_hook(ctx, HOOK_FN[],
                                                               pointer_from_objref(cb),
                                                               RELEASE_FN[])
    check(status)
end

"""
    grad_ready!(param)

Tells the grad-ready hook (and data-parallel gradient reduction) that
`param`'s gradient is final for this step (`ampx_grad_ready`), for
programs that compute gradients themselves. An exception the hook throws
is rethrown here.
"""
grad_ready!(param::Tensor) = check_callbacks(param.ctx, LibAmpx.ampx_grad_ready(param))

# ---------------------------------------------------------------------------
# Optimizers
# ---------------------------------------------------------------------------

"An SGD optimizer over `params` (group 0)."
function sgd(ctx::Context, params::Vector{Tensor}, options::SGDOptions = sgd_options())
    out = Ref{LibAmpx.ampx_optimizer}(C_NULL)
    hs = handles(params)
    GC.@preserve params check(LibAmpx.ampx_optimizer_create_sgd(ctx, hs, length(hs),
                                                                Ref(options), out))
    finalizer(close, Optimizer(out[], ctx, copy(params)))
end

"An Adam optimizer over `params`, or AdamW with `adamw_options()`."
function adam(ctx::Context, params::Vector{Tensor}, options::AdamOptions = adam_options())
    out = Ref{LibAmpx.ampx_optimizer}(C_NULL)
    hs = handles(params)
    GC.@preserve params check(LibAmpx.ampx_optimizer_create_adam(ctx, hs, length(hs),
                                                                 Ref(options), out))
    finalizer(close, Optimizer(out[], ctx, copy(params)))
end

"Adds a param group with its own lr and weight decay; returns its index."
function add_group!(o::Optimizer, params::Vector{Tensor}, lr::Real, weight_decay::Real)
    index = Ref{Int32}(0)
    hs = handles(params)
    GC.@preserve params check(LibAmpx.ampx_optimizer_add_group(o, hs, length(hs), lr,
                                                               weight_decay, index))
    append!(o.params, params)
    Int(index[])
end

"Number of param groups."
function group_count(o::Optimizer)
    out = Ref{Int32}(0)
    check(LibAmpx.ampx_optimizer_group_count(o, out))
    Int(out[])
end

"Sets group `group`'s (0-based) learning rate."
set_lr!(o::Optimizer, group::Integer, lr::Real) = check(LibAmpx.ampx_optimizer_set_lr(o, group, lr))

"Group `group`'s (0-based) learning rate."
function lr(o::Optimizer, group::Integer)
    out = Ref{Cdouble}(0)
    check(LibAmpx.ampx_optimizer_get_lr(o, group, out))
    out[]
end

"One step with the gradients as they are (use `step!(scaler, o)` for scaled ones)."
step!(o::Optimizer) = check(LibAmpx.ampx_optimizer_step(o))

"Zeroes every attached gradient."
zero_grad!(o::Optimizer) = check(LibAmpx.ampx_optimizer_zero_grad(o))

"Whether the most recent step was taken (false: skipped for inf/NaN)."
function last_step_taken(o::Optimizer)
    out = Ref{Int32}(0)
    check(LibAmpx.ampx_optimizer_last_step_taken(o, out))
    out[] != 0
end

"A new reference to one F32 state tensor of `param`."
function state_tensor(o::Optimizer, param::Tensor, kind::OptimizerState)
    out = Ref{LibAmpx.ampx_tensor}(C_NULL)
    check(LibAmpx.ampx_optimizer_state_tensor(o, param, kind, out))
    owned(o.ctx, out[])
end

"Steps `param` has taken."
function param_steps(o::Optimizer, param::Tensor)
    out = Ref{Int64}(0)
    check(LibAmpx.ampx_optimizer_param_steps(o, param, out))
    out[]
end

"The optimizer's serialised state."
function save_state(o::Optimizer)
    size = Ref{Csize_t}(0)
    check(LibAmpx.ampx_optimizer_state_size(o, size))
    buffer = Vector{UInt8}(undef, size[])
    check(LibAmpx.ampx_optimizer_save_state(o, buffer, length(buffer)))
    buffer
end

"Restores state from `save_state`; nothing changes on error."
load_state!(o::Optimizer, state::Vector{UInt8}) =
    check(LibAmpx.ampx_optimizer_load_state(o, state, length(state)))

"""
    set_lr_schedule!(o, group, schedule::LRSchedule)

Makes param group `group` (0-based) follow `schedule` (see `lr_schedule`)
from the optimizer's current step count on; the rate each step uses is
computed on the device. `lr_schedule(decay = LR_CONSTANT)` with no warm-up
removes a schedule.
"""
set_lr_schedule!(o::Optimizer, group::Integer, schedule::LRSchedule) =
    check(LibAmpx.ampx_optimizer_set_lr_schedule(o, group, Ref(schedule)))

"The schedule group `group` (0-based) follows (`LRSchedule`)."
function lr_schedule(o::Optimizer, group::Integer)
    out = Ref(LibAmpx.AMPX_LR_SCHEDULE_INIT())
    check(LibAmpx.ampx_optimizer_get_lr_schedule(o, group, out))
    out[]
end

"Steps the optimizer has taken (skipped ones not counted); schedules read it."
function step_count(o::Optimizer)
    out = Ref{Int64}(0)
    check(LibAmpx.ampx_optimizer_step_count(o, out))
    out[]
end

"""
    lr_schedule_value(schedule, base_lr, step)

The rate (a Float64) `schedule` gives a group of rate `base_lr` after
`step` taken steps: the formula the device evaluates.
"""
function lr_schedule_value(schedule::LRSchedule, base_lr::Real, step::Integer)
    out = Ref{Cdouble}(0)
    check(LibAmpx.ampx_lr_schedule_value(Ref(schedule), base_lr, step, out))
    out[]
end

"""
    clip_grad_norm!(o, max_norm; norm_type = 2.0, error_if_nonfinite = false, total = false)

Clips the gradients by their total norm; with `total = true` returns the
norm as a new one-element tensor. Refused with ERR_ORDER while the
gradients are still scaled.
"""
function clip_grad_norm!(o::Optimizer, max_norm::Real; norm_type::Real = 2.0,
                         error_if_nonfinite::Bool = false, total::Bool = false)
    out = Ref{LibAmpx.ampx_tensor}(C_NULL)
    check(LibAmpx.ampx_clip_grad_norm(o, max_norm, norm_type, error_if_nonfinite,
                                      total ? out : Ptr{LibAmpx.ampx_tensor}(C_NULL)))
    total ? owned(o.ctx, out[]) : nothing
end

"Clamps every gradient element to [-clip_value, clip_value]."
clip_grad_value!(o::Optimizer, clip_value::Real) = check(LibAmpx.ampx_clip_grad_value(o, clip_value))

"""
    find_nonfinite_grads(o)

The parameters whose gradients hold NaN or inf, in parameter order, as
named tuples `(param, name, nan_count, inf_count)`.
"""
function find_nonfinite_grads(o::Optimizer)
    entries = Vector{LibAmpx.ampx_nonfinite_grad}(undef, length(o.params))
    found = Ref{Csize_t}(0)
    check(LibAmpx.ampx_find_nonfinite_grads(o, entries, length(entries), found))
    map(entries[1:min(found[], length(entries))]) do e
        index = findfirst(p -> p.handle == e.param, o.params)
        param = index === nothing ? nothing : o.params[index]  # nothing: that Tensor was closed
        (param = param, name = unsafe_string(e.name), nan_count = e.nan_count, inf_count = e.inf_count)
    end
end

# ---------------------------------------------------------------------------
# Loss scaling
# ---------------------------------------------------------------------------

"A dynamic loss scaler on `ctx`."
function Scaler(ctx::Context, options::ScalerOptions = scaler_options())
    out = Ref{LibAmpx.ampx_scaler}(C_NULL)
    check(LibAmpx.ampx_scaler_create(ctx, Ref(options), out))
    finalizer(close, Scaler(out[], ctx))
end

"Ties `o` to the scaler before its first use."
attach!(s::Scaler, o::Optimizer) = check(LibAmpx.ampx_scaler_attach(s, o))

"A new F32 tensor holding `loss * scale`; recorded when `loss` requires grad (so `grad` can differentiate it)."
function scale_loss(s::Scaler, loss::Tensor)
    out = Ref{LibAmpx.ampx_tensor}(C_NULL)
    check(LibAmpx.ampx_scaler_scale_loss(s, loss, out))
    owned(s.ctx, out[])
end

"A new reference to the one-element device tensor holding the scale."
function scale_tensor(s::Scaler)
    out = Ref{LibAmpx.ampx_tensor}(C_NULL)
    check(LibAmpx.ampx_scaler_scale_tensor(s, out))
    owned(s.ctx, out[])
end

"The current scale (synchronizes)."
function scale(s::Scaler)
    out = Ref{Cdouble}(0)
    check(LibAmpx.ampx_scaler_get_scale(s, out))
    out[]
end

"""
    unscale_tensor(s, x)

`x * (1 / scale)` with the scaler's current scale, taken on the device (no
host read; `ampx_scaler_unscale_tensor`): a new tensor of x's shape and
dtype, owned as an op output. Recorded -- its gradient is the incoming one
times the same 1/scale -- so gradients of `scale_loss`'s output taken by
`grad(...; create_graph = true)` can be unscaled and differentiated (the
gradient-penalty recipe of ampx.h section 9). A disabled scaler gives a copy
of x.
"""
unscale_tensor(s::Scaler, x::Tensor) =
    op(out -> LibAmpx.ampx_scaler_unscale_tensor(s, x, out), s.ctx)

"Divides `o`'s gradients by the scale, recording inf/NaN."
unscale!(s::Scaler, o::Optimizer) = check(LibAmpx.ampx_scaler_unscale(s, o))

"Unscales if needed, then steps `o` unless an inf/NaN was found."
step!(s::Scaler, o::Optimizer) = check(LibAmpx.ampx_scaler_step(s, o))

"Ends the iteration: backs off or grows the scale (to `new_scale` when given)."
update!(s::Scaler) = check(LibAmpx.ampx_scaler_update(s))
update!(s::Scaler, new_scale::Real) = check(LibAmpx.ampx_scaler_update_to(s, new_scale))

"Whether the last unscale of `o`'s gradients found an inf/NaN."
function found_inf(s::Scaler, o::Optimizer)
    out = Ref{Int32}(0)
    check(LibAmpx.ampx_scaler_found_inf(s, o, out))
    out[] != 0
end

"The scaler's counters (`ScalerCounters`)."
function counters(s::Scaler)
    out = Ref(LibAmpx.AMPX_SCALER_COUNTERS_INIT())
    check(LibAmpx.ampx_scaler_get_counters(s, out))
    out[]
end

"The scaler's whole state (`ScalerState`), e.g. for a checkpoint."
function state(s::Scaler)
    out = Ref(with(sized(ScalerState); counters = LibAmpx.AMPX_SCALER_COUNTERS_INIT()))
    check(LibAmpx.ampx_scaler_get_state(s, out))
    out[]
end

"Restores a state from `state`, between iterations only."
set_state!(s::Scaler, st::ScalerState) = check(LibAmpx.ampx_scaler_set_state(s, Ref(st)))

# ---------------------------------------------------------------------------
# Autocast
# ---------------------------------------------------------------------------

"An autocast policy for `ctx`."
function Autocast(ctx::Context, options::AutocastOptions = autocast_options())
    out = Ref{LibAmpx.ampx_autocast}(C_NULL)
    check(LibAmpx.ampx_autocast_create(ctx, Ref(options), out))
    finalizer(close, Autocast(out[]))
end

"Overrides the class of the op named `op` (e.g. \"softmax\")."
set_op_class!(a::Autocast, op::AbstractString, class::OpClass) =
    check(LibAmpx.ampx_autocast_set_op_class(a, op, class))

"The class the op named `op` gets under this policy."
function op_class(a::Autocast, op::AbstractString)
    out = Ref{Cint}(0)
    check(LibAmpx.ampx_autocast_op_class(a, op, out))
    OpClass(out[])
end

"Enters the policy: ops follow it until `exit!`."
enter!(a::Autocast) = check(LibAmpx.ampx_autocast_enter(a))

"Leaves the innermost region, which must be this policy's."
exit!(a::Autocast) = check(LibAmpx.ampx_autocast_exit(a))

"Runs `f()` with the policy entered."
function with_autocast(f, a::Autocast)
    enter!(a)
    try
        f()
    finally
        exit!(a)
    end
end

"""
    set_fp8!(a, recipe; min_gemm_size = FP8_DEFAULT_MIN_GEMM_SIZE)

Makes `a` an FP8 policy with `recipe` (the policy keeps its own reference),
or a plain one again with `nothing`: linear and matmul with m * n * k at
least `min_gemm_size` run in FP8. `ERR_NOT_SUPPORTED` on a device without
FP8 products; the policy is unchanged on error.
"""
set_fp8!(a::Autocast, recipe::Union{Nothing,Fp8Recipe};
         min_gemm_size::Integer = FP8_DEFAULT_MIN_GEMM_SIZE) =
    check(LibAmpx.ampx_autocast_set_fp8(a, optional(recipe), min_gemm_size))

"The policy's FP8 counts: `(fp8_products, fallbacks, last_fallback)`."
function fp8_stats(a::Autocast)
    out = Ref(LibAmpx.AMPX_FP8_STATS_INIT())
    check(LibAmpx.ampx_autocast_fp8_stats(a, out))
    s = out[]
    (fp8_products = s.fp8_products, fallbacks = s.fallbacks,
     last_fallback = s.last_fallback == C_NULL ? "" : unsafe_string(s.last_fallback))
end

"Casts served from the cache and performed into it: `(hits, misses)`."
function cache_stats(a::Autocast)
    hits, misses = Ref{Int64}(0), Ref{Int64}(0)
    check(LibAmpx.ampx_autocast_cache_stats(a, hits, misses))
    (hits[], misses[])
end

# ---------------------------------------------------------------------------
# Ops: each returns a tensor on its inputs' context, borrowed from the open
# scope if there is one.
# ---------------------------------------------------------------------------

# Runs an op: `f(out)` makes the call writing the output handle to `out`.
function op(f, ctx::Context)
    out = Ref{LibAmpx.ampx_tensor}(C_NULL)
    check(f(out))
    result(ctx, out[])
end

"`a + b` (b may be a row vector broadcast over a's rows)."
add(a::Tensor, b::Tensor) = op(out -> LibAmpx.ampx_add(a, b, out), a.ctx)

"`a - b` (broadcasting as `add`)."
sub(a::Tensor, b::Tensor) = op(out -> LibAmpx.ampx_sub(a, b, out), a.ctx)

"`a .* b` (broadcasting as `add`)."
mul(a::Tensor, b::Tensor) = op(out -> LibAmpx.ampx_mul(a, b, out), a.ctx)

"`a ./ b` (broadcasting as `add`; IEEE division)."
divide(a::Tensor, b::Tensor) = op(out -> LibAmpx.ampx_div(a, b, out), a.ctx)

"`a ./ b` element-wise: `divide`."
Base.:/(a::Tensor, b::Tensor) = divide(a, b)

"`a * scale + shift` in a's type."
affine(a::Tensor, scale::Real, shift::Real) =
    op(out -> LibAmpx.ampx_affine(a, scale, shift, out), a.ctx)

"max(x, 0)."
relu(x::Tensor) = op(out -> LibAmpx.ampx_relu(x, out), x.ctx)

"GELU, erf form."
gelu(x::Tensor) = op(out -> LibAmpx.ampx_gelu(x, out), x.ctx)

"GELU, tanh approximation."
gelu_tanh(x::Tensor) = op(out -> LibAmpx.ampx_gelu_tanh(x, out), x.ctx)

"x * sigmoid(x)."
silu(x::Tensor) = op(out -> LibAmpx.ampx_silu(x, out), x.ctx)

"1 / (1 + exp(-x))."
sigmoid(x::Tensor) = op(out -> LibAmpx.ampx_sigmoid(x, out), x.ctx)

"tanh(x), element-wise."
Base.tanh(x::Tensor) = op(out -> LibAmpx.ampx_tanh(x, out), x.ctx)

"e^x, element-wise (autocast: fp32, as torch's)."
Base.exp(x::Tensor) = op(out -> LibAmpx.ampx_exp(x, out), x.ctx)

"The natural logarithm, element-wise (autocast: fp32)."
Base.log(x::Tensor) = op(out -> LibAmpx.ampx_log(x, out), x.ctx)

"The square root, element-wise (autocast: keep)."
Base.sqrt(x::Tensor) = op(out -> LibAmpx.ampx_sqrt(x, out), x.ctx)

"1 / sqrt(x), element-wise (autocast: fp32)."
rsqrt(x::Tensor) = op(out -> LibAmpx.ampx_rsqrt(x, out), x.ctx)

"`x ^ exponent` for a number exponent (autocast: fp32)."
pow(x::Tensor, exponent::Real) = op(out -> LibAmpx.ampx_pow(x, exponent, out), x.ctx)
Base.:^(x::Tensor, exponent::Real) = pow(x, exponent)

# Dimensions (0-based; an Integer or a collection) as a C int32 array.
dims_array(dims) = Int32[d for d in (dims isa Integer ? (dims,) : dims)]

function reduce_dims(f, x::Tensor, dims, keepdim::Bool)
    ds = dims_array(dims)
    op(out -> f(x, ds, length(ds), keepdim, out), x.ctx)
end

"""
    sum(x; dims = nothing, keepdim = false)

Without `dims`, the sum of all elements: a one-element F32 tensor (computed
in fp32). With `dims` (0-based; an Integer or a collection; negative count
from the end), the sum over those dimensions as torch.sum(x, dims,
keepdim), in x's dtype, accumulated in double.
"""
function Base.sum(x::Tensor; dims = nothing, keepdim::Bool = false)
    dims === nothing && return op(out -> LibAmpx.ampx_sum(x, out), x.ctx)
    reduce_dims((t, ds, n, k, out) -> LibAmpx.ampx_sum_dims(t, ds, n, k, out), x, dims, keepdim)
end

"""
    mean(x; dims = nothing, keepdim = false)

Without `dims`, the mean of all elements (one element, x's dtype,
accumulated in fp32); with `dims`, over those dimensions as torch.mean.
"""
function mean(x::Tensor; dims = nothing, keepdim::Bool = false)
    dims === nothing && return op(out -> LibAmpx.ampx_mean(x, out), x.ctx)
    reduce_dims((t, ds, n, k, out) -> LibAmpx.ampx_mean_dims(t, ds, n, k, out), x, dims, keepdim)
end

"""
    amax(x; dims = (), keepdim = false)

torch.amax: the maximum over `dims` (0-based; () is every dimension); the
gradient is shared evenly among the maxima.
"""
amax(x::Tensor; dims = (), keepdim::Bool = false) =
    reduce_dims((t, ds, n, k, out) -> LibAmpx.ampx_amax(t, ds, n, k, out), x, dims, keepdim)

"Softmax over dimension `dim` (0-based; the last by default)."
function softmax(x::Tensor; dim::Integer = -1)
    dim == -1 && return op(out -> LibAmpx.ampx_softmax(x, out), x.ctx)
    op(out -> LibAmpx.ampx_softmax_dim(x, dim, out), x.ctx)
end

"Log-softmax over dimension `dim` (0-based; the last by default)."
function log_softmax(x::Tensor; dim::Integer = -1)
    dim == -1 && return op(out -> LibAmpx.ampx_log_softmax(x, out), x.ctx)
    op(out -> LibAmpx.ampx_log_softmax_dim(x, dim, out), x.ctx)
end

"""
    cross_entropy(logits, labels; reduction = REDUCTION_MEAN, ignore_index = -100,
                  weight = nothing, label_smoothing = 0.0)

Cross-entropy of logits [N, C] against labels [N] (I32/I64), as
torch.nn.functional.cross_entropy: also [N, C, d1, ...] against [N, d1,
...]; optional class weights [C] and label smoothing in [0, 1]. Labels
equal to `ignore_index` are left out (and not counted in the mean).
"""
function cross_entropy(logits::Tensor, labels::Tensor; reduction::Reduction = REDUCTION_MEAN,
                       ignore_index::Integer = -100, weight::Union{Nothing,Tensor} = nothing,
                       label_smoothing::Real = 0.0)
    if weight === nothing && label_smoothing == 0
        return op(out -> LibAmpx.ampx_cross_entropy(logits, labels, reduction, ignore_index, out),
                  logits.ctx)
    end
    options = cross_entropy_options(reduction = reduction, ignore_index = ignore_index,
                                    label_smoothing = label_smoothing)
    op(out -> LibAmpx.ampx_cross_entropy_ex(logits, labels, optional(weight), Ref(options), out),
       logits.ctx)
end

"Mean-squared error (or sum of squares) between `input` and `target`."
mse_loss(input::Tensor, target::Tensor; reduction::Reduction = REDUCTION_MEAN) =
    op(out -> LibAmpx.ampx_mse_loss(input, target, reduction, out), input.ctx)

"""
    bce_with_logits(logits, targets; reduction = REDUCTION_MEAN, weight = nothing,
                    pos_weight = nothing)

Binary cross-entropy of logits against targets of the same shape, as
torch.nn.functional.binary_cross_entropy_with_logits. `weight` rescales each
element's loss and `pos_weight` the positive term (torch's per-class weight:
a [C] tensor applies along the last dimension of [..., C] logits); each
broadcasts to the logits' shape (aligned at the right, extents equal or 1),
may be of any floating type, and is a constant (no gradient flows to it).
The mean divides by the number of elements, whatever the weights.
"""
function bce_with_logits(logits::Tensor, targets::Tensor; reduction::Reduction = REDUCTION_MEAN,
                         weight::Union{Nothing,Tensor} = nothing,
                         pos_weight::Union{Nothing,Tensor} = nothing)
    if weight === nothing && pos_weight === nothing
        return op(out -> LibAmpx.ampx_bce_with_logits(logits, targets, reduction, out), logits.ctx)
    end
    options = with(LibAmpx.ampx_bce_with_logits_options_default(); reduction = reduction)
    op(out -> LibAmpx.ampx_bce_with_logits_ex(logits, targets, optional(weight),
                                              optional(pos_weight), Ref(options), out),
       logits.ctx)
end

"Matrix product [M,K]x[K,N] (or batched)."
matmul(a::Tensor, b::Tensor) = op(out -> LibAmpx.ampx_matmul(a, b, out), a.ctx)

"`act(x W^T + b)` for x [..., in], weight [out, in], bias [out] or `nothing`."
linear(x::Tensor, weight::Tensor, bias::Union{Nothing,Tensor} = nothing,
       activation::Activation = ACTIVATION_NONE) =
    op(out -> LibAmpx.ampx_linear(x, weight, optional(bias), activation, out), x.ctx)

"Layer normalisation over the last dimension; weight and bias may be `nothing`."
layer_norm(x::Tensor, weight::Union{Nothing,Tensor}, bias::Union{Nothing,Tensor};
           eps::Real = 1e-5) =
    op(out -> LibAmpx.ampx_layer_norm(x, optional(weight), optional(bias), eps, out), x.ctx)

"torch's default eps of rms_norm for every input dtype: float32's machine epsilon."
const RMS_NORM_EPS = Float64(eps(Float32))

"""
    rms_norm(x, weight = nothing; eps = nothing)

torch.nn.functional.rms_norm over the last dimension (statistics in fp32).
`eps = nothing` is torch's default for every input dtype: float32's
machine epsilon, 2^-23 -- also for F16 and BF16 inputs, which torch (like
ampx) normalises in fp32.
"""
rms_norm(x::Tensor, weight::Union{Nothing,Tensor} = nothing; eps::Union{Nothing,Real} = nothing) =
    op(out -> LibAmpx.ampx_rms_norm(x, optional(weight), eps === nothing ? RMS_NORM_EPS : eps, out),
       x.ctx)

"Batch normalisation of x [N, C] or [N, C, ...]; updates the running statistics in training."
batch_norm(x::Tensor, weight::Union{Nothing,Tensor}, bias::Union{Nothing,Tensor},
           running_mean::Union{Nothing,Tensor}, running_var::Union{Nothing,Tensor};
           training::Bool = true, momentum::Real = 0.1, eps::Real = 1e-5) =
    op(out -> LibAmpx.ampx_batch_norm(x, optional(weight), optional(bias), optional(running_mean),
                                      optional(running_var), training, momentum, eps, out), x.ctx)

"Inverted dropout with probability `p` while training (masks follow the context's seed)."
dropout(x::Tensor, p::Real; training::Bool = true) =
    op(out -> LibAmpx.ampx_dropout(x, p, training, out), x.ctx)

"Rows of `weight` [V, D] picked by `indices` (I32/I64)."
embedding(weight::Tensor, indices::Tensor) =
    op(out -> LibAmpx.ampx_embedding(weight, indices, out), weight.ctx)

"`x` with a new row-major shape (one extent may be -1), sharing its memory."
function Base.reshape(x::Tensor, shape::Dims)
    dims = Int64[shape...]
    op(out -> LibAmpx.ampx_reshape(x, length(dims), dims, out), x.ctx)
end

"A copy of `x` with dimensions `dim0` and `dim1` (0-based; negative from the end) exchanged."
transpose(x::Tensor, dim0::Integer, dim1::Integer) =
    op(out -> LibAmpx.ampx_transpose(x, dim0, dim1, out), x.ctx)

"""
    permute(x, dims)

A contiguous copy with the dimensions reordered: output dimension k is
dimension `dims[k + 1]` (0-based) of x, as torch.permute(x, dims).contiguous().
"""
function permute(x::Tensor, dims)
    ds = dims_array(dims)
    op(out -> LibAmpx.ampx_permute(x, length(ds), ds, out), x.ctx)
end

"Joins `tensors` along `dim` (0-based; negative from the end)."
function concat(tensors::Vector{Tensor}, dim::Integer)
    isempty(tensors) && throw(ArgumentError("concat of no tensors"))
    hs = handles(tensors)
    GC.@preserve tensors op(out -> LibAmpx.ampx_concat(hs, length(hs), dim, out),
                            first(tensors).ctx)
end

"""
    split(x, sizes::AbstractVector{<:Integer}; dim = 0)
    split(x, size::Integer; dim = 0)

torch.split: pieces of `sizes` elements along `dim` (a number: pieces of
that size, the last one smaller), as new contiguous tensors.
"""
function split(x::Tensor, sizes::AbstractVector{<:Integer}; dim::Integer = 0)
    isempty(sizes) && throw(ArgumentError("split into no pieces"))
    ss = Int64[s for s in sizes]
    outs = fill(LibAmpx.ampx_tensor(C_NULL), length(ss))
    check(LibAmpx.ampx_split(x, ss, length(ss), dim, outs))
    [result(x.ctx, h) for h in outs]
end

function split(x::Tensor, size::Integer; dim::Integer = 0)
    size >= 1 || throw(ArgumentError("split size is $size; it must be at least 1"))
    shape = Base.size(x)
    d = dim < 0 ? dim + length(shape) : dim
    0 <= d < length(shape) || throw(ArgumentError("dim $dim is out of range for $(length(shape)) dimensions"))
    extent = shape[d + 1]
    sizes = extent == 0 ? [0] : [min(size, extent - start) for start in 0:size:extent-1]
    split(x, sizes; dim = dim)
end

"""
    chunk(x, chunks; dim = 0)

torch.chunk: at most `chunks` pieces of ceil(extent / chunks) along `dim`.
"""
function chunk(x::Tensor, chunks::Integer; dim::Integer = 0)
    chunks >= 1 || throw(ArgumentError("chunks is $chunks; it must be at least 1"))
    outs = fill(LibAmpx.ampx_tensor(C_NULL), chunks)
    count = Ref{Int32}(0)
    check(LibAmpx.ampx_chunk(x, chunks, dim, outs, count))
    [result(x.ctx, outs[i]) for i in 1:count[]]
end

"x with `value` where `mask` (any dtype; non-zero is set) is set; the mask broadcasts to x's shape."
masked_fill(x::Tensor, mask::Tensor, value::Real) =
    op(out -> LibAmpx.ampx_masked_fill(x, mask, value, out), x.ctx)

"""
    rotary_embedding(x, cos, sin; interleaved = false)

Rotary position embeddings of x [..., T, D] with tables [T, D/2]: pairs
(i, i + D/2) rotated (Hugging Face LLaMA's rotate-half), or (2i, 2i+1)
when `interleaved`.
"""
rotary_embedding(x::Tensor, cos::Tensor, sin::Tensor; interleaved::Bool = false) =
    op(out -> LibAmpx.ampx_rotary_embedding(x, cos, sin, interleaved, out), x.ctx)

"""
    scaled_dot_product_attention(q, k, v; attn_mask = nothing, dropout_p = 0.0,
                                 is_causal = false, scale = nothing)

torch.nn.functional.scaled_dot_product_attention for [..., H, T, D]
tensors: `k` and `v` may have fewer heads than `q` (grouped-query
attention); `attn_mask` broadcasts to the scores (floating: added;
integer: non-zero marks the keys that take part); `scale = nothing` is
1/sqrt(D). A query row with every key masked gives zeros, as torch's.
"""
function scaled_dot_product_attention(q::Tensor, k::Tensor, v::Tensor;
                                      attn_mask::Union{Nothing,Tensor} = nothing,
                                      dropout_p::Real = 0.0, is_causal::Bool = false,
                                      scale::Union{Nothing,Real} = nothing)
    scale !== nothing && scale == 0 &&
        throw(ArgumentError("scale is 0; ampx reads 0 as the default 1/sqrt(D)"))
    options = attention_options(causal = is_causal, dropout_p = dropout_p,
                                scale = scale === nothing ? 0.0 : scale)
    op(out -> LibAmpx.ampx_scaled_dot_product_attention(q, k, v, optional(attn_mask),
                                                        Ref(options), out), q.ctx)
end

# An Integer or a pair, as torch's _pair.
pair(v::Integer) = (Int64(v), Int64(v))
pair(v::Union{Tuple,AbstractVector}) =
    length(v) == 2 ? (Int64(v[1]), Int64(v[2])) :
    throw(ArgumentError("expected one integer or two, got $(length(v)) values"))

"""
    conv2d(x, weight, bias = nothing; stride = 1, padding = 0, dilation = 1, groups = 1)

torch.nn.functional.conv2d: x [N, C, H, W] (or [C, H, W]), weight
[O, C/groups, kh, kw], bias [O]; stride, padding and dilation are an
integer or a pair.
"""
function conv2d(x::Tensor, weight::Tensor, bias::Union{Nothing,Tensor} = nothing;
                stride = 1, padding = 0, dilation = 1, groups::Integer = 1)
    options = conv2d_options(stride = pair(stride), padding = pair(padding),
                             dilation = pair(dilation), groups = groups)
    op(out -> LibAmpx.ampx_conv2d(x, weight, optional(bias), Ref(options), out), x.ctx)
end

"""
    max_pool2d(x, kernel_size; stride = nothing, padding = 0, dilation = 1, ceil_mode = false)

torch.nn.functional.max_pool2d (without indices); `stride = nothing` is the kernel size.
"""
function max_pool2d(x::Tensor, kernel_size; stride = nothing, padding = 0, dilation = 1,
                    ceil_mode::Bool = false)
    kh, kw = pair(kernel_size)
    options = pool2d_options(stride = stride === nothing ? (0, 0) : pair(stride),
                             padding = pair(padding), dilation = pair(dilation),
                             ceil_mode = ceil_mode)
    op(out -> LibAmpx.ampx_max_pool2d(x, kh, kw, Ref(options), out), x.ctx)
end

"""
    avg_pool2d(x, kernel_size; stride = nothing, padding = 0, ceil_mode = false,
               count_include_pad = true, divisor_override = nothing)

torch.nn.functional.avg_pool2d; `stride = nothing` is the kernel size.
"""
function avg_pool2d(x::Tensor, kernel_size; stride = nothing, padding = 0, ceil_mode::Bool = false,
                    count_include_pad::Bool = true,
                    divisor_override::Union{Nothing,Integer} = nothing)
    kh, kw = pair(kernel_size)
    options = pool2d_options(stride = stride === nothing ? (0, 0) : pair(stride),
                             padding = pair(padding), ceil_mode = ceil_mode,
                             count_include_pad = count_include_pad,
                             divisor_override = divisor_override === nothing ? 0 : divisor_override)
    op(out -> LibAmpx.ampx_avg_pool2d(x, kh, kw, Ref(options), out), x.ctx)
end

"torch's adaptive_avg_pool2d(x, 1): each channel's mean, [N, C, 1, 1]."
global_avg_pool2d(x::Tensor) = op(out -> LibAmpx.ampx_global_avg_pool2d(x, out), x.ctx)

# ---------------------------------------------------------------------------
# Training checkpoint files
# ---------------------------------------------------------------------------

"""
    save_checkpoint(path, params; optimizer = nothing, scaler = nothing, fp8_recipe = nothing)

Writes the named tensors `params`, the optimizer's and the scaler's state to
`path`, replacing it atomically. Between iterations only. With
`fp8_recipe`, also the recipe's options and per-slot scales, amaxes and
histories.
"""
function save_checkpoint(path::AbstractString, params::Vector{Tensor};
                         optimizer::Union{Nothing,Optimizer} = nothing,
                         scaler::Union{Nothing,Scaler} = nothing,
                         fp8_recipe::Union{Nothing,Fp8Recipe} = nothing)
    hs = handles(params)
    if fp8_recipe === nothing
        GC.@preserve params check(LibAmpx.ampx_checkpoint_file_save(path, hs, length(hs),
                                                                    optional(optimizer),
                                                                    optional(scaler)))
    else
        GC.@preserve params check(LibAmpx.ampx_checkpoint_file_save_fp8(path, hs, length(hs),
                                                                        optional(optimizer),
                                                                        optional(scaler),
                                                                        fp8_recipe))
    end
end

"""
    load_checkpoint(path, params; optimizer = nothing, scaler = nothing, fp8_recipe = nothing)

Restores a file written by `save_checkpoint` into the same tensors and,
when given, the optimizer, scaler and FP8 recipe (created with the saved
options; slots matched by name); nothing changes on error.
"""
function load_checkpoint(path::AbstractString, params::Vector{Tensor};
                         optimizer::Union{Nothing,Optimizer} = nothing,
                         scaler::Union{Nothing,Scaler} = nothing,
                         fp8_recipe::Union{Nothing,Fp8Recipe} = nothing)
    hs = handles(params)
    if fp8_recipe === nothing
        GC.@preserve params check(LibAmpx.ampx_checkpoint_file_load(path, hs, length(hs),
                                                                    optional(optimizer),
                                                                    optional(scaler)))
    else
        GC.@preserve params check(LibAmpx.ampx_checkpoint_file_load_fp8(path, hs, length(hs),
                                                                        optional(optimizer),
                                                                        optional(scaler),
                                                                        fp8_recipe))
    end
end

# ---------------------------------------------------------------------------
# safetensors files
# ---------------------------------------------------------------------------

# Strings as a C array of `const char *` (the strings must stay rooted
# while it is used: GC.@preserve them). NUL characters are refused here.
function cstrings(strings::Vector{String})
    for s in strings
        occursin('\0', s) && throw(ArgumentError("$(repr(s)) contains a NUL character"))
    end
    Ptr{Cchar}[pointer(s) for s in strings]
end

"""
    save_safetensors(path, tensors; names = nothing, metadata = Dict{String,String}())

Writes `tensors` to `path` as a safetensors file (replacing it atomically),
each under `names[i]` or, without `names`, its own name (`set_name!`), with
the string pairs of `metadata` under "__metadata__".
"""
function save_safetensors(path::AbstractString, tensors::Vector{Tensor};
                          names::Union{Nothing,Vector{<:AbstractString}} = nothing,
                          metadata::AbstractDict = Dict{String,String}())
    names !== nothing && length(names) != length(tensors) &&
        throw(ArgumentError("$(length(names)) names for $(length(tensors)) tensors"))
    name_strings = names === nothing ? String[] : String[String(n) for n in names]
    keys_sorted = sort!(String[String(k) for k in keys(metadata)])
    values_sorted = String[String(metadata[k]) for k in keys_sorted]
    hs = handles(tensors)
    name_ptrs = names === nothing ? Ptr{Ptr{Cchar}}(C_NULL) : cstrings(name_strings)
    key_ptrs = cstrings(keys_sorted)
    value_ptrs = cstrings(values_sorted)
    GC.@preserve tensors name_strings keys_sorted values_sorted check(
        LibAmpx.ampx_safetensors_save(path, hs, name_ptrs, length(hs), key_ptrs, value_ptrs,
                                      length(key_ptrs)))
end

"""
    export_onnx(path, inputs, outputs; opset = 0, ir_version = 0, batch_dim = nothing,
                f16_weights = false, external_data = 0, constants = Pair{String,Tensor}[])

Writes the recorded computation of `outputs` from `inputs` (vectors of
`name => tensor` pairs) to `path` as an ONNX model (`ampx_onnx_export`).
Record the forward with grad mode on and each input requiring grad; export
before backward. `constants` are extra outputs holding those tensors'
values. The file is replaced atomically; on an error none is left.
"""
function export_onnx(path::AbstractString, inputs::Vector{<:Pair}, outputs::Vector{<:Pair};
                     opset::Integer = 0, ir_version::Integer = 0,
                     batch_dim::Union{Nothing,AbstractString} = nothing,
                     f16_weights::Bool = false, external_data::Integer = 0,
                     constants::Vector{<:Pair} = Pair{String,Tensor}[])
    in_names = String[String(first(p)) for p in inputs]
    out_names = String[String(first(p)) for p in outputs]
    const_names = String[String(first(p)) for p in constants]
    ins = Tensor[last(p) for p in inputs]
    outs = Tensor[last(p) for p in outputs]
    consts = Tensor[last(p) for p in constants]
    in_h, out_h, const_h = handles(ins), handles(outs), handles(consts)
    in_p, out_p, const_p = cstrings(in_names), cstrings(out_names), cstrings(const_names)
    batch = batch_dim === nothing ? nothing : String(batch_dim)
    batch !== nothing && occursin('\0', batch) && throw(ArgumentError("batch_dim contains a NUL"))
    GC.@preserve ins outs consts in_names out_names const_names in_h out_h const_h in_p out_p const_p batch begin
        defaults = LibAmpx.ampx_onnx_options_default()
        options = Ref(LibAmpx.ampx_onnx_options(
            defaults.struct_size, Int32(opset), Int32(ir_version),
            batch === nothing ? Ptr{Cchar}(C_NULL) : pointer(batch),
            Int32(f16_weights ? LibAmpx.AMPX_ONNX_WEIGHTS_F16 : LibAmpx.AMPX_ONNX_WEIGHTS_F32),
            Int32(external_data), isempty(const_h) ? Ptr{LibAmpx.ampx_tensor}(C_NULL) : pointer(const_h),
            isempty(const_p) ? Ptr{Ptr{Cchar}}(C_NULL) : pointer(const_p), length(const_h)))
        check(LibAmpx.ampx_onnx_export(path, in_h, in_p, length(in_h), out_h, out_p, length(out_h),
                                       options))
    end
end

"""
    SafetensorsFile(ctx, path)

Opens and validates a safetensors file (mapped into memory; nothing is read
from its data until a load). `length(f)` is its tensor count; `f[i]`
(1-based) and `f[name]` describe one tensor; `keys(f)` lists the names;
`metadata(f)` gives the "__metadata__" pairs; `load_into!` and
`load_tensor` read tensors.
"""
function SafetensorsFile(ctx::Context, path::AbstractString)
    out = Ref{LibAmpx.ampx_safetensors}(C_NULL)
    check(LibAmpx.ampx_safetensors_open(ctx, path, out))
    finalizer(close, SafetensorsFile(out[], ctx))
end

function Base.length(f::SafetensorsFile)
    count = Ref{Csize_t}(0)
    check(LibAmpx.ampx_safetensors_count(f, count))
    Int(count[])
end

"""
One tensor of a safetensors file: its name, dtype (`nothing` for a format
dtype ampx lacks; `dtype_name` is the format's), shape, byte offset from
the file's start and byte count.
"""
struct SafetensorsEntry
    name::String
    dtype::Union{DType,Nothing}
    dtype_name::String
    shape::Tuple{Vararg{Int}}
    offset::UInt64
    nbytes::UInt64
end

function Base.getindex(f::SafetensorsFile, i::Integer)
    1 <= i <= length(f) || throw(BoundsError(f, i))
    entry = Ref(LibAmpx.AMPX_SAFETENSORS_ENTRY_INIT())
    check(LibAmpx.ampx_safetensors_entry_get(f, i - 1, entry))
    e = entry[]
    known = e.dtype in (Integer(F32), Integer(F16), Integer(BF16), Integer(I32), Integer(I64))
    SafetensorsEntry(unsafe_string(e.name), known ? DType(e.dtype) : nothing,
                     unsafe_string(e.dtype_name), Tuple(Int(e.shape[k]) for k in 1:e.ndim),
                     e.offset, e.nbytes)
end

function Base.getindex(f::SafetensorsFile, name::AbstractString)
    index = Ref{Csize_t}(0)
    check(LibAmpx.ampx_safetensors_find(f, name, index))
    f[Int(index[]) + 1]
end

Base.keys(f::SafetensorsFile) = [f[i].name for i in 1:length(f)]

"The file's \"__metadata__\" string pairs."
function metadata(f::SafetensorsFile)
    count = Ref{Csize_t}(0)
    check(LibAmpx.ampx_safetensors_metadata_count(f, count))
    pairs = Dict{String,String}()
    for i in 0:Int(count[])-1
        key, value = Ref{Ptr{Cchar}}(C_NULL), Ref{Ptr{Cchar}}(C_NULL)
        check(LibAmpx.ampx_safetensors_metadata_get(f, i, key, value))
        pairs[unsafe_string(key[])] = unsafe_string(value[])
    end
    pairs
end

"""
    load_into!(f, names, tensors; convert = false)

Loads the file's tensors `names[i]` into the existing `tensors[i]` (shapes
equal; dtypes equal unless `convert`, then converted as `copyto!` does).
Checked before anything is written.
"""
function load_into!(f::SafetensorsFile, names::Vector{<:AbstractString}, tensors::Vector{Tensor};
                    convert::Bool = false)
    length(names) == length(tensors) ||
        throw(ArgumentError("$(length(names)) names for $(length(tensors)) tensors"))
    name_strings = String[String(n) for n in names]
    name_ptrs = cstrings(name_strings)
    hs = handles(tensors)
    flags = convert ? Cuint(LibAmpx.AMPX_SAFETENSORS_CONVERT) : Cuint(0)
    GC.@preserve tensors name_strings check(
        LibAmpx.ampx_safetensors_load_into(f, name_ptrs, hs, length(hs), flags))
end

"""
    load_tensor(f, name; copy = false)

The file's tensor `name` as a new tensor of the file's context; on the
CPU it shares the file's mapping unless `copy`.
"""
function load_tensor(f::SafetensorsFile, name::AbstractString; copy::Bool = false)
    out = Ref{LibAmpx.ampx_tensor}(C_NULL)
    flags = copy ? Cuint(LibAmpx.AMPX_SAFETENSORS_COPY) : Cuint(0)
    check(LibAmpx.ampx_safetensors_load_tensor(f, name, flags, out))
    owned(f.ctx, out[])
end

# ---------------------------------------------------------------------------
# Data-parallel training (EXPERIMENTAL): communicators and gradient all-reduce
# ---------------------------------------------------------------------------

"""
    comm_from_mpi(ctx, mpi_comm::Ref)

A communicator for a CPU context from the host's MPI communicator;
`mpi_comm` holds the `MPI_Comm` handle (ampx reads it through the pointer,
during the call only, and duplicates the communicator). Collective over it.

With MPI.jl (configured, through MPIPreferences, for the system MPI that
libampx_mpi.so was built against -- Open MPI on Debian): `Ref(comm.val)`,
where `comm.val` is the `MPI.API.MPI_Comm` handle of an `MPI.Comm`, e.g.
`Ampx.comm_from_mpi(ctx, Ref(MPI.COMM_WORLD.val))`. Without MPI.jl, from
Open MPI's libmpi itself: `MPI_COMM_WORLD` is the address of the global
`ompi_mpi_comm_world`, so `Ref(cglobal((:ompi_mpi_comm_world, "libmpi"), Cvoid))`
once `MPI_Init` has been called through libmpi (test/data_parallel_mpi.jl
does both).
Throws ERR_NOT_SUPPORTED for a CUDA context (use NCCL) or where the plugin
or libmpi cannot be loaded.
"""
function comm_from_mpi(ctx::Context, mpi_comm::Ref)
    out = Ref{LibAmpx.ampx_comm}(C_NULL)
    check(LibAmpx.ampx_comm_from_mpi(ctx, mpi_comm, out))
    finalizer(close, Comm(out[], ctx))
end

"""
    comm_from_nccl(ctx, nccl_comm::Ptr{Cvoid})

A communicator over the program's own `ncclComm_t`, on the CUDA context's
device. The program keeps owning it and destroys it after closing this
object -- unless ampx aborted it after a timeout (`set_timeout!`).
"""
function comm_from_nccl(ctx::Context, nccl_comm::Ptr{Cvoid})
    out = Ref{LibAmpx.ampx_comm}(C_NULL)
    check(LibAmpx.ampx_comm_from_nccl(ctx, nccl_comm, out))
    finalizer(close, Comm(out[], ctx))
end

"""
    nccl_unique_id()

A new NCCL unique id (`AMPX_NCCL_UNIQUE_ID_BYTES` bytes), made on rank 0:
send it to every other rank by any means, then call `comm_init_nccl` on
every rank. Throws ERR_NOT_SUPPORTED where NCCL cannot be loaded.
"""
function nccl_unique_id()
    id = zeros(UInt8, LibAmpx.AMPX_NCCL_UNIQUE_ID_BYTES)
    check(LibAmpx.ampx_nccl_unique_id(id, length(id)))
    id
end

"""
    comm_init_nccl(ctx, unique_id::Vector{UInt8}, world_size, rank)

A new NCCL communicator of `world_size` ranks, this process being `rank`,
for a CUDA context, from the id rank 0 made (`nccl_unique_id`). Blocks
until every rank has called it; ampx owns the NCCL communicator.
"""
function comm_init_nccl(ctx::Context, unique_id::Vector{UInt8}, world_size::Integer,
                        rank::Integer)
    out = Ref{LibAmpx.ampx_comm}(C_NULL)
    check(LibAmpx.ampx_comm_init_nccl(ctx, unique_id, length(unique_id), world_size, rank, out))
    finalizer(close, Comm(out[], ctx))
end

"This process's rank and the number of ranks: `(rank, size)`."
function rank_and_size(c::Comm)
    rank, size = Ref{Int32}(0), Ref{Int32}(0)
    check(LibAmpx.ampx_comm_rank(c, rank, size))
    (Int(rank[]), Int(size[]))
end

"This process's rank, in [0, world_size)."
rank(c::Comm) = rank_and_size(c)[1]

"The number of ranks."
world_size(c::Comm) = rank_and_size(c)[2]

"""
The longest a host wait on this communicator's NCCL collectives may take
(seconds; default 600) before ampx aborts it and throws ERR_DEVICE. MPI
waits cannot be interrupted: there the launcher ends the job.
"""
set_timeout!(c::Comm, seconds::Real) = check(LibAmpx.ampx_comm_set_timeout(c, seconds))

"""
    DataParallel(comm, optimizer, options = data_parallel_options())

Wraps `optimizer` for data-parallel training over `comm` (collective: every
rank wraps an optimizer with the same parameters). Rank 0's parameters,
masters and moments are broadcast; each parameter's gradient becomes a
view of a bucket (keep it attached: `zero_grad!` zeroes it in place). The
loop is unchanged: `backward!` reduces the buckets while it runs, and the
scaler's found-inf is reduced, so every rank skips the same steps. Close it
at the same point on every rank (it completes pending reductions).
"""
function DataParallel(comm::Comm, optimizer::Optimizer,
                      options::DataParallelOptions = data_parallel_options())
    out = Ref{LibAmpx.ampx_data_parallel}(C_NULL)
    check(LibAmpx.ampx_data_parallel_create(comm, optimizer, Ref(options), out))
    finalizer(close, DataParallel(out[], comm, optimizer, true))
end

"""
Gradient accumulation (DDP's no_sync): with `sync = false` backward passes
only accumulate; turn it back on before the last micro-batch's backward.
Unscaling, clipping or stepping while it is off throws ERR_ORDER.
"""
function set_sync!(dp::DataParallel, sync::Bool)
    check(LibAmpx.ampx_data_parallel_set_sync(dp, sync))
    dp.sync = sync
    nothing
end

"""
    set_fp8_recipe!(dp, recipe)

Makes `dp` MAX-reduce `recipe`'s step amaxes over the ranks before its
updates, so every rank's FP8 scales stay bitwise equal (`nothing`
detaches). Every rank attaches a recipe with the same slots.
"""
set_fp8_recipe!(dp::DataParallel, recipe::Union{Nothing,Fp8Recipe}) =
    check(LibAmpx.ampx_data_parallel_set_fp8_recipe(dp, optional(recipe)))

"Runs `f()` with synchronisation off (restoring the former setting): backward passes in it only accumulate."
function no_sync(f, dp::DataParallel)
    previous = dp.sync
    set_sync!(dp, false)
    try
        f()
    finally
        isclosed(dp) || set_sync!(dp, previous)
    end
end

"Completes the reduction now (engines with their own backward pass, with `grad_ready!`). Collective."
reduce!(dp::DataParallel) = check(LibAmpx.ampx_data_parallel_reduce(dp))

"Ranks, buckets and reduction counts (`DataParallelStats`; no sync)."
function stats(dp::DataParallel)
    out = Ref(LibAmpx.AMPX_DATA_PARALLEL_STATS_INIT())
    check(LibAmpx.ampx_data_parallel_get_stats(dp, out))
    out[]
end

# ---------------------------------------------------------------------------
# The precision doctor (EXPERIMENTAL)
# ---------------------------------------------------------------------------

"The number of histogram bins of `param_stats`."
const DOCTOR_BINS = LibAmpx.AMPX_DOCTOR_BINS

"""
    binade_bin(e)

The histogram bin (0-based, as C's) of 2^e <= |u| < 2^(e+1), for e in
[-64, 15] (`AMPX_DOCTOR_BIN_BINADE`). Bin `LibAmpx.AMPX_DOCTOR_BIN_ZERO`
counts zeros, `..._TINY` |u| < 2^-64, `..._HUGE` 2^16 <= |u| < inf,
`..._NONFINITE` inf and NaN.
"""
function binade_bin(e::Integer)
    -64 <= e <= 15 || throw(ArgumentError("exponent $e has no bin of its own; binades -64..15 do"))
    LibAmpx.AMPX_DOCTOR_BIN_BINADE(e)
end

"""
    Doctor(ctx, optimizer, options = doctor_options())

Attaches the precision doctor to `optimizer` (and the scaler it is used
with): every `interval`-th step it takes gradient statistics on the device
(fp16 underflow and overflow, headroom, lost updates); `examine` reads them
and the history is diagnosed into `findings`; `write_report` writes an HTML
report.
"""
function Doctor(ctx::Context, optimizer::Optimizer, options::DoctorOptions = doctor_options())
    out = Ref{LibAmpx.ampx_doctor}(C_NULL)
    check(LibAmpx.ampx_doctor_create(ctx, optimizer, Ref(options), out))
    finalizer(close, Doctor(out[], optimizer))
end

"Changes the sampling interval from the next step (0: off)."
set_interval!(d::Doctor, interval::Integer) = check(LibAmpx.ampx_doctor_set_interval(d, interval))

"Reads the doctor's device state (synchronizes), diagnoses it and returns the `DoctorOverview`."
function examine(d::Doctor)
    out = Ref(LibAmpx.AMPX_DOCTOR_OVERVIEW_INIT())
    check(LibAmpx.ampx_doctor_examine(d, out))
    out[]
end

# -1 (fp32 parameters: no lost updates to count) becomes nothing.
fraction_or_nothing(x::Float64) = x < 0 ? nothing : x

"""
    param_stats(d, index)

Parameter `index`'s (0-based, in the optimizer's order) statistics of the
latest sampled step, as a named tuple (the fields of
`ampx_doctor_param_stats`, with `name` a String, dtypes as `DType`,
`histogram` a Vector of the 84 bin counts, `headroom_unbounded` a Bool and
the lost-update fractions `nothing` for fp32 parameters). Throws ERR_ORDER
before any step was sampled.
"""
function param_stats(d::Doctor, index::Integer)
    out = Ref(sized(LibAmpx.ampx_doctor_param_stats))
    check(LibAmpx.ampx_doctor_get_param_stats(d, index, out))
    s = out[]
    (index = Int(s.index), name = unsafe_string(s.name), param_dtype = DType(s.param_dtype),
     grad_dtype = DType(s.grad_dtype), elements = s.elements, histogram = collect(s.histogram),
     amax = s.amax, amax_scaled = s.amax_scaled, grad_norm = s.grad_norm,
     fp16_zero_unscaled = s.fp16_zero_unscaled,
     fp16_subnormal_unscaled = s.fp16_subnormal_unscaled,
     fp16_zero_scaled = s.fp16_zero_scaled, fp16_subnormal_scaled = s.fp16_subnormal_scaled,
     fp16_overflow_scaled = s.fp16_overflow_scaled, headroom = Int(s.headroom),
     headroom_unbounded = s.headroom_unbounded != 0,
     lost_update_fraction = fraction_or_nothing(s.lost_update_fraction),
     lost_without_master_fraction = fraction_or_nothing(s.lost_without_master_fraction))
end

"Every parameter's statistics of the latest sampled step ([] before any)."
function params(d::Doctor)
    overview = examine(d)
    overview.sample_step == 0 && return []
    [param_stats(d, i) for i in 0:overview.param_count-1]
end

"The recorded steps (`DoctorSample`s), oldest first."
function history(d::Doctor)
    count = Ref{Int32}(0)
    check(LibAmpx.ampx_doctor_get_history(d, C_NULL, 0, count))
    count[] == 0 && return DoctorSample[]
    samples = Vector{DoctorSample}(undef, count[])
    check(LibAmpx.ampx_doctor_get_history(d, samples, length(samples), count))
    samples[1:min(Int(count[]), length(samples))]
end

"""
    finding_code_name(code), cause_name(cause)

The static name of a finding code ("scale_oscillation", ...) or cause
("learning_rate", ...; "" for none); `nothing` for an unknown value.
"""
function finding_code_name(code::Integer)
    p = LibAmpx.ampx_doctor_finding_code_name(code)
    p == C_NULL ? nothing : unsafe_string(p)
end

function cause_name(cause::Integer)
    p = LibAmpx.ampx_doctor_cause_name(cause)
    p == C_NULL ? nothing : unsafe_string(p)
end

"""
    findings(d)

The diagnosed findings, most important first, as named tuples `(code,
cause, param, param_name, first_step, last_step, message)`: code and cause
by name (`cause` nothing when none), `param` the 0-based index of the
parameter named, or nothing.
"""
function findings(d::Doctor)
    overview = examine(d)
    map(0:overview.finding_count-1) do index
        out = Ref(sized(LibAmpx.ampx_doctor_finding))
        check(LibAmpx.ampx_doctor_get_finding(d, index, out))
        f = out[]
        code = finding_code_name(f.code)
        cause = cause_name(f.cause)
        (code = code === nothing ? string(f.code) : code,
         cause = cause === nothing ? string(f.cause) : (isempty(cause) ? nothing : cause),
         param = f.param < 0 ? nothing : Int(f.param),
         param_name = f.param < 0 ? nothing : unsafe_string(f.param_name),
         first_step = f.first_step, last_step = f.last_step, message = unsafe_string(f.message))
    end
end

"A one-line summary for logs."
function summary(d::Doctor)
    text = Ref{Ptr{Cchar}}(C_NULL)
    check(LibAmpx.ampx_doctor_summary(d, text))
    unsafe_string(text[])
end

"Writes the report (one self-contained HTML file) to `path`, atomically."
write_report(d::Doctor, path::AbstractString) = check(LibAmpx.ampx_doctor_write_report(d, path))

# ---------------------------------------------------------------------------
# FP8 training (section 18, EXPERIMENTAL)
# ---------------------------------------------------------------------------

"The default of `set_fp8!`'s `min_gemm_size`: 2^33."
const FP8_DEFAULT_MIN_GEMM_SIZE = Int64(LibAmpx.AMPX_FP8_DEFAULT_MIN_GEMM_SIZE)

"""
    Fp8Recipe(ctx; scaling = FP8_DELAYED, format = FP8_HYBRID, amax_history_len = 1024,
              amax_compute_algo = AMAX_MAX, margin = 0, power_of_two_scales = false)

An FP8 scaling recipe on `ctx` with no slots (Transformer Engine's delayed
or current scaling); a keyword left out keeps the library's default. A bad
option (history length < 1, margin outside 0 .. 127) throws `AmpxError`
(`ERR_INVALID_ARGUMENT`) naming it. `close` releases it; autocast policies
and data-parallel wrappers given it keep their own reference.
"""
function Fp8Recipe(ctx::Context; kw...)
    options = fp8_recipe_options(; kw...)
    out = Ref{LibAmpx.ampx_fp8_recipe}(C_NULL)
    check(LibAmpx.ampx_fp8_recipe_create(ctx, Ref(options), out))
    finalizer(close, Fp8Recipe(out[], ctx, options.amax_history_len))
end

"""
    add_tensor!(recipe, role = FP8_FORWARD; name = nothing)

Adds a slot of `role` (scale 1, amax 0, empty history) named `name` (unique
in the recipe) and returns its index.
"""
function add_tensor!(r::Fp8Recipe, role::Fp8Role = FP8_FORWARD;
                     name::Union{Nothing,AbstractString} = nothing)
    slot = Ref{Int64}(0)
    check(LibAmpx.ampx_fp8_recipe_add_tensor(r, role, name === nothing ? C_NULL : name, slot))
    slot[]
end

"The number of slots (autocast's included)."
function slot_count(r::Fp8Recipe)
    count = Ref{Int64}(0)
    check(LibAmpx.ampx_fp8_recipe_slot_count(r, count))
    count[]
end

"""
    quantize!(recipe, slot, src, dst; transposed = nothing)

Rounds `src` (F32, F16 or BF16) times `slot`'s scale into `dst` and/or
`transposed` (src read as [rows, cols], written [cols, rows]; `dst` may be
`nothing` when `transposed` is not), saturating, and folds src's amax into
the slot's step amax. The outputs are of the slot's format.
"""
function quantize!(r::Fp8Recipe, slot::Integer, src::Tensor, dst::Union{Nothing,Tensor};
                   transposed::Union{Nothing,Tensor} = nothing)
    check(LibAmpx.ampx_fp8_quantize(r, slot, src, optional(dst), optional(transposed)))
    nothing
end

"`quantize!` into a new tensor of the slot's format and src's shape (reading the format synchronizes)."
function quantize(r::Fp8Recipe, slot::Integer, src::Tensor)
    dst = Tensor(undef, r.ctx, slot_info(r, slot; history = false).dtype, Tuple(size(src)))
    quantize!(r, slot, src, dst)
    dst
end

"Ends the step for every slot: amaxes join the histories, (delayed scaling) scales are recomputed."
update!(r::Fp8Recipe) = check(LibAmpx.ampx_fp8_recipe_update(r))

"`slot`'s scale (or inverse scale) as a one-element F32 view of the recipe's memory: it follows every update."
function scale_tensor(r::Fp8Recipe, slot::Integer; inverse::Bool = false)
    out = Ref{LibAmpx.ampx_tensor}(C_NULL)
    check(LibAmpx.ampx_fp8_recipe_scale_tensor(r, slot, inverse, out))
    owned(r.ctx, out[])
end

"""
    slot_info(recipe, slot; history = true)

`slot`'s state: `(name, role, dtype, scale, scale_inv, amax, history_len,
history)`, the amax history oldest first (never filled: 0). Synchronizes.
"""
function slot_info(r::Fp8Recipe, slot::Integer; history::Bool = true)
    out = Ref(LibAmpx.AMPX_FP8_SLOT_INFO_INIT())
    values = Vector{Float32}(undef, history ? r.history_len : 0)
    check(LibAmpx.ampx_fp8_recipe_slot_get(r, slot, out, history ? values : C_NULL,
                                           history ? r.history_len : 0))
    s = out[]
    (name = s.name == C_NULL ? "" : unsafe_string(s.name), role = Fp8Role(s.role),
     dtype = DType(s.dtype), scale = s.scale, scale_inv = s.scale_inv, amax = s.amax,
     history_len = Int(s.history_len), history = values)
end

"""
    inspect(recipe, slot, tensor)

What FP8 at `slot`'s current scale would do to `tensor` (the precision
doctor's `ampx_doctor_fp8_inspect`): of its non-zero finite elements,
`(count, flushed_e4m3, saturated_e4m3, flushed_e5m2, saturated_e5m2, scale,
dtype)`. Synchronizes.
"""
function inspect(r::Fp8Recipe, slot::Integer, t::Tensor)
    out = Ref(LibAmpx.AMPX_FP8_TENSOR_REPORT_INIT())
    check(LibAmpx.ampx_doctor_fp8_inspect(r, slot, t, out))
    x = out[]
    (count = x.count, flushed_e4m3 = x.flushed_e4m3, saturated_e4m3 = x.saturated_e4m3,
     flushed_e5m2 = x.flushed_e5m2, saturated_e5m2 = x.saturated_e5m2, scale = x.scale,
     dtype = DType(x.dtype))
end

"A table of the recipe's slots: name, format, scale, step amax, history max and length. Synchronizes."
function summary(r::Fp8Recipe)
    text = Ref{Ptr{Cchar}}(C_NULL)
    check(LibAmpx.ampx_doctor_fp8_summary(r, text))
    unsafe_string(text[])
end

end # module
