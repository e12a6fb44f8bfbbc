//! The precision doctor (`ampx::Doctor`): planted gradients land in exactly
//! the bins and fp16 fractions computed here in double precision, the
//! history follows the scaler, findings, the report, and bad input.
use std::collections::BTreeMap;

use ampx::doctor::{self, binade_bin, Cause, FindingCode, BIN_HUGE, BIN_NONFINITE, BIN_TINY, DOCTOR_BINS};
use ampx::{Context, DType, Doctor, DoctorOptions, Optimizer, Scaler, ScalerOptions, SgdOptions, Status, Tensor};

fn tensor(ctx: &Context, values: &[f64], dtype: DType) -> Tensor {
    let v: Vec<f32> = values.iter().map(|&x| x as f32).collect();
    let t = Tensor::from_slice(ctx, &[v.len() as i64], &v).unwrap();
    if dtype == DType::F32 {
        t
    } else {
        t.cast(dtype).unwrap()
    }
}

fn param(ctx: &Context, values: &[f64], dtype: DType, name: &str) -> Tensor {
    let p = tensor(ctx, values, dtype);
    p.set_requires_grad(true).unwrap();
    p.set_name(name).unwrap();
    p
}

fn sgd(ctx: &Context, params: &[&Tensor], lr: f64) -> Optimizer {
    Optimizer::sgd(ctx, params, &SgdOptions { lr, ..Default::default() }).unwrap()
}

fn every(interval: i32) -> DoctorOptions {
    DoctorOptions::with_interval(interval)
}

/// A parameter `name` of `dtype` whose elements are `value`, with gradient
/// `grad`, under SGD at `lr`, watched by a doctor sampling every
/// `interval`-th step.
fn watched(ctx: &Context, name: &str, dtype: DType, value: f64, grad: &[f64], lr: f64, interval: i32) -> (Tensor, Optimizer, Doctor) {
    let p = param(ctx, &vec![value; grad.len()], dtype, name);
    p.set_grad(Some(&tensor(ctx, grad, dtype))).unwrap();
    let opt = sgd(ctx, &[&p], lr);
    let doctor = Doctor::new(ctx, &opt, &every(interval)).unwrap();
    (p, opt, doctor)
}

/// The histogram bin of |v| by the header's definition, from v's binary
/// exponent (exact: no logarithm).
fn bin_of(v: f64) -> usize {
    let a = v.abs();
    if !a.is_finite() {
        return BIN_NONFINITE;
    }
    if a == 0.0 {
        return 0;
    }
    if a < 2f64.powi(-64) {
        return BIN_TINY;
    }
    if a >= 65536.0 {
        return BIN_HUGE;
    }
    let exponent = ((a.to_bits() >> 52) & 0x7ff) as i32 - 1023; // a is normal here
    (2 + exponent + 64) as usize
}

fn bins(values: &[f64]) -> BTreeMap<usize, i64> {
    let mut out = BTreeMap::new();
    for &v in values {
        *out.entry(bin_of(v)).or_insert(0) += 1;
    }
    out
}

fn nonzero_bins(histogram: &[i64; DOCTOR_BINS]) -> BTreeMap<usize, i64> {
    histogram.iter().enumerate().filter(|(_, &c)| c != 0).map(|(i, &c)| (i, c)).collect()
}

#[derive(PartialEq)]
enum Fp16 {
    Zero,
    Subnormal,
    Normal,
    Overflow,
}

/// What v becomes when rounded to fp16 (nearest, ties to even): zero at or
/// below half the smallest subnormal (2^-25), infinite from 65520 (half an
/// ulp above 65504), a subnormal below the midpoint between the largest
/// subnormal and 2^-14.
fn fp16(v: f64) -> Fp16 {
    let a = v.abs();
    if !a.is_finite() || a >= 65520.0 {
        Fp16::Overflow
    } else if a <= 2f64.powi(-25) {
        Fp16::Zero
    } else if a < 2f64.powi(-14) - 2f64.powi(-25) {
        Fp16::Subnormal
    } else {
        Fp16::Normal
    }
}

fn fraction(values: &[f64], class: Fp16) -> f64 {
    values.iter().filter(|&&v| fp16(v) == class).count() as f64 / values.len() as f64
}

/// The largest k with amax * 2^k <= 65504.
fn headroom(amax: f64) -> i32 {
    let mut k = 0;
    while amax * 2f64.powi(k + 1) <= 65504.0 {
        k += 1;
    }
    while amax * 2f64.powi(k) > 65504.0 {
        k -= 1;
    }
    k
}

#[test]
fn constants_and_names() {
    assert_eq!(DOCTOR_BINS, 84);
    assert_eq!(binade_bin(-64), Some(2));
    assert_eq!(binade_bin(0), Some(66));
    assert_eq!(binade_bin(15), Some(BIN_HUGE - 1));
    assert_eq!(binade_bin(16), None);
    assert_eq!(binade_bin(-65), None);
    assert_eq!(doctor::finding_code_name(3), Some("scale_too_low"));
    assert_eq!(doctor::finding_code_name(1), Some("scale_oscillation"));
    assert_eq!(doctor::finding_code_name(99), None);
    assert_eq!(doctor::cause_name(4), Some("no_loss_scaling"));
    assert_eq!(doctor::cause_name(0), Some(""));
    assert_eq!(FindingCode::ScaleAtMinimum.name(), Some("scale_at_minimum"));
    assert_eq!(FindingCode::from_raw(4), FindingCode::GradientsVanished);
    assert_eq!(Cause::from_raw(0), None);
    assert_eq!(Cause::from_raw(2), Some(Cause::UnstableOp));
    assert_eq!(Cause::OutlierBatches.name(), Some("outlier_batches"));
    let defaults = DoctorOptions::default();
    assert_eq!((defaults.interval, defaults.history), (100, 4096));
}

#[test]
fn planted_f32_gradients_without_a_scaler() {
    let ctx = Context::new().unwrap();
    let p2 = |e: i32| 2f64.powi(e);
    let mut planted = vec![0.0; 3];
    planted.extend([p2(-30); 5]);
    planted.extend([p2(-20); 7]);
    planted.extend([1.0; 11]);
    planted.extend([-p2(-14); 2]);
    planted.push(1024.0);
    let extremes = [p2(-70), 65504.0, p2(20), f64::INFINITY, f64::NAN];
    let p = param(&ctx, &vec![0.0; planted.len()], DType::F32, "planted");
    let q = param(&ctx, &[0.0; 5], DType::F32, "");
    p.set_grad(Some(&tensor(&ctx, &planted, DType::F32))).unwrap();
    q.set_grad(Some(&tensor(&ctx, &extremes, DType::F32))).unwrap();
    let opt = sgd(&ctx, &[&p, &q], 0.0);
    let doctor = Doctor::new(&ctx, &opt, &every(1)).unwrap();
    assert_eq!(doctor.params().unwrap(), vec![], "nothing sampled yet");
    assert_eq!(doctor.param_stats(0).unwrap_err().status(), Status::Order);
    opt.step().unwrap();

    let o = doctor.examine().unwrap();
    assert_eq!((o.steps, o.sample_step, o.sample_scale), (1, 1, 1.0));
    assert_eq!((o.param_count, o.history_count, o.missed_steps), (2, 1, 0));
    let stats = doctor.params().unwrap();
    assert_eq!(stats.len(), 2);
    let s = &stats[0];
    let n = planted.len() as f64;
    assert_eq!((s.index, s.name.as_str(), s.elements), (0, "planted", planted.len() as i64));
    assert_eq!((s.param_dtype, s.grad_dtype), (Some(DType::F32), Some(DType::F32)));
    assert_eq!(nonzero_bins(&s.histogram), bins(&planted));
    // The bins by hand, too: 2^e lands in 2 + e + 64.
    let by_hand: BTreeMap<usize, i64> =
        [(0, 3), (64 + 2 - 30, 5), (64 + 2 - 20, 7), (66, 11), (64 + 2 - 14, 2), (64 + 2 + 10, 1)].into_iter().collect();
    assert_eq!(nonzero_bins(&s.histogram), by_hand);
    assert_eq!(s.fp16_zero_unscaled, fraction(&planted, Fp16::Zero));
    assert_eq!(s.fp16_zero_unscaled, 8.0 / n);
    assert_eq!(s.fp16_subnormal_unscaled, fraction(&planted, Fp16::Subnormal));
    assert_eq!(s.fp16_subnormal_unscaled, 7.0 / n);
    // Scale 1: the scaled fractions are the unscaled ones.
    assert_eq!((s.fp16_zero_scaled, s.fp16_subnormal_scaled), (8.0 / n, 7.0 / n));
    assert_eq!(s.fp16_overflow_scaled, 0.0);
    assert_eq!((s.amax, s.amax_scaled), (1024.0, 1024.0));
    assert_eq!((s.headroom, s.headroom_unbounded), (headroom(1024.0), false));
    assert_eq!(s.headroom, 5);
    let norm = planted.iter().map(|v| v * v).sum::<f64>().sqrt();
    assert!((s.grad_norm - norm).abs() <= 1e-9 * norm, "{} vs {norm}", s.grad_norm);
    assert_eq!((s.lost_update_fraction, s.lost_without_master_fraction), (None, None));

    let e = &stats[1];
    assert_eq!(e.name, "");
    assert_eq!(nonzero_bins(&e.histogram), bins(&extremes));
    assert_eq!(
        nonzero_bins(&e.histogram),
        [(BIN_TINY, 1), (binade_bin(15).unwrap(), 1), (BIN_HUGE, 1), (BIN_NONFINITE, 2)].into_iter().collect()
    );
    assert_eq!(e.fp16_overflow_scaled, fraction(&extremes, Fp16::Overflow));
    assert_eq!(e.fp16_overflow_scaled, 3.0 / 5.0);
    assert_eq!(e.fp16_zero_unscaled, 1.0 / 5.0);
    assert_eq!(e.amax, p2(20), "the largest finite magnitude");
    assert_eq!(e.headroom, headroom(p2(20)));
    assert_eq!(e.headroom, -5);
    assert_eq!(&doctor.param_stats(1).unwrap(), e);

    // Without a scaler only sampled steps are recorded; the non-finite
    // gradients of parameter 1 mark the step as overflowed.
    let history = doctor.history().unwrap();
    assert_eq!(history.len(), 1);
    let h = history[0];
    assert_eq!((h.step, h.scale, h.sampled, h.found_inf), (1, 1.0, true, true));
    assert_eq!((h.first_overflow_param, h.overflow_params), (Some(1), 1));
}

#[test]
fn planted_f16_gradients_with_a_scaler() {
    let ctx = Context::new().unwrap();
    let p2 = |e: i32| 2f64.powi(e);
    // Stored (scaled by 1024) values x; the true ones are u = x / 1024.
    let mut stored = vec![0.0; 4];
    stored.extend([p2(-14); 3]);
    stored.extend([1.0; 5]);
    stored.extend([p2(-24); 2]);
    let true_values: Vec<f64> = stored.iter().map(|x| x / 1024.0).collect();
    let p = param(&ctx, &vec![0.0; stored.len()], DType::F16, "w16");
    p.set_grad(Some(&tensor(&ctx, &stored, DType::F16))).unwrap();
    let opt = sgd(&ctx, &[&p], 0.0);
    let scaler = Scaler::new(&ctx, &ScalerOptions { init_scale: 1024.0, ..Default::default() }).unwrap();
    let doctor = Doctor::new(&ctx, &opt, &every(1)).unwrap();
    scaler.step(&opt).unwrap();
    scaler.update().unwrap();
    assert_eq!(doctor.examine().unwrap().sample_scale, 1024.0);
    let stats = doctor.params().unwrap();
    assert_eq!(stats.len(), 1);
    let s = &stats[0];
    let n = stored.len() as f64;
    assert_eq!((s.param_dtype, s.grad_dtype, s.elements), (Some(DType::F16), Some(DType::F16), stored.len() as i64));
    // u: 0, 2^-24, 2^-10, 2^-34.
    assert_eq!(nonzero_bins(&s.histogram), bins(&true_values));
    assert_eq!(
        nonzero_bins(&s.histogram),
        [(0, 4), (binade_bin(-34).unwrap(), 2), (binade_bin(-24).unwrap(), 3), (binade_bin(-10).unwrap(), 5)]
            .into_iter()
            .collect()
    );
    assert_eq!(s.fp16_zero_unscaled, fraction(&true_values, Fp16::Zero));
    assert_eq!(s.fp16_zero_unscaled, 6.0 / n); // 0 and 2^-34
    assert_eq!(s.fp16_subnormal_unscaled, 3.0 / n); // 2^-24
    assert_eq!(s.fp16_zero_scaled, fraction(&stored, Fp16::Zero));
    assert_eq!(s.fp16_zero_scaled, 4.0 / n); // the scale saves 2^-34 ...
    assert_eq!(s.fp16_subnormal_scaled, fraction(&stored, Fp16::Subnormal));
    assert_eq!(s.fp16_subnormal_scaled, 2.0 / n); // ... as a subnormal 2^-24
    assert_eq!(s.fp16_overflow_scaled, 0.0);
    assert_eq!((s.amax, s.amax_scaled, s.headroom), (p2(-10), 1.0, headroom(1.0)));
    assert_eq!(s.headroom, 15);
    // lr 0: no master changed, so no update was lost.
    assert_eq!((s.lost_update_fraction, s.lost_without_master_fraction), (Some(0.0), Some(0.0)));
}

#[test]
fn lost_updates_of_an_f16_parameter() {
    // fp16's ulp at 1.0 is 2^-10: an update of 2^-14 is below half an ulp
    // (lost), one of 2^-14 * 64 = 2^-8 is four ulps (taken).
    let ctx = Context::new().unwrap();
    let mut grad = vec![1.0; 4];
    grad.extend([64.0; 4]);
    let (p, opt, doctor) = watched(&ctx, "p", DType::F16, 1.0, &grad, 2f64.powi(-14), 1);
    opt.step().unwrap();
    let s = doctor.param_stats(0).unwrap();
    assert_eq!(s.lost_update_fraction, Some(0.5));
    assert_eq!(s.lost_without_master_fraction, Some(0.5));
    let values = p.cast(DType::F32).unwrap().to_vec::<f32>().unwrap();
    let mut expected = vec![1.0f32; 4];
    expected.extend([1.0 - 2f32.powi(-8); 4]);
    assert_eq!(values, expected);
}

/// Two f16 parameters under a scaler of 1024; an inf in the second one's
/// gradient at the steps in `inf_at`.
fn scaled_run(options: DoctorOptions, steps: i64, inf_at: &[i64]) -> (Context, Doctor) {
    let ctx = Context::new().unwrap();
    let a = param(&ctx, &[0.0; 64], DType::F16, "a");
    let b = param(&ctx, &[0.0; 64], DType::F16, "b");
    let opt = sgd(&ctx, &[&a, &b], 0.0);
    let doctor = Doctor::new(&ctx, &opt, &options).unwrap();
    let scaler = Scaler::new(&ctx, &ScalerOptions { init_scale: 1024.0, ..Default::default() }).unwrap();
    for step in 1..=steps {
        let mut gb = vec![1.0; 64];
        if inf_at.contains(&step) {
            gb[7] = f64::INFINITY;
        }
        a.set_grad(Some(&tensor(&ctx, &[0.25; 64], DType::F16))).unwrap();
        b.set_grad(Some(&tensor(&ctx, &gb, DType::F16))).unwrap();
        scaler.step(&opt).unwrap();
        scaler.update().unwrap();
    }
    (ctx, doctor)
}

#[test]
fn every_scaled_step_is_recorded_with_its_overflow() {
    let (_ctx, doctor) = scaled_run(every(2), 5, &[3]);
    let history = doctor.history().unwrap();
    let column = |f: &dyn Fn(&ampx::DoctorSample) -> String| history.iter().map(f).collect::<Vec<_>>().join(" ");
    assert_eq!(column(&|h| h.step.to_string()), "1 2 3 4 5");
    assert_eq!(column(&|h| h.scale.to_string()), "1024 1024 1024 512 512");
    assert_eq!(column(&|h| h.found_inf.to_string()), "false false true false false");
    assert_eq!(column(&|h| h.sampled.to_string()), "true false true false true");
    assert_eq!(column(&|h| format!("{:?}", h.first_overflow_param)), "None None Some(1) None None");
    assert_eq!(column(&|h| h.overflow_params.to_string()), "0 0 1 0 0");
    let norm = (64.0f64 * (0.0625 + 1.0)).sqrt() / 512.0; // true gradients at scale 512
    assert!((history[4].grad_norm - norm).abs() <= 1e-12 * norm, "{} vs {norm}", history[4].grad_norm);
    assert_eq!(doctor.examine().unwrap().sample_step, 5);
    assert!(doctor.summary().unwrap().contains("5 steps"), "{}", doctor.summary().unwrap());
}

#[test]
fn the_ring_keeps_the_latest_steps() {
    let (_ctx, doctor) = scaled_run(DoctorOptions { interval: 1, history: 3 }, 5, &[]);
    assert_eq!(doctor.history_capacity(), 3);
    let steps: Vec<i64> = doctor.history().unwrap().iter().map(|h| h.step).collect();
    assert_eq!(steps, vec![3, 4, 5]);
    assert_eq!(doctor.examine().unwrap().history_count, 3);
}

#[test]
fn interval_zero_samples_nothing_until_changed() {
    let ctx = Context::new().unwrap();
    let (_p, opt, doctor) = watched(&ctx, "p", DType::F32, 0.0, &[1.0; 8], 0.1, 0);
    assert_eq!(doctor.interval(), 0);
    opt.step().unwrap();
    let o = doctor.examine().unwrap();
    assert_eq!((o.steps, o.sample_step, o.history_count), (1, 0, 0));
    assert!(doctor.params().unwrap().is_empty());
    assert!(doctor.history().unwrap().is_empty());
    doctor.set_interval(1).unwrap();
    assert_eq!(doctor.interval(), 1);
    opt.step().unwrap();
    let stats = doctor.params().unwrap();
    assert_eq!(nonzero_bins(&stats[0].histogram), [(binade_bin(0).unwrap(), 8)].into_iter().collect());
    assert_eq!(doctor.examine().unwrap().sample_step, 2);
}

/// fp16 gradients, all subnormal (2^-20), and no loss scaling.
fn unscaled_fp16(ctx: &Context) -> (Tensor, Optimizer, Doctor) {
    let watched = watched(ctx, "encoder.<script>", DType::F16, 0.0, &[2f64.powi(-20); 64], 0.1, 1);
    watched.1.step().unwrap();
    watched
}

#[test]
fn fp16_without_loss_scaling_is_a_finding() {
    let ctx = Context::new().unwrap();
    let (_p, _opt, doctor) = unscaled_fp16(&ctx);
    assert_eq!(doctor.examine().unwrap().finding_count, 1);
    let findings = doctor.findings().unwrap();
    assert_eq!(findings.len(), 1);
    let f = &findings[0];
    assert_eq!((f.code, f.cause), (FindingCode::ScaleTooLow, Some(Cause::NoLossScaling)));
    assert_eq!((f.param, f.param_name.as_deref()), (None, None));
    assert_eq!((f.first_step, f.last_step), (1, 1));
    assert!(f.message.contains("loss scal"), "{}", f.message);
    assert!(doctor.summary().unwrap().contains("scale_too_low"));
}

#[test]
fn no_findings_on_a_healthy_step() {
    let ctx = Context::new().unwrap();
    let (_p, opt, doctor) = watched(&ctx, "p", DType::F16, 0.0, &[0.5; 8], 0.0, 1);
    opt.step().unwrap();
    assert!(doctor.findings().unwrap().is_empty());
}

#[test]
fn the_report_is_one_html_page_without_script() {
    let ctx = Context::new().unwrap();
    let (_p, _opt, doctor) = unscaled_fp16(&ctx);
    let dir = std::env::temp_dir().join(format!("ampx-rust-doctor-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("report.html");
    for _ in 0..2 {
        doctor.write_report(&path).unwrap(); // the second replaces the first
        let html = std::fs::read_to_string(&path).unwrap();
        assert!(html.starts_with("<!DOCTYPE html>"));
        assert!(!html.to_lowercase().contains("<script"), "the parameter's name is escaped");
        assert!(html.contains("scale_too_low"));
    }
    let missing = dir.join("no-such-folder").join("report.html");
    let e = doctor.write_report(&missing).unwrap_err();
    assert_eq!(e.status(), Status::Io);
    assert!(e.message().contains(missing.to_str().unwrap()), "{e}");
    assert!(!missing.exists());
    let e = doctor.write_report("bad\0path").unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn options_out_of_range_are_refused() {
    let ctx = Context::new().unwrap();
    let p = param(&ctx, &[0.0; 4], DType::F16, "p");
    let opt = sgd(&ctx, &[&p], 0.5);
    let e = Doctor::new(&ctx, &opt, &every(-1)).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    assert!(e.message().contains("interval"), "{e}");
    let e = Doctor::new(&ctx, &opt, &DoctorOptions { history: 0, ..Default::default() }).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    assert!(e.message().contains("history"), "{e}");
    let e = Doctor::new(&ctx, &opt, &DoctorOptions { history: (1 << 24) + 1, ..Default::default() }).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    // A doctor of another context than the optimizer's.
    let other = Context::new().unwrap();
    assert_eq!(Doctor::new(&other, &opt, &every(1)).unwrap_err().status(), Status::Device);
    // None of these attached a doctor: one can be made now.
    Doctor::new(&ctx, &opt, &every(1)).unwrap();
}

#[test]
fn a_refused_interval_and_indices_change_nothing() {
    let ctx = Context::new().unwrap();
    let (_p, opt, doctor) = watched(&ctx, "p", DType::F16, 0.0, &[1.0; 4], 0.5, 1);
    let e = doctor.set_interval(-5).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    assert_eq!(doctor.interval(), 1);
    opt.step().unwrap();
    assert_eq!(doctor.examine().unwrap().sample_step, 1, "still sampling every step");
    assert_eq!(doctor.param_stats(1).unwrap_err().status(), Status::InvalidArgument);
    assert_eq!(doctor.param_stats(usize::MAX).unwrap_err().status(), Status::InvalidArgument);
}

#[test]
fn one_doctor_per_optimizer_and_the_doctor_outlives_it() {
    let ctx = Context::new().unwrap();
    let p = param(&ctx, &[0.0; 4], DType::F16, "p");
    p.set_grad(Some(&tensor(&ctx, &[1.0; 4], DType::F16))).unwrap();
    let opt = sgd(&ctx, &[&p], 0.5);
    let first = Doctor::new(&ctx, &opt, &every(100)).unwrap();
    let e = Doctor::new(&ctx, &opt, &every(1)).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    assert!(e.message().contains("doctor"), "{e}");
    drop(first); // detaches: the optimizer takes a doctor again
    let doctor = Doctor::new(&ctx, &opt, &every(1)).unwrap();
    opt.step().unwrap();
    drop(opt); // the doctor keeps the optimizer alive in the library
    assert_eq!(doctor.examine().unwrap().steps, 1);
    assert_eq!(doctor.params().unwrap().len(), 1);
    let values = p.cast(DType::F32).unwrap().to_vec::<f32>().unwrap();
    assert_eq!(values, vec![-0.5; 4], "training went on: 0 - 0.5 * 1");
}

#[test]
fn a_released_doctor_handle_is_refused_not_used() {
    // Safe code cannot use a dropped Doctor (it is moved); through the raw
    // handle the library still refuses it instead of touching freed memory.
    let ctx = Context::new().unwrap();
    let (_p, _opt, doctor) = watched(&ctx, "p", DType::F32, 0.0, &[1.0; 4], 0.1, 1);
    let raw = doctor.as_raw();
    drop(doctor);
    let mut overview = ampx::sys::ampx_doctor_overview::default();
    // SAFETY: ampx validates handles; a released one is STALE_HANDLE.
    let status = unsafe { ampx::sys::ampx_doctor_examine(raw, &mut overview) };
    assert_eq!(status, ampx::sys::AMPX_ERR_STALE_HANDLE);
    assert_eq!(ampx::Error::last().unwrap().status(), Status::StaleHandle);
}
