//! What one language server holds: its configuration and callbacks, the `Server` and the
//! `Ticket`s waited on, and the state behind its lock (its process's life, the documents ccide
//! keeps open in it, the requests pending, and what is handed out once the lock is released).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::langservers::finality::{Final, Finality};
use crate::langservers::supervisor::{Event, Life, Process};
use crate::lsp::connection::Sender;
use crate::lsp::queue::Outgoing;
use crate::lsp::text::Enc;
use crate::proc::Queue;
use crate::rpc::{self, RequestId, ResponseError, RpcError};
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
    pub(super) reply: Reply,
}

pub(super) struct Reply {
    pub(super) sender: Sender,
    pub(super) id: RequestId,
    /// ccide's own answer, sent unless another is.
    pub(super) default: Option<Result<Value, RpcError>>,
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

pub(super) struct Doc {
    pub(super) uri: String,
    pub(super) text: String,
    pub(super) hash: u64,
    /// Set when `text` is the file on disk as of this stamp; unsaved text has none.
    pub(super) disk: Option<crate::files::Stamp>,
    pub(super) version: i32,
    /// didOpen was sent to the current process.
    pub(super) open: bool,
    pub(super) used: Instant,
    /// Who keeps it open (`hold`): never closed to make room while anyone does.
    pub(super) holders: Vec<u64>,
}

/// A document closed to make room, or by an idle stop: enough to tell, without reading it,
/// whether getDiagnostics {} must open it again (it changed, or its result was not final).
#[derive(Clone)]
pub(super) struct Gone {
    pub(super) path: PathBuf,
    pub(super) disk: Option<crate::files::Stamp>,
    pub(super) hash: u64,
    pub(super) version: i32,
    /// Its result for `version` was final.
    pub(super) done: bool,
}

/// Closed documents remembered at most (the oldest are forgotten).
pub(super) const MAX_GONE: usize = 4096;

/// What a request this side sent is for.
pub(super) enum Pending {
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
pub(super) enum Effect {
    Final(Final),
    Answer(OnAnswer, Result<Value, ResponseError>),
    Request(ServerRequest),
}

pub(super) type Effects = Vec<Effect>;

pub(super) struct State {
    pub(super) life: Life,
    /// Which process the events belong to: bumped at every start.
    pub(super) run: u64,
    pub(super) process: Option<Process>,
    /// The answer to `initialize`, once there is one.
    pub(super) init: Option<Value>,
    pub(super) server_info: String,
    /// How the server counts positions (UTF-16 unless it insists otherwise).
    pub(super) enc: Enc,
    pub(super) fin: Finality,
    pub(super) pull_registration: Option<String>,
    pub(super) watch_registrations: Vec<String>,
    pub(super) requests: Outgoing<Pending>,
    pub(super) docs: HashMap<PathBuf, Doc>,
    /// Oldest first.
    pub(super) gone: Vec<Gone>,
    /// This process handed out a final result: it loaded what it needs.
    pub(super) delivered: bool,
    /// Versions count for the whole server, so each document's increase and a document
    /// closed and opened again never repeats a version a waiter is waiting for.
    pub(super) last_version: i32,
    pub(super) last_used: Instant,
    pub(super) closed: bool,
    /// When `advance` wants to run next.
    pub(super) due: Option<Instant>,
}

pub struct Server {
    /// The program's file name, e.g. `pyright-langserver`.
    pub name: String,
    pub words: Vec<String>,
    pub patterns: Vec<String>,
    /// A built-in (`Spec::builtin`).
    pub(super) builtin: bool,
    /// Its place in the driver's list.
    pub(super) index: usize,
    /// What a start announces (the folders of that moment) and `workspace/workspaceFolders`
    /// answers.
    pub(super) workspaces: Arc<Workspaces>,
    pub(super) cfg: Config,
    pub(super) sink: Sink,
    pub(super) inbox: Arc<Queue<Inbound>>,
    pub(super) on_request: Mutex<Option<OnRequest>>,
    pub(super) st: Mutex<State>,
    /// Notified whenever a result becomes final or the process changes state.
    pub(super) cv: Condvar,
    /// Held while handing results to the sink, taken before the state lock is released, so
    /// two threads cannot deliver one file's results out of order.
    pub(super) delivering: Mutex<()>,
    /// Held by `update` from reading a file's state until it is applied: two updates of one
    /// file (an editor's buffer and getDiagnostics reading the disk) would otherwise apply an
    /// older text as the newer version. Taken before `st`, never under it.
    pub(super) updating: Mutex<()>,
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
    pub(super) server: Arc<Server>,
    pub(super) path: PathBuf,
    pub(super) version: i32,
    pub(super) epoch: u64,
}

/// Files above this are not sent: servers hold every open document in memory.
pub(super) const MAX_DOC_BYTES: u64 = 8 << 20;

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

    pub(super) fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Waits until `done` has an answer about the state, at most until `deadline`; None if
    /// it had none by then. Every change of state that a waiter may want notifies `cv`.
    pub(super) fn wait_for<R>(
        &self,
        deadline: Instant,
        done: impl Fn(&State) -> Option<R>,
    ) -> Option<R> {
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
}
