//! `ccide lsp`: a language server over stdio that the editor starts for the file types the
//! user chooses. It finds (or serves) the `ccide serve` of each file's workspace and turns the
//! editor's own LSP traffic into the editor model Claude Code sees: didOpen and didClose are
//! tabs, didChange is unsaved content, code action requests carry the selection, and pending
//! diffs become code actions. It never writes a file; the editor session it attaches on each
//! server's control socket (see `control::editors`) makes the server drop its tabs when it
//! ends.

mod owner;
mod quirks;
mod text;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::cli::{Args, EXIT_FAILURE, EXIT_OK, Fail, Outcome};
use crate::control::FindError;
use crate::rpc::{ErrorCode, Message, RpcError};
use text::Enc;

/// Editors that request code actions as the cursor moves send one per keystroke: the selection
/// follows the last one after this pause (claudecode.nvim debounces its selection by 100 ms).
const FOLLOW_DELAY: Duration = Duration::from_millis(100);
/// Unsaved content is pushed at most this often: the server saves its editor model, fsync
/// included, at every change, and an editor sends a didChange per keystroke.
const PUSH_DELAY: Duration = Duration::from_millis(200);
/// A server that went away gets this long to come back (a restart keeps port, token and
/// editor model) before `ccide lsp` serves the folder itself.
const GRACE: Duration = Duration::from_secs(3);

/// The commands, by the titles their code actions show.
const COMMANDS: [(&str, &str); 6] = [
    ("ccide.select", "Claude: send selection"),
    ("ccide.mention", "Claude: @-mention"),
    ("ccide.show", "Claude: show proposed edit"),
    ("ccide.accept", "Claude: accept"),
    ("ccide.acceptEdited", "Claude: accept as edited"),
    ("ccide.reject", "Claude: reject"),
];

/// The answer to `initialize` but for the position encoding: only what is implemented. (Text
/// parsed at run time costs less in the binary than the same `json!`.)
const INITIALIZED: &str = concat!(
    r#"{"capabilities": {"textDocumentSync": {"openClose": true, "change": 2, "save": {"includeText": false}},
    "codeActionProvider": true, "executeCommandProvider": {"commands": ["ccide.select", "ccide.mention",
    "ccide.show", "ccide.accept", "ccide.acceptEdited", "ccide.reject"]},
    "workspace": {"workspaceFolders": {"supported": true, "changeNotifications": true}}},
    "serverInfo": {"name": "ccide", "version": ""#,
    env!("CARGO_PKG_VERSION"),
    r#""}}"#
);

/// What the main loop waits for, from the threads reading the editor and the servers.
#[derive(Default)]
struct Queue {
    items: Mutex<Vec<In>>,
    ready: Condvar,
}

impl Queue {
    fn push(&self, i: In) {
        self.items.lock().unwrap().push(i);
        self.ready.notify_one();
    }

    /// The oldest input, waiting until `until` at most.
    fn pop(&self, until: Option<Instant>) -> Option<In> {
        let mut items = self.items.lock().unwrap();
        while items.is_empty() {
            let left = until.map(|u| u.saturating_duration_since(Instant::now()));
            if left.is_some_and(|l| l.is_zero()) {
                return None;
            }
            let wait = left.unwrap_or(Duration::from_secs(3600));
            items = self.ready.wait_timeout(items, wait).unwrap().0;
        }
        Some(items.remove(0))
    }
}

enum In {
    Lsp(Value),
    /// Standard input ended, or a termination signal arrived.
    End,
    /// An event from a server's `events` stream: link, generation, event.
    Event(usize, u64, Value),
    /// A server's `events` stream ended: it stopped or restarts.
    Gone(usize, u64),
}

/// One request/answer line connection to a server's control socket.
struct Conn {
    r: BufReader<UnixStream>,
    w: UnixStream,
}

impl Conn {
    fn open(path: &Path) -> std::io::Result<Conn> {
        let w = UnixStream::connect(path)?;
        w.set_read_timeout(Some(Duration::from_secs(5)))?;
        Ok(Conn {
            r: BufReader::new(w.try_clone()?),
            w,
        })
    }

    fn call(&mut self, v: &Value) -> std::io::Result<Value> {
        self.w.write_all(format!("{v}\n").as_bytes())?;
        self.line()
    }

    fn line(&mut self) -> std::io::Result<Value> {
        let mut line = String::new();
        if self.r.read_line(&mut line)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        Ok(serde_json::from_str(&line)?)
    }
}

/// A server reached through its control socket, and what `ccide lsp` knows of it.
struct Link {
    control: PathBuf,
    /// The directory it was found for, to find it again after a restart.
    dir: PathBuf,
    workspaces: Vec<PathBuf>,
    /// The attached session; None while the server is away.
    conn: Option<Conn>,
    /// Counts connections, so events of an old one are ignored.
    generation: u64,
    lost: Option<Instant>,
    retry: Instant,
    /// Documents closed while the server was away, closed when it is back.
    closed: Vec<PathBuf>,
    diffs: Vec<Diff>,
}

struct Diff {
    id: String,
    file: PathBuf,
    dir: PathBuf,
    /// The target file's modification time and size when the diff opened, to see the CLI
    /// write it after the diff is settled.
    stamp: Option<crate::files::Stamp>,
}

struct Doc {
    uri: String,
    path: PathBuf,
    text: String,
    /// Hash of the content on disk as the editor last saw it (None: no such file yet).
    saved: Option<u64>,
    link: Option<usize>,
    /// When the unsaved content is due to be pushed.
    push: Option<Instant>,
    /// Whether the server holds unsaved content for it.
    pushed: bool,
    /// The range of the last code action request (the editor's selection then).
    range: Value,
    /// The diagnostics last published for it (`--diagnostics`).
    published: Value,
}

/// A file the CLI is expected to write after a settled diff: path, stamp, give up at.
type Watch = (PathBuf, Option<crate::files::Stamp>, Instant);

struct Lsp {
    queue: Arc<Queue>,
    config: PathBuf,
    port: Option<u16>,
    enc: Enc,
    quirks: quirks::Quirks,
    follow: bool,
    diagnostics: bool,
    show_document: bool,
    apply_edit: bool,
    editor: String,
    roots: Vec<PathBuf>,
    docs: Vec<Doc>,
    links: Vec<Link>,
    focus: Option<String>,
    /// The follow-up selection waiting for the cursor to rest: document, due.
    pending: Option<(String, Instant)>,
    /// The last selection sent, so a cursor resting in place sends nothing new.
    last: Value,
    /// The follow-up sent the selection of the last code action request: choosing "send
    /// selection" from that request's menu (after the 100 ms it took) sends it once, not twice.
    followed: bool,
    watches: Vec<Watch>,
    next_poll: Instant,
    served: Vec<super::serve::Started>,
    warned: Vec<String>,
    next_id: u64,
    shutdown: bool,
}

pub fn run(args: &Args) -> Outcome {
    if let Some(extra) = args.operands.first() {
        return Err(Fail::Usage(format!("unexpected argument '{extra}'")));
    }
    // Before any thread: a termination signal then ends the loop below, which stops a server
    // served in this process properly (its lock file removed).
    crate::sys::block_termination_signals();
    let queue = Arc::new(Queue::default());
    let mut lsp = Lsp {
        queue: queue.clone(),
        config: crate::lockfile::config_dir(args.value("--config-dir").as_deref())?,
        port: args.parsed::<u16>("--port", "a port number from 1 to 65535")?,
        enc: Enc::Utf16,
        quirks: quirks::Quirks::default(),
        follow: !args.switch("--no-follow")?,
        diagnostics: args.switch("--diagnostics")?,
        show_document: false,
        apply_edit: false,
        editor: String::new(),
        roots: Vec::new(),
        docs: Vec::new(),
        links: Vec::new(),
        focus: None,
        pending: None,
        last: Value::Null,
        followed: false,
        watches: Vec::new(),
        next_poll: Instant::now(),
        served: Vec::new(),
        warned: Vec::new(),
        next_id: 0,
        shutdown: false,
    };
    let q = queue.clone();
    std::thread::spawn(move || {
        let mut stdin = BufReader::new(std::io::stdin().lock());
        loop {
            match crate::lsp::framing::read_framed(&mut stdin) {
                // Null stands for a body that is not JSON: answered with a parse error.
                Ok(Some(body)) => {
                    q.push(In::Lsp(serde_json::from_slice(&body).unwrap_or_default()))
                }
                Ok(None) => break,
                Err(e) => {
                    crate::log::error!("reading from the editor: {e}");
                    break;
                }
            }
        }
        q.push(In::End);
    });
    std::thread::spawn(move || {
        crate::sys::wait_termination_signal();
        queue.push(In::End);
    });
    Ok(lsp.run())
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

fn physical(p: &Path) -> PathBuf {
    std::fs::canonicalize(p).unwrap_or_else(|_| p.into())
}

fn pos(p: (usize, usize)) -> Value {
    json!({"line": p.0, "character": p.1})
}

/// The code actions for a document: selection and mention, and with a pending diff for it
/// (`Some(is the proposal itself, the proposal is open)`) what can be done with that.
fn actions(uri: &str, range: &Value, diff: Option<(bool, bool)>) -> Value {
    let arguments = json!([{"uri": uri, "range": range}]);
    let offered = |cmd: &str| match (cmd, diff) {
        ("ccide.select" | "ccide.mention", d) => !d.is_some_and(|d| d.0),
        (_, None) => false,
        ("ccide.show", Some((proposal, _))) => !proposal,
        ("ccide.acceptEdited", Some((proposal, open))) => proposal || open,
        _ => true,
    };
    COMMANDS
        .iter()
        .filter(|(cmd, _)| offered(cmd))
        .map(|(cmd, title)| {
            json!({"title": title, "command": {"title": title, "command": cmd, "arguments": arguments}})
        })
        .collect()
}

impl Lsp {
    fn doc(&self, uri: &str) -> Option<&Doc> {
        self.docs.iter().find(|d| d.uri == uri)
    }

    fn doc_mut(&mut self, uri: &str) -> Option<&mut Doc> {
        self.docs.iter_mut().find(|d| d.uri == uri)
    }

    fn run(&mut self) -> i32 {
        loop {
            let input = self.queue.pop(self.deadline());
            let stop = match input {
                Some(In::Lsp(v)) => self.message(v),
                Some(In::End) => true,
                // Links are gone after `shutdown`, while their streams may still report.
                Some(In::Event(i, g, v))
                    if self.links.get(i).is_some_and(|l| l.generation == g) =>
                {
                    self.event(i, &v);
                    false
                }
                Some(In::Gone(i, g)) if self.links.get(i).is_some_and(|l| l.generation == g) => {
                    self.lose(i);
                    false
                }
                _ => false,
            };
            if stop {
                break;
            }
            self.tick();
        }
        self.release();
        if self.shutdown { EXIT_OK } else { EXIT_FAILURE }
    }

    /// Lets go of every server: closing the sessions makes each drop this editor's tabs and
    /// buffers, and a server served here stops (its lock file removed).
    fn release(&mut self) {
        self.links.clear();
        for r in self.served.drain(..) {
            super::serve::stop(r);
        }
    }

    /// The earliest time something is due.
    fn deadline(&self) -> Option<Instant> {
        let docs = self.docs.iter().filter_map(|d| d.push);
        let links = self
            .links
            .iter()
            .filter(|l| l.conn.is_none())
            .map(|l| l.retry);
        // Files the CLI is about to write are looked at every 100 ms.
        let watches = (!self.watches.is_empty()).then(|| Instant::now() + FOLLOW_DELAY);
        let poll = (self.diagnostics && !self.docs.is_empty()).then_some(self.next_poll);
        docs.chain(links)
            .chain(watches)
            .chain(poll)
            .chain(self.pending.as_ref().map(|p| p.1))
            .min()
    }

    fn send(&self, v: &Value) {
        let _ = crate::lsp::framing::write_framed(&mut std::io::stdout().lock(), v);
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
        self.notify(method, json!({"type": kind, "message": message}));
    }

    /// A warning the user sees once, not at every keystroke.
    fn warn_once(&mut self, message: String) {
        if !self.warned.contains(&message) {
            crate::log::warn!("{message}");
            self.show(2, format!("ccide: {message}"));
            self.warned.push(message);
        }
    }

    fn ask_editor(&mut self, method: &str, params: Value) {
        self.next_id += 1;
        let id = crate::rpc::RequestId::number(self.next_id);
        self.send(&crate::rpc::request(&id, method, Some(params)));
    }

    /// One message from the editor; true when it says to exit.
    fn message(&mut self, v: Value) -> bool {
        if v.is_null() {
            let e = RpcError::new(ErrorCode::ParseError, "Parse error");
            self.send(&crate::rpc::error_response(None, &e));
            return false;
        }
        match crate::rpc::classify(v) {
            Err(answer) => self.send(&answer),
            Ok(Message::Request(r)) => {
                let result = self.request(&r.method, &r.params);
                self.send(&crate::rpc::response(&r.id, result));
            }
            Ok(Message::Notification(n)) => {
                if n.method == "exit" {
                    return true;
                }
                self.notification(&n.method, &n.params);
            }
            // The editor's answers to showDocument and applyEdit change nothing here.
            Ok(Message::Response(_)) => {}
        }
        false
    }

    fn request(&mut self, method: &str, p: &Value) -> Result<Value, RpcError> {
        match method {
            "initialize" => Ok(self.initialize(p)),
            // Released now, not at `exit`: eglot 1.9 (emacs 28's jsonrpc) kills the process
            // with SIGKILL right after sending `exit`, which left a served folder's lock file
            // behind ("Server exited with status 9").
            "shutdown" => {
                self.shutdown = true;
                self.release();
                Ok(Value::Null)
            }
            "textDocument/codeAction" => Ok(self.code_actions(p)),
            // Shown as well as answered: neovim 0.7 drops the errors of executeCommand
            // (its default handler ignores the answer), and code actions are run that way.
            "workspace/executeCommand" => self.execute(p).map_err(|e| {
                self.show(2, format!("ccide: {e}"));
                RpcError::new(ErrorCode::InternalError, e)
            }),
            _ => Err(RpcError::new(
                ErrorCode::MethodNotFound,
                format!("Method not found: {method}"),
            )),
        }
    }

    fn notification(&mut self, method: &str, p: &Value) {
        let uri = p["textDocument"]["uri"].as_str().unwrap_or("").to_string();
        match method {
            "initialized" => {
                for r in self.roots.clone() {
                    self.link_for(&r);
                }
            }
            "textDocument/didOpen" => self.did_open(&uri, p),
            "textDocument/didChange" => {
                let enc = self.enc;
                if let Some(d) = self.doc_mut(&uri) {
                    for c in p["contentChanges"].as_array().into_iter().flatten() {
                        text::apply_change(&mut d.text, c, enc);
                    }
                    d.push = d.push.or(Some(Instant::now() + PUSH_DELAY));
                }
            }
            "textDocument/didSave" => {
                if let Some(d) = self.doc_mut(&uri) {
                    if let Some(t) = p["text"].as_str() {
                        d.text = t.to_string();
                    }
                    d.saved = Some(crate::text::hash(d.text.as_bytes()));
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
                    if self.links[i].conn.is_some() {
                        self.tell(
                            i,
                            json!({"cmd": "close", "paths": [d.path], "discard": true}),
                        );
                    } else {
                        self.links[i].closed.push(d.path);
                    }
                }
            }
            "workspace/didChangeWorkspaceFolders" => {
                let ev = &p["event"];
                let gone = folders(&ev["removed"]);
                self.roots.retain(|r| !gone.contains(r));
                for r in folders(&ev["added"]) {
                    self.roots.push(r.clone());
                    self.link_for(&r);
                }
            }
            _ => {}
        }
    }

    fn initialize(&mut self, p: &Value) -> Value {
        let caps = &p["capabilities"];
        self.quirks = quirks::recognise(p);
        self.enc = self
            .quirks
            .columns(Enc::negotiate(&caps["general"]["positionEncodings"]));
        self.show_document = caps["window"]["showDocument"]["support"] == true;
        self.apply_edit = caps["workspace"]["applyEdit"] == true;
        let o = &p["initializationOptions"];
        self.follow = o["followSelection"].as_bool().unwrap_or(self.follow);
        self.diagnostics = o["diagnostics"].as_bool().unwrap_or(self.diagnostics);
        let ci = &p["clientInfo"];
        self.editor = format!(
            "{} {}",
            ci["name"].as_str().unwrap_or("an editor"),
            ci["version"].as_str().unwrap_or("")
        );
        self.roots = folders(&p["workspaceFolders"]);
        if self.roots.is_empty() {
            let root = p["rootUri"]
                .as_str()
                .and_then(|u| crate::files::uri_path(u, true));
            self.roots.extend(
                root.or_else(|| p["rootPath"].as_str().map(PathBuf::from))
                    .map(|r| canon(&r)),
            );
        }
        let mut v: Value = serde_json::from_str(INITIALIZED).unwrap_or_default();
        v["capabilities"]["positionEncoding"] = self.enc.name().into();
        v
    }

    /// The server for a directory: a known one, one found by its lock file, or one served in
    /// this process for the editor's workspace folder holding it.
    fn link_for(&mut self, dir: &Path) -> Option<usize> {
        if let Some(i) = self
            .links
            .iter()
            .position(|l| l.workspaces.iter().any(|w| dir.starts_with(w)))
        {
            return Some(i);
        }
        let found = match owner::find_server(&self.config, self.port, dir) {
            Ok(f) => f,
            // Files outside the workspace (a library's source after go-to-definition) are
            // common: said in the log, not in the user's face.
            Err(FindError::None(m)) => match self.serve_for(dir) {
                Some(f) => f,
                None => {
                    self.show(0, format!("ccide: {m}"));
                    return None;
                }
            },
            Err(FindError::Several(m)) => {
                self.warn_once(m);
                return None;
            }
        };
        let control = found.control.clone().unwrap_or_default();
        if let Some(i) = self.links.iter().position(|l| l.control == control) {
            return Some(i);
        }
        self.links.push(Link {
            control,
            dir: dir.to_path_buf(),
            workspaces: found.workspaces,
            conn: None,
            generation: 0,
            lost: Some(Instant::now()),
            retry: Instant::now(),
            closed: Vec::new(),
            diffs: Vec::new(),
        });
        let i = self.links.len() - 1;
        self.connect(i);
        Some(i)
    }

    /// Serves the editor's workspace folder holding `dir` in this process, for as long as the
    /// editor runs (as `ccide claude` does), when no server was found and no --port given.
    fn serve_for(&mut self, dir: &Path) -> Option<crate::lockfile::LockEntry> {
        let root = self.roots.iter().find(|r| dir.starts_with(r))?.clone();
        if self.port.is_some() {
            return None;
        }
        let argv = [
            "--workspace".into(),
            root.to_string_lossy().into_owned(),
            "--config-dir".into(),
            self.config.to_string_lossy().into_owned(),
            "--log-level".into(),
            "warn".into(),
        ];
        let started =
            Args::parse(&super::serve::COMMAND, &argv).and_then(|a| super::serve::start(&a));
        match started {
            Ok(r) => {
                crate::log::info!(
                    "no ccide serve ran for {}: serving it in this process",
                    root.display()
                );
                self.served.push(r);
                owner::find_server(&self.config, None, dir).ok()
            }
            Err(Fail::Usage(m) | Fail::Failed(m)) => {
                self.warn_once(format!("cannot serve {}: {m}", root.display()));
                None
            }
        }
    }

    /// (Re)connects link `i`: subscribes to its events, attaches the session, and tells the
    /// server what this editor has open.
    fn connect(&mut self, i: usize) {
        let l = &mut self.links[i];
        let now = Instant::now();
        l.retry = now + Duration::from_millis(250);
        let found = owner::find_server(&self.config, self.port, &l.dir);
        let found = match found {
            Ok(f) => f,
            Err(_) if l.lost.is_some_and(|t| now - t < GRACE) => return,
            Err(_) => {
                let dir = l.dir.clone();
                match self.serve_for(&dir) {
                    Some(f) => f,
                    None => return,
                }
            }
        };
        let control = found.control.unwrap_or_default();
        let editor = &self.editor;
        let attached = (|| -> Result<(Conn, Conn, Value), String> {
            let err = |e: std::io::Error| format!("{}: {e}", control.display());
            let mut events = Conn::open(&control).map_err(err)?;
            // Subscribed before attaching: a diff opened in between is in both, never in none.
            events.call(&json!({"cmd": "events"})).map_err(err)?;
            events.w.set_read_timeout(None).map_err(err)?;
            let mut session = Conn::open(&control).map_err(err)?;
            let hello = json!({"cmd": "attach", "pid": std::process::id(), "editor": editor});
            let answer = session.call(&hello).map_err(err)?;
            match answer["error"].as_str() {
                Some(e) => Err(e.to_string()),
                None => Ok((events, session, answer)),
            }
        })();
        let (mut events, session, answer) = match attached {
            Ok(x) => x,
            Err(e) => {
                let m = format!(
                    "cannot attach to the ccide server on port {}: {e}",
                    found.port
                );
                self.warn_once(m);
                return;
            }
        };
        let l = &mut self.links[i];
        l.generation += 1;
        let (queue, generation) = (self.queue.clone(), l.generation);
        std::thread::spawn(move || {
            while let Ok(v) = events.line() {
                queue.push(In::Event(i, generation, v));
            }
            queue.push(In::Gone(i, generation));
        });
        l.control = control;
        l.workspaces = found.workspaces;
        l.conn = Some(session);
        l.lost = None;
        for p in std::mem::take(&mut l.closed) {
            self.tell(i, json!({"cmd": "close", "paths": [p], "discard": true}));
        }
        // A restarted server kept its editor model, but not what changed meanwhile.
        let mine: Vec<String> = self
            .docs
            .iter_mut()
            .filter(|d| d.link == Some(i))
            .map(|d| {
                d.pushed = true;
                d.uri.clone()
            })
            .collect();
        for uri in &mine {
            self.open_tab(uri);
            self.push(uri);
        }
        if let Some(f) = self.focus.clone().filter(|f| mine.contains(f)) {
            self.open_tab(&f);
        }
        self.links[i].diffs.clear();
        for d in answer["diffs"].as_array().into_iter().flatten() {
            self.diff_opened(i, d);
        }
    }

    fn lose(&mut self, i: usize) {
        let l = &mut self.links[i];
        if l.conn.take().is_some() {
            crate::log::info!(
                "lost the ccide server {}; looking for it again",
                l.control.display()
            );
        }
        l.generation += 1;
        l.lost.get_or_insert(Instant::now());
    }

    /// Sends a request to server `i`; a refusal is returned, a broken connection loses it.
    fn ask(&mut self, i: Option<usize>, req: Value) -> Result<Value, String> {
        let i = i.ok_or("no ccide server serves this file")?;
        let conn = self.links[i]
            .conn
            .as_mut()
            .ok_or("the ccide server for this file is away; ccide lsp is looking for it")?;
        match conn.call(&req) {
            Ok(a) if a["ok"] == true => Ok(a),
            Ok(a) => Err(a["error"].as_str().unwrap_or("refused").to_string()),
            Err(e) => {
                self.lose(i);
                Err(format!("lost the ccide server: {e}"))
            }
        }
    }

    /// `ask` for what nobody waits on: a refusal goes to the editor's log.
    fn tell(&mut self, i: usize, req: Value) {
        if let Err(e) = self.ask(Some(i), req) {
            self.show(0, format!("ccide: {e}"));
        }
    }

    fn open_tab(&mut self, uri: &str) {
        if let Some(d) = self.doc(uri).filter(|d| d.path.is_file()) {
            let req = json!({"cmd": "open", "paths": [d.path]});
            self.sync(uri, req);
        }
    }

    /// A request about a document. One its server refuses (outside its folders) stops the
    /// document's syncing, instead of a refusal at every keystroke.
    fn sync(&mut self, uri: &str, req: Value) {
        let Some(i) = self.doc(uri).and_then(|d| d.link) else {
            return;
        };
        if let Err(e) = self.ask(Some(i), req) {
            if self.links[i].conn.is_some()
                && let Some(d) = self.doc_mut(uri)
            {
                d.link = None;
            }
            self.show(0, format!("ccide: {e}"));
        }
    }

    /// Tells the server the document's unsaved content, or that it has none any more.
    fn push(&mut self, uri: &str) {
        let Some(d) = self.doc_mut(uri) else {
            return;
        };
        d.push = None;
        let dirty = d.saved != Some(crate::text::hash(d.text.as_bytes()));
        if dirty || d.pushed {
            d.pushed = dirty;
            let req = json!({"cmd": "buffer", "path": d.path, "content": dirty.then_some(&d.text)});
            self.sync(uri, req);
        }
    }

    fn did_open(&mut self, uri: &str, p: &Value) {
        let Some(path) = crate::files::uri_path(uri, true).map(|p| canon(&p)) else {
            return;
        };
        // A proposal opened for review stays local: it is not a file of the workspace. Its
        // server is found first (a `ccide lsp` started for the proposal alone knows no diff).
        let link = path.parent().and_then(|dir| self.link_for(dir));
        let proposal = self.diff_of(&path).is_some_and(|(_, _, proposal)| proposal);
        let link = link.filter(|_| !proposal);
        self.docs.retain(|d| d.uri != uri);
        let doc = Doc {
            uri: uri.to_string(),
            saved: std::fs::read(&path).ok().map(|b| crate::text::hash(&b)),
            path,
            text: p["textDocument"]["text"].as_str().unwrap_or("").to_string(),
            link,
            push: None,
            pushed: false,
            range: Value::Null,
            published: Value::Null,
        };
        self.docs.push(doc);
        self.focus = Some(uri.to_string());
        self.open_tab(uri);
        self.push(uri);
    }

    fn code_actions(&mut self, p: &Value) -> Value {
        // A request for specific kinds (organize imports on save, quick fixes) is not for us;
        // answering it could get "send selection" applied automatically.
        if p["context"]["only"]
            .as_array()
            .is_some_and(|a| !a.is_empty())
        {
            return json!([]);
        }
        let uri = p["textDocument"]["uri"].as_str().unwrap_or("").to_string();
        let (q, enc) = (self.quirks, self.enc);
        self.followed = false;
        let Some(d) = self.doc_mut(&uri) else {
            return json!([]);
        };
        let range = q.range(&d.text, &p["range"], enc);
        d.range = range.clone();
        let (path, linked) = (d.path.clone(), d.link.is_some());
        if self.focus.as_deref() != Some(&uri) {
            self.focus = Some(uri.clone());
            self.open_tab(&uri);
        }
        if self.follow && linked {
            self.pending = Some((uri.clone(), Instant::now() + FOLLOW_DELAY));
        }
        let diff = self.diff_of(&path).map(|(i, k, proposal)| {
            let dir = &self.links[i].diffs[k].dir;
            (
                proposal,
                self.docs.iter().any(|d| d.path.parent() == Some(dir)),
            )
        });
        actions(&uri, &range, diff)
    }

    /// The pending diff for a file, or whose proposal this is: (link, index, is the proposal).
    fn diff_of(&self, path: &Path) -> Option<(usize, usize, bool)> {
        self.links.iter().enumerate().find_map(|(i, l)| {
            l.diffs.iter().enumerate().find_map(|(k, d)| {
                let proposal = path.parent() == Some(&d.dir);
                (proposal || d.file == path).then_some((i, k, proposal))
            })
        })
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
                self.select(&uri, &range, !followed)?;
                return Ok(Value::Null);
            }
            "ccide.mention" => {
                let (a, b) = text::span(&d.text, &range, self.enc);
                let mut req = json!({"cmd": "mention", "path": path});
                if a < b {
                    let (l1, _) = text::position(&d.text, a, self.enc);
                    let (l2, c2) = text::position(&d.text, b, self.enc);
                    // A range ending at the start of a line does not include that line.
                    let l2 = if c2 == 0 && l2 > l1 { l2 - 1 } else { l2 };
                    req["start"] = (l1 + 1).into();
                    req["end"] = (l2 + 1).into();
                }
                self.ask(link, req)?;
                return Ok(Value::Null);
            }
            _ => {}
        }
        let (i, k, proposal) = self
            .diff_of(&path)
            .ok_or_else(|| format!("Claude Code proposes no edit to {}", path.display()))?;
        let id = self.links[i].diffs[k].id.clone();
        let mut req = match cmd {
            "ccide.show" => return self.show_diff(i, k, true),
            "ccide.accept" => json!({"accept": true}),
            "ccide.reject" => json!({"accept": false}),
            "ccide.acceptEdited" => {
                // The proposal as the editor shows it, unsaved edits included.
                let dir = &self.links[i].diffs[k].dir;
                let shown = if proposal { Some(&uri) } else { None };
                let view = shown
                    .and_then(|u| self.doc(u))
                    .or_else(|| self.docs.iter().find(|d| d.path.parent() == Some(dir)))
                    .ok_or("the proposal is not open in the editor: use \"Claude: show proposed edit\" first, or \"Claude: accept\"")?;
                json!({"accept": true, "content": view.text})
            }
            _ => unreachable!("unknown commands are refused above"),
        };
        req["cmd"] = "diff.settle".into();
        req["target"] = id.into();
        self.ask(Some(i), req)?;
        Ok(Value::Null)
    }

    /// Sends the selection a range makes in a document: text from the editor's buffer,
    /// positions in UTF-16 code units as VS Code sends them. Unless `always`, repeating the
    /// last selection sends nothing. Whether it was sent.
    fn select(&mut self, uri: &str, range: &Value, always: bool) -> Result<bool, String> {
        let Some(d) = self.doc(uri) else {
            return Ok(false);
        };
        let (a, b) = text::span(&d.text, range, self.enc);
        let at = |o| {
            let (l, c) = text::position(&d.text, o, Enc::Utf16);
            json!([l, c])
        };
        let req = json!({"cmd": "selection", "path": d.path, "start": at(a), "end": at(b), "text": &d.text[a..b]});
        if !always && req == self.last {
            return Ok(false);
        }
        let link = d.link;
        self.last = req.clone();
        self.ask(link, req).map(|_| true)
    }

    /// Opens the proposal in the editor (window/showDocument) where it can, else names it.
    fn show_diff(&mut self, i: usize, k: usize, focus: bool) -> Result<Value, String> {
        let id = self.links[i].diffs[k].id.clone();
        let file = self.links[i].diffs[k].file.clone();
        let view = self.ask(Some(i), json!({"cmd": "diff.view", "target": id}))?;
        let path = canon(Path::new(view["path"].as_str().unwrap_or("")));
        let uri = crate::files::file_uri(&path);
        if self.show_document {
            self.ask_editor(
                "window/showDocument",
                json!({"uri": uri, "takeFocus": focus}),
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
        Ok(json!({"uri": uri, "path": path}))
    }

    fn diff_opened(&mut self, i: usize, v: &Value) {
        let id = v["id"].as_str().unwrap_or("").to_string();
        let file = PathBuf::from(v["file"].as_str().unwrap_or(""));
        if self.links[i].diffs.iter().any(|d| d.id == id) {
            return;
        }
        self.links[i].diffs.push(Diff {
            stamp: crate::files::stamp(&file),
            dir: physical(Path::new(v["dir"].as_str().unwrap_or(""))),
            file: file.clone(),
            id: id.clone(),
        });
        self.show(
            3,
            format!(
                "Claude Code proposes an edit to {}: the code actions on it show, accept or reject it (or `ccide diff show {id}`)",
                file.display()
            ),
        );
        if self.show_document {
            let k = self.links[i].diffs.len() - 1;
            let _ = self.show_diff(i, k, false);
        }
    }

    fn event(&mut self, i: usize, v: &Value) {
        let file = PathBuf::from(v["file"].as_str().unwrap_or(""));
        // Servers running in one process share one event stream: keep this server's files.
        if !self.links[i].workspaces.iter().any(|w| file.starts_with(w)) {
            return;
        }
        match v["event"].as_str() {
            Some("diff_opened") => self.diff_opened(i, v),
            Some("diff_settled") => {
                let diffs = &mut self.links[i].diffs;
                let Some(k) = diffs.iter().position(|d| d.id == v["id"]) else {
                    return;
                };
                let d = diffs.remove(k);
                // Accepted, or answered in the terminal (which may have accepted): the CLI
                // writes the file now, and an editor showing it is told.
                if matches!(v["how"].as_str(), Some("accepted" | "closed by the client"))
                    && self.docs.iter().any(|doc| doc.path == d.file)
                {
                    let until = Instant::now() + Duration::from_secs(10);
                    self.watches.push((d.file, d.stamp, until));
                }
            }
            _ => {}
        }
    }

    /// What is due: the selection following the cursor, unsaved content, servers to find
    /// again, files the CLI wrote, diagnostics.
    fn tick(&mut self) {
        let now = Instant::now();
        if let Some((uri, due)) = self.pending.clone()
            && due <= now
        {
            self.pending = None;
            // Only the focused document's cursor is followed.
            if self.focus.as_deref() == Some(&uri) {
                let range = self.doc(&uri).map(|d| d.range.clone()).unwrap_or_default();
                match self.select(&uri, &range, false) {
                    Ok(sent) => self.followed = sent,
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
        for uri in due {
            self.push(&uri);
        }
        for i in 0..self.links.len() {
            if self.links[i].conn.is_none() && self.links[i].retry <= now {
                self.connect(i);
            }
        }
        for (path, old, until) in std::mem::take(&mut self.watches) {
            if crate::files::stamp(&path) != old {
                self.reload(&path);
            } else if until > now {
                self.watches.push((path, old, until));
            }
        }
        if self.diagnostics && self.next_poll <= now {
            self.next_poll = now + Duration::from_secs(1);
            self.publish();
        }
    }

    /// The CLI wrote a file the editor has open: a clean buffer is replaced with the new
    /// content (workspace/applyEdit), otherwise the user is told to reload it.
    fn reload(&mut self, path: &Path) {
        let Ok(new) = std::fs::read_to_string(path) else {
            return;
        };
        let enc = self.enc;
        let mut edits = Vec::new();
        for d in self.docs.iter_mut().filter(|d| d.path == path) {
            if self.apply_edit && d.saved == Some(crate::text::hash(d.text.as_bytes())) {
                let end = text::position(&d.text, d.text.len(), enc);
                d.saved = Some(crate::text::hash(new.as_bytes()));
                let edit =
                    json!({"range": {"start": pos((0, 0)), "end": pos(end)}, "newText": new});
                edits.push(json!({"label": format!("Claude Code wrote {}", path.display()), "edit": {"changes": {d.uri.clone(): [edit]}}}));
            } else {
                edits.push(Value::Null);
            }
        }
        for e in edits {
            if e.is_null() {
                self.show(
                    2,
                    format!("Claude Code wrote {}: reload it", path.display()),
                );
            } else {
                self.ask_editor("workspace/applyEdit", e);
            }
        }
    }

    /// Publishes the diagnostics each server's store holds for the open documents (positions
    /// stored in UTF-16 units, as the CLI is sent them), when they changed.
    fn publish(&mut self) {
        for i in 0..self.links.len() {
            let paths: Vec<PathBuf> = self
                .docs
                .iter()
                .filter(|d| d.link == Some(i))
                .map(|d| d.path.clone())
                .collect();
            if paths.is_empty() || self.links[i].conn.is_none() {
                continue;
            }
            let req = json!({"cmd": "diagnostics", "paths": paths});
            let Ok(answer) = self.ask(Some(i), req) else {
                continue;
            };
            let enc = self.enc;
            let mut out = Vec::new();
            for d in self.docs.iter_mut().filter(|d| d.link == Some(i)) {
                let at = |p: &Value| {
                    let n = |k: &str| p[k].as_u64().unwrap_or(0) as usize;
                    let o = text::offset(&d.text, n("line"), n("character"), Enc::Utf16, false);
                    pos(text::position(&d.text, o, enc))
                };
                let list: Vec<Value> = answer["files"][d.path.to_string_lossy().as_ref()]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|w| {
                        let mut x = w.clone();
                        x["range"] = json!({"start": at(&w["range"]["start"]), "end": at(&w["range"]["end"])});
                        let sev = ["Error", "Warning", "Info"].iter().position(|s| w["severity"] == *s);
                        x["severity"] = (sev.unwrap_or(3) + 1).into();
                        x
                    })
                    .collect();
                let list = Value::from(list);
                if d.published != list {
                    d.published = list.clone();
                    out.push(json!({"uri": d.uri, "diagnostics": list}));
                }
            }
            for o in out {
                self.notify("textDocument/publishDiagnostics", o);
            }
        }
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
        .map(|p| physical(&p))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn titles(v: &Value) -> Vec<&str> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|a| a["title"].as_str().unwrap())
            .collect()
    }

    #[test]
    fn initialize_lists_every_command() {
        let v: Value = serde_json::from_str(INITIALIZED).unwrap();
        let names: Vec<Value> = COMMANDS.iter().map(|c| c.0.into()).collect();
        assert_eq!(
            v["capabilities"]["executeCommandProvider"]["commands"],
            Value::from(names)
        );
    }

    #[test]
    fn code_actions_carry_the_range_and_follow_the_diff() {
        let r = json!({"start": {"line": 1, "character": 2}, "end": {"line": 3, "character": 0}});
        let plain = actions("file:///w/a.py", &r, None);
        assert_eq!(
            plain[0],
            json!({"title": "Claude: send selection", "command": {"title": "Claude: send selection",
                "command": "ccide.select", "arguments": [{"uri": "file:///w/a.py", "range": r}]}})
        );
        assert_eq!(
            titles(&plain),
            ["Claude: send selection", "Claude: @-mention"]
        );
        assert_eq!(
            titles(&actions("u", &r, Some((false, false)))),
            [
                "Claude: send selection",
                "Claude: @-mention",
                "Claude: show proposed edit",
                "Claude: accept",
                "Claude: reject"
            ]
        );
        assert_eq!(
            titles(&actions("u", &r, Some((false, true)))),
            [
                "Claude: send selection",
                "Claude: @-mention",
                "Claude: show proposed edit",
                "Claude: accept",
                "Claude: accept as edited",
                "Claude: reject"
            ]
        );
        assert_eq!(
            titles(&actions("u", &r, Some((true, true)))),
            [
                "Claude: accept",
                "Claude: accept as edited",
                "Claude: reject"
            ]
        );
    }
}
