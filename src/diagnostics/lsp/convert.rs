//! Between the language servers' wire forms and ccide's: `file:` URIs, positions, severities.
//!
//! Positions: LSP counts a line's characters in UTF-16 code units unless the server agreed to
//! another encoding; ccide's store counts Unicode scalar values (as `editor::text_between` does
//! for selections, and as the CLI's own Read tool shows text), so a column after an emoji is
//! one less here than on the wire, and a column after `é` the same.

use std::path::Path;

use serde_json::Value;

use crate::diagnostics::parse::{Diagnostic, Severity};

/// LSP `DiagnosticSeverity` 1–4. Absent (or out of range) counts as an error, as VS Code
/// shows it.
pub fn severity(v: &Value) -> Severity {
    match v.as_u64() {
        Some(2) => Severity::Warning,
        Some(3) => Severity::Info,
        Some(4) => Severity::Hint,
        _ => Severity::Error,
    }
}

/// The scalar-value column of a UTF-16 column in `line`. A column past the end keeps its
/// excess (LSP allows that for "end of line"); one inside a surrogate pair rounds down.
pub fn utf16_to_scalar(line: &str, col: u32) -> u32 {
    let mut units = 0u32;
    for (n, c) in line.chars().enumerate() {
        units += c.len_utf16() as u32;
        if units > col {
            return n as u32;
        }
    }
    let chars = line.chars().count() as u32;
    chars.saturating_add(col - units.min(col))
}

/// Converts a list of LSP diagnostics about `text` (the document as sent to the server) into
/// the store's form. `utf16` is false when the server agreed to count in scalar values.
pub fn diagnostics(
    items: &[Value],
    path: &Path,
    text: &str,
    utf16: bool,
    default_source: &str,
) -> Vec<Diagnostic> {
    // Line starts are needed only when some column may differ between the two counts.
    let starts: Vec<usize> = if utf16 && !text.is_ascii() {
        std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect()
    } else {
        Vec::new()
    };
    let line_of = |n: u32| -> Option<&str> {
        let start = *starts.get(n as usize)?;
        let end = starts.get(n as usize + 1).map_or(text.len(), |e| e - 1);
        let l = &text[start..end];
        Some(l.strip_suffix('\r').unwrap_or(l))
    };
    let pos = |p: &Value| -> (u32, u32) {
        let num = |k: &str| p[k].as_u64().unwrap_or(0).min(u32::MAX as u64) as u32;
        let (line, col) = (num("line"), num("character"));
        match line_of(line) {
            Some(l) => (line, utf16_to_scalar(l, col)),
            None => (line, col),
        }
    };
    let mut out = Vec::with_capacity(items.len());
    for d in items {
        let Some(message) = d["message"].as_str() else {
            continue;
        };
        let (start_line, start_char) = pos(&d["range"]["start"]);
        let (end_line, end_char) = pos(&d["range"]["end"]);
        let (end_line, end_char) = (end_line, end_char).max((start_line, start_char));
        out.push(Diagnostic {
            path: path.to_path_buf(),
            start_line,
            start_char,
            end_line,
            end_char,
            severity: severity(&d["severity"]),
            message: message.to_string(),
            source: d["source"]
                .as_str()
                .filter(|s| !s.is_empty())
                .unwrap_or(default_source)
                .to_string(),
            code: match &d["code"] {
                Value::String(s) => Some(s.clone()),
                Value::Number(n) => Some(n.to_string()),
                _ => None,
            },
        });
    }
    out
}

/// A tsserver protocol diagnostic (1-based line and UTF-16 offset, `category`) as the LSP
/// diagnostic typescript-language-server would publish for it (its `toDiagnostic`).
pub fn from_tsserver(d: &Value) -> Value {
    let pos = |p: &Value| {
        let n = |k: &str| p[k].as_u64().unwrap_or(1).saturating_sub(1);
        serde_json::json!({"line": n("line"), "character": n("offset")})
    };
    let severity = match d["category"].as_str() {
        Some("warning") => 2,
        Some("suggestion") => 4,
        _ => 1,
    };
    serde_json::json!({
        "range": {"start": pos(&d["start"]), "end": pos(&d["end"])},
        "message": d["text"],
        "severity": severity,
        "code": d["code"],
        "source": d["source"].as_str().unwrap_or("typescript"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn utf16_columns_become_scalar_counts() {
        assert_eq!(utf16_to_scalar("abc", 2), 2);
        // é is one unit and one scalar; 🦀 is two units (a surrogate pair) and one scalar.
        assert_eq!(utf16_to_scalar("é🦀x", 1), 1);
        assert_eq!(utf16_to_scalar("é🦀x", 3), 2);
        assert_eq!(utf16_to_scalar("é🦀x", 4), 3);
        assert_eq!(utf16_to_scalar("é🦀x", 2), 1, "inside the pair rounds down");
        assert_eq!(utf16_to_scalar("🦀", 7), 6, "past the end keeps the excess");
        assert_eq!(utf16_to_scalar("", 0), 0);
    }

    #[test]
    fn diagnostics_convert_positions_severity_code_and_source() {
        let text = "ok\r\nlet 🦀 = é + y;\nlast";
        let items = [
            json!({"range": {"start": {"line": 1, "character": 13}, "end": {"line": 1, "character": 14}},
                   "severity": 1, "message": "y undefined", "code": 2304, "source": "ts"}),
            json!({"range": {"start": {"line": 1, "character": 4}, "end": {"line": 1, "character": 6}},
                   "severity": 4, "message": "unused", "code": "reportUnused"}),
            json!({"range": {"start": {"line": 9, "character": 3}, "end": {"line": 9, "character": 1}},
                   "message": "beyond the text"}),
            json!({"range": {}, "severity": 2}),
        ];
        let p = Path::new("/w/a.ts");
        let got = diagnostics(&items, p, text, true, "prog");
        assert_eq!(got.len(), 3, "an item without a message is skipped");
        assert_eq!(
            (got[0].start_line, got[0].start_char, got[0].end_char),
            (1, 12, 13)
        );
        assert_eq!(got[0].severity, Severity::Error);
        assert_eq!(
            (got[0].code.as_deref(), got[0].source.as_str()),
            (Some("2304"), "ts")
        );
        assert_eq!((got[1].start_char, got[1].end_char), (4, 5));
        assert_eq!(got[1].severity, Severity::Hint);
        assert_eq!(got[1].source, "prog");
        assert_eq!(
            (got[2].start_line, got[2].start_char, got[2].end_char),
            (9, 3, 3),
            "unknown line: columns kept, end never before start"
        );
        assert_eq!(got[2].severity, Severity::Error);
        // Scalar-counting servers: columns pass through.
        let got = diagnostics(&items[..1], p, text, false, "prog");
        assert_eq!(got[0].start_char, 13);
    }

    #[test]
    fn tsserver_diagnostics_read_as_typescript_language_server_publishes_them() {
        let d = json!({"start": {"line": 2, "offset": 30}, "end": {"line": 2, "offset": 31},
                       "text": "Type 'string' is not assignable to type 'number'.",
                       "code": 2322, "category": "error"});
        assert_eq!(
            from_tsserver(&d),
            json!({"range": {"start": {"line": 1, "character": 29}, "end": {"line": 1, "character": 30}},
                   "message": "Type 'string' is not assignable to type 'number'.",
                   "severity": 1, "code": 2322, "source": "typescript"})
        );
        let s =
            from_tsserver(&json!({"category": "suggestion", "text": "unused", "source": "eslint"}));
        assert_eq!(
            (&s["severity"], &s["source"]),
            (&json!(4), &json!("eslint"))
        );
    }

    #[test]
    fn severities() {
        let s: Vec<_> = [
            json!(1),
            json!(2),
            json!(3),
            json!(4),
            json!(0),
            json!(null),
        ]
        .iter()
        .map(severity)
        .collect();
        use Severity::*;
        assert_eq!(s, [Error, Warning, Info, Hint, Error, Error]);
    }
}
