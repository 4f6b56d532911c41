//! man/ccide-protocol.7, the protocol reference that code comments cite as
//! "ccide-protocol(7) §N": it renders without groff warnings, its sections are numbered in
//! order, every section it or the code cites exists, and every tool the server lists is
//! described in §7.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tungstenite::client::IntoClientRequest;
use tungstenite::{Message, http};

const PAGE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/man/ccide-protocol.7");
const SRC: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/src");
const DEADLINE: Duration = Duration::from_secs(10);

fn page() -> String {
    std::fs::read_to_string(PAGE).unwrap()
}

#[test]
fn the_protocol_page_renders_without_groff_warnings() {
    let out = Command::new("groff")
        .args(["-man", "-Tutf8", "-ww", "-z"])
        .arg(PAGE)
        .output()
        .expect("groff is installed (by .ci/run)");
    assert!(out.status.success());
    assert_eq!(String::from_utf8_lossy(&out.stderr), "", "groff warnings");
}

/// The numbers of the page's sections ("5") and subsections ("5.1"), in order.
fn section_numbers(page: &str) -> Vec<String> {
    page.lines()
        .filter_map(|l| {
            let title = l
                .strip_prefix(".SH \"")
                .or_else(|| l.strip_prefix(".SS \""))?;
            let number = title.split(' ').next()?.trim_end_matches('.');
            number
                .starts_with(|c: char| c.is_ascii_digit())
                .then(|| number.to_string())
        })
        .collect()
}

#[test]
fn sections_are_numbered_in_order() {
    let numbers = section_numbers(&page());
    let (mut section, mut sub) = (0, 0);
    for n in &numbers {
        match n.split_once('.') {
            None => {
                section += 1;
                sub = 0;
                assert_eq!(*n, section.to_string(), "sections: {numbers:?}");
            }
            Some((s, m)) => {
                sub += 1;
                assert_eq!(
                    (s, m),
                    (section.to_string().as_str(), sub.to_string().as_str()),
                    "sections: {numbers:?}"
                );
            }
        }
    }
    assert!(section >= 10, "sections: {numbers:?}");
}

/// The section numbers that follow each occurrence of `marker` in `text`.
fn cited(text: &str, marker: &str) -> Vec<String> {
    text.split(marker)
        .skip(1)
        .map(|rest| {
            let n: String = rest
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.')
                .collect();
            n.trim_end_matches('.').to_string()
        })
        .collect()
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn every_section_cited_in_the_page_or_the_code_exists() {
    let page = page();
    let sections = section_numbers(&page);
    // `\(sc N` in the DESCRIPTION is the placeholder of the citation form.
    for n in cited(&page, "\\(sc").into_iter().filter(|n| !n.is_empty()) {
        assert!(sections.contains(&n), "the page cites a missing §{n}");
    }
    let mut files = Vec::new();
    rust_files(Path::new(SRC), &mut files);
    assert!(!files.is_empty());
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        for n in cited(&text, "ccide-protocol(7) \u{a7}") {
            assert!(
                sections.contains(&n),
                "{} cites ccide-protocol(7) §{n}, which does not exist",
                f.display()
            );
        }
    }
}

/// A `ccide serve` in a directory of its own, stopped and removed on drop.
struct Serve {
    child: Child,
    root: PathBuf,
}

impl Serve {
    fn start(extra: &[&str]) -> (Serve, u16, String) {
        let root = std::env::temp_dir().join(format!("ccide-protocol-man-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        for d in ["ws", "home", "config", "state"] {
            std::fs::create_dir_all(root.join(d)).unwrap();
        }
        let root = std::fs::canonicalize(&root).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_ccide"))
            .arg("serve")
            .arg("--workspace")
            .arg(root.join("ws"))
            .arg("--config-dir")
            .arg(root.join("config"))
            .arg("--state-dir")
            .arg(root.join("state"))
            .args(extra)
            .env_clear()
            .env("HOME", root.join("home"))
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn ccide serve");
        let serve = Serve { child, root };
        let end = Instant::now() + DEADLINE;
        loop {
            let lock = std::fs::read_dir(serve.root.join("config/ide"))
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path())
                .find(|p| p.extension().is_some_and(|x| x == "lock"));
            if let Some(p) = lock
                && let Some(v) = std::fs::read(&p)
                    .ok()
                    .and_then(|b| serde_json::from_slice::<Value>(&b).ok())
            {
                let port = p.file_stem().unwrap().to_str().unwrap().parse().unwrap();
                let token = v["authToken"].as_str().unwrap().to_string();
                return (serve, port, token);
            }
            assert!(Instant::now() < end, "no lock file within {DEADLINE:?}");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let end = Instant::now() + DEADLINE;
        while Instant::now() < end && matches!(self.child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

/// Sends a request and returns its response, skipping anything else.
fn request(ws: &mut tungstenite::WebSocket<TcpStream>, id: u64, method: &str) -> Value {
    let msg = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": {}});
    ws.send(Message::Text(msg.to_string().into())).unwrap();
    loop {
        if let Message::Text(t) = ws.read().unwrap() {
            let v: Value = serde_json::from_str(t.as_str()).unwrap();
            if v["id"] == json!(id) && v.get("method").is_none() {
                return v;
            }
        }
    }
}

#[test]
fn every_listed_tool_is_described_in_section_7() {
    let (_serve, port, token) = Serve::start(&["--exec", "on"]);
    let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(DEADLINE)).unwrap();
    let mut req = format!("ws://127.0.0.1:{port}/")
        .into_client_request()
        .unwrap();
    let headers = req.headers_mut();
    headers.insert(
        "Sec-WebSocket-Protocol",
        http::HeaderValue::from_static("mcp"),
    );
    headers.insert(
        "X-Claude-Code-Ide-Authorization",
        http::HeaderValue::from_str(&token).unwrap(),
    );
    let (mut ws, _) = tungstenite::client::client(req, stream).expect("upgrade");
    request(&mut ws, 0, "initialize");
    let tools = request(&mut ws, 1, "tools/list");
    let names: Vec<&str> = tools["result"]["tools"]
        .as_array()
        .expect("a tool list")
        .iter()
        .map(|t| t["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"executeCode"), "{names:?}");
    let page = page();
    let start = page.find(".SH \"7.").expect("a section 7");
    let end = start + page[start..].find(".SH \"8.").expect("a section 8");
    let section7 = &page[start..end];
    for name in names {
        assert!(
            section7.contains(&format!("\n.B {name} {{")),
            "ccide-protocol(7) §7 does not describe the tool {name}"
        );
    }
}
