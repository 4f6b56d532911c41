//! The Language Server Protocol as ccide speaks it in every direction: to the language
//! servers it keeps warm, to editors through `ccide lsp`, and to the Claude Code CLI's own LSP
//! client. Like rust-analyzer's `lsp-server`, this layer owns the wire and the bookkeeping
//! (the JSON-RPC messages themselves are `rpc`'s, shared with MCP); the applications above it
//! own their loops:
//! - `framing`: Content-Length framing;
//! - `connection`: a connection as a pair of queues, over stdio, a child's pipes, or memory;
//! - `queue`: the requests pending in each direction;
//! - `text`: positions in UTF-8, UTF-16 or UTF-32 and a document that takes incremental
//!   changes (`file://` URIs are `files`').

pub mod connection;
pub mod framing;
pub mod queue;
pub mod text;
