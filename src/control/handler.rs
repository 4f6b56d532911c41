//! The answer to each control command (ccide-protocol(7) §9.2), from the shared state. Every
//! connection is answered here, a plain one and an attached editor session alike; a session
//! only adds that the files it opens, buffers and selects are held for it (see `editors`).

use std::path::PathBuf;

use serde_json::Value;

use super::protocol::{ExecAction, Request, Span, WorkspaceOp, failure};
use crate::diagnostics::parse::Format;
use crate::json::{self, obj};
use crate::state::State;
use crate::state::diagnostics;
use crate::state::editor::{self, selection_payload};

/// Answers one request. `session` is the connection's editor session, if it attached one.
/// `attach` and `events` change the connection itself, so the connection loop answers them
/// (`server`); here they are refused.
pub fn handle(state: &State, session: Option<u64>, req: Request) -> Value {
    let cwd = |c: &Option<String>| PathBuf::from(c.as_deref().unwrap_or(""));
    match req {
        Request::Status => obj! {"ok": true, "status": state.status()},
        Request::DiffList => {
            obj! {"ok": true, "diffs": state.diff_list(), "settled": state.diffs.settled_verdicts()}
        }
        Request::DiffFind { target, cwd: c } => {
            match state.diffs.find(target.as_deref(), &cwd(&c)) {
                Ok(d) => obj! {"ok": true, "diff": d},
                Err(e) => obj! {"ok": false, "error": e.message(), "kind": e.kind()},
            }
        }
        Request::DiffSettle {
            target,
            accept,
            content,
            cwd: c,
            verdict,
        } => diff_settle(state, target.as_deref(), accept, content, &cwd(&c), verdict),
        Request::Verdicts {
            path,
            pids,
            delivered,
        } => verdicts(state, path, pids, &delivered),
        r @ (Request::Record { .. } | Request::Changes { .. } | Request::ChangeDecide { .. }) => {
            review(state, r)
        }
        // A symlink named like the file, beside `proposed`, so the editor picks the file's
        // language for the proposal (and attaches `ccide lsp` to it).
        Request::DiffView { target } => match state.diffs.proposal_view(target.as_deref()) {
            Ok(view) => obj! {"ok": true, "path": json::path(&view)},
            Err(e) => failure(&e),
        },
        Request::Select {
            path,
            span,
            text,
            session: pick,
        } => match select(state, session, &path, span, text, pick) {
            // The editor sends its selection again as the cursor moves and when it reconnects:
            // one lost by a restart is not news, unlike a `ccide select`.
            Ok(v) if matches!(span, Span::Exact(..)) => v,
            r => persisted(state, r),
        },
        Request::Mention {
            path,
            start,
            end,
            session: pick,
        } => mention(state, &path, start, end, pick).unwrap_or_else(|e| failure(&e)),
        Request::Open { paths } => open_request(state, session, &paths),
        Request::Close { paths, discard } => close_request(state, session, paths, discard),
        Request::Buffer { path, content } => buffer(state, session, &path, content),
        Request::Diagnostics { paths } => diagnostics_of(state, paths),
        Request::DiagnosticsImport {
            text,
            format,
            cwd: c,
        } => {
            let format = format
                .as_deref()
                .and_then(Format::from_name)
                .unwrap_or(Format::Auto);
            diagnostics::imported(&state.diagnostics.import(&text, format, &cwd(&c)))
        }
        Request::DiagnosticsList => diagnostics_list(state),
        Request::DiagnosticsClear { path } => diagnostics_clear(state, path),
        Request::Exec { action, target } => exec(state, action, target.as_deref()),
        Request::Workspace { op, path } => workspace(state, op, path),
        Request::Attach { .. } => failure(&match session {
            Some(id) => format!("this connection is already editor session {id}"),
            None => "attach starts an editor session on a connection of its own".into(),
        }),
        Request::Events => failure("events needs a connection of its own"),
        Request::Lsp(_) => failure("lsp needs a connection of its own"),
    }
}

/// `diff settle`: accepts or rejects a proposal as the user, with the content they edited it
/// to, if any, and the review's verdict (ccide-protocol(7) §5.5).
fn diff_settle(
    state: &State,
    target: Option<&str>,
    accept: bool,
    content: Option<String>,
    cwd: &std::path::Path,
    verdict: Option<Value>,
) -> Value {
    if let Some(content) = content
        && let Err(e) = state.diffs.edit_proposal(target, &content)
    {
        return failure(&e);
    }
    let clients = state.client_infos();
    let pid_of = |id: u64| clients.iter().find(|c| c.id == id).and_then(|c| c.pid);
    match state
        .diffs
        .settle_with_verdict(target, accept, cwd, verdict, &pid_of)
    {
        Ok(d) => obj! {"ok": true, "diff": d},
        Err(e) => obj! {"ok": false, "error": e.message(), "kind": e.kind()},
    }
}

/// `verdicts`: what the user said of settled diffs and the model was not told yet, after
/// forgetting those it was told (`delivered`).
fn verdicts(
    state: &State,
    path: Option<String>,
    pids: Option<Vec<i64>>,
    delivered: &[String],
) -> Value {
    state.diffs.forget_verdicts(delivered);
    let path = match path.map(|p| state.resolve(&p)).transpose() {
        Ok(p) => p,
        Err(e) => return failure(&e),
    };
    let query = crate::state::diffs::VerdictQuery { path, pids };
    obj! {"ok": true, "verdicts": state.diffs.verdicts(&query)}
}

/// `record`, `changes` and `change.decide`: review after the fact (ccide-protocol(7) §15).
fn review(state: &State, req: Request) -> Value {
    let c = &state.recorded;
    match req {
        Request::Record {
            event,
            session,
            call,
            tool,
            path,
        } => record(state, &event, &session, call, tool, path),
        Request::Changes {
            session,
            turn,
            all,
            content,
        } => {
            let which = crate::state::changes::Which {
                session,
                turn: turn.map(|t| t as u64),
                all,
            };
            obj! {"ok": true, "changes": c.list(&which, content)}
        }
        Request::ChangeDecide {
            id,
            hunks,
            undo,
            why,
            part,
            rewrite,
        } => {
            use crate::state::changes::Verdict;
            let write = |p: &std::path::Path, b: Option<&[u8]>| match b {
                Some(b) => state.write_file(p, b),
                None => state.workspaces.remove(p),
            };
            if (part.is_some() || rewrite.is_some()) && hunks.len() != 1 {
                return failure("part and rewrite name one hunk");
            }
            let verdict = match rewrite {
                Some(text) => Verdict::Rewrite(
                    crate::textdiff::lines(text.as_bytes())
                        .iter()
                        .map(|l| l.to_vec())
                        .collect(),
                ),
                None if undo => Verdict::Undo,
                None => Verdict::Keep,
            };
            let hunks: Vec<(usize, usize)> =
                hunks.iter().map(|&h| (h, part.unwrap_or(0))).collect();
            let r = c.decide(
                &state.workspaces,
                &write,
                id as u64,
                &hunks,
                &verdict,
                why.as_deref(),
            );
            r.map_or_else(
                |e| failure(&e),
                |c| {
                    let file = c["file"].clone();
                    state
                        .events
                        .emit(obj! {"event": "change_decided", "id": id, "file": file});
                    obj! {"ok": true, "change": c}
                },
            )
        }
        _ => Value::Null,
    }
}

/// `record`: what a hook of ccide's plugin saw, answered with what the model is to be told,
/// and for `stop` whether the turn waits for a review.
fn record(
    state: &State,
    event: &str,
    session: &str,
    call: Option<String>,
    tool: Option<String>,
    path: Option<String>,
) -> Value {
    let c = &state.recorded;
    let ws = &state.workspaces;
    let call = call.unwrap_or_default();
    let told = match event {
        "prompt" => c.prompt(ws, session),
        "pre" => {
            let file = path.map(|p| state.resolve(&p));
            if let Some(Err(e)) = file {
                return failure(&e);
            }
            // A command may change any file: the open tabs are known too.
            let tabs: Vec<PathBuf> = match file {
                None => state.editor.tabs().into_iter().map(|t| t.path).collect(),
                Some(_) => Vec::new(),
            };
            c.before(ws, &call, file.and_then(Result::ok), &tabs);
            Vec::new()
        }
        "post" => {
            let (told, recorded) = c.after(ws, session, &call, tool.as_deref().unwrap_or(""));
            for (id, file) in recorded {
                state
                    .events
                    .emit(obj! {"event": "change_recorded", "id": id, "file": file});
            }
            told
        }
        "read" => {
            if let Some(Ok(file)) = path.map(|p| state.resolve(&p)) {
                c.seen(ws, &file);
            }
            Vec::new()
        }
        "stop" => Vec::new(),
        other => return failure(&format!("unknown record event '{other}'")),
    };
    let undecided = if event == "stop" {
        c.undecided(session)
    } else {
        0
    };
    // A turn held for review ends with what the user undid.
    let told = match event == "stop" && c.settings.gate && undecided == 0 {
        true => c.tell(ws, session),
        false => told,
    };
    obj! {"ok": true, "told": told, "gate": c.settings.gate, "undecided": undecided}
}

/// `open`: opens files in the editor model, held for the session, and runs their checks.
fn open_request(state: &State, session: Option<u64>, paths: &[String]) -> Value {
    let r = open(state, paths);
    hold(state, session, paths, true, &r);
    if r.is_ok() {
        for p in paths.iter().filter_map(|p| state.resolve(p).ok()) {
            state.check_open(&p);
        }
    }
    persisted(state, r)
}

/// `close`: closes files in the editor model. A file that another editor session holds too
/// stays open, unsaved content and all: a document is closed when its last holder closes it.
fn close_request(state: &State, session: Option<u64>, paths: Vec<String>, discard: bool) -> Value {
    let (elsewhere, paths): (Vec<String>, Vec<String>) = paths.into_iter().partition(|p| {
        session.is_some_and(|id| {
            state
                .resolve(p)
                .is_ok_and(|p| state.editor.held_by_other(id, &p))
        })
    });
    let mut r = close(state, &paths, discard);
    hold(state, session, &paths, false, &r);
    hold(state, session, &elsewhere, false, &Ok(Value::Null));
    if let Ok(v) = &mut r
        && !elsewhere.is_empty()
    {
        v["held_elsewhere"] = json::paths(&resolve_all(state, &elsewhere).unwrap_or_default());
    }
    persisted(state, r)
}

/// `buffer`: a file's unsaved content, or (none) that it was saved. Sent as the editor types
/// (debounced): the path is resolved once.
fn buffer(state: &State, session: Option<u64>, path: &str, content: Option<String>) -> Value {
    let r = state.resolve(path).map(|p| {
        let saved = content.is_none();
        state.editor.set_document(&p, content);
        state.text_changed(&p);
        // Saved: the file changed on disk, and its checks run again.
        if saved && state.editor.is_open(&p) {
            state.check_open(&p);
        }
        if let Some(id) = session {
            state.editor.hold(id, &p, true);
        }
        obj! {"ok": true, "path": json::path(&p)}
    });
    persisted(state, r)
}

/// `diagnostics PATH..`: each file's diagnostics in wire form, keyed by the path as given.
fn diagnostics_of(state: &State, paths: Vec<String>) -> Value {
    let mut files = serde_json::Map::new();
    for raw in paths {
        if let Ok(p) = state.resolve(&raw) {
            let ds = state.diagnostics.store.get(&p);
            files.insert(raw, diagnostics::items(&ds));
        }
    }
    obj! {"ok": true, "files": files}
}

/// `diagnostics list`: every file with diagnostics, in wire form and as lines to print.
fn diagnostics_list(state: &State) -> Value {
    let files: Vec<Value> = state
        .diagnostics
        .store
        .all()
        .iter()
        .map(|(p, ds)| {
            obj! {"uri": crate::files::file_url(p), "path": json::path(p),
            "diagnostics": diagnostics::items(ds),
            "lines": ds.iter().map(|d| diagnostics::describe(p, d)).collect::<Vec<_>>()}
        })
        .collect();
    obj! {"ok": true, "files": files}
}

/// `diagnostics clear [PATH]`: forgets one file's diagnostics, or all.
fn diagnostics_clear(state: &State, path: Option<String>) -> Value {
    let only = match path.map(|p| state.resolve(&p)).transpose() {
        Ok(only) => only,
        Err(e) => return failure(&e),
    };
    let cleared = state.diagnostics.clear(only.as_deref());
    obj! {"ok": true, "cleared": json::paths(&cleared)}
}

/// `exec list|approve|deny`: the commands waiting for the user, or the user's decision on one.
fn exec(state: &State, action: ExecAction, target: Option<&str>) -> Value {
    match action {
        ExecAction::List => {
            let (mode, requests) = state.exec.waiting();
            obj! {"ok": true, "mode": mode, "requests": requests}
        }
        ExecAction::Approve | ExecAction::Deny => {
            match state.exec.decide(target, action == ExecAction::Approve) {
                Ok(r) => obj! {"ok": true, "request": r},
                Err(e) => failure(&e),
            }
        }
    }
}

/// `workspace list|add|remove`: the workspaces, after adding or removing one.
fn workspace(state: &State, op: WorkspaceOp, path: Option<String>) -> Value {
    let path = PathBuf::from(path.unwrap_or_default());
    match op {
        WorkspaceOp::List => {
            obj! {"ok": true, "workspaces": json::paths(&state.workspaces.list())}
        }
        WorkspaceOp::Add | WorkspaceOp::Remove => {
            match state.change_workspace(op == WorkspaceOp::Add, &path) {
                Ok(ws) => obj! {"ok": true, "workspaces": json::paths(&ws)},
                Err(e) => failure(&e),
            }
        }
    }
}

/// The answer to a command that changed the editor model, or a failure when the change could
/// not be saved: it holds only until the server restarts, and the user must know.
fn persisted(state: &State, r: Result<Value, String>) -> Value {
    match r {
        Ok(v) => match state.editor.save_error() {
            None => v,
            // Done all the same: `kind` tells an editor session not to take it for a refusal.
            Some(e) => {
                let mut f = failure(&format!(
                    "done, but not saved: {e}; the change is lost when the server restarts"
                ));
                f["kind"] = "not_saved".into();
                f
            }
        },
        Err(e) => failure(&e),
    }
}

/// Records that the editor session holds (or no longer holds) the files a command that
/// succeeded named: when the session ends, they are closed.
fn hold(
    state: &State,
    session: Option<u64>,
    paths: &[String],
    on: bool,
    r: &Result<Value, String>,
) {
    let Some(id) = session.filter(|_| r.is_ok()) else {
        return;
    };
    for p in paths.iter().filter_map(|p| state.resolve(p).ok()) {
        state.editor.hold(id, &p, on);
    }
}

fn select(
    state: &State,
    session: Option<u64>,
    path: &str,
    span: Span,
    text: Option<String>,
    pick: Option<String>,
) -> Result<Value, String> {
    let path = state.resolve(path)?;
    let payload = match span {
        Span::Lines(range) => {
            if path.is_dir() {
                return Err(format!(
                    "{} is a folder: a selection needs a file (a folder can be mentioned: ccide mention {})",
                    path.display(),
                    path.display()
                ));
            }
            if !path.is_file() {
                return Err(format!("File not found: {}", path.display()));
            }
            // Only the lines up to the selection's end are read (a log may be gigabytes).
            let last = range.end_line.max(range.start_line).unwrap_or(0);
            let content = state.first_lines(&path, last)?;
            editor::selection_for(&content, &path, range, text)?
        }
        // The editor's own positions and text: it may not even be saved yet.
        Span::Exact(start, end) => {
            selection_payload(&path, start, end, text.as_deref().unwrap_or(""))
        }
    };
    let mut answer = state.select(payload.clone(), pick.as_deref())?;
    if let Some(id) = session {
        state.editor.hold(id, &path, true);
    }
    answer["selection"] = payload;
    Ok(answer)
}

fn mention(
    state: &State,
    path: &str,
    start: Option<usize>,
    end: Option<usize>,
    pick: Option<String>,
) -> Result<Value, String> {
    let path = state.resolve(path)?;
    if !path.exists() {
        return Err(format!("File not found: {}", path.display()));
    }
    if path.is_dir() && start.is_some() {
        return Err(format!(
            "{} is a directory: mention it without lines",
            path.display()
        ));
    }
    let payload = editor::mention_payload(&path, start, end)?;
    // Held for a client being set up, or queued for the next one: not yet delivered.
    let mut answer = state.mention(payload.clone(), pick.as_deref())?;
    answer["mention"] = payload;
    Ok(answer)
}

fn resolve_all(state: &State, paths: &[String]) -> Result<Vec<PathBuf>, String> {
    paths.iter().map(|p| state.resolve(p)).collect()
}

fn open(state: &State, paths: &[String]) -> Result<Value, String> {
    let paths = resolve_all(state, paths)?;
    for p in &paths {
        if !p.is_file() {
            return Err(format!("File not found: {}", p.display()));
        }
    }
    for (i, p) in paths.iter().enumerate() {
        state.editor.open_tab(p, i + 1 == paths.len(), false);
    }
    Ok(obj! {"ok": true, "opened": json::paths(&paths)})
}

fn close(state: &State, paths: &[String], discard: bool) -> Result<Value, String> {
    let mut not_open = Vec::new();
    let mut kept = Vec::new();
    for p in resolve_all(state, paths)? {
        if !state.editor.close_tab(&p, discard) {
            not_open.push(p.clone());
        }
        if discard {
            state.text_changed(&p);
        }
        if state.editor.document(&p).is_some() {
            kept.push(p);
        }
    }
    Ok(obj! {"ok": true, "not_open": json::paths(&not_open), "kept_unsaved": json::paths(&kept)})
}
