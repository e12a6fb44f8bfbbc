//! Build script of the safe `ampx` crate: adds the directory of `libampx`
//! (handed over by ampx-sys as `DEP_AMPX_LIB_DIR`, from `$AMPX_LIB_DIR`) to
//! the run-time search path of this package's tests and examples, so they
//! run without `LD_LIBRARY_PATH`. (Link arguments of a dependency's build
//! script do not reach the dependent's executables.)
fn main() {
    println!("cargo:rerun-if-env-changed=DEP_AMPX_LIB_DIR");
    if let Some(dir) = std::env::var_os("DEP_AMPX_LIB_DIR").filter(|d| !d.is_empty()) {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{}", std::path::Path::new(&dir).display());
    }
}
