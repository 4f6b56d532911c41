//! Diagnostics from the project's own checkers, run in the background: a request never runs
//! a checker on its own thread. getDiagnostics {uri} answers from the store and starts a check
//! when the file changed since its last one; getDiagnostics {} also waits, up to a budget, for
//! the checks of changed files, so the answer after an edit reflects the file as written.
//! Which check runs, and running it, are here; the thread that runs a check and publishes its
//! result is `Diagnostics::check`'s, so this file needs nothing of its parent's.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use super::parse::{self, Diagnostic, Format};
use crate::workspaces::Workspaces;

/// A checker's output beyond this is not read: the diagnostics that fit are kept.
const MAX_OUTPUT: u64 = 8 << 20;
/// Checks running at once (each on a thread of its own). A file asked about beyond that is
/// checked on a later request: a client asking about ten thousand files costs eight threads.
const MAX_RUNNING: usize = 8;

pub struct Checker {
    pub pattern: String,
    pub format: Format,
    pub words: Vec<String>,
    /// Whether the command names `{file}`; otherwise it checks the whole project.
    pub per_file: bool,
    /// How `bash -n` reports, turned into compiler lines before parsing.
    bash_syntax: bool,
    /// A built-in: it steps aside for a language server that covers the file, and runs by the
    /// path `trust::find` gave, with `trust::command`'s PATH.
    builtin: bool,
    /// The user trusts the workspace (`--trust-workspace`); for a built-in.
    trusted: bool,
}

impl Checker {
    /// `PATTERN=COMMAND`, COMMAND with an optional `FORMAT:` prefix.
    pub fn parse(spec: &str) -> Result<Checker, String> {
        let (pattern, command) = crate::pattern::split_spec(spec)?;
        let (format, command) = parse::split_format_prefix(command);
        let words = crate::pattern::split_words(command).map_err(|e| format!("'{spec}': {e}"))?;
        if words.is_empty() {
            return Err(format!("'{spec}' has an empty command"));
        }
        Ok(Checker {
            pattern: pattern.to_string(),
            format,
            per_file: words.iter().any(|w| w.contains("{file}")),
            words,
            bash_syntax: false,
            builtin: false,
            trusted: false,
        })
    }

    fn source(&self) -> String {
        crate::pattern::program_name(&self.words[0])
    }
}

/// Built-in checkers for the tools found on PATH, as `trust::find` finds them for
/// `workspaces` (the first decides which). `cargo check` builds and runs the workspace's
/// build scripts and proc macros (and follows its .cargo/config.toml): a program the
/// repository ships, so only if the user `trusted` the workspace (`--trust-workspace`).
pub fn defaults(workspaces: &[PathBuf], trusted: bool) -> Vec<Checker> {
    let find = |program: &str| crate::trust::find(program, workspaces, trusted);
    // `spec`'s first word is the program, replaced by the path found.
    let builtin = |program: &Path, spec: &str, bash_syntax: bool| {
        Checker::parse(spec).ok().map(|mut c| {
            c.words[0] = program.to_string_lossy().into_owned();
            c.bash_syntax = bash_syntax;
            c.builtin = true;
            c.trusted = trusted;
            c
        })
    };
    let mut out = Vec::new();
    if let Some(p) = find("ruff") {
        out.extend(builtin(
            &p,
            // JSON, not the concise form: it gives each finding's end, so a range.
            "*.py=ruff:ruff check --output-format json --no-fix --quiet {file}",
            false,
        ));
    } else if let Some(p) = find("python3") {
        out.push(Checker {
            pattern: "*.py".into(),
            format: Format::Compiler,
            words: vec![
                p.to_string_lossy().into_owned(),
                "-c".into(),
                PY_COMPILE.into(),
                "{file}".into(),
            ],
            per_file: true,
            bash_syntax: false,
            builtin: true,
            trusted,
        });
    }
    if let Some(p) = find("shellcheck") {
        out.extend(builtin(&p, "*.sh=compiler:shellcheck -f gcc {file}", false));
    } else if let Some(p) = find("bash") {
        out.extend(builtin(&p, "*.sh=compiler:bash -n {file}", true));
    }
    if trusted
        && workspaces[0].join("Cargo.toml").is_file()
        && let Some(p) = find("cargo")
    {
        out.extend(builtin(
            &p,
            "*.rs=cargo:cargo check --message-format=json --quiet",
            false,
        ));
    }
    out
}

/// Syntax errors only, printed as compiler lines, when ruff is not installed.
const PY_COMPILE: &str = include_str!("py_compile.py");

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
    /// The stamp each tracked file had when its last check started (None: missing, or not a
    /// regular file).
    checked: Mutex<HashMap<PathBuf, Option<crate::files::Stamp>>>,
    /// Per check key (a file, or a project checker's index): the check running now. At most
    /// `MAX_RUNNING`, so a list (a map of its own type would cost more binary than it saves).
    running: Mutex<Vec<(String, Arc<Running>)>>,
    /// Files each project checker reported last time (by checker index), so fixed ones are
    /// cleared.
    reported: Mutex<Vec<Vec<PathBuf>>>,
}

impl Checks {
    pub fn new(checkers: Vec<Checker>, wait: Duration, timeout: Duration) -> Checks {
        Checks {
            reported: Mutex::new(checkers.iter().map(|_| Vec::new()).collect()),
            checkers,
            wait,
            timeout,
            checked: Mutex::default(),
            running: Mutex::default(),
        }
    }

    fn checker_for(&self, workspaces: &Workspaces, file: &Path) -> Option<(usize, PathBuf)> {
        let root = workspaces.holder(file)?;
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

    /// The files checked so far.
    pub fn tracked(&self) -> Vec<PathBuf> {
        self.checked.lock().unwrap().keys().cloned().collect()
    }

    fn key(&self, index: usize, file: &Path) -> String {
        if self.checkers[index].per_file {
            format!("file:{}", file.display())
        } else {
            format!("project:{index}")
        }
    }
}

/// A check to run: which checker, on which file, from which workspace root.
#[derive(Clone)]
pub struct Job {
    index: usize,
    file: PathBuf,
    root: PathBuf,
    /// The file, or the project checker's index (see `Checks::key`).
    key: String,
}

impl Job {
    /// The origin whose diagnostics the job's results replace in the store.
    pub fn origin(&self) -> String {
        format!("checker {}", self.index)
    }
}

impl Checks {
    /// Claims a check of `file` if it has a checker and changed since its last check.
    /// Returns the check to wait for, with the job to start when this call claimed a new one
    /// (whoever gets it runs `run` and then `finish` until `finish` says done); None when
    /// there is nothing to wait for. A built-in checker steps aside for a file `covered` by a
    /// language server: that gives type-level diagnostics within the deadlines, and the
    /// built-in batch checker for the language would only repeat (part of) them late.
    pub fn begin(
        &self,
        workspaces: &Workspaces,
        file: &Path,
        covered: bool,
    ) -> Option<(Arc<Running>, Option<Job>)> {
        let (index, root) = self.checker_for(workspaces, file)?;
        if self.checkers[index].builtin && covered {
            return None;
        }
        let now = crate::files::stamp(file);
        let key = self.key(index, file);
        let mut running = self.running.lock().unwrap();
        let at = running.iter().position(|(k, _)| *k == key);
        {
            let mut checked = self.checked.lock().unwrap();
            if checked.get(file) == Some(&now) {
                return at.map(|i| (running[i].1.clone(), None));
            }
            if at.is_none() && running.len() >= MAX_RUNNING {
                // Not recorded as checked: the next request for it starts the check.
                return None;
            }
            checked.insert(file.to_path_buf(), now);
        }
        if let Some(i) = at {
            let r = &running[i].1;
            // Coalesced: the running check may have read the old content, so it runs once
            // more when it ends, and waiters wait for that run too.
            *r.rerun.lock().unwrap() = true;
            return Some((r.clone(), None));
        }
        let r = Arc::new(Running {
            done: Mutex::new(false),
            cv: Condvar::new(),
            rerun: Mutex::new(false),
        });
        running.push((key.clone(), r.clone()));
        let job = Job {
            index,
            file: file.to_path_buf(),
            root,
            key,
        };
        Some((r, Some(job)))
    }

    /// `file` is covered by a language server again: if its built-in checker ran on it (while
    /// the server did not deliver), the origin whose diagnostics of the file are now stale.
    pub fn step_aside(&self, workspaces: &Workspaces, file: &Path) -> Option<String> {
        let (index, _) = self.checker_for(workspaces, file)?;
        if !self.checkers[index].builtin || self.checked.lock().unwrap().remove(file).is_none() {
            return None;
        }
        Some(format!("checker {index}"))
    }

    /// Ends a run of `job`: false when the file changed while it ran, so it must run again;
    /// true once its waiters are released.
    pub fn finish(&self, job: &Job) -> bool {
        let mut running = self.running.lock().unwrap();
        let Some(i) = running.iter().position(|(k, _)| *k == job.key) else {
            return true;
        };
        if std::mem::take(&mut *running[i].1.rerun.lock().unwrap()) {
            return false;
        }
        let (_, r) = running.swap_remove(i);
        *r.done.lock().unwrap() = true;
        r.cv.notify_all();
        true
    }

    /// Releases the waiters of a job that could not start.
    pub fn abandon(&self, job: &Job) {
        let mut running = self.running.lock().unwrap();
        if let Some(i) = running.iter().position(|(k, _)| *k == job.key) {
            let (_, r) = running.swap_remove(i);
            *r.done.lock().unwrap() = true;
            r.cv.notify_all();
        }
    }

    /// Runs `job`'s checker (its output captured under `scratch`): the diagnostics of each
    /// file it reports on, an empty list for a file it no longer reports, or None when it
    /// could not run or timed out. Columns are converted against the files as they are
    /// read right after the run.
    pub fn run(
        &self,
        job: &Job,
        workspaces: &Workspaces,
        scratch: &Path,
    ) -> Option<BTreeMap<PathBuf, Vec<Diagnostic>>> {
        let (index, file, root) = (job.index, job.file.as_path(), job.root.as_path());
        let checker = &self.checkers[index];
        let words: Vec<String> = checker
            .words
            .iter()
            .map(|w| w.replace("{file}", &file.to_string_lossy()))
            .collect();
        let started = Instant::now();
        let mut cmd = if checker.builtin {
            let folders = workspaces.list();
            let program = Path::new(&words[0]);
            // A folder added since serve started may hold the program found then.
            if !crate::trust::allowed(program, &folders, checker.trusted) {
                crate::log::warn!(
                    "built-in checker {} lies inside a workspace folder and runs only with --trust-workspace; {} is not checked",
                    program.display(),
                    file.display()
                );
                return None;
            }
            crate::trust::command(program, &folders, checker.trusted)
        } else {
            Command::new(&words[0])
        };
        cmd.args(&words[1..]).current_dir(root);
        let output = match crate::proc::run(cmd, None, scratch, self.timeout, MAX_OUTPUT) {
            Ok(ran) if ran.status.is_some() => {
                if ran.truncated {
                    crate::log::warn!(
                        "checker {} for {} printed more than {} MiB; only the diagnostics in the first {} MiB of each stream are kept",
                        checker.source(),
                        file.display(),
                        MAX_OUTPUT >> 20,
                        MAX_OUTPUT >> 20
                    );
                }
                let mut all = ran.stdout;
                all.extend(ran.stderr);
                String::from_utf8_lossy(&all).into_owned()
            }
            Ok(_) => {
                crate::log::warn!(
                    "checker `{}` for {}: timed out after {}; killed",
                    checker.words.join(" "),
                    file.display(),
                    crate::text::human_duration(self.timeout)
                );
                return None;
            }
            Err(e) => {
                crate::log::warn!(
                    "checker `{}` for {}: cannot run {}: {e}",
                    checker.words.join(" "),
                    file.display(),
                    words[0]
                );
                return None;
            }
        };
        let output = if checker.bash_syntax {
            bash_to_compiler(&output)
        } else {
            output
        };
        let mut read = |p: &Path| parse::read_source(workspaces, p);
        let found = parse::parse(&output, checker.format, root, &checker.source(), &mut read);
        crate::log::debug!(
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
            let mut reported = self.reported.lock().unwrap();
            for old in std::mem::take(&mut reported[index]) {
                by_file.entry(old).or_default();
            }
            for d in found {
                if workspaces.contains(&d.path) {
                    by_file.entry(d.path.clone()).or_default().push(d);
                }
            }
            reported[index] = by_file
                .iter()
                .filter(|(_, v)| !v.is_empty())
                .map(|(k, _)| k.clone())
                .collect();
        }
        Some(by_file)
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
    fn at_most_eight_checks_run_at_once_and_the_rest_wait_for_a_later_request() {
        let mut ts = crate::state::testing::state();
        let gate = ts.root.join("gate");
        let spec = format!(
            "*.py=sh -c 'while [ ! -e {} ]; do sleep 0.01; done' {{file}}",
            gate.display()
        );
        let state = Arc::get_mut(&mut ts.state).unwrap();
        let diagnostics = Arc::get_mut(&mut state.diagnostics).unwrap();
        diagnostics
            .checks
            .checkers
            .push(Checker::parse(&spec).unwrap());
        let files: Vec<PathBuf> = (0..10)
            .map(|i| ts.write(&format!("f{i}.py"), "x\n"))
            .collect();
        let d = &ts.state.diagnostics;
        let started: Vec<bool> = files
            .iter()
            .map(|f| !d.refresh(f, None).is_empty())
            .collect();
        assert_eq!(started.iter().filter(|s| **s).count(), MAX_RUNNING);
        assert_eq!(d.checks.running.lock().unwrap().len(), MAX_RUNNING);
        // The two refused ones are not taken as checked: asked again once there is room,
        // they run.
        std::fs::write(&gate, "").unwrap();
        let end = Instant::now() + Duration::from_secs(20);
        while !d.checks.running.lock().unwrap().is_empty() {
            assert!(Instant::now() < end);
            std::thread::sleep(Duration::from_millis(10));
        }
        assert!(!d.refresh(&files[9], None).is_empty());
    }

    #[test]
    fn bash_n_lines_become_compiler_lines() {
        assert_eq!(
            bash_to_compiler("/w/a b.sh: line 3: syntax error near unexpected token `fi'\n"),
            "/w/a b.sh:3:1: error: syntax error near unexpected token `fi'\n"
        );
    }
}
