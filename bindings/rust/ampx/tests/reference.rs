//! Test (1): the reference run of bindings/README.md, compared line by line
//! (bit for bit) with the output of the C program `TINY_TRAIN`
//! (bindings/reference/tiny_train.c), whose path run_tests.sh passes in
//! the environment variable AMPX_TINY_TRAIN.
mod common;

use std::process::Command;

#[test]
fn g17_formats_like_c() {
    assert_eq!(common::fmt_g17(1024.0), "1024");
    assert_eq!(common::fmt_g17(65536.0), "65536");
    assert_eq!(common::fmt_g17(0.5), "0.5");
    assert_eq!(common::fmt_g17(0.1), "0.10000000000000001");
    assert_eq!(common::fmt_g17(1e20), "1e+20");
    assert_eq!(common::fmt_g17(1.5e-7), "1.4999999999999999e-07");
}

#[test]
fn reference_run_matches_tiny_train_bit_for_bit() {
    let rust = common::reference_run().expect("the reference run");
    assert_eq!(rust.len(), 13);
    for line in &rust {
        println!("{line}");
    }
    match std::env::var_os("AMPX_TINY_TRAIN").filter(|p| !p.is_empty()) {
        Some(program) => {
            let output = Command::new(&program).output().expect("run TINY_TRAIN");
            assert!(output.status.success(), "TINY_TRAIN failed: {}", String::from_utf8_lossy(&output.stderr));
            let c = String::from_utf8(output.stdout).expect("UTF-8 output");
            let c: Vec<&str> = c.lines().collect();
            assert_eq!(c.len(), rust.len(), "line counts differ:\nC:\n{}\nRust:\n{}", c.join("\n"), rust.join("\n"));
            for (i, (c_line, rust_line)) in c.iter().zip(&rust).enumerate() {
                assert_eq!(*c_line, rust_line.as_str(), "line {} differs", i + 1);
            }
        }
        None => {
            // Without the C program, check the lines bindings/README.md quotes.
            eprintln!("AMPX_TINY_TRAIN is not set: comparing with the lines quoted in bindings/README.md only");
            assert_eq!(rust[0], "step 0 loss 3f0f65f0 scale 1024");
            assert_eq!(rust[1], "step 1 loss 3f0a6343 scale 1024");
            assert_eq!(rust[2], "step 2 loss 3f05b5a7 scale 2048");
            assert_eq!(rust[5], "step 5 loss 3ef3b3b0 scale 1024");
            assert_eq!(rust[6], "step 6 loss 3ef3b3b0 scale 1024");
            assert_eq!(rust[11], "step 11 loss 3ed272d2 scale 4096");
        }
    }
}
