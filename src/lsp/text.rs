//! Positions, once: how LSP's `character` counts (UTF-8, UTF-16 or UTF-32, negotiated at
//! `initialize`; UTF-16 by default and in VS Code, hence in what Claude Code is told), the
//! conversions between those counts on a line, and `Text`, a document that takes LSP's
//! incremental changes in time proportional to the change rather than to the document
//! (ccide-protocol(7) §10).
//!
//! The rules every caller gets: a line past the last is the end of the text; a character past
//! a line's end is that end (before `\n` or `\r\n`); a position inside a character (between the
//! halves of a UTF-16 surrogate pair, or inside a UTF-8 sequence) moves to that character's
//! start, or to its end when it ends a range (`round_up`).

use std::cell::Cell;

use serde_json::Value;

use crate::json::obj;

/// Calls `f` with each position in `v` (an object of `line` and `character`), the file it is
/// in (the nearest `uri` or `targetUri` around it, else `uri`; a call's `fromRanges` are in
/// its `from`'s file, a link's `originSelectionRange` in the request's `asked`) and whether it
/// ends a range.
pub fn each_position(
    v: &mut Value,
    asked: &str,
    uri: &str,
    end: bool,
    f: &mut dyn FnMut(&mut Value, &str, bool),
) {
    match v {
        Value::Array(a) => a
            .iter_mut()
            .for_each(|x| each_position(x, asked, uri, end, f)),
        Value::Object(o)
            if o.len() == 2 && o.contains_key("line") && o.contains_key("character") =>
        {
            f(v, uri, end)
        }
        Value::Object(o) => {
            let own = o.get("uri").or(o.get("targetUri")).and_then(Value::as_str);
            let own = own.unwrap_or(uri).to_string();
            let from = o.get("from").and_then(|f| f["uri"].as_str());
            let from = from.unwrap_or(&own).to_string();
            for (k, x) in o.iter_mut() {
                let file = match k.as_str() {
                    "originSelectionRange" => asked,
                    "fromRanges" => &from,
                    _ => &own,
                };
                each_position(x, asked, file, k == "end", f);
            }
        }
        _ => {}
    }
}

/// How a position's `character` counts.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Enc {
    Utf8,
    Utf16,
    Utf32,
}

impl Enc {
    pub fn name(self) -> &'static str {
        match self {
            Enc::Utf8 => "utf-8",
            Enc::Utf16 => "utf-16",
            Enc::Utf32 => "utf-32",
        }
    }

    pub fn from_name(name: &str) -> Option<Enc> {
        match name {
            "utf-8" => Some(Enc::Utf8),
            "utf-16" => Some(Enc::Utf16),
            "utf-32" => Some(Enc::Utf32),
            _ => None,
        }
    }

    /// A server's choice from a client's `general.positionEncodings`: UTF-16 (the LSP default,
    /// and what VS Code counts, so what Claude Code expects) when offered or when the list is
    /// absent; otherwise the first of UTF-8 and UTF-32 offered. Every client must support
    /// UTF-16, so a list naming nothing known also gets UTF-16.
    pub fn negotiate(offered: &Value) -> Enc {
        let names: Vec<&str> = offered
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if names.contains(&"utf-16") {
            return Enc::Utf16;
        }
        names
            .into_iter()
            .find_map(Enc::from_name)
            .unwrap_or(Enc::Utf16)
    }

    pub fn units(self, c: char) -> u32 {
        match self {
            Enc::Utf8 => c.len_utf8() as u32,
            Enc::Utf16 => c.len_utf16() as u32,
            Enc::Utf32 => 1,
        }
    }
}

/// A position as LSP writes it: 0-based line, and `character` in some `Enc`. The one position
/// type: Claude Code's selections and the control protocol's `select` count UTF-16 units
/// too; what counts otherwise says so (`state::editor::text_between`: Unicode scalars).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Pos {
    pub line: u32,
    pub character: u32,
}

impl Pos {
    pub fn new(line: u32, character: u32) -> Pos {
        Pos { line, character }
    }

    /// `{"line", "character"}`; missing or negative numbers count as 0.
    pub fn from_json(v: &Value) -> Pos {
        let n = |k: &str| v[k].as_u64().unwrap_or(0).min(u32::MAX as u64) as u32;
        Pos::new(n("line"), n("character"))
    }

    pub fn to_json(self) -> Value {
        obj! {"line": self.line, "character": self.character}
    }
}

/// An LSP `Range` as two positions (`end` never before `start`).
pub fn range_from_json(v: &Value) -> (Pos, Pos) {
    let a = Pos::from_json(&v["start"]);
    (a, Pos::from_json(&v["end"]).max(a))
}

pub fn range_to_json(a: Pos, b: Pos) -> Value {
    obj! {"start": a.to_json(), "end": b.to_json()}
}

/// The byte offset in `line` (one line, without its ending) of column `col` counted in `enc`.
pub fn byte_of_column(line: &str, col: u32, enc: Enc, round_up: bool) -> usize {
    let mut units = 0;
    for (i, c) in line.char_indices() {
        if units >= col {
            return i;
        }
        units += enc.units(c);
        if units > col {
            return i + if round_up { c.len_utf8() } else { 0 };
        }
    }
    line.len()
}

/// The column, counted in `enc`, of a byte offset of `line` on a character boundary.
pub fn column_of_byte(line: &str, byte: usize, enc: Enc) -> u32 {
    match enc {
        Enc::Utf8 => byte as u32,
        _ => line[..byte].chars().map(|c| enc.units(c)).sum(),
    }
}

/// A column of `line` counted in `from`, counted in `to`. A column past the line's end keeps
/// its excess, in `to`'s count of nothing (LSP reads it as the end of the line either way).
pub fn convert_column(line: &str, col: u32, from: Enc, to: Enc, round_up: bool) -> u32 {
    if from == to {
        return col;
    }
    let b = byte_of_column(line, col, from, round_up);
    let within = column_of_byte(line, b, to);
    if b == line.len() {
        let past = col.saturating_sub(column_of_byte(line, line.len(), from));
        return within.saturating_add(past);
    }
    within
}

/// The line's text without its ending (`\n`, `\r\n`).
fn strip_ending(l: &str) -> &str {
    let l = l.strip_suffix('\n').unwrap_or(l);
    l.strip_suffix('\r').unwrap_or(l)
}

/// Whole lines, about this many bytes per chunk; a chunk grows to `MAX_CHUNK` before it is
/// split, and one under `MIN_CHUNK` is merged into its neighbour. A line longer than that is a
/// chunk of its own.
const CHUNK: usize = 2048;
const MAX_CHUNK: usize = 4 * CHUNK;
const MIN_CHUNK: usize = CHUNK / 4;

#[derive(Clone, Debug)]
struct Chunk {
    text: String,
    /// How many `\n` it holds.
    newlines: u32,
}

impl Chunk {
    fn new(text: String) -> Chunk {
        Chunk {
            newlines: newlines(&text),
            text,
        }
    }
}

fn newlines(s: &str) -> u32 {
    s.matches('\n').count() as u32
}

/// A document's text as a list of chunks of whole lines: finding a line walks the chunks'
/// line counts, and a change rewrites one chunk (or the few a multi-line change spans), so a
/// didChange of many small changes costs the sum of their sizes, never the document's size
/// each. Every chunk but the last ends with `\n`.
#[derive(Clone, Debug)]
pub struct Text {
    chunks: Vec<Chunk>,
    /// A chunk and the line it starts on, where the last lookup ended. The changes of one
    /// didChange come in document order, so each lookup starts near the last instead of at the
    /// first chunk: finding a line costs the distance from the last change, not the document.
    near: Cell<(usize, u32)>,
}

impl Default for Text {
    fn default() -> Text {
        Text::new(String::new())
    }
}

impl Text {
    pub fn new(s: String) -> Text {
        let mut t = Text {
            chunks: vec![Chunk::new(s)],
            near: Cell::default(),
        };
        t.rebalance(0);
        t
    }

    #[allow(clippy::inherent_to_string)]
    pub fn to_string(&self) -> String {
        let mut s = String::with_capacity(self.len());
        for c in &self.chunks {
            s.push_str(&c.text);
        }
        s
    }

    pub fn len(&self) -> usize {
        self.chunks.iter().map(|c| c.text.len()).sum()
    }

    /// Lines, counting the (possibly empty) one after the last `\n`.
    pub fn line_count(&self) -> u32 {
        self.chunks.iter().map(|c| c.newlines).sum::<u32>() + 1
    }

    pub fn hash(&self) -> u64 {
        let mut h = crate::text::Fnv::default();
        for c in &self.chunks {
            h.write(c.text.as_bytes());
        }
        h.finish()
    }

    /// The line chunk `i` starts on, counted from the last lookup's chunk.
    fn first_line(&self, i: usize) -> u32 {
        let (mut at, mut first) = self.near.get();
        if at >= self.chunks.len() {
            (at, first) = (0, 0);
        }
        while at > i {
            at -= 1;
            first -= self.chunks[at].newlines;
        }
        while at < i {
            first += self.chunks[at].newlines;
            at += 1;
        }
        self.near.set((i, first));
        first
    }

    /// The chunk holding the start of line `n` and that start's byte offset in it; None past
    /// the last line.
    fn locate(&self, n: u32) -> Option<(usize, usize)> {
        let last = self.chunks.len() - 1;
        let (mut i, _) = self.near.get();
        i = i.min(last);
        let mut first = self.first_line(i);
        // Back to a chunk starting at or before line `n` (the first starts at line 0).
        while first > n {
            i -= 1;
            first -= self.chunks[i].newlines;
        }
        // On to the chunk holding its start: every chunk but the last ends with `\n`, so a
        // line starting right after a chunk's last `\n` starts in the next chunk.
        loop {
            let (c, left) = (&self.chunks[i], n - first);
            if left < c.newlines || (i == last && left == c.newlines) {
                self.near.set((i, first));
                if left == 0 {
                    return Some((i, 0));
                }
                // (`match_indices` finds each `\n` with memchr, not byte by byte.)
                let (at, _) = c.text.match_indices('\n').nth(left as usize - 1)?;
                return Some((i, at + 1));
            }
            if i == last {
                return None;
            }
            first += c.newlines;
            i += 1;
        }
    }

    /// Line `n` without its ending; None past the last line.
    pub fn line(&self, n: u32) -> Option<&str> {
        let (i, at) = self.locate(n)?;
        let t = &self.chunks[i].text[at..];
        Some(strip_ending(match t.find('\n') {
            Some(e) => &t[..=e],
            None => t,
        }))
    }

    /// Where a position falls: (chunk, byte in it), with the rules in the module's notes.
    fn place(&self, p: Pos, enc: Enc, round_up: bool) -> (usize, usize) {
        match self.locate(p.line) {
            Some((i, at)) => {
                let line = strip_ending(
                    self.chunks[i].text[at..]
                        .split_inclusive('\n')
                        .next()
                        .unwrap_or(""),
                );
                (i, at + byte_of_column(line, p.character, enc, round_up))
            }
            None => {
                let i = self.chunks.len() - 1;
                (i, self.chunks[i].text.len())
            }
        }
    }

    /// The position `p` (counted in `enc`) falls on, counted in `to`, on a character boundary
    /// within the text.
    pub fn convert(&self, p: Pos, enc: Enc, to: Enc, round_up: bool) -> Pos {
        let (i, b) = self.place(p, enc, round_up);
        self.position_of(i, b, to)
    }

    fn position_of(&self, i: usize, b: usize, enc: Enc) -> Pos {
        let before = self.first_line(i);
        let text = &self.chunks[i].text[..b];
        let line_start = text.rfind('\n').map_or(0, |k| k + 1);
        Pos::new(
            before + newlines(text),
            column_of_byte(&text[line_start..], b - line_start, enc),
        )
    }

    /// The end of the text.
    pub fn end(&self, enc: Enc) -> Pos {
        let i = self.chunks.len() - 1;
        self.position_of(i, self.chunks[i].text.len(), enc)
    }

    /// The text between two positions (the end rounded up, never before the start).
    pub fn slice(&self, a: Pos, b: Pos, enc: Enc) -> String {
        let (ia, oa) = self.place(a, enc, false);
        let (ib, ob) = self.place(b, enc, true).max((ia, oa));
        if ia == ib {
            return self.chunks[ia].text[oa..ob].to_string();
        }
        let mut s = self.chunks[ia].text[oa..].to_string();
        for c in &self.chunks[ia + 1..ib] {
            s.push_str(&c.text);
        }
        s.push_str(&self.chunks[ib].text[..ob]);
        s
    }

    /// Replaces the text between two positions with `new`.
    pub fn replace(&mut self, a: Pos, b: Pos, enc: Enc, new: &str) {
        let (ia, oa) = self.place(a, enc, false);
        let (ib, ob) = self.place(b, enc, true).max((ia, oa));
        // Chunk `ia` keeps the line it starts on whatever the change and the rebalancing do
        // (an emptied chunk is removed, and the next one starts there); the later ones move.
        let first = self.first_line(ia);
        if ia == ib {
            let c = &mut self.chunks[ia];
            c.newlines = c.newlines - newlines(&c.text[oa..ob]) + newlines(new);
            c.text.replace_range(oa..ob, new);
        } else {
            let mut s = String::with_capacity(oa + new.len() + self.chunks[ib].text.len() - ob);
            s.push_str(&self.chunks[ia].text[..oa]);
            s.push_str(new);
            s.push_str(&self.chunks[ib].text[ob..]);
            self.chunks.drain(ia + 1..=ib);
            self.chunks[ia] = Chunk::new(s);
        }
        self.rebalance(ia);
        self.near.set((ia, first));
    }

    /// Applies one `contentChanges` item: with a `range`, replaces that range (counted in
    /// `enc`); without, the whole text. A change without `text` is refused, not taken as empty.
    pub fn apply_change(&mut self, change: &Value, enc: Enc) -> Result<(), String> {
        let Some(new) = change["text"].as_str() else {
            return Err("a content change without \"text\"".into());
        };
        match change.get("range").filter(|r| r.is_object()) {
            Some(r) => {
                let (a, b) = range_from_json(r);
                self.replace(a, b, enc, new);
            }
            None => *self = Text::new(new.to_string()),
        }
        Ok(())
    }

    /// Restores the invariants around chunk `i` after it changed: it ends with `\n` unless it
    /// is the last (else the next is merged into it), it is not tiny unless it is alone, and a
    /// large one is cut at line ends.
    fn rebalance(&mut self, i: usize) {
        let mut i = i.min(self.chunks.len() - 1);
        while i + 1 < self.chunks.len()
            && (!self.chunks[i].text.ends_with('\n') || self.chunks[i].text.len() < MIN_CHUNK)
        {
            let next = self.chunks.remove(i + 1);
            let c = &mut self.chunks[i];
            c.text.push_str(&next.text);
            c.newlines += next.newlines;
            if c.text.len() >= CHUNK && c.text.ends_with('\n') {
                break;
            }
        }
        if self.chunks[i].text.is_empty() && self.chunks.len() > 1 {
            self.chunks.remove(i);
            i = i.saturating_sub(1);
        }
        if self.chunks[i].text.len() > MAX_CHUNK {
            let big = std::mem::take(&mut self.chunks[i].text);
            let mut parts = Vec::new();
            let mut rest = big.as_str();
            while rest.len() > CHUNK {
                // Cut after the first line end past CHUNK bytes (or keep a long line whole).
                let cut = match rest.as_bytes()[CHUNK..].iter().position(|b| *b == b'\n') {
                    Some(k) => CHUNK + k + 1,
                    None => rest.len(),
                };
                parts.push(Chunk::new(rest[..cut].to_string()));
                rest = &rest[cut..];
            }
            if !rest.is_empty() {
                parts.push(Chunk::new(rest.to_string()));
            }
            // Not `splice`: its generic drop is about 700 bytes of binary per item type.
            let tail = self.chunks.split_off(i + 1);
            self.chunks.truncate(i);
            self.chunks.extend(parts);
            self.chunks.extend(tail);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const LINE: &str = "aé世😀b\r\nsecond\nlast";

    fn p(line: u32, character: u32) -> Pos {
        Pos::new(line, character)
    }

    #[test]
    fn columns_count_the_negotiated_units() {
        // a é 世 😀 b: UTF-16 0 1 2 3(+2) 5; UTF-8 0 1(+2) 3(+3) 6(+4) 10; UTF-32 0 1 2 3 4.
        let line = "aé世😀b";
        for (enc, b_at) in [(Enc::Utf16, 5), (Enc::Utf8, 10), (Enc::Utf32, 4)] {
            let b = byte_of_column(line, b_at, enc, false);
            assert_eq!(&line[b..], "b", "{enc:?}");
            assert_eq!(column_of_byte(line, b, enc), b_at);
        }
        assert_eq!(convert_column(line, 5, Enc::Utf16, Enc::Utf32, false), 4);
        assert_eq!(convert_column(line, 4, Enc::Utf32, Enc::Utf16, false), 5);
        assert_eq!(convert_column(line, 10, Enc::Utf8, Enc::Utf16, false), 5);
        // Past the end keeps its excess; inside the surrogate pair rounds as asked.
        assert_eq!(convert_column(line, 9, Enc::Utf16, Enc::Utf8, false), 14);
        assert_eq!(convert_column(line, 4, Enc::Utf16, Enc::Utf32, false), 3);
        assert_eq!(convert_column(line, 4, Enc::Utf16, Enc::Utf32, true), 4);
    }

    /// The column of an error after `é🦀` as each tool counts it, and what VS Code shows.
    #[test]
    fn a_column_after_a_non_bmp_character_is_one_more_in_utf16() {
        let line = r#"s = "é🦀" + foo"#;
        let foo = line.find("foo").unwrap();
        assert_eq!(column_of_byte(line, foo, Enc::Utf32), 11);
        assert_eq!(column_of_byte(line, foo, Enc::Utf16), 12);
        assert_eq!(column_of_byte(line, foo, Enc::Utf8), 15);
    }

    #[test]
    fn positions_in_a_text_clamp_and_round() {
        let t = Text::new(LINE.to_string());
        assert_eq!(t.line_count(), 3);
        assert_eq!(t.line(0), Some("aé世😀b"));
        assert_eq!(t.line(2), Some("last"));
        assert_eq!(t.line(3), None);
        // Inside the surrogate pair: a start rounds down, an end up.
        assert_eq!(t.convert(p(0, 4), Enc::Utf16, Enc::Utf8, false), p(0, 6));
        assert_eq!(t.convert(p(0, 4), Enc::Utf16, Enc::Utf8, true), p(0, 10));
        // Past the line's end: its end, before "\r\n"; past the last line: the text's end.
        assert_eq!(t.convert(p(0, 99), Enc::Utf16, Enc::Utf16, false), p(0, 6));
        assert_eq!(t.convert(p(9, 0), Enc::Utf16, Enc::Utf16, false), p(2, 4));
        assert_eq!(t.end(Enc::Utf16), p(2, 4));
        assert_eq!(t.slice(p(0, 3), p(1, 3), Enc::Utf16), "😀b\r\nsec");
        assert_eq!(t.slice(p(1, 3), p(0, 0), Enc::Utf16), "");
    }

    #[test]
    fn incremental_changes_apply_in_order_and_text_is_required() {
        let mut t = Text::new("héllo\nwörld 😀\n".into());
        let ch = |a: (u32, u32), b: (u32, u32), text: &str| json!({"range": range_to_json(p(a.0, a.1), p(b.0, b.1)), "text": text});
        for c in [
            ch((0, 1), (0, 2), "E"),
            ch((1, 6), (1, 8), "🎉!"),
            ch((2, 0), (2, 0), "new\n"),
        ] {
            t.apply_change(&c, Enc::Utf16).unwrap();
        }
        assert_eq!(t.to_string(), "hEllo\nwörld 🎉!\nnew\n");
        let before = t.to_string();
        for bad in [
            json!({"range": ch((0, 0), (0, 1), "")["range"], "text": null}),
            json!({}),
        ] {
            assert!(t.apply_change(&bad, Enc::Utf16).is_err());
            assert_eq!(t.to_string(), before, "a refused change leaves the text");
        }
        t.apply_change(&json!({"text": "all"}), Enc::Utf16).unwrap();
        assert_eq!(t.to_string(), "all");
    }

    /// Many random edits on a text of many chunks give what the same edits give on a plain
    /// string, and the chunks keep their invariants.
    #[test]
    fn chunked_edits_match_a_plain_string() {
        let mut seed = 0x2545_f491_4f6c_dd1du64;
        let mut rnd = |n: u32| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % u64::from(n.max(1))) as u32
        };
        let base: String = (0..3000)
            .map(|i| format!("line {i} é🦀 {}\n", "x".repeat(i % 50)))
            .collect();
        let mut t = Text::new(base.clone());
        assert!(t.chunks.len() > 10, "a large text is kept in chunks");
        let mut plain = base;
        let pieces = [
            "",
            "a",
            "\n",
            "é🦀\n\n",
            "long line\nand more\nand more again\n",
            "\r\n",
        ];
        for _ in 0..2000 {
            let lines = t.line_count();
            // Mostly short spans, so the text stays large and edits cross chunk ends.
            let l1 = rnd(lines + 1);
            let l2 = l1
                + if rnd(400) == 0 {
                    rnd(lines / 4)
                } else {
                    rnd(3)
                };
            let (a, b) = (p(l1.min(l2), rnd(30)), p(l1.max(l2), rnd(30)));
            let new = pieces[rnd(pieces.len() as u32) as usize];
            // The plain model: byte offsets by the same rules.
            let off = |q: Pos, up: bool| -> usize {
                let mut start = 0;
                for _ in 0..q.line {
                    match plain[start..].find('\n') {
                        Some(k) => start += k + 1,
                        None => return plain.len(),
                    }
                }
                let end = plain[start..].find('\n').map_or(plain.len(), |k| start + k);
                let line = strip_ending(&plain[start..end]);
                start + byte_of_column(line, q.character, Enc::Utf16, up)
            };
            let (x, y) = (off(a, false), off(b, true));
            let y = y.max(x);
            assert_eq!(t.slice(a, b, Enc::Utf16), plain[x..y]);
            plain.replace_range(x..y, new);
            t.replace(a, b, Enc::Utf16, new);
            for (i, c) in t.chunks.iter().enumerate() {
                assert_eq!(c.newlines, newlines(&c.text));
                assert!(i + 1 == t.chunks.len() || c.text.ends_with('\n'));
            }
        }
        assert_eq!(t.to_string(), plain);
        // Still chunked: no chunk grew past the limit (no line here is that long).
        assert!(t.chunks.len() > 1);
        assert!(t.chunks.iter().all(|c| c.text.len() <= MAX_CHUNK));
        assert_eq!(t.hash(), crate::text::hash(plain.as_bytes()));
    }

    #[test]
    fn negotiation_prefers_utf16() {
        assert_eq!(Enc::negotiate(&Value::Null), Enc::Utf16);
        assert_eq!(Enc::negotiate(&json!(["utf-8", "utf-16"])), Enc::Utf16);
        assert_eq!(Enc::negotiate(&json!(["utf-32", "utf-8"])), Enc::Utf32);
        assert_eq!(Enc::negotiate(&json!(["utf-8"])), Enc::Utf8);
        assert_eq!(Enc::negotiate(&json!(["latin-1"])), Enc::Utf16);
    }
}
