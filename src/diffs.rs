//! Pending diffs (PROTOCOL 5, openDiff): each proposed edit is a directory in the state
//! directory holding `original`, `proposed` and `meta.json`, answered when the user settles it.
//! ccide never writes the target file: after FILE_SAVED the CLI writes it (a server that wrote
//! it made the CLI's own write fail with "String not found in file").

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::SystemTime;

use serde_json::{Map, Value, json};

use crate::server::{Call, Reply, Responder};
use crate::tools::{arg_str, tool_error, tool_texts};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum How {
    Accepted,
    Rejected,
    /// The client closed it (close_tab, closeAllDiffTabs): the user answered in the terminal.
    Closed,
    /// The client that opened it disconnected: nobody can receive an answer.
    Abandoned,
}

impl How {
    pub fn word(self) -> &'static str {
        match self {
            How::Accepted => "accepted",
            How::Rejected => "rejected",
            How::Closed => "closed by the client",
            How::Abandoned => "abandoned",
        }
    }
}

pub struct PendingDiff {
    pub id: u64,
    pub tab_name: String,
    pub path: PathBuf,
    pub new_file: bool,
    pub client: u64,
    pub created: SystemTime,
    pub dir: PathBuf,
    responder: Responder,
}

impl PendingDiff {
    pub fn describe(&self) -> Value {
        json!({
            "id": self.id.to_string(),
            "tab_name": self.tab_name,
            "file": self.path,
            "new_file": self.new_file,
            "client": self.client,
            "created": self.created.duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
            "dir": self.dir,
        })
    }
}

struct Settled {
    id: u64,
    tab_name: String,
    how: How,
}

#[derive(Default)]
struct Inner {
    pending: Vec<PendingDiff>,
    /// Recently settled diffs, so a second accept says "already accepted" instead of "no such".
    settled: Vec<Settled>,
    next_id: u64,
}

pub struct Diffs {
    root: PathBuf,
    seq: PathBuf,
    inner: Mutex<Inner>,
}

/// What a user's `ccide diff accept|reject TARGET` found.
pub enum SettleError {
    NotFound(String),
    AlreadySettled(String),
    Ambiguous(String),
    Unreadable(String),
}

impl SettleError {
    pub fn message(&self) -> &str {
        match self {
            SettleError::NotFound(m)
            | SettleError::AlreadySettled(m)
            | SettleError::Ambiguous(m)
            | SettleError::Unreadable(m) => m,
        }
    }
}

impl Diffs {
    /// Opens the store, removing diffs left by a previous run (nobody can answer them now).
    pub fn open(state_dir: &Path) -> Result<Diffs, String> {
        let root = state_dir.join("diffs");
        if root.exists() {
            std::fs::remove_dir_all(&root)
                .map_err(|e| format!("cannot clean up old diffs in {}: {e}", root.display()))?;
        }
        crate::files::private_dir(&root, "diff directory")?;
        // Ids keep counting across restarts, so an id a script still holds never names a
        // newer diff.
        let seq = state_dir.join("diff-seq");
        let next_id = std::fs::read_to_string(&seq)
            .ok()
            .and_then(|s| s.trim().parse::<u64>().ok())
            .unwrap_or(1);
        Ok(Diffs {
            root,
            seq,
            inner: Mutex::new(Inner {
                next_id,
                ..Inner::default()
            }),
        })
    }

    pub fn list(&self) -> Vec<Value> {
        let mut inner = self.inner.lock().unwrap();
        prune(&mut inner);
        inner.pending.iter().map(PendingDiff::describe).collect()
    }

    /// Finds the one diff `target` names (id, tab name, or target path), or the only one.
    fn select(inner: &Inner, target: Option<&str>, cwd: &Path) -> Result<usize, SettleError> {
        let pending = &inner.pending;
        let Some(t) = target else {
            return match pending.len() {
                0 => Err(SettleError::NotFound("no pending diffs".into())),
                1 => Ok(0),
                _ => Err(SettleError::Ambiguous(format!(
                    "{} diffs are pending; name one:\n{}",
                    pending.len(),
                    pending
                        .iter()
                        .map(|d| format!("  {}  {}", d.id, d.path.display()))
                        .collect::<Vec<_>>()
                        .join("\n")
                ))),
            };
        };
        if let Some(i) = pending
            .iter()
            .position(|d| d.id.to_string() == t || d.tab_name == t)
        {
            return Ok(i);
        }
        let as_path = crate::files::normalize(&cwd.join(t));
        let by_path: Vec<usize> = (0..pending.len())
            .filter(|&i| pending[i].path == as_path)
            .collect();
        match by_path.len() {
            1 => return Ok(by_path[0]),
            n if n > 1 => {
                return Err(SettleError::Ambiguous(format!(
                    "{n} diffs are pending for {t}; name one by id"
                )));
            }
            _ => {}
        }
        if let Some(s) = inner
            .settled
            .iter()
            .rev()
            .find(|s| s.id.to_string() == t || s.tab_name == t)
        {
            return Err(SettleError::AlreadySettled(format!(
                "diff {} was already {}",
                s.id,
                s.how.word()
            )));
        }
        Err(SettleError::NotFound(format!("no pending diff named {t}")))
    }

    /// The user's decision from the command line. Accept answers FILE_SAVED with the current
    /// bytes of `proposed`, so an edit made there is what the CLI writes.
    pub fn settle_by_user(
        &self,
        target: Option<&str>,
        accept: bool,
        cwd: &Path,
    ) -> Result<Value, SettleError> {
        let mut inner = self.inner.lock().unwrap();
        prune(&mut inner);
        let i = Self::select(&inner, target, cwd)?;
        let content = if accept {
            let p = inner.pending[i].dir.join("proposed");
            let bytes = std::fs::read(&p).map_err(|e| {
                SettleError::Unreadable(format!("cannot read {}: {e}", p.display()))
            })?;
            Some(String::from_utf8(bytes).map_err(|_| {
                SettleError::Unreadable(format!(
                    "{} is not valid UTF-8 and cannot be sent to Claude Code; fix it and accept again",
                    p.display()
                ))
            })?)
        } else {
            None
        };
        let d = inner.pending.remove(i);
        let how = if accept { How::Accepted } else { How::Rejected };
        let desc = d.describe();
        finish(&mut inner, d, how, content);
        Ok(desc)
    }

    /// Settles as closed (answered DIFF_REJECTED) every pending diff matching `pred`.
    fn close_where(&self, pred: impl Fn(&PendingDiff) -> bool) -> usize {
        let mut inner = self.inner.lock().unwrap();
        prune(&mut inner);
        let (matching, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut inner.pending)
            .into_iter()
            .partition(|d| pred(d));
        inner.pending = rest;
        let n = matching.len();
        for d in matching {
            finish(&mut inner, d, How::Closed, None);
        }
        n
    }

    /// Removes, without an answer, the diffs of a client that is gone.
    pub fn abandon_client(&self, client: u64) {
        let mut inner = self.inner.lock().unwrap();
        let (gone, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut inner.pending)
            .into_iter()
            .partition(|d| d.client == client);
        inner.pending = rest;
        for d in gone {
            finish(&mut inner, d, How::Abandoned, None);
        }
    }
}

/// Drops diffs whose request can no longer be answered (cancelled, connection ended).
fn prune(inner: &mut Inner) {
    let (dead, live): (Vec<_>, Vec<_>) = std::mem::take(&mut inner.pending)
        .into_iter()
        .partition(|d| !d.responder.is_open());
    inner.pending = live;
    for d in dead {
        finish(inner, d, How::Abandoned, None);
    }
}

fn finish(inner: &mut Inner, d: PendingDiff, how: How, content: Option<String>) {
    match how {
        How::Accepted => {
            d.responder.reply(Ok(tool_texts(&[
                "FILE_SAVED",
                &content.unwrap_or_default(),
            ])));
        }
        How::Rejected | How::Closed => {
            d.responder
                .reply(Ok(tool_texts(&["DIFF_REJECTED", &d.tab_name])));
        }
        How::Abandoned => {}
    }
    let _ = std::fs::remove_dir_all(&d.dir);
    crate::info!("diff {} for {} {}", d.id, d.path.display(), how.word());
    crate::events::emit(json!({
        "event": "diff_settled", "id": d.id.to_string(), "how": how.word(),
        "tab_name": d.tab_name, "file": d.path,
    }));
    inner.settled.push(Settled {
        id: d.id,
        tab_name: d.tab_name,
        how,
    });
    if inner.settled.len() > 256 {
        inner.settled.remove(0);
    }
}

/// openDiff: blocking; answered when the user settles the diff.
pub fn open_diff(call: &Call, args: &Map<String, Value>) -> Reply {
    let app = call.app;
    let old = match arg_str(args, "old_file_path", true) {
        Ok(v) => v.unwrap_or_default(),
        Err(e) => return Reply::Now(Err(e)),
    };
    let new_path = match arg_str(args, "new_file_path", false) {
        Ok(v) => v.unwrap_or_else(|| old.clone()),
        Err(e) => return Reply::Now(Err(e)),
    };
    let contents = match arg_str(args, "new_file_contents", true) {
        Ok(v) => v.unwrap_or_default(),
        Err(e) => return Reply::Now(Err(e)),
    };
    let path = match app.resolve(&new_path) {
        Ok(p) => p,
        Err(e) => return Reply::Now(Ok(tool_error(&e))),
    };
    let tab_name = match arg_str(args, "tab_name", false) {
        Ok(v) => v.unwrap_or_else(|| format!("✻ [Claude Code] {} ⧉", display_name(&path))),
        Err(e) => return Reply::Now(Err(e)),
    };
    if std::fs::metadata(&path).is_ok_and(|m| !m.is_file()) {
        return Reply::Now(Ok(tool_error(&format!(
            "{} is not a regular file",
            path.display()
        ))));
    }
    let (original, new_file) = match std::fs::read(&path) {
        Ok(b) => (b, false),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => (Vec::new(), true),
        Err(e) => {
            return Reply::Now(Ok(tool_error(&format!(
                "cannot read {}: {e}",
                path.display()
            ))));
        }
    };
    let diffs = &app.diffs;
    // The VS Code extension closes an existing tab of the same name first; so do we.
    diffs.close_where(|d| d.tab_name == tab_name);
    let mut inner = diffs.inner.lock().unwrap();
    let id = inner.next_id;
    inner.next_id += 1;
    let _ = crate::files::write_volatile(&diffs.seq, inner.next_id.to_string().as_bytes(), 0o600);
    let dir = diffs.root.join(id.to_string());
    let created = SystemTime::now();
    let meta = json!({
        "id": id.to_string(), "tab_name": tab_name, "old_file_path": old, "new_file_path": new_path,
        "file": path, "new_file": new_file, "client": call.client.id,
        "created": created.duration_since(SystemTime::UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0),
    });
    let written = (|| -> std::io::Result<()> {
        std::fs::create_dir(&dir)?;
        crate::files::write_volatile(&dir.join("original"), &original, 0o600)?;
        crate::files::write_volatile(&dir.join("proposed"), contents.as_bytes(), 0o600)?;
        crate::files::write_volatile(&dir.join("meta.json"), meta.to_string().as_bytes(), 0o600)
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_dir_all(&dir);
        return Reply::Now(Ok(tool_error(&format!(
            "cannot store the diff in {}: {e}",
            dir.display()
        ))));
    }
    let d = PendingDiff {
        id,
        tab_name,
        path,
        new_file,
        client: call.client.id,
        created,
        dir,
        responder: call.defer(),
    };
    crate::info!(
        "diff {id} opened for {} (review: ccide diff show {id}; then ccide diff accept|reject {id})",
        d.path.display()
    );
    let mut event = d.describe();
    event["event"] = "diff_opened".into();
    crate::events::emit(event);
    inner.pending.push(d);
    Reply::Later
}

fn display_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// close_tab: the user answered in the terminal; a pending diff of that name is settled as
/// rejected (the CLI ignores that late answer). Always TAB_CLOSED.
pub fn close_tab(call: &Call, args: &Map<String, Value>) -> Reply {
    let name = match arg_str(args, "tab_name", true) {
        Ok(v) => v.unwrap_or_default(),
        Err(e) => return Reply::Now(Err(e)),
    };
    call.app.diffs.close_where(|d| d.tab_name == name);
    // Seed 000: close_tab also takes a file path, closing that editor tab.
    if let Ok(p) = call.app.resolve(&name) {
        call.app.editor.close_tab(&p, false);
    }
    Reply::Now(Ok(tool_texts(&["TAB_CLOSED"])))
}

/// closeAllDiffTabs: called at every prompt; touches only ccide's own pending diffs.
pub fn close_all_diff_tabs(call: &Call, _args: &Map<String, Value>) -> Reply {
    let n = call.app.diffs.close_where(|_| true);
    Reply::Now(Ok(tool_texts(&[&format!("CLOSED_{n}_DIFF_TABS")])))
}
