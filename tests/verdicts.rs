//! What the user says of Claude's edits reaches the model (ccide-protocol(7) §13.6): the
//! reason given with `ccide diff accept|reject --why` and what they changed of a proposal are
//! kept by serve (`verdicts`, §9.2) until `ccide hook`, run by the CLI as its plugin's hook,
//! hands them to the model once; a hook never holds up or fails the CLI.

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::Duration;

use crate::util::*;
use serde_json::{Value, json};

const TAB: &str = "✻ [Claude Code] app.py (9c7eda) ⧉";

fn prompt_input(sb: &Sandbox) -> Value {
    json!({"session_id": "5f1c2a0e-0000-4000-8000-000000000001",
        "transcript_path": sb.home().join(".claude/projects/ws/s.jsonl"),
        "cwd": sb.ws(), "permission_mode": "manual", "hook_event_name": "UserPromptSubmit",
        "prompt": "what now?"})
}

fn edit_input(sb: &Sandbox, tool: &str, file: &Path) -> Value {
    json!({"session_id": "5f1c2a0e-0000-4000-8000-000000000001",
        "transcript_path": sb.home().join(".claude/projects/ws/s.jsonl"),
        "cwd": sb.ws(), "permission_mode": "manual", "hook_event_name": "PostToolUse",
        "tool_name": tool,
        "tool_input": {"file_path": file, "old_string": "y = 2", "new_string": "y = 3"},
        "tool_response": {"filePath": file, "userModified": true},
        "tool_use_id": "toolu_1"})
}

fn said(o: &Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(o)))
}

#[test]
fn a_rejection_with_a_reason_reaches_the_next_prompt_once() {
    let sb = Sandbox::new();
    let file = sb.write("src/app.py", "def old_name():\n    return 1\n");
    let s = sb.serve(&[]);
    let mut c = s.client();
    let id = open_diff(&mut c, &file, "def new_name():\n    return 1\n", TAB);
    wait_pending(&sb, 1);
    let o = sb.run_ok(&["diff", "reject", "--why", "keep the old name"]);
    assert_eq!(
        stdout(&o),
        "rejected diff 1 (src/app.py), with your reason\n"
    );
    assert_eq!(texts(&c.response(&id)), vec!["DIFF_REJECTED", TAB]);
    let o = hook(&sb, "user-prompt-submit", &prompt_input(&sb));
    assert_eq!(
        said(&o),
        json!({"hookSpecificOutput": {"hookEventName": "UserPromptSubmit",
            "additionalContext": "The user rejected your proposed edit of src/app.py (reason: keep the old name); the file was not changed."}})
    );
    // Told once: the next prompt hears nothing more.
    assert_eq!(
        stdout(&hook(&sb, "user-prompt-submit", &prompt_input(&sb))),
        ""
    );
}

#[test]
fn an_accepted_edit_the_user_changed_reaches_the_model_after_the_tool() {
    let sb = Sandbox::new();
    let file = sb.write("b.py", "x = 1\ny = 2\n");
    let other = sb.write("c.py", "");
    let s = sb.serve(&[]);
    let mut c = s.client();
    let id = open_diff(&mut c, &file, "x = 1\ny = 3\n", TAB);
    let d = &wait_pending(&sb, 1)[0];
    std::fs::write(
        Path::new(d["dir"].as_str().unwrap()).join("proposed"),
        "x = 1\ny = 3\nz = 4\n",
    )
    .unwrap();
    sb.run_ok(&["diff", "accept", "1", "--why", "z too"]);
    assert_eq!(
        texts(&c.response(&id)),
        vec!["FILE_SAVED", "x = 1\ny = 3\nz = 4\n"]
    );
    // Not after another tool, nor after an edit of another file: the verdict stays.
    let mut bash = edit_input(&sb, "Bash", &file);
    bash["tool_input"] = json!({"command": "ls"});
    assert_eq!(stdout(&hook(&sb, "post-tool-use", &bash)), "");
    let elsewhere = edit_input(&sb, "Edit", &other);
    assert_eq!(stdout(&hook(&sb, "post-tool-use", &elsewhere)), "");
    let o = hook(&sb, "post-tool-use", &edit_input(&sb, "Edit", &file));
    assert_eq!(
        said(&o),
        json!({"hookSpecificOutput": {"hookEventName": "PostToolUse",
            "additionalContext": "The user changed your proposed edit of b.py before accepting it (reason: z too).\nTheir changes to your proposal, which is what the file now holds:\n--- proposed/b.py\n+++ saved/b.py\n@@ -1,2 +1,3 @@\n x = 1\n y = 3\n+z = 4"}})
    );
    assert_eq!(
        stdout(&hook(&sb, "post-tool-use", &edit_input(&sb, "Edit", &file))),
        ""
    );
}

#[test]
fn a_plain_answer_keeps_no_verdict() {
    let sb = Sandbox::new();
    let file = sb.write("b.py", "x = 1\n");
    let s = sb.serve(&[]);
    let mut c = s.client();
    for accept in ["accept", "reject"] {
        let id = open_diff(&mut c, &file, "x = 2\n", TAB);
        wait_pending(&sb, 1);
        sb.run_ok(&["diff", accept]);
        c.response(&id);
    }
    assert_eq!(
        s.control(&json!({"id": 1, "cmd": "verdicts"})),
        json!({"id": 1, "ok": true, "verdicts": []})
    );
}

#[test]
fn a_verdict_goes_only_to_the_cli_that_proposed_the_edit() {
    let sb = Sandbox::new();
    let file = sb.write("app.py", "a\n");
    let s = sb.serve(&[]);
    // Another CLI: its pid is no ancestor of the hook.
    let mut c = s.connect();
    c.request(
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {}}),
    );
    c.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    c.send(&json!({"jsonrpc": "2.0", "method": "ide_connected", "params": {"pid": 999_999_999}}));
    let id = open_diff(&mut c, &file, "b\n", TAB);
    wait_pending(&sb, 1);
    sb.run_ok(&["diff", "reject", "--why", "no"]);
    c.response(&id);
    assert_eq!(
        stdout(&hook(&sb, "user-prompt-submit", &prompt_input(&sb))),
        ""
    );
    let r =
        s.control(&json!({"id": 2, "cmd": "verdicts", "path": "app.py", "pids": [999_999_999]}));
    assert_eq!(
        r,
        json!({"id": 2, "ok": true, "verdicts": [{"id": "1", "file": file, "how": "rejected",
            "verdict": {"kept": [], "dropped": [{"hunk": 1, "text": "@@ -1 +1 @@\n-a\n+b\n", "why": null}],
            "edited": [], "why": "no"}, "changes": null}]})
    );
    // Kept until said to be delivered.
    assert_eq!(
        s.control(&json!({"id": 3, "cmd": "verdicts"}))["verdicts"],
        r["verdicts"]
    );
    assert_eq!(
        s.control(&json!({"id": 4, "cmd": "verdicts", "delivered": ["1"]})),
        json!({"id": 4, "ok": true, "verdicts": []})
    );
}

#[test]
fn why_goes_only_with_accept_or_reject() {
    let sb = Sandbox::new();
    let o = sb.run(&["diff", "list", "--why", "x"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("--why goes with accept or reject"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn without_a_server_the_hook_says_nothing_and_exits_0() {
    let sb = Sandbox::new();
    for (event, input) in [
        ("user-prompt-submit", prompt_input(&sb)),
        (
            "post-tool-use",
            edit_input(&sb, "Edit", &sb.ws().join("a.py")),
        ),
    ] {
        assert_eq!(stdout(&hook(&sb, event, &input)), "", "{event}");
    }
    // Input it cannot read is no reason to fail the CLI's tool call either.
    let o = hook(&sb, "post-tool-use", &json!("not an event"));
    assert_eq!(stdout(&o), "");
}

/// Well under the control socket's own 30 s timeout: only the hook's deadline ends it sooner.
const HOOK_LIMIT: Duration = Duration::from_secs(15);

#[test]
fn a_stopped_server_or_an_input_never_closed_does_not_hold_up_the_cli() {
    let sb = Sandbox::new();
    let file = sb.write("app.py", "a\n");
    let s = sb.serve(&[]);
    let mut c = s.client();
    let id = open_diff(&mut c, &file, "b\n", TAB);
    wait_pending(&sb, 1);
    sb.run_ok(&["diff", "reject", "--why", "no"]);
    c.response(&id);
    // Standard input left open: the hook answers by its deadline all the same.
    let mut open = sb
        .command(&["hook", "user-prompt-submit"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdin = open.stdin.take().unwrap();
    let o = finished(open, HOOK_LIMIT);
    drop(stdin);
    assert_eq!((o.status.code(), stdout(&o)), (Some(0), String::new()));
    /// Continues the stopped server however the test ends, so that it can be stopped.
    struct Continue<'a>(&'a Server);
    impl Drop for Continue<'_> {
        fn drop(&mut self) {
            self.0.signal("CONT");
        }
    }
    s.signal("STOP");
    let stopped = Continue(&s);
    let o = finished(
        sb.hook_child("user-prompt-submit", &prompt_input(&sb)),
        HOOK_LIMIT,
    );
    drop(stopped);
    assert_eq!((o.status.code(), stdout(&o)), (Some(0), String::new()));
    // Once it runs again, the verdict is there: the stopped server was asked, not skipped.
    let o = hook(&sb, "user-prompt-submit", &prompt_input(&sb));
    assert_eq!(
        said(&o)["hookSpecificOutput"]["additionalContext"],
        "The user rejected your proposed edit of app.py (reason: no); the file was not changed."
    );
}
