//! `ccide events`: one JSON line per event (diff opened or settled, client connected or
//! disconnected) to every subscriber on the control socket, so an editor script can react.

use std::io::Write;
use std::os::unix::net::UnixStream;
use std::sync::Mutex;

use serde_json::Value;

static SUBSCRIBERS: Mutex<Vec<UnixStream>> = Mutex::new(Vec::new());

pub fn subscribe(stream: UnixStream) {
    // A subscriber that stops reading is dropped rather than allowed to stall the server.
    if stream.set_nonblocking(true).is_ok() {
        SUBSCRIBERS.lock().unwrap().push(stream);
    }
}

pub fn emit(mut event: Value) {
    event["time"] = crate::log::utc_now().into();
    let mut line = event.to_string();
    line.push('\n');
    SUBSCRIBERS
        .lock()
        .unwrap()
        .retain_mut(|s| s.write_all(line.as_bytes()).is_ok());
}
