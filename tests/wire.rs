//! A WebSocket client spoken by hand, for the tests that send what tungstenite refuses to send
//! (invalid UTF-8 text, bad close codes, reserved bits, oversized claims) or watch the server
//! from outside while something else goes on: frames written and read by hand (RFC 6455
//! section 5), `Conn` (any frame; the server's keepalive pings answered or not), `Watch` (a
//! well-behaved client that keeps asking), and small helpers for the control socket, the
//! server's liveness and a `serve` that must refuse to start.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::util::*;
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------------
// WebSocket frames written and read by hand (RFC 6455 section 5).

/// How soon a well-behaved client is served while others misbehave, and a refusal comes: the
/// misbehaviour, when it held a client up, did so for the 5 s handshake timeout or far longer
/// (a 1 MiB path resolved in quadratic time); a debug build at a load average of 15 on 2 cores
/// needs more than 1 s for some of it.
pub const PROMPTLY: Duration = Duration::from_secs(3);

pub const FIN: u8 = 0x80;
pub const RSV1: u8 = 0x40;
pub const RSV2: u8 = 0x20;
pub const RSV3: u8 = 0x10;
pub const CONT: u8 = 0x0;
pub const TEXT: u8 = 0x1;
pub const BINARY: u8 = 0x2;
pub const CLOSE: u8 = 0x8;
pub const PING: u8 = 0x9;
pub const PONG: u8 = 0xA;
pub const MASK: [u8; 4] = [0x9c, 0x21, 0x5e, 0x07];
pub const MIB: usize = 1 << 20;

/// A masked frame, as a client must send it; `first` holds FIN, the RSV bits and the opcode.
pub fn frame(first: u8, payload: &[u8]) -> Vec<u8> {
    encode(first, payload, true)
}

pub fn encode(first: u8, payload: &[u8], masked: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(payload.len() + 14);
    out.push(first);
    let bit = if masked { 0x80 } else { 0 };
    match payload.len() {
        n if n < 126 => out.push(bit | n as u8),
        n if n <= 0xffff => {
            out.push(bit | 126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
        n => {
            out.push(bit | 127);
            out.extend_from_slice(&(n as u64).to_be_bytes());
        }
    }
    if masked {
        out.extend_from_slice(&MASK);
        out.extend(payload.iter().enumerate().map(|(i, b)| b ^ MASK[i % 4]));
    } else {
        out.extend_from_slice(payload);
    }
    out
}

/// Only the header of a masked frame that claims `len` bytes of payload.
pub fn header_claiming(first: u8, len: u64) -> Vec<u8> {
    let mut out = vec![first, 0x80 | 127];
    out.extend_from_slice(&len.to_be_bytes());
    out.extend_from_slice(&MASK);
    out
}

pub fn close_payload(code: u16, reason: &[u8]) -> Vec<u8> {
    let mut p = code.to_be_bytes().to_vec();
    p.extend_from_slice(reason);
    p
}

/// One frame from the server: its first byte and its (unmasked) payload.
pub fn read_frame(s: &mut impl Read) -> std::io::Result<(u8, Vec<u8>)> {
    let mut h = [0u8; 2];
    s.read_exact(&mut h)?;
    let mut len = u64::from(h[1] & 0x7f);
    if len == 126 {
        let mut b = [0u8; 2];
        s.read_exact(&mut b)?;
        len = u64::from(u16::from_be_bytes(b));
    } else if len == 127 {
        let mut b = [0u8; 8];
        s.read_exact(&mut b)?;
        len = u64::from_be_bytes(b);
    }
    let mut mask = None;
    if h[1] & 0x80 != 0 {
        let mut m = [0u8; 4];
        s.read_exact(&mut m)?;
        mask = Some(m);
    }
    let mut payload = vec![0u8; len as usize];
    s.read_exact(&mut payload)?;
    if let Some(m) = mask {
        for (i, b) in payload.iter_mut().enumerate() {
            *b ^= m[i % 4];
        }
    }
    Ok((h[0], payload))
}

pub fn auth(token: &str) -> String {
    format!("X-Claude-Code-Ide-Authorization: {token}\r\n")
}

/// Writes `bytes` (a request head, maybe followed by frames) on a new connection and reads the
/// response head byte by byte, so that nothing after it is consumed.
pub fn send_head(port: u16, bytes: &[u8]) -> (TcpStream, u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(DEADLINE)).unwrap();
    s.write_all(bytes).unwrap();
    let mut buf = Vec::new();
    let mut b = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        match s.read(&mut b) {
            Ok(1) => buf.push(b[0]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            _ => break,
        }
    }
    let text = String::from_utf8_lossy(&buf).into_owned();
    (s, status_of(&text), text)
}

pub fn status_of(response: &str) -> u16 {
    response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

/// Writes `bytes` and reads the whole answer until the server closes; (status, text).
pub fn http_all(port: u16, bytes: &[u8]) -> (u16, String) {
    let mut s = TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(DEADLINE)).unwrap();
    let _ = s.write_all(bytes);
    let mut buf = Vec::new();
    let _ = s.read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf).into_owned();
    (status_of(&text), text)
}

/// What the reader thread of a `Conn` saw.
pub enum In {
    Text(String),
    Close(Option<u16>),
    Pong(Vec<u8>),
    End,
}

/// A WebSocket connection spoken by hand: any frame can be written, and a thread of its own
/// reads, answers the server's keepalive `ping` requests (unless told not to) and WebSocket
/// pings, and echoes a close frame.
pub struct Conn {
    pub sock: TcpStream,
    pub writer: Arc<Mutex<TcpStream>>,
    rx: Receiver<In>,
    pub kept: VecDeque<Value>,
    pub pongs: Vec<Vec<u8>>,
    /// Set once the server ended the connection: the close code it sent, if any.
    pub closed: Option<Option<u16>>,
    /// How many keepalive pings the reader thread has answered.
    pings: Arc<AtomicU64>,
}

impl Conn {
    pub fn open(port: u16, token: &str, answer_pings: bool) -> Conn {
        let (s, status, text) = send_head(port, upgrade_head(port, &auth(token)).as_bytes());
        assert_eq!(status, 101, "{text}");
        Conn::over(s, answer_pings)
    }

    pub fn over(s: TcpStream, answer_pings: bool) -> Conn {
        s.set_read_timeout(None).unwrap();
        let writer = Arc::new(Mutex::new(s.try_clone().unwrap()));
        let pings = Arc::new(AtomicU64::new(0));
        let answered = answer_pings.then(|| pings.clone());
        let rx = spawn_reader(s.try_clone().unwrap(), writer.clone(), answered);
        Conn {
            sock: s,
            writer,
            rx,
            kept: VecDeque::new(),
            pongs: Vec::new(),
            closed: None,
            pings,
        }
    }

    pub fn write(&self, bytes: &[u8]) -> std::io::Result<()> {
        self.writer.lock().unwrap().write_all(bytes)
    }

    pub fn text(&self, t: &str) {
        self.write(&frame(FIN | TEXT, t.as_bytes()))
            .expect("send a text frame");
    }

    pub fn send(&self, v: &Value) {
        self.text(&v.to_string());
    }

    pub fn request(&mut self, id: Value, method: &str, params: Value) -> Value {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        self.response(&id, DEADLINE)
    }

    pub fn call(&mut self, id: Value, tool: &str, args: Value) -> Value {
        self.request(
            id,
            "tools/call",
            json!({"name": tool, "arguments": args, "_meta": {"progressToken": 1}}),
        )
    }

    /// The MCP opening sequence of the CLI.
    pub fn handshake(&mut self) {
        let r = self.request(
            json!(0),
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "claude-code", "version": "2.1.330"}}),
        );
        assert_eq!(
            r["result"]["serverInfo"]["name"], "Claude Code ccide MCP",
            "{r}"
        );
        self.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    }

    /// The next JSON message from the server (kept ones first), or None after `limit` or once
    /// the connection has ended.
    pub fn next(&mut self, limit: Duration) -> Option<Value> {
        match self.kept.pop_front() {
            Some(v) => Some(v),
            None => self.read(limit),
        }
    }

    /// The next JSON message off the wire, noting pongs and the end of the connection.
    pub fn read(&mut self, limit: Duration) -> Option<Value> {
        let end = Instant::now() + limit;
        while self.closed.is_none() {
            let left = end.saturating_duration_since(Instant::now());
            match self.rx.recv_timeout(left) {
                Ok(In::Text(t)) => {
                    return Some(serde_json::from_str(&t).expect("the server sends JSON"));
                }
                Ok(In::Pong(p)) => self.pongs.push(p),
                Ok(In::Close(code)) => self.closed = Some(code),
                Ok(In::End) => self.closed = Some(None),
                Err(_) => return None,
            }
        }
        None
    }

    /// The response to request `id`; everything else read meanwhile is kept.
    pub fn response(&mut self, id: &Value, limit: Duration) -> Value {
        self.try_response(id, limit).unwrap_or_else(|| {
            panic!(
                "no response to id {id} within {limit:?} (connection ended: {:?}); kept: {:?}",
                self.closed, self.kept
            )
        })
    }

    pub fn try_response(&mut self, id: &Value, limit: Duration) -> Option<Value> {
        let is_it = |v: &Value| v.get("method").is_none() && v["id"] == *id;
        if let Some(i) = self.kept.iter().position(is_it) {
            return self.kept.remove(i);
        }
        let end = Instant::now() + limit;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() || self.closed.is_some() {
                return None;
            }
            match self.read(left) {
                Some(v) if is_it(&v) => return Some(v),
                Some(v) => self.kept.push_back(v),
                None => {}
            }
        }
    }

    /// What the server sent before its answer to a `ping` with this id, sent now (kept ones
    /// first): everything it had for this connection when it read the ping, since it answers
    /// in order. The proof that nothing else came, without waiting to see.
    pub fn before_ping(&mut self, id: Value) -> Vec<Value> {
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": "ping"}));
        let mut before: Vec<Value> = self.kept.drain(..).collect();
        loop {
            let v = self.read(DEADLINE).unwrap_or_else(|| {
                panic!(
                    "no answer to ping {id} (connection ended: {:?}); before it: {before:?}",
                    self.closed
                )
            });
            if v.get("method").is_none() && v["id"] == id {
                assert_eq!(v["result"], json!({}), "{v}");
                return before;
            }
            before.push(v);
        }
    }

    /// How many of the server's keepalive pings this connection has answered.
    pub fn pings_answered(&self) -> u64 {
        self.pings.load(Ordering::SeqCst)
    }

    /// Waits for the server to end the connection; the close code it sent (None: no close
    /// frame, only the end of the TCP stream).
    pub fn ended(&mut self, limit: Duration) -> Option<u16> {
        let end = Instant::now() + limit;
        while self.closed.is_none() {
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                panic!("the server did not end the connection within {limit:?}");
            }
            if let Some(v) = self.read(left) {
                self.kept.push_back(v);
            }
        }
        self.closed.unwrap()
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        let _ = self.sock.shutdown(Shutdown::Both);
    }
}

/// Reads `s` on a thread of its own; answers the server's keepalive pings when given a counter
/// of the answers.
pub fn spawn_reader(
    mut s: TcpStream,
    writer: Arc<Mutex<TcpStream>>,
    answer_pings: Option<Arc<AtomicU64>>,
) -> Receiver<In> {
    let (tx, rx) = channel();
    std::thread::spawn(move || {
        let mut message: Vec<u8> = Vec::new();
        loop {
            let Ok((first, payload)) = read_frame(&mut s) else {
                let _ = tx.send(In::End);
                return;
            };
            let sent = match first & 0x0f {
                TEXT | BINARY | CONT => {
                    message.extend_from_slice(&payload);
                    if first & FIN == 0 {
                        continue;
                    }
                    let text = String::from_utf8(std::mem::take(&mut message))
                        .expect("the server sends UTF-8");
                    if let Some(answered) = &answer_pings
                        && text.contains("\"ping\"")
                    {
                        let v: Value = serde_json::from_str(&text).expect("JSON");
                        if v["method"] == "ping" && v.get("id").is_some() {
                            let reply = json!({"jsonrpc": "2.0", "id": v["id"], "result": {}});
                            let bytes = frame(FIN | TEXT, reply.to_string().as_bytes());
                            let _ = writer.lock().unwrap().write_all(&bytes);
                            answered.fetch_add(1, Ordering::SeqCst);
                            continue;
                        }
                    }
                    tx.send(In::Text(text))
                }
                CLOSE => {
                    let code =
                        (payload.len() >= 2).then(|| u16::from_be_bytes([payload[0], payload[1]]));
                    let echo = frame(FIN | CLOSE, &payload[..payload.len().min(2)]);
                    let _ = writer.lock().unwrap().write_all(&echo);
                    tx.send(In::Close(code))
                }
                PING => {
                    let _ = writer
                        .lock()
                        .unwrap()
                        .write_all(&frame(FIN | PONG, &payload));
                    Ok(())
                }
                PONG => tx.send(In::Pong(payload)),
                _ => Ok(()),
            };
            if sent.is_err() {
                return;
            }
        }
    });
    rx
}

// ---------------------------------------------------------------------------------------------
// A well-behaved client that keeps asking while something else goes on.

pub struct Watch {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<(Duration, usize)>,
}

/// Starts a client on its own thread that pings every ~50 ms and records its slowest answer.
pub fn watch(port: u16, token: &str) -> Watch {
    let stop = Arc::new(AtomicBool::new(false));
    let flag = stop.clone();
    let token = token.to_string();
    let (ready, is_ready) = channel();
    let handle = std::thread::spawn(move || {
        let mut c = Client::connect(port, &token);
        c.handshake();
        let _ = ready.send(());
        let (mut worst, mut n) = (Duration::ZERO, 0);
        while n == 0 || !flag.load(Ordering::SeqCst) {
            let t = Instant::now();
            let r = c.request("ping", json!({}));
            assert_eq!(r["result"], json!({}), "{r}");
            worst = worst.max(t.elapsed());
            n += 1;
            c.backlog.clear();
            std::thread::sleep(Duration::from_millis(50));
        }
        (worst, n)
    });
    is_ready
        .recv_timeout(DEADLINE)
        .expect("the well-behaved client connects");
    Watch { stop, handle }
}

impl Watch {
    /// Stops the watcher and insists it was answered `PROMPTLY` every time.
    pub fn check(self, during: &str) {
        self.stop.store(true, Ordering::SeqCst);
        let (worst, n) = self
            .handle
            .join()
            .unwrap_or_else(|_| panic!("the well-behaved client failed during {during}"));
        assert!(
            n >= 1,
            "the well-behaved client got no answer during {during}"
        );
        assert!(
            worst < PROMPTLY,
            "the well-behaved client waited {worst:?} for an answer during {during}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Small helpers.

/// One request on the control socket, answered by one line.
pub fn control(sb: &Sandbox, req: Value) -> Value {
    control_within(sb, req, DEADLINE).expect("an answer on the control socket")
}

pub fn control_within(sb: &Sandbox, req: Value, limit: Duration) -> Option<Value> {
    let mut sock = UnixStream::connect(sb.state().join("control.sock")).unwrap();
    sock.set_read_timeout(Some(limit)).unwrap();
    sock.write_all(format!("{req}\n").as_bytes()).unwrap();
    let mut line = String::new();
    BufReader::new(sock).read_line(&mut line).ok()?;
    Some(serde_json::from_str(&line).unwrap_or_else(|e| panic!("control answer {line:?}: {e}")))
}

pub fn status(sb: &Sandbox) -> Value {
    control(sb, json!({"cmd": "status"}))["status"].clone()
}

/// Fails unless the server process still runs and never panicked.
pub fn assert_alive(srv: &mut Server) {
    let child = srv.child.as_mut().unwrap();
    assert!(
        child.try_wait().unwrap().is_none(),
        "ccide serve exited: {}",
        srv.log()
    );
    assert!(!srv.log().contains("panicked"), "{}", srv.log());
}

/// Runs `ccide serve` that must refuse to start; its exit code and standard error.
pub fn serve_refused(sb: &Sandbox, extra: &[&str], env: &[(&str, &Path)]) -> (Option<i32>, String) {
    let (ws, state) = (sb.ws(), sb.state());
    let mut args = vec!["serve", "--workspace", s(&ws), "--state-dir", s(&state)];
    args.extend_from_slice(extra);
    let mut cmd = sb.command(&args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let end = Instant::now() + DEADLINE;
    let code = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st.code();
        }
        if Instant::now() > end {
            let _ = child.kill();
            let _ = child.wait();
            panic!("ccide serve {extra:?} started although it had to refuse");
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (code, err)
}

/// The key of an id: its JSON text after a parse, as both sides see it.
pub fn id_key(id: &Value) -> String {
    id.to_string()
}
