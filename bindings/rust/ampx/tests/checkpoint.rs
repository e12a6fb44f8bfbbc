//! Test (5): gradient checkpointing with Rust closures: the same gradients
//! as running the segment directly, the closure run again in backward and
//! freed afterwards, and errors and panics in the closure arriving as
//! `Err` -- never unwinding through the C library.
use std::cell::Cell;
use std::rc::Rc;

use ampx::{Activation, Context, DType, Error, Reduction, Result, Status, Tensor};

struct Model {
    w: Tensor,
    b: Tensor,
    x: Tensor,
    y: Tensor,
}

fn model(ctx: &Context) -> Model {
    let w: Vec<f32> = (0..12).map(|i| ((i * 7) % 5) as f32 / 8.0 - 0.25).collect();
    let x: Vec<f32> = (0..8).map(|i| (i % 3) as f32 - 1.0).collect();
    let w = Tensor::from_slice(ctx, &[3, 4], &w).unwrap();
    let b = Tensor::from_slice(ctx, &[3], &[0.1f32, -0.2, 0.3]).unwrap();
    w.set_requires_grad(true).unwrap();
    b.set_requires_grad(true).unwrap();
    w.set_name("w").unwrap();
    let x = Tensor::from_slice(ctx, &[2, 4], &x).unwrap();
    x.set_requires_grad(true).unwrap();
    let y = Tensor::zeros(ctx, DType::F32, &[2, 3]).unwrap();
    Model { w, b, x, y }
}

fn grads(m: &Model) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let get = |t: &Tensor| t.grad().unwrap().expect("a gradient").to_vec::<f32>().unwrap();
    (get(&m.w), get(&m.b), get(&m.x))
}

/// Drop of this value records that the closure holding it was freed.
struct DropFlag(Rc<Cell<bool>>);
impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.set(true);
    }
}

#[test]
fn checkpointed_gradients_equal_direct_ones_and_the_closure_is_freed() {
    let ctx = Context::new().unwrap();
    let direct = model(&ctx);
    let loss = direct
        .x
        .linear(&direct.w, Some(&direct.b), Activation::Gelu)
        .unwrap()
        .tanh()
        .unwrap()
        .mse_loss(&direct.y, Reduction::Sum)
        .unwrap();
    loss.backward(None).unwrap();

    let m = model(&ctx);
    let calls = Rc::new(Cell::new(0));
    let freed = Rc::new(Cell::new(false));
    let (w, b) = (m.w.clone(), m.b.clone());
    let (calls_in, flag) = (calls.clone(), DropFlag(freed.clone()));
    let outputs = ctx
        .checkpoint(&[&m.x], 1, move |inputs| {
            let _keep = &flag;
            calls_in.set(calls_in.get() + 1);
            assert_eq!(inputs.len(), 1, "the binding's hidden anchor is not shown");
            Ok(vec![inputs[0].linear(&w, Some(&b), Activation::Gelu)?.tanh()?])
        })
        .unwrap();
    assert_eq!(calls.get(), 1);
    assert_eq!(outputs.len(), 1);
    assert!(!freed.get(), "the tape keeps the segment for backward");
    let loss2 = outputs[0].mse_loss(&m.y, Reduction::Sum).unwrap();
    assert_eq!(loss.item::<f32>().unwrap().to_bits(), loss2.item::<f32>().unwrap().to_bits());
    loss2.backward(None).unwrap();
    assert_eq!(calls.get(), 2, "run again in backward");
    assert!(freed.get(), "freed once the tape let go of it");
    assert_eq!(grads(&direct), grads(&m), "the same gradients, bit for bit");
}

#[test]
fn without_grad_mode_the_segment_runs_once_and_is_freed_at_once() {
    let ctx = Context::new().unwrap();
    let m = model(&ctx);
    let freed = Rc::new(Cell::new(false));
    let flag = DropFlag(freed.clone());
    let w = m.w.clone();
    let _no_grad = ctx.no_grad().unwrap();
    let out = ctx
        .checkpoint(&[&m.x], 2, move |inputs| {
            let _keep = &flag;
            let h = inputs[0].linear(&w, None, Activation::Relu)?;
            Ok(vec![h.clone(), h.sum()?])
        })
        .unwrap();
    assert!(freed.get());
    assert_eq!(out[0].shape().unwrap(), vec![2, 3]);
    assert!(!out[1].requires_grad().unwrap());
}

#[test]
fn a_panicking_segment_becomes_an_error() {
    let ctx = Context::new().unwrap();
    let m = model(&ctx);
    let e = ctx
        .checkpoint(&[&m.x], 1, |_inputs| -> Result<Vec<Tensor>> { panic!("boom in the segment") })
        .unwrap_err();
    assert!(e.is_panic());
    assert_eq!(e.status(), Status::Internal);
    assert!(e.message().contains("boom in the segment"), "{e}");
    assert!(e.message().starts_with("ampx_checkpoint"), "{e}");
    let last = Error::last().expect("the call failed");
    assert_eq!(last.status(), Status::Internal);
    assert!(last.message().contains("boom in the segment"), "{last}");
    // The context is intact: scopes balanced, ops and backward work.
    let loss = m.x.linear(&m.w, None, Activation::None).unwrap().sum().unwrap();
    loss.backward(None).unwrap();
    ctx.scope().unwrap().close().unwrap();
}

#[test]
fn a_segment_panicking_only_in_backward_fails_backward() {
    let ctx = Context::new().unwrap();
    let m = model(&ctx);
    let calls = Rc::new(Cell::new(0));
    let calls_in = calls.clone();
    let w = m.w.clone();
    let out = ctx
        .checkpoint(&[&m.x], 1, move |inputs| {
            calls_in.set(calls_in.get() + 1);
            if calls_in.get() == 2 {
                panic!("not deterministic after all");
            }
            Ok(vec![inputs[0].linear(&w, None, Activation::None)?])
        })
        .unwrap();
    let e = out[0].sum().unwrap().backward(None).unwrap_err();
    assert!(e.is_panic(), "{e:?}");
    assert!(e.message().starts_with("ampx_backward"), "{e}");
    assert!(e.message().contains("not deterministic after all"), "{e}");
    assert_eq!(calls.get(), 2);
    // The tape was cleared; the context keeps working.
    let loss = m.x.linear(&m.w, None, Activation::None).unwrap().sum().unwrap();
    loss.backward(None).unwrap();
}

#[test]
fn segment_errors_keep_their_status_and_message() {
    let ctx = Context::new().unwrap();
    let m = model(&ctx);
    let (w, y) = (m.w.clone(), m.y.clone());
    // An error from an ampx op inside the segment.
    let e = ctx.checkpoint(&[&m.x], 1, move |inputs| Ok(vec![inputs[0].matmul(&w)?.add(&y)?])).unwrap_err();
    assert_eq!(e.status(), Status::Shape);
    assert!(e.message().contains("ampx_matmul"), "{e}");
    assert!(!e.is_panic());
    // An error the closure makes itself.
    let e = ctx
        .checkpoint(&[], 1, |_| Err(Error::new(Status::NotSupported, "not today")))
        .unwrap_err();
    assert_eq!(e.status(), Status::NotSupported);
    assert!(e.message().ends_with("not today"), "{e}");
    // The library heard the closure's own words too (ampx_set_error), so C
    // code reading ampx_last_error() sees them.
    let last = Error::last().expect("the call failed");
    assert_eq!(last.status(), Status::NotSupported);
    assert!(last.message().contains("not today"), "{last}");
    // The wrong number of outputs.
    let x = m.x.clone();
    let e = ctx.checkpoint(&[], 2, move |_| Ok(vec![x.clone()])).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
    assert!(e.message().contains("returned 1 tensors; 2 were asked for"), "{e}");
    // No output at all: refused by the library.
    let e = ctx.checkpoint(&[&m.x], 0, |_| Ok(vec![])).unwrap_err();
    assert_eq!(e.status(), Status::InvalidArgument);
}

#[test]
fn nested_checkpoints_and_a_segment_returning_its_input() {
    let ctx = Context::new().unwrap();
    let m = model(&ctx);
    let (w, b) = (m.w.clone(), m.b.clone());
    let outer_segment = move |inputs: &[Tensor]| -> Result<Vec<Tensor>> {
        let ctx = inputs[0].context()?; // a Context for the nested call, dropped at return
        let (w, b) = (w.clone(), b.clone());
        let h = ctx.checkpoint(&[&inputs[0]], 1, move |i| Ok(vec![i[0].linear(&w, Some(&b), Activation::Relu)?]))?;
        Ok(vec![h[0].clone(), inputs[0].clone()])
    };
    let out = ctx.checkpoint(&[&m.x], 2, outer_segment).unwrap();
    let loss = out[0].sum().unwrap().add(&out[1].sum().unwrap()).unwrap();
    loss.backward(None).unwrap();
    let (gw, _, gx) = grads(&m);
    assert!(gw.iter().any(|&g| g != 0.0));
    assert!(gx.iter().all(|g| g.is_finite()));
}
