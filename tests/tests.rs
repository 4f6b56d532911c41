//! The integration tests, one binary: each module drives the real `ccide` binary over real
//! sockets for one part of the behaviour, in the vocabulary of `util`.
//!
//! One binary links once and runs every test in one pool of threads. A new module is listed
//! here, named for the behaviour it checks, with one line on what goes in it; a file in
//! `tests/` that is not listed is not compiled (`autotests = false`).
//! `tests/bench.rs` is the one other target: an ignored benchmark, run as README.md says.

// The vocabulary: sandboxes, the real binary, clients, the tools a test gives ccide (not PATH).
mod util;
// A WebSocket client written by hand, for what tungstenite refuses to send.
mod wire;

// `ccide lsp --path-map` across a boundary: every path both ways; neovim outside, `ccide lsp` in a
// container (mount and pid namespaces) or over a real sshd (those ignored: root, neovim, sshd).
mod across_boundaries;
// The memory cgroup of a server `ccide lsp-bridge` starts (ignored: needs a cgroup hierarchy).
mod cgroups;
// Diagnostics from checkers run in the background: freshness, budgets, timeouts, broadcasts.
mod checkers;
// Many clients at once, and a paused server: every answer once, healthy clients kept.
mod concurrency;
// A file swapped for a symlink out of the workspace is never read through it again.
mod confinement;
// The static build in an empty root file system (ignored: .ci/run builds it).
mod container;
// What Claude Code learns of the editor (select, mention, open, buffer...), the editor tools.
mod context;
// The control socket: one answer per request line, editor sessions going on after a refusal.
mod control;
// Nothing silently puts a file's bytes at risk (an empty buffer, a diff of non-UTF-8 text).
mod data_safety;
// getDiagnostics from the store, fed by `ccide diagnostics import`.
mod diagnostics;
// openDiff answered later, and what settles it: `ccide diff`, close_tab, a disconnect...
mod diff;
// Real editors configured as README.md says, driven as a person would (ignored: needs them).
mod editors;
// executeCode: off, ask (approved or denied with `ccide exec`), on.
mod exec;
// Hunks as the unit of review: `ccide diff accept --hunks`, `--why`, numbered `show` and its
// pager, and `ccide diff review` driven through a pseudo-terminal.
mod hunk_review;
// Faults lose no data: kill -9, failed writes, a full file system, a lock file unwritable.
mod faults;
// reformat_file: a formatter on a copy, the original replaced only when it succeeded.
mod format;
// The handshake and who gets in: stalled handshakes, 431 heads, the token, the log.
mod handshake;
// Hostile input never takes the server down: JSON-RPC corpus, frame violations, random bytes.
mod hostile_input;
// One server per state directory and its lock file: refused seconds, recovery, gc.
mod lock_files;
// `ccide lsp` over its stdio, with a real serve and a WebSocket client as Claude Code.
mod lsp_editor;
// LSP clients on serve's control socket (`ccide lsp-bridge`) sharing its language servers.
mod lsp_mux;
// Language servers as a diagnostics source: the fake server, and real ones (ignored).
mod lsp_servers;
// Nothing outside the workspace is read, listed or written, whatever path a tool is given.
mod outside_workspace;
// One server per folder: a serve of a folder above, below or equal to a running one's is refused.
mod overlap;
// ccide's plugin for Claude Code: `ccide lsp-bridge`, `ccide claude`, `ccide plugin install`.
mod plugin;
// man/ccide-protocol.7 renders, numbers its sections, and holds every section cited.
mod protocol_man;
// What a client or a checker costs stays bounded: the 16 MiB cap, threads, memory, children.
mod resource_bounds;
// How a person hears that a review waits: `ccide claude`'s terminal notice, `serve --on-review`.
mod review_notices;
// Sessions routed by their roots (roots/list, --session), git worktrees served as folders.
mod routing;
// `ccide serve`: lock file, restarts, handshake, MCP lifecycle, keepalive, its command line.
mod serve;
// Clients sharing diffs, notifications during setup, reviews of what the CLI writes, odd files.
mod sessions;
// The state directory deleted under a running server, or not writable.
mod state_dir;
// Under systemd: readiness, watchdog, reload, journald levels, folders changed at run time.
mod systemd;
// Review after the fact: the plugin's hooks record Claude's changes per turn; `ccide review`
// keeps or undoes hunks, and the model hears what was undone.
mod turn_review;
// The trust boundary: a workspace's own programs run only with --trust-workspace.
mod trust;
// Text from outside never forges a log record and reaches a terminal made visible.
mod untrusted_text;
// What another local user can reach (its root-only tests are ignored).
mod user_boundary;
// What the user says of Claude's edits reaches the model: `diff --why`, `verdicts`, `ccide hook`.
mod verdicts;
