//! The layer test: reads every source file (test code left out) and checks that each import
//! runs down the layers declared in `LAYERS`, between top-level modules and between the
//! files of a module alike, so no two source files can import each other.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Each module's parts, lowest first; parts on one rank (`a|b`) may not import each other.
/// `mod` is a directory module's own `mod.rs`; `main` is `main.rs`. A module of several files
/// must be listed, and so must each of its files.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "",
        &[
            "text|pattern|json",
            "log|textdiff",
            "review",
            "sys",
            "files|proc",
            "workspaces|lockfile|trust",
            "transport",
            "rpc",
            "lsp",
            "langservers",
            "diagnostics",
            "state",
            "tools",
            "session|control",
            "cli",
            "commands",
            "main",
        ],
    ),
    ("transport", &["connection", "handshake", "mod"]),
    ("rpc", &["mod", "clients", "call"]),
    ("lsp", &["framing|text", "queue", "connection", "mod"]),
    (
        "langservers",
        &[
            "registry|finality",
            "profiles",
            "supervisor",
            "server",
            "mod",
        ],
    ),
    (
        "langservers::server",
        &[
            "state",
            "positions",
            "requests",
            "lifecycle",
            "documents|status",
            "mod",
        ],
    ),
    ("diagnostics", &["parse", "lsp", "checkers", "mod"]),
    (
        "state",
        &[
            "events|watched",
            "editor|diffs|exec|diagnostics|changes",
            "mod",
        ],
    ),
    (
        "tools",
        &["editor|workspace|diffs|diagnostics|exec|format", "mod"],
    ),
    (
        "control",
        &[
            "protocol",
            "editors",
            "handler|client|lsp_mux",
            "server",
            "mod",
        ],
    ),
    (
        "commands",
        &[
            "notify|hook",
            "serve|unit|bridge|plugin",
            "client",
            "lsp_editor|review",
            "mod",
        ],
    ),
    (
        "commands::lsp_editor",
        &[
            "quirks|docs|proposals|link|paths",
            "changes",
            "dialogue",
            "mod",
        ],
    ),
];

/// A file's place: its module path, and for a directory's `mod.rs` (or `main.rs`) the part
/// `mod` (`main`) under it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Place(Vec<String>);

fn place_of(rel: &str) -> (Vec<String>, Place) {
    let rel = rel.trim_end_matches(".rs");
    let mut parts: Vec<String> = rel.split('/').map(String::from).collect();
    let last = parts.pop().unwrap_or_default();
    let module = match last.as_str() {
        "main" if parts.is_empty() => Vec::new(),
        "mod" => parts.clone(),
        _ => {
            let mut m = parts.clone();
            m.push(last.clone());
            m
        }
    };
    let mut place = parts;
    place.push(last);
    (module, Place(place))
}

/// `text` with comments, string and character literals blanked out (their line breaks
/// kept, so a function keeps its length), and every item marked `#[cfg(test)]` (a `mod tests;`
/// line, a `mod tests { .. }` block, a test-only `use`) removed, wherever it stands.
fn code_only(text: &str) -> String {
    let b: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < b.len() && b[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let start = i;
            let mut depth = 0;
            while i < b.len() {
                if b[i] == '/' && b.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if b[i] == '*' && b.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
            out.extend(b[start..i.min(b.len())].iter().filter(|&&ch| ch == '\n'));
        } else if c == 'r' && (next == Some('"') || next == Some('#')) && !ident_before(&b, i) {
            // A raw string r"..", r#".."#.
            let mut j = i + 1;
            let mut hashes = 0;
            while b.get(j) == Some(&'#') {
                hashes += 1;
                j += 1;
            }
            if b.get(j) != Some(&'"') {
                out.push(c);
                i += 1;
                continue;
            }
            j += 1;
            'raw: while j < b.len() {
                if b[j] == '"' && (0..hashes).all(|k| b.get(j + 1 + k) == Some(&'#')) {
                    j += 1 + hashes;
                    break 'raw;
                }
                j += 1;
            }
            out.push_str("\"\"");
            out.extend(b[i..j.min(b.len())].iter().filter(|&&ch| ch == '\n'));
            i = j;
        } else if c == '"' {
            let start = i;
            i += 1;
            while i < b.len() && b[i] != '"' {
                i += if b[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
            out.extend(b[start..i.min(b.len())].iter().filter(|&&ch| ch == '\n'));
        } else if c == '\'' && (b.get(i + 2) == Some(&'\'') || next == Some('\\')) {
            // A character literal ('x', '\n', '\u{..}'), not a lifetime.
            i += 1;
            while i < b.len() && b[i] != '\'' {
                i += if b[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("' '");
        } else {
            out.push(c);
            i += 1;
        }
    }
    drop_test_items(&out)
}

fn ident_before(b: &[char], i: usize) -> bool {
    i > 0 && (b[i - 1].is_alphanumeric() || b[i - 1] == '_')
}

/// Removes each item that follows a `#[cfg(test)]` attribute: up to its `;`, or through its
/// braced body.
fn drop_test_items(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let item = &rest[at + "#[cfg(test)]".len()..];
        let mut depth = 0;
        let mut end = item.len();
        for (k, ch) in item.char_indices() {
            match ch {
                ';' if depth == 0 => {
                    end = k + 1;
                    break;
                }
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = k + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

#[derive(Debug, PartialEq)]
enum Tok {
    Ident(String),
    Sep,
    Open,
    Close,
    Comma,
    Other(char),
}

fn tokens(code: &str) -> Vec<Tok> {
    let b: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_alphanumeric() || c == '_' {
            let start = i;
            while i < b.len() && (b[i].is_alphanumeric() || b[i] == '_') {
                i += 1;
            }
            out.push(Tok::Ident(b[start..i].iter().collect()));
            continue;
        }
        match c {
            ':' if b.get(i + 1) == Some(&':') => {
                out.push(Tok::Sep);
                i += 1;
            }
            '{' => out.push(Tok::Open),
            '}' => out.push(Tok::Close),
            ',' => out.push(Tok::Comma),
            c if c.is_whitespace() => {}
            c => out.push(Tok::Other(c)),
        }
        i += 1;
    }
    out
}

/// The paths a file names: every `use` tree expanded (nested groups too), and every path in
/// the code (`crate::files::stamp(..)`, `crate::log::info!`).
fn paths(code: &str) -> Vec<Vec<String>> {
    let t = tokens(code);
    let mut out = Vec::new();
    let mut i = 0;
    while i < t.len() {
        if t[i] == Tok::Ident("use".into()) {
            i = use_tree(&t, i + 1, Vec::new(), &mut out);
            continue;
        }
        if let Tok::Ident(first) = &t[i]
            && t.get(i + 1) == Some(&Tok::Sep)
            && (i == 0 || t[i - 1] != Tok::Sep)
        {
            let mut p = vec![first.clone()];
            i += 1;
            while t.get(i) == Some(&Tok::Sep) {
                match t.get(i + 1) {
                    Some(Tok::Ident(s)) => p.push(s.clone()),
                    _ => break,
                }
                i += 2;
            }
            out.push(p);
            continue;
        }
        i += 1;
    }
    out
}

/// Reads one use tree at `i` under `prefix`; returns the index after it.
fn use_tree(t: &[Tok], mut i: usize, mut prefix: Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    loop {
        match t.get(i) {
            Some(Tok::Ident(s)) if s != "as" => {
                prefix.push(s.clone());
                i += 1;
            }
            Some(Tok::Open) => {
                i += 1;
                loop {
                    match t.get(i) {
                        Some(Tok::Close) => return i + 1,
                        Some(Tok::Comma) => i += 1,
                        None => return i,
                        _ => i = use_tree(t, i, prefix.clone(), out),
                    }
                }
            }
            _ => {
                // `as NAME`, `*`, or the end of the tree.
                if !prefix.is_empty() {
                    out.push(prefix);
                }
                while let Some(tok) = t.get(i) {
                    if matches!(tok, Tok::Comma | Tok::Close | Tok::Other(';')) {
                        break;
                    }
                    i += 1;
                }
                return if t.get(i) == Some(&Tok::Other(';')) {
                    i + 1
                } else {
                    i
                };
            }
        }
        if t.get(i) == Some(&Tok::Sep) {
            i += 1;
        } else if !matches!(t.get(i), Some(Tok::Open)) {
            out.push(prefix);
            while let Some(tok) = t.get(i) {
                if matches!(tok, Tok::Comma | Tok::Close | Tok::Other(';')) {
                    break;
                }
                i += 1;
            }
            return if t.get(i) == Some(&Tok::Other(';')) {
                i + 1
            } else {
                i
            };
        }
    }
}

/// The child modules a file declares (`mod x;`, `pub mod x;`), outside test code.
fn children(code: &str) -> BTreeSet<String> {
    let t = tokens(code);
    t.windows(2)
        .filter_map(|w| match (&w[0], &w[1]) {
            (Tok::Ident(m), Tok::Ident(name)) if m == "mod" => Some(name.clone()),
            _ => None,
        })
        .collect()
}

/// Every import of every source file: (file, the path it names made absolute, the file that
/// holds it). `files` are (path relative to `src`, text); files named `*tests.rs` are test
/// code and not read, nor is a file's use of itself.
fn imports(files: &[(String, String)]) -> Vec<(String, Vec<String>, String)> {
    let mut modules: BTreeMap<Vec<String>, String> = BTreeMap::new();
    for (rel, _) in files {
        modules.insert(place_of(rel).0, rel.clone());
    }
    let mut out = Vec::new();
    for (rel, text) in files {
        if rel.ends_with("tests.rs") {
            continue;
        }
        let (module, _) = place_of(rel);
        let code = code_only(text);
        let kids = children(&code);
        for path in paths(&code) {
            let abs: Vec<String> = match path[0].as_str() {
                "crate" => path[1..].to_vec(),
                "super" => {
                    let mut m = module.clone();
                    let mut k = 0;
                    while path.get(k).is_some_and(|s| s == "super") {
                        m.pop();
                        k += 1;
                    }
                    m.extend(path[k..].iter().cloned());
                    m
                }
                "self" => [module.clone(), path[1..].to_vec()].concat(),
                first if kids.contains(first) => [module.clone(), path.clone()].concat(),
                _ => continue,
            };
            let target = (0..=abs.len()).rev().find_map(|n| modules.get(&abs[..n]));
            let Some(file) = target else { continue };
            if file != rel {
                out.push((rel.clone(), abs, file.clone()));
            }
        }
    }
    out
}

/// The arrows that run up: (file, what it imports, why).
fn upward(files: &[(String, String)]) -> Vec<String> {
    let mut bad = Vec::new();
    for (rel, abs, file) in imports(files) {
        if let Err(why) = runs_down(&place_of(&rel).1, &place_of(&file).1) {
            bad.push(format!("{rel} imports {} ({file}): {why}", abs.join("::")));
        }
    }
    bad.sort();
    bad.dedup();
    bad
}

/// What a module must not reach though the layers allow it: (module, what it must not
/// import, names of that it must not use even without importing them, why).
const SEAMS: &[(&str, &str, &[&str], &str)] = &[(
    "diagnostics",
    "rpc::clients",
    &["Clients", "Client", "broadcast"],
    "the store tells its sink what changed; who hears of it, and in what JSON, is for the \
     layers above (state)",
)];

/// The files that cross a seam of `SEAMS`: (file, what it imports or names, why).
fn across_seams(files: &[(String, String)]) -> Vec<String> {
    let mut bad = Vec::new();
    for (module, beyond, names, why) in SEAMS {
        let inside = |rel: &str| place_of(rel).0.first().is_some_and(|m| m == module);
        let beyond: Vec<String> = beyond.split("::").map(String::from).collect();
        for (rel, abs, _) in imports(files) {
            if inside(&rel) && abs.starts_with(&beyond) {
                bad.push(format!("{rel} imports {}: {why}", abs.join("::")));
            }
        }
        for (rel, text) in files {
            if !inside(rel) || rel.ends_with("tests.rs") {
                continue;
            }
            for t in tokens(&code_only(text)) {
                if let Tok::Ident(name) = t
                    && names.contains(&name.as_str())
                {
                    bad.push(format!("{rel} names {name}: {why}"));
                }
            }
        }
    }
    bad.sort();
    bad.dedup();
    bad
}

/// Whether an import from `from` to `to` runs down the layers: compared where their places
/// part, in the table of the module they share.
fn runs_down(from: &Place, to: &Place) -> Result<(), String> {
    let k = from.0.iter().zip(&to.0).take_while(|(a, b)| a == b).count();
    let (Some(a), Some(b)) = (from.0.get(k), to.0.get(k)) else {
        return Ok(());
    };
    let parent = from.0[..k].join("::");
    let Some((_, order)) = LAYERS.iter().find(|(m, _)| *m == parent) else {
        return Err(format!("module '{parent}' has no entry in LAYERS"));
    };
    let rank = |part: &str| order.iter().position(|r| r.split('|').any(|p| p == part));
    match (rank(a), rank(b)) {
        (Some(x), Some(y)) if y < x => Ok(()),
        (Some(_), Some(_)) => Err(format!("'{b}' is not below '{a}' in '{parent}'")),
        (None, _) => Err(format!("'{a}' has no layer in '{parent}'")),
        (_, None) => Err(format!("'{b}' has no layer in '{parent}'")),
    }
}

fn sources(dir: &Path, root: &Path, out: &mut Vec<(String, String)>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            sources(&p, root, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            out.push((rel, std::fs::read_to_string(&p).unwrap()));
        }
    }
}

#[test]
fn every_import_runs_down_the_layers() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &src, &mut files);
    assert!(files.len() > 20);
    let bad = upward(&files);
    assert!(bad.is_empty(), "imports that run up:\n{}", bad.join("\n"));
}

#[test]
fn the_diagnostics_store_never_reaches_the_clients() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &src, &mut files);
    let bad = across_seams(&files);
    assert!(bad.is_empty(), "seams crossed:\n{}", bad.join("\n"));
}

fn file(rel: &str, text: &str) -> (String, String) {
    (rel.to_string(), text.to_string())
}

/// The checker itself: an upward import is caught after a test item, inside a nested group,
/// between the files of one module, and through `super`; comments, strings and test code are
/// not read.
#[test]
fn the_checker_catches_upward_imports_wherever_they_hide() {
    let base = [
        file("main.rs", "mod rpc;\nmod state;\n"),
        file(
            "rpc/mod.rs",
            "pub mod clients;\npub mod call;\npub struct RequestId;\n",
        ),
        file("rpc/clients.rs", "use super::RequestId;\n"),
        file("rpc/call.rs", ""),
        file("state/events.rs", ""),
        file("state/mod.rs", "mod events;\nuse events::Events;\n"),
        file(
            "text.rs",
            "// crate::state::x in a comment\nconst S: &str = \"crate::state\";\n",
        ),
    ];
    let check = |extra: (String, String)| {
        let mut files = base.to_vec();
        files.retain(|f| f.0 != extra.0);
        files.push(extra);
        upward(&files)
    };
    assert_eq!(
        check(file("rpc/call.rs", "use super::clients::x;")),
        Vec::<String>::new()
    );
    let after_test_item = check(file(
        "rpc/call.rs",
        "#[cfg(test)]\nmod tests;\nuse crate::state::State;\n",
    ));
    assert_eq!(
        after_test_item,
        ["rpc/call.rs imports state::State (state/mod.rs): 'state' is not below 'rpc' in ''"]
    );
    let nested = check(file(
        "rpc/call.rs",
        "use crate::{rpc::RequestId, state::{events::{Events}, x}};",
    ));
    assert_eq!(nested.len(), 2, "{nested:?}");
    assert!(nested[0].starts_with("rpc/call.rs imports state::events::Events (state/events.rs)"));
    let between_files = check(file("rpc/clients.rs", "use super::call::Call;\n"));
    assert_eq!(
        between_files,
        [
            "rpc/clients.rs imports rpc::call::Call (rpc/call.rs): 'call' is not below 'clients' in 'rpc'"
        ]
    );
    let child_up = check(file("state/events.rs", "fn f() { super::helper(); }"));
    assert_eq!(
        child_up,
        [
            "state/events.rs imports state::helper (state/mod.rs): 'mod' is not below 'events' in 'state'"
        ]
    );
    let test_code = check(file(
        "rpc/call.rs",
        "#[cfg(test)]\nmod tests {\n    use crate::state::State;\n}\nfn ok() {}\n",
    ));
    assert_eq!(test_code, Vec::<String>::new());
}

/// The seam check: an import of the client list from the diagnostics store is caught, through
/// `crate` or a group, and so is a broadcast through a list handed in; elsewhere, in comments,
/// strings and test code they are not.
#[test]
fn the_seam_check_catches_the_store_reaching_the_clients() {
    let base = [
        file("main.rs", "mod rpc;\nmod diagnostics;\nmod state;\n"),
        file("rpc/mod.rs", "pub mod clients;\n"),
        file("rpc/clients.rs", "pub struct Clients;\n"),
        file(
            "state/mod.rs",
            "use crate::rpc::clients::Clients;\nfn f(c: &Clients) { c.broadcast(); }\n",
        ),
        file("diagnostics/mod.rs", "pub mod parse;\n"),
        file(
            "diagnostics/parse.rs",
            "// Clients broadcast\nconst S: &str = \"broadcast\";\n#[cfg(test)]\nmod tests { use crate::rpc::clients::Clients; }\n",
        ),
    ];
    let check = |extra: (String, String)| {
        let mut files = base.to_vec();
        files.retain(|f| f.0 != extra.0);
        files.push(extra);
        across_seams(&files)
    };
    assert_eq!(check(file("state/events.rs", "")), Vec::<String>::new());
    let imported = check(file(
        "diagnostics/mod.rs",
        "pub mod parse;\nuse crate::{rpc::{clients::Clients}};\n",
    ));
    assert_eq!(imported.len(), 2, "{imported:?}");
    assert!(imported[0].starts_with("diagnostics/mod.rs imports rpc::clients::Clients: "));
    assert!(imported[1].starts_with("diagnostics/mod.rs names Clients: "));
    let handed_in = check(file(
        "diagnostics/parse.rs",
        "fn f<T: Tell>(to: &T) { to.broadcast(); }\n",
    ));
    assert_eq!(handed_in.len(), 1, "{handed_in:?}");
    assert!(handed_in[0].starts_with("diagnostics/parse.rs names broadcast: "));
}

/// README's "Layout of the source" table, as (layer, modules, role) rows.
fn readme_layout() -> Vec<(u32, Vec<String>, String)> {
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let section = readme
        .split("\n## Layout of the source\n")
        .nth(1)
        .expect("README has a Layout of the source section");
    let section = section.split("\n## ").next().unwrap();
    let ticked = |s: &str| -> Vec<String> {
        s.split('`')
            .skip(1)
            .step_by(2)
            .map(|m| m.trim_end_matches(".rs").to_string())
            .collect()
    };
    section
        .lines()
        .filter_map(|l| {
            let cols: Vec<&str> = l.strip_prefix("| ")?.splitn(3, " | ").collect();
            let layer = cols.first()?.parse().ok()?;
            Some((layer, ticked(cols.get(1)?), cols.get(2)?.to_string()))
        })
        .collect()
}

/// The layout table in README names every top-level module once, in the order of `LAYERS`,
/// and in each module's row each of its files; its text names the layer test.
#[test]
fn the_readme_layout_names_every_module() {
    let rows = readme_layout();
    assert!(rows.len() > 5, "{rows:?}");
    let layer_of = |m: &str| -> Vec<u32> {
        rows.iter()
            .filter(|r| r.1.iter().any(|x| x == m))
            .map(|r| r.0)
            .collect()
    };
    let top = LAYERS.iter().find(|(m, _)| m.is_empty()).unwrap().1;
    let mut last = 0;
    let mut listed = BTreeSet::new();
    for rank in top {
        for m in rank.split('|') {
            let at = layer_of(m);
            assert_eq!(
                at.len(),
                1,
                "README's layout table names `{m}` once: {at:?}"
            );
            assert!(
                at[0] >= last,
                "README's layout table puts `{m}` below a lower layer"
            );
            last = at[0];
            listed.insert(m.to_string());
        }
    }
    let extra: Vec<&String> = rows
        .iter()
        .flat_map(|r| &r.1)
        .filter(|m| !listed.contains(*m))
        .collect();
    assert!(
        extra.is_empty(),
        "README's layout table names modules LAYERS does not: {extra:?}"
    );
    for (module, parts) in LAYERS.iter().filter(|(m, _)| !m.is_empty()) {
        let top = module.split("::").next().unwrap();
        let row = rows.iter().find(|r| r.1.iter().any(|x| x == top)).unwrap();
        let mut names = vec![module.rsplit("::").next().unwrap()];
        names.extend(
            parts
                .iter()
                .flat_map(|r| r.split('|'))
                .filter(|p| *p != "mod"),
        );
        for name in names {
            assert!(
                row.2.contains(&format!("`{name}`")) || row.1.iter().any(|x| x == name),
                "README's layout row of `{top}` does not name `{name}` (in {module})"
            );
        }
    }
    let readme =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    for name in [
        "`every_import_runs_down_the_layers`",
        "`src/layers_tests.rs`",
    ] {
        assert!(readme.contains(name), "README's layout names {name}");
    }
}

/// Type names with one home: each is declared (`struct`, `enum`, `type`, `trait`) in one
/// file, and every other file uses that one.
const ONE_HOME: &[&str] = &["Pos", "Deliver"];

/// Where `name` is declared as a type: one line per declaration, `file: kind name`.
fn declarations(files: &[(String, String)], name: &str) -> Vec<String> {
    let mut out = Vec::new();
    for (rel, text) in files {
        let t = tokens(&code_only(text));
        for w in t.windows(2) {
            if let (Tok::Ident(kind), Tok::Ident(n)) = (&w[0], &w[1])
                && ["struct", "enum", "type", "trait"].contains(&kind.as_str())
                && n == name
            {
                out.push(format!("{rel}: {kind} {n}"));
            }
        }
    }
    out
}

#[test]
fn each_shared_type_name_has_one_home() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &src, &mut files);
    for name in ONE_HOME {
        let found = declarations(&files, name);
        assert_eq!(found.len(), 1, "`{name}` is declared once: {found:?}");
    }
    // The checker: a second home is seen, in a module of its own or behind `pub`; a comment,
    // a string or a use is not a declaration.
    let two = [
        file("lsp/text.rs", "pub struct Pos { line: u32 }"),
        file(
            "state/editor.rs",
            "mod m { pub(crate) type Pos = (u32, u32); }",
        ),
        file(
            "a.rs",
            "// struct Pos\nconst S: &str = \"enum Pos\";\nuse x::Pos;",
        ),
    ];
    assert_eq!(
        declarations(&two, "Pos"),
        ["lsp/text.rs: struct Pos", "state/editor.rs: type Pos"]
    );
}

/// Functions this long are split into named steps; the one exception is the diff algorithm,
/// which reads best whole.
const LONGEST_FN: usize = 120;
const LONG_FN: usize = 80;
const MAX_LONG_FNS: usize = 9;
const WHOLE_FNS: &[&str] = &["textdiff.rs diag"];

/// Each function with a body in `text`'s production code (test items left out), as its name
/// and its length in lines: from the line of its `fn` to the line of its closing brace.
fn function_lengths(text: &str) -> Vec<(String, usize)> {
    let b: Vec<char> = code_only(text).chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i + 2 < b.len() {
        let is_fn = b[i] == 'f' && b[i + 1] == 'n' && b[i + 2].is_whitespace();
        if !is_fn || ident_before(&b, i) {
            i += 1;
            continue;
        }
        let mut j = i + 2;
        while j < b.len() && b[j].is_whitespace() {
            j += 1;
        }
        let name: String = b[j..]
            .iter()
            .take_while(|c| c.is_alphanumeric() || **c == '_')
            .collect();
        while j < b.len() && b[j] != '{' && b[j] != ';' {
            j += 1;
        }
        if name.is_empty() || b.get(j) != Some(&'{') {
            i = j;
            continue;
        }
        let mut depth = 0;
        let mut end = j;
        for (k, ch) in b.iter().enumerate().skip(j) {
            match ch {
                '{' => depth += 1,
                '}' => depth -= 1,
                _ => continue,
            }
            if depth == 0 {
                end = k;
                break;
            }
        }
        let lines = 1 + b[i..end].iter().filter(|c| **c == '\n').count();
        out.push((name, lines));
        i += 2;
    }
    out
}

/// What is wrong with the lengths of `files`' production functions (test files left out): any
/// of `LONGEST_FN` lines or more but those in `WHOLE_FNS`, or more than `MAX_LONG_FNS` of
/// `LONG_FN` lines or more.
fn too_long(files: &[(String, String)]) -> Vec<String> {
    let mut bad = Vec::new();
    let mut long = Vec::new();
    for (rel, text) in files {
        let base = rel.rsplit('/').next().unwrap_or(rel);
        if base == "tests.rs" || base.ends_with("_tests.rs") {
            continue;
        }
        for (name, lines) in function_lengths(text) {
            let id = format!("{rel} {name}");
            if lines >= LONGEST_FN && !WHOLE_FNS.contains(&id.as_str()) {
                bad.push(format!(
                    "{id} has {lines} lines (split it into named steps)"
                ));
            }
            if lines >= LONG_FN {
                long.push(format!("{id} ({lines})"));
            }
        }
    }
    if long.len() > MAX_LONG_FNS {
        bad.push(format!(
            "{} functions of {LONG_FN} lines or more, at most {MAX_LONG_FNS} allowed: {}",
            long.len(),
            long.join(", ")
        ));
    }
    bad
}

#[test]
fn no_function_runs_on() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &src, &mut files);
    assert!(files.len() > 20);
    let bad = too_long(&files);
    assert!(bad.is_empty(), "functions too long:\n{}", bad.join("\n"));
}

/// The length checker itself: a function counts from its `fn` to its closing brace, braces in
/// strings and comments and lines of test code do not count, bodiless and pointer `fn`s are
/// not functions, and test files are not read.
#[test]
fn the_length_checker_counts_from_fn_to_its_closing_brace() {
    let body = |n: usize| "    x();\n".repeat(n);
    let text = format!(
        "/// doc\n#[inline]\npub(crate) fn long(\n    a: fn(u8),\n) -> u8 {{\n{}    \"}}\" // }}\n    /* {{\n */\n}}\n\
         trait T {{\n    fn bodiless(&self);\n    fn short(&self) {{ x() }}\n}}\n\
         #[cfg(test)]\nmod tests {{\n    fn in_test() {{\n{}    }}\n}}\n",
        body(3),
        body(200)
    );
    assert_eq!(
        function_lengths(&text),
        [("long".to_string(), 10), ("short".to_string(), 1)]
    );
    let f = |rel: &str, n: usize| file(rel, &format!("fn f() {{\n{}}}\n", body(n - 2)));
    assert_eq!(
        too_long(&[f("a.rs", 119), f("tests.rs", 500)]),
        Vec::<String>::new()
    );
    assert_eq!(
        too_long(&[f("a/b.rs", 120)]),
        ["a/b.rs f has 120 lines (split it into named steps)"]
    );
    assert_eq!(
        too_long(&[file(
            "textdiff.rs",
            &format!("fn diag() {{\n{}}}", body(300))
        )]),
        Vec::<String>::new()
    );
    let nine: Vec<_> = (0..9).map(|k| f(&format!("{k}.rs"), 80)).collect();
    assert_eq!(too_long(&nine), Vec::<String>::new());
    let ten: Vec<_> = (0..10).map(|k| f(&format!("{k}.rs"), 80)).collect();
    assert_eq!(too_long(&ten).len(), 1);
    assert!(
        too_long(&ten)[0]
            .starts_with("10 functions of 80 lines or more, at most 9 allowed: 0.rs f (80)")
    );
}
