//! The bundled scenarios: where they are (a checkout's folder, else the sources the binary was
//! built from), a name or a path as a scenario argument, and the list `--list` prints.

// Levenshtein distance, by characters.
use std::path::{Path, PathBuf};
use strsim::levenshtein as edit_distance;

use super::args::DemoError;
use crate::mock;

/// A bundled file: under the current directory when run from a checkout, else next to the
/// sources the binary was built from.
pub fn bundled(relative: &str) -> PathBuf {
    let local = Path::new(relative);
    if local.exists() {
        return local.to_path_buf();
    }
    Path::new(env!("CARGO_MANIFEST_DIR")).join(relative)
}

/// The scenario `baton demo` plays without `--scenario`: seed 000, two agents with a handoff
/// there and back (the single-agent call is `--scenario demo`).
pub fn default_scenario() -> PathBuf {
    bundled("audio-fixtures/scenarios/seed000.toml")
}

/// A scenario argument, by one rule: a file that exists is that file, however it is written
/// (`README.md` and `./README.md` alike); otherwise a bare name (no folder, no `.toml` or `.wav`)
/// is a bundled scenario's, and anything else is a path (a `.wav` given here is refused later
/// with a pointer to `--fixture`).
pub fn scenario_path(arg: &str) -> PathBuf {
    if Path::new(arg).is_file() || !is_bare_name(arg) {
        PathBuf::from(arg)
    } else {
        bundled_named(arg)
    }
}

/// Whether `arg` can only be a bundled scenario's name, were no file of that name here.
fn is_bare_name(arg: &str) -> bool {
    !(arg.ends_with(".toml")
        || arg.to_ascii_lowercase().ends_with(".wav")
        || arg.contains('/')
        || arg.contains(std::path::MAIN_SEPARATOR))
}

/// Where the bundled scenario `name` is (or would be).
fn bundled_named(name: &str) -> PathBuf {
    bundled(&format!("audio-fixtures/scenarios/{name}.toml"))
}

/// The scenario file `arg` names (seed 000 without one), by [`scenario_path`]'s rule. A file
/// that has a bundled scenario's name is played, with a warning naming the bundled one. A name
/// that is neither is refused with the bundled names (the closest first), and the reminder
/// that a path is taken too.
pub fn resolve_scenario(arg: Option<&str>) -> Result<PathBuf, DemoError> {
    let Some(arg) = arg else {
        return Ok(default_scenario());
    };
    let path = scenario_path(arg);
    if path.exists() {
        let bundled = bundled_named(arg);
        if is_bare_name(arg) && path == Path::new(arg) && bundled.is_file() {
            warn_shadowed(arg, &bundled);
        }
        return Ok(path);
    }
    let names: Vec<String> = all_bundled()
        .unwrap_or_default()
        .iter()
        .filter_map(|p| p.file_stem())
        .map(|n| n.to_string_lossy().into_owned())
        .collect();
    let asked = Path::new(arg)
        .file_stem()
        .map_or_else(|| arg.to_owned(), |n| n.to_string_lossy().into_owned());
    let near = closest(&asked, &names);
    let hint = match near.as_slice() {
        [] => String::new(),
        [one] => format!("; did you mean `--scenario {one}`?"),
        several => format!(
            "; did you mean {}?",
            several
                .iter()
                .map(|n| format!("`--scenario {n}`"))
                .collect::<Vec<_>>()
                .join(" or ")
        ),
    };
    let what = if path == Path::new(arg) {
        format!("scenario file {arg} not found")
    } else {
        format!("no scenario named {arg:?}, and no file of that name in this folder")
    };
    Err(DemoError::Usage(format!(
        "{what}: --scenario takes the name of a bundled scenario (bundled: {}; \
         `baton demo --list` describes them) or the path of a scenario file{hint}",
        names.join(", ")
    )))
}

/// Warns, once per argument (a run resolves its scenario more than once), that the file `arg`
/// is played in place of the bundled scenario of that name at `bundled`.
fn warn_shadowed(arg: &str, bundled: &Path) {
    static SAID: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut said = SAID
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if said.iter().any(|a| a == arg) {
        return;
    }
    said.push(arg.to_owned());
    tracing::warn!(
        "--scenario {arg}: playing the file {arg} in this folder, not the bundled scenario \
         {arg}; to play that one, give its path: --scenario {}",
        bundled.display()
    );
}

/// The names in `names` closest to `asked` (case aside): every one at the least edit distance,
/// when that is small for the name's length.
fn closest<'a>(asked: &str, names: &'a [String]) -> Vec<&'a str> {
    let asked = asked.to_lowercase();
    let scored: Vec<(usize, &str)> = names
        .iter()
        .map(|n| (edit_distance(&asked, &n.to_lowercase()), n.as_str()))
        .collect();
    let Some(best) = scored.iter().map(|(d, _)| *d).min() else {
        return Vec::new();
    };
    if best > (asked.chars().count() / 3).max(1) {
        return Vec::new();
    }
    scored
        .into_iter()
        .filter(|(d, _)| *d == best)
        .map(|(_, n)| n)
        .collect()
}

/// Every bundled scenario file, sorted by name (what `--list` shows).
fn all_bundled() -> Result<Vec<PathBuf>, DemoError> {
    let dir = bundled("audio-fixtures/scenarios");
    let entries = std::fs::read_dir(&dir)
        .map_err(|e| DemoError::Scenario(format!("{}: {e}", dir.display())))?;
    let mut names: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    names.sort();
    Ok(names)
}

/// The bundled scenarios that play on the virtual clock, sorted by name: every one but those
/// whose agent set reaches a person by a warm transfer, which dial a real SIP peer and run in
/// real time only (`--list` shows them too, marked).
pub fn bundled_scenarios() -> Result<Vec<PathBuf>, DemoError> {
    Ok(all_bundled()?
        .into_iter()
        .filter(|p| !calls_a_person(p))
        .collect())
}

/// Whether the scenario at `path` has an agent set with a person reached by a warm transfer.
fn calls_a_person(path: &Path) -> bool {
    mock::Scenario::load(path)
        .ok()
        .and_then(|s| s.agents)
        .and_then(|a| crate::agents::load(&a).ok())
        .is_some_and(|r| super::warm_people(&r))
}

/// The bundled scenarios: `name  description`, one per line, sorted.
pub fn list_scenarios() -> Result<String, DemoError> {
    let mut out = String::new();
    for p in all_bundled()? {
        let name = p
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        let s = mock::Scenario::load(&p).map_err(|e| DemoError::Scenario(e.to_string()))?;
        let agents = s
            .agents
            .as_ref()
            .and_then(|a| a.file_stem())
            .map(|a| format!(" [agents: {}]", a.to_string_lossy()))
            .unwrap_or_default();
        let pace = if calls_a_person(&p) {
            " [real time: a SIP phone on loopback]"
        } else {
            ""
        };
        out.push_str(&format!("{name}  {}{agents}{pace}\n", s.description));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names() -> Vec<String> {
        ["demo", "seed000", "seed001", "seed002", "warm_transfer"]
            .map(str::to_owned)
            .to_vec()
    }

    #[test]
    fn the_closest_names_are_the_nearest_few() {
        assert_eq!(edit_distance("seed01", "seed001"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(closest("Seed001", &names()), ["seed001"]);
        assert_eq!(closest("seed0001", &names()), ["seed000", "seed001"]);
        assert_eq!(closest("warm-transfer", &names()), ["warm_transfer"]);
        assert!(closest("nosuch", &names()).is_empty());
    }

    #[test]
    fn a_missing_scenario_points_at_the_list() {
        let err = resolve_scenario(Some("nosuch")).unwrap_err().to_string();
        assert!(
            err.contains("no scenario named \"nosuch\"")
                && err.contains("baton demo --list")
                && err.contains("bundled: demo, ")
                && err.contains("or the path of a scenario file"),
            "{err}"
        );
        assert!(!err.contains("did you mean"), "{err}");
        let err = resolve_scenario(Some("seed01")).unwrap_err().to_string();
        assert!(err.contains("`--scenario seed001`"), "{err}");
        let err = resolve_scenario(Some("no/such/seed001.toml"))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("scenario file no/such/seed001.toml not found")
                && err.contains("baton demo --list")
                && err.contains("`--scenario seed001`"),
            "{err}"
        );
        assert_eq!(
            resolve_scenario(Some("seed001")).unwrap(),
            scenario_path("seed001")
        );
        assert_eq!(resolve_scenario(None).unwrap(), default_scenario());
    }
}
