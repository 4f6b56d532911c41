//! One configured language server: the documents ccide keeps open in it (their text and
//! version, which ccide owns), the LSP conversation (initialize, the server's requests, document
//! sync, requests made on behalf of others), its process's life through the supervisor, and the
//! hand-over of final results (decided by `finality`) to the sink.
//!
//! All state sits behind one mutex. The driver thread (`LangServers`) hands in what the process
//! said (`handle`) and runs time-driven transitions (`tick_if_due`); callers take the lock
//! briefly for their own requests. Nothing waits on a process or a file under it: messages go
//! to the process's write queue, files are read before it is taken. What the lock decided to
//! hand out (final results, answers, the server's requests for someone else) is handed out
//! after it is released (`finish`); to keep final results in order, `finish` takes
//! `delivering` before it lets go, so it may wait there for another thread's sink (the store
//! writes each result to disk, outside the lock getDiagnostics answers from).
//!
//! - `state`: what sits behind the lock (`State`, its documents and requests pending), the
//!   `Server` and `Ticket` themselves, their configuration and callbacks;
//! - `positions`: positions converted between UTF-16 and the server's encoding;
//! - `requests`: what is sent to the server, the requests pending and their answers (pulls,
//!   requests on others' behalf, failed when the process exits), and the server's requests;
//! - `lifecycle`: start, initialize, ready, stop and exit (the process itself is the
//!   supervisor's);
//! - `documents`: the documents, their versions and texts, opened, changed and closed, and the
//!   `Ticket`s waited on;
//! - `status`: what `ccide status` shows of it;
//! - here, the driver's side: what the process said, what is due, and the hand-over.

mod documents;
mod lifecycle;
mod positions;
mod requests;
mod state;
mod status;

use std::sync::{Arc, MutexGuard};
use std::time::Instant;

use serde_json::Value;

use crate::langservers::supervisor::{Event, Phase};
use crate::lsp::connection::Received;
use crate::rpc;
use positions::to_utf16;
#[cfg(test)]
pub use state::OnAnswer;
pub use state::{Config, Inbound, Server, ServerRequest, Sink, Ticket};
use state::{Effect, Effects, State};

impl Server {
    /// For the driver: what the process `run` reported.
    pub fn handle(self: &Arc<Self>, run: u64, event: Event) {
        let mut st = self.lock();
        if st.run != run {
            return;
        }
        let mut effects = Vec::new();
        match event {
            Event::Received(r) => self.received(&mut st, r, &mut effects),
            Event::Exited(how) => self.process_exited(&mut st, &how, &mut effects),
        }
        self.advance_and_finish(st, effects, false);
    }

    /// For the driver: runs what is due by `now`; returns when to come back.
    pub fn tick_if_due(self: &Arc<Self>, now: Instant) -> Option<Instant> {
        let st = self.lock();
        match st.due {
            Some(t) if t <= now => self.advance_and_finish(st, Vec::new(), false),
            due => due,
        }
    }

    /// Runs the transitions due now, hands out what was decided, and records when to look
    /// again (waking the driver if the caller is not the driver and that is sooner than the
    /// driver would look: it looks at `due` at the latest, and a later one it finds then).
    fn advance_and_finish(
        self: &Arc<Self>,
        mut st: MutexGuard<'_, State>,
        mut effects: Effects,
        wake: bool,
    ) -> Option<Instant> {
        let next = self.advance(&mut st, &mut effects);
        let sooner = next.is_some_and(|n| st.due.is_none_or(|d| n < d));
        st.due = next;
        if wake && sooner {
            self.inbox.push(Inbound::Wake);
        }
        self.finish(st, effects);
        next
    }

    fn advance(self: &Arc<Self>, st: &mut State, effects: &mut Effects) -> Option<Instant> {
        let now = Instant::now();
        let mut next: Option<Instant> = None;
        let mut due = |t: Instant| next = Some(next.map_or(t, |n| n.min(t)));
        if st.closed {
            return None;
        }
        match st.life.phase {
            Phase::Starting if st.life.killed_because.is_none() => {
                let limit = st.life.started + self.cfg.init_timeout;
                if now >= limit {
                    // Its exit then counts as a crash.
                    let e = format!(
                        "no answer to initialize within {}",
                        crate::text::human_duration(self.cfg.init_timeout)
                    );
                    crate::log::warn!("language server {}: {e}; killing it", self.name);
                    st.life.killed_because = Some(e);
                    if let Some(p) = &st.process {
                        p.kill();
                    }
                } else {
                    due(limit);
                }
            }
            Phase::Crashed if !st.docs.is_empty() => {
                if now >= st.life.retry_at {
                    st.life.restarts += 1;
                    self.start(st, effects);
                    if st.life.phase == Phase::Starting {
                        due(st.life.started + self.cfg.init_timeout);
                    }
                } else {
                    due(st.life.retry_at);
                }
            }
            Phase::Running => {
                let step = st.fin.tick(now);
                if !step.finals.is_empty() {
                    // Those waiting in `loaded` are woken by `finish`, which always follows.
                    st.delivered = true;
                    st.life.delivering = true;
                }
                effects.extend(step.finals.into_iter().map(Effect::Final));
                for pull in step.pulls {
                    self.send_pull(st, &pull.path, pull.id);
                }
                if let Some(t) = step.next {
                    due(t);
                }
            }
            _ => {}
        }
        // A crashed server nobody asked anything of for that long stays down too; one in which
        // someone holds a document stays up.
        let held = st.docs.values().any(|d| !d.holders.is_empty());
        if matches!(
            st.life.phase,
            Phase::Starting | Phase::Running | Phase::Crashed
        ) && !held
        {
            let idle_end = st.last_used + self.cfg.idle;
            if now >= idle_end {
                let why = format!("unused for {}", crate::text::human_duration(self.cfg.idle));
                self.stop(st, &why);
            } else {
                due(idle_end);
            }
        }
        next
    }

    /// Wakes waiters, then hands out what was decided without the state lock: final results
    /// in order (under `delivering`), then answers and the server's requests (which may call
    /// back into this server).
    fn finish(&self, st: MutexGuard<'_, State>, effects: Effects) {
        self.cv.notify_all();
        if effects.is_empty() {
            return;
        }
        let order = self.delivering.lock().unwrap_or_else(|e| e.into_inner());
        drop(st);
        let mut rest = Vec::new();
        for e in effects {
            match e {
                Effect::Final(f) => {
                    crate::log::debug!(
                        "{}: {} final diagnostic(s) for {} (version {})",
                        self.name,
                        f.items.len(),
                        f.path.display(),
                        f.version
                    );
                    (self.sink)(&self.name, f);
                }
                other => rest.push(other),
            }
        }
        drop(order);
        for e in rest {
            match e {
                Effect::Answer(on_answer, answer) => on_answer(answer),
                Effect::Request(req) => {
                    let handler = self
                        .on_request
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .clone();
                    // Given back, or nobody registered: dropped, it gets ccide's own answer.
                    if let Some(h) = handler {
                        let _ = h(req);
                    }
                }
                Effect::Final(_) => {}
            }
        }
    }

    fn received(&self, st: &mut State, r: Received, effects: &mut Effects) {
        if st.process.is_none() {
            return;
        }
        match r {
            Received::Message(rpc::Message::Request(r)) => self.on_request_from(st, r, effects),
            Received::Message(rpc::Message::Notification(n)) => {
                self.on_notification(st, &n.method, n.params)
            }
            Received::Message(rpc::Message::Response(r)) => self.on_response(st, r, effects),
            Received::Malformed(e) => {
                crate::log::debug!("{}: invalid message: {}", self.name, e["error"]["message"])
            }
            Received::Stderr(line) => {
                crate::log::debug!("{}: {line}", self.name);
                st.life.stderr(&line);
            }
            Received::Closed(why) => {
                if let Some(why) = why {
                    crate::log::warn!("language server {}: {why}", self.name);
                    st.life.killed_because.get_or_insert(why);
                }
            }
        }
    }

    fn on_notification(&self, st: &mut State, method: &str, mut params: Value) {
        match method {
            "textDocument/publishDiagnostics" => {
                if st.fin.source().pulled() {
                    return;
                }
                let Some(path) = params["uri"]
                    .as_str()
                    .and_then(|u| crate::files::uri_path(u, true))
                else {
                    return;
                };
                let Some(d) = st.docs.get(&path).filter(|d| d.open) else {
                    return;
                };
                let mut items = match params["diagnostics"].take() {
                    Value::Array(a) => a,
                    _ => Vec::new(),
                };
                to_utf16(&mut items, &d.text, st.enc);
                crate::log::debug!(
                    "{}: published {} item(s) for {} (version {}, sent {})",
                    self.name,
                    items.len(),
                    path.display(),
                    params["version"],
                    d.version
                );
                st.fin
                    .pushed(&path, params["version"].as_i64(), items, Instant::now());
            }
            "$/progress" => {
                let token = params["token"].to_string();
                match params["value"]["kind"].as_str() {
                    Some("begin") => st.fin.progress(token, true, Instant::now()),
                    Some("end") => st.fin.progress(token, false, Instant::now()),
                    _ => {}
                }
            }
            "window/logMessage" | "window/showMessage" => {
                let text = params["message"].as_str().unwrap_or_default();
                if method == "window/showMessage" && params["type"] == 1 {
                    crate::log::warn!("language server {}: {text}", self.name);
                } else {
                    crate::log::debug!("{}: {text}", self.name);
                }
            }
            _ => {}
        }
    }
}
