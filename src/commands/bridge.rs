//! `ccide lsp-bridge`: the command ccide's plugin for Claude Code names for its language
//! servers (ccide-protocol(7) §13). The CLI starts one per plugin entry and session and speaks
//! LSP on its stdio; the bridge hands that stream to the `ccide serve` of the CLI's project,
//! over the control socket (`lsp`, §9.2), where the warm language servers are, and from then
//! on only copies bytes both ways. Of the stream it reads only the first message (the
//! `initialize`, for the client's name in serve's log), so it starts in milliseconds and holds
//! a few MB.
//!
//! With no server for the project it starts one, detached (a session of its own, its log in
//! the state directory): the language servers it keeps warm are there for the next session
//! too, and a session's end must not take them from the other sessions sharing them.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::cli::{Args, CONFIG_DIR, Command, EXIT_OK, Fail, Outcome, flag};
use crate::control::protocol::LspClient;
use crate::control::{Control, FindError};
use crate::lockfile::LockEntry;
use crate::lsp::framing::read_framed;

pub const COMMAND: Command = Command {
    name: "lsp-bridge",
    usage: "ccide lsp-bridge [OPTIONS]",
    about: "Claude Code's language server: joins its LSP stdio to the project's ccide serve.",
    details: "The command of ccide's plugin for Claude Code (ccide plugin). The CLI starts it in its\nproject directory ($CLAUDE_PROJECT_DIR, else the current one) and speaks LSP on its\nstandard streams. It connects to the server whose workspace holds that directory, or\nstarts `ccide serve --workspace DIR` detached (it keeps running for later sessions; its\nlog is serve.log in its state directory), then copies bytes both ways. Exits 0 when its\ninput ends, 1 when the server ends the connection.",

    flags: &[
        flag(
            "--extensions",
            Some("LIST"),
            None,
            "The file extensions its plugin entry maps, comma-separated (.ts,.tsx): serve answers initialize for the server that covers them.",
        ),
        flag(
            "--no-diagnostics",
            None,
            None,
            "Ask serve not to send textDocument/publishDiagnostics (the CLI gets diagnostics from getDiagnostics).",
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
        .map(str::trim)
        .filter(|e| !e.is_empty())
        .map(String::from)
        .collect();
    let diagnostics = !args.switch("--no-diagnostics")?;
    let root = project_root()?;
    // The same reader as `ccide lsp`'s: one copy of the framing code in the binary.
    let mut input = std::io::BufReader::new(std::io::stdin().lock());
    // The client speaks first; before it does there is nothing to forward.
    let first = match read_framed(&mut input) {
        Ok(Some(body)) => body,
        Ok(None) => return Ok(EXIT_OK),
        Err(e) => return Err(Fail::Failed(format!("reading the LSP client: {e}"))),
    };
    let lock = find_or_serve(&config, &root)?;
    let hello = LspClient {
        root: root.to_string_lossy().into_owned(),
        client: client_name(&first),
        pid: Some(std::process::id().into()),
        extensions,
        diagnostics,
    };
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
    let header = format!("Content-Length: {}\r\n\r\n", first.len());
    to_server
        .write_all(header.as_bytes())
        .and_then(|_| to_server.write_all(&first))
        .map_err(io)?;
    pump(&mut input, &mut to_server);
    // The client is gone or closed its side: serve sees the end of stream and lets go of it;
    // nobody reads what it might still send.
    Ok(EXIT_OK)
}

/// Copies until either end fails or ends; every chunk is flushed at once (stdout buffers lines).
fn pump(from: &mut dyn Read, to: &mut dyn Write) {
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
    match std::env::var_os("CLAUDE_PROJECT_DIR").filter(|d| !d.is_empty()) {
        Some(d) => std::fs::canonicalize(&d).map_err(|e| {
            Fail::Failed(format!(
                "cannot use CLAUDE_PROJECT_DIR={}: {e}",
                Path::new(&d).display()
            ))
        }),
        None => Ok(crate::control::current_dir()?),
    }
}

/// `clientInfo` of an `initialize`, as "NAME VERSION" (Claude Code sends it since 2.1.98).
fn client_name(first: &[u8]) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(first).ok()?;
    let info = &v["params"]["clientInfo"];
    let name = info["name"].as_str()?;
    Some(match info["version"].as_str() {
        Some(version) => format!("{name} {version}"),
        None => name.to_string(),
    })
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
/// other exit, and both bridges find the one that runs.
fn serve_detached(config: &Path, root: &Path) -> Result<LockEntry, Fail> {
    let exe = std::env::current_exe()
        .map_err(|e| Fail::Failed(format!("cannot find ccide's own executable: {e}")))?;
    let state_flag = std::env::var("CCIDE_STATE_DIR")
        .ok()
        .filter(|d| !d.is_empty());
    let state = crate::lockfile::state_dir(state_flag.as_deref(), &[root.to_path_buf()])?;
    crate::files::private_dir(&state, "state directory")?;
    let log_path = state.join("serve.log");
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|e| Fail::Failed(format!("cannot open {}: {e}", log_path.display())))?;
    let mut cmd = std::process::Command::new(&exe);
    cmd.arg("serve")
        .arg("--workspace")
        .arg(root)
        .arg("--config-dir")
        .arg(config)
        .current_dir(root)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(log);
    crate::sys::new_session(&mut cmd);
    let mut child = cmd
        .spawn()
        .map_err(|e| Fail::Failed(format!("cannot start {} serve: {e}", exe.display())))?;
    let mut deadline = Instant::now() + START_LIMIT;
    loop {
        match crate::control::find_server(config, None, root) {
            Ok(lock) => {
                // Ours lost the start to another bridge's and ends at once: reap it.
                while lock.pid != i64::from(child.id())
                    && child.try_wait().is_ok_and(|s| s.is_none())
                    && Instant::now() < deadline
                {
                    std::thread::sleep(Duration::from_millis(10));
                }
                return Ok(lock);
            }
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
        if child.try_wait().is_ok_and(|s| s.is_some()) {
            deadline = deadline.min(Instant::now() + Duration::from_secs(2));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::client_name;

    #[test]
    fn the_client_is_named_by_its_initialize() {
        let init = br#"{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"processId":957,"clientInfo":{"name":"Claude Code","version":"2.1.330"}}}"#;
        assert_eq!(client_name(init), Some("Claude Code 2.1.330".into()));
        let no_version = br#"{"method":"initialize","params":{"clientInfo":{"name":"Neovim"}}}"#;
        assert_eq!(client_name(no_version), Some("Neovim".into()));
        assert_eq!(client_name(br#"{"method":"initialize","params":{}}"#), None);
        assert_eq!(client_name(b"not json"), None);
    }
}
