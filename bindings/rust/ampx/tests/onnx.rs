//! ONNX export (`ampx::export_onnx`): a linear layer exported, then loaded
//! and run by ONNX Runtime (Python's onnxruntime, when python3 has it) with
//! the output equal to ampx's; bad input refused with no file left.
use std::path::PathBuf;
use std::process::Command;

use ampx::{export_onnx, Activation, Context, OnnxOptions, Status, Tensor};

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("ampx-rust-onnx-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn linear_runs_in_onnx_runtime() {
    let dir = temp_dir("linear");
    let path = dir.join("linear.onnx");
    let ctx = Context::new().unwrap();
    let w = Tensor::from_slice(&ctx, &[2, 3], &[0.5f32, -1.0, 0.25, 2.0, 0.0, -0.5]).unwrap();
    w.set_requires_grad(true).unwrap();
    let b = Tensor::from_slice(&ctx, &[2], &[0.1f32, -0.2]).unwrap();
    b.set_requires_grad(true).unwrap();
    let x = Tensor::from_slice(&ctx, &[1, 3], &[1.0f32, 2.0, 3.0]).unwrap();
    x.set_requires_grad(true).unwrap();
    let y = x.linear(&w, Some(&b), Activation::Relu).unwrap();
    let options = OnnxOptions { batch_dim: Some("batch".into()), ..Default::default() };
    export_onnx(&path, &[("x", &x)], &[("y", &y)], &[], &options).unwrap();
    let want = y.to_vec::<f32>().unwrap();

    let script = "import sys, numpy as np, onnx, onnxruntime as ort\n\
                  onnx.checker.check_model(onnx.load(sys.argv[1]), full_check=True)\n\
                  s = ort.InferenceSession(sys.argv[1], providers=['CPUExecutionProvider'])\n\
                  print(' '.join(repr(float(v)) for v in s.run(None, {'x': np.array([[1, 2, 3]], np.float32)})[0].ravel()))";
    match Command::new("python3").args(["-c", script, path.to_str().unwrap()]).output() {
        Ok(out) if out.status.success() => {
            let got: Vec<f32> = String::from_utf8_lossy(&out.stdout).split_whitespace()
                .map(|v| v.parse::<f64>().unwrap() as f32).collect();
            assert_eq!(got.len(), want.len());
            for (g, w) in got.iter().zip(&want) {
                assert!((g - w).abs() <= 1e-5 * w.abs().max(1.0), "{g} vs {w}");
            }
        }
        other => eprintln!("onnxruntime check SKIPPED (python3 with onnx and onnxruntime: {other:?})"),
    }

    // An output made by no recorded op reads no input: refused, no file.
    let bad = dir.join("bad.onnx");
    let lone = Tensor::from_slice(&ctx, &[1], &[1.0f32]).unwrap();
    let err = export_onnx(&bad, &[("x", &x)], &[("lone", &lone)], &[], &OnnxOptions::default()).unwrap_err();
    assert_eq!(err.status(), Status::InvalidArgument);
    assert!(!bad.exists());
    let _ = std::fs::remove_dir_all(&dir);
}
