//! The command line: every command and flag is defined once here, with its documentation;
//! `--help`, `ccide help COMMAND` and the man page test all read this table.

use std::str::FromStr;

/// Exit statuses, documented in the man page.
pub const EXIT_OK: i32 = 0;
pub const EXIT_FAILURE: i32 = 1;
pub const EXIT_USAGE: i32 = 2;

pub enum Fail {
    /// Bad command line: exit 2.
    Usage(String),
    /// The command could not do its work: exit 1.
    Failed(String),
}

impl From<String> for Fail {
    fn from(s: String) -> Fail {
        Fail::Failed(s)
    }
}

pub type Outcome = Result<i32, Fail>;

pub struct Flag {
    pub name: &'static str,
    /// The value's placeholder (`DIR`), or None for a switch.
    pub value: Option<&'static str>,
    /// The environment variable read when the flag is absent (systemd units).
    pub env: Option<&'static str>,
    pub repeat: bool,
    pub help: &'static str,
}

pub struct Command {
    pub name: &'static str,
    pub usage: &'static str,
    pub about: &'static str,
    /// Longer text shown by `ccide help COMMAND`, after the usage line.
    pub details: &'static str,
    pub flags: &'static [Flag],
    pub run: fn(&Args) -> Outcome,
    /// Every argument goes to the program it runs (`ccide claude`), none is parsed here.
    pub passthrough: bool,
}

const fn flag(
    name: &'static str,
    value: Option<&'static str>,
    env: Option<&'static str>,
    help: &'static str,
) -> Flag {
    Flag {
        name,
        value,
        env,
        repeat: false,
        help,
    }
}

pub const SERVE_FLAGS: &[Flag] = &[
    Flag {
        name: "--workspace",
        value: Some("DIR"),
        env: Some("CCIDE_WORKSPACE"),
        repeat: true,
        help: "A workspace folder (repeatable; the environment variable takes a ':'-separated list). Default: the current directory.",
    },
    flag(
        "--ide-name",
        Some("NAME"),
        Some("CCIDE_IDE_NAME"),
        "Name shown by Claude Code in /ide and /status. Default: 'ccide (<first workspace's name>)'.",
    ),
    flag(
        "--port",
        Some("N"),
        Some("CCIDE_PORT"),
        "Port to listen on. Default: the port of the last run with the same state directory, else any free port.",
    ),
    flag(
        "--host",
        Some("ADDR"),
        Some("CCIDE_HOST"),
        "Address to listen on. Default: 127.0.0.1. Anything else needs --allow-remote.",
    ),
    flag(
        "--allow-remote",
        None,
        Some("CCIDE_ALLOW_REMOTE"),
        "Permit a --host that is not a loopback address (the token is then the only protection).",
    ),
    flag(
        "--config-dir",
        Some("DIR"),
        Some("CCIDE_CONFIG_DIR"),
        "Claude Code's config directory; the lock file goes in DIR/ide. Default: $CLAUDE_CONFIG_DIR, else ~/.claude.",
    ),
    flag(
        "--state-dir",
        Some("DIR"),
        Some("CCIDE_STATE_DIR"),
        "Where port, token, pending diffs and the control socket live. Default: $STATE_DIRECTORY, else $XDG_STATE_HOME/ccide/<id>, else ~/.local/state/ccide/<id>.",
    ),
    flag(
        "--ping-interval",
        Some("SECS"),
        Some("CCIDE_PING_INTERVAL"),
        "Seconds between keepalive pings sent to each client. Default: 5.",
    ),
    flag(
        "--ping-timeout",
        Some("SECS"),
        Some("CCIDE_PING_TIMEOUT"),
        "Seconds a client has to answer a ping before it is disconnected. Default: 3.",
    ),
    flag(
        "--max-connections",
        Some("N"),
        Some("CCIDE_MAX_CONNECTIONS"),
        "Open WebSocket connections allowed at once; more are answered 503. Default: 64.",
    ),
    flag(
        "--single-client",
        None,
        Some("CCIDE_SINGLE_CLIENT"),
        "A newly connected Claude Code replaces the previous one (closed with code 4001).",
    ),
    flag(
        "--mention-max-age",
        Some("SECS"),
        Some("CCIDE_MENTION_MAX_AGE"),
        "Mentions made while no client is connected are delivered to the next one if not older than this. Default: 30.",
    ),
    Flag {
        name: "--checker",
        value: Some("PATTERN=COMMAND"),
        env: None,
        repeat: true,
        help: "Run COMMAND to get diagnostics for files matching PATTERN (repeatable). '{file}' becomes the file's path; without it the command checks the whole project from the workspace root. A 'FORMAT:' prefix (sarif, cargo, compiler, ruff, protocol) forces the output format.",
    },
    flag(
        "--no-default-checkers",
        None,
        Some("CCIDE_NO_DEFAULT_CHECKERS"),
        "Do not use the built-in checkers (ruff or python3 -m py_compile, shellcheck or bash -n, cargo check).",
    ),
    flag(
        "--diagnostics-wait",
        Some("SECS"),
        Some("CCIDE_DIAGNOSTICS_WAIT"),
        "How long getDiagnostics without a uri waits for running checks of changed files. Default: 1.5.",
    ),
    flag(
        "--checker-timeout",
        Some("SECS"),
        Some("CCIDE_CHECKER_TIMEOUT"),
        "A checker running longer is killed. Default: 30.",
    ),
    Flag {
        name: "--formatter",
        value: Some("PATTERN=COMMAND"),
        env: None,
        repeat: true,
        help: "Formatter for reformat_file on files matching PATTERN (repeatable), same rules as --checker. It runs on a temporary copy ('{file}'), rewriting it or printing the result; without '{file}' the text goes through stdin and stdout. Killed after 30 s. Built-ins when on PATH: rustfmt, gofmt, ruff format or black, prettier, clang-format, shfmt.",
    },
    flag(
        "--exec",
        Some("off|ask|on"),
        Some("CCIDE_EXEC"),
        "executeCode: off (not listed, refused), ask (each call waits for `ccide exec approve`), on (runs). Default: off.",
    ),
    flag(
        "--exec-timeout",
        Some("SECS"),
        Some("CCIDE_EXEC_TIMEOUT"),
        "Per-call limit for executeCode; the Python kernel is restarted after it. Default: 60.",
    ),
    flag(
        "--exec-approval-timeout",
        Some("SECS"),
        Some("CCIDE_EXEC_APPROVAL_TIMEOUT"),
        "With --exec ask, a call not approved within this time is denied. Default: 300.",
    ),
    flag(
        "--log-level",
        Some("LEVEL"),
        Some("CCIDE_LOG_LEVEL"),
        "error, warn, info or debug. Default: info.",
    ),
];

const PORT: Flag = flag(
    "--port",
    Some("N"),
    None,
    "Talk to the server on port N instead of the one whose workspace holds the current directory.",
);
const CONFIG_DIR: Flag = flag(
    "--config-dir",
    Some("DIR"),
    Some("CCIDE_CONFIG_DIR"),
    "Claude Code's config directory holding ide/*.lock. Default: $CLAUDE_CONFIG_DIR, else ~/.claude.",
);
const JSON: Flag = flag("--json", None, None, "Print JSON for scripts.");

pub const COMMANDS: &[Command] = &[
    Command {
        name: "serve",
        usage: "ccide serve [OPTIONS]",
        about: "Run the IDE server for the workspace, announced to Claude Code by a lock file.",
        details: "Listens on 127.0.0.1, writes <config>/ide/<port>.lock and serves Claude Code's IDE\nprotocol (MCP over WebSocket) until SIGINT, SIGTERM or SIGHUP, then removes the lock file.\nStart `claude --ide` (or use /ide) in the workspace to connect.",
        flags: SERVE_FLAGS,
        run: crate::serve::run,
        passthrough: false,
    },
    Command {
        name: "diff",
        usage: "ccide diff [list | show [ID] | accept [ID] | reject [ID] | edit [ID] | path [ID]] [OPTIONS]",
        about: "Review the edits Claude Code proposes: list, show, accept, reject.",
        details: "Each proposed edit is a directory holding `original` and `proposed`. ID is the diff's\nnumber, its tab name, or the path of the file it changes; without ID the only pending diff.\n  list     the pending diffs (the default)\n  show     a unified diff of original against proposed\n  accept   answer FILE_SAVED with the current content of proposed (edit it first to change it)\n  reject   answer DIFF_REJECTED\n  edit     open proposed in $VISUAL or $EDITOR (accepting stays a separate step)\n  path     print the diff's directory",
        flags: &[PORT, CONFIG_DIR, JSON],
        run: crate::client::diff,
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
            PORT,
            CONFIG_DIR,
        ],
        run: crate::client::select,
        passthrough: false,
    },
    Command {
        name: "mention",
        usage: "ccide mention FILE[:START[-END]] [OPTIONS]",
        about: "Insert @FILE#LSTART-END into Claude Code's prompt (at_mentioned).",
        details: "FILE may be a directory (then without lines). With no client connected the mention waits\nfor the next one (see serve --mention-max-age).",
        flags: &[PORT, CONFIG_DIR],
        run: crate::client::mention,
        passthrough: false,
    },
    Command {
        name: "open",
        usage: "ccide open FILE... [OPTIONS]",
        about: "Open editor tabs (the last one becomes active).",
        details: "",
        flags: &[PORT, CONFIG_DIR],
        run: crate::client::open,
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
        run: crate::client::close,
        passthrough: false,
    },
    Command {
        name: "buffer",
        usage: "ccide buffer [--drop] FILE [OPTIONS]",
        about: "Store unsaved content for FILE, read from standard input (an editor pushes its buffer).",
        details: "Claude Code then sees FILE as dirty (checkDocumentDirty) and saveDocument writes it.",
        flags: &[
            flag(
                "--drop",
                None,
                None,
                "Forget FILE's unsaved content instead.",
            ),
            PORT,
            CONFIG_DIR,
        ],
        run: crate::client::buffer,
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
        run: crate::client::status,
        passthrough: false,
    },
    Command {
        name: "claude",
        usage: "ccide claude [ARGS...]",
        about: "Run Claude Code connected to this directory's server (serving one if none runs).",
        details: "Runs `claude` (or $CCIDE_CLAUDE) with ARGS in the current directory, with\nCLAUDE_CODE_SSE_PORT set to the server's port, ENABLE_IDE_INTEGRATION=true and\n127.0.0.1,localhost,::1 added to no_proxy and NO_PROXY. Without a running server for the\ndirectory, one is served in this process until Claude Code exits. SIGTERM and SIGHUP are\nforwarded; the exit status is Claude Code's.",
        flags: &[],
        run: crate::client::claude,
        passthrough: true,
    },
    Command {
        name: "diagnostics",
        usage: "ccide diagnostics [list | import [FILE|-] | clear [FILE]] [OPTIONS]",
        about: "Store, list or clear the diagnostics that getDiagnostics answers with.",
        details: "import reads diagnostics produced elsewhere (a CI job, a watcher, an editor's linter) from\nFILE or standard input and replaces the stored diagnostics of every file it names. Formats:\nprotocol (the getDiagnostics answer), sarif (SARIF 2.1.0), cargo (--message-format=json),\ncompiler (path:line:col: severity: message [code]), ruff (concise); auto detects them.\nRelative paths are resolved against the current directory; files outside the workspace are\nignored. Clients get diagnostics_changed for every file whose diagnostics changed.",
        flags: &[
            flag(
                "--format",
                Some("FORMAT"),
                None,
                "With import: auto, protocol, sarif, cargo, compiler or ruff. Default: auto.",
            ),
            JSON,
            PORT,
            CONFIG_DIR,
        ],
        run: crate::client::diagnostics,
        passthrough: false,
    },
    Command {
        name: "exec",
        usage: "ccide exec [list | approve [ID] | deny [ID]] [OPTIONS]",
        about: "List, approve or deny executeCode requests waiting for you (serve --exec ask).",
        details: "Without ID, approve and deny act on the only waiting request.",
        flags: &[JSON, PORT, CONFIG_DIR],
        run: crate::exec::command,
        passthrough: false,
    },
    Command {
        name: "workspace",
        usage: "ccide workspace [list | add DIR | remove DIR] [OPTIONS]",
        about: "List, add or remove the workspace folders of the running server.",
        details: "The lock file is rewritten with the same port and token (systemd is told RELOADING=1,\nthen READY=1), and the change persists in the state directory across restarts.",
        flags: &[PORT, CONFIG_DIR],
        run: crate::client::workspace,
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
            },
            flag(
                "--install",
                None,
                None,
                "Write the unit to ~/.config/systemd/user/ and print the systemctl commands.",
            ),
        ],
        run: crate::unit::command,
        passthrough: false,
    },
    Command {
        name: "gc",
        usage: "ccide gc [--dry-run] [OPTIONS]",
        about: "Remove ccide lock files whose process is gone, and their servers' leftovers.",
        details: "Never touches another IDE's lock file, nor a live server's. The state kept for a\nrestart (port, token, editor model, diagnostics) stays.",
        flags: &[
            flag("--dry-run", None, None, "Only say what would be removed."),
            CONFIG_DIR,
        ],
        run: crate::client::gc,
        passthrough: false,
    },
    Command {
        name: "lsp",
        usage: "ccide lsp [OPTIONS]",
        about: "Language server over stdio: the editor's own LSP client drives tabs, buffers, selection and diff review.",
        details: "Start it from the editor for the file types you choose. For each file it finds the\nserver of its workspace (as the commands do), or serves the editor's workspace folder in\nthis process until the editor exits. didOpen/didClose open and close tabs, didChange keeps\nthe unsaved content, didSave drops it; when the editor exits its tabs and buffers go.\nCode actions (and workspace/executeCommand): ccide.select \"Claude: send selection\",\nccide.mention \"Claude: @-mention\", and for a pending diff ccide.show, ccide.accept,\nccide.acceptEdited, ccide.reject. Arguments: [{\"uri\": ..., \"range\": ...}], both optional.\nThe range of every code action request becomes the selection 100 ms after the last one\n(editors that ask as the cursor moves), unless --no-follow. initializationOptions:\n{\"followSelection\": false, \"diagnostics\": true}. Nothing is written to files.",
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
                "--port",
                Some("N"),
                None,
                "Use the server on port N for every file, instead of the server of each file's workspace.",
            ),
            CONFIG_DIR,
        ],
        run: crate::lsp::run,
        passthrough: false,
    },
    Command {
        name: "events",
        usage: "ccide events [OPTIONS]",
        about: "Stream one JSON line per event (diffs opened and settled, clients) until interrupted.",
        details: "Events: subscribed (first, once the stream is live), diff_opened, diff_settled (how:\naccepted, rejected, closed by the client, abandoned), exec_requested (id, client, code),\nexec_settled (how: approved, denied, timed out, abandoned), client_connected,\nclient_disconnected. Each line carries \"event\" and \"time\".",
        flags: &[PORT, CONFIG_DIR],
        run: crate::client::events,
        passthrough: false,
    },
];

pub fn find(name: &str) -> Option<&'static Command> {
    COMMANDS.iter().find(|c| c.name == name)
}

pub fn version() -> String {
    format!("ccide {}\n", env!("CARGO_PKG_VERSION"))
}

pub fn overview() -> String {
    let mut s = format!(
        "ccide {}: a headless IDE for Claude Code.\n\nUsage: ccide COMMAND [OPTIONS]\n\nCommands:\n",
        env!("CARGO_PKG_VERSION")
    );
    for c in COMMANDS {
        s.push_str(&format!("  {:<12}{}\n", c.name, c.about));
    }
    s.push_str("  help COMMAND  Show the options of a command.\n\nOptions:\n  -h, --help     Show this text.\n  -V, --version  Show the version.\n\nSee ccide(1) for files, environment and exit statuses.\n");
    s
}

pub fn command_help(c: &Command) -> String {
    let mut s = format!("{}\n\nUsage: {}\n", c.about, c.usage);
    if !c.details.is_empty() {
        s.push('\n');
        s.push_str(c.details);
        s.push('\n');
    }
    if !c.flags.is_empty() {
        s.push_str("\nOptions:\n");
        for f in c.flags {
            let head = match f.value {
                Some(v) => format!("{} {v}", f.name),
                None => f.name.to_string(),
            };
            s.push_str(&format!("  {head}\n      {}\n", f.help));
            if let Some(env) = f.env {
                s.push_str(&format!("      [env: {env}]\n"));
            }
        }
    }
    s.push_str("  -h, --help\n      Show this text.\n");
    s
}

/// A parsed command line: flag values (command line first, then environment) and operands.
pub struct Args {
    pub command: &'static Command,
    values: Vec<(&'static str, String)>,
    pub operands: Vec<String>,
}

impl Args {
    pub fn parse(command: &'static Command, argv: &[String]) -> Result<Args, Fail> {
        if command.passthrough {
            return Ok(Args {
                command,
                values: Vec::new(),
                operands: argv.to_vec(),
            });
        }
        let mut values = Vec::new();
        let mut operands = Vec::new();
        let mut i = 0;
        while i < argv.len() {
            let arg = &argv[i];
            i += 1;
            if arg == "--" {
                operands.extend(argv[i..].iter().cloned());
                break;
            }
            if !arg.starts_with("--") || arg.len() == 2 {
                if arg.starts_with('-') && arg.len() > 1 && arg != "-" {
                    return Err(Fail::Usage(format!(
                        "unknown option '{arg}' for 'ccide {}' (see 'ccide help {}')",
                        command.name, command.name
                    )));
                }
                operands.push(arg.clone());
                continue;
            }
            let (name, inline) = match arg.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (arg.as_str(), None),
            };
            let Some(f) = command.flags.iter().find(|f| f.name == name) else {
                return Err(Fail::Usage(format!(
                    "unknown option '{name}' for 'ccide {}' (see 'ccide help {}')",
                    command.name, command.name
                )));
            };
            match (f.value, inline) {
                (None, Some(_)) => {
                    return Err(Fail::Usage(format!("option {name} takes no value")));
                }
                (None, None) => values.push((f.name, String::new())),
                (Some(_), Some(v)) => values.push((f.name, v)),
                (Some(placeholder), None) => {
                    let Some(v) = argv.get(i) else {
                        return Err(Fail::Usage(format!(
                            "option {name} needs a value ({placeholder})"
                        )));
                    };
                    i += 1;
                    values.push((f.name, v.clone()));
                }
            }
            if !f.repeat && values.iter().filter(|(n, _)| *n == f.name).count() > 1 {
                return Err(Fail::Usage(format!("option {name} given more than once")));
            }
        }
        Ok(Args {
            command,
            values,
            operands,
        })
    }

    fn def(&self, name: &str) -> &'static Flag {
        self.command
            .flags
            .iter()
            .find(|f| f.name == name)
            .unwrap_or_else(|| panic!("flag {name} is not defined for {}", self.command.name))
    }

    fn env(&self, name: &str) -> Option<(String, String)> {
        let var = self.def(name).env?;
        std::env::var(var)
            .ok()
            .filter(|v| !v.is_empty())
            .map(|v| (var.to_string(), v))
    }

    /// The flag's value: from the command line, else from its environment variable.
    pub fn value(&self, name: &str) -> Option<String> {
        if let Some((_, v)) = self.values.iter().rev().find(|(n, _)| *n == name) {
            return Some(v.clone());
        }
        self.env(name).map(|(_, v)| v)
    }

    pub fn values(&self, name: &str) -> Vec<String> {
        let given: Vec<String> = self
            .values
            .iter()
            .filter(|(n, _)| *n == name)
            .map(|(_, v)| v.clone())
            .collect();
        if !given.is_empty() {
            return given;
        }
        match self.env(name) {
            Some((_, v)) => v
                .split(':')
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect(),
            None => Vec::new(),
        }
    }

    /// A switch: present on the command line, or its variable set to 1/true/yes.
    pub fn switch(&self, name: &str) -> Result<bool, Fail> {
        if self.values.iter().any(|(n, _)| *n == name) {
            return Ok(true);
        }
        match self.env(name) {
            None => Ok(false),
            Some((var, v)) => match v.to_ascii_lowercase().as_str() {
                "1" | "true" | "yes" | "on" => Ok(true),
                "0" | "false" | "no" | "off" => Ok(false),
                _ => Err(Fail::Usage(format!(
                    "{var}={v}: expected 1, true, yes, 0, false or no"
                ))),
            },
        }
    }

    /// The flag's value parsed as `T`, with an error naming the flag (or its variable).
    pub fn parsed<T: FromStr>(&self, name: &str, what: &str) -> Result<Option<T>, Fail> {
        let (source, raw) = if let Some((_, v)) = self.values.iter().rev().find(|(n, _)| *n == name)
        {
            (name.to_string(), v.clone())
        } else if let Some((var, v)) = self.env(name) {
            (var, v)
        } else {
            return Ok(None);
        };
        raw.trim().parse::<T>().map(Some).map_err(|_| {
            Fail::Usage(format!(
                "invalid value '{raw}' for {source}: expected {what}"
            ))
        })
    }
}
