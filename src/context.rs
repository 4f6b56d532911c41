//! Editor and workspace tools over the editor model (PROTOCOL 6 and 7), and the selection and
//! mention logic shared by the tools and the `select`/`mention` commands.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::editor::{self, Pos, file_url, language_id, selection_payload};
use crate::jsonrpc::{ErrorCode, RpcError};
use crate::serve::App;
use crate::server::{Call, Reply};
use crate::tools::{arg_str, tool_error, tool_json, tool_texts};

/// readFile refuses files above this size.
pub const MAX_READ: u64 = 16 << 20;
/// listFiles stops after this many paths and says so.
pub const MAX_LIST: usize = 10_000;

/// A range as people write it: 1-based lines and columns, the end column included.
#[derive(Default, Clone, Copy)]
pub struct HumanRange {
    pub start_line: Option<usize>,
    pub start_col: Option<usize>,
    pub end_line: Option<usize>,
    pub end_col: Option<usize>,
}

/// Builds the `selection_changed` payload for `ccide select`. Positions come from the text
/// the editor shows (unsaved content, else the file); `stdin_text`, when given, replaces the
/// selected text (an editor piping its selection).
pub fn selection_for(
    app: &App,
    path: &Path,
    r: HumanRange,
    stdin_text: Option<String>,
) -> Result<Value, String> {
    let Some(sl) = r.start_line else {
        // A file alone: "this file is open", no text; the CLI shows "[⧉ In file]".
        let origin = Pos {
            line: 0,
            character: 0,
        };
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
    let content = current_text(app, path)?;
    let ls = editor::lines(&content);
    let line_len = |line: usize| -> Result<usize, String> {
        ls.get(line - 1).map(|l| l.chars().count()).ok_or_else(|| {
            format!(
                "line {line} is past the end of {} ({} lines)",
                path.display(),
                ls.len()
            )
        })
    };
    let start = Pos {
        line: sl - 1,
        character: r.start_col.map_or(0, |c| c - 1),
    };
    let end = match (r.end_line, r.end_col) {
        // FILE:LINE:COL alone is a cursor.
        (None, None) if r.start_col.is_some() => start,
        // FILE:LINE selects the whole line.
        (None, None) => Pos {
            line: sl - 1,
            character: line_len(sl)?,
        },
        (el, ec) => {
            let el = el.unwrap_or(sl);
            let el_len = line_len(el)?;
            Pos {
                line: el - 1,
                character: ec.unwrap_or(el_len),
            }
        }
    };
    line_len(sl)?;
    if (end.line, end.character) < (start.line, start.character) {
        return Err("the selection ends before it starts".into());
    }
    for (pos, what) in [(start, "start"), (end, "end")] {
        let len = ls.get(pos.line).map_or(0, |l| l.chars().count());
        if pos.character > len {
            return Err(format!(
                "the {what} column {} is past the end of line {} ({len} characters)",
                pos.character + usize::from(what == "start"),
                pos.line + 1
            ));
        }
    }
    let text = stdin_text.unwrap_or_else(|| editor::text_between(&content, start, end));
    Ok(selection_payload(path, start, end, &text))
}

/// An `at_mentioned` payload; lines are 1-based here and 0-based on the wire.
pub fn mention_payload(
    path: &Path,
    start: Option<usize>,
    end: Option<usize>,
) -> Result<Value, String> {
    let mut v = json!({"filePath": path});
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

/// Sets the selection and tells every client.
pub fn select(app: &App, payload: Value) -> usize {
    app.editor.set_selection(payload.clone());
    app.server.broadcast("selection_changed", payload)
}

/// Broadcasts a mention, or queues it for the next client when none is connected.
pub fn mention(app: &App, payload: Value) -> usize {
    let n = app.server.broadcast("at_mentioned", payload.clone());
    if n == 0 {
        app.editor.queue_mention(payload);
    }
    n
}

fn read_text(path: &Path) -> Result<String, String> {
    let meta = std::fs::metadata(path).map_err(|e| not_found_or(path, e))?;
    if meta.is_dir() {
        return Err(format!("{} is a directory", path.display()));
    }
    // A FIFO or device would block the connection forever.
    if !meta.is_file() {
        return Err(format!("{} is not a regular file", path.display()));
    }
    if meta.len() > MAX_READ {
        return Err(format!(
            "{} is {} bytes, above the {} MiB limit for reading",
            path.display(),
            meta.len(),
            MAX_READ >> 20
        ));
    }
    let bytes = std::fs::read(path).map_err(|e| not_found_or(path, e))?;
    String::from_utf8(bytes).map_err(|_| format!("{} is not UTF-8 text", path.display()))
}

fn not_found_or(path: &Path, e: std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::NotFound {
        format!("File not found: {}", path.display())
    } else {
        format!("cannot read {}: {e}", path.display())
    }
}

/// The text a file shows in the editor: its unsaved content, else what is on disk.
pub fn current_text(app: &App, path: &Path) -> Result<String, String> {
    match app.editor.document(path) {
        Some(d) => Ok(d),
        None => read_text(path),
    }
}

fn arg_bool(args: &Map<String, Value>, name: &str, default: bool) -> Result<bool, RpcError> {
    match args.get(name) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(RpcError::invalid_params(format!(
            "argument \"{name}\" must be a boolean"
        ))),
    }
}

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

fn editor_json(app: &App, path: &Path) -> Value {
    let dirty = app.editor.document(path).is_some();
    let line_count = current_text(app, path).map_or(0, |t| editor::lines(&t).len());
    json!({
        "success": true, "filePath": path, "fileUrl": file_url(path),
        "languageId": language_id(path), "lineCount": line_count,
        "isDirty": dirty, "isUntitled": false,
    })
}

pub fn open_file(call: &Call, args: &Map<String, Value>) -> Reply {
    let app = call.app;
    let raw = tri!(arg_str(args, "filePath", true)).unwrap_or_default();
    let preview = tri!(arg_bool(args, "preview", false));
    let frontmost = tri!(arg_bool(args, "makeFrontmost", true));
    let to_eol = tri!(arg_bool(args, "selectToEndOfLine", false));
    let start_text = tri!(arg_str(args, "startText", false)).filter(|s| !s.is_empty());
    let end_text = tri!(arg_str(args, "endText", false)).filter(|s| !s.is_empty());
    let path = match app.resolve(&raw) {
        Ok(p) => p,
        Err(e) => return done(tool_error(&e)),
    };
    let text = match current_text(app, &path) {
        Ok(t) => t,
        Err(e) => return done(tool_error(&e)),
    };
    app.editor.open_tab(&path, true, preview);
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
                select(app, payload);
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
        done(tool_json(&editor_json(app, &path)))
    }
}

fn pos_of(text: &str, byte: usize) -> Pos {
    let before = &text[..byte];
    let line = before.matches('\n').count();
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    Pos {
        line,
        character: before[line_start..].chars().count(),
    }
}

pub fn open_files(call: &Call, args: &Map<String, Value>) -> Reply {
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
        match call.app.resolve(raw) {
            Ok(p) if p.is_file() => {
                call.app.editor.open_tab(&p, false, false);
                opened.push(Value::from(p.to_string_lossy().into_owned()));
            }
            Ok(p) => errors.push(format!("File not found: {}", p.display())),
            Err(e) => errors.push(e),
        }
    }
    let mut v = json!({"opened_files": opened});
    if !errors.is_empty() {
        v["errors"] = errors.into();
    }
    done(tool_json(&v))
}

pub fn get_open_editors(call: &Call, _: &Map<String, Value>) -> Reply {
    let app = call.app;
    let tabs: Vec<Value> = app
        .editor
        .tabs()
        .iter()
        .map(|t| {
            // The tab's file may have been swapped for a symlink since it was opened.
            let text = match app.resolve(&t.path.to_string_lossy()) {
                Ok(p) if p == t.path => current_text(app, &p).unwrap_or_default(),
                _ => String::new(),
            };
            json!({
                "uri": file_url(&t.path), "isActive": t.active,
                "label": t.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
                "languageId": language_id(&t.path),
                "isDirty": app.editor.document(&t.path).is_some(),
                "fileName": t.path, "lineCount": editor::lines(&text).len(),
                "isUntitled": false, "isPinned": false, "isPreview": t.preview,
                "groupIndex": 0, "viewColumn": 1, "isGroupActive": true,
            })
        })
        .collect();
    done(tool_json(&json!({"tabs": tabs})))
}

pub fn get_all_opened_file_paths(call: &Call, _: &Map<String, Value>) -> Reply {
    let paths: Vec<String> = call
        .app
        .editor
        .tabs()
        .iter()
        .map(|t| t.path.to_string_lossy().into_owned())
        .collect();
    done(tool_texts(&[&paths.join("\n")]))
}

pub fn workspace_folders_json(app: &App) -> Value {
    let ws = app.workspaces.read().unwrap().clone();
    let folders: Vec<Value> = ws
        .iter()
        .enumerate()
        .map(|(i, w)| {
            json!({
                "name": w.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "/".into()),
                "uri": file_url(w), "path": w, "index": i,
            })
        })
        .collect();
    json!({"success": true, "folders": folders, "rootPath": ws.first()})
}

pub fn get_workspace_folders(call: &Call, _: &Map<String, Value>) -> Reply {
    done(tool_json(&workspace_folders_json(call.app)))
}

pub fn get_current_selection(call: &Call, _: &Map<String, Value>) -> Reply {
    let app = call.app;
    let Some(active) = app.editor.active() else {
        return done(tool_json(
            &json!({"success": false, "message": "No active editor found"}),
        ));
    };
    let mut v = match app.editor.selection() {
        Some(s) if s["filePath"] == active.to_string_lossy().as_ref() => s,
        _ => {
            let origin = Pos {
                line: 0,
                character: 0,
            };
            selection_payload(&active, origin, origin, "")
        }
    };
    v["success"] = true.into();
    done(tool_json(&v))
}

pub fn get_latest_selection(call: &Call, _: &Map<String, Value>) -> Reply {
    match call.app.editor.latest() {
        Some(mut v) => {
            v["success"] = true.into();
            done(tool_json(&v))
        }
        None => done(tool_json(
            &json!({"success": false, "message": "No selection available"}),
        )),
    }
}

pub fn check_document_dirty(call: &Call, args: &Map<String, Value>) -> Reply {
    let raw = tri!(arg_str(args, "filePath", true)).unwrap_or_default();
    let path = match call.app.resolve(&raw) {
        Ok(p) => p,
        Err(e) => return done(tool_json(&json!({"success": false, "message": e}))),
    };
    if !call.app.editor.is_open(&path) {
        return done(tool_json(
            &json!({"success": false, "message": format!("Document not open: {}", path.display())}),
        ));
    }
    let dirty = call.app.editor.document(&path).is_some();
    done(tool_json(
        &json!({"success": true, "filePath": path, "isDirty": dirty, "isUntitled": false}),
    ))
}

pub fn save_document(call: &Call, args: &Map<String, Value>) -> Reply {
    let raw = tri!(arg_str(args, "filePath", true)).unwrap_or_default();
    done(tool_json(&save(call.app, &raw)))
}

/// Writes a document's unsaved content to disk (atomically, keeping the file's mode).
pub fn save(app: &App, raw: &str) -> Value {
    let path = match app.resolve(raw) {
        Ok(p) => p,
        Err(e) => return json!({"success": false, "message": e}),
    };
    if !app.editor.is_open(&path) {
        return json!({"success": false, "message": format!("Document not open: {}", path.display())});
    }
    let Some(content) = app.editor.document(&path) else {
        return json!({"success": true, "filePath": path, "saved": false, "message": "Document has no unsaved changes"});
    };
    let ws = app.workspaces.read().unwrap().clone();
    match crate::files::write_in_workspace(&path, &ws, content.as_bytes(), 0o644) {
        Ok(()) => {
            app.editor.set_document(&path, None);
            json!({"success": true, "filePath": path, "saved": true, "message": "Document saved successfully"})
        }
        Err(e) => json!({"success": false, "filePath": path, "saved": false,
            "message": format!("cannot save {}: {e}; the previous content is intact", path.display())}),
    }
}

// Seed 002's workspace-relative methods: served as tools (text results) and as direct
// JSON-RPC methods (raw results, JSON-RPC errors).

fn rel_path(app: &App, args: &Map<String, Value>, name: &str) -> Result<PathBuf, RpcError> {
    let raw = arg_str(args, name, true)?.unwrap_or_default();
    app.resolve(raw.trim_start_matches('/'))
        .map_err(|e| RpcError::new(ErrorCode::InternalError, e))
}

fn read_file(app: &App, args: &Map<String, Value>) -> Result<Value, RpcError> {
    let path = rel_path(app, args, "path")?;
    read_text(&path).map(Value::from).map_err(|e| {
        RpcError::new(
            ErrorCode::InternalError,
            format!("failed to read file: {e}"),
        )
    })
}

fn write_file(app: &App, args: &Map<String, Value>) -> Result<Value, RpcError> {
    let path = rel_path(app, args, "path")?;
    let content = arg_str(args, "content", true)?.unwrap_or_default();
    if let Some(dir) = path.parent()
        && !dir.is_dir()
    {
        return Err(RpcError::new(
            ErrorCode::InternalError,
            format!(
                "failed to write file: directory {} does not exist",
                dir.display()
            ),
        ));
    }
    let ws = app.workspaces.read().unwrap().clone();
    crate::files::write_in_workspace(&path, &ws, content.as_bytes(), 0o644).map_err(|e| {
        RpcError::new(
            ErrorCode::InternalError,
            format!("failed to write file {}: {e}", path.display()),
        )
    })?;
    Ok(json!({"success": true, "path": path, "bytes": content.len()}))
}

/// Workspace-relative paths of the files under the workspace folders, `.git` skipped.
pub fn walk(app: &App, pattern: Option<&str>, limit: usize) -> (Vec<String>, bool) {
    let roots = app.workspaces.read().unwrap().clone();
    let mut out = Vec::new();
    for root in &roots {
        let mut stack = vec![root.clone()];
        while let Some(dir) = stack.pop() {
            let Ok(rd) = std::fs::read_dir(&dir) else {
                continue;
            };
            let mut entries: Vec<_> = rd.flatten().collect();
            entries.sort_by_key(|e| e.file_name());
            for e in entries.into_iter().rev() {
                let name = e.file_name();
                if name == ".git" {
                    continue;
                }
                let Ok(ft) = e.file_type() else { continue };
                let p = e.path();
                // Symlinks are not followed: they could lead out of the workspace.
                if ft.is_dir() {
                    stack.push(p);
                } else if ft.is_file() {
                    let rel = p
                        .strip_prefix(root)
                        .unwrap_or(&p)
                        .to_string_lossy()
                        .into_owned();
                    if pattern.is_none_or(|pat| crate::pattern::glob_match(pat, &rel)) {
                        if out.len() >= limit {
                            return (out, true);
                        }
                        out.push(rel);
                    }
                }
            }
        }
    }
    out.sort();
    (out, false)
}

fn list_files(app: &App, args: &Map<String, Value>) -> Result<Value, RpcError> {
    let pattern = arg_str(args, "pattern", false)?;
    let (files, truncated) = walk(app, pattern.as_deref(), MAX_LIST);
    let mut v = json!({"files": files, "truncated": truncated});
    if truncated {
        v["message"] = format!("stopped after {MAX_LIST} files; narrow the pattern").into();
    }
    Ok(v)
}

fn workspace_info(app: &App, _: &Map<String, Value>) -> Result<Value, RpcError> {
    let root = app.workspaces.read().unwrap()[0].clone();
    let (files, truncated) = walk(app, None, 100_000);
    Ok(json!({
        "name": root.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        "path": root, "fileCount": files.len(), "fileCountTruncated": truncated, "type": "folder",
    }))
}

fn rel_of(app: &App, p: &Path) -> String {
    let ws = app.workspaces.read().unwrap();
    ws.iter().find_map(|w| p.strip_prefix(w).ok()).map_or_else(
        || p.to_string_lossy().into_owned(),
        |r| r.to_string_lossy().into_owned(),
    )
}

fn open_files_list(app: &App, _: &Map<String, Value>) -> Result<Value, RpcError> {
    Ok(Value::Array(
        app.editor
            .tabs()
            .iter()
            .map(|t| json!({"path": rel_of(app, &t.path), "absolutePath": t.path, "isActive": t.active}))
            .collect(),
    ))
}

fn current_file(app: &App, _: &Map<String, Value>) -> Result<Value, RpcError> {
    Ok(match app.editor.active() {
        Some(p) => json!({"path": rel_of(app, &p), "absolutePath": p}),
        None => Value::Null,
    })
}

type Direct = fn(&App, &Map<String, Value>) -> Result<Value, RpcError>;

/// Seed 002's methods by name.
pub fn seed_method(name: &str) -> Option<Direct> {
    Some(match name {
        "readFile" => read_file,
        "writeFile" => write_file,
        "listFiles" => list_files,
        "getWorkspaceInfo" => workspace_info,
        "getOpenFiles" => open_files_list,
        "getCurrentFile" => current_file,
        _ => return None,
    })
}

/// The same methods as tools: the raw result as text, a failure as an isError result.
pub fn seed_tool(call: &Call, name: &str, args: &Map<String, Value>) -> Reply {
    let f = seed_method(name).expect("registered seed tool");
    match f(call.app, args) {
        Ok(Value::String(s)) => done(tool_texts(&[&s])),
        Ok(v) => done(tool_json(&v)),
        Err(e) if e.code == ErrorCode::InvalidParams => Reply::Now(Err(e)),
        Err(e) => done(tool_error(&e.message)),
    }
}

/// What a newly initialized client gets: the current selection (the CLI forgets it on every
/// reconnect) and the mentions queued while nobody was connected.
pub fn greet(app: &Arc<App>, client: &crate::server::Client, with_selection: bool) {
    if let Some(sel) = app.editor.selection().filter(|_| with_selection) {
        client.send(&crate::jsonrpc::notification("selection_changed", sel));
    }
    for m in app.editor.take_mentions() {
        client.send(&crate::jsonrpc::notification("at_mentioned", m));
    }
}
