//! The bad-input corpus: `tests/corpus/<parser>/<case>.<ext>` is one hostile input for the parser
//! of that name in `baton::parsers::PARSERS`, and each line of `<case>.expect` is a substring its
//! error message must contain (what is wrong, named; one line per problem when an input has
//! several). Every case must be refused with an `Err` (no panic, no acceptance) whose message
//! contains each of them. Every parser must have a corpus
//! folder and every folder a parser, so a parser added later cannot go untested.
//!
//! `BATON_CORPUS_PRINT=1 cargo test --test suite hostile_corpus:: -- --nocapture` prints each message.

use std::path::{Path, PathBuf};

use baton::parsers::{PARSERS, find};

const CORPUS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/corpus");
/// A parser's folder holds at least this many cases.
const MIN_CASES: usize = 5;

fn cases(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.is_file()
                && p.extension().is_some_and(|x| x != "expect")
                && p.file_name().is_some_and(|n| n != "README.md")
        })
        .collect();
    v.sort();
    v
}

/// Runs one case; `Err` describes how it failed the contract.
fn check(parser: &str, case: &Path) -> Result<String, String> {
    let p = find(parser).ok_or_else(|| format!("no parser named {parser:?}"))?;
    let expect_path = case.with_extension("expect");
    let expect = std::fs::read_to_string(&expect_path)
        .map_err(|e| format!("no sidecar {}: {e}", expect_path.display()))?;
    let expect: Vec<&str> = expect.lines().filter(|l| !l.trim().is_empty()).collect();
    if expect.is_empty() {
        return Err(format!("{} is empty", expect_path.display()));
    }
    let bytes = std::fs::read(case).map_err(|e| e.to_string())?;
    let outcome = std::panic::catch_unwind(|| (p.run)(&bytes, case));
    match outcome {
        Err(panic) => {
            let what = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default();
            Err(format!("panicked: {what}"))
        }
        Ok(Ok(())) => Err("was accepted; a bad input must be refused".into()),
        Ok(Err(msg)) => match expect.iter().find(|e| !msg.contains(**e)) {
            None => Ok(msg),
            Some(lacking) => Err(format!(
                "error message lacks {lacking:?} (from {}):\n      {msg}",
                expect_path.display()
            )),
        },
    }
}

#[test]
fn every_bad_input_is_refused_with_a_message_naming_the_problem() {
    let print = std::env::var_os("BATON_CORPUS_PRINT").is_some();
    let mut failures = Vec::new();
    let mut total = 0;
    for parser in PARSERS {
        let dir = Path::new(CORPUS).join(parser.name);
        if !dir.is_dir() {
            failures.push(format!(
                "parser {:?} ({}) has no corpus folder {}",
                parser.name,
                parser.input,
                dir.display()
            ));
            continue;
        }
        let cases = cases(&dir);
        if cases.len() < MIN_CASES {
            failures.push(format!(
                "{}: {} case(s); at least {MIN_CASES} expected",
                dir.display(),
                cases.len()
            ));
        }
        for case in cases {
            total += 1;
            let rel = case.strip_prefix(CORPUS).unwrap_or(&case).display();
            match check(parser.name, &case) {
                Ok(msg) if print => eprintln!("{rel}:\n    {msg}"),
                Ok(_) => {}
                Err(why) => failures.push(format!("{rel}: {why}")),
            }
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {total} corpus case(s) failed:\n  {}",
        failures.len(),
        failures.join("\n  ")
    );
}

#[test]
fn every_corpus_folder_belongs_to_a_parser() {
    for entry in std::fs::read_dir(CORPUS).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            assert!(
                find(&name).is_some(),
                "tests/corpus/{name} has no parser of that name in baton::parsers::PARSERS"
            );
        }
    }
}

/// Good inputs pass the same entry points, so a corpus case fails for its own defect, not
/// because the harness refuses everything.
#[test]
fn shipped_files_pass_their_parsers() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let ok = |parser: &str, rel: &str| {
        let path = root.join(rel);
        let bytes = std::fs::read(&path).unwrap();
        let r = (find(parser).unwrap().run)(&bytes, &path);
        assert_eq!(r, Ok(()), "{rel}");
    };
    ok("daemon_config", "config/baton.toml");
    ok("agent_set", "config/agents/financial.toml");
    ok("mock_scenario", "audio-fixtures/scenarios/demo.toml");
    ok("wav", "audio-fixtures/clips/caller_01.wav");
}
