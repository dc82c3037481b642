//! Calls that survive the service ending their sessions, on the accelerated clock: goAways and
//! drops (1006 / 1008 / 1011) at random moments — mid caller utterance, mid tool call, mid model
//! turn — resumed with handles; a refused resume re-seeded from the transcript without a second
//! greeting; late pongs that must not kill a session and a silent socket that must be declared
//! dead.
//!
//! "No caller audio lost" is checked on what the mock model received, not on baton's own
//! figures: the caller fixture carries a ±1 LSB pseudo-random dither so that every 20 ms frame is
//! unique, and the audio record of the mock's session lineage (cut back to the handle's point at
//! every resume, as the service's state is) must be the fixture's frames in order, where the only
//! allowed deviation is a step back at a resume point (replayed audio the handle already covered);
//! any frame of the fixture missing from the record is a lost frame.

use crate::resume_support;

use std::time::Duration;

use baton::call::metrics::{percentile, summarize};
use baton::mock::faults::{DropRule, Ending, Faults, When};
use baton::model::gemini::keepalive::KeepaliveConfig;
use resume_support::*;

/// A phone caller (8 kHz μ-law): the reconnect ring keeps the leg's frames and a replay sends
/// them again at the rate live audio goes (the leg's own 8 kHz on Gemini), so the resumed
/// lineage holds the whole call's audio, none of it lost.
#[tokio::test(start_paused = true)]
async fn a_phone_callers_audio_is_replayed_from_the_legs_frames() {
    use baton::leg::fixture::LegCodec;
    let sc = scenario("fault_mid_tool_call");
    let samples = caller(0);
    let mut resumed = 0;
    for seed in 1..=4u64 {
        let o = run_call_on(
            &sc,
            drop_faults(seed),
            &samples,
            in_process(),
            KeepaliveConfig::default(),
            LegCodec::Pcmu8k,
        )
        .await;
        let r = &o.report;
        assert_eq!(r.end_reason, "caller hung up", "call {seed}");
        assert_eq!(r.audio_lost_ms, 0.0, "call {seed}");
        assert!(
            r.reconnects.iter().all(|c| c.outcome == "resumed"),
            "call {seed}"
        );
        resumed += r.reconnects.len();
        let (got, _) = received(&o.store);
        // Sent at the leg's rate, not resampled to 16 kHz on the way.
        assert!(
            o.store.lineages().iter().all(|l| l.rate == 8_000),
            "call {seed}"
        );
        assert_eq!(r.uplink_resampler_delay_ms, 0.0, "call {seed}");
        // Every 20 ms of the caller (16 kHz samples) reached the model's state, within one frame.
        assert!(
            got.len() * 2 + 320 >= samples.len(),
            "call {seed}: {} 8 kHz samples for {} at 16 kHz",
            got.len(),
            samples.len()
        );
        assert_eq!(r.turns.len(), sc.turns.len(), "call {seed}");
    }
    assert!(resumed > 0, "no reconnect happened");
}

#[test]
fn the_audio_check_fails_when_a_frame_is_lost() {
    let f = caller(0);
    assert_eq!(check_audio(&f, &[], &f), AudioCheck::default());
    // Resumed at frame 100 from a handle at frame 90: frames 90..100 twice.
    let dup = [&f[..100 * FRAME], &f[90 * FRAME..]].concat();
    let c = check_audio(&dup, &[100], &f);
    assert_eq!(
        (c.lost_frames, c.duplicated_frames, c.misordered),
        (0, 10, 0)
    );
    // One silent frame (digital zero before dithering) missing in the middle.
    let lost = [&f[..10 * FRAME], &f[11 * FRAME..]].concat();
    assert_eq!(check_audio(&lost, &[], &f).lost_frames, 1);
    // A replay that starts one frame too late at a resume point.
    let late = [&f[..100 * FRAME], &f[101 * FRAME..]].concat();
    assert_eq!(check_audio(&late, &[100], &f).lost_frames, 1);
    // The end missing.
    assert_eq!(check_audio(&f[..f.len() - FRAME], &[], &f).lost_frames, 1);
}

fn drop_faults(seed: u64) -> Faults {
    let every = |when, after: (f64, f64), ending| DropRule {
        when,
        after: (
            Duration::from_secs_f64(after.0),
            Duration::from_secs_f64(after.1),
        ),
        ending,
        every_connection: true,
    };
    Faults {
        seed,
        max_faults: Some(10),
        drops: vec![
            every(When::MidCallerUtterance, (0.5, 3.0), Ending::Abrupt),
            every(When::MidModelTurn, (0.5, 3.0), Ending::Close(1011)),
            every(When::MidToolCall, (0.5, 3.0), Ending::Close(1008)),
            every(When::After, (1.0, 6.0), Ending::Close(1011)),
        ],
        ..Faults::default()
    }
}

fn go_away_faults(seed: u64) -> Faults {
    Faults {
        seed,
        max_faults: Some(10),
        go_away_after: Some((Duration::from_millis(500), Duration::from_secs(4))),
        go_away_time_left: Duration::from_secs(3),
        // Every other call: the service goes quiet after goAway; the deadline must do it.
        silent_after_go_away: seed.is_multiple_of(2),
        ..Faults::default()
    }
}

#[tokio::test(start_paused = true)]
async fn a_hundred_drops_and_a_hundred_go_aways_lose_no_caller_audio() {
    let sc = scenario("fault_mid_tool_call");
    let samples = caller(0);
    let mut records = Vec::new();
    let (mut drops, mut go_aways) = (0, 0);
    let mut duplicated_ms = 0.0;
    // Calls with drops until 100 drops, then calls with goAways until 100 goAways.
    for seed in 1..=40u64 {
        let faults = if drops < 100 {
            drop_faults(seed)
        } else if go_aways < 100 {
            go_away_faults(seed)
        } else {
            break;
        };
        let o = run_call(
            &sc,
            faults,
            &samples,
            in_process(),
            KeepaliveConfig::default(),
        )
        .await;
        let r = &o.report;
        assert_eq!(r.end_reason, "caller hung up", "call {seed}");
        assert!(
            r.reconnects.iter().all(|c| c.outcome == "resumed"),
            "call {seed}: {:#?}",
            r.reconnects
        );
        assert_eq!(r.audio_lost_ms, 0.0, "call {seed}");
        let (got, cuts) = received(&o.store);
        let check = check_audio(&got, &cuts, &samples);
        assert_eq!(
            (check.lost_frames, check.misordered, check.foreign),
            (0, 0, 0),
            "call {seed}: {check:?}"
        );
        // Every reconnect resumed one lineage; what baton counts as replayed is at least what
        // the mock received twice.
        assert_eq!(o.store.lineages().len(), 1, "call {seed}");
        duplicated_ms += check.duplicated_frames as f64 * 20.0;
        let replayed_frames = (r.audio_replayed_ms / 20.0).round() as usize;
        assert!(
            replayed_frames >= check.duplicated_frames,
            "call {seed}: {replayed_frames} < {}",
            check.duplicated_frames
        );
        // Every caller turn was answered.
        assert_eq!(r.turns.len(), sc.turns.len(), "call {seed}");
        for t in &r.turns {
            assert!(t.agent_start_ms.is_some(), "call {seed}: {t:#?}");
        }
        let faults = o
            .store
            .connections()
            .iter()
            .filter(|c| c.fault.is_some())
            .count();
        assert_eq!(
            faults,
            r.reconnects.len(),
            "call {seed}: one reconnect per fault"
        );
        for c in &r.reconnects {
            // The mock refuses a resume while the old socket is open (1011): one try means
            // baton closed it first.
            assert_eq!(c.attempts, 1, "call {seed}: {c:?}");
            if c.cause == "go_away" {
                go_aways += 1;
            } else {
                drops += 1;
            }
        }
        records.extend(r.reconnects.iter().cloned());
    }
    assert!(
        drops >= 100 && go_aways >= 100,
        "{drops} drops, {go_aways} goAways"
    );

    // The gap: when model audio still queued could cover the switch (more than the model's
    // first-audio latency and a tick), the caller hears no silence from it.
    let covered: Vec<f64> = records
        .iter()
        .filter(|c| c.model_audio_queued_ms >= 340.0)
        .filter_map(|c| c.gap_ms)
        .collect();
    let all: Vec<f64> = records.iter().filter_map(|c| c.gap_ms).collect();
    let replayed: Vec<f64> = records.iter().map(|c| c.audio_replayed_ms).collect();
    println!(
        "reconnects {} ({drops} drops, {go_aways} goAways); reconnect_gap_ms all {:?}, covered ({}) {:?}; audio_replayed_ms {:?} (total {}; heard twice by the mock {duplicated_ms}); audio_lost_ms total {}",
        records.len(),
        summarize(&all),
        covered.len(),
        summarize(&covered),
        summarize(&replayed),
        replayed.iter().sum::<f64>(),
        records.iter().map(|c| c.audio_lost_ms).sum::<f64>()
    );
    for (name, go_away) in [("drops", false), ("goAways", true)] {
        let of: Vec<_> = records
            .iter()
            .filter(|c| (c.cause == "go_away") == go_away)
            .collect();
        let gaps: Vec<f64> = of.iter().filter_map(|c| c.gap_ms).collect();
        let replay: Vec<f64> = of.iter().map(|c| c.audio_replayed_ms).collect();
        let lost: f64 = of.iter().map(|c| c.audio_lost_ms).sum();
        println!(
            "{name}: {} reconnects; reconnect_gap_ms {:?}; audio_replayed_ms {:?}; audio_lost_ms total {lost}",
            of.len(),
            summarize(&gaps),
            summarize(&replay)
        );
    }
    assert!(!covered.is_empty());
    let p95 = percentile(&covered, 95.0).unwrap_or(f64::MAX);
    assert!(p95 <= 20.0, "reconnect_gap_ms p95 {p95} with audio queued");
}
