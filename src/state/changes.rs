//! Review after the fact (ccide-protocol(7) §15): what Claude's tools changed, recorded by the
//! plugin's hooks as the file's content before and after each call (its before-image and
//! after-image), per session and turn; each change is reviewed hunk by hunk, and an undone hunk
//! is the reverse of Claude's hunk applied to the file as it is now.
//!
//! Images are blobs in `changes/` of the state directory, named by a hash of their content
//! (the same content is stored once); the index (`INDEXES`) lists the changes. When the blobs
//! pass `Settings::max_bytes`, the oldest turns go first. Only workspace files are read.

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::io::{self, ErrorKind};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Map, Value};

use crate::files::{Stamp, stamp};
use crate::json::{self, obj};
use crate::proc::lock;
use crate::review::Review;
use crate::textdiff::{Op, diff_lines, lines};
use crate::workspaces::Workspaces;

use super::watched::Watched;

/// The largest file recorded (readFile's limit).
const MAX_FILE: u64 = 16 << 20;
/// Tool calls begun and not yet ended that are remembered (a call that failed never ends).
const MAX_PENDING: usize = 64;

pub struct Settings {
    /// `--review-store`: the most the images may take, in bytes.
    pub max_bytes: u64,
    /// `--review-gate`: the Stop hook holds the end of a turn until its changes are reviewed.
    pub gate: bool,
}

impl Default for Settings {
    fn default() -> Settings {
        Settings {
            max_bytes: 256 << 20,
            gate: false,
        }
    }
}

pub struct Changes {
    dir: PathBuf,
    pub settings: Settings,
    inner: Mutex<Inner>,
    /// Whether `dir` was made (private): not asked again at every blob.
    made: AtomicBool,
}

/// The index, written to each of these in turn, in place, numbered (`seq`): a crash while one
/// is written leaves the other, one save older; a new file per save cost an inode allocation,
/// most of a hook's time on a busy file system. `index.json` is an older version's.
const INDEXES: [&str; 3] = ["index-0.json", "index-1.json", "index.json"];

/// How an undo writes a workspace file: its new content, or None to remove it.
pub type WriteFile<'a> = dyn Fn(&Path, Option<&[u8]>) -> io::Result<()> + 'a;

/// A file's image: the name of its blob, None when the file did not exist.
type Image = Option<String>;

#[derive(Default)]
struct Inner {
    /// The index: the saves so far, the next change's id, each session's turn, the changes
    /// oldest first.
    seq: u64,
    next: u64,
    turns: Map<String, Value>,
    list: Vec<Value>,
    /// What the blobs take on disk.
    bytes: u64,
    /// Tool calls begun: their id and, for an edit, its file and image before the tool ran
    /// (a command's files are `known`'s).
    pending: Vec<(String, Option<(PathBuf, Image)>)>,
    /// Each recorded file's latest image, its stamp then, and whether it is watched.
    known: HashMap<PathBuf, (Option<Stamp>, Image, bool)>,
    watched: Watched,
}

impl Changes {
    pub fn open(state_dir: &Path, settings: Settings) -> Changes {
        let dir = state_dir.join("changes");
        let mut inner = Inner::default();
        let newest = INDEXES
            .iter()
            .filter_map(|n| serde_json::from_slice::<Value>(&std::fs::read(dir.join(n)).ok()?).ok())
            .max_by_key(|v| v["seq"].as_u64());
        if let Some(v) = newest {
            inner.seq = v["seq"].as_u64().unwrap_or(0);
            inner.next = v["next"].as_u64().unwrap_or(0);
            inner.turns = v["turns"].as_object().cloned().unwrap_or_default();
            inner.list = v["changes"].as_array().cloned().unwrap_or_default();
        }
        for e in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            inner.bytes += e.metadata().map_or(0, |m| m.len());
        }
        Changes {
            dir,
            settings,
            inner: Mutex::new(inner),
            made: AtomicBool::new(false),
        }
    }

    /// A session's prompt: its next turn begins. Returns what the model is to be told.
    pub fn prompt(&self, ws: &Workspaces, session: &str) -> Vec<String> {
        let mut i = lock(&self.inner);
        let n = i.turns.get(session).and_then(Value::as_u64).unwrap_or(0) + 1;
        i.turns.insert(session.into(), n.into());
        let told = self.notices(&mut i, ws, session);
        self.save(&mut i);
        told
    }

    /// What the model of `session` is to be told now (the end of a turn held for review).
    pub fn tell(&self, ws: &Workspaces, session: &str) -> Vec<String> {
        let mut i = lock(&self.inner);
        let told = self.notices(&mut i, ws, session);
        self.save(&mut i);
        told
    }

    /// Before a tool runs: the image of the file an edit names; for a command (`file` None),
    /// of each file known (recorded, or in `extra`) whose stamp moved since its latest image.
    pub fn before(&self, ws: &Workspaces, call: &str, file: Option<PathBuf>, extra: &[PathBuf]) {
        let mut i = lock(&self.inner);
        let taken = match file {
            Some(f) => match self.image(&mut i, ws, &f) {
                Ok(image) => Some((f, image)),
                // Not recorded (outside the workspace, too large): the call is not watched.
                Err(()) => return,
            },
            None => {
                let mut look = look(&mut i, ws);
                look.extend(extra.iter().filter(|f| !i.known.contains_key(*f)).cloned());
                for f in look {
                    let _ = self.image(&mut i, ws, &f);
                }
                None
            }
        };
        // A call of the same key begun before and never ended (it failed, or its hook gave
        // up) is over: an edit's key is its session and file when its id was not read.
        i.pending.retain(|p| p.0 != call);
        if i.pending.len() >= MAX_PENDING {
            i.pending.remove(0);
        }
        i.pending.push((call.into(), taken));
    }

    /// A file Claude read: known from now on, with its image.
    pub fn seen(&self, ws: &Workspaces, file: &Path) {
        let _ = self.image(&mut lock(&self.inner), ws, file);
    }

    /// After a tool ran: a change for each file whose content it changed (for a command, each
    /// known file whose stamp moved). Returns what the model is to be told, and the changes
    /// recorded (their id and file).
    pub fn after(
        &self,
        ws: &Workspaces,
        session: &str,
        call: &str,
        tool: &str,
    ) -> (Vec<String>, Vec<(u64, Value)>) {
        let mut i = lock(&self.inner);
        let Some(k) = i.pending.iter().position(|p| p.0 == call) else {
            return (self.notices(&mut i, ws, session), Vec::new());
        };
        let taken = match i.pending.remove(k).1 {
            Some(edit) => vec![edit],
            None => look(&mut i, ws)
                .into_iter()
                .filter_map(|f| {
                    let k = &i.known[&f];
                    (stamp(&f) != k.0).then(|| (f.clone(), k.1.clone()))
                })
                .collect(),
        };
        let turn = i.turns.get(session).and_then(Value::as_u64).unwrap_or(0);
        let mut recorded = Vec::new();
        for (file, before) in taken {
            let Ok(after) = self.image(&mut i, ws, &file) else {
                continue;
            };
            if after == before {
                continue;
            }
            let id = i.next;
            i.next += 1;
            recorded.push((id, json::path(&file)));
            i.list.push(
                obj! {"id": id, "session": session, "turn": turn, "tool": tool,
                "file": json::path(&file), "before": before, "after": after,
                "time": crate::text::now_secs(), "hunks": Map::new()},
            );
        }
        self.prune(&mut i);
        // A turn over the store's size on its own is pruned at once.
        recorded.retain(|r| i.list.iter().any(|c| c["id"] == r.0));
        let told = self.notices(&mut i, ws, session);
        self.save(&mut i);
        (told, recorded)
    }

    /// The file's image now, stored; Err when it cannot be read (outside the workspace, too
    /// large): it is not recorded. A file whose stamp has not moved since its latest image is
    /// not read again. Its folders are watched first, so that a change after this has an
    /// event; a file with other hard links (written by another name) is looked at every time.
    fn image(&self, i: &mut Inner, ws: &Workspaces, file: &Path) -> Result<Image, ()> {
        let watched = ws
            .holder(file)
            .is_some_and(|top| i.watched.watch(&top, file));
        let now = stamp(file);
        let watched = watched && now.is_none_or(|s| s.links == 1);
        let last = i.known.get(file).cloned();
        if let Some((Some(s), image, _)) = &last
            && now == Some(*s)
        {
            i.known.insert(file.into(), (now, image.clone(), watched));
            return Ok(image.clone());
        }
        let bytes = match ws.read(file, MAX_FILE) {
            Ok(b) => b,
            Err(e) if e.kind() == ErrorKind::NotFound => {
                i.known.insert(file.into(), (None, None, watched));
                return Ok(None);
            }
            Err(_) => return Err(()),
        };
        let base = last.and_then(|l| l.1);
        let name = self.put(i, &bytes, base.as_deref()).map_err(|_| ())?;
        i.known
            .insert(file.into(), (now, Some(name.clone()), watched));
        Ok(Some(name))
    }

    /// Stores `bytes` once, as the blob named by their hash (or beside it on a collision):
    /// whole, or as the lines that differ from the image `base` (`NAME.d`) when that is less
    /// than half. A delta's base is always stored whole (the base of a delta `base` is taken
    /// instead), so an image is read from at most two blobs.
    fn put(&self, i: &mut Inner, bytes: &[u8], base: Option<&str>) -> io::Result<String> {
        self.make_dir()?;
        // Eight bytes at a time: images are up to 16 MiB, and each edit's is hashed.
        let hash = crate::textdiff::hash_line(0, bytes);
        let mut k = 0;
        let name = loop {
            let name = format!("{hash:016x}-{k}");
            match self.read(&name) {
                Some(old) if old == bytes => return Ok(name),
                Some(_) => k += 1,
                None => break name,
            }
        };
        let base = base.map(|b| self.base(b).unwrap_or_else(|| b.to_string()));
        let delta = base.and_then(|b| Some((self.read(&b)?, b)));
        let (path, body) = match delta {
            Some((old, b)) => {
                let mut d = format!("{b}\n").into_bytes();
                let (o, n) = (lines(&old), lines(bytes));
                for op in diff_lines(&o, &n) {
                    match op {
                        Op::Equal { old, len, .. } => d.extend(format!("={old} {len}\n").bytes()),
                        Op::Insert { new, len } => {
                            let text = n[new..new + len].concat();
                            d.extend(format!("+{}\n", text.len()).bytes());
                            d.extend(text);
                        }
                        Op::Delete { .. } => {}
                    }
                }
                match d.len() < bytes.len() / 2 {
                    true => (format!("{name}.d"), d),
                    false => (name.clone(), bytes.to_vec()),
                }
            }
            _ => (name.clone(), bytes.to_vec()),
        };
        crate::files::write_volatile(&self.dir.join(path), &body, 0o600)?;
        i.bytes += body.len() as u64;
        Ok(name)
    }

    /// The image a delta `name` is stored against; None for an image stored whole.
    fn base(&self, name: &str) -> Option<String> {
        let d = std::fs::read(self.dir.join(format!("{name}.d"))).ok()?;
        let head = lines(&d).first()?.strip_suffix(b"\n")?;
        Some(String::from_utf8_lossy(head).into_owned())
    }

    /// Image `name`'s content: its blob, or its delta applied to its base.
    fn read(&self, name: &str) -> Option<Vec<u8>> {
        if let Ok(b) = std::fs::read(self.dir.join(name)) {
            return Some(b);
        }
        let d = std::fs::read(self.dir.join(format!("{name}.d"))).ok()?;
        let nl = d.iter().position(|&b| b == b'\n')?;
        let base = std::fs::read(self.dir.join(std::str::from_utf8(&d[..nl]).ok()?)).ok()?;
        let old = lines(&base);
        let (mut out, mut at) = (Vec::new(), nl + 1);
        while at < d.len() {
            let end = at + d[at..].iter().position(|&b| b == b'\n')?;
            let op = std::str::from_utf8(&d[at + 1..end]).ok()?;
            at = end + 1;
            if d[end - op.len() - 1] == b'+' {
                let n: usize = op.parse().ok()?;
                out.extend_from_slice(d.get(at..at + n)?);
                at += n;
            } else {
                let (o, n) = op.split_once(' ')?;
                let (o, n): (usize, usize) = (o.parse().ok()?, n.parse().ok()?);
                out.extend(old.get(o..o + n)?.concat());
            }
        }
        Some(out)
    }

    fn blob(&self, image: &Value) -> Vec<u8> {
        image
            .as_str()
            .and_then(|n| self.read(n))
            .unwrap_or_default()
    }

    /// The oldest turns go until the blobs fit, then the blobs no change needs.
    fn prune(&self, i: &mut Inner) {
        if i.bytes <= self.settings.max_bytes {
            return;
        }
        let mut sizes: HashMap<String, u64> = HashMap::new();
        for e in std::fs::read_dir(&self.dir).into_iter().flatten().flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if !INDEXES.contains(&name.as_str()) {
                sizes.insert(name, e.metadata().map_or(0, |m| m.len()));
            }
        }
        // The images changes and calls begun need, and the bases of those stored as deltas.
        let used = |i: &Inner| -> HashSet<String> {
            let images = i.list.iter().flat_map(|c| [&c["before"], &c["after"]]);
            let pending = i.pending.iter().flat_map(|p| p.1.iter().map(|t| &t.1));
            let known = i.known.values().map(|k| &k.1);
            let mut todo: Vec<String> = images
                .filter_map(|v| v.as_str().map(String::from))
                .chain(pending.chain(known).flatten().cloned())
                .collect();
            let mut keep = HashSet::new();
            while let Some(n) = todo.pop() {
                if let (Some(b), true) = (self.base(&n), keep.insert(n)) {
                    todo.push(b);
                }
            }
            keep
        };
        let size = |n: &String| sizes.get(n).or(sizes.get(&format!("{n}.d"))).copied();
        loop {
            let keep = used(i);
            let total: u64 = keep.iter().filter_map(size).sum();
            if total <= self.settings.max_bytes || i.list.is_empty() {
                break;
            }
            let key = (i.list[0]["session"].clone(), i.list[0]["turn"].clone());
            i.list
                .retain(|c| (c["session"].clone(), c["turn"].clone()) != key);
            // The images of files no change holds any more are not kept for them either.
            let files: HashSet<&str> = i.list.iter().filter_map(|c| c["file"].as_str()).collect();
            let files: HashSet<PathBuf> = files.into_iter().map(PathBuf::from).collect();
            i.known.retain(|f, _| files.contains(f));
        }
        let keep = used(i);
        for (name, size) in sizes {
            let image = name.strip_suffix(".d").unwrap_or(&name);
            if !keep.contains(image) && std::fs::remove_file(self.dir.join(&name)).is_ok() {
                i.bytes = i.bytes.saturating_sub(size);
            }
        }
    }

    /// Makes the store's folder, private, unless it was made; it is made again if it went.
    fn make_dir(&self) -> io::Result<()> {
        if !self.made.load(Ordering::Relaxed) || !self.dir.is_dir() {
            crate::files::private_dir(&self.dir, "review store").map_err(io::Error::other)?;
            self.made.store(true, Ordering::Relaxed);
        }
        Ok(())
    }

    fn save(&self, i: &mut Inner) {
        i.seq += 1;
        let v = obj! {"seq": i.seq, "next": i.next, "turns": i.turns.clone(), "changes": i.list.clone()};
        let path = self.dir.join(INDEXES[(i.seq % 2) as usize]);
        let write = || -> io::Result<()> {
            self.make_dir()?;
            let mut f = std::fs::OpenOptions::new();
            let mut f = f
                .write(true)
                .create(true)
                .truncate(true)
                .mode(0o600)
                .open(path)?;
            f.write_all(v.to_string().as_bytes())
        };
        let _ = write();
    }

    /// The changes `which` selects, each with its hunks (`hunks`: number, text, state, why)
    /// and, with `content`, its before and after text.
    pub fn list(&self, which: &Which, content: bool) -> Vec<Value> {
        let i = lock(&self.inner);
        let latest = |s: &Value| {
            i.list
                .iter()
                .rev()
                .find(|c| c["session"] == *s)
                .map(|c| c["turn"].clone())
        };
        let mut out = Vec::new();
        for c in &i.list {
            let s = &c["session"];
            let picked = which
                .session
                .as_ref()
                .is_none_or(|w| s.as_str().is_some_and(|s| s.starts_with(w.as_str())))
                && match which.turn {
                    Some(t) => c["turn"] == t,
                    None => which.all || latest(s) == Some(c["turn"].clone()),
                };
            if !picked {
                continue;
            }
            let (before, after) = (self.blob(&c["before"]), self.blob(&c["after"]));
            let review = Review::new(before.clone(), after.clone());
            let hunks: Vec<Value> = review
                .pieces
                .iter()
                .enumerate()
                .map(|(n, p)| {
                    let d = &c["hunks"][(n + 1).to_string()];
                    let state = match &d["state"] {
                        Value::Null => parts_state(&c["hunks"], n + 1, p),
                        s => s.clone(),
                    };
                    obj! {"hunk": n + 1, "text": String::from_utf8_lossy(&p.text()).into_owned(),
                    "state": state, "why": d["why"].clone()}
                })
                .collect();
            let mut v = c.clone();
            v["hunks"] = hunks.into();
            v["new_file"] = c["before"].is_null().into();
            if content {
                v["before"] = String::from_utf8_lossy(&before).into_owned().into();
                v["after"] = String::from_utf8_lossy(&after).into_owned().into();
            } else if let Some(m) = v.as_object_mut() {
                m.remove("before");
                m.remove("after");
            }
            out.push(v);
        }
        out
    }

    /// Keeps, undoes or rewrites hunks of change `id` (numbers from 1; with a part, that part
    /// of the hunk split as `Review::split` splits it), with a reason. Undoing applies the
    /// reverse of Claude's hunk to the file as it is now, rewriting puts the user's lines in
    /// place of Claude's; keeping a hunk undone before applies it again. Refused whole, the
    /// file untouched, when a hunk's lines changed since.
    pub fn decide(
        &self,
        ws: &Workspaces,
        write: &WriteFile<'_>,
        id: u64,
        hunks: &[(usize, usize)],
        verdict: &Verdict,
        why: Option<&str>,
    ) -> Result<Value, String> {
        let mut i = lock(&self.inner);
        let Some(k) = i.list.iter().position(|c| c["id"] == id) else {
            return Err(format!(
                "no recorded change {id}: ccide review --all lists them"
            ));
        };
        let c = i.list[k].clone();
        let file = PathBuf::from(c["file"].as_str().unwrap_or(""));
        let (before, after) = (self.blob(&c["before"]), self.blob(&c["after"]));
        let mut now = match ws.read(&file, MAX_FILE) {
            Ok(b) => Some(b),
            Err(e) if e.kind() == ErrorKind::NotFound => None,
            Err(e) => return Err(format!("cannot read {}: {e}", file.display())),
        };
        let start = now.clone();
        let mut keys = Vec::new();
        for &(h, part) in hunks {
            let key = hunk_key(h, part);
            let Some(p) = piece(&before, &after, h, part) else {
                return Err(format!("change {id} has no hunk {key}"));
            };
            let state = &c["hunks"][&key]["state"];
            if state == "edited" {
                return Err(format!(
                    "hunk {key} of change {id} was rewritten: change it in {} itself",
                    file.display()
                ));
            }
            keys.push(key.clone());
            // Already so.
            if match verdict {
                Verdict::Undo => state == "undone",
                Verdict::Keep => state != "undone",
                Verdict::Rewrite(_) => false,
            } {
                continue;
            }
            let side = |k: char| -> Vec<&[u8]> {
                p.lines
                    .iter()
                    .filter(|l| l.0 != k)
                    .map(|l| &l.1[..])
                    .collect()
            };
            let written;
            let (image, lo, from, to) = match verdict {
                Verdict::Undo => (&after, p.new_lo, side('-'), side('+')),
                Verdict::Rewrite(lines) => {
                    written = as_written(&side('-'), lines);
                    let to = written.iter().map(|l| &l[..]).collect();
                    (&after, p.new_lo, side('-'), to)
                }
                Verdict::Keep => (&before, p.old_lo, side('+'), side('-')),
            };
            let cur = now.clone().unwrap_or_default();
            now = Some(swap(image, lo, &from, &to, &cur).ok_or_else(|| {
                format!(
                    "hunk {key} of change {id} was not {}: lines {}-{} of {} changed since {}; nothing was written",
                    match verdict {
                        Verdict::Keep => "restored",
                        _ => verdict.state(),
                    },
                    lo + 1,
                    lo + from.len(),
                    file.display(),
                    if image == &after { "Claude wrote them" } else { "it was undone" }
                )
            })?);
        }
        if now != start {
            // A file Claude created and every line of it undone is removed.
            let gone = c["before"].is_null() && now.as_deref() == Some(b"");
            write(&file, now.as_deref().filter(|_| !gone))
                .map_err(|e| format!("cannot write {}: {e}", file.display()))?;
        }
        for key in keys {
            let d = &mut i.list[k]["hunks"][&key];
            // Kept as Claude wrote it: nothing for the model to hear.
            let told = matches!(verdict, Verdict::Keep) && d["state"] != "undone";
            *d = obj! {"state": verdict.state(), "why": why, "told": told};
            if let Verdict::Rewrite(lines) = verdict {
                d["text"] = String::from_utf8_lossy(&lines.concat()).into_owned().into();
            }
        }
        let mut v = c.clone();
        v["hunks"] = i.list[k]["hunks"].clone();
        self.save(&mut i);
        Ok(v)
    }

    /// How many hunks of `session`'s current turn nobody decided yet.
    pub fn undecided(&self, session: &str) -> usize {
        let turn = lock(&self.inner).turns.get(session).and_then(Value::as_u64);
        let which = Which {
            session: Some(session.into()),
            turn: Some(turn.unwrap_or(0)),
            all: false,
        };
        let list = self.list(&which, false);
        let hunks = list
            .iter()
            .flat_map(|c| c["hunks"].as_array().cloned().unwrap_or_default());
        hunks.filter(|h| h["state"].is_null()).count()
    }

    /// What the model of `session` has not been told: each hunk undone or restored since,
    /// from then on told.
    fn notices(&self, i: &mut Inner, ws: &Workspaces, session: &str) -> Vec<String> {
        let mut out = Vec::new();
        for c in i.list.iter_mut().filter(|c| c["session"] == session) {
            let file = ws.rel(Path::new(c["file"].as_str().unwrap_or("")));
            let tool = c["tool"].as_str().unwrap_or("change").to_string();
            let images_of = (c["before"].clone(), c["after"].clone());
            let Some(m) = c["hunks"].as_object_mut() else {
                continue;
            };
            let mut images = None;
            for (n, d) in m.iter_mut().filter(|(_, d)| d["told"] == false) {
                d["told"] = true.into();
                let why = d["why"]
                    .as_str()
                    .map_or(String::new(), |w| format!(" (reason: {w})"));
                let (b, a) = images
                    .get_or_insert_with(|| (self.blob(&images_of.0), self.blob(&images_of.1)));
                let (h, part) = n.split_once('.').unwrap_or((n, "0"));
                let p = piece(b, a, h.parse().unwrap_or(0), part.parse().unwrap_or(0));
                // Named by where it is in what Claude wrote: the user's number counts in
                // their listing, which the model never saw.
                let at = p
                    .as_ref()
                    .map_or(String::new(), |p| format!(" at {}", p.new_lines()));
                let text = p.map_or(String::new(), |p| {
                    String::from_utf8_lossy(&p.text()).into_owned()
                });
                let text = text.trim_end();
                out.push(match (d["state"].as_str(), d["text"].as_str()) {
                    (Some("kept"), _) => format!("The user restored your {tool} of {file}{at}, which they had undone{why}."),
                    (_, Some(rewrite)) => format!("The user rewrote your {tool} of {file}{at} after you made it{why}:\n{text}\nto:\n{}", rewrite.trim_end()),
                    _ => format!("The user undid your {tool} of {file}{at} after you made it{why}; the file no longer has it:\n{text}"),
                });
            }
        }
        out
    }
}

/// Which changes a listing shows: by default every session's latest turn.
#[derive(Default)]
pub struct Which {
    pub session: Option<String>,
    pub turn: Option<u64>,
    pub all: bool,
}

/// What the user makes of a recorded hunk.
pub enum Verdict {
    Keep,
    Undo,
    /// The user's lines in place of Claude's (the hunk's new side, context included).
    Rewrite(Vec<Vec<u8>>),
}

impl Verdict {
    /// The hunk's state once so decided.
    fn state(&self) -> &'static str {
        match self {
            Verdict::Keep => "kept",
            Verdict::Undo => "undone",
            Verdict::Rewrite(_) => "edited",
        }
    }
}

/// A hunk's name in a change's record: its number, or `N.P` for part P of hunk N split.
/// The known files a command may have changed since they were last looked at: those events
/// named, and those not watched. They are watched again before they are looked at (an event
/// may have ended their folder's watch).
fn look(i: &mut Inner, ws: &Workspaces) -> Vec<PathBuf> {
    let named = i.watched.take();
    let mut look = Vec::new();
    for (f, k) in i.known.iter_mut().filter(|(f, k)| !k.2 || named.has(f)) {
        let watched = ws.holder(f).is_some_and(|top| i.watched.watch(&top, f));
        k.2 = watched && k.0.is_none_or(|s| s.links == 1);
        look.push(f.clone());
    }
    // Listed in the order of their paths.
    crate::text::sort_by_bytes(&mut look, |f| f.as_os_str().as_encoded_bytes().to_vec());
    look
}

fn hunk_key(h: usize, part: usize) -> String {
    match part {
        0 => h.to_string(),
        _ => format!("{h}.{part}"),
    }
}

/// Hunk `h` (from 1) of Claude's change `before` to `after`, or with `part` (from 1) that
/// part of it split; None when there is no such hunk or part.
fn piece(before: &[u8], after: &[u8], h: usize, part: usize) -> Option<crate::review::Piece> {
    let mut r = Review::new(before.to_vec(), after.to_vec());
    let i = h.checked_sub(1).filter(|&i| i < r.pieces.len())?;
    if part == 0 {
        return Some(r.pieces.swap_remove(i));
    }
    let n = r.split(i);
    (n > 1 && part <= n).then(|| r.pieces.swap_remove(i + part - 1))
}

/// The state of hunk `h`, `p`, decided part by part: `split` once each of its parts is.
fn parts_state(hunks: &Value, h: usize, p: &crate::review::Piece) -> Value {
    let mut r = Review::new(Vec::new(), Vec::new());
    r.pieces.push(p.clone());
    let n = r.split(0);
    let all = n > 1 && (1..=n).all(|k| !hunks[hunk_key(h, k)]["state"].is_null());
    if all { "split".into() } else { Value::Null }
}

/// The user's `lines` with the line ending of the lines they replace: each bare LF made CRLF
/// when every one of `old` ends with CRLF.
fn as_written(old: &[&[u8]], lines: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let crlf = !old.is_empty() && old.iter().all(|l| l.ends_with(b"\r\n"));
    let fix = |l: &Vec<u8>| match l.strip_suffix(b"\n") {
        Some(body) if crlf && !body.ends_with(b"\r") => [body, b"\r\n"].concat(),
        _ => l.clone(),
    };
    lines.iter().map(fix).collect()
}

/// `cur` with the lines `from`, which start at line `lo` of `image`, replaced by `to`; None
/// when those lines are not in `cur` as they are in `image` (changed, or gone).
fn swap(image: &[u8], lo: usize, from: &[&[u8]], to: &[&[u8]], cur: &[u8]) -> Option<Vec<u8>> {
    let at = crate::review::placed(image, cur, &[(lo, from.len())])[0]?;
    let new = lines(cur);
    let mut out = Vec::with_capacity(cur.len());
    for l in new[..at].iter().chain(to).chain(&new[at + from.len()..]) {
        out.extend_from_slice(l);
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The index is saved to two files in turn, in place: the newer that parses is read, so
    /// a save cut short leaves the one before; an older version's `index.json` is read too.
    #[test]
    fn the_newest_whole_index_is_read_and_saves_take_turns() {
        let dir = std::env::temp_dir().join(format!("ccide-index-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let store = dir.join("changes");
        std::fs::create_dir_all(&store).unwrap();
        let next = |c: &Changes| lock(&c.inner).next;
        std::fs::write(
            store.join("index.json"),
            r#"{"next": 3, "turns": {}, "changes": []}"#,
        )
        .unwrap();
        assert_eq!(next(&Changes::open(&dir, Settings::default())), 3);
        std::fs::write(store.join("index-0.json"), r#"{"seq": 4, "next": 5}"#).unwrap();
        std::fs::write(store.join("index-1.json"), r#"{"seq": 5, "next": 7, "chan"#).unwrap();
        let c = Changes::open(&dir, Settings::default());
        assert_eq!(next(&c), 5);
        c.save(&mut lock(&c.inner));
        let saved: Value =
            serde_json::from_slice(&std::fs::read(store.join("index-1.json")).unwrap()).unwrap();
        assert_eq!(
            (saved["seq"].clone(), saved["next"].clone()),
            (5.into(), 5.into())
        );
        c.save(&mut lock(&c.inner));
        assert_eq!(next(&Changes::open(&dir, Settings::default())), 5);
        let files = |n: &str| {
            std::fs::read(store.join(n))
                .map(|b| serde_json::from_slice::<Value>(&b).unwrap()["seq"].clone())
        };
        assert_eq!(
            (
                files("index-0.json").unwrap(),
                files("index-1.json").unwrap()
            ),
            (6.into(), 5.into())
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Images stored as deltas read back byte for byte, whatever their line endings, each
    /// against an image stored whole.
    #[test]
    fn a_delta_reads_back_exactly_against_a_whole_image() {
        let dir = std::env::temp_dir().join(format!("ccide-changes-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let c = Changes::open(&dir, Settings::default());
        let mut i = Inner::default();
        let mut text: Vec<u8> = (0..200)
            .flat_map(|l| format!("line {l}\r\n").into_bytes())
            .collect();
        text.extend_from_slice(b"\xEF\xBB\xBFno newline");
        let mut base = c.put(&mut i, &text, None).unwrap();
        for edit in 0..40 {
            let at = 9 * (edit % 20) + 3;
            text.splice(at..at + 1, format!("{edit}\n").into_bytes());
            let name = c.put(&mut i, &text, Some(&base)).unwrap();
            assert_eq!(c.read(&name).as_deref(), Some(&text[..]), "edit {edit}");
            if let Some(b) = c.base(&name) {
                assert_eq!(c.base(&b), None, "{name} is against a delta");
            }
            base = name;
        }
        // Mostly deltas: far less than 41 whole copies.
        assert!(i.bytes < 10 * text.len() as u64, "{} bytes", i.bytes);
        // The same content again is the same image.
        assert_eq!(c.put(&mut i, &text, None).unwrap(), base);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
