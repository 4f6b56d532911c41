//! Real editors with `ccide lsp`, each configured exactly as README.md's Editors section says
//! (the configuration is taken from README.md here, so what is tested is what is written) and
//! driven as a person would: headless with a script where the editor has a headless mode
//! (neovim, emacs), otherwise in a terminal under tmux, with keystrokes and by reading the
//! screen (vim with ALE, kakoune with kakoune-lsp). Each checks what Claude Code receives: the
//! selection of `héllo wörld 🦀` with its UTF-16 columns, the open tab, the unsaved buffer,
//! and one `selection_changed` per action. The editors are found where .ci/editor-install puts
//! them (or where `CCIDE_NVIM`, `CCIDE_EMACS`, `CCIDE_VIM`, `CCIDE_KAK`, `CCIDE_KAK_LSP`,
//! `CCIDE_HX` and `CCIDE_TMUX` say), never by PATH.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use crate::lsp_editor::{HELLO, status_where, tabs};
use crate::util::{BIN, Client, DEADLINE, Sandbox, list_locks, wait_for};
use serde_json::{Value, json};

/// How long the editor steps may take: an editor starting `ccide lsp`, a person's pauses.
pub(crate) const STEP: Duration = Duration::from_secs(20);

/// The first `lang` block of README.md's section whose heading begins with `heading`.
fn recipe(heading: &str, lang: &str) -> String {
    recipe_nth(heading, lang, 0)
}

/// The `n`th (from 0) `lang` block of README.md's section whose heading begins with `heading`.
pub(crate) fn recipe_nth(heading: &str, lang: &str, n: usize) -> String {
    let readme = include_str!("../README.md");
    let section = readme
        .split("\n### ")
        .find(|s| s.starts_with(heading))
        .unwrap_or_else(|| panic!("README.md has no section \"### {heading}\""));
    let section = section.split("\n## ").next().unwrap();
    section
        .split(&format!("```{lang}\n"))
        .nth(n + 1)
        .and_then(|b| b.split("```").next())
        .unwrap_or_else(|| panic!("README.md's section {heading} has no {lang} block {n}"))
        .to_string()
}

/// An editor's program: `$VAR`, else where .ci/editor-install puts it.
pub(crate) fn program(var: &str, default: &str, what: &str) -> PathBuf {
    let p = std::env::var_os(var).map_or_else(|| PathBuf::from(default), PathBuf::from);
    assert!(
        p.is_file(),
        "{what} is not at {}: run .ci/editor-install, or set {var}",
        p.display()
    );
    p
}

/// The first line `program ARGS` prints: its version.
fn version(program: &Path, args: &[&str]) -> String {
    let o = Command::new(program).args(args).output().unwrap();
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .next()
        .unwrap_or("")
        .to_string()
}

/// The sandbox's bin with `ccide` in it (and what else the editor needs on PATH), and the
/// environment a person's shell would give the editor.
pub(crate) fn person(sb: &Sandbox, cmd: &mut Command) {
    let bin = sb.root.join("bin");
    let _ = std::os::unix::fs::symlink(BIN, bin.join("ccide"));
    cmd.env_clear()
        .env("HOME", sb.home())
        .env("CLAUDE_CONFIG_DIR", sb.config())
        .env("PATH", format!("{}:/usr/bin:/bin", bin.display()))
        .env("LANG", "C.UTF-8")
        .current_dir(sb.ws());
}

/// The params of a `selection_changed` on line 2 of HELLO (or `line`).
fn selection(f: &Path, text: &str, (l1, c1): (u64, u64), (l2, c2): (u64, u64)) -> Value {
    json!({"text": text, "filePath": f, "fileUrl": format!("file://{}", f.display()),
        "selection": {"start": {"line": l1, "character": c1}, "end": {"line": l2, "character": c2},
        "isEmpty": (l1, c1) == (l2, c2)}})
}

/// What one action sent: `selection_changed` and `at_mentioned` notifications, in order, until
/// `last` (which ends the action) arrived and then 400 ms passed without another (the follow-up
/// of a code action request comes 100 ms after it).
pub(crate) fn action(claude: &mut Client, last: &str, failed: &dyn Fn()) -> Vec<(String, Value)> {
    let mut got = Vec::new();
    let keep = |m: &Value| m["method"] == "selection_changed" || m["method"] == "at_mentioned";
    wait_for(&format!("{last} from the editor"), STEP, || {
        failed();
        let new: Vec<Value> = claude.drain(Duration::from_millis(20));
        for m in new {
            if keep(&m) {
                got.push((
                    m["method"].as_str().unwrap().to_string(),
                    m["params"].clone(),
                ));
            } else {
                claude.backlog.push_back(m);
            }
        }
        got.iter().any(|(m, _)| m == last).then_some(())
    });
    for m in claude.drain(Duration::from_millis(400)) {
        if keep(&m) {
            got.push((
                m["method"].as_str().unwrap().to_string(),
                m["params"].clone(),
            ));
        } else {
            claude.backlog.push_back(m);
        }
    }
    got
}

fn sel(v: Value) -> (String, Value) {
    ("selection_changed".into(), v)
}

fn mention(f: &Path, lines: Option<(u64, u64)>) -> (String, Value) {
    let v = match lines {
        Some((a, b)) => json!({"filePath": f, "lineStart": a, "lineEnd": b}),
        None => json!({"filePath": f}),
    };
    ("at_mentioned".into(), v)
}

/// A scripted editor's process, killed when the test ends before it exits.
pub(crate) struct Running(pub(crate) std::process::Child);

impl Running {
    pub(crate) fn exited(&mut self) -> std::process::ExitStatus {
        wait_for("the editor to exit", DEADLINE, || {
            self.0.try_wait().unwrap()
        })
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Marker files through which a scripted editor and the test take turns.
pub(crate) struct Sync(pub(crate) PathBuf);

impl Sync {
    pub(crate) fn new(sb: &Sandbox) -> Sync {
        let d = sb.root.join("sync");
        std::fs::create_dir_all(&d).unwrap();
        Sync(d)
    }

    pub(crate) fn done(&self, name: &str) {
        std::fs::write(self.0.join(name), "").unwrap();
    }

    /// Writes `name` whole (beside it, then renamed): the editor never reads it half written.
    fn say(&self, name: &str, text: &str) {
        let part = self.0.join(format!("{name}.part"));
        std::fs::write(&part, text).unwrap();
        std::fs::rename(&part, self.0.join(name)).unwrap();
    }

    pub(crate) fn step(&self, name: &str, failed: &dyn Fn()) -> String {
        wait_for(&format!("the editor to reach {name}"), STEP, || {
            failed();
            std::fs::read_to_string(self.0.join(name)).ok()
        })
    }

    pub(crate) fn error(&self) -> Option<String> {
        std::fs::read_to_string(self.0.join("error")).ok()
    }
}

/// `nvim` headless running tests/fixtures/`fixture` on `file`, configured as README.md says
/// (word for word, with `ccide` on PATH).
fn neovim(sb: &Sandbox, nvim: &Path, sync: &Sync, fixture: &str, file: &Path) -> Running {
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(fixture);
    let init = recipe("neovim (0.7 or later; tried: 0.7.2)", "lua");
    sb.root.write("home/.config/nvim/init.lua", init);
    let mut cmd = Command::new(nvim);
    person(sb, &mut cmd);
    let child = cmd
        .args(["--headless", "-i", "NONE", "-n", "-c"])
        .arg(format!("luafile {}", script.display()))
        .env("SYNC", &sync.0)
        .env("FILE", file)
        .env("WS", sb.ws())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    Running(child)
}

/// Fails the test with neovim's error and its LSP log, once the fixture has written one.
fn neovim_failed(sb: &Sandbox, sync: &Sync) {
    if let Some(e) = sync.error() {
        let log =
            std::fs::read_to_string(sb.home().join(".cache/nvim/lsp.log")).unwrap_or_default();
        panic!("neovim failed: {e}\nlsp.log:\n{log}");
    }
}

#[test]
#[ignore = "needs neovim: installed by .ci/run"]
fn neovim_selects_mentions_edits_and_reviews_a_proposal() {
    let nvim = program("CCIDE_NVIM", "/usr/bin/nvim", "neovim");
    assert_eq!(
        version(&nvim, &["--version"]),
        "NVIM v0.7.2",
        "README says tried: 0.7.2"
    );
    let sb = Sandbox::new();
    let server = sb.serve(&[]);
    let f = sb.write("hello.py", HELLO);
    let b = sb.write("b.py", "print('b')\n");
    let sync = Sync::new(&sb);
    let mut claude = server.ready_client();
    let mut child = neovim(&sb, &nvim, &sync, "neovim.lua", &f);
    let failed = || neovim_failed(&sb, &sync);
    sync.step("opened", &failed);
    status_where(&sb, "both files open, hello.py active", |s| {
        s["tabs"] == tabs(&[(&b, false), (&f, true)])
    });
    sync.done("tabs-checked");
    // The README's \cs: executeCommand ccide.select with the visual selection.
    let hello = selection(&f, "héllo wörld 🦀", (1, 11), (1, 25));
    assert_eq!(
        action(&mut claude, "selection_changed", &failed),
        [sel(hello)]
    );
    sync.done("selection-1");
    // The code action, chosen after 300 ms: the follow-up sent it, the choice does not again.
    // (neovim 0.7 ends this range at character 24, between the halves of the crab.)
    let world = selection(&f, "wörld 🦀", (1, 17), (1, 25));
    assert_eq!(
        action(&mut claude, "selection_changed", &failed),
        [sel(world)]
    );
    sync.done("selection-2");
    assert_eq!(
        action(&mut claude, "at_mentioned", &failed),
        [mention(&f, Some((1, 1)))]
    );
    sync.done("mention-1");
    // From the menu at the cursor: the cursor follows (as the selection), then the file.
    let got = action(&mut claude, "at_mentioned", &failed);
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!(got[0].1["selection"]["isEmpty"], true, "{got:?}");
    assert_eq!(got[1], mention(&f, None));
    sync.done("mention-2");
    // What the buffer holds: with the python indent plugin (the README's init.lua keeps
    // filetype plugins on), the new line's indent is neovim's choice.
    let more = sync.step("changed", &failed);
    assert!(
        more.starts_with(HELLO) && more.ends_with("# more\n"),
        "{more:?}"
    );
    status_where(&sb, "hello.py unsaved", |s| {
        s["documents"] == json!([{"path": f, "bytes": more.len()}])
    });
    sync.done("dirty-checked");
    sync.step("saved", &failed);
    status_where(&sb, "hello.py saved", |s| s["documents"] == json!([]));
    assert_eq!(std::fs::read_to_string(&f).unwrap(), more);
    sync.done("saved-checked");
    let tab = "✻ [Claude Code] hello.py (0a1b2c) ⧉";
    let open_diff = claude.send_request(
        "tools/call",
        json!({"name": "openDiff", "arguments": {"old_file_path": f, "new_file_path": f, "new_file_contents": "print(\"new\")\n", "tab_name": tab}}),
    );
    // Answered once neovim has gone through the proposal's code actions.
    let answer = wait_for("the answer to openDiff", STEP, || {
        failed();
        let got = claude.drain(Duration::from_millis(20));
        got.into_iter().find(|m| m["id"] == open_diff)
    });
    assert_eq!(
        crate::util::texts(&answer),
        ["FILE_SAVED", "print(\"edited\")\n"]
    );
    std::fs::write(&f, "print(\"edited\")\n").unwrap();
    sync.done("written");
    let reloaded: Value = serde_json::from_str(&sync.step("reloaded", &failed)).unwrap();
    // neovim marks a buffer changed by workspace/applyEdit as modified, though it now equals
    // the file; ccide knows it does, and holds no unsaved content for it.
    assert_eq!(reloaded["modified"], true);
    status_where(&sb, "no unsaved content", |s| s["documents"] == json!([]));
    assert_eq!(
        reloaded["messages"],
        json!([
            format!(
                "Claude Code proposes an edit to {}: the code actions on it show, accept or reject it (or `ccide diff show 1`)",
                f.display()
            ),
            format!(
                "Claude Code's proposal for {} is {} (`ccide diff show 1` shows the change)",
                f.display(),
                sb.state().join("diffs/1/hello.py").display()
            ),
        ])
    );
    let status = child.exited();
    assert!(status.success(), "neovim exited with {status}");
    status_where(&sb, "neovim's tabs gone", |s| {
        s["tabs"] == json!([]) && s["documents"] == json!([])
    });
    // Nothing more than the actions sent.
    let rest = claude.before_ping();
    assert!(
        rest.iter().all(|m| m["method"] != "selection_changed"),
        "{rest:?}"
    );
}

/// 20 lines of Python, `NEW = i` on the lines `changed` (from 1), else `line = i`: a proposal
/// changing lines 2, 10 and 18 has three hunks.
fn hunk_lines(changed: &[usize]) -> String {
    (1..=20)
        .map(|i| match changed.contains(&i) {
            true => format!("NEW = {i}\n"),
            false => format!("line = {i}\n"),
        })
        .collect()
}

/// Proposes `hunk_lines(&[2, 10, 18])` for `f` (three hunks); the request's id.
fn propose_three_hunks(claude: &mut Client, f: &Path) -> Value {
    claude.send_request(
        "tools/call",
        json!({"name": "openDiff", "arguments": {"old_file_path": f, "new_file_path": f,
            "new_file_contents": hunk_lines(&[2, 10, 18]), "tab_name": "hunks.py"}}),
    )
}

#[test]
#[ignore = "needs neovim: installed by .ci/run"]
fn neovim_reviews_a_proposal_hunk_by_hunk() {
    let nvim = program("CCIDE_NVIM", "/usr/bin/nvim", "neovim");
    let sb = Sandbox::new();
    let server = sb.serve(&["--no-default-checkers"]);
    let lines = hunk_lines;
    let f = sb.write("hunks.py", lines(&[]));
    let sync = Sync::new(&sb);
    let mut claude = server.ready_client();
    let mut child = neovim(&sb, &nvim, &sync, "neovim_hunks.lua", &f);
    let failed = || neovim_failed(&sb, &sync);
    sync.step("opened", &failed);
    let open_diff = propose_three_hunks(&mut claude, &f);
    let hints: Value = serde_json::from_str(&sync.step("hints", &failed)).unwrap();
    let hint = |l: u64, n: u64| {
        json!({"lnum": l, "end_lnum": l + 1, "severity": 4,
        "message": format!("Claude proposes (hunk {n}/3): NEW = {}", l + 1)})
    };
    assert_eq!(hints, json!([hint(1, 1), hint(9, 2), hint(17, 3)]));
    let answer = wait_for("the answer to openDiff", STEP, || {
        failed();
        let got = claude.drain(Duration::from_millis(20));
        got.into_iter().find(|m| m["id"] == open_diff)
    });
    assert_eq!(
        crate::util::texts(&answer),
        ["FILE_SAVED".to_string(), lines(&[2])]
    );
    sync.step("cleared", &failed);
    let settled = server.control(&json!({"cmd": "diff.list"}))["settled"].clone();
    let verdict = &settled[0]["verdict"];
    let dropped: Vec<(&Value, &Value)> = verdict["dropped"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| (&d["hunk"], &d["why"]))
        .collect();
    assert_eq!(
        (&verdict["kept"], dropped),
        (
            &json!([1]),
            vec![
                (&json!(2), &Value::Null),
                (&json!(3), &json!("18 is still read as it is"))
            ]
        )
    );
    let status = child.exited();
    assert!(status.success(), "neovim exited with {status}");
}

/// Review after the fact in neovim: the hunks Claude changed in the latest turn are hints, one
/// is undone from the code action menu, and the file on disk and the buffer lose exactly it.
#[test]
#[ignore = "needs neovim: installed by .ci/run"]
fn neovim_undoes_a_hunk_claude_changed() {
    use crate::turn_review::{ONE, edit, prompt};
    let nvim = program("CCIDE_NVIM", "/usr/bin/nvim", "neovim");
    let sb = Sandbox::new();
    let _server = sb.serve(&["--no-default-checkers"]);
    let lines = hunk_lines;
    let f = sb.write("changed.py", lines(&[]));
    prompt(&sb, ONE);
    edit(&sb, ONE, &f, lines(&[2, 10, 18]).as_bytes());
    let sync = Sync::new(&sb);
    let mut child = neovim(&sb, &nvim, &sync, "neovim_changes.lua", &f);
    let failed = || neovim_failed(&sb, &sync);
    let hint = |l: u64, n: u64| {
        json!({"lnum": l, "end_lnum": l + 1, "severity": 4,
        "message": format!("Claude changed (hunk {n}/3), was: line = {}", l + 1)})
    };
    let hints: Value = serde_json::from_str(&sync.step("hints", &failed)).unwrap();
    assert_eq!(hints, json!([hint(1, 1), hint(9, 2), hint(17, 3)]));
    let undone: Value = serde_json::from_str(&sync.step("undone", &failed)).unwrap();
    assert_eq!(std::fs::read(&f).unwrap(), lines(&[2, 18]).into_bytes());
    assert_eq!(
        undone,
        json!({"hints": [hint(1, 1), hint(17, 3)], "buffer": lines(&[2, 18])})
    );
    let status = child.exited();
    assert!(status.success(), "neovim exited with {status}");
}

/// emacs in batch mode running tests/fixtures/eglot.el for `scenario`, configured as README.md
/// says.
fn emacs(sb: &Sandbox, sync: &Sync, f: &Path, scenario: &str) -> Running {
    let emacs = program("CCIDE_EMACS", "/usr/bin/emacs", "emacs");
    assert_eq!(
        version(&emacs, &["--version"]),
        "GNU Emacs 28.2",
        "README says tried: 28.2"
    );
    assert!(
        Path::new("/usr/share/emacs/site-lisp/elpa-src/eglot-1.9").is_dir()
            || std::env::var_os("CCIDE_EMACS").is_some(),
        "README says tried: eglot 1.9 (Debian's elpa-eglot)"
    );
    let init = recipe("emacs with eglot (tried: emacs 28.2, eglot 1.9)", "elisp");
    let init_el = sb
        .root
        .write("init.el", format!("(require 'eglot)\n{init}"));
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/eglot.el");
    let mut cmd = Command::new(&emacs);
    person(sb, &mut cmd);
    let child = cmd
        .args(["--batch", "-l", script])
        .env("SYNC", &sync.0)
        .env("FILE", f)
        .env("INIT", &init_el)
        .env("SCENARIO", scenario)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(sb.root.join("emacs.log")).unwrap())
        .spawn()
        .unwrap();
    Running(child)
}

/// What emacs wrote to its stderr so far.
fn emacs_log(sb: &Sandbox) -> String {
    std::fs::read_to_string(sb.root.join("emacs.log")).unwrap_or_default()
}

/// Fails the test with emacs's error and its stderr, once the fixture has written one.
fn emacs_failed(sb: &Sandbox, sync: &Sync) {
    if let Some(e) = sync.error() {
        panic!("emacs failed: {e}\n{}", emacs_log(sb));
    }
}

#[test]
#[ignore = "needs emacs and eglot: installed by .ci/run"]
fn emacs_eglot_selects_mentions_edits_and_accepts_a_proposal_as_edited() {
    let sb = Sandbox::new();
    let server = sb.serve(&[]);
    let f = sb.write("hello.py", HELLO);
    let sync = Sync::new(&sb);
    let mut claude = server.ready_client();
    let mut child = emacs(&sb, &sync, &f, "review");
    let log = || emacs_log(&sb);
    let failed = || emacs_failed(&sb, &sync);
    sync.step("opened", &failed);
    status_where(&sb, "hello.py open", |s| s["tabs"] == tabs(&[(&f, true)]));
    sync.done("tabs-checked");
    // Chosen from eglot's menu after 300 ms: the follow-up sent it, the choice does not again.
    let hello = selection(&f, "héllo wörld 🦀", (1, 11), (1, 25));
    assert_eq!(
        action(&mut claude, "selection_changed", &failed),
        [sel(hello)]
    );
    sync.done("selection-1");
    // Line 2 from the menu: selected (the follow-up), then mentioned.
    let line = selection(&f, "    print(\"héllo wörld 🦀\")\n", (1, 0), (2, 0));
    assert_eq!(
        action(&mut claude, "at_mentioned", &failed),
        [sel(line), mention(&f, Some((1, 1)))]
    );
    sync.done("mention-1");
    let more = sync.step("changed", &failed);
    assert_eq!(more, format!("{HELLO}# more\n"));
    status_where(&sb, "hello.py unsaved", |s| {
        s["documents"] == json!([{"path": f, "bytes": more.len()}])
    });
    sync.done("dirty-checked");
    status_where(&sb, "hello.py saved", |s| s["documents"] == json!([]));
    assert_eq!(std::fs::read_to_string(&f).unwrap(), more);
    sync.done("saved-checked");
    // A proposal: eglot 1.9 cannot open it, "show proposed edit" says where it is.
    let tab = "✻ [Claude Code] hello.py (0a1b2c) ⧉";
    let open_diff = claude.send_request(
        "tools/call",
        json!({"name": "openDiff", "arguments": {"old_file_path": f, "new_file_path": f, "new_file_contents": "print(\"new\")\n", "tab_name": tab}}),
    );
    // The person reads that there is one, then asks where it is.
    wait_for("the proposal announced in the echo area", STEP, || {
        failed();
        log()
            .contains("Claude Code proposes an edit to")
            .then_some(())
    });
    sync.done("proposed");
    let view = sb.state().join("diffs/1/hello.py");
    let said = format!(
        "Claude Code's proposal for {} is {} (`ccide diff show 1` shows the change)",
        f.display(),
        view.display()
    );
    wait_for("the proposal's path in the echo area", STEP, || {
        failed();
        log().contains(&said).then_some(())
    });
    sync.say("proposal", view.to_str().unwrap());
    // Opened, `M-x eglot` there (a second ccide lsp, for the diff's directory), edited, accepted
    // as edited from its code actions.
    let answer = wait_for("the answer to openDiff", STEP, || {
        failed();
        let got = claude.drain(Duration::from_millis(20));
        got.into_iter().find(|m| m["id"] == open_diff)
    });
    assert_eq!(
        crate::util::texts(&answer),
        ["FILE_SAVED", "print(\"edited\")\n"]
    );
    // The proposal made no IDE of its own.
    assert_eq!(
        list_locks(&sb.config().join("ide")),
        vec![server.lock_path.clone()]
    );
    sync.done("accepted");
    sync.step("shut", &failed);
    let status = child.exited();
    failed();
    assert!(status.success(), "emacs exited with {status}\n{}", log());
    // Auto-saving the accepted proposal found its folder (emacs's lock file of the modified
    // buffer kept it).
    assert!(!log().contains("Error"), "{}", log());
    status_where(&sb, "emacs's tabs gone", |s| s["tabs"] == json!([]));
    let rest = claude.before_ping();
    assert!(
        rest.iter().all(|m| m["method"] != "selection_changed"),
        "{rest:?}"
    );
}

#[test]
#[ignore = "needs emacs and eglot: installed by .ci/run"]
fn emacs_eglot_reviews_a_proposal_hunk_by_hunk() {
    let sb = Sandbox::new();
    let server = sb.serve(&["--no-default-checkers"]);
    let f = sb.write("hunks.py", hunk_lines(&[]));
    let sync = Sync::new(&sb);
    let mut claude = server.ready_client();
    let mut child = emacs(&sb, &sync, &f, "hunks");
    let log = || emacs_log(&sb);
    let failed = || emacs_failed(&sb, &sync);
    sync.step("opened", &failed);
    status_where(&sb, "hunks.py open", |s| s["tabs"] == tabs(&[(&f, true)]));
    sync.done("tabs-checked");
    let open_diff = propose_three_hunks(&mut claude, &f);
    // flymake's diagnostics, each at its line with eglot's source prefix.
    let hints = |states: [&str; 3]| -> Value {
        [(2, 1), (10, 2), (18, 3)]
            .iter()
            .zip(states)
            .map(|((l, n), state)| {
                format!("{l}: ccide: Claude proposes (hunk {n}/3{state}): NEW = {l}")
            })
            .collect()
    };
    let step = |name: &str| serde_json::from_str::<Value>(&sync.step(name, &failed)).unwrap();
    assert_eq!(step("hints"), hints(["", "", ""]));
    assert_eq!(step("decided"), hints([", kept", ", dropped", ""]));
    let answer = wait_for("the answer to openDiff", STEP, || {
        failed();
        let got = claude.drain(Duration::from_millis(20));
        got.into_iter().find(|m| m["id"] == open_diff)
    });
    // Hunk 3, left undecided, is dropped.
    assert_eq!(
        crate::util::texts(&answer),
        ["FILE_SAVED".to_string(), hunk_lines(&[2])]
    );
    sync.step("cleared", &failed);
    sync.step("shut", &failed);
    let status = child.exited();
    assert!(status.success(), "emacs exited with {status}\n{}", log());
}

#[test]
#[ignore = "needs emacs and eglot: installed by .ci/run"]
fn emacs_eglot_shutdown_leaves_no_lock_file_when_ccide_lsp_served_the_folder() {
    let sb = Sandbox::new();
    let f = sb.write("hello.py", HELLO);
    let sync = Sync::new(&sb);
    let mut child = emacs(&sb, &sync, &f, "alone");
    let log = || emacs_log(&sb);
    let failed = || emacs_failed(&sb, &sync);
    sync.step("opened", &failed);
    // No ccide serve runs: the ccide lsp eglot started serves the folder.
    let s = status_where(&sb, "hello.py open", |s| s["tabs"] == tabs(&[(&f, true)]));
    let lock = sb.config().join(format!("ide/{}.lock", s["port"]));
    assert!(lock.is_file());
    sync.done("tabs-checked");
    sync.step("shut", &failed);
    let status = child.exited();
    assert!(status.success(), "emacs exited with {status}\n{}", log());
    // eglot 1.9 killed it right after `exit` (as the README says), and it had let go first.
    assert!(
        log().contains("Server exited with status 9"),
        "eglot did not kill ccide lsp: {}",
        log()
    );
    assert_eq!(list_locks(&sb.config().join("ide")), Vec::<PathBuf>::new());
    let _again = sb.serve(&[]);
}

/// A terminal for a person: a tmux server of the test's own, one window of 200x50.
pub(crate) struct Tmux {
    tmux: PathBuf,
    socket: PathBuf,
}

impl Tmux {
    pub(crate) fn start(sb: &Sandbox, argv: &[&Path], env: &[(&str, &Path)]) -> Tmux {
        let tmux = program("CCIDE_TMUX", "/usr/bin/tmux", "tmux");
        let socket = sb.root.join("tmux.sock");
        let mut cmd = Command::new(&tmux);
        person(sb, &mut cmd);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let o = cmd
            .arg("-S")
            .arg(&socket)
            .args([
                "-f",
                "/dev/null",
                "-u",
                "new-session",
                "-d",
                "-x",
                "200",
                "-y",
                "50",
                "--",
            ])
            .args(argv)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        Tmux { tmux, socket }
    }

    fn tmux(&self, args: &[&str]) -> String {
        let o = Command::new(&self.tmux)
            .arg("-S")
            .arg(&self.socket)
            .args(args)
            .output()
            .unwrap();
        String::from_utf8_lossy(&o.stdout).into_owned()
    }

    /// Keys by tmux's names (`Enter`, `Escape`, `Space`).
    pub(crate) fn keys(&self, keys: &[&str]) {
        let mut args = vec!["send-keys", "-t", "0"];
        args.extend_from_slice(keys);
        self.tmux(&args);
    }

    /// Text typed as it is.
    pub(crate) fn type_text(&self, text: &str) {
        self.tmux(&["send-keys", "-t", "0", "-l", text]);
    }

    pub(crate) fn screen(&self) -> String {
        self.tmux(&["capture-pane", "-p", "-t", "0"])
    }

    /// Waits until the screen shows `text`, as a person reads before typing on.
    pub(crate) fn read(&self, text: &str, failed: &dyn Fn(&str)) -> String {
        self.read_where(text, &|s| s.contains(text), failed)
    }

    fn read_where(&self, what: &str, pred: &dyn Fn(&str) -> bool, failed: &dyn Fn(&str)) -> String {
        let end = std::time::Instant::now() + STEP;
        loop {
            let s = self.screen();
            failed(&s);
            if pred(&s) {
                return s;
            }
            assert!(
                std::time::Instant::now() < end,
                "no {what:?} on the screen within {STEP:?}; it shows:\n{s}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Tmux {
    /// Picks `item` from kakoune's menu as a person does: types `letters` of it, waits for the
    /// menu to show only that item (kakoune filters as it redraws), then <ret>.
    fn pick(&self, letters: &str, item: &str, others: &[&str], failed: &dyn Fn(&str)) {
        self.read(item, failed);
        self.type_text(letters);
        let only = |s: &str| s.contains(item) && others.iter().all(|o| !s.contains(o));
        self.read_where(&format!("the menu with only {item}"), &only, failed);
        self.keys(&["Enter"]);
    }
}

impl Tmux {
    /// Picks `item` from helix's code action menu (shown with `others`, in helix's order): down
    /// to it, then <ret>. An item ends at two spaces: what follows is the line behind the menu.
    pub(crate) fn helix_pick(&self, item: &str, others: &[&str], failed: &dyn Fn(&str)) {
        let all = |s: &str| s.contains(item) && others.iter().all(|o| s.contains(o));
        let menu = self.read_where(&format!("the menu with {item}"), &all, failed);
        let items: Vec<&str> = menu
            .lines()
            .filter_map(|l| {
                l.find("Claude: ")
                    .map(|k| l[k..].split("  ").next().unwrap())
            })
            .collect();
        let n = items.iter().position(|i| *i == item).unwrap();
        for _ in 0..n {
            self.keys(&["Down"]);
        }
        self.keys(&["Enter"]);
    }

    /// Back to helix's normal mode, as a person presses escape until the mode says NOR: the
    /// first one may only close the completion menu of the words typed.
    /// Types `:COMMAND` in helix's normal mode and runs it once the command line shows it
    /// (on a busy machine keys typed before helix drew the prompt would go elsewhere).
    fn helix_command(&self, command: &str, failed: &dyn Fn(&str)) {
        self.type_text(command);
        self.read(command, failed);
        self.keys(&["Enter"]);
    }

    fn helix_normal_mode(&self, failed: &dyn Fn(&str)) {
        let end = std::time::Instant::now() + STEP;
        loop {
            self.keys(&["Escape"]);
            let pause = std::time::Instant::now() + Duration::from_millis(1000);
            while std::time::Instant::now() < pause {
                let s = self.screen();
                failed(&s);
                if s.contains(" NOR ") {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            assert!(
                std::time::Instant::now() < end,
                "helix stays out of normal mode:\n{}",
                self.screen()
            );
        }
    }
}

impl Tmux {
    /// Picks `title` from ALE's numbered list of code actions: types its number, then <ret>.
    fn ale_pick(&self, title: &str, failed: &dyn Fn(&str)) {
        let end = format!(") {title}");
        let menu = self.read(&end, failed);
        let n = menu
            .lines()
            .find(|l| l.ends_with(&end))
            .and_then(|l| l.split(')').next())
            .unwrap()
            .to_string();
        self.keys(&[&n, "Enter"]);
    }
}

impl Drop for Tmux {
    fn drop(&mut self) {
        self.tmux(&["kill-server"]);
    }
}

/// vim with ALE as the README sets it up (its vimrc recipe), editing `file` in tmux.
fn vim_ale(sb: &Sandbox, vim: &Path, file: &str) -> Tmux {
    sb.root.write(
        "home/.vimrc",
        recipe("vim with ALE (tried: vim 9.0, ALE 3.3)", "vim"),
    );
    Tmux::start(sb, &[vim, Path::new(file)], &[])
}

/// Fails a vim test on an error vim shows.
fn vim_failed(screen: &str) {
    assert!(
        !screen.contains("E492") && !screen.contains("Error detected"),
        "vim says:\n{screen}"
    );
}

#[test]
#[ignore = "needs vim, vim-ale and tmux: installed by .ci/run"]
fn vim_ale_selects_mentions_edits_and_accepts_a_proposal_as_edited() {
    let vim = program("CCIDE_VIM", "/usr/bin/vim", "vim");
    let v = version(&vim, &["--version"]);
    assert!(
        v.starts_with("VIM - Vi IMproved 9.0 "),
        "README says tried: vim 9.0, not {v}"
    );
    let sb = Sandbox::new();
    let server = sb.serve(&[]);
    let f = sb.write("hello.py", HELLO);
    let mut claude = server.ready_client();
    let term = vim_ale(&sb, &vim, "hello.py");
    let nothing = || {};
    status_where(&sb, "hello.py open", |s| s["tabs"] == tabs(&[(&f, true)]));
    // `wörld 🦀` in visual mode, then \ca: ALE lists the code actions, the person types 1.
    term.keys(&["2G0fwvt\"", "\\ca"]);
    term.read("1) Claude: send selection", &vim_failed);
    term.keys(&["1", "Enter"]);
    let world = selection(&f, "wörld 🦀", (1, 17), (1, 25));
    assert_eq!(
        action(&mut claude, "selection_changed", &nothing),
        [sel(world)]
    );
    // Line 2 linewise: the selection follows the code action request while the person reads
    // the menu, then the mention.
    term.keys(&["Escape", "2GV", "\\ca"]);
    term.read("2) Claude: @-mention", &vim_failed);
    let line = selection(&f, "    print(\"héllo wörld 🦀\")", (1, 0), (1, 27));
    assert_eq!(
        action(&mut claude, "selection_changed", &nothing),
        [sel(line)]
    );
    term.keys(&["2", "Enter"]);
    assert_eq!(
        action(&mut claude, "at_mentioned", &nothing),
        [mention(&f, Some((1, 1)))]
    );
    // Unsaved: ALE sends the buffer when it lints, after its delay.
    term.keys(&["Escape", "o# more", "Escape"]);
    let s = status_where(&sb, "hello.py unsaved", |s| s["documents"] != json!([]));
    let bytes = s["documents"][0]["bytes"].as_u64().unwrap();
    term.keys(&[":w", "Enter"]);
    status_where(&sb, "hello.py saved", |s| s["documents"] == json!([]));
    let saved = std::fs::read_to_string(&f).unwrap();
    assert!(
        saved.starts_with(HELLO) && saved.ends_with("# more\n"),
        "{saved:?}"
    );
    assert_eq!(saved.len() as u64, bytes);
    // A proposal: ALE shows ccide's messages (the README's severity setting).
    let tab = "✻ [Claude Code] hello.py (0a1b2c) ⧉";
    let open_diff = claude.send_request(
        "tools/call",
        json!({"name": "openDiff", "arguments": {"old_file_path": f, "new_file_path": f, "new_file_contents": "print(\"new\")\n", "tab_name": tab}}),
    );
    term.read("Claude Code proposes an edit to", &vim_failed);
    term.keys(&["gg", "\\ca"]);
    term.read(") Claude: show proposed edit", &vim_failed);
    // The request's range follows while the person reads the menu: ALE's word at the cursor,
    // searched backwards from it, is its first character.
    let d = selection(&f, "d", (0, 0), (0, 1));
    assert_eq!(action(&mut claude, "selection_changed", &nothing), [sel(d)]);
    let menu = term.screen();
    let n = menu
        .lines()
        .find(|l| l.ends_with(") Claude: show proposed edit"))
        .and_then(|l| l.split(')').next())
        .unwrap()
        .to_string();
    term.keys(&[&n, "Enter"]);
    let view = sb.state().join("diffs/1/hello.py");
    term.read("Claude Code's proposal for", &vim_failed);
    term.keys(&[&format!(":e {}", view.display()), "Enter"]);
    term.read("print(\"new\")", &vim_failed);
    term.keys(&[":s/new/edited/", "Enter", "\\ca"]);
    term.read(") Claude: accept as edited", &vim_failed);
    let menu = term.screen();
    let n = menu
        .lines()
        .find(|l| l.ends_with(") Claude: accept as edited"))
        .and_then(|l| l.split(')').next())
        .unwrap()
        .to_string();
    term.keys(&[&n, "Enter"]);
    let answer = claude.response(&open_diff);
    assert_eq!(
        crate::util::texts(&answer),
        ["FILE_SAVED", "print(\"edited\")\n"]
    );
    term.keys(&[":qa!", "Enter"]);
    status_where(&sb, "vim's tabs gone", |s| {
        s["tabs"] == json!([]) && s["documents"] == json!([])
    });
    assert_eq!(
        list_locks(&sb.config().join("ide")),
        vec![server.lock_path.clone()]
    );
    let rest = claude.before_ping();
    assert!(
        rest.iter().all(|m| m["method"] != "selection_changed"),
        "{rest:?}"
    );
}

#[test]
#[ignore = "needs vim, vim-ale and tmux: installed by .ci/run"]
fn vim_ale_reviews_a_proposal_hunk_by_hunk() {
    let vim = program("CCIDE_VIM", "/usr/bin/vim", "vim");
    let sb = Sandbox::new();
    let server = sb.serve(&["--no-default-checkers"]);
    let f = sb.write("hunks.py", hunk_lines(&[]));
    let mut claude = server.ready_client();
    let term = vim_ale(&sb, &vim, "hunks.py");
    status_where(&sb, "hunks.py open", |s| s["tabs"] == tabs(&[(&f, true)]));
    let open_diff = propose_three_hunks(&mut claude, &f);
    term.read("Claude Code proposes an edit to", &vim_failed);
    // The hints are in ALE's location list, which follows them while open (ALE has no hint
    // type: it lists them as warnings).
    let listed = |states: [&str; 3]| -> Vec<String> {
        [(2, 1, 2), (10, 2, 10), (18, 3, 18)]
            .iter()
            .zip(states)
            .map(|((l, n, new), state)| {
                format!(
                    "hunks.py|{l}-{} col 1 warning| Claude proposes (hunk {n}/3{state}): NEW = {new}",
                    l + 1
                )
            })
            .collect()
    };
    let list_shows = |states: [&str; 3], failed: &dyn Fn(&str)| {
        let want = listed(states);
        let what = format!("the location list {want:?}");
        term.read_where(
            &what,
            &|s| want.iter().all(|w| s.contains(w.as_str())),
            failed,
        );
    };
    term.keys(&[":lopen", "Enter"]);
    list_shows(["", "", ""], &vim_failed);
    // Back in the file, in hunk 1: \ca (on the word under the cursor) offers to keep it.
    term.keys(&[":wincmd p", "Enter", "2G", "\\ca"]);
    term.ale_pick("Claude: keep hunk 1/3", &vim_failed);
    list_shows([", kept", "", ""], &vim_failed);
    term.keys(&["10G", "\\ca"]);
    term.ale_pick("Claude: drop hunk 2/3", &vim_failed);
    list_shows([", kept", ", dropped", ""], &vim_failed);
    // Hunk 3 left undecided is dropped.
    term.keys(&["\\ca"]);
    term.ale_pick("Claude: accept what is kept", &vim_failed);
    let answer = claude.response(&open_diff);
    assert_eq!(
        crate::util::texts(&answer),
        ["FILE_SAVED".to_string(), hunk_lines(&[2])]
    );
    term.read_where(
        "the hints gone",
        &|s| !s.contains("Claude proposes"),
        &vim_failed,
    );
    term.keys(&[":qa!", "Enter"]);
    status_where(&sb, "vim's tabs gone", |s| s["tabs"] == json!([]));
}

/// Stops the kakoune-lsp daemon a test's kakoune started (it outlives a kakoune that did not
/// quit), from the pid file in its runtime directory.
struct KakLsp(PathBuf);

impl Drop for KakLsp {
    fn drop(&mut self) {
        for e in std::fs::read_dir(self.0.join("kakoune-lsp"))
            .into_iter()
            .flatten()
            .flatten()
        {
            if let Ok(pid) = std::fs::read_to_string(e.path().join("pid")) {
                let _ = Command::new("kill").arg(pid.trim()).status();
            }
        }
    }
}

/// kakoune with kakoune-lsp as the README sets them up (its kakrc recipe, a private runtime
/// directory for the daemon), editing `file` in tmux; the daemon is stopped after the terminal.
struct Kakoune {
    term: Tmux,
    _daemon: KakLsp,
}

fn kakoune(sb: &Sandbox, kak: &Path, file: &str) -> Kakoune {
    let heading = "kakoune with kakoune-lsp (tried: kakoune 2022.10.31, kakoune-lsp 22.0.0)";
    sb.root
        .write("home/.config/kak/kakrc", recipe(heading, "kak"));
    let run = sb.root.join("run");
    std::fs::create_dir_all(&run).unwrap();
    std::fs::set_permissions(&run, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let _daemon = KakLsp(run.clone());
    let term = Tmux::start(sb, &[kak, Path::new(file)], &[("XDG_RUNTIME_DIR", &run)]);
    Kakoune { term, _daemon }
}

/// Fails a kakoune test on an error kakoune-lsp shows.
fn kakoune_failed(screen: &str) {
    assert!(
        !screen.contains("LSP: error") && !screen.contains("blocked"),
        "kakoune says:\n{screen}"
    );
}

#[test]
#[ignore = "needs kakoune, kakoune-lsp and tmux: installed by .ci/run"]
fn kakoune_lsp_selects_mentions_edits_and_accepts_a_proposal_as_edited() {
    let kak = program("CCIDE_KAK", "/usr/bin/kak", "kakoune");
    let kak_lsp = program("CCIDE_KAK_LSP", "/usr/local/bin/kak-lsp", "kakoune-lsp");
    assert_eq!(
        version(&kak_lsp, &["--version"]),
        "22.0.0",
        "README says tried: kakoune-lsp 22.0.0"
    );
    let sb = Sandbox::new();
    sb.add_tool("kak-lsp", &kak_lsp);
    let server = sb.serve(&[]);
    let f = sb.write("hello.py", HELLO);
    let mut claude = server.ready_client();
    let kakoune = kakoune(&sb, &kak, "hello.py");
    let term = &kakoune.term;
    let nothing = || {};
    status_where(&sb, "hello.py open", |s| s["tabs"] == tabs(&[(&f, true)]));
    // kakoune-lsp asks for code actions as the cursor rests: the cursor, at the start.
    let start = selection(&f, "", (0, 0), (0, 0));
    assert_eq!(
        action(&mut claude, "selection_changed", &nothing),
        [sel(start)]
    );
    // Searching selects the match; it follows at once.
    term.keys(&["/"]);
    term.type_text("héllo wörld 🦀");
    term.keys(&["Enter"]);
    let hello = selection(&f, "héllo wörld 🦀", (1, 11), (1, 25));
    assert_eq!(
        action(&mut claude, "selection_changed", &nothing),
        [sel(hello.clone())]
    );
    // <space>c, then "send" and <ret> in the menu: sent once.
    term.keys(&["Space", "c"]);
    term.pick(
        "send",
        "Claude: send selection",
        &["Claude: @-mention"],
        &kakoune_failed,
    );
    assert_eq!(
        action(&mut claude, "selection_changed", &nothing),
        [sel(hello)]
    );
    term.keys(&["Space", "c"]);
    term.pick(
        "mention",
        "Claude: @-mention",
        &["Claude: send selection"],
        &kakoune_failed,
    );
    assert_eq!(
        action(&mut claude, "at_mentioned", &nothing),
        [mention(&f, Some((1, 1)))]
    );
    // Unsaved, then saved.
    term.keys(&["o"]);
    term.type_text("# more");
    // `:w` only once kakoune is back in normal mode (an escape followed at once by a key reads
    // as Alt with that key).
    term.keys(&["Escape"]);
    term.read_where("normal mode", &|s| !s.contains("insert"), &kakoune_failed);
    let s = status_where(&sb, "hello.py unsaved", |s| s["documents"] != json!([]));
    let bytes = s["documents"][0]["bytes"].as_u64().unwrap();
    term.keys(&[":w", "Enter"]);
    status_where(&sb, "hello.py saved", |s| s["documents"] == json!([]));
    let saved = std::fs::read_to_string(&f).unwrap();
    assert!(
        saved.starts_with(HELLO) && saved.ends_with("# more\n"),
        "{saved:?}"
    );
    assert_eq!(saved.len() as u64, bytes);
    // A proposal: "show proposed edit" names it in the status line; opened with :e, its
    // kakoune-lsp starts a ccide lsp for its directory, which accepts it as edited.
    let tab = "✻ [Claude Code] hello.py (0a1b2c) ⧉";
    let open_diff = claude.send_request(
        "tools/call",
        json!({"name": "openDiff", "arguments": {"old_file_path": f, "new_file_path": f, "new_file_contents": "print(\"new\")\n", "tab_name": tab}}),
    );
    term.read("Claude Code proposes an edit to", &kakoune_failed);
    term.keys(&["Space", "c"]);
    let others = ["Claude: send selection", "Claude: accept"];
    term.pick(
        "show",
        "Claude: show proposed edit",
        &others,
        &kakoune_failed,
    );
    term.read("Claude Code's proposal for", &kakoune_failed);
    let view = sb.state().join("diffs/1/hello.py");
    term.type_text(&format!(":e {}", view.display()));
    term.keys(&["Enter"]);
    term.read("print(\"new\")", &kakoune_failed);
    // Each key once kakoune shows it took the one before: the prompt with the regex, the
    // match selected (the cursor at its end), insert mode.
    term.type_text("%snew");
    term.read("select:new", &kakoune_failed);
    term.keys(&["Enter"]);
    let selected = |s: &str| !s.contains("select:") && s.contains(" 1:10 ");
    term.read_where("`new` selected", &selected, &kakoune_failed);
    term.type_text("c");
    term.read_where("insert mode", &|s| s.contains(" insert "), &kakoune_failed);
    term.type_text("edited");
    // Escape alone, and on once kakoune is back in normal mode: an escape followed at once by
    // a key reads as Alt with that key.
    term.keys(&["Escape"]);
    term.read_where("normal mode", &|s| !s.contains("insert"), &kakoune_failed);
    term.keys(&["Space", "c"]);
    let others = ["Claude: reject"];
    term.pick(
        "edited",
        "Claude: accept as edited",
        &others,
        &kakoune_failed,
    );
    let answer = claude.response(&open_diff);
    assert_eq!(
        crate::util::texts(&answer),
        ["FILE_SAVED", "print(\"edited\")\n"]
    );
    assert_eq!(
        list_locks(&sb.config().join("ide")),
        vec![server.lock_path.clone()]
    );
    // The CLI writes the file: kakoune's unchanged buffer of it is replaced with exactly the
    // file (before, with an empty last line more: a replacement past the last line break).
    std::fs::write(&f, "print(\"edited\")\n").unwrap();
    term.type_text(":buffer hello.py");
    term.keys(&["Enter"]);
    let screen = term.read("print(\"edited\")", &kakoune_failed);
    let lines: Vec<&str> = screen.lines().collect();
    assert!(
        lines[0].contains("print(\"edited\")") && lines[1].starts_with('~'),
        "an empty last line:\n{screen}"
    );
    // kakoune asks whether to reload a file changed behind it (`autoreload` is `ask`): the
    // buffer equals the file, and reloading it changes nothing.
    term.read("modified externally", &kakoune_failed);
    term.keys(&["Enter"]);
    let reloaded = term.read_where(
        "the buffer reloaded",
        &|s| !s.contains("modified externally") && !s.contains("[+]"),
        &kakoune_failed,
    );
    assert!(
        reloaded.lines().nth(1).unwrap().starts_with('~'),
        "{reloaded}"
    );
    term.type_text(":kill!");
    term.keys(&["Enter"]);
    status_where(&sb, "kakoune's tabs gone", |s| {
        s["tabs"] == json!([]) && s["documents"] == json!([])
    });
}

#[test]
#[ignore = "needs kakoune, kakoune-lsp and tmux: installed by .ci/run"]
fn kakoune_lsp_reviews_a_proposal_hunk_by_hunk() {
    let kak = program("CCIDE_KAK", "/usr/bin/kak", "kakoune");
    let kak_lsp = program("CCIDE_KAK_LSP", "/usr/local/bin/kak-lsp", "kakoune-lsp");
    let sb = Sandbox::new();
    sb.add_tool("kak-lsp", &kak_lsp);
    let server = sb.serve(&["--no-default-checkers"]);
    let f = sb.write("hunks.py", hunk_lines(&[]));
    let mut claude = server.ready_client();
    let kakoune = kakoune(&sb, &kak, "hunks.py");
    let term = &kakoune.term;
    status_where(&sb, "hunks.py open", |s| s["tabs"] == tabs(&[(&f, true)]));
    let open_diff = propose_three_hunks(&mut claude, &f);
    // The hints mark their lines in the gutter; `:lsp-diagnostics` lists them (with the
    // server's name and the source).
    term.read("-line = 18", &kakoune_failed);
    // The list is made when asked for: a person asks again until it shows the decision.
    let listed = |states: [&str; 3]| {
        let want: Vec<String> = [(2, 1), (10, 2), (18, 3)]
            .iter()
            .zip(states)
            .map(|((l, n), state)| {
                format!(
                    " hunks.py:{l}:1: [hint][ccide][ccide] Claude proposes (hunk {n}/3{state}): NEW = {l}"
                )
            })
            .collect();
        let end = std::time::Instant::now() + STEP;
        loop {
            term.type_text(":lsp-diagnostics");
            term.keys(&["Enter"]);
            let screen = term.read("*diagnostics*", &kakoune_failed);
            let lines: Vec<&str> = screen.lines().take(3).map(str::trim_end).collect();
            term.type_text(":buffer hunks.py");
            term.keys(&["Enter"]);
            let back = |s: &str| !s.contains("*diagnostics*") && s.contains(" hunks.py ");
            term.read_where("hunks.py again", &back, &kakoune_failed);
            if lines == want {
                break;
            }
            assert!(std::time::Instant::now() < end, "not {want:?}:\n{screen}");
        }
    };
    listed(["", "", ""]);
    // In hunk 1, <space>c and "keep": kakoune's menu has one keep, of the hunk at the cursor.
    term.type_text("2g");
    term.keys(&["Space", "c"]);
    term.pick(
        "keep",
        "Claude: keep hunk 1/3",
        &["Claude: drop hunk"],
        &kakoune_failed,
    );
    listed([", kept", "", ""]);
    term.type_text("10g");
    term.keys(&["Space", "c"]);
    term.pick(
        "drop",
        "Claude: drop hunk 2/3",
        &["Claude: keep hunk"],
        &kakoune_failed,
    );
    listed([", kept", ", dropped", ""]);
    term.keys(&["Space", "c"]);
    let others = ["Claude: keep hunk", "Claude: reject all"];
    term.pick(
        "kept",
        "Claude: accept what is kept",
        &others,
        &kakoune_failed,
    );
    // Hunk 3, left undecided, is dropped.
    assert_eq!(
        crate::util::texts(&claude.response(&open_diff)),
        ["FILE_SAVED".to_string(), hunk_lines(&[2])]
    );
    term.read_where(
        "the hints gone",
        &|s| !s.contains("-line = "),
        &kakoune_failed,
    );
    term.type_text(":kill!");
    term.keys(&["Enter"]);
    status_where(&sb, "kakoune's tabs gone", |s| s["tabs"] == json!([]));
}

/// helix as the README sets it up (its languages.toml and config.toml recipes), editing `file`
/// in tmux.
fn helix(sb: &Sandbox, hx: &Path, file: &str) -> Tmux {
    let heading = "helix (tried: helix 25.07.1)";
    sb.root.write(
        "home/.config/helix/languages.toml",
        recipe_nth(heading, "toml", 0),
    );
    sb.root.write(
        "home/.config/helix/config.toml",
        recipe_nth(heading, "toml", 1),
    );
    Tmux::start(sb, &[hx, Path::new(file)], &[])
}

/// Fails a helix test on an error helix shows, with its log.
fn helix_failed(sb: &Sandbox) -> impl Fn(&str) + '_ {
    move |screen: &str| {
        let log = sb.home().join(".cache/helix/helix.log");
        assert!(
            !screen.contains("Error") && !screen.contains("error"),
            "helix says:\n{screen}\nhelix.log:\n{}",
            std::fs::read_to_string(log).unwrap_or_default()
        );
    }
}

#[test]
#[ignore = "needs helix (.ci/editor-install) and tmux"]
fn helix_selects_mentions_edits_shows_diagnostics_and_reviews_proposals() {
    let hx = program("CCIDE_HX", "/usr/local/bin/hx", "helix");
    assert_eq!(
        version(&hx, &["--version"]),
        "helix 25.07.1",
        "README says tried: helix 25.07.1"
    );
    let sb = Sandbox::new();
    let server = sb.serve(&["--no-default-checkers"]);
    let f = sb.write("hello.py", HELLO);
    let mut claude = server.ready_client();
    let term = helix(&sb, &hx, "hello.py");
    let failed = helix_failed(&sb);
    let nothing = || {};
    status_where(&sb, "hello.py open", |s| s["tabs"] == tabs(&[(&f, true)]));
    // Searching selects `héllo wörld 🦀`; `space a` lists the code actions, the first is
    // sending the selection: sent once.
    term.keys(&["/"]);
    term.type_text("héllo wörld 🦀");
    term.keys(&["Enter"]);
    term.read("sel  2:24", &failed);
    term.keys(&["Space", "a"]);
    term.helix_pick("Claude: send selection", &["Claude: @-mention"], &failed);
    let hello = selection(&f, "héllo wörld 🦀", (1, 11), (1, 25));
    assert_eq!(
        action(&mut claude, "selection_changed", &nothing),
        [sel(hello.clone())]
    );
    // The second: the mention of line 2 (the menu's request sent the same selection, which is
    // not sent again).
    term.keys(&["Space", "a"]);
    term.helix_pick("Claude: @-mention", &["Claude: send selection"], &failed);
    assert_eq!(
        action(&mut claude, "at_mentioned", &nothing),
        [mention(&f, Some((1, 1)))]
    );
    // The README's key mappings: line 1 selected and mentioned by `ccide select` and
    // `ccide mention` (helix 25.07 expands %{buffer_name} and %{cursor_line}).
    term.keys(&["g", "g"]);
    term.read("sel  1:1", &failed);
    term.keys(&["Space", "c", "s"]);
    let line1 = selection(&f, "def greet():", (0, 0), (0, 12));
    assert_eq!(
        action(&mut claude, "selection_changed", &nothing),
        [sel(line1)]
    );
    term.keys(&["Space", "c", "m"]);
    assert_eq!(
        action(&mut claude, "at_mentioned", &nothing),
        [mention(&f, Some((0, 0)))]
    );
    // Unsaved, then saved.
    term.keys(&["g", "e", "o"]);
    term.type_text("# more");
    term.helix_normal_mode(&failed);
    let s = status_where(&sb, "hello.py unsaved", |s| s["documents"] != json!([]));
    let bytes = s["documents"][0]["bytes"].as_u64().unwrap();
    term.helix_command(":w", &failed);
    status_where(&sb, "hello.py saved", |s| s["documents"] == json!([]));
    let saved = std::fs::read_to_string(&f).unwrap();
    assert!(
        saved.starts_with(HELLO) && saved.ends_with("# more\n"),
        "{saved:?}"
    );
    assert_eq!(saved.len() as u64, bytes);
    // Diagnostics at UTF-16 columns (the README's `config`): `wörld`, and the quote after
    // the crab (UTF-16 column 25, character 24). `]d` selects the next one; helix shows the
    // cursor's line and character, from 1.
    let import = json!([{"uri": format!("file://{}", f.display()), "diagnostics": [
        {"message": "wörld here", "severity": "Error", "source": "lint",
         "range": {"start": {"line": 1, "character": 17}, "end": {"line": 1, "character": 22}}},
        {"message": "after the crab", "severity": "Warning", "source": "lint",
         "range": {"start": {"line": 1, "character": 25}, "end": {"line": 1, "character": 26}}}]}]);
    let o = sb.run_stdin(&["diagnostics", "import"], import.to_string().as_bytes());
    assert!(o.status.success(), "{}", crate::util::stderr(&o));
    let no_error = |_: &str| {};
    term.keys(&["g", "g"]);
    // One error and one warning, counted in the status line.
    term.read("wörld here", &no_error);
    term.read("● 1 ● 1", &no_error);
    term.keys(&["]", "d"]);
    term.read_where("`wörld` selected", &|s| s.contains("sel  2:22"), &no_error);
    term.keys(&["]", "d"]);
    term.read_where(
        "the quote selected",
        &|s| s.contains("sel  2:25"),
        &no_error,
    );
    term.keys(&["g", "g"]);
    let clean = json!([{"uri": format!("file://{}", f.display()), "diagnostics": []}]);
    sb.run_stdin(&["diagnostics", "import"], clean.to_string().as_bytes());
    term.read_where("no diagnostics", &|s| !s.contains("●"), &no_error);
    // A proposal: helix opens it at once (window/showDocument), and takes the focus though
    // asked not to. From the file: shown again, then rejected.
    let tab = "✻ [Claude Code] hello.py (0a1b2c) ⧉";
    let open_diff = claude.send_request(
        "tools/call",
        json!({"name": "openDiff", "arguments": {"old_file_path": f, "new_file_path": f, "new_file_contents": "print(\"new\")\n", "tab_name": tab}}),
    );
    let view = |n: u32| sb.state().join(format!("diffs/{n}/hello.py"));
    let shown = |n: u32| format!("NOR   {} ", view(n).display());
    term.read(&shown(1), &failed);
    term.helix_command(":o hello.py", &failed);
    term.read("NOR   hello.py ", &failed);
    let on_the_file = [
        "Claude: send selection",
        "Claude: @-mention",
        "Claude: show proposed edit",
        "Claude: accept",
        "Claude: reject",
    ];
    term.keys(&["Space", "a"]);
    // The request's range follows while the person reads the menu: the cursor's character.
    // (Not again from the next menu, at the same range.)
    term.read("Claude: show proposed edit", &failed);
    let d = selection(&f, "d", (0, 0), (0, 1));
    assert_eq!(action(&mut claude, "selection_changed", &nothing), [sel(d)]);
    term.helix_pick("Claude: show proposed edit", &on_the_file, &failed);
    term.read(&shown(1), &failed);
    term.helix_command(":o hello.py", &failed);
    term.read("NOR   hello.py ", &failed);
    term.keys(&["Space", "a"]);
    term.helix_pick("Claude: reject", &on_the_file, &failed);
    assert_eq!(
        crate::util::texts(&claude.response(&open_diff)),
        ["DIFF_REJECTED", tab]
    );
    // Another, edited in helix where it opened and accepted as edited there.
    let open_diff = claude.send_request(
        "tools/call",
        json!({"name": "openDiff", "arguments": {"old_file_path": f, "new_file_path": f, "new_file_contents": "print(\"new\")\n", "tab_name": tab}}),
    );
    term.read(&shown(2), &failed);
    term.read("print(\"new\")", &failed);
    term.keys(&["%", "s"]);
    term.type_text("new");
    term.keys(&["Enter", "c"]);
    term.type_text("edited");
    term.helix_normal_mode(&failed);
    term.read("print(\"edited\")", &failed);
    term.keys(&["Space", "a"]);
    let in_the_proposal = [
        "Claude: accept",
        "Claude: accept as edited",
        "Claude: reject",
    ];
    term.helix_pick("Claude: accept as edited", &in_the_proposal, &failed);
    let answer = claude.response(&open_diff);
    assert_eq!(
        crate::util::texts(&answer),
        ["FILE_SAVED", "print(\"edited\")\n"]
    );
    assert_eq!(
        list_locks(&sb.config().join("ide")),
        vec![server.lock_path.clone()]
    );
    // The CLI writes the file: helix's buffer of it is replaced, and is no unsaved content.
    std::fs::write(&f, "print(\"edited\")\n").unwrap();
    term.helix_command(":o hello.py", &failed);
    term.read_where(
        "hello.py replaced",
        &|s| s.contains("print(\"edited\")") && !s.contains("# more"),
        &failed,
    );
    status_where(&sb, "no unsaved content", |s| s["documents"] == json!([]));
    // Written behind helix's back (Claude Code's Write tool) and reloaded: clean.
    std::fs::write(&f, "print(\"written\")\n").unwrap();
    term.helix_command(":reload", &failed);
    term.read("print(\"written\")", &failed);
    // A line typed is unsaved content; undone, the buffer is the file again, and clean.
    term.keys(&["o"]);
    term.type_text("x");
    term.helix_normal_mode(&failed);
    status_where(&sb, "hello.py unsaved", |s| s["documents"] != json!([]));
    term.keys(&["u"]);
    status_where(&sb, "hello.py clean", |s| s["documents"] == json!([]));
    let r = claude.call("checkDocumentDirty", json!({"filePath": f}));
    assert_eq!(
        crate::util::json_text(&r),
        json!({"success": true, "filePath": f, "isDirty": false, "isUntitled": false})
    );
    term.type_text(":qa!");
    term.keys(&["Enter"]);
    status_where(&sb, "helix's tabs gone", |s| {
        s["tabs"] == json!([]) && s["documents"] == json!([])
    });
    let rest = claude.before_ping();
    assert!(
        rest.iter().all(|m| m["method"] != "selection_changed"),
        "{rest:?}"
    );
}

#[test]
#[ignore = "needs helix (.ci/editor-install) and tmux"]
fn helix_reviews_a_proposal_hunk_by_hunk() {
    let hx = program("CCIDE_HX", "/usr/local/bin/hx", "helix");
    let sb = Sandbox::new();
    let server = sb.serve(&["--no-default-checkers"]);
    let f = sb.write("hunks.py", hunk_lines(&[]));
    let mut claude = server.ready_client();
    let term = helix(&sb, &hx, "hunks.py");
    let failed = helix_failed(&sb);
    status_where(&sb, "hunks.py open", |s| s["tabs"] == tabs(&[(&f, true)]));
    let open_diff = propose_three_hunks(&mut claude, &f);
    let view = sb.state().join("diffs/1/hunks.py");
    term.read(&format!("NOR   {} ", view.display()), &failed);
    term.helix_command(":o hunks.py", &failed);
    term.read("NOR   hunks.py ", &failed);
    // helix shows each hint at the end of its line.
    let shown = |states: [&str; 3], failed: &dyn Fn(&str)| {
        let want: Vec<String> = [(2, 1), (10, 2), (18, 3)]
            .iter()
            .zip(states)
            .map(|((l, n), state)| {
                format!("{l:>2}  line = {l}  Claude proposes (hunk {n}/3{state}): NEW = {l}")
            })
            .collect();
        let what = format!("the hints {want:?}");
        term.read_where(
            &what,
            &|s| want.iter().all(|w| s.contains(w.as_str())),
            failed,
        );
    };
    shown(["", "", ""], &failed);
    // The code actions in hunk `n`, in helix's order (the proposal is open: helix opened it).
    let menu = |n: usize| -> Vec<String> {
        let mut m: Vec<String> = [
            "send selection",
            "@-mention",
            "show proposed edit",
            "accept",
            "accept as edited",
            "reject",
        ]
        .iter()
        .map(|t| format!("Claude: {t}"))
        .collect();
        m.push(format!("Claude: keep hunk {n}/3"));
        m.push(format!("Claude: drop hunk {n}/3"));
        m.push("Claude: accept what is kept".into());
        m.push("Claude: reject all".into());
        m
    };
    term.type_text("2gg");
    term.read("sel  2:1", &failed);
    term.keys(&["Space", "a"]);
    let items = menu(1);
    let items: Vec<&str> = items.iter().map(String::as_str).collect();
    term.helix_pick("Claude: keep hunk 1/3", &items, &failed);
    shown([", kept", "", ""], &failed);
    term.type_text("10gg");
    term.read("sel  10:1", &failed);
    term.keys(&["Space", "a"]);
    let items = menu(2);
    let items: Vec<&str> = items.iter().map(String::as_str).collect();
    term.helix_pick("Claude: drop hunk 2/3", &items, &failed);
    shown([", kept", ", dropped", ""], &failed);
    term.keys(&["Space", "a"]);
    term.helix_pick("Claude: accept what is kept", &items, &failed);
    // Hunk 3, left undecided, is dropped.
    assert_eq!(
        crate::util::texts(&claude.response(&open_diff)),
        ["FILE_SAVED".to_string(), hunk_lines(&[2])]
    );
    term.read_where(
        "the hints gone",
        &|s| !s.contains("Claude proposes"),
        &failed,
    );
    term.type_text(":qa!");
    term.keys(&["Enter"]);
    status_where(&sb, "helix's tabs gone", |s| s["tabs"] == json!([]));
}
