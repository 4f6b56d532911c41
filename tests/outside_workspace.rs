//! Nothing outside the workspace is read, listed or written: hostile paths given to every tool
//! and every command, files and folders listed, a symlink swapped in after a check or racing a
//! write, an open tab swapped for a symlink, arguments that are not UTF-8, a FIFO in the
//! workspace. tests/confinement.rs checks that a file ccide named before and replaced by a
//! symlink since is never read through it again.

use std::collections::BTreeMap;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::util::*;
use crate::wire::*;
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------------
// Files and links outside the workspace, and a snapshot of them.

pub const SECRET: &str = "SECRET outside the workspace\n";

/// Files and symlinks around and inside the workspace that lead outside: `outside.txt`,
/// `outdir/secret.txt` and `wsx/secret.txt` (a sibling whose name extends the workspace's),
/// reached from inside by `link.txt`, `linkdir`, a self-loop and non-UTF-8 names.
pub fn plant_outside(sb: &Sandbox) {
    sb.write("inside.txt", "inside\n");
    std::fs::write(sb.root.join("outside.txt"), SECRET).unwrap();
    sb.root.write("outdir/secret.txt", SECRET);
    sb.root.write("wsx/secret.txt", SECRET);
    let ws = sb.ws();
    std::os::unix::fs::symlink(sb.root.join("outside.txt"), ws.join("link.txt")).unwrap();
    std::os::unix::fs::symlink(sb.root.join("outdir"), ws.join("linkdir")).unwrap();
    std::os::unix::fs::symlink(ws.join("loop"), ws.join("loop")).unwrap();
    let odd = std::ffi::OsStr::from_bytes(b"\xff\xfe-link.txt");
    std::os::unix::fs::symlink(sb.root.join("outside.txt"), ws.join(odd)).unwrap();
    let odd_dir = std::ffi::OsStr::from_bytes(b"\xff\xfe-dir");
    std::os::unix::fs::symlink(sb.root.join("outdir"), ws.join(odd_dir)).unwrap();
}

/// Everything in the sandbox outside the workspace and ccide's own directories, with content.
pub fn outside_snapshot(sb: &Sandbox) -> BTreeMap<PathBuf, String> {
    let mut out = BTreeMap::new();
    let skip = [sb.ws(), sb.state(), sb.config(), sb.home()];
    let mut stack = vec![sb.root.path().to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap().flatten() {
            let p = e.path();
            if skip.contains(&p)
                || (dir == sb.root.path() && p.extension().is_some_and(|x| x == "log"))
            {
                continue;
            }
            let m = std::fs::symlink_metadata(&p).unwrap();
            let what = if m.file_type().is_symlink() {
                format!("link to {}", std::fs::read_link(&p).unwrap().display())
            } else if m.is_dir() {
                stack.push(p.clone());
                format!("dir {:o}", m.mode())
            } else {
                format!(
                    "file {:o} {}",
                    m.mode(),
                    String::from_utf8_lossy(&std::fs::read(&p).unwrap())
                )
            };
            out.insert(p, what);
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Nothing outside the workspace.

/// Paths that must be refused: (path, whether the refusal must say it is outside).
fn hostile_paths(sb: &Sandbox) -> Vec<(String, bool)> {
    let outside = sb.root.join("outside.txt");
    vec![
        ("../outside.txt".into(), true),
        (s(&outside).into(), true),
        ("link.txt".into(), true),
        ("linkdir/secret.txt".into(), true),
        ("linkdir/new.txt".into(), true),
        ("linkdir".into(), true),
        ("../wsx/secret.txt".into(), true),
        ("../outdir".into(), true),
        ("./../outside.txt".into(), true),
        ("inside.txt/../../outside.txt".into(), true),
        (format!("{}/../outside.txt", sb.ws().display()), true),
        (format!("/proc/self/root{}", outside.display()), true),
        ("/etc/passwd".into(), true),
        ("/".into(), true),
        ("inside.txt\u{0}/../../outside.txt".into(), false),
        ("a/".repeat(2100) + "x", false),
        ("x".repeat(300), false),
        ("loop/x".into(), false),
        (String::new(), false),
    ]
}

/// Words that say why a path was refused.
const REASONS: &[&str] = &[
    "outside the workspace",
    "NUL",
    "too long",
    "not found",
    "File not found",
    "cannot resolve",
    "empty path",
    "does not exist",
    "is a directory",
    "not open",
    "symbolic links",
];

fn leaked(v: &Value) -> bool {
    let t = v.to_string();
    t.contains("SECRET") || t.contains("root:x:0:0")
}

/// The text a refusal says, or None when the answer is not a refusal.
fn refusal(tool: &str, r: &Value) -> Option<String> {
    if let Some(e) = r.get("error") {
        return e["message"].as_str().map(String::from);
    }
    let res = &r["result"];
    let text = texts(r).join("\n");
    match tool {
        "checkDocumentDirty" | "saveDocument" => {
            let v: Value = serde_json::from_str(&text).ok()?;
            (v["success"] == false).then(|| v["message"].as_str().unwrap_or("").to_string())
        }
        "open_files" => {
            let v: Value = serde_json::from_str(&text).ok()?;
            (v["opened_files"] == json!([])).then(|| v["errors"].to_string())
        }
        _ => (res["isError"] == true).then_some(text),
    }
}

#[test]
fn no_tool_reads_lists_or_writes_outside_the_workspace() {
    let sb = Sandbox::new();
    plant_outside(&sb);
    let before = outside_snapshot(&sb);
    let mut srv = sb.serve(&[]);
    let mut c = Conn::open(srv.port, &srv.token, true);
    c.handshake();
    let mut wrong = Vec::new();
    let mut n = 100;
    for (p, says_outside) in hostile_paths(&sb) {
        let short: String = p.chars().take(60).collect();
        let seed_relative = p.starts_with('/');
        let calls: Vec<(&str, Value)> = vec![
            (
                "openFile",
                json!({"filePath": p, "startText": "SECRET", "makeFrontmost": false}),
            ),
            ("open_files", json!({"file_paths": [p]})),
            (
                "openDiff",
                json!({"old_file_path": p, "new_file_path": p, "new_file_contents": "pwned\n", "tab_name": format!("t{n}")}),
            ),
            ("checkDocumentDirty", json!({"filePath": p})),
            ("saveDocument", json!({"filePath": p})),
            ("readFile", json!({"path": p})),
            ("writeFile", json!({"path": p, "content": "pwned\n"})),
            ("reformat_file", json!({"file_path": p})),
        ];
        for (tool, args) in calls {
            n += 1;
            c.send(&json!({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {"name": tool, "arguments": args}}));
            let Some(r) = c.try_response(&json!(n), Duration::from_secs(3)) else {
                wrong.push(format!("{tool} {short:?}: no immediate answer (accepted?)"));
                continue;
            };
            let outside_expected =
                says_outside && !(seed_relative && matches!(tool, "readFile" | "writeFile"));
            match refusal(tool, &r) {
                None => wrong.push(format!("{tool} {short:?}: not refused: {r:.300}")),
                Some(m) if outside_expected && !m.contains("outside the workspace") => {
                    wrong.push(format!(
                        "{tool} {short:?}: refused without saying it is outside: {m:.300}"
                    ));
                }
                Some(m) if !REASONS.iter().any(|w| m.contains(w)) => {
                    wrong.push(format!(
                        "{tool} {short:?}: refused without a reason: {m:.300}"
                    ));
                }
                Some(_) => {}
            }
            if leaked(&r) {
                wrong.push(format!("{tool} {short:?}: leaked: {r:.300}"));
            }
        }
        for method in ["readFile", "writeFile"] {
            n += 1;
            let r = c.request(json!(n), method, json!({"path": p, "content": "pwned\n"}));
            if r["error"]["code"] != -32603 || leaked(&r) {
                wrong.push(format!("direct {method} {short:?}: {r:.300}"));
            }
        }
        for (tool, args) in [
            ("close_tab", json!({"tab_name": p})),
            ("getDiagnostics", json!({"uri": format!("file://{p}")})),
        ] {
            n += 1;
            let r = c.call(json!(n), tool, args);
            if leaked(&r) || r.get("error").is_some() {
                wrong.push(format!("{tool} {short:?}: {r:.300}"));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} problems:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    // Nothing was opened, selected, buffered or pending; a path inside still works.
    let st = status(&sb);
    assert_eq!(
        (&st["tabs"], &st["documents"], &st["diffs"]),
        (&json!([]), &json!([]), &json!([]))
    );
    assert_eq!(st["selection"], Value::Null);
    assert_eq!(
        texts(&c.call(json!(1), "readFile", json!({"path": "inside.txt"}))),
        vec!["inside\n"]
    );
    assert_eq!(
        outside_snapshot(&sb),
        before,
        "something outside the workspace changed"
    );
    assert_alive(&mut srv);
}

#[test]
fn no_command_reaches_outside_the_workspace() {
    let sb = Sandbox::new();
    plant_outside(&sb);
    let before = outside_snapshot(&sb);
    let mut srv = sb.serve(&[]);
    let mut c = Conn::open(srv.port, &srv.token, true);
    c.handshake();
    let paths: Vec<(String, bool)> = hostile_paths(&sb)
        .into_iter()
        .filter(|(p, _)| !p.is_empty() && !p.starts_with("a/a/"))
        .collect();
    let mut wrong = Vec::new();
    for (p, says_outside) in &paths {
        let short: String = p.chars().take(60).collect();
        let check = |what: &str, ok: bool, message: &str, wrong: &mut Vec<String>| {
            if ok {
                wrong.push(format!("{what} {short:?}: accepted"));
            } else if *says_outside && !message.contains("outside the workspace") {
                wrong.push(format!("{what} {short:?}: no 'outside': {message:.300}"));
            } else if !REASONS.iter().any(|w| message.contains(w)) {
                wrong.push(format!("{what} {short:?}: no reason: {message:.300}"));
            }
            if message.contains("SECRET") {
                wrong.push(format!("{what} {short:?}: leaked {message:.300}"));
            }
        };
        // Through the control socket, as every command does (NUL bytes included).
        for req in [
            json!({"cmd": "select", "path": p, "range": {"start_line": 1}}),
            json!({"cmd": "select", "path": p}),
            json!({"cmd": "mention", "path": p}),
            json!({"cmd": "open", "paths": [p]}),
            json!({"cmd": "close", "paths": [p]}),
            json!({"cmd": "buffer", "path": p, "content": "pwned\n"}),
            json!({"cmd": "diagnostics.clear", "path": p}),
        ] {
            let r = control(&sb, req.clone());
            check(
                req["cmd"].as_str().unwrap(),
                r["ok"] == true,
                r["error"].as_str().unwrap_or(""),
                &mut wrong,
            );
        }
        // And the commands themselves, for what can be an argument.
        if p.contains('\0') {
            continue;
        }
        for args in [
            vec!["select", p.as_str()],
            vec!["mention", p.as_str()],
            vec!["open", p.as_str()],
            vec!["close", p.as_str()],
            vec!["diagnostics", "clear", p.as_str()],
        ] {
            let o = sb.run(&args);
            check(
                &args[..args.len() - 1].join(" "),
                o.status.success(),
                &stderr(&o),
                &mut wrong,
            );
            if o.status.code() != Some(1) {
                wrong.push(format!("{args:?}: exit {:?}", o.status.code()));
            }
        }
        let o = sb.run_stdin(&["buffer", p], b"pwned\n");
        check("buffer", o.status.success(), &stderr(&o), &mut wrong);
        let spec = format!("{p}:1");
        let o = sb.run(&["select", &spec]);
        check("select FILE:1", o.status.success(), &stderr(&o), &mut wrong);
    }
    assert!(
        wrong.is_empty(),
        "{} problems:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    let notes: Vec<Value> = c
        .before_ping(json!("barrier"))
        .into_iter()
        .filter(|v| v.get("method").is_some())
        .collect();
    assert!(
        notes.is_empty(),
        "notifications about refused paths: {notes:?}"
    );
    let st = status(&sb);
    assert_eq!((&st["tabs"], &st["documents"]), (&json!([]), &json!([])));
    assert_eq!(st["selection"], Value::Null);
    assert_eq!(
        outside_snapshot(&sb),
        before,
        "something outside the workspace changed"
    );
    assert_alive(&mut srv);
}

#[test]
fn list_files_and_workspace_info_list_nothing_outside_the_workspace() {
    let sb = Sandbox::new();
    plant_outside(&sb);
    sb.write("src/a.txt", "a\n");
    let odd = std::ffi::OsStr::from_bytes(b"odd-\xff.txt");
    std::fs::write(sb.ws().join(odd), "odd\n").unwrap();
    let srv = sb.serve(&[]);
    let mut c = Conn::open(srv.port, &srv.token, true);
    c.handshake();
    let mut n = 0;
    for pattern in [
        Value::Null,
        json!("**"),
        json!("*"),
        json!("**/*secret*"),
        json!("../*"),
        json!("../**"),
        json!("/**"),
        json!("linkdir/*"),
        json!("linkdir/**"),
        json!(".."),
        json!("/etc/*"),
        json!("\u{0}"),
        json!("**/**/**/**/**/**/**/**"),
    ] {
        n += 1;
        let r = c.request(json!(n), "listFiles", json!({"pattern": pattern}));
        let files = r["result"]["files"]
            .as_array()
            .unwrap_or_else(|| panic!("{r}"));
        for f in files {
            let f = f.as_str().unwrap();
            assert!(
                !f.contains("secret") && !f.contains("outside") && !f.contains("link"),
                "{pattern}: {f}"
            );
            if f.contains('\u{fffd}') {
                continue; // the non-UTF-8 name, shown lossily
            }
            let p = sb.ws().join(f);
            assert!(
                std::fs::symlink_metadata(&p).unwrap().is_file(),
                "{pattern}: {f}"
            );
            assert!(
                std::fs::canonicalize(&p).unwrap().starts_with(sb.ws()),
                "{pattern}: {f}"
            );
        }
    }
    let all = c.request(json!("all"), "listFiles", json!({}));
    let mut names: Vec<String> = all["result"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap().to_string())
        .collect();
    names.sort();
    assert_eq!(names, ["inside.txt", "odd-\u{fffd}.txt", "src/a.txt"]);
    let info = c.request(json!("info"), "getWorkspaceInfo", json!({}));
    assert_eq!(info["result"]["fileCount"], 3, "{info}");
}

#[test]
fn a_symlink_swapped_in_after_a_check_redirects_no_write() {
    let sb = Sandbox::new();
    plant_outside(&sb);
    sb.write("sub/secret.txt", "mine\n");
    let before = outside_snapshot(&sb);
    let srv = sb.serve(&[]);
    let mut c = Conn::open(srv.port, &srv.token, true);
    c.handshake();
    let ws = sb.ws();
    let save = |c: &mut Conn, id: &str, p: &str| -> Value {
        let r = c.call(json!(id), "saveDocument", json!({"filePath": p}));
        serde_json::from_str(&texts(&r)[0]).unwrap()
    };
    // A file buffered, then replaced by a symlink leading out.
    let r = control(
        &sb,
        json!({"cmd": "buffer", "path": "inside.txt", "content": "pwned\n"}),
    );
    assert_eq!(r["ok"], true, "{r}");
    std::fs::remove_file(ws.join("inside.txt")).unwrap();
    std::os::unix::fs::symlink(sb.root.join("outside.txt"), ws.join("inside.txt")).unwrap();
    let r = save(&mut c, "a", "inside.txt");
    assert_eq!(r["success"], false, "{r}");
    assert!(
        r["message"]
            .as_str()
            .unwrap()
            .contains("outside the workspace"),
        "{r}"
    );
    // Its directory buffered, then replaced by a symlink to a directory outside.
    let r = control(
        &sb,
        json!({"cmd": "buffer", "path": "sub/secret.txt", "content": "pwned\n"}),
    );
    assert_eq!(r["ok"], true, "{r}");
    std::fs::rename(ws.join("sub"), ws.join("sub.real")).unwrap();
    std::os::unix::fs::symlink(sb.root.join("outdir"), ws.join("sub")).unwrap();
    let r = save(&mut c, "b", "sub/secret.txt");
    assert_eq!(r["success"], false, "{r}");
    assert!(
        r["message"]
            .as_str()
            .unwrap()
            .contains("outside the workspace"),
        "{r}"
    );
    // A name that was free when checked, then a dangling symlink leading out.
    std::os::unix::fs::symlink(sb.root.join("made-outside.txt"), ws.join("fresh.txt")).unwrap();
    let r = c.call(
        json!("c"),
        "writeFile",
        json!({"path": "fresh.txt", "content": "pwned\n"}),
    );
    assert_eq!(r["result"]["isError"], true, "{r}");
    // A diff opened on a file that is then swapped: accepting writes nothing anywhere.
    sb.write("diffed.txt", "diffed\n");
    c.send(&json!({"jsonrpc": "2.0", "id": "d", "method": "tools/call", "params": {"name": "openDiff", "arguments": {"old_file_path": "diffed.txt", "new_file_path": "diffed.txt", "new_file_contents": "pwned\n", "tab_name": "swap"}}}));
    wait_for("the diff", DEADLINE, || {
        (control(&sb, json!({"cmd": "diff.list"}))["diffs"]
            .as_array()?
            .len()
            == 1)
            .then_some(())
    });
    std::fs::remove_file(ws.join("diffed.txt")).unwrap();
    std::os::unix::fs::symlink(sb.root.join("outside.txt"), ws.join("diffed.txt")).unwrap();
    let r = control(
        &sb,
        json!({"cmd": "diff.settle", "target": "swap", "accept": true}),
    );
    assert_eq!(r["ok"], true, "{r}");
    assert_eq!(
        texts(&c.response(&json!("d"), DEADLINE)),
        vec!["FILE_SAVED", "pwned\n"]
    );
    // reformat_file and select on the swapped names are refused too.
    let r = c.call(
        json!("e"),
        "reformat_file",
        json!({"file_path": "inside.txt"}),
    );
    assert!(texts(&r)[0].contains("outside the workspace"), "{r}");
    let r = control(
        &sb,
        json!({"cmd": "select", "path": "sub/secret.txt", "range": {"start_line": 1}}),
    );
    assert_eq!(r["ok"], false, "{r}");
    assert_eq!(
        outside_snapshot(&sb),
        before,
        "something outside the workspace changed"
    );
    for link in ["inside.txt", "sub", "fresh.txt", "diffed.txt"] {
        assert!(
            std::fs::symlink_metadata(ws.join(link))
                .unwrap()
                .file_type()
                .is_symlink(),
            "{link}"
        );
    }
}

#[test]
fn an_open_tab_swapped_for_a_symlink_is_not_read_through_it() {
    let sb = Sandbox::new();
    plant_outside(&sb);
    std::fs::write(sb.root.join("outside.txt"), "1\n2\n3\n4\n5\n6\n7\n").unwrap();
    let srv = sb.serve(&[]);
    let mut c = Conn::open(srv.port, &srv.token, true);
    c.handshake();
    let r = c.call(json!(1), "openFile", json!({"filePath": "inside.txt"}));
    assert!(r["result"]["isError"] != true, "{r}");
    std::fs::remove_file(sb.ws().join("inside.txt")).unwrap();
    std::os::unix::fs::symlink(sb.root.join("outside.txt"), sb.ws().join("inside.txt")).unwrap();
    let r = c.call(json!(2), "getOpenEditors", json!({}));
    let tabs: Value = serde_json::from_str(&texts(&r)[0]).unwrap();
    assert_ne!(
        tabs["tabs"][0]["lineCount"], 7,
        "read through the symlink: {tabs}"
    );
}

#[test]
fn racing_symlink_swaps_never_redirect_a_write_outside() {
    let sb = Sandbox::new();
    plant_outside(&sb);
    let ws = sb.ws();
    std::fs::create_dir(ws.join("race")).unwrap();
    let srv = sb.serve(&[]);
    let mut c = Conn::open(srv.port, &srv.token, true);
    c.handshake();
    // A thread swaps ws/race between a real directory and a symlink to outdir.
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let (stop, ws, outdir) = (stop.clone(), ws.clone(), sb.root.join("outdir"));
        std::thread::spawn(move || {
            let mut swaps = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let _ = std::fs::rename(ws.join("race"), ws.join("race.real"));
                let _ = std::os::unix::fs::symlink(&outdir, ws.join("race"));
                std::thread::yield_now();
                let _ = std::fs::remove_file(ws.join("race"));
                let _ = std::fs::rename(ws.join("race.real"), ws.join("race"));
                swaps += 1;
            }
            swaps
        })
    };
    let started = Instant::now();
    let mut sent = 0;
    let escaped = sb.root.join("outdir/pwned.txt");
    while started.elapsed() < Duration::from_secs(4) && !escaped.exists() {
        for _ in 0..50 {
            sent += 1;
            c.send(&json!({"jsonrpc": "2.0", "id": sent, "method": "writeFile", "params": {"path": "race/pwned.txt", "content": "pwned\n"}}));
        }
        c.response(&json!(sent), DEADLINE);
        c.kept.clear();
    }
    stop.store(true, Ordering::SeqCst);
    let swaps = swapper.join().unwrap();
    assert!(
        !escaped.exists(),
        "a write landed outside the workspace after {sent} writes and {swaps} swaps"
    );
}

#[test]
fn arguments_that_are_not_utf8_are_refused_without_a_panic() {
    let sb = Sandbox::new();
    plant_outside(&sb);
    let srv = sb.serve(&[]);
    let odd = std::ffi::OsStr::from_bytes(b"\xff\xfe-link.txt");
    let mut wrong = Vec::new();
    for cmd in [
        &["open"][..],
        &["select"],
        &["mention"],
        &["close"],
        &["diagnostics", "clear"],
    ] {
        let o = sb
            .command(cmd)
            .arg(odd)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        if !matches!(o.status.code(), Some(1 | 2)) || stderr(&o).contains("panicked") {
            wrong.push(format!(
                "{cmd:?}: exit {:?}: {:.200}",
                o.status.code(),
                stderr(&o)
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    assert_eq!(status(&sb)["tabs"], json!([]));
    drop(srv);
}

#[test]
fn a_fifo_in_the_workspace_hangs_nothing() {
    let sb = Sandbox::new();
    sb.write("plain.txt", "plain\n");
    let fifo = sb.ws().join("pipe.txt");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let mut srv = sb.serve(&[]);
    let mut hung = Vec::new();
    for (tool, args) in [
        ("readFile", json!({"path": "pipe.txt"})),
        ("openFile", json!({"filePath": "pipe.txt"})),
        (
            "openDiff",
            json!({"old_file_path": "pipe.txt", "new_file_contents": "x", "tab_name": "fifo"}),
        ),
        ("reformat_file", json!({"file_path": "pipe.txt"})),
    ] {
        let mut c = Conn::open(srv.port, &srv.token, true);
        c.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": tool, "arguments": args}}));
        if c.try_response(&json!(1), Duration::from_secs(2)).is_none() {
            hung.push(tool.to_string());
        }
    }
    let sel = control_within(
        &sb,
        json!({"cmd": "select", "path": "pipe.txt", "range": {"start_line": 1}}),
        Duration::from_secs(2),
    );
    if sel.is_none() {
        hung.push("ccide select".into());
    }
    // Unblock whoever still waits on the FIFO (a writer that opens and closes: end of file).
    const O_NONBLOCK: i32 = 0o4000;
    for _ in 0..hung.len() {
        use std::os::unix::fs::OpenOptionsExt;
        let _ = std::fs::OpenOptions::new()
            .write(true)
            .custom_flags(O_NONBLOCK)
            .open(&fifo);
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(hung.is_empty(), "hung on a FIFO: {}", hung.join(", "));
    assert_alive(&mut srv);
}
