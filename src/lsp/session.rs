//! The server side of an editor session: `ccide lsp` keeps one control connection open for the
//! editor's lifetime (`{"cmd":"attach"}`). The tabs and unsaved buffers it opens belong to it;
//! when the connection ends (the editor quit, `ccide lsp` died, even by SIGKILL) they are
//! closed and dropped, unless another live session holds them too. Every other command works
//! on this connection as on a plain one; the few only `ccide lsp` needs are here.

use std::io::{BufRead, BufReader, Take, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use serde_json::{Value, json};

use crate::control::failure;
use crate::editor::Pos;
use crate::serve::App;

/// The files each live session holds: (session, file).
static HELD: Mutex<Vec<(u64, PathBuf)>> = Mutex::new(Vec::new());

/// Serves an attached connection until it ends, then drops what it held.
pub fn attach(
    app: &Arc<App>,
    mut reader: BufReader<Take<UnixStream>>,
    mut w: UnixStream,
    hello: &Value,
) {
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let id = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    crate::info!(
        "editor session {id} attached: {} (pid {})",
        hello["editor"].as_str().unwrap_or("an editor"),
        hello["pid"]
    );
    let mut answer = json!({"ok": true, "session": id, "diffs": app.diffs.list()});
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
            Ok(req) => handle(app, id, &req),
            Err(e) => failure(&format!("bad control request: {e}")),
        };
    }
    let gone: Vec<PathBuf> = {
        let mut held = HELD.lock().unwrap();
        let mine: Vec<PathBuf> = held
            .iter()
            .filter(|h| h.0 == id)
            .map(|h| h.1.clone())
            .collect();
        held.retain(|h| h.0 != id);
        mine.into_iter()
            .filter(|p| !held.iter().any(|h| h.1 == *p))
            .collect()
    };
    let mut n = 0;
    for p in &gone {
        n += usize::from(app.editor.close_tab(p, true));
    }
    crate::info!("editor session {id} ended: closed {n} tab(s) and dropped their unsaved content");
}

fn hold(id: u64, p: PathBuf, on: bool) {
    let mut held = HELD.lock().unwrap();
    held.retain(|h| h.0 != id || h.1 != p);
    if on {
        held.push((id, p));
    }
}

fn handle(app: &Arc<App>, id: u64, req: &Value) -> Value {
    let path = req["path"].as_str().map(|p| app.resolve(p));
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
            let payload =
                crate::editor::selection_payload(&p, pos(&req["start"]), pos(&req["end"]), text);
            hold(id, p, true);
            let n = crate::context::select(app, payload);
            json!({"ok": true, "clients": n})
        }
        ("open" | "buffer" | "close", _) => {
            let answer = crate::commands::handle(app, req);
            if answer["ok"] == true {
                let on = req["cmd"] != "close";
                let raw = req["paths"]
                    .as_array()
                    .cloned()
                    .unwrap_or_else(|| vec![req["path"].clone()]);
                for p in raw.iter().filter_map(|p| app.resolve(p.as_str()?).ok()) {
                    hold(id, p, on);
                }
            }
            answer
        }
        // A symlink named like the file, beside `proposed`, so the editor picks the file's
        // language for the proposal (and attaches `ccide lsp` to it).
        ("diff.view", _) => match diff_dir(app, req) {
            Ok((dir, file)) => {
                let name = file.file_name().unwrap_or_default();
                let view = if ["original", "proposed", "meta.json"]
                    .iter()
                    .any(|n| name == *n)
                {
                    dir.join("proposed")
                } else {
                    let v = dir.join(name);
                    let _ = std::os::unix::fs::symlink("proposed", &v);
                    v
                };
                json!({"ok": true, "path": view})
            }
            Err(e) => failure(&e),
        },
        // Accept with the content the editor shows (the proposal as the user edited it, saved
        // or not): it becomes `proposed`, which is what accepting sends.
        ("diff.settle", _) if req["content"].is_string() => {
            match diff_dir(app, req).and_then(|(dir, _)| {
                crate::files::write_volatile(
                    &dir.join("proposed"),
                    req["content"].as_str().unwrap_or("").as_bytes(),
                    0o600,
                )
                .map_err(|e| format!("cannot store the edited proposal in {}: {e}", dir.display()))
            }) {
                Ok(()) => crate::commands::handle(app, req),
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
                if let Ok(p) = app.resolve(raw) {
                    let ds = app.diagnostics.get(&p);
                    files.insert(
                        raw.into(),
                        ds.iter().map(crate::diagnostics::to_wire).collect(),
                    );
                }
            }
            json!({"ok": true, "files": files})
        }
        _ => crate::commands::handle(app, req),
    }
}

/// The directory and target file of the pending diff `req["target"]` names by id.
fn diff_dir(app: &App, req: &Value) -> Result<(PathBuf, PathBuf), String> {
    let id = &req["target"];
    app.diffs
        .list()
        .into_iter()
        .find(|d| d["id"] == *id)
        .map(|d| {
            let s = |k: &str| PathBuf::from(d[k].as_str().unwrap_or(""));
            (s("dir"), s("file"))
        })
        .ok_or_else(|| format!("no pending diff {id}"))
}
