//! reformat_file: a stand-in formatter on a temporary copy beside the file; the original is
//! replaced atomically, keeping its mode, only when the formatter exited 0.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use crate::util::*;
use serde_json::{Value, json};

fn reformat(c: &mut Client, path: &Path) -> Value {
    c.call(
        "reformat_file",
        json!({"file_path": path.to_str().unwrap()}),
    )
}

/// The names in a directory, sorted: no temporary copy may be left behind.
fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn a_formatter_that_rewrites_the_file_in_place() {
    let sb = Sandbox::new();
    let fmt = sb.script(
        "upper.sh",
        r#"t=$(tr a-z A-Z < "$1") && printf '%s\n' "$t" > "$1""#,
    );
    let file = sb.write("notes.txt", "hello\nworld\n");
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o640)).unwrap();
    let spec = format!("*.txt={} {{file}}", fmt.display());
    let s = sb.serve(&["--formatter", &spec]);
    let mut c = s.client();
    let r = reformat(&mut c, &file);
    assert_eq!(texts(&r), ["OK"], "{r}");
    assert!(!is_error(&r));
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "HELLO\nWORLD\n");
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o7777;
    assert_eq!(mode, 0o640);
    assert_eq!(names(&sb.ws()), ["notes.txt"]);
}

#[test]
fn a_formatter_that_prints_the_result_and_one_reading_stdin() {
    let sb = Sandbox::new();
    let fmt = sb.script("print.sh", r#"tr a-z A-Z < "$1""#);
    let file = sb.write("sub/a.txt", "abc\n");
    let piped = sb.write("b.up", "xyz\n");
    let spec = format!("*.txt={} {{file}}", fmt.display());
    // Without {file} the text goes through stdin and stdout.
    let s = sb.serve(&["--formatter", &spec, "--formatter", "*.up=tr a-z A-Z"]);
    let mut c = s.client();
    assert_eq!(texts(&reformat(&mut c, &file)), ["OK"]);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "ABC\n");
    assert_eq!(texts(&reformat(&mut c, &piped)), ["OK"]);
    assert_eq!(std::fs::read_to_string(&piped).unwrap(), "XYZ\n");
    // A formatter that succeeds without output and without a change leaves the file alone.
    let quiet = sb.script("quiet.sh", "exit 0");
    drop(c);
    drop(s);
    let spec = format!("*.txt={} {{file}}", quiet.display());
    let s = sb.serve(&["--formatter", &spec]);
    let mut c = s.client();
    assert_eq!(texts(&reformat(&mut c, &file)), ["OK"]);
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "ABC\n");
    assert_eq!(names(&sb.ws().join("sub")), ["a.txt"]);
}

#[test]
fn a_failing_formatter_leaves_the_file_intact_and_reports_its_message() {
    let sb = Sandbox::new();
    let fmt = sb.script(
        "fail.sh",
        r#"echo garbage > "$1"; echo "cannot parse $1 at line 3" >&2; exit 1"#,
    );
    let file = sb.write("x.txt", "keep me\n");
    let spec = format!("*.txt={} {{file}}", fmt.display());
    let s = sb.serve(&["--formatter", &spec]);
    let mut c = s.client();
    let r = reformat(&mut c, &file);
    assert!(is_error(&r), "{r}");
    let msg = &texts(&r)[0];
    // The message names the user's file, not the temporary copy.
    assert!(
        msg.contains(&format!("cannot parse {} at line 3", file.display())),
        "{msg}"
    );
    assert!(msg.contains("exit status 1"), "{msg}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "keep me\n");
    assert_eq!(names(&sb.ws()), ["x.txt"]);
}

#[test]
fn missing_outside_and_unformattable_files_are_refused() {
    let sb = Sandbox::new();
    let fmt = sb.script("print.sh", r#"tr a-z A-Z < "$1""#);
    let outside = sb.root.write("outside.txt", "secret\n");
    let odd = sb.write("data.xyz", "abc\n");
    let spec = format!("*.txt={} {{file}}", fmt.display());
    let s = sb.serve(&["--formatter", &spec]);
    let mut c = s.client();

    let r = reformat(&mut c, &sb.ws().join("missing.txt"));
    assert!(is_error(&r));
    assert_eq!(texts(&r), ["File not found"]);

    let r = reformat(&mut c, &outside);
    assert!(is_error(&r));
    assert!(texts(&r)[0].contains("outside the workspace"), "{r}");
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "secret\n");

    let r = reformat(&mut c, &odd);
    assert!(is_error(&r));
    assert!(texts(&r)[0].starts_with("no formatter for data.xyz"), "{r}");
    assert!(texts(&r)[0].contains("--formatter"), "{r}");
    assert_eq!(std::fs::read_to_string(&odd).unwrap(), "abc\n");

    // A missing argument is a protocol error.
    let r = c.call("reformat_file", json!({}));
    assert_eq!(r["error"]["code"], -32602, "{r}");
}

#[test]
fn the_file_placeholder_is_one_argument_whatever_the_path_holds() {
    let sb = Sandbox::new();
    // Fails unless it gets exactly one argument naming an existing file.
    let fmt = sb.script(
        "one.sh",
        r#"[ "$#" -eq 1 ] && [ -f "$1" ] || { echo "got $# arguments" >&2; exit 1; }
t=$(tr a-z A-Z < "$1") && printf '%s\n' "$t" > "$1""#,
    );
    let file = sb.write("my dir/it's a \"quoted\" $name.txt", "odd\n");
    // The pattern has a slash: it matches the workspace-relative path.
    let spec = format!("my dir/*.txt='{}' {{file}}", fmt.display());
    let s = sb.serve(&["--formatter", &spec]);
    let mut c = s.client();
    let r = reformat(&mut c, &file);
    assert_eq!(texts(&r), ["OK"], "{r}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "ODD\n");
    assert_eq!(
        names(&sb.ws().join("my dir")),
        ["it's a \"quoted\" $name.txt"]
    );
}

/// A Rust file rustfmt changes; `mod util;` names a file that does not exist, so rustfmt must
/// format this file alone.
const UNFORMATTED_RS: &str = "mod util;\nfn main( ) { let x=1;println!(\"{x}\") ; }\n";

#[test]
fn the_built_in_rust_formatter_is_rustfmt_on_path() {
    let sb = Sandbox::new();
    sb.add_tool("rustfmt", rustfmt());
    sb.write(
        "Cargo.toml",
        "[package]\nname = \"x\"\nedition = \"2024\"\n",
    );
    let rs = sb.write("src/main.rs", UNFORMATTED_RS);
    let s = sb.serve(&[]);
    let mut c = s.client();
    let r = reformat(&mut c, &rs);
    assert_eq!(texts(&r), ["OK"], "{r}");
    assert_eq!(
        std::fs::read_to_string(&rs).unwrap(),
        "mod util;\nfn main() {\n    let x = 1;\n    println!(\"{x}\");\n}\n"
    );
    assert_eq!(names(&sb.ws().join("src")), ["main.rs"]);
    assert_eq!(names(&sb.ws()), ["Cargo.toml", "src"]);
}

#[test]
#[ignore = "needs ruff: .ci/run installs it and names it in CCIDE_TEST_RUFF"]
fn the_built_in_python_formatter_is_ruff_on_path() {
    let sb = Sandbox::new();
    sb.add_tool("ruff", ruff());
    let py = sb.write("app.py", "x = [1,2 ,3]\nprint( x )\n");
    let s = sb.serve(&[]);
    let mut c = s.client();
    let r = reformat(&mut c, &py);
    assert_eq!(texts(&r), ["OK"], "{r}");
    assert_eq!(
        std::fs::read_to_string(&py).unwrap(),
        "x = [1, 2, 3]\nprint(x)\n"
    );
    assert_eq!(names(&sb.ws()), ["app.py"]);
}
