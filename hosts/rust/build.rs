// Picks how the ABI mirror's layout is checked: with core::mem::offset_of! (rustc >= 1.77)
// every static_assert of abi/foxhunt_dqn.h is restated as a compile-time assertion; older
// compilers (Debian 12's 1.63) check the sizes at compile time and the offsets in a unit test.
use std::env;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let rustc = env::var("RUSTC").unwrap_or_else(|_| "rustc".to_string());
    let out = Command::new(rustc).arg("--version").output();
    let minor = out
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|v| v.split_whitespace().nth(1).map(|s| s.to_string()))
        .and_then(|v| v.split('.').nth(1).and_then(|m| m.parse::<u32>().ok()))
        .unwrap_or(0);
    if minor >= 80 {
        println!("cargo:rustc-check-cfg=cfg(fhd_offset_of)"); // a known cfg name from 1.80
    }
    if minor >= 77 {
        println!("cargo:rustc-cfg=fhd_offset_of");
    }
}
