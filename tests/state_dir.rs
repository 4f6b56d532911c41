//! The state directory deleted under a running server (a cleanup of ~/.local/state, a
//! mistaken `rm -rf`): what it held is made again from memory, the loss is logged, and only
//! what truly lived there alone (the pending diffs' proposals) fails, saying so. And one that
//! cannot be written is named, with what to do, before anything is written in it.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Stdio;

use serde_json::{Value, json};

use crate::util::*;

fn read_json(p: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(p).unwrap_or_default()).unwrap_or_default()
}

/// Waits until the server says it made the state directory again.
/// Deletes the state directory as a user would (`rm -rf`): the running server may be writing a
/// file into it meanwhile (a remove then meets a folder not empty), so until it is gone.
fn delete_state_dir(sb: &Sandbox) {
    wait_for(
        "the state directory to be deleted",
        DEADLINE,
        || match std::fs::remove_dir_all(sb.state()) {
            Ok(()) => Some(()),
            Err(e) if e.kind() == std::io::ErrorKind::DirectoryNotEmpty => None,
            Err(e) => panic!("cannot delete {}: {e}", sb.state().display()),
        },
    );
}

fn wait_made_again(srv: &Server) {
    wait_for("the state directory to be made again", DEADLINE, || {
        srv.log()
            .contains(&format!(
                "made the state directory {} again: server.json (same port and token), the control socket",
                srv.lock["ccide"]["state"].as_str().unwrap()
            ))
            .then_some(())
    });
}

#[test]
fn a_deleted_state_directory_is_made_again_and_only_the_lost_proposal_fails() {
    let sb = Sandbox::new();
    let a = sb.write("a.txt", "one\n");
    let b = sb.write("b.txt", "two\n");
    let extra = sb.root.write("extra/keep.txt", "");
    let extra = extra.parent().unwrap();
    let mut srv = sb.serve(&["--ping-interval", "60", "--no-default-checkers"]);
    let (port, token) = (srv.port, srv.token.clone());
    let mut c = srv.client();
    // What the state directory keeps: a tab, imported diagnostics, a workspace folder added.
    sb.run_ok(&["open", s(&a)]);
    let o = sb.run_stdin(
        &["diagnostics", "import", "--format", "compiler"],
        b"a.txt:1:1: error: kept\n",
    );
    assert!(o.status.success(), "{}", stderr(&o));
    sb.run_ok(&["workspace", "add", s(extra)]);
    let lost = open_diff(&mut c, &a, "ONE\n", "lost");
    let lost_id = sb.wait_for_listing(&["diff", "--json"], 1)[0]["id"]
        .as_str()
        .unwrap()
        .to_string();

    delete_state_dir(&sb);
    wait_made_again(&srv);
    assert!(
        srv.log().contains(&format!(
            "the state directory {} was deleted (or part of it) while this server runs; making it again",
            sb.state().display()
        )),
        "{}",
        srv.log()
    );
    // Logged after the line wait_made_again waits for.
    let lost_line = format!(
        "diff {lost_id} for {}: its proposal was in the deleted state directory and is lost; it can only be rejected (ccide diff reject {lost_id}) or answered in Claude Code",
        a.display()
    );
    wait_for("the lost proposal to be named", DEADLINE, || {
        srv.log().contains(&lost_line).then_some(())
    });

    // The files are back, from memory.
    let state = sb.state();
    assert_eq!(
        read_json(&state.join("server.json")),
        json!({"port": port, "token": token})
    );
    assert_eq!(
        read_json(&state.join("editor.json"))["tabs"][0]["path"],
        s(&a)
    );
    assert_eq!(
        read_json(&state.join("diagnostics.json"))[0]["diagnostics"][0]["message"],
        "kept"
    );
    assert_eq!(
        read_json(&state.join("workspaces.json"))["added"],
        json!([s(extra)])
    );
    for (p, mode_wanted) in [(state.clone(), 0o700), (state.join("server.json"), 0o600)] {
        assert_eq!(mode(&p), mode_wanted, "{}", p.display());
    }

    // Commands reach the server again.
    let st: Value = sb.status();
    assert_eq!(st["port"], port);
    assert_eq!(st["tabs"][0]["path"], s(&a));

    // The lost proposal: accepting says why it cannot be; rejecting answers the client.
    let o = sb.run(&["diff", "accept", &lost_id]);
    assert_eq!(o.status.code(), Some(1), "{}", stdout(&o));
    assert!(
        stderr(&o).contains(&format!(
            "diff {lost_id} cannot be accepted: its proposal was in the state directory, which was deleted; reject it (ccide diff reject {lost_id}) and ask Claude again"
        )),
        "{}",
        stderr(&o)
    );
    sb.run_ok(&["diff", "reject", &lost_id]);
    assert_eq!(texts(&c.response(&lost))[0], "DIFF_REJECTED");

    // A new proposal is stored, reviewed and accepted as ever.
    let id = open_diff(&mut c, &b, "TWO\n", "new");
    let d = sb.wait_for_listing(&["diff", "--json"], 1)[0].clone();
    assert_eq!(
        (d["added"].as_u64(), d["removed"].as_u64()),
        (Some(1), Some(1))
    );
    sb.run_ok(&["diff", "accept"]);
    assert_eq!(texts(&c.response(&id)), ["FILE_SAVED", "TWO\n"]);

    // A restart keeps port, token and what was made again.
    drop(c);
    srv.stop_with("TERM");
    let second = sb.serve(&[]);
    assert_eq!((second.port, &second.token), (port, &token));
    let st: Value = sb.status();
    assert_eq!(st["tabs"][0]["path"], s(&a));
    assert_eq!(st["workspaces"], json!([s(&sb.ws()), s(extra)]));
}

/// Between the deletion and the server making the directory again, a second server of the
/// same state directory finds nothing on disk; it must still not start (two lock files for
/// one folder make the CLI connect to neither).
#[test]
fn a_second_server_cannot_take_a_deleted_state_directory_from_a_running_one() {
    let sb = Sandbox::new();
    let first = sb.serve(&[]);
    delete_state_dir(&sb);
    let log = sb.root.join("second.log");
    let mut second = sb
        .serve_command(&[])
        .stdin(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + DEADLINE;
    let status = loop {
        if let Some(st) = second.try_wait().unwrap() {
            break st;
        }
        if std::time::Instant::now() > deadline {
            let _ = second.kill();
            let _ = second.wait();
            panic!("a second server runs with the deleted state directory");
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    let said = std::fs::read_to_string(&log).unwrap();
    assert_eq!(status.code(), Some(1), "{said}");
    assert!(
        said.contains(&format!(
            "another ccide serve (pid {}) already runs with the state directory {}",
            first.pid(),
            sb.state().display()
        )),
        "{said}"
    );
    wait_made_again(&first);
    assert_eq!(
        list_locks(&sb.config().join("ide")),
        std::slice::from_ref(&first.lock_path)
    );
    let st: Value = sb.status();
    assert_eq!(st["pid"], first.pid());
}

/// Only the control socket deleted (a cleanup of stale sockets): it is bound again, and the
/// commands reach the same server.
#[test]
fn a_deleted_control_socket_is_bound_again() {
    let sb = Sandbox::new();
    let srv = sb.serve(&[]);
    let control = sb.state().join("control.sock");
    std::fs::remove_file(&control).unwrap();
    wait_made_again(&srv);
    let st: Value = sb.status();
    assert_eq!(st["pid"], srv.pid());
}

#[test]
#[ignore = "needs root, to run serve as uid 65534 beside a directory it cannot write: .ci/run runs it as root"]
fn a_state_directory_that_cannot_be_written_is_named_with_what_to_do() {
    assert!(
        std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0),
        "only root can run serve as another user"
    );
    let sb = Sandbox::new();
    for d in [
        sb.root.path(),
        &sb.home(),
        &sb.config(),
        &sb.state(),
        &sb.ws(),
    ] {
        std::os::unix::fs::chown(d, Some(65534), Some(65534)).unwrap();
    }
    let state = sb.state();
    // Once used (serve.lock and server.json in it) or never: the same answer.
    for used in [false, true] {
        if used {
            std::fs::write(state.join("serve.lock"), "").unwrap();
            std::os::unix::fs::chown(state.join("serve.lock"), Some(65534), Some(65534)).unwrap();
        }
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o500)).unwrap();
        let o = sb
            .command(&["serve", "--state-dir", s(&state)])
            .uid(65534)
            .gid(65534)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        assert_eq!(
            stderr(&o),
            format!(
                "ccide: the state directory {} is not writable (mode 0500: Permission denied (os error 13)); \
                 run `chmod 700 {}`; to use another, pass --state-dir DIR\n",
                state.display(),
                state.display()
            ),
            "used: {used}"
        );
        assert!(list_locks(&sb.config().join("ide")).is_empty());
        std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
}
