//! The trust boundary (ccide-protocol(7) §14): a workspace that ships programs named like the
//! tools ccide looks for, served with a PATH that names them (relative entries, an in-workspace
//! `.venv/bin`). Without `--trust-workspace` none of them runs: the built-in checkers,
//! formatters and language servers run the program found outside the workspace, by its path,
//! with a PATH that holds neither; a formatter that would run the repository's configuration or
//! toolchain is refused.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::util::*;
use serde_json::{Value, json};

/// The workspace's programs at `rels`, each appending its own path to the returned marker
/// file when run (and failing).
fn hostile(sb: &Sandbox, rels: &[&str]) -> PathBuf {
    let marker = sb.root.join("ran-from-workspace");
    for rel in rels {
        let p = sb.write(
            rel,
            format!("#!/bin/sh\necho \"$0\" >> '{}'\nexit 1\n", marker.display()),
        );
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    marker
}

/// What the workspace's programs wrote: the paths of those that ran.
fn ran(marker: &Path) -> String {
    std::fs::read_to_string(marker).unwrap_or_default()
}

/// The sandbox's own `bin`: the only directory of serve's PATH outside the workspace.
fn bin(sb: &Sandbox) -> PathBuf {
    sb.root.join("bin")
}

/// `ccide serve` with a PATH naming the workspace's programs first: two relative entries and
/// an absolute one inside the workspace (an activated in-repo virtualenv), then the sandbox's
/// `bin` (no system directories: what a test finds is what it put there).
fn serve_hostile(sb: &Sandbox, extra: &[&str]) -> Server {
    let path = format!(
        "node_modules/.bin:.:{}:{}",
        sb.ws().join(".venv/bin").display(),
        bin(sb).display()
    );
    let mut cmd = sb.serve_command(extra);
    cmd.env("PATH", path);
    Server::spawn(&mut cmd, &sb.config())
}

/// A stand-in tool in the sandbox's `bin`, outside the workspace: it records the PATH it got
/// in `<root>/NAME.path`, then runs `body`.
fn tool(sb: &Sandbox, name: &str, body: &str) -> PathBuf {
    let p = bin(sb).join(name);
    let record = sb.root.join(format!("{name}.path"));
    std::fs::write(
        &p,
        format!(
            "#!/bin/sh\nprintf '%s' \"$PATH\" > '{}'\n{body}\n",
            record.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).unwrap();
    record
}

fn reformat(c: &mut Client, path: &Path) -> Value {
    c.call(
        "reformat_file",
        json!({"file_path": path.to_str().unwrap()}),
    )
}

/// The diagnostics of `file` once a check delivered some.
fn reported(c: &mut Client, file: &Path) -> Value {
    wait_for("diagnostics of the file", DEADLINE, || {
        let v = diagnostics(c, json!({"uri": uri(file)}));
        (v[0]["diagnostics"]
            .as_array()
            .is_some_and(|d| !d.is_empty()))
        .then_some(v)
    })
}

// ---------------------------------------------------------------- checkers

#[test]
fn a_built_in_checker_runs_the_program_it_found_not_one_a_relative_path_entry_finds() {
    let sb = Sandbox::new();
    let marker = hostile(&sb, &["node_modules/.bin/python3", "python3"]);
    let py = sb.write("bad.py", "def f(:\n");
    // Trusted too: the PATH as it is, but the program run is the one found.
    for extra in [
        &["--no-default-lsp"][..],
        &["--no-default-lsp", "--trust-workspace"],
    ] {
        let s = serve_hostile(&sb, extra);
        let mut c = s.client();
        let v = reported(&mut c, &py);
        assert_eq!(v[0]["diagnostics"][0]["source"], "python3", "{v}");
        assert_eq!(ran(&marker), "");
    }
}

#[test]
fn a_built_in_checker_found_inside_the_workspace_runs_only_if_trusted() {
    let sb = Sandbox::new();
    let marker = hostile(&sb, &[".venv/bin/ruff"]);
    let py = sb.write("bad.py", "def f(:\n");
    let s = serve_hostile(&sb, &["--no-default-lsp"]);
    let mut c = s.client();
    // Not the workspace's ruff: the python3 outside it.
    let v = reported(&mut c, &py);
    assert_eq!(v[0]["diagnostics"][0]["source"], "python3", "{v}");
    assert_eq!(ran(&marker), "");
    drop(c);
    drop(s);
    let s = serve_hostile(&sb, &["--no-default-lsp", "--trust-workspace"]);
    let mut c = s.client();
    diagnostics(&mut c, json!({"uri": uri(&py)}));
    let ruff = sb.ws().join(".venv/bin/ruff");
    wait_for("the workspace's ruff, trusted", DEADLINE, || {
        (ran(&marker) == format!("{}\n", ruff.display())).then_some(())
    });
}

#[test]
fn a_built_in_checker_gets_a_path_without_relative_or_workspace_entries() {
    let sb = Sandbox::new();
    let marker = hostile(&sb, &["node_modules/.bin/grep", ".venv/bin/grep"]);
    // A stand-in shellcheck that runs `grep` from its PATH, as tools run their helpers.
    let record = tool(
        &sb,
        "shellcheck",
        "for f; do :; done; grep -q bad \"$f\" && echo \"$f:1:1: error: bad [SC1]\"",
    );
    std::os::unix::fs::symlink("/bin/grep", bin(&sb).join("grep")).unwrap();
    let sh = sb.write("a.sh", "bad\n");
    let s = serve_hostile(&sb, &["--no-default-lsp"]);
    let mut c = s.client();
    let v = reported(&mut c, &sh);
    assert_eq!(v[0]["diagnostics"][0]["message"], "bad", "{v}");
    assert_eq!(ran(&marker), "");
    assert_eq!(
        std::fs::read_to_string(record).unwrap(),
        bin(&sb).display().to_string()
    );
}

// ---------------------------------------------------------------- formatters

#[test]
fn a_built_in_formatter_runs_the_program_it_found_with_a_path_without_the_workspace() {
    let sb = Sandbox::new();
    let marker = hostile(&sb, &["node_modules/.bin/shfmt", "shfmt"]);
    // shfmt -w FILE
    let record = tool(&sb, "shfmt", "printf 'formatted\\n' > \"$2\"");
    let sh = sb.write("a.sh", "x\n");
    let s = serve_hostile(&sb, &[]);
    let mut c = s.client();
    let r = reformat(&mut c, &sh);
    assert_eq!(texts(&r), ["OK"], "{r}");
    assert_eq!(std::fs::read_to_string(&sh).unwrap(), "formatted\n");
    assert_eq!(ran(&marker), "");
    assert_eq!(
        std::fs::read_to_string(&record).unwrap(),
        bin(&sb).display().to_string()
    );
    drop(c);
    drop(s);
    // Trusted: the PATH as it is, but the program run is the one found.
    std::fs::write(&sh, "x\n").unwrap();
    let s = serve_hostile(&sb, &["--trust-workspace"]);
    let mut c = s.client();
    let r = reformat(&mut c, &sh);
    assert_eq!(texts(&r), ["OK"], "{r}");
    assert_eq!(std::fs::read_to_string(&sh).unwrap(), "formatted\n");
    assert_eq!(ran(&marker), "");
    assert!(
        std::fs::read_to_string(&record)
            .unwrap()
            .starts_with("node_modules/.bin:.:")
    );
}

#[test]
fn a_built_in_formatter_found_inside_the_workspace_runs_only_if_trusted() {
    let sb = Sandbox::new();
    let marker = hostile(&sb, &[".venv/bin/ruff"]);
    // black --quiet FILE
    tool(&sb, "black", "printf 'x = 1\\n' > \"$2\"");
    let py = sb.write("app.py", "x=1\n");
    let s = serve_hostile(&sb, &[]);
    let mut c = s.client();
    let r = reformat(&mut c, &py);
    assert_eq!(texts(&r), ["OK"], "{r}");
    assert_eq!(std::fs::read_to_string(&py).unwrap(), "x = 1\n");
    assert_eq!(ran(&marker), "");
    drop(c);
    drop(s);
    let s = serve_hostile(&sb, &["--trust-workspace"]);
    let mut c = s.client();
    let r = reformat(&mut c, &py);
    assert!(is_error(&r), "{r}");
    let ruff = sb.ws().join(".venv/bin/ruff");
    assert_eq!(ran(&marker), format!("{}\n", ruff.display()));
}

#[test]
fn prettier_runs_only_if_trusted_and_never_the_workspace_copy() {
    let sb = Sandbox::new();
    let marker = hostile(&sb, &["node_modules/.bin/prettier", "prettier"]);
    // prettier --write --log-level warn FILE
    tool(&sb, "prettier", "printf 'let x = 1;\\n' > \"$4\"");
    let js = sb.write("a.js", "let x=1\n");
    let s = serve_hostile(&sb, &[]);
    let mut c = s.client();
    let r = reformat(&mut c, &js);
    assert!(is_error(&r), "{r}");
    assert_eq!(
        texts(&r),
        [
            "the built-in formatter for a.js runs only with --trust-workspace: prettier loads the workspace's configuration, which may be JavaScript (prettier.config.js) or name plugins from its node_modules. Start ccide serve with --trust-workspace, or name a formatter with --formatter 'PATTERN=COMMAND'"
        ]
    );
    assert_eq!(std::fs::read_to_string(&js).unwrap(), "let x=1\n");
    drop(c);
    drop(s);
    // Trusted: the prettier found, by its path, not the one a relative PATH entry names.
    let s = serve_hostile(&sb, &["--trust-workspace"]);
    let mut c = s.client();
    let r = reformat(&mut c, &js);
    assert_eq!(texts(&r), ["OK"], "{r}");
    assert_eq!(std::fs::read_to_string(&js).unwrap(), "let x = 1;\n");
    assert_eq!(ran(&marker), "");
}

/// The rustup proxy `cargo test` runs under (rustup sets CARGO_HOME for the toolchain's
/// programs).
fn rustup_proxy() -> PathBuf {
    let home = std::env::var_os("CARGO_HOME")
        .expect("CARGO_HOME is not set: run the tests with cargo installed by rustup");
    let p = Path::new(&home).join("bin/rustup");
    assert!(p.is_file(), "no rustup proxy at {}", p.display());
    p
}

#[test]
fn rustfmt_through_rustup_never_runs_the_toolchain_the_workspace_names_unless_trusted() {
    let sb = Sandbox::new();
    let marker = hostile(&sb, &["toolchain/bin/rustfmt", "toolchain/bin/rustc"]);
    sb.add_tool("rustfmt", rustup_proxy());
    sb.write(
        "rust-toolchain.toml",
        format!(
            "[toolchain]\npath = \"{}\"\n",
            sb.ws().join("toolchain").display()
        ),
    );
    let rs = sb.write("src/main.rs", "fn main( ) {}\n");
    let s = serve_hostile(&sb, &[]);
    let mut c = s.client();
    let r = reformat(&mut c, &rs);
    assert_eq!(
        texts(&r),
        [format!(
            "the built-in formatter for src/main.rs runs only with --trust-workspace: {} is a rustup proxy, which runs the toolchain {} names (it may be one the repository ships). Start ccide serve with --trust-workspace, or name a formatter with --formatter 'PATTERN=COMMAND'",
            bin(&sb).join("rustfmt").display(),
            sb.ws().join("rust-toolchain.toml").display()
        )]
    );
    assert_eq!(ran(&marker), "");
    drop(c);
    drop(s);
    // The premise: trusted, the proxy does run the workspace's toolchain.
    let s = serve_hostile(&sb, &["--trust-workspace"]);
    let mut c = s.client();
    let r = reformat(&mut c, &rs);
    assert!(is_error(&r), "{r}");
    let shipped = sb.ws().join("toolchain/bin/rustfmt");
    assert_eq!(ran(&marker), format!("{}\n", shipped.display()));
}

// ---------------------------------------------------------------- language servers

#[test]
fn a_built_in_language_server_gets_a_path_without_relative_or_workspace_entries() {
    let sb = Sandbox::new();
    let marker = hostile(
        &sb,
        &["node_modules/.bin/python3", "python3", ".venv/bin/python3"],
    );
    let log = sb.root.join("fake.log");
    let fake = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/src/langservers/fake_server.py"
    );
    // As pyright does at start: run the python3 found on PATH.
    let record = tool(
        &sb,
        "pyright-langserver",
        &format!(
            "python3 -c pass\nexec '{}' '{fake}' '' '{}'",
            python3().display(),
            log.display()
        ),
    );
    let py = sb.write("a.py", "ERR\n");
    let s = serve_hostile(&sb, &["--no-default-checkers"]);
    let mut c = s.client();
    let v = wait_for("the server's diagnostics", Duration::from_secs(20), || {
        let v = diagnostics(&mut c, json!({"uri": uri(&py)}));
        (v[0]["diagnostics"]
            .as_array()
            .is_some_and(|d| !d.is_empty()))
        .then_some(v)
    });
    assert_eq!(v[0]["diagnostics"][0]["message"], "bad ERR", "{v}");
    assert_eq!(ran(&marker), "");
    assert_eq!(
        std::fs::read_to_string(record).unwrap(),
        bin(&sb).display().to_string()
    );
}

/// The real prettier loads a `prettier.config.js`, a program: only with trust.
#[test]
#[ignore = "needs prettier: .ci/lsp-install, named by CCIDE_TEST_LSP_DIR"]
fn the_real_prettier_runs_the_workspace_config_only_if_trusted() {
    let dir = PathBuf::from(
        std::env::var_os("CCIDE_TEST_LSP_DIR")
            .expect("CCIDE_TEST_LSP_DIR names the tools .ci/lsp-install installed"),
    );
    let sb = Sandbox::new();
    sb.add_tool("prettier", dir.join("bin/prettier"));
    let marker = sb.root.join("config-ran");
    sb.write(
        "prettier.config.js",
        format!(
            "require('fs').writeFileSync({:?}, 'ran');\nmodule.exports = {{ semi: false }};\n",
            marker.display().to_string()
        ),
    );
    let js = sb.write("a.js", "let x=1;\n");
    let s = sb.serve(&[]);
    let mut c = s.client();
    let r = reformat(&mut c, &js);
    assert!(is_error(&r), "{r}");
    assert!(
        texts(&r)[0]
            .starts_with("the built-in formatter for a.js runs only with --trust-workspace"),
        "{r}"
    );
    assert!(!marker.exists());
    assert_eq!(std::fs::read_to_string(&js).unwrap(), "let x=1;\n");
    drop(c);
    drop(s);
    let s = sb.serve(&["--trust-workspace"]);
    let mut c = s.client();
    let r = reformat(&mut c, &js);
    assert_eq!(texts(&r), ["OK"], "{r}");
    assert_eq!(std::fs::read_to_string(&js).unwrap(), "let x = 1\n");
    assert_eq!(std::fs::read_to_string(&marker).unwrap(), "ran");
}

// ---------------------------------------------------------------- executeCode

#[test]
fn the_execute_code_kernel_is_the_python3_found_outside_the_workspace() {
    let sb = Sandbox::new();
    let marker = hostile(
        &sb,
        &["node_modules/.bin/python3", "python3", ".venv/bin/python3"],
    );
    let s = serve_hostile(&sb, &["--exec", "on"]);
    let mut c = s.client();
    let r = c.call(
        "executeCode",
        json!({"code": "import os\nprint(os.environ['PATH'])"}),
    );
    assert_eq!(texts(&r), [format!("{}\n", bin(&sb).display())], "{r}");
    assert_eq!(ran(&marker), "");
}

// ---------------------------------------------------------------- folders added later

#[test]
fn a_built_in_in_a_folder_added_since_serve_started_runs_only_if_trusted() {
    let sb = Sandbox::without_system_tools();
    let py = sb.write("bad.py", "def f(:\n");
    tool(&sb, "pyright-langserver", "exit 1");
    let srv = sb.serve(&[]);
    // The sandbox's bin, where serve found python3 and the server, becomes a workspace folder.
    sb.run_ok(&["workspace", "add", s(&bin(&sb))]);
    let mut c = srv.client();
    let v = diagnostics(&mut c, json!({"uri": uri(&py)}));
    assert_eq!(v[0]["diagnostics"], json!([]), "{v}");
    for line in [
        format!(
            "language server pyright-langserver: {} lies inside a workspace folder and runs only with --trust-workspace; not used",
            bin(&sb).join("pyright-langserver").display()
        ),
        format!(
            "built-in checker {} lies inside a workspace folder and runs only with --trust-workspace; {} is not checked",
            bin(&sb).join("python3").display(),
            py.display()
        ),
    ] {
        wait_for(&line, DEADLINE, || srv.log().contains(&line).then_some(()));
    }
    assert!(!sb.root.join("pyright-langserver.path").exists());
}
