/work/main/bindings/rust/target/debug/deps/ampx_sys-3e94c7062e993a8b.d: ampx-sys/src/lib.rs /work/main/bindings/rust/target/debug/build/ampx-sys-2dbe8401d56f3786/out/c_layout.rs

/work/main/bindings/rust/target/debug/deps/ampx_sys-3e94c7062e993a8b: ampx-sys/src/lib.rs /work/main/bindings/rust/target/debug/build/ampx-sys-2dbe8401d56f3786/out/c_layout.rs

ampx-sys/src/lib.rs:
/work/main/bindings/rust/target/debug/build/ampx-sys-2dbe8401d56f3786/out/c_layout.rs:

# env-dep:OUT_DIR=/work/main/bindings/rust/target/debug/build/ampx-sys-2dbe8401d56f3786/out
