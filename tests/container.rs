//! The fully static build in an otherwise empty root file system: as root, as another uid,
//! and with a read-only root. `.ci/run` builds the binary, names it in CCIDE_STATIC_BIN and runs
//! these tests as root with `--ignored`:
//!   RUSTFLAGS="-C target-feature=+crt-static" cargo build --release --target x86_64-unknown-linux-gnu

use std::path::Path;
use std::process::{Child, Command, Stdio};

use crate::util::*;
use serde_json::{Value, json};

/// An empty root holding the static binary, and a chroot that works in it.
fn setup() -> TempDir {
    let bin = tool_from_env(
        "CCIDE_STATIC_BIN",
        "build the static binary as README.md says (.ci/run does)",
    );
    let root = TempDir::new();
    for d in ["config", "state", "ws"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    std::fs::copy(&bin, root.join("ccide")).unwrap();
    // A child another test thread forks while the copy is open for writing holds it open until
    // its exec: until then the copy cannot run (ETXTBSY, "Text file busy").
    wait_for("the copied binary to run in the root", DEADLINE, || {
        let o = Command::new("chroot")
            .arg(root.path())
            .arg("/ccide")
            .arg("--version")
            .output()
            .expect("run chroot");
        if o.status.success() {
            return Some(());
        }
        let err = stderr(&o);
        assert!(err.contains("Text file busy"), "chroot (needs root): {err}");
        None
    });
    root
}

const SERVE: &[&str] = &[
    "/ccide",
    "serve",
    "--config-dir",
    "/config",
    "--state-dir",
    "/state",
    "--workspace",
    "/ws",
];

/// Nothing of the test's environment (no HOME) reaches the server.
fn spawn(mut cmd: Command) -> Child {
    cmd.env_clear()
        .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for the lock file, talks to the server, stops it with SIGTERM and checks the lock is gone.
fn serve_and_stop(root: &Path, mut child: Child) {
    let ide = root.join("config/ide");
    let lock = wait_for("the lock file inside the root", DEADLINE, || {
        if let Ok(Some(status)) = child.try_wait() {
            let mut err = String::new();
            std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
            panic!("serve exited with {status}: {err}");
        }
        list_locks(&ide).into_iter().next()
    });
    let v: Value = serde_json::from_slice(&std::fs::read(&lock).unwrap()).unwrap();
    assert_eq!(v["workspaceFolders"], json!(["/ws"]));
    let port: u16 = lock.file_stem().unwrap().to_str().unwrap().parse().unwrap();
    let mut c = Client::connect(port, v["authToken"].as_str().unwrap());
    c.handshake();
    assert_eq!(c.request("ping", json!({}))["result"], json!({}));
    let pid = v["pid"].as_i64().unwrap();
    // The pid in the lock is the server's (no pid namespace here), so signal it directly.
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .unwrap()
            .success()
    );
    let status = wait_for("serve to exit", DEADLINE, || child.try_wait().unwrap());
    assert_eq!(status.code(), Some(0));
    assert!(!lock.exists(), "the lock file is removed on SIGTERM");
}

#[test]
#[ignore = "needs root and the static build (CCIDE_STATIC_BIN): .ci/run provides both"]
fn the_static_binary_serves_from_an_empty_root() {
    let root = setup();
    let mut cmd = Command::new("chroot");
    cmd.arg(root.path()).args(SERVE);
    serve_and_stop(root.path(), spawn(cmd));
}

#[test]
#[ignore = "needs root and the static build (CCIDE_STATIC_BIN): .ci/run provides both"]
fn the_static_binary_serves_as_a_non_root_user() {
    let root = setup();
    for d in ["config", "state", "ws"] {
        assert!(
            Command::new("chown")
                .args(["65534:65534", root.join(d).to_str().unwrap()])
                .status()
                .unwrap()
                .success()
        );
    }
    let mut cmd = Command::new("chroot");
    cmd.arg("--userspec=65534:65534")
        .arg(root.path())
        .args(SERVE);
    serve_and_stop(root.path(), spawn(cmd));
    let owner = std::os::unix::fs::MetadataExt::uid(
        &std::fs::metadata(root.join("state/server.json")).unwrap(),
    );
    assert_eq!(owner, 65534);
}

#[test]
#[ignore = "needs root and the static build (CCIDE_STATIC_BIN): .ci/run provides both"]
fn the_static_binary_serves_with_a_read_only_root() {
    let root = setup();
    let r = root.path().display().to_string();
    // Writable config and state are bound before the root is made read-only.
    let script = format!(
        "mount --bind {r} {r} && mount --bind {r}/config {r}/config && mount --bind {r}/state {r}/state \
         && mount -o remount,bind,ro {r} && exec chroot {r} {}",
        SERVE.join(" ")
    );
    let mut cmd = Command::new("unshare");
    cmd.args(["-m", "sh", "-c", &script]);
    serve_and_stop(root.path(), spawn(cmd));
}
