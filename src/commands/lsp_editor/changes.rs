//! What Claude changed in the latest turn (review after the fact, ccide-protocol(7) §15) as the
//! editor sees it: each hunk nobody decided yet as a hint where its lines are in the editor's
//! text, and keep or undo on it (§12.3). The hunks are serve's: those of the change's
//! before-image against its after-image, numbered alike.

use std::path::PathBuf;

use serde_json::Value;

use super::proposals::{command, hint};
use crate::json::obj;
use crate::review::{Review, placed};

pub struct Change {
    /// The server that recorded it (an index into the loop's links).
    pub link: usize,
    pub id: u64,
    pub file: PathBuf,
    review: Review,
    /// Each hunk kept or undone already.
    decided: Vec<bool>,
}

/// A hunk of a change where it is in the editor's text: its number (from 1), its lines there
/// (the line it is at when Claude's change only deleted lines), and its hint.
pub struct Placed {
    pub hunk: usize,
    pub lines: std::ops::Range<usize>,
    pub hint: Value,
}

impl Change {
    /// The changes of a `changes` answer with their content (§9.2), recorded by server `link`.
    /// A file not UTF-8, whose images came lossily and may split otherwise, is left out.
    pub fn listed(link: usize, answer: &Value) -> Vec<Change> {
        let list = answer["changes"].as_array().into_iter().flatten();
        list.filter_map(|c| {
            let image = |k: &str| c[k].as_str().unwrap_or("").as_bytes().to_vec();
            let review = Review::new(image("before"), image("after"));
            let hunks = c["hunks"].as_array()?;
            (hunks.len() == review.pieces.len()).then_some(())?;
            Some(Change {
                link,
                id: c["id"].as_u64()?,
                file: PathBuf::from(c["file"].as_str()?),
                decided: hunks.iter().map(|h| !h["state"].is_null()).collect(),
                review,
            })
        })
        .collect()
    }

    /// The hunks nobody decided, where they are in `text` (the file as the editor has it): a
    /// hunk's lines as Claude wrote them, context included, all there unchanged, as an undo
    /// needs them; a hunk whose lines changed since is not shown. The hint spans Claude's
    /// lines and says what they replaced.
    pub fn placed(&self, text: &str) -> Vec<Placed> {
        let pieces = &self.review.pieces;
        let n = pieces.len();
        let runs: Vec<(usize, usize)> = pieces
            .iter()
            .map(|p| (p.new_lo, p.lines.iter().filter(|l| l.0 != '-').count()))
            .collect();
        // Line ends aside: an editor may hold a CRLF file as LF text (vim's fileformat=dos).
        let plain = |b: &[u8]| -> Vec<u8> {
            let mut out = b.to_vec();
            let mut k = 0;
            out.retain(|_| {
                k += 1;
                !(b[k - 1] == b'\r' && b.get(k) == Some(&b'\n'))
            });
            out
        };
        let at = placed(
            &plain(&self.review.proposed),
            &plain(text.as_bytes()),
            &runs,
        );
        let mut out = Vec::new();
        for (k, p) in pieces.iter().enumerate() {
            let Some(at) = at[k].filter(|_| !self.decided[k]) else {
                continue;
            };
            // Claude's lines are the new side of its changes, context left out.
            let first = p.lines.iter().position(|l| l.0 != ' ').unwrap_or(0);
            let core = p.lines[first..].iter().rev().skip_while(|l| l.0 == ' ');
            let lo = at + first;
            let hi = lo + core.clone().filter(|l| l.0 == '+').count();
            let mut was: Vec<&[u8]> = core.filter(|l| l.0 == '-').map(|l| &l.1[..]).collect();
            was.reverse();
            let (verb, then) = match was.is_empty() {
                true => ("added", ""),
                false => ("changed", ", was"),
            };
            let head = format!("Claude {verb} (hunk {}/{n}){then}", k + 1);
            out.push(Placed {
                hunk: k + 1,
                lines: lo..hi.max(lo + 1),
                hint: hint(lo, hi, &was, &head, ""),
            });
        }
        out
    }

    /// Keep and undo for hunk `hunk`, the editor's selection in `range`.
    pub fn actions(&self, uri: &str, range: &Value, hunk: usize) -> [Value; 2] {
        let n = self.review.pieces.len();
        let arg = obj! {"uri": uri, "range": range.clone(), "change": self.id, "hunk": hunk};
        ["keep", "undo"].map(|verb| {
            let title = format!("Claude: {verb} hunk {hunk}/{n}");
            command(&format!("ccide.{verb}Change"), title, arg.clone())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn messages(placed: &[Placed]) -> Vec<(usize, usize, String)> {
        let m = |p: &Placed| p.hint["message"].as_str().unwrap().to_string();
        placed
            .iter()
            .map(|p| (p.lines.start, p.lines.end, m(p)))
            .collect()
    }

    #[test]
    fn hunks_are_placed_where_claudes_lines_are_now_and_left_out_once_changed_or_decided() {
        let before = "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\nk\nl\n";
        let after = "a\nB\nc\nd\ne\nf\ng\nh\ni\nj\nk\nl\nm1\nm2\nm3\nm4\n";
        let answer = json!({"changes": [{"id": 7, "file": "/w/a", "before": before, "after": after,
            "hunks": [{"hunk": 1, "state": null}, {"hunk": 2, "state": null}]}]});
        let mut c = Change::listed(3, &answer).pop().unwrap();
        assert_eq!((c.link, c.id, c.file.to_str()), (3, 7, Some("/w/a")));
        assert_eq!(
            messages(&c.placed(after)),
            [
                (1, 2, "Claude changed (hunk 1/2), was: b".into()),
                (12, 16, "Claude added (hunk 2/2): 4 lines".into())
            ]
        );
        // The user added two lines at the top: both move; changed B: hunk 1 goes.
        let moved = format!("0\n00\n{after}");
        assert_eq!(messages(&c.placed(&moved))[1].0, 14);
        assert_eq!(messages(&c.placed(&moved))[0].0, 3);
        let theirs = after.replace('B', "BB");
        assert_eq!(messages(&c.placed(&theirs)).len(), 1);
        c.decided[1] = true;
        assert_eq!(messages(&c.placed(after)).len(), 1);
        let a = c.actions("file:///w/a", &json!(null), 1);
        assert_eq!(
            a[1],
            json!({"title": "Claude: undo hunk 1/2", "command": {"title": "Claude: undo hunk 1/2",
                "command": "ccide.undoChange", "arguments": [{"uri": "file:///w/a", "range": null,
                "change": 7, "hunk": 1}]}})
        );
        // A CRLF file that the editor holds as LF text: the same places.
        let crlf = |s: &str| s.replace('\n', "\r\n");
        let answer = json!({"changes": [{"id": 9, "file": "/w/c", "before": crlf(before),
            "after": crlf(after), "hunks": [{"hunk": 1, "state": null}, {"hunk": 2, "state": null}]}]});
        let c = Change::listed(0, &answer).pop().unwrap();
        let want = [
            (1, 2, "Claude changed (hunk 1/2), was: b".into()),
            (12, 16, "Claude added (hunk 2/2): 4 lines".into()),
        ];
        assert_eq!(messages(&c.placed(after)), want);
        assert_eq!(messages(&c.placed(&crlf(after))), want);
        // Hunks counted otherwise than serve's (a file sent lossily): not shown.
        let answer = json!({"changes": [{"id": 8, "file": "/w/b", "before": "a\n", "after": "b\n",
            "hunks": []}]});
        assert!(Change::listed(0, &answer).is_empty());
    }
}
