//! Settings written in the file that another setting makes void: baton would silently ignore
//! them, so each is a problem naming the setting that voids it. Only keys the file writes count
//! (a default is never void).

use toml::de::{DeTable, DeValue};

use super::{BackendKind, Config, Problem};

/// The keys a file writes, by dotted path.
pub struct Written<'i>(DeTable<'i>);

impl<'i> Written<'i> {
    /// The keys of `text` (what of it parses).
    pub fn of(text: &'i str) -> Written<'i> {
        Written(DeTable::parse_recoverable(text).0.into_inner())
    }

    /// Whether the file writes `dotted` (e.g. `model.scenario`).
    pub fn has(&self, dotted: &str) -> bool {
        let mut table = &self.0;
        let mut parts = dotted.split('.').peekable();
        while let Some(p) = parts.next() {
            let Some(v) = table.get(p) else {
                return false;
            };
            if parts.peek().is_none() {
                return true;
            }
            match v.get_ref() {
                DeValue::Table(t) => table = t,
                _ => return false,
            }
        }
        false
    }
}

/// Every setting the file writes with an effect (not its default) that another one makes void.
pub fn check(c: &Config, written: &Written<'_>, out: &mut Vec<Problem>) {
    let mut void = |key: &str, set: bool, message: String, fix: &str| {
        if set && written.has(key) {
            out.push(Problem {
                key: key.to_owned(),
                message,
                fix: fix.to_owned(),
            });
        }
    };
    let m = &c.model;
    let embedded = m.backend == BackendKind::Mock && m.url.is_empty();
    let scenario = !m.scenario.is_empty();
    if m.backend == BackendKind::Mock && !m.url.is_empty() {
        void(
            "model.scenario",
            scenario,
            format!(
                "is ignored: model.url = {:?} is a separate mock model, which plays the scenario \
                 it was started with",
                m.url
            ),
            "start that mock with `baton mock-model --scenario FILE`, or remove model.url to \
             run the embedded mock with this scenario",
        );
    } else if !embedded {
        void(
            "model.scenario",
            scenario,
            format!(
                "is ignored: only the embedded mock plays a scenario, and backend is {:?}",
                m.backend
            )
            .to_lowercase(),
            "remove the line (or set backend = \"mock\")",
        );
    }
    void(
        "model.credential_env",
        m.backend == BackendKind::Mock && !m.credential_env.is_empty(),
        "is ignored: the mock model takes no credential".into(),
        "remove the line, or set backend = \"gemini\", \"vertex\" or \"openai\"",
    );
    void(
        "model.credential_command",
        m.backend == BackendKind::Mock && m.credential_command.is_some(),
        "is ignored: the mock model takes no credential".into(),
        "remove the line, or set backend = \"gemini\", \"vertex\" or \"openai\"",
    );
    void(
        "model.credential_refresh_s",
        m.credential_command.is_none()
            && m.credential_refresh_s != super::ModelConfig::default().credential_refresh_s,
        "is ignored: there is no model.credential_command to run again".into(),
        "set model.credential_command too, or remove the line",
    );
    void(
        "model.api_version",
        !matches!(m.backend, BackendKind::Gemini | BackendKind::Vertex)
            && !m.api_version.is_empty(),
        format!(
            "is ignored: only the gemini and vertex backends take an API version, and backend \
             is {:?}",
            m.backend
        )
        .to_lowercase(),
        "remove the line",
    );
    // The dialect is spoken to the service and to a separate `baton mock-model --profile
    // openai` at `url`; the embedded mock speaks GA.
    let remote_openai = m.backend == BackendKind::Openai || (m.openai() && !m.url.is_empty());
    void(
        "model.beta",
        m.beta && !remote_openai,
        "is ignored: the beta dialect is OpenAI Realtime's, spoken to the service (backend = \
         \"openai\") or to a separate mock-model at url (profile = \"openai\"); the embedded \
         mock speaks GA"
            .into(),
        "remove the line, or set backend = \"openai\"",
    );
    void(
        "model.compression_target_tokens",
        m.compression_trigger_tokens == 0 && m.compression_target_tokens > 0,
        "is ignored: there is no compression without compression_trigger_tokens".into(),
        "set model.compression_trigger_tokens too, or remove the line",
    );
    void(
        "twilio.disable_signature_check",
        c.twilio.auth_token_env.is_empty() && c.twilio.disable_signature_check,
        "is ignored: no twilio.auth_token_env, so signatures are not checked anyway".into(),
        "remove the line",
    );
    let st = &c.store;
    let d = super::StoreConfig::default();
    let no_store = st.url.is_empty() && st.url_env.is_empty();
    for (key, set) in [
        ("queue", st.queue != d.queue),
        ("read_timeout_ms", st.read_timeout_ms != d.read_timeout_ms),
        ("recordings", !st.recordings.is_empty()),
    ] {
        void(
            &format!("store.{key}"),
            no_store && set,
            "is ignored: there is no store (no store.url or store.url_env)".into(),
            "set store.url (e.g. \"sqlite://out/baton.db\"), or remove the line",
        );
    }
    let postgres = st.url.starts_with("postgres") || !st.url_env.is_empty();
    let k = &c.cluster;
    let d = super::ClusterConfig::default();
    for (key, set) in [
        // instance_id and advertise_url name this instance alone too (health, answers).
        ("heartbeat_ms", k.heartbeat_ms != d.heartbeat_ms),
        ("stale_after_ms", k.stale_after_ms != d.stale_after_ms),
        (
            "command_timeout_ms",
            k.command_timeout_ms != d.command_timeout_ms,
        ),
    ] {
        void(
            &format!("cluster.{key}"),
            !postgres && set,
            "is ignored: instances share only a PostgreSQL store, and this config has none, so \
             this instance runs alone"
                .into(),
            "set store.url = \"postgres://…\" (or store.url_env), or remove the line",
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problems(text: &str) -> Vec<Problem> {
        let c: Config = toml::from_str(text).unwrap();
        let mut out = Vec::new();
        check(&c, &Written::of(text), &mut out);
        out
    }

    #[test]
    fn a_scenario_beside_a_model_url_is_void() {
        let p = problems("[model]\nurl = \"ws://127.0.0.1:9300\"\nscenario = \"s.toml\"\n");
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(p[0].key, "model.scenario");
        assert!(p[0].fix.contains("baton mock-model --scenario"), "{p:?}");
        assert!(problems("[model]\nscenario = \"s.toml\"\n").is_empty());
    }

    #[test]
    fn beta_is_void_only_where_no_openai_endpoint_hears_it() {
        for (model, void) in [
            ("backend = \"openai\"", false),
            ("profile = \"openai\"\nurl = \"ws://127.0.0.1:9300\"", false),
            ("profile = \"openai\"", true),
            ("url = \"ws://127.0.0.1:9300\"", true),
            ("", true),
        ] {
            let p = problems(&format!("[model]\n{model}\nbeta = true\n"));
            let keys: Vec<&str> = p.iter().map(|p| p.key.as_str()).collect();
            assert_eq!(keys.contains(&"model.beta"), void, "{model}: {p:?}");
        }
    }

    #[test]
    fn a_credential_command_is_void_on_the_mock_and_its_refresh_without_one() {
        let p = problems("[model]\ncredential_command = [\"gcloud\"]\n");
        assert_eq!(p.len(), 1, "{p:?}");
        assert_eq!(p[0].key, "model.credential_command");
        assert!(
            p[0].message.contains("mock model takes no credential"),
            "{p:?}"
        );
        for backend in ["gemini", "vertex", "openai"] {
            let text = format!(
                "[model]\nbackend = \"{backend}\"\ncredential_command = [\"gcloud\"]\ncredential_refresh_s = 60\n"
            );
            assert!(
                problems(&text).is_empty(),
                "{backend}: {:?}",
                problems(&text)
            );
        }
        let p = problems("[model]\nbackend = \"vertex\"\ncredential_refresh_s = 60\n");
        let keys: Vec<&str> = p.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(keys, ["model.credential_refresh_s"]);
    }

    #[test]
    fn defaults_are_never_void() {
        assert!(problems("").is_empty());
        let p = problems("[store]\nqueue = 5\n[cluster]\nheartbeat_ms = 500\n");
        let keys: Vec<&str> = p.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(keys, ["store.queue", "cluster.heartbeat_ms"]);
    }
}
