/work/main/bindings/rust/target/debug/deps/ampx_sys-e7b3985c56cc88a7.d: ampx-sys/src/lib.rs /work/main/bindings/rust/target/debug/build/ampx-sys-2dbe8401d56f3786/out/c_layout.rs

/work/main/bindings/rust/target/debug/deps/libampx_sys-e7b3985c56cc88a7.rlib: ampx-sys/src/lib.rs /work/main/bindings/rust/target/debug/build/ampx-sys-2dbe8401d56f3786/out/c_layout.rs

/work/main/bindings/rust/target/debug/deps/libampx_sys-e7b3985c56cc88a7.rmeta: ampx-sys/src/lib.rs /work/main/bindings/rust/target/debug/build/ampx-sys-2dbe8401d56f3786/out/c_layout.rs

ampx-sys/src/lib.rs:
/work/main/bindings/rust/target/debug/build/ampx-sys-2dbe8401d56f3786/out/c_layout.rs:

# env-dep:OUT_DIR=/work/main/bindings/rust/target/debug/build/ampx-sys-2dbe8401d56f3786/out
