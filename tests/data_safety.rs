//! Nothing silently puts a file's bytes at risk: an empty `ccide buffer` input is refused
//! unless asked for (saveDocument would write it over the file), and `ccide diff show` of a
//! file that is not UTF-8 says that accepting rewrites its bytes.

use crate::util::*;
use serde_json::json;

#[test]
fn an_empty_buffer_is_refused_unless_allowed() {
    let sb = Sandbox::new();
    let app = sb.write("app.py", "keep me\n");
    let srv = sb.serve(&[]);
    let mut c = srv.client();
    let o = sb.run_stdin(&["buffer", "app.py"], b"");
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("standard input is empty")
            && err.contains("app.py")
            && err.contains("--allow-empty"),
        "{err}"
    );
    // Nor is input that is not UTF-8: said, and nothing stored.
    let o = sb.run_stdin(&["buffer", "app.py"], b"keep \xff\n");
    assert_eq!(o.status.code(), Some(1));
    assert_eq!(
        stderr(&o),
        "ccide: cannot read standard input as UTF-8 text: stream did not contain valid UTF-8\n"
    );
    // Nothing was stored: saveDocument has nothing to write over the file.
    assert_eq!(sb.status()["documents"], json!([]));
    let v = json_text(&c.call("saveDocument", json!({"filePath": s(&app)})));
    assert_eq!(v["success"], false, "{v}");
    assert_eq!(std::fs::read_to_string(&app).unwrap(), "keep me\n");
    // Asked for, it is stored.
    let o = sb.run_stdin(&["buffer", "--allow-empty", "app.py"], b"");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        sb.status()["documents"],
        json!([{"path": s(&app), "bytes": 0}])
    );
    // The help says so.
    let help = stdout(&sb.run_ok(&["buffer", "--help"]));
    assert!(help.contains("--allow-empty"), "{help}");
}

/// The CLI reads a file that is not UTF-8 with U+FFFD in place of its invalid bytes, and
/// writes its proposal so on accept: `diff show` says that those bytes are rewritten, in its
/// text and in --json, and says nothing of the kind for a UTF-8 file.
#[test]
fn diff_show_says_accepting_rewrites_the_bytes_of_a_file_that_is_not_utf8() {
    let sb = Sandbox::new();
    let latin1 = sb.write("latin1.txt", b"caf\xe9\nsecond\nthird \xff\n");
    let utf8 = sb.write("utf8.txt", "café\nsecond\n");
    let srv = sb.serve(&[]);
    let mut c = srv.client();
    open_diff(
        &mut c,
        &latin1,
        "caf\u{FFFD}\nSECOND\nthird \u{FFFD}\n",
        "latin1",
    );
    open_diff(&mut c, &utf8, "café\nSECOND\n", "utf8");
    wait_pending(&sb, 2);
    let o = sb.run_ok(&["diff", "show", "latin1.txt"]);
    let first = stdout(&o).lines().next().unwrap_or("").to_string();
    assert_eq!(
        first,
        "note: the file is not UTF-8 (2 lines, the first line 1): Claude Code read its invalid bytes as U+FFFD (\u{FFFD}) and accepting writes the proposal as UTF-8, so those bytes are replaced by U+FFFD even where the edit changes nothing; reject it if they matter"
    );
    let shown: serde_json::Value =
        serde_json::from_slice(&sb.run_ok(&["diff", "show", "latin1.txt", "--json"]).stdout)
            .unwrap();
    assert_eq!(
        shown["not_utf8"],
        json!({"lines": 2, "first_line": 1, "accept_rewrites_bytes": true})
    );
    let o = sb.run_ok(&["diff", "show", "utf8.txt"]);
    assert!(stdout(&o).starts_with("--- a/utf8.txt\n"), "{}", stdout(&o));
    let shown: serde_json::Value =
        serde_json::from_slice(&sb.run_ok(&["diff", "show", "utf8.txt", "--json"]).stdout).unwrap();
    assert_eq!(shown["not_utf8"], serde_json::Value::Null);
}
