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
