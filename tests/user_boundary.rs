//! What another local user can reach: the folders ccide writes a command into (`ccide plugin
//! install`) and the lock folder, lock file and control socket its clients follow are refused
//! unless they are our own; `serve` refuses a lock or state directory open to others or owned
//! by another user, and its control socket refuses another user. Acting as another user is uid
//! 65534 (files chowned to it, or a process run with setpriv), which needs root.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};

use crate::util::*;
use crate::wire::{assert_alive, control, serve_refused};
use serde_json::json;

/// A stand-in for `claude`: says it is 2.1.330, records each run's arguments in
/// `claude-runs.txt` (one line per run) and does nothing else.
fn fake_claude(sb: &Sandbox) -> PathBuf {
    let runs = sb.root.join("claude-runs.txt");
    sb.script(
        "fake-claude",
        &format!(
            "echo \"$*\" >> '{}'\n[ \"$1\" = --version ] && echo '2.1.330 (Claude Code)'\nexit 0",
            runs.display()
        ),
    )
}

fn claude_runs(sb: &Sandbox) -> String {
    std::fs::read_to_string(sb.root.join("claude-runs.txt")).unwrap_or_default()
}

/// `ccide plugin install` in the sandbox with the stand-in claude.
fn plugin_install(sb: &Sandbox) -> Output {
    let claude = fake_claude(sb);
    sb.command(&["plugin", "install"])
        .env("CCIDE_CLAUDE", &claude)
        .output()
        .unwrap()
}

fn marketplace(sb: &Sandbox) -> PathBuf {
    sb.home().join(".local/share/ccide/claude-marketplace")
}

/// The install was refused with exit 1 and a message naming `path` and saying `says`; no
/// plugin was written and claude was not asked to install anything.
fn assert_install_refused(sb: &Sandbox, o: &Output, path: &Path, says: &str) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("the plugin folder {}", path.display())) && err.contains(says),
        "{err}"
    );
    assert!(
        !claude_runs(sb).contains("plugin"),
        "claude was asked to install: {}",
        claude_runs(sb)
    );
}

#[test]
fn plugin_install_refuses_a_marketplace_that_is_a_symlink() {
    let sb = Sandbox::new();
    let elsewhere = sb.root.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let market = marketplace(&sb);
    std::fs::create_dir_all(market.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &market).unwrap();
    let o = plugin_install(&sb);
    assert_install_refused(&sb, &o, &market, "is a symbolic link");
    assert!(stderr(&o).contains("remove the link"), "{}", stderr(&o));
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
    // The plugin's own folder, inside a real marketplace, is refused as a link too.
    std::fs::remove_file(&market).unwrap();
    std::fs::create_dir_all(&market).unwrap();
    std::os::unix::fs::symlink(&elsewhere, market.join("ccide")).unwrap();
    let o = plugin_install(&sb);
    assert_install_refused(&sb, &o, &market.join("ccide"), "is a symbolic link");
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
}

#[test]
fn plugin_install_refuses_a_folder_writable_by_others() {
    // The folder holding the marketplace, the marketplace, the plugin, its manifest's folder.
    for pick in [
        |m: &Path| m.parent().unwrap().to_path_buf(),
        |m: &Path| m.to_path_buf(),
        |m: &Path| m.join("ccide"),
        |m: &Path| m.join("ccide/.claude-plugin"),
    ] {
        let sb = Sandbox::new();
        let dir = pick(&marketplace(&sb));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let o = plugin_install(&sb);
        assert_install_refused(&sb, &o, &dir, "writable by group or others");
        assert!(
            stderr(&o).contains(&format!("chmod 700 {}", dir.display())),
            "{}",
            stderr(&o)
        );
        assert!(
            !marketplace(&sb)
                .join("ccide/.claude-plugin/plugin.json")
                .exists()
        );
    }
}

#[test]
#[ignore = "needs root, to give a folder to uid 65534: .ci/run runs it as root"]
fn plugin_install_refuses_a_folder_of_another_user() {
    assert!(is_root(), "only root can chown a folder to another user");
    let sb = Sandbox::new();
    let market = marketplace(&sb);
    std::fs::create_dir_all(&market).unwrap();
    std::os::unix::fs::chown(&market, Some(65534), Some(65534)).unwrap();
    let o = plugin_install(&sb);
    assert_install_refused(&sb, &o, &market, "belongs to uid 65534");
    assert!(!market.join(".claude-plugin").exists());
}

/// Under umask 0 the folders ccide creates for the plugin are still private (0700).
#[test]
fn plugin_install_creates_private_folders_whatever_the_umask() {
    let sb = Sandbox::new();
    let claude = fake_claude(&sb);
    let cmd = sb.command(&["plugin", "install"]);
    let envs: Vec<_> = cmd
        .get_envs()
        .map(|(k, v)| (k.to_owned(), v.unwrap().to_owned()))
        .collect();
    let o = Command::new("/bin/sh")
        .args(["-c", "umask 0 && exec \"$0\" plugin install", BIN])
        .env_clear()
        .envs(envs)
        .env("CCIDE_CLAUDE", &claude)
        .current_dir(sb.ws())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let market = marketplace(&sb);
    for d in [
        market.parent().unwrap().to_path_buf(),
        market.clone(),
        market.join(".claude-plugin"),
        market.join("ccide"),
        market.join("ccide/.claude-plugin"),
    ] {
        let m = std::fs::metadata(&d).unwrap();
        assert_eq!(m.mode() & 0o777, 0o700, "{}", d.display());
    }
    assert!(claude_runs(&sb).contains("plugin install ccide@ccide"));
}

// ---------------------------------------------------------------------------------------------
// The clients follow only lock files of ours to sockets of ours.

const PORT: &str = "40001";

/// Writes `config/ide/40001.lock` naming `control` as its control socket, for the sandbox's
/// workspace and a live pid (this test's), in a lock directory of mode `dir_mode`.
fn lock_naming(sb: &Sandbox, control: &Path, dir_mode: u32) -> PathBuf {
    let dir = sb.config().join("ide");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(dir_mode)).unwrap();
    let lock = dir.join(format!("{PORT}.lock"));
    let body = json!({"pid": std::process::id(), "workspaceFolders": [sb.ws()],
                      "ideName": "ccide", "transport": "ws", "runningInWindows": false,
                      "authToken": "t", "ccide": {"control": control, "state": sb.state()}});
    std::fs::write(&lock, body.to_string()).unwrap();
    lock
}

/// A listening socket of ours that nobody should connect to.
fn untouched_listener(sb: &Sandbox) -> (UnixListener, PathBuf) {
    let path = sb.root.join("listener.sock");
    let l = UnixListener::bind(&path).unwrap();
    l.set_nonblocking(true).unwrap();
    (l, path)
}

/// Runs a client command and the bridge against the lock: each must fail with status 1 and
/// a message naming `path` and saying `says`.
fn assert_clients_refuse(sb: &Sandbox, path: &Path, says: &str) {
    for args in [&["status"][..], &["lsp-bridge"][..]] {
        let o = sb.run(args);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(1), "ccide {args:?}: {err}");
        assert!(
            err.contains(&path.display().to_string()) && err.contains(says),
            "ccide {args:?}: {err}"
        );
    }
}

fn assert_never_connected(l: &UnixListener) {
    match l.accept() {
        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
        other => panic!("a client connected: {other:?}"),
    }
}

#[test]
fn the_clients_refuse_a_lock_directory_others_can_write() {
    let sb = Sandbox::new();
    let (listener, sock) = untouched_listener(&sb);
    lock_naming(&sb, &sock, 0o777);
    assert_clients_refuse(&sb, &sb.config().join("ide"), "writable by group or others");
    assert_never_connected(&listener);
}

#[test]
#[ignore = "needs root, to give the lock directory to uid 65534: .ci/run runs it as root"]
fn the_clients_refuse_a_lock_directory_of_another_user() {
    assert!(is_root(), "only root can chown a directory to another user");
    let sb = Sandbox::new();
    let (listener, sock) = untouched_listener(&sb);
    lock_naming(&sb, &sock, 0o755);
    let dir = sb.config().join("ide");
    std::os::unix::fs::chown(&dir, Some(65534), Some(65534)).unwrap();
    assert_clients_refuse(&sb, &dir, "belongs to uid 65534");
    assert_never_connected(&listener);
}

#[test]
#[ignore = "needs root, to give the lock file to uid 65534: .ci/run runs it as root"]
fn the_clients_refuse_a_lock_file_of_another_user() {
    assert!(is_root(), "only root can chown a file to another user");
    let sb = Sandbox::new();
    let (listener, sock) = untouched_listener(&sb);
    let lock = lock_naming(&sb, &sock, 0o700);
    std::os::unix::fs::chown(&lock, Some(65534), Some(65534)).unwrap();
    assert_clients_refuse(&sb, &lock, "belongs to uid 65534");
    assert_never_connected(&listener);
}

/// A Unix socket listened on by a process of uid 65534 (python3 under setpriv), which writes
/// how many bytes each connection brought, one line per connection, once it ends.
struct ForeignListener {
    child: Child,
    sock: PathBuf,
    received: PathBuf,
}

impl ForeignListener {
    fn start(sb: &Sandbox) -> ForeignListener {
        let theirs = sb.root.join("theirs");
        std::fs::create_dir_all(&theirs).unwrap();
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).unwrap();
        let (sock, received) = (theirs.join("control.sock"), theirs.join("received"));
        let script = r#"
import socket, sys
s = socket.socket(socket.AF_UNIX)
s.bind(sys.argv[1])
s.listen(8)
while True:
    c, _ = s.accept()
    n = 0
    while True:
        d = c.recv(65536)
        if not d:
            break
        n += len(d)
    with open(sys.argv[2], "a") as f:
        f.write("%d\n" % n)
    c.close()
"#;
        let child = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
            .arg(python3())
            .args(["-c", script, s(&sock), s(&received)])
            .stdin(Stdio::null())
            .spawn()
            .expect("setpriv (util-linux) runs");
        wait_for("the other user's socket", DEADLINE, || {
            sock.exists().then_some(())
        });
        ForeignListener {
            child,
            sock,
            received,
        }
    }

    /// The bytes of each connection that ended, in order.
    fn received(&self) -> Vec<u64> {
        std::fs::read_to_string(&self.received)
            .unwrap_or_default()
            .lines()
            .map(|l| l.parse().unwrap())
            .collect()
    }
}

impl Drop for ForeignListener {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A lock of ours, in a directory of ours, that names another user's socket: the clients
/// connect, see the peer's uid, and refuse before they send a byte.
#[test]
#[ignore = "needs root, to listen as uid 65534: .ci/run runs it as root"]
fn the_clients_send_nothing_to_a_control_socket_of_another_user() {
    assert!(is_root(), "only root can run a process as another user");
    let sb = Sandbox::new();
    let theirs = ForeignListener::start(&sb);
    lock_naming(&sb, &theirs.sock, 0o700);
    assert_clients_refuse(&sb, &theirs.sock, "runs as uid 65534");
    // Each client connected (to see whether anyone listens, and who) and sent nothing. The
    // listener takes connections in order: one byte of ours, sent after the clients ended,
    // comes last.
    let mut barrier = std::os::unix::net::UnixStream::connect(&theirs.sock).unwrap();
    std::io::Write::write_all(&mut barrier, b"x").unwrap();
    drop(barrier);
    let got = wait_for("the clients' connections and ours ended", DEADLINE, || {
        let got = theirs.received();
        (got.last() == Some(&1)).then_some(got)
    });
    let clients = &got[..got.len() - 1];
    assert!(clients.len() >= 2, "each client connected: {got:?}");
    assert!(
        clients.iter().all(|&n| n == 0),
        "a client sent bytes: {got:?}"
    );
}

/// `ccide lsp` (the editor's) finds the lock and tries to attach the editor session: it sends
/// the other user's socket nothing either.
#[test]
#[ignore = "needs root, to listen as uid 65534: .ci/run runs it as root"]
fn ccide_lsp_sends_nothing_to_a_control_socket_of_another_user() {
    assert!(is_root(), "only root can run a process as another user");
    let sb = Sandbox::new();
    let theirs = ForeignListener::start(&sb);
    lock_naming(&sb, &theirs.sock, 0o700);
    let f = sb.write("a.txt", "file text\n");
    let mut ed = LspProcess::spawn(
        &mut sb.command(&["lsp", "--no-follow"]),
        sb.root.join("ed.log"),
    );
    ed.request(
        "initialize",
        json!({"processId": std::process::id(), "rootUri": file_uri(&sb.ws()), "capabilities": {}}),
    );
    ed.notify("initialized", json!({}));
    let td = json!({"uri": file_uri(&f), "languageId": "plaintext", "version": 1, "text": "file text\n"});
    ed.notify("textDocument/didOpen", json!({"textDocument": td}));
    let m = ed.recv_where("the refusal", |v| v["method"] == "window/showMessage");
    let said = m["params"]["message"].as_str().unwrap();
    assert!(
        said.contains(&format!(
            "refusing the control socket {}",
            theirs.sock.display()
        )) && said.contains("runs as uid 65534"),
        "{m}"
    );
    let got = wait_for("a connection ended", DEADLINE, || {
        let got = theirs.received();
        (!got.is_empty()).then_some(got)
    });
    assert!(got.iter().all(|n| *n == 0), "bytes sent: {got:?}");
}

// ---------------------------------------------------------------------------------------------
// The server keeps its own directories and control socket to itself.

/// Starts `serve` with each directory (`dir` below the sandbox) given `mode` and owned by `owner`
/// (this user if None); each start must be refused, saying so, and change nothing.
fn refused_directories(cases: &[(&str, Option<u32>, u32, &str)]) {
    for (dir, owner, mode, says) in cases {
        let sb = Sandbox::new();
        let d = sb.root.join(dir);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::set_permissions(&d, std::fs::Permissions::from_mode(*mode)).unwrap();
        if let Some(uid) = owner {
            std::os::unix::fs::chown(&d, Some(*uid), Some(*uid)).unwrap();
        }
        let (code, err) = serve_refused(&sb, &[], &[]);
        assert_eq!(code, Some(1), "{dir} {mode:o} {owner:?}: {err}");
        assert!(err.contains(s(&d)) && err.contains(says), "{dir}: {err}");
        // What to do about it: another directory, named the way that reaches it.
        let advice = if dir.starts_with("state") {
            "; to use another, pass --state-dir DIR"
        } else {
            "; Claude Code looks for IDEs there: point both at a directory of your own with CLAUDE_CONFIG_DIR=DIR"
        };
        assert!(err.contains(advice), "{dir}: {err}");
        assert!(
            list_locks(&sb.config().join("ide")).is_empty(),
            "a lock was written: {err}"
        );
        // The refused directory was not "fixed" behind the user's back either.
        let m = std::fs::metadata(&d).unwrap();
        assert_eq!(
            (m.mode() & 0o777, m.uid()),
            (*mode, owner.unwrap_or(m.uid()))
        );
    }
}

#[test]
fn a_lock_or_state_directory_open_to_others_is_refused() {
    refused_directories(&[
        ("config/ide", None, 0o770, "writable by group or others"),
        ("config/ide", None, 0o707, "writable by group or others"),
        ("config/ide", None, 0o777, "writable by group or others"),
        ("state", None, 0o720, "writable by group or others"),
    ]);
}

#[test]
#[ignore = "needs root, to give a directory to uid 65534: .ci/run runs it as root"]
fn a_lock_or_state_directory_of_another_user_is_refused() {
    assert!(is_root(), "only root can chown a directory to another user");
    refused_directories(&[
        ("config/ide", Some(65534), 0o700, "belongs to uid 65534"),
        ("state", Some(65534), 0o700, "belongs to uid 65534"),
    ]);
}

/// Runs `args` as uid and gid 65534 (nobody), which needs root.
fn as_nobody(args: &[&str], cwd: &Path) -> std::process::Output {
    Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--"])
        .args(args)
        .env_clear()
        .env("HOME", cwd)
        .env("PATH", "/usr/bin:/bin")
        .current_dir(cwd)
        .stdin(Stdio::null())
        .output()
        .expect("setpriv (util-linux) runs")
}

#[test]
#[ignore = "needs root, to connect as uid 65534: .ci/run runs it as root"]
fn the_control_socket_refuses_another_user() {
    assert!(is_root(), "only root can connect as another user");
    let sb = Sandbox::new();
    sb.write("app.py", "x\n");
    let mut srv = sb.serve(&[]);
    // Another user gets ccide and a config dir of its own (theirs: their ccide follows only
    // lock files of theirs) whose lock names this server.
    let theirs = sb.root.join("theirs");
    std::fs::create_dir_all(theirs.join("config/ide")).unwrap();
    let bin = theirs.join("ccide");
    std::fs::copy(BIN, &bin).unwrap();
    let lock = theirs.join(format!("config/ide/{}.lock", srv.port));
    std::fs::write(&lock, std::fs::read(&srv.lock_path).unwrap()).unwrap();
    for p in [
        theirs.clone(),
        theirs.join("config"),
        theirs.join("config/ide"),
    ] {
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
        std::os::unix::fs::chown(&p, Some(65534), Some(65534)).unwrap();
    }
    std::os::unix::fs::chown(&lock, Some(65534), Some(65534)).unwrap();
    std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
    let port = srv.port.to_string();
    let config = theirs.join("config");
    let args = [
        s(&bin),
        "status",
        "--json",
        "--port",
        &port,
        "--config-dir",
        s(&config),
    ];
    let o = as_nobody(&args, &theirs);
    // As it is, the 0700 state directory already keeps them out.
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stdout(&o).is_empty(),
        "another user got an answer: {}",
        stdout(&o)
    );
    assert!(stderr(&o).contains("Permission denied"), "{}", stderr(&o));
    // With the directory and the socket opened up, the peer check alone refuses them.
    let sock = sb.state().join("control.sock");
    std::fs::set_permissions(sb.state(), std::fs::Permissions::from_mode(0o711)).unwrap();
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o777)).unwrap();
    let o = as_nobody(&args, &theirs);
    std::fs::set_permissions(sb.state(), std::fs::Permissions::from_mode(0o700)).unwrap();
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stdout(&o).is_empty(),
        "another user got an answer: {}",
        stdout(&o)
    );
    assert!(!stderr(&o).contains("Permission denied"), "{}", stderr(&o));
    wait_for("the refusal in the log", DEADLINE, || {
        srv.log()
            .contains("control socket: refused a connection from uid 65534")
            .then_some(())
    });
    // The owner still gets in.
    assert_eq!(control(&sb, json!({"cmd": "status"}))["ok"], true);
    assert_alive(&mut srv);
}
