//! The commands: `serve` runs a server; the client commands talk to one through its control
//! socket; `lsp` is the language server an editor starts; `unit` writes systemd units.

pub mod client;
pub mod lsp;
pub mod serve;
pub mod unit;
