//! A language server's process: spawned in its own process group by a thread that lives as
//! long as it (so PR_SET_PDEATHSIG means "ccide died"), one thread reading its stdout, one its
//! stderr, and the owning thread writing its stdin from a queue, so no caller ever blocks on a
//! server that stopped reading.

use std::collections::VecDeque;
use std::io::{BufRead, Read};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::session::Server;

/// What the owning thread is asked to do.
pub enum ToProc {
    Send(Value),
    /// Stop gracefully: send this `shutdown` request, wait for its answer, send `exit`.
    Stop(Value),
    /// The `shutdown` request was answered.
    ShutdownAck,
    /// The server closed its stdout (it exited, or is about to).
    Eof,
    /// On the start-up inbox only: the pid, or why the program could not run.
    Started(Result<u32, String>),
}

/// A thread's queue of messages. std's mpsc would bring its three channel flavours (about
/// 5 KB of code per message type, measured) into a binary that has no other use for them.
#[derive(Default)]
pub struct Inbox {
    q: Mutex<VecDeque<ToProc>>,
    cv: Condvar,
}

impl Inbox {
    pub fn push(&self, m: ToProc) {
        self.q
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back(m);
        self.cv.notify_one();
    }

    /// The next message, waiting until `until` at most (forever if None).
    fn pop(&self, until: Option<Instant>) -> Option<ToProc> {
        let mut q = self.q.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(m) = q.pop_front() {
                return Some(m);
            }
            q = match until {
                None => self.cv.wait(q).unwrap_or_else(|e| e.into_inner()),
                Some(t) => {
                    let left = t.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return None;
                    }
                    self.cv
                        .wait_timeout(q, left)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
            };
        }
    }
}

/// How long a stopping server gets for each of `shutdown` and `exit` before its group is
/// killed.
const STOP_GRACE: Duration = Duration::from_secs(1);

/// Starts `words` in `cwd`; returns its pid and the inbox of its owning thread (whose
/// `Send`s go to its stdin). Messages go to `server.on_message(run, ..)`; when it ends,
/// `server.process_exited(run, ..)` is called.
pub fn spawn(
    server: &Arc<Server>,
    run: u64,
    words: &[String],
    cwd: &Path,
) -> Result<(u32, Arc<Inbox>), String> {
    let inbox = Arc::new(Inbox::default());
    let ready = Arc::new(Inbox::default());
    let (server, words, cwd, i, r) = (
        server.clone(),
        words.to_vec(),
        cwd.to_path_buf(),
        inbox.clone(),
        ready.clone(),
    );
    std::thread::Builder::new()
        .name("lsp-proc".into())
        .stack_size(crate::proc::THREAD_STACK)
        .spawn(move || own(server, run, &words, &cwd, i, &r))
        .map_err(|e| format!("cannot start a thread: {e}"))?;
    match ready.pop(None) {
        Some(ToProc::Started(Ok(pid))) => Ok((pid, inbox)),
        Some(ToProc::Started(Err(e))) => Err(e),
        _ => Err("the process thread ended early".into()),
    }
}

/// The owning thread: spawn, then write what is queued until told to stop or the server
/// hangs up; then make sure the whole group is gone and reap the leader.
fn own(
    server: Arc<Server>,
    run: u64,
    words: &[String],
    cwd: &Path,
    inbox: Arc<Inbox>,
    ready: &Inbox,
) {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(&words[0]);
    cmd.args(&words[1..])
        .current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0);
    crate::sys::unblock_all_signals_in_child(&mut cmd);
    crate::sys::die_with_parent(&mut cmd);
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            ready.push(ToProc::Started(Err(format!(
                "cannot run {}: {e}",
                words[0]
            ))));
            return;
        }
    };
    let pid = child.id();
    let mut stdin = child.stdin.take().expect("piped stdin");
    let stdout = child.stdout.take().expect("piped stdout");
    let stderr = child.stderr.take().expect("piped stderr");
    ready.push(ToProc::Started(Ok(pid)));

    let (s, reader_inbox) = (server.clone(), inbox.clone());
    let reader = std::thread::Builder::new()
        .name("lsp-read".into())
        .stack_size(crate::proc::THREAD_STACK)
        .spawn(move || {
            let mut r = std::io::BufReader::with_capacity(1 << 16, stdout);
            loop {
                match crate::lsp::framing::read_framed(&mut r) {
                    Ok(Some(body)) => match serde_json::from_slice(&body) {
                        Ok(v) => s.on_message(run, v),
                        Err(e) => crate::log::warn!("language server {}: bad JSON: {e}", s.name),
                    },
                    Ok(None) => break,
                    Err(e) => {
                        crate::log::warn!("language server {}: {e}", s.name);
                        break;
                    }
                }
            }
            reader_inbox.push(ToProc::Eof);
        });
    let s = server.clone();
    let err_reader = std::thread::Builder::new()
        .name("lsp-stderr".into())
        .stack_size(crate::proc::THREAD_STACK)
        .spawn(move || {
            let mut r = std::io::BufReader::new(stderr);
            let mut line = Vec::new();
            loop {
                line.clear();
                match (&mut r).take(8192).read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => s.on_stderr(run, String::from_utf8_lossy(&line).trim_end()),
                }
            }
        });
    if reader.is_err() || err_reader.is_err() {
        crate::log::warn!("language server {}: cannot start its threads", server.name);
    }

    // A write error means it stopped reading: it is dying, and the end of its stdout will
    // say so; until then later messages are dropped.
    let mut write_failed = false;
    // Without a reader nothing would ever say the server ended: stop it at once.
    while reader.is_ok() {
        match inbox.pop(None).expect("no deadline") {
            ToProc::Send(v) => {
                if !write_failed && let Err(e) = crate::lsp::framing::write_framed(&mut stdin, &v) {
                    crate::log::debug!("language server {}: write: {e}", server.name);
                    write_failed = true;
                }
            }
            ToProc::Stop(shutdown) => {
                if crate::lsp::framing::write_framed(&mut stdin, &shutdown).is_ok() {
                    let until = Instant::now() + STOP_GRACE;
                    while let Some(m) = inbox.pop(Some(until)) {
                        if matches!(m, ToProc::ShutdownAck | ToProc::Eof) {
                            break;
                        }
                    }
                    let exit = crate::rpc::notification("exit", Value::Null);
                    let _ = crate::lsp::framing::write_framed(&mut stdin, &exit);
                }
                drop(stdin);
                let until = Instant::now() + STOP_GRACE;
                while !crate::proc::exited(pid) && Instant::now() < until {
                    std::thread::sleep(Duration::from_millis(10));
                }
                break;
            }
            ToProc::Eof => break,
            ToProc::ShutdownAck | ToProc::Started(_) => {}
        }
    }
    // The leader is not reaped yet, so its pid (the group id) cannot have been reused.
    server.process_ending(run);
    crate::proc::kill_tree(pid);
    let how = match child.wait() {
        Ok(s) => s.to_string(),
        Err(e) => format!("wait failed: {e}"),
    };
    server.process_exited(run, &how);
}
