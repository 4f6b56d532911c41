//! JSON objects built small. serde_json's `json!` expands, at every use, to a map insert per key
//! with the key's allocation and a checked `to_value` of its value: about 130 bytes of binary
//! per key. `obj!` gives the same object from one function, given the keys as one string and
//! the values in a `Vec`: about 50 bytes per key.
//!
//! JSON is parsed with `serde_json::from_slice` (a `&str` as `.as_bytes()`) everywhere:
//! `from_str` would bring a second copy of the parser, about 8 KB.

use std::io::{self, Read};
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

/// `obj!{"key": value, ...}`: the object with these members (a key given twice keeps its last
/// value, as with `json!`). Each value is taken by `Value::from`.
macro_rules! obj {
    ($($k:literal: $v:expr),* $(,)?) => {
        $crate::json::object(concat!($($k, "\n"),*), vec![$(::serde_json::Value::from($v)),*])
    };
}
pub(crate) use obj;

/// The object whose keys are the lines of `keys` and whose values are `values`, in order.
pub fn object(keys: &str, values: Vec<Value>) -> Value {
    let mut map = Map::new();
    for (k, v) in keys.split_terminator('\n').zip(values) {
        map.insert(k.to_string(), v);
    }
    Value::Object(map)
}

/// A path as text. JSON cannot hold bytes that are not UTF-8: such a name (Linux allows it)
/// has them replaced by U+FFFD, where `json!` (serde's `Serialize` for paths) would panic and,
/// with `panic = "abort"`, end serve.
pub fn path(p: &Path) -> Value {
    Value::String(p.to_string_lossy().into_owned())
}

/// Paths as `json!` gives them: an array of their texts.
pub fn paths(ps: &[PathBuf]) -> Value {
    Value::Array(ps.iter().map(|p| path(p)).collect())
}

/// Appends `s` escaped as the inside of a JSON string, as serde_json escapes it, eight bytes
/// at a time: serde_json's loop takes a byte at a time, which is most of the cost of a
/// message carrying a 10 MiB file.
pub fn escape_into(out: &mut String, s: &str) {
    let bytes = s.as_bytes();
    let mut start = 0;
    loop {
        let i = next_special(bytes, start);
        // Cut at an ASCII byte: always a character boundary.
        out.push_str(&s[start..i]);
        let Some(&b) = bytes.get(i) else {
            return;
        };
        let short = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            _ => "",
        };
        if short.is_empty() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.push_str("\\u00");
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 15)]));
        } else {
            out.push_str(short);
        }
        start = i + 1;
    }
}

/// What `read_pruned` keeps of a JSON text, and where it may stop reading.
pub struct Pruning<'a> {
    /// Containers deeper than this are made empty.
    pub depth: usize,
    /// Strings longer than this (in bytes, as written) are made "".
    pub longest: usize,
    /// Reading stops after a string at one of these key paths (an object's member in the
    /// top object), once each key of `first` was met at the top: the text is closed there.
    pub stop_after: &'a [[&'a str; 2]],
    pub first: &'a [&'a str],
}

/// Reads the JSON text `r` gives, up to `limit` bytes, pruned as `p` says as it streams by,
/// eight bytes at a time inside strings (a hook's input holds whole files: a Write's content,
/// the file it replaced, its patch; reading them into memory and parsing them took most of a
/// hook's time). Parse what it returns: this does not check the JSON.
pub fn read_pruned(r: impl Read, limit: u64, p: &Pruning) -> io::Result<Vec<u8>> {
    let (mut s, mut buf) = (Pruner::default(), vec![0u8; 1 << 16]);
    s.cut = usize::MAX;
    let mut r = r.take(limit);
    loop {
        let n = r.read(&mut buf)?;
        if n == 0 || s.feed(&buf[..n], p) {
            return Ok(s.out);
        }
    }
}

#[derive(Default)]
struct Pruner {
    out: Vec<u8>,
    /// In a string: where its text starts in `out` (None when it is left out), whether it is
    /// a key, and whether a `\\` ended the last chunk.
    string: Option<Option<usize>>,
    key: bool,
    escape: bool,
    /// How deep the text is, how deep the container being left out starts, and for each
    /// level kept whether it is an object, and its current key.
    level: usize,
    cut: usize,
    objects: Vec<bool>,
    keys: Vec<Vec<u8>>,
    /// Whether the next string is a key; which keys of `first` were met (a bit each).
    expect_key: bool,
    met: u64,
}

impl Pruner {
    /// Takes in a chunk; true when reading is to stop (the text is closed).
    fn feed(&mut self, t: &[u8], p: &Pruning) -> bool {
        let mut i = 0;
        while i < t.len() {
            let keep = self.level < self.cut;
            let Some(start) = self.string else {
                self.structure(t[i], keep, p.depth);
                i += 1;
                continue;
            };
            // In a string: up to the next quote, backslash or control character.
            let j = if self.escape { i } else { next_special(t, i) };
            let end = match t.get(j) {
                _ if self.escape => j + 1,
                Some(b'\\') => (j + 2).min(t.len()),
                Some(b'"') => {
                    self.string = None;
                    j + 1
                }
                Some(_) => j + 1,
                None => t.len(),
            };
            self.escape = !self.escape && t.get(j) == Some(&b'\\') && j + 1 == t.len();
            let ended = self.string.is_none();
            match (keep, start) {
                (false, _) => {}
                (true, None) if ended => self.out.push(b'"'),
                (true, None) => {}
                (true, Some(start)) => {
                    self.out.extend_from_slice(&t[i..end]);
                    // Its text, not its closing quote.
                    if self.out.len() - start - usize::from(ended) > p.longest {
                        self.out.truncate(start);
                        match ended {
                            false => self.string = Some(None),
                            true => self.out.push(b'"'),
                        }
                    }
                }
            }
            i = end;
            if ended && keep && self.ended_string(start, p) {
                return true;
            }
        }
        false
    }

    /// A byte outside strings.
    fn structure(&mut self, b: u8, keep: bool, depth: usize) {
        match b {
            b'"' => {
                self.string = Some(keep.then_some(self.out.len() + 1));
                self.key = self.expect_key;
            }
            b'{' | b'[' => {
                self.level += 1;
                if self.level > depth && keep {
                    self.cut = self.level;
                    self.out.push(b);
                } else if keep {
                    self.objects.truncate(self.level - 1);
                    self.objects.push(b == b'{');
                    self.expect_key = b == b'{';
                }
            }
            b'}' | b']' => {
                if self.level == self.cut {
                    self.cut = usize::MAX;
                    self.out.push(b);
                }
                self.level = self.level.saturating_sub(1);
                self.expect_key = false;
            }
            b',' if keep => {
                self.expect_key = self.objects.get(self.level.wrapping_sub(1)) == Some(&true)
            }
            b':' => self.expect_key = false,
            _ => {}
        }
        if keep && self.level < self.cut {
            self.out.push(b);
        }
    }

    /// A kept string ended (its text from `start`, None when left out): a key is noted; true
    /// when it is a value that ends reading, the text then closed.
    fn ended_string(&mut self, start: Option<usize>, p: &Pruning) -> bool {
        let text = start
            .map_or(&[][..], |s| &self.out[s..self.out.len() - 1])
            .to_vec();
        let level = self.level;
        if self.key {
            self.keys.resize(level.max(self.keys.len()), Vec::new());
            self.keys.truncate(level);
            if let Some(k) = p.first.iter().position(|k| k.as_bytes() == text)
                && level == 1
            {
                self.met |= 1 << k;
            }
            self.keys[level - 1] = text;
            return false;
        }
        let at = |k: usize| self.keys.get(k).map_or(&[][..], Vec::as_slice);
        let stop = level == 2
            && self.met.count_ones() as usize == p.first.len()
            && p.stop_after
                .iter()
                .any(|[a, b]| at(0) == a.as_bytes() && at(1) == b.as_bytes());
        if stop {
            self.out.extend_from_slice(b"}}");
        }
        stop
    }
}

/// The first control character, '"' or '\\' in `bytes` from `i` on (`bytes.len()` when there
/// is none), found eight bytes at a time: the lowest byte each test flags is a true one.
fn next_special(bytes: &[u8], mut i: usize) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGH;
    while let Some(w) = bytes.get(i..i + 8) {
        let w = u64::from_le_bytes(w.try_into().expect("8 bytes"));
        let flags = (w.wrapping_sub(ONES * 0x20) & !w & HIGH)
            | zero(w ^ (ONES * u64::from(b'"')))
            | zero(w ^ (ONES * u64::from(b'\\')));
        if flags != 0 {
            return i + flags.trailing_zeros() as usize / 8;
        }
        i += 8;
    }
    bytes[i..]
        .iter()
        .position(|&b| b < 0x20 || b == b'"' || b == b'\\')
        .map_or(bytes.len(), |k| i + k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pruning_empties_deep_containers_and_long_strings_and_keeps_the_rest() {
        let text = br#" {"big": "a \" \\ {[ 0123456789abcdef", "n": [1, {"x": "}"}, [], -2.5e3, true, null],
            "tool_input": {"content": "0123456789abcdefghijk", "file_path": "/w/a b\u00e9\"", "d": {"e": [1]}},
            "cwd": "/w/0123456789abcdefg", "e": {}} "#;
        let prune = Pruning {
            depth: 2,
            longest: 20,
            stop_after: &[],
            first: &[],
        };
        let pruned = |chunk: usize| -> Value {
            // Fed `chunk` bytes at a time: a chunk may end anywhere, within an escape too.
            struct Drip<'a>(&'a [u8], usize);
            impl Read for Drip<'_> {
                fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                    let n = self.1.min(self.0.len()).min(buf.len());
                    buf[..n].copy_from_slice(&self.0[..n]);
                    self.0 = &self.0[n..];
                    Ok(n)
                }
            }
            let out = read_pruned(Drip(text, chunk), 1 << 20, &prune).unwrap();
            serde_json::from_slice(&out)
                .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out)))
        };
        let want = serde_json::json!({"big": "", "n": [1, {}, [], -2.5e3, true, null],
            "tool_input": {"content": "", "file_path": "/w/a b\u{e9}\"", "d": {}}, "cwd": "/w/0123456789abcdefg", "e": {}});
        for chunk in 1..=text.len() {
            assert_eq!(pruned(chunk), want, "read {chunk} bytes at a time");
        }
        // Cut at the limit: what was read, pruned.
        let out = read_pruned(&b"{\"a\": \"bcdef\"}"[..], 8, &prune).unwrap();
        assert_eq!(out, b"{\"a\": \"b");
    }

    #[test]
    fn reading_stops_after_the_value_named_once_the_first_keys_were_met() {
        let prune = Pruning {
            depth: 2,
            longest: 100,
            stop_after: &[["tool_input", "file_path"]],
            first: &["session_id", "cwd"],
        };
        let text = br#"{"session_id": "s", "x": {"cwd": 1, "file_path": "no"}, "cwd": "/w",
            "tool_input": {"n": [1], "file_path": "/w/a", "content": "..."}, "tool_use_id": "t"}"#;
        for chunk in [1, 7, text.len()] {
            let mut rest = &text[..];
            let mut drip = |buf: &mut [u8]| {
                let n = chunk.min(rest.len()).min(buf.len());
                buf[..n].copy_from_slice(&rest[..n]);
                rest = &rest[n..];
                n
            };
            struct Drip<'a, F>(&'a mut F);
            impl<F: FnMut(&mut [u8]) -> usize> Read for Drip<'_, F> {
                fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
                    Ok((self.0)(buf))
                }
            }
            let out = read_pruned(Drip(&mut drip), 1 << 20, &prune).unwrap();
            let v: Value = serde_json::from_slice(&out).unwrap();
            assert_eq!(
                v,
                serde_json::json!({"session_id": "s", "x": {"cwd": 1, "file_path": "no"}, "cwd": "/w",
                    "tool_input": {"n": [], "file_path": "/w/a"}})
            );
        }
        // Without every first key met, to the end.
        let late = br#"{"tool_input": {"file_path": "/w/a"}, "session_id": "s", "cwd": "/w"}"#;
        let out = read_pruned(&late[..], 1 << 20, &prune).unwrap();
        assert_eq!(out, &late[..]);
    }

    #[test]
    fn a_path_that_is_not_utf8_is_text_with_replacement_characters() {
        use std::os::unix::ffi::OsStrExt;
        let p = Path::new(std::ffi::OsStr::from_bytes(b"/w/caf\xe9/a b.py"));
        assert_eq!(path(p), Value::from("/w/caf\u{FFFD}/a b.py"));
        assert_eq!(paths(&[PathBuf::from("/x")]), serde_json::json!(["/x"]));
        assert_eq!(
            obj! {"a": 1, "b": "x", "a": 2},
            serde_json::json!({"a": 2, "b": "x"})
        );
    }

    /// Escaped as serde_json escapes, whatever falls at the edges of 8-byte words.
    #[test]
    fn strings_are_escaped_as_serde_json_escapes_them() {
        let pieces = [
            "abcdefgh", "é", "😀", "\"", "\\", "\n", "\r\n", "\t", "\u{8}", "\u{c}", "\u{1}",
            "\u{1f}", "\u{7f}", " ", "/",
        ];
        let mut k = 0x2545_f491_4f6c_dd1d_u64;
        let mut next = || {
            k ^= k << 13;
            k ^= k >> 7;
            k ^= k << 17;
            (k >> 32) as usize
        };
        for _ in 0..2000 {
            let s: String = (0..next() % 13)
                .map(|_| pieces[next() % pieces.len()])
                .collect();
            let mut escaped = String::from("\"");
            escape_into(&mut escaped, &s);
            escaped.push('"');
            assert_eq!(escaped, serde_json::to_string(&s).unwrap(), "{s:?}");
        }
    }
}
