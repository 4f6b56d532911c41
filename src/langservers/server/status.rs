//! What a server shows of itself: its place in the list, whether it delivers, and its status
//! for `ccide status`.

use serde_json::Value;

use super::state::Server;
use crate::langservers::supervisor::{Phase, Process};

impl Server {
    /// Its place in the list of a serve's servers: what names it for as long as the serve runs.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Whether it is usable and delivering: not crashed since it last handed out a result (a
    /// server that crashes on every file delivers nothing, and the checker it silenced answers
    /// meanwhile).
    pub fn delivering(&self) -> bool {
        let st = self.lock();
        st.life.phase != Phase::Failed && !st.closed && st.life.delivering
    }

    pub fn status(&self) -> Value {
        let st = self.lock();
        let state = match st.life.phase {
            Phase::Stopped => "stopped",
            Phase::Stopping => "stopping",
            Phase::Starting => "starting",
            Phase::Running if st.fin.progressing() => "indexing",
            // Opened documents, no result yet: a server loads the project on its first
            // document (tsserver's takes seconds), and answers after.
            Phase::Running if !st.delivered && !st.docs.is_empty() => "loading",
            Phase::Running => "ready",
            Phase::Crashed => "crashed",
            Phase::Failed => "failed",
        };
        // The process's, while it is not known to be reaped.
        let pid = st.process.as_ref().and_then(Process::pid);
        // Built field by field: smaller in the binary than `json!` (no serializer per type).
        let mut v = Value::Object(Default::default());
        v["name"] = self.name.clone().into();
        v["origin"] = crate::langservers::registry::origin(&self.name).into();
        v["command"] = self.words.join(" ").into();
        v["patterns"] = self.patterns.clone().into();
        v["state"] = state.into();
        v["pid"] = pid.into();
        v["open_documents"] = st.docs.values().filter(|d| d.open).count().into();
        v["restarts"] = st.life.restarts.into();
        v["diagnostics"] = st.fin.source().name().into();
        if !st.server_info.is_empty() {
            v["server"] = st.server_info.clone().into();
        }
        if let Some(e) = &st.life.last_error {
            v["last_error"] = e.clone().into();
        }
        if let Some(why) = st.life.stopped.as_ref().filter(|_| state == "stopped") {
            v["stopped_because"] = why.clone().into();
        }
        drop(st);
        if let Some(pid) = pid {
            v["rss_kib"] = crate::proc::rss_kib(pid).into();
        }
        v
    }
}
