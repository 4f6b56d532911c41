//! Which language servers there are and which serves a file: `--lsp 'PATTERN=COMMAND'`, the
//! built-ins for what is installed, one server per distinct command (`--lsp '*.ts=CMD' --lsp
//! '*.tsx=CMD'` share a process), and the files a server covers (its patterns, inside a
//! workspace). The built-ins are `profiles`'.

use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::workspaces::Workspaces;

/// One `--lsp 'PATTERN=COMMAND'`.
#[derive(Clone, Debug, PartialEq)]
pub struct Spec {
    pub pattern: String,
    pub words: Vec<String>,
    /// The program's file name, e.g. `typescript-language-server`; the origin is `lsp:NAME`.
    pub name: String,
    /// A built-in: its process gets `trust::child_path`'s PATH (what the user names with
    /// `--lsp` runs as named, in serve's environment).
    pub builtin: bool,
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
        builtin: false,
    })
}

/// The servers to run: each distinct command once, with the patterns of every spec naming it,
/// and whether it is a built-in (a command the user also names runs as named).
pub fn group(specs: Vec<Spec>) -> Vec<(Vec<String>, Vec<String>, bool)> {
    let mut groups: Vec<(Vec<String>, Vec<String>, bool)> = Vec::new();
    for s in specs {
        match groups.iter_mut().find(|g| g.0 == s.words) {
            Some(g) => {
                g.1.push(s.pattern);
                g.2 &= s.builtin;
            }
            None => groups.push((s.words, vec![s.pattern], s.builtin)),
        }
    }
    groups
}

/// Whether a server with `patterns` covers `path`, a file inside one of `workspaces`: its
/// patterns match the path relative to the folder holding it (the deepest, as everywhere).
pub fn covers(patterns: &[String], workspaces: &Workspaces, path: &Path) -> bool {
    let Some(root) = workspaces.holder(path) else {
        return false;
    };
    let rel = path.strip_prefix(&root).unwrap_or(path).to_string_lossy();
    patterns
        .iter()
        .any(|p| crate::pattern::file_pattern_match(p, &rel))
}

/// A workspace file that `patterns` cover, to open first: for a TypeScript server, one of the
/// project that the workspace's tsconfig.json puts its files in (`project_file`); else the
/// first found by a bounded walk that skips hidden, vendored and build directories.
pub fn first_file(workspaces: &Workspaces, patterns: &[String]) -> Option<PathBuf> {
    let ok = |p: &Path| covers(patterns, workspaces, p);
    let folders = workspaces.list();
    if patterns.iter().any(|p| p == "*.ts") {
        let found = folders
            .iter()
            .find_map(|w| project_file(&w.join("tsconfig.json"), &ok, 0));
        if found.is_some() {
            return found;
        }
    }
    walk(&folders, &ok)
}

/// The configuration files read here (tsconfig.json, package.json) are far smaller; one
/// larger, or not a regular file (a FIFO would block), is not read.
pub(super) const MAX_CONFIG: u64 = 1 << 20;

/// A file of the project `config` (a tsconfig.json) describes: in its `files`, else under the
/// directories its `include` patterns start with (the whole directory without either list) and
/// not matching its `exclude`, else in one of the projects it references (a solution-style
/// config, such as hono's, lists only `references`). tsserver then loads the project the
/// files live in, not an inferred one for a file at the root that no project includes (hono's
/// vitest.config.ts). `extends` is not followed.
fn project_file(config: &Path, ok: &dyn Fn(&Path) -> bool, depth: u8) -> Option<PathBuf> {
    let bytes = crate::files::read_regular(config, MAX_CONFIG).ok()?;
    let v: Value =
        serde_json::from_slice(without_comments(std::str::from_utf8(&bytes).ok()?).as_bytes())
            .ok()?;
    let base = config.parent()?;
    let list = |k: &str| v[k].as_array().cloned().unwrap_or_default();
    for f in list("files") {
        let p = base.join(f.as_str()?);
        if p.is_file() && ok(&p) {
            return Some(p);
        }
    }
    let mut roots: Vec<PathBuf> = list("include")
        .iter()
        .filter_map(Value::as_str)
        .map(|i| {
            let literal = i.split('/').take_while(|c| !c.contains(['*', '?']));
            base.join(literal.collect::<Vec<_>>().join("/"))
        })
        .collect();
    if v.get("include").is_none() && v.get("files").is_none() {
        roots.push(base.to_path_buf());
    }
    let exclude = list("exclude");
    let kept = |p: &Path| {
        let rel = p.strip_prefix(base).unwrap_or(p).to_string_lossy();
        ok(p)
            && !exclude
                .iter()
                .any(|x| crate::pattern::glob_match(x.as_str().unwrap_or(""), &rel))
    };
    if let Some(f) = walk(&roots, &kept) {
        return Some(f);
    }
    for r in list("references").iter().filter_map(|r| r["path"].as_str()) {
        let mut c = base.join(r);
        if c.is_dir() {
            c.push("tsconfig.json");
        }
        if depth < 3
            && let Some(f) = project_file(&c, ok, depth + 1)
        {
            return Some(f);
        }
    }
    None
}

/// JSON with comments and trailing commas (tsconfig.json's) as JSON.
fn without_comments(text: &str) -> String {
    let b = text.as_bytes();
    let mut out: Vec<u8> = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        match (b[i], b.get(i + 1)) {
            (b'"', _) => {
                let start = i;
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                out.extend_from_slice(&b[start..(i + 1).min(b.len())]);
            }
            (b'/', Some(b'/')) => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            (b'/', Some(b'*')) => {
                i += 2;
                while i < b.len() && !b[i..].starts_with(b"*/") {
                    i += 1;
                }
                i += 1;
            }
            (c @ (b']' | b'}'), _) => {
                if let Some(t) = out.iter().rposition(|c| !c.is_ascii_whitespace())
                    && out[t] == b','
                {
                    out[t] = b' ';
                }
                out.push(c);
            }
            (c, _) => out.push(c),
        }
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The first file under `roots` that `ok` accepts, by a bounded walk, shallowest first and in
/// name order, that skips hidden, vendored and build directories.
fn walk(roots: &[PathBuf], ok: &dyn Fn(&Path) -> bool) -> Option<PathBuf> {
    const SKIP: &[&str] = &[
        "node_modules",
        "target",
        "build",
        "dist",
        "__pycache__",
        "venv",
    ];
    let mut budget = 5_000;
    for root in roots {
        let mut dirs = std::collections::VecDeque::from([root.clone()]);
        while let Some(dir) = dirs.pop_front() {
            let Ok(rd) = std::fs::read_dir(&dir) else {
                continue;
            };
            let mut entries: Vec<_> = rd.flatten().collect();
            crate::text::sort_by_bytes(&mut entries, |e| e.file_name().into_encoded_bytes());
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
                } else if ft.is_file() && ok(&p) {
                    return Some(p);
                }
            }
        }
    }
    None
}

/// The origin of a server's diagnostics in the store, `lsp:NAME`: each server's result
/// replaces only its own.
pub fn origin(name: &str) -> String {
    format!("lsp:{name}")
}
