# Tests of the Julia binding. bindings/julia/run_tests.sh runs them (when
# `julia` exists) with AMPX_LIB pointing at libampx and AMPX_TINY_TRAIN at
# the C reference program.
using Test
using Printf
using Ampx
using Ampx: F32, BF16, ERR_SHAPE, ERR_ORDER, ACTIVATION_RELU, ACTIVATION_NONE, ACTIVATION_GELU

hex(x::Float32) = string(reinterpret(UInt32, x), base = 16, pad = 8)
series(n, f) = Float32[Float32(f(i)[1]) / Float32(f(i)[2]) for i in 0:n-1]

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
end
