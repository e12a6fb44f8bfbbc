//! Helpers shared by the integration tests.
#![allow(dead_code)]

use ampx::{Activation, Autocast, AutocastOptions, Context, DType, Optimizer, Reduction, Result, Scaler, ScalerOptions, Tensor};

/// C's `printf("%.17g", v)` for finite values.
pub fn fmt_g17(v: f64) -> String {
    if v == 0.0 {
        return if v.is_sign_negative() { "-0".into() } else { "0".into() };
    }
    // 17 significant digits in scientific form, e.g. "1.0240000000000000e3".
    let sci = format!("{v:.16e}");
    let (mantissa, exp) = sci.split_once('e').unwrap();
    let exp: i32 = exp.parse().unwrap();
    let strip = |s: String| -> String {
        if s.contains('.') {
            s.trim_end_matches('0').trim_end_matches('.').to_string()
        } else {
            s
        }
    };
    if !(-4..17).contains(&exp) {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{}e{sign}{:02}", strip(mantissa.to_string()), exp.abs())
    } else {
        let decimals = (16 - exp) as usize;
        strip(format!("{v:.decimals$}"))
    }
}

/// The reference run of bindings/README.md; returns its output lines.
pub fn reference_run() -> Result<Vec<String>> {
    let values = |n: usize, f: &dyn Fn(i32) -> i32, d: f32| -> Vec<f32> {
        (0..n as i32).map(|i| f(i) as f32 / d).collect()
    };
    let ctx = Context::new()?;
    let x = Tensor::from_slice(&ctx, &[8, 4], &values(32, &|i| (i % 7) - 3, 4.0))?;
    let y = Tensor::from_slice(&ctx, &[8, 2], &values(16, &|i| (i % 5) - 2, 2.0))?;
    let parameter = |shape: &[i64], data: Vec<f32>, name: &str| -> Result<Tensor> {
        let t = Tensor::from_slice(&ctx, shape, &data)?;
        t.set_requires_grad(true)?;
        t.set_name(name)?;
        Ok(t)
    };
    let w1 = parameter(&[16, 4], values(64, &|i| (i * 37) % 17 - 8, 32.0), "w1")?;
    let b1 = parameter(&[16], values(16, &|i| (i % 3) - 1, 100.0), "b1")?;
    let w2 = parameter(&[2, 16], values(32, &|i| (i * 29) % 13 - 6, 32.0), "w2")?;
    let b2 = parameter(&[2], vec![0.0; 2], "b2")?;

    let opt = Optimizer::adamw(&ctx, &[&w1, &b1, &w2, &b2], 0.01)?;
    let scaler = Scaler::new(&ctx, &ScalerOptions { init_scale: 1024.0, growth_interval: 3, ..Default::default() })?;
    let autocast = Autocast::new(&ctx, &AutocastOptions::with_dtype(DType::BF16))?;

    let mut lines = Vec::new();
    for step in 0..12 {
        let scope = ctx.scope()?;
        let mut region = autocast.enter()?;
        let h = x.linear(&w1, Some(&b1), Activation::Relu)?;
        let out = h.linear(&w2, Some(&b2), Activation::None)?;
        let loss = out.mse_loss(&y, Reduction::Mean)?;
        region.exit()?;
        let loss_value: f32 = loss.item()?;
        loss.backward(Some(&scaler))?;
        if step == 5 {
            let g = w2.grad()?.expect("w2 has a gradient");
            let mut grad = g.to_vec::<f32>()?;
            grad[3] = f32::INFINITY;
            g.copy_from_slice(&grad)?;
        }
        scaler.unscale(&opt)?;
        opt.clip_grad_norm(1.0, 2.0, false)?;
        scaler.step(&opt)?;
        scaler.update()?;
        let scale = scaler.scale()?;
        opt.zero_grad()?;
        scope.close()?;
        lines.push(format!("step {step} loss {:08x} scale {}", loss_value.to_bits(), fmt_g17(scale)));
    }
    let w2_values = w2.to_vec::<f32>()?;
    let mut last = String::from("w2");
    for v in w2_values {
        last += &format!(" {:08x}", v.to_bits());
    }
    lines.push(last);
    Ok(lines)
}
