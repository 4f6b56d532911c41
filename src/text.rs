//! Small pieces of text that several layers print: durations and epoch seconds.

use std::time::{Duration, SystemTime};

/// `3 s` or `0.25 s`, with integer arithmetic only (float printing costs ~9 KB of binary).
pub fn human_duration(d: Duration) -> String {
    match d.subsec_millis() {
        0 => format!("{} s", d.as_secs()),
        ms => format!(
            "{}.{} s",
            d.as_secs(),
            format!("{ms:03}").trim_end_matches('0')
        ),
    }
}

/// Seconds since the epoch, as the control socket and the events carry times.
pub fn unix_secs(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

pub fn now_secs() -> u64 {
    unix_secs(SystemTime::now())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_print_without_floats() {
        assert_eq!(human_duration(Duration::from_secs(3)), "3 s");
        assert_eq!(human_duration(Duration::from_millis(250)), "0.25 s");
        assert_eq!(human_duration(Duration::from_millis(1500)), "1.5 s");
        assert_eq!(human_duration(Duration::from_millis(1001)), "1.001 s");
    }
}
