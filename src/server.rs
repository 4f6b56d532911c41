//! MCP over JSON-RPC: the connected clients, request dispatch, deferred replies, broadcast of
//! notifications and the keepalive timer. Knows nothing of sockets (see `transport`) nor of
//! what the tools do (see `tools`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use serde_json::{Value, json};

use crate::jsonrpc::{self, ErrorCode, Message, RequestId, RpcError};
use crate::transport::{Event, Handler, Outbox, Peer};

/// Protocol versions echoed back; anything else is answered with the newest (PROTOCOL 3).
const KNOWN_VERSIONS: &[&str] = &["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];
const LATEST_VERSION: &str = "2025-11-25";
/// Close code and exact reason that tell the CLI not to reconnect (PROTOCOL 4).
pub const TAKEOVER_CODE: u16 = 4001;
pub const TAKEOVER_REASON: &str = "Another Claude Code session connected to this IDE";

pub struct Config {
    pub ping_interval: Duration,
    pub ping_timeout: Duration,
    pub single_client: bool,
}

pub struct Client {
    pub id: u64,
    pub outbox: Arc<Outbox>,
    pub addr: String,
    pub since: SystemTime,
    state: Mutex<ClientState>,
}

#[derive(Default)]
struct ClientState {
    initialized: bool,
    /// Whether the selection and queued mentions were sent after the handshake.
    greeted: bool,
    /// A selection_changed reached it since it initialized (the greeting then skips it).
    saw_selection: bool,
    pid: Option<i64>,
    client_name: String,
    client_version: String,
    /// The keepalive ping we wait for: its id and when the wait began.
    ping: Option<(u64, Instant)>,
    next_ping: Option<Instant>,
    /// Deferred requests still owed an answer, with the flag that marks them answered.
    inflight: Vec<(RequestId, Arc<AtomicBool>)>,
}

/// A snapshot of one client for `status` and the log.
pub struct ClientInfo {
    pub id: u64,
    pub pid: Option<i64>,
    pub name: String,
    pub version: String,
    pub since: SystemTime,
    pub initialized: bool,
}

impl Client {
    pub fn send(&self, v: &Value) -> bool {
        self.outbox.send(v.to_string())
    }

    pub fn info(&self) -> ClientInfo {
        let s = self.state.lock().unwrap();
        ClientInfo {
            id: self.id,
            pid: s.pid,
            name: s.client_name.clone(),
            version: s.client_version.clone(),
            since: self.since,
            initialized: s.initialized,
        }
    }
}

/// The promise of one answer to a request that finishes later (openDiff, slow tools).
/// Answering twice, or after `notifications/cancelled`, sends nothing.
pub struct Responder {
    pub client: Arc<Client>,
    pub id: RequestId,
    done: Arc<AtomicBool>,
}

impl Responder {
    pub fn reply(&self, r: Result<Value, RpcError>) -> bool {
        if self.done.swap(true, Ordering::SeqCst) {
            return false;
        }
        self.client
            .state
            .lock()
            .unwrap()
            .inflight
            .retain(|(id, _)| *id != self.id);
        self.client.send(&jsonrpc::response(&self.id, r))
    }

    /// False once answered, cancelled, or the connection has ended.
    pub fn is_open(&self) -> bool {
        !self.done.load(Ordering::SeqCst) && !self.client.outbox.is_ended()
    }
}

/// Answers a deferred call from a new thread with what `work` returns (None: no answer), so
/// that a slow tool never holds up its connection (which must keep answering pings).
pub fn answer_later(
    responder: Arc<Responder>,
    work: Box<dyn FnOnce() -> Option<Value> + Send>,
) -> Reply {
    let r = responder.clone();
    let started = std::thread::Builder::new()
        .stack_size(crate::transport::THREAD_STACK)
        .spawn(move || {
            if let Some(v) = work() {
                r.reply(Ok(v));
            }
        });
    if let Err(e) = started {
        responder.reply(Ok(crate::tools::tool_error(&format!(
            "cannot start a thread: {e}"
        ))));
    }
    Reply::Later
}

/// What a method handler gives back.
pub enum Reply {
    Now(Result<Value, RpcError>),
    /// The handler kept a `Responder` and answers later.
    Later,
}

/// The per-call context handed to tools.
pub struct Call<'a> {
    pub app: &'a Arc<crate::serve::App>,
    pub client: &'a Arc<Client>,
    pub id: &'a RequestId,
}

impl Call<'_> {
    pub fn defer(&self) -> Responder {
        let done = Arc::new(AtomicBool::new(false));
        self.client
            .state
            .lock()
            .unwrap()
            .inflight
            .push((self.id.clone(), done.clone()));
        Responder {
            client: self.client.clone(),
            id: self.id.clone(),
            done,
        }
    }
}

pub struct Server {
    pub config: Config,
    clients: Mutex<Vec<Arc<Client>>>,
    next_client: AtomicU64,
    next_ping: AtomicU64,
}

impl Server {
    pub fn new(config: Config) -> Server {
        Server {
            config,
            clients: Mutex::new(Vec::new()),
            next_client: AtomicU64::new(1),
            next_ping: AtomicU64::new(1),
        }
    }

    pub fn clients(&self) -> Vec<Arc<Client>> {
        self.clients.lock().unwrap().clone()
    }

    /// Sends a notification to every initialized client; returns how many got it.
    /// Sends a notification to every initialized client; returns how many got it.
    pub fn broadcast(&self, method: &str, params: Value) -> usize {
        let text: tungstenite::Utf8Bytes = jsonrpc::notification(method, params).to_string().into();
        let selection = method == "selection_changed";
        let mut n = 0;
        for c in self.clients() {
            let mut s = c.state.lock().unwrap();
            if !s.initialized {
                continue;
            }
            s.saw_selection |= selection;
            drop(s);
            if c.outbox.send(text.clone()) {
                n += 1;
            }
        }
        n
    }
}

/// Registers a new connection and returns the callback that serves its messages.
pub fn open(app: &Arc<crate::serve::App>, outbox: Arc<Outbox>, peer: Peer) -> Handler {
    let server = &app.server;
    let client = Arc::new(Client {
        id: server.next_client.fetch_add(1, Ordering::Relaxed),
        outbox,
        addr: peer.addr.to_string(),
        since: SystemTime::now(),
        state: Mutex::new(ClientState {
            next_ping: Some(Instant::now() + server.config.ping_interval),
            ..ClientState::default()
        }),
    });
    crate::debug!(
        "client #{} connected from {} ({})",
        client.id,
        client.addr,
        peer.user_agent
    );
    server.clients.lock().unwrap().push(client.clone());
    if app.stopping.load(Ordering::SeqCst) {
        client.outbox.close(1001, "ccide is shutting down");
    }
    let app = app.clone();
    Box::new(move |event| match event {
        Event::Text(text) => handle_text(&app, &client, text),
        Event::NotUtf8 => {
            client.send(&jsonrpc::error_response(
                None,
                &RpcError::new(
                    ErrorCode::ParseError,
                    "Parse error: binary frame is not UTF-8",
                ),
            ));
        }
        Event::Ended(ended) => {
            app.server
                .clients
                .lock()
                .unwrap()
                .retain(|c| c.id != client.id);
            let info = client.info();
            let how = match ended.code {
                Some(code) => format!("code {code}"),
                None => "no close code".to_string(),
            };
            let reason = if ended.reason.is_empty() {
                String::new()
            } else {
                format!(": {}", ended.reason)
            };
            crate::info!(
                "client #{} disconnected (pid {}, {how}{reason})",
                client.id,
                info.pid.map_or("unknown".to_string(), |p| p.to_string())
            );
            crate::serve::client_gone(&app, &client);
        }
    })
}

fn handle_text(app: &Arc<crate::serve::App>, client: &Arc<Client>, text: &str) {
    let parsed: Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            client.send(&jsonrpc::error_response(
                None,
                &RpcError::new(ErrorCode::ParseError, format!("Parse error: {e}")),
            ));
            return;
        }
    };
    match parsed {
        Value::Array(items) => {
            if items.is_empty() {
                client.send(&jsonrpc::error_response(
                    None,
                    &RpcError::new(ErrorCode::InvalidRequest, "Invalid Request: empty batch"),
                ));
                return;
            }
            let replies: Vec<Value> = items
                .into_iter()
                .filter_map(|v| handle_value(app, client, v))
                .collect();
            if !replies.is_empty() {
                client.send(&Value::Array(replies));
            }
        }
        v => {
            if let Some(reply) = handle_value(app, client, v) {
                client.send(&reply);
            }
        }
    }
}

/// One message; returns the response to send now, if any.
fn handle_value(app: &Arc<crate::serve::App>, client: &Arc<Client>, v: Value) -> Option<Value> {
    let msg = match jsonrpc::classify(v) {
        Ok(m) => m,
        Err(reply) => return Some(reply),
    };
    match msg {
        Message::Request(req) => {
            let started = Instant::now();
            let call = Call {
                app,
                client,
                id: &req.id,
            };
            let tool = match (req.method.as_str(), req.params["name"].as_str()) {
                ("tools/call", Some(name)) => format!(" {name}"),
                _ => String::new(),
            };
            let reply = dispatch(&call, &req.method, req.params);
            crate::debug!(
                "client #{} {}{tool} {} took {:?}{}",
                client.id,
                req.method,
                req.id,
                started.elapsed(),
                match &reply {
                    Reply::Now(Err(e)) => format!(": error {} {}", e.code as i64, e.message),
                    Reply::Later => ": answered later".into(),
                    Reply::Now(Ok(_)) => String::new(),
                }
            );
            match reply {
                Reply::Now(r) => Some(jsonrpc::response(&req.id, r)),
                Reply::Later => None,
            }
        }
        Message::Notification(n) => {
            notification(app, client, &n.method, &n.params);
            None
        }
        Message::Response(r) => {
            let mut s = client.state.lock().unwrap();
            if let (Some((ping_id, _)), Some(id)) = (s.ping, r.id.as_ref().and_then(|i| i.as_u64()))
                && ping_id == id
            {
                s.ping = None;
            }
            None
        }
    }
}

fn dispatch(call: &Call, method: &str, params: Value) -> Reply {
    let app = call.app;
    let r = match method {
        "initialize" => initialize(app, call.client, &params),
        "ping" => Ok(json!({})),
        "tools/list" => {
            // The CLI ignores notifications until its connection setup ends, which its
            // tools/list marks (observed: a mention sent sooner was dropped; 20 ms later, shown).
            if call.client.state.lock().unwrap().initialized {
                greet_after(app, call.client, Duration::from_millis(250));
            }
            Ok(json!({"tools": crate::tools::list(app)}))
        }
        "tools/call" => return crate::tools::call(call, params),
        "resources/list" => Ok(json!({"resources": []})),
        "resources/templates/list" => Ok(json!({"resourceTemplates": []})),
        "prompts/list" => Ok(json!({"prompts": []})),
        other => return crate::tools::direct_method(call, other, params),
    };
    Reply::Now(r)
}

fn initialize(
    app: &Arc<crate::serve::App>,
    client: &Client,
    params: &Value,
) -> Result<Value, RpcError> {
    let asked = params["protocolVersion"].as_str().unwrap_or("");
    let version = if KNOWN_VERSIONS.contains(&asked) {
        asked
    } else {
        LATEST_VERSION
    };
    {
        let mut s = client.state.lock().unwrap();
        s.client_name = params["clientInfo"]["name"]
            .as_str()
            .unwrap_or("")
            .to_string();
        s.client_version = params["clientInfo"]["version"]
            .as_str()
            .unwrap_or("")
            .to_string();
    }
    let _ = app;
    Ok(json!({
        "protocolVersion": version,
        "capabilities": {"tools": {"listChanged": true}},
        "serverInfo": {"name": "ccide", "version": env!("CARGO_PKG_VERSION")},
    }))
}

fn notification(app: &Arc<crate::serve::App>, client: &Arc<Client>, method: &str, params: &Value) {
    match method {
        "notifications/initialized" | "initialized" => {
            let first = {
                let mut s = client.state.lock().unwrap();
                !std::mem::replace(&mut s.initialized, true)
            };
            if !first {
                return;
            }
            if app.server.config.single_client {
                for other in app.server.clients() {
                    if other.id != client.id && other.state.lock().unwrap().initialized {
                        crate::info!(
                            "client #{} replaces client #{} (--single-client)",
                            client.id,
                            other.id
                        );
                        other.outbox.close(TAKEOVER_CODE, TAKEOVER_REASON);
                    }
                }
            }
            crate::serve::client_ready(app, client);
            // For clients that never ask for tools/list.
            greet_after(app, client, Duration::from_millis(1500));
        }
        "ide_connected" => {
            let info = {
                let mut s = client.state.lock().unwrap();
                s.pid = params["pid"].as_i64();
                (s.pid, s.client_name.clone(), s.client_version.clone())
            };
            crate::info!(
                "client #{} connected: {} {} (pid {})",
                client.id,
                if info.1.is_empty() {
                    "unknown client"
                } else {
                    &info.1
                },
                info.2,
                info.0.map_or("unknown".to_string(), |p| p.to_string())
            );
        }
        "notifications/cancelled" => {
            let Some(id) = RequestId::from_value(&params["requestId"]) else {
                return;
            };
            let mut s = client.state.lock().unwrap();
            s.inflight.retain(|(i, done)| {
                if *i == id {
                    done.store(true, Ordering::SeqCst);
                    false
                } else {
                    true
                }
            });
        }
        _ => {}
    }
}

/// Sends the client what it missed (the selection, queued mentions) after `delay`, once.
fn greet_after(app: &Arc<crate::serve::App>, client: &Arc<Client>, delay: Duration) {
    let (app, client) = (app.clone(), client.clone());
    let _ = std::thread::Builder::new()
        .name("greet".into())
        .stack_size(crate::transport::THREAD_STACK)
        .spawn(move || {
            std::thread::sleep(delay);
            let (first, saw_selection) = {
                let mut s = client.state.lock().unwrap();
                (!std::mem::replace(&mut s.greeted, true), s.saw_selection)
            };
            if first && !client.outbox.is_ended() {
                crate::context::greet(&app, &client, !saw_selection);
            }
        });
}

/// The keepalive timer (PROTOCOL 8): a `ping` request to each client every interval; a client
/// that has not answered within the timeout is closed with 1001. When this thread itself wakes
/// up late (the process was paused), every deadline restarts instead, so a frozen container or
/// a sleeping laptop does not cost healthy clients their connection.
/// `on_tick` runs on every wake-up (the systemd watchdog rides on it, so a stuck keepalive
/// thread gets the service restarted).
pub fn keepalive(server: &Server, mut on_tick: impl FnMut(Instant)) {
    let cfg = &server.config;
    let tick = (cfg.ping_interval.min(cfg.ping_timeout) / 4)
        .clamp(Duration::from_millis(20), Duration::from_millis(500));
    let mut last = Instant::now();
    loop {
        std::thread::sleep(tick);
        let now = Instant::now();
        on_tick(now);
        let gap = now.duration_since(last);
        let late = gap > tick + Duration::from_millis(750).max(tick);
        last = now;
        if late {
            crate::info!(
                "keepalive timer woke {} late (process paused?); restarting ping deadlines",
                human_duration(gap - tick)
            );
        }
        for c in server.clients() {
            let mut s = c.state.lock().unwrap();
            if late {
                if let Some((id, _)) = s.ping {
                    s.ping = Some((id, now));
                }
                continue;
            }
            if let Some((_, sent)) = s.ping {
                if now.duration_since(sent) >= cfg.ping_timeout {
                    s.ping = None;
                    s.next_ping = None;
                    drop(s);
                    let reason = format!(
                        "no answer to ping within {}",
                        human_duration(cfg.ping_timeout)
                    );
                    crate::info!("client #{}: {reason}; closing", c.id);
                    c.outbox.close(1001, &reason);
                }
                continue;
            }
            if s.next_ping.is_some_and(|t| now >= t) {
                let id = server.next_ping.fetch_add(1, Ordering::Relaxed);
                s.ping = Some((id, now));
                s.next_ping = Some(now + cfg.ping_interval);
                drop(s);
                c.outbox.send_urgent(
                    jsonrpc::request(&RequestId::number(id), "ping", None).to_string(),
                );
            }
        }
    }
}

/// `3 s` or `0.25 s`, with integer arithmetic only (float printing costs ~9 KB of binary).
pub fn human_duration(d: Duration) -> String {
    match d.subsec_millis() {
        0 => format!("{} s", d.as_secs()),
        ms => format!(
            "{}.{} s",
            d.as_secs(),
            format!("{ms:03}").trim_end_matches('0')
        ),
    }
}
