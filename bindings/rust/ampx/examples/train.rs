//! The example of bindings/rust/README.md: a tiny bf16 autocast + scaler +
//! AdamW regression. Run: `cargo run --example train` (with AMPX_LIB_DIR set).
use ampx::{Activation, Autocast, AutocastOptions, Context, DType, Optimizer, Reduction,
           Scaler, ScalerOptions, Tensor};

fn main() -> ampx::Result<()> {
    let ctx = Context::new()?;
    let x = Tensor::from_slice(&ctx, &[4, 2], &[0.5f32, -1.0, 1.5, 2.0, -0.5, 0.0, 1.0, 1.0])?;
    let y = Tensor::from_slice(&ctx, &[4, 1], &[1.0f32, 0.0, -1.0, 0.5])?;
    let w = Tensor::from_slice(&ctx, &[1, 2], &[0.1f32, -0.2])?;
    w.set_requires_grad(true)?;

    let opt = Optimizer::adamw(&ctx, &[&w], 1e-2)?;
    let scaler = Scaler::new(&ctx, &ScalerOptions::default())?;
    let autocast = Autocast::new(&ctx, &AutocastOptions::with_dtype(DType::BF16))?;
    for step in 0..100 {
        let loss = autocast.run(|| {
            x.linear(&w, None, Activation::None)?.mse_loss(&y, Reduction::Mean)
        })?;
        loss.backward(Some(&scaler))?;       // scaled gradients
        scaler.unscale(&opt)?;               // clipping needs true gradients...
        opt.clip_grad_norm(1.0, 2.0, false)?; // ...else Err(Status::Order)
        scaler.step(&opt)?;                  // skipped on inf/NaN
        scaler.update()?;
        opt.zero_grad()?;
        if step % 20 == 0 {
            println!("step {step} loss {}", loss.item::<f32>()?);
        }
    }
    Ok(())
}
