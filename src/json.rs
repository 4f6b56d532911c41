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

/// A path as `json!` gives it: its text (a path that is not UTF-8 fails as serde's does).
pub fn path(p: &Path) -> Value {
    serde_json::to_value(p).unwrap()
}

/// Paths as `json!` gives them: an array of their texts.
pub fn paths(ps: &[PathBuf]) -> Value {
    Value::Array(ps.iter().map(|p| path(p)).collect())
}
