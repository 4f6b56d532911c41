//! The control socket over a real socket (ccide-protocol(7) §9.1): every request line gets
//! exactly one answer, carrying the request's id, whatever the line; an editor session
//! (`attach`, as `ccide lsp` keeps one) goes on after a refusal.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;

use crate::util::*;
use serde_json::{Value, json};

/// The control socket's limit for one request line.
const LIMIT: usize = 64 << 20;

/// A connection to a server's control socket, written and read line by line.
struct Line {
    r: BufReader<UnixStream>,
    w: UnixStream,
}

impl Line {
    fn open(srv: &Server) -> Line {
        let w = UnixStream::connect(srv.lock["ccide"]["control"].as_str().unwrap()).unwrap();
        w.set_read_timeout(Some(DEADLINE)).unwrap();
        Line {
            r: BufReader::new(w.try_clone().unwrap()),
            w,
        }
    }

    fn send(&mut self, bytes: &[u8]) {
        self.w.write_all(bytes).unwrap();
    }

    fn answer(&mut self) -> Value {
        let mut line = String::new();
        self.r.read_line(&mut line).expect("an answer in time");
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("answer {line:?}: {e}"))
    }

    fn ask(&mut self, request: &Value) -> Value {
        self.send(format!("{request}\n").as_bytes());
        self.answer()
    }
}

/// A `buffer` request whose line is just over the limit, with the given head (`{"id":3,` or `{`).
fn over_the_limit(head: &str, path: &str) -> Vec<u8> {
    let start = format!("{head}\"cmd\":\"buffer\",\"path\":\"{path}\",\"content\":\"");
    let mut line = start.into_bytes();
    line.resize(LIMIT, b'x');
    line.extend_from_slice(b"\"}\n");
    line
}

const TOO_LONG: &str =
    "the request line is longer than 64 MiB, the control socket's limit; it was skipped";

/// A line over the limit is answered once, by its id, and the session goes on: answered
/// twice (its start, then its rest as another line), every later command of `ccide lsp` would
/// get the answer of the one before.
#[test]
fn an_editor_session_answers_a_line_over_the_limit_once_by_its_id_and_goes_on() {
    let sb = Sandbox::new();
    let a = s(&sb.write("a.txt", "a\n")).to_string();
    let srv = sb.serve(&[]);
    let mut session = Line::open(&srv);
    let hello = session.ask(&json!({"id": 1, "cmd": "attach", "pid": 4242, "editor": "test"}));
    assert_eq!(
        (&hello["ok"], &hello["id"]),
        (&json!(true), &json!(1)),
        "{hello}"
    );
    let opened = session.ask(&json!({"id": 2, "cmd": "open", "paths": [a]}));
    assert_eq!(opened, json!({"ok": true, "id": 2, "opened": [a]}));
    // Both lines sent before any answer is read, as a client that pipelines them.
    session.send(&over_the_limit("{\"id\":3,", &a));
    session.send(b"{\"id\":4,\"cmd\":\"buffer\",\"path\":\"a.txt\",\"content\":\"small\"}\n");
    assert_eq!(
        session.answer(),
        json!({"ok": false, "id": 3, "error": TOO_LONG})
    );
    assert_eq!(session.answer(), json!({"ok": true, "id": 4, "path": a}));
    // The session lives on: its tab and buffer are there, and it still answers.
    let status = session.ask(&json!({"id": 5, "cmd": "status"}));
    assert_eq!(status["id"], 5);
    assert_eq!(status["status"]["tabs"][0]["path"], a, "{status}");
    assert_eq!(
        status["status"]["documents"],
        json!([{"path": a, "bytes": 5}])
    );
    // Ending it drops what it held.
    drop(session);
    wait_for("the session's tab closed", DEADLINE, || {
        let st = srv.control(&json!({"cmd": "status"}));
        (st["status"]["tabs"] == json!([])).then_some(())
    });
}

/// The same, with the lines `ccide lsp` sends today (no ids): answers in order stay in step.
#[test]
fn requests_without_ids_get_one_answer_each_in_order() {
    let sb = Sandbox::new();
    let a = s(&sb.write("a.txt", "a\n")).to_string();
    let srv = sb.serve(&[]);
    let mut session = Line::open(&srv);
    let hello = session.ask(&json!({"cmd": "attach", "pid": 4242, "editor": "test"}));
    assert_eq!(hello["ok"], true, "{hello}");
    assert!(hello.get("id").is_none(), "{hello}");
    session.send(&over_the_limit("{", &a));
    session.send(b"{\"cmd\":\"diff.list\"}\n");
    let refused = session.answer();
    assert_eq!(refused["ok"], false, "{refused}");
    assert_eq!(
        session.answer(),
        json!({"ok": true, "diffs": [], "settled": []})
    );
    assert_eq!(refused, json!({"ok": false, "error": TOO_LONG}));
}

/// A plain connection too answers a line it cannot read once, and carries on.
#[test]
fn a_line_that_is_not_a_request_is_answered_once_and_the_connection_goes_on() {
    let sb = Sandbox::new();
    let a = s(&sb.write("a.txt", "a\n")).to_string();
    let srv = sb.serve(&[]);
    let mut c = Line::open(&srv);
    c.send(b"not json\n{\"id\":7,\"cmd\":\"frobnicate\"}\n{\"id\":8,\"cmd\":\"open\",\"paths\":\"a.txt\"}\n");
    assert_eq!(
        c.answer(),
        json!({"ok": false, "error": "bad control request: expected ident at line 1 column 2"})
    );
    assert_eq!(
        c.answer(),
        json!({"ok": false, "id": 7, "error": "unknown control command 'frobnicate' (is ccide up to date?)"})
    );
    assert_eq!(
        c.answer(),
        json!({"ok": false, "id": 8, "error": "bad paths: expected a list of strings"})
    );
    c.send(&over_the_limit("{\"id\":9,", &a));
    assert_eq!(c.answer(), json!({"ok": false, "id": 9, "error": TOO_LONG}));
    // Any JSON value is an id, echoed as it came.
    let r = c.ask(&json!({"id": "x-1", "cmd": "diff.list"}));
    assert_eq!(
        r,
        json!({"ok": true, "id": "x-1", "diffs": [], "settled": []})
    );
}

/// `ccide lsp` sends "NAME VERSION", which was "an editor " when the editor gave no name:
/// the log read `an editor  (pid N)`.
#[test]
fn an_editor_without_a_name_is_logged_as_an_editor() {
    let sb = Sandbox::new();
    let srv = sb.serve(&[]);
    let mut session = Line::open(&srv);
    let hello = session.ask(&json!({"cmd": "attach", "pid": 4242, "editor": "an editor "}));
    let id = hello["session"].clone();
    let line = format!("editor session {id} attached: an editor (pid 4242)\n");
    wait_for("the session in the log", DEADLINE, || {
        srv.log().contains(&line).then_some(())
    });
}
