//! `ccide lsp` driven as an editor drives it: real LSP messages over its stdin and stdout, a
//! real `ccide serve`, and a real WebSocket client in the place of Claude Code, which must
//! receive exactly what VS Code would send it.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::util::{
    DEADLINE, LspProcess, Sandbox, Server, file_uri, list_locks, stderr, stdout, wait_for,
};
use serde_json::{Value, json};

/// An LSP client speaking to `ccide lsp` over its standard streams.
struct Editor(LspProcess);

impl std::ops::Deref for Editor {
    type Target = LspProcess;
    fn deref(&self) -> &LspProcess {
        &self.0
    }
}

impl std::ops::DerefMut for Editor {
    fn deref_mut(&mut self) -> &mut LspProcess {
        &mut self.0
    }
}

impl Editor {
    fn start(sb: &Sandbox, extra: &[&str]) -> Editor {
        let log = sb
            .root
            .join(format!("lsp-{}.log", sb.root.0.read_dir().unwrap().count()));
        let mut args = vec!["lsp"];
        args.extend_from_slice(extra);
        Editor(LspProcess::spawn(&mut sb.command(&args), log))
    }

    fn result(&mut self, method: &str, params: Value) -> Value {
        let r = self.request(method, params);
        assert!(r.get("error").is_none(), "{method} failed: {r}");
        r["result"].clone()
    }

    /// A notification or request from `ccide lsp` with this method.
    fn incoming(&mut self, method: &str) -> Value {
        self.recv_where(method, |v| v["method"] == method)
    }

    fn initialize(&mut self, root: &Path, extra: Value) -> Value {
        let mut params = json!({
            "processId": std::process::id(), "rootUri": file_uri(root),
            "capabilities": {"workspace": {"applyEdit": true}},
            "clientInfo": {"name": "test-editor", "version": "1"},
        });
        for (k, v) in extra.as_object().unwrap() {
            params[k] = v.clone();
        }
        let r = self.result("initialize", params);
        self.notify("initialized", json!({}));
        r
    }

    fn open(&mut self, path: &Path, text: &str) {
        let td = json!({"uri": file_uri(path), "languageId": "python", "version": 1, "text": text});
        self.notify("textDocument/didOpen", json!({"textDocument": td}));
    }

    fn code_actions(&mut self, path: &Path, range: Value) -> Value {
        let params = json!({"textDocument": {"uri": file_uri(path)}, "range": range, "context": {"diagnostics": []}});
        self.result("textDocument/codeAction", params)
    }

    /// Requests the code actions and executes the one titled `title` as editors do.
    fn run_action(&mut self, path: &Path, range: Value, title: &str) -> Value {
        let actions = self.code_actions(path, range);
        let action = actions
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["title"] == title)
            .unwrap_or_else(|| panic!("no action {title:?} in {actions}"))
            .clone();
        self.request("workspace/executeCommand", action["command"].clone())
    }

    /// shutdown, exit, and the exit status.
    fn quit(&mut self) -> i32 {
        assert_eq!(self.result("shutdown", Value::Null), Value::Null);
        self.notify("exit", Value::Null);
        let child = &mut self.child;
        let status = wait_for("ccide lsp to exit", DEADLINE, || child.try_wait().unwrap());
        status.code().unwrap()
    }
}

fn range(l1: u64, c1: u64, l2: u64, c2: u64) -> Value {
    json!({"start": {"line": l1, "character": c1}, "end": {"line": l2, "character": c2}})
}

/// Waits until the server's status satisfies `pred` (the editor's messages are asynchronous;
/// a server that the editor starts, or that restarts, may not answer yet).
pub(crate) fn status_where(sb: &Sandbox, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
    let end = Instant::now() + DEADLINE;
    loop {
        let o = sb.run(&["status", "--json"]);
        if let Some(s) = serde_json::from_str(&stdout(&o)).ok().filter(|s| pred(s)) {
            return s;
        }
        assert!(
            Instant::now() < end,
            "timed out after {DEADLINE:?} waiting for {what}; ccide status --json said: {}{}",
            stdout(&o),
            stderr(&o)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub(crate) fn tabs(paths: &[(&Path, bool)]) -> Value {
    paths
        .iter()
        .map(|(p, active)| json!({"path": p, "active": active, "preview": false}))
        .collect()
}

const CAPABILITIES: &str = r#"{
  "capabilities": {
    "positionEncoding": "utf-16",
    "textDocumentSync": {"openClose": true, "change": 2, "save": {"includeText": false}},
    "codeActionProvider": true,
    "executeCommandProvider": {"commands": ["ccide.select", "ccide.mention", "ccide.show", "ccide.accept", "ccide.acceptEdited", "ccide.reject", "ccide.keepHunk", "ccide.dropHunk", "ccide.acceptKept", "ccide.rejectAll", "ccide.keepChange", "ccide.undoChange"]},
    "workspace": {"workspaceFolders": {"supported": true, "changeNotifications": true}}
  },
  "serverInfo": {"name": "ccide", "version": "0.1.0"}
}"#;

#[test]
fn initialize_advertises_what_is_implemented_and_negotiates_utf16() {
    let sb = Sandbox::new();
    let _server = sb.serve(&[]);
    let expected: Value = serde_json::from_str(CAPABILITIES).unwrap();
    for (offered, chosen) in [
        (Value::Null, "utf-16"),
        (json!(["utf-8", "utf-32", "utf-16"]), "utf-16"),
        (json!(["utf-32", "utf-8"]), "utf-32"),
        (json!(["utf-8"]), "utf-8"),
    ] {
        let mut ed = Editor::start(&sb, &[]);
        let caps = json!({"general": {"positionEncodings": offered}});
        let r = ed.initialize(&sb.ws(), json!({"capabilities": caps}));
        let mut want = expected.clone();
        want["capabilities"]["positionEncoding"] = chosen.into();
        assert_eq!(r, want, "offered {offered}");
        let unknown = ed.request("textDocument/hover", json!({}));
        assert_eq!(
            unknown["error"],
            json!({"code": -32601, "message": "Method not found: textDocument/hover"})
        );
        assert_eq!(ed.quit(), 0);
    }
}

#[test]
fn open_change_save_close_are_tabs_and_unsaved_buffers() {
    let sb = Sandbox::new();
    let server = sb.serve(&[]);
    let a = sb.write("a.py", "x = 1\ny = 2\n");
    let b = sb.write("b.py", "print('b')\n");
    let mut claude = server.ready_client();
    let mut ed = Editor::start(&sb, &[]);
    ed.initialize(&sb.ws(), json!({}));
    ed.open(&a, "x = 1\ny = 2\n");
    status_where(&sb, "a.py open", |s| s["tabs"] == tabs(&[(&a, true)]));
    ed.open(&b, "print('b')\n");
    status_where(&sb, "b.py active", |s| {
        s["tabs"] == tabs(&[(&a, false), (&b, true)])
    });
    // Incremental changes, UTF-16 positions: "x = 1" becomes "x = 'é😀'".
    let change = |l1, c1, l2, c2, text: &str| json!({"range": range(l1, c1, l2, c2), "text": text});
    ed.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": file_uri(&a), "version": 2}, "contentChanges": [change(0, 4, 0, 5, "'é😀'"), change(1, 0, 1, 0, "# ")]}),
    );
    let dirty = "x = 'é😀'\n# y = 2\n";
    status_where(&sb, "a.py unsaved", |s| {
        s["documents"] == json!([{"path": a, "bytes": dirty.len()}])
    });
    let r = claude.call("checkDocumentDirty", json!({"filePath": a}));
    assert_eq!(
        crate::util::json_text(&r),
        json!({"success": true, "filePath": a, "isDirty": true, "isUntitled": false})
    );
    // Changing it back makes it clean again, as in VS Code.
    ed.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": file_uri(&a), "version": 3}, "contentChanges": [change(0, 4, 0, 9, "1"), change(1, 0, 1, 2, "")]}),
    );
    status_where(&sb, "a.py clean", |s| s["documents"] == json!([]));
    ed.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": file_uri(&a), "version": 4}, "contentChanges": [{"text": "z = 3\n"}]}),
    );
    status_where(&sb, "a.py unsaved", |s| {
        s["documents"] == json!([{"path": a, "bytes": 6}])
    });
    // saveDocument from the CLI writes exactly what the editor shows.
    let r = claude.call("saveDocument", json!({"filePath": a}));
    assert_eq!(crate::util::json_text(&r)["saved"], true);
    assert_eq!(std::fs::read_to_string(&a).unwrap(), "z = 3\n");
    ed.notify(
        "textDocument/didSave",
        json!({"textDocument": {"uri": file_uri(&a)}}),
    );
    ed.notify(
        "textDocument/didClose",
        json!({"textDocument": {"uri": file_uri(&b)}}),
    );
    status_where(&sb, "b.py closed", |s| {
        s["tabs"] == tabs(&[(&a, true)]) && s["documents"] == json!([])
    });
    assert_eq!(ed.quit(), 0);
    status_where(&sb, "the editor's tabs gone", |s| s["tabs"] == json!([]));
}

/// Claude Code wrote the file (its Write tool, no proposal) and the editor reloaded it: the
/// buffer now holds what the file holds, and is clean though the editor never saved it.
#[test]
fn a_buffer_reloaded_from_the_file_claude_wrote_is_clean() {
    let sb = Sandbox::new();
    let server = sb.serve(&[]);
    let f = sb.write("a.py", "x = 1\n");
    let mut claude = server.ready_client();
    let mut ed = Editor::start(&sb, &[]);
    ed.initialize(&sb.ws(), json!({}));
    ed.open(&f, "x = 1\n");
    status_where(&sb, "a.py open", |s| s["tabs"] == tabs(&[(&f, true)]));
    std::fs::write(&f, "x = 2\ny = 3\n").unwrap();
    // What `:reload` (helix), `:e` (vim) send: the file's text as a change.
    ed.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": file_uri(&f), "version": 2}, "contentChanges": [{"text": "x = 2\ny = 3\n"}]}),
    );
    // An edit after it is unsaved content; undoing it is clean again.
    ed.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": file_uri(&f), "version": 3}, "contentChanges": [{"range": range(1, 4, 1, 5), "text": "4"}]}),
    );
    status_where(&sb, "a.py unsaved", |s| {
        s["documents"] == json!([{"path": f, "bytes": 12}])
    });
    ed.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": file_uri(&f), "version": 4}, "contentChanges": [{"range": range(1, 4, 1, 5), "text": "3"}]}),
    );
    status_where(&sb, "a.py clean", |s| s["documents"] == json!([]));
    let r = claude.call("checkDocumentDirty", json!({"filePath": f}));
    assert_eq!(
        crate::util::json_text(&r),
        json!({"success": true, "filePath": f, "isDirty": false, "isUntitled": false})
    );
}

/// A line with two-byte, three-byte and four-byte (two UTF-16 units) characters.
const WIDE: &str = "def f():\n    s = \"é世😀x\"  # 😀\n    return s\n";

#[test]
fn send_selection_counts_utf16_units_whatever_the_negotiated_encoding() {
    let sb = Sandbox::new();
    let server = sb.serve(&[]);
    let f = sb.write("wide.py", WIDE);
    let mut claude = server.ready_client();
    // The same selection, `é世😀x`, in the three encodings.
    for (enc, start, end) in [("utf-16", 9, 14), ("utf-8", 9, 19), ("utf-32", 9, 13)] {
        let mut ed = Editor::start(&sb, &["--no-follow"]);
        let caps = json!({"general": {"positionEncodings": [enc]}});
        ed.initialize(&sb.ws(), json!({"capabilities": caps}));
        ed.open(&f, WIDE);
        let r = ed.run_action(&f, range(1, start, 1, end), "Claude: send selection");
        assert_eq!(r["result"], Value::Null, "{r}");
        let n = claude.notification("selection_changed");
        assert_eq!(
            n["params"],
            json!({
                "text": "é世😀x", "filePath": f, "fileUrl": format!("file://{}", f.display()),
                "selection": {"start": {"line": 1, "character": 9}, "end": {"line": 1, "character": 14}, "isEmpty": false},
            }),
            "{enc}"
        );
        assert_eq!(ed.quit(), 0);
    }
}

#[test]
fn mention_sends_lines_or_the_file() {
    let sb = Sandbox::new();
    let server = sb.serve(&[]);
    let f = sb.write("wide.py", WIDE);
    let mut claude = server.ready_client();
    let mut ed = Editor::start(&sb, &["--no-follow"]);
    ed.initialize(&sb.ws(), json!({}));
    ed.open(&f, WIDE);
    // Lines 2 and 3 selected linewise: the range ends at the start of line 4.
    ed.run_action(&f, range(1, 0, 3, 0), "Claude: @-mention");
    let n = claude.notification("at_mentioned");
    assert_eq!(
        n["params"],
        json!({"filePath": f, "lineStart": 1, "lineEnd": 2})
    );
    ed.run_action(&f, range(2, 4, 2, 4), "Claude: @-mention");
    let n = claude.notification("at_mentioned");
    assert_eq!(n["params"], json!({"filePath": f}));
    // Bound to a key: executeCommand with the document only.
    let r = ed.request(
        "workspace/executeCommand",
        json!({"command": "ccide.mention", "arguments": [{"uri": file_uri(&f), "range": range(0, 0, 0, 3)}]}),
    );
    assert_eq!(r["result"], Value::Null);
    let n = claude.notification("at_mentioned");
    assert_eq!(
        n["params"],
        json!({"filePath": f, "lineStart": 0, "lineEnd": 0})
    );
    let r = ed.request(
        "workspace/executeCommand",
        json!({"command": "ccide.nothing"}),
    );
    assert_eq!(r["error"]["message"], "unknown command ccide.nothing");
}

#[test]
fn the_selection_follows_the_cursor_of_code_action_requests_debounced() {
    let sb = Sandbox::new();
    let server = sb.serve(&[]);
    let f = sb.write("wide.py", WIDE);
    let mut claude = server.ready_client();
    let mut ed = Editor::start(&sb, &[]);
    ed.initialize(&sb.ws(), json!({}));
    ed.open(&f, WIDE);
    // The cursor moves as the user types: one request per keystroke (sent at once, well within
    // the 100 ms the selection waits for the cursor to rest), then a rest.
    let ask = |r: Value| json!({"textDocument": {"uri": file_uri(&f)}, "range": r, "context": {"diagnostics": []}});
    let ids: Vec<u64> = (0..5)
        .map(|c| range(1, c, 1, c))
        .chain([range(1, 4, 2, 0)])
        .map(|r| ed.send_request("textDocument/codeAction", ask(r)))
        .collect();
    for id in ids {
        ed.recv_where("a code action answer", |v| v["id"] == id);
    }
    let n = claude.notification("selection_changed");
    assert_eq!(
        n["params"]["selection"],
        json!({"start": {"line": 1, "character": 4}, "end": {"line": 2, "character": 0}, "isEmpty": false})
    );
    assert_eq!(n["params"]["text"], "s = \"é世😀x\"  # 😀\n");
    // Resting at the same place sends nothing more; the cursor alone is "in the file".
    ed.code_actions(&f, range(1, 4, 2, 0));
    ed.code_actions(&f, range(0, 2, 0, 2));
    let n = claude.notification("selection_changed");
    assert_eq!(n["params"]["selection"]["isEmpty"], true);
    assert_eq!(n["params"]["text"], "");
    // Nothing arrived in between (the notifications come in order).
    assert!(
        claude
            .backlog
            .iter()
            .all(|m| m["method"] != "selection_changed")
    );
    assert_eq!(ed.quit(), 0);

    // Turned off by initializationOptions: only the explicit action sends.
    let mut ed = Editor::start(&sb, &[]);
    ed.initialize(
        &sb.ws(),
        json!({"initializationOptions": {"followSelection": false}}),
    );
    ed.open(&f, WIDE);
    ed.code_actions(&f, range(0, 0, 0, 3));
    ed.run_action(&f, range(2, 4, 2, 10), "Claude: send selection");
    let n = claude.notification("selection_changed");
    assert_eq!(n["params"]["text"], "return");
    // Longer than the follow delay (100 ms) several times over: nothing else came.
    let rest = claude.drain(Duration::from_millis(500));
    assert!(
        rest.iter().all(|m| m["method"] != "selection_changed"),
        "{rest:?}"
    );
}

#[test]
fn editor_exit_drops_its_tabs_and_buffers_but_not_others() {
    let sb = Sandbox::new();
    let _server = sb.serve(&[]);
    let a = sb.write("a.py", "a\n");
    let b = sb.write("b.py", "b\n");
    let mut ed = Editor::start(&sb, &[]);
    ed.initialize(&sb.ws(), json!({}));
    ed.open(&a, "a changed\n");
    status_where(&sb, "a.py open", |s| s["tabs"] == tabs(&[(&a, true)]));
    assert!(sb.run(&["open", "b.py"]).status.success());
    status_where(&sb, "both tabs, a unsaved", |s| {
        s["tabs"] == tabs(&[(&a, false), (&b, true)])
            && s["documents"] == json!([{"path": a, "bytes": 10}])
    });
    // Killed, as when the editor crashes: the socket closes all the same.
    ed.child.kill().unwrap();
    status_where(&sb, "a.py dropped", |s| {
        s["tabs"] == tabs(&[(&b, true)]) && s["documents"] == json!([])
    });
}

#[test]
fn files_outside_the_workspace_are_left_alone_and_said_so_in_the_log() {
    let sb = Sandbox::new();
    let server = sb.serve(&[]);
    let a = sb.write("a.py", "a\n");
    let outside = sb.root.write("lib/outside.py", "x\n");
    let lib = outside.parent().unwrap().to_path_buf();
    // Found by the lock files: no server serves lib/.
    let mut ed = Editor::start(&sb, &[]);
    ed.initialize(&sb.ws(), json!({}));
    ed.open(&outside, "x\n");
    let log = ed.incoming("window/logMessage");
    let why = format!(
        "ccide: no ccide server is running for {} (start one there with `ccide serve`, or pass --port)",
        lib.display()
    );
    assert_eq!(log["params"], json!({"type": 2, "message": why}));
    let r = ed.run_action(&outside, range(0, 0, 0, 1), "Claude: send selection");
    assert_eq!(
        r["error"],
        json!({"code": -32603, "message": "no ccide server serves this file"})
    );
    let shown = ed.incoming("window/showMessage");
    let why = "ccide: no ccide server serves this file";
    assert_eq!(shown["params"], json!({"type": 2, "message": why}));
    assert_eq!(ed.quit(), 0);
    // With --port every file goes to that server, which refuses this one once; editing it
    // then sends nothing more.
    let port = server.port.to_string();
    let mut ed = Editor::start(&sb, &["--port", &port]);
    ed.initialize(&sb.ws(), json!({}));
    ed.open(&outside, "x\n");
    let log = ed.incoming("window/logMessage");
    let refused = format!(
        "ccide: {} is outside the workspace folders",
        outside.display()
    );
    assert!(
        log["params"]["message"]
            .as_str()
            .unwrap()
            .starts_with(&refused),
        "{log}"
    );
    ed.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": file_uri(&outside), "version": 2}, "contentChanges": [{"text": "y\n"}]}),
    );
    // didSave pushes at once; the answer to a later request comes after whatever it caused.
    ed.notify(
        "textDocument/didSave",
        json!({"textDocument": {"uri": file_uri(&outside)}}),
    );
    ed.open(&a, "a\n");
    ed.code_actions(&a, range(0, 0, 0, 0));
    assert!(
        ed.backlog
            .iter()
            .all(|m| m["method"] != "window/logMessage"),
        "{:?}",
        ed.backlog
    );
    status_where(&sb, "a.py open", |s| {
        s["tabs"] == tabs(&[(&a, true)]) && s["documents"] == json!([])
    });
}

/// The threads of `ccide lsp` named `name`.
fn threads_named(pid: u32, name: &str) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|tasks| {
            tasks
                .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
                .filter(|c| c.trim_end() == name)
                .count()
        })
        .unwrap_or(0)
}

/// A server that stops answering (here: stopped by SIGSTOP) is lost after the request's
/// time limit and found again when it answers; the lost session's event stream ends with it,
/// so reconnecting leaves one stream, not one more each time.
#[test]
fn a_server_that_hung_is_found_again_with_one_event_stream() {
    let sb = Sandbox::new();
    let server = sb.serve(&[]);
    let a = sb.write("a.py", "a\n");
    let mut ed = Editor::start(&sb, &["--no-follow"]);
    ed.initialize(&sb.ws(), json!({}));
    ed.open(&a, "a\n");
    status_where(&sb, "a.py open", |s| s["tabs"] == tabs(&[(&a, true)]));
    assert_eq!(threads_named(ed.pid(), "lsp-events"), 1);
    server.signal("STOP");
    // Answered once the request's time is up (5 s): the server is lost.
    let r = ed.run_action(&a, range(0, 0, 0, 1), "Claude: send selection");
    server.signal("CONT");
    assert!(r.get("error").is_some(), "{r}");
    wait_for("the editor's second session", DEADLINE, || {
        (server.log().matches("attached: test-editor 1").count() == 2).then_some(())
    });
    wait_for("one event stream", DEADLINE, || {
        (threads_named(ed.pid(), "lsp-events") == 1).then_some(())
    });
}

#[test]
fn a_restarted_server_is_found_again_without_restarting_the_editor() {
    let sb = Sandbox::new();
    let mut server = sb.serve(&[]);
    let a = sb.write("a.py", "a\n");
    let b = sb.write("b.py", "b\n");
    let mut ed = Editor::start(&sb, &["--no-follow"]);
    ed.initialize(&sb.ws(), json!({}));
    ed.open(&a, "a\n");
    status_where(&sb, "a.py open", |s| s["tabs"] == tabs(&[(&a, true)]));
    assert_eq!(server.stop_with("TERM"), Some(0));
    // While it is away the editor goes on.
    ed.open(&b, "b edited\n");
    let server = sb.serve(&[]);
    status_where(&sb, "both tabs, b unsaved", |s| {
        s["tabs"] == tabs(&[(&a, false), (&b, true)])
            && s["documents"] == json!([{"path": b, "bytes": 9}])
    });
    let mut claude = server.ready_client();
    ed.run_action(&a, range(0, 0, 0, 1), "Claude: send selection");
    assert_eq!(
        claude.notification("selection_changed")["params"]["text"],
        "a"
    );
    // The new server knows whose tabs these are.
    drop(ed);
    status_where(&sb, "the editor's tabs gone", |s| {
        s["tabs"] == json!([]) && s["documents"] == json!([])
    });
}

#[test]
fn a_server_gone_for_good_is_replaced_by_one_the_editor_serves() {
    let sb = Sandbox::new();
    let mut server = sb.serve(&[]);
    let a = sb.write("a.py", "a\n");
    let mut ed = Editor::start(&sb, &[]);
    ed.initialize(&sb.ws(), json!({}));
    ed.open(&a, "a edited\n");
    status_where(&sb, "a.py unsaved", |s| {
        s["documents"] == json!([{"path": a, "bytes": 9}])
    });
    server.stop_with("TERM");
    // After 3 s without a server, the editor's workspace folder is served by `ccide lsp`.
    // It gets the editor's tab and unsaved content at once.
    let pid = ed.child.id();
    wait_for(
        "the editor's tab in its own server",
        Duration::from_secs(15),
        || {
            let o = sb.run(&["status", "--json"]);
            let s: Value = serde_json::from_str(&stdout(&o)).ok()?;
            let want = s["tabs"] == tabs(&[(&a, true)])
                && s["documents"] == json!([{"path": a, "bytes": 9}]);
            (s["pid"] == pid && want).then_some(())
        },
    );
}

#[test]
fn with_no_server_the_editor_serves_its_workspace_itself() {
    let sb = Sandbox::new();
    let a = sb.write("a.py", "a\n");
    let mut ed = Editor::start(&sb, &[]);
    ed.initialize(&sb.ws(), json!({}));
    ed.open(&a, "a\n");
    let s = status_where(&sb, "a.py open", |s| s["tabs"] == tabs(&[(&a, true)]));
    assert_eq!(s["pid"], ed.child.id());
    assert_eq!(s["workspaces"], json!([sb.ws()]));
    let lock = sb.config().join(format!("ide/{}.lock", s["port"]));
    assert!(lock.is_file());
    assert_eq!(ed.quit(), 0);
    assert!(
        !lock.exists(),
        "the lock file is removed when the editor exits"
    );
}

#[test]
fn several_workspaces_reach_their_own_servers() {
    let sb = Sandbox::new();
    let one = sb.serve(&[]);
    let other = sb.root.join("other");
    std::fs::create_dir_all(&other).unwrap();
    let b = sb.root.write("other/b.py", "b\n");
    let a = sb.write("a.py", "a\n");
    let (o, st) = (other.to_str().unwrap(), sb.root.join("state2"));
    let two = Server::spawn(
        &mut sb.command(&[
            "serve",
            "--workspace",
            o,
            "--state-dir",
            st.to_str().unwrap(),
        ]),
        &sb.config(),
    );
    let mut ed = Editor::start(&sb, &[]);
    let folders = json!([{"uri": file_uri(&sb.ws()), "name": "ws"}, {"uri": file_uri(&other), "name": "other"}]);
    ed.initialize(&sb.ws(), json!({"workspaceFolders": folders}));
    ed.open(&a, "a\n");
    ed.open(&b, "b\n");
    let port = |s: &Server| s.port.to_string();
    let status_of = |s: &Server| {
        let o = sb.run(&["status", "--json", "--port", &port(s)]);
        serde_json::from_str::<Value>(&stdout(&o)).unwrap()
    };
    wait_for("a.py in the first, b.py in the second", DEADLINE, || {
        (status_of(&one)["tabs"] == tabs(&[(&a, true)])
            && status_of(&two)["tabs"] == tabs(&[(&b, true)]))
        .then_some(())
    });
}

#[test]
fn proposals_are_shown_accepted_as_edited_and_reloaded() {
    let sb = Sandbox::new();
    let server = sb.serve(&[]);
    let f = sb.write("main.py", "print('old')\n");
    let mut claude = server.ready_client();
    let mut ed = Editor::start(&sb, &["--no-follow"]);
    let caps =
        json!({"workspace": {"applyEdit": true}, "window": {"showDocument": {"support": true}}});
    ed.initialize(&sb.ws(), json!({"capabilities": caps}));
    ed.open(&f, "print('old')\n");
    let tab = "✻ [Claude Code] main.py (1a2b3c) ⧉";
    let open_diff = claude.send_request(
        "tools/call",
        json!({"name": "openDiff", "arguments": {"old_file_path": f, "new_file_path": f, "new_file_contents": "print('new')\n", "tab_name": tab}}),
    );
    let m = ed.incoming("window/showMessage");
    assert_eq!(
        m["params"],
        json!({"type": 3, "message": format!("Claude Code proposes an edit to {}: the code actions on it show, accept or reject it (or `ccide diff show 1`)", f.display())})
    );
    // The proposal opens beside the editor's file, named like it (so it gets its language).
    let show = ed.incoming("window/showDocument");
    let view = sb.state().join("diffs/1/main.py");
    assert_eq!(
        show["params"],
        json!({"uri": file_uri(&view), "takeFocus": false})
    );
    assert_eq!(std::fs::read_to_string(&view).unwrap(), "print('new')\n");
    // The proposal itself is named like the file, and `proposed` links to it: kakoune names a
    // buffer after a link's target, so the other way round it opened as `proposed`.
    let proposed = sb.state().join("diffs/1/proposed");
    assert!(std::fs::symlink_metadata(&view).unwrap().is_file());
    assert_eq!(std::fs::read_link(&proposed).unwrap(), Path::new("main.py"));
    // A script that writes a new `proposed` (by renaming over it) replaces the link; showing
    // the proposal again makes that the proposal.
    let tmp = sb.root.write("new-proposal", "print('newer')\n");
    std::fs::rename(&tmp, &proposed).unwrap();
    let shown = ed.result(
        "workspace/executeCommand",
        json!({"command": "ccide.show", "arguments": [{"uri": file_uri(&f)}]}),
    );
    assert_eq!(shown["path"], json!(view));
    ed.incoming("window/showDocument");
    assert_eq!(std::fs::read_to_string(&view).unwrap(), "print('newer')\n");
    assert_eq!(std::fs::read_link(&proposed).unwrap(), Path::new("main.py"));
    std::fs::write(&view, "print('new')\n").unwrap();
    let titles = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|a| a["title"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        titles(&ed.code_actions(&f, range(0, 0, 0, 0))),
        [
            "Claude: send selection",
            "Claude: @-mention",
            "Claude: show proposed edit",
            "Claude: accept",
            "Claude: reject",
            "Claude: keep hunk 1/1",
            "Claude: drop hunk 1/1",
            "Claude: accept what is kept",
            "Claude: reject all"
        ]
    );
    // The user opens it and edits it without saving.
    ed.open(&view, "print('new')\n");
    ed.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": file_uri(&view), "version": 2}, "contentChanges": [{"range": range(0, 7, 0, 10), "text": "edited"}]}),
    );
    assert_eq!(
        titles(&ed.code_actions(&view, range(0, 0, 0, 0))),
        [
            "Claude: accept",
            "Claude: accept as edited",
            "Claude: reject"
        ]
    );
    // The proposal is no tab of the workspace.
    assert_eq!(sb.status()["tabs"], tabs(&[(&f, true)]));
    let r = ed.run_action(&f, range(0, 0, 0, 0), "Claude: accept as edited");
    assert_eq!(r["result"], Value::Null, "{r}");
    let answer = claude.response(&open_diff);
    assert_eq!(
        crate::util::texts(&answer),
        ["FILE_SAVED", "print('edited')\n"]
    );
    // The CLI writes the file; the editor's clean buffer is replaced with it, up to the line
    // break both end with.
    std::fs::write(&f, "print('edited')\n").unwrap();
    let edit = ed.incoming("workspace/applyEdit");
    assert_eq!(
        edit["params"],
        json!({"label": format!("Claude Code wrote {}", f.display()), "edit": {"changes": {file_uri(&f): [
            {"range": range(0, 0, 0, 12), "newText": "print('edited')"}]}}})
    );
    let id = edit["id"].clone();
    ed.send(&json!({"jsonrpc": "2.0", "id": id, "result": {"applied": true}}));

    // A second proposal, rejected from its own code action.
    let open_diff = claude.send_request(
        "tools/call",
        json!({"name": "openDiff", "arguments": {"old_file_path": f, "new_file_path": f, "new_file_contents": "x\n", "tab_name": tab}}),
    );
    ed.incoming("window/showMessage");
    ed.run_action(&f, range(0, 0, 0, 0), "Claude: reject");
    assert_eq!(
        crate::util::texts(&claude.response(&open_diff)),
        ["DIFF_REJECTED", tab]
    );
    // Nothing pending any more: the diff actions are gone.
    wait_for("the diff settled", DEADLINE, || {
        (titles(&ed.code_actions(&f, range(0, 0, 0, 0))).len() == 2).then_some(())
    });
}

/// Twenty lines, and the same with lines 2, 10 and 18 changed: three hunks.
fn twenty(changed: &[usize]) -> String {
    (1..=20)
        .map(|i| {
            if changed.contains(&i) {
                format!("NEW {i}\n")
            } else {
                format!("line {i}\n")
            }
        })
        .collect()
}

#[test]
fn hunks_are_shown_as_hints_decided_by_code_actions_and_what_is_kept_accepted() {
    let sb = Sandbox::new();
    let server = sb.serve(&["--no-default-checkers"]);
    let original = twenty(&[]);
    let f = sb.write("main.py", &original);
    let mut claude = server.ready_client();
    let mut ed = Editor::start(&sb, &["--no-follow"]);
    ed.initialize(&sb.ws(), json!({}));
    ed.open(&f, &original);
    let tab = "main.py (hunks)";
    let open_diff = claude.send_request(
        "tools/call",
        json!({"name": "openDiff", "arguments": {"old_file_path": f, "new_file_path": f, "new_file_contents": twenty(&[2, 10, 18]), "tab_name": tab}}),
    );
    let hint = |line: u64, n: usize, state: &str| {
        json!({"range": range(line, 0, line + 1, 0), "severity": 4, "source": "ccide",
            "message": format!("Claude proposes (hunk {n}/3{state}): NEW {}", line + 1)})
    };
    let published = ed.incoming("textDocument/publishDiagnostics");
    assert_eq!(
        published["params"],
        json!({"uri": file_uri(&f), "diagnostics": [hint(1, 1, ""), hint(9, 2, ""), hint(17, 3, "")]})
    );
    let titles = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|a| a["title"].as_str().unwrap().to_string())
            .collect()
    };
    // The cursor in hunk 2: its actions; on a line of no hunk, accepting what is kept only.
    assert_eq!(
        titles(&ed.code_actions(&f, range(9, 3, 9, 3)))[5..],
        [
            "Claude: keep hunk 2/3",
            "Claude: drop hunk 2/3",
            "Claude: accept what is kept",
            "Claude: reject all"
        ]
    );
    assert_eq!(
        titles(&ed.code_actions(&f, range(13, 0, 13, 0)))[5..],
        ["Claude: accept what is kept", "Claude: reject all"]
    );
    let r = ed.request(
        "workspace/executeCommand",
        json!({"command": "ccide.keepHunk", "arguments": [{"uri": file_uri(&f), "hunk": 4}]}),
    );
    assert_eq!(
        r["error"]["message"],
        format!("the proposal for {} has hunks 1 to 3, not 4", f.display()),
        "{r}"
    );
    for (line, title, n, state) in [
        (1, "Claude: keep hunk 1/3", 1, ", kept"),
        (17, "Claude: keep hunk 3/3", 3, ", kept"),
        (9, "Claude: drop hunk 2/3", 2, ", dropped"),
    ] {
        let r = ed.run_action(&f, range(line, 0, line, 0), title);
        assert_eq!(r["result"], Value::Null, "{r}");
        let p = ed.incoming("textDocument/publishDiagnostics")["params"].clone();
        assert_eq!(p["diagnostics"][n - 1], hint(line, n, state), "{title}");
    }
    // The CLI asks for diagnostics: the hints are the editor's alone.
    assert_eq!(
        crate::util::diagnostics(&mut claude, json!({})),
        json!([]),
        "no checker: nothing stored"
    );
    ed.backlog.clear();
    let r = ed.run_action(&f, range(0, 0, 0, 0), "Claude: accept what is kept");
    assert_eq!(r["result"], Value::Null, "{r}");
    assert_eq!(
        crate::util::texts(&claude.response(&open_diff)),
        ["FILE_SAVED".to_string(), twenty(&[2, 18])]
    );
    // Settled: the hints go, before the answer to the command (an editor may read no further
    // than the answer it waits for), and once only.
    let gone = json!({"method": "textDocument/publishDiagnostics", "jsonrpc": "2.0",
        "params": {"uri": file_uri(&f), "diagnostics": []}});
    assert_eq!(
        ed.backlog.drain(..).collect::<Vec<_>>(),
        std::slice::from_ref(&gone)
    );
    let settled = server.control(&json!({"cmd": "diff.list"}))["settled"].clone();
    assert_eq!(
        settled[0]["verdict"],
        json!({
            "kept": [1, 3],
            "dropped": [{"hunk": 2, "text": "@@ -7,7 +7,7 @@\n line 7\n line 8\n line 9\n-line 10\n+NEW 10\n line 11\n line 12\n line 13\n", "why": null}],
            "edited": [],
            "why": null,
        })
    );
    assert_eq!(settled[0]["how"], "accepted");
    // Another proposal, rejected whole from the file: every hunk recorded as dropped.
    let open_diff = claude.send_request(
        "tools/call",
        json!({"name": "openDiff", "arguments": {"old_file_path": f, "new_file_path": f, "new_file_contents": twenty(&[2, 10, 18]), "tab_name": tab}}),
    );
    ed.incoming("textDocument/publishDiagnostics");
    ed.backlog.clear();
    let r = ed.run_action(&f, range(9, 0, 9, 0), "Claude: reject all");
    assert_eq!(r["result"], Value::Null, "{r}");
    assert_eq!(ed.backlog.drain(..).collect::<Vec<_>>(), [gone]);
    assert_eq!(
        crate::util::texts(&claude.response(&open_diff)),
        ["DIFF_REJECTED", tab]
    );
    let settled = server.control(&json!({"cmd": "diff.list"}))["settled"].clone();
    let verdict = &settled[1]["verdict"];
    let dropped: Vec<&Value> = verdict["dropped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| &d["hunk"])
        .collect();
    assert_eq!(
        (&verdict["kept"], dropped),
        (&json!([]), vec![&json!(1), &json!(2), &json!(3)])
    );
    assert_eq!(settled[1]["how"], "rejected");
}

/// A key binding decides the hunk at its range (it knows no number) and gives reasons, which
/// the verdict carries to Claude Code's hooks: the hunk's, and the answer's.
#[test]
fn a_key_binding_drops_the_hunk_at_its_range_and_gives_reasons() {
    let sb = Sandbox::new();
    let server = sb.serve(&["--no-default-checkers"]);
    let original = twenty(&[]);
    let f = sb.write("main.py", &original);
    let mut claude = server.ready_client();
    let mut ed = Editor::start(&sb, &["--no-follow"]);
    ed.initialize(&sb.ws(), json!({}));
    ed.open(&f, &original);
    let open_diff = claude.send_request(
        "tools/call",
        json!({"name": "openDiff", "arguments": {"old_file_path": f, "new_file_path": f, "new_file_contents": twenty(&[2, 10, 18]), "tab_name": "main.py"}}),
    );
    ed.incoming("textDocument/publishDiagnostics");
    let mut run = |command: &str, args: Value| {
        let r = ed.request(
            "workspace/executeCommand",
            json!({"command": command, "arguments": [args]}),
        );
        r.get("error").map(|e| e["message"].clone())
    };
    let uri = file_uri(&f);
    // Line 14 is in no hunk.
    assert_eq!(
        run(
            "ccide.dropHunk",
            json!({"uri": uri, "range": range(13, 0, 13, 0)})
        ),
        Some(json!(
            "ccide.dropHunk takes a hunk's number, or a range in a hunk: [{\"uri\": ..., \"hunk\": N}]"
        ))
    );
    let why = "line 10 is read by the parser as it is";
    let drop = json!({"uri": uri, "range": range(9, 2, 9, 2), "why": why});
    assert_eq!(run("ccide.dropHunk", drop), None);
    let keep = json!({"uri": uri, "range": range(17, 0, 17, 0)});
    assert_eq!(run("ccide.keepHunk", keep), None);
    let accept = json!({"uri": uri, "why": "one change at a time"});
    assert_eq!(run("ccide.acceptKept", accept), None);
    assert_eq!(
        crate::util::texts(&claude.response(&open_diff)),
        ["FILE_SAVED".to_string(), twenty(&[18])]
    );
    let settled = server.control(&json!({"cmd": "diff.list"}))["settled"].clone();
    let verdict = &settled[0]["verdict"];
    let dropped: Vec<(&Value, &Value)> = verdict["dropped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| (&d["hunk"], &d["why"]))
        .collect();
    assert_eq!(
        (&verdict["kept"], dropped, &verdict["why"]),
        (
            &json!([3]),
            vec![(&json!(1), &Value::Null), (&json!(2), &json!(why))],
            &json!("one change at a time")
        )
    );
}

/// With `--diagnostics` the hints are published with the file's stored diagnostics, and the
/// CLI's getDiagnostics has the stored ones alone.
#[test]
fn hints_join_the_published_diagnostics_but_never_the_store() {
    let sb = Sandbox::new();
    let server = sb.serve(&["--no-default-checkers"]);
    let original = twenty(&[]);
    let f = sb.write("main.py", &original);
    let mut claude = server.ready_client();
    let mut ed = Editor::start(&sb, &["--no-follow", "--diagnostics"]);
    ed.initialize(&sb.ws(), json!({}));
    ed.open(&f, &original);
    let import = json!([{"uri": format!("file://{}", f.display()), "diagnostics": [
        {"message": "bad", "severity": "Warning", "source": "lint",
         "range": {"start": {"line": 4, "character": 0}, "end": {"line": 4, "character": 4}}}]}]);
    let o = sb.run_stdin(&["diagnostics", "import"], import.to_string().as_bytes());
    assert!(o.status.success(), "{}", crate::util::stderr(&o));
    let open_diff = claude.send_request(
        "tools/call",
        json!({"name": "openDiff", "arguments": {"old_file_path": f, "new_file_path": f, "new_file_contents": twenty(&[10]), "tab_name": "t"}}),
    );
    let warning =
        json!({"message": "bad", "severity": 2, "source": "lint", "range": range(4, 0, 4, 4)});
    let hint = json!({"range": range(9, 0, 10, 0), "severity": 4, "source": "ccide",
        "message": "Claude proposes (hunk 1/1): NEW 10"});
    wait_for("the warning and the hint in the editor", DEADLINE, || {
        let p = ed.incoming("textDocument/publishDiagnostics")["params"].clone();
        (p["diagnostics"] == json!([warning, hint])).then_some(())
    });
    let stored = crate::util::diagnostics(&mut claude, json!({}));
    assert_eq!(
        stored[0]["diagnostics"].as_array().unwrap().len(),
        1,
        "{stored}"
    );
    assert_eq!(stored[0]["diagnostics"][0]["message"], "bad", "{stored}");
    ed.run_action(&f, range(9, 0, 9, 0), "Claude: reject all");
    assert_eq!(
        crate::util::texts(&claude.response(&open_diff)),
        ["DIFF_REJECTED", "t"]
    );
    wait_for("the hint gone, the warning left", DEADLINE, || {
        let p = ed.incoming("textDocument/publishDiagnostics")["params"].clone();
        (p["diagnostics"] == json!([warning])).then_some(())
    });
}

/// Twenty lines as Claude leaves them: line 2 changed, line 10 deleted, two lines added after
/// line 18 (three hunks).
fn twenty_edited() -> String {
    twenty(&[2])
        .replace("line 10\n", "")
        .replace("line 18\n", "line 18\nadded 1\nadded 2\n")
}

/// Review after the fact in the editor: the latest turn's hunks as hints where Claude's lines
/// are, kept or undone by code action; an undo the user's edit refused is said naming the file
/// and the lines; a new turn's changes replace the hints. Never in getDiagnostics.
#[test]
fn the_latest_turns_changes_are_hints_kept_or_undone_by_code_actions() {
    use crate::turn_review::{ONE, edit, prompt};
    let sb = Sandbox::new();
    let server = sb.serve(&["--no-default-checkers"]);
    let f = sb.write("main.py", twenty(&[]));
    prompt(&sb, ONE);
    edit(&sb, ONE, &f, twenty_edited().as_bytes());
    let mut claude = server.ready_client();
    let mut ed = Editor::start(&sb, &["--no-follow"]);
    ed.initialize(&sb.ws(), json!({}));
    ed.open(&f, &twenty_edited());
    let hint = |l1: u64, l2: u64, message: &str| json!({"range": range(l1, 0, l2, 0), "severity": 4, "source": "ccide", "message": message});
    let hints = [
        hint(1, 2, "Claude changed (hunk 1/3), was: line 2"),
        hint(9, 9, "Claude changed (hunk 2/3), was: line 10"),
        hint(17, 19, "Claude added (hunk 3/3): 2 lines"),
    ];
    assert_eq!(
        ed.incoming("textDocument/publishDiagnostics")["params"],
        json!({"uri": file_uri(&f), "diagnostics": hints})
    );
    let titles = |v: Value| -> Vec<String> {
        let all = v.as_array().unwrap().iter();
        all.map(|a| a["title"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        titles(ed.code_actions(&f, range(9, 2, 9, 2))),
        [
            "Claude: send selection",
            "Claude: @-mention",
            "Claude: keep hunk 2/3",
            "Claude: undo hunk 2/3"
        ]
    );
    assert_eq!(titles(ed.code_actions(&f, range(5, 0, 5, 0))).len(), 2);
    // Kept: its hint goes, the file stays.
    let r = ed.run_action(&f, range(1, 0, 1, 0), "Claude: keep hunk 1/3");
    assert_eq!(r["result"], Value::Null, "{r}");
    assert_eq!(
        ed.incoming("textDocument/publishDiagnostics")["params"]["diagnostics"],
        json!(hints[1..])
    );
    // Undone: the file on disk loses the two lines, and the clean buffer is given the file.
    let r = ed.run_action(&f, range(18, 0, 18, 0), "Claude: undo hunk 3/3");
    assert_eq!(r["result"], Value::Null, "{r}");
    let undone = twenty(&[2]).replace("line 10\n", "");
    assert_eq!(std::fs::read_to_string(&f).unwrap(), undone);
    let apply = ed.incoming("workspace/applyEdit");
    assert_eq!(
        apply["params"]["label"],
        format!("ccide undid a hunk of Claude's change to {}", f.display())
    );
    assert_eq!(
        ed.incoming("textDocument/publishDiagnostics")["params"]["diagnostics"],
        json!(hints[1..2])
    );
    let change = json!({"textDocument": {"uri": file_uri(&f), "version": 2}, "contentChanges": [{"text": undone}]});
    ed.notify("textDocument/didChange", change);
    // The user types in hunk 2's lines: its hint goes.
    let typed = json!({"textDocument": {"uri": file_uri(&f), "version": 3}, "contentChanges": [
        {"range": range(7, 5, 7, 6), "text": "8!"}]});
    ed.notify("textDocument/didChange", typed);
    assert_eq!(
        ed.incoming("textDocument/publishDiagnostics")["params"]["diagnostics"],
        json!([])
    );
    // The user changes hunk 2's context on disk: its undo is refused, said with file and lines.
    let mine = undone.replace("line 12\n", "mine 12\n");
    std::fs::write(&f, &mine).unwrap();
    let r = ed.request(
        "workspace/executeCommand",
        json!({"command": "ccide.undoChange", "arguments": [{"uri": file_uri(&f), "change": 0, "hunk": 2}]}),
    );
    let refused = format!(
        "hunk 2 of change 0 was not undone: lines 7-12 of {} changed since Claude wrote them; nothing was written",
        f.display()
    );
    assert_eq!(r["error"]["message"], refused, "{r}");
    assert_eq!(
        ed.incoming("window/showMessage")["params"],
        json!({"type": 2, "message": format!("ccide: {refused}")})
    );
    assert_eq!(std::fs::read_to_string(&f).unwrap(), mine);
    // The CLI's getDiagnostics: the hints are the editor's alone.
    assert_eq!(crate::util::diagnostics(&mut claude, json!({})), json!([]));
    // A new turn: its changes replace the last turn's hints.
    prompt(&sb, ONE);
    edit(
        &sb,
        ONE,
        &f,
        mine.replace("line 20\n", "NEW 20\n").as_bytes(),
    );
    ed.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": file_uri(&f), "version": 3},
        "contentChanges": [{"text": mine.replace("line 20\n", "NEW 20\n")}]}),
    );
    let new = json!([hint(18, 19, "Claude changed (hunk 1/1), was: line 20")]);
    wait_for("the new turn's hint", DEADLINE, || {
        let p = ed.incoming("textDocument/publishDiagnostics")["params"].clone();
        (p["diagnostics"] == new).then_some(())
    });
    // Kept from a terminal: the hint goes.
    sb.run_ok(&["review", "keep"]);
    assert_eq!(
        ed.incoming("textDocument/publishDiagnostics")["params"]["diagnostics"],
        json!([])
    );
}

/// `selection_changed` notifications Claude Code has received so far (the server answers a
/// ping after everything it sent before it).
fn selections_so_far(claude: &mut crate::util::Client) -> Vec<Value> {
    let all = claude.before_ping();
    let (sel, rest): (Vec<Value>, Vec<Value>) = all
        .into_iter()
        .partition(|m| m["method"] == "selection_changed");
    claude.backlog.extend(rest);
    sel.into_iter().map(|m| m["params"].clone()).collect()
}

#[test]
fn choosing_send_selection_from_the_menu_sends_it_once() {
    let sb = Sandbox::new();
    let server = sb.serve(&[]);
    let f = sb.write("wide.py", WIDE);
    let mut claude = server.ready_client();
    let mut ed = Editor::start(&sb, &[]);
    ed.initialize(&sb.ws(), json!({}));
    ed.open(&f, WIDE);
    let want = |text: &str, c1: u64, c2: u64| {
        json!({"text": text, "filePath": f, "fileUrl": format!("file://{}", f.display()),
            "selection": {"start": {"line": 1, "character": c1}, "end": {"line": 1, "character": c2}, "isEmpty": false}})
    };
    // A person reads the menu for longer than the 100 ms after which the selection follows the
    // code action request: the follow-up sends it, choosing the action does not send it again.
    let actions = ed.code_actions(&f, range(1, 9, 1, 14));
    let n = claude.notification("selection_changed");
    assert_eq!(n["params"], want("é世😀x", 9, 14));
    let send = actions[0]["command"].clone();
    assert_eq!(send["command"], "ccide.select");
    let r = ed.request("workspace/executeCommand", send.clone());
    assert_eq!(r["result"], Value::Null, "{r}");
    assert_eq!(selections_so_far(&mut claude), Vec::<Value>::new());
    // Chosen at once, before the follow-up: sent once, by the choice.
    let actions = ed.code_actions(&f, range(1, 9, 1, 11));
    ed.request("workspace/executeCommand", actions[0]["command"].clone());
    assert_eq!(selections_so_far(&mut claude), [want("é世", 9, 11)]);
    let late = claude.drain(Duration::from_millis(300));
    assert!(
        late.iter().all(|m| m["method"] != "selection_changed"),
        "{late:?}"
    );
    // A key binding (executeCommand alone) sends each time it is pressed, the same selection
    // included: Claude Code may have been told another one meanwhile.
    for _ in 0..2 {
        ed.request("workspace/executeCommand", send.clone());
        assert_eq!(selections_so_far(&mut claude), [want("é世😀x", 9, 14)]);
    }
}

/// A line with an accented letter, a space and an emoji (two UTF-16 units, four bytes).
pub(crate) const HELLO: &str = "def greet():\n    print(\"héllo wörld 🦀\")\n";

#[test]
fn kakoune_lsps_inclusive_selection_end_is_taken_in() {
    let sb = Sandbox::new();
    let server = sb.serve(&[]);
    let f = sb.write("hello.py", HELLO);
    let mut claude = server.ready_client();
    let mut ed = Editor::start(&sb, &["--no-follow"]);
    // What kakoune-lsp 22.0.0 sends about itself (it offers UTF-8 first; ccide takes UTF-16).
    let kak = json!({"clientInfo": {"name": "kakoune-lsp", "version": "22.0.0"},
        "capabilities": {"general": {"positionEncodings": ["utf-8", "utf-16"]}}});
    let r = ed.initialize(&sb.ws(), kak);
    assert_eq!(r["capabilities"]["positionEncoding"], "utf-16");
    ed.open(&f, HELLO);
    // `héllo wörld 🦀` selected in kakoune: kakoune-lsp's range ends on the crab.
    ed.run_action(&f, range(1, 11, 1, 23), "Claude: send selection");
    let n = claude.notification("selection_changed");
    assert_eq!(
        n["params"],
        json!({"text": "héllo wörld 🦀", "filePath": f, "fileUrl": format!("file://{}", f.display()),
            "selection": {"start": {"line": 1, "character": 11}, "end": {"line": 1, "character": 25}, "isEmpty": false}})
    );
    // `print`, ending on its `t`; kakoune's cursor (one character, sent as an empty range) stays
    // a cursor.
    ed.run_action(&f, range(1, 4, 1, 8), "Claude: send selection");
    assert_eq!(
        claude.notification("selection_changed")["params"]["text"],
        "print"
    );
    ed.run_action(&f, range(1, 4, 1, 4), "Claude: send selection");
    let n = claude.notification("selection_changed");
    assert_eq!(
        (
            n["params"]["text"].clone(),
            n["params"]["selection"]["isEmpty"].clone()
        ),
        (json!(""), json!(true))
    );
}

#[test]
fn ales_byte_columns_are_read_as_bytes() {
    let sb = Sandbox::new();
    let server = sb.serve(&[]);
    let f = sb.write("hello.py", HELLO);
    let mut claude = server.ready_client();
    let mut ed = Editor::start(&sb, &["--no-follow"]);
    // ALE 3.3's `initialize`: no clientInfo, these capabilities (cut to what tells it apart).
    let ale = json!({"clientInfo": null, "initializationOptions": {}, "capabilities": {
        "workspace": {"applyEdit": false, "workspaceFolders": false, "configuration": false},
        "textDocument": {"codeAction": {"dynamicRegistration": false,
            "codeActionLiteralSupport": {"codeActionKind": {"valueSet": []}}}}}});
    let r = ed.initialize(&sb.ws(), ale);
    assert_eq!(r["capabilities"]["positionEncoding"], "utf-8");
    ed.open(&f, HELLO);
    // `wörld 🦀` selected in vim: ALE sends vim's byte columns (19 and 26, 1-based, both
    // inclusive) as 18 and 26.
    ed.run_action(&f, range(1, 18, 1, 26), "Claude: send selection");
    let n = claude.notification("selection_changed");
    assert_eq!(
        n["params"],
        json!({"text": "wörld 🦀", "filePath": f, "fileUrl": format!("file://{}", f.display()),
            "selection": {"start": {"line": 1, "character": 17}, "end": {"line": 1, "character": 25}, "isEmpty": false}})
    );
}

#[test]
fn a_ccide_lsp_started_for_a_proposal_attaches_to_the_server_that_made_it() {
    let sb = Sandbox::new();
    let server = sb.serve(&[]);
    let f = sb.write("main.py", "print('old')\n");
    let mut claude = server.ready_client();
    let mut ed = Editor::start(&sb, &["--no-follow"]);
    ed.initialize(&sb.ws(), json!({}));
    ed.open(&f, "print('old')\n");
    let tab = "✻ [Claude Code] main.py (1a2b3c) ⧉";
    let open_diff = claude.send_request(
        "tools/call",
        json!({"name": "openDiff", "arguments": {"old_file_path": f, "new_file_path": f, "new_file_contents": "print('new')\n", "tab_name": tab}}),
    );
    ed.incoming("window/showMessage");
    let shown = ed.result(
        "workspace/executeCommand",
        json!({"command": "ccide.show", "arguments": [{"uri": file_uri(&f)}]}),
    );
    let view = PathBuf::from(shown["path"].as_str().unwrap());
    assert_eq!(view, sb.state().join("diffs/1/main.py"));
    // The user opens it, and the editor (eglot's M-x eglot, kakoune-lsp) starts a ccide lsp for
    // its directory alone.
    let mut second = Editor::start(&sb, &["--no-follow"]);
    second.initialize(view.parent().unwrap(), json!({}));
    second.open(&view, "print('new')\n");
    second.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": file_uri(&view), "version": 2}, "contentChanges": [{"text": "print('edited')\n"}]}),
    );
    let titles = wait_for("the proposal's actions", DEADLINE, || {
        let a = second.code_actions(&view, range(0, 0, 0, 0));
        let t: Vec<String> = a
            .as_array()
            .unwrap()
            .iter()
            .map(|a| a["title"].as_str().unwrap().to_string())
            .collect();
        (!t.is_empty()).then_some(t)
    });
    assert_eq!(
        titles,
        [
            "Claude: accept",
            "Claude: accept as edited",
            "Claude: reject"
        ]
    );
    // Not a new IDE: one lock file, the proposal is no tab.
    assert_eq!(
        list_locks(&sb.config().join("ide")),
        vec![server.lock_path.clone()]
    );
    assert_eq!(sb.status()["tabs"], tabs(&[(&f, true)]));
    let r = second.run_action(&view, range(0, 0, 0, 0), "Claude: accept as edited");
    assert_eq!(r["result"], Value::Null, "{r}");
    assert_eq!(
        crate::util::texts(&claude.response(&open_diff)),
        ["FILE_SAVED", "print('edited')\n"]
    );
    assert_eq!(second.quit(), 0);
    assert_eq!(ed.quit(), 0);
}

#[test]
fn a_proposal_of_a_server_gone_is_not_served_as_a_workspace() {
    let sb = Sandbox::new();
    let mut server = sb.serve(&[]);
    let f = sb.write("main.py", "old\n");
    let mut claude = server.ready_client();
    claude.send_request(
        "tools/call",
        json!({"name": "openDiff", "arguments": {"old_file_path": f, "new_file_path": f, "new_file_contents": "new\n", "tab_name": "t"}}),
    );
    let dir = sb.state().join("diffs/1");
    wait_for("the diff directory", DEADLINE, || {
        dir.is_dir().then_some(())
    });
    let view = dir.join("main.py");
    std::fs::write(&view, "new\n").unwrap();
    server.stop_with("KILL");
    let mut ed = Editor::start(&sb, &[]);
    ed.initialize(&dir, json!({}));
    ed.open(&view, "new\n");
    let m = ed.incoming("window/logMessage");
    assert_eq!(
        m["params"]["message"],
        format!(
            "ccide: {} is in the state directory of a ccide server that is not running ({}): its proposals went with it",
            dir.display(),
            sb.state().display()
        )
    );
    // Nor is the proposal's folder served instead: nothing is even tried.
    assert_eq!(ed.quit(), 0);
    assert!(
        ed.backlog
            .iter()
            .all(|m| m["method"] != "window/showMessage"),
        "{:?}",
        ed.backlog
    );
    // Only the killed server's lock file, none of an IDE for the proposal.
    assert_eq!(
        list_locks(&sb.config().join("ide")),
        vec![server.lock_path.clone()]
    );
}

#[test]
fn shutdown_stops_a_served_folder_before_exit() {
    let sb = Sandbox::new();
    let a = sb.write("a.py", "a\n");
    let mut ed = Editor::start(&sb, &[]);
    ed.initialize(&sb.ws(), json!({}));
    ed.open(&a, "a\n");
    let s = status_where(&sb, "a.py open", |s| s["tabs"] == tabs(&[(&a, true)]));
    assert_eq!(s["pid"], ed.child.id());
    let lock = sb.config().join(format!("ide/{}.lock", s["port"]));
    // eglot 1.9 kills the server right after `exit`: by the answer to `shutdown` the served
    // folder is stopped and its lock file gone.
    assert_eq!(ed.result("shutdown", Value::Null), Value::Null);
    assert!(!lock.exists(), "the lock file outlived shutdown");
    ed.notify("exit", Value::Null);
    ed.child.kill().unwrap();
    ed.child.wait().unwrap();
    assert!(!lock.exists());
    // The folder can be served again at once: its state directory is free.
    let _again = sb.serve(&[]);
}

#[test]
fn events_after_shutdown_are_ignored_until_exit() {
    let sb = Sandbox::new();
    let server = sb.serve(&[]);
    let f = sb.write("main.py", "old\n");
    let mut claude = server.ready_client();
    let mut ed = Editor::start(&sb, &[]);
    ed.initialize(&sb.ws(), json!({}));
    ed.open(&f, "old\n");
    status_where(&sb, "main.py open", |s| s["tabs"] == tabs(&[(&f, true)]));
    assert_eq!(ed.result("shutdown", Value::Null), Value::Null);
    // The server still streams events to the ccide lsp that shut down: a proposal.
    claude.send_request(
        "tools/call",
        json!({"name": "openDiff", "arguments": {"old_file_path": f, "new_file_path": f, "new_file_contents": "new\n", "tab_name": "t"}}),
    );
    sb.wait_for_listing(&["diff", "--json"], 1);
    // Still answering: a request after `shutdown` is an InvalidRequest, as LSP says.
    let r = ed.request("textDocument/hover", json!({}));
    assert_eq!(
        r["error"],
        json!({"code": -32600, "message": "textDocument/hover after shutdown"})
    );
    ed.notify("exit", Value::Null);
    let child = &mut ed.child;
    let status = wait_for("ccide lsp to exit", DEADLINE, || child.try_wait().unwrap());
    assert_eq!(status.code(), Some(0));
}

#[test]
fn diagnostics_of_open_files_are_published_with_the_flag() {
    let sb = Sandbox::new();
    let _server = sb.serve(&["--no-default-checkers"]);
    let f = sb.write("wide.py", WIDE);
    let mut ed = Editor::start(&sb, &["--diagnostics"]);
    let caps = json!({"general": {"positionEncodings": ["utf-8"]}});
    ed.initialize(&sb.ws(), json!({"capabilities": caps}));
    ed.open(&f, WIDE);
    let first = ed.incoming("textDocument/publishDiagnostics");
    assert_eq!(
        first["params"],
        json!({"uri": file_uri(&f), "diagnostics": []})
    );
    // Stored positions count UTF-16 units; this editor asked for UTF-8.
    let import = json!([{"uri": format!("file://{}", f.display()), "diagnostics": [
        {"message": "bad", "severity": "Warning", "source": "lint", "code": "W1",
         "range": {"start": {"line": 1, "character": 13}, "end": {"line": 1, "character": 14}}}]}]);
    let o = sb.run_stdin(&["diagnostics", "import"], import.to_string().as_bytes());
    assert!(o.status.success(), "{}", crate::util::stderr(&o));
    let n = ed.incoming("textDocument/publishDiagnostics");
    assert_eq!(
        n["params"],
        json!({"uri": file_uri(&f), "diagnostics": [{"message": "bad", "severity": 2, "source": "lint", "code": "W1",
            "range": {"start": {"line": 1, "character": 18}, "end": {"line": 1, "character": 19}}}]})
    );
}

/// A saved file the editor opens is checked (VS Code reports every open editor's diagnostics):
/// its errors reach the editor and getDiagnostics {}, though Claude Code never asked about
/// it; saved fixed, its errors go.
#[test]
fn an_open_files_errors_reach_the_editor_and_claude_code() {
    let sb = Sandbox::new();
    let script = sb.script("check.sh", crate::checkers::TWO_ERRORS);
    let spec = format!("*.py=compiler:{} {{file}}", script.display());
    let server = sb.serve(&["--no-default-checkers", "--checker", &spec]);
    let f = sb.write("bad.py", "bad\n  bad\n");
    let mut claude = server.ready_client();
    let mut ed = Editor::start(&sb, &["--diagnostics"]);
    ed.initialize(&sb.ws(), json!({}));
    ed.open(&f, "bad\n  bad\n");
    let error = |message: &str, code: &str, l, c| json!({"message": message, "severity": 1, "source": "check.sh", "code": code, "range": range(l, c, l, c)});
    let published = |ed: &mut Editor, n: usize| {
        wait_for("the check's diagnostics in the editor", DEADLINE, || {
            let p = ed.incoming("textDocument/publishDiagnostics")["params"].clone();
            (p["diagnostics"].as_array().unwrap().len() == n).then_some(p)
        })
    };
    assert_eq!(
        published(&mut ed, 2),
        json!({"uri": file_uri(&f), "diagnostics": [error("one", "X1", 0, 0), error("two", "X2", 1, 2)]})
    );
    let all = crate::util::diagnostics(&mut claude, json!({}));
    assert_eq!(all[0]["uri"], crate::util::uri(&f), "{all}");
    assert_eq!(all[0]["diagnostics"].as_array().unwrap().len(), 2, "{all}");
    // Fixed and saved at once, before the unsaved text was pushed.
    ed.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": file_uri(&f), "version": 2}, "contentChanges": [{"text": "good\n"}]}),
    );
    std::fs::write(&f, "good\n").unwrap();
    ed.notify(
        "textDocument/didSave",
        json!({"textDocument": {"uri": file_uri(&f)}}),
    );
    assert_eq!(
        published(&mut ed, 0),
        json!({"uri": file_uri(&f), "diagnostics": []})
    );
}

// ---------------------------------------------------------------------------
// Editors that misbehave, servers that come and go

/// LSP says a request before `initialize` is answered -32002 (ServerNotInitialized).
#[test]
fn requests_before_initialize_are_refused_server_not_initialized() {
    let sb = Sandbox::new();
    let _server = sb.serve(&[]);
    let mut ed = Editor::start(&sb, &[]);
    let r = ed.request("textDocument/codeAction", json!({}));
    assert_eq!(
        r["error"],
        json!({"code": -32002, "message": "textDocument/codeAction before initialize"})
    );
    ed.initialize(&sb.ws(), json!({}));
    assert_eq!(ed.quit(), 0);
}

/// A change item whose `text` is null emptied the document; it is refused (shown as an error:
/// a notification has no answer) and the buffer kept.
#[test]
fn a_change_without_text_is_refused_and_the_buffer_kept() {
    let sb = Sandbox::new();
    let _server = sb.serve(&[]);
    let a = sb.write("a.py", "one\ntwo\n");
    let mut ed = Editor::start(&sb, &[]);
    ed.initialize(&sb.ws(), json!({}));
    ed.open(&a, "one\ntwo\n");
    ed.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": file_uri(&a), "version": 2}, "contentChanges": [{"range": range(1, 0, 1, 3), "text": null}]}),
    );
    let shown = ed.incoming("window/showMessage");
    assert_eq!(shown["params"]["type"], 1);
    let m = shown["params"]["message"].as_str().unwrap();
    assert!(
        m.starts_with(&format!(
            "ccide: change 1 of 1 to {} has no \"text\"",
            a.display()
        )),
        "{m}"
    );
    ed.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": file_uri(&a), "version": 3}, "contentChanges": [{"range": range(1, 0, 1, 3), "text": "TWO"}]}),
    );
    status_where(&sb, "one\\nTWO\\n unsaved", |s| {
        s["documents"] == json!([{"path": a, "bytes": 8}])
    });
}

/// Two editors have a.py open and B typed in it: A closing it leaves B's tab and buffer.
#[test]
fn a_file_two_editors_have_open_stays_until_the_last_one_closes_it() {
    let sb = Sandbox::new();
    let _server = sb.serve(&[]);
    let a = sb.write("a.py", "a\n");
    let (mut one, mut two) = (Editor::start(&sb, &[]), Editor::start(&sb, &[]));
    one.initialize(&sb.ws(), json!({}));
    two.initialize(&sb.ws(), json!({}));
    one.open(&a, "a\n");
    two.open(&a, "a\n");
    two.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": file_uri(&a), "version": 2}, "contentChanges": [{"text": "typed\n"}]}),
    );
    status_where(&sb, "B's buffer", |s| {
        s["documents"] == json!([{"path": a, "bytes": 6}])
    });
    one.notify(
        "textDocument/didClose",
        json!({"textDocument": {"uri": file_uri(&a)}}),
    );
    // Answered after the close was handled.
    assert_eq!(one.code_actions(&a, range(0, 0, 0, 0)), json!([]));
    let s = sb.status();
    assert_eq!(
        (&s["tabs"], &s["documents"]),
        (&tabs(&[(&a, true)]), &json!([{"path": a, "bytes": 6}]))
    );
    two.notify(
        "textDocument/didClose",
        json!({"textDocument": {"uri": file_uri(&a)}}),
    );
    status_where(&sb, "a.py closed by its last holder", |s| {
        s["tabs"] == json!([]) && s["documents"] == json!([])
    });
}

/// The lock files of live servers this process runs.
fn locks_of(sb: &Sandbox, pid: u32) -> Vec<PathBuf> {
    std::fs::read_dir(sb.config().join("ide"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            let v: Value = std::fs::read(p)
                .ok()
                .and_then(|b| serde_json::from_slice(&b).ok())
                .unwrap_or_default();
            v["pid"] == pid
        })
        .collect()
}

/// neovim started in `~` (the README's `root_dir = getcwd()`) served `~` itself at once: inside
/// the project `ccide status` then said "several servers", and the selections went to the
/// editor's own server. A file belongs to the nearest server; a stand-in is the last resort,
/// and never beside a server of a folder inside its own.
#[test]
fn an_editor_opened_above_the_project_serves_nothing_and_selects_for_the_project() {
    let sb = Sandbox::new();
    let server = sb.serve(&[]);
    let a = sb.write("a.py", "x = 1\n");
    let mut claude = server.ready_client();
    let mut ed = Editor::start(&sb, &["--no-follow"]);
    ed.initialize(&sb.root.0, json!({}));
    ed.open(&a, "x = 1\n");
    ed.run_action(&a, range(0, 0, 0, 1), "Claude: send selection");
    assert_eq!(
        claude.notification("selection_changed")["params"]["text"],
        "x"
    );
    assert_eq!(sb.status()["pid"], server.pid());
    // A file no server holds is left alone, and the log says why.
    let notes = sb.root.write("notes.py", "n\n");
    ed.open(&notes, "n\n");
    let why = ed.recv_where("why notes.py is left alone", |v| {
        v["method"] == "window/logMessage"
            && v["params"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("does not serve"))
    });
    assert_eq!(
        why["params"]["message"],
        format!(
            "ccide: no ccide server is running for {root} (start one there with `ccide serve`, or pass --port); ccide lsp does not serve {root} itself while the server on port {} serves {}: Claude Code connects to no IDE when two servers hold its folder",
            server.port,
            sb.ws().display(),
            root = sb.root.0.display()
        )
    );
    assert_eq!(locks_of(&sb, ed.child.id()), Vec::<PathBuf>::new());
    assert_eq!(sb.status()["pid"], server.pid());
}

/// The project's server away for more than 3 s: the editor serves the folder itself; when the
/// project's server returns, the tabs and unsaved buffers are handed over and the stand-in
/// stops, so only one lock file names the folder.
#[test]
fn a_stand_in_hands_over_to_the_projects_server_when_it_returns() {
    let sb = Sandbox::new();
    let mut server = sb.serve(&[]);
    let a = sb.write("a.py", "a\n");
    let mut ed = Editor::start(&sb, &[]);
    ed.initialize(&sb.ws(), json!({}));
    ed.open(&a, "a edited\n");
    status_where(&sb, "a.py unsaved", |s| {
        s["documents"] == json!([{"path": a, "bytes": 9}])
    });
    server.stop_with("TERM");
    let pid = ed.child.id();
    wait_for(
        "the editor serving its folder",
        Duration::from_secs(15),
        || {
            let o = sb.run(&["status", "--json"]);
            let s: Value = serde_json::from_str(&stdout(&o)).ok()?;
            (s["pid"] == pid && s["documents"] == json!([{"path": a, "bytes": 9}])).then_some(())
        },
    );
    // Edited meanwhile.
    ed.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": file_uri(&a), "version": 2}, "contentChanges": [{"text": "a edited again\n"}]}),
    );
    let server = sb.serve(&[]);
    let port = server.port.to_string();
    wait_for("the hand-over", Duration::from_secs(15), || {
        let o = sb.run(&["status", "--json", "--port", &port]);
        let s: Value = serde_json::from_str(&stdout(&o)).ok()?;
        let handed =
            s["tabs"] == tabs(&[(&a, true)]) && s["documents"] == json!([{"path": a, "bytes": 15}]);
        (handed && locks_of(&sb, pid).is_empty()).then_some(())
    });
    // One server for the folder again: the commands (and the CLI) find it.
    assert_eq!(sb.status()["pid"], server.pid());
    let mut claude = server.ready_client();
    ed.run_action(&a, range(0, 0, 0, 1), "Claude: send selection");
    assert_eq!(
        claude.notification("selection_changed")["params"]["text"],
        "a"
    );
}

/// A save of the editor state that failed (a full disk; here a directory in its place) made
/// `ccide lsp` drop the document for good. It is "done, but not saved": the user is told once,
/// and once the disk has room the next change is saved.
#[test]
fn after_a_failed_save_of_the_editor_state_the_next_change_goes_through() {
    let sb = Sandbox::new();
    let _server = sb.serve(&[]);
    let a = sb.write("a.py", "a\n");
    let mut ed = Editor::start(&sb, &[]);
    ed.initialize(&sb.ws(), json!({}));
    ed.open(&a, "a\n");
    status_where(&sb, "a.py open", |s| s["tabs"] == tabs(&[(&a, true)]));
    let saved = sb.state().join("editor.json");
    std::fs::remove_file(&saved).unwrap();
    std::fs::create_dir_all(saved.join("full")).unwrap();
    let change = |ed: &mut Editor, v: u64, text: &str| {
        ed.notify(
            "textDocument/didChange",
            json!({"textDocument": {"uri": file_uri(&a), "version": v}, "contentChanges": [{"text": text}]}),
        );
    };
    change(&mut ed, 2, "b\n");
    let shown = ed.incoming("window/showMessage");
    let m = shown["params"]["message"].as_str().unwrap();
    assert!(
        m.starts_with("ccide: done, but not saved: cannot save the editor state to"),
        "{m}"
    );
    status_where(&sb, "b held", |s| {
        s["documents"] == json!([{"path": a, "bytes": 2}])
    });
    std::fs::remove_dir_all(&saved).unwrap();
    change(&mut ed, 3, "c c\n");
    wait_for("the change saved", DEADLINE, || {
        std::fs::read_to_string(&saved)
            .ok()
            .filter(|t| t.contains(r#""c c\n""#))
    });
    ed.notify(
        "textDocument/didClose",
        json!({"textDocument": {"uri": file_uri(&a)}}),
    );
    status_where(&sb, "a.py closed", |s| {
        s["tabs"] == json!([]) && s["documents"] == json!([])
    });
}

/// A person who types `ccide lsp` in a terminal is told, on stderr, what it is and that it
/// waits; an editor, whose pipe is no terminal, is told nothing.
#[test]
fn lsp_started_in_a_terminal_says_it_is_meant_for_an_editor() {
    use std::io::Read;
    use std::process::{Command, Stdio};
    let note = "ccide lsp speaks LSP on standard input and output and is meant to be started by \
                an editor (see `ccide help lsp`); it now waits for LSP messages: Ctrl-C ends it";
    let sb = Sandbox::new();
    // script(1) (util-linux, in every Debian) runs it on a pseudo-terminal of its own.
    let script = Path::new("/usr/bin/script");
    assert!(
        script.is_file(),
        "script (util-linux) is not at /usr/bin/script"
    );
    let mut child = Command::new(script)
        .args([
            "-q",
            "-e",
            "-c",
            &format!("exec {} lsp", crate::util::BIN),
            "/dev/null",
        ])
        .env_clear()
        .env("HOME", sb.home())
        .env("CLAUDE_CONFIG_DIR", sb.config())
        .current_dir(sb.ws())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut out = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = out.read(&mut buf) {
            let _ = tx.send(buf[..n].to_vec());
        }
    });
    let mut seen = Vec::new();
    let said = wait_for("the note on the terminal", DEADLINE, || {
        seen.extend(rx.try_iter().flatten());
        let text = String::from_utf8_lossy(&seen).into_owned();
        text.contains("\r\n").then_some(text)
    });
    // It goes on: still running, waiting for LSP messages.
    assert_eq!(child.try_wait().unwrap(), None, "it exited after {said:?}");
    let _ = child.kill();
    let _ = child.wait();
    // The terminal shows the line as written, ended by the terminal's newline.
    assert_eq!(said, format!("{note}\r\n"));
    // An editor's pipe: not a word on stderr.
    let o = sb.command(&["lsp"]).stdin(Stdio::null()).output().unwrap();
    assert_eq!(crate::util::stderr(&o), "");
}
