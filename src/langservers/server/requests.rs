//! The conversation with the server: what is sent (notifications, and requests, each pending
//! until answered or failed when the process exits), the diagnostic pulls finality asks for, the
//! requests sent on a client's behalf and their answers, and the server's own requests (answered
//! by ccide, or handed to whoever registered for them).

use std::path::Path;
use std::time::Instant;

use serde_json::Value;

use super::positions::{convert_positions, to_utf16};
use super::state::{
    Effect, Effects, OnAnswer, OnRequest, Pending, Reply, Server, ServerRequest, State,
};
use crate::langservers::finality::Source;
use crate::langservers::supervisor::Phase;
use crate::lsp::connection::SendError;
use crate::rpc::{self, ErrorCode, RequestId, ResponseError, RpcError};

/// typescript-language-server publishes nothing when a file's diagnostics stay empty, so a
/// clean edit never gets a result to call final; its `typescript.tsserverRequest` command asks
/// tsserver itself, and these three answers make a complete result (ccide-protocol(7) §11.4).
const TSSERVER_PARTS: [&str; 3] = [
    "syntacticDiagnosticsSync",
    "semanticDiagnosticsSync",
    "suggestionDiagnosticsSync",
];

impl Server {
    /// Sends one message; a server that stopped reading (too much waits for it) is killed,
    /// and its exit says why.
    pub(super) fn send(&self, st: &mut State, v: &Value) {
        let Some(p) = &st.process else {
            return;
        };
        if let Err(SendError::Full { queued }) = p.send(v)
            && st.life.killed_because.is_none()
        {
            let why = format!(
                "it stopped reading its input ({} waiting)",
                rpc::mib(queued)
            );
            crate::log::warn!("language server {}: {why}; killing it", self.name);
            st.life.killed_because = Some(why);
            p.kill();
        }
        // `Closed`: it is ending, and its `Exited` will say so.
    }

    pub(super) fn send_request(
        &self,
        st: &mut State,
        method: &str,
        params: Option<Value>,
        pending: Pending,
    ) -> RequestId {
        let id = st.requests.register(pending);
        self.send(st, &rpc::request(&id, method, params));
        id
    }

    pub(super) fn send_pull(&self, st: &mut State, path: &Path, id: u64) {
        let Some(uri) = st.docs.get(path).filter(|d| d.open).map(|d| d.uri.clone()) else {
            return;
        };
        let pending = || Pending::Pull {
            path: path.to_path_buf(),
            id,
        };
        match st.fin.source().clone() {
            Source::Pull(identifier) => {
                let mut params = Value::Null;
                params["textDocument"]["uri"] = uri.into();
                if let Some(i) = identifier {
                    params["identifier"] = i.into();
                }
                self.send_request(st, "textDocument/diagnostic", Some(params), pending());
            }
            Source::Tsserver => {
                for command in TSSERVER_PARTS {
                    let mut file = Value::Null;
                    file["file"] = uri.as_str().into();
                    let mut params = Value::Null;
                    params["command"] = "typescript.tsserverRequest".into();
                    params["arguments"] = Value::Array(vec![command.into(), file]);
                    self.send_request(st, "workspace/executeCommand", Some(params), pending());
                }
            }
            Source::Push => {}
        }
    }

    pub(super) fn on_response(&self, st: &mut State, r: rpc::Response, effects: &mut Effects) {
        let Some(pending) = r.id.as_ref().and_then(|id| st.requests.complete(id)) else {
            return;
        };
        match pending {
            Pending::Initialize => match r.result {
                Ok(v) => self.initialized(st, v),
                Err(e) => {
                    let e = format!("initialize failed: {}", e.message);
                    crate::log::warn!("language server {}: {e}; not used", self.name);
                    st.life.last_error = Some(e);
                    self.stop(st, "initialize failed");
                    st.life.phase = Phase::Failed;
                }
            },
            Pending::Shutdown => {
                if let Some(p) = &st.process {
                    p.shutdown_answered();
                }
            }
            Pending::Pull { path, id } => self.on_pull_answer(st, &path, id, r.result),
            Pending::Client(on_answer, asked) => {
                let mut result = r.result;
                if let Ok(v) = &mut result {
                    convert_positions(st, v, &asked, false);
                }
                effects.push(Effect::Answer(on_answer, result));
            }
        }
    }

    fn on_pull_answer(
        &self,
        st: &mut State,
        path: &Path,
        id: u64,
        result: Result<Value, ResponseError>,
    ) {
        let tsserver = *st.fin.source() == Source::Tsserver;
        let answer = match result {
            // tsserver reports its own failures inside a successful answer.
            Ok(r) if tsserver && r["success"] != true => Err(ResponseError {
                code: 0,
                message: r["message"].as_str().unwrap_or("?").to_string(),
                data: None,
            }),
            Ok(r) if tsserver => {
                Ok(Some(r["body"].as_array().map_or(Vec::new(), |b| {
                    b.iter().map(from_tsserver).collect()
                })))
            }
            // "unchanged" only answers a previousResultId, which ccide never sends.
            Ok(r) if r["kind"] == "unchanged" => Ok(None),
            Ok(mut r) => {
                let mut items = match r["items"].take() {
                    Value::Array(a) => a,
                    _ => Vec::new(),
                };
                if let Some(d) = st.docs.get(path) {
                    to_utf16(&mut items, &d.text, st.enc);
                }
                Ok(Some(items))
            }
            Err(e) => Err(e),
        };
        if let Err(e) = &answer {
            crate::log::debug!(
                "{}: pull for {} failed: {} {}",
                self.name,
                path.display(),
                e.code,
                e.message
            );
        }
        if let Err(e) = st.fin.answered(path, id, answer, Instant::now()) {
            crate::log::warn!(
                "language server {}: asking for diagnostics failed ({e}); using its published diagnostics instead",
                self.name
            );
        }
    }

    pub(super) fn on_request_from(&self, st: &mut State, r: rpc::Request, effects: &mut Effects) {
        let (answer, ours) = self.answer(st, &r.method, &r.params);
        let has_handler = self
            .on_request
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some();
        match &st.process {
            Some(p) if !ours && has_handler => effects.push(Effect::Request(ServerRequest {
                method: r.method,
                params: r.params,
                reply: Reply {
                    sender: p.sender().clone(),
                    id: r.id,
                    default: Some(answer),
                },
            })),
            _ => self.send(st, &rpc::response(&r.id, answer)),
        }
    }

    /// ccide's answer to a request from the server, and whether it is ccide's business alone
    /// (else someone registered with `on_request` may answer instead). Each request gets an
    /// answer, since several servers wait for one before going on (ccide-protocol(7) §11.6).
    fn answer(
        &self,
        st: &mut State,
        method: &str,
        params: &Value,
    ) -> (Result<Value, RpcError>, bool) {
        let ours = match method {
            // No settings of ours: null per item means "use your defaults".
            "workspace/configuration" => {
                let n = params["items"].as_array().map_or(0, Vec::len);
                Ok(Value::Array(vec![Value::Null; n]))
            }
            "client/registerCapability" => {
                for r in params["registrations"].as_array().into_iter().flatten() {
                    let id = r["id"].as_str().unwrap_or_default().to_string();
                    match r["method"].as_str() {
                        Some("textDocument/diagnostic") => {
                            let identifier = r["registerOptions"]["identifier"].as_str();
                            st.fin
                                .set_source(Source::Pull(identifier.map(str::to_string)));
                            st.pull_registration = Some(id);
                        }
                        Some("workspace/didChangeWatchedFiles") => st.watch_registrations.push(id),
                        _ => {}
                    }
                }
                Ok(Value::Null)
            }
            "client/unregisterCapability" => {
                // The field name's misspelling is the protocol's own.
                for u in params["unregisterations"].as_array().into_iter().flatten() {
                    let id = u["id"].as_str().unwrap_or_default();
                    if st.pull_registration.as_deref() == Some(id) {
                        st.fin.set_source(Source::Push);
                        st.pull_registration = None;
                    }
                    st.watch_registrations.retain(|w| w != id);
                }
                Ok(Value::Null)
            }
            "workspace/workspaceFolders" => Ok(Value::Array(
                self.workspaces.list().iter().map(|w| folder(w)).collect(),
            )),
            "workspace/diagnostic/refresh" => {
                st.fin.refresh();
                Ok(Value::Null)
            }
            "window/workDoneProgress/create" => Ok(Value::Null),
            "workspace/applyEdit" => Ok(serde_json::from_slice(
                br#"{"applied": false, "failureReason": "ccide applies no edits from language servers"}"#,
            )
            .unwrap_or_default()),
            m if m.starts_with("workspace/") && m.ends_with("/refresh") => Ok(Value::Null),
            "window/showMessageRequest" => return (Ok(Value::Null), false),
            "window/showDocument" => {
                let mut no = Value::Null;
                no["success"] = false.into();
                return (Ok(no), false);
            }
            _ => {
                return (
                    Err(RpcError::new(
                        ErrorCode::MethodNotFound,
                        format!("ccide does not handle {method}"),
                    )),
                    false,
                );
            }
        };
        (ours, true)
    }
}

/// For clients other than diagnostics (the LSP mux): requests on their behalf, and the
/// server's requests they answer.
impl Server {
    /// Sends `method` with `params` to the running server about `path`, a document it has
    /// open (`hold` it first); `on_answer` gets the answer. Returns the id to `cancel` it by.
    pub fn request(
        &self,
        path: &Path,
        method: &str,
        mut params: Value,
        on_answer: OnAnswer,
    ) -> Result<u64, String> {
        let mut st = self.lock();
        let now = Instant::now();
        let running = st.life.phase == Phase::Running;
        let asked = match st.docs.get_mut(path) {
            Some(d) if d.open && running => {
                d.used = now;
                d.uri.clone()
            }
            _ => {
                return Err(format!(
                    "{} is not open in language server {}",
                    path.display(),
                    self.name
                ));
            }
        };
        st.last_used = now;
        convert_positions(&st, &mut params, &asked, true);
        let pending = Pending::Client(on_answer, asked);
        let id = self.send_request(&mut st, method, Some(params), pending);
        Ok(id.as_u64().unwrap_or_default())
    }

    /// `$/cancelRequest` for a request sent with `request` and not answered yet; its
    /// `on_answer` still gets the server's answer (LSP's RequestCancelled, usually).
    pub fn cancel(&self, id: u64) {
        let mut st = self.lock();
        let pending = st
            .requests
            .iter()
            .any(|(k, p)| *k == id && matches!(p, Pending::Client(..)));
        if pending {
            let mut params = Value::Null;
            params["id"] = id.into();
            self.send(&mut st, &rpc::notification("$/cancelRequest", params));
        }
    }

    /// Who gets the server's requests that ccide does not answer itself (None: ccide answers
    /// them all, as it does alone).
    pub fn on_request(&self, handler: Option<OnRequest>) {
        *self.on_request.lock().unwrap_or_else(|e| e.into_inner()) = handler;
    }
}

/// Every request sent on someone's behalf gets an answer: this one, when the process that
/// would have answered is gone.
pub(super) fn fail_requests(st: &mut State, effects: &mut Effects) {
    for (_, p) in st.requests.drain() {
        if let Pending::Client(on_answer, _) = p {
            let e = ResponseError {
                code: ErrorCode::RequestFailed as i64,
                message: "the language server exited before answering".into(),
                data: None,
            };
            effects.push(Effect::Answer(on_answer, Err(e)));
        }
    }
}

/// A tsserver protocol diagnostic (1-based line and UTF-16 offset, `category`) as the LSP
/// diagnostic typescript-language-server would publish for it (its `toDiagnostic`).
fn from_tsserver(d: &Value) -> Value {
    // Built field by field: smaller in the binary than `json!` (no serializer per type).
    let mut v = Value::Object(Default::default());
    for k in ["start", "end"] {
        let n = |f: &str| d[k][f].as_u64().unwrap_or(1).saturating_sub(1);
        v["range"][k]["line"] = n("line").into();
        v["range"][k]["character"] = n("offset").into();
    }
    v["message"] = d["text"].clone();
    v["severity"] = match d["category"].as_str() {
        Some("warning") => 2,
        Some("suggestion") => 4,
        _ => 1,
    }
    .into();
    v["code"] = d["code"].clone();
    v["source"] = d["source"].as_str().unwrap_or("typescript").into();
    v
}

pub(super) fn folder(w: &Path) -> Value {
    let mut v = Value::Object(Default::default());
    v["uri"] = crate::files::file_uri(w).into();
    v["name"] = w
        .file_name()
        .map_or("".into(), |n| n.to_string_lossy())
        .into();
    v
}
