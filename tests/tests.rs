//! The integration tests, one binary: each module drives the real `ccide` binary over real
//! sockets for one part of the behaviour, in the vocabulary of `util`.
//!
//! One binary links once and runs every test in one pool of threads. A new module is listed
//! here; a file in `tests/` that is not listed is not compiled (`autotests = false`).
//! `tests/bench.rs` is the one other target: an ignored benchmark, run as README.md says.

mod util;
mod wire;

mod cgroups;
mod checkers;
mod concurrency;
mod confinement;
mod container;
mod context;
mod control;
mod data_safety;
mod diagnostics;
mod diff;
mod editors;
mod exec;
mod faults;
mod format;
mod handshake;
mod hostile_input;
mod lock_files;
mod lsp_editor;
mod lsp_mux;
mod lsp_servers;
mod outside_workspace;
mod overlap;
mod plugin;
mod protocol_man;
mod resource_bounds;
mod serve;
mod sessions;
mod state_dir;
mod systemd;
mod trust;
mod untrusted_text;
mod user_boundary;
