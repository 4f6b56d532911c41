//! The client half of the control socket: how `ccide`'s commands and `ccide lsp` find the
//! running server and ask it things (ccide-protocol(7) §9).

use std::io::{BufRead, BufReader};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use super::protocol::{LspClient, Request, short_path};
use crate::lockfile::LockEntry;

/// How long a command waits for an answer unless told otherwise.
const TIMEOUT: Duration = Duration::from_secs(30);

/// A connection to a server's control socket. Each request carries an id and is matched to
/// the answer that echoes it, so an answer that came too late for an earlier request is never
/// taken for the next one's.
pub struct Control {
    reader: BufReader<UnixStream>,
    writer: UnixStream,
    next_id: u64,
    /// The start of an answer line that a timeout cut short; the rest comes next.
    partial: Vec<u8>,
    timeout: Option<Duration>,
}

impl Control {
    /// Connects to the server of a lock file, which must be ours in a directory of ours
    /// (`lockfile::check_lock_is_ours`).
    pub fn connect(lock: LockEntry) -> Result<Control, String> {
        crate::lockfile::check_lock_is_ours(&lock.path)?;
        let path = lock
            .control
            .clone()
            .ok_or_else(|| format!("{} is not a ccide lock file", lock.path.display()))?;
        Control::open(&path).map_err(|e| {
            format!(
                "cannot reach the ccide server on port {} through {}: {e}",
                lock.port,
                path.display()
            )
        })
    }

    /// Connects to a control socket by its path. The process listening there must run as
    /// this user (SO_PEERCRED), as serve requires of its clients (ccide-protocol(7) §9):
    /// nothing is sent to another user's socket.
    pub fn open(path: &Path) -> std::io::Result<Control> {
        let stream = short_path(path, |p| UnixStream::connect(p))?;
        let (peer, me) = (crate::sys::peer_uid(&stream)?, crate::sys::getuid());
        if peer != me {
            return Err(std::io::Error::new(
                std::io::ErrorKind::PermissionDenied,
                format!(
                    "refusing the control socket {}: the process listening there runs as uid {peer}, not as you (uid {me}), so it is no ccide server of yours; nothing was sent",
                    path.display()
                ),
            ));
        }
        stream.set_read_timeout(Some(TIMEOUT))?;
        Ok(Control {
            reader: BufReader::new(stream.try_clone()?),
            writer: stream,
            next_id: 1,
            partial: Vec::new(),
            timeout: Some(TIMEOUT),
        })
    }

    /// How long `request` waits for its answer (None: for ever).
    pub fn set_timeout(&mut self, timeout: Option<Duration>) -> Result<(), String> {
        self.timeout = timeout;
        self.writer
            .set_read_timeout(timeout)
            .map_err(|e| format!("control socket: {e}"))
    }

    /// Sends one request and returns its answer; `ok: false` becomes Err with its message.
    /// (`events` has no answer: see `subscribe`.)
    pub fn request(&mut self, req: &Request) -> Result<Value, String> {
        let answer = self.call(req)?;
        if answer["ok"] == true {
            Ok(answer)
        } else {
            Err(answer["error"]
                .as_str()
                .unwrap_or("the server refused the request")
                .to_string())
        }
    }

    /// Sends one request and returns its answer, a refusal included: Err only when the
    /// connection failed (closed, no answer in time, not JSON), which a client that keeps
    /// the connection (`ccide lsp`) tells apart from a refusal.
    pub fn call(&mut self, req: &Request) -> Result<Value, String> {
        let id = self.next_id;
        self.next_id += 1;
        crate::sys::send_all(&self.writer, req.line(id).as_bytes())
            .map_err(|e| format!("control socket: {e}"))?;
        loop {
            let answer = self.read_answer()?;
            match answer.get("id") {
                // The answer to an earlier request whose wait timed out.
                Some(other) if !other.is_null() && *other != id => continue,
                // Without an id: a server from before ids, which answers in order.
                _ => return Ok(answer),
            }
        }
    }

    /// Makes this connection an editor session (`attach`); the answer lists the pending diffs.
    pub fn attach(&mut self, editor: &str) -> Result<Value, String> {
        self.request(&Request::Attach {
            pid: Some(std::process::id().into()),
            editor: Some(editor.to_string()),
        })
    }

    /// Turns this connection into an LSP stream (`lsp`, ccide-protocol(7) §9.2): returns the
    /// socket, which carries framed LSP both ways from now on, and the bytes the server sent
    /// after its answer that were already read (the first LSP bytes, to pass on first).
    pub fn into_lsp(mut self, client: LspClient) -> Result<(UnixStream, Vec<u8>), String> {
        self.request(&Request::Lsp(client))?;
        let early = self.reader.buffer().to_vec();
        self.set_timeout(None)?;
        Ok((self.writer, early))
    }

    /// Turns this connection into the event stream (§9.3), once the server says it is live:
    /// whatever happens after this returns is in the stream.
    pub fn subscribe(mut self) -> Result<Events, String> {
        crate::sys::send_all(&self.writer, Request::Events.line(self.next_id).as_bytes())
            .map_err(|e| format!("control socket: {e}"))?;
        let first = self.read_line()?;
        let v: Value = serde_json::from_slice(&first).unwrap_or_default();
        if v["event"] != "subscribed" {
            return Err(v["error"]
                .as_str()
                .unwrap_or("the server did not start the event stream")
                .to_string());
        }
        self.set_timeout(None)?;
        Ok(Events {
            control: self,
            first: Some(first),
        })
    }

    fn read_answer(&mut self) -> Result<Value, String> {
        let line = self.read_line()?;
        serde_json::from_slice(&line).map_err(|e| format!("bad answer from the server: {e}"))
    }

    /// The next line, without its newline.
    fn read_line(&mut self) -> Result<Vec<u8>, String> {
        match self.reader.read_until(b'\n', &mut self.partial) {
            Ok(_) if self.partial.last() == Some(&b'\n') => {
                let mut line = std::mem::take(&mut self.partial);
                line.pop();
                Ok(line)
            }
            Ok(_) => Err("the server closed the control connection".into()),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                Err(format!(
                    "the ccide server did not answer within {}",
                    crate::text::human_duration(self.timeout.unwrap_or_default())
                ))
            }
            Err(e) => Err(format!("control socket: {e}")),
        }
    }
}

/// The event stream of a server (ccide-protocol(7) §9.3).
pub struct Events {
    control: Control,
    /// The `subscribed` line, read to know the stream is live.
    first: Option<Vec<u8>>,
}

impl Events {
    /// The next event's line as the server wrote it (JSON), waiting as long as it takes; Err
    /// when the stream ended (the server stopped).
    pub fn next_line(&mut self) -> Result<String, String> {
        let line = match self.first.take() {
            Some(l) => l,
            None => self.control.read_line()?,
        };
        String::from_utf8(line).map_err(|e| format!("bad event from the server: {e}"))
    }

    /// A handle that ends the stream from another thread (`shutdown`): its reader then sees
    /// the end.
    pub fn closer(&self) -> std::io::Result<UnixStream> {
        self.control.writer.try_clone()
    }

    /// The next event.
    pub fn next(&mut self) -> Result<Value, String> {
        let line = self.next_line()?;
        serde_json::from_slice(line.as_bytes())
            .map_err(|e| format!("bad event from the server: {e}"))
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
    // A lock whose control socket refuses is stale, whatever its pid (reused since): its
    // server is gone, and a bridge starts a new one.
    let mut matching: Vec<_> = locks
        .into_iter()
        .filter(|l| l.workspaces.iter().any(|w| cwd.starts_with(w)))
        .filter(|l| !l.control_refuses())
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

/// The one server that serves `cwd`, connected: `find_server` without its probe of each
/// control socket, since the connection is the probe (a hook pays each connection twice
/// otherwise). None when none, or several, answer.
pub fn connect_to_server(config: &Path, cwd: &Path) -> Option<Control> {
    let locks = crate::lockfile::scan(config).into_iter().filter(|l| {
        l.alive && l.control.is_some() && l.workspaces.iter().any(|w| cwd.starts_with(w))
    });
    let mut reached = locks.filter_map(|l| Control::connect(l).ok());
    let one = reached.next()?;
    reached.next().is_none().then_some(one)
}

/// How the state directory of `ccide lsp`'s stand-in ends (beside the one `serve` would use
/// for the folder): it stands aside, handing over, when the folder's own server starts.
pub const STAND_IN_STATE: &str = ".editor";

/// Refuses to serve `workspaces` beside another running ccide server of one of them, of a
/// folder inside one or above one (`--state-dir` elsewhere, `serve` in a parent folder): the
/// CLI connects only when exactly one lock file holds its folder (ccide-protocol(7) §1.3).
/// Says which server and what to do. A lock of a server proven gone (its pid reused since, its
/// control socket refusing) is removed instead, as is one of `state`, which this process holds.
pub fn refuse_overlaps(
    config: &Path,
    workspaces: &[PathBuf],
    state: Option<&Path>,
) -> Result<(), String> {
    let state = state.and_then(|s| std::fs::canonicalize(s).ok());
    for l in crate::lockfile::scan(config) {
        let over = l.workspaces.iter().find_map(|w| {
            let ours = workspaces
                .iter()
                .find(|o| crate::workspaces::nested(w, o))?;
            Some((w.clone(), ours.clone()))
        });
        let Some((theirs, ours)) = over.filter(|_| l.control.is_some() && l.alive) else {
            continue;
        };
        // A stand-in hands its folder over to the server starting (and never starts beside
        // one itself).
        let stand_in = l.state.as_ref().and_then(|s| s.file_name());
        if stand_in.is_some_and(|n| n.to_string_lossy().ends_with(STAND_IN_STATE))
            && state.is_some()
        {
            continue;
        }
        let same_state = state.is_some()
            && l.state.as_ref().and_then(|s| std::fs::canonicalize(s).ok()) == state;
        // Its pid runs, but nobody listens on its control socket: gone (the pid reused).
        let refuses = l.control_refuses();
        if same_state || (refuses && crate::lockfile::proven_dead(&l).is_ok()) {
            let why = match same_state {
                true => "its state directory is this server's now",
                false => "its pid runs, but no ccide server answers on its control socket",
            };
            crate::log::warn!(
                "removed the stale lock file {} of pid {} for {} ({why})",
                l.path.display(),
                l.pid,
                l.folders()
            );
            let _ = std::fs::remove_file(&l.path);
            continue;
        }
        if refuses {
            continue;
        }
        let relation = if theirs == ours {
            "the same folder".to_string()
        } else if theirs.starts_with(&ours) {
            format!("{}, inside it", theirs.display())
        } else {
            format!("{}, above it", theirs.display())
        };
        return Err(format!(
            "refusing to serve {}: another ccide server (pid {}, port {}) already serves {relation}, and Claude Code connects to no IDE where two servers hold its folder. Use that one (`claude --ide` in {} connects to it; `ccide status --all` lists it), or stop it first (kill {}) to serve {} instead.",
            ours.display(),
            l.pid,
            l.port,
            theirs.display(),
            l.pid,
            ours.display()
        ));
    }
    Ok(())
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
