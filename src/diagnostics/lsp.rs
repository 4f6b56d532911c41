//! A language server's final result (LSP diagnostics, positions in UTF-16) in the store's
//! form. The store counts columns in UTF-16 code units, as VS Code does and so as the CLI
//! expects (ccide-protocol(7) §10), so positions pass through as the server gave them.

use std::path::Path;

use serde_json::Value;

use crate::diagnostics::parse::{Diagnostic, Severity};
use crate::lsp::text::range_from_json;

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

/// The diagnostics of `items` (a server's, about `path`); `default_source` names those that
/// name no source (the server).
pub fn diagnostics(items: &[Value], path: &Path, default_source: &str) -> Vec<Diagnostic> {
    let mut out = Vec::with_capacity(items.len());
    for d in items {
        let Some(message) = d["message"].as_str() else {
            continue;
        };
        let (start, end) = range_from_json(&d["range"]);
        out.push(Diagnostic {
            path: path.to_path_buf(),
            start_line: start.line,
            start_char: start.character,
            end_line: end.line,
            end_char: end.character,
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

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn diagnostics_keep_utf16_positions_and_convert_severity_code_and_source() {
        let items = [
            json!({"range": {"start": {"line": 1, "character": 13}, "end": {"line": 1, "character": 14}},
                   "severity": 1, "message": "y undefined", "code": 2304, "source": "ts"}),
            json!({"range": {"start": {"line": 1, "character": 4}, "end": {"line": 1, "character": 6}},
                   "severity": 4, "message": "unused", "code": "reportUnused"}),
            json!({"range": {"start": {"line": 9, "character": 3}, "end": {"line": 9, "character": 1}},
                   "message": "end before start"}),
            json!({"range": {}, "severity": 2}),
        ];
        let p = Path::new("/w/a.ts");
        let got = diagnostics(&items, p, "prog");
        assert_eq!(got.len(), 3, "an item without a message is skipped");
        assert_eq!(
            (got[0].start_line, got[0].start_char, got[0].end_char),
            (1, 13, 14),
            "UTF-16 columns pass through"
        );
        assert_eq!(got[0].severity, Severity::Error);
        assert_eq!(
            (got[0].code.as_deref(), got[0].source.as_str()),
            (Some("2304"), "ts")
        );
        assert_eq!((got[1].start_char, got[1].end_char), (4, 6));
        assert_eq!(got[1].severity, Severity::Hint);
        assert_eq!(got[1].source, "prog");
        assert_eq!(
            (got[2].start_line, got[2].start_char, got[2].end_char),
            (9, 3, 3),
            "the end is never before the start"
        );
        assert_eq!(got[2].severity, Severity::Error);
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
