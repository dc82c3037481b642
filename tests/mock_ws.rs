//! The mock model over real WebSockets: a tokio-tungstenite client speaks the Gemini Live protocol
//! to it over a loopback TCP socket (plain and TLS) and over `connect_in_memory` on tokio's paused
//! clock.

use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use futures_util::{SinkExt, StreamExt};
use serde_json::{Value, json};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::{self, Message};
use tokio_tungstenite::{Connector, WebSocketStream};

use baton::mock::clip::{self, OUTPUT_RATE};
use baton::mock::scenario::{Reply, Turn};
use baton::mock::tls::TlsSetup;
use baton::mock::{MockOptions, Scenario, bind, connect_in_memory};

const PATH: &str = "/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent";

fn options() -> MockOptions {
    let mut s = Scenario::builtin();
    s.turns.push(Turn::new(
        Some("hello mock".into()),
        Reply {
            audio: clip::synthetic_utterance().into(),
            text: "hello caller".into(),
        },
    ));
    MockOptions::new(Arc::new(s))
}

fn setup() -> Message {
    Message::text(
        json!({"setup": {"model": "models/gemini-3.8-live",
                         "inputAudioTranscription": {}, "outputAudioTranscription": {}}})
        .to_string(),
    )
}

/// 0.6 s of tone then 1 s of silence, 16 kHz, as 20 ms `realtime_input` messages (SDK casing).
fn caller_audio() -> Vec<Message> {
    let samples: Vec<i16> = (0..16 * 1600)
        .map(|i| {
            if i < 16 * 600 {
                ((i as f64 * 0.3).sin() * 8000.0) as i16
            } else {
                0
            }
        })
        .collect();
    samples
        .chunks(320)
        .map(|c| {
            let bytes: Vec<u8> = c.iter().flat_map(|s| s.to_le_bytes()).collect();
            Message::text(
                json!({"realtime_input": {"audio": {"mimeType": "audio/pcm;rate=16000",
                                                      "data": STANDARD.encode(bytes)}}})
                .to_string(),
            )
        })
        .collect()
}

/// Reads one server message; it must be JSON in a binary frame.
async fn recv<S: AsyncRead + AsyncWrite + Unpin>(ws: &mut WebSocketStream<S>) -> Value {
    loop {
        match ws.next().await {
            Some(Ok(Message::Binary(b))) => return serde_json::from_slice(&b).unwrap(),
            Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
            other => panic!("expected a binary JSON frame, got {other:?}"),
        }
    }
}

/// What one model turn brought.
#[derive(Debug, Default)]
struct TurnSeen {
    input_text: String,
    output_text: String,
    audio_bytes: usize,
    generation_complete: bool,
    order: Vec<&'static str>,
    usage: Option<Value>,
}

async fn read_turn<S: AsyncRead + AsyncWrite + Unpin>(ws: &mut WebSocketStream<S>) -> TurnSeen {
    let mut seen = TurnSeen::default();
    loop {
        let m = recv(ws).await;
        let sc = &m["serverContent"];
        if let Some(t) = sc["inputTranscription"]["text"].as_str() {
            seen.input_text.push_str(t);
        }
        if let Some(t) = sc["outputTranscription"]["text"].as_str() {
            seen.output_text.push_str(t);
        }
        for part in sc["modelTurn"]["parts"].as_array().into_iter().flatten() {
            assert_eq!(part["inlineData"]["mimeType"], "audio/pcm;rate=24000");
            let data = part["inlineData"]["data"].as_str().unwrap();
            seen.audio_bytes += STANDARD.decode(data).unwrap().len();
            if seen.order.last() != Some(&"audio") {
                seen.order.push("audio");
            }
        }
        if sc["generationComplete"] == true {
            seen.generation_complete = true;
            seen.order.push("generationComplete");
        }
        if sc["turnComplete"] == true {
            seen.order.push("turnComplete");
            seen.usage = Some(m["usageMetadata"].clone());
            return seen;
        }
    }
}

async fn conversation<S: AsyncRead + AsyncWrite + Unpin>(ws: &mut WebSocketStream<S>) {
    ws.send(setup()).await.unwrap();
    assert_eq!(recv(ws).await, json!({"setupComplete": {}}));
    for m in caller_audio() {
        ws.send(m).await.unwrap();
    }
    let turn = read_turn(ws).await;
    assert_eq!(turn.input_text, "hello mock");
    assert_eq!(turn.output_text, "hello caller");
    assert_eq!(turn.audio_bytes, clip::synthetic_utterance().len() * 2);
    assert_eq!(turn.order, ["audio", "generationComplete", "turnComplete"]);
    let usage = turn.usage.unwrap();
    assert!(usage["responseTokenCount"].as_u64().unwrap() > 0, "{usage}");
}

#[tokio::test]
async fn loopback_tcp_conversation() {
    let server = bind("127.0.0.1:0", Arc::new(options()), None)
        .await
        .unwrap()
        .spawn();
    assert!(server.base_url().starts_with("ws://127.0.0.1:"));
    let (mut ws, _) = tokio_tungstenite::connect_async(format!("{}{PATH}", server.base_url()))
        .await
        .unwrap();
    conversation(&mut ws).await;
    server.stop().await;
}

#[tokio::test]
async fn loopback_tls_conversation_with_api_key() {
    let dir = tempfile::tempdir().unwrap();
    let cert = dir.path().join("cert.pem");
    let opts = MockOptions {
        api_key: Some("test-key".into()),
        ..options()
    };
    let server = bind(
        "127.0.0.1:0",
        Arc::new(opts),
        Some(TlsSetup::SelfSigned {
            cert_out: cert.clone(),
        }),
    )
    .await
    .unwrap()
    .spawn();
    assert!(server.base_url().starts_with("wss://localhost:"));

    let mut roots = rustls::RootCertStore::empty();
    let pem = std::fs::read(&cert).unwrap();
    use rustls::pki_types::{CertificateDer, pem::PemObject};
    for c in CertificateDer::pem_slice_iter(&pem) {
        roots.add(c.unwrap()).unwrap();
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let connector = Connector::Rustls(Arc::new(config));
    let url = format!("{}{PATH}", server.base_url());

    // Without the key: closed with 1008 and a reason that does not echo anything sent.
    let (mut ws, _) = tokio_tungstenite::connect_async_tls_with_config(
        format!("{url}?key=wrong-key"),
        None,
        false,
        Some(connector.clone()),
    )
    .await
    .unwrap();
    match ws.next().await {
        Some(Ok(Message::Close(Some(frame)))) => {
            assert_eq!(u16::from(frame.code), 1008);
            assert!(!frame.reason.contains("wrong-key"), "{}", frame.reason);
        }
        other => panic!("expected a 1008 close, got {other:?}"),
    }

    // With the key in the header the SDK uses.
    let mut req = url.into_client_request().unwrap();
    req.headers_mut()
        .insert("x-goog-api-key", "test-key".parse().unwrap());
    let (mut ws, _) =
        tokio_tungstenite::connect_async_tls_with_config(req, None, false, Some(connector))
            .await
            .unwrap();
    conversation(&mut ws).await;
    server.stop().await;
}

#[tokio::test]
async fn unknown_paths_get_404_before_the_upgrade() {
    let server = bind("127.0.0.1:0", Arc::new(options()), None)
        .await
        .unwrap()
        .spawn();
    let err = tokio_tungstenite::connect_async(format!("{}/ws/other", server.base_url()))
        .await
        .unwrap_err();
    match err {
        tungstenite::Error::Http(resp) => assert_eq!(resp.status(), 404),
        other => panic!("expected HTTP 404, got {other}"),
    }
}

async fn in_memory_client(opts: MockOptions) -> WebSocketStream<tokio::io::DuplexStream> {
    let stream = connect_in_memory(Arc::new(opts));
    let (ws, _) = tokio_tungstenite::client_async(format!("ws://localhost{PATH}"), stream)
        .await
        .unwrap();
    ws
}

#[tokio::test(start_paused = true)]
async fn in_memory_conversation_in_virtual_time() {
    let mut ws = in_memory_client(options()).await;
    ws.send(setup()).await.unwrap();
    assert_eq!(recv(&mut ws).await, json!({"setupComplete": {}}));
    // The caller streams at real-time pace (virtual time): each 20 ms chunk once it is complete,
    // while the replies are read as they come.
    let start = tokio::time::Instant::now();
    let (mut tx, mut rx) = ws.split();
    let sender = tokio::spawn(async move {
        for m in caller_audio() {
            tokio::time::sleep(Duration::from_millis(20)).await;
            tx.send(m).await.unwrap();
        }
        tx
    });
    let mut first_audio = None;
    let mut turn_complete = None;
    while turn_complete.is_none() {
        let m = match rx.next().await {
            Some(Ok(Message::Binary(b))) => serde_json::from_slice::<Value>(&b).unwrap(),
            other => panic!("expected a binary JSON frame, got {other:?}"),
        };
        let now = tokio::time::Instant::now() - start;
        if first_audio.is_none() && m["serverContent"]["modelTurn"].is_object() {
            first_audio = Some(now);
        }
        if m["serverContent"]["turnComplete"] == true {
            turn_complete = Some(now);
        }
    }
    let _open_until_the_end = sender.await.unwrap();
    let (first_audio, turn_complete) = (first_audio.unwrap(), turn_complete.unwrap());
    // Speech ends at 600 ms, + 500 ms silence window, + 300 ms to the first audio.
    assert_eq!(first_audio, Duration::from_millis(1400));
    // turnComplete waits for the client's playback of the whole reply.
    let reply =
        Duration::from_secs_f64(clip::synthetic_utterance().len() as f64 / f64::from(OUTPUT_RATE));
    let played = turn_complete - first_audio;
    assert!(
        played >= reply && played <= reply + Duration::from_millis(50),
        "{played:?} vs {reply:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn in_memory_bad_input_closes_with_code_and_reason() {
    let cases: Vec<(Message, u16, &str)> = vec![
        (Message::text("{\"setup\": {"), 1007, "EOF"),
        (
            Message::text(json!({"realtimeInput": {"text": "hi"}}).to_string()),
            1007,
            "setup",
        ),
        (
            Message::text(json!({"setup": {"model": "models/gemini-2.0-pro"}}).to_string()),
            1008,
            "not found",
        ),
        (
            Message::binary(vec![b' '; 17 * 1024 * 1024]),
            1009,
            "16 MiB",
        ),
    ];
    for (msg, code, want) in cases {
        let mut ws = in_memory_client(options()).await;
        ws.send(msg).await.unwrap();
        match ws.next().await {
            Some(Ok(Message::Close(Some(frame)))) => {
                assert_eq!(u16::from(frame.code), code, "{}", frame.reason);
                assert!(frame.reason.contains(want), "{want}: {}", frame.reason);
            }
            other => panic!("expected a close, got {other:?}"),
        }
    }
}

#[tokio::test(start_paused = true)]
async fn the_scenario_profile_reaches_every_session_and_the_server_can_override_it() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("audio-fixtures/scenarios/seed000.toml");
    let mut scenario = Scenario::load(&path).unwrap();
    scenario.profile = baton::mock::Profile::Gemini25;
    let update = Message::text(
        json!({"contextUpdate": {"systemInstruction": {"parts": [{"text": "You are Ravi."}]}}})
            .to_string(),
    );
    let opts = MockOptions::new(Arc::new(scenario));
    assert_eq!(opts.profile, baton::mock::Profile::Gemini25);
    assert!(!opts.capabilities().update_instructions);
    for (profile, refused) in [
        (baton::mock::Profile::Gemini25, true),
        (baton::mock::Profile::Gemini38, false),
    ] {
        let mut ws = in_memory_client(MockOptions {
            profile,
            ..opts.clone()
        })
        .await;
        ws.send(setup()).await.unwrap();
        assert_eq!(recv(&mut ws).await, json!({"setupComplete": {}}));
        ws.send(update.clone()).await.unwrap();
        ws.send(Message::text(
            json!({"realtimeInput": {"text": "hi"}}).to_string(),
        ))
        .await
        .unwrap();
        if refused {
            match ws.next().await {
                Some(Ok(Message::Close(Some(frame)))) => {
                    assert_eq!(u16::from(frame.code), 1007, "{}", frame.reason);
                    assert!(frame.reason.contains("contextUpdate"), "{}", frame.reason);
                }
                other => panic!("{profile}: expected a close, got {other:?}"),
            }
        } else {
            // The update named Ravi: he answers turn 1 (Asha's line) with his own default.
            let turn = read_turn(&mut ws).await;
            assert_eq!(turn.output_text, "Sorry, I didn't catch that.");
        }
    }
}
