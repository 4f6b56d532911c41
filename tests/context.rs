//! What Claude Code learns of the editor: `ccide select`/`mention`/`open`/`close`/`buffer`/
//! `status`/`claude` reach it as VS Code's notifications and tab model (ccide-protocol(7) §6),
//! the editor tools answer from that model (§7.1), the legacy workspace methods (§7.3) are
//! served directly and as tools, every path is confined to the workspace folders, and the
//! editor model survives a restart.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::util::*;
use serde_json::{Value, json};

/// Five lines, the last without a newline; line 4 has multi-byte characters.
const APP: &str =
    "import os\ndef greet(name): return name\nprint(greet('x'))\ns = \"héllo wörld ✻\"\nlast";

/// Runs a ccide command that must fail with `code`; returns its stderr.
fn run_fails(sb: &Sandbox, args: &[&str], code: i32) -> String {
    let o = sb.run(args);
    assert_eq!(
        o.status.code(),
        Some(code),
        "ccide {args:?}: stdout {} stderr {}",
        stdout(&o),
        stderr(&o)
    );
    stderr(&o)
}

/// A 0-based (line, character) position.
type Pos = (u64, u64);

/// The JSON a tool answers with.
fn tool(c: &mut Client, name: &str, args: Value) -> Value {
    let r = c.call(name, args);
    assert!(r["result"]["isError"] != true, "{name} failed: {r}");
    json_text(&r)
}

/// The notifications named `method` the server sent before answering a ping sent now.
fn quiet(c: &mut Client, method: &str) -> Vec<Value> {
    c.before_ping()
        .into_iter()
        .filter(|v| v["method"] == method)
        .collect()
}

/// Files whose name marks a temporary file of ccide's atomic writes.
fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".ccide-"))
        .collect()
}

// ---------------------------------------------------------------------------------------------
// ccide select

#[test]
fn select_sends_the_0_based_range_and_its_text_to_every_client() {
    let sb = Sandbox::new();
    let app = sb.write("app.py", APP);
    let srv = sb.serve(&[]);
    let mut one = srv.ready_client();
    let mut two = srv.ready_client();
    let cases: &[(&str, Pos, Pos, &str)] = &[
        ("app.py:2:5-2:14", (1, 4), (1, 14), "greet(name"),
        (
            "app.py:1:3-3:2",
            (0, 2),
            (2, 2),
            "port os\ndef greet(name): return name\npr",
        ),
        ("app.py:2", (1, 0), (1, 28), "def greet(name): return name"),
        ("app.py", (0, 0), (0, 0), ""),
        // Columns count characters, not bytes.
        ("app.py:4:6-4:18", (3, 5), (3, 18), "héllo wörld ✻"),
        ("app.py:4", (3, 0), (3, 19), "s = \"héllo wörld ✻\""),
        // The last line has no newline.
        ("app.py:5", (4, 0), (4, 4), "last"),
        ("app.py:4-5", (3, 0), (4, 4), "s = \"héllo wörld ✻\"\nlast"),
        ("app.py:5:2-5:4", (4, 1), (4, 4), "ast"),
        // FILE:LINE:COL is a cursor.
        ("app.py:3:7", (2, 6), (2, 6), ""),
    ];
    for (spec, start, end, text) in cases {
        let o = sb.run_ok(&["select", spec]);
        let want = selection(&app, *start, *end, text);
        for c in [&mut one, &mut two] {
            let n = c.notification("selection_changed");
            assert_eq!(n["jsonrpc"], "2.0");
            assert_eq!(n["params"], want, "ccide select {spec}");
        }
        assert!(
            stderr(&o).ends_with("(sent to 2 clients)\n"),
            "{spec}: {}",
            stderr(&o)
        );
    }
    assert_eq!(
        stderr(&sb.run_ok(&["select", "app.py:1:3-3:2"])),
        "selected 3 line(s) of app.py (sent to 2 clients)\n"
    );
    assert_eq!(
        stderr(&sb.run_ok(&["select", "app.py"])),
        "selected app.py (sent to 2 clients)\n"
    );
}

#[test]
fn the_selection_payload_carries_the_absolute_path_and_a_raw_file_url() {
    let sb = Sandbox::new();
    let file = sb.write("src/my file.py", "x = 1\ny = 2\n");
    let odd = sb.write("odd:name.py", "a\nb\n");
    let srv = sb.serve(&[]);
    let mut c = srv.client();
    sb.run_ok(&["select", "src/my file.py:2:1-2:5"]);
    let n = c.notification("selection_changed");
    assert_eq!(n["params"]["filePath"], s(&file));
    assert_eq!(
        n["params"]["fileUrl"],
        format!("file://{}/src/my file.py", sb.ws().display()),
        "file:// + the raw path, never percent-encoded"
    );
    assert_eq!(n["params"]["selection"]["isEmpty"], false);
    assert_eq!(n["params"], selection(&file, (1, 0), (1, 5), "y = 2"));
    // Selecting also opens and activates the file's tab.
    let st = sb.status();
    assert_eq!(
        st["tabs"],
        json!([{"path": s(&file), "active": true, "preview": false}])
    );
    // A colon in a file name: the range is what follows the last colon that makes one.
    sb.run_ok(&["select", "odd:name.py:2"]);
    assert_eq!(
        c.notification("selection_changed")["params"],
        selection(&odd, (1, 0), (1, 1), "b")
    );
}

#[test]
fn select_with_stdin_takes_the_text_from_standard_input() {
    let sb = Sandbox::new();
    let app = sb.write("app.py", APP);
    let srv = sb.serve(&[]);
    let mut c = srv.client();
    let o = sb.run_stdin(
        &["select", "app.py:2:5-2:14", "--stdin"],
        "greet(name) as the editor has it ✓\n".as_bytes(),
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        c.notification("selection_changed")["params"],
        selection(
            &app,
            (1, 4),
            (1, 14),
            "greet(name) as the editor has it ✓\n"
        )
    );
    // Standard input is read only with --stdin.
    let o = sb.run_stdin(&["select", "app.py:5"], b"ignored");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        c.notification("selection_changed")["params"],
        selection(&app, (4, 0), (4, 4), "last")
    );
}

#[test]
fn select_with_stdin_and_a_whole_line_ends_at_the_end_of_that_line() {
    let sb = Sandbox::new();
    sb.write("app.py", APP);
    let srv = sb.serve(&[]);
    let mut c = srv.client();
    let o = sb.run_stdin(&["select", "app.py:2", "--stdin"], b"the whole line\n");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        c.notification("selection_changed")["params"]["selection"],
        json!({"start": {"line": 1, "character": 0}, "end": {"line": 1, "character": 28}, "isEmpty": false})
    );
    let o = sb.run_stdin(&["select", "app.py:1-2", "--stdin"], b"two lines\n");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        c.notification("selection_changed")["params"]["selection"]["end"],
        json!({"line": 1, "character": 28})
    );
}

#[test]
fn select_takes_the_text_from_the_unsaved_buffer_like_open_file_does() {
    let sb = Sandbox::new();
    let app = sb.write("app.py", "on disk\n");
    let srv = sb.serve(&[]);
    let mut c = srv.client();
    let o = sb.run_stdin(&["buffer", "app.py"], b"in the editor\nsecond line\n");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    sb.run_ok(&["select", "app.py:2"]);
    assert_eq!(
        c.notification("selection_changed")["params"],
        selection(&app, (1, 0), (1, 11), "second line")
    );
}

#[test]
fn select_refuses_ranges_past_the_end_bad_specs_and_files_outside() {
    let sb = Sandbox::new();
    sb.write("app.py", APP);
    std::fs::write(sb.root.join("outside.py"), "secret = 1\n").unwrap();
    let srv = sb.serve(&[]);
    let mut c = srv.client();
    let app = sb.ws().join("app.py");
    let e = run_fails(&sb, &["select", "app.py:9"], 1);
    assert_eq!(
        e,
        format!(
            "ccide: line 9 is past the end of {} (5 lines)\n",
            app.display()
        )
    );
    let e = run_fails(&sb, &["select", "app.py:2-7"], 1);
    assert!(e.contains("line 7 is past the end"), "{e}");
    let e = run_fails(&sb, &["select", "app.py:1:30"], 1);
    assert!(
        e.contains("column 30 is past the end of line 1 (9 characters)"),
        "{e}"
    );
    let e = run_fails(&sb, &["select", "app.py:3-1"], 1);
    assert!(e.contains("ends before it starts"), "{e}");
    let e = run_fails(&sb, &["select", "missing.py:1"], 1);
    assert!(
        e.contains(&format!(
            "File not found: {}",
            sb.ws().join("missing.py").display()
        )),
        "{e}"
    );
    // Bad command lines exit 2.
    let e = run_fails(&sb, &["select", ""], 2);
    assert!(e.contains("cannot read ''"), "{e}");
    run_fails(&sb, &["select"], 2);
    run_fails(&sb, &["select", "app.py:1", "app.py:2"], 2);
    run_fails(&sb, &["select", "app.py:1", "--no-such-flag"], 2);
    // Outside the workspace.
    let e = run_fails(&sb, &["select", "../outside.py:1"], 1);
    assert!(e.contains("outside the workspace"), "{e}");
    assert!(
        e.contains(s(&sb.root.join("outside.py"))),
        "names the path: {e}"
    );
    // None of that reached the client or changed the selection.
    assert_eq!(quiet(&mut c, "selection_changed"), Vec::<Value>::new());
    assert_eq!(sb.status()["selection"], Value::Null);
}

#[test]
fn select_says_a_position_is_not_a_number_and_a_folder_is_no_file() {
    let sb = Sandbox::new();
    sb.write("app.py", APP);
    sb.write("src/lib.py", "x = 1\n");
    let srv = sb.serve(&[]);
    let mut c = srv.client();
    // A file that exists, then what is not a position: a usage error naming it.
    let e = run_fails(&sb, &["select", "app.py:abc"], 2);
    assert_eq!(
        e,
        "ccide: cannot read 'app.py:abc': the line and column after app.py: must be numbers, \
         not 'abc' (expected FILE, FILE:LINE, FILE:LINE:COL, FILE:LINE-LINE or \
         FILE:LINE:COL-LINE:COL, counting from 1)\n\
         Run 'ccide --help' for the commands and their options.\n"
    );
    let e = run_fails(&sb, &["select", "app.py:2:x"], 2);
    assert!(e.contains("not '2:x'"), "{e}");
    let e = run_fails(&sb, &["mention", "app.py:one-two"], 2);
    assert!(e.contains("not 'one-two'"), "{e}");
    // A folder that exists is not "not found": a selection needs a file.
    let e = run_fails(&sb, &["select", "."], 1);
    let ws = sb.ws();
    assert_eq!(
        e,
        format!(
            "ccide: {} is a folder: a selection needs a file (a folder can be mentioned: \
             ccide mention {})\n",
            ws.display(),
            ws.display()
        )
    );
    let e = run_fails(&sb, &["select", "src:3"], 1);
    assert!(
        e.contains("src is a folder: a selection needs a file"),
        "{e}"
    );
    // As the man page says, a folder can be mentioned.
    sb.run_ok(&["mention", "src"]);
    assert_eq!(quiet(&mut c, "selection_changed"), Vec::<Value>::new());
    assert_eq!(sb.status()["selection"], Value::Null);
}

#[test]
fn a_client_connecting_later_gets_the_current_selection_once_initialized() {
    let sb = Sandbox::new();
    let app = sb.write("app.py", APP);
    let srv = sb.serve(&[]);
    let o = sb.run_ok(&["select", "app.py:1:1-1:6"]);
    assert_eq!(
        stderr(&o),
        "selected 1 line(s) of app.py (no client connected)\n"
    );
    sb.run_ok(&["select", "app.py:2:5-2:14"]);
    let mut c = srv.connect();
    let r = c.request(
        "initialize",
        json!({"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"claude-code","version":"2.1.330"}}),
    );
    assert_eq!(r["result"]["serverInfo"]["name"], "Claude Code ccide MCP");
    // The greeting is only scheduled by notifications/initialized: nothing to wait for.
    assert_eq!(
        quiet(&mut c, "selection_changed"),
        Vec::<Value>::new(),
        "nothing before notifications/initialized"
    );
    c.send(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    assert_eq!(
        c.notification("selection_changed")["params"],
        selection(&app, (1, 4), (1, 14), "greet(name"),
        "the current selection, not the first one"
    );
    assert_eq!(quiet(&mut c, "selection_changed"), Vec::<Value>::new());
    // A second client gets it too: the CLI forgets the selection on every connect.
    let mut d = srv.client();
    assert_eq!(
        d.notification("selection_changed")["params"],
        selection(&app, (1, 4), (1, 14), "greet(name")
    );
}

// ---------------------------------------------------------------------------------------------
// ccide mention

#[test]
fn mention_sends_0_based_lines_or_none_and_accepts_directories_without_lines() {
    let sb = Sandbox::new();
    let app = sb.write("app.py", APP);
    sb.write("src/lib.py", "");
    let srv = sb.serve(&[]);
    let mut c = srv.ready_client();
    let mut d = srv.ready_client();
    let o = sb.run_ok(&["mention", "app.py:10-20"]);
    assert_eq!(stderr(&o), "mentioned app.py (sent to 2 clients)\n");
    for x in [&mut c, &mut d] {
        assert_eq!(
            x.notification("at_mentioned")["params"],
            json!({"filePath": s(&app), "lineStart": 9, "lineEnd": 19})
        );
    }
    drop(d);
    wait_for("the server to see the second client go", DEADLINE, || {
        (sb.status()["clients"].as_array()?.len() == 1).then_some(())
    });
    sb.run_ok(&["mention", "app.py:7"]);
    assert_eq!(
        c.notification("at_mentioned")["params"],
        json!({"filePath": s(&app), "lineStart": 6, "lineEnd": 6})
    );
    sb.run_ok(&["mention", "app.py"]);
    assert_eq!(
        c.notification("at_mentioned")["params"],
        json!({"filePath": s(&app)})
    );
    sb.run_ok(&["mention", "src"]);
    assert_eq!(
        c.notification("at_mentioned")["params"],
        json!({"filePath": s(&sb.ws().join("src"))})
    );
    let e = run_fails(&sb, &["mention", "src:3"], 1);
    assert!(
        e.contains(&format!(
            "{} is a directory: mention it without lines",
            sb.ws().join("src").display()
        )),
        "{e}"
    );
    let e = run_fails(&sb, &["mention", "app.py:3:1"], 2);
    assert!(e.contains("mentions take lines only"), "{e}");
    let e = run_fails(&sb, &["mention", "gone.py"], 1);
    assert!(e.contains("File not found"), "{e}");
    let e = run_fails(&sb, &["mention", "app.py:5-2"], 1);
    assert!(e.contains("may not come before the start"), "{e}");
    assert_eq!(quiet(&mut c, "at_mentioned"), Vec::<Value>::new());
}

#[test]
fn mentions_made_with_no_client_wait_for_the_next_handshake_in_order() {
    let sb = Sandbox::new();
    let app = sb.write("app.py", APP);
    sb.write("src/lib.py", "");
    let srv = sb.serve(&[]);
    let o = sb.run_ok(&["mention", "app.py:1-2"]);
    assert_eq!(
        stderr(&o),
        "mentioned app.py: no client connected, queued for the next one\n"
    );
    sb.run_ok(&["mention", "src"]);
    sb.run_ok(&["mention", "app.py:4"]);
    let mut c = srv.connect();
    c.request(
        "initialize",
        json!({"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"claude-code","version":"2.1.330"}}),
    );
    assert_eq!(quiet(&mut c, "at_mentioned"), Vec::<Value>::new());
    c.send(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    let got: Vec<Value> = (0..3)
        .map(|_| c.notification("at_mentioned")["params"].clone())
        .collect();
    assert_eq!(
        got,
        vec![
            json!({"filePath": s(&app), "lineStart": 0, "lineEnd": 1}),
            json!({"filePath": s(&sb.ws().join("src"))}),
            json!({"filePath": s(&app), "lineStart": 3, "lineEnd": 3}),
        ]
    );
    assert_eq!(quiet(&mut c, "at_mentioned"), Vec::<Value>::new());
    // The first client consumed the queue. A selection makes the next greeting visible: the
    // mentions would follow it.
    sb.run_ok(&["select", "app.py:1"]);
    let mut d = srv.client();
    d.notification("selection_changed");
    assert_eq!(quiet(&mut d, "at_mentioned"), Vec::<Value>::new());
}

#[test]
fn queued_mentions_older_than_mention_max_age_are_dropped() {
    let sb = Sandbox::new();
    let app = sb.write("app.py", APP);
    // The young mention must still be young when a client has connected and been greeted,
    // which takes a second or more on a loaded machine: a generous age, then waited out.
    let srv = sb.serve(&["--mention-max-age", "3"]);
    let past_the_age = Duration::from_millis(3200);
    sb.run_ok(&["mention", "app.py:1"]);
    // The age is the condition itself: let it pass.
    std::thread::sleep(past_the_age);
    sb.run_ok(&["mention", "app.py:2"]);
    let mut c = srv.client();
    // The greeting sends the queued mentions at once, oldest first.
    let mut got = vec![c.notification("at_mentioned")];
    got.extend(quiet(&mut c, "at_mentioned"));
    assert_eq!(
        got.into_iter()
            .map(|v| v["params"].clone())
            .collect::<Vec<_>>(),
        vec![json!({"filePath": s(&app), "lineStart": 1, "lineEnd": 1})],
        "only the young mention is delivered"
    );
    drop(c);
    wait_for("the server to see the client go", DEADLINE, || {
        sb.status()["clients"].as_array()?.is_empty().then_some(())
    });
    let o = sb.run_ok(&["mention", "app.py:3"]);
    assert!(stderr(&o).contains("queued"), "{}", stderr(&o));
    std::thread::sleep(past_the_age);
    // A selection makes the greeting visible: the mention would follow it.
    sb.run_ok(&["select", "app.py:1"]);
    let mut d = srv.client();
    d.notification("selection_changed");
    assert_eq!(quiet(&mut d, "at_mentioned"), Vec::<Value>::new());
}

// ---------------------------------------------------------------------------------------------
// Editor tools

#[test]
fn open_file_answers_a_sentence_or_json_and_file_not_found() {
    let sb = Sandbox::new();
    let app = sb.write("app.py", "def main():\n    return 1\n");
    let srv = sb.serve(&[]);
    let mut c = srv.client();
    let r = c.call("openFile", json!({"filePath": s(&app)}));
    assert_eq!(
        r["result"],
        json!({"content": [{"type": "text", "text": format!("Opened file: {}", app.display())}]})
    );
    // A relative path starts at the workspace folder.
    assert_eq!(
        c.call_texts("openFile", json!({"filePath": "app.py"})),
        vec![format!("Opened file: {}", app.display())]
    );
    assert_eq!(
        tool(
            &mut c,
            "openFile",
            json!({"filePath": s(&app), "makeFrontmost": false})
        ),
        json!({
            "success": true, "filePath": s(&app), "fileUrl": format!("file://{}", app.display()),
            "languageId": "python", "lineCount": 2, "isDirty": false, "isUntitled": false,
        })
    );
    let missing = sb.ws().join("missing.py");
    let r = c.call("openFile", json!({"filePath": s(&missing)}));
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert_eq!(
        texts(&r),
        vec![format!("File not found: {}", missing.display())]
    );
    let r = c.call("openFile", json!({"filePath": "missing.py"}));
    assert_eq!(
        texts(&r),
        vec![format!("File not found: {}", missing.display())]
    );
    // A missing required argument is a JSON-RPC error.
    let r = c.call("openFile", json!({}));
    assert_eq!(r["error"]["code"], -32602, "{r}");
    // Opening selects nothing.
    assert_eq!(quiet(&mut c, "selection_changed"), Vec::<Value>::new());
}

#[test]
fn open_file_with_start_and_end_text_broadcasts_the_selection() {
    let sb = Sandbox::new();
    let app = sb.write(
        "app.py",
        "def main():\n    total = compute(1, 2)\n    return total\n",
    );
    let uni = sb.write("uni.py", "x = 'héllo'\ny = 1\n");
    let srv = sb.serve(&[]);
    let mut c = srv.client();
    let mut other = srv.client();
    let cases: &[(Value, &Path, Pos, Pos, &str)] = &[
        (
            json!({"startText": "compute", "endText": ")"}),
            &app,
            (1, 12),
            (1, 25),
            "compute(1, 2)",
        ),
        (
            json!({"startText": "total =", "selectToEndOfLine": true}),
            &app,
            (1, 4),
            (1, 25),
            "total = compute(1, 2)",
        ),
        (
            json!({"startText": "def main", "endText": "return"}),
            &app,
            (0, 0),
            (2, 10),
            "def main():\n    total = compute(1, 2)\n    return",
        ),
        // endText is searched after startText, not from the top.
        (
            json!({"startText": "return", "endText": "total"}),
            &app,
            (2, 4),
            (2, 16),
            "return total",
        ),
        // An empty endText means absent.
        (
            json!({"startText": "compute", "endText": ""}),
            &app,
            (1, 12),
            (1, 19),
            "compute",
        ),
        // Characters, not bytes.
        (json!({"startText": "llo"}), &uni, (0, 7), (0, 10), "llo"),
    ];
    for (extra, file, start, end, text) in cases {
        let mut args = extra.clone();
        args["filePath"] = s(file).into();
        let t = c.call_texts("openFile", args.clone());
        assert!(
            t[0].starts_with(&format!("Opened file: {}", file.display())),
            "{args}: {t:?}"
        );
        let want = selection(file, *start, *end, text);
        assert_eq!(
            c.notification("selection_changed")["params"],
            want,
            "{args}"
        );
        assert_eq!(
            other.notification("selection_changed")["params"],
            want,
            "{args}"
        );
    }
    // An empty startText means absent: no selection.
    let t = c.call_texts("openFile", json!({"filePath": s(&app), "startText": ""}));
    assert_eq!(t, vec![format!("Opened file: {}", app.display())]);
    assert_eq!(quiet(&mut c, "selection_changed"), Vec::<Value>::new());
    assert_eq!(
        tool(&mut c, "getLatestSelection", json!({}))["text"],
        "llo",
        "the last selection made is still the latest"
    );
}

#[test]
fn open_files_and_get_open_editors_describe_the_tabs() {
    let sb = Sandbox::new();
    let rs = sb.write("src/main.rs", "fn main() {}\n");
    let py = sb.write("app.py", "a = 1\nb = 2\nc = 3");
    let txt = sb.write("notes.txt", "");
    let srv = sb.serve(&[]);
    let mut c = srv.client();
    assert_eq!(
        tool(&mut c, "getOpenEditors", json!({})),
        json!({"tabs": []})
    );
    assert_eq!(
        c.call_texts("get_all_opened_file_paths", json!({})),
        vec![""]
    );
    assert_eq!(
        tool(
            &mut c,
            "open_files",
            json!({"file_paths": ["src/main.rs", s(&py), s(&txt)]})
        ),
        json!({"opened_files": [s(&rs), s(&py), s(&txt)]})
    );
    let r = tool(
        &mut c,
        "open_files",
        json!({"file_paths": ["missing.py", "app.py"]}),
    );
    assert_eq!(
        r["opened_files"],
        json!([s(&py)]),
        "a missing file is not opened"
    );
    // openFile activates its tab.
    c.call_texts("openFile", json!({"filePath": s(&py)}));
    let tab = |p: &Path, active: bool, lang: &str, lines: u64| {
        json!({
            "uri": format!("file://{}", p.display()), "isActive": active,
            "label": p.file_name().unwrap().to_str().unwrap(), "languageId": lang,
            "isDirty": false, "fileName": s(p), "lineCount": lines, "isUntitled": false,
            "isPinned": false, "isPreview": false, "groupIndex": 0, "viewColumn": 1,
            "isGroupActive": true,
        })
    };
    assert_eq!(
        tool(&mut c, "getOpenEditors", json!({})),
        json!({"tabs": [
            tab(&rs, false, "rust", 1),
            tab(&py, true, "python", 3),
            tab(&txt, false, "plaintext", 0),
        ]})
    );
    assert_eq!(
        c.call_texts("get_all_opened_file_paths", json!({})),
        vec![format!(
            "{}\n{}\n{}",
            rs.display(),
            py.display(),
            txt.display()
        )]
    );
    // The same tabs, as the status command sees them.
    assert_eq!(
        sb.status()["tabs"],
        json!([
            {"path": s(&rs), "active": false, "preview": false},
            {"path": s(&py), "active": true, "preview": false},
            {"path": s(&txt), "active": false, "preview": false},
        ])
    );
}

#[test]
fn get_workspace_folders_names_the_lock_files_folder() {
    let sb = Sandbox::new();
    let srv = sb.serve(&[]);
    let mut c = srv.client();
    let ws = sb.ws();
    let v = tool(&mut c, "getWorkspaceFolders", json!({}));
    assert_eq!(
        v,
        json!({
            "success": true,
            "folders": [{"name": "ws", "uri": format!("file://{}", ws.display()), "path": s(&ws), "index": 0}],
            "rootPath": s(&ws),
        })
    );
    let paths: Vec<Value> = v["folders"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].clone())
        .collect();
    assert_eq!(Value::Array(paths), srv.lock["workspaceFolders"]);
}

#[test]
fn several_workspace_folders_are_listed_in_order_and_all_are_open_to_the_tools() {
    let sb = Sandbox::new();
    let other = sb.root.join("other");
    sb.root.write("other/lib.rs", "pub fn f() {}\n");
    sb.write("app.py", APP);
    let srv = sb.serve(&["--workspace", s(&other)]);
    assert_eq!(
        srv.lock["workspaceFolders"],
        json!([s(&sb.ws()), s(&other)])
    );
    let mut c = srv.client();
    let ws = sb.ws();
    assert_eq!(
        tool(&mut c, "getWorkspaceFolders", json!({})),
        json!({
            "success": true,
            "folders": [
                {"name": "ws", "uri": format!("file://{}", ws.display()), "path": s(&ws), "index": 0},
                {"name": "other", "uri": format!("file://{}", other.display()), "path": s(&other), "index": 1},
            ],
            "rootPath": s(&ws),
        })
    );
    let lib = other.join("lib.rs");
    assert_eq!(
        c.call_texts("openFile", json!({"filePath": s(&lib)})),
        vec![format!("Opened file: {}", lib.display())]
    );
    // A relative path starts at the first folder.
    let r = c.call("openFile", json!({"filePath": "lib.rs"}));
    assert_eq!(
        texts(&r),
        vec![format!("File not found: {}", ws.join("lib.rs").display())]
    );
}

#[test]
fn current_and_latest_selection_before_and_after_a_selection() {
    let sb = Sandbox::new();
    let app = sb.write("app.py", APP);
    let other = sb.write("other.py", "pass\n");
    let srv = sb.serve(&[]);
    let mut c = srv.client();
    assert_eq!(
        tool(&mut c, "getCurrentSelection", json!({})),
        json!({"success": false, "message": "No active editor found"})
    );
    assert_eq!(
        tool(&mut c, "getLatestSelection", json!({})),
        json!({"success": false, "message": "No selection available"})
    );
    sb.run_ok(&["select", "app.py:2:5-2:14"]);
    let mut want = selection(&app, (1, 4), (1, 14), "greet(name");
    want["success"] = true.into();
    assert_eq!(tool(&mut c, "getCurrentSelection", json!({})), want);
    assert_eq!(tool(&mut c, "getLatestSelection", json!({})), want);
    // Another file becomes active: its (empty) selection is current, the latest stays.
    c.call_texts("openFile", json!({"filePath": s(&other)}));
    let mut empty = selection(&other, (0, 0), (0, 0), "");
    empty["success"] = true.into();
    assert_eq!(tool(&mut c, "getCurrentSelection", json!({})), empty);
    assert_eq!(tool(&mut c, "getLatestSelection", json!({})), want);
}

#[test]
fn check_document_dirty_follows_ccide_buffer() {
    let sb = Sandbox::new();
    let app = sb.write("app.py", "x = 1\n");
    let srv = sb.serve(&[]);
    let mut c = srv.client();
    assert_eq!(
        tool(&mut c, "checkDocumentDirty", json!({"filePath": s(&app)})),
        json!({"success": false, "message": format!("Document not open: {}", app.display())})
    );
    c.call_texts("openFile", json!({"filePath": "app.py"}));
    assert_eq!(
        tool(&mut c, "checkDocumentDirty", json!({"filePath": s(&app)})),
        json!({"success": true, "filePath": s(&app), "isDirty": false, "isUntitled": false})
    );
    let o = sb.run_stdin(&["buffer", "app.py"], b"x = 1\ny = 2\nz = 3\n");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        tool(&mut c, "checkDocumentDirty", json!({"filePath": "app.py"})),
        json!({"success": true, "filePath": s(&app), "isDirty": true, "isUntitled": false})
    );
    // The editor shows the unsaved content.
    let v = tool(
        &mut c,
        "openFile",
        json!({"filePath": s(&app), "makeFrontmost": false}),
    );
    assert_eq!(
        (v["isDirty"].clone(), v["lineCount"].clone()),
        (json!(true), json!(3))
    );
    assert_eq!(
        std::fs::read_to_string(&app).unwrap(),
        "x = 1\n",
        "the file is untouched"
    );
    assert_eq!(
        sb.status()["documents"],
        json!([{"path": s(&app), "bytes": 18}])
    );
    sb.run_ok(&["buffer", "--drop", "app.py"]);
    assert_eq!(
        tool(&mut c, "checkDocumentDirty", json!({"filePath": s(&app)}))["isDirty"],
        false
    );
}

#[test]
fn save_document_writes_the_buffer_keeps_the_mode_and_drops_the_buffer() {
    let sb = Sandbox::new();
    let app = sb.write("app.py", "old\n");
    std::fs::set_permissions(&app, std::fs::Permissions::from_mode(0o640)).unwrap();
    let srv = sb.serve(&[]);
    let mut c = srv.client();
    assert_eq!(
        tool(&mut c, "saveDocument", json!({"filePath": s(&app)})),
        json!({"success": false, "message": format!("Document not open: {}", app.display())})
    );
    let o = sb.run_stdin(&["buffer", "app.py"], "new ✓\n".as_bytes());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        tool(&mut c, "saveDocument", json!({"filePath": s(&app)})),
        json!({"success": true, "filePath": s(&app), "saved": true, "message": "Document saved successfully"})
    );
    assert_eq!(std::fs::read_to_string(&app).unwrap(), "new ✓\n");
    assert_eq!(mode(&app), 0o640);
    assert_eq!(leftovers(&sb.ws()), Vec::<String>::new());
    assert_eq!(
        tool(&mut c, "checkDocumentDirty", json!({"filePath": s(&app)})),
        json!({"success": true, "filePath": s(&app), "isDirty": false, "isUntitled": false})
    );
    assert_eq!(sb.status()["documents"], json!([]));
    let again = tool(&mut c, "saveDocument", json!({"filePath": "app.py"}));
    assert_eq!(again["success"], true);
    assert_eq!(again["saved"], false);
}

#[test]
fn a_failed_save_reports_success_false_and_clobbers_nothing() {
    let sb = Sandbox::new();
    let app = sb.write("app.py", "old\n");
    let lib = sb.write("pkg/lib.py", "lib\n");
    let srv = sb.serve(&[]);
    let mut c = srv.client();
    for f in ["app.py", "pkg/lib.py"] {
        let o = sb.run_stdin(&["buffer", f], b"unsaved\n");
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    }
    // The file became a directory (permissions would not stop root; this stops everyone).
    std::fs::remove_file(&app).unwrap();
    sb.write("app.py/keep.txt", "keep\n");
    let r = tool(&mut c, "saveDocument", json!({"filePath": s(&app)}));
    assert_eq!(r["success"], false, "{r}");
    assert_eq!(r["saved"], false, "{r}");
    assert!(
        r["message"].as_str().unwrap().contains(s(&app)),
        "names the file: {r}"
    );
    assert_eq!(
        std::fs::read_to_string(app.join("keep.txt")).unwrap(),
        "keep\n"
    );
    assert_eq!(leftovers(&sb.ws()), Vec::<String>::new());
    assert_eq!(
        tool(&mut c, "checkDocumentDirty", json!({"filePath": s(&app)}))["isDirty"],
        true,
        "the unsaved content is kept after a failed save"
    );
    // The file's directory became a plain file.
    std::fs::rename(sb.ws().join("pkg"), sb.ws().join("pkg.moved")).unwrap();
    std::fs::write(sb.ws().join("pkg"), "not a directory\n").unwrap();
    let r = tool(&mut c, "saveDocument", json!({"filePath": s(&lib)}));
    assert_eq!(r["success"], false, "{r}");
    assert!(
        r["message"].as_str().unwrap().contains(s(&lib)),
        "names the file: {r}"
    );
    assert_eq!(
        std::fs::read_to_string(sb.ws().join("pkg")).unwrap(),
        "not a directory\n"
    );
    assert_eq!(
        std::fs::read_to_string(sb.ws().join("pkg.moved/lib.py")).unwrap(),
        "lib\n"
    );
}

#[test]
fn close_keeps_unsaved_content_unless_discard() {
    let sb = Sandbox::new();
    let app = sb.write("app.py", "x = 1\n");
    let srv = sb.serve(&[]);
    let mut c = srv.client();
    let o = sb.run_stdin(&["buffer", "app.py"], b"x = 2\n");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = sb.run_ok(&["close", "app.py"]);
    assert_eq!(
        stderr(&o),
        "kept the unsaved content of app.py (use --discard to drop it)\n"
    );
    assert_eq!(
        tool(&mut c, "getOpenEditors", json!({})),
        json!({"tabs": []})
    );
    assert_eq!(
        tool(&mut c, "checkDocumentDirty", json!({"filePath": s(&app)})),
        json!({"success": true, "filePath": s(&app), "isDirty": true, "isUntitled": false})
    );
    // Reopened, it shows the unsaved content.
    let v = tool(
        &mut c,
        "openFile",
        json!({"filePath": s(&app), "makeFrontmost": false}),
    );
    assert_eq!(v["isDirty"], true);
    let o = sb.run_ok(&["close", "--discard", "app.py"]);
    assert_eq!(stderr(&o), "");
    assert_eq!(
        tool(&mut c, "checkDocumentDirty", json!({"filePath": s(&app)})),
        json!({"success": false, "message": format!("Document not open: {}", app.display())})
    );
    assert_eq!(sb.status()["documents"], json!([]));
    let o = sb.run_ok(&["close", "app.py"]);
    assert_eq!(stderr(&o), "app.py was not open\n");
    assert_eq!(std::fs::read_to_string(&app).unwrap(), "x = 1\n");
}

// ---------------------------------------------------------------------------------------------
// The legacy workspace methods (ccide-protocol(7) §7.3)

/// A workspace for the legacy workspace methods (ccide-protocol(7) §7.3): files, a `.git` to skip, and a file of mode 0640.
fn legacy_workspace(sb: &Sandbox) {
    sb.write("app.py", "print(1)\n");
    sb.write("src/a.txt", "alpha ✓\n");
    sb.write("src/b.py", "b\n");
    sb.write("src/deep/c.py", "c\n");
    sb.write("README.md", "# r\n");
    sb.write(".git/config", "[core]\n");
    sb.write(".git/hooks/x.py", "x\n");
}

#[test]
fn legacy_workspace_methods_read_write_and_list_as_json_rpc_methods() {
    let sb = Sandbox::new();
    legacy_workspace(&sb);
    let srv = sb.serve(&[]);
    let mut c = srv.client();
    let ws = sb.ws();
    let r = c.request("readFile", json!({"path": "src/a.txt"}));
    assert_eq!(r["result"], "alpha ✓\n", "{r}");
    let r = c.request("readFile", json!({"path": "src/none.txt"}));
    assert_eq!(r["error"]["code"], -32603, "{r}");
    let m = r["error"]["message"].as_str().unwrap();
    assert!(m.starts_with("failed to read file"), "{m}");
    assert!(m.contains(s(&ws.join("src/none.txt"))), "{m}");
    // writeFile replaces the file through a new inode (atomically) and keeps its mode.
    let a = ws.join("src/a.txt");
    std::fs::set_permissions(&a, std::fs::Permissions::from_mode(0o640)).unwrap();
    let ino = std::fs::metadata(&a).unwrap().ino();
    let r = c.request(
        "writeFile",
        json!({"path": "src/a.txt", "content": "beta\n"}),
    );
    assert!(r.get("error").is_none(), "{r}");
    assert_eq!(std::fs::read_to_string(&a).unwrap(), "beta\n");
    assert_ne!(std::fs::metadata(&a).unwrap().ino(), ino);
    assert_eq!(mode(&a), 0o640);
    assert_eq!(leftovers(&ws.join("src")), Vec::<String>::new());
    let r = c.request("writeFile", json!({"path": "nodir/x.txt", "content": "x"}));
    assert_eq!(r["error"]["code"], -32603, "{r}");
    assert!(!ws.join("nodir").exists());
    assert_eq!(
        c.request("listFiles", json!({"pattern": "**/*.py"}))["result"],
        json!({"files": ["app.py", "src/b.py", "src/deep/c.py"], "truncated": false})
    );
    assert_eq!(
        c.request("listFiles", json!({}))["result"],
        json!({"files": ["README.md", "app.py", "src/a.txt", "src/b.py", "src/deep/c.py"], "truncated": false})
    );
    let info = c.request("getWorkspaceInfo", json!({}))["result"].clone();
    assert_eq!(
        (
            &info["name"],
            &info["path"],
            &info["fileCount"],
            &info["type"]
        ),
        (&json!("ws"), &json!(s(&ws)), &json!(5), &json!("folder")),
        "{info}"
    );
    assert_eq!(c.request("getOpenFiles", json!({}))["result"], json!([]));
    assert_eq!(
        c.request("getCurrentFile", json!({}))["result"],
        Value::Null
    );
    sb.run_ok(&["open", "src/b.py", "app.py"]);
    assert_eq!(
        c.request("getOpenFiles", json!({}))["result"],
        json!([
            {"path": "src/b.py", "absolutePath": s(&ws.join("src/b.py")), "isActive": false},
            {"path": "app.py", "absolutePath": s(&ws.join("app.py")), "isActive": true},
        ])
    );
    assert_eq!(
        c.request("getCurrentFile", json!({}))["result"],
        json!({"path": "app.py", "absolutePath": s(&ws.join("app.py"))})
    );
}

#[test]
fn legacy_workspace_methods_are_also_tools_answering_the_same_as_text() {
    let sb = Sandbox::new();
    legacy_workspace(&sb);
    let srv = sb.serve(&[]);
    let mut c = srv.client();
    let ws = sb.ws();
    assert_eq!(
        c.call_texts("readFile", json!({"path": "src/a.txt"})),
        vec!["alpha ✓\n"]
    );
    // A leading '/' is dropped: the legacy workspace methods' paths are workspace-relative.
    assert_eq!(
        c.call_texts("readFile", json!({"path": "/src/a.txt"})),
        vec!["alpha ✓\n"]
    );
    let r = c.call("readFile", json!({"path": "src/none.txt"}));
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert_eq!(
        texts(&r),
        vec![format!(
            "failed to read file: File not found: {}",
            ws.join("src/none.txt").display()
        )]
    );
    let a = ws.join("src/a.txt");
    std::fs::set_permissions(&a, std::fs::Permissions::from_mode(0o640)).unwrap();
    let ino = std::fs::metadata(&a).unwrap().ino();
    assert_eq!(
        tool(
            &mut c,
            "writeFile",
            json!({"path": "src/a.txt", "content": "beta\n"})
        ),
        json!({"success": true, "path": s(&a), "bytes": 5})
    );
    assert_eq!(std::fs::read_to_string(&a).unwrap(), "beta\n");
    assert_ne!(
        std::fs::metadata(&a).unwrap().ino(),
        ino,
        "written beside and renamed over"
    );
    assert_eq!(mode(&a), 0o640);
    assert_eq!(leftovers(&ws.join("src")), Vec::<String>::new());
    let r = c.call("writeFile", json!({"path": "nodir/x.txt", "content": "x"}));
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert!(
        texts(&r)[0].contains(s(&ws.join("nodir"))),
        "{:?}",
        texts(&r)
    );
    assert!(!ws.join("nodir").exists());
    assert_eq!(
        tool(&mut c, "listFiles", json!({"pattern": "**/*.py"})),
        json!({"files": ["app.py", "src/b.py", "src/deep/c.py"], "truncated": false})
    );
    assert_eq!(
        tool(&mut c, "listFiles", json!({})),
        json!({"files": ["README.md", "app.py", "src/a.txt", "src/b.py", "src/deep/c.py"], "truncated": false})
    );
    let info = tool(&mut c, "getWorkspaceInfo", json!({}));
    assert_eq!(
        (
            &info["name"],
            &info["path"],
            &info["fileCount"],
            &info["type"]
        ),
        (&json!("ws"), &json!(s(&ws)), &json!(5), &json!("folder")),
        "{info}"
    );
    assert_eq!(tool(&mut c, "getOpenFiles", json!({})), json!([]));
    assert_eq!(tool(&mut c, "getCurrentFile", json!({})), Value::Null);
    sb.run_ok(&["open", "src/b.py", "app.py"]);
    assert_eq!(
        tool(&mut c, "getOpenFiles", json!({})),
        json!([
            {"path": "src/b.py", "absolutePath": s(&ws.join("src/b.py")), "isActive": false},
            {"path": "app.py", "absolutePath": s(&ws.join("app.py")), "isActive": true},
        ])
    );
    assert_eq!(
        tool(&mut c, "getCurrentFile", json!({})),
        json!({"path": "app.py", "absolutePath": s(&ws.join("app.py"))})
    );
}

// ---------------------------------------------------------------------------------------------
// Confinement

const SECRET: &str = "SECRET outside the workspace\n";

/// Escapes from the workspace: `(path given, path the refusal names)`. Outside the workspace
/// lie `outside.txt` and `outdir/secret.txt`, reached by `..`, an absolute path, a file
/// symlink and a directory symlink.
fn escapes(sb: &Sandbox) -> Vec<(String, PathBuf)> {
    sb.write("inside.txt", "inside\n");
    std::fs::write(sb.root.join("outside.txt"), SECRET).unwrap();
    sb.root.write("outdir/secret.txt", SECRET);
    // A sibling whose name starts with the workspace's: a string prefix, not a parent.
    sb.root.write("wsx/secret.txt", SECRET);
    std::os::unix::fs::symlink(sb.root.join("outside.txt"), sb.ws().join("link.txt")).unwrap();
    std::os::unix::fs::symlink(sb.root.join("outdir"), sb.ws().join("linkdir")).unwrap();
    let outside = sb.root.join("outside.txt");
    vec![
        ("../outside.txt".into(), outside.clone()),
        (s(&outside).into(), outside),
        ("link.txt".into(), sb.ws().join("link.txt")),
        (
            "linkdir/secret.txt".into(),
            sb.ws().join("linkdir/secret.txt"),
        ),
        ("../wsx/secret.txt".into(), sb.root.join("wsx/secret.txt")),
    ]
}

/// Everything outside the workspace, unchanged: no file written, none created.
fn assert_outside_untouched(sb: &Sandbox) {
    assert_eq!(
        std::fs::read_to_string(sb.root.join("outside.txt")).unwrap(),
        SECRET
    );
    assert_eq!(
        std::fs::read_to_string(sb.root.join("outdir/secret.txt")).unwrap(),
        SECRET
    );
    let mut names: Vec<String> = std::fs::read_dir(sb.root.path())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| !n.ends_with(".log"))
        .collect();
    names.sort();
    assert_eq!(
        names,
        [
            "bin",
            "config",
            "home",
            "outdir",
            "outside.txt",
            "state",
            "ws",
            "wsx"
        ]
    );
    assert_eq!(
        std::fs::read_to_string(sb.root.join("wsx/secret.txt")).unwrap(),
        SECRET
    );
    let outdir: Vec<_> = std::fs::read_dir(sb.root.join("outdir"))
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(outdir, vec!["secret.txt"]);
}

#[test]
fn read_file_refuses_paths_leading_outside_and_returns_nothing_from_there() {
    let sb = Sandbox::new();
    let cases = escapes(&sb);
    let srv = sb.serve(&[]);
    let mut c = srv.client();
    for (raw, named) in &cases {
        let r = c.call("readFile", json!({"path": raw}));
        assert_eq!(r["result"]["isError"], true, "{raw}: {r}");
        let m = texts(&r).join("");
        assert!(!m.contains("SECRET"), "{raw}: {m}");
        // A leading '/' makes the path workspace-relative (ccide-protocol(7) §7.3), so it names that.
        let named = if raw.starts_with('/') {
            sb.ws().join(raw.trim_start_matches('/'))
        } else {
            named.clone()
        };
        assert!(m.contains(s(&named)), "{raw}: {m}");
    }
    assert_outside_untouched(&sb);
    // A symlink that stays inside the workspace is fine.
    std::os::unix::fs::symlink(sb.ws().join("inside.txt"), sb.ws().join("inlink.txt")).unwrap();
    assert_eq!(
        c.call_texts("readFile", json!({"path": "inlink.txt"})),
        vec!["inside\n"]
    );
}

#[test]
fn read_file_as_a_direct_method_refuses_paths_leading_outside() {
    let sb = Sandbox::new();
    let cases = escapes(&sb);
    let srv = sb.serve(&[]);
    let mut c = srv.client();
    for (raw, _) in &cases {
        let r = c.request("readFile", json!({"path": raw}));
        assert_eq!(r["error"]["code"], -32603, "{raw}: {r}");
        assert!(!r.to_string().contains("SECRET"), "{raw}: {r}");
        assert!(
            r["error"]["message"]
                .as_str()
                .unwrap()
                .contains(raw.trim_start_matches('/').trim_start_matches("../")),
            "{raw}: {r}"
        );
    }
    assert_outside_untouched(&sb);
}

#[test]
fn write_file_refuses_paths_leading_outside_and_writes_nothing_there() {
    let sb = Sandbox::new();
    let mut cases = escapes(&sb);
    cases.push(("../new-outside.txt".into(), sb.root.join("new-outside.txt")));
    cases.push(("linkdir/new.txt".into(), sb.ws().join("linkdir/new.txt")));
    let srv = sb.serve(&[]);
    let mut c = srv.client();
    for (raw, named) in &cases {
        let r = c.call("writeFile", json!({"path": raw, "content": "pwned\n"}));
        assert_eq!(r["result"]["isError"], true, "{raw}: {r}");
        if !raw.starts_with('/') {
            let m = texts(&r).join("");
            assert!(m.contains(s(named)), "{raw}: {m}");
            assert!(m.contains("outside the workspace"), "{raw}: {m}");
        }
    }
    // A dangling symlink leading out is not followed to create its target.
    let target = sb.root.join("made-by-dangling.txt");
    std::os::unix::fs::symlink(&target, sb.ws().join("dangling.txt")).unwrap();
    let r = c.call(
        "writeFile",
        json!({"path": "dangling.txt", "content": "pwned\n"}),
    );
    assert_eq!(r["result"]["isError"], true, "{r}");
    assert!(
        texts(&r)[0].contains(s(&sb.ws().join("dangling.txt"))),
        "{r}"
    );
    assert!(!target.exists());
    assert_outside_untouched(&sb);
    // The symlinks themselves are not replaced either, and the absolute path created nothing.
    for link in ["link.txt", "linkdir", "dangling.txt"] {
        assert!(
            std::fs::symlink_metadata(sb.ws().join(link))
                .unwrap()
                .file_type()
                .is_symlink(),
            "{link}"
        );
    }
    assert!(
        !sb.ws()
            .join(sb.root.path().strip_prefix("/").unwrap())
            .exists()
    );
}

#[test]
fn open_file_refuses_paths_leading_outside() {
    let sb = Sandbox::new();
    let cases = escapes(&sb);
    let srv = sb.serve(&[]);
    let mut c = srv.client();
    for (raw, named) in &cases {
        let r = c.call(
            "openFile",
            json!({"filePath": raw, "startText": "SECRET", "makeFrontmost": false}),
        );
        assert_eq!(r["result"]["isError"], true, "{raw}: {r}");
        let m = texts(&r).join("");
        assert!(m.contains(s(named)), "{raw}: {m}");
        assert!(m.contains("outside the workspace"), "{raw}: {m}");
        assert!(!m.contains("SECRET"), "{raw}: {m}");
    }
    assert_eq!(quiet(&mut c, "selection_changed"), Vec::<Value>::new());
    assert_eq!(
        tool(&mut c, "getOpenEditors", json!({})),
        json!({"tabs": []})
    );
    assert_outside_untouched(&sb);
}

#[test]
fn save_document_and_buffer_refuse_paths_leading_outside() {
    let sb = Sandbox::new();
    let cases = escapes(&sb);
    let srv = sb.serve(&[]);
    let mut c = srv.client();
    for (raw, named) in &cases {
        let o = sb.run_stdin(&["buffer", raw], b"pwned\n");
        assert_eq!(o.status.code(), Some(1), "buffer {raw}");
        assert!(
            stderr(&o).contains("outside the workspace"),
            "{raw}: {}",
            stderr(&o)
        );
        let r = tool(&mut c, "saveDocument", json!({"filePath": raw}));
        assert_eq!(r["success"], false, "{raw}: {r}");
        let m = r["message"].as_str().unwrap();
        assert!(m.contains(s(named)), "{raw}: {m}");
        assert!(m.contains("outside the workspace"), "{raw}: {m}");
    }
    // A buffer made inside, then the file swapped for a symlink leading out: still refused.
    let inside = sb.ws().join("inside.txt");
    let o = sb.run_stdin(&["buffer", "inside.txt"], b"pwned\n");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    std::fs::remove_file(&inside).unwrap();
    std::os::unix::fs::symlink(sb.root.join("outside.txt"), &inside).unwrap();
    let r = tool(&mut c, "saveDocument", json!({"filePath": s(&inside)}));
    assert_eq!(r["success"], false, "{r}");
    assert!(r["message"].as_str().unwrap().contains(s(&inside)), "{r}");
    assert!(
        std::fs::symlink_metadata(&inside)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_outside_untouched(&sb);
}

#[test]
fn select_refuses_paths_leading_outside_and_sends_nothing() {
    let sb = Sandbox::new();
    let cases = escapes(&sb);
    let srv = sb.serve(&[]);
    let mut c = srv.client();
    for (raw, named) in &cases {
        for spec in [format!("{raw}:1"), raw.clone()] {
            let o = sb.run(&["select", &spec]);
            assert_eq!(o.status.code(), Some(1), "select {spec}");
            let e = stderr(&o);
            assert!(e.contains("outside the workspace"), "{spec}: {e}");
            assert!(e.contains(s(named)), "{spec}: {e}");
            assert!(!e.contains("SECRET") && !stdout(&o).contains("SECRET"));
        }
        let e = run_fails(&sb, &["mention", raw], 1);
        assert!(e.contains("outside the workspace"), "mention {raw}: {e}");
    }
    assert_eq!(quiet(&mut c, "selection_changed"), Vec::<Value>::new());
    assert_eq!(quiet(&mut c, "at_mentioned"), Vec::<Value>::new());
    let st = sb.status();
    assert_eq!(st["selection"], Value::Null);
    assert_eq!(st["tabs"], json!([]));
    assert_outside_untouched(&sb);
}

// ---------------------------------------------------------------------------------------------
// Restart, status, claude

#[test]
fn the_editor_model_survives_a_restart() {
    let sb = Sandbox::new();
    let app = sb.write("app.py", APP);
    let lib = sb.write("src/lib.rs", "pub fn f() {}\n");
    let mut first = sb.serve(&[]);
    sb.run_ok(&["open", "src/lib.rs", "app.py"]);
    sb.run_ok(&["select", "app.py:2:5-2:14"]);
    let o = sb.run_stdin(&["buffer", "src/lib.rs"], b"pub fn g() {}\n");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let before = sb.status();
    assert_eq!(
        before["tabs"],
        json!([
            {"path": s(&lib), "active": false, "preview": false},
            {"path": s(&app), "active": true, "preview": false},
        ])
    );
    let want = selection(&app, (1, 4), (1, 14), "greet(name");
    assert_eq!(before["selection"], want);
    assert_eq!(before["documents"], json!([{"path": s(&lib), "bytes": 14}]));
    assert_eq!(first.stop_with("TERM"), Some(0));
    let second = sb.serve(&[]);
    let after = sb.status();
    for k in ["tabs", "selection", "documents"] {
        assert_eq!(after[k], before[k], "{k} after the restart");
    }
    let mut c = second.client();
    assert_eq!(c.notification("selection_changed")["params"], want);
    let tabs = tool(&mut c, "getOpenEditors", json!({}))["tabs"].clone();
    let summary: Vec<Value> = tabs
        .as_array()
        .unwrap()
        .iter()
        .map(|t| json!([t["fileName"], t["isActive"], t["isDirty"]]))
        .collect();
    assert_eq!(
        summary,
        vec![json!([s(&lib), false, true]), json!([s(&app), true, false])]
    );
    let mut latest = want.clone();
    latest["success"] = true.into();
    assert_eq!(tool(&mut c, "getLatestSelection", json!({})), latest);
    assert_eq!(
        tool(&mut c, "saveDocument", json!({"filePath": s(&lib)}))["saved"],
        true
    );
    assert_eq!(std::fs::read_to_string(&lib).unwrap(), "pub fn g() {}\n");
}

#[test]
fn status_shows_port_folders_clients_tabs_and_selection() {
    let sb = Sandbox::new();
    let app = sb.write("app.py", APP);
    sb.write("notes.txt", "");
    let srv = sb.serve(&[]);
    let _c = srv.client();
    sb.run_ok(&["open", "notes.txt"]);
    sb.run_ok(&["select", "app.py:2:5-2:14"]);
    let o = sb.run_stdin(&["buffer", "notes.txt"], b"todo");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let st = sb.status();
    assert_eq!(st["port"], json!(srv.port));
    assert_eq!(st["pid"], json!(srv.pid()));
    assert_eq!(st["ide_name"], "ccide (ws)");
    assert_eq!(st["workspaces"], json!([s(&sb.ws())]));
    assert_eq!(st["state_dir"], s(&sb.state()));
    let clients = st["clients"].as_array().unwrap();
    assert_eq!(clients.len(), 1, "{st}");
    assert_eq!(
        clients[0]["pid"],
        json!(std::process::id()),
        "from ide_connected"
    );
    assert_eq!(clients[0]["name"], "claude-code");
    assert_eq!(clients[0]["version"], "2.1.330");
    assert_eq!(clients[0]["initialized"], true);
    let notes = sb.ws().join("notes.txt");
    assert_eq!(
        st["tabs"],
        json!([
            {"path": s(&notes), "active": false, "preview": false},
            {"path": s(&app), "active": true, "preview": false},
        ])
    );
    assert_eq!(
        st["selection"],
        selection(&app, (1, 4), (1, 14), "greet(name")
    );
    assert_eq!(st["documents"], json!([{"path": s(&notes), "bytes": 4}]));
    let text = stdout(&sb.run_ok(&["status"]));
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with(&format!(
            "server   ccide (ws) (pid {}) on 127.0.0.1:{}, up ",
            srv.pid(),
            srv.port
        )),
        "{text}"
    );
    assert_eq!(lines[1], format!("folder   {}", sb.ws().display()));
    assert_eq!(lines[2], format!("state    {}", sb.state().display()));
    assert!(
        lines[3].starts_with(&format!(
            "client   #{} claude-code 2.1.330 pid {} for ",
            clients[0]["id"],
            std::process::id()
        )),
        "{text}"
    );
    assert_eq!(
        lines[4..],
        [
            "tab      notes.txt",
            "tab      app.py (active)",
            "unsaved  notes.txt (4 bytes)",
            "select   app.py:2:5-2:14",
        ]
    );
}

/// A stand-in for `claude` that records what it was given and exits 7.
fn fake_claude(sb: &Sandbox) -> PathBuf {
    let out = sb.root.join("claude-ran.txt");
    let script = format!(
        r#"{{
  printf 'port=%s\n' "$CLAUDE_CODE_SSE_PORT"
  printf 'ide=%s\n' "$ENABLE_IDE_INTEGRATION"
  printf 'auto_connect=%s\n' "${{CLAUDE_CODE_AUTO_CONNECT_IDE-unset}}"
  printf 'no_proxy=%s\n' "$no_proxy"
  printf 'NO_PROXY=%s\n' "$NO_PROXY"
  printf 'cwd=%s\n' "$(pwd -P)"
  for a in "$@"; do printf 'arg=%s\n' "$a"; done
  for f in "$CLAUDE_CONFIG_DIR"/ide/*.lock; do
    [ -e "$f" ] && printf 'lock=%s\n' "${{f##*/}}" && cp "$f" '{root}/lock-seen.json'
  done
  '{bin}' status --json > '{root}/status-seen.json' && printf 'status=ok\n'
}} > '{out}'
exit 7"#,
        root = sb.root.path().display(),
        bin = BIN,
        out = out.display(),
    );
    sb.script("fake-claude", &script)
}

fn recorded(sb: &Sandbox) -> Vec<String> {
    std::fs::read_to_string(sb.root.join("claude-ran.txt"))
        .expect("the stand-in ran")
        .lines()
        .map(String::from)
        .collect()
}

#[test]
fn claude_runs_with_the_running_servers_port_and_loopback_exempt_from_proxies() {
    let sb = Sandbox::new();
    let srv = sb.serve(&[]);
    let script = fake_claude(&sb);
    let o = sb
        .command(&["claude", "some", "args with  spaces", "--ide"])
        .env("CCIDE_CLAUDE", &script)
        .env("no_proxy", "corp.example")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(7), "{}", stderr(&o));
    assert_eq!(
        recorded(&sb),
        vec![
            format!("port={}", srv.port),
            "ide=true".into(),
            "auto_connect=1".into(),
            "no_proxy=corp.example,127.0.0.1,localhost,::1".into(),
            "NO_PROXY=127.0.0.1,localhost,::1".into(),
            format!("cwd={}", sb.ws().display()),
            "arg=some".into(),
            "arg=args with  spaces".into(),
            "arg=--ide".into(),
            format!("lock={}.lock", srv.port),
            "status=ok".into(),
        ]
    );
    assert!(srv.lock_path.exists(), "the running server is left alone");
}

/// A CLI of 2.1.50 or older connects by itself only with CLAUDE_CODE_AUTO_CONNECT_IDE (the
/// port alone is not enough there): `ccide claude` sets it to 1, unless the user gave it a value,
/// which is kept (a false one says not to connect by itself).
#[test]
fn claude_sets_auto_connect_unless_the_user_did() {
    let sb = Sandbox::new();
    let _srv = sb.serve(&[]);
    let script = fake_claude(&sb);
    for (given, seen) in [
        (None, "1"),
        (Some(""), "1"),
        (Some("0"), "0"),
        (Some("true"), "true"),
    ] {
        let mut cmd = sb.command(&["claude"]);
        cmd.env("CCIDE_CLAUDE", &script);
        if let Some(v) = given {
            cmd.env("CLAUDE_CODE_AUTO_CONNECT_IDE", v);
        }
        let o = cmd.output().unwrap();
        assert_eq!(o.status.code(), Some(7), "{}", stderr(&o));
        assert_eq!(
            recorded(&sb)[2],
            format!("auto_connect={seen}"),
            "given {given:?}"
        );
    }
}

#[test]
fn claude_without_a_server_serves_one_for_the_childs_lifetime() {
    let sb = Sandbox::new();
    let script = fake_claude(&sb);
    let o = sb
        .command(&["claude", "-p", "hello"])
        .env("CCIDE_CLAUDE", &script)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(7), "{}", stderr(&o));
    let lines = recorded(&sb);
    let port: u16 = lines[0].strip_prefix("port=").unwrap().parse().unwrap();
    assert_eq!(
        lines[1..],
        [
            "ide=true".to_string(),
            "auto_connect=1".into(),
            "no_proxy=127.0.0.1,localhost,::1".into(),
            "NO_PROXY=127.0.0.1,localhost,::1".into(),
            format!("cwd={}", sb.ws().display()),
            "arg=-p".into(),
            "arg=hello".into(),
            format!("lock={port}.lock"),
            "status=ok".into(),
        ]
    );
    let lock: Value =
        serde_json::from_slice(&std::fs::read(sb.root.join("lock-seen.json")).unwrap()).unwrap();
    assert_eq!(lock["workspaceFolders"], json!([s(&sb.ws())]));
    let st: Value =
        serde_json::from_slice(&std::fs::read(sb.root.join("status-seen.json")).unwrap()).unwrap();
    assert_eq!(st["port"], json!(port));
    assert_eq!(
        list_locks(&sb.config().join("ide")),
        Vec::<PathBuf>::new(),
        "no lock file remains"
    );
    assert_eq!(
        (stdout(&o), stderr(&o)),
        (String::new(), String::new()),
        "the in-process server does not write to the terminal"
    );
    // Its control socket is gone too.
    let states = sb.home().join(".local/state/ccide");
    let sockets: Vec<PathBuf> = std::fs::read_dir(&states)
        .unwrap()
        .flatten()
        .map(|e| e.path().join("control.sock"))
        .filter(|p| p.exists())
        .collect();
    assert_eq!(sockets, Vec::<PathBuf>::new());
}

#[test]
fn claude_that_cannot_start_says_so_and_leaves_no_server_behind() {
    let sb = Sandbox::new();
    let missing = sb.root.join("no-such-claude");
    let o = sb
        .command(&["claude"])
        .env("CCIDE_CLAUDE", &missing)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!("cannot run {}", missing.display())),
        "{}",
        stderr(&o)
    );
    assert_eq!(list_locks(&sb.config().join("ide")), Vec::<PathBuf>::new());
}

/// The real CLI drops notifications that arrive before its setup ends (its tools/list): what a
/// client missed is sent after it, never right after `notifications/initialized`.
#[test]
fn missed_selection_and_queued_mentions_follow_the_clients_tools_list() {
    let sb = Sandbox::new();
    sb.write("app.py", "one\ntwo\n");
    let s = sb.serve(&[]);
    assert!(sb.run(&["select", "app.py:2"]).status.success());
    assert!(sb.run(&["mention", "app.py:1"]).status.success());
    let mut c = s.connect();
    c.request("initialize", json!({"protocolVersion": "2025-11-25"}));
    c.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    // A deliberate window, not a wait for nothing: the greeting's timer is what is tested. It
    // fires 250 ms after tools/list, or 1500 ms after initialized for a client that never asks;
    // 600 ms without tools/list must bring nothing.
    let early = c.drain(Duration::from_millis(600));
    assert!(
        early.iter().all(|m| m.get("method").is_none()),
        "nothing before tools/list: {early:?}"
    );
    c.request("tools/list", json!({}));
    let sel = c.notification("selection_changed");
    assert_eq!(sel["params"]["text"], "two");
    let m = c.notification("at_mentioned");
    assert_eq!(m["params"]["lineStart"], 0);
}
