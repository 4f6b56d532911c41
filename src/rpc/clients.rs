//! The connected clients: each one's outbox and protocol state, and broadcast of
//! notifications. The session drives a client's state; everything else only broadcasts.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use serde_json::Value;

use super::RequestId;
use crate::proc::lock;
use crate::transport::Outbox;

pub struct Client {
    pub id: u64,
    pub outbox: Arc<Outbox>,
    pub addr: String,
    pub since: SystemTime,
    pub state: Mutex<ClientState>,
}

#[derive(Default)]
pub struct ClientState {
    pub initialized: bool,
    /// Whether its setup has settled and the greeting went out: from then on it receives
    /// notifications (the CLI drops those that arrive earlier, ccide-protocol(7) §3.3).
    pub greeted: bool,
    /// When the greeting is due, once scheduled.
    pub greet_at: Option<Instant>,
    /// Mentions made while it was being set up, delivered in order with the greeting.
    pub held_mentions: Vec<Value>,
    pub pid: Option<i64>,
    pub name: String,
    pub version: String,
    /// The keepalive ping we wait for: its id and when the wait began.
    pub ping: Option<(u64, Instant)>,
    /// The outbox's `progress` when that wait began: a count that moved since shows the
    /// client at work, and the wait begins again.
    pub ping_progress: u64,
    pub next_ping: Option<Instant>,
    /// Deferred requests still owed an answer, with the flag that marks them answered.
    pub inflight: Vec<(RequestId, Arc<AtomicBool>)>,
    /// Worker threads answering its requests now (see `call::answer_later`).
    pub workers: usize,
    /// The folders it answered `roots/list` with; None while it has given none (a client
    /// without the `roots` capability): then it hears of every file.
    pub roots: Option<Vec<PathBuf>>,
    /// It declared the `roots` capability in `initialize`.
    pub has_roots: bool,
    /// The id of our `roots/list` request it has not answered yet.
    pub roots_asked: Option<u64>,
}

impl ClientState {
    /// How deep its roots hold `path`: the length of the deepest root above it, 0 for a
    /// client without roots (it hears of every file), None when no root holds it.
    pub fn holds(&self, path: &Path) -> Option<usize> {
        match &self.roots {
            None => Some(0),
            Some(roots) => roots
                .iter()
                .filter(|r| path.starts_with(r))
                .map(|r| r.as_os_str().len())
                .max(),
        }
    }
}

/// A snapshot of one client for `status` and the log.
pub struct ClientInfo {
    pub id: u64,
    pub pid: Option<i64>,
    pub name: String,
    pub version: String,
    pub since: SystemTime,
    pub initialized: bool,
    pub ready: bool,
    pub roots: Option<Vec<PathBuf>>,
}

impl Client {
    pub fn send(&self, v: &Value) -> bool {
        self.outbox.send(v.to_string())
    }

    pub fn info(&self) -> ClientInfo {
        let s = lock(&self.state);
        ClientInfo {
            id: self.id,
            pid: s.pid,
            name: s.name.clone(),
            version: s.version.clone(),
            since: self.since,
            initialized: s.initialized,
            ready: s.greeted,
            roots: s.roots.clone(),
        }
    }

    /// How a person names it: `session 2 (pid 4242, /src/app)`, its id, pid and first root.
    pub fn describe(&self) -> String {
        let s = lock(&self.state);
        let root = s.roots.as_ref().and_then(|r| r.first());
        let root = root.map_or(String::new(), |r| format!(", {}", r.display()));
        format!("session {} (pid {}{root})", self.id, s.pid.unwrap_or(0))
    }
}

/// Who a broadcast reached: `sent` now, `held` for clients still being set up.
#[derive(Default, Clone, Copy, PartialEq, Eq, Debug)]
pub struct Reach {
    pub sent: usize,
    pub held: usize,
}

/// Every connected client of a server.
#[derive(Default)]
pub struct Clients {
    list: Mutex<Vec<Arc<Client>>>,
    next_id: AtomicU64,
}

impl Clients {
    pub fn all(&self) -> Vec<Arc<Client>> {
        lock(&self.list).clone()
    }

    /// Registers a new connection under the next id (counting from 1).
    pub fn add(&self, outbox: Arc<Outbox>, addr: String, state: ClientState) -> Arc<Client> {
        let client = Arc::new(Client {
            id: self.next_id.fetch_add(1, Ordering::Relaxed) + 1,
            outbox,
            addr,
            since: SystemTime::now(),
            state: Mutex::new(state),
        });
        lock(&self.list).push(client.clone());
        client
    }

    pub fn remove(&self, id: u64) {
        lock(&self.list).retain(|c| c.id != id);
    }

    /// Sends a notification to every client whose setup has settled. A client still being set
    /// up would drop it: it gets the current selection and the mentions held for it with its
    /// greeting instead, and counts as `held`, not as reached.
    pub fn broadcast(&self, method: &str, params: Value) -> Reach {
        self.tell(method, params, None)
    }

    /// The sessions a selection or mention of `path` goes to (ccide-protocol(7) §6.4): the
    /// one `pick` names (its id, else its pid), else those whose roots hold `path` deepest (a
    /// session without roots holds every file, at depth 0). None connected: an empty list.
    /// None holding it, or no session so named: an error naming the sessions.
    pub fn route(&self, path: &Path, pick: Option<&str>) -> Result<Vec<Arc<Client>>, String> {
        let id = pick.map(|p| p.parse::<i64>().unwrap_or(-1));
        let (mut found, mut best, mut any) = (Vec::new(), None, false);
        for c in self.all() {
            let s = lock(&c.state);
            let depth = match id {
                Some(n) => (c.id as i64 == n || s.pid == Some(n)).then_some(0),
                None => s.holds(path),
            };
            if !s.initialized {
                continue;
            }
            drop(s);
            any = true;
            if depth.is_some() && depth >= best {
                if depth > best {
                    found.clear();
                    best = depth;
                }
                found.push(c);
            }
        }
        if found.is_empty() && any {
            let what = match pick {
                Some(p) => format!("has the id or pid {p}"),
                None => format!("works in a folder that holds {}", path.display()),
            };
            return Err(format!(
                "no Claude Code session {what} (ccide status lists them, with their folders); send it to one with --session ID"
            ));
        }
        Ok(found)
    }

    /// Sends a notification to the clients `to` lists by id (every client when None), as
    /// `broadcast` does.
    pub fn tell(&self, method: &str, params: Value, to: Option<&[u64]>) -> Reach {
        let mention = method == "at_mentioned";
        let selection = method == "selection_changed";
        let text = super::notification(method, params.clone()).to_string();
        let mut reach = Reach::default();
        if text.len() > super::MAX_TO_CLIENT {
            crate::log::warn!(
                "not sending {method}: it is {} as JSON, above the 16 MiB a Claude Code client accepts",
                super::mib(text.len())
            );
            return reach;
        }
        let text: tungstenite::Utf8Bytes = text.into();
        for c in self.all() {
            if to.is_some_and(|to| !to.contains(&c.id)) {
                continue;
            }
            let mut s = lock(&c.state);
            if !s.initialized {
                continue;
            }
            if !s.greeted {
                if mention {
                    s.held_mentions.push(params.clone());
                }
                reach.held += usize::from(mention || selection);
                continue;
            }
            drop(s);
            if c.outbox.send(text.clone()) {
                reach.sent += 1;
            }
        }
        reach
    }
}
