//! The workspace folders and the one rule for which paths ccide may touch: a path from a
//! client or a command is resolved (symlinks included) and must land inside a folder.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::RwLock;

/// Whether one folder holds the other (or they are the same): two servers of such folders
/// both hold the folder below, and Claude Code there connects to neither (ccide-protocol(7)
/// §1.3).
pub fn nested(a: &Path, b: &Path) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

/// Whether `dir` (canonical) is `/` or the home folder: served, it would hold every project
/// below it. Never served unless named (ccide-protocol(7) §1.3).
pub fn too_wide(dir: &Path) -> bool {
    let home = std::env::var_os("HOME").filter(|h| !h.is_empty());
    dir == Path::new("/") || home.and_then(|h| fs::canonicalize(h).ok()).as_deref() == Some(dir)
}

/// The git worktrees of the repository `folder` is a worktree of, `folder` left out
/// (ccide-protocol(7) §1.5), read from git's own files, no git run: each
/// `.git/worktrees/NAME/gitdir` names a worktree's `.git`. A linked worktree's `.git` is a file
/// `gitdir: REPO/.git/worktrees/NAME`: REPO's main worktree and its other worktrees count too.
/// Sorted; only those whose folder still holds its `.git` count (one deleted by hand lingers
/// there until `git worktree prune`). The repository's files are the workspace's to write, so
/// a worktree counts only when its own `.git` file points back to its `.git/worktrees/NAME`
/// (`folder` too, when it is a linked one), and never `/` or the home folder: a `gitdir`
/// naming another folder adds no folder to those served.
pub fn worktrees(folder: &Path) -> Vec<PathBuf> {
    let mut common = folder.join(".git");
    let mut trees = Vec::new();
    let link = git_file(&common);
    let linked = link.strip_prefix("gitdir:").map(|n| folder.join(n.trim()));
    if let Some(admin) = &linked {
        let list = admin.parent().filter(|p| p.ends_with("worktrees"));
        let Some(repo) = list.and_then(Path::parent) else {
            return trees;
        };
        common = repo.to_path_buf();
        // The main worktree: the folder whose `.git` is REPO itself.
        if let Some(Ok(m)) = common.parent().map(fs::canonicalize)
            && fs::canonicalize(m.join(".git")).ok() == fs::canonicalize(&common).ok()
            && !too_wide(&m)
        {
            trees.push(m);
        }
    }
    let mut found_folder = false;
    for e in fs::read_dir(common.join("worktrees"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let admin = e.path();
        let gitdir = git_file(&admin.join("gitdir"));
        let dir = admin.join(gitdir.trim_end());
        if let Some(Ok(t)) = dir.parent().map(fs::canonicalize)
            && points_back(&t, &admin)
            && !too_wide(&t)
        {
            if t == folder {
                found_folder = true;
                continue;
            }
            // Sorted, so that the lock file is written again only when the set changed.
            let i = trees.partition_point(|x| *x < t);
            trees.insert(i, t);
        }
    }
    // A linked `folder` that its repository does not name back is not one of its worktrees.
    if linked.is_some() && !found_folder {
        trees.clear();
    }
    // Already in order: the main worktree alone, then each other inserted in its place (no
    // `sort`, which would bring a stable sort of paths of its own, about 5 KB).
    trees
}

/// One of git's small files (a path on a line), as text; empty when it is not a regular file
/// (a FIFO there would hold the reader) or is larger than a path.
fn git_file(path: &Path) -> String {
    let bytes = crate::files::read_regular(path, 8192).unwrap_or_default();
    String::from_utf8(bytes).unwrap_or_default()
}

/// Whether the worktree `tree`'s `.git` is a file `gitdir: PATH` naming `admin` (git's
/// `.git/worktrees/NAME` of it; a relative path is read from `tree`).
fn points_back(tree: &Path, admin: &Path) -> bool {
    let dotgit = git_file(&tree.join(".git"));
    let named = dotgit.strip_prefix("gitdir:").map(|n| tree.join(n.trim()));
    let named = named.and_then(|n| fs::canonicalize(n).ok());
    named.is_some_and(|n| fs::canonicalize(admin).ok() == Some(n))
}

/// The folders a server serves, canonical and in order (the first resolves relative paths).
/// `ccide workspace add/remove` changes them while clients are connected, hence the lock.
pub struct Workspaces {
    folders: RwLock<Vec<PathBuf>>,
}

impl Workspaces {
    /// `folders` must be canonical directories and not empty.
    pub fn new(folders: Vec<PathBuf>) -> Workspaces {
        assert!(!folders.is_empty(), "a server needs a workspace folder");
        Workspaces {
            folders: RwLock::new(folders),
        }
    }

    pub fn list(&self) -> Vec<PathBuf> {
        self.folders.read().unwrap().clone()
    }

    pub fn first(&self) -> PathBuf {
        self.folders.read().unwrap()[0].clone()
    }

    /// Replaces the folders (after `ccide workspace add/remove`); `f` sees and edits the list
    /// under the write lock, so two changes cannot interleave.
    pub fn change<T>(&self, f: impl FnOnce(&mut Vec<PathBuf>) -> T) -> T {
        f(&mut self.folders.write().unwrap())
    }

    /// The folder that holds `path` (the deepest, when folders nest).
    pub fn holder(&self, path: &Path) -> Option<PathBuf> {
        self.folders
            .read()
            .unwrap()
            .iter()
            .filter(|w| path.starts_with(w))
            .max_by_key(|w| w.as_os_str().len())
            .cloned()
    }

    pub fn contains(&self, path: &Path) -> bool {
        self.holder(path).is_some()
    }

    /// `path` relative to the folder that holds it, or whole when none does.
    pub fn rel(&self, path: &Path) -> String {
        match self.holder(path) {
            Some(w) => path
                .strip_prefix(&w)
                .unwrap_or(path)
                .to_string_lossy()
                .into_owned(),
            None => path.to_string_lossy().into_owned(),
        }
    }

    /// Writes a file inside the folders without following a symlink swapped in since
    /// `resolve` (see `files::write_in_workspace`).
    pub fn write(&self, path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
        crate::files::write_in_workspace(path, &self.list(), bytes, mode)
    }

    /// Removes a workspace file, confined as `write` is.
    pub fn remove(&self, path: &Path) -> io::Result<()> {
        crate::files::remove_in_workspace(path, &self.list())
    }

    /// Reads again a file `resolve` named before (a document, a tab, a file the language
    /// servers were sent), through the same rule: it must still lie inside a folder with no
    /// symlink below the folder on its way, else it is refused rather than read through the
    /// link (see `files::read_in_workspace`). Every later read of a workspace file goes here.
    pub fn read(&self, path: &Path, limit: u64) -> io::Result<Vec<u8>> {
        crate::files::read_in_workspace(path, &self.list(), limit)
    }

    /// `read` for a caller that reads part of the file (its first lines, its line count).
    pub fn open(&self, path: &Path) -> io::Result<fs::File> {
        crate::files::open_in_workspace(path, &self.list())
    }

    /// Whether the rule now refuses a file `resolve` named before (it is a symlink or below
    /// one, or its folder was removed): what ccide does with it by name, such as running a
    /// checker on it, must stop too.
    pub fn refuses(&self, path: &Path) -> bool {
        self.open(path)
            .is_err_and(|e| crate::files::confinement_refused(&e))
    }

    /// Resolves a path a client or a command gave us to the real file it names, and refuses it
    /// unless that file lies inside one of the folders. Relative paths start at the first
    /// folder. Symlinks are resolved (the deepest existing ancestor for a file yet to be
    /// created), so callers then read and write the resolved path, never a name that a
    /// swapped-in symlink could redirect.
    pub fn resolve(&self, raw: &str) -> Result<PathBuf, String> {
        confine(raw, &self.folders.read().unwrap())
    }
}

fn confine(raw: &str, workspaces: &[PathBuf]) -> Result<PathBuf, String> {
    if raw.is_empty() {
        return Err("empty path".into());
    }
    if raw.contains('\0') {
        return Err(format!("path {raw:?} contains a NUL byte"));
    }
    let first = workspaces.first().ok_or("no workspace folder")?;
    // Longer than the kernel accepts anyway; refusing early keeps the component-by-component
    // resolution below from costing quadratic time on a hostile megabyte path.
    const PATH_MAX: usize = 4096;
    if first.as_os_str().len() + raw.len() >= PATH_MAX {
        return Err(format!(
            "a path of {} bytes is too long (the limit is {PATH_MAX})",
            raw.len()
        ));
    }
    let joined = first.join(raw);
    let lexical = crate::files::normalize(&joined);
    let resolved = resolve_existing_prefix(&lexical)
        .map_err(|e| format!("cannot resolve {}: {e}", lexical.display()))?;
    if workspaces.iter().any(|w| resolved.starts_with(w)) {
        Ok(resolved)
    } else {
        let how = if resolved != lexical {
            format!(" (it resolves to {})", resolved.display())
        } else {
            String::new()
        };
        Err(format!(
            "{} is outside the workspace folders{how}; ccide only touches files under {}",
            lexical.display(),
            workspaces
                .iter()
                .map(|w| w.display().to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ))
    }
}

/// Canonicalizes the longest existing prefix of `p` and appends the rest unchanged.
fn resolve_existing_prefix(p: &Path) -> io::Result<PathBuf> {
    let mut rest = Vec::new();
    let mut cur = p.to_path_buf();
    loop {
        match fs::canonicalize(&cur) {
            Ok(mut c) => {
                for part in rest.iter().rev() {
                    c.push(part);
                }
                return Ok(c);
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                let Some(name) = cur.file_name().map(|n| n.to_os_string()) else {
                    return Err(e);
                };
                // A dangling symlink must not be followed later by a write to its name.
                if fs::symlink_metadata(&cur).is_ok() {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidInput,
                        "it is a dangling symlink",
                    ));
                }
                rest.push(name);
                if !cur.pop() {
                    return Err(e);
                }
            }
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("ccide-ws-{}-{name}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).unwrap();
        fs::canonicalize(&d).unwrap()
    }

    #[test]
    fn paths_resolve_inside_and_are_refused_outside() {
        let root = tmp("confine");
        let ws = root.join("ws");
        fs::create_dir_all(ws.join("sub")).unwrap();
        fs::write(root.join("secret"), "x").unwrap();
        std::os::unix::fs::symlink(root.join("secret"), ws.join("link")).unwrap();
        std::os::unix::fs::symlink(&ws, root.join("alias")).unwrap();
        let w = Workspaces::new(vec![ws.clone()]);
        assert_eq!(w.resolve("sub/new.txt").unwrap(), ws.join("sub/new.txt"));
        assert_eq!(w.resolve("sub/../a").unwrap(), ws.join("a"));
        // An absolute path through a symlink to the workspace is the workspace.
        let via = root.join("alias/sub/x");
        assert_eq!(w.resolve(via.to_str().unwrap()).unwrap(), ws.join("sub/x"));
        let e = w.resolve("link").unwrap_err();
        assert!(e.contains("outside the workspace folders"), "{e}");
        assert!(e.contains("resolves to"), "{e}");
        assert!(w.resolve("../secret").is_err());
        assert!(w.resolve("").is_err());
        assert!(w.resolve("a\0b").is_err());
        assert!(
            w.resolve(&"a/".repeat(3000))
                .unwrap_err()
                .contains("too long")
        );
        assert_eq!(w.rel(&ws.join("sub/x")), "sub/x");
        assert_eq!(w.holder(&root.join("secret")), None);
        let _ = fs::remove_dir_all(&root);
    }

    /// git's files as `git worktree add` leaves them.
    #[test]
    fn worktrees_are_read_from_gits_files() {
        let root = tmp("worktrees");
        let (main, a, b, gone) = (
            root.join("r"),
            root.join("a"),
            root.join("b"),
            root.join("gone"),
        );
        for (name, wt) in [("b", &b), ("a", &a), ("gone", &gone)] {
            let admin = main.join(".git/worktrees").join(name);
            fs::create_dir_all(&admin).unwrap();
            fs::write(admin.join("gitdir"), format!("{}/.git\n", wt.display())).unwrap();
            if name != "gone" {
                fs::create_dir_all(wt).unwrap();
                fs::write(wt.join(".git"), format!("gitdir: {}\n", admin.display())).unwrap();
            }
        }
        assert_eq!(worktrees(&main), [a.clone(), b.clone()]);
        // A gitdir naming a folder whose `.git` does not point back adds nothing: another
        // repository (its `.git` a directory, or a worktree of another one), / or the home
        // folder.
        let other = root.join("other");
        fs::create_dir_all(other.join(".git")).unwrap();
        let stranger = root.join("stranger");
        fs::create_dir_all(&stranger).unwrap();
        fs::write(
            stranger.join(".git"),
            "gitdir: /elsewhere/.git/worktrees/x\n",
        )
        .unwrap();
        let home = std::env::var("HOME").unwrap_or_default();
        for (name, target) in [("o", &other), ("s", &stranger), ("r", &PathBuf::from("/"))]
            .into_iter()
            .chain([("h", &PathBuf::from(&home))])
        {
            let admin = main.join(".git/worktrees").join(name);
            fs::create_dir_all(&admin).unwrap();
            fs::write(admin.join("gitdir"), format!("{}/.git\n", target.display())).unwrap();
        }
        assert_eq!(worktrees(&main), [a.clone(), b.clone()]);
        // A linked worktree: the main worktree and the other linked ones.
        assert_eq!(worktrees(&a), [b.clone(), main.clone()]);
        // A folder whose `.git` names a worktree of the repository that does not name it back
        // (a's): none, not the repository's folders.
        let pretender = root.join("pretender");
        fs::create_dir_all(&pretender).unwrap();
        let a_admin = main.join(".git/worktrees/a");
        fs::write(
            pretender.join(".git"),
            format!("gitdir: {}\n", a_admin.display()),
        )
        .unwrap();
        assert_eq!(worktrees(&pretender), Vec::<PathBuf>::new());
        // A `.git` file that names no worktree of a repository (a submodule's): none.
        fs::write(b.join(".git"), "gitdir: ../r/.git/modules/b\n").unwrap();
        assert_eq!(worktrees(&b), Vec::<PathBuf>::new());
        // Not a worktree: none.
        assert_eq!(worktrees(&root), Vec::<PathBuf>::new());
        let _ = fs::remove_dir_all(&root);
    }
}
