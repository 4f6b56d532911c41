//! Sessions and reviews: several clients sharing one server's diffs, notifications
//! made while a client is still being set up, the review of what the CLI really writes (line
//! endings, encodings), odd files (empty, above 16 MiB, a diff gone broken, names with control
//! characters, paths through symlinks) and `ccide claude`'s arguments. Each test would have
//! failed before the fix.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::mpsc::{Receiver, channel};

use crate::util::*;
use serde_json::{Value, json};

/// The pending diff of `file` in a `ccide diff --json` listing.
fn diff_of<'a>(list: &'a [Value], file: &Path) -> &'a Value {
    list.iter()
        .find(|d| d["file"] == s(file))
        .unwrap_or_else(|| panic!("no diff for {} in {list:?}", file.display()))
}

fn id_of(d: &Value) -> &str {
    d["id"].as_str().expect("a diff id")
}

/// `ccide events`, its lines read on a thread of their own.
struct Events {
    child: std::process::Child,
    lines: Receiver<Value>,
}

impl Events {
    fn start(sb: &Sandbox) -> Events {
        let mut child = sb
            .command(&["events"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, lines) = channel();
        std::thread::spawn(move || {
            for l in std::io::BufReader::new(out).lines() {
                let Ok(l) = l else { return };
                let v: Value = serde_json::from_str(&l).expect("an event is one JSON line");
                if tx.send(v).is_err() {
                    return;
                }
            }
        });
        let e = Events { child, lines };
        assert_eq!(e.next()["event"], "subscribed");
        e
    }

    fn next(&self) -> Value {
        self.lines
            .recv_timeout(DEADLINE)
            .expect("an event within the deadline")
    }
}

impl Drop for Events {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ---------------------------------------------------------------------------------------------
// 13.1 Each client closes only its own diffs.

#[test]
fn close_all_diff_tabs_closes_only_the_callers_diffs_even_under_a_shared_tab_name() {
    let sb = Sandbox::new();
    let a = sb.write("a.txt", "a\n");
    let b = sb.write("b.txt", "b\n");
    let other = sb.write("c.txt", "c\n");
    let srv = sb.serve(&[]);
    let mut ca = srv.ready_client();
    let mut cb = srv.ready_client();
    // Interleaved, and B names its second diff like A's first, for another file.
    let ida = open_diff(&mut ca, &a, "A\n", "tab a");
    let idb = open_diff(&mut cb, &b, "B\n", "tab b");
    let _idc = open_diff(&mut cb, &other, "C\n", "tab a");
    let list = wait_pending(&sb, 3);
    assert_eq!(
        ca.before_ping(),
        Vec::<Value>::new(),
        "B's diff named like A's leaves A's alone"
    );
    let (da, db, dc) = (
        diff_of(&list, &a).clone(),
        diff_of(&list, &b).clone(),
        diff_of(&list, &other).clone(),
    );
    let a_client = da["client"].as_u64().unwrap();
    assert_eq!(db["client"], dc["client"]);
    assert_ne!(db["client"], da["client"]);

    assert_eq!(
        ca.call_texts("closeAllDiffTabs", json!({})),
        vec!["CLOSED_1_DIFF_TABS"]
    );
    assert_eq!(texts(&ca.response(&ida)), vec!["DIFF_REJECTED", "tab a"]);
    assert_eq!(cb.before_ping(), Vec::<Value>::new(), "B hears nothing");
    let left = wait_pending(&sb, 2);
    let mut ids: Vec<&str> = left.iter().map(id_of).collect();
    ids.sort();
    let mut want = vec![id_of(&db), id_of(&dc)];
    want.sort();
    assert_eq!(ids, want, "B's diffs are still pending: {left:?}");

    let o = sb.run_ok(&["diff", "accept", id_of(&db)]);
    assert_eq!(
        stdout(&o),
        format!(
            "accepted diff {} (b.txt): Claude Code writes the content of proposed\n",
            id_of(&db)
        )
    );
    assert_eq!(texts(&cb.response(&idb)), vec!["FILE_SAVED", "B\n"]);
    assert_eq!(ca.before_ping(), Vec::<Value>::new(), "A hears nothing");
    assert_eq!(
        cb.before_ping(),
        Vec::<Value>::new(),
        "B's other diff stays unanswered"
    );
    assert_eq!(wait_pending(&sb, 1)[0]["id"], dc["id"]);
    let line = format!(
        "diff {} for {} closed by client #{a_client}",
        id_of(&da),
        a.display()
    );
    wait_for("the log to name the client that closed", DEADLINE, || {
        srv.log().contains(&line).then_some(())
    });
}

// ---------------------------------------------------------------------------------------------
// 13.2 What is selected or mentioned while a client is set up reaches it after its setup.

#[test]
fn a_selection_and_a_mention_made_during_setup_arrive_in_order_once_the_client_is_ready() {
    let sb = Sandbox::new();
    let app = sb.write("app.py", "one\ntwo\nthree\n");
    let note = sb.write("note.txt", "x\n");
    let srv = sb.serve(&[]);
    let events = Events::start(&sb);
    let mut ready = srv.ready_client();
    let first = events.next();
    assert_eq!(first["event"], "client_connected");
    let ready_id = first["client"].as_u64().unwrap();

    // A client as the CLI starts one, nobody waiting for its setup to settle.
    let mut c = srv.connect();
    let r = c.request(
        "initialize",
        json!({"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"claude-code","version":"2.1.330"}}),
    );
    assert_eq!(r["result"]["serverInfo"]["name"], "Claude Code ccide MCP");
    c.send(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    c.send(&json!({"jsonrpc":"2.0","method":"ide_connected","params":{"pid": std::process::id()}}));
    // The server reads a connection in order: once this is answered, the client counts as
    // initialized and its greeting is 1.5 s away (250 ms once it asks for tools/list). The
    // commands run in that wider window, before tools/list, so the test never races the
    // greeting's timer; what they send is held the same way in either window.
    assert_eq!(c.before_ping(), Vec::<Value>::new());

    let o = sb.run_ok(&["select", "app.py:2-3"]);
    assert_eq!(
        stderr(&o),
        "selected 2 line(s) of app.py (sent to 1 client; 1 client still connecting gets it when ready)\n"
    );
    let o = sb.run_ok(&["mention", "app.py:1-2"]);
    assert_eq!(
        stderr(&o),
        "mentioned app.py (sent to 1 client; 1 client still connecting gets it when ready)\n"
    );
    let want_selection = selection(&app, (1, 0), (2, 5), "two\nthree");
    let want_mention = json!({"filePath": s(&app), "lineStart": 0, "lineEnd": 1});
    assert_eq!(
        ready.notification("selection_changed")["params"],
        want_selection
    );
    assert_eq!(ready.notification("at_mentioned")["params"], want_mention);

    // The client being set up got nothing yet, and `ccide events` has not called it connected:
    // the next event is a diff opened now, not its client_connected.
    assert_eq!(c.before_ping(), Vec::<Value>::new());
    // It heard of the selection and the mention, and which sessions they went to: both.
    for what in ["selected", "mentioned"] {
        let e = events.next();
        assert_eq!(e["event"], what, "{e}");
        assert_eq!(e["sessions"], json!([ready_id, ready_id + 1]), "{e}");
    }
    let _diff = open_diff(&mut ready, &note, "y\n", "note");
    let opened = events.next();
    assert_eq!(opened["event"], "diff_opened", "{opened}");

    // tools/list ends the setup: its answer, then the selection, then the mention.
    let list_id = c.send_request("tools/list", json!({}));
    let answer = c.recv();
    assert_eq!(answer["id"], list_id, "{answer}");
    assert!(answer["result"]["tools"].is_array());
    let n = c.recv();
    assert_eq!(
        (n["method"].as_str(), &n["params"]),
        (Some("selection_changed"), &want_selection)
    );
    let n = c.recv();
    assert_eq!(
        (n["method"].as_str(), &n["params"]),
        (Some("at_mentioned"), &want_mention)
    );
    assert_eq!(c.before_ping(), Vec::<Value>::new(), "each once");
    let connected = events.next();
    assert_eq!(connected["event"], "client_connected", "{connected}");
    assert_eq!(connected["client"], json!(ready_id + 1));
    assert_eq!(connected["name"], "claude-code");
}

// ---------------------------------------------------------------------------------------------
// 13.3 The review compares the proposal with the file as the CLI reads it.

const LINES: [&str; 10] = [
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nïne ✻",
    "ten",
];

fn utf16le(text: &str) -> Vec<u8> {
    let mut out = vec![0xFF, 0xFE];
    for u in text.encode_utf16() {
        out.extend_from_slice(&u.to_le_bytes());
    }
    out
}

#[test]
fn line_endings_a_bom_and_utf16_are_not_shown_as_changes_and_the_note_says_why() {
    let lf = LINES.join("\n") + "\n";
    let crlf = LINES.join("\r\n") + "\r\n";
    let proposal = lf.replacen("two", "TWO", 1);
    let no_newline = LINES.join("\n");
    let no_newline_proposal = no_newline.replacen("two", "TWO", 1);
    let mut bom = b"\xEF\xBB\xBF".to_vec();
    bom.extend_from_slice(lf.as_bytes());
    // The CLI's proposal for a file with a byte order mark keeps it, as U+FEFF first
    // (observed with 2.1.330); it writes UTF-16LE files back as UTF-16LE.
    let bom_proposal = format!("\u{feff}{proposal}");
    let note = |what: &str| {
        format!(
            "note: the file has {what}; the proposal is LF UTF-8 text, and Claude Code restores them when it writes\n"
        )
    };
    // (file, original bytes, what the CLI proposes, the note `show` prints)
    let cases: Vec<(&str, Vec<u8>, &str, String)> = vec![
        ("lf.txt", lf.clone().into_bytes(), &proposal, String::new()),
        (
            "crlf.txt",
            crlf.clone().into_bytes(),
            &proposal,
            note("CRLF line endings"),
        ),
        (
            "nonl.txt",
            no_newline.into_bytes(),
            &no_newline_proposal,
            String::new(),
        ),
        ("bom.txt", bom, &bom_proposal, String::new()),
        (
            "utf16.txt",
            utf16le(&lf),
            &bom_proposal,
            note("the UTF-16LE encoding"),
        ),
        (
            "utf16crlf.txt",
            utf16le(&crlf),
            &bom_proposal,
            note("CRLF line endings and the UTF-16LE encoding"),
        ),
    ];
    let hunks_of = |proposed: &str| {
        let bom = if proposed.starts_with('\u{feff}') {
            "\u{feff}"
        } else {
            ""
        };
        format!("@@ -1,5 +1,5 @@ hunk 1/1\n {bom}one\n-two\n+TWO\n three\n four\n five\n")
    };
    let sb = Sandbox::new();
    let srv = sb.serve(&[]);
    let mut c = srv.client();
    let mut requests = Vec::new();
    for (name, original, proposed, _) in &cases {
        let file = sb.write(name, original);
        requests.push(open_diff(&mut c, &file, proposed, name));
    }
    let list = wait_pending(&sb, cases.len());
    for (name, original, proposed, note) in &cases {
        let hunks = hunks_of(proposed);
        let file = sb.ws().join(name);
        let d = diff_of(&list, &file);
        assert_eq!(
            (d["added"].as_u64(), d["removed"].as_u64()),
            (Some(1), Some(1)),
            "{name}: {d}"
        );
        let id = id_of(d);
        let shown: Value =
            serde_json::from_slice(&sb.run_ok(&["diff", "show", id, "--json"]).stdout).unwrap();
        let labels = format!("--- a/{name}\n+++ b/{name}\n");
        assert_eq!(shown["diff"], format!("{labels}{hunks}"), "{name}");
        assert_eq!(
            (shown["added"].as_u64(), shown["removed"].as_u64()),
            (Some(1), Some(1)),
            "{name}"
        );
        let o = sb.run_ok(&["diff", "show", id]);
        assert_eq!(stdout(&o), format!("{note}{labels}{hunks}"), "{name}");
        let dir = PathBuf::from(d["dir"].as_str().unwrap());
        assert_eq!(
            &std::fs::read(dir.join("original")).unwrap(),
            original,
            "{name}: original is byte-exact"
        );
        assert_eq!(&std::fs::read(&file).unwrap(), original, "{name}");
    }

    // `diff edit` still opens proposed, and accepting sends what the editor made of it.
    let editor = sb.script("append-editor", r#"printf 'added line\n' >> "$1""#);
    let crlf_diff = diff_of(&list, &sb.ws().join("crlf.txt"));
    let o = sb
        .command(&["diff", "edit", id_of(crlf_diff)])
        .env("VISUAL", &editor)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let dir = PathBuf::from(crlf_diff["dir"].as_str().unwrap());
    let edited = format!("{proposal}added line\n");
    assert_eq!(
        std::fs::read_to_string(dir.join("proposed")).unwrap(),
        edited
    );
    assert_eq!(
        std::fs::read(dir.join("original")).unwrap(),
        crlf.as_bytes()
    );
    sb.run_ok(&["diff", "accept", id_of(crlf_diff)]);
    assert_eq!(
        texts(&c.response(&requests[1])),
        vec!["FILE_SAVED", &edited]
    );
    assert_eq!(
        std::fs::read(sb.ws().join("crlf.txt")).unwrap(),
        crlf.as_bytes()
    );
}

// ---------------------------------------------------------------------------------------------
// 13.4, 13.5 Empty files and files above 16 MiB.

#[test]
fn selecting_in_an_empty_file_sends_an_empty_selection_at_the_start() {
    let sb = Sandbox::new();
    let empty = sb.write("empty.txt", "");
    let srv = sb.serve(&[]);
    let mut c = srv.ready_client();
    for spec in ["empty.txt:1:1", "empty.txt:1"] {
        sb.run_ok(&["select", spec]);
        assert_eq!(
            c.notification("selection_changed")["params"],
            selection(&empty, (0, 0), (0, 0), ""),
            "{spec}"
        );
    }
}

#[test]
fn a_file_above_16_mib_can_be_selected_opened_and_counted() {
    // 278,528 lines of 64 bytes: 17 MiB.
    let n = 17 * (1 << 20) / 64;
    let line = |i: usize| format!("{i:07} {}", "x".repeat(55));
    let mut big = String::with_capacity(17 << 20);
    for i in 1..=n {
        big.push_str(&line(i));
        big.push('\n');
    }
    assert_eq!(big.len(), 17 << 20);
    let sb = Sandbox::new();
    let file = sb.write("big.log", &big);
    drop(big);
    let srv = sb.serve(&[]);
    let mut c = srv.ready_client();
    sb.run_ok(&["select", "big.log:2-3"]);
    assert_eq!(
        c.notification("selection_changed")["params"],
        selection(&file, (1, 0), (2, 63), &format!("{}\n{}", line(2), line(3)))
    );
    let r = c.call(
        "openFile",
        json!({"filePath": s(&file), "makeFrontmost": false}),
    );
    assert!(!is_error(&r), "{r}");
    let opened = json_text(&r);
    assert_eq!(opened["lineCount"], json!(n), "{opened}");
    assert_eq!(opened["success"], true);
    let tabs = json_text(&c.call("getOpenEditors", json!({})));
    let tab = tabs["tabs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["fileName"] == s(&file))
        .unwrap_or_else(|| panic!("no tab for big.log: {tabs}"))
        .clone();
    assert_eq!(tab["lineCount"], json!(n), "{tab}");
}

// ---------------------------------------------------------------------------------------------
// 13.6, 13.7, 13.8 The review of a broken diff, paths through symlinks, names the model chose.

#[test]
fn a_diff_whose_proposal_is_gone_is_listed_broken_with_the_others() {
    let sb = Sandbox::new();
    let a = sb.write("a.txt", "a\n");
    let b = sb.write("b.txt", "b\n");
    let srv = sb.serve(&[]);
    let mut c = srv.client();
    let _ida = open_diff(&mut c, &a, "A\n", "a");
    let _idb = open_diff(&mut c, &b, "B\n", "b");
    let list = wait_pending(&sb, 2);
    let (da, db) = (diff_of(&list, &a), diff_of(&list, &b));
    let dir = stdout(&sb.run_ok(&["diff", "path", id_of(db)]));
    let proposed = Path::new(dir.trim_end()).join("proposed");
    std::fs::remove_file(&proposed).unwrap();

    let o = sb.run(&["diff"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 3, "{out}");
    assert_eq!(lines[0], "ID   AGE   CHANGE        FILE");
    let row = |id: &str| {
        *lines
            .iter()
            .find(|l| l.starts_with(&format!("{id:<4} ")))
            .unwrap_or_else(|| panic!("no row for diff {id}: {out}"))
    };
    assert!(
        row(id_of(da)).ends_with(" +1 -1         a.txt"),
        "{}",
        row(id_of(da))
    );
    let broken = row(id_of(db));
    assert!(
        broken.contains(" broken        b.txt (cannot read ")
            && broken.contains(&proposed.display().to_string()),
        "{broken}"
    );

    let o = sb.run(&["diff", "--json"]);
    let listed: Vec<Value> = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(listed.len(), 2, "{listed:?}");
    let (ja, jb) = (diff_of(&listed, &a), diff_of(&listed, &b));
    assert_eq!((ja["added"].as_u64(), ja.get("error")), (Some(1), None));
    assert!(
        jb["error"]
            .as_str()
            .is_some_and(|e| e.starts_with(&format!("cannot read {}", proposed.display()))),
        "{jb}"
    );
}

#[test]
fn a_diff_is_found_by_an_absolute_path_through_a_symlink_to_the_workspace() {
    let sb = Sandbox::new();
    let file = sb.write("src/app.py", "x = 1\n");
    let link = sb.root.join("elsewhere");
    std::os::unix::fs::symlink(sb.ws(), &link).unwrap();
    let via = link.join("src/app.py");
    let srv = sb.serve(&[]);
    let mut c = srv.client();
    let id = open_diff(&mut c, &file, "x = 2\n", "app");
    wait_pending(&sb, 1);
    let o = sb.run_ok(&["diff", "show", s(&via)]);
    assert_eq!(
        stdout(&o),
        "--- a/src/app.py\n+++ b/src/app.py\n@@ -1 +1 @@ hunk 1/1\n-x = 1\n+x = 2\n"
    );
    sb.run_ok(&["diff", "accept", s(&via)]);
    assert_eq!(texts(&c.response(&id)), vec!["FILE_SAVED", "x = 2\n"]);
}

#[test]
fn file_names_the_model_chose_are_listed_with_control_characters_visible() {
    let sb = Sandbox::new();
    let esc = sb.write("a\u{1b}[2Jb.txt", "a\n");
    let cr = sb.write("c\rd.txt", "c\n");
    let srv = sb.serve(&[]);
    let mut c = srv.client();
    let _ = open_diff(&mut c, &esc, "A\n", "esc");
    let _ = open_diff(&mut c, &cr, "C\n", "cr");
    let list = wait_pending(&sb, 2);
    let raw = |o: &std::process::Output| {
        assert!(
            !o.stdout.contains(&0x1b) && !o.stdout.contains(&b'\r'),
            "raw control characters in {:?}",
            stdout(o)
        );
        stdout(o)
    };
    let out = raw(&sb.run_ok(&["diff"]));
    assert!(out.contains(" a\\u{1b}[2Jb.txt\n"), "{out}");
    assert!(out.contains(" c\\rd.txt\n"), "{out}");
    let id = id_of(diff_of(&list, &esc));
    let out = raw(&sb.run_ok(&["diff", "show", id]));
    assert!(
        out.starts_with("--- a/a\\u{1b}[2Jb.txt\n+++ b/a\\u{1b}[2Jb.txt\n"),
        "{out}"
    );
    let out = raw(&sb.run_ok(&["diff", "reject", id]));
    assert_eq!(out, format!("rejected diff {id} (a\\u{{1b}}[2Jb.txt)\n"));
    let out = raw(&sb.run_ok(&["status"]));
    assert!(out.contains("diff     "), "{out}");
    assert!(out.contains("c\\rd.txt"), "{out}");
}

// ---------------------------------------------------------------------------------------------
// 13.9, 13.10 The command line.

#[test]
fn claude_passes_what_follows_the_double_dash_and_only_that() {
    let sb = Sandbox::new();
    let _srv = sb.serve(&[]);
    let record = sb.root.join("args.txt");
    let script = sb.script(
        "fake-claude",
        &format!(
            r#"for a in "$@"; do printf 'arg=%s\n' "$a"; done > '{}'"#,
            record.display()
        ),
    );
    let o = sb
        .command(&["claude", "--", "--help"])
        .env("CCIDE_CLAUDE", &script)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(std::fs::read_to_string(&record).unwrap(), "arg=--help\n");
    assert_eq!(stdout(&o), "");

    std::fs::remove_file(&record).unwrap();
    let o = sb
        .command(&["claude", "--help"])
        .env("CCIDE_CLAUDE", &script)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("Usage: ccide claude [ARGS...] [-- CLAUDE-ARGS...]"),
        "{}",
        stdout(&o)
    );
    assert!(!record.exists(), "ccide's own help runs no program");
}

#[test]
fn help_serve_warns_that_old_clients_ignore_code_4001() {
    let sb = Sandbox::new();
    let o = sb.run_ok(&["help", "serve"]);
    let out = stdout(&o);
    let single = out
        .split("  --single-client\n")
        .nth(1)
        .unwrap_or_else(|| panic!("no --single-client in {out}"));
    assert!(
        single
            .lines()
            .next()
            .unwrap()
            .contains("Claude Code 2.1.112 and earlier ignore code 4001 and reconnect at once"),
        "{out}"
    );
}
