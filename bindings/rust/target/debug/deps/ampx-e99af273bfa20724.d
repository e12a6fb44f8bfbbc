/work/main/bindings/rust/target/debug/deps/ampx-e99af273bfa20724.d: ampx/src/lib.rs ampx/src/autocast.rs ampx/src/checkpoint.rs ampx/src/checkpoint_file.rs ampx/src/context.rs ampx/src/dtype.rs ampx/src/error.rs ampx/src/hooks.rs ampx/src/ops.rs ampx/src/optim.rs ampx/src/scaler.rs ampx/src/tensor.rs

/work/main/bindings/rust/target/debug/deps/libampx-e99af273bfa20724.rlib: ampx/src/lib.rs ampx/src/autocast.rs ampx/src/checkpoint.rs ampx/src/checkpoint_file.rs ampx/src/context.rs ampx/src/dtype.rs ampx/src/error.rs ampx/src/hooks.rs ampx/src/ops.rs ampx/src/optim.rs ampx/src/scaler.rs ampx/src/tensor.rs

/work/main/bindings/rust/target/debug/deps/libampx-e99af273bfa20724.rmeta: ampx/src/lib.rs ampx/src/autocast.rs ampx/src/checkpoint.rs ampx/src/checkpoint_file.rs ampx/src/context.rs ampx/src/dtype.rs ampx/src/error.rs ampx/src/hooks.rs ampx/src/ops.rs ampx/src/optim.rs ampx/src/scaler.rs ampx/src/tensor.rs

ampx/src/lib.rs:
ampx/src/autocast.rs:
ampx/src/checkpoint.rs:
ampx/src/checkpoint_file.rs:
ampx/src/context.rs:
ampx/src/dtype.rs:
ampx/src/error.rs:
ampx/src/hooks.rs:
ampx/src/ops.rs:
ampx/src/optim.rs:
ampx/src/scaler.rs:
ampx/src/tensor.rs:
