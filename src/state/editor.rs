//! The editor model: open tabs, the selection, the latest selection sent, unsaved documents
//! and @-mentions waiting for a client. One `Mutex` guards it; every change is written
//! atomically to `editor.json` in the state directory, so it survives a restart of `serve`.

use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::json::{self, obj};
use crate::lsp::text::Pos;
use crate::proc::lock;

#[derive(Clone)]
pub struct Tab {
    pub path: PathBuf,
    pub active: bool,
    pub preview: bool,
}

#[derive(Default)]
struct Model {
    tabs: Vec<Tab>,
    /// The current selection as a `selection_changed` payload.
    selection: Option<Value>,
    /// The last payload broadcast, for getLatestSelection.
    latest: Option<Value>,
    /// Unsaved content per file.
    documents: Documents,
    /// Mentions made while no client was connected: delivered on the next handshake.
    mentions: VecDeque<(Value, Instant)>,
    /// Why the last save failed, if it did: the model then holds what a restart loses.
    save_error: Option<String>,
}

/// Unsaved content per file, ordered by path as a map would be: a sorted `Vec`, where a
/// `BTreeMap` of its own key and value types cost kilobytes of code.
#[derive(Default)]
struct Documents(Vec<(PathBuf, String)>);

impl Documents {
    fn find(&self, path: &Path) -> Result<usize, usize> {
        self.0.binary_search_by(|(p, _)| p.as_path().cmp(path))
    }

    fn get(&self, path: &Path) -> Option<&String> {
        self.find(path).ok().map(|i| &self.0[i].1)
    }

    fn insert(&mut self, path: PathBuf, content: String) {
        match self.find(&path) {
            Ok(i) => self.0[i].1 = content,
            Err(i) => self.0.insert(i, (path, content)),
        }
    }

    fn remove(&mut self, path: &Path) {
        if let Ok(i) = self.find(path) {
            self.0.remove(i);
        }
    }
}

pub struct Editor {
    file: PathBuf,
    model: Mutex<Model>,
    /// Which attached editor session (`ccide lsp`) holds which file open: when a session ends,
    /// the files no other session holds are closed. Not saved: sessions end with the server.
    held: Mutex<Vec<(u64, PathBuf)>>,
    /// Held from a change of the selection until every client was told of it, and by a greeting
    /// while it reads the selection (see `select_and_tell`, `with_selection`).
    telling: Mutex<()>,
    pub mention_max_age: Duration,
}

/// A `selection_changed` payload.
pub fn selection_payload(path: &Path, start: Pos, end: Pos, text: &str) -> Value {
    obj! {
        "text": text,
        "filePath": json::path(path),
        "fileUrl": crate::files::file_url(path),
        "selection": obj! {"start": start.to_json(), "end": end.to_json(), "isEmpty": start == end},
    }
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
            held: Mutex::default(),
            telling: Mutex::default(),
            mention_max_age,
        }
    }

    /// Writes `editor.json` from memory (after the state directory was deleted).
    pub fn save_now(&self) {
        self.save(&mut lock(&self.model));
    }

    fn save(&self, m: &mut Model) {
        // Inserted one by one: collecting into a map would bring a sort of its own.
        let mut docs = serde_json::Map::new();
        for (k, v) in &m.documents.0 {
            docs.insert(k.to_string_lossy().into_owned(), v.as_str().into());
        }
        let v = obj! {
            "tabs": m.tabs.iter().map(|t| obj! {"path": json::path(&t.path), "active": t.active, "preview": t.preview}).collect::<Vec<_>>(),
            "selection": m.selection.clone(),
            "latest": m.latest.clone(),
            "documents": docs,
        };
        m.save_error = match crate::files::write_atomic(&self.file, v.to_string().as_bytes(), 0o600)
        {
            Ok(()) => None,
            Err(e) => {
                let e = format!(
                    "cannot save the editor state to {}: {e}",
                    self.file.display()
                );
                crate::log::error!("{e}");
                Some(e)
            }
        };
    }

    /// Records that editor session `session` holds `path` open (or no longer does).
    pub fn hold(&self, session: u64, path: &Path, on: bool) {
        let mut held = lock(&self.held);
        held.retain(|h| h.0 != session || h.1 != path);
        if on {
            held.push((session, path.to_path_buf()));
        }
    }

    /// Whether an editor session other than `session` holds `path` open.
    pub fn held_by_other(&self, session: u64, path: &Path) -> bool {
        lock(&self.held)
            .iter()
            .any(|h| h.0 != session && h.1 == path)
    }

    /// Forgets session `session` and returns the files it held that no other session holds.
    pub fn release(&self, session: u64) -> Vec<PathBuf> {
        let mut held = lock(&self.held);
        let mine: Vec<PathBuf> = held
            .iter()
            .filter(|h| h.0 == session)
            .map(|h| h.1.clone())
            .collect();
        held.retain(|h| h.0 != session);
        mine.into_iter()
            .filter(|p| !held.iter().any(|h| h.1 == *p))
            .collect()
    }

    /// Why the editor state could not be saved the last time, if it could not: a command
    /// whose change would be lost at the next restart says so.
    pub fn save_error(&self) -> Option<String> {
        lock(&self.model).save_error.clone()
    }

    fn change<T>(&self, f: impl FnOnce(&mut Model) -> T) -> T {
        let mut m = lock(&self.model);
        let r = f(&mut m);
        self.save(&mut m);
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

    /// Sets the selection (see `set_selection`), then runs `tell`, which sends it to the
    /// clients, before any greeting reads the selection: a greeting in between would carry the
    /// new selection and `tell` send it to that client again.
    pub fn select_and_tell<R>(&self, payload: Value, tell: impl FnOnce() -> R) -> R {
        let _telling = lock(&self.telling);
        self.set_selection(payload);
        tell()
    }

    /// Runs `f` with the current selection, never between a change and its telling (see
    /// `select_and_tell`).
    pub fn with_selection<R>(&self, f: impl FnOnce(Option<Value>) -> R) -> R {
        let _telling = lock(&self.telling);
        f(self.selection())
    }

    /// Sets the selection, opens and activates its tab, and records it as the latest sent.
    fn set_selection(&self, payload: Value) {
        self.change(|m| {
            if let Some(p) = payload["filePath"].as_str() {
                open_tab(m, Path::new(p), true, false);
            }
            m.selection = Some(payload.clone());
            m.latest = Some(payload);
        });
    }

    pub fn selection(&self) -> Option<Value> {
        lock(&self.model).selection.clone()
    }

    pub fn latest(&self) -> Option<Value> {
        lock(&self.model).latest.clone()
    }

    pub fn tabs(&self) -> Vec<Tab> {
        lock(&self.model).tabs.clone()
    }

    pub fn active(&self) -> Option<PathBuf> {
        lock(&self.model)
            .tabs
            .iter()
            .find(|t| t.active)
            .map(|t| t.path.clone())
    }

    pub fn document(&self, path: &Path) -> Option<String> {
        lock(&self.model).documents.get(path).cloned()
    }

    pub fn is_open(&self, path: &Path) -> bool {
        let m = lock(&self.model);
        m.tabs.iter().any(|t| t.path == path) || m.documents.find(path).is_ok()
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
        lock(&self.model)
            .documents
            .0
            .iter()
            .map(|(k, v)| (k.clone(), v.len()))
            .collect()
    }

    pub fn queue_mention(&self, payload: Value) {
        let mut m = lock(&self.model);
        m.mentions.push_back((payload, Instant::now()));
        while m.mentions.len() > 256 {
            m.mentions.pop_front();
        }
    }

    /// The queued mentions still young enough to deliver that `ours` takes, in order; the
    /// others young enough stay queued.
    pub fn take_mentions(&self, ours: impl Fn(&Value) -> bool) -> Vec<Value> {
        let mut m = lock(&self.model);
        let max = self.mention_max_age;
        let mut young = Vec::new();
        m.mentions.retain(|(v, at)| {
            let take = at.elapsed() <= max && ours(v);
            if take {
                young.push(v.clone());
            }
            !take && at.elapsed() <= max
        });
        young
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
    match line.char_indices().nth(p.character as usize) {
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

/// A range as people write it: 1-based lines and columns, the end column included.
#[derive(Default, Clone, Copy, PartialEq, Debug)]
pub struct HumanRange {
    pub start_line: Option<usize>,
    pub start_col: Option<usize>,
    pub end_line: Option<usize>,
    pub end_col: Option<usize>,
}

/// Builds the `selection_changed` payload for `ccide select` from the text the editor shows
/// (unsaved content, else the file); `stdin_text`, when given, replaces the selected text (an
/// editor piping its selection).
pub fn selection_for(
    content: &str,
    path: &Path,
    r: HumanRange,
    stdin_text: Option<String>,
) -> Result<Value, String> {
    let Some(sl) = r.start_line else {
        // A file alone: "this file is open", no text; the CLI shows "[⧉ In file]".
        let origin = Pos::default();
        return Ok(selection_payload(
            path,
            origin,
            origin,
            stdin_text.as_deref().unwrap_or(""),
        ));
    };
    if sl == 0 || r.end_line == Some(0) || r.start_col == Some(0) || r.end_col == Some(0) {
        return Err("lines and columns count from 1".into());
    }
    // An empty file shows one empty line, with the cursor at 1:1, as every editor does.
    let ls = if content.is_empty() {
        vec![""]
    } else {
        lines(content)
    };
    let line_len = |line: usize| -> Result<usize, String> {
        ls.get(line - 1).map(|l| l.chars().count()).ok_or_else(|| {
            format!(
                "line {line} is past the end of {} ({} lines)",
                path.display(),
                ls.len()
            )
        })
    };
    // (0-based line, characters): people count characters.
    let start = (sl - 1, r.start_col.map_or(0, |c| c - 1));
    let end = match (r.end_line, r.end_col) {
        // FILE:LINE:COL alone is a cursor.
        (None, None) if r.start_col.is_some() => start,
        // FILE:LINE selects the whole line.
        (None, None) => (sl - 1, line_len(sl)?),
        (el, ec) => {
            let el = el.unwrap_or(sl);
            let el_len = line_len(el)?;
            (el - 1, ec.unwrap_or(el_len))
        }
    };
    line_len(sl)?;
    if end < start {
        return Err("the selection ends before it starts".into());
    }
    for ((line, character), what) in [(start, "start"), (end, "end")] {
        let len = ls.get(line).map_or(0, |l| l.chars().count());
        if character > len {
            return Err(format!(
                "the {what} column {} is past the end of line {} ({len} characters)",
                character + usize::from(what == "start"),
                line + 1
            ));
        }
    }
    // Both are inside the file now, so they fit a `Pos`.
    let pos = |(line, character): (usize, usize)| Pos::new(line as u32, character as u32);
    let text = stdin_text.unwrap_or_else(|| text_between(content, pos(start), pos(end)));
    // The wire counts UTF-16 units, as VS Code does.
    let wire = |(line, character): (usize, usize)| {
        pos((
            line,
            utf16_len(ls.get(line).copied().unwrap_or(""), character),
        ))
    };
    Ok(selection_payload(path, wire(start), wire(end), &text))
}

/// How many UTF-16 code units the first `chars` characters of `line` take: a selection's
/// column as VS Code (and so the CLI) counts it. Only characters outside the Basic
/// Multilingual Plane (emoji) take two.
pub fn utf16_len(line: &str, chars: usize) -> usize {
    line.chars().take(chars).map(char::len_utf16).sum()
}

/// An `at_mentioned` payload; lines are 1-based here and 0-based on the wire.
pub fn mention_payload(
    path: &Path,
    start: Option<usize>,
    end: Option<usize>,
) -> Result<Value, String> {
    let mut v = obj! {"filePath": json::path(path)};
    if let Some(s) = start {
        let e = end.unwrap_or(s);
        if s == 0 || e < s {
            return Err(
                "mention lines count from 1 and the end may not come before the start".into(),
            );
        }
        v["lineStart"] = (s - 1).into();
        v["lineEnd"] = (e - 1).into();
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn p(line: u32, character: u32) -> Pos {
        Pos { line, character }
    }

    #[test]
    fn a_session_releases_only_the_files_no_other_session_holds() {
        let dir = std::env::temp_dir().join(format!("ccide-held-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let e = Editor::open(&dir, Duration::from_secs(30));
        let (a, b) = (Path::new("/w/a"), Path::new("/w/b"));
        e.hold(1, a, true);
        e.hold(1, b, true);
        e.hold(2, b, true);
        e.hold(1, a, false);
        e.hold(1, a, true);
        assert_eq!(e.release(1), vec![a.to_path_buf()]);
        assert_eq!(e.release(2), vec![b.to_path_buf()]);
        assert_eq!(e.release(2), Vec::<PathBuf>::new());
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn selections_count_utf16_units_on_the_wire() {
        let content = "a😀b é\nx\n";
        let r = HumanRange {
            start_line: Some(1),
            start_col: Some(3),
            end_line: Some(1),
            end_col: Some(5),
        };
        let v = selection_for(content, Path::new("/w/f"), r, None).unwrap();
        // Characters 3 to 5 ("b é") are UTF-16 units 3 to 6: the emoji takes two.
        assert_eq!(v["text"], "b é");
        assert_eq!(v["selection"]["start"], json!({"line": 0, "character": 3}));
        assert_eq!(v["selection"]["end"], json!({"line": 0, "character": 6}));
        assert_eq!(utf16_len("a😀b", 2), 3);
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
}
