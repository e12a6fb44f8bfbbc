//! Test (3): ownership. Clones, drops in odd orders, tensors and other
//! objects outliving every `Context` value: no crash and no leak, checked
//! with the context's memory statistics and with allocator hooks that count
//! what the library holds (which only drops to zero when the context itself
//! is destroyed).
use std::ffi::c_void;
use std::sync::atomic::{AtomicI64, Ordering};

use ampx::sys;
use ampx::{Activation, Autocast, AutocastOptions, Context, DType, Optimizer, Reduction, Scaler, ScalerOptions, Tensor};

/// Live allocations made through the hooks.
#[derive(Default)]
struct Counter {
    allocations: AtomicI64,
    bytes: AtomicI64,
}

const ALIGN: usize = 256; // the largest alignment ampx asks for

unsafe extern "C" fn counting_alloc(user_data: *mut c_void, bytes: usize, alignment: usize) -> *mut c_void {
    assert!(alignment <= ALIGN && alignment.is_power_of_two());
    let counter = &*user_data.cast::<Counter>();
    let layout = std::alloc::Layout::from_size_align(bytes.max(1), ALIGN).unwrap();
    let p = std::alloc::alloc(layout);
    if !p.is_null() {
        counter.allocations.fetch_add(1, Ordering::SeqCst);
        counter.bytes.fetch_add(bytes as i64, Ordering::SeqCst);
    }
    p.cast()
}

unsafe extern "C" fn counting_free(user_data: *mut c_void, ptr: *mut c_void, bytes: usize) {
    let counter = &*user_data.cast::<Counter>();
    counter.allocations.fetch_sub(1, Ordering::SeqCst);
    counter.bytes.fetch_sub(bytes as i64, Ordering::SeqCst);
    std::alloc::dealloc(ptr.cast(), std::alloc::Layout::from_size_align(bytes.max(1), ALIGN).unwrap());
}

/// A context whose tensor memory goes through counting hooks. The counter
/// is leaked: it must outlive the context, whose end the test observes.
fn counted_context() -> (Context, &'static Counter) {
    let counter: &'static Counter = Box::leak(Box::default());
    // SAFETY: the hooks are thread-safe and the counter lives forever.
    let ctx = unsafe {
        let mut options = sys::ampx_context_options_default();
        options.allocator = sys::ampx_allocator {
            struct_size: std::mem::size_of::<sys::ampx_allocator>(),
            alloc: Some(counting_alloc),
            free: Some(counting_free),
            user_data: counter as *const Counter as *mut c_void,
        };
        Context::with_raw_options(&options).unwrap()
    };
    (ctx, counter)
}

fn live(counter: &Counter) -> (i64, i64) {
    (counter.allocations.load(Ordering::SeqCst), counter.bytes.load(Ordering::SeqCst))
}

fn param(ctx: &Context, shape: &[i64], fill: f32) -> Tensor {
    let n: i64 = shape.iter().product();
    let t = Tensor::from_slice(ctx, shape, &vec![fill; n as usize]).unwrap();
    t.set_requires_grad(true).unwrap();
    t
}

#[test]
fn clones_share_one_tensor_and_drop_in_any_order() {
    let ctx = Context::new().unwrap();
    let base = ctx.memory_stats().unwrap().current_bytes;
    let a = Tensor::from_slice(&ctx, &[4], &[1.0f32, 2.0, 3.0, 4.0]).unwrap();
    let b = a.clone();
    let c = b.clone();
    assert_eq!(a, c, "clones are the same tensor");
    assert_eq!(a.as_raw(), b.as_raw());
    drop(a);
    c.fill(7.0).unwrap();
    assert_eq!(b.to_vec::<f32>().unwrap(), vec![7.0; 4]);
    drop(b);
    assert!(ctx.memory_stats().unwrap().current_bytes > base);
    drop(c);
    assert_eq!(ctx.memory_stats().unwrap().current_bytes, base);

    let ctx2 = ctx.clone();
    assert_eq!(ctx, ctx2);
    drop(ctx);
    Tensor::zeros(&ctx2, DType::F32, &[3]).unwrap();
}

#[test]
fn memory_returns_to_baseline_after_a_training_step() {
    let ctx = Context::new().unwrap();
    let base = ctx.memory_stats().unwrap();
    {
        let x = Tensor::from_slice(&ctx, &[4, 3], &[0.25f32; 12]).unwrap();
        let w = param(&ctx, &[2, 3], 0.5);
        let b = param(&ctx, &[2], 0.0);
        let y = Tensor::zeros(&ctx, DType::F32, &[4, 2]).unwrap();
        let opt = Optimizer::adamw(&ctx, &[&w, &b], 1e-2).unwrap();
        let scaler = Scaler::new(&ctx, &ScalerOptions::default()).unwrap();
        let autocast = Autocast::new(&ctx, &AutocastOptions::default()).unwrap();
        let loss = autocast
            .run(|| x.linear(&w, Some(&b), Activation::Relu)?.mse_loss(&y, Reduction::Mean))
            .unwrap();
        loss.backward(Some(&scaler)).unwrap();
        let grad = w.grad().unwrap().unwrap();
        scaler.unscale(&opt).unwrap();
        let total = opt.clip_grad_norm(1.0, 2.0, false).unwrap();
        scaler.step(&opt).unwrap();
        scaler.update().unwrap();
        let master = opt.state_tensor(&w, ampx::StateKind::Momentum).unwrap();
        let exported = x.to_dlpack().unwrap();
        // SAFETY: a DLManagedTensor from ampx, handed back to it.
        let imported = unsafe { Tensor::from_dlpack(&ctx, exported) }.unwrap();
        assert_eq!(imported.data_ptr().unwrap(), x.data_ptr().unwrap(), "zero-copy both ways");
        // Drop in an order unlike creation: the optimizer before its
        // parameters' gradients, the scaler before the optimizer, the loss last.
        drop(scaler);
        drop(w);
        drop(imported);
        drop(opt);
        drop(x);
        drop(autocast);
        drop(total);
        drop(master);
        drop(grad);
        drop(b);
        drop(y);
        drop(loss);
    }
    let after = ctx.memory_stats().unwrap();
    assert_eq!(after.current_bytes, base.current_bytes, "{after:?} vs {base:?}");
    assert!(after.peak_bytes > base.peak_bytes);
    ctx.reset_peak_memory().unwrap();
    assert_eq!(ctx.memory_stats().unwrap().peak_bytes, after.current_bytes);
}

#[test]
fn objects_outlive_their_context_value_and_free_everything() {
    let (ctx, counter) = counted_context();
    let w = param(&ctx, &[8, 8], 0.125);
    let x = Tensor::from_slice(&ctx, &[4, 8], &[1.0f32; 32]).unwrap();
    let opt = Optimizer::sgd(&ctx, &[&w], &ampx::SgdOptions { lr: 0.5, momentum: 0.9, ..Default::default() }).unwrap();
    let scaler = Scaler::new(&ctx, &ScalerOptions::default()).unwrap();
    let loss = x.matmul(&w.transpose(0, 1).unwrap()).unwrap().sum().unwrap();
    loss.backward(None).unwrap();
    assert!(live(counter).0 > 0);

    // The last Context value goes first; everything else keeps working.
    drop(ctx);
    assert_eq!(w.context().unwrap_err().status(), ampx::Status::StaleHandle);
    opt.step().unwrap();
    let moved = w.to_vec::<f32>().unwrap();
    assert!(moved.iter().all(|&v| v < 0.125), "the step moved every weight");
    let doubled = x.affine(2.0, 0.0).unwrap();
    assert_eq!(doubled.to_vec::<f32>().unwrap(), vec![2.0; 32]);
    assert_eq!(scaler.scale().unwrap(), 65536.0);

    drop(opt);
    drop(loss);
    drop(w);
    drop(scaler);
    assert!(live(counter).0 > 0, "x and doubled still hold memory");
    drop(x);
    drop(doubled);
    // The context was destroyed with its last object: its allocator handed
    // every byte back.
    assert_eq!(live(counter), (0, 0));
}

#[test]
fn an_unused_forward_is_freed_with_the_context() {
    // A forward pass recorded on the tape and never backpropagated.
    let (ctx, counter) = counted_context();
    let w = param(&ctx, &[4, 4], 0.5);
    let x = Tensor::from_slice(&ctx, &[2, 4], &[1.0f32; 8]).unwrap();
    let h = x.linear(&w, None, Activation::Gelu).unwrap();
    drop(ctx);
    drop(x);
    drop(w);
    drop(h);
    assert_eq!(live(counter), (0, 0));
}

/// An op on tensors whose context has no `Context` value left: the library
/// no longer records it (a record would hold its inputs, which hold the
/// context -- a cycle that would keep the context alive forever), so
/// everything is freed once the tensors are dropped.
#[test]
fn recording_after_the_context_value_is_gone() {
    let (ctx, counter) = counted_context();
    let w = param(&ctx, &[4, 4], 0.5);
    let x = Tensor::from_slice(&ctx, &[2, 4], &[1.0f32; 8]).unwrap();
    drop(ctx);
    let h = x.linear(&w, None, Activation::None).unwrap();
    drop(h);
    drop(x);
    drop(w);
    assert_eq!(live(counter), (0, 0), "the context was not destroyed");
}

#[test]
fn gradients_and_state_tensors_outlive_their_owners() {
    let ctx = Context::new().unwrap();
    let base = ctx.memory_stats().unwrap().current_bytes;
    let grad;
    let momentum;
    {
        let w = param(&ctx, &[3], 1.0);
        let opt = Optimizer::sgd(&ctx, &[&w], &ampx::SgdOptions { momentum: 0.5, ..Default::default() }).unwrap();
        w.mul(&w).unwrap().sum().unwrap().backward(None).unwrap();
        opt.step().unwrap();
        grad = w.grad().unwrap().unwrap();
        momentum = opt.state_tensor(&w, ampx::StateKind::Momentum).unwrap();
    }
    assert_eq!(grad.to_vec::<f32>().unwrap(), vec![2.0; 3]);
    assert_eq!(momentum.to_vec::<f32>().unwrap(), vec![2.0; 3]);
    drop(grad);
    drop(momentum);
    assert_eq!(ctx.memory_stats().unwrap().current_bytes, base);
}

#[test]
fn wrapped_vectors_are_freed_by_the_library() {
    let ctx = Context::new().unwrap();
    let t = Tensor::from_vec(&ctx, &[2, 3], vec![1i64, 2, 3, 4, 5, 6]).unwrap();
    let r = t.reshape(&[3, -1]).unwrap();
    drop(t);
    assert_eq!(r.shape().unwrap(), vec![3, 2]);
    assert_eq!(r.to_vec::<i64>().unwrap(), vec![1, 2, 3, 4, 5, 6]);
    drop(r); // the library calls the deleter, which frees the Vec
    let e = Tensor::from_vec(&ctx, &[4], vec![1.0f32; 3]).unwrap_err();
    assert_eq!(e.status(), ampx::Status::Shape, "the vector is returned to Rust and dropped");
}
