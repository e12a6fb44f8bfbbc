//! Build script of ampx-sys.
//!
//! 1. Links `libampx` from the directory named by the environment variable
//!    `AMPX_LIB_DIR` (the CMake build folder that holds `libampx.so`) and
//!    adds that directory to the run-time search path (rpath) of this
//!    package's tests. Dependent crates receive the directory as
//!    `DEP_AMPX_LIB_DIR` (this package declares `links = "ampx"`), so their
//!    build scripts can add the same rpath.
//! 2. Compiles and runs the generated C layout probe,
//!    `bindings/layout/ampx_layout_probe.c` (of the repository whose
//!    `include/` `AMPX_INCLUDE_DIR` names, else `../../layout` from this
//!    crate), against `ampx.h`. It prints the size, alignment and field
//!    offsets of every struct of the header as the C compiler lays them
//!    out; the lines land in `$OUT_DIR/c_layout.rs`, which the `layout` test
//!    compares with the generated declarations. When no C compiler or probe
//!    is available the table is empty, and the test says why.
use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

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
    let (table, why) = match c_layout(&out_dir) {
        Ok(lines) => (lines, String::new()),
        Err(why) => {
            println!("cargo:warning=ampx-sys: struct layout check disabled: {why}");
            (Vec::new(), why)
        }
    };
    let mut generated = String::from(
        "/// The layout probe's lines as (fact, bytes), measured by the C compiler\n\
         /// (empty when none ran).\n\
         pub const C_LAYOUT: &[(&str, usize)] = &[\n",
    );
    for (key, value) in &table {
        generated += &format!("    ({key:?}, {value}),\n");
    }
    generated += "];\n/// Why `C_LAYOUT` is empty (\"\" when it is not).\n";
    generated += &format!("pub const C_LAYOUT_MISSING: &str = {why:?};\n");
    fs::write(out_dir.join("c_layout.rs"), generated).expect("write c_layout.rs");
}

/// Compiles and runs the layout probe; returns its lines as (fact, bytes).
fn c_layout(out_dir: &Path) -> Result<Vec<(String, usize)>, String> {
    let manifest = PathBuf::from(env::var_os("CARGO_MANIFEST_DIR").expect("cargo sets it"));
    let from_env = env::var_os("AMPX_INCLUDE_DIR").filter(|d| !d.is_empty()).map(PathBuf::from);
    let include = from_env.clone().unwrap_or_else(|| manifest.join("../../../include"));
    let header = include.join("ampx/ampx.h");
    if !header.is_file() {
        return Err(format!("{} not found (set AMPX_INCLUDE_DIR)", header.display()));
    }
    // The probe of the header's own repository first, so the two agree.
    let mut candidates = Vec::new();
    if let Some(dir) = &from_env {
        candidates.push(dir.join("../bindings/layout/ampx_layout_probe.c"));
    }
    candidates.push(manifest.join("../../layout/ampx_layout_probe.c"));
    let probe = candidates
        .iter()
        .find(|p| p.is_file())
        .ok_or_else(|| format!("the layout probe is missing (looked for {candidates:?})"))?;
    println!("cargo:rerun-if-changed={}", header.display());
    println!("cargo:rerun-if-changed={}", probe.display());

    let exe = out_dir.join("ampx_layout_probe");
    let compiler = env::var("CC").ok().filter(|c| !c.is_empty()).unwrap_or_else(|| "cc".into());
    let status = Command::new(&compiler)
        .arg("-std=c11")
        .arg("-I")
        .arg(&include)
        .arg(probe)
        .arg("-o")
        .arg(&exe)
        .status()
        .map_err(|e| format!("cannot run the C compiler `{compiler}`: {e}"))?;
    if !status.success() {
        return Err(format!("`{compiler}` failed on {} ({status})", probe.display()));
    }
    let output = Command::new(&exe).output().map_err(|e| e.to_string())?;
    if !output.status.success() {
        return Err(format!("the layout probe failed ({})", output.status));
    }
    let text = String::from_utf8(output.stdout).map_err(|e| e.to_string())?;
    text.lines()
        .map(|line| {
            let (key, value) = line.rsplit_once(' ').ok_or_else(|| format!("probe line {line:?}"))?;
            let value = value.parse::<usize>().map_err(|_| format!("probe line {line:?}"))?;
            Ok((key.to_string(), value))
        })
        .collect()
}
