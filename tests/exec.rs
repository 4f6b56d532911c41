//! executeCode: off (hidden, refused), ask (waits for `ccide exec approve|deny`), on (runs) in a
//! persistent Python kernel per connection.

use std::time::Duration;

use crate::util::*;
use serde_json::{Value, json};

fn run(c: &mut Client, code: &str) -> Value {
    c.call("executeCode", json!({"code": code}))
}

fn listed(c: &mut Client) -> bool {
    c.tool_names().iter().any(|t| t == "executeCode")
}

/// Waits until `ccide exec --json` lists `n` requests.
fn wait_requests(sb: &Sandbox, n: usize) -> Vec<Value> {
    sb.wait_for_listing(&["exec", "--json"], n)
}

#[test]
fn off_by_default_hidden_and_refused() {
    let sb = Sandbox::new();
    let s = sb.serve(&[]);
    let mut c = s.client();
    assert!(!listed(&mut c));
    let r = run(&mut c, "open('/tmp/ccide-should-not-exist', 'w')");
    assert!(is_error(&r), "{r}");
    assert!(texts(&r)[0].contains("--exec"), "{r}");
    let o = sb.run(&["exec"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        "no executeCode requests are waiting (the server runs with --exec off)\n"
    );
}

#[test]
fn on_keeps_state_output_order_and_tracebacks() {
    let sb = Sandbox::new();
    let s = sb.serve(&["--exec", "on"]);
    let mut c = s.client();
    assert!(listed(&mut c));
    let r = run(&mut c, "x = 41");
    assert_eq!(
        r["result"],
        json!({"content":[{"type":"text","text":"(no output)"}]})
    );
    assert_eq!(texts(&run(&mut c, "print(x + 1)")), ["42\n"]);
    // The value of a final expression is shown, as in a notebook.
    assert_eq!(texts(&run(&mut c, "x * 2")), ["82\n"]);
    // stdout and stderr in order; what subprocesses write to the descriptors comes last.
    let r = run(
        &mut c,
        "import os, sys\nprint('a')\nprint('b', file=sys.stderr)\nprint('c', end='')\nprint('d')\n_ = os.system('echo from a subprocess')",
    );
    assert!(!is_error(&r), "{r}");
    assert_eq!(texts(&r), ["a\n", "b\n", "cd\nfrom a subprocess\n"]);
    // input() cannot steal the protocol: stdin is empty.
    let r = run(
        &mut c,
        "try:\n    input()\nexcept EOFError:\n    print('eof')",
    );
    assert_eq!(texts(&r), ["eof\n"]);
    // An exception: the output so far, then the traceback of the cell alone.
    let r = run(&mut c, "print('before')\ndef f():\n    return 1 / 0\nf()");
    assert!(is_error(&r), "{r}");
    let t = texts(&r);
    assert_eq!(t[0], "before\n");
    assert!(
        t[1].starts_with("Traceback (most recent call last):\n  File \"<cell>\", line 4"),
        "{}",
        t[1]
    );
    assert!(
        t[1].ends_with("ZeroDivisionError: division by zero\n"),
        "{}",
        t[1]
    );
    let r = run(&mut c, "def (");
    assert!(is_error(&r));
    assert!(texts(&r)[0].contains("SyntaxError"), "{r}");
    // The kernel survived both.
    assert_eq!(texts(&run(&mut c, "print(x)")), ["41\n"]);
}

#[test]
fn a_call_over_the_time_limit_restarts_the_kernel() {
    let sb = Sandbox::new();
    let s = sb.serve(&["--exec", "on", "--exec-timeout", "1"]);
    let mut c = s.client();
    run(&mut c, "x = 1");
    let pid: u64 = texts(&run(&mut c, "import os; os.getpid()"))[0]
        .trim()
        .parse()
        .unwrap();
    let id = c.send_request(
        "tools/call",
        json!({"name":"executeCode","arguments":{"code":"print('started', flush=True)\nwhile True: pass"}}),
    );
    // The connection keeps serving while the code runs.
    assert_eq!(c.request("ping", json!({}))["result"], json!({}));
    let r = c.response(&id);
    assert!(is_error(&r), "{r}");
    assert_eq!(
        texts(&r),
        [
            "started\n",
            "executeCode timed out after 1 s; the kernel was restarted (variables are lost)"
        ]
    );
    assert!(!process_alive(pid), "the old kernel {pid} still runs");
    let r = run(&mut c, "print(x)");
    assert!(is_error(&r));
    assert!(
        texts(&r)[0].contains("NameError: name 'x' is not defined"),
        "{r}"
    );
    // A kernel that exits by itself is reported and replaced too.
    let r = run(&mut c, "import os; os._exit(3)");
    assert!(is_error(&r));
    assert!(texts(&r)[0].contains("exit status: 3"), "{r}");
    assert_eq!(texts(&run(&mut c, "print(2)")), ["2\n"]);
}

#[test]
fn each_connection_has_its_own_kernel_which_ends_with_it() {
    let sb = Sandbox::new();
    let s = sb.serve(&["--exec", "on"]);
    let mut a = s.client();
    let mut b = s.client();
    run(&mut a, "x = 'a'");
    run(&mut b, "x = 'b'");
    assert_eq!(texts(&run(&mut a, "print(x)")), ["a\n"]);
    assert_eq!(texts(&run(&mut b, "print(x)")), ["b\n"]);
    let pid: u64 = texts(&run(&mut a, "import os; os.getpid()"))[0]
        .trim()
        .parse()
        .unwrap();
    assert!(process_alive(pid));
    drop(a);
    wait_for("the kernel to end with its connection", DEADLINE, || {
        (!process_alive(pid)).then_some(())
    });
    assert_eq!(texts(&run(&mut b, "print(x)")), ["b\n"]);
}

#[test]
fn ask_waits_for_approval_or_denial() {
    let sb = Sandbox::new();
    let s = sb.serve(&["--exec", "ask"]);
    let mut c = s.client();
    assert!(listed(&mut c));
    let mut events = sb
        .command(&["events"])
        .stdout(std::process::Stdio::piped())
        .stdin(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(events.stdout.take().unwrap()));
    assert!(lines.next().unwrap().unwrap().contains("subscribed"));

    let id = c.send_request(
        "tools/call",
        json!({"name":"executeCode","arguments":{"code":"y = 6 * 7\nprint(y)"}}),
    );
    let q = &wait_requests(&sb, 1)[0];
    assert_eq!(q["code"], "y = 6 * 7\nprint(y)");
    let rid = q["id"].as_str().unwrap().to_string();
    let o = sb.run(&["exec"]);
    let listing = stdout(&o);
    assert!(
        listing.contains(&format!("request {rid} from client")),
        "{listing}"
    );
    // `ls` is `list`, as for `ccide diff` and `diagnostics`.
    assert_eq!(stdout(&sb.run(&["exec", "ls"])), listing);
    assert!(
        listing.contains("    y = 6 * 7\n    print(y)\n"),
        "{listing}"
    );
    // Nothing ran yet, and the connection keeps serving.
    assert_eq!(c.request("ping", json!({}))["result"], json!({}));
    let o = sb.run(&["exec", "approve"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), format!("approved executeCode request {rid}\n"));
    assert_eq!(texts(&c.response(&id)), ["42\n"]);

    let id = c.send_request(
        "tools/call",
        json!({"name":"executeCode","arguments":{"code":"print('no')"}}),
    );
    let rid2 = wait_requests(&sb, 1)[0]["id"].as_str().unwrap().to_string();
    let o = sb.run(&["exec", "deny", "999"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("no executeCode request 999 is waiting"),
        "{}",
        stderr(&o)
    );
    let o = sb.run(&["exec", "deny", &rid2]);
    assert!(o.status.success(), "{}", stderr(&o));
    let r = c.response(&id);
    assert!(is_error(&r));
    assert_eq!(
        texts(&r),
        [format!("executeCode request {rid2} was denied")]
    );
    assert!(wait_requests(&sb, 0).is_empty());

    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let v: Value = serde_json::from_str(&line.unwrap()).unwrap();
        if v["event"].as_str().unwrap_or("").starts_with("exec_") {
            seen.push((v["event"].clone(), v["id"].clone(), v["how"].clone()));
        }
        if seen.len() == 4 {
            break;
        }
    }
    assert_eq!(
        seen,
        [
            (json!("exec_requested"), json!(rid), Value::Null),
            (json!("exec_settled"), json!(rid), json!("approved")),
            (json!("exec_requested"), json!(rid2), Value::Null),
            (json!("exec_settled"), json!(rid2), json!("denied")),
        ]
    );

    let _ = events.kill();
    let _ = events.wait();

    // A request whose client disconnects is dropped.
    let mut d = s.client();
    d.send_request(
        "tools/call",
        json!({"name":"executeCode","arguments":{"code":"print('gone')"}}),
    );
    wait_requests(&sb, 1);
    drop(d);
    wait_requests(&sb, 0);
}

#[test]
fn ask_denies_after_the_approval_timeout() {
    let sb = Sandbox::new();
    let s = sb.serve(&["--exec", "ask", "--exec-approval-timeout", "0.5"]);
    let mut c = s.client();
    let started = std::time::Instant::now();
    let r = run(&mut c, "print(1)");
    assert!(started.elapsed() >= Duration::from_millis(500));
    assert!(is_error(&r));
    let t = &texts(&r)[0];
    assert!(t.starts_with("executeCode request "), "{t}");
    assert!(t.ends_with(" was not approved within 0.5 s"), "{t}");
    assert_eq!(
        stdout(&sb.run(&["exec"])),
        "no executeCode requests are waiting\n"
    );
    let o = sb.run(&["exec", "approve"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("no executeCode requests are waiting"));
}

#[test]
#[ignore = "needs matplotlib: .ci/run installs it and names its python3 in CCIDE_TEST_PYTHON"]
fn matplotlib_figures_come_back_as_png_images() {
    let python = python3();
    let o = std::process::Command::new(python)
        .args(["-c", "import matplotlib"])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "{} cannot import matplotlib (pip install matplotlib==3.10.9, or name a python3 that can in CCIDE_TEST_PYTHON): {}",
        python.display(),
        stderr(&o)
    );
    let sb = Sandbox::new();
    let s = sb.serve(&["--exec", "on"]);
    let mut c = s.client();
    let r = run(
        &mut c,
        "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3])\nplt.title('t')\nprint('drawn');",
    );
    assert!(!is_error(&r), "{r}");
    let content = r["result"]["content"].as_array().unwrap();
    assert_eq!(content[0], json!({"type":"text","text":"drawn\n"}));
    assert_eq!(content.len(), 2, "{r}");
    assert_eq!(content[1]["type"], "image");
    assert_eq!(content[1]["mimeType"], "image/png");
    // base64 of the PNG signature.
    assert!(
        content[1]["data"]
            .as_str()
            .unwrap()
            .starts_with("iVBORw0KGgo")
    );
    // Figures are closed once returned.
    let r = run(&mut c, "len(plt.get_fignums())");
    assert_eq!(texts(&r), ["0\n"]);
}
