//! `ccide lsp`'s loop driven as an editor drives it, over a memory connection, with servers
//! that are test states answered by the control handler in this process and whose events
//! arrive in memory: no process, no socket. What Claude Code receives is read from an
//! in-memory client of the state.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::dialogue::{Dialogue, FOLLOW_DELAY, In, Options};
use super::link::{Found, Servers, Session};
use crate::control::editors;
use crate::control::handler::handle;
use crate::control::protocol::Request;
use crate::lsp::connection::{Connection, Received};
use crate::proc::{Deliver, Queue};
use crate::rpc::Message;
use crate::rpc::clients::Client;
use crate::state::State;
use crate::state::testing::{TestState, sent, state, state_for};

const DEADLINE: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------
// Servers in this process

struct Srv {
    ts: TestState,
    port: u16,
    running: bool,
    /// Started by the editor (`Servers::serve`) rather than by the test.
    stand_in: bool,
    /// A stand-in that another server (this one) starts beside, at the same moment.
    beside: Option<usize>,
    own: bool,
    sessions: Vec<(u64, Arc<AtomicBool>, Deliver<Option<Value>>)>,
    /// Each navigation connection an editor opened (`Servers::navigate`): what it said of
    /// itself, and the serve side.
    navs: Vec<(crate::control::protocol::LspClient, Connection)>,
}

/// The servers an editor can reach: test states, each running or not, some served by the
/// editor itself (stand-ins).
#[derive(Clone, Default)]
struct World(Arc<Mutex<Vec<Srv>>>);

impl World {
    /// Adds a server, running or not (then `start` starts it).
    fn add(&self, ts: TestState, running: bool) -> usize {
        self.push(ts, running, false)
    }

    /// Adds the server the editor starts when it serves the state's folder itself.
    fn stand_in(&self, ts: TestState) -> usize {
        self.push(ts, false, true)
    }

    fn push(&self, ts: TestState, running: bool, stand_in: bool) -> usize {
        let mut w = self.0.lock().unwrap();
        let port = 1000 + w.len() as u16;
        w.push(Srv {
            ts,
            port,
            running,
            stand_in,
            beside: None,
            own: false,
            sessions: Vec::new(),
            navs: Vec::new(),
        });
        w.len() - 1
    }

    fn state(&self, k: usize) -> Arc<State> {
        self.0.lock().unwrap()[k].ts.state.clone()
    }

    fn ws(&self, k: usize) -> PathBuf {
        self.0.lock().unwrap()[k].ts.state.workspaces.list()[0].clone()
    }

    fn is_running(&self, k: usize) -> bool {
        self.0.lock().unwrap()[k].running
    }

    /// The server goes away, as a stopped or restarting `ccide serve` does: its sessions and
    /// event streams end, and what the sessions held is forgotten (not closed: a restart
    /// keeps the editor model).
    fn stop(&self, k: usize) {
        for deliver in self.stop_unannounced(k) {
            deliver(None);
        }
    }

    /// `stop`, but the ends of the event streams are not yet delivered (their reading threads
    /// have not run): the caller delivers them.
    fn stop_unannounced(&self, k: usize) -> Vec<Deliver<Option<Value>>> {
        let mut w = self.0.lock().unwrap();
        let s = &mut w[k];
        s.running = false;
        s.own = false;
        let mut ends = Vec::new();
        for (id, alive, deliver) in s.sessions.drain(..) {
            alive.store(false, Ordering::SeqCst);
            s.ts.state.editor.release(id);
            ends.push(deliver);
        }
        ends
    }

    fn start(&self, k: usize) {
        self.0.lock().unwrap()[k].running = true;
    }

    /// Server `k` starts again when the editor starts stand-in `s`, just after it.
    fn start_beside(&self, k: usize, s: usize) {
        self.0.lock().unwrap()[k].beside = Some(s);
    }

    /// The `n`th navigation connection to server `k`, once opened: the client's name as it
    /// was given, and the serve side.
    fn nav(
        &self,
        k: usize,
        n: usize,
    ) -> (
        Option<String>,
        crate::lsp::connection::Sender,
        Arc<Queue<Received>>,
    ) {
        wait_for("the navigation connection", || {
            (self.0.lock().unwrap()[k].navs.len() > n).then_some(())
        });
        let w = self.0.lock().unwrap();
        let (client, conn) = &w[k].navs[n];
        (
            client.client.clone(),
            conn.sender.clone(),
            conn.receiver.clone(),
        )
    }

    /// A client of Claude Code connected to server `k`, its setup finished.
    fn claude(&self, k: usize) -> Claude {
        let client = self.0.lock().unwrap()[k].ts.client(true);
        client.state.lock().unwrap().greeted = true;
        Claude {
            client,
            backlog: Vec::new(),
        }
    }
}

struct InProcess(World);

struct InSession {
    state: Arc<State>,
    id: u64,
    alive: Arc<AtomicBool>,
}

impl Session for InSession {
    fn call(&mut self, req: &Request) -> Result<Value, String> {
        if !self.alive.load(Ordering::SeqCst) {
            return Err("the server went away".into());
        }
        Ok(handle(&self.state, Some(self.id), req.clone()))
    }
}

impl Drop for InSession {
    fn drop(&mut self) {
        if self.alive.swap(false, Ordering::SeqCst) {
            editors::detach(&self.state, self.id);
        }
    }
}

fn key(ts: &TestState) -> PathBuf {
    ts.state.state_dir.join("control.sock")
}

impl Servers for InProcess {
    fn list(&mut self) -> Vec<Found> {
        let w = self.0.0.lock().unwrap();
        w.iter()
            .filter(|s| s.running)
            .map(|s| Found {
                key: key(&s.ts),
                port: s.port,
                workspaces: s.ts.state.workspaces.list(),
                state: std::fs::canonicalize(&s.ts.state.state_dir).ok(),
                own: s.own,
            })
            .collect()
    }

    fn attach(
        &mut self,
        server: &Found,
        editor: &str,
        deliver: Deliver<Option<Value>>,
    ) -> Result<(Box<dyn Session>, Value), String> {
        let mut w = self.0.0.lock().unwrap();
        let s = w
            .iter_mut()
            .find(|s| s.running && key(&s.ts) == server.key)
            .ok_or("no such server")?;
        let state = s.ts.state.clone();
        let alive = Arc::new(AtomicBool::new(true));
        let (a, d) = (alive.clone(), deliver.clone());
        state.events.subscribe_with(Box::new(move |line| {
            if a.load(Ordering::SeqCst) {
                d(Some(serde_json::from_str(line).unwrap()));
            }
            a.load(Ordering::SeqCst)
        }));
        let (id, answer) = editors::attach(&state, Some(1), Some(editor));
        s.sessions.push((id, alive.clone(), deliver));
        Ok((Box::new(InSession { state, id, alive }), answer))
    }

    /// A connection in memory whose serve side the test reads (`World::nav`); what serve's
    /// language servers answer is tested through the binary (tests/lsp_mux.rs).
    fn navigate(
        &mut self,
        server: &Found,
        client: crate::control::protocol::LspClient,
        deliver: Deliver<Received>,
    ) -> Result<crate::lsp::connection::Sender, String> {
        let mut w = self.0.0.lock().unwrap();
        let s = w
            .iter_mut()
            .find(|s| s.running && key(&s.ts) == server.key)
            .ok_or("no such server")?;
        let (ours, theirs) = Connection::memory();
        // What serve sends reaches the dialogue's inbox, as the connection's reader would.
        let from_serve = ours.receiver.clone();
        std::thread::spawn(move || {
            while let Some(r) = from_serve.pop(None) {
                let end = matches!(r, Received::Closed(_));
                deliver(r);
                if end {
                    return;
                }
            }
        });
        s.navs.push((client, theirs));
        Ok(ours.sender)
    }

    fn serve(&mut self, root: &Path) -> Result<(), String> {
        let mut w = self.0.0.lock().unwrap();
        let k = w
            .iter()
            .position(|s| s.stand_in && !s.running && s.ts.state.workspaces.list() == [root])
            .ok_or_else(|| format!("this test has no server for {}", root.display()))?;
        w[k].running = true;
        w[k].own = true;
        for s in w.iter_mut().filter(|s| s.beside == Some(k)) {
            s.running = true;
        }
        Ok(())
    }

    fn stop(&mut self, root: &Path) {
        let k = {
            let w = self.0.0.lock().unwrap();
            w.iter()
                .position(|s| s.own && s.running && s.ts.state.workspaces.list() == [root])
        };
        if let Some(k) = k {
            self.0.stop(k);
        }
    }
}

// ---------------------------------------------------------------------------
// The editor

/// An editor: the other end of the loop's connection.
struct Ed {
    conn: Connection,
    /// The loop's inbox, to pass it the time (`at`).
    inbox: Arc<Queue<In>>,
    backlog: Vec<Value>,
    next_id: u64,
    thread: Option<JoinHandle<i32>>,
}

/// A received message as JSON, the way an editor reads it.
fn json_of(m: Message) -> Value {
    match m {
        Message::Request(r) => {
            json!({"id": r.id.to_value(), "method": r.method, "params": r.params})
        }
        Message::Notification(n) => json!({"method": n.method, "params": n.params}),
        Message::Response(r) => {
            let id = r.id.map(|i| i.to_value()).unwrap_or_default();
            match r.result {
                Ok(v) => json!({"id": id, "result": v}),
                Err(e) => json!({"id": id, "error": {"code": e.code, "message": e.message}}),
            }
        }
    }
}

fn uri(p: &Path) -> String {
    crate::files::file_uri(p)
}

fn range(l1: u32, c1: u32, l2: u32, c2: u32) -> Value {
    json!({"start": {"line": l1, "character": c1}, "end": {"line": l2, "character": c2}})
}

fn options() -> Options {
    Options {
        port: None,
        follow: false,
        diagnostics: false,
        navigation: false,
        map: Default::default(),
    }
}

impl Ed {
    fn start(world: &World, o: Options) -> Ed {
        let (conn, theirs) = Connection::memory();
        let servers = InProcess(world.clone());
        let inboxes: Arc<Queue<Arc<Queue<In>>>> = Arc::default();
        let i = inboxes.clone();
        let thread = std::thread::spawn(move || {
            let d = Dialogue::new(theirs.sender.clone(), Box::new(servers), o);
            i.push(d.inbox());
            d.run(theirs)
        });
        let inbox = inboxes.pop(Some(Instant::now() + DEADLINE));
        Ed {
            conn,
            inbox: inbox.expect("the loop's inbox"),
            backlog: Vec::new(),
            next_id: 1,
            thread: Some(thread),
        }
    }

    fn send(&self, v: Value) {
        self.conn.sender.send(&v).unwrap();
    }

    fn notify(&self, method: &str, params: Value) {
        self.send(json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    fn send_request(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    /// The next message satisfying `pred`; the others are kept for later.
    fn recv_where(&mut self, what: &str, pred: impl Fn(&Value) -> bool) -> Value {
        if let Some(i) = self.backlog.iter().position(&pred) {
            return self.backlog.remove(i);
        }
        let end = Instant::now() + DEADLINE;
        loop {
            match self.conn.receiver.pop(Some(end)) {
                Some(Received::Message(m)) => {
                    let v = json_of(m);
                    if pred(&v) {
                        return v;
                    }
                    self.backlog.push(v);
                }
                Some(other) => panic!("waiting for {what}: {other:?}"),
                None => panic!("no {what} within {DEADLINE:?}; backlog {:?}", self.backlog),
            }
        }
    }

    /// The whole response to a request.
    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.send_request(method, params);
        self.recv_where(&format!("the response to {method}"), |v| {
            v["id"] == id && v.get("method").is_none()
        })
    }

    fn result(&mut self, method: &str, params: Value) -> Value {
        let r = self.request(method, params);
        assert!(r.get("error").is_none(), "{method} failed: {r}");
        r["result"].clone()
    }

    /// The params of the next notification (or request) `method` from `ccide lsp`.
    fn incoming(&mut self, method: &str) -> Value {
        self.recv_where(method, |v| v["method"] == method)["params"].clone()
    }

    fn initialize(&mut self, root: &Path, extra: Value) -> Value {
        let mut params = json!({"processId": 1, "rootUri": uri(root),
            "capabilities": {}, "clientInfo": {"name": "test-editor", "version": "1"}});
        for (k, v) in extra.as_object().unwrap() {
            params[k] = v.clone();
        }
        let r = self.result("initialize", params);
        self.notify("initialized", json!({}));
        r
    }

    fn open(&self, path: &Path, text: &str) {
        let td = json!({"uri": uri(path), "languageId": "python", "version": 1, "text": text});
        self.notify("textDocument/didOpen", json!({"textDocument": td}));
    }

    fn change(&self, path: &Path, changes: Value) {
        self.notify(
            "textDocument/didChange",
            json!({"textDocument": {"uri": uri(path), "version": 2}, "contentChanges": changes}),
        );
    }

    fn close(&self, path: &Path) {
        self.notify(
            "textDocument/didClose",
            json!({"textDocument": {"uri": uri(path)}}),
        );
    }

    fn code_actions(&mut self, path: &Path, range: Value) -> Value {
        let params = json!({"textDocument": {"uri": uri(path)}, "range": range, "context": {"diagnostics": []}});
        self.result("textDocument/codeAction", params)
    }

    /// Requests the code actions and executes the one titled `title`, as editors do.
    fn run_action(&mut self, path: &Path, range: Value, title: &str) -> Value {
        let actions = self.code_actions(path, range);
        let action = actions
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["title"] == title)
            .unwrap_or_else(|| panic!("no action {title:?} in {actions}"))
            .clone();
        self.request("workspace/executeCommand", action["command"].clone())
    }

    /// A round trip: what the messages before it caused is done when it is answered.
    fn sync(&mut self) {
        self.result(
            "textDocument/codeAction",
            json!({"textDocument": {"uri": "file:///nowhere"}}),
        );
    }

    /// The loop does what is due at `now`, as if that time had come; done when this returns.
    fn at(&mut self, now: Instant) {
        self.inbox.push(In::Tick(now));
        self.sync();
    }

    /// Waits until the loop ends, and its exit status.
    fn exit_status(&mut self) -> i32 {
        self.thread.take().unwrap().join().unwrap()
    }

    fn quit(&mut self) -> i32 {
        assert_eq!(self.result("shutdown", Value::Null), Value::Null);
        self.notify("exit", Value::Null);
        self.exit_status()
    }
}

impl Drop for Ed {
    /// The editor goes away: its end of the connection closes.
    fn drop(&mut self) {
        self.conn.sender.close();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A client of Claude Code that finished its setup, and what it received.
struct Claude {
    client: Arc<Client>,
    backlog: Vec<Value>,
}

impl Claude {
    /// The next notification `method`.
    fn notification(&mut self, method: &str) -> Value {
        let end = Instant::now() + DEADLINE;
        loop {
            self.backlog.extend(sent(&self.client));
            if let Some(i) = self.backlog.iter().position(|m| m["method"] == method) {
                return self.backlog.remove(i)["params"].clone();
            }
            assert!(Instant::now() < end, "no {method}: {:?}", self.backlog);
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    fn count(&mut self, method: &str) -> usize {
        self.backlog.extend(sent(&self.client));
        self.backlog
            .iter()
            .filter(|m| m["method"] == method)
            .count()
    }
}

/// Waits for a condition on the server's state (the editor's notifications are answered by
/// nobody; a round trip orders them, but a push waits for its delay).
fn wait_for<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let end = Instant::now() + DEADLINE;
    loop {
        if let Some(t) = f() {
            return t;
        }
        assert!(Instant::now() < end, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn tabs(state: &State) -> Vec<(PathBuf, bool)> {
    state
        .editor
        .tabs()
        .iter()
        .map(|t| (t.path.clone(), t.active))
        .collect()
}

/// A temporary directory the test removes: a home holding projects.
struct Home(PathBuf);

impl Home {
    fn new(name: &str) -> Home {
        let d = std::env::temp_dir().join(format!("ccide-lsp-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("proj")).unwrap();
        Home(std::fs::canonicalize(d).unwrap())
    }

    fn write(&self, rel: &str, content: &str) -> PathBuf {
        let p = self.0.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, content).unwrap();
        p
    }
}

impl Drop for Home {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A server for the test state's `ws/`, and the editor started in it.
fn editor_on(ts: TestState, o: Options, extra: Value) -> (World, usize, Ed) {
    let ws = ts.ws();
    let world = World::default();
    let k = world.add(ts, true);
    let mut ed = Ed::start(&world, o);
    ed.initialize(&ws, extra);
    (world, k, ed)
}

fn change(l1: u32, c1: u32, l2: u32, c2: u32, text: &str) -> Value {
    json!({"range": range(l1, c1, l2, c2), "text": text})
}

/// A line with two-byte, three-byte and four-byte (two UTF-16 units) characters.
const WIDE: &str = "def f():\n    s = \"é世😀x\"  # 😀\n    return s\n";

// ---------------------------------------------------------------------------
// The dialogue

#[test]
fn requests_before_initialize_are_answered_server_not_initialized() {
    let ts = state();
    let a = ts.write("a.py", "a\n");
    let ws = ts.ws();
    let world = World::default();
    let k = world.add(ts, true);
    let mut ed = Ed::start(&world, options());
    for method in [
        "textDocument/codeAction",
        "shutdown",
        "workspace/executeCommand",
    ] {
        let r = ed.request(method, json!({}));
        assert_eq!(
            r["error"],
            json!({"code": -32002, "message": format!("{method} before initialize")})
        );
    }
    // Notifications before it are dropped: this file is not opened.
    ed.open(&a, "a\n");
    ed.initialize(&ws, json!({}));
    let r = ed.request("initialize", json!({}));
    assert_eq!(
        r["error"],
        json!({"code": -32600, "message": "initialize was already answered"})
    );
    assert_eq!(ed.code_actions(&a, range(0, 0, 0, 1)), json!([]));
    assert_eq!(tabs(&world.state(k)), []);
    assert_eq!(ed.result("shutdown", Value::Null), Value::Null);
    let r = ed.request("textDocument/codeAction", json!({}));
    assert_eq!(
        r["error"],
        json!({"code": -32600, "message": "textDocument/codeAction after shutdown"})
    );
    ed.notify("exit", Value::Null);
    assert_eq!(ed.exit_status(), 0);
    // `exit` without `shutdown`: the editor did not end the dialogue properly.
    let mut ed = Ed::start(&world, options());
    ed.initialize(&ws, json!({}));
    ed.notify("exit", Value::Null);
    assert_eq!(ed.exit_status(), 1);
}

#[test]
fn initialize_negotiates_the_encoding_and_answers_unknown_methods() {
    for (offered, chosen) in [
        (Value::Null, "utf-16"),
        (json!(["utf-8", "utf-32", "utf-16"]), "utf-16"),
        (json!(["utf-32", "utf-8"]), "utf-32"),
    ] {
        let caps = json!({"general": {"positionEncodings": offered}});
        let (_world, _, mut ed) = editor_on(state(), options(), json!({"capabilities": caps}));
        let r = ed.request("initialize", json!({}));
        assert_eq!(r["error"]["code"], -32600);
        let r = ed.request("textDocument/hover", json!({}));
        assert_eq!(
            r["error"],
            json!({"code": -32601, "message": "Method not found: textDocument/hover"})
        );
        let mut ed2 = Ed::start(&World::default(), options());
        let v = ed2.result("initialize", json!({"capabilities": caps}));
        assert_eq!(v["capabilities"]["positionEncoding"], chosen, "{offered}");
        assert_eq!(
            v["capabilities"]["executeCommandProvider"]["commands"],
            json!([
                "ccide.select",
                "ccide.mention",
                "ccide.show",
                "ccide.accept",
                "ccide.acceptEdited",
                "ccide.reject",
                "ccide.keepHunk",
                "ccide.dropHunk",
                "ccide.acceptKept",
                "ccide.rejectAll",
                "ccide.keepChange",
                "ccide.undoChange"
            ])
        );
        assert_eq!(v["serverInfo"]["name"], "ccide");
        assert_eq!(ed.quit(), 0);
    }
}

// ---------------------------------------------------------------------------
// The document mirror

#[test]
fn open_change_save_close_are_tabs_and_unsaved_buffers() {
    let ts = state();
    let a = ts.write("a.py", "x = 1\ny = 2\n");
    let b = ts.write("b.py", "print('b')\n");
    let (world, k, mut ed) = editor_on(ts, options(), json!({}));
    let st = world.state(k);
    ed.open(&a, "x = 1\ny = 2\n");
    ed.sync();
    assert_eq!(tabs(&st), [(a.clone(), true)]);
    ed.open(&b, "print('b')\n");
    ed.sync();
    assert_eq!(tabs(&st), [(a.clone(), false), (b.clone(), true)]);
    // Incremental changes, UTF-16 positions: "x = 1" becomes "x = 'é😀'".
    ed.change(
        &a,
        json!([change(0, 4, 0, 5, "'é😀'"), change(1, 0, 1, 0, "# ")]),
    );
    let dirty = "x = 'é😀'\n# y = 2\n";
    wait_for("a.py unsaved", || {
        (st.editor.document(&a).as_deref() == Some(dirty)).then_some(())
    });
    // Changed back, it is clean again, as in VS Code.
    ed.change(&a, json!([change(0, 4, 0, 9, "1"), change(1, 0, 1, 2, "")]));
    wait_for("a.py clean", || {
        st.editor.document(&a).is_none().then_some(())
    });
    ed.change(&a, json!([{"text": "z = 3\n"}]));
    wait_for("a.py unsaved", || st.editor.document(&a).map(|_| ()));
    // Saved: the buffer goes at once.
    std::fs::write(&a, "z = 3\n").unwrap();
    ed.notify(
        "textDocument/didSave",
        json!({"textDocument": {"uri": uri(&a)}}),
    );
    ed.close(&b);
    ed.sync();
    assert_eq!(st.editor.document(&a), None);
    assert_eq!(tabs(&st), [(a.clone(), true)]);
    assert_eq!(ed.quit(), 0);
    // The session ended: its tabs went.
    assert_eq!(tabs(&st), []);
}

/// A change item whose `text` is null or missing used to empty the document; it is refused
/// (a notification has no answer: the editor is shown the error) and the text kept.
#[test]
fn a_change_without_text_is_refused_and_the_document_kept() {
    let ts = state();
    let a = ts.write("a.py", "one\ntwo\n");
    let (world, k, mut ed) = editor_on(ts, options(), json!({}));
    let st = world.state(k);
    ed.open(&a, "one\ntwo\n");
    ed.change(
        &a,
        json!([change(0, 0, 0, 3, "ONE"), {"range": range(1, 0, 1, 3), "text": null}]),
    );
    let shown = ed.incoming("window/showMessage");
    assert_eq!(shown["type"], 1);
    let m = shown["message"].as_str().unwrap();
    assert!(
        m.starts_with(&format!(
            "ccide: change 2 of 2 to {} has no \"text\"",
            a.display()
        )),
        "{m}"
    );
    ed.change(&a, json!([change(1, 0, 1, 3, "TWO")]));
    wait_for("the next change applied to the kept text", || {
        (st.editor.document(&a).as_deref() == Some("one\nTWO\n")).then_some(())
    });
}

/// One didChange of many changes, each on its own line, applies each in turn. What it costs as
/// the count grows (with it, not with its square) is a row of the benchmark, tests/bench.rs.
#[test]
fn a_did_change_of_many_changes_applies_each_in_turn() {
    let ts = state();
    let n = 2_000u32;
    let text: String = (0..n)
        .map(|i| format!("line {i:>6} of the file\n"))
        .collect();
    let a = ts.write("big.py", &text);
    let (world, k, mut ed) = editor_on(ts, options(), json!({}));
    let st = world.state(k);
    ed.open(&a, &text);
    let changes: Vec<Value> = (0..n).map(|i| change(i, 0, i, 4, "LINE")).collect();
    ed.change(&a, Value::from(changes));
    ed.sync();
    let want = text.replace("line ", "LINE ");
    wait_for("the changes applied", || {
        (st.editor.document(&a).as_deref() == Some(want.as_str())).then_some(())
    });
}

// ---------------------------------------------------------------------------
// Selections and mentions

#[test]
fn send_selection_counts_utf16_units_for_utf16_utf8_and_utf32_editors() {
    let ts = state();
    let f = ts.write("wide.py", WIDE);
    let ws = ts.ws();
    let world = World::default();
    let k = world.add(ts, true);
    let mut claude = world.claude(k);
    // The same selection, `é世😀x`, in the three encodings.
    for (enc, end) in [("utf-16", 14), ("utf-8", 19), ("utf-32", 13)] {
        let mut ed = Ed::start(&world, options());
        let caps = json!({"general": {"positionEncodings": [enc]}});
        ed.initialize(&ws, json!({"capabilities": caps}));
        ed.open(&f, WIDE);
        let r = ed.run_action(&f, range(1, 9, 1, end), "Claude: send selection");
        assert_eq!(r["result"], Value::Null, "{r}");
        assert_eq!(
            claude.notification("selection_changed"),
            json!({
                "text": "é世😀x", "filePath": f, "fileUrl": format!("file://{}", f.display()),
                "selection": {"start": {"line": 1, "character": 9}, "end": {"line": 1, "character": 14}, "isEmpty": false},
            }),
            "{enc}"
        );
        assert_eq!(claude.count("selection_changed"), 0, "one per action");
        assert_eq!(ed.quit(), 0);
    }
}

#[test]
fn mention_sends_lines_or_the_file_and_unknown_commands_are_refused() {
    let ts = state();
    let f = ts.write("wide.py", WIDE);
    let (world, k, mut ed) = editor_on(ts, options(), json!({}));
    let mut claude = world.claude(k);
    ed.open(&f, WIDE);
    // Lines 2 and 3 selected linewise: the range ends at the start of line 4.
    ed.run_action(&f, range(1, 0, 3, 0), "Claude: @-mention");
    assert_eq!(
        claude.notification("at_mentioned"),
        json!({"filePath": f, "lineStart": 1, "lineEnd": 2})
    );
    ed.run_action(&f, range(2, 4, 2, 4), "Claude: @-mention");
    assert_eq!(claude.notification("at_mentioned"), json!({"filePath": f}));
    // Bound to a key: executeCommand without arguments takes the focused document and the
    // range of its last code action request.
    ed.code_actions(&f, range(0, 0, 0, 3));
    let r = ed.request(
        "workspace/executeCommand",
        json!({"command": "ccide.mention"}),
    );
    assert_eq!(r["result"], Value::Null);
    assert_eq!(
        claude.notification("at_mentioned"),
        json!({"filePath": f, "lineStart": 0, "lineEnd": 0})
    );
    let r = ed.request(
        "workspace/executeCommand",
        json!({"command": "ccide.nothing"}),
    );
    assert_eq!(
        r["error"],
        json!({"code": -32603, "message": "unknown command ccide.nothing"})
    );
    assert_eq!(
        ed.incoming("window/showMessage"),
        json!({"type": 2, "message": "ccide: unknown command ccide.nothing"})
    );
}

#[test]
fn the_selection_follows_code_action_requests_once_the_cursor_rests() {
    let ts = state();
    let f = ts.write("wide.py", WIDE);
    let o = Options {
        follow: true,
        ..options()
    };
    let (world, k, mut ed) = editor_on(ts, o, json!({}));
    let mut claude = world.claude(k);
    ed.open(&f, WIDE);
    // The cursor moving: one request per keystroke; only where it rests is sent.
    for c in 0..4 {
        ed.code_actions(&f, range(1, c, 2, 0));
    }
    let n = claude.notification("selection_changed");
    assert_eq!(n["selection"]["start"], json!({"line": 1, "character": 3}));
    assert_eq!(n["text"], " s = \"é世😀x\"  # 😀\n");
    // Resting in the same place sends nothing more.
    ed.code_actions(&f, range(1, 3, 2, 0));
    ed.code_actions(&f, range(0, 2, 0, 2));
    let n = claude.notification("selection_changed");
    assert_eq!(n["selection"]["isEmpty"], true);
    assert_eq!(claude.count("selection_changed"), 0);
    // Asked for with the action, a selection is sent once, even where the cursor rests.
    ed.run_action(&f, range(2, 4, 2, 10), "Claude: send selection");
    assert_eq!(claude.notification("selection_changed")["text"], "return");
    ed.at(Instant::now() + FOLLOW_DELAY);
    assert_eq!(claude.count("selection_changed"), 0);
    // Turned off by initializationOptions.
    let mut ed = Ed::start(
        &world,
        Options {
            follow: true,
            ..options()
        },
    );
    let ws = world.ws(k);
    ed.initialize(
        &ws,
        json!({"initializationOptions": {"followSelection": false}}),
    );
    ed.open(&f, WIDE);
    ed.code_actions(&f, range(0, 0, 0, 3));
    ed.at(Instant::now() + FOLLOW_DELAY);
    assert_eq!(claude.count("selection_changed"), 0);
}

// ---------------------------------------------------------------------------
// Proposals

/// Starts a tool call that answers later (openDiff); returns its id.
fn open_diff(world: &World, k: usize, claude: &Claude, id: u64, f: &Path, new: &str) {
    let st = world.state(k);
    let id = crate::rpc::RequestId::number(id);
    let call = crate::rpc::call::Call {
        client: &claude.client,
        id: &id,
    };
    let args = json!({"old_file_path": f, "new_file_path": f, "new_file_contents": new, "tab_name": "✻ [Claude Code] main.py (1a2b3c) ⧉"});
    let r = crate::tools::call(&st, &call, json!({"name": "openDiff", "arguments": args}));
    assert!(matches!(r, crate::rpc::call::Reply::Later));
}

/// The answer to call `id`.
fn answer(claude: &mut Claude, id: u64) -> Value {
    wait_for("the answer to openDiff", || {
        claude.backlog.extend(sent(&claude.client));
        let i = claude.backlog.iter().position(|m| m["id"] == id)?;
        Some(claude.backlog.remove(i)["result"].clone())
    })
}

fn titles(v: &Value) -> Vec<String> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|a| a["title"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn proposals_are_announced_offered_accepted_as_edited_reloaded_and_rejected() {
    let ts = state();
    let f = ts.write("main.py", "print('old')\n");
    let view = ts.root.join("state/diffs/1/main.py");
    let caps = json!({"workspace": {"applyEdit": true}});
    let (world, k, mut ed) = editor_on(ts, options(), json!({"capabilities": caps}));
    let mut claude = world.claude(k);
    ed.open(&f, "print('old')\n");
    open_diff(&world, k, &claude, 7, &f, "print('new')\n");
    assert_eq!(
        ed.incoming("window/showMessage"),
        json!({"type": 3, "message": format!("Claude Code proposes an edit to {}: the code actions on it show, accept or reject it (or `ccide diff show 1`)", f.display())})
    );
    assert_eq!(
        titles(&ed.code_actions(&f, range(0, 0, 0, 0))),
        [
            "Claude: send selection",
            "Claude: @-mention",
            "Claude: show proposed edit",
            "Claude: accept",
            "Claude: reject",
            "Claude: keep hunk 1/1",
            "Claude: drop hunk 1/1",
            "Claude: accept what is kept",
            "Claude: reject all"
        ]
    );
    // Without window/showDocument, showing names the proposal.
    let r = ed.run_action(&f, range(0, 0, 0, 0), "Claude: show proposed edit");
    assert_eq!(r["result"], json!({"uri": uri(&view), "path": view}));
    assert_eq!(
        ed.incoming("window/showMessage")["message"],
        format!(
            "Claude Code's proposal for {} is {} (`ccide diff show 1` shows the change)",
            f.display(),
            view.display()
        )
    );
    // The user opens it and edits it without saving; it is no tab of the workspace.
    ed.open(&view, "print('new')\n");
    ed.change(&view, json!([change(0, 7, 0, 10, "edited")]));
    assert_eq!(
        titles(&ed.code_actions(&view, range(0, 0, 0, 0))),
        [
            "Claude: accept",
            "Claude: accept as edited",
            "Claude: reject"
        ]
    );
    assert_eq!(tabs(&world.state(k)), [(f.clone(), true)]);
    let r = ed.run_action(&f, range(0, 0, 0, 0), "Claude: accept as edited");
    assert_eq!(r["result"], Value::Null, "{r}");
    assert_eq!(
        answer(&mut claude, 7)["content"],
        json!([{"type": "text", "text": "FILE_SAVED"}, {"type": "text", "text": "print('edited')\n"}])
    );
    // The CLI writes the file; the editor's clean buffer is replaced with it, up to the line
    // break both end with.
    std::fs::write(&f, "print('edited')\n").unwrap();
    let edit = ed.incoming("workspace/applyEdit");
    assert_eq!(
        edit,
        json!({"label": format!("Claude Code wrote {}", f.display()), "edit": {"changes": {uri(&f): [
            {"range": range(0, 0, 0, 12), "newText": "print('edited')"}]}}})
    );
    // A second proposal, rejected from its code action; then none is offered.
    open_diff(&world, k, &claude, 8, &f, "x\n");
    ed.incoming("window/showMessage");
    ed.run_action(&f, range(0, 0, 0, 0), "Claude: reject");
    assert_eq!(
        answer(&mut claude, 8)["content"][0]["text"],
        "DIFF_REJECTED"
    );
    wait_for("the diff settled", || {
        (titles(&ed.code_actions(&f, range(0, 0, 0, 0))).len() == 2).then_some(())
    });
}

// ---------------------------------------------------------------------------
// Diagnostics

/// The store counts columns in UTF-16 units (what the CLI is sent); the editor is given them
/// in its own: the error on `foo` after `é🦀` is at 12, 15 in UTF-8 and 11 in UTF-32.
#[test]
fn diagnostics_are_published_in_the_editors_encoding() {
    let ts = state();
    let line = "s = \"é🦀\" + foo\n";
    let f = ts.write("e.py", line);
    let ws = ts.ws();
    let world = World::default();
    let k = world.add(ts, true);
    let import = json!([{"uri": format!("file://{}", f.display()), "diagnostics": [
        {"message": "undefined name `foo`", "severity": "Error", "source": "ruff",
         "range": {"start": {"line": 0, "character": 12}, "end": {"line": 0, "character": 15}}}]}]);
    let req = Request::DiagnosticsImport {
        text: import.to_string(),
        format: Some("protocol".into()),
        cwd: None,
    };
    assert_eq!(handle(&world.state(k), None, req)["ok"], true);
    for (enc, start) in [("utf-16", 12), ("utf-8", 15), ("utf-32", 11)] {
        let o = Options {
            diagnostics: true,
            ..options()
        };
        let mut ed = Ed::start(&world, o);
        let caps = json!({"general": {"positionEncodings": [enc]}});
        ed.initialize(&ws, json!({"capabilities": caps}));
        ed.open(&f, line);
        assert_eq!(
            ed.incoming("textDocument/publishDiagnostics"),
            json!({"uri": uri(&f), "diagnostics": [{"message": "undefined name `foo`", "severity": 1,
                "source": "ruff", "range": range(0, start, 0, start + 3)}]}),
            "{enc}"
        );
    }
}

// ---------------------------------------------------------------------------
// Servers

/// Two editors have f.py open and B typed in it: when A closes it, B's tab and unsaved buffer
/// stay. A document is closed when its last holder closes it.
#[test]
fn a_file_two_editors_hold_is_closed_by_the_last_one() {
    let ts = state();
    let f = ts.write("f.py", "x = 1\n");
    let (world, k, mut a) = editor_on(ts, options(), json!({}));
    let st = world.state(k);
    let mut b = Ed::start(&world, options());
    b.initialize(&world.ws(k), json!({}));
    a.open(&f, "x = 1\n");
    b.open(&f, "x = 1\n");
    b.change(&f, json!([change(0, 4, 0, 5, "2")]));
    wait_for("B's buffer", || st.editor.document(&f).map(|_| ()));
    a.close(&f);
    a.sync();
    assert_eq!(tabs(&st), [(f.clone(), true)]);
    assert_eq!(st.editor.document(&f).as_deref(), Some("x = 2\n"));
    b.close(&f);
    b.sync();
    assert_eq!(tabs(&st), []);
    assert_eq!(st.editor.document(&f), None);
}

/// An editor started in a home holding a project: its files reach the project's server,
/// nothing is served for the home (Claude Code in the project would see two servers and
/// connect to neither), and a file no server holds is said to be left alone.
#[test]
fn an_editor_in_a_home_uses_the_projects_server_and_serves_nothing_itself() {
    let home = Home::new("home");
    let f = home.write("proj/f.py", "x = 1\n");
    let notes = home.write("notes.py", "n\n");
    let world = World::default();
    let p = world.add(state_for(&home.0.join("proj")), true);
    let h = world.stand_in(state_for(&home.0));
    let mut claude = world.claude(p);
    let mut ed = Ed::start(&world, options());
    ed.initialize(&home.0, json!({}));
    ed.sync();
    assert!(!world.is_running(h), "no stand-in at initialize");
    ed.open(&f, "x = 1\n");
    ed.run_action(&f, range(0, 0, 0, 1), "Claude: send selection");
    assert_eq!(claude.notification("selection_changed")["text"], "x");
    assert_eq!(tabs(&world.state(p)), [(f.clone(), true)]);
    ed.open(&notes, "n\n");
    let log = ed.recv_where("why notes.py is left alone", |v| {
        v["params"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("does not serve"))
    })["params"]
        .clone();
    let why = format!(
        "ccide: no ccide server is running for {home} (start one there with `ccide serve`, or pass --port); ccide lsp does not serve {home} itself while the server on port 1000 serves {proj}: Claude Code connects to no IDE when two servers hold its folder",
        home = home.0.display(),
        proj = home.0.join("proj").display()
    );
    assert_eq!(log, json!({"type": 2, "message": why}));
    assert!(!world.is_running(h));
}

/// The project's server goes away: after 3 s the editor serves the folder itself with its tabs
/// and unsaved buffers; when the project's server returns, they are handed over and the
/// stand-in stops.
#[test]
fn a_stand_in_hands_over_to_the_projects_server_when_it_returns() {
    let home = Home::new("handover");
    let proj = home.0.join("proj");
    let f = home.write("proj/f.py", "x = 1\n");
    let world = World::default();
    let p = world.add(state_for(&proj), true);
    let s = world.stand_in(state_for(&proj));
    let mut ed = Ed::start(&world, options());
    ed.initialize(&proj, json!({}));
    ed.open(&f, "x = 2\n");
    wait_for("the buffer in the project's server", || {
        world.state(p).editor.document(&f).map(|_| ())
    });
    world.stop(p);
    let gone = Instant::now();
    wait_for("the stand-in with the tab and buffer", || {
        let st = world.state(s);
        (world.is_running(s)
            && tabs(&st) == [(f.clone(), true)]
            && st.editor.document(&f).as_deref() == Some("x = 2\n"))
        .then_some(())
    });
    assert!(gone.elapsed() >= Duration::from_secs(3), "not before 3 s");
    // Edited meanwhile, in the stand-in.
    ed.change(&f, json!([change(0, 4, 0, 5, "3")]));
    wait_for("the change in the stand-in", || {
        (world.state(s).editor.document(&f).as_deref() == Some("x = 3\n")).then_some(())
    });
    world.start(p);
    wait_for(
        "the project's server with the tab and buffer, the stand-in stopped",
        || {
            let st = world.state(p);
            (!world.is_running(s)
                && tabs(&st).contains(&(f.clone(), true))
                && st.editor.document(&f).as_deref() == Some("x = 3\n"))
            .then_some(())
        },
    );
    let mut claude = world.claude(p);
    ed.run_action(&f, range(0, 0, 0, 1), "Claude: send selection");
    assert_eq!(claude.notification("selection_changed")["text"], "x");
}

#[test]
fn a_restarted_server_gets_the_editors_tabs_and_buffers_again() {
    let ts = state();
    let a = ts.write("a.py", "a\n");
    let b = ts.write("b.py", "b\n");
    let (world, k, mut ed) = editor_on(ts, options(), json!({}));
    let st = world.state(k);
    ed.open(&a, "a\n");
    ed.sync();
    world.stop(k);
    // While it is away the editor goes on.
    ed.open(&b, "b edited\n");
    ed.close(&a);
    ed.sync();
    world.start(k);
    wait_for("b's tab and buffer, a closed", || {
        (tabs(&st) == [(b.clone(), true)]
            && st.editor.document(&b).as_deref() == Some("b edited\n"))
        .then_some(())
    });
    drop(ed);
    wait_for("the editor's tabs gone", || {
        tabs(&st).is_empty().then_some(())
    });
}

/// The server's lock file is gone before its event stream's end reaches the loop (the thread
/// reading it has not run yet on a busy machine): a file opened meanwhile waits for the same
/// server through its grace, as it would had the end arrived first, rather than for a
/// stand-in at once (here none can start, as none can beside the server back already).
#[test]
fn a_file_opened_before_the_end_of_the_servers_events_arrives_is_its_again() {
    let ts = state();
    let a = ts.write("a.py", "a\n");
    let b = ts.write("b.py", "b\n");
    let (world, k, mut ed) = editor_on(ts, options(), json!({}));
    let st = world.state(k);
    ed.open(&a, "a\n");
    ed.sync();
    let ends = world.stop_unannounced(k);
    ed.open(&b, "b edited\n");
    ed.sync();
    for end in ends {
        end(None);
    }
    world.start(k);
    wait_for("both tabs, b unsaved", || {
        (tabs(&st) == [(a.clone(), false), (b.clone(), true)]
            && st.editor.document(&b).as_deref() == Some("b edited\n"))
        .then_some(())
    });
}

/// The project's server starts again just after the editor started serving its folder itself
/// (three seconds after it went away): the file goes to the project's server, and the
/// stand-in, to which nothing is linked, stops at once rather than serve the folder beside it.
#[test]
fn a_stand_in_that_the_projects_server_overtook_stops() {
    let home = Home::new("overtaken");
    let proj = home.0.join("proj");
    let f = home.write("proj/f.py", "x = 1\n");
    let world = World::default();
    let p = world.add(state_for(&proj), true);
    let s = world.stand_in(state_for(&proj));
    world.start_beside(p, s);
    let mut ed = Ed::start(&world, options());
    ed.initialize(&proj, json!({}));
    ed.open(&f, "x = 2\n");
    ed.sync();
    world.stop(p);
    wait_for(
        "the project's server with the file, the stand-in stopped",
        || {
            (world.is_running(p)
                && tabs(&world.state(p)) == [(f.clone(), true)]
                && !world.is_running(s))
            .then_some(())
        },
    );
}

/// When the server cannot save its editor model (a full disk), its answer is "done, but not
/// saved": the change is made, the user told once, and the document stays in sync, so that
/// once the disk has room the next change is saved.
#[test]
fn a_failed_save_of_the_editor_model_keeps_the_document_in_sync() {
    let ts = state();
    let a = ts.write("a.py", "a\n");
    let saved = ts.root.join("state/editor.json");
    let (world, k, mut ed) = editor_on(ts, options(), json!({}));
    let st = world.state(k);
    ed.open(&a, "a\n");
    ed.sync();
    // A directory where the model is saved: the rename onto it fails, as on a full disk.
    let _ = std::fs::remove_file(&saved);
    std::fs::create_dir_all(saved.join("full")).unwrap();
    ed.change(&a, json!([{"text": "b\n"}]));
    let shown = ed.incoming("window/showMessage");
    let m = shown["message"].as_str().unwrap();
    assert!(
        m.starts_with("ccide: done, but not saved: cannot save the editor state"),
        "{m}"
    );
    assert_eq!(st.editor.document(&a).as_deref(), Some("b\n"));
    std::fs::remove_dir_all(&saved).unwrap();
    ed.change(&a, json!([{"text": "c\n"}]));
    wait_for("the next change saved", || {
        let on_disk = std::fs::read_to_string(&saved).ok()?;
        on_disk.contains("\"c\\n\"").then_some(())
    });
    assert_eq!(st.editor.save_error(), None);
    // And the editor's close reaches the server.
    ed.close(&a);
    ed.sync();
    assert_eq!((tabs(&st), st.editor.document(&a)), (vec![], None));
}

// ---------------------------------------------------------------------------
// Clients that break LSP's rules, and proposals opened on their own

/// The line the editors' recipes are tried on.
const HELLO: &str = "def greet():\n    print(\"héllo wörld 🦀\")\n";

#[test]
fn kakoune_lsps_inclusive_end_and_ales_byte_columns_are_read_as_meant() {
    let ts = state();
    let f = ts.write("hello.py", HELLO);
    let ws = ts.ws();
    let world = World::default();
    let k = world.add(ts, true);
    let mut claude = world.claude(k);
    let kak = json!({"clientInfo": {"name": "kakoune-lsp", "version": "22.0.0"},
        "capabilities": {"general": {"positionEncodings": ["utf-8", "utf-16"]}}});
    let ale = json!({"clientInfo": null, "capabilities": {
        "workspace": {"applyEdit": false, "workspaceFolders": false},
        "textDocument": {"codeAction": {"codeActionLiteralSupport": {"codeActionKind": {"valueSet": []}}}}}});
    // `print`, as kakoune-lsp ends it (on the `t`); `wörld 🦀` as ALE counts it (bytes, ending
    // on the crab's first byte).
    for (params, r, text, start, end) in [
        (kak, range(1, 4, 1, 8), "print", 4, 9),
        (ale, range(1, 18, 1, 26), "wörld 🦀", 17, 25),
    ] {
        let mut ed = Ed::start(&world, options());
        ed.initialize(&ws, params);
        ed.open(&f, HELLO);
        ed.run_action(&f, r, "Claude: send selection");
        let n = claude.notification("selection_changed");
        assert_eq!(n["text"], text);
        assert_eq!(
            n["selection"],
            json!({"start": {"line": 1, "character": start}, "end": {"line": 1, "character": end}, "isEmpty": false})
        );
        assert_eq!(ed.quit(), 0);
    }
}

/// An editor that asks for code actions as the cursor moves: the selection followed the cursor
/// once it rested, so choosing "send selection" from that menu sends nothing more.
#[test]
fn send_selection_after_the_cursor_rested_sends_it_once() {
    let ts = state();
    let f = ts.write("wide.py", WIDE);
    let o = Options {
        follow: true,
        ..options()
    };
    let (world, k, mut ed) = editor_on(ts, o, json!({}));
    let mut claude = world.claude(k);
    ed.open(&f, WIDE);
    let actions = ed.code_actions(&f, range(2, 4, 2, 10));
    assert_eq!(claude.notification("selection_changed")["text"], "return");
    let select = actions[0]["command"].clone();
    assert_eq!(select["command"], "ccide.select");
    assert_eq!(
        ed.request("workspace/executeCommand", select.clone())["result"],
        Value::Null
    );
    ed.sync();
    assert_eq!(claude.count("selection_changed"), 0);
    // Asked again, it is sent again: the user wants it.
    ed.request("workspace/executeCommand", select);
    assert_eq!(claude.notification("selection_changed")["text"], "return");
}

/// `shutdown` lets go at once (eglot kills the process right after `exit`): the tabs go, and a
/// folder served by the editor stops.
#[test]
fn shutdown_releases_the_servers_before_exit() {
    let home = Home::new("shutdown");
    let proj = home.0.join("proj");
    let f = home.write("proj/f.py", "x\n");
    let world = World::default();
    let s = world.stand_in(state_for(&proj));
    let mut ed = Ed::start(&world, options());
    ed.initialize(&proj, json!({}));
    ed.open(&f, "x\n");
    ed.sync();
    assert!(
        world.is_running(s),
        "no server: the editor serves its folder"
    );
    assert_eq!(tabs(&world.state(s)), [(f.clone(), true)]);
    assert_eq!(ed.result("shutdown", Value::Null), Value::Null);
    assert!(!world.is_running(s));
    assert_eq!(tabs(&world.state(s)), []);
    // Nothing is done after it.
    ed.open(&f, "x\n");
    ed.notify("exit", Value::Null);
    assert_eq!(ed.exit_status(), 0);
    assert!(!world.is_running(s));
}

/// A `ccide lsp` started for a proposal's directory alone (eglot and kakoune-lsp start one per
/// project): the proposal belongs to the server whose state directory holds it, which offers
/// accept as edited there, and no server is made for the state directory.
#[test]
fn an_editor_started_on_a_proposal_reaches_the_server_that_made_it() {
    let ts = state();
    let f = ts.write("main.py", "print('old')\n");
    let state_dir = ts.root.join("state");
    // What marks a state directory (`lockfile::state_dir_holding`).
    std::fs::write(state_dir.join("serve.lock"), "1\n").unwrap();
    std::fs::write(state_dir.join("server.json"), "{}").unwrap();
    let world = World::default();
    let k = world.add(ts, true);
    let claude = world.claude(k);
    open_diff(&world, k, &claude, 7, &f, "print('new')\n");
    let mut claude = claude;
    let dir = state_dir.join("diffs/1");
    let view = handle(
        &world.state(k),
        None,
        Request::DiffView {
            target: Some("1".into()),
        },
    );
    let view = PathBuf::from(view["path"].as_str().unwrap());
    let mut ed = Ed::start(&world, options());
    ed.initialize(&dir, json!({}));
    ed.open(&view, "print('new')\n");
    ed.change(&view, json!([change(0, 7, 0, 10, "edited")]));
    assert_eq!(
        titles(&ed.code_actions(&view, range(0, 0, 0, 0))),
        [
            "Claude: accept",
            "Claude: accept as edited",
            "Claude: reject"
        ]
    );
    let r = ed.run_action(&view, range(0, 0, 0, 0), "Claude: accept as edited");
    assert_eq!(r["result"], Value::Null, "{r}");
    assert_eq!(
        answer(&mut claude, 7)["content"][1]["text"],
        "print('edited')\n"
    );
    // The proposal is no tab of the workspace.
    assert_eq!(tabs(&world.state(k)), []);
}

/// A stand-in serving a home stops once a project inside it is served: the project's files go
/// to its server, the others are left alone (two servers would leave Claude Code in the project
/// with no IDE).
#[test]
fn a_stand_in_for_a_home_stops_when_a_project_inside_it_is_served() {
    let home = Home::new("nested");
    let f = home.write("proj/f.py", "x\n");
    let notes = home.write("notes.py", "n\n");
    let world = World::default();
    let h = world.stand_in(state_for(&home.0));
    let p = world.add(state_for(&home.0.join("proj")), false);
    let mut ed = Ed::start(&world, options());
    ed.initialize(&home.0, json!({}));
    ed.open(&f, "x edited\n");
    ed.open(&notes, "n\n");
    ed.sync();
    assert!(world.is_running(h));
    assert_eq!(
        tabs(&world.state(h)),
        [(f.clone(), false), (notes.clone(), true)]
    );
    world.start(p);
    wait_for(
        "the project's file handed over, the stand-in stopped",
        || {
            let st = world.state(p);
            (!world.is_running(h)
                && tabs(&st) == [(f.clone(), true)]
                && st.editor.document(&f).as_deref() == Some("x edited\n"))
            .then_some(())
        },
    );
    // The file outside the project has no server now.
    let r = ed.run_action(&notes, range(0, 0, 0, 1), "Claude: send selection");
    assert_eq!(r["error"]["message"], "no ccide server serves this file");
}

/// The next request serve's side of a navigation connection gets.
fn nav_request(q: &Queue<Received>) -> crate::rpc::Request {
    match q.pop(Some(Instant::now() + DEADLINE)) {
        Some(Received::Message(Message::Request(r))) => r,
        other => panic!("expected a request on the navigation connection, got {other:?}"),
    }
}

/// Navigation goes over a connection of its own: the editor's request under its id, the
/// answer back to it. A request still pending at `shutdown` is answered then, and a cancel
/// that comes after (the editor gave up on it) finds nothing to cancel and harms nothing.
#[test]
fn navigation_answers_come_back_and_shutdown_answers_what_is_pending() {
    let ts = state();
    let f = ts.write("a.py", "x = 1\n");
    let o = Options {
        navigation: true,
        ..options()
    };
    // No version in its clientInfo: the name alone.
    let (world, k, mut ed) = editor_on(ts, o, json!({"clientInfo": {"name": "ed"}}));
    ed.open(&f, "x = 1\n");
    let at = json!({"textDocument": {"uri": uri(&f)}, "position": {"line": 0, "character": 0}});
    let first = ed.send_request("textDocument/hover", at.clone());
    let (name, serve, from_editor) = world.nav(k, 0);
    assert_eq!(name.as_deref(), Some("ed"));
    assert_eq!(nav_request(&from_editor).method, "initialize");
    let hover = nav_request(&from_editor);
    assert_eq!(
        (hover.id.to_value(), hover.params),
        (json!(first), at.clone())
    );
    serve
        .send(&crate::rpc::response(
            &hover.id,
            Ok(json!({"contents": "x: int"})),
        ))
        .unwrap();
    let a = ed.recv_where("the hover's answer", |v| v["id"] == first);
    assert_eq!(a["result"], json!({"contents": "x: int"}));
    // Pending at shutdown.
    let second = ed.send_request("textDocument/hover", at.clone());
    assert_eq!(nav_request(&from_editor).id.to_value(), json!(second));
    // Its id again, while it is pending: refused, not passed on.
    ed.send(json!({"jsonrpc": "2.0", "id": second, "method": "textDocument/hover", "params": at}));
    let refused = ed.recv_where("the refusal", |v| v["id"] == second);
    assert_eq!(refused["error"]["code"], -32600, "{refused}");
    assert_eq!(ed.result("shutdown", Value::Null), Value::Null);
    let a = ed.recv_where("the pending hover's answer", |v| v["id"] == second);
    assert_eq!(
        a["error"],
        json!({"code": -32801, "message": "ccide lsp is shutting down"})
    );
    ed.notify("$/cancelRequest", json!({"id": second}));
    ed.notify("exit", Value::Null);
    assert_eq!(ed.exit_status(), 0);
}

/// Positions in a navigation answer are converted to the editor's count by the line they are
/// on: an open document's (found by its path when the server spells its uri otherwise), a
/// file's, and, for a file that cannot be read, left as they are.
#[test]
fn navigation_positions_follow_the_editors_count_by_the_file_they_are_in() {
    let ts = state();
    // `@` is left as it is in the editor's uri and percent-encoded in the server's; the
    // editor's buffer is not what is on disk.
    let f = ts.write("a@b.py", "saved\n");
    let o = Options {
        navigation: true,
        ..options()
    };
    let caps = json!({"general": {"positionEncodings": ["utf-8"]}});
    let (world, k, mut ed) = editor_on(ts, o, json!({"capabilities": caps}));
    let editor_uri = format!("file://{}", f.display());
    ed.notify(
        "textDocument/didOpen",
        json!({"textDocument": {"uri": editor_uri, "languageId": "python", "version": 1, "text": WIDE}}),
    );
    let at = json!({"textDocument": {"uri": editor_uri}, "position": {"line": 1, "character": 19}});
    let id = ed.send_request("textDocument/definition", at);
    let (_, serve, from_editor) = world.nav(k, 0);
    assert_eq!(nav_request(&from_editor).method, "initialize");
    let asked = nav_request(&from_editor);
    // UTF-8's 19 is after `😀` and `x`: 14 in UTF-16.
    assert_eq!(
        asked.params["position"],
        json!({"line": 1, "character": 14})
    );
    let server_uri = editor_uri.replace('@', "%40");
    let pos = |l: u32, c: u32| json!({"start": {"line": l, "character": c}, "end": {"line": l, "character": c}});
    let answer = json!([
        {"uri": server_uri, "range": pos(1, 14)},
        {"uri": "file:///nonexistent/gone.py", "range": pos(3, 7)},
    ]);
    serve
        .send(&crate::rpc::response(&asked.id, Ok(answer)))
        .unwrap();
    let got = ed.recv_where("the definition", |v| v["id"] == id);
    assert_eq!(
        got["result"],
        json!([
            {"uri": server_uri, "range": pos(1, 19)},
            {"uri": "file:///nonexistent/gone.py", "range": pos(3, 7)},
        ])
    );
}

/// With two Claude Code sessions that gave their folders, the code action reaches the one
/// whose folder holds the file and says so; `{"session": ID}` picks the other
/// (ccide-protocol(7) §6.4).
#[test]
fn a_mention_goes_to_the_session_whose_folder_holds_the_file_and_the_editor_is_told() {
    let ts = state();
    let f = ts.write("a/x.py", WIDE);
    let (world, k, mut ed) = editor_on(ts, options(), json!({}));
    let ws = world.ws(k);
    let mut a = world.claude(k);
    let mut b = world.claude(k);
    for (c, root) in [(&a, "a"), (&b, "b")] {
        c.client.state.lock().unwrap().roots = Some(vec![ws.join(root)]);
    }
    ed.open(&f, WIDE);
    ed.run_action(&f, range(1, 0, 2, 0), "Claude: @-mention");
    let want = json!({"filePath": f, "lineStart": 1, "lineEnd": 1});
    assert_eq!(a.notification("at_mentioned"), want);
    assert_eq!(
        ed.incoming("window/showMessage"),
        json!({"type": 3, "message": format!("ccide: mentioned (sent to session 1 (pid 0, {}))", ws.join("a").display())})
    );
    let uri = crate::files::file_uri(&f);
    let r = ed.request(
        "workspace/executeCommand",
        json!({"command": "ccide.mention", "arguments": [{"uri": uri, "session": 2}]}),
    );
    assert_eq!(r["result"], Value::Null, "{r}");
    assert_eq!(b.notification("at_mentioned")["filePath"], json!(f));
    assert_eq!(a.count("at_mentioned"), 0);
}
