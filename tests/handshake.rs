//! The handshake and who gets in: stalled and abusive handshakes do not stop a real client and
//! the cap on connections holds; a request head above 16 KiB (up to 1 MiB) is answered 431, not
//! reset; only the holder of the lock file's token gets in, refused before any message is read;
//! and the token appears in no log line at any level.

use std::io::Write;
use std::net::TcpStream;
use std::time::Instant;

use crate::util::*;
use crate::wire::*;
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------------
// Handshake abuse.

#[test]
fn stalled_and_abusive_handshakes_do_not_stop_a_real_client_and_the_cap_holds() {
    let sb = Sandbox::new();
    let mut srv = sb.serve(&["--max-connections", "4"]);
    let port = srv.port;
    // 200 connections that send half an upgrade request and stall, 200 that send nothing.
    let mut hogs = Vec::new();
    for i in 0..400 {
        let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
        if i % 2 == 0 {
            s.write_all(
                b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nX-Claude-Code",
            )
            .unwrap();
        }
        hogs.push(s);
    }
    let t = Instant::now();
    let mut c = Conn::open(port, &srv.token, true);
    c.handshake();
    assert_eq!(c.request(json!(1), "ping", json!({}))["result"], json!({}));
    assert!(
        t.elapsed() < PROMPTLY,
        "a real client waited {:?} behind 400 stalled handshakes",
        t.elapsed()
    );
    // Malformed, duplicated and oversized heads: a 4xx each, never a crash.
    let ok_head = upgrade_head(port, &auth(&srv.token));
    let token_line = auth(&srv.token);
    let filler: String = (0..400)
        .map(|i| format!("X-Filler-{i}: {}\r\n", "f".repeat(80)))
        .collect();
    let cases: Vec<(&str, Vec<u8>, u16)> = vec![
        (
            "head of 37 KiB",
            ok_head
                .replace("\r\n\r\n", &format!("\r\n{filler}\r\n"))
                .into_bytes(),
            431,
        ),
        (
            "one header line of 17 KiB",
            format!("GET / HTTP/1.1\r\nX-Long: {}", "l".repeat(17 << 10)).into_bytes(),
            431,
        ),
        (
            "two tokens",
            upgrade_head(port, &format!("{token_line}{token_line}")).into_bytes(),
            400,
        ),
        (
            "two tokens, one wrong",
            upgrade_head(port, &format!("{token_line}{}", auth("wrong"))).into_bytes(),
            400,
        ),
        (
            "two Hosts",
            ok_head
                .replace("Host:", "Host: localhost\r\nHost:")
                .into_bytes(),
            400,
        ),
        (
            "two Upgrade headers",
            ok_head
                .replace("Upgrade:", "Upgrade: websocket\r\nUpgrade:")
                .into_bytes(),
            400,
        ),
        (
            "two Origins",
            upgrade_head(port, &format!("{token_line}Origin: a\r\nOrigin: b\r\n")).into_bytes(),
            400,
        ),
        (
            "a header line without a colon",
            upgrade_head(port, &format!("{token_line}no colon here\r\n")).into_bytes(),
            400,
        ),
        (
            "a space in a header name",
            upgrade_head(port, &format!("{token_line}Bad Name: x\r\n")).into_bytes(),
            400,
        ),
        (
            "an empty header name",
            upgrade_head(port, &format!("{token_line}: x\r\n")).into_bytes(),
            400,
        ),
        (
            "a control byte in a header name",
            upgrade_head(port, &format!("{token_line}X\u{1}Y: x\r\n")).into_bytes(),
            400,
        ),
        (
            "a header value that is not UTF-8",
            [
                ok_head.trim_end().as_bytes(),
                b"\r\nX-Bin: \xff\xfe\r\n\r\n",
            ]
            .concat(),
            400,
        ),
        (
            "a request line of two words",
            b"GET /\r\nHost: 127.0.0.1\r\n\r\n".to_vec(),
            400,
        ),
        (
            "a request line of four words",
            ok_head
                .replacen("GET / HTTP/1.1", "GET / HTTP/1.1 extra", 1)
                .into_bytes(),
            400,
        ),
        (
            "HTTP/2.0",
            ok_head.replacen("HTTP/1.1", "HTTP/2.0", 1).into_bytes(),
            400,
        ),
        (
            "an empty request line",
            b"\r\nHost: 127.0.0.1\r\n\r\n".to_vec(),
            400,
        ),
        (
            "no Host",
            ok_head
                .replacen(&format!("Host: 127.0.0.1:{port}\r\n"), "", 1)
                .into_bytes(),
            400,
        ),
        (
            "WebSocket version 8",
            ok_head.replace("Version: 13", "Version: 8").into_bytes(),
            400,
        ),
        (
            "no WebSocket key",
            ok_head
                .replace("Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n", "")
                .into_bytes(),
            400,
        ),
        (
            "an empty WebSocket key",
            ok_head.replace("dGhlIHNhbXBsZSBub25jZQ==", "").into_bytes(),
            400,
        ),
        ("POST", ok_head.replacen("GET", "POST", 1).into_bytes(), 405),
        (
            "no Upgrade",
            ok_head.replace("Upgrade: websocket\r\n", "").into_bytes(),
            426,
        ),
        (
            "plain HTTP",
            format!("GET /favicon.ico HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n").into_bytes(),
            426,
        ),
        (
            "garbage",
            b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n".to_vec(),
            400,
        ),
    ];
    let mut wrong = Vec::new();
    for (what, bytes, want) in &cases {
        let (status, text) = http_all(port, bytes);
        if status != *want || !text.contains("Connection: close") {
            wrong.push(format!("{what}: {status}, wanted {want}: {text:.200}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    // Still served, still fast.
    let t = Instant::now();
    assert_eq!(c.request(json!(2), "ping", json!({}))["result"], json!({}));
    let mut other = Conn::open(port, &srv.token, true);
    assert_eq!(
        other.request(json!(3), "ping", json!({}))["result"],
        json!({})
    );
    assert!(t.elapsed() < PROMPTLY, "{:?}", t.elapsed());
    // The cap: 4 open (c, other and two more), the fifth refused with 503, a slot freed by a
    // close frame and one freed by a dropped socket are each usable again.
    let third = Conn::open(port, &srv.token, true);
    let fourth = Conn::open(port, &srv.token, true);
    let (_, status, text) = send_head(port, ok_head.as_bytes());
    assert_eq!(status, 503, "{text}");
    third
        .write(&frame(FIN | CLOSE, &close_payload(1000, b"")))
        .unwrap();
    let mut fifth = wait_for("a slot freed by a close frame", DEADLINE, || {
        let (s, status, _) = send_head(port, ok_head.as_bytes());
        (status == 101).then(|| Conn::over(s, true))
    });
    assert_eq!(
        fifth.request(json!(4), "ping", json!({}))["result"],
        json!({})
    );
    let (_, status, _) = send_head(port, ok_head.as_bytes());
    assert_eq!(status, 503);
    drop(fourth);
    let mut sixth = wait_for("a slot freed by a dropped socket", DEADLINE, || {
        let (s, status, _) = send_head(port, ok_head.as_bytes());
        (status == 101).then(|| Conn::over(s, true))
    });
    assert_eq!(
        sixth.request(json!(5), "ping", json!({}))["result"],
        json!({})
    );
    drop(third);
    drop(hogs);
    assert_alive(&mut srv);
}

#[test]
fn a_one_mebibyte_head_is_answered_431_not_reset() {
    let sb = Sandbox::new();
    let srv = sb.serve(&[]);
    let mut resets = 0;
    for _ in 0..5 {
        let head = format!(
            "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: {}\r\n\r\n",
            "b".repeat(MIB)
        );
        let (status, _) = http_all(srv.port, head.as_bytes());
        if status != 431 {
            resets += 1;
        }
    }
    assert_eq!(resets, 0, "of 5 heads of 1 MiB, {resets} got no 431");
}

// ---------------------------------------------------------------------------------------------
// Who gets in.

/// Heads that must be refused, each with the status and the word its refusal says.
fn refused_heads(port: u16, token: &str) -> Vec<(String, String, u16)> {
    let mut last = token.as_bytes().to_vec();
    *last.last_mut().unwrap() ^= 1;
    let last = String::from_utf8(last).unwrap();
    let mut first = token.as_bytes().to_vec();
    first[0] ^= 1;
    let first = String::from_utf8(first).unwrap();
    let good = auth(token);
    let head = |extra: &str| upgrade_head(port, extra);
    vec![
        ("missing".into(), head(""), 401),
        (
            "empty".into(),
            head("X-Claude-Code-Ide-Authorization:\r\n"),
            401,
        ),
        ("short".into(), head(&auth(&token[..8])), 401),
        (
            "all but the last byte".into(),
            head(&auth(&token[..token.len() - 1])),
            401,
        ),
        (
            "one byte longer".into(),
            head(&auth(&format!("{token}A"))),
            401,
        ),
        ("long".into(), head(&auth(&"A".repeat(8 << 10))), 401),
        ("wrong".into(), head(&auth("not-the-token")), 401),
        ("differing in the last byte".into(), head(&auth(&last)), 401),
        (
            "differing in the first byte".into(),
            head(&auth(&first)),
            401,
        ),
        (
            "as a Bearer".into(),
            head(&auth(&format!("Bearer {token}"))),
            401,
        ),
        (
            "in another header".into(),
            head(&format!("Authorization: {token}\r\n")),
            401,
        ),
        (
            "Origin of a web page".into(),
            head(&format!("{good}Origin: https://evil.example\r\n")),
            403,
        ),
        (
            "Origin null".into(),
            head(&format!("{good}Origin: null\r\n")),
            403,
        ),
        (
            "Origin localhost".into(),
            head(&format!("{good}origin: http://localhost:3000\r\n")),
            403,
        ),
        (
            "foreign Host".into(),
            head(&good).replace("Host: 127.0.0.1", "Host: evil.example"),
            403,
        ),
        (
            "foreign Host with a loopback prefix".into(),
            head(&good).replace("Host: 127.0.0.1", "Host: 127.0.0.1.evil.example"),
            403,
        ),
        (
            "Host localhost.evil".into(),
            head(&good).replace("Host: 127.0.0.1", "Host: localhost.evil.example"),
            403,
        ),
        (
            "Host 0.0.0.0".into(),
            head(&good).replace("Host: 127.0.0.1", "Host: 0.0.0.0"),
            403,
        ),
        (
            "Host with userinfo".into(),
            head(&good).replace(
                &format!("Host: 127.0.0.1:{port}"),
                "Host: 127.0.0.1:1@evil.example",
            ),
            403,
        ),
    ]
}

#[test]
fn only_the_token_holder_gets_in_and_refusals_come_before_any_message_is_read() {
    let sb = Sandbox::new();
    sb.write("probe.txt", "probe\n");
    let mut srv = sb.serve(&[]);
    let port = srv.port;
    // After each head, in the same write, a request that would open a tab and select text.
    let probe = frame(
        FIN | TEXT,
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "openFile", "arguments": {"filePath": "probe.txt", "startText": "probe"}}})
            .to_string()
            .as_bytes(),
    );
    let mut wrong = Vec::new();
    for (what, head, want) in refused_heads(port, &srv.token) {
        let (status, text) = http_all(port, &[head.as_bytes(), &probe].concat());
        let body = text.split("\r\n\r\n").nth(1).unwrap_or("");
        if status != want
            || !text.contains("Content-Length:")
            || !text.contains("Connection: close")
            || text.contains("jsonrpc")
            || body.trim().is_empty()
        {
            wrong.push(format!("{what}: {status}, wanted {want}: {text:.300}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    let st = status(&sb);
    assert_eq!(
        st["tabs"],
        json!([]),
        "a refused connection's message was read"
    );
    assert_eq!(st["selection"], Value::Null);
    assert_eq!(st["clients"], json!([]));
    // Header names in any case, with the right token: upgraded, with the subprotocol.
    for name in [
        "x-claude-code-ide-authorization",
        "X-CLAUDE-CODE-IDE-AUTHORIZATION",
        "x-ClAuDe-CoDe-IdE-aUtHoRiZaTiOn",
    ] {
        let head = upgrade_head(port, &format!("{name}: {}\r\n", srv.token))
            .replace("Sec-WebSocket-Protocol", "sec-websocket-protocol")
            .replace("Upgrade: websocket", "UPGRADE: WebSocket");
        let (s, status, text) = send_head(port, head.as_bytes());
        assert_eq!(status, 101, "{name}: {text}");
        assert!(text.contains("Sec-WebSocket-Protocol: mcp"), "{text}");
        let mut c = Conn::over(s, true);
        assert_eq!(c.request(json!(2), "ping", json!({}))["result"], json!({}));
    }
    assert_alive(&mut srv);
}

#[test]
fn the_token_appears_in_no_log_line_at_any_level() {
    let sb = Sandbox::new();
    let file = sb.write("app.py", "print(1)\nprint(2)\n");
    let mut srv = sb.serve(&[
        "--log-level",
        "debug",
        "--ping-interval",
        "0.3",
        "--ping-timeout",
        "1",
    ]);
    let token = srv.token.clone();
    let port = srv.port;
    // Refusals, some carrying most of the token.
    for (_, head, _) in refused_heads(port, &token) {
        http_all(port, head.as_bytes());
    }
    // A client doing everything.
    let mut c = Conn::open(port, &token, true);
    c.handshake();
    c.send(&json!({"jsonrpc": "2.0", "method": "ide_connected", "params": {"pid": 4242}}));
    let mut n = 10;
    for (tool, args) in [
        (
            "openFile",
            json!({"filePath": "app.py", "startText": "print(2)"}),
        ),
        ("openFile", json!({"filePath": "../escape.txt"})),
        ("getOpenEditors", json!({})),
        ("getDiagnostics", json!({})),
        ("readFile", json!({"path": "app.py"})),
        ("writeFile", json!({"path": "new.py", "content": "x\n"})),
        ("listFiles", json!({})),
        ("checkDocumentDirty", json!({"filePath": "app.py"})),
        ("saveDocument", json!({"filePath": "app.py"})),
        ("executeCode", json!({"code": "1"})),
        ("reformat_file", json!({"file_path": "app.py"})),
        ("noSuchTool", json!({})),
        ("openFile", json!({"filePath": 5})),
    ] {
        n += 1;
        c.call(json!(n), tool, args);
    }
    c.request(json!("m"), "no/such/method", json!({}));
    c.text("{not json");
    let tab = "✻ [Claude Code] app.py (abc) ⧉";
    for accept in [true, false] {
        n += 1;
        c.send(&json!({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {"name": "openDiff", "arguments": {"old_file_path": s(&file), "new_file_path": s(&file), "new_file_contents": "print(3)\n", "tab_name": tab}}}));
        wait_for("a pending diff", DEADLINE, || {
            (control(&sb, json!({"cmd": "diff.list"}))["diffs"]
                .as_array()?
                .len()
                == 1)
                .then_some(())
        });
        let verb = if accept { "accept" } else { "reject" };
        assert!(sb.run(&["diff", verb]).status.success());
        c.response(&json!(n), DEADLINE);
    }
    for args in [
        &["select", "app.py:1"][..],
        &["mention", "app.py:1-2"],
        &["open", "app.py"],
        &["status"],
        &["status", "--json"],
        &["diagnostics"],
        &["close", "app.py"],
        &["select", "../escape.txt"],
    ] {
        sb.run(args);
    }
    sb.run_stdin(&["buffer", "app.py"], b"print(9)\n");
    sb.run_stdin(
        &["diagnostics", "import", "--format", "compiler"],
        b"app.py:1:1: error: boom\n",
    );
    // A client dropped by keepalive, one that closes, one that vanishes; then shutdown.
    let mut silent = Conn::open(port, &token, false);
    assert_eq!(silent.ended(DEADLINE), Some(1001));
    let closing = Conn::open(port, &token, true);
    closing
        .write(&frame(FIN | CLOSE, &close_payload(1000, b"bye")))
        .unwrap();
    drop(Conn::open(port, &token, true));
    let bad = Conn::open(port, &token, true);
    let _ = bad.write(&frame(FIN | TEXT, &[0xff]));
    // The server has logged the end of those four, whose lines are checked too.
    wait_for("four disconnects in the log", DEADLINE, || {
        (srv.log().matches(" disconnected (").count() >= 4).then_some(())
    });
    drop(c);
    assert_eq!(srv.stop_with("TERM"), Some(0));
    let log = std::fs::read_to_string(&srv.stderr_path).unwrap();
    assert!(log.contains("debug:"), "the log runs at debug level: {log}");
    assert!(!log.contains(&token), "the token is in the log");
    // Nor any 16-character piece of it (a refused token that is almost right, say).
    let pieces: Vec<&str> = (0..token.len() - 16).map(|i| &token[i..i + 16]).collect();
    for line in log.lines() {
        if let Some(p) = pieces.iter().find(|p| line.contains(**p)) {
            panic!("a piece of the token ({p}) is in the log line: {line}");
        }
    }
}

#[test]
fn a_head_just_above_16_kib_is_answered_431() {
    let sb = Sandbox::new();
    let srv = sb.serve(&[]);
    let ok_head = upgrade_head(srv.port, &auth(&srv.token));
    let mut wrong = Vec::new();
    for extra in [1usize, 1024, 3000, 4000] {
        let pad = (16 << 10) + extra - ok_head.len();
        let head = ok_head.replace(
            "\r\n\r\n",
            &format!("\r\nX-Pad: {}\r\n\r\n", "p".repeat(pad - 9)),
        );
        assert!(head.len() > 16 << 10);
        let (_, status, _) = send_head(srv.port, head.as_bytes());
        if status != 431 {
            wrong.push(format!("a head of {} bytes: {status}", head.len()));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
