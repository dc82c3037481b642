//! `[sidecars.*]` of an agent set: each section checked (timeout, in-flight bound, backend and
//! its URL or reply), every problem of every section reported with its key, into validated
//! [`Sidecar`]s.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use super::Problems;
use crate::agents::config::SidecarSection;
use crate::agents::registry::{HttpBackend, Sidecar, SidecarBackend};

/// Validates `[sidecars.*]`, reporting every problem with its key.
pub(super) fn build(
    sections: &BTreeMap<String, SidecarSection>,
    p: &mut Problems,
) -> Vec<Arc<Sidecar>> {
    let mut out = Vec::new();
    for (id, s) in sections {
        let key = format!("sidecars.{id}");
        match s.timeout_ms {
            None => p.add(
                format!("{key}.timeout_ms"),
                "is missing",
                "give the backend its time, e.g. timeout_ms = 2000 (seed 004: analysis 2 s, research 5 s)",
            ),
            Some(0) => p.add(
                format!("{key}.timeout_ms"),
                "is 0",
                "give the backend its time, e.g. 2000 (seed 004: analysis 2 s, research 5 s)",
            ),
            Some(_) => {}
        }
        if s.max_in_flight == 0 {
            p.add(
                format!("{key}.max_in_flight"),
                "is 0, so it would never run",
                "use 1 (the default) or more",
            );
        }
        let timeout = Duration::from_millis(s.timeout_ms.unwrap_or(0));
        let backend = match (s.backend.as_str(), &s.url, &s.reply) {
            ("http", Some(u), _) => match url::Url::parse(u) {
                Ok(url) if matches!(url.scheme(), "http" | "https") => {
                    Some(SidecarBackend::Http(HttpBackend {
                        url,
                        timeout,
                        header: s.header.clone().zip(s.header_env.clone()),
                    }))
                }
                _ => {
                    p.add(
                        format!("{key}.url"),
                        format!("{u:?} is not an http(s) URL"),
                        "e.g. url = \"http://127.0.0.1:9401/analyze\"",
                    );
                    None
                }
            },
            ("http", None, _) => {
                p.add(
                    format!("{key}.url"),
                    "missing",
                    "an http backend needs url = \"http://…\"",
                );
                None
            }
            ("static", _, Some(reply)) => Some(SidecarBackend::Static {
                reply: reply.clone(),
                delay: Duration::from_millis(s.delay_ms),
            }),
            ("static", _, None) => {
                p.add(
                    format!("{key}.reply"),
                    "missing",
                    "a static backend needs reply = { … }",
                );
                None
            }
            ("", _, _) => {
                p.add(
                    format!("{key}.backend"),
                    "is missing",
                    "use \"http\" (with url) or \"static\" (with reply)",
                );
                None
            }
            (other, _, _) => {
                p.add(
                    format!("{key}.backend"),
                    format!("unknown backend {other:?}"),
                    "use \"http\" or \"static\"",
                );
                None
            }
        };
        let Some(backend) = backend else { continue };
        if s.timeout_ms.is_none_or(|t| t == 0) || s.max_in_flight == 0 {
            continue;
        }
        out.push(Arc::new(Sidecar {
            id: id.clone(),
            description: s.description.clone(),
            backend,
            timeout,
            budget: s.budget_ms.map(Duration::from_millis),
            deliver: s.deliver,
            max_in_flight: s.max_in_flight,
            label: s.label.clone().unwrap_or_else(|| format!("[{id}]")),
        }));
    }
    out
}
