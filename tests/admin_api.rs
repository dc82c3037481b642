//! The admin API against a running daemon (store on SQLite, the seed 000 agent set, a
//! Twilio-protocol caller over loopback): every endpoint, an operator's activation performing a
//! gapless handoff on a live call, and the OpenAPI document against the routes.
//!
//! Every request carries `Authorization: Bearer $BATON_ADMIN_TOKEN` when that variable is set,
//! so the same tests run once the admin routes sit behind a token.

use crate::support;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use baton::leg::twilio::caller::{self, CallerOptions};
use baton::server::admin::{OPENAPI, ROUTES};
use serde_json::{Value, json};
use support::{Daemon, ROOT};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// One HTTP/1.1 request (connection closed after it); the status and the JSON body (Null if none).
async fn http(addr: SocketAddr, method: &str, path: &str, body: Option<&str>) -> (u16, Value) {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let body = body.unwrap_or("");
    let auth = std::env::var("BATON_ADMIN_TOKEN")
        .map(|t| format!("Authorization: Bearer {t}\r\n"))
        .unwrap_or_default();
    let req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n{auth}\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    let text = String::from_utf8_lossy(&out);
    let status: u16 = text
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    (status, serde_json::from_str(body).unwrap_or(Value::Null))
}

fn config(db: &str, rec: &str) -> String {
    format!(
        "[server]\nlisten = \"127.0.0.1:0\"\ndrain_timeout_s = 1\n\
         [model]\nbackend = \"mock\"\nscenario = \"../audio-fixtures/scenarios/seed000.toml\"\n\
         [agents]\nset = \"agents/financial.toml\"\n\
         [store]\nurl = \"sqlite://{db}\"\nrecordings = \"{rec}\"\n\
         [limits]\nmax_calls = 10\n"
    )
}

async fn until<T>(what: &str, mut f: impl AsyncFnMut() -> Option<T>) -> T {
    for _ in 0..300 {
        if let Some(v) = f().await {
            return v;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_endpoint_and_an_operator_handoff_on_a_live_call() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("baton.db");
    let rec = dir.path().join("rec");
    let d = Daemon::start(&config(
        &db.display().to_string(),
        &rec.display().to_string(),
    ))
    .await;
    let a = d.addr;
    until("the store", async || d.app.store.get().map(|_| ())).await;

    // Agents.
    let (code, v) = http(a, "GET", "/admin/agents", None).await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["set"], "financial");
    let ids: Vec<&str> = v["agents"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|x| x["id"].as_str())
        .collect();
    assert_eq!(ids, ["advisor", "schemes"]);
    let (code, v) = http(a, "GET", "/admin/agents/Ravi", None).await;
    assert_eq!(
        (code, v["id"].as_str()),
        (200, Some("schemes")),
        "by name too"
    );
    let (code, v) = http(a, "GET", "/admin/agents/nobody", None).await;
    assert_eq!(code, 404);
    assert!(v["error"].as_str().unwrap().contains("nobody"));
    let (code, v) = http(a, "GET", "/admin/calls", None).await;
    assert_eq!((code, v), (200, json!({"calls": []})));

    // A caller: seed 000's first turn and Asha's answer, then quiet.
    let wav = baton::audio::wav::read(
        &Path::new(ROOT).join("audio-fixtures/clips/seed000/caller_conversation.wav"),
    )
    .unwrap();
    let mut opts =
        CallerOptions::from_pcm(&wav.samples[..16000 * 15 / 2], 16000, "seed000").unwrap();
    opts.custom_parameters
        .insert("From".into(), "+15550123".into());
    let url = d.twilio_url();
    let dial = tokio::spawn(async move { caller::dial(&url, opts).await });

    // A call is listed the moment its stream starts; its steering (caller, agent set, agents)
    // once it runs, after the model session is open. Under load that can take a while, so wait
    // for the run rather than read a call that is listed but not yet running.
    let call = until("the live call, running", async || {
        let (_, v) = http(a, "GET", "/admin/calls", None).await;
        let c = &v["calls"][0];
        c["agent_set"]
            .is_string()
            .then(|| c["id"].as_str().map(str::to_owned))?
    })
    .await;
    let (code, v) = http(a, "GET", &format!("/admin/calls/{call}"), None).await;
    assert_eq!(code, 200);
    assert_eq!(v["live"], true);
    assert_eq!(v["call"]["caller"], "+15550123");
    let live_start = v["call"]["started_at"].clone();
    assert!(live_start.as_i64().is_some(), "{v}");
    // GET /calls lists it with the fields its OpenAPI entry names, and the same start.
    let (code, list) = http(a, "GET", "/calls", None).await;
    assert_eq!(code, 200, "{list}");
    let listed = &list[0];
    for field in [
        "id",
        "leg",
        "started_unix_ms",
        "duration_ms",
        "events",
        "instance",
    ] {
        assert!(!listed[field].is_null(), "{field}: {list}");
    }
    assert_eq!(
        (&listed["id"], &listed["started_unix_ms"]),
        (&json!(call), &live_start)
    );
    assert_eq!(v["call"]["active_agents"], json!(["advisor"]));
    let (code, v) = http(
        a,
        "POST",
        &format!("/admin/calls/{call}/agents/schemes/deactivate"),
        None,
    )
    .await;
    assert_eq!(code, 409, "not active yet: {v}");
    let (code, _) = http(
        a,
        "POST",
        &format!("/admin/calls/{call}/agents/nobody/activate"),
        None,
    )
    .await;
    assert_eq!(code, 404);
    let (code, _) = http(
        a,
        "POST",
        "/admin/calls/call_x/agents/schemes/activate",
        None,
    )
    .await;
    assert_eq!(code, 404);

    // Once Asha's first answer is generated (it still plays), the operator brings Ravi in.
    until("Asha's first line", async || {
        let (_, v) = http(a, "GET", &format!("/admin/calls/{call}/transcript"), None).await;
        v["lines"]
            .as_array()?
            .iter()
            .any(|l| l["role"] == "agent" && l["agent"] == "advisor")
            .then_some(())
    })
    .await;
    let (code, v) = http(
        a,
        "POST",
        &format!("/admin/calls/{call}/agents/schemes/activate"),
        None,
    )
    .await;
    assert_eq!(code, 202, "{v}");
    assert_eq!(v["status"], "accepted");
    // The view follows the call's events (off the audio path): Ravi joins.
    let v = until("Ravi in the live view", async || {
        let (code, v) = http(a, "GET", &format!("/admin/calls/{call}/history"), None).await;
        (code == 200 && v["active_agents"] == json!(["schemes", "advisor"])).then_some(v)
    })
    .await;
    assert_eq!(v["live"], true);
    assert_eq!(v["history"][1]["agent"], "schemes", "{v}");
    // Asha, still active, has spoken: her messages count while she is active.
    assert_eq!(v["history"][0]["agent"], "advisor", "{v}");
    assert!(v["history"][0]["message_count"].as_i64() >= Some(1), "{v}");
    let (code, v) = http(a, "GET", &format!("/admin/calls/{call}/figures"), None).await;
    assert_eq!(code, 200);
    assert_eq!(v["handoff_events"][0]["trigger"], "manual", "{v}");
    // The store has the call (started, not ended): it is not listed as ended.
    let s = d.app.store.get().unwrap();
    assert!(s.writer.flush(Duration::from_secs(10)).await);
    let (code, v) = http(a, "GET", "/admin/calls?state=ended", None).await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["calls"], json!([]), "a live call is not an ended one");
    for bad in ["limit=0", "limit=1001", "limit=abc"] {
        let (code, v) = http(a, "GET", &format!("/admin/calls?state=ended&{bad}"), None).await;
        assert_eq!(code, 400, "{bad}: {v}");
        assert!(
            v["error"].as_str().is_some_and(|e| e.contains("limit")),
            "{bad}: {v}"
        );
    }

    let heard = dial.await.unwrap().unwrap();
    assert!(heard.played_ms > 3000, "{heard:?}");
    until("the call's end", async || {
        d.app.calls.get(&call).is_none().then_some(())
    })
    .await;
    let s = d.app.store.get().unwrap();
    assert!(s.writer.flush(Duration::from_secs(10)).await);

    // Ended: from the store.
    let (code, v) = http(a, "GET", "/admin/calls?state=ended", None).await;
    assert_eq!(code, 200);
    assert_eq!(v["calls"][0]["id"], call.as_str());
    let wav = v["calls"][0]["recording"].as_str().unwrap().to_owned();
    let r = hound::WavReader::open(&wav).unwrap();
    assert_eq!(
        (r.spec().channels, r.spec().sample_rate),
        (2, 8000),
        "caller | agent"
    );
    assert!(r.duration() > 8000 * 7, "{} samples", r.duration());
    let (code, v) = http(a, "GET", "/admin/calls?state=sideways", None).await;
    assert_eq!(code, 400, "{v}");
    let (code, v) = http(a, "GET", &format!("/admin/calls/{call}"), None).await;
    assert_eq!((code, &v["live"]), (200, &json!(false)));
    assert_eq!(
        v["call"]["started_at"], live_start,
        "one start time, live and stored"
    );
    let (code, v) = http(a, "GET", &format!("/admin/calls/{call}/figures"), None).await;
    assert_eq!(code, 200);
    let h = &v["handoffs"][0];
    assert_eq!(
        (h["from"].as_str(), h["to"].as_str(), h["trigger"].as_str()),
        (Some("advisor"), Some("schemes"), Some("manual"))
    );
    assert_eq!(h["gap_ms"], 0.0, "the operator's handoff is gapless: {v}");
    assert_eq!(v["figures"]["underruns"], 0);
    let (code, v) = http(a, "GET", &format!("/admin/calls/{call}/transcript"), None).await;
    assert_eq!(code, 200);
    let lines = v["lines"].as_array().unwrap().clone();
    assert!(lines.len() >= 2, "{v}");
    let (code, v) = http(a, "GET", &format!("/admin/calls/{call}/history"), None).await;
    assert_eq!(code, 200);
    assert_eq!(v["history"][1]["agent"], "schemes", "{v}");
    // Each activation's message count is its agent's lines (one activation each here).
    for h in v["history"].as_array().unwrap() {
        let said = lines
            .iter()
            .filter(|l| l["role"] == "agent" && l["agent"] == h["agent"])
            .count();
        assert_eq!(
            h["message_count"].as_u64(),
            Some(said as u64),
            "{h} of {lines:?}"
        );
    }
    let (code, _) = http(a, "GET", "/admin/calls/call_nope/transcript", None).await;
    assert_eq!(code, 404);
    // Commands: an ended call is gone (410, with why it ended), an unknown one not found.
    for path in [
        "agents/advisor/activate",
        "agents/schemes/deactivate",
        "hangup",
    ] {
        let (code, v) = http(a, "POST", &format!("/admin/calls/{call}/{path}"), None).await;
        assert_eq!(code, 410, "{path}: {v}");
        let e = v["error"].as_str().unwrap();
        assert!(e.contains("has ended ("), "{e}");
        let (code, v) = http(a, "POST", &format!("/admin/calls/call_nope/{path}"), None).await;
        assert_eq!(code, 404, "{path}: {v}");
    }

    // The caller's contexts: Ravi's, paused when the call ended.
    let (code, v) = http(a, "GET", "/admin/callers/+15550123/contexts", None).await;
    assert_eq!(code, 200, "{v}");
    let ctx = &v["contexts"][0];
    assert_eq!(ctx["agent"], "schemes");
    assert_eq!(ctx["status"], "paused");
    let id = ctx["id"].as_str().unwrap().to_owned();
    let (code, v) = http(a, "GET", &format!("/admin/contexts/{id}"), None).await;
    assert_eq!((code, &v["id"]), (200, &json!(id)));
    let patch = r#"{"status": "completed", "context_data": {"note": "closed by an operator"}}"#;
    let (code, v) = http(a, "PATCH", &format!("/admin/contexts/{id}"), Some(patch)).await;
    assert_eq!(code, 200, "{v}");
    assert_eq!(v["status"], "completed");
    assert_eq!(v["context_data"]["note"], "closed by an operator");
    let (code, v) = http(
        a,
        "PATCH",
        &format!("/admin/contexts/{id}"),
        Some(r#"{"status": "gone"}"#),
    )
    .await;
    assert_eq!(code, 400, "{v}");
    let (code, v) = http(
        a,
        "PATCH",
        &format!("/admin/contexts/{id}"),
        Some(r#"{"context_data": "a string"}"#),
    )
    .await;
    assert_eq!(code, 400, "{v}");
    assert!(
        v["error"].as_str().unwrap().contains("a JSON object"),
        "{v}"
    );
    let (code, _) = http(a, "GET", "/admin/contexts/ctx_nope", None).await;
    assert_eq!(code, 404);
    let (code, v) = http(a, "GET", "/admin/callers/+19990000/contexts", None).await;
    assert_eq!((code, v["contexts"].clone()), (200, json!([])));
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_store_the_store_endpoints_say_so() {
    let d = Daemon::start(&support::mock_config("", "")).await;
    let (code, v) = http(d.addr, "GET", "/admin/callers/+1/contexts", None).await;
    assert_eq!(code, 503);
    assert!(v["error"].as_str().unwrap().contains("[store]"));
    let (code, _) = http(d.addr, "GET", "/admin/calls?state=ended", None).await;
    assert_eq!(code, 503);
    let (code, v) = http(d.addr, "GET", "/admin/agents", None).await;
    assert_eq!((code, v["agents"].clone()), (200, json!([])));
    let (code, _) = http(d.addr, "GET", "/admin/calls/x/figures", None).await;
    assert_eq!(code, 404);
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_store_does_not_stop_the_daemon() {
    let cfg = format!(
        "{}[store]\nurl = \"postgres://baton@127.0.0.1:1/baton\"\n",
        support::mock_config("", "")
    );
    let d = Daemon::start(&cfg).await;
    let (code, v) = http(d.addr, "GET", "/healthz", None).await;
    assert_eq!((code, &v["status"]), (200, &json!("ok")), "{v}");
    let (code, _) = http(d.addr, "GET", "/admin/callers/+1/contexts", None).await;
    assert_eq!(code, 503, "no store yet");
    let opts = CallerOptions::from_pcm(&vec![0i16; 8000], 8000, "silence").unwrap();
    let r = caller::dial(&d.twilio_url(), opts).await.unwrap();
    assert!(r.frames_sent > 0, "a call runs without the store");
    d.stop().await;
}

/// `(method, path)` of every operation in the document.
fn documented(doc: &Value) -> BTreeSet<(String, String)> {
    let mut out = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (m, _) in item.as_object().unwrap() {
            out.insert((m.clone(), path.clone()));
        }
    }
    out
}

fn resolve<'a>(doc: &'a Value, r: &str) -> Option<&'a Value> {
    doc.pointer(r.strip_prefix('#')?)
}

fn refs(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                match (k.as_str(), x) {
                    ("$ref", Value::String(s)) => out.push(s.clone()),
                    _ => refs(x, out),
                }
            }
        }
        Value::Array(a) => a.iter().for_each(|x| refs(x, out)),
        _ => {}
    }
}

#[test]
fn the_openapi_document_is_valid_and_matches_the_routes() {
    let doc: Value = serde_json::from_str(OPENAPI).expect("openapi.json is JSON");
    assert!(doc["openapi"].as_str().unwrap().starts_with("3.1"));
    assert!(doc["info"]["title"].is_string() && doc["info"]["version"].is_string());
    let routes: BTreeSet<(String, String)> = ROUTES
        .iter()
        .map(|(m, p)| ((*m).to_owned(), (*p).to_owned()))
        .collect();
    assert_eq!(documented(&doc), routes, "document and routes differ");
    let mut ids = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        let in_path: BTreeSet<String> = path
            .split('/')
            .filter_map(|s| s.strip_prefix('{')?.strip_suffix('}'))
            .map(str::to_owned)
            .collect();
        for (m, op) in item.as_object().unwrap() {
            assert!(ids.insert(op["operationId"].as_str().unwrap().to_owned()));
            let declared: BTreeSet<String> = op["parameters"]
                .as_array()
                .map(|ps| {
                    ps.iter()
                        .filter(|p| p["in"] == "path")
                        .map(|p| {
                            assert_eq!(p["required"], true, "{m} {path}");
                            p["name"].as_str().unwrap().to_owned()
                        })
                        .collect()
                })
                .unwrap_or_default();
            assert_eq!(declared, in_path, "{m} {path}: path parameters");
            let codes: Vec<&String> = op["responses"].as_object().unwrap().keys().collect();
            assert!(codes.iter().any(|c| c.starts_with('2')), "{m} {path}");
            for c in codes {
                assert!(
                    op["responses"][c]["description"].is_string(),
                    "{m} {path} {c}"
                );
            }
        }
    }
    let mut all = Vec::new();
    refs(&doc, &mut all);
    assert!(!all.is_empty());
    for r in all {
        assert!(resolve(&doc, &r).is_some(), "unresolved $ref {r}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_documented_route_is_served() {
    let d = Daemon::start(&support::mock_config("", "")).await;
    let (code, v) = http(d.addr, "GET", "/openapi.json", None).await;
    assert_eq!(code, 200);
    assert_eq!(v, serde_json::from_str::<Value>(OPENAPI).unwrap());
    // The drain ends the daemon: asked for last, below.
    for (m, p) in ROUTES.iter().filter(|(_, p)| *p != "/admin/drain") {
        let path = p
            .replace("{call}", "call_x")
            .replace("{agent}", "schemes")
            .replace("{caller}", "+1")
            .replace("{context}", "ctx_x");
        let body = (*m == "patch").then_some("{}");
        let (code, v) = http(d.addr, &m.to_uppercase(), &path, body).await;
        // An unrouted path is the router's 404 ("no route …") and a wrong method 405; every
        // admin answer is JSON.
        let unrouted = |v: &Value| {
            v["error"]
                .as_str()
                .is_some_and(|e| e.starts_with("no route"))
        };
        assert!(
            code != 405 && !v.is_null() && !unrouted(&v),
            "{m} {p}: {code} {v}"
        );
    }
    let (code, v) = http(d.addr, "GET", "/admin/nothing", None).await;
    assert_eq!(code, 404, "{v}");
    assert!(
        v["error"]
            .as_str()
            .is_some_and(|e| e.starts_with("no route GET /admin/nothing")),
        "the check above can tell: {v}"
    );
    let (code, v) = http(d.addr, "POST", "/admin/drain", None).await;
    assert_eq!((code, &v["status"]), (202, &json!("draining")), "{v}");
    d.stop().await;
}
