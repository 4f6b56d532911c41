//! Which language servers there are and which serves a file: `--lsp 'PATTERN=COMMAND'`, the
//! built-ins for what is installed, one server per distinct command (`--lsp '*.ts=CMD' --lsp
//! '*.tsx=CMD'` share a process), and the files a server covers (its patterns, inside a
//! workspace). A new built-in server is added in `builtins`, and only there.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// One `--lsp 'PATTERN=COMMAND'`.
#[derive(Clone, Debug, PartialEq)]
pub struct Spec {
    pub pattern: String,
    pub words: Vec<String>,
    /// The program's file name, e.g. `typescript-language-server`; the origin is `lsp:NAME`.
    pub name: String,
}

/// `PATTERN=COMMAND`, with `--checker`'s pattern and quoting rules.
pub fn parse_spec(spec: &str) -> Result<Spec, String> {
    let (pattern, command) = crate::pattern::split_spec(spec)?;
    let words = crate::pattern::split_words(command).map_err(|e| format!("'{spec}': {e}"))?;
    if words.is_empty() {
        return Err(format!("'{spec}' has an empty command"));
    }
    Ok(Spec {
        pattern: pattern.to_string(),
        name: crate::pattern::program_name(&words[0]),
        words,
    })
}

/// The servers to run: each distinct command once, with the patterns of every spec naming it.
pub fn group(specs: Vec<Spec>) -> Vec<(Vec<String>, Vec<String>)> {
    let mut groups: Vec<(Vec<String>, Vec<String>)> = Vec::new();
    for s in specs {
        match groups.iter_mut().find(|g| g.0 == s.words) {
            Some(g) => g.1.push(s.pattern),
            None => groups.push((s.words, vec![s.pattern])),
        }
    }
    groups
}

/// Whether a server with `patterns` covers `path`, a file inside one of `workspaces`.
pub fn covers(patterns: &[String], workspaces: &[PathBuf], path: &Path) -> bool {
    let Some(root) = workspaces.iter().find(|w| path.starts_with(w)) else {
        return false;
    };
    let Ok(rel) = path.strip_prefix(root) else {
        return false;
    };
    let rel = rel.to_string_lossy();
    patterns
        .iter()
        .any(|p| crate::pattern::file_pattern_match(p, &rel))
}

/// A workspace file that `patterns` cover, found by a bounded walk that skips hidden, vendored
/// and build directories.
pub fn first_file(workspaces: &[PathBuf], patterns: &[String]) -> Option<PathBuf> {
    const SKIP: &[&str] = &[
        "node_modules",
        "target",
        "build",
        "dist",
        "__pycache__",
        "venv",
    ];
    let mut budget = 5_000;
    for root in workspaces {
        let mut dirs = std::collections::VecDeque::from([root.clone()]);
        while let Some(dir) = dirs.pop_front() {
            let Ok(rd) = std::fs::read_dir(&dir) else {
                continue;
            };
            let mut entries: Vec<_> = rd.flatten().collect();
            entries.sort_by_key(|e| e.file_name());
            for e in entries {
                budget -= 1;
                if budget == 0 {
                    return None;
                }
                let name = e.file_name();
                let name = name.to_string_lossy();
                let Ok(ft) = e.file_type() else { continue };
                let p = e.path();
                if ft.is_dir() {
                    if !name.starts_with('.') && !SKIP.contains(&name.as_ref()) {
                        dirs.push_back(p);
                    }
                } else if ft.is_file() && covers(patterns, std::slice::from_ref(root), &p) {
                    return Some(p);
                }
            }
        }
    }
    None
}

pub const TS_PATTERNS: &[&str] = &[
    "*.ts", "*.tsx", "*.mts", "*.cts", "*.js", "*.jsx", "*.mjs", "*.cjs",
];
const C_PATTERNS: &[&str] = &[
    "*.c", "*.h", "*.cc", "*.cpp", "*.cxx", "*.hpp", "*.hh", "*.hxx",
];

/// The built-in servers for what `find` locates (normally `crate::proc::find_on_path`), for `workspace`:
/// TypeScript/JavaScript, Python, Go, C/C++ (with a compile_commands.json) and Rust (with a
/// Cargo.toml). Commands name the program by the path found.
pub fn builtins(workspace: &Path, find: &dyn Fn(&str) -> Option<PathBuf>) -> Vec<Spec> {
    let mut out = Vec::new();
    let mut add = |patterns: &[&str], program: &Path, args: &[&str]| {
        let mut words = vec![program.to_string_lossy().into_owned()];
        words.extend(args.iter().map(|a| a.to_string()));
        for p in patterns {
            out.push(Spec {
                pattern: p.to_string(),
                words: words.clone(),
                name: crate::pattern::program_name(&words[0]),
            });
        }
    };
    // TypeScript 7 (the native port) is an LSP server itself, pull-only and several times
    // faster than tsserver (ccide-protocol(7) §11.4); the project's own copy decides, else
    // typescript-language-server, which uses the project's TypeScript.
    let local_tsc = workspace.join("node_modules/.bin/tsc");
    if typescript_major(&local_tsc).is_some_and(|m| m >= 7) {
        add(TS_PATTERNS, &local_tsc, &["--lsp", "--stdio"]);
    } else if let Some(p) = find("typescript-language-server") {
        add(TS_PATTERNS, &p, &["--stdio"]);
    } else if let Some(p) = find("tsc").filter(|p| typescript_major(p).is_some_and(|m| m >= 7)) {
        add(TS_PATTERNS, &p, &["--lsp", "--stdio"]);
    }
    let py = &["*.py", "*.pyi"];
    if let Some(p) = find("basedpyright-langserver") {
        add(py, &p, &["--stdio"]);
    } else if let Some(p) = find("pyright-langserver") {
        add(py, &p, &["--stdio"]);
    } else if let Some(p) = find("ty") {
        add(py, &p, &["server"]);
    }
    if let Some(p) = find("gopls") {
        add(&["*.go"], &p, &[]);
    }
    // clangd without a compilation database guesses flags and reports wrong errors. Its
    // background index serves navigation, which ccide does not use, and costs memory (half as
    // much again on a large C project, ccide-protocol(7) §11.4).
    if ["compile_commands.json", "build/compile_commands.json"]
        .iter()
        .any(|f| workspace.join(f).is_file())
        && let Some(p) = find("clangd")
    {
        add(C_PATTERNS, &p, &["--background-index=false"]);
    }
    if workspace.join("Cargo.toml").is_file()
        && let Some(p) =
            find("rust-analyzer").filter(|p| rust_analyzer_present(p, rustup_home().as_deref()))
    {
        add(&["*.rs"], &p, &[]);
    }
    out
}

/// The major version of the TypeScript package a `tsc` belongs to (its `package.json`, two
/// directories above `bin/tsc`), without running it.
fn typescript_major(tsc: &Path) -> Option<u32> {
    let real = std::fs::canonicalize(tsc).ok()?;
    let pkg = real.parent()?.parent()?.join("package.json");
    let v: Value = serde_json::from_slice(&std::fs::read(pkg).ok()?).ok()?;
    v["version"].as_str()?.split('.').next()?.parse().ok()
}

/// rustup puts a `rust-analyzer` proxy on PATH even when the component is not installed; that
/// proxy then fails with "Unknown binary 'rust-analyzer' in official toolchain" (seen here).
/// So a proxy counts only if some toolchain under `rustup_home` has the real one.
pub fn rust_analyzer_present(p: &Path, rustup_home: Option<&Path>) -> bool {
    let real = std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    if real
        .file_name()
        .is_none_or(|n| !n.to_string_lossy().starts_with("rustup"))
    {
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

/// The origin of a server's diagnostics in the store, `lsp:NAME`: each server's result
/// replaces only its own.
pub fn origin(name: &str) -> String {
    format!("lsp:{name}")
}
