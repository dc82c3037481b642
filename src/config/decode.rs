//! TOML into typed sections with every problem of the file collected in one pass: syntax errors,
//! unknown keys (with the closest valid key), values of the wrong kind (the expected form in
//! words), each with its line. A key found wrong is taken out and the file decoded again, so
//! one mistake never hides the next and the rest of the file still gets its defaults. Every file
//! baton reads as TOML (the daemon's config, agent sets) decodes through here.

use std::ops::Range;

use serde::de::DeserializeOwned;
use serde_path_to_error::Segment;
use toml::de::{DeTable, DeValue};

/// One problem found in a config file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub key: String,
    pub message: String,
    pub fix: String,
}

/// At most this many keys are taken out before decoding gives up (a file cannot have more
/// problems than keys; this only bounds a pathological one).
const MAX_PROBLEMS: usize = 200;

/// Decodes `text` into `T` (unknown keys refused by the types), collecting every problem.
/// Returns the value decoded once the bad keys were taken out (`None` only when even that
/// fails), and the problems in file order. `docs` is where the keys are documented.
pub fn decode<T: DeserializeOwned>(text: &str, docs: &str) -> (Option<T>, Vec<Problem>) {
    let d = decode_with::<T>(text, docs, &|_| false);
    (d.value, d.problems)
}

/// What [`decode_with`] found.
#[derive(Debug)]
pub struct Decoded<T> {
    /// The value once the bad keys were taken out (`None` only when even that fails).
    pub value: Option<T>,
    /// The problems, in file order.
    pub problems: Vec<Problem>,
    /// The keys in doubt: every key decoding took out (the value holds its default there) and,
    /// for a misspelt key, the key it was meant to be (which the value lacks). A later check of
    /// one of these, or of what it decides, would only report the same mistake again.
    pub doubtful: Vec<String>,
}

/// [`decode`], for files with keys that have no default: a value of the wrong kind at a key
/// for which `required` holds is not offered "remove the line to use the default". Also says
/// which keys are in doubt.
pub fn decode_with<T: DeserializeOwned>(
    text: &str,
    docs: &str,
    required: &dyn Fn(&str) -> bool,
) -> Decoded<T> {
    let (mut table, syntax) = DeTable::parse_recoverable(text);
    let mut problems: Vec<(usize, Problem)> = syntax
        .iter()
        .map(|e| {
            let at = e.span().map_or(0, |s| s.start);
            (
                at,
                Problem {
                    key: "(syntax)".into(),
                    message: first_line(e.message()) + &line_of(text, e.span()),
                    fix: "correct the TOML syntax at that line".into(),
                },
            )
        })
        .collect();
    let syntax_at: Vec<usize> = problems.iter().map(|(at, _)| *at).collect();
    let mut value = None;
    let mut taken: Vec<String> = Vec::new();
    let mut meant: Vec<String> = Vec::new();
    for _ in 0..MAX_PROBLEMS {
        let de = toml::de::Deserializer::from(table.clone());
        match serde_path_to_error::deserialize::<_, T>(de) {
            Ok(v) => {
                value = Some(v);
                break;
            }
            Err(e) => {
                let segments: Vec<Segment> = e.path().iter().cloned().collect();
                let key = e.path().to_string();
                let inner = e.into_inner();
                let at = inner.span().map_or(usize::MAX, |s| s.start);
                // A required key missing because a bad one was taken out is not news.
                let artifact = inner
                    .message()
                    .strip_prefix("missing field `")
                    .and_then(|r| r.split('`').next())
                    .is_some_and(|f| {
                        let full = if key == "." {
                            f.to_owned()
                        } else {
                            format!("{key}.{f}")
                        };
                        taken.contains(&full)
                    });
                // A key under a table header the parser could not read lands elsewhere
                // (usually the top level): its "unknown key" is the syntax error's echo.
                let echo = inner.message().starts_with("unknown field")
                    && under_broken_header(text, &syntax_at, at);
                if !artifact && !echo {
                    let (p, m) = problem(text, &key, &inner, docs, required(&key));
                    problems.push((at, p));
                    meant.extend(m);
                }
                taken.push(key.clone());
                if !take_out(table.get_mut(), &segments) {
                    break;
                }
            }
        }
    }
    problems.sort_by_key(|(at, _)| *at);
    taken.extend(meant);
    Decoded {
        value,
        problems: problems.into_iter().map(|(_, p)| p).collect(),
        doubtful: taken,
    }
}

/// Whether offset `at` follows a syntax error on a table header line (`[…`) with no other header
/// line between them: the key's table could not be read.
fn under_broken_header(text: &str, syntax_at: &[usize], at: usize) -> bool {
    syntax_at.iter().any(|&s| {
        let line_start = text
            .get(..s)
            .map_or(0, |t| t.rfind('\n').map_or(0, |i| i + 1));
        s < at
            && text
                .get(line_start..)
                .is_some_and(|l| l.trim_start().starts_with('['))
            && text.get(s..at).is_some_and(|between| {
                !between
                    .lines()
                    .skip(1)
                    .any(|l| l.trim_start().starts_with('['))
            })
    })
}

/// The first problem only, as the file is decoded (for files whose other checks need a whole
/// value to start, and whose required keys cannot be taken out).
pub fn decode_one<T: DeserializeOwned>(text: &str, docs: &str) -> Result<T, Problem> {
    let table = DeTable::parse(text).map_err(|e| Problem {
        key: "(syntax)".into(),
        message: first_line(e.message()) + &line_of(text, e.span()),
        fix: "correct the TOML syntax at that line".into(),
    })?;
    serde_path_to_error::deserialize(toml::de::Deserializer::from(table)).map_err(|e| {
        let key = e.path().to_string();
        problem(text, &key, &e.into_inner(), docs, false).0
    })
}

/// Takes out the key a problem is about (the deepest table key of its path); `false` when there
/// is none to take out.
fn take_out(root: &mut DeTable<'_>, path: &[Segment]) -> bool {
    let Some(last) = path.iter().rposition(|s| matches!(s, Segment::Map { .. })) else {
        return false;
    };
    let Segment::Map { key } = &path[last] else {
        return false;
    };
    walk(root, &path[..last]).is_some_and(|parent| parent.remove(key.as_str()).is_some())
}

/// The table at `path` (through tables and array elements), if it is one.
fn walk<'t, 'i>(table: &'t mut DeTable<'i>, path: &[Segment]) -> Option<&'t mut DeTable<'i>> {
    match path.split_first() {
        None => Some(table),
        Some((Segment::Map { key }, rest)) => {
            walk_value(table.get_mut(key.as_str())?.get_mut(), rest)
        }
        Some((Segment::Enum { .. } | Segment::Unknown, rest)) => walk(table, rest),
        Some((Segment::Seq { .. }, _)) => None,
    }
}

fn walk_value<'t, 'i>(value: &'t mut DeValue<'i>, path: &[Segment]) -> Option<&'t mut DeTable<'i>> {
    match (value, path.split_first()) {
        (DeValue::Table(t), _) => walk(t, path),
        (DeValue::Array(a), Some((Segment::Seq { index }, rest))) => {
            walk_value(a.get_mut(*index)?.get_mut(), rest)
        }
        (v, Some((Segment::Enum { .. } | Segment::Unknown, rest))) => walk_value(v, rest),
        _ => None,
    }
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or("").trim().to_owned()
}

/// ` (line N)` for a byte span of `text`.
pub fn line_of(text: &str, span: Option<Range<usize>>) -> String {
    span.map(|s| {
        let before = text.get(..s.start.min(text.len())).unwrap_or("");
        format!(" (line {})", before.matches('\n').count() + 1)
    })
    .unwrap_or_default()
}

/// One decoding error as a problem a person can act on, and for a misspelt key the full key it
/// was meant to be. A `required` key is not offered its default.
fn problem(
    text: &str,
    key: &str,
    e: &toml::de::Error,
    docs: &str,
    required: bool,
) -> (Problem, Option<String>) {
    let key = if key == "." || key.is_empty() {
        "(top level)".to_owned()
    } else {
        key.to_owned()
    };
    let line = line_of(text, e.span());
    let raw = first_line(e.message());
    let leaf = key.rsplit('.').next().unwrap_or(&key).to_owned();
    let section = key
        .rsplit_once('.')
        .map_or("the top level".to_owned(), |(s, _)| format!("[{s}]"));
    if let Some((name, valid)) = unknown(&raw, "unknown field `") {
        let near = closest(&name, &valid);
        let fix = match &near {
            Some(c) => {
                format!("did you mean `{c}`? (the keys of {section} are documented in {docs})")
            }
            None if valid.is_empty() => format!("remove it: {section} takes no keys"),
            None => format!(
                "use one of the keys of {section}: {} (see {docs})",
                valid.join(", ")
            ),
        };
        let meant = near.map(|c| match key.rsplit_once('.') {
            Some((table, _)) => format!("{table}.{c}"),
            None => c.to_owned(),
        });
        return (
            Problem {
                key,
                message: format!("unknown key `{name}`{line}"),
                fix,
            },
            meant,
        );
    }
    if let Some((name, valid)) = unknown(&raw, "unknown variant `") {
        let fix = match closest(&name, &valid) {
            Some(c) => format!("did you mean \"{c}\"? It is one of: {}", valid.join(", ")),
            None => format!("write one of: {}", valid.join(", ")),
        };
        return (
            Problem {
                key,
                message: format!("\"{name}\" is not a valid value{line}"),
                fix,
            },
            None,
        );
    }
    if let Some((found, expected)) = mismatch(&raw) {
        let words = in_words(&expected);
        let negative = found.starts_with("integer `-") && words.contains("0 or more");
        let message = if negative {
            format!("{} is negative; {leaf} takes {words}{line}", strip(&found))
        } else {
            format!("{} where {words} is needed{line}", found_in_words(&found))
        };
        let fallback = if required {
            ""
        } else {
            ", or remove the line to use the default"
        };
        return (
            Problem {
                key,
                message,
                fix: format!("write {leaf} = {}{fallback}", example(&words, &leaf)),
            },
            None,
        );
    }
    (
        Problem {
            key,
            message: raw + &line,
            fix: format!("use a key and value documented in {docs}"),
        },
        None,
    )
}

/// `(name, valid names)` from serde's "unknown field `x`, expected one of `a`, `b`" (or
/// "expected `a`", or "there are no fields").
fn unknown(raw: &str, prefix: &str) -> Option<(String, Vec<String>)> {
    let rest = raw.strip_prefix(prefix)?;
    let (name, rest) = rest.split_once('`')?;
    let valid = rest
        .split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_owned)
        .collect();
    Some((name.to_owned(), valid))
}

/// `(found, expected)` from "invalid type: string \"x\", expected usize" (or "invalid value").
fn mismatch(raw: &str) -> Option<(String, String)> {
    let rest = raw
        .strip_prefix("invalid type: ")
        .or_else(|| raw.strip_prefix("invalid value: "))
        .or_else(|| raw.strip_prefix("invalid length "))?;
    let (found, expected) = rest.rsplit_once(", expected ")?;
    Some((found.to_owned(), expected.to_owned()))
}

fn strip(found: &str) -> String {
    found
        .split_once(' ')
        .map_or(found, |(_, v)| v)
        .trim_matches('`')
        .to_owned()
}

/// What serde found, in words: `"lots" (text)`, `-3 (a number)`, `true`.
fn found_in_words(found: &str) -> String {
    let (kind, value) = found.split_once(' ').unwrap_or((found, ""));
    let value = value.trim_matches('`');
    match kind {
        "string" => format!("{value} (text)"),
        "integer" | "floating" => format!("{} (a number)", strip(found)),
        "boolean" => format!("{value} (true/false)"),
        "sequence" => "a list".into(),
        "map" => "a table".into(),
        _ => found.to_owned(),
    }
}

/// serde's expected type, in words.
pub fn in_words(expected: &str) -> String {
    let e = expected.trim();
    match e {
        "usize" | "u8" | "u16" | "u32" | "u64" | "u128" => "a whole number (0 or more)".into(),
        "isize" | "i8" | "i16" | "i32" | "i64" | "i128" => "a whole number".into(),
        "f32" | "f64" => "a number".into(),
        "a boolean" => "true or false".into(),
        "a string" | "a borrowed string" => "text in quotes".into(),
        "a sequence" => "a list in [ ]".into(),
        "a map" => "a table".into(),
        _ if e.starts_with("struct ") => "a table of keys".into(),
        _ if e.starts_with("a sequence") || e.starts_with("an array") => "a list in [ ]".into(),
        _ if e.starts_with("enum ") || e.starts_with("variant") => {
            "one of the names it takes".into()
        }
        other => other.to_owned(),
    }
}

/// A value of the kind `words` says, for the fix; `leaf` is the key, for the lists whose items
/// are not numbers.
fn example(words: &str, leaf: &str) -> &'static str {
    match words {
        "a list in [ ]" if leaf.ends_with("_command") => {
            "the program and each of its arguments as quoted items of a list (no shell splits \
             it), e.g. [\"gcloud\", \"auth\", \"print-access-token\"]"
        }
        "a whole number (0 or more)" | "a whole number" => "a whole number without quotes, e.g. 30",
        "a number" => "a number without quotes, e.g. 1.5",
        "true or false" => "true or false, without quotes",
        "text in quotes" => "text in double quotes, e.g. \"…\"",
        "a list in [ ]" => "a list, e.g. [0, 100, 400]",
        "a table of keys" | "a table" => {
            "a table: a [section] line with key = value lines under it"
        }
        _ => "the kind of value config/baton.toml shows",
    }
}

/// The valid name closest to `name` by edit distance, when it is close enough to be a typo.
pub fn closest<'a>(name: &str, valid: &'a [String]) -> Option<&'a str> {
    let lower = name.to_lowercase();
    valid
        .iter()
        .map(|v| (strsim::damerau_levenshtein(&lower, &v.to_lowercase()), v))
        .filter(|(d, v)| *d <= (v.len().max(name.len()) / 3).max(2))
        .min_by_key(|(d, v)| (*d, v.as_str()))
        .map(|(_, v)| v.as_str())
}

/// Parses TOML into `T`, refusing unknown keys; the first problem names the key and line (and
/// the closest valid key, or the expected form of the value), and `docs` is where the valid keys
/// are documented.
pub fn from_toml<T: serde::de::DeserializeOwned>(text: &str, docs: &str) -> Result<T, Problem> {
    decode_one(text, docs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    #[derive(Debug, Default, Deserialize)]
    #[serde(deny_unknown_fields, default)]
    struct Server {
        listen: String,
        drain_timeout_s: u64,
        max: usize,
        on: bool,
    }

    #[derive(Debug, Default, Deserialize)]
    #[serde(deny_unknown_fields, default)]
    struct Top {
        server: Server,
        mode: Mode,
    }

    #[derive(Debug, Default, Deserialize)]
    #[serde(rename_all = "lowercase")]
    enum Mode {
        #[default]
        Mock,
        Gemini,
    }

    #[test]
    fn every_problem_is_collected_and_the_rest_decoded() {
        let text = "mode = \"gemni\"\n[server]\nlisen = \"x\"\ndrain_timeout = 3\nmax = \"lots\"\non = 1\nlisten = \"127.0.0.1:1\"\n[sever]\n";
        let (v, p) = decode::<Top>(text, "docs");
        let v = v.unwrap();
        assert_eq!(v.server.listen, "127.0.0.1:1");
        let keys: Vec<&str> = p.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "mode",
                "server.lisen",
                "server.drain_timeout",
                "server.max",
                "server.on",
                "sever"
            ],
            "{p:#?}"
        );
        assert!(p[0].fix.contains("did you mean \"gemini\""), "{:?}", p[0]);
        assert!(p[1].fix.contains("did you mean `listen`"), "{:?}", p[1]);
        assert!(p[1].message.contains("line 3"), "{:?}", p[1]);
        assert!(p[2].fix.contains("`drain_timeout_s`"), "{:?}", p[2]);
        assert!(
            p[3].message
                .contains("\"lots\" (text) where a whole number (0 or more)"),
            "{:?}",
            p[3]
        );
        assert!(!p[3].message.contains("usize"), "{:?}", p[3]);
        assert!(p[4].message.contains("true or false"), "{:?}", p[4]);
        assert!(p[5].fix.contains("`server`"), "{:?}", p[5]);
    }

    #[test]
    fn the_keys_in_doubt_and_keys_without_a_default() {
        let text = "[server]\nlisen = \"x\"\nmax = \"lots\"\n";
        let d = decode_with::<Top>(text, "docs", &|k| k == "server.max");
        // What was taken out, and the key a misspelling meant (which the value lacks).
        assert_eq!(d.doubtful, ["server.lisen", "server.max", "server.listen"]);
        // A required key is not offered its default.
        assert!(
            d.problems[1].fix.starts_with("write max = "),
            "{:?}",
            d.problems[1]
        );
        assert!(
            !d.problems[1].fix.contains("default"),
            "{:?}",
            d.problems[1]
        );
        let (_, p) = decode::<Top>(text, "docs");
        assert!(
            p[1].fix
                .ends_with(", or remove the line to use the default"),
            "{:?}",
            p[1]
        );
    }

    #[test]
    fn a_command_written_as_one_string_is_shown_as_a_list() {
        #[derive(Debug, Default, Deserialize)]
        #[serde(deny_unknown_fields, default)]
        struct Model {
            credential_command: Option<Vec<String>>,
        }
        let (_, p) = decode::<Model>(
            "credential_command = \"gcloud auth print-access-token\"\n",
            "docs",
        );
        assert_eq!(p[0].key, "credential_command", "{p:?}");
        assert!(p[0].message.contains("a list in [ ] is needed"), "{p:?}");
        assert!(
            p[0].fix
                .contains("[\"gcloud\", \"auth\", \"print-access-token\"]"),
            "{p:?}"
        );
    }

    #[test]
    fn a_negative_count_says_so() {
        let (_, p) = decode::<Top>("[server]\nmax = -3\n", "docs");
        assert!(p[0].message.starts_with("-3 is negative"), "{p:?}");
    }

    #[test]
    fn syntax_errors_are_reported_with_the_rest() {
        let (_, p) = decode::<Top>("[server\nmax = 1\n[server]\nlisen = 1\n", "docs");
        assert_eq!(p[0].key, "(syntax)");
        assert!(p[0].message.contains("line 1"), "{p:?}");
    }

    #[test]
    fn a_key_under_a_broken_header_is_not_also_unknown() {
        let (_, p) = decode::<Top>("[server\nmax = 1\n", "docs");
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(p[0].key, "(syntax)");
        // Past the next good header, an unknown key is still one.
        let (_, p) = decode::<Top>("[server\nmax = 1\n[server]\nlisen = 1\n", "docs");
        assert_eq!(p.len(), 2, "{p:?}");
        assert!(p[1].message.contains("lisen"), "{p:?}");
        // A bad value inside a good table hides nothing after it.
        let (_, p) = decode::<Top>("[server]\nmax = 1 junk\nlisen = 1\n", "docs");
        assert!(p.iter().any(|p| p.key == "server.lisen"), "{p:?}");
    }

    #[test]
    fn closest_needs_a_near_name() {
        let valid = vec!["listen".to_owned(), "public_url".to_owned()];
        assert_eq!(closest("lisen", &valid), Some("listen"));
        assert_eq!(closest("zzzzzzzz", &valid), None);
    }
}
