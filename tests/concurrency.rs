//! Many clients at once, and a paused server: sixteen busy clients and the control channel at
//! once each get every answer exactly once; a server paused and resumed keeps its healthy
//! clients; a client that stops answering the keepalive pings is dropped and its diffs cleaned.

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::util::*;
use crate::wire::*;
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------------
// Concurrency.

/// One of 16 clients: 1,000 mixed requests sent at once, each answered exactly once.
fn mixed_client(port: u16, token: String, k: usize) -> Result<usize, String> {
    let mut c = Conn::open(port, &token, true);
    c.handshake();
    let mut owed: HashMap<String, &str> = HashMap::new();
    let mut parse_errors = 0;
    for i in 0..1000 {
        let id = json!(format!("c{k}-{i}"));
        let (kind, msg) = match i % 9 {
            0 => (
                "ping",
                json!({"jsonrpc": "2.0", "id": id, "method": "ping"}),
            ),
            1 => (
                "list",
                json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"}),
            ),
            2 => (
                "folders",
                json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "getWorkspaceFolders", "arguments": {}}}),
            ),
            3 => (
                "editors",
                json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "getOpenEditors", "arguments": {}}}),
            ),
            4 => (
                "diagnostics",
                json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "getDiagnostics", "arguments": {}}}),
            ),
            5 => (
                "read",
                json!({"jsonrpc": "2.0", "id": id, "method": "readFile", "params": {"path": "f0.txt"}}),
            ),
            6 => (
                "read tool",
                json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "readFile", "arguments": {"path": "f1.txt"}}}),
            ),
            7 => (
                "bad method",
                json!({"jsonrpc": "2.0", "id": id, "method": "no/such/method"}),
            ),
            _ => {
                c.text(r#"{"jsonrpc":"2.0","id":"#);
                parse_errors += 1;
                continue;
            }
        };
        owed.insert(id_key(&id), kind);
        c.send(&msg);
    }
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut nulls = 0;
    let end = Instant::now() + Duration::from_secs(40);
    while seen.len() < owed.len() || nulls < parse_errors {
        let left = end.saturating_duration_since(Instant::now());
        let Some(v) = c.next(left) else {
            return Err(format!(
                "client {k}: {} of {} answered, {nulls} parse errors; ended: {:?}",
                seen.len(),
                owed.len(),
                c.closed
            ));
        };
        if v.get("method").is_some() {
            continue;
        }
        if v["id"].is_null() {
            if v["error"]["code"] != -32700 {
                return Err(format!("client {k}: {v}"));
            }
            nulls += 1;
            continue;
        }
        let key = id_key(&v["id"]);
        let Some(kind) = owed.get(&key) else {
            return Err(format!(
                "client {k}: an answer to no request of mine: {v:.200}"
            ));
        };
        *seen.entry(key).or_default() += 1;
        let ok = match *kind {
            "ping" => v["result"] == json!({}),
            "list" => v["result"]["tools"]
                .as_array()
                .is_some_and(|t| t.len() > 10),
            "read" => v["result"] == "one\ntwo\nthree\n",
            "read tool" => texts(&v) == ["one\ntwo\nthree\n"],
            "bad method" => v["error"]["code"] == -32601,
            "editors" => {
                let tabs = json_text(&v)["tabs"].clone();
                tabs.as_array()
                    .unwrap()
                    .iter()
                    .filter(|t| t["isActive"] == true)
                    .count()
                    <= 1
            }
            _ => v["result"]["content"].is_array(),
        };
        if !ok {
            return Err(format!("client {k}: wrong answer for {kind}: {v:.300}"));
        }
    }
    // Nothing twice, nothing late.
    for v in c.before_ping(json!(format!("c{k}-barrier"))) {
        if v.get("method").is_none() {
            return Err(format!("client {k}: an extra answer: {v:.200}"));
        }
    }
    if let Some((id, n)) = seen.iter().find(|(_, n)| **n != 1) {
        return Err(format!("client {k}: {n} answers to {id}"));
    }
    Ok(owed.len())
}

#[test]
fn sixteen_busy_clients_and_the_control_channel_at_once() {
    let sb = Sandbox::new();
    let files: Vec<PathBuf> = (0..4)
        .map(|i| sb.write(&format!("f{i}.txt"), "one\ntwo\nthree\n"))
        .collect();
    let srv = sb.serve(&[]);
    let started = Instant::now();
    let clients: Vec<JoinHandle<Result<usize, String>>> = (0..16)
        .map(|k| {
            let token = srv.token.clone();
            let port = srv.port;
            std::thread::spawn(move || mixed_client(port, token, k))
        })
        .collect();
    // Diffs opened by one more client and settled through the control channel.
    let diffs = {
        let (port, token, files) = (srv.port, srv.token.clone(), files.clone());
        let state = sb.state();
        std::thread::spawn(move || {
            let ctl = |req: Value| -> Value {
                let mut sock = UnixStream::connect(state.join("control.sock")).unwrap();
                sock.write_all(format!("{req}\n").as_bytes()).unwrap();
                let mut line = String::new();
                BufReader::new(sock).read_line(&mut line).unwrap();
                serde_json::from_str(&line).unwrap()
            };
            let mut d = Conn::open(port, &token, true);
            d.handshake();
            for n in 0..30 {
                let tab = format!("tab {n}");
                let f = files[n % 4].to_str().unwrap();
                d.send(&json!({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {"name": "openDiff", "arguments": {"old_file_path": f, "new_file_path": f, "new_file_contents": format!("{n}\n"), "tab_name": tab}}}));
                wait_for("the diff to be pending", DEADLINE, || {
                    let l = ctl(json!({"cmd": "diff.list"}));
                    l["diffs"]
                        .as_array()?
                        .iter()
                        .any(|x| x["tab_name"] == tab)
                        .then_some(())
                });
                let accept = n % 2 == 0;
                let r = ctl(json!({"cmd": "diff.settle", "target": tab, "accept": accept}));
                assert_eq!(r["ok"], true, "{r}");
                let a = d.response(&json!(n), DEADLINE);
                let want = if accept {
                    "FILE_SAVED"
                } else {
                    "DIFF_REJECTED"
                };
                assert_eq!(texts(&a)[0], want, "{a}");
            }
        })
    };
    // Meanwhile the selection moves and diagnostics are imported, through the socket and the
    // binary.
    let mut last_selection = Value::Null;
    let mut diagnostics: BTreeMap<String, String> = BTreeMap::new();
    for i in 0..60 {
        let f = format!("f{}.txt", i % 4);
        let line = i % 3 + 1;
        if i % 15 == 7 {
            let o = sb.run(&["select", &format!("{f}:{line}")]);
            assert!(o.status.success(), "{}", stderr(&o));
        } else {
            let r = control(
                &sb,
                json!({"cmd": "select", "path": f, "range": {"start_line": line}}),
            );
            assert_eq!(r["ok"], true, "{r}");
            last_selection = r["selection"].clone();
        }
        if i % 6 == 0 {
            let msg = format!("problem {i}");
            let r = control(
                &sb,
                json!({"cmd": "diagnostics.import", "format": "compiler", "cwd": s(&sb.ws()), "text": format!("{f}:{line}:1: error: {msg}\n")}),
            );
            assert_eq!(r["ok"], true, "{r}");
            diagnostics.insert(s(&sb.ws().join(&f)).to_string(), msg);
        }
    }
    let mut answered = 0;
    for (k, h) in clients.into_iter().enumerate() {
        match h.join() {
            Ok(Ok(n)) => answered += n,
            Ok(Err(e)) => panic!("{e}"),
            Err(_) => panic!("client {k} panicked"),
        }
    }
    diffs.join().expect("the diff client");
    let took = started.elapsed();
    eprintln!("{answered} requests answered exactly once in {took:?}");
    assert!(took < Duration::from_secs(60), "{took:?}");
    // The final model is consistent (once the servers notice the clients are gone).
    wait_for("the clients to be gone", DEADLINE, || {
        (status(&sb)["clients"] == json!([])).then_some(())
    });
    let o = sb.run(&["status", "--json"]);
    let st: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(st["selection"], last_selection);
    let active: Vec<&Value> = st["tabs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["active"] == true)
        .collect();
    assert_eq!(active.len(), 1, "{st}");
    assert_eq!(active[0]["path"], last_selection["filePath"]);
    assert_eq!(st["diffs"], json!([]));
    assert_eq!(
        std::fs::read_dir(sb.state().join("diffs")).unwrap().count(),
        0
    );
    let stored = control(&sb, json!({"cmd": "diagnostics.list"}));
    let got: BTreeMap<String, String> = stored["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().to_string(),
                f["diagnostics"][0]["message"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(got, diagnostics);
}

// ---------------------------------------------------------------------------------------------
// Keepalive under pause.

#[test]
fn a_paused_server_keeps_its_healthy_clients() {
    let sb = Sandbox::new();
    let mut srv = sb.serve(&["--ping-interval", "0.5", "--ping-timeout", "0.5"]);
    let mut healthy: Vec<Conn> = (0..2)
        .map(|_| Conn::open(srv.port, &srv.token, true))
        .collect();
    for c in &mut healthy {
        c.handshake();
    }
    let answered = |healthy: &[Conn], n: &[u64]| {
        healthy
            .iter()
            .zip(n)
            .all(|(c, n)| c.pings_answered() >= *n)
            .then_some(())
    };
    wait_for("each client to answer a keepalive ping", DEADLINE, || {
        answered(&healthy, &[1, 1])
    });
    srv.signal("STOP");
    // Asked during the pause, answered after it.
    healthy[0].send(&json!({"jsonrpc": "2.0", "id": "paused", "method": "ping"}));
    // The pause itself, longer than --ping-interval and --ping-timeout together.
    std::thread::sleep(Duration::from_secs(2));
    srv.signal("CONT");
    assert_eq!(
        healthy[0].response(&json!("paused"), DEADLINE)["result"],
        json!({})
    );
    // Two more keepalive pings each after the pause: a deadline the pause made them miss would
    // have closed them by then.
    let after: Vec<u64> = healthy.iter().map(|c| c.pings_answered() + 2).collect();
    wait_for("two keepalive pings after the pause", DEADLINE, || {
        for (i, c) in healthy.iter_mut().enumerate() {
            if let Some(v) = c.read(Duration::ZERO) {
                c.kept.push_back(v);
            }
            assert_eq!(c.closed, None, "client {i} was dropped: {}", srv.log());
        }
        answered(&healthy, &after)
    });
    for (i, c) in healthy.iter_mut().enumerate() {
        let r = c.request(json!(format!("after-{i}")), "ping", json!({}));
        assert_eq!(r["result"], json!({}), "client {i}");
        assert_eq!(c.closed, None, "client {i} was dropped: {}", srv.log());
    }
    assert!(
        srv.log().contains("late (process paused?)"),
        "{}",
        srv.log()
    );
    assert!(!srv.log().contains("no answer to ping"), "{}", srv.log());
    assert_alive(&mut srv);
}

#[test]
fn a_client_that_stops_answering_pings_is_dropped_and_its_diffs_cleaned() {
    let sb = Sandbox::new();
    let file = sb.write("a.py", "a\n");
    let mut srv = sb.serve(&["--ping-interval", "0.5", "--ping-timeout", "0.5"]);
    let mut healthy = Conn::open(srv.port, &srv.token, true);
    healthy.handshake();
    let mut silent = Conn::open(srv.port, &srv.token, false);
    let f = s(&file);
    silent.send(&json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "openDiff", "arguments": {"old_file_path": f, "new_file_path": f, "new_file_contents": "b\n", "tab_name": "mine"}}}));
    let t = Instant::now();
    assert_eq!(silent.ended(DEADLINE), Some(1001));
    // The keepalive closed it (0.5 s, then 0.5 s more), not the end of the test.
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert!(
        silent.kept.iter().all(|v| v["id"] != 1),
        "the diff was answered: {:?}",
        silent.kept
    );
    wait_for("the diff to be cleaned", DEADLINE, || {
        let st = status(&sb);
        (st["diffs"] == json!([]) && std::fs::read_dir(sb.state().join("diffs")).ok()?.count() == 0)
            .then_some(())
    });
    assert_eq!(
        healthy.request(json!(2), "ping", json!({}))["result"],
        json!({})
    );
    assert_eq!(healthy.closed, None);
    assert_alive(&mut srv);
}
