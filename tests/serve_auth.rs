//! Who may use `baton serve`: bearer tokens on the protected routes, `/healthz` open, the Twilio
//! endpoints authenticated by X-Twilio-Signature when it is configured (and by the tokens when it
//! is not), the other telephony bridges by their provider's credential or the tokens, and the
//! start-up refusal to serve a non-loopback address without tokens.

use crate::support;

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use baton::leg::twilio::caller::{self, CallerError, CallerOptions};
use baton::leg::twilio::signature::{self, AuthToken};
use baton::server::auth::ApiTokens;
use support::Daemon;

const TOKEN: &str = "test-api-token-0123456789abcdef";

fn tokens() -> Option<Arc<ApiTokens>> {
    Some(Arc::new(ApiTokens::parse(TOKEN, "TEST_TOKENS").unwrap()))
}

fn get(path: &str, auth: Option<&str>) -> String {
    let auth = auth
        .map(|a| format!("Authorization: {a}\r\n"))
        .unwrap_or_default();
    format!("GET {path} HTTP/1.1\r\nHost: x\r\n{auth}Connection: close\r\n\r\n")
}

fn status(response: &str) -> &str {
    response.get(9..12).unwrap_or("")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_tokens_guard_every_route_but_healthz() {
    let d = Daemon::start_with(&support::mock_config("", ""), |st| st.api_tokens = tokens()).await;
    let missing = support::http(&d.addr, &get("/twiml", None)).await;
    assert_eq!(status(&missing), "401", "{missing}");
    assert!(
        missing.contains("Authorization: Bearer <token>")
            && missing
                .to_ascii_lowercase()
                .contains("www-authenticate: bearer"),
        "{missing}"
    );
    let wrong = support::http(
        &d.addr,
        &get("/twiml", Some("Bearer wrong-token-00000000000")),
    )
    .await;
    assert_eq!(status(&wrong), "401", "{wrong}");
    assert!(wrong.contains("not one of baton's API tokens"), "{wrong}");
    let prefix = &TOKEN[..TOKEN.len() - 1];
    let truncated = support::http(&d.addr, &get("/twiml", Some(&format!("Bearer {prefix}")))).await;
    assert_eq!(status(&truncated), "401", "{truncated}");
    let basic = support::http(&d.addr, &get("/twiml", Some(&format!("Basic {TOKEN}")))).await;
    assert_eq!(status(&basic), "401", "{basic}");

    let right = support::http(&d.addr, &get("/twiml", Some(&format!("Bearer {TOKEN}")))).await;
    assert_eq!(status(&right), "200", "{right}");
    assert!(right.contains("<Stream url="), "{right}");

    let health = support::http(&d.addr, &get("/healthz", None)).await;
    assert_eq!(status(&health), "200", "{health}");

    // Signature checking is off, so the Twilio upgrade is a protected route too.
    let short = CallerOptions::from_pcm(&vec![0i16; 800], 8000, "silence").unwrap();
    let e = caller::dial(&d.twilio_url(), short)
        .await
        .expect_err("no token, no call");
    assert!(matches!(e, CallerError::Refused { status: 401, .. }), "{e}");
    assert_eq!(d.active_calls().await, 0);
    d.stop().await;
}

/// A browser page on an allowed origin can reach `/whip` with a token: its CORS preflight, which
/// a browser sends without credentials, is answered; anything else without the token is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cors_preflight_reaches_whip_without_the_token() {
    let config =
        support::mock_config("", "") + "[webrtc]\nallow_origins = [\"https://app.example.com\"]\n";
    let d = Daemon::start_with(&config, |st| st.api_tokens = tokens()).await;
    let preflight = |path: &str, origin: &str| {
        format!(
            "OPTIONS {path} HTTP/1.1\r\nHost: x\r\nOrigin: {origin}\r\n\
             Access-Control-Request-Method: POST\r\n\
             Access-Control-Request-Headers: authorization, content-type\r\n\
             Connection: close\r\n\r\n"
        )
    };
    for path in ["/whip", "/whip/0123456789abcdef0123456789abcdef"] {
        let r = support::http(&d.addr, &preflight(path, "https://app.example.com")).await;
        assert_eq!(status(&r), "204", "{path}: {r}");
        let lower = r.to_ascii_lowercase();
        assert!(
            lower.contains("access-control-allow-origin: https://app.example.com")
                && lower.contains("access-control-allow-headers: content-type, authorization"),
            "{path}: {r}"
        );
    }
    // Another origin's preflight is answered without leave to go on.
    let r = support::http(&d.addr, &preflight("/whip", "https://evil.example.com")).await;
    assert!(
        !r.to_ascii_lowercase()
            .contains("access-control-allow-origin"),
        "{r}"
    );
    // A preflight opens nothing else: an admin route still answers no data.
    let r = support::http(
        &d.addr,
        &preflight("/admin/calls", "https://app.example.com"),
    )
    .await;
    assert_eq!(status(&r), "405", "{r}");
    // An OPTIONS that is not a preflight, and the offer itself, still need the token.
    let plain = "OPTIONS /whip HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
    let r = support::http(&d.addr, plain).await;
    assert_eq!(status(&r), "401", "{r}");
    let offer = "POST /whip HTTP/1.1\r\nHost: x\r\nOrigin: https://app.example.com\r\n\
                 Content-Type: application/sdp\r\nContent-Length: 2\r\nConnection: close\r\n\r\nv=";
    let r = support::http(&d.addr, offer).await;
    assert_eq!(status(&r), "401", "{r}");
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twilio_endpoints_take_the_signature_instead_of_a_token() {
    let twilio = AuthToken::new("12345678901234567890123456789012");
    let d = Daemon::start_with(&support::mock_config("", ""), |st| {
        st.api_tokens = tokens();
        st.twilio_token = Some(twilio.clone());
    })
    .await;
    // The voice webhook: signed over the public /twiml URL and the form fields.
    let body = "CallSid=CA12&From=%2B15550100";
    let url = format!("http://{}/twiml", d.addr);
    let sig = signature::sign(&url, &[("CallSid", "CA12"), ("From", "+15550100")], &twilio);
    let post = |sig: &str| {
        format!(
            "POST /twiml HTTP/1.1\r\nHost: x\r\nX-Twilio-Signature: {sig}\r\nContent-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    let ok = support::http(&d.addr, &post(&sig)).await;
    assert_eq!(status(&ok), "200", "{ok}");
    let forged = support::http(&d.addr, &post("AAAAAAAAAAAAAAAAAAAAAAAAAAA=")).await;
    assert_eq!(status(&forged), "403", "{forged}");
    // A bearer token is not what opens a Twilio endpoint.
    let token_only = support::http(&d.addr, &get("/twiml", Some(&format!("Bearer {TOKEN}")))).await;
    assert_eq!(status(&token_only), "403", "{token_only}");

    // The stream upgrade, signed, needs no bearer token.
    let mut good = CallerOptions::from_pcm(&vec![0i16; 800], 8000, "silence").unwrap();
    good.auth_token = Some(twilio);
    good.signed_url = Some(d.public_stream_url());
    good.max_tail = Duration::from_secs(1);
    caller::dial(&d.twilio_url(), good)
        .await
        .expect("a signed stream is accepted without a bearer token");
    d.stop().await;
}

fn serve(listen: &str, extra: &[&str]) -> std::process::Child {
    // The config is read at start-up, whenever that is: its folder (under the test target's
    // scratch space) is kept rather than removed after a guessed delay.
    let dir = tempfile::Builder::new()
        .prefix("serve-auth-")
        .tempdir_in(env!("CARGO_TARGET_TMPDIR"))
        .unwrap()
        .keep();
    let config = dir.join("baton.toml");
    std::fs::write(&config, "[server]\ndrain_timeout_s = 1\n").unwrap();
    Command::new(env!("CARGO_BIN_EXE_baton"))
        .args(["serve", "--config"])
        .arg(&config)
        .args(["--listen", listen])
        .args(extra)
        .env("BATON_LOG", "info")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// Waits for the child's exit at most `limit`; `None` if it is still running (then it is killed).
fn exit_within(
    child: &mut std::process::Child,
    limit: Duration,
) -> Option<std::process::ExitStatus> {
    let start = std::time::Instant::now();
    while start.elapsed() < limit {
        if let Some(s) = child.try_wait().unwrap() {
            return Some(s);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let _ = child.kill();
    let _ = child.wait();
    None
}

#[test]
fn a_public_address_without_tokens_is_refused_unless_insecure_is_explicit() {
    let mut refused = serve("0.0.0.0:0", &[]);
    let status = exit_within(&mut refused, Duration::from_secs(20)).expect("baton must refuse");
    assert!(!status.success());
    let mut err = String::new();
    std::io::Read::read_to_string(refused.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(
        err.contains("refusing to listen on 0.0.0.0:0 without API tokens")
            && err.contains("--insecure-no-auth"),
        "{err}"
    );

    let mut open = serve("0.0.0.0:0", &["--insecure-no-auth"]);
    assert!(
        exit_within(&mut open, Duration::from_secs(2)).is_none(),
        "with --insecure-no-auth baton serves"
    );
    let mut err = String::new();
    std::io::Read::read_to_string(open.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert!(err.contains("INSECURE") && err.contains("WARN"), "{err}");
}

/// Every admin route of the OpenAPI document is protected: 401 without a token, served with
/// one (a 404 for the made-up ids, a 503 where the store is missing, never 401); the document
/// itself is open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_admin_route_needs_the_token_and_the_api_document_does_not() {
    use baton::server::admin::ROUTES;
    let d = Daemon::start_with(&support::mock_config("", ""), |st| st.api_tokens = tokens()).await;
    let request = |method: &str, path: &str, auth: Option<&str>| {
        let auth = auth
            .map(|a| format!("Authorization: {a}\r\n"))
            .unwrap_or_default();
        let body = if method == "PATCH" { "{}" } else { "" };
        format!(
            "{method} {path} HTTP/1.1\r\nHost: x\r\n{auth}Content-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
    };
    let bearer = format!("Bearer {TOKEN}");
    assert!(ROUTES.len() >= 10, "{ROUTES:?}");
    // The drain ends the daemon: asked for last, below.
    let last = |r: &str| r == "/openapi.json" || r == "/admin/drain";
    for (method, route) in ROUTES.iter().filter(|(_, r)| !last(r)) {
        let path = route
            .replace("{call}", "c0ffee")
            .replace("{agent}", "nobody")
            .replace("{caller}", "+15550001111")
            .replace("{context}", "ctx_none");
        let method = method.to_ascii_uppercase();
        let without = support::http(&d.addr, &request(&method, &path, None)).await;
        assert_eq!(status(&without), "401", "{method} {path}: {without}");
        let with = support::http(&d.addr, &request(&method, &path, Some(&bearer))).await;
        assert!(
            !with.is_empty() && status(&with) != "401" && status(&with) != "405",
            "{method} {path} with the token: {with}"
        );
    }
    let doc = support::http(&d.addr, &get("/openapi.json", None)).await;
    assert_eq!(status(&doc), "200", "{doc}");
    let without = support::http(&d.addr, &request("POST", "/admin/drain", None)).await;
    assert_eq!(status(&without), "401", "{without}");
    let with = support::http(&d.addr, &request("POST", "/admin/drain", Some(&bearer))).await;
    assert_eq!(status(&with), "202", "{with}");
    d.stop().await;
}

/// The telephony bridges have exactly one authenticator each: `/plivo`, `/vonage`,
/// `/media-stream` (and `/telnyx`, `/exotel` without a credential of their own) are protected
/// routes wanting the bearer token; `/telnyx` and `/exotel` with their provider's credential
/// configured take that credential instead, and a bearer token does not open them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dialect_routes_take_the_token_or_their_own_credential_never_neither() {
    use baton::leg::bridge::Dialect;
    use baton::leg::bridge::audio::{AudioFormat, Encoding};
    use baton::leg::bridge::caller::{self as bridge, CallerError as BridgeError};

    let opts = |dialect: Dialect, header: Option<(&str, String)>| {
        let format = match dialect {
            Dialect::Twilio | Dialect::Telnyx | Dialect::Plivo => AudioFormat::PCMU_8K,
            Dialect::Exotel | Dialect::Vonage => AudioFormat::new(Encoding::L16Le, 8000),
        };
        let mut o =
            bridge::CallerOptions::for_dialect(dialect, format, &vec![0i16; 800], 8000, "silence")
                .unwrap();
        o.max_tail = Duration::from_secs(1);
        o.quiet_after = Duration::from_millis(200);
        if let Some((name, value)) = header {
            o.headers.push((name.to_owned(), value));
        }
        o
    };
    let bearer = || Some(("authorization", format!("Bearer {TOKEN}")));

    // No provider credential configured: every dialect route is a protected one.
    let d = Daemon::start_with(&support::mock_config("", ""), |st| st.api_tokens = tokens()).await;
    let routes = [
        ("/telnyx", Dialect::Telnyx),
        ("/plivo", Dialect::Plivo),
        ("/exotel", Dialect::Exotel),
        ("/vonage", Dialect::Vonage),
        ("/media-stream", Dialect::Plivo),
    ];
    for (path, dialect) in routes {
        let e = bridge::dial(&d.url(path), opts(dialect, None))
            .await
            .expect_err("no token, no call");
        assert!(
            matches!(e, BridgeError::Refused { status: 401, .. }),
            "{path}: {e}"
        );
        let wrong = Some(("authorization", "Bearer wrong-token-00000000000".to_owned()));
        let e = bridge::dial(&d.url(path), opts(dialect, wrong))
            .await
            .expect_err("a wrong token, no call");
        assert!(
            matches!(e, BridgeError::Refused { status: 401, .. }),
            "{path}: {e}"
        );
        bridge::dial(&d.url(path), opts(dialect, bearer()))
            .await
            .unwrap_or_else(|e| panic!("{path} with the token: {e}"));
    }
    // A raw upgrade without credentials is refused before any WebSocket exists.
    let raw = support::http(&d.addr, &get("/media-stream", None)).await;
    assert_eq!(status(&raw), "401", "{raw}");
    d.stop().await;

    // Provider credentials configured: /telnyx and /exotel take them, and only them.
    let d = Daemon::start_with(&support::mock_config("", ""), |st| {
        st.api_tokens = tokens();
        st.telnyx_token = Some(baton::secret::Secret::new("telnyx-stream-token"));
        st.exotel_basic = Some(baton::secret::Secret::new("KEY:TOKEN"));
    })
    .await;
    let telnyx_token = || {
        Some((
            "x-telnyx-streaming-auth-token",
            "telnyx-stream-token".to_owned(),
        ))
    };
    // base64("KEY:TOKEN")
    let exotel_basic = || Some(("authorization", "Basic S0VZOlRPS0VO".to_owned()));
    for (path, dialect) in [("/telnyx", Dialect::Telnyx), ("/exotel", Dialect::Exotel)] {
        for header in [None, bearer()] {
            let e = bridge::dial(&d.url(path), opts(dialect, header))
                .await
                .expect_err("the provider's credential is the one that opens it");
            assert!(
                matches!(e, BridgeError::Refused { status: 403, .. }),
                "{path}: {e}"
            );
        }
    }
    bridge::dial(&d.url("/telnyx"), opts(Dialect::Telnyx, telnyx_token()))
        .await
        .expect("the streaming token alone opens /telnyx");
    bridge::dial(&d.url("/exotel"), opts(Dialect::Exotel, exotel_basic()))
        .await
        .expect("Basic KEY:TOKEN alone opens /exotel");
    // The other dialect routes still want the bearer token.
    let e = bridge::dial(&d.url("/vonage"), opts(Dialect::Vonage, None))
        .await
        .expect_err("no token, no call");
    assert!(matches!(e, BridgeError::Refused { status: 401, .. }), "{e}");
    d.stop().await;
}

/// A browser cannot put headers on a WebSocket: the events stream takes the token as the
/// subprotocol `baton.bearer.<token>` beside `baton.events`, selects `baton.events` (never
/// echoing the token), and refuses a wrong token with 401.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_stream_takes_the_token_as_a_websocket_subprotocol() {
    use futures_util::StreamExt;
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let twilio = AuthToken::new("12345678901234567890123456789012");
    let d = Daemon::start_with(&support::mock_config("", ""), |st| {
        st.api_tokens = tokens();
        st.twilio_token = Some(twilio.clone());
    })
    .await;
    let mut opts = CallerOptions::from_pcm(&vec![0i16; 8000 * 2], 8000, "silence").unwrap();
    opts.auth_token = Some(twilio);
    opts.signed_url = Some(d.public_stream_url());
    opts.max_tail = Duration::from_secs(1);
    let url = d.twilio_url();
    let call = tokio::spawn(async move { caller::dial(&url, opts).await });
    let mut id = None;
    for _ in 0..100 {
        if let Some(c) = d.app.calls.list().first() {
            id = Some(c.id.clone());
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let id = id.expect("the call is listed");
    let ws_url = format!("ws://{}/calls/{id}/events", d.addr);
    // A plain GET of the stream (no upgrade) is told, in JSON, what it is and where the events
    // so far are.
    let plain = support::http(
        &d.addr,
        &get(
            &format!("/calls/{id}/events"),
            Some(&format!("Bearer {TOKEN}")),
        ),
    )
    .await;
    assert_eq!(status(&plain), "400", "{plain}");
    assert!(
        plain.contains("{\"error\":") && plain.contains(&format!("GET /admin/calls/{id}/events")),
        "{plain}"
    );
    let offer = |protocols: String| {
        let mut req = ws_url.as_str().into_client_request().unwrap();
        req.headers_mut()
            .insert("Sec-WebSocket-Protocol", protocols.parse().unwrap());
        req
    };
    let wrong = tokio_tungstenite::connect_async(offer(
        "baton.events, baton.bearer.wrong-token-0000000000".into(),
    ))
    .await
    .expect_err("a wrong token is refused");
    assert!(wrong.to_string().contains("401"), "{wrong}");
    let (mut ws, response) =
        tokio_tungstenite::connect_async(offer(format!("baton.events, baton.bearer.{TOKEN}")))
            .await
            .expect("the token as a subprotocol opens the stream");
    assert_eq!(
        response
            .headers()
            .get("sec-websocket-protocol")
            .map(|v| v.to_str().unwrap()),
        Some("baton.events"),
        "the stream's own protocol is selected, never the token"
    );
    let first = tokio::time::timeout(Duration::from_secs(5), ws.next())
        .await
        .expect("an event in time")
        .expect("the stream is open")
        .expect("a message");
    assert!(first.to_string().contains("call_start"), "{first}");
    call.await.unwrap().expect("the call completes");
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dial_twilio_carries_the_token_as_a_header_and_shows_a_refusal_whole() {
    let d = Daemon::start_with(&support::mock_config("", ""), |st| st.api_tokens = tokens()).await;
    let out = tempfile::tempdir().unwrap();
    let dial = |extra: Vec<String>| {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_baton"));
        cmd.args(["dial", "twilio", &format!("ws://{}/twilio", d.addr)])
            .arg("--fixture")
            .arg(format!(
                "{}/audio-fixtures/clips/caller_01.wav",
                env!("CARGO_MANIFEST_DIR")
            ))
            .arg("--out")
            .arg(out.path())
            .args(extra)
            .stdout(Stdio::null());
        cmd
    };
    let refused = tokio::task::spawn_blocking({
        let mut cmd = dial(Vec::new());
        move || cmd.output().unwrap()
    })
    .await
    .unwrap();
    assert!(!refused.status.success());
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains("401") && err.contains("server.auth_tokens_env variable"),
        "the refusal's reason is cut or missing: {err}"
    );
    let taken = tokio::task::spawn_blocking({
        let mut cmd = dial(vec![
            "--header".into(),
            format!("Authorization=Bearer {TOKEN}"),
        ]);
        move || cmd.output().unwrap()
    })
    .await
    .unwrap();
    assert!(
        taken.status.success(),
        "{}",
        String::from_utf8_lossy(&taken.stderr)
    );
}

/// Every refusal is JSON with a sentence in `error`: a missing token, an unknown path, a method
/// a route does not take (still with its `allow` header).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_are_json_with_what_to_do() {
    let d = Daemon::start_with(&support::mock_config("", ""), |st| st.api_tokens = tokens()).await;
    // The response has status `code` and a JSON body whose `error` says `says`.
    let refused = |r: &str, code: &str, says: &str| {
        assert_eq!(status(r), code, "{r}");
        let b = r.split("\r\n\r\n").nth(1).unwrap_or("");
        let v: serde_json::Value =
            serde_json::from_str(b).unwrap_or_else(|e| panic!("not JSON ({e}): {r}"));
        assert!(v["error"].as_str().is_some_and(|e| e.contains(says)), "{r}");
    };
    let missing = support::http(&d.addr, &get("/metrics", None)).await;
    refused(&missing, "401", "Bearer");
    let auth = format!("Bearer {TOKEN}");
    let unknown = support::http(&d.addr, &get("/admin/nothing", Some(&auth))).await;
    refused(&unknown, "404", "/openapi.json");
    // A protected route answers nothing, not even which methods it takes, without the token.
    let probe = support::http(&d.addr, &get("/admin/drain", None)).await;
    assert_eq!(status(&probe), "401", "{probe}");
    let wrong = support::http(&d.addr, &get("/admin/drain", Some(&auth))).await;
    refused(&wrong, "405", "GET");
    assert!(
        wrong.to_ascii_lowercase().contains("allow: post"),
        "{wrong}"
    );
    // An open route's 405 is JSON too.
    let open = support::http(
        &d.addr,
        "DELETE /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    refused(&open, "405", "DELETE");
    d.stop().await;
}
