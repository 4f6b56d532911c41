//! Hunks as the unit of review (ccide-protocol(7) §5.5): a proposal split into numbered hunks,
//! a decision per hunk, and the answer composed from them. Pure: texts in, text out.
//!
//! Everything here works on the file as the CLI reads it (`textdiff::as_cli_reads`: decoded,
//! CRLF made LF, a BOM kept as U+FEFF) and on the proposal, which is that text edited. The
//! composed answer is in the same form, so the CLI restores the file's line endings and
//! encoding when it writes it, exactly as it does for a whole proposal or an edited one.

use crate::json::obj;
use crate::textdiff;

/// One hunk of a review: the lines it shows, where it starts on each side (0-based line
/// indices), as `textdiff::Hunk` lines are (`' '`, `'-'` or `'+'`, the line with its
/// terminator).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Piece {
    pub old_lo: usize,
    pub new_lo: usize,
    pub lines: Vec<(char, Vec<u8>)>,
}

impl Piece {
    fn old_len(&self) -> usize {
        self.lines.iter().filter(|(k, _)| *k != '+').count()
    }

    fn new_len(&self) -> usize {
        self.lines.iter().filter(|(k, _)| *k != '-').count()
    }

    /// Where its new side is, 1-based, context included: "lines 3-5", "line 3", "line 2"
    /// (nothing but removals: the line they follow).
    pub fn new_lines(&self) -> String {
        match self.new_len() {
            0 if self.new_lo == 0 => "the start".into(),
            0 | 1 => format!("line {}", self.new_lo + self.new_len()),
            n => format!("lines {}-{}", self.new_lo + 1, self.new_lo + n),
        }
    }

    /// The `@@ -l,s +l,s @@` line, GNU style (an empty range named by the line before it).
    pub fn header(&self) -> String {
        let range = |lo: usize, len: usize| {
            let start = if len == 0 { lo } else { lo + 1 };
            if len == 1 {
                start.to_string()
            } else {
                format!("{start},{len}")
            }
        };
        format!(
            "@@ -{} +{} @@",
            range(self.old_lo, self.old_len()),
            range(self.new_lo, self.new_len())
        )
    }

    /// The hunk as unified diff text: its header, then its lines, with `\ No newline at end
    /// of file` after a line lacking its terminator.
    pub fn text(&self) -> Vec<u8> {
        let mut out = self.header().into_bytes();
        out.push(b'\n');
        for (kind, line) in &self.lines {
            out.push(*kind as u8);
            out.extend_from_slice(line);
            if !line.ends_with(b"\n") {
                out.extend_from_slice(b"\n\\ No newline at end of file\n");
            }
        }
        out
    }

    /// A hunk from its `text` (what a client that was sent only the text splits); None when
    /// that is not a hunk's text.
    pub fn parse(text: &[u8]) -> Option<Piece> {
        let mut rows = textdiff::lines(text).into_iter();
        let head = std::str::from_utf8(rows.next()?).ok()?;
        let mut los = head.split(' ').skip(1).take(2).map(|r| {
            let r = r.get(1..)?;
            let (start, len) = r.split_once(',').unwrap_or((r, "1"));
            let start: usize = start.parse().ok()?;
            match len {
                "0" => Some(start),
                _ => start.checked_sub(1),
            }
        });
        let (old_lo, new_lo) = (los.next()??, los.next()??);
        let mut lines: Vec<(char, Vec<u8>)> = Vec::new();
        for r in rows {
            match r.first() {
                Some(b'\\') => {
                    lines.last_mut()?.1.pop();
                }
                Some(&k) => lines.push((k as char, r[1..].to_vec())),
                None => {}
            }
        }
        Some(Piece {
            old_lo,
            new_lo,
            lines,
        })
    }

    /// The new side: context and added lines.
    #[cfg(test)]
    pub fn new_side(&self) -> Vec<Vec<u8>> {
        self.lines
            .iter()
            .filter(|(k, _)| *k != '-')
            .map(|(_, l)| l.clone())
            .collect()
    }

    /// What keeping the hunk replaces: the old lines of its changes (context left out, so
    /// parts of a split hunk never overlap), and their new lines.
    pub fn kept(&self) -> (usize, usize, Vec<&[u8]>) {
        let (f, l) = self.core();
        let lo = self.old_lo + f;
        let core = &self.lines[f..l];
        let hi = lo + core.iter().filter(|x| x.0 != '+').count();
        let new = core
            .iter()
            .filter(|x| x.0 != '-')
            .map(|x| &x.1[..])
            .collect();
        (lo, hi, new)
    }

    /// What an edit replaces: the hunk's old lines, less the context at either end the
    /// replacement leaves as it was (so parts of a split hunk sharing it can be edited one by
    /// one), and the rest of the replacement.
    fn edited<'a>(&self, replacement: &'a [Vec<u8>]) -> (usize, usize, Vec<&'a [u8]>) {
        let shown: Vec<&[u8]> = self
            .lines
            .iter()
            .filter(|x| x.0 != '+')
            .map(|x| &x.1[..])
            .collect();
        let leading = self.lines.iter().take_while(|x| x.0 == ' ').count();
        let trailing = self.lines.iter().rev().take_while(|x| x.0 == ' ').count();
        let mut head = 0;
        while head < leading && head < replacement.len() && replacement[head] == shown[head] {
            head += 1;
        }
        let mut tail = 0;
        while tail < trailing
            && tail < replacement.len() - head
            && tail < shown.len() - head
            && replacement[replacement.len() - 1 - tail] == shown[shown.len() - 1 - tail]
        {
            tail += 1;
        }
        let new = replacement[head..replacement.len() - tail]
            .iter()
            .map(|l| &l[..])
            .collect();
        (self.old_lo + head, self.old_lo + shown.len() - tail, new)
    }

    /// Indices of the first and one past the last changed line in `lines`.
    fn core(&self) -> (usize, usize) {
        let first = self.lines.iter().position(|(k, _)| *k != ' ');
        let last = self.lines.iter().rposition(|(k, _)| *k != ' ');
        match (first, last) {
            (Some(f), Some(l)) => (f, l + 1),
            _ => (0, 0),
        }
    }
}

/// What the user made of one hunk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    Keep,
    Drop,
    /// Replacement lines for the hunk's new side (context lines included), each with its
    /// terminator.
    Edit(Vec<Vec<u8>>),
}

/// A proposal under review.
pub struct Review {
    /// The file as the CLI read it.
    pub original: Vec<u8>,
    pub proposed: Vec<u8>,
    pub pieces: Vec<Piece>,
}

/// The answer a review composes.
#[derive(Debug, PartialEq, Eq)]
pub enum Answer {
    /// FILE_SAVED with this text.
    Save(Vec<u8>),
    /// DIFF_REJECTED: nothing kept.
    Reject,
}

impl Review {
    /// The proposal's hunks, numbered 1..N in file order: `ccide diff show`'s hunks (context
    /// 3).
    pub fn new(original: Vec<u8>, proposed: Vec<u8>) -> Review {
        let pieces = textdiff::hunks(&original, &proposed, 3)
            .into_iter()
            .map(|h| Piece {
                old_lo: if h.old_len == 0 {
                    h.old_start
                } else {
                    h.old_start - 1
                },
                new_lo: if h.new_len == 0 {
                    h.new_start
                } else {
                    h.new_start - 1
                },
                lines: h.lines,
            })
            .collect();
        Review {
            original,
            proposed,
            pieces,
        }
    }

    /// Splits hunk `i` (0-based) at the unchanged lines inside it, as `git add -p`'s `s`
    /// does: each part has one run of changes and the context around it (a run of context
    /// between two changes is shown in both parts). Returns how many parts it made; 1 when the
    /// hunk cannot be split (nothing changes).
    pub fn split(&mut self, i: usize) -> usize {
        let piece = &self.pieces[i];
        // Runs: (start, end) of each change group in `lines`.
        let mut groups: Vec<(usize, usize)> = Vec::new();
        let mut k = 0;
        let n = piece.lines.len();
        while k < n {
            if piece.lines[k].0 == ' ' {
                k += 1;
                continue;
            }
            let start = k;
            while k < n && piece.lines[k].0 != ' ' {
                k += 1;
            }
            groups.push((start, k));
        }
        if groups.len() < 2 {
            return 1;
        }
        // Old and new line counts before each index of `lines`.
        let mut old_before = Vec::with_capacity(n + 1);
        let mut new_before = Vec::with_capacity(n + 1);
        let (mut o, mut w) = (0, 0);
        for (kind, _) in &piece.lines {
            old_before.push(o);
            new_before.push(w);
            o += usize::from(*kind != '+');
            w += usize::from(*kind != '-');
        }
        old_before.push(o);
        new_before.push(w);
        let parts: Vec<Piece> = (0..groups.len())
            .map(|g| {
                let lo = if g == 0 { 0 } else { groups[g - 1].1 };
                let hi = groups.get(g + 1).map_or(n, |next| next.0);
                Piece {
                    old_lo: piece.old_lo + old_before[lo],
                    new_lo: piece.new_lo + new_before[lo],
                    lines: piece.lines[lo..hi].to_vec(),
                }
            })
            .collect();
        let count = parts.len();
        // Not `splice`: its generic drop is about 700 bytes of binary per item type.
        let tail = self.pieces.split_off(i + 1);
        self.pieces.truncate(i);
        self.pieces.extend(parts);
        self.pieces.extend(tail);
        count
    }

    /// The answer `decisions` (one per hunk, in order) make: every hunk kept is the proposal
    /// itself; none kept or edited is a rejection; otherwise the original with the kept hunks
    /// applied, edited ones with their replacement. One pass over the file.
    pub fn compose(&self, decisions: &[Decision]) -> Result<Answer, String> {
        if decisions.len() != self.pieces.len() {
            return Err(format!(
                "{} decisions for {} hunks",
                decisions.len(),
                self.pieces.len()
            ));
        }
        if decisions.iter().all(|d| *d == Decision::Keep) {
            return Ok(Answer::Save(self.proposed.clone()));
        }
        if decisions.iter().all(|d| *d == Decision::Drop) {
            return Ok(Answer::Reject);
        }
        let old = &self.original[..];
        let mut out = Vec::with_capacity(self.original.len().max(self.proposed.len()));
        // The original is copied up to line `cursor`, which starts at byte `at`: each run
        // between hunks is found from there, so the file is read once.
        let (mut cursor, mut at) = (0, 0);
        for (n, (piece, decision)) in self.pieces.iter().zip(decisions).enumerate() {
            let (lo, hi, new) = match decision {
                Decision::Drop => continue,
                Decision::Keep => piece.kept(),
                Decision::Edit(replacement) => piece.edited(replacement),
            };
            if lo < cursor {
                return Err(format!(
                    "hunk {} and the hunk before it both edit the lines they share; keep one of the edits, or edit the hunk before splitting it",
                    n + 1
                ));
            }
            let start = at + textdiff::line_start(&old[at..], lo - cursor);
            out.extend_from_slice(&old[at..start]);
            for l in new {
                out.extend_from_slice(l);
            }
            at = start + textdiff::line_start(&old[start..], hi - lo);
            cursor = hi;
        }
        out.extend_from_slice(&old[at..]);
        Ok(Answer::Save(out))
    }
}

/// A composed text as the string FILE_SAVED carries: the bytes themselves when they are UTF-8,
/// with no copy (a file can be 10 MiB), else with U+FFFD for what is not.
pub fn saved_text(text: Vec<u8>) -> String {
    String::from_utf8(text).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// Where runs of lines of `image` are in `cur`, a later version of it: for each `(lo, len)`,
/// the line of `cur` where lines `lo..lo + len` of `image` start, all of them there unchanged
/// and together; None when one changed or went. An empty run is only in an empty `cur`.
pub fn placed(image: &[u8], cur: &[u8], runs: &[(usize, usize)]) -> Vec<Option<usize>> {
    let (old, new) = (textdiff::lines(image), textdiff::lines(cur));
    let ops = textdiff::diff_lines(&old, &new);
    let place = |&(lo, len): &(usize, usize)| {
        if len == 0 {
            return new.is_empty().then_some(0);
        }
        let (mut at, mut seen) = (None, 0);
        for op in &ops {
            if let textdiff::Op::Equal {
                old: o,
                new: n,
                len: l,
            } = *op
            {
                let shared = (lo + len).min(o + l).saturating_sub(lo.max(o));
                if shared > 0 {
                    // Where the run starts in `cur`, as this piece places it.
                    let start = (n + lo).checked_sub(o)?;
                    if *at.get_or_insert(start) != start {
                        return None;
                    }
                    seen += shared;
                }
            }
        }
        at.filter(|_| seen == len)
    };
    runs.iter().map(place).collect()
}

/// The verdict record a review stores with the settled diff (ccide-protocol(7) §5.5): the
/// numbers of the hunks kept and edited, each dropped hunk with its text and the reason given
/// for it, and the reason given for the whole. `reasons` has one entry per hunk.
pub fn verdict(
    review: &Review,
    decisions: &[Decision],
    reasons: &[Option<String>],
    why: Option<&str>,
) -> serde_json::Value {
    let numbers = |want: fn(&Decision) -> bool| -> Vec<usize> {
        (0..decisions.len())
            .filter(|&i| want(&decisions[i]))
            .map(|i| i + 1)
            .collect()
    };
    let dropped: Vec<serde_json::Value> = (0..decisions.len())
        .filter(|&i| decisions[i] == Decision::Drop)
        .map(|i| {
            obj! {
                "hunk": i + 1,
                "text": String::from_utf8_lossy(&review.pieces[i].text()).into_owned(),
                "why": reasons.get(i).cloned().flatten(),
            }
        })
        .collect();
    obj! {
        "kept": numbers(|d| *d == Decision::Keep),
        "dropped": dropped,
        "edited": numbers(|d| matches!(d, Decision::Edit(_))),
        "why": why,
    }
}

/// Parses a `--hunks` list (`1,3-4`) against `count` hunks: the 1-based numbers it names,
/// sorted, without repeats.
pub fn parse_hunk_list(spec: &str, count: usize) -> Result<Vec<usize>, String> {
    let mut out = Vec::new();
    for part in spec.split(',').map(str::trim) {
        let number = |s: &str| {
            s.trim()
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=count).contains(n))
                .ok_or_else(|| {
                    format!(
                        "'{s}' in --hunks {spec} is not a hunk number: this diff has hunks 1 to {count} (ccide diff show numbers them)"
                    )
                })
        };
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (number(a)?, number(b)?),
            None => {
                let n = number(part)?;
                (n, n)
            }
        };
        if a > b {
            return Err(format!("the range {part} in --hunks {spec} runs backwards"));
        }
        out.extend(a..=b);
    }
    crate::text::sort_by_bytes(&mut out, |n| n.to_be_bytes().to_vec());
    out.dedup();
    Ok(out)
}

/// Parses the hunk a user edited (a file of `' '`, `'-'` and `'+'` lines, as `git add -p`'s
/// `e` gives it; `#` lines are comments, an `@@` line is the header): its new side, each line with its terminator. A line
/// written as `\ No newline at end of file` takes the terminator off the line before it.
/// None when the user left no hunk lines at all (emptied the file): the edit is abandoned, as
/// in git.
pub fn parse_edited_hunk(text: &[u8]) -> Result<Option<Vec<Vec<u8>>>, String> {
    let mut out: Vec<Vec<u8>> = Vec::new();
    let mut any = false;
    for (i, line) in textdiff::lines(text).into_iter().enumerate() {
        match line.first() {
            Some(b'#') => {}
            Some(b'@') if line.starts_with(b"@@") => {}
            Some(b' ' | b'+') => {
                any = true;
                out.push(line[1..].to_vec());
            }
            Some(b'-') => any = true,
            Some(b'\\') => {
                if let Some(last) = out.last_mut()
                    && last.ends_with(b"\n")
                {
                    last.pop();
                }
            }
            // An empty line is an empty context line, as git takes it.
            Some(b'\n') => {
                any = true;
                out.push(b"\n".to_vec());
            }
            _ => {
                return Err(format!(
                    "line {} of the edited hunk starts with neither ' ', '+', '-' nor '#'",
                    i + 1
                ));
            }
        }
    }
    Ok(any.then_some(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_piece_is_placed_by_its_new_side() {
        let piece = |new_lo: usize, kinds: &str| Piece {
            old_lo: 0,
            new_lo,
            lines: kinds.chars().map(|k| (k, b"x\n".to_vec())).collect(),
        };
        assert_eq!(piece(2, " -+ ").new_lines(), "lines 3-5");
        assert_eq!(piece(2, "+").new_lines(), "line 3");
        assert_eq!(piece(2, "--").new_lines(), "line 2");
        assert_eq!(piece(0, "-").new_lines(), "the start");
    }

    #[test]
    fn a_hunk_read_back_from_its_text_is_the_same_hunk() {
        let r = Review::new(
            b"a\r\nb\r\nc\r\nd\r\ne\r\nf\r\ng\r\nh\r\ni".to_vec(),
            b"A\r\nb\r\nc\r\nd\r\nE\r\nf\r\ng\r\nh\r\nI".to_vec(),
        );
        for p in &r.pieces {
            assert_eq!(Piece::parse(&p.text()).as_ref(), Some(p));
        }
        let empty = Review::new(b"".to_vec(), b"x\n".to_vec());
        assert_eq!(
            Piece::parse(&empty.pieces[0].text()).as_ref(),
            Some(&empty.pieces[0])
        );
        assert_eq!(Piece::parse(b"no hunk\n"), None);
    }

    #[test]
    fn runs_are_placed_in_a_later_text_only_where_they_are_whole() {
        let image = b"a\nb\nc\nd\n";
        let runs = [(1, 2), (3, 1), (0, 0)];
        assert_eq!(
            placed(image, b"a\nb\nc\nd\n", &runs),
            [Some(1), Some(3), None]
        );
        assert_eq!(
            placed(image, b"x\na\nb\nc\ny\nd\n", &runs),
            [Some(2), Some(5), None]
        );
        // A line of the run changed, or a line put inside it: not there.
        assert_eq!(placed(image, b"a\nB\nc\nd\n", &runs)[0], None);
        assert_eq!(placed(image, b"a\nb\nx\nc\nd\n", &runs)[0], None);
        assert_eq!(placed(b"", b"", &[(0, 0)]), [Some(0)]);
    }
    use Decision::{Drop, Edit, Keep};

    const OLD: &str =
        "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\nk\nl\nm\nn\no\np\nq\nr\ns\nt\nu\nv\nw\nx\ny\nz\n";

    fn review(old: &[u8], new: &[u8]) -> Review {
        Review::new(old.to_vec(), new.to_vec())
    }

    fn saved(a: Answer) -> String {
        match a {
            Answer::Save(t) => String::from_utf8(t).unwrap(),
            Answer::Reject => panic!("rejected"),
        }
    }

    /// Three hunks: B at the start, J..K in the middle, X near the end.
    fn three() -> Review {
        let new = OLD
            .replace("b\n", "B\n")
            .replace("j\nk\n", "J\nK\nK2\n")
            .replace("x\n", "X\n");
        review(OLD.as_bytes(), new.as_bytes())
    }

    #[test]
    fn hunks_are_numbered_in_file_order_with_their_headers() {
        let r = three();
        let headers: Vec<String> = r.pieces.iter().map(Piece::header).collect();
        assert_eq!(
            headers,
            ["@@ -1,5 +1,5 @@", "@@ -7,8 +7,9 @@", "@@ -21,6 +22,6 @@"]
        );
        assert_eq!(
            String::from_utf8(r.pieces[2].text()).unwrap(),
            "@@ -21,6 +22,6 @@\n u\n v\n w\n-x\n+X\n y\n z\n"
        );
    }

    #[test]
    fn all_kept_is_the_proposal_and_none_kept_rejects() {
        let r = three();
        assert_eq!(
            r.compose(&[Keep, Keep, Keep]).unwrap(),
            Answer::Save(r.proposed.clone())
        );
        assert_eq!(r.compose(&[Drop, Drop, Drop]).unwrap(), Answer::Reject);
    }

    #[test]
    fn kept_hunks_are_applied_to_the_original() {
        let r = three();
        let expect = |b: &str, jk: &str, p: &str| {
            OLD.replace("b\n", b)
                .replace("j\nk\n", jk)
                .replace("x\n", p)
        };
        assert_eq!(
            saved(r.compose(&[Keep, Drop, Drop]).unwrap()),
            expect("B\n", "j\nk\n", "x\n")
        );
        assert_eq!(
            saved(r.compose(&[Drop, Keep, Keep]).unwrap()),
            expect("b\n", "J\nK\nK2\n", "X\n")
        );
        assert_eq!(
            saved(r.compose(&[Keep, Drop, Keep]).unwrap()),
            expect("B\n", "j\nk\n", "X\n")
        );
    }

    #[test]
    fn an_edited_hunk_gives_its_replacement() {
        let r = three();
        let rep: Vec<Vec<u8>> = ["g\n", "h\n", "i\n", "JJ\n", "l\n", "m\n", "n\n"]
            .iter()
            .map(|s| s.as_bytes().to_vec())
            .collect();
        assert_eq!(
            saved(r.compose(&[Drop, Edit(rep), Keep]).unwrap()),
            OLD.replace("j\nk\n", "JJ\n").replace("x\n", "X\n")
        );
        // A replacement that changes context changes it.
        let rep: Vec<Vec<u8>> = ["G\n", "h\n", "i\n", "J\n", "l\n", "m\n", "n\n"]
            .iter()
            .map(|s| s.as_bytes().to_vec())
            .collect();
        assert_eq!(
            saved(r.compose(&[Drop, Edit(rep), Drop]).unwrap()),
            OLD.replace("g\n", "G\n").replace("j\nk\n", "J\n")
        );
        // Edited to keep nothing but the context: the original.
        let rep = r.pieces[1]
            .lines
            .iter()
            .filter(|x| x.0 != '+')
            .map(|x| x.1.clone())
            .collect();
        assert_eq!(saved(r.compose(&[Drop, Edit(rep), Drop]).unwrap()), OLD);
    }

    #[test]
    fn split_makes_one_hunk_per_run_of_changes() {
        let new = OLD.replace("b\n", "B\n").replace("d\n", "D\n");
        let mut r = review(OLD.as_bytes(), new.as_bytes());
        assert_eq!(r.pieces.len(), 1);
        assert_eq!(r.split(0), 2);
        let texts: Vec<String> = r
            .pieces
            .iter()
            .map(|p| String::from_utf8(p.text()).unwrap())
            .collect();
        assert_eq!(
            texts,
            [
                "@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n",
                "@@ -3,5 +3,5 @@\n c\n-d\n+D\n e\n f\n g\n"
            ]
        );
        assert_eq!(r.split(0), 1);
        assert_eq!(
            saved(r.compose(&[Drop, Keep]).unwrap()),
            OLD.replace("d\n", "D\n")
        );
        assert_eq!(
            saved(r.compose(&[Keep, Drop]).unwrap()),
            OLD.replace("b\n", "B\n")
        );
        assert_eq!(saved(r.compose(&[Keep, Keep]).unwrap()), new);
        // Each part edited, sharing the context line c left as it was.
        let rep = |lines: &[&str]| lines.iter().map(|s| s.as_bytes().to_vec()).collect();
        assert_eq!(
            saved(
                r.compose(&[
                    Edit(rep(&["a\n", "X\n", "c\n"])),
                    Edit(rep(&["c\n", "Y\n", "e\n", "f\n", "g\n"]))
                ])
                .unwrap()
            ),
            OLD.replace("b\n", "X\n").replace("d\n", "Y\n")
        );
        // Both changing the line they share cannot be composed.
        let err = r
            .compose(&[
                Edit(rep(&["a\n", "X\n", "C\n"])),
                Edit(rep(&["C\n", "Y\n", "e\n", "f\n", "g\n"])),
            ])
            .unwrap_err();
        assert!(err.starts_with("hunk 2 and the hunk before it"), "{err}");
    }

    /// A CRLF file: the CLI reads it as LF and restores CRLF when it writes, so the composed
    /// text is LF, byte for byte what a whole LF proposal would be.
    #[test]
    fn crlf_bom_and_utf16_files_compose_as_the_cli_reads_them() {
        let crlf = OLD.replace('\n', "\r\n");
        let read = textdiff::as_cli_reads(crlf.into_bytes());
        assert!(read.writes_crlf());
        let new = OLD.replace("b\n", "B\n").replace("p\n", "P\n");
        let r = review(&read.text, new.as_bytes());
        assert_eq!(
            saved(r.compose(&[Keep, Drop]).unwrap()),
            OLD.replace("b\n", "B\n")
        );

        let bom = format!("\u{FEFF}{OLD}");
        let read = textdiff::as_cli_reads(bom.clone().into_bytes());
        let new = bom.replace("a\n", "A\n").replace("p\n", "P\n");
        let r = review(&read.text, new.as_bytes());
        assert_eq!(
            saved(r.compose(&[Keep, Drop]).unwrap()).as_bytes(),
            bom.replace("a\n", "A\n").as_bytes()
        );
        assert_eq!(
            saved(r.compose(&[Drop, Keep]).unwrap()).as_bytes(),
            bom.replace("p\n", "P\n").as_bytes()
        );

        let mut utf16 = vec![0xFF, 0xFE];
        for u in "é\r\nb\r\nc\r\nd\r\ne\r\nf\r\ng\r\nh\r\ni\r\nj\r\nk\r\n".encode_utf16() {
            utf16.extend_from_slice(&u.to_le_bytes());
        }
        let read = textdiff::as_cli_reads(utf16);
        assert_eq!(read.encoding, Some("UTF-16LE"));
        let text = String::from_utf8(read.text.clone()).unwrap();
        let new = text.replace("é\n", "É\n").replace("k\n", "K\n");
        let r = review(&read.text, new.as_bytes());
        assert_eq!(
            saved(r.compose(&[Drop, Keep]).unwrap()),
            "\u{FEFF}é\nb\nc\nd\ne\nf\ng\nh\ni\nj\nK\n"
        );
        assert_eq!(
            saved(r.compose(&[Keep, Drop]).unwrap()),
            "\u{FEFF}É\nb\nc\nd\ne\nf\ng\nh\ni\nj\nk\n"
        );
    }

    #[test]
    fn a_missing_final_newline_is_kept_or_restored_with_its_hunk() {
        let old = "a\nb\nc\nd\ne\nf\ng\nh\ni\nj";
        let new = "A\nb\nc\nd\ne\nf\ng\nh\ni\nj\n";
        let r = review(old.as_bytes(), new.as_bytes());
        assert_eq!(r.pieces.len(), 2);
        assert_eq!(
            saved(r.compose(&[Keep, Drop]).unwrap()),
            "A\nb\nc\nd\ne\nf\ng\nh\ni\nj"
        );
        assert_eq!(
            saved(r.compose(&[Drop, Keep]).unwrap()),
            "a\nb\nc\nd\ne\nf\ng\nh\ni\nj\n"
        );
        assert!(
            String::from_utf8(r.pieces[1].text())
                .unwrap()
                .ends_with("-j\n\\ No newline at end of file\n+j\n")
        );
    }

    /// 400 hunks (replacements, insertions and deletions in turn): any choice of them
    /// composes to the original with exactly the chosen ones applied.
    #[test]
    fn many_hunks_compose_to_the_original_with_exactly_the_kept_ones_applied() {
        const COUNT: usize = 400;
        let count = COUNT;
        // Block b is lines 10b..10b+10; its hunk changes line 10b+5.
        let text = |keep: &dyn Fn(usize) -> bool| {
            let mut out = String::new();
            for i in 0..count * 10 {
                let b = i / 10;
                match (i % 10 == 5 && keep(b), b % 3) {
                    (true, 0) => out += &format!("new {b}\n"),
                    (true, 1) => out += &format!("added {b}\nline {i}\n"),
                    (true, _) => {}
                    (false, _) => out += &format!("line {i}\n"),
                }
            }
            out
        };
        let r = review(text(&|_| false).as_bytes(), text(&|_| true).as_bytes());
        assert_eq!(r.pieces.len(), count);
        for choose in [
            |b: usize| b.is_multiple_of(2),
            |b: usize| b % 7 < 3,
            |b: usize| b == COUNT - 1,
        ] {
            let decisions: Vec<Decision> = (0..count)
                .map(|b| if choose(b) { Keep } else { Drop })
                .collect();
            assert_eq!(saved(r.compose(&decisions).unwrap()), text(&choose));
        }
        assert_eq!(
            saved(r.compose(&vec![Keep; count]).unwrap()),
            text(&|_| true)
        );
        assert_eq!(r.compose(&vec![Drop; count]).unwrap(), Answer::Reject);
    }

    #[test]
    fn a_new_file_is_one_hunk() {
        let r = review(b"", b"x\ny\n");
        assert_eq!(r.pieces.len(), 1);
        assert_eq!(r.pieces[0].header(), "@@ -0,0 +1,2 @@");
        assert_eq!(r.compose(&[Drop]).unwrap(), Answer::Reject);
    }

    #[test]
    fn the_verdict_names_hunks_and_carries_dropped_text_and_reasons() {
        let r = three();
        let rep = r.pieces[1].new_side();
        let v = verdict(
            &r,
            &[Drop, Edit(rep), Keep],
            &[Some("not b".into()), None, None],
            Some("mostly fine"),
        );
        assert_eq!(
            v,
            serde_json::json!({
                "kept": [3],
                "dropped": [{"hunk": 1, "text": "@@ -1,5 +1,5 @@\n a\n-b\n+B\n c\n d\n e\n", "why": "not b"}],
                "edited": [2],
                "why": "mostly fine",
            })
        );
        assert_eq!(
            verdict(&r, &[Keep, Keep, Drop], &[], None)["dropped"][0]["why"],
            serde_json::Value::Null
        );
    }

    #[test]
    fn hunk_lists_name_numbers_and_ranges() {
        assert_eq!(parse_hunk_list("1,3-4", 5).unwrap(), [1, 3, 4]);
        assert_eq!(parse_hunk_list("4, 2,2", 5).unwrap(), [2, 4]);
        assert_eq!(
            parse_hunk_list("6", 5).unwrap_err(),
            "'6' in --hunks 6 is not a hunk number: this diff has hunks 1 to 5 (ccide diff show numbers them)"
        );
        assert!(parse_hunk_list("3-1", 5).is_err());
        assert!(parse_hunk_list("", 5).is_err());
    }

    #[test]
    fn an_edited_hunk_file_gives_its_new_side() {
        let text = b"# comment\n a\n-b\n+B\n+C\n\n c\n\\ No newline at end of file\n";
        assert_eq!(
            parse_edited_hunk(text).unwrap().unwrap(),
            [&b"a\n"[..], b"B\n", b"C\n", b"\n", b"c"]
        );
        assert_eq!(parse_edited_hunk(b"# only comments\n").unwrap(), None);
        assert_eq!(parse_edited_hunk(b"-a\n").unwrap(), Some(vec![]));
        assert!(parse_edited_hunk(b"x\n").is_err());
    }
}
