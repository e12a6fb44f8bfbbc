//! Checks the `#[repr(C)]` declarations against the C header: sizes,
//! alignments and offsets measured by a C compiler (see build.rs), hand-made
//! expectations for 64-bit targets, and every `AMPX_API` function of the
//! header declared here with the same number of parameters.
use ampx_sys as sys;
use std::mem::{align_of, size_of, MaybeUninit};

/// `offset_of!` for toolchains older than Rust 1.77.
macro_rules! offset_of {
    ($ty:ty, $field:ident) => {{
        let value = MaybeUninit::<$ty>::uninit();
        let base = value.as_ptr();
        // SAFETY: only the address of the field is taken, nothing is read.
        let field = unsafe { std::ptr::addr_of!((*base).$field) };
        field as usize - base as usize
    }};
}

/// (key, value) pairs as the Rust compiler lays the structs out, with the
/// same keys as the table build.rs makes with a C compiler.
fn rust_layout() -> Vec<(String, usize)> {
    let mut v = Vec::new();
    macro_rules! layout {
        ($($ty:ident { $($field:ident),* })*) => {$(
            v.push((format!("sizeof {}", stringify!($ty)), size_of::<sys::$ty>()));
            v.push((format!("alignof {}", stringify!($ty)), align_of::<sys::$ty>()));
            $(v.push((
                format!("offsetof {}.{}", stringify!($ty), stringify!($field)),
                offset_of!(sys::$ty, $field),
            ));)*
        )*};
    }
    layout! {
        ampx_allocator { struct_size, alloc, free, user_data }
        ampx_context_options { struct_size, device_type, device_index, num_threads, seed, allocator, cuda_stream }
        ampx_memory_stats { struct_size, current_bytes, peak_bytes, allocation_count, reserved_bytes }
        ampx_sgd_options { struct_size, lr, momentum, dampening, weight_decay, nesterov, maximize }
        ampx_adam_options { struct_size, lr, beta1, beta2, eps, weight_decay, amsgrad, maximize, decoupled_weight_decay }
        ampx_scaler_options { struct_size, init_scale, growth_factor, backoff_factor, growth_interval, enabled, hysteresis, min_scale, max_scale, consecutive_hysteresis, clamp_to_max_scale }
        ampx_scaler_counters { struct_size, updates, skipped, backoffs, growths }
        ampx_scaler_state { struct_size, scale, growth_factor, backoff_factor, growth_interval, growth_tracker, hysteresis, hysteresis_left, min_scale, max_scale, counters, consecutive_hysteresis, clamp_to_max_scale }
        ampx_nonfinite_grad { param, name, nan_count, inf_count }
        ampx_autocast_options { struct_size, dtype, enabled, cache }
        ampx_data_parallel_options { struct_size, bucket_bytes, first_bucket_bytes, average, reduce_in_fp32, overlap, zero_stage }
        ampx_data_parallel_stats { struct_size, rank, world_size, bucket_count, bucket_bytes, buckets_launched, last_launched_early, reductions, optimizer_state_bytes, shard_elements }
        ampx_doctor_options { struct_size, interval, history }
        ampx_doctor_overview { struct_size, steps, sample_step, sample_scale, param_count, history_count, finding_count, missed_steps }
        ampx_doctor_param_stats { struct_size, index, name, param_dtype, grad_dtype, elements, histogram, amax, amax_scaled, grad_norm, fp16_zero_unscaled, fp16_subnormal_unscaled, fp16_zero_scaled, fp16_subnormal_scaled, fp16_overflow_scaled, headroom, headroom_unbounded, lost_update_fraction, lost_without_master_fraction }
        ampx_doctor_sample { step, scale, found_inf, sampled, grad_norm, first_overflow_param, overflow_params, fp16_lost_scaled, fp16_lost_unscaled }
        ampx_doctor_finding { struct_size, code, cause, param, param_name, first_step, last_step, message }
        ampx_safetensors_entry { struct_size, name, dtype, dtype_name, ndim, shape, offset, nbytes }
        ampx_lr_schedule { struct_size, warmup_steps, warmup_start_factor, decay, total_steps, end_factor, min_lr, step_size, gamma }
        ampx_attention_options { struct_size, causal, scale, dropout_p }
        ampx_conv2d_options { struct_size, stride, padding, dilation, groups }
        ampx_pool2d_options { struct_size, stride, padding, dilation, ceil_mode, count_include_pad, divisor_override }
        ampx_cross_entropy_options { struct_size, reduction, ignore_index, label_smoothing }
    }
    v
}

#[test]
fn layouts_match_the_c_compiler() {
    let c = sys::c_layout::C_LAYOUT;
    if c.is_empty() {
        eprintln!("layout: no C compiler ran at build time; only the hand-made checks apply");
        return;
    }
    let rust = rust_layout();
    assert_eq!(rust.len(), c.len(), "the build script and this test list different fields");
    let mut mismatches = Vec::new();
    for (key, value) in &rust {
        match c.iter().find(|(k, _)| k == key) {
            Some((_, c_value)) if c_value == value => {}
            Some((_, c_value)) => mismatches.push(format!("{key}: C {c_value}, Rust {value}")),
            None => mismatches.push(format!("{key}: not measured in C")),
        }
    }
    assert!(mismatches.is_empty(), "layout mismatches:\n{}", mismatches.join("\n"));
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
    // ampx_segment's `fn` is `fn_` in Rust, so it is checked here by hand.
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
        assert_eq!(sys::ampx_version(), sys::AMPX_VERSION_NUMBER);
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
