//! The control protocol (ccide-protocol(7) §9): every command as one `Request` type, read from
//! and written to the JSON line, so the server and its clients (`ccide`'s commands, `ccide lsp`)
//! agree by construction. The framing pieces both halves share are here too.

use std::path::Path;

use serde_json::{Map, Value};

use crate::lsp::text::Pos;
use crate::state::editor::HumanRange;

/// Largest request line, its newline not counted (a `buffer` command carries a whole file).
pub const MAX_LINE: usize = 64 << 20;

/// One control command and its fields (ccide-protocol(7) §9.2). Paths are as the client
/// wrote them; the server confines them to the workspace folders.
#[derive(Clone, Debug, PartialEq)]
pub enum Request {
    Status,
    DiffList,
    DiffFind {
        target: Option<String>,
        cwd: Option<String>,
    },
    /// With `content`, the proposal is first replaced by it (the proposal as the user edited
    /// it in an editor, saved or not), then accepted or rejected.
    DiffSettle {
        target: Option<String>,
        accept: bool,
        content: Option<String>,
        cwd: Option<String>,
        /// What the review kept and dropped, and why (ccide-protocol(7) §5.5).
        verdict: Option<Value>,
    },
    /// The verdicts of settled diffs not yet told to the model: of one file, of the diffs of
    /// a CLI among `pids` (a hook's ancestors), or both (ccide-protocol(7) §9.2). Those whose
    /// ids are in `delivered` (the model was told) are forgotten first.
    Verdicts {
        path: Option<String>,
        pids: Option<Vec<i64>>,
        delivered: Vec<String>,
    },
    /// A hook of ccide's plugin saw a Claude Code event (ccide-protocol(7) §15): `prompt`
    /// (a turn begins), `pre` and `post` (around tool call `call`; `path` the file an edit
    /// names, none for a command), `read` (`path` a file Claude read), `stop` (the turn ends).
    Record {
        event: String,
        session: String,
        call: Option<String>,
        tool: Option<String>,
        path: Option<String>,
    },
    /// The recorded changes: every session's latest turn, or those of `session` (a prefix of
    /// its id), turn `turn`, or `all`; with `content`, each one's before and after text.
    Changes {
        session: Option<String>,
        turn: Option<usize>,
        all: bool,
        content: bool,
    },
    /// Keeps or undoes hunks (numbers from 1) of recorded change `id` (`change` on the wire),
    /// with a reason; with `part`, that part of the one hunk split; with `rewrite`, the user's
    /// lines in place of Claude's in the one hunk.
    ChangeDecide {
        id: usize,
        hunks: Vec<usize>,
        undo: bool,
        why: Option<String>,
        part: Option<usize>,
        rewrite: Option<String>,
    },
    /// The diff's proposal under a name ending like its file's, for an editor to open.
    DiffView {
        target: Option<String>,
    },
    Select {
        path: String,
        span: Span,
        /// The selected text; read from the document when a `Span::Lines` comes without it.
        text: Option<String>,
        /// The Claude Code session to tell, by id or pid (else those whose roots hold it).
        session: Option<String>,
    },
    Mention {
        path: String,
        start: Option<usize>,
        end: Option<usize>,
        session: Option<String>,
    },
    Open {
        paths: Vec<String>,
    },
    Close {
        paths: Vec<String>,
        discard: bool,
    },
    /// Unsaved content, or None to forget it.
    Buffer {
        path: String,
        content: Option<String>,
    },
    /// The stored diagnostics of a few files, keyed by the paths as given (an editor's open
    /// documents).
    Diagnostics {
        paths: Vec<String>,
    },
    DiagnosticsImport {
        text: String,
        /// A format name; an unknown one is detected (`auto`).
        format: Option<String>,
        cwd: Option<String>,
    },
    DiagnosticsList,
    DiagnosticsClear {
        path: Option<String>,
    },
    Exec {
        action: ExecAction,
        target: Option<String>,
    },
    Workspace {
        op: WorkspaceOp,
        path: Option<String>,
    },
    /// Makes the connection an editor session (`ccide lsp`): the files it opens, buffers and
    /// selects are held until the connection ends.
    Attach {
        pid: Option<u64>,
        editor: Option<String>,
    },
    /// Makes the connection the event stream (§9.3); it has no answer.
    Events,
    /// Makes the connection an LSP stream for one LSP client (a CLI session through
    /// `ccide lsp-bridge`, or `ccide lsp --navigation`): after the answer, both directions
    /// carry Content-Length framed LSP messages.
    Lsp(LspClient),
}

/// What an LSP client says of itself when it turns a connection into an LSP stream (`lsp`).
#[derive(Clone, Debug, PartialEq)]
pub struct LspClient {
    /// Its root folder (the CLI's project directory; for `ccide lsp`, the server's first
    /// workspace folder), absolute; in a workspace folder.
    pub root: String,
    /// Its name and version as it gave them (`clientInfo` of its `initialize`), for the log.
    pub client: Option<String>,
    /// The process on the other end (the bridge, or `ccide lsp`).
    pub pid: Option<u64>,
    /// The file extensions it will ask about (`.ts`): the server that covers them answers
    /// its `initialize`. Empty: not said.
    pub extensions: Vec<String>,
    /// Whether it said it wants `textDocument/publishDiagnostics` (the bridge's
    /// `--no-diagnostics` says not). Logged only: serve publishes to no LSP client whatever
    /// it says, `getDiagnostics` being the one source (ccide-protocol(7) §11.8).
    pub diagnostics: bool,
}

/// What a `select` selects.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Span {
    /// As people write it (`ccide select`): 1-based lines and columns counted in characters,
    /// the end column included, every part optional.
    Lines(HumanRange),
    /// As an editor has it: 0-based lines and UTF-16 code units (what VS Code sends), with
    /// the editor's text.
    Exact(Pos, Pos),
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum ExecAction {
    List,
    Approve,
    Deny,
}

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum WorkspaceOp {
    List,
    Add,
    Remove,
}

impl Request {
    /// The command's name on the wire (`cmd`).
    pub fn name(&self) -> &'static str {
        match self {
            Request::Status => "status",
            Request::DiffList => "diff.list",
            Request::DiffFind { .. } => "diff.find",
            Request::DiffSettle { .. } => "diff.settle",
            Request::Verdicts { .. } => "verdicts",
            Request::DiffView { .. } => "diff.view",
            Request::Record { .. } => "record",
            Request::Changes { .. } => "changes",
            Request::ChangeDecide { .. } => "change.decide",
            Request::Select { .. } => "select",
            Request::Mention { .. } => "mention",
            Request::Open { .. } => "open",
            Request::Close { .. } => "close",
            Request::Buffer { .. } => "buffer",
            Request::Diagnostics { .. } => "diagnostics",
            Request::DiagnosticsImport { .. } => "diagnostics.import",
            Request::DiagnosticsList => "diagnostics.list",
            Request::DiagnosticsClear { .. } => "diagnostics.clear",
            Request::Exec { .. } => "exec",
            Request::Workspace { .. } => "workspace",
            Request::Attach { .. } => "attach",
            Request::Events => "events",
            Request::Lsp(_) => "lsp",
        }
    }

    /// Reads a request line's JSON. Fields it does not know (`id` among them) are ignored; a
    /// field of the wrong type is refused by name. Takes the value to move the big strings
    /// (a `buffer`'s file) out of it rather than copy them.
    pub fn parse(v: Value) -> Result<Request, String> {
        let mut f = Fields {
            map: match v {
                Value::Object(m) => m,
                _ => Map::new(),
            },
            error: None,
        };
        let cmd = match f.take("cmd") {
            Some(Value::String(s)) => s,
            _ => String::new(),
        };
        let request = match cmd.as_str() {
            "status" => Request::Status,
            "diff.list" => Request::DiffList,
            "diff.find" => Request::DiffFind {
                target: f.string("target"),
                cwd: f.string("cwd"),
            },
            "diff.settle" => diff_settle(&mut f),
            "verdicts" => Request::Verdicts {
                path: f.string("path"),
                pids: f.pids("pids"),
                delivered: f.optional_strings("delivered"),
            },
            "record" => Request::Record {
                event: f.need_string("event"),
                session: f.need_string("session"),
                call: f.string("call"),
                tool: f.string("tool"),
                path: f.string("path"),
            },
            "changes" => Request::Changes {
                session: f.string("session"),
                turn: f.count("turn"),
                all: f.flag("all"),
                content: f.flag("content"),
            },
            "change.decide" => Request::ChangeDecide {
                id: f.count("change").unwrap_or(usize::MAX),
                hunks: f.counts("hunks"),
                undo: f.flag("undo"),
                why: f.string("why"),
                part: f.count("part"),
                rewrite: f.string("rewrite"),
            },
            "diff.view" => Request::DiffView {
                target: f.string("target"),
            },
            // `selection` is what `ccide lsp` sent before both forms were one command.
            "select" | "selection" => select_request(&mut f),
            "mention" => Request::Mention {
                path: f.need_string("path"),
                start: f.count("start"),
                end: f.count("end"),
                session: f.string("session"),
            },
            "open" => Request::Open {
                paths: f.strings("paths"),
            },
            "close" => Request::Close {
                paths: f.strings("paths"),
                discard: f.flag("discard"),
            },
            "buffer" => Request::Buffer {
                path: f.need_string("path"),
                content: f.string("content"),
            },
            "diagnostics" => Request::Diagnostics {
                paths: f.strings("paths"),
            },
            "diagnostics.import" => Request::DiagnosticsImport {
                text: f.string("text").unwrap_or_default(),
                format: f.string("format"),
                cwd: f.string("cwd"),
            },
            "diagnostics.list" => Request::DiagnosticsList,
            "diagnostics.clear" => Request::DiagnosticsClear {
                path: f.string("path"),
            },
            "exec" => exec_request(&mut f)?,
            "workspace" => workspace_request(&mut f)?,
            "attach" => Request::Attach {
                pid: f.count("pid").map(|p| p as u64),
                editor: f.string("editor"),
            },
            "events" => Request::Events,
            "lsp" => Request::Lsp(LspClient {
                root: f.need_string("root"),
                client: f.string("client"),
                pid: f.count("pid").map(|p| p as u64),
                extensions: f.optional_strings("extensions"),
                diagnostics: f.flag_or("diagnostics", true),
            }),
            other => {
                return Err(format!(
                    "unknown control command '{other}' (is ccide up to date?)"
                ));
            }
        };
        match f.error {
            Some(e) => Err(e),
            None => Ok(request),
        }
    }

    /// The request as JSON, absent fields left out.
    #[cfg(test)]
    pub fn to_json(&self) -> Value {
        self.members(true)
    }

    /// `to_json`, without `content` unless `with_content`.
    fn members(&self, with_content: bool) -> Value {
        let mut m = Map::new();
        m.insert("cmd".into(), self.name().into());
        let mut put = |k: &str, v: Value| {
            if !v.is_null() {
                m.insert(k.into(), v);
            }
        };
        let opt = |s: &Option<String>| s.clone().map_or(Value::Null, Value::String);
        let list = |ps: &[String]| Value::from(ps.to_vec());
        match self {
            Request::Status | Request::DiffList | Request::DiagnosticsList | Request::Events => {}
            Request::DiffFind { target, cwd } => {
                put("target", opt(target));
                put("cwd", opt(cwd));
            }
            Request::DiffSettle {
                target,
                accept,
                content,
                cwd,
                verdict,
            } => {
                put("target", opt(target));
                put("accept", (*accept).into());
                if with_content {
                    put("content", opt(content));
                }
                put("cwd", opt(cwd));
                put("verdict", verdict.clone().unwrap_or(Value::Null));
            }
            Request::Verdicts {
                path,
                pids,
                delivered,
            } => {
                put("path", opt(path));
                put("pids", pids.clone().map_or(Value::Null, Value::from));
                if !delivered.is_empty() {
                    put("delivered", list(delivered));
                }
            }
            Request::DiffView { target } => put("target", opt(target)),
            Request::Record { .. } | Request::Changes { .. } | Request::ChangeDecide { .. } => {
                for (k, v) in self.review_fields() {
                    put(k, v);
                }
            }
            Request::Select { .. } | Request::Mention { .. } => {
                for (k, v) in self.routed_fields() {
                    put(k, v);
                }
            }
            Request::Open { paths } | Request::Diagnostics { paths } => put("paths", list(paths)),
            Request::Close { paths, discard } => {
                put("paths", list(paths));
                put("discard", (*discard).into());
            }
            Request::Buffer { path, content } => {
                put("path", path.as_str().into());
                if with_content {
                    put("content", opt(content));
                }
            }
            Request::DiagnosticsImport { text, format, cwd } => {
                put("text", text.as_str().into());
                put("format", opt(format));
                put("cwd", opt(cwd));
            }
            Request::DiagnosticsClear { path } => put("path", opt(path)),
            Request::Exec { action, target } => {
                let action = match action {
                    ExecAction::List => "list",
                    ExecAction::Approve => "approve",
                    ExecAction::Deny => "deny",
                };
                put("action", action.into());
                put("target", opt(target));
            }
            Request::Workspace { op, path } => {
                let op = match op {
                    WorkspaceOp::List => "list",
                    WorkspaceOp::Add => "add",
                    WorkspaceOp::Remove => "remove",
                };
                put("op", op.into());
                put("path", opt(path));
            }
            Request::Attach { pid, editor } => {
                put("pid", pid.map_or(Value::Null, Value::from));
                put("editor", opt(editor));
            }
            Request::Lsp(c) => {
                put("root", c.root.as_str().into());
                put("client", opt(&c.client));
                put("pid", c.pid.map_or(Value::Null, Value::from));
                if !c.extensions.is_empty() {
                    put("extensions", list(&c.extensions));
                }
                if !c.diagnostics {
                    put("diagnostics", false.into());
                }
            }
        }
        Value::Object(m)
    }

    /// The fields of `select` and `mention`, which go to the sessions whose folders hold `path`.
    fn routed_fields(&self) -> Vec<(&'static str, Value)> {
        let opt = |s: &Option<String>| s.clone().map_or(Value::Null, Value::String);
        let count = |n: &Option<usize>| n.map_or(Value::Null, Value::from);
        match self {
            Request::Select {
                path,
                span,
                text,
                session,
            } => {
                let mut v = vec![("path", path.as_str().into())];
                v.extend(span_fields(span));
                v.extend([("text", opt(text)), ("session", opt(session))]);
                v
            }
            Request::Mention {
                path,
                start,
                end,
                session,
            } => vec![
                ("path", path.as_str().into()),
                ("start", count(start)),
                ("end", count(end)),
                ("session", opt(session)),
            ],
            _ => Vec::new(),
        }
    }

    /// The fields of `record`, `changes` and `change.decide`.
    fn review_fields(&self) -> Vec<(&'static str, Value)> {
        let opt = |s: &Option<String>| s.clone().map_or(Value::Null, Value::String);
        match self {
            Request::Record {
                event,
                session,
                call,
                tool,
                path,
            } => vec![
                ("event", event.as_str().into()),
                ("session", session.as_str().into()),
                ("call", opt(call)),
                ("tool", opt(tool)),
                ("path", opt(path)),
            ],
            Request::Changes {
                session,
                turn,
                all,
                content,
            } => vec![
                ("session", opt(session)),
                ("turn", turn.map_or(Value::Null, Value::from)),
                ("all", (*all).into()),
                ("content", (*content).into()),
            ],
            Request::ChangeDecide {
                id,
                hunks,
                undo,
                why,
                part,
                rewrite,
            } => vec![
                ("change", (*id).into()),
                ("hunks", hunks.clone().into()),
                ("undo", (*undo).into()),
                ("why", opt(why)),
                ("part", part.map_or(Value::Null, Value::from)),
                ("rewrite", opt(rewrite)),
            ],
            _ => Vec::new(),
        }
    }

    /// The request's line with `id` first, so that the server can name the request in its
    /// refusal even of a line too long to read (`leading_id`).
    /// A `content` (an edited proposal, megabytes of it) comes next, not copied, and escaped
    /// a word at a time rather than by serde_json's byte loop.
    pub fn line(&self, id: u64) -> String {
        let content = match self {
            Request::DiffSettle { content, .. } | Request::Buffer { content, .. } => {
                content.as_deref()
            }
            _ => None,
        };
        let rest = self.members(false).to_string();
        let mut line = String::with_capacity(rest.len() + content.map_or(0, str::len) + 40);
        line.push_str("{\"id\":");
        line.push_str(&id.to_string());
        line.push(',');
        if let Some(c) = content {
            line.push_str("\"content\":\"");
            crate::json::escape_into(&mut line, c);
            line.push_str("\",");
        }
        // `members` always holds `cmd`: the rest is `{"cmd":...}`.
        line.push_str(&rest[1..]);
        line.push('\n');
        line
    }
}

/// `select`: a range of lines and columns from 1, or exact positions with their text.
fn select_request(f: &mut Fields) -> Request {
    let path = f.need_string("path");
    let exact = (f.position("start"), f.position("end"));
    let text = f.string("text");
    let range = f.take("range");
    let span = match exact {
        (None, None) => Span::Lines(human_range(f, range)),
        (Some(start), Some(end)) if range.is_none() && text.is_some() => Span::Exact(start, end),
        _ => {
            f.refuse("select takes either range (lines and columns from 1) or start, end and text (positions from 0, in UTF-16 units)".into());
            Span::Lines(HumanRange::default())
        }
    };
    Request::Select {
        path,
        span,
        text,
        session: f.string("session"),
    }
}

fn exec_request(f: &mut Fields) -> Result<Request, String> {
    Ok(Request::Exec {
        action: match f.string("action").as_deref() {
            None | Some("list") => ExecAction::List,
            Some("approve") => ExecAction::Approve,
            Some("deny") => ExecAction::Deny,
            Some(other) => {
                return Err(format!(
                    "unknown exec action '{other}': expected list, approve or deny"
                ));
            }
        },
        target: f.string("target"),
    })
}

fn workspace_request(f: &mut Fields) -> Result<Request, String> {
    Ok(Request::Workspace {
        op: match f.string("op").as_deref() {
            Some("list") => WorkspaceOp::List,
            Some("add") => WorkspaceOp::Add,
            Some("remove") => WorkspaceOp::Remove,
            _ => return Err("workspace: expected add, remove or list".into()),
        },
        path: f.string("path"),
    })
}

/// A `select`'s span as its fields: `range`, or `start` and `end`.
fn span_fields(span: &Span) -> Vec<(&'static str, Value)> {
    match span {
        Span::Lines(r) => {
            let mut range = Map::new();
            for (k, v) in [
                ("start_line", r.start_line),
                ("start_col", r.start_col),
                ("end_line", r.end_line),
                ("end_col", r.end_col),
            ] {
                if let Some(v) = v {
                    range.insert(k.into(), v.into());
                }
            }
            vec![("range", Value::Object(range))]
        }
        Span::Exact(start, end) => {
            let at = |p: &Pos| Value::from(vec![p.line, p.character]);
            vec![("start", at(start)), ("end", at(end))]
        }
    }
}

/// The `id` a line starts with (`{"id":7,...`), read without parsing the rest: all the server
/// can tell of a request line longer than it reads.
pub fn leading_id(line: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(&line[..line.len().min(64)])
        .unwrap_or_else(|e| std::str::from_utf8(&line[..e.valid_up_to()]).unwrap_or(""));
    let rest = s.trim_start().strip_prefix('{')?.trim_start();
    let rest = rest
        .strip_prefix("\"id\"")?
        .trim_start()
        .strip_prefix(':')?;
    let rest = rest.trim_start();
    let digits = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    // A number cut off by the 64 bytes read is not trusted.
    (digits > 0 && digits < rest.len())
        .then(|| rest[..digits].parse().ok())
        .flatten()
}

/// A failure answer (§9.1).
pub fn failure(message: &str) -> Value {
    let mut m = Map::new();
    m.insert("ok".into(), false.into());
    m.insert("error".into(), message.into());
    Value::Object(m)
}

fn human_range(f: &mut Fields, v: Option<Value>) -> HumanRange {
    let map = match v {
        None => return HumanRange::default(),
        Some(Value::Object(m)) => m,
        Some(_) => {
            f.refuse(bad("range", "an object"));
            return HumanRange::default();
        }
    };
    let mut r = Fields { map, error: None };
    let range = HumanRange {
        start_line: r.count("start_line"),
        start_col: r.count("start_col"),
        end_line: r.count("end_line"),
        end_col: r.count("end_col"),
    };
    if let Some(e) = r.error {
        f.refuse(e);
    }
    range
}

/// `diff.settle`'s fields.
fn diff_settle(f: &mut Fields) -> Request {
    Request::DiffSettle {
        target: f.string("target"),
        accept: f.flag("accept"),
        content: f.string("content"),
        cwd: f.string("cwd"),
        verdict: f.object("verdict"),
    }
}

fn bad(key: &str, what: &str) -> String {
    format!("bad {key}: expected {what}")
}

/// A request's fields, taken out one by one; null counts as absent. A field of the wrong type
/// reads as absent and is remembered in `error`, the first one only.
struct Fields {
    map: Map<String, Value>,
    error: Option<String>,
}

impl Fields {
    fn take(&mut self, key: &str) -> Option<Value> {
        self.map.remove(key).filter(|v| !v.is_null())
    }

    fn refuse(&mut self, why: String) {
        self.error.get_or_insert(why);
    }

    fn string(&mut self, key: &str) -> Option<String> {
        match self.take(key)? {
            Value::String(s) => Some(s),
            _ => {
                self.refuse(bad(key, "a string"));
                None
            }
        }
    }

    fn object(&mut self, key: &str) -> Option<Value> {
        match self.take(key)? {
            v @ Value::Object(_) => Some(v),
            _ => {
                self.refuse(bad(key, "an object"));
                None
            }
        }
    }

    fn need_string(&mut self, key: &str) -> String {
        let s = self.string(key);
        if s.is_none() {
            self.refuse(format!("missing {key}"));
        }
        s.unwrap_or_default()
    }

    fn flag(&mut self, key: &str) -> bool {
        self.flag_or(key, false)
    }

    fn flag_or(&mut self, key: &str, absent: bool) -> bool {
        match self.take(key) {
            None => absent,
            Some(Value::Bool(b)) => b,
            Some(_) => {
                self.refuse(bad(key, "true or false"));
                absent
            }
        }
    }

    fn count(&mut self, key: &str) -> Option<usize> {
        let v = self.take(key)?;
        let n = v.as_u64();
        if n.is_none() {
            self.refuse(bad(key, "a whole number"));
        }
        n.map(|n| n as usize)
    }

    fn strings(&mut self, key: &str) -> Vec<String> {
        let mut out = Vec::new();
        match self.take(key) {
            None => self.refuse(format!("missing {key}")),
            Some(Value::Array(a)) => {
                for v in a {
                    match v {
                        Value::String(s) => out.push(s),
                        _ => self.refuse(bad(key, "a list of strings")),
                    }
                }
            }
            Some(_) => self.refuse(bad(key, "a list of strings")),
        }
        out
    }

    /// A list of whole numbers.
    fn counts(&mut self, key: &str) -> Vec<usize> {
        let v = self.take(key).unwrap_or_default();
        let n: Option<Vec<usize>> = v
            .as_array()
            .and_then(|a| a.iter().map(|n| n.as_u64().map(|n| n as usize)).collect());
        n.unwrap_or_else(|| {
            self.refuse(bad(key, "a list of whole numbers"));
            Vec::new()
        })
    }

    /// A list of process ids, or None when absent.
    fn pids(&mut self, key: &str) -> Option<Vec<i64>> {
        let v = self.take(key)?;
        let pids: Option<Vec<i64>> = v
            .as_array()
            .and_then(|a| a.iter().map(Value::as_i64).collect());
        if pids.is_none() {
            self.refuse(bad(key, "a list of process ids"));
        }
        pids
    }

    /// `strings`, with absent (or null) read as empty.
    fn optional_strings(&mut self, key: &str) -> Vec<String> {
        match self.map.get(key) {
            None | Some(Value::Null) => Vec::new(),
            Some(_) => self.strings(key),
        }
    }

    /// `[line, character]`.
    fn position(&mut self, key: &str) -> Option<Pos> {
        let v = self.take(key)?;
        match (v[0].as_u64(), v[1].as_u64(), v.as_array().map(Vec::len)) {
            (Some(line), Some(character), Some(2)) => {
                let n = |v: u64| v.min(u32::MAX as u64) as u32;
                Some(Pos::new(n(line), n(character)))
            }
            _ => {
                self.refuse(bad(key, "[line, character]"));
                None
            }
        }
    }
}

/// The longest path a Unix socket address holds (`sun_path` is 108 bytes with its NUL).
const SUN_PATH_MAX: usize = 107;

/// Runs `f` on `path`, or, when the path is too long for a socket address (a long user and
/// project name under ~/.local/state), on the same file named through the directory opened
/// as `/proc/self/fd/N/NAME`, which is always short.
pub fn short_path<T>(
    path: &Path,
    f: impl FnOnce(&Path) -> std::io::Result<T>,
) -> std::io::Result<T> {
    if path.as_os_str().len() <= SUN_PATH_MAX {
        return f(path);
    }
    use std::os::fd::AsRawFd;
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return f(path);
    };
    let dir = std::fs::File::open(dir)?;
    let short = std::path::PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd())).join(name);
    f(&short)
}
