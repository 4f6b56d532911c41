//! Clients known to break LSP's rules, recognised by what they send in `initialize`, and how
//! their positions are read so that Claude Code gets the selection the user sees. Each quirk
//! was seen with the real client (ccide-protocol(7) §12.1).

use serde_json::{Value, json};

use crate::lsp::text::{Enc, Pos, Text, byte_of_column, column_of_byte, range_from_json};

#[derive(Clone, Copy, Default, Debug, PartialEq, Eq)]
pub struct Quirks {
    /// kakoune-lsp (22.0.0) sends kakoune's selection as it is: its end is the last selected
    /// character (kakoune's selections are inclusive), where LSP's end is the first character
    /// after it, so `print` would arrive as `prin`. A one-character selection, which is how
    /// kakoune shows the cursor, arrives as an empty range.
    pub inclusive_end: bool,
    /// ALE (3.3, 4.0) counts columns in bytes (vim's `col()`), whatever the encoding, and offers
    /// none: `wörld 🦀` selected in `"héllo wörld 🦀"` would arrive as `örld 🦀"`.
    pub byte_columns: bool,
}

/// The quirks of the client that sent these `initialize` params.
pub fn recognise(params: &Value) -> Quirks {
    let name = params["clientInfo"]["name"].as_str().unwrap_or("");
    Quirks {
        inclusive_end: matches!(name, "kakoune-lsp" | "kak-lsp"),
        byte_columns: params["clientInfo"].is_null() && is_ale(&params["capabilities"]),
    }
}

/// ALE sends no `clientInfo`; what tells it apart is its fixed capabilities, which no other
/// client sends: code action kinds offered as an empty list, and workspace folders refused.
fn is_ale(caps: &Value) -> bool {
    let kinds = &caps["textDocument"]["codeAction"]["codeActionLiteralSupport"]["codeActionKind"];
    kinds["valueSet"] == json!([]) && caps["workspace"]["workspaceFolders"] == false
}

impl Quirks {
    /// How the client's columns count, given what was negotiated.
    pub fn columns(self, negotiated: Enc) -> Enc {
        if self.byte_columns {
            Enc::Utf8
        } else {
            negotiated
        }
    }

    /// The range the client means, as LSP counts (end exclusive), in the same encoding.
    pub fn range(self, doc: &Text, range: &Value, enc: Enc) -> Value {
        if !self.inclusive_end {
            return range.clone();
        }
        let (a, b) = range_from_json(range);
        let (a, b) = (
            doc.convert(a, enc, enc, false),
            doc.convert(b, enc, enc, true),
        );
        // Empty: kakoune's cursor, which stays a cursor.
        if b <= a {
            return range.clone();
        }
        let line = doc.line(b.line).unwrap_or("");
        let at = byte_of_column(line, b.character, enc, false);
        let end = match line[at..].chars().next() {
            Some(c) => Pos::new(b.line, column_of_byte(line, at + c.len_utf8(), enc)),
            // On the line's end: its newline is taken in, unless the document ends there.
            None if b.line + 1 < doc.line_count() => Pos::new(b.line + 1, 0),
            None => return range.clone(),
        };
        let mut r = range.clone();
        r["end"] = end.to_json();
        r
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "def greet():\n    print(\"héllo wörld 🦀\")\n";

    fn range(l1: usize, c1: usize, l2: usize, c2: usize) -> Value {
        json!({"start": {"line": l1, "character": c1}, "end": {"line": l2, "character": c2}})
    }

    fn doc() -> Text {
        Text::new(DOC.to_string())
    }

    fn text_of(q: Quirks, r: &Value, enc: Enc) -> String {
        let (a, b) = range_from_json(&q.range(&doc(), r, enc));
        doc().slice(a, b, enc)
    }

    /// What kakoune-lsp 22.0.0 sent in `initialize` (its capabilities cut to what matters).
    fn kakoune_lsp() -> Value {
        json!({"clientInfo": {"name": "kakoune-lsp", "version": "22.0.0"},
            "capabilities": {"general": {"positionEncodings": ["utf-8", "utf-16"]}}})
    }

    /// What ALE 3.3 sent in `initialize`, whole but for `textDocument`'s other entries.
    fn ale() -> Value {
        json!({"processId": 1, "rootPath": "/w", "rootUri": "file:///w", "initializationOptions": {},
            "capabilities": {
                "workspace": {"applyEdit": false, "didChangeConfiguration": {"dynamicRegistration": false},
                    "symbol": {"dynamicRegistration": false}, "workspaceFolders": false, "configuration": false},
                "textDocument": {"codeAction": {"dynamicRegistration": false,
                    "codeActionLiteralSupport": {"codeActionKind": {"valueSet": []}}}}}})
    }

    #[test]
    fn clients_are_recognised_by_what_they_send() {
        let kak = recognise(&kakoune_lsp());
        assert_eq!(
            kak,
            Quirks {
                inclusive_end: true,
                byte_columns: false
            }
        );
        let mut old = kakoune_lsp();
        old["clientInfo"]["name"] = "kak-lsp".into();
        assert!(recognise(&old).inclusive_end);
        assert_eq!(
            recognise(&ale()),
            Quirks {
                inclusive_end: false,
                byte_columns: true
            }
        );
        // Another client with ALE's capabilities but a name is not ALE; nor is neovim.
        let mut named = ale();
        named["clientInfo"] = json!({"name": "Neovim", "version": "0.7.2"});
        assert_eq!(recognise(&named), Quirks::default());
        let nvim = json!({"clientInfo": {"name": "Neovim"}, "capabilities": {"textDocument": {"codeAction": {
            "codeActionLiteralSupport": {"codeActionKind": {"valueSet": ["", "quickfix"]}}}}, "workspace": {"workspaceFolders": true}}});
        assert_eq!(recognise(&nvim), Quirks::default());
        assert_eq!(recognise(&json!({})), Quirks::default());
    }

    #[test]
    fn kakoune_lsps_inclusive_end_takes_in_the_last_character() {
        let q = recognise(&kakoune_lsp());
        // `print` selected: kakoune-lsp ends the range on the `t`.
        assert_eq!(text_of(q, &range(1, 4, 1, 8), Enc::Utf16), "print");
        assert_eq!(
            text_of(Quirks::default(), &range(1, 4, 1, 8), Enc::Utf16),
            "prin"
        );
        // Ending on the crab (UTF-16 column 23, two units) or on an accented letter, counted
        // in either encoding kakoune-lsp offers.
        assert_eq!(
            text_of(q, &range(1, 11, 1, 23), Enc::Utf16),
            "héllo wörld 🦀"
        );
        assert_eq!(text_of(q, &range(1, 11, 1, 12), Enc::Utf16), "hé");
        assert_eq!(
            text_of(q, &range(1, 11, 1, 25), Enc::Utf8),
            "héllo wörld 🦀"
        );
        assert_eq!(text_of(q, &range(1, 11, 1, 12), Enc::Utf8), "hé");
        // A whole line (`x`) ends on its newline, which is taken in: the range ends on the
        // next line's start.
        let line = q.range(&doc(), &range(1, 0, 1, 27), Enc::Utf16);
        assert_eq!(line["end"], json!({"line": 2, "character": 0}));
        // The cursor stays a cursor; the end of the document stays where it is.
        assert_eq!(
            q.range(&doc(), &range(1, 6, 1, 6), Enc::Utf16),
            range(1, 6, 1, 6)
        );
        let end = range(0, 0, 2, 0);
        assert_eq!(q.range(&doc(), &end, Enc::Utf16), end);
    }

    #[test]
    fn ales_byte_columns_are_read_as_bytes() {
        let q = recognise(&ale());
        assert_eq!(q.columns(Enc::Utf16), Enc::Utf8);
        assert_eq!(Quirks::default().columns(Enc::Utf16), Enc::Utf16);
        // `wörld 🦀` as ALE sends it: from byte 18 (vim's column 19) to 26, vim's column of
        // the crab's first byte (its inclusive end, taken as LSP's exclusive one).
        let r = range(1, 18, 1, 26);
        assert_eq!(q.range(&doc(), &r, q.columns(Enc::Utf16)), r);
        assert_eq!(text_of(q, &r, Enc::Utf8), "wörld 🦀");
        assert_eq!(text_of(q, &r, Enc::Utf16), "örld 🦀\"");
    }
}
