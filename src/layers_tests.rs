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
        &["registry|finality", "supervisor", "server", "mod"],
    ),
    ("diagnostics", &["parse", "lsp", "checkers", "mod"]),
    ("state", &["events", "editor|diffs|exec", "mod"]),
    (
        "tools",
        &["editor|workspace|diffs|diagnostics|exec|format", "mod"],
    ),
    (
        "control",
        &[
            "protocol",
            "editors",
            "handler|client|lsp_front",
            "server",
            "mod",
        ],
    ),
    (
        "commands",
        &["serve|unit|bridge|plugin", "client", "lsp", "mod"],
    ),
    (
        "commands::lsp",
        &["quirks|docs|proposals|link", "dialogue", "mod"],
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

/// The arrows that run up: (file, what it imports, why). `files` are (path relative to
/// `src`, text); files named `*tests.rs` are test code and not read.
fn upward(files: &[(String, String)]) -> Vec<String> {
    let mut modules: BTreeMap<Vec<String>, (String, Place)> = BTreeMap::new();
    for (rel, _) in files {
        let (m, p) = place_of(rel);
        modules.insert(m, (rel.clone(), p));
    }
    let mut bad = Vec::new();
    for (rel, text) in files {
        if rel.ends_with("tests.rs") {
            continue;
        }
        let (module, from) = place_of(rel);
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
            let target = (0..=abs.len())
                .rev()
                .find_map(|n| modules.get(&abs[..n]))
                .map(|(f, p)| (f.clone(), p.clone()));
            let Some((file, to)) = target else { continue };
            if &file == rel {
                continue;
            }
            if let Err(why) = runs_down(&from, &to) {
                bad.push(format!("{rel} imports {} ({file}): {why}", abs.join("::")));
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
