//! executeCode (PROTOCOL 7): Python in a persistent kernel per connection, only when the user
//! allowed it (`serve --exec`).

use serde_json::{Map, Value};

use crate::cli::{Args, Fail, Outcome};
use crate::serve::App;
use crate::server::{Call, Reply};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    Off,
    Ask,
    On,
}

pub struct Settings {
    pub mode: Mode,
    pub timeout: std::time::Duration,
    pub approval_timeout: std::time::Duration,
}

/// The executeCode state of a server: settings, kernels per client, requests awaiting approval.
pub struct Exec {
    pub settings: Settings,
}

impl Exec {
    pub fn new(settings: Settings) -> Exec {
        Exec { settings }
    }

    /// Ends the kernel of a connection that is gone.
    pub fn client_gone(&self, _client: u64) {}
}

pub fn listed(app: &App) -> bool {
    app.exec.settings.mode != Mode::Off
}

pub fn execute_code(_call: &Call, _args: &Map<String, Value>) -> Reply {
    Reply::Now(Ok(crate::tools::tool_error(
        "executeCode is disabled: start ccide serve with --exec ask (each call waits for `ccide exec approve`) or --exec on",
    )))
}

/// The server side of `ccide exec`.
pub fn control(_app: &App, _req: &Value) -> Value {
    crate::control::failure("no executeCode requests are waiting")
}

pub fn command(_args: &Args) -> Outcome {
    Err(Fail::Failed("no executeCode requests are waiting".into()))
}
