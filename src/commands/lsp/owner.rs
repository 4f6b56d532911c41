//! Which server a directory belongs to. A proposal the editor opens lies in a server's state
//! directory (`<state>/diffs/N/`), outside every workspace: it belongs to the server whose
//! state directory that is, as its lock file says. An editor that starts a `ccide lsp` per
//! project (eglot, kakoune-lsp) starts one for the proposal's directory alone; it finds the
//! server that made the proposal this way, instead of serving the proposal as a new IDE.

use std::path::Path;

use crate::control::FindError;
use crate::lockfile::LockEntry;

/// The server for files in `dir`: the owner of the state directory holding it, else the server
/// whose workspace holds it (or the one on `port`).
pub fn find_server(config: &Path, port: Option<u16>, dir: &Path) -> Result<LockEntry, FindError> {
    let Some(state) = crate::lockfile::state_dir_holding(dir) else {
        return crate::control::find_server(config, port, dir);
    };
    let owns = |l: &LockEntry| {
        let s = l
            .state
            .as_deref()
            .and_then(|s| std::fs::canonicalize(s).ok());
        l.alive && l.control.is_some() && s.as_deref() == Some(&state)
    };
    crate::lockfile::scan(config)
        .into_iter()
        .find(owns)
        .ok_or_else(|| {
            FindError::None(format!(
                "{} is in the state directory of a ccide server that is not running ({}): its proposals went with it",
                dir.display(),
                state.display()
            ))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    #[test]
    fn a_proposal_belongs_to_the_server_of_its_state_directory() {
        let root = std::env::temp_dir().join(format!("ccide-owner-{}", std::process::id()));
        let (config, ws, state) = (root.join("config"), root.join("ws"), root.join("state"));
        let proposal = state.join("diffs/2");
        for d in [config.join("ide"), ws.clone(), proposal.clone()] {
            fs::create_dir_all(d).unwrap();
        }
        let root = fs::canonicalize(&root).unwrap();
        let (ws, state, proposal) = (
            root.join("ws"),
            root.join("state"),
            root.join("state/diffs/2"),
        );
        fs::write(state.join("serve.lock"), "1\n").unwrap();
        fs::write(state.join("server.json"), "{}").unwrap();
        let lock = |port: u16, pid: u32, state: &Path| {
            let v = serde_json::json!({"pid": pid, "workspaceFolders": [ws], "ideName": "ccide (ws)",
                "ccide": {"control": state.join("control.sock"), "state": state}});
            fs::write(config.join(format!("ide/{port}.lock")), v.to_string()).unwrap();
        };
        let port = |r: Result<LockEntry, FindError>| match r {
            Ok(l) => Ok(l.port),
            Err(FindError::None(m) | FindError::Several(m)) => Err(m),
        };
        // No live server owns it: said so, and no other server (the workspace's) is taken.
        lock(1000, std::process::id(), &root.join("elsewhere"));
        let gone = format!(
            "{} is in the state directory of a ccide server that is not running ({}): its proposals went with it",
            proposal.display(),
            state.display()
        );
        assert_eq!(
            port(find_server(&config, None, &proposal)),
            Err(gone.clone())
        );
        // A dead owner is no owner.
        lock(1001, u32::MAX / 2, &state);
        assert_eq!(port(find_server(&config, None, &proposal)), Err(gone));
        lock(1002, std::process::id(), &state);
        assert_eq!(port(find_server(&config, None, &proposal)), Ok(1002));
        assert_eq!(port(find_server(&config, Some(1000), &proposal)), Ok(1002));
        // Elsewhere, as the commands find servers.
        assert_eq!(port(find_server(&config, Some(1000), &ws)), Ok(1000));
        fs::remove_dir_all(&root).unwrap();
    }
}
