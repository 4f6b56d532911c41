//! The tool registry: every MCP tool is a plain function over the editor state, listed with
//! its input schema, sorted by name. Seed 002's methods are also served as direct JSON-RPC
//! methods.

use std::sync::Arc;

use serde_json::{Map, Value, json};

use crate::jsonrpc::{ErrorCode, RpcError};
use crate::serve::App;
use crate::server::{Call, Reply};

pub struct Tool {
    pub name: &'static str,
    pub description: &'static str,
    /// JSON Schema of the arguments.
    pub schema: fn() -> Value,
    /// Whether `tools/list` shows it (executeCode hides itself when disabled).
    pub listed: fn(&App) -> bool,
    pub run: fn(&Call, &Map<String, Value>) -> Reply,
}

pub fn always(_: &App) -> bool {
    true
}

/// Every tool, sorted by name (so `tools/list` never depends on hash order; a unit test checks).
const TOOLS: &[Tool] = &[
    Tool {
        name: "checkDocumentDirty",
        description: "Whether a document has unsaved changes.",
        schema: || schema(&[("filePath", "string", "Path of the file")], &["filePath"]),
        listed: always,
        run: crate::context::check_document_dirty,
    },
    Tool {
        name: "closeAllDiffTabs",
        description: "Close every pending diff opened through openDiff (each is answered as rejected).",
        schema: || schema(&[], &[]),
        listed: always,
        run: crate::diffs::close_all_diff_tabs,
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
        run: crate::diffs::close_tab,
    },
    Tool {
        name: "executeCode",
        description: "Run Python code in a persistent kernel (one per connection; variables survive between calls). Output text, tracebacks and matplotlib figures as images.",
        schema: || schema(&[("code", "string", "The Python code to run")], &["code"]),
        listed: crate::exec::listed,
        run: crate::exec::execute_code,
    },
    Tool {
        name: "getCurrentFile",
        description: "The active file, workspace-relative and absolute.",
        schema: || schema(&[], &[]),
        listed: always,
        run: |c, a| crate::context::seed_tool(c, "getCurrentFile", a),
    },
    Tool {
        name: "getCurrentSelection",
        description: "The selection in the active editor.",
        schema: || schema(&[], &[]),
        listed: always,
        run: crate::context::get_current_selection,
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
        run: crate::diagnostics::get_diagnostics,
    },
    Tool {
        name: "getLatestSelection",
        description: "The most recent selection sent, in any file.",
        schema: || schema(&[], &[]),
        listed: always,
        run: crate::context::get_latest_selection,
    },
    Tool {
        name: "getOpenEditors",
        description: "The open editor tabs.",
        schema: || schema(&[], &[]),
        listed: always,
        run: crate::context::get_open_editors,
    },
    Tool {
        name: "getOpenFiles",
        description: "The open files, workspace-relative and absolute.",
        schema: || schema(&[], &[]),
        listed: always,
        run: |c, a| crate::context::seed_tool(c, "getOpenFiles", a),
    },
    Tool {
        name: "getWorkspaceFolders",
        description: "The workspace folders (the same as in the lock file).",
        schema: || schema(&[], &[]),
        listed: always,
        run: crate::context::get_workspace_folders,
    },
    Tool {
        name: "getWorkspaceInfo",
        description: "Name, path and file count of the first workspace folder.",
        schema: || schema(&[], &[]),
        listed: always,
        run: |c, a| crate::context::seed_tool(c, "getWorkspaceInfo", a),
    },
    Tool {
        name: "get_all_opened_file_paths",
        description: "The paths of all open files, one per line.",
        schema: || schema(&[], &[]),
        listed: always,
        run: crate::context::get_all_opened_file_paths,
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
        run: |c, a| crate::context::seed_tool(c, "listFiles", a),
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
        run: crate::diffs::open_diff,
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
        run: crate::context::open_file,
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
        run: crate::context::open_files,
    },
    Tool {
        name: "readFile",
        description: "The text of a workspace file (workspace-relative path).",
        schema: || schema(&[("path", "string", "Workspace-relative path")], &["path"]),
        listed: always,
        run: |c, a| crate::context::seed_tool(c, "readFile", a),
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
        run: crate::format::reformat_file,
    },
    Tool {
        name: "saveDocument",
        description: "Write a document's unsaved content to disk.",
        schema: || schema(&[("filePath", "string", "Path of the file")], &["filePath"]),
        listed: always,
        run: crate::context::save_document,
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
        run: |c, a| crate::context::seed_tool(c, "writeFile", a),
    },
];

/// A JSON Schema object for `(name, type, description)` properties.
pub fn schema(props: &[(&str, &str, &str)], required: &[&str]) -> Value {
    let mut p = Map::new();
    for (name, ty, description) in props {
        let mut prop = json!({"description": description});
        prop["type"] = match *ty {
            "string[]" => {
                prop["items"] = json!({"type": "string"});
                "array".into()
            }
            t => t.into(),
        };
        p.insert(name.to_string(), prop);
    }
    json!({
        "type": "object",
        "properties": p,
        "required": required,
        "additionalProperties": false,
        "$schema": "http://json-schema.org/draft-07/schema#",
    })
}

/// A string argument; wrong types are -32602 with the argument's name.
pub fn arg_str(
    args: &Map<String, Value>,
    name: &str,
    required: bool,
) -> Result<Option<String>, RpcError> {
    match args.get(name) {
        None | Some(Value::Null) if !required => Ok(None),
        None | Some(Value::Null) => Err(RpcError::invalid_params(format!(
            "missing required argument \"{name}\""
        ))),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(RpcError::invalid_params(format!(
            "argument \"{name}\" must be a string"
        ))),
    }
}

/// A tool result made of text items.
pub fn tool_texts(items: &[&str]) -> Value {
    json!({"content": items.iter().map(|t| json!({"type": "text", "text": t})).collect::<Vec<_>>()})
}

/// A tool result carrying one JSON document as text.
pub fn tool_json(v: &Value) -> Value {
    tool_texts(&[&v.to_string()])
}

/// A failure while running a tool: a result with isError, not a JSON-RPC error (PROTOCOL 3).
pub fn tool_error(message: &str) -> Value {
    json!({"content": [{"type": "text", "text": message}], "isError": true})
}

pub fn list(app: &Arc<App>) -> Vec<Value> {
    TOOLS
        .iter()
        .filter(|t| (t.listed)(app))
        .map(|t| json!({"name": t.name, "description": t.description, "inputSchema": (t.schema)()}))
        .collect()
}

pub fn call(call: &Call, mut params: Value) -> Reply {
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
        Some(t) => (t.run)(call, &args),
        None => Reply::Now(Err(RpcError::invalid_params(format!(
            "Unknown tool: {name}"
        )))),
    }
}

/// Methods that are not MCP: seed 002's direct calls, else "Method not found".
pub fn direct_method(call: &Call, method: &str, params: Value) -> Reply {
    let Some(f) = crate::context::seed_method(method) else {
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
    Reply::Now(f(call.app, &args))
}

#[cfg(test)]
mod tests {
    #[test]
    fn tools_are_sorted_by_name_and_unique() {
        let names: Vec<&str> = super::TOOLS.iter().map(|t| t.name).collect();
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(names, sorted);
    }
}
