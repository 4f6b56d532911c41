//! TCP, the HTTP upgrade and WebSocket frames. Knows nothing of JSON-RPC or MCP: it hands
//! each text message to a per-connection callback and writes what others queue in an `Outbox`.
//!
//! One acceptor thread owns the listener and every connection that has not finished its
//! upgrade (non-blocking, in one `poll`), so stalled handshakes cost no thread and cannot
//! starve a real client: `handshake` (the upgrade request's checks and the 101). Each upgraded
//! connection then gets a thread of its own that waits in `poll` on its socket and on a
//! wake-up pipe, so queued replies leave at once: `connection` (the loop and its `Outbox`).

mod connection;
mod handshake;

#[cfg(test)]
pub use connection::Ended;
pub use connection::{Event, Handler, Outbox};
pub use handshake::{Gate, OnOpen, Peer, run_acceptor};
