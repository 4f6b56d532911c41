//! Every control command, answered by `handle` from a state in a temporary directory (no
//! socket): the exact JSON `ccide diff`, `select`, `status`, ... read.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::handle;
use crate::rpc::RequestId;
use crate::rpc::call::{Call, Reply};
use crate::rpc::clients::Client;
use crate::state::exec::Mode;
use crate::state::testing::{TestState, sent, state, state_with};

fn ask(ts: &TestState, req: Value) -> Value {
    handle(&ts.state, &req)
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
        json!({"ok": true, "diffs": []})
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
    assert_eq!(list, json!({"ok": true, "diffs": [d1, d2]}));
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
        json!({"ok": true, "diffs": []})
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
        json!({"ok": true, "diffs": []})
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
                {"id": 1, "pid": 4242, "name": "claude-code", "version": "2.0.0", "initialized": true, "ready": true, "since": since(&c)},
                {"id": 2, "pid": null, "name": "", "version": "", "initialized": false, "ready": false, "since": since(&waiting)},
            ],
            "diffs": [described(&ts, 1, "a.txt", "tab", &status["diffs"][0]["created"])],
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
    assert_eq!(ts.state.editor.take_mentions(), Vec::<Value>::new());
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
    assert_eq!(ts.state.editor.take_mentions(), [mention]);
    assert_eq!(ts.state.editor.take_mentions(), Vec::<Value>::new());
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
    assert_eq!(ts.state.editor.take_mentions(), Vec::<Value>::new());
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
