//! `ccide hook EVENT`: the hooks of ccide's plugin for Claude Code (ccide-protocol(7) §13.6).
//! The CLI runs one at each of its events with the event as JSON on standard input; this one
//! asks the `ccide serve` of the project for what the user said of the edits they settled
//! (`verdicts`, §9.2) and answers with it as `additionalContext`, which the CLI gives the
//! model. The CLI tells the model of an edit the user changed only that it was changed, and of
//! a rejected one nothing at all.
//!
//! A hook must never hold up or fail the CLI's turn: whatever goes wrong (no server, a slow or
//! broken one, input it does not know), it prints nothing and exits 0 within `DEADLINE`.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::cli::{Args, CONFIG_DIR, Command, EXIT_OK, Fail, Outcome};
use crate::control::Control;
use crate::control::protocol::Request;
use crate::json::obj;

pub const COMMAND: Command = Command {
    name: "hook",
    usage: "ccide hook pre-tool-use|post-tool-use|user-prompt-submit|stop [OPTIONS]",
    about: "A hook of ccide's plugin for Claude Code: tells Claude what you changed of its edits, and why.",
    details: "Claude Code runs it with the hook's JSON on standard input. pre-tool-use and post-tool-use\n(around Edit, Write, MultiEdit, NotebookEdit and Bash) record what the tool changed for\nccide review; user-prompt-submit begins a turn. post-tool-use and user-prompt-submit print\nthe reasons given with ccide diff accept|reject --why, what was changed of a proposal, and\nthe hunks undone with ccide review, as additionalContext. stop ends the turn; with serve\n--review-gate it waits until the turn is reviewed and hands Claude what was undone.\nWithout a server, or with one that does not answer within a second, it prints nothing;\nit always exits 0.",
    flags: &[CONFIG_DIR],
    run,
    passthrough: false,
};

/// The longest a hook holds up the CLI.
const DEADLINE: Duration = Duration::from_secs(1);
/// The least time given to say which verdicts were told, when the answer came late.
const ACK_TIME: Duration = Duration::from_millis(200);
/// The largest hook input read (a Write's `tool_input` holds the whole file).
const MAX_INPUT: u64 = 64 << 20;

#[derive(Clone, Copy, PartialEq, Debug)]
enum Event {
    PreToolUse,
    PostToolUse,
    UserPromptSubmit,
    Stop,
}

/// The hooks by their command-line name, their event, what `record` calls it, and the
/// CLI's name of it (`hookEventName`). In the order of `Event`.
const EVENTS: [(&str, Event, &str, &str); 4] = [
    ("pre-tool-use", Event::PreToolUse, "pre", "PreToolUse"),
    ("post-tool-use", Event::PostToolUse, "post", "PostToolUse"),
    (
        "user-prompt-submit",
        Event::UserPromptSubmit,
        "prompt",
        "UserPromptSubmit",
    ),
    ("stop", Event::Stop, "stop", "Stop"),
];

pub fn run(args: &Args) -> Outcome {
    let name = args.operands.first().map(String::as_str).unwrap_or("");
    let Some(&(_, event, _, _)) = EVENTS.iter().find(|e| e.0 == name) else {
        return Err(Fail::Usage(format!(
            "unknown hook '{name}': expected pre-tool-use, post-tool-use, user-prompt-submit or stop"
        )));
    };
    let config = args.value("--config-dir");
    let start = Instant::now();
    let rx = std::sync::Arc::new(crate::proc::Queue::default());
    let tx = rx.clone();
    // The work runs on its own thread so that the deadline holds whatever blocks (a CLI that
    // keeps standard input open, a server that stopped answering); the process ends with
    // the main thread.
    let worker = crate::proc::spawn_thread("hook", move || {
        tx.push(context(event, config.as_deref()));
    });
    let said = match worker {
        Ok(_) => rx.pop(Some(Instant::now() + DEADLINE)).flatten(),
        Err(_) => None,
    };
    let Some(Told {
        mut text,
        ids,
        mut ctl,
        held,
    }) = said
    else {
        return Ok(EXIT_OK);
    };
    if let Some(record) = held {
        // --review-gate: the turn ends when the user has decided every hunk of it, then
        // Claude goes on with what they undid.
        let _ = ctl.set_timeout(None);
        text = hold(&mut ctl, &record);
        if text.is_empty() {
            return Ok(EXIT_OK);
        }
    }
    let out = match event {
        Event::Stop => obj! {"decision": "block", "reason": text},
        _ => {
            let name = EVENTS[event as usize].3;
            obj! {"hookSpecificOutput": obj! {"hookEventName": name, "additionalContext": text}}
        }
    };
    let mut stdout = std::io::stdout().lock();
    if writeln!(stdout, "{out}")
        .and_then(|_| stdout.flush())
        .is_ok()
        && !ids.is_empty()
    {
        // Written: serve forgets them. Had the hook given up before, they would stay for the
        // next one; an acknowledgement lost here only tells them twice.
        let left = DEADLINE.saturating_sub(start.elapsed()).max(ACK_TIME);
        if ctl.set_timeout(Some(left)).is_ok() {
            let _ = ctl.request(&Request::Verdicts {
                path: None,
                pids: Some(Vec::new()),
                delivered: ids,
            });
        }
    }
    Ok(EXIT_OK)
}

/// What a hook tells the model, the verdicts it told, and the connection to say so on.
struct Told {
    text: String,
    ids: Vec<String>,
    ctl: Control,
    /// A turn held for review: the request to ask again.
    held: Option<Request>,
}

/// Asks `record` again until nothing of the turn is undecided: what the model is to be told
/// then (nothing when the server went away).
fn hold(ctl: &mut Control, record: &Request) -> String {
    loop {
        std::thread::sleep(Duration::from_millis(300));
        let Ok(r) = ctl.request(record) else {
            return String::new();
        };
        if r["undecided"] == 0 {
            return told(&r).join("\n\n");
        }
    }
}

fn told(r: &Value) -> Vec<String> {
    r["told"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| t.as_str().map(String::from))
        .collect()
}

/// What the model is to be told, if anything.
fn context(event: Event, config: Option<&str>) -> Option<Told> {
    // The input holds whole files: read in a few gulps, and only what is used kept.
    // The edited file's path comes before the file's content: reading stops there, as a hook
    // that runs `true` stops.
    let pruning = crate::json::Pruning {
        depth: 2,
        longest: 1 << 16,
        stop_after: &[["tool_input", "file_path"], ["tool_input", "notebook_path"]],
        first: &["session_id", "cwd", "tool_name"],
    };
    let input = crate::json::read_pruned(std::io::stdin(), MAX_INPUT, &pruning).ok()?;
    let input: Value = serde_json::from_slice(&input).ok()?;
    let cwd = input["cwd"]
        .as_str()
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("CLAUDE_PROJECT_DIR").map(PathBuf::from))?;
    let config = crate::lockfile::config_dir(config).ok()?;
    let root = crate::files::canonical_dir(&cwd).ok()?;
    let mut ctl = crate::control::connect_to_server(&config, &root)?;
    ctl.set_timeout(Some(DEADLINE)).ok()?;
    let mut told = Vec::new();
    let mut held = None;
    if let Some(record) = record(event, &input) {
        let r = ctl.request(&record).ok()?;
        told = self::told(&r);
        if event == Event::Stop && r["gate"] == true && r["undecided"] != 0 {
            held = Some(record);
        }
    }
    let path = match event {
        Event::PostToolUse => edited_file(&input),
        Event::UserPromptSubmit => None,
        _ if held.is_some() || !told.is_empty() => {
            return Some(Told {
                text: told.join("\n\n"),
                ids: Vec::new(),
                ctl,
                held,
            });
        }
        _ => return None,
    };
    if event == Event::PostToolUse && path.is_none() && told.is_empty() {
        return None;
    }
    let r = ctl
        .request(&Request::Verdicts {
            path,
            pids: Some(ancestors()),
            delivered: Vec::new(),
        })
        .ok()?;
    let verdicts = r["verdicts"].as_array()?;
    told.extend(verdicts.iter().map(|v| describe(v, &root)));
    if told.is_empty() {
        return None;
    }
    let ids = verdicts
        .iter()
        .filter_map(|v| v["id"].as_str().map(String::from))
        .collect();
    Some(Told {
        text: told.join("\n\n"),
        ids,
        ctl,
        held: None,
    })
}

/// What serve is to record of this hook (ccide-protocol(7) §15), for the tools it watches.
fn record(event: Event, input: &Value) -> Option<Request> {
    let tool = input["tool_name"].as_str();
    let text = |k: &str| input[k].as_str().map(String::from);
    let watched = matches!(
        tool,
        None | Some("Edit" | "Write" | "MultiEdit" | "NotebookEdit" | "Bash" | "Read")
    );
    // A file Claude read is known from then on (a command's change of it is seen).
    let read = tool == Some("Read");
    let session = text("session_id").filter(|_| watched)?;
    let path = match read {
        true => input["tool_input"]["file_path"].as_str().map(String::from),
        false => edited_file(input),
    };
    // An edit's input is read only up to its file (`context`): its call is the session's
    // edit of that file, the same before and after it.
    let call = text("tool_use_id").or_else(|| Some(format!("{session} {}", path.as_deref()?)));
    let event = if read {
        "read"
    } else {
        EVENTS[event as usize].2
    };
    Some(Request::Record {
        event: event.into(),
        session,
        call,
        tool: tool.map(String::from),
        path,
    })
}

/// The file a tool edits: Edit, Write and MultiEdit name it `file_path`, NotebookEdit
/// `notebook_path`.
fn edited_file(input: &Value) -> Option<String> {
    let i = &input["tool_input"];
    matches!(
        input["tool_name"].as_str()?,
        "Edit" | "Write" | "MultiEdit" | "NotebookEdit"
    )
    .then(|| i["file_path"].as_str().or(i["notebook_path"].as_str()))?
    .map(String::from)
}

/// This process's ancestors, nearest first: the CLI that runs the hook is among them (its
/// pid is what it said in `ide_connected`), maybe behind a shell.
fn ancestors() -> Vec<i64> {
    let mut pids = Vec::new();
    let mut pid = std::process::id();
    while let Some(parent) = crate::proc::parent_of(pid) {
        if pids.len() == 8 {
            break;
        }
        pids.push(parent.into());
        pid = parent;
    }
    pids
}

/// "1", "1 and 3", "1, 2 and 3".
fn numbers(list: &[Value]) -> String {
    let n: Vec<String> = list
        .iter()
        .map(|v| match v {
            Value::Object(_) => v["hunk"].to_string(),
            _ => v.to_string(),
        })
        .collect();
    match n.split_last() {
        None => String::new(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
    }
}

fn hunks(word: &str, list: &[Value]) -> String {
    let s = if list.len() == 1 { "" } else { "s" };
    format!("{word} hunk{s} {}", numbers(list))
}

/// One verdict as the model reads it (`verdicts`' entry: file, how, verdict, changes).
fn describe(v: &Value, root: &Path) -> String {
    let file = v["file"].as_str().unwrap_or("");
    let file = Path::new(file)
        .strip_prefix(root)
        .map_or(file.to_string(), |p| p.display().to_string());
    let verdict = &v["verdict"];
    let list = |k: &str| verdict[k].as_array().cloned().unwrap_or_default();
    let (kept, dropped, edited) = (list("kept"), list("dropped"), list("edited"));
    let reason = |w: &Value| {
        w.as_str()
            .filter(|w| !w.is_empty())
            .map(|w| format!(" (reason: {w})"))
    };
    let mut parts = Vec::new();
    if !kept.is_empty() {
        parts.push(hunks("kept", &kept));
    }
    for d in &dropped {
        parts.push(format!(
            "dropped hunk {}{}",
            d["hunk"],
            reason(&d["why"]).unwrap_or_default()
        ));
    }
    if !edited.is_empty() {
        parts.push(hunks("changed", &edited));
    }
    let why = reason(&verdict["why"]).unwrap_or_default();
    let accepted = v["how"] == "accepted";
    // Accepted in part: the hunks say what; rejected, or accepted whole: the edit does.
    let in_part = accepted && (!dropped.is_empty() || !edited.is_empty());
    let mut text = if in_part {
        format!(
            "The user reviewed your edit of {file}: {}{why}.",
            parts.join(", ")
        )
    } else if accepted && v["changes"].is_string() {
        format!("The user changed your proposed edit of {file} before accepting it{why}.")
    } else if accepted {
        format!("The user accepted your proposed edit of {file} as it was{why}.")
    } else {
        let mut t = format!(
            "The user rejected your proposed edit of {file}{why}; the file was not changed."
        );
        for d in &dropped {
            if let Some(w) = d["why"].as_str().filter(|w| !w.is_empty()) {
                t.push_str(&format!(" Of hunk {}: {w}.", d["hunk"]));
            }
        }
        t
    };
    if in_part && !dropped.is_empty() {
        text.push_str(" Dropped:");
        for d in &dropped {
            text.push('\n');
            text.push_str(d["text"].as_str().unwrap_or("").trim_end());
        }
    }
    // Hunks only dropped are told whole above; what the user changed otherwise (an edited
    // hunk, an edited proposal) as the diff from the proposal to the file.
    let told = in_part && edited.is_empty();
    if let Some(changes) = v["changes"].as_str().filter(|c| !c.is_empty() && !told) {
        text.push_str("\nTheir changes to your proposal, which is what the file now holds:\n");
        text.push_str(changes.trim_end());
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn root() -> PathBuf {
        PathBuf::from("/w")
    }

    #[test]
    fn a_rejection_with_a_reason_says_the_reason() {
        let v = json!({"id": "3", "file": "/w/src/app.py", "how": "rejected", "changes": null,
            "verdict": {"kept": [], "dropped": [], "edited": [], "why": "keep the old name"}});
        assert_eq!(
            describe(&v, &root()),
            "The user rejected your proposed edit of src/app.py (reason: keep the old name); the file was not changed."
        );
    }

    /// Rejected whole, as `ccide diff reject --why` or a review that dropped every hunk
    /// records it: the edit was rejected, with the reasons given per hunk.
    #[test]
    fn a_rejection_of_every_hunk_is_a_rejection_with_their_reasons() {
        let v = json!({"id": "3", "file": "/w/src/app.py", "how": "rejected", "changes": null,
            "verdict": {"kept": [], "dropped": [{"hunk": 1, "text": "@@ -1 +1 @@\n-a\n+b\n", "why": null},
            {"hunk": 2, "text": "@@ -5 +5 @@\n-c\n+d\n", "why": "c stays"}], "edited": [], "why": "no"}});
        assert_eq!(
            describe(&v, &root()),
            "The user rejected your proposed edit of src/app.py (reason: no); the file was not changed. Of hunk 2: c stays."
        );
    }

    #[test]
    fn a_review_by_hunks_names_them_and_quotes_the_dropped_ones() {
        // The file differs from the proposal by the dropped hunk alone: quoted once.
        let v = json!({"id": "3", "file": "/w/src/app.py", "how": "accepted",
            "changes": "--- proposed/app.py\n+++ saved/app.py\n@@ -1 +1 @@\n-b\n+a\n",
            "verdict": {"kept": [1, 3], "dropped": [{"hunk": 2, "text": "@@ -1 +1 @@\n-a\n+b\n", "why": "keep the old name"}],
            "edited": [], "why": null}});
        assert_eq!(
            describe(&v, &root()),
            "The user reviewed your edit of src/app.py: kept hunks 1 and 3, dropped hunk 2 (reason: keep the old name). Dropped:\n@@ -1 +1 @@\n-a\n+b"
        );
    }

    #[test]
    fn an_accepted_edit_the_user_changed_carries_the_changes() {
        let v = json!({"id": "4", "file": "/elsewhere/a.txt", "how": "accepted",
            "changes": "--- proposed/a.txt\n+++ saved/a.txt\n@@ -1 +1 @@\n-x\n+y\n",
            "verdict": {"kept": [], "dropped": [], "edited": [], "why": null}});
        assert_eq!(
            describe(&v, &root()),
            "The user changed your proposed edit of /elsewhere/a.txt before accepting it.\nTheir changes to your proposal, which is what the file now holds:\n--- proposed/a.txt\n+++ saved/a.txt\n@@ -1 +1 @@\n-x\n+y"
        );
    }

    #[test]
    fn an_edit_accepted_as_it_was_says_so_with_the_reason() {
        let v = json!({"id": "5", "file": "/w/a.txt", "how": "accepted", "changes": null,
            "verdict": {"kept": [], "dropped": [], "edited": [], "why": "fine"}});
        assert_eq!(
            describe(&v, &root()),
            "The user accepted your proposed edit of a.txt as it was (reason: fine)."
        );
    }

    #[test]
    fn only_edits_of_files_ask_after_a_tool() {
        let edit = json!({"tool_name": "Edit", "tool_input": {"file_path": "/w/a"}});
        assert_eq!(edited_file(&edit).as_deref(), Some("/w/a"));
        let bash = json!({"tool_name": "Bash", "tool_input": {"command": "ls"}});
        assert_eq!(edited_file(&bash), None);
        assert_eq!(numbers(&[json!(1), json!(2), json!(5)]), "1, 2 and 5");
    }
}
