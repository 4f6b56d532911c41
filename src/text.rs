//! Small pieces of text that several layers print: durations, epoch seconds, and text from
//! outside made safe to show; and the one sort by bytes that lists are ordered with.

use std::borrow::Cow;
use std::time::{Duration, SystemTime};

/// Sorts `v` by the bytes `key` gives for each item, with the one sort this binary holds:
/// every distinct `sort` call instantiates a few kilobytes of sorting code.
pub fn sort_by_bytes<T>(v: &mut [T], key: impl Fn(&T) -> Vec<u8>) {
    // Only the swaps depend on `T`: the order is worked out on indices, once in the binary.
    for (a, b) in swaps(v.iter().map(key).collect()) {
        v.swap(a, b);
    }
}

/// The swaps that put items in the order of their keys (ties in their first order).
fn swaps(keys: Vec<Vec<u8>>) -> Vec<(usize, usize)> {
    // `at[p]` is the item now at position p, `pos[i]` the position of item i.
    let mut at: Vec<usize> = (0..keys.len()).collect();
    let mut pos = at.clone();
    let mut out = Vec::new();
    for (p, want) in order(&keys).into_iter().enumerate() {
        let q = pos[want];
        if q != p {
            out.push((p, q));
            let moved = at[p];
            at[q] = moved;
            pos[moved] = q;
            at[p] = want;
            pos[want] = p;
        }
    }
    out
}

/// The indices of `keys` in the order of the keys, ties in their first order: a merge sort,
/// bottom up (std's sort of the pairs would bring 4 KB of sorting code of its own).
fn order(keys: &[Vec<u8>]) -> Vec<usize> {
    let n = keys.len();
    let mut a: Vec<usize> = (0..n).collect();
    let mut b = a.clone();
    let mut width = 1;
    while width < n {
        // Each pair of sorted runs `a[lo..mid]`, `a[mid..hi]` merged into `b[lo..hi]`.
        for lo in (0..n).step_by(2 * width) {
            let (mid, hi) = ((lo + width).min(n), (lo + 2 * width).min(n));
            let (mut l, mut r) = (lo, mid);
            for slot in &mut b[lo..hi] {
                // From the left run on a tie: the earlier item stays first.
                if r == hi || (l < mid && keys[a[l]] <= keys[a[r]]) {
                    *slot = a[l];
                    l += 1;
                } else {
                    *slot = a[r];
                    r += 1;
                }
            }
        }
        std::mem::swap(&mut a, &mut b);
        width *= 2;
    }
    a
}

/// Text from outside (a client's name, a file name the model chose, code under review, a
/// checker's output) as it may reach a log line or a terminal: every control character but
/// tab is made visible (`\n`, `\r`, `\u{1b}`, ...), and so are the invisible bidirectional
/// controls that can make code read differently from how it runs. So one record stays one
/// line, no escape sequence reaches the terminal, and what a person approves is what runs.
pub fn visible(s: &str) -> Cow<'_, str> {
    let hidden = |c: char| {
        (c.is_control() && c != '\t')
            || matches!(c, '\u{061c}' | '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
    };
    if !s.chars().any(hidden) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if hidden(c) => out.push_str(&format!("\\u{{{:x}}}", c as u32)),
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

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

/// FNV-1a, 64 bits: a content hash for change detection and names, never for security.
#[derive(Clone, Copy)]
pub struct Fnv(u64);

impl Default for Fnv {
    fn default() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
}

impl Fnv {
    pub fn write(&mut self, bytes: &[u8]) {
        // In a local: through `self` the state went to memory and back for every byte.
        let mut h = self.0;
        for b in bytes {
            h = (h ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
        self.0 = h;
    }

    pub fn finish(self) -> u64 {
        self.0
    }
}

/// The FNV-1a hash of `bytes`.
pub fn hash(bytes: &[u8]) -> u64 {
    let mut h = Fnv::default();
    h.write(bytes);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_hash_is_fnv_1a() {
        // Its published test vectors: names and stored hashes depend on it staying the same.
        assert_eq!(hash(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(hash(b"a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(hash(b"foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn control_characters_are_made_visible() {
        assert_eq!(visible("plain\ttab é"), "plain\ttab é");
        assert_eq!(
            visible("a\nb\rc\u{1b}[2Jd\u{7f}\u{9b}e\u{202e}f"),
            "a\\nb\\rc\\u{1b}[2Jd\\u{7f}\\u{9b}e\\u{202e}f"
        );
    }

    #[test]
    fn durations_print_without_floats() {
        assert_eq!(human_duration(Duration::from_secs(3)), "3 s");
        assert_eq!(human_duration(Duration::from_millis(250)), "0.25 s");
        assert_eq!(human_duration(Duration::from_millis(1500)), "1.5 s");
        assert_eq!(human_duration(Duration::from_millis(1001)), "1.001 s");
    }

    #[test]
    fn sort_by_bytes_orders_as_the_keys_do() {
        let mut v = vec![300u16, 2, 65535, 0, 256, 2];
        sort_by_bytes(&mut v, |n| n.to_be_bytes().to_vec());
        assert_eq!(v, [0, 2, 2, 256, 300, 65535]);
        let mut names = vec!["b", "a-b", "a", "", "é", "Z"];
        sort_by_bytes(&mut names, |n| n.as_bytes().to_vec());
        assert_eq!(names, ["", "Z", "a", "a-b", "b", "é"]);
        let mut pairs = vec![(3, 'a'), (1, 'b'), (3, 'c'), (0, 'd'), (1, 'e'), (2, 'f')];
        sort_by_bytes(&mut pairs, |p| vec![p.0]);
        assert_eq!(
            pairs,
            [(0, 'd'), (1, 'b'), (1, 'e'), (2, 'f'), (3, 'a'), (3, 'c')]
        );
        // Every length up to past a few merge widths, many ties: as std's stable sort orders.
        let mut x = 7u32;
        for n in 0..300 {
            let items: Vec<(Vec<u8>, usize)> = (0..n)
                .map(|i| {
                    x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                    let len = (x >> 8) as usize % 3;
                    (vec![(x >> 16) as u8 % 4; len], i)
                })
                .collect();
            let mut ours = items.clone();
            sort_by_bytes(&mut ours, |p| p.0.clone());
            let mut std = items;
            std.sort_by(|a, b| a.0.cmp(&b.0));
            assert_eq!(ours, std, "{n} items");
        }
    }
}
