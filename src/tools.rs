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
        name: "closeAllDiffTabs",
        description: "Close every pending diff opened through openDiff (each is answered as rejected).",
        schema: || schema(&[], &[]),
        listed: always,
        run: crate::diffs::close_all_diff_tabs,
    },
    Tool {
        name: "close_tab",
        description: "Close a tab by name; a pending diff of that name is settled as rejected.",
        schema: || schema(&[("tab_name", "string", "Name of the tab to close")], &["tab_name"]),
        listed: always,
        run: crate::diffs::close_tab,
    },
    Tool {
        name: "openDiff",
        description: "Open a diff for review and wait until the user accepts (FILE_SAVED with the final contents) or rejects it (DIFF_REJECTED). The server never writes the file.",
        schema: || {
            schema(
                &[
                    ("old_file_path", "string", "Path of the file as it is now"),
                    ("new_file_path", "string", "Path of the file after the edit"),
                    ("new_file_contents", "string", "The proposed contents of the file"),
                    ("tab_name", "string", "Name of the diff tab"),
                ],
                &["old_file_path", "new_file_path", "new_file_contents", "tab_name"],
            )
        },
        listed: always,
        run: crate::diffs::open_diff,
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
pub fn arg_str(args: &Map<String, Value>, name: &str, required: bool) -> Result<Option<String>, RpcError> {
    match args.get(name) {
        None | Some(Value::Null) if !required => Ok(None),
        None | Some(Value::Null) => Err(RpcError::invalid_params(format!(
            "missing required argument \"{name}\""
        ))),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(RpcError::invalid_params(format!("argument \"{name}\" must be a string"))),
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

pub fn call(call: &Call, params: Value) -> Reply {
    let Some(name) = params["name"].as_str() else {
        return Reply::Now(Err(RpcError::invalid_params(
            "tools/call needs a \"name\" string",
        )));
    };
    let args = match &params["arguments"] {
        Value::Object(m) => m.clone(),
        Value::Null => Map::new(),
        _ => {
            return Reply::Now(Err(RpcError::invalid_params(
                "tools/call \"arguments\" must be an object",
            )));
        }
    };
    match TOOLS.iter().find(|t| t.name == name) {
        Some(t) => (t.run)(call, &args),
        None => Reply::Now(Err(RpcError::invalid_params(format!("Unknown tool: {name}")))),
    }
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

/// Methods that are not MCP: seed 002's direct calls, else "Method not found".
pub fn direct_method(_call: &Call, _method: &str, _params: Value) -> Reply {
    Reply::Now(Err(RpcError::new(ErrorCode::MethodNotFound, "Method not found")))
}
