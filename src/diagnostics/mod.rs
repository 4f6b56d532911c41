//! Diagnostics: the store that getDiagnostics answers from (ccide-protocol(7) §5), the sources
//! that fill it in the background: the project's checkers (`checkers`) and language servers kept
//! warm (`crate::langservers`, their results read by `lsp`), each result replacing only its own
//! origin's; the output formats checkers and imports speak (`parse`), and the drop directory.
//! Answers come from the store at once: the CLI gives a baseline call 500 ms and disables
//! baselines after three misses, so nothing slow ever runs on the request path. Knows the
//! workspace folders, nothing of the editor, the session or its clients: what changed goes to
//! a `Sink`, and the layer above decides who hears of it and in what JSON.

pub mod checkers;
pub mod lsp;
pub mod parse;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::langservers::{self, LangServers};
use crate::workspaces::Workspaces;
use checkers::{Checks, Running};
use parse::{Diagnostic, Format, Severity};

/// The diagnostics of a server: the store, its sources, and where its changes go.
pub struct Diagnostics {
    pub store: Arc<Store>,
    pub checks: Checks,
    /// The language servers, to hand them files and ask whether one covers a file; they are
    /// the state's (`State::langservers`), their results come in through `sink`.
    langservers: Arc<LangServers>,
    workspaces: Arc<Workspaces>,
    changed: Sink,
    /// Where checkers' output is captured (the state directory).
    scratch: PathBuf,
    /// Files whose diagnostics were asked for: getDiagnostics {} runs their checkers again
    /// when they changed.
    seen: Mutex<BTreeSet<PathBuf>>,
}

/// Files `seen` remembers at most.
const MAX_SEEN: usize = 10_000;

/// A source still producing a file's diagnostics: a checker run, or a language server's
/// result for the content just synced.
pub enum Pending {
    Check(Arc<Running>),
    Lsp(langservers::Ticket),
}

/// Waits until every pending result is in the store, at most `budget` in all.
pub fn wait_all(pending: &[Pending], budget: Duration) {
    let deadline = Instant::now() + budget;
    for p in pending {
        let left = deadline.saturating_duration_since(Instant::now());
        match p {
            Pending::Check(r) => checkers::wait_all(std::slice::from_ref(r), left),
            Pending::Lsp(t) => {
                LangServers::wait(std::slice::from_ref(t), left);
            }
        }
    }
}

/// Where the store's changes go: every file whose diagnostics changed, in order, each with
/// all its diagnostics now (none: cleared). Called once the change is on disk, outside the
/// store's lock, only when something changed.
pub type Sink = Arc<dyn Fn(&[(PathBuf, Vec<Diagnostic>)]) + Send + Sync>;

/// Replaces `origin`'s diagnostics of the files in `by_file` and hands the files whose
/// diagnostics changed to `changed`; returns how many changed.
fn publish(
    store: &Store,
    changed: &Sink,
    origin: &str,
    by_file: BTreeMap<PathBuf, Vec<Diagnostic>>,
) -> usize {
    let files = store.replace(origin, by_file);
    if !files.is_empty() {
        changed(&files);
    }
    files.len()
}

/// Where a language server's final results go: the store, as a checker's, under the server's
/// own origin, each change handed on to `changed`. The language servers are built with it
/// (`LangServers::new`) before the `Diagnostics` that asks them.
pub fn sink(store: &Arc<Store>, changed: &Sink) -> langservers::Sink {
    let (store, changed) = (store.clone(), changed.clone());
    Arc::new(move |server: &str, f: langservers::Final| {
        let ds = lsp::diagnostics(&f.items, &f.path, server);
        // Not `BTreeMap::from`: it brings a stable sort and a bulk build of its own.
        let mut by_file = BTreeMap::new();
        by_file.insert(f.path, ds);
        publish(&store, &changed, &langservers::origin(server), by_file);
    })
}

impl Diagnostics {
    /// `store` opened in `state_dir`; `langservers` built with `sink(store, clients)`.
    pub fn new(
        state_dir: &Path,
        store: Arc<Store>,
        checks: Checks,
        langservers: Arc<LangServers>,
        workspaces: Arc<Workspaces>,
        changed: Sink,
    ) -> Diagnostics {
        Diagnostics {
            store,
            checks,
            langservers,
            workspaces,
            changed,
            scratch: state_dir.to_path_buf(),
            seen: Mutex::default(),
        }
    }

    /// Replaces `origin`'s diagnostics of the files in `by_file` and hands the files whose
    /// diagnostics changed to the sink; returns how many changed.
    pub fn replace(&self, origin: &str, by_file: BTreeMap<PathBuf, Vec<Diagnostic>>) -> usize {
        publish(&self.store, &self.changed, origin, by_file)
    }

    /// Forgets one file's diagnostics, or all, handing the files cleared to the sink; returns
    /// them.
    pub fn clear(&self, only: Option<&Path>) -> Vec<PathBuf> {
        let cleared = self.store.clear(only);
        if !cleared.is_empty() {
            let none: Vec<(PathBuf, Vec<Diagnostic>)> =
                cleared.iter().map(|p| (p.clone(), Vec::new())).collect();
            (self.changed)(&none);
        }
        cleared
    }

    /// Brings `file`'s diagnostics up to date with its content (`unsaved`, the editor's
    /// buffer, else the file on disk): its language server gets the new text, its checker
    /// runs if the file changed since its last run. Returns what is still under way.
    pub fn refresh(self: &Arc<Self>, file: &Path, unsaved: Option<&str>) -> Vec<Pending> {
        {
            let mut seen = self.seen.lock().unwrap();
            if seen.len() < MAX_SEEN || seen.contains(file) {
                seen.insert(file.to_path_buf());
            }
        }
        let mut pending = Vec::new();
        if let Some(t) = self.langservers.touch(file, unsaved) {
            pending.push(Pending::Lsp(t));
        }
        if let Some(r) = self.check(file) {
            pending.push(Pending::Check(r));
        }
        pending
    }

    /// Starts a check of `file` when its checker should run (`Checks::begin`), on a thread
    /// of its own; returns the running check to wait for, if any.
    fn check(self: &Arc<Self>, file: &Path) -> Option<Arc<Running>> {
        // A file swapped for a symlink since it was named is no workspace file any more: a
        // checker run on it by name would read through the link (ccide-protocol(7) §10).
        if self.workspaces.refuses(file) {
            return None;
        }
        let covered = self.langservers.covers(file);
        if covered && let Some(origin) = self.checks.step_aside(&self.workspaces, file) {
            // Its server delivers again: what the checker said meanwhile would go stale.
            let mut none = BTreeMap::new();
            none.insert(file.to_path_buf(), Vec::new());
            self.replace(&origin, none);
        }
        let (running, job) = self.checks.begin(&self.workspaces, file, covered)?;
        let Some(job) = job else {
            return Some(running);
        };
        let (this, mine) = (self.clone(), job.clone());
        let spawned = crate::proc::spawn_thread("checker", move || {
            loop {
                if let Some(by_file) = this.checks.run(&mine, &this.workspaces, &this.scratch) {
                    this.replace(&mine.origin(), by_file);
                }
                if this.checks.finish(&mine) {
                    break;
                }
            }
        });
        if let Err(e) = spawned {
            crate::log::error!("cannot start a checker thread: {e}");
            self.checks.abandon(&job);
            return None;
        }
        Some(running)
    }

    /// For getDiagnostics {}: brings up to date what changed, not everything known (an edit to
    /// one file can change another's diagnostics, and an idle `{}` must cost nothing): the
    /// language servers' own documents (`LangServers::refresh_known`), and the checks of files
    /// asked about or checked before that changed since. Waits for the results, at most
    /// `--diagnostics-wait` in all. `unsaved` gives the editor's buffer of a file, if any.
    pub fn refresh_all_and_wait(self: &Arc<Self>, unsaved: &dyn Fn(&Path) -> Option<String>) {
        let mut files: BTreeSet<PathBuf> = self.seen.lock().unwrap().clone();
        files.extend(self.checks.tracked());
        let mut pending = Vec::new();
        for t in self.langservers.refresh_known(unsaved) {
            pending.push(Pending::Lsp(t));
        }
        for f in &files {
            if let Some(r) = self.check(f) {
                pending.push(Pending::Check(r));
            }
        }
        wait_all(&pending, self.checks.wait);
    }

    /// Tells the language servers that ccide wrote a file (saveDocument, writeFile,
    /// reformat_file), as an editor's file watcher would.
    pub fn file_written(&self, path: &Path, created: bool) {
        let change = if created {
            langservers::Change::Created
        } else {
            langservers::Change::Changed
        };
        self.langservers
            .files_changed(&[(path.to_path_buf(), change)]);
    }

    /// Stores diagnostics produced elsewhere; files outside the workspace are dropped. Every
    /// file named in the input (even with an empty list, in protocol format) is replaced.
    pub fn import(&self, text: &str, format: Format, base: &Path) -> Imported {
        let mut by_file: BTreeMap<PathBuf, Vec<Diagnostic>> = BTreeMap::new();
        // Files listed with no diagnostics in protocol input mean "now clean".
        if matches!(format, Format::Protocol | Format::Auto)
            && let Ok(v) = serde_json::from_slice::<Value>(text.trim().as_bytes())
        {
            let items = match v {
                Value::Array(a) => a,
                o @ Value::Object(_) => vec![o],
                _ => Vec::new(),
            };
            for it in items {
                if let Some(u) = it["uri"].as_str() {
                    let path = self.inside(&parse::entry_path(u, base));
                    if self.workspaces.contains(&path) {
                        by_file.entry(path).or_default();
                    }
                }
            }
        }
        let mut outside = 0;
        // Columns are converted against the files as they are now (the input names no
        // content); each workspace file is read once.
        let mut read = |p: &Path| parse::read_source(&self.workspaces, &self.inside(p));
        for mut d in parse::parse(text, format, base, "import", &mut read) {
            d.path = self.inside(&d.path);
            if self.workspaces.contains(&d.path) {
                by_file.entry(d.path.clone()).or_default().push(d);
            } else {
                outside += 1;
            }
        }
        let diagnostics: usize = by_file.values().map(Vec::len).sum();
        let files = by_file.len();
        Imported {
            files,
            diagnostics,
            changed: self.replace("import", by_file),
            outside_workspace: outside,
        }
    }

    /// A path a tool printed, as the workspace names it: a path through a symlink to the
    /// workspace (a build run from a symlinked checkout) is the workspace file.
    fn inside(&self, p: &Path) -> PathBuf {
        if self.workspaces.contains(p) {
            return p.to_path_buf();
        }
        match std::fs::canonicalize(p) {
            Ok(real) if self.workspaces.contains(&real) => real,
            _ => p.to_path_buf(),
        }
    }

    /// The diagnostics of the file a getDiagnostics `uri` names: raw `file://` + path, never
    /// percent-encoded (ccide-protocol(7) §5), else the file its path resolves to.
    pub fn of_uri(&self, uri: &str) -> Vec<Diagnostic> {
        let path = PathBuf::from(crate::files::raw_uri_path(uri));
        let ds = self.store.get(&path);
        if ds.is_empty()
            && let Ok(canon) = std::fs::canonicalize(&path)
        {
            return self.store.get(&canon);
        }
        ds
    }
}

/// What an import stored.
pub struct Imported {
    /// The workspace files it named.
    pub files: usize,
    pub diagnostics: usize,
    /// The files whose diagnostics changed.
    pub changed: usize,
    /// Diagnostics of files outside the workspace, dropped.
    pub outside_workspace: usize,
}

/// Per file, the diagnostics of each origin ("import", or one checker): a checker's new result
/// replaces only its own earlier one, so imported CI findings and a linter's live ones coexist.
type Files = BTreeMap<PathBuf, BTreeMap<String, Vec<Diagnostic>>>;

/// Every change is on disk before the call that made it returns, yet no disk write happens
/// under `files`: getDiagnostics answers from it within the CLI's 500 ms while a language
/// server's results keep coming. A change takes a snapshot of everything under `files`,
/// numbered in that order, and writes it under `saved` after; a snapshot older than one
/// already written is skipped, since that one holds this change too.
pub struct Store {
    file: PathBuf,
    files: Mutex<Files>,
    /// The number of the last snapshot taken (under `files`).
    taken: AtomicU64,
    /// The number of the last snapshot written.
    saved: Mutex<u64>,
}

/// At most `MAX_ITEMS` diagnostics per file and origin: the first ones, and first of all one
/// saying how many more there were, so the CLI and the model see that the list was cut (a
/// language server's result comes cut already, ccide-protocol(7) §5.4).
fn bounded(origin: &str, path: &Path, mut ds: Vec<Diagnostic>) -> Vec<Diagnostic> {
    const MAX: usize = langservers::MAX_ITEMS;
    if ds.len() > MAX {
        let more = ds.len() - (MAX - 1);
        ds.truncate(MAX - 1);
        ds.insert(
            0,
            Diagnostic {
                path: path.to_path_buf(),
                start_line: 0,
                start_char: 0,
                end_line: 0,
                end_char: 0,
                severity: Severity::Info,
                message: format!(
                    "{more} more diagnostics of this file from {origin} are not shown: ccide keeps {MAX} per file and source"
                ),
                source: "ccide".into(),
                code: None,
            },
        );
    }
    ds
}

fn merged(origins: &BTreeMap<String, Vec<Diagnostic>>) -> Vec<Diagnostic> {
    origins.values().flatten().cloned().collect()
}

impl Store {
    pub fn open(state_dir: &Path) -> Store {
        let file = state_dir.join("diagnostics.json");
        let mut files = Files::new();
        let saved: Value = std::fs::read(&file)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        for item in saved.as_array().into_iter().flatten() {
            let origin = item["origin"].as_str().unwrap_or("import").to_string();
            let text = item.to_string();
            for d in parse::parse(
                &text,
                Format::Protocol,
                Path::new("/"),
                "ccide",
                &mut |_| None,
            ) {
                files
                    .entry(d.path.clone())
                    .or_default()
                    .entry(origin.clone())
                    .or_default()
                    .push(d);
            }
        }
        Store {
            file,
            files: Mutex::new(files),
            taken: AtomicU64::new(0),
            saved: Mutex::new(0),
        }
    }

    /// Writes `diagnostics.json` from memory (after the state directory was deleted).
    pub fn save_now(&self) {
        let snapshot = self.snapshot(&self.files.lock().unwrap());
        self.save(snapshot);
    }

    /// What `diagnostics.json` holds for `files`, numbered: called under the `files` lock, so
    /// the numbers follow the order of the changes. Each file's diagnostics of each origin, in
    /// the protocol format `open` reads back: `{"uri", "diagnostics", "origin"}`.
    fn snapshot(&self, files: &Files) -> (u64, Vec<u8>) {
        let mut all = Vec::new();
        for (p, origins) in files {
            for (origin, ds) in origins {
                let mut e = Value::Object(Default::default());
                e["uri"] = crate::files::file_url(p).into();
                e["diagnostics"] = ds.iter().map(parse::to_wire).collect();
                e["origin"] = origin.as_str().into();
                all.push(e);
            }
        }
        let n = self.taken.fetch_add(1, Ordering::Relaxed) + 1;
        (n, Value::Array(all).to_string().into_bytes())
    }

    /// Writes a snapshot, without the `files` lock held, unless a newer one is written already.
    fn save(&self, (n, bytes): (u64, Vec<u8>)) {
        let mut saved = self.saved.lock().unwrap_or_else(|e| e.into_inner());
        if *saved >= n {
            return;
        }
        match crate::files::write_atomic(&self.file, &bytes, 0o600) {
            Ok(()) => *saved = n,
            Err(e) => crate::log::error!("cannot save diagnostics to {}: {e}", self.file.display()),
        }
    }

    /// Replaces `origin`'s diagnostics of every file in `by_file`; returns the files whose
    /// merged diagnostics changed, with the new merged list.
    pub fn replace(
        &self,
        origin: &str,
        by_file: BTreeMap<PathBuf, Vec<Diagnostic>>,
    ) -> Vec<(PathBuf, Vec<Diagnostic>)> {
        let mut files = self.files.lock().unwrap();
        let mut changed = Vec::new();
        for (p, ds) in by_file {
            let origins = files.entry(p.clone()).or_default();
            let before = merged(origins);
            if ds.is_empty() {
                origins.remove(origin);
            } else {
                origins.insert(origin.to_string(), bounded(origin, &p, ds));
            }
            let after = merged(origins);
            if origins.is_empty() {
                files.remove(&p);
            }
            if before != after {
                changed.push((p, after));
            }
        }
        let snapshot = (!changed.is_empty()).then(|| self.snapshot(&files));
        drop(files);
        if let Some(s) = snapshot {
            self.save(s);
        }
        changed
    }

    pub fn get(&self, p: &Path) -> Vec<Diagnostic> {
        self.files
            .lock()
            .unwrap()
            .get(p)
            .map(merged)
            .unwrap_or_default()
    }

    pub fn all(&self) -> Vec<(PathBuf, Vec<Diagnostic>)> {
        self.files
            .lock()
            .unwrap()
            .iter()
            .map(|(p, o)| (p.clone(), merged(o)))
            .collect()
    }

    /// Forgets one file's diagnostics, or all; returns the files cleared.
    pub fn clear(&self, only: Option<&Path>) -> Vec<PathBuf> {
        let mut files = self.files.lock().unwrap();
        let cleared: Vec<PathBuf> = match only {
            Some(p) => files
                .remove(p)
                .map(|_| vec![p.to_path_buf()])
                .unwrap_or_default(),
            None => std::mem::take(&mut *files).into_keys().collect(),
        };
        let snapshot = (!cleared.is_empty()).then(|| self.snapshot(&files));
        drop(files);
        if let Some(s) = snapshot {
            self.save(s);
        }
        cleared
    }
}

/// Imports what tools drop into `<state>/diagnostics/`, then removes the files.
pub fn watch_drop_dir(diagnostics: &Diagnostics, dir: &Path) {
    loop {
        std::thread::sleep(std::time::Duration::from_millis(500));
        let Ok(rd) = std::fs::read_dir(dir) else {
            continue;
        };
        let mut paths: Vec<PathBuf> = rd
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_file())
            .collect();
        crate::text::sort_by_bytes(&mut paths, |p| p.as_os_str().as_encoded_bytes().to_vec());
        for p in paths {
            // Files still being written are skipped by convention: name them `*.tmp`. Files
            // that could not be read were renamed `*.rejected` and stay for the user.
            if p.extension().is_some_and(|e| e == "tmp" || e == "rejected")
                || p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with('.'))
            {
                continue;
            }
            let bytes = match std::fs::read(&p) {
                Ok(b) => b,
                Err(e) => {
                    let mut kept = p.clone().into_os_string();
                    kept.push(".rejected");
                    let moved = std::fs::rename(&p, &kept);
                    crate::log::warn!(
                        "cannot read {}: {e}; {}",
                        p.display(),
                        match moved {
                            Ok(()) => format!("kept as {}", Path::new(&kept).display()),
                            Err(e) => format!("left in place ({e})"),
                        }
                    );
                    continue;
                }
            };
            // A compiler echoes source lines in their own encoding (gcc and a Latin-1 file):
            // a stray byte costs that line's text, never the whole import.
            let text = String::from_utf8_lossy(&bytes);
            let base = diagnostics.workspaces.first();
            let r = diagnostics.import(&text, Format::Auto, &base);
            crate::log::info!(
                "imported {} diagnostic(s) from {}",
                r.diagnostics,
                p.display()
            );
            let _ = std::fs::remove_file(&p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(label: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("ccide-store-{}-{label}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    fn error(p: &Path, message: &str) -> Vec<Diagnostic> {
        vec![Diagnostic {
            path: p.to_path_buf(),
            start_line: 1,
            start_char: 2,
            end_line: 1,
            end_char: 5,
            severity: Severity::Error,
            message: message.into(),
            source: "x".into(),
            code: None,
        }]
    }

    fn messages(ds: &[Diagnostic]) -> Vec<&str> {
        ds.iter().map(|d| d.message.as_str()).collect()
    }

    /// getDiagnostics answers from the store within the CLI's 500 ms: a result being written
    /// to disk (a slow disk, here the write held back) never holds up an answer, and the
    /// result is on disk once `replace` returns.
    #[test]
    fn answers_never_wait_for_the_disk() {
        let dir = temp_dir("slow-disk");
        let store = Arc::new(Store::open(&dir));
        let p = PathBuf::from("/w/a.py");
        let writing = store.saved.lock().unwrap();
        let (s, q) = (store.clone(), p.clone());
        let replacing = std::thread::spawn(move || {
            s.replace("lsp:x", BTreeMap::from([(q.clone(), error(&q, "new"))]))
        });
        let (tx, rx) = std::sync::mpsc::channel();
        let (s, q) = (store.clone(), p.clone());
        std::thread::spawn(move || {
            // Until the result is in, then what the answer holds.
            loop {
                let ds = s.get(&q);
                if !ds.is_empty() {
                    let _ = tx.send(ds);
                    return;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        let answered = rx.recv_timeout(Duration::from_secs(10));
        drop(writing);
        assert_eq!(
            messages(&answered.expect("answered while the write waits")),
            ["new"]
        );
        assert_eq!(replacing.join().unwrap().len(), 1);
        assert_eq!(messages(&Store::open(&dir).get(&p)), ["new"], "on disk");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Two results written by two threads: the older snapshot, written last, is skipped, so
    /// the file holds the newer.
    #[test]
    fn an_older_snapshot_never_replaces_a_newer_one_on_disk() {
        let dir = temp_dir("order");
        let store = Store::open(&dir);
        let p = PathBuf::from("/w/a.py");
        store.replace("lsp:x", BTreeMap::from([(p.clone(), error(&p, "old"))]));
        let older = store.snapshot(&store.files.lock().unwrap());
        store.replace("lsp:x", BTreeMap::from([(p.clone(), error(&p, "new"))]));
        store.save(older);
        assert_eq!(messages(&Store::open(&dir).get(&p)), ["new"]);
        // A snapshot of now is written (after the state directory was deleted).
        std::fs::remove_dir_all(&dir).unwrap();
        std::fs::create_dir_all(&dir).unwrap();
        store.save_now();
        assert_eq!(messages(&Store::open(&dir).get(&p)), ["new"]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
