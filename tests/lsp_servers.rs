//! Language servers as a diagnostics source, through the real binary: `serve --lsp`, a client
//! calling getDiagnostics as the CLI does around an edit, `ccide status`, and the processes.
//! Deterministic cases use the scriptable fake server of src/langservers; the real servers
//! (typescript-language-server, pyright, clangd) come from `.ci/lsp-install`, named by
//! `CCIDE_TEST_LSP_DIR`, never found on PATH.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::util::*;
use serde_json::{Value, json};

/// The language servers `ccide status --json` lists.
fn servers(sb: &Sandbox) -> Vec<Value> {
    sb.status()["language_servers"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// getDiagnostics for one file (the CLI's baseline) or for every file (after an edit), with
/// how long the answer took.
fn get(c: &mut Client, file: Option<&Path>) -> (Value, Duration) {
    let started = Instant::now();
    let args = match file {
        Some(p) => json!({"uri": uri(p)}),
        None => json!({}),
    };
    let v = diagnostics(c, args);
    (v, started.elapsed())
}

fn messages(answer: &Value, file: &Path) -> Vec<String> {
    answer
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["uri"] == uri(file))
        .flat_map(|f| f["diagnostics"].as_array().cloned().unwrap_or_default())
        .map(|d| d["message"].as_str().unwrap_or("").to_string())
        .collect()
}

/// Asks for `file`'s diagnostics until the server's result is in, and returns the answer.
fn until_reported(c: &mut Client, file: &Path) -> Value {
    wait_for("the server's result", DEADLINE, || {
        let (v, _) = get(c, Some(file));
        (!messages(&v, file).is_empty()).then_some(v)
    })
}

fn pid_alive(pid: u64) -> bool {
    // A zombie waiting for its reaper is gone for our purposes.
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
}

#[test]
fn a_hung_language_server_never_holds_an_answer() {
    let sb = Sandbox::new();
    let a = sb.write("a.fk", "ERR\n");
    let log = sb.root.join("fake.log");
    let s = sb.serve(&[
        "--no-default-lsp",
        "--no-default-checkers",
        "--diagnostics-wait",
        "1",
        "--lsp",
        &fake_lsp("*.fk", "hang", &log),
    ]);
    let mut c = s.client();
    // The baseline waits at most its short budget (350 ms), then answers from the store,
    // echoing the uri exactly; the CLI gives it 500 ms.
    let (v, took) = get(&mut c, Some(&a));
    assert_eq!(v, json!([{"uri": uri(&a), "diagnostics": []}]));
    assert!(took < Duration::from_secs(3), "{took:?}");
    // After an edit: at most --diagnostics-wait.
    let (v, took) = get(&mut c, None);
    assert_eq!(v, json!([]));
    assert!(took < Duration::from_secs(4), "{took:?}");
    let st = servers(&sb);
    assert_eq!(st[0]["state"], "starting", "{st:?}");
}

#[test]
fn a_pushed_result_reaches_the_store_only_when_final() {
    let sb = Sandbox::new();
    let a = sb.write("a.fk", "ERR one\nERR two\n");
    let log = sb.root.join("fake.log");
    // The first publish has one of the two diagnostics; the full one comes 150 ms later, inside
    // the quiet period (300 ms) after which a pushed result counts as final. (A server that
    // pushes a partial result and the full one later than that, with no progress reported in
    // between, cannot be told apart from one that changed its mind: the README says so.)
    let s = sb.serve(&[
        "--no-default-lsp",
        "--no-default-checkers",
        "--lsp",
        &fake_lsp("*.fk", "partial=0.15", &log),
    ]);
    let mut c = s.client();
    // Whenever an answer has diagnostics for the file, it has both: never the partial one.
    let end = Instant::now() + DEADLINE;
    loop {
        let (v, _) = get(&mut c, Some(&a));
        let got = messages(&v, &a);
        assert!(got.is_empty() || got.len() == 2, "a partial result: {v}");
        if got.len() == 2 {
            assert_eq!(
                v[0]["diagnostics"],
                json!([
                    {"message": "bad ERR", "severity": "Error", "source": "fake", "code": "7",
                     "range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 3}}},
                    {"message": "bad ERR", "severity": "Error", "source": "fake", "code": "7",
                     "range": {"start": {"line": 1, "character": 0}, "end": {"line": 1, "character": 3}}},
                ])
            );
            break;
        }
        assert!(Instant::now() < end, "no final result");
    }
}

/// An error after `é🦀` reaches getDiagnostics at the column VS Code reports (12 in
/// UTF-16 code units, where the line has 11 characters before it), from a server counting in
/// UTF-16 and from one that insists on UTF-32 although ccide offers only UTF-16.
#[test]
fn a_column_after_non_bmp_text_is_the_one_vs_code_reports() {
    let sb = Sandbox::new();
    let line = "s = \"é🦀\" + ERR\n";
    let a = sb.write("a.fk", line);
    let b = sb.write("b.fk32", line);
    let log = sb.root.join("fake.log");
    let s = sb.serve(&[
        "--no-default-lsp",
        "--no-default-checkers",
        "--lsp",
        &fake_lsp("*.fk", "", &log),
        "--lsp",
        &fake_lsp("*.fk32", "encoding=utf-32", &log),
    ]);
    let mut c = s.client();
    for f in [&a, &b] {
        let v = until_reported(&mut c, f);
        assert_eq!(
            v[0]["diagnostics"][0]["range"],
            json!({"start": {"line": 0, "character": 12}, "end": {"line": 0, "character": 15}}),
            "{}",
            f.display()
        );
    }
}

#[test]
fn a_crashed_server_restarts_and_the_next_answer_is_right() {
    let sb = Sandbox::new();
    let a = sb.write("a.fk", "fine\n");
    let log = sb.root.join("fake.log");
    let armed = sb.root.join("crash-armed");
    std::fs::write(&armed, "").unwrap();
    let s = sb.serve(&[
        "--no-default-lsp",
        "--no-default-checkers",
        "--lsp",
        &fake_lsp("*.fk", &format!("crash={}", armed.display()), &log),
    ]);
    let mut c = s.client();
    get(&mut c, Some(&a));
    // This content makes the server exit; it is restarted (with backoff) and asked again.
    std::fs::write(&a, "CRASH\nERR\n").unwrap();
    let v = wait_for("the restarted server's answer", DEADLINE, || {
        let (v, _) = get(&mut c, None);
        (!messages(&v, &a).is_empty()).then_some(v)
    });
    assert_eq!(messages(&v, &a), vec!["bad ERR"]);
    assert!(!armed.exists(), "the server did crash");
    let st = servers(&sb);
    assert_eq!(
        (st[0]["state"].as_str(), st[0]["restarts"].as_u64()),
        (Some("ready"), Some(1))
    );
    assert!(
        s.log().contains("exited unexpectedly"),
        "the crash is logged: {}",
        s.log()
    );
}

#[test]
fn no_language_server_outlives_serve() {
    let sb = Sandbox::new();
    let a = sb.write("a.fk", "ERR\n");
    let log = sb.root.join("fake.log");
    let mut s = sb.serve(&[
        "--no-default-lsp",
        "--no-default-checkers",
        "--lsp",
        &fake_lsp("*.fk", "child", &log),
    ]);
    let mut c = s.client();
    until_reported(&mut c, &a);
    let pid = servers(&sb)[0]["pid"].as_u64().unwrap();
    // The fake server started a `sleep` of its own: the whole group must go.
    let child: u64 = wait_for("the fake's child", DEADLINE, || {
        let text = std::fs::read_to_string(&log).ok()?;
        let line = text.lines().find(|l| l.contains("\"child\""))?;
        serde_json::from_str::<Value>(line).ok()?["pid"].as_u64()
    });
    assert!(pid_alive(pid) && pid_alive(child));
    s.stop_with("TERM");
    wait_for("no process left", DEADLINE, || {
        (!pid_alive(pid) && !pid_alive(child)).then_some(())
    });
}

#[test]
fn status_lists_each_language_server() {
    let sb = Sandbox::new();
    let a = sb.write("a.fk", "ERR\n");
    let log = sb.root.join("fake.log");
    let s = sb.serve(&[
        "--no-default-lsp",
        "--no-default-checkers",
        "--lsp",
        &fake_lsp("*.fk", "", &log),
    ]);
    let st = servers(&sb);
    assert_eq!(
        (st.len(), st[0]["state"].as_str(), st[0]["name"].as_str()),
        (1, Some("stopped"), Some("python3"))
    );
    let mut c = s.client();
    until_reported(&mut c, &a);
    let st = servers(&sb);
    assert_eq!(
        (
            st[0]["state"].as_str(),
            st[0]["open_documents"].as_u64(),
            st[0]["origin"].as_str()
        ),
        (Some("ready"), Some(1), Some("lsp:python3"))
    );
    assert!(st[0]["pid"].as_u64().is_some() && st[0]["rss_kib"].as_u64().is_some());
    let human = stdout(&sb.run(&["status"]));
    let line = human.lines().find(|l| l.starts_with("lsp ")).unwrap();
    assert!(
        line.starts_with("lsp      python3 ready, pid ") && line.ends_with(", 1 open"),
        "{line}"
    );
}

/// `--lsp-warm` starts each server with `serve` and opens one file it covers, so the project
/// is loaded before the first edit (not only the process started).
#[test]
fn warm_starts_each_server_with_a_file_of_the_project_open() {
    let sb = Sandbox::new();
    sb.write("node_modules/x/skip.fk", "");
    sb.write("src/a.fk", "ERR\n");
    let log = sb.root.join("fake.log");
    let _s = sb.serve(&[
        "--no-default-lsp",
        "--no-default-checkers",
        "--lsp-warm",
        "--lsp",
        &fake_lsp("*.fk", "", &log),
    ]);
    let st = wait_for("a warm server", DEADLINE, || {
        let st = servers(&sb);
        (st[0]["state"] == "ready" && st[0]["open_documents"] == 1).then_some(st)
    });
    assert_eq!(st[0]["restarts"], 0);
    let opened = std::fs::read_to_string(&log).unwrap();
    assert!(
        opened.contains("src/a.fk") && !opened.contains("skip.fk"),
        "{opened}"
    );
}

/// Where a language server covers a file, the built-in checker for its language steps aside;
/// a `--checker` of the user's stays.
#[test]
fn the_built_in_checker_steps_aside_for_a_language_server() {
    let sb = Sandbox::new();
    // A syntax error python3's built-in check would report, and a line the fake reports.
    let a = sb.write("a.py", "def f(:\nERR\n");
    let log = sb.root.join("fake.log");
    let s = sb.serve(&["--no-default-lsp", "--lsp", &fake_lsp("*.py", "", &log)]);
    let mut c = s.client();
    let v = until_reported(&mut c, &a);
    let (v2, _) = get(&mut c, None);
    for v in [&v, &v2] {
        assert_eq!(messages(v, &a), vec!["bad ERR"], "{v}");
    }
}

/// The real servers, on a small project in a folder whose name has a space and non-ASCII
/// characters (the uri is echoed exactly): a type error an edit introduces is in the answer
/// right after the edit, and was not in the baseline.
fn real_server(lsp: &str, files: &[(&str, &str)], edit: (&str, &str), expect: &str) {
    real_server_with(lsp, &[], files, edit, expect)
}

/// `real_server`, serve (and so the server) run with `env` too, `BIN` in a value naming the
/// installed servers' directory.
fn real_server_with(
    lsp: &str,
    env: &[(&str, &str)],
    files: &[(&str, &str)],
    edit: (&str, &str),
    expect: &str,
) {
    let dir = PathBuf::from(
        std::env::var_os("CCIDE_TEST_LSP_DIR")
            .expect("CCIDE_TEST_LSP_DIR names the language servers .ci/lsp-install installed"),
    );
    let sb = Sandbox::new();
    let proj = sb.ws().join("proj ä b");
    for (name, text) in files {
        sb.write(
            &format!("proj ä b/{name}"),
            text.replace("PROJ", &proj.display().to_string()),
        );
    }
    let bin = dir.join("bin").display().to_string();
    let spec = lsp.replace("BIN", &bin);
    let mut serve = sb.serve_command(&[
        "--no-default-lsp",
        "--no-default-checkers",
        "--lsp-warm",
        "--diagnostics-wait",
        "5",
        "--lsp",
        &spec,
    ]);
    for (k, v) in env {
        serve.env(k, v.replace("BIN", &bin));
    }
    let s = Server::spawn(&mut serve, &sb.config());
    let mut c = s.client();
    let file = sb.ws().join("proj ä b").join(edit.0);
    // The CLI's baseline before the edit: the file has no error.
    let v = wait_for("a ready server", Duration::from_secs(60), || {
        let (v, _) = get(&mut c, Some(&file));
        (servers(&sb)[0]["state"] == "ready").then_some(v)
    });
    assert_eq!(v[0]["uri"], uri(&file));
    assert_eq!(messages(&v, &file), Vec::<String>::new());
    std::fs::write(&file, edit.1).unwrap();
    let v = wait_for("the new diagnostic", Duration::from_secs(30), || {
        let (v, _) = get(&mut c, None);
        (!messages(&v, &file).is_empty()).then_some(v)
    });
    let got = messages(&v, &file);
    assert!(got.iter().any(|m| m.contains(expect)), "{v}");
    let pid = servers(&sb)[0]["pid"].as_u64().unwrap();
    drop(c);
    drop(s);
    wait_for("the server gone with serve", DEADLINE, || {
        (!pid_alive(pid)).then_some(())
    });
}

#[test]
#[ignore = "needs language servers: .ci/lsp-install, named by CCIDE_TEST_LSP_DIR"]
fn typescript_language_server_reports_the_type_error_an_edit_makes() {
    real_server(
        "*.ts='BIN/typescript-language-server' --stdio",
        &[
            (
                "tsconfig.json",
                r#"{"compilerOptions": {"strict": true, "noEmit": true}}"#,
            ),
            (
                "a.ts",
                "export function add(a: number, b: number): number { return a + b; }\n",
            ),
            (
                "b.ts",
                "import { add } from \"./a\";\nexport const n: number = add(1, 2);\n",
            ),
        ],
        (
            "b.ts",
            "import { add } from \"./a\";\nexport const n: string = add(1, 2);\n",
        ),
        "Type 'number' is not assignable to type 'string'.",
    );
}

#[test]
#[ignore = "needs language servers: .ci/lsp-install, named by CCIDE_TEST_LSP_DIR"]
fn pyright_reports_the_type_error_an_edit_makes() {
    real_server(
        "*.py='BIN/pyright-langserver' --stdio",
        &[(
            "m.py",
            "def f(x: int) -> int:\n    return x\n\ny: int = f(1)\n",
        )],
        (
            "m.py",
            "def f(x: int) -> int:\n    return x\n\ny: str = f(1)\n",
        ),
        "\"int\" is not assignable to \"str\"",
    );
}

#[test]
#[ignore = "needs language servers: .ci/lsp-install, named by CCIDE_TEST_LSP_DIR"]
fn clangd_reports_the_error_an_edit_makes() {
    real_server(
        "*.c='BIN/clangd'",
        &[
            (
                "compile_commands.json",
                r#"[{"directory": "PROJ", "file": "PROJ/m.c", "command": "cc -c m.c"}]"#,
            ),
            ("m.c", "int main(void) { return 0; }\n"),
        ],
        ("m.c", "int main(void) { return undeclared; }\n"),
        "undeclared",
    );
}

/// bash-language-server's diagnostics are shellcheck's (without it, it reports none): the one
/// .ci/lsp-install put beside it, named as its `SHELLCHECK_PATH` (never found on PATH).
#[test]
#[ignore = "needs language servers (.ci/lsp-install)"]
fn bash_language_server_reports_what_shellcheck_finds_after_an_edit() {
    real_server_with(
        "*.sh='BIN/bash-language-server' start",
        &[("SHELLCHECK_PATH", "BIN/shellcheck")],
        &[("run.sh", "#!/bin/bash\necho \"$1\"\n")],
        ("run.sh", "#!/bin/bash\necho $1\n"),
        "Double quote to prevent globbing and word splitting.",
    );
}

/// The messages with `method` the fake server logged as received.
fn received(log: &Path, method: &str) -> usize {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|e| e["got"]["method"] == method)
        .count()
}

/// After diagnostics for 150 files were imported, an edit that breaks m000.py is in
/// the very next `getDiagnostics {}` (the edited file is never the one closed to make room,
/// and a closed document's wait is no answer); and an idle `{}` opens and closes nothing
/// (it refreshes what changed, not every file known).
#[test]
fn an_edit_shows_after_a_large_import_and_an_idle_answer_costs_no_document() {
    let sb = Sandbox::new();
    let log = sb.root.join("fake.log");
    let files: Vec<PathBuf> = (0..150)
        .map(|i| sb.write(&format!("m{i:03}.py"), "x = 1\n"))
        .collect();
    let s = sb.serve(&[
        "--no-default-lsp",
        "--no-default-checkers",
        "--lsp",
        &fake_lsp("*.py", "", &log),
    ]);
    let report: Vec<Value> = files
        .iter()
        .map(|f| {
            json!({"uri": uri(f), "diagnostics": [{"message": "from CI", "severity": "Warning",
            "range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 1}}}]})
        })
        .collect();
    let o = sb.run_stdin(
        &["diagnostics", "import"],
        Value::Array(report).to_string().as_bytes(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let mut c = s.client();
    let m000 = &files[0];
    // The CLI's baseline, the edit, and the answer after it.
    wait_for("a ready server", DEADLINE, || {
        let (v, _) = get(&mut c, Some(m000));
        (servers(&sb)[0]["state"] == "ready").then_some(v)
    });
    std::fs::write(m000, "x = 1\nERR\n").unwrap();
    let (v, _) = get(&mut c, None);
    assert_eq!(
        messages(&v, m000),
        ["from CI", "bad ERR"],
        "the edit's error, in the first answer after it"
    );
    assert_eq!(v.as_array().unwrap().len(), 150);
    let opened = (
        received(&log, "textDocument/didOpen"),
        received(&log, "textDocument/didClose"),
    );
    for _ in 0..3 {
        let (again, _) = get(&mut c, None);
        assert_eq!(again, v);
    }
    assert_eq!(
        (
            received(&log, "textDocument/didOpen"),
            received(&log, "textDocument/didClose")
        ),
        opened,
        "an idle answer opens and closes nothing"
    );
}

/// A server that crashes on every file it opens never gives way for good (it
/// answers initialize, so it is never marked failed); while it delivers nothing, the built-in
/// checker it stepped aside for answers.
#[test]
fn the_built_in_checker_answers_while_its_server_crashes_on_every_file() {
    let sb = Sandbox::new();
    let a = sb.write("a.py", "def f(:\n");
    let log = sb.root.join("fake.log");
    let s = sb.serve(&[
        "--no-default-lsp",
        "--lsp",
        &fake_lsp("*.py", "crashopen", &log),
    ]);
    let mut c = s.client();
    get(&mut c, Some(&a));
    let v = wait_for("the built-in checker's answer", DEADLINE, || {
        let (v, _) = get(&mut c, Some(&a));
        (!messages(&v, &a).is_empty()).then_some(v)
    });
    assert_eq!(v[0]["diagnostics"][0]["range"]["start"]["line"], 0, "{v}");
    assert!(
        std::fs::read_to_string(&log).unwrap().contains("\"crash\""),
        "the server did crash"
    );
    assert_ne!(servers(&sb)[0]["state"], "failed");
}

/// VmHWM (peak resident memory) of a process, in KiB.
fn peak_rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line["VmHWM:".len()..]
        .trim()
        .trim_end_matches("kB")
        .trim()
        .parse()
        .unwrap()
}

/// One publish of about 35 MB of diagnostics for a file (200,000 of them) is cut before it is
/// parsed (parsed whole, it took serve to 224–274 MiB), the store holds at most 1000 per file
/// and source, and the answer says how many more there were; serve's peak stays far below.
#[test]
fn a_flood_of_diagnostics_is_cut_and_says_so_within_bounded_memory() {
    let sb = Sandbox::new();
    let a = sb.write("a.fk", "x\n");
    let log = sb.root.join("fake.log");
    let s = sb.serve(&[
        "--no-default-lsp",
        "--no-default-checkers",
        "--lsp",
        &fake_lsp("*.fk", "flood=200000", &log),
    ]);
    let mut c = s.client();
    let v = wait_for("the server's result", Duration::from_secs(60), || {
        let (v, _) = get(&mut c, Some(&a));
        (!messages(&v, &a).is_empty()).then_some(v)
    });
    let ds = v[0]["diagnostics"].as_array().unwrap();
    assert_eq!(ds.len(), 1000);
    assert_eq!(
        ds[0],
        json!({"message": "199001 more diagnostics of this file from this language server are not shown: ccide keeps 1000 per file and source",
               "severity": "Info", "source": "ccide",
               "range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 0}}})
    );
    assert_eq!(ds[999]["message"], "flooded diagnostic number 998 of many");
    let peak = peak_rss_kib(s.pid());
    eprintln!("serve's peak RSS after the flood: {} MiB", peak / 1024);
    assert!(peak < 100 * 1024, "serve's peak RSS: {} MiB", peak / 1024);
}

/// `--lsp-warm` opens a file of the project tsconfig.json puts the sources in, also
/// through a solution-style config that only lists references (as hono's does): not a file at
/// the root that no project includes, nor one the project excludes.
#[test]
fn warm_opens_a_file_of_the_project_tsconfig_names() {
    let sb = Sandbox::new();
    sb.write("aaa.config.ts", "export default {};\n");
    sb.write(
        "tsconfig.json",
        "{\n  // a solution\n  \"files\": [],\n  \"references\": [{\"path\": \"./tsconfig.build.json\"},],\n}\n",
    );
    sb.write(
        "tsconfig.build.json",
        r#"{"include": ["src/**/*.ts"], /* tests elsewhere */ "exclude": ["src/**/*.test.ts"]}"#,
    );
    sb.write("src/a.test.ts", "\n");
    sb.write("src/hono.ts", "ERR\n");
    let log = sb.root.join("fake.log");
    let _s = sb.serve(&[
        "--no-default-lsp",
        "--no-default-checkers",
        "--lsp-warm",
        "--lsp",
        &fake_lsp("*.ts", "", &log),
    ]);
    wait_for("a warm server", DEADLINE, || {
        let st = servers(&sb);
        (st[0]["state"] == "ready" && st[0]["open_documents"] == 1).then_some(())
    });
    let opened = std::fs::read_to_string(&log).unwrap();
    assert!(opened.contains("src/hono.ts"), "{opened}");
    assert!(!opened.contains("aaa.config.ts") && !opened.contains("a.test.ts"));
}

/// Opening a repository runs no program it ships. A workspace whose
/// node_modules/typescript would record that it ran: typescript-language-server (which loads
/// the workspace's TypeScript when left alone) answers with the TypeScript beside it, and the
/// workspace's never runs; with --trust-workspace it does.
#[test]
#[ignore = "needs language servers: .ci/lsp-install, named by CCIDE_TEST_LSP_DIR"]
fn typescript_language_server_never_runs_the_workspace_s_typescript_unless_trusted() {
    let dir = PathBuf::from(
        std::env::var_os("CCIDE_TEST_LSP_DIR")
            .expect("CCIDE_TEST_LSP_DIR names the language servers .ci/lsp-install installed"),
    );
    for trusted in [false, true] {
        let sb = Sandbox::new();
        let ran = sb.ws().join("ran");
        sb.write(
            "node_modules/typescript/package.json",
            r#"{"name": "typescript", "version": "5.9.3"}"#,
        );
        sb.write(
            "node_modules/typescript/lib/tsserver.js",
            format!(
                "require('fs').writeFileSync({:?}, 'the workspace ran'); process.exit(1);\n",
                ran.display().to_string()
            ),
        );
        sb.write(
            "tsconfig.json",
            r#"{"compilerOptions": {"strict": true, "noEmit": true}}"#,
        );
        let a = sb.write("a.ts", "export const n: number = 1;\n");
        let spec = format!(
            "*.ts='{}' --stdio",
            dir.join("bin/typescript-language-server").display()
        );
        let mut args = vec!["--no-default-lsp", "--no-default-checkers", "--lsp", &spec];
        if trusted {
            args.push("--trust-workspace");
        }
        let s = sb.serve(&args);
        let mut c = s.client();
        if trusted {
            get(&mut c, Some(&a));
            wait_for(
                "the workspace's tsserver.js to run",
                Duration::from_secs(30),
                || ran.exists().then_some(()),
            );
            continue;
        }
        wait_for("a ready server", Duration::from_secs(60), || {
            get(&mut c, Some(&a));
            assert!(!ran.exists(), "the workspace's TypeScript ran");
            (servers(&sb)[0]["state"] == "ready").then_some(())
        });
        std::fs::write(&a, "export const n: string = 1;\n").unwrap();
        let v = wait_for("the new diagnostic", Duration::from_secs(30), || {
            let (v, _) = get(&mut c, None);
            (!messages(&v, &a).is_empty()).then_some(v)
        });
        assert!(messages(&v, &a)[0].contains("not assignable"), "{v}");
        assert!(!ran.exists(), "the workspace's TypeScript ran");
    }
}
