//! executeCode (ccide-protocol(7) §7): Python in a persistent kernel per connection, only when the user
//! allowed it (`serve --exec`). The model can call this tool, so with `--exec off` it is neither
//! listed nor run, and with `--exec ask` every call waits for `ccide exec approve`.
//!
//! A kernel is one long-lived `python3` child running `DRIVER`: it reads one JSON request per
//! line on stdin and writes JSON lines on a private copy of its original stdout, so that what
//! the user's code prints cannot corrupt the protocol: `["stdout"|"stderr", text]` for each
//! piece of output as it happens, then `{"error": traceback|null, "images": [base64 PNG]}`.

use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, ChildStdout, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Instant, SystemTime};

use serde_json::Value;

use super::events::Events;
use crate::json::obj;
use crate::proc::lock;
use crate::rpc::call::{Responder, tool_error};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    Off,
    Ask,
    On,
}

pub struct Settings {
    pub mode: Mode,
    pub timeout: std::time::Duration,
    pub approval_timeout: std::time::Duration,
}

/// The executeCode state of a server: settings, kernels per client, requests awaiting approval.
pub struct Exec {
    pub settings: Settings,
    events: Arc<Events>,
    inner: Mutex<Inner>,
    /// Signalled when a pending request is decided or dropped.
    decided: Condvar,
}

#[derive(Default)]
struct Inner {
    kernels: Vec<(u64, Arc<Slot>)>,
    pending: Vec<Request>,
    next_id: u64,
}

/// The kernel of one client. Its lock is held while code runs, so a client's calls run one at
/// a time; `pid` lets a disconnect kill a busy kernel without waiting for that lock.
#[derive(Default)]
struct Slot {
    kernel: Mutex<Option<Kernel>>,
    pid: AtomicU32,
    gone: AtomicBool,
}

struct Kernel {
    child: Child,
    stdin: ChildStdin,
    stdout: ChildStdout,
    /// Bytes read from the kernel that do not make a whole line yet.
    buf: Vec<u8>,
}

/// A call waiting for `ccide exec approve|deny`.
struct Request {
    id: u64,
    client: u64,
    code: String,
    created: SystemTime,
    /// The user's answer, until the waiting call takes it.
    decision: Option<bool>,
    responder: Arc<Responder>,
}

impl Request {
    fn describe(&self) -> Value {
        obj! {
            "id": self.id.to_string(), "client": self.client, "code": self.code.as_str(),
            "created": crate::text::unix_secs(self.created),
        }
    }
}

impl Exec {
    pub fn new(settings: Settings, events: Arc<Events>) -> Exec {
        Exec {
            settings,
            events,
            inner: Mutex::default(),
            decided: Condvar::new(),
        }
    }

    /// Ends the kernel of a connection that is gone, and drops its requests awaiting approval.
    pub fn client_gone(&self, client: u64) {
        let slots: Vec<_> = {
            let mut inner = lock(&self.inner);
            inner.pending.retain(|p| p.client != client);
            let (gone, kept) = std::mem::take(&mut inner.kernels)
                .into_iter()
                .partition(|(c, _)| *c == client);
            inner.kernels = kept;
            gone
        };
        self.decided.notify_all();
        for (_, slot) in slots {
            slot.gone.store(true, Ordering::SeqCst);
            let pid = slot.pid.load(Ordering::SeqCst);
            if pid != 0 {
                crate::proc::kill_group(pid);
            }
        }
    }

    /// Starts an executeCode call of `client` (in the first of `folders` when its kernel starts,
    /// its python3 found as `trust::find` says, `trusted` or not): registers the
    /// call for approval with `--exec ask`, and returns the work that waits for the decision
    /// and runs the code, to run on a worker thread.
    pub fn prepare(
        self: &Arc<Self>,
        client: u64,
        code: String,
        responder: &Arc<Responder>,
        folders: Vec<PathBuf>,
        trusted: bool,
    ) -> impl FnOnce() -> Option<Value> + Send + 'static {
        let slot = {
            let mut inner = lock(&self.inner);
            match inner.kernels.iter().find(|(c, _)| *c == client) {
                Some((_, s)) => s.clone(),
                None => {
                    let s = Arc::new(Slot::default());
                    inner.kernels.push((client, s.clone()));
                    s
                }
            }
        };
        let asked =
            (self.settings.mode == Mode::Ask).then(|| self.ask(client, &code, responder.clone()));
        let exec = self.clone();
        move || {
            if let Some(id) = asked {
                match exec.approval(id) {
                    Ok(()) => {}
                    Err(message) => return message.map(|m| tool_error(&m)),
                }
            }
            Some(run(&exec, &slot, &code, &folders, trusted))
        }
    }

    /// Registers a call awaiting approval and returns its id.
    fn ask(&self, client: u64, code: &str, responder: Arc<Responder>) -> u64 {
        let mut inner = lock(&self.inner);
        inner.next_id += 1;
        let p = Request {
            id: inner.next_id,
            client,
            code: code.to_string(),
            created: SystemTime::now(),
            decision: None,
            responder,
        };
        crate::log::info!(
            "executeCode request {0} from client #{client} waits for you: ccide exec approve {0} (or deny {0}); see the code with ccide exec",
            p.id
        );
        let mut event = p.describe();
        event["event"] = "exec_requested".into();
        self.events.emit(event);
        inner.pending.push(p);
        inner.next_id
    }

    /// Waits for the decision on request `id`: Ok to run, Err(message) to refuse, Err(None)
    /// when nobody can receive an answer any more.
    fn approval(&self, id: u64) -> Result<(), Option<String>> {
        let limit = self.settings.approval_timeout;
        let find = |inner: &Inner| inner.pending.iter().position(|p| p.id == id);
        let (mut inner, _) = self
            .decided
            .wait_timeout_while(lock(&self.inner), limit, |inner| {
                find(inner).is_some_and(|i| inner.pending[i].decision.is_none())
            })
            .unwrap();
        let decision = find(&inner).map(|i| inner.pending.remove(i).decision);
        drop(inner);
        let (how, result) = match decision {
            Some(Some(true)) => ("approved", Ok(())),
            Some(Some(false)) => (
                "denied",
                Err(Some(format!("executeCode request {id} was denied"))),
            ),
            Some(None) => (
                "timed out",
                Err(Some(format!(
                    "executeCode request {id} was not approved within {}",
                    crate::text::human_duration(limit)
                ))),
            ),
            None => ("abandoned", Err(None)),
        };
        crate::log::info!("executeCode request {id} {how}");
        self.events
            .emit(obj! {"event": "exec_settled", "id": id.to_string(), "how": how});
        result
    }
}

/// Runs `code` in the client's kernel (started if needed) and builds the tool result.
fn run(exec: &Exec, slot: &Slot, code: &str, folders: &[PathBuf], trusted: bool) -> Value {
    let mut kernel = lock(&slot.kernel);
    if kernel.is_none() {
        match Kernel::start(folders, trusted) {
            Ok(k) => {
                slot.pid.store(k.child.id(), Ordering::SeqCst);
                *kernel = Some(k);
            }
            Err(e) => return tool_error(&format!("cannot start python3 for executeCode: {e}")),
        }
        if slot.gone.load(Ordering::SeqCst) {
            *kernel = None;
            return tool_error("the client is gone");
        }
    }
    let k = kernel.as_mut().unwrap();
    // Output of threads that outlived earlier calls.
    while k.next(Instant::now()).is_ok() {}
    let timeout = exec.settings.timeout;
    let (out, done) = k.execute(code, timeout);
    let text = |t: String| obj! {"type": "text", "text": t};
    let mut content: Vec<Value> = out.into_iter().map(|(_, t)| text(t)).collect();
    let failure = match done {
        Ok(done) => {
            push_figures(&mut content, &done);
            done["error"].as_str().map(String::from)
        }
        Err(timed_out) => {
            // Kills the whole process group and reaps the kernel; the next call starts afresh.
            let mut k = kernel.take().unwrap();
            slot.pid.store(0, Ordering::SeqCst);
            Some(if timed_out {
                format!(
                    "executeCode timed out after {}; the kernel was restarted (variables are lost)",
                    crate::text::human_duration(timeout)
                )
            } else {
                crate::proc::kill_group(k.child.id());
                let status = k.child.wait().map(|s| s.to_string()).unwrap_or_default();
                format!(
                    "the Python kernel ended ({status}); a new one starts with the next call (variables are lost)"
                )
            })
        }
    };
    let is_error = failure.is_some();
    if let Some(message) = failure {
        content.push(text(message));
    }
    if content.is_empty() {
        content.push(text("(no output)".into()));
    }
    let mut result = obj! { "content": content };
    if is_error {
        result["isError"] = true.into();
    }
    result
}

/// Adds the figures of a finished call to its answer; those beyond what one client message
/// can carry are left out, and said so.
fn push_figures(content: &mut Vec<Value>, done: &Value) {
    let mut room = MAX_IMAGES;
    for (n, image) in done["images"].as_array().into_iter().flatten().enumerate() {
        let size = image.as_str().map_or(0, str::len);
        if size > room {
            content.push(obj! {"type": "text", "text": format!(
                "[figure {} left out: {} of PNG data is more than one answer to Claude Code can carry]",
                n + 1,
                crate::rpc::mib(size)
            )});
            continue;
        }
        room -= size;
        content.push(obj! {"type": "image", "data": image.clone(), "mimeType": "image/png"});
    }
}

impl Kernel {
    /// Sends `code` to the kernel and collects its output until it is done: the output as
    /// runs of one stream, and the kernel's final message, or whether it timed out (true) or
    /// ended (false).
    fn execute(
        &mut self,
        code: &str,
        timeout: std::time::Duration,
    ) -> (Vec<(String, String)>, Result<Value, bool>) {
        let mut out: Vec<(String, String)> = Vec::new();
        let request = obj! {"code": code}.to_string() + "\n";
        if self.stdin.write_all(request.as_bytes()).is_err() {
            return (out, Err(false));
        }
        let deadline = Instant::now() + timeout;
        let done = loop {
            match self.next(deadline) {
                Ok(Value::Array(chunk)) => {
                    let (Some(stream), Some(text)) = (
                        chunk.first().and_then(Value::as_str),
                        chunk.get(1).and_then(Value::as_str),
                    ) else {
                        continue;
                    };
                    match out.last_mut() {
                        Some((s, t)) if s == stream => t.push_str(text),
                        _ => out.push((stream.to_string(), text.to_string())),
                    }
                }
                other => break other,
            }
        };
        (out, done)
    }

    /// The python3 `trust::find` finds, in the first of `folders`, with `trust::command`'s
    /// PATH (ccide-protocol(7) §14).
    fn start(folders: &[PathBuf], trusted: bool) -> std::io::Result<Kernel> {
        let python = crate::trust::find("python3", folders, trusted).ok_or_else(|| {
            std::io::Error::other(match trusted {
                true => "no python3 on PATH",
                false => "no python3 on PATH outside the workspace (one inside it runs only with --trust-workspace)",
            })
        })?;
        let mut cmd = crate::trust::command(&python, folders, trusted);
        cmd.args(["-c", DRIVER])
            .current_dir(&folders[0])
            // Figures are rendered to PNG, never to a window.
            .env("MPLBACKEND", "Agg")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0);
        crate::sys::unblock_all_signals_in_child(&mut cmd);
        let mut child = cmd.spawn()?;
        crate::proc::track_group(child.id());
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(std::io::Error::other("no pipes to the kernel"));
        };
        crate::log::debug!("started a Python kernel (pid {})", child.id());
        Ok(Kernel {
            child,
            stdin,
            stdout,
            buf: Vec::new(),
        })
    }

    /// The next message, waiting until `deadline`; Err(true) when the time is up, Err(false)
    /// when the kernel has gone.
    fn next(&mut self, deadline: Instant) -> Result<Value, bool> {
        loop {
            if let Some(i) = self.buf.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = self.buf.drain(..=i).collect();
                match serde_json::from_slice(&line) {
                    Ok(v) => return Ok(v),
                    Err(_) => continue,
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            let interest = crate::sys::Interest {
                fd: self.stdout.as_raw_fd(),
                read: true,
                write: false,
            };
            let ready = crate::sys::poll(&[interest], Some(left)).map_err(|_| false)?;
            if ready[0].readable || ready[0].hangup {
                let mut chunk = [0u8; 16384];
                match self.stdout.read(&mut chunk) {
                    Ok(0) | Err(_) => return Err(false),
                    Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                }
            } else if left.is_zero() {
                return Err(true);
            }
        }
    }
}

impl Drop for Kernel {
    fn drop(&mut self) {
        crate::proc::end_group(self.child.id());
        let _ = self.child.wait();
    }
}

impl Exec {
    /// The requests waiting for the user, and the mode.
    pub fn waiting(&self) -> (&'static str, Vec<Value>) {
        let mut inner = lock(&self.inner);
        // Requests whose call was cancelled or whose connection ended cannot be answered.
        inner.pending.retain(|p| p.responder.is_open());
        self.decided.notify_all();
        let mode = match self.settings.mode {
            Mode::Off => "off",
            Mode::Ask => "ask",
            Mode::On => "on",
        };
        let list = inner
            .pending
            .iter()
            .filter(|p| p.decision.is_none())
            .map(Request::describe)
            .collect();
        (mode, list)
    }

    /// The user's answer to the waiting request `target` (or to the only one).
    pub fn decide(&self, target: Option<&str>, approve: bool) -> Result<Value, String> {
        let mut inner = lock(&self.inner);
        inner.pending.retain(|p| p.responder.is_open());
        self.decided.notify_all();
        let waiting: Vec<&mut Request> = inner
            .pending
            .iter_mut()
            .filter(|p| p.decision.is_none())
            .collect();
        if target.is_none() && waiting.len() > 1 {
            return Err(format!(
                "{} executeCode requests are waiting; name one by its ID (see ccide exec)",
                waiting.len()
            ));
        }
        let Some(p) = waiting
            .into_iter()
            .find(|p| target.is_none_or(|t| p.id.to_string() == t))
        else {
            return Err(match target {
                Some(t) => format!("no executeCode request {t} is waiting"),
                None => "no executeCode requests are waiting".into(),
            });
        };
        p.decision = Some(approve);
        self.decided.notify_all();
        Ok(p.describe())
    }
}

/// Base64 PNG data one executeCode answer carries at most, leaving room for its text within
/// the 16 MiB a client accepts.
const MAX_IMAGES: usize = 12 << 20;

/// The kernel's main loop (see the module comment): `kernel.py`, held as Python so it can be
/// read and linted as Python.
const DRIVER: &str = include_str!("kernel.py");
