//! The MCP tools (ccide-protocol(7) §7): each is a plain function over the shared `State`,
//! the call and its arguments, listed with its input schema, sorted by name. The workspace
//! methods that editor plugins call directly (`readFile`, ...) are also served as direct
//! JSON-RPC methods. Tools see the state, never the session's client list.

mod diagnostics;
mod diffs;
mod editor;
mod exec;
mod format;
mod workspace;

use std::sync::Arc;

use serde_json::{Map, Value};

use crate::json::obj;
use crate::rpc::call::{Call, Reply, schema};
use crate::rpc::{ErrorCode, RpcError};
use crate::state::State;

type Run = fn(&Arc<State>, &Call, &Map<String, Value>) -> Reply;

pub struct Tool {
    pub name: &'static str,
    pub description: &'static str,
    /// JSON Schema of the arguments.
    pub schema: fn() -> Value,
    /// Whether `tools/list` shows it (executeCode hides itself when disabled).
    pub listed: fn(&State) -> bool,
    pub run: Run,
}

fn always(_: &State) -> bool {
    true
}

/// Every tool, sorted by name (so `tools/list` never depends on hash order; a unit test checks).
const TOOLS: &[Tool] = &[
    Tool {
        name: "checkDocumentDirty",
        description: "Whether a document has unsaved changes.",
        schema: || schema(&[("filePath", "string", "Path of the file")], &["filePath"]),
        listed: always,
        run: editor::check_document_dirty,
    },
    Tool {
        name: "closeAllDiffTabs",
        description: "Close every pending diff opened through openDiff (each is answered as rejected).",
        schema: || schema(&[], &[]),
        listed: always,
        run: diffs::close_all_diff_tabs,
    },
    Tool {
        name: "close_tab",
        description: "Close a tab by name or file path; a pending diff of that name is settled as rejected.",
        schema: || {
            schema(
                &[(
                    "tab_name",
                    "string",
                    "Name of the tab (or path of the file) to close",
                )],
                &["tab_name"],
            )
        },
        listed: always,
        run: diffs::close_tab,
    },
    Tool {
        name: "executeCode",
        description: "Run Python code in a persistent kernel (one per connection; variables survive between calls). Output text, tracebacks and matplotlib figures as images.",
        schema: || schema(&[("code", "string", "The Python code to run")], &["code"]),
        listed: exec::listed,
        run: exec::execute_code,
    },
    Tool {
        name: "getCurrentFile",
        description: "The active file, workspace-relative and absolute.",
        schema: || schema(&[], &[]),
        listed: always,
        run: |s, c, a| workspace::as_tool(s, c, "getCurrentFile", a),
    },
    Tool {
        name: "getCurrentSelection",
        description: "The selection in the active editor.",
        schema: || schema(&[], &[]),
        listed: always,
        run: editor::get_current_selection,
    },
    Tool {
        name: "getDiagnostics",
        description: "Diagnostics (errors, warnings) of a file given by its file:// uri, or of every file.",
        schema: || {
            schema(
                &[(
                    "uri",
                    "string",
                    "file:// URI of the file; omit for every file",
                )],
                &[],
            )
        },
        listed: always,
        run: diagnostics::get_diagnostics,
    },
    Tool {
        name: "getLatestSelection",
        description: "The most recent selection sent, in any file.",
        schema: || schema(&[], &[]),
        listed: always,
        run: editor::get_latest_selection,
    },
    Tool {
        name: "getOpenEditors",
        description: "The open editor tabs.",
        schema: || schema(&[], &[]),
        listed: always,
        run: editor::get_open_editors,
    },
    Tool {
        name: "getOpenFiles",
        description: "The open files, workspace-relative and absolute.",
        schema: || schema(&[], &[]),
        listed: always,
        run: |s, c, a| workspace::as_tool(s, c, "getOpenFiles", a),
    },
    Tool {
        name: "getWorkspaceFolders",
        description: "The workspace folders (the same as in the lock file).",
        schema: || schema(&[], &[]),
        listed: always,
        run: workspace::get_workspace_folders,
    },
    Tool {
        name: "getWorkspaceInfo",
        description: "Name, path and file count of the first workspace folder.",
        schema: || schema(&[], &[]),
        listed: always,
        run: |s, c, a| workspace::as_tool(s, c, "getWorkspaceInfo", a),
    },
    Tool {
        name: "get_all_opened_file_paths",
        description: "The paths of all open files, one per line.",
        schema: || schema(&[], &[]),
        listed: always,
        run: editor::get_all_opened_file_paths,
    },
    Tool {
        name: "listFiles",
        description: "Workspace-relative paths of the files matching a glob (*, **, ?); .git is skipped.",
        schema: || {
            schema(
                &[("pattern", "string", "Glob over workspace-relative paths")],
                &[],
            )
        },
        listed: always,
        run: |s, c, a| workspace::as_tool(s, c, "listFiles", a),
    },
    Tool {
        name: "openDiff",
        description: "Open a diff for review and wait until the user accepts (FILE_SAVED with the final contents) or rejects it (DIFF_REJECTED). The server never writes the file.",
        schema: || {
            schema(
                &[
                    ("old_file_path", "string", "Path of the file as it is now"),
                    ("new_file_path", "string", "Path of the file after the edit"),
                    (
                        "new_file_contents",
                        "string",
                        "The proposed contents of the file",
                    ),
                    ("tab_name", "string", "Name of the diff tab"),
                ],
                &[
                    "old_file_path",
                    "new_file_path",
                    "new_file_contents",
                    "tab_name",
                ],
            )
        },
        listed: always,
        run: diffs::open_diff,
    },
    Tool {
        name: "openFile",
        description: "Open a file, optionally selecting the text from startText to endText.",
        schema: || {
            schema(
                &[
                    ("filePath", "string", "Path of the file to open"),
                    ("preview", "boolean", "Open as a preview tab"),
                    (
                        "startText",
                        "string",
                        "Select from the first occurrence of this text",
                    ),
                    (
                        "endText",
                        "string",
                        "... to the end of this text, searched after startText",
                    ),
                    (
                        "selectToEndOfLine",
                        "boolean",
                        "Extend the selection to the end of its last line",
                    ),
                    (
                        "makeFrontmost",
                        "boolean",
                        "Answer with a sentence (true, the default) or with JSON details (false)",
                    ),
                ],
                &["filePath"],
            )
        },
        listed: always,
        run: editor::open_file,
    },
    Tool {
        name: "open_files",
        description: "Open several files.",
        schema: || {
            schema(
                &[("file_paths", "string[]", "Paths of the files to open")],
                &["file_paths"],
            )
        },
        listed: always,
        run: editor::open_files,
    },
    Tool {
        name: "readFile",
        description: "The text of a workspace file (workspace-relative path).",
        schema: || schema(&[("path", "string", "Workspace-relative path")], &["path"]),
        listed: always,
        run: |s, c, a| workspace::as_tool(s, c, "readFile", a),
    },
    Tool {
        name: "reformat_file",
        description: "Reformat a file with the formatter configured for its type.",
        schema: || {
            schema(
                &[("file_path", "string", "Path of the file")],
                &["file_path"],
            )
        },
        listed: always,
        run: format::reformat_file,
    },
    Tool {
        name: "saveDocument",
        description: "Write a document's unsaved content to disk.",
        schema: || schema(&[("filePath", "string", "Path of the file")], &["filePath"]),
        listed: always,
        run: editor::save_document,
    },
    Tool {
        name: "writeFile",
        description: "Write a workspace file (workspace-relative path), atomically.",
        schema: || {
            schema(
                &[
                    ("path", "string", "Workspace-relative path"),
                    ("content", "string", "The new content"),
                ],
                &["path", "content"],
            )
        },
        listed: always,
        run: |s, c, a| workspace::as_tool(s, c, "writeFile", a),
    },
];

pub fn list(state: &State) -> Vec<Value> {
    TOOLS
        .iter()
        .filter(|t| (t.listed)(state))
        .map(|t| obj! {"name": t.name, "description": t.description, "inputSchema": (t.schema)()})
        .collect()
}

/// `tools/call`: an unknown tool is -32602 `Unknown tool: NAME` (ccide-protocol(7) §3).
pub fn call(state: &Arc<State>, call: &Call, mut params: Value) -> Reply {
    // Taken, not cloned: openDiff's arguments carry whole files.
    let args = match params.get_mut("arguments").map(Value::take) {
        Some(Value::Object(m)) => m,
        None | Some(Value::Null) => Map::new(),
        Some(_) => {
            return Reply::Now(Err(RpcError::invalid_params(
                "tools/call \"arguments\" must be an object",
            )));
        }
    };
    let Some(name) = params["name"].as_str() else {
        return Reply::Now(Err(RpcError::invalid_params(
            "tools/call needs a \"name\" string",
        )));
    };
    match TOOLS.iter().find(|t| t.name == name) {
        Some(t) => (t.run)(state, call, &args),
        None => Reply::Now(Err(RpcError::invalid_params(format!(
            "Unknown tool: {name}"
        )))),
    }
}

/// Methods that are not MCP: the workspace methods called directly, else "Method not found".
pub fn direct_method(state: &State, method: &str, params: Value) -> Reply {
    let Some(f) = workspace::direct(method) else {
        return Reply::Now(Err(RpcError::new(
            ErrorCode::MethodNotFound,
            "Method not found",
        )));
    };
    let args = match params {
        Value::Object(m) => m,
        Value::Null => Map::new(),
        _ => {
            return Reply::Now(Err(RpcError::invalid_params("params must be an object")));
        }
    };
    Reply::Now(f(state, &args))
}

#[cfg(test)]
mod tests;
