//! Every libc call and every `unsafe` block of ccide lives here, behind small safe functions.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::time::Duration;

fn check(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// The signals that end `serve`. They are blocked in every thread and taken with `sigwait`, so
/// that shutdown (removing the lock file) runs on an ordinary thread, not in a signal handler.
const TERMINATION_SIGNALS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

fn termination_set() -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset initialises it before use.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        for s in TERMINATION_SIGNALS {
            libc::sigaddset(&mut set, s);
        }
        set
    }
}

/// Blocks SIGINT, SIGTERM and SIGHUP in the calling thread and every thread it spawns later.
pub fn block_termination_signals() {
    let set = termination_set();
    // SAFETY: `set` is a valid, initialised signal set.
    unsafe {
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
    }
}

/// Waits until SIGINT, SIGTERM or SIGHUP arrives (they must be blocked) and returns it.
pub fn wait_termination_signal() -> libc::c_int {
    let set = termination_set();
    let mut sig: libc::c_int = 0;
    // SAFETY: `set` and `sig` are valid for the duration of the call.
    while unsafe { libc::sigwait(&set, &mut sig) } != 0 {}
    sig
}

pub fn signal_name(sig: libc::c_int) -> &'static str {
    match sig {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGHUP => "SIGHUP",
        _ => "signal",
    }
}

pub const SIGINT: libc::c_int = libc::SIGINT;
pub const SIGKILL: libc::c_int = libc::SIGKILL;

/// Restores an empty signal mask; called in children between fork and exec, because they
/// inherit the blocked termination signals otherwise and could not be stopped by them.
pub fn unblock_all_signals_in_child(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure only calls async-signal-safe functions (sigemptyset, sigprocmask).
    unsafe {
        cmd.pre_exec(|| {
            let mut set: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut set);
            libc::sigprocmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
            Ok(())
        });
    }
}

/// Makes a child get SIGKILL when the thread that started it ends (a server killed with -9
/// takes its checkers and language servers along). Only for children whose starting thread
/// lives as long as they do.
pub fn die_with_parent(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: getpid is async-signal-safe and called before fork.
    let parent = unsafe { libc::getpid() };
    // SAFETY: the closure only calls async-signal-safe functions (prctl, getppid).
    unsafe {
        cmd.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The parent died between fork and prctl: the signal was never armed.
            if libc::getppid() != parent {
                return Err(std::io::Error::other(
                    "ccide exited while starting the server",
                ));
            }
            Ok(())
        });
    }
}

/// Makes a child the leader of a new session (setsid), without a controlling terminal: a
/// server started on behalf of a Claude Code session outlives it, and neither the terminal's
/// hangup nor its signals may reach that server.
pub fn new_session(cmd: &mut std::process::Command) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure only calls setsid, which is async-signal-safe.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setsid() < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// Moves a child into another cgroup just before it runs its program, so that whatever it
/// starts is there too: writes 0 (the writer) to `procs`, a cgroup's `cgroup.procs`. A
/// failure leaves the child where it was, which the caller sees in /proc/PID/cgroup.
pub fn join_cgroup_in_child(cmd: &mut std::process::Command, procs: &std::path::Path) {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::process::CommandExt;
    let Ok(path) = std::ffi::CString::new(procs.as_os_str().as_bytes()) else {
        return;
    };
    // SAFETY: the closure only calls open, write and close, which are async-signal-safe, on a
    // string made before the fork.
    unsafe {
        cmd.pre_exec(move || {
            let fd = libc::open(path.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
            if fd >= 0 {
                libc::write(fd, b"0".as_ptr().cast(), 1);
                libc::close(fd);
            }
            Ok(())
        });
    }
}

/// Takes an exclusive lock on an open file without waiting; false when another process
/// holds it. The lock lasts as long as the file stays open (and goes with the process).
pub fn try_lock_exclusive(f: &std::fs::File) -> io::Result<bool> {
    // SAFETY: flock on a descriptor we own.
    let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if r == 0 {
        return Ok(true);
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::EWOULDBLOCK) {
        Ok(false)
    } else {
        Err(e)
    }
}

/// Whether the child `pid` has exited, without reaping it: while it stays a zombie its pid,
/// and so its process group's id, cannot be reused, so the group can still be killed safely.
pub fn exited_unreaped(pid: u32) -> io::Result<bool> {
    // SAFETY: waitid fills a zeroed siginfo_t we own.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        check(libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        ))?;
        Ok(info.si_pid() != 0)
    }
}

/// Sends `signal` to a child process group leader or process.
pub fn kill(pid: i32, signal: libc::c_int) -> io::Result<()> {
    // SAFETY: plain system call on integers.
    check(unsafe { libc::kill(pid, signal) }).map(|_| ())
}

/// Sends this process SIGTERM, as `kill` would: the thread waiting in
/// `wait_termination_signal` takes it.
pub fn terminate_self() {
    // SAFETY: plain system calls on integers.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGTERM);
    }
}

/// Whether a process with this pid exists (the CLI's own liveness test on lock files).
pub fn process_alive(pid: i64) -> bool {
    if pid <= 0 || pid > i32::MAX as i64 {
        return false;
    }
    // SAFETY: signal 0 only checks for existence and permission.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    r == 0 || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM)
}

pub fn getuid() -> u32 {
    // SAFETY: getuid cannot fail.
    unsafe { libc::getuid() }
}

pub fn isatty(fd: RawFd) -> bool {
    // SAFETY: isatty on any integer is safe.
    unsafe { libc::isatty(fd) == 1 }
}

/// The uid of the process at the other end of a Unix stream socket.
pub fn peer_uid(sock: &UnixStream) -> io::Result<u32> {
    peer_cred(sock.as_raw_fd()).map(|(uid, _)| uid)
}

/// Uid and pid of the process at the other end of a Unix stream socket.
fn peer_cred(fd: RawFd) -> io::Result<(u32, i32)> {
    // SAFETY: ucred is plain data and the length matches its size.
    unsafe {
        let mut cred: libc::ucred = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
        check(libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        ))?;
        Ok((cred.uid, cred.pid))
    }
}

/// Binds the abstract Unix socket `name` (a Linux name in no directory, which goes with the
/// process). When another process holds it: `Err(Some((uid, pid)))` of the holder, told
/// without waiting (a holder whose queue is full, or that cannot be told: `Err(None)`).
pub fn hold_abstract_name(name: &[u8]) -> Result<UnixListener, Option<(u32, i32)>> {
    use std::os::linux::net::SocketAddrExt;
    let addr = std::os::unix::net::SocketAddr::from_abstract_name(name).map_err(|_| None)?;
    match UnixListener::bind_addr(&addr) {
        Ok(l) => Ok(l),
        Err(e) if e.kind() == io::ErrorKind::AddrInUse => Err(abstract_holder(name).ok()),
        Err(_) => Err(None),
    }
}

fn abstract_holder(name: &[u8]) -> io::Result<(u32, i32)> {
    // SAFETY: a socket we own (closed by the OwnedFd), and an address built in a zeroed
    // sockaddr_un whose length covers exactly the family, the leading NUL and `name`.
    unsafe {
        let fd = OwnedFd::from_raw_fd(check(libc::socket(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
            0,
        ))?);
        let mut addr: libc::sockaddr_un = std::mem::zeroed();
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        if name.len() >= addr.sun_path.len() {
            return Err(io::ErrorKind::InvalidInput.into());
        }
        for (slot, b) in addr.sun_path[1..].iter_mut().zip(name) {
            *slot = *b as libc::c_char;
        }
        let len = std::mem::size_of::<libc::sa_family_t>() + 1 + name.len();
        check(libc::connect(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_un).cast(),
            len as libc::socklen_t,
        ))?;
        peer_cred(fd.as_raw_fd())
    }
}

/// Makes `target`, the descriptor a thread accepts on, the socket `with` is, and wakes that
/// thread out of an accept on the socket it was (`old`: a duplicate of it), so that its next
/// accept takes connections to `with`. For a listening socket whose path was deleted.
pub fn replace_listener(target: RawFd, old: &UnixListener, with: &UnixListener) -> io::Result<()> {
    // SAFETY: dup2 onto a descriptor that stays open (it now names the new socket, and its
    // owner closes that in the end), then shutdown on a descriptor we own.
    unsafe {
        check(libc::dup2(with.as_raw_fd(), target))?;
        libc::shutdown(old.as_raw_fd(), libc::SHUT_RDWR);
    }
    Ok(())
}

/// A pipe whose only purpose is to wake a thread blocked in `poll`.
pub struct WakePipe {
    read: OwnedFd,
    write: OwnedFd,
}

impl WakePipe {
    pub fn new() -> io::Result<WakePipe> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: fds has room for two descriptors; on success we own both.
        unsafe {
            check(libc::pipe2(
                fds.as_mut_ptr(),
                libc::O_CLOEXEC | libc::O_NONBLOCK,
            ))?;
            Ok(WakePipe {
                read: OwnedFd::from_raw_fd(fds[0]),
                write: OwnedFd::from_raw_fd(fds[1]),
            })
        }
    }

    /// Makes the next (or current) `poll` on `fd()` return. A full pipe already means "wake".
    pub fn wake(&self) {
        let b = 1u8;
        // SAFETY: writing one byte from a valid buffer to a descriptor we own.
        unsafe {
            libc::write(self.write.as_raw_fd(), (&b as *const u8).cast(), 1);
        }
    }

    /// Empties the pipe after a wake-up.
    pub fn drain(&self) {
        let mut buf = [0u8; 64];
        // SAFETY: reading into a valid buffer from a non-blocking descriptor we own.
        while unsafe { libc::read(self.read.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) } > 0 {
        }
    }

    pub fn fd(&self) -> RawFd {
        self.read.as_raw_fd()
    }
}

/// An inotify instance, read without blocking.
pub struct Inotify(std::fs::File);

impl Inotify {
    pub fn new() -> io::Result<Inotify> {
        // SAFETY: no pointers; on success we own the descriptor.
        let fd = check(unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) })?;
        // SAFETY: `fd` was just opened and is owned by nobody else.
        Ok(Inotify(unsafe { std::fs::File::from_raw_fd(fd) }))
    }

    /// Watches the folder `dir` (not a symlink to one) for its entries written, replaced,
    /// created, removed or moved, and for itself removed or moved: the watch's number.
    pub fn watch_dir(&self, dir: &std::path::Path) -> io::Result<i32> {
        let c = cstr(dir.as_os_str())?;
        let mask = libc::IN_MODIFY
            | libc::IN_ATTRIB
            | libc::IN_CREATE
            | libc::IN_DELETE
            | libc::IN_MOVED_FROM
            | libc::IN_MOVED_TO
            | libc::IN_DELETE_SELF
            | libc::IN_MOVE_SELF
            | libc::IN_ONLYDIR
            | libc::IN_DONT_FOLLOW;
        // SAFETY: a valid descriptor and NUL-terminated path.
        check(unsafe { libc::inotify_add_watch(self.0.as_raw_fd(), c.as_ptr(), mask) })
    }

    pub fn unwatch(&self, wd: i32) {
        // SAFETY: no pointers; an unknown watch number is refused with EINVAL.
        unsafe { libc::inotify_rm_watch(self.0.as_raw_fd(), wd) };
    }

    /// Each event queued, as its watch's number, whether the folder itself is gone (removed,
    /// moved, unmounted, or its watch ended) and the name of the entry; until none is left. A
    /// full queue is one event of watch -1.
    pub fn events(&self, mut each: impl FnMut(i32, bool, &[u8])) {
        let gone = libc::IN_DELETE_SELF | libc::IN_MOVE_SELF | libc::IN_UNMOUNT | libc::IN_IGNORED;
        use std::io::Read;
        let mut buf = [0u8; 8192];
        while let Ok(n @ 1..) = (&self.0).read(&mut buf) {
            let mut at = 0;
            while at + 16 <= n {
                let word =
                    |k: usize| u32::from_ne_bytes(buf[at + k..at + k + 4].try_into().unwrap());
                let end = (at + 16 + word(12) as usize).min(n);
                let name = &buf[at + 16..end];
                let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
                each(word(0) as i32, word(4) & gone != 0, name);
                at = end;
            }
        }
    }
}

/// Makes a write to a pipe nobody reads end the process, quietly, as it does for `cat`: for
/// commands that print lists (`ccide review list | head`), which would otherwise fail loudly.
pub fn end_on_broken_pipe() {
    // SAFETY: resetting a signal's disposition to its default; no handler runs.
    unsafe { libc::signal(libc::SIGPIPE, libc::SIG_DFL) };
}

/// Writes all of `bytes` to the socket, never raising SIGPIPE (MSG_NOSIGNAL): a server that went
/// away is an error to report, also in a command that ends quietly on a broken pipe.
pub fn send_all(sock: &UnixStream, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        // SAFETY: a valid buffer of that length and a socket we hold.
        let n = unsafe {
            libc::send(
                sock.as_raw_fd(),
                bytes.as_ptr().cast(),
                bytes.len(),
                libc::MSG_NOSIGNAL,
            )
        };
        match n {
            0.. => bytes = &bytes[n as usize..],
            _ if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted => {}
            _ => return Err(io::Error::last_os_error()),
        }
    }
    Ok(())
}

/// Readiness of one descriptor after `poll`.
#[derive(Clone, Copy, Default)]
pub struct Ready {
    pub readable: bool,
    pub hangup: bool,
}

/// What to wait for on one descriptor.
pub struct Interest {
    pub fd: RawFd,
    pub read: bool,
    pub write: bool,
}

/// `poll(2)` over `interests`; `None` waits forever. Interrupted calls count as a timeout.
pub fn poll(interests: &[Interest], timeout: Option<Duration>) -> io::Result<Vec<Ready>> {
    let mut fds: Vec<libc::pollfd> = interests
        .iter()
        .map(|i| libc::pollfd {
            fd: i.fd,
            events: (if i.read { libc::POLLIN } else { 0 })
                | (if i.write { libc::POLLOUT } else { 0 }),
            revents: 0,
        })
        .collect();
    let ms = match timeout {
        None => -1,
        Some(d) => d.as_millis().min(i32::MAX as u128) as libc::c_int,
    };
    // SAFETY: fds is a valid array of pollfd of the given length.
    let r = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
    Ok(fds
        .iter()
        .map(|p| Ready {
            readable: p.revents & libc::POLLIN != 0,
            hangup: p.revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0,
        })
        .collect())
}

/// Whether this process may create files in `dir` (access(2) with W_OK and X_OK): the mode
/// bits as they apply to this user (root's override included) and a read-only mount.
pub fn may_write_in(dir: &std::path::Path) -> io::Result<()> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: `c` is a NUL-terminated string that outlives the call.
    match unsafe { libc::access(c.as_ptr(), libc::W_OK | libc::X_OK) } {
        0 => Ok(()),
        _ => Err(io::Error::last_os_error()),
    }
}

/// Owner uid and permission bits of a path, without following a final symlink.
pub fn owner_and_mode(meta: &std::fs::Metadata) -> (u32, u32) {
    use std::os::unix::fs::MetadataExt;
    (meta.uid(), meta.mode() & 0o7777)
}

/// Fills `buf` from the kernel's CSPRNG with the getrandom(2) system call itself. The getrandom
/// crate, in a static glibc build, cannot find libc's wrapper and falls back to /dev/urandom,
/// which an empty container root does not have; the system call needs no file at all.
pub fn random_bytes(buf: &mut [u8]) -> io::Result<()> {
    let mut filled = 0;
    while filled < buf.len() {
        let rest = &mut buf[filled..];
        // SAFETY: the pointer and length describe the unfilled, writable part of `buf`.
        let n = unsafe { libc::syscall(libc::SYS_getrandom, rest.as_mut_ptr(), rest.len(), 0) };
        if n < 0 {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                // Kernels before 3.17: let the crate find another source.
                Some(libc::ENOSYS) => return getrandom::fill(rest).map_err(io::Error::other),
                _ => return Err(e),
            }
        }
        filled += n as usize;
    }
    Ok(())
}

fn cstr(s: &std::ffi::OsStr) -> io::Result<std::ffi::CString> {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::CString::new(s.as_bytes())
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "a path contains a NUL byte"))
}

/// Opens `root`, then each of `dirs` below it with O_NOFOLLOW: a component swapped for a
/// symlink makes this fail (ELOOP/ENOTDIR) instead of leading the write elsewhere.
pub fn open_dir_beneath(root: &std::path::Path, dirs: &[&std::ffi::OsStr]) -> io::Result<OwnedFd> {
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
    let c = cstr(root.as_os_str())?;
    // SAFETY: `c` is a valid NUL-terminated path; on success we own the descriptor.
    let mut fd = unsafe { OwnedFd::from_raw_fd(check(libc::open(c.as_ptr(), flags))?) };
    for d in dirs {
        let c = cstr(d)?;
        // SAFETY: `fd` is an open directory and `c` a valid name; we own the new descriptor.
        fd = unsafe {
            OwnedFd::from_raw_fd(check(libc::openat(
                fd.as_raw_fd(),
                c.as_ptr(),
                flags | libc::O_NOFOLLOW,
            ))?)
        };
    }
    Ok(fd)
}

/// Creates `name` in the directory `dir`, exclusively and without following a symlink.
pub fn create_at(dir: &OwnedFd, name: &std::ffi::OsStr, mode: u32) -> io::Result<std::fs::File> {
    let c = cstr(name)?;
    let flags = libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
    // SAFETY: valid directory descriptor and name; on success we own the file descriptor.
    let fd =
        check(unsafe { libc::openat(dir.as_raw_fd(), c.as_ptr(), flags, mode as libc::c_uint) })?;
    // SAFETY: `fd` was just opened and is owned by nobody else.
    Ok(unsafe { std::fs::File::from_raw_fd(fd) })
}

/// Opens `name` in the directory `dir` for reading, without following a symlink and without
/// blocking on a FIFO (O_NONBLOCK: the caller checks with `fstat` what it opened).
pub fn open_read_at(dir: &OwnedFd, name: &std::ffi::OsStr) -> io::Result<std::fs::File> {
    let c = cstr(name)?;
    let flags = libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC;
    // SAFETY: valid directory descriptor and name; on success we own the file descriptor.
    let fd = check(unsafe { libc::openat(dir.as_raw_fd(), c.as_ptr(), flags) })?;
    // SAFETY: `fd` was just opened and is owned by nobody else.
    Ok(unsafe { std::fs::File::from_raw_fd(fd) })
}

/// Whether an `open_dir_beneath` or `open_read_at` failed on a symlink (ELOOP, or ENOTDIR
/// for a directory opened with O_NOFOLLOW that is now a symlink).
pub fn met_symlink(e: &io::Error) -> bool {
    matches!(e.raw_os_error(), Some(libc::ELOOP) | Some(libc::ENOTDIR))
}

/// Permission bits of `name` in `dir` if it is a regular file (a symlink is not followed).
pub fn regular_file_mode_at(dir: &OwnedFd, name: &std::ffi::OsStr) -> Option<u32> {
    let c = cstr(name).ok()?;
    // SAFETY: `st` is plain data filled by fstatat on a valid descriptor and name.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        if libc::fstatat(
            dir.as_raw_fd(),
            c.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        ) != 0
        {
            return None;
        }
        (st.st_mode & libc::S_IFMT == libc::S_IFREG).then_some(st.st_mode & 0o7777)
    }
}

/// Renames `from` to `to`, both in the directory `dir`.
pub fn rename_at(dir: &OwnedFd, from: &std::ffi::OsStr, to: &std::ffi::OsStr) -> io::Result<()> {
    let (f, t) = (cstr(from)?, cstr(to)?);
    // SAFETY: valid descriptor and names.
    check(unsafe { libc::renameat(dir.as_raw_fd(), f.as_ptr(), dir.as_raw_fd(), t.as_ptr()) })
        .map(|_| ())
}

pub fn unlink_at(dir: &OwnedFd, name: &std::ffi::OsStr) -> io::Result<()> {
    let c = cstr(name)?;
    // SAFETY: valid descriptor and name.
    check(unsafe { libc::unlinkat(dir.as_raw_fd(), c.as_ptr(), 0) }).map(|_| ())
}

pub fn fsync_fd(fd: &OwnedFd) {
    // SAFETY: fsync on a descriptor we own.
    unsafe {
        libc::fsync(fd.as_raw_fd());
    }
}

/// Copies the rest of `from` to the end of `to` with `copy_file_range`, no byte passing through
/// this process; false, with nothing copied, when the kernel cannot for these two files
/// (another file system, on kernels before 5.19): the caller copies them itself.
pub fn copy_in_kernel(from: &std::fs::File, to: &std::fs::File) -> io::Result<bool> {
    let mut copied = false;
    loop {
        // SAFETY: two descriptors we own, null offsets (the files' own positions are used).
        let n = unsafe {
            libc::copy_file_range(
                from.as_raw_fd(),
                std::ptr::null_mut(),
                to.as_raw_fd(),
                std::ptr::null_mut(),
                1 << 30,
                0,
            )
        };
        if n == 0 {
            return Ok(true);
        }
        if n < 0 {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EXDEV | libc::ENOSYS | libc::EINVAL | libc::EOPNOTSUPP) if !copied => {
                    return Ok(false);
                }
                _ => return Err(e),
            }
        }
        copied = true;
    }
}

/// Sets the process umask so that nothing ccide creates is readable by others by accident.
pub fn restrict_umask() {
    // SAFETY: umask cannot fail.
    unsafe {
        libc::umask(0o077);
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
        crate::log::warn!("cannot notify systemd ({state}): {e}");
    }
}

/// A terminal's settings, saved to be restored.
pub struct TerminalMode(libc::termios);

/// The terminal `fd`'s settings now.
pub fn terminal_mode(fd: RawFd) -> io::Result<TerminalMode> {
    // SAFETY: termios is plain data; tcgetattr fills it or fails.
    let mut t: libc::termios = unsafe { std::mem::zeroed() };
    // SAFETY: t is a valid termios to write into.
    check(unsafe { libc::tcgetattr(fd, &mut t) })?;
    Ok(TerminalMode(t))
}

/// Puts the terminal `fd` in single-key mode: each key is read as it is typed, not echoed, and
/// Ctrl-C arrives as a byte (0x03) instead of a signal, so the caller restores the terminal
/// before it stops. Output processing stays on (`\n` shows as a new line).
pub fn set_single_key(fd: RawFd, saved: &TerminalMode) -> io::Result<()> {
    let mut t = saved.0;
    t.c_lflag &= !(libc::ICANON | libc::ECHO | libc::ISIG | libc::IEXTEN);
    t.c_iflag &= !(libc::IXON | libc::ICRNL);
    t.c_cc[libc::VMIN] = 1;
    t.c_cc[libc::VTIME] = 0;
    // SAFETY: t is a valid termios.
    check(unsafe { libc::tcsetattr(fd, libc::TCSANOW, &t) }).map(|_| ())
}

/// Restores settings saved with `terminal_mode`.
pub fn set_terminal_mode(fd: RawFd, mode: &TerminalMode) -> io::Result<()> {
    // SAFETY: mode.0 is a termios tcgetattr filled.
    check(unsafe { libc::tcsetattr(fd, libc::TCSANOW, &mode.0) }).map(|_| ())
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_child_dies_with_the_thread_that_spawned_it() {
        let child = std::thread::spawn(|| {
            let mut cmd = std::process::Command::new("sleep");
            cmd.arg("100");
            super::die_with_parent(&mut cmd);
            cmd.spawn().unwrap().id()
        })
        .join()
        .unwrap();
        let end = std::time::Instant::now() + std::time::Duration::from_secs(5);
        loop {
            // Killed, then a zombie until this process reaps it (dropping `Child` never does).
            let stat = std::fs::read_to_string(format!("/proc/{child}/stat")).unwrap_or_default();
            if stat.is_empty()
                || stat[stat.rfind(')').unwrap() + 1..]
                    .trim_start()
                    .starts_with('Z')
            {
                break;
            }
            assert!(
                std::time::Instant::now() < end,
                "sleep {child} outlived its thread"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}
