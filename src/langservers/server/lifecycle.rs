//! A server's life as ccide's LSP client: started (its `initialize`), ready (`initialized`,
//! the documents it had sent again), stopped (`shutdown`), exited; the process itself, its
//! restarts and their backoff are the supervisor's.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;

use super::requests::{fail_requests, folder};
use super::state::{Effects, Inbound, Pending, Server, State};
use crate::langservers::finality::{Pushes, Source};
use crate::langservers::supervisor::{self, Event, Phase, Process};
use crate::lsp::text::Enc;
use crate::rpc;

impl Server {
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

    pub(super) fn start(self: &Arc<Self>, st: &mut State, effects: &mut Effects) {
        st.run += 1;
        // The previous process's requests will never be answered.
        fail_requests(st, effects);
        let folders = self.workspaces.list();
        let spawned = self
            .initialization_options(&folders)
            .and_then(|options| Ok((self.spawn(st.run, &folders)?, options)));
        match spawned {
            Ok((p, options)) => self.started(st, p, &folders, options),
            Err(e) => {
                crate::log::warn!("language server {}: {e}; not used", self.name);
                st.life.phase = Phase::Failed;
                st.life.last_error = Some(e);
            }
        }
    }

    /// The `initializationOptions` of a start with these workspace folders; Err if the
    /// server is not to run.
    fn initialization_options(&self, folders: &[PathBuf]) -> Result<Option<Value>, String> {
        let program = Path::new(&self.words[0]);
        // A folder added since serve started may hold the built-in found then
        // (ccide-protocol(7) §14).
        if self.builtin && !crate::trust::allowed(program, folders, self.cfg.trust_workspace) {
            return Err(format!(
                "{} lies inside a workspace folder and runs only with --trust-workspace",
                program.display()
            ));
        }
        crate::langservers::profiles::initialization_options(
            &self.name,
            &self.words[0],
            folders,
            self.cfg.trust_workspace,
        )
    }

    /// Starts the process of `run`, in the first workspace folder, its events to the driver.
    fn spawn(&self, run: u64, folders: &[PathBuf]) -> Result<Process, String> {
        let (inbox, server) = (self.inbox.clone(), self.index);
        let deliver: crate::proc::Deliver<Event> = Arc::new(move |event| {
            inbox.push(Inbound::Event { server, run, event });
        });
        #[cfg(test)]
        if let Some(m) = self.memory.lock().unwrap().clone() {
            return Ok(supervisor::memory(m(), deliver));
        }
        let program = Path::new(&self.words[0]);
        let cwd = folders.first().map_or(Path::new("/"), |w| w.as_path());
        // A built-in's process gets the workspace-free PATH (ccide-protocol(7) §14).
        let mut cmd = match self.builtin {
            true => crate::trust::command(program, folders, self.cfg.trust_workspace),
            false => std::process::Command::new(&self.words[0]),
        };
        cmd.args(&self.words[1..]).current_dir(cwd);
        supervisor::spawn(cmd, self.cfg.max_queued, deliver)
    }

    /// The process `p` started: the state of the one before forgotten, and `initialize` sent.
    fn started(&self, st: &mut State, p: Process, folders: &[PathBuf], options: Option<Value>) {
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
        let mut params: Value = serde_json::from_slice(INITIALIZE.as_bytes()).unwrap_or_default();
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

    pub(super) fn stop(&self, st: &mut State, why: &str) {
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

    pub fn kill_now(&self) {
        if let Some(p) = &self.lock().process {
            p.kill();
        }
    }

    pub(super) fn initialized(&self, st: &mut State, r: Value) {
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
            Some(n)
                if crate::langservers::profiles::profile(n).is_some_and(|p| p.complete_pushes) =>
            {
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

    pub(super) fn process_exited(&self, st: &mut State, how: &str, effects: &mut Effects) {
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
}

/// For clients other than diagnostics (the LSP mux): the server's capabilities, once it is
/// ready, and whether it has loaded the project.
impl Server {
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
