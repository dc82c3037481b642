//! Checking one configured tool (name, description, JSON Schema parameters, scheduling, backend)
//! and converting it; every problem is reported with its key.

use std::collections::BTreeSet;
use std::time::Duration;

use serde_json::{Value, json};

use super::Problems;
use crate::agents::config::{BackendName, BehaviorName, CallDataName, SchedulingName, ToolSection};
use crate::agents::registry::{
    Backend, Behavior, CallDataSource, HttpBackend, Route, Scheduling, Tool,
};

pub(super) fn tool(name: &str, t: &ToolSection, p: &mut Problems) -> Option<Tool> {
    let k = format!("tools.{name}");
    let mut ok = true;
    let name_ok = name.len() <= 64
        && name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-'));
    if !name_ok {
        ok = false;
        p.add(
            k.clone(),
            format!("{name:?} cannot be a function name"),
            "use letters, digits, _ . - (at most 64), starting with a letter or _",
        );
    }
    if name.starts_with("transfer_to_") {
        ok = false;
        p.add(
            k.clone(),
            "transfer_to_<agent> tools are generated from the agents",
            "rename the tool",
        );
    }
    if t.description.trim().is_empty() {
        ok = false;
        p.add(
            format!("{k}.description"),
            "is empty; the model picks tools by their description",
            "say when to call it in one sentence",
        );
    }
    let parameters = match &t.parameters {
        None => json!({"type": "object", "properties": {}}),
        Some(v) => match check_schema(v) {
            Ok(()) => v.clone(),
            Err(why) => {
                ok = false;
                p.add(
                    format!("{k}.parameters"),
                    why,
                    "write a JSON Schema object: type = \"object\", [tools.x.parameters.properties.<arg>] tables, required = [...]",
                );
                Value::Null
            }
        },
    };
    if t.scheduling == SchedulingName::Interrupt {
        ok = false;
        p.add(
            format!("{k}.scheduling"),
            "INTERRUPT would cut the agent's speech",
            "use \"when_idle\" or \"silent\"",
        );
    }
    let backend = match t.backend {
        None => {
            p.add(
                format!("{k}.backend"),
                "is missing",
                "say where the result comes from: backend = \"http\" (with url) or \"static\" (with reply)",
            );
            None
        }
        Some(BackendName::Static) => {
            for (field, set) in [
                ("url", !t.url.is_empty()),
                ("header", !t.header.is_empty()),
                ("header_env", !t.header_env.is_empty()),
            ] {
                if set {
                    ok = false;
                    p.add(
                        format!("{k}.{field}"),
                        "only http tools use it",
                        "remove it, or set backend = \"http\"",
                    );
                }
            }
            match &t.reply {
                Some(reply) => Some(Backend::Static {
                    reply: reply.clone(),
                }),
                None => {
                    p.add(
                        format!("{k}.reply"),
                        "a static tool needs its canned reply",
                        "add reply = { status = \"ok\" } (any JSON as TOML)",
                    );
                    None
                }
            }
        }
        Some(BackendName::Http) => http_backend(&k, t, p),
    };
    let route = t.route.as_ref().map(|r| Route {
        topic: r.topic.clone(),
        intent: r.intent.clone(),
        requires_specialist: r.requires_specialist.clone(),
        specialist: r.specialist.clone(),
        handback: r.handback.clone(),
    });
    (ok).then_some(())?;
    Some(Tool {
        name: name.to_owned(),
        description: t.description.trim().to_owned(),
        parameters,
        behavior: match t.behavior {
            BehaviorName::Blocking => Behavior::Blocking,
            BehaviorName::NonBlocking => Behavior::NonBlocking,
        },
        scheduling: match t.scheduling {
            SchedulingName::Silent => Scheduling::Silent,
            _ => Scheduling::WhenIdle,
        },
        backend: backend?,
        call_data: match t.call_data {
            CallDataName::None => CallDataSource::None,
            CallDataName::Args => CallDataSource::Args,
            CallDataName::Result => CallDataSource::Result,
        },
        route,
    })
}

fn http_backend(k: &str, t: &ToolSection, p: &mut Problems) -> Option<Backend> {
    let mut ok = true;
    if t.reply.is_some() {
        ok = false;
        p.add(
            format!("{k}.reply"),
            "only static tools use it",
            "remove it, or set backend = \"static\"",
        );
    }
    let url = match url::Url::parse(&t.url) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.host_str().is_some() => Some(u),
        _ => {
            p.add(
                format!("{k}.url"),
                format!("{:?} is not an http(s) URL", t.url),
                "e.g. url = \"https://crm.example.com/tools/get_billing_summary\"",
            );
            None
        }
    };
    if t.timeout_ms == 0 || t.timeout_ms > 60_000 {
        ok = false;
        p.add(
            format!("{k}.timeout_ms"),
            format!("{} ms is outside 1..=60000", t.timeout_ms),
            "a caller is waiting: use a few seconds, e.g. 3000",
        );
    }
    let header = match (t.header.trim(), t.header_env.trim()) {
        ("", "") => None,
        (h, env) if !h.is_empty() && !env.is_empty() => {
            if http::HeaderName::from_bytes(h.as_bytes()).is_err() {
                ok = false;
                p.add(
                    format!("{k}.header"),
                    format!("{h:?} is not a header name"),
                    "e.g. header = \"Authorization\"",
                );
            }
            if !env.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
                ok = false;
                p.add(
                    format!("{k}.header_env"),
                    "must be the NAME of an environment variable, not the secret",
                    "write e.g. header_env = \"CRM_TOKEN\" and export the value in that variable",
                );
            }
            Some((h.to_owned(), env.to_owned()))
        }
        _ => {
            ok = false;
            p.add(
                format!("{k}.header_env"),
                "header and header_env go together",
                "set both (the header's value comes from the variable) or neither",
            );
            None
        }
    };
    (ok).then_some(())?;
    Some(Backend::Http(HttpBackend {
        url: url?,
        timeout: Duration::from_millis(t.timeout_ms),
        header,
    }))
}

fn check_schema(v: &Value) -> Result<(), String> {
    let o = v
        .as_object()
        .ok_or("must be a table (a JSON Schema object)")?;
    if o.get("type").and_then(Value::as_str) != Some("object") {
        return Err("type must be \"object\"".into());
    }
    let props = match o.get("properties") {
        None => None,
        Some(Value::Object(m)) => Some(m),
        Some(_) => return Err("properties must be a table of argument schemas".into()),
    };
    let mut seen = BTreeSet::new();
    if let Some(req) = o.get("required") {
        let req = req
            .as_array()
            .ok_or("required must be a list of argument names")?;
        for r in req {
            let r = r.as_str().ok_or("required must list names")?;
            if !props.is_some_and(|m| m.contains_key(r)) {
                return Err(format!(
                    "required names {r:?}, which is not among properties"
                ));
            }
            if !seen.insert(r) {
                return Err(format!("required names {r:?} twice"));
            }
        }
    }
    Ok(())
}
