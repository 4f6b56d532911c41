//! The LSP front of the control socket: a connection that sent `lsp` (ccide-protocol(7) §9.2)
//! carries Content-Length framed LSP messages both ways from then on, one LSP client per
//! connection (a CLI session through `ccide lsp-bridge`).
//!
//! PLACEHOLDER until the multiplexer shares the warm language servers among these clients:
//! `initialize` is answered with no capabilities, `shutdown` with null, any other request
//! with -32601, notifications are dropped; the connection ends at `exit` or end of stream.

use std::io::{BufReader, Write};
use std::os::unix::net::UnixStream;
use std::sync::Arc;

use serde_json::Value;

use super::protocol::LspClient;
use crate::state::State;

const INITIALIZED: &str = r#""result":{"capabilities":{},"serverInfo":{"name":"ccide"}}"#;
const NOT_YET: &str = r#""error":{"code":-32601,"message":"ccide does not serve this method yet"}"#;

/// Serves one LSP client until it sends `exit` or its connection ends.
pub fn serve(
    _state: &Arc<State>,
    mut reader: BufReader<UnixStream>,
    mut writer: UnixStream,
    client: LspClient,
) {
    let who = format!(
        "{} (pid {})",
        crate::text::visible(client.client.as_deref().unwrap_or("an LSP client")),
        client.pid.unwrap_or_default()
    );
    crate::log::info!(
        "LSP client {who} connected for {} (extensions: {}; diagnostics {})",
        crate::text::visible(&client.root),
        crate::text::visible(&client.extensions.join(" ")),
        if client.diagnostics { "on" } else { "off" }
    );
    while let Ok(Some(body)) = crate::lsp::framing::read_framed(&mut reader) {
        let v: Value = serde_json::from_slice(&body).unwrap_or_default();
        let (id, reply) = match (v.get("id"), v["method"].as_str()) {
            (None, Some("exit")) => break,
            (Some(id), Some("initialize")) => (id, INITIALIZED),
            (Some(id), Some("shutdown")) => (id, r#""result":null"#),
            (Some(id), Some(_)) => (id, NOT_YET),
            // A notification, or a response (the placeholder asks nothing).
            _ => continue,
        };
        let body = format!(r#"{{"jsonrpc":"2.0","id":{id},{reply}}}"#);
        let framed = format!("Content-Length: {}\r\n\r\n{body}", body.len());
        if writer.write_all(framed.as_bytes()).is_err() {
            break;
        }
    }
    crate::log::info!("LSP client {who} disconnected");
}
