//! Pending diffs (ccide-protocol(7) §5, openDiff): each proposed edit is a directory in the
//! state directory holding `original`, `proposed` and `meta.json`, answered when the user
//! settles it. ccide never writes the target file: after FILE_SAVED the CLI writes it (a server
//! that wrote it made the CLI's own write fail with "String not found in file").
//!
//! A diff belongs to the client that proposed it: only that client's request is answered, and
//! its disconnect abandons it.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::SystemTime;

use serde_json::Value;

use super::events::Events;
use crate::json::{self, obj};
use crate::proc::lock;
use crate::rpc::call::{Responder, tool_texts};

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
    /// Its directory was deleted with the state directory: only a rejection can answer it.
    lost: bool,
    responder: Responder,
    /// The model's proposal as it came, when small enough to keep: what the user changed of
    /// it before accepting is told to the model (`verdicts`).
    as_proposed: Option<String>,
}

impl PendingDiff {
    pub fn describe(&self) -> Value {
        obj! {
            "id": self.id.to_string(),
            "tab_name": self.tab_name.as_str(),
            "file": json::path(&self.path),
            "new_file": self.new_file,
            "client": self.client,
            "created": crate::text::unix_secs(self.created),
            "dir": json::path(&self.dir),
        }
    }
}

/// Takes out of `pending` the diffs `f` picks, the others kept in order (one copy of the code
/// for every use).
fn take_where(
    pending: &mut Vec<PendingDiff>,
    f: &dyn Fn(&PendingDiff) -> bool,
) -> Vec<PendingDiff> {
    let (taken, kept) = std::mem::take(pending).into_iter().partition(|d| f(d));
    *pending = kept;
    taken
}

struct Settled {
    id: u64,
    tab_name: String,
    how: How,
    /// The user's verdict per hunk, when the review gave one (ccide-protocol(7) §5.5).
    verdict: Option<Value>,
}

/// What the user said of a diff they settled, kept until the model is told (`ccide hook`,
/// ccide-protocol(7) §9.2 `verdicts`).
struct Verdict {
    id: u64,
    path: PathBuf,
    how: How,
    /// The pid of the CLI that proposed the diff (its `ide_connected`), if it said.
    pid: Option<i64>,
    /// `{"kept":[],"dropped":[],"edited":[],"why":...}`.
    verdict: Value,
    /// What the user changed of the proposal before accepting it, as a unified diff.
    changes: Option<String>,
}

/// Undelivered verdicts kept at most; the oldest go first.
const MAX_VERDICTS: usize = 64;
/// The largest proposal kept to tell the model what the user changed of it.
const MAX_KEPT_PROPOSAL: usize = 1 << 20;

#[derive(Default)]
struct Inner {
    pending: Vec<PendingDiff>,
    /// Recently settled diffs, so a second accept says "already accepted" instead of "no such".
    settled: Vec<Settled>,
    verdicts: Vec<Verdict>,
    next_id: u64,
}

/// Which verdicts a `verdicts` request takes.
pub struct VerdictQuery {
    /// Only those of this (confined) file.
    pub path: Option<PathBuf>,
    /// Only those of diffs proposed by a CLI with one of these pids (the hook's ancestors); a
    /// verdict whose CLI never said its pid matches any.
    pub pids: Option<Vec<i64>>,
}

pub struct Diffs {
    root: PathBuf,
    seq: PathBuf,
    inner: Mutex<Inner>,
    events: Arc<Events>,
}

/// An edit a client proposes (openDiff's arguments, resolved).
pub struct Proposal {
    pub old_file_path: String,
    pub new_file_path: String,
    /// The confined target file.
    pub path: PathBuf,
    pub tab_name: String,
    pub contents: String,
    pub client: u64,
}

/// What a user's `ccide diff accept|reject TARGET` found.
pub enum SettleError {
    NotFound(String),
    AlreadySettled(String),
    Ambiguous(String),
    Unreadable(String),
    /// The answer would not fit in one message to the client.
    TooBig(String),
}

impl SettleError {
    /// The word the control socket carries, so commands can tell the cases apart.
    pub fn kind(&self) -> &'static str {
        match self {
            SettleError::NotFound(_) => "not_found",
            SettleError::AlreadySettled(_) => "already_settled",
            SettleError::Ambiguous(_) => "ambiguous",
            SettleError::Unreadable(_) => "unreadable",
            SettleError::TooBig(_) => "too_big",
        }
    }

    pub fn message(&self) -> &str {
        match self {
            SettleError::NotFound(m)
            | SettleError::AlreadySettled(m)
            | SettleError::Ambiguous(m)
            | SettleError::Unreadable(m)
            | SettleError::TooBig(m) => m,
        }
    }
}

/// A verdict as `diff_settled` carries it: the dropped hunks by number and reason, without
/// their text (`diff.list`'s `settled` has it). An event goes to every subscriber through its
/// socket's buffer: 500 dropped hunks' text would not fit, and the subscriber would be cut.
fn without_hunk_texts(verdict: &Value) -> Value {
    let mut v = verdict.clone();
    if let Some(dropped) = v["dropped"].as_array_mut() {
        for d in dropped.iter_mut().filter_map(Value::as_object_mut) {
            d.remove("text");
        }
    }
    v
}

impl Diffs {
    /// Opens the store, removing diffs left by a previous run (nobody can answer them now).
    pub fn open(state_dir: &Path, events: Arc<Events>) -> Result<Diffs, String> {
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
            events,
        })
    }

    /// Makes the diffs directory again after the state directory was deleted, with the next
    /// id, and marks the pending diffs whose files went with it; returns those as
    /// `(id, file)`. They stay pending: rejecting needs nothing that was lost.
    pub fn restore(&self) -> Result<Vec<(u64, PathBuf)>, String> {
        let mut inner = lock(&self.inner);
        crate::files::private_dir(&self.root, "diff directory")?;
        let _ =
            crate::files::write_volatile(&self.seq, inner.next_id.to_string().as_bytes(), 0o600);
        let mut lost = Vec::new();
        for d in inner
            .pending
            .iter_mut()
            .filter(|d| !d.lost && !d.dir.exists())
        {
            d.lost = true;
            lost.push((d.id, d.path.clone()));
        }
        Ok(lost)
    }

    pub fn list(&self) -> Vec<Value> {
        let mut inner = lock(&self.inner);
        self.prune(&mut inner);
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
        // The path as written, or as it resolves (a name through a symlink to the workspace
        // names the file the diff changes, as `select` resolves it).
        let as_path = crate::files::normalize(&cwd.join(t));
        let resolved = resolve_existing(&as_path);
        let by_path: Vec<usize> = (0..pending.len())
            .filter(|&i| pending[i].path == as_path || Some(&pending[i].path) == resolved.as_ref())
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
    /// bytes of `proposed`, so an edit made there is what the CLI writes. `verdict` is the
    /// review's record of what was kept and dropped and why (ccide-protocol(7) §5.5): kept
    /// with the settled diff, in the answer and in `diff_settled`.
    #[cfg(test)]
    pub fn settle_by_user(
        &self,
        target: Option<&str>,
        accept: bool,
        cwd: &Path,
        verdict: Option<Value>,
    ) -> Result<Value, SettleError> {
        self.settle_with_verdict(target, accept, cwd, verdict, &|_| None)
    }

    /// `settle_by_user`, also keeping a verdict for the model (`verdicts`) when the review gave
    /// one (what was kept and dropped, a reason) or the user changed the proposal before
    /// accepting it; `pid` gives the pid of a client id (the CLI the verdict is for).
    pub fn settle_with_verdict(
        &self,
        target: Option<&str>,
        accept: bool,
        cwd: &Path,
        verdict: Option<Value>,
        pid: &dyn Fn(u64) -> Option<i64>,
    ) -> Result<Value, SettleError> {
        let mut inner = lock(&self.inner);
        self.prune(&mut inner);
        let i = Self::select(&inner, target, cwd)?;
        // The answer is made (and measured) once, and sent as it was made.
        let answer = if accept {
            let d = &inner.pending[i];
            if d.lost {
                return Err(SettleError::Unreadable(format!(
                    "diff {} cannot be accepted: its proposal was in the state directory, which was deleted; reject it (ccide diff reject {}) and ask Claude again",
                    d.id, d.id
                )));
            }
            let p = d.dir.join("proposed");
            let bytes = std::fs::read(&p).map_err(|e| {
                SettleError::Unreadable(format!("cannot read {}: {e}", p.display()))
            })?;
            let content = String::from_utf8(bytes).map_err(|_| {
                SettleError::Unreadable(format!(
                    "{} is not valid UTF-8 and cannot be sent to Claude Code; fix it and accept again",
                    p.display()
                ))
            })?;
            let answer = crate::rpc::texts_response(&d.responder.id, &["FILE_SAVED", &content]);
            // The CLI drops a connection on a message above 16 MiB: it would never hear of
            // the decision, so the diff stays pending and the user is told.
            if answer.len() > crate::rpc::MAX_TO_CLIENT {
                return Err(SettleError::TooBig(format!(
                    "cannot accept diff {}: the answer carrying the file is {} as JSON, above the 16 MiB Claude Code accepts in one message; the diff stays pending (reject it, and ask Claude for smaller edits)",
                    d.id,
                    crate::rpc::mib(answer.len())
                )));
            }
            Some((answer, content))
        } else {
            None
        };
        let mut d = inner.pending.remove(i);
        let how = if accept { How::Accepted } else { How::Rejected };
        let mut desc = d.describe();
        if let Some(v) = &verdict {
            desc["verdict"] = v.clone();
        }
        let model = d.as_proposed.take();
        let (id, path, client) = (d.id, d.path.clone(), d.client);
        let (answer, saved) = answer.unzip();
        // The CLI is answered first: what the user changed is a diff of the whole file, for
        // the model's verdict, which the lock held keeps from being read before it is stored.
        self.finish(&mut inner, d, how, answer, verdict.clone());
        let changes = match (&saved, &model) {
            (Some(saved), Some(model)) if saved != model => {
                let name = path.file_name().unwrap_or_default().to_string_lossy();
                let text = crate::textdiff::unified(
                    model.as_bytes(),
                    saved.as_bytes(),
                    &format!("proposed/{name}"),
                    &format!("saved/{name}"),
                    false,
                    false,
                    false,
                );
                Some(String::from_utf8_lossy(&text).into_owned())
            }
            _ => None,
        };
        if verdict.is_some() || changes.is_some() {
            let for_model = Verdict {
                id,
                path,
                how,
                pid: pid(client),
                verdict: verdict.unwrap_or_else(|| {
                    obj! {"kept": Value::Array(vec![]), "dropped": Value::Array(vec![]), "edited": Value::Array(vec![]), "why": Value::Null}
                }),
                changes,
            };
            inner.verdicts.push(for_model);
            if inner.verdicts.len() > MAX_VERDICTS {
                inner.verdicts.remove(0);
            }
        }
        Ok(desc)
    }

    /// The undelivered verdicts `q` picks, oldest first. They stay until `forget_verdicts`
    /// is told they were delivered: a hook that gave up waiting for the answer (its deadline)
    /// must not lose them.
    pub fn verdicts(&self, q: &VerdictQuery) -> Vec<Value> {
        let inner = lock(&self.inner);
        let picked = |v: &Verdict| {
            q.path.as_ref().is_none_or(|p| *p == v.path)
                && q.pids
                    .as_ref()
                    .is_none_or(|pids| v.pid.is_none_or(|pid| pids.contains(&pid)))
        };
        inner
            .verdicts
            .iter()
            .filter(|v| picked(v))
            .map(|v| {
                obj! {"id": v.id.to_string(), "file": json::path(&v.path), "how": v.how.word(),
                "verdict": v.verdict.clone(), "changes": v.changes.clone()}
            })
            .collect()
    }

    /// Forgets the verdicts of the diffs `ids` names: the model was told.
    pub fn forget_verdicts(&self, ids: &[String]) {
        if !ids.is_empty() {
            lock(&self.inner)
                .verdicts
                .retain(|v| !ids.contains(&v.id.to_string()));
        }
    }

    /// The verdicts of the diffs settled recently with one, oldest first, each as the settled
    /// diff's id, how it was settled and the verdict (ccide-protocol(7) §5.5).
    pub fn settled_verdicts(&self) -> Vec<Value> {
        let inner = lock(&self.inner);
        inner
            .settled
            .iter()
            .filter_map(|s| {
                let v = s.verdict.as_ref()?;
                Some(obj! {"id": s.id.to_string(), "tab_name": s.tab_name.as_str(), "how": s.how.word(), "verdict": v.clone()})
            })
            .collect()
    }

    /// The pending diff `target` names, by the same rule as `settle_by_user`.
    pub fn find(&self, target: Option<&str>, cwd: &Path) -> Result<Value, SettleError> {
        let mut inner = lock(&self.inner);
        self.prune(&mut inner);
        let i = Self::select(&inner, target, cwd)?;
        Ok(inner.pending[i].describe())
    }

    /// The proposal of the diff `id` under its file's name, in its directory, so an editor
    /// opening it picks the file's language. The proposal itself takes that name and `proposed`
    /// becomes a link to it, not the other way round: kakoune names a buffer after a link's
    /// target, and a link named like the file opened as `proposed`, without a language. A
    /// `proposed` replaced since (a script writing a new file there) becomes the proposal again.
    /// Each step is a rename, so `proposed` always reads as the proposal.
    pub fn proposal_view(&self, id: Option<&str>) -> Result<PathBuf, String> {
        let (dir, file) = self.dir_of(id)?;
        let name = file.file_name().unwrap_or_default();
        if ["original", "proposed", "meta.json", ".view"]
            .iter()
            .any(|n| name == *n)
        {
            return Ok(dir.join("proposed"));
        }
        let (view, proposed, tmp) = (dir.join(name), dir.join("proposed"), dir.join(".view"));
        let linked = std::fs::symlink_metadata(&proposed).is_ok_and(|m| m.is_symlink());
        if !linked {
            let err = |e: std::io::Error| format!("cannot create {}: {e}", view.display());
            let _ = std::fs::remove_file(&tmp);
            std::fs::hard_link(&proposed, &tmp).map_err(err)?;
            std::fs::rename(&tmp, &view).map_err(err)?;
            std::os::unix::fs::symlink(name, &tmp).map_err(err)?;
            std::fs::rename(&tmp, &proposed).map_err(err)?;
        }
        Ok(view)
    }

    /// Replaces the proposal of the diff `id` with what the user made of it in an editor
    /// (saved or not): accepting then sends it.
    pub fn edit_proposal(&self, id: Option<&str>, content: &str) -> Result<(), String> {
        let (dir, _) = self.dir_of(id)?;
        crate::files::write_volatile(&dir.join("proposed"), content.as_bytes(), 0o600)
            .map_err(|e| format!("cannot store the edited proposal in {}: {e}", dir.display()))
    }

    /// The directory and target file of the pending diff `id`.
    fn dir_of(&self, id: Option<&str>) -> Result<(PathBuf, PathBuf), String> {
        let id = id.ok_or("name the diff by its id")?;
        let inner = lock(&self.inner);
        inner
            .pending
            .iter()
            .find(|d| d.id.to_string() == id)
            .map(|d| (d.dir.clone(), d.path.clone()))
            .ok_or_else(|| format!("no pending diff {id}"))
    }

    /// Stores a client's proposal and keeps `responder` to answer it when the user settles it.
    /// A pending diff of the same client and tab name is closed first (the VS Code extension
    /// does the same).
    pub fn propose(&self, p: Proposal, responder: Responder) -> Result<Value, String> {
        let cannot_read = |e: std::io::Error| format!("cannot read {}: {e}", p.path.display());
        // Checked before opening: opening a FIFO would block.
        let source = match std::fs::metadata(&p.path) {
            Ok(m) if !m.is_file() => {
                return Err(format!("{} is not a regular file", p.path.display()));
            }
            Ok(_) => Some(std::fs::File::open(&p.path).map_err(cannot_read)?),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => return Err(cannot_read(e)),
        };
        let new_file = source.is_none();
        self.close_where(p.client, |d| d.tab_name == p.tab_name);
        let mut inner = lock(&self.inner);
        let id = inner.next_id;
        inner.next_id += 1;
        let _ =
            crate::files::write_volatile(&self.seq, inner.next_id.to_string().as_bytes(), 0o600);
        sweep_settled(&self.root, &inner.pending);
        let dir = self.root.join(id.to_string());
        let created = SystemTime::now();
        let meta = obj! {
            "id": id.to_string(), "tab_name": p.tab_name.as_str(), "old_file_path": p.old_file_path.as_str(),
            "new_file_path": p.new_file_path.as_str(), "file": json::path(&p.path), "new_file": new_file,
            "client": p.client, "created": crate::text::unix_secs(created),
        };
        // The original is copied by the kernel, not read in here: the request path is the two
        // files written. Only when someone subscribes to `ccide events` is a small original
        // read back to count lines for diff_opened (`quick_stat`); otherwise the review decodes
        // and counts when it is asked (`ccide diff list`, `show`), in its own process.
        let written = (|| -> std::io::Result<()> {
            std::fs::create_dir(&dir)?;
            let original = dir.join("original");
            match source {
                Some(mut f) => crate::files::copy_to_new(&mut f, &original, 0o600)?,
                None => crate::files::write_volatile(&original, b"", 0o600)?,
            }
            crate::files::write_volatile(&dir.join("proposed"), p.contents.as_bytes(), 0o600)?;
            crate::files::write_volatile(&dir.join("meta.json"), meta.to_string().as_bytes(), 0o600)
        })();
        if let Err(e) = written {
            let _ = std::fs::remove_dir_all(&dir);
            return Err(format!("cannot store the diff in {}: {e}", dir.display()));
        }
        let mut d = PendingDiff {
            id,
            tab_name: p.tab_name.clone(),
            path: p.path.clone(),
            new_file,
            client: p.client,
            created,
            dir,
            lost: false,
            responder,
            as_proposed: None,
        };
        crate::log::info!(
            "diff {id} opened for {} (review: ccide diff show {id}; then ccide diff accept|reject {id})",
            d.path.display()
        );
        let desc = d.describe();
        if self.events.listening() {
            let mut event = desc.clone();
            event["event"] = "diff_opened".into();
            if let Some((added, removed)) = quick_stat(&d.dir.join("original"), &p.contents) {
                event["added"] = added.into();
                event["removed"] = removed.into();
            }
            self.events.emit(event);
        }
        d.as_proposed = (p.contents.len() <= MAX_KEPT_PROPOSAL).then_some(p.contents);
        inner.pending.push(d);
        Ok(desc)
    }

    /// Settles as closed (answered DIFF_REJECTED) the pending diffs of `client` matching
    /// `pred`. A client closes only its own: the CLI calls closeAllDiffTabs at every prompt,
    /// and two CLIs share one server (ccide-protocol(7) §5.3).
    pub fn close_where(&self, client: u64, pred: impl Fn(&PendingDiff) -> bool) -> usize {
        let mut inner = lock(&self.inner);
        self.prune(&mut inner);
        let matching = take_where(&mut inner.pending, &|d| d.client == client && pred(d));
        let n = matching.len();
        for d in matching {
            self.finish(&mut inner, d, How::Closed, None, None);
        }
        n
    }

    /// Removes, without an answer, the diffs of a client that is gone.
    pub fn abandon_client(&self, client: u64) {
        let mut inner = lock(&self.inner);
        for d in take_where(&mut inner.pending, &|d| d.client == client) {
            self.finish(&mut inner, d, How::Abandoned, None, None);
        }
    }

    /// Drops diffs whose request can no longer be answered (cancelled, connection ended).
    fn prune(&self, inner: &mut Inner) {
        for d in take_where(&mut inner.pending, &|d| !d.responder.is_open()) {
            self.finish(inner, d, How::Abandoned, None, None);
        }
    }

    /// `answer` is the text of an accepted diff's answer; `verdict` the user's, if any.
    fn finish(
        &self,
        inner: &mut Inner,
        d: PendingDiff,
        how: How,
        answer: Option<String>,
        verdict: Option<Value>,
    ) {
        match how {
            How::Accepted => {
                d.responder.reply_text(answer.unwrap_or_default());
            }
            How::Rejected | How::Closed => {
                d.responder
                    .reply(Ok(tool_texts(&["DIFF_REJECTED", &d.tab_name])));
            }
            How::Abandoned => {}
        }
        remove_diff_dir(&d.dir, &d.path);
        match how {
            How::Closed => crate::log::info!(
                "diff {} for {} closed by client #{}",
                d.id,
                d.path.display(),
                d.client
            ),
            _ => crate::log::info!("diff {} for {} {}", d.id, d.path.display(), how.word()),
        }
        let mut event = obj! {
            "event": "diff_settled", "id": d.id.to_string(), "how": how.word(),
            "tab_name": d.tab_name.as_str(), "file": json::path(&d.path),
        };
        if let Some(v) = &verdict {
            event["verdict"] = without_hunk_texts(v);
        }
        self.events.emit(event);
        inner.settled.push(Settled {
            id: d.id,
            tab_name: d.tab_name,
            how,
            verdict,
        });
        if inner.settled.len() > 256 {
            inner.settled.remove(0);
        }
    }
}

/// Removes a settled diff's directory: the files ccide made in it, then the directory if
/// nothing else is left. An editor that still holds the proposal in a live, modified buffer
/// has its own files there (emacs: the lock file `.#NAME`, the auto-save `#NAME#`); the
/// directory stays for them, so the editor's next auto-save does not fail on a folder removed
/// under it (ccide-protocol(7) §12.2). A later proposal, or the next start, removes it once
/// the editor let go.
fn remove_diff_dir(dir: &Path, file: &Path) {
    let view = file.file_name().unwrap_or_default();
    for name in [
        "original".as_ref(),
        "proposed".as_ref(),
        "meta.json".as_ref(),
        ".view".as_ref(),
        view,
    ] {
        let _ = std::fs::remove_file(dir.join(name));
    }
    if let Err(e) = std::fs::remove_dir(dir) {
        crate::log::debug!("kept {} for an editor's files in it: {e}", dir.display());
    }
}

/// Removes the directories of settled diffs that editors have let go of since (empty ones).
fn sweep_settled(root: &Path, pending: &[PendingDiff]) {
    for e in std::fs::read_dir(root).into_iter().flatten().flatten() {
        let dir = e.path();
        if !pending.iter().any(|d| d.dir == dir) {
            let _ = std::fs::remove_dir(&dir);
        }
    }
}

/// `p` with symlinks resolved: the file itself, or its directory when it does not exist yet.
fn resolve_existing(p: &Path) -> Option<PathBuf> {
    std::fs::canonicalize(p).ok().or_else(|| {
        let parent = std::fs::canonicalize(p.parent()?).ok()?;
        Some(parent.join(p.file_name()?))
    })
}

/// The lines a proposal adds and removes, for `diff_opened`, when the two texts are small
/// enough to count in well under a millisecond (the model's edits nearly always are); a larger
/// proposal is counted by the review in its own process instead (`ccide diff list`), off the
/// request path (ccide-protocol(7) §9.3).
fn quick_stat(original: &Path, proposed: &str) -> Option<(usize, usize)> {
    const QUICK: u64 = 256 << 10;
    let len = std::fs::metadata(original).ok()?.len();
    if len + proposed.len() as u64 > QUICK {
        return None;
    }
    let read = crate::textdiff::as_cli_reads(std::fs::read(original).ok()?);
    Some(crate::textdiff::stat(&read.text, proposed.as_bytes()))
}
