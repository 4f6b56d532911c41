//! The trust boundary (ccide-protocol(7) §14): opening a repository runs no program it ships
//! unless the user trusts it (`serve --trust-workspace`). One rule for every built-in (checker,
//! formatter, language server): a program is found only in an absolute PATH directory outside
//! the workspace folders, is run by the path found, and what it runs in turn is looked up in
//! the same directories (its PATH holds only those). A relative PATH entry (`.`,
//! `node_modules/.bin`) would find a program in the child's working directory, a workspace.
//! What the user names (`--checker`, `--formatter`, `--lsp`) runs as named, in serve's
//! environment.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

/// Whether `p` lies inside one of `workspaces` (through symlinks too), or is relative (so
/// found from a working directory, which is a workspace).
pub fn inside(workspaces: &[PathBuf], p: &Path) -> bool {
    let real = std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    !p.is_absolute()
        || workspaces
            .iter()
            .any(|w| p.starts_with(w) || real.starts_with(w))
}

/// Whether a built-in may run `program` for `workspaces`: trusted, or it lies outside them.
pub fn allowed(program: &Path, workspaces: &[PathBuf], trusted: bool) -> bool {
    trusted || !inside(workspaces, program)
}

/// The directories of serve's PATH a built-in is looked up in: the absolute ones, and unless
/// `trusted` only those outside every workspace folder.
fn search_dirs(workspaces: &[PathBuf], trusted: bool) -> Vec<PathBuf> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .filter(|d| d.is_absolute() && allowed(d, workspaces, trusted))
        .collect()
}

/// Where the built-in `program` is, looked up as `search_dirs` says; a program that is a
/// symlink into a workspace is not taken either (unless `trusted`).
pub fn find(program: &str, workspaces: &[PathBuf], trusted: bool) -> Option<PathBuf> {
    crate::proc::find_in(search_dirs(workspaces, trusted), program)
        .filter(|p| allowed(p, workspaces, trusted))
}

/// The PATH a built-in's process gets: unless `trusted`, serve's without its relative entries
/// and those inside a workspace folder (None: serve's own, unchanged).
pub fn child_path(workspaces: &[PathBuf], trusted: bool) -> Option<OsString> {
    if trusted {
        return None;
    }
    // Joining paths that came out of PATH cannot meet a ':' inside one.
    std::env::join_paths(search_dirs(workspaces, trusted)).ok()
}

/// A command for the built-in `program` (a path `find` gave), with `child_path`'s PATH: what
/// it runs in turn (`#!/usr/bin/env node`, pyright's `python3`) is not the workspace's either.
pub fn command(program: &Path, workspaces: &[PathBuf], trusted: bool) -> Command {
    let mut cmd = Command::new(program);
    if let Some(path) = child_path(workspaces, trusted) {
        cmd.env("PATH", path);
    }
    cmd
}

/// Whether `p` is a rustup proxy (a link to, or copy named like, `rustup`): it runs the
/// toolchain a workspace's `rust-toolchain.toml` names, which may be a directory the
/// repository ships (`path = ...`).
pub fn rustup_proxy(p: &Path) -> bool {
    let real = std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    real.file_name()
        .is_some_and(|n| n.to_string_lossy().starts_with("rustup"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn relative_and_workspace_paths_are_inside() {
        let ws = [PathBuf::from("/w/proj")];
        assert!(inside(&ws, Path::new("node_modules/.bin/prettier")));
        assert!(inside(&ws, Path::new("/w/proj/.venv/bin/ruff")));
        assert!(!inside(&ws, Path::new("/w/project/bin/ruff")));
        assert!(!inside(&ws, Path::new("/usr/bin/ruff")));
        assert!(allowed(Path::new("/w/proj/.venv/bin/ruff"), &ws, true));
        assert!(!allowed(Path::new("/w/proj/.venv/bin/ruff"), &ws, false));
    }
}
