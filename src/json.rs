//! JSON objects built small. serde_json's `json!` expands, at every use, to a map insert per key
//! with the key's allocation and a checked `to_value` of its value: about 130 bytes of binary
//! per key. `obj!` gives the same object from one function, given the keys as one string and
//! the values in a `Vec`: about 50 bytes per key.
//!
//! JSON is parsed with `serde_json::from_slice` (a `&str` as `.as_bytes()`) everywhere:
//! `from_str` would bring a second copy of the parser, about 8 KB.

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
