//! The command line's vocabulary: flags and commands with their documentation, the parser,
//! exit statuses, and the help text. The table of commands is in `main.rs`; `--help`,
//! `ccide help COMMAND` and the man page test all read it.

use std::fmt::Write as _;
use std::str::FromStr;

/// Exit statuses, documented in the man page.
pub const EXIT_OK: i32 = 0;
pub const EXIT_FAILURE: i32 = 1;
pub const EXIT_USAGE: i32 = 2;

pub enum Fail {
    /// Bad command line: exit 2.
    Usage(String),
    /// The command could not do its work: exit 1.
    Failed(String),
}

impl From<String> for Fail {
    fn from(s: String) -> Fail {
        Fail::Failed(s)
    }
}

pub type Outcome = Result<i32, Fail>;

pub struct Flag {
    pub name: &'static str,
    /// The value's placeholder (`DIR`), or None for a switch.
    pub value: Option<&'static str>,
    /// The environment variable read when the flag is absent (systemd units).
    pub env: Option<&'static str>,
    pub repeat: bool,
    pub help: &'static str,
    /// The value when neither the flag nor its variable is given: `--help` prints it and
    /// `Args::value` returns it, so the two cannot disagree.
    pub default: Option<&'static str>,
}

pub struct Command {
    pub name: &'static str,
    pub usage: &'static str,
    pub about: &'static str,
    /// Longer text shown by `ccide help COMMAND`, after the usage line.
    pub details: &'static str,
    pub flags: &'static [Flag],
    pub run: fn(&Args) -> Outcome,
    /// Every argument goes to the program it runs (`ccide claude`), none is parsed here.
    pub passthrough: bool,
}

pub const fn flag(
    name: &'static str,
    value: Option<&'static str>,
    env: Option<&'static str>,
    help: &'static str,
) -> Flag {
    Flag {
        name,
        value,
        env,
        repeat: false,
        help,
        default: None,
    }
}

impl Flag {
    pub const fn default(self, value: &'static str) -> Flag {
        Flag {
            default: Some(value),
            ..self
        }
    }
}

pub const PORT: Flag = flag(
    "--port",
    Some("N"),
    None,
    "Talk to the server on port N instead of the one whose workspace holds the current directory.",
);
pub const CONFIG_DIR: Flag = flag(
    "--config-dir",
    Some("DIR"),
    Some("CCIDE_CONFIG_DIR"),
    "Claude Code's config directory holding ide/*.lock. Default: $CLAUDE_CONFIG_DIR, else ~/.claude.",
);
pub const SESSION: Flag = flag(
    "--session",
    Some("ID"),
    None,
    "Tell this Claude Code session (an id or pid from ccide status), whatever its folders.",
);
pub const JSON: Flag = flag("--json", None, None, "Print JSON for scripts.");

pub fn version() -> String {
    format!("ccide {}\n", env!("CARGO_PKG_VERSION"))
}

pub fn command_help(c: &Command) -> String {
    let mut s = format!("{}\n\nUsage: {}\n", c.about, c.usage);
    if !c.details.is_empty() {
        s.push('\n');
        s.push_str(c.details);
        s.push('\n');
    }
    s.push_str("\nOptions:\n");
    for f in c.flags {
        let head = match f.value {
            Some(v) => format!("{} {v}", f.name),
            None => f.name.to_string(),
        };
        match f.default {
            Some(d) => s.push_str(&format!("  {head}\n      {} Default: {d}.\n", f.help)),
            None => s.push_str(&format!("  {head}\n      {}\n", f.help)),
        }
        if let Some(env) = f.env {
            let _ = writeln!(s, "      [env: {env}]");
        }
    }
    s.push_str("  -h, --help\n      Show this text.\n");
    s
}

/// The error for a flag's (or its variable's) value that does not parse.
fn invalid_value(raw: &str, source: &str, what: &str) -> Fail {
    Fail::Usage(format!(
        "invalid value '{raw}' for {source}: expected {what}"
    ))
}

/// ", did you mean 'x'?" for the name a mistyped one begins (of three characters or more), else
/// the closest at most two edits away, else nothing. (`dyn`: one copy for every caller's
/// iterator.)
pub fn did_you_mean(typed: &str, names: &mut dyn Iterator<Item = &str>) -> String {
    let best = names
        .map(|n| {
            (
                !(typed.len() > 2 && n.starts_with(typed)),
                edits(typed, n),
                n,
            )
        })
        .filter(|(other, d, _)| !other || *d <= 2)
        .min();
    best.map(|(_, _, n)| format!(", did you mean '{n}'?"))
        .unwrap_or_default()
}

/// Levenshtein distance, by characters.
fn edits(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diag = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let next = (diag + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(row[j + 1] + 1);
            diag = row[j + 1];
            row[j + 1] = next;
        }
    }
    row[b.len()]
}

/// The values a switch's variable takes (`CCIDE_SINGLE_CLIENT=yes`), any case.
pub const SWITCH_WORDS: [(&str, bool); 8] = [
    ("1", true),
    ("true", true),
    ("yes", true),
    ("on", true),
    ("0", false),
    ("false", false),
    ("no", false),
    ("off", false),
];

/// `var=value` of a switch's variable, read by `SWITCH_WORDS`; the error lists them all.
fn switch_word(var: &str, value: &str) -> Result<bool, Fail> {
    let lower = value.to_ascii_lowercase();
    if let Some((_, on)) = SWITCH_WORDS.iter().find(|(w, _)| *w == lower) {
        return Ok(*on);
    }
    let words = |on: bool| {
        let w: Vec<&str> = SWITCH_WORDS
            .iter()
            .filter(|(_, o)| *o == on)
            .map(|(w, _)| *w)
            .collect();
        let (last, rest) = w.split_last().expect("words for each side");
        format!("{} or {last}", rest.join(", "))
    };
    Err(Fail::Usage(format!(
        "{var}={value}: expected {} to enable, {} to disable",
        words(true),
        words(false)
    )))
}

/// A parsed command line: flag values (command line first, then environment) and operands.
pub struct Args {
    pub command: &'static Command,
    values: Vec<(&'static str, String)>,
    pub operands: Vec<String>,
}

impl Args {
    pub fn parse(command: &'static Command, argv: &[String]) -> Result<Args, Fail> {
        if command.passthrough {
            // `--` only separates ccide's own `--help` from the program's: it is not passed on.
            let rest = argv.split_first().filter(|(first, _)| *first == "--");
            return Ok(Args {
                command,
                values: Vec::new(),
                operands: rest.map_or(argv, |(_, r)| r).to_vec(),
            });
        }
        let mut values = Vec::new();
        let mut operands = Vec::new();
        let mut i = 0;
        while i < argv.len() {
            let arg = &argv[i];
            i += 1;
            if arg == "--" {
                operands.extend(argv[i..].iter().cloned());
                break;
            }
            if !arg.starts_with("--") || arg.len() == 2 {
                if arg.starts_with('-') && arg.len() > 1 && arg != "-" {
                    return Err(Fail::Usage(format!(
                        "unknown option '{arg}' for 'ccide {}' (see 'ccide help {}')",
                        command.name, command.name
                    )));
                }
                operands.push(arg.clone());
                continue;
            }
            let (name, inline) = match arg.split_once('=') {
                Some((n, v)) => (n, Some(v.to_string())),
                None => (arg.as_str(), None),
            };
            let Some(f) = command.flags.iter().find(|f| f.name == name) else {
                let mut names = command.flags.iter().map(|f| f.name).chain(["--help"]);
                return Err(Fail::Usage(format!(
                    "unknown option '{name}' for 'ccide {}'{} (see 'ccide help {}')",
                    command.name,
                    did_you_mean(name, &mut names),
                    command.name
                )));
            };
            match (f.value, inline) {
                (None, Some(_)) => {
                    return Err(Fail::Usage(format!("option {name} takes no value")));
                }
                (None, None) => values.push((f.name, String::new())),
                (Some(_), Some(v)) => values.push((f.name, v)),
                (Some(placeholder), None) => {
                    let Some(v) = argv.get(i) else {
                        return Err(Fail::Usage(format!(
                            "option {name} needs a value ({placeholder})"
                        )));
                    };
                    i += 1;
                    values.push((f.name, v.clone()));
                }
            }
            if !f.repeat && values.iter().filter(|(n, _)| *n == f.name).count() > 1 {
                return Err(Fail::Usage(format!("option {name} given more than once")));
            }
        }
        Ok(Args {
            command,
            values,
            operands,
        })
    }

    fn def(&self, name: &str) -> &'static Flag {
        self.command
            .flags
            .iter()
            .find(|f| f.name == name)
            .unwrap_or_else(|| panic!("flag {name} is not defined for {}", self.command.name))
    }

    fn env(&self, name: &str) -> Option<(String, String)> {
        let var = self.def(name).env?;
        std::env::var(var)
            .ok()
            .filter(|v| !v.is_empty())
            .map(|v| (var.to_string(), v))
    }

    /// The flag's value: from the command line, else from its environment variable, else its
    /// default.
    pub fn value(&self, name: &str) -> Option<String> {
        if let Some((_, v)) = self.values.iter().rev().find(|(n, _)| *n == name) {
            return Some(v.clone());
        }
        self.env(name)
            .map(|(_, v)| v)
            .or_else(|| self.def(name).default.map(String::from))
    }

    pub fn values(&self, name: &str) -> Vec<String> {
        let given: Vec<String> = self
            .values
            .iter()
            .filter(|(n, _)| *n == name)
            .map(|(_, v)| v.clone())
            .collect();
        if !given.is_empty() {
            return given;
        }
        match self.env(name) {
            Some((_, v)) => v
                .split(':')
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect(),
            None => Vec::new(),
        }
    }

    /// A switch: present on the command line, or its variable set to one of `SWITCH_WORDS`.
    pub fn switch(&self, name: &str) -> Result<bool, Fail> {
        if self.values.iter().any(|(n, _)| *n == name) {
            return Ok(true);
        }
        match self.env(name) {
            None => Ok(false),
            Some((var, v)) => switch_word(&var, &v),
        }
    }

    /// The flag's value parsed as `T`, with an error naming the flag (or its variable).
    pub fn parsed<T: FromStr>(&self, name: &str, what: &str) -> Result<Option<T>, Fail> {
        // Only the parse depends on `T`: the rest is once in the binary, not once per type.
        let Some((source, raw)) = self.raw_value(name) else {
            return Ok(None);
        };
        match raw.trim().parse::<T>() {
            Ok(v) => Ok(Some(v)),
            Err(_) => Err(invalid_value(&raw, &source, what)),
        }
    }

    /// Where the flag's value comes from (the flag, or its variable) and the value, as given
    /// or by default.
    fn raw_value(&self, name: &str) -> Option<(String, String)> {
        if let Some((_, v)) = self.values.iter().rev().find(|(n, _)| *n == name) {
            Some((name.to_string(), v.clone()))
        } else if let Some((var, v)) = self.env(name) {
            Some((var, v))
        } else {
            let d = self.def(name).default?;
            Some((name.to_string(), d.to_string()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mistyped_name_gets_the_closest_one() {
        let names = ["serve", "select", "status", "diff", "diagnostics"];
        let guess = |t: &str| did_you_mean(t, &mut names.iter().copied());
        assert_eq!(guess("serv"), ", did you mean 'serve'?");
        assert_eq!(guess("stauts"), ", did you mean 'status'?");
        assert_eq!(guess("dif"), ", did you mean 'diff'?");
        assert_eq!(guess("diag"), ", did you mean 'diagnostics'?");
        assert_eq!(guess("frobnicate"), "");
        assert_eq!(edits("--stat-dir", "--state-dir"), 1);
        assert_eq!(edits("", "abc"), 3);
        assert_eq!(edits("kitten", "sitting"), 3);
    }

    /// A flag's value from the command line, else its default, parsed (spaces around it are
    /// no part of it); one that does not parse is refused naming the flag, the value and what
    /// was expected.
    #[test]
    fn a_flag_value_is_parsed_from_the_command_line_or_its_default() {
        static FLAGS: [Flag; 2] = [
            flag("--n", Some("N"), None, "A number.").default("7"),
            flag("--m", Some("N"), None, "Another."),
        ];
        static COMMAND: Command = Command {
            name: "t",
            usage: "",
            about: "",
            details: "",
            flags: &FLAGS,
            run: |_| Ok(0),
            passthrough: false,
        };
        let args = |argv: &[&str]| {
            let argv: Vec<String> = argv.iter().map(|a| a.to_string()).collect();
            Args::parse(&COMMAND, &argv).unwrap_or_else(|_| panic!("{argv:?}"))
        };
        let a = args(&["--n", " 4 "]);
        assert!(matches!(a.parsed::<u16>("--n", "a port"), Ok(Some(4))));
        assert!(matches!(a.parsed::<u16>("--m", "a port"), Ok(None)));
        assert!(matches!(
            args(&[]).parsed::<u16>("--n", "a port"),
            Ok(Some(7))
        ));
        let Err(Fail::Usage(e)) = args(&["--m", "x1"]).parsed::<u16>("--m", "a port") else {
            panic!("x1 is no number");
        };
        assert_eq!(e, "invalid value 'x1' for --m: expected a port");
    }

    #[test]
    fn a_switch_variable_takes_every_word_of_the_table_and_its_error_lists_them_all() {
        for (word, on) in SWITCH_WORDS {
            assert!(matches!(switch_word("V", word), Ok(b) if b == on), "{word}");
            let upper = word.to_ascii_uppercase();
            assert!(
                matches!(switch_word("V", &upper), Ok(b) if b == on),
                "{upper}"
            );
        }
        let Err(Fail::Usage(e)) = switch_word("CCIDE_LSP_WARM", "maybe") else {
            panic!("maybe is not a switch word");
        };
        assert_eq!(
            e,
            "CCIDE_LSP_WARM=maybe: expected 1, true, yes or on to enable, 0, false, no or off to disable"
        );
        for (word, _) in SWITCH_WORDS {
            assert!(e.contains(&format!(" {word}")), "{word} missing: {e}");
        }
    }
}
