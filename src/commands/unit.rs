//! `ccide unit`: systemd user units that run `ccide serve` with readiness, watchdog, restarts
//! and sandboxing that still lets it write its lock directory, its state and the workspace.

use std::path::{Path, PathBuf};

use crate::cli::{Args, EXIT_OK, Fail, Outcome};

/// `systemd-escape --path`: '/' becomes '-', bytes outside [A-Za-z0-9:_.] (and a leading '.')
/// become `\xNN`.
pub fn escape_path(path: &str) -> String {
    let parts: Vec<&str> = path.split('/').filter(|p| !p.is_empty()).collect();
    if parts.is_empty() {
        return "-".into();
    }
    let joined = parts.join("/");
    let mut out = String::new();
    for (i, b) in joined.bytes().enumerate() {
        match b {
            b'/' => out.push('-'),
            b'.' if i == 0 => out.push_str("\\x2e"),
            b if b.is_ascii_alphanumeric() || b == b':' || b == b'_' || b == b'.' => {
                out.push(b as char)
            }
            b => out.push_str(&format!("\\x{b:02x}")),
        }
    }
    out
}

/// A word of ExecStart=, quoted when systemd would otherwise split or expand it.
fn exec_word(w: &str) -> String {
    if w.bytes()
        .all(|b| b.is_ascii_alphanumeric() || b"/._-:%".contains(&b))
    {
        w.to_string()
    } else {
        format!(
            "\"{}\"",
            w.replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('%', "%%")
        )
    }
}

const SANDBOX: &str = "\
NoNewPrivileges=yes
ProtectSystem=strict
PrivateTmp=yes
RestrictAddressFamilies=AF_INET AF_INET6 AF_UNIX
RestrictNamespaces=yes
RestrictRealtime=yes
LockPersonality=yes
SystemCallArchitectures=native
";

fn service(description: &str, exec: &str, state: &str, writable: &[String]) -> String {
    format!(
        "[Unit]\nDescription={description}\nDocumentation=man:ccide(1)\n\n\
         [Service]\nType=notify\nExecStart={exec}\nRestart=on-failure\nRestartSec=1\nWatchdogSec=30\n\
         StateDirectory={state}\n\
         # Writable besides the state: the lock directory and the workspace. Checkers that write\n\
         # elsewhere (cargo's registry, caches) need their directories added here.\n\
         ReadWritePaths=-%h/.claude {}\n{SANDBOX}\n\
         [Install]\nWantedBy=default.target\n",
        writable.join(" ")
    )
}

/// The template: one instance per workspace, named by its escaped path.
pub fn template(binary: &Path) -> String {
    let exec = format!(
        "{} serve --workspace %f --state-dir %S/ccide/%i",
        exec_word(&binary.to_string_lossy())
    );
    service(
        "ccide, an IDE server for Claude Code, in %f",
        &exec,
        "ccide",
        &["%f".into()],
    )
}

/// A unit for a fixed set of workspace folders.
pub fn plain(binary: &Path, workspaces: &[PathBuf]) -> String {
    let mut exec = vec![exec_word(&binary.to_string_lossy()), "serve".into()];
    for w in workspaces {
        exec.push("--workspace".into());
        exec.push(exec_word(&w.to_string_lossy()));
    }
    let names: Vec<String> = workspaces.iter().map(|w| w.display().to_string()).collect();
    service(
        &format!(
            "ccide, an IDE server for Claude Code, in {}",
            names.join(", ")
        ),
        &exec.join(" "),
        &format!("ccide/{}", crate::lockfile::workspace_id(workspaces)),
        &workspaces
            .iter()
            .map(|w| exec_word(&w.to_string_lossy()))
            .collect::<Vec<_>>(),
    )
}

pub fn command(args: &Args) -> Outcome {
    if let Some(extra) = args.operands.first() {
        return Err(Fail::Usage(format!("unexpected argument '{extra}'")));
    }
    let binary = std::env::current_exe()
        .and_then(std::fs::canonicalize)
        .map_err(|e| Fail::Failed(format!("cannot tell where this ccide binary is: {e}")))?;
    let given = args.values("--workspace");
    let mut workspaces = Vec::new();
    for d in &given {
        workspaces.push(
            crate::files::canonical_dir(Path::new(d))
                .map_err(|e| Fail::Usage(format!("invalid value for --workspace: {e}")))?,
        );
    }
    let (name, text, enable) = if workspaces.is_empty() {
        let cwd = crate::control::current_dir()?;
        let instance = escape_path(&cwd.to_string_lossy());
        (
            "ccide@.service".to_string(),
            template(&binary),
            format!("ccide@{instance}.service"),
        )
    } else {
        let name = format!(
            "ccide-{}.service",
            crate::lockfile::workspace_id(&workspaces)
        );
        (name.clone(), plain(&binary, &workspaces), name)
    };
    let steps = format!(
        "systemctl --user daemon-reload\nsystemctl --user enable --now '{enable}'\n\
         loginctl enable-linger \"$USER\"   # keep it running while you are logged out\n"
    );
    if !args.switch("--install")? {
        println!("# {name}; install with `ccide unit --install`, then:");
        for l in steps.lines() {
            println!("#   {l}");
        }
        print!("{text}");
        return Ok(EXIT_OK);
    }
    let dir = crate::lockfile::env_dir("XDG_CONFIG_HOME", ".config")
        .ok_or_else(|| Fail::Failed("HOME is not set: cannot find ~/.config/systemd/user".into()))?
        .join("systemd/user");
    std::fs::create_dir_all(&dir)
        .map_err(|e| Fail::Failed(format!("cannot create {}: {e}", dir.display())))?;
    let path = dir.join(&name);
    crate::files::write_atomic(&path, text.as_bytes(), 0o644)
        .map_err(|e| Fail::Failed(format!("cannot write {}: {e}", path.display())))?;
    println!("wrote {}; now run:\n{steps}", path.display());
    Ok(EXIT_OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escaping_matches_systemd_escape_path() {
        assert_eq!(
            escape_path("/home/me/my project-x/ä.b"),
            "home-me-my\\x20project\\x2dx-\\xc3\\xa4.b"
        );
        assert_eq!(escape_path("/srv/.hidden"), "srv-.hidden");
        assert_eq!(escape_path("/.dot//x/"), "\\x2edot-x");
        assert_eq!(escape_path("/"), "-");
    }
}
