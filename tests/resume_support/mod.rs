//! Helpers of the resumption tests: a caller fixture whose frames are all distinct, a call on the
//! in-process mock with faults, and the check of what the mock received against the fixture.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use baton::backend::ModelBackend;
use baton::call::{self, CallOptions, CallReport, ModelSource, ReconnectPolicy};
use baton::leg::fixture::{FixtureCaller, LegCodec};
use baton::mock::faults::Faults;
use baton::mock::{MockOptions, Resumption, Scenario};
use baton::model::gemini::keepalive::KeepaliveConfig;
use baton::model::gemini::session::SessionConfig;

pub const ROOT: &str = env!("CARGO_MANIFEST_DIR");
pub const FRAME: usize = 320;

pub fn scenario(name: &str) -> Scenario {
    Scenario::load(
        &std::path::Path::new(ROOT).join(format!("audio-fixtures/scenarios/{name}.toml")),
    )
    .unwrap()
}

/// The demo caller's conversation, undithered.
pub fn conversation() -> Vec<i16> {
    let wav = baton::audio::wav::read(
        &std::path::Path::new(ROOT).join("audio-fixtures/clips/caller_conversation.wav"),
    )
    .unwrap();
    assert_eq!(wav.rate, 16_000);
    wav.samples
}

/// Pads to whole 20 ms frames and adds a ±1 LSB pseudo-random dither: every frame unique,
/// inaudible to any VAD.
pub fn dither(mut x: Vec<i16>) -> Vec<i16> {
    x.resize(x.len().div_ceil(FRAME) * FRAME, 0);
    let mut state: u64 = 0x2545_F491_4F6C_DD1D;
    for s in &mut x {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        *s = s.saturating_add((state % 3) as i16 - 1);
    }
    x
}

/// The demo caller, `extra_silence_s` of silence after it, dithered.
pub fn caller(extra_silence_s: usize) -> Vec<i16> {
    let mut x = conversation();
    x.resize(x.len() + extra_silence_s * 16_000, 0);
    dither(x)
}

pub struct Outcome {
    pub report: CallReport,
    pub store: Arc<Resumption>,
}

pub async fn run_call(
    sc: &Scenario,
    faults: Faults,
    samples: &[i16],
    policy: ReconnectPolicy,
    keepalive: KeepaliveConfig,
) -> Outcome {
    run_call_on(sc, faults, samples, policy, keepalive, LegCodec::L16k16).await
}

/// [`run_call`] with the caller on `codec` (the fixture's 16 kHz audio goes through it).
pub async fn run_call_on(
    sc: &Scenario,
    faults: Faults,
    samples: &[i16],
    policy: ReconnectPolicy,
    keepalive: KeepaliveConfig,
    codec: LegCodec,
) -> Outcome {
    let store = Resumption::capturing();
    let opts = Arc::new(MockOptions {
        faults: Arc::new(faults),
        resumption: store.clone(),
        ..MockOptions::new(Arc::new(sc.clone()))
    });
    let backend = ModelBackend::in_process(opts);
    let config = SessionConfig {
        system_instruction: Some("You are a friendly financial advisor on a helpline.".into()),
        keepalive,
        ..Default::default()
    };
    let session = backend.open(&config).await.unwrap();
    let fixture = FixtureCaller::from_pcm(samples, 16_000, codec, "dithered").unwrap();
    let (leg, recording) = fixture.start();
    let opts = CallOptions {
        caller_silence: sc.timing.silence,
        model: Some(ModelSource { backend, config }),
        reconnect: policy,
        ..Default::default()
    };
    let report = call::run(leg, session, opts).await.unwrap();
    let _ = recording.await;
    Outcome { report, store }
}

/// What the mock's lineages received, compared with the fixture.
#[derive(Debug, Default, PartialEq)]
pub struct AudioCheck {
    /// Fixture frames no lineage state contains.
    pub lost_frames: usize,
    /// Frames received twice (replayed over a handle's point).
    pub duplicated_frames: usize,
    /// A step back or forward that is not at a resume point.
    pub misordered: usize,
    /// Frames that are not fixture frames (except silence after the fixture's end).
    pub foreign: usize,
}

/// The caller audio the conversation's state is built on: every lineage up to its last handle
/// (a later fresh session continued from the transcript there), the last one whole; and the
/// resume points on that record, in frames.
pub fn received(store: &Resumption) -> (Vec<i16>, Vec<usize>) {
    let lineages = store.lineages();
    let mut all = Vec::new();
    let mut cuts = Vec::new();
    for (i, l) in lineages.iter().enumerate() {
        let end = if i + 1 == lineages.len() {
            l.samples.len()
        } else {
            l.last_handle.unwrap_or(0)
        };
        let base = all.len();
        if i > 0 {
            cuts.push(base / FRAME);
        }
        cuts.extend(
            l.resumes
                .iter()
                .filter(|&&r| r <= end)
                .map(|r| (base + r) / FRAME),
        );
        all.extend_from_slice(&l.samples[..end]);
    }
    (all, cuts)
}

pub fn check_audio(got: &[i16], cuts: &[usize], fixture: &[i16]) -> AudioCheck {
    let index: std::collections::HashMap<&[i16], usize> = fixture
        .chunks(FRAME)
        .enumerate()
        .map(|(i, f)| (f, i))
        .collect();
    assert_eq!(
        index.len(),
        fixture.len() / FRAME,
        "fixture frames are unique"
    );
    let last = fixture.len() / FRAME - 1;
    let mut c = AudioCheck::default();
    let mut hi: Option<usize> = None;
    let mut prev: Option<usize> = None;
    assert_eq!(got.len() % FRAME, 0);
    for (k, chunk) in got.chunks(FRAME).enumerate() {
        let Some(&j) = index.get(chunk) else {
            // The leg's silence after the fixture, once all of it was heard.
            if !(hi == Some(last) && chunk.iter().all(|&s| s == 0)) {
                c.foreign += 1;
            }
            continue;
        };
        let expected = prev.map_or(0, |p| p + 1);
        if j != expected && !cuts.contains(&k) {
            c.misordered += 1;
        }
        let next_new = hi.map_or(0, |h| h + 1);
        if j > next_new {
            c.lost_frames += j - next_new;
        } else if j < next_new {
            c.duplicated_frames += 1;
        }
        hi = Some(hi.map_or(j, |h| h.max(j)));
        prev = Some(j);
    }
    c.lost_frames += last - hi.unwrap_or(0).min(last);
    c
}

/// The in-process transport has no round trip: the mock consumes a frame as soon as it is
/// written, so a handle covers everything handed to the socket a few frames before it arrived.
/// (Over a network the margin must exceed the round trip plus the server's input lag; a margin
/// too large only replays more audio twice, which a model hears twice.)
pub fn in_process() -> ReconnectPolicy {
    ReconnectPolicy {
        replay_margin: Duration::from_millis(60),
        ..ReconnectPolicy::default()
    }
}

/// A call running the scenario's agent set (as `baton demo` does).
pub async fn run_agent_call(sc: &Scenario, faults: Faults, samples: &[i16]) -> Outcome {
    let store = Resumption::capturing();
    let opts = Arc::new(MockOptions {
        faults: Arc::new(faults),
        resumption: store.clone(),
        ..MockOptions::new(Arc::new(sc.clone()))
    });
    let caps = opts.capabilities();
    let backend = ModelBackend::in_process(opts);
    let reg = baton::agents::load(sc.agents.as_ref().expect("an agent set")).unwrap();
    let mut config = SessionConfig::default();
    let agents = call::Agents::start(Arc::new(reg), caps, backend.clone(), &mut config);
    let session = backend.open(&config).await.unwrap();
    let fixture = FixtureCaller::from_pcm(samples, 16_000, LegCodec::L16k16, "dithered").unwrap();
    let (leg, recording) = fixture.start();
    let opts = CallOptions {
        caller_silence: sc.timing.silence,
        reconnect: in_process(),
        ..Default::default()
    };
    let report = call::run_with_agents(leg, session, opts, Some(agents))
        .await
        .unwrap();
    let _ = recording.await;
    Outcome { report, store }
}
