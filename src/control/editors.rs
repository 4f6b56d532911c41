//! Editor sessions: `ccide lsp` keeps one control connection open for the editor's lifetime
//! (`attach`). The tabs and unsaved buffers it opens belong to it; when the connection ends
//! (the editor quit, `ccide lsp` died, even by SIGKILL) they are closed and dropped, unless
//! another live session holds them too. While it lasts, the connection is answered as any
//! other (`handler`), which records what the session holds.

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::Value;

use crate::json::obj;
use crate::state::State;

/// Starts a session: its id, and the answer to `attach` (the pending diffs, which the editor
/// shows; later ones come on its event stream).
pub fn attach(state: &State, pid: Option<u64>, editor: Option<&str>) -> (u64, Value) {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let id = NEXT.fetch_add(1, Ordering::Relaxed);
    crate::log::info!(
        "editor session {id} attached: {}",
        who(editor, pid, "an editor")
    );
    let answer = obj! {"ok": true, "session": id, "diffs": state.diffs.list()};
    (id, answer)
}

/// Ends a session: closes the tabs and drops the unsaved content that only it held.
pub fn detach(state: &State, id: u64) {
    let gone = state.editor.release(id);
    let mut n = 0;
    for p in &gone {
        n += usize::from(state.editor.close_tab(p, true));
        state.text_changed(p);
    }
    crate::log::info!(
        "editor session {id} ended: closed {n} tab(s) and dropped their unsaved content"
    );
}

/// A client as the log names it: the name (and version) it sent with its spacing tidied (an
/// older `ccide lsp` joined a missing version with a space), or `nobody` ("an editor").
pub fn who(client: Option<&str>, pid: Option<u64>, nobody: &str) -> String {
    let words: Vec<&str> = client.unwrap_or("").split_whitespace().collect();
    let name = match words.join(" ") {
        n if n.is_empty() => nobody.to_string(),
        n => n,
    };
    match pid {
        Some(pid) => format!("{name} (pid {pid})"),
        None => format!("{name} (no pid given)"),
    }
}
