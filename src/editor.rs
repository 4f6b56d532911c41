//! The editor model: open tabs, the selection, the latest selection sent, unsaved documents
//! and @-mentions waiting for a client. One `Mutex` guards it; every change is written
//! atomically to `editor.json` in the state directory, so it survives a restart of `serve`.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

#[derive(Clone)]
pub struct Tab {
    pub path: PathBuf,
    pub active: bool,
    pub preview: bool,
}

/// A position as the protocol counts it: 0-based line, 0-based character.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub struct Pos {
    pub line: usize,
    pub character: usize,
}

impl Pos {
    fn to_json(self) -> Value {
        json!({"line": self.line, "character": self.character})
    }
}

#[derive(Default)]
struct Model {
    tabs: Vec<Tab>,
    /// The current selection as a `selection_changed` payload.
    selection: Option<Value>,
    /// The last payload broadcast, for getLatestSelection.
    latest: Option<Value>,
    /// Unsaved content per file.
    documents: BTreeMap<PathBuf, String>,
    /// Mentions made while no client was connected: delivered on the next handshake.
    mentions: VecDeque<(Value, Instant)>,
}

pub struct Editor {
    file: PathBuf,
    model: Mutex<Model>,
    pub mention_max_age: Duration,
}

pub fn file_url(p: &Path) -> String {
    // The CLI compares raw `file://` + path, never percent-encoded (PROTOCOL 5).
    format!("file://{}", p.display())
}

/// A `selection_changed` payload.
pub fn selection_payload(path: &Path, start: Pos, end: Pos, text: &str) -> Value {
    json!({
        "text": text,
        "filePath": path,
        "fileUrl": file_url(path),
        "selection": {"start": start.to_json(), "end": end.to_json(), "isEmpty": start == end},
    })
}

impl Editor {
    /// Loads the model saved by a previous run, if any.
    pub fn open(state_dir: &Path, mention_max_age: Duration) -> Editor {
        let file = state_dir.join("editor.json");
        let mut m = Model::default();
        if let Some(v) = std::fs::read(&file)
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        {
            for t in v["tabs"].as_array().into_iter().flatten() {
                if let Some(p) = t["path"].as_str() {
                    m.tabs.push(Tab {
                        path: PathBuf::from(p),
                        active: t["active"] == true,
                        preview: t["preview"] == true,
                    });
                }
            }
            m.selection = v.get("selection").filter(|s| s.is_object()).cloned();
            m.latest = v.get("latest").filter(|s| s.is_object()).cloned();
            if let Some(docs) = v["documents"].as_object() {
                for (k, content) in docs {
                    if let Some(c) = content.as_str() {
                        m.documents.insert(PathBuf::from(k), c.to_string());
                    }
                }
            }
        }
        Editor {
            file,
            model: Mutex::new(m),
            mention_max_age,
        }
    }

    fn save(&self, m: &Model) {
        let docs: serde_json::Map<String, Value> = m
            .documents
            .iter()
            .map(|(k, v)| (k.to_string_lossy().into_owned(), Value::from(v.as_str())))
            .collect();
        let v = json!({
            "tabs": m.tabs.iter().map(|t| json!({"path": t.path, "active": t.active, "preview": t.preview})).collect::<Vec<_>>(),
            "selection": m.selection,
            "latest": m.latest,
            "documents": docs,
        });
        if let Err(e) = crate::files::write_atomic(&self.file, v.to_string().as_bytes(), 0o600) {
            crate::error!(
                "cannot save the editor state to {}: {e}",
                self.file.display()
            );
        }
    }

    fn change<T>(&self, f: impl FnOnce(&mut Model) -> T) -> T {
        let mut m = self.model.lock().unwrap();
        let r = f(&mut m);
        self.save(&m);
        r
    }

    /// Opens a tab (or finds it) and, with `activate`, makes it the only active one.
    pub fn open_tab(&self, path: &Path, activate: bool, preview: bool) {
        self.change(|m| open_tab(m, path, activate, preview));
    }

    /// Closes tabs; unsaved content is kept unless `discard`. Returns whether a tab was found.
    pub fn close_tab(&self, path: &Path, discard: bool) -> bool {
        self.change(|m| {
            let before = m.tabs.len();
            let was_active = m.tabs.iter().any(|t| t.path == path && t.active);
            m.tabs.retain(|t| t.path != path);
            if was_active && let Some(last) = m.tabs.last_mut() {
                last.active = true;
            }
            if discard {
                m.documents.remove(path);
            }
            if m.selection
                .as_ref()
                .is_some_and(|s| s["filePath"] == path.to_string_lossy().as_ref())
            {
                m.selection = None;
            }
            before != m.tabs.len()
        })
    }

    /// Sets the selection, opens and activates its tab, and records it as the latest sent.
    pub fn set_selection(&self, payload: Value) {
        self.change(|m| {
            if let Some(p) = payload["filePath"].as_str() {
                open_tab(m, Path::new(p), true, false);
            }
            m.selection = Some(payload.clone());
            m.latest = Some(payload);
        });
    }

    pub fn selection(&self) -> Option<Value> {
        self.model.lock().unwrap().selection.clone()
    }

    pub fn latest(&self) -> Option<Value> {
        self.model.lock().unwrap().latest.clone()
    }

    pub fn tabs(&self) -> Vec<Tab> {
        self.model.lock().unwrap().tabs.clone()
    }

    pub fn active(&self) -> Option<PathBuf> {
        self.model
            .lock()
            .unwrap()
            .tabs
            .iter()
            .find(|t| t.active)
            .map(|t| t.path.clone())
    }

    pub fn document(&self, path: &Path) -> Option<String> {
        self.model.lock().unwrap().documents.get(path).cloned()
    }

    pub fn is_open(&self, path: &Path) -> bool {
        let m = self.model.lock().unwrap();
        m.tabs.iter().any(|t| t.path == path) || m.documents.contains_key(path)
    }

    pub fn set_document(&self, path: &Path, content: Option<String>) {
        self.change(|m| match content {
            Some(c) => {
                open_tab(m, path, false, false);
                m.documents.insert(path.to_path_buf(), c);
            }
            None => {
                m.documents.remove(path);
            }
        });
    }

    /// Unsaved documents (path, size in bytes), for status.
    pub fn documents(&self) -> Vec<(PathBuf, usize)> {
        self.model
            .lock()
            .unwrap()
            .documents
            .iter()
            .map(|(k, v)| (k.clone(), v.len()))
            .collect()
    }

    pub fn queue_mention(&self, payload: Value) {
        let mut m = self.model.lock().unwrap();
        m.mentions.push_back((payload, Instant::now()));
        while m.mentions.len() > 256 {
            m.mentions.pop_front();
        }
    }

    /// The queued mentions still young enough to deliver, in order; the queue is emptied.
    pub fn take_mentions(&self) -> Vec<Value> {
        let mut m = self.model.lock().unwrap();
        let max = self.mention_max_age;
        m.mentions
            .drain(..)
            .filter(|(_, at)| at.elapsed() <= max)
            .map(|(v, _)| v)
            .collect()
    }
}

fn open_tab(m: &mut Model, path: &Path, activate: bool, preview: bool) {
    if activate {
        for t in &mut m.tabs {
            t.active = false;
        }
    }
    if let Some(t) = m.tabs.iter_mut().find(|t| t.path == path) {
        t.active |= activate;
        t.preview &= preview;
        return;
    }
    // A new preview tab replaces the previous preview tab, as editors do.
    if preview {
        m.tabs.retain(|t| !t.preview);
    }
    let first = m.tabs.is_empty();
    m.tabs.push(Tab {
        path: path.to_path_buf(),
        active: activate || first,
        preview,
    });
}

/// The text between two positions (0-based lines, characters counted as Unicode scalars;
/// `end` exclusive). Lines keep their terminators inside the range.
pub fn text_between(content: &str, start: Pos, end: Pos) -> String {
    let a = offset(content, start);
    let b = offset(content, end);
    content.get(a..b.max(a)).unwrap_or("").to_string()
}

/// Byte offset of a position, clamped to the line's end.
fn offset(content: &str, p: Pos) -> usize {
    let mut line_start = 0;
    for _ in 0..p.line {
        match content[line_start..].find('\n') {
            Some(i) => line_start += i + 1,
            None => return content.len(),
        }
    }
    let line_end = content[line_start..]
        .find('\n')
        .map_or(content.len(), |i| line_start + i);
    let line = &content[line_start..line_end];
    let line = line.strip_suffix('\r').unwrap_or(line);
    match line.char_indices().nth(p.character) {
        Some((i, _)) => line_start + i,
        None => line_start + line.len(),
    }
}

/// The lines of a file without terminators (a final newline ends the last line, it does not
/// start another).
pub fn lines(content: &str) -> Vec<&str> {
    let body = content.strip_suffix('\n').unwrap_or(content);
    if content.is_empty() {
        return Vec::new();
    }
    body.split('\n')
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .collect()
}

/// languageId from the file name, as VS Code names languages; `plaintext` otherwise.
pub fn language_id(path: &Path) -> &'static str {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    match name.as_str() {
        "dockerfile" => return "dockerfile",
        "makefile" | "gnumakefile" => return "makefile",
        "cmakelists.txt" => return "cmake",
        _ => {}
    }
    let ext = name.rsplit_once('.').map(|(_, e)| e).unwrap_or("");
    match ext {
        "rs" => "rust",
        "py" | "pyi" => "python",
        "js" | "mjs" | "cjs" => "javascript",
        "jsx" => "javascriptreact",
        "ts" | "mts" | "cts" => "typescript",
        "tsx" => "typescriptreact",
        "go" => "go",
        "c" | "h" => "c",
        "cc" | "cpp" | "cxx" | "hpp" | "hh" | "hxx" => "cpp",
        "java" => "java",
        "kt" | "kts" => "kotlin",
        "swift" => "swift",
        "rb" => "ruby",
        "php" => "php",
        "cs" => "csharp",
        "sh" | "bash" | "zsh" => "shellscript",
        "json" => "json",
        "jsonc" => "jsonc",
        "yaml" | "yml" => "yaml",
        "toml" => "toml",
        "md" | "markdown" => "markdown",
        "html" | "htm" => "html",
        "css" => "css",
        "scss" => "scss",
        "sql" => "sql",
        "lua" => "lua",
        "xml" => "xml",
        "vue" => "vue",
        "svelte" => "svelte",
        "scala" => "scala",
        "hs" => "haskell",
        "ex" | "exs" => "elixir",
        "erl" => "erlang",
        "zig" => "zig",
        "dart" => "dart",
        "r" => "r",
        "pl" | "pm" => "perl",
        "tex" => "latex",
        "ini" | "cfg" => "ini",
        _ => "plaintext",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(line: usize, character: usize) -> Pos {
        Pos { line, character }
    }

    #[test]
    fn text_between_counts_characters_and_keeps_terminators() {
        let s = "héllo wörld\r\nsecond line\nlast";
        assert_eq!(text_between(s, p(0, 1), p(0, 5)), "éllo");
        assert_eq!(text_between(s, p(0, 6), p(1, 6)), "wörld\r\nsecond");
        assert_eq!(text_between(s, p(2, 0), p(2, 99)), "last");
        assert_eq!(lines(s), vec!["héllo wörld", "second line", "last"]);
        assert_eq!(lines("a\n"), vec!["a"]);
        assert!(lines("").is_empty());
    }

    #[test]
    fn languages_by_name() {
        assert_eq!(language_id(Path::new("/a/b.rs")), "rust");
        assert_eq!(language_id(Path::new("/a/Dockerfile")), "dockerfile");
        assert_eq!(language_id(Path::new("/a/notes")), "plaintext");
    }
}
