//! What Claude changed in the latest turn (review after the fact, ccide-protocol(7) §15) as the
//! editor sees it: each hunk nobody decided yet as a hint where its lines are in the editor's
//! text, and keep or undo on it (§12.3). The hunks are serve's: those of the change's
//! before-image against its after-image, numbered alike.

use std::path::PathBuf;

use serde_json::{Value, json};

use super::proposals::hint;
use crate::review::{Piece, Review, placed};

pub struct Change {
    /// The server that recorded it (an index into the loop's links).
    pub link: usize,
    pub id: u64,
    pub file: PathBuf,
    review: Review,
    /// Each hunk kept or undone already.
    pub decided: Vec<bool>,
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
        let at = placed(&self.review.proposed, text.as_bytes(), &runs);
        let mut out = Vec::new();
        for (k, p) in pieces.iter().enumerate() {
            let Some(at) = at[k].filter(|_| !self.decided[k]) else {
                continue;
            };
            // The hunk seen from the after-image: Claude's lines are its old side.
            let back = Piece {
                old_lo: at,
                new_lo: p.old_lo,
                lines: (p.lines.iter())
                    .map(|(c, l)| {
                        let c = match c {
                            '+' => '-',
                            '-' => '+',
                            c => *c,
                        };
                        (c, l.clone())
                    })
                    .collect(),
            };
            let (lo, hi, was) = back.kept();
            let head = match was.is_empty() {
                true => format!("Claude added (hunk {}/{n})", k + 1),
                false => format!("Claude changed (hunk {}/{n}), was", k + 1),
            };
            out.push(Placed {
                hunk: k + 1,
                lines: lo..hi.max(lo + 1),
                hint: hint(lo, hi, &was, &head, ""),
            });
        }
        out
    }

    /// Keep and undo for hunk `hunk` of `n`, the editor's selection in `range`.
    pub fn actions(&self, uri: &str, range: &Value, hunk: usize) -> [Value; 2] {
        let n = self.review.pieces.len();
        let arg = json!([{"uri": uri, "range": range, "change": self.id, "hunk": hunk}]);
        ["keep", "undo"].map(|verb| {
            let title = format!("Claude: {verb} hunk {hunk}/{n}");
            let cmd = format!("ccide.{verb}Change");
            json!({"title": title, "command": {"title": title, "command": cmd, "arguments": arg}})
        })
    }
}
