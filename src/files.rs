//! How ccide reads files (regular ones, bounded) and writes them (never in place), names them (`file://` URIs) and normalises paths.
//! Which paths it may touch is `workspaces`.

use std::fmt::Write as _;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Writes `bytes` to `path` so that a crash leaves either the old or the new content: a new
/// file beside it, fsync, rename over, fsync of the directory. An existing file's permission
/// bits are kept; a new file gets `mode`. The rename replaces the name, so a symlink at `path`
/// is replaced rather than followed: callers resolve symlinks first (see `Workspace::resolve`).
pub fn write_atomic(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    replace(path, bytes, mode, true)
}

/// `write_atomic` without the fsyncs, for files that are deleted at every start anyway (the
/// pending diffs): durability would buy nothing and costs ~20 ms on a 10 MiB proposal.
pub fn write_volatile(path: &Path, bytes: &[u8], mode: u32) -> io::Result<()> {
    replace(path, bytes, mode, false)
}

fn replace(path: &Path, bytes: &[u8], mode: u32, durable: bool) -> io::Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let dir = path
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
    let mode = match fs::metadata(path) {
        Ok(m) => m.permissions().mode() & 0o7777,
        Err(_) => mode,
    };
    let tmp = dir.join(format!(
        ".{}.ccide-{}-{}.tmp",
        name.to_string_lossy(),
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let result = (|| {
        let mut f = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(mode)
            .open(&tmp)?;
        // The umask may have narrowed `mode`; the original's bits are what we promise to keep.
        f.set_permissions(fs::Permissions::from_mode(mode))?;
        f.write_all(bytes)?;
        if durable {
            f.sync_all()?;
        }
        fs::rename(&tmp, path)?;
        if durable && let Ok(d) = File::open(dir) {
            let _ = d.sync_all();
        }
        Ok(())
    })();
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
    }
    result
}

/// Copies what remains of `from` into a new file `to` (mode `mode`), in the kernel when it can,
/// without fsync: for the pending diffs' originals, as `write_volatile`.
pub fn copy_to_new(from: &mut File, to: &Path, mode: u32) -> io::Result<()> {
    let mut out = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(mode)
        .open(to)?;
    if crate::sys::copy_in_kernel(from, &out)? {
        return Ok(());
    }
    let mut bytes = Vec::new();
    // Through `take` as `read_open` reads: one instance of std's read loop for both.
    io::Read::read_to_end(&mut io::Read::take(from, u64::MAX), &mut bytes)?;
    out.write_all(&bytes)
}

/// Syncs a file that `write_volatile` put in place, and its directory: `write_atomic` in two
/// steps, for a file that must be visible before it can afford the wait.
pub fn sync(path: &Path) -> io::Result<()> {
    File::open(path)?.sync_all()?;
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty());
    File::open(dir.unwrap_or(Path::new(".")))?.sync_all()
}

/// `write_atomic` for a file a client or command named inside a workspace folder: every
/// directory below the folder is opened without following symlinks, and the temporary file and
/// the rename stay in that opened directory. A directory swapped for a symlink after `confine`
/// checked the path makes the write fail instead of landing outside.
pub fn write_in_workspace(
    path: &Path,
    workspaces: &[PathBuf],
    bytes: &[u8],
    mode: u32,
) -> io::Result<()> {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let (dir, name) = open_parent_beneath(path, workspaces)?;
    let mode = crate::sys::regular_file_mode_at(&dir, name).unwrap_or(mode);
    let tmp = std::ffi::OsString::from(format!(
        ".{}.ccide-{}-{}.tmp",
        name.to_string_lossy(),
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    ));
    let mut f = crate::sys::create_at(&dir, &tmp, mode)?;
    let result = (|| {
        f.set_permissions(fs::Permissions::from_mode(mode))?;
        f.write_all(bytes)?;
        f.sync_all()?;
        crate::sys::rename_at(&dir, &tmp, name)
    })();
    match result {
        Ok(()) => {
            crate::sys::fsync_fd(&dir);
            Ok(())
        }
        Err(e) => {
            let _ = crate::sys::unlink_at(&dir, &tmp);
            Err(e)
        }
    }
}

/// The directory that holds `path`, opened from the workspace folder that holds it without
/// following a symlink in any directory below the folder, and the file's name in it.
/// Removes a workspace file the way `write_in_workspace` writes one: its folder opened
/// beneath a workspace folder without following a symlink on the way, so a folder swapped
/// for a link cannot lead the removal outside.
pub fn remove_in_workspace(path: &Path, workspaces: &[PathBuf]) -> io::Result<()> {
    let (dir, name) = open_parent_beneath(path, workspaces)?;
    crate::sys::unlink_at(&dir, name)
}

fn open_parent_beneath<'a>(
    path: &'a Path,
    workspaces: &[PathBuf],
) -> io::Result<(std::os::fd::OwnedFd, &'a std::ffi::OsStr)> {
    let outside = || {
        io::Error::new(
            io::ErrorKind::PermissionDenied,
            "outside the workspace folders",
        )
    };
    let root = workspaces
        .iter()
        .filter(|w| path.starts_with(w))
        .max_by_key(|w| w.as_os_str().len())
        .ok_or_else(outside)?;
    let rel: Vec<&std::ffi::OsStr> = path
        .strip_prefix(root)
        .map_err(|_| outside())?
        .components()
        .map(|c| match c {
            Component::Normal(n) => Ok(n),
            _ => Err(outside()),
        })
        .collect::<io::Result<_>>()?;
    let Some((name, dirs)) = rel.split_last() else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "path has no file name",
        ));
    };
    Ok((crate::sys::open_dir_beneath(root, dirs)?, name))
}

/// `read_regular` for a workspace file ccide named before (a path `confine` resolved): it is
/// opened from the folder that holds it without following a symlink anywhere below the folder,
/// so a file or directory replaced by a symlink since (a checkout of a hostile branch) is
/// refused (`confinement_refused`) instead of read through the link
/// (ccide-protocol(7) §10).
pub fn read_in_workspace(path: &Path, workspaces: &[PathBuf], limit: u64) -> io::Result<Vec<u8>> {
    read_open(open_in_workspace(path, workspaces)?, limit)
}

/// The open file `read_in_workspace` reads, for a caller that reads only part of it: a
/// regular file (what `read_regular` refuses by its kind is refused here too).
pub fn open_in_workspace(path: &Path, workspaces: &[PathBuf]) -> io::Result<File> {
    let (dir, name) = open_parent_beneath(path, workspaces).map_err(relinked)?;
    let file = crate::sys::open_read_at(&dir, name).map_err(relinked)?;
    check_regular(&file.metadata()?, u64::MAX)?;
    Ok(file)
}

/// Whether `read_in_workspace`, `open_in_workspace` or `write_in_workspace` refused a path by
/// the confinement rule (outside the folders, or a symlink met on its way), not the system.
pub fn confinement_refused(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::PermissionDenied && e.raw_os_error().is_none()
}

/// A symlink met where the path had none when it was confined, said as what happened.
fn relinked(e: io::Error) -> io::Error {
    if crate::sys::met_symlink(&e) {
        io::Error::new(
            io::ErrorKind::PermissionDenied,
            "is now a symlink or lies below one; ccide does not follow it out of the workspace",
        )
    } else {
        e
    }
}

/// Creates `dir` (and missing parents) with mode 0700, or checks an existing one: it must be
/// ours and not writable by group or others, since what we put there grants access, and
/// writable by us, or the first file written there would fail with a name the user never gave.
pub fn private_dir(dir: &Path, what: &str) -> Result<(), String> {
    match fs::symlink_metadata(dir) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(|e| format!("cannot create the {what} {}: {e}", dir.display()))?;
            // `recursive` applies the mode after the umask; make sure of 0700.
            fs::set_permissions(dir, fs::Permissions::from_mode(0o700))
                .map_err(|e| format!("cannot set mode 0700 on {}: {e}", dir.display()))
        }
        Err(e) => Err(format!("cannot use the {what} {}: {e}", dir.display())),
        Ok(_) => {
            check_private_dir(dir, what)?;
            let mode = fs::metadata(dir).map_or(0, |m| crate::sys::owner_and_mode(&m).1);
            crate::sys::may_write_in(dir).map_err(|e| match e.kind() {
                io::ErrorKind::ReadOnlyFilesystem => {
                    format!("the {what} {} is on a read-only file system", dir.display())
                }
                _ => format!(
                    "the {what} {} is not writable (mode {mode:04o}: {e}); run `chmod 700 {}`",
                    dir.display(),
                    dir.display()
                ),
            })
        }
    }
}

/// Checks an existing directory as `private_dir` does (ours, not writable by group or
/// others), without creating it: for a client about to trust what another process put there.
pub fn check_private_dir(dir: &Path, what: &str) -> Result<(), String> {
    let meta =
        fs::metadata(dir).map_err(|e| format!("cannot use the {what} {}: {e}", dir.display()))?;
    if !meta.is_dir() {
        return Err(format!("the {what} {} is not a directory", dir.display()));
    }
    let (uid, mode) = crate::sys::owner_and_mode(&meta);
    if uid != crate::sys::getuid() {
        return Err(format!(
            "refusing the {what} {}: it belongs to uid {uid}, not to you (uid {}); another user could read or replace what ccide puts there",
            dir.display(),
            crate::sys::getuid()
        ));
    }
    if mode & 0o022 != 0 {
        return Err(format!(
            "refusing the {what} {}: it is writable by group or others (mode {mode:04o}); run `chmod 700 {}`",
            dir.display(),
            dir.display()
        ));
    }
    Ok(())
}

/// Lexical normalisation: tools print `./x`, `a/../b` and the like, and the same file must
/// compare equal however it was spelt. Symlinks are not resolved on purpose (the file may not
/// exist here). `..` above the root is the root; a relative path keeps its leading `..`.
pub fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::Prefix(_) | Component::RootDir => out.push(c.as_os_str()),
            Component::CurDir => {}
            Component::ParentDir => match out.components().next_back() {
                Some(Component::Normal(_)) => {
                    out.pop();
                }
                Some(Component::RootDir | Component::Prefix(_)) => {}
                _ => out.push(".."),
            },
            Component::Normal(s) => out.push(s),
        }
    }
    out
}

/// Canonical (symlink-free) absolute paths of the workspace folders.
pub fn canonical_dir(dir: &Path) -> Result<PathBuf, String> {
    let p = fs::canonicalize(dir).map_err(|e| format!("workspace {}: {e}", dir.display()))?;
    if !p.is_dir() {
        return Err(format!("workspace {} is not a directory", dir.display()));
    }
    Ok(p)
}

/// The `file://` URI of a path as the CLI writes and compares it: raw `file://` + path, never
/// percent-encoded (ccide-protocol(7) §5).
pub fn file_url(p: &Path) -> String {
    format!("file://{}", p.display())
}

/// The path the CLI means by a getDiagnostics uri: `file://` + the raw path (never
/// percent-encoded, ccide-protocol(7) §5.4); anything else is taken as a path.
pub fn raw_uri_path(uri: &str) -> &str {
    uri.strip_prefix("file://").unwrap_or(uri)
}

/// The bytes of `path`, a regular file of at most `limit` bytes. Anything else is refused
/// before it is opened (a FIFO or a device would block the reader), and a file that grows
/// beyond `limit` between the stat and the read is refused too, never read whole. The errors
/// of ours say what the file is, to follow its name: `IsADirectory` ("is a directory"),
/// `Unsupported` ("is not a regular file"), `FileTooLarge` ("is N bytes, above the M MiB
/// limit for reading"); the system's keep their kind (`NotFound` ...).
pub fn read_regular(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    let m = fs::metadata(path)?;
    check_regular(&m, limit)?;
    read_open(File::open(path)?, limit)
}

/// Refuses what `read_regular` refuses by its metadata.
fn check_regular(m: &fs::Metadata, limit: u64) -> io::Result<()> {
    if m.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::IsADirectory,
            "is a directory",
        ));
    }
    if !m.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "is not a regular file",
        ));
    }
    if m.len() > limit {
        return Err(too_large(m.len(), limit));
    }
    Ok(())
}

fn too_large(len: u64, limit: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::FileTooLarge,
        format!(
            "is {len} bytes, above the {} MiB limit for reading",
            limit >> 20
        ),
    )
}

/// The bytes of an open file, checked as `read_regular` checks a path.
fn read_open(mut file: File, limit: u64) -> io::Result<Vec<u8>> {
    let m = file.metadata()?;
    check_regular(&m, limit)?;
    let mut bytes = Vec::with_capacity(m.len() as usize);
    io::Read::read_to_end(&mut io::Read::take(&mut file, limit + 1), &mut bytes)?;
    if bytes.len() as u64 > limit {
        let now = file.metadata().map_or(0, |m| m.len());
        return Err(too_large(now.max(bytes.len() as u64), limit));
    }
    Ok(bytes)
}

/// Size, inode, link count and modification and change times of a regular file: how ccide
/// tells that a file changed without reading it. The change time cannot be set back, and a
/// kernel that was asked for it gives the next change a finer one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stamp {
    pub len: u64,
    pub modified: Option<std::time::SystemTime>,
    pub inode: u64,
    pub links: u64,
    pub changed: (i64, i64),
}

/// The stamp of `p`; None when it is missing or not a regular file.
pub fn stamp(p: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = fs::metadata(p).ok().filter(|m| m.is_file())?;
    Some(Stamp {
        len: m.len(),
        modified: m.modified().ok(),
        inode: m.ino(),
        links: m.nlink(),
        changed: (m.ctime(), m.ctime_nsec()),
    })
}

/// `file://` + the path percent-encoded as VS Code's `vscode-uri` does (everything but
/// `A-Za-z0-9-._~` and `/`), for language servers and editors: Node-based servers compare
/// URIs as strings after running them through that library.
pub fn file_uri(p: &Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    let mut s = String::from("file://");
    for &b in p.as_os_str().as_bytes() {
        if b.is_ascii_alphanumeric() || b"-._~/".contains(&b) {
            s.push(b as char);
        } else {
            let _ = write!(s, "%{b:02X}");
        }
    }
    s
}

/// The path of a `file:` URI, percent-decoded if `decode` (SARIF, language servers and
/// editors encode; the CLI does not), byte for byte. None if `uri` is not a `file:` URI.
/// `file://localhost/x` is `/x`; another host is a UNC path.
pub fn uri_path(uri: &str, decode: bool) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStringExt;
    let scheme = uri.get(..5)?;
    if !scheme.eq_ignore_ascii_case("file:") {
        return None;
    }
    let rest = uri.get(5..)?;
    let path = match rest.strip_prefix("//") {
        Some(authority_and_path) => {
            let slash = authority_and_path
                .find('/')
                .unwrap_or(authority_and_path.len());
            let (host, path) = authority_and_path.split_at(slash);
            if host.is_empty() || host.eq_ignore_ascii_case("localhost") {
                path
            } else {
                rest
            }
        }
        None => rest,
    };
    if path.is_empty() {
        return None;
    }
    let bytes = if decode {
        percent_decode_bytes(path)
    } else {
        path.as_bytes().to_vec()
    };
    Some(PathBuf::from(std::ffi::OsString::from_vec(bytes)))
}

fn percent_decode_bytes(s: &str) -> Vec<u8> {
    let hex = |b: &u8| (*b as char).to_digit(16).and_then(|d| u8::try_from(d).ok());
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while let Some(&b) = bytes.get(i) {
        if b == b'%'
            && let (Some(hi), Some(lo)) = (
                bytes.get(i + 1).and_then(hex),
                bytes.get(i + 2).and_then(hex),
            )
        {
            out.push(hi << 4 | lo);
            i += 3;
        } else {
            out.push(b);
            i += 1;
        }
    }
    out
}

pub fn percent_decode(s: &str) -> String {
    String::from_utf8_lossy(&percent_decode_bytes(s)).into_owned()
}

/// languageId from the file name, as VS Code names languages; `plaintext` otherwise.
pub fn language_id(path: &Path) -> &'static str {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().to_ascii_lowercase())
        .unwrap_or_default();
    match name.as_str() {
        "dockerfile" => return "dockerfile",
        "makefile" | "gnumakefile" => return "makefile",
        "cmakelists.txt" => return "cmake",
        _ => {}
    }
    let ext = name.rsplit_once('.').map(|(_, e)| e).unwrap_or("");
    LANGUAGES
        .lines()
        .find_map(|l| {
            let mut words = l.split(' ');
            let id = words.next()?;
            words.any(|e| e == ext).then_some(id)
        })
        .unwrap_or("plaintext")
}

/// Each language id, then the extensions that name it. (A table read at run time: a `match`
/// on the extension was 2 KB of code.)
const LANGUAGES: &str = "\
rust rs\n\
python py pyi\n\
javascript js mjs cjs\n\
javascriptreact jsx\n\
typescript ts mts cts\n\
typescriptreact tsx\n\
go go\n\
c c h\n\
cpp cc cpp cxx hpp hh hxx\n\
java java\n\
kotlin kt kts\n\
swift swift\n\
ruby rb\n\
php php\n\
csharp cs\n\
shellscript sh bash zsh\n\
json json\n\
jsonc jsonc\n\
yaml yaml yml\n\
toml toml\n\
markdown md markdown\n\
html html htm\n\
css css\n\
scss scss\n\
sql sql\n\
lua lua\n\
xml xml\n\
vue vue\n\
svelte svelte\n\
scala scala\n\
haskell hs\n\
elixir ex exs\n\
erlang erl\n\
zig zig\n\
dart dart\n\
r r\n\
perl pl pm\n\
latex tex\n\
ini ini cfg";

#[cfg(test)]
mod tests {
    use super::*;

    /// Regular files up to the limit; a FIFO refused without blocking; a file longer than its
    /// stat said (a /proc file says 0 bytes, as a file growing after the stat would) refused
    /// rather than read whole.
    #[test]
    fn only_regular_files_up_to_the_limit_are_read() {
        let dir = std::env::temp_dir().join(format!("ccide-read-{}", std::process::id()));
        let _ = fs::remove_dir_all(&dir);
        fs::create_dir_all(&dir).unwrap();
        let f = dir.join("f");
        fs::write(&f, "12345").unwrap();
        assert_eq!(read_regular(&f, 5).unwrap(), b"12345");
        let e = read_regular(&f, 4).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::FileTooLarge);
        assert_eq!(
            e.to_string(),
            "is 5 bytes, above the 0 MiB limit for reading"
        );
        let e = read_regular(&dir, 5).unwrap_err();
        assert_eq!(
            (e.kind(), e.to_string()),
            (io::ErrorKind::IsADirectory, "is a directory".into())
        );
        let fifo = dir.join("fifo");
        assert!(
            std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap()
                .success()
        );
        let e = read_regular(&fifo, 5).unwrap_err();
        assert_eq!(e.to_string(), "is not a regular file");
        let e = read_regular(&dir.join("missing"), 5).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        let status = Path::new("/proc/self/status");
        assert_eq!(fs::metadata(status).unwrap().len(), 0);
        let e = read_regular(status, 16).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::FileTooLarge);
        assert!(read_regular(status, 1 << 20).unwrap().starts_with(b"Name:"));
        let _ = fs::remove_dir_all(&dir);
    }

    /// A workspace file read again after it, or a directory above it, became a symlink is
    /// refused by the rule, however the link points; a FIFO is refused without blocking.
    #[test]
    fn a_workspace_file_is_read_again_only_without_a_symlink_on_its_way() {
        let root = std::env::temp_dir().join(format!("ccide-readws-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        fs::create_dir_all(root.join("ws/sub")).unwrap();
        let root = fs::canonicalize(&root).unwrap();
        let ws = vec![root.join("ws")];
        fs::write(root.join("secret"), "secret").unwrap();
        fs::write(root.join("ws/sub/a"), "inside").unwrap();
        let a = root.join("ws/sub/a");
        assert_eq!(read_in_workspace(&a, &ws, 100).unwrap(), b"inside");
        let e = read_in_workspace(&root.join("secret"), &ws, 100).unwrap_err();
        assert!(confinement_refused(&e), "{e}");
        fs::remove_file(&a).unwrap();
        std::os::unix::fs::symlink(root.join("secret"), &a).unwrap();
        let e = read_in_workspace(&a, &ws, 100).unwrap_err();
        assert!(confinement_refused(&e), "{e}");
        assert!(e.to_string().starts_with("is now a symlink"), "{e}");
        fs::remove_file(&a).unwrap();
        fs::rename(root.join("ws/sub"), root.join("elsewhere")).unwrap();
        fs::write(root.join("elsewhere/a"), "elsewhere").unwrap();
        std::os::unix::fs::symlink(root.join("elsewhere"), root.join("ws/sub")).unwrap();
        let e = read_in_workspace(&a, &ws, 100).unwrap_err();
        assert!(confinement_refused(&e), "{e}");
        let fifo = root.join("ws/fifo");
        assert!(
            std::process::Command::new("mkfifo")
                .arg(&fifo)
                .status()
                .unwrap()
                .success()
        );
        let e = read_in_workspace(&fifo, &ws, 100).unwrap_err();
        assert_eq!(e.to_string(), "is not a regular file");
        let e = read_in_workspace(&root.join("ws/missing"), &ws, 100).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        let _ = fs::remove_dir_all(&root);
    }

    #[test]
    fn a_removal_does_not_follow_a_folder_swapped_for_a_link() {
        let root = std::env::temp_dir().join(format!("ccide-remove-{}", std::process::id()));
        let _ = fs::remove_dir_all(&root);
        let (ws, outside) = (root.join("ws"), root.join("outside"));
        fs::create_dir_all(ws.join("d")).unwrap();
        fs::create_dir_all(&outside).unwrap();
        fs::write(ws.join("d/new.txt"), "x").unwrap();
        fs::write(outside.join("new.txt"), "keep").unwrap();
        let folders = [ws.clone()];
        fs::rename(ws.join("d"), root.join("d.old")).unwrap();
        std::os::unix::fs::symlink(&outside, ws.join("d")).unwrap();
        assert!(remove_in_workspace(&ws.join("d/new.txt"), &folders).is_err());
        assert_eq!(fs::read(outside.join("new.txt")).unwrap(), b"keep");
        fs::remove_file(ws.join("d")).unwrap();
        fs::rename(root.join("d.old"), ws.join("d")).unwrap();
        remove_in_workspace(&ws.join("d/new.txt"), &folders).unwrap();
        assert!(!ws.join("d/new.txt").exists());
        let outside_file = outside.join("new.txt");
        assert!(remove_in_workspace(&outside_file, &folders).is_err());
        assert!(outside_file.exists());
        fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn uris_round_trip_spaces_and_non_ascii() {
        let p = Path::new("/tmp/a dir/é ü/日本 🦀/x#1%.ts");
        let u = file_uri(p);
        assert_eq!(
            u,
            "file:///tmp/a%20dir/%C3%A9%20%C3%BC/%E6%97%A5%E6%9C%AC%20%F0%9F%A6%80/x%231%25.ts"
        );
        assert_eq!(uri_path(&u, true).unwrap(), p);
        // What servers send back may differ in case and in what they escape.
        assert_eq!(
            uri_path("file:///tmp/a%20dir/%c3%a9", true).unwrap(),
            Path::new("/tmp/a dir/é")
        );
        assert_eq!(
            uri_path("file://localhost/x/y z", true).unwrap(),
            Path::new("/x/y z")
        );
        assert_eq!(uri_path("untitled:1", true), None);
        assert_eq!(
            uri_path("file://host/x", true),
            Some(PathBuf::from("//host/x")),
            "a UNC path"
        );
        assert_eq!(
            uri_path("file:///bad%zz%4", true).unwrap(),
            Path::new("/bad%zz%4")
        );
    }

    #[test]
    fn languages_by_name() {
        for (name, id) in [
            ("b.rs", "rust"),
            ("b.py", "python"),
            ("b.pyi", "python"),
            ("b.js", "javascript"),
            ("b.mjs", "javascript"),
            ("b.cjs", "javascript"),
            ("b.jsx", "javascriptreact"),
            ("b.ts", "typescript"),
            ("b.mts", "typescript"),
            ("b.cts", "typescript"),
            ("b.tsx", "typescriptreact"),
            ("b.go", "go"),
            ("b.c", "c"),
            ("b.h", "c"),
            ("b.cc", "cpp"),
            ("b.cpp", "cpp"),
            ("b.cxx", "cpp"),
            ("b.hpp", "cpp"),
            ("b.hh", "cpp"),
            ("b.hxx", "cpp"),
            ("b.java", "java"),
            ("b.kt", "kotlin"),
            ("b.kts", "kotlin"),
            ("b.swift", "swift"),
            ("b.rb", "ruby"),
            ("b.php", "php"),
            ("b.cs", "csharp"),
            ("b.sh", "shellscript"),
            ("b.bash", "shellscript"),
            ("b.zsh", "shellscript"),
            ("b.json", "json"),
            ("b.jsonc", "jsonc"),
            ("b.yaml", "yaml"),
            ("b.yml", "yaml"),
            ("b.toml", "toml"),
            ("b.md", "markdown"),
            ("b.markdown", "markdown"),
            ("b.html", "html"),
            ("b.htm", "html"),
            ("b.css", "css"),
            ("b.scss", "scss"),
            ("b.sql", "sql"),
            ("b.lua", "lua"),
            ("b.xml", "xml"),
            ("b.vue", "vue"),
            ("b.svelte", "svelte"),
            ("b.scala", "scala"),
            ("b.hs", "haskell"),
            ("b.ex", "elixir"),
            ("b.exs", "elixir"),
            ("b.erl", "erlang"),
            ("b.zig", "zig"),
            ("b.dart", "dart"),
            ("b.r", "r"),
            ("b.pl", "perl"),
            ("b.pm", "perl"),
            ("b.tex", "latex"),
            ("b.ini", "ini"),
            ("b.cfg", "ini"),
            ("B.TSX", "typescriptreact"),
            ("Dockerfile", "dockerfile"),
            ("GNUmakefile", "makefile"),
            ("Makefile", "makefile"),
            ("CMakeLists.txt", "cmake"),
            ("notes", "plaintext"),
            ("a.txt", "plaintext"),
            ("a.rs.bak", "plaintext"),
            ("rs", "plaintext"),
            (".rs", "rust"),
            ("a.", "plaintext"),
        ] {
            assert_eq!(language_id(&Path::new("/a").join(name)), id, "{name}");
        }
    }

    #[test]
    fn normalize_is_lexical() {
        assert_eq!(
            normalize(Path::new("/a/./b/../c//d")),
            PathBuf::from("/a/c/d")
        );
        assert_eq!(normalize(Path::new("/../x")), PathBuf::from("/x"));
        assert_eq!(normalize(Path::new("../a/./b/..")), PathBuf::from("../a"));
    }
}
