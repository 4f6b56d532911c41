//! The acceptor and the upgrade: every connection still in its handshake waits in one `poll`;
//! a complete request head is checked (origin, host, auth token, WebSocket version and key,
//! subprotocol, capacity) and answered 101 or refused, before any frame is read.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use super::connection::{self, Handler, Outbox};
use crate::sys::{self, Interest};

/// Largest upgrade request head we read before answering 431.
const MAX_HEAD: usize = 16 << 10;
/// Connections still in their upgrade at once; the oldest is dropped beyond this.
const MAX_PENDING: usize = 4096;

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

pub type OnOpen = dyn Fn(Arc<Outbox>, Peer) -> Handler + Send + Sync;

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
        connection::serve(stream, rest, &outbox, handler);
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

/// Decides an upgrade request (ccide-protocol(7) §2), its checks in this order. Every refusal
/// happens before any WebSocket frame is read.
fn check_request(head: &[u8], gate: &Gate, established: usize) -> Result<Accept, Reject> {
    let (method, headers) = parse_head(head)?;
    check_origin_and_host(&headers, gate)?;
    check_upgrade(method, &headers)?;
    check_token(&headers, gate)?;
    let key = check_websocket(&headers)?;
    check_capacity(gate, established)?;
    Ok(Accept {
        key: key.to_string(),
        mcp_subprotocol: headers.lists("Sec-WebSocket-Protocol", "mcp"),
        user_agent: headers.one("User-Agent")?.unwrap_or("").to_string(),
    })
}

/// The header lines of a request head, as read: names as sent, values trimmed.
struct Headers<'a>(Vec<(&'a str, &'a str)>);

impl<'a> Headers<'a> {
    /// The value of a header that may appear at most once.
    fn one(&self, name: &str) -> Result<Option<&'a str>, Reject> {
        let mut found = self.0.iter().filter(|(n, _)| n.eq_ignore_ascii_case(name));
        let first = found.next().map(|(_, v)| *v);
        if found.next().is_some() {
            return Err(Reject::new(400, &format!("duplicate {name} header")));
        }
        Ok(first)
    }

    /// Whether any `name` header lists `token` among its comma-separated values.
    fn lists(&self, name: &str, token: &str) -> bool {
        self.0
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .flat_map(|(_, v)| v.split(','))
            .any(|p| p.trim() == token)
    }
}

/// Splits a request head into its method and header lines; refuses (400) a head that is not
/// UTF-8, a malformed request line, and a malformed header line or name.
fn parse_head(head: &[u8]) -> Result<(&str, Headers<'_>), Reject> {
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
    Ok((method, Headers(headers)))
}

/// Refuses (403) a request from a web page (any `Origin`) and one whose `Host` is not ours
/// (400 without one).
fn check_origin_and_host(headers: &Headers, gate: &Gate) -> Result<(), Reject> {
    // A browser always sends Origin and the CLI never does: refusing it keeps web pages out
    // (the CVE-2025-52882 class of bug).
    if headers.one("Origin")?.is_some() {
        return Err(Reject::new(
            403,
            "requests from web pages (with an Origin header) are refused",
        ));
    }
    let host = headers
        .one("Host")?
        .ok_or_else(|| Reject::new(400, "missing Host header"))?;
    if !host_allowed(host, &gate.extra_hosts, gate.any_ip_host) {
        // DNS rebinding: a page on evil.example resolved to 127.0.0.1 still says its own name.
        return Err(Reject::new(403, "the Host header names a foreign host"));
    }
    Ok(())
}

/// Refuses what is not a WebSocket upgrade (426, saying what this port is) or not a GET (405).
fn check_upgrade(method: &str, headers: &Headers) -> Result<(), Reject> {
    let upgrade = headers
        .one("Upgrade")?
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    let connection_upgrade = headers.one("Connection")?.is_some_and(|v| {
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
    Ok(())
}

/// Refuses (401) a request without the lock file's auth token, or with another.
fn check_token(headers: &Headers, gate: &Gate) -> Result<(), Reject> {
    match headers.one("X-Claude-Code-Ide-Authorization")? {
        None => Err(Reject::new(
            401,
            "missing X-Claude-Code-Ide-Authorization token",
        )),
        Some(t) if !constant_time_eq(t.as_bytes(), gate.token.as_bytes()) => Err(Reject::new(
            401,
            "wrong X-Claude-Code-Ide-Authorization token",
        )),
        Some(_) => Ok(()),
    }
}

/// The request's `Sec-WebSocket-Key`; refuses (400) a WebSocket version other than 13 and a
/// missing key.
fn check_websocket<'a>(headers: &Headers<'a>) -> Result<&'a str, Reject> {
    if headers.one("Sec-WebSocket-Version")? != Some("13") {
        return Err(Reject::new(
            400,
            "unsupported Sec-WebSocket-Version (13 is required)",
        ));
    }
    headers
        .one("Sec-WebSocket-Key")?
        .filter(|k| !k.is_empty())
        .ok_or_else(|| Reject::new(400, "missing Sec-WebSocket-Key"))
}

/// Refuses (503) while the server shuts down, and past `--max-connections`.
fn check_capacity(gate: &Gate, established: usize) -> Result<(), Reject> {
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
    Ok(())
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
}
