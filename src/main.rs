//! ccide: a headless IDE for Claude Code. See README.md and man/ccide.1.

mod checkers;
mod checkparse;
mod cli;
mod client;
mod commands;
mod context;
mod control;
mod diagnostics;
mod diffs;
mod editor;
mod events;
mod exec;
mod files;
mod format;
mod jsonrpc;
mod lockfile;
mod lsp;
#[macro_use]
mod log;
mod pattern;
mod serve;
mod server;
mod sys;
mod textdiff;
mod tools;
mod transport;
mod unit;

use cli::{Args, EXIT_FAILURE, EXIT_OK, EXIT_USAGE, Fail};

fn main() {
    let mut argv = Vec::new();
    for a in std::env::args_os().skip(1) {
        match a.into_string() {
            Ok(s) => argv.push(s),
            Err(a) => {
                eprintln!(
                    "ccide: the argument {a:?} is not valid UTF-8 (ccide takes UTF-8 file names)"
                );
                std::process::exit(EXIT_USAGE);
            }
        }
    }
    std::process::exit(run(&argv));
}

fn run(argv: &[String]) -> i32 {
    let Some(first) = argv.first() else {
        eprint!("{}", cli::overview());
        return EXIT_USAGE;
    };
    let out = |s: String| {
        print!("{s}");
        EXIT_OK
    };
    match first.as_str() {
        "-h" | "--help" => return out(cli::overview()),
        "-V" | "--version" => return out(cli::version()),
        "help" => {
            return match argv.get(1) {
                None => out(cli::overview()),
                Some(name) => match cli::find(name) {
                    Some(c) => out(cli::command_help(c)),
                    None => usage(&format!("unknown command '{name}'")),
                },
            };
        }
        _ => {}
    }
    let Some(command) = cli::find(first) else {
        return usage(&format!("unknown command '{first}'"));
    };
    let rest = &argv[1..];
    if rest
        .iter()
        .take_while(|a| *a != "--")
        .any(|a| a == "-h" || a == "--help")
    {
        return out(cli::command_help(command));
    }
    let result = Args::parse(command, rest).and_then(|args| (command.run)(&args));
    match result {
        Ok(code) => code,
        Err(Fail::Usage(msg)) => usage(&msg),
        Err(Fail::Failed(msg)) => {
            eprintln!("ccide: {msg}");
            EXIT_FAILURE
        }
    }
}

fn usage(msg: &str) -> i32 {
    eprintln!("ccide: {msg}\nRun 'ccide --help' for the commands and their options.");
    EXIT_USAGE
}
