//! `ccide lsp`: a language server over stdio that the editor starts for the file types the
//! user chooses. It finds (or, as a last resort, serves) the `ccide serve` of each file's
//! workspace and turns the editor's own LSP traffic into the editor model Claude Code sees:
//! didOpen and didClose are tabs, didChange is unsaved content, code action requests carry the
//! selection, and pending diffs and the latest turn's changes become hints and code actions. It
//! never writes a file (an undone hunk is written by the server); the editor
//! session it attaches on each server's control socket (ccide-protocol(7) §9.2 `attach`) makes
//! the server drop its tabs when it ends. With `--navigation`, the editor's navigation
//! requests are answered by the server's warm language servers (ccide-protocol(7) §11.8),
//! over an `lsp` connection per server.
//!
//! The parts: `dialogue` (the loop: `initialize`, dispatch, what is due), `docs` (the document
//! mirror), `proposals` (pending diffs as code actions), `changes` (what Claude changed in the
//! latest turn, as hints and code actions), `link` (which server a file belongs to, the
//! session, the stand-in), `quirks` (clients known to break LSP's rules) and `paths`
//! (`--path-map`: the editor's paths across a boundary, both ways, at `received` and `send`).
//! The loop runs over an `lsp::connection::Connection` and reaches servers through
//! `link::Servers`: stdio and sockets here, memory and the control handler on a test state in
//! `tests.rs`.

mod changes;
mod dialogue;
mod docs;
mod link;
mod paths;
mod proposals;
mod quirks;

use crate::cli::{Args, Fail, Outcome};
use crate::lsp::connection::Connection;

/// What may wait to be written to an editor that does not read, before messages to it fail.
const EDITOR_QUEUE: usize = 64 << 20;

/// Said on stderr when standard input is a terminal: a person typed `ccide lsp`, which
/// otherwise waits in silence for LSP messages. It goes on (whoever pastes LSP messages gets
/// answers); no editor starts a language server on a terminal, so an editor never sees this.
fn terminal_note(stdin_is_terminal: bool) -> Option<&'static str> {
    stdin_is_terminal.then_some(
        "ccide lsp speaks LSP on standard input and output and is meant to be started by an editor (see `ccide help lsp`); it now waits for LSP messages: Ctrl-C ends it",
    )
}

pub fn run(args: &Args) -> Outcome {
    if let Some(extra) = args.operands.first() {
        return Err(Fail::Usage(format!("unexpected argument '{extra}'")));
    }
    if let Some(note) = terminal_note(crate::sys::isatty(0)) {
        eprintln!("{note}");
    }
    // Before any thread: a termination signal then ends the loop, which stops a server served
    // in this process properly (its lock file removed).
    crate::sys::block_termination_signals();
    let options = dialogue::Options {
        port: args.parsed::<u16>("--port", "a port number from 1 to 65535")?,
        follow: !args.switch("--no-follow")?,
        diagnostics: args.switch("--diagnostics")?,
        navigation: args.switch("--navigation")?,
        map: paths::PathMap::parse(&args.values("--path-map")).map_err(Fail::Usage)?,
    };
    let servers = link::Sockets {
        config: crate::lockfile::config_dir(args.value("--config-dir").as_deref())?,
        served: Vec::new(),
    };
    let conn = Connection::stdio(EDITOR_QUEUE)
        .map_err(|e| Fail::Failed(format!("cannot start reading the editor: {e}")))?;
    let front = dialogue::Dialogue::new(conn.sender.clone(), Box::new(servers), options);
    let inbox = front.inbox();
    crate::proc::spawn_thread("signals", move || {
        crate::sys::wait_termination_signal();
        inbox.push(dialogue::In::End);
    })
    .map_err(|e| Fail::Failed(format!("cannot start a thread: {e}")))?;
    Ok(front.run(conn))
}

#[cfg(test)]
mod tests;
