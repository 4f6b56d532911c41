//! Which of the files recorded for review may have changed since they were last looked at,
//! told by inotify (ccide-protocol(7) §15). Each file's folder and every folder above it up to
//! its workspace folder are watched: a file written, replaced, created, removed or moved is
//! named by an event in its folder, and a folder above it removed or moved by an event of its
//! own. A command's scan then looks again only at the files named since, not at every file.
//! A file that is not watched (no inotify, too many folders, a folder missing) is looked at
//! every time.

use std::collections::HashSet;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::sys::Inotify;

/// The most folders watched: the watches are the user's, shared with editors and language
/// servers.
const MAX_FOLDERS: usize = 1024;

pub struct Watched {
    inotify: Option<Inotify>,
    /// Each watch's folder and number, ordered by the folder's path.
    folders: Vec<(PathBuf, i32)>,
}

/// What the events since the last `take` named.
#[derive(Default)]
pub struct Named {
    /// Every file: the events did not all fit in the queue.
    pub all: bool,
    pub files: HashSet<PathBuf>,
    /// Folders removed or moved, whose files are all to be looked at.
    pub folders: Vec<PathBuf>,
}

impl Named {
    pub fn has(&self, file: &Path) -> bool {
        self.all || self.files.contains(file) || self.folders.iter().any(|d| file.starts_with(d))
    }
}

impl Default for Watched {
    fn default() -> Watched {
        Watched {
            inotify: Inotify::new().ok(),
            folders: Vec::new(),
        }
    }
}

impl Watched {
    fn find(&self, dir: &Path) -> Result<usize, usize> {
        let key = dir.as_os_str().as_bytes();
        self.folders
            .binary_search_by(|f| f.0.as_os_str().as_bytes().cmp(key))
    }

    /// Watches the folders of `file`, from `top` (its workspace folder) down. False when it
    /// is not watched: it is then to be looked at every time. Called before the file is looked
    /// at, so that a change after the look has an event.
    pub fn watch(&mut self, top: &Path, file: &Path) -> bool {
        let Some(inotify) = &self.inotify else {
            return false;
        };
        let Some(dir) = file.parent().filter(|d| d.starts_with(top)) else {
            return false;
        };
        // A folder is watched only after the folders above it, and forgotten with them.
        let mut missing: Vec<&Path> = dir
            .ancestors()
            .take_while(|d| d.starts_with(top) && self.find(d).is_err())
            .collect();
        if self.folders.len() + missing.len() > MAX_FOLDERS {
            return false;
        }
        while let Some(d) = missing.pop() {
            let Ok(wd) = inotify.watch_dir(d) else {
                return false;
            };
            let at = self.find(d).unwrap_or_else(|at| at);
            self.folders.insert(at, (d.into(), wd));
        }
        true
    }

    /// What the events since the last call named. The watches of folders removed or moved
    /// are forgotten (their paths no longer name them), with those of the folders below.
    pub fn take(&mut self) -> Named {
        let mut named = Named::default();
        let Some(inotify) = &self.inotify else {
            return named;
        };
        inotify.events(|wd, gone, name| {
            if wd < 0 {
                named.all = true;
            }
            for (dir, _) in self.folders.iter().filter(|f| f.1 == wd) {
                if gone {
                    named.folders.push(dir.clone());
                } else if !name.is_empty() {
                    named.files.insert(dir.join(OsStr::from_bytes(name)));
                }
            }
        });
        for gone in &named.folders {
            self.folders.retain(|(d, wd)| {
                let below = d.starts_with(gone);
                if below {
                    inotify.unwatch(*wd);
                }
                !below
            });
        }
        named
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir(label: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("ccide-watched-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(d.join("a")).unwrap();
        d
    }

    #[test]
    fn only_the_files_events_named_are_named_and_a_full_queue_names_every_file() {
        let top = dir("queue");
        let (f, g) = (top.join("a/f"), top.join("a/g"));
        let mut w = Watched::default();
        assert!(w.watch(&top, &f) && w.watch(&top, &g));
        assert_eq!(w.folders.len(), 2);
        std::fs::write(&f, "x").unwrap();
        let named = w.take();
        assert!(named.has(&f) && !named.has(&g) && !named.all);
        assert!(!w.take().has(&f));
        // More events than the kernel queues (16,384 by default).
        let max: usize = std::fs::read_to_string("/proc/sys/fs/inotify/max_queued_events")
            .map_or(16384, |m| m.trim().parse().unwrap());
        let (x, y) = (top.join("a/x"), top.join("a/y"));
        std::fs::write(&x, "").unwrap();
        for _ in 0..=max / 2 {
            std::fs::rename(&x, &y).unwrap();
            std::fs::rename(&y, &x).unwrap();
        }
        assert!(w.take().has(&g));
        std::fs::remove_dir_all(&top).unwrap();
    }

    #[test]
    fn a_folder_moved_names_its_files_and_ends_the_watches_below_it() {
        let top = dir("moved");
        std::fs::create_dir(top.join("a/b")).unwrap();
        let f = top.join("a/b/f");
        let mut w = Watched::default();
        assert!(w.watch(&top, &f));
        std::fs::rename(top.join("a"), top.join("c")).unwrap();
        let named = w.take();
        assert!(named.has(&f) && !named.has(&top.join("x")));
        assert_eq!(w.folders.len(), 1);
        // A file whose folder is missing is not watched; outside `top`, neither.
        assert!(!w.watch(&top, &f));
        assert!(!w.watch(&top.join("a"), &top.join("f")));
        std::fs::create_dir_all(top.join("a/b")).unwrap();
        assert!(w.watch(&top, &f));
        std::fs::write(&f, "x").unwrap();
        assert!(w.take().has(&f));
        std::fs::remove_dir_all(&top).unwrap();
    }
}
