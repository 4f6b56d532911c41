//! Hunks as the unit of review (ccide-protocol(7) §5.5): `ccide diff accept --hunks` answers
//! FILE_SAVED with only the kept hunks applied, as the CLI reads the file (CRLF, BOM and
//! UTF-16 files alike); `--why` and the verdict record; `ccide diff show`'s numbered hunks and
//! its pager; `ccide diff review` driven through a pseudo-terminal.

use std::path::Path;

use crate::util::*;
use serde_json::{Value, json};

/// 26 lines, `a` to `z`.
fn base() -> String {
    ('a'..='z').map(|c| format!("{c}\n")).collect()
}

/// Three hunks: b, j and x upper-cased.
fn three_hunks(text: &str) -> String {
    text.replace("b\n", "B\n")
        .replace("j\n", "J\n")
        .replace("x\n", "X\n")
}

fn utf16le_with_bom(text: &str) -> Vec<u8> {
    let mut out = vec![0xFF, 0xFE];
    for u in text.encode_utf16() {
        out.extend_from_slice(&u.to_le_bytes());
    }
    out
}

/// The files a review must handle: (name, bytes on disk, the text the CLI reads).
pub fn files() -> Vec<(&'static str, Vec<u8>, String)> {
    let lf = base();
    vec![
        ("lf.txt", lf.clone().into_bytes(), lf.clone()),
        (
            "crlf.txt",
            lf.replace('\n', "\r\n").into_bytes(),
            lf.clone(),
        ),
        (
            "bom.txt",
            format!("\u{feff}{lf}").into_bytes(),
            format!("\u{feff}{lf}"),
        ),
        (
            "utf16.txt",
            utf16le_with_bom(&lf.replace('\n', "\r\n")),
            format!("\u{feff}{lf}"),
        ),
    ]
}

#[test]
fn accept_with_hunks_answers_the_original_with_only_those_hunks_applied() {
    let sb = Sandbox::new();
    let srv = sb.serve(&[]);
    let mut c = srv.client();
    for (name, bytes, read) in files() {
        let file = sb.write(name, &bytes);
        let id = open_diff(&mut c, &file, &three_hunks(&read), name);
        let d = &wait_pending(&sb, 1)[0];
        let did = d["id"].as_str().unwrap();
        let o = sb.run_ok(&["diff", "accept", did, "--hunks", "1,3", "--why", "keep j"]);
        assert_eq!(
            stdout(&o),
            format!(
                "accepted hunks 1,3 of 3 of diff {did} ({name}): Claude Code writes the proposal with the others left out\n"
            )
        );
        let expected = read.replace("b\n", "B\n").replace("x\n", "X\n");
        assert_eq!(
            texts(&c.response(&id)),
            vec!["FILE_SAVED".to_string(), expected],
            "{name}"
        );
        assert_eq!(
            std::fs::read(&file).unwrap(),
            bytes,
            "ccide never writes the file"
        );
    }
    // The verdicts are kept with the settled diffs, the last one for example:
    let settled = srv.control(&json!({"cmd": "diff.list"}))["settled"].clone();
    let last = &settled.as_array().unwrap()[3];
    assert_eq!(
        last["verdict"],
        json!({
            "kept": [1, 3],
            "dropped": [{"hunk": 2, "text": "@@ -7,7 +7,7 @@\n g\n h\n i\n-j\n+J\n k\n l\n m\n", "why": null}],
            "edited": [],
            "why": "keep j",
        })
    );
    assert_eq!(
        (&last["how"], &last["tab_name"]),
        (&json!("accepted"), &json!("utf16.txt"))
    );
}

#[test]
fn every_hunk_named_is_the_whole_proposal_and_reject_why_drops_them_all() {
    let sb = Sandbox::new();
    let file = sb.write("app.txt", base());
    let srv = sb.serve(&[]);
    let mut c = srv.client();
    let proposal = three_hunks(&base());
    let id = open_diff(&mut c, &file, &proposal, "t");
    let did = wait_pending(&sb, 1)[0]["id"].as_str().unwrap().to_string();
    let o = sb.run_ok(&["diff", "accept", &did, "--hunks", "3,1-2", "--json"]);
    let d: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        d["verdict"],
        json!({"kept": [1, 2, 3], "dropped": [], "edited": [], "why": null})
    );
    assert_eq!(
        texts(&c.response(&id)),
        vec!["FILE_SAVED".to_string(), proposal.clone()]
    );

    let id = open_diff(&mut c, &file, &proposal, "t");
    let did = wait_pending(&sb, 1)[0]["id"].as_str().unwrap().to_string();
    let o = sb.run_ok(&["diff", "reject", &did, "--why", "not these names", "--json"]);
    let d: Value = serde_json::from_slice(&o.stdout).unwrap();
    let dropped: Vec<&Value> = d["verdict"]["dropped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| &h["hunk"])
        .collect();
    assert_eq!(dropped, [&json!(1), &json!(2), &json!(3)]);
    assert_eq!(
        (&d["verdict"]["kept"], &d["verdict"]["why"]),
        (&json!([]), &json!("not these names"))
    );
    assert_eq!(texts(&c.response(&id)), vec!["DIFF_REJECTED", "t"]);
}

#[test]
fn hunk_lists_that_keep_nothing_or_name_no_hunk_are_refused() {
    let sb = Sandbox::new();
    let file = sb.write("app.txt", base());
    let srv = sb.serve(&[]);
    let mut c = srv.client();
    let _id = open_diff(&mut c, &file, &three_hunks(&base()), "t");
    let did = wait_pending(&sb, 1)[0]["id"].as_str().unwrap().to_string();
    let o = sb.run(&["diff", "accept", &did, "--hunks", ""]);
    let hint = "Run 'ccide --help' for the commands and their options.\n";
    assert_eq!(
        (o.status.code(), stderr(&o)),
        (
            Some(2),
            format!(
                "ccide: --hunks names no hunk: to keep none, reject the diff (ccide diff reject {did} --why TEXT)\n{hint}"
            )
        )
    );
    let o = sb.run(&["diff", "accept", &did, "--hunks", "2,4"]);
    assert_eq!(
        stderr(&o),
        format!(
            "ccide: '4' in --hunks 2,4 is not a hunk number: this diff has hunks 1 to 3 (ccide diff show numbers them)\n{hint}"
        )
    );
    let o = sb.run(&["diff", "reject", &did, "--hunks", "1"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("--hunks goes with accept"),
        "{}",
        stderr(&o)
    );
    let o = sb.run(&["diff", "show", &did, "--why", "x"]);
    assert_eq!(o.status.code(), Some(2));
    // Nothing was settled.
    assert_eq!(wait_pending(&sb, 1)[0]["id"], did.as_str());
}

#[test]
fn show_numbers_its_hunks_and_pages_only_on_a_terminal() {
    let sb = Sandbox::new();
    let file = sb.write("app.txt", base());
    let srv = sb.serve(&[]);
    let mut c = srv.client();
    let _id = open_diff(&mut c, &file, &three_hunks(&base()), "t");
    wait_pending(&sb, 1);
    let pager_out = sb.root.join("paged");
    let pager = sb.script(
        "pager",
        &format!(
            "echo \"$0 $* LESS=$LESS\" > '{}'; cat >> '{}'",
            pager_out.display(),
            pager_out.display()
        ),
    );
    let expected = "--- a/app.txt\n+++ b/app.txt\n\
        @@ -1,5 +1,5 @@ hunk 1/3\n a\n-b\n+B\n c\n d\n e\n\
        @@ -7,7 +7,7 @@ hunk 2/3\n g\n h\n i\n-j\n+J\n k\n l\n m\n\
        @@ -21,6 +21,6 @@ hunk 3/3\n u\n v\n w\n-x\n+X\n y\n z\n";
    // Not a terminal: no pager, whatever PAGER says.
    let o = sb
        .command(&["diff", "show"])
        .env("PAGER", &pager)
        .output()
        .unwrap();
    assert_eq!(stdout(&o), expected);
    assert!(!pager_out.exists());
    // On a terminal: GIT_PAGER first, split into words, never through a shell.
    let o = in_terminal(
        &sb,
        &["diff", "show"],
        &[
            ("GIT_PAGER", &format!("{} -x 'a b'", pager.display())),
            ("PAGER", "false"),
            ("NO_COLOR", "1"),
        ],
        b"",
    );
    assert_eq!(o, b"");
    assert_eq!(
        std::fs::read_to_string(&pager_out).unwrap(),
        format!("{} -x a b LESS=FRX\n{expected}", pager.display())
    );
    // A pager that cannot run: said, and the diff shown without it.
    let o = in_terminal(
        &sb,
        &["diff", "show"],
        &[("GIT_PAGER", "/nonexistent/pager"), ("NO_COLOR", "1")],
        b"",
    );
    assert_eq!(
        String::from_utf8_lossy(&o),
        format!(
            "ccide: cannot run the pager /nonexistent/pager: No such file or directory (os error 2) (set GIT_PAGER or PAGER to another, or to cat for none)\n{expected}"
        )
    );
    // PAGER when there is no GIT_PAGER (and git, if there is one, has no core.pager: the
    // sandbox's HOME has no .gitconfig, and the system's is not read).
    std::fs::remove_file(&pager_out).unwrap();
    let o = in_terminal(
        &sb,
        &["diff", "show"],
        &[
            ("PAGER", s(&pager)),
            ("NO_COLOR", "1"),
            ("LESS", "S"),
            ("GIT_CONFIG_NOSYSTEM", "1"),
        ],
        b"",
    );
    assert_eq!(o, b"");
    assert_eq!(
        std::fs::read_to_string(&pager_out).unwrap(),
        format!("{}  LESS=S\n{expected}", pager.display())
    );
}

/// Runs `ccide ARGS` of the sandbox in a pseudo-terminal (tests/fixtures/pty_drive.py) with
/// `env` added, answering each prompt it expects with its keys; returns what the terminal
/// showed, CRLF made LF.
pub fn in_terminal(sb: &Sandbox, args: &[&str], env: &[(&str, &str)], steps: &[u8]) -> Vec<u8> {
    let (status, screen) = in_terminal_status(sb, args, env, steps);
    assert_eq!(status, Some(0), "{}", String::from_utf8_lossy(&screen));
    screen
}

/// `in_terminal`, with the command's exit status.
pub fn in_terminal_status(
    sb: &Sandbox,
    args: &[&str],
    env: &[(&str, &str)],
    steps: &[u8],
) -> (Option<i32>, Vec<u8>) {
    let driver = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pty_drive.py");
    let mut cmd = sb.command(args);
    let program = cmd.get_program().to_owned();
    let argv: Vec<String> = std::iter::once(program.to_string_lossy().into_owned())
        .chain(args.iter().map(|a| a.to_string()))
        .collect();
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut drive = std::process::Command::new(python3());
    drive
        .arg(&driver)
        .arg(serde_json::to_string(&argv).unwrap());
    drive
        .env_clear()
        .envs(cmd.get_envs().filter_map(|(k, v)| Some((k, v?))))
        .current_dir(sb.ws());
    drive
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = drive.spawn().unwrap();
    use std::io::Write;
    child.stdin.take().unwrap().write_all(steps).unwrap();
    let o = child.wait_with_output().unwrap();
    assert_ne!(o.status.code(), Some(100), "pty driver: {}", stderr(&o));
    (o.status.code(), o.stdout)
}

/// Steps for the pty driver: (text the screen shows, keys typed then).
pub fn steps(steps: &[(&str, &str)]) -> Vec<u8> {
    steps
        .iter()
        .map(|(expect, keys)| format!("{}\n", json!([expect, keys])))
        .collect::<String>()
        .into_bytes()
}

#[test]
fn review_keeps_and_drops_hunks_with_reasons_on_every_kind_of_file() {
    let sb = Sandbox::new();
    let srv = sb.serve(&[]);
    let mut c = srv.client();
    for (name, bytes, read) in files() {
        let file = sb.write(name, &bytes);
        let id = open_diff(&mut c, &file, &three_hunks(&read), name);
        let did = wait_pending(&sb, 1)[0]["id"].as_str().unwrap().to_string();
        let screen = in_terminal(
            &sb,
            &["diff", "review", &did],
            &[("NO_COLOR", "1")],
            &steps(&[
                ("(1/3) Keep this hunk [", "y"),
                ("(2/3) Keep this hunk [", "n"),
                ("skips): ", "not j\n"),
                ("(3/3) Keep this hunk [", "y"),
            ]),
        );
        let expected = read.replace("b\n", "B\n").replace("x\n", "X\n");
        assert_eq!(
            texts(&c.response(&id)),
            vec!["FILE_SAVED".to_string(), expected],
            "{name}"
        );
        let note = match name {
            "crlf.txt" => {
                "note: the file has CRLF line endings; the proposal is LF UTF-8 text, and Claude Code restores them when it writes\n"
            }
            "utf16.txt" => {
                "note: the file has CRLF line endings and the UTF-16LE encoding; the proposal is LF UTF-8 text, and Claude Code restores them when it writes\n"
            }
            _ => "",
        };
        let bom = if read.starts_with('\u{feff}') {
            "\u{feff}"
        } else {
            ""
        };
        assert_eq!(
            String::from_utf8_lossy(&screen),
            format!(
                "diff {did}: {name}\n{note}--- a/{name}\n+++ b/{name}\n\
                 @@ -1,5 +1,5 @@\n {bom}a\n-b\n+B\n c\n d\n e\n\
                 (1/3) Keep this hunk [y,n,q,a,d,j,J,e,?]? y\n\
                 @@ -7,7 +7,7 @@\n g\n h\n i\n-j\n+J\n k\n l\n m\n\
                 (2/3) Keep this hunk [y,n,q,a,d,K,j,J,e,?]? n\n\
                 Why drop it? (optional, Enter skips): not j\n\
                 @@ -21,6 +21,6 @@\n u\n v\n w\n-x\n+X\n y\n z\n\
                 (3/3) Keep this hunk [y,n,q,a,d,K,e,?]? y\n\
                 accepted diff {did}: kept 1,3, dropped 2 ({name})\n"
            ),
            "{name}"
        );
    }
    let settled = srv.control(&json!({"cmd": "diff.list"}))["settled"].clone();
    assert_eq!(
        settled[0]["verdict"],
        json!({
            "kept": [1, 3],
            "dropped": [{"hunk": 2, "text": "@@ -7,7 +7,7 @@\n g\n h\n i\n-j\n+J\n k\n l\n m\n", "why": "not j"}],
            "edited": [],
            "why": null,
        })
    );
}

#[test]
fn review_splits_a_hunk_and_takes_an_edit_from_the_editor() {
    let sb = Sandbox::new();
    // The editor changes the added line D to Dee, and the context line e to E.
    let editor = sb.script("editor", "sed -i -e 's/^+D$/+Dee/' -e 's/^ e$/ E/' \"$1\"");
    let srv = sb.serve(&[]);
    let mut c = srv.client();
    for (name, bytes, read) in files() {
        let file = sb.write(name, &bytes);
        let proposal = read.replace("b\n", "B\n").replace("d\n", "D\n");
        let id = open_diff(&mut c, &file, &proposal, name);
        let did = wait_pending(&sb, 1)[0]["id"].as_str().unwrap().to_string();
        let screen = in_terminal(
            &sb,
            &["diff", "review", &did, "--why", "partly"],
            &[("NO_COLOR", "1"), ("EDITOR", s(&editor))],
            &steps(&[
                ("(1/1) Keep this hunk [", "s"),
                ("(1/2) Keep this hunk [", "J"),
                ("(2/2) Keep this hunk [", "e"),
                ("(1/2) Keep this hunk [", "n"),
                ("skips): ", "\n"),
            ]),
        );
        let expected = read.replace("e\n", "E\n").replace("d\n", "Dee\n");
        assert_eq!(
            texts(&c.response(&id)),
            vec!["FILE_SAVED".to_string(), expected],
            "{name}"
        );
        let bom = if read.starts_with('\u{feff}') {
            "\u{feff}"
        } else {
            ""
        };
        let screen = String::from_utf8_lossy(&screen).into_owned();
        let hunks = screen.split_once(&format!("+++ b/{name}\n")).unwrap().1;
        assert_eq!(
            hunks,
            format!(
                "@@ -1,7 +1,7 @@\n {bom}a\n-b\n+B\n c\n-d\n+D\n e\n f\n g\n\
                 (1/1) Keep this hunk [y,n,q,a,d,s,e,?]? s\n\
                 Split into 2 hunks.\n\
                 @@ -1,3 +1,3 @@\n {bom}a\n-b\n+B\n c\n\
                 (1/2) Keep this hunk [y,n,q,a,d,j,J,e,?]? J\n\
                 @@ -3,5 +3,5 @@\n c\n-d\n+D\n e\n f\n g\n\
                 (2/2) Keep this hunk [y,n,q,a,d,k,K,e,?]? e\n\
                 @@ -1,3 +1,3 @@\n {bom}a\n-b\n+B\n c\n\
                 (1/2) Keep this hunk [y,n,q,a,d,J,e,?]? n\n\
                 Why drop it? (optional, Enter skips): \n\
                 accepted diff {did}: edited 2, dropped 1 ({name})\n"
            ),
            "{name}"
        );
    }
    let settled = srv.control(&json!({"cmd": "diff.list"}))["settled"].clone();
    assert_eq!(
        settled[3]["verdict"],
        json!({
            "kept": [],
            "dropped": [{"hunk": 1, "text": "@@ -1,3 +1,3 @@\n \u{feff}a\n-b\n+B\n c\n", "why": null}],
            "edited": [2],
            "why": "partly",
        })
    );
}

#[test]
fn review_without_an_id_walks_the_pending_diffs_oldest_first_then_waits() {
    let sb = Sandbox::new();
    let srv = sb.serve(&[]);
    let mut c = srv.client();
    let first = sb.write("first.txt", base());
    let second = sb.write("second.txt", base());
    let third = sb.write("third.txt", base());
    let id1 = open_diff(&mut c, &first, &three_hunks(&base()), "one");
    wait_pending(&sb, 1);
    let id2 = open_diff(&mut c, &second, &base().replace("m\n", "M\n"), "two");
    wait_pending(&sb, 2);
    let waiting = sb.root.join("waiting");
    let screen = std::thread::scope(|scope| {
        let review = scope.spawn(|| {
            in_terminal(
                &sb,
                &["diff", "review"],
                &[("NO_COLOR", "1")],
                &json_steps(&[
                    json!(["diff 1: first.txt", ""]),
                    json!(["(1/3) Keep this hunk [", "d"]),
                    json!(["skips): ", "none of it\n"]),
                    json!(["diff 2: second.txt", ""]),
                    json!(["(1/1) Keep this hunk [", "a"]),
                    json!([
                        "waiting for Claude's next proposal (q to stop)",
                        "",
                        s(&waiting)
                    ]),
                    json!(["diff 3: third.txt", ""]),
                    json!(["(1/1) Keep this hunk [", "y"]),
                    json!(["waiting for Claude's next proposal (q to stop)", "q"]),
                ]),
            )
        });
        wait_for(
            "the review to wait",
            std::time::Duration::from_secs(30),
            || waiting.exists().then_some(()),
        );
        let id3 = open_diff(&mut c, &third, &base().replace("a\n", "A\n"), "three");
        let screen = review.join().unwrap();
        assert_eq!(
            texts(&c.response(&id3)),
            vec!["FILE_SAVED".to_string(), base().replace("a\n", "A\n")]
        );
        screen
    });
    assert_eq!(texts(&c.response(&id1)), vec!["DIFF_REJECTED", "one"]);
    assert_eq!(
        texts(&c.response(&id2)),
        vec!["FILE_SAVED".to_string(), base().replace("m\n", "M\n")]
    );
    let screen = String::from_utf8_lossy(&screen);
    assert!(
        screen.contains("rejected diff 1: every hunk dropped (first.txt)\ndiff 2: second.txt\n"),
        "{screen}"
    );
    assert!(
        screen.contains("accepted diff 2: kept 1 (second.txt)\nwaiting for Claude's next proposal (q to stop)\ndiff 3: third.txt\n"),
        "{screen}"
    );
    assert!(
        screen.ends_with(
            "accepted diff 3: kept 1 (third.txt)\nwaiting for Claude's next proposal (q to stop)\n"
        ),
        "{screen}"
    );
    let settled = srv.control(&json!({"cmd": "diff.list"}))["settled"].clone();
    let reasons: Vec<&Value> = settled[0]["verdict"]["dropped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| &h["why"])
        .collect();
    assert_eq!(reasons, [&json!("none of it"); 3]);
}

fn json_steps(steps: &[Value]) -> Vec<u8> {
    steps
        .iter()
        .map(|s| format!("{s}\n"))
        .collect::<String>()
        .into_bytes()
}

#[test]
fn review_colours_on_a_terminal_shows_help_and_ctrl_c_leaves_the_diff_pending() {
    let sb = Sandbox::new();
    let file = sb.write("app.txt", base());
    let srv = sb.serve(&[]);
    let mut c = srv.client();
    let _id = open_diff(&mut c, &file, &three_hunks(&base()), "t");
    let did = wait_pending(&sb, 1)[0]["id"].as_str().unwrap().to_string();
    let (status, screen) = in_terminal_status(
        &sb,
        &["diff", "review", &did],
        &[("TERM", "xterm")],
        &steps(&[
            ("(1/3) Keep this hunk [", "?"),
            ("(1/3) Keep this hunk [", "K"),
            ("(1/3) Keep this hunk [", "\u{3}"),
        ]),
    );
    assert_eq!(status, Some(1), "stopped without answering");
    let screen = String::from_utf8_lossy(&screen);
    assert!(
        screen
            .contains("\x1b[36m@@ -1,5 +1,5 @@\x1b[0m\n a\n\x1b[31m-b\x1b[0m\n\x1b[32m+B\x1b[0m\n"),
        "{screen:?}"
    );
    assert!(
        screen.contains(
            "\x1b[1;34m(1/3) Keep this hunk [y,n,q,a,d,j,J,e,?]? \x1b[0m?\ny - keep this hunk\n"
        ),
        "{screen:?}"
    );
    assert!(
        screen.contains("q - quit: answer now; undecided hunks are dropped\n"),
        "{screen:?}"
    );
    assert!(screen.contains("K\nNo previous hunk\n"), "{screen:?}");
    assert!(
        screen.ends_with("\nstopped: the diff stays pending\n"),
        "{screen:?}"
    );
    assert_eq!(wait_pending(&sb, 1)[0]["id"], did.as_str());
}

#[test]
fn review_q_answers_at_once_dropping_the_undecided_hunks() {
    let sb = Sandbox::new();
    let file = sb.write("app.txt", base());
    let srv = sb.serve(&[]);
    let mut c = srv.client();
    let id = open_diff(&mut c, &file, &three_hunks(&base()), "t");
    let did = wait_pending(&sb, 1)[0]["id"].as_str().unwrap().to_string();
    let screen = in_terminal(
        &sb,
        &["diff", "review", &did],
        &[("NO_COLOR", "1")],
        &steps(&[
            ("(1/3) Keep this hunk [", "J"),
            ("(2/3) Keep this hunk [", "y"),
            ("(3/3) Keep this hunk [", "q"),
        ]),
    );
    assert_eq!(
        texts(&c.response(&id)),
        vec!["FILE_SAVED".to_string(), base().replace("j\n", "J\n")]
    );
    assert!(
        String::from_utf8_lossy(&screen)
            .ends_with("? q\naccepted diff 1: kept 2, dropped 1,3 (app.txt)\n"),
        "{}",
        String::from_utf8_lossy(&screen)
    );
}

#[test]
fn review_walk_skips_a_diff_it_cannot_read_and_goes_on() {
    let sb = Sandbox::new();
    let srv = sb.serve(&[]);
    let mut c = srv.client();
    let first = sb.write("first.txt", base());
    let second = sb.write("second.txt", base());
    let _id1 = open_diff(&mut c, &first, &three_hunks(&base()), "one");
    let d1 = wait_pending(&sb, 1)[0].clone();
    let id2 = open_diff(&mut c, &second, &base().replace("m\n", "M\n"), "two");
    wait_pending(&sb, 2);
    let original = Path::new(d1["dir"].as_str().unwrap()).join("original");
    std::fs::remove_file(&original).unwrap();
    let screen = in_terminal(
        &sb,
        &["diff", "review"],
        &[("NO_COLOR", "1")],
        &steps(&[
            ("(1/1) Keep this hunk [", "y"),
            ("waiting for Claude's next proposal (q to stop)", "q"),
        ]),
    );
    assert_eq!(
        texts(&c.response(&id2)),
        vec!["FILE_SAVED".to_string(), base().replace("m\n", "M\n")]
    );
    let screen = String::from_utf8_lossy(&screen);
    assert!(
        screen.starts_with(&format!(
            "skipped: cannot read {}: No such file or directory (os error 2)\ndiff 2: second.txt\n",
            original.display()
        )),
        "{screen}"
    );
    // The first is still pending, for ccide diff reject.
    assert_eq!(wait_pending(&sb, 1)[0]["id"], "1");
}

/// The server stopping while the walk waits for the next proposal ends the walk, saying so,
/// instead of failing on the control socket it can no longer reach.
#[test]
fn review_waiting_for_the_next_proposal_ends_when_the_server_stops() {
    let sb = Sandbox::new();
    let mut srv = sb.serve(&[]);
    let waiting = sb.root.join("waiting");
    let (status, screen) = std::thread::scope(|scope| {
        let review = scope.spawn(|| {
            in_terminal_status(
                &sb,
                &["diff", "review"],
                &[("NO_COLOR", "1")],
                &json_steps(&[
                    json!([
                        "waiting for Claude's next proposal (q to stop)",
                        "",
                        s(&waiting)
                    ]),
                    json!(["no more proposals to review", ""]),
                ]),
            )
        });
        wait_for(
            "the review to wait",
            std::time::Duration::from_secs(30),
            || waiting.exists().then_some(()),
        );
        srv.stop_with("TERM");
        review.join().unwrap()
    });
    assert_eq!(
        (status, String::from_utf8_lossy(&screen).as_ref()),
        (
            Some(0),
            "waiting for Claude's next proposal (q to stop)\nthe ccide server stopped: no more proposals to review\n"
        )
    );
}
