//! The bundled call through `baton serve` from a Twilio-protocol caller, in real time. In a test
//! binary of its own so no other test shares the machine's two cores while cadence is measured.

use crate::support;

use std::path::Path;

use baton::leg::twilio::caller::{self, CallerEnd, CallerOptions};
use support::{Daemon, ROOT, voiced_segments};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bundled_call_over_twilio_in_real_time() {
    let d = Daemon::start(&support::mock_config(
        "audio-fixtures/scenarios/demo.toml",
        "",
    ))
    .await;
    let opts = CallerOptions::from_wav(
        &Path::new(ROOT).join("audio-fixtures/clips/caller_conversation.wav"),
    )
    .unwrap();
    let report = caller::dial(&d.twilio_url(), opts).await.unwrap();
    assert_eq!(report.end, CallerEnd::HungUp, "{report:?}");
    assert_eq!(report.bad_messages, 0, "{:?}", report.errors);
    // Every agent reply is in what the caller heard, one voiced stretch per turn.
    let segs = voiced_segments(&report.recording.agent, 8000);
    assert_eq!(segs.len(), 4, "agent speech segments heard: {segs:?}");
    // Outbound media paced at real time, one frame per 20 ms tick, not sent in bursts: within
    // the agent's bursts of speech the frames arrive about 20 ms apart on average (a pacer that
    // bursts gives ~0). A loaded machine can only stretch a burst's span, hardly shrink it, so
    // this is behaviour, not speed; how evenly they arrive (20 ± 5 ms p99) is a performance
    // figure, measured by `baton bench load` and not asserted here.
    assert!(report.cadence.intervals > 400, "{:?}", report.cadence);
    eprintln!("outbound cadence as received: {:?}", report.cadence);
    let mean_us = report
        .intervals_us
        .iter()
        .map(|&u| u64::from(u))
        .sum::<u64>()
        / report.intervals_us.len() as u64;
    assert!(
        mean_us >= 15_000,
        "frames came in bursts: mean interval {mean_us} µs"
    );
    // A mark per outbound chunk, all of them echoed back once played.
    assert!(report.marks_received > 400);
    assert_eq!(report.marks_echoed, report.marks_received);
    assert_eq!(report.clears_received, 0);
    d.stop().await;
}
