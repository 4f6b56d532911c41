//! The session without a socket: clients whose outbox is an in-memory queue, messages fed to
//! the handler `Sessions::open` returns, answers read back as JSON.

use std::io::{BufRead, BufReader};
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::*;
use crate::lsp::text::Pos;
use crate::rpc::clients::Client;
use crate::state::editor::selection_payload;
use crate::state::exec::Mode;
use crate::state::testing::{TestState, sent, state, state_with};
use crate::transport::{Event, Handler, Outbox, Peer};

fn sessions(ts: &TestState, single_client: bool) -> Arc<Sessions> {
    Arc::new(Sessions::new(
        ts.state.clone(),
        ts.clients.clone(),
        Config {
            ping_interval: Duration::from_secs(5),
            ping_timeout: Duration::from_secs(3),
            single_client,
        },
    ))
}

/// A connected client: its handler and its client record.
struct Conn {
    handler: Handler,
    client: Arc<Client>,
}

impl Conn {
    fn open(s: &Arc<Sessions>) -> Conn {
        let outbox = Outbox::memory();
        let handler = s.open(
            outbox.clone(),
            Peer {
                addr: "127.0.0.1:9".parse().unwrap(),
                user_agent: "test".into(),
            },
        );
        let client = s
            .clients
            .all()
            .into_iter()
            .find(|c| Arc::ptr_eq(&c.outbox, &outbox))
            .unwrap();
        Conn { handler, client }
    }

    fn send(&mut self, v: Value) {
        (self.handler)(Event::Text(&v.to_string()));
    }

    /// Sends a request and returns its answer, which must come at once.
    fn request(&mut self, id: u64, method: &str, params: Value) -> Value {
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        let got = sent(&self.client);
        assert_eq!(got.len(), 1, "{got:?}");
        got[0].clone()
    }

    /// initialize, initialized, ide_connected, tools/list: the CLI's order.
    fn handshake(&mut self) {
        let r = self.request(
            0,
            "initialize",
            json!({"protocolVersion": "2025-11-25", "clientInfo": {"name": "claude-code", "version": "2.1.330"}}),
        );
        assert_eq!(r["result"]["protocolVersion"], "2025-11-25");
        self.send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
        self.send(json!({"jsonrpc": "2.0", "method": "ide_connected", "params": {"pid": 77}}));
        let tools = self.request(1, "tools/list", json!({}));
        assert!(tools["result"]["tools"].is_array());
    }

    fn end(&mut self) {
        self.client.outbox.end_for_test();
        (self.handler)(Event::Ended(crate::transport::Ended {
            code: None,
            reason: "test".into(),
        }));
    }
}

fn notification(method: &str, params: Value) -> Value {
    json!({"jsonrpc": "2.0", "method": method, "params": params})
}

/// Waits (bounded) until `c` was sent at least `n` messages, and returns them all.
fn wait_sent(c: &Client, n: usize) -> Vec<Value> {
    let end = Instant::now() + Duration::from_secs(20);
    let mut seen = Vec::new();
    loop {
        seen.extend(sent(c));
        if seen.len() >= n {
            return seen;
        }
        assert!(
            Instant::now() < end,
            "waited for {n} messages; saw {seen:?}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits (bounded) for the answer to request `id`, the one message `c` is owed.
fn answer(c: &Client, id: u64) -> Value {
    let got = wait_sent(c, 1);
    assert_eq!((got.len(), &got[0]["id"]), (1, &json!(id)), "{got:?}");
    got[0].clone()
}

fn events(ts: &TestState) -> BufReader<UnixStream> {
    let (ours, theirs) = UnixStream::pair().unwrap();
    ts.state.events.subscribe(theirs);
    let mut r = BufReader::new(ours);
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert!(line.contains("\"subscribed\""), "{line}");
    r
}

fn next_event(r: &mut BufReader<UnixStream>) -> Value {
    r.get_ref()
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    let mut v: Value = serde_json::from_str(&line).unwrap();
    v.as_object_mut().unwrap().remove("time");
    v
}

#[test]
fn initialize_echoes_known_versions_and_answers_others_with_the_newest() {
    let ts = state();
    let s = sessions(&ts, false);
    let mut c = Conn::open(&s);
    for (asked, answered) in [
        ("2025-06-18", "2025-06-18"),
        ("2024-11-05", "2024-11-05"),
        ("2026-01-01", "2025-11-25"),
        ("", "2025-11-25"),
    ] {
        assert_eq!(
            c.request(
                3,
                "initialize",
                json!({"protocolVersion": asked, "clientInfo": {"name": "x", "version": "1"}})
            ),
            json!({"jsonrpc": "2.0", "id": 3, "result": {
                "protocolVersion": answered,
                "capabilities": {"tools": {"listChanged": true}},
                "serverInfo": {"name": "Claude Code ccide MCP", "version": env!("CARGO_PKG_VERSION")},
            }})
        );
    }
}

#[test]
fn batches_answer_as_arrays_and_an_empty_batch_is_invalid() {
    let ts = state();
    let s = sessions(&ts, false);
    let mut c = Conn::open(&s);
    (c.handler)(Event::Text(
        r#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"x"},{"jsonrpc":"2.0","id":"b","method":"nope"}]"#,
    ));
    assert_eq!(
        sent(&c.client),
        vec![json!([
            {"jsonrpc": "2.0", "id": 1, "result": {}},
            {"jsonrpc": "2.0", "id": "b", "error": {"code": -32601, "message": "Method not found"}},
        ])]
    );
    (c.handler)(Event::Text("[]"));
    assert_eq!(
        sent(&c.client),
        vec![
            json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": "Invalid Request: empty batch"}})
        ]
    );
}

/// Whom a selection or mention reached: sent, held.
fn reach(answer: Result<Value, String>) -> (u64, u64) {
    let a = answer.unwrap();
    (a["clients"].as_u64().unwrap(), a["held"].as_u64().unwrap())
}

/// The CLI drops notifications until its setup settles (ccide-protocol(7) §3.3): what is sent
/// in that window is held and delivered, in order, with the greeting.
#[test]
fn a_selection_and_mentions_made_during_setup_arrive_in_order_with_the_greeting() {
    let ts = state();
    let a = ts.write("a.txt", "one\ntwo\n");
    let s = sessions(&ts, false);
    // Made while nobody was connected: queued.
    let queued = json!({"filePath": a, "lineStart": 0, "lineEnd": 0});
    assert_eq!(reach(ts.state.mention(queued.clone(), None)), (0, 0));
    let mut ev = events(&ts);
    let mut c = Conn::open(&s);
    c.handshake();
    // Setup has not settled: nothing is sent, the client counts as held.
    let sel = crate::state::editor::selection_payload(
        &a,
        crate::lsp::text::Pos::new(1, 0),
        crate::lsp::text::Pos::new(1, 3),
        "two",
    );
    let held = json!({"filePath": a, "lineStart": 1, "lineEnd": 1});
    assert_eq!(reach(ts.state.select(sel.clone(), None)), (0, 1));
    assert_eq!(reach(ts.state.mention(held.clone(), None)), (0, 1));
    assert_eq!(sent(&c.client), Vec::<Value>::new());
    // The greeting is due 250 ms after tools/list, not before.
    s.greet_due(Instant::now());
    assert_eq!(sent(&c.client), Vec::<Value>::new());
    s.greet_due(Instant::now() + Duration::from_millis(300));
    assert_eq!(
        sent(&c.client),
        vec![
            notification("selection_changed", sel.clone()),
            notification("at_mentioned", queued),
            notification("at_mentioned", held),
        ]
    );
    // `ccide events` heard which sessions each went to (this one, held), then of the client.
    for e in ["selected", "mentioned"] {
        assert_eq!(
            next_event(&mut ev),
            json!({"event": e, "path": a, "sessions": [c.client.id]})
        );
    }
    assert_eq!(
        next_event(&mut ev),
        json!({"event": "client_connected", "client": c.client.id, "name": "claude-code", "version": "2.1.330"})
    );
    // Once: a second due time sends nothing more; broadcasts now go straight out.
    s.greet_due(Instant::now() + Duration::from_secs(5));
    assert_eq!(sent(&c.client), Vec::<Value>::new());
    assert_eq!(reach(ts.state.select(sel.clone(), None)), (1, 0));
    assert_eq!(
        sent(&c.client),
        vec![notification("selection_changed", sel)]
    );
}

#[test]
fn a_client_that_never_asks_for_tools_is_greeted_after_its_initialized() {
    let ts = state();
    let s = sessions(&ts, false);
    let mut c = Conn::open(&s);
    c.request(0, "initialize", json!({"protocolVersion": "2025-11-25"}));
    c.send(json!({"jsonrpc": "2.0", "method": "initialized"}));
    s.greet_due(Instant::now() + Duration::from_millis(1000));
    assert!(!c.client.state.lock().unwrap().greeted);
    s.greet_due(Instant::now() + Duration::from_millis(1600));
    assert!(c.client.state.lock().unwrap().greeted);
}

#[test]
fn each_client_settles_only_its_own_diffs() {
    let ts = state();
    let a = ts.write("a.txt", "a\n");
    let b = ts.write("b.txt", "b\n");
    let s = sessions(&ts, false);
    let (mut ca, mut cb) = (Conn::open(&s), Conn::open(&s));
    ca.handshake();
    cb.handshake();
    let open = |c: &mut Conn, id: u64, path: &std::path::Path, tab: &str| {
        c.send(json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": "openDiff",
            "arguments": {"old_file_path": path, "new_file_path": path, "new_file_contents": "new\n", "tab_name": tab}}}));
        assert_eq!(sent(&c.client), Vec::<Value>::new(), "answered later");
    };
    // Interleaved, and B reuses A's tab name: a tab name is only unique within a session.
    open(&mut ca, 10, &a, "tab A");
    open(&mut cb, 20, &b, "tab B");
    open(&mut cb, 21, &a, "tab A");
    assert_eq!(ts.state.diffs.list().len(), 3);
    // A's prompt: closeAllDiffTabs closes A's one diff, answered to A only.
    ca.send(json!({"jsonrpc": "2.0", "id": 11, "method": "tools/call",
        "params": {"name": "closeAllDiffTabs", "arguments": {}}}));
    assert_eq!(
        sent(&ca.client),
        vec![
            json!({"jsonrpc": "2.0", "id": 10, "result": {"content": [{"type": "text", "text": "DIFF_REJECTED"}, {"type": "text", "text": "tab A"}]}}),
            json!({"jsonrpc": "2.0", "id": 11, "result": {"content": [{"type": "text", "text": "CLOSED_1_DIFF_TABS"}]}}),
        ]
    );
    assert_eq!(sent(&cb.client), Vec::<Value>::new());
    // A's close_tab of "tab A" does not touch B's diff of that name.
    ca.request(
        12,
        "tools/call",
        json!({"name": "close_tab", "arguments": {"tab_name": "tab A"}}),
    );
    let left: Vec<Value> = ts.state.diffs.list();
    assert_eq!(
        left.iter().map(|d| d["client"].clone()).collect::<Vec<_>>(),
        vec![json!(cb.client.id), json!(cb.client.id)]
    );
    // B's diffs are answered to B.
    let d = ts
        .state
        .diffs
        .settle_by_user(Some("2"), true, &ts.ws(), None)
        .ok()
        .unwrap();
    assert_eq!(d["tab_name"], "tab B");
    assert_eq!(
        answer(&cb.client, 20)["result"]["content"],
        json!([{"type": "text", "text": "FILE_SAVED"}, {"type": "text", "text": "new\n"}])
    );
    // B's disconnect abandons its last diff without an answer.
    cb.end();
    assert_eq!(ts.state.diffs.list(), Vec::<Value>::new());
    assert!(ts.clients.all().iter().all(|c| c.id != cb.client.id));
}

#[test]
fn single_client_closes_the_previous_client_with_4001() {
    let ts = state();
    let s = sessions(&ts, true);
    let mut first = Conn::open(&s);
    first.handshake();
    let mut second = Conn::open(&s);
    second.handshake();
    assert_eq!(
        first.client.outbox.take_sent(),
        vec!["close 4001 Another Claude Code session connected to this IDE".to_string()]
    );
    assert_eq!(sent(&second.client), Vec::<Value>::new());
}

#[test]
fn a_client_at_work_waits_again_for_its_ping_answer_and_an_idle_one_is_closed() {
    let ts = state();
    let s = sessions(&ts, false);
    let mut busy = Conn::open(&s);
    busy.handshake();
    let mut idle = Conn::open(&s);
    idle.handshake();
    let start = Instant::now();
    let at = |secs: f64| start + Duration::from_secs_f64(secs);
    let take = |c: &Conn| c.client.outbox.take_sent();
    // The first ping, one interval (5 s) after each connected.
    s.ping_all(at(5.5), false);
    for c in [&busy, &idle] {
        let sent = take(c);
        assert_eq!(sent.len(), 1, "{sent:?}");
        assert!(sent[0].contains(r#""method":"ping""#), "{sent:?}");
    }
    // Neither answers; the busy one's connection moves bytes (it is sending a big message, or
    // reading one off a full socket) before each tick, so its wait begins again each time.
    for t in [7.0, 8.5, 10.0, 11.5, 13.0] {
        busy.client.outbox.progress_for_test(65536);
        s.ping_all(at(t), false);
    }
    assert_eq!(take(&busy), Vec::<String>::new());
    assert_eq!(
        take(&idle),
        vec!["close 1001 no answer to ping within 3 s".to_string()]
    );
    // Once its connection is still for the timeout, it is closed too.
    s.ping_all(at(16.0), false);
    assert_eq!(
        take(&busy),
        vec!["close 1001 no answer to ping within 3 s".to_string()]
    );
}

#[test]
fn a_selection_made_as_a_client_is_greeted_reaches_it_once() {
    let ts = state();
    let s = sessions(&ts, false);
    let f = ts.write("a.py", "x\n");
    // The greeting and the selection race; whichever comes first, the client gets the new
    // selection once (with its greeting, or after it). Many rounds, to meet the moment between
    // the selection's change and its broadcast.
    for round in 0..300u32 {
        let mut c = Conn::open(&s);
        c.handshake();
        let at = |character| Pos {
            line: round,
            character,
        };
        let payload = selection_payload(&f, at(0), at(1), "x");
        let start = Arc::new(std::sync::Barrier::new(2));
        let selecting = {
            let (start, state, payload) = (start.clone(), ts.state.clone(), payload.clone());
            std::thread::spawn(move || {
                start.wait();
                state.select(payload, None).unwrap();
            })
        };
        start.wait();
        s.greet_due(Instant::now() + Duration::from_secs(60));
        selecting.join().unwrap();
        let got = sent(&c.client);
        let times = got
            .iter()
            .filter(|m| m["method"] == "selection_changed" && m["params"] == payload)
            .count();
        assert_eq!(times, 1, "round {round}: {got:?}");
        c.end();
    }
}

#[test]
fn a_cancelled_call_is_never_answered() {
    let ts = state();
    let a = ts.write("a.txt", "a\n");
    let s = sessions(&ts, false);
    let mut c = Conn::open(&s);
    c.handshake();
    c.send(json!({"jsonrpc": "2.0", "id": "d", "method": "tools/call", "params": {"name": "openDiff",
        "arguments": {"old_file_path": a, "new_file_path": a, "new_file_contents": "x", "tab_name": "t"}}}));
    c.send(json!({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "d"}}));
    // A cancelled diff cannot be answered: it is gone from the listing.
    assert_eq!(ts.state.diffs.list(), Vec::<Value>::new());
    assert_eq!(sent(&c.client), Vec::<Value>::new());
}

/// The CLI drops a connection on a message above 16 MiB (ccide-protocol(7) §2.1).
#[test]
fn an_answer_above_16_mib_becomes_an_error_that_fits() {
    let ts = state();
    // 9 MiB of characters JSON escapes: 18 MiB on the wire.
    ts.write("big.txt", &"\"".repeat(9 << 20));
    let s = sessions(&ts, false);
    let mut c = Conn::open(&s);
    c.handshake();
    let r = c.request(
        2,
        "tools/call",
        json!({"name": "readFile", "arguments": {"path": "big.txt"}}),
    );
    assert_eq!(r["result"]["isError"], true, "{}", &r.to_string()[..200]);
    let text = r["result"]["content"][0]["text"].as_str().unwrap();
    assert!(
        text.starts_with("the answer is 18.0 MiB as JSON, above the 16 MiB"),
        "{text}"
    );
    let r = c.request(3, "readFile", json!({"path": "big.txt"}));
    assert_eq!(r["error"]["code"], -32603);
}

#[test]
fn accepting_a_proposal_too_big_to_send_fails_and_keeps_it_pending() {
    let ts = state();
    let a = ts.write("a.txt", "a\n");
    let s = sessions(&ts, false);
    let mut c = Conn::open(&s);
    c.handshake();
    c.send(json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "openDiff",
        "arguments": {"old_file_path": a, "new_file_path": a, "new_file_contents": "x".repeat(17 << 20), "tab_name": "t"}}}));
    let e = match ts.state.diffs.settle_by_user(None, true, &ts.ws(), None) {
        Err(e) => (e.kind(), e.message().to_string()),
        Ok(d) => panic!("accepted {d}"),
    };
    assert_eq!(e.0, "too_big");
    assert!(
        e.1.starts_with("cannot accept diff 1: the answer carrying the file is 17.0 MiB as JSON"),
        "{}",
        e.1
    );
    assert_eq!(ts.state.diffs.list().len(), 1, "still pending");
    assert_eq!(sent(&c.client), Vec::<Value>::new());
    // Rejecting it still works.
    assert!(
        ts.state
            .diffs
            .settle_by_user(None, false, &ts.ws(), None)
            .is_ok()
    );
    assert_eq!(
        answer(&c.client, 5)["result"]["content"][0]["text"],
        "DIFF_REJECTED"
    );
}

/// Slow calls run on worker threads, at most `MAX_WORKERS` per client: a batch of many slow
/// calls costs that many threads, and the rest are refused at once.
#[test]
fn a_client_gets_a_bounded_number_of_worker_threads() {
    let ts = state_with(Mode::Ask);
    let s = sessions(&ts, false);
    let mut c = Conn::open(&s);
    c.handshake();
    let calls: Vec<Value> = (0..20)
        .map(|i| {
            json!({"jsonrpc": "2.0", "id": 100 + i, "method": "tools/call",
            "params": {"name": "executeCode", "arguments": {"code": "1"}}})
        })
        .collect();
    c.send(Value::Array(calls));
    // Each call waits for `ccide exec approve`; the four beyond the bound are refused now.
    let refused = wait_sent(&c.client, 4);
    let busy = json!({"content": [{"type": "text", "text": "16 slow calls of this client are still running; wait for their answers and try again"}], "isError": true});
    assert_eq!(
        refused,
        (116..120)
            .map(|id| json!({"jsonrpc": "2.0", "id": id, "result": busy}))
            .collect::<Vec<_>>()
    );
    assert_eq!(c.client.state.lock().unwrap().workers, 16);
    assert_eq!(ts.state.exec.waiting().1.len(), 16);
    // Denied, they end and free their threads.
    for r in ts.state.exec.waiting().1 {
        ts.state.exec.decide(r["id"].as_str(), false).unwrap();
    }
    let end = Instant::now() + Duration::from_secs(20);
    while c.client.state.lock().unwrap().workers > 0 {
        assert!(Instant::now() < end, "workers never ended");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn verdicts_are_kept_for_the_model_up_to_a_bound_the_oldest_going_first() {
    let ts = state();
    let a = ts.write("a.txt", "a\n");
    let s = sessions(&ts, false);
    let mut c = Conn::open(&s);
    c.handshake();
    for n in 1..=70 {
        c.send(json!({"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {"name": "openDiff",
            "arguments": {"old_file_path": a, "new_file_path": a, "new_file_contents": "b\n", "tab_name": "t"}}}));
        let why = format!("reason {n}");
        assert!(
            ts.state
                .diffs
                .settle_with_verdict(
                    None,
                    false,
                    &ts.ws(),
                    Some(json!({"kept": [], "dropped": [], "edited": [], "why": why})),
                    &|_| Some(7)
                )
                .is_ok()
        );
    }
    let all = crate::state::diffs::VerdictQuery {
        path: None,
        pids: None,
    };
    let kept = ts.state.diffs.verdicts(&all);
    assert_eq!(kept.len(), 64);
    assert_eq!(kept[0]["id"], "7");
    assert_eq!(kept[0]["verdict"]["why"], "reason 7");
    // A CLI with another pid hears none of them; delivered ones are forgotten.
    let other = crate::state::diffs::VerdictQuery {
        path: None,
        pids: Some(vec![8]),
    };
    assert_eq!(ts.state.diffs.verdicts(&other).len(), 0);
    ts.state.diffs.forget_verdicts(&["7".into(), "70".into()]);
    assert_eq!(ts.state.diffs.verdicts(&all).len(), 62);
}
