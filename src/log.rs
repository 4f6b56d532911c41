//! One line per event on stderr. Under journald (`JOURNAL_STREAM` set) each line starts with a
//! syslog priority such as `<6>` so the journal shows levels; otherwise with a UTC timestamp.

use std::io::Write;
use std::sync::atomic::{AtomicU8, Ordering};

#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Debug)]
pub enum Level {
    Error = 0,
    Warn = 1,
    Info = 2,
    Debug = 3,
}

impl Level {
    pub fn parse(s: &str) -> Option<Level> {
        match s {
            "error" => Some(Level::Error),
            "warn" => Some(Level::Warn),
            "info" => Some(Level::Info),
            "debug" => Some(Level::Debug),
            _ => None,
        }
    }

    fn word(self) -> &'static str {
        match self {
            Level::Error => "error",
            Level::Warn => "warn",
            Level::Info => "info",
            Level::Debug => "debug",
        }
    }

    fn syslog_priority(self) -> u8 {
        match self {
            Level::Error => 3,
            Level::Warn => 4,
            Level::Info => 6,
            Level::Debug => 7,
        }
    }
}

static MAX: AtomicU8 = AtomicU8::new(Level::Info as u8);
static JOURNAL: AtomicU8 = AtomicU8::new(0);

pub fn init(level: Level) {
    MAX.store(level as u8, Ordering::Relaxed);
    let journal = std::env::var_os("JOURNAL_STREAM").is_some_and(|v| !v.is_empty());
    JOURNAL.store(journal as u8, Ordering::Relaxed);
}

pub fn enabled(level: Level) -> bool {
    level as u8 <= MAX.load(Ordering::Relaxed)
}

/// Writes one record. Whatever the message holds (a client's name, a file name the model
/// chose, a checker's command), it stays one line with its control characters made visible,
/// so nobody can forge a record, or a journald priority, by putting a newline in it.
pub fn emit(level: Level, args: std::fmt::Arguments) {
    if !enabled(level) {
        return;
    }
    let line = record(
        level,
        JOURNAL.load(Ordering::Relaxed) == 1,
        &args.to_string(),
    );
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

fn record(level: Level, journal: bool, message: &str) -> String {
    let message = crate::text::visible(message);
    if journal {
        format!("<{}>{message}\n", level.syslog_priority())
    } else {
        format!("{} ccide {}: {message}\n", utc_now(), level.word())
    }
}

/// `2026-11-22T03:50:00Z`, computed without a time crate (days-from-civil inverse).
pub fn utc_now() -> String {
    utc_string(crate::text::now_secs())
}

pub fn utc_string(secs: u64) -> String {
    let days = (secs / 86400) as i64;
    let rem = secs % 86400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

// Called through this module (`crate::log::info!`), so every use names where it comes from.
macro_rules! error { ($($t:tt)*) => { $crate::log::emit($crate::log::Level::Error, format_args!($($t)*)) } }
macro_rules! warning { ($($t:tt)*) => { $crate::log::emit($crate::log::Level::Warn, format_args!($($t)*)) } }
macro_rules! info { ($($t:tt)*) => { $crate::log::emit($crate::log::Level::Info, format_args!($($t)*)) } }
macro_rules! debug { ($($t:tt)*) => { if $crate::log::enabled($crate::log::Level::Debug) { $crate::log::emit($crate::log::Level::Debug, format_args!($($t)*)) } } }
#[allow(unused_imports)]
pub(crate) use {debug, error, info, warning as warn};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_cannot_forge_a_record_or_a_priority() {
        let forged = "client #1 connected: x\n<3>ccide: token stolen\r\u{1b}[2K";
        assert_eq!(
            record(Level::Info, true, forged),
            "<6>client #1 connected: x\\n<3>ccide: token stolen\\r\\u{1b}[2K\n"
        );
        let plain = record(Level::Warn, false, "a\nb");
        assert!(plain.ends_with(" ccide warn: a\\nb\n"), "{plain}");
        assert_eq!(plain.matches('\n').count(), 1);
    }

    #[test]
    fn utc_string_known_instants() {
        assert_eq!(super::utc_string(0), "1970-01-01T00:00:00Z");
        assert_eq!(super::utc_string(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(super::utc_string(1_795_000_000), "2026-11-18T11:06:40Z");
    }
}
