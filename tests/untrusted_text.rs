//! Text from outside (names, methods, tool names and close reasons a client sends; code it asks
//! to run) never forges a log record, and reaches a terminal with its control characters made
//! visible, never run.

use crate::util::*;
use serde_json::json;

/// Neither ESC, CR nor BEL: nothing that could drive a terminal.
fn assert_no_raw_controls(what: &str, bytes: &[u8]) {
    assert!(
        !bytes.iter().any(|b| matches!(b, 0x1b | b'\r' | 0x07)),
        "raw control characters in {what}: {:?}",
        String::from_utf8_lossy(bytes)
    );
}

// ---------------------------------------------------------------------------------------------
// A client cannot forge log records.

const FORGED: &str = "x\n<3>forged\ry\u{1b}[2J";
const FORGED_SHOWN: &str = "x\\n<3>forged\\ry\\u{1b}[2J";

/// A client whose name, version, method, tool and close reason all carry `FORGED`.
fn forge(srv: &Server) {
    let mut c = srv.connect();
    let r = c.request(
        "initialize",
        json!({"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":FORGED,"version":FORGED}}),
    );
    assert_eq!(r["result"]["serverInfo"]["name"], "Claude Code ccide MCP");
    c.send(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    c.send(&json!({"jsonrpc":"2.0","method":"ide_connected","params":{"pid": 4242}}));
    assert_eq!(c.request(FORGED, json!({}))["error"]["code"], -32601);
    assert_eq!(c.call(FORGED, json!({}))["error"]["code"], -32602);
    c.ws.close(Some(tungstenite::protocol::CloseFrame {
        code: tungstenite::protocol::frame::coding::CloseCode::Normal,
        reason: FORGED.into(),
    }))
    .unwrap();
    let _ = c.closed();
}

fn assert_log_unforged(log: &str, journal: bool) {
    assert_no_raw_controls("the log", log.as_bytes());
    for l in log.lines() {
        assert!(!l.starts_with("<3>forged"), "a forged record: {log}");
        if journal {
            let b = l.as_bytes();
            assert!(
                b.len() > 3 && b[0] == b'<' && b[1].is_ascii_digit() && b[2] == b'>',
                "not a journald record: {l:?}\n{log}"
            );
        } else {
            assert!(l.contains(" ccide "), "not a ccide record: {l:?}\n{log}");
        }
    }
    for (what, needle) in [
        (
            "name and version",
            format!("connected: {FORGED_SHOWN} {FORGED_SHOWN} (pid 4242)"),
        ),
        ("method", format!(" {FORGED_SHOWN} 1 took ")),
        ("tool", format!(" tools/call {FORGED_SHOWN} 2 took ")),
        ("tool error", format!("Unknown tool: {FORGED_SHOWN}")),
        ("close reason", format!("code 1000: {FORGED_SHOWN})")),
    ] {
        let lines: Vec<&str> = log.lines().filter(|l| l.contains(&needle)).collect();
        assert_eq!(lines.len(), 1, "{what}: {needle:?} on one line in\n{log}");
        if journal {
            assert!(
                lines[0].starts_with("<6>") || lines[0].starts_with("<7>"),
                "{what}: {}",
                lines[0]
            );
        }
    }
}

#[test]
fn names_methods_tools_and_close_reasons_cannot_forge_log_records() {
    for journal in [false, true] {
        let sb = Sandbox::new();
        let mut cmd = sb.serve_command(&["--log-level", "debug"]);
        if journal {
            cmd.env("JOURNAL_STREAM", "8:12345");
        }
        let srv = Server::spawn(&mut cmd, &sb.config());
        forge(&srv);
        let log = wait_for("the disconnect in the log", DEADLINE, || {
            let log = srv.log();
            log.contains(&format!("code 1000: {FORGED_SHOWN})"))
                .then_some(log)
        });
        assert_log_unforged(&log, journal);
    }
}

// ---------------------------------------------------------------------------------------------
// What reaches a terminal shows control characters, never runs them.

#[test]
fn status_shows_client_and_ide_names_with_control_characters_visible() {
    let sb = Sandbox::new();
    let srv = sb.serve(&[]);
    let evil = "\u{1b}[2Jevil\rname";
    let mut c = srv.connect();
    c.request(
        "initialize",
        json!({"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":evil,"version":"1\u{7}"}}),
    );
    c.send(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    c.request("tools/list", json!({}));
    srv.wait_ready();
    let o = sb.run_ok(&["status"]);
    assert_no_raw_controls("status", &o.stdout);
    assert!(
        stdout(&o).contains("\\u{1b}[2Jevil\\rname 1\\u{7} pid unknown for "),
        "{}",
        stdout(&o)
    );

    // Another IDE's lock file, live (this test's pid), with control characters in its names.
    let foreign = json!({"pid": std::process::id(), "workspaceFolders": ["/w\u{1b}]0;x\u{7}s"],
        "ideName": "\u{1b}]0;pwned\u{7}IDE\r\n", "transport": "ws", "runningInWindows": false,
        "authToken": "t"});
    std::fs::write(sb.config().join("ide/7.lock"), foreign.to_string()).unwrap();
    let o = sb.run_ok(&["status", "--all"]);
    assert_no_raw_controls("status --all", &o.stdout);
    let out = stdout(&o);
    assert!(
        out.contains("7      live  other  \\u{1b}]0;pwned\\u{7}IDE\\r\\n (/w\\u{1b}]0;x\\u{7}s)\n"),
        "{out}"
    );
    assert_eq!(out.lines().count(), 2, "one line per lock file: {out}");
}

#[test]
fn exec_lists_code_with_a_lone_cr_and_escape_sequences_made_visible() {
    // Nothing is approved: no Python runs.
    let sb = Sandbox::new();
    let srv = sb.serve(&["--exec", "ask"]);
    let mut c = srv.client();
    let code = "print('safe')\rimport os; os.remove('x')  # \u{1b}[2K\nprint(2) # \u{202e}txet\n";
    let _id = c.send_request(
        "tools/call",
        json!({"name": "executeCode", "arguments": {"code": code}}),
    );
    let waiting = sb.wait_for_listing(&["exec", "--json"], 1);
    assert_eq!(waiting[0]["code"], code);
    let o = sb.run_ok(&["exec"]);
    assert_no_raw_controls("exec", &o.stdout);
    assert_eq!(
        stdout(&o),
        format!(
            "request {} from client {}:\n    print('safe')\\rimport os; os.remove('x')  # \\u{{1b}}[2K\n    print(2) # \\u{{202e}}txet\n\nrun it with `ccide exec approve ID`, refuse it with `ccide exec deny ID`\n",
            waiting[0]["id"].as_str().unwrap(),
            waiting[0]["client"]
        )
    );
}
