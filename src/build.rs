//! Link options for a smaller binary (the release binary must stay under 1.4 MiB: README,
//! "Constraints"). Cargo.toml's profile cannot pass options to the linker; this script does,
//! for the binary only.

use std::env::var;

fn main() {
    println!("cargo:rerun-if-changed=src/build.rs");
    // Relative relocations packed into DT_RELR (`-z pack-relative-relocs`) instead of a
    // 24-byte RELA entry for each pointer the loader adjusts: about 45 KB less. glibc applies
    // them from 2.36 on, and a binary holding them requires the version GLIBC_ABI_DT_RELR,
    // which an older glibc refuses to start: so only where the glibc of the build has it (a
    // native build links against the glibc this script runs with). A linker that does not
    // know the option (GNU ld before 2.38) ignores it with a warning.
    if var("CARGO_CFG_TARGET_OS").as_deref() == Ok("linux")
        && var("CARGO_CFG_TARGET_ENV").as_deref() == Ok("gnu")
        && var("HOST") == var("TARGET")
        && glibc_has_dt_relr()
    {
        println!("cargo:rustc-link-arg-bins=-Wl,-z,pack-relative-relocs");
    }
    // Identical functions folded into one (`--icf=all`): about 11 KB less, the copies being
    // instances of generic code that compile to the same bytes. Rust promises no distinct
    // addresses for functions (LLVM already merges some), and LLD folds no data this way.
    // Only LLD (and gold) know the option, and GNU ld fails on it: so only where the linker is
    // rustc's own LLD, which rustc uses from 1.90 on for this target unless told otherwise.
    if links_with_rust_lld() {
        println!("cargo:rustc-link-arg-bins=-Wl,--icf=all");
    }
}

/// Whether rustc links this build with its own LLD: the target is x86_64-unknown-linux-gnu,
/// rustc is 1.90 or later, and neither Cargo (`target.<triple>.linker`) nor RUSTFLAGS name
/// another linker.
fn links_with_rust_lld() -> bool {
    let flags = var("CARGO_ENCODED_RUSTFLAGS").unwrap_or_default();
    if var("TARGET").as_deref() != Ok("x86_64-unknown-linux-gnu")
        || var("RUSTC_LINKER").is_ok()
        || ["linker", "link-self-contained", "fuse-ld"]
            .iter()
            .any(|f| flags.contains(f))
    {
        return false;
    }
    let rustc = var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let Ok(out) = std::process::Command::new(rustc).arg("-vV").output() else {
        return false;
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let minor = text
        .lines()
        .find_map(|l| l.strip_prefix("release: 1."))
        .and_then(|v| v.split('.').next()?.parse::<u32>().ok());
    minor.is_some_and(|m| m >= 90)
}

/// Whether the glibc this script runs with loads DT_RELR: its libc.so.6 defines the version
/// GLIBC_ABI_DT_RELR. False for a script linked statically (no libc.so in its maps).
fn glibc_has_dt_relr() -> bool {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap_or_default();
    let libc = maps
        .lines()
        .filter_map(|l| l.split_whitespace().nth(5))
        .find(|p| {
            p.rsplit('/')
                .next()
                .is_some_and(|n| n.starts_with("libc.so"))
        });
    libc.and_then(|p| std::fs::read(p).ok())
        .is_some_and(|b| b.windows(17).any(|w| w == b"GLIBC_ABI_DT_RELR"))
}
