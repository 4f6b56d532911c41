//! Review after the fact (ccide-protocol(7) §15): the plugin's hooks, run as the CLI runs them,
//! record what Claude's tools changed per session and turn; `ccide review` lists it hunk by
//! hunk, keeps or undoes hunks in the file as it is now, and the model hears what was undone.

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use crate::util::*;
use serde_json::{Value, json};

pub(crate) const ONE: &str = "5f1c2a0e-0000-4000-8000-000000000001";
const TWO: &str = "9b3d7e11-0000-4000-8000-000000000002";

/// A hook's input as the CLI writes it for `event`, with `extra` fields.
fn input(sb: &Sandbox, session: &str, event: &str, extra: Value) -> Value {
    let mut v = json!({"session_id": session,
        "transcript_path": sb.home().join(format!(".claude/projects/ws/{session}.jsonl")),
        "cwd": sb.ws(), "permission_mode": "acceptEdits", "hook_event_name": event});
    for (k, x) in extra.as_object().unwrap() {
        v[k] = x.clone();
    }
    v
}

/// The user's prompt: a turn begins. What the hook printed.
pub(crate) fn prompt(sb: &Sandbox, session: &str) -> String {
    let i = input(sb, session, "UserPromptSubmit", json!({"prompt": "go on"}));
    stdout(&hook(sb, "user-prompt-submit", &i))
}

/// One tool call of Claude's as the CLI runs it: PreToolUse, the tool (`act`), PostToolUse.
/// What the PostToolUse hook printed.
fn tool(sb: &Sandbox, session: &str, name: &str, args: Value, act: impl FnOnce()) -> String {
    static CALL: AtomicU64 = AtomicU64::new(0);
    let id = format!("toolu_{:04}", CALL.fetch_add(1, Ordering::Relaxed));
    let call = json!({"tool_name": name, "tool_input": args, "tool_use_id": id});
    let pre = input(sb, session, "PreToolUse", call.clone());
    assert_eq!(stdout(&hook(sb, "pre-tool-use", &pre)), "");
    act();
    let mut post = input(sb, session, "PostToolUse", call);
    post["tool_response"] = json!({"success": true});
    stdout(&hook(sb, "post-tool-use", &post))
}

/// An Edit of `file` to `after`, as Claude makes it.
pub(crate) fn edit(sb: &Sandbox, session: &str, file: &Path, after: &[u8]) -> String {
    let args = json!({"file_path": file, "old_string": "x", "new_string": "y"});
    tool(sb, session, "Edit", args, || {
        std::fs::write(file, after).unwrap()
    })
}

fn review(sb: &Sandbox, args: &[&str]) -> Value {
    let mut all = vec!["review"];
    all.extend_from_slice(args);
    all.push("--json");
    serde_json::from_slice(&sb.run_ok(&all).stdout).unwrap()
}

/// Each listed change as (file name, tool, session, turn, [hunk texts]).
fn hunks(v: &Value) -> Vec<(String, String, String, u64, Vec<String>)> {
    v["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let name = Path::new(c["file"].as_str().unwrap()).file_name().unwrap();
            let texts = c["hunks"].as_array().unwrap().iter();
            (
                name.to_string_lossy().into_owned(),
                c["tool"].as_str().unwrap().to_string(),
                c["session"].as_str().unwrap()[..8].to_string(),
                c["turn"].as_u64().unwrap(),
                texts
                    .map(|h| h["text"].as_str().unwrap().to_string())
                    .collect(),
            )
        })
        .collect()
}

fn h(
    file: &str,
    tool: &str,
    session: &str,
    turn: u64,
    texts: &[&str],
) -> (String, String, String, u64, Vec<String>) {
    let texts = texts.iter().map(|t| t.to_string()).collect();
    (file.into(), tool.into(), session[..8].into(), turn, texts)
}

#[test]
fn each_tool_is_recorded_as_claude_made_it_and_never_the_users_own_edits() {
    let sb = Sandbox::new();
    let a = sb.write("a.py", "x = 1\ny = 2\n");
    let nb = sb.write("n.ipynb", "{\"cells\": []}\n");
    let _s = sb.serve(&[]);
    assert_eq!(prompt(&sb, ONE), "");
    // The user's edit before the turn's first tool call: not Claude's.
    std::fs::write(&a, "x = 1\ny = 2\nuser = 0\n").unwrap();
    assert_eq!(edit(&sb, ONE, &a, b"x = 10\ny = 2\nuser = 0\n"), "");
    // The user's edit between two of Claude's: not Claude's either.
    std::fs::write(&a, "x = 10\ny = 2\nuser = 1\n").unwrap();
    let multi = json!({"file_path": a, "edits": []});
    tool(&sb, ONE, "MultiEdit", multi, || {
        std::fs::write(&a, "x = 10\ny = 20\nuser = 1\n").unwrap()
    });
    let c = sb.ws().join("new/c.txt");
    let write = json!({"file_path": c, "content": "made\n"});
    tool(&sb, ONE, "Write", write, || {
        std::fs::create_dir_all(c.parent().unwrap()).unwrap();
        std::fs::write(&c, "made\n").unwrap()
    });
    let cell = json!({"notebook_path": nb, "new_source": "print(1)"});
    tool(&sb, ONE, "NotebookEdit", cell, || {
        std::fs::write(&nb, "{\"cells\": [1]}\n").unwrap()
    });
    // A call that changed nothing, and the user's edit after the turn: no change.
    edit(&sb, ONE, &a, b"x = 10\ny = 20\nuser = 1\n");
    std::fs::write(&a, "x = 10\ny = 20\nuser = 2\n").unwrap();
    let v = review(&sb, &[]);
    assert_eq!(
        hunks(&v),
        vec![
            h(
                "a.py",
                "Edit",
                ONE,
                1,
                &["@@ -1,3 +1,3 @@\n-x = 1\n+x = 10\n y = 2\n user = 0\n"]
            ),
            h(
                "a.py",
                "MultiEdit",
                ONE,
                1,
                &["@@ -1,3 +1,3 @@\n x = 10\n-y = 2\n+y = 20\n user = 1\n"]
            ),
            h("c.txt", "Write", ONE, 1, &["@@ -0,0 +1 @@\n+made\n"]),
            h(
                "n.ipynb",
                "NotebookEdit",
                ONE,
                1,
                &["@@ -1 +1 @@\n-{\"cells\": []}\n+{\"cells\": [1]}\n"]
            ),
        ]
    );
    assert_eq!(v["changes"][2]["new_file"], true);
    // The latest turn is the latest that changed something; the one before stays under --turn.
    prompt(&sb, ONE);
    assert_eq!(hunks(&review(&sb, &[])).len(), 4);
    edit(
        &sb,
        ONE,
        &a,
        b"x = 10
y = 20
user = 3
",
    );
    assert_eq!(hunks(&review(&sb, &[]))[0].3, 2);
    assert_eq!(hunks(&review(&sb, &["--turn", "1"])).len(), 4);
    // The text listing numbers the hunks across the changes.
    let o = sb.run_ok(&["review", "list", "--turn", "1"]);
    assert!(
        stdout(&o).starts_with("change 0: a.py (Edit, session 5f1c2a0e, turn 1)\n@@ -1,3 +1,3 @@ hunk 1/4\n-x = 1\n+x = 10\n"),
        "{}",
        stdout(&o)
    );
}

/// A file with two of Claude's hunks, in `bytes` made of `lines` (each with its ending).
fn two_hunks(
    sb: &Sandbox,
    name: &str,
    bom: &str,
    eol: &str,
) -> (std::path::PathBuf, Vec<u8>, Vec<u8>) {
    let body = |a: &str, z: &str| {
        let mut lines = vec![a.to_string()];
        lines.extend((1..=10).map(|i| format!("mid {i}")));
        lines.push(z.into());
        format!("{bom}{}{eol}", lines.join(eol)).into_bytes()
    };
    let before = body("first", "last");
    let after = body("FIRST", "LAST");
    let f = sb.write(name, &before);
    edit(sb, ONE, &f, &after);
    (f, before, after)
}

#[test]
fn undo_writes_the_reverse_of_the_hunk_byte_for_byte_and_keep_restores_it() {
    let sb = Sandbox::new();
    let _s = sb.serve(&[]);
    prompt(&sb, ONE);
    let mut files = Vec::new();
    for (name, bom, eol) in [
        ("lf.txt", "", "\n"),
        ("crlf.txt", "", "\r\n"),
        ("bom.txt", "\u{feff}", "\r\n"),
    ] {
        files.push((name, bom, eol, two_hunks(&sb, name, bom, eol)));
    }
    // Hunk 2 of each file (hunks 2, 4, 6 in the listing): its last line.
    let o = sb.run_ok(&[
        "review",
        "undo",
        "--hunks",
        "2,4,6",
        "--why",
        "keep the tail",
    ]);
    assert_eq!(
        stdout(&o),
        "undid hunk 2 (lf.txt)\nundid hunk 4 (crlf.txt)\nundid hunk 6 (bom.txt)\n"
    );
    for (name, bom, eol, (f, before, after)) in &files {
        let now = std::fs::read(f).unwrap();
        let mut want = after.clone();
        let (b, a) = (format!("last{eol}"), format!("LAST{eol}"));
        want.truncate(want.len() - a.len());
        want.extend_from_slice(b.as_bytes());
        assert_eq!(
            String::from_utf8_lossy(&now),
            String::from_utf8_lossy(&want),
            "{name}"
        );
        assert!(now.starts_with(format!("{bom}FIRST").as_bytes()), "{name}");
        assert_ne!(&now, before);
    }
    let v = review(&sb, &[]);
    assert_eq!(v["changes"][0]["hunks"][1]["state"], "undone");
    assert_eq!(v["changes"][0]["hunks"][1]["why"], "keep the tail");
    assert_eq!(v["changes"][0]["hunks"][0]["state"], Value::Null);
    // The undo undone: the file is Claude's again, exactly.
    sb.run_ok(&["review", "keep", "--hunks", "2,4,6"]);
    for (name, _, _, (f, _, after)) in &files {
        assert_eq!(&std::fs::read(f).unwrap(), after, "{name}");
    }
    // Everything undone: the files as they were before Claude's edit.
    sb.run_ok(&["review", "undo"]);
    for (name, _, _, (f, before, _)) in &files {
        assert_eq!(&std::fs::read(f).unwrap(), before, "{name}");
    }
}

#[test]
fn undo_is_refused_when_the_user_changed_those_lines_and_touches_nothing() {
    let sb = Sandbox::new();
    let _s = sb.serve(&[]);
    prompt(&sb, ONE);
    let (f, _, after) = two_hunks(&sb, "a.txt", "", "\n");
    let mine = String::from_utf8(after)
        .unwrap()
        .replace("LAST", "LAST!")
        .replace("mid 1\n", "mid one\n");
    std::fs::write(&f, &mine).unwrap();
    let o = sb.run(&["review", "undo", "--hunks", "2"]);
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        format!(
            "ccide: hunk 2 of change 0 was not undone: lines 9-12 of {} changed since Claude wrote them; nothing was written\n",
            f.display()
        )
    );
    assert_eq!(std::fs::read_to_string(&f).unwrap(), mine);
    // Hunk 1's lines are as Claude wrote them (only its context moved by the user's edit
    // elsewhere is refused too: "mid 1" is its context).
    let o = sb.run(&["review", "undo", "--hunks", "1"]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    std::fs::write(&f, mine.replace("mid one\n", "mid 1\n")).unwrap();
    sb.run_ok(&["review", "undo", "--hunks", "1"]);
    assert_eq!(
        std::fs::read_to_string(&f).unwrap(),
        mine.replace("mid one\n", "mid 1\n")
            .replace("FIRST", "first")
    );
}

#[test]
fn the_model_hears_each_undo_and_its_reason_once_at_its_next_request() {
    let sb = Sandbox::new();
    let _s = sb.serve(&[]);
    prompt(&sb, ONE);
    two_hunks(&sb, "a.txt", "", "\n");
    prompt(&sb, TWO);
    let other = sb.write("b.txt", "b\n");
    edit(&sb, TWO, &other, b"B\n");
    // One inbox: both sessions' latest turns, each labelled.
    let v = review(&sb, &[]);
    let sessions: Vec<&str> = v["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["session"].as_str().unwrap())
        .collect();
    assert_eq!(sessions, [ONE, TWO]);
    assert_eq!(hunks(&review(&sb, &["--session", "9b3d"])).len(), 1);
    sb.run_ok(&[
        "review",
        "undo",
        "--session",
        ONE,
        "--hunks",
        "2",
        "--why",
        "the tail stays lower case",
    ]);
    // Session two hears nothing of session one's change.
    assert_eq!(prompt(&sb, TWO), "");
    // Session one hears it after its next tool call.
    let said = edit(&sb, ONE, &other, b"B\nb2\n");
    let said: Value = serde_json::from_str(&said).unwrap();
    assert_eq!(
        said,
        json!({"hookSpecificOutput": {"hookEventName": "PostToolUse",
            "additionalContext": "The user undid your Edit of a.txt at lines 9-12 after you made it (reason: the tail stays lower case); the file no longer has it:\n@@ -9,4 +9,4 @@\n mid 8\n mid 9\n mid 10\n-last\n+LAST"}})
    );
    // Once.
    assert_eq!(prompt(&sb, ONE), "");
    // A restore is told at the next prompt.
    sb.run_ok(&[
        "review",
        "keep",
        "--session",
        ONE,
        "--turn",
        "1",
        "--hunks",
        "2",
    ]);
    let said: Value = serde_json::from_str(&prompt(&sb, ONE)).unwrap();
    assert_eq!(
        said["hookSpecificOutput"]["additionalContext"],
        "The user restored your Edit of a.txt at lines 9-12, which they had undone."
    );
}

#[test]
fn the_oldest_turns_are_pruned_to_keep_the_images_under_the_bound() {
    let sb = Sandbox::new();
    let _s = sb.serve(&["--review-store", "1"]);
    let f = sb.write("big.txt", "");
    for turn in 0..6u8 {
        prompt(&sb, ONE);
        let text: Vec<u8> = (0..300_000)
            .map(|i| b'a' + ((i / 7 + turn as usize) % 26) as u8)
            .collect();
        edit(&sb, ONE, &f, &text);
        let used: u64 = std::fs::read_dir(sb.state().join("changes"))
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum();
        assert!(used <= (1 << 20) + 4096, "turn {turn}: {used} bytes");
    }
    let v = review(&sb, &["--all"]);
    let turns: Vec<u64> = v["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["turn"].as_u64().unwrap())
        .collect();
    // Each turn's change holds two images of 300 kB (before and after) but shares one with the
    // turn before: the last two turns fit.
    assert_eq!(turns, [5, 6]);
}

#[test]
fn a_command_that_changes_a_known_file_is_recorded_as_bash() {
    let sb = Sandbox::new();
    let a = sb.write("a.txt", "one\n");
    let _s = sb.serve(&[]);
    prompt(&sb, ONE);
    edit(&sb, ONE, &a, b"two\n");
    let cmd = json!({"command": "sed -i s/two/three/ a.txt"});
    tool(&sb, ONE, "Bash", cmd.clone(), || {
        std::fs::write(&a, "three\n").unwrap()
    });
    // A command that changes nothing known: nothing.
    tool(&sb, ONE, "Bash", cmd, || {});
    assert_eq!(
        hunks(&review(&sb, &[])),
        vec![
            h("a.txt", "Edit", ONE, 1, &["@@ -1 +1 @@\n-one\n+two\n"]),
            h("a.txt", "Bash", ONE, 1, &["@@ -1 +1 @@\n-two\n+three\n"]),
        ]
    );
}

/// The hooks' input as the CLI writes it for a Write of a large file: the content in
/// `tool_input`, again in `tool_response` with the file it replaced and the patch.
#[test]
fn a_write_of_a_large_file_is_recorded_from_the_clis_whole_input() {
    let sb = Sandbox::new();
    let old = "old line\n".repeat(20_000);
    let new = old.replacen("old line", "new line", 1);
    let a = sb.write("big.txt", &old);
    let _s = sb.serve(&[]);
    prompt(&sb, ONE);
    let call = json!({"tool_name": "Write", "tool_use_id": "toolu_big",
        "tool_input": {"file_path": a, "content": new}});
    let pre = input(&sb, ONE, "PreToolUse", call.clone());
    assert_eq!(stdout(&hook(&sb, "pre-tool-use", &pre)), "");
    std::fs::write(&a, &new).unwrap();
    let mut post = input(&sb, ONE, "PostToolUse", call);
    post["tool_response"] = json!({"type": "update", "filePath": a, "content": new,
        "structuredPatch": [{"oldStart": 1, "oldLines": 3, "newStart": 1, "newLines": 3,
            "lines": ["-old line", "+new line", " old line", " old line"]}],
        "originalFile": old, "userModified": false});
    assert_eq!(stdout(&hook(&sb, "post-tool-use", &post)), "");
    assert_eq!(
        hunks(&review(&sb, &[])),
        [h(
            "big.txt",
            "Write",
            ONE,
            1,
            &["@@ -1,4 +1,4 @@\n-old line\n+new line\n old line\n old line\n old line\n"]
        )]
    );
}

/// `ccide review list | head`: the listing ends quietly when its reader stops reading.
#[test]
fn a_listing_whose_reader_goes_away_ends_quietly() {
    use std::io::Read;
    use std::os::unix::process::ExitStatusExt;
    let sb = Sandbox::new();
    let a = sb.write("a.txt", "");
    let _s = sb.serve(&[]);
    prompt(&sb, ONE);
    // More than a pipe holds.
    edit(&sb, ONE, &a, "line\n".repeat(100_000).as_bytes());
    let mut child = sb
        .command(&["review", "list"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut head = [0u8; 10];
    child.stdout.take().unwrap().read_exact(&mut head).unwrap();
    let o = finished(child, DEADLINE);
    assert_eq!((stderr(&o).as_str(), o.status.signal()), ("", Some(13)));
}

/// The CLI writes each hook's input in its own order, the edited file before its content:
/// the hooks read up to there. Two Writes whose calls overlap are each recorded.
#[test]
fn writes_are_recorded_from_input_in_the_clis_order_read_up_to_the_file() {
    let sb = Sandbox::new();
    let (a, b) = (sb.write("a.txt", "0\n"), sb.write("b.txt", "b\n"));
    let _s = sb.serve(&[]);
    prompt(&sb, ONE);
    let big = "x".repeat(1 << 20);
    let head = format!(
        r#"{{"session_id":"{ONE}","transcript_path":"/t.jsonl","cwd":{},"permission_mode":"acceptEdits","hook_event_name":"#,
        json!(sb.ws())
    );
    let hook_text = |event: &str, name: &str, file: &Path, id: &str| {
        let tool = format!(
            r#""tool_name":"Write","tool_input":{{"file_path":{},"content":"{big}"}}"#,
            json!(file)
        );
        let text = match event {
            "pre-tool-use" => format!(r#"{head}"PreToolUse",{tool},"tool_use_id":"{id}"}}"#),
            _ => format!(
                r#"{head}"PostToolUse",{tool},"tool_response":{{"type":"update","content":"{big}","originalFile":"{name}"}},"tool_use_id":"{id}"}}"#
            ),
        };
        let o = finished(sb.hook_child_text(event, &text), DEADLINE);
        assert_eq!(
            (o.status.code(), stderr(&o), stdout(&o)),
            (Some(0), String::new(), String::new())
        );
    };
    // A Write of a that failed: no PostToolUse. The user then changes a.
    hook_text("pre-tool-use", "a", &a, "toolu_0");
    std::fs::write(&a, "a\n").unwrap();
    hook_text("pre-tool-use", "a", &a, "toolu_a");
    hook_text("pre-tool-use", "b", &b, "toolu_b");
    std::fs::write(&b, "B\n").unwrap();
    std::fs::write(&a, "A\n").unwrap();
    hook_text("post-tool-use", "b", &b, "toolu_b");
    hook_text("post-tool-use", "a", &a, "toolu_a");
    assert_eq!(
        hunks(&review(&sb, &[])),
        [
            h("b.txt", "Write", ONE, 1, &["@@ -1 +1 @@\n-b\n+B\n"]),
            h("a.txt", "Write", ONE, 1, &["@@ -1 +1 @@\n-a\n+A\n"]),
        ]
    );
}

/// A file Claude only read is known too: a command that changes it is recorded.
#[test]
fn a_command_that_changes_a_file_claude_read_is_recorded() {
    let sb = Sandbox::new();
    let (a, b) = (sb.write("a.txt", "one\n"), sb.write("b.txt", "one\n"));
    let _s = sb.serve(&[]);
    prompt(&sb, ONE);
    // The CLI runs only the PostToolUse hook after a Read (the plugin's matchers).
    let read = json!({"tool_name": "Read", "tool_input": {"file_path": a}, "tool_use_id": "toolu_r",
        "tool_response": {"type": "text"}});
    let post = input(&sb, ONE, "PostToolUse", read);
    assert_eq!(stdout(&hook(&sb, "post-tool-use", &post)), "");
    let cmd = json!({"command": "sed -i s/one/two/ a.txt b.txt"});
    tool(&sb, ONE, "Bash", cmd, || {
        std::fs::write(&a, "two\n").unwrap();
        std::fs::write(&b, "two\n").unwrap();
    });
    // b.txt was never read, edited nor open: not known, not listed.
    assert_eq!(
        hunks(&review(&sb, &[])),
        [h("a.txt", "Bash", ONE, 1, &["@@ -1 +1 @@\n-one\n+two\n"])]
    );
}

/// A command's scan looks again only at the files events named: each way a command can change
/// a known file is one it names, and a folder's watch ended by an event is set again.
#[test]
fn a_command_is_seen_however_it_changes_a_known_file() {
    let sb = Sandbox::new();
    let a = sb.write("d/x/a.txt", "one\n");
    let b = sb.write("b.txt", "one\n");
    let c = sb.write("c.txt", "one\n");
    let _s = sb.serve(&[]);
    prompt(&sb, ONE);
    for f in [&a, &b, &c] {
        edit(&sb, ONE, f, b"two\n");
    }
    // Written by another name, outside the workspace.
    let link = sb.root.join("c-link");
    std::fs::hard_link(&c, &link).unwrap();
    let ws = sb.ws();
    let cmd = json!({"command": "..."});
    tool(&sb, ONE, "Bash", cmd.clone(), || {
        // The folder above moved away and another put in its place.
        std::fs::rename(ws.join("d"), ws.join("d.old")).unwrap();
        std::fs::create_dir_all(ws.join("d/x")).unwrap();
        std::fs::write(&a, "new\n").unwrap();
        // Replaced by a rename, as `sed -i` does.
        std::fs::write(ws.join("b.tmp"), "BBB\n").unwrap();
        std::fs::rename(ws.join("b.tmp"), &b).unwrap();
        std::fs::write(&link, "CCC\n").unwrap();
    });
    // The folder moved away and back: nothing changed, and the watches are set again.
    tool(&sb, ONE, "Bash", cmd.clone(), || {
        std::fs::rename(ws.join("d"), ws.join("e")).unwrap();
        std::fs::rename(ws.join("e"), ws.join("d")).unwrap();
    });
    tool(&sb, ONE, "Bash", cmd, || {
        std::fs::write(&a, "end\n").unwrap()
    });
    let bash = |f: &str, from: &str, to: &str| {
        let text = format!("@@ -1 +1 @@\n-{from}\n+{to}\n");
        h(f, "Bash", ONE, 1, &[text.as_str()])
    };
    // A call's files in the order of their paths.
    let listed = hunks(&review(&sb, &[]));
    assert_eq!(
        listed[3..],
        [
            bash("b.txt", "two", "BBB"),
            bash("c.txt", "two", "CCC"),
            bash("a.txt", "two", "new"),
            bash("a.txt", "new", "end"),
        ]
    );
}

#[test]
fn the_review_gate_holds_the_end_of_the_turn_until_it_is_reviewed() {
    let sb = Sandbox::new();
    let _s = sb.serve(&["--review-gate"]);
    prompt(&sb, ONE);
    two_hunks(&sb, "a.txt", "", "\n");
    let stop = input(&sb, ONE, "Stop", json!({"stop_hook_active": false}));
    let mut held = sb.hook_child("stop", &stop);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(held.try_wait().unwrap(), None, "the Stop hook did not wait");
    sb.run_ok(&["review", "keep", "--hunks", "1"]);
    sb.run_ok(&["review", "undo", "--hunks", "2", "--why", "no"]);
    let o = finished(held, DEADLINE);
    let said: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(said["decision"], "block");
    assert!(
        said["reason"].as_str().unwrap().starts_with(
            "The user undid your Edit of a.txt at lines 9-12 after you made it (reason: no)"
        ),
        "{said}"
    );
    // Reviewed: the next stop ends the turn at once.
    assert_eq!(stdout(&hook(&sb, "stop", &stop)), "");
}

#[test]
fn without_a_server_every_hook_returns_at_once_and_says_nothing() {
    let sb = Sandbox::new();
    let a = sb.ws().join("a.txt");
    let call = json!({"tool_name": "Edit", "tool_input": {"file_path": a}, "tool_use_id": "t"});
    for (name, event) in [
        ("pre-tool-use", "PreToolUse"),
        ("post-tool-use", "PostToolUse"),
        ("stop", "Stop"),
    ] {
        let o = hook(&sb, name, &input(&sb, ONE, event, call.clone()));
        assert_eq!(stdout(&o), "", "{name}");
    }
}

#[test]
fn on_the_terminal_each_key_decides_a_hunk_at_once() {
    let sb = Sandbox::new();
    let _s = sb.serve(&[]);
    prompt(&sb, ONE);
    let (f, _, after) = two_hunks(&sb, "a.txt", "", "\n");
    let b = sb.write("b.txt", "b\n");
    edit(&sb, ONE, &b, b"B\n");
    let keys = crate::hunk_review::steps(&[
        ("(1/3) Keep this hunk [y,n,q,a,d,j,J,e,?]? ", "y"),
        ("(2/3) Keep this hunk [y,n,q,a,d,K,j,J,e,?]? ", "n"),
        ("Why undo it? (optional, Enter skips): ", "LAST shouts\n"),
        ("(3/3) Keep this hunk [y,n,q,a,d,K,e,?]? ", "q"),
    ]);
    let screen = crate::hunk_review::in_terminal(&sb, &["review"], &[("NO_COLOR", "1")], &keys);
    let screen = String::from_utf8_lossy(&screen);
    assert!(
        screen.contains(
            "change 0: a.txt (Edit, session 5f1c2a0e, turn 1)\n@@ -1,4 +1,4 @@\n-first\n+FIRST\n"
        ),
        "{screen}"
    );
    assert!(screen.contains("kept hunk 1 (a.txt)\n"), "{screen}");
    assert!(screen.contains("undid hunk 2 (a.txt)\n"), "{screen}");
    let want = String::from_utf8(after).unwrap().replace("LAST", "last");
    assert_eq!(std::fs::read_to_string(&f).unwrap(), want);
    // q left hunk 3 undecided, and the file as Claude wrote it.
    assert_eq!(std::fs::read_to_string(&b).unwrap(), "B\n");
    let states: Vec<Value> = review(&sb, &[])["changes"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|c| {
            c["hunks"]
                .as_array()
                .unwrap()
                .iter()
                .map(|h| h["state"].clone())
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(states, [json!("kept"), json!("undone"), Value::Null]);
    assert_eq!(
        review(&sb, &[])["changes"][0]["hunks"][1]["why"],
        "LAST shouts"
    );
}

#[test]
fn an_edit_of_a_file_that_cannot_be_recorded_records_nothing_of_any_file() {
    let sb = Sandbox::new();
    let a = sb.write("a.txt", "a\n");
    let _s = sb.serve(&[]);
    prompt(&sb, ONE);
    edit(&sb, ONE, &a, b"A\n");
    // Outside the workspace, and a directory: neither is read, and what changes meanwhile
    // (the user's edit of a.txt) is not taken for their edit.
    let outside = sb.home().join("elsewhere.txt");
    std::fs::create_dir_all(sb.home()).unwrap();
    std::fs::write(&outside, "x\n").unwrap();
    let dir = sb.ws().join("d");
    std::fs::create_dir(&dir).unwrap();
    for (n, file) in [&outside, &dir].into_iter().enumerate() {
        let args = json!({"file_path": file, "old_string": "y", "new_string": "z"});
        tool(&sb, ONE, "Edit", args, || {
            std::fs::write(&a, format!("A\nuser {n}\n")).unwrap()
        });
    }
    assert_eq!(
        hunks(&review(&sb, &[])),
        vec![h("a.txt", "Edit", ONE, 1, &["@@ -1 +1 @@\n-a\n+A\n"])]
    );
    let stored = sb.state().join("changes").read_dir().unwrap();
    assert!(
        !stored
            .into_iter()
            .any(|e| std::fs::read(e.unwrap().path()).unwrap() == b"x\n")
    );
}

/// A session id and a tool name come from the hook's input: `ccide review` prints them with
/// their control characters made visible, and cuts the id at a character, not inside one.
#[test]
fn the_listing_prints_names_from_the_hooks_input_safely() {
    let sb = Sandbox::new();
    let _s = sb.serve(&[]);
    let session = "\u{1b}[31méééé-0000";
    prompt(&sb, session);
    let a = sb.write("a.txt", "x\n");
    edit(&sb, session, &a, b"y\n");
    let o = sb.run_ok(&["review", "list"]);
    assert_eq!(
        stdout(&o),
        "change 0: a.txt (Edit, session \\u{1b}[31mééé, turn 1)\n@@ -1 +1 @@ hunk 1/1\n-x\n+y\n"
    );
}

#[test]
fn on_the_terminal_a_hunk_is_split_and_a_part_rewritten_in_the_editor() {
    // The editor makes Claude's D Dee and adds a line (LF, whatever the file's endings).
    let sb = Sandbox::new();
    let editor = sb.script(
        "editor",
        "sed -i -e 's/^+D/+Dee/' -e '/^+Dee/a +added' \"$1\"",
    );
    let env = [("NO_COLOR", "1"), ("EDITOR", s(&editor))];
    let _s = sb.serve(&[]);
    let mut said = String::new();
    for (n, eol) in ["\n", "\r\n"].into_iter().enumerate() {
        said = prompt(&sb, ONE);
        let body = |b: &str, d: &str| format!("a{eol}{b}{eol}c{eol}{d}{eol}e{eol}f{eol}g{eol}");
        let f = sb.write(&format!("f{n}.txt"), body("b", "d"));
        edit(&sb, ONE, &f, body("B", "D").as_bytes());
        let keys = crate::hunk_review::steps(&[
            ("(1/1) Keep this hunk [y,n,q,a,d,s,e,?]? ", "s"),
            ("(1/2) Keep this hunk [", "n"),
            ("Why undo it? (optional, Enter skips): ", "b stays\n"),
            ("(2/2) Keep this hunk [", "e"),
        ]);
        let screen = crate::hunk_review::in_terminal(&sb, &["review"], &env, &keys);
        assert_eq!(
            String::from_utf8_lossy(&screen),
            format!(
                "change {n}: f{n}.txt (Edit, session 5f1c2a0e, turn {})\n\
                 @@ -1,7 +1,7 @@\n a\n-b\n+B\n c\n-d\n+D\n e\n f\n g\n\
                 (1/1) Keep this hunk [y,n,q,a,d,s,e,?]? s\n\
                 Split into 2 hunks.\n\
                 @@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n\
                 (1/2) Keep this hunk [y,n,q,a,d,j,J,e,?]? n\n\
                 Why undo it? (optional, Enter skips): b stays\n\
                 undid hunk 1.1 (f{n}.txt)\n\
                 @@ -3,5 +3,5 @@\n c\n-d\n+D\n e\n f\n g\n\
                 (2/2) Keep this hunk [y,n,q,a,d,K,e,?]? e\n\
                 rewrote hunk 1.2 (f{n}.txt)\n",
                n + 1
            )
        );
        let want = body("b", &format!("Dee{eol}added"));
        assert_eq!(String::from_utf8(std::fs::read(&f).unwrap()).unwrap(), want);
        // Each part decided: the hunk is, and the review gate waits for nothing more.
        assert_eq!(review(&sb, &[])["changes"][0]["hunks"][0]["state"], "split");
    }
    // The model hears the undo and the rewrite, each with the hunk as Claude made it.
    assert_eq!(
        serde_json::from_str::<Value>(&said).unwrap()["hookSpecificOutput"]["additionalContext"],
        "The user undid your Edit of f0.txt at lines 1-3 after you made it (reason: b stays); the file no longer has it:\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n\n\
         The user rewrote your Edit of f0.txt at lines 3-7 after you made it:\n@@ -3,5 +3,5 @@\n c\n-d\n+D\n e\n f\n g\nto:\nc\nDee\nadded\ne\nf\ng"
    );
    // Lines the user changed since Claude wrote them are not rewritten.
    prompt(&sb, ONE);
    let f = sb.write("g.txt", "a\nb\nc\nd\ne\n");
    edit(&sb, ONE, &f, b"a\nb\nc\nD\ne\n");
    std::fs::write(&f, "a\nb\nc\nmine\ne\n").unwrap();
    let keys = crate::hunk_review::steps(&[("(1/1) Keep this hunk [", "e"), ("\n", "")]);
    let screen = crate::hunk_review::in_terminal(&sb, &["review"], &env, &keys);
    let screen = String::from_utf8_lossy(&screen);
    assert!(
        screen.ends_with(&format!("e\nhunk 1 of change 2 was not edited: lines 1-5 of {} changed since Claude wrote them; nothing was written\n", f.display())),
        "{screen}"
    );
    assert_eq!(std::fs::read_to_string(&f).unwrap(), "a\nb\nc\nmine\ne\n");
}
