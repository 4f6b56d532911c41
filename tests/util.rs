//! A small vocabulary for integration tests: temporary directories, the real `ccide` binary
//! started as `serve`, a tungstenite client speaking to it over a real socket, raw HTTP, and
//! the tools a test gives ccide (never whatever happens to be on the test's PATH).

use std::collections::VecDeque;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tungstenite::client::IntoClientRequest;
use tungstenite::protocol::WebSocket;
use tungstenite::{Message, http};

pub const BIN: &str = env!("CARGO_BIN_EXE_ccide");

/// Generous bound for "eventually": these are behaviour deadlines, not speed assertions. A
/// debug build on a 2-core machine at a load average of 15 gets a fraction of a core: a 20 MiB
/// answer took more than 10 s there.
pub const DEADLINE: Duration = Duration::from_secs(30);

/// `--ping-timeout` of a sandbox's `serve`, by its variable `CCIDE_PING_TIMEOUT` (a test of the
/// keepalive gives the flag, which wins). A test's client answers a keepalive ping only when the test reads from it,
/// and between two reads a test may run commands, start servers or send a 20 MiB message,
/// which takes seconds on a loaded machine; the CLI reads all the time. The pings still come
/// every 5 s, the default interval, and are answered on every read.
pub const TEST_PING_TIMEOUT: &str = "60";

/// Whether a read failed only for the time being: nothing came within its timeout, or a signal
/// interrupted it (EINTR). The tests start many children, and a SIGCHLD delivered to a thread
/// blocked in a read with a timeout ends that read with EINTR; it is no answer from the server.
pub fn read_again(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{Interrupted, TimedOut, WouldBlock};
    matches!(e.kind(), WouldBlock | TimedOut | Interrupted)
}

/// Waits until `f` returns Some, or panics with `what` after `limit`.
pub fn wait_for<T>(what: &str, limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let end = Instant::now() + limit;
    loop {
        if let Some(v) = f() {
            return v;
        }
        if Instant::now() > end {
            panic!("timed out after {limit:?} waiting for {what}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A temporary directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new() -> TempDir {
        static N: AtomicU64 = AtomicU64::new(0);
        let p = std::env::temp_dir().join(format!(
            "ccide-test-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(std::fs::canonicalize(&p).unwrap())
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn join(&self, p: impl AsRef<Path>) -> PathBuf {
        self.0.join(p)
    }

    /// Writes a file (creating parent directories) and returns its path.
    pub fn write(&self, rel: &str, content: impl AsRef<[u8]>) -> PathBuf {
        let p = self.0.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, content).unwrap();
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

// ---------------------------------------------------------------------------------------------
// The tools a test gives ccide, by an explicit path: what ccide finds never depends on the test's
// PATH. A test whose tool is missing fails, it never skips. `cargo test` needs the Rust toolchain
// with rustfmt, python3, groff, patch and systemd-escape; a test that needs more (ruff,
// matplotlib, root, the static build) is `#[ignore = "needs ..."]`, and `.ci/run` provides what
// it needs and runs it with `--ignored`.

/// The python3 interpreter itself, as it names itself (not a pyenv shim, which needs the
/// test's environment, and a sandbox's PATH may hold nothing else): `$CCIDE_TEST_PYTHON`
/// (`.ci/run` names the one it installed matplotlib for), else the python3 on the test's PATH.
/// None when there is none.
pub fn find_python3() -> Option<&'static Path> {
    static FOUND: OnceLock<Option<PathBuf>> = OnceLock::new();
    FOUND
        .get_or_init(|| {
            let named = std::env::var_os("CCIDE_TEST_PYTHON");
            let o = Command::new(named.as_deref().unwrap_or("python3".as_ref()))
                .args(["-c", "import sys; print(sys.executable)"])
                .output()
                .ok()?;
            let exe = String::from_utf8(o.stdout).ok()?;
            (o.status.success() && !exe.trim().is_empty()).then(|| PathBuf::from(exe.trim()))
        })
        .as_deref()
}

/// The python3 interpreter, for a test that needs it.
pub fn python3() -> &'static Path {
    find_python3().expect("python3 is needed: install it, or name it in CCIDE_TEST_PYTHON")
}

/// The rustfmt of the toolchain that built the tests (it sits beside cargo).
pub fn rustfmt() -> PathBuf {
    let p = Path::new(env!("CARGO")).with_file_name("rustfmt");
    assert!(
        p.is_file(),
        "no rustfmt beside {}: rustup component add rustfmt (.ci/run does)",
        env!("CARGO")
    );
    p
}

/// ruff, the version `.ci/run` installs.
pub fn ruff() -> PathBuf {
    tool_from_env("CCIDE_TEST_RUFF", "pip install ruff==0.17.6")
}

/// A tool named by the environment variable `var`, which `.ci/run` sets after installing it.
pub fn tool_from_env(var: &str, install: &str) -> PathBuf {
    let p = std::env::var_os(var)
        .map(PathBuf::from)
        .unwrap_or_else(|| panic!("{var} is not set: {install}, and name it in {var}"));
    assert!(p.is_file(), "{var}={} is not a file", p.display());
    p
}

/// The directories every command of a sandbox finds after its own `bin`: the system's, where a
/// test's shell scripts find `tr`, `grep` or `sleep`.
const SYSTEM_PATH: &str = "/usr/bin:/bin";

/// A sandbox for one test: a home, a config dir, a state dir, a workspace, and a `bin` directory
/// with the tools ccide may find on its PATH: python3, and what the test adds with `add_tool`.
pub struct Sandbox {
    pub root: TempDir,
    /// Whether its commands also find the system's directories (`SYSTEM_PATH`).
    system_path: bool,
}

impl Sandbox {
    pub fn new() -> Sandbox {
        let root = TempDir::new();
        for d in ["home", "config", "state", "ws", "bin"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        let sb = Sandbox {
            root,
            system_path: true,
        };
        // executeCode's kernel and the built-in python checker run `python3`.
        if let Some(python) = find_python3() {
            sb.add_tool("python3", python);
        }
        sb
    }

    /// A sandbox whose commands find only its own `bin` (python3 and what the test adds), not
    /// the system's directories: for a test whose premise is that some tool is absent (no
    /// ruff, no language server), which a tool installed in /usr/bin would otherwise break.
    pub fn without_system_tools() -> Sandbox {
        Sandbox {
            system_path: false,
            ..Sandbox::new()
        }
    }

    pub fn home(&self) -> PathBuf {
        self.root.join("home")
    }
    pub fn config(&self) -> PathBuf {
        self.root.join("config")
    }
    pub fn state(&self) -> PathBuf {
        self.root.join("state")
    }
    pub fn ws(&self) -> PathBuf {
        self.root.join("ws")
    }
    pub fn write(&self, rel: &str, content: impl AsRef<[u8]>) -> PathBuf {
        self.root.write(&format!("ws/{rel}"), content)
    }

    /// Writes an executable `sh` script outside the workspace and returns its path.
    pub fn script(&self, name: &str, body: &str) -> PathBuf {
        let p = self.root.write(name, format!("#!/bin/sh\n{body}\n"));
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        p
    }

    /// Puts `program` on the PATH of this sandbox's commands, as `name`.
    pub fn add_tool(&self, name: &str, program: impl AsRef<Path>) {
        std::os::unix::fs::symlink(program, self.root.join("bin").join(name)).unwrap();
    }

    /// A `ccide` command with a clean environment pointing at this sandbox.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(BIN);
        c.args(args)
            .env_clear()
            .env("HOME", self.home())
            .env("PATH", self.path())
            .env("CLAUDE_CONFIG_DIR", self.config())
            .current_dir(self.ws());
        c
    }

    /// The PATH of this sandbox's commands.
    fn path(&self) -> String {
        let bin = self.root.join("bin");
        match self.system_path {
            true => format!("{}:{SYSTEM_PATH}", bin.display()),
            false => bin.display().to_string(),
        }
    }

    /// Runs a ccide command to completion with empty stdin.
    pub fn run(&self, args: &[&str]) -> Output {
        self.command(args)
            .stdin(Stdio::null())
            .output()
            .expect("run ccide")
    }

    /// Runs a ccide command that must succeed.
    pub fn run_ok(&self, args: &[&str]) -> Output {
        let o = self.run(args);
        assert_eq!(
            o.status.code(),
            Some(0),
            "ccide {args:?}: stdout {} stderr {}",
            stdout(&o),
            stderr(&o)
        );
        o
    }

    /// Runs `ccide hook EVENT` as the CLI runs its plugin's hook: the event's JSON on standard
    /// input, in the project, with the variables the CLI sets for a plugin's process.
    pub fn hook_child(&self, event: &str, input: &Value) -> Child {
        self.hook_child_text(event, &input.to_string())
    }

    /// `hook_child` with the input as written (its members in the CLI's order).
    pub fn hook_child_text(&self, event: &str, input: &str) -> Child {
        let mut child = self
            .command(&["hook", event])
            .env("CLAUDE_PROJECT_DIR", self.ws())
            .env(
                "CLAUDE_PLUGIN_ROOT",
                self.state().join("claude-plugin-2.1.332"),
            )
            .env("CLAUDE_CODE_ENTRYPOINT", "cli")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut stdin = child.stdin.take().unwrap();
        // A hook may stop reading once it has what it needs, as `true` does.
        let _ = stdin.write_all(input.as_bytes());
        child
    }

    /// `ccide status --json`, parsed.
    pub fn status(&self) -> Value {
        serde_json::from_slice(&self.run_ok(&["status", "--json"]).stdout).unwrap()
    }

    pub fn run_stdin(&self, args: &[&str], input: &[u8]) -> Output {
        let mut child = self
            .command(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child.stdin.take().unwrap().write_all(input).unwrap();
        child.wait_with_output().unwrap()
    }

    /// Waits until `ccide ARGS`, a `--json` listing, lists `n` items; returns them.
    pub fn wait_for_listing(&self, args: &[&str], n: usize) -> Vec<Value> {
        wait_for(&format!("{n} items in ccide {args:?}"), DEADLINE, || {
            let o = self.run(args);
            let v: Value = serde_json::from_slice(&o.stdout).ok()?;
            let list = v.as_array()?.clone();
            (list.len() == n).then_some(list)
        })
    }

    /// `serve` with `script` as the one checker, of `*.txt` files (compiler format, the file
    /// as its argument), and no built-in checker or language server.
    pub fn serve_checker(&self, script: &Path, extra: &[&str]) -> Server {
        let spec = format!("*.txt=compiler:{} {{file}}", script.display());
        let mut args = vec![
            "--no-default-checkers",
            "--no-default-lsp",
            "--checker",
            &spec,
        ];
        args.extend_from_slice(extra);
        self.serve(&args)
    }

    /// Starts `ccide serve` for the workspace with `extra` flags and waits for its lock file.
    pub fn serve(&self, extra: &[&str]) -> Server {
        Server::spawn(&mut self.serve_command(extra), &self.config())
    }

    /// The `ccide serve` command for the workspace and state directory, not yet started. Its
    /// clients get `TEST_PING_TIMEOUT` to answer a keepalive ping, unless `extra` gives
    /// `--ping-timeout`.
    pub fn serve_command(&self, extra: &[&str]) -> Command {
        let ws = self.ws();
        let state = self.state();
        let mut args = vec![
            "serve",
            "--workspace",
            ws.to_str().unwrap(),
            "--state-dir",
            state.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let mut c = self.command(&args);
        c.env("CCIDE_PING_TIMEOUT", TEST_PING_TIMEOUT);
        c
    }
}

/// A running `ccide serve`, stopped with SIGTERM on drop.
pub struct Server {
    pub child: Option<Child>,
    pub port: u16,
    pub token: String,
    pub lock_path: PathBuf,
    pub lock: Value,
    pub stderr_path: PathBuf,
}

impl Server {
    pub fn spawn(cmd: &mut Command, config: &Path) -> Server {
        static N: AtomicU64 = AtomicU64::new(0);
        let stderr_path = config.join(format!(
            "../serve-{}.log",
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let log = std::fs::File::create(&stderr_path).unwrap();
        let ide = config.join("ide");
        let before: Vec<PathBuf> = list_locks(&ide);
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn ccide serve");
        let pid = child.id();
        let (lock_path, lock) = wait_for("the lock file", DEADLINE, || {
            if let Ok(Some(status)) = child.try_wait() {
                panic!(
                    "ccide serve exited with {status}: {}",
                    std::fs::read_to_string(&stderr_path).unwrap_or_default()
                );
            }
            for p in list_locks(&ide) {
                let Ok(text) = std::fs::read_to_string(&p) else {
                    continue;
                };
                let Ok(v) = serde_json::from_str::<Value>(&text) else {
                    continue;
                };
                if v["pid"] == json!(pid) && (!before.contains(&p) || v["pid"] == json!(pid)) {
                    return Some((p, v));
                }
            }
            None
        });
        let port = lock_path
            .file_stem()
            .unwrap()
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        Server {
            child: Some(child),
            port,
            token: lock["authToken"].as_str().unwrap().to_string(),
            lock_path,
            lock,
            stderr_path,
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().unwrap().id()
    }

    pub fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .args([&format!("-{sig}"), &self.pid().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{sig} failed");
    }

    /// Sends `sig` and waits for the process to exit; returns its exit code.
    pub fn stop_with(&mut self, sig: &str) -> Option<i32> {
        self.signal(sig);
        let mut child = self.child.take().unwrap();
        let status = wait_for("ccide serve to exit", DEADLINE, || {
            child.try_wait().unwrap()
        });
        status.code()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.stderr_path).unwrap_or_default()
    }

    pub fn connect(&self) -> Client {
        Client::connect(self.port, &self.token)
    }

    /// A connected client that completed initialize, initialized, ide_connected and
    /// tools/list, as the CLI does. Its setup settles about 250 ms later: until then a
    /// selection or mention is held for it and comes with its greeting, and
    /// `diagnostics_changed` does not reach it; see `ready_client`.
    pub fn client(&self) -> Client {
        let mut c = self.connect();
        c.handshake();
        c
    }

    /// A `client` whose setup has settled: from now on it receives notifications as they
    /// happen, and counts as reached in what `select` and `mention` report.
    pub fn ready_client(&self) -> Client {
        let c = self.client();
        self.wait_ready();
        c
    }

    /// One request on the control socket, as ccide's commands send them.
    pub fn control(&self, request: &Value) -> Value {
        use std::io::{BufRead, BufReader};
        let path = self.lock["ccide"]["control"]
            .as_str()
            .expect("a ccide lock");
        let mut s = std::os::unix::net::UnixStream::connect(path).unwrap();
        s.write_all(format!("{request}\n").as_bytes()).unwrap();
        let mut line = String::new();
        BufReader::new(s).read_line(&mut line).unwrap();
        serde_json::from_str(&line).unwrap()
    }

    /// Waits until every initialized client's setup has settled (`ready` in status).
    pub fn wait_ready(&self) {
        wait_for("clients ready", DEADLINE, || {
            let status = self.control(&json!({"cmd": "status"}));
            let clients = status["status"]["clients"].as_array()?.clone();
            clients
                .iter()
                .all(|c| c["initialized"] != true || c["ready"] == true)
                .then_some(())
        });
    }

    pub fn http(&self, head: &str) -> (u16, String) {
        raw_http(self.port, head)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = Command::new("kill").arg(c.id().to_string()).status();
            let end = Instant::now() + Duration::from_secs(5);
            while Instant::now() < end {
                if let Ok(Some(_)) = c.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

pub fn list_locks(dir: &Path) -> Vec<PathBuf> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.flatten()
                .map(|e| e.path())
                .filter(|p| p.extension().is_some_and(|e| e == "lock"))
                .collect()
        })
        .unwrap_or_default()
}

/// Sends a raw HTTP request head and returns the status code and the whole response.
pub fn raw_http(port: u16, head: &str) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(DEADLINE)).unwrap();
    s.write_all(head.as_bytes()).unwrap();
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, text)
}

/// An upgrade request head as the CLI sends it, with the given token header line.
pub fn upgrade_head(port: u16, extra_headers: &str) -> String {
    format!(
        "GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Protocol: mcp\r\n{extra_headers}\r\n"
    )
}

/// A WebSocket connection upgraded by hand and left raw: the test writes frames itself (see
/// `wire::frame`) and reads them with `wire::read_frame`, or never reads at all.
pub fn raw_client(port: u16, token: &str) -> TcpStream {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(DEADLINE)).unwrap();
    let head = upgrade_head(
        port,
        &format!("X-Claude-Code-Ide-Authorization: {token}\r\n"),
    );
    s.write_all(head.as_bytes()).unwrap();
    let mut buf = Vec::new();
    let mut b = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        assert_eq!(s.read(&mut b).unwrap(), 1, "the upgrade answer");
        buf.push(b[0]);
    }
    assert!(
        buf.starts_with(b"HTTP/1.1 101"),
        "{:?}",
        String::from_utf8_lossy(&buf)
    );
    s
}

/// A WebSocket client over a real socket. By default it answers the server's keepalive pings
/// like the CLI does, and keeps notifications aside until asked for.
pub struct Client {
    pub ws: WebSocket<TcpStream>,
    pub answer_pings: bool,
    /// How many of the server's keepalive pings it has answered.
    pub pings_answered: u64,
    next_id: u64,
    /// Messages received while waiting for something else.
    pub backlog: VecDeque<Value>,
    pub subprotocol: Option<String>,
}

impl Client {
    pub fn connect(port: u16, token: &str) -> Client {
        Self::connect_with(port, &[("X-Claude-Code-Ide-Authorization", token)])
            .expect("websocket connect")
    }

    pub fn connect_with(port: u16, headers: &[(&str, &str)]) -> Result<Client, tungstenite::Error> {
        let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream.set_read_timeout(Some(DEADLINE)).unwrap();
        let mut req = format!("ws://127.0.0.1:{port}/")
            .into_client_request()
            .unwrap();
        req.headers_mut().insert(
            "Sec-WebSocket-Protocol",
            http::HeaderValue::from_static("mcp"),
        );
        for (k, v) in headers {
            req.headers_mut().insert(
                http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
                http::HeaderValue::from_str(v).unwrap(),
            );
        }
        let (ws, resp) = match tungstenite::client::client(req, stream) {
            Ok(x) => x,
            Err(tungstenite::HandshakeError::Failure(e)) => return Err(e),
            Err(e) => panic!("handshake: {e}"),
        };
        let subprotocol = resp
            .headers()
            .get("Sec-WebSocket-Protocol")
            .map(|v| v.to_str().unwrap().to_string());
        Ok(Client {
            ws,
            answer_pings: true,
            pings_answered: 0,
            next_id: 0,
            backlog: VecDeque::new(),
            subprotocol,
        })
    }

    pub fn send_text(&mut self, text: &str) {
        self.ws.send(Message::Text(text.into())).unwrap();
    }

    pub fn send(&mut self, v: &Value) {
        self.send_text(&v.to_string());
    }

    /// Reads the next JSON message from the socket (not the backlog), answering pings.
    fn read_raw(&mut self, limit: Duration) -> Option<Value> {
        let end = Instant::now() + limit;
        loop {
            // Answered pings must not extend the wait: re-arm the timeout with what is left.
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            if let Some(v) = self.read_frame(left) {
                return Some(v);
            }
        }
    }

    /// Reads one frame within `limit`: the JSON message it holds, or None when it was something
    /// else (a keepalive ping, answered) or nothing came.
    fn read_frame(&mut self, limit: Duration) -> Option<Value> {
        self.ws.get_mut().set_read_timeout(Some(limit)).unwrap();
        match self.ws.read() {
            Ok(Message::Text(t)) => {
                let v: Value = serde_json::from_str(t.as_str()).expect("server sent JSON");
                if self.answer_pings && v["method"] == "ping" && v.get("id").is_some() {
                    let reply = json!({"jsonrpc":"2.0","id":v["id"],"result":{}});
                    self.send(&reply);
                    self.pings_answered += 1;
                    return None;
                }
                Some(v)
            }
            Ok(_) => None,
            Err(tungstenite::Error::Io(e)) if read_again(&e) => None,
            Err(e) => panic!("websocket read: {e}"),
        }
    }

    /// The next text frame exactly as it came off the wire (no ping answering).
    pub fn recv_raw_text(&mut self) -> String {
        self.ws.get_mut().set_read_timeout(Some(DEADLINE)).unwrap();
        loop {
            match self.ws.read() {
                Ok(Message::Text(t)) => return t.to_string(),
                Ok(_) => {}
                Err(tungstenite::Error::Io(e)) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => panic!("a text frame: {e}"),
            }
        }
    }

    /// The next message (backlog first), or panic after the deadline.
    pub fn recv(&mut self) -> Value {
        if let Some(v) = self.backlog.pop_front() {
            return v;
        }
        self.read_raw(DEADLINE)
            .expect("a message within the deadline")
    }

    /// The next message that satisfies `pred`; others go to the backlog.
    pub fn recv_where(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        if let Some(i) = self.backlog.iter().position(&pred) {
            return self.backlog.remove(i).unwrap();
        }
        let end = Instant::now() + DEADLINE;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                panic!(
                    "no message matching {what} within {DEADLINE:?}; backlog: {:?}",
                    self.backlog
                );
            }
            if let Some(v) = self.read_raw(left) {
                if pred(&v) {
                    return v;
                }
                self.backlog.push_back(v);
            }
        }
    }

    /// What the server sent before its answer to a `ping` request sent now (the backlog first).
    /// The server answers a client in order, so this is everything it had for this client when
    /// it read the ping: the proof that something was not sent, without waiting to see.
    pub fn before_ping(&mut self) -> Vec<Value> {
        let id = self.send_request("ping", json!({}));
        let mut before: Vec<Value> = self.backlog.drain(..).collect();
        loop {
            let v = self
                .read_raw(DEADLINE)
                .unwrap_or_else(|| panic!("no answer to ping {id} within {DEADLINE:?}"));
            if v.get("method").is_none() && v["id"] == id {
                assert_eq!(v["result"], json!({}), "{v}");
                return before;
            }
            before.push(v);
        }
    }

    /// Reads on, answering the server's keepalive pings, until it has answered `n` more of them;
    /// anything else goes to the backlog.
    pub fn answer_keepalive_pings(&mut self, n: u64) {
        let target = self.pings_answered + n;
        let end = Instant::now() + DEADLINE;
        while self.pings_answered < target {
            let left = end.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "no keepalive ping within {DEADLINE:?}");
            if let Some(v) = self.read_frame(left) {
                self.backlog.push_back(v);
            }
        }
    }

    /// Whatever arrives within `limit` (answering pings meanwhile). Only for a window that is
    /// the behaviour under test; `before_ping` proves that nothing came.
    pub fn drain(&mut self, limit: Duration) -> Vec<Value> {
        let mut out: Vec<Value> = self.backlog.drain(..).collect();
        let end = Instant::now() + limit;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return out;
            }
            if let Some(v) = self.read_raw(left) {
                out.push(v);
            }
        }
    }

    pub fn notification(&mut self, method: &str) -> Value {
        self.recv_where(method, |v| v["method"] == method && v.get("id").is_none())
    }

    /// The response to request `id`.
    pub fn response(&mut self, id: &Value) -> Value {
        let id = id.clone();
        self.recv_where(&format!("the response to id {id}"), move |v| {
            v.get("method").is_none() && v["id"] == id
        })
    }

    pub fn send_request(&mut self, method: &str, params: Value) -> Value {
        let id = json!(self.next_id);
        self.next_id += 1;
        self.send(&json!({"jsonrpc":"2.0","id":id,"method":method,"params":params}));
        id
    }

    pub fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.send_request(method, params);
        self.response(&id)
    }

    /// The names `tools/list` lists, in its order.
    pub fn tool_names(&mut self) -> Vec<String> {
        let r = self.request("tools/list", json!({}));
        r["result"]["tools"]
            .as_array()
            .unwrap_or_else(|| panic!("no tools in {r}"))
            .iter()
            .map(|t| t["name"].as_str().unwrap().to_string())
            .collect()
    }

    /// `tools/call`, returning the whole response.
    pub fn call(&mut self, tool: &str, args: Value) -> Value {
        self.request(
            "tools/call",
            json!({"name": tool, "arguments": args, "_meta": {"progressToken": 7}}),
        )
    }

    /// `tools/call`, returning the texts of the result's content items.
    pub fn call_texts(&mut self, tool: &str, args: Value) -> Vec<String> {
        let r = self.call(tool, args);
        texts(&r)
    }

    /// The CLI's opening sequence: initialize (id 0), initialized, ide_connected, tools/list.
    pub fn handshake(&mut self) {
        let r = self.request(
            "initialize",
            json!({"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"claude-code","version":"2.1.330"}}),
        );
        assert!(
            r["result"]["serverInfo"]["name"] == "Claude Code ccide MCP",
            "{r}"
        );
        self.send(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
        self.send(
            &json!({"jsonrpc":"2.0","method":"ide_connected","params":{"pid": std::process::id()}}),
        );
        let tools = self.request("tools/list", json!({}));
        assert!(tools["result"]["tools"].is_array());
    }

    /// Waits for the server to close the connection; returns the close code and reason.
    pub fn closed(&mut self) -> (Option<u16>, String) {
        self.ws.get_mut().set_read_timeout(Some(DEADLINE)).unwrap();
        loop {
            match self.ws.read() {
                Ok(Message::Close(Some(f))) => return (Some(f.code.into()), f.reason.to_string()),
                Ok(Message::Close(None)) => return (None, String::new()),
                Ok(Message::Text(t)) => {
                    let v: Value = serde_json::from_str(t.as_str()).unwrap();
                    if self.answer_pings && v["method"] == "ping" {
                        let _ = self.ws.send(Message::Text(
                            json!({"jsonrpc":"2.0","id":v["id"],"result":{}})
                                .to_string()
                                .into(),
                        ));
                        self.pings_answered += 1;
                    }
                }
                Ok(_) => {}
                Err(tungstenite::Error::ConnectionClosed | tungstenite::Error::AlreadyClosed) => {
                    return (None, String::new());
                }
                Err(tungstenite::Error::Io(e)) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(tungstenite::Error::Io(e)) if read_again(&e) => {
                    panic!("connection not closed within {DEADLINE:?}")
                }
                Err(_) => return (None, String::new()),
            }
        }
    }
}

/// The texts of a tools/call response's content items.
pub fn texts(response: &Value) -> Vec<String> {
    response["result"]["content"]
        .as_array()
        .unwrap_or_else(|| panic!("no content in {response}"))
        .iter()
        .map(|c| c["text"].as_str().unwrap_or("").to_string())
        .collect()
}

/// The JSON held by the first text item of a tools/call response.
pub fn json_text(response: &Value) -> Value {
    serde_json::from_str(&texts(response)[0]).unwrap()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// `p` as a `&str`: every path a test makes is UTF-8.
pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The permission bits of a file.
/// Whether the tests run as root (the tests that act as another user need it).
pub fn is_root() -> bool {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0)
}

pub fn mode(p: &Path) -> u32 {
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

/// Whether a process runs (a zombie, exited but not yet reaped, does not).
pub fn process_alive(pid: u64) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
        && !std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .unwrap_or_default()
            .contains(") Z ")
}

/// Whether a tools/call response is a tool error (`isError`).
pub fn is_error(response: &Value) -> bool {
    response["result"]["isError"] == true
}

/// getDiagnostics with `args`, returning the JSON of its answer.
/// A path as a `file://` URI the way the CLI writes one: the path as it is.
pub fn uri(p: &Path) -> String {
    format!("file://{}", p.display())
}

/// A path as a `file://` URI the way editors write one: percent-encoded.
pub fn file_uri(p: &Path) -> String {
    let mut s = String::from("file://");
    for &c in p.to_str().unwrap().as_bytes() {
        if c.is_ascii_alphanumeric() || b"/-._~".contains(&c) {
            s.push(c as char);
        } else {
            s.push_str(&format!("%{c:02X}"));
        }
    }
    s
}

/// Sends openDiff for `path` as the CLI does (with a progress token); the request's id.
pub fn open_diff(c: &mut Client, path: &Path, contents: &str, tab: &str) -> Value {
    let p = s(path);
    c.send_request(
        "tools/call",
        json!({"name":"openDiff","arguments":{"old_file_path":p,"new_file_path":p,"new_file_contents":contents,"tab_name":tab},"_meta":{"progressToken":1}}),
    )
}

/// Waits until the server lists `n` pending diffs (`ccide diff --json`).
pub fn wait_pending(sb: &Sandbox, n: usize) -> Vec<Value> {
    sb.wait_for_listing(&["diff", "--json"], n)
}

pub fn diagnostics(c: &mut Client, args: Value) -> Value {
    json_text(&c.call("getDiagnostics", args))
}

/// A `selection_changed` payload (ccide-protocol(7) §6.1); positions are 0-based
/// (line, character).
pub fn selection(path: &Path, start: (u64, u64), end: (u64, u64), text: &str) -> Value {
    json!({
        "text": text,
        "filePath": s(path),
        "fileUrl": format!("file://{}", path.display()),
        "selection": {
            "start": {"line": start.0, "character": start.1},
            "end": {"line": end.0, "character": end.1},
            "isEmpty": start == end,
        },
    })
}

// ---------------------------------------------------------------------------------------------
// LSP over a process's standard streams.

/// One Content-Length framed message, as LSP writes it.
pub fn lsp_frame(v: &Value) -> Vec<u8> {
    let body = v.to_string();
    format!("Content-Length: {}\r\n\r\n{body}", body.len()).into_bytes()
}

/// `--lsp` for src/langservers' scriptable fake language server on `pattern`, with its
/// `flags`; it logs what it gets to `log`.
pub fn fake_lsp(pattern: &str, flags: &str, log: &Path) -> String {
    let fake = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/src/langservers/fake_server.py"
    );
    format!(
        "{pattern}={} '{fake}' '{flags}' '{}'",
        python3().display(),
        log.display()
    )
}

/// Reads one framed message, checking the header is exactly what the base protocol says;
/// None at the end of the stream.
pub fn read_lsp_frame(r: &mut impl std::io::BufRead) -> Option<Value> {
    let mut head = String::new();
    r.read_line(&mut head).ok().filter(|n| *n > 0)?;
    let n: usize = head
        .strip_prefix("Content-Length: ")
        .and_then(|h| h.strip_suffix("\r\n"))
        .unwrap_or_else(|| panic!("bad header line {head:?}"))
        .parse()
        .unwrap();
    let mut blank = String::new();
    r.read_line(&mut blank).unwrap();
    assert_eq!(blank, "\r\n");
    let mut body = vec![0; n];
    r.read_exact(&mut body).unwrap();
    Some(serde_json::from_slice(&body).expect("a JSON message body"))
}

/// One end of an LSP connection over any byte streams (a process's stdio, a control socket
/// turned to LSP), driven as a client drives it. What the other end writes is read on a
/// thread as it comes; messages not yet asked for wait in `backlog`.
pub struct LspPeer {
    writer: Option<Box<dyn Write + Send>>,
    /// Each message read; None once the stream ended.
    rx: std::sync::mpsc::Receiver<Option<Value>>,
    pub backlog: VecDeque<Value>,
    next_id: u64,
    ended: bool,
    /// A file whose text a failure shows (the process's stderr).
    pub stderr_path: Option<PathBuf>,
}

impl LspPeer {
    pub fn new(reader: impl Read + Send + 'static, writer: impl Write + Send + 'static) -> LspPeer {
        let mut reader = std::io::BufReader::new(reader);
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            loop {
                let v = read_lsp_frame(&mut reader);
                let end = v.is_none();
                if tx.send(v).is_err() || end {
                    return;
                }
            }
        });
        LspPeer {
            writer: Some(Box::new(writer)),
            rx,
            backlog: VecDeque::new(),
            next_id: 0,
            ended: false,
            stderr_path: None,
        }
    }

    pub fn stderr(&self) -> String {
        self.stderr_path
            .as_ref()
            .and_then(|p| std::fs::read_to_string(p).ok())
            .unwrap_or_default()
    }

    pub fn send(&mut self, v: &Value) {
        let w = self.writer.as_mut().expect("the writing end still open");
        w.write_all(&lsp_frame(v)).unwrap();
        w.flush().unwrap();
    }

    pub fn notify(&mut self, method: &str, params: Value) {
        self.send(&json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    /// Sends a request with the next id (from 0, as the CLI counts) and returns the id.
    pub fn send_request(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    /// The next message satisfying `pred`; the others are kept for later.
    pub fn recv_where(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        if let Some(i) = self.backlog.iter().position(&pred) {
            return self.backlog.remove(i).unwrap();
        }
        let end = Instant::now() + DEADLINE;
        while !self.ended {
            let left = end.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(Some(v)) if pred(&v) => return v,
                Ok(Some(v)) => self.backlog.push_back(v),
                Ok(None) => self.ended = true,
                Err(_) => panic!(
                    "no message matching {what} within {DEADLINE:?}; backlog {:?}; stderr:\n{}",
                    self.backlog,
                    self.stderr()
                ),
            }
        }
        panic!(
            "the stream ended waiting for {what}; backlog {:?}; stderr:\n{}",
            self.backlog,
            self.stderr()
        )
    }

    /// The response to the request `id`.
    pub fn answer(&mut self, id: u64) -> Value {
        self.recv_where(&format!("the response to {id}"), |v| {
            v["id"] == id && v.get("method").is_none()
        })
    }

    /// The whole response to a request.
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.send_request(method, params);
        self.answer(id)
    }

    /// Closes the writing end (a process's standard input), as a client that ends does.
    pub fn close(&mut self) {
        self.writer.take();
    }

    /// Whether the other end ended the stream within `limit`; what came before is kept.
    pub fn ends_within(&mut self, limit: Duration) -> bool {
        let end = Instant::now() + limit;
        while !self.ended {
            match self
                .rx
                .recv_timeout(end.saturating_duration_since(Instant::now()))
            {
                Ok(Some(v)) => self.backlog.push_back(v),
                Ok(None) => self.ended = true,
                Err(_) => return false,
            }
        }
        true
    }
}

/// A process that speaks LSP on its standard streams (`ccide lsp`, `ccide lsp-bridge`): an
/// `LspPeer` over its stdio; killed on drop.
pub struct LspProcess {
    pub child: Child,
    peer: LspPeer,
}

impl std::ops::Deref for LspProcess {
    type Target = LspPeer;
    fn deref(&self) -> &LspPeer {
        &self.peer
    }
}

impl std::ops::DerefMut for LspProcess {
    fn deref_mut(&mut self) -> &mut LspPeer {
        &mut self.peer
    }
}

impl LspProcess {
    /// Starts `cmd` with its stderr in `stderr_path`.
    pub fn spawn(cmd: &mut Command, stderr_path: PathBuf) -> LspProcess {
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&stderr_path).unwrap())
            .spawn()
            .expect("spawn the LSP process");
        let mut peer = LspPeer::new(child.stdout.take().unwrap(), child.stdin.take().unwrap());
        peer.stderr_path = Some(stderr_path);
        LspProcess { child, peer }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Closes its standard input, as a client that ends does.
    pub fn close_stdin(&mut self) {
        self.peer.close();
    }

    /// Waits for it to exit; its exit code.
    pub fn wait_exit(&mut self, what: &str) -> Option<i32> {
        let child = &mut self.child;
        wait_for(what, DEADLINE, || child.try_wait().unwrap()).code()
    }
}

impl Drop for LspProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Waits for a hook to end, at most `limit`.
pub fn finished(child: Child, limit: Duration) -> Output {
    let mut child = child;
    wait_for("the hook to exit", limit, || child.try_wait().unwrap());
    child.wait_with_output().unwrap()
}

/// Runs a hook to its end: it exits 0 and says nothing on standard error, whatever happens.
pub fn hook(sb: &Sandbox, event: &str, input: &Value) -> Output {
    let o = finished(sb.hook_child(event, input), DEADLINE);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(stderr(&o), "");
    o
}
