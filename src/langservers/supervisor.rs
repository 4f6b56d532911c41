//! A language server's process and its life. The process is spawned in its own process group
//! by a thread that lives as long as it (so PR_SET_PDEATHSIG means "ccide died"); its pipes are
//! an `lsp::connection` whose threads only move messages: what the server says, and finally
//! that it exited, go to the `Deliver<Event>` its owner gave, never into the owner's code. The owner
//! (`server`) decides, and tells the process what to do through `Process`: send, stop
//! gracefully, kill. `Life` is the bookkeeping of starts and exits: crashes, backoff, giving up
//! (ccide-protocol(7) §11.7).

use std::collections::VecDeque;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::lsp::connection::{self, Received, SendError, Sender};
use crate::proc::{Deliver, Queue};

/// What a process reports to its owner.
#[derive(Debug)]
pub enum Event {
    Received(Received),
    /// The process ended (and was reaped): how.
    Exited(String),
}

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
/// After the exit, how long its stderr may take to end before the exit is reported anyway.
const STDERR_DRAIN: Duration = Duration::from_secs(2);

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

/// Starts `cmd` (its program, arguments, directory and environment set); what it says and its
/// end go to `deliver`. At most `limit` bytes wait to be written to it (`SendError::Full`
/// beyond).
pub fn spawn(cmd: Command, limit: usize, deliver: Deliver<Event>) -> Result<Process, String> {
    let control: Arc<Queue<Control>> = Arc::default();
    let ready: Arc<Queue<Control>> = Arc::default();
    let (c, r) = (control.clone(), ready.clone());
    crate::proc::spawn_thread("lsp-proc", move || own(cmd, limit, deliver, &c, &r))
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
    mut cmd: Command,
    limit: usize,
    deliver: Deliver<Event>,
    control: &Arc<Queue<Control>>,
    ready: &Queue<Control>,
) {
    use std::os::unix::process::CommandExt;
    let program = cmd.get_program().to_string_lossy().into_owned();
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    crate::sys::unblock_all_signals_in_child(&mut cmd);
    crate::sys::die_with_parent(&mut cmd);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            ready.push(Control::Started(Err(format!("cannot run {program}: {e}"))));
            return;
        }
    };
    let pid = child.id();
    let d = pipe(&deliver, control);
    let (sender, stderr_reader) =
        match connection::child(&mut child, "lsp", limit, Some(cut_publish), d) {
            Ok(s) => s,
            Err(e) => {
                crate::proc::kill_group(pid);
                let _ = child.wait();
                ready.push(Control::Started(Err(format!(
                    "cannot start the threads for {program}: {e}"
                ))));
                return;
            }
        };
    ready.push(Control::Started(Ok((pid, sender.clone()))));
    // Its descendants, looked up while it lives (each `WATCH`, before it is asked to stop and
    // before it is killed): once it exited, a helper it started with `setsid` belongs to init
    // and is found by nothing else.
    let mut known = Vec::new();
    let mut watch = || {
        let gone = crate::proc::exited(pid);
        if !gone {
            crate::proc::remember_descendants(pid, &mut known);
        }
        gone
    };
    let killed = live(control, &sender, &mut watch);
    watch();
    // The leader is not reaped yet, so its pid (the group id) cannot have been reused; the
    // others are killed only while their start time still names the process seen.
    crate::proc::kill_group(pid);
    crate::proc::kill_known(&known);
    let how = match child.wait() {
        Ok(s) => s.to_string(),
        Err(e) => format!("wait failed: {e}"),
    };
    // Its last words before its exit: the group is dead, so stderr ends at once, unless a
    // descendant that escaped the group holds it (then not for longer than this).
    let deadline = Instant::now() + STDERR_DRAIN;
    while stderr_reader.as_ref().is_some_and(|t| !t.is_finished()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(2));
    }
    deliver(Event::Exited(match killed {
        Some(why) => format!("{how}, killed: {why}"),
        None => how,
    }));
}

/// Diagnostics a result holds at most for a file (and the store for a file and origin): the
/// first ones, and first of all one saying how many more there were (ccide-protocol(7)
/// §11.7). The CLI compares every diagnostic after an edit with every one before it.
pub const MAX_ITEMS: usize = 1000;
/// A body above this that publishes diagnostics is cut before it is parsed: parsed whole, a
/// 36 MB publish took serve to 250 MiB. Of its items, at most this many bytes are kept.
const CUT_ABOVE: usize = 1 << 20;

/// Cuts a large `textDocument/publishDiagnostics` body to its first diagnostics (at most
/// `MAX_ITEMS` - 1, in at most `CUT_ABOVE` bytes), and puts first one that says how many
/// more there were. A scan of the text that knows strings and nesting, no parse.
pub fn cut_publish(body: &mut Vec<u8>) {
    if body.len() <= CUT_ABOVE {
        return;
    }
    let Some((open, cut, close, items, kept)) = scan_publish(body) else {
        return;
    };
    if kept == items {
        return;
    }
    let marker = format!(
        r#"{{"range":{{"start":{{"line":0,"character":0}},"end":{{"line":0,"character":0}}}},"severity":3,"source":"ccide","message":"{} more diagnostics of this file from this language server are not shown: ccide keeps {MAX_ITEMS} per file and source"}}"#,
        items - kept
    );
    let mut out = body[..=open].to_vec();
    out.extend_from_slice(marker.as_bytes());
    if kept > 0 {
        out.push(b',');
        out.extend_from_slice(&body[open + 1..cut]);
    }
    out.extend_from_slice(&body[close..]);
    *body = out;
}

/// In a publish's body: where `params.diagnostics` opens (its `[`), where its kept items end,
/// where it closes (its `]`), how many items it has and how many are kept.
fn scan_publish(b: &[u8]) -> Option<(usize, usize, usize, usize, usize)> {
    let (mut depth, mut i) = (0usize, 0usize);
    // The last key read in the message, and in its params.
    let (mut k1, mut k2): (&[u8], &[u8]) = (b"", b"");
    let mut publish = false;
    let mut open = None;
    let (mut cut, mut items, mut kept, mut close) = (0, 0, 0, None);
    // Whether the current item has begun (a `[` followed by `]` holds none).
    let mut begun = false;
    while i < b.len() {
        let c = b[i];
        if open.is_some() && close.is_none() && depth >= 3 && !c.is_ascii_whitespace() {
            begun |= !(depth == 3 && matches!(c, b']' | b','));
        }
        match c {
            b'"' => {
                let start = i + 1;
                i += 1;
                while *b.get(i)? != b'"' {
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                let text = &b[start..i];
                let key = b[i + 1..]
                    .iter()
                    .find(|c| !c.is_ascii_whitespace())
                    .is_some_and(|c| *c == b':');
                match depth {
                    1 if key => k1 = text,
                    1 if k1 == b"method" => publish = text == b"textDocument/publishDiagnostics",
                    2 if key && k1 == b"params" => k2 = text,
                    _ => {}
                }
            }
            b'{' | b'[' => {
                if depth == 2 && c == b'[' && k1 == b"params" && k2 == b"diagnostics" {
                    open.get_or_insert(i);
                }
                depth += 1;
            }
            b'}' | b']' | b',' => {
                if open.is_some() && close.is_none() && depth == 3 && c != b'}' {
                    // An item ends here.
                    if begun {
                        items += 1;
                        if items < MAX_ITEMS && i - open? <= CUT_ABOVE {
                            (kept, cut) = (items, i);
                        }
                    }
                    begun = false;
                    if c == b']' {
                        close = Some(i);
                    }
                }
                if c != b',' {
                    depth = depth.checked_sub(1)?;
                }
            }
            _ => {}
        }
        i += 1;
    }
    Some((open?, cut, close.filter(|_| publish)?, items, kept))
}

/// What the connection's threads deliver, passed on; the end of the stream is also told to
/// the owning thread, after the owner has it (so `Exited` comes after it).
fn pipe(deliver: &Deliver<Event>, control: &Arc<Queue<Control>>) -> Deliver<Received> {
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
/// (`shutdown`, `exit`, each given `STOP_GRACE`). `exited` also looks at its process tree.
/// Says why if it is to be killed because it did not end when stopped.
fn live(
    control: &Queue<Control>,
    sender: &Sender,
    exited: &mut dyn FnMut() -> bool,
) -> Option<&'static str> {
    loop {
        match control.pop(Some(Instant::now() + WATCH)) {
            None if exited() => return None,
            None | Some(Control::ShutdownAnswered | Control::Started(_)) => {}
            Some(Control::Eof | Control::Kill) => return None,
            Some(Control::Stop(shutdown)) => {
                exited();
                if sender.send(&shutdown).is_ok() {
                    let until = Instant::now() + STOP_GRACE;
                    loop {
                        match control.pop(Some(until)) {
                            Some(Control::Kill) => return None,
                            Some(Control::ShutdownAnswered | Control::Eof) | None => break,
                            Some(Control::Stop(_) | Control::Started(_)) => {}
                        }
                    }
                    exited();
                    let _ = sender.send(&crate::rpc::notification("exit", Value::Null));
                }
                // Its stdin ends once what is queued is written.
                sender.close();
                let until = Instant::now() + STOP_GRACE;
                while !exited() {
                    if Instant::now() >= until {
                        return Some("it did not end within a second of shutdown and exit");
                    }
                    let tick = (Instant::now() + Duration::from_millis(10)).min(until);
                    if matches!(control.pop(Some(tick)), Some(Control::Kill)) {
                        return None;
                    }
                }
                return None;
            }
        }
    }
}

/// An in-memory server for tests: the other end of `conn` plays the language server; closing
/// its side is the process exiting.
#[cfg(test)]
pub fn memory(conn: connection::Connection, deliver: Deliver<Event>) -> Process {
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
        live(&c, &s, &mut || ended.load(Ordering::SeqCst));
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
    /// Why ccide stopped it (asked it to end), for the report of its exit.
    pub stopping_because: Option<String>,
    /// Why it is stopped, and how it ended (status shows it).
    pub stopped: Option<String>,
    /// Not crashed since it last handed out a result (or never crashed).
    pub delivering: bool,
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
            stopping_because: None,
            stopped: None,
            delivering: true,
            stderr_tail: VecDeque::new(),
        }
    }

    pub fn starting(&mut self, now: Instant) {
        self.phase = Phase::Starting;
        self.started = now;
        self.killed_because = None;
        self.stopped = None;
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
                let why = self.stopping_because.take().unwrap_or_default();
                crate::log::info!("language server {name} stopped ({why}; {how})");
                self.stopped = Some(format!("{why}; {how}"));
            }
            Phase::Failed => {}
            phase => {
                self.delivering = false;
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
