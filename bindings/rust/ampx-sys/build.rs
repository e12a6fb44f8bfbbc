//! Build script of ampx-sys.
//!
//! 1. Links `libampx` from the directory named by the environment variable
//!    `AMPX_LIB_DIR` (the CMake build folder that holds `libampx.so`) and
//!    adds that directory to the run-time search path (rpath) of this
//!    package's tests. Dependent crates receive the directory as
//!    `DEP_AMPX_LIB_DIR` (this package declares `links = "ampx"`), so their
//!    build scripts can add the same rpath.
//! 2. Compiles and runs a tiny C program against `ampx.h` (found through
//!    `AMPX_INCLUDE_DIR`, by default the repository's `include/`) that prints
//!    the sizes, alignments and field offsets of the header's structs. The
//!    `layout` test compares them with the `#[repr(C)]` declarations. When no
//!    C compiler is available the table is empty and the test says so.
use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Every struct of ampx.h with its fields, for the layout check.
const STRUCTS: &[(&str, &[&str])] = &[
    ("ampx_allocator", &["struct_size", "alloc", "free", "user_data"]),
    (
        "ampx_context_options",
        &["struct_size", "device_type", "device_index", "num_threads", "seed", "allocator", "cuda_stream"],
    ),
    (
        "ampx_memory_stats",
        &["struct_size", "current_bytes", "peak_bytes", "allocation_count", "reserved_bytes"],
    ),
    (
        "ampx_sgd_options",
        &["struct_size", "lr", "momentum", "dampening", "weight_decay", "nesterov", "maximize"],
    ),
    (
        "ampx_adam_options",
        &[
            "struct_size", "lr", "beta1", "beta2", "eps", "weight_decay", "amsgrad", "maximize",
            "decoupled_weight_decay",
        ],
    ),
    (
        "ampx_scaler_options",
        &[
            "struct_size", "init_scale", "growth_factor", "backoff_factor", "growth_interval",
            "enabled", "hysteresis", "min_scale", "max_scale", "consecutive_hysteresis",
            "clamp_to_max_scale",
        ],
    ),
    ("ampx_scaler_counters", &["struct_size", "updates", "skipped", "backoffs", "growths"]),
    (
        "ampx_scaler_state",
        &[
            "struct_size", "scale", "growth_factor", "backoff_factor", "growth_interval",
            "growth_tracker", "hysteresis", "hysteresis_left", "min_scale", "max_scale", "counters",
            "consecutive_hysteresis", "clamp_to_max_scale",
        ],
    ),
    ("ampx_nonfinite_grad", &["param", "name", "nan_count", "inf_count"]),
    ("ampx_autocast_options", &["struct_size", "dtype", "enabled", "cache"]),
    (
        "ampx_data_parallel_options",
        &["struct_size", "bucket_bytes", "first_bucket_bytes", "average", "reduce_in_fp32", "overlap", "zero_stage"],
    ),
    (
        "ampx_data_parallel_stats",
        &[
            "struct_size", "rank", "world_size", "bucket_count", "bucket_bytes", "buckets_launched",
            "last_launched_early", "reductions", "optimizer_state_bytes", "shard_elements",
        ],
    ),
    ("ampx_doctor_options", &["struct_size", "interval", "history"]),
    (
        "ampx_doctor_overview",
        &[
            "struct_size", "steps", "sample_step", "sample_scale", "param_count", "history_count",
            "finding_count", "missed_steps",
        ],
    ),
    (
        "ampx_doctor_param_stats",
        &[
            "struct_size", "index", "name", "param_dtype", "grad_dtype", "elements", "histogram",
            "amax", "amax_scaled", "grad_norm", "fp16_zero_unscaled", "fp16_subnormal_unscaled",
            "fp16_zero_scaled", "fp16_subnormal_scaled", "fp16_overflow_scaled", "headroom",
            "headroom_unbounded", "lost_update_fraction", "lost_without_master_fraction",
        ],
    ),
    (
        "ampx_doctor_sample",
        &[
            "step", "scale", "found_inf", "sampled", "grad_norm", "first_overflow_param",
            "overflow_params", "fp16_lost_scaled", "fp16_lost_unscaled",
        ],
    ),
    (
        "ampx_doctor_finding",
        &["struct_size", "code", "cause", "param", "param_name", "first_step", "last_step", "message"],
    ),
    (
        "ampx_safetensors_entry",
        &["struct_size", "name", "dtype", "dtype_name", "ndim", "shape", "offset", "nbytes"],
    ),
    (
        "ampx_lr_schedule",
        &[
            "struct_size", "warmup_steps", "warmup_start_factor", "decay", "total_steps", "end_factor",
            "min_lr", "step_size", "gamma",
        ],
    ),
    ("ampx_attention_options", &["struct_size", "causal", "scale", "dropout_p"]),
    ("ampx_conv2d_options", &["struct_size", "stride", "padding", "dilation", "groups"]),
    (
        "ampx_pool2d_options",
        &["struct_size", "stride", "padding", "dilation", "ceil_mode", "count_include_pad", "divisor_override"],
    ),
    ("ampx_cross_entropy_options", &["struct_size", "reduction", "ignore_index", "label_smoothing"]),
];

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=AMPX_LIB_DIR");
    println!("cargo:rerun-if-env-changed=AMPX_INCLUDE_DIR");
    println!("cargo:rerun-if-env-changed=CC");

    match env::var_os("AMPX_LIB_DIR").filter(|d| !d.is_empty()) {
        Some(dir) => {
            let dir = PathBuf::from(dir);
            let dir = dir.canonicalize().unwrap_or(dir);
            println!("cargo:rustc-link-search=native={}", dir.display());
            // rpath for this package's own test and example executables.
            println!("cargo:rustc-link-arg=-Wl,-rpath,{}", dir.display());
            // Handed to dependents' build scripts as DEP_AMPX_LIB_DIR.
            println!("cargo:lib_dir={}", dir.display());
        }
        None => println!(
            "cargo:warning=AMPX_LIB_DIR is not set: linking libampx from the system's search path"
        ),
    }
    println!("cargo:rustc-link-lib=dylib=ampx");

    let out_dir = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let table = c_layout(&out_dir).unwrap_or_else(|why| {
        println!("cargo:warning=ampx-sys: struct layout check disabled: {why}");
        String::new()
    });
    let generated = format!(
        "/// Sizes, alignments and offsets measured by a C compiler (empty when none ran).\n\
         pub const C_LAYOUT: &[(&str, usize)] = &[\n{table}];\n"
    );
    fs::write(out_dir.join("c_layout.rs"), generated).expect("write c_layout.rs");
}

/// Compiles and runs the layout probe; returns the body of the Rust table.
fn c_layout(out_dir: &Path) -> Result<String, String> {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let include = env::var_os("AMPX_INCLUDE_DIR")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .unwrap_or_else(|| manifest.join("../../../include"));
    let header = include.join("ampx/ampx.h");
    if !header.is_file() {
        return Err(format!("{} not found (set AMPX_INCLUDE_DIR)", header.display()));
    }
    println!("cargo:rerun-if-changed={}", header.display());

    let mut c = String::from("#include <stdio.h>\n#include <stddef.h>\n#include \"ampx/ampx.h\"\nint main(void) {\n");
    for (name, fields) in STRUCTS {
        c += &format!("  printf(\"    (\\\"sizeof {name}\\\", %zu),\\n\", sizeof({name}));\n");
        c += &format!("  printf(\"    (\\\"alignof {name}\\\", %zu),\\n\", (size_t)_Alignof({name}));\n");
        for field in *fields {
            c += &format!(
                "  printf(\"    (\\\"offsetof {name}.{field}\\\", %zu),\\n\", offsetof({name}, {field}));\n"
            );
        }
    }
    c += "  return 0;\n}\n";
    let source = out_dir.join("layout_probe.c");
    let exe = out_dir.join("layout_probe");
    fs::write(&source, c).map_err(|e| e.to_string())?;

    let compiler = env::var("CC").ok().filter(|c| !c.is_empty()).unwrap_or_else(|| "cc".into());
    let status = Command::new(&compiler)
        .arg("-std=c11")
        // The probe measures structs of the experimental tier too.
        .arg("-DAMPX_EXPERIMENTAL")
        .arg("-I")
        .arg(&include)
        .arg(&source)
        .arg("-o")
        .arg(&exe)
        .status()
        .map_err(|e| format!("cannot run the C compiler `{compiler}`: {e}"))?;
    if !status.success() {
        return Err(format!("`{compiler}` failed on the layout probe ({status})"));
    }
    let output = Command::new(&exe).output().map_err(|e| e.to_string())?;
    if !output.status.success() {
        return Err("the layout probe failed".into());
    }
    String::from_utf8(output.stdout).map_err(|e| e.to_string())
}
