//! Positions converted between UTF-16 (what clients, the store and the CLI count) and the
//! encoding the server counts in, for the requests sent on a client's behalf and their answers,
//! and for diagnostics.

use serde_json::Value;

use super::state::{MAX_DOC_BYTES, State};
use crate::lsp::text::{Enc, Pos, Text, convert_column};

/// Converts each position in a request sent on a client's behalf (`to_server`: from UTF-16
/// to the server's encoding) or in its answer (back to UTF-16), `asked` being the uri of the
/// document it is about (ccide-protocol(7) §11.3): by the text the server has of each
/// document named, else the file's (a regular file, bounded), else not at all.
pub(super) fn convert_positions(st: &State, v: &mut Value, asked: &str, to_server: bool) {
    if st.enc == Enc::Utf16 {
        return;
    }
    let (from, to) = match to_server {
        true => (Enc::Utf16, st.enc),
        false => (st.enc, Enc::Utf16),
    };
    let mut seen: Vec<(String, Option<Text>)> = Vec::new();
    crate::lsp::text::each_position(v, asked, asked, false, &mut |p, file, end| {
        if !seen.iter().any(|s| s.0 == file) {
            let path = crate::files::uri_path(file, true);
            let held = path.as_ref().and_then(|p| st.docs.get(p));
            let held = held.or_else(|| st.docs.values().find(|d| d.uri == file));
            let text = match held {
                Some(d) => Some(d.text.clone()),
                None => path
                    .and_then(|p| crate::files::read_regular(&p, MAX_DOC_BYTES).ok())
                    .and_then(|b| String::from_utf8(b).ok()),
            };
            seen.push((file.to_string(), text.map(Text::new)));
        }
        if let Some((_, Some(text))) = seen.iter().find(|s| s.0 == file) {
            *p = text.convert(Pos::from_json(p), from, to, end).to_json();
        }
    });
}

/// Converts the ranges of LSP diagnostics about `text` (the document as sent) from the
/// server's position encoding to UTF-16, what the store and the CLI count.
pub(super) fn to_utf16(items: &mut [Value], text: &str, enc: Enc) {
    if enc == Enc::Utf16 || items.is_empty() {
        return;
    }
    // Lines indexed once: splitting the text for each position would cost the document's size
    // per item, under the state lock.
    let text = Text::new(text.to_string());
    for d in items {
        let Some(r) = d.get_mut("range").filter(|r| r.is_object()) else {
            continue;
        };
        for (k, round_up) in [("start", false), ("end", true)] {
            let p = Pos::from_json(&r[k]);
            if let Some(line) = text.line(p.line) {
                let c = convert_column(line, p.character, enc, Enc::Utf16, round_up);
                r[k]["character"] = c.into();
            }
        }
    }
}
