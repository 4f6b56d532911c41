//! The diff tools the CLI calls (ccide-protocol(7) §5): openDiff blocks until the user settles
//! the proposal; close_tab and closeAllDiffTabs settle pending ones as closed.

use std::path::Path;
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::rpc::call::{Call, Reply, arg_str, tool_error, tool_texts};
use crate::state::State;
use crate::state::diffs::Proposal;

macro_rules! tri {
    ($e:expr) => {
        match $e {
            Ok(v) => v,
            Err(e) => return Reply::Now(Err(e)),
        }
    };
}

/// openDiff: blocking; answered when the user settles the diff.
pub fn open_diff(state: &Arc<State>, call: &Call, args: &Map<String, Value>) -> Reply {
    let old = tri!(arg_str(args, "old_file_path", true)).unwrap_or_default();
    let new_path = tri!(arg_str(args, "new_file_path", false)).unwrap_or_else(|| old.clone());
    let contents = tri!(arg_str(args, "new_file_contents", true)).unwrap_or_default();
    let path = match state.resolve(&new_path) {
        Ok(p) => p,
        Err(e) => return Reply::Now(Ok(tool_error(&e))),
    };
    let tab_name = tri!(arg_str(args, "tab_name", false))
        .unwrap_or_else(|| format!("✻ [Claude Code] {} ⧉", display_name(&path)));
    let proposal = Proposal {
        old_file_path: old,
        new_file_path: new_path,
        path,
        tab_name,
        contents,
        client: call.client.id,
    };
    match state.diffs.propose(proposal, call.defer()) {
        Ok(_) => Reply::Later,
        Err(e) => Reply::Now(Ok(tool_error(&e))),
    }
}

fn display_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// close_tab: the user answered in the terminal; a pending diff of that name is settled as
/// rejected (the CLI ignores that late answer). Always TAB_CLOSED.
pub fn close_tab(state: &Arc<State>, call: &Call, args: &Map<String, Value>) -> Reply {
    let name = tri!(arg_str(args, "tab_name", true)).unwrap_or_default();
    state
        .diffs
        .close_where(call.client.id, |d| d.tab_name == name);
    // close_tab also takes a file path, closing that editor tab (ccide-protocol(7) §7).
    if let Ok(p) = state.resolve(&name) {
        state.editor.close_tab(&p, false);
    }
    Reply::Now(Ok(tool_texts(&["TAB_CLOSED"])))
}

/// closeAllDiffTabs: called at every prompt; closes only the calling client's pending diffs
/// (another CLI's proposal stays pending for its user).
pub fn close_all_diff_tabs(state: &Arc<State>, call: &Call, _args: &Map<String, Value>) -> Reply {
    let n = state.diffs.close_where(call.client.id, |_| true);
    Reply::Now(Ok(tool_texts(&[&format!("CLOSED_{n}_DIFF_TABS")])))
}
