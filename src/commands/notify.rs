//! Telling the person that a review waits: openDiff blocks the CLI until `ccide diff
//! accept|reject` answers it, and the person may be in another window or over SSH. `ccide
//! claude` writes a terminal notification to its own terminal (and a tmux message), and
//! serve's `--on-review` runs the user's command.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::Value;

use crate::control::Control;
use crate::control::client::Events;
use crate::control::protocol::Request;
use crate::proc::Queue;
use crate::rpc::clients::Clients;
use crate::text::visible;

/// An `--on-review` command running longer is killed.
pub const ON_REVIEW_LIMIT: Duration = Duration::from_secs(30);
/// How long a `tmux` command may take.
const TMUX_LIMIT: Duration = Duration::from_secs(5);

/// What a `diff_opened` event says (ccide-protocol(7) §9.3).
#[derive(Debug, PartialEq)]
pub struct Opened {
    pub id: String,
    pub file: String,
    /// The lines added and removed, when the server counted them.
    pub counts: Option<(u64, u64)>,
    pub client: u64,
}

impl Opened {
    /// The event, if it is a `diff_opened`.
    pub fn from_event(v: &Value) -> Option<Opened> {
        if v["event"] != "diff_opened" {
            return None;
        }
        Some(Opened {
            id: v["id"].as_str()?.to_string(),
            file: v["file"].as_str()?.to_string(),
            counts: v["added"].as_u64().zip(v["removed"].as_u64()),
            client: v["client"].as_u64()?,
        })
    }

    /// The line a person reads: which diff, which file (relative to `cwd` when under it,
    /// made visible: no control character of the name reaches the terminal), and the
    /// commands that answer it.
    pub fn message(&self, cwd: &Path) -> String {
        let file = Path::new(&self.file);
        let shown = file.strip_prefix(cwd).unwrap_or(file).to_string_lossy();
        let counts = self
            .counts
            .map_or(String::new(), |(a, r)| format!(", +{a} -{r}"));
        format!(
            "review waits: diff {id} ({file}{counts}): ccide diff review {id}",
            id = self.id,
            file = visible(&shown),
        )
    }
}

/// Whether the terminal named by `term` ($TERM, or the tmux client's terminal) shows OSC 777
/// notifications: foot and rxvt-unicode (with its notify extension). Every other terminal
/// gets OSC 9 (iTerm2, WezTerm, Ghostty, kitty, Windows Terminal among those that show it;
/// the others ignore it).
pub fn speaks_osc_777(term: &str) -> bool {
    term.starts_with("foot") || term.starts_with("rxvt-unicode")
}

/// The notification's escape sequence: OSC 777 (`notify;TITLE;BODY`) or OSC 9, ended by BEL.
/// `body` is made visible first, so it cannot end the sequence early.
pub fn osc(osc_777: bool, body: &str) -> String {
    let body = visible(body);
    if osc_777 {
        format!("\x1b]777;notify;ccide;{body}\x07")
    } else {
        format!("\x1b]9;ccide: {body}\x07")
    }
}

/// `seq` wrapped in tmux's passthrough (DCS `tmux;` with every ESC doubled, ended by ST), so
/// that tmux hands it to the outer terminal (with `allow-passthrough on`).
pub fn through_tmux(seq: &str) -> String {
    format!("\x1bPtmux;{}\x1b\\", seq.replace('\x1b', "\x1b\x1b"))
}

/// `text` for a tmux format (display-message expands `#{...}` and runs `#(...)`): every `#`
/// doubled, so a file name is shown, never run.
pub fn tmux_literal(text: &str) -> String {
    text.replace('#', "##")
}

/// `ccide claude`'s side: follows the server's events (subscribed before the CLI starts, so
/// none is missed) and notifies its terminal of each diff a client of `child` (the CLI it
/// started, or a process under it, by the pid the client gave: ccide-protocol(7) §9.3)
/// proposes. Runs on a thread of its own until the stream ends.
pub struct TerminalNotices {
    pub events: Events,
    pub control: PathBuf,
    /// Where `tmux`'s output goes while it runs (the server's state directory).
    pub scratch: PathBuf,
    pub cwd: PathBuf,
}

impl TerminalNotices {
    pub fn run(mut self, child: u32) {
        // Whether each client seen is one of the child's (a few: a list).
        let mut ours: Vec<(u64, bool)> = Vec::new();
        while let Ok(v) = self.events.next() {
            let Some(o) = Opened::from_event(&v) else {
                continue;
            };
            let mine = match ours.iter().find(|c| c.0 == o.client) {
                Some(&(_, m)) => m,
                None => match client_pid(&self.control, o.client) {
                    Some(pid) => {
                        let m = crate::proc::tree(child).contains(&pid);
                        ours.push((o.client, m));
                        m
                    }
                    None => false,
                },
            };
            if mine {
                self.notify(&o.message(&self.cwd));
            }
        }
    }

    /// OSC 9 or 777 on stderr (the terminal shared with the CLI); inside tmux wrapped in its
    /// passthrough, and then shown on the session's client by `tmux display-message` too: a
    /// message freezes that client's display while it shows, and a passthrough arriving
    /// meanwhile would be dropped, so the sequence goes first.
    fn notify(&self, body: &str) {
        let tmux = std::env::var_os("TMUX").filter(|t| !t.is_empty()).is_some();
        let client = if tmux { self.tmux_client() } else { None };
        let seq = if tmux {
            let term = client.as_ref().map_or("", |c| c.1.as_str());
            through_tmux(&osc(speaks_osc_777(term), body))
        } else {
            let term = std::env::var("TERM").unwrap_or_default();
            osc(speaks_osc_777(&term), body)
        };
        {
            let mut err = std::io::stderr().lock();
            let _ = err.write_all(seq.as_bytes()).and_then(|()| err.flush());
        }
        if let Some((tty, _)) = &client {
            let text = format!("ccide: {}", visible(body));
            self.tmux(&["display-message", "-c", tty, &tmux_literal(&text)]);
        }
    }

    /// The tty and terminal name of the tmux client showing this pane ($TMUX_PANE), or of the
    /// session's most recent client.
    fn tmux_client(&self) -> Option<(String, String)> {
        let mut args = vec!["display-message".to_string(), "-p".into()];
        if let Some(pane) = std::env::var("TMUX_PANE").ok().filter(|p| !p.is_empty()) {
            args.extend(["-t".into(), pane]);
        }
        args.push("#{client_tty} #{client_termname}".into());
        let out = self.tmux(&args.iter().map(String::as_str).collect::<Vec<_>>())?;
        let line = String::from_utf8_lossy(&out);
        let (tty, term) = line.trim_end().split_once(' ')?;
        (!tty.is_empty()).then(|| (tty.to_string(), term.to_string()))
    }

    /// Runs tmux (found on PATH, no shell) with `args`; its output when it succeeded.
    fn tmux(&self, args: &[&str]) -> Option<Vec<u8>> {
        let program = crate::proc::find_on_path("tmux")?;
        let mut cmd = Command::new(program);
        cmd.args(args);
        let ran = crate::proc::run(cmd, None, &self.scratch, TMUX_LIMIT, 4096).ok()?;
        ran.status
            .is_some_and(|s| s.success())
            .then_some(ran.stdout)
    }
}

/// The pid a client gave in `ide_connected`, from the server's status.
fn client_pid(control: &Path, client: u64) -> Option<u32> {
    let status = Control::open(control)
        .ok()?
        .request(&Request::Status)
        .ok()?;
    let clients = status["status"]["clients"].as_array()?;
    let c = clients.iter().find(|c| c["id"] == client)?;
    u32::try_from(c["pid"].as_i64()?).ok()
}

/// serve's `--on-review COMMAND`: run for each proposal, off the request path (the event is
/// handed to a thread of its own), without a shell, killed after `ON_REVIEW_LIMIT`.
pub struct OnReview {
    pub words: Vec<String>,
    pub clients: Arc<Clients>,
    /// Where the command's output goes while it runs (the state directory).
    pub scratch: PathBuf,
}

impl OnReview {
    /// Subscribes to `events`, and starts the thread that runs the command.
    pub fn start(self, events: &crate::state::events::Events) -> Result<(), String> {
        let queue: Arc<Queue<Value>> = Arc::default();
        let sink = queue.clone();
        events.subscribe_with(Box::new(move |line| {
            if line.contains("\"diff_opened\"")
                && let Ok(v) = serde_json::from_slice::<Value>(line.as_bytes())
                && v["event"] == "diff_opened"
            {
                sink.push(v);
            }
            true
        }));
        let this = Arc::new(self);
        let failing = Arc::new(AtomicBool::new(false));
        crate::proc::spawn_thread("on-review", move || {
            while let Some(v) = queue.pop(None) {
                let Some(o) = Opened::from_event(&v) else {
                    continue;
                };
                // Each run on a thread of its own: a slow command does not hold back the
                // next proposal's.
                let (this, failing) = (this.clone(), failing.clone());
                let _ =
                    crate::proc::spawn_thread("on-review-run", move || this.run_once(&o, &failing));
            }
        })
        .map(|_| ())
        .map_err(|e| format!("cannot start the --on-review thread: {e}"))
    }

    /// The command for one proposal, with the diff in its environment.
    pub fn command(&self, o: &Opened) -> Command {
        let mut cmd = Command::new(&self.words[0]);
        cmd.args(&self.words[1..])
            .env("CCIDE_DIFF_ID", &o.id)
            .env("CCIDE_DIFF_FILE", &o.file);
        match o.counts {
            Some((added, removed)) => {
                cmd.env("CCIDE_DIFF_ADDED", added.to_string())
                    .env("CCIDE_DIFF_REMOVED", removed.to_string());
            }
            None => {
                cmd.env_remove("CCIDE_DIFF_ADDED")
                    .env_remove("CCIDE_DIFF_REMOVED");
            }
        }
        let client = self.clients.all().into_iter().find(|c| c.id == o.client);
        let info = client.map(|c| c.info());
        cmd.env(
            "CCIDE_DIFF_CLIENT",
            info.as_ref().map_or("", |i| i.name.as_str()),
        )
        .env(
            "CCIDE_DIFF_CLIENT_PID",
            info.and_then(|i| i.pid)
                .map_or(String::new(), |p| p.to_string()),
        );
        cmd
    }

    /// Runs the command once. A failure is logged as a warning once, until a run succeeds
    /// again (later ones at debug level): a broken command does not fill the log.
    fn run_once(&self, o: &Opened, failing: &AtomicBool) {
        let ran = crate::proc::run(self.command(o), None, &self.scratch, ON_REVIEW_LIMIT, 4096);
        let failure = match ran {
            Ok(r) => match r.status {
                Some(s) if s.success() => None,
                Some(s) => Some(format!(
                    "{s}{}",
                    first_line(&r.stderr).map_or(String::new(), |l| format!(": {l}"))
                )),
                None => Some(format!(
                    "killed after {}",
                    crate::text::human_duration(ON_REVIEW_LIMIT)
                )),
            },
            Err(e) => Some(format!("cannot run it: {e}")),
        };
        let Some(why) = failure else {
            failing.store(false, Ordering::Relaxed);
            return;
        };
        let command = visible(&self.words.join(" ")).into_owned();
        if failing.swap(true, Ordering::Relaxed) {
            crate::log::debug!(
                "--on-review {command} failed again for diff {}: {why}",
                o.id
            );
        } else {
            crate::log::warn!(
                "--on-review {command} failed for diff {}: {why} (fix the command or drop --on-review; further failures are logged at debug level until it succeeds)",
                o.id
            );
        }
    }
}

/// The first non-empty line of a command's output, made visible.
fn first_line(out: &[u8]) -> Option<String> {
    let text = String::from_utf8_lossy(out);
    let line = text.lines().find(|l| !l.trim().is_empty())?;
    Some(visible(line.trim()).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opened(file: &str, counts: Option<(u64, u64)>) -> Opened {
        Opened {
            id: "3".into(),
            file: file.into(),
            counts,
            client: 1,
        }
    }

    #[test]
    fn the_message_names_the_diff_the_file_under_cwd_and_the_commands() {
        assert_eq!(
            opened("/w/src/app.py", Some((2, 1))).message(Path::new("/w")),
            "review waits: diff 3 (src/app.py, +2 -1): ccide diff review 3"
        );
        assert_eq!(
            opened("/elsewhere/a.txt", None).message(Path::new("/w")),
            "review waits: diff 3 (/elsewhere/a.txt): ccide diff review 3"
        );
    }

    #[test]
    fn control_characters_of_a_file_name_never_reach_the_terminal() {
        let m = opened("/w/a\x1b]0;x\x07\nb.txt", None).message(Path::new("/w"));
        assert!(m.contains("(a\\u{1b}]0;x\\u{7}\\nb.txt)"), "{m}");
        for (osc_777, tmux) in [(false, false), (true, false), (false, true)] {
            let mut seq = osc(osc_777, &m);
            if tmux {
                seq = through_tmux(&seq);
            }
            let controls: Vec<char> = seq.chars().filter(|c| c.is_control()).collect();
            let expected: &[char] = match tmux {
                false => &['\x1b', '\x07'],
                true => &['\x1b', '\x1b', '\x1b', '\x07', '\x1b'],
            };
            assert_eq!(controls, expected, "{seq:?}");
        }
    }

    #[test]
    fn osc_9_or_777_by_terminal_and_tmux_passthrough() {
        assert_eq!(osc(false, "hi"), "\x1b]9;ccide: hi\x07");
        assert_eq!(osc(true, "hi"), "\x1b]777;notify;ccide;hi\x07");
        assert_eq!(
            through_tmux(&osc(false, "hi")),
            "\x1bPtmux;\x1b\x1b]9;ccide: hi\x07\x1b\\"
        );
        for t in [
            "foot",
            "foot-extra",
            "rxvt-unicode",
            "rxvt-unicode-256color",
        ] {
            assert!(speaks_osc_777(t), "{t}");
        }
        for t in ["xterm-256color", "xterm-kitty", "tmux-256color", ""] {
            assert!(!speaks_osc_777(t), "{t}");
        }
    }

    #[test]
    fn a_tmux_message_shows_hashes_and_runs_nothing() {
        assert_eq!(tmux_literal("a#(rm x)#{b}.txt"), "a##(rm x)##{b}.txt");
    }

    #[test]
    fn opened_from_a_diff_opened_event_only() {
        let v = serde_json::json!({"event": "diff_opened", "id": "4", "file": "/w/a", "client": 2, "added": 1, "removed": 0});
        assert_eq!(
            Opened::from_event(&v),
            Some(Opened {
                id: "4".into(),
                file: "/w/a".into(),
                counts: Some((1, 0)),
                client: 2
            })
        );
        let settled =
            serde_json::json!({"event": "diff_settled", "id": "4", "file": "/w/a", "client": 2});
        assert_eq!(Opened::from_event(&settled), None);
    }
}
