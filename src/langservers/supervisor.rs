//! A language server's process and its life. The process is spawned in its own process group
//! by a thread that lives as long as it (so PR_SET_PDEATHSIG means "ccide died"); its pipes are
//! an `lsp::connection` whose threads only move messages: what the server says, and finally
//! that it exited, go to the `Deliver` its owner gave, never into the owner's code. The owner
//! (`server`) decides, and tells the process what to do through `Process`: send, stop
//! gracefully, kill. `Life` is the bookkeeping of starts and exits: crashes, backoff, giving up
//! (ccide-protocol(7) §11.7).

use std::collections::VecDeque;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::lsp::connection::{self, Received, SendError, Sender};
use crate::proc::Queue;

/// What a process reports to its owner.
#[derive(Debug)]
pub enum Event {
    Received(Received),
    /// The process ended (and was reaped): how.
    Exited(String),
}

pub type Deliver = Arc<dyn Fn(Event) + Send + Sync>;

/// What the owning thread is told.
enum Control {
    /// Stop gracefully: send this `shutdown` request, wait for its answer, send `exit`.
    Stop(Value),
    /// The `shutdown` request was answered.
    ShutdownAnswered,
    /// The server closed its stdout (it exited, or is about to).
    Eof,
    Kill,
    /// To the starter only: the pid and the sending side, or why the program could not run.
    Started(Result<(u32, Sender), String>),
}

/// How long a stopping server gets for each of `shutdown` and `exit` before its tree is
/// killed.
const STOP_GRACE: Duration = Duration::from_secs(1);
/// How often the owning thread checks that the server itself still runs: one that exits while
/// a child it started holds its pipes open would otherwise never be noticed.
const WATCH: Duration = Duration::from_millis(500);

/// A running process, as its owner holds it.
pub struct Process {
    pid: Option<u32>,
    sender: Sender,
    control: Arc<Queue<Control>>,
}

impl Process {
    /// None for a process that is not one (a test's in-memory server).
    pub fn pid(&self) -> Option<u32> {
        self.pid
    }

    pub fn send(&self, v: &Value) -> Result<(), SendError> {
        self.sender.send(v)
    }

    pub fn sender(&self) -> &Sender {
        &self.sender
    }

    /// `shutdown` (this request), then `exit`, then the tree is killed; `Exited` follows.
    pub fn stop(&self, shutdown: Value) {
        self.control.push(Control::Stop(shutdown));
    }

    pub fn shutdown_answered(&self) {
        self.control.push(Control::ShutdownAnswered);
    }

    /// Kills the process tree now; `Exited` follows. Only the owning thread kills and reaps,
    /// so a pid is never signalled after it was reaped.
    pub fn kill(&self) {
        self.control.push(Control::Kill);
    }
}

/// Starts `words` in `cwd`; what it says and its end go to `deliver`. At most `limit` bytes
/// wait to be written to it (`SendError::Full` beyond).
pub fn spawn(
    words: &[String],
    cwd: &Path,
    limit: usize,
    deliver: Deliver,
) -> Result<Process, String> {
    let control: Arc<Queue<Control>> = Arc::default();
    let ready: Arc<Queue<Control>> = Arc::default();
    let (words, cwd, c, r) = (
        words.to_vec(),
        cwd.to_path_buf(),
        control.clone(),
        ready.clone(),
    );
    crate::proc::spawn_thread("lsp-proc", move || {
        own(&words, &cwd, limit, deliver, &c, &r)
    })
    .map_err(|e| format!("cannot start a thread: {e}"))?;
    match ready.pop(None) {
        Some(Control::Started(Ok((pid, sender)))) => Ok(Process {
            pid: Some(pid),
            sender,
            control,
        }),
        Some(Control::Started(Err(e))) => Err(e),
        _ => Err("the process thread ended early".into()),
    }
}

/// The owning thread: spawn, wait for the end (told to stop, the server hung up or exited, a
/// kill), then kill what is left of the tree and reap the leader.
fn own(
    words: &[String],
    cwd: &Path,
    limit: usize,
    deliver: Deliver,
    control: &Arc<Queue<Control>>,
    ready: &Queue<Control>,
) {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(&words[0]);
    cmd.args(&words[1..])
        .current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    crate::sys::unblock_all_signals_in_child(&mut cmd);
    crate::sys::die_with_parent(&mut cmd);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            ready.push(Control::Started(Err(format!(
                "cannot run {}: {e}",
                words[0]
            ))));
            return;
        }
    };
    let pid = child.id();
    let sender = match connection::child(&mut child, "lsp", limit, pipe(&deliver, control)) {
        Ok(s) => s,
        Err(e) => {
            crate::proc::kill_tree(pid);
            let _ = child.wait();
            ready.push(Control::Started(Err(format!(
                "cannot start the threads for {}: {e}",
                words[0]
            ))));
            return;
        }
    };
    ready.push(Control::Started(Ok((pid, sender.clone()))));
    live(control, &sender, || crate::proc::exited(pid));
    // The leader is not reaped yet, so its pid (the group id) cannot have been reused.
    crate::proc::kill_tree(pid);
    let how = match child.wait() {
        Ok(s) => s.to_string(),
        Err(e) => format!("wait failed: {e}"),
    };
    deliver(Event::Exited(how));
}

/// What the connection's threads deliver, passed on; the end of the stream is also told to
/// the owning thread, after the owner has it (so `Exited` comes after it).
fn pipe(deliver: &Deliver, control: &Arc<Queue<Control>>) -> connection::Deliver {
    let (d, c) = (deliver.clone(), control.clone());
    Arc::new(move |r: Received| {
        let end = matches!(r, Received::Closed(_));
        d(Event::Received(r));
        if end {
            c.push(Control::Eof);
        }
    })
}

/// Waits until the process is done with: it hung up or exited, was killed, or was stopped
/// (`shutdown`, `exit`, each given `STOP_GRACE`).
fn live(control: &Queue<Control>, sender: &Sender, exited: impl Fn() -> bool) {
    loop {
        match control.pop(Some(Instant::now() + WATCH)) {
            None if exited() => return,
            None | Some(Control::ShutdownAnswered | Control::Started(_)) => {}
            Some(Control::Eof | Control::Kill) => return,
            Some(Control::Stop(shutdown)) => {
                if sender.send(&shutdown).is_ok() {
                    let until = Instant::now() + STOP_GRACE;
                    loop {
                        match control.pop(Some(until)) {
                            Some(Control::Kill) => return,
                            Some(Control::ShutdownAnswered | Control::Eof) | None => break,
                            Some(Control::Stop(_) | Control::Started(_)) => {}
                        }
                    }
                    let _ = sender.send(&crate::rpc::notification("exit", Value::Null));
                }
                // Its stdin ends once what is queued is written.
                sender.close();
                let until = Instant::now() + STOP_GRACE;
                while !exited() && Instant::now() < until {
                    let tick = (Instant::now() + Duration::from_millis(10)).min(until);
                    if matches!(control.pop(Some(tick)), Some(Control::Kill)) {
                        return;
                    }
                }
                return;
            }
        }
    }
}

/// An in-memory server for tests: the other end of `conn` plays the language server; closing
/// its side is the process exiting.
#[cfg(test)]
pub fn memory(conn: connection::Connection, deliver: Deliver) -> Process {
    use std::sync::atomic::{AtomicBool, Ordering};
    let control: Arc<Queue<Control>> = Arc::default();
    let ended = Arc::new(AtomicBool::new(false));
    let (receiver, pass, e) = (conn.receiver, pipe(&deliver, &control), ended.clone());
    crate::proc::spawn_thread("lsp-mem-read", move || {
        while let Some(r) = receiver.pop(None) {
            let end = matches!(r, Received::Closed(_));
            if end {
                e.store(true, Ordering::SeqCst);
            }
            pass(r);
            if end {
                break;
            }
        }
    })
    .expect("a thread");
    let (c, s) = (control.clone(), conn.sender.clone());
    crate::proc::spawn_thread("lsp-mem", move || {
        live(&c, &s, || ended.load(Ordering::SeqCst));
        s.close();
        deliver(Event::Exited("closed".into()));
    })
    .expect("a thread");
    Process {
        pid: None,
        sender: conn.sender,
        control,
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Phase {
    Stopped,
    /// Spawned; `initialize` not answered yet.
    Starting,
    Running,
    Stopping,
    /// Exited unasked; restarted at `retry_at` if documents want it.
    Crashed,
    /// Cannot run, or kept dying before answering `initialize`: not restarted.
    Failed,
}

/// Lines of a server's stderr kept for the report of its exit.
const STDERR_TAIL: usize = 12;

/// A server's starts and exits.
pub struct Life {
    pub phase: Phase,
    pub started: Instant,
    /// Exits in a row, each soon after its start.
    crashes: u32,
    pub retry_at: Instant,
    pub restarts: u32,
    pub last_error: Option<String>,
    /// Why ccide ended the current process, for the report of its exit.
    pub killed_because: Option<String>,
    stderr_tail: VecDeque<String>,
}

impl Life {
    pub fn new(now: Instant) -> Life {
        Life {
            phase: Phase::Stopped,
            started: now,
            crashes: 0,
            retry_at: now,
            restarts: 0,
            last_error: None,
            killed_because: None,
            stderr_tail: VecDeque::new(),
        }
    }

    pub fn starting(&mut self, now: Instant) {
        self.phase = Phase::Starting;
        self.started = now;
        self.killed_because = None;
        self.stderr_tail.clear();
    }

    pub fn stderr(&mut self, line: &str) {
        if self.stderr_tail.len() == STDERR_TAIL {
            self.stderr_tail.pop_front();
        }
        self.stderr_tail.push_back(line.chars().take(300).collect());
    }

    /// The process ended (`how`): stopped as asked, or crashed (restart after a backoff
    /// doubling from `backoff.0` up to `backoff.1`), or failed for good (three deaths before
    /// answering `initialize`).
    pub fn exited(&mut self, name: &str, how: &str, now: Instant, backoff: (Duration, Duration)) {
        let how = match self.killed_because.take() {
            Some(why) => format!("killed: {why}"),
            None => how.to_string(),
        };
        match self.phase {
            Phase::Stopping | Phase::Stopped => {
                self.phase = Phase::Stopped;
                crate::log::info!("language server {name} stopped");
            }
            Phase::Failed => {}
            phase => {
                if now - self.started >= backoff.1 {
                    self.crashes = 0;
                }
                self.crashes += 1;
                let tail: Vec<&str> = self.stderr_tail.iter().map(String::as_str).collect();
                let tail = if tail.is_empty() {
                    String::new()
                } else {
                    format!("; its last words: {}", tail.join(" | "))
                };
                if phase == Phase::Starting && self.crashes >= 3 {
                    let e = format!("exited before answering initialize, 3 times ({how}){tail}");
                    crate::log::warn!("language server {name}: {e}; not used");
                    self.last_error = Some(e);
                    self.phase = Phase::Failed;
                } else {
                    let shift = (self.crashes - 1).min(16);
                    let delay = (backoff.0 * (1u32 << shift)).min(backoff.1);
                    self.retry_at = now + delay;
                    self.last_error = Some(format!("exited ({how}){tail}"));
                    self.phase = Phase::Crashed;
                    crate::log::warn!(
                        "language server {name} exited unexpectedly ({how}); restarting in {}{tail}",
                        crate::text::human_duration(delay)
                    );
                }
            }
        }
    }
}
