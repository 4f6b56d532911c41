//! The editor dialogue: one loop over the editor's connection and the servers' events. It
//! answers `initialize` with what is implemented (and every other request before it with
//! ServerNotInitialized, as LSP says), dispatches the editor's requests and notifications to
//! the document mirror (`docs`), the proposals (`proposals`) and the servers (`link`), and
//! does what is due: the selection following the cursor, unsaved content, servers to find
//! again, a stand-in to hand over, files the CLI wrote, diagnostics. Navigation requests
//! (`--navigation`) go to a server's language servers and their answers back to the editor,
//! in its count of columns.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::changes::Change;
use super::docs::Doc;
use super::link::{Choice, Found, Servers, Session, choose, overlapping};
use super::paths::PathMap;
use super::proposals::{
    COMMANDS, HUNK_COMMANDS, Proposals, actions, composed, hint_list, hunk_actions, hunk_at,
    review_of,
};
use super::quirks::{self, Quirks};
use crate::cli::{EXIT_FAILURE, EXIT_OK};
use crate::control::lsp_mux::{NAVIGATION, PASSED};
use crate::control::protocol::{LspClient, Request, Span};
use crate::json::obj;
use crate::lsp::connection::{Connection, Received, Sender};
use crate::lsp::queue::Incoming;
use crate::lsp::text::{Enc, Pos, Text};
use crate::proc::{Deliver, Queue};
use crate::rpc::{ErrorCode, Message, Notification, RequestId, RpcError};

/// Editors that request code actions as the cursor moves send one per keystroke: the selection
/// follows the last one after this pause (claudecode.nvim debounces its selection by 100 ms).
pub(super) const FOLLOW_DELAY: Duration = Duration::from_millis(100);
/// Unsaved content is pushed at most this often: the server saves its editor model, fsync
/// included, at every change, and an editor sends a didChange per keystroke.
const PUSH_DELAY: Duration = Duration::from_millis(200);
/// A server that went away gets this long to come back (a restart keeps port, token and
/// editor model) before its documents are served by a stand-in.
const GRACE: Duration = Duration::from_secs(3);
/// How often a stand-in looks for the project's own server, to hand over to it.
const LOOK: Duration = Duration::from_secs(1);

/// The answer to `initialize` but for the position encoding: only what is implemented. (Text
/// parsed at run time costs less in the binary than the same `json!`.)
const INITIALIZED: &str = concat!(
    r#"{"capabilities": {"textDocumentSync": {"openClose": true, "change": 2, "save": {"includeText": false}},
    "codeActionProvider": true, "executeCommandProvider": {"commands": []},
    "workspace": {"workspaceFolders": {"supported": true, "changeNotifications": true}}},
    "serverInfo": {"name": "ccide", "version": ""#,
    env!("CARGO_PKG_VERSION"),
    r#""}}"#
);

/// What the loop waits for.
pub enum In {
    Editor(Received),
    /// From the event stream of link `.0` as attached the `.1`th time; None once it ended.
    Event(usize, u64, Option<Value>),
    /// From the navigation connection of link `.0` (`--navigation`).
    Nav(usize, Received),
    /// A termination signal.
    End,
    /// Tests: what is due at this time is done now (time is passed, not waited out).
    #[cfg(test)]
    Tick(Instant),
}

/// What the command line says.
pub struct Options {
    /// Every file goes to the server on this port.
    pub port: Option<u16>,
    pub follow: bool,
    pub diagnostics: bool,
    /// Navigation requests go to the server's language servers.
    pub navigation: bool,
    /// The editor's paths and this side's (`--path-map`).
    pub map: PathMap,
}

/// What the editor said at `initialize`.
struct Editor {
    enc: Enc,
    /// How this client breaks LSP's rules, if it is one known to.
    quirks: Quirks,
    follow: bool,
    diagnostics: bool,
    navigation: bool,
    show_document: bool,
    apply_edit: bool,
    /// Name and version, for the server's log.
    name: String,
    roots: Vec<PathBuf>,
}

#[derive(PartialEq)]
enum Phase {
    /// Before `initialize`.
    Waiting,
    Running,
    ShutDown,
}

/// A server and the session attached to it.
struct Link {
    server: Found,
    session: Option<Box<dyn Session>>,
    /// Counts attachments, so the events of an old one are ignored.
    generation: u64,
    /// Since when it is away (None while attached).
    lost: Option<Instant>,
    retry: Instant,
    /// Documents closed while it was away, closed when it is back.
    closed: Vec<PathBuf>,
    /// A stand-in that handed over and stopped.
    retired: bool,
    /// Its LSP connection for navigation, once asked.
    nav: Option<Sender>,
    /// Its recorded changes are to be asked for again once a document of it is open.
    changes_stale: bool,
}

pub struct Dialogue {
    out: Sender,
    inbox: Arc<Queue<In>>,
    servers: Box<dyn Servers>,
    port: Option<u16>,
    editor: Editor,
    phase: Phase,
    docs: Vec<Doc>,
    /// The document last opened or asked for code actions: the active tab.
    focus: Option<String>,
    links: Vec<Link>,
    proposals: Proposals,
    /// Each server's changes of the latest turn (ccide-protocol(7) §15).
    changes: Vec<Change>,
    /// The follow-up selection waiting for the cursor to rest: document, due.
    pending: Option<(String, Instant)>,
    /// The last selection sent, so a cursor resting in place sends nothing new.
    last: Option<Request>,
    /// The follow-up sent the selection of the last code action request: choosing "send
    /// selection" from that request's menu (after the 100 ms it took) sends it once, not twice.
    followed: bool,
    next_poll: Instant,
    next_look: Instant,
    warned: Vec<String>,
    /// The last id of a request to the editor (showDocument, applyEdit): their answers change
    /// nothing, so none is kept.
    asked: u64,
    /// Navigation requests passed on, under the editor's ids: the document each is about (its
    /// uri; empty for workspace/symbol), and the link.
    navs: Incoming<(String, usize)>,
    map: PathMap,
}

/// The path with its directory made physical (servers compare and store those). The name
/// itself is kept: a proposal is shown through a symlink named like the file it changes.
fn canon(p: &Path) -> PathBuf {
    match (p.parent(), p.file_name()) {
        (Some(d), Some(n)) => std::fs::canonicalize(d)
            .unwrap_or_else(|_| d.into())
            .join(n),
        _ => p.to_path_buf(),
    }
}

fn folders(v: &Value) -> Vec<PathBuf> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|f| {
            f["uri"]
                .as_str()
                .and_then(|u| crate::files::uri_path(u, true))
        })
        .map(|p| std::fs::canonicalize(&p).unwrap_or(p))
        .collect()
}

/// The Claude Code session a command's argument names (`{"session": ID}`, id or pid).
fn session(a: &Value) -> Option<String> {
    let s = &a["session"];
    (!s.is_null()).then(|| s.to_string().replace('"', ""))
}

fn text_of(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

/// The largest file whose positions in an answer are converted (a language server holds no
/// bigger document); a bigger one's positions pass as they are.
const MAX_NAMED_FILE: u64 = 8 << 20;

impl Dialogue {
    pub fn new(out: Sender, servers: Box<dyn Servers>, o: Options) -> Dialogue {
        let now = Instant::now();
        Dialogue {
            out,
            inbox: Arc::default(),
            servers,
            port: o.port,
            editor: Editor {
                enc: Enc::Utf16,
                quirks: Quirks::default(),
                follow: o.follow,
                diagnostics: o.diagnostics,
                navigation: o.navigation,
                show_document: false,
                apply_edit: false,
                name: String::new(),
                roots: Vec::new(),
            },
            phase: Phase::Waiting,
            docs: Vec::new(),
            focus: None,
            links: Vec::new(),
            proposals: Proposals::default(),
            changes: Vec::new(),
            pending: None,
            last: None,
            followed: false,
            next_poll: now,
            next_look: now,
            warned: Vec::new(),
            asked: 0,
            navs: Incoming::default(),
            map: o.map,
        }
    }

    /// Where a termination signal is to be handed (`In::End`).
    pub fn inbox(&self) -> Arc<Queue<In>> {
        self.inbox.clone()
    }

    /// Runs until the editor says `exit` or goes away; EXIT_OK after a `shutdown`.
    pub fn run(mut self, conn: Connection) -> i32 {
        let (from, to) = (conn.receiver.clone(), self.inbox.clone());
        let forward = crate::proc::spawn_thread("lsp-editor", move || {
            while let Some(r) = from.pop(None) {
                let end = matches!(r, Received::Closed(_));
                if !to.push(In::Editor(r)) || end {
                    break;
                }
            }
        });
        if let Err(e) = forward {
            crate::log::error!("cannot start a thread: {e}");
            return EXIT_FAILURE;
        }
        loop {
            let stop = match self.inbox.pop(self.deadline()) {
                Some(In::Editor(r)) => self.received(r),
                Some(In::Event(i, g, ev)) => {
                    // Links are gone after `shutdown`, while their streams may still report.
                    if self.links.get(i).is_some_and(|l| l.generation == g) {
                        match ev {
                            Some(v) => self.event(i, &v),
                            None => self.lose(i),
                        }
                    }
                    false
                }
                Some(In::Nav(i, r)) => {
                    self.nav_received(i, r);
                    false
                }
                Some(In::End) => true,
                #[cfg(test)]
                Some(In::Tick(now)) => {
                    self.tick(now);
                    false
                }
                None => false,
            };
            if stop {
                break;
            }
            self.tick(Instant::now());
        }
        conn.receiver.close();
        self.inbox.close();
        self.release();
        // What is answered is written before the process ends.
        self.out.close();
        let until = Instant::now() + Duration::from_secs(1);
        while self.out.queued() > 0 && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(5));
        }
        if self.phase == Phase::ShutDown {
            EXIT_OK
        } else {
            EXIT_FAILURE
        }
    }

    /// Lets go of every server: ending the sessions makes each drop this editor's tabs and
    /// buffers, and a folder served here stops (its lock file removed). The documents go too:
    /// the dialogue is over.
    fn release(&mut self) {
        let served: Vec<PathBuf> = self
            .stand_ins()
            .filter_map(|i| self.links[i].server.workspaces.first().cloned())
            .collect();
        for i in 0..self.links.len() {
            self.end_nav(i, "ccide lsp is shutting down");
        }
        self.links.clear();
        for root in served {
            self.servers.stop(&root);
        }
        self.docs.clear();
        self.pending = None;
        self.proposals = Proposals::default();
        self.changes.clear();
    }

    /// The earliest time something is due.
    fn deadline(&self) -> Option<Instant> {
        let docs = self.docs.iter().filter_map(|d| d.push);
        let links = self
            .links
            .iter()
            .filter(|l| l.session.is_none() && !l.retired)
            .map(|l| l.retry);
        // Files the CLI is about to write are looked at every 100 ms.
        let watches = self
            .proposals
            .watching()
            .then(|| Instant::now() + FOLLOW_DELAY);
        let poll = (self.editor.diagnostics && !self.docs.is_empty()).then_some(self.next_poll);
        let look = self.stand_ins().next().map(|_| self.next_look);
        docs.chain(links)
            .chain(watches)
            .chain(poll)
            .chain(look)
            .chain(self.pending.as_ref().map(|p| p.1))
            .min()
    }

    /// Every message to the editor, in its paths (ccide-protocol(7) §12.6): one naming a file
    /// it cannot reach is not sent as it is; a list of answers goes without it, another answer
    /// fails, saying so, and anything else is said instead.
    fn send(&self, v: &Value) {
        let mut v = v.clone();
        if let Err(e) = self.map.message(&mut v, false) {
            let e = format!("{e}: the editor cannot open it");
            // An answer with something left (references, symbols) goes without the rest.
            let left = v["result"].as_array().is_some_and(|a| !a.is_empty());
            match RequestId::from_value(&v["id"]).filter(|_| v["method"].is_null()) {
                Some(_) if left => {}
                Some(id) => {
                    v = crate::rpc::response(&id, Err(RpcError::new(ErrorCode::RequestFailed, e)))
                }
                None => return self.show(2, format!("ccide: {e}")),
            }
        }
        // An editor gone away ends the loop through its connection's end.
        let _ = self.out.send(&v);
    }

    fn notify(&self, method: &str, params: Value) {
        self.send(&crate::rpc::notification(method, params));
    }

    /// `window/showMessage`: 1 error, 2 warning, 3 info; kind 0 is a warning in the log.
    fn show(&self, kind: u8, message: String) {
        let (method, kind) = match kind {
            0 => ("window/logMessage", 2),
            k => ("window/showMessage", k),
        };
        self.notify(method, obj! {"type": kind, "message": message});
    }

    /// A warning the user sees once, not at every keystroke.
    fn warn_once(&mut self, message: String) {
        if !self.warned.contains(&message) {
            crate::log::warn!("{message}");
            self.show(2, format!("ccide: {message}"));
            self.warned.push(message);
        }
    }

    /// Said once in the editor's log: a document's server is looked for again and again.
    fn log_once(&mut self, message: String) {
        if !self.warned.contains(&message) {
            self.show(0, format!("ccide: {message}"));
            self.warned.push(message);
        }
    }

    fn ask_editor(&mut self, method: &str, params: Value) {
        self.asked += 1;
        let id = crate::rpc::RequestId::number(self.asked);
        self.send(&crate::rpc::request(&id, method, Some(params)));
    }

    fn doc(&self, uri: &str) -> Option<&Doc> {
        self.docs.iter().find(|d| d.uri == uri)
    }

    fn doc_mut(&mut self, uri: &str) -> Option<&mut Doc> {
        self.docs.iter_mut().find(|d| d.uri == uri)
    }

    /// One input from the editor; true when the dialogue is over.
    fn received(&mut self, mut r: Received) -> bool {
        // In this side's paths from here on; a message naming a file outside them is refused,
        // but for the folders, which go on without those outside.
        let (params, id, folders) = match &mut r {
            Received::Message(Message::Request(q)) => {
                (&mut q.params, Some(q.id.clone()), q.method == "initialize")
            }
            Received::Message(Message::Notification(n)) => (
                &mut n.params,
                None,
                n.method == "workspace/didChangeWorkspaceFolders",
            ),
            _ => (&mut Value::Null, None, false),
        };
        if let Err(e) = self.map.message(params, true) {
            let e = format!("{e}: add a --path-map that holds it");
            self.warn_once(e.clone());
            if !folders {
                if let Some(id) = id {
                    let e = RpcError::new(ErrorCode::RequestFailed, e);
                    self.send(&crate::rpc::response(&id, Err(e)));
                }
                return false;
            }
        }
        match r {
            Received::Message(Message::Request(r))
                if self.editor.navigation
                    && self.phase == Phase::Running
                    && NAVIGATION.split(' ').any(|m| m == r.method) =>
            {
                self.navigate(r)
            }
            Received::Message(Message::Request(r)) => {
                let result = self.request(&r.method, &r.params);
                self.send(&crate::rpc::response(&r.id, result));
            }
            Received::Message(Message::Notification(n)) if n.method == "$/cancelRequest" => {
                let id = RequestId::from_value(&n.params["id"]);
                let nav = id.and_then(|id| self.navs.get(&id));
                if let Some(s) = nav.and_then(|n| self.links.get(n.1)?.nav.as_ref()) {
                    let _ = s.send(&crate::rpc::notification("$/cancelRequest", n.params));
                }
            }
            Received::Message(Message::Notification(n)) if n.method == "exit" => return true,
            Received::Message(Message::Notification(n)) => {
                // Before `initialize` notifications are dropped (LSP), and after `shutdown`
                // there is nothing left to do.
                if self.phase == Phase::Running {
                    self.notification(n);
                }
            }
            // The editor's answers to showDocument and applyEdit change nothing here.
            Received::Message(Message::Response(_)) => {}
            Received::Malformed(answer) => self.send(&answer),
            Received::Stderr(_) => {}
            Received::Closed(why) => {
                if let Some(why) = why {
                    crate::log::error!("reading from the editor: {}", crate::text::visible(&why));
                }
                return true;
            }
        }
        false
    }

    fn request(&mut self, method: &str, p: &Value) -> Result<Value, RpcError> {
        match (&self.phase, method) {
            (Phase::Waiting, "initialize") => Ok(self.initialize(p)),
            (Phase::Waiting, _) => Err(RpcError::new(
                ErrorCode::ServerNotInitialized,
                format!("{method} before initialize"),
            )),
            (_, "initialize") => Err(RpcError::new(
                ErrorCode::InvalidRequest,
                "initialize was already answered",
            )),
            (Phase::ShutDown, _) => Err(RpcError::new(
                ErrorCode::InvalidRequest,
                format!("{method} after shutdown"),
            )),
            // Released now, not at `exit` (ccide-protocol(7) §12.4): eglot 1.9 (emacs 28's jsonrpc) kills the process
            // with SIGKILL right after sending `exit`, which left a served folder's lock file
            // behind ("Server exited with status 9").
            (_, "shutdown") => {
                self.phase = Phase::ShutDown;
                self.release();
                Ok(Value::Null)
            }
            (_, "textDocument/codeAction") => Ok(self.code_actions(p)),
            // Shown as well as answered (ccide-protocol(7) §12.3): neovim 0.7 drops the errors of executeCommand
            // (its default handler ignores the answer), and code actions are run that way.
            (_, "workspace/executeCommand") => self.execute(p).map_err(|e| {
                self.show(2, format!("ccide: {e}"));
                RpcError::new(ErrorCode::InternalError, e)
            }),
            _ => Err(RpcError::new(
                ErrorCode::MethodNotFound,
                format!("Method not found: {method}"),
            )),
        }
    }

    fn notification(&mut self, n: Notification) {
        let p = &n.params;
        let uri = p["textDocument"]["uri"].as_str().unwrap_or("").to_string();
        match n.method.as_str() {
            "initialized" => {
                // The editor's folders reach their servers now, so proposals are shown before a
                // file is opened; none is served yet: a stand-in waits for a document needing it.
                for r in self.editor.roots.clone() {
                    self.link_for(&r, false);
                }
            }
            "textDocument/didOpen" => self.did_open(&uri, p),
            "textDocument/didChange" => {
                let enc = self.editor.enc;
                let Some(d) = self.doc_mut(&uri) else {
                    return;
                };
                match d.change(&p["contentChanges"], enc) {
                    Ok(()) => d.push = d.push.or(Some(Instant::now() + PUSH_DELAY)),
                    Err(e) => {
                        crate::log::error!("{}", crate::text::visible(&e));
                        self.show(1, format!("ccide: {e}"));
                    }
                }
            }
            "textDocument/didSave" => {
                if let Some(d) = self.doc_mut(&uri) {
                    if let Some(t) = p["text"].as_str() {
                        d.text = crate::lsp::text::Text::new(t.to_string());
                    }
                    d.saved = Some(d.text.hash());
                    // Told even when the edits were saved before they were pushed: the server
                    // checks the saved file again (ccide-protocol(7) §5.4).
                    d.pushed = true;
                    self.push(&uri);
                }
            }
            "textDocument/didClose" => {
                let Some(k) = self.docs.iter().position(|d| d.uri == uri) else {
                    return;
                };
                let d = self.docs.remove(k);
                if self.focus.as_deref() == Some(&uri) {
                    self.focus = None;
                }
                if let Some(i) = d.link {
                    if self.links[i].session.is_some() {
                        self.tell(i, &close(&d.path));
                    } else {
                        self.links[i].closed.push(d.path);
                    }
                }
            }
            "workspace/didChangeWorkspaceFolders" => {
                let ev = &p["event"];
                let gone = folders(&ev["removed"]);
                self.editor.roots.retain(|r| !gone.contains(r));
                for r in folders(&ev["added"]) {
                    self.editor.roots.push(r.clone());
                    self.link_for(&r, false);
                }
            }
            _ => {}
        }
    }

    fn initialize(&mut self, p: &Value) -> Value {
        let caps = &p["capabilities"];
        let e = &mut self.editor;
        e.quirks = quirks::recognise(p);
        e.enc = e
            .quirks
            .columns(Enc::negotiate(&caps["general"]["positionEncodings"]));
        e.show_document = caps["window"]["showDocument"]["support"] == true;
        e.apply_edit = caps["workspace"]["applyEdit"] == true;
        let o = &p["initializationOptions"];
        e.follow = o["followSelection"].as_bool().unwrap_or(e.follow);
        e.diagnostics = o["diagnostics"].as_bool().unwrap_or(e.diagnostics);
        e.navigation = o["navigation"].as_bool().unwrap_or(e.navigation);
        let ci = &p["clientInfo"];
        e.name = match (ci["name"].as_str(), ci["version"].as_str()) {
            (Some(n), Some(v)) => format!("{n} {v}"),
            (Some(n), None) => n.to_string(),
            (None, _) => "an editor".to_string(),
        };
        e.roots = folders(&p["workspaceFolders"]);
        if e.roots.is_empty() {
            let root = p["rootUri"]
                .as_str()
                .and_then(|u| crate::files::uri_path(u, true));
            e.roots.extend(
                root.or_else(|| p["rootPath"].as_str().map(PathBuf::from))
                    .map(|r| std::fs::canonicalize(&r).unwrap_or(r)),
            );
        }
        self.phase = Phase::Running;
        let mut v: Value = serde_json::from_slice(INITIALIZED.as_bytes()).unwrap_or_default();
        let caps = &mut v["capabilities"];
        caps["positionEncoding"] = e.enc.name().into();
        caps["executeCommandProvider"]["commands"] = COMMANDS.iter().map(|c| c.0).collect();
        if e.navigation {
            for k in PASSED.split(' ') {
                caps[k] = true.into();
            }
        }
        v
    }

    // -----------------------------------------------------------------------------------
    // Navigation (--navigation): the server's language servers answer, over an LSP connection
    // of their own (ccide-protocol(7) §11.8), about the editor's text.

    /// Passes a navigation request on, under the editor's id, once the server has the
    /// document's unsaved text; positions are converted from the editor's count.
    fn navigate(&mut self, mut r: crate::rpc::Request) {
        if self.navs.get(&r.id).is_some() {
            let e = RpcError::new(
                ErrorCode::InvalidRequest,
                "this request id is already pending",
            );
            return self.send(&crate::rpc::response(&r.id, Err(e)));
        }
        let uri = (r.params["textDocument"]["uri"].as_str())
            .or(r.params["item"]["uri"].as_str())
            .unwrap_or("")
            .to_string();
        // A document the editor does not have (workspace/symbol names none, a call hierarchy
        // item may be elsewhere): the active one's server answers.
        let focus = self.focus.as_deref().and_then(|f| self.doc(f));
        let at = self.doc(&uri).or(focus);
        let ext = at.and_then(|d| d.path.extension());
        let ext = ext.map(|e| format!(".{}", e.to_string_lossy()));
        let link = at.and_then(|d| d.link);
        let Some(i) = link.filter(|i| self.links[*i].session.is_some()) else {
            let e = RpcError::new(
                ErrorCode::RequestFailed,
                "no ccide server has this document",
            );
            return self.send(&crate::rpc::response(&r.id, Err(e)));
        };
        if self.doc(&uri).is_some_and(|d| d.push.is_some()) {
            self.push(&uri);
        }
        if self.links[i].nav.is_none() {
            let (inbox, l) = (self.inbox.clone(), &self.links[i]);
            let deliver: Deliver<Received> = Arc::new(move |r| {
                inbox.push(In::Nav(i, r));
            });
            let hello = LspClient {
                root: text_of(l.server.workspaces.first().map_or(Path::new("/"), |w| w)),
                client: Some(self.editor.name.clone()),
                pid: Some(std::process::id().into()),
                extensions: ext.into_iter().collect(),
                diagnostics: false,
            };
            match self.servers.navigate(&l.server.clone(), hello, deliver) {
                Ok(s) => {
                    // Its answer comes under an id no editor request has; nothing waits for it,
                    // and serve reads none of its parameters.
                    let id = RequestId::number(u64::MAX);
                    let _ = s.send(&crate::rpc::request(&id, "initialize", None));
                    self.links[i].nav = Some(s);
                }
                Err(e) => {
                    let e = RpcError::new(ErrorCode::RequestFailed, e);
                    return self.send(&crate::rpc::response(&r.id, Err(e)));
                }
            }
        }
        self.convert(&mut r.params, &uri, false);
        let req = crate::rpc::request(&r.id, &r.method, Some(r.params));
        if let Some(s) = &self.links[i].nav {
            let _ = s.send(&req);
        }
        self.navs.register(r.id, (uri, i));
    }

    /// What the navigation connection of link `i` brought: an answer for the editor, or the
    /// connection's end (the server stopped: what was pending fails, the next asks anew).
    fn nav_received(&mut self, i: usize, r: Received) {
        let Some(l) = self.links.get(i) else {
            return;
        };
        match r {
            Received::Message(Message::Response(a)) => {
                let mine =
                    |id: &RequestId, n: &(String, usize)| n.1 == i && a.id.as_ref() == Some(id);
                let Some((id, (uri, _))) = self.navs.take(mine) else {
                    return;
                };
                let mut result = a.result;
                if let Ok(v) = &mut result {
                    self.convert(v, &uri, true);
                }
                self.send(&crate::rpc::passed_on(&id, result));
            }
            // A server's request for the editor: refused, as the CLI refuses those it does
            // not know (the editor's own would not match ccide's documents).
            Received::Message(Message::Request(q)) => {
                let e = RpcError::new(ErrorCode::MethodNotFound, "ccide lsp passes no requests on");
                if let Some(s) = &l.nav {
                    let _ = s.send(&crate::rpc::response(&q.id, Err(e)));
                }
            }
            Received::Closed(_) => self.end_nav(i, "ccide serve went away"),
            _ => {}
        }
    }

    /// Ends the navigation connection of link `i`: what was pending on it fails (ContentModified,
    /// which editors and the CLI ask again after), and the next request connects anew.
    fn end_nav(&mut self, i: usize, why: &str) {
        if let Some(s) = self.links.get_mut(i).and_then(|l| l.nav.take()) {
            s.close();
        }
        for (id, _) in self.navs.take_all(|_, n| n.1 == i) {
            let e = RpcError::new(ErrorCode::ContentModified, why);
            self.send(&crate::rpc::response(&id, Err(e)));
        }
    }

    /// Converts each position in `v` between the editor's count and UTF-16 (`to_editor`: to the
    /// editor's), by the line of its file: the editor's text where it has the file open, else
    /// the file's.
    fn convert(&self, v: &mut Value, uri: &str, to_editor: bool) {
        let enc = self.editor.enc;
        if enc == Enc::Utf16 {
            return;
        }
        let (from, to) = if to_editor {
            (Enc::Utf16, enc)
        } else {
            (enc, Enc::Utf16)
        };
        // Per file named, once: the editor's document (by its uri, else by its path: servers
        // and editors encode uris differently), else the file's text.
        let mut seen: Vec<(String, Option<usize>, Option<Text>)> = Vec::new();
        crate::lsp::text::each_position(v, uri, uri, false, &mut |p, file, end| {
            if !seen.iter().any(|s| s.0 == file) {
                let path = crate::files::uri_path(file, true);
                let doc = self.docs.iter().position(|d| d.uri == file).or_else(|| {
                    let path = canon(path.as_deref()?);
                    self.docs.iter().position(|d| d.path == path)
                });
                let text = match doc {
                    Some(_) => None,
                    // A regular file only, bounded: an answer may name any path (a device
                    // that never ends, a FIFO that blocks).
                    None => path
                        .and_then(|p| crate::files::read_regular(&p, MAX_NAMED_FILE).ok())
                        .and_then(|b| String::from_utf8(b).ok()),
                };
                seen.push((file.to_string(), doc, text.map(Text::new)));
            }
            let (_, doc, read) = seen.iter().find(|s| s.0 == file).unwrap();
            // A file that cannot be read (gone, not text, not a file): its positions pass as
            // they are, rather than all at its start.
            if let Some(text) = doc.map(|i| &self.docs[i].text).or(read.as_ref()) {
                *p = text.convert(Pos::from_json(p), from, to, end).to_json();
            }
        });
    }

    // -----------------------------------------------------------------------------------
    // Servers

    /// The link to the server that files in `dir` belong to, attached if it can be. With
    /// `stand_in`, when no server holds `dir`, the editor's folder holding it is served in
    /// this process (the last resort).
    fn link_for(&mut self, dir: &Path, stand_in: bool) -> Option<usize> {
        let servers = self.servers.list();
        let owner = crate::lockfile::state_dir_holding(dir);
        let none = match choose(&servers, self.port, dir, owner.as_deref()) {
            Choice::One(s) => return Some(self.link_to(s.clone())),
            Choice::Several(several) => {
                let ports: Vec<String> = several.iter().map(|s| s.port.to_string()).collect();
                self.warn_once(format!(
                    "several ccide servers serve {} (ports {}); choose one with --port",
                    dir.display(),
                    ports.join(", ")
                ));
                return None;
            }
            Choice::None => match (&owner, self.port) {
                // No editor may make a server for a state directory.
                (Some(state), _) => {
                    self.log_once(format!(
                        "{} is in the state directory of a ccide server that is not running ({}): its proposals went with it",
                        dir.display(),
                        state.display()
                    ));
                    return None;
                }
                (None, Some(p)) => format!("no ccide server is running on port {p}"),
                (None, None) => format!(
                    "no ccide server is running for {} (start one there with `ccide serve`, or pass --port)",
                    dir.display()
                ),
            },
        };
        // A server that went away keeps its documents while it has its grace (`find_again`);
        // one whose lock file is gone is away, though the end of its event stream (read by
        // another thread) has not arrived yet.
        if let Some(i) = self.links.iter().position(|l| {
            let away = match l.session {
                None => l.lost.is_some_and(|t| t.elapsed() < GRACE),
                Some(_) => !servers.iter().any(|s| s.key == l.server.key),
            };
            !l.retired && away && l.server.workspaces.iter().any(|w| dir.starts_with(w))
        }) {
            self.lose(i);
            return Some(i);
        }
        if !stand_in {
            // The editor's folders are looked up at `initialized`: none served is no news yet.
            return None;
        }
        self.serve_stand_in(dir, &servers, none)
    }

    /// The last resort of `link_for`: serves the editor's folder holding `dir` in this process
    /// and links to it, unless `--port` names a server or another server overlaps it; `none`
    /// says why no server holds `dir` (`servers`: those running).
    fn serve_stand_in(&mut self, dir: &Path, servers: &[Found], none: String) -> Option<usize> {
        let root = self
            .editor
            .roots
            .iter()
            .filter(|r| dir.starts_with(r))
            .max_by_key(|r| r.components().count())
            .cloned();
        let Some(root) = root.filter(|_| self.port.is_none()) else {
            // Files outside the workspace (a library's source after go-to-definition) are
            // common: said in the log, not in the user's face.
            self.log_once(none);
            return None;
        };
        if let Some(s) = overlapping(servers, &root) {
            let m = format!(
                "{none}; ccide lsp does not serve {} itself while the server on port {} serves {}: Claude Code connects to no IDE when two servers hold its folder",
                root.display(),
                s.port,
                s.folders()
            );
            self.log_once(m);
            return None;
        }
        if let Err(m) = self.servers.serve(&root) {
            self.warn_once(format!("cannot serve {}: {m}", root.display()));
            return None;
        }
        crate::log::info!(
            "no ccide serve ran for {}: serving it in this process until the project's own server runs",
            root.display()
        );
        let servers = self.servers.list();
        let linked = match choose(&servers, None, dir, None) {
            Choice::One(s) => Some(self.link_to(s.clone())),
            _ => None,
        };
        // The project's own server started meanwhile (it starts beside a stand-in, which
        // hands over to it): chosen instead, the stand-in stops now, as no link of it would.
        if !linked.is_some_and(|i| self.links[i].server.own) {
            let served = crate::files::canonical_dir(&root).unwrap_or(root);
            self.servers.stop(&served);
        }
        linked
    }

    /// The link to a server, made and attached if need be.
    fn link_to(&mut self, s: Found) -> usize {
        if let Some(i) = self
            .links
            .iter()
            .position(|l| !l.retired && l.server.key == s.key)
        {
            self.links[i].server = s;
            if self.links[i].session.is_none() {
                self.connect(i);
            }
            return i;
        }
        let now = Instant::now();
        self.links.push(Link {
            server: s,
            session: None,
            generation: 0,
            lost: Some(now),
            retry: now,
            closed: Vec::new(),
            retired: false,
            nav: None,
            changes_stale: false,
        });
        let i = self.links.len() - 1;
        self.connect(i);
        i
    }

    /// (Re)attaches link `i` and tells the server what this editor has open.
    fn connect(&mut self, i: usize) {
        let l = &mut self.links[i];
        l.retry = Instant::now() + Duration::from_millis(250);
        l.generation += 1;
        let (inbox, generation) = (self.inbox.clone(), l.generation);
        let deliver: Deliver<Option<Value>> = Arc::new(move |ev| {
            inbox.push(In::Event(i, generation, ev));
        });
        let answer = match self.servers.attach(&l.server, &self.editor.name, deliver) {
            Ok((session, answer)) => {
                l.session = Some(session);
                l.lost = None;
                answer
            }
            Err(e) => {
                let m = format!(
                    "cannot attach to the ccide server on port {}: {e}",
                    l.server.port
                );
                self.warn_once(m);
                return;
            }
        };
        for p in std::mem::take(&mut self.links[i].closed) {
            self.tell(i, &close(&p));
        }
        // A restarted server kept its editor model, but not what changed meanwhile.
        let mine: Vec<String> = self
            .docs
            .iter()
            .filter(|d| d.link == Some(i))
            .map(|d| d.uri.clone())
            .collect();
        for uri in &mine {
            self.resend(uri);
        }
        if let Some(f) = self.focus.clone().filter(|f| mine.contains(f)) {
            self.open_tab(&f);
        }
        self.proposals.forget(i);
        for d in answer["diffs"].as_array().into_iter().flatten() {
            self.diff_opened(i, d);
        }
        self.changes_due(i);
        self.publish_hints();
    }

    /// Tells a document's server its tab and its content, as if it were opened now.
    fn resend(&mut self, uri: &str) {
        if let Some(d) = self.doc_mut(uri) {
            d.pushed = true;
        }
        self.open_tab(uri);
        self.push(uri);
        self.publish_hints();
    }

    fn lose(&mut self, i: usize) {
        let l = &mut self.links[i];
        if l.session.take().is_some() {
            crate::log::info!(
                "lost the ccide server on port {}; looking for it again",
                l.server.port
            );
        }
        l.generation += 1;
        l.lost.get_or_insert(Instant::now());
    }

    /// Looks for the server of a link that is away: the same server back (a restart), or,
    /// for its documents, the servers that hold them now; after `GRACE`, a stand-in.
    fn find_again(&mut self, i: usize) {
        let now = Instant::now();
        let lost = self.links[i].lost.unwrap_or(now);
        let servers = self.servers.list();
        if let Some(s) = servers.iter().find(|s| s.key == self.links[i].server.key) {
            self.links[i].server = s.clone();
            self.connect(i);
            return;
        }
        // Slower once the grace is over: a link without documents may stay away for hours.
        let wait = if now - lost < GRACE { 250 } else { 1000 };
        self.links[i].retry = now + Duration::from_millis(wait);
        for uri in self.docs_of(i) {
            let Some(dir) = self.doc_dir(&uri) else {
                continue;
            };
            let moved = match choose(&servers, self.port, &dir, None) {
                Choice::One(s) => Some(self.link_to(s.clone())),
                Choice::None if now - lost >= GRACE => self.link_for(&dir, true),
                _ => None,
            };
            if let Some(j) = moved.filter(|j| *j != i && self.links[*j].session.is_some()) {
                self.move_doc(&uri, j);
            }
        }
    }

    /// The folder of an open document, where the server it belongs to is looked for.
    fn doc_dir(&self, uri: &str) -> Option<PathBuf> {
        self.doc(uri)?.path.parent().map(Path::to_path_buf)
    }

    fn docs_of(&self, i: usize) -> Vec<String> {
        self.docs
            .iter()
            .filter(|d| d.link == Some(i))
            .map(|d| d.uri.clone())
            .collect()
    }

    fn move_doc(&mut self, uri: &str, j: usize) {
        if let Some(d) = self.doc_mut(uri) {
            d.link = Some(j);
        }
        self.resend(uri);
        if self.focus.as_deref() == Some(uri) {
            self.open_tab(uri);
        }
    }

    /// This process's stand-ins that still serve.
    fn stand_ins(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.links.len()).filter(|&i| self.links[i].server.own && !self.links[i].retired)
    }

    /// A stand-in hands its documents over to the project's own server once one serves its
    /// folder (or a folder inside it, or above it), and stops: two lock files for one folder
    /// would leave Claude Code with no IDE.
    fn hand_over(&mut self) {
        let own: Vec<usize> = self.stand_ins().collect();
        if own.is_empty() {
            return;
        }
        let servers = self.servers.list();
        for i in own {
            let Some(root) = self.links[i].server.workspaces.first().cloned() else {
                continue;
            };
            let Some(other) = overlapping(&servers, &root) else {
                continue;
            };
            crate::log::info!(
                "the ccide server on port {} serves {}: handing this editor's documents over to it and no longer serving {}",
                other.port,
                other.folders(),
                root.display()
            );
            let foreign: Vec<Found> = servers.iter().filter(|s| !s.own).cloned().collect();
            for uri in self.docs_of(i) {
                let Some(dir) = self.doc_dir(&uri) else {
                    continue;
                };
                match choose(&foreign, self.port, &dir, None) {
                    Choice::One(s) => {
                        let j = self.link_to(s.clone());
                        self.move_doc(&uri, j);
                    }
                    _ => {
                        if let Some(d) = self.doc_mut(&uri) {
                            d.link = None;
                        }
                    }
                }
            }
            self.end_nav(i, "this editor's documents moved to another ccide server");
            let l = &mut self.links[i];
            l.retired = true;
            l.session = None;
            l.generation += 1;
            self.proposals.forget(i);
            self.changes.retain(|c| c.link != i);
            self.publish_hints();
            self.servers.stop(&root);
        }
    }

    /// Sends a request to server `i`. A refusal is returned; a broken connection loses the
    /// server; "done, but not saved" (its editor model could not be written, a full disk) is
    /// done, and said once.
    fn ask(&mut self, i: Option<usize>, req: &Request) -> Result<Value, String> {
        let i = i.ok_or("no ccide server serves this file")?;
        let session = self.links[i]
            .session
            .as_mut()
            .ok_or("the ccide server for this file is away; ccide lsp is looking for it")?;
        match session.call(req) {
            Ok(a) if a["ok"] == true => Ok(a),
            Ok(a) => {
                let e = a["error"].as_str().unwrap_or("refused").to_string();
                if a["kind"] == "not_saved" {
                    self.warn_once(e);
                    Ok(a)
                } else {
                    Err(e)
                }
            }
            Err(e) => {
                self.lose(i);
                Err(format!("lost the ccide server: {e}"))
            }
        }
    }

    /// `ask` for what nobody waits on: a refusal goes to the editor's log.
    fn tell(&mut self, i: usize, req: &Request) {
        if let Err(e) = self.ask(Some(i), req) {
            self.show(0, format!("ccide: {e}"));
        }
    }

    /// A request about a document. One its server refuses (outside its folders) stops the
    /// document's syncing, instead of a refusal at every keystroke.
    fn sync(&mut self, uri: &str, req: &Request) {
        let Some(i) = self.doc(uri).and_then(|d| d.link) else {
            return;
        };
        if let Err(e) = self.ask(Some(i), req) {
            if self.links[i].session.is_some()
                && let Some(d) = self.doc_mut(uri)
            {
                d.link = None;
            }
            self.show(0, format!("ccide: {e}"));
        }
    }

    fn open_tab(&mut self, uri: &str) {
        if let Some(d) = self.doc(uri).filter(|d| d.path.is_file()) {
            let req = Request::Open {
                paths: vec![text_of(&d.path)],
            };
            self.sync(uri, &req);
        }
    }

    /// Tells the server the document's unsaved content, or that it has none any more.
    fn push(&mut self, uri: &str) {
        let Some(d) = self.doc_mut(uri) else {
            return;
        };
        d.push = None;
        let dirty = d.is_dirty();
        if dirty || d.pushed {
            d.pushed = dirty;
            let req = Request::Buffer {
                path: text_of(&d.path),
                content: dirty.then(|| d.text.to_string()),
            };
            self.sync(uri, &req);
        }
    }

    // -----------------------------------------------------------------------------------
    // Documents, selections, proposals

    fn did_open(&mut self, uri: &str, p: &Value) {
        let Some(path) = crate::files::uri_path(uri, true).map(|p| canon(&p)) else {
            return;
        };
        // A proposal opened for review stays local: it is not a file of the workspace. Its
        // server is found first (a `ccide lsp` started for the proposal alone knows no diff).
        let link = path.parent().and_then(|dir| self.link_for(dir, true));
        let proposal = self
            .proposals
            .of(&path)
            .is_some_and(|(_, proposal)| proposal);
        let link = link.filter(|_| !proposal);
        self.docs.retain(|d| d.uri != uri);
        let text = p["textDocument"]["text"].as_str().unwrap_or("").to_string();
        let mut doc = Doc::new(uri, path, text);
        doc.link = link;
        self.docs.push(doc);
        self.focus = Some(uri.to_string());
        self.open_tab(uri);
        self.push(uri);
        match link {
            Some(i) if self.links[i].changes_stale => self.refresh_changes(i),
            _ => self.publish_hints(),
        }
    }

    fn code_actions(&mut self, p: &Value) -> Value {
        // A request for specific kinds (organize imports on save, quick fixes) is not for us;
        // answering it could get "send selection" applied automatically.
        if p["context"]["only"]
            .as_array()
            .is_some_and(|a| !a.is_empty())
        {
            return Value::Array(Vec::new());
        }
        let uri = p["textDocument"]["uri"].as_str().unwrap_or("").to_string();
        let (q, enc) = (self.editor.quirks, self.editor.enc);
        self.followed = false;
        let Some(d) = self.doc_mut(&uri) else {
            return Value::Array(Vec::new());
        };
        let range = q.range(&d.text, &p["range"], enc);
        d.range = range.clone();
        let (path, linked) = (d.path.clone(), d.link.is_some());
        if self.focus.as_deref() != Some(&uri) {
            self.focus = Some(uri.clone());
            self.open_tab(&uri);
        }
        if self.editor.follow && linked {
            self.pending = Some((uri.clone(), Instant::now() + FOLLOW_DELAY));
        }
        let diff = self.proposals.of(&path).map(|(d, proposal)| {
            let open = self
                .docs
                .iter()
                .any(|doc| doc.path.parent() == Some(&d.dir));
            (proposal, open)
        });
        let mut all = actions(&uri, &range, diff);
        let line = range["start"]["line"].as_u64().unwrap_or(0) as usize;
        let Some(a) = all.as_array_mut() else {
            return all;
        };
        if let Some((d, false)) = self.proposals.of(&path)
            && let Ok(review) = review_of(&d.dir)
            && !review.pieces.is_empty()
        {
            let at = hunk_at(&review, line);
            a.extend(hunk_actions(&uri, &range, at, review.pieces.len()));
        }
        let mut text = None;
        for c in self.changes.iter().filter(|c| c.file == path) {
            let text = text.get_or_insert_with(|| self.doc(&uri).map(|d| d.text.to_string()));
            let placed = c.placed(text.as_deref().unwrap_or(""));
            for p in placed.iter().filter(|p| p.lines.contains(&line)) {
                a.extend(c.actions(&uri, &range, p.hunk));
            }
        }
        all
    }

    fn execute(&mut self, p: &Value) -> Result<Value, String> {
        let cmd = p["command"].as_str().unwrap_or("");
        if !COMMANDS.iter().any(|c| c.0 == cmd) {
            return Err(format!("unknown command {cmd}"));
        }
        let a = &p["arguments"][0];
        let uri = a["uri"]
            .as_str()
            .map(String::from)
            .or_else(|| self.focus.clone())
            .ok_or("no document: pass [{\"uri\": ...}] or use the code action")?;
        let d = self
            .doc(&uri)
            .ok_or_else(|| format!("{uri} is not open in ccide lsp"))?;
        let range = if a["range"].is_object() {
            &a["range"]
        } else {
            &d.range
        }
        .clone();
        let (path, link) = (d.path.clone(), d.link);
        match cmd {
            "ccide.select" => {
                self.pending = None;
                let followed = std::mem::take(&mut self.followed);
                if let Some(r) = self.select(&uri, &range, !followed, session(a))? {
                    self.told(&r, "selected");
                }
                return Ok(Value::Null);
            }
            "ccide.mention" => {
                let lines = d.lines(&range, self.editor.enc);
                let req = Request::Mention {
                    path: text_of(&path),
                    start: lines.map(|l| l.0),
                    end: lines.map(|l| l.1),
                    session: session(a),
                };
                let r = self.ask(link, &req)?;
                self.told(&r, "mentioned");
                return Ok(Value::Null);
            }
            _ => {}
        }
        if let Some(verb) = cmd.strip_suffix("Change") {
            let (id, hunk) = (a["change"].as_u64().zip(a["hunk"].as_u64())).ok_or(
                "give the change and the hunk: [{\"uri\": ..., \"change\": ID, \"hunk\": N}]",
            )?;
            return self.decide_change(&path, link, id, hunk as usize, verb == "ccide.undo");
        }
        if HUNK_COMMANDS.contains(&cmd) {
            let hunk = a["hunk"].as_u64().map(|h| h as usize);
            let line = range["start"]["line"].as_u64().unwrap_or(0) as usize;
            return self.review_hunks(cmd, &path, (hunk, line), a["why"].as_str());
        }
        let (diff, proposal) = self
            .proposals
            .of(&path)
            .ok_or_else(|| format!("Claude Code proposes no edit to {}", path.display()))?;
        let (i, id, dir, file) = (
            diff.link,
            diff.id.clone(),
            diff.dir.clone(),
            diff.file.clone(),
        );
        let (accept, content) = match cmd {
            "ccide.show" => return self.show_diff(i, &id, &file, true),
            "ccide.accept" => (true, None),
            "ccide.reject" => (false, None),
            "ccide.acceptEdited" => {
                // The proposal as the editor shows it, unsaved edits included.
                let shown = if proposal { Some(&uri) } else { None };
                let view = shown
                    .and_then(|u| self.doc(u))
                    .or_else(|| self.docs.iter().find(|d| d.path.parent() == Some(&dir)))
                    .ok_or("the proposal is not open in the editor: use \"Claude: show proposed edit\" first, or \"Claude: accept\"")?;
                (true, Some(view.text.to_string()))
            }
            _ => unreachable!("unknown commands are refused above"),
        };
        let req = Request::DiffSettle {
            target: Some(id),
            accept,
            content,
            cwd: None,
            verdict: None,
        };
        self.ask(Some(i), &req)?;
        Ok(Value::Null)
    }

    /// Sends the selection a range makes in a document: text from the editor's buffer,
    /// positions in UTF-16 code units as VS Code sends them. Unless `always`, repeating the
    /// last selection sends nothing. The server's answer when it was sent.
    fn select(
        &mut self,
        uri: &str,
        range: &Value,
        always: bool,
        session: Option<String>,
    ) -> Result<Option<Value>, String> {
        let Some(d) = self.doc(uri) else {
            return Ok(None);
        };
        let (a, b, text) = d.selection(range, self.editor.enc);
        let req = Request::Select {
            path: text_of(&d.path),
            span: Span::Exact(a, b),
            text: Some(text),
            session,
        };
        if !always && self.last.as_ref() == Some(&req) {
            return Ok(None);
        }
        let link = d.link;
        let sent = self.ask(link, &req).map(Some);
        self.last = Some(req);
        sent
    }

    /// Says which Claude Code sessions a selection or mention the user asked for reached
    /// (ccide-protocol(7) §6.4).
    fn told(&self, r: &Value, what: &str) {
        if r["sessions"].is_null() {
            return;
        }
        self.show(
            3,
            format!("ccide: {what} ({})", crate::commands::client::delivered(r)),
        );
    }

    /// Opens the proposal in the editor (window/showDocument) where it can, else names it.
    fn show_diff(&mut self, i: usize, id: &str, file: &Path, focus: bool) -> Result<Value, String> {
        let req = Request::DiffView {
            target: Some(id.to_string()),
        };
        let view = self.ask(Some(i), &req)?;
        let path = canon(Path::new(view["path"].as_str().unwrap_or("")));
        let uri = crate::files::file_uri(&path);
        if let (false, Err(e)) = (self.map.is_empty(), self.map.path(&path, false)) {
            return Err(format!(
                "Claude Code's proposal for {} cannot be opened in the editor: {e}; decide its hunks with the code actions on the file, or see it with `ccide diff show {id}` where ccide runs",
                file.display()
            ));
        }
        if self.editor.show_document {
            self.ask_editor(
                "window/showDocument",
                obj! {"uri": uri.as_str(), "takeFocus": focus},
            );
        } else if focus {
            self.show(
                3,
                format!(
                    "Claude Code's proposal for {} is {} (`ccide diff show {id}` shows the change)",
                    file.display(),
                    path.display()
                ),
            );
        }
        Ok(obj! {"uri": uri, "path": crate::json::path(&path)})
    }

    fn diff_opened(&mut self, i: usize, v: &Value) {
        let Some(d) = self.proposals.opened(i, v) else {
            return;
        };
        let (id, file) = (d.id.clone(), d.file.clone());
        self.show(
            3,
            format!(
                "Claude Code proposes an edit to {}: the code actions on it show, accept or reject it (or `ccide diff show {id}`)",
                file.display()
            ),
        );
        if self.editor.show_document {
            let _ = self.show_diff(i, &id, &file, false);
        }
        self.publish_hints();
    }

    /// A diff settled, and whether the CLI writes its file now: its hints go.
    fn diff_settled(&mut self, i: usize, id: &str, writes: bool) {
        let docs = &self.docs;
        self.proposals
            .settled(i, id, writes, |f| docs.iter().any(|d| d.path == f));
        self.publish_hints();
    }

    fn event(&mut self, i: usize, v: &Value) {
        let file = PathBuf::from(v["file"].as_str().unwrap_or(""));
        if !self.links[i]
            .server
            .workspaces
            .iter()
            .any(|w| file.starts_with(w))
        {
            return;
        }
        match v["event"].as_str() {
            Some("diff_opened") => self.diff_opened(i, v),
            Some("diff_settled") => {
                let writes = matches!(v["how"].as_str(), Some("accepted" | "closed by the client"));
                self.diff_settled(i, v["id"].as_str().unwrap_or(""), writes);
            }
            Some("change_recorded" | "change_decided") => self.changes_due(i),
            _ => {}
        }
    }

    /// What is due: the selection following the cursor, unsaved content, servers to find
    /// again, a stand-in to hand over, files the CLI wrote, diagnostics; as of `now`.
    fn tick(&mut self, now: Instant) {
        if let Some((uri, due)) = self.pending.clone()
            && due <= now
        {
            self.pending = None;
            // Only the focused document's cursor is followed.
            if self.focus.as_deref() == Some(&uri) {
                let range = self.doc(&uri).map(|d| d.range.clone()).unwrap_or_default();
                match self.select(&uri, &range, false, None) {
                    Ok(sent) => self.followed = sent.is_some(),
                    Err(e) => self.show(0, format!("ccide: {e}")),
                }
            }
        }
        let due: Vec<String> = self
            .docs
            .iter()
            .filter(|d| d.push.is_some_and(|t| t <= now))
            .map(|d| d.uri.clone())
            .collect();
        // The hints follow the text: a hunk whose lines the user changed is no longer shown.
        let typed = !due.is_empty();
        for uri in due {
            self.push(&uri);
        }
        if typed && !self.changes.is_empty() {
            self.publish_hints();
        }
        for i in 0..self.links.len() {
            let l = &self.links[i];
            if l.session.is_none() && !l.retired && l.retry <= now {
                self.find_again(i);
            }
        }
        if self.next_look <= now {
            self.next_look = now + LOOK;
            self.hand_over();
        }
        for path in self.proposals.written(now) {
            self.reload(&path, "Claude Code wrote");
        }
        if self.editor.diagnostics && self.next_poll <= now {
            self.next_poll = now + Duration::from_secs(1);
            self.publish();
        }
    }

    /// The text of a workspace file the editor has open, read through the confinement rule of
    /// the server it belongs to (ccide-protocol(7) §10): a file swapped for a symlink to one
    /// outside the server's folders is refused, never read through the link. `Ok(None)`: a
    /// file that cannot be read (gone, not text) or belongs to no server.
    fn read_in_workspace(&self, path: &Path) -> Result<Option<String>, String> {
        let link = self
            .docs
            .iter()
            .find(|d| d.path == path)
            .and_then(|d| d.link);
        let Some(folders) = link
            .and_then(|i| self.links.get(i))
            .map(|l| l.server.workspaces.clone())
            .filter(|f| !f.is_empty())
        else {
            return Ok(None);
        };
        let workspaces = crate::workspaces::Workspaces::new(folders);
        let real = workspaces.resolve(&path.to_string_lossy())?;
        match workspaces.read(&real, crate::state::MAX_READ) {
            Ok(bytes) => Ok(String::from_utf8(bytes).ok()),
            Err(e) if crate::files::confinement_refused(&e) => {
                Err(format!("{} {e}", real.display()))
            }
            Err(_) => Ok(None),
        }
    }

    /// The CLI (`who`) wrote a file the editor has open: a clean buffer is replaced with the
    /// new content (workspace/applyEdit), otherwise the user is told to reload it.
    fn reload(&mut self, path: &Path, who: &str) {
        let new = match self.read_in_workspace(path) {
            Ok(Some(new)) => new,
            Ok(None) => return,
            Err(e) => {
                self.show(2, format!("{who} {}, but {e}", path.display()));
                return;
            }
        };
        let (enc, apply) = (self.editor.enc, self.editor.apply_edit);
        let mut edits = Vec::new();
        for d in self.docs.iter_mut().filter(|d| d.path == path) {
            if apply && d.saved == Some(d.text.hash()) {
                d.saved = Some(crate::text::hash(new.as_bytes()));
                let edit = d.replacement(&new, enc);
                let mut changes = serde_json::Map::new();
                changes.insert(d.uri.clone(), Value::Array(vec![edit]));
                let label = format!("{who} {}", path.display());
                edits.push(obj! {"label": label, "edit": obj! {"changes": changes}});
            } else {
                edits.push(Value::Null);
            }
        }
        for e in edits {
            if e.is_null() {
                self.show(2, format!("{who} {}: reload it", path.display()));
            } else {
                self.ask_editor("workspace/applyEdit", e);
            }
        }
    }

    /// Publishes the diagnostics each server's store holds for the open documents, when they
    /// changed.
    fn publish(&mut self) {
        for i in 0..self.links.len() {
            let paths: Vec<String> = self
                .docs
                .iter()
                .filter(|d| d.link == Some(i))
                .map(|d| text_of(&d.path))
                .collect();
            if paths.is_empty() || self.links[i].session.is_none() {
                continue;
            }
            let Ok(answer) = self.ask(Some(i), &Request::Diagnostics { paths }) else {
                continue;
            };
            let enc = self.editor.enc;
            let mut out = Vec::new();
            for d in self.docs.iter_mut().filter(|d| d.link == Some(i)) {
                let list = d.diagnostics(&answer["files"][text_of(&d.path)], enc);
                if d.published != list {
                    d.published = list;
                    out.push(obj! {"uri": d.uri.as_str(), "diagnostics": d.shown()});
                }
            }
            for o in out {
                self.notify("textDocument/publishDiagnostics", o);
            }
        }
    }
}

impl Dialogue {
    /// Publishes the pending hunks of each open file as hints where they changed: a diff
    /// opened or settled, a hunk decided, a file opened (ccide-protocol(7) §12).
    fn publish_hints(&mut self) {
        let mut out = Vec::new();
        for k in 0..self.docs.len() {
            let path = self.docs[k].path.clone();
            let mut hints = match self.proposals.of(&path) {
                Some((d, false)) => review_of(&d.dir)
                    .map(|r| hint_list(&r, &d.decisions))
                    .unwrap_or_default(),
                _ => Vec::new(),
            };
            let mut text = None;
            for c in self.changes.iter().filter(|c| c.file == path) {
                let text = text.get_or_insert_with(|| self.docs[k].text.to_string());
                hints.extend(c.placed(text).into_iter().map(|p| p.hint));
            }
            let d = &mut self.docs[k];
            if d.hints != hints {
                d.hints = hints;
                out.push(obj! {"uri": d.uri.as_str(), "diagnostics": d.shown()});
            }
        }
        for o in out {
            self.notify("textDocument/publishDiagnostics", o);
        }
    }

    /// A hunk kept or dropped, what is kept accepted, or all rejected, from the real file's
    /// code actions or a key binding: the hunk by number, else the one at the range's start
    /// line; `why`, the reason for the hunk, or for the whole answer.
    fn review_hunks(
        &mut self,
        cmd: &str,
        path: &Path,
        (hunk, line): (Option<usize>, usize),
        why: Option<&str>,
    ) -> Result<Value, String> {
        let none = || format!("Claude Code proposes no edit to {}", path.display());
        let d = self.proposals.of_file_mut(path).ok_or_else(none)?;
        let review = review_of(&d.dir)?;
        let n = review.pieces.len();
        d.decisions.resize(n, None);
        d.reasons.resize(n, None);
        if matches!(cmd, "ccide.acceptKept" | "ccide.rejectAll") {
            let decisions: &[Option<bool>] = match cmd {
                "ccide.acceptKept" => &d.decisions,
                _ => &[],
            };
            let (accept, content, verdict) = composed(&review, decisions, &d.reasons, why)?;
            let (i, id) = (d.link, d.id.clone());
            let req = Request::DiffSettle {
                target: Some(id.clone()),
                accept,
                content,
                cwd: None,
                verdict: Some(verdict),
            };
            self.ask(Some(i), &req)?;
            // Settled now, not only when its event comes: the hints go before the answer
            // (ccide-protocol(7) §12.3).
            self.diff_settled(i, &id, accept);
            return Ok(Value::Null);
        }
        let h = hunk.or_else(|| hunk_at(&review, line)).ok_or_else(|| {
            format!(
                "{cmd} takes a hunk's number, or a range in a hunk: [{{\"uri\": ..., \"hunk\": N}}]"
            )
        })?;
        if !(1..=n).contains(&h) {
            return Err(format!(
                "the proposal for {} has hunks 1 to {n}, not {h}",
                path.display()
            ));
        }
        d.decisions[h - 1] = Some(cmd == "ccide.keepHunk");
        d.reasons[h - 1] = why.map(String::from);
        self.publish_hints();
        Ok(Value::Null)
    }
}

impl Dialogue {
    /// The recorded changes of server `i` are asked for now if the editor has a document of
    /// it open, else once it opens one.
    fn changes_due(&mut self, i: usize) {
        match self.docs.iter().any(|d| d.link == Some(i)) {
            true => self.refresh_changes(i),
            false => self.links[i].changes_stale = true,
        }
    }

    /// Asks server `i` for the latest turn's changes with their content, and shows their hunks.
    fn refresh_changes(&mut self, i: usize) {
        let req = Request::Changes {
            session: None,
            turn: None,
            all: false,
            content: true,
        };
        self.links[i].changes_stale = false;
        match self.ask(Some(i), &req) {
            Ok(answer) => {
                self.changes.retain(|c| c.link != i);
                self.changes.extend(Change::listed(i, &answer));
            }
            Err(e) => self.show(0, format!("ccide: {e}")),
        }
        self.publish_hints();
    }

    /// Keeps or undoes a hunk of a recorded change in `path` (ccide-protocol(7) §12.3): its hint
    /// goes; an undo rewrites the file, and a clean buffer of it follows.
    fn decide_change(
        &mut self,
        path: &Path,
        link: Option<usize>,
        id: u64,
        hunk: usize,
        undo: bool,
    ) -> Result<Value, String> {
        let req = Request::ChangeDecide {
            id: id as usize,
            hunks: vec![hunk],
            undo,
            why: None,
            part: None,
            rewrite: None,
        };
        let r = self.ask(link, &req);
        if let Some(i) = link {
            self.refresh_changes(i);
        }
        r?;
        if undo {
            self.reload(path, "ccide undid a hunk of Claude's change to");
        }
        Ok(Value::Null)
    }
}

fn close(path: &Path) -> Request {
    Request::Close {
        paths: vec![text_of(path)],
        discard: true,
    }
}
