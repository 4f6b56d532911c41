//! `ccide lsp-bridge`: the command ccide's plugin for Claude Code names for its language
//! servers (ccide-protocol(7) §13). The CLI starts one per plugin entry and session and speaks
//! LSP on its stdio; the bridge hands that stream to the `ccide serve` of the CLI's project,
//! over the control socket (`lsp`, §9.2), where the warm language servers are, and from then
//! on only copies bytes both ways, never reading them: it starts in milliseconds and holds a
//! few MB.
//!
//! With no server for the project it starts one, detached (a session of its own, its log in
//! the state directory): the language servers it keeps warm are there for the next session
//! too, and a session's end must not take them from the other sessions sharing them. Nor
//! may one session's memory cap: a server started from the CLI's memory-capped tool cgroup
//! is moved to the CLI's own cgroup, as the CLI moves a process it releases (§13.5).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::cli::{Args, CONFIG_DIR, Command, EXIT_OK, Fail, Outcome, flag};
use crate::control::protocol::LspClient;
use crate::control::{Control, FindError};
use crate::lockfile::LockEntry;
use crate::proc::ToolCgroupExit;

pub const COMMAND: Command = Command {
    name: "lsp-bridge",
    usage: "ccide lsp-bridge [OPTIONS]",
    about: "The language server of ccide's plugin for Claude Code: a bridge to ccide serve.",
    details: "Claude Code starts it in its project; it joins its stdio to the serve of that folder (or one\nit starts, detached) and copies bytes both ways. See ccide(1).",

    flags: &[
        flag(
            "--extensions",
            Some("LIST"),
            None,
            "The extensions its plugin entry maps (.ts,.tsx): serve answers for their server.",
        ),
        flag(
            "--client",
            Some("NAME"),
            None,
            "The client's name and version, for serve's log.",
        ),
        flag(
            "--no-diagnostics",
            None,
            None,
            "Ask serve for no publishDiagnostics.",
        ),
        CONFIG_DIR,
    ],
    run,
    passthrough: false,
};

/// How long a server started here has to announce itself.
const START_LIMIT: Duration = Duration::from_secs(15);

pub fn run(args: &Args) -> Outcome {
    if let Some(extra) = args.operands.first() {
        return Err(Fail::Usage(format!("unexpected argument '{extra}'")));
    }
    let config = crate::lockfile::config_dir(args.value("--config-dir").as_deref())?;
    let extensions = args
        .value("--extensions")
        .unwrap_or_default()
        .split(',')
        .filter(|e| !e.is_empty())
        .map(String::from)
        .collect();
    let root = project_root()?;
    let hello = LspClient {
        root: root.to_string_lossy().into_owned(),
        client: args.value("--client"),
        pid: Some(std::process::id().into()),
        extensions,
        diagnostics: !args.switch("--no-diagnostics")?,
    };
    let lock = find_or_serve(&config, &root)?;
    let (socket, early) = Control::connect(lock)?.into_lsp(hello)?;
    let io = |e: std::io::Error| Fail::Failed(format!("the ccide server's connection: {e}"));
    let mut to_server = socket.try_clone().map_err(io)?;
    let mut from_server = socket;
    // Server to client, on its own thread; its end (serve stopped or dropped us) ends the
    // bridge with status 1, which the CLI takes for a crash and restarts on its next request.
    crate::proc::spawn_thread("to-client", move || {
        let mut out = std::io::stdout().lock();
        if out.write_all(&early).is_ok() {
            pump(&mut from_server, &mut out);
        }
        eprintln!("ccide lsp-bridge: the ccide server ended the connection");
        std::process::exit(1);
    })
    .map_err(io)?;
    pump(&mut std::io::stdin().lock(), &mut to_server);
    // The client is gone or closed its side: serve sees the end of stream and lets go of it;
    // nobody reads what it might still send.
    Ok(EXIT_OK)
}

/// Copies until either end fails or ends; every chunk is flushed at once (stdout buffers lines).
fn pump(from: &mut impl Read, to: &mut impl Write) {
    let mut buf = vec![0; 64 << 10];
    loop {
        match from.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                if to.write_all(&buf[..n]).and_then(|_| to.flush()).is_err() {
                    return;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// The CLI's project: `$CLAUDE_PROJECT_DIR`, which it sets for the servers it starts, else
/// the current directory (its cwd is the project too); physical, as lock files name folders.
fn project_root() -> Result<PathBuf, Fail> {
    Ok(
        match std::env::var_os("CLAUDE_PROJECT_DIR").filter(|d| !d.is_empty()) {
            Some(d) => crate::files::canonical_dir(Path::new(&d))?,
            None => crate::control::current_dir()?,
        },
    )
}

/// The server whose workspace holds `root`, else one started here.
fn find_or_serve(config: &Path, root: &Path) -> Result<LockEntry, Fail> {
    match crate::control::find_server(config, None, root) {
        Ok(lock) => Ok(lock),
        Err(FindError::Several(m)) => Err(Fail::Failed(m)),
        Err(FindError::None(_)) => serve_detached(config, root),
    }
}

/// Starts `ccide serve --workspace ROOT` in a session of its own and waits for its lock file.
/// Two bridges starting at once start two; the state directory's lock lets one run and the
/// other exit, and both bridges find the one that runs. Never for `/` or the home folder (a
/// session started there would hold every project below), nor beside a server of a folder
/// inside ROOT (ccide-protocol(7) §1.3): those are refused with what to do.
fn serve_detached(config: &Path, root: &Path) -> Result<LockEntry, Fail> {
    if crate::workspaces::too_wide(root) {
        return Err(Fail::Failed(format!(
            "no ccide server serves {0}, and none is started for it: it would hold every project below it. Start Claude Code in your project's folder, or serve this one yourself (ccide serve --workspace {0}).",
            root.display()
        )));
    }
    if let Err(overlap) = crate::control::refuse_overlaps(config, &[root.to_path_buf()], None) {
        // Another bridge's server for this very folder may have appeared meanwhile.
        return crate::control::find_server(config, None, root).map_err(|_| overlap.into());
    }
    let state_flag = std::env::var("CCIDE_STATE_DIR")
        .ok()
        .filter(|d| !d.is_empty());
    let state = crate::lockfile::state_dir(state_flag.as_deref(), &[root.to_path_buf()])?;
    crate::files::private_dir(&state, "state directory")?;
    let log_path = state.join("serve.log");
    let failed = |e: std::io::Error| {
        Fail::Failed(format!(
            "cannot start ccide serve for {}: {e}",
            root.display()
        ))
    };
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(failed)?;
    let mut cmd = std::process::Command::new(std::env::current_exe().map_err(failed)?);
    cmd.arg("serve")
        .arg("--workspace")
        .arg(root)
        .arg("--config-dir")
        .arg(config)
        .current_dir(root)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(log.try_clone().map_err(failed)?);
    crate::sys::new_session(&mut cmd);
    let exit = tool_cgroup_exit();
    if let ToolCgroupExit::To(procs) = &exit {
        crate::sys::join_cgroup_in_child(&mut cmd, procs);
    }
    let mut child = cmd.spawn().map_err(failed)?;
    if let Some(problem) = still_capped(&exit, child.id()) {
        let _ = writeln!(&log, "ccide lsp-bridge: {problem}");
        eprintln!("ccide lsp-bridge: {problem}");
    }
    // Reaped whenever it ends: at once when it lost the start to another bridge's, else when
    // it stops, however long this bridge lives.
    let ended = Arc::new(AtomicBool::new(false));
    let e = ended.clone();
    crate::proc::spawn_thread("serve-reaper", move || {
        let _ = child.wait();
        e.store(true, Ordering::SeqCst);
    })
    .map_err(failed)?;
    let mut deadline = Instant::now() + START_LIMIT;
    loop {
        match crate::control::find_server(config, None, root) {
            Ok(lock) => return Ok(lock),
            Err(FindError::Several(m)) => return Err(Fail::Failed(m)),
            Err(FindError::None(_)) if Instant::now() > deadline => {
                return Err(Fail::Failed(format!(
                    "the ccide server started for {} did not announce itself; see {}",
                    root.display(),
                    log_path.display()
                )));
            }
            Err(FindError::None(_)) => std::thread::sleep(Duration::from_millis(10)),
        }
        // Ended without a lock file: another bridge's may yet show, not after long.
        if ended.load(Ordering::SeqCst) {
            deadline = deadline.min(Instant::now() + Duration::from_secs(2));
        }
    }
}

/// Where the server this bridge starts goes to leave the CLI's tool cgroup, from this
/// process's cgroup and its parent's (the CLI that started it).
fn tool_cgroup_exit() -> ToolCgroupExit {
    let read =
        |pid: &str| std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
    crate::proc::tool_cgroup_exit(
        &read("self"),
        &read(&std::os::unix::process::parent_id().to_string()),
    )
}

/// What to tell the user when the started server `pid` is still in the CLI's tool cgroup: the
/// move failed (tried again here to learn why) or there was nowhere to go.
fn still_capped(exit: &ToolCgroupExit, pid: u32) -> Option<String> {
    let consequence = "its language servers count against this Claude Code session's memory cap, and the kernel may kill them (for every session) when the session exceeds it. Start ccide serve outside the session instead: as the systemd user unit `ccide unit` writes, or from a terminal, before the session starts (see ccide(1), lsp-bridge)";
    match exit {
        ToolCgroupExit::NotCapped => None,
        ToolCgroupExit::Nowhere(dir) => Some(format!(
            "ccide serve (pid {pid}) stays in Claude Code's memory-capped cgroup {}: Claude Code itself runs in it, so there is no cgroup of its own to move the server to; {consequence}",
            dir.display()
        )),
        ToolCgroupExit::To(procs) => {
            let now = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
            let dir = crate::proc::memory_cgroup_dir(&now)?;
            if !crate::proc::in_cli_tool_cgroup(&dir) {
                return None;
            }
            let why = match std::fs::write(procs, pid.to_string()) {
                Ok(()) => return None,
                Err(e) => e,
            };
            Some(format!(
                "ccide serve (pid {pid}) stays in Claude Code's memory-capped cgroup {}: cannot move it to {}: {why}; {consequence}",
                dir.display(),
                procs.display()
            ))
        }
    }
}
