//! TCP, the HTTP upgrade and WebSocket frames. Knows nothing of JSON-RPC or MCP: it hands
//! each text message to a per-connection callback and writes what others queue in an `Outbox`.
//!
//! One acceptor thread owns the listener and every connection that has not finished its
//! upgrade (non-blocking, in one `poll`), so stalled handshakes cost no thread and cannot
//! starve a real client. Each upgraded connection then gets a thread of its own that waits in
//! `poll` on its socket and on a wake-up pipe, so queued replies leave at once.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use tungstenite::{Error as WsError, Message, Utf8Bytes, WebSocket};

use crate::proc::lock;
use crate::sys::{self, Interest, WakePipe};

/// Largest inbound message; above it the connection is closed with 1009.
pub const MAX_MESSAGE: usize = 64 << 20;
/// Largest upgrade request head we read before answering 431.
const MAX_HEAD: usize = 16 << 10;
/// Connections still in their upgrade at once; the oldest is dropped beyond this.
const MAX_PENDING: usize = 4096;
/// Messages read before queued output gets its turn.
const READS_PER_TURN: usize = 64;
/// Messages handed to the socket per turn.
const WRITES_PER_TURN: usize = 64;
/// Bytes of answers queued for a client above which its requests are no longer read: a client
/// that stops reading its answers is not allowed to make the server buffer without bound.
const MAX_BACKLOG: usize = 32 << 20;

pub struct Gate {
    pub token: String,
    /// Extra host names accepted in `Host` besides loopback (the `--host` address).
    pub extra_hosts: Vec<String>,
    /// Listening on every address (`--host 0.0.0.0 --allow-remote`): any IP literal is a fine
    /// `Host`; names still are not, since DNS rebinding needs a name.
    pub any_ip_host: bool,
    pub max_connections: usize,
    pub handshake_timeout: Duration,
    /// Set when the server is shutting down: upgrades are answered 503 from then on, so a
    /// client reconnecting at once is not handed a connection that is about to vanish.
    pub stopping: Arc<std::sync::atomic::AtomicBool>,
}

/// What the upper layer learns about a new connection.
pub struct Peer {
    pub addr: SocketAddr,
    pub user_agent: String,
}

/// How a connection ended, for the upper layer's cleanup and log line.
pub struct Ended {
    pub code: Option<u16>,
    pub reason: String,
}

pub enum Event<'a> {
    Text(&'a str),
    /// A binary frame whose payload is not UTF-8 (so cannot be JSON).
    NotUtf8,
    Ended(Ended),
}

pub type Handler = Box<dyn FnMut(Event) + Send>;
pub type OnOpen = dyn Fn(Arc<Outbox>, Peer) -> Handler + Send + Sync;

#[derive(Default)]
struct Queue {
    items: VecDeque<Utf8Bytes>,
    /// Bytes of the text messages in `items`.
    bytes: usize,
    /// A close to send before anything still queued (see `Outbox::close`).
    close: Option<(u16, String)>,
    ended: bool,
    /// The connection's thread waits in `poll` (see `Outbox::park`): only then does a message
    /// need the wake-up pipe. One queued by the thread itself (its own answers) needs none.
    parked: bool,
}

/// The sending half of one connection, shared with any thread that wants to write to it.
pub struct Outbox {
    queue: Mutex<Queue>,
    /// Wakes the connection's thread; None for an in-memory outbox (tests without a socket).
    wake: Option<WakePipe>,
    /// Bytes that show the peer at work (see `Metered`).
    progress: AtomicU64,
}

impl Outbox {
    fn new() -> io::Result<Outbox> {
        Ok(Outbox {
            queue: Mutex::new(Queue::default()),
            wake: Some(WakePipe::new()?),
            progress: AtomicU64::new(0),
        })
    }

    /// An outbox no socket drains: what is sent stays queued for `take_sent`.
    #[cfg(test)]
    pub fn memory() -> Arc<Outbox> {
        Arc::new(Outbox {
            queue: Mutex::new(Queue::default()),
            wake: None,
            progress: AtomicU64::new(0),
        })
    }

    /// How many bytes so far showed the peer at work, though it may not have answered a
    /// keepalive ping yet (ccide-protocol(7) §8): those it sent, and those it took off a full
    /// socket. A count that moved since the ping means the peer is alive.
    pub fn progress(&self) -> u64 {
        self.progress.load(Ordering::Relaxed)
    }

    /// Counts `n` bytes of progress, as the socket of a peer at work would.
    #[cfg(test)]
    pub fn progress_for_test(&self, n: u64) {
        self.progress.fetch_add(n, Ordering::Relaxed);
    }

    /// Everything queued so far, as text (a close last, as `close CODE REASON`), oldest first.
    #[cfg(test)]
    pub fn take_sent(&self) -> Vec<String> {
        let mut q = lock(&self.queue);
        q.bytes = 0;
        let mut out: Vec<String> = q.items.drain(..).map(|t| t.to_string()).collect();
        if let Some((code, reason)) = q.close.take() {
            out.push(format!("close {code} {reason}"));
        }
        out
    }

    /// Ends an in-memory outbox as a closed connection would.
    #[cfg(test)]
    pub fn end_for_test(&self) {
        self.end();
    }

    fn wake(&self) {
        if let Some(w) = &self.wake {
            w.wake();
        }
    }

    /// Queues a text message; false when the connection has already ended.
    pub fn send(&self, text: impl Into<Utf8Bytes>) -> bool {
        self.push(text.into())
    }

    /// Queues a message ahead of everything not yet handed to the socket (keepalive pings: a
    /// client flooding us with requests must still see our ping within the timeout).
    pub fn send_urgent(&self, text: impl Into<Utf8Bytes>) -> bool {
        let mut q = lock(&self.queue);
        if q.ended {
            return false;
        }
        let text = text.into();
        q.bytes += text.len();
        q.items.push_front(text);
        self.wake_parked(q);
        true
    }

    /// Closes the connection with a close frame carrying `code` and `reason`, ahead of what
    /// is still queued (which is dropped): a connection being closed because it stopped
    /// reading must not wait for its backlog first. The connection ends within a second even
    /// if the peer never takes the close frame.
    pub fn close(&self, code: u16, reason: &str) -> bool {
        let mut q = lock(&self.queue);
        if q.ended || q.close.is_some() {
            return false;
        }
        q.close = Some((code, reason.to_string()));
        q.items.clear();
        q.bytes = 0;
        self.wake_parked(q);
        true
    }

    pub fn is_ended(&self) -> bool {
        lock(&self.queue).ended
    }

    fn push(&self, out: Utf8Bytes) -> bool {
        let mut q = lock(&self.queue);
        if q.ended || q.close.is_some() {
            return false;
        }
        let first = q.items.is_empty();
        q.bytes += out.len();
        q.items.push_back(out);
        if first {
            self.wake_parked(q);
        }
        true
    }

    /// Wakes the connection's thread if it waits in `poll`.
    fn wake_parked(&self, mut q: std::sync::MutexGuard<Queue>) {
        if std::mem::take(&mut q.parked) {
            drop(q);
            self.wake();
        }
    }

    /// Before the connection's thread waits in `poll`: false (do not wait) when a close is
    /// due, or a message is queued that can be written now (`blocked`: none can, the socket
    /// is full or the connection closing).
    fn park(&self, blocked: bool) -> bool {
        let mut q = lock(&self.queue);
        if q.close.is_some() || (!blocked && !q.items.is_empty()) {
            return false;
        }
        q.parked = true;
        true
    }

    fn unpark(&self) {
        lock(&self.queue).parked = false;
    }

    fn take_close(&self) -> Option<(u16, String)> {
        lock(&self.queue).close.take()
    }

    /// At most `n` queued messages, oldest (or most urgent) first.
    fn take(&self, n: usize) -> Vec<Utf8Bytes> {
        let mut q = lock(&self.queue);
        let n = n.min(q.items.len());
        let taken: Vec<Utf8Bytes> = q.items.drain(..n).collect();
        q.bytes -= taken.iter().map(|t| t.len()).sum::<usize>();
        taken
    }

    /// Whether so much waits for the peer that its requests should wait too.
    fn backlogged(&self) -> bool {
        lock(&self.queue).bytes > MAX_BACKLOG
    }

    fn end(&self) {
        let mut q = lock(&self.queue);
        q.ended = true;
        q.items.clear();
        q.bytes = 0;
    }
}

/// Accepts connections forever. `on_open` is called on the connection's own thread once the
/// upgrade succeeded and returns the callback that receives its messages.
pub fn run_acceptor(listener: TcpListener, gate: Gate, on_open: Arc<OnOpen>) {
    if let Err(e) = listener.set_nonblocking(true) {
        crate::log::error!("cannot make the listening socket non-blocking: {e}");
        return;
    }
    let established = Arc::new(AtomicUsize::new(0));
    let mut pending: VecDeque<Handshake> = VecDeque::new();
    loop {
        let now = Instant::now();
        pending.retain(|p| p.deadline > now);
        let mut interests = vec![Interest {
            fd: listener.as_raw_fd(),
            read: true,
            write: false,
        }];
        interests.extend(pending.iter().map(|p| Interest {
            fd: p.stream.as_raw_fd(),
            read: true,
            write: false,
        }));
        let timeout = pending.iter().map(|p| p.deadline - now).min();
        let ready = match sys::poll(&interests, timeout) {
            Ok(r) => r,
            Err(e) => {
                crate::log::error!("poll on the listening socket failed: {e}");
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        // Connections still in their handshake first: indices in `ready` match `pending` before new accepts.
        let mut i = 0;
        let mut index = 1;
        while i < pending.len() {
            let r = ready[index];
            index += 1;
            if !(r.readable || r.hangup) {
                i += 1;
                continue;
            }
            match pending[i].read_head() {
                HeadState::Incomplete => i += 1,
                HeadState::Failed => {
                    pending.remove(i);
                }
                HeadState::Complete(head_len) => {
                    let p = pending.remove(i).unwrap();
                    finish_handshake(p, head_len, &gate, &established, &on_open);
                }
            }
        }
        if ready[0].readable {
            accept_all(&listener, &mut pending, gate.handshake_timeout);
        }
    }
}

fn accept_all(listener: &TcpListener, pending: &mut VecDeque<Handshake>, timeout: Duration) {
    loop {
        match listener.accept() {
            Ok((stream, addr)) => {
                if stream.set_nonblocking(true).is_err() {
                    continue;
                }
                let _ = stream.set_nodelay(true);
                if pending.len() >= MAX_PENDING {
                    pending.pop_front();
                }
                pending.push_back(Handshake {
                    stream,
                    addr,
                    buf: Vec::new(),
                    deadline: Instant::now() + timeout,
                });
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => {
                // EMFILE and friends: back off instead of spinning on a readable listener.
                crate::log::warn!("accept failed: {e}");
                std::thread::sleep(Duration::from_millis(50));
                return;
            }
        }
    }
}

struct Handshake {
    stream: TcpStream,
    addr: SocketAddr,
    buf: Vec<u8>,
    deadline: Instant,
}

enum HeadState {
    Incomplete,
    Failed,
    Complete(usize),
}

impl Handshake {
    fn read_head(&mut self) -> HeadState {
        let mut chunk = [0u8; 4096];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(0) => return HeadState::Failed,
                Ok(n) => {
                    let scan_from = self.buf.len().saturating_sub(3);
                    self.buf.extend_from_slice(&chunk[..n]);
                    if let Some(p) = find(&self.buf[scan_from..], b"\r\n\r\n") {
                        let len = scan_from + p + 4;
                        if len <= MAX_HEAD {
                            return HeadState::Complete(len);
                        }
                    }
                    if self.buf.len() > MAX_HEAD {
                        let _ = respond(
                            &mut self.stream,
                            &Reject::new(431, "the upgrade request head is too large"),
                        );
                        return HeadState::Failed;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return HeadState::Incomplete,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return HeadState::Failed,
            }
        }
    }
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn finish_handshake(
    mut p: Handshake,
    head_len: usize,
    gate: &Gate,
    established: &Arc<AtomicUsize>,
    on_open: &Arc<OnOpen>,
) {
    let decision = check_request(&p.buf[..head_len], gate, established.load(Ordering::SeqCst));
    let accept = match decision {
        Err(reject) => {
            crate::log::info!(
                "refused a connection from {}: {} {}",
                p.addr,
                reject.status,
                reject.log
            );
            let _ = respond(&mut p.stream, &reject);
            return;
        }
        Ok(a) => a,
    };
    let mut response = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {}\r\n",
        tungstenite::handshake::derive_accept_key(accept.key.as_bytes())
    );
    if accept.mcp_subprotocol {
        // The CLI aborts with "Server sent no subprotocol" without this echo.
        response.push_str("Sec-WebSocket-Protocol: mcp\r\n");
    }
    response.push_str("\r\n");
    if write_fresh(&mut p.stream, response.as_bytes()).is_err() {
        return;
    }
    let rest = p.buf[head_len..].to_vec();
    let outbox = match Outbox::new() {
        Ok(o) => Arc::new(o),
        Err(e) => {
            crate::log::error!("cannot create a wake-up pipe for {}: {e}", p.addr);
            return;
        }
    };
    established.fetch_add(1, Ordering::SeqCst);
    let established = established.clone();
    let on_open = on_open.clone();
    let peer = Peer {
        addr: p.addr,
        user_agent: accept.user_agent,
    };
    let stream = p.stream;
    let spawned = crate::proc::spawn_thread("connection", move || {
        let handler = on_open(outbox.clone(), peer);
        let config = WebSocketConfig::default()
            .max_message_size(Some(MAX_MESSAGE))
            .max_frame_size(Some(MAX_MESSAGE))
            .max_write_buffer_size(MAX_MESSAGE * 2)
            // tungstenite zeroes its whole read buffer before each read: the default 128 KiB
            // made every idle connection cost that much resident memory.
            .read_buffer_size(16 << 10);
        let stream = Metered {
            stream,
            outbox: outbox.clone(),
            full: false,
        };
        let ws = WebSocket::from_partially_read(stream, rest, Role::Server, Some(config));
        run_connection(ws, &outbox, handler);
        established.fetch_sub(1, Ordering::SeqCst);
    });
    if let Err(e) = spawned {
        crate::log::error!("cannot start a thread for a new connection: {e}");
    }
}

/// Writes a short response on a socket whose send buffer is empty: it fits at once.
fn write_fresh(stream: &mut TcpStream, bytes: &[u8]) -> io::Result<()> {
    let n = stream.write(bytes)?;
    if n < bytes.len() {
        return Err(io::Error::new(io::ErrorKind::WriteZero, "short write"));
    }
    Ok(())
}

struct Accept {
    key: String,
    mcp_subprotocol: bool,
    user_agent: String,
}

struct Reject {
    status: u16,
    body: String,
    log: String,
}

impl Reject {
    fn new(status: u16, text: &str) -> Reject {
        Reject {
            status,
            body: format!("{text}\n"),
            log: text.to_string(),
        }
    }
}

fn respond(stream: &mut TcpStream, r: &Reject) -> io::Result<()> {
    let reason = match r.status {
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        405 => "Method Not Allowed",
        426 => "Upgrade Required",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "Error",
    };
    let mut head = format!(
        "HTTP/1.1 {} {reason}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n",
        r.status,
        r.body.len()
    );
    if r.status == 426 {
        head.push_str("Upgrade: websocket\r\n");
    }
    head.push_str("\r\n");
    head.push_str(&r.body);
    let _ = write_fresh(stream, head.as_bytes());
    let _ = stream.shutdown(std::net::Shutdown::Write);
    Ok(())
}

/// Decides an upgrade request. Every refusal happens before any WebSocket frame is read.
fn check_request(head: &[u8], gate: &Gate, established: usize) -> Result<Accept, Reject> {
    let text = std::str::from_utf8(head)
        .map_err(|_| Reject::new(400, "the request head is not valid UTF-8"))?;
    let mut lines = text.split("\r\n");
    let request_line = lines.next().unwrap_or("");
    let mut parts = request_line.split(' ');
    let (method, target, version) = (parts.next(), parts.next(), parts.next());
    let (Some(method), Some(target), Some(version), None) = (method, target, version, parts.next())
    else {
        return Err(Reject::new(400, "malformed request line"));
    };
    if !version.starts_with("HTTP/1.") || target.is_empty() || method.is_empty() {
        return Err(Reject::new(400, "malformed request line"));
    }
    let mut headers: Vec<(&str, &str)> = Vec::new();
    for line in lines {
        if line.is_empty() {
            continue;
        }
        let Some((name, value)) = line.split_once(':') else {
            return Err(Reject::new(400, "malformed header line"));
        };
        if name.is_empty() || name.bytes().any(|b| b <= b' ' || b >= 0x7f) {
            return Err(Reject::new(400, "malformed header name"));
        }
        headers.push((name, value.trim()));
    }
    let one = |name: &str| -> Result<Option<&str>, Reject> {
        let mut found = headers.iter().filter(|(n, _)| n.eq_ignore_ascii_case(name));
        let first = found.next().map(|(_, v)| *v);
        if found.next().is_some() {
            return Err(Reject::new(400, &format!("duplicate {name} header")));
        }
        Ok(first)
    };
    // A browser always sends Origin and the CLI never does: refusing it keeps web pages out
    // (the CVE-2025-52882 class of bug).
    if one("Origin")?.is_some() {
        return Err(Reject::new(
            403,
            "requests from web pages (with an Origin header) are refused",
        ));
    }
    let host = one("Host")?.ok_or_else(|| Reject::new(400, "missing Host header"))?;
    if !host_allowed(host, &gate.extra_hosts, gate.any_ip_host) {
        // DNS rebinding: a page on evil.example resolved to 127.0.0.1 still says its own name.
        return Err(Reject::new(403, "the Host header names a foreign host"));
    }
    let upgrade = one("Upgrade")?.is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    let connection_upgrade = one("Connection")?.is_some_and(|v| {
        v.split(',')
            .any(|t| t.trim().eq_ignore_ascii_case("upgrade"))
    });
    if !upgrade || !connection_upgrade {
        return Err(Reject::new(
            426,
            "this port is ccide, an IDE server for Claude Code; it speaks MCP over WebSocket only (run `claude --ide` in the workspace)",
        ));
    }
    if method != "GET" {
        return Err(Reject::new(
            405,
            "the WebSocket upgrade must be a GET request",
        ));
    }
    let token = one("X-Claude-Code-Ide-Authorization")?;
    match token {
        None => {
            return Err(Reject::new(
                401,
                "missing X-Claude-Code-Ide-Authorization token",
            ));
        }
        Some(t) if !constant_time_eq(t.as_bytes(), gate.token.as_bytes()) => {
            return Err(Reject::new(
                401,
                "wrong X-Claude-Code-Ide-Authorization token",
            ));
        }
        Some(_) => {}
    }
    if one("Sec-WebSocket-Version")? != Some("13") {
        return Err(Reject::new(
            400,
            "unsupported Sec-WebSocket-Version (13 is required)",
        ));
    }
    let key = one("Sec-WebSocket-Key")?
        .filter(|k| !k.is_empty())
        .ok_or_else(|| Reject::new(400, "missing Sec-WebSocket-Key"))?;
    if gate.stopping.load(Ordering::SeqCst) {
        return Err(Reject::new(503, "ccide is shutting down"));
    }
    if established >= gate.max_connections {
        return Err(Reject::new(
            503,
            &format!(
                "too many connections ({} open, --max-connections {})",
                established, gate.max_connections
            ),
        ));
    }
    let mcp_subprotocol = headers
        .iter()
        .filter(|(n, _)| n.eq_ignore_ascii_case("Sec-WebSocket-Protocol"))
        .flat_map(|(_, v)| v.split(','))
        .any(|p| p.trim() == "mcp");
    Ok(Accept {
        key: key.to_string(),
        mcp_subprotocol,
        user_agent: one("User-Agent")?.unwrap_or("").to_string(),
    })
}

/// Compares without an early exit, so the time taken does not tell how much of a guess matched.
pub fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    let mut diff = (a.len() != b.len()) as u8;
    for (i, y) in b.iter().enumerate() {
        diff |= a.get(i).copied().unwrap_or(0) ^ y;
    }
    std::hint::black_box(diff) == 0
}

fn host_allowed(host: &str, extra: &[String], any_ip: bool) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or("")
    } else {
        match host.rsplit_once(':') {
            Some((h, port)) if port.bytes().all(|b| b.is_ascii_digit()) => h,
            _ => host,
        }
    };
    if name.eq_ignore_ascii_case("localhost") || extra.iter().any(|e| e.eq_ignore_ascii_case(name))
    {
        return true;
    }
    name.parse::<IpAddr>()
        .is_ok_and(|ip| any_ip || ip.is_loopback())
}

/// A connection's socket, counting into its outbox's `progress` the bytes that show the peer
/// at work: every byte it sent us, and every byte it took off our side of the socket once that
/// was full, until all we had for it has gone. A peer busy sending a big message, or reading
/// one, answers a keepalive ping only after it; a peer that stopped reading leaves the socket
/// full and counts nothing, and what the kernel's buffers take without blocking counts nothing
/// either, since a peer that reads nothing takes it all the same.
struct Metered<S> {
    stream: S,
    outbox: Arc<Outbox>,
    /// A write would have blocked since the last flush.
    full: bool,
}

impl<S: Read> Read for Metered<S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.stream.read(buf)?;
        self.outbox.progress.fetch_add(n as u64, Ordering::Relaxed);
        Ok(n)
    }
}

impl<S: Write> Write for Metered<S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self.stream.write(buf) {
            Ok(n) => {
                if self.full {
                    self.outbox.progress.fetch_add(n as u64, Ordering::Relaxed);
                }
                Ok(n)
            }
            Err(e) => {
                self.full |= e.kind() == io::ErrorKind::WouldBlock;
                Err(e)
            }
        }
    }

    /// tungstenite flushes once everything it had to write has been written.
    fn flush(&mut self) -> io::Result<()> {
        self.full = false;
        self.stream.flush()
    }
}

/// Serves one upgraded connection until it ends, then tells the handler exactly once.
fn run_connection(mut ws: WebSocket<Metered<TcpStream>>, outbox: &Outbox, mut handler: Handler) {
    let fd = ws.get_ref().stream.as_raw_fd();
    let wake = outbox
        .wake
        .as_ref()
        .expect("a socket's outbox has a wake pipe");
    let mut want_write = false;
    let mut closing: Option<Instant> = None;
    let mut ended = Ended {
        code: None,
        reason: String::new(),
    };
    let close = |ws: &mut WebSocket<Metered<TcpStream>>, code: u16, reason: &str| {
        let _ = ws.close(Some(CloseFrame {
            code: CloseCode::from(code),
            reason: reason.into(),
        }));
    };
    'conn: loop {
        // A close goes first, even while the socket is blocked: a peer that stopped reading
        // gets a second to take it, then the connection is shut down.
        if closing.is_none()
            && let Some((code, reason)) = outbox.take_close()
        {
            close(&mut ws, code, &reason);
            ended = Ended {
                code: Some(code),
                reason,
            };
            closing = Some(Instant::now());
        }
        // A bounded batch per turn: a client that never pauses must still get its answers
        // and our keepalive pings, which are written next.
        let reading = !outbox.backlogged();
        let mut batch_full = reading;
        for _ in 0..if reading { READS_PER_TURN } else { 0 } {
            match ws.read() {
                // Once closing, what the peer sent before it saw our close frame gets no answer
                // (none would be written): it is read only to find the peer's own close frame,
                // so that a flood of requests cannot keep the connection busy past its second.
                Ok(Message::Text(_) | Message::Binary(_)) if closing.is_some() => {}
                Ok(Message::Text(t)) => handler(Event::Text(t.as_str())),
                // Some clients put JSON in binary frames; treat UTF-8 ones as text.
                Ok(Message::Binary(b)) => match std::str::from_utf8(&b) {
                    Ok(s) => handler(Event::Text(s)),
                    Err(_) => handler(Event::NotUtf8),
                },
                Ok(Message::Close(frame)) => {
                    if closing.is_none() {
                        ended = match frame {
                            Some(f) => Ended {
                                code: Some(u16::from(f.code)),
                                reason: f.reason.to_string(),
                            },
                            None => Ended {
                                code: None,
                                reason: "client closed".into(),
                            },
                        };
                        closing = Some(Instant::now());
                    }
                }
                Ok(_) => {}
                Err(e) if is_would_block(&e) => {
                    batch_full = false;
                    break;
                }
                Err(WsError::ConnectionClosed | WsError::AlreadyClosed) => break 'conn,
                Err(e) => {
                    let (code, reason) = match &e {
                        WsError::Capacity(_) => (1009, "message too big (limit 64 MiB)"),
                        WsError::Utf8(_) => (1007, "text frame is not valid UTF-8"),
                        WsError::Protocol(p) if is_reset(p) => {
                            if ended.reason.is_empty() {
                                ended.reason = "connection reset without a close frame".into();
                            }
                            break 'conn;
                        }
                        WsError::Protocol(_) => (1002, "WebSocket protocol error"),
                        _ => {
                            if ended.reason.is_empty() {
                                ended.reason = format!("read failed: {e}");
                            }
                            break 'conn;
                        }
                    };
                    if closing.is_some() {
                        break 'conn;
                    }
                    close(&mut ws, code, reason);
                    ended = Ended {
                        code: Some(code),
                        reason: format!("{reason}: {e}"),
                    };
                    closing = Some(Instant::now());
                    let _ = ws.flush();
                    break;
                }
            }
        }
        // Hand the socket a bounded batch, and only once the previous one has left: what is
        // still queued here can be overtaken by an urgent message.
        let batch = if want_write || closing.is_some() {
            Vec::new()
        } else {
            outbox.take(WRITES_PER_TURN)
        };
        for t in batch {
            if let Err(e) = ws.write(Message::Text(t))
                && !is_would_block(&e)
            {
                ended.reason = format!("write failed: {e}");
                break 'conn;
            }
        }
        match ws.flush() {
            Ok(()) => want_write = false,
            Err(e) if is_would_block(&e) => want_write = true,
            Err(WsError::ConnectionClosed) => break,
            Err(e) => {
                if ended.reason.is_empty() {
                    ended.reason = format!("write failed: {e}");
                }
                break;
            }
        }
        let timeout = match closing {
            Some(since) => {
                let left = Duration::from_secs(1).saturating_sub(since.elapsed());
                if left.is_zero() {
                    break;
                }
                Some(left)
            }
            // Messages may wait in tungstenite's buffer with nothing left on the socket.
            None if batch_full => continue,
            None => None,
        };
        // Nothing is read or written first: a socket with data makes `poll` return at once,
        // and an answer the thread queued itself is written without a wake-up (a round trip
        // is read, answer, write, `poll`).
        if !outbox.park(want_write || closing.is_some()) {
            continue;
        }
        let interests = [
            Interest {
                fd,
                read: reading,
                write: want_write,
            },
            Interest {
                fd: wake.fd(),
                read: true,
                write: false,
            },
        ];
        let polled = sys::poll(&interests, timeout);
        outbox.unpark();
        match polled {
            Ok(r) => {
                if r[1].readable {
                    wake.drain();
                }
            }
            Err(e) => {
                ended.reason = format!("poll failed: {e}");
                break;
            }
        }
    }
    outbox.end();
    let _ = ws.get_mut().stream.shutdown(std::net::Shutdown::Both);
    handler(Event::Ended(ended));
}

fn is_would_block(e: &WsError) -> bool {
    matches!(e, WsError::Io(io) if io.kind() == io::ErrorKind::WouldBlock)
}

fn is_reset(p: &tungstenite::error::ProtocolError) -> bool {
    matches!(
        p,
        tungstenite::error::ProtocolError::ResetWithoutClosingHandshake
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn gate() -> Gate {
        Gate {
            token: "secret".into(),
            extra_hosts: vec![],
            any_ip_host: false,
            max_connections: 2,
            handshake_timeout: Duration::from_secs(5),
            stopping: Arc::default(),
        }
    }

    fn status(head: &str, established: usize) -> u16 {
        match check_request(head.as_bytes(), &gate(), established) {
            Ok(_) => 101,
            Err(r) => r.status,
        }
    }

    const OK: &str = "GET /any/path HTTP/1.1\r\nHost: 127.0.0.1:1234\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nx-claude-code-ide-authorization: secret\r\n\r\n";

    #[test]
    fn decisions_follow_protocol_section_2() {
        assert_eq!(status(OK, 0), 101);
        assert_eq!(status(OK, 2), 503);
        assert_eq!(status(&OK.replace("secret", "secreT"), 0), 401);
        assert_eq!(status(&OK.replace("secret", ""), 0), 401);
        assert_eq!(
            status(&OK.replace("127.0.0.1:1234", "evil.example:1234"), 0),
            403
        );
        assert_eq!(status(&OK.replace("127.0.0.1:1234", "localhost"), 0), 101);
        assert_eq!(status(&OK.replace("127.0.0.1:1234", "[::1]:9"), 0), 101);
        assert_eq!(
            status(&OK.replace("Host:", "Origin: http://a.example\r\nHost:"), 0),
            403
        );
        assert_eq!(status(&OK.replace("Upgrade: websocket\r\n", ""), 0), 426);
        assert_eq!(status(&OK.replace("Host:", "Host: a\r\nHost:"), 0), 400);
        assert_eq!(status("garbage\r\n\r\n", 0), 400);
    }

    #[test]
    fn with_an_unspecified_address_any_ip_host_passes_but_no_name() {
        assert!(host_allowed("192.0.2.7:4000", &[], true));
        assert!(host_allowed("[2001:db8::1]:4000", &[], true));
        assert!(!host_allowed("rebind.example:4000", &[], true));
        assert!(!host_allowed("192.0.2.7:4000", &[], false));
    }

    #[test]
    fn constant_time_eq_compares_lengths_and_bytes() {
        assert!(constant_time_eq(b"abc", b"abc"));
        assert!(!constant_time_eq(b"abd", b"abc"));
        assert!(!constant_time_eq(b"ab", b"abc"));
        assert!(!constant_time_eq(b"abcd", b"abc"));
    }

    /// A socket whose peer takes `room` more bytes, then none until given more room.
    struct Peer {
        got: Vec<u8>,
        room: usize,
        incoming: VecDeque<u8>,
    }

    impl Read for Peer {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            if self.incoming.is_empty() {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            let n = buf.len().min(self.incoming.len());
            for (b, x) in buf.iter_mut().zip(self.incoming.drain(..n)) {
                *b = x;
            }
            Ok(n)
        }
    }

    impl Write for Peer {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let n = buf.len().min(self.room);
            if n == 0 {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            self.room -= n;
            self.got.extend_from_slice(&buf[..n]);
            Ok(n)
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    #[test]
    fn progress_counts_what_the_peer_sends_and_takes_off_a_full_socket_only() {
        let outbox = Arc::new(Outbox::new().unwrap());
        let mut m = Metered {
            stream: Peer {
                got: Vec::new(),
                room: 100,
                incoming: VecDeque::from(vec![7u8; 30]),
            },
            outbox: outbox.clone(),
            full: false,
        };
        // What the kernel takes without blocking says nothing of the peer.
        assert_eq!(m.write(&[1; 60]).unwrap(), 60);
        assert_eq!(outbox.progress(), 0);
        // What the peer sent does.
        let mut buf = [0u8; 20];
        assert_eq!(m.read(&mut buf).unwrap(), 20);
        assert_eq!(outbox.progress(), 20);
        // The socket fills: nothing moves until the peer reads.
        assert_eq!(m.write(&[1; 60]).unwrap(), 40);
        assert!(m.write(&[1; 20]).is_err());
        assert_eq!(outbox.progress(), 20);
        // It reads: what it took off the full socket counts, until all has gone.
        m.stream.room = 15;
        assert_eq!(m.write(&[1; 20]).unwrap(), 15);
        assert_eq!(outbox.progress(), 35);
        m.stream.room = 5;
        assert_eq!(m.write(&[1; 5]).unwrap(), 5);
        m.flush().unwrap();
        assert_eq!(outbox.progress(), 40);
        // Everything went: the next writes fill buffers again and count nothing.
        m.stream.room = 50;
        assert_eq!(m.write(&[1; 50]).unwrap(), 50);
        assert_eq!(outbox.progress(), 40);
        assert_eq!(m.stream.got.len(), 170);
    }
}
