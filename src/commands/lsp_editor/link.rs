//! The link to `ccide serve`: which running server a file belongs to, the editor session
//! attached to it, and when `ccide lsp` may serve a folder itself (the stand-in). The loop
//! sees servers only through `Servers` and `Session`: in production the lock files and the
//! control socket (`Sockets`), in unit tests the control handler called on a test state.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::cli::{Args, Fail};
use crate::control::Control;
use crate::control::protocol::{LspClient, Request};
use crate::lsp::connection::{self, Received, Sender};
use crate::proc::Deliver;
use std::os::fd::OwnedFd;

/// A running server, as its lock file describes it.
#[derive(Clone, Debug, PartialEq)]
pub struct Found {
    /// What names the server across its restarts: its control socket, in its state directory.
    pub key: PathBuf,
    pub port: u16,
    pub workspaces: Vec<PathBuf>,
    /// Its state directory, physical.
    pub state: Option<PathBuf>,
    /// Served by this process: a stand-in.
    pub own: bool,
}

impl Found {
    /// Its workspace folders, for a message.
    pub fn folders(&self) -> String {
        let names: Vec<String> = self
            .workspaces
            .iter()
            .map(|w| w.display().to_string())
            .collect();
        names.join(", ")
    }
}

/// An attached editor session (ccide-protocol(7) §9.2 `attach`): the server holds what it
/// opens and buffers until the session ends, which dropping it does.
pub trait Session {
    /// The whole answer to one request, `ok` or not; Err when the server could not be asked or
    /// did not answer (it is gone).
    fn call(&mut self, req: &Request) -> Result<Value, String>;
}

pub trait Servers {
    /// The live ccide servers.
    fn list(&mut self) -> Vec<Found>;
    /// Attaches a session for `editor` (subscribed to the server's events first, so a diff
    /// opened in between is in both, never in none); also returns the answer to `attach`.
    /// The server's events go to `deliver`: `Some(event)`, then `None` once the stream ended
    /// (the server stopped or restarts).
    fn attach(
        &mut self,
        server: &Found,
        editor: &str,
        deliver: Deliver<Option<Value>>,
    ) -> Result<(Box<dyn Session>, Value), String>;
    /// An LSP connection to the server's language servers (ccide-protocol(7) §11.8), for the
    /// editor's navigation: what it sends goes to `deliver`.
    fn navigate(
        &mut self,
        server: &Found,
        client: LspClient,
        deliver: Deliver<Received>,
    ) -> Result<Sender, String>;
    /// Serves `root` in this process until `stop`.
    fn serve(&mut self, root: &Path) -> Result<(), String>;
    fn stop(&mut self, root: &Path);
}

/// How a directory's files find their server.
#[derive(Debug, PartialEq)]
pub enum Choice<'a> {
    One(&'a Found),
    None,
    /// Several servers serve the same folder, nearest of all.
    Several(Vec<&'a Found>),
}

/// How deep the nearest workspace folder of `s` holding `dir` lies (None: none holds it).
fn depth(s: &Found, dir: &Path) -> Option<usize> {
    s.workspaces
        .iter()
        .filter(|w| dir.starts_with(w))
        .map(|w| w.components().count())
        .max()
}

/// The server files in `dir` belong to. In a server's state directory (`owner`: a proposal,
/// `<state>/diffs/N/`), that server, whatever else is asked: an editor that starts a `ccide lsp`
/// per project (eglot, kakoune-lsp) starts one for a proposal alone, which must reach the server
/// that made it. Otherwise with `port`, that server; else the nearest running server whose
/// workspace holds `dir` (the deepest folder), and this process's own stand-in only when no
/// other server holds it.
pub fn choose<'a>(
    servers: &'a [Found],
    port: Option<u16>,
    dir: &Path,
    owner: Option<&Path>,
) -> Choice<'a> {
    if let Some(state) = owner {
        return servers
            .iter()
            .find(|s| s.state.as_deref() == Some(state))
            .map_or(Choice::None, Choice::One);
    }
    if let Some(p) = port {
        return servers
            .iter()
            .find(|s| s.port == p)
            .map_or(Choice::None, Choice::One);
    }
    for own in [false, true] {
        let held: Vec<(&Found, usize)> = servers
            .iter()
            .filter(|s| s.own == own)
            .filter_map(|s| Some((s, depth(s, dir)?)))
            .collect();
        let Some(nearest) = held.iter().map(|h| h.1).max() else {
            continue;
        };
        let mut at: Vec<&Found> = held
            .into_iter()
            .filter(|h| h.1 == nearest)
            .map(|h| h.0)
            .collect();
        return match at.len() {
            1 => Choice::One(at.remove(0)),
            _ => Choice::Several(at),
        };
    }
    Choice::None
}

/// Another process's server that a stand-in for `root` would overlap: one serving `root`, a
/// folder inside it or above it. The CLI connects only when exactly one lock file holds its
/// directory (ccide-protocol(7) §1.3): a stand-in for `~` beside the project's server for
/// `~/proj` would leave Claude Code in `~/proj` with no IDE at all. So a stand-in never starts
/// beside such a server, and stops when one appears.
pub fn overlapping<'a>(servers: &'a [Found], root: &Path) -> Option<&'a Found> {
    servers.iter().find(|s| {
        !s.own
            && s.workspaces
                .iter()
                .any(|w| crate::workspaces::nested(w, root))
    })
}

/// The servers of the lock files in the config directory, reached through their control
/// sockets; stand-ins run in this process.
pub struct Sockets {
    pub config: PathBuf,
    pub served: Vec<(PathBuf, super::super::serve::Started)>,
}

/// How long a request to the server may take: the editor waits on it.
const TIMEOUT: Duration = Duration::from_secs(5);

/// An editor session: its request connection, and the way to end its event stream (serve
/// never reads that connection, so only this end can close it).
struct Attached(Control, std::os::unix::net::UnixStream);

impl Session for Attached {
    fn call(&mut self, req: &Request) -> Result<Value, String> {
        self.0.call(req)
    }
}

impl Drop for Attached {
    /// The session is over (lost, handed over, released): its event stream and the thread
    /// reading it end too, rather than one more of each per reconnection.
    fn drop(&mut self) {
        let _ = self.1.shutdown(std::net::Shutdown::Both);
    }
}

impl Servers for Sockets {
    fn list(&mut self) -> Vec<Found> {
        let me = i64::from(std::process::id());
        crate::lockfile::scan(&self.config)
            .into_iter()
            .filter(|l| l.alive)
            // Another user's lock (or one in a directory others can write) names no server
            // of ours (ccide-protocol(7) §1.1); a stand-in started instead says why.
            .filter(|l| crate::lockfile::check_lock_is_ours(&l.path).is_ok())
            .filter_map(|l| {
                Some(Found {
                    key: l.control?,
                    port: l.port,
                    workspaces: l.workspaces,
                    state: l.state.and_then(|s| std::fs::canonicalize(s).ok()),
                    own: l.pid == me,
                })
            })
            .collect()
    }

    fn attach(
        &mut self,
        server: &Found,
        editor: &str,
        deliver: Deliver<Option<Value>>,
    ) -> Result<(Box<dyn Session>, Value), String> {
        let err = |e: std::io::Error| format!("{}: {e}", server.key.display());
        let mut events = Control::open(&server.key).map_err(err)?;
        events.set_timeout(Some(TIMEOUT))?;
        let mut events = events.subscribe()?;
        let mut session = Control::open(&server.key).map_err(err)?;
        session.set_timeout(Some(TIMEOUT))?;
        let answer = session.attach(editor)?;
        let closer = events.closer().map_err(err)?;
        crate::proc::spawn_thread("lsp-events", move || {
            while let Ok(v) = events.next() {
                deliver(Some(v));
            }
            deliver(None);
        })
        .map_err(|e| format!("cannot start a thread: {e}"))?;
        Ok((Box::new(Attached(session, closer)), answer))
    }

    fn navigate(
        &mut self,
        server: &Found,
        client: LspClient,
        deliver: Deliver<Received>,
    ) -> Result<Sender, String> {
        let c = Control::open(&server.key).map_err(|e| format!("{}: {e}", server.key.display()))?;
        // serve says nothing before it is asked: nothing was read ahead of the answer.
        let (socket, _) = c.into_lsp(client)?;
        let e = |e: std::io::Error| format!("the LSP connection: {e}");
        let input = std::fs::File::from(OwnedFd::from(socket.try_clone().map_err(e)?));
        let output = std::fs::File::from(OwnedFd::from(socket));
        connection::start(
            "lsp-nav",
            connection::reader(input),
            output,
            64 << 20,
            deliver,
        )
        .map_err(e)
    }

    /// The stand-in keeps its own state directory (beside the one `ccide serve` would use for
    /// the folder), so the project's own server can always start again and take over.
    fn serve(&mut self, root: &Path) -> Result<(), String> {
        // As its lock file names it, which is how `stop` is asked for it.
        let root = &crate::files::canonical_dir(root)?;
        let ws = [root.to_path_buf()];
        let usual = crate::lockfile::state_dir(None, &ws)?;
        let state = usual.with_file_name(format!(
            "{}{}",
            usual.file_name().unwrap_or_default().to_string_lossy(),
            crate::control::client::STAND_IN_STATE
        ));
        let argv = [
            "--workspace".into(),
            root.to_string_lossy().into_owned(),
            "--state-dir".into(),
            state.to_string_lossy().into_owned(),
            "--config-dir".into(),
            self.config.to_string_lossy().into_owned(),
            "--log-level".into(),
            "warn".into(),
        ];
        let started = Args::parse(&super::super::serve::COMMAND, &argv)
            .and_then(|a| super::super::serve::start(&a));
        match started {
            Ok(r) => {
                self.served.push((root.to_path_buf(), r));
                Ok(())
            }
            Err(Fail::Usage(m) | Fail::Failed(m)) => Err(m),
        }
    }

    fn stop(&mut self, root: &Path) {
        if let Some(k) = self.served.iter().position(|s| s.0 == root) {
            super::super::serve::stop(self.served.remove(k).1);
        }
    }
}

impl Drop for Sockets {
    fn drop(&mut self) {
        for (_, r) in self.served.drain(..) {
            super::super::serve::stop(r);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(port: u16, ws: &[&str], own: bool) -> Found {
        Found {
            key: PathBuf::from(format!("/state/{port}/control.sock")),
            port,
            workspaces: ws.iter().map(PathBuf::from).collect(),
            state: Some(PathBuf::from(format!("/state/{port}"))),
            own,
        }
    }

    fn port_of(c: Choice) -> Result<u16, Vec<u16>> {
        match c {
            Choice::One(s) => Ok(s.port),
            Choice::None => Err(Vec::new()),
            Choice::Several(v) => Err(v.iter().map(|s| s.port).collect()),
        }
    }

    /// A file belongs to the nearest running server whose workspace holds it; this process's
    /// own stand-in is the last resort.
    #[test]
    fn the_nearest_server_wins_and_a_stand_in_comes_last() {
        let home = server(1, &["/home/u"], false);
        let proj = server(2, &["/home/u/proj", "/srv/x"], false);
        let own = server(3, &["/home/u/proj/sub"], true);
        let all = [home.clone(), proj.clone(), own.clone()];
        let at = |d: &str| port_of(choose(&all, None, Path::new(d), None));
        assert_eq!(at("/home/u/proj/src"), Ok(2));
        assert_eq!(at("/home/u/notes"), Ok(1));
        assert_eq!(at("/srv/x"), Ok(2));
        // The stand-in is deeper, but another process's server holds the folder.
        assert_eq!(at("/home/u/proj/sub"), Ok(2));
        assert_eq!(at("/elsewhere"), Err(vec![]));
        // A folder is held by its own components only: /home/u does not hold /home/user.
        assert_eq!(at("/home/user"), Err(vec![]));
        assert_eq!(
            port_of(choose(
                std::slice::from_ref(&own),
                None,
                Path::new("/home/u/proj/sub/a"),
                None
            )),
            Ok(3)
        );
        // Two servers for one folder, as the CLI sees it: neither is chosen.
        let twin = server(4, &["/home/u/proj"], false);
        let two = [home, proj.clone(), twin];
        assert_eq!(
            port_of(choose(&two, None, Path::new("/home/u/proj"), None)),
            Err(vec![2, 4])
        );
        // --port names one server for every file, held or not.
        assert_eq!(
            port_of(choose(&all, Some(3), Path::new("/elsewhere"), None)),
            Ok(3)
        );
        assert_eq!(
            port_of(choose(&all, Some(9), Path::new("/home/u"), None)),
            Err(vec![])
        );
    }

    /// A proposal lies in its server's state directory, outside every workspace: it belongs to
    /// the server whose state directory that is, even with --port, and to no other.
    #[test]
    fn a_proposal_belongs_to_the_server_of_its_state_directory() {
        let all = [server(1, &["/w"], false), server(2, &["/w/x"], false)];
        let at = |d: &str, port, owner: &str| {
            port_of(choose(&all, port, Path::new(d), Some(Path::new(owner))))
        };
        assert_eq!(at("/state/2/diffs/1", None, "/state/2"), Ok(2));
        assert_eq!(at("/state/1/diffs/1", Some(2), "/state/1"), Ok(1));
        assert_eq!(at("/state/3/diffs/1", None, "/state/3"), Err(vec![]));
    }

    #[test]
    fn a_stand_in_overlaps_servers_of_its_folder_inside_or_above() {
        let all = [
            server(1, &["/home/u/proj"], false),
            server(2, &["/home/u/other"], true),
        ];
        let over = |root: &str| overlapping(&all, Path::new(root)).map(|s| s.port);
        assert_eq!(over("/home/u"), Some(1));
        assert_eq!(over("/home/u/proj"), Some(1));
        assert_eq!(over("/home/u/proj/sub"), Some(1));
        // Its own servers and unrelated folders do not count.
        assert_eq!(over("/home/u/other"), None);
        assert_eq!(over("/home/u/pro"), None);
    }
}
