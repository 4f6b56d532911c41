//! The commands: `serve` runs a server; the client commands talk to one through its control
//! socket; `unit` writes systemd units.

pub mod client;
pub mod serve;
pub mod unit;
