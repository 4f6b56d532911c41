//! The document mirror: the text of each document the editor opened, as the editor has it,
//! kept in step with its changes (each costs the size of the change, not of the document),
//! and what a range of it means for Claude Code: the selection (UTF-16 positions, as VS Code
//! counts), the lines of a mention, and where a stored diagnostic falls in the editor's count.

use std::path::PathBuf;
use std::time::Instant;

use serde_json::Value;

use crate::json::obj;
use crate::lsp::text::{Enc, Pos, Text, range_from_json, range_to_json};

pub struct Doc {
    pub uri: String,
    pub path: PathBuf,
    pub text: Text,
    /// Hash of the content on disk as the editor last saw it (None: no such file yet).
    pub saved: Option<u64>,
    /// The server it belongs to (an index into the loop's links).
    pub link: Option<usize>,
    /// When the unsaved content is due to be pushed.
    pub push: Option<Instant>,
    /// Whether the server holds unsaved content for it.
    pub pushed: bool,
    /// The range of the last code action request (the editor's selection then).
    pub range: Value,
    /// The diagnostics last published for it (`--diagnostics`).
    pub published: Value,
    /// The pending hunks' hint diagnostics last published for it (ccide-protocol(7) §12):
    /// the editor's alone, never the server's.
    pub hints: Vec<Value>,
}

impl Doc {
    pub fn new(uri: &str, path: PathBuf, text: String) -> Doc {
        Doc {
            uri: uri.to_string(),
            saved: std::fs::read(&path).ok().map(|b| crate::text::hash(&b)),
            path,
            text: Text::new(text),
            link: None,
            push: None,
            pushed: false,
            range: Value::Null,
            published: Value::Null,
            hints: Vec::new(),
        }
    }

    /// Applies a didChange's `contentChanges` in order, or none of them: one without `text`
    /// would otherwise empty the document, and the server would be told the file is empty.
    pub fn change(&mut self, changes: &Value, enc: Enc) -> Result<(), String> {
        let changes = changes.as_array().map(Vec::as_slice).unwrap_or_default();
        if let Some(k) = changes.iter().position(|c| !c["text"].is_string()) {
            return Err(format!(
                "change {} of {} to {} has no \"text\"; the document is kept as it was before this didChange (reopen it if the editor's copy differs now)",
                k + 1,
                changes.len(),
                self.path.display()
            ));
        }
        for c in changes {
            self.text.apply_change(c, enc)?;
        }
        Ok(())
    }

    /// Whether the editor's text is unsaved content: it differs from what the editor opened or
    /// last saved, and from the file on disk now. An editor that reloaded a file Claude Code
    /// wrote holds the file's text without having saved it: that is clean, as in VS Code. The
    /// file is read only when its size is the text's.
    pub fn is_dirty(&mut self) -> bool {
        let h = self.text.hash();
        if self.saved == Some(h) {
            return false;
        }
        let len = self.text.len() as u64;
        let on_disk = crate::files::stamp(&self.path)
            .filter(|s| s.len == len)
            .and_then(|_| crate::files::read_regular(&self.path, len).ok())
            .map(|b| crate::text::hash(&b));
        if on_disk == Some(h) {
            self.saved = on_disk;
            return false;
        }
        true
    }

    /// The selection a range makes: its start and end counted in UTF-16 units, and its text
    /// (the start rounded down, the end up, never before the start).
    pub fn selection(&self, range: &Value, enc: Enc) -> (Pos, Pos, String) {
        let (a, b) = range_from_json(range);
        let start = self.text.convert(a, enc, Enc::Utf16, false);
        let end = self.text.convert(b, enc, Enc::Utf16, true).max(start);
        (start, end, self.text.slice(a, b, enc))
    }

    /// The lines (from 1) a range covers, None when it is empty. A range ending at the start
    /// of a line (a linewise selection) does not include that line.
    pub fn lines(&self, range: &Value, enc: Enc) -> Option<(usize, usize)> {
        let (a, b) = range_from_json(range);
        let a = self.text.convert(a, enc, enc, false);
        let b = self.text.convert(b, enc, enc, true);
        if b <= a {
            return None;
        }
        let end = if b.character == 0 && b.line > a.line {
            b.line - 1
        } else {
            b.line
        };
        Some((a.line as usize + 1, end as usize + 1))
    }

    /// The edit (`range`, `newText`) that makes the document `new`: the whole text replaced, so
    /// that applying it to an editor that has already reloaded the file gives the same text,
    /// except for the line break both end with. An editor whose buffer always ends in a line
    /// break (kakoune) reads a range ending after it as reaching past the buffer, and doubles
    /// it: the replaced buffer gains an empty last line and differs from the file.
    pub fn replacement(&self, new: &str, enc: Enc) -> Value {
        let old_end = self.text.end(enc);
        let last = old_end
            .line
            .checked_sub(1)
            .filter(|_| old_end.character == 0)
            .and_then(|l| Some((l, self.text.line(l)?)));
        if let Some((l, line)) = last {
            // The ending the text has after its last line: "\n" or "\r\n".
            let tail = self.text.slice(Pos::new(l, 0), old_end, enc);
            let ending = &tail[line.len()..];
            if let Some(kept) = new.strip_suffix(ending) {
                let end = Pos::new(l, crate::lsp::text::column_of_byte(line, line.len(), enc));
                return obj! {"range": range_to_json(Pos::default(), end), "newText": kept};
            }
        }
        obj! {"range": range_to_json(Pos::default(), old_end), "newText": new}
    }

    /// What the editor is to show: the server's diagnostics last published, and the hints.
    pub fn shown(&self) -> Value {
        let mut all = self.published.as_array().cloned().unwrap_or_default();
        all.extend(self.hints.iter().cloned());
        all.into()
    }

    /// Diagnostics as the store has them (columns in UTF-16 units, what the CLI is sent) as
    /// the editor reads them: columns in its encoding, severities as numbers.
    pub fn diagnostics(&self, stored: &Value, enc: Enc) -> Value {
        let at = |p: &Value| {
            self.text
                .convert(Pos::from_json(p), Enc::Utf16, enc, false)
                .to_json()
        };
        stored
            .as_array()
            .into_iter()
            .flatten()
            .map(|w| {
                let mut x = w.clone();
                let r = &w["range"];
                x["range"] = obj! {"start": at(&r["start"]), "end": at(&r["end"])};
                let sev = ["Error", "Warning", "Info"]
                    .iter()
                    .position(|s| w["severity"] == *s);
                x["severity"] = (sev.unwrap_or(3) + 1).into();
                x
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn range(l1: u32, c1: u32, l2: u32, c2: u32) -> Value {
        range_to_json(Pos::new(l1, c1), Pos::new(l2, c2))
    }

    fn doc(text: &str) -> Doc {
        Doc::new("file:///nowhere/a.py", "/nowhere/a.py".into(), text.into())
    }

    /// `é世😀x` selected, counted by an editor in each encoding: the same UTF-16 selection.
    #[test]
    fn a_selection_is_counted_in_utf16_whatever_the_editor_counts() {
        let d = doc("def f():\n    s = \"é世😀x\"  # 😀\n");
        for (enc, end) in [(Enc::Utf16, 14), (Enc::Utf8, 19), (Enc::Utf32, 13)] {
            let (a, b, text) = d.selection(&range(1, 9, 1, end), enc);
            assert_eq!((a, b), (Pos::new(1, 9), Pos::new(1, 14)), "{enc:?}");
            assert_eq!(text, "é世😀x");
        }
        // neovim 0.7 ends a range between the halves of the emoji: it is taken in.
        let (_, b, text) = d.selection(&range(1, 9, 1, 12), Enc::Utf16);
        assert_eq!((b, text.as_str()), (Pos::new(1, 13), "é世😀"));
        // Backwards and past the end: empty at the start; clamped to the line's end.
        assert_eq!(
            d.selection(&range(1, 5, 0, 0), Enc::Utf16),
            (Pos::new(1, 5), Pos::new(1, 5), String::new())
        );
        assert_eq!(d.selection(&range(0, 4, 0, 99), Enc::Utf16).2, "f():");
    }

    #[test]
    fn a_mention_takes_the_lines_a_range_covers() {
        let d = doc("a\nb\nc\n");
        assert_eq!(d.lines(&range(0, 0, 0, 1), Enc::Utf16), Some((1, 1)));
        // Linewise: lines 2 and 3, the range ending at the start of line 4.
        assert_eq!(d.lines(&range(1, 0, 3, 0), Enc::Utf16), Some((2, 3)));
        assert_eq!(d.lines(&range(1, 0, 2, 1), Enc::Utf16), Some((2, 3)));
        assert_eq!(d.lines(&range(2, 1, 2, 1), Enc::Utf16), None);
        // Past the end of a line is its end: nothing more.
        assert_eq!(d.lines(&range(0, 1, 0, 5), Enc::Utf16), None);
    }

    /// A change without text is refused whole: the changes before it are not applied either.
    #[test]
    fn a_change_without_text_leaves_the_document_as_it_was() {
        let mut d = doc("one\ntwo\n");
        let good = json!({"range": range(0, 0, 0, 3), "text": "ONE"});
        for bad in [
            json!({"range": range(1, 0, 1, 3), "text": null}),
            json!({"range": range(1, 0, 1, 3)}),
            json!({}),
        ] {
            let e = d.change(&json!([good, bad]), Enc::Utf16).unwrap_err();
            assert!(
                e.starts_with("change 2 of 2 to /nowhere/a.py has no \"text\""),
                "{e}"
            );
            assert_eq!(d.text.to_string(), "one\ntwo\n");
        }
        d.change(&json!([good, {"text": "all\n"}]), Enc::Utf16)
            .unwrap();
        assert_eq!(d.text.to_string(), "all\n");
    }

    /// Claude Code wrote the file: the replacement keeps the line break both texts end with (a
    /// range past it reaches beyond a kakoune buffer), and replaces everything when they do
    /// not both end with the same one.
    #[test]
    fn the_replacement_of_a_written_file_stops_before_the_last_line_break() {
        let edit = |old: &str, new: &str, enc| doc(old).replacement(new, enc);
        assert_eq!(
            edit("print('old')\n", "print('wörld')\nx\n", Enc::Utf16),
            json!({"range": range(0, 0, 0, 12), "newText": "print('wörld')\nx"})
        );
        // The last line's end counted in the editor's units: `é😀` is 3, 6 or 2 of them.
        for (enc, end) in [(Enc::Utf16, 3), (Enc::Utf8, 6), (Enc::Utf32, 2)] {
            assert_eq!(
                edit("a\né😀\r\n", "b\r\n", enc),
                json!({"range": range(0, 0, 1, end), "newText": "b"}),
                "{enc:?}"
            );
        }
        for (old, new, end) in [
            ("a\n", "b", range(0, 0, 1, 0)),
            ("a", "b\n", range(0, 0, 0, 1)),
            ("a\r\n", "b\n", range(0, 0, 1, 0)),
            ("", "b\n", range(0, 0, 0, 0)),
        ] {
            assert_eq!(
                edit(old, new, Enc::Utf16),
                json!({"range": end, "newText": new}),
                "{old:?}"
            );
        }
    }

    /// A buffer holding what the file holds now is clean, though the editor never saved it (it
    /// reloaded what Claude Code wrote); one holding what the editor opened is clean too.
    #[test]
    fn a_buffer_equal_to_the_file_on_disk_is_clean() {
        let dir = std::env::temp_dir().join(format!("ccide-docs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("a.py");
        std::fs::write(&path, "old\n").unwrap();
        let mut d = Doc::new("file:///a.py", path.clone(), "old\n".into());
        assert!(!d.is_dirty());
        std::fs::write(&path, "new\n").unwrap();
        assert!(!d.is_dirty(), "what the editor opened");
        d.text = Text::new("new\n".into());
        assert!(!d.is_dirty(), "what the file holds now");
        d.text = Text::new("neu\n".into());
        assert!(d.is_dirty(), "same size, other text");
        d.text = Text::new("new\n\n".into());
        assert!(d.is_dirty());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// The store counts UTF-16 units; an error on `foo` after `é🦀` is at 12, which is 15 in
    /// UTF-8 and 11 in UTF-32.
    #[test]
    fn stored_diagnostics_are_counted_in_the_editors_encoding() {
        let d = doc("s = \"é🦀\" + foo\n");
        let stored = json!([{"message": "undefined name `foo`", "severity": "Error", "source": "ruff",
            "range": {"start": {"line": 0, "character": 12}, "end": {"line": 0, "character": 15}}}]);
        for (enc, start, end) in [
            (Enc::Utf16, 12, 15),
            (Enc::Utf8, 15, 18),
            (Enc::Utf32, 11, 14),
        ] {
            assert_eq!(
                d.diagnostics(&stored, enc),
                json!([{"message": "undefined name `foo`", "severity": 1, "source": "ruff",
                    "range": range(0, start, 0, end)}]),
                "{enc:?}"
            );
        }
    }
}
