//! File text stays inside the workspace folders: a file ccide named before (a language server's
//! document, an open tab, a checked file) and replaced by a symlink to a file outside since
//! (a checkout of a hostile branch does this) is never read through the link again, and its
//! text reaches no language server, checker or client (ccide-protocol(7) §10).

use std::path::{Path, PathBuf};

use crate::util::*;
use serde_json::json;

const SECRET: &str = "OUTSIDE-SECRET-TEXT";

/// A file outside the workspace holding `SECRET` (on a line the fake server reports, ERR).
fn outside_file(sb: &Sandbox, name: &str) -> PathBuf {
    sb.root.write(name, format!("ERR {SECRET}\n"))
}

/// Replaces `file` by a symlink to `target`.
fn swap_for_symlink(file: &Path, target: &Path) {
    std::fs::remove_file(file).unwrap();
    std::os::unix::fs::symlink(target, file).unwrap();
}

/// What the fake language server logged (every message it got).
fn log_text(log: &Path) -> String {
    std::fs::read_to_string(log).unwrap_or_default()
}

#[test]
fn a_document_swapped_for_a_symlink_to_an_outside_file_is_closed_not_read_through_the_link() {
    let sb = Sandbox::without_system_tools();
    let a = sb.write("a.fk", "ERR inside\n");
    let secret = outside_file(&sb, "secret.fk");
    let log = sb.root.join("fake.log");
    let s = sb.serve(&[
        "--no-default-lsp",
        "--no-default-checkers",
        "--lsp",
        &fake_lsp("*.fk", "", &log),
    ]);
    let mut c = s.client();
    // The server has the document open, with its result in.
    wait_for("the server's result", DEADLINE, || {
        let v = diagnostics(&mut c, json!({"uri": uri(&a)}));
        (v[0]["diagnostics"].as_array()?.len() == 1).then_some(())
    });
    swap_for_symlink(&a, &secret);
    // getDiagnostics {} looks at every document again: this one is now gone (closed).
    let v = diagnostics(&mut c, json!({}));
    wait_for("the document closed (or sent again)", DEADLINE, || {
        let got = log_text(&log);
        (got.contains("textDocument/didClose") || got.contains(SECRET)).then_some(())
    });
    let got = log_text(&log);
    assert!(
        !got.contains(SECRET),
        "the outside text reached the server:\n{got}"
    );
    assert!(!v.to_string().contains(SECRET), "{v}");
    // Asking about the file by its name now resolves outside: refused, nothing sent.
    let v = c.call("getDiagnostics", json!({"uri": uri(&a)}));
    assert!(!v.to_string().contains(SECRET), "{v}");
    let got = log_text(&log);
    assert!(
        !got.contains(SECRET),
        "the outside text reached the server:\n{got}"
    );
}

/// A directory of the workspace swapped for a symlink to one outside: the documents below it
/// are closed too.
#[test]
fn a_directory_swapped_for_a_symlink_closes_the_documents_below_it() {
    let sb = Sandbox::without_system_tools();
    let a = sb.write("sub/a.fk", "ERR inside\n");
    outside_file(&sb, "elsewhere/a.fk");
    let log = sb.root.join("fake.log");
    let s = sb.serve(&[
        "--no-default-lsp",
        "--no-default-checkers",
        "--lsp",
        &fake_lsp("*.fk", "", &log),
    ]);
    let mut c = s.client();
    wait_for("the server's result", DEADLINE, || {
        let v = diagnostics(&mut c, json!({"uri": uri(&a)}));
        (v[0]["diagnostics"].as_array()?.len() == 1).then_some(())
    });
    std::fs::remove_dir_all(sb.ws().join("sub")).unwrap();
    std::os::unix::fs::symlink(sb.root.join("elsewhere"), sb.ws().join("sub")).unwrap();
    diagnostics(&mut c, json!({}));
    wait_for("the document closed (or sent again)", DEADLINE, || {
        let got = log_text(&log);
        (got.contains("textDocument/didClose") || got.contains(SECRET)).then_some(())
    });
    let got = log_text(&log);
    assert!(
        !got.contains(SECRET),
        "the outside text reached the server:\n{got}"
    );
}

/// An LSP client of the shared servers (`lsp-bridge`, `ccide lsp --navigation`) makes ccide
/// read the file again before each request: a hover on a document swapped for a symlink
/// sends the server nothing of the outside file.
#[test]
fn a_request_of_an_lsp_client_does_not_read_a_swapped_document_through_the_link() {
    let sb = Sandbox::without_system_tools();
    let a = sb.write("a.fk", "ERR inside\n");
    let secret = outside_file(&sb, "secret.fk");
    let log = sb.root.join("fake.log");
    let _s = sb.serve(&[
        "--no-default-lsp",
        "--no-default-checkers",
        "--lsp",
        &fake_lsp("*.fk", "", &log),
    ]);
    let mut bridge = LspProcess::spawn(
        &mut sb.command(&["lsp-bridge", "--extensions", ".fk"]),
        sb.root.join("bridge.log"),
    );
    bridge.request(
        "initialize",
        json!({"processId": std::process::id(), "rootUri": uri(&sb.ws()), "capabilities": {},
               "clientInfo": {"name": "Claude Code", "version": "2.1.330"}}),
    );
    bridge.notify("initialized", json!({}));
    let td = json!({"textDocument": {"uri": uri(&a), "languageId": "fk", "version": 1, "text": "ERR inside\n"}});
    bridge.notify("textDocument/didOpen", td);
    let pos = json!({"textDocument": {"uri": uri(&a)}, "position": {"line": 0, "character": 0}});
    let hover = bridge.request("textDocument/hover", pos.clone());
    assert!(hover.to_string().contains("ERR inside"), "{hover}");
    swap_for_symlink(&a, &secret);
    let hover = bridge.request("textDocument/hover", pos);
    assert!(!hover.to_string().contains(SECRET), "{hover}");
    let got = log_text(&log);
    assert!(
        !got.contains(SECRET),
        "the outside text reached the server:\n{got}"
    );
}

/// A checker runs on the files it checked before when getDiagnostics {} comes: not on one
/// swapped for a symlink (it would read through the link and could echo the text).
#[test]
fn a_checker_does_not_run_on_a_file_swapped_for_a_symlink() {
    let sb = Sandbox::without_system_tools();
    let a = sb.write("a.txt", "inside\n");
    let secret = outside_file(&sb, "secret.txt");
    // A checker that reports the file's first line as its message.
    let checker = sb.script(
        "echo-checker",
        "IFS= read -r line < \"$1\"; echo \"$1:1:1: error: $line\"",
    );
    sb.add_tool("sh", "/bin/sh");
    let spec = format!("*.txt={} {{file}}", checker.display());
    let s = sb.serve(&[
        "--no-default-lsp",
        "--no-default-checkers",
        "--checker",
        &spec,
    ]);
    let mut c = s.client();
    wait_for("the checker's result", DEADLINE, || {
        let v = diagnostics(&mut c, json!({"uri": uri(&a)}));
        (v[0]["diagnostics"][0]["message"] == "inside").then_some(())
    });
    swap_for_symlink(&a, &secret);
    let v = diagnostics(&mut c, json!({}));
    assert!(!v.to_string().contains(SECRET), "{v}");
    let v = c.call("getDiagnostics", json!({"uri": uri(&a)}));
    assert!(!v.to_string().contains(SECRET), "{v}");
}

/// The editor model's reads of an open tab (getOpenEditors' line count, openFile's search)
/// go through the rule too.
#[test]
fn an_open_tab_swapped_for_a_symlink_is_not_read_through_the_link() {
    let sb = Sandbox::without_system_tools();
    let a = sb.write("a.txt", "inside\n");
    let secret = sb
        .root
        .write("secret.txt", format!("{SECRET}\n{SECRET}\n{SECRET}\n"));
    let s = sb.serve(&["--no-default-lsp", "--no-default-checkers"]);
    let mut c = s.client();
    c.call("openFile", json!({"filePath": s_(&a)}));
    swap_for_symlink(&a, &secret);
    let tabs = json_text(&c.call("getOpenEditors", json!({})));
    assert_eq!(tabs["tabs"][0]["lineCount"], 0, "{tabs}");
    let v = c.call("openFile", json!({"filePath": s_(&a), "startText": SECRET}));
    assert!(is_error(&v), "{v}");
}

fn s_(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// `ccide lsp` replaces an editor's clean buffer with what the CLI wrote after an accepted
/// edit: a file swapped for a symlink to an outside file instead is refused, and the editor
/// told so, never sent the outside text.
#[test]
fn an_editor_is_not_sent_an_outside_file_for_a_written_file_swapped_for_a_symlink() {
    let sb = Sandbox::without_system_tools();
    let server = sb.serve(&["--no-default-lsp", "--no-default-checkers"]);
    let f = sb.write("main.txt", "old\n");
    let secret = outside_file(&sb, "secret.txt");
    let mut claude = server.ready_client();
    let mut ed = LspProcess::spawn(
        &mut sb.command(&["lsp", "--no-follow"]),
        sb.root.join("ed.log"),
    );
    ed.request(
        "initialize",
        json!({"processId": std::process::id(), "rootUri": file_uri(&sb.ws()),
               "capabilities": {"workspace": {"applyEdit": true}},
               "clientInfo": {"name": "test-editor", "version": "1"}}),
    );
    ed.notify("initialized", json!({}));
    let td = json!({"uri": file_uri(&f), "languageId": "plaintext", "version": 1, "text": "old\n"});
    ed.notify("textDocument/didOpen", json!({"textDocument": td}));
    let id = open_diff(&mut claude, &f, "new\n", "tab");
    let shown = |v: &serde_json::Value| v["method"] == "window/showMessage";
    let m = ed.recv_where("the proposal shown", shown);
    assert!(m.to_string().contains("proposes an edit"), "{m}");
    sb.run_ok(&["diff", "accept"]);
    assert_eq!(texts(&claude.response(&id)), ["FILE_SAVED", "new\n"]);
    // What "the CLI wrote" is a symlink to the outside file.
    swap_for_symlink(&f, &secret);
    let m = ed.recv_where("the editor told of the write", |v| {
        v["method"] == "workspace/applyEdit" || shown(v)
    });
    assert!(!m.to_string().contains(SECRET), "{m}");
    assert_eq!(m["method"], "window/showMessage", "{m}");
    let said = m["params"]["message"].as_str().unwrap();
    assert!(
        said.contains(&format!("Claude Code wrote {}, but", f.display()))
            && said.contains("outside the workspace folders"),
        "{said}"
    );
}

/// Columns a tool prints are converted to UTF-16 against the file's text: a workspace file's
/// is read, a name that is a symlink to an outside file is not (its columns stay as printed,
/// rather than telling anything of the outside text).
#[test]
fn columns_are_converted_against_workspace_files_only() {
    let sb = Sandbox::without_system_tools();
    let text = "\u{1F980}\u{1F980}\u{1F980}x\n";
    sb.write("inside.txt", text);
    let outside = sb.root.write("outside.txt", text);
    std::os::unix::fs::symlink(&outside, sb.ws().join("link.txt")).unwrap();
    let _s = sb.serve(&["--no-default-lsp", "--no-default-checkers"]);
    let lines = "inside.txt:1:4: error: x\nlink.txt:1:4: error: x\n";
    let o = sb.run_stdin(
        &["diagnostics", "import", "--format", "compiler"],
        lines.as_bytes(),
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let o = sb.run_ok(&["diagnostics", "--json"]);
    let all: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let column = |name: &str| {
        let file = uri(&sb.ws().join(name));
        all.as_array()
            .unwrap()
            .iter()
            .find(|f| f["uri"] == file)
            .map(|f| f["diagnostics"][0]["range"]["start"]["character"].clone())
            .unwrap_or_else(|| panic!("no diagnostics for {name}: {all}"))
    };
    // The fourth character, after three crabs of two UTF-16 units each.
    assert_eq!(column("inside.txt"), 6);
    assert_eq!(column("link.txt"), 3);
}

/// `--lsp-warm` opens the first file a tsconfig.json names as a request would name it
/// (resolved), so reading it through the confinement rule finds it: `sub/../a.ts` is `a.ts`.
#[test]
fn a_warm_start_opens_the_file_a_tsconfig_names_by_its_resolved_path() {
    let sb = Sandbox::without_system_tools();
    let a = sb.write("a.ts", "ERR\n");
    std::fs::create_dir_all(sb.ws().join("sub")).unwrap();
    sb.write("tsconfig.json", r#"{"files": ["sub/../a.ts"]}"#);
    let log = sb.root.join("fake.log");
    let _s = sb.serve(&[
        "--no-default-lsp",
        "--no-default-checkers",
        "--lsp-warm",
        "--lsp",
        &fake_lsp("*.ts", "", &log),
    ]);
    let opened = wait_for("the warm document", DEADLINE, || {
        let got = log_text(&log);
        got.contains("textDocument/didOpen").then_some(got)
    });
    assert!(opened.contains(&format!("\"{}\"", uri(&a))), "{opened}");
}
