//! The diagnostics store and getDiagnostics (PROTOCOL 5). Answers come from the store at once:
//! the CLI gives a baseline call 500 ms and disables baselines after three misses, so nothing
//! slow ever runs on the request path.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::{Map, Value, json};

use crate::checkparse::{Diagnostic, Format, Severity};
use crate::server::{Call, Reply};
use crate::tools::{arg_str, tool_json};

/// Per file, the diagnostics of each origin ("import", or one checker): a checker's new result
/// replaces only its own earlier one, so imported CI findings and a linter's live ones coexist.
type Files = BTreeMap<PathBuf, BTreeMap<String, Vec<Diagnostic>>>;

pub struct Store {
    file: PathBuf,
    files: Mutex<Files>,
}

fn merged(origins: &BTreeMap<String, Vec<Diagnostic>>) -> Vec<Diagnostic> {
    origins.values().flatten().cloned().collect()
}

/// The wire form of one diagnostic: 0-based positions, severity as the CLI spells it.
pub fn to_wire(d: &Diagnostic) -> Value {
    let mut v = json!({
        "message": d.message,
        "severity": d.severity.as_str(),
        "range": {
            "start": {"line": d.start_line, "character": d.start_char},
            "end": {"line": d.end_line, "character": d.end_char},
        },
        "source": d.source,
    });
    if let Some(c) = &d.code {
        v["code"] = c.as_str().into();
    }
    v
}

fn uri_of(p: &Path) -> String {
    crate::editor::file_url(p)
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
            for d in crate::checkparse::parse(
                &item.to_string(),
                Format::Protocol,
                Path::new("/"),
                "ccide",
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
        }
    }

    fn save(&self, files: &Files) {
        let mut all = Vec::new();
        for (p, origins) in files {
            for (origin, ds) in origins {
                all.push(json!({"uri": uri_of(p), "origin": origin,
                    "diagnostics": ds.iter().map(to_wire).collect::<Vec<_>>()}));
            }
        }
        if let Err(e) =
            crate::files::write_atomic(&self.file, Value::Array(all).to_string().as_bytes(), 0o600)
        {
            crate::error!("cannot save diagnostics to {}: {e}", self.file.display());
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
                origins.insert(origin.to_string(), ds);
            }
            let after = merged(origins);
            if origins.is_empty() {
                files.remove(&p);
            }
            if before != after {
                changed.push((p, after));
            }
        }
        if !changed.is_empty() {
            self.save(&files);
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
        if !cleared.is_empty() {
            self.save(&files);
        }
        cleared
    }
}

/// Stores diagnostics produced elsewhere; files outside the workspace are dropped. Every file
/// named in the input (even with an empty list, in protocol format) is replaced.
pub fn import(app: &crate::serve::App, text: &str, format: Format, base: &Path) -> Value {
    let workspaces = app.workspaces.read().unwrap().clone();
    let mut by_file: BTreeMap<PathBuf, Vec<Diagnostic>> = BTreeMap::new();
    // Files listed with no diagnostics in protocol input mean "now clean".
    if matches!(format, Format::Protocol | Format::Auto)
        && let Ok(v) = serde_json::from_str::<Value>(text.trim())
    {
        let items = match v {
            Value::Array(a) => a,
            o @ Value::Object(_) => vec![o],
            _ => Vec::new(),
        };
        for it in items {
            if let Some(p) = it["uri"].as_str().and_then(|u| u.strip_prefix("file://")) {
                by_file.entry(PathBuf::from(p)).or_default();
            }
        }
    }
    let mut outside = 0;
    for d in crate::checkparse::parse(text, format, base, "import") {
        if workspaces.iter().any(|w| d.path.starts_with(w)) {
            by_file.entry(d.path.clone()).or_default().push(d);
        } else {
            outside += 1;
        }
    }
    by_file.retain(|p, _| workspaces.iter().any(|w| p.starts_with(w)));
    let count: usize = by_file.values().map(Vec::len).sum();
    let files = by_file.len();
    let changed = app.diagnostics.replace("import", by_file);
    for (p, ds) in &changed {
        broadcast_change(app, p, ds);
    }
    json!({"ok": true, "files": files, "diagnostics": count, "changed": changed.len(), "outside_workspace": outside})
}

pub fn broadcast_change(app: &crate::serve::App, p: &Path, ds: &[Diagnostic]) {
    app.server.broadcast(
        "diagnostics_changed",
        json!({"uri": uri_of(p), "diagnostics": ds.iter().map(to_wire).collect::<Vec<_>>()}),
    );
}

/// getDiagnostics {uri?}: with a uri, the first element answers exactly that uri (the CLI
/// discards an answer whose uri differs), with an empty list when there is nothing; without,
/// every file with diagnostics.
pub fn get_diagnostics(call: &Call, args: &Map<String, Value>) -> Reply {
    let uri = match arg_str(args, "uri", false) {
        Ok(u) => u.filter(|u| !u.is_empty()),
        Err(e) => return Reply::Now(Err(e)),
    };
    let app = call.app;
    // The file's check, if one runs now (started here when the file changed since its last).
    let running = uri.as_deref().and_then(|u| {
        let raw = u.strip_prefix("file://").unwrap_or(u);
        app.resolve(raw)
            .ok()
            .and_then(|p| app.checks.refresh(app, &p))
    });
    if uri.is_some() && running.is_none() {
        return Reply::Now(Ok(tool_json(&Value::Array(answer_for(app, uri)))));
    }
    // Waiting for checks must not hold up the connection: answer from another thread. The
    // CLI's baseline call before an edit ({uri}, 500 ms deadline) waits a little for a check
    // already under way, so an error the file had before is in the baseline and is not later
    // reported as introduced by the edit; {} waits up to --diagnostics-wait.
    let waiter = app.clone();
    crate::server::answer_later(
        std::sync::Arc::new(call.defer()),
        Box::new(move || {
            match &running {
                Some(r) => crate::checkers::wait_all(std::slice::from_ref(r), BASELINE_WAIT),
                None => waiter.checks.refresh_all_and_wait(&waiter),
            }
            Some(tool_json(&Value::Array(answer_for(&waiter, uri))))
        }),
    )
}

/// How long a `{uri}` request waits for a running check: well inside the CLI's 500 ms.
const BASELINE_WAIT: std::time::Duration = std::time::Duration::from_millis(350);

/// The answer from the store: the requested uri echoed exactly, or every file.
fn answer_for(app: &crate::serve::App, uri: Option<String>) -> Vec<Value> {
    let store = &app.diagnostics;
    let Some(uri) = uri else {
        return every_file(store);
    };
    // Raw `file://` + path, never percent-encoded (PROTOCOL 5).
    let raw = uri.strip_prefix("file://").unwrap_or(&uri);
    let path = PathBuf::from(raw);
    let mut ds = store.get(&path);
    if ds.is_empty()
        && let Ok(canon) = std::fs::canonicalize(&path)
    {
        ds = store.get(&canon);
    }
    vec![json!({"uri": uri, "diagnostics": ds.iter().map(to_wire).collect::<Vec<_>>()})]
}

fn every_file(store: &Store) -> Vec<Value> {
    store
        .all()
        .iter()
        .map(|(p, ds)| json!({"uri": uri_of(p), "diagnostics": ds.iter().map(to_wire).collect::<Vec<_>>()}))
        .collect()
}

/// Imports what tools drop into `<state>/diagnostics/`, then removes the files.
pub fn watch_drop_dir(app: &std::sync::Arc<crate::serve::App>, dir: &Path) {
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
        paths.sort();
        for p in paths {
            // Files still being written are skipped by convention: name them `*.tmp`.
            if p.extension().is_some_and(|e| e == "tmp")
                || p.file_name()
                    .is_some_and(|n| n.to_string_lossy().starts_with('.'))
            {
                continue;
            }
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            let base = app.workspaces.read().unwrap()[0].clone();
            let r = import(app, &text, Format::Auto, &base);
            crate::info!(
                "imported {} diagnostic(s) from {}",
                r["diagnostics"],
                p.display()
            );
            let _ = std::fs::remove_file(&p);
        }
    }
}

/// One line per diagnostic, as `ccide diagnostics` prints them.
pub fn describe(p: &Path, d: &Diagnostic) -> String {
    let code = d
        .code
        .as_deref()
        .map(|c| format!(" [{c}]"))
        .unwrap_or_default();
    format!(
        "{}:{}:{}: {}: {} ({}){code}",
        p.display(),
        d.start_line + 1,
        d.start_char + 1,
        match d.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Info => "info",
            Severity::Hint => "hint",
        },
        d.message,
        d.source
    )
}
