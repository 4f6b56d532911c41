//! getDiagnostics (ccide-protocol(7) §5): answered from the store, waiting only within the
//! CLI's deadlines for checks of changed files.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::diagnostics::wait_all;
use crate::rpc::call::{Call, Reply, answer_later, arg_str, tool_json};
use crate::state::State;
use crate::state::diagnostics::answer;

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
    // What still produces the file's diagnostics: its checker (started here when the file
    // changed since its last run), its language server (given the content now).
    let pending = match uri.as_deref() {
        Some(u) => match state.resolve(crate::files::raw_uri_path(u)) {
            Ok(p) => diagnostics.refresh(&p, state.editor.document(&p).as_deref()),
            Err(_) => Vec::new(),
        },
        None => Vec::new(),
    };
    if uri.is_some() && pending.is_empty() {
        return Reply::Now(Ok(tool_json(&Value::Array(answer(diagnostics, uri)))));
    }
    // Waiting must not hold up the connection: answer from another thread. The CLI's
    // baseline call before an edit ({uri}, 500 ms deadline) waits a little for a result under
    // way, so an error the file had before is in the baseline and is not later reported as
    // introduced by the edit; {} waits up to --diagnostics-wait. A server still indexing
    // never holds an answer longer: the store then has its last final result.
    let state = state.clone();
    answer_later(
        Arc::new(call.defer()),
        Box::new(move || {
            let diagnostics = &state.diagnostics;
            if uri.is_some() {
                wait_all(&pending, BASELINE_WAIT);
            } else {
                diagnostics.refresh_all_and_wait(&|p| state.editor.document(p));
            }
            Some(tool_json(&Value::Array(answer(diagnostics, uri))))
        }),
    )
}
