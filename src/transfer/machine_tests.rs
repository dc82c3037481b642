//! The transfer state machine on a virtual clock: every outcome, and every race the outcome
//! depends on (the caller hanging up while the person's phone rings, during the brief, at the
//! same instant as the answer; the ring timeout meeting the answer).

use std::time::{Duration, Instant};

use super::amd::Verdict;
use super::destination::{Destination, OnNoAnswer};
use super::machine::*;
use super::timers::Timer;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

fn priya() -> Destination {
    Destination::Sip("sip:priya@pbx.example.com".into())
}

struct Run {
    t: Transfer,
    t0: Instant,
    actions: Vec<Action>,
    events: Vec<Event>,
}

impl Run {
    fn new(plan: Plan, settings: Settings) -> Run {
        let t0 = Instant::now();
        let mut r = Run {
            t: Transfer::new(plan, priya(), settings, t0),
            t0,
            actions: Vec::new(),
            events: Vec::new(),
        };
        r.drain();
        r
    }
    fn warm() -> Run {
        Run::new(Plan::Warm, Settings::default())
    }
    fn at(&self, n: u64) -> Instant {
        self.t0 + ms(n)
    }
    fn drain(&mut self) -> Vec<Action> {
        let mut new = Vec::new();
        while let Some(a) = self.t.poll_action() {
            new.push(a);
        }
        while let Some(e) = self.t.poll_event() {
            self.events.push(e);
        }
        self.actions.extend(new.iter().cloned());
        new
    }
    /// Feeds `input` at `n` ms and returns the actions it caused.
    fn feed(&mut self, input: Input<'_>, n: u64) -> Vec<Action> {
        let now = self.at(n);
        self.t.handle(input, now);
        self.drain()
    }
    /// Advances the clock to `n` ms, firing timers the way a shell does: sleep to the next
    /// deadline, fire, repeat.
    fn advance(&mut self, n: u64) -> Vec<Action> {
        let end = self.at(n);
        let mut out = Vec::new();
        while let Some((at, _)) = self.t.poll_timeout() {
            if at > end {
                break;
            }
            self.t.handle_timeout(at);
            out.extend(self.drain());
        }
        out
    }
    fn reports(&self) -> Vec<&Report> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::Finished(r) => Some(r),
                _ => None,
            })
            .collect()
    }
    fn report(&self) -> &Report {
        let r = self.reports();
        assert_eq!(r.len(), 1, "exactly one outcome: {:?}", self.events);
        r[0]
    }
    fn count(&self, f: impl Fn(&Action) -> bool) -> usize {
        self.actions.iter().filter(|a| f(a)).count()
    }
    fn cancels(&self) -> usize {
        self.count(|a| *a == Action::CancelPerson)
    }
    fn byes(&self) -> usize {
        self.count(|a| *a == Action::HangUpPerson)
    }
    fn dead_air(&self) -> Vec<(u64, bool)> {
        self.events
            .iter()
            .filter_map(|e| match e {
                Event::DeadAir { ms, capped } => Some((*ms, *capped)),
                _ => None,
            })
            .collect()
    }
}

fn returned(outcome: Outcome) -> Action {
    Action::ReturnToAgent { outcome }
}

#[test]
fn warm_answered_briefed_accepted_bridged() {
    let mut r = Run::warm();
    assert_eq!(
        r.actions,
        vec![
            Action::RoutePersonAudio(PersonAudio::Discard),
            Action::Dial {
                target: priya(),
                ring_timeout: Duration::from_secs(30)
            }
        ]
    );
    assert_eq!(r.t.stage(), Stage::Dialing);
    assert_eq!(
        r.t.poll_timeout(),
        Some((r.at(30_000), Timer::Ring)),
        "the ring timeout runs from the request"
    );
    assert!(r.feed(Input::Ringing, 200).is_empty());
    assert_eq!(r.t.stage(), Stage::Ringing);
    assert!(r.feed(Input::EarlyMedia, 2_200).is_empty());
    assert_eq!(
        r.feed(Input::Answered, 5_200),
        vec![
            Action::RoutePersonAudio(PersonAudio::Brief),
            Action::StartBrief
        ]
    );
    assert_eq!(
        r.t.poll_timeout(),
        None,
        "the ring timer is disarmed on answer"
    );
    assert!(r.feed(Input::BriefPlayed, 9_000).is_empty());
    assert_eq!(r.t.stage(), Stage::Deciding);
    assert_eq!(r.t.poll_timeout(), Some((r.at(24_000), Timer::Decision)));
    assert_eq!(
        r.feed(Input::Accepted, 10_000),
        vec![
            Action::RoutePersonAudio(PersonAudio::Caller),
            Action::Bridge
        ]
    );
    assert_eq!(r.t.stage(), Stage::Bridged);
    assert_eq!(r.t.person_audio(), PersonAudio::Caller);
    let report = r.report().clone();
    assert_eq!(report.outcome, Outcome::Connected);
    // Request at 0, ringing from 200, answer at 5200: 5200 − 5000 of ringing.
    assert_eq!(report.setup_ms, Some(200));
    assert_eq!(report.ring_ms, Some(5_000));
    assert_eq!(report.total_ms, 10_000);
    // The first audible frame to the caller after the bridge closes the dead-air window.
    r.t.handle_caller_frame(false, r.at(10_000));
    r.t.handle_caller_frame(false, r.at(10_020));
    r.t.handle_caller_frame(true, r.at(10_040));
    r.drain();
    assert_eq!(r.dead_air(), vec![(40, false)]);
    assert_eq!(r.t.dead_air(), ms(40));
    r.t.handle_caller_frame(false, r.at(10_060));
    r.t.handle_caller_frame(true, r.at(10_080));
    r.drain();
    assert_eq!(r.dead_air().len(), 1, "one window per switch");
    assert!(
        !r.t.is_over(),
        "bridged: the transfer still owns the person's leg"
    );
    // The caller hangs up on the bridged call: BYE to the person, and no second outcome.
    assert_eq!(
        r.feed(Input::CallerHungUp, 60_000),
        vec![
            Action::HangUpPerson,
            Action::RoutePersonAudio(PersonAudio::Discard)
        ]
    );
    assert_eq!(r.reports().len(), 1);
    assert!(r.t.is_over());
    let stages: Vec<Stage> = r
        .events
        .iter()
        .filter_map(|e| match e {
            Event::Stage { stage } => Some(*stage),
            _ => None,
        })
        .collect();
    assert_eq!(
        stages,
        vec![
            Stage::Dialing,
            Stage::Ringing,
            Stage::Briefing,
            Stage::Deciding,
            Stage::Bridged,
            Stage::Done
        ]
    );
}

#[test]
fn nothing_from_the_person_reaches_the_model_before_the_answer() {
    let mut r = Run::warm();
    for (i, input) in [
        Input::Ringing,
        Input::EarlyMedia,
        Input::Ringing,
        Input::EarlyMedia,
        // Not possible before an answer; must change nothing.
        Input::Accepted,
        Input::BriefPlayed,
        Input::Screened(Verdict::Human),
    ]
    .into_iter()
    .enumerate()
    {
        let acts = r.feed(input, 100 * i as u64);
        assert!(acts.is_empty(), "{acts:?}");
        assert_eq!(r.t.person_audio(), PersonAudio::Discard);
    }
    assert_eq!(r.t.stage(), Stage::Ringing);
    r.feed(Input::Answered, 3_000);
    assert_eq!(r.t.person_audio(), PersonAudio::Brief);
}

#[test]
fn accept_by_key_during_the_brief() {
    let mut r = Run::warm();
    r.feed(Input::Answered, 1_000);
    assert_eq!(
        r.feed(Input::Accepted, 2_000),
        vec![
            Action::RoutePersonAudio(PersonAudio::Caller),
            Action::Bridge
        ]
    );
    assert_eq!(r.report().outcome, Outcome::Connected);
    // No ringing seen: the whole wait counts as setup.
    assert_eq!(r.report().setup_ms, Some(1_000));
    assert_eq!(r.report().ring_ms, None);
}

#[test]
fn declined_after_the_brief() {
    let mut r = Run::warm();
    r.feed(Input::Ringing, 100);
    r.feed(Input::Answered, 4_000);
    r.feed(Input::BriefPlayed, 8_000);
    assert_eq!(
        r.feed(Input::Declined, 9_000),
        vec![
            Action::HangUpPerson,
            Action::RoutePersonAudio(PersonAudio::Discard),
            returned(Outcome::Declined)
        ]
    );
    assert_eq!(r.t.stage(), Stage::Done);
    // The agent was talking throughout: its next frame closes the window at once.
    r.t.handle_caller_frame(true, r.at(9_000));
    r.drain();
    assert_eq!(r.dead_air(), vec![(0, false)]);
    assert!(r.t.is_over());
    // Nothing after the end changes anything.
    assert!(r.feed(Input::Accepted, 9_500).is_empty());
    assert!(r.feed(Input::PersonHungUp, 9_600).is_empty());
    assert_eq!(r.byes(), 1);
}

#[test]
fn final_statuses_are_classified() {
    for (status, outcome) in [
        (486, Outcome::Busy { status: 486 }),
        (600, Outcome::Busy { status: 600 }),
        (603, Outcome::Declined),
        (480, Outcome::NoAnswer { status: Some(480) }),
        (408, Outcome::NoAnswer { status: Some(408) }),
        (
            404,
            Outcome::Rejected {
                status: 404,
                reason: "Not Found".into(),
            },
        ),
    ] {
        let mut r = Run::warm();
        r.feed(Input::Ringing, 100);
        let reason = if status == 404 { "Not Found" } else { "x" };
        let acts = r.feed(Input::Rejected { status, reason }, 1_500);
        assert_eq!(
            acts.last(),
            Some(&returned(outcome.clone())),
            "{status}: {acts:?}"
        );
        assert_eq!(r.cancels() + r.byes(), 0, "{status}: the leg ended itself");
        let report = r.report();
        assert_eq!(
            (report.outcome.clone(), report.status),
            (outcome, Some(status))
        );
        assert_eq!(report.setup_ms, None);
        assert_eq!(report.ring_ms, Some(1_400));
        assert_eq!(r.t.poll_timeout().map(|(_, t)| t), Some(Timer::DeadAir));
    }
}

#[test]
fn rings_out() {
    let mut r = Run::warm();
    r.feed(Input::Ringing, 300);
    assert!(r.advance(29_999).is_empty());
    assert_eq!(
        r.advance(30_000),
        vec![
            Action::CancelPerson,
            returned(Outcome::NoAnswer { status: None })
        ]
    );
    assert_eq!(r.report().ring_ms, Some(29_700));
    assert!(!r.t.is_over(), "the CANCEL has no answer yet");
    // The 487 to our CANCEL ends the leg quietly.
    assert!(
        r.feed(
            Input::Rejected {
                status: 487,
                reason: "Request Terminated"
            },
            30_050
        )
        .is_empty()
    );
    r.t.handle_caller_frame(true, r.at(30_060));
    r.drain();
    assert!(r.t.is_over());
    assert_eq!(r.reports().len(), 1);
}

#[test]
fn no_answer_goes_where_configured() {
    for (on, expect) in [
        (
            OnNoAnswer::Agent("front_desk".into()),
            Action::HandTo {
                agent: "front_desk".into(),
                outcome: Outcome::NoAnswer { status: None },
            },
        ),
        (
            OnNoAnswer::HangUp,
            Action::EndCall {
                outcome: Outcome::NoAnswer { status: None },
            },
        ),
    ] {
        let settings = Settings {
            on_no_answer: on,
            ring_timeout: ms(10_000),
            ..Settings::default()
        };
        let mut r = Run::new(Plan::Warm, settings);
        assert_eq!(r.advance(10_000), vec![Action::CancelPerson, expect]);
        // Declines are not "no answer": they return to the agent whatever is configured.
    }
    let settings = Settings {
        on_no_answer: OnNoAnswer::HangUp,
        ..Settings::default()
    };
    let mut r = Run::new(Plan::Warm, settings);
    let acts = r.feed(
        Input::Rejected {
            status: 486,
            reason: "Busy Here",
        },
        500,
    );
    assert_eq!(acts.last(), Some(&returned(Outcome::Busy { status: 486 })));
}

#[test]
fn sip_and_rest_failures_are_typed() {
    let mut r = Run::warm();
    let failure = Failure::Sip {
        message: "transaction timed out".into(),
    };
    let acts = r.feed(Input::Failed(failure.clone()), 32_000);
    assert_eq!(acts.last(), Some(&returned(Outcome::Failed { failure })));
    assert_eq!(r.cancels() + r.byes(), 0);
}

#[test]
fn caller_hangs_up_while_the_phone_rings() {
    for ringing in [false, true] {
        let mut r = Run::warm();
        if ringing {
            r.feed(Input::Ringing, 100);
        }
        assert_eq!(
            r.feed(Input::CallerHungUp, 2_000),
            vec![Action::CancelPerson],
            "CANCEL before the answer"
        );
        let stage = if ringing {
            Stage::Ringing
        } else {
            Stage::Dialing
        };
        assert_eq!(r.report().outcome, Outcome::CallerHungUp { stage });
        assert_eq!(r.t.poll_timeout(), None, "nothing left to time");
        // The usual end: 487 to the INVITE.
        assert!(
            r.feed(
                Input::Rejected {
                    status: 487,
                    reason: ""
                },
                2_050
            )
            .is_empty()
        );
        assert!(r.t.is_over());
    }
}

#[test]
fn a_200_crossing_the_cancel_is_hung_up() {
    let mut r = Run::warm();
    r.feed(Input::Ringing, 100);
    r.feed(Input::CallerHungUp, 2_000);
    assert_eq!(r.feed(Input::Answered, 2_010), vec![Action::HangUpPerson]);
    assert_eq!(r.t.person_audio(), PersonAudio::Discard);
    assert!(r.t.is_over());
    // A retransmitted 200 changes nothing more.
    assert!(r.feed(Input::Answered, 2_500).is_empty());
    assert_eq!((r.cancels(), r.byes()), (1, 1));
    assert_eq!(
        r.report().outcome,
        Outcome::CallerHungUp {
            stage: Stage::Ringing
        }
    );
}

#[test]
fn caller_hangs_up_at_the_same_instant_as_the_answer() {
    // Either order at the same instant leaves the person's leg hung up exactly once.
    let mut answer_first = Run::warm();
    answer_first.feed(Input::Ringing, 100);
    answer_first.feed(Input::Answered, 3_000);
    answer_first.feed(Input::CallerHungUp, 3_000);
    assert_eq!((answer_first.cancels(), answer_first.byes()), (0, 1));
    assert_eq!(
        answer_first.report().outcome,
        Outcome::CallerHungUp {
            stage: Stage::Briefing
        }
    );

    let mut hangup_first = Run::warm();
    hangup_first.feed(Input::Ringing, 100);
    hangup_first.feed(Input::CallerHungUp, 3_000);
    hangup_first.feed(Input::Answered, 3_000);
    assert_eq!((hangup_first.cancels(), hangup_first.byes()), (1, 1));
    assert_eq!(
        hangup_first.report().outcome,
        Outcome::CallerHungUp {
            stage: Stage::Ringing
        }
    );
    for r in [&answer_first, &hangup_first] {
        assert!(r.t.is_over());
        assert_eq!(r.t.person_audio(), PersonAudio::Discard);
        assert_eq!(r.count(|a| *a == Action::Bridge), 0);
    }
}

#[test]
fn caller_hangs_up_during_the_brief_and_the_decision() {
    for after_brief in [false, true] {
        let mut r = Run::warm();
        r.feed(Input::Answered, 2_000);
        if after_brief {
            r.feed(Input::BriefPlayed, 6_000);
        }
        assert_eq!(
            r.feed(Input::CallerHungUp, 7_000),
            vec![
                Action::HangUpPerson,
                Action::RoutePersonAudio(PersonAudio::Discard)
            ],
            "BYE after the answer"
        );
        let stage = if after_brief {
            Stage::Deciding
        } else {
            Stage::Briefing
        };
        assert_eq!(r.report().outcome, Outcome::CallerHungUp { stage });
        assert_eq!(r.report().setup_ms, Some(2_000));
        assert!(r.t.is_over());
        assert!(
            r.feed(Input::Accepted, 7_100).is_empty(),
            "no bridge to nobody"
        );
    }
}

#[test]
fn ring_timeout_meets_the_answer() {
    // The timer fires first: CANCEL, then the crossing 200 gets its BYE; the outcome stays.
    let mut r = Run::warm();
    r.advance(30_000);
    assert_eq!(r.feed(Input::Answered, 30_000), vec![Action::HangUpPerson]);
    assert_eq!(r.report().outcome, Outcome::NoAnswer { status: None });
    assert_eq!((r.cancels(), r.byes()), (1, 1));
    // The answer comes first: the timer is disarmed and the brief starts.
    let mut r = Run::warm();
    r.feed(Input::Answered, 30_000);
    assert!(r.advance(30_000).is_empty());
    assert_eq!(r.t.stage(), Stage::Briefing);
}

#[test]
fn person_hangs_up_during_the_brief() {
    for after_brief in [false, true] {
        let mut r = Run::warm();
        r.feed(Input::Answered, 2_000);
        if after_brief {
            r.feed(Input::BriefPlayed, 6_000);
        }
        let stage = r.t.stage();
        assert_eq!(
            r.feed(Input::PersonHungUp, 6_500),
            vec![
                Action::RoutePersonAudio(PersonAudio::Discard),
                returned(Outcome::PersonHungUp { stage })
            ]
        );
        assert_eq!(r.byes(), 0, "their BYE ended the leg");
        // The caller hanging up afterwards has nothing left to release.
        assert!(r.feed(Input::CallerHungUp, 7_000).is_empty());
    }
}

#[test]
fn person_hangs_up_on_the_bridged_call() {
    let mut r = Run::warm();
    r.feed(Input::Answered, 2_000);
    r.feed(Input::Accepted, 3_000);
    assert_eq!(
        r.feed(Input::PersonHungUp, 90_000),
        vec![
            Action::RoutePersonAudio(PersonAudio::Discard),
            Action::HangUpCaller
        ]
    );
    assert_eq!(r.report().outcome, Outcome::Connected);
    assert!(r.feed(Input::CallerHungUp, 90_010).is_empty());
}

#[test]
fn the_bridged_leg_fails() {
    let mut r = Run::warm();
    r.feed(Input::Answered, 2_000);
    r.feed(Input::Accepted, 3_000);
    let failure = Failure::Sip {
        message: "no RTP for 30 s".into(),
    };
    assert_eq!(
        r.feed(Input::Failed(failure), 90_000),
        vec![
            Action::RoutePersonAudio(PersonAudio::Discard),
            Action::HangUpCaller
        ]
    );
    assert_eq!(r.report().outcome, Outcome::Connected, "the outcome stands");
    assert!(r.feed(Input::CallerHungUp, 90_010).is_empty());
}

#[test]
fn nobody_decides() {
    let mut r = Run::warm();
    r.feed(Input::Answered, 2_000);
    r.feed(Input::BriefPlayed, 6_000);
    assert!(r.advance(20_999).is_empty());
    assert_eq!(
        r.advance(21_000),
        vec![
            Action::HangUpPerson,
            Action::RoutePersonAudio(PersonAudio::Discard),
            returned(Outcome::NoDecision)
        ]
    );
}

#[test]
fn screening_before_the_brief() {
    let screened = Settings {
        screen: Some(ms(6_000)),
        ..Settings::default()
    };
    // A machine: hung up, back to the agent.
    let mut r = Run::new(Plan::Warm, screened.clone());
    assert_eq!(
        r.feed(Input::Answered, 4_000),
        vec![Action::RoutePersonAudio(PersonAudio::Screen)]
    );
    assert_eq!(r.t.stage(), Stage::Screening);
    assert!(
        r.feed(Input::Accepted, 4_500).is_empty(),
        "no accept before the brief"
    );
    assert_eq!(
        r.feed(Input::Screened(Verdict::Machine), 6_500),
        vec![
            Action::HangUpPerson,
            Action::RoutePersonAudio(PersonAudio::Discard),
            returned(Outcome::Machine)
        ]
    );
    // A person (or nothing recognisable): the brief.
    for verdict in [Verdict::Human, Verdict::Unknown] {
        let mut r = Run::new(Plan::Warm, screened.clone());
        r.feed(Input::Answered, 4_000);
        assert_eq!(
            r.feed(Input::Screened(verdict), 5_000),
            vec![
                Action::RoutePersonAudio(PersonAudio::Brief),
                Action::StartBrief
            ]
        );
    }
    // No verdict in time: the brief anyway.
    let mut r = Run::new(Plan::Warm, screened.clone());
    r.feed(Input::Answered, 4_000);
    assert_eq!(
        r.advance(10_000),
        vec![
            Action::RoutePersonAudio(PersonAudio::Brief),
            Action::StartBrief
        ]
    );
    // The caller hangs up while screening: BYE.
    let mut r = Run::new(Plan::Warm, screened);
    r.feed(Input::Answered, 4_000);
    r.feed(Input::CallerHungUp, 4_100);
    assert_eq!(r.byes(), 1);
    assert_eq!(
        r.report().outcome,
        Outcome::CallerHungUp {
            stage: Stage::Screening
        }
    );
}

#[test]
fn dead_air_is_capped() {
    let mut r = Run::warm();
    r.feed(Input::Answered, 1_000);
    r.feed(Input::Accepted, 2_000);
    assert_eq!(r.t.poll_timeout(), Some((r.at(12_000), Timer::DeadAir)));
    r.advance(12_000);
    assert_eq!(r.dead_air(), vec![(10_000, true)]);
    // A caller hanging up during a gap closes it where it is.
    let mut r = Run::warm();
    r.feed(Input::Answered, 1_000);
    r.feed(Input::Accepted, 2_000);
    r.feed(Input::CallerHungUp, 2_500);
    assert_eq!(r.dead_air(), vec![(500, false)]);
}

#[test]
fn an_older_now_counts_as_the_latest() {
    let mut r = Run::warm();
    r.feed(Input::Ringing, 5_000);
    r.feed(Input::Answered, 4_000); // late-stamped
    let report_setup = {
        r.feed(Input::Accepted, 6_000);
        r.report().setup_ms
    };
    assert_eq!(report_setup, Some(5_000));
    assert_eq!(r.report().ring_ms, Some(0));
}

// --- blind ------------------------------------------------------------------------------

fn blind(via: BlindVia) -> Run {
    Run::new(Plan::Blind(via), Settings::default())
}

#[test]
fn blind_refer_waits_for_the_announcement_and_follows_notify() {
    let mut r = blind(BlindVia::SipRefer);
    assert!(
        r.actions.is_empty(),
        "nothing goes out during the announcement"
    );
    assert_eq!(r.t.stage(), Stage::Announcing);
    assert!(
        r.feed(
            Input::Notify {
                sipfrag: b"SIP/2.0 200 OK"
            },
            100
        )
        .is_empty()
    );
    assert!(r.advance(59_000).is_empty());
    assert_eq!(
        r.feed(Input::AnnouncementPlayed, 3_000),
        vec![Action::Refer { target: priya() }]
    );
    assert!(
        r.feed(Input::ReferAnswered { status: 202 }, 3_050)
            .is_empty()
    );
    assert_eq!(r.t.stage(), Stage::Following);
    assert!(
        r.feed(
            Input::Notify {
                sipfrag: b"SIP/2.0 100 Trying\r\n"
            },
            3_100
        )
        .is_empty()
    );
    assert!(
        r.feed(
            Input::Notify {
                sipfrag: b"SIP/2.0 180 Ringing\r\n"
            },
            3_500
        )
        .is_empty()
    );
    assert!(
        r.feed(
            Input::Notify {
                sipfrag: b"not a status line"
            },
            4_000
        )
        .is_empty()
    );
    assert!(
        matches!(r.events.last(), Some(Event::BadNotify { error }) if error.contains("not a SIP status line"))
    );
    assert_eq!(
        r.feed(
            Input::Notify {
                sipfrag: b"SIP/2.0 200 OK\r\n"
            },
            8_000
        ),
        vec![Action::LeaveCall]
    );
    let report = r.report();
    assert_eq!(report.outcome, Outcome::Transferred);
    assert_eq!(report.status, Some(200));
    assert_eq!(report.setup_ms, Some(3_500));
    assert_eq!(report.ring_ms, Some(4_500));
    assert!(r.t.is_over());
    assert_eq!(r.t.poll_timeout(), None);
}

#[test]
fn blind_announcement_guard() {
    let mut r = blind(BlindVia::SipRefer);
    assert_eq!(r.advance(60_000), vec![Action::Refer { target: priya() }]);
    assert!(
        r.feed(Input::AnnouncementPlayed, 60_100).is_empty(),
        "sent once"
    );
}

#[test]
fn blind_refer_refused_or_failed_returns_the_caller() {
    let mut r = blind(BlindVia::SipRefer);
    r.feed(Input::AnnouncementPlayed, 1_000);
    let acts = r.feed(Input::ReferAnswered { status: 403 }, 1_100);
    assert_eq!(
        acts,
        vec![returned(Outcome::Rejected {
            status: 403,
            reason: "the REFER was refused".into()
        })]
    );
    // The referred call was busy.
    let mut r = blind(BlindVia::SipRefer);
    r.feed(Input::AnnouncementPlayed, 1_000);
    r.feed(Input::ReferAnswered { status: 202 }, 1_100);
    let acts = r.feed(
        Input::Notify {
            sipfrag: b"SIP/2.0 486 Busy Here",
        },
        2_000,
    );
    assert_eq!(acts, vec![returned(Outcome::Busy { status: 486 })]);
    assert_eq!(r.report().status, Some(486));
    // No final NOTIFY in time.
    let mut r = blind(BlindVia::SipRefer);
    r.feed(Input::AnnouncementPlayed, 1_000);
    r.feed(Input::ReferAnswered { status: 202 }, 1_100);
    let acts = r.advance(1_000 + 45_000);
    assert_eq!(
        acts,
        vec![returned(Outcome::Failed {
            failure: Failure::Timeout {
                waited_for: "the REFER's final NOTIFY"
            }
        })]
    );
}

#[test]
fn blind_twilio_redirect() {
    let mut r = blind(BlindVia::TwilioRedirect);
    assert_eq!(
        r.feed(Input::AnnouncementPlayed, 2_000),
        vec![Action::Redirect { target: priya() }]
    );
    assert!(
        r.feed(Input::ReferAnswered { status: 202 }, 2_100)
            .is_empty()
    );
    assert!(
        r.feed(
            Input::Notify {
                sipfrag: b"SIP/2.0 200 OK"
            },
            2_100
        )
        .is_empty()
    );
    assert_eq!(r.feed(Input::Redirected, 2_400), vec![Action::LeaveCall]);
    assert_eq!(r.report().outcome, Outcome::Transferred);
    assert_eq!(r.report().setup_ms, Some(2_400));

    let mut r = blind(BlindVia::TwilioRedirect);
    r.feed(Input::AnnouncementPlayed, 2_000);
    let failure = Failure::Rest {
        http_status: Some(404),
        code: Some(20404),
        message: "not found".into(),
    };
    assert_eq!(
        r.feed(Input::Failed(failure.clone()), 2_300),
        vec![returned(Outcome::Failed { failure })]
    );
}

#[test]
fn blind_caller_hangs_up_during_the_announcement() {
    let mut r = blind(BlindVia::SipRefer);
    assert!(r.feed(Input::CallerHungUp, 1_000).is_empty());
    assert_eq!(
        r.report().outcome,
        Outcome::CallerHungUp {
            stage: Stage::Announcing
        }
    );
    assert!(r.feed(Input::AnnouncementPlayed, 2_000).is_empty());
    assert!(r.advance(120_000).is_empty());
    assert_eq!(r.count(|a| matches!(a, Action::Refer { .. })), 0);
}

/// Every prefix of a warm transfer, then the caller hangs up, then (before the answer) a 200
/// that may cross the CANCEL: the person's leg is always released, exactly once, the way its
/// state needs, and there is exactly one typed outcome.
#[test]
fn every_caller_hangup_releases_the_person_exactly_once() {
    let path: [Input<'static>; 6] = [
        Input::Ringing,
        Input::EarlyMedia,
        Input::Answered,
        Input::BriefPlayed,
        Input::Accepted,
        Input::Ringing, // a stray provisional after the bridge
    ];
    for screen in [None, Some(ms(6_000))] {
        for cut in 0..=path.len() {
            for late_answer in [false, true] {
                let settings = Settings {
                    screen,
                    ..Settings::default()
                };
                let mut r = Run::new(Plan::Warm, settings);
                let mut n = 0;
                for input in path.iter().take(cut) {
                    n += 500;
                    r.feed(input.clone(), n);
                    if r.t.stage() == Stage::Screening {
                        r.feed(Input::Screened(Verdict::Human), n);
                    }
                }
                let answered = cut > 2;
                r.feed(Input::CallerHungUp, n + 1);
                if late_answer {
                    r.feed(Input::Answered, n + 1);
                }
                r.advance(n + 100_000);
                let case = format!("screen {screen:?}, cut {cut}, late answer {late_answer}");
                if answered {
                    assert_eq!((r.cancels(), r.byes()), (0, 1), "{case}: {:?}", r.actions);
                } else {
                    assert_eq!(r.cancels(), 1, "{case}");
                    assert_eq!(r.byes(), usize::from(late_answer), "{case}");
                }
                assert_eq!(r.reports().len(), 1, "{case}");
                assert_eq!(r.t.person_audio(), PersonAudio::Discard, "{case}");
                assert_eq!(r.t.poll_timeout(), None, "{case}");
            }
        }
    }
}
