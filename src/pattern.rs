//! File patterns for choosing checkers and formatters, and the quoting rules
//! for their command lines.
//!
//! Commands are split into words here rather than handed to `sh -c` so that
//! a file name substituted into them can never be interpreted by a shell.

/// Glob over '/'-separated relative paths: `*` matches within one component
/// (not '/'), `**` as a whole component matches zero or more components,
/// `?` one character (not '/'). Everything else, `[` included, is literal.
///
/// `*` and `?` also match a leading dot, as in .gitignore and .editorconfig,
/// so `*.py` covers `.hidden.py`. Empty and `.` components are ignored on
/// both sides, so `./src//a.rs` is `src/a.rs`.
pub fn glob_match(pattern: &str, path: &str) -> bool {
    let pattern: Vec<PatternComponent> = components(pattern)
        .map(|c| {
            if c == "**" {
                PatternComponent::AnyComponents
            } else {
                PatternComponent::Glob(c.chars().collect())
            }
        })
        .collect();
    let path: Vec<Vec<char>> = components(path).map(|c| c.chars().collect()).collect();
    wildcard_match(
        &pattern,
        &path,
        |p| matches!(p, PatternComponent::AnyComponents),
        |p, c| match p {
            PatternComponent::AnyComponents => true,
            PatternComponent::Glob(g) => component_match(g, c),
        },
    )
}

/// Checker/formatter pattern rule: a pattern without '/' matches the file
/// NAME in any directory (`*.py` matches `a/b/c.py`); a pattern with '/'
/// matches the whole workspace-relative path (`src/**/*.rs`).
pub fn file_pattern_match(pattern: &str, rel_path: &str) -> bool {
    if pattern.contains('/') {
        glob_match(pattern, rel_path)
    } else {
        let name = components(rel_path).next_back().unwrap_or("");
        glob_match(pattern, name)
    }
}

/// Splits a command line into words as a POSIX shell would for quoting
/// purposes only: whitespace separates words; single quotes are literal;
/// double quotes allow backslash escaping of `\"` `\\` `\$` `` \` `` (and a
/// backslash-newline disappears); a backslash outside quotes escapes the
/// next character. Nothing is expanded, and `|`, `;`, `#`, `>` … are
/// ordinary characters, since no shell will run the result.
/// `PATTERN=COMMAND` as `--checker`, `--formatter` and `--lsp` take it: the pattern and the
/// command, both trimmed and not empty.
pub fn split_spec(spec: &str) -> Result<(&str, &str), String> {
    spec.split_once('=')
        .map(|(p, c)| (p.trim(), c.trim()))
        .filter(|(p, c)| !p.is_empty() && !c.is_empty())
        .ok_or_else(|| format!("'{spec}' is not PATTERN=COMMAND"))
}

/// The name a program is known by in logs and as a diagnostic's source: its file name.
pub fn program_name(program: &str) -> String {
    std::path::Path::new(program)
        .file_name()
        .map_or_else(|| program.to_string(), |n| n.to_string_lossy().into_owned())
}

/// `Err` for an unterminated quote.
pub fn split_words(cmd: &str) -> Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word = String::new();
    // Distinguishes `''` (an empty word) from no word at all.
    let mut in_word = false;
    let mut chars = cmd.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' | '\n' | '\r' => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            '\'' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('\'') => break,
                        Some(c) => word.push(c),
                        None => return Err(format!("unterminated single quote in: {cmd}")),
                    }
                }
            }
            '"' => {
                in_word = true;
                loop {
                    match chars.next() {
                        Some('"') => break,
                        Some('\\') => match chars.next() {
                            Some(c @ ('"' | '\\' | '$' | '`')) => word.push(c),
                            Some('\n') => {}
                            Some(c) => {
                                word.push('\\');
                                word.push(c);
                            }
                            None => return Err(format!("unterminated double quote in: {cmd}")),
                        },
                        Some(c) => word.push(c),
                        None => return Err(format!("unterminated double quote in: {cmd}")),
                    }
                }
            }
            '\\' => match chars.next() {
                // A line continuation joins the lines without a break.
                Some('\n') => {}
                Some(c) => {
                    in_word = true;
                    word.push(c);
                }
                // A shell would wait for more input; the most useful reading
                // of a trailing backslash is a literal one.
                None => {
                    in_word = true;
                    word.push('\\');
                }
            },
            c => {
                in_word = true;
                word.push(c);
            }
        }
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

enum PatternComponent {
    /// `**`
    AnyComponents,
    Glob(Vec<char>),
}

fn components(s: &str) -> impl DoubleEndedIterator<Item = &str> {
    s.split('/').filter(|c| !c.is_empty() && *c != ".")
}

fn component_match(pattern: &[char], name: &[char]) -> bool {
    wildcard_match(pattern, name, |p| *p == '*', |p, c| *p == '?' || p == c)
}

/// Matching with one kind of "any sequence" token, shared by both levels:
/// `*` over the characters of a component and `**` over the components of a
/// path. Only the most recent star is remembered: when a later token fails,
/// that star absorbs one more item and matching resumes after it. Earlier
/// stars never need revisiting, because whatever they would absorb the
/// latest star can absorb as well, so this is O(pattern × subject) with no
/// exponential backtracking.
fn wildcard_match<P, S>(
    pattern: &[P],
    subject: &[S],
    is_star: impl Fn(&P) -> bool,
    matches_one: impl Fn(&P, &S) -> bool,
) -> bool {
    let mut p = 0;
    let mut s = 0;
    // (pattern index of the star, subject index it has absorbed up to)
    let mut star: Option<(usize, usize)> = None;
    while s < subject.len() {
        let token = pattern.get(p);
        if token.is_some_and(&is_star) {
            star = Some((p, s));
            p += 1;
            continue;
        }
        if let (Some(t), Some(item)) = (token, subject.get(s))
            && matches_one(t, item)
        {
            p += 1;
            s += 1;
            continue;
        }
        match star {
            Some((star_p, star_s)) => {
                star = Some((star_p, star_s + 1));
                p = star_p + 1;
                s = star_s + 1;
            }
            None => return false,
        }
    }
    pattern
        .get(p..)
        .is_some_and(|rest| rest.iter().all(is_star))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_and_single_component_wildcards() {
        assert!(glob_match("a.py", "a.py"));
        assert!(!glob_match("a.py", "b.py"));
        assert!(!glob_match("a.py", "a.pyc"));
        assert!(glob_match("*.py", "a.py"));
        assert!(glob_match("*.py", ".py"));
        assert!(!glob_match("*.py", "a.pyc"));
        assert!(!glob_match("*.py", "d/a.py"));
        assert!(glob_match("a*b*c", "abc"));
        assert!(glob_match("a*b*c", "aXXbYYc"));
        assert!(!glob_match("a*b*c", "aXXbYY"));
        assert!(glob_match("?.c", "x.c"));
        assert!(!glob_match("?.c", "xy.c"));
        assert!(!glob_match("?.c", ".c"));
        assert!(glob_match("*", "anything"));
        assert!(!glob_match("*", "a/b"));
        assert!(glob_match("a?c", "a?c"));
        assert!(!glob_match("a/?", "a//"));
        assert!(glob_match("src/*.rs", "src/main.rs"));
        assert!(!glob_match("src/*.rs", "src/bin/main.rs"));
        assert!(!glob_match("src/*.rs", "main.rs"));
        assert!(!glob_match("a", ""));
        assert!(glob_match("", ""));
    }

    #[test]
    fn double_star() {
        // At the start.
        assert!(glob_match("**/*.rs", "main.rs"));
        assert!(glob_match("**/*.rs", "src/main.rs"));
        assert!(glob_match("**/*.rs", "a/b/c/main.rs"));
        assert!(!glob_match("**/*.rs", "a/b/c/main.py"));
        // In the middle: zero components too.
        assert!(glob_match("a/**/b", "a/b"));
        assert!(glob_match("a/**/b", "a/x/b"));
        assert!(glob_match("a/**/b", "a/x/y/z/b"));
        assert!(!glob_match("a/**/b", "a/x/y/z/c"));
        assert!(!glob_match("a/**/b", "b"));
        assert!(glob_match("src/**/*.rs", "src/lib.rs"));
        assert!(glob_match("src/**/*.rs", "src/a/b/lib.rs"));
        assert!(!glob_match("src/**/*.rs", "tests/a.rs"));
        // At the end.
        assert!(glob_match("a/**", "a/x"));
        assert!(glob_match("a/**", "a/x/y"));
        assert!(glob_match("a/**", "a"));
        assert!(!glob_match("a/**", "b/x"));
        // Alone, and repeated.
        assert!(glob_match("**", "x"));
        assert!(glob_match("**", "x/y/z"));
        assert!(glob_match("**", ""));
        assert!(glob_match("**/**/x", "x"));
        assert!(glob_match("a/**/b/**/c", "a/b/c"));
        assert!(glob_match("a/**/b/**/c", "a/1/b/2/3/c"));
        assert!(!glob_match("a/**/b/**/c", "a/1/c/2/3/b"));
        // Backtracking across `**` must find the later match.
        assert!(glob_match("**/b/*.rs", "b/x/b/y.rs"));
        assert!(glob_match("a/**/b/c", "a/b/b/b/c"));
        // Not a whole component: just two single-component stars.
        assert!(glob_match("a**b", "axxb"));
        assert!(!glob_match("a**b", "ax/xb"));
        assert!(glob_match("**.rs", "x.rs"));
        assert!(!glob_match("**.rs", "d/x.rs"));
    }

    #[test]
    fn hidden_files_brackets_and_unicode() {
        // A leading dot is matched like any character.
        assert!(glob_match("*", ".env"));
        assert!(glob_match("*.py", ".hidden.py"));
        assert!(glob_match("**/*.py", ".venv/lib/x.py"));
        assert!(glob_match(".github/**/*.yml", ".github/workflows/ci.yml"));
        assert!(glob_match("?env", ".env"));
        // Brackets are literal.
        assert!(glob_match("[ab].txt", "[ab].txt"));
        assert!(!glob_match("[ab].txt", "a.txt"));
        assert!(glob_match("{a,b}", "{a,b}"));
        // `?` is one character, not one byte.
        assert!(glob_match("?.py", "ä.py"));
        assert!(glob_match("my dir/?.py", "my dir/ä.py"));
        assert!(glob_match("*é*", "café.md"));
        assert!(glob_match("日本/*.txt", "日本/語.txt"));
        assert!(!glob_match("??.py", "ä.py"));
    }

    #[test]
    fn redundant_separators_and_dots() {
        assert!(glob_match("src/*.rs", "./src/main.rs"));
        assert!(glob_match("./src/*.rs", "src//main.rs"));
        assert!(glob_match("src/", "src"));
        assert!(glob_match("/src/*.rs", "src/a.rs"));
    }

    #[test]
    fn no_exponential_backtracking() {
        let start = std::time::Instant::now();
        let name = "a".repeat(5000);
        let pattern = format!("{}b", "*a".repeat(50));
        assert!(!glob_match(&pattern, &name));
        let path = vec!["a"; 2000].join("/");
        let pattern = format!("{}/b", vec!["**/a"; 30].join("/"));
        assert!(!glob_match(&pattern, &path));
        assert!(glob_match(
            &format!("{}/a", vec!["**"; 30].join("/")),
            &path
        ));
        assert!(start.elapsed().as_secs() < 5, "{:?}", start.elapsed());
    }

    #[test]
    fn file_patterns() {
        // No '/': the name anywhere.
        assert!(file_pattern_match("*.py", "a/b/c.py"));
        assert!(file_pattern_match("*.py", "c.py"));
        assert!(!file_pattern_match("*.py", "a/b.py/c.txt"));
        assert!(file_pattern_match("Makefile", "sub/Makefile"));
        assert!(file_pattern_match("Dockerfile*", "deploy/Dockerfile.prod"));
        assert!(!file_pattern_match("Makefile", "Makefile.am"));
        // With '/': the whole relative path.
        assert!(file_pattern_match("src/**/*.rs", "src/a/b.rs"));
        assert!(file_pattern_match("src/**/*.rs", "src/b.rs"));
        assert!(!file_pattern_match("src/**/*.rs", "other/src/b.rs"));
        assert!(!file_pattern_match("src/*.rs", "x/src/a.rs"));
        assert!(file_pattern_match("**/test_*.py", "tests/unit/test_x.py"));
        assert!(!file_pattern_match("*.py", ""));
    }

    fn words(cmd: &str) -> Vec<String> {
        match split_words(cmd) {
            Ok(w) => w,
            Err(e) => panic!("{cmd:?}: {e}"),
        }
    }

    #[test]
    fn split_words_basics() {
        assert_eq!(
            words("ruff check  --output-format concise {file}"),
            ["ruff", "check", "--output-format", "concise", "{file}"]
        );
        assert!(words("").is_empty());
        assert!(words(" \t\n ").is_empty());
        assert_eq!(words("  a\tb\nc  "), ["a", "b", "c"]);
        // Nothing is expanded and operators are plain characters.
        assert_eq!(
            words("echo $HOME *.py ~ a|b;c # d"),
            ["echo", "$HOME", "*.py", "~", "a|b;c", "#", "d"]
        );
    }

    #[test]
    fn split_words_quoting() {
        assert_eq!(words("'a b' c"), ["a b", "c"]);
        assert_eq!(words(r#"'a\b "c"'"#), [r#"a\b "c""#]);
        assert_eq!(
            words(r#""a b" "c\"d" "e\\f" "\$x" "\`y" "\n""#),
            ["a b", "c\"d", "e\\f", "$x", "`y", "\\n"]
        );
        assert_eq!(words(r#"a"b c"'d e'f"#), ["ab cd ef"]);
        assert_eq!(words("'' \"\" x"), ["", "", "x"]);
        assert_eq!(words("a''"), ["a"]);
        assert_eq!(words(r#"a\ b \'c \\ \"d"#), ["a b", "'c", "\\", "\"d"]);
        assert_eq!(words("a\\\nb"), ["ab"]);
        assert_eq!(words("\"a\\\nb\""), ["ab"]);
        assert_eq!(words(r"trailing\"), ["trailing\\"]);
        assert_eq!(
            words("sh -c 'echo \"$1\"' x"),
            ["sh", "-c", "echo \"$1\"", "x"]
        );
        assert_eq!(words("'ä ö' ü"), ["ä ö", "ü"]);
    }

    #[test]
    fn split_words_errors() {
        assert!(split_words("'abc").is_err());
        assert!(split_words("a \"b").is_err());
        assert!(split_words("\"a\\\"").is_err());
        assert!(split_words("\"a\\").is_err());
        let e = split_words("x 'y").unwrap_err();
        assert!(e.contains("single quote"), "{e}");
    }
}
