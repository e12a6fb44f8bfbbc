//! FP8 (section 18): casts against the formats' definitions, a delayed
//! scaling recipe against Transformer Engine's formula, a training step
//! under FP8 autocast, the doctor's report, checkpoints and bad input.
use ampx::{
    load_checkpoint_fp8, save_checkpoint_fp8, Autocast, AutocastOptions, Context, DType, Fp8Overflow, Fp8Recipe,
    Fp8RecipeOptions, Fp8Role, Fp8Scaling, Optimizer, Reduction, SgdOptions, Status, Tensor, F8E4M3, F8E5M2,
};

/// (exponent bits, mantissa bits, bias, max) of the OCP formats.
const E4M3: (u32, u32, i32, f64) = (4, 3, 7, 448.0);
const E5M2: (u32, u32, i32, f64) = (5, 2, 15, 57344.0);

fn decode(f: (u32, u32, i32, f64), code: u8) -> f64 {
    let (ebits, mbits, bias, _) = f;
    let sign = if code & 0x80 != 0 { -1.0 } else { 1.0 };
    let e = (u32::from(code) >> mbits) & ((1 << ebits) - 1);
    let m = u32::from(code) & ((1 << mbits) - 1);
    if ebits == 4 && e == 15 && m == 7 {
        return f64::NAN;
    }
    if ebits == 5 && e == 31 {
        return if m == 0 { sign * f64::INFINITY } else { f64::NAN };
    }
    if e == 0 {
        return sign * f64::from(m) * 2f64.powi(1 - bias - mbits as i32);
    }
    sign * (1.0 + f64::from(m) / f64::from(1u32 << mbits)) * 2f64.powi(e as i32 - bias)
}

/// Round to nearest, ties to the even code; beyond max: +-max when
/// saturating, else NaN (E4M3) or +-inf (E5M2). In f64.
fn encode(f: (u32, u32, i32, f64), x: f64, saturate: bool) -> u8 {
    let e4m3 = f.0 == 4;
    if x.is_nan() {
        return 0x7f;
    }
    let sign: u8 = if x.is_sign_negative() { 0x80 } else { 0 };
    let a = x.abs();
    let max_code: u8 = if e4m3 { 0x7e } else { 0x7b };
    let ulp = f.3 - decode(f, max_code - 1);
    let mut best = (f64::INFINITY, 0u8);
    for code in 0..=max_code + 1 {
        let value = if code > max_code { f.3 + ulp } else { decode(f, code) };
        let d = (value - a).abs();
        if d < best.0 || (d == best.0 && code & 1 == 0) {
            best = (d, code);
        }
    }
    if best.1 > max_code || a.is_infinite() {
        return if saturate { sign | max_code } else if e4m3 { sign | 0x7f } else { sign | 0x7c };
    }
    sign | best.1
}

fn values() -> Vec<f32> {
    let mut v = vec![
        0.0, -0.0, 1.0, 448.0, 464.0, 465.0, 480.0, 500.0, -500.0, 57344.0, 61439.0, 61440.0, 65536.0,
        f32::INFINITY, f32::NEG_INFINITY, 2f32.powi(-9), 2f32.powi(-10), 3.0 * 2f32.powi(-10), 2f32.powi(-16),
        2f32.powi(-17), 3.0 * 2f32.powi(-17), 1.0625, 1.1875, 0.1, -0.3, 1e-6,
    ];
    // A deterministic spread over many binades.
    let mut state = 12345u32;
    for _ in 0..500 {
        state = state.wrapping_mul(1_103_515_245).wrapping_add(12345);
        let mantissa = f32::from((state >> 8) as u16) / 65536.0 + 0.5;
        let exponent = ((state >> 24) % 36) as i32 - 20;
        let sign = if state & 1 == 0 { 1.0 } else { -1.0 };
        v.push(sign * mantissa * 2f32.powi(exponent));
    }
    v
}

fn ctx() -> Context {
    Context::new().unwrap()
}

#[test]
fn casts_against_the_definition() {
    let ctx = ctx();
    let v = values();
    let src = Tensor::from_slice(&ctx, &[v.len() as i64], &v).unwrap();
    // Tensor::cast follows torch: E4M3 saturates, E5M2 overflows to inf.
    let e4 = src.cast(DType::F8E4M3).unwrap().to_vec::<F8E4M3>().unwrap();
    let e5 = src.cast(DType::F8E5M2).unwrap().to_vec::<F8E5M2>().unwrap();
    for (i, &x) in v.iter().enumerate() {
        assert_eq!(e4[i].0, encode(E4M3, f64::from(x), true), "e4m3 of {x}");
        assert_eq!(e5[i].0, encode(E5M2, f64::from(x), false), "e5m2 of {x}");
    }
    for (dtype, f, overflow, saturate) in [
        (DType::F8E4M3, E4M3, Fp8Overflow::NoSaturate, false),
        (DType::F8E5M2, E5M2, Fp8Overflow::Saturate, true),
    ] {
        let dst = Tensor::empty(&ctx, dtype, &[v.len() as i64]).unwrap();
        dst.copy_fp8_from(&src, overflow).unwrap();
        let bits = dst.to_bytes().unwrap();
        for (i, &x) in v.iter().enumerate() {
            assert_eq!(bits[i], encode(f, f64::from(x), saturate), "{dtype} {overflow:?} of {x}");
        }
    }
    // Named boundaries: max, saturation, subnormal, ties.
    let named = Tensor::from_slice(&ctx, &[6], &[448.0f32, 500.0, 2f32.powi(-9), 2f32.powi(-10), 1.0625, 1.1875]).unwrap();
    assert_eq!(named.cast(DType::F8E4M3).unwrap().to_bytes().unwrap(), vec![0x7e, 0x7e, 0x01, 0x00, 0x38, 0x3a]);
    let named = Tensor::from_slice(&ctx, &[3], &[57344.0f32, 61440.0, f32::INFINITY]).unwrap();
    assert_eq!(named.cast(DType::F8E5M2).unwrap().to_bytes().unwrap(), vec![0x7b, 0x7c, 0x7c]);
    // Every code decodes as defined.
    let codes: Vec<u8> = (0..=255).collect();
    for (dtype, f) in [(DType::F8E4M3, E4M3), (DType::F8E5M2, E5M2)] {
        let t = Tensor::from_bytes(&ctx, dtype, &[256], &codes).unwrap();
        let back = t.cast(DType::F32).unwrap().to_vec::<f32>().unwrap();
        for (code, &value) in back.iter().enumerate() {
            let expected = decode(f, code as u8);
            if expected.is_nan() {
                assert!(value.is_nan(), "{dtype} {code:#x}");
            } else {
                assert_eq!(f64::from(value), expected, "{dtype} {code:#x}");
            }
        }
    }
    assert_eq!(Tensor::from_slice(&ctx, &[1], &[F8E4M3(0x7e)]).unwrap().dtype().unwrap(), DType::F8E4M3);
}

/// TE's default delayed update (the fused CUDA kernel of
/// common/recipe/delayed_scaling.cu): (fp8_max * 2^-margin) / amax in f32
/// with amax the history's max as fmaxf takes it (NaN skipped); the
/// previous scale for a 0 or non-finite amax; f32::MAX for an infinite
/// quotient. (A step amax of 0 is not rolled in: see the caller.)
fn te_scale(fp8_max: f32, history: &[f32], previous: f32, margin: i32) -> f32 {
    let amax = history.iter().cloned().fold(0f32, f32::max);
    if amax == 0.0 || !amax.is_finite() {
        return previous;
    }
    let scale = fp8_max * 2f32.powi(-margin) / amax;
    if scale.is_infinite() {
        f32::MAX
    } else {
        scale
    }
}

#[test]
fn delayed_scaling_follows_te() {
    let ctx = ctx();
    let (len, margin) = (4usize, 1);
    let recipe = Fp8Recipe::new(
        &ctx,
        &Fp8RecipeOptions { amax_history_len: len as i32, margin, ..Default::default() },
    )
    .unwrap();
    let fwd = recipe.add_tensor(Fp8Role::Forward, Some("x")).unwrap();
    let bwd = recipe.add_tensor(Fp8Role::Backward, Some("dy")).unwrap();
    assert_eq!(recipe.slot_count().unwrap(), 2);
    assert_eq!(recipe.slot(bwd).unwrap().dtype, DType::F8E5M2);
    let amaxes: [Option<f32>; 12] = [
        Some(0.0), Some(3.0), Some(100.0), None, Some(0.5), Some(f32::INFINITY), Some(2.0), Some(1.0), Some(1.0),
        Some(1.0), Some(1e-40), Some(0.25),
    ];
    let mut history = vec![0f32; len];
    let mut scales = [1f32, 1f32];
    for amax in amaxes {
        for (k, (slot, f)) in [(fwd, E4M3), (bwd, E5M2)].into_iter().enumerate() {
            assert_eq!(recipe.scale_tensor(slot, false).unwrap().item::<f32>().unwrap(), scales[k]);
            if let Some(a) = amax {
                let x = [a / 2.0, -a, 0.0];
                let q = recipe.quantized(slot, &Tensor::from_slice(&ctx, &[3], &x).unwrap()).unwrap();
                let expected: Vec<u8> = x.iter().map(|&v| encode(f, f64::from(v * scales[k]), true)).collect();
                assert_eq!(q.to_bytes().unwrap(), expected, "amax {a}");
            }
        }
        recipe.update().unwrap();
        let step = amax.unwrap_or(0.0);
        if step != 0.0 {
            // A zero step amax leaves history and scale as they were.
            history.remove(0);
            history.push(step);
        }
        for (k, (slot, fmax)) in [(fwd, 448f32), (bwd, 57344f32)].into_iter().enumerate() {
            if step != 0.0 {
                scales[k] = te_scale(fmax, &history, scales[k], margin);
            }
            let info = recipe.slot(slot).unwrap();
            assert_eq!(info.history, history);
            assert_eq!(info.scale, scales[k], "{amax:?} {history:?}");
            assert_eq!(info.scale_inv, 1.0 / scales[k]);
            assert_eq!(recipe.scale_tensor(slot, true).unwrap().item::<f32>().unwrap(), info.scale_inv);
        }
    }
    assert_eq!(recipe.slot(fwd).unwrap().name, "x");
}

#[test]
fn current_scaling_transposed_and_doctor() {
    let ctx = ctx();
    let recipe = Fp8Recipe::new(&ctx, &Fp8RecipeOptions { scaling: Fp8Scaling::Current, ..Default::default() }).unwrap();
    let slot = recipe.add_tensor(Fp8Role::Forward, None).unwrap();
    let x: Vec<f32> = (0..6).map(|i| i as f32 - 2.5).collect();
    let src = Tensor::from_slice(&ctx, &[2, 3], &x).unwrap();
    let (q, qt) = (Tensor::empty(&ctx, DType::F8E4M3, &[2, 3]).unwrap(), Tensor::empty(&ctx, DType::F8E4M3, &[3, 2]).unwrap());
    recipe.quantize(slot, &src, Some(&q), Some(&qt)).unwrap();
    let scale = 448f32 / 2.5;
    let expected: Vec<u8> = x.iter().map(|&v| encode(E4M3, f64::from(v * scale), true)).collect();
    assert_eq!(q.to_bytes().unwrap(), expected);
    let transposed: Vec<u8> = (0..6).map(|i| expected[(i % 2) * 3 + i / 2]).collect();
    assert_eq!(qt.to_bytes().unwrap(), transposed);

    // At scale 1: 1e-4 flushes in E4M3 only, 1000 saturates E4M3 only.
    let plain = Fp8Recipe::new(&ctx, &Fp8RecipeOptions::default()).unwrap();
    let s = plain.add_tensor(Fp8Role::Forward, Some("act")).unwrap();
    let t = Tensor::from_slice(&ctx, &[4], &[1e-4f32, 1000.0, 1.0, 0.0]).unwrap();
    let r = plain.inspect(s, &t).unwrap();
    assert_eq!(r.count, 3);
    assert!((r.flushed_e4m3 - 1.0 / 3.0).abs() < 1e-12 && (r.saturated_e4m3 - 1.0 / 3.0).abs() < 1e-12);
    assert_eq!((r.flushed_e5m2, r.saturated_e5m2, r.scale, r.dtype), (0.0, 0.0, 1.0, DType::F8E4M3));
    assert!(plain.summary().unwrap().contains("act"));
}

#[test]
fn linear_training_under_fp8_autocast() {
    let ctx = ctx();
    let rand = |n: usize, seed: u32| -> Vec<f32> {
        let mut s = seed;
        (0..n)
            .map(|_| {
                s = s.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                (s >> 8) as f32 / (1u32 << 24) as f32 * 2.0 - 1.0
            })
            .collect()
    };
    let (xv, tw) = (rand(32 * 16, 1), rand(16 * 16, 2));
    let yv: Vec<f32> = (0..32 * 16).map(|i| (0..16).map(|k| xv[(i / 16) * 16 + k] * tw[(i % 16) * 16 + k]).sum()).collect();
    let x = Tensor::from_slice(&ctx, &[32, 16], &xv).unwrap();
    let y = Tensor::from_slice(&ctx, &[32, 16], &yv).unwrap();
    let w = Tensor::from_slice(&ctx, &[16, 16], &rand(256, 3).iter().map(|v| v * 0.1).collect::<Vec<_>>()).unwrap();
    w.set_requires_grad(true).unwrap();
    w.set_name("w").unwrap();
    let opt = Optimizer::sgd(&ctx, &[&w], &SgdOptions { lr: 0.5, ..Default::default() }).unwrap();
    let recipe = Fp8Recipe::new(&ctx, &Fp8RecipeOptions { amax_history_len: 16, ..Default::default() }).unwrap();
    let policy = Autocast::new(&ctx, &AutocastOptions::with_dtype(DType::BF16)).unwrap();
    policy.set_fp8(Some(&recipe), 0).unwrap();
    let mut losses = Vec::new();
    for _ in 0..12 {
        opt.zero_grad().unwrap();
        let loss = policy.run(|| x.linear(&w, None, ampx::Activation::None)?.mse_loss(&y, Reduction::Mean)).unwrap();
        loss.backward(None).unwrap();
        losses.push(loss.item::<f32>().unwrap());
        opt.step().unwrap();
        recipe.update().unwrap();
    }
    assert!(losses.windows(2).all(|p| p[1] < p[0]), "{losses:?}");
    assert!(losses[11] < 0.6 * losses[0], "{losses:?}");
    let stats = policy.fp8_stats().unwrap();
    assert_eq!((stats.fp8_products, stats.fallbacks), (12, 0));
    let names: Vec<String> = (0..recipe.slot_count().unwrap()).map(|i| recipe.slot(i).unwrap().name).collect();
    assert_eq!(names, ["w:input", "w:weight", "w:grad_output"]);
    policy.set_fp8(Some(&recipe), 1 << 40).unwrap();
    policy.run(|| x.linear(&w, None, ampx::Activation::None)).unwrap();
    let stats = policy.fp8_stats().unwrap();
    assert_eq!(stats.fallbacks, 1);
    assert!(!stats.last_fallback.is_empty());
    policy.set_fp8(None, ampx::FP8_DEFAULT_MIN_GEMM_SIZE).unwrap();

    // The recipe's state survives a checkpoint file.
    let path = std::env::temp_dir().join(format!("ampx_rust_fp8_{}.ckpt", std::process::id()));
    save_checkpoint_fp8(&path, &[&w], None, None, Some(&recipe)).unwrap();
    let restored = Fp8Recipe::new(&ctx, &Fp8RecipeOptions { amax_history_len: 16, ..Default::default() }).unwrap();
    load_checkpoint_fp8(&path, &[&w], None, None, Some(&restored)).unwrap();
    assert_eq!(restored.slot(1).unwrap(), recipe.slot(1).unwrap());
    let other = Fp8Recipe::new(&ctx, &Fp8RecipeOptions::default()).unwrap();
    let e = load_checkpoint_fp8(&path, &[&w], None, None, Some(&other)).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    assert_eq!(other.slot_count().unwrap(), 0);
    std::fs::remove_file(&path).unwrap();
}

#[test]
fn bad_input() {
    let ctx = ctx();
    let e = Fp8Recipe::new(&ctx, &Fp8RecipeOptions { amax_history_len: 0, ..Default::default() }).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    assert!(e.message().contains("amax_history_len"), "{e}");
    let e = Fp8Recipe::new(&ctx, &Fp8RecipeOptions { margin: -1, ..Default::default() }).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    let recipe = Fp8Recipe::new(&ctx, &Fp8RecipeOptions::default()).unwrap();
    let slot = recipe.add_tensor(Fp8Role::Forward, Some("a")).unwrap();
    assert_eq!(recipe.add_tensor(Fp8Role::Forward, Some("a")).unwrap_err().status(), Status::InvalidArgument);
    let src = Tensor::from_slice(&ctx, &[1], &[1.0f32]).unwrap();
    let e5 = Tensor::empty(&ctx, DType::F8E5M2, &[1]).unwrap();
    assert_eq!(recipe.quantize(slot, &src, Some(&e5), None).unwrap_err().status(), Status::Dtype);
    assert_eq!(recipe.quantize(7, &src, Some(&e5), None).unwrap_err().status(), Status::InvalidArgument);
    assert_eq!(recipe.quantize(slot, &src, None, None).unwrap_err().status(), Status::InvalidArgument);
    let f32_dst = Tensor::empty(&ctx, DType::F32, &[1]).unwrap();
    assert_eq!(f32_dst.copy_fp8_from(&src, Fp8Overflow::Saturate).unwrap_err().status(), Status::Dtype);
    assert_eq!(e5.add(&e5).unwrap_err().status(), Status::Dtype);
    assert_eq!(recipe.slot(slot).unwrap().amax, 0.0);
    let policy = Autocast::new(&ctx, &AutocastOptions::with_dtype(DType::BF16)).unwrap();
    assert_eq!(policy.set_fp8(Some(&recipe), -1).unwrap_err().status(), Status::InvalidArgument);
    assert_eq!(policy.fp8_stats().unwrap(), ampx::Fp8Stats::default());
    // A released recipe cannot be used: drop moves it (see the crate's
    // compile_fail examples); the policy keeps its own reference.
    policy.set_fp8(Some(&recipe), 0).unwrap();
    drop(recipe);
    policy.set_fp8(None, 0).unwrap();
}
