//! getDiagnostics from the store, fed by `ccide diagnostics import`.

use crate::util::*;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::path::Path;

#[test]
fn the_answer_echoes_the_requested_uri_exactly_even_when_empty() {
    let sb = Sandbox::new();
    let file = sb.write("my dir/ä ö.py", "x = 1\n");
    let s = sb.serve(&["--no-default-checkers"]);
    let mut c = s.client();
    let uri = format!("file://{}", file.display());
    assert_eq!(
        diagnostics(&mut c, json!({"uri": uri})),
        json!([{"uri": uri, "diagnostics": []}])
    );
    assert_eq!(diagnostics(&mut c, json!({})), json!([]));
    assert!(c.tool_names().iter().any(|t| t == "getDiagnostics"));
}

#[test]
fn imported_compiler_lines_are_answered_zero_based_and_broadcast() {
    let sb = Sandbox::new();
    let file = sb.write("src/my app.py", "import os\nprint(undefined)\n");
    let s = sb.serve(&["--no-default-checkers"]);
    let mut c = s.ready_client();
    let lines = "src/my app.py:2:7: error: Name \"undefined\" is not defined  [name-defined]\n";
    let o = sb.run_stdin(
        &["diagnostics", "import", "--format", "compiler"],
        lines.as_bytes(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let uri = format!("file://{}", file.display());
    let expected = json!([{"uri": uri, "diagnostics": [{
        "message": "Name \"undefined\" is not defined",
        "severity": "Error",
        "range": {"start": {"line": 1, "character": 6}, "end": {"line": 1, "character": 6}},
        "source": "import",
        "code": "name-defined",
    }]}]);
    let n = c.notification("diagnostics_changed");
    assert_eq!(n["params"], expected[0]);
    assert_eq!(diagnostics(&mut c, json!({"uri": uri})), expected);
    assert_eq!(diagnostics(&mut c, json!({})), expected);
    let o = sb.run(&["diagnostics"]);
    assert_eq!(
        stdout(&o),
        format!(
            "{}:2:7: error: Name \"undefined\" is not defined (import) [name-defined]\n",
            file.display()
        )
    );
    // A protocol-format import naming the file with no diagnostics means "now clean".
    let clean = json!([{"uri": uri, "diagnostics": []}]).to_string();
    assert!(
        sb.run_stdin(&["diagnostics", "import"], clean.as_bytes())
            .status
            .success()
    );
    assert_eq!(
        diagnostics(&mut c, json!({"uri": uri})),
        json!([{"uri": uri, "diagnostics": []}])
    );
}

#[test]
fn sarif_and_cargo_imports_from_real_tools() {
    let sb = Sandbox::new();
    let ws = sb.ws();
    let sarif = include_str!("fixtures/diagnostics/ruff.sarif")
        .replace("/work/sample", ws.to_str().unwrap());
    sb.write("py/app.py", "");
    let s = sb.serve(&["--no-default-checkers"]);
    let mut c = s.client();
    let o = sb.run_stdin(&["diagnostics", "import"], sarif.as_bytes());
    assert!(o.status.success(), "{}", stderr(&o));
    let all = diagnostics(&mut c, json!({}));
    let app = all
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["uri"] == format!("file://{}/py/app.py", ws.display()))
        .expect("app.py diagnostics");
    let first = &app["diagnostics"][0];
    assert_eq!(first["source"], "ruff");
    assert!(["Error", "Warning"].contains(&first["severity"].as_str().unwrap()));
    let cargo = include_str!("fixtures/diagnostics/cargo-check.jsonl");
    let o = sb.run_stdin(
        &["diagnostics", "import", "--format", "cargo"],
        cargo.as_bytes(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let lib = format!("file://{}/src/lib.rs", ws.display());
    let d = diagnostics(&mut c, json!({"uri": lib}));
    assert!(!d[0]["diagnostics"].as_array().unwrap().is_empty(), "{d}");
    assert!(
        d[0]["diagnostics"]
            .as_array()
            .unwrap()
            .iter()
            .all(|x| x["source"] == "rustc" || x["source"] == "clippy")
    );
}

#[test]
fn outside_files_are_ignored_and_the_store_survives_a_restart() {
    let sb = Sandbox::new();
    let file = sb.write("a.c", "int main(){}\n");
    let mut s = sb.serve(&["--no-default-checkers"]);
    let text = format!(
        "{}:1:1: warning: w1 [-Wx]\n/etc/passwd:1:1: error: nope\n",
        file.display()
    );
    let o = sb.run_stdin(&["diagnostics", "import"], text.as_bytes());
    assert!(
        stderr(&o).contains("ignored 1 outside the workspace"),
        "{}",
        stderr(&o)
    );
    s.stop_with("TERM");
    let s = sb.serve(&["--no-default-checkers"]);
    let mut c = s.client();
    let uri = format!("file://{}", file.display());
    let d = diagnostics(&mut c, json!({"uri": uri}));
    assert_eq!(d[0]["diagnostics"][0]["message"], "w1");
    assert_eq!(d[0]["diagnostics"][0]["severity"], "Warning");
    assert!(sb.run(&["diagnostics", "clear"]).status.success());
    assert_eq!(diagnostics(&mut c, json!({})), json!([]));
    let o = sb.run_stdin(&["diagnostics", "import", "--format", "xml"], b"");
    assert_eq!(o.status.code(), Some(2));
}

/// Messages and file names from a report are shown escaped, one line per diagnostic (raw, their
/// ESC, BEL and newlines could forge lines on the terminal); as JSON they stay exact.
#[test]
fn the_list_shows_control_characters_escaped_one_line_per_diagnostic() {
    let sb = Sandbox::new();
    let file = sb.write("bad\u{1b}[31mname\nforged.py", "x = 1\n");
    let srv = sb.serve(&["--no-default-checkers"]);
    let report = json!([{"uri": s(&file), "diagnostics": [{
        "message": "evil\u{1b}[2J\u{7}\nforged.py:1:1: error: fake",
        "severity": "Error",
        "range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 1}},
        "source": "ruff\r",
    }]}]);
    let o = sb.run_stdin(
        &["diagnostics", "import", "--format", "protocol"],
        report.to_string().as_bytes(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let o = sb.run(&["diagnostics"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        format!(
            "{}/bad\\u{{1b}}[31mname\\nforged.py:1:1: error: evil\\u{{1b}}[2J\\u{{7}}\\nforged.py:1:1: error: fake (ruff\\r)\n",
            sb.ws().display()
        )
    );
    let o = sb.run(&["diagnostics", "--json"]);
    let listed: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let mut c = srv.client();
    assert_eq!(listed, diagnostics(&mut c, json!({})));
    assert_eq!(
        listed[0]["diagnostics"][0]["message"],
        report[0]["diagnostics"][0]["message"]
    );
}

/// Every import format, on the sample of the `columns-*` fixtures (an error after `é🦀`, one
/// on a line indented by a tab): each tool counts columns its own way, getDiagnostics
/// answers in UTF-16 code units, as VS Code counts them, with the tool's range where it
/// gives one.
#[test]
fn imports_of_every_format_reach_get_diagnostics_at_utf16_columns() {
    let sb = Sandbox::new();
    let ws = sb.ws();
    let py = sb.write(
        "uni/columns.py",
        include_str!("fixtures/diagnostics/columns/columns.py"),
    );
    let c_file = sb.write(
        "uni/columns.c",
        include_str!("fixtures/diagnostics/columns/columns.c"),
    );
    let rs = sb.write(
        "src/lib.rs",
        include_str!("fixtures/diagnostics/columns/lib.rs"),
    );
    let s = sb.serve(&["--no-default-checkers"]);
    let mut c = s.client();
    let mut import = |format: &str, text: &str, file: &Path| -> Vec<Value> {
        let text = text
            .replace("/work/sample/cols", ws.to_str().unwrap())
            .replace("/work/sample", ws.to_str().unwrap());
        let o = sb.run_stdin(
            &["diagnostics", "import", "--format", format],
            text.as_bytes(),
        );
        assert!(o.status.success(), "{}", stderr(&o));
        let d = diagnostics(&mut c, json!({"uri": format!("file://{}", file.display())}));
        d[0]["diagnostics"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| {
                let r = &d["range"];
                json!([
                    r["start"]["line"],
                    r["start"]["character"],
                    r["end"]["line"],
                    r["end"]["character"]
                ])
            })
            .collect()
    };
    let fixture = |name: &str| {
        std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/diagnostics")
                .join(name),
        )
        .unwrap()
    };
    // ruff counts characters from 1: `foo` at 12, which VS Code puts at 12 from 0.
    assert_eq!(
        import("ruff", &fixture("columns-ruff-concise.txt"), &py),
        [json!([0, 12, 0, 12]), json!([2, 13, 2, 13])]
    );
    let ranged = [json!([0, 12, 0, 15]), json!([2, 13, 2, 16])];
    assert_eq!(import("auto", &fixture("columns-ruff.json"), &py), ranged);
    // SARIF without columnKind (ruff's) counts code points; with it, what it says.
    assert_eq!(import("sarif", &fixture("columns-ruff.sarif"), &py), ranged);
    let mut utf16: Value = serde_json::from_str(&fixture("columns-ruff.sarif")).unwrap();
    utf16["runs"][0]["columnKind"] = "utf16CodeUnits".into();
    for r in utf16["runs"][0]["results"].as_array_mut().unwrap() {
        let region = &mut r["locations"][0]["physicalLocation"]["region"];
        for k in ["startColumn", "endColumn"] {
            // One more for the 🦀 before each.
            region[k] = (region[k].as_u64().unwrap() + 1).into();
        }
    }
    let utf16 = utf16.to_string();
    assert_eq!(import("sarif", &utf16, &py), ranged);
    // Compiler lines of an unknown tool count characters (mypy, rustc --error-format=short).
    let line = "uni/columns.py:1:12: error: Name \"foo\" is not defined  [name-defined]\n";
    assert_eq!(import("compiler", line, &py), [json!([0, 12, 0, 12])]);
    // gcc's output, known by its `In function` line, counts display columns.
    assert_eq!(
        import("auto", &fixture("columns-gcc.txt"), &c_file),
        [
            json!([1, 32, 1, 32]),
            json!([1, 32, 1, 32]),
            json!([2, 31, 2, 31])
        ]
    );
    // rustc counts characters: `foo` at 32 from 1 is 32 from 0 in UTF-16.
    assert_eq!(
        import("cargo", &fixture("columns-cargo.jsonl"), &rs),
        [json!([1, 32, 1, 35]), json!([2, 41, 2, 44])]
    );
}

// ---------------------------------------------------------------------------------------------
// Imports keep what they can.

/// The stored diagnostics, by file: (line, message) pairs.
fn stored(sb: &Sandbox) -> BTreeMap<String, Vec<(u64, String)>> {
    let o = sb.run_ok(&["diagnostics", "--json"]);
    let files: Vec<Value> = serde_json::from_slice(&o.stdout).unwrap();
    files
        .iter()
        .map(|f| {
            (
                f["uri"].as_str().unwrap().to_string(),
                f["diagnostics"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|d| {
                        (
                            d["range"]["start"]["line"].as_u64().unwrap(),
                            d["message"].as_str().unwrap().to_string(),
                        )
                    })
                    .collect(),
            )
        })
        .collect()
}

#[test]
fn imports_follow_symlinks_into_the_workspace_and_survive_stray_bytes() {
    let sb = Sandbox::new();
    let a = sb.write("a.c", "int a;\n");
    let b = sb.write("b.c", "int b;\n");
    let link = sb.root.join("checkout");
    std::os::unix::fs::symlink(sb.ws(), &link).unwrap();
    let srv = sb.serve(&["--no-default-checkers"]);

    let through = format!("{}/a.c:1:5: error: through a link\n", link.display());
    let o = sb.run_stdin(&["diagnostics", "import", "-"], through.as_bytes());
    assert_eq!(
        (o.status.code(), stderr(&o)),
        (
            Some(0),
            "imported 1 diagnostic(s) for 1 file(s)\n".to_string()
        )
    );

    // gcc echoing a Latin-1 source line: one byte that is not UTF-8.
    let mut latin1 = format!("{}:2:1: error: stray '", b.display()).into_bytes();
    latin1.extend_from_slice(b"\xe9' in program\n");
    latin1.extend_from_slice(format!("{}:3:1: warning: still read\n", b.display()).as_bytes());
    let o = sb.run_stdin(&["diagnostics", "import", "-"], &latin1);
    assert_eq!(
        (o.status.code(), stderr(&o)),
        (
            Some(0),
            "imported 2 diagnostic(s) for 1 file(s)\n".to_string()
        )
    );
    let got = stored(&sb);
    assert_eq!(got[&uri(&a)], vec![(0, "through a link".to_string())]);
    assert_eq!(
        got[&uri(&b)],
        vec![
            (1, "stray '\u{fffd}' in program".to_string()),
            (2, "still read".to_string())
        ]
    );
    drop(srv);
}

#[test]
fn dropped_files_not_utf8_are_imported_and_unreadable_ones_kept_as_rejected() {
    let sb = Sandbox::new();
    let c_file = sb.write("c.c", "int c;\n");
    let srv = sb.serve(&["--no-default-checkers"]);
    let drop_dir = sb.state().join("diagnostics");
    // A directory is not a dropped file: left alone.
    std::fs::create_dir(drop_dir.join("dir.txt")).unwrap();
    // Unreadable even for root: the server's own /proc/self/mem fails to read at offset 0.
    let unreadable = drop_dir.join("unreadable.txt");
    std::os::unix::fs::symlink("/proc/self/mem", &unreadable).unwrap();
    let mut latin1 = format!("{}:1:1: error: caf", c_file.display()).into_bytes();
    latin1.extend_from_slice(b"\xe9\n");
    let dropped = drop_dir.join("latin1.txt");
    std::fs::write(drop_dir.join(".latin1.tmp"), &latin1).unwrap();
    std::fs::rename(drop_dir.join(".latin1.tmp"), &dropped).unwrap();

    let rejected = drop_dir.join("unreadable.txt.rejected");
    wait_for("the unreadable file to be set aside", DEADLINE, || {
        std::fs::symlink_metadata(&rejected).ok()
    });
    assert!(std::fs::symlink_metadata(&unreadable).is_err());
    wait_for("the dropped file to be imported", DEADLINE, || {
        stored(&sb).get(&uri(&c_file)).cloned()
    });
    assert_eq!(
        stored(&sb)[&uri(&c_file)],
        vec![(0, "caf\u{fffd}".to_string())]
    );
    wait_for("the imported file to be removed", DEADLINE, || {
        (!dropped.exists()).then_some(())
    });
    assert!(drop_dir.join("dir.txt").is_dir());
    assert!(
        srv.log()
            .contains(&format!("cannot read {}: ", unreadable.display()))
            && srv
                .log()
                .contains(&format!("; kept as {}\n", rejected.display())),
        "{}",
        srv.log()
    );
    // Still there a turn of the watcher later: kept for the user, not retried or deleted.
    std::fs::write(
        drop_dir.join("later.txt"),
        format!("{}:2:1: error: later\n", c_file.display()),
    )
    .unwrap();
    wait_for("a later drop to be imported", DEADLINE, || {
        (!drop_dir.join("later.txt").exists()).then_some(())
    });
    assert!(std::fs::symlink_metadata(&rejected).is_ok());
}
