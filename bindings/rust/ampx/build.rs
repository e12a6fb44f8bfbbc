//! Build script of the safe `ampx` crate.
//!
//! Adds the directory of `libampx` (handed over by ampx-sys as
//! `DEP_AMPX_LIB_DIR`, from `$AMPX_LIB_DIR`) to the run-time search path of
//! this package's tests and examples, so they run without
//! `LD_LIBRARY_PATH`. (Link arguments of a dependency's build script do not
//! reach the dependent's executables.)
//!
//! With the `mpi` feature (the data-parallel test under mpirun), it also
//! asks Open MPI's compiler wrapper how to link libmpi (`mpicc
//! --showme:link`, or the wrapper `$MPICC` names): the `-L` folders become
//! link search paths and rpaths, and the `-l` libraries the `#[link]`
//! attributes of `$OUT_DIR/mpi_link.rs`, which that test includes.
use std::env;
use std::fs;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=DEP_AMPX_LIB_DIR");
    if let Some(dir) = env::var_os("DEP_AMPX_LIB_DIR").filter(|d| !d.is_empty()) {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", std::path::Path::new(&dir).display());
    }
    if env::var_os("CARGO_FEATURE_MPI").is_some() {
        mpi_link();
    }
}

fn mpi_link() {
    println!("cargo:rerun-if-env-changed=MPICC");
    let mpicc = env::var("MPICC").ok().filter(|c| !c.is_empty()).unwrap_or_else(|| "mpicc".into());
    let output = Command::new(&mpicc)
        .arg("--showme:link")
        .output()
        .unwrap_or_else(|e| panic!("the `mpi` feature needs Open MPI's `{mpicc} --showme:link`: {e}"));
    if !output.status.success() {
        panic!(
            "`{mpicc} --showme:link` failed ({}): the `mpi` feature needs Open MPI's compiler wrapper",
            String::from_utf8_lossy(&output.stderr).trim()
        );
    }
    let flags = String::from_utf8(output.stdout).expect("mpicc prints text");
    let mut libraries = Vec::new();
    for flag in flags.split_whitespace() {
        if let Some(dir) = flag.strip_prefix("-L") {
            println!("cargo:rustc-link-search=native={dir}");
            println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
        } else if let Some(name) = flag.strip_prefix("-l") {
            libraries.push(name.to_string());
        } else if flag.starts_with("-Wl,") || flag == "-pthread" {
            println!("cargo:rustc-link-arg={flag}");
        }
    }
    if libraries.is_empty() {
        panic!("`{mpicc} --showme:link` names no library: {flags}");
    }
    let mut rust = String::from("// The libraries of `mpicc --showme:link` (written by build.rs).\n");
    for name in &libraries {
        rust += &format!("#[link(name = {name:?})]\nextern \"C\" {{}}\n");
    }
    let out = PathBuf::from(env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    fs::write(out.join("mpi_link.rs"), rust).expect("write mpi_link.rs");
}
