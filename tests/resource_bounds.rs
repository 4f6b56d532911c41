//! What a client or a checker costs stays bounded: nothing above the CLI's 16 MiB is sent (an
//! answer too big becomes an error, a proposal too big keeps its diff pending); a batch costs
//! no threads and slow calls are capped at 16 threads; a client that stops reading costs
//! bounded memory and is disconnected; a checker printing 100 MB costs little memory, one
//! leaving a child behind answers at once and the child is killed; nothing the server started
//! outlives it.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use crate::util::*;
use crate::wire::{FIN, TEXT, frame};
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
// Nothing above 16 MiB goes to a client.

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
// Threads and memory per client stay bounded.

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
                .write_all(&frame(FIN | TEXT, req.to_string().as_bytes()))
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
// Checkers that print too much or leave children behind.

#[test]
fn a_checker_printing_100_mb_costs_little_memory_and_its_first_diagnostic_is_kept() {
    let sb = Sandbox::new();
    let script = sb.script(
        "loud-check.sh",
        r#"echo "$1:1:3: error: kept"; head -c 100000000 /dev/zero | tr '\0' x"#,
    );
    let file = sb.write("a.txt", "text\n");
    let srv = sb.serve_checker(&script, &[]);
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
    let srv = sb.serve_checker(
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
// Nothing the server started outlives it.

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
    let mut srv = sb.serve_checker(&checker, &["--formatter", &fspec, "--exec", "on"]);
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
