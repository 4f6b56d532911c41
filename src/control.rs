//! The control channel: a Unix socket in the state directory through which ccide's own
//! commands (`ccide diff`, `select`, `status`, ...) talk to the running `serve`. One JSON
//! request per line, one JSON answer per line (`events` keeps streaming). Only the owner may
//! connect: the socket lives in a 0700 directory and the peer's uid is checked.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use crate::serve::App;

/// Largest request line (a `buffer` command carries a whole file).
const MAX_REQUEST: u64 = 64 << 20;

/// Binds the control socket, refusing to start if another live server already owns it.
pub fn bind(path: &Path) -> Result<UnixListener, String> {
    if UnixStream::connect(path).is_ok() {
        return Err(format!(
            "another ccide serve already runs with this state directory (its control socket {} answers); stop it or use another --state-dir",
            path.display()
        ));
    }
    let _ = std::fs::remove_file(path);
    UnixListener::bind(path)
        .map_err(|e| format!("cannot create the control socket {}: {e}", path.display()))
}

pub fn run(app: Arc<App>, listener: UnixListener) {
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let me = crate::sys::getuid();
        match crate::sys::peer_uid(&stream) {
            Ok(uid) if uid == me => {}
            Ok(uid) => {
                crate::warn!("control socket: refused a connection from uid {uid}");
                continue;
            }
            Err(e) => {
                crate::warn!("control socket: cannot identify a peer: {e}");
                continue;
            }
        }
        let app = app.clone();
        let _ = std::thread::Builder::new()
            .name("control".into())
            .stack_size(crate::transport::THREAD_STACK)
            .spawn(move || serve_one(&app, stream));
    }
}

fn serve_one(app: &Arc<App>, stream: UnixStream) {
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
            crate::events::subscribe(writer);
            return;
        }
        if request["cmd"] == "attach" {
            crate::lsp::session::attach(app, reader, writer, &request);
            return;
        }
        let answer = crate::commands::handle(app, &request);
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

/// The client side, used by ccide's commands.
pub struct Control {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
}

impl Control {
    pub fn connect(lock: crate::lockfile::Found) -> Result<Control, String> {
        let path = lock
            .control
            .clone()
            .ok_or_else(|| format!("{} is not a ccide lock file", lock.path.display()))?;
        let stream = UnixStream::connect(&path).map_err(|e| {
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
pub fn find_server(
    config: &Path,
    port: Option<u16>,
    cwd: &Path,
) -> Result<crate::lockfile::Found, Found> {
    let locks: Vec<_> = crate::lockfile::scan(config)
        .into_iter()
        .filter(|l| l.alive && l.control.is_some())
        .collect();
    if let Some(p) = port {
        return locks.into_iter().find(|l| l.port == p).ok_or_else(|| {
            Found::None(format!(
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
        0 => Err(Found::None(format!(
            "no ccide server is running for {} (start one there with `ccide serve`, or pass --port)",
            cwd.display()
        ))),
        1 => Ok(matching.remove(0)),
        _ => Err(Found::Several(format!(
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

pub enum Found {
    None(String),
    Several(String),
}

/// The canonical current directory (the CLI compares physical paths).
pub fn current_dir() -> Result<PathBuf, String> {
    std::env::current_dir()
        .and_then(std::fs::canonicalize)
        .map_err(|e| format!("cannot read the current directory: {e}"))
}
