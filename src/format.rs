//! reformat_file (seed 000): the project's formatter on a temporary copy beside the file; the
//! original is replaced atomically only when the formatter succeeded.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

use crate::serve::App;
use crate::server::{Call, Reply};
use crate::tools::{arg_str, tool_error, tool_texts};

/// A formatter running longer is killed.
const TIME_LIMIT: Duration = Duration::from_secs(30);

/// Built-in formatters, used when no `--formatter` matches and the program is on PATH:
/// (patterns, program, command). Without `{file}` the text goes through stdin and stdout
/// (rustfmt would otherwise also format the modules a file declares).
const BUILTINS: &[(&str, &str, &str)] = &[
    ("*.rs", "rustfmt", "rustfmt"),
    ("*.go", "gofmt", "gofmt {file}"),
    (
        "*.py *.pyi",
        "ruff",
        "ruff format --quiet --no-cache {file}",
    ),
    ("*.py *.pyi", "black", "black --quiet {file}"),
    (
        "*.js *.jsx *.mjs *.cjs *.ts *.tsx *.mts *.cts *.json *.css *.scss *.less *.html *.vue *.md *.yaml *.yml *.graphql",
        "prettier",
        "prettier --write --log-level warn {file}",
    ),
    (
        "*.c *.h *.cc *.cpp *.cxx *.hpp *.hh *.hxx *.m *.mm *.proto",
        "clang-format",
        "clang-format -i {file}",
    ),
    ("*.sh *.bash", "shfmt", "shfmt -w {file}"),
];

/// reformat_file: answered from a worker thread (a formatter may take seconds).
pub fn reformat_file(call: &Call, args: &Map<String, Value>) -> Reply {
    let raw = match arg_str(args, "file_path", true) {
        Ok(v) => v.unwrap_or_default(),
        Err(e) => return Reply::Now(Err(e)),
    };
    let app = call.app.clone();
    crate::server::answer_later(
        Arc::new(call.defer()),
        Box::new(move || {
            Some(match reformat(&app, &raw) {
                Ok(()) => tool_texts(&["OK"]),
                Err(e) => tool_error(&e),
            })
        }),
    )
}

fn reformat(app: &App, raw: &str) -> Result<(), String> {
    let path = app.resolve(raw)?;
    let original = match std::fs::metadata(&path) {
        Ok(m) if m.is_file() => std::fs::read(&path),
        Ok(_) => return Err(format!("{} is not a regular file", path.display())),
        Err(_) => return Err("File not found".into()),
    }
    .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let words = formatter_for(app, &path)?;
    let dir = path.parent().unwrap_or(Path::new("/"));
    let tmp = TempCopy::create(&path, &original)?;
    let tmp_str = tmp.0.to_string_lossy().into_owned();
    let with_file = words.iter().any(|w| w.contains("{file}"));
    let mut cmd = Command::new(&words[0]);
    cmd.args(words[1..].iter().map(|w| w.replace("{file}", &tmp_str)))
        .current_dir(dir);
    let prog = &words[0];
    let input = (!with_file).then_some(&original[..]);
    let ran = run(cmd, input, &app.state_dir, TIME_LIMIT)
        .map_err(|e| format!("cannot run the formatter {prog}: {e}"))?;
    let Some(status) = ran.status else {
        return Err(format!(
            "the formatter {prog} did not finish within {} s and was killed",
            TIME_LIMIT.as_secs()
        ));
    };
    if !status.success() {
        let mut msg = String::from_utf8_lossy(&ran.stderr).trim().to_string();
        if msg.is_empty() {
            msg = String::from_utf8_lossy(&ran.stdout).trim().to_string();
        }
        // The user knows the file by its own name, not by the temporary copy's.
        let msg = msg.replace(&tmp_str, &path.to_string_lossy());
        let how = match status.code() {
            Some(c) => format!("exit status {c}"),
            None => status.to_string(),
        };
        return Err(if msg.is_empty() {
            format!("the formatter {prog} failed ({how})")
        } else {
            format!("the formatter {prog} failed ({how}): {msg}")
        });
    }
    let rewritten = std::fs::read(&tmp.0).unwrap_or_default();
    drop(tmp);
    let new = if with_file && rewritten != original {
        rewritten
    } else if !ran.stdout.is_empty() {
        ran.stdout
    } else {
        return Ok(());
    };
    if new != original {
        let ws = app.workspaces.read().unwrap().clone();
        crate::files::write_in_workspace(&path, &ws, &new, 0o644)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        crate::info!("reformatted {} with {prog}", path.display());
    }
    Ok(())
}

/// The command (split into words) for `path`: the first matching `--formatter`, else a built-in
/// whose program is on PATH.
fn formatter_for(app: &App, path: &Path) -> Result<Vec<String>, String> {
    let rel = app
        .workspaces
        .read()
        .unwrap()
        .iter()
        .find_map(|w| path.strip_prefix(w).ok())
        .unwrap_or(path)
        .to_string_lossy()
        .into_owned();
    for spec in &app.formatters {
        let Some((pattern, command)) = spec.split_once('=') else {
            return Err(format!(
                "invalid --formatter '{spec}': expected PATTERN=COMMAND"
            ));
        };
        if crate::pattern::file_pattern_match(pattern.trim(), &rel) {
            let words = crate::pattern::split_words(command)
                .map_err(|e| format!("invalid --formatter '{spec}': {e}"))?;
            if words.is_empty() {
                return Err(format!(
                    "invalid --formatter '{spec}': the command is empty"
                ));
            }
            return Ok(words);
        }
    }
    for (patterns, program, command) in BUILTINS {
        if patterns
            .split(' ')
            .any(|p| crate::pattern::file_pattern_match(p, &rel))
            && crate::checkers::on_path(program)
        {
            let mut words: Vec<String> = command.split(' ').map(String::from).collect();
            if *program == "rustfmt" {
                words.extend(["--edition".into(), rust_edition(path).into()]);
            }
            return Ok(words);
        }
    }
    Err(format!(
        "no formatter for {rel}: start ccide serve with --formatter 'PATTERN=COMMAND' (built-ins when on PATH: rustfmt, gofmt, ruff format or black, prettier, clang-format, shfmt)"
    ))
}

/// The edition of the nearest Cargo.toml above the file (rustfmt alone assumes 2015, and
/// 2021 cannot parse the let chains of 2024).
fn rust_edition(path: &Path) -> &'static str {
    for dir in path.ancestors() {
        let Ok(text) = std::fs::read_to_string(dir.join("Cargo.toml")) else {
            continue;
        };
        // `edition.workspace = true` sends us up to the workspace's Cargo.toml.
        if let Some(line) = text
            .lines()
            .find(|l| l.trim_start().starts_with("edition") && !l.contains("workspace"))
        {
            return if line.contains("2024") {
                "2024"
            } else {
                "2021"
            };
        }
    }
    "2021"
}

/// A copy of the file beside it, with the same extension so the formatter recognises the type
/// and finds the project's configuration; removed on drop.
struct TempCopy(PathBuf);

impl TempCopy {
    fn create(path: &Path, bytes: &[u8]) -> Result<TempCopy, String> {
        let stem = path.file_stem().unwrap_or_default().to_string_lossy();
        let ext = path
            .extension()
            .map(|e| format!(".{}", e.to_string_lossy()))
            .unwrap_or_default();
        let dir = path.parent().unwrap_or(Path::new("/"));
        let (tmp, mut f) = new_file(dir, &stem, &ext)
            .map_err(|e| format!("cannot create a temporary copy in {}: {e}", dir.display()))?;
        let copy = TempCopy(tmp);
        f.write_all(bytes)
            .map_err(|e| format!("cannot write {}: {e}", copy.0.display()))?;
        Ok(copy)
    }
}

impl Drop for TempCopy {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

struct Ran {
    /// None: killed after the time limit.
    status: Option<ExitStatus>,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

/// Runs a command in its own process group without a shell, `input` (or nothing) on stdin;
/// the whole group is killed after `limit`. Output goes to unlinked files in `scratch`, so no
/// thread is needed to drain pipes, and a daemon the command leaves behind cannot hold us up.
fn run(mut cmd: Command, input: Option<&[u8]>, scratch: &Path, limit: Duration) -> io::Result<Ran> {
    let mut out = scratch_file(scratch)?;
    let mut err = scratch_file(scratch)?;
    let stdin = match input {
        Some(bytes) => {
            let mut f = scratch_file(scratch)?;
            f.write_all(bytes)?;
            f.seek(SeekFrom::Start(0))?;
            Stdio::from(f)
        }
        None => Stdio::null(),
    };
    cmd.stdin(stdin)
        .stdout(out.try_clone()?)
        .stderr(err.try_clone()?)
        .process_group(0);
    crate::sys::unblock_all_signals_in_child(&mut cmd);
    let mut child = cmd.spawn()?;
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break Some(s);
        }
        if Instant::now() > deadline {
            kill_group(child.id());
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let read = |f: &mut File| -> io::Result<Vec<u8>> {
        let mut buf = Vec::new();
        f.seek(SeekFrom::Start(0))?;
        f.read_to_end(&mut buf)?;
        Ok(buf)
    };
    Ok(Ran {
        status,
        stdout: read(&mut out)?,
        stderr: read(&mut err)?,
    })
}

/// A new file in `dir`, already unlinked: gone as soon as it is closed.
fn scratch_file(dir: &Path) -> io::Result<File> {
    let (path, f) = new_file(dir, "scratch", "")?;
    std::fs::remove_file(&path)?;
    Ok(f)
}

/// Creates `dir/.STEM.ccide-PID-N.EXT`, private and new.
fn new_file(dir: &Path, stem: &str, ext: &str) -> io::Result<(PathBuf, File)> {
    static N: AtomicU64 = AtomicU64::new(0);
    let path = dir.join(format!(
        ".{stem}.ccide-{}-{}{ext}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)?;
    Ok((path, f))
}

/// SIGKILL to a process group we created (`process_group(0)` makes its id the child's pid).
pub fn kill_group(pid: u32) {
    let _ = crate::sys::kill(-(pid as i32), crate::sys::SIGKILL);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_over_the_limit_is_killed_with_its_children() {
        let started = Instant::now();
        let mut cmd = Command::new("sh");
        // Only a group kill ends the background sleep too.
        cmd.args(["-c", "echo hi; sleep 20 & sleep 20"]);
        let tmp = std::env::temp_dir();
        let ran = run(cmd, None, &tmp, Duration::from_millis(300)).unwrap();
        assert!(ran.status.is_none());
        assert!(started.elapsed() < Duration::from_secs(5));

        let mut cmd = Command::new("sh");
        cmd.args(["-c", "tr a-z A-Z; echo oops >&2; exit 3"]);
        let ran = run(cmd, Some(b"abc\n"), &tmp, Duration::from_secs(10)).unwrap();
        assert_eq!(ran.status.and_then(|s| s.code()), Some(3));
        assert_eq!(
            (&ran.stdout[..], &ran.stderr[..]),
            (&b"ABC\n"[..], &b"oops\n"[..])
        );
    }
}
