//! The text arithmetic of `ccide lsp`, without sockets: positions in the encoding negotiated
//! with the editor (LSP counts UTF-16 code units unless told otherwise), incremental changes,
//! and `file://` URIs, which editors percent-encode (ccide's own wire paths are raw).

use serde_json::Value;

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

    /// From the client's `general.positionEncodings`: UTF-16 (the LSP default, and what VS Code
    /// counts, so what Claude Code expects) when offered or when the list is absent; otherwise
    /// the first of UTF-8 and UTF-32 offered. Every client must support UTF-16, so a list
    /// naming nothing we know also gets UTF-16.
    pub fn negotiate(offered: &Value) -> Enc {
        let names: Vec<&str> = offered
            .as_array()
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default();
        if names.contains(&"utf-16") {
            return Enc::Utf16;
        }
        for n in names {
            match n {
                "utf-8" => return Enc::Utf8,
                "utf-32" => return Enc::Utf32,
                _ => {}
            }
        }
        Enc::Utf16
    }

    fn units(self, c: char) -> usize {
        match self {
            Enc::Utf8 => c.len_utf8(),
            Enc::Utf16 => c.len_utf16(),
            Enc::Utf32 => 1,
        }
    }
}

/// Byte offsets of the start of line `n` and of its end (before `\n` or `\r\n`); a line past
/// the last one is the end of the text.
fn line_span(text: &str, n: usize) -> (usize, usize) {
    let mut start = 0;
    for _ in 0..n {
        match text[start..].find('\n') {
            Some(i) => start += i + 1,
            None => return (text.len(), text.len()),
        }
    }
    let end = text[start..].find('\n').map_or(text.len(), |i| start + i);
    let end = if text[..end].ends_with('\r') && end > start {
        end - 1
    } else {
        end
    };
    (start, end)
}

/// The byte offset of an LSP position. A character past the line's end means the line's end
/// (the LSP rule). A position inside a character (between the two halves of a UTF-16
/// surrogate pair, as neovim 0.7's range end after an emoji) moves to that character's end
/// when `round_up` (an end), else to its start.
pub fn offset(text: &str, line: usize, character: usize, enc: Enc, round_up: bool) -> usize {
    let (start, end) = line_span(text, line);
    let mut units = 0;
    for (i, c) in text[start..end].char_indices() {
        if units >= character {
            return start + i;
        }
        units += enc.units(c);
        if units > character {
            return start + i + if round_up { c.len_utf8() } else { 0 };
        }
    }
    end
}

/// The position (line, character) of a byte offset on a character boundary.
pub fn position(text: &str, byte: usize, enc: Enc) -> (usize, usize) {
    let before = &text[..byte];
    let line_start = before.rfind('\n').map_or(0, |i| i + 1);
    let line = before.matches('\n').count();
    (
        line,
        before[line_start..].chars().map(|c| enc.units(c)).sum(),
    )
}

/// The byte range of an LSP `Range` (start rounded down, end up, never before start).
pub fn span(text: &str, range: &Value, enc: Enc) -> (usize, usize) {
    let at = |p: &Value, up| {
        let n = |k: &str| p[k].as_u64().unwrap_or(0) as usize;
        offset(text, n("line"), n("character"), enc, up)
    };
    let a = at(&range["start"], false);
    (a, at(&range["end"], true).max(a))
}

/// Applies one `contentChanges` item: with a range, replaces that range; without, the text.
pub fn apply_change(text: &mut String, change: &Value, enc: Enc) {
    let new = change["text"].as_str().unwrap_or("");
    if change.get("range").is_some_and(|r| r.is_object()) {
        let (a, b) = span(text, &change["range"], enc);
        text.replace_range(a..b, new);
    } else {
        *text = new.to_string();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const LINE: &str = "aé世😀b\r\nsecond\nlast";

    #[test]
    fn positions_count_the_negotiated_units() {
        // a é 世 😀 b: UTF-16 0 1 2 3(+2) 5; UTF-8 0 1(+2) 3(+3) 6(+4) 10; UTF-32 0 1 2 3 4.
        for (enc, b_at) in [(Enc::Utf16, 5), (Enc::Utf8, 10), (Enc::Utf32, 4)] {
            let b = offset(LINE, 0, b_at, enc, false);
            assert_eq!(&LINE[b..b + 1], "b", "{enc:?}");
            assert_eq!(position(LINE, b, enc), (0, b_at));
        }
        assert_eq!(
            position(LINE, LINE.find("last").unwrap(), Enc::Utf16),
            (2, 0)
        );
    }

    #[test]
    fn out_of_range_and_mid_character_positions_clamp() {
        let emoji = LINE.find('😀').unwrap();
        // Inside the surrogate pair: an end includes the emoji, a start does not.
        assert_eq!(offset(LINE, 0, 4, Enc::Utf16, true), emoji + 4);
        assert_eq!(offset(LINE, 0, 4, Enc::Utf16, false), emoji);
        // Past the line's end: the end, before "\r\n"; past the last line: the text's end.
        assert_eq!(
            offset(LINE, 0, 99, Enc::Utf16, true),
            LINE.find('\r').unwrap()
        );
        assert_eq!(offset(LINE, 9, 0, Enc::Utf16, false), LINE.len());
        let r = json!({"start": {"line": 1, "character": 3}, "end": {"line": 0, "character": 0}});
        let (a, b) = span(LINE, &r, Enc::Utf16);
        assert_eq!(a, b);
    }

    #[test]
    fn incremental_changes_apply_in_order() {
        let mut t = String::from("héllo\nwörld 😀\n");
        for c in [
            json!({"range": {"start": {"line": 0, "character": 1}, "end": {"line": 0, "character": 2}}, "text": "E"}),
            json!({"range": {"start": {"line": 1, "character": 6}, "end": {"line": 1, "character": 8}}, "text": "🎉!"}),
            json!({"range": {"start": {"line": 2, "character": 0}, "end": {"line": 2, "character": 0}}, "text": "new\n"}),
        ] {
            apply_change(&mut t, &c, Enc::Utf16);
        }
        assert_eq!(t, "hEllo\nwörld 🎉!\nnew\n");
        apply_change(&mut t, &json!({"text": "all"}), Enc::Utf16);
        assert_eq!(t, "all");
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
