# Tests of the Julia binding. bindings/julia/run_tests.sh runs them (when
# `julia` exists) with AMPX_LIB pointing at libampx and AMPX_TINY_TRAIN at
# the C reference program.
using Test
using Printf
using Ampx
using Ampx: F32, F16, BF16, I32, I64, ERR_SHAPE, ERR_ORDER, ERR_DTYPE, ERR_IO, ERR_CORRUPT,
            ERR_INVALID_ARGUMENT, ERR_NOT_SUPPORTED, ERR_STALE_HANDLE, ACTIVATION_RELU,
            ACTIVATION_NONE, ACTIVATION_GELU, LR_CONSTANT, LR_LINEAR, LR_COSINE, LR_STEP

hex(x::Float32) = string(reinterpret(UInt32, x), base = 16, pad = 8)
series(n, f) = Float32[Float32(f(i)[1]) / Float32(f(i)[2]) for i in 0:n-1]

# A Julia array holding a row-major flat vector of `shape` (A[i, j, k] is
# element (i-1, j-1, k-1)), and back.
rowmajor(data, shape) = permutedims(reshape(data, reverse(shape)), length(shape):-1:1)
flat(a) = vec(permutedims(a, ndims(a):-1:1))

# A tensor's elements as Float64 (F32, F16 and, through a cast, BF16).
function host(t::Tensor)
    dt = Ampx.dtype(t)
    dt == F16 && return Float64.(Ampx.to_host(Float16, t))
    dt == F32 && return Float64.(Ampx.to_host(Float32, t))
    f32 = Ampx.cast(t, F32)
    values = Float64.(Ampx.to_host(Float32, f32))
    close(f32)
    values
end

# Element-wise agreement: |got - want| <= rtol |want| + atol.
agree(got, want; rtol = 2e-6, atol = 0.0) =
    length(got) == length(want) && all(abs.(got .- want) .<= rtol .* abs.(want) .+ atol)

# The AmpxError `f()` throws (or nothing when it throws none).
function error_of(f)
    try
        f()
        nothing
    catch e
        e
    end
end

param(ctx, data, shape) = (p = Tensor(ctx, data, shape); Ampx.set_requires_grad!(p, true); p)

# The reference run of bindings/README.md; returns its output lines.
function reference_run()
    ctx = Context()
    x = Tensor(ctx, series(32, i -> (i % 7 - 3, 4)), (8, 4))
    y = Tensor(ctx, series(16, i -> (i % 5 - 2, 2)), (8, 2))
    function param(name, data, shape)
        p = Tensor(ctx, data, shape)
        Ampx.set_requires_grad!(p, true)
        Ampx.set_name!(p, name)
        p
    end
    w1 = param("w1", series(64, i -> ((i * 37) % 17 - 8, 32)), (16, 4))
    b1 = param("b1", series(16, i -> (i % 3 - 1, 100)), (16,))
    w2 = param("w2", series(32, i -> ((i * 29) % 13 - 6, 32)), (2, 16))
    b2 = param("b2", zeros(Float32, 2), (2,))
    opt = Ampx.adam(ctx, [w1, b1, w2, b2], Ampx.adamw_options(lr = 0.01))
    scaler = Scaler(ctx, Ampx.scaler_options(init_scale = 1024, growth_interval = 3))
    autocast = Autocast(ctx, Ampx.autocast_options(dtype = BF16))
    lines = String[]
    for step in 0:11
        Ampx.push_scope!(ctx)
        Ampx.enter!(autocast)
        h = Ampx.linear(x, w1, b1, ACTIVATION_RELU)
        out = Ampx.linear(h, w2, b2, ACTIVATION_NONE)
        loss = Ampx.mse_loss(out, y)
        Ampx.exit!(autocast)
        loss_value = Ampx.to_host(Float32, loss)[1]
        Ampx.backward!(loss, scaler)
        if step == 5
            g = Ampx.grad(w2)
            grad = Ampx.to_host(Float32, g)
            grad[4] = Inf32  # element 3, 0-based
            Ampx.copy_from_host!(g, grad)
            close(g)
        end
        Ampx.unscale!(scaler, opt)
        Ampx.clip_grad_norm!(opt, 1.0; norm_type = 2.0)
        Ampx.step!(scaler, opt)
        Ampx.update!(scaler)
        scale = Ampx.scale(scaler)
        Ampx.zero_grad!(opt)
        Ampx.pop_scope!(ctx)
        push!(lines, @sprintf("step %d loss %s scale %.17g", step, hex(loss_value), scale))
    end
    push!(lines, "w2" * join(" " .* hex.(Ampx.to_host(Float32, w2))))
    foreach(close, (autocast, scaler, opt, w1, b1, w2, b2, x, y, ctx))
    lines
end

# FP8 formats as the OCP definition gives them, and rounding into them in
# Float64 (the FP8 tests' reference).
# (exponent bits, mantissa bits, bias, max, E4M3FN?)
const FP8_FORMATS = Dict(Ampx.F8E4M3 => (4, 3, 7, 448.0, true), Ampx.F8E5M2 => (5, 2, 15, 57344.0, false))
function fp8_decode(f, code)
    ebits, mbits, bias, _, fn = f
    sign = code & 0x80 != 0 ? -1.0 : 1.0
    e, m = (code >> mbits) & ((1 << ebits) - 1), code & ((1 << mbits) - 1)
    fn && e == 15 && m == 7 && return NaN
    !fn && e == 31 && return m == 0 ? sign * Inf : NaN
    e == 0 && return sign * m * 2.0^(1 - bias - mbits)
    sign * (1 + m / 2^mbits) * 2.0^(e - bias)
end
# Nearest, ties to the even code; beyond max: +-max when saturating,
# else NaN (E4M3) or +-inf (E5M2).
function fp8_encode(f, x, saturate)
    isnan(x) && return 0x7f
    sign = signbit(x) ? 0x80 : 0x00
    a, maxcode = abs(x), f[5] ? 0x7e : 0x7b
    ulp = f[4] - fp8_decode(f, maxcode - 1)
    best, bestd = 0x00, Inf
    for code in 0x00:(maxcode + 0x01)
        v = code > maxcode ? f[4] + ulp : fp8_decode(f, code)
        d = abs(v - a)
        if d < bestd || (d == bestd && iseven(code))
            best, bestd = code, d
        end
    end
    if best > maxcode || isinf(a)
        return saturate ? sign | maxcode : f[5] ? sign | 0x7f : sign | 0x7c
    end
    sign | best
end

@testset "Ampx" begin
    @testset "reference run" begin
        got = reference_run()
        tiny = get(ENV, "AMPX_TINY_TRAIN", "")
        if isempty(tiny)
            @info "AMPX_TINY_TRAIN is not set: the reference output is not compared"
        else
            want = split(chomp(read(`$tiny`, String)), '\n')
            @test length(got) == length(want)
            for (g, w) in zip(got, want)
                @test g == w
            end
        end
    end

    @testset "errors carry the status and the message" begin
        ctx = Context()
        err = try
            Tensor(ctx, zeros(Float32, 5), (2, 3))
        catch e
            e
        end
        @test err isa AmpxError
        @test err.status == ERR_SHAPE
        @test occursin("ampx_tensor_from_host", err.message)
        @test startswith(sprint(showerror, err), "AMPX_ERR_SHAPE: ")
        scaler = Scaler(ctx)
        err = try
            Ampx.update!(scaler)
        catch e
            e
        end
        @test err isa AmpxError && err.status == ERR_ORDER && !isempty(err.message)
        close(scaler)
        close(ctx)
    end

    @testset "close twice; scope outputs end with their scope" begin
        ctx = Context()
        p = Base.zeros(ctx, F32, (4,))
        opt = Ampx.sgd(ctx, [p])
        scaler = Scaler(ctx)
        autocast = Autocast(ctx)
        for _ in 1:2
            foreach(close, (autocast, scaler, opt, p, ctx))
        end
        @test_throws AmpxError fill!(p, 1)
        ctx = Context()
        a = Base.zeros(ctx, F32, (3,))
        Ampx.push_scope!(ctx)
        b = Ampx.affine(a, 1, 2)
        kept = Ampx.retain(b)
        Ampx.pop_scope!(ctx)
        @test_throws AmpxError length(b)
        @test Ampx.to_host(Float32, kept) == Float32[2, 2, 2]
        @test_throws AmpxError Ampx.pop_scope!(ctx)
        @test !Ampx.set_tf32!(ctx, true)  # TF32 off by default
        @test Ampx.set_tf32!(ctx, false)
    end

    @testset "autocast + scaler + AdamW: the loss falls" begin
        ctx = Context()
        n, inp, hidden = 64, 8, 32
        xs = Float32[sin(0.37 * k) for k in 0:n*inp-1]
        ys = Float32[tanh(sum(xs[i*inp+j+1] * (j % 3 - 1) for j in 0:inp-1)) for i in 0:n-1]
        ws = Float32[0.3 * cos(1.7 * k) for k in 0:hidden*inp-1]
        x, y = Tensor(ctx, xs, (n, inp)), Tensor(ctx, ys, (n, 1))
        params = [Tensor(ctx, ws, (hidden, inp)), Base.zeros(ctx, F32, (hidden,)),
                  Tensor(ctx, ws[1:hidden], (1, hidden)), Base.zeros(ctx, F32, (1,))]
        foreach(p -> Ampx.set_requires_grad!(p, true), params)
        opt = Ampx.adam(ctx, params, Ampx.adamw_options(lr = 0.01))
        scaler = Scaler(ctx)
        Ampx.attach!(scaler, opt)
        autocast = Autocast(ctx)
        losses = Float32[]
        for _ in 1:150
            Ampx.with_scope(ctx) do
                loss = Ampx.with_autocast(autocast) do
                    h = Ampx.linear(x, params[1], params[2], ACTIVATION_GELU)
                    Ampx.mse_loss(Ampx.linear(h, params[3], params[4]), y)
                end
                push!(losses, Ampx.to_host(Float32, loss)[1])
                Ampx.backward!(loss, scaler)
                Ampx.unscale!(scaler, opt)
                Ampx.clip_grad_norm!(opt, 1.0)
                Ampx.step!(scaler, opt)
                Ampx.update!(scaler)
                Ampx.zero_grad!(opt)
            end
        end
        @test losses[end] < losses[1] / 4
    end

    @testset "element-wise ops, reductions and shapes against Float64" begin
        ctx = Context()
        xs = Float32[0.25 + 0.1 * i for i in 0:23]
        ys = Float32[1 + 0.05 * i for i in 0:23]
        x, y = Tensor(ctx, xs, (2, 3, 4)), Tensor(ctx, ys, (2, 3, 4))
        X, Y = rowmajor(Float64.(xs), (2, 3, 4)), rowmajor(Float64.(ys), (2, 3, 4))
        @test agree(host(exp(x)), flat(exp.(X)))
        @test agree(host(log(x)), flat(log.(X)))
        @test agree(host(sqrt(x)), flat(sqrt.(X)))
        @test agree(host(Ampx.rsqrt(x)), flat(1 ./ sqrt.(X)))
        @test agree(host(x / y), flat(X ./ Y))
        @test agree(host(x ^ 2.5), flat(X .^ 2.5))

        # Dimensions are 0-based: ampx's dim d is Julia's d + 1.
        @test host(sum(x))[1] ≈ sum(X) rtol = 1e-6
        s1 = sum(x; dims = 1)
        @test size(s1) == (2, 4)
        @test agree(host(s1), flat(dropdims(sum(X; dims = 2); dims = 2)))
        @test size(sum(x; dims = 1, keepdim = true)) == (2, 1, 4)
        m = Ampx.mean(x; dims = (0, 2))
        @test size(m) == (3,)
        @test agree(host(m), vec(sum(X; dims = (1, 3))) ./ 8)
        a = Ampx.amax(x; dims = -1, keepdim = true)
        @test size(a) == (2, 3, 1)
        @test agree(host(a), flat(maximum(X; dims = 3)))
        E = exp.(X .- maximum(X; dims = 1))
        @test agree(host(Ampx.softmax(x; dim = 0)), flat(E ./ sum(E; dims = 1)); rtol = 1e-6)
        @test agree(host(Ampx.log_softmax(x; dim = 0)),
                    flat(log.(E ./ sum(E; dims = 1))); rtol = 1e-6, atol = 1e-6)

        p = Ampx.permute(x, (2, 0, 1))
        @test size(p) == (4, 2, 3)
        @test host(p) == flat(permutedims(X, (3, 1, 2)))
        pieces = Ampx.split(x, [1, 3]; dim = 2)
        @test size.(pieces) == [(2, 3, 1), (2, 3, 3)]
        @test host(pieces[2]) == flat(X[:, :, 2:4])
        @test size.(Ampx.split(x, 3; dim = 2)) == [(2, 3, 3), (2, 3, 1)]
        chunks = Ampx.chunk(x, 2; dim = 1)
        @test size.(chunks) == [(2, 2, 4), (2, 1, 4)]
        @test host(chunks[2]) == flat(X[:, 3:3, :])
        mask = Int32[j > k for j in 0:2 for k in 0:3]  # row-major [3, 4]
        filled = Ampx.masked_fill(x, Tensor(ctx, mask, (3, 4)), -1.0)
        M = rowmajor(mask, (3, 4))
        @test host(filled) == flat([M[j, k] != 0 ? -1.0 : X[i, j, k] for i in 1:2, j in 1:3, k in 1:4])

        err = error_of(() -> Ampx.split(x, [1, 1]; dim = 2))
        @test err isa AmpxError && err.status == ERR_SHAPE
        @test_throws ArgumentError Ampx.chunk(x, 0)
        err = error_of(() -> Ampx.permute(x, (0, 1)))
        @test err isa AmpxError && err.status == ERR_INVALID_ARGUMENT
        close(ctx)
    end

    @testset "rms_norm's default eps is float32's for every dtype" begin
        ctx = Context()
        small = [(iseven(i) ? 1 : -1) * (2e-4 + 2.5e-5 * i) for i in 0:15]  # two rows of 8
        ws = [0.5 + i / 16 for i in 0:7]
        reference(x, w, eps) = vcat([x[r+1:r+8] ./ sqrt(sum(x[r+1:r+8] .^ 2) / 8 + eps) .* w
                                     for r in (0, 8)]...)
        for (dt, T, tolerance) in ((F32, Float32, 2.0^-21), (F16, Float16, 2.0^-10),
                                   (BF16, Float32, 2.0^-7))
            x32 = Tensor(ctx, T.(small), (2, 8))
            w32 = Tensor(ctx, T.(ws), (8,))
            x = dt == BF16 ? Ampx.cast(x32, BF16) : x32
            w = dt == BF16 ? Ampx.cast(w32, BF16) : w32
            x64, w64 = host(x), host(w)  # the inputs as ampx holds them
            want = reference(x64, w64, Float64(eps(Float32)))
            got = Ampx.rms_norm(x, w)
            @test Ampx.dtype(got) == dt
            @test agree(host(got), want; rtol = tolerance)
            # On these rows the dtype's own epsilon would give another result.
            dtype_eps = dt == F16 ? 2.0^-10 : dt == BF16 ? 2.0^-7 : 2.0^-23
            if dtype_eps != eps(Float32)
                @test maximum(abs.(reference(x64, w64, dtype_eps) .- want) ./ abs.(want)) > 0.5
            end
            @test agree(host(Ampx.rms_norm(x, w; eps = 1e-6)), reference(x64, w64, 1e-6);
                        rtol = tolerance)
        end
        close(ctx)
    end

    @testset "cross entropy with class weights and label smoothing" begin
        ctx = Context()
        xs = Float32[sin(0.7 * k) * 2 for k in 0:11]  # logits [3, 4]
        labels = Int64[0, 3, -100]
        ws = Float32[0.5, 1.0, 1.5, 2.0]
        smoothing = 0.1
        X = rowmajor(Float64.(xs), (3, 4))
        total, weight_sum = 0.0, 0.0
        for i in 1:2  # the third row is ignored
            y = labels[i] + 1
            lse = log(sum(exp.(X[i, :])))
            q = [(1 - smoothing) * ws[y] * (c == y) + smoothing / 4 * ws[c] for c in 1:4]
            total += sum(q .* (lse .- X[i, :]))
            weight_sum += ws[y]
        end
        loss = Ampx.cross_entropy(Tensor(ctx, xs, (3, 4)), Tensor(ctx, labels, (3,));
                                  weight = Tensor(ctx, ws, (4,)), label_smoothing = smoothing)
        @test host(loss)[1] ≈ total / weight_sum rtol = 1e-5
        plain = Ampx.cross_entropy(Tensor(ctx, xs, (3, 4)), Tensor(ctx, labels, (3,)))
        want = sum(log(sum(exp.(X[i, :]))) - X[i, labels[i]+1] for i in 1:2) / 2
        @test host(plain)[1] ≈ want rtol = 1e-5
        err = error_of(() -> Ampx.cross_entropy(Tensor(ctx, xs, (3, 4)), Tensor(ctx, labels, (3,));
                                                weight = Tensor(ctx, ws[1:3], (3,))))
        @test err isa AmpxError && err.status == ERR_SHAPE
        close(ctx)
    end

    @testset "attention, convolution and pooling against loops" begin
        ctx = Context()
        H, T, D = 2, 3, 4
        qs, ks, vs = (Float32[sin(a * k + b) for k in 0:H*T*D-1] for (a, b) in ((0.3, 0.1), (0.5, 0.7), (0.9, 0.2)))
        Q, K, V = (rowmajor(Float64.(v), (H, T, D)) for v in (qs, ks, vs))
        for causal in (false, true)
            out = Ampx.scaled_dot_product_attention(Tensor(ctx, qs, (H, T, D)), Tensor(ctx, ks, (H, T, D)),
                                                    Tensor(ctx, vs, (H, T, D)); is_causal = causal)
            O = zeros(H, T, D)
            for h in 1:H, i in 1:T
                s = [j > i && causal ? -Inf : sum(Q[h, i, :] .* K[h, j, :]) / sqrt(D) for j in 1:T]
                p = exp.(s .- maximum(s))
                p ./= sum(p)
                O[h, i, :] = sum(p[j] .* V[h, j, :] for j in 1:T)
            end
            @test agree(host(out), flat(O); rtol = 1e-5, atol = 1e-6)
        end
        @test_throws ArgumentError Ampx.scaled_dot_product_attention(
            Tensor(ctx, qs, (H, T, D)), Tensor(ctx, ks, (H, T, D)), Tensor(ctx, vs, (H, T, D)); scale = 0)

        C, O, Hi, Wi = 2, 3, 4, 4
        xs = Float32[cos(0.21 * k) for k in 0:C*Hi*Wi-1]
        wts = Float32[sin(0.13 * k + 0.4) for k in 0:O*C*9-1]
        bs = Float32[0.1, -0.2, 0.3]
        Xc = rowmajor(Float64.(xs), (1, C, Hi, Wi))
        Wc = rowmajor(Float64.(wts), (O, C, 3, 3))
        for (stride, padding) in ((1, 1), (2, 1))
            Ho = (Hi + 2 * padding - 3) ÷ stride + 1
            Wo = (Wi + 2 * padding - 3) ÷ stride + 1
            Y = zeros(1, O, Ho, Wo)
            for o in 1:O, i in 1:Ho, j in 1:Wo
                acc = Float64(bs[o])
                for c in 1:C, di in 1:3, dj in 1:3
                    r, s = (i - 1) * stride - padding + di, (j - 1) * stride - padding + dj
                    if 1 <= r <= Hi && 1 <= s <= Wi
                        acc += Xc[1, c, r, s] * Wc[o, c, di, dj]
                    end
                end
                Y[1, o, i, j] = acc
            end
            out = Ampx.conv2d(Tensor(ctx, xs, (1, C, Hi, Wi)), Tensor(ctx, wts, (O, C, 3, 3)),
                              Tensor(ctx, bs, (O,)); stride = stride, padding = padding)
            @test size(out) == (1, O, Ho, Wo)
            @test agree(host(out), flat(Y); rtol = 1e-5, atol = 1e-6)
        end
        x = Tensor(ctx, xs, (1, C, Hi, Wi))
        windows(f) = [f(Xc[1, c, 2i-1:2i, 2j-1:2j]) for c in 1:C, i in 1:2, j in 1:2]
        @test host(Ampx.max_pool2d(x, 2)) == flat(reshape(windows(maximum), 1, C, 2, 2))
        @test agree(host(Ampx.avg_pool2d(x, 2)), flat(reshape(windows(w -> sum(w) / 4), 1, C, 2, 2)))
        g = Ampx.global_avg_pool2d(x)
        @test size(g) == (1, C, 1, 1)
        @test agree(host(g), [sum(Xc[1, c, :, :]) / 16 for c in 1:C])
        err = error_of(() -> Ampx.conv2d(x, Tensor(ctx, wts, (O, C, 3, 3)); stride = 0))
        @test err isa AmpxError && err.status == ERR_INVALID_ARGUMENT
        close(ctx)
    end

    @testset "views share memory; bad views are refused" begin
        ctx = Context()
        base = Tensor(ctx, Float32[0, 1, 2, 3, 4, 5], (6,))
        v = Ampx.view(base, 8, (2,))
        @test Ampx.to_host(Float32, v) == Float32[2, 3]
        fill!(v, 9)
        @test Ampx.to_host(Float32, base) == Float32[0, 1, 9, 9, 4, 5]
        bits = Ampx.view(base, 4, (1,); dtype = I32)
        @test Ampx.to_host(Int32, bits) == [reinterpret(Int32, 1.0f0)]
        close(base)  # the view keeps the memory
        @test Ampx.to_host(Float32, v) == Float32[9, 9]
        base = Tensor(ctx, Float32[0, 1, 2, 3, 4, 5], (6,))
        err = error_of(() -> Ampx.view(base, 2, (1,)))
        @test err isa AmpxError && err.status == ERR_INVALID_ARGUMENT
        err = error_of(() -> Ampx.view(base, 20, (2,)))
        @test err isa AmpxError && err.status == ERR_SHAPE
        close(base)
        err = error_of(() -> Ampx.view(base, 0, (1,)))
        @test err isa AmpxError && err.status == ERR_STALE_HANDLE
        close(ctx)
    end

    @testset "grad-ready hooks: each leaf once; exceptions rethrown" begin
        ctx = Context()
        x = Tensor(ctx, Float32[1, 2, 3, 4, 5, 6], (2, 3))
        w = param(ctx, Float32[0.5, -1, 2], (1, 3))
        b = param(ctx, Float32[0.25], (1,))
        Ampx.set_name!(w, "w")
        Ampx.set_name!(b, "b")
        seen = Tuple{String,Vector{Float32}}[]
        Ampx.set_grad_ready_hook!(ctx) do p
            g = Ampx.grad(p)
            push!(seen, (Ampx.name(p), Ampx.to_host(Float32, g)))
            close(g)
        end
        Ampx.backward!(sum(Ampx.linear(x, w, b)))
        @test sort(seen) == [("b", Float32[2]), ("w", Float32[5, 7, 9])]
        first_hook = ctx.callbacks[end]

        Ampx.set_grad_ready_hook!(p -> error("boom in the hook"), ctx)
        @test first_hook.released  # replaced: ampx released it, once
        err = error_of(() -> Ampx.backward!(sum(Ampx.linear(x, w, b))))
        @test err isa ErrorException && occursin("boom in the hook", err.msg)
        Ampx.set_grad_ready_hook!(nothing, ctx)
        @test all(cb -> cb.released, ctx.callbacks)

        # grad_ready! runs the hook for an engine's own gradients.
        called = Ref(0)
        Ampx.set_grad_ready_hook!(p -> (called[] += 1), ctx)
        Ampx.grad_ready!(w)
        @test called[] == 1
        Ampx.set_grad_ready_hook!(nothing, ctx)
        fresh = param(ctx, Float32[1], (1,))
        err = error_of(() -> Ampx.grad_ready!(fresh))  # no gradient attached
        @test err isa AmpxError && err.status == ERR_INVALID_ARGUMENT
        close(ctx)
    end

    @testset "checkpoint: the gradients of the direct run; exceptions rethrown" begin
        ctx = Context()
        xs = Float32[sin(0.4 * k) for k in 0:11]
        w1s = Float32[cos(0.3 * k) / 2 for k in 0:14]
        w2s = Float32[sin(0.2 * k + 1) / 2 for k in 0:9]
        x = Tensor(ctx, xs, (4, 3))
        grads = map((false, true)) do checkpointed
            w1, w2 = param(ctx, w1s, (5, 3)), param(ctx, w2s, (2, 5))
            block(inp) = Ampx.linear(Ampx.relu(Ampx.linear(inp, w1)), w2)
            y = checkpointed ? Ampx.checkpoint(block, x) : block(x)
            Ampx.backward!(sum(y))
            (host(Ampx.grad(w1)), host(Ampx.grad(w2)))
        end
        @test agree(grads[2][1], grads[1][1]; rtol = 1e-6)
        @test agree(grads[2][2], grads[1][2]; rtol = 1e-6)
        @test all(cb -> cb.released, ctx.callbacks)  # the backward released the segment

        w = param(ctx, w2s[1:6], (2, 3))
        calls = Ref(0)
        function flaky(inp)
            calls[] += 1
            calls[] > 1 && error("recompute failed")
            Ampx.linear(inp, w)
        end
        loss = sum(Ampx.checkpoint(flaky, x))
        err = error_of(() -> Ampx.backward!(loss))
        @test err isa ErrorException && occursin("recompute failed", err.msg)
        err = error_of(() -> Ampx.checkpoint(inp -> (Ampx.relu(inp), Ampx.relu(inp)), x))
        @test err isa ArgumentError && occursin("1 Tensor", err.msg)
        err = error_of(() -> Ampx.checkpoint(inp -> error("forward failed"), x))
        @test err isa ErrorException && occursin("forward failed", err.msg)
        two = Ampx.checkpoint(inp -> (Ampx.relu(inp), Ampx.sigmoid(inp)), x; num_outputs = 2)
        @test length(two) == 2 && size(two[2]) == (4, 3)
        @test_throws ArgumentError Ampx.checkpoint(() -> x)  # no inputs and no ctx
        @test Ampx.scope_depth(ctx) == 0
        inside = Ref(-1)
        Ampx.checkpoint(inp -> (inside[] = Ampx.scope_depth(ctx); Ampx.relu(inp)), x)
        @test inside[] == 1  # ampx opens a scope around the segment
        close(ctx)
    end

    @testset "learning-rate schedules: the closed forms of ampx.h" begin
        base, W, total = 0.05, 10, 50
        cosine = Ampx.lr_schedule(decay = LR_COSINE, warmup_steps = W, warmup_start_factor = 0.1,
                                  total_steps = total, min_lr = 1e-4)
        linear = Ampx.lr_schedule(decay = LR_LINEAR, warmup_steps = W, total_steps = total,
                                  end_factor = 0.2)
        steps = Ampx.lr_schedule(decay = LR_STEP, step_size = 7, gamma = 0.5)
        for k in (0, 3, 10, 25, 50, 80)
            j = k - W
            warm(s) = base * (s + (1 - s) * k / W)
            @test Ampx.lr_schedule_value(cosine, base, k) ≈
                  (k < W ? warm(0.1) : 1e-4 + (base - 1e-4) * (1 + cos(pi * j / (total - W))) / 2) rtol = 1e-12
            @test Ampx.lr_schedule_value(linear, base, k) ≈
                  (k < W ? warm(0.0) : base * (1 + (0.2 - 1) * min(j, total - W) / (total - W))) rtol = 1e-12
            @test Ampx.lr_schedule_value(steps, base, k) ≈ base * 0.5^fld(k, 7) rtol = 1e-12
        end

        ctx = Context()
        p = param(ctx, ones(Float32, 4), (4,))
        opt = Ampx.sgd(ctx, [p], Ampx.sgd_options(lr = base))
        Ampx.set_lr_schedule!(opt, 0, cosine)
        @test Ampx.lr_schedule(opt, 0) == cosine
        expected = ones(Float32, 4)
        for k in 0:2
            Ampx.set_grad!(p, Tensor(ctx, ones(Float32, 4), (4,)))
            Ampx.step!(opt)
            expected .-= Float32(Ampx.lr_schedule_value(cosine, base, k))
        end
        @test Ampx.step_count(opt) == 3
        @test Ampx.to_host(Float32, p) == expected
        err = error_of(() -> Ampx.set_lr_schedule!(opt, 0, Ampx.lr_schedule(decay = LR_COSINE,
                                                                            total_steps = 0)))
        @test err isa AmpxError && err.status == ERR_INVALID_ARGUMENT
        @test Ampx.lr_schedule(opt, 0) == cosine  # nothing changed
        err = error_of(() -> Ampx.set_lr_schedule!(opt, 1, cosine))  # no group 1
        @test err isa AmpxError && err.status == ERR_INVALID_ARGUMENT
        close(ctx)
    end

    @testset "the precision doctor: planted gradients in their bins" begin
        ctx = Context()
        planted = vcat(zeros(3), fill(2.0^-30, 5), fill(2.0^-20, 7), ones(11), fill(-2.0^-14, 2), [1024.0])
        n = length(planted)
        p = param(ctx, zeros(Float32, n), (n,))
        Ampx.set_name!(p, "planted")
        Ampx.set_grad!(p, Tensor(ctx, Float32.(planted), (n,)))
        opt = Ampx.sgd(ctx, [p], Ampx.sgd_options(lr = 0.0))
        doctor = Doctor(ctx, opt, Ampx.doctor_options(interval = 1))
        @test isempty(Ampx.params(doctor))
        err = error_of(() -> Ampx.param_stats(doctor, 0))
        @test err isa AmpxError && err.status == ERR_ORDER
        Ampx.step!(opt)
        overview = Ampx.examine(doctor)
        @test (overview.steps, overview.sample_step, overview.sample_scale, overview.param_count,
               overview.history_count, overview.missed_steps) == (1, 1, 1.0, 1, 1, 0)
        s = Ampx.param_stats(doctor, 0)
        @test (s.index, s.name, s.param_dtype, s.grad_dtype, s.elements) == (0, "planted", F32, F32, n)
        @test length(s.histogram) == Ampx.DOCTOR_BINS == 84
        bins = Dict(i - 1 => c for (i, c) in enumerate(s.histogram) if c != 0)
        @test bins == Dict(Ampx.LibAmpx.AMPX_DOCTOR_BIN_ZERO => 3, Ampx.binade_bin(-30) => 5,
                           Ampx.binade_bin(-20) => 7, Ampx.binade_bin(0) => 11,
                           Ampx.binade_bin(-14) => 2, Ampx.binade_bin(10) => 1)
        @test Ampx.binade_bin(-30) == 2 - 30 + 64
        @test_throws ArgumentError Ampx.binade_bin(16)
        # fp16 zero: |u| <= 2^-25 (the zeros and 2^-30); subnormal: 2^-20.
        @test (s.fp16_zero_unscaled, s.fp16_subnormal_unscaled) == (8 / n, 7 / n)
        @test (s.amax, s.amax_scaled, s.headroom, s.headroom_unbounded) == (1024.0, 1024.0, 5, false)
        @test s.grad_norm ≈ sqrt(sum(planted .^ 2)) rtol = 1e-9
        @test s.lost_update_fraction === nothing  # fp32 parameters lose no updates
        history = Ampx.history(doctor)
        @test length(history) == 1
        @test (history[1].step, history[1].scale, history[1].sampled) == (1, 1.0, 1)
        @test Ampx.finding_code_name(3) == "scale_too_low"
        @test Ampx.cause_name(4) == "no_loss_scaling"
        @test Ampx.finding_code_name(99) === nothing
        @test Ampx.findings(doctor) isa Vector
        @test !isempty(Ampx.summary(doctor))
        mktempdir() do folder
            path = joinpath(folder, "report.html")
            Ampx.write_report(doctor, path)
            @test startswith(read(path, String), "<!DOCTYPE html>")
            err = error_of(() -> Ampx.write_report(doctor, joinpath(folder, "missing", "r.html")))
            @test err isa AmpxError && err.status == ERR_IO
        end
        Ampx.set_interval!(doctor, 0)
        err = error_of(() -> Ampx.set_interval!(doctor, -1))
        @test err isa AmpxError && err.status == ERR_INVALID_ARGUMENT
        close(doctor)
        close(doctor)
        err = error_of(() -> Ampx.examine(doctor))
        @test err isa AmpxError && err.status == ERR_STALE_HANDLE
        close(ctx)
    end

    @testset "safetensors: a round trip, metadata and bad input" begin
        ctx = Context()
        mktempdir() do folder
            path = joinpath(folder, "weights.safetensors")
            a = Tensor(ctx, Float32[1, 2, 3, 4, 5, 6], (2, 3))
            b = Tensor(ctx, Int64[7, 8], (2,))
            Ampx.save_safetensors(path, [a, b]; names = ["alpha", "beta"],
                                  metadata = Dict("format" => "pt", "step" => "3"))
            f = SafetensorsFile(ctx, path)
            @test length(f) == 2
            @test sort(keys(f)) == ["alpha", "beta"]
            e = f["alpha"]
            @test (e.name, e.dtype, e.dtype_name, e.shape, e.nbytes) == ("alpha", F32, "F32", (2, 3), 24)
            @test Ampx.metadata(f) == Dict("format" => "pt", "step" => "3")
            # The format: an 8-byte little-endian header length, then JSON.
            bytes = read(path)
            header_length = reinterpret(UInt64, bytes[1:8])[1]
            @test occursin("\"alpha\"", String(bytes[9:8+header_length]))
            t = Ampx.load_tensor(f, "alpha"; copy = true)
            @test Ampx.to_host(Float32, t) == Float32[1, 2, 3, 4, 5, 6]
            dst = zeros(ctx, I64, (2,))
            Ampx.load_into!(f, ["beta"], [dst])
            @test Ampx.to_host(Int64, dst) == Int64[7, 8]
            as_i32 = zeros(ctx, I32, (2, 3))
            err = error_of(() -> Ampx.load_into!(f, ["alpha"], [as_i32]))
            @test err isa AmpxError && err.status == ERR_DTYPE
            Ampx.load_into!(f, ["alpha"], [as_i32]; convert = true)
            @test Ampx.to_host(Int32, as_i32) == Int32[1, 2, 3, 4, 5, 6]
            err = error_of(() -> f["gamma"])
            @test err isa AmpxError && err.status == ERR_INVALID_ARGUMENT
            @test_throws ArgumentError Ampx.load_into!(f, ["alpha", "beta"], [dst])
            @test_throws ArgumentError Ampx.save_safetensors(path, [a]; names = ["bad\0name"])
            close(f)

            truncated = joinpath(folder, "truncated.safetensors")
            write(truncated, bytes[1:12])
            err = error_of(() -> SafetensorsFile(ctx, truncated))
            @test err isa AmpxError && err.status == ERR_CORRUPT
            err = error_of(() -> SafetensorsFile(ctx, joinpath(folder, "none.safetensors")))
            @test err isa AmpxError && err.status == ERR_IO
        end
        close(ctx)
    end

    @testset "data parallel in one process: options and errors" begin
        ctx = Context()
        options = Ampx.data_parallel_options()
        @test (options.struct_size, options.bucket_bytes, options.first_bucket_bytes) ==
              (sizeof(Ampx.DataParallelOptions), 25 << 20, 1 << 20)
        @test (options.average, options.reduce_in_fp32, options.overlap, options.zero_stage) == (1, 0, 1, 0)
        err = error_of(() -> Ampx.comm_init_nccl(ctx, zeros(UInt8, 128), 1, 0))
        @test err isa AmpxError && err.status == ERR_NOT_SUPPORTED &&
              occursin("ampx_comm_init_nccl", err.message)
        err = error_of(() -> Ampx.comm_init_nccl(ctx, zeros(UInt8, 5), 1, 0))
        @test err isa AmpxError && err.status == ERR_INVALID_ARGUMENT && occursin("128", err.message)
        err = error_of(() -> Ampx.comm_from_nccl(ctx, C_NULL))
        @test err isa AmpxError && err.status == ERR_INVALID_ARGUMENT
        id = error_of(Ampx.nccl_unique_id)
        if id isa AmpxError  # no NCCL here: the message says what is missing
            @test id.status == ERR_NOT_SUPPORTED && occursin("ampx_nccl_unique_id", id.message)
        end
        close(ctx)
    end
    # grad, backward!'s retain_graph/create_graph and unscale_tensor (issue 41),
    # bce_with_logits' weight/pos_weight (issue 43), against references in
    # Float64 computed here: closed forms, central differences of a small
    # MLP's gradient, torch's formula. ampx computes in fp32: 1e-5 relative
    # for closed forms and losses, 1e-4 of the largest element for the
    # Hessian-vector product (a missing term of a formula is off by O(1)).
    @testset "grad: x^3 to third order, unused inputs, bad input, retain_graph" begin
        ctx = Context()
        xs = Float32[-1.5, -0.25, 0.5, 2.0]
        x64 = Float64.(xs)
        x = param(ctx, xs, (4,))
        for cube in (Ampx.mul(Ampx.mul(x, x), x), Ampx.pow(x, 3))
            g = Ampx.grad(sum(cube), x; create_graph = true)[1]
            @test Ampx.requires_grad(g)
            @test agree(host(g), 3 .* x64 .^ 2; rtol = 1e-5)
            h = Ampx.grad(sum(g), [x]; create_graph = true)[1]
            @test agree(host(h), 6 .* x64; rtol = 1e-5, atol = 1e-6)
            t = Ampx.grad(sum(h), (x,))[1]
            @test agree(host(t), fill(6.0, 4); rtol = 1e-5)
            @test Ampx.grad(x) === nothing  # nothing accumulated into x's gradient
        end

        z = param(ctx, xs, (4,))
        loss = sum(Ampx.mul(x, x))
        err = error_of(() -> Ampx.grad(loss, [x, z]; retain_graph = true))
        @test err isa AmpxError && err.status == ERR_INVALID_ARGUMENT &&
              occursin("inputs[1]", err.message) && occursin("allow_unused", err.message)
        gs = Ampx.grad(loss, [x, z]; allow_unused = true)
        @test length(gs) == 2 && gs[2] === nothing
        @test agree(host(gs[1]), 2 .* x64; rtol = 1e-6)

        y = tanh(x)  # four elements
        err = error_of(() -> Ampx.grad(y, x))
        @test err isa AmpxError && err.status == ERR_SHAPE && occursin("grad_outputs", err.message)
        err = error_of(() -> Ampx.grad(y, x; grad_outputs = [zeros(ctx, F32, (3,))]))
        @test err isa AmpxError && err.status == ERR_SHAPE
        err = error_of(() -> Ampx.grad(y, x; grad_outputs = [zeros(ctx, F16, (4,))]))
        @test err isa AmpxError && err.status == ERR_DTYPE
        @test_throws ArgumentError Ampx.grad(y, x; grad_outputs = [nothing, nothing])
        @test_throws ArgumentError Ampx.grad(y, [x, 1.0])
        v = Float32[1, -2, 0.5, 3]
        dx = Ampx.grad(y, x; grad_outputs = [Tensor(ctx, v, (4,))], retain_graph = true)[1]
        @test agree(host(dx), (1 .- tanh.(x64) .^ 2) .* v; rtol = 1e-5, atol = 1e-6)

        # Without create_graph the gradient is not differentiable again; a
        # third pass over a freed tape is an ORDER error naming retain_graph.
        s = sum(y)
        g = Ampx.grad(s, x)[1]
        @test !Ampx.requires_grad(g)
        err = error_of(() -> Ampx.grad(sum(g), x))
        @test err isa AmpxError && err.status == ERR_INVALID_ARGUMENT
        err = error_of(() -> Ampx.grad(s, x))
        @test err isa AmpxError && err.status == ERR_ORDER && occursin("retain_graph", err.message)

        # backward! with retain_graph accumulates; with create_graph the
        # gradient can be differentiated.
        w = param(ctx, xs, (4,))
        l = sum(Ampx.mul(Ampx.mul(w, w), w))
        Ampx.backward!(l; retain_graph = true)
        Ampx.backward!(l)
        @test agree(host(Ampx.grad(w)), 6 .* x64 .^ 2; rtol = 1e-5)
        err = error_of(() -> Ampx.backward!(l; retain_graph = false))
        @test err isa AmpxError && err.status == ERR_ORDER
        u = param(ctx, xs, (4,))
        Ampx.backward!(sum(Ampx.mul(Ampx.mul(u, u), u)); create_graph = true)
        gu = Ampx.grad(u)
        @test Ampx.requires_grad(gu)
        @test agree(host(Ampx.grad(sum(gu), u)[1]), 6 .* x64; rtol = 1e-5, atol = 1e-6)
        close(ctx)
    end

    @testset "cast and copy are recorded: torch's gradients, first and second order" begin
        # loss = sum(x .* x) + sum(y .* y), y = x cast; torch's x.grad and
        # d sum(g .* g)/dx (torch.autograd.grad with create_graph). Each step
        # is exact or one rounding of the format; a dropped cast gives 2x.
        ctx = Context()
        xs = Float32[0.3, -1.7, 2.25]
        for (name, f, want_g, want_h) in (
                ("bf16", x -> Ampx.cast(x, BF16), [1.201562523841858, -6.806250095367432, 9.0],
                 [9.618749618530273, -54.474998474121094, 72.0]),
                ("f16", x -> Ampx.cast(x, F16), [1.200097680091858, -6.800390720367432, 9.0],
                 [9.601171493530273, -54.404685974121094, 72.0]),
                ("f32", x -> Ampx.cast(x, F32), [1.2000000476837158, -6.800000190734863, 9.0],
                 [9.600000381469727, -54.400001525878906, 72.0]),
                ("copy", copy, [1.2000000476837158, -6.800000190734863, 9.0],
                 [9.600000381469727, -54.400001525878906, 72.0]))
            loss(x, y) = Ampx.add(sum(Ampx.mul(x, x)), sum(Ampx.mul(y, y)))
            x = param(ctx, xs, (3,))
            y = f(x)
            @test Ampx.requires_grad(y)
            Ampx.backward!(loss(x, y))
            @test agree(host(Ampx.grad(x)), want_g; rtol = 2e-6)
            x = param(ctx, xs, (3,))
            g = Ampx.grad(loss(x, f(x)), x; create_graph = true)[1]
            @test agree(host(g), want_g; rtol = 2e-6)
            h = Ampx.grad(sum(Ampx.mul(g, g)), x)[1]
            @test agree(host(h), want_h; rtol = 2e-6)
        end
        @test !Ampx.requires_grad(Ampx.cast(Tensor(ctx, xs, (3,)), BF16))
        close(ctx)
    end

    @testset "grad: a Hessian-vector product of a small MLP against central differences" begin
        ctx = Context()
        N, I, H, O = 6, 3, 5, 2
        draw(n, seed) = Float32[sin(seed * k) * 0.8 for k in 1:n]
        shapes = ((H, I), (H,), (O, H), (O,))
        init = [draw(prod(sh), 0.7 + 0.3 * k) for (k, sh) in enumerate(shapes)]
        vecs = [draw(prod(sh), 1.9 + 0.4 * k) for (k, sh) in enumerate(shapes)]
        xs, ys = draw(N * I, 1.3), draw(N * O, 3.7)
        params = [param(ctx, init[k], shapes[k]) for k in 1:4]
        x, y = Tensor(ctx, xs, (N, I)), Tensor(ctx, ys, (N, O))
        hidden = tanh(Ampx.linear(x, params[1], params[2]))
        loss = Ampx.mse_loss(Ampx.linear(hidden, params[3], params[4]), y)
        grads = Ampx.grad(loss, params; create_graph = true)
        dot = sum(Ampx.mul(grads[1], Tensor(ctx, vecs[1], shapes[1])))
        for k in 2:4
            dot = Ampx.add(dot, sum(Ampx.mul(grads[k], Tensor(ctx, vecs[k], shapes[k]))))
        end
        hv = Ampx.grad(dot, params)

        # The MLP's gradient in Float64 (row-major flat parameters).
        function gradient(p)
            w1, b1, w2, b2 = p
            X, Y = Float64.(xs), Float64.(ys)
            g = [zeros(H * I), zeros(H), zeros(O * H), zeros(O)]
            for n in 0:N-1
                a = [tanh(b1[h+1] + sum(X[n*I+i+1] * w1[h*I+i+1] for i in 0:I-1)) for h in 0:H-1]
                d_out = [2 * (b2[o+1] + sum(a[h+1] * w2[o*H+h+1] for h in 0:H-1) - Y[n*O+o+1]) / (N * O)
                         for o in 0:O-1]
                g[4] .+= d_out
                for h in 0:H-1
                    d_z = sum(d_out[o+1] * w2[o*H+h+1] for o in 0:O-1) * (1 - a[h+1]^2)
                    g[2][h+1] += d_z
                    for o in 0:O-1
                        g[3][o*H+h+1] += d_out[o+1] * a[h+1]
                    end
                    for i in 0:I-1
                        g[1][h*I+i+1] += d_z * X[n*I+i+1]
                    end
                end
            end
            g
        end
        eps = 1e-4
        plus = gradient([Float64.(init[k]) .+ eps .* vecs[k] for k in 1:4])
        minus = gradient([Float64.(init[k]) .- eps .* vecs[k] for k in 1:4])
        want = [(plus[k] .- minus[k]) ./ (2eps) for k in 1:4]
        scale = maximum(maximum(abs.(w)) for w in want)
        @test scale > 1e-2
        for k in 1:4
            @test agree(host(hv[k]), want[k]; atol = 1e-4 * scale)
            @test agree(host(grads[k]), gradient([Float64.(p) for p in init])[k]; atol = 1e-5)
        end
        close(ctx)
    end

    @testset "unscale_tensor and the gradient-penalty recipe skipping an overflow" begin
        ctx = Context()
        scaler = Scaler(ctx, Ampx.scaler_options(init_scale = 1024))
        x0 = Float32[-1, 0.25, 0.75]
        t = tanh.(Float64.(x0))
        x = param(ctx, x0, (3,))
        scaled = Ampx.scale_loss(scaler, sum(tanh(x)))
        @test Ampx.requires_grad(scaled)
        g = Ampx.grad(scaled, x; create_graph = true)[1]
        u = Ampx.unscale_tensor(scaler, g)
        @test agree(host(g), 1024 .* (1 .- t .^ 2); rtol = 1e-6)
        @test agree(host(u), 1 .- t .^ 2; rtol = 1e-6)
        @test agree(host(Ampx.grad(sum(u), x)[1]), -2 .* t .* (1 .- t .^ 2); rtol = 1e-5)
        err = error_of(() -> Ampx.unscale_tensor(scaler, Tensor(ctx, Int64[1, 2], (2,))))
        @test err isa AmpxError && err.status == ERR_DTYPE

        # At a scale of 2^127 the scaled gradients (the largest > 2 unscaled:
        # the loss is 16 times a sum) overflow fp32, the penalty is inf, the
        # step is skipped and the scale backs off by 2^-24; at 2^103 the
        # next step is taken.
        w = param(ctx, Float32[0.5, -0.3, 0.8, 0.1, -0.6, 0.4], (2, 3))
        xs = Tensor(ctx, Float32[0.3, -0.2, 0.9, -0.7, 0.5, 0.1, 0.2, 0.8, -0.4, -0.9, 0.6, 0.3], (4, 3))
        opt = Ampx.sgd(ctx, [w], Ampx.sgd_options(lr = 0.1))
        scaler = Scaler(ctx, Ampx.scaler_options(init_scale = 2.0^127, backoff_factor = 2.0^-24))
        taken = Bool[]
        for step in 1:2
            before = host(w)
            loss = Ampx.affine(sum(tanh(Ampx.linear(xs, w))), 16, 0)
            g = Ampx.grad(Ampx.scale_loss(scaler, loss), w; create_graph = true)[1]
            u = Ampx.unscale_tensor(scaler, g)
            Ampx.backward!(Ampx.add(loss, Ampx.affine(sum(Ampx.mul(u, u)), 0.5, 0)), scaler)
            Ampx.step!(scaler, opt)
            Ampx.update!(scaler)
            Ampx.zero_grad!(opt)
            push!(taken, host(w) != before)
        end
        @test taken == [false, true]
        @test Ampx.counters(scaler).skipped == 1
        @test Ampx.scale(scaler) == 2.0^103
        close(ctx)
    end

    @testset "bce_with_logits with weight and pos_weight: torch's formula" begin
        ctx = Context()
        xs = Float32[4 * sin(1.7 * k) for k in 1:12]
        ts = Float32[0, 1, 0.25, 1, 1, 0, 0.5, 0, 1, 0, 0.75, 1]
        wrow, pcol = Float32[0.5, 1.25, 2, 0.75], Float32[0.5, 3, 1.5]
        w = [Float64(wrow[div(i, 3)+1]) for i in 0:11]  # weight [4, 1]
        p = [Float64(pcol[i%3+1]) for i in 0:11]        # pos_weight [3]
        X, T = Float64.(xs), Float64.(ts)
        logsig = -log1p.(exp.(-abs.(X))) .+ min.(X, 0)
        loss = -w .* (p .* T .* logsig .+ (1 .- T) .* (logsig .- X))
        dx = w .* ((1 .+ (p .- 1) .* T) ./ (1 .+ exp.(-X)) .- p .* T)
        dt = w .* ((logsig .- X) .- p .* logsig)
        for (reduction, divisor) in ((Ampx.REDUCTION_MEAN, 12), (Ampx.REDUCTION_SUM, 1),
                                     (Ampx.REDUCTION_NONE, 1))
            logits, targets = param(ctx, xs, (4, 3)), param(ctx, ts, (4, 3))
            weight = param(ctx, wrow, (4, 1))
            pos_weight = Ampx.cast(Tensor(ctx, pcol, (3,)), BF16)
            out = Ampx.bce_with_logits(logits, targets; reduction = reduction, weight = weight,
                                       pos_weight = pos_weight)
            Ampx.backward!(sum(out))
            want = reduction == Ampx.REDUCTION_NONE ? loss : [sum(loss) / divisor]
            @test agree(host(out), want; rtol = 1e-5, atol = 1e-6)
            @test agree(host(Ampx.grad(logits)), dx ./ divisor; rtol = 1e-5, atol = 1e-6)
            @test agree(host(Ampx.grad(targets)), dt ./ divisor; rtol = 1e-5, atol = 1e-6)
            @test Ampx.grad(weight) === nothing  # no gradient flows to a weight
        end
        logits, targets = Tensor(ctx, xs, (4, 3)), Tensor(ctx, ts, (4, 3))
        err = error_of(() -> Ampx.bce_with_logits(logits, targets; weight = zeros(ctx, F32, (4,))))
        @test err isa AmpxError && err.status == ERR_SHAPE
        err = error_of(() -> Ampx.bce_with_logits(logits, targets;
                                                  pos_weight = Tensor(ctx, Int32[1, 2, 3], (3,))))
        @test err isa AmpxError && err.status == ERR_DTYPE
        close(ctx)
    end

    # FP8 (section 18): casts against the formats' definitions written here,
    # a delayed-scaling recipe against Transformer Engine's formula, a
    # linear model trained under FP8 autocast, the doctor, checkpoints and
    # bad input.
    @testset "FP8 casts follow the formats' definitions" begin
        values = Float32[0, -0.0, 1, 448, 464, 465, 480, 500, -500, 57344, 61439, 61440, 65536, Inf,
                         -Inf, 2.0^-9, 2.0^-10, 3 * 2.0^-10, 2.0^-16, 2.0^-17, 3 * 2.0^-17, 1.0625,
                         1.1875, 0.1, -0.3, 1e-6]
        state = UInt32(12345)
        for _ in 1:500
            state = state * UInt32(1103515245) + UInt32(12345)
            mantissa = Float64(UInt16((state >> 8) & 0xffff)) / 65536 + 0.5
            push!(values, Float32((isodd(state) ? -1 : 1) * mantissa * 2.0^(Int(state >> 24) % 36 - 20)))
        end
        ctx = Context()
        src = Tensor(ctx, values, (length(values),))
        # cast follows torch (E4M3 saturates, E5M2 overflows to inf); copy_fp8! chooses.
        for (dtype, overflow, saturate) in ((Ampx.F8E4M3, nothing, true), (Ampx.F8E5M2, nothing, false),
                                            (Ampx.F8E4M3, Ampx.FP8_NO_SATURATE, false),
                                            (Ampx.F8E5M2, Ampx.FP8_SATURATE, true))
            dst = overflow === nothing ? Ampx.cast(src, dtype) :
                  Ampx.copy_fp8!(Tensor(undef, ctx, dtype, (length(values),)), src; overflow = overflow)
            @test Ampx.to_host(UInt8, dst) == [fp8_encode(FP8_FORMATS[dtype], Float64(v), saturate) for v in values]
        end
        named = Tensor(ctx, Float32[448, 500, 2.0^-9, 2.0^-10, 1.0625, 1.1875], (6,))
        @test Ampx.to_host(UInt8, Ampx.cast(named, Ampx.F8E4M3)) == UInt8[0x7e, 0x7e, 0x01, 0x00, 0x38, 0x3a]
        named = Tensor(ctx, Float32[57344, 61440, Inf], (3,))
        @test Ampx.to_host(UInt8, Ampx.cast(named, Ampx.F8E5M2)) == UInt8[0x7b, 0x7c, 0x7c]
        for (dtype, f) in FP8_FORMATS
            back = Ampx.to_host(Float32, Ampx.cast(Tensor(ctx, collect(0x00:0xff), (256,); dtype = dtype), F32))
            want = [fp8_decode(f, code) for code in 0x00:0xff]
            @test all((isnan.(want) .& isnan.(back)) .| (Float64.(back) .== want))
        end
        close(ctx)
    end

    @testset "FP8 delayed scaling follows Transformer Engine" begin
        ctx = Context()
        recipe = Fp8Recipe(ctx; amax_history_len = 4, margin = 1)
        fwd = Ampx.add_tensor!(recipe, Ampx.FP8_FORWARD; name = "x")
        bwd = Ampx.add_tensor!(recipe, Ampx.FP8_BACKWARD; name = "dy")
        @test Ampx.slot_count(recipe) == 2
        @test Ampx.slot_info(recipe, bwd).dtype == Ampx.F8E5M2
        # TE's default (fused) update: (fp8_max * 2^-margin) / amax in
        # Float32, amax the history's max as fmaxf takes it (NaN skipped);
        # the previous scale for a 0 or non-finite amax, floatmax for an
        # infinite quotient; a zero step amax is not rolled in (below).
        function te_scale(fp8_max, history, previous)
            amax = maximum(filter(!isnan, history); init = 0.0f0)
            (amax == 0 || !isfinite(amax)) && return previous
            scale = Float32(fp8_max) * 0.5f0 / amax
            isinf(scale) ? floatmax(Float32) : scale
        end
        amaxes = Union{Nothing,Float32}[0, 3, 100, nothing, 0.5, Inf, 2, 1, 1, 1, 1, 1f-40, 0.25]
        history, scales = zeros(Float32, 4), Dict(fwd => 1.0f0, bwd => 1.0f0)
        fmax = Dict(fwd => 448, bwd => 57344)
        for amax in amaxes
            for slot in (fwd, bwd)
                @test Ampx.to_host(Float32, Ampx.scale_tensor(recipe, slot)) == [scales[slot]]
                amax === nothing && continue
                q = Ampx.quantize(recipe, slot, Tensor(ctx, Float32[amax / 2, -amax, 0], (3,)))
                f = FP8_FORMATS[slot == fwd ? Ampx.F8E4M3 : Ampx.F8E5M2]
                @test Ampx.to_host(UInt8, q) ==
                      [fp8_encode(f, Float64(v * scales[slot]), true) for v in Float32[amax / 2, -amax, 0]]
            end
            Ampx.update!(recipe)
            step = amax === nothing ? 0.0f0 : amax
            step != 0 && (history = vcat(history[2:end], step))
            for slot in (fwd, bwd)
                step != 0 && (scales[slot] = te_scale(fmax[slot], history, scales[slot]))
                info = Ampx.slot_info(recipe, slot)
                @test info.history == history
                @test info.scale == scales[slot]
                @test info.scale_inv == 1.0f0 / scales[slot]
            end
        end
        @test Ampx.slot_info(recipe, fwd).name == "x"
        close(recipe)
        close(ctx)
    end

    @testset "FP8 autocast trains, the doctor, checkpoints" begin
        ctx = Context()
        lcg = UInt32(1)
        rnd(n, scale) = [begin
                             lcg = lcg * UInt32(1664525) + UInt32(1013904223)
                             Float32((Float64(lcg >> 8) / 2^24 * 2 - 1) * scale)
                         end for _ in 1:n]
        xs, tw = rnd(32 * 16, 1), rnd(16 * 16, 1)
        ys = Float32[sum(xs[div(i, 16)*16+k+1] * tw[(i%16)*16+k+1] for k in 0:15) for i in 0:32*16-1]
        x, y = Tensor(ctx, xs, (32, 16)), Tensor(ctx, ys, (32, 16))
        w = Tensor(ctx, rnd(256, 0.1), (16, 16))
        Ampx.set_requires_grad!(w)
        Ampx.set_name!(w, "w")
        opt = Ampx.sgd(ctx, [w], Ampx.sgd_options(lr = 0.5))
        recipe = Fp8Recipe(ctx; amax_history_len = 16)
        policy = Autocast(ctx, Ampx.autocast_options(dtype = BF16))
        Ampx.set_fp8!(policy, recipe; min_gemm_size = 0)
        losses = Float32[]
        for _ in 1:12
            Ampx.zero_grad!(opt)
            loss = Ampx.with_autocast(() -> Ampx.mse_loss(Ampx.linear(x, w), y), policy)
            Ampx.backward!(loss)
            push!(losses, Ampx.to_host(Float32, loss)[1])
            Ampx.step!(opt)
            Ampx.update!(recipe)
        end
        @test all(losses[2:end] .< losses[1:end-1])
        @test losses[end] < 0.6 * losses[1]
        stats = Ampx.fp8_stats(policy)
        @test (stats.fp8_products, stats.fallbacks) == (12, 0)
        @test [Ampx.slot_info(recipe, i).name for i in 0:Ampx.slot_count(recipe)-1] ==
              ["w:input", "w:weight", "w:grad_output"]
        Ampx.set_fp8!(policy, recipe; min_gemm_size = Int64(1) << 40)
        Ampx.with_autocast(() -> Ampx.linear(x, w), policy)
        @test Ampx.fp8_stats(policy).fallbacks == 1
        Ampx.set_fp8!(policy, nothing)

        # The doctor at scale 1: 1e-4 flushes in E4M3 only, 1000 saturates E4M3 only.
        plain = Fp8Recipe(ctx)
        act = Ampx.add_tensor!(plain; name = "act")
        report = Ampx.inspect(plain, act, Tensor(ctx, Float32[1e-4, 1000, 1, 0], (4,)))
        @test report.count == 3
        @test report.flushed_e4m3 ≈ 1 / 3 && report.saturated_e4m3 ≈ 1 / 3
        @test (report.flushed_e5m2, report.saturated_e5m2, report.dtype) == (0.0, 0.0, Ampx.F8E4M3)
        @test occursin("act", Ampx.summary(plain))

        mktempdir() do folder
            path = joinpath(folder, "fp8.ckpt")
            Ampx.save_checkpoint(path, [w]; fp8_recipe = recipe)
            restored = Fp8Recipe(ctx; amax_history_len = 16)
            Ampx.load_checkpoint(path, [w]; fp8_recipe = restored)
            @test Ampx.slot_info(restored, 1).scale == Ampx.slot_info(recipe, 1).scale
            @test Ampx.slot_info(restored, 1).history == Ampx.slot_info(recipe, 1).history
            err = error_of(() -> Ampx.load_checkpoint(path, [w]; fp8_recipe = plain))
            @test err isa AmpxError && err.status == ERR_INVALID_ARGUMENT
        end
        close(ctx)
    end

    @testset "FP8 bad input" begin
        ctx = Context()
        err = error_of(() -> Fp8Recipe(ctx; amax_history_len = 0))
        @test err isa AmpxError && err.status == ERR_INVALID_ARGUMENT && occursin("amax_history_len", err.message)
        err = error_of(() -> Fp8Recipe(ctx; margin = -1))
        @test err isa AmpxError && err.status == ERR_INVALID_ARGUMENT
        recipe = Fp8Recipe(ctx)
        slot = Ampx.add_tensor!(recipe; name = "a")
        err = error_of(() -> Ampx.add_tensor!(recipe; name = "a"))
        @test err isa AmpxError && err.status == ERR_INVALID_ARGUMENT
        src = Tensor(ctx, Float32[1], (1,))
        e5 = Tensor(undef, ctx, Ampx.F8E5M2, (1,))
        err = error_of(() -> Ampx.quantize!(recipe, slot, src, e5))
        @test err isa AmpxError && err.status == ERR_DTYPE
        err = error_of(() -> Ampx.copy_fp8!(Tensor(undef, ctx, F32, (1,)), src))
        @test err isa AmpxError && err.status == ERR_DTYPE
        policy = Autocast(ctx)
        err = error_of(() -> Ampx.set_fp8!(policy, recipe; min_gemm_size = -1))
        @test err isa AmpxError && err.status == ERR_INVALID_ARGUMENT
        close(recipe)
        @test Ampx.isclosed(recipe)
        err = error_of(() -> Ampx.update!(recipe))
        @test err isa AmpxError && err.status == ERR_STALE_HANDLE
        err = error_of(() -> Ampx.set_fp8!(policy, recipe))
        @test err isa AmpxError && err.status == ERR_STALE_HANDLE
        close(ctx)
    end
end
