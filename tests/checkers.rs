//! Diagnostics from checkers run in the background: freshness, budgets, timeouts, broadcasts.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::util::*;
use serde_json::{Value, json};

/// A checker's body: reports an error on line 1 when the file contains "bad".
const REPORT_BAD: &str = r#"if grep -q bad "$1"; then echo "$1:1:5: error: found bad [X1]"; fi"#;

#[test]
fn the_baseline_includes_an_error_the_file_already_had_and_changes_are_broadcast() {
    let sb = Sandbox::new();
    let script = sb.script("check.sh", REPORT_BAD);
    let file = sb.write("notes dir/ä.txt", "all bad here\n");
    let s = sb.serve_checker(&script, &[]);
    let mut c = s.ready_client();
    let expected = json!({"uri": uri(&file), "diagnostics": [{
        "message": "found bad", "severity": "Error", "source": "check.sh", "code": "X1",
        "range": {"start": {"line": 0, "character": 4}, "end": {"line": 0, "character": 4}},
    }]});
    // The first {uri} waits briefly for the file's first check (the real CLI otherwise reports
    // an error the file already had as introduced by the next edit).
    assert_eq!(
        diagnostics(&mut c, json!({"uri": uri(&file)})),
        json!([expected])
    );
    assert_eq!(c.notification("diagnostics_changed")["params"], expected);
}

/// A checker's body: an error on lines 1 and 2 when the file contains "bad".
pub(crate) const TWO_ERRORS: &str = r#"if grep -q bad "$1"; then echo "$1:1:1: error: one [X1]"; echo "$1:2:3: error: two [X2]"; fi"#;

/// VS Code reports diagnostics for every open editor: a saved file open in a tab (`ccide open`)
/// is checked though Claude Code never asked about it, and a file not open is not.
#[test]
fn an_open_files_errors_are_in_the_answer_for_every_file() {
    let sb = Sandbox::new();
    let script = sb.script("check.sh", TWO_ERRORS);
    let open = sb.write("open.txt", "bad\n  bad\n");
    sb.write("closed.txt", "bad\n  bad\n");
    let s = sb.serve_checker(&script, &[]);
    let mut c = s.ready_client();
    sb.run_ok(&["open", open.to_str().unwrap()]);
    let at =
        |l, c| json!({"start": {"line": l, "character": c}, "end": {"line": l, "character": c}});
    assert_eq!(
        diagnostics(&mut c, json!({})),
        json!([{"uri": uri(&open), "diagnostics": [
            {"message": "one", "severity": "Error", "source": "check.sh", "code": "X1", "range": at(0, 0)},
            {"message": "two", "severity": "Error", "source": "check.sh", "code": "X2", "range": at(1, 2)},
        ]}])
    );
}

#[test]
fn the_answer_after_an_edit_reflects_the_file_as_written() {
    let sb = Sandbox::new();
    let script = sb.script("check.sh", REPORT_BAD);
    let file = sb.write("a.txt", "fine\n");
    let s = sb.serve_checker(&script, &[]);
    let mut c = s.client();
    // Baseline before the edit, as the CLI takes it.
    assert_eq!(
        diagnostics(&mut c, json!({"uri": uri(&file)}))[0]["diagnostics"],
        json!([])
    );
    // The edit, then `{}` as the CLI asks right after writing.
    std::fs::write(&file, "now bad and longer\n").unwrap();
    let all = diagnostics(&mut c, json!({}));
    assert_eq!(all[0]["uri"], uri(&file), "{all}");
    assert_eq!(all[0]["diagnostics"][0]["message"], "found bad");
    // Fixing the file clears it.
    std::fs::write(&file, "fixed, and different\n").unwrap();
    assert_eq!(diagnostics(&mut c, json!({})), json!([]));
}

#[test]
fn a_uri_request_answers_at_once_while_a_checker_hangs_and_the_checker_is_killed() {
    let sb = Sandbox::new();
    let pidfile = sb.root.join("checker.pid");
    let script = sb.script(
        "check.sh",
        &format!("echo $$ > {}\nexec sleep 60", pidfile.display()),
    );
    let file = sb.write("a.txt", "x\n");
    let s = sb.serve_checker(
        &script,
        &["--checker-timeout", "5", "--diagnostics-wait", "0.3"],
    );
    // Well before the hung checker's 5 s, whatever the load: waiting for it would take them.
    let mut c = s.client();
    let started = Instant::now();
    assert_eq!(
        diagnostics(&mut c, json!({"uri": uri(&file)}))[0]["diagnostics"],
        json!([])
    );
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    let pid: String = wait_for("the checker to start", DEADLINE, || {
        std::fs::read_to_string(&pidfile)
            .ok()
            .filter(|s| !s.trim().is_empty())
    });
    // `{}` waits for the running check only up to --diagnostics-wait.
    std::fs::write(&file, "changed\n").unwrap();
    let started = Instant::now();
    diagnostics(&mut c, json!({}));
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    // Meanwhile the connection serves other requests.
    assert_eq!(c.request("ping", json!({}))["result"], json!({}));
    let pid: u64 = pid.trim().parse().unwrap();
    wait_for("the hung checker to be killed", DEADLINE, || {
        (!process_alive(pid)).then_some(())
    });
    wait_for("the timeout in the log", DEADLINE, || {
        s.log()
            .contains("timed out after 5 s; killed")
            .then_some(())
    });
}

#[test]
fn a_project_checker_reports_every_file_and_clears_fixed_ones() {
    let sb = Sandbox::new();
    let a = sb.write("a.txt", "x\n");
    let b = sb.write("sub/b.txt", "x\n");
    let out = sb.root.join("project-output");
    std::fs::write(
        &out,
        "a.txt:1:1: warning: wa\nsub/b.txt:2:3: error: eb [E2]\n",
    )
    .unwrap();
    let script = sb.script("check.sh", &format!("cat {}", out.display()));
    let spec = format!("*.txt=compiler:{}", script.display());
    let s = sb.serve(&["--no-default-checkers", "--checker", &spec]);
    let mut c = s.client();
    diagnostics(&mut c, json!({"uri": uri(&a)}));
    let both = wait_for("both files reported", DEADLINE, || {
        let all = diagnostics(&mut c, json!({}));
        (all.as_array().unwrap().len() == 2).then_some(all)
    });
    assert_eq!(both[0]["uri"], uri(&a));
    assert_eq!(both[1]["diagnostics"][0]["code"], "E2");
    std::fs::write(&out, "sub/b.txt:2:3: error: eb [E2]\n").unwrap();
    std::fs::write(&a, "edited\n").unwrap();
    let all = diagnostics(&mut c, json!({}));
    assert_eq!(all.as_array().unwrap().len(), 1, "{all}");
    assert_eq!(all[0]["uri"], uri(&b));
}

#[test]
fn bad_checker_specs_are_usage_errors() {
    let sb = Sandbox::new();
    let o = sb.run(&["serve", "--checker", "no-equals-sign"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("--checker"), "{}", stderr(&o));
}

#[test]
fn files_dropped_into_the_state_directory_are_imported() {
    let sb = Sandbox::new();
    let file = sb.write("a.c", "int x;\n");
    let s = sb.serve(&["--no-default-checkers"]);
    let mut c = s.client();
    let drop = sb.state().join("diagnostics/ci.txt");
    std::fs::write(
        &drop,
        format!("{}:1:5: warning: from CI [-Wci]\n", file.display()),
    )
    .unwrap();
    let n = c.notification("diagnostics_changed");
    assert_eq!(n["params"]["uri"], uri(&file));
    assert_eq!(n["params"]["diagnostics"][0]["code"], "-Wci");
    wait_for("the dropped file to be removed", DEADLINE, || {
        (!drop.exists()).then_some(())
    });
}

/// The first diagnostics the built-in python checker reports for a file with a syntax error
/// on its second line (no language server takes Python from it).
fn python_syntax_error(sb: &Sandbox) -> Vec<serde_json::Value> {
    let file = sb.write("broken.py", "x = 1\ndef f(:\n    pass\n");
    let s = sb.serve(&["--no-default-lsp"]);
    let mut c = s.client();
    diagnostics(&mut c, json!({"uri": uri(&file)}));
    wait_for("the python checker's result", DEADLINE, || {
        let d = diagnostics(&mut c, json!({"uri": uri(&file)}));
        let list = d[0]["diagnostics"].as_array()?.clone();
        (!list.is_empty()).then_some(list)
    })
}

#[test]
fn without_ruff_the_built_in_python_checker_is_python3_and_reports_a_syntax_error() {
    // No ruff by construction, whatever the machine has installed.
    let sb = Sandbox::without_system_tools();
    python3(); // Fails plainly without python3, rather than by waiting for a result.
    let found = python_syntax_error(&sb);
    assert_eq!(found[0]["severity"], "Error", "{found:?}");
    assert_eq!(found[0]["range"]["start"]["line"], 1, "{found:?}");
    assert_eq!(found[0]["source"], "python3", "{found:?}");
}

#[test]
#[ignore = "needs ruff: .ci/run installs it and names it in CCIDE_TEST_RUFF"]
fn with_ruff_the_built_in_python_checker_is_ruff_and_reports_a_syntax_error() {
    let sb = Sandbox::new();
    sb.add_tool("ruff", ruff());
    let found = python_syntax_error(&sb);
    assert_eq!(found[0]["severity"], "Error", "{found:?}");
    assert_eq!(found[0]["range"]["start"]["line"], 1, "{found:?}");
    assert_eq!(found[0]["source"], "ruff", "{found:?}");
}

#[test]
fn imported_diagnostics_and_a_checkers_results_coexist() {
    let sb = Sandbox::new();
    let script = sb.script("check.sh", REPORT_BAD);
    let file = sb.write("a.txt", "bad\n");
    let s = sb.serve_checker(&script, &[]);
    let mut c = s.client();
    let line = format!("{}:2:1: warning: from CI [CI1]\n", file.display());
    assert!(
        sb.run_stdin(&["diagnostics", "import"], line.as_bytes())
            .status
            .success()
    );
    diagnostics(&mut c, json!({"uri": uri(&file)}));
    let both = wait_for("the checker's result beside the import", DEADLINE, || {
        let d = diagnostics(&mut c, json!({"uri": uri(&file)}));
        let codes: Vec<String> = d[0]["diagnostics"]
            .as_array()?
            .iter()
            .map(|x| x["code"].as_str().unwrap_or("").to_string())
            .collect();
        (codes.len() == 2).then_some(codes)
    });
    assert!(
        both.contains(&"CI1".to_string()) && both.contains(&"X1".to_string()),
        "{both:?}"
    );
    // The checker's next result replaces only its own.
    std::fs::write(&file, "good now\n").unwrap();
    let all = diagnostics(&mut c, json!({}));
    assert_eq!(all[0]["diagnostics"].as_array().unwrap().len(), 1, "{all}");
    assert_eq!(all[0]["diagnostics"][0]["code"], "CI1");
}

/// `s = "é🦀" + foo` and, indented by a tab, `t = "é🦀" + bar`: the sample of the `columns-*`
/// fixtures, where every tool counts the columns its own way.
const COLUMNS_PY: &str = include_str!("fixtures/diagnostics/columns/columns.py");

/// One diagnostic as getDiagnostics gives it.
fn wire(message: &str, source: &str, code: &str, start: (u32, u32), end: (u32, u32)) -> Value {
    json!({
        "message": message, "severity": "Error", "source": source, "code": code,
        "range": {"start": {"line": start.0, "character": start.1},
                  "end": {"line": end.0, "character": end.1}},
    })
}

/// The diagnostics a file gets once its checker has reported.
fn first_result(c: &mut Client, file: &Path) -> Value {
    wait_for("the checker's result", DEADLINE, || {
        let d = diagnostics(c, json!({"uri": uri(file)}));
        let list = &d[0]["diagnostics"];
        (!list.as_array()?.is_empty()).then(|| list.clone())
    })
}

#[test]
#[ignore = "needs ruff: .ci/run installs it and names it in CCIDE_TEST_RUFF"]
fn an_error_after_a_wide_character_reaches_get_diagnostics_at_its_utf16_column_with_ruffs_range() {
    let sb = Sandbox::new();
    sb.add_tool("ruff", ruff());
    let file = sb.write("columns.py", COLUMNS_PY);
    let s = sb.serve(&["--no-default-lsp"]);
    let mut c = s.client();
    // ruff says 12 (characters, from 1); VS Code counts 🦀 as two: 12 from 0.
    assert_eq!(
        first_result(&mut c, &file),
        json!([
            wire("Undefined name `foo`", "ruff", "F821", (0, 12), (0, 15)),
            wire("Undefined name `bar`", "ruff", "F821", (2, 13), (2, 16)),
        ])
    );
}

#[test]
fn without_ruff_a_syntax_error_after_a_wide_character_is_at_its_utf16_column() {
    // No ruff by construction, whatever the machine has installed.
    let sb = Sandbox::without_system_tools();
    python3();
    let file = sb.write("broken.py", "s = \"é🦀\" + $\n");
    let s = sb.serve(&["--no-default-lsp"]);
    let mut c = s.client();
    // python3 compiles bytes and reports 16 (bytes, from 1).
    let found = first_result(&mut c, &file);
    assert_eq!(
        found[0]["range"],
        wire("", "", "", (0, 12), (0, 13))["range"],
        "{found}"
    );
    assert_eq!(found[0]["source"], "python3");
}

#[test]
fn a_configured_checkers_compiler_lines_reach_get_diagnostics_in_utf16() {
    let sb = Sandbox::new();
    // A tool of unknown name counts characters: 12 and, as mypy --show-error-end prints it,
    // the end.
    let chars = sb.script(
        "check.sh",
        r#"echo "$1:1:12:1:14: error: Name \"foo\" is not defined [name-defined]""#,
    );
    // gcc counts display columns: the tab runs to column 8 and 🦀 takes two (its real
    // output for this line of columns.c, in tests/fixtures/diagnostics/columns-gcc.txt).
    let gcc = sb.script("gcc", r#"echo "$1:3:39: error: ‘bar’ undeclared""#);
    let py = sb.write("columns.py", COLUMNS_PY);
    let c_file = sb.write(
        "columns.c",
        include_str!("fixtures/diagnostics/columns/columns.c"),
    );
    let s = sb.serve(&[
        "--no-default-checkers",
        "--checker",
        &format!("*.py=compiler:{} {{file}}", chars.display()),
        "--checker",
        &format!("*.c=compiler:{} {{file}}", gcc.display()),
    ]);
    let mut c = s.client();
    assert_eq!(
        first_result(&mut c, &py),
        json!([wire(
            "Name \"foo\" is not defined",
            "check.sh",
            "name-defined",
            (0, 12),
            (0, 15)
        )])
    );
    let found = first_result(&mut c, &c_file);
    assert_eq!(
        found[0]["range"]["start"],
        json!({"line": 2, "character": 31}),
        "{found}"
    );
    assert_eq!(found[0]["source"], "gcc");
}
