//! `grad`, `Tensor::backward_with`, `Scaler::unscale_tensor` (issue 41) and
//! `Tensor::bce_with_logits_ex` (issue 43), against references computed here
//! in double precision: closed forms (d/dx x^3 = 3x^2, d2/dx2 = 6x, d3/dx3 =
//! 6), central differences of a small MLP's gradient (written out below) for
//! a Hessian-vector product, and torch's formula of the weighted binary
//! cross-entropy.
//!
//! Tolerances: ampx computes in fp32, a few roundings of 2^-24 per element,
//! so 1e-5 relative for the closed forms and losses; the Hessian-vector
//! product sums a few dozen fp32 products per element, so 1e-4 of its
//! largest element, while a missing term of a formula is off by O(1) of it.
//! The central difference (eps 1e-4, in double) is exact to ~1e-8.
use ampx::{grad, BackwardOptions, Context, DType, GradOptions, Optimizer, Reduction, Scaler, ScalerOptions, SgdOptions, Status, Tensor};

const X0: [f32; 4] = [-1.5, -0.25, 0.5, 2.0];

fn leaf(ctx: &Context, shape: &[i64], data: &[f32]) -> Tensor {
    let t = Tensor::from_slice(ctx, shape, data).unwrap();
    t.set_requires_grad(true).unwrap();
    t
}

fn values(t: &Tensor) -> Vec<f64> {
    t.to_vec::<f32>().unwrap().into_iter().map(f64::from).collect()
}

fn assert_close(have: &[f64], want: &[f64], rtol: f64, atol: f64, what: &str) {
    assert_eq!(have.len(), want.len(), "{what}: lengths");
    for (i, (h, w)) in have.iter().zip(want).enumerate() {
        assert!((h - w).abs() <= atol + rtol * w.abs(), "{what}[{i}]: {h} vs {w}");
    }
}

/// A deterministic uniform draw in [low, high), rounded to f32.
struct Lcg(u64);

impl Lcg {
    fn uniform(&mut self, n: usize, low: f64, high: f64) -> Vec<f32> {
        (0..n)
            .map(|_| {
                self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                let unit = (self.0 >> 11) as f64 / (1u64 << 53) as f64;
                (low + (high - low) * unit) as f32
            })
            .collect()
    }
}

fn no_options() -> GradOptions {
    GradOptions::default()
}

#[test]
fn derivatives_of_x_cubed_to_third_order() {
    let ctx = Context::new().unwrap();
    let x = leaf(&ctx, &[4], &X0);
    let x64: Vec<f64> = X0.iter().map(|&v| f64::from(v)).collect();
    let create = GradOptions::default().create_graph(true);
    for cube in [x.mul(&x).unwrap().mul(&x).unwrap(), x.pow(3.0).unwrap()] {
        let g = grad(&[&cube.sum().unwrap()], &[&x], None, &create).unwrap().remove(0).unwrap();
        assert!(g.requires_grad().unwrap());
        assert_close(&values(&g), &x64.iter().map(|v| 3.0 * v * v).collect::<Vec<_>>(), 1e-5, 1e-6, "3x^2");
        let h = grad(&[&g.sum().unwrap()], &[&x], None, &create).unwrap().remove(0).unwrap();
        assert_close(&values(&h), &x64.iter().map(|v| 6.0 * v).collect::<Vec<_>>(), 1e-5, 1e-6, "6x");
        let t = grad(&[&h.sum().unwrap()], &[&x], None, &no_options()).unwrap().remove(0).unwrap();
        assert_close(&values(&t), &[6.0; 4], 1e-5, 0.0, "6");
        assert!(x.grad().unwrap().is_none(), "grad accumulates into no .grad");
    }
}

#[test]
fn allow_unused_gives_none_and_grad_outputs_weigh_the_outputs() {
    let ctx = Context::new().unwrap();
    let x = leaf(&ctx, &[4], &X0);
    let z = leaf(&ctx, &[4], &X0);
    let loss = x.mul(&x).unwrap().sum().unwrap();
    let err = grad(&[&loss], &[&x, &z], None, &no_options().retain_graph(true)).unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(err.message().contains("inputs[1]") && err.message().contains("allow_unused"), "{err}");
    let grads = grad(&[&loss], &[&x, &z], None, &no_options().allow_unused(true)).unwrap();
    assert_eq!(grads.len(), 2);
    assert!(grads[1].is_none());
    let want: Vec<f64> = X0.iter().map(|&v| 2.0 * f64::from(v)).collect();
    assert_close(&values(grads[0].as_ref().unwrap()), &want, 1e-6, 0.0, "2x");

    // A vector-Jacobian product of a non-scalar output, with an
    // intermediate tensor among the inputs.
    let h = x.tanh().unwrap();
    let y = h.mul(&h).unwrap();
    let v = [1.0f32, -2.0, 0.5, 3.0];
    let seed = Tensor::from_slice(&ctx, &[4], &v).unwrap();
    let grads = grad(&[&y], &[&h, &x], Some(&[Some(&seed)]), &no_options()).unwrap();
    let (dh, dx) = (grads[0].as_ref().unwrap(), grads[1].as_ref().unwrap());
    let t: Vec<f64> = X0.iter().map(|&v| f64::from(v).tanh()).collect();
    let want_dh: Vec<f64> = t.iter().zip(&v).map(|(t, &v)| 2.0 * t * f64::from(v)).collect();
    let want_dx: Vec<f64> = t.iter().zip(&v).map(|(t, &v)| 2.0 * t * (1.0 - t * t) * f64::from(v)).collect();
    assert_close(&values(dh), &want_dh, 1e-5, 1e-6, "dh");
    assert_close(&values(dx), &want_dx, 1e-5, 1e-6, "dx");
}

#[test]
fn bad_input_is_an_error_and_changes_nothing() {
    let ctx = Context::new().unwrap();
    let x = leaf(&ctx, &[4], &X0);
    let y = x.tanh().unwrap();
    let err = grad(&[&y], &[&x], None, &no_options()).unwrap_err();
    assert_eq!(err.status(), Status::Shape, "a non-scalar output without grad_outputs: {err}");
    assert!(err.message().contains("grad_outputs"), "{err}");
    let err = grad(&[&y], &[&x], Some(&[None]), &no_options()).unwrap_err();
    assert_eq!(err.status(), Status::Shape);
    let wrong = Tensor::zeros(&ctx, DType::F32, &[3]).unwrap();
    assert_eq!(grad(&[&y], &[&x], Some(&[Some(&wrong)]), &no_options()).unwrap_err().status(), Status::Shape);
    let wrong = Tensor::zeros(&ctx, DType::F16, &[4]).unwrap();
    assert_eq!(grad(&[&y], &[&x], Some(&[Some(&wrong)]), &no_options()).unwrap_err().status(), Status::Dtype);
    let err = grad(&[&y], &[&x], Some(&[None, None]), &no_options()).unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    assert_eq!(grad(&[], &[&x], None, &no_options()).unwrap_err().status(), Status::InvalidArgument);
    let s = y.sum().unwrap();
    assert_eq!(grad(&[&s], &[], None, &no_options()).unwrap_err().status(), Status::InvalidArgument);
    let constant = Tensor::from_slice(&ctx, &[4], &X0).unwrap();
    assert_eq!(grad(&[&s], &[&constant], None, &no_options()).unwrap_err().status(), Status::InvalidArgument);
    // Nothing was freed by the failures.
    let g = grad(&[&s], &[&x], None, &no_options()).unwrap().remove(0).unwrap();
    let want: Vec<f64> = X0.iter().map(|&v| 1.0 - f64::from(v).tanh().powi(2)).collect();
    assert_close(&values(&g), &want, 1e-5, 0.0, "1 - tanh^2");
}

#[test]
fn without_create_graph_gradients_are_not_differentiable_and_retain_graph_keeps_the_tape() {
    let ctx = Context::new().unwrap();
    let x = leaf(&ctx, &[4], &X0);
    let cube = x.mul(&x).unwrap().mul(&x).unwrap().sum().unwrap();
    let g = grad(&[&cube], &[&x], None, &no_options().retain_graph(true)).unwrap().remove(0).unwrap();
    assert!(!g.requires_grad().unwrap());
    let err = grad(&[&g.sum().unwrap()], &[&x], None, &no_options()).unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    let again = grad(&[&cube], &[&x], None, &no_options()).unwrap().remove(0).unwrap();
    assert_eq!(values(&again), values(&g));
    let err = grad(&[&cube], &[&x], None, &no_options()).unwrap_err();
    assert_eq!(err.status(), Status::Order);
    assert!(err.message().contains("retain_graph"), "{err}");
}

#[test]
fn backward_with_retain_graph_and_create_graph() {
    let ctx = Context::new().unwrap();
    let x64: Vec<f64> = X0.iter().map(|&v| f64::from(v)).collect();
    let x = leaf(&ctx, &[4], &X0);
    let loss = x.mul(&x).unwrap().mul(&x).unwrap().sum().unwrap();
    loss.backward_with(None, &BackwardOptions::default().retain_graph(true)).unwrap();
    loss.backward(None).unwrap();
    let want: Vec<f64> = x64.iter().map(|v| 6.0 * v * v).collect();
    assert_close(&values(&x.grad().unwrap().unwrap()), &want, 1e-5, 0.0, "twice 3x^2");
    let err = loss.backward_with(None, &BackwardOptions::default().retain_graph(false)).unwrap_err();
    assert_eq!(err.status(), Status::Order);

    let y = leaf(&ctx, &[4], &X0);
    let loss = y.mul(&y).unwrap().mul(&y).unwrap().sum().unwrap();
    loss.backward_with(None, &BackwardOptions { create_graph: true, ..Default::default() }).unwrap();
    let gy = y.grad().unwrap().unwrap();
    assert!(gy.requires_grad().unwrap());
    let h = grad(&[&gy.sum().unwrap()], &[&y], None, &no_options()).unwrap().remove(0).unwrap();
    assert_close(&values(&h), &x64.iter().map(|v| 6.0 * v).collect::<Vec<_>>(), 1e-5, 1e-6, "6x");
    assert_eq!(BackwardOptions::default(), BackwardOptions { retain_graph: None, create_graph: false });
    assert_eq!(GradOptions::default(), GradOptions { create_graph: false, retain_graph: None, allow_unused: false });
}

// The MLP of the Hessian-vector product: tanh(x W1^T + b1) W2^T + b2
// against y under a mean squared error, sizes N x I -> H -> O.
const N: usize = 6;
const I: usize = 3;
const H: usize = 5;
const O: usize = 2;

/// The gradient of the MLP's loss with respect to [W1, b1, W2, b2], in double.
fn mlp_gradient(p: &[Vec<f64>], x: &[f64], y: &[f64]) -> Vec<Vec<f64>> {
    let (w1, b1, w2, b2) = (&p[0], &p[1], &p[2], &p[3]);
    let mut a = vec![0.0; N * H];
    for n in 0..N {
        for h in 0..H {
            let z: f64 = b1[h] + (0..I).map(|i| x[n * I + i] * w1[h * I + i]).sum::<f64>();
            a[n * H + h] = z.tanh();
        }
    }
    let mut d_out = vec![0.0; N * O];
    for n in 0..N {
        for o in 0..O {
            let out: f64 = b2[o] + (0..H).map(|h| a[n * H + h] * w2[o * H + h]).sum::<f64>();
            d_out[n * O + o] = 2.0 * (out - y[n * O + o]) / (N * O) as f64;
        }
    }
    let mut d_z = vec![0.0; N * H];
    for n in 0..N {
        for h in 0..H {
            let d_a: f64 = (0..O).map(|o| d_out[n * O + o] * w2[o * H + h]).sum();
            d_z[n * H + h] = d_a * (1.0 - a[n * H + h] * a[n * H + h]);
        }
    }
    let mut g = vec![vec![0.0; H * I], vec![0.0; H], vec![0.0; O * H], vec![0.0; O]];
    for n in 0..N {
        for h in 0..H {
            for i in 0..I {
                g[0][h * I + i] += d_z[n * H + h] * x[n * I + i];
            }
            g[1][h] += d_z[n * H + h];
            for o in 0..O {
                g[2][o * H + h] += d_out[n * O + o] * a[n * H + h];
            }
        }
        for o in 0..O {
            g[3][o] += d_out[n * O + o];
        }
    }
    g
}

#[test]
fn hessian_vector_product_of_a_small_mlp_matches_central_differences() {
    let ctx = Context::new().unwrap();
    let mut rng = Lcg(41);
    let shapes: [&[i64]; 4] = [&[H as i64, I as i64], &[H as i64], &[O as i64, H as i64], &[O as i64]];
    let sizes = [H * I, H, O * H, O];
    let init: Vec<Vec<f32>> = sizes.iter().map(|&n| rng.uniform(n, -0.8, 0.8)).collect();
    let vecs: Vec<Vec<f32>> = sizes.iter().map(|&n| rng.uniform(n, -1.0, 1.0)).collect();
    let xb = rng.uniform(N * I, -1.0, 1.0);
    let yb = rng.uniform(N * O, -1.0, 1.0);

    let params: Vec<Tensor> = init.iter().zip(shapes).map(|(p, s)| leaf(&ctx, s, p)).collect();
    let refs: Vec<&Tensor> = params.iter().collect();
    let x = Tensor::from_slice(&ctx, &[N as i64, I as i64], &xb).unwrap();
    let y = Tensor::from_slice(&ctx, &[N as i64, O as i64], &yb).unwrap();
    let hidden = x.linear(&params[0], Some(&params[1]), ampx::Activation::None).unwrap().tanh().unwrap();
    let out = hidden.linear(&params[2], Some(&params[3]), ampx::Activation::None).unwrap();
    let loss = out.mse_loss(&y, Reduction::Mean).unwrap();
    let grads = grad(&[&loss], &refs, None, &GradOptions::default().create_graph(true)).unwrap();
    let mut dot: Option<Tensor> = None;
    for ((g, v), s) in grads.iter().zip(&vecs).zip(shapes) {
        let v = Tensor::from_slice(&ctx, s, v).unwrap();
        let term = g.as_ref().unwrap().mul(&v).unwrap().sum().unwrap();
        dot = Some(match dot {
            None => term,
            Some(d) => d.add(&term).unwrap(),
        });
    }
    let hv = grad(&[&dot.unwrap()], &refs, None, &no_options()).unwrap();

    let f64s = |v: &[f32]| v.iter().map(|&e| f64::from(e)).collect::<Vec<f64>>();
    let (x64, y64) = (f64s(&xb), f64s(&yb));
    let p64: Vec<Vec<f64>> = init.iter().map(|p| f64s(p)).collect();
    let eps = 1e-4;
    let shifted = |sign: f64| -> Vec<Vec<f64>> {
        p64.iter().zip(&vecs).map(|(p, v)| p.iter().zip(v).map(|(p, &v)| p + sign * eps * f64::from(v)).collect()).collect()
    };
    let (plus, minus) = (mlp_gradient(&shifted(1.0), &x64, &y64), mlp_gradient(&shifted(-1.0), &x64, &y64));
    let want: Vec<Vec<f64>> =
        plus.iter().zip(&minus).map(|(a, b)| a.iter().zip(b).map(|(a, b)| (a - b) / (2.0 * eps)).collect()).collect();
    let scale = want.iter().flatten().fold(0.0f64, |m, v| m.max(v.abs()));
    assert!(scale > 1e-2, "a Hessian-vector product worth testing ({scale})");
    for (k, (have, w)) in hv.iter().zip(&want).enumerate() {
        assert_close(&values(have.as_ref().unwrap()), w, 0.0, 1e-4 * scale, &format!("Hv of parameter {k}"));
    }
    for (k, (have, w)) in grads.iter().zip(mlp_gradient(&p64, &x64, &y64)).enumerate() {
        assert_close(&values(have.as_ref().unwrap()), &w, 0.0, 1e-5, &format!("gradient of parameter {k}"));
    }
}

#[test]
fn unscale_tensor_undoes_the_scale_differentiably_and_the_penalty_recipe_skips_overflow() {
    let ctx = Context::new().unwrap();
    let scaler = Scaler::new(&ctx, &ScalerOptions { init_scale: 1024.0, ..Default::default() }).unwrap();
    let x0 = [-1.0f32, 0.25, 0.75];
    let x = leaf(&ctx, &[3], &x0);
    let scaled = scaler.scale_loss(&x.tanh().unwrap().sum().unwrap()).unwrap();
    assert!(scaled.requires_grad().unwrap());
    let g = grad(&[&scaled], &[&x], None, &GradOptions::default().create_graph(true)).unwrap().remove(0).unwrap();
    let u = scaler.unscale_tensor(&g).unwrap();
    let t: Vec<f64> = x0.iter().map(|&v| f64::from(v).tanh()).collect();
    assert_close(&values(&g), &t.iter().map(|t| 1024.0 * (1.0 - t * t)).collect::<Vec<_>>(), 1e-6, 0.0, "scaled");
    assert_close(&values(&u), &t.iter().map(|t| 1.0 - t * t).collect::<Vec<_>>(), 1e-6, 0.0, "unscaled");
    let h = grad(&[&u.sum().unwrap()], &[&x], None, &no_options()).unwrap().remove(0).unwrap();
    assert_close(&values(&h), &t.iter().map(|t| -2.0 * t * (1.0 - t * t)).collect::<Vec<_>>(), 1e-5, 0.0, "d unscaled");
    let ints = Tensor::from_slice(&ctx, &[2], &[1i64, 2]).unwrap();
    assert_eq!(scaler.unscale_tensor(&ints).unwrap_err().status(), Status::Dtype);

    // The recipe: with the scale at 2^127 the scaled gradients (the
    // largest > 2 unscaled: the loss is 16 times a sum) overflow fp32, the
    // penalty is inf, the step is skipped and the scale backs off by 2^-24;
    // at 2^103 the next step is taken.
    let w = leaf(&ctx, &[2, 3], &[0.5, -0.3, 0.8, 0.1, -0.6, 0.4]);
    let xs = Tensor::from_slice(&ctx, &[4, 3], &[0.3f32, -0.2, 0.9, -0.7, 0.5, 0.1, 0.2, 0.8, -0.4, -0.9, 0.6, 0.3])
        .unwrap();
    let opt = Optimizer::sgd(&ctx, &[&w], &SgdOptions { lr: 0.1, ..Default::default() }).unwrap();
    let scaler = Scaler::new(
        &ctx,
        &ScalerOptions { init_scale: 2f64.powi(127), backoff_factor: 2f64.powi(-24), ..Default::default() },
    )
    .unwrap();
    let mut taken = Vec::new();
    for _ in 0..2 {
        let before = w.to_vec::<f32>().unwrap();
        let loss = xs.linear(&w, None, ampx::Activation::None).unwrap().tanh().unwrap().sum().unwrap().affine(16.0, 0.0).unwrap();
        let g = grad(&[&scaler.scale_loss(&loss).unwrap()], &[&w], None, &GradOptions::default().create_graph(true))
            .unwrap()
            .remove(0)
            .unwrap();
        let u = scaler.unscale_tensor(&g).unwrap();
        let total = loss.add(&u.mul(&u).unwrap().sum().unwrap().affine(0.5, 0.0).unwrap()).unwrap();
        total.backward(Some(&scaler)).unwrap();
        scaler.step(&opt).unwrap();
        scaler.update().unwrap();
        opt.zero_grad().unwrap();
        taken.push(w.to_vec::<f32>().unwrap() != before);
    }
    assert_eq!(taken, [false, true]);
    assert_eq!(scaler.counters().unwrap().skipped, 1);
    assert_eq!(scaler.scale().unwrap(), 2f64.powi(103));
}

/// torch's weighted binary cross-entropy in double for an output gradient
/// of ones: (losses, d/dlogits, d/dtargets), before any reduction.
fn bce_reference(x: &[f32], t: &[f32], w: &[f64], p: &[f64]) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let mut out = (Vec::new(), Vec::new(), Vec::new());
    for i in 0..x.len() {
        let (x, t) = (f64::from(x[i]), f64::from(t[i]));
        let log_sig = -(-x.abs()).exp().ln_1p() + x.min(0.0);
        let log_sig_neg = log_sig - x;
        let sig = 1.0 / (1.0 + (-x).exp());
        out.0.push(-w[i] * (p[i] * t * log_sig + (1.0 - t) * log_sig_neg));
        out.1.push(w[i] * ((1.0 + (p[i] - 1.0) * t) * sig - p[i] * t));
        out.2.push(w[i] * (log_sig_neg - p[i] * log_sig));
    }
    out
}

#[test]
fn bce_with_logits_ex_matches_torchs_formula() {
    let ctx = Context::new().unwrap();
    let mut rng = Lcg(430);
    let x = rng.uniform(12, -4.0, 4.0);
    let t = [0.0f32, 1.0, 0.25, 1.0, 1.0, 0.0, 0.5, 0.0, 1.0, 0.0, 0.75, 1.0];
    // weight [4, 1] (one per row), pos_weight [3] (one per class).
    let w_rows = [0.5f32, 1.25, 2.0, 0.75];
    let p_cols = [0.5f32, 3.0, 1.5];
    let w: Vec<f64> = (0..12).map(|i| f64::from(w_rows[i / 3])).collect();
    let p: Vec<f64> = (0..12).map(|i| f64::from(p_cols[i % 3])).collect();
    let (loss, d_x, d_t) = bce_reference(&x, &t, &w, &p);
    let n = 12.0;
    for (reduction, divisor) in [(Reduction::Mean, n), (Reduction::Sum, 1.0), (Reduction::None, 1.0)] {
        let logits = leaf(&ctx, &[4, 3], &x);
        let targets = leaf(&ctx, &[4, 3], &t);
        let weight = Tensor::from_slice(&ctx, &[4, 1], &w_rows).unwrap();
        weight.set_requires_grad(true).unwrap();
        let pos_weight = Tensor::from_slice(&ctx, &[3], &p_cols).unwrap().cast(DType::BF16).unwrap();
        let out = logits.bce_with_logits_ex(&targets, Some(&weight), Some(&pos_weight), reduction).unwrap();
        assert_eq!(out.dtype().unwrap(), DType::F32);
        out.sum().unwrap().backward(None).unwrap();
        let what = format!("{reduction:?}");
        if reduction == Reduction::None {
            assert_eq!(out.shape().unwrap(), vec![4, 3]);
            assert_close(&values(&out), &loss, 1e-5, 1e-6, &what);
        } else {
            assert_close(&values(&out), &[loss.iter().sum::<f64>() / divisor], 1e-5, 1e-6, &what);
        }
        let scaled = |v: &[f64]| v.iter().map(|e| e / divisor).collect::<Vec<_>>();
        assert_close(&values(&logits.grad().unwrap().unwrap()), &scaled(&d_x), 1e-5, 1e-6, &format!("{what} d/dlogits"));
        assert_close(&values(&targets.grad().unwrap().unwrap()), &scaled(&d_t), 1e-5, 1e-6, &format!("{what} d/dtargets"));
        assert!(weight.grad().unwrap().is_none(), "no gradient flows to a weight");
    }
    // Without weights it is bce_with_logits.
    let logits = Tensor::from_slice(&ctx, &[4, 3], &x).unwrap();
    let targets = Tensor::from_slice(&ctx, &[4, 3], &t).unwrap();
    let plain = logits.bce_with_logits(&targets, Reduction::Sum).unwrap().item::<f32>().unwrap();
    let ex = logits.bce_with_logits_ex(&targets, None, None, Reduction::Sum).unwrap().item::<f32>().unwrap();
    assert_eq!(plain, ex);
    // Bad weights.
    let bad = Tensor::zeros(&ctx, DType::F32, &[4]).unwrap();
    let err = logits.bce_with_logits_ex(&targets, Some(&bad), None, Reduction::Mean).unwrap_err();
    assert_eq!(err.status(), Status::Shape);
    let ints = Tensor::from_slice(&ctx, &[3], &[1i32, 2, 3]).unwrap();
    let err = logits.bce_with_logits_ex(&targets, None, Some(&ints), Reduction::Mean).unwrap_err();
    assert_eq!(err.status(), Status::Dtype);
    let other = Context::new().unwrap();
    let foreign = Tensor::zeros(&other, DType::F32, &[3]).unwrap();
    let err = logits.bce_with_logits_ex(&targets, Some(&foreign), None, Reduction::Mean).unwrap_err();
    assert_eq!(err.status(), Status::Device);
}

/// `cast` and `deep_clone` are recorded (issue 47): for loss = sum(x * x) +
/// sum(y * y) with y = x cast, torch gives these x.grad (2x + 2 round(x),
/// exact in fp32 up to the last sum) and, for d sum(g * g) / dx, these
/// second derivatives (torch.autograd.grad with create_graph).
#[test]
fn gradients_through_cast_and_clone_match_torch() {
    let cases: [(&str, Option<DType>, [f64; 3], [f64; 3]); 4] = [
        ("bf16", Some(DType::BF16), [1.201562523841858, -6.806250095367432, 9.0], [9.618749618530273, -54.474998474121094, 72.0]),
        ("f16", Some(DType::F16), [1.200097680091858, -6.800390720367432, 9.0], [9.601171493530273, -54.404685974121094, 72.0]),
        ("f32", Some(DType::F32), [1.2000000476837158, -6.800000190734863, 9.0], [9.600000381469727, -54.400001525878906, 72.0]),
        ("clone", None, [1.2000000476837158, -6.800000190734863, 9.0], [9.600000381469727, -54.400001525878906, 72.0]),
    ];
    for (name, dtype, want_g, want_h) in cases {
        let ctx = Context::new().unwrap();
        let x = leaf(&ctx, &[3], &[0.3, -1.7, 2.25]);
        let cast = |x: &Tensor| match dtype {
            Some(d) => x.cast(d).unwrap(),
            None => x.deep_clone().unwrap(),
        };
        let loss = |x: &Tensor, y: &Tensor| x.mul(x).unwrap().sum().unwrap().add(&y.mul(y).unwrap().sum().unwrap()).unwrap();
        let y = cast(&x);
        assert!(y.requires_grad().unwrap(), "{name}");
        loss(&x, &y).backward(None).unwrap();
        assert_close(&values(&x.grad().unwrap().unwrap()), &want_g, 2e-6, 0.0, name);

        let x = leaf(&ctx, &[3], &[0.3, -1.7, 2.25]);
        let y = cast(&x);
        let create = GradOptions::default().create_graph(true);
        let g = grad(&[&loss(&x, &y)], &[&x], None, &create).unwrap().remove(0).unwrap();
        assert_close(&values(&g), &want_g, 2e-6, 0.0, name);
        let h = grad(&[&g.mul(&g).unwrap().sum().unwrap()], &[&x], None, &no_options()).unwrap().remove(0).unwrap();
        assert_close(&values(&h), &want_h, 2e-6, 0.0, name);
    }
    // A tensor that requires no grad is converted outside autograd.
    let ctx = Context::new().unwrap();
    let plain = Tensor::from_slice(&ctx, &[3], &[0.3f32, -1.7, 2.25]).unwrap();
    assert!(!plain.cast(DType::BF16).unwrap().requires_grad().unwrap());
}
