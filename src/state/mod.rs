//! The shared state of a server: the workspace folders, the editor model, pending diffs,
//! executeCode approvals and kernels, the diagnostics (and, in `diagnostics`, how clients and
//! commands see them), the event stream, and the identity the lock file announces. Tools, the session and the control socket work through it; it knows
//! nothing of them. It is built from a `Config` without a port or a lock file, so tests build
//! one in a temporary directory.

pub mod changes;
pub mod diagnostics;
pub mod diffs;
pub mod editor;
pub mod events;
pub mod exec;
pub mod watched;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde_json::Value;

use crate::diagnostics::Diagnostics;
use crate::diagnostics::checkers::Checks;
use crate::json::{self, obj};
use crate::langservers::LangServers;
use crate::lockfile::{LockContent, LockFile};
use crate::proc::lock;
use crate::rpc::clients::{ClientInfo, Clients, Reach};
use crate::workspaces::{Workspaces, nested};
use diffs::Diffs;
use editor::Editor;
use events::Events;
use exec::Exec;

/// readFile refuses files above this size: its answer must fit the CLI's 16 MiB message cap.
pub const MAX_READ: u64 = 16 << 20;
/// What openFile reads at most to search a file for its startText.
pub const MAX_SEARCH: u64 = 1 << 30;

/// What a state is made of; `ccide serve` fills it from its flags.
pub struct Config {
    pub workspaces: Vec<PathBuf>,
    pub ide_name: String,
    pub state_dir: PathBuf,
    /// Where the lock file goes (`<config>/ide/<port>.lock`).
    pub config_dir: PathBuf,
    pub port: u16,
    pub token: String,
    pub mention_max_age: Duration,
    pub exec: exec::Settings,
    pub formatters: Vec<String>,
    /// `--trust-workspace`: the built-ins may run what the workspace ships.
    pub trusted: bool,
    pub checks: Checks,
    /// The language servers (`--lsp` and the built-ins) and how they are run.
    pub langservers: (Vec<crate::langservers::Spec>, crate::langservers::Config),
    /// `--review-store` and `--review-gate`.
    pub review: changes::Settings,
}

pub struct State {
    pub workspaces: Arc<Workspaces>,
    /// The language servers kept warm (ccide-protocol(7) §11): the diagnostics hand them
    /// files, the control socket's `lsp` clients and `lsp-bridge` navigate through them.
    pub langservers: Arc<LangServers>,
    pub editor: Editor,
    pub diffs: Diffs,
    /// What Claude's tools changed, for review after the fact.
    pub recorded: changes::Changes,
    pub exec: Arc<Exec>,
    pub diagnostics: Arc<Diagnostics>,
    pub events: Arc<Events>,
    /// `--formatter PATTERN=COMMAND` as given, in order.
    pub formatters: Vec<String>,
    /// `--trust-workspace`: the built-in formatters may run what the workspace ships
    /// (ccide-protocol(7) §14).
    pub trusted: bool,
    pub ide_name: String,
    pub port: u16,
    pub state_dir: PathBuf,
    pub control_path: PathBuf,
    pub started: SystemTime,
    config_dir: PathBuf,
    token: String,
    /// Only for broadcast and the status listing: who is connected is the session's business.
    clients: Arc<Clients>,
    /// What `ccide workspace add/remove` changed, as saved in `workspaces.json`.
    changes: std::sync::Mutex<WorkspaceChanges>,
    /// The git worktrees that joined the folders (see `follow_worktrees`).
    /// And those another server announces, with its pid (see `follow_worktrees`).
    worktrees: std::sync::Mutex<(Vec<PathBuf>, Vec<Skipped>)>,
}

/// A git worktree left to the server of this pid.
type Skipped = (PathBuf, i64);

impl State {
    /// Opens the state directory (pending diffs of a previous run are removed, the editor
    /// model and diagnostics are loaded) for a server whose clients are `clients`.
    pub fn open(c: Config, clients: Arc<Clients>) -> Result<State, String> {
        let workspaces = Arc::new(Workspaces::new(c.workspaces));
        let events = Arc::new(Events::default());
        let store = Arc::new(crate::diagnostics::Store::open(&c.state_dir));
        let changed = diagnostics::to_clients(clients.clone());
        let langservers = LangServers::new(
            c.langservers.0,
            workspaces.clone(),
            c.langservers.1,
            crate::diagnostics::sink(&store, &changed),
        );
        Ok(State {
            diffs: Diffs::open(&c.state_dir, events.clone())?,
            recorded: changes::Changes::open(&c.state_dir, c.review),
            editor: Editor::open(&c.state_dir, c.mention_max_age),
            exec: Arc::new(Exec::new(c.exec, events.clone())),
            diagnostics: Arc::new(Diagnostics::new(
                &c.state_dir,
                store,
                c.checks,
                langservers.clone(),
                workspaces.clone(),
                changed,
            )),
            langservers,
            workspaces,
            events,
            formatters: c.formatters,
            trusted: c.trusted,
            ide_name: c.ide_name,
            port: c.port,
            control_path: c.state_dir.join("control.sock"),
            changes: std::sync::Mutex::new(WorkspaceChanges::load(&c.state_dir)),
            worktrees: Default::default(),
            state_dir: c.state_dir,
            started: SystemTime::now(),
            config_dir: c.config_dir,
            token: c.token,
            clients,
        })
    }

    /// Makes again what lived in the (made again) state directory after it was deleted: the
    /// state files from what this server holds in memory, the diffs and drop directories (the
    /// caller restores `serve.lock` and the control socket). Returns the pending diffs whose
    /// proposals went with it, as `(id, file)`.
    pub fn restore(&self) -> Result<Vec<(u64, PathBuf)>, String> {
        crate::lockfile::rewrite_identity(&self.state_dir, self.port, &self.token)?;
        crate::files::private_dir(
            &self.state_dir.join("diagnostics"),
            "diagnostics drop directory",
        )?;
        let lost = self.diffs.restore()?;
        self.editor.save_now();
        self.diagnostics.store.save_now();
        lock(&self.changes).save(&self.state_dir)?;
        Ok(lost)
    }

    /// A path from a client or command, confined to the workspace folders.
    pub fn resolve(&self, raw: &str) -> Result<PathBuf, String> {
        self.workspaces.resolve(raw)
    }

    /// The editor's unsaved text of `path` came, changed or went: a language server with a
    /// copy gets the text ccide now has (that buffer, else the file) at once, so navigation
    /// through it (ccide-protocol(7) §11.8) sees what the editor shows.
    pub fn text_changed(&self, path: &Path) {
        let unsaved = self.editor.document(path);
        self.langservers.retext(path, unsaved.as_deref());
    }

    /// A file open in an editor (a tab of `ccide open`, a document of `ccide lsp`) is checked
    /// as one Claude Code asked about, as VS Code reports diagnostics for every open editor
    /// (ccide-protocol(7) §5.4): its checks start now, in the background, and it joins the
    /// files that getDiagnostics {} checks again when they changed (bounded as those are).
    /// Its editor then shows them too (`ccide lsp --diagnostics`).
    pub fn check_open(&self, path: &Path) {
        let unsaved = self.editor.document(path);
        let _pending = self.diagnostics.refresh(path, unsaved.as_deref());
    }

    /// The pending diffs of every session; with more than one folder (worktrees) or client,
    /// each with the folder of its file, and commands label it with that and its session.
    pub fn diff_list(&self) -> Vec<Value> {
        let mut list = self.diffs.list();
        if self.workspaces.list().len() + self.clients.all().len() < 3 {
            return list;
        }
        for d in &mut list {
            let w = self
                .workspaces
                .holder(Path::new(d["file"].as_str().unwrap_or("")));
            d["worktree"] = w.map_or(Value::Null, |w| json::path(&w));
        }
        list
    }

    pub fn client_infos(&self) -> Vec<ClientInfo> {
        self.clients.all().iter().map(|c| c.info()).collect()
    }

    /// Writes the lock file that announces this server (again, with the same port and token,
    /// when the folders change).
    pub fn announce(&self) -> Result<LockFile, String> {
        LockFile::write(
            &self.config_dir,
            &LockContent {
                port: self.port,
                workspaces: &self.workspaces.list(),
                ide_name: &self.ide_name,
                token: &self.token,
                control: &self.control_path,
                state: &self.state_dir,
            },
        )
    }

    pub fn status(&self) -> Value {
        let clients: Vec<Value> = self
            .client_infos()
            .iter()
            .map(|i| {
                obj! {
                    "id": i.id, "pid": i.pid, "name": i.name.as_str(), "version": i.version.as_str(),
                    "initialized": i.initialized, "ready": i.ready,
                    "roots": i.roots.as_deref().map(json::paths),
                    "since": crate::text::unix_secs(i.since),
                }
            })
            .collect();
        obj! {
            "pid": std::process::id(),
            "port": self.port,
            "ide_name": self.ide_name.as_str(),
            "workspaces": json::paths(&self.workspaces.list()),
            "state_dir": json::path(&self.state_dir),
            "started": crate::text::unix_secs(self.started),
            "uptime_secs": self.started.elapsed().map(|d| d.as_secs()).unwrap_or(0),
            "clients": clients,
            "diffs": self.diff_list(),
            "tabs": self.editor.tabs().iter().map(|t| obj!{"path": json::path(&t.path), "active": t.active, "preview": t.preview}).collect::<Vec<_>>(),
            "selection": self.editor.selection(),
            "documents": self.editor.documents().iter().map(|(p, n)| obj!{"path": json::path(p), "bytes": *n}).collect::<Vec<_>>(),
            "language_servers": self.langservers.status(),
        }
    }

    /// Sets the selection and tells the sessions whose folders hold its file (see
    /// `route`; a client being set up gets it with its greeting). A selection too big for
    /// one client message is refused.
    pub fn select(&self, payload: Value, pick: Option<&str>) -> Result<Value, String> {
        fits("selection_changed", &payload, "the selection")?;
        let (to, mut answer) = self.route("selected", &payload, pick)?;
        let n = self.editor.select_and_tell(payload.clone(), || {
            self.clients.tell("selection_changed", payload, Some(&to))
        });
        reached(&mut answer, n);
        Ok(answer)
    }

    /// Tells the sessions whose folders hold the file of a mention (see `route`), or
    /// queues it for the next client when none is connected.
    pub fn mention(&self, payload: Value, pick: Option<&str>) -> Result<Value, String> {
        fits("at_mentioned", &payload, "the mention")?;
        let (to, mut answer) = self.route("mentioned", &payload, pick)?;
        let n = self
            .clients
            .tell("at_mentioned", payload.clone(), Some(&to));
        if n == Reach::default() {
            self.editor.queue_mention(payload);
        }
        reached(&mut answer, n);
        answer["queued"] = (n.sent == 0).into();
        Ok(answer)
    }

    /// The sessions a selection or mention goes to (`Clients::route`, ccide-protocol(7)
    /// §6.4) as ids, and the answer naming them, which `ccide events` hears of too.
    fn route(
        &self,
        event: &str,
        payload: &Value,
        pick: Option<&str>,
    ) -> Result<(Vec<u64>, Value), String> {
        let path = payload["filePath"].as_str().unwrap_or("");
        let (mut ids, mut named, mut routed) = (Vec::new(), Vec::new(), false);
        for c in self.clients.route(Path::new(path), pick)? {
            ids.push(c.id);
            named.push(c.describe());
            routed |= lock(&c.state).roots.is_some();
        }
        self.events
            .emit(obj! {"event": event, "path": path, "sessions": ids.clone()});
        // Named when one gave its roots: "sent to 2 clients" says enough of the others.
        let mut answer = obj! {"ok": true};
        if routed {
            answer["sessions"] = named.into();
        }
        Ok((ids, answer))
    }

    /// The text a file shows in the editor: its unsaved content, else what is on disk, up to
    /// `limit` bytes (what is read to search it; answers that carry it use `MAX_READ`).
    pub fn current_text(&self, path: &Path, limit: u64) -> Result<String, String> {
        match self.editor.document(path) {
            Some(d) => Ok(d),
            None => read_text(&self.workspaces, path, limit),
        }
    }

    /// Whether the editor can open a file: it has unsaved content, or it is a regular file.
    pub fn check_openable(&self, path: &Path) -> Result<(), String> {
        if self.editor.document(path).is_some() {
            return Ok(());
        }
        open_regular(&self.workspaces, path).map(|_| ())
    }

    /// The first `n` lines the editor shows for a file (all when it has fewer), read from
    /// disk only as far as needed: selecting a few lines of a 2 GB log reads a few lines.
    pub fn first_lines(&self, path: &Path, n: usize) -> Result<String, String> {
        if let Some(d) = self.editor.document(path) {
            return Ok(d);
        }
        let file = open_regular(&self.workspaces, path)?;
        let mut r = std::io::BufReader::new(file);
        let mut bytes = Vec::new();
        for _ in 0..n {
            match std::io::BufRead::read_until(&mut r, b'\n', &mut bytes) {
                Ok(0) => break,
                Ok(_) => {}
                Err(e) => return Err(format!("cannot read {}: {e}", path.display())),
            }
        }
        String::from_utf8(bytes).map_err(|_| format!("{} is not UTF-8 text", path.display()))
    }

    /// How many lines the editor shows for a file (as `editor::lines` counts), counted
    /// without holding the file in memory; 0 when it cannot be read.
    pub fn line_count(&self, path: &Path) -> usize {
        if let Some(d) = self.editor.document(path) {
            return editor::lines(&d).len();
        }
        let Ok(mut file) = open_regular(&self.workspaces, path) else {
            return 0;
        };
        let mut buf = vec![0u8; 64 << 10];
        let (mut newlines, mut last) = (0, b'\n');
        loop {
            match std::io::Read::read(&mut file, &mut buf) {
                Ok(0) => break,
                Ok(k) => {
                    newlines += buf[..k].iter().filter(|&&b| b == b'\n').count();
                    last = buf[k - 1];
                }
                Err(_) => return 0,
            }
        }
        newlines + usize::from(last != b'\n')
    }

    /// Writes a workspace file for a client (saveDocument, writeFile, reformat_file): confined
    /// and atomic (see `Workspaces::write`), and the language servers are told, as an
    /// editor's file watcher would tell them.
    pub fn write_file(&self, path: &Path, bytes: &[u8]) -> std::io::Result<()> {
        let created = !path.exists();
        self.workspaces.write(path, bytes, 0o644)?;
        self.diagnostics.file_written(path, created);
        Ok(())
    }

    /// Makes the git worktrees of the folders' repositories folders too, as they come and go
    /// (ccide-protocol(7) §1.5): Claude Code started in one then finds this server, and the
    /// tools reach its files. A worktree inside a folder is served already; one another
    /// running server or IDE announces is left to it: two lock files holding a folder, the CLI
    /// connects to neither (§1.3); of two servers following one, the lower pid keeps it. The
    /// lock file is written again when they changed.
    pub fn follow_worktrees(&self) {
        let mut known = lock(&self.worktrees);
        let mut all = self.workspaces.list();
        all.retain(|w| !known.0.contains(w));
        let n = all.len();
        let mut others = None;
        let mut skipped = Vec::new();
        // A worktree the user removed from the folders stays out until they add it again.
        let removed = lock(&self.changes).removed.clone();
        for i in 0..n {
            for t in crate::workspaces::worktrees(&all[i].clone()) {
                if all.iter().any(|w| t.starts_with(w)) || removed.contains(&t) {
                    continue;
                }
                let others = others.get_or_insert_with(|| {
                    let me = std::process::id() as i64;
                    let locks = crate::lockfile::scan(&self.config_dir).into_iter();
                    locks
                        .filter(|l| l.pid != me && l.reachable())
                        .collect::<Vec<_>>()
                });
                let mine = known.0.contains(&t);
                match others.iter().find(|l| {
                    (!mine || l.pid < std::process::id() as i64)
                        && l.workspaces.iter().any(|w| nested(w, &t))
                }) {
                    Some(l) => skipped.push((t, l.pid)),
                    None => all.push(t),
                }
            }
        }
        for (t, pid) in skipped.iter().filter(|s| !known.1.contains(s)) {
            crate::log::info!(
                "git worktree {} not served: the ccide server of pid {pid} serves it",
                t.display()
            );
        }
        known.1 = skipped;
        if all[n..] == known.0[..] {
            return;
        }
        let old = std::mem::replace(&mut known.0, all[n..].to_vec());
        crate::log::info!("git worktrees served: {}", json::paths(&known.0));
        // Applied to the folders as they are now: a `ccide workspace add/remove` since the
        // list above stays.
        self.workspaces.change(|ws| {
            ws.retain(|w| !old.contains(w));
            for t in known.0.iter() {
                if !ws.contains(t) {
                    ws.push(t.clone());
                }
            }
        });
        if let Err(e) = self.announce() {
            crate::log::error!("{e}");
        }
    }

    /// Adds or removes a workspace folder, persists the change and rewrites the lock file with
    /// the same port and token (as the VS Code extension does when folders change).
    pub fn change_workspace(&self, add: bool, raw: &Path) -> Result<Vec<PathBuf>, String> {
        let dir = match crate::files::canonical_dir(raw) {
            Ok(d) => d,
            Err(_) if !add => raw.to_path_buf(),
            Err(e) => return Err(e),
        };
        let changed = self.workspaces.change(|ws| -> Result<bool, String> {
            let mut changes = lock(&self.changes);
            if add {
                if ws.contains(&dir) {
                    return Ok(false);
                }
                ws.push(dir.clone());
                changes.removed.retain(|p| *p != dir);
                changes.added.push(dir.clone());
            } else {
                if !ws.contains(&dir) {
                    return Err(format!(
                        "{} is not a workspace folder of this server",
                        dir.display()
                    ));
                }
                if ws.len() == 1 {
                    return Err(format!(
                        "{} is the only workspace folder; a server needs one",
                        dir.display()
                    ));
                }
                ws.retain(|w| *w != dir);
                changes.added.retain(|p| *p != dir);
                changes.removed.push(dir.clone());
            }
            changes.save(&self.state_dir)?;
            Ok(true)
        })?;
        if changed {
            crate::sys::sd_notify("RELOADING=1");
            let written = self.announce();
            crate::sys::sd_notify("READY=1");
            written?;
            crate::log::info!(
                "workspace folder {} {}",
                dir.display(),
                if add { "added" } else { "removed" }
            );
        }
        Ok(self.workspaces.list())
    }
}

/// Puts who a notification reached into a command's answer.
fn reached(answer: &mut Value, n: Reach) {
    answer["clients"] = n.sent.into();
    answer["held"] = n.held.into();
}

/// Refuses a notification no client would take (ccide-protocol(7) §2.1).
fn fits(method: &str, params: &Value, what: &str) -> Result<(), String> {
    let n = crate::rpc::notification(method, params.clone())
        .to_string()
        .len();
    if n > crate::rpc::MAX_TO_CLIENT {
        return Err(format!(
            "{what} is {} as JSON, above the 16 MiB a Claude Code client accepts in one message; select less",
            crate::rpc::mib(n)
        ));
    }
    Ok(())
}

/// Opens a regular workspace file through the confinement rule (`Workspaces::open`: never
/// through a symlink swapped in since it was named), refusing what would block (a FIFO, a
/// device) or is a directory.
fn open_regular(workspaces: &Workspaces, path: &Path) -> Result<std::fs::File, String> {
    use std::io::ErrorKind::{IsADirectory, Unsupported};
    workspaces.open(path).map_err(|e| match e.kind() {
        IsADirectory | Unsupported => format!("{} {e}", path.display()),
        _ if crate::files::confinement_refused(&e) => format!("{} {e}", path.display()),
        _ => not_found_or(path, e),
    })
}

/// A workspace file as text, read through the confinement rule (`Workspaces::read`), refusing
/// what would block (a FIFO) or is above `limit` bytes.
pub fn read_text(workspaces: &Workspaces, path: &Path, limit: u64) -> Result<String, String> {
    use std::io::ErrorKind::{FileTooLarge, IsADirectory, Unsupported};
    let bytes = workspaces.read(path, limit).map_err(|e| match e.kind() {
        IsADirectory | Unsupported | FileTooLarge => format!("{} {e}", path.display()),
        _ if crate::files::confinement_refused(&e) => format!("{} {e}", path.display()),
        _ => not_found_or(path, e),
    })?;
    String::from_utf8(bytes).map_err(|_| format!("{} is not UTF-8 text", path.display()))
}

fn not_found_or(path: &Path, e: std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::NotFound {
        format!("File not found: {}", path.display())
    } else {
        format!("cannot read {}: {e}", path.display())
    }
}

/// The folders `ccide workspace add/remove` changed, kept in the state directory.
#[derive(Default)]
pub struct WorkspaceChanges {
    pub added: Vec<PathBuf>,
    pub removed: Vec<PathBuf>,
}

impl WorkspaceChanges {
    fn path(state: &Path) -> PathBuf {
        state.join("workspaces.json")
    }

    pub fn load(state: &Path) -> WorkspaceChanges {
        let v: Value = std::fs::read(Self::path(state))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        let list = |k: &str| -> Vec<PathBuf> {
            v[k].as_array()
                .into_iter()
                .flatten()
                .filter_map(|p| p.as_str().map(PathBuf::from))
                .collect()
        };
        WorkspaceChanges {
            added: list("added"),
            removed: list("removed"),
        }
    }

    fn save(&self, state: &Path) -> Result<(), String> {
        let body = obj! {"added": json::paths(&self.added), "removed": json::paths(&self.removed)}
            .to_string();
        crate::files::write_atomic(&Self::path(state), body.as_bytes(), 0o600)
            .map_err(|e| format!("cannot save {}: {e}", Self::path(state).display()))
    }
}

/// A state in a fresh temporary directory holding `ws/` (the workspace), for tests without
/// a socket. The directory is removed when the returned guard drops.
#[cfg(test)]
pub mod testing {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    pub struct TestState {
        pub state: Arc<State>,
        pub clients: Arc<Clients>,
        pub root: PathBuf,
    }

    impl TestState {
        /// A connected client whose outbox is an in-memory queue; `initialized` as after the
        /// MCP handshake.
        pub fn client(&self, initialized: bool) -> Arc<crate::rpc::clients::Client> {
            self.clients.add(
                crate::transport::Outbox::memory(),
                "test".into(),
                crate::rpc::clients::ClientState {
                    initialized,
                    ..Default::default()
                },
            )
        }

        pub fn ws(&self) -> PathBuf {
            self.root.join("ws")
        }

        /// Writes a workspace file and returns its path.
        pub fn write(&self, rel: &str, content: &str) -> PathBuf {
            let p = self.ws().join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, content).unwrap();
            p
        }
    }

    impl Drop for TestState {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.root);
        }
    }

    pub fn state_with(exec_mode: exec::Mode) -> TestState {
        make(exec_mode, None, Vec::new(), Default::default())
    }

    /// A state whose language servers are `specs` (a test plays them in memory through
    /// `Server::memory`).
    pub fn state_serving(
        specs: Vec<crate::langservers::Spec>,
        cfg: crate::langservers::Config,
    ) -> TestState {
        make(exec::Mode::Off, None, specs, cfg)
    }

    /// A state serving a folder that the caller made (and removes): servers whose folders
    /// nest or overlap.
    pub fn state_for(workspace: &Path) -> TestState {
        make(
            exec::Mode::Off,
            Some(vec![workspace.to_path_buf()]),
            Vec::new(),
            Default::default(),
        )
    }

    fn make(
        exec_mode: exec::Mode,
        workspaces: Option<Vec<PathBuf>>,
        specs: Vec<crate::langservers::Spec>,
        cfg: crate::langservers::Config,
    ) -> TestState {
        static N: AtomicU64 = AtomicU64::new(0);
        let root = std::env::temp_dir().join(format!(
            "ccide-unit-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("ws")).unwrap();
        let root = std::fs::canonicalize(&root).unwrap();
        crate::files::private_dir(&root.join("state"), "state directory").unwrap();
        let clients = Arc::new(Clients::default());
        let state = State::open(
            Config {
                workspaces: workspaces.unwrap_or_else(|| vec![root.join("ws")]),
                ide_name: "ccide (test)".into(),
                state_dir: root.join("state"),
                config_dir: root.join("config"),
                port: 1,
                token: "t".repeat(86),
                mention_max_age: Duration::from_secs(30),
                exec: exec::Settings {
                    mode: exec_mode,
                    timeout: Duration::from_secs(20),
                    approval_timeout: Duration::from_secs(20),
                },
                formatters: Vec::new(),
                trusted: false,
                checks: Checks::new(Vec::new(), Duration::from_secs(2), Duration::from_secs(20)),
                langservers: (specs, cfg),
                review: Default::default(),
            },
            clients.clone(),
        )
        .unwrap();
        TestState {
            state: Arc::new(state),
            clients,
            root,
        }
    }

    pub fn state() -> TestState {
        state_with(exec::Mode::Off)
    }

    /// What was sent to `client` so far, parsed, oldest first.
    pub fn sent(client: &crate::rpc::clients::Client) -> Vec<Value> {
        client
            .outbox
            .take_sent()
            .iter()
            .map(|t| {
                serde_json::from_slice(t.as_bytes()).unwrap_or_else(|_| Value::String(t.clone()))
            })
            .collect()
    }
}
