//! reformat_file (seed 000): the project's formatter on a temporary copy beside the file; the
//! original is replaced atomically only when the formatter succeeded.

use serde_json::{Map, Value};

use crate::server::{Call, Reply};

pub fn reformat_file(_call: &Call, _args: &Map<String, Value>) -> Reply {
    Reply::Now(Ok(crate::tools::tool_error(
        "no formatter is configured for this file",
    )))
}
