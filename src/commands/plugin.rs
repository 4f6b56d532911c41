//! ccide's plugin for Claude Code: a plugin directory whose `lspServers` map the extensions of
//! ccide's language servers to `ccide lsp-bridge`, so that the model's `LSP` tool asks the warm
//! servers of `ccide serve` instead of starting its own, cold, in every session
//! (ccide-protocol(7) §13). `ccide claude` passes it with `--plugin-dir`; `ccide plugin
//! install` installs it for plain `claude` through a local marketplace.
//!
//! The manifest depends on the CLI's version: plugins with language servers came with 2.0.74,
//! and a manifest is validated strictly, so the `diagnostics` key is written only for CLIs
//! known to take it (2.1.112 refuses the whole `lspServers` for it: "Invalid input").

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use crate::cli::{Args, Command, EXIT_OK, Fail, Outcome};
use crate::control::Control;
use crate::control::protocol::Request;

pub const COMMAND: Command = Command {
    name: "plugin",
    usage: "ccide plugin [install | uninstall]",
    about: "Install ccide's plugin for claude: its LSP tool asks ccide's language servers.",
    details: "install writes a marketplace in ~/.local/share/ccide and runs `claude plugin marketplace add`\nand `claude plugin install` (Claude Code 2.0.74 or later); uninstall undoes it.",
    flags: &[],
    run,
    passthrough: false,
};

/// A Claude Code version, major.minor.patch.
pub type Version = [u32; 3];

/// The first CLI with the `LSP` tool, language servers in plugins and `--plugin-dir`
/// (2.0.73 already validates `lspServers` but has no tool to use them).
pub const PLUGIN_SINCE: Version = [2, 0, 74];
/// The first CLI known to take `"diagnostics": false` in a plugin's language server: 2.1.112
/// refuses it (its schema is strict and has no such key), 2.1.330 has it.
pub const DIAGNOSTICS_KEY_SINCE: Version = [2, 1, 330];

/// The first CLI known to run a plugin's hooks in exec form (`command` and `args`, no shell):
/// 2.1.332 has it; 2.1.112 runs a hook's `command` through a shell only, and gets none
/// (ccide-protocol(7) §13.6).
pub const EXEC_HOOKS_SINCE: Version = [2, 1, 332];

const NAME: &str = "ccide";

/// `X.Y.Z` at the start of `text` ("2.1.330 (Claude Code)"); what follows the third number
/// ("-beta.1") is ignored.
pub fn parse_version(text: &str) -> Option<Version> {
    let mut parts = text.split(|c: char| !c.is_ascii_digit());
    let mut v = [0; 3];
    for n in &mut v {
        *n = parts.next()?.parse().ok()?;
    }
    Some(v)
}

fn show(v: Version) -> String {
    format!("{}.{}.{}", v[0], v[1], v[2])
}

/// One language server entry of the plugin: its name and the extensions it maps.
#[derive(Debug, PartialEq)]
pub struct Entry {
    pub name: String,
    pub extensions: Vec<String>,
}

/// The extension a file pattern names (`*.ts`, `src/**/*.d.ts`: `.ts`), as the CLI maps
/// files: by the text after the last dot of the name. None for a pattern without one.
fn extension_of(pattern: &str) -> Option<String> {
    let name = pattern.rsplit('/').next()?;
    let (_, ext) = name.rsplit_once('.')?;
    let plain = !ext.is_empty() && !ext.bytes().any(|b| matches!(b, b'*' | b'?' | b'['));
    plain.then(|| format!(".{}", ext.to_ascii_lowercase()))
}

/// The LSP language id of an extension, as ccide's documents name languages.
fn language_of(ext: &str) -> String {
    match crate::files::language_id(Path::new(&format!("x{ext}"))) {
        "plaintext" => ext[1..].to_string(),
        id => id.to_string(),
    }
}

/// One entry per server (its file patterns), named after the language of its first
/// extension. An extension two servers name goes to the first, in the CLI (it says so in its
/// debug log) as in serve.
pub fn entries(servers: Vec<Vec<&str>>) -> Vec<Entry> {
    let mut out: Vec<Entry> = Vec::new();
    for patterns in servers {
        let mut extensions: Vec<String> = Vec::new();
        for ext in patterns.iter().filter_map(|p| extension_of(p)) {
            if !extensions.contains(&ext) {
                extensions.push(ext);
            }
        }
        let Some(first) = extensions.first() else {
            continue;
        };
        let mut name = language_of(first);
        if out.iter().any(|e| e.name == name) {
            name = format!("{name}-{}", out.len() + 1);
        }
        out.push(Entry { name, extensions });
    }
    out
}

/// The entries for ccide's built-in language servers (the `--lsp` built-ins of `ccide
/// serve`), for a plugin that is not tied to one workspace: one per language of the profiles.
pub fn builtin_entries() -> Vec<Entry> {
    entries(
        crate::langservers::languages()
            .into_iter()
            .map(<[&str]>::to_vec)
            .collect(),
    )
}

/// The entries for the language servers a running serve has (its `status`).
fn served_entries(status: &Value) -> Vec<Entry> {
    let mut servers = Vec::new();
    for s in status["status"]["language_servers"]
        .as_array()
        .into_iter()
        .flatten()
    {
        let mut patterns = Vec::new();
        for p in s["patterns"].as_array().into_iter().flatten() {
            patterns.extend(p.as_str());
        }
        servers.push(patterns);
    }
    entries(servers)
}

/// `.claude-plugin/plugin.json` for a CLI of version `cli`: each entry runs `ccide
/// lsp-bridge` (`ccide` being the absolute path of this executable). Written as text: the
/// keys in the order people read them, and smaller in the binary than building a Map.
pub fn manifest(ccide: &str, entries: &[Entry], cli: Version) -> String {
    let q = |s: &str| Value::from(s).to_string();
    // No publishDiagnostics handler in the CLI: getDiagnostics, which it awaits, is the one
    // source of diagnostics.
    let diagnostics = if cli >= DIAGNOSTICS_KEY_SINCE {
        ",\n      \"diagnostics\": false"
    } else {
        ""
    };
    let mut servers = Vec::new();
    for e in entries {
        let languages: Vec<String> = e
            .extensions
            .iter()
            .map(|x| format!("{}: {}", q(x), q(&language_of(x))))
            .collect();
        servers.push(format!(
            "    {}: {{\n      \"command\": {},\n      \"args\": [\"lsp-bridge\", \"--client\", \"Claude Code {}\", \"--extensions\", {}, \"--no-diagnostics\"],\n      \"extensionToLanguage\": {{{}}}{diagnostics}\n    }}",
            q(&e.name),
            q(ccide),
            show(cli),
            q(&e.extensions.join(",")),
            languages.join(", ")
        ));
    }
    let mut parts = Vec::new();
    if !servers.is_empty() {
        parts.push(format!(
            "  \"lspServers\": {{\n{}\n  }}",
            servers.join(",\n")
        ));
    }
    if cli >= EXEC_HOOKS_SINCE {
        parts.push(hooks(&q(ccide)));
    }
    format!(
        "{{\n  \"name\": \"{NAME}\",\n  \"version\": \"{}\",\n  \"description\": \"The LSP tool on the language servers ccide serve keeps warm; what you say of Claude's edits, told to Claude.\",\n{}\n}}\n",
        env!("CARGO_PKG_VERSION"),
        parts.join(",\n")
    )
}

/// The manifest's `hooks`: `ccide hook` around the tools that change files, at each prompt
/// and at the end of each turn, in exec form (no shell between the CLI and ccide). `ccide`
/// is quoted as JSON. Stop may wait for a review (serve --review-gate): a day.
fn hooks(ccide: &str) -> String {
    let hook = |event: &str, timeout: u32| {
        format!(
            "{{\"type\": \"command\", \"command\": {ccide}, \"args\": [\"hook\", \"{event}\"], \"timeout\": {timeout}}}"
        )
    };
    // After a Read too: a file Claude read is known, so a command's change of it is seen.
    let tools = "\"matcher\": \"Edit|Write|MultiEdit|NotebookEdit|Bash";
    format!(
        "  \"hooks\": {{\n    \"PreToolUse\": [{{{tools}\", \"hooks\": [{}]}}],\n    \"PostToolUse\": [{{{tools}|Read\", \"hooks\": [{}]}}],\n    \"UserPromptSubmit\": [{{\"hooks\": [{}]}}],\n    \"Stop\": [{{\"hooks\": [{}]}}]\n  }}",
        hook("pre-tool-use", 5),
        hook("post-tool-use", 5),
        hook("user-prompt-submit", 5),
        hook("stop", 86400)
    )
}

/// Makes `dir` a private folder of ours to write the plugin in, or refuses it: the plugin
/// names the `command` Claude Code runs, so nobody else may change what is written there. A
/// missing folder is created with mode 0700 whatever the umask; an existing one must be a real
/// folder (not a symlink, which would lead the writes elsewhere), ours, and not writable by
/// group or others (`files::private_dir`, the rule of the state and lock directories).
fn plugin_folder(dir: &Path) -> Result<(), String> {
    if let Ok(m) = std::fs::symlink_metadata(dir)
        && m.file_type().is_symlink()
    {
        let to = std::fs::read_link(dir)
            .map(|t| format!(" to {}", t.display()))
            .unwrap_or_default();
        return Err(format!(
            "refusing the plugin folder {}: it is a symbolic link{to}; ccide writes the plugin whose command Claude Code runs only into a real folder of yours: remove the link and run the command again",
            dir.display()
        ));
    }
    crate::files::private_dir(dir, "plugin folder")
}

/// Writes `DIR/.claude-plugin/NAME`, a plugin's or a marketplace's manifest, `DIR` and its
/// `.claude-plugin` being plugin folders (`plugin_folder`).
fn write_manifest(dir: &Path, name: &str, text: &str) -> Result<(), String> {
    let meta = dir.join(".claude-plugin");
    plugin_folder(dir)?;
    plugin_folder(&meta)?;
    let path = meta.join(name);
    // Renamed into place: a CLI starting meanwhile reads the old or the new one, whole.
    crate::files::write_volatile(&path, text.as_bytes(), 0o644)
        .map_err(|e| format!("cannot write {}: {e}", path.display()))
}

fn this_executable() -> Result<String, String> {
    std::env::current_exe()
        .map(|p| p.to_string_lossy().into_owned())
        .map_err(|e| format!("cannot find ccide's own executable: {e}"))
}

/// The version of the Claude Code that `program` runs: the package.json of an npm install,
/// which costs no start of the CLI, else `program --version`.
pub fn cli_version(program: &str) -> Option<Version> {
    let path = if program.contains('/') {
        PathBuf::from(program)
    } else {
        crate::proc::find_on_path(program)?
    };
    let real = std::fs::canonicalize(&path).ok()?;
    installed_version(&real).or_else(|| parse_version(&claude(program, &["--version"]).ok()?))
}

/// The version of the npm package a file belongs to (`bin/claude.exe` from 2.1.113, `cli.js`
/// before): a node-based CLI takes a second to say its version. A native one (the native
/// installer's `versions/X.Y.Z`, Homebrew's) says it in 30 ms.
fn installed_version(real: &Path) -> Option<Version> {
    let dir = real
        .ancestors()
        .skip(1)
        .take(3)
        .find(|d| d.join("package.json").is_file())?;
    let pkg: Value = serde_json::from_slice(&std::fs::read(dir.join("package.json")).ok()?).ok()?;
    if !pkg["name"]
        .as_str()?
        .starts_with("@anthropic-ai/claude-code")
    {
        return None;
    }
    parse_version(pkg["version"].as_str()?)
}

/// For `ccide claude`: the plugin directory for the servers of the serve at `control`, in its
/// state directory, when the CLI that `program` runs takes plugins and serve has servers; the
/// `--plugin-dir` argument to put first. None otherwise, or (said on stderr) when it cannot be
/// made: Claude Code then runs as before.
pub fn for_claude(program: &str, control: &Path, state: &Path) -> Option<String> {
    let version = cli_version(program).filter(|v| *v >= PLUGIN_SINCE)?;
    let dir = state.join(if version >= EXEC_HOOKS_SINCE {
        "claude-plugin-2.1.332"
    } else if version >= DIAGNOSTICS_KEY_SINCE {
        "claude-plugin-2.1.330"
    } else {
        "claude-plugin-2.0.74"
    });
    let made = (|| {
        let status = Control::open(control)
            .map_err(|e| e.to_string())?
            .request(&Request::Status)?;
        let entries = served_entries(&status);
        // Without language servers the plugin still carries the hooks, for a CLI that runs them.
        if entries.is_empty() && version < EXEC_HOOKS_SINCE {
            return Ok(false);
        }
        let text = manifest(&this_executable()?, &entries, version);
        write_manifest(&dir, "plugin.json", &text).map(|_| true)
    })();
    match made {
        Ok(true) => Some(format!("--plugin-dir={}", dir.display())),
        Ok(false) => None,
        Err(e) => {
            eprintln!("ccide: cannot give Claude Code ccide's plugin ({e}); it runs without");
            None
        }
    }
}

/// `$CCIDE_CLAUDE`, else `claude`: the CLI `ccide claude` and `ccide plugin` run.
pub fn claude_program() -> String {
    std::env::var("CCIDE_CLAUDE")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "claude".into())
}

/// Where `ccide plugin install` keeps its marketplace.
fn marketplace_dir() -> Result<PathBuf, Fail> {
    let data = crate::lockfile::env_dir("XDG_DATA_HOME", ".local/share").ok_or_else(|| {
        Fail::Failed("cannot choose where to put the plugin: HOME is unset".into())
    })?;
    Ok(data.join("ccide/claude-marketplace"))
}

pub fn run(args: &Args) -> Outcome {
    let action = args.operands.first().map(String::as_str).unwrap_or("");
    if let Some(extra) = args.operands.get(1) {
        return Err(Fail::Usage(format!("unexpected argument '{extra}'")));
    }
    let program = claude_program();
    let dir = marketplace_dir()?;
    match action {
        "install" => install(&program, &dir),
        "uninstall" => uninstall(&program, &dir),
        other => Err(Fail::Usage(format!(
            "ccide plugin takes install or uninstall, not '{other}'"
        ))),
    }
}

/// Runs `program ARGS` (`--version`, a `claude plugin ...` command): its standard output,
/// or why it failed with its standard error.
fn claude(program: &str, args: &[&str]) -> Result<String, String> {
    let mut cmd = std::process::Command::new(program);
    cmd.args(args);
    let line = format!("{program} {}", args.join(" "));
    let ran = crate::proc::run(
        cmd,
        None,
        &std::env::temp_dir(),
        Duration::from_secs(120),
        1 << 16,
    )
    .map_err(|e| {
        format!("cannot run {line}: {e} (install Claude Code, or set CCIDE_CLAUDE to its path)")
    })?;
    let text = |b: &[u8]| String::from_utf8_lossy(b).trim().to_string();
    match ran.status {
        Some(s) if s.success() => Ok(text(&ran.stdout)),
        _ => Err(format!(
            "{line} failed: {}",
            crate::text::visible(&text(&ran.stderr))
        )),
    }
}

/// The local marketplace's `marketplace.json`: one plugin, ccide's.
fn market_manifest() -> String {
    format!(
        "{{\n  \"name\": \"{NAME}\",\n  \"owner\": {{\"name\": \"{NAME}\"}},\n  \"plugins\": [{{\"name\": \"{NAME}\", \"source\": \"./{NAME}\", \"version\": \"{}\"}}]\n}}\n",
        env!("CARGO_PKG_VERSION")
    )
}

fn install(program: &str, dir: &Path) -> Outcome {
    let said = claude(program, &["--version"])?;
    let version = parse_version(&said).ok_or_else(|| {
        format!("{program} --version printed no version: is it Claude Code? Set CCIDE_CLAUDE to its path")
    })?;
    if version < PLUGIN_SINCE {
        return Err(Fail::Failed(format!(
            "Claude Code {} has no plugin language servers ({} has): update it (claude update)",
            show(version),
            show(PLUGIN_SINCE)
        )));
    }
    let entries = builtin_entries();
    let text = manifest(&this_executable()?, &entries, version);
    // The folder that holds the marketplace too: whoever may write there could replace it.
    if let Some(parent) = dir.parent() {
        plugin_folder(parent)?;
    }
    write_manifest(dir, "marketplace.json", &market_manifest())?;
    write_manifest(&dir.join(NAME), "plugin.json", &text)?;
    let dir_arg = dir.to_string_lossy();
    claude(program, &["plugin", "marketplace", "add", &dir_arg])?;
    claude(program, &["plugin", "install", "ccide@ccide"])?;
    println!(
        "installed ccide's plugin for Claude Code {} (marketplace {})",
        show(version),
        dir.display()
    );
    Ok(EXIT_OK)
}

fn uninstall(program: &str, dir: &Path) -> Outcome {
    // Each step may have been undone already (by hand, or an earlier uninstall).
    let absent = |r: Result<String, String>| match r {
        Err(e) if !e.contains("not found") => Err(Fail::Failed(e)),
        _ => Ok(()),
    };
    absent(claude(program, &["plugin", "uninstall", "ccide@ccide"]))?;
    absent(claude(program, &["plugin", "marketplace", "remove", NAME]))?;
    match std::fs::remove_dir_all(dir) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(Fail::Failed(format!(
                "cannot remove {}: {e}",
                dir.display()
            )));
        }
        _ => {}
    }
    println!("uninstalled ccide's plugin from Claude Code");
    Ok(EXIT_OK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_from_what_the_cli_prints_and_installations_name() {
        assert_eq!(parse_version("2.1.330 (Claude Code)\n"), Some([2, 1, 330]));
        assert_eq!(parse_version("1.0.128"), Some([1, 0, 128]));
        assert_eq!(parse_version("2.2.0-beta.1"), Some([2, 2, 0]));
        assert_eq!(parse_version("claude"), None);
        assert_eq!(parse_version("2.1"), None);
        assert_eq!(parse_version(""), None);
        assert!([2, 0, 73] < PLUGIN_SINCE && [2, 0, 74] >= PLUGIN_SINCE);
        assert!([2, 1, 112] < DIAGNOSTICS_KEY_SINCE && [2, 10, 0] > DIAGNOSTICS_KEY_SINCE);
    }

    #[test]
    fn an_npm_installation_names_its_version_by_its_package() {
        let t = std::env::temp_dir().join(format!("ccide-plugin-version-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&t);
        let write = |rel: &str, text: &str| {
            let p = t.join(rel);
            std::fs::create_dir_all(p.parent().unwrap()).unwrap();
            std::fs::write(&p, text).unwrap();
            p
        };
        // npm, native (2.1.113 on): node_modules/@anthropic-ai/claude-code/bin/claude.exe
        write(
            "npm/claude-code/package.json",
            r#"{"name":"@anthropic-ai/claude-code","version":"2.1.330"}"#,
        );
        let exe = write("npm/claude-code/bin/claude.exe", "");
        assert_eq!(installed_version(&exe), Some([2, 1, 330]));
        // npm, node (up to 2.1.112): cli.js beside package.json
        write(
            "old/claude-code/package.json",
            r#"{"name":"@anthropic-ai/claude-code","version":"1.0.128"}"#,
        );
        let js = write("old/claude-code/cli.js", "");
        assert_eq!(installed_version(&js), Some([1, 0, 128]));
        // the native installer's binary belongs to no package: it is asked, fast
        let native = write("share/claude/versions/2.1.200", "");
        assert_eq!(installed_version(&native), None);
        // another package's file says nothing
        write(
            "other/pkg/package.json",
            r#"{"name":"claude-wrapper","version":"9.9.9"}"#,
        );
        let other = write("other/pkg/bin/claude", "");
        assert_eq!(installed_version(&other), None);
        let _ = std::fs::remove_dir_all(&t);
    }

    #[test]
    fn entries_map_each_extension_once_named_by_language() {
        let servers = [
            vec!["*.ts", "*.tsx", "src/**/*.d.ts"],
            vec!["*.py", "Makefile", "*"],
            vec!["*.lua"],
            vec!["*.pyi"],
            vec!["*.foo"],
            vec!["Dockerfile"],
        ];
        let e = entries(servers.to_vec());
        let got: Vec<(&str, Vec<&str>)> = e
            .iter()
            .map(|e| {
                (
                    e.name.as_str(),
                    e.extensions.iter().map(String::as_str).collect(),
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("typescript", vec![".ts", ".tsx"]),
                ("python", vec![".py"]),
                ("lua", vec![".lua"]),
                ("python-4", vec![".pyi"]),
                ("foo", vec![".foo"]),
            ]
        );
    }

    /// Every file pattern the built-in servers of `ccide serve` can have (all found, in a
    /// project with a Cargo.toml and a compile_commands.json) is in the plugin's table.
    #[test]
    fn the_builtin_table_covers_every_builtin_server() {
        let t = std::env::temp_dir().join(format!("ccide-plugin-builtins-{}", std::process::id()));
        std::fs::create_dir_all(&t).unwrap();
        std::fs::write(t.join("Cargo.toml"), "").unwrap();
        std::fs::write(t.join("compile_commands.json"), "[]").unwrap();
        let table: Vec<&str> = crate::langservers::languages().concat();
        let specs = crate::langservers::builtins(
            std::slice::from_ref(&t),
            &|p| Some(PathBuf::from(p)),
            true,
        );
        let _ = std::fs::remove_dir_all(&t);
        assert!(specs.len() > 10, "{specs:?}");
        for s in specs {
            assert!(
                table.contains(&s.pattern.as_str()),
                "{} is not in the plugin",
                s.pattern
            );
        }
    }

    #[test]
    fn the_manifest_has_hooks_in_exec_form_only_for_clis_that_run_them() {
        let e = entries(vec![vec!["*.py"]]);
        let hook = |event: &str, t: u32| serde_json::json!({"type": "command", "command": "/opt/cc ide", "args": ["hook", event], "timeout": t});
        let m: Value = serde_json::from_str(&manifest("/opt/cc ide", &e, [2, 1, 332])).unwrap();
        let tools = "Edit|Write|MultiEdit|NotebookEdit|Bash";
        assert_eq!(
            m["hooks"],
            serde_json::json!({
                "PreToolUse": [{"matcher": tools, "hooks": [hook("pre-tool-use", 5)]}],
                "PostToolUse": [{"matcher": format!("{tools}|Read"), "hooks": [hook("post-tool-use", 5)]}],
                "UserPromptSubmit": [{"hooks": [hook("user-prompt-submit", 5)]}],
                "Stop": [{"hooks": [hook("stop", 86400)]}],
            })
        );
        assert!(m["lspServers"]["python"].is_object());
        // Without language servers the hooks alone.
        let alone: Value = serde_json::from_str(&manifest("/opt/ccide", &[], [2, 1, 332])).unwrap();
        let keys: Vec<&String> = alone.as_object().unwrap().keys().collect();
        assert_eq!(keys, ["description", "hooks", "name", "version"]);
        for old in [[2, 1, 330], [2, 1, 112]] {
            let m: Value = serde_json::from_str(&manifest("/opt/ccide", &e, old)).unwrap();
            assert_eq!(m.get("hooks"), None, "{old:?}");
        }
    }

    #[test]
    fn the_manifest_has_the_diagnostics_key_only_for_clis_that_take_it() {
        let e = entries(vec![vec!["*.ts", "*.tsx"], vec!["*.py"]]);
        let new: Value = serde_json::from_str(&manifest("/opt/ccide", &e, [2, 1, 330])).unwrap();
        let ts = serde_json::json!({
            "command": "/opt/ccide",
            "args": ["lsp-bridge", "--client", "Claude Code 2.1.330", "--extensions", ".ts,.tsx", "--no-diagnostics"],
            "extensionToLanguage": {".ts": "typescript", ".tsx": "typescriptreact"},
            "diagnostics": false,
        });
        assert_eq!(new["lspServers"]["typescript"], ts);
        assert_eq!(new["lspServers"]["python"]["diagnostics"], false);
        assert_eq!(new["name"], "ccide");
        assert_eq!(new["version"], env!("CARGO_PKG_VERSION"));
        for old in [[2, 1, 112], [2, 0, 74]] {
            let m: Value = serde_json::from_str(&manifest("/opt/ccide", &e, old)).unwrap();
            let mut without = ts.clone();
            without.as_object_mut().unwrap().remove("diagnostics");
            without["args"][2] = format!("Claude Code {}", show(old)).into();
            assert_eq!(m["lspServers"]["typescript"], without, "{old:?}");
            // The keys a strict 2.0.74 and 2.1.112 know, and no other.
            for (_, s) in m["lspServers"].as_object().unwrap() {
                let keys: Vec<&String> = s.as_object().unwrap().keys().collect();
                assert_eq!(keys, ["args", "command", "extensionToLanguage"], "{old:?}");
            }
        }
    }
}
