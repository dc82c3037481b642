//! The harness of the handoff tests: several mock sessions of one scenario on one virtual
//! clock, driven through the sans-IO `MockSession`, with everything they sent and helpers to read
//! it as model turns.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

use baton::mock::clip::OUTPUT_RATE;
use baton::mock::{Endpoint, MockSession, Outgoing, Profile, Scenario};
use baton::model::gemini::wire::ServerMessage;

pub const MS: Duration = Duration::from_millis(1);

pub fn scenario(name: &str) -> Arc<Scenario> {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("audio-fixtures/scenarios/{name}.toml"));
    Arc::new(Scenario::load(&path).unwrap())
}

/// The instruction baton gives an agent (the orchestrator's configs start this way).
pub fn instruction(s: &Scenario, id: &str) -> String {
    let p = s.personas.iter().find(|p| p.id == id).unwrap();
    format!(
        "You are {}, the {} agent. Keep answers short.",
        p.marker, p.id
    )
}

pub fn transfer_tools(s: &Scenario) -> Value {
    let decls: Vec<Value> = s
        .personas
        .iter()
        .map(|p| {
            json!({"name": format!("transfer_to_{}", p.id), "behavior": "NON_BLOCKING",
                        "description": "Hand the caller over."})
        })
        .collect();
    json!([{"functionDeclarations": decls}])
}

/// Several sessions of one scenario on one virtual clock, with everything they sent.
pub struct Sim {
    pub scenario: Arc<Scenario>,
    pub profile: Profile,
    pub sessions: Vec<MockSession>,
    pub t0: Instant,
    pub now: Instant,
    /// (time since start, session index, what it sent)
    pub log: Vec<(Duration, usize, Outgoing)>,
}

impl Sim {
    pub fn new(name: &str, profile: Profile) -> Self {
        let t0 = Instant::now();
        Sim {
            scenario: scenario(name),
            profile,
            sessions: Vec::new(),
            t0,
            now: t0,
            log: Vec::new(),
        }
    }

    pub fn t(&self) -> Duration {
        self.now - self.t0
    }

    /// Opens a session and sends `setup` as agent `id`, with `extra` setup fields.
    pub fn open(&mut self, id: &str, extra: Value) -> usize {
        let mut setup = json!({"model": "models/gemini-3.8-live", "outputAudioTranscription": {},
                               "inputAudioTranscription": {},
                               "systemInstruction": {"parts": [{"text": instruction(&self.scenario, id)}]}});
        if let (Some(s), Value::Object(e)) = (setup.as_object_mut(), extra) {
            s.extend(e);
        }
        self.sessions.push(MockSession::new(
            self.scenario.clone(),
            Endpoint::default(),
            self.profile,
        ));
        let i = self.sessions.len() - 1;
        self.send(i, json!({ "setup": setup }));
        i
    }

    pub fn drain(&mut self) {
        for (i, s) in self.sessions.iter_mut().enumerate() {
            while let Some(o) = s.poll_transmit() {
                self.log.push((self.now - self.t0, i, o));
            }
        }
    }

    pub fn send(&mut self, i: usize, v: Value) {
        self.sessions[i].handle_frame(v.to_string().as_bytes(), self.now);
        self.drain();
    }

    /// Runs timers up to `t` (since start), then sets the clock there.
    pub fn run_to(&mut self, t: Duration) {
        let end = self.t0 + t;
        loop {
            let next = self
                .sessions
                .iter()
                .filter_map(MockSession::poll_timeout)
                .min();
            match next {
                Some(d) if d <= end => {
                    self.now = d.max(self.now);
                    for s in &mut self.sessions {
                        s.handle_timeout(self.now);
                    }
                    self.drain();
                }
                _ => break,
            }
        }
        self.now = end.max(self.now);
    }

    /// Runs timers until session `i` sends something matching `what` (after log index `from`);
    /// returns its log index.
    pub fn run_until(&mut self, i: usize, from: usize, what: fn(&ServerMessage) -> bool) -> usize {
        for _ in 0..100_000 {
            if let Some(k) = self.find(i, from, what) {
                return k;
            }
            let Some(d) = self
                .sessions
                .iter()
                .filter_map(MockSession::poll_timeout)
                .min()
            else {
                break;
            };
            self.run_to(d - self.t0);
        }
        panic!(
            "session {i} never sent the awaited message; log: {:#?}",
            &self.log[from..]
        );
    }

    pub fn find(&self, i: usize, from: usize, what: fn(&ServerMessage) -> bool) -> Option<usize> {
        (from..self.log.len())
            .find(|&k| self.log[k].1 == i && msg(&self.log[k].2).is_some_and(what))
    }

    /// The caller says one turn into session `i` (0.6 s of tone, then 0.6 s of silence: the
    /// VAD ends the turn), in 20 ms chunks at real-time pace.
    pub fn caller_turn(&mut self, i: usize) {
        let samples: Vec<i16> = (0..16 * 1200)
            .map(|n| {
                if n < 16 * 600 {
                    ((n as f64 * 0.3).sin() * 8000.0) as i16
                } else {
                    0
                }
            })
            .collect();
        for chunk in samples.chunks(320) {
            self.run_to(self.t() + 20 * MS);
            let bytes: Vec<u8> = chunk.iter().flat_map(|s| s.to_le_bytes()).collect();
            self.send(
                i,
                json!({"realtimeInput": {"audio": {"mimeType": "audio/pcm;rate=16000",
                                                            "data": STANDARD.encode(bytes)}}}),
            );
        }
    }
}

pub fn msg(o: &Outgoing) -> Option<&ServerMessage> {
    match o {
        Outgoing::Message(m) => Some(m),
        _ => None,
    }
}

pub fn audio(m: &ServerMessage) -> bool {
    m.server_content
        .as_ref()
        .is_some_and(|c| c.model_turn.is_some())
}
pub fn generation_complete(m: &ServerMessage) -> bool {
    m.server_content
        .as_ref()
        .is_some_and(|c| c.generation_complete == Some(true))
}
pub fn turn_complete(m: &ServerMessage) -> bool {
    m.server_content
        .as_ref()
        .is_some_and(|c| c.turn_complete == Some(true))
}
pub fn tool_call(m: &ServerMessage) -> bool {
    m.tool_call.is_some()
}

/// One model turn as the client saw it: its first audio, generation end, turn end, what it said.
#[derive(Debug)]
pub struct Spoken {
    pub first_audio: Duration,
    pub generation_complete: Duration,
    pub turn_complete: Duration,
    pub samples: usize,
    pub text: String,
}

/// Session `i`'s model turns that produced audio, in order.
pub fn spoken(sim: &Sim, i: usize) -> Vec<Spoken> {
    let mut out = Vec::new();
    let mut cur: Option<Spoken> = None;
    for (t, s, o) in &sim.log {
        let Some(c) = msg(o)
            .filter(|_| *s == i)
            .and_then(|m| m.server_content.as_ref())
        else {
            continue;
        };
        if let Some(mt) = &c.model_turn {
            let n: usize = mt
                .parts
                .iter()
                .filter_map(|p| p.inline_data.as_ref()?.data.as_deref())
                .map(|d| STANDARD.decode(d).unwrap().len() / 2)
                .sum();
            let sp = cur.get_or_insert(Spoken {
                first_audio: *t,
                generation_complete: Duration::MAX,
                turn_complete: Duration::MAX,
                samples: 0,
                text: String::new(),
            });
            sp.samples += n;
        }
        if let (Some(sp), Some(tr)) = (cur.as_mut(), &c.output_transcription) {
            sp.text.push_str(tr.text.as_deref().unwrap_or_default());
        }
        if c.generation_complete == Some(true)
            && let Some(sp) = cur.as_mut()
        {
            sp.generation_complete = *t;
        }
        if c.turn_complete == Some(true)
            && let Some(mut sp) = cur.take()
        {
            sp.turn_complete = *t;
            out.push(sp);
        }
    }
    out.extend(cur);
    out
}

pub fn duration_of(samples: usize) -> Duration {
    Duration::from_secs_f64(samples as f64 / f64::from(OUTPUT_RATE))
}

pub fn interrupted(sim: &Sim) -> bool {
    sim.log.iter().any(|(_, _, o)| {
        msg(o)
            .and_then(|m| m.server_content.as_ref())
            .is_some_and(|c| c.interrupted.is_some())
    })
}

pub fn closed_with(sim: &Sim, i: usize) -> Option<(u16, String)> {
    sim.log.iter().find_map(|(_, s, o)| match o {
        Outgoing::Close { code, reason } if *s == i => Some((*code, reason.clone())),
        _ => None,
    })
}

pub fn text_of(s: &Scenario, turn: usize) -> String {
    s.turns[turn].reply.text.clone()
}
pub fn handoff_text(s: &Scenario, turn: usize) -> String {
    s.turns[turn].handoff.as_ref().unwrap().reply.text.clone()
}
