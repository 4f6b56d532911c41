//! `ccide lsp --path-map HOST=REMOTE` across real boundaries, with editors configured as
//! README.md's "Across a boundary" says: `ccide lsp` in a "container" (mount and pid namespaces,
//! the workspace bind-mounted at another path and hidden at its own, as `docker run -v` leaves
//! it), entered with nsenter where the README says `docker exec -i`; and through a real sshd on
//! localhost where it says `ssh box`, neovim (and helix, in tmux) then in a mount namespace of
//! its own where the project lies at another path (a copy, an sshfs mount). What the CLI side
//! (a client of the serve beyond the boundary) receives is in its paths; what the editor holds
//! is in its own. Run as root by .ci/run, which installs the editors and openssh-server (found
//! where they install, or where CCIDE_NVIM, CCIDE_HX, CCIDE_TMUX and CCIDE_SSHD say, never by
//! PATH). Navigation answers, with a scripted editor and no boundary (the editor's folder
//! exists nowhere), are not ignored.

use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::editors::{Running, STEP, Sync, Tmux, action, person, program, recipe_nth};
use crate::util::*;
use serde_json::{Value, json};

/// The project's file: 20 lines, `bad = 5` on line 5 (the checker's error), `changed` ones new.
fn lines(changed: &[usize]) -> String {
    (1..=20)
        .map(|i| match (i, changed.contains(&i)) {
            (_, true) => format!("NEW = {i}\n"),
            (5, false) => "bad = 5\n".to_string(),
            _ => format!("line = {i}\n"),
        })
        .collect()
}

/// serve's flags: one checker, the test's, for *.py: an error at each line holding "bad".
fn checker(sb: &Sandbox) -> Vec<String> {
    let body = r#"grep -n bad "$1" | while IFS=: read -r n rest; do echo "$1:$n:1: error: bad here [B1]"; done"#;
    let script = sb.script("check.sh", body);
    let spec = format!("*.py=compiler:{} {{file}}", script.display());
    [
        "--no-default-checkers",
        "--no-default-lsp",
        "--checker",
        &spec,
    ]
    .map(String::from)
    .to_vec()
}

/// init.lua: README.md's neovim configuration, its `cmd` the `n`th lua block of "Across a
/// boundary" with `replace` applied (the real boundary for the one the README names).
fn init_lua(n: usize, replace: &[(&str, &str)]) -> String {
    let mut line = recipe_nth("Across a boundary", "lua", n);
    for (from, to) in replace {
        assert!(
            line.contains(from),
            "README's boundary recipe {n} has no {from}: {line}"
        );
        line = line.replace(from, to);
    }
    let init = recipe_nth("neovim (0.7 or later; tried: 0.7.2)", "lua", 0);
    let cmd = "cmd = { 'ccide', 'lsp' }";
    assert!(init.contains(cmd), "{init}");
    format!("{line}{}", init.replace(cmd, "cmd = ccide_cmd"))
}

/// Runs `nvim` (its command, environment and namespace set) through
/// tests/fixtures/neovim_boundary.lua and checks each side: `file` is the project's file as
/// neovim names it, `remote` as the server does, `map` the mapping as messages name it.
fn drive(sb: &Sandbox, server: &Server, mut nvim: Command, file: &Path, remote: &Path, map: &str) {
    let sync = Sync::new(sb);
    let outside = sb.root.write("outside/else.py", "x = 1\n");
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/neovim_boundary.lua"
    );
    let mut claude = server.ready_client();
    let mut child = Running(
        nvim.args(["--headless", "-i", "NONE", "-n", "-c"])
            .arg(format!("luafile {script}"))
            .env("SYNC", &sync.0)
            .env("FILE", file)
            .env("OUTSIDE", &outside)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let failed = || {
        if let Some(e) = sync.error() {
            let log =
                std::fs::read_to_string(sb.home().join(".cache/nvim/lsp.log")).unwrap_or_default();
            panic!(
                "neovim failed: {e}\nlsp.log:\n{log}\nserve:\n{}",
                server.log()
            );
        }
    };
    sync.step("opened", &failed);
    let selection = json!({"text": "line", "filePath": remote, "fileUrl": format!("file://{}", remote.display()),
        "selection": {"start": {"line": 1, "character": 0}, "end": {"line": 1, "character": 4},
        "isEmpty": false}});
    assert_eq!(
        action(&mut claude, "selection_changed", &failed),
        [("selection_changed".to_string(), selection)]
    );
    sync.done("selected");
    let mention = json!({"filePath": remote, "lineStart": 1, "lineEnd": 1});
    assert_eq!(
        action(&mut claude, "at_mentioned", &failed),
        [("at_mentioned".to_string(), mention)]
    );
    sync.done("mentioned");
    let diagnostics: Value = serde_json::from_str(&sync.step("diagnostics", &failed)).unwrap();
    assert_eq!(diagnostics, json!([{"lnum": 4, "message": "bad here"}]));
    let open_diff = claude.send_request(
        "tools/call",
        json!({"name": "openDiff", "arguments": {"old_file_path": remote, "new_file_path": remote,
            "new_file_contents": lines(&[2, 10, 18]), "tab_name": "hunks.py"}}),
    );
    let hints: Value = serde_json::from_str(&sync.step("hints", &failed)).unwrap();
    let hint = |l: u64, n: u64| json!({"lnum": l, "message": format!("Claude proposes (hunk {n}/3): NEW = {}", l + 1)});
    assert_eq!(hints, json!([hint(1, 1), hint(9, 2), hint(17, 3)]));
    let answer = wait_for("the answer to openDiff", STEP, || {
        failed();
        let got = claude.drain(Duration::from_millis(20));
        got.into_iter().find(|m| m["id"] == open_diff)
    });
    assert_eq!(texts(&answer), ["FILE_SAVED".to_string(), lines(&[2, 18])]);
    sync.step("cleared", &failed);
    let messages: Value = serde_json::from_str(&sync.step("messages", &failed)).unwrap();
    let state = std::fs::canonicalize(sb.state()).unwrap();
    let said = |m: String| {
        assert!(
            messages.as_array().unwrap().contains(&json!(m)),
            "{m}\nnot in {messages:#}"
        )
    };
    said(format!(
        "ccide: Claude Code's proposal for {} cannot be opened in the editor: {}/diffs/1/hunks.py is outside every --path-map ({map}); decide its hunks with the code actions on the file, or see it with `ccide diff show 1` where ccide runs",
        remote.display(),
        state.display()
    ));
    said(format!(
        "ccide: {} is outside every --path-map ({map}): add a --path-map that holds it",
        outside.display()
    ));
    let status = child.exited();
    assert!(status.success(), "neovim exited with {status}");
}

/// `ccide serve` with `extra` flags in a "container": new mount and pid namespaces in which the
/// workspace is bind-mounted at `remote` and hidden at its own path under a tmpfs. The server,
/// and the host's pid of its process (pid 1 inside), which nsenter enters as `docker exec` does.
fn container(sb: &Sandbox, remote: &Path, extra: &[String]) -> (Server, u32) {
    std::fs::create_dir_all(remote).unwrap();
    let (ws, state, remote_s) = (sb.ws(), sb.state(), remote.display());
    let mut script = format!(
        "mount --bind '{}' '{remote_s}' && mount -t tmpfs ctr '{}' && exec '{BIN}' serve --workspace '{remote_s}' --state-dir '{}'",
        ws.display(),
        ws.display(),
        state.display()
    );
    for a in extra {
        script += &format!(" '{a}'");
    }
    let log = sb.root.join("container.log");
    let mut child = Command::new("/usr/bin/unshare")
        .args(["--mount", "--pid", "--fork", "--kill-child=SIGTERM"])
        .args(["--mount-proc", "/bin/sh", "-c", &script])
        .env_clear()
        .env("HOME", sb.home())
        .env("CLAUDE_CONFIG_DIR", sb.config())
        .env("PATH", "/usr/bin:/bin")
        .env("CCIDE_PING_TIMEOUT", TEST_PING_TIMEOUT)
        .current_dir(sb.root.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    let ide = sb.config().join("ide");
    let (lock_path, lock) = wait_for(
        "the lock file of the serve in the container",
        DEADLINE,
        || {
            if let Ok(Some(s)) = child.try_wait() {
                let why = std::fs::read_to_string(&log).unwrap_or_default();
                panic!("the container (unshare, needs root) exited with {s}: {why}");
            }
            let p = list_locks(&ide).into_iter().next()?;
            let v: Value = serde_json::from_str(&std::fs::read_to_string(&p).ok()?).ok()?;
            Some((p, v))
        },
    );
    assert_eq!(
        lock["pid"], 1,
        "serve is the container's first process: {lock}"
    );
    assert_eq!(lock["workspaceFolders"], json!([remote]));
    let unshare = child.id();
    let pid = wait_for("the container's first process", DEADLINE, || {
        let c = std::fs::read_to_string(format!("/proc/{unshare}/task/{unshare}/children"));
        c.ok()?.split_whitespace().next()?.parse().ok()
    });
    let port = lock_path
        .file_stem()
        .unwrap()
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let token = lock["authToken"].as_str().unwrap().to_string();
    let server = Server {
        child: Some(child),
        port,
        token,
        lock_path,
        lock,
        stderr_path: log,
    };
    (server, pid)
}

#[test]
#[ignore = "needs root (namespaces) and neovim: .ci/run provides both"]
fn neovim_outside_a_container_reaches_ccide_lsp_inside_with_path_map() {
    let nvim = program("CCIDE_NVIM", "/usr/bin/nvim", "neovim");
    let sb = Sandbox::new();
    let f = sb.write("hunks.py", lines(&[]));
    let remote = sb.root.join("ctr/work");
    let (server, pid) = container(&sb, &remote, &checker(&sb));
    // The boundary: the container's path is empty outside, the host's is empty inside.
    assert!(!remote.join("hunks.py").exists());
    let enter = format!("'/usr/bin/nsenter', '-t', '{pid}', '-m', '-p'");
    let init = init_lua(
        0,
        &[
            ("'docker', 'exec', '-i', '-u', 'vscode', 'proj'", &enter),
            ("/workspaces/proj", remote.to_str().unwrap()),
        ],
    );
    sb.root.write("home/.config/nvim/init.lua", init);
    let mut cmd = Command::new(&nvim);
    person(&sb, &mut cmd);
    let map = format!("{}={}", sb.ws().display(), remote.display());
    drive(&sb, &server, cmd, &f, &remote.join("hunks.py"), &map);
}

/// A real sshd on a free port of localhost, as root, with a generated host key and one
/// authorized key, its sessions given `env` (ccide on PATH, the config directory); and the
/// ssh configuration (`-F`) that reaches it as `box`.
fn sshd(sb: &Sandbox, env: &str) -> (Running, PathBuf) {
    let sshd = program("CCIDE_SSHD", "/usr/sbin/sshd", "sshd (openssh-server)");
    let dir = sb.root.join("ssh");
    std::fs::create_dir_all(&dir).unwrap();
    for key in ["host", "client"] {
        let ok = Command::new("/usr/bin/ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(dir.join(key))
            .status()
            .unwrap();
        assert!(ok.success());
    }
    std::fs::copy(dir.join("client.pub"), dir.join("authorized_keys")).unwrap();
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let d = dir.display();
    let config = sb.root.write(
        "ssh/sshd_config",
        format!(
            "Port {port}\nListenAddress 127.0.0.1\nHostKey {d}/host\nPidFile none\n\
             AuthorizedKeysFile {d}/authorized_keys\nStrictModes no\nUsePAM no\n\
             PasswordAuthentication no\nKbdInteractiveAuthentication no\n\
             PermitRootLogin prohibit-password\nSetEnv {env}\n"
        ),
    );
    // Where sshd drops privileges (the package's service makes it).
    std::fs::create_dir_all("/run/sshd").unwrap();
    let log = std::fs::File::create(dir.join("sshd.log")).unwrap();
    let mut child = Running(
        Command::new(sshd)
            .args(["-D", "-e", "-f"])
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap(),
    );
    wait_for("sshd to answer", DEADLINE, || {
        if let Ok(Some(s)) = child.0.try_wait() {
            let why = std::fs::read_to_string(dir.join("sshd.log")).unwrap_or_default();
            panic!("sshd exited with {s}: {why}");
        }
        let mut banner = [0u8; 4];
        let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
        s.read_exact(&mut banner).ok()?;
        (&banner == b"SSH-").then_some(())
    });
    let client = sb.root.write(
        "ssh/config",
        format!(
            "Host box\n  HostName 127.0.0.1\n  Port {port}\n  User root\n  IdentityFile {d}/client\n  \
             IdentitiesOnly yes\n  StrictHostKeyChecking no\n  UserKnownHostsFile /dev/null\n  \
             BatchMode yes\n  LogLevel ERROR\n"
        ),
    );
    (child, client)
}

/// `box`: sshd (see `sshd`) whose sessions find `ccide` on PATH and the sandbox's config
/// directory, as a remote box where ccide is installed; the ssh configuration that reaches it.
fn ssh_box(sb: &Sandbox) -> (Running, PathBuf) {
    let bin = sb.root.join("bin");
    let _ = std::os::unix::fs::symlink(BIN, bin.join("ccide"));
    let env = format!(
        "PATH={}:/usr/bin:/bin CLAUDE_CONFIG_DIR={}",
        bin.display(),
        sb.config().display()
    );
    sshd(sb, &env)
}

/// The editor's side of SSH: a mount namespace where the project is at `local` (a copy, an
/// sshfs mount) and the server's path is empty. The `sh -c` script that sets it up, in
/// `local`, then runs `argv`.
fn editor_side(sb: &Sandbox, local: &Path, argv: &str) -> String {
    std::fs::create_dir_all(local).unwrap();
    format!(
        "mount --bind '{w}' '{l}' && mount -t tmpfs editor '{w}' && cd '{l}' && exec {argv}",
        w = sb.ws().display(),
        l = local.display()
    )
}

#[test]
#[ignore = "needs root, neovim and sshd (openssh-server): .ci/run provides them"]
fn neovim_reaches_ccide_lsp_over_ssh_with_path_map() {
    let nvim = program("CCIDE_NVIM", "/usr/bin/nvim", "neovim");
    let sb = Sandbox::new();
    sb.write("hunks.py", lines(&[]));
    let server = sb.serve(&checker(&sb).iter().map(String::as_str).collect::<Vec<_>>());
    let (_sshd, ssh_config) = ssh_box(&sb);
    let ws = sb.ws();
    let ssh = format!("'/usr/bin/ssh', '-F', '{}', 'box'", ssh_config.display());
    let init = init_lua(
        1,
        &[
            ("'ssh', 'box'", &ssh),
            ("/home/me/proj", ws.to_str().unwrap()),
        ],
    );
    sb.root.write("home/.config/nvim/init.lua", init);
    let local = sb.root.join("local/proj");
    let mut cmd = Command::new("/usr/bin/unshare");
    person(&sb, &mut cmd);
    let script = editor_side(&sb, &local, &format!("'{}' \"$@\"", nvim.display()));
    cmd.args(["--mount", "/bin/sh", "-c", &script, "nvim"]);
    let map = format!("{}={}", local.display(), ws.display());
    drive(
        &sb,
        &server,
        cmd,
        &local.join("hunks.py"),
        &ws.join("hunks.py"),
        &map,
    );
}

/// helix on the editor's side of SSH, configured as the README says: the code action menu's
/// "send selection" reaches the CLI side in its paths.
#[test]
#[ignore = "needs root, helix, tmux and sshd (openssh-server): .ci/run provides them"]
fn helix_reaches_ccide_lsp_over_ssh_with_path_map() {
    let hx = program("CCIDE_HX", "/usr/local/bin/hx", "helix");
    let sb = Sandbox::new();
    sb.write("hello.py", "print('x')\n");
    let server = sb.serve(&["--no-default-checkers"]);
    let (_sshd, ssh_config) = ssh_box(&sb);
    let (ws, local) = (sb.ws(), sb.root.join("local/proj"));
    let mut toml = recipe_nth("Across a boundary", "toml", 0);
    let ssh = format!(
        "command = \"/usr/bin/ssh\"\nargs = [\"-F\", \"{}\", \"box\",",
        ssh_config.display()
    );
    for (from, to) in [
        ("command = \"ssh\"\nargs = [\"box\",", ssh.as_str()),
        ("/home/me/src/proj", local.to_str().unwrap()),
        ("/home/me/proj", ws.to_str().unwrap()),
    ] {
        assert!(
            toml.contains(from),
            "README's helix recipe has no {from}: {toml}"
        );
        toml = toml.replace(from, to);
    }
    sb.root.write("home/.config/helix/languages.toml", toml);
    let mut claude = server.ready_client();
    let script = editor_side(&sb, &local, &format!("'{}' hello.py", hx.display()));
    let argv = ["/usr/bin/unshare", "--mount", "/bin/sh", "-c", &script];
    let argv: Vec<&Path> = argv.iter().map(Path::new).collect();
    let term = Tmux::start(&sb, &argv, &[]);
    let log =
        || std::fs::read_to_string(sb.home().join(".cache/helix/helix.log")).unwrap_or_default();
    let failed = |screen: &str| {
        assert!(
            !screen.contains("rror"),
            "helix says:\n{screen}\nhelix.log:\n{}",
            log()
        );
    };
    let remote = ws.join("hello.py");
    wait_for("hello.py open as a tab", STEP, || {
        let status = server.control(&json!({"cmd": "status"}));
        (status["status"]["tabs"][0]["path"] == json!(remote)).then_some(())
    });
    term.keys(&["/"]);
    term.type_text("print");
    term.keys(&["Enter"]);
    term.read("1:5", &failed);
    term.keys(&["Space", "a"]);
    term.helix_pick("Claude: send selection", &["Claude: @-mention"], &failed);
    let selection = json!({"text": "print", "filePath": remote,
        "fileUrl": format!("file://{}", remote.display()),
        "selection": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 5},
        "isEmpty": false}});
    assert_eq!(
        action(&mut claude, "selection_changed", &|| failed(&term.screen())),
        [("selection_changed".to_string(), selection)]
    );
}

/// A mapping is two absolute paths. Navigation answers cross it too: a definition in the
/// editor's paths; one outside every mapping (a system file where ccide runs) refused naming
/// it; symbols outside left out of the list. A document outside is refused, and a request
/// about it fails. The editor's folder here exists nowhere: every path it names is translated.
#[test]
fn navigation_answers_come_back_in_the_editors_paths_and_a_file_outside_is_refused() {
    let sb = Sandbox::new();
    let mapped = sb.ws().join("sub");
    let a = sb.write(
        "sub/a.fk",
        format!("x\nGOTO /etc/hostname\nGOTO {}/b.fk\n", mapped.display()),
    );
    sb.write("sub/b.fk", "y\n");
    let c = sb.write("c.fk", "z\n");
    let lsp = fake_lsp("*.fk", "", &sb.root.join("fake.log"));
    let _srv = sb.serve(&["--no-default-lsp", "--no-default-checkers", "--lsp", &lsp]);
    let bad = sb.run(&["lsp", "--path-map", "proj=/work"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(
        stderr(&bad).starts_with("ccide: --path-map proj=/work: expected HOST=REMOTE, the folder as the editor names it and as ccide lsp sees it, both absolute\n"),
        "{}",
        stderr(&bad)
    );
    let map = format!("/editor/my proj={}", mapped.display());
    let mut ed = LspProcess::spawn(
        &mut sb.command(&["lsp", "--navigation", "--path-map", &map]),
        sb.root.join("ed.log"),
    );
    let init = ed.request(
        "initialize",
        json!({"processId": std::process::id(), "rootUri": "file:///editor/my%20proj", "capabilities": {}}),
    );
    assert_eq!(init["result"]["capabilities"]["definitionProvider"], true);
    ed.notify("initialized", json!({}));
    let text = std::fs::read_to_string(&a).unwrap();
    let doc = "file:///editor/my%20proj/a.fk";
    ed.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": doc, "languageId": "fk", "version": 1, "text": text}}),
    );
    let at = |line: u64| json!({"textDocument": {"uri": doc}, "position": {"line": line, "character": 0}});
    let here = json!({"line": 0, "character": 0});
    assert_eq!(
        ed.request("textDocument/definition", at(0))["result"],
        json!([{"uri": doc, "range": {"start": here, "end": here}}])
    );
    let one = json!({"line": 0, "character": 1});
    assert_eq!(
        ed.request("textDocument/definition", at(2))["result"],
        json!([{"uri": "file:///editor/my%20proj/b.fk", "range": {"start": one, "end": one}}])
    );
    assert_eq!(
        ed.request("textDocument/definition", at(1))["error"],
        json!({"code": -32803, "message": format!("/etc/hostname is outside every --path-map ({map}): the editor cannot open it")})
    );
    // The language server has c.fk too (open in a tab), which the editor cannot reach.
    sb.run_ok(&["open", c.to_str().unwrap()]);
    let symbols = wait_for("c.fk at the language server", DEADLINE, || {
        let all = std::fs::read_to_string(sb.root.join("fake.log")).unwrap_or_default();
        all.contains(&uri(&c))
            .then(|| ed.request("workspace/symbol", json!({"query": ""})))
    });
    let origin = json!({"start": here, "end": here});
    assert_eq!(
        symbols["result"],
        json!([{"name": doc, "kind": 1, "location": {"uri": doc, "range": origin}}])
    );
    let elsewhere = "file:///elsewhere/c.fk";
    ed.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": elsewhere, "languageId": "fk", "version": 1, "text": "z\n"}}),
    );
    let refusal = format!(
        "/elsewhere/c.fk is outside every --path-map ({map}): add a --path-map that holds it"
    );
    let said = ed.recv_where("the refusal", |m| m["method"] == "window/showMessage");
    assert_eq!(
        said["params"],
        json!({"type": 2, "message": format!("ccide: {refusal}")})
    );
    let range = json!({"start": here, "end": here});
    let actions = ed.request(
        "textDocument/codeAction",
        json!({"textDocument": {"uri": elsewhere}, "range": range, "context": {"diagnostics": []}}),
    );
    assert_eq!(
        actions["error"],
        json!({"code": -32803, "message": refusal})
    );
}
