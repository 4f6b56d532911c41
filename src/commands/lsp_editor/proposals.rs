//! Claude Code's pending diffs (proposals) as the editor sees them: the code actions offered on
//! a file and on its proposal, the diffs each server announced, and the files the CLI is about
//! to write once a diff is accepted, so that the editor's buffer can follow.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// The commands, by the titles their code actions show.
pub const COMMANDS: [(&str, &str); 6] = [
    ("ccide.select", "Claude: send selection"),
    ("ccide.mention", "Claude: @-mention"),
    ("ccide.show", "Claude: show proposed edit"),
    ("ccide.accept", "Claude: accept"),
    ("ccide.acceptEdited", "Claude: accept as edited"),
    ("ccide.reject", "Claude: reject"),
];

/// The code actions for a document: selection and mention, and with a pending diff for it
/// (`Some(is the proposal itself, the proposal is open)`) what can be done with that.
pub fn actions(uri: &str, range: &Value, diff: Option<(bool, bool)>) -> Value {
    let arguments = json!([{"uri": uri, "range": range}]);
    let offered = |cmd: &str| match (cmd, diff) {
        ("ccide.select" | "ccide.mention", d) => !d.is_some_and(|d| d.0),
        (_, None) => false,
        ("ccide.show", Some((proposal, _))) => !proposal,
        ("ccide.acceptEdited", Some((proposal, open))) => proposal || open,
        _ => true,
    };
    COMMANDS
        .iter()
        .filter(|(cmd, _)| offered(cmd))
        .map(|(cmd, title)| {
            json!({"title": title, "command": {"title": title, "command": cmd, "arguments": arguments}})
        })
        .collect()
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
            dir: std::fs::canonicalize(dir).unwrap_or_else(|_| dir.into()),
            file,
        });
        self.diffs.last()
    }

    /// A diff was settled. Accepted, or answered in the terminal (which may have accepted):
    /// the CLI writes the file now, and an editor showing it (`shown`) is to be told.
    pub fn settled(&mut self, link: usize, v: &Value, shown: impl Fn(&Path) -> bool) {
        let Some(k) = self
            .diffs
            .iter()
            .position(|d| d.link == link && d.id == v["id"])
        else {
            return;
        };
        let d = self.diffs.remove(k);
        if matches!(v["how"].as_str(), Some("accepted" | "closed by the client")) && shown(&d.file)
        {
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

    pub fn watching(&self) -> bool {
        !self.watches.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        p.settled(1, &json!({"id": "1", "how": "rejected"}), |_| true);
        assert!(p.of(&f).is_none() && !p.watching());
        p.opened(1, &ev);
        p.settled(1, &json!({"id": "1", "how": "accepted"}), |_| true);
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
