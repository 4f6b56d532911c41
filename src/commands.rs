//! The server side of the control channel: each request a command sends, answered from the
//! shared state. The command-line side lives in `client`.

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::control::failure;
use crate::diffs::SettleError;
use crate::serve::App;

pub fn handle(app: &Arc<App>, req: &Value) -> Value {
    let cwd = req["cwd"].as_str().map(PathBuf::from).unwrap_or_default();
    match req["cmd"].as_str().unwrap_or("") {
        "diff.list" => json!({"ok": true, "diffs": app.diffs.list()}),
        "diff.settle" => {
            let accept = req["accept"] == true;
            match app.diffs.settle_by_user(req["target"].as_str(), accept, &cwd) {
                Ok(d) => json!({"ok": true, "diff": d}),
                Err(e) => {
                    let kind = match e {
                        SettleError::NotFound(_) => "not_found",
                        SettleError::AlreadySettled(_) => "already_settled",
                        SettleError::Ambiguous(_) => "ambiguous",
                        SettleError::Unreadable(_) => "unreadable",
                    };
                    json!({"ok": false, "error": e.message(), "kind": kind})
                }
            }
        }
        "status" => json!({"ok": true, "status": app.status()}),
        other => failure(&format!("unknown control command '{other}' (is ccide up to date?)")),
    }
}
