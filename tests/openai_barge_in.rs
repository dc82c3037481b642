//! Barge-in on the OpenAI Realtime protocol, end to end on the accelerated clock: the caller
//! talks over the agent's reply, baton flushes playout and tells the model what the caller
//! actually heard (`conversation.item.truncate` with `audio_end_ms`; `response.cancel` only when
//! the response is still running — here the server's VAD has already cancelled it), and the
//! mock — which refuses a truncation past the audio it produced — accepts it.

use std::path::Path;
use std::sync::Arc;

use baton::backend::ModelBackend;
use baton::call::{self, CallOptions};
use baton::leg::fixture::{FixtureCaller, LegCodec};
use baton::mock::openai::OpenAiOptions;
use baton::mock::record::RecordSink;
use baton::mock::{MockOptions, Scenario};
use baton::model::gemini::session::SessionConfig;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

#[test]
fn the_caller_talks_over_a_reply_and_the_model_hears_where_it_was_cut() {
    let dir = tempfile::tempdir().unwrap();
    let clip = |name: &str| {
        baton::audio::wav::read(&Path::new(ROOT).join("audio-fixtures/clips").join(name))
            .unwrap()
            .samples
    };
    // Turn 1, then 1.4 s into the agent's reply the caller says turn 2 over it.
    let mut pcm = vec![0i16; 8000];
    pcm.extend_from_slice(&clip("caller_01.wav"));
    pcm.extend(std::iter::repeat_n(0, 16000 * 14 / 10));
    pcm.extend_from_slice(&clip("caller_02.wav"));
    pcm.extend(std::iter::repeat_n(0, 16000 * 3));
    let wav = dir.path().join("caller.wav");
    baton::audio::wav::write_mono(&wav, 16000, &pcm).unwrap();
    let record = dir.path().join("sent.jsonl");

    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    let report = rt.block_on(async {
        let scenario =
            Scenario::load(&Path::new(ROOT).join("audio-fixtures/scenarios/demo.toml")).unwrap();
        let (sink, writer) = RecordSink::create(&record).await.unwrap();
        let mut opts = MockOptions::new(Arc::new(scenario));
        opts.record = Some(sink);
        opts.openai = Some(OpenAiOptions::default());
        let backend = ModelBackend::in_process(Arc::new(opts));
        let session = backend.open(&SessionConfig::default()).await.unwrap();
        let fixture = FixtureCaller::from_wav(&wav, LegCodec::L16k16).unwrap();
        let (leg, rec) = fixture.start();
        let report = call::run(leg, session, CallOptions::default())
            .await
            .unwrap();
        rec.await.unwrap();
        drop(backend);
        let _ = tokio::time::timeout(std::time::Duration::from_secs(5), writer).await;
        report
    });
    assert!(report.interruptions >= 1, "no barge-in: {report:?}");
    assert!(
        report.protocol_errors.is_empty(),
        "the model refused something: {:?}",
        report.protocol_errors
    );
    let sent: Vec<serde_json::Value> = std::fs::read_to_string(&record)
        .unwrap()
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let truncates: Vec<&serde_json::Value> = sent
        .iter()
        .filter(|m| m["type"] == "conversation.item.truncate")
        .collect();
    assert_eq!(truncates.len(), 1, "{truncates:?}");
    let t = truncates[0];
    let cancels = sent
        .iter()
        .filter(|m| m["type"] == "response.cancel")
        .count();
    eprintln!("sent {t}; response.cancel ×{cancels}");
    assert_eq!(t["content_index"], 0, "{t}");
    assert!(t["item_id"].as_str().is_some_and(|s| !s.is_empty()), "{t}");
    // The caller heard the reply from its first frame until the barge-in was detected: about
    // 1.4 s minus the model's latency, plus the VAD's reaction; never nothing, never the whole
    // reply.
    let heard = t["audio_end_ms"].as_u64().unwrap();
    assert!(
        (300..=2000).contains(&heard),
        "audio_end_ms {heard} is not what the caller heard: {t}"
    );
    assert!(heard.is_multiple_of(20), "whole frames: {heard}");
    // Nothing was sent as audio of the cut reply after the truncation: the call went on.
    assert!(report.turns.len() >= 2, "{:?}", report.turns);
}
