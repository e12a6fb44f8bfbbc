"""
    Ampx

Julia binding of ampx, an embeddable mixed-precision training library
(autocast, dynamic loss scaling after torch.amp's GradScaler, SGD/Adam/AdamW
with fp32 master weights), over the C API of `include/ampx/ampx.h`, which is
the reference documentation. This module states only what differs in Julia.

The library is `libampx` on the loader's path, or the file named by the
environment variable `AMPX_LIB` when the module is loaded.

Objects (`Context`, `Tensor`, `Optimizer`, `Scaler`, `Autocast`) own one
reference to a C object. `close(x)` releases it at once; closing twice does
nothing. A finalizer releases what a program forgets to close (a safety
net: the C library allows release from any thread, in any order).

Tensors made by ops while a scope is open (`push_scope!`) are borrowed from
it, as in C: `pop_scope!` releases them and marks them closed. `retain` one
to keep it.

Data crosses as flat vectors in row-major order with an explicit shape
(ampx's layout), not as column-major Julia arrays.

A failed call throws `AmpxError` with the status and the message of
`ampx_last_error()`, read right after the call on the same thread: no task
switch can happen between the two `ccall`s.
"""
module Ampx

export Context, Tensor, Optimizer, Scaler, Autocast, AmpxError, Status, DType, DeviceType,
       OpClass, Reduction, Activation, OptimizerState

"Path or name of the shared library."
const libampx = get(ENV, "AMPX_LIB", "libampx")

# ---------------------------------------------------------------------------
# Enums (numbers pinned by the C API; 32-bit as C enums are)
# ---------------------------------------------------------------------------

"Status codes (`ampx_status`)."
@enum Status::Int32 begin
    OK = 0
    ERR_INVALID_ARGUMENT = 1
    ERR_SHAPE = 2
    ERR_DTYPE = 3
    ERR_DEVICE = 4
    ERR_OUT_OF_MEMORY = 5
    ERR_NO_DEVICE = 6
    ERR_NOT_SUPPORTED = 7
    ERR_ORDER = 8
    ERR_STALE_HANDLE = 9
    ERR_IO = 10
    ERR_CORRUPT = 11
    ERR_INTERNAL = 12
end

"Element types (`ampx_dtype`)."
@enum DType::Int32 F32 = 1 F16 = 2 BF16 = 3 I32 = 4 I64 = 5

"Device kinds (`ampx_device_type`)."
@enum DeviceType::Int32 DEVICE_CPU = 1 DEVICE_CUDA = 2

"Precision classes of ops under autocast (`ampx_op_class`)."
@enum OpClass::Int32 OP_LOWER_PRECISION = 1 OP_FP32 = 2 OP_PROMOTE = 3 OP_KEEP = 4

"Loss reductions (`ampx_reduction`)."
@enum Reduction::Int32 REDUCTION_MEAN = 1 REDUCTION_SUM = 2 REDUCTION_NONE = 3

"Activations fused into `linear` (`ampx_activation`)."
@enum Activation::Int32 ACTIVATION_NONE = 0 ACTIVATION_RELU = 1 ACTIVATION_GELU = 2

"Kinds of per-parameter optimizer state (`ampx_optimizer_state`)."
@enum OptimizerState::Int32 STATE_MASTER = 1 STATE_MOMENTUM = 2 STATE_EXP_AVG_SQ = 3 STATE_MAX_EXP_AVG_SQ = 4

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
status_string(s::Status) = unsafe_string(ccall((:ampx_status_string, libampx), Cstring, (Status,), s))

# Throws the AmpxError of a failed call. Nothing that can switch tasks runs
# between the C call and this read of the thread-local message.
@inline function check(status::Cint)
    status == 0 && return nothing
    message = ccall((:ampx_last_error, libampx), Cstring, ())
    throw(AmpxError(Status(status), unsafe_string(message)))
end

"Status of the most recent failed call on the calling OS thread (`OK` if none)."
last_status() = ccall((:ampx_last_status, libampx), Status, ())

"Version of the loaded library (major * 10000 + minor * 100 + patch)."
version() = ccall((:ampx_version, libampx), UInt32, ())

"Version of the loaded library as text, e.g. `\"0.1.0\"`."
version_string() = unsafe_string(ccall((:ampx_version_string, libampx), Cstring, ()))

"Whether the library was built with its CUDA backend."
has_cuda() = ccall((:ampx_has_cuda, libampx), Cint, ()) != 0

"Number of CUDA devices ampx can use."
cuda_device_count() = Int(ccall((:ampx_cuda_device_count, libampx), Int32, ()))

"Size of one element of `dtype` in bytes."
dtype_size(dtype::DType) = Int(ccall((:ampx_dtype_size, libampx), Csize_t, (DType,), dtype))

"Name of a dtype: \"f32\", \"f16\", \"bf16\", \"i32\" or \"i64\"."
dtype_name(dtype::DType) = unsafe_string(ccall((:ampx_dtype_name, libampx), Cstring, (DType,), dtype))

# ---------------------------------------------------------------------------
# Option and result structs (C layout; build them with the keyword
# functions below, which start from the library's defaults)
# ---------------------------------------------------------------------------

"Allocator hooks (`ampx_allocator`): C function pointers, e.g. from `@cfunction`."
struct Allocator
    struct_size::Csize_t
    alloc::Ptr{Cvoid}
    free::Ptr{Cvoid}
    user_data::Ptr{Cvoid}
end

"`ampx_context_options`; see `context_options`."
struct ContextOptions
    struct_size::Csize_t
    device_type::DeviceType
    device_index::Int32
    num_threads::Int32
    seed::UInt64
    allocator::Allocator
    cuda_stream::Ptr{Cvoid}
end

"`ampx_memory_stats`."
struct MemoryStats
    struct_size::Csize_t
    current_bytes::UInt64
    peak_bytes::UInt64
    allocation_count::UInt64
    reserved_bytes::UInt64
end

"`ampx_sgd_options`; see `sgd_options`."
struct SGDOptions
    struct_size::Csize_t
    lr::Float64
    momentum::Float64
    dampening::Float64
    weight_decay::Float64
    nesterov::Int32
    maximize::Int32
end

"`ampx_adam_options`; see `adam_options` and `adamw_options`."
struct AdamOptions
    struct_size::Csize_t
    lr::Float64
    beta1::Float64
    beta2::Float64
    eps::Float64
    weight_decay::Float64
    amsgrad::Int32
    maximize::Int32
    decoupled_weight_decay::Int32
end

"`ampx_scaler_options`; see `scaler_options`."
struct ScalerOptions
    struct_size::Csize_t
    init_scale::Float64
    growth_factor::Float64
    backoff_factor::Float64
    growth_interval::Int32
    enabled::Int32
    hysteresis::Int32
    min_scale::Float64
    max_scale::Float64
    consecutive_hysteresis::Int32
    clamp_to_max_scale::Int32
end

"`ampx_scaler_counters`."
struct ScalerCounters
    struct_size::Csize_t
    updates::Int64
    skipped::Int64
    backoffs::Int64
    growths::Int64
end

"`ampx_scaler_state`: the scaler's persistent state."
struct ScalerState
    struct_size::Csize_t
    scale::Float64
    growth_factor::Float64
    backoff_factor::Float64
    growth_interval::Int32
    growth_tracker::Int32
    hysteresis::Int32
    hysteresis_left::Int32
    min_scale::Float64
    max_scale::Float64
    counters::ScalerCounters
    consecutive_hysteresis::Int32
    clamp_to_max_scale::Int32
end

"`ampx_autocast_options`; see `autocast_options`."
struct AutocastOptions
    struct_size::Csize_t
    dtype::DType
    enabled::Int32
    cache::Int32
end

"`ampx_nonfinite_grad` as the C API fills it."
struct CNonfiniteGrad
    param::Ptr{Cvoid}
    name::Ptr{UInt8}
    nan_count::Int64
    inf_count::Int64
end

# A copy of `x` with the fields named in `kw` replaced (converted to the
# field types; Bool becomes 0/1 for the C int flags).
function with(x::T; kw...) where {T}
    T((haskey(kw, f) ? convert(fieldtype(T, f), kw[f]) : getfield(x, f) for f in fieldnames(T))...)
end

# A zero-filled T (a C struct) with its struct_size set.
function sized(::Type{T}) where {T}
    bytes = Base.zeros(UInt8, sizeof(T))
    with(GC.@preserve(bytes, unsafe_load(Ptr{T}(pointer(bytes)))); struct_size = sizeof(T))
end

"Context options: the library's defaults with the given fields replaced."
context_options(; kw...) =
    with(ccall((:ampx_context_options_default, libampx), ContextOptions, ()); kw...)

"SGD options: the defaults (lr 1e-3) with the given fields replaced."
sgd_options(; kw...) = with(ccall((:ampx_sgd_options_default, libampx), SGDOptions, ()); kw...)

"Adam options: the defaults with the given fields replaced."
adam_options(; kw...) = with(ccall((:ampx_adam_options_default, libampx), AdamOptions, ()); kw...)

"AdamW options (decoupled weight decay 1e-2) with the given fields replaced."
adamw_options(; kw...) = with(ccall((:ampx_adamw_options_default, libampx), AdamOptions, ()); kw...)

"Scaler options: the defaults (init_scale 65536, growth_interval 2000) with the given fields replaced."
scaler_options(; kw...) = with(ccall((:ampx_scaler_options_default, libampx), ScalerOptions, ()); kw...)

"Autocast options: the defaults (F16, enabled, cached) with the given fields replaced."
autocast_options(; kw...) =
    with(ccall((:ampx_autocast_options_default, libampx), AutocastOptions, ()); kw...)

# ---------------------------------------------------------------------------
# Objects
# ---------------------------------------------------------------------------

"""
    Context(options = nothing)

A device (the CPU by default), an allocator and memory statistics; every
tensor belongs to one. Use from one task at a time.
"""
mutable struct Context
    handle::Ptr{Cvoid}
    scopes::Vector{Vector{Any}}  # per open scope, the tensors borrowed from it
    function Context(options::Union{Nothing,ContextOptions} = nothing)
        out = Ref{Ptr{Cvoid}}(C_NULL)
        opts = options === nothing ? Ptr{ContextOptions}(C_NULL) : Ref(options)
        check(ccall((:ampx_context_create, libampx), Cint, (Ptr{ContextOptions}, Ptr{Ptr{Cvoid}}),
                    opts, out))
        finalizer(close, new(out[], Vector{Any}[]))
    end
end

"""
A dense, contiguous, row-major array on its context's device.
"""
mutable struct Tensor
    handle::Ptr{Cvoid}
    ctx::Context
    scoped::Bool  # borrowed from a scope of ctx: pop_scope! ends it

    function Tensor(ctx::Context, handle::Ptr{Cvoid}, scoped::Bool)
        t = new(handle, ctx, scoped)
        if scoped
            push!(ctx.scopes[end], t)
        else
            finalizer(close, t)
        end
        t
    end
end

"An SGD, Adam or AdamW optimizer with fp32 master weights."
mutable struct Optimizer
    handle::Ptr{Cvoid}
    ctx::Context
    params::Vector{Tensor}  # in parameter order, to name find_nonfinite_grads' results
end

"A dynamic loss scaler."
mutable struct Scaler
    handle::Ptr{Cvoid}
    ctx::Context
end

"An autocast precision policy."
mutable struct Autocast
    handle::Ptr{Cvoid}
end

const Handle = Union{Context,Tensor,Optimizer,Scaler,Autocast}

# Passing an object to a Ptr{Cvoid} argument passes its handle and keeps
# the object rooted for the call.
Base.unsafe_convert(::Type{Ptr{Cvoid}}, x::Handle) = x.handle

"Closes (releases) the object; closing again does nothing."
function Base.close(ctx::Context)
    ccall((:ampx_context_release, libampx), Cvoid, (Ptr{Cvoid},), ctx.handle)
    ctx.handle = C_NULL
    nothing
end

function Base.close(t::Tensor)
    t.scoped || ccall((:ampx_tensor_release, libampx), Cvoid, (Ptr{Cvoid},), t.handle)
    t.handle = C_NULL
    nothing
end

function Base.close(o::Optimizer)
    ccall((:ampx_optimizer_release, libampx), Cvoid, (Ptr{Cvoid},), o.handle)
    o.handle = C_NULL
    empty!(o.params)
    nothing
end

function Base.close(s::Scaler)
    ccall((:ampx_scaler_release, libampx), Cvoid, (Ptr{Cvoid},), s.handle)
    s.handle = C_NULL
    nothing
end

function Base.close(a::Autocast)
    ccall((:ampx_autocast_release, libampx), Cvoid, (Ptr{Cvoid},), a.handle)
    a.handle = C_NULL
    nothing
end

optional(x) = x === nothing ? C_NULL : x

owned(ctx::Context, handle::Ptr{Cvoid}) = Tensor(ctx, handle, false)
result(ctx::Context, handle::Ptr{Cvoid}) = Tensor(ctx, handle, !isempty(ctx.scopes))

# ---------------------------------------------------------------------------
# Contexts
# ---------------------------------------------------------------------------

"The device kind and index of a context."
function device(ctx::Context)
    kind, index = Ref{DeviceType}(DEVICE_CPU), Ref{Int32}(0)
    check(ccall((:ampx_context_device, libampx), Cint, (Ptr{Cvoid}, Ptr{DeviceType}, Ptr{Int32}),
                ctx, kind, index))
    (kind[], Int(index[]))
end

"Waits for all work enqueued on the context's device."
synchronize(ctx::Context) = check(ccall((:ampx_context_synchronize, libampx), Cint, (Ptr{Cvoid},), ctx))

"The context's memory statistics (`MemoryStats`)."
function memory_stats(ctx::Context)
    stats = Ref(sized(MemoryStats))
    check(ccall((:ampx_memory_stats_get, libampx), Cint, (Ptr{Cvoid}, Ptr{MemoryStats}), ctx, stats))
    stats[]
end

"Sets the peak memory statistic to the current one."
reset_peak_memory!(ctx::Context) =
    check(ccall((:ampx_memory_reset_peak, libampx), Cint, (Ptr{Cvoid},), ctx))

"Lets f32 products and convolutions run in TF32 on CUDA (`ampx_context_set_tf32`); returns the previous setting."
function set_tf32!(ctx::Context, allowed::Bool)
    previous = Ref{Int32}(0)
    check(ccall((:ampx_context_set_tf32, libampx), Cint, (Ptr{Cvoid}, Int32, Ptr{Int32}),
                ctx, allowed, previous))
    previous[] != 0
end

"Turns recording for backward on or off; returns the previous setting."
function set_grad_enabled!(ctx::Context, enabled::Bool)
    previous = Ref{Int32}(0)
    check(ccall((:ampx_set_grad_enabled, libampx), Cint, (Ptr{Cvoid}, Int32, Ptr{Int32}),
                ctx, enabled, previous))
    previous[] != 0
end

"Opens a scope: op outputs are borrowed from it until `pop_scope!`."
function push_scope!(ctx::Context)
    check(ccall((:ampx_scope_push, libampx), Cint, (Ptr{Cvoid},), ctx))
    push!(ctx.scopes, Any[])
    ctx
end

"Closes the innermost scope, releasing (and closing) the tensors ops made in it."
function pop_scope!(ctx::Context)
    check(ccall((:ampx_scope_pop, libampx), Cint, (Ptr{Cvoid},), ctx))
    for t in pop!(ctx.scopes)
        t.handle = C_NULL
    end
    ctx
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

const ELEMENT_TYPES = Dict{DataType,DType}(Float32 => F32, Int32 => I32, Int64 => I64)

"""
    Tensor(undef, ctx, dtype, shape)

A tensor with uninitialised contents of `dtype` and row-major `shape`.
"""
Tensor(::UndefInitializer, ctx::Context, dtype::DType, shape::Dims) = create(:empty, ctx, dtype, shape)

"A tensor of zeros of `dtype` and row-major `shape`."
Base.zeros(ctx::Context, dtype::DType, shape::Dims) = create(:zeros, ctx, dtype, shape)

function create(kind::Symbol, ctx::Context, dtype::DType, shape::Dims)
    dims = Int64[shape...]
    out = Ref{Ptr{Cvoid}}(C_NULL)
    status = kind === :empty ?
        ccall((:ampx_tensor_empty, libampx), Cint,
              (Ptr{Cvoid}, DType, Int32, Ptr{Int64}, Ptr{Ptr{Cvoid}}), ctx, dtype, length(dims), dims, out) :
        ccall((:ampx_tensor_zeros, libampx), Cint,
              (Ptr{Cvoid}, DType, Int32, Ptr{Int64}, Ptr{Ptr{Cvoid}}), ctx, dtype, length(dims), dims, out)
    check(status)
    owned(ctx, out[])
end

"""
    Tensor(ctx, data::Vector, shape; dtype)

A tensor holding a copy of `data`, the elements in row-major order. The
dtype follows the element type (Float32, Int32, Int64); give `dtype` for raw
F16/BF16 bits in a `Vector{UInt16}`.
"""
function Tensor(ctx::Context, data::Vector{T}, shape::Dims;
                dtype::DType = ELEMENT_TYPES[T]) where {T}
    dims = Int64[shape...]
    out = Ref{Ptr{Cvoid}}(C_NULL)
    check(ccall((:ampx_tensor_from_host, libampx), Cint,
                (Ptr{Cvoid}, DType, Int32, Ptr{Int64}, Ptr{Cvoid}, Csize_t, Ptr{Ptr{Cvoid}}),
                ctx, dtype, length(dims), dims, data, sizeof(data), out))
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
    out = Ref{Ptr{Cvoid}}(C_NULL)
    check(ccall((:ampx_tensor_wrap, libampx), Cint,
                (Ptr{Cvoid}, DType, Int32, Ptr{Int64}, Ptr{Cvoid}, Csize_t, Ptr{Cvoid}, Ptr{Cvoid},
                 Ptr{Ptr{Cvoid}}),
                ctx, dtype, length(dims), dims, data, bytes, deleter, user_data, out))
    owned(ctx, out[])
end

"A new owned reference to `t` (e.g. to keep a scope's tensor)."
function retain(t::Tensor)
    check(ccall((:ampx_tensor_retain, libampx), Cint, (Ptr{Cvoid},), t))
    owned(t.ctx, t.handle)
end

"Copies the contents into `dst` (exactly `nbytes(t)` bytes)."
to_host!(dst::Vector, t::Tensor) =
    check(ccall((:ampx_tensor_to_host, libampx), Cint, (Ptr{Cvoid}, Ptr{Cvoid}, Csize_t),
                t, dst, sizeof(dst)))

"The elements as a flat `Vector{T}` in row-major order (T matching the dtype)."
function to_host(::Type{T}, t::Tensor) where {T}
    dst = Vector{T}(undef, nbytes(t) ÷ sizeof(T))
    to_host!(dst, t)
    dst
end

"Overwrites the contents with `src` (exactly `nbytes(t)` bytes)."
copy_from_host!(t::Tensor, src::Vector) =
    check(ccall((:ampx_tensor_copy_from_host, libampx), Cint, (Ptr{Cvoid}, Ptr{Cvoid}, Csize_t),
                t, src, sizeof(src)))

"`dst .= src`, converting the element type (same element count)."
Base.copyto!(dst::Tensor, src::Tensor) =
    (check(ccall((:ampx_tensor_copy, libampx), Cint, (Ptr{Cvoid}, Ptr{Cvoid}), dst, src)); dst)

"A new tensor holding `t` converted to `dtype`."
function cast(t::Tensor, dtype::DType)
    out = Ref{Ptr{Cvoid}}(C_NULL)
    check(ccall((:ampx_tensor_cast, libampx), Cint, (Ptr{Cvoid}, DType, Ptr{Ptr{Cvoid}}), t, dtype, out))
    owned(t.ctx, out[])
end

"Sets every element to `value`."
Base.fill!(t::Tensor, value::Real) =
    (check(ccall((:ampx_tensor_fill, libampx), Cint, (Ptr{Cvoid}, Cdouble), t, value)); t)

"Names the tensor for diagnostics (\"\" clears the name)."
set_name!(t::Tensor, name::AbstractString) =
    check(ccall((:ampx_tensor_set_name, libampx), Cint, (Ptr{Cvoid}, Cstring), t, name))

"The tensor's name (\"\" if none)."
function name(t::Tensor)
    out = Ref{Ptr{UInt8}}(C_NULL)
    check(ccall((:ampx_tensor_name, libampx), Cint, (Ptr{Cvoid}, Ptr{Ptr{UInt8}}), t, out))
    unsafe_string(out[])
end

"The element type."
function dtype(t::Tensor)
    out = Ref{DType}(F32)
    check(ccall((:ampx_tensor_dtype, libampx), Cint, (Ptr{Cvoid}, Ptr{DType}), t, out))
    out[]
end

Base.ndims(t::Tensor) = (out = Ref{Int32}(0);
    check(ccall((:ampx_tensor_ndim, libampx), Cint, (Ptr{Cvoid}, Ptr{Int32}), t, out)); Int(out[]))

"The row-major extents."
function Base.size(t::Tensor)
    dims = Vector{Int64}(undef, ndims(t))
    check(ccall((:ampx_tensor_shape, libampx), Cint, (Ptr{Cvoid}, Ptr{Int64}, Int32),
                t, dims, length(dims)))
    Tuple(Int.(dims))
end

Base.length(t::Tensor) = (out = Ref{Int64}(0);
    check(ccall((:ampx_tensor_numel, libampx), Cint, (Ptr{Cvoid}, Ptr{Int64}), t, out)); Int(out[]))

"Size of the contents in bytes."
nbytes(t::Tensor) = (out = Ref{Csize_t}(0);
    check(ccall((:ampx_tensor_nbytes, libampx), Cint, (Ptr{Cvoid}, Ptr{Csize_t}), t, out)); Int(out[]))

"Address of the first element on the device, valid while `t` lives."
function data_pointer(t::Tensor)
    out = Ref{Ptr{Cvoid}}(C_NULL)
    check(ccall((:ampx_tensor_data, libampx), Cint, (Ptr{Cvoid}, Ptr{Ptr{Cvoid}}), t, out))
    out[]
end

"""
    context_handle(t)

The raw `ampx_context` of `t` (borrowed), for passing to other C code. From
Julia use `t.ctx`.
"""
function context_handle(t::Tensor)
    out = Ref{Ptr{Cvoid}}(C_NULL)
    check(ccall((:ampx_tensor_context, libampx), Cint, (Ptr{Cvoid}, Ptr{Ptr{Cvoid}}), t, out))
    out[]
end

"Attaches `grad` as `t`'s gradient (`nothing` detaches it)."
set_grad!(t::Tensor, grad::Union{Nothing,Tensor}) =
    check(ccall((:ampx_tensor_set_grad, libampx), Cint, (Ptr{Cvoid}, Ptr{Cvoid}), t, optional(grad)))

"A new owned reference to `t`'s gradient, or `nothing`."
function grad(t::Tensor)
    out = Ref{Ptr{Cvoid}}(C_NULL)
    check(ccall((:ampx_tensor_grad, libampx), Cint, (Ptr{Cvoid}, Ptr{Ptr{Cvoid}}), t, out))
    out[] == C_NULL && return nothing
    check(ccall((:ampx_tensor_retain, libampx), Cint, (Ptr{Cvoid},), out[]))
    owned(t.ctx, out[])
end

"Exports `t` as a `DLManagedTensor*` sharing its memory; the consumer calls its deleter once."
function to_dlpack(t::Tensor)
    out = Ref{Ptr{Cvoid}}(C_NULL)
    check(ccall((:ampx_tensor_to_dlpack, libampx), Cint, (Ptr{Cvoid}, Ptr{Ptr{Cvoid}}), t, out))
    out[]
end

"Imports a `DLManagedTensor*` without copying; ampx owns it on success."
function from_dlpack(ctx::Context, managed::Ptr{Cvoid})
    out = Ref{Ptr{Cvoid}}(C_NULL)
    check(ccall((:ampx_tensor_from_dlpack, libampx), Cint, (Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Ptr{Cvoid}}),
                ctx, managed, out))
    owned(ctx, out[])
end

"Marks a leaf tensor as needing a gradient (or not)."
set_requires_grad!(t::Tensor, requires::Bool = true) =
    check(ccall((:ampx_tensor_set_requires_grad, libampx), Cint, (Ptr{Cvoid}, Int32), t, requires))

"Whether gradients flow to or through `t`."
requires_grad(t::Tensor) = (out = Ref{Int32}(0);
    check(ccall((:ampx_tensor_requires_grad, libampx), Cint, (Ptr{Cvoid}, Ptr{Int32}), t, out)); out[] != 0)

"Backpropagates from the one-element `loss`; with a scaler the gradients come out scaled."
backward!(loss::Tensor, scaler::Union{Nothing,Scaler} = nothing) =
    check(ccall((:ampx_backward, libampx), Cint, (Ptr{Cvoid}, Ptr{Cvoid}), loss, optional(scaler)))

# ---------------------------------------------------------------------------
# Optimizers
# ---------------------------------------------------------------------------

"An SGD optimizer over `params` (group 0)."
function sgd(ctx::Context, params::Vector{Tensor}, options::SGDOptions = sgd_options())
    out = Ref{Ptr{Cvoid}}(C_NULL)
    handles = Ptr{Cvoid}[p.handle for p in params]
    GC.@preserve params check(ccall((:ampx_optimizer_create_sgd, libampx), Cint,
        (Ptr{Cvoid}, Ptr{Ptr{Cvoid}}, Csize_t, Ref{SGDOptions}, Ptr{Ptr{Cvoid}}),
        ctx, handles, length(handles), options, out))
    finalizer(close, Optimizer(out[], ctx, copy(params)))
end

"An Adam optimizer over `params`, or AdamW with `adamw_options()`."
function adam(ctx::Context, params::Vector{Tensor}, options::AdamOptions = adam_options())
    out = Ref{Ptr{Cvoid}}(C_NULL)
    handles = Ptr{Cvoid}[p.handle for p in params]
    GC.@preserve params check(ccall((:ampx_optimizer_create_adam, libampx), Cint,
        (Ptr{Cvoid}, Ptr{Ptr{Cvoid}}, Csize_t, Ref{AdamOptions}, Ptr{Ptr{Cvoid}}),
        ctx, handles, length(handles), options, out))
    finalizer(close, Optimizer(out[], ctx, copy(params)))
end

"Adds a param group with its own lr and weight decay; returns its index."
function add_group!(o::Optimizer, params::Vector{Tensor}, lr::Real, weight_decay::Real)
    index = Ref{Int32}(0)
    handles = Ptr{Cvoid}[p.handle for p in params]
    GC.@preserve params check(ccall((:ampx_optimizer_add_group, libampx), Cint,
        (Ptr{Cvoid}, Ptr{Ptr{Cvoid}}, Csize_t, Cdouble, Cdouble, Ptr{Int32}),
        o, handles, length(handles), lr, weight_decay, index))
    append!(o.params, params)
    Int(index[])
end

"Number of param groups."
group_count(o::Optimizer) = (out = Ref{Int32}(0);
    check(ccall((:ampx_optimizer_group_count, libampx), Cint, (Ptr{Cvoid}, Ptr{Int32}), o, out)); Int(out[]))

"Sets group `group`'s (0-based) learning rate."
set_lr!(o::Optimizer, group::Integer, lr::Real) =
    check(ccall((:ampx_optimizer_set_lr, libampx), Cint, (Ptr{Cvoid}, Int32, Cdouble), o, group, lr))

"Group `group`'s (0-based) learning rate."
lr(o::Optimizer, group::Integer) = (out = Ref{Cdouble}(0);
    check(ccall((:ampx_optimizer_get_lr, libampx), Cint, (Ptr{Cvoid}, Int32, Ptr{Cdouble}), o, group, out)); out[])

"One step with the gradients as they are (use `step!(scaler, o)` for scaled ones)."
step!(o::Optimizer) = check(ccall((:ampx_optimizer_step, libampx), Cint, (Ptr{Cvoid},), o))

"Zeroes every attached gradient."
zero_grad!(o::Optimizer) = check(ccall((:ampx_optimizer_zero_grad, libampx), Cint, (Ptr{Cvoid},), o))

"Whether the most recent step was taken (false: skipped for inf/NaN)."
last_step_taken(o::Optimizer) = (out = Ref{Int32}(0);
    check(ccall((:ampx_optimizer_last_step_taken, libampx), Cint, (Ptr{Cvoid}, Ptr{Int32}), o, out)); out[] != 0)

"A new reference to one F32 state tensor of `param`."
function state_tensor(o::Optimizer, param::Tensor, kind::OptimizerState)
    out = Ref{Ptr{Cvoid}}(C_NULL)
    check(ccall((:ampx_optimizer_state_tensor, libampx), Cint,
                (Ptr{Cvoid}, Ptr{Cvoid}, OptimizerState, Ptr{Ptr{Cvoid}}), o, param, kind, out))
    owned(o.ctx, out[])
end

"Steps `param` has taken."
param_steps(o::Optimizer, param::Tensor) = (out = Ref{Int64}(0);
    check(ccall((:ampx_optimizer_param_steps, libampx), Cint, (Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Int64}),
                o, param, out)); out[])

"The optimizer's serialised state."
function save_state(o::Optimizer)
    size = Ref{Csize_t}(0)
    check(ccall((:ampx_optimizer_state_size, libampx), Cint, (Ptr{Cvoid}, Ptr{Csize_t}), o, size))
    buffer = Vector{UInt8}(undef, size[])
    check(ccall((:ampx_optimizer_save_state, libampx), Cint, (Ptr{Cvoid}, Ptr{Cvoid}, Csize_t),
                o, buffer, length(buffer)))
    buffer
end

"Restores state from `save_state`; nothing changes on error."
load_state!(o::Optimizer, state::Vector{UInt8}) =
    check(ccall((:ampx_optimizer_load_state, libampx), Cint, (Ptr{Cvoid}, Ptr{Cvoid}, Csize_t),
                o, state, length(state)))

"""
    clip_grad_norm!(o, max_norm; norm_type = 2.0, error_if_nonfinite = false, total = false)

Clips the gradients by their total norm; with `total = true` returns the
norm as a new one-element tensor. Refused with ERR_ORDER while the
gradients are still scaled.
"""
function clip_grad_norm!(o::Optimizer, max_norm::Real; norm_type::Real = 2.0,
                         error_if_nonfinite::Bool = false, total::Bool = false)
    out = Ref{Ptr{Cvoid}}(C_NULL)
    check(ccall((:ampx_clip_grad_norm, libampx), Cint,
                (Ptr{Cvoid}, Cdouble, Cdouble, Int32, Ptr{Ptr{Cvoid}}),
                o, max_norm, norm_type, error_if_nonfinite, total ? out : Ptr{Ptr{Cvoid}}(C_NULL)))
    total ? owned(o.ctx, out[]) : nothing
end

"Clamps every gradient element to [-clip_value, clip_value]."
clip_grad_value!(o::Optimizer, clip_value::Real) =
    check(ccall((:ampx_clip_grad_value, libampx), Cint, (Ptr{Cvoid}, Cdouble), o, clip_value))

"""
    find_nonfinite_grads(o)

The parameters whose gradients hold NaN or inf, in parameter order, as
named tuples `(param, name, nan_count, inf_count)`.
"""
function find_nonfinite_grads(o::Optimizer)
    entries = Vector{CNonfiniteGrad}(undef, length(o.params))
    found = Ref{Csize_t}(0)
    check(ccall((:ampx_find_nonfinite_grads, libampx), Cint,
                (Ptr{Cvoid}, Ptr{CNonfiniteGrad}, Csize_t, Ptr{Csize_t}),
                o, entries, length(entries), found))
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
    out = Ref{Ptr{Cvoid}}(C_NULL)
    check(ccall((:ampx_scaler_create, libampx), Cint, (Ptr{Cvoid}, Ref{ScalerOptions}, Ptr{Ptr{Cvoid}}),
                ctx, options, out))
    finalizer(close, Scaler(out[], ctx))
end

"Ties `o` to the scaler before its first use."
attach!(s::Scaler, o::Optimizer) =
    check(ccall((:ampx_scaler_attach, libampx), Cint, (Ptr{Cvoid}, Ptr{Cvoid}), s, o))

"A new F32 tensor holding `loss * scale`."
function scale_loss(s::Scaler, loss::Tensor)
    out = Ref{Ptr{Cvoid}}(C_NULL)
    check(ccall((:ampx_scaler_scale_loss, libampx), Cint, (Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Ptr{Cvoid}}),
                s, loss, out))
    owned(s.ctx, out[])
end

"A new reference to the one-element device tensor holding the scale."
function scale_tensor(s::Scaler)
    out = Ref{Ptr{Cvoid}}(C_NULL)
    check(ccall((:ampx_scaler_scale_tensor, libampx), Cint, (Ptr{Cvoid}, Ptr{Ptr{Cvoid}}), s, out))
    owned(s.ctx, out[])
end

"The current scale (synchronizes)."
scale(s::Scaler) = (out = Ref{Cdouble}(0);
    check(ccall((:ampx_scaler_get_scale, libampx), Cint, (Ptr{Cvoid}, Ptr{Cdouble}), s, out)); out[])

"Divides `o`'s gradients by the scale, recording inf/NaN."
unscale!(s::Scaler, o::Optimizer) =
    check(ccall((:ampx_scaler_unscale, libampx), Cint, (Ptr{Cvoid}, Ptr{Cvoid}), s, o))

"Unscales if needed, then steps `o` unless an inf/NaN was found."
step!(s::Scaler, o::Optimizer) =
    check(ccall((:ampx_scaler_step, libampx), Cint, (Ptr{Cvoid}, Ptr{Cvoid}), s, o))

"Ends the iteration: backs off or grows the scale (to `new_scale` when given)."
update!(s::Scaler) = check(ccall((:ampx_scaler_update, libampx), Cint, (Ptr{Cvoid},), s))
update!(s::Scaler, new_scale::Real) =
    check(ccall((:ampx_scaler_update_to, libampx), Cint, (Ptr{Cvoid}, Cdouble), s, new_scale))

"Whether the last unscale of `o`'s gradients found an inf/NaN."
found_inf(s::Scaler, o::Optimizer) = (out = Ref{Int32}(0);
    check(ccall((:ampx_scaler_found_inf, libampx), Cint, (Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Int32}), s, o, out)); out[] != 0)

"The scaler's counters (`ScalerCounters`)."
function counters(s::Scaler)
    out = Ref(sized(ScalerCounters))
    check(ccall((:ampx_scaler_get_counters, libampx), Cint, (Ptr{Cvoid}, Ptr{ScalerCounters}), s, out))
    out[]
end

"The scaler's whole state (`ScalerState`), e.g. for a checkpoint."
function state(s::Scaler)
    out = Ref(with(sized(ScalerState); counters = sized(ScalerCounters)))
    check(ccall((:ampx_scaler_get_state, libampx), Cint, (Ptr{Cvoid}, Ptr{ScalerState}), s, out))
    out[]
end

"Restores a state from `state`, between iterations only."
set_state!(s::Scaler, st::ScalerState) =
    check(ccall((:ampx_scaler_set_state, libampx), Cint, (Ptr{Cvoid}, Ref{ScalerState}), s, st))

# ---------------------------------------------------------------------------
# Autocast
# ---------------------------------------------------------------------------

"An autocast policy for `ctx`."
function Autocast(ctx::Context, options::AutocastOptions = autocast_options())
    out = Ref{Ptr{Cvoid}}(C_NULL)
    check(ccall((:ampx_autocast_create, libampx), Cint,
                (Ptr{Cvoid}, Ref{AutocastOptions}, Ptr{Ptr{Cvoid}}), ctx, options, out))
    finalizer(close, Autocast(out[]))
end

"Overrides the class of the op named `op` (e.g. \"softmax\")."
set_op_class!(a::Autocast, op::AbstractString, class::OpClass) =
    check(ccall((:ampx_autocast_set_op_class, libampx), Cint, (Ptr{Cvoid}, Cstring, OpClass), a, op, class))

"The class the op named `op` gets under this policy."
function op_class(a::Autocast, op::AbstractString)
    out = Ref{OpClass}(OP_KEEP)
    check(ccall((:ampx_autocast_op_class, libampx), Cint, (Ptr{Cvoid}, Cstring, Ptr{OpClass}), a, op, out))
    out[]
end

"Enters the policy: ops follow it until `exit!`."
enter!(a::Autocast) = check(ccall((:ampx_autocast_enter, libampx), Cint, (Ptr{Cvoid},), a))

"Leaves the innermost region, which must be this policy's."
exit!(a::Autocast) = check(ccall((:ampx_autocast_exit, libampx), Cint, (Ptr{Cvoid},), a))

"Runs `f()` with the policy entered."
function with_autocast(f, a::Autocast)
    enter!(a)
    try
        f()
    finally
        exit!(a)
    end
end

"Casts served from the cache and performed into it: `(hits, misses)`."
function cache_stats(a::Autocast)
    hits, misses = Ref{Int64}(0), Ref{Int64}(0)
    check(ccall((:ampx_autocast_cache_stats, libampx), Cint, (Ptr{Cvoid}, Ptr{Int64}, Ptr{Int64}),
                a, hits, misses))
    (hits[], misses[])
end

# ---------------------------------------------------------------------------
# Ops: each returns a tensor on its inputs' context, borrowed from the open
# scope if there is one.
# ---------------------------------------------------------------------------

# Runs an op: `f(out)` makes the ccall writing the output handle to `out`.
function op(f, ctx::Context)
    out = Ref{Ptr{Cvoid}}(C_NULL)
    check(f(out))
    result(ctx, out[])
end

"`a + b` (b may be a row vector broadcast over a's rows)."
add(a::Tensor, b::Tensor) = op(a.ctx) do out
    ccall((:ampx_add, libampx), Cint, (Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Ptr{Cvoid}}), a, b, out)
end

"`a - b` (broadcasting as `add`)."
sub(a::Tensor, b::Tensor) = op(a.ctx) do out
    ccall((:ampx_sub, libampx), Cint, (Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Ptr{Cvoid}}), a, b, out)
end

"`a .* b` (broadcasting as `add`)."
mul(a::Tensor, b::Tensor) = op(a.ctx) do out
    ccall((:ampx_mul, libampx), Cint, (Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Ptr{Cvoid}}), a, b, out)
end

"`a * scale + shift` in a's type."
affine(a::Tensor, scale::Real, shift::Real) = op(a.ctx) do out
    ccall((:ampx_affine, libampx), Cint, (Ptr{Cvoid}, Cdouble, Cdouble, Ptr{Ptr{Cvoid}}), a, scale, shift, out)
end

"max(x, 0)."
relu(x::Tensor) = op(x.ctx) do out
    ccall((:ampx_relu, libampx), Cint, (Ptr{Cvoid}, Ptr{Ptr{Cvoid}}), x, out)
end

"GELU, erf form."
gelu(x::Tensor) = op(x.ctx) do out
    ccall((:ampx_gelu, libampx), Cint, (Ptr{Cvoid}, Ptr{Ptr{Cvoid}}), x, out)
end

"GELU, tanh approximation."
gelu_tanh(x::Tensor) = op(x.ctx) do out
    ccall((:ampx_gelu_tanh, libampx), Cint, (Ptr{Cvoid}, Ptr{Ptr{Cvoid}}), x, out)
end

"x * sigmoid(x)."
silu(x::Tensor) = op(x.ctx) do out
    ccall((:ampx_silu, libampx), Cint, (Ptr{Cvoid}, Ptr{Ptr{Cvoid}}), x, out)
end

"1 / (1 + exp(-x))."
sigmoid(x::Tensor) = op(x.ctx) do out
    ccall((:ampx_sigmoid, libampx), Cint, (Ptr{Cvoid}, Ptr{Ptr{Cvoid}}), x, out)
end

"tanh(x), element-wise."
Base.tanh(x::Tensor) = op(x.ctx) do out
    ccall((:ampx_tanh, libampx), Cint, (Ptr{Cvoid}, Ptr{Ptr{Cvoid}}), x, out)
end

"Sum of all elements (one element)."
Base.sum(x::Tensor) = op(x.ctx) do out
    ccall((:ampx_sum, libampx), Cint, (Ptr{Cvoid}, Ptr{Ptr{Cvoid}}), x, out)
end

"Mean of all elements (one element)."
mean(x::Tensor) = op(x.ctx) do out
    ccall((:ampx_mean, libampx), Cint, (Ptr{Cvoid}, Ptr{Ptr{Cvoid}}), x, out)
end

"Softmax over the last dimension."
softmax(x::Tensor) = op(x.ctx) do out
    ccall((:ampx_softmax, libampx), Cint, (Ptr{Cvoid}, Ptr{Ptr{Cvoid}}), x, out)
end

"Log-softmax over the last dimension."
log_softmax(x::Tensor) = op(x.ctx) do out
    ccall((:ampx_log_softmax, libampx), Cint, (Ptr{Cvoid}, Ptr{Ptr{Cvoid}}), x, out)
end

"Cross-entropy of logits [N, C] against labels [N]; labels equal to `ignore_index` are left out."
cross_entropy(logits::Tensor, labels::Tensor; reduction::Reduction = REDUCTION_MEAN,
              ignore_index::Integer = -100) = op(logits.ctx) do out
    ccall((:ampx_cross_entropy, libampx), Cint, (Ptr{Cvoid}, Ptr{Cvoid}, Reduction, Int64, Ptr{Ptr{Cvoid}}),
          logits, labels, reduction, ignore_index, out)
end

"Mean-squared error (or sum of squares) between `input` and `target`."
mse_loss(input::Tensor, target::Tensor; reduction::Reduction = REDUCTION_MEAN) = op(input.ctx) do out
    ccall((:ampx_mse_loss, libampx), Cint, (Ptr{Cvoid}, Ptr{Cvoid}, Reduction, Ptr{Ptr{Cvoid}}),
          input, target, reduction, out)
end

"Binary cross-entropy of logits against targets of the same shape."
bce_with_logits(logits::Tensor, targets::Tensor; reduction::Reduction = REDUCTION_MEAN) = op(logits.ctx) do out
    ccall((:ampx_bce_with_logits, libampx), Cint, (Ptr{Cvoid}, Ptr{Cvoid}, Reduction, Ptr{Ptr{Cvoid}}),
          logits, targets, reduction, out)
end

"Matrix product [M,K]x[K,N] (or batched)."
matmul(a::Tensor, b::Tensor) = op(a.ctx) do out
    ccall((:ampx_matmul, libampx), Cint, (Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Ptr{Cvoid}}), a, b, out)
end

"`act(x W^T + b)` for x [..., in], weight [out, in], bias [out] or `nothing`."
linear(x::Tensor, weight::Tensor, bias::Union{Nothing,Tensor} = nothing,
       activation::Activation = ACTIVATION_NONE) = op(x.ctx) do out
    ccall((:ampx_linear, libampx), Cint, (Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Activation, Ptr{Ptr{Cvoid}}),
          x, weight, optional(bias), activation, out)
end

"Layer normalisation over the last dimension; weight and bias may be `nothing`."
layer_norm(x::Tensor, weight::Union{Nothing,Tensor}, bias::Union{Nothing,Tensor};
           eps::Real = 1e-5) = op(x.ctx) do out
    ccall((:ampx_layer_norm, libampx), Cint, (Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Cdouble, Ptr{Ptr{Cvoid}}),
          x, optional(weight), optional(bias), eps, out)
end

"Batch normalisation of x [N, C] or [N, C, L]; updates the running statistics in training."
batch_norm(x::Tensor, weight::Union{Nothing,Tensor}, bias::Union{Nothing,Tensor},
           running_mean::Union{Nothing,Tensor}, running_var::Union{Nothing,Tensor};
           training::Bool = true, momentum::Real = 0.1, eps::Real = 1e-5) = op(x.ctx) do out
    ccall((:ampx_batch_norm, libampx), Cint,
          (Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}, Int32, Cdouble, Cdouble, Ptr{Ptr{Cvoid}}),
          x, optional(weight), optional(bias), optional(running_mean), optional(running_var),
          training, momentum, eps, out)
end

"Inverted dropout with probability `p` while training (masks follow the context's seed)."
dropout(x::Tensor, p::Real; training::Bool = true) = op(x.ctx) do out
    ccall((:ampx_dropout, libampx), Cint, (Ptr{Cvoid}, Cdouble, Int32, Ptr{Ptr{Cvoid}}), x, p, training, out)
end

"Rows of `weight` [V, D] picked by `indices` (I32/I64)."
embedding(weight::Tensor, indices::Tensor) = op(weight.ctx) do out
    ccall((:ampx_embedding, libampx), Cint, (Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Ptr{Cvoid}}), weight, indices, out)
end

"`x` with a new row-major shape (one extent may be -1), sharing its memory."
function Base.reshape(x::Tensor, shape::Dims)
    dims = Int64[shape...]
    op(x.ctx) do out
        ccall((:ampx_reshape, libampx), Cint, (Ptr{Cvoid}, Int32, Ptr{Int64}, Ptr{Ptr{Cvoid}}),
              x, length(dims), dims, out)
    end
end

"A copy of `x` with dimensions `dim0` and `dim1` (0-based; negative from the end) exchanged."
transpose(x::Tensor, dim0::Integer, dim1::Integer) = op(x.ctx) do out
    ccall((:ampx_transpose, libampx), Cint, (Ptr{Cvoid}, Int32, Int32, Ptr{Ptr{Cvoid}}), x, dim0, dim1, out)
end

"Joins `tensors` along `dim` (0-based; negative from the end)."
function concat(tensors::Vector{Tensor}, dim::Integer)
    handles = Ptr{Cvoid}[t.handle for t in tensors]
    GC.@preserve tensors op(first(tensors).ctx) do out
        ccall((:ampx_concat, libampx), Cint, (Ptr{Ptr{Cvoid}}, Csize_t, Int32, Ptr{Ptr{Cvoid}}),
              handles, length(handles), dim, out)
    end
end

# ---------------------------------------------------------------------------
# Training checkpoint files
# ---------------------------------------------------------------------------

"""
    save_checkpoint(path, params; optimizer = nothing, scaler = nothing)

Writes the named tensors `params`, the optimizer's and the scaler's state to
`path`, replacing it atomically. Between iterations only.
"""
function save_checkpoint(path::AbstractString, params::Vector{Tensor};
                         optimizer::Union{Nothing,Optimizer} = nothing,
                         scaler::Union{Nothing,Scaler} = nothing)
    handles = Ptr{Cvoid}[p.handle for p in params]
    GC.@preserve params check(ccall((:ampx_checkpoint_file_save, libampx), Cint,
        (Cstring, Ptr{Ptr{Cvoid}}, Csize_t, Ptr{Cvoid}, Ptr{Cvoid}),
        path, handles, length(handles), optional(optimizer), optional(scaler)))
end

"""
    load_checkpoint(path, params; optimizer = nothing, scaler = nothing)

Restores a file written by `save_checkpoint` into the same tensors and,
when given, the optimizer and scaler; nothing changes on error.
"""
function load_checkpoint(path::AbstractString, params::Vector{Tensor};
                         optimizer::Union{Nothing,Optimizer} = nothing,
                         scaler::Union{Nothing,Scaler} = nothing)
    handles = Ptr{Cvoid}[p.handle for p in params]
    GC.@preserve params check(ccall((:ampx_checkpoint_file_load, libampx), Cint,
        (Cstring, Ptr{Ptr{Cvoid}}, Csize_t, Ptr{Cvoid}, Ptr{Cvoid}),
        path, handles, length(handles), optional(optimizer), optional(scaler)))
end

end # module
