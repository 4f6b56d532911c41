//! The project's language servers (typescript-language-server, pyright, clangd, ...), kept
//! warm for the life of `serve` (ccide-protocol(7) §11): ccide is their LSP client.
//!
//! - `profiles`: the built-in servers, one profile each (command, files, how each is found,
//!   trust, finality);
//! - `registry`: the servers there are (`--lsp`, the built-ins) and which serves a file;
//! - `supervisor`: a server's process and its life (start, restart with backoff, the process
//!   tree killed);
//! - `finality`: when a document's diagnostics are final, a pure state machine;
//! - `server`: one server: its documents and their versions, its requests, its life as their
//!   client, its status;
//! - here, `LangServers`: all of them, and the driver thread that hands each server what its
//!   process said and runs what is due.
//!
//! The caller `touch`es a file when its diagnostics are wanted; its server is started on first
//! use, the document opened or changed as needed, and a `Ticket` returned to `wait` on with a
//! budget. Results reach the sink only when final: a baseline must never be partial, because
//! the CLI reports every diagnostic missing from it as new. Beyond diagnostics, a `Server`
//! takes requests on others' behalf about the documents they `hold`, and hands the server's
//! requests ccide does not answer itself to whoever registered for them.

mod finality;
mod profiles;
mod registry;
mod server;
mod supervisor;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::proc::Queue;
use crate::workspaces::Workspaces;
pub use finality::Final;
#[cfg(test)]
pub use profiles::PROFILES;
pub use profiles::{builtins, languages};
pub use registry::{Spec, origin, parse_spec};
use server::Inbound;
pub use server::{Config, Server, ServerRequest, Sink, Ticket};
pub use supervisor::MAX_ITEMS;

/// What happened to a file, for `workspace/didChangeWatchedFiles`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    Created = 1,
    Changed = 2,
}

pub struct LangServers {
    servers: Vec<Arc<Server>>,
    /// Shared with `ccide workspace add/remove`, so a file in a folder added later is covered.
    workspaces: Arc<Workspaces>,
    /// The driver's: every process's events, and wake-ups.
    inbox: Arc<Queue<Inbound>>,
}

impl LangServers {
    pub fn new(
        specs: Vec<Spec>,
        workspaces: Arc<Workspaces>,
        cfg: Config,
        sink: Sink,
    ) -> Arc<LangServers> {
        let inbox: Arc<Queue<Inbound>> = Arc::default();
        let servers: Vec<Arc<Server>> = registry::group(specs)
            .into_iter()
            .enumerate()
            .map(|(i, group)| {
                Arc::new(Server::new(
                    i,
                    group,
                    workspaces.clone(),
                    cfg.clone(),
                    sink.clone(),
                    inbox.clone(),
                ))
            })
            .collect();
        if !servers.is_empty() {
            let (s, i) = (servers.clone(), inbox.clone());
            if let Err(e) = crate::proc::spawn_thread("lsp-driver", move || drive(&s, &i)) {
                crate::log::error!("cannot start the language servers' thread: {e}");
            }
        }
        Arc::new(LangServers {
            servers,
            workspaces,
            inbox,
        })
    }

    /// The server configured for `path` (a file inside a workspace), if any: for talking to
    /// it directly (`Server::initialize_result`, `hold`, `request`, `on_request`).
    pub fn server(&self, path: &Path) -> Option<&Arc<Server>> {
        self.servers
            .iter()
            .find(|s| registry::covers(&s.patterns, &self.workspaces, path))
    }

    /// Every configured server, in the order `--lsp` and the built-ins gave them.
    pub fn all(&self) -> &[Arc<Server>] {
        &self.servers
    }

    /// The text of `path` changed without a write (an editor's unsaved buffer came or went):
    /// a server that has a copy gets `unsaved`, else the disk's text, now rather than at the
    /// next request. Starts nothing.
    pub fn retext(&self, path: &Path, unsaved: Option<&str>) {
        if let Some(s) = self.server(path).filter(|s| s.version(path).is_some()) {
            let _ = s.touch(path, unsaved);
        }
    }

    /// Whether a server that delivers takes `path`: the batch checker for it can step aside.
    /// False once its server failed for good (cannot run, or dies before answering
    /// `initialize`), and while it has crashed since it last handed out a result.
    pub fn covers(&self, path: &Path) -> bool {
        self.server(path).is_some_and(|s| s.delivering())
    }

    /// Brings the server's copy of `path` up to date (its text on disk, or `unsaved`),
    /// starting the server if needed; returns what to `wait` on for the final result of that
    /// content. None when no usable server takes the file, or it is unreadable (then its
    /// diagnostics from this origin are cleared).
    pub fn touch(&self, path: &Path, unsaved: Option<&str>) -> Option<Ticket> {
        self.server(path)?.touch(path, unsaved)
    }

    /// For getDiagnostics {}: what each server knows brought up to date (`Server::refresh_known`),
    /// `unsaved` giving the editor's buffer of a file.
    pub fn refresh_known(&self, unsaved: &dyn Fn(&Path) -> Option<String>) -> Vec<Ticket> {
        let mut tickets = Vec::new();
        for s in &self.servers {
            tickets.extend(s.refresh_known(unsaved));
        }
        tickets
    }

    /// Waits until every ticket's result is final (or will never be: its server stopped),
    /// at most `budget` in all. True if all are final. A ticket that gets no result (its
    /// document was closed first) stops no wait for the others.
    pub fn wait(tickets: &[Ticket], budget: Duration) -> bool {
        let deadline = Instant::now() + budget;
        let mut all = true;
        for t in tickets {
            all &= t.wait_until(deadline);
        }
        all
    }

    /// Tells running servers that registered for watched files about changes ccide saw.
    pub fn files_changed(&self, changes: &[(PathBuf, Change)]) {
        let items: Vec<Value> = changes
            .iter()
            .map(|(p, c)| {
                let mut v = Value::Null;
                v["uri"] = crate::files::file_uri(p).into();
                v["type"] = (*c as u8).into();
                v
            })
            .collect();
        if items.is_empty() {
            return;
        }
        for s in &self.servers {
            s.files_changed(&items);
        }
    }

    /// Starts every server now rather than on the first matching file, and opens one file it
    /// covers: a server loads the project on its first document (tsserver took 1.3 to 5 s on
    /// a small project with the real CLI), which would otherwise fall on the first edit and
    /// miss the CLI's 2 s.
    pub fn warm(&self) {
        for s in &self.servers {
            // Named as a client's request would name it (resolved, so read again through the
            // confinement rule like every document: a tsconfig's `../` is no way out).
            let first = registry::first_file(&self.workspaces, &s.patterns)
                .and_then(|p| self.workspaces.resolve(&p.to_string_lossy()).ok());
            match first {
                Some(p) => {
                    let _ = s.touch(&p, None);
                }
                None => s.warm(),
            }
        }
    }

    /// One object per server: name, origin, command, patterns, state (stopped, starting,
    /// loading, indexing, ready, stopping, crashed, failed), pid, rss_kib (the process tree),
    /// open_documents, restarts, diagnostics (push, pull or tsserver), server (its name and
    /// version), last_error, stopped_because.
    pub fn status(&self) -> Value {
        Value::Array(self.servers.iter().map(|s| s.status()).collect())
    }

    /// Stops every server (`shutdown`, `exit`, then SIGKILL to its process tree) and the
    /// driver; waits at most about three seconds. Idempotent.
    pub fn shutdown(&self) {
        for s in &self.servers {
            s.close();
        }
        // Each process gets about 2 s (shutdown, then exit); then it is killed.
        let deadline = Instant::now() + Duration::from_millis(2500);
        for s in &self.servers {
            if !s.wait_gone(deadline) {
                s.kill_now();
            }
        }
        let deadline = Instant::now() + Duration::from_secs(1);
        for s in &self.servers {
            if !s.wait_gone(deadline) {
                crate::log::warn!("language server {} did not end after SIGKILL", s.name);
            }
        }
        self.inbox.push(Inbound::Quit);
        self.inbox.close();
    }
}

impl Drop for LangServers {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// The driver: hands each server what its process reported, in order, and runs each server's
/// time-driven transitions (quiet periods, pulls to retry, restarts, idle stops) when due.
fn drive(servers: &[Arc<Server>], inbox: &Queue<Inbound>) {
    let mut next: Option<Instant> = None;
    loop {
        match inbox.pop(next) {
            Some(Inbound::Quit) => return,
            Some(Inbound::Event { server, run, event }) => {
                if let Some(s) = servers.get(server) {
                    s.handle(run, event);
                }
            }
            Some(Inbound::Wake) => {}
            // The time came, or the queue closed.
            None if next.is_none() => return,
            None => {}
        }
        let now = Instant::now();
        next = servers.iter().filter_map(|s| s.tick_if_due(now)).min();
    }
}
