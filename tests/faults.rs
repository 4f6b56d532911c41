//! Faults lose no data: kill -9 keeps the editor state and cleans orphaned diffs; a failed
//! write (a read-only file, a full file system) says why and leaves the previous content; a
//! command whose change cannot be saved fails and says so; `serve` that cannot write its lock
//! file refuses to start and says where; a port taken while the server was down moves it, and
//! the log says so.

use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::util::*;
use crate::wire::*;
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------------
// No data lost on faults.

#[test]
fn kill_9_loses_no_editor_state_and_cleans_orphaned_diffs() {
    let sb = Sandbox::new();
    let a = sb.write("a.py", "a = 1\nb = 2\n");
    sb.write("b.py", "b\n");
    let mut first = sb.serve(&[]);
    let (port, token) = (first.port, first.token.clone());
    let mut c = Conn::open(port, &token, true);
    c.handshake();
    for args in [&["open", "b.py", "a.py"][..], &["select", "a.py:2:1-2:5"]] {
        let o = sb.run(args);
        assert!(o.status.success(), "{args:?}: {}", stderr(&o));
    }
    assert!(
        sb.run_stdin(&["buffer", "b.py"], b"unsaved\n")
            .status
            .success()
    );
    let o = sb.run_stdin(
        &["diagnostics", "import", "--format", "compiler"],
        b"a.py:1:1: error: one\na.py:2:3: warning: two\n",
    );
    assert!(o.status.success(), "{}", stderr(&o));
    for (n, tab) in ["one", "two"].iter().enumerate() {
        c.send(&json!({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {"name": "openDiff", "arguments": {"old_file_path": s(&a), "new_file_path": s(&a), "new_file_contents": "x\n", "tab_name": tab}}}));
    }
    wait_for("two pending diffs", DEADLINE, || {
        (control(&sb, json!({"cmd": "diff.list"}))["diffs"]
            .as_array()?
            .len()
            == 2)
            .then_some(())
    });
    let before = status(&sb);
    let diags_before = control(&sb, json!({"cmd": "diagnostics.list"}))["files"].clone();
    assert_eq!(diags_before.as_array().unwrap().len(), 1);
    first.stop_with("KILL");
    let orphans = std::fs::read_dir(sb.state().join("diffs")).unwrap().count();
    assert_eq!(orphans, 2, "the kill left the pending diffs behind");
    let mut second = sb.serve(&[]);
    assert_eq!(
        (second.port, &second.token),
        (port, &token),
        "same port and token"
    );
    let after = status(&sb);
    for k in ["tabs", "selection", "documents"] {
        assert_eq!(after[k], before[k], "{k} after kill -9");
    }
    assert_eq!(after["diffs"], json!([]));
    assert_eq!(
        std::fs::read_dir(sb.state().join("diffs")).unwrap().count(),
        0,
        "orphaned diffs"
    );
    assert_eq!(
        control(&sb, json!({"cmd": "diagnostics.list"}))["files"],
        diags_before
    );
    // The client reconnects to the same URL with the same token and is served.
    assert_eq!(
        c.ended(DEADLINE),
        None,
        "the old connection died with the process"
    );
    let mut again = Conn::open(port, &token, true);
    again.handshake();
    let sel = again.next(DEADLINE).expect("the selection on connect");
    assert_eq!(sel["method"], "selection_changed");
    assert_eq!(sel["params"], before["selection"]);
    let d = again.call(
        json!(5),
        "getDiagnostics",
        json!({"uri": format!("file://{}", a.display())}),
    );
    let d: Value = serde_json::from_str(&texts(&d)[0]).unwrap();
    assert_eq!(d[0]["diagnostics"].as_array().unwrap().len(), 2, "{d}");
    assert_eq!(
        again.request(json!(6), "ping", json!({}))["result"],
        json!({})
    );
    assert_alive(&mut second);
}

/// A small tmpfs mounted for a test, unmounted when dropped.
struct Mount(PathBuf);

impl Mount {
    fn tmpfs(dir: &Path, size: &str) -> Mount {
        std::fs::create_dir_all(dir).unwrap();
        let o = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir)
            .output()
            .expect("run mount");
        assert!(o.status.success(), "mount -t tmpfs: {}", stderr(&o));
        Mount(dir.to_path_buf())
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
fn failed_writes_say_why_and_leave_the_previous_content() {
    let sb = Sandbox::new();
    sb.write("notes.txt", "original\n");
    sb.write("adir/kept.txt", "kept\n");
    let srv = sb.serve(&[]);
    let mut c = Conn::open(srv.port, &srv.token, true);
    c.handshake();
    // A parent that is a regular file; a target that is a directory.
    for (path, says) in [
        ("notes.txt/child.txt", "Not a directory"),
        ("adir", "Is a directory"),
    ] {
        let r = c.call(
            json!(path),
            "writeFile",
            json!({"path": path, "content": "new\n"}),
        );
        assert_eq!(r["result"]["isError"], true, "{r}");
        assert!(texts(&r)[0].contains(says), "{r}");
        let r = c.request(
            json!(format!("direct {path}")),
            "writeFile",
            json!({"path": path, "content": "new\n"}),
        );
        assert_eq!(r["error"]["code"], -32603, "{r}");
        assert!(
            r["error"]["message"].as_str().unwrap().contains(says),
            "{r}"
        );
    }
    assert_eq!(
        std::fs::read_to_string(sb.ws().join("notes.txt")).unwrap(),
        "original\n"
    );
    assert_eq!(
        std::fs::read_to_string(sb.ws().join("adir/kept.txt")).unwrap(),
        "kept\n"
    );
}

#[test]
#[ignore = "needs root, to mount a tmpfs: .ci/run runs it as root"]
fn writes_to_a_full_file_system_say_why_and_leave_the_previous_content() {
    let sb = Sandbox::new();
    let full = sb.ws().join("full");
    let _mount = Mount::tmpfs(&full, "256k");
    let srv = sb.serve(&[]);
    let mut c = Conn::open(srv.port, &srv.token, true);
    c.handshake();
    std::fs::write(full.join("keep.txt"), "keep me\n").unwrap();
    let mut filler = std::fs::File::create(full.join("filler")).unwrap();
    while filler.write_all(&[b'f'; 4096]).is_ok() {}
    drop(filler);
    let big = "n".repeat(128 << 10);
    let r = c.call(
        json!("full"),
        "writeFile",
        json!({"path": "full/keep.txt", "content": big}),
    );
    assert_eq!(r["result"]["isError"], true, "{r:.300}");
    assert!(texts(&r)[0].contains("No space left"), "{r:.300}");
    let r = control(
        &sb,
        json!({"cmd": "buffer", "path": "full/keep.txt", "content": big}),
    );
    assert_eq!(r["ok"], true);
    let r = c.call(
        json!("save"),
        "saveDocument",
        json!({"filePath": "full/keep.txt"}),
    );
    let r: Value = serde_json::from_str(&texts(&r)[0]).unwrap();
    assert_eq!(
        (&r["success"], &r["saved"]),
        (&json!(false), &json!(false)),
        "{r:.300}"
    );
    let m = r["message"].as_str().unwrap();
    assert!(
        m.contains("No space left") && m.contains("previous content is intact"),
        "{m:.300}"
    );
    assert_eq!(
        std::fs::read_to_string(full.join("keep.txt")).unwrap(),
        "keep me\n"
    );
    let r = c.call(
        json!("dirty"),
        "checkDocumentDirty",
        json!({"filePath": "full/keep.txt"}),
    );
    assert_eq!(
        json_text(&r)["isDirty"],
        true,
        "the unsaved content is kept: {r}"
    );
    let names: Vec<String> = std::fs::read_dir(&full)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        !names.iter().any(|n| n.contains(".ccide-")),
        "temporary files left: {names:?}"
    );
}

#[test]
fn serve_refuses_to_start_when_it_cannot_write_its_lock_file_and_says_where() {
    // The lock file's name is taken by a directory.
    let sb = Sandbox::new();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let lock = sb.config().join(format!("ide/{port}.lock"));
    std::fs::create_dir_all(lock.join("in-the-way")).unwrap();
    std::fs::set_permissions(
        sb.config().join("ide"),
        std::fs::Permissions::from_mode(0o700),
    )
    .unwrap();
    let (code, err) = serve_refused(&sb, &["--port", &port.to_string()], &[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("cannot write the lock file") && err.contains(s(&lock)),
        "{err}"
    );
    // The config directory is a regular file.
    let sb = Sandbox::new();
    let file = sb.root.join("not-a-dir");
    std::fs::write(&file, "x").unwrap();
    let (code, err) = serve_refused(&sb, &[], &[("CLAUDE_CONFIG_DIR", &file)]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains(&format!("{}/ide", file.display())), "{err}");
    // After a refusal, a good start works in the same state directory.
    std::fs::remove_file(&file).unwrap();
    let srv = sb.serve(&[]);
    assert!(srv.lock_path.exists());
}

#[test]
fn a_port_taken_while_down_moves_the_server_and_the_log_says_so() {
    let sb = Sandbox::new();
    let mut first = sb.serve(&[]);
    let (port, token) = (first.port, first.token.clone());
    first.stop_with("KILL");
    let squatter = std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    let second = sb.serve(&[]);
    assert_ne!(second.port, port);
    assert_eq!(second.token, token, "the token survives the move");
    assert!(
        second
            .log()
            .contains(&format!("port {port} from the last run is not available")),
        "{}",
        second.log()
    );
    assert_eq!(
        list_locks(&sb.config().join("ide")),
        vec![second.lock_path.clone()],
        "the stale lock is gone"
    );
    let mut c = Conn::open(second.port, &token, true);
    c.handshake();
    assert_eq!(c.request(json!(1), "ping", json!({}))["result"], json!({}));
    drop(squatter);
}

// ---------------------------------------------------------------------------------------------
// A change that cannot be saved is reported.

#[test]
fn a_command_whose_change_cannot_be_saved_fails_and_says_so() {
    let sb = Sandbox::new();
    sb.write("a.txt", "one\n");
    let srv = sb.serve(&[]);
    let editor = sb.state().join("editor.json");
    let _ = std::fs::remove_file(&editor);
    std::fs::create_dir(&editor).unwrap();
    std::fs::write(editor.join("in-the-way"), "x").unwrap();
    let o = sb.run_stdin(&["buffer", "a.txt"], b"unsaved\n");
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains(&format!(
            "done, but not saved: cannot save the editor state to {}",
            editor.display()
        )) && stderr(&o).contains("the change is lost when the server restarts"),
        "{}",
        stderr(&o)
    );
    std::fs::remove_dir_all(&editor).unwrap();
    let o = sb.run_stdin(&["buffer", "a.txt"], b"unsaved again\n");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let saved: Value = serde_json::from_slice(&std::fs::read(&editor).unwrap()).unwrap();
    assert_eq!(
        saved["documents"][s(&sb.ws().join("a.txt"))],
        "unsaved again\n"
    );
    drop(srv);
}
