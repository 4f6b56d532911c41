//! Serve shares its language servers with LSP clients (ccide-protocol(7) §11.8): clients that
//! turned a control connection into LSP (`lsp`, as `ccide lsp-bridge` does for a CLI session)
//! reach the one warm server per language, through the real binary, with the scriptable fake
//! server of src/langservers standing in for typescript-language-server.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use crate::util::*;
use serde_json::{Value, json};

/// A serve whose language server for `*.fk` is the fake with `flags`, logging what it got to
/// `fake.log` in the sandbox.
fn serve(sb: &Sandbox, flags: &str, extra: &[&str]) -> Server {
    let lsp = fake_lsp("*.fk", flags, &sb.root.join("fake.log"));
    let mut args = vec!["--no-default-lsp", "--no-default-checkers", "--lsp", &lsp];
    args.extend_from_slice(extra);
    sb.serve(&args)
}

/// What the fake server received, in order.
fn received(sb: &Sandbox) -> Vec<Value> {
    std::fs::read_to_string(sb.root.join("fake.log"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter_map(|v| v.get("got").cloned())
        .collect()
}

fn got(sb: &Sandbox, method: &str) -> Vec<Value> {
    received(sb)
        .into_iter()
        .filter(|m| m["method"] == method)
        .collect()
}

/// The one language server in `ccide status`.
fn server_status(sb: &Sandbox) -> Value {
    sb.status()["language_servers"][0].clone()
}

/// An LSP client on serve's control socket, as `ccide lsp-bridge` makes one: after the `lsp`
/// line and its answer, an `LspPeer` over the socket.
struct Lsp {
    peer: LspPeer,
    stream: UnixStream,
}

impl std::ops::Deref for Lsp {
    type Target = LspPeer;
    fn deref(&self) -> &LspPeer {
        &self.peer
    }
}

impl std::ops::DerefMut for Lsp {
    fn deref_mut(&mut self) -> &mut LspPeer {
        &mut self.peer
    }
}

impl Lsp {
    fn connect(srv: &Server, root: &Path, client: &str) -> Lsp {
        let path = srv.lock["ccide"]["control"].as_str().unwrap();
        let mut stream = UnixStream::connect(path).unwrap();
        let hello = json!({"id": 1, "cmd": "lsp", "root": root, "client": client,
                           "pid": std::process::id(), "extensions": [".fk"], "diagnostics": false});
        stream.write_all(format!("{hello}\n").as_bytes()).unwrap();
        let mut r = BufReader::new(stream.try_clone().unwrap());
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        assert_eq!(
            serde_json::from_str::<Value>(&line).unwrap(),
            json!({"id": 1, "ok": true})
        );
        // `r` goes on with whatever it read beyond the line.
        let peer = LspPeer::new(r, stream.try_clone().unwrap());
        Lsp { peer, stream }
    }

    /// `initialize` as the CLI sends it (with its own pid), then `initialized`; the result.
    fn initialize(&mut self, root: &Path) -> Value {
        let a = self.request(
            "initialize",
            json!({"processId": 1, "rootUri": uri(root), "capabilities": {},
                   "clientInfo": {"name": "Claude Code", "version": "2.1.330"}}),
        );
        self.notify("initialized", json!({}));
        a["result"].clone()
    }

    fn open(&mut self, file: &Path) {
        let text = std::fs::read_to_string(file).unwrap();
        self.notify(
            "textDocument/didOpen",
            json!({"textDocument": {"uri": uri(file), "languageId": "fk", "version": 1, "text": text}}),
        );
    }

    fn hover_params(file: &Path, line: u64) -> Value {
        json!({"textDocument": {"uri": uri(file)}, "position": {"line": line, "character": 0}})
    }

    /// The hover's text at the start of `line`.
    fn hover(&mut self, file: &Path, line: u64) -> Value {
        let a = self.request("textDocument/hover", Lsp::hover_params(file, line));
        a.get("result")
            .map(|r| r["contents"]["value"].clone())
            .unwrap_or_else(|| a.clone())
    }
}

impl Drop for Lsp {
    /// The client goes, as a bridge killed with its CLI does.
    fn drop(&mut self) {
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
    }
}

/// Two clients each count their ids from 0 and send the same id at once: the server gets
/// ccide's own ids, and each answer goes back to its client under the client's id. One
/// server process serves both, started by ccide with ccide's pid, never a client's.
#[test]
fn two_clients_sending_the_same_ids_each_get_their_own_answer_from_one_server() {
    let sb = Sandbox::new();
    let a = sb.write("a.fk", "SLOW a\n");
    let b = sb.write("b.fk", "fast b\n");
    let srv = serve(&sb, "", &[]);
    let (mut ca, mut cb) = (
        Lsp::connect(&srv, &sb.ws(), "A"),
        Lsp::connect(&srv, &sb.ws(), "B"),
    );
    let caps = json!({"hoverProvider": true, "definitionProvider": true,
                      "workspaceSymbolProvider": true,
                      "textDocumentSync": 1});
    for c in [&mut ca, &mut cb] {
        let r = c.initialize(&sb.ws());
        assert_eq!(r["capabilities"], caps);
        assert_eq!(r["serverInfo"], json!({"name": "fake", "version": "1.0"}));
    }
    ca.open(&a);
    cb.open(&b);
    // Both send id 1; A's answer takes a second, B's comes at once.
    let ia = ca.send_request("textDocument/hover", Lsp::hover_params(&a, 0));
    let ib = cb.send_request("textDocument/hover", Lsp::hover_params(&b, 0));
    assert_eq!((ia, ib), (1, 1));
    let hb = cb.answer(1);
    let ha = ca.answer(1);
    assert_eq!(hb["result"]["contents"]["value"], "fast b");
    assert_eq!(ha["result"]["contents"]["value"], "SLOW a");
    let ids: Vec<Value> = got(&sb, "textDocument/hover")
        .iter()
        .map(|m| m["id"].clone())
        .collect();
    assert_eq!(ids.len(), 2);
    assert_ne!(ids[0], ids[1], "the server got two different ids: {ids:?}");
    let init = got(&sb, "initialize");
    assert_eq!(init.len(), 1, "one server, initialized once");
    assert_eq!(init[0]["params"]["processId"], json!(srv.pid()));
    // workspace/symbol names no document: it goes to the client's server, which has both
    // clients' documents open.
    let syms = cb.request("workspace/symbol", json!({"query": "x"}));
    let names: Vec<&str> = syms["result"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, [uri(&a), uri(&b)]);
    // What ccide does not pass on is refused, as an unknown method.
    let r = ca.request(
        "textDocument/rename",
        json!({"textDocument": {"uri": uri(&a)}, "position": {"line": 0, "character": 0}, "newName": "x"}),
    );
    assert_eq!(r["error"]["code"], -32601, "{r}");
}

/// The text is ccide's: an editor's unsaved buffer reaches the server as soon as it is sent,
/// and a client's hover sees it; when the buffer goes (the editor closed), the file's text
/// comes back.
#[test]
fn an_editors_unsaved_buffer_is_what_a_client_sees_until_the_editor_goes() {
    let sb = Sandbox::new();
    let a = sb.write("a.fk", "on disk\n");
    let srv = serve(&sb, "", &[]);
    let mut c = Lsp::connect(&srv, &sb.ws(), "CLI");
    c.initialize(&sb.ws());
    c.open(&a);
    assert_eq!(c.hover(&a, 0), "on disk");
    // An editor session (`ccide lsp`) pushes its unsaved buffer.
    let control = srv.lock["ccide"]["control"].as_str().unwrap();
    let mut editor = UnixStream::connect(control).unwrap();
    let mut lines = BufReader::new(editor.try_clone().unwrap());
    let mut line = String::new();
    for req in [
        json!({"id": 1, "cmd": "attach", "pid": 1, "editor": "Neovim"}),
        json!({"id": 2, "cmd": "buffer", "path": a, "content": "typed in the editor\n"}),
    ] {
        editor.write_all(format!("{req}\n").as_bytes()).unwrap();
        line.clear();
        lines.read_line(&mut line).unwrap();
        assert!(line.contains("\"ok\":true"), "{line}");
    }
    // The server has it before anyone asks.
    wait_for("the buffer at the server", DEADLINE, || {
        got(&sb, "textDocument/didChange")
            .last()
            .filter(|m| m["params"]["contentChanges"][0]["text"] == "typed in the editor\n")
            .map(|_| ())
    });
    assert_eq!(c.hover(&a, 0), "typed in the editor");
    // A second client opening the file (with the disk's text, as the CLI does) sees the same.
    let mut c2 = Lsp::connect(&srv, &sb.ws(), "CLI 2");
    c2.initialize(&sb.ws());
    c2.open(&a);
    assert_eq!(c2.hover(&a, 0), "typed in the editor");
    // The editor quits: its buffer is dropped, and the server gets the file again.
    drop((editor, lines));
    wait_for("the file's text at the server", DEADLINE, || {
        got(&sb, "textDocument/didChange")
            .last()
            .filter(|m| m["params"]["contentChanges"][0]["text"] == "on disk\n")
            .map(|_| ())
    });
    assert_eq!(c.hover(&a, 0), "on disk");
}

/// The CLI's Edit writes the file, then sends a full-text didChange with its own next
/// version: the server gets the new text under ccide's version. A file that Bash wrote, of
/// which the CLI says nothing, is read again before the next request about it.
#[test]
fn an_edit_and_a_write_nobody_announced_are_both_seen() {
    let sb = Sandbox::new();
    let a = sb.write("a.fk", "first\n");
    let srv = serve(&sb, "", &[]);
    let mut c = Lsp::connect(&srv, &sb.ws(), "CLI");
    c.initialize(&sb.ws());
    c.open(&a);
    assert_eq!(c.hover(&a, 0), "first");
    std::fs::write(&a, "after the edit\n").unwrap();
    c.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": uri(&a), "version": 2},
               "contentChanges": [{"text": "after the edit\n"}]}),
    );
    c.notify(
        "textDocument/didSave",
        json!({"textDocument": {"uri": uri(&a)}}),
    );
    assert_eq!(c.hover(&a, 0), "after the edit");
    let changes = got(&sb, "textDocument/didChange");
    assert_eq!(changes.len(), 1, "one change for one new text: {changes:?}");
    let opened = &got(&sb, "textDocument/didOpen")[0]["params"]["textDocument"]["version"];
    let changed = &changes[0]["params"]["textDocument"]["version"];
    assert!(
        changed.as_i64() > opened.as_i64(),
        "ccide's versions: {opened} then {changed}"
    );
    // Bash writes it; nobody says so.
    std::fs::write(&a, "written by a shell command\n").unwrap();
    assert_eq!(c.hover(&a, 0), "written by a shell command");
}

/// A client that goes has its pending requests cancelled at the server; a `$/cancelRequest`
/// from a client names the server's id of its request.
#[test]
fn a_client_that_goes_has_its_pending_requests_cancelled() {
    let sb = Sandbox::new();
    let h = sb.write("h.fk", "HANG\n");
    let srv = serve(&sb, "", &[]);
    let mut b = Lsp::connect(&srv, &sb.ws(), "B");
    b.initialize(&sb.ws());
    b.open(&h);
    let id = b.send_request("textDocument/hover", Lsp::hover_params(&h, 0));
    b.notify("$/cancelRequest", json!({"id": id}));
    let r = b.answer(id);
    assert_eq!(r["error"]["code"], -32800, "{r}");
    let mut a = Lsp::connect(&srv, &sb.ws(), "A");
    a.initialize(&sb.ws());
    a.open(&h);
    a.send_request("textDocument/hover", Lsp::hover_params(&h, 0));
    wait_for("A's hover at the server", DEADLINE, || {
        (got(&sb, "textDocument/hover").len() == 2).then_some(())
    });
    drop(a);
    let hovers = got(&sb, "textDocument/hover");
    wait_for("A's hover cancelled", DEADLINE, || {
        let cancels = got(&sb, "$/cancelRequest");
        (cancels.len() == 2 && cancels[1]["params"]["id"] == hovers[1]["id"]).then_some(())
    });
    assert_eq!(
        got(&sb, "$/cancelRequest")[0]["params"]["id"],
        hovers[0]["id"]
    );
    let said = format!(
        "LSP client A (pid {}) disconnected (1 request(s) cancelled, 1 document(s) let go)",
        std::process::id()
    );
    wait_for("the client's end in the log", DEADLINE, || {
        srv.log().contains(&said).then_some(())
    });
}

/// The documents a client has open are held for it: they keep the server from idling out.
/// The CLI sends no didClose at its end; when its connection goes, they are let go, and the
/// server stops after --lsp-idle.
#[test]
fn a_client_that_goes_lets_go_of_its_documents() {
    let sb = Sandbox::new();
    let a = sb.write("a.fk", "hello\n");
    let srv = serve(&sb, "", &["--lsp-idle", "1"]);
    let mut c = Lsp::connect(&srv, &sb.ws(), "CLI");
    c.initialize(&sb.ws());
    c.open(&a);
    assert_eq!(c.hover(&a, 0), "hello");
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(server_status(&sb)["state"], "ready");
    drop(c);
    wait_for("the server stopped once idle", DEADLINE, || {
        (server_status(&sb)["state"] == "stopped").then_some(())
    });
    assert!(got(&sb, "textDocument/didClose").is_empty());
}

/// `shutdown` and `exit` end the client that sent them; the server stays for the next.
#[test]
fn a_clients_shutdown_and_exit_leave_the_server_running_for_the_next() {
    let sb = Sandbox::new();
    let a = sb.write("a.fk", "hello\n");
    let srv = serve(&sb, "", &[]);
    let mut c = Lsp::connect(&srv, &sb.ws(), "first");
    c.initialize(&sb.ws());
    c.open(&a);
    assert_eq!(c.hover(&a, 0), "hello");
    let pid = server_status(&sb)["pid"].clone();
    assert!(pid.is_u64(), "{pid}");
    assert_eq!(c.request("shutdown", Value::Null)["result"], Value::Null);
    c.notify("exit", Value::Null);
    assert!(c.ends_within(DEADLINE), "serve ends the connection at exit");
    let mut next = Lsp::connect(&srv, &sb.ws(), "next");
    next.initialize(&sb.ws());
    next.open(&a);
    assert_eq!(next.hover(&a, 0), "hello");
    // The same process, running ("loading" until its first diagnostics are final).
    wait_for("the server ready", DEADLINE, || {
        let st = server_status(&sb);
        (st["pid"] == pid && st["state"] == "ready").then_some(())
    });
    assert!(got(&sb, "shutdown").is_empty() && got(&sb, "exit").is_empty());
    assert_eq!(got(&sb, "initialize").len(), 1);
}

/// A server's request that ccide does not answer itself goes to the client whose request the
/// server is working on, and its answer back; with no request pending, ccide answers -32601
/// as the CLI does.
#[test]
fn a_server_request_goes_to_the_client_it_works_for() {
    let sb = Sandbox::new();
    let f = sb.write("ask.fk", "ASK which\n");
    let srv = serve(&sb, "requests", &[]);
    let (mut a, mut b) = (
        Lsp::connect(&srv, &sb.ws(), "A"),
        Lsp::connect(&srv, &sb.ws(), "B"),
    );
    for c in [&mut a, &mut b] {
        c.initialize(&sb.ws());
        c.open(&f);
    }
    let id = a.send_request("textDocument/hover", Lsp::hover_params(&f, 0));
    let ask = a.recv_where("the server's request", |v| v.get("method").is_some());
    assert_eq!(ask["method"], "window/showMessageRequest");
    assert_eq!(ask["params"]["message"], "ASK which");
    a.send(&json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"title": "from A"}}));
    let r = a.answer(id);
    assert_eq!(r["result"]["contents"], r#"{"title": "from A"}"#);
    // B, as the CLI, does not handle it.
    let id = b.send_request("textDocument/hover", Lsp::hover_params(&f, 0));
    let ask = b.recv_where("the server's request", |v| v.get("method").is_some());
    b.send(&json!({"jsonrpc": "2.0", "id": ask["id"],
                   "error": {"code": -32601, "message": "Unhandled method"}}));
    let r = b.answer(id);
    assert_eq!(
        r["result"]["contents"],
        r#"{"code": -32601, "message": "Unhandled method"}"#
    );
    // Each request went to one client only.
    assert!(
        a.backlog.is_empty() && b.backlog.is_empty(),
        "{:?} {:?}",
        a.backlog,
        b.backlog
    );
    // custom/unknown came right after `initialized`, when nobody asked anything.
    let log = std::fs::read_to_string(sb.root.join("fake.log")).unwrap();
    let unknown = log
        .lines()
        .find(|l| l.contains("does not handle custom/unknown"))
        .unwrap_or_else(|| panic!("no answer to custom/unknown: {log}"));
    assert!(unknown.contains("-32601"), "{unknown}");
}

/// The document changed at ccide while the server computed an answer about it: the client
/// gets ContentModified, which the CLI asks again after, rather than positions in old text.
#[test]
fn an_answer_about_text_that_changed_meanwhile_is_content_modified() {
    let sb = Sandbox::new();
    let a = sb.write("a.fk", "SLOW\n");
    let srv = serve(&sb, "", &[]);
    let mut c = Lsp::connect(&srv, &sb.ws(), "CLI");
    c.initialize(&sb.ws());
    c.open(&a);
    let id = c.send_request("textDocument/hover", Lsp::hover_params(&a, 0));
    wait_for("the hover at the server", DEADLINE, || {
        got(&sb, "textDocument/hover").first().map(|_| ())
    });
    let r = srv.control(&json!({"cmd": "buffer", "path": a, "content": "SLOW typed\n"}));
    assert_eq!(r["ok"], true, "{r}");
    let r = c.answer(id);
    assert_eq!(r["error"]["code"], -32801, "{r}");
    assert_eq!(c.hover(&a, 0), "SLOW typed");
}

/// Diagnostics reach a CLI through getDiagnostics only: the server's publishes are not
/// forwarded to LSP clients.
#[test]
fn publish_diagnostics_never_reach_an_lsp_client() {
    let sb = Sandbox::new();
    let a = sb.write("a.fk", "ERR here\n");
    let srv = serve(&sb, "", &[]);
    let mut c = Lsp::connect(&srv, &sb.ws(), "CLI");
    c.initialize(&sb.ws());
    c.open(&a);
    assert_eq!(c.hover(&a, 0), "ERR here");
    // The server published; ccide has it.
    wait_for("the diagnostic in ccide's store", DEADLINE, || {
        let v = srv.control(&json!({"cmd": "diagnostics", "paths": [a]}));
        let file = &v["files"][a.to_str().unwrap()];
        (file.as_array().is_some_and(|d| !d.is_empty())).then_some(())
    });
    assert_eq!(c.hover(&a, 0), "ERR here");
    assert!(c.backlog.is_empty(), "{:?}", c.backlog);
}

/// `ccide lsp` with navigation on (`initializationOptions.navigation`): the editor's hover and
/// definition reach the warm server through serve, in the editor's own count of columns
/// (here UTF-32, where the server counts UTF-16), about the text the editor has, unsaved
/// included, before its debounced push; a CLI client sees that text too, and the file's text
/// again once the editor is gone.
#[test]
fn an_editor_navigates_through_ccide_lsp_in_its_count_on_the_shared_server() {
    let sb = Sandbox::new();
    let a = sb.write("a.fk", "s = \"é🦀\" + target\n");
    let srv = serve(&sb, "", &[]);
    let mut ed = LspProcess::spawn(&mut sb.command(&["lsp"]), sb.root.join("ed.log"));
    let init = ed.request(
        "initialize",
        json!({"processId": std::process::id(), "rootUri": uri(&sb.ws()),
               "capabilities": {"general": {"positionEncodings": ["utf-32"]}},
               "initializationOptions": {"navigation": true}}),
    );
    let caps = &init["result"]["capabilities"];
    assert_eq!(
        (&caps["positionEncoding"], &caps["hoverProvider"]),
        (&json!("utf-32"), &json!(true))
    );
    ed.notify("initialized", json!({}));
    let text = std::fs::read_to_string(&a).unwrap();
    ed.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": uri(&a), "languageId": "fk", "version": 1, "text": text}}),
    );
    // `target` is character 11 in UTF-32, 12 in UTF-16 (🦀 is two UTF-16 units).
    let at = json!({"textDocument": {"uri": uri(&a)}, "position": {"line": 0, "character": 11}});
    let def = ed.request("textDocument/definition", at.clone());
    let got_at = &got(&sb, "textDocument/definition")[0]["params"]["position"];
    assert_eq!(got_at, &json!({"line": 0, "character": 12}));
    let here = json!({"line": 0, "character": 11});
    assert_eq!(
        def["result"],
        json!([{"uri": uri(&a), "range": {"start": here, "end": here}}])
    );
    // Typed, and asked about at once: the server has the editor's text first.
    ed.notify(
        "textDocument/didChange",
        json!({"textDocument": {"uri": uri(&a), "version": 2},
               "contentChanges": [{"range": {"start": {"line": 0, "character": 0},
                                             "end": {"line": 0, "character": 0}},
                                   "text": "typed\n"}]}),
    );
    let h = ed.request("textDocument/hover", Lsp::hover_params(&a, 0));
    assert_eq!(h["result"]["contents"]["value"], "typed", "{h}");
    // A CLI session shares the server, and the editor's unsaved text.
    let mut cli = Lsp::connect(&srv, &sb.ws(), "CLI");
    cli.initialize(&sb.ws());
    cli.open(&a);
    assert_eq!(cli.hover(&a, 0), "typed");
    assert_eq!(got(&sb, "initialize").len(), 1, "one server for both");
    // The editor goes: the CLI's next answer is about the file.
    ed.close_stdin();
    ed.wait_exit("ccide lsp to exit");
    wait_for("the file's text at the server", DEADLINE, || {
        got(&sb, "textDocument/didChange")
            .last()
            .filter(|m| m["params"]["contentChanges"][0]["text"] == text)
            .map(|_| ())
    });
    assert_eq!(cli.hover(&a, 0), text.trim_end());
}

/// A server still loading its project answers from what it has (tsserver: `import compose`,
/// the import line); the CLI takes the first answer as final. A request waits until the
/// server has loaded (its first diagnostics), and gets the complete answer.
#[test]
fn a_request_waits_for_the_server_to_load_its_project() {
    let sb = Sandbox::new();
    let a = sb.write("a.fk", "fn compose\n");
    let srv = serve(&sb, "unloaded=1.5", &[]);
    let mut c = Lsp::connect(&srv, &sb.ws(), "CLI");
    c.initialize(&sb.ws());
    c.open(&a);
    assert_eq!(c.hover(&a, 0), "fn compose");
    assert_eq!(server_status(&sb)["state"], "ready");
}

/// A server's answer reaches the client under the client's id, whatever the client sends
/// meanwhile: a response of its own under any id (a negative one too) answers nothing of
/// serve's, and a request id still pending is refused (-32600), not sent twice.
#[test]
fn a_clients_own_responses_and_reused_ids_do_not_answer_its_requests() {
    let sb = Sandbox::new();
    let a = sb.write("a.fk", "SLOW a\n");
    let srv = serve(&sb, "", &[]);
    let mut c = Lsp::connect(&srv, &sb.ws(), "CLI");
    c.initialize(&sb.ws());
    c.open(&a);
    let id = c.send_request("textDocument/hover", Lsp::hover_params(&a, 0));
    for forged in [-1, 0, 1, 1000] {
        c.send(&json!({"jsonrpc": "2.0", "id": forged, "result": {"contents": "forged"}}));
    }
    let again = json!({"jsonrpc": "2.0", "id": id, "method": "textDocument/hover",
                       "params": Lsp::hover_params(&a, 0)});
    c.send(&again);
    let refused = c.answer(id);
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    let answer = c.answer(id);
    assert_eq!(answer["result"]["contents"]["value"], "SLOW a", "{answer}");
    assert_eq!(got(&sb, "textDocument/hover").len(), 1);
}

/// A client that stops reading while its answers pile up is cut once 64 MiB wait for it: it
/// sees the end of its stream (the bridge then exits, and the CLI starts it again), never a
/// connection left open that lost some of its answers.
#[test]
fn a_client_that_stops_reading_is_cut_rather_than_left_without_answers() {
    let sb = Sandbox::new();
    // Each hover answers the line's text: 1 MiB.
    let a = sb.write("a.fk", format!("{}\n", "x".repeat(1 << 20)));
    let srv = serve(&sb, "", &[]);
    let path = srv.lock["ccide"]["control"].as_str().unwrap();
    let mut sock = UnixStream::connect(path).unwrap();
    let hello = json!({"id": 1, "cmd": "lsp", "root": sb.ws(), "client": "stalled",
                       "pid": std::process::id(), "extensions": [".fk"], "diagnostics": false});
    sock.write_all(format!("{hello}\n").as_bytes()).unwrap();
    let mut r = BufReader::new(sock.try_clone().unwrap());
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert_eq!(line, "{\"id\":1,\"ok\":true}\n");
    let send = |s: &mut UnixStream, v: Value| s.write_all(&lsp_frame(&v)).unwrap();
    send(
        &mut sock,
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}}),
    );
    assert_eq!(read_lsp_frame(&mut r).unwrap()["id"], 0);
    send(
        &mut sock,
        json!({"jsonrpc": "2.0", "method": "initialized", "params": {}}),
    );
    let asked = 100;
    for id in 1..=asked {
        send(
            &mut sock,
            json!({"jsonrpc": "2.0", "id": id, "method": "textDocument/hover",
                   "params": Lsp::hover_params(&a, 0)}),
        );
    }
    wait_for("serve to cut the client", Duration::from_secs(60), || {
        srv.log()
            .contains("LSP client stalled (pid")
            .then(|| srv.log().contains("unread; closing its connection"))
            .filter(|cut| *cut)
    });
    // What was written before the cut is read, then the end (the last answer may be cut
    // short): the read ends, it does not wait for answers that will never come.
    sock.set_read_timeout(Some(DEADLINE)).unwrap();
    let mut rest = Vec::new();
    let end = std::io::Read::read_to_end(&mut r, &mut rest);
    // (ECONNRESET when serve closed before reading all it was sent: an end too.)
    let waited = matches!(&end, Err(e) if read_again(e));
    assert!(!waited, "the stream did not end: {end:?}");
    let answers = String::from_utf8_lossy(&rest)
        .matches("Content-Length: ")
        .count();
    assert!(answers < asked, "{answers} answers");
    // The server stays for the others.
    let mut c = Lsp::connect(&srv, &sb.ws(), "next");
    c.initialize(&sb.ws());
    c.open(&a);
    assert_eq!(c.hover(&a, 0).as_str().map(str::len), Some(1 << 20));
}

/// LSP's order at serve's front: a request before `initialize` gets ServerNotInitialized
/// (-32002), one after `shutdown` InvalidRequest (-32600), and neither reaches a server.
#[test]
fn requests_before_initialize_and_after_shutdown_are_refused_as_lsp_says() {
    let sb = Sandbox::new();
    let a = sb.write("a.fk", "hello\n");
    let srv = serve(&sb, "", &[]);
    let mut c = Lsp::connect(&srv, &sb.ws(), "CLI");
    let early = c.request("textDocument/hover", Lsp::hover_params(&a, 0));
    assert_eq!(early["error"]["code"], -32002, "{early}");
    c.initialize(&sb.ws());
    c.open(&a);
    assert_eq!(c.hover(&a, 0), "hello");
    let again = c.request("initialize", json!({}));
    assert_eq!(again["error"]["code"], -32600, "{again}");
    assert_eq!(c.request("shutdown", Value::Null)["result"], Value::Null);
    let late = c.request("textDocument/hover", Lsp::hover_params(&a, 0));
    assert_eq!(late["error"]["code"], -32600, "{late}");
    assert_eq!(got(&sb, "textDocument/hover").len(), 1);
}

/// A server that counts in UTF-8 although it was offered UTF-16 only (it says so at
/// `initialize`): a client's positions reach it in its count, and its answers come back in
/// UTF-16, as diagnostics do.
#[test]
fn a_utf8_servers_navigation_is_converted_both_ways() {
    let sb = Sandbox::new();
    let a = sb.write("a.fk", "s = \"é🦀\" + target\n");
    let srv = serve(&sb, "encoding=utf-8", &[]);
    let mut c = Lsp::connect(&srv, &sb.ws(), "CLI");
    c.initialize(&sb.ws());
    c.open(&a);
    // `target`: UTF-16 character 12, UTF-8 byte 15 (é is 2 bytes, 🦀 4 bytes and 2 units).
    let def = c.request(
        "textDocument/definition",
        json!({"textDocument": {"uri": uri(&a)}, "position": {"line": 0, "character": 12}}),
    );
    let at_server = &got(&sb, "textDocument/definition")[0]["params"]["position"];
    assert_eq!(at_server, &json!({"line": 0, "character": 15}));
    let here = json!({"line": 0, "character": 12});
    assert_eq!(
        def["result"],
        json!([{"uri": uri(&a), "range": {"start": here, "end": here}}])
    );
}

/// `ccide lsp --navigation` with an editor that counts in UTF-8 reads the files an answer
/// names to convert their positions: only regular files, bounded. A definition in a FIFO or
/// in /dev/zero passes as it is, at once, and the next request is answered.
#[test]
fn an_editor_answer_naming_a_fifo_or_a_device_is_passed_without_reading_it() {
    let sb = Sandbox::new();
    let fifo = sb.root.join("fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let a = sb.write(
        "a.fk",
        format!("GOTO {}\nGOTO /dev/zero\nplain\n", fifo.display()),
    );
    let _srv = serve(&sb, "", &[]);
    let mut ed = LspProcess::spawn(&mut sb.command(&["lsp"]), sb.root.join("ed.log"));
    let init = ed.request(
        "initialize",
        json!({"processId": std::process::id(), "rootUri": uri(&sb.ws()),
               "capabilities": {"general": {"positionEncodings": ["utf-8"]}},
               "initializationOptions": {"navigation": true}}),
    );
    assert_eq!(init["result"]["capabilities"]["positionEncoding"], "utf-8");
    ed.notify("initialized", json!({}));
    let text = std::fs::read_to_string(&a).unwrap();
    ed.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": uri(&a), "languageId": "fk", "version": 1, "text": text}}),
    );
    let one = json!({"line": 0, "character": 1});
    for (line, target) in [(0, uri(&fifo)), (1, "file:///dev/zero".to_string())] {
        let def = ed.request(
            "textDocument/definition",
            json!({"textDocument": {"uri": uri(&a)}, "position": {"line": line, "character": 0}}),
        );
        assert_eq!(
            def["result"],
            json!([{"uri": target, "range": {"start": one, "end": one}}]),
            "{def}"
        );
    }
    let h = ed.request("textDocument/hover", Lsp::hover_params(&a, 2));
    assert_eq!(h["result"]["contents"]["value"], "plain", "{h}");
}
