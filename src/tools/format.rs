//! reformat_file, a JetBrains plugin tool (ccide-protocol(7) §7.2): the project's formatter on a temporary copy beside the file; the
//! original is replaced atomically only when the formatter succeeded.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::rpc::call::{Call, Reply, answer_later, arg_str, tool_error, tool_texts};
use crate::state::State;

/// A formatter running longer is killed.
const TIME_LIMIT: Duration = Duration::from_secs(30);
/// A formatter's output beyond this is an error, not a file.
const MAX_OUTPUT: u64 = 64 << 20;

/// Built-in formatters, used when no `--formatter` matches and the program is found on PATH
/// (`trust::find`): (patterns, program, command, what it runs of the repository). Without
/// `{file}` the text goes through stdin and stdout (rustfmt would otherwise also format the
/// modules a file declares).
const BUILTINS: &[(&str, &str, &str, Runs)] = &[
    ("*.rs", "rustfmt", "rustfmt", Runs::RustupToolchain),
    ("*.go", "gofmt", "gofmt {file}", Runs::Nothing),
    (
        "*.py *.pyi",
        "ruff",
        "ruff format --quiet --no-cache {file}",
        Runs::Nothing,
    ),
    ("*.py *.pyi", "black", "black --quiet {file}", Runs::Nothing),
    (
        "*.js *.jsx *.mjs *.cjs *.ts *.tsx *.mts *.cts *.json *.css *.scss *.less *.html *.vue *.md *.yaml *.yml *.graphql",
        "prettier",
        "prettier --write --log-level warn {file}",
        Runs::Config,
    ),
    (
        "*.c *.h *.cc *.cpp *.cxx *.hpp *.hh *.hxx *.m *.mm *.proto",
        "clang-format",
        "clang-format -i {file}",
        Runs::Nothing,
    ),
    ("*.sh *.bash", "shfmt", "shfmt -w {file}", Runs::Nothing),
];

/// What a built-in formatter runs of the repository it formats (ccide-protocol(7) §14):
/// a formatter that runs any needs `--trust-workspace`, as `cargo check` does.
#[derive(Clone, Copy, PartialEq)]
enum Runs {
    /// Its configuration is data (rustfmt.toml, pyproject.toml, .clang-format,
    /// .editorconfig; gofmt has none).
    Nothing,
    /// Its configuration may be a program (prettier.config.js, and plugins a JSON
    /// .prettierrc names from node_modules).
    Config,
    /// A rustup proxy runs the toolchain a `rust-toolchain` or `rust-toolchain.toml` in the
    /// file's directory or above names, which may be a directory the repository ships
    /// (`path = ...`); the real rustfmt, or the proxy without such a file, runs nothing.
    RustupToolchain,
}

impl Runs {
    /// Why the built-in `program`, found at `found`, runs the repository's code when it
    /// formats `path`; None when it does not.
    fn why(self, program: &str, found: &Path, path: &Path) -> Option<String> {
        match self {
            Runs::Nothing => None,
            Runs::Config => Some(format!(
                "{program} loads the workspace's configuration, which may be JavaScript (prettier.config.js) or name plugins from its node_modules"
            )),
            Runs::RustupToolchain => {
                let file = path.ancestors().skip(1).find_map(|d| {
                    ["rust-toolchain.toml", "rust-toolchain"]
                        .iter()
                        .map(|n| d.join(n))
                        .find(|f| f.exists())
                })?;
                crate::trust::rustup_proxy(found).then(|| {
                    format!(
                        "{} is a rustup proxy, which runs the toolchain {} names (it may be one the repository ships)",
                        found.display(),
                        file.display()
                    )
                })
            }
        }
    }
}

/// A formatter's command: the words (the first a path, for a built-in), and whether it is a
/// built-in (run with `trust::command`'s PATH; a `--formatter` runs as named).
struct Formatter {
    words: Vec<String>,
    builtin: bool,
}

/// reformat_file: answered from a worker thread (a formatter may take seconds).
pub fn reformat_file(state: &Arc<State>, call: &Call, args: &Map<String, Value>) -> Reply {
    let raw = match arg_str(args, "file_path", true) {
        Ok(v) => v.unwrap_or_default(),
        Err(e) => return Reply::Now(Err(e)),
    };
    let state = state.clone();
    answer_later(
        Arc::new(call.defer()),
        Box::new(move || {
            Some(match reformat(&state, &raw) {
                Ok(()) => tool_texts(&["OK"]),
                Err(e) => tool_error(&e),
            })
        }),
    )
}

/// The largest file reformat_file reads (and so hands a formatter).
const MAX_FORMAT: u64 = 64 << 20;

/// Runs the formatter for the file `raw` names on a copy beside it, and writes the result
/// over the file when it differs.
fn reformat(state: &State, raw: &str) -> Result<(), String> {
    let path = state.resolve(raw)?;
    let original = read_original(state, &path)?;
    let Formatter { words, builtin } = formatter_for(state, &path)?;
    let dir = path.parent().unwrap_or(Path::new("/"));
    let tmp = TempCopy::create(&path, &original)?;
    let tmp_str = tmp.0.to_string_lossy().into_owned();
    let with_file = words.iter().any(|w| w.contains("{file}"));
    let mut cmd = match builtin {
        true => crate::trust::command(
            Path::new(&words[0]),
            &state.workspaces.list(),
            state.trusted,
        ),
        false => Command::new(&words[0]),
    };
    cmd.args(words[1..].iter().map(|w| w.replace("{file}", &tmp_str)))
        .current_dir(dir);
    // A built-in by its name, a `--formatter` as the user named it.
    let prog = &match builtin {
        true => crate::pattern::program_name(&words[0]),
        false => words[0].clone(),
    };
    let input = (!with_file).then_some(&original[..]);
    let ran = crate::proc::run(cmd, input, &state.state_dir, TIME_LIMIT, MAX_OUTPUT)
        .map_err(|e| format!("cannot run the formatter {prog}: {e}"))?;
    formatter_succeeded(prog, &ran, &tmp_str, &path)?;
    // A copy the formatter removed or cannot be read back says nothing about the file.
    let rewritten = std::fs::read(&tmp.0).map_err(|e| {
        format!(
            "the formatter {prog} left no readable copy ({e}); {} is left as it was",
            path.display()
        )
    })?;
    drop(tmp);
    // Output that names the copy is a report ("a.js 50ms (unchanged)"), not the result.
    let reports = |out: &[u8]| String::from_utf8_lossy(out).contains(tmp_str.as_str());
    let new = if with_file && rewritten != original {
        rewritten
    } else if !(ran.stdout.is_empty() || with_file && reports(&ran.stdout)) {
        ran.stdout
    } else {
        return Ok(());
    };
    if new != original {
        state
            .write_file(&path, &new)
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        crate::log::info!("reformatted {} with {prog}", path.display());
    }
    Ok(())
}

/// The file to format, with the error reformat_file gives for each way reading it fails.
fn read_original(state: &State, path: &Path) -> Result<Vec<u8>, String> {
    use std::io::ErrorKind::{FileTooLarge, IsADirectory, NotFound, Unsupported};
    state
        .workspaces
        .read(path, MAX_FORMAT)
        .map_err(|e| match e.kind() {
            NotFound => "File not found".to_string(),
            IsADirectory | Unsupported => format!("{} is not a regular file", path.display()),
            FileTooLarge => format!("{} {e}", path.display()),
            _ if crate::files::confinement_refused(&e) => format!("{} {e}", path.display()),
            _ => format!("cannot read {}: {e}", path.display()),
        })
}

/// Whether the formatter `prog` finished in time, within the output limit, and succeeded;
/// else what went wrong, its own message naming the file rather than the copy `tmp`.
fn formatter_succeeded(
    prog: &str,
    ran: &crate::proc::Ran,
    tmp: &str,
    path: &Path,
) -> Result<(), String> {
    if ran.truncated {
        return Err(format!(
            "the formatter {prog} printed more than {} MiB; the file is left as it was",
            MAX_OUTPUT >> 20
        ));
    }
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
        let msg = msg.replace(tmp, &path.to_string_lossy());
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
    Ok(())
}

/// The formatter for `path`: the first matching `--formatter`, else a built-in whose program
/// is found on PATH; a built-in that would run the repository's code is refused unless the
/// workspace is trusted.
fn formatter_for(state: &State, path: &Path) -> Result<Formatter, String> {
    let rel = state.workspaces.rel(path);
    for spec in &state.formatters {
        let (pattern, command) =
            crate::pattern::split_spec(spec).map_err(|e| format!("invalid --formatter: {e}"))?;
        if crate::pattern::file_pattern_match(pattern, &rel) {
            let words = crate::pattern::split_words(command)
                .map_err(|e| format!("invalid --formatter '{spec}': {e}"))?;
            if words.is_empty() {
                return Err(format!(
                    "invalid --formatter '{spec}': the command is empty"
                ));
            }
            return Ok(Formatter {
                words,
                builtin: false,
            });
        }
    }
    let folders = state.workspaces.list();
    for (patterns, program, command, runs) in BUILTINS {
        if !patterns
            .split(' ')
            .any(|p| crate::pattern::file_pattern_match(p, &rel))
        {
            continue;
        }
        let Some(found) = crate::trust::find(program, &folders, state.trusted) else {
            continue;
        };
        if !state.trusted
            && let Some(why) = runs.why(program, &found, path)
        {
            return Err(format!(
                "the built-in formatter for {rel} runs only with --trust-workspace: {why}. Start ccide serve with --trust-workspace, or name a formatter with --formatter 'PATTERN=COMMAND'"
            ));
        }
        let mut words: Vec<String> = command.split(' ').map(String::from).collect();
        words[0] = found.to_string_lossy().into_owned();
        if *program == "rustfmt" {
            words.extend(["--edition".into(), rust_edition(path).into()]);
        }
        return Ok(Formatter {
            words,
            builtin: true,
        });
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
        let (tmp, mut f) = crate::proc::new_file(dir, &stem, &ext)
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
