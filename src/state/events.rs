//! `ccide events`: one JSON line per event (diff opened or settled, executeCode asked or
//! decided, client connected or disconnected) to every subscriber on the control socket, so an
//! editor script can react.

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::sync::Mutex;

use serde_json::Value;

use crate::proc::lock;

/// Where a subscriber's lines go; false when it is gone.
pub type Sink = Box<dyn FnMut(&str) -> bool + Send>;

#[derive(Default)]
pub struct Events {
    subscribers: Mutex<Vec<Sink>>,
}

/// The first line, saying the stream is live, so a script can wait for it.
fn hello() -> String {
    let hello = crate::json::obj! {"event": "subscribed", "time": crate::log::utc_now()};
    format!("{hello}\n")
}

impl Events {
    /// Adds a subscriber on the control socket.
    pub fn subscribe(&self, mut stream: UnixStream) {
        let mut subscribers = lock(&self.subscribers);
        if stream.write_all(hello().as_bytes()).is_ok()
            // A subscriber that stops reading is dropped rather than allowed to stall the server.
            && stream.set_nonblocking(true).is_ok()
        {
            subscribers.push(Box::new(move |line| {
                stream.write_all(line.as_bytes()).is_ok()
            }));
        }
    }

    /// Adds a subscriber in memory: serve's `--on-review`, and tests of editor sessions
    /// without a socket. The sink runs under the lock of every emitter (a diff being
    /// proposed): it must only hand the line on.
    pub fn subscribe_with(&self, mut sink: Sink) {
        let mut subscribers = lock(&self.subscribers);
        if sink(&hello()) {
            subscribers.push(sink);
        }
    }

    /// Whether anyone subscribes: an event that costs work to build (diff_opened reads the
    /// original back to count lines) is built only then.
    pub fn listening(&self) -> bool {
        !lock(&self.subscribers).is_empty()
    }

    pub fn emit(&self, mut event: Value) {
        let mut subscribers = lock(&self.subscribers);
        if subscribers.is_empty() {
            return;
        }
        event["time"] = crate::log::utc_now().into();
        let mut line = event.to_string();
        line.push('\n');
        subscribers.retain_mut(|s| s(&line));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    #[test]
    fn listening_while_a_subscriber_is_there_and_not_once_it_is_gone() {
        let events = Events::default();
        assert!(!events.listening(), "nobody subscribed yet");
        let open = Arc::new(AtomicBool::new(true));
        let sink_open = open.clone();
        events.subscribe_with(Box::new(move |_| sink_open.load(Ordering::Relaxed)));
        assert!(events.listening());
        events.emit(crate::json::obj! {"event": "x"});
        assert!(events.listening(), "a subscriber that takes lines stays");
        open.store(false, Ordering::Relaxed);
        events.emit(crate::json::obj! {"event": "x"});
        assert!(
            !events.listening(),
            "a subscriber that is gone is dropped at the next event"
        );
    }
}
