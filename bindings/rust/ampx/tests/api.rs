//! The rest of the safe API, call by call: versions, tensors, ops, grad
//! mode and scopes, optimizers and their state, the scaler's state,
//! autocast classes, DLPack and checkpoint files.
use ampx::{
    concat, Activation, AdamOptions, AttentionOptions, Autocast, Conv2dOptions, Pool2dOptions, AutocastOptions, Bf16, Context, ContextOptions, DType, Device, LrDecay,
    LrSchedule, OpClass, Optimizer, Reduction, Scaler, ScalerOptions, SgdOptions, StateKind, Status, Tensor, F16,
};

fn close(a: &[f32], b: &[f32], tol: f32) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| (x - y).abs() <= tol)
}

#[test]
fn versions_and_dtypes() {
    assert_eq!(ampx::version(), ampx::sys::AMPX_VERSION_NUMBER as u32);
    assert_eq!(ampx::version_string(), "0.1.0");
    assert!(ampx::cuda_device_count() >= 0);
    let _ = ampx::has_cuda();
    assert_eq!(DType::BF16.name(), "bf16");
    assert_eq!(DType::I64.size(), 8);
    assert_eq!(DType::F16.size(), 2);
    assert_eq!(DType::from_raw(3), Some(DType::BF16));
    assert_eq!(Bf16::from_f32(1.0).to_f32(), 1.0);
    assert_eq!(Bf16::from_f32(1.0 + 1.0 / 512.0).0, Bf16::from_f32(1.0).0, "ties to even");
}

#[test]
fn context_queries() {
    let ctx = Context::with_options(&ContextOptions { num_threads: 1, seed: 7, ..Default::default() }).unwrap();
    assert_eq!(ctx.device().unwrap(), Device::Cpu);
    ctx.synchronize().unwrap();
    assert_eq!(ContextOptions::default().device, Device::Cpu);
    let t = Tensor::zeros(&ctx, DType::F32, &[2]).unwrap();
    assert_eq!(t.context().unwrap(), ctx);
    let stats = ctx.memory_stats().unwrap();
    assert!(stats.current_bytes >= 8 && stats.allocation_count >= 1);
    assert!(format!("{ctx:?}").contains("Cpu"));
}

#[test]
fn tensor_contents_and_metadata() {
    let ctx = Context::new().unwrap();
    let t = Tensor::from_slice(&ctx, &[2, 3], &[1.5f32, -2.0, 3.0, 0.0, 4.25, -1.0]).unwrap();
    assert_eq!(t.shape().unwrap(), vec![2, 3]);
    assert_eq!((t.ndim().unwrap(), t.numel().unwrap(), t.nbytes().unwrap()), (2, 6, 24));
    assert_eq!(t.dtype().unwrap(), DType::F32);
    assert!(!t.data_ptr().unwrap().is_null());
    t.set_name("weights").unwrap();
    assert_eq!(t.name().unwrap(), "weights");
    assert!(format!("{t:?}").contains("[2, 3]"));

    let h = t.cast(DType::BF16).unwrap();
    assert_eq!(h.to_vec::<Bf16>().unwrap()[0], Bf16::from_f32(1.5));
    let i = t.cast(DType::I32).unwrap();
    assert_eq!(i.to_vec::<i32>().unwrap(), vec![1, -2, 3, 0, 4, -1]);
    let f16 = Tensor::from_slice(&ctx, &[1], &[F16(0x3c00)]).unwrap(); // 1.0
    assert_eq!(f16.cast(DType::F32).unwrap().item::<f32>().unwrap(), 1.0);

    let copy = Tensor::empty(&ctx, DType::F32, &[6]).unwrap();
    copy.copy_from(&t).unwrap();
    assert_eq!(copy.to_bytes().unwrap(), t.to_bytes().unwrap());
    copy.fill(0.5).unwrap();
    assert_eq!(copy.to_vec::<f32>().unwrap(), vec![0.5; 6]);
    copy.copy_from_bytes(&t.to_bytes().unwrap()).unwrap();
    assert_eq!(copy.to_vec::<f32>().unwrap(), t.to_vec::<f32>().unwrap());
    let b = Tensor::from_bytes(&ctx, DType::I32, &[2], &[1, 0, 0, 0, 2, 0, 0, 0]).unwrap();
    assert_eq!(b.to_vec::<i32>().unwrap(), vec![1, 2]);
    let scalar = Tensor::from_slice(&ctx, &[], &[3i64]).unwrap();
    assert_eq!((scalar.ndim().unwrap(), scalar.item::<i64>().unwrap()), (0, 3));
}

#[test]
fn gradients_grad_mode_and_scopes() {
    let ctx = Context::new().unwrap();
    let w = Tensor::from_slice(&ctx, &[3], &[1.0f32, 2.0, 3.0]).unwrap();
    assert!(!w.requires_grad().unwrap());
    w.set_requires_grad(true).unwrap();
    assert!(w.grad().unwrap().is_none());
    assert_eq!(ctx.scope_depth().unwrap(), 0);
    {
        let _scope = ctx.scope().unwrap();
        let inner = ctx.scope().unwrap();
        assert_eq!(ctx.scope_depth().unwrap(), 2);
        let loss = w.mul(&w).unwrap().sum().unwrap();
        assert_eq!(ctx.scope_depth().unwrap(), 2, "an op's own scope is gone when it returns");
        assert!(loss.requires_grad().unwrap());
        inner.close().unwrap();
        assert_eq!(ctx.scope_depth().unwrap(), 1);
        loss.backward(None).unwrap(); // our tensor outlives the scopes' references
    }
    assert_eq!(ctx.scope_depth().unwrap(), 0);
    assert_eq!(w.grad().unwrap().unwrap().to_vec::<f32>().unwrap(), vec![2.0, 4.0, 6.0]);
    {
        let guard = ctx.no_grad().unwrap();
        assert!(guard.previous());
        let y = w.affine(2.0, 1.0).unwrap();
        assert!(!y.requires_grad().unwrap());
    }
    assert!(w.affine(2.0, 1.0).unwrap().requires_grad().unwrap(), "grad mode restored");
    assert!(ctx.set_grad_enabled(true).unwrap());
    // TF32: off by default, a setting that reads back.
    assert!(!ctx.set_tf32(true).unwrap());
    assert!(ctx.set_tf32(false).unwrap());
    // An engine's own gradient buffer.
    let g = Tensor::from_slice(&ctx, &[3], &[0.1f32, 0.2, 0.3]).unwrap();
    w.set_grad(Some(&g)).unwrap();
    assert_eq!(w.grad().unwrap().unwrap(), g);
    w.set_grad(None).unwrap();
    assert!(w.grad().unwrap().is_none());
}

#[test]
fn conv2d_and_pooling_match_hand_computed_values() {
    let ctx = Context::new().unwrap();
    // A 3x3 image 1..9 and a 2x2 kernel of ones: each output sums a 2x2 block.
    let x = Tensor::from_slice(&ctx, &[1, 1, 3, 3], &[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0]).unwrap();
    let w = Tensor::from_slice(&ctx, &[1, 1, 2, 2], &[1.0f32; 4]).unwrap();
    let b = Tensor::from_slice(&ctx, &[1], &[0.5f32]).unwrap();
    let y = x.conv2d(&w, Some(&b), &Conv2dOptions::default()).unwrap();
    assert_eq!(y.to_vec::<f32>().unwrap(), vec![12.5, 16.5, 24.5, 28.5]);
    let strided = Conv2dOptions { stride: [2, 2], padding: [1, 1], ..Default::default() };
    assert_eq!(x.conv2d(&w, None, &strided).unwrap().to_vec::<f32>().unwrap(), vec![1.0, 5.0, 11.0, 28.0]);
    let pool = Pool2dOptions { stride: Some([1, 1]), ..Default::default() };
    assert_eq!(x.max_pool2d([2, 2], &pool).unwrap().to_vec::<f32>().unwrap(), vec![5.0, 6.0, 8.0, 9.0]);
    assert_eq!(x.avg_pool2d([2, 2], &pool).unwrap().to_vec::<f32>().unwrap(), vec![3.0, 4.0, 6.0, 7.0]);
    assert_eq!(x.global_avg_pool2d().unwrap().to_vec::<f32>().unwrap(), vec![5.0]);
    let zero_stride = Conv2dOptions { stride: [0, 1], ..Default::default() };
    assert_eq!(x.conv2d(&w, None, &zero_stride).unwrap_err().status(), Status::InvalidArgument);
    let big = Tensor::from_slice(&ctx, &[1, 1, 4, 4], &[1.0f32; 16]).unwrap();
    assert_eq!(x.conv2d(&big, None, &Conv2dOptions::default()).unwrap_err().status(), Status::Shape);
}

#[test]
fn attention_matches_a_hand_computed_softmax() {
    let ctx = Context::new().unwrap();
    // One head, two positions, one feature: scores q_i k_j with scale 1.
    let q = Tensor::from_slice(&ctx, &[1, 1, 2, 1], &[1.0f32, 2.0]).unwrap();
    let v = Tensor::from_slice(&ctx, &[1, 1, 2, 1], &[3.0f32, 5.0]).unwrap();
    let causal = AttentionOptions { causal: true, ..Default::default() };
    let out = q.scaled_dot_product_attention(&q, &v, None, &causal).unwrap().to_vec::<f32>().unwrap();
    let p1 = 1.0 / (1.0 + (-2.0f32).exp()); // weight of key 1 for query 1: e^4 / (e^2 + e^4)
    assert!(close(&out, &[3.0, 3.0 * (1.0 - p1) + 5.0 * p1], 1e-6), "{out:?}");
    // An additive mask of -inf on key 1 gives query 1 only key 0.
    let mask = Tensor::from_slice(&ctx, &[2, 2], &[0.0f32, f32::NEG_INFINITY, 0.0, f32::NEG_INFINITY]).unwrap();
    let masked = q.scaled_dot_product_attention(&q, &v, Some(&mask), &AttentionOptions::default()).unwrap();
    assert_eq!(masked.to_vec::<f32>().unwrap(), vec![3.0, 3.0]);
    // [H, T, D] is one batch of heads, as torch; a 1-D q is refused.
    let three = Tensor::from_slice(&ctx, &[1, 2, 1], &[1.0f32, 2.0]).unwrap();
    let three_v = Tensor::from_slice(&ctx, &[1, 2, 1], &[3.0f32, 5.0]).unwrap();
    let out3 = three.scaled_dot_product_attention(&three, &three_v, None, &causal).unwrap();
    assert!(close(&out3.to_vec::<f32>().unwrap(), &out, 1e-6));
    let one = Tensor::from_slice(&ctx, &[2], &[1.0f32, 2.0]).unwrap();
    let err = one.scaled_dot_product_attention(&one, &one, None, &causal).unwrap_err();
    assert_eq!(err.status(), Status::Shape);
    let zero = AttentionOptions { scale: Some(0.0), ..Default::default() };
    assert_eq!(q.scaled_dot_product_attention(&q, &v, None, &zero).unwrap_err().status(), Status::InvalidArgument);
}

#[test]
fn block_ops_compute() {
    let ctx = Context::new().unwrap();
    let v = |t: Tensor| t.to_vec::<f32>().unwrap();
    let col = Tensor::from_slice(&ctx, &[2, 1], &[1.0f32, 2.0]).unwrap();
    let row = Tensor::from_slice(&ctx, &[3], &[10.0f32, 20.0, 30.0]).unwrap();
    let grid = col.add(&row).unwrap();
    assert_eq!(grid.shape().unwrap(), vec![2, 3]);
    assert_eq!(v(grid.clone()), vec![11.0, 21.0, 31.0, 12.0, 22.0, 32.0]);
    assert_eq!(v(grid.sum_dims(&[0], false).unwrap()), vec![23.0, 43.0, 63.0]);
    assert_eq!(grid.mean_dims(&[-1], true).unwrap().shape().unwrap(), vec![2, 1]);
    assert_eq!(v(grid.amax(&[], false).unwrap()), vec![32.0]);
    assert_eq!(v(grid.permute(&[1, 0]).unwrap()), vec![11.0, 12.0, 21.0, 22.0, 31.0, 32.0]);
    let sm = v(grid.softmax_dim(0).unwrap());
    assert!(close(&sm[..3], &[0.26894143, 0.26894143, 0.26894143], 1e-6));
    let rms = v(col.rms_norm(None, 0.0).unwrap());
    assert!(close(&rms, &[1.0, 1.0], 1e-6));
    assert_eq!(grid.permute(&[0, 0]).unwrap_err().status(), Status::InvalidArgument);
    let parts = grid.split(&[1, 2], 1).unwrap();
    assert_eq!(v(parts[1].clone()), vec![21.0, 31.0, 22.0, 32.0]);
    let chunks = grid.chunk(2, 1).unwrap();
    assert_eq!(chunks.len(), 2);
    assert_eq!(chunks[1].shape().unwrap(), vec![2, 1]);
    let mask = Tensor::from_slice(&ctx, &[3], &[0i32, 1, 0]).unwrap();
    assert_eq!(v(grid.masked_fill(&mask, -1.0).unwrap()), vec![11.0, -1.0, 31.0, 12.0, -1.0, 32.0]);
    assert_eq!(v(col.pow(2.0).unwrap()), vec![1.0, 4.0]);
    // A quarter turn: (a, b) -> (-b, a).
    let pair = Tensor::from_slice(&ctx, &[1, 2], &[1.0f32, 2.0]).unwrap();
    let (c, s) = (Tensor::from_slice(&ctx, &[1, 1], &[0.0f32]).unwrap(), Tensor::from_slice(&ctx, &[1, 1], &[1.0f32]).unwrap());
    assert_eq!(v(pair.rotary_embedding(&c, &s, false).unwrap()), vec![-2.0, 1.0]);
    // Full smoothing over two equal logits: the uniform target, loss ln 2.
    let logits = Tensor::from_slice(&ctx, &[1, 2], &[0.0f32, 0.0]).unwrap();
    let label = Tensor::from_slice(&ctx, &[1], &[1i64]).unwrap();
    let ce = logits.cross_entropy_ex(&label, None, Reduction::Mean, -100, 1.0).unwrap().item::<f32>().unwrap();
    assert!((ce - std::f32::consts::LN_2).abs() < 1e-6);
}

#[test]
fn every_op_computes() {
    let ctx = Context::new().unwrap();
    let a = Tensor::from_slice(&ctx, &[2, 2], &[1.0f32, -2.0, 3.0, -4.0]).unwrap();
    let b = Tensor::from_slice(&ctx, &[2, 2], &[0.5f32, 0.5, 2.0, 2.0]).unwrap();
    let row = Tensor::from_slice(&ctx, &[2], &[10.0f32, 20.0]).unwrap();
    let v = |t: Tensor| t.to_vec::<f32>().unwrap();
    assert_eq!(v(a.add(&b).unwrap()), vec![1.5, -1.5, 5.0, -2.0]);
    assert_eq!(v(a.add(&row).unwrap()), vec![11.0, 18.0, 13.0, 16.0]);
    assert_eq!(v(a.sub(&b).unwrap()), vec![0.5, -2.5, 1.0, -6.0]);
    assert_eq!(v(a.mul(&b).unwrap()), vec![0.5, -1.0, 6.0, -8.0]);
    assert_eq!(v(a.div(&b).unwrap()), vec![2.0, -4.0, 1.5, -2.0]);
    assert_eq!(v(a.affine(2.0, 1.0).unwrap()), vec![3.0, -3.0, 7.0, -7.0]);
    assert_eq!(v(a.relu().unwrap()), vec![1.0, 0.0, 3.0, 0.0]);
    assert!(close(&v(a.gelu().unwrap()), &[0.8413447, -0.04550026, 2.9959502, -0.00012668], 1e-5));
    assert!(close(&v(a.gelu_tanh().unwrap()), &[0.841192, -0.04540231, 2.9963627, -7.0214e-05], 1e-5));
    assert!(close(&v(a.silu().unwrap()), &[0.7310586, -0.23840584, 2.8577223, -0.07194484], 1e-5));
    assert!(close(&v(a.sigmoid().unwrap()), &[0.7310586, 0.11920292, 0.95257413, 0.01798621], 1e-6));
    assert!(close(&v(a.tanh().unwrap()), &[0.7615942, -0.9640276, 0.9950548, -0.9993293], 1e-6));
    let p = Tensor::from_slice(&ctx, &[4], &[0.25f32, 1.0, 4.0, 9.0]).unwrap();
    let e = Tensor::from_slice(&ctx, &[4], &[0.25f32, 1.0, -1.0, 2.0]).unwrap();
    assert!(close(&v(e.exp().unwrap()), &[1.2840254, 2.7182817, 0.36787945, 7.389056], 2e-6));
    assert!(close(&v(p.log().unwrap()), &[-1.3862944, 0.0, 1.3862944, 2.1972246], 1e-6));
    assert_eq!(v(p.sqrt().unwrap()), vec![0.5, 1.0, 2.0, 3.0]);
    assert!(close(&v(p.rsqrt().unwrap()), &[2.0, 1.0, 0.5, 0.33333334], 1e-7));
    assert_eq!(v(a.sum().unwrap()), vec![-2.0]);
    assert_eq!(v(a.mean().unwrap()), vec![-0.5]);
    let sm = v(a.softmax().unwrap());
    assert!(close(&sm, &[0.95257413, 0.04742587, 0.9990889, 0.0009110512], 1e-6));
    assert!(close(&v(a.log_softmax().unwrap()), &sm.iter().map(|x| x.ln()).collect::<Vec<_>>(), 1e-5));
    assert_eq!(v(a.matmul(&b).unwrap()), vec![-3.5, -3.5, -6.5, -6.5]);
    assert_eq!(v(a.linear(&b, Some(&row), Activation::None).unwrap()), vec![9.5, 18.0, 9.5, 18.0]);
    assert_eq!(v(a.linear(&b, None, Activation::Relu).unwrap()), vec![0.0, 0.0, 0.0, 0.0]);
    let ln = v(a.layer_norm(None, None, 1e-5).unwrap());
    assert!(close(&ln, &[1.0, -1.0, 1.0, -1.0], 1e-3));
    let (mean, var) = (Tensor::zeros(&ctx, DType::F32, &[2]).unwrap(), Tensor::zeros(&ctx, DType::F32, &[2]).unwrap());
    var.fill(1.0).unwrap();
    let bn = v(a.batch_norm(None, None, Some((&mean, &var)), true, 0.1, 1e-5).unwrap());
    assert!(close(&bn, &[-1.0, 1.0, 1.0, -1.0], 1e-3));
    assert!(close(&v(mean), &[0.2, -0.3], 1e-6), "running mean updated in place");
    assert_eq!(v(a.dropout(0.0, true).unwrap()), v(a.clone()));
    let dropped = v(a.dropout(0.5, true).unwrap());
    assert!(dropped.iter().zip(v(a.clone())).all(|(d, x)| *d == 0.0 || *d == 2.0 * x));
    let idx = Tensor::from_slice(&ctx, &[3], &[1i64, 0, 1]).unwrap();
    assert_eq!(v(a.embedding(&idx).unwrap()), vec![3.0, -4.0, 1.0, -2.0, 3.0, -4.0]);
    assert_eq!(a.reshape(&[4]).unwrap().shape().unwrap(), vec![4]);
    assert_eq!(v(a.transpose(0, -1).unwrap()), vec![1.0, 3.0, -2.0, -4.0]);
    let c = concat(&[&a, &b], 0).unwrap();
    assert_eq!(c.shape().unwrap(), vec![4, 2]);
    assert_eq!(concat(&[], 0).unwrap_err().status(), Status::InvalidArgument);
    let labels = Tensor::from_slice(&ctx, &[2], &[0i32, 1]).unwrap();
    let ce = a.cross_entropy(&labels, Reduction::Sum, -100).unwrap().item::<f32>().unwrap();
    assert!((ce - (-(0.95257413f32).ln() - (0.0009110512f32).ln())).abs() < 1e-4);
    assert_eq!(a.mse_loss(&b, Reduction::Sum).unwrap().item::<f32>().unwrap(), 0.25 + 6.25 + 1.0 + 36.0);
    let zeros = Tensor::zeros(&ctx, DType::F32, &[2, 2]).unwrap();
    let bce = zeros.bce_with_logits(&zeros, Reduction::Mean).unwrap().item::<f32>().unwrap();
    assert!((bce - std::f32::consts::LN_2).abs() < 1e-6);
}

fn quadratic(ctx: &Context, start: f32) -> Tensor {
    let w = Tensor::from_slice(ctx, &[4], &[start; 4]).unwrap();
    w.set_requires_grad(true).unwrap();
    w.set_name("w").unwrap();
    w
}

#[test]
fn optimizers_groups_state_and_diagnostics() {
    let ctx = Context::new().unwrap();
    let w = quadratic(&ctx, 1.0);
    let v = quadratic(&ctx, 1.0);
    v.set_name("v").unwrap();
    let opt = Optimizer::sgd(&ctx, &[&w], &SgdOptions { lr: 0.1, momentum: 0.9, ..Default::default() }).unwrap();
    assert_eq!(opt.add_group(&[&v], 0.01, 0.0).unwrap(), 1);
    assert_eq!(opt.group_count().unwrap(), 2);
    assert_eq!(opt.lr(1).unwrap(), 0.01);
    opt.set_lr(0, 0.2).unwrap();
    assert_eq!(opt.lr(0).unwrap(), 0.2);
    assert_eq!(opt.lr(7).unwrap_err().status(), Status::InvalidArgument);
    assert_eq!(opt.last_step_taken().unwrap_err().status(), Status::Order);
    w.mul(&w).unwrap().add(&v.mul(&v).unwrap()).unwrap().sum().unwrap().backward(None).unwrap();
    opt.clip_grad_value(1.5).unwrap();
    opt.step().unwrap();
    assert!(opt.last_step_taken().unwrap());
    assert_eq!(opt.param_steps(&w).unwrap(), 1);
    assert_eq!(w.to_vec::<f32>().unwrap(), vec![1.0 - 0.2 * 1.5; 4]);
    assert_eq!(v.to_vec::<f32>().unwrap(), vec![1.0 - 0.01 * 1.5; 4]);
    let momentum = opt.state_tensor(&w, StateKind::Momentum).unwrap();
    assert_eq!(momentum.to_vec::<f32>().unwrap(), vec![1.5; 4]);
    assert_eq!(opt.state_tensor(&w, StateKind::ExpAvgSq).unwrap_err().status(), Status::NotSupported);

    // Save, change, restore.
    let saved = opt.save_state().unwrap();
    opt.set_lr(0, 0.5).unwrap();
    opt.load_state(&saved).unwrap();
    assert_eq!(opt.lr(0).unwrap(), 0.2);

    // Non-finite gradients, by name.
    let g = v.grad().unwrap().unwrap();
    g.copy_from_slice(&[f32::NAN, f32::INFINITY, 0.0, f32::NEG_INFINITY]).unwrap();
    let bad = opt.find_nonfinite_grads().unwrap();
    assert_eq!(bad.len(), 1);
    assert_eq!((bad[0].name.as_str(), bad[0].nan_count, bad[0].inf_count), ("v", 1, 2));
    assert_eq!(bad[0].param, v);
    let e = opt.clip_grad_norm(1.0, f64::INFINITY, true).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    opt.zero_grad().unwrap();
    assert!(opt.find_nonfinite_grads().unwrap().is_empty());

    // Adam keeps fp32 masters for bf16 parameters.
    let p = Tensor::from_slice(&ctx, &[2], &[Bf16::from_f32(1.0); 2]).unwrap();
    p.set_requires_grad(true).unwrap();
    let adam = Optimizer::adam(&ctx, &[&p], &AdamOptions { lr: 1e-3, ..AdamOptions::adam() }).unwrap();
    p.sum().unwrap().backward(None).unwrap();
    adam.step().unwrap();
    let master = adam.state_tensor(&p, StateKind::Master).unwrap().to_vec::<f32>().unwrap();
    assert!((master[0] - 0.999).abs() < 1e-6, "{master:?}");
    assert_eq!(p.to_vec::<Bf16>().unwrap()[0], Bf16::from_f32(master[0]));
}

#[test]
fn lr_schedules_run_on_the_device() {
    let ctx = Context::new().unwrap();
    let w = Tensor::from_slice(&ctx, &[2], &[0.0f32; 2]).unwrap();
    w.set_grad(Some(&Tensor::from_slice(&ctx, &[2], &[1.0f32; 2]).unwrap())).unwrap();
    let opt = Optimizer::sgd(&ctx, &[&w], &SgdOptions { lr: 0.5, ..Default::default() }).unwrap();
    let schedule = LrSchedule {
        warmup_steps: 2,
        warmup_start_factor: 0.5,
        decay: LrDecay::Step,
        step_size: 1,
        gamma: 0.5,
        ..Default::default()
    };
    opt.set_lr_schedule(0, Some(&schedule)).unwrap();
    assert_eq!(opt.lr_schedule(0).unwrap(), schedule);
    // Rates 0.25, 0.375 (warm-up), then 0.5, 0.25, 0.125: exact in fp32.
    let mut want = 0.0f32;
    for (k, rate) in [0.25f32, 0.375, 0.5, 0.25, 0.125].iter().enumerate() {
        assert_eq!(schedule.value(0.5, k as i64).unwrap(), f64::from(*rate));
        opt.step().unwrap();
        want -= rate;
        assert_eq!(w.to_vec::<f32>().unwrap(), vec![want; 2]);
    }
    assert_eq!(opt.step_count().unwrap(), 5);
    opt.set_lr_schedule(0, None).unwrap();
    assert_eq!(opt.lr_schedule(0).unwrap(), LrSchedule::default());
    let bad = LrSchedule { warmup_steps: -1, ..Default::default() };
    assert_eq!(opt.set_lr_schedule(0, Some(&bad)).unwrap_err().status(), Status::InvalidArgument);
    let bad = LrSchedule { decay: LrDecay::Cosine, total_steps: 0, ..Default::default() };
    assert_eq!(bad.value(0.1, 0).unwrap_err().status(), Status::InvalidArgument);
    assert_eq!(opt.lr_schedule(0).unwrap(), LrSchedule::default());
}

#[test]
fn scaler_state_counters_and_skips() {
    let ctx = Context::new().unwrap();
    let w = quadratic(&ctx, 2.0);
    let opt = Optimizer::sgd(&ctx, &[&w], &SgdOptions { lr: 0.1, ..Default::default() }).unwrap();
    let scaler = Scaler::new(&ctx, &ScalerOptions { init_scale: 8.0, growth_interval: 1, ..Default::default() }).unwrap();
    scaler.attach(&opt).unwrap();
    assert_eq!(scaler.scale_tensor().unwrap().item::<f32>().unwrap(), 8.0);
    let loss = w.sum().unwrap();
    assert_eq!(scaler.scale_loss(&loss).unwrap().item::<f32>().unwrap(), 64.0);
    loss.backward(Some(&scaler)).unwrap();
    assert_eq!(w.grad().unwrap().unwrap().to_vec::<f32>().unwrap(), vec![8.0; 4], "scaled gradients");
    scaler.unscale(&opt).unwrap();
    assert!(!scaler.found_inf(&opt).unwrap());
    scaler.step(&opt).unwrap();
    scaler.update().unwrap();
    assert_eq!(scaler.scale().unwrap(), 16.0);

    // An overflowing iteration is skipped and backs off.
    opt.zero_grad().unwrap();
    w.sum().unwrap().backward(Some(&scaler)).unwrap();
    w.grad().unwrap().unwrap().fill(f64::INFINITY).unwrap();
    let before = w.to_vec::<f32>().unwrap();
    scaler.step(&opt).unwrap();
    assert!(scaler.found_inf(&opt).unwrap());
    assert!(!opt.last_step_taken().unwrap());
    scaler.update_to(4.0).unwrap();
    assert_eq!(w.to_vec::<f32>().unwrap(), before);
    let counters = scaler.counters().unwrap();
    assert_eq!((counters.updates, counters.skipped, counters.growths), (2, 1, 1));

    let mut state = scaler.state().unwrap();
    assert_eq!(state.scale, 4.0);
    assert_eq!(state.counters, counters);
    state.scale = 128.0;
    scaler.set_state(&state).unwrap();
    assert_eq!(scaler.scale().unwrap(), 128.0);
    state.growth_factor = 0.5;
    assert_eq!(scaler.set_state(&state).unwrap_err().status(), Status::InvalidArgument);
}

#[test]
fn autocast_policies() {
    let ctx = Context::new().unwrap();
    let ac = Autocast::new(&ctx, &AutocastOptions::with_dtype(DType::BF16)).unwrap();
    assert_eq!(AutocastOptions::default().dtype, DType::F16);
    assert_eq!(ac.op_class("matmul").unwrap(), OpClass::LowerPrecision);
    assert_eq!(ac.op_class("softmax").unwrap(), OpClass::Fp32);
    assert_eq!(ac.op_class("add").unwrap(), OpClass::Promote);
    assert_eq!(ac.op_class("relu").unwrap(), OpClass::Keep);
    assert_eq!(ac.op_class("no_such_op").unwrap_err().status(), Status::InvalidArgument);
    let w = quadratic(&ctx, 0.5);
    let x = Tensor::from_slice(&ctx, &[1, 4], &[1.0f32; 4]).unwrap();
    let w2 = w.reshape(&[1, 4]).unwrap();
    let out = ac.run(|| x.matmul(&w2.transpose(0, 1)?)).unwrap();
    assert_eq!(out.dtype().unwrap(), DType::BF16);
    ac.set_op_class("matmul", OpClass::Fp32).unwrap();
    assert_eq!(ac.op_class("matmul").unwrap(), OpClass::Fp32);
    let out = ac.run(|| x.matmul(&w2.transpose(0, 1)?)).unwrap();
    assert_eq!(out.dtype().unwrap(), DType::F32);
    let (hits, misses) = ac.cache_stats().unwrap();
    assert!(hits >= 0 && misses >= 0);
    let disabled = Autocast::new(&ctx, &AutocastOptions { enabled: false, ..Default::default() }).unwrap();
    let g = disabled.enter().unwrap();
    assert_eq!(x.matmul(&w2.transpose(0, 1).unwrap()).unwrap().dtype().unwrap(), DType::F32);
    drop(g);
}

#[test]
fn dlpack_round_trip_shares_memory() {
    let ctx = Context::new().unwrap();
    let t = Tensor::from_slice(&ctx, &[2, 2], &[1.0f32, 2.0, 3.0, 4.0]).unwrap();
    let managed = t.to_dlpack().unwrap();
    // SAFETY: ampx made it; ampx takes it back and calls its deleter.
    let back = unsafe { Tensor::from_dlpack(&ctx, managed) }.unwrap();
    assert_eq!(back.shape().unwrap(), vec![2, 2]);
    back.fill(9.0).unwrap();
    assert_eq!(t.to_vec::<f32>().unwrap(), vec![9.0; 4]);
    drop(t);
    assert_eq!(back.to_vec::<f32>().unwrap(), vec![9.0; 4], "the export keeps the source alive");
}

#[test]
fn checkpoint_files_resume_bit_for_bit() {
    let dir = std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join("ampx-rust-checkpoint");
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join(format!("train-{}.ckpt", std::process::id()));
    let ctx = Context::new().unwrap();
    let w = quadratic(&ctx, 1.0);
    let opt = Optimizer::adamw(&ctx, &[&w], 0.05).unwrap();
    let scaler = Scaler::new(&ctx, &ScalerOptions { init_scale: 256.0, growth_interval: 2, ..Default::default() }).unwrap();
    let step = || {
        w.mul(&w).unwrap().sum().unwrap().backward(Some(&scaler)).unwrap();
        scaler.step(&opt).unwrap();
        scaler.update().unwrap();
        opt.zero_grad().unwrap();
    };
    step();
    ampx::save_checkpoint(&path, &[&w], Some(&opt), Some(&scaler)).unwrap();
    step();
    step();
    let (after, scale) = (w.to_vec::<f32>().unwrap(), scaler.scale().unwrap());
    ampx::load_checkpoint(&path, &[&w], Some(&opt), Some(&scaler)).unwrap();
    step();
    step();
    assert_eq!(w.to_vec::<f32>().unwrap(), after);
    assert_eq!(scaler.scale().unwrap(), scale);
    let e = ampx::load_checkpoint(dir.join("missing.ckpt"), &[&w], None, None).unwrap_err();
    assert_eq!(e.status(), Status::Io);
    std::fs::remove_file(&path).unwrap();
}
