//! openDiff (ccide-protocol(7) §5.1) is backed by files and answered later, while other
//! requests are served: it is settled by `ccide diff accept|reject`, close_tab,
//! closeAllDiffTabs, a replacing openDiff, or the client's disconnect; `ccide diff` lists,
//! shows and edits what is pending.

use std::path::Path;

use crate::util::*;
use serde_json::{Value, json};

const TAB: &str = "✻ [Claude Code] app.py (9c7eda) ⧉";

#[test]
fn the_deferred_answer_keeps_its_id_while_other_requests_are_served() {
    let sb = Sandbox::new();
    let file = sb.write("app.py", "print(1)\n");
    let s = sb.serve(&[]);
    let mut c = s.client();
    let id = open_diff(&mut c, &file, "print(2)\n", TAB);
    let d = &wait_pending(&sb, 1)[0];
    assert_eq!(d["tab_name"], TAB);
    assert_eq!(d["file"], file.to_str().unwrap());
    assert_eq!(
        (d["added"].as_u64(), d["removed"].as_u64()),
        (Some(1), Some(1))
    );
    // Meanwhile the connection answers other requests.
    assert_eq!(c.request("ping", json!({}))["result"], json!({}));
    let tools = c.request("tools/list", json!({}));
    let listed = |name: &str| {
        tools["result"]["tools"]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["name"] == name)
    };
    assert!(listed("openDiff") && listed("close_tab") && listed("closeAllDiffTabs"));
    assert!(sb.run(&["diff", "accept"]).status.success());
    let r = c.response(&id);
    assert_eq!(r["id"], id);
    assert_eq!(texts(&r), vec!["FILE_SAVED", "print(2)\n"]);
}

#[test]
fn accept_returns_the_proposed_bytes_exactly_even_after_an_edit() {
    let cases: &[(&str, &str)] = &[
        ("no final newline", "a = 1\nb = 2"),
        ("crlf", "a = 1\r\nb = 2\r\n"),
        ("bom", "\u{feff}a = 1\n"),
        ("multibyte", "s = 'héllo ✻ 日本'\n"),
        ("empty", ""),
    ];
    let sb = Sandbox::new();
    let file = sb.write("app.py", "old\n");
    let s = sb.serve(&[]);
    let mut c = s.client();
    for (what, content) in cases {
        let id = open_diff(&mut c, &file, content, TAB);
        let d = &wait_pending(&sb, 1)[0];
        let dir = Path::new(d["dir"].as_str().unwrap());
        assert_eq!(
            std::fs::read(dir.join("proposed")).unwrap(),
            content.as_bytes(),
            "{what}"
        );
        assert_eq!(std::fs::read(dir.join("original")).unwrap(), b"old\n");
        // The user edits the proposal before accepting: that is what the CLI gets.
        let edited = format!("{content}# reviewed ✓\r\n");
        std::fs::write(dir.join("proposed"), &edited).unwrap();
        let o = sb.run(&["diff", "accept"]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert_eq!(
            stdout(&o),
            "accepted diff ".to_string()
                + d["id"].as_str().unwrap()
                + " (app.py): Claude Code writes the content of proposed\n"
        );
        let r = c.response(&id);
        assert_eq!(texts(&r), vec!["FILE_SAVED".to_string(), edited], "{what}");
        assert!(!dir.exists(), "the diff directory is removed once settled");
    }
    assert_eq!(
        std::fs::read(&file).unwrap(),
        b"old\n",
        "ccide never writes the target"
    );
}

#[test]
fn reject_answers_diff_rejected_with_the_tab_name_and_the_target_is_untouched() {
    let sb = Sandbox::new();
    let file = sb.write("app.py", "x = 1\n");
    let mtime = std::fs::metadata(&file).unwrap().modified().unwrap();
    let s = sb.serve(&[]);
    let mut c = s.client();
    let id = open_diff(&mut c, &file, "x = 2\n", TAB);
    let d = &wait_pending(&sb, 1)[0];
    let o = sb.run(&["diff", "reject", d["id"].as_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(
        stdout(&o),
        format!("rejected diff {} (app.py)\n", d["id"].as_str().unwrap())
    );
    assert_eq!(texts(&c.response(&id)), vec!["DIFF_REJECTED", TAB]);
    // Settling twice says so and fails.
    let o = sb.run(&["diff", "accept", d["id"].as_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("already rejected"), "{}", stderr(&o));
    assert_eq!(std::fs::read(&file).unwrap(), b"x = 1\n");
    assert_eq!(std::fs::metadata(&file).unwrap().modified().unwrap(), mtime);
}

#[test]
fn close_tab_settles_the_diff_as_rejected_and_removes_it() {
    let sb = Sandbox::new();
    let file = sb.write("app.py", "x = 1\n");
    let s = sb.serve(&[]);
    let mut c = s.client();
    let id = open_diff(&mut c, &file, "x = 2\n", TAB);
    wait_pending(&sb, 1);
    let r = c.call("close_tab", json!({"tab_name": TAB}));
    assert_eq!(texts(&r), vec!["TAB_CLOSED"]);
    assert_eq!(texts(&c.response(&id)), vec!["DIFF_REJECTED", TAB]);
    wait_pending(&sb, 0);
    // close_tab answers TAB_CLOSED whatever it found.
    assert_eq!(
        c.call_texts("close_tab", json!({"tab_name": "nothing"})),
        vec!["TAB_CLOSED"]
    );
}

#[test]
fn close_all_diff_tabs_counts_only_pending_diffs() {
    let sb = Sandbox::new();
    let a = sb.write("a.py", "a\n");
    let b = sb.write("b.py", "b\n");
    let s = sb.serve(&[]);
    let mut c = s.client();
    assert_eq!(
        c.call_texts("closeAllDiffTabs", json!({})),
        vec!["CLOSED_0_DIFF_TABS"]
    );
    let ida = open_diff(&mut c, &a, "A\n", "tab a");
    let idb = open_diff(&mut c, &b, "B\n", "tab b");
    let list = wait_pending(&sb, 2);
    let first = list.iter().find(|d| d["tab_name"] == "tab a").unwrap();
    assert!(
        sb.run(&["diff", "accept", first["id"].as_str().unwrap()])
            .status
            .success()
    );
    assert_eq!(texts(&c.response(&ida))[0], "FILE_SAVED");
    assert_eq!(
        c.call_texts("closeAllDiffTabs", json!({})),
        vec!["CLOSED_1_DIFF_TABS"]
    );
    assert_eq!(texts(&c.response(&idb)), vec!["DIFF_REJECTED", "tab b"]);
    wait_pending(&sb, 0);
}

#[test]
fn a_second_open_diff_with_the_same_tab_name_replaces_the_first() {
    let sb = Sandbox::new();
    let file = sb.write("app.py", "x\n");
    let s = sb.serve(&[]);
    let mut c = s.client();
    let first = open_diff(&mut c, &file, "one\n", TAB);
    wait_pending(&sb, 1);
    let second = open_diff(&mut c, &file, "two\n", TAB);
    assert_eq!(texts(&c.response(&first)), vec!["DIFF_REJECTED", TAB]);
    let list = wait_pending(&sb, 1);
    let dir = Path::new(list[0]["dir"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(dir.join("proposed")).unwrap(),
        "two\n"
    );
    assert!(
        sb.run(&["diff", "accept", TAB]).status.success(),
        "accept by tab name"
    );
    assert_eq!(texts(&c.response(&second)), vec!["FILE_SAVED", "two\n"]);
}

#[test]
fn a_disconnect_removes_only_that_clients_diffs_and_clients_do_not_interfere() {
    let sb = Sandbox::new();
    let a = sb.write("a.py", "a\n");
    let b = sb.write("b.py", "b\n");
    let s = sb.serve(&[]);
    let mut one = s.client();
    let mut two = s.client();
    let _ = open_diff(&mut one, &a, "A\n", "tab a");
    let idb = open_diff(&mut two, &b, "B\n", "tab b");
    let list = wait_pending(&sb, 2);
    let dir_a = list.iter().find(|d| d["tab_name"] == "tab a").unwrap()["dir"]
        .as_str()
        .unwrap()
        .to_string();
    drop(one);
    let left = wait_pending(&sb, 1);
    assert_eq!(left[0]["tab_name"], "tab b");
    assert!(!Path::new(&dir_a).exists());
    assert!(
        sb.run(&["diff", "accept"]).status.success(),
        "the only diff left"
    );
    assert_eq!(texts(&two.response(&idb)), vec!["FILE_SAVED", "B\n"]);
}

#[test]
fn a_new_file_diff_is_marked_and_never_creates_the_file() {
    let sb = Sandbox::new();
    let s = sb.serve(&[]);
    let mut c = s.client();
    let file = sb.ws().join("src/new.py");
    let id = open_diff(&mut c, &file, "print('new')\n", "new tab");
    let d = &wait_pending(&sb, 1)[0];
    assert_eq!(d["new_file"], true);
    let o = sb.run(&["diff"]);
    assert!(
        stdout(&o).contains("src/new.py (new file)"),
        "{}",
        stdout(&o)
    );
    assert!(stdout(&o).contains("+1 -0"), "{}", stdout(&o));
    let o = sb.run(&["diff", "show"]);
    assert_eq!(
        stdout(&o),
        "--- /dev/null\n+++ b/src/new.py\n@@ -0,0 +1 @@ hunk 1/1\n+print('new')\n"
    );
    assert!(
        sb.run(&["diff", "accept", "src/new.py"]).status.success(),
        "accept by path"
    );
    assert_eq!(
        texts(&c.response(&id)),
        vec!["FILE_SAVED", "print('new')\n"]
    );
    assert!(!file.exists());
}

#[test]
fn diff_list_show_path_and_errors() {
    let sb = Sandbox::new();
    let o = sb.run(&["diff"]);
    assert_eq!(o.status.code(), Some(1), "no server running");
    assert!(
        stderr(&o).contains("no ccide server is running for"),
        "{}",
        stderr(&o)
    );
    let file = sb.write("app.py", "a\nb\nc\n");
    let s = sb.serve(&[]);
    let o = sb.run(&["diff"]);
    assert_eq!(
        (o.status.code(), stdout(&o)),
        (Some(0), "no pending diffs\n".to_string())
    );
    let o = sb.run(&["diff", "accept"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("no pending diffs"));
    let mut c = s.client();
    let _ = open_diff(&mut c, &file, "a\nB\nc\n", TAB);
    let d = &wait_pending(&sb, 1)[0];
    let id = d["id"].as_str().unwrap();
    let o = sb.run(&["diff"]);
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[0], "ID   AGE   CHANGE        FILE");
    assert!(
        lines[1].starts_with(&format!("{id:<4} ")) && lines[1].ends_with("+1 -1         app.py"),
        "{}",
        lines[1]
    );
    let o = sb.run(&["diff", "show", id]);
    assert_eq!(
        stdout(&o),
        "--- a/app.py\n+++ b/app.py\n@@ -1,3 +1,3 @@ hunk 1/1\n a\n-b\n+B\n c\n"
    );
    let o = sb.run(&["diff", "path"]);
    assert_eq!(stdout(&o).trim_end(), d["dir"].as_str().unwrap());
    let o = sb.run(&["diff", "show", "--json"]);
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        v["diff"],
        "--- a/app.py\n+++ b/app.py\n@@ -1,3 +1,3 @@ hunk 1/1\n a\n-b\n+B\n c\n"
    );
    let o = sb.run(&["diff", "reject", "999"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("no pending diff named 999"));
    let o = sb.run(&["diff", "frob"]);
    assert_eq!(o.status.code(), Some(2));
    let o = sb.run(&["diff", "--port", "1"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("port 1"));
    let o = sb.run(&["diff", "--port", &s.port.to_string()]);
    assert_eq!(o.status.code(), Some(0));
}

#[test]
fn several_pending_diffs_need_a_name() {
    let sb = Sandbox::new();
    let a = sb.write("a.py", "a\n");
    let b = sb.write("b.py", "b\n");
    let s = sb.serve(&[]);
    let mut c = s.client();
    let _ = open_diff(&mut c, &a, "A\n", "tab a");
    let _ = open_diff(&mut c, &b, "B\n", "tab b");
    wait_pending(&sb, 2);
    let o = sb.run(&["diff", "accept"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("2 diffs are pending")
            && stderr(&o).contains("a.py")
            && stderr(&o).contains("b.py"),
        "{}",
        stderr(&o)
    );
}

#[test]
fn open_diff_outside_the_workspace_is_refused() {
    let sb = Sandbox::new();
    let outside = sb.root.write("elsewhere/secret.txt", "secret\n");
    let s = sb.serve(&[]);
    let mut c = s.client();
    let id = open_diff(&mut c, &outside, "x\n", TAB);
    let r = c.response(&id);
    assert_eq!(r["result"]["isError"], true);
    assert!(texts(&r)[0].contains("outside the workspace"), "{r}");
    let r = c.call(
        "openDiff",
        json!({"old_file_path": 5, "new_file_contents": "x"}),
    );
    assert_eq!(r["error"]["code"], -32602);
}

#[test]
fn a_ten_mebibyte_diff_applies_back_to_the_proposal() {
    let sb = Sandbox::new();
    let mut original = String::new();
    for i in 0..200_000 {
        original.push_str(&format!(
            "line {i:08} of a rather large generated file.......\n"
        ));
    }
    let mut proposed: Vec<String> = original.lines().map(String::from).collect();
    for k in (0..proposed.len()).step_by(1999) {
        proposed[k] = format!("changed {k}");
    }
    proposed.insert(777, "inserted".into());
    proposed.remove(150_000);
    let proposed = proposed.join("\n") + "\n";
    let file = sb.write("big.txt", &original);
    let s = sb.serve(&[]);
    let mut c = s.client();
    let id = open_diff(&mut c, &file, &proposed, "big");
    wait_pending(&sb, 1);
    let o = sb.run(&["diff", "show"]);
    assert!(o.status.success());
    let patch = sb.root.write("big.patch", &o.stdout);
    let copy = sb.root.write("copy/big.txt", &original);
    let applied = std::process::Command::new("patch")
        .args([
            "-s",
            "-o",
            "-",
            copy.to_str().unwrap(),
            patch.to_str().unwrap(),
        ])
        .output()
        .expect("patch(1) is installed");
    assert!(
        applied.status.success(),
        "{}",
        String::from_utf8_lossy(&applied.stderr)
    );
    assert!(
        applied.stdout == proposed.as_bytes(),
        "applying the shown diff reproduces proposed"
    );
    sb.run_ok(&["diff", "accept"]);
    let r = c.response(&id);
    assert!(texts(&r)[1] == proposed);
}

#[test]
fn events_stream_diff_and_client_lines() {
    use std::io::BufRead;
    let sb = Sandbox::new();
    let file = sb.write("app.py", "x\n");
    let s = sb.serve(&[]);
    let mut events = sb
        .command(&["events"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(events.stdout.take().unwrap()).lines();
    let hello: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(hello["event"], "subscribed");
    let mut c = s.client();
    let first: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(first["event"], "client_connected");
    assert_eq!(first["name"], "claude-code");
    let id = open_diff(&mut c, &file, "y\n", TAB);
    let opened: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(opened["event"], "diff_opened");
    assert_eq!(opened["tab_name"], TAB);
    assert_eq!(opened["file"], file.to_str().unwrap());
    // A small proposal's lines are counted at once (a big one's by `ccide diff list`).
    assert_eq!(
        (&opened["added"], &opened["removed"]),
        (&json!(1), &json!(1))
    );
    assert!(sb.run(&["diff", "reject"]).status.success());
    let settled: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(
        (settled["event"].as_str(), settled["how"].as_str()),
        (Some("diff_settled"), Some("rejected"))
    );
    assert_eq!(settled["id"], opened["id"]);
    let _ = c.response(&id);
    drop(c);
    let gone: Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(gone["event"], "client_disconnected");
    let _ = events.kill();
    let _ = events.wait();
}

#[test]
fn diff_edit_opens_proposed_in_the_editor_and_does_not_accept() {
    let sb = Sandbox::new();
    let file = sb.write("app.py", "x\n");
    let editor = sb
        .root
        .write("fake-editor", "#!/bin/sh\nprintf 'edited\\n' >> \"$1\"\n");
    std::fs::set_permissions(&editor, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let s = sb.serve(&[]);
    let mut c = s.client();
    let id = open_diff(&mut c, &file, "y\n", TAB);
    wait_pending(&sb, 1);
    let o = sb
        .command(&["diff", "edit"])
        .env("EDITOR", &editor)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let list = wait_pending(&sb, 1);
    let dir = Path::new(list[0]["dir"].as_str().unwrap());
    assert_eq!(
        std::fs::read_to_string(dir.join("proposed")).unwrap(),
        "y\nedited\n"
    );
    assert!(sb.run(&["diff", "accept"]).status.success());
    assert_eq!(texts(&c.response(&id)), vec!["FILE_SAVED", "y\nedited\n"]);
}

#[test]
fn diff_ids_keep_counting_across_restarts() {
    let sb = Sandbox::new();
    let file = sb.write("app.py", "x\n");
    let mut s = sb.serve(&[]);
    let mut c = s.client();
    let _ = open_diff(&mut c, &file, "y\n", TAB);
    let first = wait_pending(&sb, 1)[0]["id"].clone();
    drop(c);
    s.stop_with("TERM");
    let s = sb.serve(&[]);
    let mut c = s.client();
    let _ = open_diff(&mut c, &file, "z\n", TAB);
    let second = wait_pending(&sb, 1)[0]["id"].clone();
    assert_ne!(first, second);
    let o = sb.run(&["diff", "accept", first.as_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "an old id names no newer diff");
}

/// A settled proposal's folder loses ccide's files, and stays while an editor keeps its own
/// there (emacs's lock and auto-save files of a buffer with changes): its auto-save would fail
/// on a folder removed under it. Once empty, the next proposal removes it.
#[test]
fn a_settled_proposals_folder_stays_for_an_editors_files_until_they_go() {
    let sb = Sandbox::new();
    let file = sb.write("app.py", "print(1)\n");
    let s = sb.serve(&[]);
    let mut c = s.client();
    let id = open_diff(&mut c, &file, "print(2)\n", TAB);
    wait_pending(&sb, 1);
    let dir = sb.state().join("diffs/1");
    // The proposal named like the file (as `ccide lsp` shows it), and emacs's files beside it.
    std::fs::write(dir.join("app.py"), "print(2)\n").unwrap();
    std::fs::write(dir.join("#app.py#"), "print(3)\n").unwrap();
    std::os::unix::fs::symlink("root@host.1234:1", dir.join(".#app.py")).unwrap();
    sb.run_ok(&["diff", "accept", "1"]);
    assert_eq!(texts(&c.response(&id)), ["FILE_SAVED", "print(2)\n"]);
    let mut left: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    left.sort();
    assert_eq!(left, ["#app.py#", ".#app.py"]);
    // The editor lets go (the buffer killed); the next proposal sweeps the folder.
    std::fs::remove_file(dir.join("#app.py#")).unwrap();
    std::fs::remove_file(dir.join(".#app.py")).unwrap();
    let _next = open_diff(&mut c, &file, "print(4)\n", TAB);
    wait_pending(&sb, 1);
    assert!(!dir.exists());
    assert!(sb.state().join("diffs/2").is_dir());
}
