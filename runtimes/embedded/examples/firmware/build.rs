//! Links with `firmware.x` (a minimal Cortex-M memory map).

fn main() {
    let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| String::from("."));
    println!("cargo:rustc-link-search={dir}");
    println!("cargo:rustc-link-arg-bins=-Tfirmware.x");
    // Identical code folding: one copy of functions whose code is equal.
    println!("cargo:rustc-link-arg-bins=--icf=all");
    println!("cargo:rerun-if-changed=firmware.x");
}
