//! Type-level diagnostics from the project's language servers, kept warm for the
//! life of `serve`: a diagnostics source beside the checkers and imports, with its own origin
//! per server (`lsp:NAME`), so each result replaces only that server's earlier one.
//!
//! The caller `touch`es a file when its diagnostics are wanted; the server is started on first
//! use, the document opened or changed as needed, and a `Ticket` returned to `wait` on with a
//! budget. Results reach the sink only when FINAL (see `session`): a baseline must never be
//! partial, because the CLI reports every diagnostic missing from it as new.
//!
//! Several `Spec`s with the same command share one server process (`--lsp '*.ts=CMD' --lsp
//! '*.tsx=CMD'`), so the pattern syntax stays exactly `--checker`'s.

mod convert;
mod process;
mod session;
#[cfg(test)]
mod tests;

use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::diagnostics::parse::Diagnostic;
use session::Server;
pub use session::Ticket;

/// One `--lsp 'PATTERN=COMMAND'`.
#[derive(Clone, Debug, PartialEq)]
pub struct Spec {
    pub pattern: String,
    pub words: Vec<String>,
    /// The program's file name, e.g. `typescript-language-server`; the origin is `lsp:NAME`.
    pub name: String,
}

/// `PATTERN=COMMAND`, with `--checker`'s pattern and quoting rules.
pub fn parse_spec(spec: &str) -> Result<Spec, String> {
    let (pattern, command) = crate::pattern::split_spec(spec)?;
    let words = crate::pattern::split_words(command).map_err(|e| format!("'{spec}': {e}"))?;
    if words.is_empty() {
        return Err(format!("'{spec}' has an empty command"));
    }
    Ok(Spec {
        pattern: pattern.to_string(),
        name: crate::pattern::program_name(&words[0]),
        words,
    })
}

const TS_PATTERNS: &[&str] = &[
    "*.ts", "*.tsx", "*.mts", "*.cts", "*.js", "*.jsx", "*.mjs", "*.cjs",
];
const C_PATTERNS: &[&str] = &[
    "*.c", "*.h", "*.cc", "*.cpp", "*.cxx", "*.hpp", "*.hh", "*.hxx",
];

/// The built-in servers for what `find` locates (normally `crate::proc::find_on_path`), for `workspace`:
/// TypeScript/JavaScript, Python, Go, C/C++ (with a compile_commands.json) and Rust (with a
/// Cargo.toml). Commands name the program by the path found.
pub fn builtins(workspace: &Path, find: &dyn Fn(&str) -> Option<PathBuf>) -> Vec<Spec> {
    let mut out = Vec::new();
    let mut add = |patterns: &[&str], program: &Path, args: &[&str]| {
        let mut words = vec![program.to_string_lossy().into_owned()];
        words.extend(args.iter().map(|a| a.to_string()));
        for p in patterns {
            out.push(Spec {
                pattern: p.to_string(),
                words: words.clone(),
                name: crate::pattern::program_name(&words[0]),
            });
        }
    };
    // TypeScript 7 (the native port) is an LSP server itself, pull-only and several times
    // faster (LSP.md); the project's own copy decides, else typescript-language-server, which
    // uses the project's TypeScript.
    let local_tsc = workspace.join("node_modules/.bin/tsc");
    if typescript_major(&local_tsc).is_some_and(|m| m >= 7) {
        add(TS_PATTERNS, &local_tsc, &["--lsp", "--stdio"]);
    } else if let Some(p) = find("typescript-language-server") {
        add(TS_PATTERNS, &p, &["--stdio"]);
    } else if let Some(p) = find("tsc").filter(|p| typescript_major(p).is_some_and(|m| m >= 7)) {
        add(TS_PATTERNS, &p, &["--lsp", "--stdio"]);
    }
    let py = &["*.py", "*.pyi"];
    if let Some(p) = find("basedpyright-langserver") {
        add(py, &p, &["--stdio"]);
    } else if let Some(p) = find("pyright-langserver") {
        add(py, &p, &["--stdio"]);
    } else if let Some(p) = find("ty") {
        add(py, &p, &["server"]);
    }
    if let Some(p) = find("gopls") {
        add(&["*.go"], &p, &[]);
    }
    // clangd without a compilation database guesses flags and reports wrong errors. Its
    // background index serves navigation, which ccide does not use; it costs memory (266 MB
    // against 406 MB on git, LSP.md) and reports progress for minutes on a large project,
    // which would hold results back (session: finality waits for progress to end).
    if ["compile_commands.json", "build/compile_commands.json"]
        .iter()
        .any(|f| workspace.join(f).is_file())
        && let Some(p) = find("clangd")
    {
        add(C_PATTERNS, &p, &["--background-index=false"]);
    }
    if workspace.join("Cargo.toml").is_file()
        && let Some(p) =
            find("rust-analyzer").filter(|p| rust_analyzer_present(p, rustup_home().as_deref()))
    {
        add(&["*.rs"], &p, &[]);
    }
    out
}

/// The major version of the TypeScript package a `tsc` belongs to (its `package.json`, two
/// directories above `bin/tsc`), without running it.
fn typescript_major(tsc: &Path) -> Option<u32> {
    let real = std::fs::canonicalize(tsc).ok()?;
    let pkg = real.parent()?.parent()?.join("package.json");
    let v: Value = serde_json::from_slice(&std::fs::read(pkg).ok()?).ok()?;
    v["version"].as_str()?.split('.').next()?.parse().ok()
}

/// rustup puts a `rust-analyzer` proxy on PATH even when the component is not installed; that
/// proxy then fails with "Unknown binary 'rust-analyzer' in official toolchain" (seen here).
/// So a proxy counts only if some toolchain under `rustup_home` has the real one.
fn rust_analyzer_present(p: &Path, rustup_home: Option<&Path>) -> bool {
    let real = std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    if real
        .file_name()
        .is_none_or(|n| !n.to_string_lossy().starts_with("rustup"))
    {
        return true;
    }
    rustup_home
        .and_then(|h| std::fs::read_dir(h.join("toolchains")).ok())
        .is_some_and(|rd| {
            rd.flatten()
                .any(|t| t.path().join("bin/rust-analyzer").is_file())
        })
}

fn rustup_home() -> Option<PathBuf> {
    std::env::var_os("RUSTUP_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".rustup")))
}

/// The first executable `program` in a directory of PATH.

#[derive(Clone, Debug)]
pub struct Config {
    /// A server unused this long is stopped (and started again when next needed).
    pub idle: Duration,
    /// Documents kept open per server; the least recently used beyond are closed.
    pub max_open: usize,
    /// A pushed result is final when no other publish for the document came for this long.
    pub quiet: Duration,
    /// Restart delays after a crash: doubling from `backoff_min` up to `backoff_max`.
    pub backoff_min: Duration,
    pub backoff_max: Duration,
    /// A server that has not answered `initialize` by then is killed (and counts as crashed).
    pub init_timeout: Duration,
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
        }
    }
}

/// Receives each FINAL result: origin (`lsp:NAME`), file, that server's diagnostics for it
/// (empty: none). It replaces the origin's earlier result for the file. Called without any
/// lock of this module held, but it must not call back into `LangServers`.
pub type Sink = Arc<dyn Fn(&str, &Path, Vec<Diagnostic>) + Send + Sync>;

/// What happened to a file, for `workspace/didChangeWatchedFiles`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    Created = 1,
    Changed = 2,
}

/// Wakes the clock thread, which runs every server's time-driven transitions (quiet periods,
/// restarts, idle stops) at the earliest time one is due.
pub struct Clock {
    /// (poked, closed)
    state: Mutex<(bool, bool)>,
    cv: Condvar,
}

impl Clock {
    pub fn poke(&self) {
        self.state.lock().unwrap_or_else(|e| e.into_inner()).0 = true;
        self.cv.notify_one();
    }

    fn run(&self, servers: &[Arc<Server>]) {
        loop {
            let next = servers.iter().filter_map(|s| s.tick()).min();
            let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
            while !st.0 && !st.1 {
                match next {
                    None => st = self.cv.wait(st).unwrap_or_else(|e| e.into_inner()),
                    Some(t) => {
                        let left = t.saturating_duration_since(Instant::now());
                        if left.is_zero() {
                            break;
                        }
                        st = self
                            .cv
                            .wait_timeout(st, left)
                            .unwrap_or_else(|e| e.into_inner())
                            .0;
                    }
                }
            }
            if st.1 {
                return;
            }
            st.0 = false;
        }
    }
}

pub struct LangServers {
    servers: Vec<Arc<Server>>,
    workspaces: Vec<PathBuf>,
    clock: Arc<Clock>,
}

impl LangServers {
    pub fn new(
        specs: Vec<Spec>,
        workspaces: Vec<PathBuf>,
        cfg: Config,
        sink: Sink,
    ) -> Arc<LangServers> {
        let clock = Arc::new(Clock {
            state: Mutex::new((false, false)),
            cv: Condvar::new(),
        });
        // One server per distinct command, with the patterns of every spec naming it.
        let mut groups: Vec<(Vec<String>, Vec<String>)> = Vec::new();
        for s in specs {
            match groups.iter_mut().find(|g| g.0 == s.words) {
                Some(g) => g.1.push(s.pattern),
                None => groups.push((s.words, vec![s.pattern])),
            }
        }
        let servers: Vec<Arc<Server>> = groups
            .into_iter()
            .map(|(words, patterns)| {
                Arc::new(Server::new(
                    words,
                    patterns,
                    workspaces.clone(),
                    cfg.clone(),
                    sink.clone(),
                    clock.clone(),
                ))
            })
            .collect();
        if !servers.is_empty() {
            let (c, s) = (clock.clone(), servers.clone());
            let spawned = std::thread::Builder::new()
                .name("lsp-clock".into())
                .stack_size(crate::proc::THREAD_STACK)
                .spawn(move || c.run(&s));
            if let Err(e) = spawned {
                crate::log::error!("cannot start the language servers' clock thread: {e}");
            }
        }
        Arc::new(LangServers {
            servers,
            workspaces,
            clock,
        })
    }

    /// The server configured for `path` (inside a workspace), if any.
    fn server_for(&self, path: &Path) -> Option<&Arc<Server>> {
        let root = self.workspaces.iter().find(|w| path.starts_with(w))?;
        let rel = path.strip_prefix(root).ok()?.to_string_lossy();
        self.servers.iter().find(|s| {
            s.patterns
                .iter()
                .any(|p| crate::pattern::file_pattern_match(p, &rel))
        })
    }

    /// Whether a usable server takes `path`: the batch checker for it can step aside. False
    /// once its server failed for good (cannot run, or dies before answering `initialize`).
    pub fn covers(&self, path: &Path) -> bool {
        self.server_for(path).is_some_and(|s| s.usable())
    }

    /// Brings the server's copy of `path` up to date (its text on disk, or `unsaved`),
    /// starting the server if needed; returns what to `wait` on for the final result of that
    /// content. None when no usable server takes the file, or it is unreadable (then its
    /// diagnostics from this origin are cleared).
    pub fn touch(&self, path: &Path, unsaved: Option<&str>) -> Option<Ticket> {
        self.server_for(path)?.touch(path, unsaved)
    }

    /// Waits until every ticket's result is final (or will never be: its server stopped),
    /// at most `budget` in all. True if all are final.
    pub fn wait(tickets: &[Ticket], budget: Duration) -> bool {
        let deadline = Instant::now() + budget;
        tickets.iter().all(|t| t.wait_until(deadline))
    }

    /// Tells running servers that registered for watched files about changes ccide saw.
    pub fn files_changed(&self, changes: &[(PathBuf, Change)]) {
        let items: Vec<Value> = changes
            .iter()
            .map(|(p, c)| json!({"uri": crate::files::file_uri(p), "type": *c as u8}))
            .collect();
        if items.is_empty() {
            return;
        }
        for s in &self.servers {
            s.files_changed(&items);
        }
    }

    /// Starts every server now rather than on the first matching file.
    /// Starts every server now rather than on the first matching file, and opens one file it
    /// covers: a server loads the project on its first document (tsserver took 1.3 to 5 s on
    /// a small project with the real CLI), which would otherwise fall on the first edit and
    /// miss the CLI's 2 s.
    pub fn warm(&self) {
        for s in &self.servers {
            match self.first_file(s) {
                Some(p) => {
                    let _ = s.touch(&p, None);
                }
                None => s.warm(),
            }
        }
    }

    /// A workspace file `server` covers, found by a bounded walk that skips hidden, vendored
    /// and build directories.
    fn first_file(&self, server: &Server) -> Option<PathBuf> {
        const SKIP: &[&str] = &[
            "node_modules",
            "target",
            "build",
            "dist",
            "__pycache__",
            "venv",
        ];
        let mut budget = 5_000;
        for root in &self.workspaces {
            let mut dirs = std::collections::VecDeque::from([root.clone()]);
            while let Some(dir) = dirs.pop_front() {
                let Ok(rd) = std::fs::read_dir(&dir) else {
                    continue;
                };
                let mut entries: Vec<_> = rd.flatten().collect();
                entries.sort_by_key(|e| e.file_name());
                for e in entries {
                    budget -= 1;
                    if budget == 0 {
                        return None;
                    }
                    let name = e.file_name();
                    let name = name.to_string_lossy();
                    let Ok(ft) = e.file_type() else { continue };
                    let p = e.path();
                    if ft.is_dir() {
                        if !name.starts_with('.') && !SKIP.contains(&name.as_ref()) {
                            dirs.push_back(p);
                        }
                    } else if ft.is_file() {
                        let rel = p.strip_prefix(root).unwrap_or(&p).to_string_lossy();
                        if server
                            .patterns
                            .iter()
                            .any(|pat| crate::pattern::file_pattern_match(pat, &rel))
                        {
                            return Some(p);
                        }
                    }
                }
            }
        }
        None
    }

    /// One object per server: name, origin, command, patterns, state (stopped, starting,
    /// indexing, ready, crashed, failed), pid, rss_kib (the process tree), open_documents,
    /// restarts, diagnostics (pull or push), server (its name and version), last_error.
    pub fn status(&self) -> Value {
        Value::Array(self.servers.iter().map(|s| s.status()).collect())
    }

    /// Stops every server (`shutdown`, `exit`, then SIGKILL to its process group) and the
    /// clock; waits at most about three seconds. Idempotent.
    pub fn shutdown(&self) {
        {
            let mut st = self.clock.state.lock().unwrap_or_else(|e| e.into_inner());
            st.1 = true;
            self.clock.cv.notify_all();
        }
        for s in &self.servers {
            s.close();
        }
        // Each process thread gives its server about 2 s (shutdown, then exit); then kill.
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
    }
}

impl Drop for LangServers {
    fn drop(&mut self) {
        self.shutdown();
    }
}
