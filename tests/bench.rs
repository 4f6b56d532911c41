//! The benchmark: runs the binary cargo built for this test run (the release binary with
//! `--release`) and prints one table, with the machine's own loopback floor measured in the
//! same run so that latencies read as ratios. It asserts nothing about time.
//!
//! ```sh
//! cargo test --release --test bench -- --ignored --nocapture
//! ```
//!
//! Every figure is a median over repeated runs; latencies also give p99. `CCIDE_BENCH_ONLY`
//! (comma-separated section names, see `wanted`) runs only some sections.
//!
//! The language-server rows need the servers `.ci/lsp-install DIR` installs, named by
//! `CCIDE_TEST_LSP_DIR=DIR` (never found on PATH); without it they say so. Each language is
//! measured on the project named by `CCIDE_BENCH_TS`, `CCIDE_BENCH_PY` or `CCIDE_BENCH_C` (a
//! directory; the file edited is `$VAR_FILE` relative to it, by default hono's
//! `src/hono-base.ts` and rich's `rich/text.py`; C needs `compile_commands.json` and
//! `CCIDE_BENCH_C_FILE`; `CCIDE_BENCH_TS_TSCONFIG` names tsc's project, by default
//! `tsconfig.build.json` where there is one), else on a small project the benchmark generates.
//! The file edited is restored whatever happens. Progress goes to stderr.

// The integration tests' vocabulary; the benchmark uses part of it.
#[allow(dead_code)]
mod util;

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tungstenite::client::IntoClientRequest;
use tungstenite::protocol::{WebSocket, WebSocketConfig};
use tungstenite::{Message, http};
use util::*;

// The review engine itself, for the linearity row: pure, texts in and text out.
#[allow(dead_code)]
#[path = "../src/json.rs"]
mod json;
#[allow(dead_code)]
#[path = "../src/review.rs"]
mod review;
#[allow(dead_code)]
#[path = "../src/text.rs"]
mod text;
#[allow(dead_code)]
#[path = "../src/textdiff.rs"]
mod textdiff;

/// `serve` flags for every measurement: no keepalive ping during a run, room for 100 clients.
const SERVE: &[&str] = &["--ping-interval", "3600", "--max-connections", "512"];

// ---------------------------------------------------------------------------------------------
// Review after the fact: the plugin's hooks and the store of file images

/// What the review hooks cost and store.
struct Recording {
    /// Per edit of a 1 MiB file: `ccide hook pre-tool-use` and `post-tool-use`, and two runs
    /// of `true` fed the same input.
    hooks: Vec<Duration>,
    floor: Vec<Duration>,
    /// `record pre` and `record post` of a Bash call on the control socket, 10,000 known files.
    scan: Vec<Duration>,
    /// The images of 1,000 edits to 100 files in 100 turns, and the files' own size.
    stored: u64,
    files: u64,
}

/// Runs `program ARGS` with `input` on standard input, to its end.
fn run_fed(program: &str, args: &[&str], env: &[(&str, &Path)], input: &[u8]) {
    let mut c = Command::new(program);
    c.args(args).stdin(Stdio::piped()).stdout(Stdio::null());
    for (k, v) in env {
        c.env(k, v);
    }
    let mut child = c.spawn().unwrap();
    // `true` may exit before it reads: a broken pipe then.
    let _ = child.stdin.take().unwrap().write_all(input);
    child.wait().unwrap();
}

fn dir_size(dir: &Path) -> u64 {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().metadata().unwrap().len())
        .sum()
}

fn measure_recording() -> Recording {
    let sb = Sandbox::new();
    let s = sb.serve(SERVE);
    let f = sb.write("big.txt", "");
    let line = "x".repeat(99) + "\n";
    let (mut hooks, mut floor) = (Vec::new(), Vec::new());
    let (config, home) = (sb.config(), sb.home());
    let env = [
        ("CLAUDE_CONFIG_DIR", config.as_path()),
        ("HOME", home.as_path()),
    ];
    let mut old = String::new();
    for i in 0..40 {
        let mut text = line.repeat(10 * 1024 - 1);
        text.push_str(&format!("{i:099}\n"));
        // The input as Claude Code 2.1.332 writes it, in its order: the content in
        // `tool_input`, and after the call in `tool_response` too, with the file it replaced.
        let q = |v: Value| v.to_string();
        let head = format!(
            r#"{{"session_id":"s","transcript_path":"/t.jsonl","cwd":{},"permission_mode":"acceptEdits","hook_event_name":"#,
            q(json!(sb.ws()))
        );
        let tool = format!(
            r#""tool_name":"Write","tool_input":{{"file_path":{},"content":{}}}"#,
            q(json!(f)),
            q(json!(text))
        );
        let pre = format!(r#"{head}"PreToolUse",{tool},"tool_use_id":"t{i}"}}"#);
        let patch = json!([{"oldStart": 10240, "oldLines": 1, "newStart": 10240, "newLines": 1,
            "lines": [format!("-{}", old.lines().last().unwrap_or("")), format!("+{i:099}")]}]);
        let post = format!(
            r#"{head}"PostToolUse",{tool},"tool_response":{{"type":"update","filePath":{},"content":{},"structuredPatch":{patch},"originalFile":{},"userModified":false}},"tool_use_id":"t{i}"}}"#,
            q(json!(f)),
            q(json!(text)),
            q(json!(old))
        );
        // The tool's own write between the hooks is not theirs.
        let t = Instant::now();
        run_fed(BIN, &["hook", "pre-tool-use"], &env, pre.as_bytes());
        let before = t.elapsed();
        std::fs::write(&f, &text).unwrap();
        let t = Instant::now();
        run_fed(BIN, &["hook", "post-tool-use"], &env, post.as_bytes());
        hooks.push(before + t.elapsed());
        let t = Instant::now();
        run_fed("/bin/true", &[], &env, pre.as_bytes());
        run_fed("/bin/true", &[], &env, post.as_bytes());
        floor.push(t.elapsed());
        old = text;
    }
    drop(s);
    // 10,000 open tabs, as a previous run left them (opening them one request at a time is
    // slow in its own right).
    let paths: Vec<PathBuf> = (0..10_000)
        .map(|i| sb.write(&format!("k/{i}.txt"), format!("{i}\n")))
        .collect();
    let tabs: Vec<Value> = paths.iter().map(|p| json!({"path": p})).collect();
    std::fs::write(
        sb.state().join("editor.json"),
        json!({"tabs": tabs}).to_string(),
    )
    .unwrap();
    let s = sb.serve(SERVE);
    let mut c = Control::connect(&control_path(&s));
    let mut scan = Vec::new();
    for i in 0..21 {
        let call = format!("b{i}");
        let t = Instant::now();
        c.request(
            &json!({"cmd": "record", "event": "pre", "session": "s", "call": call, "tool": "Bash"}),
        );
        c.request(&json!({"cmd": "record", "event": "post", "session": "s", "call": call, "tool": "Bash"}));
        // The first call reads the files it never saw.
        if i > 0 {
            scan.push(t.elapsed());
        }
    }
    drop(s);
    // 1,000 edits to 100 files of 20 kB in 100 turns, each changing one line.
    let sb = Sandbox::new();
    let s = sb.serve(SERVE);
    let mut c = Control::connect(&control_path(&s));
    let lines = |file: usize, edit: usize| -> String {
        (0..200)
            .map(|l| {
                if l == edit % 200 {
                    format!("{file} {l} edited {edit}\n")
                } else {
                    format!("{file} line {l} {}\n", "y".repeat(80))
                }
            })
            .collect()
    };
    let files: Vec<PathBuf> = (0..100)
        .map(|k| sb.write(&format!("f/{k}.txt"), lines(k, 999)))
        .collect();
    let original: u64 = files
        .iter()
        .map(|f| std::fs::metadata(f).unwrap().len())
        .sum();
    for edit in 0..1000 {
        if edit % 10 == 0 {
            c.request(&json!({"cmd": "record", "event": "prompt", "session": "s"}));
        }
        let k = (edit * 37) % 100;
        let call = format!("e{edit}");
        c.request(&json!({"cmd": "record", "event": "pre", "session": "s", "call": call, "tool": "Edit", "path": files[k]}));
        std::fs::write(&files[k], lines(k, edit)).unwrap();
        c.request(&json!({"cmd": "record", "event": "post", "session": "s", "call": call, "tool": "Edit"}));
    }
    Recording {
        hooks,
        floor,
        scan,
        stored: dir_size(&sb.state().join("changes")),
        files: original,
    }
}

// ---------------------------------------------------------------------------------------------
// Statistics and formatting

/// Nearest-rank percentile of a sorted slice.
fn pct<T: Copy>(sorted: &[T], p: f64) -> T {
    let rank = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

#[derive(Clone, Copy)]
struct Lat {
    p50: Duration,
    p99: Duration,
}

fn lat(mut v: Vec<Duration>) -> Lat {
    v.sort();
    Lat {
        p50: pct(&v, 0.50),
        p99: pct(&v, 0.99),
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn fmt_d(d: Duration) -> String {
    let us = d.as_secs_f64() * 1e6;
    if us >= 10e6 {
        format!("{:.1} s", us / 1e6)
    } else if us >= 1e6 {
        format!("{:.2} s", us / 1e6)
    } else if us < 1000.0 {
        format!("{us:.0} µs")
    } else if us < 100_000.0 {
        format!("{:.2} ms", us / 1000.0)
    } else {
        format!("{:.0} ms", us / 1000.0)
    }
}

fn fmt_lat(l: Lat) -> String {
    format!("p50 {} · p99 {}", fmt_d(l.p50), fmt_d(l.p99))
}

fn fmt_kib(kib: f64) -> String {
    format!("{:.2} MiB", kib / 1024.0)
}

fn fmt_rate(r: f64) -> String {
    let r = r.round() as u64;
    let s = r.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

struct Row {
    figure: String,
    value: String,
    budget: String,
    /// None: no budget for this row.
    ok: Option<bool>,
}

fn row(figure: &str, value: String, budget: &str, ok: Option<bool>) -> Row {
    Row {
        figure: figure.to_string(),
        value,
        budget: budget.to_string(),
        ok,
    }
}

// ---------------------------------------------------------------------------------------------
// A lean WebSocket client: no JSON parsing on the measured path

/// Opens a WebSocket with TCP_NODELAY and the token, as the CLI does. `read_buffer` is
/// tungstenite's read chunk: it zero-fills that much before every read, so the small
/// request/response measurements use 4 KiB to keep the client's own cost out of the figures.
fn ws_connect(port: u16, token: &str, read_buffer: usize) -> WebSocket<TcpStream> {
    let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_nodelay(true).unwrap();
    stream.set_read_timeout(Some(DEADLINE)).unwrap();
    let mut req = format!("ws://127.0.0.1:{port}/")
        .into_client_request()
        .unwrap();
    let h = req.headers_mut();
    h.insert(
        "Sec-WebSocket-Protocol",
        http::HeaderValue::from_static("mcp"),
    );
    h.insert(
        "X-Claude-Code-Ide-Authorization",
        http::HeaderValue::from_str(token).unwrap(),
    );
    let config = WebSocketConfig::default().read_buffer_size(read_buffer);
    tungstenite::client::client_with_config(req, stream, Some(config))
        .unwrap_or_else(|e| panic!("websocket handshake: {e}"))
        .0
}

const INITIALIZE: &str = r#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"claude-code","version":"2.1.330"}}}"#;

/// A connection that went through the CLI's opening sequence (initialize, initialized,
/// ide_connected, tools/list), with nothing left unread.
fn ready_ws(s: &Server, read_buffer: usize) -> WebSocket<TcpStream> {
    let mut ws = ws_connect(s.port, &s.token, read_buffer);
    ws.send(Message::Text(INITIALIZE.into())).unwrap();
    let r = next_response(&mut ws);
    assert!(r.as_str().contains("serverInfo"), "{r}");
    for m in [
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#.to_string(),
        format!(
            r#"{{"jsonrpc":"2.0","method":"ide_connected","params":{{"pid":{}}}}}"#,
            std::process::id()
        ),
        r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{}}"#.to_string(),
    ] {
        ws.send(Message::Text(m.into())).unwrap();
    }
    let r = next_response(&mut ws);
    assert!(r.as_str().contains("\"tools\""), "{r}");
    // Whatever the greeting sent (a stored selection, ...) is read and dropped.
    drain_ws(&mut ws, Duration::from_millis(30));
    ws
}

/// Reads and drops whatever arrives until nothing has come for `quiet`.
fn drain_ws(ws: &mut WebSocket<TcpStream>, quiet: Duration) {
    ws.get_mut().set_read_timeout(Some(quiet)).unwrap();
    loop {
        match ws.read() {
            Ok(_) => {}
            Err(tungstenite::Error::Io(e)) if read_again(&e) => break,
            Err(e) => panic!("websocket read: {e}"),
        }
    }
    ws.get_mut().set_read_timeout(Some(DEADLINE)).unwrap();
}

/// The small read buffer for request/response measurements.
const SMALL: usize = 4 << 10;
/// tungstenite's default, for the 10 MiB answer.
const LARGE: usize = 128 << 10;

fn is_server_ping(t: &str) -> bool {
    t.contains("\"method\":\"ping\"") && t.contains("\"id\"")
}

/// The next text frame that is not a server keepalive ping (those are answered).
fn next_text(ws: &mut WebSocket<TcpStream>) -> tungstenite::Utf8Bytes {
    loop {
        match ws.read().expect("a frame from ccide") {
            Message::Text(t) => {
                if is_server_ping(t.as_str()) {
                    let v: Value = serde_json::from_str(t.as_str()).unwrap();
                    let pong = json!({"jsonrpc":"2.0","id":v["id"],"result":{}}).to_string();
                    ws.send(Message::Text(pong.into())).unwrap();
                    continue;
                }
                return t;
            }
            _ => continue,
        }
    }
}

/// The next response (a message without "method"); notifications are skipped.
fn next_response(ws: &mut WebSocket<TcpStream>) -> tungstenite::Utf8Bytes {
    loop {
        let t = next_text(ws);
        if !t.as_str().contains("\"method\"") {
            return t;
        }
    }
}

fn ping_request(id: u64) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"ping"}}"#)
}

fn folders_request(id: u64) -> String {
    format!(
        r#"{{"jsonrpc":"2.0","id":{id},"method":"tools/call","params":{{"name":"getWorkspaceFolders","arguments":{{}}}}}}"#
    )
}

/// Round trips of `make(id)` on one connection.
fn round_trips(
    ws: &mut WebSocket<TcpStream>,
    n: usize,
    first_id: u64,
    make: fn(u64) -> String,
) -> Vec<Duration> {
    let mut out = Vec::with_capacity(n);
    for i in 0..n as u64 {
        let text = make(first_id + i);
        let t0 = Instant::now();
        ws.send(Message::Text(text.into())).unwrap();
        let r = next_response(ws);
        out.push(t0.elapsed());
        debug_assert!(!r.as_str().contains("\"error\""), "{r}");
    }
    out
}

/// Sends `batch` requests, then reads `batch` responses; `batches` times. Returns requests/s.
fn pipelined(ws: &mut WebSocket<TcpStream>, batches: usize, batch: usize, first_id: u64) -> f64 {
    let t0 = Instant::now();
    let mut id = first_id;
    for _ in 0..batches {
        for _ in 0..batch {
            ws.write(Message::Text(folders_request(id).into())).unwrap();
            id += 1;
        }
        ws.flush().unwrap();
        for _ in 0..batch {
            let r = next_response(ws);
            assert!(r.as_str().contains("\"result\""), "{r}");
        }
    }
    (batches * batch) as f64 / t0.elapsed().as_secs_f64()
}

// ---------------------------------------------------------------------------------------------
// The loopback floor: a TCP echo thread in this process, same message size

struct Echo {
    stream: TcpStream,
    size: usize,
}

impl Echo {
    /// An echo thread on `cpu` and a connection to it.
    fn start(size: usize, cpu: usize) -> Echo {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            pin(0, cpu);
            let (mut s, _) = listener.accept().unwrap();
            s.set_nodelay(true).unwrap();
            let mut buf = vec![0u8; size];
            while s.read_exact(&mut buf).is_ok() {
                if s.write_all(&buf).is_err() {
                    return;
                }
            }
        });
        let stream = TcpStream::connect(addr).unwrap();
        stream.set_nodelay(true).unwrap();
        Echo { stream, size }
    }

    fn round_trips(&mut self, n: usize) -> Vec<Duration> {
        let msg = vec![b'x'; self.size];
        let mut buf = vec![0u8; self.size];
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            let t0 = Instant::now();
            self.stream.write_all(&msg).unwrap();
            self.stream.read_exact(&mut buf).unwrap();
            out.push(t0.elapsed());
        }
        out
    }
}

/// The CPUs this process may run on.
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity writes at most its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        let rc = libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set);
        assert_eq!(rc, 0, "sched_getaffinity");
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

/// Pins thread `tid` (0: the calling thread) to one CPU.
fn pin(tid: i32, cpu: usize) {
    // SAFETY: as above; sched_setaffinity only reads the set.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        let rc = libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set);
        assert_eq!(rc, 0, "sched_setaffinity({tid}, {cpu})");
    }
}

/// Pins every thread of a process; threads it starts later inherit the pin.
fn pin_process(pid: u32, cpu: usize) {
    for e in std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
    {
        if let Some(tid) = e.file_name().to_str().and_then(|t| t.parse().ok()) {
            pin(tid, cpu);
        }
    }
}

/// A client-to-server WebSocket frame: 2-byte header, 4-byte mask, payload (< 126 bytes).
fn client_frame_size(payload: usize) -> usize {
    assert!(payload < 126);
    2 + 4 + payload
}

// ---------------------------------------------------------------------------------------------
// Processes

fn serve_args(sb: &Sandbox) -> Vec<String> {
    let mut v = vec![
        "serve".to_string(),
        "--workspace".into(),
        sb.ws().to_string_lossy().into_owned(),
        "--state-dir".into(),
        sb.state().to_string_lossy().into_owned(),
    ];
    v.extend(SERVE.iter().map(|s| s.to_string()));
    v
}

fn rss_kib(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("VmRSS in /proc/PID/status");
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// Spawn → the lock file of this pid is complete and its port accepts a TCP connection,
/// polled in a tight loop.
fn start_once(sb: &Sandbox) -> Duration {
    let ide = sb.config().join("ide");
    let args = serve_args(sb);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut cmd = sb.command(&args);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let t0 = Instant::now();
    let mut child = cmd.spawn().expect("spawn ccide serve");
    let pid = child.id();
    let mut n = 0u64;
    let elapsed = 'found: loop {
        for p in list_locks(&ide) {
            let Ok(text) = std::fs::read_to_string(&p) else {
                continue;
            };
            let Ok(v) = serde_json::from_str::<Value>(&text) else {
                continue;
            };
            if v["pid"] != json!(pid) {
                continue;
            }
            let port: u16 = p.file_stem().unwrap().to_str().unwrap().parse().unwrap();
            if TcpStream::connect(("127.0.0.1", port)).is_ok() {
                break 'found t0.elapsed();
            }
        }
        n += 1;
        if n.is_multiple_of(1024) {
            if let Ok(Some(st)) = child.try_wait() {
                panic!("ccide serve exited during start-up: {st}");
            }
            assert!(t0.elapsed() < DEADLINE, "ccide serve did not start");
        }
        std::hint::spin_loop();
    };
    let _ = Command::new("kill").arg(pid.to_string()).status();
    let _ = child.wait();
    elapsed
}

fn stripped_size() -> (u64, bool) {
    let tmp = TempDir::new();
    let copy = tmp.join("ccide");
    let stripped = Command::new("strip")
        .arg("-o")
        .arg(&copy)
        .arg(BIN)
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if stripped {
        (std::fs::metadata(&copy).unwrap().len(), true)
    } else {
        (std::fs::metadata(BIN).unwrap().len(), false)
    }
}

fn control_path(s: &Server) -> PathBuf {
    PathBuf::from(s.lock["ccide"]["control"].as_str().expect("ccide.control"))
}

/// A control-socket connection: one JSON line out, one JSON line back.
struct Control {
    w: UnixStream,
    r: BufReader<UnixStream>,
}

impl Control {
    fn connect(path: &Path) -> Control {
        let w = UnixStream::connect(path).unwrap();
        w.set_read_timeout(Some(DEADLINE)).unwrap();
        let r = BufReader::new(w.try_clone().unwrap());
        Control { w, r }
    }

    fn send(&mut self, v: &Value) {
        let mut line = v.to_string();
        line.push('\n');
        self.w.write_all(line.as_bytes()).unwrap();
    }

    fn line(&mut self) -> Value {
        let mut line = String::new();
        self.r.read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line:?}"))
    }

    fn request(&mut self, v: &Value) -> Value {
        self.send(v);
        self.line()
    }
}

fn wait_notification(ws: &mut WebSocket<TcpStream>, method: &str) {
    let needle = format!("\"method\":\"{method}\"");
    loop {
        if next_text(ws).as_str().contains(&needle) {
            return;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The measurements

struct RoundTrips {
    floor: Lat,
    ping: Lat,
    tool: Lat,
    frame: usize,
}

/// Round trips with `serve` (all its threads) and the echo thread on `server_cpu`, and this
/// client on `client_cpu`. Pinned because on a VM a cross-CPU wake-up costs several times a
/// same-CPU one, and unpinned the scheduler puts the echo thread (in this process) next to the
/// client but `serve` either side: the ratio would measure placement, not ccide.
fn measure_round_trips(server_cpu: usize, client_cpu: usize) -> RoundTrips {
    std::thread::spawn(move || {
        pin(0, client_cpu);
        let sb = Sandbox::new();
        let s = sb.serve(SERVE);
        pin_process(s.pid(), server_cpu);
        let mut ws = ready_ws(&s, SMALL);
        let frame = client_frame_size(ping_request(1_000_000).len());
        let mut echo = Echo::start(frame, server_cpu);
        let (mut floor, mut ping, mut tool) = (Vec::new(), Vec::new(), Vec::new());
        // Warm-up, then interleaved rounds so that drift hits all three alike.
        let _ = echo.round_trips(300);
        let _ = round_trips(&mut ws, 300, 1_000_000, ping_request);
        let _ = round_trips(&mut ws, 300, 1_000_000, folders_request);
        for round in 0..6u64 {
            let id = 1_000_000 + round * 10_000;
            floor.extend(echo.round_trips(1000));
            ping.extend(round_trips(&mut ws, 1000, id, ping_request));
            tool.extend(round_trips(&mut ws, 1000, id + 5000, folders_request));
        }
        RoundTrips {
            floor: lat(floor),
            ping: lat(ping),
            tool: lat(tool),
            frame,
        }
    })
    .join()
    .unwrap()
}

/// Spawn → start-up, 20 times: each in a new state directory (first start), or 20 restarts
/// on one state directory (port and token kept). Returns (min, median, max).
fn measure_startup(restart: bool) -> (Duration, Duration, Duration) {
    let kept = Sandbox::new();
    let once = || {
        if restart {
            start_once(&kept)
        } else {
            start_once(&Sandbox::new())
        }
    };
    let _ = once(); // warm the page cache (and, for restarts, create the state)
    let mut v: Vec<Duration> = (0..20).map(|_| once()).collect();
    v.sort();
    (v[0], pct(&v, 0.5), v[v.len() - 1])
}

/// RSS with no client, one initialized client and 100 idle initialized clients (KiB), each
/// the median of three servers.
fn measure_memory() -> (f64, f64, f64) {
    let (mut none, mut one, mut hundred) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..3 {
        let sb = Sandbox::new();
        let s = sb.serve(SERVE);
        std::thread::sleep(Duration::from_millis(100));
        none.push(rss_kib(s.pid()));
        let mut clients = vec![s.client()];
        std::thread::sleep(Duration::from_millis(100));
        one.push(rss_kib(s.pid()));
        while clients.len() < 100 {
            clients.push(s.client());
        }
        std::thread::sleep(Duration::from_millis(200));
        hundred.push(rss_kib(s.pid()));
        drop(clients);
    }
    (median(none), median(one), median(hundred))
}

/// Pipelined tool calls per second on one connection and over 8 at once.
fn measure_throughput() -> (f64, f64) {
    const BATCH: usize = 1000;
    let sb = Sandbox::new();
    let s = sb.serve(SERVE);
    let mut ws = ready_ws(&s, SMALL);
    let _ = pipelined(&mut ws, 2, BATCH, 1); // warm-up
    let one: Vec<f64> = (0..5)
        .map(|r| pipelined(&mut ws, 10, BATCH, 100_000 * (r + 1)))
        .collect();
    drop(ws);
    let mut wss: Vec<_> = (0..8).map(|_| ready_ws(&s, SMALL)).collect();
    let mut eight = Vec::new();
    for r in 0..4 {
        let barrier = std::sync::Barrier::new(9);
        let t = std::thread::scope(|scope| {
            for ws in wss.iter_mut() {
                let barrier = &barrier;
                scope.spawn(move || {
                    barrier.wait();
                    pipelined(ws, 4, BATCH, 1_000_000 * (r + 1));
                });
            }
            barrier.wait();
            Instant::now()
        });
        eight.push((8 * 4 * BATCH) as f64 / t.elapsed().as_secs_f64());
    }
    // The first 8-connection round warms the 8 server threads.
    (median(one), median(eight[1..].to_vec()))
}

/// `ccide select` process → selection_changed, and the control socket alone → selection_changed.
fn measure_notifications() -> (Lat, Lat) {
    let sb = Sandbox::new();
    let mut text = String::new();
    for i in 0..50 {
        text.push_str(&format!("fn line_{i}() {{}}\n"));
    }
    let file = sb.write("src/sel.rs", &text);
    let s = sb.serve(SERVE);
    let mut ws = ready_ws(&s, SMALL);
    let mut by_command = Vec::new();
    for i in 0..45 {
        let spec = format!("{}:{}", file.display(), i % 50 + 1);
        let t0 = Instant::now();
        let mut child = sb
            .command(&["select", &spec])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_notification(&mut ws, "selection_changed");
        let d = t0.elapsed();
        assert!(child.wait().unwrap().success());
        if i >= 5 {
            by_command.push(d);
        }
    }
    let mut ctl = Control::connect(&control_path(&s));
    let mut by_socket = Vec::new();
    for i in 0..550 {
        let req =
            json!({"cmd":"select","path":file,"range":{"start_line": i % 50 + 1},"text":null});
        let t0 = Instant::now();
        ctl.send(&req);
        wait_notification(&mut ws, "selection_changed");
        let d = t0.elapsed();
        let answer = ctl.line();
        assert_eq!(answer["ok"], true, "{answer}");
        if i >= 50 {
            by_socket.push(d);
        }
    }
    (lat(by_command), lat(by_socket))
}

/// openDiff with a 10 MiB file → accept through the control socket → FILE_SAVED received.
/// Returns (total, openDiff until diff_opened, accept until FILE_SAVED): medians of 9 runs
/// after one warm-up.
fn measure_big_diff() -> (Duration, Duration, Duration) {
    let sb = Sandbox::new();
    let mut original = String::with_capacity(11 << 20);
    let mut i = 0u64;
    while original.len() < 10 << 20 {
        original.push_str(&format!(
            "line {i:08} of a rather large generated file.......\n"
        ));
        i += 1;
    }
    let mut proposed: Vec<&str> = original.lines().collect();
    let changed: Vec<String> = (0..proposed.len())
        .step_by(1999)
        .map(|k| format!("changed {k}"))
        .collect();
    for (n, k) in (0..proposed.len()).step_by(1999).enumerate() {
        proposed[k] = &changed[n];
    }
    let proposed = proposed.join("\n") + "\n";
    let file = sb.write("big.txt", &original);
    let s = sb.serve(SERVE);
    let mut ws = ready_ws(&s, LARGE);
    let path = control_path(&s);
    let mut events = Control::connect(&path);
    assert_eq!(
        events.request(&json!({"cmd":"events"}))["event"],
        "subscribed"
    );
    let mut ctl = Control::connect(&path);
    let (mut total, mut open, mut accept) = (Vec::new(), Vec::new(), Vec::new());
    for run in 0..10u64 {
        let id = 900 + run;
        let p = file.to_str().unwrap();
        let request = json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":"openDiff","arguments":{"old_file_path":p,"new_file_path":p,"new_file_contents":proposed,"tab_name":"big"},"_meta":{"progressToken":1}}}).to_string();
        let t0 = Instant::now();
        ws.send(Message::Text(request.into())).unwrap();
        let opened = loop {
            let e = events.line();
            if e["event"] == "diff_opened" {
                break e;
            }
        };
        let t1 = Instant::now();
        let target = match &opened["id"] {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        };
        let settled =
            ctl.request(&json!({"cmd":"diff.settle","target":target,"accept":true,"cwd":sb.ws()}));
        assert_eq!(settled["ok"], true, "{settled}");
        let r = next_response(&mut ws);
        let t2 = Instant::now();
        let head = &r.as_str()[..r.len().min(300)];
        assert!(
            head.contains("FILE_SAVED") && head.contains(&format!("\"id\":{id}")),
            "{head}"
        );
        assert!(r.len() > 10 << 20);
        if run > 0 {
            total.push(t2 - t0);
            open.push(t1 - t0);
            accept.push(t2 - t1);
        }
    }
    (lat(total).p50, lat(open).p50, lat(accept).p50)
}

/// A generated file of `kib` KiB and a proposal of it where `hunks` lines spread evenly
/// through it change, each far enough from the next to be a hunk of its own. Also returns the
/// first changed line as the proposal has it.
fn hunk_texts(kib: usize, hunks: usize) -> (String, String, String) {
    let mut original = String::with_capacity((kib + 1) << 10);
    let mut i = 0u64;
    while original.len() < kib << 10 {
        original.push_str(&format!(
            "line {i:08} of a rather large generated file.......\n"
        ));
        i += 1;
    }
    let mut proposed: Vec<String> = original.lines().map(str::to_string).collect();
    let step = proposed.len() / hunks;
    for n in 0..hunks {
        let k = n * step + step / 2;
        proposed[k] = format!("changed line {k:08} of the proposal");
    }
    let first = proposed[step / 2].clone();
    (original, proposed.join("\n") + "\n", first)
}

struct Hunks {
    /// `ccide diff review ID` started in a pty → the first hunk's text on it.
    review_first: Vec<Duration>,
    /// `ccide diff show ID` → its exit, all output read from a pipe.
    show: Vec<Duration>,
    /// `ccide diff accept ID --hunks 1,3,…,999` started → FILE_SAVED received.
    accept_hunks: Vec<Duration>,
    /// `ccide diff accept ID` started → FILE_SAVED received.
    accept_plain: Vec<Duration>,
    /// The floor: `diff.settle` accept through the control socket → FILE_SAVED received, as
    /// the big-diff row measures it.
    accept_floor: Vec<Duration>,
    /// (split, compose every other hunk) in process: 2.5 MiB / 250 hunks, 10 MiB / 1,000 (both
    /// below glibc's largest mmap threshold, so that neither pays fresh pages on every run).
    linear: [(Duration, Duration); 2],
}

/// Opens the proposal as Claude Code does and returns the diff's id once serve says it is
/// open.
fn open_proposal(
    ws: &mut WebSocket<TcpStream>,
    events: &mut Control,
    file: &Path,
    proposed: &str,
    id: u64,
) -> String {
    let p = file.to_str().unwrap();
    let request = json!({"jsonrpc":"2.0","id":id,"method":"tools/call","params":{"name":"openDiff","arguments":{"old_file_path":p,"new_file_path":p,"new_file_contents":proposed,"tab_name":"hunks"},"_meta":{"progressToken":1}}}).to_string();
    ws.send(Message::Text(request.into())).unwrap();
    let opened = loop {
        let e = events.line();
        if e["event"] == "diff_opened" {
            break e;
        }
    };
    match &opened["id"] {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Waits for the FILE_SAVED answering request `id`.
fn file_saved(ws: &mut WebSocket<TcpStream>, id: u64) {
    let r = next_response(ws);
    let head = &r.as_str()[..r.len().min(300)];
    assert!(
        head.contains("FILE_SAVED") && head.contains(&format!("\"id\":{id}")),
        "{head}"
    );
}

/// Starts `argv` in a pseudo-terminal (python3's pty module, as tests/fixtures/pty_drive.py
/// does) and returns the time from just before the fork until the screen shows `expect`;
/// then types Ctrl-C, which leaves the diff pending, and waits for the command to end.
const PTY_FIRST: &str = r#"
import json, os, pty, select, sys, time
argv, want = json.loads(sys.argv[1]), sys.argv[2].encode()
t0 = time.monotonic()
pid, fd = pty.fork()
if pid == 0:
    os.execvp(argv[0], argv)
seen = b""
deadline = t0 + 20
while want not in seen:
    r, _, _ = select.select([fd], [], [], max(0, deadline - time.monotonic()))
    if not r:
        sys.exit("never saw %r; saw %r" % (want, seen[-2000:]))
    seen += os.read(fd, 1 << 16)
t = time.monotonic() - t0
os.write(fd, b"\x03")
while True:
    try:
        if not os.read(fd, 1 << 16):
            break
    except OSError:
        break
os.waitpid(pid, 0)
print("%.9f" % t)
"#;

fn first_on_screen(sb: &Sandbox, args: &[&str], expect: &str) -> Duration {
    let cmd = sb.command(args);
    let argv: Vec<String> = std::iter::once(BIN.to_string())
        .chain(args.iter().map(|a| a.to_string()))
        .collect();
    let o = Command::new(python3())
        .arg("-c")
        .arg(PTY_FIRST)
        .arg(serde_json::to_string(&argv).unwrap())
        .arg(expect)
        .env_clear()
        .envs(cmd.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .current_dir(sb.ws())
        .output()
        .unwrap();
    assert!(o.status.success(), "pty: {}", stderr(&o));
    Duration::from_secs_f64(stdout(&o).trim().parse().unwrap())
}

/// `ccide ARGS` started → exit, its output read from a pipe to the end.
fn run_timed(sb: &Sandbox, args: &[&str]) -> (Duration, usize) {
    let t0 = Instant::now();
    let mut child = sb
        .command(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = Vec::new();
    child.stdout.take().unwrap().read_to_end(&mut out).unwrap();
    let status = child.wait().unwrap();
    let t = t0.elapsed();
    assert!(status.success(), "ccide {args:?}: {status}");
    (t, out.len())
}

/// Hunk review of a 10 MiB proposal with 1,000 hunks: medians of 9 runs after one warm-up.
fn measure_hunks() -> Hunks {
    let sb = Sandbox::new();
    let (original, proposed, first) = hunk_texts(10 << 10, 1000);
    let file = sb.write("big.txt", &original);
    let s = sb.serve(SERVE);
    let mut ws = ready_ws(&s, LARGE);
    let path = control_path(&s);
    let mut events = Control::connect(&path);
    assert_eq!(
        events.request(&json!({"cmd":"events"}))["event"],
        "subscribed"
    );
    let mut ctl = Control::connect(&path);
    let every_other = (1..=1000)
        .step_by(2)
        .map(|n| n.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let mut h = Hunks {
        review_first: Vec::new(),
        show: Vec::new(),
        accept_hunks: Vec::new(),
        accept_plain: Vec::new(),
        accept_floor: Vec::new(),
        linear: [(Duration::ZERO, Duration::ZERO); 2],
    };
    // One diff pending for review and show: Ctrl-C leaves it so.
    let id = open_proposal(&mut ws, &mut events, &file, &proposed, 800);
    for run in 0..10 {
        let review = first_on_screen(&sb, &["diff", "review", &id], &first);
        let (show, len) = run_timed(&sb, &["diff", "show", &id]);
        assert!(len > 100_000, "diff show wrote {len} bytes");
        if run > 0 {
            h.review_first.push(review);
            h.show.push(show);
        }
    }
    let settled =
        ctl.request(&json!({"cmd":"diff.settle","target":id,"accept":false,"cwd":sb.ws()}));
    assert_eq!(settled["ok"], true, "{settled}");
    drain_ws(&mut ws, Duration::from_millis(100));
    for run in 0..10u64 {
        let rid = 810 + 3 * run;
        let id = open_proposal(&mut ws, &mut events, &file, &proposed, rid);
        let t0 = Instant::now();
        let settled =
            ctl.request(&json!({"cmd":"diff.settle","target":id,"accept":true,"cwd":sb.ws()}));
        assert_eq!(settled["ok"], true, "{settled}");
        file_saved(&mut ws, rid);
        let floor = t0.elapsed();

        let id = open_proposal(&mut ws, &mut events, &file, &proposed, rid + 1);
        let t0 = Instant::now();
        run_timed(&sb, &["diff", "accept", &id]);
        file_saved(&mut ws, rid + 1);
        let plain = t0.elapsed();

        let id = open_proposal(&mut ws, &mut events, &file, &proposed, rid + 2);
        let t0 = Instant::now();
        run_timed(&sb, &["diff", "accept", &id, "--hunks", &every_other]);
        file_saved(&mut ws, rid + 2);
        let hunks = t0.elapsed();
        // Its diff_settled event (the verdict: 500 dropped hunks' text, ~250 KiB) is more than
        // a socket buffer, which makes serve drop every socket subscriber: subscribe again.
        events = Control::connect(&path);
        assert_eq!(
            events.request(&json!({"cmd":"events"}))["event"],
            "subscribed"
        );
        if run > 0 {
            h.accept_floor.push(floor);
            h.accept_plain.push(plain);
            h.accept_hunks.push(hunks);
        }
    }
    drop(ws);
    drop(s);
    // The two sizes in turn, so that the machine's other work weighs on both alike.
    let sizes =
        [(10 << 8, 250), (10 << 10, 1000)].map(|(kib, count)| (kib, count, hunk_texts(kib, count)));
    let mut times: [(Vec<Duration>, Vec<Duration>); 2] = Default::default();
    for _ in 0..9 {
        for ((kib, count, (original, proposed, _)), (split, compose)) in
            sizes.iter().zip(&mut times)
        {
            let (old, new) = (original.clone().into_bytes(), proposed.clone().into_bytes());
            let t0 = Instant::now();
            let r = review::Review::new(old, new);
            let t1 = Instant::now();
            assert_eq!(r.pieces.len(), *count);
            let decisions: Vec<review::Decision> = (0..*count)
                .map(|n| {
                    if n % 2 == 0 {
                        review::Decision::Keep
                    } else {
                        review::Decision::Drop
                    }
                })
                .collect();
            let t2 = Instant::now();
            let answer = r.compose(&decisions).unwrap();
            let t3 = Instant::now();
            assert!(
                matches!(answer, review::Answer::Save(ref t) if t.len() > (kib << 10) * 9 / 10)
            );
            split.push(t1 - t0);
            compose.push(t3 - t2);
        }
    }
    h.linear = times.map(|(split, compose)| (median_d(&split), median_d(&compose)));
    h
}

/// getDiagnostics {uri} with 10,000 diagnostics stored over 1,000 files.
fn measure_diagnostics() -> (Lat, Duration) {
    let sb = Sandbox::new();
    let mut files = Vec::new();
    let mut input = String::new();
    for f in 0..1000 {
        let p = sb.write(&format!("src/m{:02}/f{f:04}.c", f / 100), "int x;\n");
        for k in 0..10 {
            input.push_str(&format!(
                "{}:{}:{}: error: undeclared identifier 'v{k}' in function 'f{f}' [E{:04}]\n",
                p.display(),
                k * 3 + 1,
                k + 5,
                k * 7 + f % 13
            ));
        }
        files.push(p);
    }
    let s = sb.serve(SERVE);
    let t0 = Instant::now();
    let o = sb.run_stdin(
        &["diagnostics", "import", "--format", "compiler"],
        input.as_bytes(),
    );
    let import = t0.elapsed();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("10000") || stdout(&o).contains("10000"),
        "{}{}",
        stdout(&o),
        stderr(&o)
    );
    let mut ws = ready_ws(&s, SMALL);
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut v = Vec::new();
    for i in 0..3300u64 {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let p = &files[(seed % 1000) as usize];
        let req = json!({"jsonrpc":"2.0","id":i,"method":"tools/call","params":{"name":"getDiagnostics","arguments":{"uri":format!("file://{}", p.display())}}}).to_string();
        let t0 = Instant::now();
        ws.send(Message::Text(req.into())).unwrap();
        let r = next_response(&mut ws);
        let d = t0.elapsed();
        if i == 0 {
            let v: Value = serde_json::from_str(r.as_str()).unwrap();
            let inner = json_text(&v);
            assert_eq!(inner[0]["diagnostics"].as_array().unwrap().len(), 10, "{r}");
        }
        if i >= 300 {
            v.push(d);
        }
    }
    (lat(v), import)
}

/// connect + WebSocket handshake + initialize + close, per second.
fn measure_churn() -> f64 {
    let sb = Sandbox::new();
    let s = sb.serve(SERVE);
    let init = json!({"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"claude-code","version":"2.1.330"}}}).to_string();
    let once = || {
        let mut ws = ws_connect(s.port, &s.token, SMALL);
        ws.send(Message::Text(init.clone().into())).unwrap();
        let r = next_response(&mut ws);
        assert!(r.as_str().contains("serverInfo"), "{r}");
        ws.close(None).unwrap();
        loop {
            match ws.read() {
                Ok(_) => {}
                Err(tungstenite::Error::ConnectionClosed) => break,
                Err(e) => panic!("closing: {e}"),
            }
        }
    };
    for _ in 0..50 {
        once();
    }
    let rates: Vec<f64> = (0..3)
        .map(|_| {
            let t0 = Instant::now();
            for _ in 0..300 {
                once();
            }
            300.0 / t0.elapsed().as_secs_f64()
        })
        .collect();
    median(rates)
}

// ---------------------------------------------------------------------------------------------
// An LSP peer over a child's standard streams: `ccide lsp` driven as an editor drives it, and a
// language server driven directly, as a minimal editor would.

struct Lsp {
    child: Child,
    stdin: ChildStdin,
    rx: mpsc::Receiver<Value>,
    /// Messages received while waiting for something else.
    backlog: VecDeque<Value>,
    next_id: u64,
    /// The folders answered to `workspace/workspaceFolders`.
    folders: Value,
    /// `textDocument/diagnostic` once the server registered it: its identifier, if any.
    pull_registered: Option<Option<String>>,
}

/// One framed message (`Content-Length`, other headers ignored), or None at end of stream.
fn read_lsp_message(r: &mut impl BufRead) -> Option<Value> {
    let mut length = None;
    loop {
        let mut line = String::new();
        if r.read_line(&mut line).ok()? == 0 {
            return None;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':')
            && k.eq_ignore_ascii_case("content-length")
        {
            length = v.trim().parse::<usize>().ok();
        }
    }
    let mut body = vec![0; length?];
    r.read_exact(&mut body).ok()?;
    serde_json::from_slice(&body).ok()
}

impl Lsp {
    /// Starts `cmd` in a process group of its own (a language server's children go with it).
    fn start(mut cmd: Command, folders: &[&Path]) -> Lsp {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
        let mut out = BufReader::new(child.stdout.take().unwrap());
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            while let Some(v) = read_lsp_message(&mut out) {
                if tx.send(v).is_err() {
                    return;
                }
            }
        });
        Lsp {
            stdin: child.stdin.take().unwrap(),
            child,
            rx,
            backlog: VecDeque::new(),
            next_id: 1,
            folders: folders
                .iter()
                .map(|f| json!({"uri": file_uri(f), "name": f.file_name().map(|n| n.to_string_lossy())}))
                .collect(),
            pull_registered: None,
        }
    }

    fn send(&mut self, v: &Value) {
        let body = v.to_string();
        let framed = format!("Content-Length: {}\r\n\r\n{body}", body.len());
        self.stdin.write_all(framed.as_bytes()).unwrap();
        self.stdin.flush().unwrap();
    }

    fn notify(&mut self, method: &str, params: Value) {
        self.send(&json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    fn send_request(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    /// The next message from the peer within `limit`; its requests are answered on the way,
    /// since several servers wait for an answer before going on (ccide-protocol(7) §11.6).
    fn next(&mut self, limit: Duration) -> Option<Value> {
        let end = Instant::now() + limit;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            let v = self.rx.recv_timeout(left).ok()?;
            let (Some(method), Some(id)) = (v["method"].as_str(), v.get("id")) else {
                return Some(v);
            };
            let result = match method {
                "workspace/configuration" => {
                    let n = v["params"]["items"].as_array().map_or(0, Vec::len);
                    Value::Array(vec![Value::Null; n])
                }
                "workspace/workspaceFolders" => self.folders.clone(),
                "client/registerCapability" => {
                    for r in v["params"]["registrations"]
                        .as_array()
                        .into_iter()
                        .flatten()
                    {
                        if r["method"] == "textDocument/diagnostic" {
                            let identifier = r["registerOptions"]["identifier"].as_str();
                            self.pull_registered = Some(identifier.map(str::to_string));
                        }
                    }
                    Value::Null
                }
                _ => Value::Null,
            };
            self.send(&json!({"jsonrpc": "2.0", "id": id, "result": result}));
        }
    }

    /// The next message satisfying `pred` within `limit`; the others are kept for later.
    fn recv_where(&mut self, what: &str, limit: Duration, pred: impl Fn(&Value) -> bool) -> Value {
        if let Some(i) = self.backlog.iter().position(&pred) {
            return self.backlog.remove(i).unwrap();
        }
        let end = Instant::now() + limit;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.next(left) {
                Some(v) if pred(&v) => return v,
                Some(v) => self.backlog.push_back(v),
                None => panic!(
                    "no message matching {what} within {limit:?}; last received: {:?}",
                    self.backlog.back()
                ),
            }
        }
    }

    fn response(&mut self, id: u64, limit: Duration) -> Value {
        self.recv_where(&format!("the response to {id}"), limit, |v| {
            v["id"] == id && v.get("method").is_none()
        })
    }

    fn request(&mut self, method: &str, params: Value, limit: Duration) -> Value {
        let id = self.send_request(method, params);
        self.response(id, limit)
    }

    /// initialize (answered within `limit`) and initialized; returns the server's capabilities.
    fn initialize(&mut self, root: &Path, capabilities: Value, limit: Duration) -> Value {
        let params = json!({
            "processId": std::process::id(), "rootUri": file_uri(root), "rootPath": root,
            "workspaceFolders": self.folders.clone(), "capabilities": capabilities,
            "clientInfo": {"name": "ccide-bench", "version": "1"},
        });
        let r = self.request("initialize", params, limit);
        assert!(r.get("error").is_none(), "initialize failed: {r}");
        self.notify("initialized", json!({}));
        r["result"]["capabilities"].clone()
    }

    fn open(&mut self, path: &Path, language: &str, text: &str) {
        let td = json!({"uri": file_uri(path), "languageId": language, "version": 1, "text": text});
        self.notify("textDocument/didOpen", json!({"textDocument": td}));
    }

    /// Replaces the document's whole text.
    fn change(&mut self, path: &Path, version: i32, text: &str) {
        self.notify(
            "textDocument/didChange",
            json!({"textDocument": {"uri": file_uri(path), "version": version},
                   "contentChanges": [{"text": text}]}),
        );
    }

    /// Drops what arrives until nothing has come for `quiet` (at most `limit` in all).
    fn drain(&mut self, quiet: Duration, limit: Duration) {
        let end = Instant::now() + limit;
        while Instant::now() < end && self.next(quiet).is_some() {}
        self.backlog.clear();
    }
}

impl Drop for Lsp {
    /// shutdown and exit, then SIGKILL to the process group whatever happened.
    fn drop(&mut self) {
        let id = self.send_request("shutdown", Value::Null);
        let end = Instant::now() + Duration::from_secs(2);
        while let Some(v) = self.next(end.saturating_duration_since(Instant::now())) {
            if v["id"] == id && v.get("method").is_none() {
                break;
            }
        }
        self.notify("exit", Value::Null);
        let end = Instant::now() + Duration::from_secs(2);
        while Instant::now() < end && matches!(self.child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(10));
        }
        // SAFETY: kill(2) on the process group this Lsp started (its pid is the group id).
        unsafe {
            libc::kill(-(self.child.id() as i32), libc::SIGKILL);
        }
        let _ = self.child.wait();
    }
}

/// A path as a `file://` URI; every path here is plain ASCII, but spaces are allowed for.
fn file_uri(p: &Path) -> String {
    format!("file://{}", p.display()).replace(' ', "%20")
}

/// A URI with its `%XX` escapes decoded, for comparing what a server sends back.
fn decoded(uri: &str) -> String {
    let b = uri.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = b
            .get(i + 1..i + 3)
            .and_then(|h| u8::from_str_radix(std::str::from_utf8(h).ok()?, 16).ok());
        match (b[i], hex) {
            (b'%', Some(c)) => {
                out.push(c);
                i += 3;
            }
            (c, _) => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

// ---------------------------------------------------------------------------------------------
// A selection from the editor

struct EditorSelection {
    action: Lat,
    command: Lat,
    follow: Lat,
    process: Lat,
}

/// `ccide lsp` started as an editor starts it, initialized, with `file` open; what its opening
/// told the client is read and dropped.
fn editor(sb: &Sandbox, ws: &mut WebSocket<TcpStream>, flags: &[&str], file: &Path) -> Lsp {
    let mut args = vec!["lsp"];
    args.extend_from_slice(flags);
    let mut ed = Lsp::start(sb.command(&args), &[&sb.ws()]);
    ed.initialize(
        &sb.ws(),
        json!({"workspace": {"applyEdit": true}}),
        DEADLINE,
    );
    ed.open(file, "python", &std::fs::read_to_string(file).unwrap());
    drain_ws(ws, Duration::from_millis(300));
    ed
}

/// From the editor's LSP message (or a key mapping's `ccide select` process) until the
/// connected client, ready, has read `selection_changed`. Lines change from run to run, so
/// that every run is a new selection.
fn measure_editor_selection() -> EditorSelection {
    let sb = Sandbox::new();
    let mut text = String::new();
    for i in 0..50 {
        text.push_str(&format!("def line_{i}():\n    return {i}\n"));
    }
    let file = sb.write("src/sel.py", &text);
    let s = sb.serve(SERVE);
    let mut ws = ready_ws(&s, SMALL);
    s.wait_ready();
    let range = |l1: u64, c1: u64, l2: u64, c2: u64| json!({"start": {"line": l1, "character": c1}, "end": {"line": l2, "character": c2}});
    let line = |i: u64| i % 40 + 1;

    // The code action an editor shows for the selection: codeAction, then executeCommand of
    // the action chosen. `--no-follow`: the codeAction alone sends nothing.
    let mut ed = editor(&sb, &mut ws, &["--no-follow"], &file);
    let uri = file_uri(&file);
    let mut action = Vec::new();
    for i in 0..110u64 {
        let params = json!({"textDocument": {"uri": uri}, "range": range(line(i), 4, line(i) + 1, 0),
                            "context": {"diagnostics": []}});
        let t0 = Instant::now();
        let actions = ed.request("textDocument/codeAction", params, DEADLINE);
        let chosen = actions["result"]
            .as_array()
            .and_then(|a| a.iter().find(|a| a["title"] == "Claude: send selection"))
            .unwrap_or_else(|| panic!("no \"Claude: send selection\" in {actions}"))
            .clone();
        let id = ed.send_request("workspace/executeCommand", chosen["command"].clone());
        wait_notification(&mut ws, "selection_changed");
        let d = t0.elapsed();
        assert_eq!(ed.response(id, DEADLINE)["result"], Value::Null);
        if i >= 10 {
            action.push(d);
        }
    }
    // The same command bound to a key: one message.
    let mut command = Vec::new();
    for i in 0..110u64 {
        let args = json!([{"uri": uri, "range": range(line(i), 0, line(i) + 1, 0)}]);
        let t0 = Instant::now();
        let id = ed.send_request(
            "workspace/executeCommand",
            json!({"command": "ccide.select", "arguments": args}),
        );
        wait_notification(&mut ws, "selection_changed");
        let d = t0.elapsed();
        assert_eq!(ed.response(id, DEADLINE)["result"], Value::Null);
        if i >= 10 {
            command.push(d);
        }
    }
    drop(ed);
    drain_ws(&mut ws, Duration::from_millis(300));

    // Following the cursor: the codeAction an editor sends as the cursor moves (a lightbulb),
    // then the rest of 100 ms after which the selection is sent.
    let mut ed = editor(&sb, &mut ws, &[], &file);
    let mut follow = Vec::new();
    for i in 0..55u64 {
        let params = json!({"textDocument": {"uri": uri}, "range": range(line(i), 1, line(i), 1),
                            "context": {"diagnostics": []}});
        let t0 = Instant::now();
        let id = ed.send_request("textDocument/codeAction", params);
        wait_notification(&mut ws, "selection_changed");
        let d = t0.elapsed();
        ed.response(id, DEADLINE);
        if i >= 5 {
            follow.push(d);
        }
    }
    drop(ed);
    drain_ws(&mut ws, Duration::from_millis(300));

    // The shell mapping it replaces: `ccide select FILE:L-L`, started, not waited for.
    let mut process = Vec::new();
    for i in 0..55u64 {
        let spec = format!("{}:{}-{}", file.display(), line(i), line(i) + 1);
        let t0 = Instant::now();
        let mut child = sb
            .command(&["select", &spec])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        wait_notification(&mut ws, "selection_changed");
        let d = t0.elapsed();
        assert!(child.wait().unwrap().success());
        if i >= 5 {
            process.push(d);
        }
    }
    EditorSelection {
        action: lat(action),
        command: lat(command),
        follow: lat(follow),
        process: lat(process),
    }
}

/// `ccide lsp`'s mirror of a document: one `didChange` of n changes, each on its own line of an
/// n-line file, from the first byte written until the answer to the request written after it,
/// for n = 16,000 and 32,000: the best of four rounds each, taken in turns, so that other work
/// on the machine slows both sizes alike. Its cost grows with n, not n² (it was quadratic:
/// 16,000 changes took 5.6 s, 20,000 took 16 s).
fn measure_did_change() -> (Duration, Duration) {
    let sb = Sandbox::new();
    let mut args = SERVE.to_vec();
    args.extend(["--no-default-checkers", "--no-default-lsp"]);
    let s = sb.serve(&args);
    let mut ws = ready_ws(&s, SMALL);
    s.wait_ready();
    let mut sizes: Vec<(Lsp, Vec<u8>, Duration)> = [16_000u32, 32_000]
        .into_iter()
        .map(|n| {
            let text: String = (0..n)
                .map(|i| format!("line {i:>6} of the file\n"))
                .collect();
            let file = sb.write(&format!("big{n}.py"), &text);
            let ed = editor(&sb, &mut ws, &["--no-follow"], &file);
            let changes: Vec<Value> = (0..n)
                .map(|i| json!({"range": {"start": {"line": i, "character": 0}, "end": {"line": i, "character": 4}}, "text": "LINE"}))
                .collect();
            let body = json!({"jsonrpc": "2.0", "method": "textDocument/didChange", "params":
                {"textDocument": {"uri": file_uri(&file), "version": 2}, "contentChanges": changes}})
            .to_string();
            let framed = format!("Content-Length: {}\r\n\r\n{body}", body.len()).into_bytes();
            (ed, framed, Duration::MAX)
        })
        .collect();
    // A request answered once everything before it was handled.
    let sync = |ed: &mut Lsp| {
        ed.request(
            "textDocument/codeAction",
            json!({"textDocument": {"uri": "file:///nowhere"}, "range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}}, "context": {"diagnostics": []}}),
            Duration::from_secs(60),
        );
    };
    for _ in 0..4 {
        for (ed, framed, best) in &mut sizes {
            sync(ed);
            let t = Instant::now();
            ed.stdin.write_all(framed).unwrap();
            ed.stdin.flush().unwrap();
            sync(ed);
            *best = t.elapsed().min(*best);
        }
    }
    (sizes[0].2, sizes[1].2)
}

// ---------------------------------------------------------------------------------------------
// Edit → diagnostic through language servers

/// One language's measurement set-up: the project, the file edited, the server, the batch
/// checker.
struct Project {
    /// "TypeScript", "Python", "C".
    lang: &'static str,
    language_id: &'static str,
    /// The project's directory name, or "generated"; its size.
    name: String,
    size: String,
    dir: PathBuf,
    file: PathBuf,
    /// Appended to `file`: a type error on a line of its own.
    error: &'static str,
    /// `--lsp`'s pattern, and the server's command (absolute program path).
    pattern: &'static str,
    server: Vec<String>,
    /// The batch checker's command, run in `dir`, and its output's mark of the new error
    /// (`{line}` is the 1-based line).
    batch: Vec<String>,
    batch_mark: String,
    /// A generated project lives here.
    _generated: Option<TempDir>,
}

/// Edit → diagnostic through ccide, and the server's memory.
struct ThroughCcide {
    warm: Vec<Duration>,
    /// (after the edit, after `serve` started)
    cold: (Duration, Duration),
    second_session: Duration,
    rss_kib: u64,
}

/// What was measured for one language.
struct LangTimes {
    ccide: ThroughCcide,
    /// The server driven directly the way ccide asks it (a pull, where it has one), and as it
    /// publishes (None: it only publishes, and the first is that).
    direct_ccide_way: (&'static str, Vec<Duration>),
    direct_published: Option<Vec<Duration>>,
    batch: Vec<Duration>,
}

/// Files under `dir` with extension `ext` and their lines, skipping dependencies and hidden
/// directories.
fn project_size(dir: &Path, ext: &str) -> (usize, usize) {
    let (mut files, mut lines) = (0, 0);
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let p = e.path();
            let Ok(ft) = e.file_type() else { continue };
            if ft.is_dir() {
                if !name.starts_with('.') && name != "node_modules" {
                    stack.push(p);
                }
            } else if ft.is_file() && p.extension().is_some_and(|x| x == ext) {
                files += 1;
                lines += std::fs::read(&p)
                    .map(|b| b.iter().filter(|&&c| c == b'\n').count())
                    .unwrap_or(0);
            }
        }
    }
    (files, lines)
}

/// The project named by `var` (and the file `var`_FILE, else `default_file`), or a generated
/// one when `var` is unset.
fn project_dir(
    var: &str,
    default_file: &str,
    ext: &str,
    generate: fn(&Path) -> &'static str,
) -> (PathBuf, PathBuf, String, String, Option<TempDir>) {
    let (dir, file, name, tmp) = match std::env::var_os(var) {
        Some(d) => {
            let dir = std::fs::canonicalize(&d)
                .unwrap_or_else(|e| panic!("{var}={}: {e}", Path::new(&d).display()));
            let file = std::env::var(format!("{var}_FILE")).unwrap_or(default_file.into());
            let name = dir.file_name().unwrap().to_string_lossy().into_owned();
            (dir.clone(), dir.join(file), name, None)
        }
        None => {
            let tmp = TempDir::new();
            let file = generate(tmp.path());
            let dir = tmp.path().to_path_buf();
            (
                dir.clone(),
                dir.join(file),
                "generated".to_string(),
                Some(tmp),
            )
        }
    };
    assert!(file.is_file(), "{} is not a file", file.display());
    let (n, lines) = project_size(&dir, ext);
    let size = format!("{n} .{ext} files, {:.1} kLOC", lines as f64 / 1000.0);
    (dir, file, name, size, tmp)
}

/// 40 TypeScript modules, each importing the one before; returns the file to edit.
fn generate_ts(dir: &Path) -> &'static str {
    std::fs::write(
        dir.join("tsconfig.json"),
        r#"{"compilerOptions": {"strict": true, "noEmit": true, "target": "ES2022", "module": "ES2022", "moduleResolution": "Bundler", "types": []}, "include": ["src"]}"#,
    )
    .unwrap();
    std::fs::create_dir_all(dir.join("src")).unwrap();
    for k in 0..40 {
        let mut t = String::new();
        if k > 0 {
            t.push_str(&format!(
                "import {{ make{0}, type Item{0} }} from \"./m{0}\";\n\n",
                k - 1
            ));
        }
        t.push_str(&format!(
            "export interface Item{k} {{\n  id: number;\n  name: string;\n  tags: string[];\n}}\n\n"
        ));
        t.push_str(&format!(
            "export function make{k}(id: number): Item{k} {{\n"
        ));
        if k > 0 {
            t.push_str(&format!(
                "  const prev: Item{} = make{}(id - 1);\n  return {{ id, name: prev.name + \"-{k}\", tags: [...prev.tags, \"{k}\"] }};\n}}\n",
                k - 1,
                k - 1
            ));
        } else {
            t.push_str("  return { id, name: \"0\", tags: [] };\n}\n");
        }
        for j in 0..8 {
            t.push_str(&format!(
                "\nexport function count{k}_{j}(items: Item{k}[]): Map<string, number> {{\n  const m = new Map<string, number>();\n  for (const it of items) {{\n    for (const tag of it.tags) m.set(tag, (m.get(tag) ?? 0) + {j});\n  }}\n  return m;\n}}\n"
            ));
        }
        std::fs::write(dir.join(format!("src/m{k}.ts")), t).unwrap();
    }
    "src/m39.ts"
}

/// 40 Python modules of a package, each importing the one before.
fn generate_py(dir: &Path) -> &'static str {
    std::fs::create_dir_all(dir.join("pkg")).unwrap();
    std::fs::write(dir.join("pkg/__init__.py"), "").unwrap();
    for k in 0..40 {
        let mut t = String::from("from dataclasses import dataclass, field\n\n");
        if k > 0 {
            t.push_str(&format!("from pkg.m{0} import Item{0}, make{0}\n", k - 1));
        }
        t.push_str(&format!(
            "\n\n@dataclass\nclass Item{k}:\n    id: int\n    name: str\n    tags: list[str] = field(default_factory=list)\n\n\n"
        ));
        if k > 0 {
            t.push_str(&format!(
                "def make{k}(id: int) -> Item{k}:\n    prev: Item{} = make{}(id - 1)\n    return Item{k}(id, prev.name + \"-{k}\", [*prev.tags, \"{k}\"])\n",
                k - 1,
                k - 1
            ));
        } else {
            t.push_str("def make0(id: int) -> Item0:\n    return Item0(id, \"0\")\n");
        }
        for j in 0..8 {
            t.push_str(&format!(
                "\n\ndef count{k}_{j}(items: list[Item{k}]) -> dict[str, int]:\n    m: dict[str, int] = {{}}\n    for it in items:\n        for tag in it.tags:\n            m[tag] = m.get(tag, 0) + {j}\n    return m\n"
            ));
        }
        std::fs::write(dir.join(format!("pkg/m{k}.py")), t).unwrap();
    }
    "pkg/m39.py"
}

/// 40 C files over one header, with a compilation database.
fn generate_c(dir: &Path) -> &'static str {
    std::fs::create_dir_all(dir.join("include")).unwrap();
    std::fs::create_dir_all(dir.join("src")).unwrap();
    let mut h = String::from(
        "#ifndef COMMON_H\n#define COMMON_H\n#include <stddef.h>\n\nstruct item {\n    int id;\n    const char *name;\n    size_t ntags;\n};\n\n",
    );
    let mut db = Vec::new();
    for k in 0..40 {
        h.push_str(&format!("int make{k}(struct item *out, int id);\n"));
        let mut t = String::from("#include <string.h>\n#include \"common.h\"\n\n");
        t.push_str(&format!(
            "int make{k}(struct item *out, int id)\n{{\n    memset(out, 0, sizeof *out);\n    out->id = id;\n    out->name = \"{k}\";\n"
        ));
        if k > 0 {
            t.push_str(&format!(
                "    struct item prev;\n    make{}(&prev, id - 1);\n    out->ntags = prev.ntags + 1;\n",
                k - 1
            ));
        }
        t.push_str("    return 0;\n}\n");
        for j in 0..8 {
            t.push_str(&format!(
                "\nint count{k}_{j}(const struct item *items, size_t n)\n{{\n    int total = 0;\n    for (size_t i = 0; i < n; i++)\n        total += (int)items[i].ntags * {j};\n    return total;\n}}\n"
            ));
        }
        let rel = format!("src/m{k}.c");
        std::fs::write(dir.join(&rel), t).unwrap();
        db.push(json!({"directory": dir, "file": dir.join(&rel),
                       "arguments": ["/usr/bin/cc", "-std=c11", "-Wall", "-Iinclude", "-c", rel, "-o", format!("m{k}.o")]}));
    }
    h.push_str("\n#endif\n");
    std::fs::write(dir.join("include/common.h"), h).unwrap();
    std::fs::write(
        dir.join("compile_commands.json"),
        serde_json::to_string_pretty(&db).unwrap(),
    )
    .unwrap();
    "src/m0.c"
}

/// The file's compile command from `compile_commands.json` with `-fsyntax-only` in place of
/// compiling: the batch check of one C file.
fn c_syntax_only(dir: &Path, file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(dir.join("compile_commands.json"))
        .expect("a C project has compile_commands.json");
    let db: Value = serde_json::from_str(&text).unwrap();
    let entry = db
        .as_array()
        .unwrap()
        .iter()
        .find(|e| {
            Path::new(e["directory"].as_str().unwrap_or("")).join(e["file"].as_str().unwrap_or(""))
                == file
        })
        .unwrap_or_else(|| panic!("{} is not in compile_commands.json", file.display()));
    let words: Vec<String> = match entry["arguments"].as_array() {
        Some(a) => a.iter().map(|w| w.as_str().unwrap().to_string()).collect(),
        None => entry["command"]
            .as_str()
            .unwrap()
            .split_whitespace()
            .map(str::to_string)
            .collect(),
    };
    assert_eq!(
        Path::new(entry["directory"].as_str().unwrap()),
        dir,
        "the batch check runs in the project directory"
    );
    let mut out = Vec::new();
    let mut it = words.into_iter();
    while let Some(w) = it.next() {
        match w.as_str() {
            "-c" => {}
            "-o" => {
                it.next();
            }
            _ => out.push(w),
        }
    }
    out.push("-fsyntax-only".into());
    out
}

/// The projects measured, for the servers `.ci/lsp-install` put in `lsp_dir`.
fn projects(lsp_dir: &Path) -> Vec<Project> {
    let bin = |name: &str| {
        lsp_dir
            .join("bin")
            .join(name)
            .to_string_lossy()
            .into_owned()
    };
    let mut out = Vec::new();
    let (dir, file, name, size, tmp) =
        project_dir("CCIDE_BENCH_TS", "src/hono-base.ts", "ts", generate_ts);
    let tsconfig = std::env::var("CCIDE_BENCH_TS_TSCONFIG").unwrap_or_else(|_| {
        if dir.join("tsconfig.build.json").is_file() {
            "tsconfig.build.json".into()
        } else {
            "tsconfig.json".into()
        }
    });
    out.push(Project {
        lang: "TypeScript",
        language_id: "typescript",
        name,
        size,
        batch: vec![bin("tsc"), "--noEmit".into(), "-p".into(), tsconfig],
        batch_mark: format!("{}({{line}},", file.file_name().unwrap().to_string_lossy()),
        dir,
        file,
        error: "export const __ccide_bench: string = 1 as number;",
        pattern: "*.ts",
        server: vec![bin("typescript-language-server"), "--stdio".into()],
        _generated: tmp,
    });
    let (dir, file, name, size, tmp) =
        project_dir("CCIDE_BENCH_PY", "rich/text.py", "py", generate_py);
    out.push(Project {
        lang: "Python",
        language_id: "python",
        name,
        size,
        batch: vec![bin("pyright"), file.to_string_lossy().into_owned()],
        batch_mark: format!("{}:{{line}}:", file.file_name().unwrap().to_string_lossy()),
        dir,
        file,
        error: "__ccide_bench: str = 1",
        pattern: "*.py",
        server: vec![bin("pyright-langserver"), "--stdio".into()],
        _generated: tmp,
    });
    let (dir, file, name, size, tmp) = project_dir("CCIDE_BENCH_C", "", "c", generate_c);
    out.push(Project {
        lang: "C",
        language_id: "c",
        name,
        size,
        batch: c_syntax_only(&dir, &file),
        batch_mark: format!("{}:{{line}}:", file.file_name().unwrap().to_string_lossy()),
        dir,
        file,
        error: "int __ccide_bench(void) { return __ccide_undeclared; }",
        pattern: "*.c",
        server: vec![bin("clangd"), "--background-index=false".into()],
        _generated: tmp,
    });
    out
}

/// Puts a file's original content back when dropped, whatever happened meanwhile: the
/// projects measured are real checkouts.
struct Restore<'a>(&'a Path, &'a str);

impl Drop for Restore<'_> {
    fn drop(&mut self) {
        std::fs::write(self.0, self.1).unwrap();
    }
}

/// Limit for anything a language server does, a cold start on a big project included.
const LSP_LIMIT: Duration = Duration::from_secs(180);

/// The pause after a measured edit is undone, through ccide and directly alike.
const SETTLE: Duration = Duration::from_secs(1);

/// Whether a diagnostic in `list` starts on 0-based `line` (LSP and getDiagnostics shapes).
fn has_line(list: &Value, line: u64) -> bool {
    list.as_array()
        .is_some_and(|a| a.iter().any(|d| d["range"]["start"]["line"] == line))
}

/// Whether a getDiagnostics answer holds a diagnostic of `file` on `line`.
fn answer_has(answer: &Value, file: &Path, line: u64) -> bool {
    let uri = format!("file://{}", file.display());
    answer.as_array().is_some_and(|a| {
        a.iter()
            .any(|f| f["uri"] == uri.as_str() && has_line(&f["diagnostics"], line))
    })
}

/// getDiagnostics {} until the new diagnostic is in the answer (`present`) or gone.
fn ccide_until(c: &mut Client, file: &Path, line: u64, present: bool) {
    let t0 = Instant::now();
    while answer_has(&diagnostics(c, json!({})), file, line) != present {
        assert!(
            t0.elapsed() < LSP_LIMIT,
            "getDiagnostics: the error on line {line} of {} never {}",
            file.display(),
            if present { "came" } else { "went" }
        );
    }
}

/// A client's edit as the CLI makes it: the baseline `getDiagnostics {uri}`, then the file
/// written, then `getDiagnostics {}` until the new diagnostic is in the answer. Returns the
/// time from the write; the file is restored and its clean result awaited.
fn ccide_edit(c: &mut Client, p: &Project, original: &str, edited: &str, line: u64) -> Duration {
    diagnostics(c, json!({"uri": format!("file://{}", p.file.display())}));
    std::fs::write(&p.file, edited).unwrap();
    let t0 = Instant::now();
    ccide_until(c, &p.file, line, true);
    let d = t0.elapsed();
    std::fs::write(&p.file, original).unwrap();
    ccide_until(c, &p.file, line, false);
    // What the server does on its own after a change (typescript-language-server asks
    // tsserver again 300 ms later) is over before the next edit.
    std::thread::sleep(SETTLE);
    d
}

/// `serve` for the project with only this language server: cold, warm, a second session and
/// the server's memory.
fn measure_through_ccide(p: &Project, original: &str, edited: &str, line: u64) -> ThroughCcide {
    let sb = Sandbox::new();
    let spec = format!(
        "{}={}",
        p.pattern,
        p.server
            .iter()
            .map(|w| format!("'{w}'"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let (dir, state) = (p.dir.to_string_lossy(), sb.state());
    let mut args = vec!["serve", "--workspace", &dir, "--state-dir", s(&state)];
    args.extend_from_slice(SERVE);
    args.extend_from_slice(&[
        "--no-default-lsp",
        "--no-default-checkers",
        "--diagnostics-wait",
        "5",
        "--lsp",
        &spec,
    ]);
    let mut cmd = sb.command(&args);
    eprintln!("bench: {}: cold start through ccide", p.lang);
    let started = Instant::now();
    let server = Server::spawn(&mut cmd, &sb.config());
    let mut first = server.client();
    // The baseline starts the language server; the edit follows at once.
    diagnostics(
        &mut first,
        json!({"uri": format!("file://{}", p.file.display())}),
    );
    std::fs::write(&p.file, edited).unwrap();
    let t0 = Instant::now();
    ccide_until(&mut first, &p.file, line, true);
    let cold = (t0.elapsed(), started.elapsed());
    std::fs::write(&p.file, original).unwrap();
    ccide_until(&mut first, &p.file, line, false);
    eprintln!("bench: {}: warm edits through ccide", p.lang);
    let _ = ccide_edit(&mut first, p, original, edited, line);
    let warm: Vec<Duration> = (0..5)
        .map(|_| ccide_edit(&mut first, p, original, edited, line))
        .collect();
    eprintln!("bench: {}: a second session's first edit", p.lang);
    let mut second = server.client();
    let second_session = ccide_edit(&mut second, p, original, edited, line);
    std::thread::sleep(Duration::from_secs(1));
    let status = server.control(&json!({"cmd": "status"}));
    let ls = &status["status"]["language_servers"][0];
    assert_eq!(ls["state"], "ready", "{ls}");
    ThroughCcide {
        warm,
        cold,
        second_session,
        rss_kib: ls["rss_kib"].as_u64().unwrap_or(0),
    }
}

/// How a direct client learns the diagnostics.
#[derive(Clone, Debug, PartialEq)]
enum Ask {
    /// `textDocument/diagnostic`, with the identifier the server gave.
    Pull(Option<String>),
    /// tsserver's own requests through typescript-language-server, as ccide asks them.
    Tsserver,
    Published,
}

/// The client capabilities ccide gives a server (`pull`), or an editor's that only takes
/// published diagnostics.
fn direct_capabilities(pull: bool) -> Value {
    let mut caps = json!({
        "general": {"positionEncodings": ["utf-32", "utf-16"]},
        "window": {"workDoneProgress": true},
        "workspace": {"configuration": true, "workspaceFolders": true,
                      "didChangeWatchedFiles": {"dynamicRegistration": true}},
        "textDocument": {"synchronization": {"dynamicRegistration": false},
                         "publishDiagnostics": {"versionSupport": true}},
    });
    if pull {
        caps["workspace"]["diagnostics"] = json!({"refreshSupport": true});
        caps["textDocument"]["diagnostic"] = json!({"dynamicRegistration": true});
    }
    caps
}

/// Asks (or waits for) the diagnostics of `version` of the document; true if one starts on
/// `line`. None: this answer does not count (busy, a stale publish); ask again.
fn direct_diagnostics(
    ls: &mut Lsp,
    ask: &Ask,
    file: &Path,
    version: i32,
    line: u64,
) -> Option<bool> {
    let uri = file_uri(file);
    match ask {
        Ask::Pull(identifier) => {
            let mut params = json!({"textDocument": {"uri": uri}});
            if let Some(i) = identifier {
                params["identifier"] = i.as_str().into();
            }
            let r = ls.request("textDocument/diagnostic", params, LSP_LIMIT);
            if r.get("error").is_some() {
                std::thread::sleep(Duration::from_millis(20));
                return None;
            }
            Some(has_line(&r["result"]["items"], line))
        }
        Ask::Tsserver => {
            let ids: Vec<u64> = TSSERVER_PARTS
                .iter()
                .map(|command| {
                    ls.send_request(
                        "workspace/executeCommand",
                        json!({"command": "typescript.tsserverRequest",
                               "arguments": [command, {"file": uri}]}),
                    )
                })
                .collect();
            let (mut answered, mut found) = (true, false);
            for id in ids {
                let r = ls.response(id, LSP_LIMIT);
                answered &= r["result"]["success"] == true;
                // tsserver counts lines from 1.
                let body = r["result"]["body"].as_array().cloned().unwrap_or_default();
                found |= body.iter().any(|d| d["start"]["line"] == line + 1);
            }
            answered.then_some(found)
        }
        Ask::Published => {
            let n = ls.recv_where("publishDiagnostics", LSP_LIMIT, |v| {
                v["method"] == "textDocument/publishDiagnostics"
                    && decoded(v["params"]["uri"].as_str().unwrap_or("")) == decoded(&uri)
            });
            // A publish for an earlier version does not count; one without a version does.
            if n["params"]["version"]
                .as_i64()
                .is_some_and(|v| v != version as i64)
            {
                return None;
            }
            Some(has_line(&n["params"]["diagnostics"], line))
        }
    }
}

const TSSERVER_PARTS: [&str; 3] = [
    "syntacticDiagnosticsSync",
    "semanticDiagnosticsSync",
    "suggestionDiagnosticsSync",
];

/// The language server driven directly, with ccide's capabilities and ccide's way of asking
/// (`pull`), or as an editor that takes what is published. Returns how it was asked and the
/// warm times from didChange to the diagnostic (5, after two warm-up edits); None when asked
/// for pull and the server only publishes.
fn measure_direct(
    p: &Project,
    pull: bool,
    original: &str,
    edited: &str,
    line: u64,
) -> Option<(Ask, Vec<Duration>)> {
    let sb = Sandbox::new();
    let mut cmd = Command::new(&p.server[0]);
    cmd.args(&p.server[1..])
        .env_clear()
        .env("HOME", sb.home())
        .env(
            "PATH",
            format!("{}:/usr/bin:/bin", sb.root.join("bin").display()),
        )
        .current_dir(&p.dir);
    let mut ls = Lsp::start(cmd, &[&p.dir]);
    let caps = ls.initialize(&p.dir, direct_capabilities(pull), LSP_LIMIT);
    let commands = caps["executeCommandProvider"]["commands"].as_array();
    let mut ask = if !pull {
        Ask::Published
    } else if caps["diagnosticProvider"].is_object() {
        Ask::Pull(
            caps["diagnosticProvider"]["identifier"]
                .as_str()
                .map(str::to_string),
        )
    } else if commands.is_some_and(|c| c.iter().any(|c| c == "typescript.tsserverRequest")) {
        Ask::Tsserver
    } else {
        Ask::Published
    };
    ls.open(&p.file, p.language_id, original);
    // Settled: the first answer to a pull, or the first publish and then a quiet second. A
    // server that registers pull does so before it publishes (pyright); one that publishes
    // first only publishes.
    let uri = file_uri(&p.file);
    if ask == Ask::Published {
        let t0 = Instant::now();
        loop {
            if pull && let Some(identifier) = ls.pull_registered.clone() {
                ask = Ask::Pull(identifier);
                break;
            }
            if let Some(v) = ls.next(Duration::from_millis(50))
                && v["method"] == "textDocument/publishDiagnostics"
                && decoded(v["params"]["uri"].as_str().unwrap_or("")) == decoded(&uri)
            {
                if pull {
                    return None;
                }
                ls.drain(Duration::from_secs(1), Duration::from_secs(30));
                break;
            }
            assert!(
                t0.elapsed() < LSP_LIMIT,
                "{}: the server never published",
                p.lang
            );
        }
    }
    if ask != Ask::Published {
        while direct_diagnostics(&mut ls, &ask, &p.file, 1, line).is_none() {}
    }
    let mut version = 1;
    let mut until = |ls: &mut Lsp, text: &str, present: bool| {
        version += 1;
        ls.change(&p.file, version, text);
        let t0 = Instant::now();
        while direct_diagnostics(ls, &ask, &p.file, version, line) != Some(present) {
            assert!(
                t0.elapsed() < LSP_LIMIT,
                "{}: no diagnostic from the server",
                p.lang
            );
        }
        t0.elapsed()
    };
    // Two edits first, as through ccide (the cold one and a warm-up): a server written in
    // JavaScript gets faster over its first edits.
    let mut times = Vec::new();
    for run in 0..7 {
        let d = until(&mut ls, edited, true);
        until(&mut ls, original, false);
        ls.drain(SETTLE, Duration::from_secs(10));
        if run > 1 {
            times.push(d);
        }
    }
    Some((ask, times))
}

/// A command for a tool of the project (a server, a batch checker) with the environment
/// ccide's own commands get in a sandbox: its home, its `bin` (python3), the system's.
fn tool_command(sb: &Sandbox, argv: &[String], dir: &Path) -> Command {
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..])
        .env_clear()
        .env("HOME", sb.home())
        .env(
            "PATH",
            format!("{}:/usr/bin:/bin", sb.root.join("bin").display()),
        )
        .current_dir(dir);
    cmd
}

/// The batch checker after the edit: one run on the file as it is (page cache, and a checker's
/// own incremental state such as a `.tsbuildinfo`, brought up to date), then three runs, each
/// after an edit of its own (the error's name differs, so an incremental checker sees a
/// change), each until it exits with the new error in its output.
fn measure_batch(p: &Project, original: &str, base: &str, line: u64) -> Vec<Duration> {
    let sb = Sandbox::new();
    let _restore = Restore(&p.file, original);
    let mark = p.batch_mark.replace("{line}", &(line + 1).to_string());
    let run = || {
        let t0 = Instant::now();
        let o = tool_command(&sb, &p.batch, &p.dir)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("{:?}: {e}", p.batch));
        (t0.elapsed(), format!("{}{}", stdout(&o), stderr(&o)))
    };
    run();
    (0..3)
        .map(|k| {
            let error = p
                .error
                .replace("__ccide_bench", &format!("__ccide_bench_{k}"));
            std::fs::write(&p.file, format!("{base}{error}\n")).unwrap();
            let (d, out) = run();
            assert!(
                out.contains(&mark),
                "{:?} did not report {mark}: {out}",
                p.batch
            );
            d
        })
        .collect()
}

/// Everything measured for one language; the project's file is restored whatever happens.
fn measure_language(p: &Project) -> LangTimes {
    let original = std::fs::read_to_string(&p.file).unwrap();
    let _restore = Restore(&p.file, &original);
    let mut base = original.clone();
    if !base.is_empty() && !base.ends_with('\n') {
        base.push('\n');
    }
    let line = base.lines().count() as u64;
    let edited = format!("{base}{}\n", p.error);
    eprintln!("bench: {}: batch checker {:?}", p.lang, p.batch_name());
    let batch = measure_batch(p, &original, &base, line);
    let ccide = measure_through_ccide(p, &original, &edited, line);
    eprintln!("bench: {}: the server driven directly", p.lang);
    let ((ask, times), direct_published) = match measure_direct(p, true, &original, &edited, line) {
        Some(pulled) => {
            eprintln!("bench: {}: the server driven directly, published", p.lang);
            let published = measure_direct(p, false, &original, &edited, line);
            (pulled, published.map(|x| x.1))
        }
        None => (
            measure_direct(p, false, &original, &edited, line).unwrap(),
            None,
        ),
    };
    let ask = match ask {
        Ask::Pull(_) => "pulled (`textDocument/diagnostic`)",
        Ask::Tsserver => "tsserver's diagnostics requests",
        Ask::Published => "published",
    };
    LangTimes {
        ccide,
        direct_ccide_way: (ask, times),
        direct_published,
        batch,
    }
}

impl Project {
    /// The batch command as the table shows it: program name and arguments, paths shortened.
    fn batch_name(&self) -> String {
        self.batch
            .iter()
            .map(|w| {
                let p = Path::new(w);
                if p.is_absolute() {
                    p.file_name().unwrap().to_string_lossy().into_owned()
                } else {
                    w.clone()
                }
            })
            .collect::<Vec<_>>()
            .join(" ")
    }
}

/// A ratio with two significant digits or so.
fn fmt_ratio(r: f64) -> String {
    if r >= 10.0 {
        format!("{r:.0}")
    } else if r >= 1.0 {
        format!("{r:.1}")
    } else {
        format!("{r:.2}")
    }
}

/// "median (min–max)" of a few durations.
fn fmt_runs(v: &[Duration]) -> String {
    let mut v = v.to_vec();
    v.sort();
    format!(
        "median {} ({}–{})",
        fmt_d(pct(&v, 0.5)),
        fmt_d(v[0]),
        fmt_d(v[v.len() - 1])
    )
}

fn median_d(v: &[Duration]) -> Duration {
    let mut v = v.to_vec();
    v.sort();
    pct(&v, 0.5)
}

/// The rows of the language servers' measurements, or one saying why there are none.
fn language_rows(rows: &mut Vec<Row>) {
    let Some(lsp_dir) = std::env::var_os("CCIDE_TEST_LSP_DIR").map(PathBuf::from) else {
        rows.push(row(
            "edit → diagnostic through language servers",
            "not measured: `CCIDE_TEST_LSP_DIR` is unset (`.ci/lsp-install DIR` installs them)"
                .into(),
            "",
            None,
        ));
        return;
    };
    for p in projects(&lsp_dir) {
        let who = format!("{} / {}", p.lang, p.name);
        if !Path::new(&p.server[0]).is_file() {
            rows.push(row(
                &format!("{who}: edit → diagnostic"),
                format!("not measured: no {}", p.server[0]),
                "",
                None,
            ));
            continue;
        }
        let t = measure_language(&p);
        let warm = median_d(&t.ccide.warm);
        let ratio = |other: Duration| warm.as_secs_f64() / other.as_secs_f64();
        let (ask, direct) = &t.direct_ccide_way;
        rows.push(row(
            &format!(
                "{who} ({}): edit → new diagnostic in `getDiagnostics {{}}` through ccide, warm",
                p.size
            ),
            format!(
                "{} · ×{} the server driven directly",
                fmt_runs(&t.ccide.warm),
                fmt_ratio(ratio(median_d(direct)))
            ),
            "",
            None,
        ));
        let mut value = format!("{ask}: {}", fmt_runs(direct));
        if let Some(published) = &t.direct_published {
            value.push_str(&format!(
                " · published (as an editor gets them): {}",
                fmt_runs(published)
            ));
        }
        rows.push(row(
            &format!("{who}: the same server driven directly (minimal LSP client), didChange → diagnostic"),
            value,
            "",
            None,
        ));
        rows.push(row(
            &format!("{who}: batch checker `{}` on the same edit", p.batch_name()),
            format!(
                "{} (×{} ccide's warm time)",
                fmt_runs(&t.batch),
                fmt_ratio(1.0 / ratio(median_d(&t.batch)))
            ),
            "",
            None,
        ));
        rows.push(row(
            &format!("{who}: a Claude session's first edit → diagnostic: cold (fresh `serve`) · second session (`serve` warm)"),
            format!(
                "cold {} ({} from `serve` start) · second session {}",
                fmt_d(t.ccide.cold.0),
                fmt_d(t.ccide.cold.1),
                fmt_d(t.ccide.second_session)
            ),
            "",
            None,
        ));
        rows.push(row(
            &format!(
                "{who}: RSS of `{}`'s process tree, settled",
                p.server[0].rsplit('/').next().unwrap()
            ),
            fmt_kib(t.ccide.rss_kib as f64),
            "",
            None,
        ));
    }
}

/// Where a new session asks `hover` in the TypeScript project: `CCIDE_BENCH_TS_HOVER`
/// (`LINE:COL`, 1-based), else the call of an imported function (hono's `compose`, the
/// generated project's `make38`), as the CLI's `LSP` tool would be asked (ccide-protocol(7)
/// §13.3); None when there is no such call.
fn hover_target(p: &Project, text: &str) -> Option<(u64, u64)> {
    if let Ok(at) = std::env::var("CCIDE_BENCH_TS_HOVER") {
        let (l, c) = at.split_once(':')?;
        return Some((l.parse::<u64>().ok()? - 1, c.parse::<u64>().ok()? - 1));
    }
    let needle = if p.name == "generated" {
        "make38(id"
    } else {
        "compose([]"
    };
    text.lines().enumerate().find_map(|(i, l)| {
        let c = l.find(needle)?;
        Some((i as u64, l[..c].encode_utf16().count() as u64))
    })
}

/// A new session's first `hover` at `at`, from spawning its LSP command `cmd` (a server of
/// its own, or `ccide lsp-bridge` to ccide's): the first answer, and the first complete one
/// (tsserver answers from a partial program until it has loaded the project: `import
/// compose` where the complete answer is `(alias) compose<...>`), asked again every 100 ms.
/// The session is returned, still running.
fn first_hover(cmd: Command, p: &Project, text: &str, at: (u64, u64)) -> (Duration, Duration, Lsp) {
    let t0 = Instant::now();
    let mut l = Lsp::start(cmd, &[&p.dir]);
    let caps = json!({"general": {"positionEncodings": ["utf-16"]}});
    l.initialize(&p.dir, caps, LSP_LIMIT);
    l.open(&p.file, p.language_id, text);
    let params = json!({"textDocument": {"uri": file_uri(&p.file)},
                        "position": {"line": at.0, "character": at.1}});
    let mut first = None;
    loop {
        let r = l.request("textDocument/hover", params.clone(), LSP_LIMIT);
        let t = t0.elapsed();
        first.get_or_insert(t);
        if r["result"].to_string().contains("(alias)") {
            return (first.unwrap(), t, l);
        }
        assert!(t < LSP_LIMIT, "no complete hover within {LSP_LIMIT:?}: {r}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// `n` sessions started at once, each with `cmd()`.
fn sessions_at_once(
    n: usize,
    cmd: &dyn Fn() -> Command,
    p: &Project,
    text: &str,
    at: (u64, u64),
) -> Vec<(Duration, Duration, Lsp)> {
    std::thread::scope(|scope| {
        let started: Vec<_> = (0..n)
            .map(|_| {
                let c = cmd();
                scope.spawn(move || first_hover(c, p, text, at))
            })
            .collect();
        started.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

/// The RSS of every process in process group `pgid`, summed (a server started in a group of
/// its own, with the processes it started).
fn group_rss_kib(pgid: u32) -> f64 {
    let mut total = 0.0;
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = e.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let rest = &stat[stat.rfind(')').map_or(0, |i| i + 2)..];
        if rest.split(' ').nth(2) == Some(pgid.to_string().as_str()) {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            let rss = status.lines().find(|l| l.starts_with("VmRSS:"));
            total += rss
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
                .unwrap_or(0.0);
        }
    }
    total
}

/// A new session's navigation, as Claude Code's own plugin gets it (a server of its own per
/// session, cold) and through ccide (one warm server for all, reached by `ccide lsp-bridge`):
/// first answers and memory, for one session and for three started at once.
struct Navigation {
    /// (first answer, complete answer) per session.
    own_1: (Duration, Duration),
    own_3: Vec<(Duration, Duration)>,
    ccide_1: (Duration, Duration),
    ccide_3: Vec<(Duration, Duration)>,
    /// Its own servers' trees; ccide's: serve, its server's tree and the bridges.
    rss_own: (f64, f64),
    rss_ccide: (f64, f64),
}

fn measure_navigation(p: &Project, at: (u64, u64)) -> Navigation {
    let text = std::fs::read_to_string(&p.file).unwrap();
    let settle = Duration::from_secs(3);
    let own = || {
        let mut c = Command::new(&p.server[0]);
        c.args(&p.server[1..]).current_dir(&p.dir);
        c
    };
    eprintln!(
        "bench: {}: a session with a server of its own, cold",
        p.lang
    );
    let (a, b, l) = first_hover(own(), p, &text, at);
    std::thread::sleep(settle);
    let rss_own_1 = group_rss_kib(l.child.id());
    drop(l);
    eprintln!(
        "bench: {}: three sessions, each with its own server",
        p.lang
    );
    let three = sessions_at_once(3, &own, p, &text, at);
    std::thread::sleep(settle);
    let rss_own_3: f64 = three.iter().map(|t| group_rss_kib(t.2.child.id())).sum();
    let own_3 = three.iter().map(|t| (t.0, t.1)).collect();
    drop(three);

    let sb = Sandbox::new();
    let spec = format!("{}='{}' --stdio", p.pattern, p.server[0]);
    let (dir, state) = (p.dir.to_string_lossy(), sb.state());
    let mut args = vec!["serve", "--workspace", &dir, "--state-dir", s(&state)];
    args.extend_from_slice(SERVE);
    args.extend_from_slice(&["--no-default-lsp", "--no-default-checkers", "--lsp", &spec]);
    let server = Server::spawn(&mut sb.command(&args), &sb.config());
    let bridge = || {
        let mut c = sb.command(&["lsp-bridge", "--client", "bench", "--extensions", ".ts"]);
        c.arg("--no-diagnostics").current_dir(&p.dir);
        c
    };
    eprintln!(
        "bench: {}: ccide's server warmed by a first session",
        p.lang
    );
    drop(first_hover(bridge(), p, &text, at));
    let serve_tree = || {
        let status = server.control(&json!({"cmd": "status"}));
        let ls = status["status"]["language_servers"][0]["rss_kib"].as_f64();
        rss_kib(server.pid()) + ls.unwrap_or(0.0)
    };
    eprintln!("bench: {}: a new session through ccide, warm", p.lang);
    let (a2, b2, l) = first_hover(bridge(), p, &text, at);
    std::thread::sleep(settle);
    let rss_ccide_1 = serve_tree() + rss_kib(l.child.id());
    drop(l);
    eprintln!("bench: {}: three sessions through ccide", p.lang);
    let three = sessions_at_once(3, &bridge, p, &text, at);
    std::thread::sleep(settle);
    let bridges: f64 = three.iter().map(|t| rss_kib(t.2.child.id())).sum();
    let rss_ccide_3 = serve_tree() + bridges;
    let ccide_3 = three.iter().map(|t| (t.0, t.1)).collect();
    drop(three);
    Navigation {
        own_1: (a, b),
        own_3,
        ccide_1: (a2, b2),
        ccide_3,
        rss_own: (rss_own_1, rss_own_3),
        rss_ccide: (rss_ccide_1, rss_ccide_3),
    }
}

/// `first (complete)`, or one figure when they are the same answer.
fn fmt_first(t: (Duration, Duration)) -> String {
    if t.0 == t.1 {
        fmt_d(t.0)
    } else {
        format!("{} (complete {})", fmt_d(t.0), fmt_d(t.1))
    }
}

/// The rows of the model's navigation: a new session's first answer and the memory, with a
/// server of its own per session (the CLI's plugin) and through ccide's warm one.
fn navigation_rows(rows: &mut Vec<Row>) {
    let Some(lsp_dir) = std::env::var_os("CCIDE_TEST_LSP_DIR").map(PathBuf::from) else {
        return;
    };
    let Some(p) = projects(&lsp_dir)
        .into_iter()
        .find(|p| p.lang == "TypeScript")
    else {
        return;
    };
    let who = format!("{} / {}", p.lang, p.name);
    let text = std::fs::read_to_string(&p.file).unwrap_or_default();
    let Some(at) = hover_target(&p, &text).filter(|_| Path::new(&p.server[0]).is_file()) else {
        rows.push(row(
            &format!("{who}: navigation"),
            "not measured: no server, or no call to hover on (CCIDE_BENCH_TS_HOVER)".into(),
            "",
            None,
        ));
        return;
    };
    let n = measure_navigation(&p, at);
    let all = |v: &[(Duration, Duration)]| {
        v.iter()
            .map(|t| fmt_first(*t))
            .collect::<Vec<_>>()
            .join(", ")
    };
    rows.push(row(
        &format!(
            "{who}: a new session's first `hover` ({}:{}), from its LSP command's start: a server of its own, cold (the CLI's plugin) · through ccide, warm",
            at.0 + 1,
            at.1 + 1
        ),
        format!("{} · {}", fmt_first(n.own_1), fmt_first(n.ccide_1)),
        "",
        None,
    ));
    rows.push(row(
        &format!(
            "{who}: three sessions started at once, the same: each its own server · through ccide"
        ),
        format!("{} · {}", all(&n.own_3), all(&n.ccide_3)),
        "",
        None,
    ));
    rows.push(row(
        &format!("{who}: RSS for 1 and 3 sessions: servers of their own · ccide (serve, its server, the bridges)"),
        format!(
            "{}, {} · {}, {}",
            fmt_kib(n.rss_own.0),
            fmt_kib(n.rss_own.1),
            fmt_kib(n.rss_ccide.0),
            fmt_kib(n.rss_ccide.1)
        ),
        "",
        None,
    ));
}

/// The sections `CCIDE_BENCH_ONLY` names (comma-separated: size, start-up, memory,
/// round-trips, throughput, notifications, editor, big-diff, hunks, review, diagnostics, churn,
/// languages, navigation),
/// or all of them when it is unset: one row alone while iterating on it.
fn wanted(section: &str) -> bool {
    std::env::var("CCIDE_BENCH_ONLY")
        .map_or(true, |only| only.split(',').any(|s| s.trim() == section))
}

fn machine() -> String {
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
        .unwrap_or_default()
        .trim()
        .to_string();
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .unwrap_or("")
        .trim()
        .to_string();
    let nproc = std::thread::available_parallelism().map_or(0, |n| n.get());
    let date = Command::new("date")
        .args(["-u", "+%Y-%m-%d %H:%M UTC"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let commit = Command::new("git")
        .args([
            "-C",
            env!("CARGO_MANIFEST_DIR"),
            "describe",
            "--always",
            "--dirty",
        ])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    format!("{date}; nproc {nproc} ({cpu}); Linux {kernel}; commit {commit}")
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .unwrap_or_default()
        .split(' ')
        .take(3)
        .collect::<Vec<_>>()
        .join(" ")
}

#[test]
#[ignore = "a benchmark: cargo test --release --test bench -- --ignored --nocapture"]
fn bench() {
    let started = Instant::now();
    let load_before = loadavg();
    let mut rows = Vec::new();
    let ms = |x: f64| Duration::from_secs_f64(x / 1000.0);

    if wanted("size") {
        eprintln!("bench: binary size");
        let (size, stripped) = stripped_size();
        rows.push(row(
            if stripped {
                "binary size (release, stripped)"
            } else {
                "binary size (release; strip(1) missing, as built)"
            },
            format!(
                "{} B ({:.0} KiB)",
                fmt_rate(size as f64),
                size as f64 / 1024.0
            ),
            "≤ 1.4 MiB",
            Some(size <= 1_468_006),
        ));
    }

    if wanted("start-up") {
        for (restart, what) in [
            (
                false,
                "start-up: spawn → lock file written and port accepting (new state dir)",
            ),
            (true, "start-up: the same, restart on an existing state dir"),
        ] {
            eprintln!("bench: start-up");
            let (fastest, start, slowest) = measure_startup(restart);
            rows.push(row(
                what,
                format!(
                    "median {} (min {}, max {})",
                    fmt_d(start),
                    fmt_d(fastest),
                    fmt_d(slowest)
                ),
                "≤ 5 ms",
                Some(start <= ms(5.0)),
            ));
        }
    }

    if wanted("memory") {
        eprintln!("bench: idle memory");
        let (none, one, hundred) = measure_memory();
        rows.push(row(
            "idle RSS, no client",
            fmt_kib(none),
            "≤ 3 MiB",
            Some(none <= 3.0 * 1024.0),
        ));
        rows.push(row(
            "idle RSS, 1 initialized client",
            fmt_kib(one),
            "≤ 3 MiB",
            Some(one <= 3.0 * 1024.0),
        ));
        rows.push(row(
            "idle RSS, 100 idle initialized clients",
            format!(
                "{} (+{:.0} KiB per client)",
                fmt_kib(hundred),
                (hundred - one) / 99.0
            ),
            "≤ 16 MiB",
            Some(hundred <= 16.0 * 1024.0),
        ));
    }

    if wanted("round-trips") {
        let cpus = allowed_cpus();
        let mut placements = vec![(cpus[0], cpus[0], "same CPU")];
        if cpus.len() > 1 {
            placements.push((cpus[1], cpus[0], "different CPUs"));
        }
        for (server_cpu, client_cpu, place) in placements {
            eprintln!("bench: round trips, {place}");
            let rt = measure_round_trips(server_cpu, client_cpu);
            let ratio = |l: Lat| {
                format!(
                    "{} (×{:.1} · ×{:.1} floor)",
                    fmt_lat(l),
                    l.p50.as_secs_f64() / rt.floor.p50.as_secs_f64(),
                    l.p99.as_secs_f64() / rt.floor.p99.as_secs_f64()
                )
            };
            rows.push(row(
                &format!(
                    "loopback floor, {place}: TCP echo of {} B, TCP_NODELAY",
                    rt.frame
                ),
                fmt_lat(rt.floor),
                "",
                None,
            ));
            rows.push(row(
                &format!("round trip, {place}: `ping`"),
                ratio(rt.ping),
                if place == "same CPU" {
                    "p50 ≤ 3× · p99 ≤ 2× floor"
                } else {
                    "p50 ≤ 3× floor"
                },
                Some(
                    rt.ping.p50.as_secs_f64() <= 3.0 * rt.floor.p50.as_secs_f64()
                        && (place != "same CPU"
                            || rt.ping.p99.as_secs_f64() <= 2.0 * rt.floor.p99.as_secs_f64()),
                ),
            ));
            rows.push(row(
                &format!("round trip, {place}: tools/call `getWorkspaceFolders`"),
                ratio(rt.tool),
                "",
                None,
            ));
        }
    }

    if wanted("throughput") {
        eprintln!("bench: throughput");
        let (tp1, tp8) = measure_throughput();
        rows.push(row(
            "throughput: pipelined `getWorkspaceFolders`, 1 connection",
            format!("{} req/s", fmt_rate(tp1)),
            "≥ 20,000 req/s",
            Some(tp1 >= 20_000.0),
        ));
        rows.push(row(
            "throughput: pipelined `getWorkspaceFolders`, 8 connections",
            format!("{} req/s", fmt_rate(tp8)),
            "",
            None,
        ));
    }

    if wanted("notifications") {
        eprintln!("bench: notifications");
        let (by_command, by_socket) = measure_notifications();
        rows.push(row(
            "notification: `ccide select` run → `selection_changed` received",
            fmt_lat(by_command),
            "",
            None,
        ));
        rows.push(row(
            "notification: control socket `select` → `selection_changed` received",
            fmt_lat(by_socket),
            "p50 < 1 ms",
            Some(by_socket.p50 < ms(1.0)),
        ));
    }

    if wanted("editor") {
        eprintln!("bench: a selection from the editor (`ccide lsp`)");
        let sel = measure_editor_selection();
        rows.push(row(
            "selection from an editor (`ccide lsp`): code action \"Claude: send selection\" (codeAction → executeCommand) → `selection_changed` received",
            fmt_lat(sel.action),
            "",
            None,
        ));
        rows.push(row(
            "selection from an editor: `executeCommand ccide.select` (a key binding) → `selection_changed`",
            fmt_lat(sel.command),
            "",
            None,
        ));
        rows.push(row(
            "selection from an editor: codeAction as the cursor moves (followed after its 100 ms rest) → `selection_changed`",
            fmt_lat(sel.follow),
            "",
            None,
        ));
        rows.push(row(
            "selection by the shell mapping it replaces: `ccide select FILE:L-L` started → `selection_changed`",
            fmt_lat(sel.process),
            "",
            None,
        ));
    }

    if wanted("did-change") {
        eprintln!("bench: a didChange of many changes (`ccide lsp`)");
        let (small, big) = measure_did_change();
        let ratio = big.as_secs_f64() / small.as_secs_f64();
        rows.push(row(
            "`ccide lsp`: one `didChange` of 32,000 one-line changes to a 32,000-line file, against 16,000 to 16,000 lines",
            format!("{} against {} (×{})", fmt_d(big), fmt_d(small), fmt_ratio(ratio)),
            "≤ 2.5× (in proportion: 2×)",
            Some(ratio <= 2.5),
        ));
    }

    if wanted("big-diff") {
        eprintln!("bench: the big diff");
        let (total, open, accept) = measure_big_diff();
        rows.push(row(
            "big diff: `openDiff` 10 MiB → accept (control socket) → `FILE_SAVED`",
            format!(
                "{} (open {} + accept {})",
                fmt_d(total),
                fmt_d(open),
                fmt_d(accept)
            ),
            "< 100 ms",
            Some(total < ms(100.0)),
        ));
    }

    if wanted("hunks") {
        eprintln!("bench: hunk review of 10 MiB with 1,000 hunks");
        let h = measure_hunks();
        let review = median_d(&h.review_first);
        rows.push(row(
            "hunks: `ccide diff review ID` started in a pty → first hunk on screen (10 MiB, 1,000 hunks)",
            fmt_d(review),
            "≤ 50 ms",
            Some(review <= ms(50.0)),
        ));
        let (hunks, plain, floor) = (
            median_d(&h.accept_hunks),
            median_d(&h.accept_plain),
            median_d(&h.accept_floor),
        );
        let over = hunks.saturating_sub(floor);
        rows.push(row(
            "hunks: `ccide diff accept ID --hunks 1,3,…,999` started → `FILE_SAVED` received, over the floor (the big-diff row's accept: `diff.settle` on the control socket → `FILE_SAVED`, same proposal, same run; medians subtracted)",
            format!(
                "{} over (--hunks {}, floor {}; plain `ccide diff accept ID` {})",
                fmt_d(over),
                fmt_d(hunks),
                fmt_d(floor),
                fmt_d(plain)
            ),
            "≤ 100 ms over",
            Some(over <= ms(100.0)),
        ));
        let show = median_d(&h.show);
        rows.push(row(
            "hunks: `ccide diff show ID` numbered, to a pipe, until it exits",
            fmt_d(show),
            "≤ 100 ms",
            Some(show <= ms(100.0)),
        ));
        let [(small_split, small_compose), (split, compose)] = h.linear;
        let ratio = |small: Duration, big: Duration| big.as_secs_f64() / small.as_secs_f64();
        rows.push(row(
            "hunks: split (`Review::new`: the diff and its hunks) + compose (every other hunk kept), in process, 2.5 MiB / 250 hunks → 10 MiB / 1,000",
            format!(
                "split {} → {} (×{:.1}), compose {} → {} (×{:.1})",
                fmt_d(small_split),
                fmt_d(split),
                ratio(small_split, split),
                fmt_d(small_compose),
                fmt_d(compose),
                ratio(small_compose, compose)
            ),
            "≤ ×5 each (linear: ×4)",
            Some(ratio(small_split, split) < 5.0 && ratio(small_compose, compose) < 5.0),
        ));
    }

    if wanted("review") {
        eprintln!("bench: review after the fact: hooks, Bash scan, storage");
        let r = measure_recording();
        let (hooks, floor) = (median_d(&r.hooks), median_d(&r.floor));
        let over = hooks.saturating_sub(floor);
        rows.push(row(
            "review: `ccide hook pre-tool-use` + `post-tool-use` around a Write of a 1 MiB file (process start, the CLI's input: the file once before, three times after; round trip, both snapshots), over two runs of `true` fed the same input",
            format!("{} over ({} hooks, {} `true`)", fmt_d(over), fmt_d(hooks), fmt_d(floor)),
            "≤ 5 ms over",
            Some(over <= ms(5.0)),
        ));
        let scan = median_d(&r.scan);
        rows.push(row(
            "review: a Bash call's `record pre` + `record post` on the control socket, 10,000 known files (open tabs), none changed",
            fmt_d(scan),
            "≤ 20 ms",
            Some(scan <= ms(20.0)),
        ));
        let ratio = r.stored as f64 / r.files as f64;
        rows.push(row(
            "review: images stored for 1,000 one-line edits to 100 files of 20 kB in 100 turns, against the files' own size",
            format!("{} KiB for {} KiB of files (×{ratio:.1})", r.stored / 1024, r.files / 1024),
            "≤ ×4",
            Some(ratio <= 4.0),
        ));
    }

    if wanted("diagnostics") {
        eprintln!("bench: getDiagnostics with 10,000 stored");
        let (diag, import) = measure_diagnostics();
        rows.push(row(
            "`getDiagnostics {uri}`, 10,000 diagnostics over 1,000 files",
            format!("{} (import took {})", fmt_lat(diag), fmt_d(import)),
            "p99 < 5 ms",
            Some(diag.p99 < ms(5.0)),
        ));
    }

    if wanted("churn") {
        eprintln!("bench: connection churn");
        let churn = measure_churn();
        rows.push(row(
            "connection churn: connect + upgrade + initialize + close",
            format!("{} /s", fmt_rate(churn)),
            "",
            None,
        ));
    }

    if wanted("languages") {
        language_rows(&mut rows);
    }

    if wanted("navigation") {
        navigation_rows(&mut rows);
    }

    println!();
    println!("ccide benchmark: {}", machine());
    println!("binary: {BIN}");
    println!();
    println!("| figure | measured | budget | |");
    println!("|---|---|---|---|");
    for r in &rows {
        let verdict = match r.ok {
            Some(true) => "ok",
            Some(false) => "MISSED",
            None => "",
        };
        println!(
            "| {} | {} | {} | {verdict} |",
            r.figure,
            r.value,
            if r.budget.is_empty() {
                "–"
            } else {
                &r.budget
            }
        );
    }
    println!();
    println!(
        "(whole run {:.0} s; load average {load_before} before, {} after: other work on the machine shows up in every figure)",
        started.elapsed().as_secs_f64(),
        loadavg()
    );
}
