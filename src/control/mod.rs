//! The control socket: a Unix socket in the state directory through which ccide's own
//! commands (`ccide diff`, `select`, `status`, ...) talk to the running `serve`
//! (ccide-protocol(7) §9). One JSON request per line, one JSON answer per line (`events` keeps
//! streaming). Only the owner may connect: the socket lives in a 0700 directory and the peer's
//! uid is checked. The server half answers from the shared state; the client half, below, is
//! what the commands use.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::diagnostics::parse::Format;
use crate::lockfile::LockEntry;
use crate::state::State;
use crate::state::editor::{self, HumanRange};

pub mod editors;

// ---------------------------------------------------------------------------
// The server half

/// Largest request line (a `buffer` command carries a whole file).
const MAX_REQUEST: u64 = 64 << 20;

/// The longest path a Unix socket address holds (`sun_path` is 108 bytes with its NUL).
const SUN_PATH_MAX: usize = 107;

/// Runs `f` on `path`, or, when the path is too long for a socket address (a long user and
/// project name under ~/.local/state), on the same file named through the directory opened
/// as `/proc/self/fd/N/NAME`, which is always short.
fn short_path<T>(path: &Path, f: impl FnOnce(&Path) -> std::io::Result<T>) -> std::io::Result<T> {
    if path.as_os_str().len() <= SUN_PATH_MAX {
        return f(path);
    }
    use std::os::fd::AsRawFd;
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return f(path);
    };
    let dir = std::fs::File::open(dir)?;
    let short = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd())).join(name);
    f(&short)
}

/// Binds the control socket, refusing to start if another live server already owns it.
pub fn bind(path: &Path) -> Result<UnixListener, String> {
    if short_path(path, |p| UnixStream::connect(p)).is_ok() {
        return Err(format!(
            "another ccide serve already runs with this state directory (its control socket {} answers); stop it or use another --state-dir",
            path.display()
        ));
    }
    let _ = std::fs::remove_file(path);
    short_path(path, |p| UnixListener::bind(p))
        .map_err(|e| format!("cannot create the control socket {}: {e}", path.display()))
}

pub fn run(state: Arc<State>, listener: UnixListener) {
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let me = crate::sys::getuid();
        match crate::sys::peer_uid(&stream) {
            Ok(uid) if uid == me => {}
            Ok(uid) => {
                crate::log::warn!("control socket: refused a connection from uid {uid}");
                continue;
            }
            Err(e) => {
                crate::log::warn!("control socket: cannot identify a peer: {e}");
                continue;
            }
        }
        let state = state.clone();
        let _ = crate::proc::spawn_thread("control", move || serve_one(&state, stream));
    }
}

fn serve_one(state: &Arc<State>, stream: UnixStream) {
    let Ok(read_half) = stream.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(read_half.take(MAX_REQUEST));
    let mut writer = stream;
    loop {
        let mut line = String::new();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let request: Value = match serde_json::from_str(&line) {
            Ok(v) => v,
            Err(e) => {
                let _ = reply(&mut writer, &failure(&format!("bad control request: {e}")));
                return;
            }
        };
        if request["cmd"] == "events" {
            state.events.subscribe(writer);
            return;
        }
        if request["cmd"] == "attach" {
            editors::attach(state, reader, writer, &request);
            return;
        }
        let answer = handle(state, &request);
        if reply(&mut writer, &answer).is_err() {
            return;
        }
    }
}

fn reply(w: &mut UnixStream, v: &Value) -> std::io::Result<()> {
    let mut line = v.to_string();
    line.push('\n');
    w.write_all(line.as_bytes())
}

pub fn failure(message: &str) -> Value {
    json!({"ok": false, "error": message})
}

/// Answers one request (every command but `events`).
pub fn handle(state: &Arc<State>, req: &Value) -> Value {
    let cwd = req["cwd"].as_str().map(PathBuf::from).unwrap_or_default();
    match req["cmd"].as_str().unwrap_or("") {
        "diff.list" => json!({"ok": true, "diffs": state.diffs.list()}),
        "diff.find" => match state.diffs.find(req["target"].as_str(), &cwd) {
            Ok(d) => json!({"ok": true, "diff": d}),
            Err(e) => json!({"ok": false, "error": e.message(), "kind": e.kind()}),
        },
        "diff.settle" => {
            let accept = req["accept"] == true;
            match state
                .diffs
                .settle_by_user(req["target"].as_str(), accept, &cwd)
            {
                Ok(d) => json!({"ok": true, "diff": d}),
                Err(e) => json!({"ok": false, "error": e.message(), "kind": e.kind()}),
            }
        }
        "status" => json!({"ok": true, "status": state.status()}),
        "select" => persisted(state, select(state, req)),
        "mention" => mention(state, req).unwrap_or_else(|e| failure(&e)),
        "open" => persisted(state, open(state, req)),
        "close" => persisted(state, close(state, req)),
        "buffer" => persisted(state, buffer(state, req)),
        "diagnostics.import" => {
            let format = req["format"]
                .as_str()
                .and_then(Format::from_name)
                .unwrap_or(Format::Auto);
            state
                .diagnostics
                .import(req["text"].as_str().unwrap_or(""), format, &cwd)
        }
        "diagnostics.list" => {
            let files: Vec<Value> = state
                .diagnostics
                .store
                .all()
                .iter()
                .map(|(p, ds)| {
                    json!({"uri": crate::files::file_url(p), "path": p,
                        "diagnostics": ds.iter().map(crate::diagnostics::to_wire).collect::<Vec<_>>(),
                        "lines": ds.iter().map(|d| crate::diagnostics::describe(p, d)).collect::<Vec<_>>()})
                })
                .collect();
            json!({"ok": true, "files": files})
        }
        "diagnostics.clear" => {
            let only = match req["path"].as_str() {
                Some(p) => match state.resolve(p) {
                    Ok(p) => Some(p),
                    Err(e) => return failure(&e),
                },
                None => None,
            };
            let cleared = state.diagnostics.clear(only.as_deref());
            json!({"ok": true, "cleared": cleared})
        }
        "exec" => match req["action"].as_str().unwrap_or("list") {
            "list" => {
                let (mode, requests) = state.exec.waiting();
                json!({"ok": true, "mode": mode, "requests": requests})
            }
            action @ ("approve" | "deny") => {
                match state
                    .exec
                    .decide(req["target"].as_str(), action == "approve")
                {
                    Ok(r) => json!({"ok": true, "request": r}),
                    Err(e) => failure(&e),
                }
            }
            other => failure(&format!(
                "unknown exec action '{other}': expected list, approve or deny"
            )),
        },
        "workspace" => {
            let add = req["op"] == "add";
            let path = PathBuf::from(req["path"].as_str().unwrap_or(""));
            match req["op"].as_str() {
                Some("list") => json!({"ok": true, "workspaces": state.workspaces.list()}),
                Some("add" | "remove") => match state.change_workspace(add, &path) {
                    Ok(ws) => json!({"ok": true, "workspaces": ws}),
                    Err(e) => failure(&e),
                },
                _ => failure("workspace: expected add, remove or list"),
            }
        }
        other => failure(&format!(
            "unknown control command '{other}' (is ccide up to date?)"
        )),
    }
}

/// The answer to a command that changed the editor model, or a failure when the change could
/// not be saved: it holds only until the server restarts, and the user must know.
fn persisted(state: &State, r: Result<Value, String>) -> Value {
    match r {
        Ok(v) => match state.editor.save_error() {
            None => v,
            Some(e) => failure(&format!(
                "done, but not saved: {e}; the change is lost when the server restarts"
            )),
        },
        Err(e) => failure(&e),
    }
}

fn path_arg(state: &State, v: &Value) -> Result<PathBuf, String> {
    state.resolve(v.as_str().ok_or("missing path")?)
}

fn num(v: &Value) -> Option<usize> {
    v.as_u64().map(|n| n as usize)
}

fn select(state: &State, req: &Value) -> Result<Value, String> {
    let path = path_arg(state, &req["path"])?;
    if !path.is_file() {
        return Err(format!("File not found: {}", path.display()));
    }
    let r = &req["range"];
    let range = HumanRange {
        start_line: num(&r["start_line"]),
        start_col: num(&r["start_col"]),
        end_line: num(&r["end_line"]),
        end_col: num(&r["end_col"]),
    };
    // Only the lines up to the selection's end are read (a log may be gigabytes).
    let last = range.end_line.max(range.start_line).unwrap_or(0);
    let content = state.first_lines(&path, last)?;
    let payload = editor::selection_for(
        &content,
        &path,
        range,
        req["text"].as_str().map(String::from),
    )?;
    let n = state.select(payload.clone())?;
    Ok(json!({"ok": true, "clients": n.sent, "held": n.held, "selection": payload}))
}

fn mention(state: &State, req: &Value) -> Result<Value, String> {
    let path = path_arg(state, &req["path"])?;
    let start = num(&req["start"]);
    if !path.exists() {
        return Err(format!("File not found: {}", path.display()));
    }
    if path.is_dir() && start.is_some() {
        return Err(format!(
            "{} is a directory: mention it without lines",
            path.display()
        ));
    }
    let payload = editor::mention_payload(&path, start, num(&req["end"]))?;
    let n = state.mention(payload.clone())?;
    // Held for a client being set up, or queued for the next one: not yet delivered.
    Ok(
        json!({"ok": true, "clients": n.sent, "held": n.held, "queued": n.sent == 0, "mention": payload}),
    )
}

fn paths(state: &State, req: &Value) -> Result<Vec<PathBuf>, String> {
    req["paths"]
        .as_array()
        .ok_or("missing paths")?
        .iter()
        .map(|p| path_arg(state, p))
        .collect()
}

fn open(state: &State, req: &Value) -> Result<Value, String> {
    let paths = paths(state, req)?;
    for p in &paths {
        if !p.is_file() {
            return Err(format!("File not found: {}", p.display()));
        }
    }
    for (i, p) in paths.iter().enumerate() {
        state.editor.open_tab(p, i + 1 == paths.len(), false);
    }
    Ok(json!({"ok": true, "opened": paths}))
}

fn close(state: &State, req: &Value) -> Result<Value, String> {
    let discard = req["discard"] == true;
    let mut not_open = Vec::new();
    let mut kept = Vec::new();
    for p in paths(state, req)? {
        if !state.editor.close_tab(&p, discard) {
            not_open.push(p.clone());
        }
        if state.editor.document(&p).is_some() {
            kept.push(p);
        }
    }
    Ok(json!({"ok": true, "not_open": not_open, "kept_unsaved": kept}))
}

fn buffer(state: &State, req: &Value) -> Result<Value, String> {
    let path = path_arg(state, &req["path"])?;
    let content = req["content"].as_str().map(String::from);
    state.editor.set_document(&path, content);
    Ok(json!({"ok": true, "path": path}))
}

// ---------------------------------------------------------------------------
// The client half

/// The client side, used by ccide's commands.
pub struct Control {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Control {
    pub fn connect(lock: LockEntry) -> Result<Control, String> {
        let path = lock
            .control
            .clone()
            .ok_or_else(|| format!("{} is not a ccide lock file", lock.path.display()))?;
        let stream = short_path(&path, |p| UnixStream::connect(p)).map_err(|e| {
            format!(
                "cannot reach the ccide server on port {} through {}: {e}",
                lock.port,
                path.display()
            )
        })?;
        let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
        Ok(Control {
            reader: BufReader::new(stream.try_clone().map_err(|e| e.to_string())?),
            writer: stream,
        })
    }

    /// Sends one request and returns the answer's object; `ok: false` becomes Err.
    pub fn request(&mut self, v: Value) -> Result<Value, String> {
        let mut line = v.to_string();
        line.push('\n');
        self.writer
            .write_all(line.as_bytes())
            .map_err(|e| format!("control socket: {e}"))?;
        let answer = self.read_line()?;
        if answer["ok"] == true {
            Ok(answer)
        } else {
            Err(answer["error"]
                .as_str()
                .unwrap_or("the server refused the request")
                .to_string())
        }
    }

    pub fn read_line(&mut self) -> Result<Value, String> {
        let mut line = String::new();
        match self.reader.read_line(&mut line) {
            Ok(0) => Err("the server closed the control connection".into()),
            Ok(_) => {
                serde_json::from_str(&line).map_err(|e| format!("bad answer from the server: {e}"))
            }
            Err(e) => Err(format!("control socket: {e}")),
        }
    }

    pub fn writer_clone(&self) -> std::io::Result<UnixStream> {
        self.writer.try_clone()
    }

    pub fn into_reader(self) -> BufReader<UnixStream> {
        let _ = self.writer.set_read_timeout(None);
        self.reader
    }
}

/// Finds the server for `cwd` the way the CLI does: a live lock file whose workspace folder is
/// `cwd` or one of its ancestors; or the lock of `port` when given.
pub fn find_server(config: &Path, port: Option<u16>, cwd: &Path) -> Result<LockEntry, FindError> {
    let locks: Vec<_> = crate::lockfile::scan(config)
        .into_iter()
        .filter(|l| l.alive && l.control.is_some())
        .collect();
    if let Some(p) = port {
        return locks.into_iter().find(|l| l.port == p).ok_or_else(|| {
            FindError::None(format!(
                "no ccide server is running on port {p} (no live ccide lock file {}/ide/{p}.lock)",
                config.display()
            ))
        });
    }
    let mut matching: Vec<_> = locks
        .into_iter()
        .filter(|l| l.workspaces.iter().any(|w| cwd.starts_with(w)))
        .collect();
    match matching.len() {
        0 => Err(FindError::None(format!(
            "no ccide server is running for {} (start one there with `ccide serve`, or pass --port)",
            cwd.display()
        ))),
        1 => Ok(matching.remove(0)),
        _ => Err(FindError::Several(format!(
            "several ccide servers serve {}; choose one with --port:\n{}",
            cwd.display(),
            matching
                .iter()
                .map(|l| format!("  --port {}  {} ({})", l.port, l.ide_name, l.folders()))
                .collect::<Vec<_>>()
                .join("\n")
        ))),
    }
}

/// Why no single server was found.
pub enum FindError {
    None(String),
    Several(String),
}

/// The canonical current directory (the CLI compares physical paths).
pub fn current_dir() -> Result<PathBuf, String> {
    std::env::current_dir()
        .and_then(std::fs::canonicalize)
        .map_err(|e| format!("cannot read the current directory: {e}"))
}

#[cfg(test)]
mod tests;
