//! A reconnect in a multi-agent call carries the current agent: after advisor Asha has handed
//! the caller to schemes specialist Ravi (seed 000), the socket drops while the caller speaks to
//! Ravi; the resumed session — and, when the resume is refused, the fresh one — is set up as Ravi,
//! answers in Ravi's voice, and the later handback to Asha still happens.

use crate::resume_support;

use std::time::Duration;

use baton::mock::Faults;
use baton::mock::faults::{DropRule, Ending, When};
use resume_support::*;

fn seed000_caller() -> Vec<i16> {
    let wav = baton::audio::wav::read(
        &std::path::Path::new(ROOT).join("audio-fixtures/clips/seed000/caller_conversation.wav"),
    )
    .unwrap();
    dither(wav.samples)
}

#[tokio::test(start_paused = true)]
async fn a_reconnect_after_a_handoff_keeps_the_specialist() {
    let sc = scenario("seed000");
    let samples = seed000_caller();
    for refuse_resume in [false, true] {
        let faults = Faults {
            // Caller turn 3 (19.56–21.32 s) is to Ravi.
            drops: vec![DropRule {
                when: When::MidCallerUtterance,
                after: (Duration::from_secs(20), Duration::from_secs(20)),
                ending: Ending::Close(1011),
                every_connection: false,
            }],
            refuse_resume,
            ..Faults::default()
        };
        let o = run_agent_call(&sc, faults, &samples).await;
        let r = &o.report;
        let case = if refuse_resume { "reseeded" } else { "resumed" };
        assert_eq!(r.end_reason, "caller hung up", "{case}");
        assert_eq!(r.reconnects.len(), 1, "{case}: {:?}", r.reconnects);
        assert_eq!(r.reconnects[0].outcome, case);
        assert_eq!(r.reconnects[0].audio_lost_ms, 0.0);
        let speakers: Vec<&str> = r.turns.iter().map(|t| t.agent.as_str()).collect();
        assert_eq!(
            speakers,
            ["advisor", "advisor", "schemes", "schemes", "advisor"],
            "{case}: {:#?}",
            r.turns
        );
        // The session after the drop spoke Ravi's scripted answer to turn 3.
        let conns = o.store.connections();
        let after = conns.last().expect("connections");
        assert!(
            after.said.contains(&sc.turns[2].reply.text),
            "{case}: {:#?}",
            conns
        );
        if refuse_resume {
            assert!(
                after.history_turns > 0 && !after.greeted,
                "{case}: {after:#?}"
            );
        }
        let (got, cuts) = received(&o.store);
        let check = check_audio(&got, &cuts, &samples);
        assert_eq!(
            (check.lost_frames, check.misordered),
            (0, 0),
            "{case}: {check:?}"
        );
    }
}
