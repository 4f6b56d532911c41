//! ccide's plugin for Claude Code (ccide-protocol(7) §13): `ccide lsp-bridge` joining an LSP
//! client's stdio to serve's control socket (`lsp`, §9.2), `ccide claude` passing the plugin
//! to a CLI that takes it, and `ccide plugin install`, each against the real binary, with a
//! stand-in for the CLI where one is needed.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::util::{
    BIN, DEADLINE, LspProcess, Sandbox, list_locks, lsp_frame, process_alive, read_lsp_frame, s,
    stderr, stdout, wait_for,
};
use serde_json::{Value, json};

/// `ccide lsp-bridge ARGS` started in `dir` of the sandbox's workspace.
fn bridge(sb: &Sandbox, dir: &str, args: &[&str]) -> LspProcess {
    let mut all = vec!["lsp-bridge"];
    all.extend_from_slice(args);
    let mut cmd = sb.command(&all);
    cmd.current_dir(sb.ws().join(dir));
    let n = std::fs::read_dir(sb.root.path()).unwrap().count();
    LspProcess::spawn(&mut cmd, sb.root.join(format!("bridge-{n}.log")))
}

/// initialize as Claude Code 2.1.330 sends it (the parts that matter here).
fn initialize(lsp: &mut LspProcess, root: &Path) -> Value {
    lsp.request(
        "initialize",
        json!({
            "processId": std::process::id(),
            "clientInfo": {"name": "Claude Code", "version": "2.1.330"},
            "rootUri": format!("file://{}", root.display()),
            "capabilities": {"general": {"positionEncodings": ["utf-16"]}},
        }),
    )
}

/// The answers of a serve without language servers (its sandbox is `without_system_tools`, so
/// none is on its PATH): an initialize that offers nothing but document sync, and requests
/// refused by name.
fn assert_answers_without_language_servers(lsp: &mut LspProcess, root: &Path) {
    assert_eq!(
        initialize(lsp, root),
        json!({"jsonrpc": "2.0", "id": 0, "result": {"capabilities": {"textDocumentSync": 1}}})
    );
    lsp.notify("initialized", json!({}));
    let file = root.join("x.ts");
    let hover = lsp.request(
        "textDocument/hover",
        json!({"textDocument": {"uri": format!("file://{}", file.display())},
               "position": {"line": 0, "character": 0}}),
    );
    assert_eq!(hover["id"], 1);
    assert_eq!(hover["error"]["code"], -32803, "{hover}");
    let why = format!(
        "no language server of ccide serve answers for {}",
        file.display()
    );
    assert!(
        hover["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with(&why),
        "{hover}"
    );
    assert_eq!(
        lsp.request("shutdown", Value::Null),
        json!({"jsonrpc": "2.0", "id": 2, "result": null})
    );
}

/// The pid of the live ccide server whose lock file is in the sandbox's config directory.
fn server_pids(sb: &Sandbox) -> Vec<u64> {
    list_locks(&sb.config().join("ide"))
        .iter()
        .filter_map(|p| std::fs::read(p).ok())
        .filter_map(|b| serde_json::from_slice::<Value>(&b).ok())
        .filter_map(|v| v["pid"].as_u64())
        .filter(|pid| process_alive(*pid))
        .collect()
}

/// Kills (SIGTERM, then SIGKILL) the servers bridges started in the sandbox, when the test
/// ends, passed or failed: made before the first bridge, it finds them when it is dropped.
struct Detached<'a>(&'a Sandbox);

impl Drop for Detached<'_> {
    fn drop(&mut self) {
        for pid in server_pids(self.0) {
            let _ = Command::new("kill").arg(pid.to_string()).status();
            let end = std::time::Instant::now() + DEADLINE;
            while process_alive(pid) && std::time::Instant::now() < end {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            let _ = Command::new("kill").args(["-9", &pid.to_string()]).status();
        }
    }
}

#[test]
fn the_bridge_hands_the_client_to_the_server_of_its_workspace_from_a_subfolder() {
    let sb = Sandbox::without_system_tools();
    std::fs::create_dir_all(sb.ws().join("sub/deeper")).unwrap();
    let srv = sb.serve(&[]);
    let mut lsp = bridge(
        &sb,
        "sub/deeper",
        &[
            "--client",
            "Claude Code 2.1.330",
            "--extensions",
            ".ts,.tsx",
            "--no-diagnostics",
        ],
    );
    assert_answers_without_language_servers(&mut lsp, &sb.ws());
    let pid = lsp.pid();
    let said = format!(
        "LSP client Claude Code 2.1.330 (pid {pid}) connected for {} (extensions: .ts .tsx; diagnostics off)",
        sb.ws().join("sub/deeper").display()
    );
    wait_for("the handshake in serve's log", DEADLINE, || {
        srv.log().contains(&said).then_some(())
    });
    // The client's end is the bridge's: it exits 0, and serve lets go of the client.
    lsp.close_stdin();
    assert_eq!(
        lsp.wait_exit("the bridge to exit"),
        Some(0),
        "{}",
        lsp.stderr()
    );
    let gone = format!("LSP client Claude Code 2.1.330 (pid {pid}) disconnected");
    wait_for("the client's end in serve's log", DEADLINE, || {
        srv.log().contains(&gone).then_some(())
    });
    assert_eq!(
        server_pids(&sb),
        [srv.pid() as u64],
        "no other server was started"
    );
}

#[test]
fn the_bridge_takes_its_root_from_claude_project_dir() {
    let sb = Sandbox::without_system_tools();
    std::fs::create_dir_all(sb.ws().join("proj")).unwrap();
    let srv = sb.serve(&[]);
    let mut cmd = sb.command(&["lsp-bridge"]);
    cmd.current_dir(sb.root.path())
        .env("CLAUDE_PROJECT_DIR", sb.ws().join("proj"));
    let mut lsp = LspProcess::spawn(&mut cmd, sb.root.join("bridge.log"));
    assert_answers_without_language_servers(&mut lsp, &sb.ws());
    let said = format!(
        "LSP client an LSP client (pid {}) connected for {} (extensions: ; diagnostics on)",
        lsp.pid(),
        sb.ws().join("proj").display()
    );
    wait_for("the handshake in serve's log", DEADLINE, || {
        srv.log().contains(&said).then_some(())
    });
}

#[test]
fn the_bridge_exits_with_1_when_the_server_goes_away() {
    let sb = Sandbox::new();
    let mut srv = sb.serve(&[]);
    let mut lsp = bridge(&sb, "", &[]);
    assert_eq!(
        initialize(&mut lsp, &sb.ws())["result"]["capabilities"]["textDocumentSync"],
        1
    );
    assert_eq!(srv.stop_with("TERM"), Some(0));
    assert_eq!(lsp.wait_exit("the bridge to exit"), Some(1));
    assert_eq!(
        lsp.stderr(),
        "ccide lsp-bridge: the ccide server ended the connection\n"
    );
}

#[test]
fn sigterm_ends_the_bridge_and_the_server_stays() {
    use std::os::unix::process::ExitStatusExt;
    let sb = Sandbox::new();
    let srv = sb.serve(&[]);
    let mut lsp = bridge(&sb, "", &[]);
    initialize(&mut lsp, &sb.ws());
    // The CLI's last word to a server that did not exit after `exit` (ccide-protocol(7) §13).
    let ok = Command::new("kill")
        .arg(lsp.pid().to_string())
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let child = &mut lsp.child;
    let status = wait_for("the bridge to end", DEADLINE, || child.try_wait().unwrap());
    assert_eq!(status.signal(), Some(15), "{status}");
    wait_for("serve to let go of the client", DEADLINE, || {
        srv.log().contains("disconnected").then_some(())
    });
    assert!(process_alive(srv.pid() as u64));
    assert_eq!(server_pids(&sb), [srv.pid() as u64]);
}

#[test]
fn without_a_server_two_bridges_start_one_detached_that_outlives_them() {
    let sb = Sandbox::without_system_tools();
    let _servers = Detached(&sb);
    // Two sessions' first LSP calls at once, with no server for the workspace.
    let mut a = bridge(&sb, "", &["--extensions", ".py"]);
    let mut b = bridge(&sb, "", &["--extensions", ".py"]);
    let ids = [
        a.send_request("initialize", json!({})),
        b.send_request("initialize", json!({})),
    ];
    let answers = [
        a.recv_where("a's initialize", |v| v["id"] == ids[0]),
        b.recv_where("b's initialize", |v| v["id"] == ids[1]),
    ];
    let pid = wait_for("one server", DEADLINE, || match server_pids(&sb)[..] {
        [pid] => Some(pid),
        _ => None,
    });
    for r in answers {
        assert_eq!(r["result"]["capabilities"]["textDocumentSync"], 1, "{r}");
    }
    // Detached: a session of its own, not the bridge's child, its log in its state directory.
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let fields: Vec<&str> = stat[stat.rfind(')').unwrap() + 2..].split(' ').collect();
    assert_eq!(fields[3], pid.to_string(), "its own session: {stat}");
    for lsp in [&mut a, &mut b] {
        lsp.close_stdin();
        assert_eq!(
            lsp.wait_exit("a bridge to exit"),
            Some(0),
            "{}",
            lsp.stderr()
        );
    }
    assert!(process_alive(pid), "the server outlives the sessions");
    let states = sb.home().join(".local/state/ccide");
    let state = std::fs::read_dir(&states)
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let log = std::fs::read_to_string(state.join("serve.log")).unwrap();
    assert!(
        log.contains(&format!("for {} (lock file", s(&sb.ws()))),
        "{log}"
    );
    // The next session's bridge finds it.
    let mut c = bridge(&sb, "", &[]);
    assert_answers_without_language_servers(&mut c, &sb.ws());
    assert_eq!(server_pids(&sb), [pid]);
}

#[test]
fn a_bridge_whose_client_ends_at_once_exits_0() {
    let sb = Sandbox::new();
    let srv = sb.serve(&[]);
    let mut lsp = bridge(&sb, "", &[]);
    lsp.close_stdin();
    assert_eq!(
        lsp.wait_exit("the bridge to exit"),
        Some(0),
        "{}",
        lsp.stderr()
    );
    wait_for("serve to let go of the client", DEADLINE, || {
        srv.log().contains("disconnected").then_some(())
    });
}

/// The wire contract itself, without the bridge: one `lsp` line, its answer, then framed LSP.
#[test]
fn the_lsp_control_command_turns_the_connection_into_framed_lsp() {
    let sb = Sandbox::new();
    let srv = sb.serve(&[]);
    let path = srv.lock["ccide"]["control"].as_str().unwrap();
    let mut sock = UnixStream::connect(path).unwrap();
    sock.set_read_timeout(Some(DEADLINE)).unwrap();
    let hello = json!({"id": 7, "cmd": "lsp", "root": s(&sb.ws()), "client": "test 1",
                       "pid": 4242, "extensions": [".rs"], "diagnostics": false});
    sock.write_all(format!("{hello}\n").as_bytes()).unwrap();
    sock.write_all(&lsp_frame(
        &json!({"jsonrpc": "2.0", "id": "a", "method": "initialize", "params": {}}),
    ))
    .unwrap();
    let mut r = BufReader::new(sock.try_clone().unwrap());
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert_eq!(line, "{\"id\":7,\"ok\":true}\n");
    assert_eq!(
        read_lsp_frame(&mut r).unwrap(),
        json!({"jsonrpc": "2.0", "id": "a", "result": {"capabilities": {"textDocumentSync": 1}}})
    );
    sock.write_all(&lsp_frame(&json!({"jsonrpc": "2.0", "method": "exit"})))
        .unwrap();
    assert!(read_lsp_frame(&mut r).is_none(), "exit ends the connection");
    assert!(
        srv.log()
            .contains("LSP client test 1 (pid 4242) connected for")
    );
    // Refused: a root outside the workspace folders, or not absolute; the line is answered
    // and the connection stays a control connection.
    let mut sock = UnixStream::connect(path).unwrap();
    let mut r = BufReader::new(sock.try_clone().unwrap());
    let why = "is not an absolute path in this server's workspace folders";
    for root in [s(sb.home().as_path()).to_string(), "ws".to_string()] {
        let req = json!({"id": 8, "cmd": "lsp", "root": root});
        sock.write_all(format!("{req}\n").as_bytes()).unwrap();
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        let v: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(
            (v["id"].clone(), v["ok"].clone()),
            (json!(8), json!(false)),
            "{v}"
        );
        assert!(v["error"].as_str().unwrap().contains(why), "{v}");
    }
    sock.write_all(b"{\"id\":9,\"cmd\":\"status\"}\n").unwrap();
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert!(line.starts_with("{\"id\":9,\"ok\":true"), "{line}");
}

// ---------------------------------------------------------------------------------------------
// ccide claude and ccide plugin, with a stand-in for the CLI

/// A stand-in for `claude` that says it is `version`, records every run's arguments (one line
/// per run, arguments separated by tabs) and, when given --plugin-dir=DIR, copies the
/// manifest it would load (with the shell's builtins: a sandbox may have no `cp`).
fn fake_claude(sb: &Sandbox, version: &str) -> PathBuf {
    let runs = sb.root.join("claude-runs.txt");
    let body = format!(
        r#"printf '%s\t' "$@" >> '{runs}'; printf '\n' >> '{runs}'
case "$1" in
  --version) echo '{version} (Claude Code)';;
  --plugin-dir=*) while IFS= read -r l; do printf '%s\n' "$l"; done < "${{1#--plugin-dir=}}/.claude-plugin/plugin.json" > '{root}/manifest-seen.json';;
esac
exit 0"#,
        runs = runs.display(),
        root = sb.root.path().display(),
    );
    sb.script("fake-claude", &body)
}

fn runs(sb: &Sandbox) -> Vec<Vec<String>> {
    std::fs::read_to_string(sb.root.join("claude-runs.txt"))
        .unwrap_or_default()
        .lines()
        .map(|l| {
            l.split('\t')
                .filter(|a| !a.is_empty())
                .map(String::from)
                .collect()
        })
        .collect()
}

/// A sandbox where `serve` finds one built-in language server (gopls, never started here).
fn sandbox_with_gopls() -> Sandbox {
    let sb = Sandbox::new();
    let gopls = sb.script("gopls", "exit 0");
    sb.add_tool("gopls", gopls);
    sb
}

fn go_entry(version: &str, diagnostics: bool) -> Value {
    let mut e = json!({
        "command": BIN,
        "args": ["lsp-bridge", "--client", format!("Claude Code {version}"),
                 "--extensions", ".go", "--no-diagnostics"],
        "extensionToLanguage": {".go": "go"},
    });
    if diagnostics {
        e["diagnostics"] = false.into();
    }
    e
}

/// The manifest's hooks (ccide-protocol(7) §13.6): exec form, `ccide hook` with no shell.
fn hooks() -> Value {
    let hook = |event: &str, timeout: u32| json!({"type": "command", "command": BIN, "args": ["hook", event], "timeout": timeout});
    let tools = "Edit|Write|MultiEdit|NotebookEdit|Bash";
    json!({
        "PreToolUse": [{"matcher": tools, "hooks": [hook("pre-tool-use", 5)]}],
        "PostToolUse": [{"matcher": format!("{tools}|Read"), "hooks": [hook("post-tool-use", 5)]}],
        "UserPromptSubmit": [{"hooks": [hook("user-prompt-submit", 5)]}],
        "Stop": [{"hooks": [hook("stop", 86400)]}],
    })
}

#[test]
fn claude_passes_the_plugin_for_the_servers_of_its_server_to_a_cli_that_takes_it() {
    for (version, dir, diagnostics) in [
        ("2.1.332", "claude-plugin-2.1.332", true),
        ("2.1.330", "claude-plugin-2.1.330", true),
        ("2.1.112", "claude-plugin-2.0.74", false),
        ("2.0.74", "claude-plugin-2.0.74", false),
    ] {
        let sb = sandbox_with_gopls();
        let srv = sb.serve(&[]);
        let script = fake_claude(&sb, version);
        let o = sb
            .command(&["claude", "-p", "hi"])
            .env("CCIDE_CLAUDE", &script)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert_eq!(stderr(&o), "", "{version}");
        let plugin = sb.state().join(dir);
        assert_eq!(
            runs(&sb),
            [
                vec!["--version".to_string()],
                vec![
                    format!("--plugin-dir={}", plugin.display()),
                    "-p".into(),
                    "hi".into()
                ],
            ],
            "{version}"
        );
        let seen: Value =
            serde_json::from_slice(&std::fs::read(sb.root.join("manifest-seen.json")).unwrap())
                .unwrap();
        assert_eq!(seen["name"], "ccide");
        assert_eq!(
            seen["lspServers"],
            json!({"go": go_entry(version, diagnostics)}),
            "{version}"
        );
        // Hooks in exec form only for a CLI known to run them without a shell.
        let with_hooks = version == "2.1.332";
        assert_eq!(
            seen.get("hooks"),
            with_hooks.then(hooks).as_ref(),
            "{version}"
        );
        drop(srv);
    }
}

#[test]
fn claude_runs_an_older_cli_without_the_plugin() {
    for version in ["1.0.128", "2.0.73"] {
        let sb = sandbox_with_gopls();
        let _srv = sb.serve(&[]);
        let script = fake_claude(&sb, version);
        let o = sb
            .command(&["claude", "-p", "hi"])
            .env("CCIDE_CLAUDE", &script)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert_eq!(
            runs(&sb),
            [
                vec!["--version".to_string()],
                vec!["-p".into(), "hi".into()]
            ],
            "{version}"
        );
    }
}

#[test]
fn claude_reads_an_npm_installs_version_without_running_it() {
    for (version, plugin) in [("2.1.330", true), ("1.0.128", false)] {
        let sb = sandbox_with_gopls();
        // node_modules/@anthropic-ai/claude-code as npm lays it out, `claude` linked to it.
        let pkg = sb.root.join("npm/node_modules/@anthropic-ai/claude-code");
        sb.root.write(
            "npm/node_modules/@anthropic-ai/claude-code/package.json",
            format!(r#"{{"name": "@anthropic-ai/claude-code", "version": "{version}"}}"#),
        );
        std::fs::create_dir_all(pkg.join("bin")).unwrap();
        std::fs::rename(fake_claude(&sb, "9.9.9"), pkg.join("bin/claude.exe")).unwrap();
        sb.add_tool("claude", pkg.join("bin/claude.exe"));
        // A server started by `ccide claude` itself this time.
        let o = sb.command(&["claude", "x"]).output().unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let runs = runs(&sb);
        assert_eq!(
            runs.len(),
            1,
            "claude ran once, not for --version: {runs:?}"
        );
        assert_eq!(runs[0][0].starts_with("--plugin-dir="), plugin, "{runs:?}");
    }
}

#[test]
fn claude_without_language_servers_passes_the_hooks_alone_to_a_cli_that_runs_them() {
    let sb = Sandbox::without_system_tools();
    let script = fake_claude(&sb, "2.1.332");
    let o = sb
        .command(&["claude"])
        .env("CCIDE_CLAUDE", &script)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // A server served by `ccide claude` itself, its plugin in that server's state directory.
    let runs = runs(&sb);
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_eq!(runs[0], ["--version"]);
    assert!(
        runs[1].len() == 1
            && runs[1][0].starts_with("--plugin-dir=")
            && runs[1][0].ends_with("/claude-plugin-2.1.332"),
        "{runs:?}"
    );
    let seen: Value =
        serde_json::from_slice(&std::fs::read(sb.root.join("manifest-seen.json")).unwrap())
            .unwrap();
    assert_eq!(seen.get("lspServers"), None);
    assert_eq!(seen["hooks"], hooks());
}

#[test]
fn claude_without_language_servers_passes_no_plugin() {
    let sb = Sandbox::without_system_tools();
    let script = fake_claude(&sb, "2.1.330");
    let o = sb
        .command(&["claude"])
        .env("CCIDE_CLAUDE", &script)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(runs(&sb), [vec!["--version".to_string()], vec![]]);
}

#[test]
fn plugin_install_writes_a_marketplace_and_asks_claude_to_install_it_twice_alike() {
    let sb = Sandbox::new();
    let script = fake_claude(&sb, "2.1.330");
    let market = sb.home().join(".local/share/ccide/claude-marketplace");
    for _ in 0..2 {
        let o = sb
            .command(&["plugin", "install"])
            .env("CCIDE_CLAUDE", &script)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert_eq!(
            stdout(&o),
            format!(
                "installed ccide's plugin for Claude Code 2.1.330 (marketplace {})\n",
                market.display()
            )
        );
    }
    let once = [
        vec!["--version".to_string()],
        vec![
            "plugin".into(),
            "marketplace".into(),
            "add".into(),
            s(&market).into(),
        ],
        vec!["plugin".into(), "install".into(), "ccide@ccide".into()],
    ];
    assert_eq!(runs(&sb), [once.clone(), once].concat());
    let read = |rel: &str| -> Value {
        serde_json::from_slice(&std::fs::read(market.join(rel)).unwrap()).unwrap()
    };
    assert_eq!(
        read(".claude-plugin/marketplace.json"),
        json!({"name": "ccide", "owner": {"name": "ccide"},
               "plugins": [{"name": "ccide", "source": "./ccide", "version": env!("CARGO_PKG_VERSION")}]})
    );
    let manifest = read("ccide/.claude-plugin/plugin.json");
    let servers = manifest["lspServers"].as_object().unwrap();
    let names: Vec<&String> = servers.keys().collect();
    assert_eq!(
        names,
        ["c", "go", "python", "rust", "shellscript", "typescript"]
    );
    assert_eq!(servers["go"], go_entry("2.1.330", true));
    assert_eq!(
        servers["typescript"]["extensionToLanguage"][".tsx"],
        "typescriptreact"
    );
    assert_eq!(servers["c"]["extensionToLanguage"][".hpp"], "cpp");
}

#[test]
fn plugin_install_refuses_a_cli_without_plugin_language_servers() {
    let sb = Sandbox::new();
    let script = fake_claude(&sb, "2.0.73");
    let o = sb
        .command(&["plugin", "install"])
        .env("CCIDE_CLAUDE", &script)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        "ccide: Claude Code 2.0.73 has no plugin language servers (2.0.74 has): update it (claude update)\n"
    );
    assert_eq!(runs(&sb), [vec!["--version".to_string()]]);
    let missing = sb.root.join("no-such-claude");
    let o = sb
        .command(&["plugin", "install"])
        .env("CCIDE_CLAUDE", &missing)
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).starts_with(&format!(
            "ccide: cannot run {} --version: ",
            missing.display()
        )),
        "{}",
        stderr(&o)
    );
}

#[test]
fn plugin_uninstall_undoes_install_and_may_run_again() {
    let sb = Sandbox::new();
    // A stand-in that fails as the real CLI does when there is nothing to remove.
    let runs_path = sb.root.join("claude-runs.txt");
    let script = sb.script(
        "fake-claude",
        &format!(
            r#"printf '%s\t' "$@" >> '{runs}'; printf '\n' >> '{runs}'
if [ -e '{root}/removed' ]; then echo "✘ Failed: Plugin \"ccide@ccide\" not found in installed plugins" >&2; exit 1; fi
[ "$2" = marketplace ] && touch '{root}/removed'
exit 0"#,
            runs = runs_path.display(),
            root = sb.root.path().display()
        ),
    );
    let market = sb.home().join(".local/share/ccide/claude-marketplace");
    std::fs::create_dir_all(market.join("ccide")).unwrap();
    for _ in 0..2 {
        let o = sb
            .command(&["plugin", "uninstall"])
            .env("CCIDE_CLAUDE", &script)
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert_eq!(stdout(&o), "uninstalled ccide's plugin from Claude Code\n");
    }
    assert!(!market.exists());
    let once = [
        vec![
            "plugin".to_string(),
            "uninstall".into(),
            "ccide@ccide".into(),
        ],
        vec![
            "plugin".into(),
            "marketplace".into(),
            "remove".into(),
            "ccide".into(),
        ],
    ];
    assert_eq!(runs(&sb), [once.clone(), once].concat());
}
