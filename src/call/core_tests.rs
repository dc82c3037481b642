//! [`CallCore`] on a virtual clock: no runtime, no socket, no timer. Each test plays the leg and
//! the model by hand, advances time tick by tick and reads what the core decided.

use std::sync::Arc;
use std::time::{Duration, Instant};

use super::core::{CallCore, Live, ModelCommand, Reason, SessionId, Task};
use super::{Agents, CallOptions, ModelSource, ReconnectPolicy};
use crate::agents::Strategy;
use crate::audio::Frame;
use crate::audio::g711::Law;
use crate::audio::playout::PlayedKind;
use crate::backend::ModelBackend;
use crate::leg::{LegCommand, LegEvent};
use crate::model::gemini::session::SessionConfig;
use crate::model::gemini::wire::ClientMessage;
use crate::model::handle::{Protocol, Wire};
use crate::model::session::{Outbound, SessionEvent};
use crate::model::{Capabilities, ModelEvent, ToolCallRequest};

const RATE: u32 = 8000;
const FRAME: Duration = Duration::from_millis(20);
const FIRST: SessionId = SessionId(0);

/// The core, a virtual clock and everything the core asked for.
struct Rig {
    core: CallCore,
    now: Instant,
    /// Media time of the next caller frame.
    caller_ts: Duration,
    /// Frames handed to the leg: when, and what kind.
    played: Vec<(Instant, PlayedKind)>,
    clears: usize,
    hangups: usize,
    model: Vec<ModelCommand>,
    tasks: Vec<Task>,
}

fn caps() -> Capabilities {
    Capabilities {
        resumption: true,
        ..Capabilities::default()
    }
}

/// 20 ms of a 440 Hz tone (loud: voiced) or digital silence at `rate`.
fn tone(rate: u32, ms: u32, voiced: bool) -> Vec<i16> {
    let n = (rate / 1000 * ms) as usize;
    (0..n)
        .map(|i| {
            if voiced {
                (8000.0 * (i as f64 * 440.0 * std::f64::consts::TAU / f64::from(rate)).sin()) as i16
            } else {
                0
            }
        })
        .collect()
}

/// A source for reconnects that never opens anything here (the test answers the opens).
fn source() -> ModelSource {
    let opts = crate::mock::MockOptions::new(Arc::new(crate::mock::Scenario::builtin()));
    ModelSource {
        backend: ModelBackend::in_process(Arc::new(opts)),
        config: SessionConfig::default(),
    }
}

fn resuming() -> CallOptions {
    CallOptions {
        caller_silence: Duration::from_millis(200),
        model: Some(source()),
        reconnect: ReconnectPolicy {
            standby: false,
            ..ReconnectPolicy::default()
        },
        ..CallOptions::default()
    }
}

/// Everything a model can do in place.
fn all_caps() -> Capabilities {
    Capabilities {
        update_instructions: true,
        update_tools: true,
        non_blocking_tools: true,
        mid_session_client_content: true,
        resumption: true,
        history_config: true,
        calls_pause_speech: false,
    }
}

/// Seed 000's advisor and specialist, every handoff carried by `strategy`.
fn agents(strategy: Strategy) -> Agents {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("config/agents/financial_shared.toml");
    let mut reg = crate::agents::load(&path).unwrap();
    for a in &mut reg.agents {
        a.policy.strategy = strategy;
    }
    let mut cfg = SessionConfig::default();
    Agents::start(Arc::new(reg), all_caps(), source().backend, &mut cfg)
}

impl Rig {
    fn new(wire: impl Into<Wire>, opts: CallOptions) -> Rig {
        Rig::build(wire, opts, None)
    }

    /// The agent announces (400 ms) and hands the caller to the person `name`: the transfer
    /// the call asks of its shell once the announcement has played.
    fn transfer_to(&mut self, name: &str) -> Box<super::outbox::TransferRequest> {
        self.model_audio(FIRST, 400);
        self.activate(name);
        self.model_event(FIRST, ModelEvent::GenerationComplete);
        self.advance(Duration::from_millis(500));
        let Some(Task::Transfer(req)) = self.tasks.pop() else {
            panic!("no transfer asked: {:?}", self.tasks);
        };
        req
    }

    fn with_agents(strategy: Strategy) -> Rig {
        Rig::with_agents_on(Protocol::Gemini, strategy)
    }

    fn with_agents_on(wire: impl Into<Wire>, strategy: Strategy) -> Rig {
        let opts = CallOptions {
            caller_silence: Duration::from_millis(200),
            reconnect: ReconnectPolicy {
                standby: false,
                ..ReconnectPolicy::default()
            },
            ..CallOptions::default()
        };
        Rig::build(wire, opts, Some(agents(strategy)))
    }

    fn build(wire: impl Into<Wire>, opts: CallOptions, agents: Option<Agents>) -> Rig {
        let t0 = Instant::now();
        Rig::build_timed(wire, opts, agents, t0, t0)
    }

    /// A core built at `built` on a leg whose media starts at `media_zero` (before: the leg's
    /// frames waited for the model session to open; after: a leg that starts once the call is
    /// ready). The clock starts at the later of the two.
    fn build_timed(
        wire: impl Into<Wire>,
        opts: CallOptions,
        agents: Option<Agents>,
        built: Instant,
        media_zero: Instant,
    ) -> Rig {
        let first = Live {
            id: FIRST,
            caps: if agents.is_some() { all_caps() } else { caps() },
        };
        let core =
            CallCore::new(RATE, media_zero, first, wire.into(), &opts, agents, built).unwrap();
        let now = built.max(media_zero);
        let mut rig = Rig {
            core,
            now,
            caller_ts: now - media_zero,
            played: Vec::new(),
            clears: 0,
            hangups: 0,
            model: Vec::new(),
            tasks: Vec::new(),
        };
        rig.drain();
        rig
    }

    fn gemini() -> Rig {
        Rig::new(
            Protocol::Gemini,
            CallOptions {
                caller_silence: Duration::from_millis(200),
                ..CallOptions::default()
            },
        )
    }

    fn drain(&mut self) {
        while let Some(cmd) = self.core.poll_leg() {
            match cmd {
                LegCommand::Play { frame, kind } => {
                    self.played.push((self.now, kind));
                    self.core.recycle(frame);
                }
                LegCommand::Clear => self.clears += 1,
                LegCommand::Hangup => self.hangups += 1,
            }
        }
        while let Some(c) = self.core.poll_model() {
            self.model.push(c);
        }
        while let Some(t) = self.core.poll_task() {
            self.tasks.push(t);
        }
    }

    /// Moves the clock to `now + d`, waking the core at every deadline on the way.
    fn advance(&mut self, d: Duration) {
        let until = self.now + d;
        loop {
            let (at, _) = self.core.poll_timeout();
            if at > until {
                break;
            }
            self.now = self.now.max(at);
            self.core.handle_timeout(self.now);
            self.drain();
        }
        self.now = until;
    }

    /// The caller speaks (or is silent) for `ms`, one frame every 20 ms, each arriving at the
    /// end of its 20 ms.
    fn caller(&mut self, ms: u32, voiced: bool) {
        for _ in 0..ms / 20 {
            self.advance(FRAME);
            let frame = Frame {
                rate: RATE,
                ts: self.caller_ts,
                samples: tone(RATE, 20, voiced),
            };
            self.caller_ts += FRAME;
            let received_at = tokio::time::Instant::from_std(self.now);
            self.core
                .handle_leg(Some(LegEvent::Frame { frame, received_at }), self.now);
            self.drain();
        }
    }

    fn model_event(&mut self, id: SessionId, e: ModelEvent) {
        let at = tokio::time::Instant::from_std(self.now);
        self.core
            .handle_model(id, Some(SessionEvent::Model(e, at)), self.now);
        self.drain();
    }

    /// `ms` of model speech (24 kHz, as Gemini Live sends it).
    fn model_audio(&mut self, id: SessionId, ms: u32) {
        let samples = tone(24_000, ms, true);
        self.model_event(
            id,
            ModelEvent::Audio {
                rate: 24_000,
                samples,
            },
        );
    }

    fn voiced_since(&self, t: Instant) -> usize {
        self.played
            .iter()
            .filter(|(at, k)| *at >= t && *k == PlayedKind::Voice)
            .count()
    }

    /// Session `id` gives a resumption handle that a new session can resume from.
    fn resumption(&mut self, id: SessionId, handle: &str) {
        self.model_event(
            id,
            ModelEvent::ResumptionUpdate {
                handle: Some(handle.into()),
                resumable: true,
            },
        );
    }

    /// Session `id`'s socket drops; the session the core opens at once is opened at once too.
    fn drop_and_reopen(&mut self, id: SessionId) -> SessionId {
        self.core.handle_model(id, None, self.now);
        self.drain();
        let Some(Task::Open { id, .. }) = self.tasks.pop() else {
            panic!("a drop opens at once: {:?}", self.tasks);
        };
        self.core.handle_opened(id, Ok(caps()), self.now);
        self.drain();
        id
    }

    /// Caller audio sent to session `id`: (messages, of which replayed).
    fn uplink_to(&self, id: SessionId) -> (usize, usize) {
        let mut n = (0, 0);
        for c in &self.model {
            if let ModelCommand::Send {
                to,
                out: Outbound::Text { received_at, .. },
            } = c
                && *to == id
            {
                n.0 += 1;
                if received_at.is_none() {
                    n.1 += 1;
                }
            }
        }
        n
    }
}

#[test]
fn one_deadline_and_playout_ticks_every_20_ms() {
    let mut rig = Rig::gemini();
    let (at, why) = rig.core.poll_timeout();
    assert_eq!(why, Reason::Playout);
    assert_eq!(at, rig.now, "the first tick falls at the leg's start");
    rig.advance(Duration::from_millis(200));
    assert_eq!(rig.played.len(), 11, "ticks at 0, 20, … 200 ms");
    assert!(rig.played.iter().all(|(_, k)| *k == PlayedKind::Silence));
    let report = rig.core.finish(Some("test".into()));
    assert_eq!(report.underruns, 0);
    assert_eq!(report.frames_played, 11);
}

/// The caller audio of each message sent to the model: (the message, its PCM16 bytes).
fn uplink_audio(rig: &Rig) -> Vec<(String, usize)> {
    use base64::Engine;
    rig.model
        .iter()
        .filter_map(|c| match c {
            ModelCommand::Send {
                out: Outbound::Text { json, .. },
                ..
            } => {
                let v: serde_json::Value = serde_json::from_str(json).unwrap();
                let data = v["realtimeInput"]["audio"]["data"]
                    .as_str()
                    .or(v["audio"].as_str())?;
                let bytes = base64::engine::general_purpose::STANDARD
                    .decode(data)
                    .unwrap();
                Some((json.clone(), bytes.len()))
            }
            _ => None,
        })
        .collect()
}

#[test]
fn a_phone_callers_audio_goes_to_gemini_at_the_legs_own_rate() {
    let mut rig = Rig::gemini();
    rig.caller(100, true);
    let (sent, replayed) = rig.uplink_to(FIRST);
    assert_eq!(
        (sent, replayed),
        (5, 0),
        "one message per caller frame, none held back"
    );
    let audio = uplink_audio(&rig);
    assert_eq!(audio.len(), 5);
    for (json, bytes) in &audio {
        assert!(
            json.contains(r#""mimeType":"audio/pcm;rate=8000""#),
            "{json}"
        );
        assert_eq!(*bytes, 320, "160 samples: the leg's frame as it is");
    }
    let report = rig.core.finish(Some("test".into()));
    assert_eq!(report.uplink_resampler_delay_ms, 0.0);
}

/// An OpenAI session set up for a μ-law phone leg hears the caller in the leg's own law: one
/// message of 160 codes per 20 ms frame, the caller's samples quantised as the phone network
/// did, and answers at 8 kHz played as it comes. Nothing is resampled either way, and a session
/// reopened after a drop is asked for the same format and sent the kept audio in it.
#[test]
fn a_phone_callers_audio_goes_to_openai_in_its_own_law_and_stays_in_it() {
    let wire = Wire {
        protocol: Protocol::OpenAi,
        law: Some(Law::Ulaw),
    };
    let mut rig = Rig::new(wire, resuming());
    rig.caller(100, true);
    let audio = uplink_audio(&rig);
    assert_eq!(audio.len(), 5, "one message per frame");
    let frame: Vec<u8> = tone(RATE, 20, true)
        .iter()
        .map(|&s| Law::Ulaw.encode(s))
        .collect();
    for (json, bytes) in &audio {
        assert!(json.contains("input_audio_buffer.append"), "{json}");
        assert_eq!(*bytes, 160, "one code per sample at 8 kHz");
    }
    let first = {
        use base64::Engine;
        let v: serde_json::Value = serde_json::from_str(&audio[0].0).unwrap();
        base64::engine::general_purpose::STANDARD
            .decode(v["audio"].as_str().unwrap())
            .unwrap()
    };
    assert_eq!(
        first, frame,
        "the caller's frame in μ-law, sample for sample"
    );
    rig.model_event(
        FIRST,
        ModelEvent::Audio {
            rate: 8_000,
            samples: tone(8_000, 400, true),
        },
    );
    let start = rig.now;
    rig.advance(Duration::from_millis(200));
    assert_eq!(rig.voiced_since(start), 11, "played from its arrival");
    // The socket drops: the next session is opened in the same format.
    rig.core.handle_model(FIRST, None, rig.now);
    rig.drain();
    rig.caller(60, true);
    let Some(Task::Open { id, request }) = rig.tasks.pop() else {
        panic!("no open: {:?}", rig.tasks);
    };
    assert_eq!(request.config.phone_law, Some(Law::Ulaw));
    rig.core.handle_opened(id, Ok(caps()), rig.now);
    rig.drain();
    let sizes: Vec<usize> = uplink_audio(&rig)[audio.len()..]
        .iter()
        .map(|(_, b)| *b)
        .collect();
    assert!(
        !sizes.is_empty(),
        "the kept caller audio goes to the new session"
    );
    assert!(
        sizes.iter().all(|b| *b <= 160),
        "μ-law at 8 kHz to the new session too: {sizes:?}"
    );
    let report = rig.core.finish(Some("test".into()));
    assert_eq!(report.uplink_resampler_delay_ms, 0.0);
    assert_eq!(report.downlink_resampler_delay_ms, 0.0);
    assert_eq!(report.audio_lost_ms, 0.0);
}

#[test]
fn resample_input_sends_gemini_its_native_16_khz_and_openai_pcm_always_gets_24() {
    for (protocol, resample, rate) in [
        (Protocol::Gemini, true, 16_000),
        (Protocol::OpenAi, false, 24_000),
        (Protocol::OpenAi, true, 24_000),
    ] {
        let opts = CallOptions {
            caller_silence: Duration::from_millis(200),
            resample_input: resample,
            ..CallOptions::default()
        };
        let mut rig = Rig::new(protocol, opts);
        rig.caller(200, true);
        let audio = uplink_audio(&rig);
        assert!(audio.len() >= 5, "{protocol:?}: {} messages", audio.len());
        for (json, bytes) in &audio {
            match protocol {
                Protocol::Gemini => {
                    assert!(
                        json.contains(r#""mimeType":"audio/pcm;rate=16000""#),
                        "{json}"
                    )
                }
                Protocol::OpenAi => assert!(json.contains("input_audio_buffer.append"), "{json}"),
            }
            // Whole 20 ms blocks at the session's rate once the resampler runs.
            assert_eq!(
                bytes % (rate as usize / 50 * 2),
                0,
                "{protocol:?}: {bytes} bytes"
            );
        }
        let report = rig.core.finish(Some("test".into()));
        assert!(
            report.uplink_resampler_delay_ms > 0.0,
            "{protocol:?}: the uplink is resampled"
        );
    }
}

#[test]
fn first_audio_is_timed_from_the_callers_last_voiced_frame_to_the_first_played_voice() {
    let mut rig = Rig::gemini();
    rig.caller(400, true);
    let last_voiced = rig.now;
    rig.caller(300, false);
    let reply_at = rig.now + Duration::from_millis(7);
    rig.advance(Duration::from_millis(7));
    rig.model_audio(FIRST, 400);
    // The talkspurt starts when its audio arrives, not at the next 20 ms tick.
    assert_eq!(rig.core.poll_timeout().0, reply_at);
    rig.advance(Duration::from_millis(100));
    assert!(rig.voiced_since(reply_at) >= 5);
    let report = rig.core.finish(Some("test".into()));
    let expected = super::metrics::ms(reply_at - last_voiced);
    assert_eq!(report.first_audio_ms, vec![expected]);
    assert_eq!(report.turns.len(), 1);
    assert_eq!(report.turns[0].first_audio_ms, Some(expected));
}

#[test]
fn barge_in_mid_reply_clears_the_leg_and_flushes_playout() {
    let mut rig = Rig::gemini();
    rig.model_audio(FIRST, 1000);
    let start = rig.now;
    rig.advance(Duration::from_millis(200));
    assert_eq!(rig.voiced_since(start), 11);
    rig.model_event(FIRST, ModelEvent::Interrupted);
    assert_eq!(rig.clears, 1, "the leg drops what it buffered");
    let cut = rig.now + Duration::from_millis(1);
    rig.advance(Duration::from_millis(200));
    assert_eq!(rig.voiced_since(cut), 0, "nothing of the cut reply plays");
    assert!(
        rig.played
            .iter()
            .filter(|(at, _)| *at >= cut)
            .all(|(_, k)| *k == PlayedKind::Silence),
        "a flushed reply is no underrun"
    );
    let report = rig.core.finish(Some("test".into()));
    assert_eq!(report.interruptions, 1);
    assert_eq!(report.underruns, 0);
}

#[test]
fn barge_in_on_openai_tells_the_model_what_the_caller_heard() {
    let mut rig = Rig::new(
        Protocol::OpenAi,
        CallOptions {
            caller_silence: Duration::from_millis(200),
            ..CallOptions::default()
        },
    );
    rig.model_audio(FIRST, 1000);
    let start = rig.now;
    rig.advance(Duration::from_millis(300));
    let heard = rig.voiced_since(start) as u64;
    rig.model_event(FIRST, ModelEvent::Interrupted);
    let barge: Vec<_> = rig
        .model
        .iter()
        .filter_map(|c| match c {
            ModelCommand::BargeIn { to, heard_ms } => Some((*to, *heard_ms)),
            _ => None,
        })
        .collect();
    assert_eq!(barge, vec![(FIRST, heard * 20)]);
    // Once everything queued has played, OpenAI's late `interrupted` cuts nothing.
    rig.model_audio(FIRST, 100);
    rig.model_event(FIRST, ModelEvent::TurnComplete);
    rig.advance(Duration::from_millis(300));
    rig.model_event(FIRST, ModelEvent::Interrupted);
    assert_eq!(rig.clears, 1);
}

#[test]
fn a_gap_inside_a_turn_is_an_underrun_and_running_dry_after_its_end_is_not() {
    let mut rig = Rig::gemini();
    rig.model_audio(FIRST, 100);
    let start = rig.now;
    rig.advance(Duration::from_millis(200));
    rig.model_audio(FIRST, 100);
    let resumed = rig.now;
    rig.model_event(FIRST, ModelEvent::TurnComplete);
    rig.advance(Duration::from_millis(400));
    let underruns: Vec<Instant> = rig
        .played
        .iter()
        .filter(|(_, k)| *k == PlayedKind::Underrun)
        .map(|(at, _)| *at)
        .collect();
    // The first chunk plays whole frames only (its partial last frame waits for the rest of
    // the turn): from then until the second chunk arrives every tick is an underrun.
    assert!(
        underruns.len() >= 5,
        "at least the 100 ms hole: {underruns:?}"
    );
    assert!(underruns.iter().all(|at| *at > start && *at <= resumed));
    let first_underrun = underruns[0];
    assert!(
        rig.played
            .iter()
            .filter(|(at, _)| *at >= first_underrun && *at <= resumed)
            .all(|(_, k)| *k == PlayedKind::Underrun),
        "one run of underruns, until the audio is back"
    );
    let voiced = rig.voiced_since(rig.now - Duration::from_secs(10)) as u64;
    assert_eq!(voiced, 10, "every sample of both chunks played");
    let report = rig.core.finish(Some("test".into()));
    assert_eq!(report.underruns, underruns.len() as u64);
    assert_eq!(report.voice_frames, voiced);
}

#[test]
fn a_planned_reconnect_waits_for_a_quiet_point_and_resumes_with_the_newest_handle() {
    let mut rig = Rig::new(Protocol::Gemini, resuming());
    rig.resumption(FIRST, "h1");
    rig.model_audio(FIRST, 600);
    rig.model_event(
        FIRST,
        ModelEvent::GoAway {
            time_left: Some(Duration::from_secs(30)),
        },
    );
    rig.caller(100, false);
    let closes = |rig: &Rig| {
        rig.model
            .iter()
            .filter(|c| matches!(c, ModelCommand::Close { .. }))
            .count()
    };
    assert_eq!(closes(&rig), 0, "not while the model speaks");
    rig.model_event(FIRST, ModelEvent::GenerationComplete);
    assert_eq!(closes(&rig), 0, "no handle since the model spoke");
    rig.resumption(FIRST, "h2");
    assert!(
        rig.model.iter().any(|c| matches!(
            c,
            ModelCommand::Close {
                to: FIRST,
                watch: true
            }
        )),
        "closed at the quiet point, and watched until it ends"
    );
    assert!(
        rig.tasks.is_empty(),
        "the next one opens once the old socket is gone"
    );
    rig.caller(60, false);
    rig.core.handle_model(FIRST, None, rig.now);
    rig.drain();
    let Some(Task::Open { id, request }) = rig.tasks.pop() else {
        panic!("no open: {:?}", rig.tasks);
    };
    assert_eq!(request.config.resume_handle.as_deref(), Some("h2"));
    let before = rig.uplink_to(id);
    assert_eq!(before, (0, 0));
    rig.core.handle_opened(id, Ok(caps()), rig.now);
    rig.drain();
    let (_, replayed) = rig.uplink_to(id);
    assert!(
        replayed > 0,
        "the caller audio of the switch goes to the new session"
    );
    rig.caller(60, false);
    let (sent, _) = rig.uplink_to(id);
    assert!(sent > replayed, "live audio follows on the new session");
    rig.advance(Duration::from_millis(600));
    assert_eq!(rig.clears, 0, "a reconnect never flushes playout");
    let report = rig.core.finish(Some("test".into()));
    assert_eq!(report.reconnects.len(), 1);
    assert_eq!(report.reconnects[0].cause, "go_away");
    assert_eq!(report.underruns, 0);
}

#[test]
fn a_drop_mid_tool_call_reopens_at_once_and_the_call_goes_on() {
    let mut rig = Rig::new(Protocol::Gemini, resuming());
    rig.resumption(FIRST, "h1");
    rig.caller(200, true);
    rig.model_event(
        FIRST,
        ModelEvent::ToolCall(vec![ToolCallRequest {
            id: "call-1".into(),
            name: "lookup".into(),
            args: serde_json::json!({}),
        }]),
    );
    assert!(
        rig.model.iter().any(|c| matches!(
            c,
            ModelCommand::Message { to: FIRST, msg } if matches!(**msg, crate::model::gemini::wire::ClientMessage::ToolResponse(_))
        )),
        "without an agent set the call is answered at once"
    );
    let dropped_at = rig.now;
    rig.core.handle_model(
        FIRST,
        Some(SessionEvent::Closed {
            code: Some(1011),
            reason: "internal error".into(),
        }),
        rig.now,
    );
    rig.drain();
    assert_eq!(rig.core.current_session(), None);
    assert!(
        rig.model
            .iter()
            .any(|c| matches!(c, ModelCommand::Drop { to: FIRST })),
        "the dead socket is let go (a service refuses a resume while it is open)"
    );
    let Some(Task::Open { id, .. }) = rig.tasks.pop() else {
        panic!("a drop opens at once: {:?}", rig.tasks);
    };
    assert_eq!(rig.now, dropped_at);
    rig.caller(100, true);
    assert_eq!(rig.uplink_to(id), (0, 0), "nothing sent before it is open");
    rig.core.handle_opened(id, Ok(caps()), rig.now);
    rig.drain();
    assert_eq!(rig.core.current_session(), Some(id));
    assert!(rig.uplink_to(id).1 > 0, "the kept caller audio is replayed");
    assert_eq!(rig.core.ended(), None);
    let report = rig.core.finish(Some("test".into()));
    assert_eq!(report.tool_calls, 1);
    assert_eq!(report.reconnects.len(), 1);
    assert_eq!(report.reconnects[0].cause, "closed:1011");
}

#[test]
fn without_a_source_a_lost_session_ends_the_call() {
    let mut rig = Rig::gemini();
    rig.core.handle_model(
        FIRST,
        Some(SessionEvent::Dead {
            silent_for: Duration::from_secs(10),
        }),
        rig.now,
    );
    rig.drain();
    assert_eq!(rig.hangups, 1);
    assert!(rig.core.ended().is_some_and(|r| r.contains("dead")));
}

#[test]
fn the_caller_hanging_up_closes_the_session() {
    let mut rig = Rig::gemini();
    rig.core.handle_leg(
        Some(LegEvent::Stop(crate::leg::StopReason::HungUp)),
        rig.now,
    );
    rig.drain();
    assert_eq!(rig.core.ended(), Some("caller hung up"));
    assert!(
        rig.model
            .iter()
            .any(|c| matches!(c, ModelCommand::Close { to: FIRST, .. }))
    );
}

/// A leg that stops because it failed gives the call its end reason; the session is closed as
/// on a hang-up.
#[test]
fn a_failed_leg_is_the_end_reason_not_a_hang_up() {
    let mut rig = Rig::gemini();
    let why = crate::leg::StopReason::Failed("protocol error: unknown kind 0x42".into());
    rig.core.handle_leg(Some(LegEvent::Stop(why)), rig.now);
    rig.drain();
    assert_eq!(
        rig.core.ended(),
        Some("caller's leg failed: protocol error: unknown kind 0x42")
    );
    assert_eq!(rig.hangups, 1);
}

/// What a message to a session is, by its wire name.
fn kind(msg: &ClientMessage) -> &'static str {
    match msg {
        ClientMessage::ContextUpdate(_) => "context_update",
        ClientMessage::ToolResponse(_) => "tool_response",
        ClientMessage::ClientContent(_) => "client_content",
        ClientMessage::RealtimeInput(_) => "realtime_input",
        _ => "other",
    }
}

impl Rig {
    /// An operator activates `agent` now.
    fn activate(&mut self, agent: &str) {
        self.core
            .handle_command(
                crate::agents::Input::Activate {
                    agent: agent.into(),
                },
                self.now,
            )
            .unwrap();
    }

    /// Messages (not audio) sent to `id` since command `from`.
    fn messages_to(&self, id: SessionId, from: usize) -> Vec<&'static str> {
        self.model[from..]
            .iter()
            .filter_map(|c| match c {
                ModelCommand::Message { to, msg } if *to == id => Some(kind(msg)),
                _ => None,
            })
            .collect()
    }

    /// The advisor speaks the announcement and calls the transfer (a NON_BLOCKING call).
    fn announce(&mut self) {
        self.model_event(
            FIRST,
            ModelEvent::OutputTranscript {
                text: "Let me bring in Ravi, our government schemes specialist.".into(),
                finished: false,
            },
        );
        self.model_audio(FIRST, 600);
        self.model_event(
            FIRST,
            ModelEvent::ToolCall(vec![ToolCallRequest {
                id: "transfer-1".into(),
                name: "transfer_to_schemes".into(),
                args: serde_json::json!({"summary": "the caller asks about PM-KISAN"}),
            }]),
        );
    }
}

/// The caller asks, the advisor announces and calls the transfer: what goes on the wire while
/// the announcement is generated, and what once it is.
fn handoff(strategy: Strategy) -> (Rig, Vec<&'static str>, Vec<&'static str>) {
    let mut rig = Rig::with_agents(strategy);
    rig.caller(400, true);
    rig.caller(300, false);
    let mark = rig.model.len();
    rig.announce();
    let during = rig.messages_to(FIRST, mark);
    let mark = rig.model.len();
    rig.model_event(FIRST, ModelEvent::GenerationComplete);
    rig.model_event(FIRST, ModelEvent::TurnComplete);
    let after = rig.messages_to(FIRST, mark);
    (rig, during, after)
}

#[test]
fn context_update_and_the_transfer_answer_go_out_once_the_announcement_is_generated() {
    let (_, during, after) = handoff(Strategy::ContextUpdate);
    assert_eq!(during, Vec::<&str>::new(), "a refusal then cuts nothing");
    assert_eq!(after, vec!["context_update", "tool_response"]);
}

#[test]
fn tool_response_answers_the_transfer_call_at_once() {
    let (_, during, _) = handoff(Strategy::ToolResponse);
    assert!(during.contains(&"tool_response"), "{during:?}");
    assert!(!during.contains(&"context_update"), "{during:?}");
}

#[test]
fn inject_turn_waits_for_the_announcement_to_be_generated() {
    let (_, during, after) = handoff(Strategy::InjectTurn);
    assert!(!during.contains(&"client_content"), "held: {during:?}");
    assert!(
        after.contains(&"client_content"),
        "at the turn boundary: {after:?}"
    );
}

/// A session a recreate handoff opens for a phone caller heard in μ-law is set up in μ-law too,
/// whatever settings the agent set was started with: the call's first session decides.
#[test]
fn a_recreate_handoff_opens_its_session_in_the_calls_law() {
    let wire = Wire {
        protocol: Protocol::OpenAi,
        law: Some(Law::Ulaw),
    };
    let mut rig = Rig::with_agents_on(wire, Strategy::Recreate);
    rig.caller(400, true);
    rig.caller(300, false);
    rig.announce();
    let Some(Task::Open { request, .. }) = rig.tasks.pop() else {
        panic!("no session opened: {:?}", rig.tasks);
    };
    assert_eq!(request.config.phone_law, Some(Law::Ulaw));
}

/// A warm transfer's brief speaks to the person's leg, not the caller's: on a call heard in
/// μ-law by OpenAI, the brief session is still set up in PCM (at the person's own rate).
#[test]
fn a_warm_transfers_brief_is_set_up_in_pcm_on_a_call_in_a_law() {
    let agents = front_desk(|h| h.handover = crate::transfer::Handover::Warm);
    let wire = Wire {
        protocol: Protocol::OpenAi,
        law: Some(Law::Ulaw),
    };
    let opts = CallOptions {
        caller_silence: Duration::from_millis(200),
        ..CallOptions::default()
    };
    let mut rig = Rig::build(wire, opts, Some(agents));
    let req = rig.transfer_to("ravi");
    let brief = req.brief.expect("a warm transfer carries its brief");
    assert_eq!(brief.config.phone_law, None, "the brief speaks PCM");
    // The call's own sessions stay in its law.
    rig.core.handle_model(FIRST, None, rig.now);
    rig.drain();
    rig.caller(60, true);
    let open = rig.tasks.iter().find_map(|t| match t {
        Task::Open { request, .. } => Some(request.config.phone_law),
        _ => None,
    });
    assert_eq!(open, Some(Some(Law::Ulaw)), "{:?}", rig.tasks);
}

/// A standby that cannot be opened fails its handoff: the record says why it was never heard
/// (the call's timeline takes it out of the announced ones, so no later handoff relabels it).
#[test]
fn a_failed_handoffs_record_says_it_failed() {
    use super::outbox::OpenFailed;
    // The announcement is generated while the standby is still being opened.
    let (mut rig, _, _) = handoff(Strategy::Recreate);
    let Some(Task::Open { id, .. }) = rig.tasks.pop() else {
        panic!("no standby opened: {:?}", rig.tasks);
    };
    let failed = OpenFailed {
        reason: "1008 model not found".into(),
        handle_refused: false,
    };
    rig.core.handle_opened(id, Err(failed), rig.now);
    rig.drain();
    rig.advance(Duration::from_secs(2));
    let report = rig.core.finish(Some("test".into()));
    let [h] = report.handoffs.as_slice() else {
        panic!("one handoff: {:?}", report.handoffs);
    };
    assert_eq!((h.gap_ms, h.heard_at_ms), (None, None), "{h:?}");
    assert!(
        h.note
            .as_deref()
            .is_some_and(|n| n.contains("failed") && n.contains("1008")),
        "{h:?}"
    );
}

#[test]
fn recreate_prepares_a_standby_at_once_and_switches_at_the_turn_boundary() {
    let mut rig = Rig::with_agents(Strategy::Recreate);
    rig.caller(400, true);
    rig.caller(300, false);
    rig.announce();
    let Some(Task::Open { id, request }) = rig.tasks.pop() else {
        panic!("no standby opened: {:?}", rig.tasks);
    };
    assert!(
        !request.standby_socket,
        "a handoff session is its own socket"
    );
    rig.core.handle_opened(id, Ok(all_caps()), rig.now);
    rig.drain();
    assert_eq!(
        rig.core.current_session(),
        Some(FIRST),
        "not while the advisor speaks"
    );
    rig.model_event(FIRST, ModelEvent::GenerationComplete);
    rig.model_event(FIRST, ModelEvent::TurnComplete);
    assert_eq!(
        rig.core.current_session(),
        Some(id),
        "switched at the boundary"
    );
    assert!(
        rig.model.iter().any(|c| matches!(
            c,
            ModelCommand::Close {
                to: FIRST,
                watch: false
            }
        )),
        "the old socket goes"
    );
    assert_eq!(rig.clears, 0, "the announcement keeps playing");
    // The new agent's first audio joins the announcement's last sample.
    rig.model_audio(id, 400);
    rig.model_event(id, ModelEvent::TurnComplete);
    rig.advance(Duration::from_secs(2));
    let report = rig.core.finish(Some("test".into()));
    assert_eq!(report.handoffs.len(), 1);
    assert_eq!(report.handoffs[0].strategy, "recreate");
    assert_eq!(report.handoffs[0].gap_ms, Some(0.0));
    assert_eq!(report.underruns, 0);
}

#[test]
fn recreate_cold_closes_once_the_announcement_has_played() {
    let (mut rig, _, _) = handoff(Strategy::RecreateCold);
    assert!(
        rig.tasks.is_empty(),
        "not while the announcement is queued: {:?}",
        rig.tasks
    );
    rig.advance(Duration::from_millis(700));
    assert!(
        rig.model
            .iter()
            .any(|c| matches!(c, ModelCommand::Close { to: FIRST, .. })),
        "closed once heard"
    );
    let Some(Task::Open { id, .. }) = rig.tasks.pop() else {
        panic!("no new session: {:?}", rig.tasks);
    };
    // Caller audio meanwhile is kept for the new session.
    rig.caller(100, true);
    rig.core.handle_opened(id, Ok(all_caps()), rig.now);
    rig.drain();
    assert_eq!(rig.core.current_session(), Some(id));
    assert!(
        rig.uplink_to(id).0 >= 4,
        "the buffered caller audio is delivered"
    );
}

#[test]
fn barge_in_mid_handoff_flushes_the_announcement_and_the_handoff_goes_on() {
    let mut rig = Rig::with_agents(Strategy::ContextUpdate);
    rig.caller(400, true);
    rig.caller(300, false);
    rig.announce();
    rig.advance(Duration::from_millis(100));
    rig.model_event(FIRST, ModelEvent::Interrupted);
    assert_eq!(rig.clears, 1);
    let cut = rig.now + Duration::from_millis(1);
    rig.advance(Duration::from_millis(100));
    assert_eq!(rig.voiced_since(cut), 0, "the announcement is cut");
    // The specialist answers in the same session.
    rig.model_event(FIRST, ModelEvent::TurnComplete);
    rig.model_audio(FIRST, 400);
    rig.model_event(FIRST, ModelEvent::TurnComplete);
    rig.advance(Duration::from_secs(1));
    let report = rig.core.finish(Some("test".into()));
    assert_eq!(report.interruptions, 1);
    assert_eq!(report.handoffs.len(), 1, "{:?}", report.handoffs);
    assert_eq!(report.handoffs[0].to, "schemes");
}

/// An operator's commands back to back (schemes in, out, in again) are each carried out in
/// place before anyone is heard; only the last completes. The two before it are recorded as
/// never heard, and a later handoff to the same agent gets its own gap, not theirs.
#[test]
fn handoffs_superseded_before_they_are_heard_keep_no_gap_and_lend_none() {
    use crate::agents::Input;
    let mut rig = Rig::with_agents(Strategy::ContextUpdate);
    // The caller speaks, the lead answers (400 ms), then `quiet` passes.
    let exchange = |rig: &mut Rig, quiet: Duration| {
        rig.caller(400, true);
        rig.caller(300, false);
        rig.model_audio(FIRST, 400);
        rig.model_event(FIRST, ModelEvent::GenerationComplete);
        rig.model_event(FIRST, ModelEvent::TurnComplete);
        rig.advance(quiet);
    };
    let command = |rig: &mut Rig, input: Input| {
        rig.core.handle_command(input, rig.now).unwrap();
        rig.drain();
    };
    let schemes = || "schemes".to_owned();
    exchange(&mut rig, Duration::from_secs(1));
    command(&mut rig, Input::Activate { agent: schemes() });
    command(&mut rig, Input::Deactivate { agent: schemes() });
    command(&mut rig, Input::Activate { agent: schemes() });
    // Ravi answers, and much later hands back to Asha at the operator's word.
    exchange(&mut rig, Duration::from_secs(10));
    command(&mut rig, Input::Deactivate { agent: schemes() });
    exchange(&mut rig, Duration::from_secs(1));
    let report = rig.core.finish(Some("test".into()));
    let h = &report.handoffs;
    let route: Vec<(&str, &str)> = h.iter().map(|h| (h.from.as_str(), h.to.as_str())).collect();
    assert_eq!(
        route,
        [
            ("advisor", "schemes"),
            ("schemes", "advisor"),
            ("advisor", "schemes"),
            ("schemes", "advisor")
        ],
        "{h:?}"
    );
    for superseded in &h[..2] {
        assert_eq!(superseded.gap_ms, None, "{superseded:?}");
        assert_eq!(superseded.heard_at_ms, None, "{superseded:?}");
        assert!(
            superseded
                .note
                .as_deref()
                .is_some_and(|n| n.contains("superseded by the handoff to schemes")),
            "{superseded:?}"
        );
    }
    for heard in &h[2..] {
        assert!(heard.gap_ms.is_some(), "{heard:?}");
        let at = heard.heard_at_ms.expect("heard");
        assert!(
            (0.0..1_000.0).contains(&(at - heard.at_ms as f64)),
            "heard within its own turn: {heard:?}"
        );
    }
    assert_eq!(
        report.handoff_gap_ms.len(),
        2,
        "{:?}",
        report.handoff_gap_ms
    );
}

impl Rig {
    /// Transfers to a person asked of the leg so far, by person.
    fn transfers(&self) -> Vec<&str> {
        self.tasks
            .iter()
            .filter_map(|t| match t {
                Task::Transfer(r) => Some(r.to.as_str()),
                _ => None,
            })
            .collect()
    }
}

/// An operator hands the caller to Ravi (`config/agents/front_desk.toml`, a blind transfer)
/// while the agent's greeting is still being generated: the transfer is asked of the leg once
/// the whole greeting has been heard, not when the announcement guard (60 s) runs out.
#[test]
fn an_operators_transfer_to_a_person_goes_out_once_what_the_caller_hears_has_played() {
    let agents = front_desk(|_| {});
    let opts = CallOptions {
        caller_silence: Duration::from_millis(200),
        ..CallOptions::default()
    };
    let mut rig = Rig::build(Protocol::Gemini, opts, Some(agents));
    let start = rig.now;
    rig.model_audio(FIRST, 400);
    rig.advance(Duration::from_millis(100));
    rig.activate("ravi");
    rig.drain();
    rig.model_audio(FIRST, 800);
    rig.advance(Duration::from_millis(300));
    assert!(
        rig.transfers().is_empty(),
        "not while the greeting is generated"
    );
    rig.model_event(FIRST, ModelEvent::GenerationComplete);
    // 1.1 s in: the last 100 ms of the 1.2 s greeting are still to be heard.
    rig.advance(Duration::from_millis(700));
    assert!(rig.transfers().is_empty(), "not while the greeting plays");
    rig.advance(Duration::from_millis(120));
    assert_eq!(rig.transfers(), vec!["ravi"], "once the greeting is heard");
    assert_eq!(
        rig.voiced_since(start),
        60,
        "the whole greeting was heard first"
    );
}

/// Every `at_ms` of a call counts from the leg's media start, as its turn times do: whether the
/// core is built well after the leg started (the model session opened first, as under
/// `baton serve`) or before it (a fixture leg that starts once the call is ready), a handoff
/// decided as the announcement starts playing has the announcing turn's `agent_start_ms`, and
/// the events of the call's feed sit on the same timeline.
#[test]
fn handoff_and_event_times_count_from_the_legs_media_start_as_turn_times_do() {
    let offset = Duration::from_millis(1500);
    for media_first in [true, false] {
        let agents = agents(Strategy::ContextUpdate);
        // The orchestrator was made just now (as a call's is, before its session opens).
        let built = Instant::now();
        let media_zero = if media_first {
            built
                .checked_sub(offset)
                .expect("a monotonic clock past 1.5 s")
        } else {
            built + offset
        };
        let opts = CallOptions {
            caller_silence: Duration::from_millis(200),
            ..CallOptions::default()
        };
        let mut rig = Rig::build_timed(Protocol::Gemini, opts, Some(agents), built, media_zero);
        rig.caller(400, true);
        rig.caller(300, false);
        let announced = rig.now - media_zero;
        rig.announce();
        rig.model_event(FIRST, ModelEvent::GenerationComplete);
        rig.model_event(FIRST, ModelEvent::TurnComplete);
        rig.model_audio(FIRST, 400);
        rig.model_event(FIRST, ModelEvent::TurnComplete);
        rig.advance(Duration::from_secs(2));
        let end = rig.now - media_zero;
        let report = rig.core.finish(Some("test".into()));
        let case = if media_first {
            "leg first"
        } else {
            "core first"
        };

        let turn = &report.turns[0];
        let spoke = turn.agent_start_ms.expect("the announcement was heard");
        assert!(
            (spoke - super::metrics::ms(announced)).abs() < 1.0,
            "{case}: the announcement plays as it arrives ({spoke} ms)"
        );
        let [h] = report.handoffs.as_slice() else {
            panic!("{case}: one handoff: {:?}", report.handoffs);
        };
        assert!(
            (h.at_ms as f64 - spoke).abs() <= 1.0,
            "{case}: the handoff was decided as its announcement began: at {} ms, the turn's \
             agent_start_ms {spoke}",
            h.at_ms
        );
        let heard = h.heard_at_ms.expect("the specialist was heard");
        assert!(
            heard >= h.at_ms as f64 && heard <= super::metrics::ms(end),
            "{case}: heard at {heard} ms, after the decision at {} ms",
            h.at_ms
        );
        // The feed's events: the primary from the start, the handoff's at its decision.
        let at = |kind: &str| -> Vec<u64> {
            report
                .events
                .iter()
                .filter_map(|e| {
                    let v = serde_json::to_value(e).ok()?;
                    (v["type"] == kind).then(|| v["at_ms"].as_u64()).flatten()
                })
                .collect()
        };
        assert_eq!(at("agent_start").first(), Some(&0), "{case}");
        assert_eq!(
            at("handoff_announcement"),
            vec![h.at_ms],
            "{case}: the feed and the report agree"
        );
        let transcript = at("transcript");
        assert!(
            !transcript.is_empty()
                && transcript
                    .iter()
                    .all(|&t| t as f64 <= super::metrics::ms(end)),
            "{case}: transcript lines within the call's media time: {transcript:?}"
        );
    }
}

/// A transfer's events (to a person, asked of the leg) are on the call's media timeline too.
#[test]
fn transfer_events_count_from_the_legs_media_start() {
    let agents = front_desk(|_| {});
    let built = Instant::now();
    let media_zero = built
        .checked_sub(Duration::from_millis(1500))
        .expect("a monotonic clock past 1.5 s");
    let opts = CallOptions {
        caller_silence: Duration::from_millis(200),
        ..CallOptions::default()
    };
    let mut rig = Rig::build_timed(Protocol::Gemini, opts, Some(agents), built, media_zero);
    rig.advance(Duration::from_millis(500));
    let at = rig.now - media_zero;
    rig.core.handle_transfer(
        crate::transfer::Event::Stage {
            stage: crate::transfer::Stage::Referring,
        },
        rig.now,
    );
    rig.drain();
    let report = rig.core.finish(Some("test".into()));
    let stage = report
        .events
        .iter()
        .find_map(|e| match e {
            crate::agents::CallEvent::Transfer { at_ms, .. } => Some(*at_ms),
            _ => None,
        })
        .expect("the transfer's stage is on the call's feed");
    assert_eq!(stage, at.as_millis() as u64, "2 s into the leg's media");
}

/// The shell's part of a blind transfer (`call::run_with_agents`): the transfer's events go
/// through [`super::no_answer::after_blind`] and then to the core; every frame played goes to
/// what an unanswered transfer left to do, checked after each pass.
#[derive(Default)]
struct BlindShell {
    blind: Option<super::no_answer::Blind>,
    after: Option<super::no_answer::Aftermath>,
    seen: usize,
}

impl BlindShell {
    fn transfer_event(&mut self, rig: &mut Rig, ev: crate::transfer::Event) {
        if let Some(a) = super::no_answer::after_blind(&mut self.blind, &ev, rig.now) {
            self.after = Some(a);
        }
        rig.core.handle_transfer(ev, rig.now);
        if let Some(a) = self.after.as_mut() {
            a.after_report(&mut rig.core, rig.now);
        }
        rig.drain();
        self.pass(rig);
    }

    fn pass(&mut self, rig: &mut Rig) {
        let Some(a) = self.after.as_mut() else {
            return;
        };
        for (_, kind) in &rig.played[self.seen..] {
            a.caller_played(*kind);
        }
        self.seen = rig.played.len();
        a.check(&mut rig.core, rig.now);
        rig.drain();
        if a.is_done() {
            self.after = None;
        }
    }

    /// `d` of the call, one tick at a time.
    fn run(&mut self, rig: &mut Rig, d: Duration) {
        for _ in 0..d.as_millis() / 20 {
            rig.advance(FRAME);
            self.pass(rig);
            if rig.core.ended().is_some() {
                return;
            }
        }
    }
}

/// The shipped front desk (`config/agents/front_desk.toml`: Ravi is a person reached by a blind
/// transfer), each person's settings changed by `edit`, started on every capability.
fn front_desk(edit: impl Fn(&mut crate::transfer::HumanAgent)) -> Agents {
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/agents/front_desk.toml");
    let mut reg = crate::agents::load(&path).unwrap();
    for p in &mut reg.people {
        edit(&mut p.human);
    }
    let mut cfg = SessionConfig::default();
    Agents::start(Arc::new(reg), all_caps(), source().backend, &mut cfg)
}

/// Ravi (`config/agents/front_desk.toml`) does not answer a blind transfer whose
/// `on_no_answer` is `"hang_up"`: the transfer's steps (announcing, referring, following, done)
/// arrive before its outcome, the agent says why, and the call ends as soon as that reply has
/// been heard, not at the 30 s guard.
#[test]
fn an_unanswered_blind_transfer_ends_the_call_once_the_agents_reply_has_played() {
    use crate::transfer::{Event, OnNoAnswer, Outcome, Stage};
    let agents = front_desk(|h| h.on_no_answer = OnNoAnswer::HangUp);
    let opts = CallOptions {
        caller_silence: Duration::from_millis(200),
        ..CallOptions::default()
    };
    let mut rig = Rig::build(Protocol::Gemini, opts, Some(agents));
    let mut shell = BlindShell::default();
    // The announcement, and the transfer asked once it has played.
    let req = rig.transfer_to("ravi");
    assert_eq!(req.settings.on_no_answer, OnNoAnswer::HangUp);
    shell.blind = Some((req.to.clone(), req.settings.on_no_answer.clone()));
    for stage in [
        Stage::Announcing,
        Stage::Referring,
        Stage::Following,
        Stage::Done,
    ] {
        shell.transfer_event(&mut rig, Event::Stage { stage });
    }
    shell.run(&mut rig, Duration::from_millis(200));
    let no_answer = super::no_answer::tests::finished(Outcome::NoAnswer { status: Some(480) });
    shell.transfer_event(&mut rig, no_answer);
    assert!(shell.after.is_some(), "the outcome leaves the call to end");
    // Silence while the model prepares its reply ends nothing.
    shell.run(&mut rig, Duration::from_millis(300));
    assert_eq!(rig.core.ended(), None, "not before the agent has said why");
    // The agent says why: 400 ms.
    let reply_at = rig.now;
    rig.model_audio(FIRST, 400);
    rig.model_event(FIRST, ModelEvent::GenerationComplete);
    rig.model_event(FIRST, ModelEvent::TurnComplete);
    shell.run(&mut rig, Duration::from_secs(5));
    let ended = rig.core.ended().expect("the call ended");
    assert!(ended.contains("did not answer"), "{ended}");
    assert_eq!(rig.hangups, 1);
    assert_eq!(rig.voiced_since(reply_at), 20, "the whole reply was heard");
    let last_voice = rig
        .played
        .iter()
        .rev()
        .find(|(_, k)| *k == PlayedKind::Voice)
        .map(|(at, _)| *at)
        .unwrap();
    assert!(
        rig.now <= last_voice + 2 * FRAME,
        "ended {:?} after the reply's last frame (the guard is {:?})",
        rig.now - last_voice,
        super::no_answer::ENDING_GUARD
    );
}

/// Ravi (`config/agents/front_desk.toml`) does not answer, and his `on_no_answer` names another
/// agent of the set. The outcome arrives while Asha is speaking, so the orchestrator holds her
/// notice of it for the turn boundary; the named agent is brought in once that notice has gone
/// out, not refused "not now" and dropped.
#[test]
fn the_agent_on_no_answer_names_is_brought_in_once_the_notice_held_for_the_turn_has_gone() {
    use crate::agents::CallEvent;
    use crate::transfer::{Event, OnNoAnswer, Outcome, Stage};
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/agents/front_desk.toml");
    let text = std::fs::read_to_string(&path).unwrap().replace(
        "ring_timeout_s = 25",
        "ring_timeout_s = 25\non_no_answer = \"agent:desk\"",
    ) + "\n[agents.desk]\nname = \"Sam\"\nrole = \"specialist\"\ninstruction = \"You are Sam.\"\n";
    let reg = crate::agents::parse(&text, &path).unwrap();
    let mut cfg = SessionConfig::default();
    let agents = Agents::start(Arc::new(reg), all_caps(), source().backend, &mut cfg);
    let opts = CallOptions {
        caller_silence: Duration::from_millis(200),
        ..CallOptions::default()
    };
    let mut rig = Rig::build(Protocol::Gemini, opts, Some(agents));
    let media_zero = rig.now;
    let mut shell = BlindShell::default();
    let req = rig.transfer_to("ravi");
    assert_eq!(req.settings.on_no_answer, OnNoAnswer::Agent("desk".into()));
    shell.blind = Some((req.to.clone(), req.settings.on_no_answer.clone()));
    for stage in [Stage::Announcing, Stage::Referring, Stage::Following] {
        shell.transfer_event(&mut rig, Event::Stage { stage });
    }
    rig.model_event(FIRST, ModelEvent::TurnComplete);
    shell.run(&mut rig, Duration::from_millis(200));
    // Asha is in the middle of a reply when the outcome arrives.
    rig.model_audio(FIRST, 400);
    let no_answer = super::no_answer::tests::finished(Outcome::NoAnswer { status: Some(480) });
    shell.transfer_event(&mut rig, no_answer);
    assert!(
        rig.core.handoff_under_way(),
        "the notice waits for the turn"
    );
    shell.run(&mut rig, Duration::from_millis(100));
    assert!(shell.after.is_some(), "Sam is still to be brought in");
    let turn_end = rig.now;
    rig.model_event(FIRST, ModelEvent::GenerationComplete);
    rig.model_event(FIRST, ModelEvent::TurnComplete);
    shell.run(&mut rig, Duration::from_millis(100));
    assert!(shell.after.is_none(), "nothing is left to do");
    let report = rig.core.finish(Some("test".into()));
    let blocked: Vec<_> = report
        .events
        .iter()
        .filter(|e| matches!(e, CallEvent::HandoffBlocked { .. }))
        .collect();
    assert!(blocked.is_empty(), "{blocked:?}");
    let to_sam = report.events.iter().find_map(|e| match e {
        CallEvent::HandoffAnnouncement { to, at_ms, .. } if to == "desk" => Some(*at_ms),
        _ => None,
    });
    let turn_end_ms = (turn_end - media_zero).as_millis() as u64;
    assert!(
        to_sam.is_some_and(|at| at >= turn_end_ms),
        "Sam brought in after the turn ({turn_end_ms} ms): {to_sam:?}; {:?}",
        report.events
    );
}

/// `[model] uplink_chunk_ms = 40`: caller audio goes to the model two frames to a message, on
/// both protocols, timed from the first frame's arrival; the default sends each frame.
#[test]
fn caller_audio_goes_to_the_model_in_chunks_of_uplink_chunk_ms() {
    let ulaw = Wire {
        protocol: Protocol::OpenAi,
        law: Some(Law::Ulaw),
    };
    // (wire, bytes of one 20 ms frame in its message)
    for (wire, frame_bytes) in [(Wire::from(Protocol::Gemini), 320), (ulaw, 160)] {
        for (chunk_ms, messages) in [(20, 5), (40, 2), (100, 1)] {
            let opts = CallOptions {
                caller_silence: Duration::from_millis(200),
                uplink_chunk: Duration::from_millis(chunk_ms),
                ..CallOptions::default()
            };
            let mut rig = Rig::new(wire, opts);
            let first_frame_at = rig.now + FRAME;
            rig.caller(100, true);
            let audio = uplink_audio(&rig);
            assert_eq!(audio.len(), messages, "{wire:?}, {chunk_ms} ms");
            let per = frame_bytes * chunk_ms as usize / 20;
            assert!(
                audio.iter().all(|(_, b)| *b == per),
                "{wire:?}, {chunk_ms} ms: {audio:?}"
            );
            // uplink_added_ms of a chunk counts from its first frame: the wait to gather it is
            // latency the caller has.
            let stamps: Vec<Instant> = rig
                .model
                .iter()
                .filter_map(|c| match c {
                    ModelCommand::Send {
                        out: Outbound::Text { received_at, .. },
                        ..
                    } => received_at.map(|t| t.into_std()),
                    _ => None,
                })
                .collect();
            assert_eq!(stamps[0], first_frame_at, "{wire:?}, {chunk_ms} ms");
            if chunk_ms == 40 {
                assert_eq!(stamps[1], first_frame_at + 2 * FRAME);
                // The fifth frame waits for the sixth.
                rig.caller(20, true);
                assert_eq!(uplink_audio(&rig).len(), 3);
            }
        }
    }
}

/// A drop while a chunk is half gathered: the ring replays those frames to the new session, and
/// live audio after it starts a fresh chunk (nothing sent twice from what was gathered).
#[test]
fn a_half_gathered_chunk_is_replayed_once_after_a_drop() {
    let opts = CallOptions {
        uplink_chunk: Duration::from_millis(40),
        ..resuming()
    };
    let mut rig = Rig::new(Protocol::Gemini, opts);
    rig.resumption(FIRST, "h1");
    rig.caller(60, true);
    assert_eq!(
        rig.uplink_to(FIRST),
        (1, 0),
        "the third frame is still gathered"
    );
    // Opened before the next frame: the gathered frame is in the ring's replay.
    rig.drop_and_reopen(FIRST);
    let before = uplink_audio(&rig).len();
    let sizes: Vec<usize> = uplink_audio(&rig)[1..].iter().map(|(_, b)| *b).collect();
    assert_eq!(
        sizes,
        [640, 320],
        "replayed two frames to a message, as live audio goes"
    );
    let replayed: usize = sizes.iter().sum();
    assert_eq!(
        replayed,
        3 * 320,
        "all three frames, once, in 40 ms messages"
    );
    // Three live frames: one chunk of the first two, the third gathered (had the old frame
    // still been gathered, it would have gone with the first and the second with the third).
    rig.caller(60, true);
    let live = &uplink_audio(&rig)[before..];
    assert_eq!(live.len(), 1, "{live:?}");
    assert_eq!(live[0].1, 2 * 320);
}

/// A frame gathered into a longer chunk reaches the model up to a chunk less one frame after it
/// arrived, so the margin grows by that much: a handle less than `replay_margin` after the chunk
/// went up covers none of it, even though its first frame arrived more than `replay_margin`
/// before; once the margin plus a chunk less one frame has passed, the whole chunk is covered.
#[test]
fn a_handle_covers_a_gathered_frame_only_a_margin_after_its_chunk_went_up() {
    for (after_chunk_ms, replayed_frames) in [(460, 5), (580, 0)] {
        let opts = CallOptions {
            uplink_chunk: Duration::from_millis(100),
            ..resuming()
        };
        let margin = opts.reconnect.replay_margin;
        assert_eq!(margin, Duration::from_millis(500));
        let mut rig = Rig::new(Protocol::Gemini, opts);
        rig.resumption(FIRST, "h1");
        let first_frame_at = rig.now + FRAME;
        rig.caller(100, true);
        let chunk_at = rig.now;
        assert_eq!(chunk_at - first_frame_at, 4 * FRAME);
        assert_eq!(rig.uplink_to(FIRST), (1, 0), "five frames, one chunk");
        rig.advance(Duration::from_millis(after_chunk_ms));
        // At 460 ms the first frame arrived 540 ms ago (over the margin) but went up 460 ms ago.
        rig.resumption(FIRST, "h2");
        rig.drop_and_reopen(FIRST);
        let replayed: usize = uplink_audio(&rig)[1..].iter().map(|(_, b)| *b).sum();
        assert_eq!(
            replayed,
            replayed_frames * 320,
            "handle {after_chunk_ms} ms after the chunk went up"
        );
    }
}
