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

/// Every tool, sorted by name (so `tools/list` never depends on hash order).
const TOOLS: &[Tool] = &[];

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

/// Methods that are not MCP: seed 002's direct calls, else "Method not found".
pub fn direct_method(_call: &Call, _method: &str, _params: Value) -> Reply {
    Reply::Now(Err(RpcError::new(ErrorCode::MethodNotFound, "Method not found")))
}
