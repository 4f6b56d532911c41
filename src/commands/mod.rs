//! The commands: `serve` runs a server; the client commands talk to one through its control
//! socket; `lsp_editor` (`ccide lsp`) is the language server an editor starts; `bridge` (`lsp-bridge`) is the one
//! Claude Code starts through ccide's plugin, which `plugin` makes and installs, and `hook` the
//! plugin's hooks it runs; `unit` writes systemd units; `review` is `ccide diff review`, hunk by
//! hunk on the terminal; `notify` tells the person a review waits (`ccide claude`'s terminal
//! notification, serve's `--on-review`).

pub mod bridge;
pub mod client;
pub mod hook;
pub mod lsp_editor;
pub mod notify;
pub mod plugin;
pub mod review;
pub mod serve;
pub mod unit;
