//! One server per folder, as the CLI needs it (ccide-protocol(7) §1.3): the CLI connects only
//! when exactly one lock file holds its directory. A `serve` or a bridge's detached serve of a
//! folder above, below or equal to a running server's is refused, naming that server; `/` and
//! the home folder are never served unless named; a lock file whose pid runs but whose server
//! is gone (the pid reused) counts as gone; and a detached serve whose folders were all deleted
//! leaves.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::util::*;
use serde_json::{Value, json};

/// This process's pid namespace, as a lock file records it.
fn pid_namespace() -> u64 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self/ns/pid").unwrap().ino()
}

/// The live ccide servers' pids whose lock files are in the sandbox's config directory.
fn server_pids(sb: &Sandbox) -> Vec<u64> {
    list_locks(&sb.config().join("ide"))
        .iter()
        .filter_map(|p| std::fs::read(p).ok())
        .filter_map(|b| serde_json::from_slice::<Value>(&b).ok())
        .filter_map(|v| v["pid"].as_u64())
        .filter(|pid| process_alive(*pid))
        .collect()
}

/// Kills, when the test ends, the servers a bridge started (a test that fails must not leave
/// one running): the sandbox's live servers other than `keep`.
struct Detached<'a>(&'a Sandbox, Vec<u64>);

impl Drop for Detached<'_> {
    fn drop(&mut self) {
        for pid in server_pids(self.0) {
            if !self.1.contains(&pid) {
                let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
            }
        }
    }
}

/// `ccide lsp-bridge` for the project `root` (as the CLI's `$CLAUDE_PROJECT_DIR`).
fn bridge(sb: &Sandbox, root: &Path) -> LspProcess {
    let mut cmd = sb.command(&["lsp-bridge"]);
    cmd.env("CLAUDE_PROJECT_DIR", root);
    let n = std::fs::read_dir(sb.root.path()).unwrap().count();
    LspProcess::spawn(&mut cmd, sb.root.join(format!("bridge-{n}.log")))
}

/// Runs `cmd` to its end, or kills it after DEADLINE (a server that started after all: a
/// refused one ends at once); its exit code (None when killed) and stderr.
fn run_bounded(cmd: &mut Command) -> (Option<i32>, String) {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let end = std::time::Instant::now() + DEADLINE;
    while child.try_wait().unwrap().is_none() && std::time::Instant::now() < end {
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let o = child.wait_with_output().unwrap();
    (o.status.code(), stderr(&o))
}

/// A `serve` of `dir` with a state directory of its own, run as `run_bounded`.
fn serve_beside(sb: &Sandbox, dir: &Path, state: &str) -> (Option<i32>, String) {
    let state = sb.root.join(state);
    run_bounded(&mut sb.command(&["serve", "--workspace", s(dir), "--state-dir", s(&state)]))
}

/// A serve of the folder above a running server's, of one below it, or of the same folder
/// with another state directory, would make two lock files hold the folder: each is refused
/// with the other server's folder, pid and port, and what to do; the CLI's view stays one
/// server, so `ccide status` there still answers.
#[test]
fn a_serve_above_below_or_beside_a_running_one_is_refused_naming_it() {
    let sb = Sandbox::without_system_tools();
    std::fs::create_dir_all(sb.ws().join("sub")).unwrap();
    let srv = sb.serve(&[]);
    let _left = Detached(&sb, vec![srv.pid().into()]);
    let ws = sb.ws();
    let named = format!(
        "another ccide server (pid {}, port {}) already serves",
        srv.pid(),
        srv.port
    );
    for (dir, state, relation) in [
        (
            sb.root.path().to_path_buf(),
            "above",
            format!("{}, inside it", s(&ws)),
        ),
        (ws.join("sub"), "below", format!("{}, above it", s(&ws))),
        (ws.clone(), "beside", "the same folder".to_string()),
    ] {
        let (code, err) = serve_beside(&sb, &dir, state);
        assert_eq!(code, Some(1), "{}: {err}", dir.display());
        let why = format!("refusing to serve {}: {named} {relation}", dir.display());
        assert!(err.contains(&why), "{err}");
        assert!(err.contains(&format!("kill {}", srv.pid())), "{err}");
    }
    assert_eq!(server_pids(&sb), [u64::from(srv.pid())]);
    let o = sb.run(&["status"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}

/// `ccide serve` run in `/` (a container's WORKDIR) or in the home folder, without
/// --workspace, would hold every project below: refused with what to do. Named with
/// --workspace, the home folder is served.
#[test]
fn serve_in_root_or_home_needs_the_folder_named() {
    let sb = Sandbox::without_system_tools();
    let home = sb.home();
    for dir in [PathBuf::from("/"), home.clone()] {
        let mut cmd = sb.command(&["serve", "--state-dir", s(&sb.state())]);
        let (code, err) = run_bounded(cmd.current_dir(&dir));
        assert_eq!(code, Some(2), "{err}");
        let why = format!(
            "refusing to serve {} (the current directory): it would hold every project below it",
            dir.display()
        );
        assert!(err.contains(&why), "{err}");
        assert!(
            err.contains(&format!("--workspace {}", dir.display())),
            "{err}"
        );
    }
    assert!(list_locks(&sb.config().join("ide")).is_empty());
    let mut cmd = sb.command(&[
        "serve",
        "--workspace",
        s(&home),
        "--state-dir",
        s(&sb.state()),
    ]);
    let srv = Server::spawn(cmd.current_dir(&home), &sb.config());
    assert_eq!(srv.lock["workspaceFolders"], json!([s(&home)]));
}

/// A session started in a folder above a served project (or in `~`, or in `/`) has a bridge
/// that finds no server for its folder: it starts none there, which would hold the project's
/// folder too, and says why and what to do; its client sees it end.
#[test]
fn a_bridge_above_a_served_project_or_in_home_or_root_starts_no_server() {
    let sb = Sandbox::without_system_tools();
    let srv = sb.serve(&[]);
    let _left = Detached(&sb, vec![srv.pid().into()]);
    let mut above = bridge(&sb, sb.root.path());
    assert_eq!(above.wait_exit("the bridge to exit"), Some(1));
    let err = above.stderr();
    let why = format!(
        "refusing to serve {}: another ccide server (pid {}, port {}) already serves {}, inside it",
        sb.root.path().display(),
        srv.pid(),
        srv.port,
        sb.ws().display()
    );
    assert!(err.contains(&why), "{err}");
    for dir in [PathBuf::from("/"), sb.home()] {
        let mut b = bridge(&sb, &dir);
        assert_eq!(b.wait_exit("the bridge to exit"), Some(1));
        let why = format!(
            "no ccide server serves {}, and none is started for it: it would hold every project below it",
            dir.display()
        );
        assert!(b.stderr().contains(&why), "{}", b.stderr());
        assert!(
            b.stderr()
                .contains(&format!("ccide serve --workspace {}", dir.display())),
            "{}",
            b.stderr()
        );
    }
    assert_eq!(server_pids(&sb), [u64::from(srv.pid())]);
}

/// A server killed with SIGKILL leaves its lock file; when its pid is taken by another
/// process, the lock looks live. Its control socket refuses (nobody listens), which proves it
/// gone: the bridge removes the stale lock (so that the CLI sees one server for the folder) and
/// starts a fresh server; `ccide status` answers from it.
#[test]
fn a_stale_lock_whose_pid_was_reused_does_not_stop_the_bridge() {
    let sb = Sandbox::without_system_tools();
    let _left = Detached(&sb, Vec::new());
    let mut other = Command::new("sleep").arg("60").spawn().unwrap();
    let old_state = sb.root.join("old-state");
    std::fs::create_dir_all(&old_state).unwrap();
    let stale = sb.root.write(
        "config/ide/9.lock",
        json!({"pid": other.id(), "workspaceFolders": [sb.ws()], "ideName": "ccide (ws)",
               "transport": "ws", "runningInWindows": false, "authToken": "t".repeat(86),
               "ccide": {"control": old_state.join("control.sock"), "state": old_state,
                         "pidns": pid_namespace()}})
        .to_string(),
    );
    let mut lsp = bridge(&sb, &sb.ws());
    let init = lsp.request("initialize", json!({}));
    assert_eq!(
        init["result"]["capabilities"]["textDocumentSync"],
        1,
        "{init} {}",
        lsp.stderr()
    );
    assert!(!stale.exists(), "the stale lock file is removed");
    // By the bridge, before it starts the server, on its stderr (the CLI's debug log).
    let log = lsp.stderr();
    let said = format!(
        "removed the stale lock file {} of pid {} for {} (its pid runs, but no ccide server answers on its control socket)",
        stale.display(),
        other.id(),
        sb.ws().display()
    );
    assert!(log.contains(&said), "{log}");
    let pids = server_pids(&sb);
    assert_eq!(pids.len(), 1, "{pids:?}");
    assert_ne!(pids[0], u64::from(other.id()));
    let o = sb.run(&["status"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let _ = other.kill();
    let _ = other.wait();
}

/// A serve whose workspace folders are all deleted leaves by itself: it logs why, removes its
/// lock file and exits 0, rather than announce a folder that is gone for ever.
#[test]
fn a_serve_whose_folders_are_all_gone_leaves() {
    let sb = Sandbox::without_system_tools();
    let proj = sb.root.join("proj");
    std::fs::create_dir_all(&proj).unwrap();
    let mut srv = Server::spawn(
        &mut sb.command(&[
            "serve",
            "--workspace",
            s(&proj),
            "--state-dir",
            s(&sb.state()),
        ]),
        &sb.config(),
    );
    std::fs::remove_dir_all(&proj).unwrap();
    let mut child = srv.child.take().unwrap();
    let status = wait_for("serve to leave", Duration::from_secs(30), || {
        child.try_wait().unwrap()
    });
    assert_eq!(status.code(), Some(0), "{}", srv.log());
    assert!(!srv.lock_path.exists(), "its lock file is removed");
    let said = format!(
        "every workspace folder is gone ({}): leaving, and removing the lock file",
        proj.display()
    );
    assert!(srv.log().contains(&said), "{}", srv.log());
    assert!(!srv.log().contains("SIGTERM received"), "{}", srv.log());
}
