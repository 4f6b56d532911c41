//! executeCode (PROTOCOL 7): Python in a persistent kernel per connection, only when the user
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
use std::path::Path;
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Instant, SystemTime};

use serde_json::{Map, Value, json};

use crate::cli::{Args, EXIT_OK, Fail, Outcome};
use crate::serve::App;
use crate::server::{Call, Reply, Responder};
use crate::tools::{arg_str, tool_error};

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
    inner: Mutex<Inner>,
    /// Signalled when a pending request is decided or dropped.
    decided: Condvar,
}

#[derive(Default)]
struct Inner {
    kernels: Vec<(u64, Arc<Slot>)>,
    pending: Vec<Pending>,
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
struct Pending {
    id: u64,
    client: u64,
    code: String,
    created: SystemTime,
    /// The user's answer, until the waiting call takes it.
    decision: Option<bool>,
    responder: Arc<Responder>,
}

impl Pending {
    fn describe(&self) -> Value {
        json!({
            "id": self.id.to_string(), "client": self.client, "code": self.code,
            "created": crate::serve::unix(self.created),
        })
    }
}

impl Exec {
    pub fn new(settings: Settings) -> Exec {
        Exec {
            settings,
            inner: Mutex::default(),
            decided: Condvar::new(),
        }
    }

    /// Ends the kernel of a connection that is gone, and drops its requests awaiting approval.
    pub fn client_gone(&self, client: u64) {
        let slots: Vec<_> = {
            let mut inner = self.inner.lock().unwrap();
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
                crate::format::kill_group(pid);
            }
        }
    }

    /// Registers a call awaiting approval and returns its id.
    fn ask(&self, client: u64, code: &str, responder: Arc<Responder>) -> u64 {
        let mut inner = self.inner.lock().unwrap();
        inner.next_id += 1;
        let p = Pending {
            id: inner.next_id,
            client,
            code: code.to_string(),
            created: SystemTime::now(),
            decision: None,
            responder,
        };
        crate::info!(
            "executeCode request {0} from client #{client} waits for you: ccide exec approve {0} (or deny {0}); see the code with ccide exec",
            p.id
        );
        let mut event = p.describe();
        event["event"] = "exec_requested".into();
        crate::events::emit(event);
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
            .wait_timeout_while(self.inner.lock().unwrap(), limit, |inner| {
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
                    crate::server::human_duration(limit)
                ))),
            ),
            None => ("abandoned", Err(None)),
        };
        crate::info!("executeCode request {id} {how}");
        crate::events::emit(json!({"event": "exec_settled", "id": id.to_string(), "how": how}));
        result
    }
}

pub fn listed(app: &App) -> bool {
    app.exec.settings.mode != Mode::Off
}

pub fn execute_code(call: &Call, args: &Map<String, Value>) -> Reply {
    let exec = &call.app.exec;
    if exec.settings.mode == Mode::Off {
        return Reply::Now(Ok(tool_error(
            "executeCode is disabled: start ccide serve with --exec ask (each call waits for `ccide exec approve`) or --exec on",
        )));
    }
    let code = match arg_str(args, "code", true) {
        Ok(v) => v.unwrap_or_default(),
        Err(e) => return Reply::Now(Err(e)),
    };
    let client = call.client.id;
    let responder = Arc::new(call.defer());
    let slot = {
        let mut inner = exec.inner.lock().unwrap();
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
        (exec.settings.mode == Mode::Ask).then(|| exec.ask(client, &code, responder.clone()));
    let app = call.app.clone();
    crate::server::answer_later(
        responder,
        Box::new(move || {
            if let Some(id) = asked {
                match app.exec.approval(id) {
                    Ok(()) => {}
                    Err(message) => return message.map(|m| tool_error(&m)),
                }
            }
            Some(run(&app, &slot, &code))
        }),
    )
}

/// Runs `code` in the client's kernel (started if needed) and builds the tool result.
fn run(app: &App, slot: &Slot, code: &str) -> Value {
    let mut kernel = slot.kernel.lock().unwrap();
    if kernel.is_none() {
        let dir = app.workspaces.read().unwrap()[0].clone();
        match Kernel::start(&dir) {
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
    let timeout = app.exec.settings.timeout;
    let mut out: Vec<(String, String)> = Vec::new();
    let request = json!({"code": code}).to_string() + "\n";
    let done = if k.stdin.write_all(request.as_bytes()).is_err() {
        Err(false)
    } else {
        let deadline = Instant::now() + timeout;
        loop {
            match k.next(deadline) {
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
        }
    };
    let text = |t: String| json!({"type": "text", "text": t});
    let mut content: Vec<Value> = out.into_iter().map(|(_, t)| text(t)).collect();
    let failure = match done {
        Ok(done) => {
            for image in done["images"].as_array().into_iter().flatten() {
                content.push(json!({"type": "image", "data": image, "mimeType": "image/png"}));
            }
            done["error"].as_str().map(String::from)
        }
        Err(timed_out) => {
            // Kills the whole process group and reaps the kernel; the next call starts afresh.
            let mut k = kernel.take().unwrap();
            slot.pid.store(0, Ordering::SeqCst);
            Some(if timed_out {
                format!(
                    "executeCode timed out after {}; the kernel was restarted (variables are lost)",
                    crate::server::human_duration(timeout)
                )
            } else {
                crate::format::kill_group(k.child.id());
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
    let mut result = json!({ "content": content });
    if is_error {
        result["isError"] = true.into();
    }
    result
}

impl Kernel {
    fn start(dir: &Path) -> std::io::Result<Kernel> {
        let mut cmd = Command::new("python3");
        cmd.args(["-c", DRIVER])
            .current_dir(dir)
            // Figures are rendered to PNG, never to a window.
            .env("MPLBACKEND", "Agg")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .process_group(0);
        crate::sys::unblock_all_signals_in_child(&mut cmd);
        let mut child = cmd.spawn()?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(std::io::Error::other("no pipes to the kernel"));
        };
        crate::debug!("started a Python kernel (pid {})", child.id());
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
        crate::format::kill_group(self.child.id());
        let _ = self.child.wait();
    }
}

/// The server side of `ccide exec`: `{"cmd":"exec","action":"list"|"approve"|"deny","target":ID?}`.
pub fn control(app: &App, req: &Value) -> Value {
    let mut inner = app.exec.inner.lock().unwrap();
    // Requests whose call was cancelled or whose connection ended cannot be answered.
    inner.pending.retain(|p| p.responder.is_open());
    app.exec.decided.notify_all();
    let waiting: Vec<&mut Pending> = inner
        .pending
        .iter_mut()
        .filter(|p| p.decision.is_none())
        .collect();
    match req["action"].as_str().unwrap_or("list") {
        "list" => {
            let mode = match app.exec.settings.mode {
                Mode::Off => "off",
                Mode::Ask => "ask",
                Mode::On => "on",
            };
            json!({"ok": true, "mode": mode, "requests": waiting.iter().map(|p| p.describe()).collect::<Vec<_>>()})
        }
        action @ ("approve" | "deny") => {
            let target = req["target"].as_str();
            if target.is_none() && waiting.len() > 1 {
                return crate::control::failure(&format!(
                    "{} executeCode requests are waiting; name one by its ID (see ccide exec)",
                    waiting.len()
                ));
            }
            let Some(p) = waiting
                .into_iter()
                .find(|p| target.is_none_or(|t| p.id.to_string() == t))
            else {
                return crate::control::failure(&match target {
                    Some(t) => format!("no executeCode request {t} is waiting"),
                    None => "no executeCode requests are waiting".into(),
                });
            };
            p.decision = Some(action == "approve");
            app.exec.decided.notify_all();
            json!({"ok": true, "request": p.describe()})
        }
        other => crate::control::failure(&format!(
            "unknown exec action '{other}': expected list, approve or deny"
        )),
    }
}

/// `ccide exec [list | approve [ID] | deny [ID]]`.
pub fn command(args: &Args) -> Outcome {
    let action = args.operands.first().map_or("list", String::as_str);
    let target = args.operands.get(1);
    let list = matches!(action, "list" | "ls");
    if !list && !matches!(action, "approve" | "deny") {
        return Err(Fail::Usage(format!(
            "unknown exec action '{action}': expected list, approve or deny"
        )));
    }
    if let Some(extra) = args.operands.get(if list { 1 } else { 2 }) {
        return Err(Fail::Usage(format!("unexpected argument '{extra}'")));
    }
    let json_out = args.switch("--json")?;
    let mut ctl = crate::client::connect(args)?;
    let r = ctl.request(json!({"cmd": "exec", "action": action, "target": target}))?;
    let answer = if list { &r["requests"] } else { &r["request"] };
    if json_out {
        println!(
            "{}",
            serde_json::to_string_pretty(answer).unwrap_or_default()
        );
    } else if !list {
        let word = if action == "approve" {
            "approved"
        } else {
            "denied"
        };
        println!(
            "{word} executeCode request {}",
            answer["id"].as_str().unwrap_or("")
        );
    } else if let Some(requests) = answer.as_array().filter(|a| !a.is_empty()) {
        for q in requests {
            println!(
                "request {} from client {}:",
                q["id"].as_str().unwrap_or(""),
                q["client"]
            );
            for line in q["code"].as_str().unwrap_or("").lines() {
                println!("    {line}");
            }
            println!();
        }
        println!("run it with `ccide exec approve ID`, refuse it with `ccide exec deny ID`");
    } else {
        let mode = r["mode"].as_str().unwrap_or("");
        if mode == "ask" {
            println!("no executeCode requests are waiting");
        } else {
            println!("no executeCode requests are waiting (the server runs with --exec {mode})");
        }
    }
    Ok(EXIT_OK)
}

/// The kernel's main loop (see the module comment). Output written to file descriptors 1 and 2
/// directly (subprocesses, C extensions) is collected in a temporary file during each call
/// and returned after the Python-level output.
const DRIVER: &str = r#"
import ast, base64, io, json, os, sys, tempfile, threading, time, traceback
proto = os.fdopen(os.dup(1), "w")
requests = os.fdopen(os.dup(0))
null = os.open(os.devnull, os.O_RDWR)
os.dup2(null, 0)
os.dup2(null, 1)
sys.stdin = open(os.devnull)
lock = threading.Lock()
left = 0

def send(m):
    with lock:
        proto.write(json.dumps(m) + "\n")
        proto.flush()

class Out(io.TextIOBase):
    def __init__(self, name):
        self.name = name
    def writable(self):
        return True
    def write(self, t):
        global left
        n = len(t)
        if left > 0 and n:
            if n > left:
                t = t[:left] + "\n[output truncated]\n"
            left -= n
            send([self.name, t])
        return n

out = Out("stdout")
sys.stdout, sys.stderr = out, Out("stderr")

def watch(parent=os.getppid()):
    while os.getppid() == parent:
        time.sleep(1)
    os._exit(1)

threading.Thread(target=watch, daemon=True).start()
g = {"__name__": "__main__", "__builtins__": __builtins__}
for line in requests:
    code = json.loads(line)["code"]
    left, err, images = 1000000, None, []
    raw = tempfile.TemporaryFile()
    os.dup2(raw.fileno(), 1)
    os.dup2(raw.fileno(), 2)
    try:
        tree = ast.parse(code, "<cell>")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr) and not code.rstrip().endswith(";"):
            last = ast.Expression(tree.body.pop().value)
        exec(compile(tree, "<cell>", "exec"), g)
        if last:
            v = eval(compile(last, "<cell>", "eval"), g)
            if v is not None:
                out.write(repr(v) + "\n")
    except BaseException as e:
        tb = None if isinstance(e, SyntaxError) else e.__traceback__.tb_next
        err = "".join(traceback.format_exception(type(e), e, tb))
    os.dup2(null, 1)
    os.dup2(null, 2)
    raw.seek(0)
    text = raw.read().decode(errors="replace")
    raw.close()
    if text:
        out.write(text)
    plt = sys.modules.get("matplotlib.pyplot")
    try:
        for n in plt.get_fignums() if plt else []:
            b = io.BytesIO()
            plt.figure(n).savefig(b, format="png")
            images.append(base64.b64encode(b.getvalue()).decode())
        if plt:
            plt.close("all")
    except Exception:
        err = (err or "") + traceback.format_exc()
    send({"error": err, "images": images})
"#;
