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
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGH: u64 = 0x8080_8080_8080_8080;
    // Whether any of 8 bytes is a control character, '"' or '\\' (exact: no false alarms).
    let special = |w: u64| {
        let zero = |v: u64| v.wrapping_sub(ONES) & !v & HIGH;
        (w.wrapping_sub(ONES * 0x20) & !w & HIGH)
            | zero(w ^ (ONES * u64::from(b'"')))
            | zero(w ^ (ONES * u64::from(b'\\')))
    };
    let bytes = s.as_bytes();
    let (mut start, mut i) = (0, 0);
    while i < bytes.len() {
        if let Some(w) = bytes.get(i..i + 8)
            && special(u64::from_le_bytes(w.try_into().expect("8 bytes"))) == 0
        {
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
}
