//! JSON-RPC 2.0: typed messages with ids kept in their wire form, Content-Length framing for
//! stdio peers, the per-call context of a request answered now or later (`call`), and the
//! connected clients with broadcast (`clients`). Knows nothing of MCP tools or the editor.

pub mod call;
pub mod clients;

use serde_json::{Map, Value, json};

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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorCode {
    ParseError = -32700,
    InvalidRequest = -32600,
    MethodNotFound = -32601,
    InvalidParams = -32602,
    InternalError = -32603,
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

pub struct Request {
    pub id: RequestId,
    pub method: String,
    pub params: Value,
}

pub struct Notification {
    pub method: String,
    pub params: Value,
}

pub struct Response {
    pub id: Option<RequestId>,
}

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
            Ok(Message::Response(Response { id }))
        }
    }
}

pub fn result_response(id: &RequestId, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id.to_value(), "result": result})
}

pub fn error_response(id: Option<&RequestId>, e: &RpcError) -> Value {
    json!({
        "jsonrpc": "2.0",
        "id": id.map(RequestId::to_value).unwrap_or(Value::Null),
        "error": {"code": e.code as i64, "message": e.message},
    })
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
        Ok(json!({"content": [{"type": "text", "text": message}], "isError": true}))
    } else {
        Err(RpcError::new(ErrorCode::InternalError, message))
    };
    response(id, r).to_string()
}

pub fn response(id: &RequestId, r: Result<Value, RpcError>) -> Value {
    match r {
        Ok(v) => result_response(id, v),
        Err(e) => error_response(Some(id), &e),
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
    json!({"jsonrpc": "2.0", "method": method, "params": params})
}

/// Largest framed message body read from a stdio peer (a language server or an editor).
pub const MAX_FRAMED: usize = 64 << 20;

/// Reads one `Content-Length`-framed message body (the LSP base protocol, used by language
/// servers and editors over stdio). `Ok(None)` at a clean end of stream between messages.
/// Other headers (`Content-Type`) are ignored; header names are case-insensitive.
pub fn read_framed(r: &mut impl std::io::BufRead) -> std::io::Result<Option<Vec<u8>>> {
    use std::io::{BufRead, Error, ErrorKind, Read};
    let mut length: Option<usize> = None;
    let mut line = Vec::new();
    let mut first = true;
    loop {
        line.clear();
        let n = (&mut *r).take(8192).read_until(b'\n', &mut line)?;
        if n == 0 {
            return if first {
                Ok(None)
            } else {
                Err(Error::new(
                    ErrorKind::UnexpectedEof,
                    "end of stream inside a header",
                ))
            };
        }
        first = false;
        if !line.ends_with(b"\n") {
            return Err(Error::new(
                ErrorKind::InvalidData,
                "header line longer than 8 KiB",
            ));
        }
        let text = String::from_utf8_lossy(&line);
        let text = text.trim_end_matches(['\r', '\n']);
        if text.is_empty() {
            break;
        }
        if let Some((name, value)) = text.split_once(':')
            && name.trim().eq_ignore_ascii_case("content-length")
        {
            length = Some(value.trim().parse().map_err(|_| {
                Error::new(
                    ErrorKind::InvalidData,
                    format!("bad Content-Length {value:?}"),
                )
            })?);
        }
    }
    let length = length
        .ok_or_else(|| Error::new(ErrorKind::InvalidData, "message without Content-Length"))?;
    if length > MAX_FRAMED {
        return Err(Error::new(
            ErrorKind::InvalidData,
            format!(
                "message of {length} bytes is above the {} MiB limit",
                MAX_FRAMED >> 20
            ),
        ));
    }
    let mut body = vec![0; length];
    r.read_exact(&mut body)?;
    Ok(Some(body))
}

/// Writes one message with its `Content-Length` header, in one write, and flushes.
pub fn write_framed(w: &mut impl std::io::Write, v: &Value) -> std::io::Result<()> {
    let body = v.to_string();
    let mut out = format!("Content-Length: {}\r\n\r\n", body.len()).into_bytes();
    out.extend_from_slice(body.as_bytes());
    w.write_all(&out)?;
    w.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn framed_messages_round_trip_and_reject_bad_headers() {
        let mut buf = Vec::new();
        write_framed(&mut buf, &json!({"jsonrpc": "2.0", "method": "é"})).unwrap();
        let body = r#"{"jsonrpc":"2.0","method":"é"}"#;
        assert_eq!(
            buf,
            format!("Content-Length: {}\r\n\r\n{body}", body.len()).into_bytes()
        );
        buf.extend_from_slice(b"content-length: 2\r\nContent-Type: x\r\n\r\n{}");
        let mut r = std::io::Cursor::new(buf);
        assert_eq!(read_framed(&mut r).unwrap().unwrap(), body.as_bytes());
        assert_eq!(read_framed(&mut r).unwrap().unwrap(), b"{}");
        assert!(read_framed(&mut r).unwrap().is_none());
        for bad in [
            &b"Content-Type: x\r\n\r\n{}"[..],
            b"Content-Length: x\r\n\r\n",
            b"Content-Length: 5\r\n",
        ] {
            assert!(read_framed(&mut std::io::Cursor::new(bad)).is_err());
        }
        let huge = format!("Content-Length: {}\r\n\r\n", MAX_FRAMED + 1);
        assert!(read_framed(&mut std::io::Cursor::new(huge)).is_err());
    }
}
