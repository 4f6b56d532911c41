//! executeCode (ccide-protocol(7) §7): the model can call it, so it runs only as the user
//! allowed with `serve --exec` (see `state::exec`).

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::rpc::call::{Call, Reply, answer_later, arg_str, tool_error};
use crate::state::State;
use crate::state::exec::Mode;

pub fn listed(state: &State) -> bool {
    state.exec.settings.mode != Mode::Off
}

pub fn execute_code(state: &Arc<State>, call: &Call, args: &Map<String, Value>) -> Reply {
    if state.exec.settings.mode == Mode::Off {
        return Reply::Now(Ok(tool_error(
            "executeCode is disabled: start ccide serve with --exec ask (each call waits for `ccide exec approve`) or --exec on",
        )));
    }
    let code = match arg_str(args, "code", true) {
        Ok(v) => v.unwrap_or_default(),
        Err(e) => return Reply::Now(Err(e)),
    };
    let responder = Arc::new(call.defer());
    let work = state.exec.prepare(
        call.client.id,
        code,
        &responder,
        state.workspaces.list(),
        state.trusted,
    );
    answer_later(responder, Box::new(work))
}
