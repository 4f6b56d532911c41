//! The documents ccide keeps open in a server: their text and version (ccide owns them), re-read
//! from disk through the workspace's confinement when they changed, opened, changed and closed
//! (the least recently used, beyond the bound), held open for clients; and the `Ticket`s that
//! wait for a document's final result.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;

use super::state::{Doc, Effect, Gone, MAX_DOC_BYTES, MAX_GONE, Server, State, Ticket};
use crate::files::Stamp;
use crate::langservers::finality::Final;
use crate::langservers::supervisor::Phase;
use crate::rpc;

/// Why `update` has nothing to send of a file.
enum Unread {
    /// It is gone, or unreadable: its document is closed, and its diagnostics are now none.
    Gone,
    /// It is larger than a server is sent: left as it was.
    TooLarge,
}

impl Server {
    /// Tells the server about the current content of `path` (from disk, or `unsaved`) if it
    /// differs from what it has, starting it if needed, and returns what to wait on for the
    /// final result. None when the server is not usable, or the file is unreadable (then its
    /// diagnostics from this server are cleared).
    pub fn touch(self: &Arc<Self>, path: &Path, unsaved: Option<&str>) -> Option<Ticket> {
        self.update(path, unsaved, None, true)
    }

    /// For getDiagnostics {}: brings up to date what this server knows, not everything known
    /// elsewhere. Its documents cost a stat each when unchanged (and are not taken as wanted);
    /// a document it closed is opened again only if it changed since, or was closed before its
    /// result was final; a file it never had is not opened. Open documents go first, so a
    /// document opened again never pushes out one whose new result is awaited.
    pub fn refresh_known(
        self: &Arc<Self>,
        unsaved: &dyn Fn(&Path) -> Option<String>,
    ) -> Vec<Ticket> {
        let (open, gone): (Vec<PathBuf>, Vec<Gone>) = {
            let st = self.lock();
            if st.life.phase == Phase::Failed || st.closed {
                return Vec::new();
            }
            (st.docs.keys().cloned().collect(), st.gone.clone())
        };
        let mut tickets: Vec<Ticket> = Vec::new();
        for p in open {
            tickets.extend(self.update(&p, unsaved(&p).as_deref(), None, false));
        }
        for g in gone {
            let text = unsaved(&g.path);
            let same = match &text {
                Some(t) => g.disk.is_none() && g.hash == crate::text::hash(t.as_bytes()),
                None => g.disk.is_some() && g.disk == crate::files::stamp(&g.path),
            };
            if !(g.done && same) {
                tickets.extend(self.update(&g.path, text.as_deref(), None, true));
            }
        }
        tickets
    }

    /// `want`: the caller wants this file now (it becomes the most recently used, and the
    /// server's use counts); else only a change does.
    fn update(
        self: &Arc<Self>,
        path: &Path,
        unsaved: Option<&str>,
        holder: Option<u64>,
        want: bool,
    ) -> Option<Ticket> {
        let _updating = self.updating.lock().unwrap_or_else(|e| e.into_inner());
        let known = {
            let st = self.lock();
            if st.life.phase == Phase::Failed || st.closed {
                return None;
            }
            st.docs.get(path).map(|d| d.disk)
        };
        let content = match self.read_content(path, unsaved, known) {
            Ok(content) => content,
            Err(Unread::Gone) => return self.forget(path),
            Err(Unread::TooLarge) => return None,
        };
        #[cfg(test)]
        {
            let hook = self.between_read_and_apply.lock().unwrap().take();
            if let Some(f) = hook {
                f();
            }
        }
        let now = Instant::now();
        let mut st = self.lock();
        if st.life.phase == Phase::Failed || st.closed {
            return None;
        }
        if want {
            st.last_used = now;
        }
        let mut effects = Vec::new();
        // A server still stopping (idle) is replaced at once: the old process's events belong
        // to an older run and are ignored.
        if matches!(st.life.phase, Phase::Stopped | Phase::Stopping) {
            self.start(&mut st, &mut effects);
            if st.life.phase == Phase::Failed {
                self.finish(st, effects);
                return None;
            }
        }
        let changed =
            content.is_some_and(|(text, disk)| Self::store_text(&mut st, path, text, disk, now));
        let ticket = self.ticket_for(&mut st, path, holder, want, changed, now);
        self.advance_and_finish(st, effects, true);
        ticket
    }

    /// What there is to send of `path`, read outside the lock: `unsaved` if given, else the
    /// file (through the workspaces' confinement), unless its stamp is `known`'s (Ok(None)).
    fn read_content(
        &self,
        path: &Path,
        unsaved: Option<&str>,
        known: Option<Option<Stamp>>,
    ) -> Result<Option<(String, Option<Stamp>)>, Unread> {
        // An unchanged stamp spares the read.
        Ok(match unsaved {
            Some(t) => Some((t.to_string(), None)),
            None => match crate::files::stamp(path) {
                None => return Err(Unread::Gone),
                Some(s) if known == Some(Some(s)) => None,
                Some(s) => match self.workspaces.read(path, MAX_DOC_BYTES) {
                    Ok(b) => Some((String::from_utf8_lossy(&b).into_owned(), Some(s))),
                    Err(e) if e.kind() == std::io::ErrorKind::FileTooLarge => {
                        crate::log::debug!("{}: {} {e}; not sent", self.name, path.display());
                        return Err(Unread::TooLarge);
                    }
                    Err(_) => return Err(Unread::Gone),
                },
            },
        })
    }

    /// Makes `text` the document's, as a new version, unless it already is (then only the
    /// stamp it was read at is kept); true if it was new.
    fn store_text(
        st: &mut State,
        path: &Path,
        text: String,
        disk: Option<Stamp>,
        now: Instant,
    ) -> bool {
        let hash = crate::text::hash(text.as_bytes());
        if let Some(d) = st.docs.get_mut(path).filter(|d| d.hash == hash) {
            d.disk = disk;
            return false;
        }
        st.gone.retain(|g| g.path != path);
        st.last_used = now;
        st.last_version += 1;
        let version = st.last_version;
        let d = st.docs.entry(path.to_path_buf()).or_insert_with(|| Doc {
            uri: crate::files::file_uri(path),
            text: String::new(),
            hash: 0,
            disk: None,
            version: 0,
            open: false,
            used: now,
            holders: Vec::new(),
        });
        (d.text, d.hash, d.disk, d.version) = (text, hash, disk, version);
        true
    }

    /// The use of the document of `path` and its `holder` recorded, its text sent if it
    /// `changed` (to a running server), room made, and what to wait on for its version's
    /// result; None if there is no document (the file vanished between stat and read).
    fn ticket_for(
        self: &Arc<Self>,
        st: &mut State,
        path: &Path,
        holder: Option<u64>,
        want: bool,
        changed: bool,
        now: Instant,
    ) -> Option<Ticket> {
        let d = st.docs.get_mut(path)?;
        if want || changed {
            d.used = now;
        }
        if let Some(h) = holder.filter(|h| !d.holders.contains(h)) {
            d.holders.push(h);
        }
        let version = d.version;
        if changed {
            st.fin.sent(path, version);
            if st.life.phase == Phase::Running {
                self.sync(st, path);
            }
        }
        let epoch = st.fin.touched(path);
        self.close_least_recent(st, path);
        Some(Ticket {
            server: self.clone(),
            path: path.to_path_buf(),
            version,
            epoch,
        })
    }

    /// Sends the document's current text: didOpen, or didChange with the whole text.
    pub(super) fn sync(&self, st: &mut State, path: &Path) {
        let Some(d) = st.docs.get_mut(path) else {
            return;
        };
        // Built field by field: smaller in the binary than `json!` (no serializer per type).
        let mut doc = Value::Object(Default::default());
        doc["uri"] = d.uri.clone().into();
        doc["version"] = d.version.into();
        let text: Value = d.text.clone().into();
        let mut params = Value::Object(Default::default());
        let method = if d.open {
            params["contentChanges"] = Value::Array(vec![Value::Object(Default::default())]);
            params["contentChanges"][0]["text"] = text;
            "textDocument/didChange"
        } else {
            d.open = true;
            doc["languageId"] = crate::files::language_id(path).into();
            doc["text"] = text;
            "textDocument/didOpen"
        };
        params["textDocument"] = doc;
        self.send(st, &rpc::notification(method, params));
    }

    /// Closes the least recently used documents nobody holds beyond the bound, so a server's
    /// memory stays bounded however many files diagnostics are asked for. Their last final
    /// results stay in the store. Never `keep` (the file being synced), and a document whose
    /// new result is awaited only when every other is awaited too: closed, it would never get
    /// that result.
    fn close_least_recent(&self, st: &mut State, keep: &Path) {
        while st.docs.len() > self.cfg.max_open.max(1) {
            let Some(oldest) = st
                .docs
                .iter()
                .filter(|(p, d)| p.as_path() != keep && d.holders.is_empty())
                .min_by_key(|(p, d)| (st.fin.awaited(p), d.used))
                .map(|(p, _)| p.clone())
            else {
                return;
            };
            crate::log::debug!(
                "{}: closing {} (least recently used)",
                self.name,
                oldest.display()
            );
            self.close_doc(st, &oldest);
        }
    }

    /// Forgets a document, remembering what it held (`Gone`).
    pub(super) fn drop_doc(st: &mut State, path: &Path) -> Option<Doc> {
        let d = st.docs.remove(path)?;
        if st.gone.len() >= MAX_GONE {
            st.gone.remove(0);
        }
        let g = Gone {
            path: path.to_path_buf(),
            disk: d.disk,
            hash: d.hash,
            version: d.version,
            done: !st.fin.awaited(path),
        };
        st.gone.push(g);
        st.fin.closed(path);
        Some(d)
    }

    fn close_doc(&self, st: &mut State, path: &Path) -> Option<Doc> {
        let d = Self::drop_doc(st, path)?;
        if d.open {
            let mut params = Value::Null;
            params["textDocument"]["uri"] = d.uri.clone().into();
            self.send(st, &rpc::notification("textDocument/didClose", params));
        }
        Some(d)
    }

    /// The file is gone: close it, and its diagnostics are now none. Called by `update`,
    /// under `updating`.
    fn forget(self: &Arc<Self>, path: &Path) -> Option<Ticket> {
        let mut st = self.lock();
        let d = self.close_doc(&mut st, path);
        st.gone.retain(|g| g.path != path);
        if let Some(d) = d {
            let gone = Final {
                path: path.to_path_buf(),
                version: d.version,
                items: Vec::new(),
            };
            self.finish(st, vec![Effect::Final(gone)]);
        }
        None
    }

    /// `workspace/didChangeWatchedFiles`, to a running server that registered for it. Pulled
    /// results of open files count as older than the change either way (servers such as
    /// tsserver watch files themselves).
    pub fn files_changed(&self, changes: &[Value]) {
        let mut st = self.lock();
        if st.life.phase != Phase::Running {
            return;
        }
        st.fin.changed_elsewhere();
        if !st.watch_registrations.is_empty() {
            let mut params = Value::Null;
            params["changes"] = changes.into();
            let msg = rpc::notification("workspace/didChangeWatchedFiles", params);
            self.send(&mut st, &msg);
        }
    }
}

/// For clients other than diagnostics (the LSP mux): the documents they hold open.
impl Server {
    /// `touch`, for `holder`, who keeps the document open until it `release`s it: a held
    /// document is never closed to make room. The ticket's `version` is the version the
    /// server has (or will have once it started) of this text.
    pub fn hold(
        self: &Arc<Self>,
        path: &Path,
        holder: u64,
        unsaved: Option<&str>,
    ) -> Option<Ticket> {
        self.update(path, unsaved, Some(holder), true)
    }

    /// `holder` no longer needs `path` open. When the last lets go, it is closed at once if it
    /// was open only because it was held (the bound is exceeded), else when room is needed.
    pub fn release(self: &Arc<Self>, path: &Path, holder: u64) {
        let mut st = self.lock();
        let Some(d) = st.docs.get_mut(path) else {
            return;
        };
        d.holders.retain(|h| *h != holder);
        if d.holders.is_empty() && st.docs.len() > self.cfg.max_open.max(1) {
            self.close_doc(&mut st, path);
        }
        // Held, it kept the server from idling out: the idle time counts again.
        self.advance_and_finish(st, Vec::new(), true);
    }

    /// The version ccide last sent (or will send) of `path`; None if it has no copy.
    pub fn version(&self, path: &Path) -> Option<i32> {
        self.lock().docs.get(path).map(|d| d.version)
    }
}

impl Ticket {
    /// The version of the document this ticket waits for, as the server knows it.
    pub fn version(&self) -> i32 {
        self.version
    }

    /// Whether the wait is over, and how: Some(true) the result is final (or will never be:
    /// the server stopped or failed); Some(false) the document was closed before its result
    /// was final, which is no answer; None not yet.
    fn outcome(&self, st: &State) -> Option<bool> {
        if st.closed
            || matches!(
                st.life.phase,
                Phase::Failed | Phase::Stopped | Phase::Stopping
            )
        {
            return Some(true);
        }
        match st.fin.satisfied(&self.path, self.version, self.epoch) {
            None => Some(
                st.gone
                    .iter()
                    .any(|g| g.path == self.path && g.done && g.version >= self.version),
            ),
            Some(true) => Some(true),
            Some(false) => None,
        }
    }

    /// Waits until the result this ticket names is final, at most until `deadline`; false
    /// also at once when its document was closed before (no result will come for it).
    pub fn wait_until(&self, deadline: Instant) -> bool {
        let s = &self.server;
        let mut st = s.lock();
        let done = loop {
            if let Some(done) = self.outcome(&st) {
                break done;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            st =
                s.cv.wait_timeout(st, left)
                    .unwrap_or_else(|e| e.into_inner())
                    .0;
        };
        drop(st);
        // The result is final in the state; wait until the sink has it too (`finish` holds
        // this lock from before it releases the state until the sink returns).
        drop(s.delivering.lock());
        done
    }
}
