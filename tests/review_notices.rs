//! How a person hears that a review waits: `ccide claude` writes a terminal notification to
//! its terminal (a pty here, whose bytes are read exactly) for the diffs of its own Claude
//! Code, through tmux's passthrough and `tmux display-message` inside tmux (a stand-in
//! `tmux` records its arguments); `serve --on-review` runs a command with the diff in its
//! environment.

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::FromRawFd;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};

use crate::util::{BIN, Client, DEADLINE, Sandbox, open_diff, s, wait_for, wait_pending};
use serde_json::json;

/// A pseudo-terminal: the master, whose bytes a thread gathers, and the slave's path.
struct Pty {
    master: File,
    slave: PathBuf,
    seen: Arc<Mutex<Vec<u8>>>,
}

impl Pty {
    fn open() -> Pty {
        // SAFETY: plain libc calls on a descriptor this function owns; ptsname_r writes at
        // most the buffer's length.
        let (fd, slave) = unsafe {
            let fd = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
            assert!(fd >= 0, "posix_openpt: {}", std::io::Error::last_os_error());
            assert_eq!(libc::grantpt(fd), 0);
            assert_eq!(libc::unlockpt(fd), 0);
            let mut buf = [0 as libc::c_char; 128];
            assert_eq!(libc::ptsname_r(fd, buf.as_mut_ptr(), buf.len()), 0);
            let name = std::ffi::CStr::from_ptr(buf.as_ptr());
            (fd, PathBuf::from(name.to_str().unwrap()))
        };
        // SAFETY: `fd` is open and owned by nobody else.
        let master = unsafe { File::from_raw_fd(fd) };
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (mut reader, into) = (master.try_clone().unwrap(), seen.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = reader.read(&mut buf) {
                if n == 0 {
                    break;
                }
                into.lock().unwrap().extend_from_slice(&buf[..n]);
            }
        });
        Pty {
            master,
            slave,
            seen,
        }
    }

    fn slave(&self) -> Stdio {
        use std::os::unix::fs::OpenOptionsExt;
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOCTTY)
            .open(&self.slave)
            .unwrap();
        Stdio::from(f)
    }

    /// Sets the terminal's size, as a terminal emulator does.
    fn set_size(&mut self, rows: u16, cols: u16) {
        use std::os::fd::AsRawFd;
        let ws = libc::winsize {
            ws_row: rows,
            ws_col: cols,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: TIOCSWINSZ reads one winsize from the pointer.
        assert_eq!(
            unsafe { libc::ioctl(self.master.as_raw_fd(), libc::TIOCSWINSZ, &ws) },
            0
        );
    }

    fn seen(&self) -> Vec<u8> {
        self.seen.lock().unwrap().clone()
    }

    /// Waits until the terminal received `bytes`; returns all it received.
    fn wait_for(&self, bytes: &[u8]) -> Vec<u8> {
        wait_for(
            &format!("{:?} on the terminal", String::from_utf8_lossy(bytes)),
            DEADLINE,
            || {
                let seen = self.seen();
                seen.windows(bytes.len())
                    .any(|w| w == bytes)
                    .then_some(seen)
            },
        )
    }
}

/// A stand-in for Claude Code: writes its pid, then waits for a line on its terminal. Asked
/// for its version (`ccide claude` may ask before it starts the session), it says one too old
/// for the plugin and writes no pid.
fn waiting_claude(sb: &Sandbox) -> PathBuf {
    let pid = sb.root.join("claude.pid");
    sb.script(
        "fake-claude",
        &format!(
            "[ \"$1\" = --version ] && echo '1.0.0 (Claude Code)' && exit 0\n\
             echo $$ > '{}.new' && mv '{0}.new' '{0}'\nread line\nexit 0",
            pid.display()
        ),
    )
}

/// `ccide claude` on `pty` with the stand-in, `env` added; returns it and the stand-in's pid.
fn claude_on(sb: &Sandbox, pty: &Pty, env: &[(&str, &str)]) -> (Child, u32) {
    let mut cmd = sb.command(&["claude"]);
    cmd.env("CCIDE_CLAUDE", waiting_claude(sb))
        .stdin(pty.slave())
        .stdout(pty.slave())
        .stderr(pty.slave());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let child = cmd.spawn().unwrap();
    let pid_file = sb.root.join("claude.pid");
    let pid = wait_for("the stand-in's pid", DEADLINE, || {
        std::fs::read_to_string(&pid_file).ok()?.trim().parse().ok()
    });
    (child, pid)
}

/// A client that says it is process `pid` (as the CLI says in `ide_connected`).
fn client_of(port: u16, token: &str, pid: u32) -> Client {
    let mut c = Client::connect(port, token);
    c.request(
        "initialize",
        json!({"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"claude-code","version":"2.1.330"}}),
    );
    c.send(&json!({"jsonrpc":"2.0","method":"notifications/initialized"}));
    c.send(&json!({"jsonrpc":"2.0","method":"ide_connected","params":{"pid": pid}}));
    c.request("tools/list", json!({}));
    c
}

/// Ends the stand-in (a line on its terminal) and waits for `ccide claude`.
fn finish(mut claude: Child, pty: &mut Pty) {
    pty.master.write_all(b"done\n").unwrap();
    let status = claude.wait().unwrap();
    assert_eq!(status.code(), Some(0));
}

/// The notice of diff 2 (the other session's is 1) of the file named with an escape sequence.
/// (`#` doubled for tmux's display-message: `##(x)` shows `#(x)` instead of running `x`).
fn message(hash: &str) -> String {
    format!(
        "review waits: diff 2 (a\\u{{1b}}]0;x\\u{{7}}{hash}(x).txt, +1 -1): ccide diff review 2"
    )
}

/// Inside tmux: the OSC 9 wrapped in tmux's passthrough reaches the terminal, byte for byte,
/// and `tmux display-message -c` shows the text on the client tmux names, with the file
/// name's escape sequence made visible in both, and a `#` of the text doubled for tmux.
/// A proposal of another client (not under the CLI `ccide claude` started) brings nothing.
#[test]
fn claude_in_tmux_notifies_its_terminal_through_the_passthrough_and_the_client() {
    let sb = Sandbox::new();
    let file = sb.write("a\x1b]0;x\x07#(x).txt", "old\n");
    let tmux_log = sb.root.join("tmux-args.txt");
    let tmux = sb.script(
        "fake-tmux",
        &format!(
            "{{ for a in \"$@\"; do printf '[%s]' \"$a\"; done; echo; }} >> '{}'\n\
             [ \"$2\" = -p ] && printf '/dev/pts/77 xterm-256color\\n'\nexit 0",
            tmux_log.display()
        ),
    );
    sb.add_tool("tmux", &tmux);
    let srv = sb.serve(&[]);
    let mut pty = Pty::open();
    let (claude, pid) = claude_on(
        &sb,
        &pty,
        &[
            ("TMUX", "/tmp/tmux-1000/default,4242,0"),
            ("TMUX_PANE", "%3"),
            ("TERM", "tmux-256color"),
        ],
    );
    // Another session's proposal first: not this terminal's to announce.
    let other_file = sb.write("other.txt", "x\n");
    let mut other = client_of(srv.port, &srv.token, std::process::id());
    open_diff(&mut other, &other_file, "y\n", "other");
    wait_pending(&sb, 1);
    let mut c = client_of(srv.port, &srv.token, pid);
    open_diff(&mut c, &file, "new\n", "tab");
    let expected = format!("\x1bPtmux;\x1b\x1b]9;ccide: {}\x07\x1b\\", message("#"));
    let seen = pty.wait_for(expected.as_bytes());
    assert_eq!(
        String::from_utf8_lossy(&seen),
        expected,
        "exactly one notice"
    );
    let calls = wait_for("tmux display-message -c", DEADLINE, || {
        let log = std::fs::read_to_string(&tmux_log).ok()?;
        (log.lines().count() == 2).then_some(log)
    });
    assert_eq!(
        calls,
        format!(
            "[display-message][-p][-t][%3][#{{client_tty}} #{{client_termname}}]\n\
             [display-message][-c][/dev/pts/77][ccide: {}]\n",
            message("##")
        )
    );
    finish(claude, &mut pty);
}

/// Outside tmux, foot gets OSC 777 (title and body), and the file name under the current
/// directory is shown relative to it; a name with `#` stays as it is (tmux is not involved).
#[test]
fn claude_notifies_foot_with_osc_777() {
    let sb = Sandbox::new();
    let file = sb.write("src/#main.rs", "fn main() {}\n");
    let srv = sb.serve(&[]);
    let mut pty = Pty::open();
    let (claude, pid) = claude_on(&sb, &pty, &[("TERM", "foot")]);
    let mut c = client_of(srv.port, &srv.token, pid);
    open_diff(&mut c, &file, "fn main() {}\n// two\n", "tab");
    let expected =
        "\x1b]777;notify;ccide;review waits: diff 1 (src/#main.rs, +1 -0): ccide diff review 1\x07";
    let seen = pty.wait_for(expected.as_bytes());
    assert_eq!(String::from_utf8_lossy(&seen), expected);
    finish(claude, &mut pty);
}

/// `--on-review` runs the command, without a shell (an argument with a space stays one), with
/// the diff's id, file, counts and client in its environment, while openDiff waits for the
/// review.
#[test]
fn on_review_runs_the_command_with_the_diff_in_its_environment() {
    let sb = Sandbox::new();
    let file = sb.write("a $(x).txt", "one\ntwo\n");
    let out = sb.root.join("on-review.txt");
    let script = sb.script(
        "on-review",
        &format!(
            "{{ printf 'arg=%s\\n' \"$@\"\n\
             printf 'ID=%s\\n' \"$CCIDE_DIFF_ID\"\n\
             printf 'FILE=%s\\n' \"$CCIDE_DIFF_FILE\"\n\
             printf 'ADDED=%s\\n' \"$CCIDE_DIFF_ADDED\"\n\
             printf 'REMOVED=%s\\n' \"$CCIDE_DIFF_REMOVED\"\n\
             printf 'CLIENT=%s\\n' \"$CCIDE_DIFF_CLIENT\"\n\
             printf 'CLIENT_PID=%s\\n' \"$CCIDE_DIFF_CLIENT_PID\"\n\
             }} > '{o}.new' && mv '{o}.new' '{o}'",
            o = out.display()
        ),
    );
    let cmd = format!("{} 'two words'", s(&script));
    let srv = sb.serve(&["--on-review", &cmd]);
    let mut c = srv.client();
    open_diff(&mut c, &file, "one\n2\n3\n", "tab");
    let got = wait_for("the --on-review command's output", DEADLINE, || {
        std::fs::read_to_string(&out).ok()
    });
    assert_eq!(
        got,
        format!(
            "arg=two words\nID=1\nFILE={}\nADDED=2\nREMOVED=1\nCLIENT=claude-code\nCLIENT_PID={}\n",
            file.display(),
            std::process::id()
        )
    );
    assert_eq!(wait_pending(&sb, 1)[0]["id"], "1", "the review still waits");
}

/// CCIDE_ON_REVIEW sets it too; a command that fails is logged as a warning once, the next
/// failure at debug level only.
#[test]
fn on_review_failures_are_logged_once() {
    let sb = Sandbox::new();
    let runs = sb.root.join("runs.txt");
    let script = sb.script(
        "failing",
        &format!(
            "echo run >> '{}'\necho 'no phone' >&2\nexit 3",
            runs.display()
        ),
    );
    let mut cmd = sb.serve_command(&["--log-level", "debug"]);
    cmd.env("CCIDE_ON_REVIEW", &script);
    let srv = crate::util::Server::spawn(&mut cmd, &sb.config());
    let mut c = srv.client();
    for (name, tab) in [("a.txt", "a"), ("b.txt", "b")] {
        let f = sb.write(name, "x\n");
        open_diff(&mut c, &f, "y\n", tab);
        wait_pending(&sb, if tab == "a" { 1 } else { 2 });
    }
    let log = wait_for("the second failure in the log", DEADLINE, || {
        let log = srv.log();
        log.contains("failed again for diff").then_some(log)
    });
    let warnings: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("--on-review") && l.contains("failed"))
        .collect();
    let program = script.display();
    assert_eq!(warnings.len(), 2, "{log}");
    let first = format!(
        "--on-review {program} failed for diff 1: exit status: 3: no phone (fix the command or drop --on-review; further failures are logged at debug level until it succeeds)"
    );
    assert!(
        warnings[0].ends_with(&format!(" ccide warn: {first}")),
        "{}",
        warnings[0]
    );
    assert!(
        warnings[1].ends_with(&format!(
            " ccide debug: --on-review {program} failed again for diff 2: exit status: 3: no phone"
        )),
        "{}",
        warnings[1]
    );
    assert_eq!(std::fs::read_to_string(&runs).unwrap(), "run\nrun\n");
}

/// The command runs beside the request: while it still runs (blocked on a FIFO), the diff is
/// already stored and listed, and the server answers.
#[test]
fn on_review_runs_beside_the_request() {
    let sb = Sandbox::new();
    let file = sb.write("a.txt", "x\n");
    let fifo = sb.root.join("release.fifo");
    let c_path = std::ffi::CString::new(s(&fifo)).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    let started = sb.root.join("started");
    let script = sb.script(
        "blocking",
        &format!(
            ": > '{}'\nread line < '{}'\nexit 0",
            started.display(),
            fifo.display()
        ),
    );
    let srv = sb.serve(&["--on-review", s(&script)]);
    let mut c = srv.client();
    open_diff(&mut c, &file, "y\n", "tab");
    wait_for("the command to start", DEADLINE, || {
        started.exists().then_some(())
    });
    assert_eq!(wait_pending(&sb, 1)[0]["id"], "1");
    std::fs::write(&fifo, "go\n").unwrap();
}

/// The real tmux (.ci/editor-install's, or `CCIDE_TMUX`) with a client attached on a
/// terminal of the test's: with `allow-passthrough on`, the OSC 9 that `ccide claude` writes in
/// its pane reaches the outer terminal unwrapped, byte for byte, and `tmux display-message -c`
/// puts the text in that client's message log.
#[test]
#[ignore = "needs tmux (.ci/editor-install)"]
fn claude_in_real_tmux_reaches_the_outer_terminal_and_the_clients_messages() {
    let tmux = std::env::var_os("CCIDE_TMUX")
        .map_or_else(|| PathBuf::from("/usr/bin/tmux"), PathBuf::from);
    assert!(
        tmux.is_file(),
        "tmux is not at {}: run .ci/editor-install, or set CCIDE_TMUX",
        tmux.display()
    );
    let sb = Sandbox::new();
    sb.add_tool("tmux", &tmux);
    let file = sb.write("a.txt", "old\n");
    let srv = sb.serve(&[]);
    let socket = sb.root.join("tmux.sock");
    let tmux_cmd = |args: &[&str]| {
        let mut c = std::process::Command::new(&tmux);
        c.env_clear()
            .env("HOME", sb.home())
            .env(
                "PATH",
                format!("{}:/usr/bin:/bin", sb.root.join("bin").display()),
            )
            .env("CLAUDE_CONFIG_DIR", sb.config())
            .env("TERM", "xterm-256color")
            .current_dir(sb.ws())
            .arg("-S")
            .arg(&socket)
            .args(args);
        c
    };
    let run = |args: &[&str]| {
        let o = tmux_cmd(args).output().unwrap();
        assert!(
            o.status.success(),
            "tmux {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let claude = waiting_claude(&sb);
    let mut new_session = tmux_cmd(&[
        "-f",
        "/dev/null",
        "new-session",
        "-d",
        "-x",
        "120",
        "-y",
        "30",
    ]);
    new_session
        .env("CCIDE_CLAUDE", &claude)
        .args(["--", BIN, "claude"]);
    let o = new_session.output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    run(&["set", "-g", "allow-passthrough", "on"]);
    // A person's terminal: a client attached on the test's pty.
    let mut pty = Pty::open();
    pty.set_size(30, 120);
    let mut client = tmux_cmd(&["attach"])
        .stdin(pty.slave())
        .stdout(pty.slave())
        .stderr(pty.slave())
        .spawn()
        .unwrap();
    wait_for("the tmux client", DEADLINE, || {
        (!run(&["list-clients"]).trim().is_empty()).then_some(())
    });
    let pid_file = sb.root.join("claude.pid");
    let pid = wait_for("the stand-in's pid", DEADLINE, || {
        std::fs::read_to_string(&pid_file).ok()?.trim().parse().ok()
    });
    let mut c = client_of(srv.port, &srv.token, pid);
    open_diff(&mut c, &file, "new\n", "tab");
    let text = "review waits: diff 1 (a.txt, +1 -1): ccide diff review 1";
    pty.wait_for(format!("\x1b]9;ccide: {text}\x07").as_bytes());
    wait_for("the message in the client's log", DEADLINE, || {
        run(&["show-messages"])
            .contains(&format!("ccide: {text}"))
            .then_some(())
    });
    run(&["kill-server"]);
    let _ = client.wait();
    let _ = pty.master.write_all(b"");
}
