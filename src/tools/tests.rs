//! Every tool, called as the session calls it (`tools::call` with a client whose outbox is an
//! in-memory queue), answers exactly this JSON: the claudecode.nvim per-tool specs, without a
//! socket. Answers that come later (openDiff, reformat_file, getDiagnostics while a check runs)
//! are read from the client's outbox with a deadline.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::diagnostics::checkers::{Checker, Checks};
use crate::diagnostics::parse::Format;
use crate::rpc::RequestId;
use crate::rpc::call::{Call, Reply};
use crate::rpc::clients::Client;
use crate::state::exec::Mode;
use crate::state::testing::{TestState, sent, state, state_with};

/// How long a test waits for an answer that comes later before it fails.
const PATIENCE: Duration = Duration::from_secs(20);

/// A state with one client that finished its setup (initialized and greeted), calling tools.
struct Ide {
    ts: TestState,
    client: Arc<Client>,
    next_id: AtomicU64,
    /// Messages read from the outbox while waiting for an answer, kept for `messages`.
    seen: Mutex<Vec<Value>>,
}

impl Ide {
    fn new() -> Ide {
        Ide::with(state())
    }

    fn with(ts: TestState) -> Ide {
        let client = ts.client(true);
        client.state.lock().unwrap().greeted = true;
        Ide {
            ts,
            client,
            next_id: AtomicU64::new(1),
            seen: Mutex::default(),
        }
    }

    fn ws(&self) -> PathBuf {
        self.ts.ws()
    }

    /// The absolute path of a workspace file, as a string.
    fn abs(&self, rel: &str) -> String {
        self.ws().join(rel).to_string_lossy().into_owned()
    }

    fn write(&self, rel: &str, content: &str) -> String {
        self.ts.write(rel, content).to_string_lossy().into_owned()
    }

    fn start(&self, name: &str, args: Value) -> (RequestId, Reply) {
        let id = RequestId::number(self.next_id.fetch_add(1, Ordering::Relaxed));
        let call = Call {
            client: &self.client,
            id: &id,
        };
        let reply = super::call(
            &self.ts.state,
            &call,
            json!({"name": name, "arguments": args}),
        );
        (id, reply)
    }

    /// Calls a tool that answers at once: Ok(result) or Err(the JSON-RPC error object).
    fn call(&self, name: &str, args: Value) -> Result<Value, Value> {
        match self.start(name, args) {
            (id, Reply::Now(r)) => split(crate::rpc::response(&id, r), &id),
            (_, Reply::Later) => panic!("{name} promised a later answer"),
        }
    }

    /// Calls a tool that answers later; returns the call's id.
    fn call_later(&self, name: &str, args: Value) -> RequestId {
        match self.start(name, args) {
            (id, Reply::Later) => id,
            (_, Reply::Now(r)) => panic!("{name} answered at once: {r:?}"),
        }
    }

    /// The answer to call `id`, read from the client's outbox (bounded wait).
    fn answer(&self, id: &RequestId) -> Result<Value, Value> {
        let deadline = Instant::now() + PATIENCE;
        loop {
            if let Some(m) = self.take_answer(id) {
                return split(m, id);
            }
            assert!(
                Instant::now() < deadline,
                "no answer to call {id} within {PATIENCE:?}"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// The answer to call `id` if it was sent already.
    fn take_answer(&self, id: &RequestId) -> Option<Value> {
        let mut seen = self.seen.lock().unwrap();
        seen.extend(sent(&self.client));
        let i = seen.iter().position(|m| {
            m["id"] == id.to_value() && (m.get("result").is_some() || m.get("error").is_some())
        })?;
        Some(seen.remove(i))
    }

    /// Every message sent to the client that no `answer` took, oldest first.
    fn messages(&self) -> Vec<Value> {
        let mut seen = std::mem::take(&mut *self.seen.lock().unwrap());
        seen.extend(sent(&self.client));
        seen
    }

    /// A direct JSON-RPC method (`readFile`, ...) as the session serves it.
    fn direct(&self, method: &str, params: Value) -> Result<Value, Value> {
        let id = RequestId::number(0);
        match super::direct_method(&self.ts.state, method, params) {
            Reply::Now(r) => split(crate::rpc::response(&id, r), &id),
            Reply::Later => panic!("{method} promised a later answer"),
        }
    }

    fn open_diff(&self, rel: &str, contents: &str, tab: &str) -> RequestId {
        let p = self.abs(rel);
        self.call_later(
            "openDiff",
            json!({"old_file_path": p, "new_file_path": p, "new_file_contents": contents, "tab_name": tab}),
        )
    }

    /// A file outside the workspace, a symlink to it and a symlink to a directory outside.
    fn escapes(&self) -> Escapes {
        let root = &self.ts.root;
        std::fs::write(root.join("secret.txt"), "secret\n").unwrap();
        std::fs::create_dir_all(root.join("outside")).unwrap();
        std::os::unix::fs::symlink(root.join("secret.txt"), self.ws().join("link.txt")).unwrap();
        std::os::unix::fs::symlink(root.join("outside"), self.ws().join("out")).unwrap();
        Escapes {
            dotdot: outside(&self.ts, &root.join("secret.txt"), None),
            link: outside(
                &self.ts,
                &self.ws().join("link.txt"),
                Some(&root.join("secret.txt")),
            ),
            link_dir: outside(
                &self.ts,
                &self.ws().join("out/new.txt"),
                Some(&root.join("outside/new.txt")),
            ),
        }
    }

    fn set_formatters(&mut self, specs: &[&str]) {
        Arc::get_mut(&mut self.ts.state)
            .expect("the state is not shared yet")
            .formatters = specs.iter().map(|s| s.to_string()).collect();
    }
}

/// The refusals of `../secret.txt`, `link.txt` (to secret.txt) and `out/new.txt` (out is a
/// symlink to a directory outside).
struct Escapes {
    dotdot: String,
    link: String,
    link_dir: String,
}

/// The message of `Workspaces::resolve` for a path outside the workspace.
fn outside(ts: &TestState, lexical: &Path, resolved: Option<&Path>) -> String {
    let how = resolved
        .map(|r| format!(" (it resolves to {})", r.display()))
        .unwrap_or_default();
    format!(
        "{} is outside the workspace folders{how}; ccide only touches files under {}",
        lexical.display(),
        ts.ws().display()
    )
}

fn split(msg: Value, id: &RequestId) -> Result<Value, Value> {
    assert_eq!(msg["jsonrpc"], "2.0", "{msg}");
    assert_eq!(msg["id"], id.to_value(), "{msg}");
    match msg.get("result") {
        Some(r) => Ok(r.clone()),
        None => Err(msg["error"].clone()),
    }
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {PATIENCE:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// A tool result of text items.
fn texts(items: &[&str]) -> Value {
    json!({"content": items.iter().map(|t| json!({"type": "text", "text": t})).collect::<Vec<_>>()})
}

fn text(t: &str) -> Value {
    texts(&[t])
}

/// A tool result holding one JSON document as text.
fn json_text(v: Value) -> Value {
    text(&v.to_string())
}

fn error_text(t: &str) -> Value {
    json!({"content": [{"type": "text", "text": t}], "isError": true})
}

fn invalid_params(message: &str) -> Value {
    json!({"code": -32602, "message": message})
}

fn internal_error(message: &str) -> Value {
    json!({"code": -32603, "message": message})
}

fn url(p: &str) -> String {
    format!("file://{p}")
}

fn selection(path: &str, start: (u64, u64), end: (u64, u64), text: &str) -> Value {
    json!({
        "text": text, "filePath": path, "fileUrl": url(path),
        "selection": {
            "start": {"line": start.0, "character": start.1},
            "end": {"line": end.0, "character": end.1},
            "isEmpty": start == end,
        },
    })
}

fn notification(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "method": method, "params": params})
}

fn names(tools: &[Value]) -> Vec<&str> {
    tools.iter().map(|t| t["name"].as_str().unwrap()).collect()
}

const LISTED: &[&str] = &[
    "checkDocumentDirty",
    "closeAllDiffTabs",
    "close_tab",
    "getCurrentFile",
    "getCurrentSelection",
    "getDiagnostics",
    "getLatestSelection",
    "getOpenEditors",
    "getOpenFiles",
    "getWorkspaceFolders",
    "getWorkspaceInfo",
    "get_all_opened_file_paths",
    "listFiles",
    "openDiff",
    "openFile",
    "open_files",
    "readFile",
    "reformat_file",
    "saveDocument",
    "writeFile",
];

// ---------------------------------------------------------------------------
// The registry: tools/list and tools/call

#[test]
fn tools_are_sorted_by_name_and_unique() {
    let names: Vec<&str> = super::TOOLS.iter().map(|t| t.name).collect();
    let mut sorted = names.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(names, sorted);
}

#[test]
fn tools_list_is_sorted_and_hides_execute_code_when_exec_is_off() {
    let ide = Ide::new();
    assert_eq!(names(&super::list(&ide.ts.state)), LISTED);
}

#[test]
fn tools_list_shows_execute_code_when_exec_is_on_or_ask() {
    let mut want = LISTED.to_vec();
    want.insert(3, "executeCode");
    for mode in [Mode::On, Mode::Ask] {
        let ts = state_with(mode);
        assert_eq!(names(&super::list(&ts.state)), want, "{mode:?}");
    }
}

#[test]
fn tools_list_entries_carry_description_and_input_schema() {
    let ide = Ide::new();
    let list = super::list(&ide.ts.state);
    let open_files = list.iter().find(|t| t["name"] == "open_files").unwrap();
    assert_eq!(
        *open_files,
        json!({
            "name": "open_files",
            "description": "Open several files.",
            "inputSchema": {
                "type": "object",
                "properties": {"file_paths": {"type": "array", "items": {"type": "string"}, "description": "Paths of the files to open"}},
                "required": ["file_paths"],
                "additionalProperties": false,
                "$schema": "http://json-schema.org/draft-07/schema#",
            },
        })
    );
    let get_diagnostics = list.iter().find(|t| t["name"] == "getDiagnostics").unwrap();
    assert_eq!(
        get_diagnostics["inputSchema"],
        json!({
            "type": "object",
            "properties": {"uri": {"type": "string", "description": "file:// URI of the file; omit for every file"}},
            "required": [],
            "additionalProperties": false,
            "$schema": "http://json-schema.org/draft-07/schema#",
        })
    );
    for t in &list {
        let keys: Vec<&String> = t.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["description", "inputSchema", "name"], "{t}");
    }
}

#[test]
fn unknown_tool_is_invalid_params_naming_it() {
    let ide = Ide::new();
    assert_eq!(
        ide.call("nope", json!({})),
        Err(invalid_params("Unknown tool: nope"))
    );
    // A hidden tool is still callable and says why it does nothing.
    assert!(ide.call("executeCode", json!({"code": "1"})).is_ok());
}

#[test]
fn tools_call_arguments_must_be_an_object_and_name_a_string() {
    let ide = Ide::new();
    let id = RequestId::number(7);
    let call = Call {
        client: &ide.client,
        id: &id,
    };
    let run = |params: Value| match super::call(&ide.ts.state, &call, params) {
        Reply::Now(r) => split(crate::rpc::response(&id, r), &id),
        Reply::Later => panic!("answered later"),
    };
    for bad in [json!([]), json!("x"), json!(1), json!(true)] {
        assert_eq!(
            run(json!({"name": "getOpenEditors", "arguments": bad})),
            Err(invalid_params("tools/call \"arguments\" must be an object")),
            "{bad}"
        );
    }
    // Absent or null arguments are no arguments.
    for params in [
        json!({"name": "getOpenEditors"}),
        json!({"name": "getOpenEditors", "arguments": null}),
    ] {
        assert_eq!(run(params), Ok(json_text(json!({"tabs": []}))));
    }
    for params in [json!({}), json!({"name": 3}), json!(null)] {
        assert_eq!(
            run(params.clone()),
            Err(invalid_params("tools/call needs a \"name\" string")),
            "{params}"
        );
    }
}

#[test]
fn missing_or_mistyped_arguments_are_invalid_params() {
    let ide = Ide::with(state_with(Mode::On));
    let missing = |name: &str| invalid_params(&format!("missing required argument \"{name}\""));
    let not_string = |name: &str| invalid_params(&format!("argument \"{name}\" must be a string"));
    for (tool, arg) in [
        ("checkDocumentDirty", "filePath"),
        ("close_tab", "tab_name"),
        ("executeCode", "code"),
        ("openDiff", "old_file_path"),
        ("openFile", "filePath"),
        ("readFile", "path"),
        ("reformat_file", "file_path"),
        ("saveDocument", "filePath"),
        ("writeFile", "path"),
    ] {
        assert_eq!(ide.call(tool, json!({})), Err(missing(arg)), "{tool}");
        assert_eq!(
            ide.call(tool, json!({arg: 1})),
            Err(not_string(arg)),
            "{tool}"
        );
    }
    ide.write("a.txt", "a\n");
    assert_eq!(
        ide.call(
            "openDiff",
            json!({"old_file_path": "a.txt", "tab_name": "t"})
        ),
        Err(missing("new_file_contents"))
    );
    assert_eq!(
        ide.call("writeFile", json!({"path": "a.txt"})),
        Err(missing("content"))
    );
    assert_eq!(
        ide.call("getDiagnostics", json!({"uri": 1})),
        Err(not_string("uri"))
    );
    assert_eq!(
        ide.call("listFiles", json!({"pattern": []})),
        Err(not_string("pattern"))
    );
    for flag in ["preview", "makeFrontmost", "selectToEndOfLine"] {
        assert_eq!(
            ide.call("openFile", json!({"filePath": "a.txt", flag: "yes"})),
            Err(invalid_params(&format!(
                "argument \"{flag}\" must be a boolean"
            ))),
            "{flag}"
        );
    }
    for bad in [
        json!({}),
        json!({"file_paths": "a.txt"}),
        json!({"file_paths": [1]}),
    ] {
        assert_eq!(
            ide.call("open_files", bad.clone()),
            Err(invalid_params(
                "argument \"file_paths\" must be an array of strings"
            )),
            "{bad}"
        );
    }
    // Nothing was opened by the refused calls.
    assert_eq!(ide.ts.state.editor.tabs().len(), 0);
}

// ---------------------------------------------------------------------------
// Editor tools

#[test]
fn check_document_dirty_not_open_open_and_unsaved() {
    let ide = Ide::new();
    let a = ide.write("a.txt", "a\n");
    assert_eq!(
        ide.call("checkDocumentDirty", json!({"filePath": a})),
        Ok(json_text(
            json!({"success": false, "message": format!("Document not open: {a}")})
        ))
    );
    ide.call("openFile", json!({"filePath": "a.txt"})).unwrap();
    assert_eq!(
        ide.call("checkDocumentDirty", json!({"filePath": a})),
        Ok(json_text(
            json!({"success": true, "filePath": a, "isDirty": false, "isUntitled": false})
        ))
    );
    ide.ts
        .state
        .editor
        .set_document(Path::new(&a), Some("b\n".into()));
    // A relative path names the same file.
    assert_eq!(
        ide.call("checkDocumentDirty", json!({"filePath": "a.txt"})),
        Ok(json_text(
            json!({"success": true, "filePath": a, "isDirty": true, "isUntitled": false})
        ))
    );
}

#[test]
fn get_current_selection_without_editor_at_origin_and_after_a_selection() {
    let ide = Ide::new();
    assert_eq!(
        ide.call("getCurrentSelection", json!({})),
        Ok(json_text(
            json!({"success": false, "message": "No active editor found"})
        ))
    );
    let a = ide.write("a.txt", "one\ntwo\n");
    let b = ide.write("b.txt", "bee\n");
    ide.call("openFile", json!({"filePath": "a.txt"})).unwrap();
    let mut want = selection(&a, (0, 0), (0, 0), "");
    want["success"] = true.into();
    assert_eq!(
        ide.call("getCurrentSelection", json!({})),
        Ok(json_text(want))
    );
    ide.call("openFile", json!({"filePath": "a.txt", "startText": "two"}))
        .unwrap();
    let mut want = selection(&a, (1, 0), (1, 3), "two");
    want["success"] = true.into();
    assert_eq!(
        ide.call("getCurrentSelection", json!({})),
        Ok(json_text(want))
    );
    // The selection of another file is not the active editor's.
    ide.call("openFile", json!({"filePath": "b.txt"})).unwrap();
    let mut want = selection(&b, (0, 0), (0, 0), "");
    want["success"] = true.into();
    assert_eq!(
        ide.call("getCurrentSelection", json!({})),
        Ok(json_text(want))
    );
}

#[test]
fn get_latest_selection_none_then_the_last_one_sent() {
    let ide = Ide::new();
    assert_eq!(
        ide.call("getLatestSelection", json!({})),
        Ok(json_text(
            json!({"success": false, "message": "No selection available"})
        ))
    );
    let a = ide.write("a.txt", "one\ntwo\n");
    ide.write("b.txt", "bee\n");
    ide.call("openFile", json!({"filePath": "a.txt", "startText": "one"}))
        .unwrap();
    ide.call("openFile", json!({"filePath": "b.txt"})).unwrap();
    let mut want = selection(&a, (0, 0), (0, 3), "one");
    want["success"] = true.into();
    assert_eq!(
        ide.call("getLatestSelection", json!({})),
        Ok(json_text(want.clone()))
    );
    // Closing the tab forgets the current selection, not the latest one sent.
    ide.call("close_tab", json!({"tab_name": a})).unwrap();
    assert_eq!(
        ide.call("getLatestSelection", json!({})),
        Ok(json_text(want))
    );
}

#[test]
fn get_open_editors_lists_tabs_with_unsaved_state() {
    let ide = Ide::new();
    assert_eq!(
        ide.call("getOpenEditors", json!({})),
        Ok(json_text(json!({"tabs": []})))
    );
    let a = ide.write("a.txt", "one\ntwo\nthree\n");
    let b = ide.write("src/main.rs", "fn main() {}\n");
    ide.call("open_files", json!({"file_paths": ["src/main.rs"]}))
        .unwrap();
    ide.call("openFile", json!({"filePath": a, "preview": true}))
        .unwrap();
    ide.ts
        .state
        .editor
        .set_document(Path::new(&b), Some("fn main() {\n}\n".into()));
    let tab = |path: &str, label: &str, language: &str, active, dirty, lines, preview| {
        json!({
            "uri": url(path), "isActive": active, "label": label, "languageId": language,
            "isDirty": dirty, "fileName": path, "lineCount": lines, "isUntitled": false,
            "isPinned": false, "isPreview": preview, "groupIndex": 0, "viewColumn": 1,
            "isGroupActive": true,
        })
    };
    assert_eq!(
        ide.call("getOpenEditors", json!({})),
        Ok(json_text(json!({"tabs": [
            tab(&b, "main.rs", "rust", false, true, 2, false),
            tab(&a, "a.txt", "plaintext", true, false, 3, true),
        ]})))
    );
}

#[test]
fn get_all_opened_file_paths_one_per_line() {
    let ide = Ide::new();
    assert_eq!(
        ide.call("get_all_opened_file_paths", json!({})),
        Ok(text(""))
    );
    let a = ide.write("a.txt", "a\n");
    let b = ide.write("b.txt", "b\n");
    ide.call("open_files", json!({"file_paths": ["a.txt", "b.txt"]}))
        .unwrap();
    assert_eq!(
        ide.call("get_all_opened_file_paths", json!({})),
        Ok(text(&format!("{a}\n{b}")))
    );
}

#[test]
fn open_file_answers_a_sentence_or_json_details() {
    let ide = Ide::new();
    let a = ide.write("a.txt", "one\ntwo\nthree\n");
    let r = ide.write("lib.rs", "fn f() {}\n");
    assert_eq!(
        ide.call("openFile", json!({"filePath": a})),
        Ok(text(&format!("Opened file: {a}")))
    );
    assert_eq!(
        ide.call(
            "openFile",
            json!({"filePath": "a.txt", "makeFrontmost": true})
        ),
        Ok(text(&format!("Opened file: {a}")))
    );
    assert_eq!(
        ide.call(
            "openFile",
            json!({"filePath": "lib.rs", "makeFrontmost": false})
        ),
        Ok(json_text(json!({
            "success": true, "filePath": r, "fileUrl": url(&r), "languageId": "rust",
            "lineCount": 1, "isDirty": false, "isUntitled": false,
        })))
    );
    // Unsaved content is what the editor shows.
    ide.ts
        .state
        .editor
        .set_document(Path::new(&a), Some("x\n".into()));
    assert_eq!(
        ide.call(
            "openFile",
            json!({"filePath": "a.txt", "makeFrontmost": false})
        ),
        Ok(json_text(json!({
            "success": true, "filePath": a, "fileUrl": url(&a), "languageId": "plaintext",
            "lineCount": 1, "isDirty": true, "isUntitled": false,
        })))
    );
    // Opening made the tab active; no selection was sent.
    assert_eq!(ide.ts.state.editor.active(), Some(PathBuf::from(&a)));
    assert_eq!(ide.messages(), Vec::<Value>::new());
}

#[test]
fn open_file_selects_from_start_text_to_end_text_and_sends_selection_changed() {
    let ide = Ide::new();
    let a = ide.write("a.txt", "one\ntwo\nthree\n");
    assert_eq!(
        ide.call(
            "openFile",
            json!({"filePath": "a.txt", "startText": "two", "endText": "thr"})
        ),
        Ok(text(&format!("Opened file: {a} and selected lines 2-3")))
    );
    let sel = selection(&a, (1, 0), (2, 3), "two\nthr");
    assert_eq!(
        ide.messages(),
        [notification("selection_changed", sel.clone())]
    );
    assert_eq!(ide.ts.state.editor.selection(), Some(sel));
    // selectToEndOfLine extends to the end of the last line, before its terminator.
    assert_eq!(
        ide.call(
            "openFile",
            json!({"filePath": "a.txt", "startText": "ne", "selectToEndOfLine": true, "makeFrontmost": false})
        ),
        Ok(json_text(json!({
            "success": true, "filePath": a, "fileUrl": url(&a), "languageId": "plaintext",
            "lineCount": 3, "isDirty": false, "isUntitled": false,
        })))
    );
    assert_eq!(
        ide.messages(),
        [notification(
            "selection_changed",
            selection(&a, (0, 1), (0, 3), "ne")
        )]
    );
    // Empty texts mean absent: nothing is selected.
    assert_eq!(
        ide.call(
            "openFile",
            json!({"filePath": "a.txt", "startText": "", "endText": ""})
        ),
        Ok(text(&format!("Opened file: {a}")))
    );
    assert_eq!(ide.messages(), Vec::<Value>::new());
}

#[test]
fn open_file_select_to_end_of_line_stops_before_crlf_and_counts_characters() {
    let ide = Ide::new();
    let a = ide.write("crlf.txt", "héllo wörld\r\nnext\r\n");
    assert_eq!(
        ide.call(
            "openFile",
            json!({"filePath": "crlf.txt", "startText": "wö", "selectToEndOfLine": true})
        ),
        Ok(text(&format!("Opened file: {a} and selected lines 1-1")))
    );
    assert_eq!(
        ide.messages(),
        [notification(
            "selection_changed",
            selection(&a, (0, 6), (0, 11), "wörld")
        )]
    );
    // Without an end of line after it, the selection runs to the end of the file.
    let b = ide.write("b.txt", "ab\ncd");
    ide.call(
        "openFile",
        json!({"filePath": "b.txt", "startText": "c", "selectToEndOfLine": true}),
    )
    .unwrap();
    assert_eq!(
        ide.messages(),
        [notification(
            "selection_changed",
            selection(&b, (1, 0), (1, 2), "cd")
        )]
    );
}

#[test]
fn open_file_says_when_start_or_end_text_is_not_found() {
    let ide = Ide::new();
    let a = ide.write("a.txt", "one\ntwo\n");
    assert_eq!(
        ide.call("openFile", json!({"filePath": "a.txt", "startText": "zzz"})),
        Ok(text(&format!(
            "Opened file: {a} (start text not found: \"zzz\")"
        )))
    );
    assert_eq!(ide.messages(), Vec::<Value>::new());
    // A missing end text still selects the start text.
    assert_eq!(
        ide.call(
            "openFile",
            json!({"filePath": "a.txt", "startText": "one", "endText": "zzz"})
        ),
        Ok(text(&format!(
            "Opened file: {a} (end text not found: \"zzz\")"
        )))
    );
    assert_eq!(
        ide.messages(),
        [notification(
            "selection_changed",
            selection(&a, (0, 0), (0, 3), "one")
        )]
    );
}

#[test]
fn open_file_of_a_missing_file_is_an_error_result() {
    let ide = Ide::new();
    let missing = ide.abs("nope.txt");
    assert_eq!(
        ide.call("openFile", json!({"filePath": "nope.txt"})),
        Ok(error_text(&format!("File not found: {missing}")))
    );
    std::fs::create_dir(ide.ws().join("dir")).unwrap();
    assert_eq!(
        ide.call("openFile", json!({"filePath": "dir"})),
        Ok(error_text(&format!("{} is a directory", ide.abs("dir"))))
    );
    assert_eq!(ide.ts.state.editor.tabs().len(), 0);
}

#[test]
fn open_files_opens_without_activating_and_reports_errors() {
    let ide = Ide::new();
    let a = ide.write("a.txt", "a\n");
    let b = ide.write("b.txt", "b\n");
    assert_eq!(
        ide.call("open_files", json!({"file_paths": ["a.txt", b]})),
        Ok(json_text(json!({"opened_files": [a, b]})))
    );
    assert_eq!(
        ide.call("open_files", json!({"file_paths": []})),
        Ok(json_text(json!({"opened_files": []})))
    );
    let tabs: Vec<(String, bool)> = ide
        .ts
        .state
        .editor
        .tabs()
        .iter()
        .map(|t| (t.path.to_string_lossy().into_owned(), t.active))
        .collect();
    // The first tab of an empty editor is active; later ones are not activated.
    assert_eq!(tabs, [(a.clone(), true), (b.clone(), false)]);
    let missing = ide.abs("nope.txt");
    assert_eq!(
        ide.call(
            "open_files",
            json!({"file_paths": ["nope.txt", "a.txt", "."]})
        ),
        Ok(json_text(json!({
            "opened_files": [a],
            "errors": [format!("File not found: {missing}"), format!("File not found: {}", ide.ws().display())],
        })))
    );
}

#[test]
fn save_document_writes_unsaved_content_only() {
    let ide = Ide::new();
    let a = ide.write("a.txt", "old\n");
    assert_eq!(
        ide.call("saveDocument", json!({"filePath": "a.txt"})),
        Ok(json_text(
            json!({"success": false, "message": format!("Document not open: {a}")})
        ))
    );
    ide.call("openFile", json!({"filePath": "a.txt"})).unwrap();
    assert_eq!(
        ide.call("saveDocument", json!({"filePath": "a.txt"})),
        Ok(json_text(json!({
            "success": true, "filePath": a, "saved": false,
            "message": "Document has no unsaved changes",
        })))
    );
    ide.ts
        .state
        .editor
        .set_document(Path::new(&a), Some("new\n".into()));
    assert_eq!(
        ide.call("saveDocument", json!({"filePath": a})),
        Ok(json_text(json!({
            "success": true, "filePath": a, "saved": true,
            "message": "Document saved successfully",
        })))
    );
    assert_eq!(std::fs::read_to_string(&a).unwrap(), "new\n");
    assert_eq!(
        ide.call("checkDocumentDirty", json!({"filePath": a})),
        Ok(json_text(
            json!({"success": true, "filePath": a, "isDirty": false, "isUntitled": false})
        ))
    );
}

#[test]
fn editor_tools_refuse_paths_outside_the_workspace() {
    let ide = Ide::new();
    let e = ide.escapes();
    let secret = ide.ts.root.join("secret.txt");
    for (raw, message) in [("../secret.txt", &e.dotdot), ("link.txt", &e.link)] {
        assert_eq!(
            ide.call("openFile", json!({"filePath": raw})),
            Ok(error_text(message)),
            "{raw}"
        );
        for tool in ["checkDocumentDirty", "saveDocument"] {
            assert_eq!(
                ide.call(tool, json!({"filePath": raw})),
                Ok(json_text(json!({"success": false, "message": message}))),
                "{tool} {raw}"
            );
        }
        assert_eq!(
            ide.call("open_files", json!({"file_paths": [raw]})),
            Ok(json_text(json!({"opened_files": [], "errors": [message]}))),
            "{raw}"
        );
    }
    // The absolute path outside is refused too.
    assert_eq!(
        ide.call("openFile", json!({"filePath": secret})),
        Ok(error_text(&e.dotdot))
    );
    assert_eq!(ide.ts.state.editor.tabs().len(), 0);
    assert_eq!(ide.messages(), Vec::<Value>::new());
}

// ---------------------------------------------------------------------------
// Diff tools

#[test]
fn open_diff_accepted_answers_file_saved_with_the_proposed_content_and_never_writes() {
    let ide = Ide::new();
    let a = ide.write("a.txt", "old\n");
    let tab = "✻ [Claude Code] a.txt ⧉";
    let id = ide.open_diff("a.txt", "new\n", tab);
    let diffs = ide.ts.state.diffs.list();
    let dir = ide.ts.root.join("state/diffs/1");
    assert_eq!(
        diffs,
        [json!({
            "id": "1", "tab_name": tab, "file": a, "new_file": false, "client": ide.client.id,
            "created": diffs[0]["created"], "dir": dir,
        })]
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("original")).unwrap(),
        "old\n"
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("proposed")).unwrap(),
        "new\n"
    );
    assert!(ide.take_answer(&id).is_none(), "answered before the user");
    let settled = ide
        .ts
        .state
        .diffs
        .settle_by_user(Some("1"), true, &ide.ws(), None)
        .ok()
        .unwrap();
    assert_eq!(settled, diffs[0]);
    assert_eq!(ide.answer(&id), Ok(texts(&["FILE_SAVED", "new\n"])));
    // The CLI writes the file after FILE_SAVED; ccide never does.
    assert_eq!(std::fs::read_to_string(&a).unwrap(), "old\n");
    assert!(!dir.exists());
    assert_eq!(ide.ts.state.diffs.list(), Vec::<Value>::new());
    assert_eq!(ide.messages(), Vec::<Value>::new());
}

#[test]
fn open_diff_accepted_after_editing_proposed_answers_the_edit() {
    let ide = Ide::new();
    let a = ide.write("a.txt", "old\n");
    let id = ide.open_diff(&a, "new\n", "tab");
    let proposed = ide.ts.root.join("state/diffs/1/proposed");
    std::fs::write(&proposed, "edited\n").unwrap();
    // By tab name this time.
    ide.ts
        .state
        .diffs
        .settle_by_user(Some("tab"), true, &ide.ws(), None)
        .ok()
        .unwrap();
    assert_eq!(ide.answer(&id), Ok(texts(&["FILE_SAVED", "edited\n"])));
    assert_eq!(std::fs::read_to_string(&a).unwrap(), "old\n");
}

#[test]
fn open_diff_rejected_answers_diff_rejected_with_the_tab_name() {
    let ide = Ide::new();
    let a = ide.write("a.txt", "old\n");
    let tab = "✻ [Claude Code] a.txt ⧉";
    let id = ide.open_diff("a.txt", "new\n", tab);
    // By the file's path, relative to the user's directory.
    ide.ts
        .state
        .diffs
        .settle_by_user(Some("a.txt"), false, &ide.ws(), None)
        .ok()
        .unwrap();
    assert_eq!(ide.answer(&id), Ok(texts(&["DIFF_REJECTED", tab])));
    assert_eq!(std::fs::read_to_string(&a).unwrap(), "old\n");
}

#[test]
fn open_diff_of_a_new_file_leaves_it_uncreated() {
    let ide = Ide::new();
    let new = ide.abs("sub/new.txt");
    std::fs::create_dir(ide.ws().join("sub")).unwrap();
    let id = ide.call_later(
        "openDiff",
        json!({"old_file_path": new, "new_file_path": new, "new_file_contents": "hi\n"}),
    );
    let diffs = ide.ts.state.diffs.list();
    // Without tab_name, the name the CLI would give it.
    assert_eq!(diffs[0]["tab_name"], "✻ [Claude Code] new.txt ⧉");
    assert_eq!(diffs[0]["new_file"], true);
    ide.ts
        .state
        .diffs
        .settle_by_user(None, true, &ide.ws(), None)
        .ok()
        .unwrap();
    assert_eq!(ide.answer(&id), Ok(texts(&["FILE_SAVED", "hi\n"])));
    assert!(!Path::new(&new).exists());
}

#[test]
fn open_diff_refuses_a_directory_and_paths_outside_the_workspace() {
    let ide = Ide::new();
    let e = ide.escapes();
    std::fs::create_dir(ide.ws().join("dir")).unwrap();
    let dir = ide.abs("dir");
    let args = |p: &str| json!({"old_file_path": p, "new_file_path": p, "new_file_contents": "x", "tab_name": "t"});
    assert_eq!(
        ide.call("openDiff", args(&dir)),
        Ok(error_text(&format!("{dir} is not a regular file")))
    );
    for (raw, message) in [
        ("../secret.txt", &e.dotdot),
        ("link.txt", &e.link),
        ("out/new.txt", &e.link_dir),
    ] {
        assert_eq!(
            ide.call("openDiff", args(raw)),
            Ok(error_text(message)),
            "{raw}"
        );
    }
    assert_eq!(ide.ts.state.diffs.list(), Vec::<Value>::new());
    assert_eq!(
        std::fs::read_to_string(ide.ts.root.join("secret.txt")).unwrap(),
        "secret\n"
    );
}

#[test]
fn close_tab_settles_a_pending_diff_as_rejected_and_closes_an_editor_tab() {
    let ide = Ide::new();
    let a = ide.write("a.txt", "old\n");
    let id = ide.open_diff("a.txt", "new\n", "my tab");
    assert_eq!(
        ide.call("close_tab", json!({"tab_name": "my tab"})),
        Ok(text("TAB_CLOSED"))
    );
    assert_eq!(ide.answer(&id), Ok(texts(&["DIFF_REJECTED", "my tab"])));
    assert_eq!(ide.ts.state.diffs.list(), Vec::<Value>::new());
    // The user's accept comes too late: the diff was closed by the client.
    assert_eq!(
        ide.ts
            .state
            .diffs
            .settle_by_user(Some("my tab"), true, &ide.ws(), None)
            .err()
            .map(|e| (e.kind(), e.message().to_string())),
        Some((
            "already_settled",
            "diff 1 was already closed by the client".into()
        ))
    );
    // A file path closes that editor tab.
    ide.call("open_files", json!({"file_paths": ["a.txt"]}))
        .unwrap();
    assert_eq!(
        ide.call("close_tab", json!({"tab_name": a})),
        Ok(text("TAB_CLOSED"))
    );
    assert_eq!(ide.ts.state.editor.tabs().len(), 0);
    // Whatever it found.
    assert_eq!(
        ide.call("close_tab", json!({"tab_name": "no such tab"})),
        Ok(text("TAB_CLOSED"))
    );
    assert_eq!(std::fs::read_to_string(&a).unwrap(), "old\n");
    assert_eq!(ide.messages(), Vec::<Value>::new());
}

#[test]
fn close_all_diff_tabs_rejects_every_pending_diff_and_counts_them() {
    let ide = Ide::new();
    assert_eq!(
        ide.call("closeAllDiffTabs", json!({})),
        Ok(text("CLOSED_0_DIFF_TABS"))
    );
    ide.write("a.txt", "a\n");
    ide.write("b.txt", "b\n");
    let first = ide.open_diff("a.txt", "A\n", "tab a");
    let second = ide.open_diff("b.txt", "B\n", "tab b");
    assert_eq!(
        ide.call("closeAllDiffTabs", json!({})),
        Ok(text("CLOSED_2_DIFF_TABS"))
    );
    assert_eq!(ide.answer(&first), Ok(texts(&["DIFF_REJECTED", "tab a"])));
    assert_eq!(ide.answer(&second), Ok(texts(&["DIFF_REJECTED", "tab b"])));
    assert_eq!(ide.ts.state.diffs.list(), Vec::<Value>::new());
    assert_eq!(
        ide.call("closeAllDiffTabs", json!({})),
        Ok(text("CLOSED_0_DIFF_TABS"))
    );
}

#[test]
fn close_tab_outside_the_workspace_touches_nothing() {
    let ide = Ide::new();
    ide.escapes();
    ide.call("open_files", json!({"file_paths": ["link.txt"]}))
        .unwrap();
    for raw in ["../secret.txt", "link.txt"] {
        assert_eq!(
            ide.call("close_tab", json!({"tab_name": raw})),
            Ok(text("TAB_CLOSED"))
        );
    }
    assert!(ide.ts.root.join("secret.txt").exists());
}

// ---------------------------------------------------------------------------
// executeCode

#[test]
fn execute_code_is_disabled_with_exec_off() {
    let ide = Ide::new();
    assert_eq!(
        ide.call("executeCode", json!({"code": "print(1)"})),
        Ok(error_text(
            "executeCode is disabled: start ccide serve with --exec ask (each call waits for `ccide exec approve`) or --exec on"
        ))
    );
    // Even without its argument: nothing about the call matters when it is off.
    assert_eq!(
        ide.call("executeCode", json!({})),
        Ok(error_text(
            "executeCode is disabled: start ccide serve with --exec ask (each call waits for `ccide exec approve`) or --exec on"
        ))
    );
}

#[test]
fn execute_code_with_exec_ask_waits_for_the_user_and_a_denial_answers() {
    let ide = Ide::with(state_with(Mode::Ask));
    let id = ide.call_later("executeCode", json!({"code": "print(1)"}));
    let (mode, waiting) = ide.ts.state.exec.waiting();
    assert_eq!(mode, "ask");
    assert_eq!(
        waiting,
        [
            json!({"id": "1", "client": ide.client.id, "code": "print(1)", "created": waiting[0]["created"]})
        ]
    );
    assert!(ide.take_answer(&id).is_none(), "answered before the user");
    ide.ts.state.exec.decide(Some("1"), false).unwrap();
    assert_eq!(
        ide.answer(&id),
        Ok(error_text("executeCode request 1 was denied"))
    );
    assert_eq!(ide.ts.state.exec.waiting().1, Vec::<Value>::new());
}

// ---------------------------------------------------------------------------
// getDiagnostics

fn import(ide: &Ide, text: &str) -> Value {
    crate::state::diagnostics::imported(&ide.ts.state.diagnostics.import(
        text,
        Format::Protocol,
        &ide.ws(),
    ))
}

fn wire(message: &str, line: u64, start: u64, end: u64, source: &str, code: Option<&str>) -> Value {
    let mut d = json!({
        "message": message, "severity": "Error",
        "range": {"start": {"line": line, "character": start}, "end": {"line": line, "character": end}},
        "source": source,
    });
    if let Some(c) = code {
        d["code"] = c.into();
    }
    d
}

#[test]
fn get_diagnostics_with_a_uri_echoes_it_with_an_empty_list() {
    let ide = Ide::new();
    let m = ide.write("m.py", "x\n");
    for uri in [
        url(&m),
        url(&ide.abs("never/written.py")),
        // Echoed exactly as given, even where a path would be normalised.
        url(&format!("{}/./m.py", ide.ws().display())),
        "file:///elsewhere/x.py".to_string(),
    ] {
        assert_eq!(
            ide.call("getDiagnostics", json!({"uri": uri})),
            Ok(json_text(json!([{"uri": uri, "diagnostics": []}]))),
            "{uri}"
        );
    }
}

#[test]
fn get_diagnostics_answers_imported_diagnostics_and_every_file_without_uri() {
    let ide = Ide::new();
    let m = ide.write("m.py", "x\n");
    let n = ide.write("a/n.py", "y\n");
    let one = |p: &str, message: &str| {
        format!(
            r#"{{"uri":"{}","diagnostics":[{{"message":"{message}","severity":"Error","range":{{"start":{{"line":2,"character":6}},"end":{{"line":2,"character":11}}}},"source":"ruff","code":"F821"}}]}}"#,
            url(p)
        )
    };
    assert_eq!(
        import(&ide, &format!("[{}, {}]", one(&m, "boom"), one(&n, "bang"))),
        json!({"ok": true, "files": 2, "diagnostics": 2, "changed": 2, "outside_workspace": 0})
    );
    let boom = wire("boom", 2, 6, 11, "ruff", Some("F821"));
    let bang = wire("bang", 2, 6, 11, "ruff", Some("F821"));
    // The clients were told.
    assert_eq!(
        ide.messages(),
        [
            notification(
                "diagnostics_changed",
                json!({"uri": url(&n), "diagnostics": [bang]})
            ),
            notification(
                "diagnostics_changed",
                json!({"uri": url(&m), "diagnostics": [boom]})
            ),
        ]
    );
    assert_eq!(
        ide.call("getDiagnostics", json!({"uri": url(&m)})),
        Ok(json_text(json!([{"uri": url(&m), "diagnostics": [boom]}])))
    );
    // Through a symlink to the workspace: found, and the uri echoed as given.
    std::os::unix::fs::symlink(ide.ws(), ide.ts.root.join("alias")).unwrap();
    let alias = url(&ide.ts.root.join("alias/m.py").to_string_lossy());
    assert_eq!(
        ide.call("getDiagnostics", json!({"uri": alias})),
        Ok(json_text(json!([{"uri": alias, "diagnostics": [boom]}])))
    );
    // {} (and an empty uri) lists every file, answered from a worker thread.
    for args in [json!({}), json!({"uri": ""}), json!({"uri": null})] {
        let id = ide.call_later("getDiagnostics", args);
        assert_eq!(
            ide.answer(&id),
            Ok(json_text(json!([
                {"uri": url(&n), "diagnostics": [bang]},
                {"uri": url(&m), "diagnostics": [boom]},
            ])))
        );
    }
    // A file listed with no diagnostics is clean now.
    import(
        &ide,
        &format!(r#"[{{"uri":"{}","diagnostics":[]}}]"#, url(&n)),
    );
    let id = ide.call_later("getDiagnostics", json!({}));
    assert_eq!(
        ide.answer(&id),
        Ok(json_text(json!([{"uri": url(&m), "diagnostics": [boom]}])))
    );
}

#[test]
fn get_diagnostics_never_reports_files_outside_the_workspace() {
    let ide = Ide::new();
    ide.escapes();
    let secret = ide
        .ts
        .root
        .join("secret.txt")
        .to_string_lossy()
        .into_owned();
    let text = format!(
        r#"[{{"uri":"{}","diagnostics":[{{"message":"m","severity":"Error","range":{{"start":{{"line":0,"character":0}},"end":{{"line":0,"character":1}}}}}}]}}]"#,
        url(&secret)
    );
    assert_eq!(
        import(&ide, &text),
        json!({"ok": true, "files": 0, "diagnostics": 0, "changed": 0, "outside_workspace": 1})
    );
    for uri in [url(&secret), url(&ide.abs("link.txt"))] {
        assert_eq!(
            ide.call("getDiagnostics", json!({"uri": uri})),
            Ok(json_text(json!([{"uri": uri, "diagnostics": []}]))),
            "{uri}"
        );
    }
}

#[test]
fn get_diagnostics_waits_briefly_for_a_running_check_then_answers_from_the_store() {
    let mut ide = Ide::new();
    // A checker that reports the file's first line once `gate` exists: the first check is
    // still running when the baseline's short wait ends.
    let checker = Checker::parse(
        r#"*.chk=compiler:sh -c 'while [ ! -e gate ]; do sleep 0.01; done; echo "$0:1:1: error: $(head -n 1 "$0")"' {file}"#,
    )
    .unwrap();
    Arc::get_mut(&mut Arc::get_mut(&mut ide.ts.state).unwrap().diagnostics)
        .unwrap()
        .checks = Checks::new(
        vec![checker],
        Duration::from_secs(15),
        Duration::from_secs(30),
    );
    let x = ide.write("x.chk", "first\n");
    let started = Instant::now();
    let id = ide.call_later("getDiagnostics", json!({"uri": url(&x)}));
    assert_eq!(
        ide.answer(&id),
        Ok(json_text(json!([{"uri": url(&x), "diagnostics": []}])))
    );
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "the baseline waited {:?}",
        started.elapsed()
    );
    ide.write("gate", "");
    let first = wire("first", 0, 0, 0, "sh", None);
    let changed = notification(
        "diagnostics_changed",
        json!({"uri": url(&x), "diagnostics": [first]}),
    );
    let mut got = Vec::new();
    wait_until("diagnostics_changed after the check", || {
        got.extend(ide.messages());
        got.contains(&changed)
    });
    // The file did not change since: answered at once from the store.
    assert_eq!(
        ide.call("getDiagnostics", json!({"uri": url(&x)})),
        Ok(json_text(json!([{"uri": url(&x), "diagnostics": [first]}])))
    );
    // After an edit, {} waits for the check of the file as written.
    ide.write("x.chk", "second line\n");
    let id = ide.call_later("getDiagnostics", json!({}));
    assert_eq!(
        ide.answer(&id),
        Ok(json_text(json!([{"uri": url(&x), "diagnostics": [
            wire("second line", 0, 0, 0, "sh", None)
        ]}])))
    );
}

// ---------------------------------------------------------------------------
// Workspace tools and direct methods

#[test]
fn get_workspace_folders_lists_the_folder() {
    let ide = Ide::new();
    let ws = ide.ws();
    assert_eq!(
        ide.call("getWorkspaceFolders", json!({})),
        Ok(json_text(json!({
            "success": true,
            "folders": [{"name": "ws", "uri": url(&ws.to_string_lossy()), "path": ws, "index": 0}],
            "rootPath": ws,
        })))
    );
}

fn files_tree(ide: &Ide) {
    ide.write("b.txt", "b\n");
    ide.write("a.rs", "a\n");
    ide.write("src/lib.rs", "lib\n");
    ide.write("src/deep/mod.rs", "mod\n");
    ide.write(".git/config", "[core]\n");
    ide.write(".hidden", "h\n");
}

#[test]
fn get_workspace_info_counts_files_skipping_git_and_symlinks() {
    let ide = Ide::new();
    files_tree(&ide);
    ide.escapes();
    let want = json!({
        "name": "ws", "path": ide.ws(), "fileCount": 5, "fileCountTruncated": false,
        "type": "folder",
    });
    assert_eq!(
        ide.call("getWorkspaceInfo", json!({})),
        Ok(json_text(want.clone()))
    );
    assert_eq!(ide.direct("getWorkspaceInfo", json!({})), Ok(want.clone()));
    assert_eq!(ide.direct("getWorkspaceInfo", Value::Null), Ok(want));
}

#[test]
fn list_files_matches_globs_sorted_skipping_git_and_symlinks() {
    let ide = Ide::new();
    files_tree(&ide);
    ide.escapes();
    let all = json!({"files": [".hidden", "a.rs", "b.txt", "src/deep/mod.rs", "src/lib.rs"], "truncated": false});
    assert_eq!(ide.call("listFiles", json!({})), Ok(json_text(all.clone())));
    assert_eq!(ide.direct("listFiles", json!({})), Ok(all));
    for (pattern, files) in [
        ("**/*.rs", json!(["a.rs", "src/deep/mod.rs", "src/lib.rs"])),
        ("*.rs", json!(["a.rs"])),
        ("src/*", json!(["src/lib.rs"])),
        ("?.txt", json!(["b.txt"])),
        ("*.none", json!([])),
    ] {
        let want = json!({"files": files, "truncated": false});
        assert_eq!(
            ide.call("listFiles", json!({"pattern": pattern})),
            Ok(json_text(want.clone())),
            "{pattern}"
        );
        assert_eq!(
            ide.direct("listFiles", json!({"pattern": pattern})),
            Ok(want),
            "{pattern}"
        );
    }
}

#[test]
fn get_open_files_and_get_current_file_as_tools_and_direct_methods() {
    let ide = Ide::new();
    assert_eq!(
        ide.call("getOpenFiles", json!({})),
        Ok(json_text(json!([])))
    );
    assert_eq!(ide.direct("getOpenFiles", json!({})), Ok(json!([])));
    assert_eq!(ide.call("getCurrentFile", json!({})), Ok(text("null")));
    assert_eq!(ide.direct("getCurrentFile", json!({})), Ok(Value::Null));
    let a = ide.write("a.txt", "a\n");
    let b = ide.write("src/b.rs", "b\n");
    ide.call("open_files", json!({"file_paths": ["a.txt"]}))
        .unwrap();
    ide.call("openFile", json!({"filePath": "src/b.rs"}))
        .unwrap();
    let open = json!([
        {"path": "a.txt", "absolutePath": a, "isActive": false},
        {"path": "src/b.rs", "absolutePath": b, "isActive": true},
    ]);
    assert_eq!(
        ide.call("getOpenFiles", json!({})),
        Ok(json_text(open.clone()))
    );
    assert_eq!(ide.direct("getOpenFiles", json!({})), Ok(open));
    let current = json!({"path": "src/b.rs", "absolutePath": b});
    assert_eq!(
        ide.call("getCurrentFile", json!({})),
        Ok(json_text(current.clone()))
    );
    assert_eq!(ide.direct("getCurrentFile", json!({})), Ok(current));
}

#[test]
fn read_file_as_a_tool_and_a_direct_method() {
    let ide = Ide::new();
    ide.write("src/a.txt", "héllo\nwörld\n");
    assert_eq!(
        ide.call("readFile", json!({"path": "src/a.txt"})),
        Ok(text("héllo\nwörld\n"))
    );
    assert_eq!(
        ide.direct("readFile", json!({"path": "src/a.txt"})),
        Ok(json!("héllo\nwörld\n"))
    );
    // Workspace-relative: a leading slash is dropped.
    assert_eq!(
        ide.direct("readFile", json!({"path": "/src/a.txt"})),
        Ok(json!("héllo\nwörld\n"))
    );
    let missing = ide.abs("nope.txt");
    assert_eq!(
        ide.call("readFile", json!({"path": "nope.txt"})),
        Ok(error_text(&format!(
            "failed to read file: File not found: {missing}"
        )))
    );
    assert_eq!(
        ide.direct("readFile", json!({"path": "nope.txt"})),
        Err(internal_error(&format!(
            "failed to read file: File not found: {missing}"
        )))
    );
    let src = ide.abs("src");
    assert_eq!(
        ide.direct("readFile", json!({"path": "src"})),
        Err(internal_error(&format!(
            "failed to read file: {src} is a directory"
        )))
    );
    std::fs::write(ide.ws().join("bin"), [0xff, 0xfe]).unwrap();
    assert_eq!(
        ide.direct("readFile", json!({"path": "bin"})),
        Err(internal_error(&format!(
            "failed to read file: {} is not UTF-8 text",
            ide.abs("bin")
        )))
    );
    assert_eq!(
        ide.direct("readFile", json!({})),
        Err(invalid_params("missing required argument \"path\""))
    );
}

#[test]
fn write_file_as_a_tool_and_a_direct_method() {
    let ide = Ide::new();
    let a = ide.abs("a.txt");
    assert_eq!(
        ide.call("writeFile", json!({"path": "a.txt", "content": "héllo\n"})),
        Ok(json_text(json!({"success": true, "path": a, "bytes": 7})))
    );
    assert_eq!(std::fs::read_to_string(&a).unwrap(), "héllo\n");
    assert_eq!(
        ide.direct("writeFile", json!({"path": "a.txt", "content": ""})),
        Ok(json!({"success": true, "path": a, "bytes": 0}))
    );
    assert_eq!(std::fs::read_to_string(&a).unwrap(), "");
    let no_dir = ide.abs("no/such");
    let message = format!("failed to write file: directory {no_dir} does not exist");
    assert_eq!(
        ide.call(
            "writeFile",
            json!({"path": "no/such/x.txt", "content": "x"})
        ),
        Ok(error_text(&message))
    );
    assert_eq!(
        ide.direct(
            "writeFile",
            json!({"path": "no/such/x.txt", "content": "x"})
        ),
        Err(internal_error(&message))
    );
    assert_eq!(
        ide.direct("writeFile", json!({"path": "a.txt"})),
        Err(invalid_params("missing required argument \"content\""))
    );
    assert!(!ide.ws().join("no").exists());
}

#[test]
fn direct_methods_unknown_and_bad_params() {
    let ide = Ide::new();
    assert_eq!(
        ide.direct("nope", json!({})),
        Err(json!({"code": -32601, "message": "Method not found"}))
    );
    // Only the workspace methods are direct: tools are not.
    assert_eq!(
        ide.direct("openFile", json!({"filePath": "a.txt"})),
        Err(json!({"code": -32601, "message": "Method not found"}))
    );
    assert_eq!(
        ide.direct("listFiles", json!(["*"])),
        Err(invalid_params("params must be an object"))
    );
}

#[test]
fn workspace_methods_refuse_paths_outside_the_workspace() {
    let ide = Ide::new();
    let e = ide.escapes();
    for (raw, message) in [
        ("../secret.txt", &e.dotdot),
        ("link.txt", &e.link),
        ("out/new.txt", &e.link_dir),
    ] {
        assert_eq!(
            ide.call("readFile", json!({"path": raw})),
            Ok(error_text(message)),
            "{raw}"
        );
        assert_eq!(
            ide.direct("readFile", json!({"path": raw})),
            Err(internal_error(message)),
            "{raw}"
        );
        assert_eq!(
            ide.call("writeFile", json!({"path": raw, "content": "pwned"})),
            Ok(error_text(message)),
            "{raw}"
        );
        assert_eq!(
            ide.direct("writeFile", json!({"path": raw, "content": "pwned"})),
            Err(internal_error(message)),
            "{raw}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(ide.ts.root.join("secret.txt")).unwrap(),
        "secret\n"
    );
    assert!(!ide.ts.root.join("outside/new.txt").exists());
    // listFiles does not follow the symlinks.
    assert_eq!(
        ide.direct("listFiles", json!({})),
        Ok(json!({"files": [], "truncated": false}))
    );
}

// ---------------------------------------------------------------------------
// reformat_file

#[test]
fn reformat_file_pipes_through_a_formatter_and_answers_ok() {
    let mut ide = Ide::new();
    ide.set_formatters(&["*.txt=tr a-z A-Z"]);
    let a = ide.write("sub/a.txt", "hello\nworld\n");
    let id = ide.call_later("reformat_file", json!({"file_path": "sub/a.txt"}));
    assert_eq!(ide.answer(&id), Ok(text("OK")));
    assert_eq!(std::fs::read_to_string(&a).unwrap(), "HELLO\nWORLD\n");
    // Already formatted: OK, unchanged.
    let id = ide.call_later("reformat_file", json!({"file_path": a}));
    assert_eq!(ide.answer(&id), Ok(text("OK")));
    assert_eq!(std::fs::read_to_string(&a).unwrap(), "HELLO\nWORLD\n");
    // No temporary copy is left beside it.
    assert_eq!(std::fs::read_dir(ide.ws().join("sub")).unwrap().count(), 1);
}

#[test]
fn reformat_file_with_a_file_formatter_rewrites_in_place() {
    let mut ide = Ide::new();
    ide.set_formatters(&[r#"*.up=sh -c 'printf FORMATTED > "$0"' {file}"#]);
    let a = ide.write("a.up", "x\n");
    let id = ide.call_later("reformat_file", json!({"file_path": "a.up"}));
    assert_eq!(ide.answer(&id), Ok(text("OK")));
    assert_eq!(std::fs::read_to_string(&a).unwrap(), "FORMATTED");
    assert_eq!(std::fs::read_dir(ide.ws()).unwrap().count(), 1);
}

#[test]
fn reformat_file_errors_leave_the_file_alone() {
    let mut ide = Ide::new();
    ide.set_formatters(&[
        "*.bad=sh -c 'echo oops >&2; exit 3'",
        "*.worse='unterminated",
    ]);
    let e = ide.escapes();
    let bad = ide.write("x.bad", "x\n");
    ide.write("x.zz", "z\n");
    ide.write("x.worse", "w\n");
    std::fs::create_dir(ide.ws().join("dir.bad")).unwrap();
    let cases = [
        ("x.bad", "the formatter sh failed (exit status 3): oops".to_string()),
        (
            "x.zz",
            "no formatter for x.zz: start ccide serve with --formatter 'PATTERN=COMMAND' (built-ins when on PATH: rustfmt, gofmt, ruff format or black, prettier, clang-format, shfmt)".to_string(),
        ),
        (
            "x.worse",
            "invalid --formatter '*.worse='unterminated': unterminated single quote in: 'unterminated".to_string(),
        ),
        ("nope.txt", "File not found".to_string()),
        ("dir.bad", format!("{} is not a regular file", ide.abs("dir.bad"))),
        ("../secret.txt", e.dotdot.clone()),
        ("link.txt", e.link.clone()),
    ];
    for (raw, message) in &cases {
        let id = ide.call_later("reformat_file", json!({"file_path": raw}));
        assert_eq!(ide.answer(&id), Ok(error_text(message)), "{raw}");
    }
    assert_eq!(std::fs::read_to_string(&bad).unwrap(), "x\n");
    assert_eq!(
        std::fs::read_to_string(ide.ts.root.join("secret.txt")).unwrap(),
        "secret\n"
    );
}

#[test]
fn reformat_file_and_save_document_keep_the_file_mode() {
    use std::os::unix::fs::PermissionsExt;
    let mut ide = Ide::new();
    ide.set_formatters(&["*.sh=tr a-z A-Z"]);
    let script = ide.write("run.sh", "echo hi\n");
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o750)).unwrap();
    let id = ide.call_later("reformat_file", json!({"file_path": "run.sh"}));
    assert_eq!(ide.answer(&id), Ok(text("OK")));
    assert_eq!(std::fs::read_to_string(&script).unwrap(), "ECHO HI\n");
    let mode = |p: &str| std::fs::metadata(p).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode(&script), 0o750);
    ide.ts
        .state
        .editor
        .set_document(Path::new(&script), Some("echo saved\n".into()));
    assert_eq!(
        ide.call("saveDocument", json!({"filePath": "run.sh"}))
            .unwrap()["content"][0]["text"],
        json!({"success": true, "filePath": script, "saved": true, "message": "Document saved successfully"}).to_string()
    );
    assert_eq!(mode(&script), 0o750);
}

#[test]
fn reformat_file_ignores_the_stdout_of_a_file_formatter_that_changed_nothing() {
    let mut ide = Ide::new();
    ide.set_formatters(&[r#"*.js=sh -c 'echo "$0 50ms (unchanged)"' {file}"#]);
    let a = ide.write("a.js", "let a = 1;\n");
    let id = ide.call_later("reformat_file", json!({"file_path": "a.js"}));
    assert_eq!(ide.answer(&id), Ok(text("OK")));
    assert_eq!(std::fs::read_to_string(&a).unwrap(), "let a = 1;\n");
}

#[test]
fn reformat_file_keeps_the_file_when_the_formatter_removed_its_copy() {
    let mut ide = Ide::new();
    ide.set_formatters(&["*.txt=rm {file}"]);
    let a = ide.write("a.txt", "precious\n");
    let id = ide.call_later("reformat_file", json!({"file_path": "a.txt"}));
    let answer = ide.answer(&id).unwrap();
    assert_eq!(std::fs::read_to_string(&a).unwrap(), "precious\n");
    assert_eq!(answer["isError"], true, "{answer}");
}
