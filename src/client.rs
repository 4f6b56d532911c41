//! The commands that talk to a running `serve` through its control socket.

use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use serde_json::{Value, json};

use crate::cli::{Args, EXIT_FAILURE, EXIT_OK, Fail, Outcome};
use crate::control::{self, Control, Found};

/// Connects to the server for the current directory (or `--port`).
pub fn connect(args: &Args) -> Result<Control, Fail> {
    let config = crate::lockfile::config_dir(args.value("--config-dir").as_deref())?;
    let port = args.parsed::<u16>("--port", "a port number from 1 to 65535")?;
    let cwd = control::current_dir()?;
    match control::find_server(&config, port, &cwd) {
        Ok(lock) => Ok(Control::connect(lock)?),
        Err(Found::None(m)) => Err(Fail::Failed(m)),
        Err(Found::Several(m)) => Err(Fail::Usage(m)),
    }
}

fn cwd_string() -> String {
    control::current_dir()
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default()
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
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    let s = now.saturating_sub(created);
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m", s / 60),
        3600..86400 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

fn print_json(v: &Value) {
    println!("{}", serde_json::to_string_pretty(v).unwrap_or_default());
}

fn use_color() -> bool {
    std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
        && crate::sys::isatty(1)
        && std::env::var("TERM").is_ok_and(|t| t != "dumb")
}

struct DiffFiles {
    original: Vec<u8>,
    proposed: Vec<u8>,
}

fn read_diff(d: &Value) -> Result<DiffFiles, Fail> {
    let dir = PathBuf::from(d["dir"].as_str().unwrap_or(""));
    let read = |name: &str| {
        std::fs::read(dir.join(name))
            .map_err(|e| Fail::Failed(format!("cannot read {}: {e}", dir.join(name).display())))
    };
    Ok(DiffFiles {
        original: read("original")?,
        proposed: read("proposed")?,
    })
}

/// The one diff `target` names among `diffs`, or the only one.
fn pick<'a>(diffs: &'a [Value], target: Option<&str>) -> Result<&'a Value, Fail> {
    match target {
        None => match diffs.len() {
            0 => Err(Fail::Failed("no pending diffs".into())),
            1 => Ok(&diffs[0]),
            n => Err(Fail::Failed(format!(
                "{n} diffs are pending; name one:\n{}",
                diffs
                    .iter()
                    .map(|d| format!("  {}  {}", d["id"].as_str().unwrap_or(""), file_of(d)))
                    .collect::<Vec<_>>()
                    .join("\n")
            ))),
        },
        Some(t) => {
            let cwd = control::current_dir().unwrap_or_default();
            let as_path = crate::files::normalize(&cwd.join(t));
            diffs
                .iter()
                .find(|d| {
                    d["id"] == t || d["tab_name"] == t || Path::new(d["file"].as_str().unwrap_or("")) == as_path
                })
                .ok_or_else(|| Fail::Failed(format!("no pending diff named {t}")))
        }
    }
}

fn file_of(d: &Value) -> String {
    display_path(Path::new(d["file"].as_str().unwrap_or("")))
}

pub fn diff(args: &Args) -> Outcome {
    let action = args.operands.first().map(String::as_str).unwrap_or("list");
    let target = args.operands.get(1).map(String::as_str);
    if args.operands.len() > 2 {
        return Err(Fail::Usage(format!("unexpected argument '{}'", args.operands[2])));
    }
    let json_out = args.switch("--json")?;
    let mut ctl = connect(args)?;
    match action {
        "list" | "ls" => {
            if target.is_some() {
                return Err(Fail::Usage("ccide diff list takes no argument".into()));
            }
            let r = ctl.request(json!({"cmd": "diff.list"}))?;
            let diffs = r["diffs"].as_array().cloned().unwrap_or_default();
            if json_out {
                let mut out = Vec::new();
                for d in diffs {
                    let f = read_diff(&d)?;
                    let (added, removed) = crate::textdiff::stat(&f.original, &f.proposed);
                    let mut d = d;
                    d["added"] = added.into();
                    d["removed"] = removed.into();
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
            for d in &diffs {
                let f = read_diff(d)?;
                let (added, removed) = crate::textdiff::stat(&f.original, &f.proposed);
                let new = if d["new_file"] == true { " (new file)" } else { "" };
                println!(
                    "{:<4} {:<5} {:<13} {}{new}",
                    d["id"].as_str().unwrap_or(""),
                    age(d["created"].as_u64().unwrap_or(0)),
                    format!("+{added} -{removed}"),
                    file_of(d)
                );
            }
            Ok(EXIT_OK)
        }
        "show" | "path" | "edit" => {
            let r = ctl.request(json!({"cmd": "diff.list"}))?;
            let diffs = r["diffs"].as_array().cloned().unwrap_or_default();
            let d = pick(&diffs, target)?;
            let dir = d["dir"].as_str().unwrap_or("");
            match action {
                "path" => {
                    println!("{dir}");
                    Ok(EXIT_OK)
                }
                "edit" => edit(&Path::new(dir).join("proposed")),
                _ => {
                    let f = read_diff(d)?;
                    let name = file_of(d);
                    let a = if d["new_file"] == true {
                        "/dev/null".to_string()
                    } else {
                        format!("a/{name}")
                    };
                    let b = format!("b/{name}");
                    if json_out {
                        let text = crate::textdiff::unified(&f.original, &f.proposed, &a, &b, false);
                        let (added, removed) = crate::textdiff::stat(&f.original, &f.proposed);
                        let mut d = d.clone();
                        d["added"] = added.into();
                        d["removed"] = removed.into();
                        d["diff"] = String::from_utf8_lossy(&text).into_owned().into();
                        print_json(&d);
                    } else {
                        let text = crate::textdiff::unified(&f.original, &f.proposed, &a, &b, use_color());
                        let mut out = std::io::stdout().lock();
                        let _ = out.write_all(&text);
                        if text.is_empty() {
                            let _ = writeln!(out, "no changes: the proposal equals the original");
                        }
                    }
                    Ok(EXIT_OK)
                }
            }
        }
        "accept" | "reject" => {
            let accept = action == "accept";
            let r = ctl.request(json!({"cmd": "diff.settle", "target": target, "accept": accept, "cwd": cwd_string()}))?;
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
                println!("rejected diff {} ({})", d["id"].as_str().unwrap_or(""), file_of(d));
            }
            Ok(EXIT_OK)
        }
        other => Err(Fail::Usage(format!(
            "unknown diff action '{other}': expected list, show, accept, reject, edit or path"
        ))),
    }
}

/// Opens `proposed` in the user's editor; accepting stays a separate, explicit step.
fn edit(path: &Path) -> Outcome {
    let editor = std::env::var("VISUAL")
        .ok()
        .filter(|v| !v.is_empty())
        .or_else(|| std::env::var("EDITOR").ok().filter(|v| !v.is_empty()))
        .ok_or_else(|| Fail::Failed("set VISUAL or EDITOR to the editor to open the proposal with".into()))?;
    let words = crate::pattern::split_words(&editor).map_err(|e| Fail::Failed(format!("cannot parse the editor command '{editor}': {e}")))?;
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
    eprintln!("edited {}; run `ccide diff accept` to send it to Claude Code", path.display());
    Ok(EXIT_OK)
}

pub fn events(args: &Args) -> Outcome {
    if let Some(extra) = args.operands.first() {
        return Err(Fail::Usage(format!("unexpected argument '{extra}'")));
    }
    let mut ctl = connect(args)?;
    // The server answers nothing to `events` but starts streaming.
    let line = json!({"cmd": "events"}).to_string() + "\n";
    let mut w = ctl_writer(&mut ctl)?;
    w.write_all(line.as_bytes()).map_err(|e| Fail::Failed(e.to_string()))?;
    let reader = ctl.into_reader();
    let mut out = std::io::stdout().lock();
    for l in reader.lines() {
        let Ok(l) = l else { break };
        if writeln!(out, "{l}").is_err() || out.flush().is_err() {
            return Ok(EXIT_OK);
        }
    }
    eprintln!("ccide: the server stopped");
    Ok(EXIT_FAILURE)
}

fn ctl_writer(ctl: &mut Control) -> Result<std::os::unix::net::UnixStream, Fail> {
    ctl.writer_clone().map_err(|e| Fail::Failed(e.to_string()))
}
