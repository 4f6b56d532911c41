//! Diagnostics from the project's own checkers, run in the background: a request never runs
//! a checker on its own thread. getDiagnostics {uri} answers from the store and starts a check
//! when the file changed since its last one; getDiagnostics {} also waits, up to a budget, for
//! the checks of changed files, so the answer after an edit reflects the file as written.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant, SystemTime};

use crate::checkparse::{self, Diagnostic, Format};
use crate::serve::App;

pub struct Checker {
    pub pattern: String,
    pub format: Format,
    pub words: Vec<String>,
    /// Whether the command names `{file}`; otherwise it checks the whole project.
    pub per_file: bool,
    /// How `bash -n` reports, turned into compiler lines before parsing.
    bash_syntax: bool,
}

impl Checker {
    /// `PATTERN=COMMAND`, COMMAND with an optional `FORMAT:` prefix.
    pub fn parse(spec: &str) -> Result<Checker, String> {
        let (pattern, command) = spec
            .split_once('=')
            .filter(|(p, c)| !p.trim().is_empty() && !c.trim().is_empty())
            .ok_or_else(|| format!("'{spec}' is not PATTERN=COMMAND"))?;
        let (format, command) = checkparse::split_format_prefix(command.trim());
        let words = crate::pattern::split_words(command).map_err(|e| format!("'{spec}': {e}"))?;
        if words.is_empty() {
            return Err(format!("'{spec}' has an empty command"));
        }
        Ok(Checker {
            pattern: pattern.trim().to_string(),
            format,
            per_file: words.iter().any(|w| w.contains("{file}")),
            words,
            bash_syntax: false,
        })
    }

    fn source(&self) -> String {
        Path::new(&self.words[0])
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }
}

/// Built-in checkers for the tools found on PATH.
pub fn defaults(workspace: &Path) -> Vec<Checker> {
    let mut out = Vec::new();
    let mut add = |spec: &str, bash_syntax: bool| {
        if let Ok(mut c) = Checker::parse(spec) {
            c.bash_syntax = bash_syntax;
            out.push(c);
        }
    };
    if on_path("ruff") {
        add(
            "*.py=ruff:ruff check --output-format concise --no-fix --quiet {file}",
            false,
        );
    } else if on_path("python3") {
        add(PY_COMPILE, false);
    }
    if on_path("shellcheck") {
        add("*.sh=compiler:shellcheck -f gcc {file}", false);
    } else if on_path("bash") {
        add("*.sh=compiler:bash -n {file}", true);
    }
    if on_path("cargo") && workspace.join("Cargo.toml").is_file() {
        add(
            "*.rs=cargo:cargo check --message-format=json --quiet",
            false,
        );
    }
    out
}

/// Syntax errors only, printed as compiler lines, when ruff is not installed.
const PY_COMPILE: &str = r#"*.py=compiler:python3 -c "import sys
try:
    compile(open(sys.argv[1], 'rb').read(), sys.argv[1], 'exec')
except SyntaxError as e:
    print('%s:%d:%d: error: %s' % (sys.argv[1], e.lineno or 1, e.offset or 1, e.msg))" {file}"#;

pub fn on_path(program: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|path| {
        std::env::split_paths(&path).any(|d| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(d.join(program))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

/// What a file looked like when it was last checked.
#[derive(Clone, Copy, PartialEq, Eq)]
struct FileState {
    size: u64,
    mtime: Option<SystemTime>,
}

fn state_of(p: &Path) -> Option<FileState> {
    let m = std::fs::metadata(p).ok()?;
    Some(FileState {
        size: m.len(),
        mtime: m.modified().ok(),
    })
}

/// A check in progress; waiters block on the condvar until `done`.
pub struct Running {
    done: Mutex<bool>,
    cv: Condvar,
    /// The file changed while this check ran: run again before reporting done.
    rerun: Mutex<bool>,
}

pub struct Checks {
    pub checkers: Vec<Checker>,
    pub wait: Duration,
    pub timeout: Duration,
    /// The state each tracked file had when its last check started.
    checked: Mutex<HashMap<PathBuf, Option<FileState>>>,
    /// Per check key (a file, or a project checker's index): the check running now.
    running: Mutex<HashMap<String, Arc<Running>>>,
    /// Files each project checker reported last time, so fixed ones are cleared.
    reported: Mutex<HashMap<usize, Vec<PathBuf>>>,
}

impl Checks {
    pub fn new(checkers: Vec<Checker>, wait: Duration, timeout: Duration) -> Checks {
        Checks {
            checkers,
            wait,
            timeout,
            checked: Mutex::default(),
            running: Mutex::default(),
            reported: Mutex::default(),
        }
    }

    fn checker_for(&self, app: &App, file: &Path) -> Option<(usize, PathBuf)> {
        let ws = app.workspaces.read().unwrap();
        let root = ws.iter().find(|w| file.starts_with(w))?.clone();
        let rel = file
            .strip_prefix(&root)
            .ok()?
            .to_string_lossy()
            .into_owned();
        self.checkers
            .iter()
            .position(|c| crate::pattern::file_pattern_match(&c.pattern, &rel))
            .map(|i| (i, root))
    }

    /// Starts a check of `file` if it has a checker and changed since its last check;
    /// returns the running check to wait for, if any.
    pub fn refresh(&self, app: &Arc<App>, file: &Path) -> Option<Arc<Running>> {
        let (index, root) = self.checker_for(app, file)?;
        let now = state_of(file);
        {
            let mut checked = self.checked.lock().unwrap();
            if checked.get(file) == Some(&now) {
                return self.running_for(index, file);
            }
            checked.insert(file.to_path_buf(), now);
        }
        let key = self.key(index, file);
        let mut running = self.running.lock().unwrap();
        if let Some(r) = running.get(&key) {
            // Coalesced: the running check may have read the old content, so it runs once
            // more when it ends, and waiters wait for that run too.
            *r.rerun.lock().unwrap() = true;
            return Some(r.clone());
        }
        let r = Arc::new(Running {
            done: Mutex::new(false),
            cv: Condvar::new(),
            rerun: Mutex::new(false),
        });
        running.insert(key.clone(), r.clone());
        drop(running);
        let key_on_error = key.clone();
        let app = app.clone();
        let target = file.to_path_buf();
        let spawned = std::thread::Builder::new()
            .name("checker".into())
            .stack_size(crate::transport::THREAD_STACK)
            .spawn(move || {
                let checks = &app.checks;
                loop {
                    run_check(&app, index, &target, &root);
                    let mut running = checks.running.lock().unwrap();
                    let Some(r) = running.get(&key).cloned() else {
                        break;
                    };
                    if std::mem::take(&mut *r.rerun.lock().unwrap()) {
                        continue;
                    }
                    running.remove(&key);
                    *r.done.lock().unwrap() = true;
                    r.cv.notify_all();
                    break;
                }
            });
        if let Err(e) = spawned {
            crate::error!("cannot start a checker thread: {e}");
            self.running.lock().unwrap().remove(&key_on_error);
            return None;
        }
        Some(r)
    }

    fn key(&self, index: usize, file: &Path) -> String {
        if self.checkers[index].per_file {
            format!("file:{}", file.display())
        } else {
            format!("project:{index}")
        }
    }

    fn running_for(&self, index: usize, file: &Path) -> Option<Arc<Running>> {
        self.running
            .lock()
            .unwrap()
            .get(&self.key(index, file))
            .cloned()
    }

    /// For getDiagnostics {}: refreshes every tracked file and waits for the checks, at most
    /// `self.wait` in all.
    pub fn refresh_all_and_wait(&self, app: &Arc<App>) {
        let mut files: Vec<PathBuf> = self.checked.lock().unwrap().keys().cloned().collect();
        files.extend(app.diagnostics.all().into_iter().map(|(p, _)| p));
        files.sort();
        files.dedup();
        let pending: Vec<Arc<Running>> =
            files.iter().filter_map(|f| self.refresh(app, f)).collect();
        wait_all(&pending, self.wait);
    }
}

/// Waits for the checks to finish, at most `budget` in all.
pub fn wait_all(pending: &[Arc<Running>], budget: Duration) {
    let deadline = Instant::now() + budget;
    for r in pending {
        let mut done = r.done.lock().unwrap();
        while !*done {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return;
            }
            done = r.cv.wait_timeout(done, left).unwrap().0;
        }
    }
}

fn run_check(app: &App, index: usize, file: &Path, root: &Path) {
    let checker = &app.checks.checkers[index];
    let words: Vec<String> = checker
        .words
        .iter()
        .map(|w| w.replace("{file}", &file.to_string_lossy()))
        .collect();
    let started = Instant::now();
    let output = match run_with_timeout(&words, root, app.checks.timeout) {
        Ok(o) => o,
        Err(e) => {
            crate::warn!(
                "checker `{}` for {}: {e}",
                checker.words.join(" "),
                file.display()
            );
            return;
        }
    };
    let output = if checker.bash_syntax {
        bash_to_compiler(&output)
    } else {
        output
    };
    let found = checkparse::parse(&output, checker.format, root, &checker.source());
    crate::debug!(
        "checker {} for {} found {} diagnostic(s) in {:?}",
        checker.source(),
        file.display(),
        found.len(),
        started.elapsed()
    );
    let mut by_file: BTreeMap<PathBuf, Vec<Diagnostic>> = BTreeMap::new();
    if checker.per_file {
        by_file.insert(
            file.to_path_buf(),
            found.into_iter().filter(|d| d.path == file).collect(),
        );
    } else {
        let ws = app.workspaces.read().unwrap().clone();
        let mut reported = app.checks.reported.lock().unwrap();
        for old in reported.remove(&index).unwrap_or_default() {
            by_file.entry(old).or_default();
        }
        for d in found {
            if ws.iter().any(|w| d.path.starts_with(w)) {
                by_file.entry(d.path.clone()).or_default().push(d);
            }
        }
        reported.insert(
            index,
            by_file
                .iter()
                .filter(|(_, v)| !v.is_empty())
                .map(|(k, _)| k.clone())
                .collect(),
        );
    }
    for (p, ds) in app
        .diagnostics
        .replace(&format!("checker {index}"), by_file)
    {
        crate::diagnostics::broadcast_change(app, &p, &ds);
    }
}

/// Runs a command without a shell, stdout and stderr together, killed (with its process
/// group, so cargo's rustc goes too) after `timeout`.
fn run_with_timeout(words: &[String], dir: &Path, timeout: Duration) -> Result<String, String> {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(&words[0]);
    cmd.args(&words[1..])
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    crate::sys::unblock_all_signals_in_child(&mut cmd);
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", words[0]))?;
    let mut stderr = child.stderr.take().expect("piped stderr");
    let err_reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = stderr.read_to_end(&mut s);
        s
    });
    let mut stdout = child.stdout.take().expect("piped stdout");
    let out_reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = stdout.read_to_end(&mut s);
        s
    });
    let deadline = Instant::now() + timeout;
    loop {
        match child.try_wait() {
            Ok(Some(_)) => break,
            Ok(None) if Instant::now() >= deadline => {
                let _ = crate::sys::kill(-(child.id() as i32), crate::sys::SIGKILL);
                let _ = child.wait();
                return Err(format!(
                    "timed out after {}; killed",
                    crate::server::human_duration(timeout)
                ));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(5)),
            Err(e) => return Err(e.to_string()),
        }
    }
    let mut all = out_reader.join().unwrap_or_default();
    all.extend(err_reader.join().unwrap_or_default());
    Ok(String::from_utf8_lossy(&all).into_owned())
}

/// `bash -n` says `FILE: line N: message`; turn that into `FILE:N:1: error: message`.
fn bash_to_compiler(output: &str) -> String {
    let mut out = String::new();
    for l in output.lines() {
        if let Some((file, rest)) = l.split_once(": line ")
            && let Some((n, msg)) = rest.split_once(": ")
            && n.bytes().all(|b| b.is_ascii_digit())
        {
            out.push_str(&format!("{file}:{n}:1: error: {msg}\n"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checker_specs() {
        let c = Checker::parse("*.py=ruff:ruff check {file}").unwrap();
        assert_eq!(
            (c.pattern.as_str(), c.format, c.per_file),
            ("*.py", Format::Ruff, true)
        );
        let c = Checker::parse("src/**/*.rs=cargo check --message-format=json").unwrap();
        assert!(!c.per_file);
        assert!(Checker::parse("nothing").is_err());
        assert!(Checker::parse("*.py='unterminated").is_err());
    }

    #[test]
    fn bash_n_lines_become_compiler_lines() {
        assert_eq!(
            bash_to_compiler("/w/a b.sh: line 3: syntax error near unexpected token `fi'\n"),
            "/w/a b.sh:3:1: error: syntax error near unexpected token `fi'\n"
        );
    }
}
