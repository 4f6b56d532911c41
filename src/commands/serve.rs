//! `ccide serve`: resolves the configuration, binds, announces the lock file, runs the threads
//! and cleans up on every exit path.

use std::net::{IpAddr, Ipv4Addr, TcpListener};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::cli::{Args, Command, Fail, Flag, Outcome, flag};
use crate::diagnostics::checkers::{self, Checker, Checks};
use crate::langservers;
use crate::lockfile::{self, LockContent, LockFile};
use crate::rpc::clients::Clients;
use crate::session::{self, Sessions};
use crate::state::{self, State, WorkspaceChanges, exec};
use crate::text::human_duration;
use crate::transport::{self, Gate};

pub const COMMAND: Command = Command {
    name: "serve",
    usage: "ccide serve [OPTIONS]",
    about: "Run the IDE server for the workspace, announced to Claude Code by a lock file.",
    details: "Listens on 127.0.0.1, writes <config>/ide/<port>.lock and serves Claude Code's IDE\nprotocol (MCP over WebSocket) until SIGINT, SIGTERM or SIGHUP, then removes the lock file.\nStart `claude --ide` (or use /ide) in the workspace to connect.",
    flags: FLAGS,
    run,
    passthrough: false,
};

pub const FLAGS: &[Flag] = &[
    Flag {
        name: "--workspace",
        value: Some("DIR"),
        env: Some("CCIDE_WORKSPACE"),
        repeat: true,
        help: "A workspace folder (repeatable; the environment variable takes a ':'-separated list). Default: the current directory, unless it is / or the home directory (name those to serve them).",
        default: None,
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
        "Seconds between keepalive pings sent to each client.",
    )
    .default("5"),
    flag(
        "--ping-timeout",
        Some("SECS"),
        Some("CCIDE_PING_TIMEOUT"),
        "Seconds a client has to answer a ping before it is disconnected.",
    )
    .default("3"),
    flag(
        "--max-connections",
        Some("N"),
        Some("CCIDE_MAX_CONNECTIONS"),
        "Open WebSocket connections allowed at once; more are answered 503.",
    )
    .default("64"),
    flag(
        "--single-client",
        None,
        Some("CCIDE_SINGLE_CLIENT"),
        "A newly connected Claude Code replaces the previous one (closed with code 4001). Claude Code 2.1.112 and earlier ignore code 4001 and reconnect at once, so two of them would take the server from each other: use it with newer versions only.",
    ),
    flag(
        "--mention-max-age",
        Some("SECS"),
        Some("CCIDE_MENTION_MAX_AGE"),
        "Mentions made while no client is connected are delivered to the next one if not older than this.",
    )
    .default("30"),
    Flag {
        name: "--checker",
        value: Some("PATTERN=COMMAND"),
        env: None,
        repeat: true,
        help: "Run COMMAND to get diagnostics for files matching PATTERN (repeatable). '{file}' becomes the file's path; without it the command checks the whole project from the workspace root. A 'FORMAT:' prefix (sarif, cargo, compiler, ruff, protocol) forces the output format.",
        default: None,
    },
    flag(
        "--no-default-checkers",
        None,
        Some("CCIDE_NO_DEFAULT_CHECKERS"),
        "Do not use the built-in checkers (ruff or python3 -m py_compile, shellcheck or bash -n, cargo check if trusted).",
    ),
    Flag {
        name: "--lsp",
        value: Some("PATTERN=COMMAND"),
        env: None,
        repeat: true,
        help: "Run the language server COMMAND (over stdio, kept warm) for files matching PATTERN (repeatable; same rules as --checker): its diagnostics join the checkers'. Built-ins when on PATH, the first found for each language: typescript-language-server or TypeScript 7's tsc, basedpyright-langserver, pyright-langserver or ty, gopls, clangd (with a compile_commands.json), rust-analyzer (trusted only), bash-language-server (with shellcheck). Where one covers a file, the built-in checker for it steps aside.",
        default: None,
    },
    flag(
        "--no-default-lsp",
        None,
        Some("CCIDE_NO_DEFAULT_LSP"),
        "Do not use the built-in language servers.",
    ),
    flag(
        "--lsp-warm",
        None,
        Some("CCIDE_LSP_WARM"),
        "Start the language servers with serve, so the first edit of the day is already warm (otherwise each starts on its first file).",
    ),
    flag(
        "--lsp-idle",
        Some("SECS"),
        Some("CCIDE_LSP_IDLE"),
        "A language server unused this long is stopped (and started again when needed).",
    )
    .default("1800"),
    flag(
        "--trust-workspace",
        None,
        Some("CCIDE_TRUST_WORKSPACE"),
        "Trust the workspace: let the built-ins run what it ships: tools found inside it, its TypeScript, cargo check and rust-analyzer (its build scripts), prettier (its JavaScript config), a rustup proxy's rustfmt (its rust-toolchain file). Off: none of its programs run.",
    ),
    flag(
        "--diagnostics-wait",
        Some("SECS"),
        Some("CCIDE_DIAGNOSTICS_WAIT"),
        "How long getDiagnostics without a uri waits for running checks of changed files.",
    )
    .default("1.5"),
    flag(
        "--checker-timeout",
        Some("SECS"),
        Some("CCIDE_CHECKER_TIMEOUT"),
        "A checker running longer is killed.",
    )
    .default("30"),
    Flag {
        name: "--formatter",
        value: Some("PATTERN=COMMAND"),
        env: None,
        repeat: true,
        help: "Formatter for reformat_file on files matching PATTERN (repeatable), same rules as --checker. It runs on a temporary copy ('{file}'), rewriting it or printing the result; without '{file}' the text goes through stdin and stdout. Killed after 30 s. Built-ins when on PATH: rustfmt, gofmt, ruff format or black, prettier, clang-format, shfmt (prettier, and a rustup proxy's rustfmt under a rust-toolchain file, only with --trust-workspace).",
        default: None,
    },
    flag(
        "--on-review",
        Some("COMMAND"),
        Some("CCIDE_ON_REVIEW"),
        "Run COMMAND (split into words as with --checker, no shell) each time Claude Code proposes an edit, to let you know a review waits, with the diff in its environment: CCIDE_DIFF_ID, CCIDE_DIFF_FILE, CCIDE_DIFF_ADDED and CCIDE_DIFF_REMOVED (the line counts), CCIDE_DIFF_CLIENT and CCIDE_DIFF_CLIENT_PID (who proposed it). It runs beside the request, killed after 30 s; a failure is logged once.",
    ),
    flag(
        "--exec",
        Some("off|ask|on"),
        Some("CCIDE_EXEC"),
        "executeCode: off (not listed, refused), ask (each call waits for `ccide exec approve`), on (runs).",
    )
    .default("off"),
    flag(
        "--exec-timeout",
        Some("SECS"),
        Some("CCIDE_EXEC_TIMEOUT"),
        "Per-call limit for executeCode; the Python kernel is restarted after it.",
    )
    .default("60"),
    flag(
        "--exec-approval-timeout",
        Some("SECS"),
        Some("CCIDE_EXEC_APPROVAL_TIMEOUT"),
        "With --exec ask, a call not approved within this time is denied.",
    )
    .default("300"),
    flag(
        "--review-gate",
        None,
        Some("CCIDE_REVIEW_GATE"),
        "Hold the end of each of Claude's turns (its Stop hook) until ccide review has decided every hunk it changed; Claude goes on with what was undone.",
    ),
    flag(
        "--review-store",
        Some("MIB"),
        Some("CCIDE_REVIEW_STORE"),
        "The most the recorded file images of ccide review may take; the oldest turns go first.",
    )
    .default("256"),
    flag(
        "--log-level",
        Some("LEVEL"),
        Some("CCIDE_LOG_LEVEL"),
        "error, warn, info or debug.",
    )
    .default("info"),
];

struct Options {
    workspaces: Vec<PathBuf>,
    ide_name: String,
    port: Option<u16>,
    host: IpAddr,
    config_dir: PathBuf,
    state_dir: PathBuf,
    session: session::Config,
    max_connections: usize,
    mention_max_age: Duration,
    exec: exec::Settings,
    formatters: Vec<String>,
    /// `--checker`; the built-ins join them after the lock file is out (see `tools`).
    checkers: Vec<Checker>,
    default_checkers: bool,
    diagnostics_wait: Duration,
    checker_timeout: Duration,
    /// `--lsp`; the built-ins likewise.
    lsp: Vec<langservers::Spec>,
    default_lsp: bool,
    lsp_idle: Duration,
    lsp_warm: bool,
    trusted: bool,
    /// `--on-review`, split into words.
    on_review: Option<Vec<String>>,
    review: state::changes::Settings,
}

/// A number of seconds as the flags take it, `DIGITS[.DIGITS]`, read exactly to the
/// nanosecond without floating point (whose parser alone cost 3 KB of binary).
struct Seconds(Duration);

impl std::str::FromStr for Seconds {
    type Err = ();

    fn from_str(s: &str) -> Result<Seconds, ()> {
        let (whole, fraction) = s.split_once('.').unwrap_or((s, ""));
        let digits = |t: &str| t.bytes().all(|b| b.is_ascii_digit());
        if (whole.is_empty() && fraction.is_empty()) || !digits(whole) || !digits(fraction) {
            return Err(());
        }
        let secs = if whole.is_empty() {
            0
        } else {
            whole.parse::<u64>().map_err(|_| ())?
        };
        let nanos = fraction
            .bytes()
            .chain(std::iter::repeat(b'0'))
            .take(9)
            .fold(0, |n, b| n * 10 + u32::from(b - b'0'));
        Ok(Seconds(Duration::new(secs, nanos)))
    }
}

fn seconds(args: &Args, name: &str) -> Result<Duration, Fail> {
    let Seconds(v) = args
        .parsed::<Seconds>(name, "a number of seconds")?
        .expect("a seconds flag has a default");
    if v.is_zero() || v > Duration::from_secs(86_400) {
        return Err(Fail::Usage(format!(
            "invalid value for {name} (or its variable): expected a number of seconds between 0 and 86400"
        )));
    }
    Ok(v)
}

/// The server's settings from its flags (and their variables), checked; the log is set up
/// first, at the level asked for, so the steps after it can log.
fn options(args: &Args) -> Result<Options, Fail> {
    if let Some(extra) = args.operands.first() {
        return Err(Fail::Usage(format!(
            "unexpected argument '{extra}' (workspaces are given with --workspace DIR)"
        )));
    }
    init_log(args)?;
    let mut workspaces = workspaces_given(args)?;
    let ide_name = args.value("--ide-name").unwrap_or_else(|| {
        let base = workspaces[0]
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "/".into());
        format!("ccide ({base})")
    });
    let (port, host) = listen_on(args)?;
    let interval = seconds(args, "--ping-interval")?;
    let timeout = seconds(args, "--ping-timeout")?;
    let max_connections = args
        .parsed::<usize>("--max-connections", "a whole number of at least 1")?
        .expect("--max-connections has a default");
    if max_connections == 0 {
        return Err(Fail::Usage(
            "invalid value '0' for --max-connections: expected a whole number of at least 1".into(),
        ));
    }
    let single_client = args.switch("--single-client")?;
    let trusted = args.switch("--trust-workspace")?;
    let (checkers, servers) = checkers_and_servers(args)?;
    let config_dir = lockfile::config_dir(args.value("--config-dir").as_deref())?;
    let state_dir = lockfile::state_dir(args.value("--state-dir").as_deref(), &workspaces)?;
    apply_workspace_changes(&mut workspaces, &state_dir);
    Ok(Options {
        workspaces,
        ide_name,
        port,
        host,
        config_dir,
        state_dir,
        session: session::Config {
            ping_interval: interval,
            ping_timeout: timeout,
            single_client,
        },
        max_connections,
        mention_max_age: seconds(args, "--mention-max-age")?,
        exec: exec_settings(args)?,
        formatters: args.values("--formatter"),
        checkers,
        default_checkers: !args.switch("--no-default-checkers")?,
        diagnostics_wait: seconds(args, "--diagnostics-wait")?,
        checker_timeout: seconds(args, "--checker-timeout")?,
        lsp: servers,
        default_lsp: !args.switch("--no-default-lsp")?,
        lsp_idle: seconds(args, "--lsp-idle")?,
        lsp_warm: args.switch("--lsp-warm")?,
        trusted,
        on_review: on_review(args)?,
        review: state::changes::Settings {
            max_bytes: args
                .parsed::<u64>("--review-store", "a number of MiB")?
                .unwrap_or(256)
                .saturating_mul(1 << 20),
            gate: args.switch("--review-gate")?,
        },
    })
}

/// Starts the log at `--log-level`.
fn init_log(args: &Args) -> Result<(), Fail> {
    let level = args.value("--log-level").unwrap_or_default();
    let level = crate::log::Level::parse(&level).ok_or_else(|| {
        Fail::Usage(format!(
            "invalid value '{level}' for --log-level: expected error, warn, info or debug"
        ))
    })?;
    crate::log::init(level);
    Ok(())
}

/// The `--workspace` folders (the current one without any), canonical and each once; refuses a
/// server's state directory, and a current directory too wide to serve (/, ~).
fn workspaces_given(args: &Args) -> Result<Vec<PathBuf>, Fail> {
    let mut dirs = args.values("--workspace");
    let implicit = dirs.is_empty();
    if implicit {
        dirs.push(".".into());
    }
    let mut workspaces: Vec<PathBuf> = Vec::new();
    for d in &dirs {
        let canon = crate::files::canonical_dir(std::path::Path::new(d))
            .map_err(|e| Fail::Usage(format!("invalid value for --workspace: {e}")))?;
        // An editor started on a proposal (eglot's M-x eglot in its buffer) would otherwise
        // make a second IDE of a server's own files.
        if let Some(state) = lockfile::state_dir_holding(&canon) {
            return Err(Fail::Usage(format!(
                "refusing to serve {}: it is inside the state directory of a ccide server ({}), where its proposals live; a proposal belongs to the server that made it. Serve your project's folder instead.",
                canon.display(),
                state.display()
            )));
        }
        // `ccide serve` in / (a container's WORKDIR) or in ~ would hold every project below.
        if implicit && crate::workspaces::too_wide(&canon) {
            return Err(Fail::Usage(format!(
                "refusing to serve {0} (the current directory): it would hold every project below it, and Claude Code connects to no IDE where two servers hold its folder. Run ccide serve in your project's folder, or name this one with --workspace {0} (CCIDE_WORKSPACE={0}) if you mean it.",
                canon.display()
            )));
        }
        if !workspaces.contains(&canon) {
            workspaces.push(canon);
        }
    }
    Ok(workspaces)
}

/// `--port` and `--host`; a host that is not loopback needs `--allow-remote`.
fn listen_on(args: &Args) -> Result<(Option<u16>, IpAddr), Fail> {
    let port = args.parsed::<u16>("--port", "a port number from 1 to 65535")?;
    if port == Some(0) {
        return Err(Fail::Usage(
            "invalid value '0' for --port: expected a port number from 1 to 65535 (omit --port for any free port)".into(),
        ));
    }
    let host = args
        .parsed::<IpAddr>("--host", "an IP address such as 127.0.0.1 or ::1")?
        .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
    if !host.is_loopback() {
        if !args.switch("--allow-remote")? {
            return Err(Fail::Usage(format!(
                "--host {host} is not a loopback address: anyone who can reach it could try the token. Add --allow-remote if you mean it."
            )));
        }
        crate::log::warn!(
            "listening on {host}, reachable from other machines: only the token protects this server"
        );
    }
    Ok((port, host))
}

/// `--on-review`'s command in words; an empty one is a usage error.
fn on_review(args: &Args) -> Result<Option<Vec<String>>, Fail> {
    let Some(cmd) = args.value("--on-review") else {
        return Ok(None);
    };
    let words = crate::pattern::split_words(&cmd)
        .map_err(|e| Fail::Usage(format!("invalid value for --on-review: {e}")))?;
    if words.is_empty() {
        return Err(Fail::Usage(
            "invalid value for --on-review: the command is empty".into(),
        ));
    }
    Ok(Some(words))
}

/// The `--checker` and `--lsp` specs, parsed.
fn checkers_and_servers(args: &Args) -> Result<(Vec<Checker>, Vec<langservers::Spec>), Fail> {
    let mut checkers = Vec::new();
    for spec in args.values("--checker") {
        checkers.push(
            Checker::parse(&spec)
                .map_err(|e| Fail::Usage(format!("invalid value for --checker: {e}")))?,
        );
    }
    let mut servers = Vec::new();
    for spec in args.values("--lsp") {
        servers.push(
            langservers::parse_spec(&spec)
                .map_err(|e| Fail::Usage(format!("invalid value for --lsp: {e}")))?,
        );
    }
    Ok((checkers, servers))
}

/// Applies the `ccide workspace add/remove` changes saved in `state_dir` on top of the command
/// line's folders (never removing them all).
fn apply_workspace_changes(workspaces: &mut Vec<PathBuf>, state_dir: &std::path::Path) {
    let changes = WorkspaceChanges::load(state_dir);
    for added in &changes.added {
        if added.is_dir() && !workspaces.contains(added) {
            workspaces.push(added.clone());
        }
    }
    if workspaces.iter().any(|w| !changes.removed.contains(w)) {
        workspaces.retain(|w| !changes.removed.contains(w));
    }
}

/// `--exec`, `--exec-timeout` and `--exec-approval-timeout`.
fn exec_settings(args: &Args) -> Result<exec::Settings, Fail> {
    Ok(exec::Settings {
        mode: match args.value("--exec").unwrap_or_default().as_str() {
            "off" => exec::Mode::Off,
            "ask" => exec::Mode::Ask,
            "on" => exec::Mode::On,
            other => {
                return Err(Fail::Usage(format!(
                    "invalid value '{other}' for --exec: expected off, ask or on"
                )));
            }
        },
        timeout: seconds(args, "--exec-timeout")?,
        approval_timeout: seconds(args, "--exec-approval-timeout")?,
    })
}

fn bind(s: &Options, remembered: Option<u16>) -> Result<TcpListener, String> {
    if let Some(p) = s.port {
        return TcpListener::bind((s.host, p)).map_err(|e| {
            format!(
                "cannot listen on {}:{p} (--port): {e}. Choose another port or omit --port.",
                s.host
            )
        });
    }
    if let Some(p) = remembered {
        match TcpListener::bind((s.host, p)) {
            Ok(l) => return Ok(l),
            Err(e) => crate::log::warn!(
                "port {p} from the last run is not available ({e}); moving to a new port, so a Claude Code that was connected must reconnect with /ide"
            ),
        }
    }
    TcpListener::bind((s.host, 0)).map_err(|e| format!("cannot listen on {}: {e}", s.host))
}

/// A started server: what `stop` needs to clean up.
pub struct Started {
    pub sessions: Arc<Sessions>,
    /// Shared with the timer thread that restores what is deleted; None once `stop` took it.
    held: Arc<Mutex<Option<Held>>>,
}

/// What a server holds while it runs and puts back when someone deletes it.
struct Held {
    lock: LockFile,
    /// One server per state directory.
    claim: lockfile::Claim,
}

pub fn run(args: &Args) -> Outcome {
    // Before any thread exists, so that every thread inherits the mask and only `sigwait`
    // below ever takes these signals.
    crate::sys::block_termination_signals();
    let started = start(args)?;
    LEAVE_WHEN_FOLDERS_GO.store(true, Ordering::SeqCst);
    let signal = crate::sys::signal_name(crate::sys::wait_termination_signal());
    if !FOLDERS_GONE.load(Ordering::SeqCst) {
        crate::log::info!("{signal} received; shutting down");
    }
    stop(started);
    Ok(crate::cli::EXIT_OK)
}

/// Binds, announces the lock file and starts the threads. The caller must have blocked the
/// termination signals first.
///
/// Only what discovery needs comes before the lock file (ccide-protocol(7) §1): the state
/// directory claimed, port and token, the control socket that the lock names and the drop
/// directory. The rest (the built-in tools looked up on PATH, the state files read, old diffs
/// removed, the threads) follows at once: a client that connects meanwhile waits in the
/// listen backlog for its upgrade, and a command on the control socket for its answer.
pub fn start(args: &Args) -> Result<Started, Fail> {
    crate::sys::restrict_umask();
    let o = options(args)?;
    crate::files::private_dir(&o.state_dir, "state directory")
        .map_err(|e| format!("{e}; to use another, pass --state-dir DIR"))?;
    let claim = lockfile::claim_state_dir(&o.state_dir)?;
    crate::control::refuse_overlaps(&o.config_dir, &o.workspaces, Some(&o.state_dir))?;
    let identity = lockfile::load_identity(&o.state_dir)?;
    let listener = bind(&o, identity.port)?;
    let port = listener
        .local_addr()
        .map_err(|e| format!("cannot read the listening address: {e}"))?
        .port();
    let written = lockfile::save_identity(&o.state_dir, port, &identity)?;
    // A move to another port (rare) first takes our previous lock away, so that the CLI never
    // sees both.
    if let Some(old) = identity.port.filter(|p| *p != port) {
        remove_own_stale_lock(&o, old, &identity.token);
    }
    let control_path = o.state_dir.join("control.sock");
    let control = crate::control::bind(&control_path)?;
    let drop_dir = o.state_dir.join("diagnostics");
    let lock = crate::files::private_dir(&drop_dir, "diagnostics drop directory").and_then(|()| {
        LockFile::write(
            &o.config_dir,
            &LockContent {
                port,
                workspaces: &o.workspaces,
                ide_name: &o.ide_name,
                token: &identity.token,
                control: &control_path,
                state: &o.state_dir,
            },
        )
    });
    let lock = match lock {
        Ok(l) => l,
        Err(e) => {
            let _ = std::fs::remove_file(&control_path);
            return Err(e.into());
        }
    };
    crate::log::info!(
        "listening on {}:{port} for {} (lock file {})",
        o.host,
        o.workspaces
            .iter()
            .map(|w| w.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
        lock.path.display()
    );
    crate::log::info!(
        "next: run `claude --ide` in {} (or type /ide in a running claude) to connect Claude Code",
        o.workspaces[0].display()
    );
    if written {
        // Renamed into place before the lock file appeared, synced only now: what a crash of
        // the process could lose is already in place, and a crash of the machine ends the
        // Claude Code that would reconnect with them too.
        lockfile::sync_identity(&o.state_dir);
    }
    let held = Arc::new(Mutex::new(Some(Held { lock, claim })));
    let running = run_threads(o, port, identity.token, listener, control, drop_dir, &held);
    match running {
        Ok(sessions) => {
            log_tools(&sessions.state);
            crate::sys::sd_notify("READY=1");
            Ok(Started { sessions, held })
        }
        Err(e) => {
            if let Some(h) = crate::proc::lock(&held).take() {
                h.lock.remove();
            }
            let _ = std::fs::remove_file(&control_path);
            Err(e)
        }
    }
}

/// The built-in checkers and language servers join those the flags name: looked up on PATH
/// (about 100 `stat`s), so only once the lock file is out.
fn tools(o: &mut Options) -> (Checks, Vec<langservers::Spec>) {
    let mut checkers = std::mem::take(&mut o.checkers);
    if o.default_checkers {
        checkers.extend(checkers::defaults(&o.workspaces, o.trusted));
    }
    let mut servers = std::mem::take(&mut o.lsp);
    if o.default_lsp {
        let (folders, trusted) = (&o.workspaces, o.trusted);
        servers.extend(langservers::builtins(
            folders,
            &|program| crate::trust::find(program, folders, trusted),
            trusted,
        ));
    }
    (
        Checks::new(checkers, o.diagnostics_wait, o.checker_timeout),
        servers,
    )
}

/// Opens the state and starts the acceptor, control, imports and timer threads, and with
/// `--lsp-warm` the language servers (on a thread of their own, after the acceptor).
fn run_threads(
    mut o: Options,
    port: u16,
    token: String,
    listener: TcpListener,
    control: std::os::unix::net::UnixListener,
    drop_dir: PathBuf,
    held: &Arc<Mutex<Option<Held>>>,
) -> Result<Arc<Sessions>, Fail> {
    let (checks, servers) = tools(&mut o);
    let clients = Arc::new(Clients::default());
    let state = Arc::new(State::open(
        state::Config {
            workspaces: o.workspaces.clone(),
            ide_name: o.ide_name.clone(),
            state_dir: o.state_dir.clone(),
            config_dir: o.config_dir.clone(),
            port,
            token: token.clone(),
            mention_max_age: o.mention_max_age,
            exec: o.exec,
            formatters: o.formatters,
            trusted: o.trusted,
            checks,
            langservers: (
                servers,
                langservers::Config {
                    idle: o.lsp_idle,
                    trust_workspace: o.trusted,
                    ..langservers::Config::default()
                },
            ),
            review: o.review,
        },
        clients.clone(),
    )?);
    if let Some(words) = o.on_review.take() {
        let on_review = super::notify::OnReview {
            words,
            clients: clients.clone(),
            scratch: o.state_dir.clone(),
        };
        on_review.start(&state.events)?;
    }
    let sessions = Arc::new(Sessions::new(state.clone(), clients, o.session));
    let gate = Gate {
        token,
        extra_hosts: if o.host.is_loopback() {
            Vec::new()
        } else {
            vec![o.host.to_string()]
        },
        any_ip_host: o.host.is_unspecified(),
        max_connections: o.max_connections,
        handshake_timeout: Duration::from_secs(5),
        stopping: sessions.stopping.clone(),
    };
    let on_open_sessions = sessions.clone();
    let on_open: Arc<transport::OnOpen> =
        Arc::new(move |outbox, peer| on_open_sessions.open(outbox, peer));
    spawn(
        "acceptor",
        Box::new(move || transport::run_acceptor(listener, gate, on_open)),
    )?;
    if o.lsp_warm {
        // On its own thread, the acceptor running: finding each server's first file (a walk,
        // tsconfig.json) and starting it takes a while, which a CLI that connects as soon as
        // the lock file is out must not wait for.
        let lsp = state.langservers.clone();
        spawn("lsp-warm", Box::new(move || lsp.warm()))?;
    }
    // The control thread accepts on this descriptor for good; the watch puts a new socket
    // behind it when the old one's path is deleted.
    let mut watch = Watch {
        held: held.clone(),
        state: state.clone(),
        control_fd: std::os::fd::AsRawFd::as_raw_fd(&control),
        control: control
            .try_clone()
            .map_err(|e| format!("cannot duplicate the control socket: {e}"))?,
        next: Instant::now(),
        gone_once: false,
    };
    let control_state = state.clone();
    spawn(
        "control",
        Box::new(move || crate::control::run(control_state, control)),
    )?;
    let diagnostics = state.diagnostics.clone();
    spawn(
        "imports",
        Box::new(move || crate::diagnostics::watch_drop_dir(&diagnostics, &drop_dir)),
    )?;
    let timer_sessions = sessions.clone();
    let mut watchdog = Watchdog::from_env();
    spawn(
        "keepalive",
        Box::new(move || {
            timer_sessions.run_timer(|now| {
                watchdog.tick(now);
                watch.tick(now);
            })
        }),
    )?;
    Ok(sessions)
}

/// Says at start what the model may run and which tools will be used, for whoever reads the log.
fn log_tools(state: &State) {
    let e = &state.exec.settings;
    match e.mode {
        exec::Mode::Off => {
            crate::log::info!("executeCode is off (enable with --exec ask or --exec on)")
        }
        mode => crate::log::info!(
            "executeCode is {} (per-call limit {}, approval limit {})",
            if mode == exec::Mode::Ask { "ask" } else { "on" },
            human_duration(e.timeout),
            human_duration(e.approval_timeout)
        ),
    }
    for c in &state.diagnostics.checks.checkers {
        crate::log::debug!("checker for {}: {}", c.pattern, c.words.join(" "));
    }
    for f in &state.formatters {
        crate::log::debug!("formatter {f}");
    }
    for s in state.langservers.status().as_array().into_iter().flatten() {
        crate::log::info!(
            "language server {} for {}: {}",
            s["name"].as_str().unwrap_or(""),
            s["patterns"]
                .as_array()
                .map(|p| p
                    .iter()
                    .filter_map(|p| p.as_str())
                    .collect::<Vec<_>>()
                    .join(" "))
                .unwrap_or_default(),
            s["command"].as_str().unwrap_or("")
        );
    }
}

/// Set by `run`: a `serve` of its own (detached by a bridge, under systemd) ends by itself once
/// every workspace folder is gone (`Watch`), through the SIGTERM `run` waits for. A server
/// inside `ccide lsp` or `ccide claude` is ended by that process.
static LEAVE_WHEN_FOLDERS_GO: AtomicBool = AtomicBool::new(false);
/// Set by the timer thread when this server leaves for that reason.
static FOLDERS_GONE: AtomicBool = AtomicBool::new(false);

/// Removes the lock file and the control socket and says goodbye to the clients.
pub fn stop(r: Started) {
    crate::sys::sd_notify("STOPPING=1");
    // First refuse new upgrades: the CLI reconnects within milliseconds of a 1001, and a
    // connection accepted now would die with the process while the CLI believes it is live.
    r.sessions.stopping.store(true, Ordering::SeqCst);
    // The claim is kept to the end: a server started meanwhile must not take the state
    // directory, and then a new port, while this one still listens on the old.
    let held = crate::proc::lock(&r.held).take();
    if let Some(h) = &held {
        h.lock.remove();
    }
    let _ = std::fs::remove_file(&r.sessions.state.control_path);
    // 1001 "going away" lets the CLI reconnect to a restarted server on the same port.
    let clients = r.sessions.clients.all();
    for c in &clients {
        c.outbox.close(1001, "ccide is shutting down");
    }
    let deadline = Instant::now() + Duration::from_millis(500);
    while clients.iter().any(|c| !c.outbox.is_ended()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
    // No checker, formatter, language server or Python kernel outlives the server.
    r.sessions.state.langservers.shutdown();
    crate::proc::kill_all();
    drop(held);
}

/// Puts back what someone deletes while the server runs, checked every two seconds on the
/// timer thread. The lock file (a cleanup script, another CLI sweeping locks it believes
/// dead): without it the CLI can never find the server again. The state directory (a
/// cleanup of ~/.local/state): without it no `ccide` command reaches the server, no diff can
/// be proposed, and a restart would lose port and token; everything in it is made again from
/// memory, except the pending diffs' files.
struct Watch {
    held: Arc<Mutex<Option<Held>>>,
    state: Arc<State>,
    /// The descriptor the control thread accepts on, and a duplicate of the socket behind it.
    control_fd: std::os::fd::RawFd,
    control: std::os::unix::net::UnixListener,
    next: Instant,
    /// Every folder was gone at the last check (a folder renamed and put back, a checkout
    /// moved aside, passes).
    gone_once: bool,
}

impl Watch {
    fn tick(&mut self, now: Instant) {
        if now < self.next {
            return;
        }
        self.next = now + Duration::from_secs(2);
        if self.all_folders_gone() {
            return;
        }
        // Held while checking and writing, so `stop` cannot remove them in between.
        let held = self.held.clone();
        let mut held = crate::proc::lock(&held);
        let Some(h) = held.as_mut() else { return };
        let state = self.state.clone();
        state.follow_worktrees();
        // serve.lock unlinked (its directory deleted, or itself), or the control socket gone.
        let unlinked = h
            .claim
            .file
            .metadata()
            .map_or(true, |m| std::os::unix::fs::MetadataExt::nlink(&m) == 0);
        if unlinked || std::fs::symlink_metadata(&state.control_path).is_err() {
            self.restore_state(h, unlinked);
        }
        if h.lock.path.exists() {
            return;
        }
        match state.announce() {
            Ok(_) => crate::log::warn!(
                "the lock file {} was deleted while this server runs; wrote it again (same port and token) so Claude Code can find the server",
                h.lock.path.display()
            ),
            Err(e) => {
                crate::log::error!("the lock file was deleted and cannot be written again: {e}")
            }
        }
    }

    /// Whether every workspace folder has been gone at two checks in a row, two seconds apart:
    /// then the server leaves (once), rather than hold a lock file for folders that no longer
    /// exist for ever. One `stat` per folder.
    fn all_folders_gone(&mut self) -> bool {
        if FOLDERS_GONE.load(Ordering::SeqCst) {
            return true;
        }
        let folders = self.state.workspaces.list();
        let gone = folders.iter().all(|w| !w.is_dir());
        let leave = gone && self.gone_once;
        self.gone_once = gone;
        if !leave || !LEAVE_WHEN_FOLDERS_GO.load(Ordering::SeqCst) {
            return false;
        }
        FOLDERS_GONE.store(true, Ordering::SeqCst);
        crate::log::warn!(
            "every workspace folder is gone ({}): leaving, and removing the lock file",
            folders
                .iter()
                .map(|w| w.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
        crate::sys::terminate_self();
        true
    }

    fn restore_state(&mut self, h: &mut Held, unlinked: bool) {
        let state = &self.state;
        let dir = state.state_dir.display();
        crate::log::error!(
            "the state directory {dir} was deleted (or part of it) while this server runs; making it again"
        );
        let made = (|| {
            crate::files::private_dir(&state.state_dir, "state directory")?;
            // Another server of this user cannot have it: our claim's abstract name kept them
            // out. One in another network namespace could: then it is theirs.
            if unlinked {
                h.claim.file = lockfile::reclaim_state_dir(&state.state_dir)?;
            }
            let lost = state.restore()?;
            let socket = crate::control::bind(&state.control_path)?;
            crate::sys::replace_listener(self.control_fd, &self.control, &socket)
                .and_then(|()| socket.try_clone())
                .map(|dup| self.control = dup)
                .map_err(|e| format!("cannot take the new control socket into use: {e}"))?;
            Ok::<_, String>(lost)
        })();
        match made {
            Ok(lost) => {
                crate::log::warn!(
                    "made the state directory {dir} again: server.json (same port and token), the control socket, editor.json, diagnostics.json, workspaces.json, the diffs and drop directories"
                );
                for (id, file) in lost {
                    crate::log::error!(
                        "diff {id} for {}: its proposal was in the deleted state directory and is lost; it can only be rejected (ccide diff reject {id}) or answered in Claude Code",
                        file.display()
                    );
                }
            }
            Err(e) => crate::log::error!(
                "cannot make the state directory {dir} again: {e}; trying again in two seconds"
            ),
        }
    }
}

/// Boxed, so that the threads share one instance of the spawning code.
fn spawn(name: &str, f: Box<dyn FnOnce() + Send>) -> Result<(), Fail> {
    crate::proc::spawn_thread(name, f)
        .map(|_| ())
        .map_err(|e| Fail::Failed(format!("cannot start the {name} thread: {e}")))
}

/// After a move to a new port, the lock of our previous port is stale if it carries our token
/// and its process is gone (a kill -9 left it): remove it so the CLI does not try it.
fn remove_own_stale_lock(s: &Options, old_port: u16, token: &str) {
    let path = s.config_dir.join("ide").join(format!("{old_port}.lock"));
    let Some(v) = std::fs::read(&path)
        .ok()
        .and_then(|b| serde_json::from_slice::<serde_json::Value>(&b).ok())
    else {
        return;
    };
    let ours = v["authToken"].as_str() == Some(token);
    if ours && !crate::sys::process_alive(v["pid"].as_i64().unwrap_or(0)) {
        let _ = std::fs::remove_file(&path);
    }
}

/// `WATCHDOG=1` at half of `$WATCHDOG_USEC`, when systemd asks for it (and for this pid).
struct Watchdog {
    every: Option<Duration>,
    next: std::time::Instant,
}

impl Watchdog {
    fn from_env() -> Watchdog {
        let for_us = std::env::var("WATCHDOG_PID")
            .map_or(true, |p| p.trim() == std::process::id().to_string());
        let every = std::env::var("WATCHDOG_USEC")
            .ok()
            .and_then(|u| u.trim().parse::<u64>().ok())
            .filter(|u| *u > 0 && for_us)
            .map(|u| Duration::from_micros(u) / 2);
        Watchdog {
            every,
            next: std::time::Instant::now(),
        }
    }

    fn tick(&mut self, now: std::time::Instant) {
        if let Some(every) = self.every
            && now >= self.next
        {
            crate::sys::sd_notify("WATCHDOG=1");
            self.next = now + every;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Seconds;
    use std::time::Duration;

    #[test]
    fn seconds_are_read_exactly() {
        let read = |t: &str| t.parse::<Seconds>().ok().map(|s| s.0);
        assert_eq!(read("1.5"), Some(Duration::from_millis(1500)));
        assert_eq!(read("30"), Some(Duration::from_secs(30)));
        assert_eq!(read(".25"), Some(Duration::from_millis(250)));
        assert_eq!(read("2."), Some(Duration::from_secs(2)));
        assert_eq!(read("0.0000000019"), Some(Duration::from_nanos(1)));
        for bad in [
            "",
            ".",
            "-1",
            "+1",
            "1e3",
            "inf",
            "nan",
            "1.2.3",
            " 1",
            "1,5",
            "99999999999999999999",
        ] {
            assert_eq!(read(bad), None, "{bad}");
        }
    }
}

/// The lists of built-in language servers people read (the README's table, ccide(1),
/// `--lsp`'s help) name every profile, and nothing else.
#[cfg(test)]
mod builtin_server_lists {
    use crate::langservers::PROFILES;

    /// `text` between the line holding `from` and the next line holding `to`.
    fn between<'a>(text: &'a str, from: &str, to: &str) -> Vec<&'a str> {
        let mut lines = text.lines().skip_while(|l| !l.contains(from));
        assert!(lines.next().is_some(), "no {from:?}");
        let part: Vec<&str> = lines.take_while(|l| !l.contains(to)).collect();
        assert!(!part.is_empty(), "nothing after {from:?}");
        part
    }

    /// A program a list names: the first word of a command, not a flag or a file.
    fn program(command: &str) -> Option<String> {
        let word = command.split_whitespace().next()?;
        (!word.starts_with('-') && !word.contains('.')).then(|| word.to_string())
    }

    /// The README's table: the commands in code spans of its "built-in" column.
    fn readme(text: &str) -> Vec<String> {
        let rows = between(text, "| language | built-in", "How it behaves");
        rows.iter()
            .filter_map(|r| r.split('|').nth(2))
            .flat_map(|cell| cell.split('`').skip(1).step_by(2))
            .filter_map(program)
            .collect()
    }

    /// ccide(1): the bold commands of the `--lsp` paragraph's list of built-ins.
    fn man(text: &str) -> Vec<String> {
        let lines = between(
            text,
            "Built\\-ins, when on PATH",
            "Where a server covers a file",
        );
        lines
            .iter()
            .filter_map(|l| {
                let (_, rest) = l.split_once(' ')?;
                [".B ", ".BR ", ".RB "]
                    .iter()
                    .any(|m| l.starts_with(m))
                    .then_some(rest)
            })
            .filter_map(|rest| {
                let plain = rest
                    .replace("\\-", "-")
                    .replace(['"', '(', ')', ',', ';', ':'], " ");
                program(&plain)
            })
            .collect()
    }

    /// `--lsp`'s help: the last word of each item of the list, without what is in brackets.
    fn help(text: &str) -> Vec<String> {
        let (_, list) = text.split_once("Built-ins when on PATH").unwrap();
        let (_, list) = list.split_once(": ").unwrap();
        let (list, _) = list.split_once(". ").unwrap();
        let mut plain = String::new();
        let mut depth = 0;
        for c in list.chars() {
            match c {
                '(' => depth += 1,
                ')' => depth -= 1,
                c if depth == 0 => plain.push(c),
                _ => {}
            }
        }
        plain
            .split([','])
            .flat_map(|item| item.split(" or "))
            .filter_map(|item| item.split_whitespace().last().map(str::to_string))
            .collect()
    }

    #[test]
    fn every_list_names_the_profiles_and_nothing_else() {
        let flag = super::COMMAND
            .flags
            .iter()
            .find(|f| f.name == "--lsp")
            .unwrap();
        let lists = [
            ("README.md", readme(include_str!("../../README.md"))),
            ("man/ccide.1", man(include_str!("../../man/ccide.1"))),
            ("serve's --lsp help", help(flag.help)),
        ];
        let table: Vec<&str> = PROFILES.iter().map(|p| p.name).collect();
        for (doc, names) in lists {
            for p in &table {
                assert!(
                    names.iter().any(|n| n == p),
                    "{doc} does not name the built-in language server {p}: {names:?}"
                );
            }
            for n in &names {
                assert!(
                    table.contains(&n.as_str()),
                    "{doc} names {n}, which is not a built-in language server (src/langservers/profiles.rs)"
                );
            }
        }
    }
}
