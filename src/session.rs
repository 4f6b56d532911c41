//! The MCP session of each connected client (ccide-protocol(7) §3, §4, §8): the lifecycle
//! (initialize, initialized, tools/list), dispatch of requests to the tools, the greeting that
//! re-sends what a client missed, `--single-client` takeover, and the keepalive timer. Knows
//! nothing of sockets (see `transport`) nor of what the tools do (see `tools`).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::files;
use crate::json::{self, obj};
use crate::proc::lock;
use crate::rpc::call::{Call, Reply};
use crate::rpc::clients::{Client, ClientState, Clients};
use crate::rpc::{self, ErrorCode, Message, RequestId, RpcError};
use crate::state::State;
use crate::text::human_duration;
use crate::transport::{Event, Handler, Outbox, Peer};

/// Protocol versions echoed back; anything else is answered with the newest (§3).
const KNOWN_VERSIONS: &[&str] = &["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"];
const LATEST_VERSION: &str = "2025-11-25";
/// Close code and exact reason that tell the CLI not to reconnect (§4).
pub const TAKEOVER_CODE: u16 = 4001;
pub const TAKEOVER_REASON: &str = "Another Claude Code session connected to this IDE";
/// The CLI ignores notifications until its connection setup ends, which its tools/list marks
/// (observed: a mention sent sooner was dropped; 20 ms later, shown).
const GREET_AFTER_TOOLS_LIST: Duration = Duration::from_millis(250);
/// For clients that never ask for tools/list.
const GREET_AFTER_INITIALIZED: Duration = Duration::from_millis(1500);

pub struct Config {
    pub ping_interval: Duration,
    pub ping_timeout: Duration,
    pub single_client: bool,
}

/// The sessions of one server: its state, its clients, and the timer that pings and greets.
pub struct Sessions {
    pub state: Arc<State>,
    pub clients: Arc<Clients>,
    pub config: Config,
    /// Set when the server is shutting down: new connections are closed at once.
    pub stopping: Arc<AtomicBool>,
    next_ping: AtomicU64,
    /// Wakes the timer thread early when a greeting is scheduled.
    timer: (Mutex<bool>, Condvar),
}

impl Sessions {
    pub fn new(state: Arc<State>, clients: Arc<Clients>, config: Config) -> Sessions {
        Sessions {
            state,
            clients,
            config,
            stopping: Arc::default(),
            next_ping: AtomicU64::new(1),
            timer: (Mutex::new(false), Condvar::new()),
        }
    }

    /// Registers a new connection and returns the callback that serves its messages.
    pub fn open(self: &Arc<Self>, outbox: Arc<Outbox>, peer: Peer) -> Handler {
        let client = self.clients.add(
            outbox,
            peer.addr.to_string(),
            ClientState {
                next_ping: Some(Instant::now() + self.config.ping_interval),
                ..ClientState::default()
            },
        );
        crate::log::debug!(
            "client #{} connected from {} ({})",
            client.id,
            client.addr,
            peer.user_agent
        );
        if self.stopping.load(Ordering::SeqCst) {
            client.outbox.close(1001, "ccide is shutting down");
        }
        let sessions = self.clone();
        Box::new(move |event| match event {
            Event::Text(text) => sessions.handle_text(&client, text),
            Event::NotUtf8 => {
                client.send(&rpc::error_response(
                    None,
                    &RpcError::new(
                        ErrorCode::ParseError,
                        "Parse error: binary frame is not UTF-8",
                    ),
                ));
            }
            Event::Ended(ended) => {
                let how = match ended.code {
                    Some(code) => format!("code {code}"),
                    None => "no close code".to_string(),
                };
                let reason = if ended.reason.is_empty() {
                    String::new()
                } else {
                    format!(": {}", ended.reason)
                };
                sessions.gone(&client, &format!("{how}{reason}"));
            }
        })
    }

    /// Called once when a connection has ended, whatever the reason.
    fn gone(&self, client: &Arc<Client>, how: &str) {
        self.clients.remove(client.id);
        let info = client.info();
        crate::log::info!(
            "client #{} disconnected (pid {}, {how})",
            client.id,
            info.pid.map_or("unknown".to_string(), |p| p.to_string())
        );
        self.state.diffs.abandon_client(client.id);
        self.state.exec.client_gone(client.id);
        self.state.events.emit(obj! {
            "event": "client_disconnected", "client": info.id, "pid": info.pid,
        });
    }

    pub fn handle_text(&self, client: &Arc<Client>, text: &str) {
        let parsed: Value = match serde_json::from_slice(text.as_bytes()) {
            Ok(v) => v,
            Err(e) => {
                client.send(&rpc::error_response(
                    None,
                    &RpcError::new(ErrorCode::ParseError, format!("Parse error: {e}")),
                ));
                return;
            }
        };
        match parsed {
            Value::Array(items) => {
                if items.is_empty() {
                    client.send(&rpc::error_response(
                        None,
                        &RpcError::new(ErrorCode::InvalidRequest, "Invalid Request: empty batch"),
                    ));
                    return;
                }
                let replies: Vec<String> = items
                    .into_iter()
                    .filter_map(|v| self.handle_value(client, v))
                    .collect();
                if !replies.is_empty() {
                    client.outbox.send(batch(replies));
                }
            }
            v => {
                if let Some(reply) = self.handle_value(client, v) {
                    client.outbox.send(reply);
                }
            }
        }
    }

    /// One message; returns the response to send now, if any.
    fn handle_value(&self, client: &Arc<Client>, v: Value) -> Option<String> {
        let msg = match rpc::classify(v) {
            Ok(m) => m,
            Err(reply) => return Some(reply.to_string()),
        };
        match msg {
            Message::Request(req) => {
                let started = Instant::now();
                let call = Call {
                    client,
                    id: &req.id,
                };
                let tool = match (req.method.as_str(), req.params["name"].as_str()) {
                    ("tools/call", Some(name)) => format!(" {name}"),
                    _ => String::new(),
                };
                let reply = self.dispatch(&call, &req.method, req.params);
                crate::log::debug!(
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
                    Reply::Now(r) => Some(rpc::capped_response(&req.id, r)),
                    Reply::Later => None,
                }
            }
            Message::Notification(n) => {
                self.notification(client, &n.method, &n.params);
                None
            }
            Message::Response(r) => {
                let mut s = lock(&client.state);
                let id = r.id.as_ref().and_then(|i| i.as_u64());
                if s.ping.is_some_and(|p| Some(p.0) == id) {
                    s.ping = None;
                }
                if s.roots_asked.is_some() && s.roots_asked == id {
                    s.roots_asked = None;
                    s.roots = r.result.ok().map(|v| roots(&v));
                    let shown = s.roots.as_deref().map(json::paths);
                    crate::log::info!(
                        "client #{} works in {}",
                        client.id,
                        shown.unwrap_or_default()
                    );
                }
                None
            }
        }
    }

    fn dispatch(&self, call: &Call, method: &str, params: Value) -> Reply {
        let r = match method {
            "initialize" => initialize(call.client, &params),
            "ping" => Ok(obj! {}),
            "tools/list" => {
                if lock(&call.client.state).initialized {
                    self.greet_after(call.client, GREET_AFTER_TOOLS_LIST);
                }
                Ok(obj! {"tools": crate::tools::list(&self.state)})
            }
            "tools/call" => return crate::tools::call(&self.state, call, params),
            "resources/list" => Ok(obj! {"resources": Vec::<Value>::new()}),
            "resources/templates/list" => Ok(obj! {"resourceTemplates": Vec::<Value>::new()}),
            "prompts/list" => Ok(obj! {"prompts": Vec::<Value>::new()}),
            other => return crate::tools::direct_method(&self.state, other, params),
        };
        Reply::Now(r)
    }

    fn notification(&self, client: &Arc<Client>, method: &str, params: &Value) {
        match method {
            "notifications/initialized" | "initialized" => {
                let first = {
                    let mut s = lock(&client.state);
                    !std::mem::replace(&mut s.initialized, true)
                };
                if !first {
                    return;
                }
                if self.config.single_client {
                    for other in self.clients.all() {
                        if other.id != client.id && lock(&other.state).initialized {
                            crate::log::info!(
                                "client #{} replaces client #{} (--single-client)",
                                client.id,
                                other.id
                            );
                            other.outbox.close(TAKEOVER_CODE, TAKEOVER_REASON);
                        }
                    }
                }
                self.greet_after(client, GREET_AFTER_INITIALIZED);
                self.ask_roots(client);
            }
            "notifications/roots/list_changed" => self.ask_roots(client),
            "ide_connected" => {
                let (pid, name, version) = {
                    let mut s = lock(&client.state);
                    s.pid = params["pid"].as_i64();
                    (s.pid, s.name.clone(), s.version.clone())
                };
                crate::log::info!(
                    "client #{} connected: {} {} (pid {})",
                    client.id,
                    if name.is_empty() {
                        "unknown client"
                    } else {
                        &name
                    },
                    version,
                    pid.map_or("unknown".to_string(), |p| p.to_string())
                );
            }
            "notifications/cancelled" => {
                let Some(id) = RequestId::from_value(&params["requestId"]) else {
                    return;
                };
                let mut s = lock(&client.state);
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

    /// Asks a client that declared the `roots` capability for its folders (ccide-protocol(7)
    /// §6.4); its answer comes with the other messages it sends (see `handle_value`).
    fn ask_roots(&self, client: &Client) {
        let id = self.next_ping.fetch_add(1, Ordering::Relaxed);
        let mut s = lock(&client.state);
        if s.has_roots {
            s.roots_asked = Some(id);
            drop(s);
            client.send(&rpc::request(&RequestId::number(id), "roots/list", None));
        }
    }

    /// Schedules the greeting (what the client missed) `delay` from now, unless one is due
    /// sooner or it was sent already. The timer thread sends it.
    fn greet_after(&self, client: &Client, delay: Duration) {
        let at = Instant::now() + delay;
        {
            let mut s = lock(&client.state);
            if s.greeted || s.greet_at.is_some_and(|t| t <= at) {
                return;
            }
            s.greet_at = Some(at);
        }
        let (kick, cv) = &self.timer;
        *lock(kick) = true;
        cv.notify_one();
    }

    /// Sends the greetings due by `now`.
    fn greet_due(&self, now: Instant) {
        for c in self.clients.all() {
            let due = lock(&c.state).greet_at.is_some_and(|t| t <= now);
            if due {
                self.greet(&c);
            }
        }
    }

    /// Ends a client's setup, once: it gets the current selection (the CLI forgets it on every
    /// reconnect), the mentions queued while nobody was connected, then those made during its
    /// setup, in order; from now on it receives notifications, and `ccide events` says
    /// `client_connected`. The selection and the mentions are sent under the client's lock, so
    /// a broadcast cannot slip in between and arrive out of order, and not between a change of
    /// the selection and its broadcast, which would send it twice.
    fn greet(&self, client: &Client) {
        let editor = &self.state.editor;
        let greeted = editor.with_selection(|selection| {
            let mut s = lock(&client.state);
            s.greet_at = None;
            if s.greeted || client.outbox.is_ended() {
                return false;
            }
            // A session whose folders do not hold the selected file is not told of it.
            if let Some(sel) = selection.filter(|v| {
                s.holds(Path::new(v["filePath"].as_str().unwrap_or("")))
                    .is_some()
            }) {
                client.send(&rpc::notification("selection_changed", sel));
            }
            // Queued mentions of files its folders hold; the others wait for their session.
            let mut mentions = editor.take_mentions(|m| {
                s.holds(Path::new(m["filePath"].as_str().unwrap_or("")))
                    .is_some()
            });
            mentions.append(&mut s.held_mentions);
            for m in mentions {
                client.send(&rpc::notification("at_mentioned", m));
            }
            s.greeted = true;
            true
        });
        if !greeted {
            return;
        }
        let i = client.info();
        self.state.events.emit(obj! {
            "event": "client_connected", "client": i.id, "name": i.name, "version": i.version,
        });
    }

    /// The timer thread (§8): a `ping` request to each client every interval; a client that
    /// has not answered within the timeout is closed with 1001, unless its connection showed
    /// it at work meanwhile (see `Outbox::progress`): then the wait begins again. When this thread itself wakes
    /// up late (the process was paused), every deadline restarts instead, so a frozen container
    /// or a sleeping laptop does not cost healthy clients their connection. It also sends the
    /// greetings when they are due. `on_tick` runs on every tick (the systemd watchdog rides on
    /// it, so a stuck timer thread gets the service restarted).
    pub fn run_timer(&self, mut on_tick: impl FnMut(Instant)) {
        let cfg = &self.config;
        let tick = (cfg.ping_interval.min(cfg.ping_timeout) / 4)
            .clamp(Duration::from_millis(20), Duration::from_millis(500));
        let mut last = Instant::now();
        loop {
            let next_greet = self
                .clients
                .all()
                .iter()
                .filter_map(|c| lock(&c.state).greet_at)
                .min();
            let tick_at = last + tick;
            let until = next_greet.map_or(tick_at, |g| g.min(tick_at));
            {
                let (kick, cv) = &self.timer;
                let mut kicked = lock(kick);
                let left = until.saturating_duration_since(Instant::now());
                if !*kicked && !left.is_zero() {
                    kicked = cv.wait_timeout(kicked, left).unwrap().0;
                }
                *kicked = false;
            }
            let now = Instant::now();
            self.greet_due(now);
            if now < tick_at {
                continue;
            }
            on_tick(now);
            let gap = now.duration_since(last);
            let late = gap > tick + Duration::from_millis(750).max(tick);
            last = now;
            if late {
                crate::log::info!(
                    "keepalive timer woke {} late (process paused?); restarting ping deadlines",
                    human_duration(gap - tick)
                );
            }
            self.ping_all(now, late);
        }
    }

    fn ping_all(&self, now: Instant, late: bool) {
        let cfg = &self.config;
        for c in self.clients.all() {
            let mut s = lock(&c.state);
            if late {
                if let Some((id, _)) = s.ping {
                    s.ping = Some((id, now));
                }
                continue;
            }
            if let Some((id, sent)) = s.ping {
                let progress = c.outbox.progress();
                if progress != s.ping_progress {
                    // Busy sending us a message, or reading one: alive; its answer comes after.
                    s.ping = Some((id, now));
                    s.ping_progress = progress;
                } else if now.duration_since(sent) >= cfg.ping_timeout {
                    s.ping = None;
                    s.next_ping = None;
                    drop(s);
                    let reason = format!(
                        "no answer to ping within {}",
                        human_duration(cfg.ping_timeout)
                    );
                    crate::log::info!("client #{}: {reason}; closing", c.id);
                    c.outbox.close(1001, &reason);
                }
                continue;
            }
            if s.next_ping.is_some_and(|t| now >= t) {
                let id = self.next_ping.fetch_add(1, Ordering::Relaxed);
                s.ping = Some((id, now));
                s.ping_progress = c.outbox.progress();
                s.next_ping = Some(now + cfg.ping_interval);
                drop(s);
                c.outbox
                    .send_urgent(rpc::request(&RequestId::number(id), "ping", None).to_string());
            }
        }
    }
}

/// The answers to a batch, as one array. Each answer fits a client message (see
/// `rpc::capped_response`); should all of them together not, the biggest become errors.
fn batch(mut replies: Vec<String>) -> String {
    let total = |r: &[String]| r.iter().map(|t| t.len() + 1).sum::<usize>() + 1;
    while total(&replies) > rpc::MAX_TO_CLIENT {
        let (i, _) = replies
            .iter()
            .enumerate()
            .max_by_key(|(_, t)| t.len())
            .expect("a batch too big is not empty");
        let id = serde_json::from_slice::<Value>(replies[i].as_bytes())
            .ok()
            .and_then(|v| RequestId::from_value(&v["id"]));
        replies[i] = rpc::error_response(
            id.as_ref(),
            &RpcError::new(
                ErrorCode::InternalError,
                "the answers to this batch together are above the 16 MiB Claude Code accepts in one message; send fewer requests at once",
            ),
        )
        .to_string();
    }
    format!("[{}]", replies.join(","))
}

/// The name ccide gives itself in `initialize`. It matches the pattern `^Claude Code .+ MCP$`
/// by which the client recognises an IDE whose `getDiagnostics` answers it filters by the
/// session's Read rules before the model sees them; under any other name the diagnostics of
/// a file the session may not read reach the model (ccide-protocol(7) §3.2, §5.4). The user
/// sees the lock file's `ideName` in /ide and /status, not this name.
const SERVER_NAME: &str = "Claude Code ccide MCP";

fn initialize(client: &Client, params: &Value) -> Result<Value, RpcError> {
    let asked = params["protocolVersion"].as_str().unwrap_or("");
    let version = if KNOWN_VERSIONS.contains(&asked) {
        asked
    } else {
        LATEST_VERSION
    };
    {
        let mut s = lock(&client.state);
        s.name = params["clientInfo"]["name"]
            .as_str()
            .unwrap_or("")
            .to_string();
        s.version = params["clientInfo"]["version"]
            .as_str()
            .unwrap_or("")
            .to_string();
        s.has_roots = params["capabilities"]["roots"].is_object();
    }
    Ok(obj! {
        "protocolVersion": version,
        "capabilities": obj! {"tools": obj! {"listChanged": true}},
        "serverInfo": obj! {"name": SERVER_NAME, "version": env!("CARGO_PKG_VERSION")},
    })
}

/// The folders of a `roots/list` answer, canonical where they exist. Claude Code 2.1.112
/// sends `file://` and the path as it is, later versions percent-encode it: decoded, as
/// both read the same unless the path holds a `%`.
fn roots(v: &Value) -> Vec<PathBuf> {
    let mut roots = Vec::new();
    for r in v["roots"].as_array().into_iter().flatten() {
        if let Some(p) = files::uri_path(r["uri"].as_str().unwrap_or(""), true) {
            roots.push(std::fs::canonicalize(&p).unwrap_or(p));
        }
    }
    roots
}

#[cfg(test)]
#[path = "session_tests.rs"]
mod tests;
