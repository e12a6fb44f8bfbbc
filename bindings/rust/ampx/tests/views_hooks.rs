//! Tensor views (`Tensor::view`) and grad-ready hooks
//! (`Context::set_grad_ready_hook`, `Tensor::grad_ready`).
use std::cell::RefCell;
use std::rc::Rc;

use ampx::{Activation, Context, DType, Error, Status, Tensor};

#[test]
fn views_share_memory_and_outlive_their_base() {
    let ctx = Context::new().unwrap();
    let values: Vec<f32> = (0..12).map(|v| v as f32).collect();
    let base = Tensor::from_slice(&ctx, &[12], &values).unwrap();
    let view = base.view(4 * 5, DType::F32, &[2, 3]).unwrap();
    assert_eq!(view.shape().unwrap(), vec![2, 3]);
    assert_eq!(view.data_ptr().unwrap() as usize, base.data_ptr().unwrap() as usize + 20);
    assert_eq!(view.to_vec::<f32>().unwrap(), vec![5.0, 6.0, 7.0, 8.0, 9.0, 10.0]);
    view.fill(-1.0).unwrap();
    assert_eq!(base.to_vec::<f32>().unwrap()[4..12], [4.0, -1.0, -1.0, -1.0, -1.0, -1.0, -1.0, 11.0]);
    drop(base);
    assert_eq!(view.to_vec::<f32>().unwrap(), vec![-1.0; 6]);
    let err = view.view(4, DType::F32, &[6]).unwrap_err();
    assert_eq!(err.status(), Status::Shape);
    let err = view.view(2, DType::F32, &[1]).unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
}

#[test]
fn the_hook_reports_each_parameter_once_in_backward_order() {
    let ctx = Context::new().unwrap();
    let layers: Vec<(Tensor, Tensor)> = (0..3)
        .map(|i| {
            let w = Tensor::from_slice(&ctx, &[4, 4], &vec![0.1 * (i + 1) as f32; 16]).unwrap();
            let b = Tensor::from_slice(&ctx, &[4], &[0.5f32, -0.5, 0.25, 1.0]).unwrap();
            w.set_requires_grad(true).unwrap();
            b.set_requires_grad(true).unwrap();
            (w, b)
        })
        .collect();
    let x = Tensor::from_slice(&ctx, &[2, 4], &[1.0f32, 2.0, 3.0, 4.0, -1.0, 0.5, 2.0, 1.0]).unwrap();
    let seen: Rc<RefCell<Vec<(usize, Vec<u8>)>>> = Rc::new(RefCell::new(Vec::new()));
    let log = Rc::clone(&seen);
    ctx.set_grad_ready_hook(move |p: &Tensor| {
        let grad = p.grad()?.expect("a reported parameter has a gradient");
        log.borrow_mut().push((p.as_raw() as usize, grad.to_bytes()?));
        Ok(())
    })
    .unwrap();
    {
        let _scope = ctx.scope().unwrap();
        let mut h = x.clone();
        for (w, b) in &layers {
            h = h.linear(w, Some(b), Activation::Relu).unwrap();
        }
        h.mean().unwrap().backward(None).unwrap();
    }
    let expected: Vec<usize> =
        layers.iter().rev().flat_map(|(w, b)| [w.as_raw() as usize, b.as_raw() as usize]).collect();
    let seen_order: Vec<usize> = seen.borrow().iter().map(|(p, _)| *p).collect();
    assert_eq!(seen_order, expected);
    for ((w, b), chunk) in layers.iter().rev().zip(seen.borrow().chunks(2)) {
        assert_eq!(w.grad().unwrap().unwrap().to_bytes().unwrap(), chunk[0].1);
        assert_eq!(b.grad().unwrap().unwrap().to_bytes().unwrap(), chunk[1].1);
    }

    // A failing hook fails backward with its error; grad_ready reports it too.
    ctx.set_grad_ready_hook(|_p: &Tensor| Err(Error::new(Status::Io, "the network is down"))).unwrap();
    let err = {
        let _scope = ctx.scope().unwrap();
        let mut h = x.clone();
        for (w, b) in &layers {
            h = h.linear(w, Some(b), Activation::Relu).unwrap();
        }
        h.mean().unwrap().backward(None).unwrap_err()
    };
    assert_eq!(err.status(), Status::Io);
    assert!(err.message().contains("grad-ready hook") && err.message().contains("the network is down"), "{err}");
    let last = Error::last().expect("backward failed");
    assert_eq!(last.status(), Status::Io);
    assert!(last.message().contains("the network is down"), "the library's own error: {last}");
    let err = layers[0].0.grad_ready().unwrap_err();
    assert_eq!(err.status(), Status::Io);
    ctx.clear_grad_ready_hook().unwrap();
    layers[0].0.grad_ready().unwrap();
}
