//! The diagnostics as clients and commands see them: who hears that a file's diagnostics
//! changed (diagnostics_changed, ccide-protocol(7) §6.3), and the JSON of the getDiagnostics
//! answer (§5) and of `ccide diagnostics`. The store (`crate::diagnostics`) only says what
//! changed, through the sink made here.

use std::path::Path;
use std::sync::Arc;

use serde_json::Value;

use crate::diagnostics::parse::{Diagnostic, Severity, to_wire};
use crate::diagnostics::{Diagnostics, Imported, Sink};
use crate::rpc::clients::Clients;

/// The store's way out: every client that can receive a notification gets
/// diagnostics_changed for each file whose diagnostics changed (see `Clients::broadcast`).
pub fn to_clients(clients: Arc<Clients>) -> Sink {
    Arc::new(move |changed: &[(std::path::PathBuf, Vec<Diagnostic>)]| {
        for (p, ds) in changed {
            clients.broadcast("diagnostics_changed", entry(crate::files::file_url(p), ds));
        }
    })
}

/// A file's diagnostics in the protocol format, as a JSON array.
pub fn items(ds: &[Diagnostic]) -> Value {
    ds.iter().map(to_wire).collect()
}

/// `{"uri": ..., "diagnostics": [...]}`, as getDiagnostics answers for a file and
/// diagnostics_changed tells of one.
pub fn entry(uri: String, ds: &[Diagnostic]) -> Value {
    let mut v = Value::Object(Default::default());
    v["uri"] = uri.into();
    v["diagnostics"] = items(ds);
    v
}

/// The getDiagnostics answer from the store: the requested uri echoed exactly (the CLI
/// discards an answer whose uri differs), or every file with diagnostics.
pub fn answer(diagnostics: &Diagnostics, uri: Option<String>) -> Vec<Value> {
    match uri {
        Some(uri) => {
            let ds = diagnostics.of_uri(&uri);
            vec![entry(uri, &ds)]
        }
        None => diagnostics
            .store
            .all()
            .iter()
            .map(|(p, ds)| entry(crate::files::file_url(p), ds))
            .collect(),
    }
}

/// One line per diagnostic, as `ccide diagnostics` prints them.
pub fn describe(p: &Path, d: &Diagnostic) -> String {
    let code = d
        .code
        .as_deref()
        .map(|c| format!(" [{c}]"))
        .unwrap_or_default();
    format!(
        "{}:{}:{}: {}: {} ({}){code}",
        p.display(),
        d.start_line + 1,
        d.start_char + 1,
        match d.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Info => "info",
            Severity::Hint => "hint",
        },
        d.message,
        d.source
    )
}

/// The answer to `ccide diagnostics import`.
pub fn imported(r: &Imported) -> Value {
    crate::json::obj! {
        "ok": true,
        "files": r.files,
        "diagnostics": r.diagnostics,
        "changed": r.changed,
        "outside_workspace": r.outside_workspace,
    }
}
