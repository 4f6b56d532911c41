//! A connection is a pair of queues of messages, as in rust-analyzer's `lsp-server`: the
//! threads here only move messages between a stream and the queues, and never call up into
//! whoever owns the connection; the owner drains its inbox and decides. `Connection::stdio()`
//! is `ccide lsp`'s link to its editor, `child` a language server's pipes, and
//! `Connection::memory()` a pair joined in memory, for tests without a process or a socket.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::OwnedFd;
use std::process::Child;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use serde_json::Value;

use super::framing;
use crate::proc::{Deliver, Queue};
use crate::rpc::{self, ErrorCode, Message, RpcError};

/// What a connection's reading side delivers.
#[derive(Debug)]
pub enum Received {
    Message(Message),
    /// A body that is not a JSON-RPC message, with the error answer owed for it.
    Malformed(Value),
    /// A line the child process wrote on stderr.
    Stderr(String),
    /// The stream ended: None at a clean end between messages, else why it broke (a message
    /// above the size limit, a broken header).
    Closed(Option<String>),
}

#[derive(Debug, PartialEq)]
pub enum SendError {
    /// The peer is gone, or the connection was closed.
    Closed,
    /// More than the connection's limit waits to be written: the peer does not read.
    Full { queued: usize },
}

/// The sending side: messages are queued and written by the connection's writer thread, so a
/// sender never blocks on a peer that stopped reading; what waits is bounded.
#[derive(Clone)]
pub struct Sender(Arc<Outbound>);

enum Outbound {
    Stream {
        queue: Queue<Vec<u8>>,
        queued: AtomicUsize,
        limit: usize,
    },
    #[cfg(test)]
    Memory(Arc<Queue<Received>>),
}

impl Sender {
    pub fn send(&self, v: &Value) -> Result<(), SendError> {
        match &*self.0 {
            Outbound::Stream {
                queue,
                queued,
                limit,
            } => {
                let bytes = framing::encode(v);
                let n = bytes.len();
                let before = queued.fetch_add(n, Ordering::SeqCst);
                if before > 0 && before + n > *limit {
                    queued.fetch_sub(n, Ordering::SeqCst);
                    return Err(SendError::Full { queued: before });
                }
                if !queue.push(bytes) {
                    queued.fetch_sub(n, Ordering::SeqCst);
                    return Err(SendError::Closed);
                }
                Ok(())
            }
            #[cfg(test)]
            Outbound::Memory(peer) => {
                let r = match rpc::classify(v.clone()) {
                    Ok(m) => Received::Message(m),
                    Err(answer) => Received::Malformed(answer),
                };
                if peer.push(r) {
                    Ok(())
                } else {
                    Err(SendError::Closed)
                }
            }
        }
    }

    /// Bytes waiting to be written.
    pub fn queued(&self) -> usize {
        match &*self.0 {
            Outbound::Stream { queued, .. } => queued.load(Ordering::SeqCst),
            #[cfg(test)]
            Outbound::Memory(_) => 0,
        }
    }

    /// No more messages: what is queued is still written, then the stream is closed (the
    /// peer sees the end of its input). In memory, the peer receives `Closed(None)`.
    pub fn close(&self) {
        match &*self.0 {
            Outbound::Stream { queue, .. } => queue.close(),
            #[cfg(test)]
            Outbound::Memory(peer) => {
                peer.push(Received::Closed(None));
                peer.close();
            }
        }
    }
}

pub struct Connection {
    pub sender: Sender,
    pub receiver: Arc<Queue<Received>>,
}

/// Shrinks a message body before it is parsed (a parsed message takes several times its size).
pub type Trim = fn(&mut Vec<u8>);

impl Connection {
    /// The process's own standard input and output (`ccide lsp`, started by an editor).
    pub fn stdio(limit: usize) -> std::io::Result<Connection> {
        let receiver: Arc<Queue<Received>> = Arc::default();
        let r = receiver.clone();
        // Copies of fds 0 and 1 as files, as a child's pipes: one instance of the threads.
        use std::os::fd::AsFd;
        let input = std::io::stdin().as_fd().try_clone_to_owned()?;
        let output = std::io::stdout().as_fd().try_clone_to_owned()?;
        let sender = start(
            "stdio",
            reader(File::from(input)),
            File::from(output),
            limit,
            Arc::new(move |m| {
                r.push(m);
            }),
        )?;
        Ok(Connection { sender, receiver })
    }

    /// Two connections joined in memory: what one sends, the other receives.
    #[cfg(test)]
    pub fn memory() -> (Connection, Connection) {
        let (a, b): (Arc<Queue<Received>>, Arc<Queue<Received>>) = Default::default();
        (
            Connection {
                sender: Sender(Arc::new(Outbound::Memory(b.clone()))),
                receiver: a.clone(),
            },
            Connection {
                sender: Sender(Arc::new(Outbound::Memory(a))),
                receiver: b,
            },
        )
    }
}

/// A stream to read messages from, buffered as `start` wants it.
pub fn reader(f: File) -> BufReader<File> {
    BufReader::with_capacity(1 << 16, f)
}

/// Starts the threads of a connection over a stream pair: one reads framed messages and
/// delivers them, one writes what the returned sender queues. The reader delivers
/// `Closed` last. What `reader` has buffered already (bytes that came with a handshake) is
/// read first. Files, pipes and sockets alike: the threads exist once in the binary (each
/// instance costs kilobytes).
pub fn start(
    name: &str,
    reader: BufReader<File>,
    writer: File,
    limit: usize,
    deliver: Deliver<Received>,
) -> std::io::Result<Sender> {
    start_trimmed(name, reader, writer, limit, None, deliver)
}

fn start_trimmed(
    name: &str,
    reader: BufReader<File>,
    writer: File,
    limit: usize,
    trim: Option<Trim>,
    deliver: Deliver<Received>,
) -> std::io::Result<Sender> {
    let out = Arc::new(Outbound::Stream {
        queue: Queue::default(),
        queued: AtomicUsize::new(0),
        limit,
    });
    let o = out.clone();
    crate::proc::spawn_thread(&format!("{name}-write"), move || write_all(&o, writer))?;
    crate::proc::spawn_thread(&format!("{name}-read"), move || {
        read_all(reader, trim, &deliver)
    })?;
    Ok(Sender(out))
}

/// A child's stdin, stdout and stderr (each taken from `child`): stderr's lines are
/// delivered as `Stderr`, at most 8 KiB each; each message body goes through `trim` first.
/// Also returns the stderr reader's thread, which ends at the pipe's end: whoever reports the
/// child's exit waits for it first, so the exit comes after the child's last words.
pub fn child(
    child: &mut Child,
    name: &str,
    limit: usize,
    trim: Option<Trim>,
    deliver: Deliver<Received>,
) -> std::io::Result<(Sender, Option<std::thread::JoinHandle<()>>)> {
    let missing = || std::io::Error::other("the child's pipes were not set up");
    let stdin = child.stdin.take().ok_or_else(missing)?;
    let stdout = child.stdout.take().ok_or_else(missing)?;
    let mut stderr_reader = None;
    if let Some(stderr) = child.stderr.take() {
        let d = deliver.clone();
        stderr_reader = Some(crate::proc::spawn_thread(
            &format!("{name}-stderr"),
            move || {
                let mut r = BufReader::new(stderr);
                let mut line = Vec::new();
                loop {
                    line.clear();
                    match (&mut r).take(8192).read_until(b'\n', &mut line) {
                        Ok(0) | Err(_) => break,
                        Ok(_) => d(Received::Stderr(
                            String::from_utf8_lossy(&line).trim_end().to_string(),
                        )),
                    }
                }
            },
        )?);
    }
    let (r, w) = (OwnedFd::from(stdout), OwnedFd::from(stdin));
    let sender = start_trimmed(
        name,
        reader(File::from(r)),
        File::from(w),
        limit,
        trim,
        deliver,
    )?;
    Ok((sender, stderr_reader))
}

fn read_all(mut r: BufReader<File>, trim: Option<Trim>, deliver: &Deliver<Received>) {
    let end = loop {
        match framing::read_framed(&mut r) {
            Ok(Some(mut body)) => {
                if let Some(trim) = trim {
                    trim(&mut body);
                }
                deliver(match serde_json::from_slice::<Value>(&body) {
                    Ok(v) => match rpc::classify(v) {
                        Ok(m) => Received::Message(m),
                        Err(answer) => Received::Malformed(answer),
                    },
                    Err(e) => Received::Malformed(rpc::error_response(
                        None,
                        &RpcError::new(ErrorCode::ParseError, format!("Parse error: {e}")),
                    )),
                })
            }
            Ok(None) => break None,
            Err(e) => break Some(e.to_string()),
        }
    };
    deliver(Received::Closed(end));
}

fn write_all(out: &Outbound, mut w: File) {
    #[cfg_attr(not(test), allow(irrefutable_let_patterns))]
    let Outbound::Stream { queue, queued, .. } = out else {
        return;
    };
    while let Some(bytes) = queue.pop(None) {
        if w.write_all(&bytes).and_then(|()| w.flush()).is_err() {
            // The peer stopped reading for good; senders now get `Closed`, and nothing
            // waits to be written any more.
            queue.close();
            queued.store(0, Ordering::SeqCst);
            break;
        }
        // Counted until written: `queued() == 0` after `close` means all of it is out.
        queued.fetch_sub(bytes.len(), Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::{Duration, Instant};

    fn next(q: &Queue<Received>) -> Received {
        q.pop(Some(Instant::now() + Duration::from_secs(10)))
            .expect("a message within 10 s")
    }

    #[test]
    fn a_childs_last_words_are_delivered_once_its_stderr_reader_ended() {
        let mut c = std::process::Command::new("sh")
            .args(["-c", "echo 'no such toolchain' >&2; exit 1"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let inbox: Arc<Queue<Received>> = Arc::default();
        let i = inbox.clone();
        let (_tx, stderr_reader) = child(
            &mut c,
            "dies",
            1 << 20,
            None,
            Arc::new(move |m| {
                i.push(m);
            }),
        )
        .unwrap();
        c.wait().unwrap();
        stderr_reader.expect("stderr was piped").join().unwrap();
        let mut got = Vec::new();
        while let Some(r) = inbox.pop(Some(Instant::now())) {
            got.push(format!("{r:?}"));
        }
        assert!(
            got.contains(&"Stderr(\"no such toolchain\")".to_string()),
            "{got:?}"
        );
    }

    #[test]
    fn memory_connections_deliver_messages_and_the_end() {
        let (a, b) = Connection::memory();
        a.sender
            .send(&json!({"jsonrpc": "2.0", "id": 1, "method": "x"}))
            .unwrap();
        a.sender.send(&json!({"id": 2})).unwrap();
        assert!(
            matches!(next(&b.receiver), Received::Message(Message::Request(r)) if r.method == "x")
        );
        assert!(
            matches!(next(&b.receiver), Received::Malformed(v) if v["error"]["code"] == -32600)
        );
        a.sender.close();
        assert!(matches!(next(&b.receiver), Received::Closed(None)));
        assert_eq!(a.sender.send(&json!({})), Err(SendError::Closed));
    }

    /// `queued()` counts what is not written yet, the message being written included: zero
    /// after `close` means the peer has all of it (`ccide lsp` waits for that before it exits).
    #[test]
    fn what_is_being_written_still_counts_as_queued() {
        let (ours, mut theirs) = std::os::unix::net::UnixStream::pair().unwrap();
        let (r, w) = (ours.try_clone().unwrap(), ours);
        let r = reader(File::from(OwnedFd::from(r)));
        let w = File::from(OwnedFd::from(w));
        let tx = start("t", r, w, 16 << 20, Arc::new(|_| {})).unwrap();
        // Far above what the socket buffers: the writer blocks inside this message.
        let big = json!({"jsonrpc": "2.0", "method": "x", "params": "a".repeat(4 << 20)});
        tx.send(&big).unwrap();
        tx.close();
        let n = framing::encode(&big).len();
        let end = Instant::now() + Duration::from_millis(300);
        while Instant::now() < end {
            assert_eq!(tx.queued(), n, "nothing was read: all of it still waits");
            std::thread::sleep(Duration::from_millis(10));
        }
        let mut got = vec![0; n];
        theirs.read_exact(&mut got).unwrap();
        let end = Instant::now() + Duration::from_secs(10);
        while tx.queued() > 0 {
            assert!(
                Instant::now() < end,
                "all was read, yet {} still queued",
                tx.queued()
            );
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// A real pipe through `cat`: framing both ways, stderr lines, a body that is not JSON,
    /// and the end of the stream after the child's stdin is closed.
    #[test]
    fn a_child_process_connection_frames_both_ways() {
        let mut c = std::process::Command::new("sh")
            .args([
                "-c",
                "echo to-stderr >&2; printf 'Content-Length: 3\\r\\n\\r\\nxyz'; cat",
            ])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let inbox: Arc<Queue<Received>> = Arc::default();
        let i = inbox.clone();
        let tx = child(
            &mut c,
            "cat",
            1 << 20,
            None,
            Arc::new(move |m| {
                i.push(m);
            }),
        )
        .unwrap()
        .0;
        let v = json!({"jsonrpc": "2.0", "method": "é", "params": {}});
        tx.send(&v).unwrap();
        tx.close();
        // stdout and stderr are read by two threads: the stderr line may come after the end of
        // stdout.
        let (mut got, mut closed) = (Vec::new(), false);
        while !closed || got.len() < 3 {
            match next(&inbox) {
                Received::Closed(why) => {
                    assert_eq!(why, None);
                    closed = true;
                }
                r => got.push(format!("{r:?}")),
            }
        }
        c.wait().unwrap();
        got.sort();
        assert_eq!(got.len(), 3, "{got:?}");
        assert!(
            got[0].starts_with("Malformed(Object {\"error\": Object {\"code\": Number(-32700)"),
            "{got:?}"
        );
        assert!(
            got[1].starts_with("Message(Notification(Notification { method: \"é\""),
            "{got:?}"
        );
        assert_eq!(got[2], "Stderr(\"to-stderr\")");
    }

    /// A peer that never reads: what waits is bounded, and the sender is told.
    #[test]
    fn a_peer_that_does_not_read_fills_a_bounded_queue() {
        let mut c = std::process::Command::new("sleep")
            .arg("30")
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let tx = child(&mut c, "sleep", 1 << 20, None, Arc::new(|_| {}))
            .unwrap()
            .0;
        let chunk = json!({"jsonrpc": "2.0", "method": "x", "params": "y".repeat(100_000)});
        let full = (0..1000).find_map(|_| tx.send(&chunk).err());
        let _ = c.kill();
        let _ = c.wait();
        match full {
            Some(SendError::Full { queued }) => assert!(queued <= 1 << 20, "{queued}"),
            other => panic!("expected Full, got {other:?}"),
        }
    }
}
