//! Test (4): a small mixed-precision training run -- bf16 and f16 autocast,
//! a dynamic loss scaler and AdamW -- whose loss decreases.
use ampx::{
    Activation, AdamOptions, Autocast, AutocastOptions, Context, DType, Optimizer, Reduction, Result, Scaler,
    ScalerOptions, Tensor,
};

/// A deterministic pseudo-random stream in [-1, 1).
fn lcg(seed: &mut u64) -> f32 {
    *seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    ((*seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
}

fn train(dtype: DType) -> Result<(f32, f32, ampx::ScalerCounters)> {
    let ctx = Context::new()?;
    let mut seed = 42u64;
    let (n, d_in, d_hidden) = (64i64, 8i64, 32i64);
    let x: Vec<f32> = (0..n * d_in).map(|_| lcg(&mut seed)).collect();
    // Target: a fixed nonlinear function of the inputs.
    let y: Vec<f32> = x.chunks(d_in as usize).map(|r| (r[0] * r[1] + r[2]).tanh() - 0.5 * r[3]).collect();
    let x = Tensor::from_slice(&ctx, &[n, d_in], &x)?;
    let y = Tensor::from_slice(&ctx, &[n, 1], &y)?;
    let init = |shape: &[i64], scale: f32, seed: &mut u64| -> Result<Tensor> {
        let count: i64 = shape.iter().product();
        let v: Vec<f32> = (0..count).map(|_| lcg(seed) * scale).collect();
        let t = Tensor::from_slice(&ctx, shape, &v)?;
        t.set_requires_grad(true)?;
        Ok(t)
    };
    let w1 = init(&[d_hidden, d_in], 0.35, &mut seed)?;
    let b1 = init(&[d_hidden], 0.0, &mut seed)?;
    let w2 = init(&[1, d_hidden], 0.18, &mut seed)?;
    let b2 = init(&[1], 0.0, &mut seed)?;
    let opt = Optimizer::adam(&ctx, &[&w1, &b1, &w2, &b2], &AdamOptions::adamw().with_lr(1e-2))?;
    let scaler = Scaler::new(&ctx, &ScalerOptions { growth_interval: 10, ..Default::default() })?;
    scaler.attach(&opt)?;
    let autocast = Autocast::new(&ctx, &AutocastOptions::with_dtype(dtype))?;

    let mut losses = Vec::new();
    for _ in 0..150 {
        let loss = autocast.run(|| {
            let h = x.linear(&w1, Some(&b1), Activation::Gelu)?;
            h.linear(&w2, Some(&b2), Activation::None)?.mse_loss(&y, Reduction::Mean)
        })?;
        assert_eq!(loss.dtype()?, DType::F32, "losses run in fp32 under autocast");
        losses.push(loss.item::<f32>()?);
        loss.backward(Some(&scaler))?;
        scaler.unscale(&opt)?;
        opt.clip_grad_norm(5.0, 2.0, false)?;
        scaler.step(&opt)?;
        scaler.update()?;
        opt.zero_grad()?;
    }
    assert!(losses.iter().all(|l| l.is_finite()));
    Ok((losses[0], *losses.last().unwrap(), scaler.counters()?))
}

#[test]
fn bf16_autocast_with_scaler_and_adamw_learns() {
    let (first, last, counters) = train(DType::BF16).unwrap();
    eprintln!("bf16: loss {first} -> {last}, {counters:?}");
    assert!(last < 0.3 * first, "loss {first} -> {last}");
    assert_eq!(counters.updates, 150);
}

#[test]
fn f16_autocast_with_scaler_and_adamw_learns() {
    let (first, last, counters) = train(DType::F16).unwrap();
    eprintln!("f16: loss {first} -> {last}, {counters:?}");
    assert!(last < 0.3 * first, "loss {first} -> {last}");
    // The scale grows until the f16 gradients overflow, then backs off.
    assert!(counters.backoffs >= 1, "{counters:?}");
}
