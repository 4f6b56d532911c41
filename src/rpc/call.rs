//! One request being answered: the per-call context handed to method handlers, the promise of
//! a later answer, and the shapes of MCP tool results and arguments.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Map, Value};

use super::clients::Client;
use super::{RequestId, RpcError};
use crate::json::obj;
use crate::proc::lock;

/// What a method handler gives back.
pub enum Reply {
    Now(Result<Value, RpcError>),
    /// The handler kept a `Responder` and answers later.
    Later,
}

/// The request being handled: who asked, and under which id.
pub struct Call<'a> {
    pub client: &'a Arc<Client>,
    pub id: &'a RequestId,
}

impl Call<'_> {
    /// Promises an answer later; the call is then owed one until answered or cancelled.
    pub fn defer(&self) -> Responder {
        let done = Arc::new(AtomicBool::new(false));
        lock(&self.client.state)
            .inflight
            .push((self.id.clone(), done.clone()));
        Responder {
            client: self.client.clone(),
            id: self.id.clone(),
            done,
        }
    }
}

/// The promise of one answer to a request that finishes later (openDiff, slow tools).
/// Answering twice, or after `notifications/cancelled`, sends nothing.
pub struct Responder {
    pub client: Arc<Client>,
    pub id: RequestId,
    pub(super) done: Arc<AtomicBool>,
}

impl Responder {
    pub fn reply(&self, r: Result<Value, RpcError>) -> bool {
        self.reply_text(super::capped_response(&self.id, r))
    }

    /// `reply` with the text of the response already made (see `super::texts_response`);
    /// the caller has measured it against `MAX_TO_CLIENT`.
    pub fn reply_text(&self, text: String) -> bool {
        if self.done.swap(true, Ordering::SeqCst) {
            return false;
        }
        lock(&self.client.state)
            .inflight
            .retain(|(id, _)| *id != self.id);
        self.client.outbox.send(text)
    }

    /// False once answered, cancelled, or the connection has ended.
    pub fn is_open(&self) -> bool {
        !self.done.load(Ordering::SeqCst) && !self.client.outbox.is_ended()
    }
}

/// Worker threads one client may keep busy at once; its further slow calls are refused.
pub const MAX_WORKERS: usize = 16;

/// Answers a deferred call from a new thread with what `work` returns (None: no answer), so
/// that a slow tool never holds up its connection (which must keep answering pings). A
/// client gets at most `MAX_WORKERS` such threads: a batch of a thousand slow calls costs
/// sixteen threads and a thousand quick refusals, not a thousand threads.
pub fn answer_later(
    responder: Arc<Responder>,
    work: Box<dyn FnOnce() -> Option<Value> + Send>,
) -> Reply {
    let client = responder.client.clone();
    {
        let mut s = lock(&client.state);
        if s.workers >= MAX_WORKERS {
            drop(s);
            responder.reply(Ok(tool_error(&format!(
                "{MAX_WORKERS} slow calls of this client are still running; wait for their answers and try again"
            ))));
            return Reply::Later;
        }
        s.workers += 1;
    }
    let r = responder.clone();
    let worker_client = client.clone();
    let started = crate::proc::spawn_thread("answer", move || {
        let answer = work();
        // Free the slot before answering: a client that has its answer may call again.
        lock(&worker_client.state).workers -= 1;
        if let Some(v) = answer {
            r.reply(Ok(v));
        }
    });
    if let Err(e) = started {
        lock(&client.state).workers -= 1;
        responder.reply(Ok(tool_error(&format!("cannot start a thread: {e}"))));
    }
    Reply::Later
}

/// A JSON Schema object for `(name, type, description)` properties.
pub fn schema(props: &[(&str, &str, &str)], required: &[&str]) -> Value {
    let mut p = Map::new();
    for (name, ty, description) in props {
        let mut prop = obj! {"description": *description};
        prop["type"] = match *ty {
            "string[]" => {
                prop["items"] = obj! {"type": "string"};
                "array".into()
            }
            t => t.into(),
        };
        p.insert(name.to_string(), prop);
    }
    obj! {
        "type": "object",
        "properties": p,
        "required": required,
        "additionalProperties": false,
        "$schema": "http://json-schema.org/draft-07/schema#",
    }
}

/// A string argument; wrong types are -32602 with the argument's name.
pub fn arg_str(
    args: &Map<String, Value>,
    name: &str,
    required: bool,
) -> Result<Option<String>, RpcError> {
    match args.get(name) {
        None | Some(Value::Null) if !required => Ok(None),
        None | Some(Value::Null) => Err(RpcError::invalid_params(format!(
            "missing required argument \"{name}\""
        ))),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(RpcError::invalid_params(format!(
            "argument \"{name}\" must be a string"
        ))),
    }
}

/// A boolean argument with its default.
pub fn arg_bool(args: &Map<String, Value>, name: &str, default: bool) -> Result<bool, RpcError> {
    match args.get(name) {
        None | Some(Value::Null) => Ok(default),
        Some(Value::Bool(b)) => Ok(*b),
        Some(_) => Err(RpcError::invalid_params(format!(
            "argument \"{name}\" must be a boolean"
        ))),
    }
}

/// A tool result made of text items.
pub fn tool_texts(items: &[&str]) -> Value {
    obj! {"content": items.iter().map(|t| obj! {"type": "text", "text": *t}).collect::<Vec<_>>()}
}

/// A tool result carrying one JSON document as text.
pub fn tool_json(v: &Value) -> Value {
    tool_texts(&[&v.to_string()])
}

/// A failure while running a tool: a result with isError, not a JSON-RPC error
/// (ccide-protocol(7) §3).
pub fn tool_error(message: &str) -> Value {
    obj! {"content": vec![obj! {"type": "text", "text": message}], "isError": true}
}
