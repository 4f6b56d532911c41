//! Discovery (ccide-protocol(7) §1): the lock file the CLI scans, and the state directory that
//! keeps port and token across restarts (the CLI reconnects to the old URL with the old token
//! and never rereads lock files).

use std::fs;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::files;
use crate::json::{self, obj};

/// `$var` if set and not empty, else `$HOME/under_home` (the XDG base directories' rule);
/// None when neither is set.
pub fn env_dir(var: &str, under_home: &str) -> Option<PathBuf> {
    let set = |name: &str| std::env::var_os(name).filter(|d| !d.is_empty());
    set(var)
        .map(PathBuf::from)
        .or_else(|| Some(PathBuf::from(set("HOME")?).join(under_home)))
}

/// `--config-dir`, else `$CLAUDE_CONFIG_DIR`, else `$HOME/.claude`: where the CLI looks.
pub fn config_dir(flag: Option<&str>) -> Result<PathBuf, String> {
    if let Some(d) = flag {
        return Ok(PathBuf::from(d));
    }
    if let Some(d) = env_dir("CLAUDE_CONFIG_DIR", ".claude") {
        return Ok(d);
    }
    Err("cannot tell where Claude Code looks for IDE lock files: HOME and CLAUDE_CONFIG_DIR are both unset. Pass --config-dir DIR (the claude config directory, usually ~/.claude) or set CLAUDE_CONFIG_DIR.".into())
}

/// `--state-dir`, else `$STATE_DIRECTORY` (systemd), else `$XDG_STATE_HOME/ccide/<id>`, else
/// `~/.local/state/ccide/<id>`, where `<id>` names the workspace set.
pub fn state_dir(flag: Option<&str>, workspaces: &[PathBuf]) -> Result<PathBuf, String> {
    if let Some(d) = flag {
        return Ok(PathBuf::from(d));
    }
    if let Some(d) = std::env::var("STATE_DIRECTORY")
        .ok()
        .filter(|d| !d.is_empty())
    {
        // systemd separates several StateDirectory= entries with ':'; the first is ours.
        return Ok(PathBuf::from(d.split(':').next().unwrap_or(&d)));
    }
    if let Some(d) = env_dir("XDG_STATE_HOME", ".local/state") {
        return Ok(d.join("ccide").join(workspace_id(workspaces)));
    }
    Err("cannot choose a state directory: HOME, XDG_STATE_HOME and STATE_DIRECTORY are unset. Pass --state-dir DIR.".into())
}

/// `<basename>-<16 hex digits>`: readable, and distinct for distinct workspace sets.
pub fn workspace_id(workspaces: &[PathBuf]) -> String {
    let mut fnv = crate::text::Fnv::default();
    for w in workspaces {
        fnv.write(w.as_os_str().as_encoded_bytes());
        fnv.write(&[0]);
    }
    let h = fnv.finish();
    let base: String = workspaces
        .first()
        .and_then(|w| w.file_name())
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "root".into())
        .chars()
        .map(|c| {
            if c.is_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .take(40)
        .collect();
    format!("{base}-{h:016x}")
}

/// 64 bytes from the OS CSPRNG, base64url without padding.
pub fn new_token() -> Result<String, String> {
    let mut bytes = [0u8; 64];
    crate::sys::random_bytes(&mut bytes)
        .map_err(|e| format!("cannot read random bytes for the token: {e}"))?;
    Ok(base64url(&bytes))
}

/// base64url without padding (RFC 4648 §5): each 3 bytes are 4 characters, a last 1 or 2
/// bytes 2 or 3. (The base64 crate cost 6 KB of binary for these 64 bytes.)
fn base64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | u32::from(b) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(char::from(ALPHABET[(n >> (18 - 6 * i) & 63) as usize]));
        }
    }
    out
}

/// What survives a restart so the CLI's reconnect to the old URL and token succeeds.
pub struct Identity {
    pub port: Option<u16>,
    pub token: String,
    /// `server.json` as read, so that an unchanged one is not written again.
    saved: Vec<u8>,
}

const IDENTITY_FILE: &str = "server.json";

pub fn load_identity(state: &Path) -> Result<Identity, String> {
    let bytes = fs::read(state.join(IDENTITY_FILE)).unwrap_or_default();
    let saved: Option<Value> = serde_json::from_slice(&bytes).ok();
    let token = saved
        .as_ref()
        .and_then(|v| v["token"].as_str())
        .filter(|t| t.len() >= 32)
        .map(String::from);
    let port = saved
        .as_ref()
        .and_then(|v| v["port"].as_u64())
        .and_then(|p| u16::try_from(p).ok())
        .filter(|p| *p != 0);
    Ok(Identity {
        port,
        token: match token {
            Some(t) => t,
            None => new_token()?,
        },
        saved: bytes,
    })
}

/// Puts `server.json` in place (renamed over the old one) when it changes; returns whether it
/// was written, and then `sync_identity` makes it durable.
pub fn save_identity(state: &Path, port: u16, id: &Identity) -> Result<bool, String> {
    let path = state.join(IDENTITY_FILE);
    let body = identity_body(port, &id.token);
    // A restart on the same port writes nothing.
    if id.saved == body.as_bytes() {
        return Ok(false);
    }
    files::write_volatile(&path, body.as_bytes(), 0o600)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(true)
}

/// Writes `server.json` again (durably), as after its state directory was deleted.
pub fn rewrite_identity(state: &Path, port: u16, token: &str) -> Result<(), String> {
    let path = state.join(IDENTITY_FILE);
    let body = identity_body(port, token);
    files::write_atomic(&path, body.as_bytes(), 0o600)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// `server.json`'s contents.
fn identity_body(port: u16, token: &str) -> String {
    obj! {"port": port, "token": token}.to_string()
}

/// Syncs `server.json` and the state directory to disk.
pub fn sync_identity(state: &Path) {
    let path = state.join(IDENTITY_FILE);
    if let Err(e) = files::sync(&path) {
        crate::log::warn!("cannot sync {} to disk: {e}", path.display());
    }
}

/// This process's claim on its state directory (see `claim_state_dir`), held until it ends.
pub struct Claim {
    /// `<state>/serve.lock`, locked.
    pub file: fs::File,
    /// The abstract socket named after the directory, if it could be bound.
    _name: Option<std::os::unix::net::UnixListener>,
}

/// Claims the state directory for this process, so two servers can never share one (two lock
/// files for the same folder make the CLI connect to neither): an exclusive `flock` on
/// `<state>/serve.lock` (which holds across pid namespaces), and an abstract Unix socket named
/// after the directory, which outlives the directory: deleted under a running server, it is
/// not taken by another server of the same user before the first one has made it again.
pub fn claim_state_dir(state: &Path) -> Result<Claim, String> {
    let file = lock_state_dir(state)?;
    let name = fs::canonicalize(state).map(|p| {
        format!(
            "ccide-state-{:016x}",
            crate::text::hash(p.as_os_str().as_encoded_bytes())
        )
    });
    let name = match name.map(|n| crate::sys::hold_abstract_name(n.as_bytes())) {
        Ok(Ok(l)) => Some(l),
        Ok(Err(Some((uid, pid)))) if uid == crate::sys::getuid() => {
            return Err(held_by(&pid.to_string(), state));
        }
        // Another user's socket of that name, or none to be had: the flock still holds.
        _ => None,
    };
    write_pid(&file);
    Ok(Claim { file, _name: name })
}

/// Takes `<state>/serve.lock` (again, when the directory was made anew) and writes this
/// process's pid in it.
pub fn reclaim_state_dir(state: &Path) -> Result<fs::File, String> {
    let file = lock_state_dir(state)?;
    write_pid(&file);
    Ok(file)
}

fn held_by(pid: &str, state: &Path) -> String {
    format!(
        "another ccide serve{} already runs with the state directory {}: use it (`claude --ide` in the folder connects to it; `ccide status` there shows it), or stop it before starting a new one. Only a server for other folders takes a state directory of its own (--state-dir): two for one folder would both announce it to Claude Code.",
        if pid.is_empty() {
            String::new()
        } else {
            format!(" (pid {pid})")
        },
        state.display()
    )
}

/// The exclusive lock on `<state>/serve.lock`, or who holds it.
fn lock_state_dir(state: &Path) -> Result<fs::File, String> {
    use std::io::{Read, Seek};
    let path = state.join("serve.lock");
    let mut f = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    let mine = crate::sys::try_lock_exclusive(&f)
        .map_err(|e| format!("cannot lock {}: {e}", path.display()))?;
    if mine {
        return Ok(f);
    }
    // The holder writes its pid just after taking the lock: a start racing it can read the
    // file empty, or with a previous server's pid, for a moment. A holder whose pid does not
    // run is a child of a server that just exited, between its fork and its exec (it has the
    // server's descriptors until then): the lock is free once it has run its program.
    let mut pid = String::new();
    for _ in 0..50 {
        pid.clear();
        let _ = f.rewind();
        // Read as `files` reads an open file (one instance of std's read loop); like
        // `read_to_string`, nothing unless all of it was read and is UTF-8.
        let mut bytes = Vec::new();
        if f.by_ref().take(u64::MAX).read_to_end(&mut bytes).is_ok() {
            pid = String::from_utf8(bytes).unwrap_or_default();
        }
        if pid
            .trim()
            .parse::<i64>()
            .is_ok_and(crate::sys::process_alive)
        {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
        if crate::sys::try_lock_exclusive(&f).unwrap_or(false) {
            return Ok(f);
        }
    }
    Err(held_by(pid.trim(), state))
}

/// Padded to a fixed width and written over the previous pid: cutting the file first would
/// cost a journal commit (a quarter of a millisecond) before the lock file appears.
fn write_pid(f: &fs::File) {
    let _ = std::os::unix::fs::FileExt::write_all_at(
        f,
        format!("{:<10}\n", std::process::id()).as_bytes(),
        0,
    );
    if f.metadata().is_ok_and(|m| m.len() > 11) {
        let _ = f.set_len(11);
    }
}

/// The ccide state directory holding `path` (or `path` itself), if any: the nearest ancestor
/// with the files every server's state directory has (`serve.lock` and `server.json`). A
/// proposal opened in an editor lies in one; it belongs to that server, never to a workspace.
pub fn state_dir_holding(path: &Path) -> Option<PathBuf> {
    path.ancestors()
        .find(|d| d.join("serve.lock").is_file() && d.join(IDENTITY_FILE).is_file())
        .map(Path::to_path_buf)
}

/// Whether the server of a ccide lock is proven gone, and if not, why it is kept. Its pid not
/// running here proves nothing on its own: a server in another pid namespace (a container
/// sharing ~/.claude) has a pid this one does not know. Proof is: nobody holds its state
/// directory's lock (flock works across pid namespaces), or, for a server too old to hold
/// one, its pid namespace is ours; and in both cases its control socket refuses.
pub fn proven_dead(l: &LockEntry) -> Result<(), String> {
    // A pid that runs may be another process's now: a control socket that refuses says more.
    if l.alive && !l.control_refuses() {
        return Err("its process runs".into());
    }
    let state_free = match l.state.as_ref().map(|s| s.join("serve.lock")) {
        Some(p) if p.exists() => match fs::OpenOptions::new().read(true).open(&p) {
            Ok(f) => crate::sys::try_lock_exclusive(&f).unwrap_or(false),
            Err(_) => false,
        },
        _ => l.pidns.is_some() && l.pidns == pid_namespace(),
    };
    if !state_free {
        return Err(if l.pidns.is_some() && l.pidns != pid_namespace() {
            "it was written in another pid namespace (a container?), where its server may run"
                .into()
        } else {
            "its state directory is still held by a server".into()
        });
    }
    if let Some(c) = &l.control
        && std::os::unix::net::UnixStream::connect(c).is_ok()
    {
        return Err("its control socket still answers".into());
    }
    Ok(())
}

/// The lock file of a running server.
pub struct LockFile {
    pub path: PathBuf,
}

pub struct LockContent<'a> {
    pub port: u16,
    pub workspaces: &'a [PathBuf],
    pub ide_name: &'a str,
    pub token: &'a str,
    pub control: &'a Path,
    pub state: &'a Path,
}

impl LockFile {
    /// Writes `<config>/ide/<port>.lock` atomically (a new file renamed into place), mode 0600
    /// in a 0700 directory.
    pub fn write(config: &Path, c: &LockContent) -> Result<LockFile, String> {
        let dir = config.join("ide");
        // Claude Code reads the lock files where it keeps its configuration: both must be told
        // of another directory, not only ccide.
        let advice = "Claude Code looks for IDEs there: point both at a directory of your own with CLAUDE_CONFIG_DIR=DIR (or serve --config-dir DIR and CLAUDE_CONFIG_DIR=DIR for claude)";
        files::private_dir(&dir, "lock file directory").map_err(|e| format!("{e}; {advice}"))?;
        let path = dir.join(format!("{}.lock", c.port));
        let folders: Vec<String> = c
            .workspaces
            .iter()
            .map(|w| w.to_string_lossy().into_owned())
            .collect();
        let body = obj! {
            "pid": std::process::id(),
            "workspaceFolders": folders,
            "ideName": c.ide_name,
            "transport": "ws",
            "runningInWindows": false,
            "authToken": c.token,
            // Not read by the CLI: how ccide's own commands find this server's control socket,
            // and the pid namespace the pid belongs to (for `ccide gc`).
            "ccide": obj! {"control": json::path(c.control), "state": json::path(c.state), "pidns": pid_namespace()},
        };
        // Renamed into place, so complete whenever it is seen; not synced to disk: it describes
        // this process only, and after a crash of the machine it would name a dead server.
        files::write_volatile(&path, body.to_string().as_bytes(), 0o600).map_err(|e| {
            format!(
                "cannot write the lock file {}: {e}; {advice}",
                path.display()
            )
        })?;
        // The write keeps an old file's mode; a lock must be 0600 whatever was there.
        use std::os::unix::fs::PermissionsExt;
        let _ = fs::set_permissions(&path, fs::Permissions::from_mode(0o600));
        Ok(LockFile { path })
    }

    pub fn remove(&self) {
        if let Err(e) = fs::remove_file(&self.path)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            crate::log::warn!("cannot remove the lock file {}: {e}", self.path.display());
        }
    }
}

/// What ccide's clients check before they follow a lock file to a control socket
/// (ccide-protocol(7) §1.1): the rule serve applies to the lock directory (ours, not writable
/// by group or others), and the lock file ours. Otherwise another user could point them at a
/// socket of their own and be sent the session, file text included.
pub fn check_lock_is_ours(lock: &Path) -> Result<(), String> {
    let advice = "ccide follows only lock files of yours: remove it, or point ccide and Claude Code at a directory of your own with CLAUDE_CONFIG_DIR=DIR";
    if let Some(dir) = lock.parent() {
        files::check_private_dir(dir, "lock file directory")
            .map_err(|e| format!("{e}; {advice}"))?;
    }
    let meta = fs::metadata(lock)
        .map_err(|e| format!("cannot read the lock file {}: {e}", lock.display()))?;
    let (uid, _) = crate::sys::owner_and_mode(&meta);
    if uid != crate::sys::getuid() {
        return Err(format!(
            "refusing the lock file {}: it belongs to uid {uid}, not to you (uid {}); {advice}",
            lock.display(),
            crate::sys::getuid()
        ));
    }
    Ok(())
}

/// The pid namespace of this process (the inode of /proc/self/ns/pid): a pid means the same
/// process only within one.
pub fn pid_namespace() -> Option<u64> {
    use std::os::unix::fs::MetadataExt;
    fs::metadata("/proc/self/ns/pid").ok().map(|m| m.ino())
}

/// A lock file found in `<config>/ide`, as ccide's commands see it.
pub struct LockEntry {
    pub port: u16,
    pub path: PathBuf,
    pub pid: i64,
    pub workspaces: Vec<PathBuf>,
    pub ide_name: String,
    pub control: Option<PathBuf>,
    /// The server's state directory (ccide locks only).
    pub state: Option<PathBuf>,
    /// The pid namespace its pid belongs to, when the server recorded it.
    pub pidns: Option<u64>,
    pub alive: bool,
}

impl LockEntry {
    /// Whether its server is certainly not there although its pid may run (a pid reused by
    /// another process after a `kill -9`): its control socket refuses connections (nobody
    /// listens: ECONNREFUSED) or is gone (ENOENT). Any other failure (no permission, a full
    /// backlog) proves nothing. Not a ccide lock, or not ours (`check_lock_is_ours`: the
    /// socket it names is never so much as connected to): false.
    pub fn control_refuses(&self) -> bool {
        use std::io::ErrorKind::{ConnectionRefused, NotFound};
        let Some(c) = &self.control else { return false };
        if check_lock_is_ours(&self.path).is_err() {
            return false;
        }
        match std::os::unix::net::UnixStream::connect(c) {
            Ok(_) => false,
            Err(e) => matches!(e.kind(), ConnectionRefused | NotFound),
        }
    }

    /// Whether its server may be reached: its pid runs and its control socket does not refuse.
    pub fn reachable(&self) -> bool {
        self.alive && !self.control_refuses()
    }

    /// The workspace folders, comma-separated, for people.
    pub fn folders(&self) -> String {
        self.workspaces
            .iter()
            .map(|w| w.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    }
}

pub fn scan(config: &Path) -> Vec<LockEntry> {
    let mut out = Vec::new();
    let Ok(entries) = fs::read_dir(config.join("ide")) else {
        return out;
    };
    for e in entries.flatten() {
        let path = e.path();
        let Some(port) = path
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".lock"))
            .and_then(|p| p.parse::<u16>().ok())
        else {
            continue;
        };
        let Some(v) = fs::read(&path)
            .ok()
            .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
        else {
            continue;
        };
        let pid = v["pid"].as_i64().unwrap_or(0);
        out.push(LockEntry {
            port,
            pid,
            alive: crate::sys::process_alive(pid),
            workspaces: v["workspaceFolders"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .filter_map(|w| w.as_str())
                        .map(PathBuf::from)
                        .collect()
                })
                .unwrap_or_default(),
            ide_name: v["ideName"].as_str().unwrap_or("").to_string(),
            control: v["ccide"]["control"].as_str().map(PathBuf::from),
            state: v["ccide"]["state"].as_str().map(PathBuf::from),
            pidns: v["ccide"]["pidns"].as_u64(),
            path,
        });
    }
    crate::text::sort_by_bytes(&mut out, |f| f.port.to_be_bytes().to_vec());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_64_random_bytes_base64url() {
        let a = new_token().unwrap();
        assert_eq!(a.len(), 86);
        assert!(
            a.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        );
        assert_ne!(a, new_token().unwrap());
    }

    #[test]
    fn base64url_follows_rfc_4648() {
        for (bytes, text) in [
            (&b""[..], ""),
            (b"f", "Zg"),
            (b"fo", "Zm8"),
            (b"foo", "Zm9v"),
            (b"foob", "Zm9vYg"),
            (b"fooba", "Zm9vYmE"),
            (b"foobar", "Zm9vYmFy"),
            (&[0xfb, 0xff, 0xbf], "-_-_"),
            (&[0, 0x10, 0x83, 0x10, 0x51, 0x87], "ABCDEFGH"),
        ] {
            assert_eq!(base64url(bytes), text);
        }
    }

    #[test]
    fn workspace_id_is_stable_and_distinct() {
        let a = workspace_id(&[PathBuf::from("/srv/my app")]);
        assert_eq!(a, workspace_id(&[PathBuf::from("/srv/my app")]));
        // Existing state directories are named so: the name must never change.
        assert_eq!(a, "my_app-8b13f767bd135b6b");
        assert_ne!(a, workspace_id(&[PathBuf::from("/srv/my app2")]));
    }

    /// A server's child between fork and exec holds the lock of its state directory a moment
    /// after the server exited: the next server takes it once it is let go.
    #[test]
    fn a_state_directory_held_for_a_server_that_exited_is_taken_once_let_go() {
        let state = std::env::temp_dir().join(format!("ccide-held-{}", std::process::id()));
        fs::create_dir_all(&state).unwrap();
        let held = fs::File::create(state.join("serve.lock")).unwrap();
        assert!(crate::sys::try_lock_exclusive(&held).unwrap());
        // The exited server's pid (beyond any pid_max).
        fs::write(state.join("serve.lock"), "2000000000\n").unwrap();
        let letting_go = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(100));
            drop(held);
        });
        let taken = lock_state_dir(&state);
        letting_go.join().unwrap();
        assert!(taken.is_ok(), "{:?}", taken.err());
        fs::remove_dir_all(&state).unwrap();
    }

    #[test]
    fn a_state_directory_is_found_from_inside_it() {
        let root = std::env::temp_dir().join(format!("ccide-statedir-{}", std::process::id()));
        let state = root.join("state");
        let proposal = state.join("diffs/3");
        fs::create_dir_all(&proposal).unwrap();
        fs::write(state.join("serve.lock"), "1\n").unwrap();
        assert_eq!(state_dir_holding(&proposal), None, "serve.lock alone");
        fs::write(state.join(IDENTITY_FILE), "{}").unwrap();
        assert_eq!(
            state_dir_holding(&proposal.join("main.py")),
            Some(state.clone())
        );
        assert_eq!(state_dir_holding(&state), Some(state.clone()));
        assert_eq!(state_dir_holding(&root), None);
        fs::remove_dir_all(&root).unwrap();
    }
}
