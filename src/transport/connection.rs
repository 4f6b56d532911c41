//! One upgraded connection: its thread's loop (read a batch, write a batch, wait in `poll`)
//! and the `Outbox` other threads queue its messages in.

use std::collections::VecDeque;
use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::ops::ControlFlow;
use std::os::fd::AsRawFd;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use tungstenite::{Error as WsError, Message, Utf8Bytes, WebSocket};

use crate::proc::lock;
use crate::sys::{self, Interest, WakePipe};

/// Largest inbound message; above it the connection is closed with 1009.
const MAX_MESSAGE: usize = 64 << 20;
/// Messages read before queued output gets its turn.
const READS_PER_TURN: usize = 64;
/// Messages handed to the socket per turn.
const WRITES_PER_TURN: usize = 64;
/// Bytes of answers queued for a client above which its requests are no longer read: a client
/// that stops reading its answers is not allowed to make the server buffer without bound.
const MAX_BACKLOG: usize = 32 << 20;

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
    pub(super) fn new() -> io::Result<Outbox> {
        Ok(Outbox {
            queue: Mutex::new(Queue::default()),
            wake: Some(WakePipe::new()?),
            progress: AtomicU64::new(0),
        })
    }

    /// An outbox no socket drains: what is sent stays queued for `take_sent`.
    #[cfg(test)]
    pub fn memory() -> std::sync::Arc<Outbox> {
        std::sync::Arc::new(Outbox {
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

/// Serves one upgraded connection on the calling thread until it ends: `rest` is what the
/// handshake read past the request head, the start of the first frames.
pub(super) fn serve(
    stream: TcpStream,
    rest: Vec<u8>,
    outbox: &std::sync::Arc<Outbox>,
    handler: Handler,
) {
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
    run_connection(ws, outbox, handler);
}

/// Serves one upgraded connection until it ends, then tells the handler exactly once.
fn run_connection(ws: WebSocket<Metered<TcpStream>>, outbox: &Outbox, handler: Handler) {
    let mut c = Connection {
        fd: ws.get_ref().stream.as_raw_fd(),
        wake: outbox
            .wake
            .as_ref()
            .expect("a socket's outbox has a wake pipe"),
        ws,
        outbox,
        handler,
        want_write: false,
        closing: None,
        ended: Ended {
            code: None,
            reason: String::new(),
        },
    };
    loop {
        c.send_queued_close();
        let reading = !outbox.backlogged();
        let batch_full = if reading {
            match c.read_batch() {
                ControlFlow::Continue(full) => full,
                ControlFlow::Break(()) => break,
            }
        } else {
            false
        };
        if c.write_batch().is_break() {
            break;
        }
        let timeout = match c.closing {
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
        if c.wait(reading, timeout).is_break() {
            break;
        }
    }
    c.finish();
}

/// One upgraded connection's state, owned by its thread.
struct Connection<'a> {
    ws: WebSocket<Metered<TcpStream>>,
    fd: std::os::fd::RawFd,
    outbox: &'a Outbox,
    wake: &'a WakePipe,
    handler: Handler,
    /// The socket did not take everything written: wait until it is writable again.
    want_write: bool,
    /// When a close frame was sent or received: the connection ends a second later at most.
    closing: Option<Instant>,
    /// What the handler is told when the connection ends.
    ended: Ended,
}

impl Connection<'_> {
    /// Starts the closing handshake: sends a close frame; the connection ends within a second.
    fn send_close(&mut self, code: u16, reason: &str) {
        let _ = self.ws.close(Some(CloseFrame {
            code: CloseCode::from(code),
            reason: reason.into(),
        }));
        self.closing = Some(Instant::now());
    }

    /// Sends a close another thread queued (`Outbox::close`). It goes first, even while the
    /// socket is blocked: a peer that stopped reading gets a second to take it, then the
    /// connection is shut down.
    fn send_queued_close(&mut self) {
        if self.closing.is_none()
            && let Some((code, reason)) = self.outbox.take_close()
        {
            self.send_close(code, &reason);
            self.ended = Ended {
                code: Some(code),
                reason,
            };
        }
    }

    /// Reads a bounded batch and hands each message to the handler: a client that never
    /// pauses must still get its answers and our keepalive pings, which are written next.
    /// Continues with whether the batch was full (more may wait), breaks when the connection
    /// is over.
    fn read_batch(&mut self) -> ControlFlow<(), bool> {
        for _ in 0..READS_PER_TURN {
            match self.ws.read() {
                Ok(message) => self.on_message(message),
                Err(e) if is_would_block(&e) => return ControlFlow::Continue(false),
                Err(WsError::ConnectionClosed | WsError::AlreadyClosed) => {
                    return ControlFlow::Break(());
                }
                Err(e) => {
                    if self.on_read_error(e).is_break() {
                        return ControlFlow::Break(());
                    }
                    break;
                }
            }
        }
        ControlFlow::Continue(true)
    }

    /// Hands one message read to the handler, or notes the peer's close (unless the
    /// connection is closing already).
    fn on_message(&mut self, message: Message) {
        match message {
            // Once closing, what the peer sent before it saw our close frame gets no answer
            // (none would be written): it is read only to find the peer's own close frame, so
            // that a flood of requests cannot keep the connection busy past its second.
            Message::Text(_) | Message::Binary(_) if self.closing.is_some() => {}
            Message::Text(t) => (self.handler)(Event::Text(t.as_str())),
            // Some clients put JSON in binary frames; treat UTF-8 ones as text.
            Message::Binary(b) => match std::str::from_utf8(&b) {
                Ok(s) => (self.handler)(Event::Text(s)),
                Err(_) => (self.handler)(Event::NotUtf8),
            },
            Message::Close(frame) if self.closing.is_none() => {
                self.ended = match frame {
                    Some(f) => Ended {
                        code: Some(u16::from(f.code)),
                        reason: f.reason.to_string(),
                    },
                    None => Ended {
                        code: None,
                        reason: "client closed".into(),
                    },
                };
                self.closing = Some(Instant::now());
            }
            _ => {}
        }
    }

    /// A read that failed: a message too big, not UTF-8 or breaking the protocol is answered
    /// with a close frame (the connection goes on closing); a reset or any other failure ends
    /// the connection at once (break).
    fn on_read_error(&mut self, e: WsError) -> ControlFlow<()> {
        let (code, reason) = match &e {
            WsError::Capacity(_) => (1009, "message too big (limit 64 MiB)"),
            WsError::Utf8(_) => (1007, "text frame is not valid UTF-8"),
            WsError::Protocol(p) if is_reset(p) => {
                if self.ended.reason.is_empty() {
                    self.ended.reason = "connection reset without a close frame".into();
                }
                return ControlFlow::Break(());
            }
            WsError::Protocol(_) => (1002, "WebSocket protocol error"),
            _ => {
                if self.ended.reason.is_empty() {
                    self.ended.reason = format!("read failed: {e}");
                }
                return ControlFlow::Break(());
            }
        };
        if self.closing.is_some() {
            return ControlFlow::Break(());
        }
        self.send_close(code, reason);
        self.ended = Ended {
            code: Some(code),
            reason: format!("{reason}: {e}"),
        };
        let _ = self.ws.flush();
        ControlFlow::Continue(())
    }

    /// Hands the socket a bounded batch of queued messages, and only once the previous one
    /// has left (what is still queued can be overtaken by an urgent message); then flushes.
    /// Breaks when the connection is over.
    fn write_batch(&mut self) -> ControlFlow<()> {
        if !self.want_write && self.closing.is_none() {
            for t in self.outbox.take(WRITES_PER_TURN) {
                if let Err(e) = self.ws.write(Message::Text(t))
                    && !is_would_block(&e)
                {
                    self.ended.reason = format!("write failed: {e}");
                    return ControlFlow::Break(());
                }
            }
        }
        match self.ws.flush() {
            Ok(()) => self.want_write = false,
            Err(e) if is_would_block(&e) => self.want_write = true,
            Err(WsError::ConnectionClosed) => return ControlFlow::Break(()),
            Err(e) => {
                if self.ended.reason.is_empty() {
                    self.ended.reason = format!("write failed: {e}");
                }
                return ControlFlow::Break(());
            }
        }
        ControlFlow::Continue(())
    }

    /// Waits in `poll` until the socket can be read (`reading`) or written (when blocked),
    /// a message is queued, or `timeout` passes. Nothing is read or written first: a socket
    /// with data makes `poll` return at once, and an answer the thread queued itself is
    /// written without a wake-up (a round trip is read, answer, write, `poll`). Breaks when
    /// `poll` fails.
    fn wait(&mut self, reading: bool, timeout: Option<Duration>) -> ControlFlow<()> {
        if !self.outbox.park(self.want_write || self.closing.is_some()) {
            return ControlFlow::Continue(());
        }
        let interests = [
            Interest {
                fd: self.fd,
                read: reading,
                write: self.want_write,
            },
            Interest {
                fd: self.wake.fd(),
                read: true,
                write: false,
            },
        ];
        let polled = sys::poll(&interests, timeout);
        self.outbox.unpark();
        match polled {
            Ok(r) => {
                if r[1].readable {
                    self.wake.drain();
                }
                ControlFlow::Continue(())
            }
            Err(e) => {
                self.ended.reason = format!("poll failed: {e}");
                ControlFlow::Break(())
            }
        }
    }

    /// Ends the connection: the outbox takes no more, the socket is shut down, and the
    /// handler learns how it ended.
    fn finish(mut self) {
        self.outbox.end();
        let _ = self.ws.get_mut().stream.shutdown(std::net::Shutdown::Both);
        (self.handler)(Event::Ended(self.ended));
    }
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

/// A connection's socket, counting into its outbox's `progress` the bytes that show the peer
/// at work: every byte it sent us, and every byte it took off our side of the socket once that
/// was full, until all we had for it has gone. A peer busy sending a big message, or reading
/// one, answers a keepalive ping only after it; a peer that stopped reading leaves the socket
/// full and counts nothing, and what the kernel's buffers take without blocking counts nothing
/// either, since a peer that reads nothing takes it all the same.
struct Metered<S> {
    stream: S,
    outbox: std::sync::Arc<Outbox>,
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

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
