//! The server side of the control channel: each request a command sends, answered from the
//! shared state. The command-line side lives in `client`.

use std::path::PathBuf;
use std::sync::Arc;

use serde_json::{Value, json};

use crate::context::{self, HumanRange};
use crate::control::failure;
use crate::diffs::SettleError;
use crate::serve::App;

pub fn handle(app: &Arc<App>, req: &Value) -> Value {
    let cwd = req["cwd"].as_str().map(PathBuf::from).unwrap_or_default();
    match req["cmd"].as_str().unwrap_or("") {
        "diff.list" => json!({"ok": true, "diffs": app.diffs.list()}),
        "diff.settle" => {
            let accept = req["accept"] == true;
            match app
                .diffs
                .settle_by_user(req["target"].as_str(), accept, &cwd)
            {
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
        "select" => select(app, req).unwrap_or_else(|e| failure(&e)),
        "mention" => mention(app, req).unwrap_or_else(|e| failure(&e)),
        "open" => open(app, req).unwrap_or_else(|e| failure(&e)),
        "close" => close(app, req).unwrap_or_else(|e| failure(&e)),
        "buffer" => buffer(app, req).unwrap_or_else(|e| failure(&e)),
        "diagnostics.import" => {
            let format = req["format"]
                .as_str()
                .and_then(crate::checkparse::Format::from_name)
                .unwrap_or(crate::checkparse::Format::Auto);
            crate::diagnostics::import(app, req["text"].as_str().unwrap_or(""), format, &cwd)
        }
        "diagnostics.list" => {
            let files: Vec<Value> = app
                .diagnostics
                .all()
                .iter()
                .map(|(p, ds)| {
                    json!({"uri": crate::editor::file_url(p), "path": p,
                        "diagnostics": ds.iter().map(crate::diagnostics::to_wire).collect::<Vec<_>>(),
                        "lines": ds.iter().map(|d| crate::diagnostics::describe(p, d)).collect::<Vec<_>>()})
                })
                .collect();
            json!({"ok": true, "files": files})
        }
        "diagnostics.clear" => {
            let only = match req["path"].as_str() {
                Some(p) => match app.resolve(p) {
                    Ok(p) => Some(p),
                    Err(e) => return failure(&e),
                },
                None => None,
            };
            let cleared = app.diagnostics.clear(only.as_deref());
            for p in &cleared {
                crate::diagnostics::broadcast_change(app, p, &[]);
            }
            json!({"ok": true, "cleared": cleared})
        }
        "exec" => crate::exec::control(app, req),
        "workspace" => {
            let add = req["op"] == "add";
            let path = PathBuf::from(req["path"].as_str().unwrap_or(""));
            match req["op"].as_str() {
                Some("list") => json!({"ok": true, "workspaces": *app.workspaces.read().unwrap()}),
                Some("add" | "remove") => match app.change_workspace(add, &path) {
                    Ok(ws) => json!({"ok": true, "workspaces": ws}),
                    Err(e) => failure(&e),
                },
                _ => failure("workspace: expected add, remove or list"),
            }
        }
        other => failure(&format!(
            "unknown control command '{other}' (is ccide up to date?)"
        )),
    }
}

fn path_arg(app: &App, v: &Value) -> Result<PathBuf, String> {
    app.resolve(v.as_str().ok_or("missing path")?)
}

fn num(v: &Value) -> Option<usize> {
    v.as_u64().map(|n| n as usize)
}

fn select(app: &App, req: &Value) -> Result<Value, String> {
    let path = path_arg(app, &req["path"])?;
    if !path.is_file() {
        return Err(format!("File not found: {}", path.display()));
    }
    let r = &req["range"];
    let range = HumanRange {
        start_line: num(&r["start_line"]),
        start_col: num(&r["start_col"]),
        end_line: num(&r["end_line"]),
        end_col: num(&r["end_col"]),
    };
    let payload =
        context::selection_for(app, &path, range, req["text"].as_str().map(String::from))?;
    let n = context::select(app, payload.clone());
    Ok(json!({"ok": true, "clients": n, "selection": payload}))
}

fn mention(app: &App, req: &Value) -> Result<Value, String> {
    let path = path_arg(app, &req["path"])?;
    let start = num(&req["start"]);
    if !path.exists() {
        return Err(format!("File not found: {}", path.display()));
    }
    if path.is_dir() && start.is_some() {
        return Err(format!(
            "{} is a directory: mention it without lines",
            path.display()
        ));
    }
    let payload = context::mention_payload(&path, start, num(&req["end"]))?;
    let n = context::mention(app, payload.clone());
    Ok(json!({"ok": true, "clients": n, "queued": n == 0, "mention": payload}))
}

fn paths(app: &App, req: &Value) -> Result<Vec<PathBuf>, String> {
    req["paths"]
        .as_array()
        .ok_or("missing paths")?
        .iter()
        .map(|p| path_arg(app, p))
        .collect()
}

fn open(app: &App, req: &Value) -> Result<Value, String> {
    let paths = paths(app, req)?;
    for p in &paths {
        if !p.is_file() {
            return Err(format!("File not found: {}", p.display()));
        }
    }
    for (i, p) in paths.iter().enumerate() {
        app.editor.open_tab(p, i + 1 == paths.len(), false);
    }
    Ok(json!({"ok": true, "opened": paths}))
}

fn close(app: &App, req: &Value) -> Result<Value, String> {
    let discard = req["discard"] == true;
    let mut not_open = Vec::new();
    let mut kept = Vec::new();
    for p in paths(app, req)? {
        if !app.editor.close_tab(&p, discard) {
            not_open.push(p.clone());
        }
        if app.editor.document(&p).is_some() {
            kept.push(p);
        }
    }
    Ok(json!({"ok": true, "not_open": not_open, "kept_unsaved": kept}))
}

fn buffer(app: &App, req: &Value) -> Result<Value, String> {
    let path = path_arg(app, &req["path"])?;
    let content = req["content"].as_str().map(String::from);
    app.editor.set_document(&path, content);
    Ok(json!({"ok": true, "path": path}))
}
