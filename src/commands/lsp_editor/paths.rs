//! `--path-map HOST=REMOTE`: the editor on one side of a boundary (a container, an SSH
//! connection), `ccide lsp` on the other, where the same files have other paths. Every
//! message from the editor and every message to it passes `PathMap::message` (ccide-protocol(7)
//! §12.6): each `file:` URI in it, and `rootPath`, is rewritten by the mapping whose folder
//! holds it most closely, component by component; one no mapping holds is left out of its
//! list, or refused.

use std::path::{Component, Path, PathBuf};

use serde_json::Value;

/// The mappings: the editor's folder, and the same folder here.
#[derive(Default, Debug)]
pub struct PathMap(Vec<(PathBuf, PathBuf)>);

/// Components only: no trailing or doubled slashes.
fn clean(p: &str) -> PathBuf {
    Path::new(p).components().collect()
}

impl PathMap {
    pub fn parse(specs: &[String]) -> Result<PathMap, String> {
        let mut map = Vec::new();
        for s in specs {
            let (h, r) = s
                .split_once('=')
                .filter(|(h, r)| h.starts_with('/') && r.starts_with('/'))
                .ok_or_else(|| {
                    format!("--path-map {s}: expected HOST=REMOTE, the folder as the editor names it and as ccide lsp sees it, both absolute")
                })?;
            map.push((clean(h), clean(r)));
        }
        Ok(PathMap(map))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `p` from the editor's side to this one (`here`), or back.
    pub fn path(&self, p: &Path, here: bool) -> Result<PathBuf, String> {
        let best = (self.0.iter())
            .map(|(h, r)| if here { (h, r) } else { (r, h) })
            .filter(|(from, _)| p.starts_with(from))
            .max_by_key(|(from, _)| from.components().count());
        match best {
            Some((from, to)) if !p.components().any(|c| c == Component::ParentDir) => {
                let rest = p.strip_prefix(from).unwrap_or(p);
                Ok(match rest.as_os_str().is_empty() {
                    true => to.clone(),
                    false => to.join(rest),
                })
            }
            _ => {
                let mut e = format!("{} is outside every --path-map (", p.display());
                for (k, (h, r)) in self.0.iter().enumerate() {
                    let sep = if k > 0 { ", " } else { "" };
                    e += &format!("{sep}{}={}", h.display(), r.display());
                }
                Err(e + ")")
            }
        }
    }

    /// Rewrites every path in `v` (`here`: from the editor's side), past one no mapping holds,
    /// which is left as it is, or out of its list, and said in the answer (the first one).
    pub fn message(&self, v: &mut Value, here: bool) -> Result<(), String> {
        let mut outside = Ok(());
        if !self.is_empty() {
            self.walk(v, "", here, &mut outside);
        }
        outside
    }

    fn walk(&self, v: &mut Value, key: &str, here: bool, outside: &mut Result<(), String>) {
        let new = match v {
            // An element naming a file outside is left out: a folder of several, a reference
            // among others.
            Value::Array(a) => {
                a.retain_mut(|x| {
                    let mut out = Ok(());
                    self.walk(x, key, here, &mut out);
                    let keep = out.is_ok();
                    if outside.is_ok() {
                        *outside = out;
                    }
                    keep
                });
                return;
            }
            Value::Object(o) => {
                // A URI may be a key too: a workspace edit's `changes`.
                for (k, mut x) in std::mem::take(o) {
                    self.walk(&mut x, &k, here, outside);
                    let mut name = Value::String(k);
                    self.walk(&mut name, "", here, outside);
                    o.insert(name.as_str().unwrap_or("").to_string(), x);
                }
                return;
            }
            // A document's text is never a path, whatever it says.
            Value::String(_) if matches!(key, "text" | "newText") => return,
            Value::String(s) if matches!(key, "rootPath" | "path") && s.starts_with('/') => self
                .path(Path::new(s), here)
                .map(|p| p.to_string_lossy().into_owned()),
            Value::String(s) => match crate::files::uri_path(s, true) {
                Some(p) => self.path(&p, here).map(|p| crate::files::file_uri(&p)),
                None => return,
            },
            _ => return,
        };
        match new {
            Ok(n) => *v = Value::String(n),
            Err(e) if outside.is_ok() => *outside = Err(e),
            Err(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn map(specs: &[&str]) -> PathMap {
        PathMap::parse(&specs.iter().map(|s| s.to_string()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn the_closest_mapping_wins_component_by_component_both_ways() {
        let m = map(&["/home/me/proj/=/work", "/home/me/proj/vendor=/opt/vendor//"]);
        let to = |p: &str, here| m.path(Path::new(p), here).map(|p| p.display().to_string());
        assert_eq!(
            to("/home/me/proj/src/a.rs", true).unwrap(),
            "/work/src/a.rs"
        );
        assert_eq!(to("/home/me/proj", true).unwrap(), "/work");
        assert_eq!(to("/home/me/proj/", true).unwrap(), "/work");
        assert_eq!(
            to("/home/me/proj/vendor/x.c", true).unwrap(),
            "/opt/vendor/x.c"
        );
        assert_eq!(
            to("/work/src/a.rs", false).unwrap(),
            "/home/me/proj/src/a.rs"
        );
        assert_eq!(to("/opt/vendor", false).unwrap(), "/home/me/proj/vendor");
        // A folder holds its own components only, and `..` never climbs out of one.
        let outside = "/home/me/projx/a.rs is outside every --path-map (/home/me/proj=/work, /home/me/proj/vendor=/opt/vendor)";
        assert_eq!(to("/home/me/projx/a.rs", true), Err(outside.to_string()));
        assert!(to("/workshop/a", false).is_err());
        assert!(to("/home/me/proj/../.ssh/id", true).is_err());
        // The root holds everything.
        let all = map(&["/=/host"]);
        assert_eq!(
            all.path(Path::new("/a b"), true).unwrap(),
            Path::new("/host/a b")
        );
    }

    #[test]
    fn a_mapping_is_two_absolute_paths() {
        for bad in ["/a", "a=/b", "/a=b", "=/b"] {
            let e = PathMap::parse(&[bad.to_string()]).unwrap_err();
            assert!(
                e.starts_with(&format!("--path-map {bad}: expected HOST=REMOTE")),
                "{e}"
            );
        }
        // The first `=` splits: the folder here may hold one.
        assert_eq!(
            map(&["/a=/b=c"]).0,
            [(PathBuf::from("/a"), PathBuf::from("/b=c"))]
        );
    }

    #[test]
    fn every_uri_is_rewritten_percent_encoding_included_and_one_outside_left_out_of_its_list() {
        let m = map(&["/Users/Me/My Proj=/work"]);
        let mut v = json!({"textDocument": {"uri": "file:///Users/Me/My%20Proj/%C3%A9.py",
            "text": "file:///Users/Me/My%20Proj/x"},
            "rootPath": "/Users/Me/My Proj", "rootUri": "untitled:1",
            "workspaceFolders": [{"uri": "file:///Users/Me/My%20Proj", "name": "p"}]});
        m.message(&mut v, true).unwrap();
        assert_eq!(
            v,
            json!({"textDocument": {"uri": "file:///work/%C3%A9.py",
                "text": "file:///Users/Me/My%20Proj/x"},
                "rootPath": "/work", "rootUri": "untitled:1",
                "workspaceFolders": [{"uri": "file:///work", "name": "p"}]})
        );
        let mut edit = json!({"edit": {"changes": {"file:///work/%C3%A9.py": [{"newText": "file:///work"}]}},
            "items": [{"uri": "file:///etc/passwd"}, {"uri": "file:///work/b"}, {"uri": "file:///usr/x"}]});
        let e = m.message(&mut edit, false).unwrap_err();
        assert_eq!(
            e,
            "/etc/passwd is outside every --path-map (/Users/Me/My Proj=/work)"
        );
        assert_eq!(
            edit,
            json!({"edit": {"changes": {"file:///Users/Me/My%20Proj/%C3%A9.py": [{"newText": "file:///work"}]}},
                "items": [{"uri": "file:///Users/Me/My%20Proj/b"}]})
        );
        // Without a mapping, nothing changes.
        let mut same = edit.clone();
        PathMap::default().message(&mut same, true).unwrap();
        assert_eq!(same, edit);
    }
}
