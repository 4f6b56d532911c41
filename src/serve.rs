//! `ccide serve`: resolves the configuration, binds, announces the lock file, runs the threads
//! and cleans up on every exit path.

use std::net::{IpAddr, Ipv4Addr, TcpListener};
use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use crate::cli::{Args, Fail, Outcome};
use crate::lockfile::{self, LockContent, LockFile};
use crate::server::{self, Client, Server};
use crate::transport::{self, Gate};

/// Everything a running server shares between its threads.
pub struct App {
    pub server: Server,
    pub workspaces: RwLock<Vec<PathBuf>>,
    pub ide_name: String,
    pub port: u16,
    pub state_dir: PathBuf,
    pub control_path: PathBuf,
    pub started: SystemTime,
    pub diffs: crate::diffs::Diffs,
    pub editor: crate::editor::Editor,
    pub diagnostics: crate::diagnostics::Store,
    pub stopping: Arc<std::sync::atomic::AtomicBool>,
    pub exec: crate::exec::Exec,
    pub checks: crate::checkers::Checks,
    /// What rewriting the lock file needs when the workspace folders change.
    config_dir: PathBuf,
    token: String,
    /// `--formatter PATTERN=COMMAND` as given, in order.
    pub formatters: Vec<String>,
}

impl App {
    /// A path from a client or command, confined to the workspace folders.
    pub fn resolve(&self, raw: &str) -> Result<PathBuf, String> {
        crate::files::confine(raw, &self.workspaces.read().unwrap())
    }

    pub fn status(&self) -> serde_json::Value {
        let clients: Vec<serde_json::Value> = self
            .server
            .clients()
            .iter()
            .map(|c| {
                let i = c.info();
                serde_json::json!({
                    "id": i.id, "pid": i.pid, "name": i.name, "version": i.version,
                    "initialized": i.initialized, "since": unix(i.since),
                })
            })
            .collect();
        serde_json::json!({
            "pid": std::process::id(),
            "port": self.port,
            "ide_name": self.ide_name,
            "workspaces": *self.workspaces.read().unwrap(),
            "state_dir": self.state_dir,
            "started": unix(self.started),
            "uptime_secs": self.started.elapsed().map(|d| d.as_secs()).unwrap_or(0),
            "clients": clients,
            "diffs": self.diffs.list(),
            "tabs": self.editor.tabs().iter().map(|t| serde_json::json!({"path": t.path, "active": t.active, "preview": t.preview})).collect::<Vec<_>>(),
            "selection": self.editor.selection(),
            "documents": self.editor.documents().iter().map(|(p, n)| serde_json::json!({"path": p, "bytes": n})).collect::<Vec<_>>(),
        })
    }
}

pub fn unix(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Called once a client has sent `notifications/initialized`.
pub fn client_ready(_app: &Arc<App>, client: &Arc<Client>) {
    let i = client.info();
    crate::events::emit(serde_json::json!({
        "event": "client_connected", "client": i.id, "name": i.name, "version": i.version,
    }));
}

/// Called once when a connection has ended, whatever the reason.
pub fn client_gone(app: &Arc<App>, client: &Arc<Client>) {
    app.diffs.abandon_client(client.id);
    app.exec.client_gone(client.id);
    let i = client.info();
    crate::events::emit(serde_json::json!({
        "event": "client_disconnected", "client": i.id, "pid": i.pid,
    }));
}

struct Settings {
    workspaces: Vec<PathBuf>,
    ide_name: String,
    port: Option<u16>,
    host: IpAddr,
    config_dir: PathBuf,
    state_dir: PathBuf,
    server: server::Config,
    max_connections: usize,
    mention_max_age: Duration,
    exec: crate::exec::Settings,
    formatters: Vec<String>,
    checks: crate::checkers::Checks,
}

fn seconds(args: &Args, name: &str, default: f64) -> Result<Duration, Fail> {
    let v = args
        .parsed::<f64>(name, "a number of seconds")?
        .unwrap_or(default);
    if !(v > 0.0 && v <= 86_400.0) {
        return Err(Fail::Usage(format!(
            "invalid value for {name} (or its variable): expected a number of seconds between 0 and 86400"
        )));
    }
    Ok(Duration::from_secs_f64(v))
}

fn settings(args: &Args) -> Result<Settings, Fail> {
    if let Some(extra) = args.operands.first() {
        return Err(Fail::Usage(format!(
            "unexpected argument '{extra}' (workspaces are given with --workspace DIR)"
        )));
    }
    let level = args.value("--log-level").unwrap_or_else(|| "info".into());
    let level = crate::log::Level::parse(&level).ok_or_else(|| {
        Fail::Usage(format!(
            "invalid value '{level}' for --log-level: expected error, warn, info or debug"
        ))
    })?;
    crate::log::init(level);
    let mut dirs = args.values("--workspace");
    if dirs.is_empty() {
        dirs.push(".".into());
    }
    let mut workspaces: Vec<PathBuf> = Vec::new();
    for d in &dirs {
        let canon = crate::files::canonical_dir(std::path::Path::new(d))
            .map_err(|e| Fail::Usage(format!("invalid value for --workspace: {e}")))?;
        if !workspaces.contains(&canon) {
            workspaces.push(canon);
        }
    }
    let ide_name = args.value("--ide-name").unwrap_or_else(|| {
        let base = workspaces[0]
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| "/".into());
        format!("ccide ({base})")
    });
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
        crate::warn!(
            "listening on {host}, reachable from other machines: only the token protects this server"
        );
    }
    let interval = seconds(args, "--ping-interval", 5.0)?;
    let timeout = seconds(args, "--ping-timeout", 3.0)?;
    let max_connections = args
        .parsed::<usize>("--max-connections", "a whole number of at least 1")?
        .unwrap_or(64);
    if max_connections == 0 {
        return Err(Fail::Usage(
            "invalid value '0' for --max-connections: expected a whole number of at least 1".into(),
        ));
    }
    let single_client = args.switch("--single-client")?;
    let checks = {
        let mut checkers = Vec::new();
        for spec in args.values("--checker") {
            checkers.push(
                crate::checkers::Checker::parse(&spec)
                    .map_err(|e| Fail::Usage(format!("invalid value for --checker: {e}")))?,
            );
        }
        if !args.switch("--no-default-checkers")? {
            checkers.extend(crate::checkers::defaults(&workspaces[0]));
        }
        crate::checkers::Checks::new(
            checkers,
            seconds(args, "--diagnostics-wait", 1.5)?,
            seconds(args, "--checker-timeout", 30.0)?,
        )
    };
    let config_dir = lockfile::config_dir(args.value("--config-dir").as_deref())?;
    let state_dir = lockfile::state_dir(args.value("--state-dir").as_deref(), &workspaces)?;
    // `ccide workspace add/remove` changes persist on top of the command line's folders.
    let changes = WorkspaceChanges::load(&state_dir);
    for added in &changes.added {
        if added.is_dir() && !workspaces.contains(added) {
            workspaces.push(added.clone());
        }
    }
    if workspaces.iter().any(|w| !changes.removed.contains(w)) {
        workspaces.retain(|w| !changes.removed.contains(w));
    }
    Ok(Settings {
        workspaces,
        ide_name,
        port,
        host,
        config_dir,
        state_dir,
        server: server::Config {
            ping_interval: interval,
            ping_timeout: timeout,
            single_client,
        },
        max_connections,
        mention_max_age: seconds(args, "--mention-max-age", 30.0)?,
        exec: crate::exec::Settings {
            mode: match args.value("--exec").as_deref().unwrap_or("off") {
                "off" => crate::exec::Mode::Off,
                "ask" => crate::exec::Mode::Ask,
                "on" => crate::exec::Mode::On,
                other => {
                    return Err(Fail::Usage(format!(
                        "invalid value '{other}' for --exec: expected off, ask or on"
                    )));
                }
            },
            timeout: seconds(args, "--exec-timeout", 60.0)?,
            approval_timeout: seconds(args, "--exec-approval-timeout", 300.0)?,
        },
        formatters: args.values("--formatter"),
        checks,
    })
}

fn bind(s: &Settings, remembered: Option<u16>) -> Result<TcpListener, String> {
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
            Err(e) => crate::warn!(
                "port {p} from the last run is not available ({e}); moving to a new port, so a Claude Code that was connected must reconnect with /ide"
            ),
        }
    }
    TcpListener::bind((s.host, 0)).map_err(|e| format!("cannot listen on {}: {e}", s.host))
}

/// A started server: what `stop` needs to clean up.
pub struct Running {
    pub app: Arc<App>,
    lock: LockFile,
}

pub fn run(args: &Args) -> Outcome {
    // Before any thread exists, so that every thread inherits the mask and only `sigwait`
    // below ever takes these signals.
    crate::sys::block_termination_signals();
    let running = start(args)?;
    let signal = crate::sys::signal_name(crate::sys::wait_termination_signal());
    crate::info!("{signal} received; shutting down");
    stop(running);
    Ok(crate::cli::EXIT_OK)
}

/// Binds, announces the lock file and starts the threads. The caller must have blocked the
/// termination signals first.
pub fn start(args: &Args) -> Result<Running, Fail> {
    crate::sys::restrict_umask();
    let s = settings(args)?;
    crate::files::private_dir(&s.state_dir, "state directory")?;
    let identity = lockfile::load_identity(&s.state_dir)?;
    let listener = bind(&s, identity.port)?;
    let port = listener
        .local_addr()
        .map_err(|e| format!("cannot read the listening address: {e}"))?
        .port();
    lockfile::save_identity(&s.state_dir, port, &identity.token)?;
    if let Some(old) = identity.port.filter(|p| *p != port) {
        remove_own_stale_lock(&s, old, &identity.token);
    }
    let control_path = s.state_dir.join("control.sock");
    let control = crate::control::bind(&control_path)?;
    let diffs = crate::diffs::Diffs::open(&s.state_dir)?;
    let app = Arc::new(App {
        server: Server::new(s.server),
        workspaces: RwLock::new(s.workspaces.clone()),
        ide_name: s.ide_name.clone(),
        port,
        state_dir: s.state_dir.clone(),
        control_path: control_path.clone(),
        started: SystemTime::now(),
        diffs,
        editor: crate::editor::Editor::open(&s.state_dir, s.mention_max_age),
        diagnostics: crate::diagnostics::Store::open(&s.state_dir),
        stopping: Arc::default(),
        exec: crate::exec::Exec::new(s.exec),
        checks: s.checks,
        config_dir: s.config_dir.clone(),
        token: identity.token.clone(),
        formatters: s.formatters,
    });
    let gate = Gate {
        token: identity.token.clone(),
        extra_hosts: if s.host.is_loopback() {
            Vec::new()
        } else {
            vec![s.host.to_string()]
        },
        any_ip_host: s.host.is_unspecified(),
        max_connections: s.max_connections,
        handshake_timeout: Duration::from_secs(5),
        stopping: app.stopping.clone(),
    };
    let on_open_app = app.clone();
    let on_open: Arc<transport::OnOpen> =
        Arc::new(move |outbox, peer| server::open(&on_open_app, outbox, peer));
    spawn("acceptor", move || {
        transport::run_acceptor(listener, gate, on_open)
    })?;
    let control_app = app.clone();
    spawn("control", move || crate::control::run(control_app, control))?;
    let drop_dir = s.state_dir.join("diagnostics");
    crate::files::private_dir(&drop_dir, "diagnostics drop directory")?;
    let drop_app = app.clone();
    spawn("imports", move || {
        crate::diagnostics::watch_drop_dir(&drop_app, &drop_dir)
    })?;
    let keepalive_app = app.clone();
    let mut watchdog = Watchdog::from_env();
    spawn("keepalive", move || {
        server::keepalive(&keepalive_app.server, |now| watchdog.tick(now))
    })?;
    let lock = LockFile::write(
        &s.config_dir,
        &LockContent {
            port,
            workspaces: &s.workspaces,
            ide_name: &s.ide_name,
            token: &identity.token,
            control: &control_path,
            state: &s.state_dir,
        },
    )?;
    crate::info!(
        "listening on {}:{port} for {} (lock file {})",
        s.host,
        s.workspaces
            .iter()
            .map(|w| w.display().to_string())
            .collect::<Vec<_>>()
            .join(", "),
        lock.path.display()
    );
    log_tools(&app);
    sd_notify("READY=1");
    Ok(Running { app, lock })
}

/// Says at start what the model may run and which tools will be used, for whoever reads the log.
fn log_tools(app: &App) {
    let e = &app.exec.settings;
    match e.mode {
        crate::exec::Mode::Off => {
            crate::info!("executeCode is off (enable with --exec ask or --exec on)")
        }
        mode => crate::info!(
            "executeCode is {} (per-call limit {}, approval limit {})",
            if mode == crate::exec::Mode::Ask {
                "ask"
            } else {
                "on"
            },
            server::human_duration(e.timeout),
            server::human_duration(e.approval_timeout)
        ),
    }
    for c in &app.checks.checkers {
        crate::debug!("checker for {}: {}", c.pattern, c.words.join(" "));
    }
    for f in &app.formatters {
        crate::debug!("formatter {f}");
    }
}

/// Removes the lock file and the control socket and says goodbye to the clients.
pub fn stop(r: Running) {
    sd_notify("STOPPING=1");
    // First refuse new upgrades: the CLI reconnects within milliseconds of a 1001, and a
    // connection accepted now would die with the process while the CLI believes it is live.
    r.app
        .stopping
        .store(true, std::sync::atomic::Ordering::SeqCst);
    r.lock.remove();
    let _ = std::fs::remove_file(&r.app.control_path);
    // 1001 "going away" lets the CLI reconnect to a restarted server on the same port.
    let clients = r.app.server.clients();
    for c in &clients {
        c.outbox.close(1001, "ccide is shutting down");
    }
    let deadline = std::time::Instant::now() + Duration::from_millis(500);
    while clients.iter().any(|c| !c.outbox.is_ended()) && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn spawn(name: &str, f: impl FnOnce() + Send + 'static) -> Result<(), Fail> {
    std::thread::Builder::new()
        .name(name.into())
        .stack_size(crate::transport::THREAD_STACK)
        .spawn(f)
        .map(|_| ())
        .map_err(|e| Fail::Failed(format!("cannot start the {name} thread: {e}")))
}

/// After a move to a new port, the lock of our previous port is stale if it carries our token
/// and its process is gone (a kill -9 left it): remove it so the CLI does not try it.
fn remove_own_stale_lock(s: &Settings, old_port: u16, token: &str) {
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

/// The folders `ccide workspace add/remove` changed, kept in the state directory.
#[derive(Default)]
struct WorkspaceChanges {
    added: Vec<PathBuf>,
    removed: Vec<PathBuf>,
}

impl WorkspaceChanges {
    fn path(state: &std::path::Path) -> PathBuf {
        state.join("workspaces.json")
    }

    fn load(state: &std::path::Path) -> WorkspaceChanges {
        let v: serde_json::Value = std::fs::read(Self::path(state))
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        let list = |k: &str| -> Vec<PathBuf> {
            v[k].as_array()
                .into_iter()
                .flatten()
                .filter_map(|p| p.as_str().map(PathBuf::from))
                .collect()
        };
        WorkspaceChanges {
            added: list("added"),
            removed: list("removed"),
        }
    }

    fn save(&self, state: &std::path::Path) -> Result<(), String> {
        let body = serde_json::json!({"added": self.added, "removed": self.removed}).to_string();
        crate::files::write_atomic(&Self::path(state), body.as_bytes(), 0o600)
            .map_err(|e| format!("cannot save {}: {e}", Self::path(state).display()))
    }
}

impl App {
    /// Adds or removes a workspace folder, persists the change and rewrites the lock file with
    /// the same port and token (as the VS Code extension does when folders change).
    pub fn change_workspace(
        &self,
        add: bool,
        raw: &std::path::Path,
    ) -> Result<Vec<PathBuf>, String> {
        let mut ws = self.workspaces.write().unwrap();
        let dir = match crate::files::canonical_dir(raw) {
            Ok(d) => d,
            Err(_) if !add => raw.to_path_buf(),
            Err(e) => return Err(e),
        };
        let mut changes = WorkspaceChanges::load(&self.state_dir);
        if add {
            if ws.contains(&dir) {
                return Ok(ws.clone());
            }
            ws.push(dir.clone());
            changes.removed.retain(|p| *p != dir);
            changes.added.push(dir.clone());
        } else {
            if !ws.contains(&dir) {
                return Err(format!(
                    "{} is not a workspace folder of this server",
                    dir.display()
                ));
            }
            if ws.len() == 1 {
                return Err(format!(
                    "{} is the only workspace folder; a server needs one",
                    dir.display()
                ));
            }
            ws.retain(|w| *w != dir);
            changes.added.retain(|p| *p != dir);
            changes.removed.push(dir.clone());
        }
        changes.save(&self.state_dir)?;
        sd_notify("RELOADING=1");
        let written = LockFile::write(
            &self.config_dir,
            &LockContent {
                port: self.port,
                workspaces: &ws,
                ide_name: &self.ide_name,
                token: &self.token,
                control: &self.control_path,
                state: &self.state_dir,
            },
        );
        sd_notify("READY=1");
        written?;
        crate::info!(
            "workspace folder {} {}",
            dir.display(),
            if add { "added" } else { "removed" }
        );
        Ok(ws.clone())
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
            sd_notify("WATCHDOG=1");
            self.next = now + every;
        }
    }
}

/// systemd's readiness protocol: a datagram to `$NOTIFY_SOCKET` (an abstract name with '@').
pub fn sd_notify(state: &str) {
    let Some(path) = std::env::var_os("NOTIFY_SOCKET").filter(|p| !p.is_empty()) else {
        return;
    };
    let Ok(sock) = std::os::unix::net::UnixDatagram::unbound() else {
        return;
    };
    let bytes = path.as_encoded_bytes();
    let sent = if let Some(name) = bytes.strip_prefix(b"@") {
        use std::os::linux::net::SocketAddrExt;
        std::os::unix::net::SocketAddr::from_abstract_name(name)
            .and_then(|addr| sock.send_to_addr(state.as_bytes(), &addr))
    } else {
        sock.send_to(state.as_bytes(), &path)
    };
    if let Err(e) = sent {
        crate::warn!("cannot notify systemd ({state}): {e}");
    }
}
