//! Sessions routed by their roots (ccide-protocol(7) §6.4): serve asks each Claude Code session
//! for `roots/list`, follows `notifications/roots/list_changed`, and a selection or mention goes
//! to the sessions whose folders hold the file, or to the one `--session` names; and git
//! worktrees of a served repository served as folders as they come and go (§1.5).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::util::*;
use serde_json::{Value, json};

/// A client that declares the `roots` capability, as Claude Code does, and answers serve's
/// first `roots/list` with `roots` (URIs as given); its setup settled.
fn rooted(srv: &Server, roots: &[String], pid: u32) -> Client {
    let mut c = srv.connect();
    let r = c.request(
        "initialize",
        json!({"protocolVersion": "2025-11-25", "capabilities": {"roots": {"listChanged": true}},
               "clientInfo": {"name": "claude-code", "version": "2.1.332"}}),
    );
    assert!(r["result"].is_object(), "{r}");
    c.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    c.send(&json!({"jsonrpc": "2.0", "method": "ide_connected", "params": {"pid": pid}}));
    c.request("tools/list", json!({}));
    answer_roots(&mut c, roots);
    srv.wait_ready();
    c
}

/// A mention made while no session was connected waits for a session whose folders hold the
/// file: one working elsewhere that connects first does not take it.
#[test]
fn a_queued_mention_goes_to_the_first_session_whose_folders_hold_the_file() {
    let sb = Sandbox::new();
    let ws = canonical(&sb.ws());
    sb.write("a/x.py", "x = 1\n");
    let y = sb.write("b/y.py", "y = 1\n");
    let srv = sb.serve(&[]);
    let o = sb.run_ok(&["mention", "b/y.py:1"]);
    assert!(stderr(&o).contains("queued"), "{}", stderr(&o));
    // Each session's roots are known before its greeting (before its tools/list).
    let connect = |folder: &str| {
        let mut c = srv.connect();
        c.request(
            "initialize",
            json!({"protocolVersion": "2025-11-25", "capabilities": {"roots": {}},
                   "clientInfo": {"name": "claude-code", "version": "2.1.332"}}),
        );
        c.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        answer_roots(&mut c, &[format!("file://{}/{folder}", ws.display())]);
        c.request("tools/list", json!({}));
        srv.wait_ready();
        let mentions: Vec<Value> = c
            .before_ping()
            .into_iter()
            .filter(|v| v["method"] == "at_mentioned")
            .collect();
        (c, mentions)
    };
    let (_a, got) = connect("a");
    assert_eq!(got, Vec::<Value>::new());
    let (_b, got) = connect("b");
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(
        got[0]["params"],
        json!({"filePath": y, "lineStart": 0, "lineEnd": 0})
    );
}

/// Answers serve's next `roots/list` request with `roots`; returns once serve has read it.
fn answer_roots(c: &mut Client, roots: &[String]) {
    let ask = c.recv_where("roots/list", |v| v["method"] == "roots/list");
    assert_eq!(ask["params"], Value::Null, "{ask}");
    let roots: Vec<Value> = roots.iter().map(|u| json!({"uri": u})).collect();
    c.send(&json!({"jsonrpc": "2.0", "id": ask["id"], "result": {"roots": roots}}));
    // Serve reads one connection in order: its answer to this ping proves it read the roots.
    assert_eq!(c.before_ping(), Vec::<Value>::new());
}

fn canonical(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap()
}

fn run_fails(sb: &Sandbox, args: &[&str]) -> String {
    let o = sb.run(args);
    assert_eq!(o.status.code(), Some(1), "ccide {args:?}: {}", stderr(&o));
    stderr(&o)
}

#[test]
fn a_mention_or_selection_reaches_the_sessions_whose_roots_hold_the_file() {
    let sb = Sandbox::new();
    let ws = canonical(&sb.ws());
    let a_file = sb.write("a/x.py", "x = 1\n");
    let b_file = sb.write("b dir/y.py", "y = 2\n");
    sb.write("top.py", "t = 3\n");
    let srv = sb.serve(&[]);
    // 2.1.112 sends the path as it is; later versions percent-encode it.
    let a_root = format!("file://{}/a", ws.display());
    let b_root = format!("file://{}/b%20dir", ws.display());
    let mut a = rooted(&srv, std::slice::from_ref(&a_root), 4001);
    let mut b = rooted(&srv, &[b_root], 4002);
    let st = sb.status();
    let roots: Vec<&Value> = st["clients"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["roots"])
        .collect();
    assert_eq!(
        roots,
        [&json!([ws.join("a")]), &json!([ws.join("b dir")])],
        "{st}"
    );

    let o = sb.run_ok(&["mention", "a/x.py:1"]);
    assert_eq!(
        stderr(&o),
        format!(
            "mentioned a/x.py (sent to session 1 (pid 4001, {}))\n",
            ws.join("a").display()
        )
    );
    let n = a.notification("at_mentioned");
    assert_eq!(
        n["params"],
        json!({"filePath": a_file, "lineStart": 0, "lineEnd": 0})
    );
    assert_eq!(b.before_ping(), Vec::<Value>::new(), "b heard of a's file");

    let o = sb.run_ok(&["select", "b dir/y.py:1"]);
    assert!(
        stderr(&o).ends_with(&format!(
            "(sent to session 2 (pid 4002, {}))\n",
            ws.join("b dir").display()
        )),
        "{}",
        stderr(&o)
    );
    assert_eq!(
        b.notification("selection_changed")["params"]["filePath"],
        json!(b_file)
    );
    assert_eq!(a.before_ping(), Vec::<Value>::new(), "a heard of b's file");

    // No session's folders hold top.py: nothing is sent, and the user is told how to pick.
    let e = run_fails(&sb, &["mention", "top.py"]);
    assert_eq!(
        e,
        format!(
            "ccide: no Claude Code session works in a folder that holds {} (ccide status lists them, with their folders); send it to one with --session ID\n",
            ws.join("top.py").display(),
        )
    );
    let listed = stdout(&sb.run_ok(&["status"]));
    for (pid, root) in [("4001", "a"), ("4002", "b dir")] {
        let line = listed.lines().find(|l| l.contains(&format!(" pid {pid} ")));
        let root = format!(" in {}", ws.join(root).display());
        assert!(
            line.is_some_and(|l| l.ends_with(&root)),
            "{root} in {listed}"
        );
    }
    // --session picks one, by id or by pid.
    sb.run_ok(&["mention", "top.py", "--session", "2"]);
    assert_eq!(
        b.notification("at_mentioned")["params"]["filePath"],
        json!(ws.join("top.py"))
    );
    sb.run_ok(&["mention", "top.py", "--session", "4001"]);
    assert_eq!(
        a.notification("at_mentioned")["params"]["filePath"],
        json!(ws.join("top.py"))
    );
    assert_eq!(b.before_ping(), Vec::<Value>::new());
    let e = run_fails(&sb, &["mention", "top.py", "--session", "9"]);
    assert!(
        e.starts_with("ccide: no Claude Code session has the id or pid 9 (ccide status"),
        "{e}"
    );

    // list_changed: serve asks again. Both now hold the whole folder: both get top.py, and
    // the command says so; a's own folder still goes to a alone (the deepest root wins).
    let ws_root = format!("file://{}", ws.display());
    for (c, first) in [(&mut a, a_root), (&mut b, ws_root.clone())] {
        c.send(&json!({"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}));
        answer_roots(c, &[first, ws_root.clone()]);
    }
    let o = sb.run_ok(&["mention", "top.py:1"]);
    assert!(
        stderr(&o).ends_with("; several sessions work there: to tell one, pass --session ID)\n"),
        "{}",
        stderr(&o)
    );
    for c in [&mut a, &mut b] {
        assert_eq!(
            c.notification("at_mentioned")["params"]["filePath"],
            json!(ws.join("top.py"))
        );
    }
    sb.run_ok(&["mention", "a/x.py"]);
    a.notification("at_mentioned");
    assert_eq!(b.before_ping(), Vec::<Value>::new());

    // One inbox: each diff says which session proposed it, in which folder.
    a.send_request(
        "tools/call",
        json!({"name": "openDiff", "arguments": {"old_file_path": a_file, "new_file_path": a_file,
               "new_file_contents": "x = 2\n", "tab_name": "t"}}),
    );
    let listed = sb.wait_for_listing(&["diff", "list", "--json"], 1);
    assert_eq!(
        (&listed[0]["client"], &listed[0]["worktree"]),
        (&json!(1), &json!(ws))
    );
    let rows = stdout(&sb.run_ok(&["diff", "list"]));
    assert!(
        rows.lines()
            .nth(1)
            .unwrap()
            .ends_with(&format!(" a/x.py [session 1, {}]", ws.display())),
        "{rows}"
    );
}

/// A session without the `roots` capability (Claude Code 1.0.x, other MCP clients) hears of
/// every file, as before; one that has roots is preferred for the files they hold.
#[test]
fn a_session_without_roots_hears_of_every_file_unless_one_with_roots_holds_it() {
    let sb = Sandbox::new();
    let ws = canonical(&sb.ws());
    sb.write("a/x.py", "x = 1\n");
    sb.write("top.py", "t = 3\n");
    let srv = sb.serve(&[]);
    let mut plain = srv.ready_client();
    let mut a = rooted(&srv, &[format!("file://{}/a", ws.display())], 4001);
    assert_eq!(sb.status()["clients"][0]["roots"], Value::Null);
    let o = sb.run_ok(&["mention", "top.py"]);
    assert_eq!(stderr(&o), "mentioned top.py (sent to 1 client)\n");
    plain.notification("at_mentioned");
    assert_eq!(a.before_ping(), Vec::<Value>::new());
    sb.run_ok(&["mention", "a/x.py"]);
    a.notification("at_mentioned");
    assert_eq!(plain.before_ping(), Vec::<Value>::new());
}

/// `git` with a fixed identity, in `dir`.
fn git(sb: &Sandbox, dir: &Path, args: &[&str]) {
    let o = Command::new("/usr/bin/git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "init.defaultBranch=main",
        ])
        .args(args)
        .current_dir(dir)
        .env("HOME", sb.home())
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("git is needed: apt-get install git (.ci/run does)");
    assert!(o.status.success(), "git {args:?}: {}", stderr(&o));
}

/// The sandbox's workspace made a git repository of one commit, with a linked worktree
/// `../wt-a` beside it: both canonical.
fn repository_with_worktree(sb: &Sandbox) -> (PathBuf, PathBuf) {
    let ws = canonical(&sb.ws());
    sb.write("main.py", "m = 1\n");
    git(sb, &ws, &["init", "-q"]);
    git(sb, &ws, &["add", "."]);
    git(sb, &ws, &["commit", "-qm", "one"]);
    git(sb, &ws, &["worktree", "add", "-q", "-b", "a", "../wt-a"]);
    (ws, canonical(&sb.root.join("wt-a")))
}

/// Waits for the lock file of `srv` to announce the folders `want`.
fn announced(srv: &Server, want: Value) {
    wait_for(
        &format!("the lock file to announce {want}"),
        Duration::from_secs(20),
        || (lock_folders(srv) == want).then_some(()),
    )
}

fn lock_folders(srv: &Server) -> Value {
    let lock: Value = serde_json::from_slice(&std::fs::read(&srv.lock_path).unwrap()).unwrap();
    lock["workspaceFolders"].clone()
}

#[test]
#[ignore = "needs git (.ci/run installs it)"]
fn the_worktrees_of_a_served_repository_join_the_lock_file_as_they_come_and_go() {
    let sb = Sandbox::new();
    let (ws, wt_a) = repository_with_worktree(&sb);
    // Inside the folder: served already, not announced again.
    git(&sb, &ws, &["worktree", "add", "-q", "-b", "in", "inner"]);
    let wt_b = canonical(sb.root.path()).join("wt b");
    let srv = sb.serve(&[]);
    let folders = |want: Value| announced(&srv, want);
    folders(json!([ws, wt_a]));
    git(&sb, &ws, &["worktree", "add", "-q", "-b", "b", "../wt b"]);
    // In the order of their paths ("wt b" before "wt-a").
    folders(json!([ws, wt_b, wt_a]));
    // Its files are within reach, as the workspace's are: a mention of one goes out.
    std::fs::write(wt_b.join("new.py"), "n = 1\n").unwrap();
    let mut c = srv.ready_client();
    let o = sb.run_ok(&["mention", &wt_b.join("new.py").display().to_string()]);
    assert!(
        stderr(&o).ends_with("(sent to 1 client)\n"),
        "{}",
        stderr(&o)
    );
    c.notification("at_mentioned");
    git(&sb, &ws, &["worktree", "remove", "../wt-a"]);
    folders(json!([ws, wt_b]));
    // A worktree deleted by hand goes too, though git lists it until `git worktree prune`.
    std::fs::remove_dir_all(&wt_b).unwrap();
    folders(json!([ws]));
    let e = sb.run(&["status"]);
    assert!(!stdout(&e).contains("wt b"), "{}", stdout(&e));
}

#[test]
#[ignore = "needs git (.ci/run installs it)"]
fn a_worktree_the_user_removed_stays_out_until_they_add_it_again() {
    let sb = Sandbox::new();
    let (ws, wt_a) = repository_with_worktree(&sb);
    let srv = sb.serve(&[]);
    let folders = |want: Value| announced(&srv, want);
    folders(json!([ws, wt_a]));
    let a = wt_a.display().to_string();
    sb.run_ok(&["workspace", "remove", &a]);
    folders(json!([ws]));
    // Another worktree joins: the folders were followed again, and the removed one stays out.
    git(&sb, &ws, &["worktree", "add", "-q", "-b", "b", "../wt-b"]);
    let wt_b = canonical(&sb.root.join("wt-b"));
    folders(json!([ws, wt_b]));
    // Added by the user: after the others.
    sb.run_ok(&["workspace", "add", &a]);
    folders(json!([ws, wt_b, wt_a]));
}

/// A session's folders come from the client: `select` and `mention` name the session with the
/// control characters of its folder made visible.
#[test]
fn a_session_is_named_with_its_folder_made_safe_to_print() {
    let sb = Sandbox::new();
    let ws = canonical(&sb.ws());
    sb.write("e\u{1b}[31m/x.py", "x = 1\n");
    let srv = sb.serve(&[]);
    let _c = rooted(&srv, &[format!("file://{}/e%1B[31m", ws.display())], 4003);
    let o = sb.run_ok(&["mention", "e\u{1b}[31m/x.py"]);
    assert!(
        stderr(&o).ends_with(&format!(
            "(sent to session 1 (pid 4003, {}/e\\u{{1b}}[31m))\n",
            ws.display()
        )),
        "{:?}",
        stderr(&o)
    );
}

#[test]
#[ignore = "needs git (.ci/run installs it)"]
fn a_served_linked_worktree_follows_its_repository_but_not_a_worktree_another_server_serves() {
    let sb = Sandbox::new();
    let (ws, wt_a) = repository_with_worktree(&sb);
    git(&sb, &ws, &["worktree", "add", "-q", "-b", "b", "../wt-b"]);
    let wt_b = canonical(&sb.root.join("wt-b"));
    std::fs::create_dir(wt_b.join("sub")).unwrap();
    let serve = |folder: &Path, state: &str| {
        let (f, s) = (folder.display().to_string(), sb.root.join(state));
        let args = [
            "serve",
            "--workspace",
            &f,
            "--state-dir",
            s.to_str().unwrap(),
        ];
        Server::spawn(&mut sb.command(&args), &sb.config())
    };
    // Another server holds a folder inside wt-b: a second lock file holding wt-b would leave
    // Claude Code there connecting to neither.
    let mut other = serve(&wt_b.join("sub"), "state-b");
    let srv = serve(&wt_a, "state-a");
    let folders = |want: Value| announced(&srv, want);
    folders(json!([wt_a, ws]));
    let why = format!(
        "git worktree {} not served: the ccide server of pid {} serves it\n",
        wt_b.display(),
        other.pid()
    );
    wait_for("the reason in the log", Duration::from_secs(20), || {
        srv.log().contains(&why).then_some(())
    });
    assert_eq!(lock_folders(&other), json!([wt_b.join("sub")]));
    // Once that server stopped, wt-b is this one's.
    other.stop_with("TERM");
    folders(json!([wt_a, ws, wt_b]));
    // Said once, not at every look.
    assert_eq!(srv.log().matches(&why).count(), 1, "{}", srv.log());
}
