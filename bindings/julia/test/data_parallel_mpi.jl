# Ampx.DataParallel over several ranks; run under mpirun (run_tests.sh does,
# when julia and mpirun exist):
#
#   mpirun -np 2 julia --project=bindings/julia bindings/julia/test/data_parallel_mpi.jl
#
# MPI is called through Open MPI's libmpi with ccall (no MPI.jl): MPI_Init,
# and MPI_COMM_WORLD, which in Open MPI is the address of the global
# `ompi_mpi_comm_world` (an MPI_Comm is a pointer there). Each rank trains
# on its slice of every batch, from its own initial parameters. After every
# step all ranks' parameters must be bitwise identical (so rank 0's were
# broadcast), and close to one process training on the whole batch without
# the wrapper; an inf written into one rank's gradient after backward must
# make every rank skip that step and back off alike. Exits 1 when a check
# fails on any rank.
using Ampx
using Ampx: F32, ACTIVATION_RELU

const libmpi = get(ENV, "AMPX_TEST_LIBMPI", "libmpi")

ccall((:MPI_Init, libmpi), Cint, (Ptr{Cvoid}, Ptr{Cvoid}), C_NULL, C_NULL) == 0 ||
    error("MPI_Init failed")
const WORLD = cglobal((:ompi_mpi_comm_world, libmpi), Cvoid)
const MPI_BYTE = cglobal((:ompi_mpi_byte, libmpi), Cvoid)
const MPI_INT = cglobal((:ompi_mpi_int, libmpi), Cvoid)
const MPI_MIN = cglobal((:ompi_mpi_op_min, libmpi), Cvoid)

const RANK, SIZE = let rank = Ref{Cint}(0), size = Ref{Cint}(0)
    ccall((:MPI_Comm_rank, libmpi), Cint, (Ptr{Cvoid}, Ptr{Cint}), WORLD, rank) == 0 ||
        error("MPI_Comm_rank failed")
    ccall((:MPI_Comm_size, libmpi), Cint, (Ptr{Cvoid}, Ptr{Cint}), WORLD, size) == 0 ||
        error("MPI_Comm_size failed")
    Int(rank[]), Int(size[])
end

# Whether `data` holds the same bytes on every rank (MPI_Allgather).
function same_on_every_rank(data::Vector{UInt8})
    all_data = Vector{UInt8}(undef, length(data) * SIZE)
    ccall((:MPI_Allgather, libmpi), Cint,
          (Ptr{Cvoid}, Cint, Ptr{Cvoid}, Ptr{Cvoid}, Cint, Ptr{Cvoid}, Ptr{Cvoid}),
          data, length(data), MPI_BYTE, all_data, length(data), MPI_BYTE, WORLD) == 0 ||
        error("MPI_Allgather failed")
    all(all_data[r*length(data)+1:(r+1)*length(data)] == data for r in 0:SIZE-1)
end

# Whether `ok` holds on every rank (MPI_Allreduce with MIN).
function on_every_rank(ok::Bool)
    value, result = Ref{Cint}(ok), Ref{Cint}(0)
    ccall((:MPI_Allreduce, libmpi), Cint,
          (Ptr{Cvoid}, Ptr{Cvoid}, Cint, Ptr{Cvoid}, Ptr{Cvoid}, Ptr{Cvoid}),
          value, result, 1, MPI_INT, MPI_MIN, WORLD) == 0 || error("MPI_Allreduce failed")
    result[] != 0
end

failures = String[]
check(ok::Bool, what) = ok || (push!(failures, what); println("rank $RANK: FAILED: $what"))

const IN, HIDDEN, OUT, BATCH = 8, 16, 4, 32

# Batch `step`, row-major: x [BATCH, IN] and y [BATCH, OUT].
function batch(step)
    x = Float32[sin(0.37f0 * (step * BATCH * IN + k)) for k in 0:BATCH*IN-1]
    y = Float32[sin(x[i*IN+j+1] + 2 * x[i*IN+4+j+1]) for i in 0:BATCH-1 for j in 0:OUT-1]
    x, y
end

mutable struct Trainer
    ctx::Context
    params::Vector{Tensor}
    opt::Optimizer
    scaler::Scaler
    comm::Union{Nothing,Comm}
    dp::Union{Nothing,DataParallel}
end

function Trainer(seed; distributed::Bool)
    ctx = Context(Ampx.context_options(num_threads = 1))  # ranks share the cores
    init(n, bound) = Float32[bound * sin(1.3f0 * k + seed) for k in 0:n-1]
    params = [Tensor(ctx, init(HIDDEN * IN, 0.35f0), (HIDDEN, IN)), Tensor(ctx, init(HIDDEN, 0.35f0), (HIDDEN,)),
              Tensor(ctx, init(OUT * HIDDEN, 0.25f0), (OUT, HIDDEN)), Tensor(ctx, init(OUT, 0.25f0), (OUT,))]
    foreach(p -> Ampx.set_requires_grad!(p, true), params)
    opt = Ampx.sgd(ctx, params, Ampx.sgd_options(lr = 0.05, momentum = 0.9))
    scaler = Scaler(ctx, Ampx.scaler_options(init_scale = 1024.0, growth_interval = 10))
    comm = distributed ? Ampx.comm_from_mpi(ctx, Ref(WORLD)) : nothing
    dp = distributed ? DataParallel(comm, opt) : nothing
    Trainer(ctx, params, opt, scaler, comm, dp)
end

function train_step!(t::Trainer, step; plant_inf::Bool = false)
    x, y = batch(step)
    rows = t.dp === nothing ? BATCH : BATCH ÷ SIZE
    first = t.dp === nothing ? 0 : RANK * rows
    Ampx.zero_grad!(t.opt)
    Ampx.with_scope(t.ctx) do
        bx = Tensor(t.ctx, x[first*IN+1:(first+rows)*IN], (rows, IN))
        by = Tensor(t.ctx, y[first*OUT+1:(first+rows)*OUT], (rows, OUT))
        w1, b1, w2, b2 = t.params
        out = Ampx.linear(Ampx.linear(bx, w1, b1, ACTIVATION_RELU), w2, b2)
        Ampx.backward!(Ampx.mse_loss(out, by), t.scaler)
    end
    if plant_inf
        g = Ampx.grad(t.params[3])
        values = Ampx.to_host(Float32, g)
        values[1] = Inf32
        Ampx.copy_from_host!(g, values)
        close(g)
    end
    Ampx.unscale!(t.scaler, t.opt)
    Ampx.clip_grad_norm!(t.opt, 1.0)
    Ampx.step!(t.scaler, t.opt)
    Ampx.update!(t.scaler)
end

param_bytes(t::Trainer) = vcat([reinterpret(UInt8, Ampx.to_host(Float32, p)) for p in t.params]...)

function relative_difference(a::Trainer, b::Trainer)
    diff = size = 0.0
    for (p, q) in zip(a.params, b.params)
        x, y = Float64.(Ampx.to_host(Float32, p)), Float64.(Ampx.to_host(Float32, q))
        diff = max(diff, maximum(abs.(x .- y)))
        size = max(size, maximum(abs.(y)))
    end
    diff / size
end

ranks = Trainer(7 + RANK; distributed = true)
single = Trainer(7; distributed = false)  # rank 0's initial parameters, the whole batch
check(same_on_every_rank(param_bytes(ranks)), "rank 0's parameters broadcast")
steps, identical = 12, true
for step in 0:steps-1
    train_step!(ranks, step)
    train_step!(single, step)
    global identical = identical && same_on_every_rank(param_bytes(ranks))
end
check(identical, "parameters bitwise identical on every rank after every step")
check(Ampx.scale(ranks.scaler) == Ampx.scale(single.scaler), "the same scale as one process")
difference = relative_difference(ranks, single)
check(difference < 1e-5, "$(difference) from one process (< 1e-5)")
stats = Ampx.stats(ranks.dp)
check((stats.rank, stats.world_size, stats.reductions) == (RANK, SIZE, steps), "stats $stats")
check(Ampx.rank_and_size(ranks.comm) == (RANK, SIZE), "comm rank and size")

# An inf on the last rank only: every rank skips the step and backs off.
before, scale_before = param_bytes(ranks), Ampx.scale(ranks.scaler)
train_step!(ranks, steps; plant_inf = RANK == SIZE - 1)
check(param_bytes(ranks) == before, "the step with an inf on one rank is skipped on every rank")
check(Ampx.scale(ranks.scaler) == scale_before / 2, "every rank backed off")
check(!Ampx.last_step_taken(ranks.opt), "last_step_taken is false on every rank")

# Gradient accumulation: with sync off nothing is reduced; stepping is refused.
Ampx.no_sync(ranks.dp) do
    Ampx.zero_grad!(ranks.opt)
    Ampx.with_scope(ranks.ctx) do
        w1, b1, w2, b2 = ranks.params
        x, y = batch(0)
        out = Ampx.linear(Ampx.linear(Tensor(ranks.ctx, x[1:IN], (1, IN)), w1, b1), w2, b2)
        Ampx.backward!(Ampx.mse_loss(out, Tensor(ranks.ctx, y[1:OUT], (1, OUT))))
    end
    err = try
        Ampx.step!(ranks.opt)
        nothing
    catch e
        e
    end
    check(err isa AmpxError && err.status == Ampx.ERR_ORDER, "stepping with sync off is refused")
end
check(ranks.dp.sync, "no_sync restores sync")

foreach(close, (ranks.dp, ranks.comm, single.opt, ranks.opt))
ok = on_every_rank(isempty(failures))
RANK == 0 && println(ok ? "data_parallel_mpi.jl: $SIZE ranks: every check passed " *
                          "(max relative difference $(difference) from one process)" :
                          "data_parallel_mpi.jl: a check failed")
ccall((:MPI_Finalize, libmpi), Cint, ())
exit(ok ? 0 : 1)
