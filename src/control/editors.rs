//! The server side of an editor session: `ccide lsp` keeps one control connection open for the
//! editor's lifetime (`{"cmd":"attach"}`). The tabs and unsaved buffers it opens belong to it;
//! when the connection ends (the editor quit, `ccide lsp` died, even by SIGKILL) they are
//! closed and dropped, unless another live session holds them too. Every other command works
//! on this connection as on a plain one; the few only `ccide lsp` needs are here.

use std::io::{BufRead, BufReader, Take, Write};
use std::os::unix::net::UnixStream;

use std::sync::Arc;

use serde_json::{Value, json};

use super::failure;
use crate::state::State;
use crate::state::editor::{Pos, selection_payload};

/// Serves an attached connection until it ends, then drops what it held.
pub fn attach(
    state: &Arc<State>,
    mut reader: BufReader<Take<UnixStream>>,
    mut w: UnixStream,
    hello: &Value,
) {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let id = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    crate::log::info!(
        "editor session {id} attached: {} (pid {})",
        hello["editor"].as_str().unwrap_or("an editor"),
        hello["pid"]
    );
    let mut answer = json!({"ok": true, "session": id, "diffs": state.diffs.list()});
    loop {
        if w.write_all(format!("{answer}\n").as_bytes()).is_err() {
            break;
        }
        // The limit counts every byte of the connection; a session pushes whole buffers for
        // hours, so it is a limit per request here.
        reader.get_mut().set_limit(64 << 20);
        let mut line = String::new();
        if !matches!(reader.read_line(&mut line), Ok(n) if n > 0) {
            break;
        }
        answer = match serde_json::from_str(&line) {
            Ok(req) => handle(state, id, &req),
            Err(e) => failure(&format!("bad control request: {e}")),
        };
    }
    let gone = state.editor.release(id);
    let mut n = 0;
    for p in &gone {
        n += usize::from(state.editor.close_tab(p, true));
    }
    crate::log::info!(
        "editor session {id} ended: closed {n} tab(s) and dropped their unsaved content"
    );
}

fn handle(state: &Arc<State>, id: u64, req: &Value) -> Value {
    let path = req["path"].as_str().map(|p| state.resolve(p));
    match (req["cmd"].as_str().unwrap_or(""), path) {
        (_, Some(Err(e))) => failure(&e),
        // The selection exactly as the editor has it: positions already counted in UTF-16
        // units (what VS Code sends), text from the editor's buffer.
        ("selection", Some(Ok(p))) => {
            let pos = |v: &Value| Pos {
                line: v[0].as_u64().unwrap_or(0) as usize,
                character: v[1].as_u64().unwrap_or(0) as usize,
            };
            let text = req["text"].as_str().unwrap_or("");
            let payload = selection_payload(&p, pos(&req["start"]), pos(&req["end"]), text);
            state.editor.hold(id, &p, true);
            match state.select(payload) {
                Ok(n) => json!({"ok": true, "clients": n.sent, "held": n.held}),
                Err(e) => failure(&e),
            }
        }
        ("open" | "buffer" | "close", _) => {
            let answer = super::handle(state, req);
            if answer["ok"] == true {
                let on = req["cmd"] != "close";
                let raw = req["paths"]
                    .as_array()
                    .cloned()
                    .unwrap_or_else(|| vec![req["path"].clone()]);
                for p in raw.iter().filter_map(|p| state.resolve(p.as_str()?).ok()) {
                    state.editor.hold(id, &p, on);
                }
            }
            answer
        }
        // A symlink named like the file, beside `proposed`, so the editor picks the file's
        // language for the proposal (and attaches `ccide lsp` to it).
        ("diff.view", _) => match state.diffs.proposal_view(req["target"].as_str()) {
            Ok(view) => json!({"ok": true, "path": view}),
            Err(e) => failure(&e),
        },
        // Accept with the content the editor shows (the proposal as the user edited it, saved
        // or not): it becomes `proposed`, which is what accepting sends.
        ("diff.settle", _) if req["content"].is_string() => {
            let content = req["content"].as_str().unwrap_or("");
            match state.diffs.edit_proposal(req["target"].as_str(), content) {
                Ok(()) => super::handle(state, req),
                Err(e) => failure(&e),
            }
        }
        ("diagnostics", _) => {
            let mut files = serde_json::Map::new();
            for raw in req["paths"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
            {
                if let Ok(p) = state.resolve(raw) {
                    let ds = state.diagnostics.store.get(&p);
                    files.insert(
                        raw.into(),
                        ds.iter().map(crate::diagnostics::to_wire).collect(),
                    );
                }
            }
            json!({"ok": true, "files": files})
        }
        _ => super::handle(state, req),
    }
}
