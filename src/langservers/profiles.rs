//! The built-in language servers, one profile each, as data: what runs, for which files, how
//! it is found, whether it needs the workspace trusted, how its results become final, and
//! what the plugin maps to it (its patterns). A new built-in is one entry in `PROFILES` (and
//! its name in the README's, ccide(1)'s and `--lsp`'s lists, which a test checks).

use std::path::{Path, PathBuf};

use serde_json::Value;

use super::registry::{MAX_CONFIG, Spec};

/// One built-in language server.
pub struct Profile {
    /// The program, looked up as `trust::find` says (on PATH, never inside the workspace
    /// unless trusted); the origin of its diagnostics is `lsp:NAME`.
    pub name: &'static str,
    pub args: &'static [&'static str],
    /// The files it serves. Profiles with the same patterns are alternatives for one
    /// language: the first usable one in table order runs, and the plugin maps their
    /// extensions as one entry (ccide-protocol(7) §13).
    pub patterns: &'static [&'static str],
    /// Used only where one of these files exists in the first workspace folder (none: always).
    pub needs_files: &'static [&'static str],
    /// Used only where these programs are found too (as `trust::find` finds them, which is
    /// where the server's own PATH looks): what its diagnostics come from.
    pub needs_programs: &'static [&'static str],
    /// It runs what the workspace ships (builds, build scripts, proc macros): used only with
    /// `--trust-workspace` (ccide-protocol(7) §14).
    pub needs_trust: bool,
    /// With `--trust-workspace`, the project's own copy (relative to the first workspace
    /// folder), preferred over every alternative when `usable`.
    pub project_copy: Option<&'static str>,
    /// The program found runs only if this holds of it.
    pub usable: fn(&Path) -> bool,
    /// Each versioned publish is the whole result for that version (`Pushes::Complete`,
    /// ccide-protocol(7) §11.5); matched by the name the server gives in its `serverInfo`,
    /// which is this profile's name.
    pub complete_pushes: bool,
    /// typescript-language-server: told to use the TypeScript installed beside it, not the
    /// workspace's, unless trusted (`initialization_options`).
    pub typescript_beside: bool,
}

pub const TS_PATTERNS: &[&str] = &[
    "*.ts", "*.tsx", "*.mts", "*.cts", "*.js", "*.jsx", "*.mjs", "*.cjs",
];
const PY_PATTERNS: &[&str] = &["*.py", "*.pyi"];
const C_PATTERNS: &[&str] = &[
    "*.c", "*.h", "*.cc", "*.cpp", "*.cxx", "*.hpp", "*.hh", "*.hxx",
];

const ANY: fn(&Path) -> bool = |_| true;

const PLAIN: Profile = Profile {
    name: "",
    args: &[],
    patterns: &[],
    needs_files: &[],
    needs_programs: &[],
    needs_trust: false,
    project_copy: None,
    usable: ANY,
    complete_pushes: false,
    typescript_beside: false,
};

/// The built-ins, alternatives for a language in the order they are preferred.
pub const PROFILES: &[Profile] = &[
    Profile {
        name: "typescript-language-server",
        args: &["--stdio"],
        patterns: TS_PATTERNS,
        typescript_beside: true,
        ..PLAIN
    },
    // TypeScript 7 (the native port) is an LSP server itself, pull-only and several times
    // faster than tsserver (ccide-protocol(7) §11.4): the project's own copy decides (if
    // trusted); else one on PATH, after typescript-language-server.
    Profile {
        name: "tsc",
        args: &["--lsp", "--stdio"],
        patterns: TS_PATTERNS,
        project_copy: Some("node_modules/.bin/tsc"),
        usable: |p| typescript_major(p).is_some_and(|m| m >= 7),
        ..PLAIN
    },
    Profile {
        name: "basedpyright-langserver",
        args: &["--stdio"],
        patterns: PY_PATTERNS,
        ..PLAIN
    },
    Profile {
        name: "pyright-langserver",
        args: &["--stdio"],
        patterns: PY_PATTERNS,
        ..PLAIN
    },
    Profile {
        name: "ty",
        args: &["server"],
        patterns: PY_PATTERNS,
        ..PLAIN
    },
    Profile {
        name: "gopls",
        patterns: &["*.go"],
        ..PLAIN
    },
    // clangd without a compilation database guesses flags and reports wrong errors. Its
    // background index serves navigation, which ccide does not use, and costs memory (half as
    // much again on a large C project, ccide-protocol(7) §11.4).
    Profile {
        name: "clangd",
        args: &["--background-index=false"],
        patterns: C_PATTERNS,
        needs_files: &["compile_commands.json", "build/compile_commands.json"],
        complete_pushes: true,
        ..PLAIN
    },
    // It builds and runs the workspace's build scripts and proc macros, and follows its
    // .cargo/config.toml.
    Profile {
        name: "rust-analyzer",
        patterns: &["*.rs"],
        needs_files: &["Cargo.toml"],
        needs_trust: true,
        usable: |p| rust_analyzer_present(p, rustup_home().as_deref()),
        ..PLAIN
    },
    // Its diagnostics are shellcheck's (it looks it up on its PATH); without shellcheck it
    // reports none, and the built-in checker must not step aside for it.
    Profile {
        name: "bash-language-server",
        args: &["start"],
        patterns: &["*.sh", "*.bash"],
        needs_programs: &["shellcheck"],
        ..PLAIN
    },
];

/// The profile named `name` (a program's file name, or a server's `serverInfo` name).
pub fn profile(name: &str) -> Option<&'static Profile> {
    PROFILES.iter().find(|p| p.name == name)
}

/// The patterns of each language the built-ins serve, in table order: one list per set of
/// alternatives.
pub fn languages() -> Vec<&'static [&'static str]> {
    let mut out: Vec<&[&str]> = Vec::new();
    for p in PROFILES {
        if !out.contains(&p.patterns) {
            out.push(p.patterns);
        }
    }
    out
}

/// The built-in servers for what `find` locates (normally `crate::trust::find`), for
/// `workspaces` (the first decides which): for each language, the first usable profile of
/// `PROFILES`. Commands name the program by the path found. Opening a repository never runs a
/// program it ships unless the user `trusted` it (`--trust-workspace`): then only are a
/// profile's `project_copy` and a profile that `needs_trust` used, and a program found inside
/// the workspace (a PATH naming node_modules/.bin).
pub fn builtins(
    workspaces: &[PathBuf],
    find: &dyn Fn(&str) -> Option<PathBuf>,
    trusted: bool,
) -> Vec<Spec> {
    let find = |n: &str| find(n).filter(|p| crate::trust::allowed(p, workspaces, trusted));
    let workspace = workspaces[0].as_path();
    let mut out = Vec::new();
    for patterns in languages() {
        let alternatives = || PROFILES.iter().filter(move |p| p.patterns == patterns);
        let own = alternatives().filter(|_| trusted).find_map(|p| {
            let copy = workspace.join(p.project_copy?);
            (p.usable)(&copy).then_some((p, copy))
        });
        let chosen = own.or_else(|| {
            alternatives()
                .filter(|p| trusted || !p.needs_trust)
                .filter(|p| {
                    p.needs_files.is_empty()
                        || p.needs_files.iter().any(|f| workspace.join(f).is_file())
                })
                .filter(|p| p.needs_programs.iter().all(|n| find(n).is_some()))
                .find_map(|p| Some((p, find(p.name).filter(|f| (p.usable)(f))?)))
        });
        let Some((profile, program)) = chosen else {
            continue;
        };
        let mut words = vec![program.to_string_lossy().into_owned()];
        words.extend(profile.args.iter().map(|a| a.to_string()));
        for p in profile.patterns {
            out.push(Spec {
                pattern: p.to_string(),
                words: words.clone(),
                name: crate::pattern::program_name(&words[0]),
                builtin: true,
            });
        }
    }
    out
}

/// The major version of the TypeScript package a `tsc` belongs to (its `package.json`, two
/// directories above `bin/tsc`), without running it.
fn typescript_major(tsc: &Path) -> Option<u32> {
    let real = std::fs::canonicalize(tsc).ok()?;
    let pkg = real.parent()?.parent()?.join("package.json");
    let v: Value =
        serde_json::from_slice(&crate::files::read_regular(&pkg, MAX_CONFIG).ok()?).ok()?;
    v["version"].as_str()?.split('.').next()?.parse().ok()
}

/// The `initializationOptions` a server gets. typescript-language-server loads the
/// TypeScript it finds in the workspace (node_modules, walking up from the root), a program
/// the repository ships, unless told which: unless the user trusts the workspace, a server
/// whose profile says `typescript_beside` is told to use the one installed beside it, and
/// without one it is not started.
pub fn initialization_options(
    name: &str,
    program: &str,
    workspaces: &[PathBuf],
    trusted: bool,
) -> Result<Option<Value>, String> {
    if !profile(name).is_some_and(|p| p.typescript_beside) || trusted {
        return Ok(None);
    }
    let found = match program.contains('/') {
        true => Some(PathBuf::from(program)),
        false => crate::proc::find_on_path(program),
    };
    // What node's `require("typescript")` finds from the server's own files.
    let real = found.and_then(|p| std::fs::canonicalize(p).ok());
    let tsserver = real.iter().flat_map(|r| r.ancestors()).find_map(|a| {
        let t = a.join("node_modules/typescript/lib/tsserver.js");
        (t.is_file() && !crate::trust::inside(workspaces, &t)).then_some(t)
    });
    let Some(tsserver) = tsserver else {
        return Err(format!(
            "no TypeScript installed beside {name} (npm install -g typescript), and ccide does not load the workspace's own without --trust-workspace"
        ));
    };
    let mut v = Value::Null;
    v["tsserver"]["path"] = tsserver.to_string_lossy().into_owned().into();
    Ok(Some(v))
}

/// rustup puts a `rust-analyzer` proxy on PATH even when the component is not installed; that
/// proxy then fails with "Unknown binary 'rust-analyzer' in official toolchain" (seen here).
/// So a proxy counts only if some toolchain under `rustup_home` has the real one.
pub fn rust_analyzer_present(p: &Path, rustup_home: Option<&Path>) -> bool {
    if !crate::trust::rustup_proxy(p) {
        return true;
    }
    rustup_home
        .and_then(|h| std::fs::read_dir(h.join("toolchains")).ok())
        .is_some_and(|rd| {
            rd.flatten()
                .any(|t| t.path().join("bin/rust-analyzer").is_file())
        })
}

fn rustup_home() -> Option<PathBuf> {
    std::env::var_os("RUSTUP_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".rustup")))
}
