//! Per-20 ms-frame cost of baton's two directions, as they run in a call:
//! - uplink: a phone leg's μ-law frame → decode → resample 8k→16k → base64 + JSON;
//!   and a 16 kHz app leg frame → (passthrough) → base64 + JSON.
//! - downlink: a model server frame (JSON, 40 ms of 24 kHz audio) → parse → base64 decode →
//!   resample 24k→8k → μ-law encode, reported per 20 ms of audio (the frame costs half).
//!
//! Run: `cargo bench --bench frame_path`

use std::hint::black_box;

use base64::Engine;
use criterion::{Criterion, criterion_group, criterion_main};

use baton::audio::g711;
use baton::audio::resample::StreamResampler;
use baton::model::ModelEvent;
use baton::model::gemini::codec;

fn speech_like(n: usize, rate: u32) -> Vec<i16> {
    (0..n)
        .map(|i| {
            let t = i as f64 / f64::from(rate);
            (6000.0 * (2.0 * std::f64::consts::PI * 220.0 * t).sin()
                + 3000.0 * (2.0 * std::f64::consts::PI * 1330.0 * t).sin()) as i16
        })
        .collect()
}

fn uplink(c: &mut Criterion) {
    let pcm8 = speech_like(160, 8000);
    let mut ulaw = Vec::new();
    g711::encode_ulaw(&pcm8, &mut ulaw);
    let mut up = StreamResampler::new(8000, 16000).expect("8k->16k");
    let (mut dec, mut res, mut scratch, mut json) =
        (Vec::new(), Vec::new(), Vec::new(), String::new());
    c.bench_function("uplink/pcmu8k frame: decode+resample+base64+json", |b| {
        b.iter(|| {
            dec.clear();
            g711::decode_ulaw(black_box(&ulaw), &mut dec);
            res.clear();
            up.process(&dec, &mut res);
            codec::encode_audio(&res, 16000, &mut scratch, &mut json);
            black_box(json.len())
        })
    });
    let pcm16 = speech_like(320, 16000);
    let mut pass = StreamResampler::new(16000, 16000).expect("passthrough");
    c.bench_function("uplink/l16-16k frame: base64+json", |b| {
        b.iter(|| {
            res.clear();
            pass.process(black_box(&pcm16), &mut res);
            codec::encode_audio(&res, 16000, &mut scratch, &mut json);
            black_box(json.len())
        })
    });
}

fn downlink(c: &mut Criterion) {
    // 40 ms of 24 kHz audio in one server message, as the service and the mock send it.
    let pcm24 = speech_like(960, 24000);
    let bytes: Vec<u8> = pcm24.iter().flat_map(|s| s.to_le_bytes()).collect();
    let frame = format!(
        r#"{{"serverContent":{{"modelTurn":{{"parts":[{{"inlineData":{{"mimeType":"audio/pcm;rate=24000","data":"{}"}}}}]}}}}}}"#,
        base64::engine::general_purpose::STANDARD.encode(bytes)
    )
    .into_bytes();
    let mut down = StreamResampler::new(24000, 8000).expect("24k->8k");
    let (mut events, mut res, mut ulaw) = (Vec::new(), Vec::new(), Vec::new());
    let mut group = c.benchmark_group("downlink");
    // Each iteration handles two 20 ms frames' worth; criterion reports per element = per frame.
    group.throughput(criterion::Throughput::Elements(2));
    group.bench_function(
        "model 40 ms chunk: parse+b64 decode+resample 24k->8k+ulaw",
        |b| {
            b.iter(|| {
                events.clear();
                let msg = codec::decode(black_box(&frame)).expect("valid frame");
                codec::into_events(msg, &mut events);
                for e in events.drain(..) {
                    if let ModelEvent::Audio { samples, .. } = e {
                        res.clear();
                        down.process(&samples, &mut res);
                        ulaw.clear();
                        g711::encode_ulaw(&res, &mut ulaw);
                    }
                }
                black_box(ulaw.len())
            })
        },
    );
    group.finish();
}

criterion_group!(benches, uplink, downlink);
criterion_main!(benches);
