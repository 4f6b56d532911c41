//! The server half of the control socket: the listener, the owner check, and the connection
//! loop that answers every request line exactly once (ccide-protocol(7) §9.1).

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::Arc;

use serde_json::Value;

use super::editors;
use super::handler::handle;
use super::lsp_mux::Hub;
use super::protocol::{LspClient, MAX_LINE, Request, failure, leading_id, short_path};
use crate::state::State;

/// Binds the control socket, refusing to start if another live server already owns it.
pub fn bind(path: &Path) -> Result<UnixListener, String> {
    if short_path(path, |p| UnixStream::connect(p)).is_ok() {
        return Err(format!(
            "another ccide serve already runs with this state directory (its control socket {} answers); stop it or use another --state-dir",
            path.display()
        ));
    }
    let _ = std::fs::remove_file(path);
    short_path(path, |p| UnixListener::bind(p))
        .map_err(|e| format!("cannot create the control socket {}: {e}", path.display()))
}

pub fn run(state: Arc<State>, listener: UnixListener) {
    let hub = Hub::new(&state.langservers);
    for stream in listener.incoming() {
        let Ok(stream) = stream else { continue };
        let me = crate::sys::getuid();
        match crate::sys::peer_uid(&stream) {
            Ok(uid) if uid == me => {}
            Ok(uid) => {
                crate::log::warn!("control socket: refused a connection from uid {uid}");
                continue;
            }
            Err(e) => {
                crate::log::warn!("control socket: cannot identify a peer: {e}");
                continue;
            }
        }
        let (state, hub) = (state.clone(), hub.clone());
        let _ = crate::proc::spawn_thread("control", move || serve_one(&state, &hub, stream));
    }
}

/// Answers a connection's requests in order until it ends; then ends the editor session it
/// attached, if any. `events` and `lsp` take the connection over.
fn serve_one(state: &Arc<State>, hub: &Arc<Hub>, stream: UnixStream) {
    let Ok(read_half) = stream.try_clone() else {
        return;
    };
    // Read as a file: an LSP client's connection is then read by the same code as a language
    // server's pipe (`lsp_mux`).
    let read_half = std::fs::File::from(std::os::fd::OwnedFd::from(read_half));
    let mut reader = BufReader::with_capacity(64 << 10, read_half);
    let mut writer = stream;
    let mut session = None;
    let mut line = Vec::new();
    loop {
        let (id, request) = match read_request(&mut reader, &mut line, MAX_LINE) {
            Ok(Read::Line) => match serde_json::from_slice::<Value>(&line) {
                Ok(mut v) => (v.get_mut("id").map(Value::take), Request::parse(v)),
                Err(e) => (
                    leading_id(&line).map(Value::from),
                    Err(format!("bad control request: {e}")),
                ),
            },
            Ok(Read::TooLong) => (
                leading_id(&line).map(Value::from),
                Err(format!(
                    "the request line is longer than {} MiB, the control socket's limit; it was skipped",
                    MAX_LINE >> 20
                )),
            ),
            Ok(Read::End) | Err(_) => break,
        };
        line = Vec::new();
        let mut lsp_client = None;
        let mut answer = match request {
            Ok(Request::Events) if session.is_none() => {
                state.events.subscribe(writer);
                return;
            }
            Ok(Request::Lsp(client)) if session.is_none() => match lsp_root(state, &client) {
                Ok(()) => {
                    lsp_client = Some(client);
                    crate::json::obj! {"ok": true}
                }
                Err(e) => failure(&e),
            },
            Ok(Request::Attach { pid, editor }) if session.is_none() => {
                let (id, answer) = editors::attach(state, pid, editor.as_deref());
                session = Some(id);
                answer
            }
            Ok(r) => handle(state, session, r),
            Err(e) => failure(&e),
        };
        if let Some(id) = id {
            answer["id"] = id;
        }
        let mut text = answer.to_string();
        text.push('\n');
        if writer.write_all(text.as_bytes()).is_err() {
            break;
        }
        if let Some(client) = lsp_client {
            // From here on the connection carries LSP, both ways (ccide-protocol(7) §9.2).
            super::lsp_mux::serve(state, hub, reader, writer, client);
            return;
        }
    }
    if let Some(id) = session {
        editors::detach(state, id);
    }
}

/// An LSP client's root must be an absolute path in a workspace folder: a CLI started in a
/// subfolder of a workspace is served by that workspace's servers.
fn lsp_root(state: &State, client: &LspClient) -> Result<(), String> {
    let root = Path::new(&client.root);
    if root.is_absolute() && state.workspaces.holder(root).is_some() {
        return Ok(());
    }
    Err(format!(
        "lsp: '{}' is not an absolute path in this server's workspace folders ({:?})",
        crate::text::visible(&client.root),
        state.workspaces.list()
    ))
}

enum Read {
    /// A whole line is in the buffer, without its newline.
    Line,
    /// The line was longer than the limit and was read to its end; the buffer keeps its start.
    TooLong,
    End,
}

/// Reads one line into `buf` (cleared first), keeping at most `max` bytes: the rest of a longer
/// line is read and dropped, so that it is answered once and the next line is read whole. A
/// last line without its newline counts.
fn read_request(r: &mut impl BufRead, buf: &mut Vec<u8>, max: usize) -> std::io::Result<Read> {
    buf.clear();
    let mut over = false;
    loop {
        let chunk = r.fill_buf()?;
        if chunk.is_empty() {
            return Ok(match (over, buf.is_empty()) {
                (true, _) => Read::TooLong,
                (false, true) => Read::End,
                (false, false) => Read::Line,
            });
        }
        let newline = chunk.iter().position(|&b| b == b'\n');
        let part = &chunk[..newline.unwrap_or(chunk.len())];
        if !over && buf.len() + part.len() > max {
            over = true;
        }
        if !over {
            buf.extend_from_slice(part);
        } else if buf.len() < 64 {
            // Enough of the start to find the request's id (`leading_id`).
            let room = 64 - buf.len();
            buf.extend_from_slice(&part[..part.len().min(room)]);
        }
        let used = newline.map_or(chunk.len(), |i| i + 1);
        r.consume(used);
        if newline.is_some() {
            return Ok(if over { Read::TooLong } else { Read::Line });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Read, read_request};

    /// Each line read whole or, when longer than the limit, once and to its end.
    fn lines(input: &[u8], max: usize) -> Vec<(&'static str, String)> {
        let mut r = std::io::BufReader::with_capacity(4, input);
        let mut buf = Vec::new();
        let mut out = Vec::new();
        loop {
            let what = match read_request(&mut r, &mut buf, max).unwrap() {
                Read::Line => "line",
                Read::TooLong => "too long",
                Read::End => return out,
            };
            out.push((what, String::from_utf8_lossy(&buf).into_owned()));
        }
    }

    #[test]
    fn a_line_over_the_limit_is_read_once_to_its_end() {
        let long = format!("{{\"id\":7,{}}}", "x".repeat(100));
        let input = format!("{{\"id\":1}}\n{long}\n{{\"id\":2}}\nlast");
        let head = long[..64].to_string();
        assert_eq!(
            lines(input.as_bytes(), 20),
            [
                ("line", "{\"id\":1}".to_string()),
                ("too long", head),
                ("line", "{\"id\":2}".to_string()),
                ("line", "last".to_string()),
            ]
        );
        // Exactly the limit is allowed; its newline is not counted.
        assert_eq!(lines(b"12345\n123456\n", 5)[0], ("line", "12345".into()));
        assert_eq!(lines(b"12345\n123456\n", 5)[1].0, "too long");
        assert_eq!(lines(b"1234567", 5), [("too long", "1234567".into())]);
        assert_eq!(lines(b"", 5), []);
        assert_eq!(lines(b"\n", 5), [("line", String::new())]);
    }
}
