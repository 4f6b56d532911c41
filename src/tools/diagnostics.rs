//! getDiagnostics (ccide-protocol(7) §5): answered from the store, waiting only within the
//! CLI's deadlines for checks of changed files.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::diagnostics::checkers::wait_all;
use crate::rpc::call::{Call, Reply, answer_later, arg_str, tool_json};
use crate::state::State;

/// How long a `{uri}` request waits for a running check: well inside the CLI's 500 ms.
const BASELINE_WAIT: Duration = Duration::from_millis(350);

/// getDiagnostics {uri?}: with a uri, the first element answers exactly that uri (the CLI
/// discards an answer whose uri differs), with an empty list when there is nothing; without,
/// every file with diagnostics.
pub fn get_diagnostics(state: &Arc<State>, call: &Call, args: &Map<String, Value>) -> Reply {
    let uri = match arg_str(args, "uri", false) {
        Ok(u) => u.filter(|u| !u.is_empty()),
        Err(e) => return Reply::Now(Err(e)),
    };
    let diagnostics = &state.diagnostics;
    // The file's check, if one runs now (started here when the file changed since its last).
    let running = uri.as_deref().and_then(|u| {
        let raw = crate::files::raw_uri_path(u);
        state
            .resolve(raw)
            .ok()
            .and_then(|p| diagnostics.refresh(&p))
    });
    if uri.is_some() && running.is_none() {
        return Reply::Now(Ok(tool_json(&Value::Array(diagnostics.answer(uri)))));
    }
    // Waiting for checks must not hold up the connection: answer from another thread. The
    // CLI's baseline call before an edit ({uri}, 500 ms deadline) waits a little for a check
    // already under way, so an error the file had before is in the baseline and is not later
    // reported as introduced by the edit; {} waits up to --diagnostics-wait.
    let diagnostics = diagnostics.clone();
    answer_later(
        Arc::new(call.defer()),
        Box::new(move || {
            match &running {
                Some(r) => wait_all(std::slice::from_ref(r), BASELINE_WAIT),
                None => diagnostics.refresh_all_and_wait(),
            }
            Some(tool_json(&Value::Array(diagnostics.answer(uri))))
        }),
    )
}
