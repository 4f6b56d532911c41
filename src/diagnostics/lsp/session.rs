//! One configured language server: its life cycle (lazy start, crash and backoff, idle stop),
//! the LSP conversation (initialize, the server's requests, document sync, diagnostics) and
//! the rule that decides when a document's diagnostics are final.
//!
//! When a result is FINAL (only final results reach the sink, and a `Ticket` waits for one):
//! - pulled (`textDocument/diagnostic`, or tsserver's own diagnostics through
//!   typescript-language-server): the answer for the version asked about, unless work-done
//!   progress was active when it came; then it is asked again when the work ends;
//! - pushed: the latest publish for the version last sent (a publish naming an older version is
//!   dropped; one without a version counts for the latest) once no other publish for the
//!   document came for `Config::quiet`, counted from the end of the last progress at the
//!   earliest, and no progress is active;
//! - a progress older than two minutes no longer holds anything back.
//!
//! Until then the store keeps the previous final result (of an earlier version), never a
//! partial one.
//!
//! All state sits behind one mutex; the reader thread, the clock thread and callers take it
//! briefly and never do I/O under it (messages go to the process's write queue). Final results
//! go to the sink after the lock is released, in the order they became final.

use std::collections::{HashMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::convert;
use super::process::{self, Inbox, ToProc};
use super::{Clock, Config, Sink};
use crate::diagnostics::parse::Diagnostic;
use crate::rpc::{self, ErrorCode, RequestId, RpcError};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Phase {
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

struct Doc {
    uri: String,
    text: String,
    hash: u64,
    /// Set when `text` is the file on disk as of this stamp; unsaved text has none.
    disk: Option<crate::files::Stamp>,
    version: i32,
    /// didOpen was sent to the current process.
    open: bool,
    used: Instant,
    /// The latest publish for `version`, not final yet.
    push: Option<(Vec<Value>, Instant)>,
    /// The diagnostic request in flight: its id and the epoch it was sent in.
    pull: Option<(u64, u64)>,
    /// A pull is wanted as soon as none is in flight and the server is not busy.
    pull_again: bool,
    /// The tsserver parts received so far for the pull in flight, as LSP diagnostics.
    pull_parts: Vec<Value>,
    /// The version and epoch of the last final result given to the sink (0: none).
    final_version: i32,
    final_epoch: u64,
}

/// How a server's diagnostics are asked for, when they are.
#[derive(Clone)]
enum Pull {
    /// `textDocument/diagnostic`, with the identifier the server registered.
    Lsp(Option<String>),
    /// typescript-language-server publishes nothing when a file's diagnostics stay empty
    /// (`FileDiagnostics.update` skips "empty again"), so a clean edit never gets a result to
    /// call final. Its `typescript.tsserverRequest` command asks tsserver itself: syntactic,
    /// semantic and suggestion diagnostics, answered in order, make a complete result.
    Tsserver,
}

const TSSERVER_PARTS: [&str; 3] = [
    "syntacticDiagnosticsSync",
    "semanticDiagnosticsSync",
    "suggestionDiagnosticsSync",
];

enum Pending {
    Initialize,
    /// `part` 0 is a whole `textDocument/diagnostic` answer; 1 to 3 are the tsserver parts.
    Pull {
        path: PathBuf,
        version: i32,
        epoch: u64,
        part: usize,
    },
    Shutdown,
}

struct State {
    phase: Phase,
    /// Which process the messages belong to: bumped at every start.
    run: u64,
    /// The owning thread's inbox, while the process runs.
    tx: Option<Arc<Inbox>>,
    /// The process group, while its leader is not reaped (so killing it cannot hit a reused
    /// pid).
    pid: Option<u32>,
    started: Instant,
    server_info: String,
    /// Columns in UTF-16 units (the LSP default) rather than scalar values.
    utf16: bool,
    /// Set when results are pulled rather than pushed.
    pull: Option<Pull>,
    pull_registration: Option<String>,
    watch_registrations: Vec<String>,
    /// Active work-done progress tokens and when each began.
    progress: HashMap<String, Instant>,
    /// When the last progress ended: the quiet period of a publish counts from then at the
    /// earliest, since a server republishes right after its work ends.
    settled_at: Instant,
    pull_retry_at: Option<Instant>,
    next_id: u64,
    pending: HashMap<u64, Pending>,
    docs: HashMap<PathBuf, Doc>,
    /// Versions are unique across documents, so a document forgotten and opened again can
    /// never repeat a version a waiter is waiting for.
    last_version: i32,
    /// Bumped by every change the server is told about; a pulled result is only as fresh as
    /// the epoch its request was sent in (other files' changes can change it).
    epoch: u64,
    last_used: Instant,
    crashes: u32,
    retry_at: Instant,
    restarts: u32,
    last_error: Option<String>,
    /// Why ccide killed the current process, for the crash report.
    killed_because: Option<String>,
    stderr_tail: VecDeque<String>,
    closed: bool,
}

pub struct Server {
    /// The program's file name, e.g. `pyright-langserver`.
    pub name: String,
    /// The sink's origin for this server's results, `lsp:NAME`.
    pub origin: String,
    pub words: Vec<String>,
    pub patterns: Vec<String>,
    workspaces: Vec<PathBuf>,
    cfg: Config,
    sink: Sink,
    clock: Arc<Clock>,
    st: Mutex<State>,
    /// Notified whenever a result becomes final or the process changes state.
    cv: Condvar,
    /// Held while handing results to the sink, taken before the state lock is released, so
    /// two threads cannot deliver one file's results out of order.
    delivering: Mutex<()>,
}

/// What a caller waits on: the final result of `version` of `path`, pulled no earlier than
/// `epoch`.
pub struct Ticket {
    server: Arc<Server>,
    path: PathBuf,
    version: i32,
    epoch: u64,
}

/// A work-done progress older than this no longer holds results back: some servers forget to
/// end a progress, and a result must not wait forever for it. rust-analyzer's first
/// `cargo check` on its own repository took 89 s (LSP.md).
const PROGRESS_GATE_MAX: Duration = Duration::from_secs(120);
/// After a pull the server cancelled (it was busy or the content changed under it).
const PULL_RETRY: Duration = Duration::from_millis(200);
/// Files above this are not sent: servers hold every open document in memory.
const MAX_DOC_BYTES: u64 = 8 << 20;
const STDERR_TAIL: usize = 12;

type Finals = Vec<(PathBuf, Vec<Diagnostic>)>;

impl Server {
    pub fn new(
        words: Vec<String>,
        patterns: Vec<String>,
        workspaces: Vec<PathBuf>,
        cfg: Config,
        sink: Sink,
        clock: Arc<Clock>,
    ) -> Server {
        let name = Path::new(&words[0])
            .file_name()
            .map_or_else(|| words[0].clone(), |n| n.to_string_lossy().into_owned());
        let now = Instant::now();
        Server {
            origin: format!("lsp:{name}"),
            name,
            words,
            patterns,
            workspaces,
            cfg,
            sink,
            clock,
            st: Mutex::new(State {
                phase: Phase::Stopped,
                run: 0,
                tx: None,
                pid: None,
                started: now,
                server_info: String::new(),
                utf16: true,
                pull: None,
                pull_registration: None,
                watch_registrations: Vec::new(),
                progress: HashMap::new(),
                settled_at: now,
                pull_retry_at: None,
                next_id: 0,
                pending: HashMap::new(),
                docs: HashMap::new(),
                last_version: 0,
                epoch: 0,
                last_used: now,
                crashes: 0,
                retry_at: now,
                restarts: 0,
                last_error: None,
                killed_because: None,
                stderr_tail: VecDeque::new(),
                closed: false,
            }),
            cv: Condvar::new(),
            delivering: Mutex::new(()),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether this server still takes files (not given up on, not shut down).
    pub fn usable(&self) -> bool {
        let st = self.lock();
        st.phase != Phase::Failed && !st.closed
    }

    /// Tells the server about the current content of `path` (from disk, or `unsaved`) if it
    /// differs from what it has, and returns what to wait on for the final result.
    pub fn touch(self: &Arc<Self>, path: &Path, unsaved: Option<&str>) -> Option<Ticket> {
        let known = {
            let st = self.lock();
            if st.phase == Phase::Failed || st.closed {
                return None;
            }
            st.docs.get(path).map(|d| d.disk)
        };
        // Read outside the lock; an unchanged stamp spares the read.
        let content = match unsaved {
            Some(t) => Some((t.to_string(), None)),
            None => match crate::files::stamp(path) {
                None => return self.forget(path),
                Some(s) if s.len > MAX_DOC_BYTES => {
                    crate::log::debug!("{}: {} is too large to send", self.name, path.display());
                    return None;
                }
                Some(s) if known == Some(Some(s)) => None,
                Some(s) => match std::fs::read(path) {
                    Ok(b) => Some((String::from_utf8_lossy(&b).into_owned(), Some(s))),
                    Err(_) => return self.forget(path),
                },
            },
        };
        let now = Instant::now();
        let mut st = self.lock();
        if st.phase == Phase::Failed || st.closed {
            return None;
        }
        st.last_used = now;
        // A server still stopping (idle) is replaced at once: the old process's messages and
        // exit belong to an older run and are ignored.
        if matches!(st.phase, Phase::Stopped | Phase::Stopping) {
            self.start(&mut st);
            if st.phase == Phase::Failed {
                return None;
            }
        }
        let mut changed = false;
        if let Some((text, disk)) = content {
            let hash = crate::text::hash(text.as_bytes());
            match st.docs.get_mut(path) {
                Some(d) if d.hash == hash => d.disk = disk,
                _ => {
                    st.last_version += 1;
                    st.epoch += 1;
                    let version = st.last_version;
                    let d = st.docs.entry(path.to_path_buf()).or_insert_with(|| Doc {
                        uri: crate::files::file_uri(path),
                        text: String::new(),
                        hash: 0,
                        disk: None,
                        version: 0,
                        open: false,
                        used: now,
                        push: None,
                        pull: None,
                        pull_again: false,
                        pull_parts: Vec::new(),
                        final_version: 0,
                        final_epoch: 0,
                    });
                    (d.text, d.hash, d.disk, d.version, d.push) = (text, hash, disk, version, None);
                    changed = true;
                }
            }
        }
        let Some(d) = st.docs.get_mut(path) else {
            // Nothing known and nothing read: the file vanished between stat and read.
            return None;
        };
        d.used = now;
        if changed && st.phase == Phase::Running {
            self.sync(&mut st, path);
        }
        let (pulls, epoch) = (st.pull.is_some(), st.epoch);
        if let Some(d) = st.docs.get_mut(path)
            && pulls
            && !changed
            && d.final_epoch < epoch
        {
            // Other files changed since this one's last result: ask again, since the server
            // answers pulls only when asked.
            d.pull_again = true;
        }
        self.close_least_recent(&mut st, path);
        let d = &st.docs[path];
        let ticket = Ticket {
            server: self.clone(),
            path: path.to_path_buf(),
            version: d.version,
            epoch: if pulls { st.epoch } else { 0 },
        };
        self.advance_and_finish(st, true);
        Some(ticket)
    }

    /// Sends the document's current text (didOpen or didChange) and asks for its diagnostics
    /// if the server is pulled.
    fn sync(&self, st: &mut State, path: &Path) {
        let d = st.docs.get_mut(path).expect("synced document");
        let msg = if d.open {
            rpc::notification(
                "textDocument/didChange",
                json!({"textDocument": {"uri": d.uri, "version": d.version},
                       "contentChanges": [{"text": d.text}]}),
            )
        } else {
            d.open = true;
            rpc::notification(
                "textDocument/didOpen",
                json!({"textDocument": {"uri": d.uri, "version": d.version,
                       "languageId": crate::files::language_id(path), "text": d.text}}),
            )
        };
        d.push = None;
        d.pull_again = st.pull.is_some();
        send(st, msg);
    }

    /// Closes the least recently used documents beyond the bound, so a server's memory stays
    /// bounded however many files diagnostics are asked for. Their last final results stay in
    /// the store.
    fn close_least_recent(&self, st: &mut State, keep: &Path) {
        while st.docs.len() > self.cfg.max_open.max(1) {
            let Some(oldest) = st
                .docs
                .iter()
                .filter(|(p, _)| p.as_path() != keep)
                .min_by_key(|(_, d)| d.used)
                .map(|(p, _)| p.clone())
            else {
                return;
            };
            let d = st.docs.remove(&oldest).expect("listed document");
            if d.open {
                crate::log::debug!(
                    "{}: closing {} (least recently used)",
                    self.name,
                    oldest.display()
                );
                send(
                    st,
                    rpc::notification(
                        "textDocument/didClose",
                        json!({"textDocument": {"uri": d.uri}}),
                    ),
                );
            }
        }
    }

    /// The file is gone: close it, and its diagnostics are now none.
    fn forget(self: &Arc<Self>, path: &Path) -> Option<Ticket> {
        let mut st = self.lock();
        if let Some(d) = st.docs.remove(path) {
            if d.open {
                send(
                    &st,
                    rpc::notification(
                        "textDocument/didClose",
                        json!({"textDocument": {"uri": d.uri}}),
                    ),
                );
            }
            self.finish(st, vec![(path.to_path_buf(), Vec::new())]);
        }
        None
    }

    /// `workspace/didChangeWatchedFiles`, to a running server that registered for it. Pulled
    /// results of open files count as older than the change either way (servers such as
    /// tsserver watch files themselves).
    pub fn files_changed(self: &Arc<Self>, changes: &[Value]) {
        let mut st = self.lock();
        if st.phase != Phase::Running {
            return;
        }
        st.epoch += 1;
        if st.watch_registrations.is_empty() {
            return;
        }
        send(
            &st,
            rpc::notification(
                "workspace/didChangeWatchedFiles",
                json!({"changes": changes}),
            ),
        );
    }

    pub fn warm(self: &Arc<Self>) {
        let mut st = self.lock();
        if st.phase == Phase::Stopped && !st.closed {
            st.last_used = Instant::now();
            self.start(&mut st);
            self.advance_and_finish(st, true);
        }
    }

    fn start(self: &Arc<Self>, st: &mut State) {
        st.run += 1;
        let cwd = self
            .workspaces
            .first()
            .map_or(Path::new("/"), |w| w.as_path());
        match process::spawn(self, st.run, &self.words, cwd) {
            Ok((pid, tx)) => {
                crate::log::info!(
                    "language server {} started (pid {pid}): {}",
                    self.name,
                    self.words.join(" ")
                );
                st.tx = Some(tx);
                st.pid = Some(pid);
                st.phase = Phase::Starting;
                st.started = Instant::now();
                st.utf16 = true;
                st.pull = None;
                st.pull_registration = None;
                st.watch_registrations.clear();
                st.progress.clear();
                st.pending.clear();
                st.pull_retry_at = None;
                st.killed_because = None;
                st.stderr_tail.clear();
                let folders: Vec<Value> = self.workspaces.iter().map(|w| folder(w)).collect();
                let root = self.workspaces.first().map(|w| crate::files::file_uri(w));
                let params = json!({
                    "processId": std::process::id(),
                    "clientInfo": {"name": "ccide", "version": env!("CARGO_PKG_VERSION")},
                    "rootUri": root,
                    "rootPath": self.workspaces.first(),
                    "workspaceFolders": folders,
                    "capabilities": capabilities(),
                    "trace": "off",
                });
                request(st, "initialize", params, Pending::Initialize);
            }
            Err(e) => {
                crate::log::warn!("language server {}: {e}; not used", self.name);
                st.phase = Phase::Failed;
                st.last_error = Some(e);
            }
        }
    }

    fn stop(&self, st: &mut State, why: &str) {
        st.docs.clear();
        if matches!(st.phase, Phase::Starting | Phase::Running) && st.tx.is_some() {
            crate::log::info!("stopping language server {} ({why})", self.name);
            st.phase = Phase::Stopping;
            let id = st.next_id + 1;
            st.next_id = id;
            st.pending.insert(id, Pending::Shutdown);
            let req = rpc::request(&RequestId::number(id), "shutdown", None);
            if let Some(tx) = &st.tx {
                tx.push(ToProc::Stop(req));
            }
        } else if st.phase != Phase::Stopping {
            st.phase = if st.phase == Phase::Failed {
                Phase::Failed
            } else {
                Phase::Stopped
            };
        }
    }

    /// For ccide's own shutdown: stop, and take no more work.
    pub fn close(&self) {
        let mut st = self.lock();
        st.closed = true;
        self.stop(&mut st, "ccide is stopping");
        self.cv.notify_all();
    }

    /// Waits until the process is gone, at most until `deadline`; true if it is.
    pub fn wait_gone(&self, deadline: Instant) -> bool {
        let mut st = self.lock();
        while st.tx.is_some() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            st = self.cv.wait_timeout(st, left).unwrap().0;
        }
        true
    }

    pub fn kill_now(&self) {
        if let Some(pid) = self.lock().pid {
            crate::proc::kill_tree(pid);
        }
    }

    /// Time-driven transitions, for the clock thread; returns when the next one is due.
    pub fn tick(self: &Arc<Self>) -> Option<Instant> {
        let st = self.lock();
        self.advance_and_finish(st, false)
    }

    /// Runs the transitions due now, hands out what became final, and says when to look
    /// again; `poke` tells the clock thread about that time.
    fn advance_and_finish(
        self: &Arc<Self>,
        mut st: MutexGuard<'_, State>,
        poke: bool,
    ) -> Option<Instant> {
        let mut finals = Vec::new();
        let next = self.advance(&mut st, &mut finals);
        if poke && next.is_some() {
            self.clock.poke();
        }
        self.finish(st, finals);
        next
    }

    fn advance(self: &Arc<Self>, st: &mut State, finals: &mut Finals) -> Option<Instant> {
        let now = Instant::now();
        let mut next: Option<Instant> = None;
        let mut due = |t: Instant| next = Some(next.map_or(t, |n| n.min(t)));
        if st.closed {
            return None;
        }
        match st.phase {
            Phase::Starting => {
                let limit = st.started + self.cfg.init_timeout;
                if now >= limit {
                    // Taken, so this happens once; its exit then counts as a crash.
                    if let Some(pid) = st.pid.take() {
                        let e = format!(
                            "no answer to initialize within {}",
                            crate::text::human_duration(self.cfg.init_timeout)
                        );
                        crate::log::warn!("language server {}: {e}; killing it", self.name);
                        st.killed_because = Some(e);
                        crate::proc::kill_tree(pid);
                    }
                } else {
                    due(limit);
                }
            }
            Phase::Crashed if !st.docs.is_empty() => {
                if now >= st.retry_at {
                    st.restarts += 1;
                    self.start(st);
                    if st.phase == Phase::Starting {
                        due(st.started + self.cfg.init_timeout);
                    }
                } else {
                    due(st.retry_at);
                }
            }
            Phase::Running => {
                if let Some(t) = busy_until(st, now) {
                    // Results wait for the work to end ($/progress end pokes the clock).
                    due(t);
                } else {
                    self.settle_pushes(st, now, finals, &mut due);
                    match st.pull_retry_at {
                        Some(t) if t > now => due(t),
                        _ => {
                            st.pull_retry_at = None;
                            self.send_wanted_pulls(st);
                        }
                    }
                }
            }
            _ => {}
        }
        // A crashed server nobody asked anything of for that long stays down too.
        if matches!(st.phase, Phase::Starting | Phase::Running | Phase::Crashed) {
            let idle_end = st.last_used + self.cfg.idle;
            if now >= idle_end {
                self.stop(
                    st,
                    &format!("unused for {}", crate::text::human_duration(self.cfg.idle)),
                );
            } else {
                due(idle_end);
            }
        }
        next
    }

    /// Push: the last publish for a document's current version is final once no other has
    /// come for the quiet period (servers publish syntax before semantics) and no work is in
    /// progress (checked by the caller).
    fn settle_pushes(
        &self,
        st: &mut State,
        now: Instant,
        finals: &mut Finals,
        due: &mut impl FnMut(Instant),
    ) {
        let (utf16, epoch, settled_at) = (st.utf16, st.epoch, st.settled_at);
        for (path, d) in st.docs.iter_mut() {
            let Some((_, at)) = &d.push else { continue };
            let ready_at = (*at).max(settled_at) + self.cfg.quiet;
            if now < ready_at {
                due(ready_at);
                continue;
            }
            let (items, _) = d.push.take().expect("checked above");
            finals.push((
                path.clone(),
                convert::diagnostics(&items, path, &d.text, utf16, &self.name),
            ));
            (d.final_version, d.final_epoch) = (d.version, epoch);
        }
    }

    fn send_wanted_pulls(&self, st: &mut State) {
        let Some(pull) = st.pull.clone() else {
            return;
        };
        let wanted: Vec<PathBuf> = st
            .docs
            .iter()
            .filter(|(_, d)| d.open && d.pull.is_none() && d.pull_again)
            .map(|(p, _)| p.clone())
            .collect();
        for path in wanted {
            let epoch = st.epoch;
            let d = st.docs.get_mut(&path).expect("listed document");
            d.pull_again = false;
            d.pull_parts.clear();
            let (uri, version) = (d.uri.clone(), d.version);
            let pending = |part| Pending::Pull {
                path: path.clone(),
                version,
                epoch,
                part,
            };
            let last = match &pull {
                Pull::Lsp(identifier) => {
                    let mut params = json!({"textDocument": {"uri": uri}});
                    if let Some(i) = identifier {
                        params["identifier"] = i.clone().into();
                    }
                    request(st, "textDocument/diagnostic", params, pending(0))
                }
                Pull::Tsserver => {
                    let mut last = 0;
                    for (i, command) in TSSERVER_PARTS.iter().enumerate() {
                        let params = json!({"command": "typescript.tsserverRequest",
                                            "arguments": [command, {"file": uri}]});
                        last = request(st, "workspace/executeCommand", params, pending(i + 1));
                    }
                    last
                }
            };
            if let Some(d) = st.docs.get_mut(&path) {
                d.pull = Some((last, epoch));
            }
        }
    }

    /// Wakes waiters, then hands `finals` to the sink without the state lock, in order.
    fn finish(&self, st: MutexGuard<'_, State>, finals: Finals) {
        self.cv.notify_all();
        if finals.is_empty() {
            return;
        }
        let order = self.delivering.lock().unwrap_or_else(|e| e.into_inner());
        drop(st);
        for (p, ds) in finals {
            crate::log::debug!(
                "{}: {} final diagnostic(s) for {}",
                self.name,
                ds.len(),
                p.display()
            );
            (self.sink)(&self.origin, &p, ds);
        }
        drop(order);
    }

    pub fn on_stderr(&self, run: u64, line: &str) {
        crate::log::debug!("{}: {line}", self.name);
        let mut st = self.lock();
        if st.run == run {
            if st.stderr_tail.len() == STDERR_TAIL {
                st.stderr_tail.pop_front();
            }
            st.stderr_tail.push_back(line.chars().take(300).collect());
        }
    }

    pub fn on_message(self: &Arc<Self>, run: u64, v: Value) {
        let mut st = self.lock();
        if st.run != run || st.tx.is_none() {
            return;
        }
        let mut finals = Vec::new();
        match rpc::classify(v) {
            Ok(rpc::Message::Request(r)) => {
                let answer = self.answer(&mut st, &r.method, &r.params);
                send(&st, rpc::response(&r.id, answer));
            }
            Ok(rpc::Message::Notification(n)) => self.on_notification(&mut st, &n.method, n.params),
            Ok(rpc::Message::Response(r)) => self.on_response(&mut st, r, &mut finals),
            Err(e) => crate::log::debug!("{}: invalid message: {e}", self.name),
        }
        let next = self.advance(&mut st, &mut finals);
        if next.is_some() {
            self.clock.poke();
        }
        self.finish(st, finals);
    }

    fn on_response(self: &Arc<Self>, st: &mut State, r: rpc::Response, finals: &mut Finals) {
        let Some(id) = r.id.as_ref().and_then(RequestId::as_u64) else {
            return;
        };
        let Some(pending) = st.pending.remove(&id) else {
            return;
        };
        let result = r.result;
        match pending {
            Pending::Initialize => match result {
                Ok(r) => self.initialized(st, &r),
                Err(e) => {
                    let e = format!("initialize failed: {}", e.message);
                    crate::log::warn!("language server {}: {e}; not used", self.name);
                    st.last_error = Some(e);
                    self.stop(st, "initialize failed");
                    st.phase = Phase::Failed;
                }
            },
            Pending::Shutdown => {
                if let Some(tx) = &st.tx {
                    tx.push(ToProc::ShutdownAck);
                }
            }
            Pending::Pull {
                path,
                version,
                epoch,
                part,
            } => self.on_pull_answer(st, id, &path, version, epoch, part, result, finals),
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn on_pull_answer(
        &self,
        st: &mut State,
        id: u64,
        path: &Path,
        version: i32,
        epoch: u64,
        part: usize,
        result: Result<Value, rpc::ResponseError>,
        finals: &mut Finals,
    ) {
        // tsserver reports its own failures inside a successful answer.
        let result = match result {
            Ok(r) if part > 0 && r["success"] != true => Err(rpc::ResponseError {
                code: 0,
                message: r["message"].as_str().unwrap_or("?").to_string(),
                data: None,
            }),
            r => r,
        };
        let busy = busy_until(st, Instant::now()).is_some();
        let utf16 = st.utf16;
        if st.pull.is_none() {
            return;
        }
        let Some(d) = st.docs.get_mut(path) else {
            return;
        };
        let last = d.pull.is_some_and(|(p, _)| p == id);
        if last {
            d.pull = None;
        }
        crate::log::debug!(
            "{}: pull answer {part} for {} (version {version}, now {}{}): {}",
            self.name,
            path.display(),
            d.version,
            if busy { ", busy" } else { "" },
            match &result {
                Ok(r) => format!(
                    "{} item(s)",
                    r["items"]
                        .as_array()
                        .or(r["body"].as_array())
                        .map_or(0, Vec::len)
                ),
                Err(e) => format!("error {} {}", e.code, e.message),
            }
        );
        match result {
            // Stale: a newer version's pull is (or will be) on its way.
            _ if version != d.version => {}
            Ok(r) if part > 0 => {
                let body = r["body"].as_array().map_or(&[][..], |a| a.as_slice());
                d.pull_parts.extend(body.iter().map(convert::from_tsserver));
                if !last {
                    return;
                }
                let items = std::mem::take(&mut d.pull_parts);
                if busy {
                    d.pull_again = true;
                } else {
                    finals.push((
                        path.to_path_buf(),
                        convert::diagnostics(&items, path, &d.text, utf16, &self.name),
                    ));
                    (d.final_version, d.final_epoch) = (version, epoch);
                }
            }
            // rust-analyzer answers 0 items while it loads the workspace (LSP.md): an answer
            // given during work in progress is asked again after it.
            Ok(_) if busy => d.pull_again = true,
            Ok(r) => {
                // "unchanged" only answers a previousResultId, which ccide never sends.
                if r["kind"] != "unchanged" {
                    let items = r["items"].as_array().map_or(&[][..], |a| a.as_slice());
                    finals.push((
                        path.to_path_buf(),
                        convert::diagnostics(items, path, &d.text, utf16, &self.name),
                    ));
                }
                (d.final_version, d.final_epoch) = (version, epoch);
            }
            Err(e) => {
                // Cancelled by the server, or the content changed under it: ask again soon.
                if e.is_retryable() {
                    d.pull_again = true;
                    st.pull_retry_at = Some(Instant::now() + PULL_RETRY);
                } else {
                    crate::log::warn!(
                        "language server {}: asking for diagnostics failed ({}); using its published diagnostics instead",
                        self.name,
                        e.message
                    );
                    st.pull = None;
                }
            }
        }
    }

    fn initialized(&self, st: &mut State, r: &Value) {
        let caps = &r["capabilities"];
        st.utf16 = caps["positionEncoding"] != "utf-32";
        let commands = caps["executeCommandProvider"]["commands"].as_array();
        if let Some(p) = caps.get("diagnosticProvider").filter(|p| p.is_object()) {
            st.pull = Some(Pull::Lsp(p["identifier"].as_str().map(str::to_string)));
        } else if commands.is_some_and(|c| c.iter().any(|c| c == "typescript.tsserverRequest")) {
            st.pull = Some(Pull::Tsserver);
        }
        st.server_info = [&r["serverInfo"]["name"], &r["serverInfo"]["version"]]
            .iter()
            .filter_map(|v| v.as_str())
            .collect::<Vec<_>>()
            .join(" ");
        send(st, rpc::notification("initialized", json!({})));
        st.phase = Phase::Running;
        crate::log::info!(
            "language server {} ready after {} ({}; diagnostics by {}; columns in {})",
            self.name,
            crate::text::human_duration(st.started.elapsed()),
            if st.server_info.is_empty() {
                "no serverInfo"
            } else {
                &st.server_info
            },
            pull_kind(&st.pull),
            if st.utf16 { "UTF-16" } else { "UTF-32" }
        );
        let paths: Vec<PathBuf> = st.docs.keys().cloned().collect();
        for p in paths {
            self.sync(st, &p);
        }
    }

    /// Answers a request from the server. Each gets an answer, since several servers wait for
    /// one before going on (LSP.md).
    fn answer(&self, st: &mut State, method: &str, params: &Value) -> Result<Value, RpcError> {
        match method {
            // No settings of ours: null per item means "use your defaults".
            "workspace/configuration" => {
                let n = params["items"].as_array().map_or(0, Vec::len);
                Ok(Value::Array(vec![Value::Null; n]))
            }
            "client/registerCapability" => {
                for r in params["registrations"].as_array().into_iter().flatten() {
                    let id = r["id"].as_str().unwrap_or_default().to_string();
                    match r["method"].as_str() {
                        Some("textDocument/diagnostic") => {
                            let identifier = r["registerOptions"]["identifier"].as_str();
                            st.pull = Some(Pull::Lsp(identifier.map(str::to_string)));
                            st.pull_registration = Some(id);
                            // Documents opened before this registration are pulled now, and
                            // what they had published no longer counts.
                            for d in st.docs.values_mut() {
                                d.pull_again |= d.final_version != d.version;
                                d.push = None;
                            }
                        }
                        Some("workspace/didChangeWatchedFiles") => st.watch_registrations.push(id),
                        _ => {}
                    }
                }
                Ok(Value::Null)
            }
            "client/unregisterCapability" => {
                // The field name's misspelling is the protocol's own.
                for u in params["unregisterations"].as_array().into_iter().flatten() {
                    let id = u["id"].as_str().unwrap_or_default();
                    if st.pull_registration.as_deref() == Some(id) {
                        st.pull = None;
                        st.pull_registration = None;
                    }
                    st.watch_registrations.retain(|w| w != id);
                }
                Ok(Value::Null)
            }
            "workspace/workspaceFolders" => Ok(Value::Array(
                self.workspaces.iter().map(|w| folder(w)).collect(),
            )),
            "workspace/diagnostic/refresh" => {
                for d in st.docs.values_mut() {
                    d.pull_again = true;
                }
                Ok(Value::Null)
            }
            "window/workDoneProgress/create" | "window/showMessageRequest" => Ok(Value::Null),
            "window/showDocument" => Ok(json!({"success": false})),
            "workspace/applyEdit" => Ok(json!({"applied": false,
                "failureReason": "ccide applies no edits from language servers"})),
            m if m.starts_with("workspace/") && m.ends_with("/refresh") => Ok(Value::Null),
            _ => Err(RpcError::new(
                ErrorCode::MethodNotFound,
                format!("ccide does not handle {method}"),
            )),
        }
    }

    fn on_notification(&self, st: &mut State, method: &str, mut params: Value) {
        match method {
            "textDocument/publishDiagnostics" => {
                // A pulled server's pushes are ignored: one source of truth per server.
                if st.pull.is_some() {
                    return;
                }
                let Some(path) = params["uri"]
                    .as_str()
                    .and_then(|u| crate::files::uri_path(u, true))
                else {
                    return;
                };
                let Some(d) = st.docs.get_mut(&path).filter(|d| d.open) else {
                    return;
                };
                // typescript-language-server sends no version: its publish is taken for the
                // version last sent.
                if params["version"]
                    .as_i64()
                    .is_some_and(|v| v != d.version as i64)
                {
                    return;
                }
                let items = match params["diagnostics"].take() {
                    Value::Array(a) => a,
                    _ => Vec::new(),
                };
                crate::log::debug!(
                    "{}: published {} item(s) for {} (version {}, sent {})",
                    self.name,
                    items.len(),
                    path.display(),
                    params["version"],
                    d.version
                );
                d.push = Some((items, Instant::now()));
            }
            "$/progress" => {
                let token = params["token"].to_string();
                match params["value"]["kind"].as_str() {
                    Some("begin") => {
                        st.progress.insert(token, Instant::now());
                    }
                    Some("end")
                        if st.progress.remove(&token).is_some() && st.progress.is_empty() =>
                    {
                        st.settled_at = Instant::now();
                    }
                    _ => {}
                }
            }
            "window/logMessage" | "window/showMessage" => {
                let text = params["message"].as_str().unwrap_or_default();
                if method == "window/showMessage" && params["type"] == 1 {
                    crate::log::warn!("language server {}: {text}", self.name);
                } else {
                    crate::log::debug!("{}: {text}", self.name);
                }
            }
            _ => {}
        }
    }

    /// Called by the process thread just before it reaps the leader.
    pub fn process_ending(&self, run: u64) {
        let mut st = self.lock();
        if st.run == run {
            st.pid = None;
        }
    }

    pub fn process_exited(self: &Arc<Self>, run: u64, how: &str) {
        let mut st = self.lock();
        if st.run != run {
            return;
        }
        st.tx = None;
        st.pid = None;
        let how = match st.killed_because.take() {
            Some(why) => format!("killed: {why}"),
            None => how.to_string(),
        };
        let was_initialized = st.phase != Phase::Starting;
        match st.phase {
            Phase::Stopping | Phase::Stopped => {
                st.phase = Phase::Stopped;
                crate::log::info!("language server {} stopped", self.name);
            }
            Phase::Failed => {}
            _ => {
                let now = Instant::now();
                if now - st.started >= self.cfg.backoff_max {
                    st.crashes = 0;
                }
                st.crashes += 1;
                let tail: Vec<&str> = st.stderr_tail.iter().map(String::as_str).collect();
                let tail = if tail.is_empty() {
                    String::new()
                } else {
                    format!("; its last words: {}", tail.join(" | "))
                };
                if !was_initialized && st.crashes >= 3 {
                    let e = format!("exited before answering initialize, 3 times ({how}){tail}");
                    crate::log::warn!("language server {}: {e}; not used", self.name);
                    st.last_error = Some(e);
                    st.phase = Phase::Failed;
                } else {
                    let shift = (st.crashes - 1).min(16);
                    let delay = (self.cfg.backoff_min * (1u32 << shift)).min(self.cfg.backoff_max);
                    st.retry_at = now + delay;
                    st.last_error = Some(format!("exited ({how}){tail}"));
                    st.phase = Phase::Crashed;
                    crate::log::warn!(
                        "language server {} exited unexpectedly ({how}); restarting in {}{tail}",
                        self.name,
                        crate::text::human_duration(delay)
                    );
                }
            }
        }
        for d in st.docs.values_mut() {
            d.open = false;
            d.push = None;
            d.pull = None;
        }
        st.progress.clear();
        st.pending.clear();
        self.clock.poke();
        self.cv.notify_all();
    }

    pub fn status(&self) -> Value {
        let st = self.lock();
        let state = match st.phase {
            Phase::Stopped => "stopped",
            Phase::Stopping => "stopping",
            Phase::Starting => "starting",
            Phase::Running if !st.progress.is_empty() => "indexing",
            Phase::Running => "ready",
            Phase::Crashed => "crashed",
            Phase::Failed => "failed",
        };
        let pid = st.pid;
        let mut v = json!({
            "name": self.name,
            "origin": self.origin,
            "command": self.words.join(" "),
            "patterns": self.patterns,
            "state": state,
            "pid": pid,
            "open_documents": st.docs.values().filter(|d| d.open).count(),
            "restarts": st.restarts,
            "diagnostics": pull_kind(&st.pull),
        });
        if !st.server_info.is_empty() {
            v["server"] = st.server_info.clone().into();
        }
        if let Some(e) = &st.last_error {
            v["last_error"] = e.clone().into();
        }
        drop(st);
        if let Some(pid) = pid {
            v["rss_kib"] = crate::proc::rss_kib(pid).into();
        }
        v
    }
}

impl Ticket {
    fn satisfied(&self, st: &State) -> bool {
        if st.closed || matches!(st.phase, Phase::Failed | Phase::Stopped | Phase::Stopping) {
            return true;
        }
        st.docs
            .get(&self.path)
            .is_none_or(|d| d.final_version >= self.version && d.final_epoch >= self.epoch)
    }

    /// Waits until the result this ticket names is final, at most until `deadline`.
    pub fn wait_until(&self, deadline: Instant) -> bool {
        let s = &self.server;
        let mut st = s.lock();
        while !self.satisfied(&st) {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            st = s.cv.wait_timeout(st, left).unwrap().0;
        }
        drop(st);
        // The result is final in the state; wait until the sink has it too (`finish` holds
        // this lock from before it releases the state until the sink returns).
        drop(s.delivering.lock());
        true
    }
}

fn pull_kind(p: &Option<Pull>) -> &'static str {
    match p {
        Some(Pull::Lsp(_)) => "pull",
        Some(Pull::Tsserver) => "tsserver",
        None => "push",
    }
}

/// While work is in progress (and not for longer than the gate allows), results wait.
fn busy_until(st: &State, now: Instant) -> Option<Instant> {
    st.progress
        .values()
        .map(|t| *t + PROGRESS_GATE_MAX)
        .filter(|t| *t > now)
        .max()
}

fn send(st: &State, v: Value) {
    if let Some(tx) = &st.tx {
        tx.push(ToProc::Send(v));
    }
}

fn request(st: &mut State, method: &str, params: Value, pending: Pending) -> u64 {
    st.next_id += 1;
    let id = st.next_id;
    st.pending.insert(id, pending);
    send(
        st,
        rpc::request(&RequestId::number(id), method, Some(params)),
    );
    id
}

fn folder(w: &Path) -> Value {
    json!({"uri": crate::files::file_uri(w),
           "name": w.file_name().map(|n| n.to_string_lossy()).unwrap_or_default()})
}

/// What ccide does with what the server offers, and nothing more: diagnostics (pushed with
/// versions, or pulled), progress, configuration and watched files.
fn capabilities() -> Value {
    json!({
        "general": {"positionEncodings": ["utf-32", "utf-16"]},
        "window": {"workDoneProgress": true},
        "workspace": {
            "configuration": true,
            "workspaceFolders": true,
            "didChangeWatchedFiles": {"dynamicRegistration": true},
            "diagnostics": {"refreshSupport": true},
        },
        "textDocument": {
            "synchronization": {"dynamicRegistration": false},
            "publishDiagnostics": {"versionSupport": true},
            "diagnostic": {"dynamicRegistration": true},
        },
    })
}
