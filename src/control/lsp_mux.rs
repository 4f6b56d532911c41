//! The LSP multiplexer of the control socket: a connection that sent `lsp` (ccide-protocol(7) §9.2)
//! carries Content-Length framed LSP both ways from then on, one client per connection (a CLI
//! session through `ccide lsp-bridge`, an editor through `ccide lsp --navigation`). Every
//! client shares the language servers `serve` keeps warm for getDiagnostics, and ccide stays
//! their one client (ccide-protocol(7) §11.8):
//!
//! - `initialize` is answered from the servers' own answer, cut to what is passed through
//!   (navigation); the servers were initialized by ccide, with ccide's pid and capabilities;
//! - requests get ccide's ids at the server and their own back, `$/cancelRequest` follows
//!   them, and a client's requests still pending when it goes are cancelled;
//! - the text is ccide's (an editor's unsaved buffer, else the file): what a client says
//!   opened or changed only makes ccide look again, before each request too (the CLI does not
//!   tell of files its Bash or hooks wrote); the documents a client has open are held for it
//!   and let go when it goes;
//! - a server's request ccide does not answer goes to the client whose request is pending;
//! - a request waits for its server to have loaded the project (its first diagnostics), so
//!   that the first answer is complete;
//! - `shutdown` and `exit` end the client, never the server.
//!
//! Each client is one loop over its inbox, what it sent and the answers to its requests in
//! order, so its bookkeeping (`Book`) needs no lock. What the clients share is the `Hub`: which
//! requests are pending at which server, and the servers' requests sent to a client (the hub
//! sends them from the server's thread, and keeps each until its answer comes).

use std::fs::File;
use std::io::BufReader;
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};

use super::protocol::LspClient;
use crate::langservers::{LangServers, Server, ServerRequest};
use crate::lsp::connection::{self, Received, SendError, Sender};
use crate::lsp::queue::Incoming;
use crate::proc::Queue;
use crate::rpc::{self, ErrorCode, Message, RequestId, ResponseError};
use crate::state::State;

/// What may wait to be written to a client that does not read.
const CLIENT_QUEUE: usize = 64 << 20;
/// How long a request waits for its server to start (the CLI gives a request 60 s).
const START_WAIT: Duration = Duration::from_secs(55);
/// How long a request waits for its server to load the project (its first diagnostics), so
/// that the first answer is the complete one; after that it is asked anyway.
const LOAD_WAIT: Duration = Duration::from_secs(30);

/// The capabilities passed on from a server's `initialize` answer: those of the requests
/// forwarded (`NAVIGATION`). Diagnostics stay ccide's (getDiagnostics), edits the client's.
pub const PASSED: &str = "hoverProvider definitionProvider declarationProvider typeDefinitionProvider implementationProvider referencesProvider documentSymbolProvider workspaceSymbolProvider callHierarchyProvider typeHierarchyProvider documentHighlightProvider";
pub const NAVIGATION: &str = "textDocument/hover textDocument/definition textDocument/declaration textDocument/typeDefinition textDocument/implementation textDocument/references textDocument/documentSymbol textDocument/documentHighlight textDocument/prepareCallHierarchy callHierarchy/incomingCalls callHierarchy/outgoingCalls textDocument/prepareTypeHierarchy typeHierarchy/supertypes typeHierarchy/subtypes workspace/symbol";

/// What the clients share: the requests pending at each server, so that a server's own
/// request reaches the client it is working for, and those requests until they are answered.
#[derive(Default)]
pub struct Hub {
    routes: Mutex<Routes>,
    /// Numbers the clients (the holders of their documents) and the servers' requests sent
    /// to them.
    next: AtomicU64,
}

#[derive(Default)]
struct Routes {
    pending: Vec<Route>,
    asks: Vec<Asked>,
}

/// A client's request pending at a server: the way back to that client for the server's own
/// requests meanwhile.
struct Route {
    /// The server's `index` in the serve's list.
    server: usize,
    /// The server's id for the request.
    sid: u64,
    /// The client's number (`Client::me`).
    client: u64,
    to: Sender,
}

/// A server's request sent to a client, until the client answers.
struct Asked {
    /// The client's number (`Client::me`).
    client: u64,
    /// The id the client got it under.
    id: u64,
    request: ServerRequest,
}

impl Hub {
    /// The hub of a serve: each of its servers' own requests goes through it (`route`).
    pub fn new(langservers: &LangServers) -> Arc<Hub> {
        let hub: Arc<Hub> = Arc::default();
        for s in langservers.all() {
            let (h, server) = (Arc::downgrade(&hub), s.index());
            s.on_request(Some(Arc::new(move |req| match h.upgrade() {
                Some(hub) => hub.route(server, req),
                None => Some(req),
            })));
        }
        hub
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Routes> {
        crate::proc::lock(&self.routes)
    }

    /// To the client that sent the server's latest pending request; with none, the request is
    /// given back and ccide answers it as it does alone (-32601 for a method it does not
    /// know, as the CLI does).
    fn route(&self, server: usize, req: ServerRequest) -> Option<ServerRequest> {
        let mut r = self.lock();
        let Some(Route { client, to, .. }) = r
            .pending
            .iter()
            .filter(|p| p.server == server)
            .max_by_key(|p| p.sid)
        else {
            return Some(req);
        };
        let id = self.next.fetch_add(1, Ordering::Relaxed) + 1;
        let msg = rpc::request(
            &RequestId::number(id),
            &req.method,
            Some(req.params.clone()),
        );
        if to.send(&msg).is_err() {
            return Some(req);
        }
        let client = *client;
        r.asks.push(Asked {
            client,
            id,
            request: req,
        });
        None
    }
}

/// One request sent on (kept under the client's id): where it went.
struct Pend<S> {
    token: u64,
    server: S,
    sid: u64,
    path: PathBuf,
    /// The document's version at ccide when it was sent.
    version: i32,
}

/// A client's bookkeeping: its requests under way, by its ids (their answers come back
/// under a token of ccide's), and the documents held for it. Its own version numbers are not
/// kept: the server sees ccide's.
struct Book<S> {
    next: u64,
    pending: Incoming<Pend<S>>,
    docs: Vec<PathBuf>,
}

impl<S> Book<S> {
    fn new() -> Book<S> {
        Book {
            next: 0,
            pending: Incoming::default(),
            docs: Vec::new(),
        }
    }

    fn token(&mut self) -> u64 {
        self.next += 1;
        self.next
    }

    /// The request the answer under `token` is for: the client's id, and where it went.
    fn answered(&mut self, token: u64) -> Option<(RequestId, Pend<S>)> {
        self.pending.take(|_, p| p.token == token)
    }

    /// `path` is held for the client (it opened it, or asked about it).
    fn opened(&mut self, path: &Path) {
        if !self.docs.iter().any(|d| d == path) {
            self.docs.push(path.to_path_buf());
        }
    }
}

/// The answer a client gets: the server's, unless the document changed at ccide while it
/// was computed (its positions may be off): then ContentModified, which the CLI asks again
/// after (three times, 0.5, 1 and 2 s later).
fn outcome(
    answer: Result<Value, ResponseError>,
    sent: i32,
    now: Option<i32>,
) -> Result<Value, ResponseError> {
    match answer {
        Ok(_) if now != Some(sent) => Err(ResponseError::new(
            ErrorCode::ContentModified,
            "the document changed while the language server answered",
        )),
        a => a,
    }
}

/// The capabilities a client is told: what the servers' `initialize` answers offer of the
/// requests passed on (the first server's where several offer one), full-text sync.
fn capabilities(answers: &[Value]) -> Value {
    let mut caps = Map::new();
    for a in answers {
        for k in PASSED.split(' ') {
            if let Some(v) = a["capabilities"].get(k).filter(|v| !v.is_null()) {
                caps.entry(k).or_insert_with(|| v.clone());
            }
        }
    }
    // Full: what the CLI sends anyway; the text is ccide's in any case.
    caps.insert("textDocumentSync".into(), 1.into());
    Value::Object(caps)
}

/// The document a request is about: its `textDocument`, or the `item` of a call or type
/// hierarchy request. None for `workspace/symbol`.
fn about(params: &Value) -> Option<PathBuf> {
    let uri = params["textDocument"]["uri"]
        .as_str()
        .or(params["item"]["uri"].as_str())?;
    crate::files::uri_path(uri, true)
}

/// Serves one LSP client until it sends `exit` or its connection ends.
pub fn serve(
    state: &Arc<State>,
    hub: &Arc<Hub>,
    reader: BufReader<File>,
    writer: UnixStream,
    client: LspClient,
) {
    let who = super::editors::who(client.client.as_deref(), client.pid, "an LSP client");
    crate::log::info!(
        "LSP client {who} connected for {} (extensions: {}; diagnostics {})",
        crate::text::visible(&client.root),
        crate::text::visible(&client.extensions.join(" ")),
        if client.diagnostics { "on" } else { "off" }
    );
    let inbox: Arc<Queue<In>> = Arc::default();
    let end = writer.try_clone();
    let Ok(socket) = writer.try_clone() else {
        return;
    };
    let i = inbox.clone();
    let deliver: crate::proc::Deliver<Received> = Arc::new(move |r| {
        i.push(In::Client(r));
    });
    // What came with the `lsp` line is in `reader`'s buffer, read first.
    let w = File::from(OwnedFd::from(writer));
    let Ok(out) = connection::start("lsp-client", reader, w, CLIENT_QUEUE, deliver) else {
        return;
    };
    let (cancelled, released) = run(state, hub, client, who.clone(), out, inbox, Some(socket));
    if let Ok(s) = end {
        // Its reading ends; the writer writes what is queued, then its end closes the socket.
        let _ = s.shutdown(std::net::Shutdown::Read);
    }
    crate::log::info!(
        "LSP client {who} disconnected ({cancelled} request(s) cancelled, {released} document(s) let go)"
    );
}

/// The client's loop over a connection's two queues: `inbox` takes what the client sent
/// (`In::Client`) and the servers' answers, `out` what it is sent; `socket` is cut when the
/// client stops reading (`Client::send`). Returns how many requests were cancelled and
/// documents let go when the client went.
fn run(
    state: &Arc<State>,
    hub: &Arc<Hub>,
    client: LspClient,
    who: String,
    out: Sender,
    inbox: Arc<Queue<In>>,
    socket: Option<UnixStream>,
) -> (usize, usize) {
    let mut f = Client {
        langservers: state.langservers.clone(),
        state,
        hub,
        me: hub.next.fetch_add(1, Ordering::Relaxed) + 1,
        out,
        socket,
        who,
        inbox,
        root: PathBuf::from(&client.root),
        extensions: client.extensions,
        servers: Vec::new(),
        phase: Phase::Waiting,
        book: Book::new(),
    };
    while let Some(r) = f.inbox.pop(None) {
        let more = match r {
            In::Client(Received::Message(m)) => f.handle(m),
            In::Client(Received::Malformed(answer)) => {
                f.send(&answer);
                true
            }
            In::Client(Received::Stderr(_)) => true,
            In::Client(Received::Closed(_)) => false,
            In::Answer(token, result) => {
                f.answered(token, result);
                true
            }
        };
        if !more {
            break;
        }
    }
    f.end()
}

/// Where a client is in LSP's lifecycle.
#[derive(Clone, Copy, PartialEq)]
enum Phase {
    /// Before `initialize`.
    Waiting,
    Running,
    /// After `shutdown`.
    ShutDown,
}

/// What a client's loop takes in turn: what the client sent, and the servers' answers to
/// its requests (under the token each was sent with).
enum In {
    Client(Received),
    Answer(u64, Result<Value, ResponseError>),
}

/// One client's loop and bookkeeping.
struct Client<'a> {
    state: &'a State,
    langservers: Arc<LangServers>,
    hub: &'a Arc<Hub>,
    /// The client's number: the holder of its documents in the servers.
    me: u64,
    out: Sender,
    /// The connection itself, to cut it when the client stops reading (`send`); None in
    /// memory, where nothing waits to be written.
    socket: Option<UnixStream>,
    who: String,
    inbox: Arc<Queue<In>>,
    root: PathBuf,
    extensions: Vec<String>,
    /// The servers its `initialize` was answered for; the first answers `workspace/symbol`.
    servers: Vec<Arc<Server>>,
    phase: Phase,
    book: Book<Arc<Server>>,
}

impl Client<'_> {
    /// A client that stops reading is not left with a connection that lost some answers: once
    /// `CLIENT_QUEUE` waits for it, the connection is cut (its reader sees the end, and the
    /// loop lets go of it), as a WebSocket client that stops reading is closed. The bridge
    /// then exits, and the CLI starts it again at its next request.
    fn send(&self, v: &Value) {
        if let Err(SendError::Full { queued }) = self.out.send(v) {
            crate::log::warn!(
                "LSP client {}: {queued} bytes wait for it, unread; closing its connection",
                self.who
            );
            if let Some(s) = &self.socket {
                let _ = s.shutdown(std::net::Shutdown::Both);
            }
        }
    }

    fn reply(&self, id: &RequestId, r: Result<Value, ResponseError>) {
        self.send(&rpc::passed_on(id, r));
    }

    fn fail(&self, id: &RequestId, code: ErrorCode, message: String) {
        self.reply(id, Err(ResponseError::new(code, message)));
    }

    /// False when the client is done.
    fn handle(&mut self, m: Message) -> bool {
        match m {
            // LSP's order: nothing but `initialize` before it, nothing after `shutdown`.
            Message::Request(r) if self.phase != Phase::Running => {
                let (code, message) = match (self.phase, r.method.as_str()) {
                    (Phase::Waiting, "initialize") => {
                        self.phase = Phase::Running;
                        self.initialize(&r.id);
                        return true;
                    }
                    (Phase::Waiting, m) => (
                        ErrorCode::ServerNotInitialized,
                        format!("{m} before initialize"),
                    ),
                    (_, m) => (ErrorCode::InvalidRequest, format!("{m} after shutdown")),
                };
                self.fail(&r.id, code, message);
            }
            // Before `initialize` notifications are dropped (`exit` aside).
            Message::Notification(n) if self.phase == Phase::Waiting && n.method != "exit" => {}
            Message::Request(r) => match r.method.as_str() {
                "initialize" => self.fail(
                    &r.id,
                    ErrorCode::InvalidRequest,
                    "initialize was already answered".into(),
                ),
                "shutdown" => {
                    self.phase = Phase::ShutDown;
                    self.reply(&r.id, Ok(Value::Null));
                }
                m if NAVIGATION.split(' ').any(|n| n == m) => self.forward(r),
                m => self.fail(
                    &r.id,
                    ErrorCode::MethodNotFound,
                    format!("ccide passes only navigation to its language servers, not {m}"),
                ),
            },
            Message::Notification(n) => return self.notified(&n.method, &n.params),
            // The client's answer to a server's request.
            Message::Response(r) => {
                let Some(id) = r.id.and_then(|id| id.as_u64()) else {
                    return true;
                };
                let mut routes = self.hub.lock();
                let me = self.me;
                let i = routes
                    .asks
                    .iter()
                    .position(|a| a.client == me && a.id == id);
                let Some(i) = i else { return true };
                let asked = routes.asks.swap_remove(i);
                drop(routes);
                asked.request.respond(r.result.map_err(|e| {
                    let code = if e.code == ErrorCode::MethodNotFound as i64 {
                        ErrorCode::MethodNotFound
                    } else {
                        ErrorCode::RequestFailed
                    };
                    rpc::RpcError::new(code, e.message)
                }));
            }
        }
        true
    }

    /// A server's answer to the client's request sent under `token`.
    fn answered(&mut self, token: u64, result: Result<Value, ResponseError>) {
        if let Some((id, p)) = self.book.answered(token) {
            let (server, sid) = (p.server.index(), p.sid);
            self.hub
                .lock()
                .pending
                .retain(|r| r.server != server || r.sid != sid);
            let now = p.server.version(&p.path);
            self.reply(&id, outcome(result, p.version, now));
        }
    }

    /// The servers for the extensions the client named, else every one; each started if
    /// needed, and their answers cut to what ccide passes on.
    fn initialize(&mut self, id: &RequestId) {
        let mut servers: Vec<Arc<Server>> = Vec::new();
        for e in &self.extensions {
            if let Some(s) = self.langservers.server(&self.root.join(format!("_{e}")))
                && !servers.iter().any(|x| Arc::ptr_eq(x, s))
            {
                servers.push(s.clone());
            }
        }
        if self.extensions.is_empty() {
            servers = self.langservers.all().to_vec();
        }
        // All started at once: the answer waits for the slowest, not for their sum.
        for s in &servers {
            s.warm();
        }
        let deadline = Instant::now() + START_WAIT;
        let answers: Vec<Value> = servers
            .iter()
            .filter_map(|s| s.initialize_result(deadline))
            .collect();
        let mut result = Map::new();
        result.insert("capabilities".into(), capabilities(&answers));
        if let Some(info) = answers.first().and_then(|a| a.get("serverInfo")) {
            result.insert("serverInfo".into(), info.clone());
        }
        self.servers = servers;
        self.reply(id, Ok(Value::Object(result)));
    }

    /// A path the client named, as ccide names it (inside a workspace folder).
    fn path(&self, p: &Path) -> Option<PathBuf> {
        self.state.resolve(&p.to_string_lossy()).ok()
    }

    /// Brings the server's copy of `path` up to ccide's text (the editor's unsaved buffer,
    /// else the file, read again if it changed) and holds it for this client: the version
    /// the server has.
    fn hold(&mut self, s: &Arc<Server>, path: &Path) -> Option<i32> {
        self.book.opened(path);
        let unsaved = self.state.editor.document(path);
        Some(s.hold(path, self.me, unsaved.as_deref())?.version())
    }

    /// False at `exit`.
    fn notified(&mut self, method: &str, params: &Value) -> bool {
        match method {
            "exit" => return false,
            "$/cancelRequest" => {
                let id = RequestId::from_value(&params["id"]);
                if let Some(p) = id.and_then(|id| self.book.pending.get(&id)) {
                    p.server.cancel(p.sid);
                }
                return true;
            }
            _ => {}
        }
        let Some(path) = about(params).and_then(|p| self.path(&p)) else {
            return true;
        };
        let Some(s) = self.langservers.server(&path).cloned() else {
            return true;
        };
        match method {
            // The text the client sends is not used: ccide's is the same or newer (the CLI
            // sends what it just wrote, or read).
            "textDocument/didOpen" | "textDocument/didChange" | "textDocument/didSave" => {
                self.hold(&s, &path);
            }
            "textDocument/didClose" => {
                self.book.docs.retain(|d| *d != path);
                s.release(&path, self.me);
            }
            _ => {}
        }
        true
    }

    fn forward(&mut self, r: rpc::Request) {
        if self.book.pending.get(&r.id).is_some() {
            let e = format!("request id {} is already pending", r.id.to_value());
            return self.fail(&r.id, ErrorCode::InvalidRequest, e);
        }
        let path = match about(&r.params) {
            Some(p) => self.path(&p),
            // workspace/symbol: a document of the client's in its first server, which a
            // server such as tsserver needs to know the project.
            None => self.servers.first().and_then(|s| {
                let langservers = &self.langservers;
                let mine = |p: &&PathBuf| langservers.server(p).is_some_and(|x| Arc::ptr_eq(x, s));
                self.book.docs.iter().find(mine).cloned()
            }),
        };
        let Some(path) = path else {
            let e = "the request names no document in a workspace folder of ccide serve (for workspace/symbol: open one first)";
            return self.fail(&r.id, ErrorCode::InvalidParams, e.into());
        };
        let s = self.langservers.server(&path).cloned();
        let ready = s.filter(|s| s.initialize_result(Instant::now() + START_WAIT).is_some());
        let Some((s, version)) = ready.and_then(|s| Some((s.clone(), self.hold(&s, &path)?)))
        else {
            let e = format!(
                "no language server of ccide serve answers for {} (see ccide status)",
                path.display()
            );
            return self.fail(&r.id, ErrorCode::RequestFailed, e);
        };
        // Asked before the project is loaded, a server answers from what it has (tsserver:
        // the import line, not the definition); the CLI takes the first answer as final.
        if !s.loaded(Instant::now() + LOAD_WAIT) {
            crate::log::info!(
                "language server for {} has not loaded its project after {} s: asking it anyway",
                crate::text::visible(&path.to_string_lossy()),
                LOAD_WAIT.as_secs()
            );
        }
        let token = self.book.token();
        let inbox = self.inbox.clone();
        let on_answer = Box::new(move |result| {
            inbox.push(In::Answer(token, result));
        });
        let server = s.index();
        // Held until the request is in the hub: the server may ask something at once.
        let mut routes = self.hub.lock();
        match s.request(&path, &r.method, r.params, on_answer) {
            Ok(sid) => {
                routes.pending.push(Route {
                    server,
                    sid,
                    client: self.me,
                    to: self.out.clone(),
                });
                drop(routes);
                self.book.pending.register(
                    r.id,
                    Pend {
                        token,
                        server: s,
                        sid,
                        path,
                        version,
                    },
                );
            }
            // It stopped or restarts: the CLI asks again after ContentModified.
            Err(e) => self.fail(&r.id, ErrorCode::ContentModified, e),
        }
    }

    /// The client is gone: its pending requests are cancelled, its documents let go, and the
    /// servers' requests it did not answer get ccide's answer.
    fn end(&mut self) -> (usize, usize) {
        self.inbox.close();
        let me = self.me;
        let mut routes = self.hub.lock();
        routes.pending.retain(|r| r.client != me);
        // Dropped, they get ccide's answer.
        routes.asks.retain(|a| a.client != me);
        drop(routes);
        let pending = self.book.pending.take_all(|_, _| true);
        for (_, p) in &pending {
            p.server.cancel(p.sid);
        }
        let cancelled = pending.len();
        for path in &self.book.docs {
            if let Some(s) = self.langservers.server(path) {
                s.release(path, me);
            }
        }
        self.out.close();
        (cancelled, self.book.docs.len())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::lsp::connection::Connection;
    use crate::rpc::{Notification, Request, Response};
    use crate::state::testing::{self, TestState};
    use serde_json::json;

    const WITHIN: Duration = Duration::from_secs(10);

    fn id(v: Value) -> RequestId {
        RequestId::from_value(&v).unwrap()
    }

    /// Two clients send id 1 at once: each book knows its own, by the token its answer
    /// comes back with, and a cancel finds the server's id.
    #[test]
    fn each_client_keeps_its_own_ids() {
        let (mut a, mut b): (Book<&str>, Book<&str>) = (Book::new(), Book::new());
        for (book, sid) in [(&mut a, 7), (&mut b, 8)] {
            let token = book.token();
            book.pending.register(
                id(json!(1)),
                Pend {
                    token,
                    server: "ts",
                    sid,
                    path: "/w/a.ts".into(),
                    version: 3,
                },
            );
        }
        assert_eq!(a.pending.get(&id(json!(1))).map(|p| p.sid), Some(7));
        assert_eq!(b.pending.get(&id(json!(1))).map(|p| p.sid), Some(8));
        assert!(
            a.pending.get(&id(json!("1"))).is_none(),
            "\"1\" is another id"
        );
        let (rid, p) = b.answered(1).unwrap();
        assert_eq!((rid, p.sid), (id(json!(1)), 8));
        assert!(b.answered(1).is_none(), "answered once");
        assert!(b.pending.get(&id(json!(1))).is_none());
        // Tokens are never reused: a late answer cannot reach a newer request.
        assert_eq!((a.token(), a.token()), (2, 3));
    }

    #[test]
    fn a_document_is_held_once_however_often_the_client_names_it() {
        let mut b: Book<&str> = Book::new();
        let f = Path::new("/w/a.ts");
        b.opened(f);
        b.opened(f);
        b.opened(Path::new("/w/b.ts"));
        assert_eq!(b.docs, [f, Path::new("/w/b.ts")]);
    }

    #[test]
    fn an_answer_for_text_that_changed_since_is_content_modified() {
        let hover = || Ok(json!({"contents": "x"}));
        assert_eq!(outcome(hover(), 4, Some(4)), hover());
        let e = outcome(hover(), 4, Some(5)).unwrap_err();
        assert_eq!(e.code, -32801);
        assert_eq!(outcome(hover(), 4, None).unwrap_err().code, -32801);
        // The server's own errors pass as they are.
        let own = Err(ResponseError {
            code: -32800,
            message: "cancelled".into(),
            data: None,
        });
        assert_eq!(outcome(own.clone(), 4, Some(5)), own);
    }

    #[test]
    fn initialize_passes_navigation_only_the_first_server_first() {
        let ts = json!({"capabilities": {
            "hoverProvider": true, "definitionProvider": true, "diagnosticProvider": {"x": 1},
            "completionProvider": {}, "renameProvider": true, "positionEncoding": "utf-16",
            "textDocumentSync": 2, "workspaceSymbolProvider": null}});
        let py = json!({"capabilities": {"hoverProvider": false, "referencesProvider": true,
            "callHierarchyProvider": true}});
        assert_eq!(
            capabilities(&[ts, py]),
            json!({"hoverProvider": true, "definitionProvider": true,
                   "referencesProvider": true, "callHierarchyProvider": true,
                   "textDocumentSync": 1})
        );
        assert_eq!(capabilities(&[]), json!({"textDocumentSync": 1}));
    }

    #[test]
    fn a_request_is_about_its_document_or_its_items() {
        let td = json!({"textDocument": {"uri": "file:///w/a%20b.ts"}, "position": {}});
        assert_eq!(about(&td), Some(PathBuf::from("/w/a b.ts")));
        let item = json!({"item": {"uri": "file:///w/c.ts", "name": "f"}});
        assert_eq!(about(&item), Some(PathBuf::from("/w/c.ts")));
        assert_eq!(about(&json!({"query": "compose"})), None);
        assert_eq!(about(&json!({"textDocument": {"uri": "untitled:1"}})), None);
    }

    // ------------------------------------------------------- the loop, over memory connections

    /// A serve whose language server for `*.fk` is played by the test over
    /// `Connection::memory()`, and LSP clients served by `run` over memory connections.
    struct Served {
        t: TestState,
        hub: Arc<Hub>,
        /// The test's end of each connection to the server ccide started, newest last.
        starts: Arc<Queue<Connection>>,
        server: Option<Connection>,
    }

    /// One client: what it sends goes into the loop's inbox as its connection's reader
    /// delivers it; what it is sent comes out of the memory connection.
    struct Peer {
        inbox: Arc<Queue<In>>,
        from: Arc<Queue<Received>>,
        ended: std::thread::JoinHandle<(usize, usize)>,
    }

    impl Served {
        fn new() -> Served {
            let spec = crate::langservers::parse_spec("*.fk=memory-server").unwrap();
            let cfg = crate::langservers::Config {
                quiet: Duration::from_millis(50),
                ..Default::default()
            };
            let t = testing::state_serving(vec![spec], cfg);
            let starts: Arc<Queue<Connection>> = Arc::default();
            let s = starts.clone();
            *t.state.langservers.all()[0].memory.lock().unwrap() = Some(Arc::new(move || {
                let (ours, theirs) = Connection::memory();
                s.push(theirs);
                ours
            }));
            let hub = Hub::new(&t.state.langservers);
            Served {
                t,
                hub,
                starts,
                server: None,
            }
        }

        /// A serve with no language server at all.
        fn without_servers() -> Served {
            let t = testing::state();
            let hub = Hub::new(&t.state.langservers);
            Served {
                t,
                hub,
                starts: Arc::default(),
                server: None,
            }
        }

        /// A client asking about `.fk` files, its loop running.
        fn connect(&self) -> Peer {
            let (ours, theirs) = Connection::memory();
            let inbox: Arc<Queue<In>> = Arc::default();
            let client = LspClient {
                root: self.t.ws().to_string_lossy().into(),
                client: None,
                pid: None,
                extensions: vec![".fk".into()],
                diagnostics: false,
            };
            let (state, hub, i) = (self.t.state.clone(), self.hub.clone(), inbox.clone());
            let ended = std::thread::spawn(move || {
                run(&state, &hub, client, "a test".into(), ours.sender, i, None)
            });
            Peer {
                inbox,
                from: theirs.receiver,
                ended,
            }
        }

        /// The next message ccide sends the server, which it started.
        fn recv(&mut self) -> Message {
            if self.server.is_none() {
                let started = self.starts.pop(Some(Instant::now() + WITHIN));
                self.server = Some(started.expect("ccide starts the server"));
            }
            let server = self.server.as_ref().unwrap();
            match server.receiver.pop(Some(Instant::now() + WITHIN)) {
                Some(Received::Message(m)) => m,
                other => panic!("expected a message for the server, got {other:?}"),
            }
        }

        fn request(&mut self, method: &str) -> Request {
            match self.recv() {
                Message::Request(r) if r.method == method => r,
                other => panic!("expected a {method} request at the server, got {other:?}"),
            }
        }

        fn notification(&mut self, method: &str) -> Notification {
            match self.recv() {
                Message::Notification(n) if n.method == method => n,
                other => panic!("expected a {method} notification at the server, got {other:?}"),
            }
        }

        /// The server sends `v`.
        fn send(&self, mut v: Value) {
            v["jsonrpc"] = "2.0".into();
            let server = self.server.as_ref().expect("started");
            server.sender.send(&v).unwrap();
        }

        fn answer(&self, r: &Request, result: Value) {
            self.send(json!({"id": r.id.to_value(), "result": result}));
        }

        /// The server answers ccide's `initialize` with `result`; what ccide asked.
        fn start(&mut self, result: Value) -> Value {
            let init = self.request("initialize");
            self.answer(&init, result);
            self.notification("initialized");
            init.params
        }

        /// The server takes the didOpen of a client's first request and publishes for it:
        /// it has loaded its project, and that request comes through.
        fn load(&mut self) {
            let open = self.notification("textDocument/didOpen");
            let doc = &open.params["textDocument"];
            let params = json!({"uri": doc["uri"], "version": doc["version"], "diagnostics": []});
            self.send(json!({"method": "textDocument/publishDiagnostics", "params": params}));
        }

        /// Hover params for `path`.
        fn hover(&self, path: &Path) -> Value {
            json!({"textDocument": {"uri": crate::files::file_uri(path)},
                   "position": {"line": 0, "character": 1}})
        }
    }

    impl Drop for Served {
        fn drop(&mut self) {
            for s in self.t.state.langservers.all() {
                s.close();
            }
            if let Some(s) = self.server.take() {
                s.sender.close();
            }
        }
    }

    fn caps() -> Value {
        json!({"capabilities": {"textDocumentSync": 2, "hoverProvider": true,
                                "completionProvider": {}, "renameProvider": true},
               "serverInfo": {"name": "scripted", "version": "0.1"}})
    }

    impl Peer {
        /// The client sends `v`, as its connection delivers it.
        fn send(&self, mut v: Value) {
            v["jsonrpc"] = "2.0".into();
            self.inbox.push(In::Client(match rpc::classify(v) {
                Ok(m) => Received::Message(m),
                Err(answer) => Received::Malformed(answer),
            }));
        }

        fn request(&self, id: u64, method: &str, params: Value) {
            self.send(json!({"id": id, "method": method, "params": params}));
        }

        fn recv(&self) -> Received {
            let got = self.from.pop(Some(Instant::now() + WITHIN));
            got.expect("a message for the client")
        }

        /// The next message the client gets, which must be an answer.
        fn answer(&self) -> Response {
            match self.recv() {
                Received::Message(Message::Response(r)) => r,
                other => panic!("expected an answer for the client, got {other:?}"),
            }
        }

        /// The client's answer to `initialize` (its server started already, or none).
        fn initialized(&self) -> Response {
            self.request(1, "initialize", json!({"processId": 1, "capabilities": {}}));
            self.answer()
        }

        /// Its connection ends: the loop's count of requests cancelled and documents let go.
        fn hang_up(self) -> (usize, usize) {
            self.inbox.push(In::Client(Received::Closed(None)));
            self.ended.join().unwrap()
        }
    }

    fn error_of(r: &Response) -> (i64, &str) {
        let e = r.result.as_ref().expect_err("an error answer");
        (e.code, e.message.as_str())
    }

    /// `initialize` is answered once the server answered ccide's own: its navigation
    /// capabilities and name, full sync; the server was asked with ccide's pid.
    #[test]
    fn initialize_is_answered_from_the_servers_answer_to_ccide() {
        let mut s = Served::new();
        let c = s.connect();
        c.request(1, "initialize", json!({"processId": 1, "capabilities": {}}));
        let asked = s.start(caps());
        assert_eq!(asked["processId"], std::process::id());
        let r = c.answer();
        assert_eq!(r.id, Some(id(json!(1))));
        assert_eq!(
            r.result,
            Ok(
                json!({"capabilities": {"hoverProvider": true, "textDocumentSync": 1},
                      "serverInfo": {"name": "scripted", "version": "0.1"}})
            )
        );
        let again = c.initialized();
        assert_eq!(
            error_of(&again),
            (-32600, "initialize was already answered")
        );
    }

    /// Two clients each send request 1: the server gets two ids of ccide's, and each answer
    /// goes back to its client under the client's id, whatever the order the server answers.
    #[test]
    fn two_clients_on_the_same_ids_each_get_their_own_answer() {
        let mut s = Served::new();
        let (a, b) = (s.connect(), s.connect());
        a.request(1, "initialize", json!({"processId": 1, "capabilities": {}}));
        s.start(caps());
        a.answer();
        assert!(b.initialized().result.is_ok());
        let f = s.t.write("a.fk", "x\n");
        a.request(1, "textDocument/hover", s.hover(&f));
        s.load();
        let ra = s.request("textDocument/hover");
        assert_eq!(ra.params, s.hover(&f));
        b.request(1, "textDocument/hover", s.hover(&f));
        let rb = s.request("textDocument/hover");
        assert_ne!(ra.id, rb.id, "renumbered: the server tells them apart");
        s.answer(&rb, json!({"contents": "for b"}));
        s.answer(&ra, json!({"contents": "for a"}));
        for (c, contents) in [(&b, "for b"), (&a, "for a")] {
            let r = c.answer();
            assert_eq!(r.id, Some(id(json!(1))));
            assert_eq!(r.result, Ok(json!({ "contents": contents })));
        }
    }

    /// `$/cancelRequest` names the client's id; the server is told its own.
    #[test]
    fn a_cancel_reaches_the_server_under_its_own_id() {
        let mut s = Served::new();
        let c = s.connect();
        c.request(1, "initialize", json!({"processId": 1, "capabilities": {}}));
        s.start(caps());
        c.answer();
        let f = s.t.write("a.fk", "x\n");
        c.request(5, "textDocument/hover", s.hover(&f));
        s.load();
        let r = s.request("textDocument/hover");
        // An id with nothing pending is no cancel at all.
        c.send(json!({"method": "$/cancelRequest", "params": {"id": 4}}));
        c.send(json!({"method": "$/cancelRequest", "params": {"id": 5}}));
        let cancel = s.notification("$/cancelRequest");
        assert_eq!(cancel.params, json!({ "id": r.id.to_value() }));
        s.send(json!({"id": r.id.to_value(), "error": {"code": -32800, "message": "cancelled"}}));
        let answer = c.answer();
        assert_eq!(answer.id, Some(id(json!(5))));
        assert_eq!(error_of(&answer), (-32800, "cancelled"));
    }

    /// LSP's order: a request before `initialize` is -32002, one after `shutdown` -32600, a
    /// notification before `initialize` is dropped; `exit` ends the client.
    #[test]
    fn requests_before_initialize_and_after_shutdown_are_refused() {
        let s = Served::without_servers();
        let c = s.connect();
        let f = s.t.write("a.fk", "x\n");
        c.request(1, "textDocument/hover", s.hover(&f));
        let r = c.answer();
        assert_eq!(r.id, Some(id(json!(1))));
        assert_eq!(
            error_of(&r),
            (-32002, "textDocument/hover before initialize")
        );
        let open = json!({"textDocument": {"uri": crate::files::file_uri(&f), "version": 1,
                                           "languageId": "fk", "text": "x\n"}});
        c.send(json!({"method": "textDocument/didOpen", "params": open}));
        let init = c.initialized();
        assert_eq!(
            init.result,
            Ok(json!({"capabilities": {"textDocumentSync": 1}}))
        );
        c.request(2, "shutdown", Value::Null);
        assert_eq!(c.answer().result, Ok(Value::Null));
        c.request(3, "textDocument/hover", s.hover(&f));
        let r = c.answer();
        assert_eq!(r.id, Some(id(json!(3))));
        assert_eq!(error_of(&r), (-32600, "textDocument/hover after shutdown"));
        c.send(json!({"method": "exit"}));
        assert!(matches!(c.recv(), Received::Closed(None)));
        assert_eq!(c.ended.join().unwrap(), (0, 0), "the didOpen was dropped");
    }

    /// A client that goes with a request pending: the server is told to cancel it, and the
    /// document held for the client is let go.
    #[test]
    fn a_client_that_goes_has_its_pending_requests_cancelled() {
        let mut s = Served::new();
        let c = s.connect();
        c.request(1, "initialize", json!({"processId": 1, "capabilities": {}}));
        s.start(caps());
        c.answer();
        let f = s.t.write("a.fk", "x\n");
        c.request(2, "textDocument/hover", s.hover(&f));
        s.load();
        let r = s.request("textDocument/hover");
        assert_eq!(c.hang_up(), (1, 1));
        let cancel = s.notification("$/cancelRequest");
        assert_eq!(cancel.params, json!({ "id": r.id.to_value() }));
    }

    /// A server's request while a client's request is pending goes to that client, under an
    /// id of ccide's; its answer goes back to the server under the server's id.
    #[test]
    fn a_servers_request_goes_to_the_client_whose_request_is_pending() {
        let mut s = Served::new();
        let (a, b) = (s.connect(), s.connect());
        a.request(1, "initialize", json!({"processId": 1, "capabilities": {}}));
        s.start(caps());
        a.answer();
        b.initialized();
        let f = s.t.write("a.fk", "x\n");
        b.request(1, "textDocument/hover", s.hover(&f));
        s.load();
        let r = s.request("textDocument/hover");
        let params = json!({"type": 3, "message": "which?", "actions": [{"title": "Yes"}]});
        s.send(json!({"id": 99, "method": "window/showMessageRequest", "params": params}));
        let asked = match b.recv() {
            Received::Message(Message::Request(q)) => q,
            other => panic!("expected the server's request at b, got {other:?}"),
        };
        assert_eq!(
            (asked.method.as_str(), &asked.params),
            ("window/showMessageRequest", &params)
        );
        b.send(json!({"id": asked.id.to_value(), "result": {"title": "Yes"}}));
        match s.recv() {
            Message::Response(answer) => {
                assert_eq!(answer.id, Some(id(json!(99))));
                assert_eq!(answer.result, Ok(json!({"title": "Yes"})));
            }
            other => panic!("expected b's answer at the server, got {other:?}"),
        }
        s.answer(&r, Value::Null);
        assert_eq!(b.answer().result, Ok(Value::Null));
        assert!(
            a.from.pop(Some(Instant::now())).is_none(),
            "a was asked nothing"
        );
    }
}
