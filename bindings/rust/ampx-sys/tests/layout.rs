//! Checks the generated `#[repr(C)]` declarations against the C header:
//! every line of the C layout probe (sizes, alignments and offsets of every
//! struct, measured by the C compiler in build.rs) against the generated
//! `ampx_sys::layout::rust()` table, and against clang's table checked in
//! next to the probe; hand-made expectations for 64-bit targets; every
//! `AMPX_API` function of the header declared here with the same number of
//! parameters.
use ampx_sys as sys;
use std::mem::size_of;

mod c {
    include!(concat!(env!("OUT_DIR"), "/c_layout.rs"));
}

use sys::ampx_offset_of as offset_of;

/// The differences between a table of (fact, bytes) and the Rust layout:
/// a fact the other side lacks, or another value.
fn compare(other: &[(String, usize)], what: &str) -> Vec<String> {
    let rust = sys::layout::rust();
    let mut problems = Vec::new();
    for (key, value) in other {
        match rust.iter().find(|(k, _)| k == key) {
            Some((_, r)) if r == value => {}
            Some((_, r)) => problems.push(format!("{key}: {what} {value}, Rust {r}")),
            None => problems.push(format!("{key}: in {what}, not in ampx_sys::layout")),
        }
    }
    for (key, _) in &rust {
        if !other.iter().any(|(k, _)| k == key) {
            problems.push(format!("{key}: in ampx_sys::layout, not in {what}"));
        }
    }
    problems
}

#[test]
fn layouts_match_the_c_compiler() {
    if c::C_LAYOUT.is_empty() {
        eprintln!("layout: no C compiler ran at build time ({}); clang's table still applies", c::C_LAYOUT_MISSING);
        return;
    }
    let probe: Vec<(String, usize)> = c::C_LAYOUT.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    // Every struct: its sizeof and alignof lines, and one line per field.
    assert!(probe.iter().filter(|(k, _)| k.starts_with("sizeof ")).count() >= 24, "{probe:?}");
    let problems = compare(&probe, "the C compiler");
    assert!(problems.is_empty(), "layout mismatches:\n{}", problems.join("\n"));
}

/// bindings/layout/ampx_layout.txt: the same facts as clang computed them
/// for x86-64 Linux when the bindings were generated.
#[cfg(all(target_arch = "x86_64", target_os = "linux"))]
#[test]
fn layouts_match_clangs_table() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../../layout/ampx_layout.txt");
    let text = std::fs::read_to_string(path).expect("read bindings/layout/ampx_layout.txt");
    let table: Vec<(String, usize)> = text
        .lines()
        .filter(|line| !line.starts_with('#') && !line.trim().is_empty())
        .map(|line| {
            let (key, value) = line.rsplit_once(' ').expect("a `fact bytes` line");
            (key.to_string(), value.parse().expect("a byte count"))
        })
        .collect();
    let problems = compare(&table, "clang's table");
    assert!(problems.is_empty(), "layout mismatches:\n{}", problems.join("\n"));
}

/// Values computed by hand for LP64 targets (x86_64, aarch64): size_t and
/// pointers 8 bytes, int32 4, double 8 aligned to 8.
#[cfg(target_pointer_width = "64")]
#[test]
fn layouts_match_hand_computed_lp64_values() {
    assert_eq!(size_of::<sys::ampx_allocator>(), 32);
    assert_eq!(size_of::<sys::ampx_context_options>(), 72);
    assert_eq!(offset_of!(sys::ampx_context_options, seed), 24);
    assert_eq!(offset_of!(sys::ampx_context_options, allocator), 32);
    assert_eq!(offset_of!(sys::ampx_context_options, cuda_stream), 64);
    // ampx_segment's `fn` is `fn_` in Rust (a keyword).
    assert_eq!(size_of::<sys::ampx_segment>(), 32);
    assert_eq!(offset_of!(sys::ampx_segment, fn_), 8);
    assert_eq!(offset_of!(sys::ampx_segment, release), 24);
    assert_eq!(size_of::<sys::ampx_memory_stats>(), 40);
    assert_eq!(size_of::<sys::ampx_sgd_options>(), 48);
    assert_eq!(offset_of!(sys::ampx_sgd_options, maximize), 44);
    assert_eq!(size_of::<sys::ampx_adam_options>(), 64);
    assert_eq!(offset_of!(sys::ampx_adam_options, decoupled_weight_decay), 56);
    // 64 and 104 bytes before consecutive_hysteresis and clamp_to_max_scale
    // were appended: the old prefixes are unchanged.
    assert_eq!(size_of::<sys::ampx_scaler_options>(), 72);
    assert_eq!(offset_of!(sys::ampx_scaler_options, min_scale), 48);
    assert_eq!(offset_of!(sys::ampx_scaler_options, consecutive_hysteresis), 64);
    assert_eq!(offset_of!(sys::ampx_scaler_options, clamp_to_max_scale), 68);
    assert_eq!(size_of::<sys::ampx_scaler_counters>(), 40);
    assert_eq!(size_of::<sys::ampx_scaler_state>(), 112);
    assert_eq!(offset_of!(sys::ampx_scaler_state, counters), 64);
    assert_eq!(offset_of!(sys::ampx_scaler_state, consecutive_hysteresis), 104);
    assert_eq!(offset_of!(sys::ampx_scaler_state, clamp_to_max_scale), 108);
    assert_eq!(size_of::<sys::ampx_nonfinite_grad>(), 32);
    assert_eq!(size_of::<sys::ampx_autocast_options>(), 24);
    assert_eq!(size_of::<sys::ampx_data_parallel_options>(), 40);
    assert_eq!(offset_of!(sys::ampx_data_parallel_options, zero_stage), 36);
    assert_eq!(size_of::<sys::ampx_data_parallel_stats>(), 64);
    assert_eq!(offset_of!(sys::ampx_data_parallel_stats, bucket_bytes), 24);
    assert_eq!(offset_of!(sys::ampx_data_parallel_stats, shard_elements), 56);
    assert_eq!(size_of::<sys::ampx_doctor_options>(), 16);
    assert_eq!(size_of::<sys::ampx_doctor_overview>(), 56);
    assert_eq!(offset_of!(sys::ampx_doctor_overview, missed_steps), 48);
    assert_eq!(size_of::<sys::ampx_doctor_param_stats>(), 800);
    assert_eq!(offset_of!(sys::ampx_doctor_param_stats, histogram), 40);
    assert_eq!(offset_of!(sys::ampx_doctor_param_stats, amax), 712);
    assert_eq!(offset_of!(sys::ampx_doctor_param_stats, headroom), 776);
    assert_eq!(offset_of!(sys::ampx_doctor_param_stats, lost_without_master_fraction), 792);
    assert_eq!(size_of::<sys::ampx_doctor_sample>(), 56); // as the header says
    assert_eq!(size_of::<sys::ampx_doctor_finding>(), 56);
    assert_eq!(offset_of!(sys::ampx_doctor_finding, param_name), 24);
    assert_eq!(offset_of!(sys::ampx_doctor_finding, message), 48);
    assert_eq!(size_of::<sys::ampx_safetensors_entry>(), 120);
    assert_eq!(offset_of!(sys::ampx_safetensors_entry, shape), 40);
    assert_eq!(offset_of!(sys::ampx_safetensors_entry, nbytes), 112);
    assert_eq!(size_of::<sys::ampx_attention_options>(), 32);
    assert_eq!(size_of::<sys::ampx_cross_entropy_options>(), 32);
    assert_eq!(offset_of!(sys::ampx_cross_entropy_options, ignore_index), 16);
    assert_eq!(offset_of!(sys::ampx_attention_options, scale), 16);
    assert_eq!(offset_of!(sys::ampx_attention_options, dropout_p), 24);
    assert_eq!(size_of::<sys::ampx_conv2d_options>(), 64);
    assert_eq!(offset_of!(sys::ampx_conv2d_options, groups), 56);
    assert_eq!(size_of::<sys::ampx_pool2d_options>(), 72);
    assert_eq!(offset_of!(sys::ampx_pool2d_options, count_include_pad), 60);
    assert_eq!(offset_of!(sys::ampx_pool2d_options, divisor_override), 64);
    // Enums are C ints; function pointers in Option are one pointer.
    assert_eq!(size_of::<sys::ampx_status>(), 4);
    assert_eq!(size_of::<sys::ampx_segment_fn>(), 8);
    assert_eq!(size_of::<sys::ampx_deleter>(), 8);
}

/// The library's default option structs report the sizes declared here.
#[test]
fn default_options_report_their_struct_size() {
    unsafe {
        assert_eq!(sys::ampx_context_options_default().struct_size, size_of::<sys::ampx_context_options>());
        assert_eq!(sys::ampx_sgd_options_default().struct_size, size_of::<sys::ampx_sgd_options>());
        assert_eq!(sys::ampx_adam_options_default().struct_size, size_of::<sys::ampx_adam_options>());
        let adamw = sys::ampx_adamw_options_default();
        assert_eq!(adamw.struct_size, size_of::<sys::ampx_adam_options>());
        assert_eq!(adamw.decoupled_weight_decay, 1);
        assert_eq!(adamw.weight_decay, 1e-2);
        let scaler = sys::ampx_scaler_options_default();
        assert_eq!(scaler.struct_size, size_of::<sys::ampx_scaler_options>());
        assert_eq!((scaler.init_scale, scaler.growth_interval, scaler.hysteresis), (65536.0, 2000, 1));
        assert_eq!((scaler.consecutive_hysteresis, scaler.clamp_to_max_scale), (0, 0));
        let autocast = sys::ampx_autocast_options_default();
        assert_eq!(autocast.struct_size, size_of::<sys::ampx_autocast_options>());
        assert_eq!(autocast.dtype, sys::AMPX_F16);
        assert_eq!(sys::ampx_version(), sys::AMPX_VERSION_NUMBER as u32);
        let dp = sys::ampx_data_parallel_options_default();
        assert_eq!(dp.struct_size, size_of::<sys::ampx_data_parallel_options>());
        assert_eq!((dp.bucket_bytes, dp.first_bucket_bytes), (25 << 20, 1 << 20));
        assert_eq!((dp.average, dp.reduce_in_fp32, dp.overlap, dp.zero_stage), (1, 0, 1, 0));
        let doctor = sys::ampx_doctor_options_default();
        assert_eq!(doctor.struct_size, size_of::<sys::ampx_doctor_options>());
        assert_eq!((doctor.interval, doctor.history), (100, 4096));
        let attention = sys::ampx_attention_options_default();
        assert_eq!(attention.struct_size, size_of::<sys::ampx_attention_options>());
        assert_eq!((attention.causal, attention.scale, attention.dropout_p), (0, 0.0, 0.0));
        let conv = sys::ampx_conv2d_options_default();
        assert_eq!(conv.struct_size, size_of::<sys::ampx_conv2d_options>());
        assert_eq!((conv.stride, conv.padding, conv.dilation, conv.groups), ([1, 1], [0, 0], [1, 1], 1));
        let pool = sys::ampx_pool2d_options_default();
        assert_eq!(pool.struct_size, size_of::<sys::ampx_pool2d_options>());
        assert_eq!((pool.stride, pool.padding, pool.dilation), ([0, 0], [0, 0], [1, 1]));
        assert_eq!((pool.ceil_mode, pool.count_include_pad, pool.divisor_override), (0, 1, 0));
    }
}

/// The generated `*_INIT` constants (the header's macros as clang evaluated
/// them) equal what the library's `_default()` functions return.
#[test]
fn init_constants_equal_the_library_defaults() {
    macro_rules! same {
        ($($init:ident == $default:ident;)*) => {$(
            // SAFETY: thread-safe, no arguments.
            let library = unsafe { sys::$default() };
            assert_eq!(format!("{:?}", sys::$init), format!("{:?}", library), stringify!($init));
        )*};
    }
    same! {
        AMPX_CONTEXT_OPTIONS_INIT == ampx_context_options_default;
        AMPX_SGD_OPTIONS_INIT == ampx_sgd_options_default;
        AMPX_ADAM_OPTIONS_INIT == ampx_adam_options_default;
        AMPX_ADAMW_OPTIONS_INIT == ampx_adamw_options_default;
        AMPX_SCALER_OPTIONS_INIT == ampx_scaler_options_default;
        AMPX_AUTOCAST_OPTIONS_INIT == ampx_autocast_options_default;
        AMPX_CROSS_ENTROPY_OPTIONS_INIT == ampx_cross_entropy_options_default;
        AMPX_ATTENTION_OPTIONS_INIT == ampx_attention_options_default;
        AMPX_CONV2D_OPTIONS_INIT == ampx_conv2d_options_default;
        AMPX_POOL2D_OPTIONS_INIT == ampx_pool2d_options_default;
        AMPX_DATA_PARALLEL_OPTIONS_INIT == ampx_data_parallel_options_default;
        AMPX_DOCTOR_OPTIONS_INIT == ampx_doctor_options_default;
        AMPX_LR_SCHEDULE_INIT == ampx_lr_schedule_default;
    }
    // The function-like macro, at both ends of its range.
    assert_eq!(sys::AMPX_DOCTOR_BIN_BINADE(-64), 2);
    assert_eq!(sys::AMPX_DOCTOR_BIN_BINADE(15), sys::AMPX_DOCTOR_BIN_HUGE - 1);
}

/// Every `AMPX_API` function of the header, with its parameter count.
fn header_functions(header: &str) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    let mut rest = header;
    while let Some(at) = rest.find("AMPX_API ") {
        rest = &rest[at + "AMPX_API ".len()..];
        let open = match rest.find('(') {
            Some(open) => open,
            None => break,
        };
        let head = &rest[..open];
        if head.contains("__") {
            continue; // the export macro's own definition
        }
        // A long declaration puts the name on the line after the return type.
        let name = head.rsplit([' ', '*', '\n']).next().unwrap().to_string();
        let close = rest.find(')').unwrap();
        let params = rest[open + 1..close].trim();
        let count = if params == "void" { 0 } else { params.split(',').count() };
        out.push((name, count));
    }
    out
}

/// Parameter counts of the `pub fn` declarations of this crate's lib.rs.
fn rust_functions(source: &str) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    let mut rest = source;
    while let Some(at) = rest.find("pub fn ampx_") {
        rest = &rest[at + "pub fn ".len()..];
        let open = rest.find('(').unwrap();
        let name = rest[..open].to_string();
        let close = rest.find(')').unwrap();
        let params = rest[open + 1..close].trim().trim_end_matches(',');
        let count = if params.is_empty() { 0 } else { params.split(',').count() };
        out.push((name, count));
    }
    out
}

#[test]
fn every_header_function_is_declared_with_its_arity() {
    let include = std::env::var("AMPX_INCLUDE_DIR")
        .ok()
        .filter(|d| !d.is_empty())
        .unwrap_or_else(|| concat!(env!("CARGO_MANIFEST_DIR"), "/../../../include").to_string());
    let header = std::fs::read_to_string(format!("{include}/ampx/ampx.h")).expect("read ampx.h");
    let c = header_functions(&header);
    assert!(c.len() > 100, "parsed only {} functions from ampx.h", c.len());
    let rust = rust_functions(include_str!("../src/lib.rs"));
    let mut problems = Vec::new();
    for (name, count) in &c {
        match rust.iter().find(|(n, _)| n == name) {
            None => problems.push(format!("{name} is not declared")),
            Some((_, n)) if n != count => problems.push(format!("{name}: {count} parameters in C, {n} in Rust")),
            _ => {}
        }
    }
    for (name, _) in &rust {
        if !c.iter().any(|(n, _)| n == name) {
            problems.push(format!("{name} is declared but not in ampx.h"));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
