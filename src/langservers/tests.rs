//! The registry's pure logic; the conversation with a server played in memory by the test
//! (`Script`: initialize, requests both ways, documents held, finality through the driver);
//! finality, life cycle and protocol against `fake_server.py` (deterministic); and the real
//! servers `.ci/lsp-install` puts in $CCIDE_TEST_LSP_DIR/bin (ignored by default: they need
//! that install; the machine's PATH is never used). Finality's own rules are tested without
//! any of these, in `finality.rs`.

use super::*;
use profiles::{TS_PATTERNS, rust_analyzer_present};
use serde_json::json;
use std::sync::Mutex;

use crate::workspaces::Workspaces;

/// A final result's diagnostic, as the tests look at it.
#[derive(Clone, Debug, PartialEq)]
struct Diagnostic {
    start_line: u64,
    start_char: u64,
    end_char: u64,
    severity: u64,
    message: String,
    source: String,
    code: Option<String>,
}

const ERROR: u64 = 1;

fn diagnostic(v: &Value) -> Diagnostic {
    let r = &v["range"];
    Diagnostic {
        start_line: r["start"]["line"].as_u64().unwrap(),
        start_char: r["start"]["character"].as_u64().unwrap(),
        end_char: r["end"]["character"].as_u64().unwrap(),
        severity: v["severity"].as_u64().unwrap_or(ERROR),
        message: v["message"].as_str().unwrap_or_default().into(),
        source: v["source"].as_str().unwrap_or_default().into(),
        code: match &v["code"] {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        },
    }
}

/// A fresh directory under the system's temp dir, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new(label: &str) -> TempDir {
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let p = std::env::temp_dir().join(format!("ccide-lsp {label} {}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(std::fs::canonicalize(&p).unwrap())
    }

    fn path(&self) -> &Path {
        &self.0
    }

    fn write(&self, rel: &str, text: &str) -> PathBuf {
        let p = self.0.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
        p
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Every call the sink received: (server, file, diagnostics).
type Got = Arc<Mutex<Vec<(String, PathBuf, Vec<Diagnostic>)>>>;

fn sink() -> (Sink, Got) {
    let got: Got = Arc::default();
    let g = got.clone();
    let sink: Sink = Arc::new(move |server: &str, f: Final| {
        let ds = f.items.iter().map(diagnostic).collect();
        g.lock().unwrap().push((server.to_string(), f.path, ds));
    });
    (sink, got)
}

/// The results the sink received for `p`, oldest first.
fn results(got: &Got, p: &Path) -> Vec<Vec<Diagnostic>> {
    got.lock()
        .unwrap()
        .iter()
        .filter(|c| c.1 == p)
        .map(|c| c.2.clone())
        .collect()
}

fn last(got: &Got, p: &Path) -> Vec<Diagnostic> {
    results(got, p)
        .pop()
        .unwrap_or_else(|| panic!("no final result for {}", p.display()))
}

/// Polls `f` until true; panics naming `what` after `limit`.
fn wait_for(what: &str, limit: Duration, mut f: impl FnMut() -> bool) {
    let end = Instant::now() + limit;
    while !f() {
        assert!(
            Instant::now() < end,
            "timed out after {limit:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn gone(pid: u64) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // A zombie has exited; whoever inherited it reaps it.
        Ok(s) => s[s.rfind(')').unwrap() + 1..].trim_start().starts_with('Z'),
    }
}

fn folders(one: &Path) -> Arc<Workspaces> {
    Arc::new(Workspaces::new(vec![one.to_path_buf()]))
}

fn status_of(ls: &LangServers) -> Value {
    ls.status()[0].clone()
}

fn test_cfg() -> Config {
    Config {
        idle: Duration::from_secs(600),
        max_open: 100,
        quiet: Duration::from_millis(200),
        backoff_min: Duration::from_millis(100),
        backoff_max: Duration::from_secs(2),
        init_timeout: Duration::from_secs(20),
        max_queued: 64 << 20,
        trust_workspace: false,
    }
}

/// A session with `fake_server.py` for `*.fk` files, and the log of what it received.
struct Fake {
    dir: TempDir,
    log: PathBuf,
    got: Got,
    ls: Arc<LangServers>,
}

impl Fake {
    fn start(label: &str, flags: &str, cfg: Config) -> Fake {
        if std::env::var_os("CCIDE_TEST_LSP_DEBUG").is_some() {
            crate::log::init(crate::log::Level::Debug);
        }
        let dir = TempDir::new(label);
        let script = dir.write("fake_server.py", include_str!("fake_server.py"));
        let log = dir.path().join("fake.log");
        let spec = Spec {
            pattern: "*.fk".into(),
            words: vec![
                "python3".into(),
                script.to_string_lossy().into(),
                flags.into(),
                log.to_string_lossy().into(),
            ],
            name: "python3".into(),
            builtin: false,
        };
        let (sink, got) = sink();
        let ls = LangServers::new(vec![spec], folders(dir.path()), cfg, sink);
        Fake { dir, log, got, ls }
    }

    /// What the server logged: messages received (`got`) and events.
    fn log(&self) -> Vec<Value> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }

    fn received(&self, method: &str) -> Vec<Value> {
        self.log()
            .into_iter()
            .filter(|e| e["got"]["method"] == method)
            .map(|e| e["got"]["params"].clone())
            .collect()
    }

    fn touch_and_wait(&self, p: &Path, unsaved: Option<&str>) {
        let t = self.ls.touch(p, unsaved).expect("a server takes *.fk");
        assert!(
            LangServers::wait(&[t], Duration::from_secs(20)),
            "no final result for {} within 20 s; status {}",
            p.display(),
            self.ls.status()
        );
    }
}

// ---------------------------------------------------------------- pure logic

#[test]
fn specs_parse_like_checkers() {
    let s = parse_spec("*.ts=typescript-language-server --stdio").unwrap();
    assert_eq!(
        s,
        Spec {
            pattern: "*.ts".into(),
            words: vec!["typescript-language-server".into(), "--stdio".into()],
            name: "typescript-language-server".into(),
            builtin: false,
        }
    );
    let s = parse_spec(" src/**/*.py = '/opt/my tools/pyright-langserver' --stdio").unwrap();
    assert_eq!(s.pattern, "src/**/*.py");
    assert_eq!(s.words[0], "/opt/my tools/pyright-langserver");
    assert_eq!(s.name, "pyright-langserver");
    for bad in [
        "nothing",
        "*.ts=",
        "=gopls",
        "*.ts=  ",
        "*.ts='unterminated",
    ] {
        let e = parse_spec(bad).unwrap_err();
        assert!(e.contains(bad.trim()), "{e}");
    }
}

#[test]
fn builtins_follow_what_is_found_and_the_project() {
    let dir = TempDir::new("builtins");
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let bin = |n: &str| dir.write(&format!("bin/{n}"), "");
    let found: Vec<(&str, PathBuf)> = [
        "typescript-language-server",
        "pyright-langserver",
        "basedpyright-langserver",
        "gopls",
        "clangd",
        "rust-analyzer",
    ]
    .iter()
    .map(|n| (*n, bin(n)))
    .collect();
    let find = |n: &str| found.iter().find(|f| f.0 == n).map(|f| f.1.clone());
    let names = |specs: &[Spec]| {
        let mut n: Vec<String> = specs.iter().map(|s| s.name.clone()).collect();
        n.dedup();
        n
    };
    // No compile_commands.json, no Cargo.toml: no clangd, no rust-analyzer; basedpyright
    // before pyright.
    let specs = builtins(std::slice::from_ref(&ws), &find, false);
    assert_eq!(
        names(&specs),
        [
            "typescript-language-server",
            "basedpyright-langserver",
            "gopls"
        ]
    );
    let ts: Vec<&Spec> = specs
        .iter()
        .filter(|s| s.name == "typescript-language-server")
        .collect();
    assert_eq!(ts.len(), TS_PATTERNS.len());
    assert_eq!(
        ts[0].words,
        [found[0].1.to_string_lossy().as_ref(), "--stdio"]
    );
    // One process for all of a server's patterns.
    let ls = LangServers::new(specs, folders(&ws), Config::default(), sink().0);
    assert_eq!(ls.status().as_array().unwrap().len(), 3);
    assert!(ls.covers(&ws.join("src/deep/x.tsx")));
    assert!(ls.covers(&ws.join("m.pyi")));
    assert!(!ls.covers(&ws.join("README.md")));
    assert!(
        !ls.covers(Path::new("/elsewhere/x.ts")),
        "outside the workspace"
    );
    assert_eq!(status_of(&ls)["state"], "stopped");
    drop(ls);

    std::fs::write(ws.join("Cargo.toml"), "").unwrap();
    std::fs::create_dir_all(ws.join("build")).unwrap();
    std::fs::write(ws.join("build/compile_commands.json"), "[]").unwrap();
    // The project's own TypeScript 7 is preferred: it is a pull-only LSP server itself. But
    // it is a program the repository ships, and so is what rust-analyzer builds and runs:
    // neither is used unless the user trusts the workspace.
    let pkg = ws.join("node_modules/typescript");
    std::fs::create_dir_all(pkg.join("bin")).unwrap();
    std::fs::write(pkg.join("package.json"), r#"{"version": "7.0.2"}"#).unwrap();
    std::fs::write(pkg.join("bin/tsc"), "").unwrap();
    std::fs::create_dir_all(ws.join("node_modules/.bin")).unwrap();
    std::os::unix::fs::symlink("../typescript/bin/tsc", ws.join("node_modules/.bin/tsc")).unwrap();
    assert_eq!(
        names(&builtins(std::slice::from_ref(&ws), &find, false)),
        [
            "typescript-language-server",
            "basedpyright-langserver",
            "gopls",
            "clangd"
        ]
    );
    assert!(builtins(std::slice::from_ref(&ws), &|_| None, false).is_empty());
    // A PATH naming the workspace's node_modules/.bin finds nothing there.
    let shipped = ws.join("node_modules/.bin/gopls");
    std::fs::write(&shipped, "").unwrap();
    let from_ws = |n: &str| (n == "gopls").then(|| shipped.clone());
    assert!(
        builtins(std::slice::from_ref(&ws), &from_ws, false)
            .iter()
            .all(|s| s.name != "gopls")
    );
    assert_eq!(
        builtins(std::slice::from_ref(&ws), &from_ws, true)[TS_PATTERNS.len()].name,
        "gopls"
    );
    let specs = builtins(std::slice::from_ref(&ws), &find, true);
    assert_eq!(
        names(&specs),
        [
            "tsc",
            "basedpyright-langserver",
            "gopls",
            "clangd",
            "rust-analyzer"
        ]
    );
    assert_eq!(specs[0].words[1..], ["--lsp", "--stdio"]);
    let clangd = specs.iter().find(|s| s.name == "clangd").unwrap();
    assert_eq!(clangd.words[1..], ["--background-index=false"]);
    assert_eq!(
        builtins(std::slice::from_ref(&ws), &|_| None, true).len(),
        TS_PATTERNS.len()
    );
}

/// A server's patterns match a path relative to the folder holding it, the deepest when
/// folders nest (as for checkers and everything else), and folders added while serve runs
/// (`ccide workspace add`) are covered too.
#[test]
fn servers_cover_files_by_the_deepest_folder_and_folders_added_later() {
    let dir = TempDir::new("covers");
    let (outer, inner, later) = (
        dir.path().to_path_buf(),
        dir.path().join("inner"),
        dir.path().join("later"),
    );
    let ws = Arc::new(Workspaces::new(vec![outer.clone(), inner.clone()]));
    let spec = parse_spec("src/*.fk=memory-server").unwrap();
    let ls = LangServers::new(vec![spec], ws.clone(), test_cfg(), sink().0);
    assert!(ls.covers(&inner.join("src/a.fk")), "src/a.fk in inner");
    assert!(ls.covers(&outer.join("src/a.fk")));
    assert!(!ls.covers(&later.join("src/a.fk")), "not a folder yet");
    ws.change(|f| f.push(later.clone()));
    assert!(ls.covers(&later.join("src/a.fk")));
}

/// A tsconfig.json that is not a regular file (a FIFO would block its reader for good, and
/// `--lsp-warm` with it) is not read: the first file is found by the walk.
#[test]
fn a_tsconfig_that_is_a_fifo_never_blocks_finding_the_first_file() {
    let dir = TempDir::new("fifo-tsconfig");
    let a = dir.write("src/a.ts", "");
    let ws = dir.path().to_path_buf();
    let fifo = ws.join("tsconfig.json");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(registry::first_file(&folders(&ws), &["*.ts".into()])));
    assert_eq!(rx.recv_timeout(WITHIN).expect("not blocked"), Some(a));
}

#[test]
fn a_rustup_proxy_without_the_component_is_not_rust_analyzer() {
    let dir = TempDir::new("rustup");
    let rustup = dir.write("cargo/bin/rustup", "");
    let proxy = dir.path().join("cargo/bin/rust-analyzer");
    std::os::unix::fs::symlink(&rustup, &proxy).unwrap();
    let home = dir.path().join("rustup");
    std::fs::create_dir_all(home.join("toolchains/stable/bin")).unwrap();
    assert!(!rust_analyzer_present(&proxy, Some(&home)));
    dir.write("rustup/toolchains/stable/bin/rust-analyzer", "");
    assert!(rust_analyzer_present(&proxy, Some(&home)));
    assert!(rust_analyzer_present(
        &dir.write("ra/rust-analyzer", ""),
        None
    ));
}

// ---------------------------------------------------------------- fake server

#[test]
fn a_partial_publish_is_not_exposed_until_final() {
    // The full result comes 250 ms after a partial one; stale versions are ignored.
    let cfg = Config {
        quiet: Duration::from_millis(500),
        ..test_cfg()
    };
    let f = Fake::start("partial", "partial=0.25,stale", cfg);
    let a = f.dir.write("a.fk", "x ERR\ny ERR\n");
    f.touch_and_wait(&a, None);
    let all = results(&f.got, &a);
    assert_eq!(all.len(), 1, "only the final result: {all:?}");
    assert_eq!(all[0].len(), 2);
    assert_eq!(f.got.lock().unwrap()[0].0, "python3");

    // Columns: the server counts UTF-16 units (🦀 is two), and so does the result.
    f.dir.write("a.fk", "é🦀 ERR\nfine\n");
    f.touch_and_wait(&a, None);
    let all = results(&f.got, &a);
    assert_eq!(all.len(), 2, "{all:?}");
    let d = &all[1][0];
    assert_eq!((d.start_line, d.start_char, d.end_char), (0, 4, 7));
    assert_eq!(
        (d.severity, d.code.as_deref(), d.source.as_str()),
        (ERROR, Some("7"), "fake")
    );
    assert!(all.iter().flatten().all(|d| d.message != "stale"));
}

#[test]
fn results_wait_for_work_in_progress_to_end() {
    // While "loading" the server publishes an empty result; a short quiet period alone would
    // take it as final.
    let cfg = Config {
        quiet: Duration::from_millis(50),
        ..test_cfg()
    };
    let f = Fake::start("progress", "loading=1", cfg);
    let a = f.dir.write("a.fk", "ERR\n");
    let t = f.ls.touch(&a, None).unwrap();
    wait_for("the progress to begin", Duration::from_secs(10), || {
        status_of(&f.ls)["state"] == "indexing"
    });
    assert!(LangServers::wait(&[t], Duration::from_secs(20)));
    assert_eq!(results(&f.got, &a), [last(&f.got, &a)], "one result only");
    assert_eq!(last(&f.got, &a).len(), 1);
    assert_eq!(status_of(&f.ls)["state"], "ready");
}

#[test]
fn a_pull_answered_during_work_in_progress_is_asked_again() {
    let f = Fake::start("pull", "pull,loading=1", test_cfg());
    let a = f.dir.write("a.fk", "ERR\n");
    f.touch_and_wait(&a, None);
    assert_eq!(results(&f.got, &a).len(), 1);
    assert_eq!(last(&f.got, &a).len(), 1);
    assert!(f.received("textDocument/diagnostic").len() >= 2);
    assert_eq!(status_of(&f.ls)["diagnostics"], "pull");
}

#[test]
fn server_requests_are_answered_and_capabilities_are_honest() {
    let f = Fake::start("requests", "pull=dynamic,requests,watch", test_cfg());
    let a = f.dir.write("a.fk", "ok\nERR\n");
    f.touch_and_wait(&a, None);
    assert_eq!(last(&f.got, &a).len(), 1, "pulled once registered");
    let log = f.log();
    let answer = |id: u64| {
        log.iter()
            .find(|e| e["got"]["id"] == id && e["got"]["method"].is_null())
            .unwrap_or_else(|| panic!("no answer to request {id}: {log:?}"))["got"]
            .clone()
    };
    assert_eq!(answer(1001)["result"], json!([null, null]), "configuration");
    let folders = &answer(1002)["result"];
    assert_eq!(folders[0]["uri"], crate::files::file_uri(f.dir.path()));
    assert_eq!(answer(1003)["error"]["code"], -32601, "unknown method");
    assert_eq!(answer(1004)["result"], Value::Null, "registerCapability");
    let pulls = f.received("textDocument/diagnostic");
    assert_eq!(pulls[0]["identifier"], "fakeid");

    let init = &f.received("initialize")[0];
    let caps = &init["capabilities"];
    assert_eq!(
        caps["textDocument"]["publishDiagnostics"]["versionSupport"],
        true
    );
    assert_eq!(
        caps["textDocument"]["diagnostic"]["dynamicRegistration"],
        true
    );
    assert_eq!(caps["window"]["workDoneProgress"], true);
    assert_eq!(caps["workspace"]["configuration"], true);
    assert_eq!(
        caps["workspace"]["didChangeWatchedFiles"]["dynamicRegistration"],
        true
    );
    assert_eq!(init["processId"], std::process::id());
    assert_eq!(
        init["workspaceFolders"][0]["uri"],
        crate::files::file_uri(f.dir.path())
    );

    let b = f.dir.path().join("new file é.fk");
    f.ls.files_changed(&[(b.clone(), Change::Created)]);
    wait_for("didChangeWatchedFiles", Duration::from_secs(10), || {
        !f.received("workspace/didChangeWatchedFiles").is_empty()
    });
    let w = &f.received("workspace/didChangeWatchedFiles")[0];
    assert_eq!(
        w["changes"],
        json!([{"uri": crate::files::file_uri(&b), "type": 1}])
    );
}

#[test]
fn a_crashed_server_restarts_with_backoff_and_answers_right() {
    let dir_flag =
        std::env::temp_dir().join(format!("ccide-lsp-crash-flag-{}", std::process::id()));
    std::fs::write(&dir_flag, "").unwrap();
    let f = Fake::start(
        "crash",
        &format!("crash={}", dir_flag.display()),
        test_cfg(),
    );
    let a = f.dir.write("a.fk", "CRASH\nERR\n");
    let t = f.ls.touch(&a, None).unwrap();
    let first_pid = status_of(&f.ls)["pid"].as_u64().expect("started by touch");
    assert!(
        LangServers::wait(&[t], Duration::from_secs(20)),
        "{}",
        f.ls.status()
    );
    let _ = std::fs::remove_file(&dir_flag);
    assert!(f.log().iter().any(|e| e["event"] == "crash"));
    let st = status_of(&f.ls);
    assert_eq!(
        (st["state"].as_str(), st["restarts"].as_u64()),
        (Some("ready"), Some(1)),
        "{st}"
    );
    assert!(
        st["last_error"]
            .as_str()
            .unwrap()
            .contains("exit status: 3"),
        "{st}"
    );
    assert_ne!(st["pid"].as_u64(), Some(first_pid));
    assert!(gone(first_pid));
    assert_eq!(last(&f.got, &a).len(), 1);

    f.dir.write("a.fk", "fine\nERR\nERR\n");
    f.touch_and_wait(&a, None);
    let ds = last(&f.got, &a);
    assert_eq!(ds.iter().map(|d| d.start_line).collect::<Vec<_>>(), [1, 2]);
}

#[test]
fn a_hung_server_never_blocks_beyond_the_budget() {
    let f = Fake::start("hung", "hang", test_cfg());
    let a = f.dir.write("a.fk", "ERR\n");
    let started = Instant::now();
    let t = f.ls.touch(&a, None).unwrap();
    assert!(!LangServers::wait(&[t], Duration::from_millis(300)));
    // Well within the 20 s it would take to give up on its initialize.
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    // Further calls do not block on it either (nothing is written to it under a lock).
    for i in 0..50 {
        let t = f.ls.touch(&a, Some(&format!("ERR {i}\n"))).unwrap();
        assert!(!LangServers::wait(&[t], Duration::ZERO));
    }
    assert!(started.elapsed() < Duration::from_secs(10));
    let st = status_of(&f.ls);
    assert_eq!(st["state"], "starting");
    let pid = st["pid"].as_u64().unwrap();
    // It answers neither shutdown nor exit: killed.
    let stopping = Instant::now();
    f.ls.shutdown();
    assert!(
        stopping.elapsed() < Duration::from_secs(10),
        "{:?}",
        stopping.elapsed()
    );
    assert!(gone(pid));
    assert!(results(&f.got, &a).is_empty());
}

#[test]
fn a_server_silent_at_initialize_is_killed_and_restarted() {
    let cfg = Config {
        init_timeout: Duration::from_millis(300),
        ..test_cfg()
    };
    let f = Fake::start("silent", "hang", cfg);
    let a = f.dir.write("a.fk", "ERR\n");
    let _ = f.ls.touch(&a, None).unwrap();
    let pid = status_of(&f.ls)["pid"].as_u64().unwrap();
    wait_for("the restart", Duration::from_secs(10), || {
        status_of(&f.ls)["restarts"] == 1
    });
    assert!(gone(pid));
    assert!(
        status_of(&f.ls)["last_error"]
            .as_str()
            .unwrap()
            .contains("no answer to initialize")
    );
}

#[test]
fn least_recently_used_documents_are_closed_beyond_the_bound() {
    let cfg = Config {
        max_open: 2,
        ..test_cfg()
    };
    let f = Fake::start("lru", "", cfg);
    let [a, b, c] = ["a.fk", "b.fk", "c.fk"].map(|n| f.dir.write(n, "ERR\n"));
    for p in [&a, &b, &c] {
        f.touch_and_wait(p, None);
    }
    let uri = |p: &Path| json!(crate::files::file_uri(p));
    wait_for("didClose", Duration::from_secs(10), || {
        !f.received("textDocument/didClose").is_empty()
    });
    let closed: Vec<Value> = f
        .received("textDocument/didClose")
        .iter()
        .map(|c| c["textDocument"]["uri"].clone())
        .collect();
    assert_eq!(closed, [uri(&a)]);
    assert_eq!(status_of(&f.ls)["open_documents"], 2);
    // Wanted again: opened again, and now b is the least recently used.
    f.touch_and_wait(&a, None);
    let opened: Vec<Value> = f
        .received("textDocument/didOpen")
        .iter()
        .map(|c| c["textDocument"]["uri"].clone())
        .collect();
    assert_eq!(opened, [uri(&a), uri(&b), uri(&c), uri(&a)]);
    wait_for("the second didClose", Duration::from_secs(10), || {
        f.received("textDocument/didClose").len() == 2
    });
    assert_eq!(
        f.received("textDocument/didClose")[1]["textDocument"]["uri"],
        uri(&b)
    );
}

#[test]
fn unchanged_files_are_not_sent_again_and_unsaved_text_is_used() {
    // Without a version in publishes, as typescript-language-server does.
    let f = Fake::start("unsaved", "noversion", test_cfg());
    let a = f.dir.write("a.fk", "clean\n");
    f.touch_and_wait(&a, None);
    assert_eq!(last(&f.got, &a), []);
    f.touch_and_wait(&a, None);
    assert_eq!(f.received("textDocument/didOpen").len(), 1);
    assert!(
        f.received("textDocument/didChange").is_empty(),
        "same content"
    );

    f.touch_and_wait(&a, Some("unsaved ERR\n"));
    assert_eq!(last(&f.got, &a).len(), 1);
    let changes = f.received("textDocument/didChange");
    assert_eq!(changes[0]["contentChanges"][0]["text"], "unsaved ERR\n");
    // Back to the file on disk.
    f.touch_and_wait(&a, None);
    assert_eq!(last(&f.got, &a), []);
    let v: Vec<i64> = f
        .received("textDocument/didChange")
        .iter()
        .map(|c| c["textDocument"]["version"].as_i64().unwrap())
        .collect();
    assert!(v.len() == 2 && v[0] < v[1], "{v:?}");

    // A deleted file: closed, and its diagnostics cleared.
    f.touch_and_wait(&a, Some("ERR\n"));
    std::fs::remove_file(&a).unwrap();
    assert!(f.ls.touch(&a, None).is_none());
    assert_eq!(last(&f.got, &a), []);
    wait_for("didClose", Duration::from_secs(10), || {
        !f.received("textDocument/didClose").is_empty()
    });
}

#[test]
fn no_process_outlives_shutdown() {
    let f = Fake::start("orphans", "child", test_cfg());
    let a = f.dir.write("a.fk", "ERR\n");
    f.touch_and_wait(&a, None);
    let pid = status_of(&f.ls)["pid"].as_u64().unwrap();
    let child = f
        .log()
        .iter()
        .find_map(|e| e["pid"].as_u64())
        .expect("the child's pid");
    assert!(!gone(child));
    assert!(
        status_of(&f.ls)["rss_kib"].as_u64().unwrap() > 1000,
        "python and sleep"
    );
    let Fake { ls, dir: _dir, .. } = f;
    drop(ls);
    // SIGKILL is sent by then; the kernel may take a moment to finish the processes.
    wait_for(
        "the server and its child to end",
        Duration::from_secs(10),
        || gone(pid) && gone(child),
    );
}

#[test]
fn an_idle_server_stops_and_starts_again_when_needed() {
    // Long enough for python3 to start and answer first even on a loaded machine (at a load
    // average of 15 on 2 cores, 2 s was not): an idle stop during startup would end the wait
    // with no result.
    let cfg = Config {
        idle: Duration::from_secs(6),
        ..test_cfg()
    };
    let f = Fake::start("idle", "", cfg);
    let a = f.dir.write("a.fk", "ERR\n");
    f.touch_and_wait(&a, None);
    assert_eq!(last(&f.got, &a).len(), 1);
    let pid = status_of(&f.ls)["pid"].as_u64().unwrap();
    wait_for("the idle stop", Duration::from_secs(30), || {
        status_of(&f.ls)["state"] == "stopped"
    });
    wait_for("the process to end", Duration::from_secs(10), || gone(pid));
    // Asked to shut down first (whether `exit` follows depends on how fast it answers within
    // the grace period; the group is killed after it either way).
    assert!(!f.received("shutdown").is_empty());
    f.dir.write("a.fk", "ERR\nERR\n");
    f.touch_and_wait(&a, None);
    assert_eq!(last(&f.got, &a).len(), 2);
    assert_eq!(
        status_of(&f.ls)["restarts"],
        0,
        "an idle stop is not a crash"
    );
}

#[test]
fn a_server_that_cannot_run_fails_once_and_stops_covering() {
    let dir = TempDir::new("missing");
    let spec = parse_spec("*.fk=/nonexistent/lsp --stdio").unwrap();
    let ls = LangServers::new(vec![spec], folders(dir.path()), test_cfg(), sink().0);
    let a = dir.write("a.fk", "x");
    assert!(ls.covers(&a));
    assert!(ls.touch(&a, None).is_none());
    assert!(!ls.covers(&a));
    let st = status_of(&ls);
    assert_eq!(st["state"], "failed");
    assert!(
        st["last_error"]
            .as_str()
            .unwrap()
            .contains("cannot run /nonexistent/lsp"),
        "{st}"
    );
}

#[test]
fn a_server_dying_before_initialize_is_given_up_after_three_tries() {
    let dir = TempDir::new("dies");
    let spec = parse_spec(
        "*.fk=python3 -c 'import sys; print(\"no such toolchain\", file=sys.stderr); sys.exit(1)'",
    )
    .unwrap();
    let ls = LangServers::new(vec![spec], folders(dir.path()), test_cfg(), sink().0);
    let a = dir.write("a.fk", "x");
    let t = ls.touch(&a, None).unwrap();
    wait_for("giving up", Duration::from_secs(10), || {
        status_of(&ls)["state"] == "failed"
    });
    assert!(
        LangServers::wait(&[t], Duration::ZERO),
        "a failed server's tickets are done"
    );
    assert!(!ls.covers(&a));
    let e = status_of(&ls)["last_error"].as_str().unwrap().to_string();
    assert!(
        e.contains("3 times") && e.contains("no such toolchain"),
        "{e}"
    );
}

// ---------------------------------------------------------------- real servers

/// A server installed by `.ci/lsp-install` in $CCIDE_TEST_LSP_DIR/bin; fails loudly when
/// missing.
fn lsp_bin(name: &str) -> String {
    let dir = std::env::var_os("CCIDE_TEST_LSP_DIR").expect(
        "CCIDE_TEST_LSP_DIR is not set: run `.ci/lsp-install DIR`, then CCIDE_TEST_LSP_DIR=DIR",
    );
    let p = Path::new(&dir).join("bin").join(name);
    assert!(
        p.is_file(),
        "{} is missing: run `.ci/lsp-install {}`",
        p.display(),
        Path::new(&dir).display()
    );
    if std::env::var_os("CCIDE_TEST_LSP_DEBUG").is_some() {
        crate::log::init(crate::log::Level::Debug);
    }
    p.to_string_lossy().into_owned()
}

/// Opens `file` (clean), then writes `broken` and expects one error whose code is `code` at
/// `line`, starting where `at` starts in that line (in UTF-16 code units: the lines broken
/// hold a 🦀 before it); prints timings.
#[allow(clippy::too_many_arguments)]
fn break_a_type(
    label: &str,
    ls: &LangServers,
    got: &Got,
    file: &Path,
    broken: &str,
    line: u64,
    at: &str,
    code: &str,
) -> Vec<Diagnostic> {
    let t0 = Instant::now();
    let t = ls.touch(file, None).unwrap();
    assert!(
        LangServers::wait(&[t], Duration::from_secs(90)),
        "{label}: first result; {}",
        ls.status()
    );
    let first = t0.elapsed();
    let errors = |ds: &[Diagnostic]| {
        ds.iter()
            .filter(|d| d.severity == ERROR)
            .cloned()
            .collect::<Vec<_>>()
    };
    assert_eq!(errors(&last(got, file)), [], "{label}: clean at first");
    std::fs::write(file, broken).unwrap();
    let t1 = Instant::now();
    let t = ls.touch(file, None).unwrap();
    assert!(
        LangServers::wait(&[t], Duration::from_secs(60)),
        "{label}: result after the edit; {}",
        ls.status()
    );
    let change = t1.elapsed();
    let ds = errors(&last(got, file));
    let text = broken.lines().nth(line as usize).unwrap();
    let col = text[..text.find(at).unwrap()].encode_utf16().count() as u64;
    assert_eq!(ds.len(), 1, "{label}: {ds:?}");
    assert_eq!(
        (ds[0].start_line, ds[0].start_char, ds[0].code.as_deref()),
        (line, col, Some(code)),
        "{label}: {:?}",
        ds[0]
    );
    eprintln!(
        "{label}: first final result {first:?}, after the edit {change:?}; results seen for the file: {:?}",
        results(got, file).iter().map(Vec::len).collect::<Vec<_>>()
    );
    eprintln!("{label}: status {}", ls.status());
    ds
}

/// Shuts down and checks that the server's whole process tree is gone.
fn shutdown_leaves_no_process(ls: &LangServers) {
    let pid = status_of(ls)["pid"].as_u64().expect("running");
    let tree: Vec<u64> = crate::proc::tree(pid as u32)
        .iter()
        .map(|p| *p as u64)
        .collect();
    let t = Instant::now();
    ls.shutdown();
    eprintln!(
        "shutdown of {} process(es) took {:?}",
        tree.len(),
        t.elapsed()
    );
    wait_for(
        "every process of the server to end",
        Duration::from_secs(10),
        || tree.iter().all(|p| gone(*p)),
    );
}

#[test]
#[ignore = "needs language servers: .ci/lsp-install, then run with --ignored"]
fn typescript_language_server_reports_a_broken_type() {
    let bin = lsp_bin("typescript-language-server");
    let dir = TempDir::new("ts proj é");
    dir.write("tsconfig.json", r#"{"compilerOptions": {"strict": true, "noEmit": true, "target": "es2020", "module": "commonjs"}}"#);
    dir.write(
        "a.ts",
        "export function greet(name: string): string {\n  return \"hi \" + name;\n}\n",
    );
    let b = dir.write(
        "b.ts",
        "import { greet } from \"./a\";\nexport const s: string = greet(\"x\");\n",
    );
    let (sink, got) = sink();
    let spec = parse_spec(&format!("*.ts='{bin}' --stdio")).unwrap();
    let ls = LangServers::new(vec![spec], folders(dir.path()), Config::default(), sink);
    let broken =
        "import { greet } from \"./a\";\nconst t = \"🦀\"; export const s: number = greet(t);\n";
    let ds = break_a_type(
        "typescript-language-server",
        &ls,
        &got,
        &b,
        broken,
        1,
        "s: number",
        "2322",
    );
    assert!(
        ds[0].message.contains("not assignable to type 'number'"),
        "{ds:?}"
    );
    assert_eq!(ds[0].source, "typescript");
    assert_eq!(status_of(&ls)["diagnostics"], "tsserver");

    // Clean, then clean again: the server publishes nothing for "empty again", yet the
    // result is final (asked of tsserver).
    let clean = "import { greet } from \"./a\";\nexport const s: string = greet(\"x\");\n";
    for text in [clean, &format!("{clean}// still clean\n")] {
        std::fs::write(&b, text).unwrap();
        let t = ls.touch(&b, None).unwrap();
        assert!(
            LangServers::wait(&[t], Duration::from_secs(10)),
            "clean edit: {}",
            ls.status()
        );
        assert_eq!(last(&got, &b), []);
    }
    // A dependency's change shows in the dependent file when it is next asked for.
    let a = dir.path().join("a.ts");
    let t = ls.touch(&a, None).unwrap();
    assert!(LangServers::wait(&[t], Duration::from_secs(10)));
    std::fs::write(
        &a,
        "export function greet(name: string): number {\n  return name.length;\n}\n",
    )
    .unwrap();
    let ts = [ls.touch(&a, None).unwrap(), ls.touch(&b, None).unwrap()];
    assert!(LangServers::wait(&ts, Duration::from_secs(10)));
    assert_eq!(last(&got, &a), []);
    let codes: Vec<_> = last(&got, &b).iter().map(|d| d.code.clone()).collect();
    assert_eq!(codes, [Some("2322".to_string())]);
    shutdown_leaves_no_process(&ls);
}

#[test]
#[ignore = "needs language servers: .ci/lsp-install, then run with --ignored"]
fn pyright_reports_a_broken_type_also_in_unsaved_text() {
    let bin = lsp_bin("pyright-langserver");
    let dir = TempDir::new("py proj ü");
    dir.write(
        "a.py",
        "def greet(name: str) -> str:\n    return \"hi \" + name\n",
    );
    let b = dir.write("b.py", "from a import greet\n\nx: str = greet(\"x\")\n");
    let (sink, got) = sink();
    let spec = parse_spec(&format!("*.py='{bin}' --stdio")).unwrap();
    let ls = LangServers::new(vec![spec], folders(dir.path()), Config::default(), sink);
    let broken = "from a import greet\n\nt = \"🦀\"; y: int = greet(t)\n";
    let ds = break_a_type(
        "pyright",
        &ls,
        &got,
        &b,
        broken,
        2,
        "greet(t)",
        "reportAssignmentType",
    );
    assert!(
        ds[0]
            .message
            .contains("\"str\" is not assignable to declared type \"int\""),
        "{ds:?}"
    );
    assert_eq!(status_of(&ls)["diagnostics"], "pull");

    // Unsaved text, with the file on disk unchanged; then a dependency broken on disk.
    let t = ls
        .touch(&b, Some("from a import greet\nz: bytes = greet(1)\n"))
        .unwrap();
    assert!(LangServers::wait(&[t], Duration::from_secs(30)));
    let mut codes: Vec<_> = last(&got, &b)
        .iter()
        .map(|d| (d.start_line, d.code.clone()))
        .collect();
    codes.sort();
    assert_eq!(
        codes,
        [
            (1, Some("reportArgumentType".into())),
            (1, Some("reportAssignmentType".into()))
        ]
    );
    shutdown_leaves_no_process(&ls);
}

#[test]
#[ignore = "needs language servers: .ci/lsp-install, then run with --ignored"]
fn clangd_reports_an_undeclared_name() {
    let bin = lsp_bin("clangd");
    let dir = TempDir::new("c proj ñ");
    let main = dir.write("main.c", "int main(void) {\n  return 0;\n}\n");
    let db = json!([{"directory": dir.path(), "file": main, "arguments": ["cc", "-c", "main.c"]}]);
    dir.write("compile_commands.json", &db.to_string());
    let (sink, got) = sink();
    // As the built-in runs it.
    let spec = parse_spec(&format!("*.c='{bin}' --background-index=false")).unwrap();
    let ls = LangServers::new(vec![spec], folders(dir.path()), Config::default(), sink);
    let broken = "int main(void) {\n  const char *t = \"🦀\"; return undefined_name;\n}\n";
    let ds = break_a_type(
        "clangd",
        &ls,
        &got,
        &main,
        broken,
        1,
        "undefined_name",
        "undeclared_var_use",
    );
    assert!(
        ds[0]
            .message
            .contains("undeclared identifier 'undefined_name'"),
        "{ds:?}"
    );
    shutdown_leaves_no_process(&ls);
}

// ---------------------------------------------------------------- a server played in memory

use crate::lsp::connection::{Connection, Received};
use crate::proc::Queue;
use crate::rpc::{Message, Notification, Request};
use server::OnAnswer;

/// ccide's language-server client talking to the test over `Connection::memory()`: the test
/// reads what ccide sends and answers as the server would, in order, with no process.
struct Script {
    dir: TempDir,
    got: Got,
    ls: Arc<LangServers>,
    /// The test's end of each connection ccide opened (one per start), newest last.
    peers: Arc<Queue<Connection>>,
    peer: Option<Connection>,
}

const WITHIN: Duration = Duration::from_secs(10);

impl Script {
    fn start(label: &str, cfg: Config) -> Script {
        Script::start_as(label, cfg, "memory-server")
    }

    /// A server whose command is `command` (its first word names the program), played in
    /// memory all the same.
    fn start_as(label: &str, cfg: Config, command: &str) -> Script {
        let dir = TempDir::new(label);
        let spec = parse_spec(&format!("*.fk={command}")).unwrap();
        let (sink, got) = sink();
        let ls = LangServers::new(vec![spec], folders(dir.path()), cfg, sink);
        let peers: Arc<Queue<Connection>> = Arc::default();
        let p = peers.clone();
        *ls.servers[0].memory.lock().unwrap() = Some(Arc::new(move || {
            let (ours, theirs) = Connection::memory();
            p.push(theirs);
            ours
        }));
        Script {
            dir,
            got,
            ls,
            peers,
            peer: None,
        }
    }

    fn server(&self) -> &Arc<Server> {
        &self.ls.servers[0]
    }

    /// The next message ccide sends, after it connected (started the server).
    fn recv(&mut self) -> Message {
        if self.peer.is_none() {
            let deadline = Instant::now() + WITHIN;
            self.peer = Some(
                self.peers
                    .pop(Some(deadline))
                    .expect("ccide starts the server"),
            );
        }
        let peer = self.peer.as_ref().unwrap();
        match peer.receiver.pop(Some(Instant::now() + WITHIN)) {
            Some(Received::Message(m)) => m,
            other => panic!("expected a message from ccide, got {other:?}"),
        }
    }

    /// The next message, which must be a request for `method`.
    fn request(&mut self, method: &str) -> Request {
        match self.recv() {
            Message::Request(r) if r.method == method => r,
            other => panic!("expected a {method} request, got {other:?}"),
        }
    }

    fn notification(&mut self, method: &str) -> Notification {
        match self.recv() {
            Message::Notification(n) if n.method == method => n,
            other => panic!("expected a {method} notification, got {other:?}"),
        }
    }

    fn send(&self, v: Value) {
        let mut v = v;
        v["jsonrpc"] = "2.0".into();
        self.peer
            .as_ref()
            .expect("connected")
            .sender
            .send(&v)
            .unwrap();
    }

    fn answer(&self, r: &Request, result: Value) {
        self.send(json!({"id": r.id.to_value(), "result": result}));
    }

    /// Answers `initialize` with `result` and takes `initialized`; returns what ccide asked.
    fn initialize(&mut self, result: Value) -> Value {
        let init = self.request("initialize");
        self.answer(&init, result);
        self.notification("initialized");
        init.params
    }

    /// A publish for `path`, of `version` (None: without one), of one error at (line, col).
    fn publish(&self, path: &Path, version: Option<i32>, at: &[(u32, u32)]) {
        let items: Vec<Value> = at
            .iter()
            .map(|(l, c)| {
                json!({"range": {"start": {"line": l, "character": c}, "end": {"line": l, "character": c + 3}},
                       "message": "bad", "severity": 1})
            })
            .collect();
        let mut params = json!({"uri": crate::files::file_uri(path), "diagnostics": items});
        if let Some(v) = version {
            params["version"] = v.into();
        }
        self.send(json!({"method": "textDocument/publishDiagnostics", "params": params}));
    }

    /// The server hangs up, as a process that exits.
    fn hang_up(&mut self) {
        if let Some(p) = self.peer.take() {
            p.sender.close();
        }
    }
}

fn caps() -> Value {
    json!({"capabilities": {"textDocumentSync": 1, "hoverProvider": true},
           "serverInfo": {"name": "scripted", "version": "0.1"}})
}

/// (a) For a client of its own (the multiplexer): the server's capabilities once it answered
/// `initialize`, starting it if needed; and what ccide asks for itself (positions in UTF-16
/// only, which every server must support).
#[test]
fn the_initialize_result_is_had_once_the_server_is_ready() {
    let mut s = Script::start("init", test_cfg());
    let server = s.server().clone();
    let waiter = std::thread::spawn(move || server.initialize_result(Instant::now() + WITHIN));
    let asked = s.initialize(caps());
    assert_eq!(
        asked["capabilities"]["general"]["positionEncodings"],
        json!(["utf-16"])
    );
    assert_eq!(asked["processId"], std::process::id());
    let got = waiter.join().unwrap().expect("the answer to initialize");
    assert_eq!(got["capabilities"]["hoverProvider"], true);
    assert_eq!(got["serverInfo"]["name"], "scripted");
    // Ready: at once, and with no second start.
    let again = s.server().initialize_result(Instant::now());
    assert_eq!(again, Some(got));
    assert_eq!(status_of(&s.ls)["state"], "ready");
    assert_eq!(status_of(&s.ls)["server"], "scripted 0.1");
}

/// The answer `on_answer` gets, within the deadline.
fn answer_of(
    q: &Queue<Result<Value, crate::rpc::ResponseError>>,
) -> Result<Value, crate::rpc::ResponseError> {
    q.pop(Some(Instant::now() + WITHIN))
        .expect("an answer within the deadline")
}

fn into(q: &Arc<Queue<Result<Value, crate::rpc::ResponseError>>>) -> OnAnswer {
    let q = q.clone();
    Box::new(move |r| {
        q.push(r);
    })
}

/// (b) Requests on someone's behalf, about a document ccide synced: the answer goes to the
/// caller's callback, `$/cancelRequest` names the request, and a request the server never
/// answers gets an error when the server goes.
#[test]
fn requests_for_others_are_answered_cancelled_and_never_left_hanging() {
    let mut s = Script::start("requests", test_cfg());
    let a = s.dir.write("a.fk", "hello\n");
    let server = s.server().clone();
    let answers: Arc<Queue<Result<Value, crate::rpc::ResponseError>>> = Arc::default();
    let params = json!({"textDocument": {"uri": crate::files::file_uri(&a)},
                        "position": {"line": 0, "character": 1}});
    assert!(
        server
            .request(&a, "textDocument/hover", params.clone(), into(&answers))
            .is_err(),
        "not open: refused"
    );
    let t = server.hold(&a, 7, None).expect("a ticket");
    s.initialize(caps());
    let open = s.notification("textDocument/didOpen");
    assert_eq!(open.params["textDocument"]["version"], t.version());

    let id = server
        .request(&a, "textDocument/hover", params.clone(), into(&answers))
        .unwrap();
    let r = s.request("textDocument/hover");
    assert_eq!(r.id.as_u64(), Some(id));
    assert_eq!(r.params, params);
    s.answer(&r, json!({"contents": "a greeting"}));
    assert_eq!(answer_of(&answers).unwrap()["contents"], "a greeting");

    let id = server
        .request(&a, "textDocument/hover", params.clone(), into(&answers))
        .unwrap();
    let r = s.request("textDocument/hover");
    server.cancel(id);
    let c = s.notification("$/cancelRequest");
    assert_eq!(c.params["id"], id);
    s.send(json!({"id": r.id.to_value(), "error": {"code": -32800, "message": "cancelled"}}));
    assert_eq!(answer_of(&answers).unwrap_err().code, -32800);
    server.cancel(id);
    server.cancel(999);

    server
        .request(&a, "textDocument/definition", params, into(&answers))
        .unwrap();
    s.request("textDocument/definition");
    s.hang_up();
    let e = answer_of(&answers).unwrap_err();
    assert_eq!(e.code, crate::rpc::ErrorCode::RequestFailed as i64);
    assert!(e.message.contains("exited before answering"), "{e:?}");
    assert!(s.recv_nothing_more());
}

/// The server hangs up as ccide stops it, so no test waits out its grace periods.
impl Drop for Script {
    fn drop(&mut self) {
        self.server().close();
        self.hang_up();
    }
}

impl Script {
    /// True if ccide sent nothing (more) on the current connection.
    fn recv_nothing_more(&self) -> bool {
        self.peer.as_ref().is_none_or(|p| {
            !matches!(
                p.receiver
                    .pop(Some(Instant::now() + Duration::from_millis(50))),
                Some(Received::Message(_))
            )
        })
    }
}

/// (c) The server's requests that ccide does not answer itself go to whoever registered,
/// who may answer or give them back; ccide's own (configuration, registrations) and
/// `workspace/applyEdit` (refused) never do; with nobody registered, ccide answers alone.
#[test]
fn server_requests_ccide_does_not_answer_go_to_whoever_registered() {
    let mut s = Script::start("server-requests", test_cfg());
    s.server().warm();
    s.initialize(caps());
    let ask = |s: &mut Script, id: u64, method: &str| -> Value {
        s.send(json!({"id": id, "method": method, "params": {"message": "?", "actions": [{"title": "Yes"}]}}));
        match s.recv() {
            Message::Response(r) if r.id.as_ref().and_then(|i| i.as_u64()) == Some(id) => {
                match r.result {
                    Ok(v) => v,
                    Err(e) => json!({"error": e.code}),
                }
            }
            other => panic!("expected the answer to {id}, got {other:?}"),
        }
    };
    assert_eq!(ask(&mut s, 1, "window/showMessageRequest"), Value::Null);
    assert_eq!(ask(&mut s, 2, "custom/thing"), json!({"error": -32601}));

    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let log = seen.clone();
    s.server()
        .on_request(Some(Arc::new(move |req: ServerRequest| {
            log.lock().unwrap().push(req.method.clone());
            if req.method == "window/showMessageRequest" {
                let pick = req.params["actions"][0].clone();
                req.respond(Ok(pick));
                None
            } else {
                Some(req)
            }
        })));
    assert_eq!(
        ask(&mut s, 3, "window/showMessageRequest"),
        json!({"title": "Yes"})
    );
    assert_eq!(ask(&mut s, 4, "custom/thing"), json!({"error": -32601}));
    let refused = ask(&mut s, 5, "workspace/applyEdit");
    assert_eq!(refused["applied"], false);
    assert_eq!(
        ask(&mut s, 6, "window/workDoneProgress/create"),
        Value::Null
    );
    assert_eq!(
        *seen.lock().unwrap(),
        ["window/showMessageRequest", "custom/thing"]
    );
    s.server().on_request(None);
    assert_eq!(ask(&mut s, 7, "window/showMessageRequest"), Value::Null);
}

/// (d) A document opened on behalf of several holders: one text and one version counter
/// (ccide's, increasing), never closed to make room while anyone holds it.
#[test]
fn held_documents_keep_one_increasing_version_and_stay_open() {
    let cfg = Config {
        max_open: 1,
        ..test_cfg()
    };
    let mut s = Script::start("held", cfg);
    let [a, b, c] = ["a.fk", "b.fk", "c.fk"].map(|n| s.dir.write(n, "text\n"));
    let server = s.server().clone();
    let v1 = server.hold(&a, 1, None).unwrap().version();
    s.initialize(caps());
    assert_eq!(
        s.notification("textDocument/didOpen").params["textDocument"]["version"],
        v1
    );
    // A second holder with an unsaved buffer: the same document, a newer version.
    let v2 = server.hold(&a, 2, Some("typed\n")).unwrap().version();
    let ch = s.notification("textDocument/didChange");
    assert!(v2 > v1);
    assert_eq!(ch.params["textDocument"]["version"], v2);
    assert_eq!(ch.params["contentChanges"][0]["text"], "typed\n");
    // The same text again is no change.
    assert_eq!(server.hold(&a, 1, Some("typed\n")).unwrap().version(), v2);
    // Beyond the bound, a held document stays open; others make room.
    server.touch(&b, None).unwrap();
    let open_b = s.notification("textDocument/didOpen");
    assert_eq!(
        open_b.params["textDocument"]["uri"],
        crate::files::file_uri(&b)
    );
    assert!(open_b.params["textDocument"]["version"].as_i64().unwrap() > v2 as i64);
    server.touch(&c, None).unwrap();
    s.notification("textDocument/didOpen");
    let closed = s.notification("textDocument/didClose");
    assert_eq!(
        closed.params["textDocument"]["uri"],
        crate::files::file_uri(&b)
    );
    assert_eq!(status_of(&s.ls)["open_documents"], 2);
    // Let go by one holder: still held. By the last: closed when room is needed (now).
    server.release(&a, 1);
    assert!(s.recv_nothing_more());
    server.release(&a, 2);
    let closed = s.notification("textDocument/didClose");
    assert_eq!(
        closed.params["textDocument"]["uri"],
        crate::files::file_uri(&a)
    );
    // Opened again later: a version never used before.
    let v3 = server.touch(&a, None).unwrap().version();
    let reopened = s.notification("textDocument/didOpen");
    assert_eq!(reopened.params["textDocument"]["version"], v3);
    assert!(v3 > v2);
}

/// getDiagnostics {} waits for every file's result: one whose document was closed before its
/// result came (no result will) does not end the wait for the others.
#[test]
fn a_ticket_that_gets_no_result_does_not_end_the_wait_for_the_others() {
    let cfg = Config {
        max_open: 1,
        ..test_cfg()
    };
    let mut s = Script::start("wait-each", cfg);
    let [a, b] = ["a.fk", "b.fk"].map(|n| s.dir.write(n, "ERR\n"));
    let ta = s.ls.touch(&a, None).unwrap();
    s.initialize(caps());
    s.notification("textDocument/didOpen");
    let tb = s.ls.touch(&b, None).unwrap();
    s.notification("textDocument/didOpen");
    s.notification("textDocument/didClose");
    // b's result is final a quiet period after this publish; a's never comes.
    s.publish(&b, Some(tb.version()), &[(0, 0)]);
    let all = LangServers::wait(&[ta, tb], WITHIN);
    assert!(!all, "a's document was closed first");
    assert_eq!(results(&s.got, &b).len(), 1, "b's result waited for");
    assert!(results(&s.got, &a).is_empty());
}

/// getDiagnostics reads a file from disk while the editor's newer buffer comes in: the
/// update that read first applies first, so the server ends with the buffer as the newest
/// version, never the text read earlier as a version after it.
#[test]
fn an_update_reading_the_disk_never_applies_older_text_after_a_newer_one() {
    let mut s = Script::start("update-race", test_cfg());
    let a = s.dir.write("a.fk", "saved\n");
    let server = s.server().clone();
    let typed: Arc<Queue<i32>> = Arc::default();
    let applied: Arc<Queue<()>> = Arc::default();
    let (t, done, buffer, p) = (typed.clone(), applied.clone(), server.clone(), a.clone());
    // Between reading "saved" and applying it, the editor's buffer arrives. With updates
    // serialized it waits for this one, and the wait here gives up after a while.
    *server.between_read_and_apply.lock().unwrap() = Some(Box::new(move || {
        let d = done.clone();
        std::thread::spawn(move || {
            t.push(buffer.touch(&p, Some("typed\n")).unwrap().version());
            d.push(());
        });
        let _ = done.pop(Some(Instant::now() + Duration::from_millis(300)));
    }));
    let from_disk = server.touch(&a, None).unwrap().version();
    let from_buffer = typed
        .pop(Some(Instant::now() + WITHIN))
        .expect("the buffer applied");
    assert!(from_buffer > from_disk, "{from_buffer} after {from_disk}");
    assert_eq!(server.version(&a), Some(from_buffer));
    s.initialize(caps());
    let open = s.notification("textDocument/didOpen").params;
    assert_eq!(open["textDocument"]["text"], "typed\n");
    assert_eq!(open["textDocument"]["version"], from_buffer);
}

/// A server known to publish each version's whole result (clangd) has its result final at the
/// publish, not after a quiet period; another server's waits for it (ccide-protocol(7) §11.5).
#[test]
fn a_clangd_publish_is_final_at_once_and_another_server_s_waits() {
    let cfg = Config {
        quiet: Duration::from_secs(30),
        ..test_cfg()
    };
    for (name, at_once) in [("clangd", true), ("gopls", false)] {
        let mut s = Script::start(name, cfg.clone());
        let a = s.dir.write("a.fk", "int x = y;\n");
        let t = s.ls.touch(&a, None).unwrap();
        let mut init = caps();
        init["serverInfo"]["name"] = name.into();
        s.initialize(init);
        s.notification("textDocument/didOpen");
        s.publish(&a, Some(t.version()), &[(0, 8)]);
        let final_soon = LangServers::wait(&[t], Duration::from_secs(5));
        assert_eq!(final_soon, at_once, "{name}");
        if at_once {
            assert_eq!(last(&s.got, &a)[0].start_char, 8);
        } else {
            assert!(results(&s.got, &a).is_empty());
        }
    }
}

/// A server that republishes the same diagnostics every 50 ms reaches "final" after one quiet
/// period: identical publishes are not news (ccide-protocol(7) §11.5).
#[test]
fn a_server_republishing_the_same_result_reaches_final() {
    let cfg = Config {
        quiet: Duration::from_millis(300),
        ..test_cfg()
    };
    let mut s = Script::start("republish", cfg);
    let a = s.dir.write("a.fk", "ERR\n");
    let t = s.ls.touch(&a, None).unwrap();
    s.initialize(caps());
    s.notification("textDocument/didOpen");
    let version = t.version();
    let peer = s.peer.take().unwrap();
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (uri, halt) = (crate::files::file_uri(&a), stop.clone());
    let spammer = std::thread::spawn(move || {
        while !halt.load(std::sync::atomic::Ordering::SeqCst) {
            let items = json!([{"range": {"start": {"line": 0, "character": 0}, "end": {"line": 0, "character": 3}}, "message": "bad"}]);
            let _ = peer.sender.send(
                &json!({"jsonrpc": "2.0", "method": "textDocument/publishDiagnostics",
                "params": {"uri": uri, "version": version, "diagnostics": items}}),
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        peer
    });
    let final_in_time = LangServers::wait(&[t], Duration::from_secs(5));
    stop.store(true, std::sync::atomic::Ordering::SeqCst);
    s.peer = Some(spammer.join().unwrap());
    assert!(final_in_time, "never final while the server repeats itself");
    assert_eq!(results(&s.got, &a).len(), 1, "one final result");
}

/// A server that insists on another position encoding than the UTF-16 ccide offered: its
/// columns are converted with the text ccide sent, so the result counts UTF-16 like the CLI.
#[test]
fn a_server_counting_in_another_encoding_is_converted_to_utf16() {
    let mut s = Script::start("utf32", test_cfg());
    let line = r#"s = "é🦀" + foo"#;
    let a = s.dir.write("a.fk", &format!("é🦀\r\n{line}\n"));
    let t = s.ls.touch(&a, None).unwrap();
    let mut init = caps();
    init["capabilities"]["positionEncoding"] = "utf-32".into();
    s.initialize(init);
    s.notification("textDocument/didOpen");
    // `foo` is character 11 in UTF-32, 12 in UTF-16, on the second line.
    s.publish(&a, Some(t.version()), &[(1, 11)]);
    assert!(LangServers::wait(&[t], Duration::from_secs(10)));
    let d = &last(&s.got, &a)[0];
    assert_eq!((d.start_char, d.end_char), (12, 15));
    assert_eq!(status_of(&s.ls)["diagnostics"], "push");
}

// ---------------------------------------------------------------- servers that misbehave

/// A server that exits while a child it started still holds its pipes is noticed (its own pid is
/// watched, not only its output), its tree is killed, and it is restarted (ccide-protocol(7)
/// §11.7).
#[test]
fn a_server_whose_child_keeps_its_pipes_is_noticed_when_it_exits() {
    let armed = std::env::temp_dir().join(format!("ccide-lsp-orphan-{}", std::process::id()));
    std::fs::write(&armed, "").unwrap();
    let f = Fake::start("orphan", &format!("orphan={}", armed.display()), test_cfg());
    let a = f.dir.write("a.fk", "LEAVE\nERR\n");
    let t = f.ls.touch(&a, None).unwrap();
    let first = status_of(&f.ls)["pid"].as_u64().unwrap();
    let noticed = LangServers::wait(&[t], Duration::from_secs(20));
    let _ = std::fs::remove_file(&armed);
    assert!(noticed, "{}", f.ls.status());
    let orphan = f
        .log()
        .iter()
        .find_map(|e| (e["event"] == "orphan").then(|| e["pid"].as_u64().unwrap()))
        .expect("the server left a child");
    let st = status_of(&f.ls);
    assert_eq!(st["restarts"], 1, "{st}");
    assert!(
        st["last_error"]
            .as_str()
            .unwrap()
            .contains("exit status: 4"),
        "{st}"
    );
    assert_eq!(last(&f.got, &a).len(), 1);
    assert!(gone(first));
    wait_for("the child to be killed", Duration::from_secs(10), || {
        gone(orphan)
    });
}

/// What waits to be written to a server that stopped reading is bounded; the server
/// is killed (and restarted), and status says why (ccide-protocol(7) §11.7).
#[test]
fn a_server_that_stops_reading_is_killed_and_says_why() {
    let cfg = Config {
        max_queued: 1 << 20,
        ..test_cfg()
    };
    let f = Fake::start("noread", "noread", cfg);
    let a = f.dir.write("a.fk", "x\n");
    let _ = f.ls.touch(&a, None);
    wait_for(
        "the server to stop reading",
        Duration::from_secs(10),
        || f.log().iter().any(|e| e["event"] == "noread"),
    );
    let big = "y".repeat(300_000);
    for i in 0..20 {
        let _ = f.ls.touch(&a, Some(&format!("{big}{i}\n")));
    }
    wait_for("the kill", Duration::from_secs(10), || {
        status_of(&f.ls)["last_error"]
            .as_str()
            .is_some_and(|e| e.contains("killed: it stopped reading its input"))
    });
}

/// A server dropped for a message above the size limit is restarted, and status
/// says why, not only that it was killed (ccide-protocol(7) §11.7).
#[test]
fn a_server_sending_a_message_above_the_limit_is_dropped_and_says_why() {
    let f = Fake::start("huge", "huge", test_cfg());
    let a = f.dir.write("a.fk", "x\n");
    let _ = f.ls.touch(&a, None);
    wait_for("the drop", Duration::from_secs(10), || {
        status_of(&f.ls)["last_error"].as_str().is_some_and(|e| {
            e.contains("killed: message of 104857600 bytes is above the 64 MiB limit")
        })
    });
}

/// A helper the server started in a session of its own (`setsid`, so outside its process group) is
/// found while the server lives, and does not outlive it (ccide-protocol(7) §11.7).
#[test]
fn a_helper_in_a_session_of_its_own_does_not_outlive_the_server() {
    let f = Fake::start("setsid", "setsid", test_cfg());
    let a = f.dir.write("a.fk", "ERR\n");
    f.touch_and_wait(&a, None);
    let helper = f
        .log()
        .iter()
        .find_map(|e| (e["event"] == "setsid").then(|| e["pid"].as_u64().unwrap()))
        .expect("the server started its helper");
    let pid = status_of(&f.ls)["pid"].as_u64().unwrap();
    assert!(!gone(helper));
    // It answers shutdown and exits on exit by itself: by then its helper belongs to init.
    f.ls.shutdown();
    wait_for(
        "the server and its helper to end",
        Duration::from_secs(10),
        || gone(pid) && gone(helper),
    );
}

/// Status says why a server is stopped, also when it had to be killed because it
/// answered neither shutdown nor exit (ccide-protocol(7) §11.7).
#[test]
fn an_idle_stop_says_why_in_status() {
    let cfg = Config {
        idle: Duration::from_millis(300),
        ..test_cfg()
    };
    let f = Fake::start("idle-why", "hang,stubborn", cfg);
    let a = f.dir.write("a.fk", "x\n");
    let _ = f.ls.touch(&a, None);
    let st = wait_for_value("the idle stop", Duration::from_secs(10), || {
        let st = status_of(&f.ls);
        (st["state"] == "stopped").then_some(st)
    });
    let why = st["stopped_because"].as_str().unwrap_or_default();
    assert!(
        why.starts_with("unused for 0.3 s;")
            && why.contains("killed: it did not end within a second of shutdown and exit"),
        "{st}"
    );
}

/// Polls `f` until it gives a value; panics naming `what` after `limit`.
fn wait_for_value<T>(what: &str, limit: Duration, mut f: impl FnMut() -> Option<T>) -> T {
    let mut got = None;
    wait_for(what, limit, || {
        got = f();
        got.is_some()
    });
    got.unwrap()
}

/// A server that crashes on every document delivers nothing; while it does not,
/// it covers no file (the built-in checker it silenced answers), and it covers them again
/// once it hands out a result (ccide-protocol(7) §11.7).
#[test]
fn a_server_crashing_on_every_open_covers_nothing_until_it_delivers() {
    let cfg = Config {
        backoff_max: Duration::from_millis(200),
        ..test_cfg()
    };
    let f = Fake::start("crashopen", "crashopen", cfg);
    let a = f.dir.write("a.fk", "ERR\n");
    assert!(f.ls.covers(&a), "not started yet: presumed to deliver");
    let _ = f.ls.touch(&a, None);
    wait_for("the first crash", Duration::from_secs(10), || {
        f.log().iter().any(|e| e["event"] == "crash")
    });
    wait_for("covers to say no", Duration::from_secs(10), || {
        !f.ls.covers(&a)
    });
    // Still restarted (it is not given up on: it answers initialize), and still not covering.
    wait_for("a restart", Duration::from_secs(10), || {
        status_of(&f.ls)["restarts"].as_u64() >= Some(2)
    });
    assert!(!f.ls.covers(&a));
    assert_ne!(status_of(&f.ls)["state"], "failed");
}

/// A document whose new result is awaited is closed to make room only when every other is awaited
/// too, and then its ticket is no answer (at once, not at the deadline; ccide-protocol(7) §11.2).
#[test]
fn an_awaited_document_is_closed_last_and_then_its_ticket_is_no_answer() {
    let cfg = Config {
        max_open: 2,
        quiet: Duration::from_millis(50),
        ..test_cfg()
    };
    let mut s = Script::start("awaited", cfg);
    let [a, b, c, d] = ["a.fk", "b.fk", "c.fk", "d.fk"].map(|n| s.dir.write(n, "x\n"));
    let uri = |p: &Path| json!(crate::files::file_uri(p));
    let ta = s.ls.touch(&a, None).unwrap();
    s.initialize(caps());
    s.notification("textDocument/didOpen");
    let tb = s.ls.touch(&b, None).unwrap();
    s.notification("textDocument/didOpen");
    s.publish(&b, Some(tb.version()), &[]);
    assert!(LangServers::wait(&[tb], WITHIN));
    // a is the least recently used, but awaited: b (final) makes room for c.
    let tc = s.ls.touch(&c, None).unwrap();
    s.notification("textDocument/didOpen");
    let closed = s.notification("textDocument/didClose");
    assert_eq!(closed.params["textDocument"]["uri"], uri(&b));
    // Every other awaited too: the least recently used goes, and its waiter is told at once.
    let _td = s.ls.touch(&d, None).unwrap();
    s.notification("textDocument/didOpen");
    let closed = s.notification("textDocument/didClose");
    assert_eq!(closed.params["textDocument"]["uri"], uri(&a));
    let asked = Instant::now();
    assert!(!LangServers::wait(&[ta], WITHIN), "closed: no result");
    assert!(asked.elapsed() < WITHIN / 2, "{:?}", asked.elapsed());
    s.publish(&c, Some(tc.version()), &[(0, 0)]);
    assert!(LangServers::wait(&[tc], WITHIN));
}

/// getDiagnostics {} refreshes what the server knows and what changed: an idle
/// pass opens and closes nothing, a closed document that changed on disk is opened again,
/// and a file the server never had is not opened.
#[test]
fn refreshing_what_is_known_opens_only_what_changed() {
    let cfg = Config {
        max_open: 2,
        ..test_cfg()
    };
    let f = Fake::start("known", "", cfg);
    let [a, b, c] = ["a.fk", "b.fk", "c.fk"].map(|n| f.dir.write(n, "ERR\n"));
    let never = f.dir.write("never.fk", "ERR\n");
    for p in [&a, &b, &c] {
        f.touch_and_wait(p, None);
    }
    wait_for("a closed", Duration::from_secs(10), || {
        f.received("textDocument/didClose").len() == 1
    });
    let counts = || {
        (
            f.received("textDocument/didOpen").len(),
            f.received("textDocument/didChange").len(),
            f.received("textDocument/didClose").len(),
        )
    };
    let before = counts();
    for _ in 0..3 {
        let ts = f.ls.refresh_known(&|_| None);
        assert!(LangServers::wait(&ts, Duration::from_secs(10)));
    }
    // What the fake received is logged by another process: give it the time a message takes.
    let t = f.ls.touch(&b, Some("sync point\n")).unwrap();
    assert!(LangServers::wait(&[t], Duration::from_secs(10)));
    let after = counts();
    assert_eq!(
        (after.0, after.2),
        (before.0, before.2),
        "no didOpen, no didClose"
    );
    std::fs::write(&a, "ERR\nERR\n").unwrap();
    let ts = f.ls.refresh_known(&|_| None);
    assert!(LangServers::wait(&ts, Duration::from_secs(10)));
    assert_eq!(last(&f.got, &a).len(), 2, "a opened again");
    assert!(results(&f.got, &never).is_empty());
    let opened: Vec<Value> = f
        .received("textDocument/didOpen")
        .iter()
        .map(|o| o["textDocument"]["uri"].clone())
        .collect();
    assert!(!opened.contains(&json!(crate::files::file_uri(&never))));
}

/// Status says "loading" while a started server has documents and no result yet (tsserver loads the
/// project on its first document), "ready" once it delivered (ccide-protocol(7) §11.1).
#[test]
fn status_says_loading_until_the_first_result() {
    let mut s = Script::start("loading", test_cfg());
    let a = s.dir.write("a.fk", "x\n");
    let t = s.ls.touch(&a, None).unwrap();
    s.initialize(caps());
    s.notification("textDocument/didOpen");
    assert_eq!(status_of(&s.ls)["state"], "loading");
    s.publish(&a, Some(t.version()), &[]);
    assert!(LangServers::wait(&[t], WITHIN));
    assert_eq!(status_of(&s.ls)["state"], "ready");
}

/// A large publish is cut before it is parsed, by a scan that knows strings and nesting: its first
/// diagnostics (at most `MAX_ITEMS` - 1, and at most a mebibyte of them), and first of all one
/// saying how many more there were; the rest of the message stays (ccide-protocol(7) §5.4).
#[test]
fn a_large_publish_is_cut_before_it_is_parsed() {
    let item = |i: usize, pad: usize| {
        format!(
            r#"{{"range": {{"start": {{"line": {i}, "character": 0}}, "end": {{"line": {i}, "character": 1}}}}, "message": "a \"quoted\\\" ] , {{ [ item {i}{}"}}"#,
            "x".repeat(pad)
        )
    };
    let publish = |n: usize, pad: usize| {
        let items: Vec<String> = (0..n).map(|i| item(i, pad)).collect();
        format!(
            r#"{{"jsonrpc": "2.0", "params": {{"uri": "file:///w/a.fk", "diagnostics": [ {} ], "version": 3}}, "method": "textDocument/publishDiagnostics"}}"#,
            items.join(" ,\n")
        )
        .into_bytes()
    };
    let cut = |mut b: Vec<u8>| {
        supervisor::cut_publish(&mut b);
        serde_json::from_slice::<Value>(&b).expect("still JSON")
    };
    let v = cut(publish(20_000, 0));
    let d = v["params"]["diagnostics"].as_array().unwrap();
    assert_eq!(d.len(), MAX_ITEMS);
    assert_eq!(
        d[0]["message"],
        "19001 more diagnostics of this file from this language server are not shown: ccide keeps 1000 per file and source"
    );
    assert_eq!(
        (d[0]["severity"].as_u64(), d[0]["source"].as_str()),
        (Some(3), Some("ccide"))
    );
    assert_eq!(d[1]["message"], "a \"quoted\\\" ] , { [ item 0");
    assert_eq!(d[999]["range"]["start"]["line"], 998);
    assert_eq!(
        (&v["params"]["version"], &v["method"]),
        (&json!(3), &json!("textDocument/publishDiagnostics"))
    );
    // Large items: a mebibyte of them is kept.
    let v = cut(publish(200, 10_000));
    let d = v["params"]["diagnostics"].as_array().unwrap();
    assert!((90..=105).contains(&d.len()), "{}", d.len());
    assert!(
        d[0]["message"]
            .as_str()
            .unwrap()
            .starts_with(&format!("{} more", 201 - d.len()))
    );
    // Small messages, other methods and a large message that fits are left as they are.
    for b in [
        publish(10, 0),
        publish(900, 1000),
        String::from_utf8(publish(20_000, 0))
            .unwrap()
            .replace("publishDiagnostics", "other")
            .into_bytes(),
    ] {
        let mut c = b.clone();
        supervisor::cut_publish(&mut c);
        assert!(c == b, "changed");
    }
}

/// typescript-language-server loads the TypeScript it finds in the workspace
/// (node_modules, walking up from the root), a program the repository ships. Unless the user
/// trusts the workspace, it is told to use the one installed beside it; without one it is not
/// started, and status says why and what to do (ccide-protocol(7) §11.1).
#[test]
fn typescript_language_server_is_told_to_use_the_typescript_beside_it() {
    let npm = TempDir::new("npm");
    let cli = npm.write("node_modules/typescript-language-server/lib/cli.mjs", "");
    let bin = npm.path().join("bin/typescript-language-server");
    std::fs::create_dir_all(bin.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(&cli, &bin).unwrap();
    let command = format!("'{}' --stdio", bin.display());
    for (trusted, beside) in [(false, true), (true, true), (false, false)] {
        let tsserver = npm.path().join("node_modules/typescript/lib/tsserver.js");
        if beside {
            npm.write("node_modules/typescript/lib/tsserver.js", "");
        } else {
            let _ = std::fs::remove_file(&tsserver);
        }
        let cfg = Config {
            trust_workspace: trusted,
            ..test_cfg()
        };
        let mut s = Script::start_as("tsls", cfg, &command);
        s.dir.write("node_modules/typescript/lib/tsserver.js", "");
        let a = s.dir.write("a.fk", "x\n");
        let t = s.ls.touch(&a, None);
        if !beside {
            assert!(t.is_none());
            let st = status_of(&s.ls);
            assert_eq!(st["state"], "failed");
            assert!(
                st["last_error"]
                    .as_str()
                    .unwrap()
                    .contains("no TypeScript installed beside typescript-language-server"),
                "{st}"
            );
            continue;
        }
        let asked = s.initialize(caps());
        let options = &asked["initializationOptions"];
        if trusted {
            assert!(options.is_null(), "{options}");
        } else {
            assert_eq!(
                options["tsserver"]["path"],
                std::fs::canonicalize(&tsserver).unwrap().to_str().unwrap()
            );
        }
    }
}

/// bash-language-server's diagnostics are shellcheck's: without shellcheck it is no built-in,
/// and the built-in checker for shell scripts keeps the files it would cover.
#[test]
fn bash_language_server_is_a_builtin_only_with_shellcheck() {
    let dir = TempDir::new("builtins-bash");
    let ws = dir.path().join("ws");
    std::fs::create_dir_all(&ws).unwrap();
    let server = dir.write("bin/bash-language-server", "");
    let shellcheck = dir.write("bin/shellcheck", "");
    let alone = |n: &str| (n == "bash-language-server").then(|| server.clone());
    assert!(builtins(std::slice::from_ref(&ws), &alone, false).is_empty());
    let both = |n: &str| match n {
        "bash-language-server" => Some(server.clone()),
        "shellcheck" => Some(shellcheck.clone()),
        _ => None,
    };
    let specs = builtins(std::slice::from_ref(&ws), &both, false);
    let got: Vec<(&str, &[String])> = specs
        .iter()
        .map(|s| (s.pattern.as_str(), s.words.as_slice()))
        .collect();
    let words = [server.to_string_lossy().into_owned(), "start".to_string()];
    assert_eq!(got, [("*.sh", &words[..]), ("*.bash", &words[..])]);
}
