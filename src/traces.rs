//! OpenTelemetry traces of finished calls, exported over OTLP/HTTP (JSON encoding) when
//! `[traces] otlp_endpoint` is set; off by default. One trace per call: a root `call` span
//! with the call's figures (the same as the `call ended` line and the report), and under it a
//! span per caller turn, handoff, tool call and reconnect, each carrying that record's figures.
//!
//! The spans are built after the call from its [`CallReport`] (whose times are on the call's
//! media timeline, one 20 ms tick per played frame), so nothing is added to the audio path; the
//! export is a background task. No transcript text and no tool arguments go into a span (they
//! may hold what a caller said); only ids, names and figures.
//!
//! The OTLP JSON form (`opentelemetry-proto`'s `ExportTraceServiceRequest`): ids as hex,
//! times as nanosecond strings, attributes as `{key, value: {stringValue|intValue|doubleValue|
//! boolValue}}`.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::Deserialize;
use serde_json::{Value, json};

use crate::call::CallReport;
use crate::call::metrics::{round2, summarize};

/// `[traces]` of the daemon's config.
#[derive(Clone, Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct TracesConfig {
    /// An OTLP/HTTP collector's base URL (`http://127.0.0.1:4318`); spans are POSTed to
    /// `/v1/traces` under it. Empty: no traces.
    pub otlp_endpoint: String,
    /// `service.name` of the spans' resource (default `baton`).
    pub service_name: String,
}

/// The traces endpoint of a collector's base URL: `…/v1/traces` (kept when already given).
pub fn traces_url(endpoint: &str) -> String {
    let base = endpoint.trim().trim_end_matches('/');
    if base.ends_with("/v1/traces") {
        base.to_owned()
    } else {
        format!("{base}/v1/traces")
    }
}

/// Sends finished calls' traces to one collector.
pub struct Exporter {
    url: String,
    service: String,
    client: reqwest::Client,
}

/// The process's exporter, where its exports run, and how many are under way.
struct Installed {
    exporter: Exporter,
    /// The runtime [`Exporter::install`] ran on (the daemon's main one): an export is never
    /// left on the shard that ended the call, which stops at shutdown and would drop it.
    rt: tokio::runtime::Handle,
    in_flight: AtomicUsize,
    idle: tokio::sync::Notify,
}

static EXPORTER: OnceLock<Installed> = OnceLock::new();

/// One export under way; done when dropped (sent, failed or dropped with its runtime).
struct InFlight(&'static Installed);

impl Drop for InFlight {
    fn drop(&mut self) {
        if self.0.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.idle.notify_waiters();
        }
    }
}

/// Why traces cannot be exported.
#[derive(Debug, thiserror::Error)]
pub enum TracesError {
    #[error(
        "traces.otlp_endpoint {0:?}: use an http:// or https:// URL (e.g. http://127.0.0.1:4318)"
    )]
    BadEndpoint(String),
    #[error("cannot build the OTLP client: {0}")]
    Client(String),
}

impl Exporter {
    /// An exporter for `config`; `None` when no endpoint is set.
    pub fn new(config: &TracesConfig) -> Result<Option<Exporter>, TracesError> {
        let endpoint = config.otlp_endpoint.trim();
        if endpoint.is_empty() {
            return Ok(None);
        }
        let url = url::Url::parse(&traces_url(endpoint))
            .ok()
            .filter(|u| matches!(u.scheme(), "http" | "https") && u.host().is_some())
            .ok_or_else(|| TracesError::BadEndpoint(endpoint.to_owned()))?;
        let tls = crate::model::tls::default_client_config()
            .map_err(|e| TracesError::Client(e.to_string()))?;
        let client = reqwest::Client::builder()
            .tls_backend_preconfigured((*tls).clone())
            .timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| TracesError::Client(e.to_string()))?;
        let service = match config.service_name.trim() {
            "" => "baton".to_owned(),
            s => s.to_owned(),
        };
        Ok(Some(Exporter {
            url: url.to_string(),
            service,
            client,
        }))
    }

    /// Where the spans go, without credentials.
    pub fn endpoint(&self) -> String {
        redacted(&self.url)
    }

    /// Makes this the process's exporter (the first one set stays); its exports run on the
    /// calling runtime. Outside one, nothing is installed.
    pub fn install(self) {
        let url = self.url.clone();
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            tracing::warn!("call traces not exported: no runtime to export them from");
            return;
        };
        let installed = Installed {
            exporter: self,
            rt,
            in_flight: AtomicUsize::new(0),
            idle: tokio::sync::Notify::new(),
        };
        if EXPORTER.set(installed).is_ok() {
            tracing::info!(endpoint = %redacted(&url), "exporting call traces over OTLP/HTTP");
        }
    }

    /// Sends one request body; the error says what the collector answered.
    pub async fn send(&self, body: &Value) -> Result<(), String> {
        let resp = self
            .client
            .post(&self.url)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(body.to_string())
            .send()
            .await
            .map_err(|e| e.to_string())?;
        if resp.status().is_success() {
            Ok(())
        } else {
            Err(format!("the collector answered HTTP {}", resp.status()))
        }
    }
}

/// The URL without user info or query (which may hold credentials).
fn redacted(url: &str) -> String {
    url::Url::parse(url).map_or_else(|_| "(unparsable)".into(), |u| crate::secret::url_shown(&u))
}

/// Exports the trace of a call that just ended, in the background (nothing when no exporter is
/// installed). `call` is its id in `GET /calls`.
pub fn call_ended(report: &CallReport, call: &str) {
    let Some(installed) = EXPORTER.get() else {
        return;
    };
    let exporter = &installed.exporter;
    let ended = SystemTime::now();
    let body = call_trace(report, call, &exporter.service, ended, &ids());
    installed.in_flight.fetch_add(1, Ordering::AcqRel);
    let done = InFlight(installed);
    installed.rt.spawn(async move {
        let _done = done;
        if let Err(e) = exporter.send(&body).await {
            tracing::warn!(error = %e, endpoint = %redacted(&exporter.url), "call trace not exported");
        }
    });
}

/// Waits, at most `limit`, for the traces of calls that have ended to be sent (at shutdown,
/// after the last call: exiting would drop them). Says how many were left unsent.
pub async fn flush(limit: Duration) {
    let Some(installed) = EXPORTER.get() else {
        return;
    };
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let idle = installed.idle.notified();
        tokio::pin!(idle);
        idle.as_mut().enable();
        let left = installed.in_flight.load(Ordering::Acquire);
        if left == 0 {
            return;
        }
        if tokio::time::timeout_at(deadline, idle).await.is_err() {
            tracing::warn!(
                left,
                endpoint = %redacted(&installed.exporter.url),
                "call traces not exported before exit: the collector did not answer in time"
            );
            return;
        }
    }
}

/// Random ids: a 16-byte trace id, then 8-byte span ids.
pub struct Ids {
    seed: [u8; 24],
}

fn ids() -> Ids {
    let mut seed = [0u8; 24];
    if getrandom::fill(&mut seed).is_err() {
        // No OS randomness: the time still makes the ids distinct per call.
        let t = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        seed[..16].copy_from_slice(&t.to_le_bytes());
    }
    Ids { seed }
}

impl Ids {
    /// From fixed bytes (tests).
    pub fn from_seed(seed: [u8; 24]) -> Ids {
        Ids { seed }
    }

    fn trace(&self) -> String {
        hex(&self.seed[..16])
    }

    /// The `n`-th span's id: the seed's last 8 bytes with `n` mixed in (never all zero).
    fn span(&self, n: u64) -> String {
        let base = u64::from_le_bytes(self.seed[16..24].try_into().unwrap_or([0; 8]));
        let id = base.wrapping_add(n.wrapping_mul(0x9E37_79B9_7F4A_7C15)) | 1;
        hex(&id.to_be_bytes())
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn string(key: &str, v: &str) -> Value {
    json!({"key": key, "value": {"stringValue": v}})
}

fn int(key: &str, v: u64) -> Value {
    // OTLP JSON carries 64-bit integers as strings.
    json!({"key": key, "value": {"intValue": v.to_string()}})
}

fn double(key: &str, v: f64) -> Value {
    json!({"key": key, "value": {"doubleValue": round2(v) + 0.0}})
}

fn boolean(key: &str, v: bool) -> Value {
    json!({"key": key, "value": {"boolValue": v}})
}

/// One span: `start_ms`..`end_ms` on the call's timeline, placed at `t0`.
struct Span {
    name: String,
    start_ms: f64,
    end_ms: f64,
    attributes: Vec<Value>,
    error: Option<String>,
}

/// The OTLP/JSON `ExportTraceServiceRequest` of one call that ended at `ended`.
pub fn call_trace(
    report: &CallReport,
    call: &str,
    service: &str,
    ended: SystemTime,
    ids: &Ids,
) -> Value {
    // The call's timeline: one 20 ms tick per played frame, ending now.
    let length_ms = report.frames_played as f64 * 20.0;
    let t0 = ended
        .checked_sub(Duration::from_secs_f64(length_ms / 1000.0))
        .unwrap_or(ended);
    let t0_ns = t0.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    let at = |ms: f64| (t0_ns + (ms.max(0.0) * 1e6) as u128).to_string();

    let first = summarize(&report.first_audio_ms);
    let up = summarize(&report.uplink_added_ms);
    let down = summarize(&report.downlink_added_ms);
    let mut root = vec![
        string("baton.call.id", call),
        string("baton.call.end_reason", &report.end_reason),
        int("baton.call.turns", report.turns.len() as u64),
        int("baton.call.handoffs", report.handoffs.len() as u64),
        int("baton.call.reconnects", report.reconnects.len() as u64),
        int("baton.call.tool_calls", report.tool_calls),
        int("baton.call.underruns", report.underruns),
        double("baton.call.audio_replayed_ms", report.audio_replayed_ms),
        double("baton.call.audio_lost_ms", report.audio_lost_ms),
    ];
    for (name, v) in [
        ("baton.first_audio_ms.p50", first.p50),
        ("baton.first_audio_ms.max", first.max),
        ("baton.uplink_added_ms.p50", up.p50),
        ("baton.uplink_added_ms.p99", up.p99),
        ("baton.downlink_added_ms.p50", down.p50),
        ("baton.downlink_added_ms.p99", down.p99),
    ] {
        if let Some(v) = v {
            root.push(double(name, v));
        }
    }
    let agents = report.agents_heard();
    if !agents.is_empty() {
        root.push(string("baton.call.agents", &agents.join(", ")));
    }

    let mut children: Vec<Span> = Vec::new();
    for t in &report.turns {
        let mut a = vec![
            int("baton.turn.index", t.index as u64),
            double("baton.turn.caller_start_ms", t.caller_start_ms),
            double("baton.turn.caller_end_ms", t.caller_end_ms),
            boolean("baton.turn.interrupted", t.interrupted),
        ];
        if let Some(v) = t.first_audio_ms {
            a.push(double("baton.turn.first_audio_ms", v));
        }
        if !t.agent.is_empty() {
            a.push(string("baton.agent", &t.agent));
        }
        children.push(Span {
            name: format!("turn {}", t.index),
            start_ms: t.caller_start_ms,
            end_ms: t.agent_end_ms.unwrap_or(t.caller_end_ms),
            attributes: a,
            error: None,
        });
    }
    for h in &report.handoffs {
        let mut a = vec![
            string("baton.handoff.from", &h.from),
            string("baton.handoff.to", &h.to),
            string("baton.handoff.strategy", &h.strategy),
            string("baton.handoff.trigger", &h.trigger),
        ];
        for (k, v) in [
            ("baton.handoff.gap_ms", h.gap_ms),
            ("baton.handoff.trigger_to_wire_ms", h.trigger_to_wire_ms),
            (
                "baton.handoff.announcement_queued_ms",
                h.announcement_queued_ms,
            ),
            ("baton.handoff.heard_at_ms", h.heard_at_ms),
        ] {
            if let Some(v) = v {
                a.push(double(k, v));
            }
        }
        if let Some(n) = &h.note {
            a.push(string("baton.handoff.note", n));
        }
        let start = h.at_ms as f64;
        children.push(Span {
            name: format!("handoff {} → {}", h.from, h.to),
            start_ms: start,
            end_ms: h.heard_at_ms.unwrap_or(start).max(start),
            attributes: a,
            error: h
                .gap_ms
                .is_none()
                .then(|| "the new agent was never heard".into()),
        });
    }
    // A call's failure, said by the first `tool_failed` of its id after it (a model may reuse
    // an id in a later session), marks its span.
    let failed = |after: usize, id: &str| {
        report.events[after..].iter().find_map(|e| match e {
            crate::agents::CallEvent::ToolFailed { call_id, error, .. } if call_id == id => {
                Some(error.clone())
            }
            _ => None,
        })
    };
    for (i, e) in report.events.iter().enumerate() {
        if let crate::agents::CallEvent::ToolCalled {
            agent_id,
            tool_name,
            call_id,
            turn,
            allowed,
            error,
            at_ms,
            ..
        } = e
        {
            children.push(Span {
                name: format!("tool {tool_name}"),
                start_ms: *at_ms as f64,
                end_ms: *at_ms as f64,
                attributes: vec![
                    string("baton.tool.name", tool_name),
                    string("baton.tool.call_id", call_id),
                    string("baton.agent", agent_id),
                    int("baton.tool.turn", *turn),
                    boolean("baton.tool.allowed", *allowed),
                ],
                error: error.clone().or_else(|| failed(i + 1, call_id)),
            });
        }
    }
    for r in &report.reconnects {
        let mut a = vec![
            string("baton.reconnect.cause", &r.cause),
            string("baton.reconnect.outcome", &r.outcome),
            int("baton.reconnect.attempts", u64::from(r.attempts)),
            double(
                "baton.reconnect.model_audio_queued_ms",
                r.model_audio_queued_ms,
            ),
            double("baton.reconnect.audio_replayed_ms", r.audio_replayed_ms),
            double("baton.reconnect.audio_lost_ms", r.audio_lost_ms),
        ];
        if let Some(g) = r.gap_ms {
            a.push(double("baton.reconnect.gap_ms", g));
        }
        children.push(Span {
            name: format!("reconnect ({})", r.cause),
            start_ms: r.at_ms,
            end_ms: r.at_ms + r.gap_ms.unwrap_or(0.0),
            attributes: a,
            error: (r.outcome == "failed").then(|| "the call could not go on".into()),
        });
    }

    let root_id = ids.span(0);
    let span_json = |s: &Span, id: String, parent: Option<&str>| {
        let mut v = json!({
            "traceId": ids.trace(),
            "spanId": id,
            "name": s.name,
            "kind": if parent.is_none() { 2 } else { 1 },
            "startTimeUnixNano": at(s.start_ms),
            "endTimeUnixNano": at(s.end_ms.max(s.start_ms)),
            "attributes": s.attributes,
            "status": match &s.error {
                Some(m) => json!({"code": 2, "message": m}),
                None => json!({"code": 1}),
            },
        });
        if let Some(p) = parent {
            v["parentSpanId"] = json!(p);
        }
        v
    };
    let mut spans = vec![span_json(
        &Span {
            name: "call".into(),
            start_ms: 0.0,
            end_ms: length_ms,
            attributes: root,
            error: None,
        },
        root_id.clone(),
        None,
    )];
    spans.extend(
        children
            .iter()
            .enumerate()
            .map(|(i, s)| span_json(s, ids.span(i as u64 + 1), Some(&root_id))),
    );
    json!({
        "resourceSpans": [{
            "resource": {"attributes": [
                string("service.name", service),
                string("service.version", env!("CARGO_PKG_VERSION")),
            ]},
            "scopeSpans": [{
                "scope": {"name": "baton", "version": env!("CARGO_PKG_VERSION")},
                "spans": spans,
            }],
        }]
    })
}

/// The OTLP/JSON request's spans, flattened (what a collector receives), for checks.
pub fn spans_of(body: &Value) -> Vec<&Value> {
    body["resourceSpans"]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|r| r["scopeSpans"].as_array().into_iter().flatten())
        .flat_map(|s| s["spans"].as_array().into_iter().flatten())
        .collect()
}

/// A span attribute's value as JSON (`stringValue` as a string, `intValue` as a number, …).
pub fn attribute<'a>(span: &'a Value, key: &str) -> Option<&'a Value> {
    let v = span["attributes"]
        .as_array()?
        .iter()
        .find(|a| a["key"] == key)?;
    let value = &v["value"];
    ["stringValue", "intValue", "doubleValue", "boolValue"]
        .iter()
        .find_map(|k| value.get(*k))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::metrics::{HandoffRecord, ReconnectRecord, TurnRecord};

    #[test]
    fn a_call_is_one_trace_with_a_span_per_turn_handoff_tool_call_and_reconnect() {
        let report = CallReport {
            turns: vec![TurnRecord {
                index: 1,
                caller_start_ms: 100.0,
                caller_end_ms: 900.0,
                agent_start_ms: Some(1720.0),
                agent_end_ms: Some(3000.0),
                first_audio_ms: Some(820.0),
                agent: "advisor".into(),
                ..Default::default()
            }],
            first_audio_ms: vec![820.0],
            handoffs: vec![HandoffRecord {
                from: "advisor".into(),
                to: "schemes".into(),
                strategy: "context_update".into(),
                trigger: "tool_call".into(),
                gap_ms: Some(0.0),
                heard_at_ms: Some(4200.0),
                at_ms: 3900,
                ..Default::default()
            }],
            reconnects: vec![ReconnectRecord {
                cause: "go_away".into(),
                outcome: "resumed".into(),
                attempts: 1,
                at_ms: 5000.0,
                gap_ms: Some(40.0),
                ..Default::default()
            }],
            frames_played: 500,
            end_reason: "caller hung up".into(),
            ..Default::default()
        };
        let ended = UNIX_EPOCH + Duration::from_secs(1_000_000);
        let body = call_trace(&report, "c1", "baton", ended, &Ids::from_seed([7; 24]));
        let spans = spans_of(&body);
        let names: Vec<&str> = spans.iter().filter_map(|s| s["name"].as_str()).collect();
        assert_eq!(
            names,
            [
                "call",
                "turn 1",
                "handoff advisor → schemes",
                "reconnect (go_away)"
            ]
        );
        let trace = spans[0]["traceId"].as_str().unwrap();
        assert_eq!(trace.len(), 32);
        let root = spans[0]["spanId"].as_str().unwrap();
        for s in &spans[1..] {
            assert_eq!(s["traceId"], trace);
            assert_eq!(s["parentSpanId"], root);
            assert_ne!(s["spanId"], root);
        }
        // Times: the call started 10 s (500 ticks) before it ended; the turn at +100 ms.
        let ns = |s: &Value, k: &str| s[k].as_str().unwrap().parse::<u128>().unwrap();
        assert_eq!(ns(spans[0], "startTimeUnixNano"), 999_990 * 1_000_000_000);
        assert_eq!(ns(spans[0], "endTimeUnixNano"), 1_000_000 * 1_000_000_000);
        assert_eq!(
            ns(spans[1], "startTimeUnixNano") - ns(spans[0], "startTimeUnixNano"),
            100_000_000
        );
        assert_eq!(
            attribute(spans[1], "baton.turn.first_audio_ms"),
            Some(&json!(820.0))
        );
        assert_eq!(
            attribute(spans[2], "baton.handoff.gap_ms"),
            Some(&json!(0.0))
        );
        assert_eq!(
            attribute(spans[3], "baton.reconnect.gap_ms"),
            Some(&json!(40.0))
        );
        assert_eq!(attribute(spans[0], "baton.call.turns"), Some(&json!("1")));
        assert_eq!(
            attribute(spans[0], "baton.first_audio_ms.p50"),
            Some(&json!(820.0))
        );
    }

    #[test]
    fn endpoints() {
        assert_eq!(traces_url("http://h:4318"), "http://h:4318/v1/traces");
        assert_eq!(traces_url("http://h:4318/"), "http://h:4318/v1/traces");
        assert_eq!(traces_url("http://h/v1/traces"), "http://h/v1/traces");
        let bad = TracesConfig {
            otlp_endpoint: "127.0.0.1:4318".into(),
            ..Default::default()
        };
        assert!(Exporter::new(&bad).is_err());
        assert!(Exporter::new(&TracesConfig::default()).unwrap().is_none());
        assert_eq!(
            redacted("https://user:pw@h/v1/traces?key=s"),
            "https://h/v1/traces"
        );
    }
}
