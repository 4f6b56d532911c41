//! What another local user can reach: the folders ccide writes a command into (`ccide plugin
//! install`) and the lock folder, lock file and control socket its clients follow are refused
//! unless they are our own; acting as another user is uid 65534 (files chowned to it, or a
//! process run with setpriv), which needs root.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::util::*;

/// A stand-in for `claude`: says it is 2.1.330, records each run's arguments in
/// `claude-runs.txt` (one line per run) and does nothing else.
fn fake_claude(sb: &Sandbox) -> PathBuf {
    let runs = sb.root.join("claude-runs.txt");
    sb.script(
        "fake-claude",
        &format!(
            "echo \"$*\" >> '{}'\n[ \"$1\" = --version ] && echo '2.1.330 (Claude Code)'\nexit 0",
            runs.display()
        ),
    )
}

fn claude_runs(sb: &Sandbox) -> String {
    std::fs::read_to_string(sb.root.join("claude-runs.txt")).unwrap_or_default()
}

/// `ccide plugin install` in the sandbox with the stand-in claude.
fn plugin_install(sb: &Sandbox) -> Output {
    let claude = fake_claude(sb);
    sb.command(&["plugin", "install"])
        .env("CCIDE_CLAUDE", &claude)
        .output()
        .unwrap()
}

fn marketplace(sb: &Sandbox) -> PathBuf {
    sb.home().join(".local/share/ccide/claude-marketplace")
}

/// The install was refused with exit 1 and a message naming `path` and saying `says`; no
/// plugin was written and claude was not asked to install anything.
fn assert_install_refused(sb: &Sandbox, o: &Output, path: &Path, says: &str) {
    let err = stderr(o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("the plugin folder {}", path.display())) && err.contains(says),
        "{err}"
    );
    assert!(
        !claude_runs(sb).contains("plugin"),
        "claude was asked to install: {}",
        claude_runs(sb)
    );
}

#[test]
fn plugin_install_refuses_a_marketplace_that_is_a_symlink() {
    let sb = Sandbox::new();
    let elsewhere = sb.root.join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    let market = marketplace(&sb);
    std::fs::create_dir_all(market.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(&elsewhere, &market).unwrap();
    let o = plugin_install(&sb);
    assert_install_refused(&sb, &o, &market, "is a symbolic link");
    assert!(stderr(&o).contains("remove the link"), "{}", stderr(&o));
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
    // The plugin's own folder, inside a real marketplace, is refused as a link too.
    std::fs::remove_file(&market).unwrap();
    std::fs::create_dir_all(&market).unwrap();
    std::os::unix::fs::symlink(&elsewhere, market.join("ccide")).unwrap();
    let o = plugin_install(&sb);
    assert_install_refused(&sb, &o, &market.join("ccide"), "is a symbolic link");
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
}

#[test]
fn plugin_install_refuses_a_folder_writable_by_others() {
    // The folder holding the marketplace, the marketplace, the plugin, its manifest's folder.
    for pick in [
        |m: &Path| m.parent().unwrap().to_path_buf(),
        |m: &Path| m.to_path_buf(),
        |m: &Path| m.join("ccide"),
        |m: &Path| m.join("ccide/.claude-plugin"),
    ] {
        let sb = Sandbox::new();
        let dir = pick(&marketplace(&sb));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
        let o = plugin_install(&sb);
        assert_install_refused(&sb, &o, &dir, "writable by group or others");
        assert!(
            stderr(&o).contains(&format!("chmod 700 {}", dir.display())),
            "{}",
            stderr(&o)
        );
        assert!(
            !marketplace(&sb)
                .join("ccide/.claude-plugin/plugin.json")
                .exists()
        );
    }
}

#[test]
#[ignore = "needs root, to give a folder to uid 65534: .ci/run runs it as root"]
fn plugin_install_refuses_a_folder_of_another_user() {
    assert!(is_root(), "only root can chown a folder to another user");
    let sb = Sandbox::new();
    let market = marketplace(&sb);
    std::fs::create_dir_all(&market).unwrap();
    std::os::unix::fs::chown(&market, Some(65534), Some(65534)).unwrap();
    let o = plugin_install(&sb);
    assert_install_refused(&sb, &o, &market, "belongs to uid 65534");
    assert!(!market.join(".claude-plugin").exists());
}

/// Under umask 0 the folders ccide creates for the plugin are still private (0700).
#[test]
fn plugin_install_creates_private_folders_whatever_the_umask() {
    let sb = Sandbox::new();
    let claude = fake_claude(&sb);
    let cmd = sb.command(&["plugin", "install"]);
    let envs: Vec<_> = cmd
        .get_envs()
        .map(|(k, v)| (k.to_owned(), v.unwrap().to_owned()))
        .collect();
    let o = Command::new("/bin/sh")
        .args(["-c", "umask 0 && exec \"$0\" plugin install", BIN])
        .env_clear()
        .envs(envs)
        .env("CCIDE_CLAUDE", &claude)
        .current_dir(sb.ws())
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let market = marketplace(&sb);
    for d in [
        market.parent().unwrap().to_path_buf(),
        market.clone(),
        market.join(".claude-plugin"),
        market.join("ccide"),
        market.join("ccide/.claude-plugin"),
    ] {
        let m = std::fs::metadata(&d).unwrap();
        assert_eq!(m.mode() & 0o777, 0o700, "{}", d.display());
    }
    assert!(claude_runs(&sb).contains("plugin install ccide@ccide"));
}
