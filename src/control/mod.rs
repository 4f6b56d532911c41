//! The control socket: a Unix socket in the state directory through which ccide's own
//! commands (`ccide diff`, `select`, `status`, ...) and `ccide lsp` talk to the running `serve`
//! (ccide-protocol(7) §9). One JSON request per line, each answered by one JSON line that
//! echoes its id (`events` turns the connection into a stream instead). Only the owner may
//! connect: the socket lives in a 0700 directory and the peer's uid is checked.
//!
//! `protocol` defines every command once (`Request`); `server` reads the lines and `handler`
//! answers them, for plain connections and editor sessions (`editors`) alike; `client` is
//! what the commands use. This file only names the parts: none of them imports it.

pub mod client;
pub mod editors;
pub mod handler;
pub mod lsp_mux;
pub mod protocol;
pub mod server;

pub use client::{
    Control, FindError, connect_to_server, current_dir, find_server, refuse_overlaps,
};
pub use server::{bind, run};

#[cfg(test)]
mod tests;
