//! `ccide diff review [ID]`: a proposal reviewed hunk by hunk with `git add -p`'s keys, on
//! the terminal, and answered with what was kept (ccide-protocol(7) §5.5). Without ID it
//! walks the pending diffs, oldest first, then waits for the next one (`ccide events`).

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::client::{self, connect, cwd_string, file_of, find_diff, read_diff};
use crate::cli::{Args, EXIT_FAILURE, EXIT_OK, Fail, Outcome};
use crate::control::Control;
use crate::control::protocol::Request;
use crate::json::obj;
use crate::review::{Answer, Decision, Piece, Review};
use crate::sys::TerminalMode;
use crate::text::visible;

/// `ccide diff`: `review` here, every other action in `client`.
pub fn diff(args: &Args) -> Outcome {
    if args.operands.first().map(String::as_str) != Some("review") {
        return client::diff(args);
    }
    if args.operands.len() > 2 {
        return Err(Fail::Usage(format!(
            "unexpected argument '{}'",
            args.operands[2]
        )));
    }
    if args.value("--hunks").is_some() || args.switch("--json")? {
        return Err(Fail::Usage(
            "ccide diff review asks on the terminal: --hunks and --json go with accept".into(),
        ));
    }
    let why = args.value("--why");
    let mut ctl = connect(args)?;
    let mut t = Terminal::open("ccide diff accept --hunks LIST or ccide diff reject --why TEXT")?;
    if let Some(target) = args.operands.get(1) {
        let d = find_diff(&mut ctl, Some(target))?;
        return match review_one(&mut t, &mut ctl, &d, why.as_deref())? {
            Step::Stop => Ok(EXIT_FAILURE),
            _ => Ok(EXIT_OK),
        };
    }
    walk(args, &mut t, &mut ctl, why.as_deref())
}

/// Every pending diff, oldest first, then each new one as it arrives, until the user stops.
fn walk(args: &Args, t: &mut Terminal, ctl: &mut Control, why: Option<&str>) -> Outcome {
    // Subscribed before listing, so a diff opened in between is not missed.
    let mut events = connect(args)?.subscribe()?;
    // true: a diff was opened; false: the server went away (its event stream ended).
    // (A proc::Queue, as everywhere: std's mpsc would bring its own code for one channel.)
    let rx = std::sync::Arc::new(crate::proc::Queue::default());
    let tx = rx.clone();
    crate::proc::spawn_thread("diff-review-events", move || {
        while let Ok(line) = events.next_line() {
            if line.contains("\"diff_opened\"") {
                tx.push(true);
            }
        }
        tx.push(false);
    })
    .map_err(|e| Fail::Failed(format!("cannot start a thread: {e}")))?;
    // The ids of the diffs walked (a session's worth: a list).
    let mut seen: Vec<String> = Vec::new();
    loop {
        let list = ctl.request(&Request::DiffList)?;
        let mut pending: Vec<Value> = list["diffs"].as_array().cloned().unwrap_or_default();
        // Oldest first: by id as a number, those without one first.
        crate::text::sort_by_bytes(&mut pending, |d| {
            let id = d["id"].as_str().and_then(|i| i.parse::<u64>().ok());
            id.map_or(Vec::new(), |n| [&[1][..], &n.to_be_bytes()].concat())
        });
        if let Some(d) = pending
            .into_iter()
            .find(|d| !seen.iter().any(|s| s == d["id"].as_str().unwrap_or("")))
        {
            seen.push(d["id"].as_str().unwrap_or("").to_string());
            match review_one(t, ctl, &d, why) {
                Ok(Step::Stop) => return Ok(EXIT_FAILURE),
                Ok(Step::Done) => {}
                // One diff that cannot be read (its state directory deleted) does not stop
                // the walk: it can still be rejected with ccide diff reject.
                Err(Fail::Failed(e)) => t.say(&format!("skipped: {e}\n")),
                Err(e) => return Err(e),
            }
            continue;
        }
        t.say("waiting for Claude's next proposal (q to stop)\n");
        match t.wait_key_or(&rx)? {
            Some(true) => {}
            Some(false) => {
                t.say("the ccide server stopped: no more proposals to review\n");
                return Ok(EXIT_OK);
            }
            None => return Ok(EXIT_OK),
        }
    }
}

/// How reviewing one diff ended.
enum Step {
    /// Answered, or skipped (it changes nothing, or it was settled meanwhile).
    Done,
    /// Ctrl-C or Ctrl-D: stop without answering.
    Stop,
}

const CTRL_C: u8 = 3;
const CTRL_D: u8 = 4;

const HELP: &str = "\
y - keep this hunk
n - drop this hunk (you may say why)
q - quit: answer now; undecided hunks are dropped
a - keep this hunk and all later hunks in the file
d - drop this hunk and all later hunks in the file
j - leave this hunk undecided, see next undecided hunk
J - leave this hunk undecided, see next hunk
k - leave this hunk undecided, see previous undecided hunk
K - leave this hunk undecided, see previous hunk
s - split the current hunk into smaller hunks
e - manually edit the current hunk
? - print help
Ctrl-C - stop without answering: the diff stays pending
";

/// The user's review of one diff so far.
struct Session {
    review: Review,
    decisions: Vec<Option<Decision>>,
    reasons: Vec<Option<String>>,
    at: usize,
}

impl Session {
    fn undecided(&self, i: usize) -> bool {
        self.decisions[i].is_none()
    }

    /// The next undecided hunk after the current one, else the first one: None when all are
    /// decided.
    fn next_undecided(&self) -> Option<usize> {
        let n = self.decisions.len();
        (self.at + 1..n)
            .chain(0..self.at + 1)
            .find(|&i| self.undecided(i))
    }

    /// On to the next undecided hunk, if there is one.
    fn advance(&mut self) {
        if let Some(k) = self.next_undecided() {
            self.at = k;
        }
    }

    fn decide(&mut self, i: usize, d: Decision, why: Option<String>) {
        self.decisions[i] = Some(d);
        self.reasons[i] = why;
    }
}

/// Reviews the diff `d` hunk by hunk and answers it.
fn review_one(
    t: &mut Terminal,
    ctl: &mut Control,
    d: &Value,
    why: Option<&str>,
) -> Result<Step, Fail> {
    let id = d["id"].as_str().unwrap_or("").to_string();
    let f = read_diff(d).map_err(Fail::Failed)?;
    let name = file_of(d);
    let mut head = format!("diff {id}: {name}{}\n", client::from(d));
    for note in [f.restored(), f.rewrite_note()].into_iter().flatten() {
        head += &format!("{note}\n");
    }
    let review = Review::new(f.original.text, f.proposed);
    let n = review.pieces.len();
    if n == 0 {
        t.say(&format!(
            "{head}no changes: the proposal equals the original; accept or reject it with ccide diff accept|reject {id}\n"
        ));
        return Ok(Step::Done);
    }
    let a = if d["new_file"] == true {
        "/dev/null".to_string()
    } else {
        format!("a/{name}")
    };
    t.say(&format!(
        "{head}{}",
        t.paint_header(&format!("--- {a}\n+++ b/{name}\n"))
    ));
    let mut s = Session {
        review,
        decisions: vec![None; n],
        reasons: vec![None; n],
        at: 0,
    };
    loop {
        if !ask_hunk(t, &mut s)? {
            return Ok(Step::Stop);
        }
        if s.decisions.iter().all(Option::is_some) {
            let decisions: Vec<Decision> = s.decisions.iter().flatten().cloned().collect();
            match settle(ctl, &id, &s, &decisions, why)? {
                Some(said) => {
                    t.say(&format!("{said} ({name})\n"));
                    return Ok(Step::Done);
                }
                None => {
                    // Edits that cannot be composed: asked again.
                    t.say("those hunks are undecided again\n");
                    for d in s.decisions.iter_mut() {
                        if matches!(d, Some(Decision::Edit(_))) {
                            *d = None;
                        }
                    }
                    s.at = s.next_undecided().unwrap_or(0);
                }
            }
        }
    }
}

/// Shows the current hunk and acts on one key. False when the user stopped (Ctrl-C).
fn ask_hunk(t: &mut Terminal, s: &mut Session) -> Result<bool, Fail> {
    let (i, n) = (s.at, s.decisions.len());
    t.say(&t.paint_hunk(&s.review.pieces[i].text()));
    t.say(&t.paint_prompt(&format!(
        "({}/{n}) Keep this hunk [{},?]? ",
        i + 1,
        keys_offered(s)
    )));
    let key = t.key()?;
    let shown = if key.is_ascii_graphic() {
        (key as char).to_string()
    } else {
        String::new()
    };
    t.say(&format!("{shown}\n"));
    match key {
        b'y' | b'n' | b'a' | b'd' | b'q' => decide_key(t, s, key)?,
        b'j' | b'k' | b'J' | b'K' => match moved(s, key) {
            Some(k) => s.at = k,
            None => t.say(match key {
                b'j' => "No next undecided hunk\n",
                b'k' => "No previous undecided hunk\n",
                b'J' => "No next hunk\n",
                _ => "No previous hunk\n",
            }),
        },
        b's' => {
            let parts = s.review.split(i);
            if parts == 1 {
                t.say("Sorry, cannot split this hunk\n");
            } else {
                t.say(&format!("Split into {parts} hunks.\n"));
                // Hunk i's decision and reason replaced by one (none yet) for each part; not
                // `splice`, whose generic drop is about 700 bytes of binary per item type.
                s.decisions[i] = None;
                s.reasons[i] = None;
                for _ in 1..parts {
                    s.decisions.insert(i, None);
                    s.reasons.insert(i, None);
                }
            }
        }
        b'e' => {
            if let Some(lines) = edit_hunk(t, &s.review.pieces[i].text())? {
                s.decide(i, Decision::Edit(lines), None);
                s.advance();
            }
        }
        CTRL_C | CTRL_D => {
            t.say("stopped: the diff stays pending\n");
            return Ok(false);
        }
        _ => t.say(HELP),
    }
    Ok(true)
}

/// `y`, `n`, `a`, `d` and `q`: decide the current hunk (and for `a` and `d` the later
/// undecided ones, for `q` every undecided one), asking why for a drop.
fn decide_key(t: &mut Terminal, s: &mut Session, key: u8) -> Result<(), Fail> {
    let (i, n) = (s.at, s.decisions.len());
    let why = match key {
        b'n' | b'd' => t.reason("drop")?,
        _ => None,
    };
    let decision = match key {
        b'y' | b'a' => Decision::Keep,
        _ => Decision::Drop,
    };
    let range = match key {
        b'y' | b'n' => i..i + 1,
        b'a' | b'd' => i..n,
        _ => 0..n,
    };
    for k in range {
        if k == i && key != b'q' || s.undecided(k) {
            s.decide(k, decision.clone(), why.clone());
        }
    }
    s.advance();
    Ok(())
}

/// The keys that apply to the current hunk, as `git add -p` lists them.
fn keys_offered(s: &Session) -> String {
    let (i, n) = (s.at, s.decisions.len());
    let mut keys = String::from("y,n,q,a,d");
    for (key, on) in [
        ("k", moved(s, b'k').is_some()),
        ("K", i > 0),
        ("j", moved(s, b'j').is_some()),
        ("J", i + 1 < n),
        ("s", can_split(&s.review.pieces[i])),
        ("e", true),
    ] {
        if on {
            keys += ",";
            keys += key;
        }
    }
    keys
}

/// Where `j`, `k`, `J` or `K` goes from the current hunk, if anywhere.
fn moved(s: &Session, key: u8) -> Option<usize> {
    let (i, n) = (s.at, s.decisions.len());
    match key {
        b'j' => (i + 1..n).find(|&k| s.undecided(k)),
        b'k' => (0..i).rev().find(|&k| s.undecided(k)),
        b'J' => (i + 1 < n).then_some(i + 1),
        _ => i.checked_sub(1),
    }
}

fn can_split(p: &Piece) -> bool {
    let lines = &p.lines;
    // A change, then context, then a change again.
    let first = lines.iter().position(|l| l.0 != ' ');
    let last = lines.iter().rposition(|l| l.0 != ' ');
    matches!((first, last), (Some(f), Some(l)) if lines[f..l].iter().any(|x| x.0 == ' '))
}

/// The edit of hunk `i` in the user's editor: its new side, or None when the edit was
/// abandoned (the file emptied, or unreadable as a hunk).
fn edit_hunk(t: &mut Terminal, hunk: &[u8]) -> Result<Option<Vec<Vec<u8>>>, Fail> {
    let path = temp_hunk_path();
    let mut text = b"# Manual hunk edit mode -- see bottom for a quick guide.\n".to_vec();
    text.extend_from_slice(hunk);
    text.extend_from_slice(
        b"# ---\n\
# To drop '-' lines, make them ' ' lines (context).\n\
# To drop '+' lines, delete them.\n\
# Lines starting with # will be removed.\n\
# If all lines of the hunk are removed, the edit is abandoned and the hunk left undecided.\n",
    );
    let write = || -> std::io::Result<()> {
        use std::os::unix::fs::OpenOptionsExt;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&path)?;
        f.write_all(&text)
    };
    write().map_err(|e| Fail::Failed(format!("cannot write {}: {e}", path.display())))?;
    let ran = t.cooked(|| client::run_editor(&path));
    let edited = std::fs::read(&path);
    let _ = std::fs::remove_file(&path);
    if let Err(Fail::Failed(e) | Fail::Usage(e)) = ran {
        t.say(&format!("{e}; the hunk is left undecided\n"));
        return Ok(None);
    }
    let edited =
        edited.map_err(|e| Fail::Failed(format!("cannot read {}: {e}", path.display())))?;
    match crate::review::parse_edited_hunk(&edited) {
        Ok(Some(lines)) => Ok(Some(lines)),
        Ok(None) => {
            t.say("edit abandoned: the hunk is left undecided\n");
            Ok(None)
        }
        Err(e) => {
            t.say(&format!("{e}; the hunk is left undecided\n"));
            Ok(None)
        }
    }
}

/// A new file name for a hunk to edit, in the temporary directory.
fn temp_hunk_path() -> PathBuf {
    let mut r = [0u8; 6];
    let _ = crate::sys::random_bytes(&mut r);
    let tag: String = r.iter().map(|b| format!("{b:02x}")).collect();
    std::env::temp_dir().join(format!("ccide-hunk-{}-{tag}.diff", std::process::id()))
}

/// Answers the diff `id` with what `decisions` compose, and the verdict. What to tell the
/// user; None when the edits cannot be composed (said on stderr).
fn settle(
    ctl: &mut Control,
    id: &str,
    s: &Session,
    decisions: &[Decision],
    why: Option<&str>,
) -> Result<Option<String>, Fail> {
    let answer = match s.review.compose(decisions) {
        Ok(a) => a,
        Err(e) => {
            eprint!("{e}\r\n");
            return Ok(None);
        }
    };
    let verdict = crate::review::verdict(&s.review, decisions, &s.reasons, why);
    let (accept, content) = match answer {
        Answer::Save(text) if text == s.review.proposed => (true, None),
        Answer::Save(text) => (true, Some(crate::review::saved_text(text))),
        Answer::Reject => (false, None),
    };
    let numbers = |v: &Value| -> String {
        v.as_array()
            .map(|a| {
                a.iter()
                    .map(|n| n.as_u64().or(n["hunk"].as_u64()).unwrap_or(0).to_string())
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .unwrap_or_default()
    };
    let said = if accept {
        let mut parts = Vec::new();
        for key in ["kept", "edited", "dropped"] {
            if verdict[key].as_array().is_some_and(|a| !a.is_empty()) {
                parts.push(format!("{key} {}", numbers(&verdict[key])));
            }
        }
        format!("accepted diff {id}: {}", parts.join(", "))
    } else {
        format!("rejected diff {id}: every hunk dropped")
    };
    let r = ctl.call(&Request::DiffSettle {
        target: Some(id.to_string()),
        accept,
        content,
        cwd: cwd_string(),
        verdict: Some(verdict),
    })?;
    if r["ok"] != true {
        return Ok(Some(format!(
            "diff {id} was not answered: {}",
            r["error"].as_str().unwrap_or("the server refused")
        )));
    }
    Ok(Some(said))
}

/// The controlling terminal in single-key mode while this lives.
struct Terminal {
    tty: File,
    saved: TerminalMode,
    color: bool,
}

const CYAN: &str = "\x1b[36m";
const RED: &str = "\x1b[31m";
const GREEN: &str = "\x1b[32m";
const BOLD: &str = "\x1b[1m";
const BLUE: &str = "\x1b[1;34m";
const RESET: &str = "\x1b[0m";

impl Terminal {
    /// `without`: what to use instead when there is no terminal.
    fn open(without: &str) -> Result<Terminal, Fail> {
        let no_terminal = |e: std::io::Error| {
            Fail::Failed(format!(
                "this needs a terminal (/dev/tty: {e}); without one, use {without}"
            ))
        };
        let tty = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/tty")
            .map_err(no_terminal)?;
        let saved = crate::sys::terminal_mode(tty.as_raw_fd()).map_err(no_terminal)?;
        crate::sys::set_single_key(tty.as_raw_fd(), &saved).map_err(no_terminal)?;
        let color = std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty())
            && std::env::var("TERM").is_ok_and(|t| t != "dumb");
        Ok(Terminal { tty, saved, color })
    }

    fn say(&mut self, text: &str) {
        let _ = self.tty.write_all(text.as_bytes());
        let _ = self.tty.flush();
    }

    fn paint(&self, code: &str, line: &str) -> String {
        if self.color {
            format!("{code}{line}{RESET}\n")
        } else {
            format!("{line}\n")
        }
    }

    fn paint_header(&self, text: &str) -> String {
        text.lines().map(|l| self.paint(BOLD, l)).collect()
    }

    fn paint_prompt(&self, text: &str) -> String {
        match self.color {
            true => format!("{BLUE}{text}{RESET}"),
            false => text.to_string(),
        }
    }

    /// A hunk's text for the screen: control characters made visible, coloured by kind.
    fn paint_hunk(&self, text: &[u8]) -> String {
        let text = String::from_utf8_lossy(text);
        text.lines()
            .map(|l| {
                let code = match l.as_bytes().first() {
                    Some(b'@') => CYAN,
                    Some(b'-') => RED,
                    Some(b'+') => GREEN,
                    _ => "",
                };
                let l = crate::text::visible(l);
                if code.is_empty() {
                    format!("{l}\n")
                } else {
                    self.paint(code, &l)
                }
            })
            .collect()
    }

    fn key(&mut self) -> Result<u8, Fail> {
        let mut b = [0u8];
        match self.tty.read(&mut b) {
            Ok(1) => Ok(b[0]),
            Ok(_) => Ok(CTRL_D),
            Err(e) => Err(Fail::Failed(format!("cannot read the terminal: {e}"))),
        }
    }

    /// Runs `f` with the terminal as it was (a line editor, an editor).
    fn cooked<T>(&mut self, f: impl FnOnce() -> T) -> T {
        let fd = self.tty.as_raw_fd();
        let _ = crate::sys::set_terminal_mode(fd, &self.saved);
        let r = f();
        let _ = crate::sys::set_single_key(fd, &self.saved);
        r
    }

    /// The optional reason for dropping: one line, Enter alone for none.
    /// `verb`: what the user does with the hunk ("drop", "undo").
    fn reason(&mut self, verb: &str) -> Result<Option<String>, Fail> {
        let mut tty = self
            .tty
            .try_clone()
            .map_err(|e| Fail::Failed(format!("cannot read the terminal: {e}")))?;
        // The terminal echoes the line from before the prompt shows, so a line typed as soon
        // as it shows is echoed too.
        let line = self.cooked(|| {
            let _ = write!(tty, "Why {verb} it? (optional, Enter skips): ");
            let mut line = Vec::new();
            let mut b = [0u8];
            while let Ok(1) = tty.read(&mut b) {
                if b[0] == b'\n' {
                    break;
                }
                line.push(b[0]);
            }
            line
        });
        let line = String::from_utf8_lossy(&line).trim().to_string();
        Ok((!line.is_empty()).then_some(line))
    }

    /// Waits for a key (q, Ctrl-C or Ctrl-D: None) or a message on `rx` (it).
    fn wait_key_or(&mut self, rx: &crate::proc::Queue<bool>) -> Result<Option<bool>, Fail> {
        use crate::sys::{Interest, poll};
        let fd = self.tty.as_raw_fd();
        loop {
            if let Some(opened) = rx.pop(Some(Instant::now())) {
                return Ok(Some(opened));
            }
            let ready = poll(
                &[Interest {
                    fd,
                    read: true,
                    write: false,
                }],
                Some(Duration::from_millis(100)),
            )
            .map_err(|e| Fail::Failed(format!("cannot wait on the terminal: {e}")))?;
            if ready[0].readable || ready[0].hangup {
                match self.key()? {
                    b'q' | CTRL_C | CTRL_D => return Ok(None),
                    _ => self.say("waiting for Claude's next proposal (q to stop)\n"),
                }
            }
        }
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        let _ = crate::sys::set_terminal_mode(self.tty.as_raw_fd(), &self.saved);
    }
}

/// `ccide review [list | keep | undo]`: what Claude's tools changed, reviewed after the fact
/// (ccide-protocol(7) §15). Hunks are numbered across the changes listed, oldest first.
pub fn changes(args: &Args) -> Outcome {
    let action = args.operands.first().map(String::as_str);
    if let Some(extra) = args.operands.get(1) {
        return Err(Fail::Usage(format!("unexpected argument '{extra}'")));
    }
    let json_out = args.switch("--json")?;
    let decide = matches!(action, Some("keep" | "undo"));
    if (args.value("--hunks").is_some() || args.value("--why").is_some()) && !decide {
        return Err(Fail::Usage(
            "--hunks and --why go with keep or undo: ccide review undo --hunks 2 --why TEXT".into(),
        ));
    }
    let turn = args.parsed::<usize>("--turn", "a turn number")?;
    let mut ctl = connect(args)?;
    let r = ctl.request(&Request::Changes {
        session: args.value("--session"),
        turn,
        all: args.switch("--all")?,
        content: false,
    })?;
    let list = r["changes"].as_array().cloned().unwrap_or_default();
    // Each hunk as (its change, the hunk, its number in the listing).
    let mut all = Vec::new();
    for c in &list {
        for h in c["hunks"].as_array().into_iter().flatten() {
            all.push((c, h, all.len() + 1));
        }
    }
    match action {
        None if !json_out => review_changes(&mut ctl, &all),
        None | Some("list" | "ls") if json_out => {
            println!("{}", obj! {"changes": list});
            Ok(EXIT_OK)
        }
        None | Some("list" | "ls") => {
            print_changes(&all);
            Ok(EXIT_OK)
        }
        Some("keep" | "undo") => {
            let picked = match args.value("--hunks") {
                Some(spec) => {
                    crate::review::parse_hunk_list(&spec, all.len()).map_err(Fail::Usage)?
                }
                None => (1..=all.len()).collect(),
            };
            let why = args.value("--why");
            let (said, out) = decide_hunks(&mut ctl, &all, &picked, action == Some("undo"), why)?;
            match json_out {
                true => println!("{}", obj! {"changes": out}),
                false => print!("{said}"),
            }
            Ok(EXIT_OK)
        }
        Some(other) => Err(Fail::Usage(format!(
            "unknown action '{other}': expected list, keep or undo"
        ))),
    }
}

/// A change's hunk as listed: the change, the hunk, its number in the listing.
type Listed<'a> = (&'a Value, &'a Value, usize);

fn print_changes(all: &[Listed]) {
    if all.is_empty() {
        println!("no changes recorded for that turn (ccide review --all lists every one)");
    }
    let mut last = None;
    for (c, h, n) in all {
        if last != Some(&c["id"]) {
            println!("{}", change_head(c));
            last = Some(&c["id"]);
        }
        print!("{}", hunk_head(h, *n, all.len()));
        for l in h["text"].as_str().unwrap_or("").lines().skip(1) {
            println!("{}", visible(l));
        }
    }
}

/// Keeps or undoes the hunks listed as `picked`, one request per change: what to tell the
/// user, and the changes as they now are. A refusal stops there, the hunks before it done.
fn decide_hunks(
    ctl: &mut Control,
    all: &[Listed],
    picked: &[usize],
    undo: bool,
    why: Option<String>,
) -> Result<(String, Vec<Value>), Fail> {
    let (mut said, mut out) = (String::new(), Vec::new());
    let mut groups: Vec<(&Value, Vec<&Listed>)> = Vec::new();
    for x in all.iter().filter(|x| picked.contains(&x.2)) {
        match groups.last_mut() {
            Some((c, g)) if c["id"] == x.0["id"] => g.push(x),
            _ => groups.push((x.0, vec![x])),
        }
    }
    for (c, group) in groups {
        let r = ctl.request(&Request::ChangeDecide {
            id: c["id"].as_u64().unwrap_or(0) as usize,
            hunks: group
                .iter()
                .map(|x| x.1["hunk"].as_u64().unwrap_or(0) as usize)
                .collect(),
            undo,
            why: why.clone(),
            part: None,
            rewrite: None,
        })?;
        let word = if undo { "undid" } else { "kept" };
        for x in group {
            said += &format!("{word} hunk {} ({})\n", x.2, file_of(c));
        }
        out.push(r["change"].clone());
    }
    Ok((said, out))
}

/// A change's first line. The session id and the tool name come from the hooks' input: shown
/// with control characters visible, the id cut to its first 8 characters.
fn change_head(c: &Value) -> String {
    let session: String = c["session"]
        .as_str()
        .unwrap_or("")
        .chars()
        .take(8)
        .collect();
    format!(
        "change {}: {}{} ({}, session {}, turn {})",
        c["id"],
        file_of(c),
        if c["new_file"] == true {
            " (new file)"
        } else {
            ""
        },
        visible(c["tool"].as_str().unwrap_or("")),
        visible(&session),
        c["turn"]
    )
}

fn hunk_head(h: &Value, n: usize, of: usize) -> String {
    let header = h["text"]
        .as_str()
        .unwrap_or("")
        .lines()
        .next()
        .unwrap_or("");
    let state = match (h["state"].as_str(), h["why"].as_str()) {
        (Some(s), Some(w)) => format!(" ({s}: {})", visible(w)),
        (Some(s), None) => format!(" ({s})"),
        _ => String::new(),
    };
    format!("{header} hunk {n}/{of}{state}\n")
}

const CHANGE_HELP: &str = "\
y - keep this hunk
n - undo this hunk in the file (you may say why)
q - quit: the hunks left undecided stay so
a - keep this hunk and all later hunks in the file
d - undo this hunk and all later hunks in the file
j - leave this hunk undecided, see next undecided hunk
J - leave this hunk undecided, see next hunk
k - leave this hunk undecided, see previous undecided hunk
K - leave this hunk undecided, see previous hunk
s - split the current hunk into smaller hunks
e - manually edit the current hunk: your lines replace Claude's in the file
? - print help
";

/// A hunk on the terminal: its change, its text, its number in the change and its part (0:
/// whole), its name as said (its number in the listing, `N.P` for a part), whether decided.
struct Item<'a> {
    change: &'a Value,
    text: String,
    hunk: usize,
    part: usize,
    name: String,
    decided: bool,
}

/// `ccide review` on the terminal: each undecided hunk with `git add -p`'s keys, each decision
/// applied at once.
fn review_changes(ctl: &mut Control, all: &[Listed]) -> Outcome {
    let mut t = Terminal::open("ccide review list, then ccide review keep|undo --hunks LIST")?;
    let mut items: Vec<Item> = all
        .iter()
        .map(|(c, h, n)| Item {
            change: c,
            text: h["text"].as_str().unwrap_or("").to_string(),
            hunk: h["hunk"].as_u64().unwrap_or(0) as usize,
            part: 0,
            name: n.to_string(),
            decided: !h["state"].is_null(),
        })
        .collect();
    let mut at = items.iter().position(|x| !x.decided);
    let mut shown = None;
    while let Some(i) = at {
        let n = items.len();
        let c = items[i].change;
        if shown != Some(&c["id"]) {
            t.say(&t.paint_header(&change_head(c)));
            shown = Some(&c["id"]);
        }
        t.say(&t.paint_hunk(items[i].text.as_bytes()));
        let next = (i + 1..n).find(|&k| !items[k].decided);
        let prev = (0..i).rev().find(|&k| !items[k].decided);
        let piece = Piece::parse(items[i].text.as_bytes());
        let mut keys = String::from("y,n,q,a,d");
        for (k, on) in [
            ("k", prev.is_some()),
            ("K", i > 0),
            ("j", next.is_some()),
            ("J", i + 1 < n),
            (
                "s",
                items[i].part == 0 && piece.as_ref().is_some_and(can_split),
            ),
            ("e", true),
        ] {
            if on {
                keys = keys + "," + k;
            }
        }
        t.say(&t.paint_prompt(&format!("({}/{n}) Keep this hunk [{keys},?]? ", i + 1)));
        let key = t.key()?;
        let echo = if key.is_ascii_graphic() {
            key as char
        } else {
            ' '
        };
        t.say(&format!("{echo}\n"));
        let moved = match key {
            b'j' => next.ok_or("No next undecided hunk\n"),
            b'k' => prev.ok_or("No previous undecided hunk\n"),
            b'J' => (i + 1 < n).then_some(i + 1).ok_or("No next hunk\n"),
            b'K' => i.checked_sub(1).ok_or("No previous hunk\n"),
            b'q' | CTRL_C | CTRL_D => return Ok(EXIT_OK),
            b's' if keys.contains('s') => {
                let parts = split_item(&mut items, i, piece);
                t.say(&format!("Split into {parts} hunks.\n"));
                continue;
            }
            b'y' | b'n' | b'a' | b'd' | b'e' => {
                decide_items(&mut t, ctl, &mut items, i, key)?;
                at = (i..n).chain(0..i).find(|&k| !items[k].decided);
                continue;
            }
            _ => Err(CHANGE_HELP),
        };
        match moved {
            Ok(k) => at = Some(k),
            Err(e) => t.say(e),
        }
    }
    Ok(EXIT_OK)
}

/// Splits the item `i`, whose hunk is `piece`, into its parts: how many.
fn split_item(items: &mut Vec<Item>, i: usize, piece: Option<Piece>) -> usize {
    let mut r = Review::new(Vec::new(), Vec::new());
    r.pieces.extend(piece);
    let parts = r.split(0);
    let (name, hunk, change) = (items[i].name.clone(), items[i].hunk, items[i].change);
    let split = r.pieces.iter().enumerate().map(|(p, x)| Item {
        change,
        text: String::from_utf8_lossy(&x.text()).into_owned(),
        hunk,
        part: p + 1,
        name: format!("{name}.{}", p + 1),
        decided: false,
    });
    // Not `splice`: its generic drop is about 700 bytes of binary per item type.
    let tail = items.split_off(i + 1);
    items.truncate(i);
    items.extend(split);
    items.extend(tail);
    parts
}

/// `y`, `n`, `a`, `d` and `e` on item `i`: each hunk decided sent at once, what became of it
/// said (an abandoned edit decides nothing).
fn decide_items(
    t: &mut Terminal,
    ctl: &mut Control,
    items: &mut [Item],
    i: usize,
    key: u8,
) -> Result<(), Fail> {
    let (n, c) = (items.len(), items[i].change);
    let undo = matches!(key, b'n' | b'd');
    let rewrite = match key {
        b'e' => match edit_hunk(t, items[i].text.as_bytes())? {
            Some(lines) => Some(String::from_utf8_lossy(&lines.concat()).into_owned()),
            None => return Ok(()),
        },
        _ => None,
    };
    let why = if undo { t.reason("undo")? } else { None };
    // `a` and `d`: this hunk and the later undecided ones of the file.
    let same = |k: usize| k == i || !items[k].decided && items[k].change["file"] == c["file"];
    let range: Vec<usize> = match key {
        b'a' | b'd' => (i..n).filter(|&k| same(k)).collect(),
        _ => vec![i],
    };
    for k in range {
        let x = &items[k];
        let r = ctl.request(&Request::ChangeDecide {
            id: x.change["id"].as_u64().unwrap_or(0) as usize,
            hunks: vec![x.hunk],
            undo,
            why: why.clone(),
            part: (x.part > 0).then_some(x.part),
            rewrite: rewrite.clone(),
        });
        let word = match (&rewrite, undo) {
            (Some(_), _) => "rewrote",
            (None, true) => "undid",
            (None, false) => "kept",
        };
        match r {
            Ok(_) => t.say(&format!("{word} hunk {} ({})\n", x.name, file_of(x.change))),
            Err(e) => t.say(&format!("{e}\n")),
        }
        items[k].decided = true;
    }
    Ok(())
}
