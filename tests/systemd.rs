//! Running under systemd: readiness, watchdog and reload notifications, journald levels, and
//! workspace folders changed at run time.

use std::os::unix::net::UnixDatagram;
use std::time::Duration;

use crate::util::*;
use serde_json::json;

/// Reads datagrams until `want` arrives; returns everything read, in order.
fn until(sock: &UnixDatagram, want: &str) -> Vec<String> {
    let mut seen = Vec::new();
    let mut buf = [0u8; 512];
    wait_for(&format!("{want} on NOTIFY_SOCKET"), DEADLINE, || {
        let n = sock.recv(&mut buf).ok()?;
        let msg = String::from_utf8_lossy(&buf[..n]).into_owned();
        seen.push(msg.clone());
        (msg == want).then_some(())
    });
    seen
}

#[test]
fn ready_watchdog_reloading_and_stopping_reach_the_notify_socket() {
    let sb = Sandbox::new();
    let other = sb.root.join("other project");
    std::fs::create_dir_all(&other).unwrap();
    let sock_path = sb.root.join("notify.sock");
    let sock = UnixDatagram::bind(&sock_path).unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut cmd = sb.serve_command(&[]);
    cmd.env("NOTIFY_SOCKET", &sock_path)
        .env("WATCHDOG_USEC", "200000");
    let mut s = Server::spawn(&mut cmd, &sb.config());
    assert_eq!(until(&sock, "READY=1"), vec!["READY=1"]);
    until(&sock, "WATCHDOG=1");
    let o = sb.run(&["workspace", "add", other.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let seen = until(&sock, "READY=1");
    assert!(seen.iter().any(|m| m == "RELOADING=1"), "{seen:?}");
    let lock: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&s.lock_path).unwrap()).unwrap();
    assert_eq!(lock["workspaceFolders"], json!([sb.ws(), other]));
    assert_eq!(lock["authToken"], s.lock["authToken"], "same token");
    s.signal("TERM");
    until(&sock, "STOPPING=1");
    let _ = s.stop_with("TERM");
}

#[test]
fn workspace_changes_keep_port_and_token_and_survive_a_restart() {
    let sb = Sandbox::new();
    let other = sb.root.join("second");
    std::fs::create_dir_all(&other).unwrap();
    let mut s = sb.serve(&[]);
    let (port, token) = (s.port, s.token.clone());
    let o = sb.run(&["workspace", "add", other.to_str().unwrap()]);
    assert_eq!(
        stdout(&o),
        format!("{}\n{}\n", sb.ws().display(), other.display())
    );
    // The new folder is open to the tools right away.
    let f = sb.root.write("second/b.txt", "in the second folder\n");
    let mut c = s.client();
    let r = c.call("openFile", json!({"filePath": f, "makeFrontmost": false}));
    assert_eq!(json_text(&r)["success"], true, "{r}");
    s.stop_with("TERM");
    let mut s = sb.serve(&[]);
    assert_eq!((s.port, s.token.clone()), (port, token));
    assert_eq!(s.lock["workspaceFolders"], json!([sb.ws(), other]));
    let o = sb.run(&["workspace", "remove", other.to_str().unwrap()]);
    assert!(o.status.success(), "{}", stderr(&o));
    let o = sb.run(&["workspace", "remove", sb.ws().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("only workspace folder"),
        "{}",
        stderr(&o)
    );
    s.stop_with("TERM");
    let s = sb.serve(&[]);
    assert_eq!(s.lock["workspaceFolders"], json!([sb.ws()]));
}

#[test]
fn under_journald_log_lines_carry_syslog_priorities() {
    let sb = Sandbox::new();
    // No built-in checkers: the python one's command spans lines, and its debug line with them.
    let mut cmd = sb.serve_command(&["--log-level", "debug", "--no-default-checkers"]);
    cmd.env("JOURNAL_STREAM", "8:12345");
    let s = Server::spawn(&mut cmd, &sb.config());
    let mut c = s.client();
    c.request("ping", json!({}));
    let log = wait_for("a debug line", DEADLINE, || {
        let l = s.log();
        (l.contains("<7>") && l.contains("<6>listening")).then_some(l)
    });
    assert!(
        log.lines()
            .any(|l| l.starts_with("<6>listening on 127.0.0.1:")),
        "{log}"
    );
    assert!(log.lines().all(|l| l.starts_with('<')), "{log}");
    // Without journald: a timestamp and the level word.
    let sb2 = Sandbox::new();
    let s2 = sb2.serve(&[]);
    wait_for("the listening line", DEADLINE, || {
        s2.log().contains(" ccide info: listening on").then_some(())
    });
}

#[test]
fn status_all_and_gc_on_live_dead_and_foreign_lock_files() {
    let sb = Sandbox::new();
    let s = sb.serve(&[]);
    let ide = sb.config().join("ide");
    let dead_state = sb.root.join("dead-state");
    std::fs::create_dir_all(dead_state.join("diffs/3")).unwrap();
    std::fs::write(dead_state.join("control.sock"), "").unwrap();
    std::fs::write(dead_state.join("server.json"), "{}").unwrap();
    // pid 2^22+1 is above Linux's pid_max default range: never alive.
    let dead_pid = 4_194_305;
    // The pid namespace a lock's pid belongs to, as ccide records it.
    let our_ns = {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata("/proc/self/ns/pid").unwrap().ino()
    };
    let write_lock = |port: u16, pid: u32, ccide: Option<u64>| {
        let mut v = json!({"pid": pid, "workspaceFolders": [sb.ws()], "ideName": format!("ide {port}"),
            "transport": "ws", "runningInWindows": false, "authToken": "t"});
        if let Some(ns) = ccide {
            v["ccide"] = json!({"control": dead_state.join("control.sock"), "state": dead_state, "pidns": ns});
        }
        std::fs::write(ide.join(format!("{port}.lock")), v.to_string()).unwrap();
    };
    write_lock(1, dead_pid, Some(our_ns));
    write_lock(2, dead_pid, None);
    write_lock(3, std::process::id(), None);
    // A server in another pid namespace (a container sharing ~/.claude): its pid means
    // nothing here, so nothing proves it dead.
    write_lock(4, dead_pid, Some(our_ns + 1));
    let o = sb.run(&["status", "--all"]);
    let out = stdout(&o);
    assert!(out.contains("1      dead  ccide  ide 1"), "{out}");
    assert!(out.contains("2      dead  other  ide 2"), "{out}");
    assert!(out.contains("3      live  other  ide 3"), "{out}");
    assert!(
        out.contains(&format!("{:<6} live  ccide  ccide (ws)", s.port)),
        "{out}"
    );
    let o = sb.run(&["gc", "--dry-run"]);
    assert!(
        stdout(&o).contains(&format!("would remove {}", ide.join("1.lock").display())),
        "{}",
        stdout(&o)
    );
    assert!(
        stdout(&o).contains(&format!(
            "kept {}: it was written in another pid namespace (a container?), where its server may run",
            ide.join("4.lock").display()
        )),
        "{}",
        stdout(&o)
    );
    assert!(ide.join("1.lock").exists());
    let o = sb.run(&["gc"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(!ide.join("1.lock").exists());
    assert!(!dead_state.join("control.sock").exists() && !dead_state.join("diffs").exists());
    assert!(
        dead_state.join("server.json").exists(),
        "the state kept for a restart stays"
    );
    for kept in ["2.lock", "3.lock"] {
        assert!(ide.join(kept).exists(), "{kept} is another IDE's");
    }
    assert!(ide.join("4.lock").exists(), "not proven dead");
    assert!(s.lock_path.exists(), "a live server's lock stays");
    std::fs::remove_file(ide.join("4.lock")).unwrap();
    assert_eq!(
        stdout(&sb.run(&["gc"])),
        format!("nothing to clean up in {}\n", ide.display())
    );
}

/// `[Section]` → key → values, as systemd reads a unit.
fn sections(text: &str) -> std::collections::BTreeMap<String, Vec<(String, String)>> {
    let mut out = std::collections::BTreeMap::new();
    let mut current = String::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            current = name.to_string();
            continue;
        }
        let (k, v) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("not key=value: {line}"));
        out.entry(current.clone())
            .or_insert_with(Vec::new)
            .push((k.to_string(), v.to_string()));
    }
    out
}

fn get<'a>(
    s: &'a std::collections::BTreeMap<String, Vec<(String, String)>>,
    section: &str,
    key: &str,
) -> &'a str {
    &s[section]
        .iter()
        .find(|(k, _)| k == key)
        .unwrap_or_else(|| panic!("no {key} in [{section}]"))
        .1
}

#[test]
fn printed_units_run_this_binary_with_notify_restart_state_and_sandboxing() {
    let sb = Sandbox::new();
    let bin = std::fs::canonicalize(BIN).unwrap();
    let o = sb.run(&["unit"]);
    assert!(o.status.success(), "{}", stderr(&o));
    let text = stdout(&o);
    let t = sections(&text);
    assert_eq!(
        get(&t, "Service", "ExecStart"),
        format!(
            "{} serve --workspace %f --state-dir %S/ccide/%i",
            bin.display()
        )
    );
    for (k, v) in [
        ("Type", "notify"),
        ("Restart", "on-failure"),
        ("StateDirectory", "ccide"),
        ("NoNewPrivileges", "yes"),
        ("ProtectSystem", "strict"),
        ("PrivateTmp", "yes"),
        ("RestrictAddressFamilies", "AF_INET AF_INET6 AF_UNIX"),
    ] {
        assert_eq!(get(&t, "Service", k), v, "{k}");
    }
    assert_eq!(get(&t, "Service", "ReadWritePaths"), "-%h/.claude %f");
    assert_eq!(get(&t, "Install", "WantedBy"), "default.target");
    // The enable line names the instance for the current directory.
    assert!(
        text.contains(&format!(
            "enable --now 'ccide@{}.service'",
            escaped(&sb.ws())
        )),
        "{text}"
    );

    let odd = sb.root.join("my dir-x/ä");
    std::fs::create_dir_all(&odd).unwrap();
    let o = sb.run(&["unit", "--workspace", odd.to_str().unwrap()]);
    let p = sections(&stdout(&o));
    assert_eq!(
        get(&p, "Service", "ExecStart"),
        format!("{} serve --workspace \"{}\"", bin.display(), odd.display())
    );
    assert!(
        get(&p, "Service", "StateDirectory").starts_with("ccide/ä-"),
        "{}",
        get(&p, "Service", "StateDirectory")
    );

    // --install writes the unit where systemd --user looks for it.
    let xdg = sb.root.join("xdg-config");
    let o = sb
        .command(&["unit", "--install"])
        .env("XDG_CONFIG_HOME", &xdg)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        std::fs::read_to_string(xdg.join("systemd/user/ccide@.service")).unwrap(),
        template_only(&text)
    );
    assert!(stdout(&o).contains("systemctl --user daemon-reload"));
}

fn template_only(printed: &str) -> String {
    printed
        .lines()
        .skip_while(|l| l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// systemd-escape --path, from systemd itself (the unit test in src/unit.rs pins known strings).
fn escaped(p: &std::path::Path) -> String {
    let o = std::process::Command::new("systemd-escape")
        .arg("--path")
        .arg(p)
        .output()
        .expect("systemd-escape is needed: apt-get install systemd (.ci/run does)");
    assert!(o.status.success(), "systemd-escape: {}", stderr(&o));
    String::from_utf8(o.stdout).unwrap().trim().to_string()
}

#[test]
fn instance_names_match_systemd_escape_for_spaces_dashes_and_non_ascii() {
    let sb = Sandbox::new();
    for name in ["with space", "dash-ed", "ünï cödé", ".dotted"] {
        let dir = sb.root.join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let o = sb.command(&["unit"]).current_dir(&dir).output().unwrap();
        let text = stdout(&o);
        assert!(
            text.contains(&format!("'ccide@{}.service'", escaped(&dir))),
            "{name}: {text}"
        );
    }
}
