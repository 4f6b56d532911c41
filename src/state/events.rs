//! `ccide events`: one JSON line per event (diff opened or settled, executeCode asked or
//! decided, client connected or disconnected) to every subscriber on the control socket, so an
//! editor script can react.

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::sync::Mutex;

use serde_json::Value;

#[derive(Default)]
pub struct Events {
    subscribers: Mutex<Vec<UnixStream>>,
}

impl Events {
    /// Adds a subscriber; its first line says the stream is live, so a script can wait for it.
    pub fn subscribe(&self, mut stream: UnixStream) {
        let hello = serde_json::json!({"event": "subscribed", "time": crate::log::utc_now()});
        let mut subscribers = self.subscribers.lock().unwrap();
        if stream.write_all(format!("{hello}\n").as_bytes()).is_ok()
            // A subscriber that stops reading is dropped rather than allowed to stall the server.
            && stream.set_nonblocking(true).is_ok()
        {
            subscribers.push(stream);
        }
    }

    pub fn emit(&self, mut event: Value) {
        let mut subscribers = self.subscribers.lock().unwrap();
        if subscribers.is_empty() {
            return;
        }
        event["time"] = crate::log::utc_now().into();
        let mut line = event.to_string();
        line.push('\n');
        subscribers.retain_mut(|s| s.write_all(line.as_bytes()).is_ok());
    }
}
