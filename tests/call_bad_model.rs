//! A model that sends garbage: every bad frame becomes a clear protocol error, the good audio
//! around it is still played, and the call ends cleanly when the model closes.

use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use baton::call::{self, CallOptions};
use baton::leg::fixture::{FixtureCaller, LegCodec};
use baton::model::gemini::endpoint::{Backend, Endpoint};
use baton::model::gemini::session::{self, SessionConfig, Transport};

fn audio_msg(samples: usize) -> String {
    use base64::Engine;
    let pcm: Vec<u8> = (0..samples)
        .flat_map(|i| (((i % 48) as i16 - 24) * 600).to_le_bytes())
        .collect();
    let data = base64::engine::general_purpose::STANDARD.encode(pcm);
    format!(
        r#"{{"serverContent":{{"modelTurn":{{"parts":[{{"inlineData":{{"mimeType":"audio/pcm;rate=24000","data":"{data}"}}}}]}}}}}}"#
    )
}

#[tokio::test(start_paused = true)]
async fn garbage_from_the_model_is_reported_and_the_call_carries_on() {
    let (client, server) = tokio::io::duplex(1 << 20);
    let model = tokio::spawn(async move {
        let mut ws = tokio_tungstenite::accept_async(server).await.unwrap();
        let setup = ws.next().await.unwrap().unwrap();
        assert!(setup.to_text().unwrap().starts_with(r#"{"setup":"#));
        ws.send(Message::binary(br#"{"setupComplete":{}}"#.to_vec()))
            .await
            .unwrap();
        // Paused clock: the model pauses 200 ms of tokio time after the setup, as a service would.
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        let bad: [&[u8]; 6] = [
            b"this is not json",
            br#"{"serverContent":{"modelTurn":{"parts":[{"inlineData""#,
            br#"{"serverContent":{"modelTurn":{"parts":[{"inlineData":{"mimeType":"image/png","data":"AAAA"}}]}}}"#,
            br#"{"serverContent":{"modelTurn":{"parts":[{"inlineData":{"mimeType":"audio/pcm;rate=24000","data":"@@@"}}]}}}"#,
            br#"{"serverContent":{"turnComplete":"soon"}}"#,
            br#"{"somethingNew":{"x":1}}"#,
        ];
        for b in bad {
            ws.send(Message::binary(b.to_vec())).await.unwrap();
        }
        ws.send(Message::binary(audio_msg(24_000).into_bytes()))
            .await
            .unwrap();
        ws.send(Message::binary(
            br#"{"serverContent":{"generationComplete":true}}"#.to_vec(),
        ))
        .await
        .unwrap();
        ws.send(Message::binary(
            br#"{"serverContent":{"turnComplete":true}}"#.to_vec(),
        ))
        .await
        .unwrap();
        // Paused clock: the reply's second plays out in full before the model fails the session.
        tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        ws.send(Message::Close(Some(CloseFrame {
            code: CloseCode::Error,
            reason: "Internal error occurred.".into(),
        })))
        .await
        .unwrap();
        // Drain until the client answers the close.
        while let Some(Ok(_)) = ws.next().await {}
    });

    let endpoint = Endpoint::new("ws://model.test", Backend::DeveloperApi, "v1beta", None).unwrap();
    let session = session::connect(
        &endpoint,
        Transport::InMemory(client),
        &SessionConfig::default(),
    )
    .await
    .unwrap();
    let fixture = FixtureCaller::from_pcm(
        &vec![0i16; 16_000 * 10],
        16_000,
        LegCodec::L16k16,
        "silence",
    )
    .unwrap();
    let (leg, recording) = fixture.start();
    let session = baton::model::handle::ModelSession::gemini(
        session,
        baton::model::catalog::lookup(
            baton::model::handle::Protocol::Gemini,
            "models/gemini-3.8-live",
        )
        .capabilities,
    );
    let report = call::run(leg, session, CallOptions::default())
        .await
        .unwrap();
    let recording = recording.await.unwrap();
    model.await.unwrap();

    let errors = report.protocol_errors.join("\n");
    assert_eq!(report.protocol_errors.len(), 5, "{errors}");
    assert!(errors.contains("not valid JSON"), "{errors}");
    assert!(errors.contains("image/png"), "{errors}");
    assert!(errors.contains("not base64"), "{errors}");
    assert!(errors.contains("serverContent.turnComplete"), "{errors}");
    assert_eq!(
        report.end_reason,
        "model closed the session (code 1011): Internal error occurred."
    );
    // The one good second of audio was played in full: 50 frames (the downlink resampler's
    // delay is trimmed, so nothing is added in front), without underruns.
    assert_eq!(report.voice_frames, 50, "{report:?}");
    assert_eq!(report.underruns, 0);
    assert!(recording.agent.iter().any(|&s| s != 0));
}

#[tokio::test(start_paused = true)]
async fn a_refused_setup_is_a_clear_error() {
    let (client, server) = tokio::io::duplex(1 << 16);
    tokio::spawn(async move {
        let mut ws = tokio_tungstenite::accept_async(server).await.unwrap();
        let _ = ws.next().await;
        let reason = "models/nope is not found for API version v1beta, or is not supported for bidiGenerateContent";
        let _ = ws
            .send(Message::Close(Some(CloseFrame {
                code: CloseCode::Policy,
                reason: reason.into(),
            })))
            .await;
        while let Some(Ok(_)) = ws.next().await {}
    });
    let endpoint = Endpoint::new("ws://model.test", Backend::DeveloperApi, "v1beta", None).unwrap();
    let err = session::connect(
        &endpoint,
        Transport::InMemory(client),
        &SessionConfig::default(),
    )
    .await
    .err()
    .expect("setup refused")
    .to_string();
    assert!(
        err.contains("1008") && err.contains("models/nope is not found"),
        "{err}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_silent_model_times_out_at_setup() {
    let (client, server) = tokio::io::duplex(1 << 16);
    tokio::spawn(async move {
        let mut ws = tokio_tungstenite::accept_async(server).await.unwrap();
        while let Some(Ok(_)) = ws.next().await {}
    });
    let endpoint = Endpoint::new("ws://model.test", Backend::DeveloperApi, "v1beta", None).unwrap();
    let err = session::connect(
        &endpoint,
        Transport::InMemory(client),
        &SessionConfig::default(),
    )
    .await
    .err()
    .expect("no setupComplete")
    .to_string();
    assert!(err.contains("setupComplete"), "{err}");
}

/// A model endpoint that accepts the connection and never answers the upgrade cannot hold a
/// call: opening a session gives up after the setup timeout, saying what never came.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_model_that_accepts_and_never_upgrades_times_out_at_the_dial() {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((socket, _)) = listener.accept().await {
            held.push(socket);
        }
    });
    let endpoint = Endpoint::new(
        &format!("ws://{addr}"),
        Backend::DeveloperApi,
        "v1beta",
        None,
    )
    .unwrap();
    let backend = baton::backend::ModelBackend::Gemini {
        endpoint,
        model: baton::model::catalog::lookup(
            baton::model::handle::Protocol::Gemini,
            "models/gemini-2.5-flash-native-audio-preview-12-2025",
        ),
    };
    let config = SessionConfig {
        setup_timeout: std::time::Duration::from_millis(300),
        ..SessionConfig::default()
    };
    let err = backend
        .open(&config)
        .await
        .err()
        .expect("no upgrade")
        .to_string();
    assert!(
        err.contains("no WebSocket upgrade from the model within"),
        "{err}"
    );
}
