//! Workspace tools: the folders, and the workspace-relative methods that editor plugins call
//! both as tools (text results) and as direct JSON-RPC methods (raw results, JSON-RPC errors):
//! readFile, writeFile, listFiles, getWorkspaceInfo, getOpenFiles, getCurrentFile.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::files::file_url;
use crate::json::{self, obj};
use crate::rpc::call::{Call, Reply, arg_str, tool_error, tool_json, tool_texts};
use crate::rpc::{ErrorCode, RpcError};
use crate::state::{MAX_READ, State, read_text};

/// listFiles stops after this many paths and says so.
const MAX_LIST: usize = 10_000;

fn workspace_folders_json(state: &State) -> Value {
    let ws = state.workspaces.list();
    let folders: Vec<Value> = ws
        .iter()
        .enumerate()
        .map(|(i, w)| {
            obj! {
                "name": w.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "/".into()),
                "uri": file_url(w), "path": json::path(w), "index": i,
            }
        })
        .collect();
    obj! {"success": true, "folders": folders, "rootPath": ws.first().map(|p| json::path(p))}
}

pub fn get_workspace_folders(state: &Arc<State>, _call: &Call, _: &Map<String, Value>) -> Reply {
    Reply::Now(Ok(tool_json(&workspace_folders_json(state))))
}

fn rel_path(state: &State, args: &Map<String, Value>, name: &str) -> Result<PathBuf, RpcError> {
    let raw = arg_str(args, name, true)?.unwrap_or_default();
    state
        .resolve(raw.trim_start_matches('/'))
        .map_err(|e| RpcError::new(ErrorCode::InternalError, e))
}

fn read_file(state: &State, args: &Map<String, Value>) -> Result<Value, RpcError> {
    let path = rel_path(state, args, "path")?;
    read_text(&state.workspaces, &path, MAX_READ)
        .map(Value::from)
        .map_err(|e| {
            RpcError::new(
                ErrorCode::InternalError,
                format!("failed to read file: {e}"),
            )
        })
}

fn write_file(state: &State, args: &Map<String, Value>) -> Result<Value, RpcError> {
    let path = rel_path(state, args, "path")?;
    let content = arg_str(args, "content", true)?.unwrap_or_default();
    if let Some(dir) = path.parent()
        && !dir.is_dir()
    {
        return Err(RpcError::new(
            ErrorCode::InternalError,
            format!(
                "failed to write file: directory {} does not exist",
                dir.display()
            ),
        ));
    }
    state.write_file(&path, content.as_bytes()).map_err(|e| {
        RpcError::new(
            ErrorCode::InternalError,
            format!("failed to write file {}: {e}", path.display()),
        )
    })?;
    Ok(obj! {"success": true, "path": json::path(&path), "bytes": content.len()})
}

/// Workspace-relative paths of the files under the workspace folders, `.git` skipped.
fn walk(state: &State, pattern: Option<&str>, limit: usize) -> (Vec<String>, bool) {
    let roots = state.workspaces.list();
    let mut out = Vec::new();
    for root in &roots {
        let mut stack = vec![root.clone()];
        while let Some(dir) = stack.pop() {
            let Ok(rd) = std::fs::read_dir(&dir) else {
                continue;
            };
            let mut entries: Vec<_> = rd.flatten().collect();
            crate::text::sort_by_bytes(&mut entries, |e| e.file_name().into_encoded_bytes());
            for e in entries.into_iter().rev() {
                let name = e.file_name();
                if name == ".git" {
                    continue;
                }
                let Ok(ft) = e.file_type() else { continue };
                let p = e.path();
                // Symlinks are not followed: they could lead out of the workspace.
                if ft.is_dir() {
                    stack.push(p);
                } else if ft.is_file() {
                    let rel = p
                        .strip_prefix(root)
                        .unwrap_or(&p)
                        .to_string_lossy()
                        .into_owned();
                    if pattern.is_none_or(|pat| crate::pattern::glob_match(pat, &rel)) {
                        if out.len() >= limit {
                            return (out, true);
                        }
                        out.push(rel);
                    }
                }
            }
        }
    }
    crate::text::sort_by_bytes(&mut out, |p| p.as_bytes().to_vec());
    (out, false)
}

fn list_files(state: &State, args: &Map<String, Value>) -> Result<Value, RpcError> {
    let pattern = arg_str(args, "pattern", false)?;
    let (files, truncated) = walk(state, pattern.as_deref(), MAX_LIST);
    let mut v = obj! {"files": files, "truncated": truncated};
    if truncated {
        v["message"] = format!("stopped after {MAX_LIST} files; narrow the pattern").into();
    }
    Ok(v)
}

fn workspace_info(state: &State, _: &Map<String, Value>) -> Result<Value, RpcError> {
    let root = state.workspaces.first();
    let (files, truncated) = walk(state, None, 100_000);
    Ok(obj! {
        "name": root.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
        "path": json::path(&root), "fileCount": files.len(), "fileCountTruncated": truncated, "type": "folder",
    })
}

fn rel_of(state: &State, p: &Path) -> String {
    state.workspaces.rel(p)
}

fn open_files_list(state: &State, _: &Map<String, Value>) -> Result<Value, RpcError> {
    Ok(Value::Array(
        state.editor
            .tabs()
            .iter()
            .map(|t| obj! {"path": rel_of(state, &t.path), "absolutePath": json::path(&t.path), "isActive": t.active})
            .collect(),
    ))
}

fn current_file(state: &State, _: &Map<String, Value>) -> Result<Value, RpcError> {
    Ok(match state.editor.active() {
        Some(p) => obj! {"path": rel_of(state, &p), "absolutePath": json::path(&p)},
        None => Value::Null,
    })
}

type Direct = fn(&State, &Map<String, Value>) -> Result<Value, RpcError>;

/// The direct methods by name.
pub fn direct(name: &str) -> Option<Direct> {
    Some(match name {
        "readFile" => read_file,
        "writeFile" => write_file,
        "listFiles" => list_files,
        "getWorkspaceInfo" => workspace_info,
        "getOpenFiles" => open_files_list,
        "getCurrentFile" => current_file,
        _ => return None,
    })
}

/// The same methods as tools: the raw result as text, a failure as an isError result.
pub fn as_tool(state: &Arc<State>, _call: &Call, name: &str, args: &Map<String, Value>) -> Reply {
    let f = direct(name).expect("registered direct method");
    Reply::Now(match f(state, args) {
        Ok(Value::String(s)) => Ok(tool_texts(&[&s])),
        Ok(v) => Ok(tool_json(&v)),
        Err(e) if e.code == ErrorCode::InvalidParams => Err(e),
        Err(e) => Ok(tool_error(&e.message)),
    })
}
