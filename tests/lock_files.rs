//! One server per state directory, and its lock file: a second server on the same state
//! directory is refused (even without its socket), of five started at once exactly one stays, a
//! deleted lock file is written again with the same port and token, a state directory too long
//! for a socket address still serves the commands; and gc removes only the lock files of servers
//! proven dead.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::*;
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------------
// One server per state directory, its lock file, a state directory with a long path.

/// Runs a `serve` that must refuse to start; its exit code and standard error.
fn refused(mut cmd: Command) -> (Option<i32>, String) {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let end = Instant::now() + DEADLINE;
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > end {
            let _ = child.kill();
            let _ = child.wait();
            panic!("ccide serve started although it had to refuse");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let o = child.wait_with_output().unwrap();
    (o.status.code(), stderr(&o))
}

#[test]
fn a_second_server_on_the_same_state_directory_is_refused_even_without_its_socket() {
    let sb = Sandbox::new();
    let srv = sb.serve(&[]);
    std::fs::remove_file(sb.state().join("control.sock")).unwrap();
    let (code, err) = refused(sb.serve_command(&[]));
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&format!(
            "another ccide serve (pid {}) already runs with the state directory {}",
            srv.pid(),
            sb.state().display()
        )) && err.contains("use it (`claude --ide` in the folder connects to it; `ccide status` there shows it), or stop it before starting a new one"),
        "{err}"
    );
    assert_eq!(
        list_locks(&sb.config().join("ide")),
        vec![srv.lock_path.clone()]
    );
}

/// Servers started by a test itself, stopped (SIGTERM, then SIGKILL) however the test ends.
struct Servers(Vec<std::process::Child>);

impl Drop for Servers {
    fn drop(&mut self) {
        for c in &mut self.0 {
            if let Ok(None) = c.try_wait() {
                let _ = Command::new("kill").arg(c.id().to_string()).status();
                let end = Instant::now() + Duration::from_secs(5);
                while matches!(c.try_wait(), Ok(None)) && Instant::now() < end {
                    std::thread::sleep(Duration::from_millis(10));
                }
                let _ = c.kill();
                let _ = c.wait();
            }
        }
    }
}

#[test]
fn of_five_servers_started_at_once_on_one_state_directory_exactly_one_stays() {
    let sb = Sandbox::new();
    let mut servers = Servers(
        (0..5)
            .map(|i| {
                let log = std::fs::File::create(sb.root.join(format!("race-{i}.log"))).unwrap();
                sb.serve_command(&[])
                    .stdin(Stdio::null())
                    .stdout(Stdio::null())
                    .stderr(log)
                    .spawn()
                    .unwrap()
            })
            .collect(),
    );
    let ide = sb.config().join("ide");
    let exited = wait_for("four of the five to give up", DEADLINE, || {
        let done: Vec<(usize, i32)> = servers
            .0
            .iter_mut()
            .enumerate()
            .filter_map(|(i, c)| Some((i, c.try_wait().unwrap()?.code().unwrap_or(-1))))
            .collect();
        (done.len() >= 4).then_some(done)
    });
    assert_eq!(exited.len(), 4, "one stays up: {exited:?}");
    let winner = (0..5)
        .find(|i| !exited.iter().any(|(j, _)| j == i))
        .unwrap();
    let locks = wait_for("the winner's lock file", DEADLINE, || {
        let l = list_locks(&ide);
        (!l.is_empty()).then_some(l)
    });
    assert_eq!(locks.len(), 1, "{locks:?}");
    let lock: Value = serde_json::from_slice(&std::fs::read(&locks[0]).unwrap()).unwrap();
    assert_eq!(lock["pid"], json!(servers.0[winner].id()));
    // A loser that reads serve.lock between the winner's flock and its pid being written
    // reads again until the pid is there: every loser names the winner.
    let state = sb.state();
    let named = format!(
        "another ccide serve (pid {}) already runs with the state directory {}",
        servers.0[winner].id(),
        state.display()
    );
    for (i, code) in &exited {
        let log = std::fs::read_to_string(sb.root.join(format!("race-{i}.log"))).unwrap();
        assert_eq!(*code, 1, "{log}");
        assert!(log.contains(&named), "{log}");
    }
    assert!(
        servers.0[winner].try_wait().unwrap().is_none(),
        "the winner runs"
    );
    assert_eq!(list_locks(&ide).len(), 1);
}

#[test]
fn a_deleted_lock_file_is_written_again_with_the_same_port_and_token() {
    let sb = Sandbox::new();
    let srv = sb.serve(&[]);
    std::fs::remove_file(&srv.lock_path).unwrap();
    let lock: Value = wait_for("the lock file to come back", DEADLINE, || {
        serde_json::from_slice(&std::fs::read(&srv.lock_path).ok()?).ok()
    });
    assert_eq!(lock["authToken"], srv.token.as_str());
    assert_eq!(lock["pid"], json!(srv.pid()));
    assert_eq!(
        list_locks(&sb.config().join("ide")),
        vec![srv.lock_path.clone()]
    );
    assert!(
        srv.log().contains(&format!(
            "the lock file {} was deleted while this server runs; wrote it again (same port and token)",
            srv.lock_path.display()
        )),
        "{}",
        srv.log()
    );
    let mut c = srv.client();
    assert_eq!(c.request("ping", json!({}))["result"], json!({}));
}

#[test]
fn a_state_directory_too_long_for_a_socket_address_still_serves_the_commands() {
    let sb = Sandbox::new();
    let state = sb
        .root
        .join(format!("{}/{}", "s".repeat(60), "t".repeat(60)));
    assert!(s(&state.join("control.sock")).len() > 107);
    let ws = sb.ws();
    let mut cmd = sb.command(&["serve", "--workspace", s(&ws), "--state-dir", s(&state)]);
    let srv = Server::spawn(&mut cmd, &sb.config());
    let o = sb.run_ok(&["status"]);
    assert!(
        stdout(&o).contains(&format!("(pid {}) on 127.0.0.1:{}", srv.pid(), srv.port)),
        "{}",
        stdout(&o)
    );
    assert!(
        stdout(&o).contains(&format!("state    {}\n", state.display())),
        "{}",
        stdout(&o)
    );
    sb.write("a.txt", "one\n");
    sb.run_ok(&["open", "a.txt"]);
}

// ---------------------------------------------------------------------------------------------
// gc removes only what is proven dead.

#[test]
fn gc_keeps_a_lock_from_another_pid_namespace_and_removes_a_dead_one_of_this_one() {
    use std::os::unix::fs::MetadataExt;
    let sb = Sandbox::new();
    let ide = sb.config().join("ide");
    std::fs::create_dir_all(&ide).unwrap();
    let our_ns = std::fs::metadata("/proc/self/ns/pid").unwrap().ino();
    // Above the default pid_max range: never a live pid here.
    let dead_pid = 4_194_305;
    let lock = |port: u16, ns: u64| -> (PathBuf, PathBuf) {
        let state = sb.root.join(format!("state-{port}"));
        std::fs::create_dir_all(state.join("diffs/1")).unwrap();
        let control = state.join("control.sock");
        std::fs::write(&control, "").unwrap();
        let v = json!({"pid": dead_pid, "workspaceFolders": [sb.ws()], "ideName": format!("ccide {port}"),
            "transport": "ws", "runningInWindows": false, "authToken": "t",
            "ccide": {"control": control, "state": state, "pidns": ns}});
        let path = ide.join(format!("{port}.lock"));
        std::fs::write(&path, v.to_string()).unwrap();
        (path, state)
    };
    let (foreign, foreign_state) = lock(10, our_ns + 1);
    let (dead, dead_state) = lock(11, our_ns);
    let o = sb.run_ok(&["gc"]);
    let out = stdout(&o);
    assert!(
        out.contains(&format!(
            "kept {}: it was written in another pid namespace (a container?), where its server may run\n",
            foreign.display()
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!("removed {}\n", dead.display())),
        "{out}"
    );
    assert!(foreign.exists() && foreign_state.join("control.sock").exists());
    assert!(!dead.exists() && !dead_state.join("control.sock").exists());
    assert!(!dead_state.join("diffs").exists());
}
