//! The commands that talk to a running `serve` through its control socket.

use std::fmt::Write as _;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::cli::{Args, EXIT_FAILURE, EXIT_OK, Fail, Outcome};
use crate::control::protocol::{ExecAction, Request, Span, WorkspaceOp};
use crate::control::{self, Control, FindError};
use crate::json::{self, obj};
use crate::state::editor::HumanRange;
use crate::text::visible;

/// Connects to the server for the current directory (or `--port`).
pub fn connect(args: &Args) -> Result<Control, Fail> {
    let config = crate::lockfile::config_dir(args.value("--config-dir").as_deref())?;
    let port = args.parsed::<u16>("--port", "a port number from 1 to 65535")?;
    let cwd = control::current_dir()?;
    match control::find_server(&config, port, &cwd) {
        Ok(lock) => Ok(Control::connect(lock)?),
        Err(FindError::None(m)) => Err(Fail::Failed(m)),
        Err(FindError::Several(m)) => Err(Fail::Usage(m)),
    }
}

/// Asks the server one request (connecting for it) and returns its answer.
fn ask(args: &Args, req: Request) -> Result<Value, Fail> {
    Ok(connect(args)?.request(&req)?)
}

pub fn cwd_string() -> Option<String> {
    control::current_dir()
        .ok()
        .map(|p| p.to_string_lossy().into_owned())
}

/// A path as the user would like to read it: relative to the current directory when inside.
pub fn display_path(p: &Path) -> String {
    match control::current_dir() {
        Ok(cwd) => match p.strip_prefix(&cwd) {
            Ok(rel) if !rel.as_os_str().is_empty() => rel.display().to_string(),
            _ => p.display().to_string(),
        },
        Err(_) => p.display().to_string(),
    }
}

fn age(created: u64) -> String {
    let s = crate::text::now_secs().saturating_sub(created);
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

/// Pretty JSON: `{:#}` is serde_json's `to_string_pretty` (two-space indent), with the
/// serializer `Display` brings anyway.
fn print_json(v: &Value) {
    println!("{v:#}");
}

pub fn use_color() -> bool {
    std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
        && crate::sys::isatty(1)
        && std::env::var("TERM").is_ok_and(|t| t != "dumb")
}

/// A pending diff's two sides as the review compares them: the original as the CLI reads
/// it (decoded, LF), and the proposal.
pub struct DiffFiles {
    pub original: crate::textdiff::AsRead,
    pub proposed: Vec<u8>,
}

impl DiffFiles {
    fn stat(&self) -> (usize, usize) {
        crate::textdiff::stat(&self.original.text, &self.proposed)
    }

    /// What the CLI restores when it writes, which the review does not show as changes.
    pub fn restored(&self) -> Option<String> {
        let o = &self.original;
        if o.crlf_lines > 0 && o.lf_lines > 0 {
            let (ending, encoding) = (
                if o.writes_crlf() { "CRLF" } else { "LF" },
                o.encoding.map(|e| format!(", in {e}")).unwrap_or_default(),
            );
            return Some(format!(
                "note: the file mixes CRLF and LF line endings; Claude Code writes it with {ending} on every line (the ending most lines have){encoding}"
            ));
        }
        let mut what = Vec::new();
        if o.writes_crlf() {
            what.push("CRLF line endings".to_string());
        }
        if let Some(e) = o.encoding {
            what.push(format!("the {e} encoding"));
        }
        (!what.is_empty()).then(|| {
            format!(
                "note: the file has {}; the proposal is LF UTF-8 text, and Claude Code restores them when it writes",
                what.join(" and ")
            )
        })
    }

    /// The lines of the original that are not UTF-8, and the first of them (1-based): the CLI
    /// read their bad bytes as U+FFFD, and the proposal it writes on accept holds U+FFFD in
    /// their place, on lines the edit left alone too (ccide-protocol(7) §5.1).
    fn not_utf8(&self) -> Option<(usize, usize)> {
        let text = &self.original.text;
        if std::str::from_utf8(text).is_ok() {
            return None;
        }
        let bad: Vec<usize> = text
            .split(|b| *b == b'\n')
            .enumerate()
            .filter(|(_, l)| std::str::from_utf8(l).is_err())
            .map(|(i, _)| i + 1)
            .collect();
        Some((bad.len(), bad[0]))
    }

    /// The line `show` prints for a file that is not UTF-8.
    pub fn rewrite_note(&self) -> Option<String> {
        let (lines, first) = self.not_utf8()?;
        let which = if lines == 1 {
            format!("line {first}")
        } else {
            format!("{lines} lines, the first line {first}")
        };
        Some(format!(
            "note: the file is not UTF-8 ({which}): Claude Code read its invalid bytes as U+FFFD (\u{FFFD}) and accepting writes the proposal as UTF-8, so those bytes are replaced by U+FFFD even where the edit changes nothing; reject it if they matter"
        ))
    }
}

pub fn read_diff(d: &Value) -> Result<DiffFiles, String> {
    let dir = PathBuf::from(d["dir"].as_str().unwrap_or(""));
    let read = |name: &str| {
        std::fs::read(dir.join(name))
            .map_err(|e| format!("cannot read {}: {e}", dir.join(name).display()))
    };
    Ok(DiffFiles {
        original: crate::textdiff::as_cli_reads(read("original")?),
        proposed: read("proposed")?,
    })
}

/// The one diff `target` names, or the only one, by the server's rule (the same as accept's).
pub fn find_diff(ctl: &mut Control, target: Option<&str>) -> Result<Value, Fail> {
    let r = ctl.request(&Request::DiffFind {
        target: target.map(String::from),
        cwd: cwd_string(),
    })?;
    Ok(r["diff"].clone())
}

/// The diff's file for people: relative when under the current directory, and with the
/// control characters of a name the model chose made visible.
pub fn file_of(d: &Value) -> String {
    visible(&display_path(Path::new(d["file"].as_str().unwrap_or("")))).into_owned()
}

/// `ccide diff [ACTION [TARGET]]`: lists the pending diffs, or shows, edits, accepts or rejects
/// one.
pub fn diff(args: &Args) -> Outcome {
    let action = args.operands.first().map(String::as_str).unwrap_or("list");
    let target = args.operands.get(1).map(String::as_str);
    if args.operands.len() > 2 {
        return Err(Fail::Usage(format!(
            "unexpected argument '{}'",
            args.operands[2]
        )));
    }
    let json_out = args.switch("--json")?;
    let settling = matches!(action, "accept" | "reject");
    if args.value("--hunks").is_some() && action != "accept" {
        return Err(Fail::Usage(
            "--hunks goes with accept: ccide diff accept [ID] --hunks 1,3-4 keeps those hunks and drops the rest".into(),
        ));
    }
    if args.value("--why").is_some() && !settling && action != "review" {
        return Err(Fail::Usage(
            "--why goes with accept or reject: the reason Claude is given for what you turned down"
                .into(),
        ));
    }
    let mut ctl = connect(args)?;
    match action {
        "list" | "ls" => {
            if target.is_some() {
                return Err(Fail::Usage("ccide diff list takes no argument".into()));
            }
            diff_list(&mut ctl, json_out)
        }
        "show" | "path" | "edit" => {
            let d = &find_diff(&mut ctl, target)?;
            let dir = d["dir"].as_str().unwrap_or("");
            match action {
                "path" => {
                    println!("{dir}");
                    Ok(EXIT_OK)
                }
                "edit" => edit(&Path::new(dir).join("proposed")),
                _ => diff_show(d, json_out),
            }
        }
        "accept" | "reject" => {
            let by_hunk = (args.value("--hunks"), args.value("--why"));
            match by_hunk {
                (None, None) => diff_settle(&mut ctl, target, action == "accept", json_out),
                (hunks, why) => diff_settle_by_hunk(
                    &mut ctl,
                    target,
                    (action == "accept", hunks.as_deref()),
                    why.as_deref(),
                    json_out,
                ),
            }
        }
        other => Err(Fail::Usage(format!(
            "unknown diff action '{other}': expected list, show, review, accept, reject, edit or path"
        ))),
    }
}

/// `ccide diff list`: each pending diff with its age and size, as a table or JSON. A diff
/// whose files cannot be read is listed as broken (and the exit status says so).
fn diff_list(ctl: &mut Control, json_out: bool) -> Outcome {
    let r = ctl.request(&Request::DiffList)?;
    let diffs = r["diffs"].as_array().cloned().unwrap_or_default();
    if json_out {
        let mut out = Vec::new();
        for mut d in diffs {
            // One broken diff must not hide the others: it is listed with its error.
            match read_diff(&d) {
                Ok(f) => {
                    let (added, removed) = f.stat();
                    d["added"] = added.into();
                    d["removed"] = removed.into();
                }
                Err(e) => d["error"] = e.into(),
            }
            out.push(d);
        }
        print_json(&Value::Array(out));
        return Ok(EXIT_OK);
    }
    if diffs.is_empty() {
        println!("no pending diffs");
        return Ok(EXIT_OK);
    }
    println!("{:<4} {:<5} {:<13} FILE", "ID", "AGE", "CHANGE");
    let mut broken = false;
    for d in &diffs {
        let (change, note) = match read_diff(d) {
            Ok(f) => {
                let (added, removed) = f.stat();
                let new = if d["new_file"] == true {
                    " (new file)"
                } else {
                    ""
                };
                (format!("+{added} -{removed}"), new.to_string())
            }
            Err(e) => {
                broken = true;
                ("broken".to_string(), format!(" ({})", visible(&e)))
            }
        };
        println!(
            "{:<4} {:<5} {:<13} {}{note}{}",
            d["id"].as_str().unwrap_or(""),
            age(d["created"].as_u64().unwrap_or(0)),
            change,
            file_of(d),
            from(d)
        );
    }
    Ok(if broken { EXIT_FAILURE } else { EXIT_OK })
}

/// Which session proposed a diff, and in which folder (a worktree), when the server has more
/// than one of either: ` [session 2, /src/app-b]`.
pub fn from(d: &Value) -> String {
    d["worktree"].as_str().map_or(String::new(), |w| {
        format!(" [session {}, {}]", d["client"], visible(w))
    })
}

/// `ccide diff show`: the diff `d` as a unified diff (with notes on what accepting restores or
/// rewrites), or as JSON with the diff text and those notes as fields.
fn diff_show(d: &Value, json_out: bool) -> Outcome {
    let f = read_diff(d).map_err(Fail::Failed)?;
    let name = file_of(d);
    let a = if d["new_file"] == true {
        "/dev/null".to_string()
    } else {
        format!("a/{name}")
    };
    let b = format!("b/{name}");
    let original = &f.original.text;
    if json_out {
        let text = crate::textdiff::unified(original, &f.proposed, &a, &b, false, false, true);
        let (added, removed) = f.stat();
        let mut d = d.clone();
        d["added"] = added.into();
        d["removed"] = removed.into();
        d["diff"] = String::from_utf8_lossy(&text).into_owned().into();
        d["restored"] = obj! {"crlf": f.original.writes_crlf(), "encoding": f.original.encoding};
        d["not_utf8"] = match f.not_utf8() {
            Some((lines, first)) => {
                obj! {"lines": lines, "first_line": first, "accept_rewrites_bytes": true}
            }
            None => Value::Null,
        };
        print_json(&d);
    } else {
        let text = crate::textdiff::unified(original, &f.proposed, &a, &b, true, use_color(), true);
        let mut out = Vec::new();
        for note in [f.restored(), f.rewrite_note()].into_iter().flatten() {
            let _ = writeln!(out, "{note}");
        }
        out.extend_from_slice(&text);
        if text.is_empty() {
            let _ = writeln!(out, "no changes: the proposal equals the original");
        }
        page(&out)?;
    }
    Ok(EXIT_OK)
}

/// The pager git would use, as words: `GIT_PAGER`, then `git config core.pager` (when git is
/// installed; run as ccide runs every program, `proc::run`, here for 10 s at most), then
/// `PAGER`, else `less -FRX`. None when that is empty or `cat`: no pager.
fn pager_command() -> Result<Option<Vec<String>>, Fail> {
    let set = |v: &str| std::env::var(v).ok();
    let from_git = || {
        let mut git = std::process::Command::new(crate::proc::find_on_path("git")?);
        git.args(["config", "core.pager"]);
        let limit = std::time::Duration::from_secs(10);
        let o = crate::proc::run(git, None, &std::env::temp_dir(), limit, 1 << 16).ok()?;
        String::from_utf8(o.stdout)
            .ok()
            .map(|s| s.trim_end_matches('\n').to_string())
            .filter(|s| o.status.is_some_and(|st| st.success()) && !s.is_empty())
    };
    let cmd = set("GIT_PAGER")
        .or_else(from_git)
        .or_else(|| set("PAGER"))
        .unwrap_or_else(|| "less -FRX".into());
    let words = crate::pattern::split_words(&cmd)
        .map_err(|e| Fail::Failed(format!("cannot parse the pager command '{cmd}': {e}")))?;
    Ok((!words.is_empty() && words != ["cat"]).then_some(words))
}

/// Writes `text` to standard output, through the user's pager when it is a terminal (as git
/// does, never through a shell: the command is split into words).
pub fn page(text: &[u8]) -> Outcome {
    let pager = if crate::sys::isatty(1) {
        pager_command()?
    } else {
        None
    };
    let Some((prog, rest)) = pager.as_ref().and_then(|w| w.split_first()) else {
        let _ = std::io::stdout().lock().write_all(text);
        return Ok(EXIT_OK);
    };
    let mut cmd = std::process::Command::new(prog);
    cmd.args(rest).stdin(std::process::Stdio::piped());
    // As git sets them, unless the user did.
    for (var, value) in [("LESS", "FRX"), ("LV", "-c")] {
        if std::env::var_os(var).is_none() {
            cmd.env(var, value);
        }
    }
    let mut child = match cmd.spawn() {
        Ok(child) => child,
        // As git does: said, and shown without a pager.
        Err(e) => {
            eprintln!(
                "ccide: cannot run the pager {prog}: {e} (set GIT_PAGER or PAGER to another, or to cat for none)"
            );
            let _ = std::io::stdout().lock().write_all(text);
            return Ok(EXIT_OK);
        }
    };
    if let Some(mut stdin) = child.stdin.take() {
        // The user may quit the pager before reading it all.
        let _ = stdin.write_all(text);
    }
    let _ = child.wait();
    Ok(EXIT_OK)
}

/// `ccide diff accept|reject`: settles the diff `target` names as the user.
fn diff_settle(ctl: &mut Control, target: Option<&str>, accept: bool, json_out: bool) -> Outcome {
    let r = ctl.request(&Request::DiffSettle {
        target: target.map(String::from),
        accept,
        content: None,
        cwd: cwd_string(),
        verdict: None,
    })?;
    let d = &r["diff"];
    if json_out {
        print_json(d);
    } else if accept {
        println!(
            "accepted diff {} ({}): Claude Code writes the content of proposed",
            d["id"].as_str().unwrap_or(""),
            file_of(d)
        );
    } else {
        println!(
            "rejected diff {} ({})",
            d["id"].as_str().unwrap_or(""),
            file_of(d)
        );
    }
    Ok(EXIT_OK)
}

/// `ccide diff accept --hunks LIST [--why TEXT]` and `ccide diff reject --why TEXT`: settles
/// the diff keeping the hunks `hunks` names (none for a rejection), with the verdict
/// (ccide-protocol(7) §5.5).
fn diff_settle_by_hunk(
    ctl: &mut Control,
    target: Option<&str>,
    (accept, hunks): (bool, Option<&str>),
    why: Option<&str>,
    json_out: bool,
) -> Outcome {
    let d = find_diff(ctl, target)?;
    let id = d["id"].as_str().unwrap_or("").to_string();
    // A rejection needs nothing from the files: one whose files are gone is still rejected,
    // with its reason.
    let review = match read_diff(&d) {
        Ok(f) => crate::review::Review::new(f.original.text, f.proposed),
        Err(_) if !accept => crate::review::Review::new(Vec::new(), Vec::new()),
        Err(e) => return Err(Fail::Failed(e)),
    };
    let count = review.pieces.len();
    let keep = match hunks {
        None if accept => (1..=count).collect(),
        None => Vec::new(),
        Some(spec) if spec.trim().is_empty() => {
            return Err(Fail::Usage(format!(
                "--hunks names no hunk: to keep none, reject the diff (ccide diff reject {id} --why TEXT)"
            )));
        }
        Some(_) if count == 0 => {
            return Err(Fail::Failed(format!(
                "diff {id} changes nothing, so it has no hunks to choose from: accept or reject it whole"
            )));
        }
        Some(spec) => crate::review::parse_hunk_list(spec, count).map_err(Fail::Usage)?,
    };
    let decisions = settle_decisions(count, &keep);
    let verdict = crate::review::verdict(&review, &decisions, &[], why);
    let content = match review.compose(&decisions).map_err(Fail::Failed)? {
        crate::review::Answer::Save(text) if text != review.proposed => {
            Some(crate::review::saved_text(text))
        }
        _ => None,
    };
    let r = ctl.request(&Request::DiffSettle {
        target: Some(id.clone()),
        accept,
        content,
        cwd: cwd_string(),
        verdict: Some(verdict),
    })?;
    let d = &r["diff"];
    if json_out {
        print_json(d);
    } else if accept {
        let kept: Vec<String> = keep.iter().map(usize::to_string).collect();
        println!(
            "accepted hunks {} of {count} of diff {id} ({}): Claude Code writes the proposal with the others left out",
            kept.join(","),
            file_of(d)
        );
    } else {
        println!("rejected diff {id} ({}), with your reason", file_of(d));
    }
    Ok(EXIT_OK)
}

/// Keep for the hunks (1-based) in `keep`, drop for the others.
fn settle_decisions(count: usize, keep: &[usize]) -> Vec<crate::review::Decision> {
    (1..=count)
        .map(|n| {
            if keep.binary_search(&n).is_ok() {
                crate::review::Decision::Keep
            } else {
                crate::review::Decision::Drop
            }
        })
        .collect()
}

/// Opens `proposed` in the user's editor; accepting stays a separate, explicit step.
fn edit(path: &Path) -> Outcome {
    run_editor(path)?;
    eprintln!(
        "edited {}; run `ccide diff accept` to send it to Claude Code",
        path.display()
    );
    Ok(EXIT_OK)
}

/// Runs `$VISUAL` (else `$EDITOR`) on `path` and waits for it, without a shell: the command is
/// split into words.
pub fn run_editor(path: &Path) -> Result<(), Fail> {
    let editor = std::env::var("VISUAL")
        .ok()
        .filter(|v| !v.is_empty())
        .or_else(|| std::env::var("EDITOR").ok().filter(|v| !v.is_empty()))
        .ok_or_else(|| {
            Fail::Failed("set VISUAL or EDITOR to the editor to open the proposal with".into())
        })?;
    let words = crate::pattern::split_words(&editor)
        .map_err(|e| Fail::Failed(format!("cannot parse the editor command '{editor}': {e}")))?;
    let Some((prog, rest)) = words.split_first() else {
        return Err(Fail::Failed("VISUAL/EDITOR is empty".into()));
    };
    let status = std::process::Command::new(prog)
        .args(rest)
        .arg(path)
        .status()
        .map_err(|e| Fail::Failed(format!("cannot run {prog}: {e}")))?;
    if !status.success() {
        return Err(Fail::Failed(format!("{prog} exited with {status}")));
    }
    Ok(())
}

pub fn events(args: &Args) -> Outcome {
    if let Some(extra) = args.operands.first() {
        return Err(Fail::Usage(format!("unexpected argument '{extra}'")));
    }
    let mut events = connect(args)?.subscribe()?;
    let mut out = std::io::stdout().lock();
    while let Ok(l) = events.next_line() {
        if writeln!(out, "{l}").is_err() || out.flush().is_err() {
            return Ok(EXIT_OK);
        }
    }
    eprintln!("ccide: the server stopped");
    Ok(EXIT_FAILURE)
}

/// `FILE[:LINE[:COL]][-LINE[:COL]]`: the first ':' after which the rest is a range splits
/// the file name from it, so names with colons still work. A spec that is no path, but
/// names an existing path before a ':' followed by what is not a range, is a usage error
/// (`main.rs:abc`), not a missing file.
pub fn parse_spec(spec: &str) -> Result<(String, HumanRange), Fail> {
    const FORMS: &str = "expected FILE, FILE:LINE, FILE:LINE:COL, FILE:LINE-LINE or FILE:LINE:COL-LINE:COL, counting from 1";
    let bad = || Fail::Usage(format!("cannot read '{spec}': {FORMS}"));
    for (i, _) in spec.match_indices(':') {
        let (file, rest) = (&spec[..i], &spec[i + 1..]);
        if file.is_empty() || rest.is_empty() {
            continue;
        }
        let Some(range) = parse_range(rest) else {
            continue;
        };
        return Ok((file.to_string(), range));
    }
    if spec.is_empty() {
        return Err(bad());
    }
    if !Path::new(spec).exists()
        && let Some((file, rest)) = spec
            .match_indices(':')
            .map(|(i, _)| (&spec[..i], &spec[i + 1..]))
            .find(|(file, _)| !file.is_empty() && Path::new(file).exists())
    {
        return Err(Fail::Usage(format!(
            "cannot read '{spec}': the line and column after {file}: must be numbers, not '{rest}' ({FORMS})"
        )));
    }
    Ok((spec.to_string(), HumanRange::default()))
}

fn parse_range(s: &str) -> Option<HumanRange> {
    let (a, b) = match s.split_once('-') {
        Some((a, b)) => (a, Some(b)),
        None => (s, None),
    };
    let point = |p: &str| -> Option<(usize, Option<usize>)> {
        let mut it = p.split(':');
        let line = it.next()?.parse().ok()?;
        let col = match it.next() {
            Some(c) => Some(c.parse().ok()?),
            None => None,
        };
        it.next().is_none().then_some((line, col))
    };
    let (sl, sc) = point(a)?;
    let (el, ec) = match b {
        Some(b) => {
            let (el, ec) = point(b)?;
            (Some(el), ec)
        }
        None => (None, None),
    };
    Some(HumanRange {
        start_line: Some(sl),
        start_col: sc,
        end_line: el,
        end_col: ec,
    })
}

fn absolute(file: &str) -> Result<String, Fail> {
    Ok(control::current_dir()?
        .join(file)
        .to_string_lossy()
        .into_owned())
}

fn read_stdin() -> Result<String, Fail> {
    let what = "cannot read standard input as UTF-8 text";
    let bytes = stdin_bytes().map_err(|e| Fail::Failed(format!("{what}: {e}")))?;
    // What `read_to_string` says of bytes that are not UTF-8.
    String::from_utf8(bytes)
        .map_err(|_| Fail::Failed(format!("{what}: stream did not contain valid UTF-8")))
}

/// All of standard input, read through `take` as `ccide hook` reads it: one instance of std's
/// read loop for standard input.
fn stdin_bytes() -> std::io::Result<Vec<u8>> {
    let mut b = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(std::io::stdin(), u64::MAX), &mut b)?;
    Ok(b)
}

/// What `select` and `mention` tell the user: clients reached, and those still connecting,
/// which get it once their setup settles (ccide-protocol(7) §3.3).
pub fn delivered(r: &Value) -> String {
    // Sessions that gave their folders are named (ccide-protocol(7) §6.4), their folders
    // as the clients gave them.
    if let Some(list) = r["sessions"].as_array() {
        let mut named = String::from("sent to ");
        for (i, s) in list.iter().enumerate() {
            if i > 0 {
                named += ", ";
            }
            named += &shown(s);
        }
        if list.len() > 1 {
            named += "; several sessions work there: to tell one, pass --session ID";
        }
        return named;
    }
    let (sent, held) = (
        r["clients"].as_u64().unwrap_or(0),
        r["held"].as_u64().unwrap_or(0),
    );
    let sent = match sent {
        0 if held == 0 => return "no client connected".into(),
        0 => String::new(),
        1 => "sent to 1 client".into(),
        n => format!("sent to {n} clients"),
    };
    let held = match held {
        0 => String::new(),
        1 => "1 client still connecting gets it when ready".into(),
        n => format!("{n} clients still connecting get it when ready"),
    };
    [sent, held]
        .into_iter()
        .filter(|s| !s.is_empty())
        .collect::<Vec<_>>()
        .join("; ")
}

pub fn select(args: &Args) -> Outcome {
    let [spec] = args.operands.as_slice() else {
        return Err(Fail::Usage(
            "ccide select takes one FILE[:LINE[:COL]][-LINE[:COL]]".into(),
        ));
    };
    let (file, range) = parse_spec(spec)?;
    let text = if args.switch("--stdin")? {
        Some(read_stdin()?)
    } else {
        None
    };
    let mut ctl = connect(args)?;
    let r = ctl.request(&Request::Select {
        path: absolute(&file)?,
        span: Span::Lines(range),
        text,
        session: args.value("--session"),
    })?;
    let sel = &r["selection"]["selection"];
    let lines =
        sel["end"]["line"].as_u64().unwrap_or(0) + 1 - sel["start"]["line"].as_u64().unwrap_or(0);
    if r["selection"]["text"] == "" {
        eprintln!("selected {} ({})", file, delivered(&r));
    } else {
        eprintln!("selected {lines} line(s) of {} ({})", file, delivered(&r));
    }
    Ok(EXIT_OK)
}

pub fn mention(args: &Args) -> Outcome {
    let [spec] = args.operands.as_slice() else {
        return Err(Fail::Usage(
            "ccide mention takes one FILE[:START[-END]]".into(),
        ));
    };
    let (file, range) = parse_spec(spec)?;
    if range.start_col.is_some() || range.end_col.is_some() {
        return Err(Fail::Usage(
            "mentions take lines only: FILE:START-END".into(),
        ));
    }
    let mut ctl = connect(args)?;
    let r = ctl.request(&Request::Mention {
        path: absolute(&file)?,
        start: range.start_line,
        end: range.end_line,
        session: args.value("--session"),
    })?;
    if r["queued"] == true && r["held"] == 0 {
        eprintln!("mentioned {file}: no client connected, queued for the next one");
    } else {
        eprintln!("mentioned {file} ({})", delivered(&r));
    }
    Ok(EXIT_OK)
}

pub fn open(args: &Args) -> Outcome {
    if args.operands.is_empty() {
        return Err(Fail::Usage("ccide open takes one or more files".into()));
    }
    let paths = args
        .operands
        .iter()
        .map(|f| absolute(f))
        .collect::<Result<Vec<_>, _>>()?;
    ask(args, Request::Open { paths })?;
    Ok(EXIT_OK)
}

pub fn close(args: &Args) -> Outcome {
    if args.operands.is_empty() {
        return Err(Fail::Usage("ccide close takes one or more files".into()));
    }
    let paths = args
        .operands
        .iter()
        .map(|f| absolute(f))
        .collect::<Result<Vec<_>, _>>()?;
    let discard = args.switch("--discard")?;
    let r = ask(args, Request::Close { paths, discard })?;
    for p in r["not_open"].as_array().into_iter().flatten() {
        eprintln!(
            "{} was not open",
            display_path(Path::new(p.as_str().unwrap_or("")))
        );
    }
    for p in r["kept_unsaved"].as_array().into_iter().flatten() {
        eprintln!(
            "kept the unsaved content of {} (use --discard to drop it)",
            display_path(Path::new(p.as_str().unwrap_or("")))
        );
    }
    Ok(EXIT_OK)
}

pub fn buffer(args: &Args) -> Outcome {
    let [file] = args.operands.as_slice() else {
        return Err(Fail::Usage("ccide buffer takes one FILE".into()));
    };
    let content = if args.switch("--drop")? {
        None
    } else {
        Some(read_stdin()?)
    };
    // An editor pushing its buffer always has something to say; an empty input is far more
    // often a pipe that failed, and saveDocument would write it over the file.
    if content.as_deref() == Some("") && !args.switch("--allow-empty")? {
        return Err(Fail::Usage(format!(
            "standard input is empty: ccide buffer would store an empty unsaved buffer for {file}, which Claude Code's saveDocument would write over the file; pass --allow-empty if its content is really empty (or --drop to forget its unsaved content)"
        )));
    }
    let path = absolute(file)?;
    ask(args, Request::Buffer { path, content })?;
    Ok(EXIT_OK)
}

/// `ccide status`: this directory's server, as JSON or a line per thing it holds.
pub fn status(args: &Args) -> Outcome {
    if let Some(extra) = args.operands.first() {
        return Err(Fail::Usage(format!("unexpected argument '{extra}'")));
    }
    if args.switch("--all")? {
        return status_all(args);
    }
    let r = ask(args, Request::Status)?;
    let s = &r["status"];
    if args.switch("--json")? {
        print_json(s);
        return Ok(EXIT_OK);
    }
    print!("{}", status_text(s));
    Ok(EXIT_OK)
}

/// A status field's text for people. Names and paths come from clients and the model: shown
/// with control characters visible.
fn shown(v: &Value) -> String {
    visible(v.as_str().unwrap_or("")).into_owned()
}

/// A status field's path for people: relative when under the current directory, control
/// characters visible.
fn shown_path(v: &Value) -> String {
    visible(&display_path(Path::new(v.as_str().unwrap_or("")))).into_owned()
}

/// The status for people: the server, its folders and state directory, clients, tabs,
/// unsaved buffers, the selection, diffs and language servers, a line each.
fn status_text(s: &Value) -> String {
    let list = |v: &Value| v.as_array().cloned().unwrap_or_default();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "server   {} (pid {}) on 127.0.0.1:{}, up {}",
        shown(&s["ide_name"]),
        s["pid"],
        s["port"],
        age(s["started"].as_u64().unwrap_or(0))
    );
    for w in list(&s["workspaces"]) {
        let _ = writeln!(out, "folder   {}", shown(&w));
    }
    let _ = writeln!(out, "state    {}", shown(&s["state_dir"]));
    let clients = list(&s["clients"]);
    if clients.is_empty() {
        out.push_str("clients  none\n");
    }
    for c in clients {
        let _ = writeln!(
            out,
            "client   #{} {} {} pid {} for {}{}",
            c["id"],
            match shown(&c["name"]) {
                n if n.is_empty() => "(not initialized)".to_string(),
                n => n,
            },
            shown(&c["version"]),
            c["pid"]
                .as_i64()
                .map_or("unknown".to_string(), |p| p.to_string()),
            age(c["since"].as_u64().unwrap_or(0)),
            c["roots"][0]
                .as_str()
                .map_or(String::new(), |r| format!(" in {}", visible(r)))
        );
    }
    for t in list(&s["tabs"]) {
        let _ = writeln!(
            out,
            "tab      {}{}",
            shown_path(&t["path"]),
            if t["active"] == true { " (active)" } else { "" }
        );
    }
    for d in list(&s["documents"]) {
        let _ = writeln!(
            out,
            "unsaved  {} ({} bytes)",
            shown_path(&d["path"]),
            d["bytes"]
        );
    }
    status_selection(&mut out, &s["selection"]);
    for d in list(&s["diffs"]) {
        let _ = writeln!(
            out,
            "diff     {} {}{}",
            d["id"].as_str().unwrap_or(""),
            file_of(&d),
            from(&d)
        );
    }
    for l in list(&s["language_servers"]) {
        out.push_str(&language_server_line(&l));
        out.push('\n');
    }
    out
}

/// The status line of the selection, if there is one: a whole file, or a range (1-based).
fn status_selection(out: &mut String, selection: &Value) {
    if let Some(sel) = selection.as_object()
        && sel["text"] == ""
        && sel["selection"]["isEmpty"] == true
    {
        let _ = writeln!(
            out,
            "select   {} (the file, no text)",
            shown_path(&sel["filePath"])
        );
    } else if let Some(sel) = selection.as_object() {
        let r = &sel["selection"];
        let _ = writeln!(
            out,
            "select   {}:{}:{}-{}:{}",
            shown_path(&sel["filePath"]),
            r["start"]["line"].as_u64().unwrap_or(0) + 1,
            r["start"]["character"].as_u64().unwrap_or(0) + 1,
            r["end"]["line"].as_u64().unwrap_or(0) + 1,
            r["end"]["character"].as_u64().unwrap_or(0),
        );
    }
}

/// The status line of one language server: its state, pid, memory, open documents, and why
/// it last failed or stopped.
fn language_server_line(l: &Value) -> String {
    let mut line = format!("lsp      {} {}", shown(&l["name"]), shown(&l["state"]));
    if let Some(pid) = l["pid"].as_u64() {
        let _ = write!(line, ", pid {pid}");
    }
    if let Some(kib) = l["rss_kib"].as_u64() {
        let _ = write!(line, ", {} MiB", kib / 1024);
    }
    let _ = write!(line, ", {} open", l["open_documents"].as_u64().unwrap_or(0));
    if let Some(e) = l["last_error"].as_str().filter(|e| !e.is_empty()) {
        let _ = write!(line, " (last error: {})", visible(e));
    }
    if let Some(why) = l["stopped_because"].as_str() {
        line.push_str(&format!(" (stopped: {})", visible(why)));
    }
    line
}

/// `ccide claude [ARGS...]`: runs Claude Code already connected to this directory's server,
/// serving one in this process for the child's lifetime when none runs.
pub fn claude(args: &Args) -> Outcome {
    crate::sys::block_termination_signals();
    let config_flag = std::env::var("CCIDE_CONFIG_DIR")
        .ok()
        .filter(|d| !d.is_empty());
    let config = crate::lockfile::config_dir(config_flag.as_deref())?;
    let cwd = control::current_dir()?;
    let (port, paths, running) = match control::find_server(&config, None, &cwd) {
        Ok(lock) => (lock.port, lock.control.zip(lock.state), None),
        Err(FindError::Several(m)) => return Err(Fail::Usage(m)),
        Err(FindError::None(_)) => {
            // The server shares the terminal with Claude Code's interface: log errors only.
            let level = std::env::var("CCIDE_LOG_LEVEL").unwrap_or_else(|_| "error".into());
            let serve_args = Args::parse(&super::serve::COMMAND, &["--log-level".into(), level])?;
            let r = super::serve::start(&serve_args)?;
            let s = &r.sessions.state;
            (
                s.port,
                Some((s.control_path.clone(), s.state_dir.clone())),
                Some(r),
            )
        }
    };
    let program = super::plugin::claude_program();
    // The plugin's language servers are this server's (ccide-protocol(7) §13); its flag goes
    // first, so that it is the CLI's own and never an argument of a subcommand.
    let plugin = paths
        .as_ref()
        .and_then(|(control, state)| super::plugin::for_claude(&program, control, state));
    let notices = paths.and_then(|(control, state)| review_notices(control, state, &cwd));
    let mut cmd = std::process::Command::new(&program);
    cmd.args(plugin).args(&args.operands);
    connect_to(&mut cmd, port);
    crate::sys::unblock_all_signals_in_child(&mut cmd);
    let spawned = cmd.spawn();
    let mut child = match spawned {
        Ok(c) => c,
        Err(e) => {
            if let Some(r) = running {
                super::serve::stop(r);
            }
            return Err(Fail::Failed(format!(
                "cannot run {program}: {e} (install Claude Code, or set CCIDE_CLAUDE to its path)"
            )));
        }
    };
    let pid = child.id() as i32;
    forward_termination_signals(pid);
    if let Some(n) = notices {
        let child = child.id();
        let _ = crate::proc::spawn_thread("review-notices", move || n.run(child));
    }
    let status = child
        .wait()
        .map_err(|e| Fail::Failed(format!("waiting for {program}: {e}")))?;
    if let Some(r) = running {
        super::serve::stop(r);
    }
    use std::os::unix::process::ExitStatusExt;
    Ok(status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0)))
}

/// When stderr (the terminal shared with the CLI) is a terminal: the server's events,
/// subscribed before the CLI starts, for the notification that a review waits.
fn review_notices(
    control: PathBuf,
    state: PathBuf,
    cwd: &Path,
) -> Option<super::notify::TerminalNotices> {
    if !crate::sys::isatty(2) {
        return None;
    }
    let events = Control::open(&control).ok()?.subscribe().ok()?;
    Some(super::notify::TerminalNotices {
        events,
        control,
        scratch: state,
        cwd: cwd.to_path_buf(),
    })
}

/// Sets the environment that makes Claude Code connect to the server on `port` by itself.
fn connect_to(cmd: &mut std::process::Command, port: u16) {
    cmd.env("CLAUDE_CODE_SSE_PORT", port.to_string())
        .env("ENABLE_IDE_INTEGRATION", "true");
    // The port alone does not make a CLI of 2.1.50 or older connect by itself; the user's
    // own value, a false one included, stays (ccide-protocol(7) §1.3).
    if std::env::var_os("CLAUDE_CODE_AUTO_CONNECT_IDE").is_none_or(|v| v.is_empty()) {
        cmd.env("CLAUDE_CODE_AUTO_CONNECT_IDE", "1");
    }
    // With a proxy set and no loopback exemption, the CLI tunnels the loopback WebSocket into
    // the proxy and never connects (ccide-protocol(7) §1.3).
    for var in ["no_proxy", "NO_PROXY"] {
        let old = std::env::var(var).unwrap_or_default();
        let joined = if old.is_empty() {
            "127.0.0.1,localhost,::1".to_string()
        } else {
            format!("{old},127.0.0.1,localhost,::1")
        };
        cmd.env(var, joined);
    }
}

/// Passes SIGTERM and SIGHUP on to the child `pid`, from a thread of their own. SIGINT from
/// the terminal already reached it (same process group): forwarding it again would count as
/// a second Ctrl-C and quit the REPL.
fn forward_termination_signals(pid: i32) {
    let _ = crate::proc::spawn_thread("signals", move || {
        loop {
            let sig = crate::sys::wait_termination_signal();
            if sig != crate::sys::SIGINT {
                let _ = crate::sys::kill(pid, sig);
            }
        }
    });
}

/// Every lock file in the config directory, ccide's and other IDEs', with liveness.
fn status_all(args: &Args) -> Outcome {
    let config = crate::lockfile::config_dir(args.value("--config-dir").as_deref())?;
    let locks = crate::lockfile::scan(&config);
    if args.switch("--json")? {
        let v: Vec<Value> = locks
            .iter()
            .map(|l| {
                obj! {"port": l.port, "lock": json::path(&l.path), "pid": l.pid, "alive": l.alive,
                    "ccide": l.control.is_some(), "ide_name": l.ide_name.as_str(), "workspaces": json::paths(&l.workspaces)}
            })
            .collect();
        print_json(&Value::Array(v));
        return Ok(EXIT_OK);
    }
    if locks.is_empty() {
        println!("no lock files in {}", config.join("ide").display());
    }
    for l in &locks {
        println!(
            "{:<6} {:<5} {:<6} {} ({})",
            l.port,
            if l.alive { "live" } else { "dead" },
            if l.control.is_some() {
                "ccide"
            } else {
                "other"
            },
            visible(&l.ide_name),
            visible(&l.folders())
        );
    }
    Ok(EXIT_OK)
}

/// Removes ccide lock files whose process is gone (never another IDE's) and the leftovers of
/// their servers: the control socket and pending-diff directories in their state directories.
pub fn gc(args: &Args) -> Outcome {
    if let Some(extra) = args.operands.first() {
        return Err(Fail::Usage(format!("unexpected argument '{extra}'")));
    }
    let dry = args.switch("--dry-run")?;
    let config = crate::lockfile::config_dir(args.value("--config-dir").as_deref())?;
    let mut removed = 0;
    for l in crate::lockfile::scan(&config) {
        let Some(control) = &l.control else {
            continue;
        };
        if l.reachable() {
            continue;
        }
        if let Err(why) = crate::lockfile::proven_dead(&l) {
            println!("kept {}: {why}", l.path.display());
            continue;
        }
        let mut leftovers = vec![l.path.clone(), control.clone()];
        if let Some(state) = control.parent() {
            leftovers.push(state.join("diffs"));
        }
        for p in leftovers.iter().filter(|p| p.exists()) {
            println!(
                "{}{}",
                if dry { "would remove " } else { "removed " },
                p.display()
            );
            if !dry {
                let r = if p.is_dir() {
                    std::fs::remove_dir_all(p)
                } else {
                    std::fs::remove_file(p)
                };
                r.map_err(|e| Fail::Failed(format!("cannot remove {}: {e}", p.display())))?;
            }
            removed += 1;
        }
    }
    if removed == 0 {
        println!("nothing to clean up in {}", config.join("ide").display());
    }
    Ok(EXIT_OK)
}

pub fn workspace(args: &Args) -> Outcome {
    let (op, path) = match args.operands.as_slice() {
        [] => (WorkspaceOp::List, None),
        [op] if op == "list" => (WorkspaceOp::List, None),
        [op, dir] if op == "add" => (WorkspaceOp::Add, Some(absolute(dir)?)),
        [op, dir] if op == "remove" => (WorkspaceOp::Remove, Some(absolute(dir)?)),
        _ => {
            return Err(Fail::Usage(
                "expected: ccide workspace [list | add DIR | remove DIR]".into(),
            ));
        }
    };
    let r = ask(args, Request::Workspace { op, path })?;
    for w in r["workspaces"].as_array().into_iter().flatten() {
        println!("{}", visible(w.as_str().unwrap_or("")));
    }
    Ok(EXIT_OK)
}

/// `ccide diagnostics [list | import [FILE] | clear [FILE]]`.
pub fn diagnostics(args: &Args) -> Outcome {
    let action = args.operands.first().map(String::as_str).unwrap_or("list");
    let rest = args.operands.get(1..).unwrap_or(&[]);
    if rest.len() > 1 {
        return Err(Fail::Usage(format!("unexpected argument '{}'", rest[1])));
    }
    match action {
        "list" | "ls" => diagnostics_list(args),
        "import" => diagnostics_import(args, rest.first().map(String::as_str)),
        "clear" => {
            let path = match rest.first() {
                Some(f) => Some(absolute(f)?),
                None => None,
            };
            let r = ask(args, Request::DiagnosticsClear { path })?;
            eprintln!(
                "cleared diagnostics of {} file(s)",
                r["cleared"].as_array().map_or(0, Vec::len)
            );
            Ok(EXIT_OK)
        }
        other => Err(Fail::Usage(format!(
            "unknown diagnostics action '{other}': expected list, import or clear"
        ))),
    }
}

/// `ccide diagnostics list`: every stored diagnostic, a line each, or in wire form as JSON.
fn diagnostics_list(args: &Args) -> Outcome {
    let r = ask(args, Request::DiagnosticsList)?;
    let files = r["files"].as_array().cloned().unwrap_or_default();
    if args.switch("--json")? {
        let wire: Vec<Value> = files
            .iter()
            .map(|f| obj! {"uri": f["uri"].clone(), "diagnostics": f["diagnostics"].clone()})
            .collect();
        print_json(&Value::Array(wire));
    } else if files.is_empty() {
        println!("no diagnostics stored");
    } else {
        // Messages and names come from checkers, servers and imported reports.
        let mut out = String::new();
        for f in &files {
            for l in f["lines"].as_array().into_iter().flatten() {
                out.push_str(&visible(l.as_str().unwrap_or("")));
                out.push('\n');
            }
        }
        print!("{out}");
    }
    Ok(EXIT_OK)
}

/// `ccide diagnostics import [FILE|-]`: hands a report (standard input without a file) to the
/// server in `--format` and says how many diagnostics it took.
fn diagnostics_import(args: &Args, file: Option<&str>) -> Outcome {
    let format = args.value("--format").unwrap_or_default();
    if crate::diagnostics::parse::Format::from_name(&format).is_none() {
        return Err(Fail::Usage(format!(
            "invalid value '{format}' for --format: expected auto, protocol, sarif, cargo, compiler or ruff"
        )));
    }
    // Not-UTF-8 bytes (a compiler echoing a Latin-1 source line) cost that text, not
    // the import.
    let bytes = match file {
        None | Some("-") => {
            stdin_bytes().map_err(|e| Fail::Failed(format!("cannot read standard input: {e}")))?
        }
        Some(f) => std::fs::read(f).map_err(|e| Fail::Failed(format!("cannot read {f}: {e}")))?,
    };
    let r = ask(
        args,
        Request::DiagnosticsImport {
            text: String::from_utf8_lossy(&bytes).into_owned(),
            format: Some(format),
            cwd: cwd_string(),
        },
    )?;
    let mut msg = format!(
        "imported {} diagnostic(s) for {} file(s)",
        r["diagnostics"], r["files"]
    );
    if r["outside_workspace"].as_u64().unwrap_or(0) > 0 {
        let _ = write!(
            msg,
            "; ignored {} outside the workspace",
            r["outside_workspace"]
        );
    }
    eprintln!("{msg}");
    Ok(EXIT_OK)
}

/// `ccide exec [list | approve [ID] | deny [ID]]`.
pub fn exec(args: &Args) -> Outcome {
    let action = args.operands.first().map_or("list", String::as_str);
    let target = args.operands.get(1);
    let list = matches!(action, "list" | "ls");
    if !list && !matches!(action, "approve" | "deny") {
        return Err(Fail::Usage(format!(
            "unknown exec action '{action}': expected list, approve or deny"
        )));
    }
    if let Some(extra) = args.operands.get(if list { 1 } else { 2 }) {
        return Err(Fail::Usage(format!("unexpected argument '{extra}'")));
    }
    let json_out = args.switch("--json")?;
    let mut ctl = connect(args)?;
    let r = ctl.request(&Request::Exec {
        action: match action {
            "approve" => ExecAction::Approve,
            "deny" => ExecAction::Deny,
            _ => ExecAction::List,
        },
        target: target.cloned(),
    })?;
    let answer = if list { &r["requests"] } else { &r["request"] };
    if json_out {
        print_json(answer);
    } else if !list {
        let word = if action == "approve" {
            "approved"
        } else {
            "denied"
        };
        println!(
            "{word} executeCode request {}",
            answer["id"].as_str().unwrap_or("")
        );
    } else if let Some(requests) = answer.as_array().filter(|a| !a.is_empty()) {
        for q in requests {
            println!(
                "request {} from client {}:",
                q["id"].as_str().unwrap_or(""),
                q["client"]
            );
            // Exactly what Python will run: a lone CR or an escape sequence would otherwise
            // hide code from the person approving it.
            let code = q["code"].as_str().unwrap_or("");
            for line in code.strip_suffix('\n').unwrap_or(code).split('\n') {
                println!("    {}", visible(line));
            }
            println!();
        }
        println!("run it with `ccide exec approve ID`, refuse it with `ccide exec deny ID`");
    } else {
        let mode = r["mode"].as_str().unwrap_or("");
        if mode == "ask" {
            println!("no executeCode requests are waiting");
        } else {
            println!("no executeCode requests are waiting (the server runs with --exec {mode})");
        }
    }
    Ok(EXIT_OK)
}
