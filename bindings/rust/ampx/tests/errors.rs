//! Test (2): failures arrive as `Err(Error)` carrying the status and the
//! library's message. (Stale handles cannot be made without `unsafe`: see the
//! `compile_fail` examples in the crate documentation.)
use ampx::{
    Activation, Autocast, AutocastOptions, Context, ContextOptions, DType, Device, Error, Optimizer, Reduction, Scaler,
    ScalerOptions, Status, Tensor,
};

fn ctx() -> Context {
    Context::new().expect("a CPU context")
}

#[test]
fn shape_mismatch_in_an_op() {
    let ctx = ctx();
    let a = Tensor::zeros(&ctx, DType::F32, &[2, 3]).unwrap();
    let b = Tensor::zeros(&ctx, DType::F32, &[4, 5]).unwrap();
    let e = a.matmul(&b).unwrap_err();
    assert_eq!(e.status(), Status::Shape);
    assert!(e.message().starts_with("ampx_matmul"), "{e}");
    assert!(e.message().contains("[2, 3]") || e.message().contains("2"), "{e}");
    assert!(e.to_string().starts_with("AMPX_ERR_SHAPE: "), "{e}");
    // The thread's last error is the same failure.
    let last = Error::last().expect("a failure was recorded");
    assert_eq!(last.status(), Status::Shape);
    assert_eq!(last.message(), e.message());
}

#[test]
fn byte_count_mismatch_on_creation_and_copies() {
    let ctx = ctx();
    let e = Tensor::from_slice(&ctx, &[2, 2], &[1.0f32, 2.0, 3.0]).unwrap_err();
    assert_eq!(e.status(), Status::Shape);
    assert!(e.message().contains("ampx_tensor_from_host"), "{e}");
    let t = Tensor::zeros(&ctx, DType::F32, &[4]).unwrap();
    assert_eq!(t.copy_from_slice(&[1.0f32; 3]).unwrap_err().status(), Status::Shape);
    let e = Tensor::zeros(&ctx, DType::F32, &[1, 2, 3, 4, 5, 6, 7, 8, 9]).unwrap_err();
    assert_eq!(e.status(), Status::Shape);
}

#[test]
fn dtype_errors() {
    let ctx = ctx();
    let t = Tensor::zeros(&ctx, DType::I32, &[3]).unwrap();
    let e = t.set_requires_grad(true).unwrap_err();
    assert_eq!(e.status(), Status::Dtype);
    assert!(e.message().contains("ampx_tensor_set_requires_grad"), "{e}");
    // Detected by the binding: the host type does not match.
    let e = t.to_vec::<f32>().unwrap_err();
    assert_eq!(e.status(), Status::Dtype);
    assert!(e.message().contains("i32"), "{e}");
    let e = Autocast::new(&ctx, &AutocastOptions::with_dtype(DType::F32)).unwrap_err();
    assert_eq!(e.status(), Status::Dtype);
}

#[test]
fn clipping_before_unscaling_is_an_order_error() {
    let ctx = ctx();
    let x = Tensor::from_slice(&ctx, &[2, 2], &[1.0f32, 2.0, 3.0, 4.0]).unwrap();
    let w = Tensor::from_slice(&ctx, &[1, 2], &[0.5f32, -0.5]).unwrap();
    w.set_requires_grad(true).unwrap();
    let y = Tensor::zeros(&ctx, DType::F32, &[2, 1]).unwrap();
    let opt = Optimizer::adamw(&ctx, &[&w], 1e-3).unwrap();
    let scaler = Scaler::new(&ctx, &ScalerOptions::default()).unwrap();
    scaler.attach(&opt).unwrap();
    let loss = x.linear(&w, None, Activation::None).unwrap().mse_loss(&y, Reduction::Mean).unwrap();
    loss.backward(Some(&scaler)).unwrap();

    let e = opt.clip_grad_norm(1.0, 2.0, false).unwrap_err();
    assert_eq!(e.status(), Status::Order);
    assert!(e.message().contains("ampx_clip_grad_norm"), "{e}");
    assert!(e.message().contains("unscale"), "the message says what to do: {e}");
    assert_eq!(opt.clip_grad_value(1.0).unwrap_err().status(), Status::Order);
    // Stepping the optimizer directly with scaled gradients is refused too.
    assert_eq!(opt.step().unwrap_err().status(), Status::Order);

    // After unscaling the same calls succeed; doing things twice does not.
    scaler.unscale(&opt).unwrap();
    assert_eq!(scaler.unscale(&opt).unwrap_err().status(), Status::Order);
    opt.clip_grad_norm(1.0, 2.0, false).unwrap();
    scaler.step(&opt).unwrap();
    assert_eq!(scaler.step(&opt).unwrap_err().status(), Status::Order);
    scaler.update().unwrap();
    let e = scaler.update().unwrap_err();
    assert_eq!(e.status(), Status::Order);
    assert!(e.message().contains("ampx_scaler_update"), "{e}");
}

#[test]
fn invalid_options_name_the_option() {
    let ctx = ctx();
    let e = Scaler::new(&ctx, &ScalerOptions { growth_factor: 0.5, ..Default::default() }).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    assert!(e.message().contains("growth"), "{e}");
    let w = Tensor::zeros(&ctx, DType::F32, &[2]).unwrap();
    let e = Optimizer::adam(&ctx, &[&w], &ampx::AdamOptions { lr: -1.0, ..Default::default() }).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    assert!(e.message().contains("lr"), "{e}");
    let e = Optimizer::adamw(&ctx, &[&w, &w], 1e-3).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument, "a duplicate parameter: {e}");
}

#[test]
fn missing_device_and_mixed_contexts() {
    if !ampx::has_cuda() || ampx::cuda_device_count() == 0 {
        let e = Context::with_options(&ContextOptions { device: Device::Cuda(0), ..Default::default() }).unwrap_err();
        assert_eq!(e.status(), Status::NoDevice);
    }
    let (a, b) = (ctx(), ctx());
    let ta = Tensor::zeros(&a, DType::F32, &[3]).unwrap();
    let tb = Tensor::zeros(&b, DType::F32, &[3]).unwrap();
    assert_eq!(ta.add(&tb).unwrap_err().status(), Status::Device);
    assert_eq!(ta.copy_from(&tb).unwrap_err().status(), Status::Device);
}

#[test]
fn autocast_regions_must_nest() {
    let ctx = ctx();
    let outer = Autocast::new(&ctx, &AutocastOptions::default()).unwrap();
    let inner = Autocast::new(&ctx, &AutocastOptions::with_dtype(DType::BF16)).unwrap();
    let mut g_outer = outer.enter().unwrap();
    let mut g_inner = inner.enter().unwrap();
    // Leaving the outer region while the inner one is open is refused...
    let e = g_outer.exit().unwrap_err();
    assert_eq!(e.status(), Status::Order);
    assert!(e.message().contains("ampx_autocast_exit"), "{e}");
    assert!(g_outer.is_active(), "a refused exit leaves the region entered");
    // ...and succeeds once the inner region is left.
    g_inner.exit().unwrap();
    g_outer.exit().unwrap();
    assert!(!g_outer.is_active());
    g_outer.exit().unwrap(); // a no-op now
}

#[test]
fn backward_from_a_non_scalar_or_a_leaf() {
    let ctx = ctx();
    let w = Tensor::from_slice(&ctx, &[2], &[1.0f32, 2.0]).unwrap();
    w.set_requires_grad(true).unwrap();
    let y = w.affine(2.0, 0.0).unwrap();
    assert_eq!(y.backward(None).unwrap_err().status(), Status::Shape);
    let s = Tensor::from_slice(&ctx, &[], &[1.0f32]).unwrap();
    let e = s.backward(None).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    assert!(e.message().contains("ampx_backward"), "{e}");
}

#[test]
fn corrupt_optimizer_state_is_refused_and_changes_nothing() {
    let ctx = ctx();
    let w = Tensor::from_slice(&ctx, &[2], &[1.0f32, 2.0]).unwrap();
    let opt = Optimizer::adamw(&ctx, &[&w], 1e-3).unwrap();
    let mut state = opt.save_state().unwrap();
    let last = state.len() - 1;
    state[last] ^= 0xff;
    assert_eq!(opt.load_state(&state).unwrap_err().status(), Status::Corrupt);
    assert_eq!(opt.load_state(&state[..4]).unwrap_err().status(), Status::Corrupt);
}

#[test]
fn status_names_and_codes() {
    assert_eq!(Status::Shape.name(), "AMPX_ERR_SHAPE");
    assert_eq!(Status::from_code(8), Some(Status::Order));
    assert_eq!(Status::from_code(0), None);
    assert_eq!(Status::from_code(99), Some(Status::Unknown(99)));
    assert_eq!(Status::Unknown(99).name(), "AMPX_UNKNOWN_STATUS");
    assert_eq!(Status::Order.code(), 8);
}
