//! Engine tests on a virtual clock: plain `Instant` arithmetic, jumping straight to each deadline.
//! This file holds the harness; `turns` tests turn taking, replies and tools, `inputs` tests setup
//! and input handling, `handoffs` personas, scheduling, initial history and profiles, `resume`
//! resumption handles and `faults` the fault modes.

mod brief;
mod faults;
mod handoffs;
mod inputs;
mod resume;
mod turns;

use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

use super::*;
use crate::mock::clip::OUTPUT_RATE;
use crate::mock::scenario::{Reply, ScriptedToolCall, Timing, Turn};
use crate::mock::setup::Backend;
use crate::model::gemini::wire::{FunctionCall, ServerContent};

pub(super) const MS: Duration = Duration::from_millis(1);
pub(super) const REPLY_TEXT: &str = "one two three four five six";

/// 1 s of reply audio at 24 kHz, every sample distinct enough to check order.
pub(super) fn reply_clip() -> Reply {
    Reply {
        audio: (0..OUTPUT_RATE as usize)
            .map(|i| (i % 30000) as i16)
            .collect::<Vec<_>>()
            .into(),
        text: REPLY_TEXT.into(),
    }
}

pub(super) fn scenario(turns: Vec<Turn>) -> Arc<Scenario> {
    Arc::new(Scenario {
        name: "test".into(),
        description: String::new(),
        caller: None,
        agents: None,
        timing: Timing::default(),
        default_reply: reply_clip(),
        turns,
        profile: Profile::default(),
        quirks: Default::default(),
        personas: Vec::new(),
        greeting: None,
        faults: Default::default(),
        brief: None,
    })
}

pub(super) fn tool_turn(name: &str) -> Turn {
    Turn {
        tool_call: Some(ScriptedToolCall {
            name: name.into(),
            args: json!({"account": "checking"}),
        }),
        ..Turn::new(Some("what's my balance".into()), reply_clip())
    }
}

/// A session plus a virtual clock and a log of everything sent, stamped with virtual time.
pub(super) struct Harness {
    pub(super) s: MockSession,
    pub(super) t0: Instant,
    pub(super) now: Instant,
    pub(super) log: Vec<(Duration, Outgoing)>,
}

impl Harness {
    pub(super) fn new(scenario: Arc<Scenario>) -> Self {
        Harness::at(scenario, Endpoint::default())
    }

    /// A session for a client connected to `endpoint`.
    pub(super) fn at(scenario: Arc<Scenario>, endpoint: Endpoint) -> Self {
        Harness::with(scenario, endpoint, Profile::default())
    }

    /// A session of `profile` for a client connected to `endpoint`.
    pub(super) fn with(scenario: Arc<Scenario>, endpoint: Endpoint, profile: Profile) -> Self {
        let t0 = Instant::now();
        Harness {
            s: MockSession::new(scenario, endpoint, profile),
            t0,
            now: t0,
            log: Vec::new(),
        }
    }

    /// Connection `store.register()` of a server sharing `store`, with `faults`.
    pub(super) fn on_server(
        scenario: Arc<Scenario>,
        store: &Arc<crate::mock::Resumption>,
        faults: crate::mock::Faults,
    ) -> Self {
        let mut h = Harness::new(scenario);
        let s = std::mem::replace(
            &mut h.s,
            MockSession::new(
                Arc::new(Scenario::builtin()),
                Endpoint::default(),
                Profile::default(),
            ),
        );
        h.s = s.with_server(store.clone(), store.register(), Arc::new(faults));
        h
    }

    /// A session after a setup with both transcriptions on, plus `extra` setup fields.
    pub(super) fn ready(scenario: Arc<Scenario>, extra: Value) -> Self {
        Harness::ready_as(scenario, Profile::default(), extra)
    }

    /// [`Harness::ready`] for a session of `profile`.
    pub(super) fn ready_as(scenario: Arc<Scenario>, profile: Profile, extra: Value) -> Self {
        let mut h = Harness::with(scenario, Endpoint::default(), profile);
        let mut setup = json!({"model": "models/gemini-3.8-live",
                               "inputAudioTranscription": {}, "outputAudioTranscription": {}});
        if let (Some(s), Value::Object(e)) = (setup.as_object_mut(), extra) {
            s.extend(e);
        }
        h.send(json!({ "setup": setup }));
        assert!(matches!(
            h.take()[..],
            [Outgoing::Message(ServerMessage {
                setup_complete: Some(_),
                ..
            })]
        ));
        h
    }

    pub(super) fn drain(&mut self) {
        while let Some(o) = self.s.poll_transmit() {
            self.log.push((self.now - self.t0, o));
        }
    }

    pub(super) fn send(&mut self, v: Value) {
        self.send_raw(v.to_string().as_bytes());
    }

    pub(super) fn send_raw(&mut self, bytes: &[u8]) {
        self.s.handle_frame(bytes, self.now);
        self.drain();
    }

    /// Runs every timer up to `t`, then sets the clock to `t`.
    pub(super) fn advance_to(&mut self, t: Instant) {
        while let Some(d) = self.s.poll_timeout() {
            if d > t {
                break;
            }
            self.now = d.max(self.now);
            self.s.handle_timeout(self.now);
            self.drain();
        }
        self.now = t.max(self.now);
    }

    pub(super) fn advance(&mut self, d: Duration) {
        self.advance_to(self.now + d);
    }

    /// Runs timers until none is left.
    pub(super) fn settle(&mut self) {
        for _ in 0..10_000 {
            match self.s.poll_timeout() {
                Some(d) => self.advance_to(d),
                None => return,
            }
        }
        panic!("session never settled");
    }

    /// Streams 16 kHz audio in 20 ms chunks at real-time pace, each sent once it is complete.
    pub(super) fn speak(&mut self, samples: &[i16]) {
        for chunk in samples.chunks(320) {
            self.advance(20 * MS);
            let bytes: Vec<u8> = chunk.iter().flat_map(|s| s.to_le_bytes()).collect();
            self.send(
                json!({"realtimeInput": {"audio": {"mimeType": "audio/pcm;rate=16000",
                                                           "data": STANDARD.encode(bytes)}}}),
            );
        }
    }

    pub(super) fn take(&mut self) -> Vec<Outgoing> {
        std::mem::take(&mut self.log)
            .into_iter()
            .map(|(_, o)| o)
            .collect()
    }
}

pub(super) fn tone(ms: usize) -> Vec<i16> {
    (0..16 * ms)
        .map(|i| ((i as f64 * 0.3).sin() * 8000.0) as i16)
        .collect()
}

pub(super) fn silence(ms: usize) -> Vec<i16> {
    vec![0; 16 * ms]
}

pub(super) fn sc(o: &Outgoing) -> Option<&ServerContent> {
    match o {
        Outgoing::Message(m) => m.server_content.as_ref(),
        _ => None,
    }
}

pub(super) fn audio_samples(o: &Outgoing) -> usize {
    sc(o).and_then(|c| c.model_turn.as_ref()).map_or(0, |t| {
        t.parts
            .iter()
            .filter_map(|p| p.inline_data.as_ref()?.data.as_deref())
            .map(|d| STANDARD.decode(d).unwrap().len() / 2)
            .sum()
    })
}

pub(super) fn is(o: &Outgoing, f: fn(&ServerContent) -> bool) -> bool {
    sc(o).is_some_and(f)
}

pub(super) fn close_of(log: &[(Duration, Outgoing)]) -> (u16, String) {
    match log.last() {
        Some((_, Outgoing::Close { code, reason })) => (*code, reason.clone()),
        other => panic!("expected a close, got {other:?}"),
    }
}
