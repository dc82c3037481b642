//! The reconnect machine on a hand-driven clock.

use super::*;
use crate::model::ToolCallRequest;

fn ms_(n: u64) -> Duration {
    Duration::from_millis(n)
}

struct H {
    r: Reconnector<u64>,
    t0: Instant,
    now: Instant,
    frame: u64,
}

impl H {
    fn new() -> H {
        let t0 = Instant::now();
        H {
            r: Reconnector::new(ReconnectPolicy::default(), t0),
            t0,
            now: t0,
            frame: 0,
        }
    }
    fn at(&mut self, ms: u64) {
        self.now = self.t0 + ms_(ms);
        if self.r.poll_timeout().is_some_and(|t| t <= self.now) {
            self.r.handle_timeout(self.now);
        }
    }
    fn ev(&mut self, e: ModelEvent) {
        self.r.on_model_event(&e, self.now);
    }
    fn handle(&mut self, h: &str) {
        self.ev(ModelEvent::ResumptionUpdate {
            handle: Some(h.into()),
            resumable: true,
        });
    }
    /// One 20 ms uplink frame named by its number; returns what goes to the socket now.
    fn up(&mut self) -> Option<u64> {
        self.frame += 1;
        let f = self.frame;
        self.r.on_uplink(&[f], ms_(20), self.now).then_some(f)
    }
    fn actions(&mut self) -> Vec<Action> {
        std::iter::from_fn(|| self.r.poll_action()).collect()
    }
    /// Caller audio for `ms`, one frame per 20 ms of clock.
    fn talk(&mut self, ms: u64) -> Vec<Option<u64>> {
        let start = self.now - self.t0;
        (0..ms / 20)
            .map(|i| {
                self.at(start.as_millis() as u64 + i * 20 + 20);
                self.up()
            })
            .collect()
    }
}

fn audio() -> ModelEvent {
    ModelEvent::Audio {
        rate: 24_000,
        samples: vec![0; 480],
    }
}

#[test]
fn go_away_waits_for_a_quiet_point_then_closes_before_resuming() {
    let mut h = H::new();
    h.handle("h1");
    h.talk(1000);
    h.ev(audio());
    h.ev(ModelEvent::GoAway {
        time_left: Some(Duration::from_secs(50)),
    });
    assert!(h.actions().is_empty(), "the model is speaking");
    assert_eq!(h.r.poll_timeout(), Some(h.now + Duration::from_secs(45)));
    h.ev(ModelEvent::GenerationComplete);
    assert!(h.actions().is_empty(), "no fresh handle yet");
    h.ev(ModelEvent::TurnComplete);
    h.handle("h2");
    assert_eq!(h.actions(), [Action::CloseCurrent]);
    // Caller audio during the switch is kept, not sent.
    assert_eq!(h.talk(100), vec![None; 5]);
    // The old socket closes; only then the resume.
    h.r.on_old_closed(h.now);
    assert_eq!(
        h.actions(),
        [Action::Open {
            handle: Some("h2".into())
        }]
    );
    let replay = h.r.on_opened(h.now);
    // h2 arrived at 1000 ms and covers frames handed by 500 ms; 500..1000 ms is replayed.
    assert_eq!(replay.first(), Some(&26));
    assert_eq!(replay.len(), 25 + 5);
    let rec = &h.r.records()[0];
    assert_eq!(
        (rec.cause.as_str(), rec.outcome.as_str(), rec.attempts),
        ("go_away", "resumed", 1)
    );
    assert_eq!(rec.audio_replayed_ms, 500.0);
    assert_eq!(rec.audio_lost_ms, 0.0);
    assert!(h.r.is_live());
    assert!(h.up().is_some());
}

#[test]
fn go_away_at_a_quiet_point_switches_at_once() {
    let mut h = H::new();
    h.handle("h1");
    h.ev(ModelEvent::GoAway {
        time_left: Some(Duration::from_secs(50)),
    });
    assert_eq!(h.actions(), [Action::CloseCurrent]);
}

#[test]
fn a_server_silent_after_go_away_is_left_at_the_deadline() {
    let mut h = H::new();
    h.handle("h1");
    h.ev(audio());
    h.ev(ModelEvent::GoAway {
        time_left: Some(Duration::from_secs(4)),
    });
    // The margin is capped at half of timeLeft: the deadline is 2 s away.
    h.at(1999);
    assert!(h.actions().is_empty());
    h.at(2000);
    assert_eq!(h.actions(), [Action::CloseCurrent]);
    // The old socket never reports its end: after close_wait the resume goes ahead.
    h.at(3000);
    assert_eq!(
        h.actions(),
        [Action::Open {
            handle: Some("h1".into())
        }]
    );
}

#[test]
fn a_drop_resumes_at_once_then_backs_off_then_reseeds() {
    let mut h = H::new();
    h.handle("h1");
    h.talk(200);
    h.r.on_session_lost(Cause::Closed(Some(1011)), h.now);
    assert_eq!(
        h.actions(),
        [Action::Open {
            handle: Some("h1".into())
        }],
        "the first try has no backoff"
    );
    h.r.on_open_failed(OpenFailure::Other, h.now);
    assert!(h.actions().is_empty());
    let t = h.now - h.t0;
    h.at(t.as_millis() as u64 + 99);
    assert!(h.actions().is_empty());
    h.at(t.as_millis() as u64 + 100);
    assert_eq!(h.actions().len(), 1, "second try after 100 ms");
    h.r.on_open_failed(OpenFailure::Other, h.now);
    h.at(t.as_millis() as u64 + 500);
    assert_eq!(h.actions().len(), 1, "third try after 400 ms more");
    h.r.on_open_failed(OpenFailure::Other, h.now);
    h.at(t.as_millis() as u64 + 900);
    assert_eq!(
        h.actions(),
        [Action::Open { handle: None }],
        "budget spent: a fresh session"
    );
    let replay = h.r.on_opened(h.now);
    assert_eq!(
        replay.len(),
        10,
        "all 200 ms since h1 (younger than the margin)"
    );
    let rec = &h.r.records()[0];
    assert_eq!(
        (rec.cause.as_str(), rec.outcome.as_str(), rec.attempts),
        ("closed:1011", "reseeded", 4)
    );
    assert_eq!(h.r.handle(), None);
}

#[test]
fn a_refused_handle_is_dropped_at_once() {
    let mut h = H::new();
    h.handle("h1");
    h.r.on_session_lost(Cause::Closed(None), h.now);
    assert_eq!(h.actions().len(), 1);
    h.r.on_open_failed(OpenFailure::HandleRefused, h.now);
    assert_eq!(h.actions(), [Action::Open { handle: None }]);
    h.r.on_opened(h.now);
    assert_eq!(h.r.records()[0].cause, "closed:1006");
}

#[test]
fn every_try_failing_gives_up_and_counts_the_audio_lost() {
    let mut h = H::new();
    h.talk(100);
    h.r.on_session_lost(Cause::Dead, h.now);
    for i in 0..2 {
        assert_eq!(
            h.actions(),
            [Action::Open { handle: None }],
            "fresh try {i}"
        );
        h.r.on_open_failed(OpenFailure::Other, h.now);
        h.at((h.now - h.t0).as_millis() as u64 + 1000);
    }
    match h.actions().as_slice() {
        [Action::GiveUp { reason }] => assert!(reason.contains("dead_socket"), "{reason}"),
        other => panic!("{other:?}"),
    }
    assert!(h.r.failed());
    assert_eq!(h.r.records()[0].outcome, "failed");
    assert_eq!(h.r.records()[0].audio_lost_ms, 100.0);
}

#[test]
fn an_outstanding_tool_call_delays_the_switch_and_a_dropped_one_is_abandoned() {
    let mut h = H::new();
    h.handle("h1");
    let call = |id: &str| {
        ModelEvent::ToolCall(vec![ToolCallRequest {
            id: id.into(),
            name: "lookup".into(),
            args: serde_json::json!({}),
        }])
    };
    h.ev(audio());
    h.ev(ModelEvent::GoAway {
        time_left: Some(Duration::from_secs(50)),
    });
    h.ev(call("c1"));
    h.ev(ModelEvent::TurnComplete);
    h.handle("h2");
    // A resumable handle means the service has no call executing.
    assert_eq!(h.actions(), [Action::CloseCurrent]);

    let mut h = H::new();
    h.handle("h1");
    h.ev(audio());
    h.ev(ModelEvent::GoAway {
        time_left: Some(Duration::from_secs(50)),
    });
    h.ev(call("c2"));
    h.ev(ModelEvent::TurnComplete);
    assert!(h.actions().is_empty(), "c2 unanswered");
    h.r.on_tool_responded(["c2"], h.now);
    assert!(h.actions().is_empty(), "still no fresh handle");
    h.ev(call("c3"));
    h.r.on_session_lost(Cause::Closed(Some(1008)), h.now);
    assert_eq!(h.r.abandoned_calls(), ["c3"]);
    assert_eq!(h.r.records().len(), 0);
    h.actions();
    h.r.on_opened(h.now);
    assert_eq!(h.r.records()[0].cause, "go_away", "dropped while draining");
}

#[test]
fn frames_are_covered_only_by_handles_of_the_session_that_had_them() {
    let mut h = H::new();
    h.talk(2000);
    assert_eq!(h.r.kept(), ms_(2000));
    h.handle("h1");
    assert_eq!(h.r.kept(), ms_(500), "the margin's worth stays");
    // A handoff swapped the session: its handles say nothing about earlier frames.
    h.r.on_session_replaced(h.now);
    assert_eq!(h.r.kept(), ms_(0));
    h.talk(1000);
    h.handle("h2");
    assert_eq!(h.r.kept(), ms_(500));
    assert_eq!(h.r.handle(), Some("h2"));
}

#[test]
fn a_full_ring_loses_audio_only_if_no_handle_covers_it() {
    let policy = ReconnectPolicy {
        max_replay: ms_(1000),
        ..Default::default()
    };
    let t0 = Instant::now();
    let mut h = H {
        r: Reconnector::new(policy, t0),
        t0,
        now: t0,
        frame: 0,
    };
    h.talk(3000);
    assert_eq!(h.r.kept(), ms_(1000));
    h.handle("h1");
    h.r.on_session_lost(Cause::Closed(Some(1011)), h.now);
    h.actions();
    h.r.on_opened(h.now);
    assert_eq!(
        h.r.records()[0].audio_lost_ms,
        0.0,
        "h1 covered the evicted audio"
    );

    let mut h = H {
        r: Reconnector::new(
            ReconnectPolicy {
                max_replay: ms_(1000),
                ..Default::default()
            },
            t0,
        ),
        t0,
        now: t0,
        frame: 0,
    };
    h.talk(3000);
    h.r.on_session_lost(Cause::Closed(Some(1011)), h.now);
    h.actions();
    h.r.on_opened(h.now);
    assert_eq!(h.r.records()[0].audio_lost_ms, 2000.0);
    assert_eq!(h.r.records()[0].audio_replayed_ms, 1000.0);
}

#[test]
fn time_never_goes_backwards() {
    let mut h = H::new();
    h.at(1000);
    h.ev(ModelEvent::GoAway {
        time_left: Some(Duration::from_secs(10)),
    });
    let deadline = h.r.poll_timeout();
    h.r.on_uplink(&[0], ms_(20), h.t0);
    h.r.handle_timeout(h.t0);
    assert_eq!(h.r.poll_timeout(), deadline);
    assert!(h.actions().is_empty());
}

#[test]
fn a_handle_covers_a_frame_no_earlier_than_by_its_exact_instant() {
    // The ring keeps when a frame was handed in whole milliseconds, rounded up: a frame handed
    // at 10.5 ms is covered by a handle at 510.5 ms (margin 500) only once 511 ms is reached.
    let sub = Duration::from_micros(10_500);
    let replay_after = |handle_at: Duration| {
        let mut h = H::new();
        h.handle("h0");
        h.now = h.t0 + sub;
        assert_eq!(h.up(), Some(1));
        h.now = h.t0 + handle_at;
        h.handle("h1");
        h.r.on_session_lost(Cause::Closed(None), h.now);
        assert!(matches!(h.actions()[..], [Action::Open { .. }]));
        h.r.on_opened(h.now)
    };
    assert_eq!(
        replay_after(sub + ms_(500)),
        [1],
        "kept: 10.5 ms rounds up to 11"
    );
    assert_eq!(
        replay_after(ms_(511)),
        Vec::<u64>::new(),
        "covered at 511 ms"
    );
    assert_eq!(replay_after(ms_(510)), [1], "not yet covered at 510 ms");
}
