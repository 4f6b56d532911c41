//! Line diff for pending edits: Myers' O(ND) algorithm with the linear-space "middle snake"
//! refinement, printed as GNU-style unified diffs.
//!
//! The pipeline follows GNU diff closely so that `ccide diff show` looks like `diff -u`:
//! common prefix and suffix lines are stripped, the rest is interned to integer ids, lines that
//! occur on one side only are set aside (they can never be part of a common subsequence, so this
//! keeps the result minimal while making "completely different" inputs trivial), Myers runs on
//! what is left, and finally change groups are slid along runs of equal lines the way GNU's
//! `shift_boundaries` does, which only changes where an ambiguous change is shown, never how
//! big it is.
//!
//! Unlike GNU we do not discard "confusing" lines (ones frequent in the other file, such as
//! blank lines) before the search, so our scripts are minimal where GNU's sometimes are not;
//! for heavily rewritten files the two outputs can therefore differ, with ours the shorter.
//! Minimality is given up only past a cost cap sized so that the worst case (two shuffled or
//! random 10 MiB files) still takes a fraction of a second; ordinary edits never reach it.

use std::hash::{BuildHasher, RandomState};

/// One edit operation over line indices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Equal { old: usize, new: usize, len: usize },
    Delete { old: usize, len: usize },
    Insert { new: usize, len: usize },
}

/// A unified diff hunk. `old_start`/`new_start` are what the `@@` header shows: 1-based, except
/// that an empty range shows the number of the line before it (0 at the start of a file), as
/// GNU diff does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hunk {
    pub old_start: usize,
    pub old_len: usize,
    pub new_start: usize,
    pub new_len: usize,
    /// `(' ' | '-' | '+', line bytes including the terminator if it has one)`.
    pub lines: Vec<(char, Vec<u8>)>,
}

/// A file as the CLI reads it before proposing an edit: UTF-16LE (with its BOM) is decoded,
/// CRLF becomes LF, and a byte order mark stays, as U+FEFF at the start of the text. Its
/// proposal is that text edited, in UTF-8; when it writes, it encodes the file as before and
/// gives every line the ending most of the file's lines had (LF on a tie). So this is what a
/// review compares the proposal with (ccide-protocol(7) §5.1). Observed with 2.1.330: the
/// proposal for a BOM file starts with U+FEFF; a file of 2 CRLF and 2 LF lines is written all
/// LF, one of 3 CRLF and 1 LF all CRLF.
pub struct AsRead {
    pub text: Vec<u8>,
    /// Lines that end in CRLF and in a lone LF.
    pub crlf_lines: usize,
    pub lf_lines: usize,
    /// The file's encoding when the proposal's UTF-8 is turned back into something else.
    pub encoding: Option<&'static str>,
}

impl AsRead {
    /// The line ending the CLI gives every line when it writes the file.
    pub fn writes_crlf(&self) -> bool {
        self.crlf_lines > self.lf_lines
    }
}

pub fn as_cli_reads(bytes: Vec<u8>) -> AsRead {
    let (mut text, encoding) = if let Some(rest) = bytes.strip_prefix(b"\xFF\xFE") {
        let units: Vec<u16> = [0xFEFF]
            .into_iter()
            .chain(
                rest.chunks(2)
                    .map(|c| u16::from_le_bytes([c[0], *c.get(1).unwrap_or(&0)])),
            )
            .collect();
        (
            String::from_utf16_lossy(&units).into_bytes(),
            Some("UTF-16LE"),
        )
    } else {
        (bytes, None)
    };
    // The CR of each CRLF is taken out in place, runs between CRs moved whole: a file
    // without CR is kept as it was read, with no copy.
    let mut crlf_lines = 0;
    if let Some(first) = find_byte(&text, b'\r') {
        let (mut to, mut from, mut cr) = (first, first, first);
        loop {
            text.copy_within(from..cr, to);
            to += cr - from;
            if text.get(cr + 1) == Some(&b'\n') {
                crlf_lines += 1;
            } else {
                text[to] = b'\r';
                to += 1;
            }
            from = cr + 1;
            match find_byte(&text[from..], b'\r') {
                Some(k) => cr = from + k,
                None => break,
            }
        }
        let end = text.len();
        text.copy_within(from..end, to);
        text.truncate(to + end - from);
    }
    AsRead {
        lf_lines: count_byte(&text, b'\n') - crlf_lines,
        text,
        crlf_lines,
        encoding,
    }
}

const ONES: u64 = 0x0101_0101_0101_0101;
const HIGH: u64 = 0x8080_8080_8080_8080;

/// The first `b` in `hay`, eight bytes at a time: files of hundreds of thousands of lines are
/// split here.
fn find_byte(hay: &[u8], b: u8) -> Option<usize> {
    let pattern = ONES * u64::from(b);
    let mut i = 0;
    while let Some(w) = hay.get(i..i + 8) {
        let v = u64::from_le_bytes(w.try_into().expect("8 bytes")) ^ pattern;
        // The lowest flagged byte is the first zero byte (flags above it may be false).
        let zero = v.wrapping_sub(ONES) & !v & HIGH;
        if zero != 0 {
            return Some(i + zero.trailing_zeros() as usize / 8);
        }
        i += 8;
    }
    hay[i..].iter().position(|&x| x == b).map(|k| i + k)
}

/// The bytes of the 8-byte word `w` equal to `b`, as their high bits (exactly those: no false
/// alarms, unlike `find_byte`'s test).
fn bytes_equal(w: &[u8], b: u8) -> u64 {
    let v = u64::from_le_bytes(w.try_into().expect("8 bytes")) ^ (ONES * u64::from(b));
    !(((v & !HIGH) + !HIGH) | v | !HIGH)
}

/// How many `b` there are in `hay`, eight bytes at a time.
fn count_byte(hay: &[u8], b: u8) -> usize {
    let words = hay.chunks_exact(8);
    let tail = words.remainder().iter().filter(|&&x| x == b).count();
    words.fold(tail, |n, w| n + bytes_equal(w, b).count_ones() as usize)
}

/// Where line `n` (0-based) of `text` starts, eight bytes at a time; `text.len()` when it has
/// no such line.
pub fn line_start(text: &[u8], n: usize) -> usize {
    let mut left = n;
    let mut i = 0;
    while left > 0
        && let Some(w) = text.get(i..i + 8)
    {
        let mut ends = bytes_equal(w, b'\n');
        let count = ends.count_ones() as usize;
        if count < left {
            left -= count;
            i += 8;
            continue;
        }
        for _ in 1..left {
            ends &= ends - 1;
        }
        return i + ends.trailing_zeros() as usize / 8 + 1;
    }
    for (k, &b) in text[i..].iter().enumerate() {
        if left == 0 {
            return i + k;
        }
        left -= usize::from(b == b'\n');
    }
    text.len()
}

/// Lines of `text`, each keeping its terminator: one pass, eight bytes at a time.
pub fn lines(text: &[u8]) -> Vec<&[u8]> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while let Some(w) = text.get(i..i + 8) {
        let mut ends = bytes_equal(w, b'\n');
        while ends != 0 {
            let k = i + ends.trailing_zeros() as usize / 8 + 1;
            out.push(&text[start..k]);
            start = k;
            ends &= ends - 1;
        }
        i += 8;
    }
    for k in i..text.len() {
        if text[k] == b'\n' {
            out.push(&text[start..=k]);
            start = k + 1;
        }
    }
    if start < text.len() {
        out.push(&text[start..]);
    }
    out
}

/// The edit script turning `old` lines into `new` lines, in order, adjacent ops of the same kind
/// merged. Within a change, deletions come before insertions.
pub fn diff_lines(old: &[&[u8]], new: &[&[u8]]) -> Vec<Op> {
    diff_lines_capped(old, new, None)
}

/// `diff_lines` with an explicit cost cap, so tests can exercise the non-minimal fallback on
/// small inputs.
fn diff_lines_capped(old: &[&[u8]], new: &[&[u8]], too_expensive: Option<usize>) -> Vec<Op> {
    let (old_changed, new_changed) = changed_flags(old, new, too_expensive, true);
    build_ops(&old_changed, &new_changed)
}

/// Counts of inserted and deleted lines: (added, removed), those of `diff_lines` (where its
/// changes are shown does not change how many there are).
pub fn stat(old: &[u8], new: &[u8]) -> (usize, usize) {
    let (old_changed, new_changed) = changed_flags(&lines(old), &lines(new), None, false);
    let count = |f: &Flags| f.0.iter().filter(|&&c| c).count();
    (count(&new_changed), count(&old_changed))
}

/// Hunks with `context` lines of context (3 for the CLI), merged when their contexts overlap or
/// touch, as GNU diff merges them.
pub fn hunks(old: &[u8], new: &[u8], context: usize) -> Vec<Hunk> {
    let a = lines(old);
    let b = lines(new);
    let ops = diff_lines(&a, &b);
    hunks_from_ops(&a, &b, &ops, context)
}

/// A complete unified diff text: `--- a_label\n+++ b_label\n` then `@@ -l,s +l,s @@` hunks, GNU
/// style, with `\ No newline at end of file` after a line lacking its terminator. With `color`,
/// headers are bold, `@@` lines cyan, `-` lines red and `+` lines green. Empty when the inputs
/// are equal.
/// A unified diff. `terminal`: for a person's terminal, colour (when `color`) and every line's
/// control characters made visible, so a lone CR or an escape sequence in a proposal cannot
/// hide what will be written; otherwise the lines' bytes as they are. `numbered`: each `@@`
/// line ends in ` hunk K/N`, where `patch` and `git apply` ignore text, so review commands can
/// name hunks by number.
pub fn unified(
    old: &[u8],
    new: &[u8],
    a_label: &str,
    b_label: &str,
    terminal: bool,
    color: bool,
    numbered: bool,
) -> Vec<u8> {
    const BOLD: &[u8] = b"\x1b[1m";
    const CYAN: &[u8] = b"\x1b[36m";
    const RED: &[u8] = b"\x1b[31m";
    const GREEN: &[u8] = b"\x1b[32m";
    const RESET: &[u8] = b"\x1b[0m";

    let hunks = hunks(old, new, 3);
    if hunks.is_empty() {
        return Vec::new();
    }
    let mut out = Vec::new();
    // `body` excludes the final '\n' so the reset code can go before it.
    let put = |out: &mut Vec<u8>, start: Option<&[u8]>, body: &[u8]| {
        match start {
            Some(code) if color => {
                out.extend_from_slice(code);
                out.extend_from_slice(body);
                out.extend_from_slice(RESET);
            }
            _ => out.extend_from_slice(body),
        }
        out.push(b'\n');
    };
    put(&mut out, Some(BOLD), format!("--- {a_label}").as_bytes());
    put(&mut out, Some(BOLD), format!("+++ {b_label}").as_bytes());
    let mut buf = Vec::new();
    for (k, h) in hunks.iter().enumerate() {
        let mut header = format!(
            "@@ -{} +{} @@",
            range(h.old_start, h.old_len),
            range(h.new_start, h.new_len)
        );
        if numbered {
            header += &format!(" hunk {}/{}", k + 1, hunks.len());
        }
        put(&mut out, Some(CYAN), header.as_bytes());
        for (kind, line) in &h.lines {
            let code = match kind {
                '-' => Some(RED),
                '+' => Some(GREEN),
                _ => None,
            };
            let (body, terminated) = match line.strip_suffix(b"\n") {
                Some(body) => (body, true),
                None => (&line[..], false),
            };
            buf.clear();
            // Every kind char is ASCII, so the cast cannot truncate.
            buf.push(*kind as u8);
            if terminal {
                buf.extend_from_slice(
                    crate::text::visible(&String::from_utf8_lossy(body)).as_bytes(),
                );
            } else {
                buf.extend_from_slice(body);
            }
            put(&mut out, code, &buf);
            if !terminated {
                put(&mut out, None, b"\\ No newline at end of file");
            }
        }
    }
    out
}

/// GNU omits the length when it is 1.
fn range(start: usize, len: usize) -> String {
    if len == 1 {
        start.to_string()
    } else {
        format!("{start},{len}")
    }
}

/// Header line number for a range starting at 0-based `lo`: an empty range is named by the line
/// before it, because that is what `patch` expects.
fn header_start(lo: usize, len: usize) -> usize {
    if len == 0 { lo } else { lo + 1 }
}

/// One change: `old_len` lines deleted at `old`, `new_len` lines inserted at `new`.
#[derive(Clone, Copy)]
struct Change {
    old: usize,
    old_len: usize,
    new: usize,
    new_len: usize,
}

/// The changes `ops` make, in order: a delete and the insert right after it are one change.
fn changes_of(ops: &[Op]) -> Vec<Change> {
    let mut changes: Vec<Change> = Vec::new();
    let (mut i, mut j) = (0, 0);
    let mut after_delete = false;
    for op in ops {
        match *op {
            Op::Equal { old, new, len } => {
                i = old + len;
                j = new + len;
                after_delete = false;
            }
            Op::Delete { old, len } => {
                changes.push(Change {
                    old,
                    old_len: len,
                    new: j,
                    new_len: 0,
                });
                i = old + len;
                after_delete = true;
            }
            Op::Insert { new, len } => {
                match changes.last_mut() {
                    Some(c) if after_delete => c.new_len = len,
                    _ => changes.push(Change {
                        old: i,
                        old_len: 0,
                        new,
                        new_len: len,
                    }),
                }
                j = new + len;
                after_delete = false;
            }
        }
    }
    changes
}

/// Unified-diff hunks of `context` lines around the changes `ops` make to `a` (giving `b`);
/// changes closer than twice the context share a hunk.
fn hunks_from_ops(a: &[&[u8]], b: &[&[u8]], ops: &[Op], context: usize) -> Vec<Hunk> {
    let changes = changes_of(ops);

    let mut out = Vec::new();
    let mut k = 0;
    while k < changes.len() {
        let mut e = k;
        while e + 1 < changes.len()
            && changes[e + 1].old - (changes[e].old + changes[e].old_len) <= 2 * context
        {
            e += 1;
        }
        let first = changes[k];
        let last = changes[e];
        let lo0 = first.old.saturating_sub(context);
        let lo1 = first.new - (first.old - lo0);
        let last_end0 = last.old + last.old_len;
        let last_end1 = last.new + last.new_len;
        let hi0 = (last_end0 + context).min(a.len());
        let hi1 = last_end1 + (hi0 - last_end0);

        let mut lines = Vec::new();
        let mut i = lo0;
        for c in &changes[k..=e] {
            lines.extend(a[i..c.old].iter().map(|l| (' ', l.to_vec())));
            lines.extend(
                a[c.old..c.old + c.old_len]
                    .iter()
                    .map(|l| ('-', l.to_vec())),
            );
            lines.extend(
                b[c.new..c.new + c.new_len]
                    .iter()
                    .map(|l| ('+', l.to_vec())),
            );
            i = c.old + c.old_len;
        }
        lines.extend(a[i..hi0].iter().map(|l| (' ', l.to_vec())));
        out.push(Hunk {
            old_start: header_start(lo0, hi0 - lo0),
            old_len: hi0 - lo0,
            new_start: header_start(lo1, hi1 - lo1),
            new_len: hi1 - lo1,
            lines,
        });
        k = e + 1;
    }
    out
}

/// A multiply-rotate hash of a line over 8-byte words, several times faster than SipHash on
/// short lines, which matters because interning is most of the time spent on large files.
/// `seed` is random per diff, so accidental collisions do not reproduce; it is not meant to
/// resist a deliberate attack, which would only make one diff slow. With a fixed seed it is a
/// content hash eight bytes at a time (the review store names its blobs by it).
pub fn hash_line(seed: u64, line: &[u8]) -> u64 {
    let mut h = seed ^ line.len() as u64;
    let mut mix = |word: u64| h = (h.rotate_left(23) ^ word).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    let mut words = line.chunks_exact(8);
    for w in &mut words {
        mix(u64::from_le_bytes(w.try_into().expect("8-byte chunk")));
    }
    let rest = words.remainder();
    if !rest.is_empty() {
        let mut buf = [0u8; 8];
        buf[..rest.len()].copy_from_slice(rest);
        mix(u64::from_le_bytes(buf));
    }
    // The multiply leaves the low bits weak, and the table picks slots with them.
    (h ^ (h >> 29)).wrapping_mul(0xbf58_476d_1ce4_e5b9) ^ (h >> 32)
}

/// Turns per-line change flags into ops. The flags are consistent by construction: the lines
/// left unflagged on each side are equal, one for one, in order.
fn build_ops(old_changed: &Flags, new_changed: &Flags) -> Vec<Op> {
    let (n, m) = (old_changed.len(), new_changed.len());
    let mut ops = Vec::new();
    let (mut i, mut j) = (0, 0);
    while i < n || j < m {
        if i < n && j < m && !old_changed.get(i) && !new_changed.get(j) {
            let (si, sj) = (i, j);
            while i < n && j < m && !old_changed.get(i) && !new_changed.get(j) {
                i += 1;
                j += 1;
            }
            ops.push(Op::Equal {
                old: si,
                new: sj,
                len: i - si,
            });
            continue;
        }
        let (si, sj) = (i, j);
        while i < n && old_changed.get(i) {
            i += 1;
        }
        while j < m && new_changed.get(j) {
            j += 1;
        }
        if i == si && j == sj {
            // Unreachable if the invariant holds; still end with a correct script rather than
            // looping forever.
            debug_assert!(false, "inconsistent change flags at {i},{j}");
            i = n;
            j = m;
        }
        if i > si {
            ops.push(Op::Delete {
                old: si,
                len: i - si,
            });
        }
        if j > sj {
            ops.push(Op::Insert {
                new: sj,
                len: j - sj,
            });
        }
    }
    ops
}

/// Per-line "changed" flags with a `false` sentinel before the first and after the last line,
/// which lets `shift_boundaries` scan without bounds tests, as in GNU diff.
struct Flags(Vec<bool>);

impl Flags {
    fn new(len: usize) -> Flags {
        Flags(vec![false; len + 2])
    }

    fn len(&self) -> usize {
        self.0.len() - 2
    }

    /// Index -1 and `len()` are the sentinels.
    fn at(&self, i: isize) -> bool {
        self.0[(i + 1) as usize]
    }

    fn get(&self, i: usize) -> bool {
        self.0[i + 1]
    }

    fn set(&mut self, i: isize, v: bool) {
        self.0[(i + 1) as usize] = v;
    }
}

/// Which lines of each side are changed; `shift` places the changes as GNU diff shows them.
fn changed_flags<'a>(
    old: &[&'a [u8]],
    new: &[&'a [u8]],
    too_expensive: Option<usize>,
    shift: bool,
) -> (Flags, Flags) {
    let (n, m) = (old.len(), new.len());
    let mut old_changed = Flags::new(n);
    let mut new_changed = Flags::new(m);

    // Cheap slice compares first: typical edits touch a small part of a file, and interning is
    // the dominant cost on large inputs.
    let prefix = old.iter().zip(new).take_while(|(a, b)| a == b).count();
    let suffix = old[prefix..]
        .iter()
        .rev()
        .zip(new[prefix..].iter().rev())
        .take_while(|(a, b)| a == b)
        .count();
    let (old_mid, new_mid) = (&old[prefix..n - suffix], &new[prefix..m - suffix]);

    if !old_mid.is_empty() || !new_mid.is_empty() {
        let (xs, ys, distinct) = line_ids(old_mid, new_mid);
        mark_changed(
            &xs,
            &ys,
            distinct,
            prefix,
            too_expensive,
            &mut old_changed,
            &mut new_changed,
        );
    }

    // GNU keeps only `context` lines of the identical prefix and suffix in play, so changes
    // cannot slide further into them; matching that with the CLI's context of 3 makes our
    // output identical to `diff -u` in more of the ambiguous cases.
    if shift {
        let head = prefix.saturating_sub(HORIZON);
        let tail = suffix.saturating_sub(HORIZON);
        shift_boundaries(&old[..n - tail], head, &mut old_changed, &new_changed);
        shift_boundaries(&new[..m - tail], head, &mut new_changed, &old_changed);
    }
    (old_changed, new_changed)
}

/// The lines of each side as ids, equal lines the same id, and how many ids there can be. A
/// line's id is the index of the first old line equal to it; lines of the new side found
/// nowhere on the old side all get the last id: they can never be part of a common
/// subsequence, which is all the ids are for.
///
/// The old side's lines are sorted by hash rather than put in a hash table: a table of
/// hundreds of thousands of lines costs a cache miss per line, the sort only passes over
/// memory in order.
fn line_ids(old_mid: &[&[u8]], new_mid: &[&[u8]]) -> (Vec<u32>, Vec<u32>, usize) {
    let seed = RandomState::new().hash_one(0x6c69_6e65_u64);
    let hash = |line: &[u8]| hash_line(seed, line) >> 32;
    let index = |k: usize| u32::try_from(k).expect("more than 2^32 lines");
    // (hash, index) of each old line: equal lines end up together, the first one first.
    let mut sorted: Vec<u64> = (0..old_mid.len())
        .map(|k| hash(old_mid[k]) << 32 | u64::from(index(k)))
        .collect();
    sorted.sort_unstable();
    let mut xs = vec![0; old_mid.len()];
    // The lines of one hash that differ: nearly always one.
    let mut distinct: Vec<u32> = Vec::new();
    for (j, &key) in sorted.iter().enumerate() {
        if j == 0 || sorted[j - 1] >> 32 != key >> 32 {
            distinct.clear();
        }
        let k = key as u32;
        let line = old_mid[k as usize];
        xs[k as usize] = match distinct.iter().find(|&&d| old_mid[d as usize] == line) {
            Some(&d) => d,
            None => {
                distinct.push(k);
                k
            }
        };
    }
    let absent = index(old_mid.len());
    let id_of = |line: &[u8]| {
        let h = hash(line);
        let at = sorted.partition_point(|&key| key >> 32 < h);
        sorted[at..]
            .iter()
            .take_while(|&&key| key >> 32 == h)
            .map(|&key| key as u32)
            .find(|&k| old_mid[k as usize] == line)
            .unwrap_or(absent)
    };
    // A new line equal to the old line the last one followed has its id without a lookup:
    // edits leave most of a file in step.
    let mut follow = 0;
    let ys: Vec<u32> = new_mid
        .iter()
        .map(|l| {
            if old_mid.get(follow) == Some(l) {
                follow += 1;
                return xs[follow - 1];
            }
            let id = id_of(l);
            if id != absent {
                follow = id as usize + 1;
            }
            id
        })
        .collect();
    (xs, ys, old_mid.len() + 1)
}

/// Marks the changed lines of the middle parts (`xs`, `ys`, as ids, starting at line `prefix`
/// of each side) in `old_changed` and `new_changed`.
fn mark_changed(
    xs: &[u32],
    ys: &[u32],
    distinct: usize,
    prefix: usize,
    too_expensive: Option<usize>,
    old_changed: &mut Flags,
    new_changed: &mut Flags,
) {
    let mut in_old = vec![false; distinct];
    let mut in_new = vec![false; distinct];
    xs.iter().for_each(|&x| in_old[x as usize] = true);
    ys.iter().for_each(|&y| in_new[y as usize] = true);

    // A line missing from the other side can never be matched, so it is a change whatever
    // Myers would say; removing it first keeps the result minimal and shrinks D.
    let keep = |seq: &[u32], present: &[bool], changed: &mut Flags| {
        let mut kept = Vec::new();
        let mut index = Vec::new();
        for (k, &id) in seq.iter().enumerate() {
            if present[id as usize] {
                kept.push(id);
                index.push(prefix + k);
            } else {
                changed.set((prefix + k) as isize, true);
            }
        }
        (kept, index)
    };
    let (xv, xi) = keep(xs, &in_new, old_changed);
    let (yv, yi) = keep(ys, &in_old, new_changed);

    let mut cx = vec![false; xv.len()];
    let mut cy = vec![false; yv.len()];
    Myers::new(&xv, &yv, too_expensive).compare(&mut cx, &mut cy);
    for (k, _) in cx.iter().enumerate().filter(|(_, c)| **c) {
        old_changed.set(xi[k] as isize, true);
    }
    for (k, _) in cy.iter().enumerate().filter(|(_, c)| **c) {
        new_changed.set(yi[k] as isize, true);
    }
}

/// GNU diff's `shift_boundaries`: slide each run of changed lines over equal neighbours so that
/// runs merge where possible, end as late as possible, and otherwise line up with a change on
/// the other side. Sliding a run past an equal line keeps the sequence of unchanged lines the
/// same, so the script stays correct and its size does not change.
///
/// Only lines from `head` on are considered; `head` must be the same in both files and no line
/// before it may be changed.
fn shift_boundaries(lines: &[&[u8]], head: usize, changed: &mut Flags, other: &Flags) {
    let i_end = lines.len() as isize;
    let same = |a: isize, b: isize| lines[a as usize] == lines[b as usize];
    // `j` tracks the corresponding position in the other file.
    let head = head as isize;
    let (mut i, mut j): (isize, isize) = (head, head);
    loop {
        while i < i_end && !changed.at(i) {
            while other.at(j) {
                j += 1;
            }
            j += 1;
            i += 1;
        }
        if i == i_end {
            break;
        }
        let mut start = i;
        i += 1;
        while changed.at(i) {
            i += 1;
        }
        while other.at(j) {
            j += 1;
        }

        let mut corresponding;
        loop {
            let run = i - start;

            // Back up while the previous unchanged line equals the last changed one; this
            // merges with earlier runs.
            while start > head && same(start - 1, i - 1) {
                start -= 1;
                changed.set(start, true);
                i -= 1;
                changed.set(i, false);
                while changed.at(start - 1) {
                    start -= 1;
                }
                j -= 1;
                while other.at(j) {
                    j -= 1;
                }
            }

            // The end of the run, at the last point where it lines up with a run of changes
            // in the other file; `i_end` means there is none.
            corresponding = if other.at(j - 1) { i } else { i_end };

            // Then move forward as far as possible, merging with later runs.
            while i != i_end && same(start, i) {
                changed.set(start, false);
                start += 1;
                changed.set(i, true);
                i += 1;
                while changed.at(i) {
                    i += 1;
                }
                j += 1;
                while other.at(j) {
                    corresponding = i;
                    j += 1;
                }
            }

            if run == i - start {
                break;
            }
        }

        // Prefer lining up with a change in the other file over the latest position.
        while corresponding < i {
            start -= 1;
            changed.set(start, true);
            i -= 1;
            changed.set(i, false);
            j -= 1;
            while other.at(j) {
                j -= 1;
            }
        }
    }
}

/// Where a box is cut: `(xmid, ymid)` lies on an optimal (or, after the cost cap, a good) path,
/// and the flags say whether each half must still be solved minimally.
struct Partition {
    xmid: isize,
    ymid: isize,
    lo_minimal: bool,
    hi_minimal: bool,
}

/// Myers' linear-space search over interned lines. Coordinates are `isize` because diagonals
/// `k = x - y` are negative half the time.
struct Myers<'a> {
    xv: &'a [u32],
    yv: &'a [u32],
    /// Furthest x reached on each diagonal, forward and backward, indexed by `k + off`.
    fd: Vec<isize>,
    bd: Vec<isize>,
    off: isize,
    /// Edit cost after which a search gives up on minimality and cuts at its best point so far;
    /// this bounds the work on inputs with a huge D.
    too_expensive: isize,
}

impl<'a> Myers<'a> {
    fn new(xv: &'a [u32], yv: &'a [u32], too_expensive: Option<usize>) -> Myers<'a> {
        let diags = xv.len() + yv.len() + 3;
        // A capped search costs about `diags * too_expensive` steps in the worst case, so the
        // cap shrinks as inputs grow; below it every result is minimal.
        let too_expensive = too_expensive
            .unwrap_or((WORK_BUDGET / diags).max(TOO_EXPENSIVE_MIN))
            .clamp(1, isize::MAX as usize) as isize;
        Myers {
            xv,
            yv,
            fd: vec![0; diags],
            bd: vec![0; diags],
            off: yv.len() as isize + 1,
            too_expensive,
        }
    }

    /// Marks in `cx`/`cy` the lines that are not part of the common subsequence found.
    fn compare(&mut self, cx: &mut [bool], cy: &mut [bool]) {
        // An explicit stack: heuristic cuts do not halve the problem, so recursion depth would
        // not be bounded by log D.
        let mut stack = vec![(0, self.xv.len() as isize, 0, self.yv.len() as isize, false)];
        while let Some((mut xoff, mut xlim, mut yoff, mut ylim, minimal)) = stack.pop() {
            while xoff < xlim && yoff < ylim && self.xv[xoff as usize] == self.yv[yoff as usize] {
                xoff += 1;
                yoff += 1;
            }
            while xoff < xlim
                && yoff < ylim
                && self.xv[xlim as usize - 1] == self.yv[ylim as usize - 1]
            {
                xlim -= 1;
                ylim -= 1;
            }
            if xoff == xlim {
                cy[yoff as usize..ylim as usize].fill(true);
            } else if yoff == ylim {
                cx[xoff as usize..xlim as usize].fill(true);
            } else {
                let p = self.diag(xoff, xlim, yoff, ylim, minimal);
                stack.push((p.xmid, xlim, p.ymid, ylim, p.hi_minimal));
                stack.push((xoff, p.xmid, yoff, p.ymid, p.lo_minimal));
            }
        }
    }

    /// Finds the midpoint of a shortest edit path from `(xoff, yoff)` to `(xlim, ylim)` by
    /// running the forward and backward searches until they overlap.
    fn diag(
        &mut self,
        xoff: isize,
        xlim: isize,
        yoff: isize,
        ylim: isize,
        find_minimal: bool,
    ) -> Partition {
        let (xv, yv, off) = (self.xv, self.yv, self.off);
        let (fd, bd) = (&mut self.fd, &mut self.bd);
        let at = |k: isize| (k + off) as usize;
        let dmin = xoff - ylim;
        let dmax = xlim - yoff;
        let fmid = xoff - yoff;
        let bmid = xlim - ylim;
        let (mut fmin, mut fmax, mut bmin, mut bmax) = (fmid, fmid, bmid, bmid);
        // Whether the searches meet in the forward or the backward half-step depends on the
        // parity of the distance between the two middle diagonals.
        let odd = (fmid - bmid) & 1 != 0;
        fd[at(fmid)] = xoff;
        bd[at(bmid)] = xlim;

        let mut c: isize = 1;
        loop {
            // Extend the forward search by one edit.
            if fmin > dmin {
                fmin -= 1;
                fd[at(fmin - 1)] = -1;
            } else {
                fmin += 1;
            }
            if fmax < dmax {
                fmax += 1;
                fd[at(fmax + 1)] = -1;
            } else {
                fmax -= 1;
            }
            let mut d = fmax;
            while d >= fmin {
                let (tlo, thi) = (fd[at(d - 1)], fd[at(d + 1)]);
                let mut x = if tlo >= thi { tlo + 1 } else { thi };
                let mut y = x - d;
                while x < xlim && y < ylim && xv[x as usize] == yv[y as usize] {
                    x += 1;
                    y += 1;
                }
                fd[at(d)] = x;
                if odd && bmin <= d && d <= bmax && bd[at(d)] <= x {
                    return Partition {
                        xmid: x,
                        ymid: y,
                        lo_minimal: true,
                        hi_minimal: true,
                    };
                }
                d -= 2;
            }

            // Extend the backward search by one edit.
            if bmin > dmin {
                bmin -= 1;
                bd[at(bmin - 1)] = isize::MAX;
            } else {
                bmin += 1;
            }
            if bmax < dmax {
                bmax += 1;
                bd[at(bmax + 1)] = isize::MAX;
            } else {
                bmax -= 1;
            }
            let mut d = bmax;
            while d >= bmin {
                let (tlo, thi) = (bd[at(d - 1)], bd[at(d + 1)]);
                let mut x = if tlo < thi { tlo } else { thi - 1 };
                let mut y = x - d;
                while xoff < x && yoff < y && xv[x as usize - 1] == yv[y as usize - 1] {
                    x -= 1;
                    y -= 1;
                }
                bd[at(d)] = x;
                if !odd && fmin <= d && d <= fmax && x <= fd[at(d)] {
                    return Partition {
                        xmid: x,
                        ymid: y,
                        lo_minimal: true,
                        hi_minimal: true,
                    };
                }
                d -= 2;
            }

            if !find_minimal && c >= self.too_expensive {
                // Give up on minimality: cut at whichever search got furthest from its own
                // corner. The half it covered costs at most `c`, so it is solved minimally.
                let (mut fxybest, mut fxbest) = (-1, 0);
                let mut d = fmax;
                while d >= fmin {
                    let mut x = fd[at(d)].min(xlim);
                    let mut y = x - d;
                    if ylim < y {
                        x = ylim + d;
                        y = ylim;
                    }
                    if fxybest < x + y {
                        fxybest = x + y;
                        fxbest = x;
                    }
                    d -= 2;
                }
                let (mut bxybest, mut bxbest) = (isize::MAX, 0);
                let mut d = bmax;
                while d >= bmin {
                    let mut x = bd[at(d)].max(xoff);
                    let mut y = x - d;
                    if y < yoff {
                        x = yoff + d;
                        y = yoff;
                    }
                    if x + y < bxybest {
                        bxybest = x + y;
                        bxbest = x;
                    }
                    d -= 2;
                }
                return if (xlim + ylim) - bxybest < fxybest - (xoff + yoff) {
                    Partition {
                        xmid: fxbest,
                        ymid: fxybest - fxbest,
                        lo_minimal: true,
                        hi_minimal: false,
                    }
                } else {
                    Partition {
                        xmid: bxbest,
                        ymid: bxybest - bxbest,
                        lo_minimal: false,
                        hi_minimal: true,
                    }
                };
            }
            c += 1;
        }
    }
}

/// Lower bound on the cost cap: ordinary edits of even the largest files stay minimal.
const TOO_EXPENSIVE_MIN: usize = 256;

/// Worst-case search steps we are willing to spend, about a quarter of a second.
const WORK_BUDGET: usize = 1 << 26;

/// Lines of the common prefix and suffix that change groups may slide into (GNU's
/// `horizon_lines`, which defaults to the context size).
const HORIZON: usize = 3;

#[cfg(test)]
mod tests {
    use super::*;

    /// Deterministic xorshift64, so failures reproduce.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            let mut x = self.0;
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            self.0 = x;
            x
        }

        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    /// Applies `ops` to `old`, checking that they cover both sides in order with merged runs,
    /// and returns the resulting text.
    fn apply_ops(old: &[&[u8]], new: &[&[u8]], ops: &[Op]) -> Vec<u8> {
        let mut out = Vec::new();
        let (mut i, mut j) = (0, 0);
        for (k, op) in ops.iter().enumerate() {
            if k > 0 {
                assert_ne!(
                    std::mem::discriminant(&ops[k - 1]),
                    std::mem::discriminant(op),
                    "unmerged ops in {ops:?}"
                );
            }
            match *op {
                Op::Equal {
                    old: o,
                    new: n,
                    len,
                } => {
                    assert!(len > 0 && o == i && n == j, "{op:?} at {i},{j}");
                    assert_eq!(old[o..o + len], new[n..n + len]);
                    old[o..o + len]
                        .iter()
                        .for_each(|l| out.extend_from_slice(l));
                    i += len;
                    j += len;
                }
                Op::Delete { old: o, len } => {
                    assert!(len > 0 && o == i, "{op:?} at {i},{j}");
                    i += len;
                }
                Op::Insert { new: n, len } => {
                    assert!(len > 0 && n == j, "{op:?} at {i},{j}");
                    new[n..n + len]
                        .iter()
                        .for_each(|l| out.extend_from_slice(l));
                    j += len;
                }
            }
        }
        assert_eq!((i, j), (old.len(), new.len()), "ops do not cover the input");
        out
    }

    fn changed_lines(ops: &[Op]) -> usize {
        ops.iter()
            .map(|op| match *op {
                Op::Equal { .. } => 0,
                Op::Delete { len, .. } | Op::Insert { len, .. } => len,
            })
            .sum()
    }

    /// The minimal number of deleted plus inserted lines, by textbook LCS.
    fn minimal_changes(old: &[&[u8]], new: &[&[u8]]) -> usize {
        let m = new.len();
        let mut prev = vec![0usize; m + 1];
        let mut cur = vec![0usize; m + 1];
        for a in old {
            for (j, b) in new.iter().enumerate() {
                cur[j + 1] = if a == b {
                    prev[j] + 1
                } else {
                    prev[j + 1].max(cur[j])
                };
            }
            std::mem::swap(&mut prev, &mut cur);
        }
        old.len() + m - 2 * prev[m]
    }

    /// Applies hunks to `old` the way `patch` would, checking the headers against the lines.
    fn apply_hunks(old: &[u8], hunks: &[Hunk]) -> Vec<u8> {
        let a = lines(old);
        let mut out = Vec::new();
        let (mut i, mut new_lines) = (0, 0);
        for h in hunks {
            let start = if h.old_len == 0 {
                h.old_start
            } else {
                h.old_start - 1
            };
            assert!(start >= i, "hunks out of order");
            a[i..start].iter().for_each(|l| out.extend_from_slice(l));
            new_lines += start - i;
            i = start;
            let new_start = if h.new_len == 0 {
                h.new_start
            } else {
                h.new_start - 1
            };
            assert_eq!(new_start, new_lines, "new_start of {h:?}");
            let (mut olen, mut nlen) = (0, 0);
            for (kind, line) in &h.lines {
                match kind {
                    ' ' | '-' => {
                        assert_eq!(a[i], &line[..]);
                        i += 1;
                        olen += 1;
                    }
                    '+' => {}
                    _ => panic!("bad line kind {kind:?}"),
                }
                if *kind != '-' {
                    out.extend_from_slice(line);
                    nlen += 1;
                }
            }
            assert_eq!((olen, nlen), (h.old_len, h.new_len));
            new_lines += nlen;
        }
        a[i..].iter().for_each(|l| out.extend_from_slice(l));
        out
    }

    /// Applies the text of a unified diff (as printed without color) to `old`, checking that
    /// context and removed lines, terminators included, match `old`.
    fn apply_unified(old: &[u8], diff: &[u8]) -> Vec<u8> {
        if diff.is_empty() {
            return old.to_vec();
        }
        let a = lines(old);
        let d = lines(diff);
        assert!(d[0].starts_with(b"--- ") && d[1].starts_with(b"+++ "));
        // Undo the printing first: the marker takes the newline off the line before it.
        let mut records: Vec<(u8, Vec<u8>)> = Vec::new();
        for line in &d[2..] {
            assert!(line.ends_with(b"\n"), "unterminated diff line {line:?}");
            if line[0] == b'\\' {
                assert_eq!(*line, b"\\ No newline at end of file\n");
                let prev = records.last_mut().expect("marker after a line");
                assert!(prev.0 != b'@' && prev.1.pop() == Some(b'\n'));
            } else {
                records.push((line[0], line[1..].to_vec()));
            }
        }
        let mut out = Vec::new();
        let mut i = 0;
        for (kind, body) in records {
            match kind {
                b'@' => {
                    let text = std::str::from_utf8(&body).unwrap();
                    let range = text.split(' ').nth(1).unwrap().trim_start_matches('-');
                    let mut parts = range.split(',');
                    let start: usize = parts.next().unwrap().parse().unwrap();
                    let len: usize = parts.next().map_or(1, |l| l.parse().unwrap());
                    let start = if len == 0 { start } else { start - 1 };
                    a[i..start].iter().for_each(|l| out.extend_from_slice(l));
                    i = start;
                }
                b' ' => {
                    assert_eq!(a[i], &body[..]);
                    out.extend_from_slice(&body);
                    i += 1;
                }
                b'-' => {
                    assert_eq!(a[i], &body[..]);
                    i += 1;
                }
                b'+' => out.extend_from_slice(&body),
                _ => panic!("bad diff line kind {kind}"),
            }
        }
        a[i..].iter().for_each(|l| out.extend_from_slice(l));
        out
    }

    fn random_text(rng: &mut Rng, max_lines: usize, alphabet: usize) -> Vec<u8> {
        let mut text = Vec::new();
        for _ in 0..rng.below(max_lines + 1) {
            text.extend_from_slice(format!("l{}", rng.below(alphabet)).as_bytes());
            if rng.below(8) == 0 {
                text.push(b'\r');
            }
            text.push(b'\n');
        }
        if !text.is_empty() && rng.below(4) == 0 {
            text.pop();
        }
        text
    }

    /// A copy of `text` with a few random line edits, so inputs resemble real edits rather
    /// than unrelated files.
    fn edited(rng: &mut Rng, text: &[u8], alphabet: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for line in lines(text) {
            match rng.below(6) {
                0 => {}
                1 => {
                    out.extend_from_slice(format!("l{}\n", rng.below(alphabet)).as_bytes());
                    out.extend_from_slice(line);
                }
                2 => out.extend_from_slice(format!("l{}\n", rng.below(alphabet)).as_bytes()),
                _ => out.extend_from_slice(line),
            }
        }
        if rng.below(4) == 0 {
            out.extend_from_slice(b"tail");
        }
        out
    }

    #[test]
    fn splits_lines_keeping_terminators() {
        assert!(lines(b"").is_empty());
        assert_eq!(lines(b"a"), [&b"a"[..]]);
        assert_eq!(lines(b"a\n"), [&b"a\n"[..]]);
        assert_eq!(lines(b"\n\n"), [&b"\n"[..], b"\n"]);
        assert_eq!(lines(b"a\r\nb"), [&b"a\r\n"[..], b"b"]);
        assert_eq!(lines(b"\xff\n\r"), [&b"\xff\n"[..], b"\r"]);
    }

    /// The word-at-a-time search and count agree with a byte loop at every offset, with
    /// bytes that differ from the one sought only in their high bit around it.
    #[test]
    fn bytes_are_found_and_counted_a_word_at_a_time() {
        let hay: Vec<u8> = (0..40u8)
            .map(|i| [b'\n', 0x8a, 0x0b, 0x09, 0xff, 0][usize::from(i) * 7 % 6])
            .collect();
        for start in 0..hay.len() {
            for end in start..=hay.len() {
                let h = &hay[start..end];
                for b in [b'\n', b'\r', 0x8a, 0] {
                    assert_eq!(find_byte(h, b), h.iter().position(|&x| x == b));
                    assert_eq!(count_byte(h, b), h.iter().filter(|&&x| x == b).count());
                }
                // Lines split and found a word at a time agree with a byte loop.
                let ends: Vec<usize> = (0..h.len()).filter(|&k| h[k] == b'\n').collect();
                let starts: Vec<usize> = std::iter::once(0)
                    .chain(ends.iter().map(|k| k + 1))
                    .filter(|&k| k < h.len())
                    .collect();
                let split: Vec<&[u8]> = starts
                    .iter()
                    .enumerate()
                    .map(|(n, &k)| &h[k..starts.get(n + 1).copied().unwrap_or(h.len())])
                    .collect();
                assert_eq!(lines(h), split);
                for n in 0..starts.len() + 3 {
                    let want = starts.get(n).copied().unwrap_or(h.len());
                    assert_eq!(line_start(h, n), want, "line {n} of {h:?}");
                }
            }
        }
    }

    #[test]
    fn equal_inputs() {
        let text = b"a\nb\nc";
        let l = lines(text);
        assert_eq!(
            diff_lines(&l, &l),
            [Op::Equal {
                old: 0,
                new: 0,
                len: 3
            }]
        );
        assert!(diff_lines(&[], &[]).is_empty());
        assert_eq!(stat(text, text), (0, 0));
        assert!(hunks(text, text, 3).is_empty());
        assert!(unified(text, text, "a", "b", false, false, false).is_empty());
        assert!(unified(b"", b"", "a", "b", false, true, false).is_empty());
    }

    #[test]
    fn ops_for_small_edits() {
        let old = lines(b"a\nb\nc\n");
        let cases: [(&[u8], Vec<Op>); 5] = [
            (
                b"x\na\nb\nc\n",
                vec![
                    Op::Insert { new: 0, len: 1 },
                    Op::Equal {
                        old: 0,
                        new: 1,
                        len: 3,
                    },
                ],
            ),
            (
                b"a\nb\nx\ny\nc\n",
                vec![
                    Op::Equal {
                        old: 0,
                        new: 0,
                        len: 2,
                    },
                    Op::Insert { new: 2, len: 2 },
                    Op::Equal {
                        old: 2,
                        new: 4,
                        len: 1,
                    },
                ],
            ),
            (
                b"a\nb\nc\nx\n",
                vec![
                    Op::Equal {
                        old: 0,
                        new: 0,
                        len: 3,
                    },
                    Op::Insert { new: 3, len: 1 },
                ],
            ),
            (
                b"a\nc\n",
                vec![
                    Op::Equal {
                        old: 0,
                        new: 0,
                        len: 1,
                    },
                    Op::Delete { old: 1, len: 1 },
                    Op::Equal {
                        old: 2,
                        new: 1,
                        len: 1,
                    },
                ],
            ),
            (
                b"x\ny\nc\n",
                vec![
                    Op::Delete { old: 0, len: 2 },
                    Op::Insert { new: 0, len: 2 },
                    Op::Equal {
                        old: 2,
                        new: 2,
                        len: 1,
                    },
                ],
            ),
        ];
        for (new, expected) in cases {
            assert_eq!(diff_lines(&old, &lines(new)), expected, "{new:?}");
        }
        assert_eq!(stat(b"a\nb\nc\n", b"x\ny\nc\nz\n"), (3, 2));
        assert_eq!(stat(b"", b"a\nb"), (2, 0));
        assert_eq!(stat(b"a\nb", b""), (0, 2));
    }

    /// Expected outputs produced by GNU diffutils 3.8 `diff -a -u --label a --label b`.
    #[test]
    fn unified_matches_gnu_diff() {
        // (name, old, new, expected)
        type Case = (&'static str, &'static [u8], &'static [u8], &'static [u8]);
        let cases: &[Case] = &[
            (
                "empty_to_text",
                b"",
                b"a\nb\n",
                b"--- a\n+++ b\n@@ -0,0 +1,2 @@\n+a\n+b\n",
            ),
            (
                "text_to_empty",
                b"a\nb\n",
                b"",
                b"--- a\n+++ b\n@@ -1,2 +0,0 @@\n-a\n-b\n",
            ),
            (
                "insert_at_start",
                b"line 1\nline 2\nline 3\nline 4\nline 5\nline 6\nline 7\nline 8\nline 9\nline 10\n",
                b"new\nline 1\nline 2\nline 3\nline 4\nline 5\nline 6\nline 7\nline 8\nline 9\nline 10\n",
                b"--- a\n+++ b\n@@ -1,3 +1,4 @@\n+new\n line 1\n line 2\n line 3\n",
            ),
            (
                "insert_in_middle",
                b"line 1\nline 2\nline 3\nline 4\nline 5\nline 6\nline 7\nline 8\nline 9\nline 10\n",
                b"line 1\nline 2\nline 3\nline 4\nline 5\nnew 1\nnew 2\nline 6\nline 7\nline 8\nline 9\nline 10\n",
                b"--- a\n+++ b\n@@ -3,6 +3,8 @@\n line 3\n line 4\n line 5\n+new 1\n+new 2\n line 6\n line 7\n line 8\n",
            ),
            (
                "insert_at_end",
                b"line 1\nline 2\nline 3\nline 4\nline 5\nline 6\nline 7\nline 8\nline 9\nline 10\n",
                b"line 1\nline 2\nline 3\nline 4\nline 5\nline 6\nline 7\nline 8\nline 9\nline 10\nnew\n",
                b"--- a\n+++ b\n@@ -8,3 +8,4 @@\n line 8\n line 9\n line 10\n+new\n",
            ),
            (
                "delete_in_middle",
                b"line 1\nline 2\nline 3\nline 4\nline 5\nline 6\nline 7\nline 8\nline 9\nline 10\n",
                b"line 1\nline 2\nline 3\nline 4\nline 7\nline 8\nline 9\nline 10\n",
                b"--- a\n+++ b\n@@ -2,8 +2,6 @@\n line 2\n line 3\n line 4\n-line 5\n-line 6\n line 7\n line 8\n line 9\n",
            ),
            (
                "replace_in_middle",
                b"line 1\nline 2\nline 3\nline 4\nline 5\nline 6\nline 7\nline 8\nline 9\nline 10\n",
                b"line 1\nline 2\nline 3\nline 4\nfive\nline 6\nline 7\nline 8\nline 9\nline 10\n",
                b"--- a\n+++ b\n@@ -2,7 +2,7 @@\n line 2\n line 3\n line 4\n-line 5\n+five\n line 6\n line 7\n line 8\n",
            ),
            (
                "separate_hunks",
                b"line 1\nline 2\nline 3\nline 4\nline 5\nline 6\nline 7\nline 8\nline 9\nline 10\nline 11\nline 12\nline 13\nline 14\nline 15\nline 16\nline 17\nline 18\nline 19\nline 20\n",
                b"line 1\ntwo\nline 3\nline 4\nline 5\nline 6\nline 7\nline 8\nline 9\nline 10\nline 11\nline 12\nline 13\nline 14\nline 15\nline 16\nline 17\neighteen\nline 19\nline 20\n",
                b"--- a\n+++ b\n@@ -1,5 +1,5 @@\n line 1\n-line 2\n+two\n line 3\n line 4\n line 5\n@@ -15,6 +15,6 @@\n line 15\n line 16\n line 17\n-line 18\n+eighteen\n line 19\n line 20\n",
            ),
            (
                "hunks_touching_merge",
                b"line 1\nline 2\nline 3\nline 4\nline 5\nline 6\nline 7\nline 8\nline 9\nline 10\nline 11\nline 12\nline 13\nline 14\nline 15\nline 16\nline 17\nline 18\nline 19\nline 20\n",
                b"line 1\nline 2\nthree\nline 4\nline 5\nline 6\nline 7\nline 8\nline 9\nten\nline 11\nline 12\nline 13\nline 14\nline 15\nline 16\nline 17\nline 18\nline 19\nline 20\n",
                b"--- a\n+++ b\n@@ -1,13 +1,13 @@\n line 1\n line 2\n-line 3\n+three\n line 4\n line 5\n line 6\n line 7\n line 8\n line 9\n-line 10\n+ten\n line 11\n line 12\n line 13\n",
            ),
            (
                "hunks_apart_split",
                b"line 1\nline 2\nline 3\nline 4\nline 5\nline 6\nline 7\nline 8\nline 9\nline 10\nline 11\nline 12\nline 13\nline 14\nline 15\nline 16\nline 17\nline 18\nline 19\nline 20\n",
                b"line 1\nline 2\nthree\nline 4\nline 5\nline 6\nline 7\nline 8\nline 9\nline 10\neleven\nline 12\nline 13\nline 14\nline 15\nline 16\nline 17\nline 18\nline 19\nline 20\n",
                b"--- a\n+++ b\n@@ -1,6 +1,6 @@\n line 1\n line 2\n-line 3\n+three\n line 4\n line 5\n line 6\n@@ -8,7 +8,7 @@\n line 8\n line 9\n line 10\n-line 11\n+eleven\n line 12\n line 13\n line 14\n",
            ),
            (
                "no_newline_old",
                b"a\nb\nc",
                b"a\nb\nc\n",
                b"--- a\n+++ b\n@@ -1,3 +1,3 @@\n a\n b\n-c\n\\ No newline at end of file\n+c\n",
            ),
            (
                "no_newline_new",
                b"a\nb\nc\n",
                b"a\nb\nc",
                b"--- a\n+++ b\n@@ -1,3 +1,3 @@\n a\n b\n-c\n+c\n\\ No newline at end of file\n",
            ),
            (
                "no_newline_both",
                b"a\nb",
                b"a\nc",
                b"--- a\n+++ b\n@@ -1,2 +1,2 @@\n a\n-b\n\\ No newline at end of file\n+c\n\\ No newline at end of file\n",
            ),
            (
                "no_newline_context",
                b"a\nb\nc\nd",
                b"x\nb\nc\nd",
                b"--- a\n+++ b\n@@ -1,4 +1,4 @@\n-a\n+x\n b\n c\n d\n\\ No newline at end of file\n",
            ),
            (
                "crlf",
                b"a\r\nb\r\nc\r\n",
                b"a\r\nB\r\nc\r\n",
                b"--- a\n+++ b\n@@ -1,3 +1,3 @@\n a\r\n-b\r\n+B\r\n c\r\n",
            ),
            (
                "crlf_vs_lf",
                b"a\r\nb\r\n",
                b"a\nb\r\n",
                b"--- a\n+++ b\n@@ -1,2 +1,2 @@\n-a\r\n+a\n b\r\n",
            ),
            (
                "non_utf8",
                b"\xff\xfe\n\x00x\nsame\n",
                b"\xff\xfe\n\x80\nsame\n",
                b"--- a\n+++ b\n@@ -1,3 +1,3 @@\n \xff\xfe\n-\x00x\n+\x80\n same\n",
            ),
            (
                "ambiguous_insert",
                b"a\nb\na\nb\n",
                b"a\nb\na\nb\na\nb\n",
                b"--- a\n+++ b\n@@ -2,3 +2,5 @@\n b\n a\n b\n+a\n+b\n",
            ),
        ];
        for &(name, old, new, expected) in cases {
            let got = unified(old, new, "a", "b", false, false, false);
            assert_eq!(
                String::from_utf8_lossy(&got),
                String::from_utf8_lossy(expected),
                "{name}"
            );
            assert_eq!(got, expected, "{name}");
            assert_eq!(apply_unified(old, &got), new, "{name}");
            assert_eq!(apply_hunks(old, &hunks(old, new, 3)), new, "{name}");
        }
    }

    #[test]
    fn hunk_headers_for_empty_ranges() {
        // With no context an insertion names the line it follows, as `diff -U0` does.
        let h = hunks(b"a\nb\nc\n", b"a\nb\nx\nc\n", 0);
        assert_eq!(
            h,
            [Hunk {
                old_start: 2,
                old_len: 0,
                new_start: 3,
                new_len: 1,
                lines: vec![('+', b"x\n".to_vec())],
            }]
        );
        let h = hunks(b"a\nb\nc\n", b"b\nc\n", 0);
        assert_eq!(
            (h[0].old_start, h[0].old_len, h[0].new_start, h[0].new_len),
            (1, 1, 0, 0)
        );
    }

    #[test]
    fn numbered_hunks_end_their_header_in_hunk_k_of_n() {
        let old = b"a\nb\nc\nd\ne\nf\ng\nh\ni\nj\n";
        let new = b"A\nb\nc\nd\ne\nf\ng\nh\ni\nJ\n";
        let got = unified(old, new, "a", "b", false, false, true);
        assert_eq!(
            String::from_utf8(got.clone()).unwrap(),
            "--- a\n+++ b\n@@ -1,4 +1,4 @@ hunk 1/2\n-a\n+A\n b\n c\n d\n@@ -7,4 +7,4 @@ hunk 2/2\n g\n h\n i\n-j\n+J\n"
        );
        assert_eq!(apply_unified(old, &got), new);
    }

    #[test]
    fn colored_output() {
        let got = unified(b"a\nb\nc", b"a\nB\r\nc", "old", "new", false, true, false);
        let expected: &[u8] = b"\x1b[1m--- old\x1b[0m\n\x1b[1m+++ new\x1b[0m\n\
            \x1b[36m@@ -1,3 +1,3 @@\x1b[0m\n a\n\x1b[31m-b\x1b[0m\n\x1b[32m+B\r\x1b[0m\n c\n\
            \\ No newline at end of file\n";
        assert_eq!(
            String::from_utf8_lossy(&got),
            String::from_utf8_lossy(expected)
        );
        let got = unified(b"a", b"b", "old", "new", false, true, false);
        let expected: &[u8] = b"\x1b[1m--- old\x1b[0m\n\x1b[1m+++ new\x1b[0m\n\
            \x1b[36m@@ -1 +1 @@\x1b[0m\n\x1b[31m-a\x1b[0m\n\\ No newline at end of file\n\
            \x1b[32m+b\x1b[0m\n\\ No newline at end of file\n";
        assert_eq!(got, expected);
    }

    #[test]
    fn random_cases_are_correct_and_minimal() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for case in 0..600 {
            let alphabet = [2, 4, 8, 30][case % 4];
            let old = random_text(&mut rng, 30, alphabet);
            let new = if rng.below(3) == 0 {
                random_text(&mut rng, 30, alphabet)
            } else {
                edited(&mut rng, &old, alphabet)
            };
            let (a, b) = (lines(&old), lines(&new));
            let ops = diff_lines(&a, &b);
            assert_eq!(apply_ops(&a, &b, &ops), new, "case {case}");
            let changes = changed_lines(&ops);
            assert_eq!(changes, minimal_changes(&a, &b), "case {case}: {ops:?}");
            let counted = ops.iter().fold((0, 0), |(a, r), op| match *op {
                Op::Equal { .. } => (a, r),
                Op::Delete { len, .. } => (a, r + len),
                Op::Insert { len, .. } => (a + len, r),
            });
            assert_eq!(stat(&old, &new), counted, "case {case}");
            for context in [0, 1, 3] {
                assert_eq!(apply_hunks(&old, &hunks(&old, &new, context)), new);
            }
            assert_eq!(
                apply_unified(&old, &unified(&old, &new, "a", "b", false, false, false)),
                new
            );
        }
    }

    #[test]
    fn cost_cap_fallback_stays_correct() {
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        let mut not_minimal = 0;
        for case in 0..300 {
            let alphabet = [2, 5, 40][case % 3];
            let old = random_text(&mut rng, 60, alphabet);
            let new = if case % 2 == 0 {
                random_text(&mut rng, 60, alphabet)
            } else {
                edited(&mut rng, &old, alphabet)
            };
            let (a, b) = (lines(&old), lines(&new));
            let minimal = minimal_changes(&a, &b);
            for cap in [1, 2, 5] {
                let ops = diff_lines_capped(&a, &b, Some(cap));
                assert_eq!(apply_ops(&a, &b, &ops), new, "case {case} cap {cap}");
                let changes = changed_lines(&ops);
                assert!(changes >= minimal);
                not_minimal += usize::from(changes > minimal);
            }
        }
        assert!(not_minimal > 0, "the fallback was never taken");
    }

    #[test]
    fn large_file_with_scattered_edits() {
        // About 10 MiB: 200,000 lines of 52 bytes.
        const LINES: usize = 200_000;
        let mut rng = Rng(0x1234_5678_9abc_def1);
        let mut old = Vec::with_capacity(LINES * 52);
        for i in 0..LINES {
            old.extend_from_slice(
                format!("{i:>10} the quick brown fox jumps over it\n").as_bytes(),
            );
        }
        let mut new = Vec::with_capacity(old.len() + 10_000);
        let mut edits = 0;
        for (i, line) in lines(&old).into_iter().enumerate() {
            if rng.below(2000) != 0 {
                new.extend_from_slice(line);
                continue;
            }
            edits += 1;
            match rng.below(3) {
                0 => {}
                1 => {
                    new.extend_from_slice(format!("inserted before {i}\n").as_bytes());
                    new.extend_from_slice(line);
                }
                _ => new.extend_from_slice(format!("replaced {i}\n").as_bytes()),
            }
        }
        assert!((50..200).contains(&edits), "{edits} edits");

        let (a, b) = (lines(&old), lines(&new));
        let ops = diff_lines(&a, &b);
        assert_eq!(apply_ops(&a, &b, &ops), new);
        let (added, removed) = stat(&old, &new);
        assert!(
            added + removed <= 2 * edits,
            "+{added} -{removed} for {edits} edits"
        );
        let h = hunks(&old, &new, 3);
        assert_eq!(apply_hunks(&old, &h), new);
        assert_eq!(
            apply_unified(&old, &unified(&old, &new, "a", "b", false, false, false)),
            new
        );
    }

    #[test]
    fn files_are_compared_as_the_cli_reads_them() {
        let lf = b"a\nb\nc\n";
        let r = as_cli_reads(b"a\r\nb\r\nc\r\n".to_vec());
        assert_eq!(
            (r.text.as_slice(), r.crlf_lines, r.lf_lines, r.encoding),
            (&lf[..], 3, 0, None)
        );
        assert!(r.writes_crlf());
        // The BOM stays, as in the CLI's proposal.
        let r = as_cli_reads(b"\xEF\xBB\xBFa\nb\nc\n".to_vec());
        assert_eq!(
            (r.text.as_slice(), r.writes_crlf(), r.encoding),
            (&b"\xEF\xBB\xBFa\nb\nc\n"[..], false, None)
        );
        let utf16: Vec<u8> = [0xFF, 0xFE]
            .into_iter()
            .chain("a\r\nb\r\nc\r\n".encode_utf16().flat_map(u16::to_le_bytes))
            .collect();
        let r = as_cli_reads(utf16);
        assert_eq!(
            (r.text.as_slice(), r.writes_crlf(), r.encoding),
            (&b"\xEF\xBB\xBFa\nb\nc\n"[..], true, Some("UTF-16LE"))
        );
        // Mixed endings: the majority wins, LF on a tie.
        assert!(!as_cli_reads(b"a\r\nb\r\nc\nd\n".to_vec()).writes_crlf());
        assert!(as_cli_reads(b"a\r\nb\r\nc\r\nd\n".to_vec()).writes_crlf());
        // A one-line edit to a CRLF file is one line, not the whole file.
        assert_eq!(
            stat(
                &as_cli_reads(b"a\r\nb\r\nc\r\n".to_vec()).text,
                b"a\nB\nc\n"
            ),
            (1, 1)
        );
        // A lone CR is content, not a line ending.
        assert_eq!(as_cli_reads(b"a\rb\n".to_vec()).text, b"a\rb\n");
        // A stray CR before a CRLF stays; the line still ends in CRLF.
        let r = as_cli_reads(b"a\r\r\nb\n\r".to_vec());
        assert_eq!(
            (r.text.as_slice(), r.crlf_lines, r.lf_lines),
            (&b"a\r\nb\n\r"[..], 1, 1)
        );
        // CRs taken out in place agree with a byte loop, wherever they fall in a word.
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        for _ in 0..500 {
            let bytes: Vec<u8> = (0..rng.below(40))
                .map(|_| [b'a', b'\r', b'\n', b'b'][rng.below(4)])
                .collect();
            let want: Vec<u8> = (0..bytes.len())
                .filter(|&k| !(bytes[k] == b'\r' && bytes.get(k + 1) == Some(&b'\n')))
                .map(|k| bytes[k])
                .collect();
            let crlf = bytes.windows(2).filter(|w| w == b"\r\n").count();
            let r = as_cli_reads(bytes.clone());
            assert_eq!((r.text, r.crlf_lines), (want, crlf), "{bytes:?}");
        }
    }
}
