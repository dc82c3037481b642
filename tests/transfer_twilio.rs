//! The Twilio blind-transfer client (`baton::transfer::twilio`) against a local endpoint shaped
//! like Twilio's REST API: the request is the documented call update (POST to the call's
//! `.json` resource, a form body with `Twiml=<Response><Dial>…`, basic auth with the account SID
//! and auth token, JSON accepted), Twilio's error bodies become typed errors, garbage answers
//! clear ones, and the auth token appears in no error, `Debug` output or log line, even at
//! trace level. The request is also checked against the one Twilio's official Python library
//! sends, recorded in `tests/data/twilio/call_update_vector.json`. And end to end: a Twilio
//! caller's agent (`config/agents/front_desk.toml`) hands them to a person; once the
//! announcement has played, `baton serve` redirects the call through this endpoint.

use crate::support;

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use base64::Engine;

use baton::secret::Secret;
use baton::transfer::twilio::{DialOptions, RestSettings, TwilioError, TwilioRest};
use baton::transfer::{Destination, Failure};

const ACCOUNT: &str = "AC0123456789abcdef0123456789abcdef";
const TOKEN: &str = "tok_SENTINEL_7d1e+/=";
const CALL_OK: &str = "CA00000000000000000000000000000001";
const CALL_GONE: &str = "CA00000000000000000000000000000404";
const CALL_HTML: &str = "CA00000000000000000000000000000502";
const CALL_GARBAGE: &str = "CA000000000000000000000000000000ff";
const CALL_SLOW: &str = "CA000000000000000000000000000000aa";

/// One request as the endpoint saw it.
#[derive(Clone, Debug)]
struct Seen {
    account: String,
    resource: String,
    authorization: Option<String>,
    content_type: Option<String>,
    accept: Option<String>,
    form: Vec<(String, String)>,
}

type Log = Arc<Mutex<Vec<Seen>>>;

fn twilio_error(status: StatusCode, code: u32, message: &str) -> Response {
    let body = serde_json::json!({
        "code": code,
        "message": message,
        "more_info": format!("https://www.twilio.com/docs/errors/{code}"),
        "status": status.as_u16(),
    });
    (
        status,
        [(header::CONTENT_TYPE, "application/json")],
        body.to_string(),
    )
        .into_response()
}

async fn update(
    State(log): State<Log>,
    Path((account, resource)): Path<(String, String)>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let h = |name: header::HeaderName| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let seen = Seen {
        account: account.clone(),
        resource: resource.clone(),
        authorization: h(header::AUTHORIZATION),
        content_type: h(header::CONTENT_TYPE),
        accept: h(header::ACCEPT),
        form: url::form_urlencoded::parse(&body).into_owned().collect(),
    };
    log.lock().unwrap().push(seen.clone());
    let expected = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{ACCOUNT}:{TOKEN}"))
    );
    if seen.authorization.as_deref() != Some(expected.as_str()) || account != ACCOUNT {
        return twilio_error(StatusCode::UNAUTHORIZED, 20003, "Authenticate");
    }
    let Some(call) = resource.strip_suffix(".json") else {
        return twilio_error(
            StatusCode::NOT_FOUND,
            20404,
            "The requested resource was not found",
        );
    };
    match call {
        CALL_GONE => twilio_error(
            StatusCode::NOT_FOUND,
            20404,
            &format!(
                "The requested resource /2010-04-01/Accounts/{ACCOUNT}/Calls/{call}.json was not found"
            ),
        ),
        CALL_HTML => (
            StatusCode::BAD_GATEWAY,
            "<html><body>Bad gateway</body></html>",
        )
            .into_response(),
        CALL_GARBAGE => (StatusCode::OK, "{\"sid\": \"CA0").into_response(),
        CALL_SLOW => {
            tokio::time::sleep(Duration::from_secs(30)).await;
            StatusCode::OK.into_response()
        }
        _ => {
            let body = serde_json::json!({
                "sid": call,
                "account_sid": ACCOUNT,
                "status": "in-progress",
                "direction": "inbound",
                "api_version": "2010-04-01",
                "uri": format!("/2010-04-01/Accounts/{ACCOUNT}/Calls/{call}.json"),
            });
            (
                StatusCode::OK,
                [(header::CONTENT_TYPE, "application/json")],
                body.to_string(),
            )
                .into_response()
        }
    }
}

async fn endpoint() -> (String, Log) {
    let log = Log::default();
    let app = axum::Router::new()
        .route(
            "/2010-04-01/Accounts/{account}/Calls/{resource}",
            post(update),
        )
        .with_state(log.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}"), log)
}

fn client(base: &str, token: &str, timeout: Duration) -> TwilioRest {
    TwilioRest::new(RestSettings {
        base_url: base.into(),
        account_sid: ACCOUNT.into(),
        auth_token: Secret::new(token),
        timeout,
    })
    .unwrap()
}

/// Log lines of everything this thread runs, at trace level.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn assert_no_token(what: &str, text: &str) {
    let basic = base64::engine::general_purpose::STANDARD.encode(format!("{ACCOUNT}:{TOKEN}"));
    for form in ["SENTINEL", TOKEN, &basic[basic.len() - 20..]] {
        assert!(
            !text.contains(form),
            "{what} holds the token ({form:?}): {text}"
        );
    }
}

#[tokio::test(flavor = "current_thread")]
async fn redirect_to_dial_as_twilio_documents_it() {
    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let (base, log) = endpoint().await;
    let mut errors = Vec::new();
    let rest = client(&base, TOKEN, Duration::from_secs(5));
    let options = DialOptions {
        ring_timeout: Some(Duration::from_secs(25)),
        caller_id: Some("+15550100199".into()),
    };

    // A number.
    let updated = rest
        .redirect_to_dial(
            CALL_OK,
            &Destination::Number("+442079460018".into()),
            &options,
        )
        .await
        .unwrap();
    assert_eq!(
        (updated.sid.as_str(), updated.status.as_str()),
        (CALL_OK, "in-progress")
    );
    let seen = log.lock().unwrap().last().cloned().unwrap();
    assert_eq!(seen.account, ACCOUNT);
    assert_eq!(seen.resource, format!("{CALL_OK}.json"));
    assert_eq!(
        seen.content_type.as_deref(),
        Some("application/x-www-form-urlencoded")
    );
    assert_eq!(seen.accept.as_deref(), Some("application/json"));
    assert!(seen.authorization.as_deref().unwrap().starts_with("Basic "));
    assert_eq!(
        seen.form,
        vec![(
            "Twiml".to_owned(),
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Response><Dial timeout=\"25\" \
             callerId=\"+15550100199\"><Number>+442079460018</Number></Dial></Response>"
                .to_owned()
        )]
    );
    let twiml = roxmltree::Document::parse(&seen.form[0].1).unwrap();
    let dial = twiml.root_element().first_element_child().unwrap();
    assert_eq!(dial.tag_name().name(), "Dial");

    // A SIP URI, with a character that needs escaping in XML and in the form.
    rest.redirect_to_dial(
        CALL_OK,
        &Destination::Sip("sip:priya@pbx.example.com;x-ref=a&b".into()),
        &DialOptions::default(),
    )
    .await
    .unwrap();
    let seen = log.lock().unwrap().last().cloned().unwrap();
    assert_eq!(
        seen.form[0].1,
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Response><Dial>\
         <Sip>sip:priya@pbx.example.com;x-ref=a&amp;b</Sip></Dial></Response>"
    );

    // Twilio's errors, typed.
    let e = rest
        .redirect_to_dial(
            CALL_GONE,
            &Destination::Number("+442079460018".into()),
            &options,
        )
        .await
        .unwrap_err();
    errors.push(format!("{e} {e:?}"));
    assert!(
        matches!(&e, TwilioError::Refused { http_status: 404, code: 20404, message, .. } if message.contains("was not found")),
        "{e:?}"
    );
    assert!(matches!(
        e.failure(),
        Failure::Rest {
            http_status: Some(404),
            code: Some(20404),
            ..
        }
    ));
    let wrong = client(&base, "not-the-token", Duration::from_secs(5));
    let e = wrong
        .redirect_to_dial(
            CALL_OK,
            &Destination::Number("+442079460018".into()),
            &options,
        )
        .await
        .unwrap_err();
    errors.push(format!("{e} {e:?}"));
    assert!(
        matches!(
            e,
            TwilioError::Refused {
                http_status: 401,
                code: 20003,
                ..
            }
        ),
        "{e:?}"
    );

    // Garbage, named.
    let e = rest
        .redirect_to_dial(
            CALL_HTML,
            &Destination::Number("+442079460018".into()),
            &options,
        )
        .await
        .unwrap_err();
    errors.push(format!("{e} {e:?}"));
    assert_eq!(
        e.to_string(),
        "Twilio answered HTTP 502 without its JSON error body: \"<html><body>Bad gateway</body></html>\""
    );
    let e = rest
        .redirect_to_dial(
            CALL_GARBAGE,
            &Destination::Number("+442079460018".into()),
            &options,
        )
        .await
        .unwrap_err();
    errors.push(format!("{e} {e:?}"));
    assert!(
        e.to_string()
            .starts_with("Twilio's answer (HTTP 200) is not a call resource: EOF"),
        "{e}"
    );
    let e = rest
        .redirect_to_dial(
            "CA123/../../x",
            &Destination::Number("+442079460018".into()),
            &options,
        )
        .await
        .unwrap_err();
    errors.push(format!("{e} {e:?}"));
    assert!(matches!(e, TwilioError::BadCallSid(_)), "{e:?}");
    let requests = log.lock().unwrap().len();
    assert_eq!(requests, 6, "a bad call SID is refused before any request");

    // Slow and absent endpoints.
    let impatient = client(&base, TOKEN, Duration::from_millis(300));
    let e = impatient
        .redirect_to_dial(
            CALL_SLOW,
            &Destination::Number("+442079460018".into()),
            &options,
        )
        .await
        .unwrap_err();
    errors.push(format!("{e} {e:?}"));
    assert!(matches!(e, TwilioError::Unreachable { .. }), "{e:?}");
    let closed = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let e = client(&format!("http://{closed}"), TOKEN, Duration::from_secs(5))
        .redirect_to_dial(
            CALL_OK,
            &Destination::Number("+442079460018".into()),
            &options,
        )
        .await
        .unwrap_err();
    errors.push(format!("{e} {e:?}"));
    assert!(
        e.to_string()
            .starts_with(&format!("the Twilio API at http://{closed} did not answer")),
        "{e}"
    );

    // The token is nowhere but in the header.
    assert_no_token("Debug", &format!("{rest:?}"));
    assert_eq!(errors.len(), 7);
    for e in &errors {
        assert_no_token("an error", e);
    }
    let logs = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    assert!(!logs.is_empty(), "trace logging was captured");
    assert_no_token("the trace log", &logs);
}

/// A blind transfer on a Twilio leg, the state machine driven the way the call will drive it:
/// the announcement plays out, the machine asks for the redirect, the client carries it out and
/// its answer goes back in as the outcome.
#[tokio::test(flavor = "current_thread")]
async fn a_blind_transfer_driven_through_the_client() {
    use baton::transfer::{Action, BlindVia, Input, Outcome, Plan, Settings, Transfer};
    use std::time::Instant;

    let (base, log) = endpoint().await;
    let rest = client(&base, TOKEN, Duration::from_secs(5));
    for (call, expect) in [(CALL_OK, "transferred"), (CALL_GONE, "failed")] {
        let t0 = Instant::now();
        let target = Destination::Number("+442079460018".into());
        let mut t = Transfer::new(
            Plan::Blind(BlindVia::TwilioRedirect),
            target,
            Settings::default(),
            t0,
        );
        assert_eq!(
            t.poll_action(),
            None,
            "nothing before the announcement ends"
        );
        t.handle(Input::AnnouncementPlayed, t0 + Duration::from_millis(2_000));
        let Some(Action::Redirect { target }) = t.poll_action() else {
            panic!("no redirect")
        };
        let input = match rest
            .redirect_to_dial(call, &target, &DialOptions::default())
            .await
        {
            Ok(_) => Input::Redirected,
            Err(e) => Input::Failed(e.failure()),
        };
        t.handle(input, t0 + Duration::from_millis(2_300));
        let next = t.poll_action().unwrap();
        let outcome = t.outcome().unwrap().clone();
        assert_eq!(outcome.kind(), expect);
        match outcome {
            Outcome::Transferred => assert_eq!(next, Action::LeaveCall),
            Outcome::Failed { failure } => {
                assert!(matches!(
                    failure,
                    Failure::Rest {
                        http_status: Some(404),
                        code: Some(20404),
                        ..
                    }
                ));
                assert!(matches!(next, Action::ReturnToAgent { .. }));
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(log.lock().unwrap().len(), 2);
}

/// baton's redirect is the request Twilio's official Python library sends for
/// `client.calls(sid).update(twiml=...)`, recorded in `tests/data/twilio/call_update_vector.json`
/// by `tests/python/twilio_call_update_vector.py`: same path, headers, auth and form body.
#[tokio::test(flavor = "current_thread")]
async fn the_same_request_as_the_official_sdk() {
    let vector: serde_json::Value =
        serde_json::from_str(include_str!("data/twilio/call_update_vector.json")).unwrap();
    let s = |k: &str| vector[k].as_str().unwrap().to_owned();
    assert_eq!(s("method"), "POST");
    let (base, log) = endpoint().await;
    let rest = TwilioRest::new(RestSettings {
        base_url: base,
        account_sid: s("account_sid"),
        auth_token: Secret::new(s("auth_token")),
        timeout: Duration::from_secs(5),
    })
    .unwrap();
    let options = DialOptions {
        ring_timeout: Some(Duration::from_secs(25)),
        caller_id: Some("+15550100199".into()),
    };
    // The endpoint refuses the vector's token (401): only the request matters here.
    let e = rest
        .redirect_to_dial(
            &s("call_sid"),
            &Destination::Number("+442079460018".into()),
            &options,
        )
        .await
        .unwrap_err();
    assert!(
        matches!(
            e,
            TwilioError::Refused {
                http_status: 401,
                ..
            }
        ),
        "{e:?}"
    );
    let seen = log.lock().unwrap().last().cloned().unwrap();
    assert_eq!(
        format!(
            "/2010-04-01/Accounts/{}/Calls/{}",
            seen.account, seen.resource
        ),
        s("path")
    );
    assert_eq!(
        seen.content_type.as_deref(),
        Some(s("content_type").as_str())
    );
    assert_eq!(seen.accept.as_deref(), Some(s("accept").as_str()));
    assert_eq!(
        seen.authorization.as_deref(),
        Some(s("authorization").as_str())
    );
    let form: Vec<(String, String)> = vector["form"]
        .as_array()
        .unwrap()
        .iter()
        .map(|kv| {
            (
                kv[0].as_str().unwrap().to_owned(),
                kv[1].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(seen.form, form);
}

/// A Twilio caller (call `call_sid`) asking the front-desk agent for a person through
/// `baton serve`, the REST API answered by [`endpoint`]: the caller's report, the call's feed,
/// the requests the endpoint saw, and the daemon.
async fn twilio_agent_call(
    call_sid: &str,
) -> (
    baton::leg::twilio::caller::CallerReport,
    Vec<String>,
    Vec<Seen>,
    support::Daemon,
) {
    use baton::leg::twilio::caller::{self, CallerOptions};
    const VAR: &str = "BATON_TEST_TWILIO_TRANSFER_TOKEN";
    // SAFETY: set (to the same value) before a daemon reads it; no other test reads this
    // variable.
    unsafe { std::env::set_var(VAR, TOKEN) };
    let (base, log) = endpoint().await;
    let config = format!(
        "{}\n[agents]\nset = \"agents/front_desk.toml\"\n[twilio]\nauth_token_env = \"{VAR}\"\ndisable_signature_check = true\nrest_base_url = \"{base}\"\n",
        support::mock_config("tests/data/transfer/human_blind.toml", "")
    );
    let d = support::Daemon::start(&config).await;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let clip = baton::audio::wav::read(&root.join("audio-fixtures/clips/caller_01.wav")).unwrap();
    let mut pcm = vec![0i16; 8000];
    pcm.extend_from_slice(&clip.samples);
    pcm.extend(std::iter::repeat_n(0, 16000 * 10));
    let mut opts = CallerOptions::from_pcm(&pcm, 16000, "asks for a person").unwrap();
    opts.account_sid = ACCOUNT.into();
    opts.call_sid = call_sid.into();
    opts.max_tail = Duration::from_secs(5);
    let feed = async {
        let mut live = None;
        for _ in 0..500 {
            if let Some(c) = d.app.calls.list().first() {
                live = Some(c.clone());
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        let (history, mut rx) = live.expect("the call is listed").subscribe();
        let mut out: Vec<String> = history.iter().map(|l| l.to_string()).collect();
        while !out.iter().any(|l| l.contains("\"call_end\"")) {
            match tokio::time::timeout(Duration::from_secs(30), rx.recv()).await {
                Ok(Ok(l)) => out.push(l.to_string()),
                _ => break,
            }
        }
        out
    };
    let url = d.twilio_url();
    let (report, lines) = tokio::join!(caller::dial(&url, opts), feed);
    let seen = log.lock().unwrap().clone();
    (report.unwrap(), lines, seen, d)
}

/// The daemon's `/metrics` once it holds `line` (polled up to 5 s: a call is counted once its
/// end is recorded).
async fn metrics_with(d: &support::Daemon, line: &str) -> String {
    let mut metrics = String::new();
    for _ in 0..100 {
        metrics = support::http(
            &d.addr,
            "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        )
        .await;
        if metrics.contains(line) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    metrics
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_twilio_callers_agent_hands_them_to_a_person_by_a_rest_redirect() {
    use baton::leg::twilio::caller::CallerEnd;
    let (report, lines, seen, d) = twilio_agent_call(CALL_OK).await;

    // One redirect, as Twilio documents it, for the caller's call.
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].account, ACCOUNT);
    assert_eq!(seen[0].resource, format!("{CALL_OK}.json"));
    let expected = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode(format!("{ACCOUNT}:{TOKEN}"))
    );
    assert_eq!(seen[0].authorization.as_deref(), Some(expected.as_str()));
    let twiml = &seen[0].form.iter().find(|(k, _)| k == "Twiml").unwrap().1;
    assert!(
        twiml.ends_with(
            "<Response><Dial timeout=\"25\"><Sip>sip:ravi@127.0.0.1:5999</Sip></Dial></Response>"
        ),
        "{twiml}"
    );
    // The redirect went once the announcement (2.96 s) had played: baton then left the call.
    assert!(
        matches!(report.end, CallerEnd::ServerClosed { .. }),
        "{:?}",
        report.end
    );
    assert!(
        report.played_ms + 40 >= 2960,
        "the caller heard {} ms of the announcement",
        report.played_ms
    );
    // Typed on the call's feed; the token nowhere in it.
    let events: Vec<serde_json::Value> = lines
        .iter()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let last = events
        .iter()
        .rfind(|e| e["type"] == "transfer")
        .unwrap_or_else(|| panic!("no transfer on the feed: {events:#?}"));
    assert_eq!(last["event"], "finished", "{last}");
    assert_eq!(last["plan"]["blind"], "twilio_redirect", "{last}");
    assert_eq!(last["outcome"]["kind"], "transferred", "{last}");
    assert!(lines.iter().all(|l| !l.contains(TOKEN)));
    // Counted once the call's end is recorded.
    let counted = "baton_transfers_total{plan=\"blind_twilio\",kind=\"transferred\"} 1";
    let metrics = metrics_with(&d, counted).await;
    assert!(metrics.contains(counted), "{counted} in\n{metrics}");
    assert!(!metrics.contains(TOKEN));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_twilio_redirect_leaves_the_caller_with_the_agent() {
    use baton::leg::twilio::caller::CallerEnd;
    // Twilio answers 404 / 20404 (the call is not one of the account's).
    let (report, lines, seen, d) = twilio_agent_call(CALL_GONE).await;
    assert_eq!(seen.len(), 1, "{seen:?}");
    // baton did not leave: the caller hung up at the end of their audio.
    assert_eq!(report.end, CallerEnd::HungUp, "{:?}", report.end);
    let events: Vec<serde_json::Value> = lines
        .iter()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let finished = events
        .iter()
        .position(|e| e["type"] == "transfer" && e["event"] == "finished")
        .unwrap_or_else(|| panic!("no transfer outcome: {events:#?}"));
    let last = &events[finished];
    assert_eq!(last["outcome"]["kind"], "failed", "{last}");
    assert_eq!(last["outcome"]["failure"]["via"], "rest", "{last}");
    assert_eq!(last["outcome"]["failure"]["http_status"], 404, "{last}");
    assert_eq!(last["outcome"]["failure"]["code"], 20404, "{last}");
    // Told why, the agent speaks again.
    assert!(
        events[finished..].iter().any(|e| e["type"] == "transcript"
            && e["role"] == "agent"
            && e["text"] == "Hello, I'm Asha. Start with an emergency fund."),
        "the agent carried on: {events:#?}"
    );
    assert!(lines.iter().all(|l| !l.contains(TOKEN)));
    let counted = "baton_transfers_total{plan=\"blind_twilio\",kind=\"failed\"} 1";
    let metrics = metrics_with(&d, counted).await;
    assert!(metrics.contains(counted), "{counted} in\n{metrics}");
}
