//! Child processes and threads: the one way ccide runs a program it did not write (checkers,
//! formatters) with a time limit and a bounded capture; process groups and trees, found and
//! killed; threads and the queue they hand work over with.
//!
//! Output goes to unlinked files, not pipes: no thread is needed to drain them, and a
//! background process the command leaves behind (daemonising linters do this) cannot hold
//! the answer up by keeping a pipe open. When the command ends, whatever is left of its
//! process group is killed.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Stack of every thread ccide starts. JSON from clients and tools is parsed recursively (up to
/// serde_json's 128 levels), which needs more than 256 KiB in a debug build; untouched stack
/// pages cost no memory, so idle connections stay small.
pub const THREAD_STACK: usize = 1 << 20;

/// Starts a named thread with ccide's stack size.
pub fn spawn_thread(
    name: &str,
    f: impl FnOnce() + Send + 'static,
) -> io::Result<std::thread::JoinHandle<()>> {
    spawn_boxed(name, Box::new(f))
}

/// One instantiation of std's thread start for every thread (each closure type would otherwise
/// bring its own copy, about 1.5 KB).
fn spawn_boxed(name: &str, f: Box<dyn FnOnce() + Send>) -> io::Result<std::thread::JoinHandle<()>> {
    std::thread::Builder::new()
        .name(name.into())
        .stack_size(THREAD_STACK)
        .spawn(f)
}

/// Locks `m`, one copy of the code per type instead of one per use (each `lock().unwrap()`
/// cost about 100 bytes). A lock is poisoned only by a panic while it is held, and a panic
/// aborts this binary; tests, which unwind, still fail here.
pub fn lock<T: ?Sized>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap()
}

/// Where a thread hands what it reads or sees (a message, an event), to whoever started it:
/// called on that thread, so it only moves `T` on (onto a `Queue`, a socket), never decides.
pub type Deliver<T> = Arc<dyn Fn(T) + Send + Sync>;

/// A queue between threads: any thread pushes, the owner pops with a deadline; closing it wakes
/// every waiter. (std's mpsc would bring its three channel flavours, about 5 KB of code per
/// item type, into a binary that has no other use for them.)
pub struct Queue<T> {
    /// The items, and whether the queue is closed.
    items: Mutex<(VecDeque<T>, bool)>,
    ready: Condvar,
}

impl<T> Default for Queue<T> {
    fn default() -> Queue<T> {
        Queue {
            items: Mutex::new((VecDeque::new(), false)),
            ready: Condvar::new(),
        }
    }
}

impl<T> Queue<T> {
    /// Adds an item; false (and the item dropped) once the queue is closed.
    pub fn push(&self, item: T) -> bool {
        let mut q = lock(&self.items);
        if q.1 {
            return false;
        }
        q.0.push_back(item);
        drop(q);
        self.ready.notify_one();
        true
    }

    /// The oldest item, waiting until `until` at most (forever if None). None when the time is
    /// up, or the queue is closed and empty.
    pub fn pop(&self, until: Option<Instant>) -> Option<T> {
        let mut q = lock(&self.items);
        loop {
            if let Some(item) = q.0.pop_front() {
                return Some(item);
            }
            if q.1 {
                return None;
            }
            // A wait hands the guard back even from a poisoned lock (which a panic, aborting,
            // never leaves): smaller than a panic path per item type.
            q = match until {
                None => self.ready.wait(q).unwrap_or_else(|e| e.into_inner()),
                Some(t) => {
                    let left = t.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return None;
                    }
                    self.ready
                        .wait_timeout(q, left)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
            };
        }
    }

    /// Refuses further items and wakes every waiter; what is queued can still be popped.
    pub fn close(&self) {
        lock(&self.items).1 = true;
        self.ready.notify_all();
    }
}

/// Process groups ccide started and that may still run: `kill_all` ends them when the server
/// stops, so no checker, formatter or kernel outlives it.
static GROUPS: std::sync::Mutex<Vec<u32>> = std::sync::Mutex::new(Vec::new());

/// Records a process group (a child started with `process_group(0)`) as ccide's.
pub fn track_group(pid: u32) {
    lock(&GROUPS).push(pid);
}

/// Kills a tracked group and forgets it.
pub fn end_group(pid: u32) {
    kill_group(pid);
    lock(&GROUPS).retain(|p| *p != pid);
}

/// Kills every group ccide started that still runs.
pub fn kill_all() {
    for pid in std::mem::take(&mut *lock(&GROUPS)) {
        kill_group(pid);
    }
}

pub struct Ran {
    /// None: killed after the time limit.
    pub status: Option<ExitStatus>,
    pub stdout: Vec<u8>,
    pub stderr: Vec<u8>,
    /// Output beyond `max_output` was dropped.
    pub truncated: bool,
}

/// Runs a command in its own process group without a shell, `input` (or nothing) on stdin.
/// The whole group is killed after `limit`, and what the command left running is killed when
/// it ends. At most `max_output` bytes of each stream are kept; output goes to unlinked files
/// in `scratch`.
pub fn run(
    mut cmd: Command,
    input: Option<&[u8]>,
    scratch: &Path,
    limit: Duration,
    max_output: u64,
) -> io::Result<Ran> {
    let mut out = scratch_file(scratch)?;
    let mut err = scratch_file(scratch)?;
    let stdin = match input {
        Some(bytes) => {
            let mut f = scratch_file(scratch)?;
            f.write_all(bytes)?;
            f.seek(SeekFrom::Start(0))?;
            Stdio::from(f)
        }
        None => Stdio::null(),
    };
    cmd.stdin(stdin)
        .stdout(out.try_clone()?)
        .stderr(err.try_clone()?)
        .process_group(0);
    crate::sys::unblock_all_signals_in_child(&mut cmd);
    crate::sys::die_with_parent(&mut cmd);
    let mut child = cmd.spawn()?;
    track_group(child.id());
    let deadline = Instant::now() + limit;
    let timed_out = loop {
        // Not reaped yet: the group's id cannot be reused before the kill below.
        if crate::sys::exited_unreaped(child.id())? {
            break false;
        }
        if Instant::now() > deadline {
            break true;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    // The group outlives its leader while a background child runs: end it too, then reap.
    end_group(child.id());
    let status = child.wait()?;
    let status = (!timed_out).then_some(status);
    let mut truncated = false;
    let mut read = |f: &mut File| -> io::Result<Vec<u8>> {
        let mut buf = Vec::new();
        f.seek(SeekFrom::Start(0))?;
        f.take(max_output).read_to_end(&mut buf)?;
        truncated |= f.metadata()?.len() > max_output;
        Ok(buf)
    };
    Ok(Ran {
        status,
        stdout: read(&mut out)?,
        stderr: read(&mut err)?,
        truncated,
    })
}

/// A new file in `dir`, already unlinked: gone as soon as it is closed.
fn scratch_file(dir: &Path) -> io::Result<File> {
    let (path, f) = new_file(dir, "scratch", "")?;
    std::fs::remove_file(&path)?;
    Ok(f)
}

/// Creates `dir/.STEM.ccide-PID-N.EXT`, private and new.
pub fn new_file(dir: &Path, stem: &str, ext: &str) -> io::Result<(PathBuf, File)> {
    static N: AtomicU64 = AtomicU64::new(0);
    let path = dir.join(format!(
        ".{stem}.ccide-{}-{}{ext}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)?;
    Ok((path, f))
}

/// SIGKILL to a process group we created (`process_group(0)` makes its id the child's pid).
pub fn kill_group(pid: u32) {
    let _ = crate::sys::kill(-(pid as i32), crate::sys::SIGKILL);
}

/// /proc/PID/stat after the command name (which may hold spaces and parentheses, and ends at
/// the last ')'): the fields from the state on.
fn stat_rest(pid: u32) -> Option<String> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    Some(s.get(s.rfind(')')? + 1..)?.to_string())
}

/// The parent of `pid` (/proc/PID/stat's 4th field), None for the kernel's own (0).
pub fn parent_of(pid: u32) -> Option<u32> {
    let ppid: u32 = stat_rest(pid)?
        .split_ascii_whitespace()
        .nth(1)?
        .parse()
        .ok()?;
    (ppid != 0).then_some(ppid)
}

/// When `pid` started, in clock ticks after boot (/proc/PID/stat's 22nd field): a pid is
/// reused, a pid with its start time names one process.
pub fn start_time(pid: u32) -> Option<u64> {
    stat_rest(pid)?
        .split_ascii_whitespace()
        .nth(19)?
        .parse()
        .ok()
}

/// Adds to `known` (pid, start time) every descendant of the live process `pid`, walked down
/// `/proc/PID/task/TID/children`: a child that left the process group (`setsid`) is found as
/// long as its parent lives, which a look after the process exited cannot do (its children
/// then belong to init). Those no longer running are dropped; at most 1024 are kept.
pub fn remember_descendants(pid: u32, known: &mut Vec<(u32, u64)>) {
    known.retain(|&(p, t)| start_time(p) == Some(t));
    let mut todo = vec![pid];
    while let Some(parent) = todo.pop() {
        let Ok(rd) = std::fs::read_dir(format!("/proc/{parent}/task")) else {
            continue;
        };
        for task in rd.flatten() {
            let children =
                std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            for c in children
                .split_ascii_whitespace()
                .filter_map(|c| c.parse().ok())
            {
                if known.len() < 1024
                    && !known.iter().any(|k| k.0 == c)
                    && let Some(t) = start_time(c)
                {
                    known.push((c, t));
                    todo.push(c);
                }
            }
        }
    }
}

/// SIGKILL to each of `known` that is still the process it was (same start time).
pub fn kill_known(known: &[(u32, u64)]) {
    for &(p, t) in known {
        if start_time(p) == Some(t) {
            let _ = crate::sys::kill(p as i32, crate::sys::SIGKILL);
        }
    }
}

/// `pid` and its descendants.
pub fn tree(pid: u32) -> Vec<u32> {
    let mut known = Vec::new();
    remember_descendants(pid, &mut known);
    let mut all = vec![pid];
    all.extend(known.iter().map(|k| k.0));
    all
}

/// Resident memory of `pid` and its descendants, in KiB (VmRSS; 0 for zombies).
pub fn rss_kib(pid: u32) -> u64 {
    tree(pid)
        .iter()
        .filter_map(|p| {
            let s = std::fs::read_to_string(format!("/proc/{p}/status")).ok()?;
            let l = s.lines().find(|l| l.starts_with("VmRSS:"))?;
            l["VmRSS:".len()..]
                .trim()
                .trim_end_matches("kB")
                .trim()
                .parse::<u64>()
                .ok()
        })
        .sum()
}

/// Whether `pid` exited (a zombie, or gone), without reaping it.
pub fn exited(pid: u32) -> bool {
    let state = stat_rest(pid).and_then(|s| s.trim_start().bytes().next());
    state.is_none_or(|s| s == b'Z' || s == b'X')
}

/// Where `program` is found in `$PATH`, as an executable file. A relative entry (`.`,
/// `node_modules/.bin`) is skipped: it would find a program in whatever directory ccide or
/// its child runs in, a workspace.
pub fn find_on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    find_in(
        std::env::split_paths(&path).filter(|d| d.is_absolute()),
        program,
    )
}

/// The first `dir/program` that is an executable file.
pub fn find_in(dirs: impl IntoIterator<Item = PathBuf>, program: &str) -> Option<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    dirs.into_iter().map(|d| d.join(program)).find(|p| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

/// The cgroup Claude Code starts its tools and plugin servers in when it caps their memory: a
/// directory of this name in the memory hierarchy (ccide-protocol(7) §13.5).
pub const CLI_TOOL_CGROUP: &str = "claude-code-bash";

/// The directory of the memory cgroup that a `/proc/PID/cgroup` text names, found as Claude
/// Code finds it: the cgroup v1 line whose controllers include `memory` (under
/// /sys/fs/cgroup/memory), else the v2 line `0::` (under /sys/fs/cgroup).
pub fn memory_cgroup_dir(proc_cgroup: &str) -> Option<PathBuf> {
    let mut v2 = None;
    for line in proc_cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        if controllers.split(',').any(|c| c == "memory") {
            return Some(Path::new("/sys/fs/cgroup/memory").join(path.trim_start_matches('/')));
        }
        if id == "0" && controllers.is_empty() {
            v2 = Some(Path::new("/sys/fs/cgroup").join(path.trim_start_matches('/')));
        }
    }
    v2
}

/// Whether a memory cgroup directory is Claude Code's tool cgroup or one inside it.
pub fn in_cli_tool_cgroup(dir: &Path) -> bool {
    dir.components().any(|c| c.as_os_str() == CLI_TOOL_CGROUP)
}

/// Where a process started from Claude Code's tool cgroup goes to leave its memory cap.
#[derive(Debug, PartialEq, Eq)]
pub enum ToolCgroupExit {
    /// The starter is not in the tool cgroup: nothing to leave.
    NotCapped,
    /// The `cgroup.procs` of the CLI's own cgroup, where the CLI itself moves a process it
    /// releases from the cap.
    To(PathBuf),
    /// The starter is in the tool cgroup (this directory) and so is its parent: a CLI started
    /// from another session's tool shares that session's cap, and there is no cgroup of its
    /// own to go to.
    Nowhere(PathBuf),
}

/// The exit for a child of a process whose `/proc/self/cgroup` is `own` and whose parent's
/// (the CLI that started it) is `parent`.
pub fn tool_cgroup_exit(own: &str, parent: &str) -> ToolCgroupExit {
    let Some(own) = memory_cgroup_dir(own).filter(|d| in_cli_tool_cgroup(d)) else {
        return ToolCgroupExit::NotCapped;
    };
    match memory_cgroup_dir(parent) {
        Some(cli) if !in_cli_tool_cgroup(&cli) => ToolCgroupExit::To(cli.join("cgroup.procs")),
        _ => ToolCgroupExit::Nowhere(own),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1_CLI: &str = "9:name=systemd:/user.slice/session-3.scope\n4:memory:/user.slice/session-3.scope\n0::/user.slice/session-3.scope\n";
    const V1_TOOL: &str = "9:name=systemd:/user.slice/session-3.scope\n4:memory:/user.slice/session-3.scope/claude-code-bash\n0::/user.slice/session-3.scope\n";
    const V2_CLI: &str = "0::/user.slice/user-1000.slice/user@1000.service/app.slice/vte-1.scope\n";
    const V2_TOOL: &str =
        "0::/user.slice/user-1000.slice/user@1000.service/app.slice/claude-code-bash\n";

    #[test]
    fn the_memory_cgroup_is_the_v1_memory_line_else_the_v2_line() {
        assert_eq!(
            memory_cgroup_dir(V1_TOOL),
            Some(PathBuf::from(
                "/sys/fs/cgroup/memory/user.slice/session-3.scope/claude-code-bash"
            ))
        );
        assert_eq!(
            memory_cgroup_dir("5:cpu,memory:/a\n0::/b\n"),
            Some(PathBuf::from("/sys/fs/cgroup/memory/a"))
        );
        assert_eq!(
            memory_cgroup_dir(V2_TOOL),
            Some(PathBuf::from(
                "/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/app.slice/claude-code-bash"
            ))
        );
        assert_eq!(memory_cgroup_dir("1:cpu:/a\n"), None);
        assert_eq!(memory_cgroup_dir(""), None);
    }

    #[test]
    fn a_child_of_the_cli_tool_cgroup_goes_to_the_cli_cgroup() {
        // v1: the tool cgroup is a child of the CLI's; v2: a sibling (the CLI's is a leaf).
        assert_eq!(
            tool_cgroup_exit(V1_TOOL, V1_CLI),
            ToolCgroupExit::To(PathBuf::from(
                "/sys/fs/cgroup/memory/user.slice/session-3.scope/cgroup.procs"
            ))
        );
        assert_eq!(
            tool_cgroup_exit(V2_TOOL, V2_CLI),
            ToolCgroupExit::To(PathBuf::from(
                "/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/app.slice/vte-1.scope/cgroup.procs"
            ))
        );
        // Not capped: nothing to do, wherever the parent is.
        assert_eq!(tool_cgroup_exit(V2_CLI, V2_TOOL), ToolCgroupExit::NotCapped);
        assert_eq!(tool_cgroup_exit(V1_CLI, V1_CLI), ToolCgroupExit::NotCapped);
        assert_eq!(tool_cgroup_exit("", V1_CLI), ToolCgroupExit::NotCapped);
        // A CLI run from another session's tool shares its cap: nowhere of its own to go.
        assert_eq!(
            tool_cgroup_exit(V2_TOOL, V2_TOOL),
            ToolCgroupExit::Nowhere(PathBuf::from(
                "/sys/fs/cgroup/user.slice/user-1000.slice/user@1000.service/app.slice/claude-code-bash"
            ))
        );
        let nested = "0::/app.slice/claude-code-bash/inner\n";
        assert!(matches!(
            tool_cgroup_exit(nested, nested),
            ToolCgroupExit::Nowhere(_)
        ));
        // Only the parent's cgroup unknown: nowhere known either.
        assert!(matches!(
            tool_cgroup_exit(V1_TOOL, ""),
            ToolCgroupExit::Nowhere(_)
        ));
    }

    fn sh(script: &str) -> Command {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", script]);
        cmd
    }

    #[test]
    fn a_command_over_the_limit_is_killed_with_its_children() {
        let started = Instant::now();
        // Only a group kill ends the background sleep too.
        let tmp = std::env::temp_dir();
        let ran = run(
            sh("echo hi; sleep 20 & sleep 20"),
            None,
            &tmp,
            Duration::from_millis(300),
            1 << 20,
        )
        .unwrap();
        assert!(ran.status.is_none());
        // Well before the sleeps' 20 s.
        assert!(started.elapsed() < Duration::from_secs(10));

        let ran = run(
            sh("tr a-z A-Z; echo oops >&2; exit 3"),
            Some(b"abc\n"),
            &tmp,
            Duration::from_secs(10),
            1 << 20,
        )
        .unwrap();
        assert_eq!(ran.status.and_then(|s| s.code()), Some(3));
        assert_eq!(
            (&ran.stdout[..], &ran.stderr[..], ran.truncated),
            (&b"ABC\n"[..], &b"oops\n"[..], false)
        );
    }

    #[test]
    fn a_leftover_background_child_neither_holds_the_answer_nor_survives() {
        let tmp = std::env::temp_dir();
        let pidfile = tmp.join(format!("ccide-proc-test-{}", std::process::id()));
        let started = Instant::now();
        let ran = run(
            sh(&format!(
                "sleep 30 & echo $! > {}; echo done",
                pidfile.display()
            )),
            None,
            &tmp,
            Duration::from_secs(20),
            1 << 20,
        )
        .unwrap();
        // Well before the 20 s limit, which a held answer would wait for.
        assert!(started.elapsed() < Duration::from_secs(15));
        assert_eq!(ran.stdout, b"done\n");
        let pid: i64 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let _ = std::fs::remove_file(&pidfile);
        let end = Instant::now() + Duration::from_secs(10);
        // Killed, then reaped by init: wait for it to vanish.
        while crate::sys::process_alive(pid)
            && std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|s| !s.contains(") Z "))
        {
            assert!(Instant::now() < end, "leftover {pid} still runs");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    #[test]
    fn output_beyond_the_bound_is_dropped() {
        let tmp = std::env::temp_dir();
        let ran = run(
            sh("head -c 100000 /dev/zero"),
            None,
            &tmp,
            Duration::from_secs(10),
            1000,
        )
        .unwrap();
        assert_eq!((ran.stdout.len(), ran.truncated), (1000, true));
    }
}
