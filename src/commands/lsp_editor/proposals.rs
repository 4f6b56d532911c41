//! Claude Code's pending diffs (proposals) as the editor sees them: the code actions offered on
//! a file and on its proposal, the diffs each server announced, and the files the CLI is about
//! to write once a diff is accepted, so that the editor's buffer can follow.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::json::obj;
use crate::review::{Answer, Decision, Review};

/// The commands, by the titles their code actions show.
pub const COMMANDS: [(&str, &str); 12] = [
    ("ccide.select", "Claude: send selection"),
    ("ccide.mention", "Claude: @-mention"),
    ("ccide.show", "Claude: show proposed edit"),
    ("ccide.accept", "Claude: accept"),
    ("ccide.acceptEdited", "Claude: accept as edited"),
    ("ccide.reject", "Claude: reject"),
    ("ccide.keepHunk", "Claude: keep hunk"),
    ("ccide.dropHunk", "Claude: drop hunk"),
    ("ccide.acceptKept", "Claude: accept what is kept"),
    ("ccide.rejectAll", "Claude: reject all"),
    ("ccide.keepChange", "Claude: keep hunk"),
    ("ccide.undoChange", "Claude: undo hunk"),
];

/// The commands offered on the real file's hunks (a proposal's, then a recorded change's),
/// the only ones not in `actions`' list.
pub const HUNK_COMMANDS: [&str; 6] = [
    "ccide.keepHunk",
    "ccide.dropHunk",
    "ccide.acceptKept",
    "ccide.rejectAll",
    "ccide.keepChange",
    "ccide.undoChange",
];

/// The code actions for a document: selection and mention, and with a pending diff for it
/// (`Some(is the proposal itself, the proposal is open)`) what can be done with that.
pub fn actions(uri: &str, range: &Value, diff: Option<(bool, bool)>) -> Value {
    let arg = obj! {"uri": uri, "range": range.clone()};
    let offered = |cmd: &str| match (cmd, diff) {
        ("ccide.select" | "ccide.mention", d) => !d.is_some_and(|d| d.0),
        (_, None) => false,
        ("ccide.show", Some((proposal, _))) => !proposal,
        ("ccide.acceptEdited", Some((proposal, open))) => proposal || open,
        _ => true,
    };
    COMMANDS
        .iter()
        .filter(|(cmd, _)| !HUNK_COMMANDS.contains(cmd) && offered(cmd))
        .map(|(cmd, title)| command(cmd, (*title).to_string(), arg.clone()))
        .collect()
}

/// The hunk review actions on the real file, with the cursor in hunk `at` (1-based) of `count`
/// (ccide-protocol(7) §12): keep or drop that hunk, accept what is kept, or reject all (every
/// hunk recorded as dropped).
pub fn hunk_actions(uri: &str, range: &Value, at: Option<usize>, count: usize) -> Vec<Value> {
    let action = |cmd: &str, title: String, hunk: Option<usize>| {
        let mut arg = obj! {"uri": uri, "range": range.clone()};
        if let Some(h) = hunk {
            arg["hunk"] = h.into();
        }
        command(cmd, title, arg)
    };
    let mut out = Vec::new();
    if let Some(i) = at {
        out.push(action(
            "ccide.keepHunk",
            format!("Claude: keep hunk {i}/{count}"),
            Some(i),
        ));
        out.push(action(
            "ccide.dropHunk",
            format!("Claude: drop hunk {i}/{count}"),
            Some(i),
        ));
    }
    out.push(action(
        "ccide.acceptKept",
        "Claude: accept what is kept".into(),
        None,
    ));
    out.push(action("ccide.rejectAll", "Claude: reject all".into(), None));
    out
}

/// A code action running `cmd` with `arg`, titled `title`.
pub fn command(cmd: &str, title: String, arg: Value) -> Value {
    let command = obj! {"title": title.as_str(), "command": cmd, "arguments": vec![arg]};
    obj! {"title": title, "command": command}
}

/// The proposal of a diff as a review: its hunks as `ccide diff review` numbers them.
pub fn review_of(dir: &Path) -> Result<Review, String> {
    let read = |name: &str| {
        std::fs::read(dir.join(name))
            .map_err(|e| format!("cannot read {}: {e}", dir.join(name).display()))
    };
    let original = crate::textdiff::as_cli_reads(read("original")?).text;
    Ok(Review::new(original, read("proposed")?))
}

/// The hunk (1-based) whose lines of the file as it is hold `line` (0-based).
pub fn hunk_at(review: &Review, line: usize) -> Option<usize> {
    review
        .pieces
        .iter()
        .position(|p| {
            let len = p.lines.iter().filter(|(k, _)| *k != '+').count().max(1);
            (p.old_lo..p.old_lo + len).contains(&line)
        })
        .map(|i| i + 1)
}

/// The pending hunks as hint diagnostics on the real file (ccide-protocol(7) §12.3): each at
/// the lines it replaces in the file as it is, the proposed text in the message, and what was
/// decided so far.
pub fn hint_list(review: &Review, decisions: &[Option<bool>]) -> Vec<Value> {
    let n = review.pieces.len();
    review
        .pieces
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let (lo, hi, new) = p.kept();
            let state = match decisions.get(i).copied().flatten() {
                Some(true) => ", kept",
                Some(false) => ", dropped",
                None => "",
            };
            let head = format!("Claude proposes (hunk {}/{n}{state})", i + 1);
            hint(lo, hi, &new, &head, "delete ")
        })
        .collect()
}

/// A hunk as a hint diagnostic at lines `lo..hi` (columns 0, the same in every encoding):
/// `head`, then its first three `lines`, or when it has none `none` and the count of lines it
/// spans.
pub fn hint(lo: usize, hi: usize, lines: &[&[u8]], head: &str, none: &str) -> Value {
    let shown: Vec<String> = lines
        .iter()
        .take(3)
        .map(|l| {
            String::from_utf8_lossy(l)
                .trim_end_matches(['\n', '\r'])
                .to_string()
        })
        .collect();
    let mut text = if lines.is_empty() {
        format!(
            "{none}{} line{}",
            hi - lo,
            if hi - lo == 1 { "" } else { "s" }
        )
    } else {
        shown.join("\n")
    };
    if lines.len() > 3 {
        text.push_str(&format!("\n… ({} more lines)", lines.len() - 3));
    }
    let at = |line: usize| obj! {"line": line, "character": 0};
    obj! {
        "range": obj! {"start": at(lo), "end": at(hi)},
        "severity": 4,
        "source": "ccide",
        "message": format!("{head}: {text}"),
    }
}

/// What a review's decisions compose (undecided hunks dropped, as `ccide diff review`'s q
/// does): whether it accepts, the text to answer with when it is not the proposal, and the
/// verdict, with the hunks' `reasons` and the answer's `why`.
pub fn composed(
    review: &Review,
    decisions: &[Option<bool>],
    reasons: &[Option<String>],
    why: Option<&str>,
) -> Result<(bool, Option<String>, Value), String> {
    let decided: Vec<Decision> = (0..review.pieces.len())
        .map(|i| match decisions.get(i).copied().flatten() {
            Some(true) => Decision::Keep,
            _ => Decision::Drop,
        })
        .collect();
    let verdict = crate::review::verdict(review, &decided, reasons, why);
    Ok(match review.compose(&decided)? {
        Answer::Save(text) if text == review.proposed => (true, None, verdict),
        Answer::Save(text) => (
            true,
            Some(String::from_utf8_lossy(&text).into_owned()),
            verdict,
        ),
        Answer::Reject => (false, None, verdict),
    })
}

pub struct Diff {
    /// The server that holds it (an index into the loop's links).
    pub link: usize,
    pub id: String,
    pub file: PathBuf,
    /// The diff's directory, where its proposal lies.
    pub dir: PathBuf,
    /// The target file's modification time and size when the diff opened, to see the CLI
    /// write it after the diff is settled.
    stamp: Option<crate::files::Stamp>,
    /// Each hunk kept (true) or dropped (false) from the editor's code actions; None undecided.
    pub decisions: Vec<Option<bool>>,
    /// The reason given for each hunk's decision, if any.
    pub reasons: Vec<Option<String>>,
}

/// A file the CLI is expected to write after a settled diff.
struct Watch {
    path: PathBuf,
    stamp: Option<crate::files::Stamp>,
    until: Instant,
    /// The stamp last seen since it changed: the write is over once a later look sees it again
    /// (the CLI truncates the file, then writes it: a look between the two sees it empty).
    changed: Option<Option<crate::files::Stamp>>,
}

#[derive(Default)]
pub struct Proposals {
    diffs: Vec<Diff>,
    watches: Vec<Watch>,
}

impl Proposals {
    /// A diff a server announced (`diff_opened`, or listed when attaching); None when it was
    /// known already.
    pub fn opened(&mut self, link: usize, v: &Value) -> Option<&Diff> {
        let id = v["id"].as_str().unwrap_or("").to_string();
        if self.diffs.iter().any(|d| d.link == link && d.id == id) {
            return None;
        }
        let file = PathBuf::from(v["file"].as_str().unwrap_or(""));
        let dir = Path::new(v["dir"].as_str().unwrap_or(""));
        self.diffs.push(Diff {
            link,
            id,
            stamp: crate::files::stamp(&file),
            decisions: Vec::new(),
            reasons: Vec::new(),
            dir: std::fs::canonicalize(dir).unwrap_or_else(|_| dir.into()),
            file,
        });
        self.diffs.last()
    }

    /// A diff was settled. Accepted, or answered in the terminal (which may have accepted):
    /// the CLI `writes` the file now, and an editor showing it (`shown`) is to be told.
    pub fn settled(&mut self, link: usize, id: &str, writes: bool, shown: impl Fn(&Path) -> bool) {
        let Some(k) = self.diffs.iter().position(|d| d.link == link && d.id == id) else {
            return;
        };
        let d = self.diffs.remove(k);
        if writes && shown(&d.file) {
            self.watches.push(Watch {
                path: d.file,
                stamp: d.stamp,
                until: Instant::now() + Duration::from_secs(10),
                changed: None,
            });
        }
    }

    /// Forgets a server's diffs (it is attached again, and lists them anew; or it stopped).
    pub fn forget(&mut self, link: usize) {
        self.diffs.retain(|d| d.link != link);
    }

    /// The pending diff for a file, or whose proposal this is (then true).
    pub fn of(&self, path: &Path) -> Option<(&Diff, bool)> {
        self.diffs.iter().find_map(|d| {
            let proposal = path.parent() == Some(&d.dir);
            (proposal || d.file == path).then_some((d, proposal))
        })
    }

    /// Files the CLI wrote, once each: changed since the diff was settled, and then the same
    /// at two looks in a row (so never read half written).
    pub fn written(&mut self, now: Instant) -> Vec<PathBuf> {
        let mut out = Vec::new();
        self.watches.retain_mut(|w| {
            let stamp = crate::files::stamp(&w.path);
            if stamp == w.stamp {
                return w.until > now;
            }
            if w.changed.as_ref() == Some(&stamp) {
                out.push(w.path.clone());
                return false;
            }
            w.changed = Some(stamp);
            true
        });
        out
    }

    /// The pending diff for a file (not its proposal), to decide its hunks.
    pub fn of_file_mut(&mut self, path: &Path) -> Option<&mut Diff> {
        self.diffs.iter_mut().find(|d| d.file == path)
    }

    pub fn watching(&self) -> bool {
        !self.watches.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn titles(v: &Value) -> Vec<&str> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|a| a["title"].as_str().unwrap())
            .collect()
    }

    #[test]
    fn code_actions_carry_the_range_and_follow_the_diff() {
        let r = json!({"start": {"line": 1, "character": 2}, "end": {"line": 3, "character": 0}});
        let plain = actions("file:///w/a.py", &r, None);
        assert_eq!(
            plain[0],
            json!({"title": "Claude: send selection", "command": {"title": "Claude: send selection",
                "command": "ccide.select", "arguments": [{"uri": "file:///w/a.py", "range": r}]}})
        );
        assert_eq!(
            titles(&plain),
            ["Claude: send selection", "Claude: @-mention"]
        );
        assert_eq!(
            titles(&actions("u", &r, Some((false, false)))),
            [
                "Claude: send selection",
                "Claude: @-mention",
                "Claude: show proposed edit",
                "Claude: accept",
                "Claude: reject"
            ]
        );
        assert_eq!(
            titles(&actions("u", &r, Some((false, true)))),
            [
                "Claude: send selection",
                "Claude: @-mention",
                "Claude: show proposed edit",
                "Claude: accept",
                "Claude: accept as edited",
                "Claude: reject"
            ]
        );
        assert_eq!(
            titles(&actions("u", &r, Some((true, true)))),
            [
                "Claude: accept",
                "Claude: accept as edited",
                "Claude: reject"
            ]
        );
    }

    #[test]
    fn hunks_are_found_at_the_cursor_shown_as_hints_and_composed_from_decisions() {
        let text = |changed: &[usize]| -> Vec<u8> {
            (1..=20)
                .map(|i| match changed.contains(&i) {
                    true => format!("NEW {i}\n"),
                    false => format!("line {i}\n"),
                })
                .collect::<String>()
                .into_bytes()
        };
        let mut proposed = text(&[2, 10]);
        // Hunk 3 deletes lines 18 and 19.
        proposed = String::from_utf8(proposed)
            .unwrap()
            .replace("line 18\nline 19\n", "")
            .into_bytes();
        let r = Review::new(text(&[]), proposed);
        assert_eq!(r.pieces.len(), 3);
        let at: Vec<Option<usize>> = [0, 1, 4, 5, 6, 9, 12, 13, 14, 17, 19]
            .iter()
            .map(|&l| hunk_at(&r, l))
            .collect();
        assert_eq!(
            at,
            [
                Some(1),
                Some(1),
                Some(1),
                None,
                Some(2),
                Some(2),
                Some(2),
                None,
                Some(3),
                Some(3),
                Some(3)
            ]
        );
        let h = hint_list(&r, &[Some(true), Some(false), None]);
        let messages: Vec<&str> = h.iter().map(|d| d["message"].as_str().unwrap()).collect();
        assert_eq!(
            messages,
            [
                "Claude proposes (hunk 1/3, kept): NEW 2",
                "Claude proposes (hunk 2/3, dropped): NEW 10",
                "Claude proposes (hunk 3/3): delete 2 lines"
            ]
        );
        assert_eq!(
            h[2]["range"],
            json!({"start": {"line": 17, "character": 0}, "end": {"line": 19, "character": 0}})
        );
        assert_eq!(h[2]["severity"], 4);
        // Undecided is dropped; all kept is the proposal itself; none kept a rejection.
        let (accept, content, verdict) =
            composed(&r, &[Some(true), None, None], &[], None).unwrap();
        assert_eq!(
            (accept, content),
            (true, Some(String::from_utf8(text(&[2])).unwrap()))
        );
        assert_eq!(verdict["kept"], json!([1]));
        let all = composed(&r, &[Some(true); 3], &[], None).unwrap();
        assert_eq!((all.0, all.1), (true, None));
        let none = composed(&r, &[], &[], None).unwrap();
        assert_eq!((none.0, none.1), (false, None));
        assert_eq!(none.2["dropped"].as_array().unwrap().len(), 3);
    }

    #[test]
    fn diffs_are_known_per_server_and_an_accepted_file_is_watched() {
        let dir = std::env::temp_dir().join(format!("ccide-proposals-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("diffs/1")).unwrap();
        let dir = std::fs::canonicalize(dir).unwrap();
        let f = dir.join("a.py");
        std::fs::write(&f, "old\n").unwrap();
        let ev = json!({"id": "1", "file": f, "dir": dir.join("diffs/1")});
        let mut p = Proposals::default();
        assert!(p.opened(0, &ev).is_some());
        assert!(p.opened(0, &ev).is_none(), "announced twice, known once");
        assert!(p.opened(1, &ev).is_some(), "another server's diff 1");
        assert_eq!(
            p.of(&f).map(|(d, proposal)| (d.link, proposal)),
            Some((0, false))
        );
        let view = dir.join("diffs/1/a.py");
        assert_eq!(
            p.of(&view).map(|(d, proposal)| (d.link, proposal)),
            Some((0, true))
        );
        p.forget(0);
        assert_eq!(p.of(&f).map(|(d, _)| d.link), Some(1));
        // Rejected: nothing to watch; accepted while shown: watched until written.
        p.settled(1, "1", false, |_| true);
        assert!(p.of(&f).is_none() && !p.watching());
        p.opened(1, &ev);
        p.settled(1, "1", true, |_| true);
        let now = Instant::now();
        assert!(p.written(now).is_empty());
        // Another size: another stamp, whatever the clock's resolution. The CLI truncates the
        // file first: a look then sees it changed, and waits for it to stay as it is.
        std::fs::write(&f, "").unwrap();
        assert!(p.written(now).is_empty(), "truncated, not written yet");
        std::fs::write(&f, "new content\n").unwrap();
        assert!(p.written(now).is_empty(), "written: is it over?");
        assert_eq!(p.written(now), std::slice::from_ref(&f));
        assert!(!p.watching());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
