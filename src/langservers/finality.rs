//! When a document's diagnostics are FINAL: a state machine fed what the server says (the
//! versions ccide sent, its publishes, its work-done progress, its answers to pulls) and the
//! time, with no process, no thread and no clock of its own (time is an argument), so its rules
//! are tested by scripted sequences. Only final results leave it (`Step::finals`): a baseline
//! must never be partial, since the CLI reports every diagnostic missing from it as new. The
//! rules are ccide-protocol(7) §11.5:
//!
//! - pulled (`textDocument/diagnostic`, or the parts of a tsserver pull): the answer for the
//!   version asked about, unless work-done progress was active when it came (then it is asked
//!   again when the work ends); a cancelled pull is asked again after `PULL_RETRY`; a pull is
//!   only as fresh as the epoch it was sent in (other files' changes bump it);
//! - pushed by a server whose publishes are complete (`Pushes::Complete`, such as clangd): a
//!   publish naming the version last sent is final at once;
//! - pushed otherwise: the latest publish for the version last sent (an older version is
//!   dropped; one without a version counts for the latest) once no different publish for the
//!   document came for the quiet period, counted from the end of the last progress at the
//!   earliest, and no progress is active. A publish equal to the one waiting, or to the final
//!   result of the same version, is not news: it neither restarts the quiet period nor makes a
//!   second final result;
//! - a progress older than `PROGRESS_GATE_MAX` no longer holds anything back.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::rpc::ResponseError;

/// A work-done progress older than this no longer holds results back: some servers forget to
/// end a progress, and a result must not wait forever for it; rust-analyzer's first
/// `cargo check` of a large workspace takes well over a minute (ccide-protocol(7) §11.4).
pub const PROGRESS_GATE_MAX: Duration = Duration::from_secs(120);
/// After a pull the server cancelled (it was busy or the content changed under it).
pub const PULL_RETRY: Duration = Duration::from_millis(200);

/// How a server's diagnostics are had.
#[derive(Clone, Debug, PartialEq)]
pub enum Source {
    /// `textDocument/publishDiagnostics`.
    Push,
    /// `textDocument/diagnostic`, with the identifier the server registered.
    Pull(Option<String>),
    /// typescript-language-server's `typescript.tsserverRequest`: tsserver's syntactic,
    /// semantic and suggestion diagnostics, three answers that make one result.
    Tsserver,
}

impl Source {
    pub fn pulled(&self) -> bool {
        *self != Source::Push
    }

    /// How many answers make one pulled result.
    pub fn parts(&self) -> usize {
        match self {
            Source::Tsserver => 3,
            _ => 1,
        }
    }

    pub fn name(&self) -> &'static str {
        match self {
            Source::Push => "push",
            Source::Pull(_) => "pull",
            Source::Tsserver => "tsserver",
        }
    }
}

/// What a server's publishes are known to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pushes {
    /// A publish may be a first, partial result (syntax before semantics, a result while
    /// loading): it waits for the quiet period.
    MayBePartial,
    /// Each publish naming a version is the whole result for it.
    Complete,
}

/// A final result: the server's diagnostics (LSP items) for a version of a document.
#[derive(Debug, PartialEq)]
pub struct Final {
    pub path: PathBuf,
    pub version: i32,
    pub items: Vec<Value>,
}

/// A pull to send: `Source::parts` requests about `path`, whose answers name `id`.
#[derive(Debug, PartialEq)]
pub struct Pull {
    pub path: PathBuf,
    pub id: u64,
}

/// What a tick decided: results that became final, pulls to send, and when to tick again.
#[derive(Debug, Default)]
pub struct Step {
    pub finals: Vec<Final>,
    pub pulls: Vec<Pull>,
    pub next: Option<Instant>,
}

/// A publish waiting to become final.
struct Waiting {
    items: Vec<Value>,
    digest: u64,
    /// Since when this result stands unchanged.
    since: Instant,
}

/// A pull in flight.
struct Asking {
    id: u64,
    version: i32,
    epoch: u64,
    parts_left: usize,
    items: Vec<Value>,
}

#[derive(Default)]
struct Doc {
    path: PathBuf,
    /// The version last sent.
    version: i32,
    waiting: Option<Waiting>,
    asking: Option<Asking>,
    /// A pull is wanted as soon as none is in flight and the server is not busy.
    want_pull: bool,
    /// The version and epoch of the last final result (0: none), and its items' digest.
    final_version: i32,
    final_epoch: u64,
    final_digest: Option<u64>,
}

pub struct Finality {
    source: Source,
    pushes: Pushes,
    quiet: Duration,
    /// A list rather than a map: a server has at most a hundred or so open, and a list is less
    /// code in the binary.
    docs: Vec<Doc>,
    /// Active work-done progress tokens and when each began (a handful: a list).
    progress: Vec<(String, Instant)>,
    /// When the last progress ended: a quiet period counts from then at the earliest, since
    /// a server republishes right after its work ends.
    settled_at: Option<Instant>,
    /// Bumped by every change the server is told about (any document, watched files): a pulled
    /// result is only as fresh as the epoch its request was sent in.
    epoch: u64,
    retry_at: Option<Instant>,
    last_pull: u64,
    /// Final results not handed out yet (pull answers, complete publishes).
    ready: Vec<Final>,
}

/// A hash of a result, to tell a publish that is not news.
fn digest(items: &[Value]) -> u64 {
    struct Hasher(crate::text::Fnv);
    impl std::fmt::Write for Hasher {
        fn write_str(&mut self, s: &str) -> std::fmt::Result {
            self.0.write(s.as_bytes());
            Ok(())
        }
    }
    let mut h = Hasher(crate::text::Fnv::default());
    for i in items {
        let _ = std::fmt::Write::write_fmt(&mut h, format_args!("{i}\n"));
    }
    h.0.finish()
}

impl Finality {
    pub fn new(quiet: Duration) -> Finality {
        Finality {
            source: Source::Push,
            pushes: Pushes::MayBePartial,
            quiet,
            docs: Vec::new(),
            progress: Vec::new(),
            settled_at: None,
            epoch: 0,
            retry_at: None,
            last_pull: 0,
            ready: Vec::new(),
        }
    }

    pub fn source(&self) -> &Source {
        &self.source
    }

    /// What `initialize` said (a new process); documents are then sent again.
    pub fn configure(&mut self, source: Source, pushes: Pushes) {
        self.source = source;
        self.pushes = pushes;
    }

    /// The server registered (or unregistered) pull diagnostics: documents without a final
    /// result for their version are pulled now, and what they had published no longer counts.
    pub fn set_source(&mut self, source: Source) {
        let pulled = source.pulled();
        self.source = source;
        for d in self.docs.iter_mut() {
            d.waiting = None;
            d.asking = None;
            d.want_pull = pulled && d.final_version != d.version;
        }
    }

    /// `version` of `path` was sent (didOpen, didChange).
    pub fn sent(&mut self, path: &Path, version: i32) {
        self.epoch += 1;
        let pulled = self.source.pulled();
        let d = match self.docs.iter().position(|d| d.path == path) {
            Some(i) => &mut self.docs[i],
            None => {
                self.docs.push(Doc {
                    path: path.to_path_buf(),
                    ..Doc::default()
                });
                self.docs.last_mut().expect("just pushed")
            }
        };
        d.version = version;
        d.waiting = None;
        d.want_pull = pulled;
    }

    /// `path` is wanted again with no change: a pulled server is asked again if anything
    /// changed since its last result. Returns the epoch a waiter waits for.
    pub fn touched(&mut self, path: &Path) -> u64 {
        if !self.source.pulled() {
            return 0;
        }
        let epoch = self.epoch;
        if let Some(d) = self.docs.iter_mut().find(|d| d.path == path)
            && d.final_epoch < epoch
        {
            d.want_pull = true;
        }
        epoch
    }

    /// Something else changed (a watched file): pulled results are older than that.
    pub fn changed_elsewhere(&mut self) {
        self.epoch += 1;
    }

    /// `workspace/diagnostic/refresh`: every document is pulled again.
    pub fn refresh(&mut self) {
        for d in self.docs.iter_mut() {
            d.want_pull = true;
        }
    }

    pub fn closed(&mut self, path: &Path) {
        self.docs.retain(|d| d.path != path);
    }

    /// The process is gone: what it had in flight or pending will never come.
    pub fn gone(&mut self) {
        self.progress.clear();
        self.settled_at = None;
        self.retry_at = None;
        for d in self.docs.iter_mut() {
            d.waiting = None;
            d.asking = None;
        }
    }

    /// `$/progress` begin (`true`) or end.
    pub fn progress(&mut self, token: String, begin: bool, now: Instant) {
        let at = self.progress.iter().position(|p| p.0 == token);
        match (begin, at) {
            (true, Some(i)) => self.progress[i].1 = now,
            (true, None) => self.progress.push((token, now)),
            (false, Some(i)) => {
                self.progress.swap_remove(i);
                if self.progress.is_empty() {
                    self.settled_at = Some(now);
                }
            }
            (false, None) => {}
        }
    }

    /// Some work-done progress is active (status says "indexing").
    pub fn progressing(&self) -> bool {
        !self.progress.is_empty()
    }

    /// While work is in progress (and not for longer than the gate allows), results wait:
    /// until when.
    fn busy_until(&self, now: Instant) -> Option<Instant> {
        self.progress
            .iter()
            .map(|p| p.1 + PROGRESS_GATE_MAX)
            .filter(|t| *t > now)
            .max()
    }

    /// A publish for `path`, naming `version` or none, with positions already in UTF-16.
    pub fn pushed(&mut self, path: &Path, version: Option<i64>, items: Vec<Value>, now: Instant) {
        // A pulled server's pushes are ignored: one source of truth per server.
        if self.source.pulled() {
            return;
        }
        let complete = self.pushes == Pushes::Complete && version.is_some();
        let Some(d) = self.docs.iter_mut().find(|d| d.path == path) else {
            return;
        };
        if version.is_some_and(|v| v != i64::from(d.version)) {
            return;
        }
        let digest = digest(&items);
        if d.final_version == d.version && d.final_digest == Some(digest) {
            d.waiting = None;
            return;
        }
        if d.waiting.as_ref().is_some_and(|w| w.digest == digest) {
            return;
        }
        if complete {
            d.waiting = None;
            (d.final_version, d.final_epoch, d.final_digest) =
                (d.version, self.epoch, Some(digest));
            self.ready.push(Final {
                path: path.to_path_buf(),
                version: d.version,
                items,
            });
            return;
        }
        d.waiting = Some(Waiting {
            items,
            digest,
            since: now,
        });
    }

    /// A pull to send now for each document that wants one.
    fn pulls(&mut self, out: &mut Vec<Pull>) {
        let parts = self.source.parts();
        for d in self.docs.iter_mut() {
            if !d.want_pull || d.asking.is_some() {
                continue;
            }
            self.last_pull += 1;
            d.want_pull = false;
            d.asking = Some(Asking {
                id: self.last_pull,
                version: d.version,
                epoch: self.epoch,
                parts_left: parts,
                items: Vec::new(),
            });
            out.push(Pull {
                path: d.path.clone(),
                id: self.last_pull,
            });
        }
    }

    /// One answer to the pull `id` about `path`: its items (positions in UTF-16), None for
    /// "unchanged", or the server's error. Err when pulling failed for good: the server's
    /// publishes are used from now on.
    pub fn answered(
        &mut self,
        path: &Path,
        id: u64,
        answer: Result<Option<Vec<Value>>, ResponseError>,
        now: Instant,
    ) -> Result<(), String> {
        if !self.source.pulled() {
            return Ok(());
        }
        let busy = self.busy_until(now).is_some();
        let Some(d) = self.docs.iter_mut().find(|d| d.path == path) else {
            return Ok(());
        };
        let Some(a) = d.asking.as_mut().filter(|a| a.id == id) else {
            return Ok(());
        };
        match answer {
            Ok(items) => {
                a.parts_left = a.parts_left.saturating_sub(1);
                let unchanged = items.is_none();
                a.items.extend(items.unwrap_or_default());
                if a.parts_left > 0 {
                    return Ok(());
                }
                let a = d.asking.take().expect("checked above");
                if a.version != d.version {
                    // Stale: the newer version's pull is wanted already.
                } else if busy {
                    // rust-analyzer answers 0 items while it loads (ccide-protocol(7) §11.4).
                    d.want_pull = true;
                } else {
                    let digest = digest(&a.items);
                    let same = d.final_version == a.version && d.final_digest == Some(digest);
                    let news = !unchanged && !same;
                    (d.final_version, d.final_epoch, d.final_digest) =
                        (a.version, a.epoch, Some(digest));
                    if news {
                        self.ready.push(Final {
                            path: path.to_path_buf(),
                            version: a.version,
                            items: a.items,
                        });
                    }
                }
                Ok(())
            }
            Err(e) => {
                d.asking = None;
                if e.is_retryable() {
                    d.want_pull = true;
                    self.retry_at = Some(now + PULL_RETRY);
                    Ok(())
                } else {
                    self.set_source(Source::Push);
                    Err(e.message)
                }
            }
        }
    }

    /// Runs what is due at `now`: hands out the final results, the pulls to send, and when
    /// to tick again.
    pub fn tick(&mut self, now: Instant) -> Step {
        let mut step = Step {
            finals: std::mem::take(&mut self.ready),
            ..Step::default()
        };
        let mut due = |t: Instant| step.next = Some(step.next.map_or(t, |n| n.min(t)));
        // A progress the server never ended is forgotten at the gate: status stops saying
        // "indexing", and the tokens do not pile up. It does not count as an end that the
        // quiet period waits for: it no longer holds anything back (ccide-protocol(7) §11.5).
        self.progress.retain(|p| p.1 + PROGRESS_GATE_MAX > now);
        let busy = self.busy_until(now);
        if let Some(t) = busy {
            due(t);
        }
        let (quiet, settled_at, epoch) = (self.quiet, self.settled_at, self.epoch);
        for d in self.docs.iter_mut() {
            let Some(w) = &d.waiting else { continue };
            if busy.is_some() {
                continue;
            }
            let ready_at = settled_at.map_or(w.since, |s| s.max(w.since)) + quiet;
            if now < ready_at {
                due(ready_at);
                continue;
            }
            let w = d.waiting.take().expect("checked above");
            (d.final_version, d.final_epoch, d.final_digest) = (d.version, epoch, Some(w.digest));
            step.finals.push(Final {
                path: d.path.clone(),
                version: d.version,
                items: w.items,
            });
        }
        if busy.is_none() && self.source.pulled() {
            match self.retry_at {
                Some(t) if t > now => due(t),
                _ => {
                    self.retry_at = None;
                    self.pulls(&mut step.pulls);
                }
            }
        }
        step
    }

    /// Whether a waiter for `version` of `path` (pulled no earlier than `epoch`) has its
    /// final result; None for a document no longer known (closed): it will get none.
    pub fn satisfied(&self, path: &Path, version: i32, epoch: u64) -> Option<bool> {
        let d = self.docs.iter().find(|d| d.path == path)?;
        Some(d.final_version >= version && d.final_epoch >= epoch)
    }

    /// Whether `path`'s result for the version last sent is not final yet.
    pub fn awaited(&self, path: &Path) -> bool {
        self.docs
            .iter()
            .any(|d| d.path == path && d.final_version < d.version)
    }
}

/// Scripted sequences: what the server says and when, and what becomes final when.
#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const QUIET: Duration = Duration::from_millis(300);

    fn ms(t0: Instant, n: u64) -> Instant {
        t0 + Duration::from_millis(n)
    }

    fn item(line: u32) -> Value {
        json!({"range": {"start": {"line": line, "character": 0}, "end": {"line": line, "character": 1}},
               "message": format!("error on line {line}")})
    }

    /// The lines of each final result a tick hands out, for `path`.
    fn finals(step: &Step) -> Vec<(i32, Vec<u64>)> {
        step.finals
            .iter()
            .map(|f| {
                let lines = f
                    .items
                    .iter()
                    .map(|i| i["range"]["start"]["line"].as_u64().unwrap())
                    .collect();
                (f.version, lines)
            })
            .collect()
    }

    fn pushing(pushes: Pushes) -> (Finality, PathBuf, Instant) {
        let mut f = Finality::new(QUIET);
        f.configure(Source::Push, pushes);
        let p = PathBuf::from("/w/a.c");
        f.sent(&p, 1);
        (f, p, Instant::now())
    }

    #[test]
    fn a_partial_publish_waits_for_a_quiet_period_with_no_different_one() {
        let (mut f, p, t0) = pushing(Pushes::MayBePartial);
        f.pushed(&p, Some(1), vec![item(0)], t0);
        let s = f.tick(ms(t0, 100));
        assert_eq!(finals(&s), []);
        assert_eq!(s.next, Some(ms(t0, 300)));
        // The rest comes inside the quiet period: it restarts it.
        f.pushed(&p, Some(1), vec![item(0), item(1)], ms(t0, 150));
        assert_eq!(finals(&f.tick(ms(t0, 300))), []);
        assert_eq!(f.satisfied(&p, 1, 0), Some(false));
        assert_eq!(finals(&f.tick(ms(t0, 450))), [(1, vec![0, 1])]);
        assert_eq!(f.satisfied(&p, 1, 0), Some(true));
        assert_eq!(f.tick(ms(t0, 900)).next, None, "nothing left to wait for");
    }

    /// A server that republishes the same diagnostics every 50 ms reaches "final"
    /// after one quiet period, and only once (ccide-protocol(7) §11.5).
    #[test]
    fn identical_publishes_are_not_news() {
        let (mut f, p, t0) = pushing(Pushes::MayBePartial);
        let mut got = Vec::new();
        for n in 0..40 {
            f.pushed(&p, Some(1), vec![item(3)], ms(t0, n * 50));
            got.extend(finals(&f.tick(ms(t0, n * 50 + 1))));
            if n == 6 {
                assert_eq!(got, [(1, vec![3])], "final at 300 ms");
            }
        }
        assert_eq!(got, [(1, vec![3])], "and only once");
        // A different result for the same version is news (a server that changed its mind).
        f.pushed(&p, Some(1), vec![], ms(t0, 2000));
        f.pushed(&p, Some(1), vec![], ms(t0, 2100));
        assert_eq!(finals(&f.tick(ms(t0, 2299))), []);
        assert_eq!(finals(&f.tick(ms(t0, 2300))), [(1, vec![])]);
    }

    /// A server known to publish each version's whole result (clangd) is final at the publish, even
    /// while it indexes in the background; its unversioned publishes wait (ccide-protocol(7)
    /// §11.5).
    #[test]
    fn a_complete_publish_for_the_version_sent_is_final_at_once() {
        let (mut f, p, t0) = pushing(Pushes::Complete);
        f.progress("index".into(), true, t0);
        f.pushed(&p, Some(1), vec![item(2)], ms(t0, 5));
        assert_eq!(finals(&f.tick(ms(t0, 5))), [(1, vec![2])]);
        assert_eq!(f.satisfied(&p, 1, 0), Some(true));
        // Republished unchanged (a header's change re-checked it): nothing new.
        f.pushed(&p, Some(1), vec![item(2)], ms(t0, 50));
        assert_eq!(finals(&f.tick(ms(t0, 50))), []);
        f.sent(&p, 2);
        f.pushed(&p, Some(1), vec![], ms(t0, 60));
        assert_eq!(
            finals(&f.tick(ms(t0, 60))),
            [],
            "an older version's is dropped"
        );
        f.pushed(&p, Some(2), vec![], ms(t0, 70));
        assert_eq!(finals(&f.tick(ms(t0, 70))), [(2, vec![])]);
        f.sent(&p, 3);
        f.progress("index".into(), false, ms(t0, 80));
        f.pushed(&p, None, vec![item(1)], ms(t0, 90));
        assert_eq!(
            finals(&f.tick(ms(t0, 90))),
            [],
            "no version: it may be partial"
        );
        assert_eq!(finals(&f.tick(ms(t0, 390))), [(3, vec![1])]);
    }

    #[test]
    fn versions_other_than_the_one_sent_are_dropped_and_none_means_the_latest() {
        let (mut f, p, t0) = pushing(Pushes::MayBePartial);
        f.sent(&p, 4);
        f.pushed(&p, Some(1), vec![item(9)], t0);
        f.pushed(&p, Some(5), vec![item(9)], t0);
        assert_eq!(f.tick(ms(t0, 1000)).finals, []);
        f.pushed(&p, None, vec![item(1)], ms(t0, 1000));
        assert_eq!(finals(&f.tick(ms(t0, 1300))), [(4, vec![1])]);
        // A publish for a document never sent (or closed) is nobody's.
        f.closed(&p);
        f.pushed(&p, None, vec![item(1)], ms(t0, 1400));
        assert_eq!(f.tick(ms(t0, 2000)).finals, []);
        assert_eq!(f.satisfied(&p, 9, 0), None, "closed: no result will come");
    }

    #[test]
    fn work_in_progress_holds_publishes_until_it_ends_or_the_gate() {
        let (mut f, p, t0) = pushing(Pushes::MayBePartial);
        f.progress("load".into(), true, t0);
        assert!(f.progressing());
        // rust-analyzer-like: an empty result while loading.
        f.pushed(&p, Some(1), vec![], ms(t0, 10));
        let s = f.tick(ms(t0, 500));
        assert_eq!(s.finals, []);
        assert_eq!(s.next, Some(t0 + PROGRESS_GATE_MAX));
        f.pushed(&p, Some(1), vec![item(7)], ms(t0, 900));
        f.progress("load".into(), false, ms(t0, 1000));
        // The quiet period counts from the end of the work.
        assert_eq!(finals(&f.tick(ms(t0, 1299))), []);
        assert_eq!(finals(&f.tick(ms(t0, 1300))), [(1, vec![7])]);
        // A progress never ended holds results for two minutes, no longer.
        f.sent(&p, 2);
        f.progress("forgotten".into(), true, ms(t0, 2000));
        f.pushed(&p, Some(2), vec![], ms(t0, 2100));
        assert_eq!(
            finals(&f.tick(ms(t0, 2000) + PROGRESS_GATE_MAX - Duration::from_millis(1))),
            []
        );
        assert_eq!(
            finals(&f.tick(ms(t0, 2000) + PROGRESS_GATE_MAX)),
            [(2, vec![])]
        );
    }

    /// A server that begins a progress and never ends it: at the gate it is forgotten, so
    /// status no longer says "indexing" and the tokens do not pile up; one ended later counts
    /// as an end again.
    #[test]
    fn a_progress_never_ended_is_forgotten_at_the_gate() {
        let (mut f, p, t0) = pushing(Pushes::MayBePartial);
        let late = ms(t0, 1000) + PROGRESS_GATE_MAX;
        f.progress("a".into(), true, t0);
        f.progress("b".into(), true, ms(t0, 1000));
        assert_eq!(f.tick(t0).next, Some(late));
        f.tick(t0 + PROGRESS_GATE_MAX);
        assert!(f.progressing(), "b is younger");
        assert_eq!(f.progress.len(), 1);
        f.tick(late);
        assert!(!f.progressing());
        assert!(f.progress.is_empty());
        assert_eq!(f.settled_at, None, "no end the quiet period waits for");
        f.progress("c".into(), true, ms(late, 100));
        f.progress("c".into(), false, ms(late, 200));
        assert_eq!(f.settled_at, Some(ms(late, 200)));
        f.pushed(&p, Some(1), vec![item(1)], ms(late, 100));
        assert_eq!(finals(&f.tick(ms(late, 499))), []);
        assert_eq!(finals(&f.tick(ms(late, 500))), [(1, vec![1])]);
    }

    fn pulling(source: Source) -> (Finality, PathBuf, Instant) {
        let mut f = Finality::new(QUIET);
        f.configure(source, Pushes::MayBePartial);
        let p = PathBuf::from("/w/a.py");
        f.sent(&p, 1);
        (f, p, Instant::now())
    }

    fn one_pull(f: &mut Finality, now: Instant) -> u64 {
        let s = f.tick(now);
        assert_eq!(s.pulls.len(), 1, "{:?}", s.pulls);
        s.pulls[0].id
    }

    #[test]
    fn a_pull_answered_during_work_in_progress_is_asked_again_after_it() {
        let (mut f, p, t0) = pulling(Source::Pull(None));
        let id = one_pull(&mut f, t0);
        assert_eq!(f.tick(t0).pulls, [], "one pull in flight at a time");
        f.progress("load".into(), true, ms(t0, 10));
        f.answered(&p, id, Ok(Some(vec![])), ms(t0, 20)).unwrap();
        let s = f.tick(ms(t0, 20));
        assert_eq!((s.finals.len(), s.pulls.len()), (0, 0), "busy: not final");
        f.progress("load".into(), false, ms(t0, 500));
        let id = one_pull(&mut f, ms(t0, 500));
        f.answered(&p, id, Ok(Some(vec![item(4)])), ms(t0, 600))
            .unwrap();
        assert_eq!(finals(&f.tick(ms(t0, 600))), [(1, vec![4])]);
        // Pushes of a pulled server do not count.
        f.pushed(&p, Some(1), vec![item(8)], ms(t0, 700));
        assert_eq!(f.tick(ms(t0, 2000)).finals, []);
    }

    #[test]
    fn a_cancelled_pull_is_retried_and_a_failed_one_falls_back_to_pushes() {
        let (mut f, p, t0) = pulling(Source::Pull(Some("id".into())));
        let id = one_pull(&mut f, t0);
        let cancelled = ResponseError {
            code: crate::rpc::ErrorCode::ServerCancelled as i64,
            message: "busy".into(),
            data: None,
        };
        f.answered(&p, id, Err(cancelled), ms(t0, 10)).unwrap();
        let s = f.tick(ms(t0, 10));
        assert_eq!((s.pulls.len(), s.next), (0, Some(ms(t0, 210))));
        let id = one_pull(&mut f, ms(t0, 210));
        let failed = ResponseError {
            code: crate::rpc::ErrorCode::InternalError as i64,
            message: "no".into(),
            data: None,
        };
        assert_eq!(
            f.answered(&p, id, Err(failed), ms(t0, 220)),
            Err("no".into())
        );
        assert_eq!(*f.source(), Source::Push);
        f.pushed(&p, Some(1), vec![item(0)], ms(t0, 230));
        assert_eq!(finals(&f.tick(ms(t0, 530))), [(1, vec![0])]);
    }

    /// Another file's change can change this one's diagnostics: a pulled result is asked
    /// again when the file is wanted after it, and a waiter waits for that newer answer.
    #[test]
    fn a_pulled_result_is_only_as_fresh_as_the_changes_before_it() {
        let (mut f, a, t0) = pulling(Source::Pull(None));
        let id = one_pull(&mut f, t0);
        f.answered(&a, id, Ok(Some(vec![])), t0).unwrap();
        assert_eq!(finals(&f.tick(t0)), [(1, vec![])]);
        let b = PathBuf::from("/w/b.py");
        f.sent(&b, 2);
        let _ = one_pull(&mut f, t0);
        let epoch = f.touched(&a);
        assert_eq!(f.satisfied(&a, 1, epoch), Some(false));
        let s = f.tick(t0);
        let again = s.pulls.iter().find(|p| p.path == a).expect("a asked again");
        // Its answer is the same as before: no second final result, yet the waiter is done.
        f.answered(&a, again.id, Ok(Some(vec![])), t0).unwrap();
        assert_eq!(finals(&f.tick(t0)), []);
        assert_eq!(f.satisfied(&a, 1, epoch), Some(true));
    }

    #[test]
    fn tsserver_parts_make_one_result_and_a_stale_one_is_dropped() {
        let (mut f, p, t0) = pulling(Source::Tsserver);
        let id = one_pull(&mut f, t0);
        f.answered(&p, id, Ok(Some(vec![item(0)])), t0).unwrap();
        f.answered(&p, id, Ok(Some(vec![])), t0).unwrap();
        assert_eq!(f.tick(t0).finals, [], "two parts of three");
        f.answered(&p, id, Ok(Some(vec![item(5)])), t0).unwrap();
        assert_eq!(finals(&f.tick(t0)), [(1, vec![0, 5])]);
        // Changed while asking: the answer is for the older version; the newer is asked next.
        f.sent(&p, 2);
        let id = one_pull(&mut f, t0);
        f.sent(&p, 3);
        for _ in 0..3 {
            f.answered(&p, id, Ok(Some(vec![item(1)])), t0).unwrap();
        }
        let s = f.tick(t0);
        assert_eq!((s.finals.len(), s.pulls.len()), (0, 1));
        assert_eq!(f.satisfied(&p, 3, 0), Some(false));
        let id = s.pulls[0].id;
        for _ in 0..3 {
            f.answered(&p, id, Ok(Some(vec![])), t0).unwrap();
        }
        assert_eq!(finals(&f.tick(t0)), [(3, vec![])]);
    }

    /// A server that registers pull diagnostics after its documents were opened: they are
    /// pulled, and what they had published no longer counts. A process that dies takes its
    /// pending results with it.
    #[test]
    fn a_registration_switches_to_pulls_and_a_dead_process_leaves_nothing_pending() {
        let (mut f, p, t0) = pushing(Pushes::MayBePartial);
        f.pushed(&p, Some(1), vec![item(1)], t0);
        f.set_source(Source::Pull(Some("x".into())));
        let s = f.tick(ms(t0, 1000));
        assert_eq!((s.finals.len(), s.pulls.len()), (0, 1));
        f.gone();
        f.configure(Source::Push, Pushes::MayBePartial);
        f.sent(&p, 1);
        f.pushed(&p, Some(1), vec![item(2)], ms(t0, 1000));
        f.gone();
        assert_eq!(
            f.tick(ms(t0, 5000)).finals,
            [],
            "the publish went with the process"
        );
        assert_eq!(f.satisfied(&p, 1, 0), Some(false));
    }
}
