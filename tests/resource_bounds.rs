//! Hardening II: text from outside never forges a log record or reaches a terminal
//! raw; nothing above the CLI's 16 MiB is sent; threads, memory and children stay bounded
//! whatever a client or a checker does; one server per state directory, whose lock file comes
//! back when deleted; commands say when a change cannot be saved; imports keep what they can;
//! gc removes only what is proven dead. Each test would have failed before the fix.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::util::*;
use serde_json::{Value, json};

const MIB: usize = 1 << 20;

/// A field of `/proc/PID/status` in its unit (kB for memory, a count for Threads).
fn proc_status(pid: u32, field: &str) -> usize {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{field}:")))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

fn threads(pid: u32) -> usize {
    proc_status(pid, "Threads")
}

/// The server's peak resident memory so far, in MiB (VmHWM: no sample can miss the peak).
fn peak_rss_mib(pid: u32) -> usize {
    proc_status(pid, "VmHWM") / 1024
}

/// Samples the server's thread count every few milliseconds until stopped; the highest seen.
struct ThreadWatch {
    stop: Arc<AtomicBool>,
    max: Arc<AtomicUsize>,
    handle: std::thread::JoinHandle<()>,
}

impl ThreadWatch {
    fn start(pid: u32) -> ThreadWatch {
        let stop = Arc::new(AtomicBool::new(false));
        let max = Arc::new(AtomicUsize::new(threads(pid)));
        let (s, m) = (stop.clone(), max.clone());
        let handle = std::thread::spawn(move || {
            while !s.load(Ordering::SeqCst) {
                m.fetch_max(threads(pid), Ordering::SeqCst);
                std::thread::sleep(Duration::from_millis(2));
            }
        });
        ThreadWatch { stop, max, handle }
    }

    fn max(self) -> usize {
        self.stop.store(true, Ordering::SeqCst);
        self.handle.join().unwrap();
        self.max.load(Ordering::SeqCst)
    }
}

/// Reads until every id in `ids` has its response, taking batch arrays apart; by id.
fn responses(c: &mut Client, ids: &[Value]) -> BTreeMap<String, Value> {
    let mut got = BTreeMap::new();
    while got.len() < ids.len() {
        let v = c.recv();
        let items = match v {
            Value::Array(items) => items,
            v => vec![v],
        };
        for v in items {
            if v.get("method").is_none() && ids.contains(&v["id"]) {
                got.insert(v["id"].to_string(), v);
            }
        }
    }
    got
}

/// Neither ESC, CR nor BEL: nothing that could drive a terminal.
fn assert_no_raw_controls(what: &str, bytes: &[u8]) {
    assert!(
        !bytes.iter().any(|b| matches!(b, 0x1b | b'\r' | 0x07)),
        "raw control characters in {what}: {:?}",
        String::from_utf8_lossy(bytes)
    );
}

/// Waits for a pid written by a script (`echo $$ > FILE`).
fn pid_in(file: &Path) -> u64 {
    wait_for(&format!("a pid in {}", file.display()), DEADLINE, || {
        std::fs::read_to_string(file).ok()?.trim().parse().ok()
    })
}

fn wait_gone(what: &str, pid: u64) {
    wait_for(&format!("{what} (pid {pid}) to end"), DEADLINE, || {
        (!process_alive(pid)).then_some(())
    });
}

// ---------------------------------------------------------------------------------------------
// 12.1 A client cannot forge log records.

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
// 12.2, 12.3 What reaches a terminal shows control characters, never runs them.

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

// ---------------------------------------------------------------------------------------------
// 12.4, 12.5 Nothing above 16 MiB goes to a client.

#[test]
fn accepting_a_proposal_too_big_to_send_keeps_the_diff_pending() {
    let sb = Sandbox::new();
    let file = sb.write("big.txt", "small\n");
    let srv = sb.serve(&[]);
    let mut c = srv.ready_client();
    let proposal = format!("{}\n", "x".repeat(63)).repeat(20 * MIB / 64);
    let id = c.send_request(
        "tools/call",
        json!({"name":"openDiff","arguments":{"old_file_path":s(&file),"new_file_path":s(&file),"new_file_contents":proposal,"tab_name":"big"}}),
    );
    let d = sb.wait_for_listing(&["diff", "--json"], 1)[0].clone();
    let did = d["id"].as_str().unwrap();
    let o = sb.run(&["diff", "accept", did]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(
        stderr(&o).contains(&format!(
            "cannot accept diff {did}: the answer carrying the file is "
        )) && stderr(&o).contains(
            "above the 16 MiB Claude Code accepts in one message; the diff stays pending"
        ),
        "{}",
        stderr(&o)
    );
    assert_eq!(c.before_ping(), Vec::<Value>::new(), "no answer was sent");
    assert_eq!(
        sb.wait_for_listing(&["diff", "--json"], 1)[0]["id"],
        d["id"]
    );
    sb.run_ok(&["diff", "reject", did]);
    assert_eq!(texts(&c.response(&id)), vec!["DIFF_REJECTED", "big"]);
}

#[test]
fn answers_above_16_mib_become_errors_and_the_connection_lives_on() {
    let sb = Sandbox::new();
    // 12 MiB of quotes: 24 MiB once JSON escapes them.
    sb.write("quotes.txt", "\"".repeat(12 * MIB));
    // No keepalive ping while the test client waits for the import without reading.
    let srv = sb.serve(&["--no-default-checkers", "--ping-interval", "3600"]);
    let mut c = srv.ready_client();
    let r = c.call("readFile", json!({"path": "quotes.txt"}));
    assert!(
        is_error(&r),
        "{}",
        &r.to_string()[..200.min(r.to_string().len())]
    );
    assert!(
        texts(&r)[0].contains("above the 16 MiB Claude Code accepts in one message"),
        "{r}"
    );
    assert_eq!(c.request("ping", json!({}))["result"], json!({}));
    let r = c.request("readFile", json!({"path": "quotes.txt"}));
    assert_eq!(r["error"]["code"], -32603, "the direct method too");
    assert_eq!(c.request("ping", json!({}))["result"], json!({}));

    // Diagnostics whose answer would be about 20 MiB (a file holds at most 1000 from one
    // source: long ones).
    let target = sb.write("gen.c", "int x;\n");
    let message = "m".repeat(20_000);
    let mut text = String::new();
    for i in 1..=1000 {
        text.push_str(&format!(
            "{}:{i}:1: error: {message} {i}\n",
            target.display()
        ));
    }
    let o = sb.run_stdin(&["diagnostics", "import", "-"], text.as_bytes());
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stderr(&o), "imported 1000 diagnostic(s) for 1 file(s)\n");
    let r = c.call("getDiagnostics", json!({}));
    assert!(
        is_error(&r),
        "{}",
        &r.to_string()[..200.min(r.to_string().len())]
    );
    assert!(
        texts(&r)[0].contains("above the 16 MiB Claude Code accepts in one message"),
        "{r}"
    );
    assert!(r.to_string().len() < 4096);
    assert_eq!(c.request("ping", json!({}))["result"], json!({}));
    // The file's change was too big to broadcast: the server said so instead of sending it.
    assert!(
        srv.log().contains("not sending diagnostics_changed"),
        "{}",
        srv.log()
    );
}

// ---------------------------------------------------------------------------------------------
// 12.6, 12.7 Threads and memory per client stay bounded.

#[test]
fn a_batch_of_1500_requests_costs_no_threads_and_slow_calls_are_capped_at_16_threads() {
    let sb = Sandbox::new();
    // Long enough that no slow call ends while the batch is still being read.
    let slow = sb.script("slow-check.sh", "sleep 5");
    let spec = format!("*.py={} {{file}}", slow.display());
    let file = sb.write("slow.py", "x = 1\n");
    let srv = sb.serve(&[
        "--no-default-checkers",
        "--no-default-lsp",
        "--checker",
        &spec,
        "--diagnostics-wait",
        "20",
    ]);
    let pid = srv.pid();
    let mut c = srv.client();
    let base = threads(pid);

    let ids: Vec<Value> = (0..1500).map(|i| json!(format!("list-{i}"))).collect();
    let batch: Vec<Value> = ids
        .iter()
        .map(|id| json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"}))
        .collect();
    let watch = ThreadWatch::start(pid);
    c.send(&Value::Array(batch));
    let got = responses(&mut c, &ids);
    assert_eq!(got.len(), 1500);
    assert!(
        got.values()
            .all(|r| r["result"]["tools"].is_array() || r["error"]["code"] == -32603),
        "every request answered"
    );
    let max = watch.max();
    assert!(max < 40, "{max} threads during the batch (base {base})");
    assert!(threads(pid) < 40);

    // A check that takes 5 s, then 100 calls that would each wait for it.
    let r = c.call("getDiagnostics", json!({"uri": uri(&file)}));
    assert!(!is_error(&r), "{r}");
    let before = threads(pid);
    let ids: Vec<Value> = (0..100).map(|i| json!(format!("diag-{i}"))).collect();
    let batch: Vec<Value> = ids
        .iter()
        .map(|id| json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "getDiagnostics", "arguments": {}}}))
        .collect();
    let watch = ThreadWatch::start(pid);
    c.send(&Value::Array(batch));
    let got = responses(&mut c, &ids);
    let max = watch.max();
    let refused: Vec<&Value> = got.values().filter(|r| is_error(r)).collect();
    assert_eq!(refused.len(), 84, "16 run, the others are refused");
    for r in &refused {
        assert_eq!(
            texts(r),
            vec![
                "16 slow calls of this client are still running; wait for their answers and try again"
            ]
        );
    }
    assert!(
        max <= before + 16 + 1,
        "{max} threads with 100 slow calls (before them {before}, at the start {base})"
    );
    assert_eq!(c.request("ping", json!({}))["result"], json!({}));
}

#[test]
fn a_client_that_stops_reading_costs_bounded_memory_and_is_disconnected() {
    let sb = Sandbox::new();
    sb.write("mib.txt", format!("{}\n", "y".repeat(1023)).repeat(1024));
    let srv = sb.serve(&["--ping-interval", "1", "--ping-timeout", "1"]);
    let pid = srv.pid();
    let mut other = srv.client();
    // Blocking writes: a frame is never cut, and the write fails once the server shuts the
    // connection (the server dropped with the test ends it otherwise).
    let mut deaf = raw_client(srv.port, &srv.token);
    // Requests until the server shuts the connection (or the test ends): it must stop taking
    // them while its answers pile up, and the socket's buffers then fill.
    let stop = Arc::new(AtomicBool::new(false));
    let stopped = stop.clone();
    let writer = std::thread::spawn(move || {
        let mut sent = 0u64;
        while !stopped.load(Ordering::SeqCst) {
            let req = json!({"jsonrpc": "2.0", "id": sent, "method": "readFile", "params": {"path": "mib.txt"}});
            if deaf
                .write_all(&client_text_frame(req.to_string().as_bytes()))
                .is_err()
            {
                break;
            }
            sent += 1;
        }
        (sent, deaf)
    });
    // The deaf client is #2; the other one keeps answering its keepalive pings meanwhile.
    let started = Instant::now();
    while !srv.log().contains("client #2 disconnected") {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the client that stopped reading is still connected: {}",
            srv.log()
        );
        other.drain(Duration::from_millis(100));
    }
    stop.store(true, Ordering::SeqCst);
    let (sent, _deaf) = writer.join().unwrap();
    assert!(
        srv.log().contains(
            "client #2 disconnected (pid unknown, code 1001: no answer to ping within 1 s)"
        ),
        "{}",
        srv.log()
    );
    let peak = peak_rss_mib(pid);
    assert!(
        peak < 200,
        "the server's memory peaked at {peak} MiB ({sent} requests of 1 MiB answers)"
    );
    assert_eq!(other.request("ping", json!({}))["result"], json!({}));
    assert!(
        !srv.log().contains("client #1 disconnected"),
        "{}",
        srv.log()
    );
}

// ---------------------------------------------------------------------------------------------
// 12.8, 12.9 Checkers that print too much or leave children behind.

fn serve_checker(sb: &Sandbox, script: &Path, extra: &[&str]) -> Server {
    let spec = format!("*.txt=compiler:{} {{file}}", script.display());
    let mut args = vec![
        "--no-default-checkers",
        "--no-default-lsp",
        "--checker",
        &spec,
    ];
    args.extend_from_slice(extra);
    sb.serve(&args)
}

#[test]
fn a_checker_printing_100_mb_costs_little_memory_and_its_first_diagnostic_is_kept() {
    let sb = Sandbox::new();
    let script = sb.script(
        "loud-check.sh",
        r#"echo "$1:1:3: error: kept"; head -c 100000000 /dev/zero | tr '\0' x"#,
    );
    let file = sb.write("a.txt", "text\n");
    let srv = serve_checker(&sb, &script, &[]);
    let mut c = srv.ready_client();
    let want = json!([{"uri": uri(&file), "diagnostics": [{
        "message": "kept", "severity": "Error", "source": "loud-check.sh",
        "range": {"start": {"line": 0, "character": 2}, "end": {"line": 0, "character": 2}},
    }]}]);
    diagnostics(&mut c, json!({"uri": uri(&file)}));
    assert_eq!(c.notification("diagnostics_changed")["params"], want[0]);
    assert_eq!(diagnostics(&mut c, json!({"uri": uri(&file)})), want);
    let peak = peak_rss_mib(srv.pid());
    assert!(peak < 100, "the server's memory peaked at {peak} MiB");
    assert!(
        srv.log().contains(&format!(
            "checker loud-check.sh for {} printed more than 8 MiB; only the diagnostics in the first 8 MiB of each stream are kept",
            file.display()
        )),
        "{}",
        srv.log()
    );
}

#[test]
fn a_checker_leaving_a_background_child_answers_at_once_and_the_child_is_killed() {
    let sb = Sandbox::new();
    let pidfile = sb.root.join("sleep.pid");
    let script = sb.script(
        "bg-check.sh",
        &format!(
            "echo \"$1:1:1: error: x\"\nsleep 60 &\necho $! > '{}'",
            pidfile.display()
        ),
    );
    let file = sb.write("a.txt", "text\n");
    let srv = serve_checker(
        &sb,
        &script,
        &["--checker-timeout", "30", "--diagnostics-wait", "20"],
    );
    let mut c = srv.client();
    let started = Instant::now();
    diagnostics(&mut c, json!({"uri": uri(&file)}));
    let all = diagnostics(&mut c, json!({}));
    let took = started.elapsed();
    assert_eq!(all[0]["uri"], uri(&file), "{all}");
    assert_eq!(all[0]["diagnostics"][0]["message"], "x", "{all}");
    assert!(took < Duration::from_secs(10), "answered after {took:?}");
    wait_gone("the checker's background sleep", pid_in(&pidfile));
}

// ---------------------------------------------------------------------------------------------
// 12.10 Nothing the server started outlives it.

#[test]
fn no_checker_formatter_or_kernel_outlives_serve_stopped_with_sigterm() {
    python3();
    let sb = Sandbox::new();
    let checker_pid = sb.root.join("checker.pid");
    let formatter_pid = sb.root.join("formatter.pid");
    let checker = sb.script(
        "hang-check.sh",
        &format!("echo $$ > '{}'\nexec sleep 60", checker_pid.display()),
    );
    let formatter = sb.script(
        "hang-format.sh",
        &format!("echo $$ > '{}'\nexec sleep 60", formatter_pid.display()),
    );
    let txt = sb.write("a.txt", "text\n");
    let fmt = sb.write("b.fmt", "text\n");
    let fspec = format!("*.fmt={} {{file}}", formatter.display());
    let mut srv = serve_checker(&sb, &checker, &["--formatter", &fspec, "--exec", "on"]);
    let mut c = srv.client();
    diagnostics(&mut c, json!({"uri": uri(&txt)}));
    let _format = c.send_request(
        "tools/call",
        json!({"name": "reformat_file", "arguments": {"file_path": s(&fmt)}}),
    );
    let r = c.call(
        "executeCode",
        json!({"code": "import os, time\nprint(os.getpid())"}),
    );
    let kernel: u64 = texts(&r)[0]
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{r}"));
    let pids = [
        ("the checker", pid_in(&checker_pid)),
        ("the formatter", pid_in(&formatter_pid)),
        ("the Python kernel", kernel),
    ];
    for (what, pid) in pids {
        assert!(process_alive(pid), "{what} runs before the stop");
    }
    assert_eq!(srv.stop_with("TERM"), Some(0));
    for (what, pid) in pids {
        wait_gone(what, pid);
    }
}

// ---------------------------------------------------------------------------------------------
// 12.11 - 12.13 One server per state directory, its lock file, long paths.

/// Runs a `serve` that must refuse to start; its exit code and standard error.
fn refused(mut cmd: Command) -> (Option<i32>, String) {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let end = Instant::now() + DEADLINE;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > end {
            let _ = child.kill();
            let _ = child.wait();
            panic!("ccide serve started although it had to refuse");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let o = child.wait_with_output().unwrap();
    (o.status.code(), stderr(&o))
}

#[test]
fn a_second_server_on_the_same_state_directory_is_refused_even_without_its_socket() {
    let sb = Sandbox::new();
    let srv = sb.serve(&[]);
    std::fs::remove_file(sb.state().join("control.sock")).unwrap();
    let (code, err) = refused(sb.serve_command(&[]));
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "another ccide serve (pid {}) already runs with the state directory {}",
            srv.pid(),
            sb.state().display()
        )) && err.contains("use it (`claude --ide` in the folder connects to it; `ccide status` there shows it), or stop it before starting a new one"),
        "{err}"
    );
    assert_eq!(
        list_locks(&sb.config().join("ide")),
        vec![srv.lock_path.clone()]
    );
}

/// Servers started by a test itself, stopped (SIGTERM, then SIGKILL) however the test ends.
struct Servers(Vec<std::process::Child>);

impl Drop for Servers {
    fn drop(&mut self) {
        for c in &mut self.0 {
            if let Ok(None) = c.try_wait() {
                let _ = Command::new("kill").arg(c.id().to_string()).status();
                let end = Instant::now() + Duration::from_secs(5);
                while matches!(c.try_wait(), Ok(None)) && Instant::now() < end {
                    std::thread::sleep(Duration::from_millis(10));
                }
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

#[test]
fn of_five_servers_started_at_once_on_one_state_directory_exactly_one_stays() {
    let sb = Sandbox::new();
    let mut servers = Servers(
        (0..5)
            .map(|i| {
                let log = std::fs::File::create(sb.root.join(format!("race-{i}.log"))).unwrap();
                sb.serve_command(&[])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(log)
                    .spawn()
                    .unwrap()
            })
            .collect(),
    );
    let ide = sb.config().join("ide");
    let exited = wait_for("four of the five to give up", DEADLINE, || {
        let done: Vec<(usize, i32)> = servers
            .0
            .iter_mut()
            .enumerate()
            .filter_map(|(i, c)| Some((i, c.try_wait().unwrap()?.code().unwrap_or(-1))))
            .collect();
        (done.len() >= 4).then_some(done)
    });
    assert_eq!(exited.len(), 4, "one stays up: {exited:?}");
    let winner = (0..5)
        .find(|i| !exited.iter().any(|(j, _)| j == i))
        .unwrap();
    let locks = wait_for("the winner's lock file", DEADLINE, || {
        let l = list_locks(&ide);
        (!l.is_empty()).then_some(l)
    });
    assert_eq!(locks.len(), 1, "{locks:?}");
    let lock: Value = serde_json::from_slice(&std::fs::read(&locks[0]).unwrap()).unwrap();
    assert_eq!(lock["pid"], json!(servers.0[winner].id()));
    // A loser that reads serve.lock between the winner's flock and its pid being written
    // reads again until the pid is there: every loser names the winner.
    let state = sb.state();
    let named = format!(
        "another ccide serve (pid {}) already runs with the state directory {}",
        servers.0[winner].id(),
        state.display()
    );
    for (i, code) in &exited {
        let log = std::fs::read_to_string(sb.root.join(format!("race-{i}.log"))).unwrap();
        assert_eq!(*code, 1, "{log}");
        assert!(log.contains(&named), "{log}");
    }
    assert!(
        servers.0[winner].try_wait().unwrap().is_none(),
        "the winner runs"
    );
    assert_eq!(list_locks(&ide).len(), 1);
}

#[test]
fn a_deleted_lock_file_is_written_again_with_the_same_port_and_token() {
    let sb = Sandbox::new();
    let srv = sb.serve(&[]);
    std::fs::remove_file(&srv.lock_path).unwrap();
    let lock: Value = wait_for("the lock file to come back", DEADLINE, || {
        serde_json::from_slice(&std::fs::read(&srv.lock_path).ok()?).ok()
    });
    assert_eq!(lock["authToken"], srv.token.as_str());
    assert_eq!(lock["pid"], json!(srv.pid()));
    assert_eq!(
        list_locks(&sb.config().join("ide")),
        vec![srv.lock_path.clone()]
    );
    assert!(
        srv.log().contains(&format!(
            "the lock file {} was deleted while this server runs; wrote it again (same port and token)",
            srv.lock_path.display()
        )),
        "{}",
        srv.log()
    );
    let mut c = srv.client();
    assert_eq!(c.request("ping", json!({}))["result"], json!({}));
}

#[test]
fn a_state_directory_too_long_for_a_socket_address_still_serves_the_commands() {
    let sb = Sandbox::new();
    let state = sb
        .root
        .join(format!("{}/{}", "s".repeat(60), "t".repeat(60)));
    assert!(s(&state.join("control.sock")).len() > 107);
    let ws = sb.ws();
    let mut cmd = sb.command(&["serve", "--workspace", s(&ws), "--state-dir", s(&state)]);
    let srv = Server::spawn(&mut cmd, &sb.config());
    let o = sb.run_ok(&["status"]);
    assert!(
        stdout(&o).contains(&format!("(pid {}) on 127.0.0.1:{}", srv.pid(), srv.port)),
        "{}",
        stdout(&o)
    );
    assert!(
        stdout(&o).contains(&format!("state    {}\n", state.display())),
        "{}",
        stdout(&o)
    );
    sb.write("a.txt", "one\n");
    sb.run_ok(&["open", "a.txt"]);
}

// ---------------------------------------------------------------------------------------------
// 12.14 A change that cannot be saved is reported.

#[test]
fn a_command_whose_change_cannot_be_saved_fails_and_says_so() {
    let sb = Sandbox::new();
    sb.write("a.txt", "one\n");
    let srv = sb.serve(&[]);
    let editor = sb.state().join("editor.json");
    let _ = std::fs::remove_file(&editor);
    std::fs::create_dir(&editor).unwrap();
    std::fs::write(editor.join("in-the-way"), "x").unwrap();
    let o = sb.run_stdin(&["buffer", "a.txt"], b"unsaved\n");
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!(
            "done, but not saved: cannot save the editor state to {}",
            editor.display()
        )) && stderr(&o).contains("the change is lost when the server restarts"),
        "{}",
        stderr(&o)
    );
    std::fs::remove_dir_all(&editor).unwrap();
    let o = sb.run_stdin(&["buffer", "a.txt"], b"unsaved again\n");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let saved: Value = serde_json::from_slice(&std::fs::read(&editor).unwrap()).unwrap();
    assert_eq!(
        saved["documents"][s(&sb.ws().join("a.txt"))],
        "unsaved again\n"
    );
    drop(srv);
}

// ---------------------------------------------------------------------------------------------
// 12.15 Imports keep what they can.

/// The stored diagnostics, by file: (line, message) pairs.
fn stored(sb: &Sandbox) -> BTreeMap<String, Vec<(u64, String)>> {
    let o = sb.run_ok(&["diagnostics", "--json"]);
    let files: Vec<Value> = serde_json::from_slice(&o.stdout).unwrap();
    files
        .iter()
        .map(|f| {
            (
                f["uri"].as_str().unwrap().to_string(),
                f["diagnostics"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|d| {
                        (
                            d["range"]["start"]["line"].as_u64().unwrap(),
                            d["message"].as_str().unwrap().to_string(),
                        )
                    })
                    .collect(),
            )
        })
        .collect()
}

#[test]
fn imports_follow_symlinks_into_the_workspace_and_survive_stray_bytes() {
    let sb = Sandbox::new();
    let a = sb.write("a.c", "int a;\n");
    let b = sb.write("b.c", "int b;\n");
    let link = sb.root.join("checkout");
    std::os::unix::fs::symlink(sb.ws(), &link).unwrap();
    let srv = sb.serve(&["--no-default-checkers"]);

    let through = format!("{}/a.c:1:5: error: through a link\n", link.display());
    let o = sb.run_stdin(&["diagnostics", "import", "-"], through.as_bytes());
    assert_eq!(
        (o.status.code(), stderr(&o)),
        (
            Some(0),
            "imported 1 diagnostic(s) for 1 file(s)\n".to_string()
        )
    );

    // gcc echoing a Latin-1 source line: one byte that is not UTF-8.
    let mut latin1 = format!("{}:2:1: error: stray '", b.display()).into_bytes();
    latin1.extend_from_slice(b"\xe9' in program\n");
    latin1.extend_from_slice(format!("{}:3:1: warning: still read\n", b.display()).as_bytes());
    let o = sb.run_stdin(&["diagnostics", "import", "-"], &latin1);
    assert_eq!(
        (o.status.code(), stderr(&o)),
        (
            Some(0),
            "imported 2 diagnostic(s) for 1 file(s)\n".to_string()
        )
    );
    let got = stored(&sb);
    assert_eq!(got[&uri(&a)], vec![(0, "through a link".to_string())]);
    assert_eq!(
        got[&uri(&b)],
        vec![
            (1, "stray '\u{fffd}' in program".to_string()),
            (2, "still read".to_string())
        ]
    );
    drop(srv);
}

#[test]
fn dropped_files_not_utf8_are_imported_and_unreadable_ones_kept_as_rejected() {
    let sb = Sandbox::new();
    let c_file = sb.write("c.c", "int c;\n");
    let srv = sb.serve(&["--no-default-checkers"]);
    let drop_dir = sb.state().join("diagnostics");
    // A directory is not a dropped file: left alone.
    std::fs::create_dir(drop_dir.join("dir.txt")).unwrap();
    // Unreadable even for root: the server's own /proc/self/mem fails to read at offset 0.
    let unreadable = drop_dir.join("unreadable.txt");
    std::os::unix::fs::symlink("/proc/self/mem", &unreadable).unwrap();
    let mut latin1 = format!("{}:1:1: error: caf", c_file.display()).into_bytes();
    latin1.extend_from_slice(b"\xe9\n");
    let dropped = drop_dir.join("latin1.txt");
    std::fs::write(drop_dir.join(".latin1.tmp"), &latin1).unwrap();
    std::fs::rename(drop_dir.join(".latin1.tmp"), &dropped).unwrap();

    let rejected = drop_dir.join("unreadable.txt.rejected");
    wait_for("the unreadable file to be set aside", DEADLINE, || {
        std::fs::symlink_metadata(&rejected).ok()
    });
    assert!(std::fs::symlink_metadata(&unreadable).is_err());
    wait_for("the dropped file to be imported", DEADLINE, || {
        stored(&sb).get(&uri(&c_file)).cloned()
    });
    assert_eq!(
        stored(&sb)[&uri(&c_file)],
        vec![(0, "caf\u{fffd}".to_string())]
    );
    wait_for("the imported file to be removed", DEADLINE, || {
        (!dropped.exists()).then_some(())
    });
    assert!(drop_dir.join("dir.txt").is_dir());
    assert!(
        srv.log()
            .contains(&format!("cannot read {}: ", unreadable.display()))
            && srv
                .log()
                .contains(&format!("; kept as {}\n", rejected.display())),
        "{}",
        srv.log()
    );
    // Still there a turn of the watcher later: kept for the user, not retried or deleted.
    std::fs::write(
        drop_dir.join("later.txt"),
        format!("{}:2:1: error: later\n", c_file.display()),
    )
    .unwrap();
    wait_for("a later drop to be imported", DEADLINE, || {
        (!drop_dir.join("later.txt").exists()).then_some(())
    });
    assert!(std::fs::symlink_metadata(&rejected).is_ok());
}

// ---------------------------------------------------------------------------------------------
// 12.16 gc removes only what is proven dead.

#[test]
fn gc_keeps_a_lock_from_another_pid_namespace_and_removes_a_dead_one_of_this_one() {
    use std::os::unix::fs::MetadataExt;
    let sb = Sandbox::new();
    let ide = sb.config().join("ide");
    std::fs::create_dir_all(&ide).unwrap();
    let our_ns = std::fs::metadata("/proc/self/ns/pid").unwrap().ino();
    // Above the default pid_max range: never a live pid here.
    let dead_pid = 4_194_305;
    let lock = |port: u16, ns: u64| -> (PathBuf, PathBuf) {
        let state = sb.root.join(format!("state-{port}"));
        std::fs::create_dir_all(state.join("diffs/1")).unwrap();
        let control = state.join("control.sock");
        std::fs::write(&control, "").unwrap();
        let v = json!({"pid": dead_pid, "workspaceFolders": [sb.ws()], "ideName": format!("ccide {port}"),
            "transport": "ws", "runningInWindows": false, "authToken": "t",
            "ccide": {"control": control, "state": state, "pidns": ns}});
        let path = ide.join(format!("{port}.lock"));
        std::fs::write(&path, v.to_string()).unwrap();
        (path, state)
    };
    let (foreign, foreign_state) = lock(10, our_ns + 1);
    let (dead, dead_state) = lock(11, our_ns);
    let o = sb.run_ok(&["gc"]);
    let out = stdout(&o);
    assert!(
        out.contains(&format!(
            "kept {}: it was written in another pid namespace (a container?), where its server may run\n",
            foreign.display()
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!("removed {}\n", dead.display())),
        "{out}"
    );
    assert!(foreign.exists() && foreign_state.join("control.sock").exists());
    assert!(!dead.exists() && !dead_state.join("control.sock").exists());
    assert!(!dead_state.join("diffs").exists());
}
