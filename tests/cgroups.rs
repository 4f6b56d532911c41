//! The memory cgroup of a server `ccide lsp-bridge` starts: out of the CLI's memory-capped tool
//! cgroup, in the CLI's own (ccide-protocol(7) §13.5), in a real cgroup hierarchy.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::util::{DEADLINE, LspProcess, Sandbox, list_locks, process_alive, wait_for};
use serde_json::{Value, json};

/// The memory cgroup directory of a `/proc/PID/cgroup` text, as Claude Code finds it: the v1
/// line with the memory controller, else the v2 line.
fn memory_cgroup(proc_cgroup: &str) -> PathBuf {
    let mut v2 = None;
    for line in proc_cgroup.lines() {
        let parts: Vec<&str> = line.splitn(3, ':').collect();
        if parts[1].split(',').any(|c| c == "memory") {
            return Path::new("/sys/fs/cgroup/memory").join(parts[2].trim_start_matches('/'));
        }
        if parts[0] == "0" && parts[1].is_empty() {
            v2 = Some(Path::new("/sys/fs/cgroup").join(parts[2].trim_start_matches('/')));
        }
    }
    v2.expect("a memory cgroup in /proc/self/cgroup")
}

fn cgroup_of(pid: u64) -> PathBuf {
    memory_cgroup(&std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap())
}

/// Cgroups made for a test, below the test's own: the CLI's and its tool cgroup beside it
/// (as 2.1.332 lays them out under cgroup v2; under v1 the tool cgroup is inside the CLI's,
/// which makes no difference to the move). Dropped: the servers started are killed and the
/// cgroups removed.
struct Cgroups {
    base: PathBuf,
    servers: Vec<u64>,
}

impl Cgroups {
    fn new() -> Cgroups {
        let own = cgroup_of(std::process::id().into());
        static N: AtomicU32 = AtomicU32::new(0);
        let n = N.fetch_add(1, Ordering::Relaxed);
        let base = own.join(format!("ccide-test-{}-{n}", std::process::id()));
        for d in ["", "cli", "claude-code-bash"] {
            std::fs::create_dir_all(base.join(d)).unwrap_or_else(|e| {
                panic!(
                    "cannot create the cgroup {} (needs root and a writable memory cgroup hierarchy): {e}",
                    base.join(d).display()
                )
            });
        }
        Cgroups {
            base,
            servers: Vec::new(),
        }
    }
    fn cli(&self) -> PathBuf {
        self.base.join("cli")
    }
    fn tool(&self) -> PathBuf {
        self.base.join("claude-code-bash")
    }
}

impl Drop for Cgroups {
    fn drop(&mut self) {
        for &pid in &self.servers {
            let _ = Command::new("/bin/kill")
                .args(["-9", &pid.to_string()])
                .status();
        }
        for d in [self.cli(), self.tool(), self.base.clone()] {
            // A cgroup is removed once its last process is gone.
            let end = std::time::Instant::now() + DEADLINE;
            while std::fs::remove_dir(&d).is_err() && std::time::Instant::now() < end {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
        }
    }
}

/// A bridge started as a CLI in the cgroup `cli` starts capped plugin servers when there is no
/// server for the workspace; the bridge, once its server answered `initialize`, the server's
/// pid.
fn start_capped_bridge(sb: &Sandbox, cgroups: &mut Cgroups, cli: &Path) -> (LspProcess, u64) {
    // The CLI ($1: its cgroup) starts the plugin's server in its tool cgroup ($2), as 2.1.332
    // does when it caps language servers (it spawns it there; a subshell that moves itself
    // there and execs does the same).
    let fake_cli = sb.script(
        "fake-cli",
        "echo 0 > \"$1/cgroup.procs\"\n\
         ( echo 0 > \"$2/cgroup.procs\" && exec \"$3\" lsp-bridge --extensions .py )\n\
         status=$?\n\
         exit $status",
    );
    let template = sb.command(&[]);
    let mut cmd = Command::new(&fake_cli);
    cmd.env_clear()
        .envs(template.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .current_dir(sb.ws())
        .arg(cli)
        .arg(cgroups.tool())
        .arg(crate::util::BIN);
    let mut bridge = LspProcess::spawn(&mut cmd, sb.root.join("bridge.log"));
    let r = bridge.request("initialize", json!({}));
    assert_eq!(r["result"]["capabilities"]["textDocumentSync"], 1, "{r}");
    let server = wait_for("the server's lock file", DEADLINE, || {
        list_locks(&sb.config().join("ide"))
            .iter()
            .filter_map(|p| std::fs::read(p).ok())
            .filter_map(|b| serde_json::from_slice::<Value>(&b).ok())
            .find_map(|v| v["pid"].as_u64().filter(|p| process_alive(*p)))
    });
    cgroups.servers.push(server);
    let bridge_pid = std::fs::read_to_string(format!("/proc/{}/task/{0}/children", bridge.pid()))
        .unwrap()
        .split_whitespace()
        .next()
        .expect("the bridge, the fake CLI's child")
        .parse()
        .unwrap();
    assert_eq!(
        cgroup_of(bridge_pid),
        cgroups.tool(),
        "the bridge is capped"
    );
    (bridge, server)
}

/// The server's log, in the sandbox's only state directory.
fn serve_log(sb: &Sandbox) -> String {
    let states = sb.home().join(".local/state/ccide");
    let state = std::fs::read_dir(&states)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    std::fs::read_to_string(state.join("serve.log")).unwrap()
}

#[test]
#[ignore = "needs root and a writable memory cgroup hierarchy"]
fn a_server_the_bridge_starts_leaves_the_cli_tool_cgroup_for_the_cli_cgroup() {
    let sb = Sandbox::without_system_tools();
    let mut cgroups = Cgroups::new();
    let (mut bridge, server) = {
        let cli = cgroups.cli();
        start_capped_bridge(&sb, &mut cgroups, &cli)
    };
    assert_eq!(cgroup_of(server), cgroups.cli(), "the server is not capped");
    bridge.close_stdin();
    assert_eq!(
        bridge.wait_exit("the bridge to exit"),
        Some(0),
        "{}",
        bridge.stderr()
    );
    assert_eq!(bridge.stderr(), "");
    assert!(!serve_log(&sb).contains("stays in"), "{}", serve_log(&sb));
}

#[test]
#[ignore = "needs root and a writable memory cgroup hierarchy"]
fn a_server_started_by_a_cli_inside_another_cap_stays_and_the_bridge_says_why() {
    let sb = Sandbox::without_system_tools();
    let mut cgroups = Cgroups::new();
    // A CLI run from another session's Bash: in the tool cgroup itself.
    let (mut bridge, server) = {
        let tool = cgroups.tool();
        start_capped_bridge(&sb, &mut cgroups, &tool)
    };
    assert_eq!(cgroup_of(server), cgroups.tool());
    let said = format!(
        "ccide lsp-bridge: ccide serve (pid {server}) stays in Claude Code's memory-capped cgroup {}: Claude Code itself runs in it, so there is no cgroup of its own to move the server to; its language servers count against this Claude Code session's memory cap",
        cgroups.tool().display()
    );
    assert!(serve_log(&sb).contains(&said), "{}", serve_log(&sb));
    bridge.close_stdin();
    assert_eq!(bridge.wait_exit("the bridge to exit"), Some(0));
    assert!(bridge.stderr().starts_with(&said), "{}", bridge.stderr());
    assert!(
        bridge
            .stderr()
            .contains("as the systemd user unit `ccide unit` writes"),
        "{}",
        bridge.stderr()
    );
}
