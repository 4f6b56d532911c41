//! JSON-RPC 2.0: typed messages with ids kept in their wire form, the per-call context of a
//! request answered now or later (`call`, which also knows the shape MCP gives a tool's
//! result), and the connected clients with broadcast (`clients`). Knows nothing of the tools
//! themselves or the editor; LSP's framing is `lsp`'s.

pub mod call;
pub mod clients;

use serde_json::{Map, Value};

use crate::json::obj;

/// A request id as the peer sent it: a number (0 included) or a string, echoed verbatim.
#[derive(Clone, Debug, PartialEq)]
pub struct RequestId(Value);

impl RequestId {
    pub fn number(n: u64) -> RequestId {
        RequestId(Value::from(n))
    }

    pub fn from_value(v: &Value) -> Option<RequestId> {
        match v {
            Value::Number(_) | Value::String(_) => Some(RequestId(v.clone())),
            _ => None,
        }
    }

    pub fn to_value(&self) -> Value {
        self.0.clone()
    }

    pub fn as_u64(&self) -> Option<u64> {
        self.0.as_u64()
    }
}

impl std::fmt::Display for RequestId {
    /// Strings print quoted, so `1` and `"1"` never look alike in a log line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// JSON-RPC's error codes and the ones LSP adds (ccide-protocol(7) §3.5, §10): the whole
/// table, named once, also where ccide only ever receives a code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorCode {
    ParseError = -32700,
    InvalidRequest = -32600,
    MethodNotFound = -32601,
    InvalidParams = -32602,
    InternalError = -32603,
    /// LSP: a request other than `initialize` before `initialize`.
    ServerNotInitialized = -32002,
    /// LSP: the request was valid but failed (e.g. a diagnostic pull on a closed document).
    RequestFailed = -32803,
    /// LSP: the server cancelled the request (it may succeed when asked again).
    ServerCancelled = -32802,
    /// LSP: the document changed while the request ran; ask again.
    ContentModified = -32801,
    /// LSP: the client cancelled the request (`$/cancelRequest`).
    RequestCancelled = -32800,
}

/// An error as a peer answered it: its code may be one ccide has no name for.
#[derive(Clone, Debug, PartialEq)]
pub struct ResponseError {
    pub code: i64,
    pub message: String,
    pub data: Option<Value>,
}

impl ResponseError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> ResponseError {
        ResponseError {
            code: code as i64,
            message: message.into(),
            data: None,
        }
    }

    fn from_value(mut v: Value) -> ResponseError {
        ResponseError {
            code: v["code"].as_i64().unwrap_or(0),
            message: match v["message"].take() {
                Value::String(s) => s,
                _ => String::new(),
            },
            data: v.get_mut("data").map(Value::take),
        }
    }

    /// Cancelled by the server or the client, or overtaken by a change: worth asking again.
    pub fn is_retryable(&self) -> bool {
        (ErrorCode::ServerCancelled as i64..=ErrorCode::RequestCancelled as i64)
            .contains(&self.code)
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct RpcError {
    pub code: ErrorCode,
    pub message: String,
}

impl RpcError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> RpcError {
        RpcError {
            code,
            message: message.into(),
        }
    }

    pub fn invalid_params(message: impl Into<String>) -> RpcError {
        RpcError::new(ErrorCode::InvalidParams, message)
    }
}

#[derive(Debug)]
pub struct Request {
    pub id: RequestId,
    pub method: String,
    pub params: Value,
}

#[derive(Debug)]
pub struct Notification {
    pub method: String,
    pub params: Value,
}

/// A response keeps what it carries: the result, or the error (`id` is None only for an
/// error answering something that had no readable id).
#[derive(Debug)]
pub struct Response {
    pub id: Option<RequestId>,
    pub result: Result<Value, ResponseError>,
}

#[derive(Debug)]
pub enum Message {
    Request(Request),
    Notification(Notification),
    Response(Response),
}

/// Classifies one JSON value; on failure returns the error response to send back.
pub fn classify(v: Value) -> Result<Message, Value> {
    let Value::Object(mut obj) = v else {
        return Err(error_response(
            None,
            &RpcError::new(
                ErrorCode::InvalidRequest,
                "Invalid Request: not a JSON object",
            ),
        ));
    };
    let raw_id = obj.remove("id");
    let id = match &raw_id {
        None => None,
        Some(v) => match RequestId::from_value(v) {
            Some(id) => Some(id),
            None => {
                return Err(error_response(
                    None,
                    &RpcError::new(
                        ErrorCode::InvalidRequest,
                        "Invalid Request: id must be a number or a string",
                    ),
                ));
            }
        },
    };
    let invalid = |why: &str| {
        Err(error_response(
            id.as_ref(),
            &RpcError::new(ErrorCode::InvalidRequest, format!("Invalid Request: {why}")),
        ))
    };
    if obj.get("jsonrpc").and_then(Value::as_str) != Some("2.0") {
        return invalid("\"jsonrpc\" must be \"2.0\"");
    }
    match obj.remove("method") {
        Some(Value::String(method)) => {
            let params = obj.remove("params").unwrap_or(Value::Null);
            if !matches!(params, Value::Object(_) | Value::Array(_) | Value::Null) {
                return invalid("params must be an object or an array");
            }
            Ok(match id {
                Some(id) => Message::Request(Request { id, method, params }),
                None => Message::Notification(Notification { method, params }),
            })
        }
        Some(_) => invalid("method must be a string"),
        None => {
            if obj.contains_key("result") == obj.contains_key("error") {
                return invalid("a response needs exactly one of result and error");
            }
            if raw_id.is_none() {
                return invalid("a response needs an id");
            }
            let result = match obj.remove("error") {
                Some(e) => Err(ResponseError::from_value(e)),
                None => Ok(obj.remove("result").unwrap_or_default()),
            };
            Ok(Message::Response(Response { id, result }))
        }
    }
}

pub fn result_response(id: &RequestId, result: Value) -> Value {
    obj! {"jsonrpc": "2.0", "id": id.to_value(), "result": result}
}

pub fn error_response(id: Option<&RequestId>, e: &RpcError) -> Value {
    obj! {
        "jsonrpc": "2.0",
        "id": id.map(RequestId::to_value).unwrap_or(Value::Null),
        "error": obj! {"code": e.code as i64, "message": e.message.as_str()},
    }
}

/// The largest message a Claude Code client takes: above it, it drops the connection
/// (ccide-protocol(7) §2.1). Every message ccide sends is measured against it.
pub const MAX_TO_CLIENT: usize = 16 << 20;

/// `n` bytes as people read sizes: `25.3 MiB`.
pub fn mib(n: usize) -> String {
    format!("{}.{} MiB", n >> 20, ((n & ((1 << 20) - 1)) * 10) >> 20)
}

/// The text of a response, or, when it would not fit in one client message, the text of an
/// error saying so: a tool result becomes an isError result (the model reads it), anything
/// else a -32603 error.
pub fn capped_response(id: &RequestId, r: Result<Value, RpcError>) -> String {
    let is_tool_result = matches!(&r, Ok(v) if v.get("content").is_some());
    let text = response(id, r).to_string();
    if text.len() <= MAX_TO_CLIENT {
        return text;
    }
    let message = format!(
        "the answer is {} as JSON, above the 16 MiB Claude Code accepts in one message (it would drop the connection); ask for less, such as a smaller file or one file's diagnostics",
        mib(text.len())
    );
    let r = if is_tool_result {
        Ok(obj! {"content": vec![obj! {"type": "text", "text": message}], "isError": true})
    } else {
        Err(RpcError::new(ErrorCode::InternalError, message))
    };
    response(id, r).to_string()
}

/// The text of `response(id, Ok(call::tool_texts(items)))`, the same bytes, made without
/// building the value: an accepted 10 MiB proposal is escaped once, a word at a time.
pub fn texts_response(id: &RequestId, items: &[&str]) -> String {
    let mut out = String::with_capacity(items.iter().map(|t| t.len() + 40).sum::<usize>() + 64);
    out.push_str("{\"id\":");
    out.push_str(&id.0.to_string());
    out.push_str(",\"jsonrpc\":\"2.0\",\"result\":{\"content\":[");
    for (k, t) in items.iter().enumerate() {
        out.push_str(if k == 0 {
            "{\"text\":\""
        } else {
            ",{\"text\":\""
        });
        crate::json::escape_into(&mut out, t);
        out.push_str("\",\"type\":\"text\"}");
    }
    out.push_str("]}}");
    out
}

pub fn response(id: &RequestId, r: Result<Value, RpcError>) -> Value {
    match r {
        Ok(v) => result_response(id, v),
        Err(e) => error_response(Some(id), &e),
    }
}

/// A response carrying a peer's answer as it was: its error's code whatever it is (`ErrorCode`
/// names only those ccide uses), for answers passed on (ccide-protocol(7) §11.8).
pub fn passed_on(id: &RequestId, r: Result<Value, ResponseError>) -> Value {
    match r {
        Ok(v) => result_response(id, v),
        Err(e) => {
            let mut error = obj! {"code": e.code, "message": e.message};
            if let Some(data) = e.data {
                error["data"] = data;
            }
            obj! {"jsonrpc": "2.0", "id": id.to_value(), "error": error}
        }
    }
}

pub fn request(id: &RequestId, method: &str, params: Option<Value>) -> Value {
    let mut m = Map::new();
    m.insert("jsonrpc".into(), "2.0".into());
    m.insert("id".into(), id.to_value());
    m.insert("method".into(), method.into());
    if let Some(p) = params {
        m.insert("params".into(), p);
    }
    Value::Object(m)
}

pub fn notification(method: &str, params: Value) -> Value {
    obj! {"jsonrpc": "2.0", "method": method, "params": params}
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn an_answer_passed_on_keeps_its_code_message_and_data() {
        let id = RequestId::from_value(&json!("a")).unwrap();
        let e = ResponseError {
            code: -32099,
            message: "busy".into(),
            data: Some(json!({"retry": 2})),
        };
        assert_eq!(
            passed_on(&id, Err(e)),
            json!({"jsonrpc": "2.0", "id": "a",
                   "error": {"code": -32099, "message": "busy", "data": {"retry": 2}}})
        );
        let e = ResponseError::new(ErrorCode::ContentModified, "changed");
        assert_eq!(
            passed_on(&id, Err(e))["error"],
            json!({"code": -32801, "message": "changed"})
        );
        assert_eq!(
            passed_on(&id, Ok(json!(null))),
            json!({"jsonrpc": "2.0", "id": "a", "result": null})
        );
    }

    #[test]
    fn id_zero_and_string_ids_are_requests() {
        let m = classify(json!({"jsonrpc":"2.0","id":0,"method":"ping"}))
            .ok()
            .unwrap();
        assert!(matches!(m, Message::Request(r) if r.id.to_value() == json!(0)));
        let m = classify(json!({"jsonrpc":"2.0","id":"a","method":"ping"}))
            .ok()
            .unwrap();
        assert!(matches!(m, Message::Request(r) if r.id.to_string() == "\"a\""));
    }

    #[test]
    fn bad_shapes_are_invalid_requests() {
        for v in [
            json!(1),
            json!({"id": 1, "method": "x"}),
            json!({"jsonrpc": "2.0", "id": true, "method": "x"}),
            json!({"jsonrpc": "2.0", "id": 1, "method": 5}),
            json!({"jsonrpc": "2.0", "id": 1, "method": "x", "params": 3}),
        ] {
            let e = classify(v).err().unwrap();
            assert_eq!(e["error"]["code"], -32600);
        }
    }

    #[test]
    fn answers_above_the_client_cap_become_errors() {
        let id = RequestId::number(3);
        let small = capped_response(&id, Ok(json!({"content": [{"type": "text", "text": "x"}]})));
        assert_eq!(
            small,
            r#"{"id":3,"jsonrpc":"2.0","result":{"content":[{"text":"x","type":"text"}]}}"#
        );
        // Characters JSON escapes double in size: 9 MiB of quotes is 18 MiB on the wire.
        let quotes = "\"".repeat(9 << 20);
        let big = capped_response(
            &id,
            Ok(json!({"content": [{"type": "text", "text": quotes}]})),
        );
        let v: Value = serde_json::from_str(&big).unwrap();
        assert_eq!(v["result"]["isError"], true);
        assert_eq!(
            v["result"]["content"][0]["text"]
                .as_str()
                .unwrap()
                .split(" as JSON")
                .next(),
            Some("the answer is 18.0 MiB")
        );
        let raw = capped_response(&id, Ok(Value::String(quotes)));
        let v: Value = serde_json::from_str(&raw).unwrap();
        assert_eq!(v["error"]["code"], -32603);
        assert_eq!(mib(25 << 20 | 314_573), "25.3 MiB");
    }

    /// The answer made by hand is byte for byte the one serde_json makes: every ASCII byte,
    /// at every offset within an 8-byte word, and text beyond ASCII.
    #[test]
    fn texts_response_is_what_serde_json_makes() {
        let ascii: String = (0u8..128).map(char::from).collect();
        let mut texts = vec![String::new(), "FILE_SAVED".into(), ascii.clone()];
        for pad in 0..9 {
            texts.push(format!("{}{ascii}é\u{2028}😀\u{7f}", "x".repeat(pad)));
        }
        for id in [json!(7), json!("a\"b")] {
            let id = RequestId(id);
            for t in &texts {
                let want = response(&id, Ok(call::tool_texts(&["FILE_SAVED", t]))).to_string();
                assert_eq!(texts_response(&id, &["FILE_SAVED", t]), want);
            }
        }
    }
}
