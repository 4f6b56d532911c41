//! ccide: a headless IDE for Claude Code. See README.md, man/ccide.1 and man/ccide-protocol.7.
//!
//! # Architecture
//!
//! Layers, lowest first; a module imports only from layers below its own, and the files of a
//! module only from files below their own (`LAYERS` in `layers_tests.rs` lists both, and the
//! test there reads every source file and fails on an import that runs up):
//!
//! 1. Leaves: `text` (durations, text from outside made visible, hashing), `pattern`, `json`
//!    (objects built small); then `log` and `textdiff`; then `review` (hunks as the unit of
//!    review: decisions per hunk composed into the answer); then `sys` (every libc call and
//!    `unsafe` block).
//! 2. Services: `files` (atomic writes, paths, stamps, `file://` URIs), `proc` (child
//!    processes, process trees, threads and their queue), `workspaces` (the folders and the
//!    confinement rule), `lockfile` (discovery), `trust` (which programs a built-in may run,
//!    and the PATH its process gets).
//! 3. Protocols: `transport` (TCP, the upgrade, WebSocket frames), `rpc` (JSON-RPC messages,
//!    the per-call context and the shape of an MCP tool result, the connected clients and
//!    broadcast) and `lsp` (Content-Length framing, connections as queues, the requests
//!    pending each way, positions in UTF-8/16/32).
//! 4. `langservers` (the language servers ccide keeps warm, as their LSP client: the built-ins
//!    as one table of profiles, which serves a file, their processes, when a result is
//!    final), then `diagnostics` (the store, the
//!    checkers, the output parsers, language servers' results read).
//! 5. `state`: the shared state (editor model, diffs, exec, events) over the workspaces, the
//!    language servers and the diagnostics (which are handed the language servers), and the
//!    diagnostics' way out to the clients (`state::diagnostics`).
//! 6. `tools`: the MCP tools, plain functions over `State`.
//! 7. `session` (the MCP lifecycle, greeting, keepalive) and `control` (the control socket:
//!    every command once as a `Request`, one handler for every connection, the LSP clients
//!    multiplexed onto the language servers (`lsp_mux`), the client).
//! 8. `cli` (flags, parser, help) and `commands` (serve, the client commands, `ccide lsp`
//!    (`lsp_editor`), lsp-bridge, hook, plugin, unit).
//!
//! "lsp" alone names the protocol layer; the language servers ccide runs are `langservers`
//! (and so are fields that hold them), the server an editor starts is `lsp_editor`, and
//! serve's LSP connections for its clients are `lsp_mux`.
//! 9. `main`: the table of commands.
//!
//! Invariants, each enforced by the layers or by a test:
//! - `transport` knows nothing of JSON-RPC; `rpc` and `lsp` know nothing of the tools, the
//!   editor model or the language servers ccide runs; `langservers` knows nothing of the
//!   diagnostics store (it hands final results, as LSP items, to a sink).
//! - `state` never imports tools, the session or the control socket; `diagnostics` never
//!   imports `state`, nor the connected clients: the store hands the files whose diagnostics
//!   changed to a sink, and `state` decides who hears of it and in what JSON.
//! - Only `sys` holds `unsafe` (denied everywhere else; `only_sys_holds_unsafe` checks it).
//! - ccide never writes a file the CLI will write (openDiff's target): the CLI does, after
//!   FILE_SAVED.

#![deny(unsafe_code)]

mod cli;
mod commands;
mod control;
mod diagnostics;
mod files;
mod json;
mod langservers;
mod lockfile;

mod log;
mod lsp;
mod pattern;
mod proc;
mod review;
mod rpc;
mod session;
mod state;
#[allow(unsafe_code)]
mod sys;
mod text;
mod textdiff;
mod tools;
mod transport;
mod trust;
mod workspaces;

use std::fmt::Write as _;

use cli::{
    Args, CONFIG_DIR, Command, EXIT_FAILURE, EXIT_OK, EXIT_USAGE, Fail, Flag, JSON, PORT, SESSION,
    flag,
};

pub const COMMANDS: &[Command] = &[
    commands::serve::COMMAND,
    Command {
        name: "diff",
        usage: "ccide diff [list | show [ID] | review [ID] | accept [ID] | reject [ID] | edit [ID] | path [ID]] [OPTIONS]",
        about: "Review the edits Claude Code proposes: list, show, review, accept, reject.",
        details: "Each proposed edit is a directory holding `original` and `proposed`. ID is the diff's\nnumber, its tab name, or the path of the file it changes; without ID the only pending diff.\n  list     the pending diffs (the default)\n  show     a unified diff of original against proposed, its hunks numbered (`@@ ... @@ hunk 2/5`),\n           through your pager on a terminal (GIT_PAGER, git's core.pager, PAGER, else less -FRX)\n  review   hunk by hunk with git add -p's keys (y n e s a d j k J K q ?); without ID every pending\n           diff, oldest first, then each new one as it comes\n  accept   answer FILE_SAVED with the current content of proposed (edit it first to change it);\n           with --hunks, only those hunks applied to the original\n  reject   answer DIFF_REJECTED\n  edit     open proposed in $VISUAL or $EDITOR (accepting stays a separate step)\n  path     print the diff's directory\nWith accept, reject or review, --why TEXT is told to Claude through ccide's plugin (its hooks).",
        flags: &[
            flag(
                "--hunks",
                Some("LIST"),
                None,
                "accept: keep only these hunks (numbers as show prints them, e.g. 1,3-4); the rest are dropped.",
            ),
            flag(
                "--why",
                Some("TEXT"),
                None,
                "accept, reject or review: the reason for what you turned down, told to Claude with the verdict.",
            ),
            PORT,
            CONFIG_DIR,
            JSON,
        ],
        run: commands::review::diff,
        passthrough: false,
    },
    Command {
        name: "review",
        usage: "ccide review [list | keep | undo] [OPTIONS]",
        about: "Review what Claude changed, after the fact: keep or undo each hunk, with a reason.",
        details: "The hooks of ccide's plugin record each file Claude's Edit, Write, MultiEdit,\nNotebookEdit and Bash change, before and after, per session and turn. Without an action:\nthe hunks one by one with git add -p's keys (y keep, n undo, a, d, j, k, J, K, s split,\ne edit: your lines replace Claude's, q, ?), each decision applied at once. list numbers\nthe hunks; keep and undo act on --hunks (default: all). Undo writes the reverse of Claude's hunk to the file as it is now, and is refused\nwhen those lines changed since; keep restores an undone hunk. Claude is told what was\nundone, and why, at its next request. By default every session's latest turn.",
        flags: &[
            flag("--turn", Some("N"), None, "The changes of turn N instead of the latest."),
            flag("--session", Some("ID"), None, "Only this session's changes (its id or the start of it)."),
            flag("--all", None, None, "Every change recorded."),
            flag("--hunks", Some("LIST"), None, "keep or undo: only these hunks (numbers as list prints them, e.g. 1,3-4)."),
            flag("--why", Some("TEXT"), None, "undo: the reason, told to Claude with the undo."),
            PORT,
            CONFIG_DIR,
            JSON,
        ],
        run: commands::review::changes,
        passthrough: false,
    },
    Command {
        name: "select",
        usage: "ccide select FILE[:LINE[:COL]][-LINE[:COL]] [OPTIONS]",
        about: "Set the selection and send it to Claude Code (selection_changed).",
        details: "Lines and columns count from 1; a range includes its end column. FILE:LINE selects the\nwhole line, FILE:LINE:COL is a cursor, FILE alone says \"this file is open\". The file's tab is\nopened and activated. The text comes from the file, or from standard input with --stdin.",
        flags: &[
            flag(
                "--stdin",
                None,
                None,
                "Take the selected text from standard input (for editors that pipe selections).",
            ),
            SESSION,
            PORT,
            CONFIG_DIR,
        ],
        run: commands::client::select,
        passthrough: false,
    },
    Command {
        name: "mention",
        usage: "ccide mention FILE[:START[-END]] [OPTIONS]",
        about: "Insert @FILE#LSTART-END into Claude Code's prompt (at_mentioned).",
        details: "FILE may be a directory (then without lines). With no client connected the mention waits\nfor the next one (see serve --mention-max-age).",
        flags: &[SESSION, PORT, CONFIG_DIR],
        run: commands::client::mention,
        passthrough: false,
    },
    Command {
        name: "open",
        usage: "ccide open FILE... [OPTIONS]",
        about: "Open editor tabs (the last one becomes active).",
        details: "",
        flags: &[PORT, CONFIG_DIR],
        run: commands::client::open,
        passthrough: false,
    },
    Command {
        name: "close",
        usage: "ccide close FILE... [OPTIONS]",
        about: "Close editor tabs, keeping unsaved content unless --discard.",
        details: "",
        flags: &[
            flag(
                "--discard",
                None,
                None,
                "Also forget the files' unsaved content.",
            ),
            PORT,
            CONFIG_DIR,
        ],
        run: commands::client::close,
        passthrough: false,
    },
    Command {
        name: "buffer",
        usage: "ccide buffer [--drop] [--allow-empty] FILE [OPTIONS]",
        about: "Store unsaved content for FILE, read from standard input (an editor pushes its buffer).",
        details: "Claude Code then sees FILE as dirty (checkDocumentDirty) and saveDocument writes it.\nAn empty standard input is refused (exit 2) unless --allow-empty: saveDocument would empty FILE.",
        flags: &[
            flag(
                "--drop",
                None,
                None,
                "Forget FILE's unsaved content instead.",
            ),
            flag(
                "--allow-empty",
                None,
                None,
                "Store an empty standard input as FILE's unsaved content (refused otherwise).",
            ),
            PORT,
            CONFIG_DIR,
        ],
        run: commands::client::buffer,
        passthrough: false,
    },
    Command {
        name: "status",
        usage: "ccide status [--all] [OPTIONS]",
        about: "Show the server, its clients, open tabs, the selection and pending diffs.",
        details: "With --all: every lock file in the config directory (ccide's and other IDEs'), live or dead.",
        flags: &[
            flag(
                "--all",
                None,
                None,
                "List every lock file with its liveness instead.",
            ),
            JSON,
            PORT,
            CONFIG_DIR,
        ],
        run: commands::client::status,
        passthrough: false,
    },
    Command {
        name: "claude",
        usage: "ccide claude [ARGS...] [-- CLAUDE-ARGS...]",
        about: "Run Claude Code connected to this directory's server (serving one if none runs).",
        details: "Runs `claude` (or $CCIDE_CLAUDE) with ARGS in the current directory, with\nCLAUDE_CODE_SSE_PORT set to the server's port, CLAUDE_CODE_AUTO_CONNECT_IDE=1 unless set,\nENABLE_IDE_INTEGRATION=true and 127.0.0.1,localhost,::1 added to no_proxy and NO_PROXY. Without a running server for the\ndirectory, one is served in this process until Claude Code exits. Claude Code 2.0.74 or\nlater gets ccide's plugin (--plugin-dir). SIGTERM and SIGHUP are forwarded; the exit\nstatus is Claude Code's. Arguments after `--` go to Claude Code untouched, so\n`ccide claude -- --help` shows Claude Code's own help. Each
diff its Claude Code proposes is announced on the terminal (OSC 9, or OSC 777 for foot and
rxvt-unicode; through tmux's passthrough and display-message inside tmux).",
        flags: &[],
        run: commands::client::claude,
        passthrough: true,
    },
    Command {
        name: "diagnostics",
        usage: "ccide diagnostics [list | import [FILE|-] | clear [FILE]] [OPTIONS]",
        about: "Store, list or clear the diagnostics that getDiagnostics answers with.",
        details: "import reads diagnostics produced elsewhere (a CI job, a watcher, an editor's linter) from\nFILE or standard input and replaces the stored diagnostics of every file it names. Formats:\nprotocol (the getDiagnostics answer), sarif (SARIF 2.1.0), cargo (--message-format=json),\ncompiler (path:line:col: severity: message [code]), ruff (concise or JSON); auto detects\nthem. Relative paths are resolved against the current directory; files outside the workspace\nare ignored. Columns are converted to UTF-16 code units, as getDiagnostics counts them, against\nthe files as they are. Clients get diagnostics_changed for every file whose diagnostics changed.",
        flags: &[
            flag(
                "--format",
                Some("FORMAT"),
                None,
                "With import: auto, protocol, sarif, cargo, compiler or ruff.",
            )
            .default("auto"),
            JSON,
            PORT,
            CONFIG_DIR,
        ],
        run: commands::client::diagnostics,
        passthrough: false,
    },
    Command {
        name: "exec",
        usage: "ccide exec [list | approve [ID] | deny [ID]] [OPTIONS]",
        about: "List, approve or deny executeCode requests waiting for you (serve --exec ask).",
        details: "Without ID, approve and deny act on the only waiting request.",
        flags: &[JSON, PORT, CONFIG_DIR],
        run: commands::client::exec,
        passthrough: false,
    },
    Command {
        name: "workspace",
        usage: "ccide workspace [list | add DIR | remove DIR] [OPTIONS]",
        about: "List, add or remove the workspace folders of the running server.",
        details: "The lock file is rewritten with the same port and token (systemd is told RELOADING=1,\nthen READY=1), and the change persists in the state directory across restarts.",
        flags: &[PORT, CONFIG_DIR],
        run: commands::client::workspace,
        passthrough: false,
    },
    Command {
        name: "unit",
        usage: "ccide unit [--workspace DIR]... [--install]",
        about: "Print (or install) a systemd user unit that runs ccide serve.",
        details: "Without --workspace: the template ccide@.service, one instance per workspace named by\n`systemd-escape --path DIR`. With --workspace: a plain unit serving exactly those folders.\nBoth use Type=notify, Restart=on-failure, WatchdogSec=, StateDirectory= and sandboxing.",
        flags: &[
            Flag {
                name: "--workspace",
                value: Some("DIR"),
                env: None,
                repeat: true,
                help: "Make a plain unit for these folders instead of the template (repeatable).",
                default: None,
            },
            flag(
                "--install",
                None,
                None,
                "Write the unit to ~/.config/systemd/user/ and print the systemctl commands.",
            ),
        ],
        run: commands::unit::command,
        passthrough: false,
    },
    Command {
        name: "gc",
        usage: "ccide gc [--dry-run] [OPTIONS]",
        about: "Remove ccide lock files whose server is proven gone, and their leftovers.",
        details: "Never touches another IDE's lock file, nor a live server's. The state kept for a\nrestart (port, token, editor model, diagnostics) stays.",
        flags: &[
            flag("--dry-run", None, None, "Only say what would be removed."),
            CONFIG_DIR,
        ],
        run: commands::client::gc,
        passthrough: false,
    },
    Command {
        name: "lsp",
        usage: "ccide lsp [OPTIONS]",
        about: "Language server over stdio: the editor's own LSP client drives tabs, buffers, selection, diff review and review of what Claude changed.",
        details: "Start it from the editor for the file types you choose. Each file goes to the nearest\nserver whose workspace holds it; a file no server holds makes it serve the editor's\nworkspace folder in this process (never beside a server of a folder inside or above it),\nuntil the editor exits or the project's own server runs, which it hands the tabs to.\ndidOpen/didClose open and close tabs, didChange keeps the unsaved content, didSave drops\nit; when the editor exits its tabs and buffers go.\nCode actions (and workspace/executeCommand): ccide.select \"Claude: send selection\",\nccide.mention \"Claude: @-mention\", and for a pending diff ccide.show, ccide.accept,\nccide.acceptEdited, ccide.reject. Arguments: [{\"uri\": ..., \"range\": ...}], both optional.\nOn the file, its hunks: ccide.keepHunk, ccide.dropHunk (\"hunk\": N, else the range's hunk),\nccide.acceptKept (undecided hunks dropped), ccide.rejectAll; \"why\": a reason. Hunks are\nshown as hint diagnostics, as are the latest turn's changes (ccide review):\nccide.keepChange, ccide.undoChange (with \"change\": ID, \"hunk\": N).\nThe range of every code action request becomes the selection 100 ms after the last one\n(editors that ask as the cursor moves), unless --no-follow. initializationOptions:\n{\"followSelection\": false, \"diagnostics\": true, \"navigation\": true}. It writes no\nfile (the server writes an undone hunk).",
        flags: &[
            flag(
                "--no-follow",
                None,
                None,
                "Send the selection only when asked (code action), not at every code action request.",
            ),
            flag(
                "--diagnostics",
                None,
                None,
                "Publish the diagnostics ccide holds for open files (what Claude Code is told).",
            ),
            flag(
                "--navigation",
                None,
                None,
                "Answer hover, definition, references, symbols and call hierarchy from the language servers ccide serve keeps warm (off: the editor's own servers would answer twice).",
            ),
            flag(
                "--port",
                Some("N"),
                None,
                "Use the server on port N for every file, instead of the server of each file's workspace.",
            ),
            Flag {
                name: "--path-map",
                value: Some("HOST=REMOTE"),
                env: None,
                repeat: true,
                help: "The editor runs elsewhere (docker exec, ssh): its folder HOST is REMOTE here, for every path and URI both ways; the longest match wins, and a file outside every mapping is refused.",
                default: None,
            },
            CONFIG_DIR,
        ],
        run: commands::lsp_editor::run,
        passthrough: false,
    },
    commands::bridge::COMMAND,
    commands::hook::COMMAND,
    commands::plugin::COMMAND,
    Command {
        name: "events",
        usage: "ccide events [OPTIONS]",
        about: "Stream one JSON line per event (diffs opened and settled, clients) until interrupted.",
        details: "Events: subscribed (first, once the stream is live), diff_opened, diff_settled (how:\naccepted, rejected, closed by the client, abandoned), exec_requested (id, client, code),\nexec_settled (how: approved, denied, timed out, abandoned), client_connected,\nclient_disconnected. Each line carries \"event\" and \"time\".",
        flags: &[PORT, CONFIG_DIR],
        run: commands::client::events,
        passthrough: false,
    },
    Command {
        name: "help",
        usage: "ccide help [COMMAND]",
        about: "Show the options of a command (same as ccide COMMAND --help).",
        details: "Without COMMAND, the list of commands (same as ccide --help).",
        flags: &[],
        run: help,
        passthrough: false,
    },
];

pub fn find(name: &str) -> Option<&'static Command> {
    COMMANDS.iter().find(|c| c.name == name)
}

/// The top help: commands and options in two columns, the second aligned across both lists.
pub fn overview() -> String {
    const OPTIONS: [(&str, &str); 2] = [
        ("-h, --help", "Show this text."),
        ("-V, --version", "Show the version."),
    ];
    let names = COMMANDS.iter().map(|c| c.name).chain(OPTIONS.map(|o| o.0));
    let width = names.map(str::len).max().unwrap_or(0) + 2;
    let mut s = format!(
        "ccide {}: a headless IDE for Claude Code.\n\nUsage: ccide COMMAND [OPTIONS]\n\nCommands:\n",
        env!("CARGO_PKG_VERSION")
    );
    for c in COMMANDS {
        let _ = writeln!(s, "  {:<width$}{}", c.name, c.about);
    }
    s.push_str("\nOptions:\n");
    for (name, about) in OPTIONS {
        let _ = writeln!(s, "  {name:<width$}{about}");
    }
    s.push_str("\nSee ccide(1) for files, environment and exit statuses.\n");
    s
}

/// `ccide help [COMMAND]`.
fn help(args: &Args) -> cli::Outcome {
    let text = match args.operands.as_slice() {
        [] => overview(),
        [name] => cli::command_help(find(name).ok_or_else(|| Fail::Usage(unknown(name)))?),
        [_, extra, ..] => return Err(Fail::Usage(format!("unexpected argument '{extra}'"))),
    };
    print!("{text}");
    Ok(EXIT_OK)
}

fn main() {
    let mut argv = Vec::new();
    for a in std::env::args_os().skip(1) {
        match a.into_string() {
            Ok(s) => argv.push(s),
            Err(a) => {
                eprintln!(
                    "ccide: the argument {a:?} is not valid UTF-8 (ccide takes UTF-8 file names)"
                );
                std::process::exit(EXIT_USAGE);
            }
        }
    }
    std::process::exit(run(&argv));
}

fn run(argv: &[String]) -> i32 {
    let Some(first) = argv.first() else {
        eprint!("{}", overview());
        return EXIT_USAGE;
    };
    let out = |s: String| {
        print!("{s}");
        EXIT_OK
    };
    match first.as_str() {
        "-h" | "--help" => return out(overview()),
        "-V" | "--version" => return out(cli::version()),
        // An option before any command: one of the two, or a mistake; never a command's name.
        _ if first.starts_with('-') && first != "-" => {
            let guess = option_guess(first);
            let after = if guess.is_empty() {
                " (a command's options go after it: ccide COMMAND --help)"
            } else {
                ""
            };
            return usage(&format!("unknown option '{first}'{guess}{after}"));
        }
        _ => {}
    }
    let Some(command) = find(first) else {
        return usage(&unknown(first));
    };
    let rest = &argv[1..];
    if rest
        .iter()
        .take_while(|a| *a != "--")
        .any(|a| a == "-h" || a == "--help")
    {
        return out(cli::command_help(command));
    }
    // What prints a list ends quietly when its reader goes (`| head`); what serves or holds
    // connections open keeps hearing EPIPE as an error it handles.
    let printing = [
        "diff",
        "review",
        "status",
        "diagnostics",
        "events",
        "workspace",
        "gc",
        "select",
        "mention",
        "open",
        "close",
        "buffer",
        "exec",
    ];
    if printing.contains(&command.name) {
        sys::end_on_broken_pipe();
    }
    let result = Args::parse(command, rest).and_then(|args| (command.run)(&args));
    match result {
        Ok(code) => code,
        Err(Fail::Usage(msg)) => usage(&msg),
        Err(Fail::Failed(msg)) => {
            eprintln!("ccide: {msg}");
            EXIT_FAILURE
        }
    }
}

fn unknown(name: &str) -> String {
    let mut names = COMMANDS.iter().map(|c| c.name);
    format!(
        "unknown command '{name}'{}",
        cli::did_you_mean(name, &mut names)
    )
}

/// ", did you mean '--version'?" for an option mistyped before any command: `-v` (the
/// version in many programs) or what is close to `--help` or `--version`.
fn option_guess(typed: &str) -> String {
    match typed {
        "-v" => ", did you mean '-V' (--version)?".into(),
        "-H" => ", did you mean '-h' (--help)?".into(),
        _ => cli::did_you_mean(typed, &mut ["--help", "--version"].into_iter()),
    }
}

fn usage(msg: &str) -> i32 {
    eprintln!("ccide: {msg}\nRun 'ccide --help' for the commands and their options.");
    EXIT_USAGE
}

#[cfg(test)]
mod layers_tests;

#[cfg(test)]
mod tests {
    use super::commands;
    use std::path::Path;

    /// The README's table of serve options states each default the flag table defines.
    #[test]
    fn the_readme_states_the_defaults_the_flags_define() {
        let readme = include_str!("../README.md");
        for f in commands::serve::FLAGS {
            let Some(d) = f.default else { continue };
            let row = readme
                .lines()
                .find(|l| l.starts_with(&format!("| `{}", f.name)))
                .unwrap_or_else(|| panic!("README has no row for {}", f.name));
            // `\|` is a bar inside a cell.
            let row = row.replace("\\|", "/");
            let cell = row.split('|').nth(3).unwrap_or("").trim();
            assert!(
                cell.starts_with(d) || cell.starts_with(&format!("`{d}`")),
                "README says {cell:?} for {}, the flag says {d}",
                f.name
            );
        }
    }

    /// Each command's flags are described in its own section of ccide(1) (a `.TP` entry
    /// under `.SS COMMAND`), stating the default the flag table defines.
    #[test]
    fn the_man_page_describes_each_flag_in_its_commands_section_with_its_default() {
        let man = include_str!("../man/ccide.1");
        for c in super::COMMANDS {
            let section = man_section(man, c.name)
                .unwrap_or_else(|| panic!("ccide(1) has no section .SS {}", c.name));
            for f in c.flags {
                let entry = man_entry(&section, f.name).unwrap_or_else(|| {
                    panic!(
                        "ccide(1) does not describe {} in the section of {}",
                        f.name, c.name
                    )
                });
                let Some(d) = f.default else { continue };
                let text = deroff(entry);
                assert!(
                    text.contains(&format!("Default: {d}"))
                        || text.contains(&format!("{d} (the default)")),
                    "ccide(1) does not say {} of {} defaults to {d}: {text:?}",
                    f.name,
                    c.name
                );
            }
        }
    }

    /// ccide(1)'s SYNOPSIS shows every command of the table with its usage line, as `--help`
    /// prints it.
    #[test]
    fn the_man_pages_synopsis_shows_every_commands_usage() {
        let man = include_str!("../man/ccide.1");
        let synopsis: Vec<String> = man
            .lines()
            .skip_while(|l| *l != ".SH SYNOPSIS")
            .take_while(|l| *l != ".SH DESCRIPTION")
            .map(|l| {
                ["\\fB", "\\fI", "\\fR"]
                    .iter()
                    .fold(l.replace("\\-", "-"), |l, font| l.replace(font, ""))
            })
            .collect();
        let missing: Vec<&str> = super::COMMANDS
            .iter()
            .map(|c| c.usage)
            .filter(|u| !synopsis.iter().any(|l| l == u))
            .collect();
        assert!(
            missing.is_empty(),
            "ccide(1)'s SYNOPSIS has no line {missing:#?}"
        );
    }

    /// README's Commands section gives each command's usage line (without `[OPTIONS]`, bars
    /// in a cell escaped) and names each of its flags; serve's flags are in the table of
    /// Configuration, one row each.
    #[test]
    fn the_readmes_commands_section_shows_every_usage_and_flag() {
        let readme = include_str!("../README.md");
        let section = |title: &str| {
            readme
                .split(&format!("\n## {title}\n"))
                .nth(1)
                .and_then(|rest| rest.split("\n## ").next())
                .unwrap_or_else(|| panic!("README has no section {title}"))
        };
        let commands = section("Commands");
        let configuration = section("Configuration");
        // Bars unescaped and without spaces around them, as a cell and `--help` write them.
        let squeeze = |s: &str| s.replace("\\|", "|").replace(" | ", "|");
        let rows: Vec<String> = commands
            .lines()
            .filter_map(|l| l.strip_prefix("| `"))
            .filter_map(|l| l.split_once("` |"))
            .map(|(usage, _)| squeeze(usage))
            .collect();
        let mut missing = Vec::new();
        for c in super::COMMANDS {
            let usage = squeeze(c.usage.trim_end_matches(" [OPTIONS]"));
            if !rows
                .iter()
                .any(|r| *r == usage || r.starts_with(&format!("{usage} [")))
            {
                missing.push(format!("a row for {usage:?}"));
            }
            for f in c.flags {
                let named = if c.name == "serve" {
                    configuration.contains(&format!("\n| `{}", f.name))
                } else {
                    names_flag(commands, f.name)
                };
                if !named {
                    missing.push(format!("{} of {}", f.name, c.name));
                }
            }
        }
        assert!(
            missing.is_empty(),
            "README's Commands section lacks {missing:#?}"
        );
    }

    /// The README installs the man pages where man-db finds them without MANPATH: in
    /// `../share/man` of `~/.cargo/bin`, the directory on PATH that `cargo install` puts
    /// ccide in (`~/.local/share/man` is on no default manpath).
    #[test]
    fn the_readme_installs_the_man_pages_where_man_finds_them() {
        let readme = include_str!("../README.md");
        for page in ["ccide.1", "ccide-protocol.7"] {
            let section = &page[page.len() - 1..];
            let step =
                format!("`install -Dm644 man/{page} ~/.cargo/share/man/man{section}/{page}`");
            assert!(readme.contains(&step), "README does not say {step}");
        }
        assert!(
            !readme.contains(".local/share/man"),
            "README still names ~/.local/share/man, which man does not search"
        );
    }

    /// The README's "Requires Rust X or later" is Cargo.toml's rust-version, which cargo
    /// enforces and clippy checks the code against.
    #[test]
    fn the_readme_requires_the_rust_version_cargo_toml_declares() {
        let manifest = include_str!("../Cargo.toml");
        let declared = manifest
            .lines()
            .find_map(|l| l.strip_prefix("rust-version = "))
            .expect("Cargo.toml declares rust-version")
            .trim_matches('"');
        let readme = include_str!("../README.md");
        assert!(
            readme.contains(&format!("Requires Rust {declared} or later.")),
            "README does not say Requires Rust {declared} or later."
        );
    }

    /// The README's Install section says where the `claude` CLI comes from, before the Quick
    /// start runs it.
    #[test]
    fn the_readme_says_how_to_get_the_claude_cli() {
        let readme = include_str!("../README.md");
        let install = readme
            .split("\n## Install\n")
            .nth(1)
            .and_then(|rest| rest.split("\n## ").next())
            .expect("README has an Install section");
        for how in [
            "`npm install -g @anthropic-ai/claude-code",
            "`curl -fsSL https://claude.ai/install.sh |",
        ] {
            assert!(install.contains(how), "Install does not say {how}");
        }
    }

    /// Whether `text` names `flag` as a word of its own (`--json` in `--json`, `[--json]` or
    /// `--json=`, not in `--json-lines`).
    fn names_flag(text: &str, flag: &str) -> bool {
        let part = |c: char| c.is_alphanumeric() || c == '-';
        text.match_indices(flag)
            .any(|(i, _)| !text[..i].ends_with(part) && !text[i + flag.len()..].starts_with(part))
    }

    /// The lines of `.SS name` up to the next section.
    fn man_section<'a>(man: &'a str, name: &str) -> Option<Vec<&'a str>> {
        let mut lines = man.lines();
        lines.find(|l| *l == format!(".SS {name}") || *l == format!(".SS \"{name}\""))?;
        Some(
            lines
                .take_while(|l| !l.starts_with(".SS") && !l.starts_with(".SH"))
                .collect(),
        )
    }

    /// The `.TP` entry of `flag` (`.B \-\-flag` or `.BI \-\-flag " VALUE"`), up to the next
    /// paragraph.
    fn man_entry<'a>(section: &[&'a str], flag: &str) -> Option<Vec<&'a str>> {
        let name = flag.replace('-', "\\-");
        let at = section.windows(2).position(|w| {
            let mut words = w[1].split_whitespace();
            w[0] == ".TP"
                && matches!(words.next(), Some(".B" | ".BI"))
                && words.next().map(|w| w.trim_matches('"')) == Some(name.as_str())
        })? + 1;
        let rest = &section[at + 1..];
        let end = rest
            .iter()
            .position(|l| [".TP", ".PP", ".RS"].iter().any(|m| l.starts_with(m)))
            .unwrap_or(rest.len());
        Some(section[at..at + 1 + end].to_vec())
    }

    /// Roff text as it reads: font macros' words kept (alternating ones joined, as they
    /// render), escapes for dashes and spaces resolved, whitespace collapsed.
    fn deroff(lines: Vec<&str>) -> String {
        let mut out = String::new();
        for l in lines {
            let (joined, args) = match l.split_once(' ') {
                Some((m, args)) if m.len() == 3 && m.starts_with('.') => (true, args),
                Some((".B" | ".I", args)) => (false, args),
                _ if l.starts_with('.') => continue,
                _ => (false, l),
            };
            let words = args.split('"').enumerate().flat_map(|(i, part)| {
                // Inside quotes (odd parts) a phrase is one argument.
                if i % 2 == 1 {
                    vec![part]
                } else {
                    part.split_whitespace().collect()
                }
            });
            let words: Vec<&str> = words.filter(|w| !w.is_empty()).collect();
            out.push_str(&words.join(if joined { "" } else { " " }));
            out.push(' ');
        }
        let out = out.replace("\\-", "-").replace("\\~", " ");
        out.split_whitespace().collect::<Vec<_>>().join(" ")
    }

    fn sources(dir: &Path, out: &mut Vec<(String, String)>) {
        for e in std::fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                sources(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push((
                    p.display().to_string(),
                    std::fs::read_to_string(&p).unwrap(),
                ));
            }
        }
    }

    #[test]
    fn only_sys_holds_unsafe() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut files = Vec::new();
        sources(&src, &mut files);
        let word = ["un", "safe"].concat();
        for (path, text) in files {
            if path.ends_with("/sys.rs") || path.ends_with("/main.rs") {
                continue;
            }
            assert!(
                !text.contains(&format!("{word} {{")) && !text.contains(&format!("{word} fn")),
                "{path} holds {word} code"
            );
        }
    }
}
