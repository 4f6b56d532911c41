//! One configured language server: the documents ccide keeps open in it (their text and
//! version, which ccide owns), the LSP conversation (initialize, the server's requests, document
//! sync, requests made on behalf of others), its process's life through the supervisor, and the
//! hand-over of final results (decided by `finality`) to the sink.
//!
//! All state sits behind one mutex. The driver thread (`LangServers`) hands in what the process
//! said (`handle`) and runs time-driven transitions (`tick_if_due`); callers take the lock
//! briefly for their own requests. Nothing waits on a process or a file under it: messages go
//! to the process's write queue, files are read before it is taken. What the lock decided to
//! hand out (final results, answers, the server's requests for someone else) is handed out
//! after it is released (`finish`); to keep final results in order, `finish` takes
//! `delivering` before it lets go, so it may wait there for another thread's sink (the store
//! writes each result to disk, outside the lock getDiagnostics answers from).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::finality::{Final, Finality, Pushes, Source};
use super::supervisor::{self, Event, Life, Phase, Process};
use crate::lsp::connection::{Received, SendError, Sender};
use crate::lsp::queue::Outgoing;
use crate::lsp::text::{Enc, Pos, Text, convert_column};
use crate::proc::Queue;
use crate::rpc::{self, ErrorCode, RequestId, ResponseError, RpcError};
use crate::workspaces::Workspaces;

#[derive(Clone, Debug)]
pub struct Config {
    /// A server unused this long is stopped (and started again when needed), unless someone
    /// holds a document open in it.
    pub idle: Duration,
    /// Documents kept open per server; the least recently used beyond are closed (held ones
    /// never).
    pub max_open: usize,
    /// A pushed result that may be partial is final when no different publish for the
    /// document came for this long.
    pub quiet: Duration,
    /// Restart delays after a crash: doubling from `backoff_min` up to `backoff_max`.
    pub backoff_min: Duration,
    pub backoff_max: Duration,
    /// A server that has not answered `initialize` by then is killed (and counts as crashed).
    pub init_timeout: Duration,
    /// What may wait to be written to a server; one that does not read is killed (and
    /// restarted).
    pub max_queued: usize,
    /// The user lets servers run what the workspace ships (`--trust-workspace`): the
    /// project's own TypeScript, and a built-in's process gets serve's PATH as it is
    /// (`trust::command`).
    pub trust_workspace: bool,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            idle: Duration::from_secs(30 * 60),
            max_open: 100,
            quiet: Duration::from_millis(300),
            backoff_min: Duration::from_secs(1),
            backoff_max: Duration::from_secs(60),
            init_timeout: Duration::from_secs(60),
            max_queued: 64 << 20,
            trust_workspace: false,
        }
    }
}

/// Receives each FINAL result, with the name of the server it comes from. It replaces that
/// server's earlier result for the file. Called without any lock of this module held, but it
/// must not call back into the language servers.
pub type Sink = Arc<dyn Fn(&str, Final) + Send + Sync>;

/// Receives the answer to a request sent with `Server::request` (an error if the server exited
/// first). Called on the driver thread, without any lock held.
pub type OnAnswer = Box<dyn FnOnce(Result<Value, ResponseError>) + Send>;

/// Receives the server's requests that ccide does not answer itself (`window/showMessageRequest`,
/// `window/showDocument`, methods ccide does not know): keep it (None) and `respond`, or give it
/// back (`Some`) to have ccide answer as it does alone. Called on the driver thread, without any
/// lock held.
pub type OnRequest = Arc<dyn Fn(ServerRequest) -> Option<ServerRequest> + Send + Sync>;

/// What the driver's inbox holds.
pub enum Inbound {
    /// From the process a server started (`run`), by the server's index.
    Event {
        server: usize,
        run: u64,
        event: Event,
    },
    /// Something became due sooner: look again.
    Wake,
    Quit,
}

/// A request from the server, handed to an `OnRequest`. Dropped without an answer, it is
/// answered as ccide answers it alone.
pub struct ServerRequest {
    pub method: String,
    pub params: Value,
    reply: Reply,
}

struct Reply {
    sender: Sender,
    id: RequestId,
    /// ccide's own answer, sent unless another is.
    default: Option<Result<Value, RpcError>>,
}

impl ServerRequest {
    pub fn respond(mut self, answer: Result<Value, RpcError>) {
        self.reply.default = None;
        let _ = self
            .reply
            .sender
            .send(&rpc::response(&self.reply.id, answer));
    }
}

impl Drop for Reply {
    fn drop(&mut self) {
        if let Some(answer) = self.default.take() {
            let _ = self.sender.send(&rpc::response(&self.id, answer));
        }
    }
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
    /// Who keeps it open (`hold`): never closed to make room while anyone does.
    holders: Vec<u64>,
}

/// A document closed to make room, or by an idle stop: enough to tell, without reading it,
/// whether getDiagnostics {} must open it again (it changed, or its result was not final).
#[derive(Clone)]
struct Gone {
    path: PathBuf,
    disk: Option<crate::files::Stamp>,
    hash: u64,
    version: i32,
    /// Its result for `version` was final.
    done: bool,
}

/// Closed documents remembered at most (the oldest are forgotten).
const MAX_GONE: usize = 4096;

/// What a request this side sent is for.
enum Pending {
    Initialize,
    Shutdown,
    /// One request of the pull `id` (finality's) about `path`.
    Pull {
        path: PathBuf,
        id: u64,
    },
    /// Sent on someone's behalf (`Server::request`), about the document of this uri.
    Client(OnAnswer, String),
}

/// What the lock decided to hand out once it is released.
enum Effect {
    Final(Final),
    Answer(OnAnswer, Result<Value, ResponseError>),
    Request(ServerRequest),
}

type Effects = Vec<Effect>;

struct State {
    life: Life,
    /// Which process the events belong to: bumped at every start.
    run: u64,
    process: Option<Process>,
    /// The answer to `initialize`, once there is one.
    init: Option<Value>,
    server_info: String,
    /// How the server counts positions (UTF-16 unless it insists otherwise).
    enc: Enc,
    fin: Finality,
    pull_registration: Option<String>,
    watch_registrations: Vec<String>,
    requests: Outgoing<Pending>,
    docs: HashMap<PathBuf, Doc>,
    /// Oldest first.
    gone: Vec<Gone>,
    /// This process handed out a final result: it loaded what it needs.
    delivered: bool,
    /// Versions count for the whole server, so each document's increase and a document
    /// closed and opened again never repeats a version a waiter is waiting for.
    last_version: i32,
    last_used: Instant,
    closed: bool,
    /// When `advance` wants to run next.
    due: Option<Instant>,
}

pub struct Server {
    /// The program's file name, e.g. `pyright-langserver`.
    pub name: String,
    pub words: Vec<String>,
    pub patterns: Vec<String>,
    /// A built-in (`Spec::builtin`).
    builtin: bool,
    /// Its place in the driver's list.
    index: usize,
    /// What a start announces (the folders of that moment) and `workspace/workspaceFolders`
    /// answers.
    workspaces: Arc<Workspaces>,
    cfg: Config,
    sink: Sink,
    inbox: Arc<Queue<Inbound>>,
    on_request: Mutex<Option<OnRequest>>,
    st: Mutex<State>,
    /// Notified whenever a result becomes final or the process changes state.
    cv: Condvar,
    /// Held while handing results to the sink, taken before the state lock is released, so
    /// two threads cannot deliver one file's results out of order.
    delivering: Mutex<()>,
    /// Held by `update` from reading a file's state until it is applied: two updates of one
    /// file (an editor's buffer and getDiagnostics reading the disk) would otherwise apply an
    /// older text as the newer version. Taken before `st`, never under it.
    updating: Mutex<()>,
    /// Tests: called in `update` between reading the file and applying what was read.
    #[cfg(test)]
    pub between_read_and_apply: Mutex<Option<Box<dyn FnOnce() + Send>>>,
    /// Tests: each start connects to a new in-memory server instead of running `words`.
    #[cfg(test)]
    pub memory: Mutex<Option<Arc<dyn Fn() -> crate::lsp::connection::Connection + Send + Sync>>>,
}

/// What a caller waits on: the final result of `version` of `path`, pulled no earlier than
/// `epoch`.
pub struct Ticket {
    server: Arc<Server>,
    path: PathBuf,
    version: i32,
    epoch: u64,
}

/// Files above this are not sent: servers hold every open document in memory.
const MAX_DOC_BYTES: u64 = 8 << 20;

/// typescript-language-server publishes nothing when a file's diagnostics stay empty, so a
/// clean edit never gets a result to call final; its `typescript.tsserverRequest` command asks
/// tsserver itself, and these three answers make a complete result (ccide-protocol(7) §11.4).
const TSSERVER_PARTS: [&str; 3] = [
    "syntacticDiagnosticsSync",
    "semanticDiagnosticsSync",
    "suggestionDiagnosticsSync",
];

impl Server {
    pub fn new(
        index: usize,
        (words, patterns, builtin): (Vec<String>, Vec<String>, bool),
        workspaces: Arc<Workspaces>,
        cfg: Config,
        sink: Sink,
        inbox: Arc<Queue<Inbound>>,
    ) -> Server {
        let now = Instant::now();
        Server {
            name: crate::pattern::program_name(&words[0]),
            words,
            patterns,
            builtin,
            index,
            workspaces,
            st: Mutex::new(State {
                life: Life::new(now),
                run: 0,
                process: None,
                init: None,
                server_info: String::new(),
                enc: Enc::Utf16,
                fin: Finality::new(cfg.quiet),
                pull_registration: None,
                watch_registrations: Vec::new(),
                requests: Outgoing::default(),
                docs: HashMap::new(),
                gone: Vec::new(),
                delivered: false,
                last_version: 0,
                last_used: now,
                closed: false,
                due: None,
            }),
            cfg,
            sink,
            inbox,
            on_request: Mutex::new(None),
            cv: Condvar::new(),
            delivering: Mutex::new(()),
            updating: Mutex::new(()),
            #[cfg(test)]
            between_read_and_apply: Mutex::new(None),
            #[cfg(test)]
            memory: Mutex::new(None),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether it is usable and delivering: not crashed since it last handed out a result (a
    /// server that crashes on every file delivers nothing, and the checker it silenced answers
    /// meanwhile).
    /// Its place in the list of a serve's servers: what names it for as long as the serve runs.
    pub fn index(&self) -> usize {
        self.index
    }

    pub fn delivering(&self) -> bool {
        let st = self.lock();
        st.life.phase != Phase::Failed && !st.closed && st.life.delivering
    }

    /// Tells the server about the current content of `path` (from disk, or `unsaved`) if it
    /// differs from what it has, starting it if needed, and returns what to wait on for the
    /// final result. None when the server is not usable, or the file is unreadable (then its
    /// diagnostics from this server are cleared).
    pub fn touch(self: &Arc<Self>, path: &Path, unsaved: Option<&str>) -> Option<Ticket> {
        self.update(path, unsaved, None, true)
    }

    /// For getDiagnostics {}: brings up to date what this server knows, not everything known
    /// elsewhere. Its documents cost a stat each when unchanged (and are not taken as wanted);
    /// a document it closed is opened again only if it changed since, or was closed before its
    /// result was final; a file it never had is not opened. Open documents go first, so a
    /// document opened again never pushes out one whose new result is awaited.
    pub fn refresh_known(
        self: &Arc<Self>,
        unsaved: &dyn Fn(&Path) -> Option<String>,
    ) -> Vec<Ticket> {
        let (open, gone): (Vec<PathBuf>, Vec<Gone>) = {
            let st = self.lock();
            if st.life.phase == Phase::Failed || st.closed {
                return Vec::new();
            }
            (st.docs.keys().cloned().collect(), st.gone.clone())
        };
        let mut tickets: Vec<Ticket> = Vec::new();
        for p in open {
            tickets.extend(self.update(&p, unsaved(&p).as_deref(), None, false));
        }
        for g in gone {
            let text = unsaved(&g.path);
            let same = match &text {
                Some(t) => g.disk.is_none() && g.hash == crate::text::hash(t.as_bytes()),
                None => g.disk.is_some() && g.disk == crate::files::stamp(&g.path),
            };
            if !(g.done && same) {
                tickets.extend(self.update(&g.path, text.as_deref(), None, true));
            }
        }
        tickets
    }

    /// `want`: the caller wants this file now (it becomes the most recently used, and the
    /// server's use counts); else only a change does.
    fn update(
        self: &Arc<Self>,
        path: &Path,
        unsaved: Option<&str>,
        holder: Option<u64>,
        want: bool,
    ) -> Option<Ticket> {
        let _updating = self.updating.lock().unwrap_or_else(|e| e.into_inner());
        let known = {
            let st = self.lock();
            if st.life.phase == Phase::Failed || st.closed {
                return None;
            }
            st.docs.get(path).map(|d| d.disk)
        };
        // Read outside the lock; an unchanged stamp spares the read.
        let content = match unsaved {
            Some(t) => Some((t.to_string(), None)),
            None => match crate::files::stamp(path) {
                None => return self.forget(path),
                Some(s) if known == Some(Some(s)) => None,
                Some(s) => match self.workspaces.read(path, MAX_DOC_BYTES) {
                    Ok(b) => Some((String::from_utf8_lossy(&b).into_owned(), Some(s))),
                    Err(e) if e.kind() == std::io::ErrorKind::FileTooLarge => {
                        crate::log::debug!("{}: {} {e}; not sent", self.name, path.display());
                        return None;
                    }
                    Err(_) => return self.forget(path),
                },
            },
        };
        #[cfg(test)]
        {
            let hook = self.between_read_and_apply.lock().unwrap().take();
            if let Some(f) = hook {
                f();
            }
        }
        let now = Instant::now();
        let mut st = self.lock();
        if st.life.phase == Phase::Failed || st.closed {
            return None;
        }
        if want {
            st.last_used = now;
        }
        let mut effects = Vec::new();
        // A server still stopping (idle) is replaced at once: the old process's events belong
        // to an older run and are ignored.
        if matches!(st.life.phase, Phase::Stopped | Phase::Stopping) {
            self.start(&mut st, &mut effects);
            if st.life.phase == Phase::Failed {
                self.finish(st, effects);
                return None;
            }
        }
        let mut changed = false;
        if let Some((text, disk)) = content {
            let hash = crate::text::hash(text.as_bytes());
            match st.docs.get_mut(path) {
                Some(d) if d.hash == hash => d.disk = disk,
                _ => {
                    st.gone.retain(|g| g.path != path);
                    st.last_used = now;
                    st.last_version += 1;
                    let version = st.last_version;
                    let d = st.docs.entry(path.to_path_buf()).or_insert_with(|| Doc {
                        uri: crate::files::file_uri(path),
                        text: String::new(),
                        hash: 0,
                        disk: None,
                        version: 0,
                        open: false,
                        used: now,
                        holders: Vec::new(),
                    });
                    (d.text, d.hash, d.disk, d.version) = (text, hash, disk, version);
                    changed = true;
                }
            }
        }
        let ticket = match st.docs.get_mut(path) {
            // Nothing known and nothing read: the file vanished between stat and read.
            None => None,
            Some(d) => {
                if want || changed {
                    d.used = now;
                }
                if let Some(h) = holder.filter(|h| !d.holders.contains(h)) {
                    d.holders.push(h);
                }
                let version = d.version;
                if changed {
                    st.fin.sent(path, version);
                    if st.life.phase == Phase::Running {
                        self.sync(&mut st, path);
                    }
                }
                let epoch = st.fin.touched(path);
                self.close_least_recent(&mut st, path);
                Some(Ticket {
                    server: self.clone(),
                    path: path.to_path_buf(),
                    version,
                    epoch,
                })
            }
        };
        self.advance_and_finish(st, effects, true);
        ticket
    }

    /// Sends the document's current text: didOpen, or didChange with the whole text.
    fn sync(&self, st: &mut State, path: &Path) {
        let Some(d) = st.docs.get_mut(path) else {
            return;
        };
        // Built field by field: smaller in the binary than `json!` (no serializer per type).
        let mut doc = Value::Object(Default::default());
        doc["uri"] = d.uri.clone().into();
        doc["version"] = d.version.into();
        let text: Value = d.text.clone().into();
        let mut params = Value::Object(Default::default());
        let method = if d.open {
            params["contentChanges"] = Value::Array(vec![Value::Object(Default::default())]);
            params["contentChanges"][0]["text"] = text;
            "textDocument/didChange"
        } else {
            d.open = true;
            doc["languageId"] = crate::files::language_id(path).into();
            doc["text"] = text;
            "textDocument/didOpen"
        };
        params["textDocument"] = doc;
        self.send(st, &rpc::notification(method, params));
    }

    /// Closes the least recently used documents nobody holds beyond the bound, so a server's
    /// memory stays bounded however many files diagnostics are asked for. Their last final
    /// results stay in the store. Never `keep` (the file being synced), and a document whose
    /// new result is awaited only when every other is awaited too: closed, it would never get
    /// that result.
    fn close_least_recent(&self, st: &mut State, keep: &Path) {
        while st.docs.len() > self.cfg.max_open.max(1) {
            let Some(oldest) = st
                .docs
                .iter()
                .filter(|(p, d)| p.as_path() != keep && d.holders.is_empty())
                .min_by_key(|(p, d)| (st.fin.awaited(p), d.used))
                .map(|(p, _)| p.clone())
            else {
                return;
            };
            crate::log::debug!(
                "{}: closing {} (least recently used)",
                self.name,
                oldest.display()
            );
            self.close_doc(st, &oldest);
        }
    }

    /// Forgets a document, remembering what it held (`Gone`).
    fn drop_doc(st: &mut State, path: &Path) -> Option<Doc> {
        let d = st.docs.remove(path)?;
        if st.gone.len() >= MAX_GONE {
            st.gone.remove(0);
        }
        let g = Gone {
            path: path.to_path_buf(),
            disk: d.disk,
            hash: d.hash,
            version: d.version,
            done: !st.fin.awaited(path),
        };
        st.gone.push(g);
        st.fin.closed(path);
        Some(d)
    }

    fn close_doc(&self, st: &mut State, path: &Path) -> Option<Doc> {
        let d = Self::drop_doc(st, path)?;
        if d.open {
            let mut params = Value::Null;
            params["textDocument"]["uri"] = d.uri.clone().into();
            self.send(st, &rpc::notification("textDocument/didClose", params));
        }
        Some(d)
    }

    /// The file is gone: close it, and its diagnostics are now none. Called by `update`,
    /// under `updating`.
    fn forget(self: &Arc<Self>, path: &Path) -> Option<Ticket> {
        let mut st = self.lock();
        let d = self.close_doc(&mut st, path);
        st.gone.retain(|g| g.path != path);
        if let Some(d) = d {
            let gone = Final {
                path: path.to_path_buf(),
                version: d.version,
                items: Vec::new(),
            };
            self.finish(st, vec![Effect::Final(gone)]);
        }
        None
    }

    /// `workspace/didChangeWatchedFiles`, to a running server that registered for it. Pulled
    /// results of open files count as older than the change either way (servers such as
    /// tsserver watch files themselves).
    pub fn files_changed(&self, changes: &[Value]) {
        let mut st = self.lock();
        if st.life.phase != Phase::Running {
            return;
        }
        st.fin.changed_elsewhere();
        if !st.watch_registrations.is_empty() {
            let mut params = Value::Null;
            params["changes"] = changes.into();
            let msg = rpc::notification("workspace/didChangeWatchedFiles", params);
            self.send(&mut st, &msg);
        }
    }

    /// Starts the server if it is not running.
    pub fn warm(self: &Arc<Self>) {
        let mut st = self.lock();
        if matches!(st.life.phase, Phase::Stopped | Phase::Stopping) && !st.closed {
            st.last_used = Instant::now();
            let mut effects = Vec::new();
            self.start(&mut st, &mut effects);
            self.advance_and_finish(st, effects, true);
        }
    }

    fn start(self: &Arc<Self>, st: &mut State, effects: &mut Effects) {
        st.run += 1;
        // The previous process's requests will never be answered.
        fail_requests(st, effects);
        let folders = self.workspaces.list();
        let program = Path::new(&self.words[0]);
        // A folder added since serve started may hold the built-in found then
        // (ccide-protocol(7) §14).
        let options = if self.builtin
            && !crate::trust::allowed(program, &folders, self.cfg.trust_workspace)
        {
            Err(format!(
                "{} lies inside a workspace folder and runs only with --trust-workspace",
                program.display()
            ))
        } else {
            super::profiles::initialization_options(
                &self.name,
                &self.words[0],
                &folders,
                self.cfg.trust_workspace,
            )
        };
        let options = match options {
            Ok(o) => o,
            Err(e) => {
                crate::log::warn!("language server {}: {e}; not used", self.name);
                st.life.phase = Phase::Failed;
                st.life.last_error = Some(e);
                return;
            }
        };
        let cwd = folders.first().map_or(Path::new("/"), |w| w.as_path());
        let (inbox, server, run) = (self.inbox.clone(), self.index, st.run);
        let deliver: crate::proc::Deliver<Event> = Arc::new(move |event| {
            inbox.push(Inbound::Event { server, run, event });
        });
        #[cfg(test)]
        let memory = self
            .memory
            .lock()
            .unwrap()
            .clone()
            .map(|m| supervisor::memory(m(), deliver.clone()));
        #[cfg(not(test))]
        let memory = None;
        let spawned = match memory {
            Some(p) => Ok(p),
            None => {
                // A built-in's process gets the workspace-free PATH (ccide-protocol(7) §14).
                let mut cmd = match self.builtin {
                    true => crate::trust::command(program, &folders, self.cfg.trust_workspace),
                    false => std::process::Command::new(&self.words[0]),
                };
                cmd.args(&self.words[1..]).current_dir(cwd);
                supervisor::spawn(cmd, self.cfg.max_queued, deliver)
            }
        };
        match spawned {
            Ok(p) => {
                crate::log::info!(
                    "language server {} started (pid {}): {}",
                    self.name,
                    p.pid().unwrap_or_default(),
                    self.words.join(" ")
                );
                st.process = Some(p);
                st.life.starting(Instant::now());
                st.init = None;
                st.delivered = false;
                st.enc = Enc::Utf16;
                st.fin.gone();
                st.fin.configure(Source::Push, Pushes::MayBePartial);
                st.pull_registration = None;
                st.watch_registrations.clear();
                for d in st.docs.values_mut() {
                    d.open = false;
                }
                let mut params: Value = serde_json::from_str(INITIALIZE).unwrap_or_default();
                params["processId"] = std::process::id().into();
                params["clientInfo"]["version"] = env!("CARGO_PKG_VERSION").into();
                params["rootUri"] = folders.first().map(|w| crate::files::file_uri(w)).into();
                params["rootPath"] = folders
                    .first()
                    .map(|w| w.to_string_lossy().into_owned())
                    .into();
                params["workspaceFolders"] = folders.iter().map(|w| folder(w)).collect();
                if let Some(o) = options {
                    params["initializationOptions"] = o;
                }
                self.send_request(st, "initialize", Some(params), Pending::Initialize);
            }
            Err(e) => {
                crate::log::warn!("language server {}: {e}; not used", self.name);
                st.life.phase = Phase::Failed;
                st.life.last_error = Some(e);
            }
        }
    }

    fn stop(&self, st: &mut State, why: &str) {
        let paths: Vec<PathBuf> = st.docs.keys().cloned().collect();
        for p in paths {
            Self::drop_doc(st, &p);
        }
        if matches!(st.life.phase, Phase::Starting | Phase::Running) && st.process.is_some() {
            crate::log::info!("stopping language server {} ({why})", self.name);
            st.life.phase = Phase::Stopping;
            st.life.stopping_because = Some(why.to_string());
            let id = st.requests.register(Pending::Shutdown);
            if let Some(p) = &st.process {
                p.stop(rpc::request(&id, "shutdown", None));
            }
        } else if !matches!(st.life.phase, Phase::Stopping | Phase::Failed) {
            st.life.phase = Phase::Stopped;
            st.life.stopped = Some(why.to_string());
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
        self.wait_for(deadline, |st| st.process.is_none().then_some(()))
            .is_some()
    }

    /// Waits until `done` has an answer about the state, at most until `deadline`; None if
    /// it had none by then. Every change of state that a waiter may want notifies `cv`.
    fn wait_for<R>(&self, deadline: Instant, done: impl Fn(&State) -> Option<R>) -> Option<R> {
        let mut st = self.lock();
        loop {
            if let Some(r) = done(&st) {
                return Some(r);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            st = self
                .cv
                .wait_timeout(st, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    pub fn kill_now(&self) {
        if let Some(p) = &self.lock().process {
            p.kill();
        }
    }

    /// Sends one message; a server that stopped reading (too much waits for it) is killed,
    /// and its exit says why.
    fn send(&self, st: &mut State, v: &Value) {
        let Some(p) = &st.process else {
            return;
        };
        if let Err(SendError::Full { queued }) = p.send(v)
            && st.life.killed_because.is_none()
        {
            let why = format!(
                "it stopped reading its input ({} waiting)",
                rpc::mib(queued)
            );
            crate::log::warn!("language server {}: {why}; killing it", self.name);
            st.life.killed_because = Some(why);
            p.kill();
        }
        // `Closed`: it is ending, and its `Exited` will say so.
    }

    fn send_request(
        &self,
        st: &mut State,
        method: &str,
        params: Option<Value>,
        pending: Pending,
    ) -> RequestId {
        let id = st.requests.register(pending);
        self.send(st, &rpc::request(&id, method, params));
        id
    }

    /// For the driver: what the process `run` reported.
    pub fn handle(self: &Arc<Self>, run: u64, event: Event) {
        let mut st = self.lock();
        if st.run != run {
            return;
        }
        let mut effects = Vec::new();
        match event {
            Event::Received(r) => self.received(&mut st, r, &mut effects),
            Event::Exited(how) => self.process_exited(&mut st, &how, &mut effects),
        }
        self.advance_and_finish(st, effects, false);
    }

    /// For the driver: runs what is due by `now`; returns when to come back.
    pub fn tick_if_due(self: &Arc<Self>, now: Instant) -> Option<Instant> {
        let st = self.lock();
        match st.due {
            Some(t) if t <= now => self.advance_and_finish(st, Vec::new(), false),
            due => due,
        }
    }

    /// Runs the transitions due now, hands out what was decided, and records when to look
    /// again (waking the driver if the caller is not the driver and that is sooner than the
    /// driver would look: it looks at `due` at the latest, and a later one it finds then).
    fn advance_and_finish(
        self: &Arc<Self>,
        mut st: MutexGuard<'_, State>,
        mut effects: Effects,
        wake: bool,
    ) -> Option<Instant> {
        let next = self.advance(&mut st, &mut effects);
        let sooner = next.is_some_and(|n| st.due.is_none_or(|d| n < d));
        st.due = next;
        if wake && sooner {
            self.inbox.push(Inbound::Wake);
        }
        self.finish(st, effects);
        next
    }

    fn advance(self: &Arc<Self>, st: &mut State, effects: &mut Effects) -> Option<Instant> {
        let now = Instant::now();
        let mut next: Option<Instant> = None;
        let mut due = |t: Instant| next = Some(next.map_or(t, |n| n.min(t)));
        if st.closed {
            return None;
        }
        match st.life.phase {
            Phase::Starting if st.life.killed_because.is_none() => {
                let limit = st.life.started + self.cfg.init_timeout;
                if now >= limit {
                    // Its exit then counts as a crash.
                    let e = format!(
                        "no answer to initialize within {}",
                        crate::text::human_duration(self.cfg.init_timeout)
                    );
                    crate::log::warn!("language server {}: {e}; killing it", self.name);
                    st.life.killed_because = Some(e);
                    if let Some(p) = &st.process {
                        p.kill();
                    }
                } else {
                    due(limit);
                }
            }
            Phase::Crashed if !st.docs.is_empty() => {
                if now >= st.life.retry_at {
                    st.life.restarts += 1;
                    self.start(st, effects);
                    if st.life.phase == Phase::Starting {
                        due(st.life.started + self.cfg.init_timeout);
                    }
                } else {
                    due(st.life.retry_at);
                }
            }
            Phase::Running => {
                let step = st.fin.tick(now);
                if !step.finals.is_empty() {
                    // Those waiting in `loaded` are woken by `finish`, which always follows.
                    st.delivered = true;
                    st.life.delivering = true;
                }
                effects.extend(step.finals.into_iter().map(Effect::Final));
                for pull in step.pulls {
                    self.send_pull(st, &pull.path, pull.id);
                }
                if let Some(t) = step.next {
                    due(t);
                }
            }
            _ => {}
        }
        // A crashed server nobody asked anything of for that long stays down too; one in which
        // someone holds a document stays up.
        let held = st.docs.values().any(|d| !d.holders.is_empty());
        if matches!(
            st.life.phase,
            Phase::Starting | Phase::Running | Phase::Crashed
        ) && !held
        {
            let idle_end = st.last_used + self.cfg.idle;
            if now >= idle_end {
                let why = format!("unused for {}", crate::text::human_duration(self.cfg.idle));
                self.stop(st, &why);
            } else {
                due(idle_end);
            }
        }
        next
    }

    fn send_pull(&self, st: &mut State, path: &Path, id: u64) {
        let Some(uri) = st.docs.get(path).filter(|d| d.open).map(|d| d.uri.clone()) else {
            return;
        };
        let pending = || Pending::Pull {
            path: path.to_path_buf(),
            id,
        };
        match st.fin.source().clone() {
            Source::Pull(identifier) => {
                let mut params = Value::Null;
                params["textDocument"]["uri"] = uri.into();
                if let Some(i) = identifier {
                    params["identifier"] = i.into();
                }
                self.send_request(st, "textDocument/diagnostic", Some(params), pending());
            }
            Source::Tsserver => {
                for command in TSSERVER_PARTS {
                    let mut file = Value::Null;
                    file["file"] = uri.as_str().into();
                    let mut params = Value::Null;
                    params["command"] = "typescript.tsserverRequest".into();
                    params["arguments"] = Value::Array(vec![command.into(), file]);
                    self.send_request(st, "workspace/executeCommand", Some(params), pending());
                }
            }
            Source::Push => {}
        }
    }

    /// Wakes waiters, then hands out what was decided without the state lock: final results
    /// in order (under `delivering`), then answers and the server's requests (which may call
    /// back into this server).
    fn finish(&self, st: MutexGuard<'_, State>, effects: Effects) {
        self.cv.notify_all();
        if effects.is_empty() {
            return;
        }
        let order = self.delivering.lock().unwrap_or_else(|e| e.into_inner());
        drop(st);
        let mut rest = Vec::new();
        for e in effects {
            match e {
                Effect::Final(f) => {
                    crate::log::debug!(
                        "{}: {} final diagnostic(s) for {} (version {})",
                        self.name,
                        f.items.len(),
                        f.path.display(),
                        f.version
                    );
                    (self.sink)(&self.name, f);
                }
                other => rest.push(other),
            }
        }
        drop(order);
        for e in rest {
            match e {
                Effect::Answer(on_answer, answer) => on_answer(answer),
                Effect::Request(req) => {
                    let handler = self
                        .on_request
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .clone();
                    // Given back, or nobody registered: dropped, it gets ccide's own answer.
                    if let Some(h) = handler {
                        let _ = h(req);
                    }
                }
                Effect::Final(_) => {}
            }
        }
    }

    fn received(&self, st: &mut State, r: Received, effects: &mut Effects) {
        if st.process.is_none() {
            return;
        }
        match r {
            Received::Message(rpc::Message::Request(r)) => self.on_request_from(st, r, effects),
            Received::Message(rpc::Message::Notification(n)) => {
                self.on_notification(st, &n.method, n.params)
            }
            Received::Message(rpc::Message::Response(r)) => self.on_response(st, r, effects),
            Received::Malformed(e) => {
                crate::log::debug!("{}: invalid message: {}", self.name, e["error"]["message"])
            }
            Received::Stderr(line) => {
                crate::log::debug!("{}: {line}", self.name);
                st.life.stderr(&line);
            }
            Received::Closed(why) => {
                if let Some(why) = why {
                    crate::log::warn!("language server {}: {why}", self.name);
                    st.life.killed_because.get_or_insert(why);
                }
            }
        }
    }

    fn on_response(&self, st: &mut State, r: rpc::Response, effects: &mut Effects) {
        let Some(pending) = r.id.as_ref().and_then(|id| st.requests.complete(id)) else {
            return;
        };
        match pending {
            Pending::Initialize => match r.result {
                Ok(v) => self.initialized(st, v),
                Err(e) => {
                    let e = format!("initialize failed: {}", e.message);
                    crate::log::warn!("language server {}: {e}; not used", self.name);
                    st.life.last_error = Some(e);
                    self.stop(st, "initialize failed");
                    st.life.phase = Phase::Failed;
                }
            },
            Pending::Shutdown => {
                if let Some(p) = &st.process {
                    p.shutdown_answered();
                }
            }
            Pending::Pull { path, id } => self.on_pull_answer(st, &path, id, r.result),
            Pending::Client(on_answer, asked) => {
                let mut result = r.result;
                if let Ok(v) = &mut result {
                    convert_positions(st, v, &asked, false);
                }
                effects.push(Effect::Answer(on_answer, result));
            }
        }
    }

    fn on_pull_answer(
        &self,
        st: &mut State,
        path: &Path,
        id: u64,
        result: Result<Value, ResponseError>,
    ) {
        let tsserver = *st.fin.source() == Source::Tsserver;
        let answer = match result {
            // tsserver reports its own failures inside a successful answer.
            Ok(r) if tsserver && r["success"] != true => Err(ResponseError {
                code: 0,
                message: r["message"].as_str().unwrap_or("?").to_string(),
                data: None,
            }),
            Ok(r) if tsserver => {
                Ok(Some(r["body"].as_array().map_or(Vec::new(), |b| {
                    b.iter().map(from_tsserver).collect()
                })))
            }
            // "unchanged" only answers a previousResultId, which ccide never sends.
            Ok(r) if r["kind"] == "unchanged" => Ok(None),
            Ok(mut r) => {
                let mut items = match r["items"].take() {
                    Value::Array(a) => a,
                    _ => Vec::new(),
                };
                if let Some(d) = st.docs.get(path) {
                    to_utf16(&mut items, &d.text, st.enc);
                }
                Ok(Some(items))
            }
            Err(e) => Err(e),
        };
        if let Err(e) = &answer {
            crate::log::debug!(
                "{}: pull for {} failed: {} {}",
                self.name,
                path.display(),
                e.code,
                e.message
            );
        }
        if let Err(e) = st.fin.answered(path, id, answer, Instant::now()) {
            crate::log::warn!(
                "language server {}: asking for diagnostics failed ({e}); using its published diagnostics instead",
                self.name
            );
        }
    }

    fn initialized(&self, st: &mut State, r: Value) {
        let caps = &r["capabilities"];
        st.enc = caps["positionEncoding"]
            .as_str()
            .and_then(Enc::from_name)
            .unwrap_or(Enc::Utf16);
        let commands = caps["executeCommandProvider"]["commands"].as_array();
        let source = if let Some(p) = caps.get("diagnosticProvider").filter(|p| p.is_object()) {
            Source::Pull(p["identifier"].as_str().map(str::to_string))
        } else if commands.is_some_and(|c| c.iter().any(|c| c == "typescript.tsserverRequest")) {
            Source::Tsserver
        } else {
            Source::Push
        };
        let info = &r["serverInfo"];
        let pushes = match info["name"].as_str() {
            // By the name in its `serverInfo` (ccide-protocol(7) §11.5).
            Some(n) if super::profiles::profile(n).is_some_and(|p| p.complete_pushes) => {
                Pushes::Complete
            }
            _ => Pushes::MayBePartial,
        };
        st.fin.configure(source, pushes);
        st.server_info = [&info["name"], &info["version"]]
            .iter()
            .filter_map(|v| v.as_str())
            .collect::<Vec<_>>()
            .join(" ");
        let empty = Value::Object(Default::default());
        self.send(st, &rpc::notification("initialized", empty));
        st.life.phase = Phase::Running;
        crate::log::info!(
            "language server {} ready after {} ({}; diagnostics by {}{}; positions in {})",
            self.name,
            crate::text::human_duration(st.life.started.elapsed()),
            if st.server_info.is_empty() {
                "no serverInfo"
            } else {
                &st.server_info
            },
            st.fin.source().name(),
            if pushes == Pushes::Complete {
                ", each complete"
            } else {
                ""
            },
            st.enc.name()
        );
        st.init = Some(r);
        let paths: Vec<(PathBuf, i32)> = st
            .docs
            .iter()
            .map(|(p, d)| (p.clone(), d.version))
            .collect();
        for (p, version) in paths {
            st.fin.sent(&p, version);
            self.sync(st, &p);
        }
    }

    fn on_request_from(&self, st: &mut State, r: rpc::Request, effects: &mut Effects) {
        let (answer, ours) = self.answer(st, &r.method, &r.params);
        let has_handler = self
            .on_request
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some();
        match &st.process {
            Some(p) if !ours && has_handler => effects.push(Effect::Request(ServerRequest {
                method: r.method,
                params: r.params,
                reply: Reply {
                    sender: p.sender().clone(),
                    id: r.id,
                    default: Some(answer),
                },
            })),
            _ => self.send(st, &rpc::response(&r.id, answer)),
        }
    }

    /// ccide's answer to a request from the server, and whether it is ccide's business alone
    /// (else someone registered with `on_request` may answer instead). Each request gets an
    /// answer, since several servers wait for one before going on (ccide-protocol(7) §11.6).
    fn answer(
        &self,
        st: &mut State,
        method: &str,
        params: &Value,
    ) -> (Result<Value, RpcError>, bool) {
        let ours = match method {
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
                            st.fin
                                .set_source(Source::Pull(identifier.map(str::to_string)));
                            st.pull_registration = Some(id);
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
                        st.fin.set_source(Source::Push);
                        st.pull_registration = None;
                    }
                    st.watch_registrations.retain(|w| w != id);
                }
                Ok(Value::Null)
            }
            "workspace/workspaceFolders" => Ok(Value::Array(
                self.workspaces.list().iter().map(|w| folder(w)).collect(),
            )),
            "workspace/diagnostic/refresh" => {
                st.fin.refresh();
                Ok(Value::Null)
            }
            "window/workDoneProgress/create" => Ok(Value::Null),
            "workspace/applyEdit" => Ok(serde_json::from_str(
                r#"{"applied": false, "failureReason": "ccide applies no edits from language servers"}"#,
            )
            .unwrap_or_default()),
            m if m.starts_with("workspace/") && m.ends_with("/refresh") => Ok(Value::Null),
            "window/showMessageRequest" => return (Ok(Value::Null), false),
            "window/showDocument" => {
                let mut no = Value::Null;
                no["success"] = false.into();
                return (Ok(no), false);
            }
            _ => {
                return (
                    Err(RpcError::new(
                        ErrorCode::MethodNotFound,
                        format!("ccide does not handle {method}"),
                    )),
                    false,
                );
            }
        };
        (ours, true)
    }

    fn on_notification(&self, st: &mut State, method: &str, mut params: Value) {
        match method {
            "textDocument/publishDiagnostics" => {
                if st.fin.source().pulled() {
                    return;
                }
                let Some(path) = params["uri"]
                    .as_str()
                    .and_then(|u| crate::files::uri_path(u, true))
                else {
                    return;
                };
                let Some(d) = st.docs.get(&path).filter(|d| d.open) else {
                    return;
                };
                let mut items = match params["diagnostics"].take() {
                    Value::Array(a) => a,
                    _ => Vec::new(),
                };
                to_utf16(&mut items, &d.text, st.enc);
                crate::log::debug!(
                    "{}: published {} item(s) for {} (version {}, sent {})",
                    self.name,
                    items.len(),
                    path.display(),
                    params["version"],
                    d.version
                );
                st.fin
                    .pushed(&path, params["version"].as_i64(), items, Instant::now());
            }
            "$/progress" => {
                let token = params["token"].to_string();
                match params["value"]["kind"].as_str() {
                    Some("begin") => st.fin.progress(token, true, Instant::now()),
                    Some("end") => st.fin.progress(token, false, Instant::now()),
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

    fn process_exited(&self, st: &mut State, how: &str, effects: &mut Effects) {
        st.process = None;
        st.life.exited(
            &self.name,
            how,
            Instant::now(),
            (self.cfg.backoff_min, self.cfg.backoff_max),
        );
        for d in st.docs.values_mut() {
            d.open = false;
        }
        st.fin.gone();
        fail_requests(st, effects);
    }

    pub fn status(&self) -> Value {
        let st = self.lock();
        let state = match st.life.phase {
            Phase::Stopped => "stopped",
            Phase::Stopping => "stopping",
            Phase::Starting => "starting",
            Phase::Running if st.fin.progressing() => "indexing",
            // Opened documents, no result yet: a server loads the project on its first
            // document (tsserver's takes seconds), and answers after.
            Phase::Running if !st.delivered && !st.docs.is_empty() => "loading",
            Phase::Running => "ready",
            Phase::Crashed => "crashed",
            Phase::Failed => "failed",
        };
        // The process's, while it is not known to be reaped.
        let pid = st.process.as_ref().and_then(Process::pid);
        // Built field by field: smaller in the binary than `json!` (no serializer per type).
        let mut v = Value::Object(Default::default());
        v["name"] = self.name.clone().into();
        v["origin"] = super::registry::origin(&self.name).into();
        v["command"] = self.words.join(" ").into();
        v["patterns"] = self.patterns.clone().into();
        v["state"] = state.into();
        v["pid"] = pid.into();
        v["open_documents"] = st.docs.values().filter(|d| d.open).count().into();
        v["restarts"] = st.life.restarts.into();
        v["diagnostics"] = st.fin.source().name().into();
        if !st.server_info.is_empty() {
            v["server"] = st.server_info.clone().into();
        }
        if let Some(e) = &st.life.last_error {
            v["last_error"] = e.clone().into();
        }
        if let Some(why) = st.life.stopped.as_ref().filter(|_| state == "stopped") {
            v["stopped_because"] = why.clone().into();
        }
        drop(st);
        if let Some(pid) = pid {
            v["rss_kib"] = crate::proc::rss_kib(pid).into();
        }
        v
    }
}

/// For clients of a server other than diagnostics (a multiplexer that shares it between
/// editors and CLI sessions): its capabilities, the documents it holds open, requests on its
/// behalf and the server's requests it answers.
impl Server {
    /// `touch`, for `holder`, who keeps the document open until it `release`s it: a held
    /// document is never closed to make room. The ticket's `version` is the version the
    /// server has (or will have once it started) of this text.
    pub fn hold(
        self: &Arc<Self>,
        path: &Path,
        holder: u64,
        unsaved: Option<&str>,
    ) -> Option<Ticket> {
        self.update(path, unsaved, Some(holder), true)
    }

    /// `holder` no longer needs `path` open. When the last lets go, it is closed at once if it
    /// was open only because it was held (the bound is exceeded), else when room is needed.
    pub fn release(self: &Arc<Self>, path: &Path, holder: u64) {
        let mut st = self.lock();
        let Some(d) = st.docs.get_mut(path) else {
            return;
        };
        d.holders.retain(|h| *h != holder);
        if d.holders.is_empty() && st.docs.len() > self.cfg.max_open.max(1) {
            self.close_doc(&mut st, path);
        }
        // Held, it kept the server from idling out: the idle time counts again.
        self.advance_and_finish(st, Vec::new(), true);
    }

    /// The version ccide last sent (or will send) of `path`; None if it has no copy.
    pub fn version(&self, path: &Path) -> Option<i32> {
        self.lock().docs.get(path).map(|d| d.version)
    }

    /// The server's answer to `initialize` (its `capabilities`, `serverInfo`), starting it if
    /// needed and waiting until `deadline` at most; None if it is not usable by then. (A
    /// crashed server comes back when a document wants it: `hold` one.)
    pub fn initialize_result(self: &Arc<Self>, deadline: Instant) -> Option<Value> {
        self.warm();
        self.wait_for(deadline, |st| {
            if st.closed || st.life.phase == Phase::Failed {
                return Some(None);
            }
            (st.life.phase == Phase::Running).then(|| st.init.clone())
        })
        .flatten()
    }

    /// Waits until the server has delivered its first diagnostics or `deadline` passes; true
    /// if it has. Its first result is the sign that it has loaded the project: until then
    /// tsserver answers from a partial program (a hover says `import compose`, a definition
    /// goes to the import line). A server that is not running does not wait.
    pub fn loaded(&self, deadline: Instant) -> bool {
        self.wait_for(deadline, |st| {
            (st.delivered || st.life.phase != Phase::Running).then_some(st.delivered)
        })
        .unwrap_or(false)
    }

    /// Sends `method` with `params` to the running server about `path`, a document it has
    /// open (`hold` it first); `on_answer` gets the answer. Returns the id to `cancel` it by.
    pub fn request(
        &self,
        path: &Path,
        method: &str,
        mut params: Value,
        on_answer: OnAnswer,
    ) -> Result<u64, String> {
        let mut st = self.lock();
        let now = Instant::now();
        let running = st.life.phase == Phase::Running;
        let asked = match st.docs.get_mut(path) {
            Some(d) if d.open && running => {
                d.used = now;
                d.uri.clone()
            }
            _ => {
                return Err(format!(
                    "{} is not open in language server {}",
                    path.display(),
                    self.name
                ));
            }
        };
        st.last_used = now;
        convert_positions(&st, &mut params, &asked, true);
        let pending = Pending::Client(on_answer, asked);
        let id = self.send_request(&mut st, method, Some(params), pending);
        Ok(id.as_u64().unwrap_or_default())
    }

    /// `$/cancelRequest` for a request sent with `request` and not answered yet; its
    /// `on_answer` still gets the server's answer (LSP's RequestCancelled, usually).
    pub fn cancel(&self, id: u64) {
        let mut st = self.lock();
        let pending = st
            .requests
            .iter()
            .any(|(k, p)| *k == id && matches!(p, Pending::Client(..)));
        if pending {
            let mut params = Value::Null;
            params["id"] = id.into();
            self.send(&mut st, &rpc::notification("$/cancelRequest", params));
        }
    }

    /// Who gets the server's requests that ccide does not answer itself (None: ccide answers
    /// them all, as it does alone).
    pub fn on_request(&self, handler: Option<OnRequest>) {
        *self.on_request.lock().unwrap_or_else(|e| e.into_inner()) = handler;
    }
}

impl Ticket {
    /// The version of the document this ticket waits for, as the server knows it.
    pub fn version(&self) -> i32 {
        self.version
    }

    /// Whether the wait is over, and how: Some(true) the result is final (or will never be:
    /// the server stopped or failed); Some(false) the document was closed before its result
    /// was final, which is no answer; None not yet.
    fn outcome(&self, st: &State) -> Option<bool> {
        if st.closed
            || matches!(
                st.life.phase,
                Phase::Failed | Phase::Stopped | Phase::Stopping
            )
        {
            return Some(true);
        }
        match st.fin.satisfied(&self.path, self.version, self.epoch) {
            None => Some(
                st.gone
                    .iter()
                    .any(|g| g.path == self.path && g.done && g.version >= self.version),
            ),
            Some(true) => Some(true),
            Some(false) => None,
        }
    }

    /// Waits until the result this ticket names is final, at most until `deadline`; false
    /// also at once when its document was closed before (no result will come for it).
    pub fn wait_until(&self, deadline: Instant) -> bool {
        let s = &self.server;
        let mut st = s.lock();
        let done = loop {
            if let Some(done) = self.outcome(&st) {
                break done;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            st =
                s.cv.wait_timeout(st, left)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
        };
        drop(st);
        // The result is final in the state; wait until the sink has it too (`finish` holds
        // this lock from before it releases the state until the sink returns).
        drop(s.delivering.lock());
        done
    }
}

/// Every request sent on someone's behalf gets an answer: this one, when the process that
/// would have answered is gone.
fn fail_requests(st: &mut State, effects: &mut Effects) {
    for (_, p) in st.requests.drain() {
        if let Pending::Client(on_answer, _) = p {
            let e = ResponseError {
                code: ErrorCode::RequestFailed as i64,
                message: "the language server exited before answering".into(),
                data: None,
            };
            effects.push(Effect::Answer(on_answer, Err(e)));
        }
    }
}

/// Converts each position in a request sent on a client's behalf (`to_server`: from UTF-16
/// to the server's encoding) or in its answer (back to UTF-16), `asked` being the uri of the
/// document it is about (ccide-protocol(7) §11.3): by the text the server has of each
/// document named, else the file's (a regular file, bounded), else not at all.
fn convert_positions(st: &State, v: &mut Value, asked: &str, to_server: bool) {
    if st.enc == Enc::Utf16 {
        return;
    }
    let (from, to) = match to_server {
        true => (Enc::Utf16, st.enc),
        false => (st.enc, Enc::Utf16),
    };
    let mut seen: Vec<(String, Option<Text>)> = Vec::new();
    crate::lsp::text::each_position(v, asked, asked, false, &mut |p, file, end| {
        if !seen.iter().any(|s| s.0 == file) {
            let path = crate::files::uri_path(file, true);
            let held = path.as_ref().and_then(|p| st.docs.get(p));
            let held = held.or_else(|| st.docs.values().find(|d| d.uri == file));
            let text = match held {
                Some(d) => Some(d.text.clone()),
                None => path
                    .and_then(|p| crate::files::read_regular(&p, MAX_DOC_BYTES).ok())
                    .and_then(|b| String::from_utf8(b).ok()),
            };
            seen.push((file.to_string(), text.map(Text::new)));
        }
        if let Some((_, Some(text))) = seen.iter().find(|s| s.0 == file) {
            *p = text.convert(Pos::from_json(p), from, to, end).to_json();
        }
    });
}

/// Converts the ranges of LSP diagnostics about `text` (the document as sent) from the
/// server's position encoding to UTF-16, what the store and the CLI count.
fn to_utf16(items: &mut [Value], text: &str, enc: Enc) {
    if enc == Enc::Utf16 || items.is_empty() {
        return;
    }
    // Lines indexed once: splitting the text for each position would cost the document's size
    // per item, under the state lock.
    let text = Text::new(text.to_string());
    for d in items {
        let Some(r) = d.get_mut("range").filter(|r| r.is_object()) else {
            continue;
        };
        for (k, round_up) in [("start", false), ("end", true)] {
            let p = Pos::from_json(&r[k]);
            if let Some(line) = text.line(p.line) {
                let c = convert_column(line, p.character, enc, Enc::Utf16, round_up);
                r[k]["character"] = c.into();
            }
        }
    }
}

/// A tsserver protocol diagnostic (1-based line and UTF-16 offset, `category`) as the LSP
/// diagnostic typescript-language-server would publish for it (its `toDiagnostic`).
fn from_tsserver(d: &Value) -> Value {
    // Built field by field: smaller in the binary than `json!` (no serializer per type).
    let mut v = Value::Object(Default::default());
    for k in ["start", "end"] {
        let n = |f: &str| d[k][f].as_u64().unwrap_or(1).saturating_sub(1);
        v["range"][k]["line"] = n("line").into();
        v["range"][k]["character"] = n("offset").into();
    }
    v["message"] = d["text"].clone();
    v["severity"] = match d["category"].as_str() {
        Some("warning") => 2,
        Some("suggestion") => 4,
        _ => 1,
    }
    .into();
    v["code"] = d["code"].clone();
    v["source"] = d["source"].as_str().unwrap_or("typescript").into();
    v
}

fn folder(w: &Path) -> Value {
    let mut v = Value::Object(Default::default());
    v["uri"] = crate::files::file_uri(w).into();
    v["name"] = w
        .file_name()
        .map_or("".into(), |n| n.to_string_lossy())
        .into();
    v
}

/// `initialize`'s parameters but the paths and ids: what ccide does with what the server
/// offers, and nothing more. Diagnostics (pushed with versions, or pulled), progress,
/// configuration and watched files; positions in UTF-16 only, which every server must support
/// (ccide-protocol(7) §11.3). Text, parsed when used: smaller than the code that builds it.
const INITIALIZE: &str = r#"{
    "clientInfo": {"name": "ccide"},
    "trace": "off",
    "capabilities": {
        "general": {"positionEncodings": ["utf-16"]},
        "window": {"workDoneProgress": true},
        "workspace": {
            "configuration": true,
            "workspaceFolders": true,
            "didChangeWatchedFiles": {"dynamicRegistration": true},
            "diagnostics": {"refreshSupport": true}
        },
        "textDocument": {
            "synchronization": {"dynamicRegistration": false},
            "publishDiagnostics": {"versionSupport": true},
            "diagnostic": {"dynamicRegistration": true}
        }
    }
}"#;
