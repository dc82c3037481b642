//! The bundled scenarios: where they are (a checkout's folder, else the sources the binary was
//! built from), a name or a path as a scenario argument, and the list `--list` prints.

use std::path::{Path, PathBuf};

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

/// A scenario argument: a bundled name, or a path (a `.wav` given here is refused later with a
/// pointer to `--fixture`).
pub fn scenario_path(arg: &str) -> PathBuf {
    if arg.ends_with(".toml") || arg.to_ascii_lowercase().ends_with(".wav") || arg.contains('/') {
        PathBuf::from(arg)
    } else {
        bundled(&format!("audio-fixtures/scenarios/{arg}.toml"))
    }
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
