//! Every control command, parsed as `Request` and answered by `handle` from a state in a
//! temporary directory (no socket): the exact JSON `ccide diff`, `select`, `status`, `ccide lsp`
//! ... read. Then the request type itself, editor sessions, and the client against a scripted
//! peer.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::handler::handle;
use super::protocol::Request;
use crate::rpc::RequestId;
use crate::rpc::call::{Call, Reply};
use crate::rpc::clients::Client;
use crate::state::exec::Mode;
use crate::state::testing::{TestState, sent, state, state_with};

/// The answer to a request line's JSON on a plain connection.
fn ask(ts: &TestState, req: Value) -> Value {
    match Request::parse(req) {
        Ok(r) => handle(&ts.state, None, r),
        Err(e) => failure(&e),
    }
}

fn failure(message: &str) -> Value {
    json!({"ok": false, "error": message})
}

/// A client that finished its setup (initialized and greeted).
fn client(ts: &TestState) -> Arc<Client> {
    let c = ts.client(true);
    c.state.lock().unwrap().greeted = true;
    c
}

fn abs(ts: &TestState, rel: &str) -> String {
    ts.ws().join(rel).to_string_lossy().into_owned()
}

fn write(ts: &TestState, rel: &str, content: &str) -> String {
    ts.write(rel, content).to_string_lossy().into_owned()
}

fn url(p: &str) -> String {
    format!("file://{p}")
}

fn notification(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "method": method, "params": params})
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

/// The message of `Workspaces::resolve` for a path outside the workspace.
fn outside(ts: &TestState, lexical: &Path) -> String {
    format!(
        "{} is outside the workspace folders; ccide only touches files under {}",
        lexical.display(),
        ts.ws().display()
    )
}

/// Starts a tool call that answers later (openDiff, executeCode); returns its id.
fn call_later(ts: &TestState, client: &Arc<Client>, id: u64, name: &str, args: Value) -> RequestId {
    let id = RequestId::number(id);
    let call = Call { client, id: &id };
    match crate::tools::call(&ts.state, &call, json!({"name": name, "arguments": args})) {
        Reply::Later => id,
        Reply::Now(r) => panic!("{name} answered at once: {r:?}"),
    }
}

fn open_diff(ts: &TestState, client: &Arc<Client>, id: u64, rel: &str, tab: &str) -> RequestId {
    let p = abs(ts, rel);
    call_later(
        ts,
        client,
        id,
        "openDiff",
        json!({"old_file_path": p, "new_file_path": p, "new_file_contents": format!("new {rel}\n"), "tab_name": tab}),
    )
}

/// The result sent to `client` for call `id`, waiting at most 20 s.
fn answer(client: &Client, id: &RequestId) -> Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(m) = sent(client).into_iter().find(|m| m["id"] == id.to_value()) {
            return m["result"].clone();
        }
        assert!(Instant::now() < deadline, "no answer to call {id}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn texts(items: &[&str]) -> Value {
    json!({"content": items.iter().map(|t| json!({"type": "text", "text": t})).collect::<Vec<_>>()})
}

fn described(ts: &TestState, id: u64, rel: &str, tab: &str, created: &Value) -> Value {
    json!({
        "id": id.to_string(), "tab_name": tab, "file": abs(ts, rel), "new_file": false,
        "client": 1, "created": created, "dir": ts.root.join(format!("state/diffs/{id}")),
    })
}

// ---------------------------------------------------------------------------
// diff.list, diff.find, diff.settle

#[test]
fn diff_list_and_find_name_a_diff_by_id_tab_or_path() {
    let ts = state();
    let c = client(&ts);
    let ws = ts.ws().to_string_lossy().into_owned();
    assert_eq!(
        ask(&ts, json!({"cmd": "diff.list"})),
        json!({"ok": true, "diffs": [], "settled": []})
    );
    assert_eq!(
        ask(&ts, json!({"cmd": "diff.find"})),
        json!({"ok": false, "error": "no pending diffs", "kind": "not_found"})
    );
    write(&ts, "a.txt", "a\n");
    write(&ts, "sub/b.txt", "b\n");
    open_diff(&ts, &c, 1, "a.txt", "tab a");
    open_diff(&ts, &c, 2, "sub/b.txt", "tab b");
    let list = ask(&ts, json!({"cmd": "diff.list"}));
    let d1 = described(&ts, 1, "a.txt", "tab a", &list["diffs"][0]["created"]);
    let d2 = described(&ts, 2, "sub/b.txt", "tab b", &list["diffs"][1]["created"]);
    assert_eq!(list, json!({"ok": true, "diffs": [d1, d2], "settled": []}));
    assert!(d1["created"].as_u64().unwrap() >= crate::text::unix_secs(ts.state.started));
    for (target, cwd, want) in [
        ("1", "/", &d1),
        ("tab b", "/", &d2),
        ("a.txt", ws.as_str(), &d1),
        ("b.txt", &format!("{ws}/sub"), &d2),
        ("../a.txt", &format!("{ws}/sub"), &d1),
        (&abs(&ts, "sub/b.txt"), "/", &d2),
    ] {
        assert_eq!(
            ask(
                &ts,
                json!({"cmd": "diff.find", "target": target, "cwd": cwd})
            ),
            json!({"ok": true, "diff": want}),
            "{target} in {cwd}"
        );
    }
    assert_eq!(
        ask(&ts, json!({"cmd": "diff.find"})),
        json!({
            "ok": false,
            "error": format!("2 diffs are pending; name one:\n  1  {}\n  2  {}", abs(&ts, "a.txt"), abs(&ts, "sub/b.txt")),
            "kind": "ambiguous",
        })
    );
    assert_eq!(
        ask(&ts, json!({"cmd": "diff.find", "target": "9", "cwd": ws})),
        json!({"ok": false, "error": "no pending diff named 9", "kind": "not_found"})
    );
    // Finding answers nobody.
    assert_eq!(sent(&c), Vec::<Value>::new());
}

/// The review's verdict is kept with the settled diff: in the answer, in diff.list's
/// `settled`, and in the `diff_settled` event (ccide-protocol(7) §5.5).
#[test]
fn diff_settle_keeps_the_verdict_with_the_settled_diff() {
    let ts = state();
    let c = client(&ts);
    write(&ts, "a.txt", "a\n");
    let first = open_diff(&ts, &c, 1, "a.txt", "tab a");
    let events = Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = events.clone();
    ts.state.events.subscribe_with(Box::new(move |line| {
        seen.lock().unwrap().push(line.to_string());
        true
    }));
    let verdict = json!({"kept": [], "dropped": [{"hunk": 1, "text": "@@ -1 +1 @@\n-a\n+new a.txt\n", "why": "keep a"}], "edited": [], "why": "not now"});
    let settled = ask(
        &ts,
        json!({"cmd": "diff.settle", "target": "1", "accept": false, "verdict": verdict}),
    );
    assert_eq!(settled["diff"]["verdict"], verdict, "{settled}");
    assert_eq!(answer(&c, &first), texts(&["DIFF_REJECTED", "tab a"]));
    assert_eq!(
        ask(&ts, json!({"cmd": "diff.list"}))["settled"],
        json!([{"id": "1", "tab_name": "tab a", "how": "rejected", "verdict": verdict}])
    );
    // The event names the dropped hunks without their text, which may be large.
    let settled_event: Value = events
        .lock()
        .unwrap()
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|e| e["event"] == "diff_settled")
        .unwrap();
    assert_eq!(
        settled_event["verdict"],
        json!({"kept": [], "dropped": [{"hunk": 1, "why": "keep a"}], "edited": [], "why": "not now"})
    );
    assert_eq!(
        ask(
            &ts,
            json!({"cmd": "diff.settle", "target": "1", "verdict": "no"})
        ),
        failure("bad verdict: expected an object")
    );
}

#[test]
fn diff_settle_accepts_rejects_and_says_why_not() {
    let ts = state();
    let c = client(&ts);
    let ws = ts.ws().to_string_lossy().into_owned();
    let a = write(&ts, "a.txt", "a\n");
    write(&ts, "b.txt", "b\n");
    let first = open_diff(&ts, &c, 1, "a.txt", "tab a");
    let second = open_diff(&ts, &c, 2, "b.txt", "tab b");
    let created = ask(&ts, json!({"cmd": "diff.list"}))["diffs"][0]["created"].clone();
    assert_eq!(
        ask(&ts, json!({"cmd": "diff.settle", "accept": true})),
        json!({
            "ok": false,
            "error": format!("2 diffs are pending; name one:\n  1  {a}\n  2  {}", abs(&ts, "b.txt")),
            "kind": "ambiguous",
        })
    );
    assert_eq!(
        ask(
            &ts,
            json!({"cmd": "diff.settle", "target": "1", "accept": true})
        ),
        json!({"ok": true, "diff": described(&ts, 1, "a.txt", "tab a", &created)})
    );
    assert_eq!(answer(&c, &first), texts(&["FILE_SAVED", "new a.txt\n"]));
    assert_eq!(std::fs::read_to_string(&a).unwrap(), "a\n");
    for target in ["1", "tab a"] {
        assert_eq!(
            ask(
                &ts,
                json!({"cmd": "diff.settle", "target": target, "accept": false})
            ),
            json!({"ok": false, "error": "diff 1 was already accepted", "kind": "already_settled"}),
            "{target}"
        );
    }
    // Without "accept": true it is a rejection.
    let settled = ask(
        &ts,
        json!({"cmd": "diff.settle", "target": "b.txt", "cwd": ws}),
    );
    assert_eq!(settled["ok"], true, "{settled}");
    assert_eq!(settled["diff"]["id"], "2");
    assert_eq!(answer(&c, &second), texts(&["DIFF_REJECTED", "tab b"]));
    assert_eq!(
        ask(
            &ts,
            json!({"cmd": "diff.settle", "target": "2", "accept": true})
        ),
        json!({"ok": false, "error": "diff 2 was already rejected", "kind": "already_settled"})
    );
    assert_eq!(
        ask(
            &ts,
            json!({"cmd": "diff.settle", "target": "nope", "accept": true})
        ),
        json!({"ok": false, "error": "no pending diff named nope", "kind": "not_found"})
    );
    assert_eq!(
        ask(&ts, json!({"cmd": "diff.settle", "accept": true})),
        json!({"ok": false, "error": "no pending diffs", "kind": "not_found"})
    );
    assert_eq!(
        ask(&ts, json!({"cmd": "diff.list"})),
        json!({"ok": true, "diffs": [], "settled": []})
    );
}

#[test]
fn diff_settle_of_a_path_with_two_diffs_is_ambiguous_and_unreadable_proposed_stays_pending() {
    let ts = state();
    let c = client(&ts);
    let ws = ts.ws().to_string_lossy().into_owned();
    write(&ts, "a.txt", "a\n");
    let first = open_diff(&ts, &c, 1, "a.txt", "tab one");
    open_diff(&ts, &c, 2, "a.txt", "tab two");
    assert_eq!(
        ask(
            &ts,
            json!({"cmd": "diff.settle", "target": "a.txt", "cwd": ws, "accept": true})
        ),
        json!({"ok": false, "error": "2 diffs are pending for a.txt; name one by id", "kind": "ambiguous"})
    );
    let proposed = ts.root.join("state/diffs/1/proposed");
    std::fs::write(&proposed, [0xff, 0xfe]).unwrap();
    assert_eq!(
        ask(
            &ts,
            json!({"cmd": "diff.settle", "target": "1", "accept": true})
        ),
        json!({
            "ok": false,
            "error": format!("{} is not valid UTF-8 and cannot be sent to Claude Code; fix it and accept again", proposed.display()),
            "kind": "unreadable",
        })
    );
    assert_eq!(sent(&c), Vec::<Value>::new());
    std::fs::write(&proposed, "fixed\n").unwrap();
    assert_eq!(
        ask(
            &ts,
            json!({"cmd": "diff.settle", "target": "tab one", "accept": true})
        )["ok"],
        true
    );
    assert_eq!(answer(&c, &first), texts(&["FILE_SAVED", "fixed\n"]));
}

#[test]
fn diff_of_a_client_that_went_away_is_abandoned_without_an_answer() {
    let ts = state();
    let c = client(&ts);
    let a = write(&ts, "a.txt", "a\n");
    open_diff(&ts, &c, 1, "a.txt", "tab");
    c.outbox.end_for_test();
    assert_eq!(
        ask(&ts, json!({"cmd": "diff.list"})),
        json!({"ok": true, "diffs": [], "settled": []})
    );
    assert_eq!(
        ask(
            &ts,
            json!({"cmd": "diff.settle", "target": "1", "accept": true})
        ),
        json!({"ok": false, "error": "diff 1 was already abandoned", "kind": "already_settled"})
    );
    assert!(!ts.root.join("state/diffs/1").exists());
    assert_eq!(sent(&c), Vec::<Value>::new());
    assert_eq!(std::fs::read_to_string(&a).unwrap(), "a\n");
}

// ---------------------------------------------------------------------------
// status

#[test]
fn status_lists_clients_diffs_tabs_selection_and_documents() {
    let ts = state();
    let c = client(&ts);
    {
        let mut s = c.state.lock().unwrap();
        s.pid = Some(4242);
        s.name = "claude-code".into();
        s.version = "2.0.0".into();
    }
    let waiting = ts.client(false);
    let a = write(&ts, "a.txt", "one\ntwo\n");
    let b = write(&ts, "b.txt", "bee\n");
    open_diff(&ts, &c, 1, "a.txt", "tab");
    ask(
        &ts,
        json!({"cmd": "buffer", "path": b, "content": "unsaved"}),
    );
    ask(
        &ts,
        json!({"cmd": "select", "path": a, "range": {"start_line": 2}}),
    );
    let got = ask(&ts, json!({"cmd": "status"}));
    let status = &got["status"];
    let uptime = status["uptime_secs"].as_u64().unwrap();
    assert!(uptime < 600, "{uptime}");
    let since = |c: &Client| crate::text::unix_secs(c.since);
    // Two clients: each diff says which folder (a worktree) it is in.
    let mut listed = described(&ts, 1, "a.txt", "tab", &status["diffs"][0]["created"]);
    listed["worktree"] = json!(ts.ws());
    assert_eq!(
        got,
        json!({"ok": true, "status": {
            "pid": std::process::id(),
            "port": 1,
            "ide_name": "ccide (test)", "language_servers": [],
            "workspaces": [ts.ws()],
            "state_dir": ts.root.join("state"),
            "started": crate::text::unix_secs(ts.state.started),
            "uptime_secs": uptime,
            "clients": [
                {"id": 1, "pid": 4242, "name": "claude-code", "version": "2.0.0", "initialized": true, "ready": true, "since": since(&c), "roots": null},
                {"id": 2, "pid": null, "name": "", "version": "", "initialized": false, "ready": false, "since": since(&waiting), "roots": null},
            ],
            "diffs": [listed],
            "tabs": [
                {"path": b, "active": false, "preview": false},
                {"path": a, "active": true, "preview": false},
            ],
            "selection": selection(&a, (1, 0), (1, 3), "two"),
            "documents": [{"path": b, "bytes": 7}],
        }})
    );
}

#[test]
fn status_of_an_empty_server() {
    let ts = state();
    let got = ask(&ts, json!({"cmd": "status"}));
    let s = &got["status"];
    assert_eq!(got["ok"], true);
    assert_eq!(
        [
            &s["clients"],
            &s["diffs"],
            &s["tabs"],
            &s["selection"],
            &s["documents"]
        ],
        [&json!([]), &json!([]), &json!([]), &Value::Null, &json!([])]
    );
}

// ---------------------------------------------------------------------------
// select

#[test]
fn select_ranges_whole_line_cursor_and_columns() {
    let ts = state();
    let c = client(&ts);
    let a = write(&ts, "a.txt", "one\ntwö\nthree\n");
    let select = |range: Value| ask(&ts, json!({"cmd": "select", "path": a, "range": range}));
    for (range, start, end, text) in [
        // FILE:LINE is the whole line.
        (json!({"start_line": 2}), (1, 0), (1, 3), "twö"),
        // FILE:LINE:COL is a cursor.
        (json!({"start_line": 2, "start_col": 3}), (1, 2), (1, 2), ""),
        // Columns count from 1 and the end column is included.
        (
            json!({"start_line": 1, "start_col": 2, "end_line": 3, "end_col": 2}),
            (0, 1),
            (2, 2),
            "ne\ntwö\nth",
        ),
        (
            json!({"start_line": 2, "start_col": 3, "end_line": 2, "end_col": 3}),
            (1, 2),
            (1, 3),
            "ö",
        ),
        // A range without end columns runs to the end of its last line.
        (
            json!({"start_line": 1, "end_line": 2}),
            (0, 0),
            (1, 3),
            "one\ntwö",
        ),
        // FILE alone says "this file is open".
        (json!({}), (0, 0), (0, 0), ""),
        (Value::Null, (0, 0), (0, 0), ""),
    ] {
        let payload = selection(&a, start, end, text);
        assert_eq!(
            select(range.clone()),
            json!({"ok": true, "clients": 1, "held": 0, "selection": payload}),
            "{range}"
        );
        assert_eq!(
            sent(&c),
            [notification("selection_changed", payload.clone())],
            "{range}"
        );
        assert_eq!(ts.state.editor.selection(), Some(payload));
    }
    assert_eq!(ts.state.editor.active(), Some(PathBuf::from(&a)));
}

#[test]
fn select_takes_text_from_the_request_or_the_unsaved_buffer() {
    let ts = state();
    let a = write(&ts, "a.txt", "one\ntwo\n");
    assert_eq!(
        ask(
            &ts,
            json!({"cmd": "select", "path": a, "range": {"start_line": 1}, "text": "piped"})
        ),
        json!({"ok": true, "clients": 0, "held": 0, "selection": selection(&a, (0, 0), (0, 3), "piped")})
    );
    ask(
        &ts,
        json!({"cmd": "buffer", "path": a, "content": "unsaved first\nsecond\n"}),
    );
    assert_eq!(
        ask(
            &ts,
            json!({"cmd": "select", "path": a, "range": {"start_line": 1}})
        ),
        json!({"ok": true, "clients": 0, "held": 0, "selection": selection(&a, (0, 0), (0, 13), "unsaved first")})
    );
}

#[test]
fn select_errors() {
    let ts = state();
    let c = client(&ts);
    let a = write(&ts, "a.txt", "one\ntwo\nthree\n");
    std::fs::write(ts.root.join("secret.txt"), "s\n").unwrap();
    let select = |range: Value| ask(&ts, json!({"cmd": "select", "path": a, "range": range}));
    for (range, message) in [
        (
            json!({"start_line": 9}),
            format!("line 9 is past the end of {a} (3 lines)"),
        ),
        (
            json!({"start_line": 1, "end_line": 4}),
            format!("line 4 is past the end of {a} (3 lines)"),
        ),
        (
            json!({"start_line": 0}),
            "lines and columns count from 1".into(),
        ),
        (
            json!({"start_line": 1, "start_col": 0}),
            "lines and columns count from 1".into(),
        ),
        (
            json!({"start_line": 1, "end_line": 1, "end_col": 0}),
            "lines and columns count from 1".into(),
        ),
        (
            json!({"start_line": 1, "end_line": 0}),
            "lines and columns count from 1".into(),
        ),
        (
            json!({"start_line": 2, "end_line": 1}),
            "the selection ends before it starts".into(),
        ),
        (
            json!({"start_line": 1, "start_col": 5}),
            "the start column 5 is past the end of line 1 (3 characters)".into(),
        ),
        (
            json!({"start_line": 1, "start_col": 1, "end_line": 1, "end_col": 4}),
            "the end column 4 is past the end of line 1 (3 characters)".into(),
        ),
    ] {
        assert_eq!(select(range.clone()), failure(&message), "{range}");
    }
    let missing = abs(&ts, "nope.txt");
    assert_eq!(
        ask(&ts, json!({"cmd": "select", "path": missing})),
        failure(&format!("File not found: {missing}"))
    );
    assert_eq!(
        ask(&ts, json!({"cmd": "select", "path": "../secret.txt"})),
        failure(&outside(&ts, &ts.root.join("secret.txt")))
    );
    assert_eq!(ask(&ts, json!({"cmd": "select"})), failure("missing path"));
    // Nothing was sent or remembered.
    assert_eq!(sent(&c), Vec::<Value>::new());
    assert_eq!(ts.state.editor.selection(), None);
    assert_eq!(ts.state.editor.tabs().len(), 0);
}

// ---------------------------------------------------------------------------
// mention

#[test]
fn mention_sends_lines_zero_based_and_a_directory_without_lines() {
    let ts = state();
    let c = client(&ts);
    let a = write(&ts, "a.txt", "one\ntwo\nthree\n");
    std::fs::create_dir(ts.ws().join("dir")).unwrap();
    let dir = abs(&ts, "dir");
    for (req, mention) in [
        (
            json!({"cmd": "mention", "path": a, "start": 2, "end": 3}),
            json!({"filePath": a, "lineStart": 1, "lineEnd": 2}),
        ),
        (
            json!({"cmd": "mention", "path": a, "start": 3}),
            json!({"filePath": a, "lineStart": 2, "lineEnd": 2}),
        ),
        (json!({"cmd": "mention", "path": a}), json!({"filePath": a})),
        (
            json!({"cmd": "mention", "path": dir}),
            json!({"filePath": dir}),
        ),
    ] {
        assert_eq!(
            ask(&ts, req.clone()),
            json!({"ok": true, "clients": 1, "held": 0, "queued": false, "mention": mention}),
            "{req}"
        );
        assert_eq!(sent(&c), [notification("at_mentioned", mention)], "{req}");
    }
    assert_eq!(ts.state.editor.take_mentions(|_| true), Vec::<Value>::new());
}

#[test]
fn mention_is_queued_when_no_client_is_connected() {
    let ts = state();
    let a = write(&ts, "a.txt", "one\n");
    let mention = json!({"filePath": a, "lineStart": 0, "lineEnd": 0});
    assert_eq!(
        ask(&ts, json!({"cmd": "mention", "path": "a.txt", "start": 1})),
        json!({"ok": true, "clients": 0, "held": 0, "queued": true, "mention": mention})
    );
    assert_eq!(ts.state.editor.take_mentions(|_| true), [mention]);
    assert_eq!(ts.state.editor.take_mentions(|_| true), Vec::<Value>::new());
}

#[test]
fn mention_errors() {
    let ts = state();
    let c = client(&ts);
    let a = write(&ts, "a.txt", "one\n");
    std::fs::create_dir(ts.ws().join("dir")).unwrap();
    let dir = abs(&ts, "dir");
    let missing = abs(&ts, "nope.txt");
    let order = "mention lines count from 1 and the end may not come before the start";
    for (req, message) in [
        (
            json!({"cmd": "mention", "path": a, "start": 0}),
            order.to_string(),
        ),
        (
            json!({"cmd": "mention", "path": a, "start": 3, "end": 2}),
            order.to_string(),
        ),
        (
            json!({"cmd": "mention", "path": dir, "start": 1}),
            format!("{dir} is a directory: mention it without lines"),
        ),
        (
            json!({"cmd": "mention", "path": missing}),
            format!("File not found: {missing}"),
        ),
        (
            json!({"cmd": "mention", "path": "../x"}),
            outside(&ts, &ts.root.join("x")),
        ),
        (json!({"cmd": "mention"}), "missing path".to_string()),
    ] {
        assert_eq!(ask(&ts, req.clone()), failure(&message), "{req}");
    }
    assert_eq!(sent(&c), Vec::<Value>::new());
    assert_eq!(ts.state.editor.take_mentions(|_| true), Vec::<Value>::new());
}

// ---------------------------------------------------------------------------
// open, close, buffer

fn tabs(ts: &TestState) -> Vec<(String, bool)> {
    ts.state
        .editor
        .tabs()
        .iter()
        .map(|t| (t.path.to_string_lossy().into_owned(), t.active))
        .collect()
}

#[test]
fn open_opens_tabs_and_activates_the_last() {
    let ts = state();
    let a = write(&ts, "a.txt", "a\n");
    let b = write(&ts, "b.txt", "b\n");
    assert_eq!(
        ask(&ts, json!({"cmd": "open", "paths": [a, "b.txt"]})),
        json!({"ok": true, "opened": [a, b]})
    );
    assert_eq!(tabs(&ts), [(a.clone(), false), (b.clone(), true)]);
    // One missing file opens nothing.
    let missing = abs(&ts, "nope.txt");
    assert_eq!(
        ask(&ts, json!({"cmd": "open", "paths": [missing, a]})),
        failure(&format!("File not found: {missing}"))
    );
    assert_eq!(
        ask(&ts, json!({"cmd": "open", "paths": ["../x"]})),
        failure(&outside(&ts, &ts.root.join("x")))
    );
    assert_eq!(ask(&ts, json!({"cmd": "open"})), failure("missing paths"));
    assert_eq!(tabs(&ts), [(a, false), (b, true)]);
}

#[test]
fn close_reports_files_not_open_and_keeps_unsaved_content_unless_discarded() {
    let ts = state();
    let a = write(&ts, "a.txt", "a\n");
    let b = write(&ts, "b.txt", "b\n");
    let c = write(&ts, "c.txt", "c\n");
    ask(&ts, json!({"cmd": "open", "paths": [a, b]}));
    ask(
        &ts,
        json!({"cmd": "buffer", "path": b, "content": "unsaved"}),
    );
    assert_eq!(
        ask(&ts, json!({"cmd": "close", "paths": [a, b, c]})),
        json!({"ok": true, "not_open": [c], "kept_unsaved": [b]})
    );
    assert_eq!(tabs(&ts), []);
    assert_eq!(
        ts.state.editor.document(Path::new(&b)),
        Some("unsaved".into())
    );
    ask(&ts, json!({"cmd": "open", "paths": [b]}));
    assert_eq!(
        ask(&ts, json!({"cmd": "close", "paths": [b], "discard": true})),
        json!({"ok": true, "not_open": [], "kept_unsaved": []})
    );
    assert_eq!(ts.state.editor.document(Path::new(&b)), None);
    assert_eq!(ask(&ts, json!({"cmd": "close"})), failure("missing paths"));
}

#[test]
fn buffer_sets_and_drops_unsaved_content() {
    let ts = state();
    let a = write(&ts, "a.txt", "on disk\n");
    assert_eq!(
        ask(
            &ts,
            json!({"cmd": "buffer", "path": "a.txt", "content": "in the editor\n"})
        ),
        json!({"ok": true, "path": a})
    );
    assert_eq!(
        ts.state.editor.document(Path::new(&a)),
        Some("in the editor\n".into())
    );
    assert_eq!(
        ts.state
            .current_text(Path::new(&a), crate::state::MAX_READ)
            .unwrap(),
        "in the editor\n"
    );
    assert_eq!(tabs(&ts), [(a.clone(), true)]);
    assert_eq!(
        ask(&ts, json!({"cmd": "buffer", "path": a})),
        json!({"ok": true, "path": a})
    );
    assert_eq!(ts.state.editor.document(Path::new(&a)), None);
    assert_eq!(
        ts.state
            .current_text(Path::new(&a), crate::state::MAX_READ)
            .unwrap(),
        "on disk\n"
    );
    // The file on disk is never touched.
    assert_eq!(std::fs::read_to_string(&a).unwrap(), "on disk\n");
    assert_eq!(
        ask(
            &ts,
            json!({"cmd": "buffer", "path": "../x", "content": "x"})
        ),
        failure(&outside(&ts, &ts.root.join("x")))
    );
}

// ---------------------------------------------------------------------------
// diagnostics.import, diagnostics.list, diagnostics.clear

#[test]
fn diagnostics_import_list_and_clear() {
    let ts = state();
    let c = client(&ts);
    let ws = ts.ws().to_string_lossy().into_owned();
    let m = write(&ts, "m.py", "x\n");
    let n = abs(&ts, "src/n.c");
    let protocol = format!(
        r#"[{{"uri":"{}","diagnostics":[{{"message":"boom","severity":"Error","range":{{"start":{{"line":2,"character":6}},"end":{{"line":2,"character":11}}}},"source":"ruff","code":"F821"}}]}}]"#,
        url(&m)
    );
    assert_eq!(
        ask(
            &ts,
            json!({"cmd": "diagnostics.import", "text": protocol, "format": "protocol"})
        ),
        json!({"ok": true, "files": 1, "diagnostics": 1, "changed": 1, "outside_workspace": 0})
    );
    // Compiler lines, relative to the command's directory; one outside is dropped.
    let lines =
        "src/n.c:3:5: warning: unused variable [-Wunused-variable]\n/elsewhere/x.c:1:1: error: e\n";
    assert_eq!(
        ask(
            &ts,
            json!({"cmd": "diagnostics.import", "text": lines, "format": "compiler", "cwd": ws})
        ),
        json!({"ok": true, "files": 1, "diagnostics": 1, "changed": 1, "outside_workspace": 1})
    );
    let boom = json!({
        "message": "boom", "severity": "Error", "source": "ruff", "code": "F821",
        "range": {"start": {"line": 2, "character": 6}, "end": {"line": 2, "character": 11}},
    });
    let unused = json!({
        "message": "unused variable", "severity": "Warning", "source": "import",
        "code": "-Wunused-variable",
        "range": {"start": {"line": 2, "character": 4}, "end": {"line": 2, "character": 4}},
    });
    assert_eq!(
        sent(&c),
        [
            notification(
                "diagnostics_changed",
                json!({"uri": url(&m), "diagnostics": [boom]})
            ),
            notification(
                "diagnostics_changed",
                json!({"uri": url(&n), "diagnostics": [unused]})
            ),
        ]
    );
    assert_eq!(
        ask(&ts, json!({"cmd": "diagnostics.list"})),
        json!({"ok": true, "files": [
            {"uri": url(&m), "path": m, "diagnostics": [boom], "lines": [format!("{m}:3:7: error: boom (ruff) [F821]")]},
            {"uri": url(&n), "path": n, "diagnostics": [unused], "lines": [format!("{n}:3:5: warning: unused variable (import) [-Wunused-variable]")]},
        ]})
    );
    // The same again changes nothing and tells nobody.
    assert_eq!(
        ask(
            &ts,
            json!({"cmd": "diagnostics.import", "text": lines, "format": "compiler", "cwd": ws})
        )["changed"],
        0
    );
    assert_eq!(sent(&c), Vec::<Value>::new());
    assert_eq!(
        ask(&ts, json!({"cmd": "diagnostics.clear", "path": m})),
        json!({"ok": true, "cleared": [m]})
    );
    assert_eq!(
        sent(&c),
        [notification(
            "diagnostics_changed",
            json!({"uri": url(&m), "diagnostics": []})
        )]
    );
    assert_eq!(
        ask(&ts, json!({"cmd": "diagnostics.clear", "path": m})),
        json!({"ok": true, "cleared": []})
    );
    assert_eq!(
        ask(&ts, json!({"cmd": "diagnostics.clear", "path": "../x"})),
        failure(&outside(&ts, &ts.root.join("x")))
    );
    assert_eq!(
        ask(&ts, json!({"cmd": "diagnostics.clear"})),
        json!({"ok": true, "cleared": [n]})
    );
    assert_eq!(
        ask(&ts, json!({"cmd": "diagnostics.list"})),
        json!({"ok": true, "files": []})
    );
}

#[test]
fn diagnostics_import_with_an_unknown_format_detects_it() {
    let ts = state();
    let m = write(&ts, "m.py", "x\n");
    let text = format!(
        r#"{{"uri":"{}","diagnostics":[{{"message":"w","severity":"Warning","range":{{"start":{{"line":0,"character":0}},"end":{{"line":0,"character":1}}}}}}]}}"#,
        url(&m)
    );
    for format in [json!("auto"), json!("nonsense"), Value::Null] {
        ask(&ts, json!({"cmd": "diagnostics.clear"}));
        assert_eq!(
            ask(
                &ts,
                json!({"cmd": "diagnostics.import", "text": text, "format": format})
            ),
            json!({"ok": true, "files": 1, "diagnostics": 1, "changed": 1, "outside_workspace": 0}),
            "{format}"
        );
    }
}

// ---------------------------------------------------------------------------
// exec

#[test]
fn exec_lists_the_mode_and_refuses_decisions_when_nothing_waits() {
    for (mode, word) in [(Mode::Off, "off"), (Mode::Ask, "ask"), (Mode::On, "on")] {
        let ts = state_with(mode);
        let list = json!({"ok": true, "mode": word, "requests": []});
        assert_eq!(ask(&ts, json!({"cmd": "exec"})), list);
        assert_eq!(ask(&ts, json!({"cmd": "exec", "action": "list"})), list);
        for action in ["approve", "deny"] {
            assert_eq!(
                ask(&ts, json!({"cmd": "exec", "action": action})),
                failure("no executeCode requests are waiting")
            );
            assert_eq!(
                ask(&ts, json!({"cmd": "exec", "action": action, "target": "3"})),
                failure("no executeCode request 3 is waiting")
            );
        }
        assert_eq!(
            ask(&ts, json!({"cmd": "exec", "action": "maybe"})),
            failure("unknown exec action 'maybe': expected list, approve or deny")
        );
    }
}

#[test]
fn exec_with_ask_lists_waiting_requests_and_a_denial_answers_the_call() {
    let ts = state_with(Mode::Ask);
    let c = client(&ts);
    let first = call_later(&ts, &c, 10, "executeCode", json!({"code": "print(1)"}));
    let second = call_later(&ts, &c, 11, "executeCode", json!({"code": "print(2)"}));
    let list = ask(&ts, json!({"cmd": "exec"}));
    let r1 = json!({"id": "1", "client": 1, "code": "print(1)", "created": list["requests"][0]["created"]});
    let r2 = json!({"id": "2", "client": 1, "code": "print(2)", "created": list["requests"][1]["created"]});
    assert_eq!(
        list,
        json!({"ok": true, "mode": "ask", "requests": [r1, r2]})
    );
    assert_eq!(
        ask(&ts, json!({"cmd": "exec", "action": "approve"})),
        failure("2 executeCode requests are waiting; name one by its ID (see ccide exec)")
    );
    assert_eq!(
        ask(&ts, json!({"cmd": "exec", "action": "deny", "target": "2"})),
        json!({"ok": true, "request": r2})
    );
    assert_eq!(
        answer(&c, &second),
        json!({"content": [{"type": "text", "text": "executeCode request 2 was denied"}], "isError": true})
    );
    assert_eq!(
        ask(&ts, json!({"cmd": "exec", "action": "deny", "target": "2"})),
        failure("no executeCode request 2 is waiting")
    );
    // The only one left needs no ID.
    assert_eq!(
        ask(&ts, json!({"cmd": "exec", "action": "deny"})),
        json!({"ok": true, "request": r1})
    );
    assert_eq!(
        answer(&c, &first),
        json!({"content": [{"type": "text", "text": "executeCode request 1 was denied"}], "isError": true})
    );
    assert_eq!(
        ask(&ts, json!({"cmd": "exec"})),
        json!({"ok": true, "mode": "ask", "requests": []})
    );
}

// ---------------------------------------------------------------------------
// workspace

#[test]
fn workspace_list_add_remove_and_errors() {
    let ts = state();
    let ws = ts.ws();
    let other = ts.root.join("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::write(other.join("o.txt"), "o\n").unwrap();
    assert_eq!(
        ask(&ts, json!({"cmd": "workspace", "op": "list"})),
        json!({"ok": true, "workspaces": [ws]})
    );
    assert_eq!(
        ask(&ts, json!({"cmd": "workspace", "op": "add", "path": other})),
        json!({"ok": true, "workspaces": [ws, other]})
    );
    // Adding again changes nothing; a path through a symlink is the same folder.
    std::os::unix::fs::symlink(&other, ts.root.join("alias")).unwrap();
    assert_eq!(
        ask(
            &ts,
            json!({"cmd": "workspace", "op": "add", "path": ts.root.join("alias")})
        ),
        json!({"ok": true, "workspaces": [ws, other]})
    );
    // The lock file announces both, and the change is remembered.
    let lock: Value =
        serde_json::from_slice(&std::fs::read(ts.root.join("config/ide/1.lock")).unwrap()).unwrap();
    assert_eq!(lock["workspaceFolders"], json!([ws, other]));
    let changes: Value =
        serde_json::from_slice(&std::fs::read(ts.root.join("state/workspaces.json")).unwrap())
            .unwrap();
    assert_eq!(changes, json!({"added": [other], "removed": []}));
    // Files in the new folder are inside.
    let o = other.join("o.txt");
    assert_eq!(
        ask(&ts, json!({"cmd": "open", "paths": [o]})),
        json!({"ok": true, "opened": [o]})
    );
    assert_eq!(
        ask(
            &ts,
            json!({"cmd": "workspace", "op": "remove", "path": other})
        ),
        json!({"ok": true, "workspaces": [ws]})
    );
    let changes: Value =
        serde_json::from_slice(&std::fs::read(ts.root.join("state/workspaces.json")).unwrap())
            .unwrap();
    assert_eq!(changes, json!({"added": [], "removed": [other]}));
    assert_eq!(
        ask(
            &ts,
            json!({"cmd": "workspace", "op": "remove", "path": other})
        ),
        failure(&format!(
            "{} is not a workspace folder of this server",
            other.display()
        ))
    );
    assert_eq!(
        ask(&ts, json!({"cmd": "workspace", "op": "remove", "path": ws})),
        failure(&format!(
            "{} is the only workspace folder; a server needs one",
            ws.display()
        ))
    );
    let missing = ts.root.join("missing");
    assert_eq!(
        ask(
            &ts,
            json!({"cmd": "workspace", "op": "add", "path": missing})
        ),
        failure(&format!(
            "workspace {}: No such file or directory (os error 2)",
            missing.display()
        ))
    );
    assert_eq!(
        ask(&ts, json!({"cmd": "workspace", "op": "add", "path": o})),
        failure(&format!("workspace {} is not a directory", o.display()))
    );
    for op in [json!("rename"), Value::Null] {
        assert_eq!(
            ask(&ts, json!({"cmd": "workspace", "op": op})),
            failure("workspace: expected add, remove or list"),
            "{op}"
        );
    }
    assert_eq!(
        ask(&ts, json!({"cmd": "workspace", "op": "list"})),
        json!({"ok": true, "workspaces": [ws]})
    );
}

// ---------------------------------------------------------------------------

#[test]
fn unknown_command_is_refused_by_name() {
    let ts = state();
    assert_eq!(
        ask(&ts, json!({"cmd": "frobnicate"})),
        failure("unknown control command 'frobnicate' (is ccide up to date?)")
    );
    for req in [json!({}), json!({"cmd": 1}), json!([]), json!("status")] {
        assert_eq!(
            ask(&ts, req.clone()),
            failure("unknown control command '' (is ccide up to date?)"),
            "{req}"
        );
    }
}

#[test]
fn diagnostics_import_of_an_empty_list_clears_the_file_however_its_uri_is_spelt() {
    let ts = state();
    let ws = ts.ws().to_string_lossy().into_owned();
    let m = write(&ts, "m.py", "x\n");
    let with = |uri: &str, diagnostics: &str| {
        ask(
            &ts,
            json!({"cmd": "diagnostics.import", "format": "protocol", "cwd": ws,
                "text": format!(r#"[{{"uri":"{uri}","diagnostics":[{diagnostics}]}}]"#)}),
        )
    };
    let one = r#"{"message":"m","severity":"Error","range":{"start":{"line":0,"character":0},"end":{"line":0,"character":1}}}"#;
    for uri in [format!("file://{ws}/sub/../m.py"), "m.py".to_string()] {
        assert_eq!(
            with(&uri, one),
            json!({"ok": true, "files": 1, "diagnostics": 1, "changed": 1, "outside_workspace": 0}),
            "{uri}"
        );
        assert_eq!(
            with(&uri, ""),
            json!({"ok": true, "files": 1, "diagnostics": 0, "changed": 1, "outside_workspace": 0}),
            "{uri}"
        );
        assert_eq!(
            ask(&ts, json!({"cmd": "diagnostics.list"})),
            json!({"ok": true, "files": []}),
            "{uri} in {m}"
        );
    }
}

// ---------------------------------------------------------------------------
// The request type: one definition for the server and its clients

/// One request of every command, with its fields set.
fn every_request() -> Vec<Request> {
    use super::protocol::{ExecAction, Span, WorkspaceOp};
    use crate::lsp::text::Pos;
    use crate::state::editor::HumanRange;
    let s = |t: &str| Some(t.to_string());
    let paths = vec!["/w/a.txt".to_string(), "b c.txt".to_string()];
    vec![
        Request::Status,
        Request::DiffList,
        Request::DiffFind {
            target: s("3"),
            cwd: s("/w"),
        },
        Request::DiffSettle {
            target: s("tab"),
            accept: true,
            // Every kind of character JSON escapes, among runs of 8 plain bytes and more.
            content: s("edited \"quoted\" and back\\slashed\n\ttab \u{1}\u{1f} é 😀 \r\n"),
            cwd: s("/w"),
            verdict: Some(
                serde_json::json!({"kept": [1], "dropped": [{"hunk": 2, "text": "@@ -2 +2 @@\n-a\n+b\n", "why": null}], "edited": [], "why": "no"}),
            ),
        },
        Request::Verdicts {
            path: s("a.txt"),
            pids: Some(vec![41, 1]),
            delivered: vec!["3".into()],
        },
        Request::Verdicts {
            path: None,
            pids: None,
            delivered: vec![],
        },
        Request::DiffView { target: s("3") },
        Request::Select {
            path: "a.txt".into(),
            span: Span::Lines(HumanRange {
                start_line: Some(2),
                start_col: None,
                end_line: Some(4),
                end_col: Some(1),
            }),
            text: None,
            session: None,
        },
        Request::Select {
            path: "a.txt".into(),
            span: Span::Exact(
                Pos {
                    line: 0,
                    character: 3,
                },
                Pos {
                    line: 1,
                    character: 0,
                },
            ),
            text: s("é🦀\n"),
            session: s("2"),
        },
        Request::Mention {
            path: "a.txt".into(),
            start: Some(1),
            end: Some(9),
            session: s("4242"),
        },
        Request::Open {
            paths: paths.clone(),
        },
        Request::Close {
            paths: paths.clone(),
            discard: true,
        },
        Request::Buffer {
            path: "a.txt".into(),
            content: s("unsaved"),
        },
        Request::Diagnostics { paths },
        Request::DiagnosticsImport {
            text: "a.c:1:1: error: e\n".into(),
            format: s("compiler"),
            cwd: s("/w"),
        },
        Request::DiagnosticsList,
        Request::DiagnosticsClear { path: s("a.c") },
        Request::Exec {
            action: ExecAction::Approve,
            target: s("2"),
        },
        Request::Workspace {
            op: WorkspaceOp::Add,
            path: s("/x"),
        },
        Request::Attach {
            pid: Some(42),
            editor: s("Neovim 0.11"),
        },
        Request::Events,
        Request::Lsp(super::protocol::LspClient {
            root: "/w/sub".into(),
            client: s("Claude Code 2.1.330"),
            pid: Some(4242),
            extensions: vec![".ts".into(), ".tsx".into()],
            diagnostics: false,
        }),
    ]
}

/// The handshake as `ccide lsp-bridge` sends it (ccide-protocol(7) §9.2): fields it leaves out
/// read as no extensions named and diagnostics wanted.
#[test]
fn the_lsp_handshake_reads_as_the_bridge_writes_it() {
    use super::protocol::LspClient;
    let line = r#"{"id":3,"cmd":"lsp","root":"/w","client":"Claude Code 2.1.330","pid":77,"extensions":[".py",".pyi"],"diagnostics":false}"#;
    let v: Value = serde_json::from_str(line).unwrap();
    let full = LspClient {
        root: "/w".into(),
        client: Some("Claude Code 2.1.330".into()),
        pid: Some(77),
        extensions: vec![".py".into(), ".pyi".into()],
        diagnostics: false,
    };
    assert_eq!(Request::parse(v.clone()), Ok(Request::Lsp(full.clone())));
    let written = Request::Lsp(full).line(3);
    assert!(written.starts_with("{\"id\":3,"), "{written}");
    assert_eq!(serde_json::from_str::<Value>(&written).unwrap(), v);
    let bare = LspClient {
        root: "/w".into(),
        client: None,
        pid: None,
        extensions: Vec::new(),
        diagnostics: true,
    };
    assert_eq!(
        Request::parse(json!({"cmd": "lsp", "root": "/w", "diagnostics": null})),
        Ok(Request::Lsp(bare.clone()))
    );
    assert_eq!(
        Request::Lsp(bare).to_json(),
        json!({"cmd": "lsp", "root": "/w"})
    );
}

#[test]
fn every_request_reads_back_as_written_with_its_id_first_on_the_line() {
    for (i, r) in every_request().into_iter().enumerate() {
        assert_eq!(
            Request::parse(r.to_json()),
            Ok(r.clone()),
            "{}",
            r.to_json()
        );
        let line = r.line(i as u64 + 7);
        assert!(
            line.ends_with('\n') && line.matches('\n').count() == 1,
            "{line}"
        );
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(v["id"], i + 7, "{line}");
        assert_eq!(v["cmd"], r.name(), "{line}");
        assert_eq!(Request::parse(v), Ok(r.clone()));
        assert_eq!(
            super::protocol::leading_id(line.as_bytes()),
            Some(i as u64 + 7)
        );
    }
    // Absent fields are left out, and null reads as absent.
    let bare = Request::DiffSettle {
        target: None,
        accept: false,
        content: None,
        cwd: None,
        verdict: None,
    };
    assert_eq!(
        bare.to_json(),
        json!({"cmd": "diff.settle", "accept": false})
    );
    assert_eq!(
        Request::parse(json!({"cmd": "diff.settle", "target": null, "content": null})),
        Ok(bare)
    );
}

#[test]
fn the_editors_selection_command_is_select_with_positions() {
    use super::protocol::Span;
    use crate::lsp::text::Pos;
    // What `ccide lsp` sends (ccide-protocol(7) §9.2 keeps the old name working).
    let old = json!({"cmd": "selection", "path": "/w/a.txt", "start": [1, 2], "end": [3, 0], "text": "x"});
    let pos = |line, character| Pos { line, character };
    assert_eq!(
        Request::parse(old),
        Ok(Request::Select {
            path: "/w/a.txt".into(),
            span: Span::Exact(pos(1, 2), pos(3, 0)),
            text: Some("x".into()),
            session: None,
        })
    );
}

#[test]
fn a_field_of_the_wrong_type_is_refused_by_name() {
    let both = "select takes either range (lines and columns from 1) or start, end and text (positions from 0, in UTF-16 units)";
    for (req, error) in [
        (
            json!({"cmd": "select", "path": 3}),
            "bad path: expected a string",
        ),
        (json!({"cmd": "select"}), "missing path"),
        (
            json!({"cmd": "select", "path": "a", "range": [1]}),
            "bad range: expected an object",
        ),
        (
            json!({"cmd": "select", "path": "a", "range": {"start_line": -1}}),
            "bad start_line: expected a whole number",
        ),
        (
            json!({"cmd": "select", "path": "a", "range": {"start_line": "2"}}),
            "bad start_line: expected a whole number",
        ),
        (
            json!({"cmd": "select", "path": "a", "start": [0, 0], "end": [0, 1]}),
            both,
        ),
        (
            json!({"cmd": "select", "path": "a", "start": [0, 0], "text": ""}),
            both,
        ),
        (
            json!({"cmd": "select", "path": "a", "start": [0, 0], "end": [0, 1], "text": "", "range": {}}),
            both,
        ),
        (
            json!({"cmd": "select", "path": "a", "start": [0], "end": [0, 1], "text": ""}),
            "bad start: expected [line, character]",
        ),
        (
            json!({"cmd": "diff.settle", "accept": "yes"}),
            "bad accept: expected true or false",
        ),
        (
            json!({"cmd": "buffer", "path": "a", "content": 1}),
            "bad content: expected a string",
        ),
        (
            json!({"cmd": "open", "paths": "a"}),
            "bad paths: expected a list of strings",
        ),
        (
            json!({"cmd": "open", "paths": ["a", 1]}),
            "bad paths: expected a list of strings",
        ),
        (json!({"cmd": "diagnostics"}), "missing paths"),
        (
            json!({"cmd": "mention", "path": "a", "start": 1.5}),
            "bad start: expected a whole number",
        ),
        (
            json!({"cmd": "exec", "action": "run"}),
            "unknown exec action 'run': expected list, approve or deny",
        ),
        (
            json!({"cmd": "workspace"}),
            "workspace: expected add, remove or list",
        ),
        (
            json!({"cmd": "attach", "editor": ["vim"]}),
            "bad editor: expected a string",
        ),
        (json!({"cmd": "lsp", "client": "x"}), "missing root"),
        (
            json!({"cmd": "lsp", "root": "/w", "extensions": ".ts"}),
            "bad extensions: expected a list of strings",
        ),
        (
            json!({"cmd": "lsp", "root": "/w", "diagnostics": "no"}),
            "bad diagnostics: expected true or false",
        ),
        (
            json!({"cmd": "lsp", "root": "/w", "pid": "12"}),
            "bad pid: expected a whole number",
        ),
    ] {
        assert_eq!(Request::parse(req.clone()), Err(error.to_string()), "{req}");
    }
}

#[test]
fn leading_id_reads_only_a_whole_id_at_the_start() {
    use super::protocol::leading_id;
    for (line, id) in [
        (&b"{\"id\":12,\"cmd\":\"status\"}"[..], Some(12)),
        (b" { \"id\" : 3 ,", Some(3)),
        (b"{\"cmd\":\"status\",\"id\":12}", None),
        (b"{\"id\":\"12\",", None),
        (b"{\"id\":-1,", None),
        // Cut off: 1234 may be the start of 12345.
        (b"{\"id\":1234", None),
        (b"", None),
    ] {
        assert_eq!(leading_id(line), id, "{}", String::from_utf8_lossy(line));
    }
    let mut long = b"{\"id\":5,\"content\":\"".to_vec();
    long.extend(std::iter::repeat_n(b'x', 1000));
    assert_eq!(leading_id(&long), Some(5));
}

/// ccide-protocol(7) §9.2 describes every command the server knows.
#[test]
fn every_command_is_in_the_protocol_page() {
    let page = include_str!("../../man/ccide-protocol.7");
    let start = page.find(".SS \"9.2 ").expect("§9.2");
    let end = start + page[start..].find(".SS \"9.3 ").expect("§9.3");
    let section = &page[start..end];
    for r in every_request() {
        let entry = format!("\n.TP\n.B {}", r.name());
        assert!(
            section.contains(&entry),
            "§9.2 does not describe {}",
            r.name()
        );
    }
}

// ---------------------------------------------------------------------------
// Editor sessions: the same commands, and what the session holds

fn in_session(ts: &TestState, session: u64, req: Value) -> Value {
    handle(&ts.state, Some(session), Request::parse(req).unwrap())
}

#[test]
fn an_editor_session_holds_what_it_opens_buffers_and_selects_until_it_ends() {
    let ts = state();
    let a = write(&ts, "a.txt", "a\n");
    let b = write(&ts, "b.txt", "b\n");
    let c = write(&ts, "c.txt", "c\n");
    let d = write(&ts, "d.txt", "d\n");
    let ok = |v: Value| assert_eq!(v["ok"], true, "{v}");
    ok(in_session(&ts, 1, json!({"cmd": "open", "paths": [a, b]})));
    ok(in_session(
        &ts,
        1,
        json!({"cmd": "buffer", "path": c, "content": "unsaved\n"}),
    ));
    ok(in_session(
        &ts,
        1,
        json!({"cmd": "select", "path": d, "start": [0, 0], "end": [0, 1], "text": "d"}),
    ));
    // Another session holds b too; a plain connection's open holds nothing.
    ok(in_session(&ts, 2, json!({"cmd": "open", "paths": [b]})));
    // A file the session closed is no longer its own.
    ok(in_session(&ts, 1, json!({"cmd": "close", "paths": [a]})));
    ok(in_session(&ts, 1, json!({"cmd": "open", "paths": [a]})));
    ok(in_session(&ts, 1, json!({"cmd": "close", "paths": [a]})));
    ok(ask(&ts, json!({"cmd": "open", "paths": [a]})));
    super::editors::detach(&ts.state, 1);
    assert_eq!(tabs(&ts), [(b.clone(), false), (a.clone(), true)]);
    assert_eq!(ts.state.editor.document(Path::new(&c)), None);
    super::editors::detach(&ts.state, 2);
    assert_eq!(tabs(&ts), [(a, true)]);
}

/// Two editors hold f, and the second typed in it: the first one's close leaves the tab and
/// the unsaved content, which go when the last holder closes it.
#[test]
fn a_file_two_sessions_hold_is_closed_when_the_last_one_closes_it() {
    let ts = state();
    let f = write(&ts, "f.txt", "f\n");
    let ok = |v: Value| assert_eq!(v["ok"], true, "{v}");
    ok(in_session(&ts, 1, json!({"cmd": "open", "paths": [f]})));
    ok(in_session(&ts, 2, json!({"cmd": "open", "paths": [f]})));
    ok(in_session(
        &ts,
        2,
        json!({"cmd": "buffer", "path": f, "content": "typed\n"}),
    ));
    assert_eq!(
        in_session(
            &ts,
            1,
            json!({"cmd": "close", "paths": [f], "discard": true})
        ),
        json!({"ok": true, "not_open": [], "kept_unsaved": [], "held_elsewhere": [f]})
    );
    assert_eq!(tabs(&ts), [(f.clone(), true)]);
    assert_eq!(
        ts.state.editor.document(Path::new(&f)).as_deref(),
        Some("typed\n")
    );
    // Closed by the first again: it no longer holds it, and nothing changes.
    ok(in_session(
        &ts,
        1,
        json!({"cmd": "close", "paths": [f], "discard": true}),
    ));
    assert_eq!(tabs(&ts).len(), 1);
    assert_eq!(
        in_session(
            &ts,
            2,
            json!({"cmd": "close", "paths": [f], "discard": true})
        ),
        json!({"ok": true, "not_open": [], "kept_unsaved": []})
    );
    assert_eq!(tabs(&ts), []);
    assert_eq!(ts.state.editor.document(Path::new(&f)), None);
}

/// "done, but not saved" (the editor model could not be written) is a failure with a kind, so
/// an editor session does not take it for a refusal.
#[test]
fn a_change_that_could_not_be_saved_says_so_with_a_kind() {
    let ts = state();
    let f = write(&ts, "f.txt", "f\n");
    let saved = ts.root.join("state/editor.json");
    let _ = std::fs::remove_file(&saved);
    std::fs::create_dir_all(saved.join("full")).unwrap();
    let v = in_session(
        &ts,
        1,
        json!({"cmd": "buffer", "path": f, "content": "x\n"}),
    );
    assert_eq!(
        (&v["ok"], &v["kind"]),
        (&json!(false), &json!("not_saved")),
        "{v}"
    );
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .starts_with("done, but not saved: cannot save the editor state to"),
        "{v}"
    );
    assert_eq!(
        ts.state.editor.document(Path::new(&f)).as_deref(),
        Some("x\n")
    );
    // A refusal has no kind.
    let v = in_session(&ts, 1, json!({"cmd": "open", "paths": ["/elsewhere"]}));
    assert_eq!((&v["ok"], v.get("kind")), (&json!(false), None), "{v}");
}

#[test]
fn select_with_the_editors_positions_sends_them_and_its_text_as_given() {
    let ts = state();
    let c = client(&ts);
    // Not saved yet: the editor's buffer is all there is.
    let new = abs(&ts, "new.txt");
    let payload = selection(&new, (0, 2), (1, 3), "🦀\nab");
    assert_eq!(
        in_session(
            &ts,
            1,
            json!({"cmd": "select", "path": "new.txt", "start": [0, 2], "end": [1, 3], "text": "🦀\nab"})
        ),
        json!({"ok": true, "clients": 1, "held": 0, "selection": payload})
    );
    assert_eq!(sent(&c), [notification("selection_changed", payload)]);
    assert_eq!(
        ask(
            &ts,
            json!({"cmd": "select", "path": "../x", "start": [0, 0], "end": [0, 0], "text": ""})
        ),
        failure(&outside(&ts, &ts.root.join("x")))
    );
}

#[test]
fn diff_view_names_the_proposal_like_its_file_and_settle_takes_the_edited_content() {
    let ts = state();
    let c = client(&ts);
    write(&ts, "a.py", "a\n");
    let call = open_diff(&ts, &c, 1, "a.py", "tab a");
    let dir = ts.root.join("state/diffs/1");
    assert_eq!(
        ask(&ts, json!({"cmd": "diff.view", "target": "1"})),
        json!({"ok": true, "path": dir.join("a.py")})
    );
    // The proposal takes the file's name; `proposed` links to it.
    assert_eq!(
        std::fs::read_link(dir.join("proposed")).unwrap(),
        PathBuf::from("a.py")
    );
    assert_eq!(
        std::fs::read_to_string(dir.join("a.py")).unwrap(),
        "new a.py\n"
    );
    assert_eq!(
        ask(&ts, json!({"cmd": "diff.view", "target": "9"})),
        failure("no pending diff 9")
    );
    assert_eq!(
        ask(
            &ts,
            json!({"cmd": "diff.settle", "accept": true, "content": "x"})
        ),
        failure("name the diff by its id")
    );
    let r = ask(
        &ts,
        json!({"cmd": "diff.settle", "target": "1", "accept": true, "content": "edited\n"}),
    );
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(answer(&c, &call), texts(&["FILE_SAVED", "edited\n"]));
}

#[test]
fn diagnostics_of_given_files_are_keyed_by_the_paths_as_given() {
    let ts = state();
    let m = write(&ts, "m.py", "x\n");
    let text = format!("{m}:1:1: error: boom\n");
    ask(
        &ts,
        json!({"cmd": "diagnostics.import", "text": text, "format": "compiler"}),
    );
    let boom = json!({
        "message": "boom", "severity": "Error", "source": "import",
        "range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}},
    });
    assert_eq!(
        ask(
            &ts,
            json!({"cmd": "diagnostics", "paths": ["m.py", m, "clean.py", "/etc/passwd"]})
        ),
        json!({"ok": true, "files": {"m.py": [boom], m: [boom], "clean.py": []}})
    );
}

#[test]
fn attach_and_events_need_a_connection_of_their_own() {
    let ts = state();
    assert_eq!(
        in_session(&ts, 4, json!({"cmd": "attach", "editor": "vim"})),
        failure("this connection is already editor session 4")
    );
    assert_eq!(
        in_session(&ts, 4, json!({"cmd": "events"})),
        failure("events needs a connection of its own")
    );
}

#[test]
fn the_log_names_an_editor_without_stray_spaces() {
    use super::editors::who;
    // An older `ccide lsp` joined name and version with a space, the version missing.
    assert_eq!(who(Some("an editor "), Some(7), "x"), "an editor (pid 7)");
    assert_eq!(
        who(Some("Neovim 0.11.0"), Some(7), "x"),
        "Neovim 0.11.0 (pid 7)"
    );
    assert_eq!(
        who(Some(" Emacs\t 30 "), None, "x"),
        "Emacs 30 (no pid given)"
    );
    assert_eq!(who(Some(""), Some(1), "an editor"), "an editor (pid 1)");
    assert_eq!(who(None, Some(1), "an LSP client"), "an LSP client (pid 1)");
}

// ---------------------------------------------------------------------------
// The client: answers matched by id

/// A scripted server on a socket in `ts`'s directory: for each request line it reads (parsed),
/// `script` says what to write back, or None to close the connection.
fn scripted(
    ts: &TestState,
    script: impl Fn(usize, &Value) -> Option<String> + Send + 'static,
) -> super::client::Control {
    use std::io::{BufRead, BufReader, Write};
    let path = ts.root.join("scripted.sock");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    std::thread::spawn(move || {
        let (stream, _) = listener.accept().unwrap();
        let mut w = stream.try_clone().unwrap();
        for (n, line) in BufReader::new(stream).lines().enumerate() {
            let v: Value = serde_json::from_str(&line.unwrap()).unwrap();
            let Some(reply) = script(n, &v) else { return };
            if w.write_all(reply.as_bytes()).is_err() {
                return;
            }
        }
    });
    super::client::Control::open(&path).unwrap()
}

#[test]
fn a_late_answer_is_never_taken_for_the_next_requests() {
    let ts = state();
    let mut ctl = scripted(&ts, |n, req| {
        assert_eq!(req["id"], n + 1, "{req}");
        let reply = match n {
            // The first answer comes only after the client gave up on it, with the second.
            0 => String::new(),
            1 => "{\"id\":1,\"ok\":true,\"n\":1}\n{\"id\":2,\"ok\":true,\"n\":2}\n".into(),
            // A refusal of a line whose id the server could not read.
            2 => "{\"ok\":false,\"error\":\"too long\"}\n".into(),
            // Half an answer before the client's timeout, the rest after it.
            3 => "{\"id\":4,\"ok\":tr".into(),
            4 => "ue,\"n\":4}\n{\"id\":5,\"ok\":true,\"n\":5}\n".into(),
            5 => "{\"id\":6,\"ok\":false,\"error\":\"refused\"}\n".into(),
            _ => return None,
        };
        Some(reply)
    });
    ctl.set_timeout(Some(Duration::from_millis(200))).unwrap();
    let late = "the ccide server did not answer within 0.2 s".to_string();
    assert_eq!(ctl.request(&Request::Status), Err(late.clone()));
    ctl.set_timeout(Some(Duration::from_secs(20))).unwrap();
    assert_eq!(ctl.request(&Request::DiffList).unwrap()["n"], 2);
    assert_eq!(ctl.request(&Request::Status), Err("too long".into()));
    ctl.set_timeout(Some(Duration::from_millis(200))).unwrap();
    assert_eq!(ctl.request(&Request::Status), Err(late));
    ctl.set_timeout(Some(Duration::from_secs(20))).unwrap();
    assert_eq!(ctl.request(&Request::Status).unwrap()["n"], 5);
    assert_eq!(
        ctl.call(&Request::Status),
        Ok(json!({"id": 6, "ok": false, "error": "refused"}))
    );
    assert_eq!(
        ctl.request(&Request::Status),
        Err("the server closed the control connection".into())
    );
}

#[test]
fn subscribing_waits_for_the_stream_to_be_live() {
    let ts = state();
    let events = scripted(&ts, |_, req| {
        assert_eq!(req["cmd"], "events");
        Some("{\"event\":\"subscribed\"}\n{\"event\":\"diff_opened\",\"id\":\"1\"}\n".into())
    });
    let mut events = events.subscribe().unwrap();
    assert_eq!(events.next_line().unwrap(), "{\"event\":\"subscribed\"}");
    assert_eq!(
        events.next().unwrap(),
        json!({"event": "diff_opened", "id": "1"})
    );
}
