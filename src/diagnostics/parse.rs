//! Turns the output of a project's real checkers (compilers, linters, SARIF
//! producers) into diagnostics for the `getDiagnostics` answer.
//!
//! Checkers mix their findings with progress lines, code excerpts and
//! summaries, so every parser here is lenient: whatever it does not recognise
//! is skipped, never reported as a failure. Everything is linear in the size
//! of the output, because a checker run over a large project can print tens
//! of thousands of lines.
//!
//! Tools count columns in different units (`Unit`); each parser says which
//! one its format uses, and `parse` converts them all to UTF-16 code units,
//! the unit of the store and of getDiagnostics, against the text of the line
//! (ccide-protocol(7) §10).

use std::borrow::Cow;
use std::collections::HashSet;
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::lsp::text::{Enc, Text, convert_column};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Severity {
    Error,
    Warning,
    Info,
    Hint,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "Error",
            Severity::Warning => "Warning",
            Severity::Info => "Info",
            Severity::Hint => "Hint",
        }
    }

    /// Maps the severity words tools print (in any case) to a severity.
    pub fn from_word(w: &str) -> Option<Severity> {
        let w = w.trim();
        let any = |words: &[&str]| words.iter().any(|x| w.eq_ignore_ascii_case(x));
        if any(&["error", "fatal", "fatal error", "critical"]) {
            Some(Severity::Error)
        } else if any(&["warning", "warn"]) {
            Some(Severity::Warning)
        } else if any(&["note", "info", "information"]) {
            Some(Severity::Info)
        } else if any(&["hint", "help", "style"]) {
            Some(Severity::Hint)
        } else {
            None
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Diagnostic {
    /// Absolute and lexically normalised.
    pub path: PathBuf,
    /// Positions are 0-based, characters counted in UTF-16 code units; the end is exclusive.
    pub start_line: u32,
    pub start_char: u32,
    pub end_line: u32,
    pub end_char: u32,
    pub severity: Severity,
    pub message: String,
    pub source: String,
    pub code: Option<String>,
}

/// One diagnostic in the protocol format (`Format::Protocol`, the getDiagnostics answer's):
/// 0-based positions in UTF-16 code units, severity as the CLI spells it. The store's file and
/// the clients' answers alike are written with it.
pub fn to_wire(d: &Diagnostic) -> Value {
    // Built field by field: smaller in the binary than `json!` (no serializer per type).
    let mut v = Value::Object(Default::default());
    v["message"] = d.message.clone().into();
    v["severity"] = d.severity.as_str().into();
    v["range"]["start"]["line"] = d.start_line.into();
    v["range"]["start"]["character"] = d.start_char.into();
    v["range"]["end"]["line"] = d.end_line.into();
    v["range"]["end"]["character"] = d.end_char.into();
    v["source"] = d.source.clone().into();
    if let Some(c) = &d.code {
        v["code"] = c.as_str().into();
    }
    v
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Auto,
    Protocol,
    Sarif,
    Cargo,
    Compiler,
    Ruff,
}

impl Format {
    pub fn from_name(s: &str) -> Option<Format> {
        match s {
            "auto" => Some(Format::Auto),
            "protocol" => Some(Format::Protocol),
            "sarif" => Some(Format::Sarif),
            "cargo" => Some(Format::Cargo),
            "compiler" => Some(Format::Compiler),
            "ruff" => Some(Format::Ruff),
            _ => None,
        }
    }
}

/// Splits a checker spec's optional `FORMAT:` prefix:
/// `"sarif:semgrep --sarif {file}"` → `(Sarif, "semgrep --sarif {file}")`.
/// Only the known format names count as a prefix, so a command that merely
/// contains a colon is returned whole with `Auto`.
pub fn split_format_prefix(spec: &str) -> (Format, &str) {
    if let Some((name, rest)) = spec.trim_start().split_once(':')
        && let Some(format) = Format::from_name(name)
    {
        return (format, rest.trim_start());
    }
    (Format::Auto, spec)
}

/// Parses a checker's whole output (stdout and stderr concatenated).
///
/// Paths in the output are resolved against `base`; `default_source` names
/// the diagnostics of formats that do not say which tool produced them, and
/// the program that printed compiler lines (which decides their unit).
/// `read` gives the text of a file the output names, to convert its columns
/// against (`None` keeps them as printed). Exact duplicates are dropped,
/// keeping the first: a header included by several translation units, or a
/// file in several cargo targets, would otherwise be reported once per
/// inclusion.
pub fn parse(
    output: &str,
    format: Format,
    base: &Path,
    default_source: &str,
    read: &mut dyn FnMut(&Path) -> Option<String>,
) -> Vec<Diagnostic> {
    let mut out = Vec::new();
    let cx = Context {
        base,
        default_source,
        compiler: compiler_unit(default_source, output),
    };
    match format {
        Format::Auto => parse_auto(output, &cx, &mut out),
        Format::Protocol => {
            // Named explicitly, a list with some odd entries still counts;
            // those entries are skipped.
            let accept = |v: &Value| v.is_array() || is_protocol_entry(v);
            if let Some(v) = find_json(output, accept) {
                parse_protocol(&v, &cx, &mut out);
            }
        }
        Format::Sarif => {
            if let Some(v) = find_json(output, is_sarif) {
                parse_sarif(&v, &cx, &mut out);
            }
        }
        Format::Cargo => parse_lines(output, LineMode::Cargo, &cx, &mut out),
        Format::Compiler => parse_lines(output, LineMode::Compiler, &cx, &mut out),
        Format::Ruff => match find_json(output, is_ruff_json) {
            Some(v) => parse_ruff_json(&v, &cx, &mut out),
            None => parse_lines(output, LineMode::Ruff, &cx, &mut out),
        },
    }
    let mut out = to_utf16(out, read);
    let mut seen = HashSet::with_capacity(out.len());
    out.retain(|d| seen.insert(d.clone()));
    out
}

/// A file's text to convert columns against: a regular file of at most this size.
const MAX_SOURCE: u64 = 16 << 20;

/// The text of a workspace file a tool reported on, as `parse` wants it, read through the
/// confinement rule (a file that resolves outside the folders, a symlink swapped in, is not
/// read: ccide-protocol(7) §10): `None` for anything but a regular file (never a FIFO, which
/// would block) of at most `MAX_SOURCE` bytes.
pub fn read_source(workspaces: &crate::workspaces::Workspaces, p: &Path) -> Option<String> {
    let real = workspaces.resolve(&p.to_string_lossy()).ok()?;
    let bytes = workspaces.read(&real, MAX_SOURCE).ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// How a tool counts the columns it prints.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Unit {
    /// Bytes of UTF-8 (`Enc::Utf8`), Unicode scalar values (`Enc::Utf32`) or UTF-16 code units.
    Enc(Enc),
    /// gcc's default (`-fdiagnostics-column-unit=display`): the columns a terminal shows, a tab
    /// advancing to the next multiple of 8 and a wide character taking 2.
    Display,
}

const BYTES: Unit = Unit::Enc(Enc::Utf8);
const CHARS: Unit = Unit::Enc(Enc::Utf32);
const UTF16: Unit = Unit::Enc(Enc::Utf16);

/// How compiler lines count columns, by the program that printed them: gcc counts display
/// columns; rustc, shellcheck, mypy and ccide's own python3 check count characters, a tab as
/// one (each measured on lines holding `é🦀` and a tab, tests/fixtures/diagnostics); clang
/// counts bytes (its columns are offsets in the line's bytes), and so does go (go/token's
/// `Column` is a byte count). Output of another program (an import) is taken as gcc's when it holds the
/// context lines only gcc prints (`FILE: In function ‘f’:`, `FILE: At top level:`), else as
/// characters.
fn compiler_unit(program: &str, output: &str) -> Unit {
    if matches!(program, "cc" | "c++") || program.contains("gcc") || program.contains("g++") {
        Unit::Display
    } else if program.contains("clang") || program == "go" {
        BYTES
    } else if output.contains(": In function ") || output.contains(": At top level:") {
        Unit::Display
    } else {
        CHARS
    }
}

/// Column `col` of `line`, counted in `unit`, in UTF-16 code units; a column inside a
/// character moves to its start, or to its end when `round_up` (it ends a range).
fn column_to_utf16(line: &str, col: u32, unit: Unit, round_up: bool) -> u32 {
    let Unit::Enc(enc) = unit else {
        let (mut width, mut units) = (0u32, 0u32);
        for c in line.chars() {
            let w = if c == '\t' {
                8 - width % 8
            } else {
                display_width(c)
            };
            if width >= col && w > 0 {
                return units;
            }
            width += w;
            if width > col {
                return units + if round_up { c.len_utf16() as u32 } else { 0 };
            }
            units += c.len_utf16() as u32;
        }
        return units.saturating_add(col.saturating_sub(width));
    };
    convert_column(line, col, enc, Enc::Utf16, round_up)
}

/// Combining marks and zero-width characters (`display_width` 0).
const ZERO_WIDTH: &[(u32, u32)] = &[
    (0x300, 0x36f),
    (0x483, 0x489),
    (0x591, 0x5c7),
    (0x610, 0x61a),
    (0x64b, 0x65f),
    (0x1ab0, 0x1aff),
    (0x1dc0, 0x1dff),
    (0x200b, 0x200f),
    (0x202a, 0x202e),
    (0x2060, 0x2064),
    (0x20d0, 0x20ff),
    (0xfe00, 0xfe0f),
    (0xfe20, 0xfe2f),
    (0xfeff, 0xfeff),
    (0xe0000, 0xe0fff),
];
/// East Asian wide and full-width characters (`display_width` 2).
const WIDE: &[(u32, u32)] = &[
    (0x1100, 0x115f),
    (0x231a, 0x231b),
    (0x2329, 0x232a),
    (0x23e9, 0x23ec),
    (0x23f0, 0x23f3),
    (0x25fd, 0x25fe),
    (0x2614, 0x2615),
    (0x2648, 0x2653),
    (0x267f, 0x267f),
    (0x2693, 0x2693),
    (0x26a1, 0x26a1),
    (0x26aa, 0x26ab),
    (0x26bd, 0x26be),
    (0x26c4, 0x26c5),
    (0x26ce, 0x26ce),
    (0x26d4, 0x26d4),
    (0x26ea, 0x26ea),
    (0x26f2, 0x26f5),
    (0x26fa, 0x26fd),
    (0x2705, 0x2705),
    (0x270a, 0x270b),
    (0x2728, 0x2728),
    (0x274c, 0x274e),
    (0x2753, 0x2757),
    (0x2795, 0x2797),
    (0x27b0, 0x27b0),
    (0x27bf, 0x27bf),
    (0x2b1b, 0x2b1c),
    (0x2b50, 0x2b55),
    (0x2e80, 0x303e),
    (0x3041, 0x33ff),
    (0x3400, 0x4dbf),
    (0x4e00, 0x9fff),
    (0xa000, 0xa4cf),
    (0xa960, 0xa97f),
    (0xac00, 0xd7a3),
    (0xf900, 0xfaff),
    (0xfe10, 0xfe19),
    (0xfe30, 0xfe6f),
    (0xff00, 0xff60),
    (0xffe0, 0xffe6),
    (0x16fe0, 0x18cff),
    (0x1aff0, 0x1b2ff),
    (0x1f004, 0x1f004),
    (0x1f0cf, 0x1f0cf),
    (0x1f18e, 0x1f19a),
    (0x1f200, 0x1f265),
    (0x1f300, 0x1f64f),
    (0x1f680, 0x1f6ff),
    (0x1f7e0, 0x1f7f0),
    (0x1f90c, 0x1f9ff),
    (0x1fa70, 0x1faff),
    (0x20000, 0x3fffd),
];

/// The columns a character takes in gcc's display count: 0 for combining marks and
/// zero-width characters, 2 for East Asian wide and full-width ones (CJK, Hangul, most
/// emoji), else 1. The main blocks only, so it can differ from gcc's full table on rare
/// characters.
fn display_width(c: char) -> u32 {
    let c = c as u32;
    let within = |t: &[(u32, u32)]| t.iter().any(|&(a, b)| a <= c && c <= b);
    if c < 0x300 {
        1
    } else if within(ZERO_WIDTH) {
        0
    } else if within(WIDE) {
        2
    } else {
        1
    }
}

/// Converts every diagnostic's columns to UTF-16 code units against the text of its line.
/// Each file is read once, and one at a time, so memory holds one file; one that `read`
/// cannot give keeps its columns as printed, and so does a line past its end.
fn to_utf16(
    mut found: Vec<Found>,
    read: &mut dyn FnMut(&Path) -> Option<String>,
) -> Vec<Diagnostic> {
    // Column 0 is 0 in every unit.
    let todo: Vec<usize> = (0..found.len())
        .filter(|&i| {
            let Found { d, unit } = &found[i];
            *unit != UTF16 && (d.start_char > 0 || d.end_char > 0)
        })
        .collect();
    // Grouped by file through a list of the files sorted by their bytes, with the one sort
    // the binary holds (not by sorting the diagnostics: a sort of another type would cost
    // kilobytes of code).
    let mut files: Vec<PathBuf> = todo.iter().map(|&i| found[i].d.path.clone()).collect();
    crate::text::sort_by_bytes(&mut files, |p| p.as_os_str().as_encoded_bytes().to_vec());
    files.dedup_by(|a, b| a.as_os_str() == b.as_os_str());
    let mut of_file: Vec<Vec<usize>> = vec![Vec::new(); files.len()];
    for &i in &todo {
        let key = found[i].d.path.as_os_str().as_encoded_bytes();
        if let Ok(f) = files.binary_search_by(|f| f.as_os_str().as_encoded_bytes().cmp(key)) {
            of_file[f].push(i);
        }
    }
    for (file, ids) in files.iter().zip(of_file) {
        let Some(t) = read(file).map(Text::new) else {
            continue;
        };
        for i in ids {
            let Found { d, unit } = &mut found[i];
            let col = |line: u32, c: u32, up: bool| {
                t.line(line).map_or(c, |l| column_to_utf16(l, c, *unit, up))
            };
            d.start_char = col(d.start_line, d.start_char, false);
            d.end_char = col(d.end_line, d.end_char, true);
            if d.end_line == d.start_line {
                d.end_char = d.end_char.max(d.start_char);
            }
        }
    }
    found.into_iter().map(|f| f.d).collect()
}

struct Context<'a> {
    base: &'a Path,
    default_source: &'a str,
    /// How compiler lines count columns (`compiler_unit`).
    compiler: Unit,
}

/// A diagnostic as its tool printed it: its columns still counted in the tool's `unit`.
struct Found {
    d: Diagnostic,
    unit: Unit,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum LineMode {
    Auto,
    Cargo,
    Compiler,
    Ruff,
}

/// A 0-based range, its columns counted in `unit`. Builders take whatever the tool printed
/// and this type keeps the invariant that the end never precedes the start.
#[derive(Clone, Copy)]
struct Range {
    start: (u32, u32),
    end: (u32, u32),
    unit: Unit,
}

impl Range {
    fn new(start: (u32, u32), end: (u32, u32), unit: Unit) -> Range {
        Range {
            start,
            end: end.max(start),
            unit,
        }
    }

    fn point(line: u32, character: u32, unit: Unit) -> Range {
        Range::new((line, character), (line, character), unit)
    }
}

fn make(
    path: PathBuf,
    range: Range,
    severity: Severity,
    message: &str,
    source: &str,
    code: Option<String>,
) -> Found {
    let d = Diagnostic {
        path,
        start_line: range.start.0,
        start_char: range.start.1,
        end_line: range.end.0,
        end_char: range.end.1,
        severity,
        message: message.to_string(),
        source: source.to_string(),
        code,
    };
    Found {
        d,
        unit: range.unit,
    }
}

fn parse_auto(output: &str, cx: &Context, out: &mut Vec<Found>) {
    let trimmed = output.trim_start();
    // Only the first JSON value is read, so stderr printed after a SARIF
    // document does not hide it. A failed attempt costs at most one pass, and
    // on a cargo JSON-lines stream it reads just the first line.
    if (trimmed.starts_with('{') || trimmed.starts_with('['))
        && let Some(Ok(v)) = serde_json::Deserializer::from_slice(trimmed.as_bytes())
            .into_iter::<Value>()
            .next()
    {
        if is_sarif(&v) {
            parse_sarif(&v, cx, out);
            return;
        }
        if is_protocol(&v) {
            parse_protocol(&v, cx, out);
            return;
        }
        if is_ruff_json(&v) {
            parse_ruff_json(&v, cx, out);
            return;
        }
    }
    parse_lines(output, LineMode::Auto, cx, out);
}

/// Finds the document of an explicitly named JSON format even when the tool
/// printed noise (progress, a banner on stderr) before or after it.
/// Only a few candidate starts are tried so that the cost stays linear even
/// for output full of lines that begin with a bracket.
fn find_json(output: &str, accept: fn(&Value) -> bool) -> Option<Value> {
    const MAX_TRIES: usize = 8;
    let mut tries = 0;
    let mut offset = 0;
    for line in output.split_inclusive('\n') {
        let start = offset;
        offset += line.len();
        let t = line.trim_start();
        if !(t.starts_with('{') || t.starts_with('[')) {
            continue;
        }
        tries += 1;
        if tries > MAX_TRIES {
            break;
        }
        let Some(text) = output.get(start + (line.len() - t.len())..) else {
            continue;
        };
        let mut values = serde_json::Deserializer::from_slice(text.as_bytes()).into_iter::<Value>();
        if let Some(Ok(v)) = values.next()
            && accept(&v)
        {
            return Some(v);
        }
    }
    None
}

fn is_sarif(v: &Value) -> bool {
    v.get("runs").is_some_and(Value::is_array)
}

fn is_protocol_entry(v: &Value) -> bool {
    v.get("uri").is_some_and(Value::is_string) && v.get("diagnostics").is_some_and(Value::is_array)
}

fn is_protocol(v: &Value) -> bool {
    match v {
        Value::Array(items) => items.iter().all(is_protocol_entry),
        Value::Object(_) => is_protocol_entry(v),
        _ => false,
    }
}

// ---------------------------------------------------------------------------
// Line-oriented formats

fn parse_lines(output: &str, mode: LineMode, cx: &Context, out: &mut Vec<Found>) {
    for line in output.lines() {
        let t = line.trim();
        if matches!(mode, LineMode::Auto | LineMode::Cargo)
            && t.starts_with('{')
            && let Ok(v) = serde_json::from_slice::<Value>(t.as_bytes())
            && v.is_object()
        {
            push_cargo(&v, cx, out);
            continue;
        }
        if mode == LineMode::Cargo {
            continue;
        }
        let compiler = mode != LineMode::Ruff;
        let ruff = mode != LineMode::Compiler;
        if let Some(d) = parse_line(line, compiler, ruff, cx) {
            out.push(d);
        }
    }
}

struct Location<'a> {
    path: &'a str,
    nums: [u32; 4],
    count: usize,
    rest: &'a str,
}

/// Finds `path:line[:col[:end_line:end_col]]:` at the start of a line.
/// The path runs to the first colon (after a Windows drive letter), so it
/// may hold spaces and any letters but no colon: allowing colons would turn
/// lines like make's `make: *** [Makefile:12: all] Error 1` into locations.
fn split_location(line: &str) -> Option<Location<'_>> {
    // `go vet` prefixes type-checking errors: `vet: ./x.go:3:1: undefined: foo`.
    let line = line.strip_prefix("vet: ").unwrap_or(line);
    let bytes = line.as_bytes();
    let drive = match (bytes.first(), bytes.get(1), bytes.get(2)) {
        (Some(d), Some(b':'), Some(b'\\' | b'/')) if d.is_ascii_alphabetic() => 2,
        _ => 0,
    };
    let colon = drive + line.get(drive..)?.find(':')?;
    let path = line.get(..colon)?;
    // Code excerpts (gcc's `  5 |     x = a ? b:1:2`) are indented; real
    // locations never are.
    if path.is_empty() || path.starts_with(char::is_whitespace) {
        return None;
    }
    let (first, mut rest) = leading_number(line.get(colon + 1..)?)?;
    let mut nums = [first, 0, 0, 0];
    let mut count = 1;
    while let Some(slot) = nums.get_mut(count) {
        let Some((n, r)) = leading_number(rest) else {
            break;
        };
        *slot = n;
        count += 1;
        rest = r;
    }
    Some(Location {
        path,
        nums,
        count,
        rest,
    })
}

/// Reads `DIGITS:` at the start of `s`. Absurdly large numbers saturate
/// rather than make the line unparseable.
fn leading_number(s: &str) -> Option<(u32, &str)> {
    let len = s.bytes().take_while(u8::is_ascii_digit).count();
    if len == 0 || s.as_bytes().get(len) != Some(&b':') {
        return None;
    }
    let n = s.get(..len)?.bytes().fold(0u32, |n, b| {
        n.saturating_mul(10).saturating_add(u32::from(b - b'0'))
    });
    Some((n, s.get(len + 1..)?))
}

struct Classified<'a> {
    severity: Severity,
    message: &'a str,
    source: &'a str,
    code: Option<String>,
    /// How the line's columns count.
    unit: Unit,
}

fn parse_line(line: &str, compiler: bool, ruff: bool, cx: &Context) -> Option<Found> {
    let line = strip_ansi(line);
    let loc = split_location(&line)?;
    let rest = loc.rest.trim();
    if rest.is_empty() {
        // `In file included from main.c:1:` and similar context lines.
        return None;
    }
    let c = classify(rest, compiler, ruff, cx)?;
    if c.message.is_empty() {
        return None;
    }
    let [l, c1, l2, c2] = loc.nums;
    let line0 = l.saturating_sub(1);
    let unit = c.unit;
    let range = match loc.count {
        1 => Range::point(line0, 0, unit),
        2 | 3 => Range::point(line0, c1.saturating_sub(1), unit),
        // mypy --show-error-end: the end column is 1-based and inclusive,
        // which is the same number as a 0-based exclusive end.
        _ => Range::new(
            (line0, c1.saturating_sub(1)),
            (l2.saturating_sub(1), c2),
            unit,
        ),
    };
    Some(make(
        resolve_path(cx.base, loc.path),
        range,
        c.severity,
        c.message,
        c.source,
        c.code,
    ))
}

fn classify<'a>(
    rest: &'a str,
    compiler: bool,
    ruff: bool,
    cx: &Context<'a>,
) -> Option<Classified<'a>> {
    let default_source = cx.default_source;
    if compiler && let Some(c) = severity_form(rest, cx) {
        return Some(c);
    }
    if ruff && let Some(c) = ruff_form(rest) {
        return Some(c);
    }
    if !compiler {
        return None;
    }
    if let Some(c) = eslint_form(rest, default_source) {
        return Some(c);
    }
    // `go vet` and `go build` print no severity at all.
    Some(Classified {
        severity: Severity::Error,
        message: rest,
        source: default_source,
        code: None,
        unit: cx.compiler,
    })
}

/// `severity: message [code]` (gcc, clang, mypy, shellcheck -f gcc) and
/// `severity[CODE]: message` (rustc --error-format=short).
fn severity_form<'a>(rest: &'a str, cx: &Context<'a>) -> Option<Classified<'a>> {
    // The bracket form first: a clippy code contains colons of its own.
    if let Some((word, after)) = rest.split_once('[')
        && let Some(severity) = Severity::from_word(word)
        && let Some((code, message)) = after.split_once("]:")
        && !code.is_empty()
        && !code.contains(|c: char| c.is_whitespace() || c == '[')
    {
        let source = if code.starts_with("clippy::") {
            "clippy"
        } else {
            "rustc"
        };
        return Some(Classified {
            severity,
            message: message.trim(),
            source,
            code: Some(code.to_string()),
            unit: CHARS,
        });
    }
    let (head, message) = rest.split_once(':')?;
    let severity = Severity::from_word(head)?;
    let (message, code) = split_trailing_code(message.trim());
    Some(Classified {
        severity,
        message,
        source: cx.default_source,
        code,
        unit: cx.compiler,
    })
}

/// Splits gcc's `[-Wunused-variable]`, mypy's `[name-defined]` or
/// shellcheck's `[SC2086]` off the end of a message. The bracket must be a
/// separate word so that messages ending in an index (`a[i]`) stay whole.
fn split_trailing_code(message: &str) -> (&str, Option<String>) {
    let Some(without) = message.strip_suffix(']') else {
        return (message, None);
    };
    let Some(open) = without.rfind('[') else {
        return (message, None);
    };
    let (Some(before), Some(code)) = (without.get(..open), without.get(open + 1..)) else {
        return (message, None);
    };
    let text = before.trim_end();
    if code.is_empty()
        || code.contains(|c: char| c.is_whitespace() || c == ']')
        || text.is_empty()
        || text.len() == before.len()
    {
        return (message, None);
    }
    (text, Some(code.to_string()))
}

/// ruff's concise format: `CODE [*] message`, or a syntax error. ruff counts columns in
/// characters, in every output format.
fn ruff_form(rest: &str) -> Option<Classified<'_>> {
    for prefix in ["SyntaxError:", "invalid-syntax:"] {
        if let Some(message) = rest.strip_prefix(prefix) {
            return Some(Classified {
                severity: Severity::Error,
                message: message.trim(),
                source: "ruff",
                code: None,
                unit: CHARS,
            });
        }
    }
    let (code, message) = rest.split_once(' ')?;
    if !is_ruff_code(code) {
        return None;
    }
    let message = message.trim_start();
    // `[*]` only says that a fix is available.
    let message = message.strip_prefix("[*]").unwrap_or(message).trim_start();
    Some(Classified {
        severity: ruff_severity(code),
        message,
        source: "ruff",
        code: Some(code.to_string()),
        unit: CHARS,
    })
}

/// The severities ruff's own language server gives: everything is a warning except names
/// that cannot resolve and files that cannot be read (E999 is the old syntax-error code).
fn ruff_severity(code: &str) -> Severity {
    match code {
        "F821" | "E902" | "E999" => Severity::Error,
        _ => Severity::Warning,
    }
}

/// Ruff rule codes are upper-case letters followed by digits (F821, UP006).
fn is_ruff_code(code: &str) -> bool {
    let letters = code.bytes().take_while(u8::is_ascii_uppercase).count();
    let digits = code.len() - letters;
    letters > 0 && digits > 0 && code.bytes().skip(letters).all(|b| b.is_ascii_digit())
}

/// eslint -f unix: `message [Error/rule-name]`.
fn eslint_form<'a>(rest: &'a str, default_source: &'a str) -> Option<Classified<'a>> {
    let without = rest.strip_suffix(']')?;
    let open = without.rfind(" [")?;
    let inner = without.get(open + 2..)?;
    let (word, rule) = inner.split_once('/').unwrap_or((inner, ""));
    let severity = Severity::from_word(word)?;
    Some(Classified {
        severity,
        message: without.get(..open)?.trim(),
        source: default_source,
        code: (!rule.is_empty()).then(|| rule.to_string()),
        // ESLint's columns index JavaScript strings, which count UTF-16 code units.
        unit: UTF16,
    })
}

/// Drops terminal escape sequences, so output forced into colour (or with
/// gcc's OSC 8 hyperlinks on warning options) still parses.
fn strip_ansi(line: &str) -> Cow<'_, str> {
    if !line.contains('\x1b') {
        return Cow::Borrowed(line);
    }
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if c != '\x1b' {
            out.push(c);
            continue;
        }
        match chars.next() {
            // CSI: parameter bytes up to one final byte in '@'..='~'.
            Some('[') => {
                for c in chars.by_ref() {
                    if ('@'..='~').contains(&c) {
                        break;
                    }
                }
            }
            // OSC: up to BEL or ESC '\'.
            Some(']') => loop {
                match chars.next() {
                    None | Some('\x07') => break,
                    Some('\x1b') => {
                        if chars.peek() == Some(&'\\') {
                            chars.next();
                        }
                        break;
                    }
                    Some(_) => {}
                }
            },
            _ => {}
        }
    }
    Cow::Owned(out)
}

// ---------------------------------------------------------------------------
// cargo / rustc JSON

fn push_cargo(v: &Value, cx: &Context, out: &mut Vec<Found>) {
    // `cargo --message-format=json` wraps rustc's diagnostic; plain
    // `rustc --error-format=json` prints it bare.
    let msg = if v.get("reason").and_then(Value::as_str) == Some("compiler-message") {
        match v.get("message") {
            Some(m) => m,
            None => return,
        }
    } else if v.get("$message_type").and_then(Value::as_str) == Some("diagnostic") {
        v
    } else {
        return;
    };
    let level = msg.get("level").and_then(Value::as_str).unwrap_or("");
    if level == "failure-note" {
        return;
    }
    let severity = Severity::from_word(level).unwrap_or(if level.starts_with("error") {
        // "error: internal compiler error"
        Severity::Error
    } else {
        Severity::Warning
    });
    let message = msg.get("message").and_then(Value::as_str).unwrap_or("");
    let code = msg
        .get("code")
        .and_then(|c| c.get("code"))
        .and_then(Value::as_str);
    let source = match code {
        Some(c) if c.starts_with("clippy::") => "clippy",
        _ => "rustc",
    };
    let Some(spans) = msg.get("spans").and_then(Value::as_array) else {
        return;
    };
    // Summaries ("aborting due to…", "N warnings emitted") have no primary
    // span and so produce nothing. A lint can have several primary spans
    // ("unused imports: `a` and `b`"); each is a place to show it.
    for span in spans {
        if span.get("is_primary").and_then(Value::as_bool) != Some(true) {
            continue;
        }
        let span = user_span(span, cx.base);
        let Some(file) = span.get("file_name").and_then(Value::as_str) else {
            continue;
        };
        // rustc's spans count columns in characters ("1-based, character offset"; a tab is
        // one).
        let range = Range::new(
            (
                num(span, "line_start").saturating_sub(1),
                num(span, "column_start").saturating_sub(1),
            ),
            (
                num(span, "line_end").saturating_sub(1),
                // 1-based exclusive → 0-based exclusive.
                num(span, "column_end").saturating_sub(1),
            ),
            CHARS,
        );
        out.push(make(
            resolve_path(cx.base, file),
            range,
            severity,
            message,
            source,
            code.map(str::to_string),
        ));
    }
}

/// A primary span inside a macro from another crate (the standard library's
/// sources, `<…macros>`) is useless to the user: follow the expansion chain
/// back to the call site in their own code, as rust-analyzer does.
fn user_span<'a>(span: &'a Value, base: &Path) -> &'a Value {
    let external = |s: &Value| {
        s.get("file_name").and_then(Value::as_str).is_some_and(|f| {
            f.starts_with('<') || (Path::new(f).is_absolute() && !Path::new(f).starts_with(base))
        })
    };
    let mut current = span;
    // Bounded: the JSON is input, and a cycle cannot occur in a tree, but
    // very deep nesting should not cost much either.
    for _ in 0..64 {
        if !external(current) {
            return current;
        }
        match current.get("expansion").and_then(|e| e.get("span")) {
            Some(next) => current = next,
            None => break,
        }
    }
    if external(current) { span } else { current }
}

fn num(v: &Value, key: &str) -> u32 {
    v.get(key)
        .and_then(Value::as_u64)
        .map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX))
}

// ---------------------------------------------------------------------------
// SARIF 2.1.0

fn parse_sarif(doc: &Value, cx: &Context, out: &mut Vec<Found>) {
    let Some(runs) = doc.get("runs").and_then(Value::as_array) else {
        return;
    };
    for run in runs {
        let driver = run.get("tool").and_then(|t| t.get("driver"));
        let source = driver
            .and_then(|d| d.get("name"))
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .unwrap_or(cx.default_source);
        let rules: &[Value] = driver
            .and_then(|d| d.get("rules"))
            .and_then(Value::as_array)
            .map_or(&[], Vec::as_slice);
        let Some(results) = run.get("results").and_then(Value::as_array) else {
            continue;
        };
        // SARIF 2.1.0 requires `columnKind` when there are results but gives it no default;
        // tools that leave it out (ruff) count code points, the default of Microsoft's SARIF
        // SDK. `bytes` is SARIF 2.2's.
        let unit = match run.get("columnKind").and_then(Value::as_str) {
            Some("utf16CodeUnits") => UTF16,
            Some("bytes") => BYTES,
            _ => CHARS,
        };
        for result in results {
            if let Some(d) = sarif_result(result, run, rules, source, cx) {
                out.push(Found { unit, ..d });
            }
        }
    }
}

fn sarif_result(
    result: &Value,
    run: &Value,
    rules: &[Value],
    source: &str,
    cx: &Context,
) -> Option<Found> {
    let kind = result.get("kind").and_then(Value::as_str);
    if matches!(kind, Some("pass" | "notApplicable")) || is_suppressed(result) {
        return None;
    }
    let rule_id = result
        .get("ruleId")
        .and_then(Value::as_str)
        .or_else(|| result.get("rule")?.get("id")?.as_str());
    let rule_index = result
        .get("ruleIndex")
        .or_else(|| result.get("rule")?.get("index"))
        .and_then(Value::as_u64)
        .and_then(|i| usize::try_from(i).ok());
    let rule = rule_index
        .and_then(|i| rules.get(i))
        // By id, the last rule of that id (a tool's rules are few, and most results give an
        // index instead: a list looked through rather than a hash table of its own).
        .or_else(|| {
            let id = rule_id?;
            rules
                .iter()
                .rev()
                .find(|r| r.get("id").and_then(Value::as_str) == Some(id))
        });

    let severity = sarif_severity(result, rule, kind);

    let message = sarif_message(result.get("message"), rule);

    let physical = result
        .get("locations")
        .and_then(Value::as_array)?
        .iter()
        .find_map(|l| l.get("physicalLocation"))?;
    let mut artifact = physical.get("artifactLocation")?;
    if artifact.get("uri").is_none() {
        let index = artifact.get("index").and_then(Value::as_u64)?;
        artifact = run
            .get("artifacts")?
            .get(usize::try_from(index).ok()?)?
            .get("location")?;
    }
    let path = sarif_artifact_path(artifact, run, cx.base, 0)?;

    let range = sarif_range(physical.get("region"));

    Some(make(
        path,
        range,
        severity,
        &message,
        source,
        rule_id.map(str::to_string),
    ))
}

/// A SARIF result's severity, from its level by SARIF's defaulting.
fn sarif_severity(result: &Value, rule: Option<&Value>, kind: Option<&str>) -> Severity {
    // SARIF's defaulting: the result's level, else the rule's configured
    // level, else "warning" — or "none" for results that are not failures.
    let level = result
        .get("level")
        .and_then(Value::as_str)
        .or_else(|| rule?.get("defaultConfiguration")?.get("level")?.as_str())
        .unwrap_or(match kind {
            None | Some("fail") => "warning",
            Some(_) => "none",
        });
    match level {
        "error" => Severity::Error,
        "note" => Severity::Info,
        "none" => Severity::Hint,
        _ => Severity::Warning,
    }
}

/// A SARIF region (1-based lines and columns, in characters) as a 0-based range; a region without
/// a start line, or none, is the file's start.
fn sarif_range(region: Option<&Value>) -> Range {
    match region {
        Some(region) if region.get("startLine").is_some() => {
            let start_line = num(region, "startLine").saturating_sub(1);
            let start_char = num(region, "startColumn").saturating_sub(1);
            let end_line = region
                .get("endLine")
                .map_or(start_line, |_| num(region, "endLine").saturating_sub(1));
            match region.get("endColumn") {
                // endColumn is 1-based exclusive → 0-based exclusive.
                Some(_) => Range::new(
                    (start_line, start_char),
                    (end_line, num(region, "endColumn").saturating_sub(1)),
                    CHARS,
                ),
                None => Range::point(start_line, start_char, CHARS),
            }
        }
        _ => Range::point(0, 0, CHARS),
    }
}

fn is_suppressed(result: &Value) -> bool {
    result
        .get("suppressions")
        .and_then(Value::as_array)
        .is_some_and(|s| {
            s.iter().any(|s| {
                matches!(
                    s.get("status").and_then(Value::as_str),
                    None | Some("accepted")
                )
            })
        })
}

fn sarif_message(message: Option<&Value>, rule: Option<&Value>) -> String {
    let Some(message) = message else {
        return String::new();
    };
    let text = message
        .get("text")
        .and_then(Value::as_str)
        .or_else(|| {
            let id = message.get("id")?.as_str()?;
            rule?.get("messageStrings")?.get(id)?.get("text")?.as_str()
        })
        .or_else(|| message.get("markdown")?.as_str())
        .unwrap_or("");
    match message.get("arguments").and_then(Value::as_array) {
        Some(args) => substitute_arguments(text, args),
        None => text.to_string(),
    }
}

/// SARIF message strings have `{0}`-style placeholders and `{{`/`}}` for
/// literal braces.
fn substitute_arguments(text: &str, args: &[Value]) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(i) = rest.find(['{', '}']) {
        let (before, tail) = rest.split_at(i);
        out.push_str(before);
        if let Some(t) = tail.strip_prefix("{{") {
            out.push('{');
            rest = t;
        } else if let Some(t) = tail.strip_prefix("}}") {
            out.push('}');
            rest = t;
        } else if let Some((arg, t)) = tail
            .strip_prefix('{')
            .and_then(|t| t.split_once('}'))
            .and_then(|(n, t)| Some((args.get(n.parse::<usize>().ok()?)?, t)))
        {
            match arg {
                Value::String(s) => out.push_str(s),
                other => out.push_str(&other.to_string()),
            }
            rest = t;
        } else {
            let mut chars = tail.chars();
            if let Some(c) = chars.next() {
                out.push(c);
            }
            rest = chars.as_str();
        }
    }
    out.push_str(rest);
    out
}

/// Resolves an artifactLocation: an absolute `file:` URI, or a relative
/// reference resolved against its `uriBaseId` (through the run's
/// originalUriBaseIds, which may chain) or, failing that, against `base`.
fn sarif_artifact_path(
    location: &Value,
    run: &Value,
    base: &Path,
    depth: usize,
) -> Option<PathBuf> {
    let uri = location.get("uri").and_then(Value::as_str).unwrap_or("");
    if let Some(p) = crate::files::uri_path(uri, true) {
        return Some(crate::files::normalize(&p));
    }
    if has_scheme(uri) {
        // http: and the like name no file we could show.
        return None;
    }
    let relative = crate::files::percent_decode(uri);
    if Path::new(&relative).is_absolute() {
        return Some(crate::files::normalize(Path::new(&relative)));
    }
    let root = location
        .get("uriBaseId")
        .and_then(Value::as_str)
        .filter(|_| depth < 8)
        .and_then(|id| run.get("originalUriBaseIds")?.get(id))
        .and_then(|b| sarif_artifact_path(b, run, base, depth + 1))
        .unwrap_or_else(|| base.to_path_buf());
    Some(crate::files::normalize(&root.join(relative)))
}

fn has_scheme(uri: &str) -> bool {
    // A one-letter "scheme" is a Windows drive letter.
    uri.split_once(':').is_some_and(|(scheme, _)| {
        scheme.len() > 1
            && scheme.starts_with(|c: char| c.is_ascii_alphabetic())
            && scheme
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
    })
}

// ---------------------------------------------------------------------------
// ruff --output-format json

/// An array of ruff's findings (`[]` when there are none).
fn is_ruff_json(v: &Value) -> bool {
    v.as_array().is_some_and(|items| {
        items
            .iter()
            .all(|d| d.get("filename").is_some_and(Value::is_string) && d["location"].is_object())
    })
}

/// ruff's JSON: the concise format's findings with an end, `location` and `end_location`
/// being 1-based `row` and `column`, the end exclusive, columns in characters. A syntax
/// error's code is `invalid-syntax` (null in older versions), which the concise format
/// does not show as a code.
fn parse_ruff_json(v: &Value, cx: &Context, out: &mut Vec<Found>) {
    for d in v.as_array().into_iter().flatten() {
        let Some(file) = d["filename"].as_str() else {
            continue;
        };
        let at = |k: &str| {
            (
                num(&d[k], "row").saturating_sub(1),
                num(&d[k], "column").saturating_sub(1),
            )
        };
        let code = d["code"].as_str().filter(|c| *c != "invalid-syntax");
        out.push(make(
            resolve_path(cx.base, file),
            Range::new(at("location"), at("end_location"), CHARS),
            code.map_or(Severity::Error, ruff_severity),
            d["message"].as_str().unwrap_or(""),
            "ruff",
            code.map(str::to_string),
        ));
    }
}

// ---------------------------------------------------------------------------
// ccide's own wire format

fn parse_protocol(v: &Value, cx: &Context, out: &mut Vec<Found>) {
    match v {
        Value::Array(entries) => {
            for e in entries {
                protocol_entry(e, cx, out);
            }
        }
        Value::Object(_) => protocol_entry(v, cx, out),
        _ => {}
    }
}

/// The file a protocol entry's `uri` names: a `file://` URI or a path, relative ones against
/// `base`, normalised.
pub fn entry_path(uri: &str, base: &Path) -> PathBuf {
    // ccide writes `file://` + the raw path, so a `%` in it is literal.
    match crate::files::uri_path(uri, false) {
        Some(p) => crate::files::normalize(&p),
        None => resolve_path(base, uri),
    }
}

fn protocol_entry(entry: &Value, cx: &Context, out: &mut Vec<Found>) {
    let Some(uri) = entry.get("uri").and_then(Value::as_str) else {
        return;
    };
    let path = entry_path(uri, cx.base);
    let Some(diagnostics) = entry.get("diagnostics").and_then(Value::as_array) else {
        return;
    };
    for d in diagnostics {
        let message = match d.get("message") {
            Some(Value::String(s)) => s.as_str(),
            // LSP 3.18 allows MarkupContent.
            Some(m) => m.get("value").and_then(Value::as_str).unwrap_or(""),
            None => "",
        };
        let range = d.get("range");
        let pos = |which: &str| {
            let p = range.and_then(|r| r.get(which));
            p.map_or((0, 0), |p| (num(p, "line"), num(p, "character")))
        };
        let source = d
            .get("source")
            .and_then(Value::as_str)
            .filter(|s| !s.is_empty())
            .unwrap_or(cx.default_source);
        out.push(make(
            path.clone(),
            // The getDiagnostics form: UTF-16 already.
            Range::new(pos("start"), pos("end"), UTF16),
            protocol_severity(d.get("severity")),
            message,
            source,
            code_string(d.get("code")),
        ));
    }
}

fn protocol_severity(v: Option<&Value>) -> Severity {
    match v {
        Some(Value::Number(n)) => match n.as_u64() {
            Some(2) => Severity::Warning,
            Some(3) => Severity::Info,
            Some(4) => Severity::Hint,
            _ => Severity::Error,
        },
        Some(Value::String(s)) if s.eq_ignore_ascii_case("weak_warning") => Severity::Warning,
        Some(Value::String(s)) => Severity::from_word(s).unwrap_or(Severity::Error),
        _ => Severity::Error,
    }
}

fn code_string(v: Option<&Value>) -> Option<String> {
    match v? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

// ---------------------------------------------------------------------------
// Paths

fn resolve_path(base: &Path, p: &str) -> PathBuf {
    let p = Path::new(p);
    if p.is_absolute() {
        crate::files::normalize(p)
    } else {
        crate::files::normalize(&base.join(p))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Severity::{Error, Hint, Info, Warning};

    /// The fixtures' commands ran in /work/sample (see the fixtures' README).
    const SAMPLE: &str = "/work/sample";

    fn run(output: &str, format: Format, base: &str, source: &str) -> Vec<Diagnostic> {
        parse(output, format, Path::new(base), source, &mut |_| None)
    }

    /// Every field of a diagnostic on one line, so expectations read like
    /// the tool output they come from:
    /// `path | start_line:start_char-end_line:end_char | severity | source | code | message`
    /// with `-` for no code.
    fn show(d: &Diagnostic) -> String {
        format!(
            "{} | {}:{}-{}:{} | {} | {} | {} | {}",
            d.path.display(),
            d.start_line,
            d.start_char,
            d.end_line,
            d.end_char,
            d.severity.as_str(),
            d.source,
            d.code.as_deref().unwrap_or("-"),
            d.message
        )
    }

    #[track_caller]
    fn assert_diags(got: &[Diagnostic], want: &[&str]) {
        let got: Vec<String> = got.iter().map(show).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn severity_words() {
        for (w, s) in [
            ("error", Error),
            ("ERROR", Error),
            ("fatal", Error),
            ("fatal error", Error),
            ("Critical", Error),
            ("warning", Warning),
            ("warn", Warning),
            ("note", Info),
            ("info", Info),
            ("Information", Info),
            ("hint", Hint),
            ("help", Hint),
            ("style", Hint),
        ] {
            assert_eq!(Severity::from_word(w), Some(s), "{w}");
        }
        assert_eq!(Severity::from_word("undefined"), None);
        assert_eq!(Severity::from_word(""), None);
        let names = [Error, Warning, Info, Hint].map(Severity::as_str);
        assert_eq!(names, ["Error", "Warning", "Info", "Hint"]);
    }

    #[test]
    fn format_prefix() {
        let cases = [
            (
                "sarif:semgrep --sarif {file}",
                Format::Sarif,
                "semgrep --sarif {file}",
            ),
            ("ruff: ruff check", Format::Ruff, "ruff check"),
            ("auto:x", Format::Auto, "x"),
            ("cargo:cargo check", Format::Cargo, "cargo check"),
            ("protocol:p", Format::Protocol, "p"),
            ("compiler:gcc -c", Format::Compiler, "gcc -c"),
            // Not a known name: the whole spec is the command.
            ("sh -c 'a:b'", Format::Auto, "sh -c 'a:b'"),
            ("http://x:80", Format::Auto, "http://x:80"),
            ("gcc", Format::Auto, "gcc"),
        ];
        for (spec, format, command) in cases {
            assert_eq!(split_format_prefix(spec), (format, command), "{spec}");
        }
        assert_eq!(Format::from_name("SARIF"), None);
        assert_eq!(Format::from_name("ruff"), Some(Format::Ruff));
    }

    // -- Real tool output -------------------------------------------------

    #[test]
    fn fixture_ruff_concise() {
        let text = include_str!("../../tests/fixtures/diagnostics/ruff-concise.txt");
        let want = [
            "/work/sample/py/app.py | 0:7-0:7 | Warning | ruff | F401 | `os` imported but unused",
            "/work/sample/py/app.py | 1:7-1:7 | Warning | ruff | F401 | `sys` imported but unused",
            "/work/sample/py/app.py | 5:4-5:4 | Warning | ruff | F841 | Local variable `unused` is assigned to but never used",
            "/work/sample/py/app.py | 6:29-6:29 | Error | ruff | F821 | Undefined name `undefined_name`",
            "/work/sample/py/app.py | 10:0-10:0 | Error | ruff | F821 | Undefined name `reveal_type`",
            "/work/sample/py/broken.py | 0:6-0:6 | Error | ruff | - | Expected a parameter or the end of the parameter list",
            "/work/sample/py/broken.py | 0:7-0:7 | Error | ruff | - | Expected `)`, found newline",
            "/work/sample/py/my dir/ä.py | 0:0-0:0 | Warning | ruff | UP035 | `typing.List` is deprecated, use `list` instead",
            "/work/sample/py/my dir/ä.py | 3:9-3:9 | Warning | ruff | UP006 | Use `list` instead of `List` for type annotation",
            "/work/sample/py/my dir/ä.py | 4:15-4:15 | Warning | ruff | E711 | Comparison to `None` should be `cond is None`",
        ];
        assert_diags(&run(text, Format::Ruff, SAMPLE, "ruff"), &want);
        assert_diags(&run(text, Format::Auto, SAMPLE, "ruff"), &want);
        // The source comes from the format, not from the caller.
        assert_diags(&run(text, Format::Auto, SAMPLE, "whatever"), &want);
    }

    #[test]
    fn fixture_ruff_json_has_ends() {
        let text = include_str!("../../tests/fixtures/diagnostics/ruff.json");
        let want = [
            "/work/sample/py/app.py | 0:7-0:9 | Warning | ruff | F401 | `os` imported but unused",
            "/work/sample/py/app.py | 1:7-1:10 | Warning | ruff | F401 | `sys` imported but unused",
            "/work/sample/py/app.py | 5:4-5:10 | Warning | ruff | F841 | Local variable `unused` is assigned to but never used",
            "/work/sample/py/app.py | 6:29-6:43 | Error | ruff | F821 | Undefined name `undefined_name`",
            "/work/sample/py/app.py | 10:0-10:11 | Error | ruff | F821 | Undefined name `reveal_type`",
            "/work/sample/py/broken.py | 0:6-0:7 | Error | ruff | - | Expected a parameter or the end of the parameter list",
            "/work/sample/py/broken.py | 0:7-1:0 | Error | ruff | - | Expected `)`, found newline",
            "/work/sample/py/my dir/ä.py | 0:0-0:23 | Warning | ruff | UP035 | `typing.List` is deprecated, use `list` instead",
            "/work/sample/py/my dir/ä.py | 3:9-3:13 | Warning | ruff | UP006 | Use `list` instead of `List` for type annotation",
            "/work/sample/py/my dir/ä.py | 4:15-4:19 | Warning | ruff | E711 | Comparison to `None` should be `cond is None`",
        ];
        assert_diags(&run(text, Format::Ruff, SAMPLE, "ruff"), &want);
        assert_diags(&run(text, Format::Auto, SAMPLE, "x"), &want);
        // Its findings are the concise format's, which has no ends.
        let concise = run(
            include_str!("../../tests/fixtures/diagnostics/ruff-concise.txt"),
            Format::Ruff,
            SAMPLE,
            "ruff",
        );
        let starts = |ds: &[Diagnostic]| -> Vec<String> {
            ds.iter()
                .map(|d| {
                    format!(
                        "{} {}:{} {}",
                        d.path.display(),
                        d.start_line,
                        d.start_char,
                        d.message
                    )
                })
                .collect()
        };
        assert_eq!(
            starts(&run(text, Format::Ruff, SAMPLE, "ruff")),
            starts(&concise)
        );
    }

    // -- Columns ----------------------------------------------------------

    /// The sources of the `columns-*` fixtures, where each tool's output names them: on each,
    /// an error after `é🦀`, and one on a line indented by a tab.
    fn columns_source(p: &Path) -> Option<String> {
        let name = p.strip_prefix(SAMPLE).ok()?.to_str()?;
        let text = match name {
            "uni/columns.py" => include_str!("../../tests/fixtures/diagnostics/columns/columns.py"),
            "uni/columns.c" => include_str!("../../tests/fixtures/diagnostics/columns/columns.c"),
            "uni/columns.sh" => include_str!("../../tests/fixtures/diagnostics/columns/columns.sh"),
            "cols/src/lib.rs" => include_str!("../../tests/fixtures/diagnostics/columns/lib.rs"),
            _ => return None,
        };
        Some(text.to_string())
    }

    fn run_columns(output: &str, format: Format, base: &str, source: &str) -> Vec<Diagnostic> {
        parse(output, format, Path::new(base), source, &mut columns_source)
    }

    /// What each tool printed for an error after `é🦀` reaches the store at the UTF-16 column
    /// VS Code shows (`s = "é🦀" + foo`: ruff says 12, VS Code 12 from 0, so 13 from 1; rustc
    /// says 32 where VS Code says 32 from 0), with the tool's range where it gives one.
    #[test]
    fn columns_after_a_wide_character_are_counted_in_utf16_in_every_format() {
        let py = "/work/sample/uni/columns.py";
        let foo = "Undefined name `foo`";
        let bar = "Undefined name `bar`";
        let concise = include_str!("../../tests/fixtures/diagnostics/columns-ruff-concise.txt");
        let want = [
            format!("{py} | 0:12-0:12 | Error | ruff | F821 | {foo}"),
            format!("{py} | 2:13-2:13 | Error | ruff | F821 | {bar}"),
        ];
        let want: Vec<&str> = want.iter().map(String::as_str).collect();
        assert_diags(&run_columns(concise, Format::Ruff, SAMPLE, "ruff"), &want);
        assert_diags(&run_columns(concise, Format::Auto, SAMPLE, "import"), &want);
        let ranged = [
            format!("{py} | 0:12-0:15 | Error | ruff | F821 | {foo}"),
            format!("{py} | 2:13-2:16 | Error | ruff | F821 | {bar}"),
        ];
        let ranged: Vec<&str> = ranged.iter().map(String::as_str).collect();
        let json = include_str!("../../tests/fixtures/diagnostics/columns-ruff.json");
        assert_diags(&run_columns(json, Format::Ruff, SAMPLE, "ruff"), &ranged);
        assert_diags(&run_columns(json, Format::Auto, SAMPLE, "import"), &ranged);
        // ruff's SARIF has no columnKind: code points.
        let sarif = include_str!("../../tests/fixtures/diagnostics/columns-ruff.sarif");
        assert_diags(&run_columns(sarif, Format::Auto, SAMPLE, "import"), &ranged);

        let cargo = include_str!("../../tests/fixtures/diagnostics/columns-cargo.jsonl");
        let rs = "/work/sample/cols/src/lib.rs";
        let want = [
            format!(
                "{rs} | 1:32-1:35 | Error | rustc | E0425 | cannot find value `foo` in this scope"
            ),
            format!(
                "{rs} | 2:41-2:44 | Error | rustc | E0425 | cannot find value `bar` in this scope"
            ),
        ];
        let want: Vec<&str> = want.iter().map(String::as_str).collect();
        for format in [Format::Cargo, Format::Auto] {
            assert_diags(
                &run_columns(cargo, format, "/work/sample/cols", "cargo"),
                &want,
            );
        }

        // gcc counts display columns: 🦀 takes two, a tab runs to the next multiple of 8.
        let gcc = include_str!("../../tests/fixtures/diagnostics/columns-gcc.txt");
        let c = "/work/sample/uni/columns.c";
        let want = [
            format!(
                "{c} | 1:32-1:32 | Error | gcc | - | ‘foo’ undeclared (first use in this function)"
            ),
            format!(
                "{c} | 1:32-1:32 | Info | gcc | - | each undeclared identifier is reported only once for each function it appears in"
            ),
            format!(
                "{c} | 2:31-2:31 | Error | gcc | - | ‘bar’ undeclared (first use in this function)"
            ),
        ];
        let want: Vec<&str> = want.iter().map(String::as_str).collect();
        assert_diags(&run_columns(gcc, Format::Compiler, SAMPLE, "gcc"), &want);
        // Imported, it is known by gcc's `In function` line.
        let imported: Vec<String> = want
            .iter()
            .map(|w| w.replace("| gcc |", "| import |"))
            .collect();
        let imported: Vec<&str> = imported.iter().map(String::as_str).collect();
        assert_diags(&run_columns(gcc, Format::Auto, SAMPLE, "import"), &imported);

        let sc = include_str!("../../tests/fixtures/diagnostics/columns-shellcheck-gcc.txt");
        let got: Vec<(u32, u32, Option<String>)> =
            run_columns(sc, Format::Compiler, SAMPLE, "shellcheck")
                .into_iter()
                .map(|d| (d.start_line, d.start_char, d.code))
                .collect();
        let sc = |l, c, code: &str| (l, c, Some(code.to_string()));
        assert_eq!(
            got,
            [
                sc(1, 0, "SC2034"),
                sc(1, 14, "SC2154"),
                sc(1, 14, "SC2086"),
                sc(2, 1, "SC2034"),
                sc(2, 15, "SC2154"),
                sc(2, 15, "SC2086"),
            ]
        );
    }

    /// SARIF says its unit in `run.columnKind`; every kind of the same finding lands on the
    /// same UTF-16 columns.
    #[test]
    fn sarif_column_kind_names_the_unit() {
        let sarif = |kind: &str, start: u32, end: u32| {
            let kind = if kind.is_empty() {
                String::new()
            } else {
                format!(r#""columnKind":"{kind}","#)
            };
            format!(
                r#"{{"version":"2.1.0","runs":[{{"tool":{{"driver":{{"name":"t"}}}},{kind}"results":[{{"ruleId":"R1","message":{{"text":"m"}},"locations":[{{"physicalLocation":{{"artifactLocation":{{"uri":"file:///work/sample/uni/columns.py"}},"region":{{"startLine":1,"startColumn":{start},"endColumn":{end}}}}}}}]}}]}}]}}"#
            )
        };
        let want = ["/work/sample/uni/columns.py | 0:12-0:15 | Warning | t | R1 | m"];
        for (kind, start, end) in [
            ("", 12, 15),
            ("unicodeCodePoints", 12, 15),
            ("utf16CodeUnits", 13, 16),
            ("bytes", 16, 19),
        ] {
            let got = run_columns(&sarif(kind, start, end), Format::Sarif, SAMPLE, "x");
            assert_diags(&got, &want);
        }
    }

    /// One error, on the tab-indented line of columns.c after `é🦀`, as each kind of program
    /// counts it: gcc 39 (display), clang and go 35 (bytes), the others 31 (characters).
    #[test]
    fn compiler_lines_count_columns_as_their_program_does() {
        let line = |col: u32| format!("uni/columns.c:3:{col}: error: e\n");
        for (program, col) in [
            ("gcc", 39),
            ("cc", 39),
            ("x86_64-linux-gnu-gcc-12", 39),
            ("g++", 39),
            ("clang", 35),
            ("clang-tidy", 35),
            ("go", 35),
            ("mypy", 31),
            ("shellcheck", 31),
            ("import", 31),
        ] {
            let got = run_columns(&line(col), Format::Compiler, SAMPLE, program);
            assert_eq!((got[0].start_line, got[0].start_char), (2, 31), "{program}");
        }
        // rustc's short form and ruff's lines say who printed them, whoever ran them.
        let text = "uni/columns.py:1:12: F821 Undefined name `foo`\n\
                    cols/src/lib.rs:2:32: error[E0425]: cannot find value `foo` in this scope\n";
        let got: Vec<(u32, u32)> = run_columns(text, Format::Auto, SAMPLE, "gcc")
            .iter()
            .map(|d| (d.start_line, d.start_char))
            .collect();
        assert_eq!(got, [(0, 12), (1, 32)]);
    }

    /// gcc's display count, checked against gcc 12.2 (the column of a token after each
    /// character, `-fdiagnostics-column-unit=display`, the default).
    #[test]
    fn display_columns_expand_tabs_and_count_wide_characters_twice() {
        for (c, w) in [
            ('a', 1),
            ('é', 1),
            ('世', 2),
            ('✅', 2),
            ('⌚', 2),
            ('🚀', 2),
            ('🦀', 2),
            ('가', 2),
            ('Ａ', 2),
            ('\u{3000}', 2),
            ('\u{2e80}', 2),
            ('✓', 1),
            ('♥', 1),
            ('ｱ', 1),
            ('\u{a0}', 1),
            ('\u{7}', 1),
            ('\u{1f1e6}', 1),
            ('\u{301}', 0),
            ('\u{591}', 0),
            ('\u{200b}', 0),
            ('\u{200d}', 0),
            ('\u{fe0f}', 0),
            ('\u{e0100}', 0),
        ] {
            assert_eq!(display_width(c), w, "{c:?} U+{:04X}", c as u32);
        }
        let d = |line: &str, col: u32, up: bool| column_to_utf16(line, col, Unit::Display, up);
        assert_eq!(d("\tx", 8, false), 1);
        assert_eq!(d("a\tx", 8, false), 2);
        assert_eq!(d("\t\tx", 16, false), 2);
        assert_eq!(d("世x", 2, false), 1);
        assert_eq!(d("🦀x", 2, false), 2);
        // After a combining mark, not between it and its letter.
        assert_eq!(d("e\u{301}x", 1, false), 2);
        // Inside a tab or a wide character: its start, or its end for the end of a range.
        assert_eq!(d("\tx", 4, false), 0);
        assert_eq!(d("\tx", 4, true), 1);
        assert_eq!(d("🦀x", 1, true), 2);
        // Past the end keeps the excess.
        assert_eq!(d("ab", 5, false), 5);
    }

    /// Each file is read once however many diagnostics it has; a file that cannot be read,
    /// and a line past its end, keep the columns as printed.
    #[test]
    fn each_file_is_read_once_and_unreadable_ones_keep_their_columns() {
        let text = "uni/columns.py:1:12: F821 a\n\
                    uni/columns.c:2:33: error: b\n\
                    uni/columns.py:3:13: F821 c\n\
                    uni/columns.py:9:13: F821 past the end\n\
                    uni/gone.py:1:12: F821 unreadable\n\
                    uni/columns.py:1:1: F821 column 1 needs no text\n";
        let mut reads = Vec::new();
        let got = parse(text, Format::Auto, Path::new(SAMPLE), "gcc", &mut |p| {
            reads.push(p.to_path_buf());
            columns_source(p)
        });
        let got: Vec<(u32, u32)> = got.iter().map(|d| (d.start_line, d.start_char)).collect();
        assert_eq!(got, [(0, 12), (1, 32), (2, 13), (8, 12), (0, 11), (0, 0)]);
        let names: Vec<String> = reads.iter().map(|p| p.display().to_string()).collect();
        assert_eq!(
            names,
            [
                "/work/sample/uni/columns.c",
                "/work/sample/uni/columns.py",
                "/work/sample/uni/gone.py"
            ]
        );
    }

    #[test]
    fn fixture_ruff_sarif() {
        let text = include_str!("../../tests/fixtures/diagnostics/ruff.sarif");
        // ä.py's URI is percent-encoded: file:///work/sample/py/my%20dir/%C3%A4.py
        let want = [
            "/work/sample/py/app.py | 0:7-0:9 | Error | ruff | F401 | `os` imported but unused",
            "/work/sample/py/app.py | 1:7-1:10 | Error | ruff | F401 | `sys` imported but unused",
            "/work/sample/py/app.py | 5:4-5:10 | Error | ruff | F841 | Local variable `unused` is assigned to but never used",
            "/work/sample/py/app.py | 6:29-6:43 | Error | ruff | F821 | Undefined name `undefined_name`",
            "/work/sample/py/app.py | 10:0-10:11 | Error | ruff | F821 | Undefined name `reveal_type`",
            "/work/sample/py/my dir/ä.py | 0:0-0:23 | Error | ruff | UP035 | `typing.List` is deprecated, use `list` instead",
            "/work/sample/py/my dir/ä.py | 3:9-3:13 | Error | ruff | UP006 | Use `list` instead of `List` for type annotation",
        ];
        assert_diags(&run(text, Format::Sarif, "/elsewhere", "x"), &want);
        assert_diags(&run(text, Format::Auto, "/elsewhere", "x"), &want);
        // Noise around the document does not hide it when the format is named.
        let noisy = format!("scanning...\n[1/2] done\n{text}\nFinished.\n");
        assert_diags(&run(&noisy, Format::Sarif, "/elsewhere", "x"), &want);
        // Auto mode needs the document first, but tolerates stderr after it.
        let trailing = format!("{text}\nwarning: 2 files skipped\n");
        assert_diags(&run(&trailing, Format::Auto, "/elsewhere", "x"), &want);
    }

    const CARGO_CHECK: [&str; 3] = [
        "/work/sample/rs/src/lib.rs | 4:12-4:19 | Error | rustc | E0425 | cannot find value `missing` in this scope",
        "/work/sample/rs/src/lib.rs | 0:4-0:29 | Warning | rustc | unused_imports | unused import: `std::collections::HashMap`",
        "/work/sample/rs/src/lib.rs | 8:20-8:23 | Error | rustc | E0308 | mismatched types",
    ];

    #[test]
    fn fixture_cargo_check() {
        let text = include_str!("../../tests/fixtures/diagnostics/cargo-check.jsonl");
        // cargo prints file names relative to the workspace root.
        let base = "/work/sample/rs";
        assert_diags(&run(text, Format::Cargo, base, "cargo"), &CARGO_CHECK);
        assert_diags(&run(text, Format::Auto, base, "cargo"), &CARGO_CHECK);
        let unnormalised = "/work/sample/rs/./x/..";
        assert_diags(&run(text, Format::Auto, unnormalised, "c"), &CARGO_CHECK);
    }

    #[test]
    fn fixture_cargo_clippy() {
        let text = include_str!("../../tests/fixtures/diagnostics/cargo-clippy.jsonl");
        // One lint with two primary spans gives two diagnostics.
        let want = [
            "/work/sample/rsw/src/main.rs | 0:15-0:20 | Warning | rustc | unused_imports | unused imports: `Debug` and `Display`",
            "/work/sample/rsw/src/main.rs | 0:22-0:29 | Warning | rustc | unused_imports | unused imports: `Debug` and `Display`",
            "/work/sample/rsw/src/main.rs | 4:8-4:9 | Warning | rustc | unused_variables | unused variable: `n`",
            "/work/sample/rsw/src/main.rs | 8:8-8:9 | Warning | rustc | unused_variables | unused variable: `x`",
            "/work/sample/rsw/src/main.rs | 5:7-5:19 | Warning | clippy | clippy::len_zero | length comparison to zero",
            "/work/sample/rsw/src/main.rs | 3:12-3:25 | Warning | clippy | clippy::useless_vec | useless use of `vec!`",
        ];
        let base = "/work/sample/rsw";
        assert_diags(&run(text, Format::Cargo, base, "cargo"), &want);
        assert_diags(&run(text, Format::Auto, base, "cargo"), &want);
    }

    #[test]
    fn fixture_gcc() {
        let text = include_str!("../../tests/fixtures/diagnostics/gcc.txt");
        let want = [
            "/work/sample/c/main.c | 5:14-5:14 | Warning | gcc | -Wint-conversion | initialization of ‘char *’ from ‘int’ makes pointer from integer without a cast",
            "/work/sample/c/main.c | 6:13-6:13 | Warning | gcc | -Wformat= | format ‘%d’ expects argument of type ‘int’, but argument 2 has type ‘char *’",
            "/work/sample/c/main.c | 7:11-7:11 | Error | gcc | - | ‘undeclared’ undeclared (first use in this function)",
            "/work/sample/c/main.c | 7:11-7:11 | Info | gcc | - | each undeclared identifier is reported only once for each function it appears in",
            "/work/sample/c/main.c | 5:10-5:10 | Warning | gcc | -Wunused-variable | unused variable ‘s’",
            "/work/sample/c/main.c | 4:8-4:8 | Warning | gcc | -Wunused-variable | unused variable ‘unused_var’",
            "/work/sample/c/util.h | 0:11-0:11 | Warning | gcc | -Wunused-function | ‘helper’ defined but not used",
        ];
        assert_diags(&run(text, Format::Compiler, SAMPLE, "gcc"), &want);
        assert_diags(&run(text, Format::Auto, SAMPLE, "gcc"), &want);
    }

    #[test]
    fn fixture_mypy() {
        let text = include_str!("../../tests/fixtures/diagnostics/mypy.txt");
        let want = [
            r#"/work/sample/py/app.py | 6:0-6:0 | Error | mypy | name-defined | Name "undefined_name" is not defined"#,
            r#"/work/sample/py/app.py | 9:0-9:0 | Error | mypy | arg-type | Argument 1 to "greet" has incompatible type "int"; expected "str""#,
            r#"/work/sample/py/app.py | 10:0-10:0 | Info | mypy | - | Revealed type is "int""#,
        ];
        assert_diags(&run(text, Format::Compiler, SAMPLE, "mypy"), &want);
        assert_diags(&run(text, Format::Auto, SAMPLE, "mypy"), &want);
    }

    #[test]
    fn fixture_mypy_error_end() {
        // --show-error-end prints line:col:end_line:end_col, end inclusive.
        let text = include_str!("../../tests/fixtures/diagnostics/mypy-end.txt");
        let want = [
            r#"/work/sample/py/app.py | 6:29-6:43 | Error | mypy | name-defined | Name "undefined_name" is not defined"#,
            r#"/work/sample/py/app.py | 9:15-9:16 | Error | mypy | arg-type | Argument 1 to "greet" has incompatible type "int"; expected "str""#,
            r#"/work/sample/py/app.py | 10:12-10:13 | Info | mypy | - | Revealed type is "int""#,
        ];
        assert_diags(&run(text, Format::Auto, SAMPLE, "mypy"), &want);
    }

    #[test]
    fn fixture_shellcheck() {
        let text = include_str!("../../tests/fixtures/diagnostics/shellcheck-gcc.txt");
        let want = [
            "/work/sample/sh/run.sh | 2:0-2:0 | Warning | shellcheck | SC2164 | Use 'cd ... || exit' or 'cd ... || return' in case cd fails.",
            "/work/sample/sh/run.sh | 2:3-2:3 | Info | shellcheck | SC2086 | Double quote to prevent globbing and word splitting.",
            "/work/sample/sh/run.sh | 3:9-3:9 | Error | shellcheck | SC2045 | Iterating over ls output is fragile. Use globs.",
            "/work/sample/sh/run.sh | 3:14-3:14 | Info | shellcheck | SC2035 | Use ./*glob* or -- *glob* so names with dashes won't become options.",
            "/work/sample/sh/run.sh | 4:7-4:7 | Info | shellcheck | SC2086 | Double quote to prevent globbing and word splitting.",
        ];
        assert_diags(&run(text, Format::Compiler, SAMPLE, "shellcheck"), &want);
        assert_diags(&run(text, Format::Auto, SAMPLE, "shellcheck"), &want);
    }

    #[test]
    fn fixture_rustc_short() {
        let text = include_str!("../../tests/fixtures/diagnostics/rustc-short.txt");
        let want = [
            "/work/sample/rs/src/lib.rs | 4:12-4:12 | Error | rustc | E0425 | cannot find value `missing` in this scope: not found in this scope",
            "/work/sample/rs/src/lib.rs | 0:4-0:4 | Warning | rustc | - | unused import: `std::collections::HashMap`",
            "/work/sample/rs/src/lib.rs | 8:20-8:20 | Error | rustc | E0308 | mismatched types: expected `String`, found `&str`",
            "/work/sample/rsw/src/main.rs | 0:15-0:15 | Warning | rustc | - | unused imports: `Debug` and `Display`",
            "/work/sample/rsw/src/main.rs | 4:8-4:8 | Warning | rustc | - | unused variable: `n`: help: if this is intentional, prefix it with an underscore: `_n`",
            "/work/sample/rsw/src/main.rs | 8:8-8:8 | Warning | rustc | - | unused variable: `x`: help: if this is intentional, prefix it with an underscore: `_x`",
        ];
        assert_diags(&run(text, Format::Compiler, SAMPLE, "rustc"), &want);
        assert_diags(&run(text, Format::Auto, SAMPLE, "rustc"), &want);
        // A bracketed code means rustc whatever program was run; without
        // one the caller's name is all there is.
        let got = run(text, Format::Auto, SAMPLE, "cargo");
        let sources: Vec<&str> = got.iter().map(|d| d.source.as_str()).collect();
        assert_eq!(
            sources,
            ["rustc", "cargo", "rustc", "cargo", "cargo", "cargo"]
        );
    }

    #[test]
    fn fixtures_concatenated_in_auto_mode() {
        // A checker script may run several tools into one output.
        let text = [
            include_str!("../../tests/fixtures/diagnostics/ruff-concise.txt"),
            include_str!("../../tests/fixtures/diagnostics/cargo-check.jsonl"),
            include_str!("../../tests/fixtures/diagnostics/gcc.txt"),
        ]
        .concat();
        let got = run(&text, Format::Auto, "/work/sample/rs", "t");
        assert_eq!(got.len(), 10 + 3 + 7);
        assert_eq!(
            show(&got[0]).split(" | ").next(),
            Some("/work/sample/rs/py/app.py")
        );
        assert_eq!(show(&got[12]), CARGO_CHECK[2]);
        assert_eq!(got[19].path, Path::new("/work/sample/rs/c/util.h"));
    }

    // -- Protocol ---------------------------------------------------------

    #[test]
    fn protocol_array() {
        let text = r#"[
          {"uri":"file:///work/a%20b.py","diagnostics":[
            {"message":"boom","severity":"Error",
             "range":{"start":{"line":3,"character":4},"end":{"line":3,"character":9}},
             "source":"pyright","code":"reportGeneralTypeIssues"},
            {"message":"w","severity":2,
             "range":{"start":{"line":0,"character":0},"end":{"line":1,"character":0}},
             "code":42}
          ]},
          {"uri":"file:///work/x/../ä.rs","diagnostics":[
            {"message":"i","severity":"Information","range":{"start":{"line":1,"character":2},"end":{"line":1,"character":2}}},
            {"message":"h","severity":4,"range":{"start":{"line":1,"character":2},"end":{"line":1,"character":3}}},
            {"message":"ww","severity":"WEAK_WARNING","range":{"start":{"line":0,"character":0},"end":{"line":0,"character":0}}},
            {"message":"e","severity":"ERROR"},
            {"message":"n","severity":3,"range":{"start":{"line":0,"character":0},"end":{"line":0,"character":0}}},
            {"message":"W","severity":"WARNING","range":{"start":{"line":0,"character":0},"end":{"line":0,"character":0}}},
            {"message":"I","severity":"INFO","range":{"start":{"line":0,"character":0},"end":{"line":0,"character":0}}},
            {"message":"H","severity":"Hint","range":{"start":{"line":0,"character":0},"end":{"line":0,"character":0}}},
            {"message":"one","severity":1,"source":"","range":{"start":{"line":7,"character":1},"end":{"line":7,"character":2}}}
          ]}
        ]"#;
        // The wire format's URI is not percent-encoded: %20 stays literal.
        let want = [
            "/work/a%20b.py | 3:4-3:9 | Error | pyright | reportGeneralTypeIssues | boom",
            "/work/a%20b.py | 0:0-1:0 | Warning | ccide | 42 | w",
            "/work/ä.rs | 1:2-1:2 | Info | ccide | - | i",
            "/work/ä.rs | 1:2-1:3 | Hint | ccide | - | h",
            "/work/ä.rs | 0:0-0:0 | Warning | ccide | - | ww",
            "/work/ä.rs | 0:0-0:0 | Error | ccide | - | e",
            "/work/ä.rs | 0:0-0:0 | Info | ccide | - | n",
            "/work/ä.rs | 0:0-0:0 | Warning | ccide | - | W",
            "/work/ä.rs | 0:0-0:0 | Info | ccide | - | I",
            "/work/ä.rs | 0:0-0:0 | Hint | ccide | - | H",
            "/work/ä.rs | 7:1-7:2 | Error | ccide | - | one",
        ];
        assert_diags(&run(text, Format::Protocol, "/b", "ccide"), &want);
        assert_diags(&run(text, Format::Auto, "/b", "ccide"), &want);
    }

    #[test]
    fn protocol_single_object_and_empty() {
        let text = r#"{"uri":"file:///w/a.py","diagnostics":[{"message":"m","severity":"Warning","range":{"start":{"line":1,"character":1},"end":{"line":1,"character":5}}}]}"#;
        let want = ["/w/a.py | 1:1-1:5 | Warning | src | - | m"];
        assert_diags(&run(text, Format::Protocol, "/b", "src"), &want);
        assert_diags(&run(text, Format::Auto, "/b", "src"), &want);
        assert_diags(&run("[]", Format::Auto, "/b", "src"), &[]);
        assert_diags(&run("[]", Format::Protocol, "/b", "src"), &[]);
        assert_diags(&run("", Format::Protocol, "/b", "src"), &[]);
        // Named explicitly, entries that are not {uri, diagnostics} are
        // skipped rather than spoiling the rest.
        let text = format!("[1, {{\"uri\": 2}}, {text}]");
        assert_diags(&run(&text, Format::Protocol, "/b", "src"), &want);
        assert_diags(&run(&text, Format::Auto, "/b", "src"), &[]);
        // A plain path instead of a URI is resolved against the base.
        let text = r#"[{"uri":"src/x.rs","diagnostics":[{"message":"m"}]}]"#;
        let want = ["/b/src/x.rs | 0:0-0:0 | Error | src | - | m"];
        assert_diags(&run(text, Format::Protocol, "/b", "src"), &want);
    }

    // -- SARIF edge cases -------------------------------------------------

    #[test]
    fn sarif_base_ids_levels_and_defaults() {
        let text = r#"{
          "version": "2.1.0",
          "runs": [{
            "tool": {"driver": {"name": "semgrep", "rules": [
              {"id": "R1", "defaultConfiguration": {"level": "note"}},
              {"id": "R2"}
            ]}},
            "originalUriBaseIds": {
              "ROOT": {"uri": "file:///srv/repo/"},
              "SRC": {"uri": "src/", "uriBaseId": "ROOT"}
            },
            "artifacts": [{"location": {"uri": "lib/z.py", "uriBaseId": "ROOT"}}],
            "results": [
              {"ruleId": "R1", "message": {"text": "by rule default"},
               "locations": [{"physicalLocation": {"artifactLocation": {"uri": "a%20b.py", "uriBaseId": "SRC"},
                 "region": {"startLine": 2, "startColumn": 3, "endLine": 4, "endColumn": 7}}}]},
              {"ruleId": "R2", "message": {"text": "no level anywhere"},
               "locations": [{"physicalLocation": {"artifactLocation": {"uri": "rel/b.py"},
                 "region": {"startLine": 5}}}]},
              {"ruleId": "R3", "level": "none", "message": {"text": "unknown base id"},
               "locations": [{"physicalLocation": {"artifactLocation": {"uri": "c.py", "uriBaseId": "NOPE"},
                 "region": {"startLine": 1, "startColumn": 1}}}]},
              {"level": "error", "message": {"text": "{0} and {1} {{literal}} {9}", "arguments": ["x", 3]},
               "locations": [{"physicalLocation": {"artifactLocation": {"index": 0}}}]},
              {"ruleIndex": 0, "message": {"id": "default"},
               "locations": [{"physicalLocation": {"artifactLocation": {"uri": "file:///abs/m.py"},
                 "region": {"startLine": 1, "startColumn": 5, "endColumn": 9}}}]},
              {"ruleId": "R2", "kind": "review", "message": {"text": "needs review"},
               "locations": [{"physicalLocation": {"artifactLocation": {"uri": "file:///abs/r.py"}}}]},
              {"ruleId": "R2", "kind": "pass", "message": {"text": "passed"},
               "locations": [{"physicalLocation": {"artifactLocation": {"uri": "p.py"}}}]},
              {"ruleId": "R2", "level": "error", "message": {"text": "suppressed"},
               "suppressions": [{"kind": "inSource"}],
               "locations": [{"physicalLocation": {"artifactLocation": {"uri": "p.py"}}}]},
              {"ruleId": "R2", "level": "error", "message": {"text": "nowhere"}},
              {"ruleId": "R2", "level": "warning", "message": {"text": "web"},
               "locations": [{"physicalLocation": {"artifactLocation": {"uri": "https://example.com/x.py"}}}]}
            ]
          }, {
            "tool": {"driver": {"name": ""}},
            "results": [{"ruleId": 7, "level": "note", "message": {"text": "second run"},
              "locations": [{"physicalLocation": {"artifactLocation": {"uri": "file:///abs/./q.c"},
                "region": {"startLine": 3, "startColumn": 2, "endColumn": 2}}}]}]
          }]
        }"#;
        let want = [
            "/srv/repo/src/a b.py | 1:2-3:6 | Info | semgrep | R1 | by rule default",
            "/base/rel/b.py | 4:0-4:0 | Warning | semgrep | R2 | no level anywhere",
            "/base/c.py | 0:0-0:0 | Hint | semgrep | R3 | unknown base id",
            "/srv/repo/lib/z.py | 0:0-0:0 | Error | semgrep | - | x and 3 {literal} {9}",
            // Neither text nor a message string of the rule: empty.
            "/abs/m.py | 0:4-0:8 | Info | semgrep | - | ",
            // A result that is not a failure defaults to level "none".
            "/abs/r.py | 0:0-0:0 | Hint | semgrep | R2 | needs review",
            // An empty tool name falls back; a non-string ruleId is no code;
            // endColumn == startColumn is an empty range.
            "/abs/q.c | 2:1-2:1 | Info | dflt | - | second run",
        ];
        assert_diags(&run(text, Format::Sarif, "/base", "dflt"), &want);
        assert_diags(&run(text, Format::Auto, "/base", "dflt"), &want);
    }

    #[test]
    fn sarif_message_strings() {
        let text = r#"{"runs":[{"tool":{"driver":{"name":"t","rules":[
            {"id":"X1","messageStrings":{"default":{"text":"'{0}' is bad"}}}]}},
          "results":[{"ruleId":"X1","level":"warning","message":{"id":"default","arguments":["foo"]},
            "locations":[{"physicalLocation":{"artifactLocation":{"uri":"a.c"},"region":{"startLine":1}}}]}]}]}"#;
        let want = ["/b/a.c | 0:0-0:0 | Warning | t | X1 | 'foo' is bad"];
        assert_diags(&run(text, Format::Auto, "/b", "d"), &want);
    }

    // -- Line formats: edge cases -----------------------------------------

    #[test]
    fn paths_with_spaces_and_non_ascii() {
        let text = "/tmp/my dir/ä.py:3:5: error: bad thing [code-x]\n\
                    rel dir/ö ü.c:1: warning: w\n";
        let want = [
            "/tmp/my dir/ä.py | 2:4-2:4 | Error | tool | code-x | bad thing",
            "/b/rel dir/ö ü.c | 0:0-0:0 | Warning | tool | - | w",
        ];
        assert_diags(&run(text, Format::Compiler, "/b", "tool"), &want);
        assert_diags(&run(text, Format::Auto, "/b", "tool"), &want);
        // A drive letter's colon is not the end of the path.
        let got = run(r"C:\src\a.c:3:4: error: e", Format::Auto, "/b", "t");
        assert_eq!((got[0].start_line, got[0].start_char), (2, 3));
        assert!(got[0].path.ends_with(r"C:\src\a.c"));
    }

    #[test]
    fn relative_paths_are_normalised() {
        let text = "./src/../lib/a.c:2:3: warning: x\n\
                    ../up.c:1:1: error: y\n\
                    /abs/./p/../q.c:1:1: note: z\n\
                    ../../../../x.c:1: error: e\n";
        let got = run(text, Format::Auto, "/w/proj", "gcc");
        let paths: Vec<_> = got.iter().map(|d| d.path.clone()).collect();
        let want = ["/w/proj/lib/a.c", "/w/up.c", "/abs/q.c", "/x.c"].map(PathBuf::from);
        assert_eq!(paths, want);
    }

    #[test]
    fn gcc_noise_is_ignored() {
        let text = "\
In file included from /usr/include/stdio.h:28,
                 from main.c:1:
main.c: In function 'main':
main.c:3:9: fatal error: nothere.h: No such file or directory
    3 | #include \"nothere.h\"
      |         ^~~~~~~~~~~
    4 |     x = a ? b:1:2: c;
compilation terminated.
cc1: all warnings being treated as errors
collect2: error: ld returned 1 exit status
make: *** [Makefile:12: all] Error 1
";
        let want = ["/p/main.c | 2:8-2:8 | Error | gcc | - | nothere.h: No such file or directory"];
        assert_diags(&run(text, Format::Compiler, "/p", "gcc"), &want);
        assert_diags(&run(text, Format::Auto, "/p", "gcc"), &want);
    }

    #[test]
    fn colour_escapes_are_stripped() {
        let text = "\x1b[01m\x1b[Kmain.c:4:9:\x1b[m\x1b[K \x1b[01;35m\x1b[Kwarning: \x1b[m\x1b[K\
                    unused variable '\x1b[01m\x1b[Kx\x1b[m\x1b[K' [\x1b[01;35m\x1b[K\
                    \x1b]8;;https://gcc.gnu.org/onlinedocs/gcc/Warning-Options.html#index-Wunused-variable\x07\
                    -Wunused-variable\x1b]8;;\x1b\\\x1b[m\x1b[K]\n";
        let want =
            ["/p/main.c | 3:8-3:8 | Warning | gcc | -Wunused-variable | unused variable 'x'"];
        assert_diags(&run(text, Format::Auto, "/p", "gcc"), &want);
    }

    #[test]
    fn go_vet_without_severity() {
        let text = "# example.com/m\n\
                    ./main.go:7:2: fmt.Printf format %d has arg s of wrong type string\n\
                    vet: ./x.go:3:1: undefined: foo\n\
                    ./y.go:4:5: undefined: bar\n";
        let want = [
            "/m/main.go | 6:1-6:1 | Error | go | - | fmt.Printf format %d has arg s of wrong type string",
            "/m/x.go | 2:0-2:0 | Error | go | - | undefined: foo",
            "/m/y.go | 3:4-3:4 | Error | go | - | undefined: bar",
        ];
        assert_diags(&run(text, Format::Compiler, "/m", "go"), &want);
        assert_diags(&run(text, Format::Auto, "/m", "go"), &want);
    }

    #[test]
    fn eslint_unix() {
        let text = "/p/src/a.js:1:10: 'foo' is defined but never used. [Error/no-unused-vars]\n\
                    /p/src/a.js:2:3: Missing semicolon. [Warning/semi]\n\
                    /p/src/b.js:1:1: Parsing error: Unexpected token [Error]\n\
                    \n3 problems\n";
        let want = [
            "/p/src/a.js | 0:9-0:9 | Error | eslint | no-unused-vars | 'foo' is defined but never used.",
            "/p/src/a.js | 1:2-1:2 | Warning | eslint | semi | Missing semicolon.",
            "/p/src/b.js | 0:0-0:0 | Error | eslint | - | Parsing error: Unexpected token",
        ];
        assert_diags(&run(text, Format::Compiler, "/p", "eslint"), &want);
        assert_diags(&run(text, Format::Auto, "/p", "eslint"), &want);
    }

    #[test]
    fn clang_and_rustc_short_forms() {
        let text = "a.c:1:2: fatal error: 'x.h' file not found\n\
                    src/m.rs:3:4: error[E0425]: cannot find value `y` in this scope\n\
                    src/m.rs:5:6: warning[clippy::needless_return]: unneeded `return` statement\n\
                    src/m.rs:7:8: error[not a code]: spaced\n";
        let want = [
            "/b/a.c | 0:1-0:1 | Error | cc | - | 'x.h' file not found",
            "/b/src/m.rs | 2:3-2:3 | Error | rustc | E0425 | cannot find value `y` in this scope",
            "/b/src/m.rs | 4:5-4:5 | Warning | clippy | clippy::needless_return | unneeded `return` statement",
            "/b/src/m.rs | 6:7-6:7 | Error | cc | - | error[not a code]: spaced",
        ];
        assert_diags(&run(text, Format::Auto, "/b", "cc"), &want);
    }

    #[test]
    fn ruff_syntax_error_forms() {
        let text = "a.py:1:7: SyntaxError: Expected ')', found newline\n\
                    b.py:2:1: E999 SyntaxError: invalid syntax\n\
                    c.py:3:4: PLR0913 Too many arguments in function definition (6 > 5)\n\
                    d.py:1:1: E902 No such file or directory (os error 2)\n";
        let want = [
            "/r/a.py | 0:6-0:6 | Error | ruff | - | Expected ')', found newline",
            "/r/b.py | 1:0-1:0 | Error | ruff | E999 | SyntaxError: invalid syntax",
            "/r/c.py | 2:3-2:3 | Warning | ruff | PLR0913 | Too many arguments in function definition (6 > 5)",
            "/r/d.py | 0:0-0:0 | Error | ruff | E902 | No such file or directory (os error 2)",
        ];
        assert_diags(&run(text, Format::Ruff, "/r", "ruff"), &want);
        assert_diags(&run(text, Format::Auto, "/r", "ruff"), &want);
    }

    #[test]
    fn formats_only_read_their_own_lines() {
        let ruff_line = "a.py:1:1: F401 [*] `os` imported but unused";
        let gcc_line = "a.c:1:1: warning: w [-Wx]";
        assert!(run(gcc_line, Format::Ruff, "/r", "x").is_empty());
        assert!(run(ruff_line, Format::Cargo, "/r", "x").is_empty());
        assert!(run(ruff_line, Format::Sarif, "/r", "x").is_empty());
        assert!(run(ruff_line, Format::Protocol, "/r", "x").is_empty());
        // The compiler format has no ruff rule; the line reads as go-style.
        let got = run(ruff_line, Format::Compiler, "/r", "x");
        assert_diags(
            &got,
            &["/r/a.py | 0:0-0:0 | Error | x | - | F401 [*] `os` imported but unused"],
        );
    }

    #[test]
    fn trailing_brackets_that_are_not_codes() {
        let text = "x.c:1:1: error: expected ']' before ';' token\n\
                    x.py:2:1: error: Value of type \"list[int]\" is not indexable  [index]\n\
                    x.py:3:1: error: Invalid index a[i]\n\
                    x.py:4:1: error: [only-code]\n\
                    x.py:5:1: error: two words [a b]\n";
        let got = run(text, Format::Auto, "/x", "t");
        let pairs: Vec<_> = got
            .iter()
            .map(|d| (d.message.as_str(), d.code.as_deref()))
            .collect();
        assert_eq!(
            pairs,
            [
                ("expected ']' before ';' token", None),
                (
                    "Value of type \"list[int]\" is not indexable",
                    Some("index")
                ),
                ("Invalid index a[i]", None),
                ("[only-code]", None),
                ("two words [a b]", None),
            ]
        );
    }

    #[test]
    fn bare_rustc_json_and_macro_spans() {
        // rustc --error-format=json prints the diagnostic without cargo's
        // wrapper; the span inside std's macro maps back to the call site.
        let text = r#"{"$message_type":"diagnostic","message":"m","code":null,"level":"error","spans":[{"file_name":"/rustc/abc/library/core/src/macros/mod.rs","line_start":10,"line_end":10,"column_start":1,"column_end":5,"is_primary":true,"expansion":{"span":{"file_name":"src/main.rs","line_start":3,"line_end":3,"column_start":5,"column_end":20,"is_primary":false,"expansion":null}}}],"children":[]}
{"$message_type":"diagnostic","message":"aborting due to 1 previous error","code":null,"level":"error","spans":[],"children":[]}
{"reason":"compiler-message","message":{"message":"ice","level":"error: internal compiler error","code":{"code":"E9999"},"spans":[{"file_name":"src/a.rs","line_start":1,"line_end":2,"column_start":1,"column_end":1,"is_primary":true}]}}
{"reason":"compiler-message","message":{"message":"x","level":"failure-note","spans":[{"file_name":"src/a.rs","line_start":1,"line_end":1,"column_start":1,"column_end":1,"is_primary":true}]}}
{"reason":"compiler-message","message":{"message":"2 warnings emitted","level":"warning","code":null,"spans":[]}}
{"reason":"compiler-message","message":{"message":"std only","level":"error","code":null,"spans":[{"file_name":"/rustc/abc/library/std/src/lib.rs","line_start":4,"line_end":4,"column_start":1,"column_end":2,"is_primary":true}]}}
{"reason":"build-finished","success":false}"#;
        let want = [
            "/c/src/main.rs | 2:4-2:19 | Error | rustc | - | m",
            "/c/src/a.rs | 0:0-1:0 | Error | rustc | E9999 | ice",
            // Nothing of the user's to map to: the span as given.
            "/rustc/abc/library/std/src/lib.rs | 3:0-3:1 | Error | rustc | - | std only",
        ];
        assert_diags(&run(text, Format::Cargo, "/c", "cargo"), &want);
        assert_diags(&run(text, Format::Auto, "/c", "cargo"), &want);
    }

    #[test]
    fn duplicates_are_dropped_and_ranges_never_reversed() {
        let text = "h.h:1:2: warning: w [-Wx]\n\
                    h.h:1:2: warning: w [-Wx]\n\
                    m.py:5:9:2:1: error: backwards\n";
        let want = [
            "/d/h.h | 0:1-0:1 | Warning | gcc | -Wx | w",
            "/d/m.py | 4:8-4:8 | Error | gcc | - | backwards",
        ];
        assert_diags(&run(text, Format::Auto, "/d", "gcc"), &want);
    }

    #[test]
    fn crlf_line_endings() {
        let text = "a.c:1:2: warning: w [-Wx]\r\nb.py:3:4: F401 unused\r\n";
        let want = [
            "/d/a.c | 0:1-0:1 | Warning | gcc | -Wx | w",
            "/d/b.py | 2:3-2:3 | Warning | ruff | F401 | unused",
        ];
        assert_diags(&run(text, Format::Auto, "/d", "gcc"), &want);
    }

    #[test]
    fn uri_and_percent_helpers() {
        assert_eq!(
            crate::files::percent_decode("a%20b%C3%A4%zz%4"),
            "a bä%zz%4"
        );
        assert_eq!(crate::files::percent_decode("%FF"), "\u{FFFD}");
        let cases = [
            ("file:///a%20b", true, Some("/a b")),
            ("file:///a%20b", false, Some("/a%20b")),
            ("FILE://localhost/x", true, Some("/x")),
            ("file:/x", true, Some("/x")),
            ("file://srv/share/x", true, Some("//srv/share/x")),
            ("file://", true, None),
            ("http://x/y", true, None),
            ("fi", true, None),
            ("fileä", true, None),
        ];
        for (uri, decode, want) in cases {
            assert_eq!(
                crate::files::uri_path(uri, decode),
                want.map(PathBuf::from),
                "{uri}"
            );
        }
    }

    /// Deterministic pseudo-random garbage built from the characters the
    /// parsers care about: nothing may panic.
    #[test]
    fn arbitrary_input_never_panics() {
        let alphabet: Vec<char> = ":0123456789 \n\t[]{}\"',/.%\\eErRwWnot-_abcäé\x1b\r"
            .chars()
            .collect();
        let pieces = [
            "error",
            "warning",
            "file://",
            "\"runs\"",
            "\"uri\"",
            "\"reason\"",
            "%C3",
            "SyntaxError:",
            "F401",
            "[*]",
            "compiler-message",
            "\"spans\"",
            "\x1b]8;;",
            "..",
        ];
        // xorshift64
        let mut state: u64 = 0x2545_f491_4f6c_dd1d;
        let mut next = || {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            usize::try_from(state % 1_000_003).unwrap_or(0)
        };
        let formats = [
            Format::Auto,
            Format::Protocol,
            Format::Sarif,
            Format::Cargo,
            Format::Compiler,
            Format::Ruff,
        ];
        for _ in 0..3000 {
            let mut s = String::new();
            for _ in 0..next() % 60 {
                let r = next();
                if r % 5 == 0 {
                    s.push_str(pieces[r / 5 % pieces.len()]);
                } else {
                    s.push(alphabet[r / 5 % alphabet.len()]);
                }
            }
            for f in formats {
                let _ = parse(&s, f, Path::new("/b"), "t", &mut |_| Some(s.clone()));
            }
        }
        // Structurally valid JSON with every field of the wrong type.
        for text in [
            r#"{"runs":[{"tool":1,"results":[{"locations":[{"physicalLocation":{"artifactLocation":{"uri":5,"index":"x"},"region":{"startLine":-1,"endColumn":"a"}}}],"message":3,"level":4,"ruleIndex":99999999999999}]}]}"#,
            r#"{"runs":[{"results":[{"locations":[{"physicalLocation":{"artifactLocation":{"index":18446744073709551615}}}]}],"artifacts":[]}]}"#,
            r#"{"runs":[{"originalUriBaseIds":{"A":{"uri":"x/","uriBaseId":"A"}},"results":[{"locations":[{"physicalLocation":{"artifactLocation":{"uri":"f","uriBaseId":"A"}}}]}]}]}"#,
            r#"[{"uri":"file://","diagnostics":[{"range":{"start":{"line":-3,"character":1e40}},"severity":99,"code":{"a":1},"message":[]}]}]"#,
            r#"{"reason":"compiler-message","message":{"level":5,"spans":[{"is_primary":true,"file_name":7},{"is_primary":true,"file_name":"<x macros>","expansion":{"span":{"file_name":"<y>"}}}]}}"#,
            r#"{"reason":"compiler-message","message":{"spans":"no"}}"#,
            &"[".repeat(10_000),
            &"{\"runs\":".repeat(10_000),
        ] {
            for f in formats {
                let _ = parse(text, f, Path::new("/b"), "t", &mut |_| {
                    Some(text.to_string())
                });
            }
        }
        // Numbers beyond u32 saturate.
        let text = "a.c:99999999999:1: error: e\nb.c:4294967295:4294967296: error: e";
        let want = [
            "/b/a.c | 4294967294:0-4294967294:0 | Error | t | - | e",
            "/b/b.c | 4294967294:4294967294-4294967294:4294967294 | Error | t | - | e",
        ];
        assert_diags(&run(text, Format::Auto, "/b", "t"), &want);
    }

    /// Linear time: 50k-line outputs of each kind parse quickly, including
    /// inputs built to make a careless parser rescan.
    #[test]
    fn large_outputs_parse_in_linear_time() {
        let start = std::time::Instant::now();
        let mut gcc = String::new();
        let mut cargo = String::new();
        for i in 0..50_000 {
            let (line, col) = (i + 1, i % 80 + 1);
            gcc.push_str(&format!(
                "src/f{}.c:{line}:{col}: warning: w{i} [-Wx]\n",
                i % 7
            ));
            cargo.push_str(&format!(
                r#"{{"reason":"compiler-message","message":{{"message":"m{i}","level":"warning","code":null,"spans":[{{"file_name":"src/lib.rs","line_start":{line},"line_end":{line},"column_start":1,"column_end":2,"is_primary":true}}]}}}}"#,
            ));
            cargo.push('\n');
        }
        assert_eq!(run(&gcc, Format::Auto, "/b", "gcc").len(), 50_000);
        assert_eq!(run(&cargo, Format::Auto, "/b", "cargo").len(), 50_000);
        let colons = "a:".repeat(500_000);
        assert!(run(&colons, Format::Auto, "/b", "t").is_empty());
        let digits = format!("x:{}", "1:".repeat(500_000));
        assert_eq!(run(&digits, Format::Auto, "/b", "t").len(), 1);
        let brackets = "[x\n".repeat(50_000);
        assert!(run(&brackets, Format::Sarif, "/b", "t").is_empty());
        assert!(run(&brackets, Format::Protocol, "/b", "t").is_empty());
        let unclosed = "{\"a\":[\n".repeat(50_000);
        assert!(run(&unclosed, Format::Auto, "/b", "t").is_empty());
        assert!(run(&unclosed, Format::Sarif, "/b", "t").is_empty());
        let escapes = "\x1b[".repeat(200_000);
        assert!(run(&escapes, Format::Auto, "/b", "t").is_empty());
        // Generous even for a debug build on a slow machine; a quadratic
        // parser would take minutes.
        assert!(start.elapsed().as_secs() < 20, "{:?}", start.elapsed());
    }
}
