//! Editor tools over the editor model (ccide-protocol(7) §6 and §7): opening files, the open
//! tabs, the selection, unsaved documents.

use std::path::Path;
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::files::file_url;
use crate::files::language_id;
use crate::json::{self, obj};
use crate::lsp::text::Pos;
use crate::rpc::RpcError;
use crate::rpc::call::{Call, Reply, arg_bool, arg_str, tool_error, tool_json, tool_texts};
use crate::state::State;
use crate::state::editor::selection_payload;

macro_rules! tri {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => return Reply::Now(Err(e)),
        }
    };
}

fn done(v: Value) -> Reply {
    Reply::Now(Ok(v))
}

fn editor_json(state: &State, path: &Path) -> Value {
    let dirty = state.editor.document(path).is_some();
    let line_count = state.line_count(path);
    obj! {
        "success": true, "filePath": json::path(path), "fileUrl": file_url(path),
        "languageId": language_id(path), "lineCount": line_count,
        "isDirty": dirty, "isUntitled": false,
    }
}

pub fn open_file(state: &Arc<State>, _call: &Call, args: &Map<String, Value>) -> Reply {
    let raw = tri!(arg_str(args, "filePath", true)).unwrap_or_default();
    let preview = tri!(arg_bool(args, "preview", false));
    let frontmost = tri!(arg_bool(args, "makeFrontmost", true));
    let to_eol = tri!(arg_bool(args, "selectToEndOfLine", false));
    let start_text = tri!(arg_str(args, "startText", false)).filter(|s| !s.is_empty());
    let end_text = tri!(arg_str(args, "endText", false)).filter(|s| !s.is_empty());
    let path = match state.resolve(&raw) {
        Ok(p) => p,
        Err(e) => return done(tool_error(&e)),
    };
    // Only a search needs the text; otherwise a file (a 2 GB log too) opens unread.
    let text = match &start_text {
        Some(_) => state.current_text(&path, crate::state::MAX_SEARCH),
        None => state.check_openable(&path).map(|()| String::new()),
    };
    let text = match text {
        Ok(t) => t,
        Err(e) => return done(tool_error(&e)),
    };
    state.editor.open_tab(&path, true, preview);
    let mut note = String::new();
    if let Some(st) = start_text {
        match text.find(&st) {
            None => note = format!(" (start text not found: {st:?})"),
            Some(a) => {
                let mut b = a + st.len();
                if let Some(et) = &end_text {
                    match text[b..].find(et.as_str()) {
                        Some(i) => b = b + i + et.len(),
                        None => note = format!(" (end text not found: {et:?})"),
                    }
                }
                if to_eol {
                    b = text[b..].find('\n').map_or(text.len(), |i| b + i);
                    if text[..b].ends_with('\r') {
                        b -= 1;
                    }
                }
                let start = pos_of(&text, a);
                let end = pos_of(&text, b);
                let payload = selection_payload(&path, start, end, &text[a..b]);
                if let Err(e) = state.select(payload, None) {
                    note = format!(" (not selected: {e})");
                }
                if note.is_empty() {
                    note = format!(" and selected lines {}-{}", start.line + 1, end.line + 1);
                }
            }
        }
    }
    if frontmost {
        done(tool_texts(&[&format!(
            "Opened file: {}{note}",
            path.display()
        )]))
    } else {
        done(tool_json(&editor_json(state, &path)))
    }
}

/// The wire position (0-based line, UTF-16 units, as VS Code counts) of a byte offset.
fn pos_of(text: &str, byte: usize) -> Pos {
    let before = &text[..byte];
    let line = before.matches('\n').count();
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    Pos::new(
        line as u32,
        before[line_start..].encode_utf16().count() as u32,
    )
}

pub fn open_files(state: &Arc<State>, _call: &Call, args: &Map<String, Value>) -> Reply {
    let Some(list) = args.get("file_paths").and_then(Value::as_array) else {
        return Reply::Now(Err(RpcError::invalid_params(
            "argument \"file_paths\" must be an array of strings",
        )));
    };
    let mut opened = Vec::new();
    let mut errors = Vec::new();
    for raw in list {
        let Some(raw) = raw.as_str() else {
            return Reply::Now(Err(RpcError::invalid_params(
                "argument \"file_paths\" must be an array of strings",
            )));
        };
        match state.resolve(raw) {
            Ok(p) if p.is_file() => {
                state.editor.open_tab(&p, false, false);
                opened.push(Value::from(p.to_string_lossy().into_owned()));
            }
            Ok(p) => errors.push(format!("File not found: {}", p.display())),
            Err(e) => errors.push(e),
        }
    }
    let mut v = obj! {"opened_files": opened};
    if !errors.is_empty() {
        v["errors"] = errors.into();
    }
    done(tool_json(&v))
}

pub fn get_open_editors(state: &Arc<State>, _call: &Call, _: &Map<String, Value>) -> Reply {
    let tabs: Vec<Value> = state
        .editor
        .tabs()
        .iter()
        .map(|t| {
            // 0 for a file swapped for a symlink since it was opened (`State::line_count`
            // reads through the confinement rule).
            let line_count = state.line_count(&t.path);
            obj! {
                "uri": file_url(&t.path), "isActive": t.active,
                "label": t.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
                "languageId": language_id(&t.path),
                "isDirty": state.editor.document(&t.path).is_some(),
                "fileName": json::path(&t.path), "lineCount": line_count,
                "isUntitled": false, "isPinned": false, "isPreview": t.preview,
                "groupIndex": 0, "viewColumn": 1, "isGroupActive": true,
            }
        })
        .collect();
    done(tool_json(&obj! {"tabs": tabs}))
}

pub fn get_all_opened_file_paths(
    state: &Arc<State>,
    _call: &Call,
    _: &Map<String, Value>,
) -> Reply {
    let paths: Vec<String> = state
        .editor
        .tabs()
        .iter()
        .map(|t| t.path.to_string_lossy().into_owned())
        .collect();
    done(tool_texts(&[&paths.join("\n")]))
}

pub fn get_current_selection(state: &Arc<State>, _call: &Call, _: &Map<String, Value>) -> Reply {
    let Some(active) = state.editor.active() else {
        return done(tool_json(
            &obj! {"success": false, "message": "No active editor found"},
        ));
    };
    let mut v = match state.editor.selection() {
        Some(s) if s["filePath"] == active.to_string_lossy().as_ref() => s,
        _ => {
            let origin = Pos::default();
            selection_payload(&active, origin, origin, "")
        }
    };
    v["success"] = true.into();
    done(tool_json(&v))
}

pub fn get_latest_selection(state: &Arc<State>, _call: &Call, _: &Map<String, Value>) -> Reply {
    match state.editor.latest() {
        Some(mut v) => {
            v["success"] = true.into();
            done(tool_json(&v))
        }
        None => done(tool_json(
            &obj! {"success": false, "message": "No selection available"},
        )),
    }
}

pub fn check_document_dirty(state: &Arc<State>, _call: &Call, args: &Map<String, Value>) -> Reply {
    let raw = tri!(arg_str(args, "filePath", true)).unwrap_or_default();
    let path = match state.resolve(&raw) {
        Ok(p) => p,
        Err(e) => return done(tool_json(&obj! {"success": false, "message": e})),
    };
    if !state.editor.is_open(&path) {
        return done(tool_json(
            &obj! {"success": false, "message": format!("Document not open: {}", path.display())},
        ));
    }
    let dirty = state.editor.document(&path).is_some();
    done(tool_json(
        &obj! {"success": true, "filePath": json::path(&path), "isDirty": dirty, "isUntitled": false},
    ))
}

pub fn save_document(state: &Arc<State>, _call: &Call, args: &Map<String, Value>) -> Reply {
    let raw = tri!(arg_str(args, "filePath", true)).unwrap_or_default();
    done(tool_json(&save(state, &raw)))
}

/// Writes a document's unsaved content to disk (atomically, keeping the file's mode).
fn save(state: &State, raw: &str) -> Value {
    let path = match state.resolve(raw) {
        Ok(p) => p,
        Err(e) => return obj! {"success": false, "message": e},
    };
    if !state.editor.is_open(&path) {
        return obj! {"success": false, "message": format!("Document not open: {}", path.display())};
    }
    let Some(content) = state.editor.document(&path) else {
        return obj! {"success": true, "filePath": json::path(&path), "saved": false, "message": "Document has no unsaved changes"};
    };
    match state.write_file(&path, content.as_bytes()) {
        Ok(()) => {
            state.editor.set_document(&path, None);
            obj! {"success": true, "filePath": json::path(&path), "saved": true, "message": "Document saved successfully"}
        }
        Err(e) => obj! {"success": false, "filePath": json::path(&path), "saved": false,
        "message": format!("cannot save {}: {e}; the previous content is intact", path.display())},
    }
}
