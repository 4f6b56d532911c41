//! The connected clients: each one's outbox and protocol state, and broadcast of
//! notifications. The session drives a client's state; everything else only broadcasts.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime};

use serde_json::Value;

use super::RequestId;
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
    /// Whether the selection and queued mentions were sent after the handshake.
    pub greeted: bool,
    /// When the greeting is due, once scheduled.
    pub greet_at: Option<Instant>,
    /// A selection_changed reached it since it initialized (the greeting then skips it).
    pub saw_selection: bool,
    pub pid: Option<i64>,
    pub name: String,
    pub version: String,
    /// The keepalive ping we wait for: its id and when the wait began.
    pub ping: Option<(u64, Instant)>,
    pub next_ping: Option<Instant>,
    /// Deferred requests still owed an answer, with the flag that marks them answered.
    pub inflight: Vec<(RequestId, Arc<AtomicBool>)>,
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
            name: s.name.clone(),
            version: s.version.clone(),
            since: self.since,
            initialized: s.initialized,
        }
    }
}

/// Every connected client of a server.
#[derive(Default)]
pub struct Clients {
    list: Mutex<Vec<Arc<Client>>>,
    next_id: AtomicU64,
}

impl Clients {
    pub fn all(&self) -> Vec<Arc<Client>> {
        self.list.lock().unwrap().clone()
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
        self.list.lock().unwrap().push(client.clone());
        client
    }

    pub fn remove(&self, id: u64) {
        self.list.lock().unwrap().retain(|c| c.id != id);
    }

    /// Sends a notification to every initialized client; returns how many got it.
    pub fn broadcast(&self, method: &str, params: Value) -> usize {
        let text: tungstenite::Utf8Bytes = super::notification(method, params).to_string().into();
        let selection = method == "selection_changed";
        let mut n = 0;
        for c in self.all() {
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
