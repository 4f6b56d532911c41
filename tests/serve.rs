//! `ccide serve` as the CLI finds and reaches it: the lock file and its modes, restarts that
//! keep port and token, the WebSocket handshake and its refusals, MCP's lifecycle and JSON-RPC,
//! keepalive, several clients, refused folders, and its command line (help, mistyped names,
//! the man page).

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::util::*;
use crate::wire::{FIN, TEXT, frame, read_frame};
use serde_json::{Value, json};

#[test]
fn lock_file_has_the_protocol_fields_and_private_modes() {
    let sb = Sandbox::new();
    let s = sb.serve(&[]);
    let lock = &s.lock;
    assert_eq!(lock["pid"], json!(s.pid()));
    assert_eq!(lock["workspaceFolders"], json!([sb.ws().to_str().unwrap()]));
    assert_eq!(lock["ideName"], "ccide (ws)");
    assert_eq!(lock["transport"], "ws");
    assert_eq!(lock["runningInWindows"], false);
    let token = lock["authToken"].as_str().unwrap();
    assert_eq!(token.len(), 86, "64 bytes in base64url without padding");
    assert!(
        token
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    );
    assert_eq!(mode(&s.lock_path), 0o600);
    assert_eq!(mode(&sb.config().join("ide")), 0o700);
    assert_eq!(s.lock_path.parent().unwrap(), sb.config().join("ide"));
}

#[test]
fn symlinked_workspace_is_written_resolved() {
    let sb = Sandbox::new();
    let link = sb.root.join("link-to-ws");
    std::os::unix::fs::symlink(sb.ws(), &link).unwrap();
    let mut cmd = sb.command(&[
        "serve",
        "--workspace",
        link.to_str().unwrap(),
        "--state-dir",
        sb.state().to_str().unwrap(),
        "--ide-name",
        "My Box",
    ]);
    let s = Server::spawn(&mut cmd, &sb.config());
    assert_eq!(
        s.lock["workspaceFolders"],
        json!([sb.ws().to_str().unwrap()])
    );
    assert_eq!(s.lock["ideName"], "My Box");
}

#[test]
fn lock_file_is_removed_on_sigterm_sigint_and_sighup() {
    for sig in ["TERM", "INT", "HUP"] {
        let sb = Sandbox::new();
        let mut s = sb.serve(&[]);
        let path = s.lock_path.clone();
        assert!(path.exists());
        assert_eq!(s.stop_with(sig), Some(0), "exit status after SIG{sig}");
        assert!(!path.exists(), "lock file left after SIG{sig}");
    }
}

#[test]
fn restart_keeps_port_and_token_and_replaces_a_stale_lock() {
    let sb = Sandbox::new();
    let mut first = sb.serve(&[]);
    let (port, token) = (first.port, first.token.clone());
    // SIGKILL leaves a stale lock behind, as a crash would.
    first.stop_with("KILL");
    assert!(first.lock_path.exists());
    let second = sb.serve(&[]);
    assert_eq!(second.port, port);
    assert_eq!(second.token, token);
    assert_eq!(second.lock["pid"], json!(second.pid()));
    assert_eq!(list_locks(&sb.config().join("ide")).len(), 1);
    let mut c = second.client();
    assert_eq!(c.request("ping", json!({}))["result"], json!({}));
}

#[test]
fn a_taken_port_moves_the_server_and_says_so() {
    let sb = Sandbox::new();
    let mut first = sb.serve(&[]);
    let port = first.port;
    first.stop_with("TERM");
    let squatter = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    let second = sb.serve(&[]);
    assert_ne!(second.port, port);
    assert!(
        second
            .log()
            .contains(&format!("port {port} from the last run is not available"))
    );
    drop(squatter);
}

#[test]
fn handshake_refusals_happen_before_the_upgrade() {
    let sb = Sandbox::new();
    let s = sb.serve(&[]);
    let p = s.port;
    let token_line = format!("X-Claude-Code-Ide-Authorization: {}\r\n", s.token);
    let (st, text) = s.http(&upgrade_head(p, ""));
    assert_eq!(st, 401, "{text}");
    assert!(text.contains("Content-Length:") && text.contains("Connection: close"));
    let wrong = format!("X-Claude-Code-Ide-Authorization: {}x\r\n", &s.token[..85]);
    assert_eq!(s.http(&upgrade_head(p, &wrong)).0, 401);
    let origin = format!("{token_line}Origin: https://evil.example\r\n");
    assert_eq!(s.http(&upgrade_head(p, &origin)).0, 403);
    let foreign = upgrade_head(p, &token_line).replace("Host: 127.0.0.1", "Host: evil.example");
    assert_eq!(s.http(&foreign).0, 403);
    let (st, text) = s.http(&format!("GET / HTTP/1.1\r\nHost: 127.0.0.1:{p}\r\n\r\n"));
    assert_eq!(st, 426);
    assert!(text.contains("ccide"), "{text}");
    // Header names are case-insensitive; the subprotocol is echoed.
    let lower = upgrade_head(
        p,
        &format!("x-claude-code-ide-authorization: {}\r\n", s.token),
    );
    let (st, text) = s.http_upgrade_only(&lower);
    assert_eq!(st, 101, "{text}");
    assert!(text.contains("Sec-WebSocket-Protocol: mcp"), "{text}");
    let c = s.connect();
    assert_eq!(c.subprotocol.as_deref(), Some("mcp"));
}

trait UpgradeOnly {
    fn http_upgrade_only(&self, head: &str) -> (u16, String);
}

impl UpgradeOnly for Server {
    /// Reads only the response head (after a successful upgrade the socket stays open).
    fn http_upgrade_only(&self, head: &str) -> (u16, String) {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        s.set_read_timeout(Some(DEADLINE)).unwrap();
        s.write_all(head.as_bytes()).unwrap();
        let mut buf = Vec::new();
        let mut b = [0u8; 1];
        while !buf.ends_with(b"\r\n\r\n") {
            match s.read(&mut b) {
                Ok(1) => buf.push(b[0]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                r => panic!("the response head ended early: {r:?}"),
            }
        }
        let text = String::from_utf8_lossy(&buf).into_owned();
        (text.split(' ').nth(1).unwrap().parse().unwrap(), text)
    }
}

#[test]
fn a_stalled_handshake_is_dropped_while_another_client_is_served() {
    use std::io::{Read, Write};
    let sb = Sandbox::new();
    let s = sb.serve(&[]);
    let mut stalled = std::net::TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    stalled
        .write_all(b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        .unwrap();
    let started = Instant::now();
    let mut c = s.client();
    assert_eq!(c.request("ping", json!({}))["result"], json!({}));
    assert!(
        started.elapsed() < Duration::from_secs(4),
        "served while a handshake stalls"
    );
    stalled
        .set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    let mut buf = [0u8; 16];
    let n = loop {
        match stalled.read(&mut buf) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            r => break r.unwrap_or(0),
        }
    };
    assert_eq!(n, 0, "the stalled connection is closed");
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_secs(4) && waited < Duration::from_secs(12),
        "{waited:?}"
    );
}

#[test]
fn initialize_echoes_known_versions_and_answers_unknown_ones_with_the_latest() {
    let sb = Sandbox::new();
    let s = sb.serve(&[]);
    let mut c = s.connect();
    let r = c.request(
        "initialize",
        json!({"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"claude-code","version":"1.0.128"}}),
    );
    assert_eq!(r["id"], json!(0), "id 0 echoed: {r}");
    assert_eq!(r["result"]["protocolVersion"], "2025-06-18");
    assert_eq!(
        r["result"]["capabilities"],
        json!({"tools": {"listChanged": true}})
    );
    assert_eq!(r["result"]["serverInfo"]["name"], "Claude Code ccide MCP");
    assert_eq!(
        r["result"]["serverInfo"]["version"],
        env!("CARGO_PKG_VERSION")
    );
    let r = c.request("initialize", json!({"protocolVersion":"2099-01-01"}));
    assert_eq!(r["result"]["protocolVersion"], "2025-11-25");
}

/// The client filters the model's `getDiagnostics` results by the session's Read rules (a
/// `Read(./secret/**)` deny rule, reads outside its folders blocked) only for an IDE whose
/// `serverInfo.name` matches `^Claude Code .+ MCP$`; under another name, diagnostics quoting a
/// denied file's code reach the model (ccide-protocol(7) §3.2, §5.4). The lock file's
/// `ideName`, which /ide and /status show, stays ccide's own.
#[test]
fn initialize_names_the_server_so_that_the_client_applies_its_read_rules_to_diagnostics() {
    let sb = Sandbox::new();
    let s = sb.serve(&[]);
    let mut c = s.connect();
    let r = c.request(
        "initialize",
        json!({"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"claude-code","version":"2.1.332"}}),
    );
    let name = r["result"]["serverInfo"]["name"]
        .as_str()
        .expect("serverInfo.name");
    // The client's test, /^Claude Code .+ MCP$/, spelled out: `.` is any character but a
    // line terminator, at least one of them.
    let middle = name
        .strip_prefix("Claude Code ")
        .and_then(|n| n.strip_suffix(" MCP"))
        .unwrap_or_else(|| panic!("{name:?} does not match ^Claude Code .+ MCP$"));
    assert!(
        !middle.is_empty() && !middle.contains(['\n', '\r', '\u{2028}', '\u{2029}']),
        "{name:?} does not match ^Claude Code .+ MCP$"
    );
    // Not the JetBrains plugin's name, for which the client skips its diagnostics baseline.
    assert_eq!(name, "Claude Code ccide MCP");
    assert_eq!(s.lock["ideName"], "ccide (ws)");
}

#[test]
fn json_rpc_requests_errors_and_batches() {
    let sb = Sandbox::new();
    let s = sb.serve(&[]);
    let mut c = s.client();
    // The handshake used ids 0 and 1; the exact bytes of a ping answer:
    let id = c.send_request("ping", json!({}));
    assert_eq!(id, json!(2));
    let raw = c.recv_raw_text();
    assert_eq!(raw, r#"{"id":2,"jsonrpc":"2.0","result":{}}"#);
    assert_eq!(
        c.request("resources/list", json!({}))["result"],
        json!({"resources": []})
    );
    assert_eq!(
        c.request("resources/templates/list", json!({}))["result"],
        json!({"resourceTemplates": []})
    );
    assert_eq!(
        c.request("prompts/list", json!({}))["result"],
        json!({"prompts": []})
    );
    let tools = c.request("tools/list", json!({}));
    let names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names, sorted, "tools/list is sorted by name");
    for t in tools["result"]["tools"].as_array().unwrap() {
        assert_eq!(t["inputSchema"]["type"], "object", "{t}");
    }
    let r = c.request("no/such/method", json!({}));
    assert_eq!(r["error"]["code"], -32601);
    assert_eq!(r["error"]["message"], "Method not found");
    let r = c.call("noSuchTool", json!({}));
    assert_eq!(r["error"]["code"], -32602);
    assert_eq!(r["error"]["message"], "Unknown tool: noSuchTool");

    c.send_text("{not json");
    let r = c.recv_where("parse error", |v| v["error"]["code"] == -32700);
    assert_eq!(r["id"], Value::Null);
    c.send(&json!({"jsonrpc":"1.0","id":"x","method":"ping"}));
    let r = c.response(&json!("x"));
    assert_eq!(r["error"]["code"], -32600);
    c.send(&json!({"jsonrpc":"2.0","id":"str-id","method":"ping"}));
    assert_eq!(c.response(&json!("str-id"))["result"], json!({}));
    c.send_text("[]");
    let r = c.recv_where("empty batch error", |v| v["error"]["code"] == -32600);
    assert_eq!(r["id"], Value::Null);
    c.send(&json!([
        {"jsonrpc":"2.0","id":"a","method":"ping"},
        {"jsonrpc":"2.0","method":"notifications/initialized"},
        {"jsonrpc":"2.0","id":7,"method":"nope"},
        5
    ]));
    let batch = c.recv_where("a batch response", |v| v.is_array());
    assert_eq!(
        batch,
        json!([
            {"jsonrpc":"2.0","id":"a","result":{}},
            {"jsonrpc":"2.0","id":7,"error":{"code":-32601,"message":"Method not found"}},
            {"jsonrpc":"2.0","id":null,"error":{"code":-32600,"message":"Invalid Request: not a JSON object"}}
        ])
    );
    // Unknown notifications are ignored: the next request is the next answer.
    c.send(&json!({"jsonrpc":"2.0","method":"some/notification"}));
    c.send(&json!({"jsonrpc":"2.0","id":99,"method":"ping"}));
    assert_eq!(c.recv()["id"], 99);
}

#[test]
fn binary_frames_with_json_are_served_like_text() {
    let sb = Sandbox::new();
    let s = sb.serve(&[]);
    let mut c = s.client();
    c.ws.send(tungstenite::Message::Binary(
        br#"{"jsonrpc":"2.0","id":"b","method":"ping"}"#.to_vec().into(),
    ))
    .unwrap();
    assert_eq!(c.response(&json!("b"))["result"], json!({}));
}

#[test]
fn oversized_messages_close_with_1009() {
    let sb = Sandbox::new();
    let s = sb.serve(&[]);
    let mut c = s.client();
    let big = "x".repeat(65 << 20);
    let _ = c.ws.send(tungstenite::Message::Text(big.into()));
    assert_eq!(c.closed().0, Some(1009));
    // The server is still there for others.
    let mut d = s.client();
    assert_eq!(d.request("ping", json!({}))["result"], json!({}));
}

#[test]
fn a_client_that_stops_answering_pings_is_closed_and_a_healthy_one_is_not() {
    let sb = Sandbox::new();
    let s = sb.serve(&["--ping-interval", "0.3", "--ping-timeout", "0.4"]);
    let mut healthy = s.client();
    let mut silent = s.client();
    silent.answer_pings = false;
    // The healthy client answers pings on its own thread until the silent one is closed, and
    // one more after that.
    let (closed, silent_closed) = std::sync::mpsc::channel();
    let healthy = std::thread::spawn(move || {
        while silent_closed.try_recv().is_err() {
            healthy.answer_keepalive_pings(1);
        }
        healthy.answer_keepalive_pings(1);
        healthy.request("ping", json!({}))
    });
    let started = Instant::now();
    let (code, reason) = silent.closed();
    closed.send(()).unwrap();
    assert_eq!(code, Some(1001));
    assert!(reason.contains("ping"), "{reason}");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(healthy.join().unwrap()["result"], json!({}));
}

/// A client socket that writes at most 16 KiB at a time, 20 ms apart: a client busy sending a
/// big message for seconds, which answers a keepalive ping only after it.
struct SlowSender(std::net::TcpStream);

impl std::io::Read for SlowSender {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        self.0.read(buf)
    }
}

impl std::io::Write for SlowSender {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        std::thread::sleep(Duration::from_millis(20));
        self.0.write(&buf[..buf.len().min(16 << 10)])
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0.flush()
    }
}

#[test]
fn a_client_busy_sending_a_big_message_is_alive_though_its_ping_answer_comes_after_it() {
    use tungstenite::Message;
    use tungstenite::client::IntoClientRequest;
    let sb = Sandbox::new();
    let s = sb.serve(&["--ping-interval", "0.2", "--ping-timeout", "0.3"]);
    let stream = std::net::TcpStream::connect(("127.0.0.1", s.port)).unwrap();
    stream.set_read_timeout(Some(DEADLINE)).unwrap();
    let mut req = format!("ws://127.0.0.1:{}/", s.port)
        .into_client_request()
        .unwrap();
    req.headers_mut()
        .insert("X-Claude-Code-Ide-Authorization", s.token.parse().unwrap());
    let (mut ws, _) = tungstenite::client::client(req, SlowSender(stream)).unwrap();
    // 2 MiB at 16 KiB per 20 ms: more than 2.5 s, many ping timeouts, before the client can
    // read the ping that came meanwhile.
    let big = json!({"jsonrpc": "2.0", "id": "big", "method": "ping", "params": {"pad": "x".repeat(2 << 20)}});
    let started = Instant::now();
    ws.send(Message::Text(big.to_string().into()))
        .unwrap_or_else(|e| panic!("the server stopped taking the message: {e}\n{}", s.log()));
    assert!(started.elapsed() > Duration::from_millis(1000));
    // Then it answers the ping that waited, and gets its answer.
    let mut pings = 0;
    let answer = loop {
        let v: Value = match ws.read() {
            Ok(Message::Text(t)) => serde_json::from_str(t.as_str()).unwrap(),
            Ok(Message::Close(f)) => panic!("closed: {f:?}\n{}", s.log()),
            Ok(_) => continue,
            Err(e) => panic!("no answer: {e}\n{}", s.log()),
        };
        if v["method"] == "ping" {
            pings += 1;
            let pong = json!({"jsonrpc": "2.0", "id": v["id"], "result": {}});
            ws.send(Message::Text(pong.to_string().into())).unwrap();
            continue;
        }
        break v;
    };
    assert_eq!(answer, json!({"jsonrpc": "2.0", "id": "big", "result": {}}));
    assert!(pings >= 1, "a ping waited for the whole message");
    assert!(!s.log().contains("no answer to ping"), "{}", s.log());
}

#[test]
fn requests_that_arrive_after_the_close_frame_are_not_served() {
    let sb = Sandbox::new();
    let srv = sb.serve(&["--ping-interval", "0.2", "--ping-timeout", "0.3"]);
    let mut silent = raw_client(srv.port, &srv.token);
    // It answers no ping: closed with 1001.
    let (code, reason) = loop {
        let (first, payload) = read_frame(&mut silent).expect("a frame from the server");
        match (first & 0x0f, payload) {
            (8, payload) => {
                break (
                    u16::from_be_bytes([payload[0], payload[1]]),
                    payload[2..].to_vec(),
                );
            }
            (1, _) => continue,
            (op, _) => panic!("opcode {op}"),
        }
    };
    assert_eq!(code, 1001, "{}", String::from_utf8_lossy(&reason));
    // A request sent as the close arrived, before the client answers it (which it never does
    // here): the server waits a second for the client's close frame, and serves nothing
    // meanwhile, since no answer would be written (a flood of them kept it busy for seconds).
    let made = sb.ws().join("made.txt");
    let req = json!({"jsonrpc": "2.0", "id": 1, "method": "writeFile", "params": {"path": "made.txt", "content": "x"}});
    silent
        .write_all(&frame(FIN | TEXT, req.to_string().as_bytes()))
        .unwrap();
    wait_for("the connection to end", DEADLINE, || {
        srv.log().contains("client #1 disconnected").then_some(())
    });
    assert!(!made.exists(), "served after the close: {}", srv.log());
}

#[test]
fn single_client_closes_the_previous_client_with_4001() {
    let sb = Sandbox::new();
    let s = sb.serve(&["--single-client"]);
    let mut old = s.client();
    let mut new = s.client();
    let (code, reason) = old.closed();
    assert_eq!(code, Some(4001));
    assert_eq!(reason, "Another Claude Code session connected to this IDE");
    assert_eq!(new.request("ping", json!({}))["result"], json!({}));
}

#[test]
fn without_single_client_two_clients_coexist() {
    let sb = Sandbox::new();
    let s = sb.serve(&[]);
    let mut a = s.client();
    let mut b = s.client();
    assert_eq!(a.request("ping", json!({}))["result"], json!({}));
    assert_eq!(b.request("ping", json!({}))["result"], json!({}));
}

#[test]
fn the_connection_cap_answers_503_and_frees_slots() {
    let sb = Sandbox::new();
    let s = sb.serve(&["--max-connections", "2"]);
    let a = s.client();
    let _b = s.client();
    let head = upgrade_head(
        s.port,
        &format!("X-Claude-Code-Ide-Authorization: {}\r\n", s.token),
    );
    assert_eq!(s.http(&head).0, 503);
    drop(a);
    // Only the head: an upgraded connection stays open.
    wait_for("a freed slot", DEADLINE, || {
        (s.http_upgrade_only(&head).0 == 101).then_some(())
    });
}

#[test]
fn bad_command_lines_name_the_flag_and_exit_2() {
    let sb = Sandbox::new();
    let o = sb.run(&["serve", "--bogus"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--bogus"), "{}", stderr(&o));
    let o = sb.run(&["serve", "--port", "http"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--port"), "{}", stderr(&o));
    let o = sb.run(&["serve", "--ping-interval", "-1"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--ping-interval"));
    let o = sb.run(&["serve", "--log-level", "loud"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--log-level"));
    let o = sb.run(&["serve", "--host", "0.0.0.0"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--allow-remote"));
    let o = sb.run(&["serve", "--workspace", "/no/such/dir"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--workspace") && stderr(&o).contains("/no/such/dir"));
    let o = sb
        .command(&["serve"])
        .env("CCIDE_PORT", "99999")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("CCIDE_PORT"), "{}", stderr(&o));
    // A switch's variable: every word it takes is listed.
    let o = sb
        .command(&["serve"])
        .env("CCIDE_LSP_WARM", "maybe")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(
        stderr(&o),
        "ccide: CCIDE_LSP_WARM=maybe: expected 1, true, yes or on to enable, 0, false, no or off to disable\n\
         Run 'ccide --help' for the commands and their options.\n"
    );
    let o = sb.run(&["frobnicate"]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn no_home_and_no_config_dir_is_an_error_naming_config_dir() {
    let sb = Sandbox::new();
    let o = sb
        .command(&["serve", "--state-dir", sb.state().to_str().unwrap()])
        .env_remove("HOME")
        .env_remove("CLAUDE_CONFIG_DIR")
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("--config-dir"), "{}", stderr(&o));
}

#[test]
fn an_unusable_lock_directory_fails_with_the_path() {
    let sb = Sandbox::new();
    let cfg = sb.root.join("bad-config");
    std::fs::create_dir_all(&cfg).unwrap();
    // A file where the lock directory should be: fails for root too.
    std::fs::write(cfg.join("ide"), "").unwrap();
    let o = sb
        .command(&[
            "serve",
            "--config-dir",
            cfg.to_str().unwrap(),
            "--state-dir",
            sb.state().to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains(cfg.join("ide").to_str().unwrap()),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_lock_directory_writable_by_others_is_refused() {
    let sb = Sandbox::new();
    let cfg = sb.root.join("shared-config");
    std::fs::create_dir_all(cfg.join("ide")).unwrap();
    std::fs::set_permissions(cfg.join("ide"), std::fs::Permissions::from_mode(0o777)).unwrap();
    let o = sb
        .command(&[
            "serve",
            "--config-dir",
            cfg.to_str().unwrap(),
            "--state-dir",
            sb.state().to_str().unwrap(),
        ])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("writable by group or others"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn a_mistyped_command_or_flag_gets_the_closest_name() {
    let sb = Sandbox::new();
    let hint = "\nRun 'ccide --help' for the commands and their options.\n";
    for (args, says) in [
        (
            &["stauts"][..],
            "unknown command 'stauts', did you mean 'status'?",
        ),
        (
            &["help", "serv"],
            "unknown command 'serv', did you mean 'serve'?",
        ),
        (&["frobnicate"], "unknown command 'frobnicate'"),
        (
            &["serve", "--stat-dir", "x"],
            "unknown option '--stat-dir' for 'ccide serve', did you mean '--state-dir'? (see 'ccide help serve')",
        ),
        (
            &["diff", "--jsn"],
            "unknown option '--jsn' for 'ccide diff', did you mean '--json'? (see 'ccide help diff')",
        ),
        // An option before any command is never taken for a command's name.
        (
            &["-v"],
            "unknown option '-v', did you mean '-V' (--version)?",
        ),
        (
            &["--verison"],
            "unknown option '--verison', did you mean '--version'?",
        ),
        (
            &["-x"],
            "unknown option '-x' (a command's options go after it: ccide COMMAND --help)",
        ),
    ] {
        let o = sb.run(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert_eq!(stderr(&o), format!("ccide: {says}{hint}"), "{args:?}");
    }
}

#[test]
fn serve_says_the_next_step_is_claude_ide_in_the_folder() {
    let sb = Sandbox::new();
    let server = sb.serve(&[]);
    let next = format!(
        " ccide info: next: run `claude --ide` in {} (or type /ide in a running claude) to connect Claude Code\n",
        sb.ws().display()
    );
    wait_for("the next step in the log", DEADLINE, || {
        server.log().contains(&next).then_some(())
    });
}

#[test]
fn a_workspace_inside_a_state_directory_is_refused() {
    let sb = Sandbox::new();
    let server = sb.serve(&[]);
    let f = sb.write("main.py", "old\n");
    let mut claude = server.ready_client();
    claude.send_request(
        "tools/call",
        serde_json::json!({"name": "openDiff", "arguments": {"old_file_path": f, "new_file_path": f, "new_file_contents": "new\n", "tab_name": "t"}}),
    );
    let diff = sb.state().join("diffs/1");
    wait_for("the diff directory", DEADLINE, || {
        diff.is_dir().then_some(())
    });
    for dir in [&diff, &sb.state()] {
        let mut child = sb
            .command(&["serve", "--workspace", dir.to_str().unwrap(), "--state-dir"])
            .arg(sb.root.join("other-state"))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let exited = wait_for("serve to refuse", DEADLINE, || {
            let e = child.try_wait().unwrap();
            if e.is_none() && sb.config().join("ide").read_dir().unwrap().count() > 1 {
                let _ = child.kill();
                panic!("a server was started for {}", dir.display());
            }
            e
        });
        let o = child.wait_with_output().unwrap();
        assert_eq!(exited.code(), Some(2));
        assert_eq!(
            stderr(&o),
            format!(
                "ccide: refusing to serve {}: it is inside the state directory of a ccide server ({}), where its proposals live; a proposal belongs to the server that made it. Serve your project's folder instead.\nRun 'ccide --help' for the commands and their options.\n",
                dir.display(),
                sb.state().display()
            )
        );
    }
}

#[test]
fn help_and_version() {
    let sb = Sandbox::new();
    let o = sb.run(&["--version"]);
    assert_eq!(stdout(&o), format!("ccide {}\n", env!("CARGO_PKG_VERSION")));
    let o = sb.run(&["--help"]);
    assert!(o.status.success());
    assert!(stdout(&o).contains("serve"));
    let o = sb.run(&["help", "serve"]);
    assert!(stdout(&o).contains("--ping-interval SECS"));
    assert_eq!(stdout(&sb.run(&["serve", "--help"])), stdout(&o));
}

#[test]
fn help_has_its_own_help_and_the_top_help_is_in_two_columns() {
    let sb = Sandbox::new();
    let help = "Show the options of a command (same as ccide COMMAND --help).\n\n\
                Usage: ccide help [COMMAND]\n\n\
                Without COMMAND, the list of commands (same as ccide --help).\n\n\
                Options:\n  -h, --help\n      Show this text.\n";
    for args in [&["help", "--help"][..], &["help", "-h"], &["help", "help"]] {
        let o = sb.run(args);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
        assert_eq!(stdout(&o), help, "{args:?}");
    }
    let top = stdout(&sb.run(&["--help"]));
    assert_eq!(stdout(&sb.run(&["help"])), top);
    // Every row of the two lists starts its text in the same column.
    let rows: Vec<&str> = top
        .lines()
        .filter(|l| l.starts_with("  ") && !l.starts_with("   "))
        .collect();
    assert!(rows.len() > 10, "{top}");
    // The text starts after the first run of two spaces or more past the indent.
    let column = |row: &str| {
        let name_end = 2 + row[2..].find("  ").unwrap();
        name_end + row[name_end..].find(|c: char| c != ' ').unwrap()
    };
    let first = column(rows[0]);
    for row in &rows {
        assert_eq!(column(row), first, "out of column: {row:?}\n{top}");
    }
    assert!(
        top.contains("\n  -V, --version  Show the version.\n"),
        "{top}"
    );
}

/// Every option and variable `ccide help` mentions is in ccide(1); that each flag of the flag
/// table is described in its own command's section, with its default, is checked against the
/// table itself (`the_man_page_describes_each_flag_in_its_commands_section_with_its_default`).
#[test]
fn every_flag_of_every_command_is_in_the_man_page_and_it_renders() {
    let man = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/man/ccide.1")).unwrap();
    let sb = Sandbox::new();
    let overview = stdout(&sb.run(&["--help"]));
    let commands: Vec<String> = overview
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next().map(String::from))
        .filter(|c| c != "help")
        .collect();
    assert!(commands.contains(&"serve".to_string()));
    for cmd in &commands {
        assert!(
            man.contains(&format!(".SS {cmd}")) || man.contains(&format!(".SS \"{cmd}")),
            "man page lacks command {cmd}"
        );
        let help = stdout(&sb.run(&["help", cmd]));
        for word in help.split_whitespace() {
            if let Some(flag) = word.strip_prefix("--") {
                let flag = flag.trim_end_matches([',', '.', ')', ':', ';', '`']);
                if flag.is_empty() || flag == "help" {
                    continue;
                }
                let escaped = format!("\\-\\-{}", flag.replace('-', "\\-"));
                assert!(man.contains(&escaped), "man page lacks --{flag} of {cmd}");
            }
            if let Some(var) = word.strip_prefix("CCIDE_") {
                let var = var.trim_end_matches([']', ',', '.', ')', ':', ';']);
                assert!(
                    man.contains(&format!("CCIDE_{}", var.replace('-', "\\-")))
                        || man.contains(&format!("CCIDE_{var}")),
                    "man page lacks CCIDE_{var}"
                );
            }
        }
    }
    // It renders without warnings.
    let out = std::process::Command::new("groff")
        .args(["-man", "-Tutf8", "-ww", "-z"])
        .arg(concat!(env!("CARGO_MANIFEST_DIR"), "/man/ccide.1"))
        .output()
        .expect("groff is installed (by .ci/run)");
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stderr), "", "groff warnings");
}

#[test]
fn a_notification_broadcast_reaches_every_initialized_client() {
    let sb = Sandbox::new();
    sb.write("main.py", "a\nb\n");
    let s = sb.serve(&[]);
    let mut a = s.client();
    let mut b = s.client();
    assert!(sb.run(&["mention", "main.py:1-2"]).status.success());
    let expected = json!({"jsonrpc": "2.0", "method": "at_mentioned", "params": {
        "filePath": sb.ws().join("main.py"), "lineStart": 0, "lineEnd": 1}});
    assert_eq!(a.notification("at_mentioned"), expected);
    assert_eq!(b.notification("at_mentioned"), expected);
}

#[test]
fn a_stopping_server_refuses_upgrades_instead_of_accepting_and_dropping_them() {
    let sb = Sandbox::new();
    let mut s = sb.serve(&[]);
    // A client that never reads keeps shutdown waiting for its close handshake a while.
    let _lingering = s.client();
    let head = upgrade_head(
        s.port,
        &format!("X-Claude-Code-Ide-Authorization: {}\r\n", s.token),
    );
    s.signal("TERM");
    wait_for("the lock file to go", DEADLINE, || {
        (!s.lock_path.exists()).then_some(())
    });
    // From the moment the lock is gone, a reconnect is never handed a doomed connection.
    for _ in 0..20 {
        match std::net::TcpStream::connect(("127.0.0.1", s.port)) {
            Err(_) => break,
            Ok(_) => {
                let (status, text) = raw_http_or_closed(s.port, &head);
                assert!(status == 503 || status == 0, "{text}");
            }
        }
    }
    let mut child = s.child.take().unwrap();
    let status = wait_for("exit", DEADLINE, || child.try_wait().unwrap());
    assert_eq!(status.code(), Some(0));
}

/// Like `raw_http`, but a refused or reset connection is status 0.
fn raw_http_or_closed(port: u16, head: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else {
        return (0, String::new());
    };
    let _ = s.set_read_timeout(Some(DEADLINE));
    let _ = s.write_all(head.as_bytes());
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf).into_owned();
    (
        text.split(' ')
            .nth(1)
            .and_then(|c| c.parse().ok())
            .unwrap_or(0),
        text,
    )
}
