//! JSON objects built small. serde_json's `json!` expands, at every use, to a map insert per key
//! with the key's allocation and a checked `to_value` of its value: about 130 bytes of binary
//! per key. `obj!` gives the same object from one function, given the keys as one string and
//! the values in a `Vec`: about 50 bytes per key.

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
    let (mut start, mut i) = (0, 0);
    while i < bytes.len() {
        if plain_word(bytes, i) {
            i += 8;
            continue;
        }
        let b = bytes[i];
        let short = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\n' => "\\n",
            b'\r' => "\\r",
            b'\t' => "\\t",
            0x08 => "\\b",
            0x0c => "\\f",
            0..0x20 => "",
            _ => {
                i += 1;
                continue;
            }
        };
        // Cut at an ASCII byte: always a character boundary.
        out.push_str(&s[start..i]);
        if short.is_empty() {
            const HEX: &[u8; 16] = b"0123456789abcdef";
            out.push_str("\\u00");
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 15)]));
        } else {
            out.push_str(short);
        }
        i += 1;
        start = i;
    }
    out.push_str(&s[start..]);
}

/// Whether the 8 bytes at `i` are all there and none is a control character, '"' or '\\' (an
/// exact test: no false alarms).
fn plain_word(bytes: &[u8], i: usize) -> bool {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    let Some(w) = bytes.get(i..i + 8) else {
        return false;
    };
    let w = u64::from_le_bytes(w.try_into().expect("8 bytes"));
    let zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGH;
    (w.wrapping_sub(ONES * 0x20) & !w & HIGH)
        | zero(w ^ (ONES * u64::from(b'"')))
        | zero(w ^ (ONES * u64::from(b'\\')))
        == 0
}

/// The JSON string whose text `bytes` starts with (after its opening quote), eight bytes at a
/// time, and how many bytes it took with its closing quote. None for what is not text and the
/// short escapes `escape_into` writes (`\uXXXX`, a raw control character, bytes that are not
/// UTF-8, no closing quote): serde_json is left to read or refuse those.
pub fn unescape(bytes: &[u8]) -> Option<(String, usize)> {
    let mut out = Vec::new();
    let (mut start, mut i) = (0, 0);
    loop {
        if plain_word(bytes, i) {
            i += 8;
            continue;
        }
        match *bytes.get(i)? {
            b'"' => {
                out.extend_from_slice(&bytes[start..i]);
                return Some((String::from_utf8(out).ok()?, i + 1));
            }
            b'\\' => {
                out.extend_from_slice(&bytes[start..i]);
                out.push(match *bytes.get(i + 1)? {
                    b'n' => b'\n',
                    b't' => b'\t',
                    b'r' => b'\r',
                    b'b' => 0x08,
                    b'f' => 0x0c,
                    c @ (b'"' | b'\\' | b'/') => c,
                    _ => return None,
                });
                i += 2;
                start = i;
            }
            0..0x20 => return None,
            _ => i += 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// What `escape_into` writes reads back as serde_json reads it, whatever falls at the
    /// edges of 8-byte words; what it leaves to serde_json is None.
    #[test]
    fn strings_are_escaped_and_read_back_as_serde_json_does() {
        let pieces = [
            "abcdefgh", "é", "😀", "\"", "\\", "\n", "\r\n", "\t", "\u{8}", "\u{c}", "/",
        ];
        let mut k = 7usize;
        for _ in 0..400 {
            let mut s = String::new();
            for _ in 0..k % 13 {
                k = k
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407)
                    >> 7;
                s.push_str(pieces[k % pieces.len()]);
            }
            let mut escaped = String::new();
            escape_into(&mut escaped, &s);
            let quoted = serde_json::to_string(&s).unwrap();
            assert_eq!(escaped, quoted[1..quoted.len() - 1]);
            let quoted = format!("{escaped}\",\"x\":1}}");
            assert_eq!(unescape(quoted.as_bytes()), Some((s, escaped.len() + 1)));
        }
        assert_eq!(unescape(b"a\\/b\"").unwrap().0, "a/b");
        for other in [
            &b"\\u0041\""[..],
            b"\x01\"",
            b"\xff\"",
            b"abc",
            b"ab\\",
            b"\\q\"",
        ] {
            assert_eq!(unescape(other), None, "{other:?}");
        }
    }
}
