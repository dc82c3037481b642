//! Multi-agent handoffs against the mock model, on a virtual clock: for each model profile, each
//! handoff strategy's wire sequence (as baton sends it) is played against the shipped agent-set
//! scenarios, and what comes back is checked: whose voice speaks, when the new agent's first audio
//! arrives, that nothing is interrupted, and that what a profile does not support fails the way the
//! real model does. Sessions are driven directly through the sans-IO `MockSession`; time only moves
//! from one deadline to the next.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::{Value, json};

use baton::mock::clip::OUTPUT_RATE;
use baton::mock::{Endpoint, MockSession, Outgoing, Profile, Scenario};
use baton::model::gemini::wire::ServerMessage;

const MS: Duration = Duration::from_millis(1);
const TRIGGER: &str = "(You are now speaking with the caller. Greet them and continue.)";

fn scenario(name: &str) -> Arc<Scenario> {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join(format!("audio-fixtures/scenarios/{name}.toml"));
    Arc::new(Scenario::load(&path).unwrap())
}

/// The instruction baton gives an agent (the orchestrator's configs start this way).
fn instruction(s: &Scenario, id: &str) -> String {
    let p = s.personas.iter().find(|p| p.id == id).unwrap();
    format!(
        "You are {}, the {} agent. Keep answers short.",
        p.marker, p.id
    )
}

fn transfer_tools(s: &Scenario) -> Value {
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
struct Sim {
    scenario: Arc<Scenario>,
    profile: Profile,
    sessions: Vec<MockSession>,
    t0: Instant,
    now: Instant,
    /// (time since start, session index, what it sent)
    log: Vec<(Duration, usize, Outgoing)>,
}

impl Sim {
    fn new(name: &str, profile: Profile) -> Self {
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

    fn t(&self) -> Duration {
        self.now - self.t0
    }

    /// Opens a session and sends `setup` as agent `id`, with `extra` setup fields.
    fn open(&mut self, id: &str, extra: Value) -> usize {
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

    fn drain(&mut self) {
        for (i, s) in self.sessions.iter_mut().enumerate() {
            while let Some(o) = s.poll_transmit() {
                self.log.push((self.now - self.t0, i, o));
            }
        }
    }

    fn send(&mut self, i: usize, v: Value) {
        self.sessions[i].handle_frame(v.to_string().as_bytes(), self.now);
        self.drain();
    }

    /// Runs timers up to `t` (since start), then sets the clock there.
    fn run_to(&mut self, t: Duration) {
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
    fn run_until(&mut self, i: usize, from: usize, what: fn(&ServerMessage) -> bool) -> usize {
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

    fn find(&self, i: usize, from: usize, what: fn(&ServerMessage) -> bool) -> Option<usize> {
        (from..self.log.len())
            .find(|&k| self.log[k].1 == i && msg(&self.log[k].2).is_some_and(what))
    }

    /// The caller says one turn into session `i` (0.6 s of tone, then 0.6 s of silence: the
    /// VAD ends the turn), in 20 ms chunks at real-time pace.
    fn caller_turn(&mut self, i: usize) {
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

fn msg(o: &Outgoing) -> Option<&ServerMessage> {
    match o {
        Outgoing::Message(m) => Some(m),
        Outgoing::Close { .. } => None,
    }
}

fn audio(m: &ServerMessage) -> bool {
    m.server_content
        .as_ref()
        .is_some_and(|c| c.model_turn.is_some())
}
fn generation_complete(m: &ServerMessage) -> bool {
    m.server_content
        .as_ref()
        .is_some_and(|c| c.generation_complete == Some(true))
}
fn turn_complete(m: &ServerMessage) -> bool {
    m.server_content
        .as_ref()
        .is_some_and(|c| c.turn_complete == Some(true))
}
fn tool_call(m: &ServerMessage) -> bool {
    m.tool_call.is_some()
}

/// One model turn as the client saw it: its first audio, generation end, turn end, what it said.
#[derive(Debug)]
struct Spoken {
    first_audio: Duration,
    generation_complete: Duration,
    turn_complete: Duration,
    samples: usize,
    text: String,
}

/// Session `i`'s model turns that produced audio, in order.
fn spoken(sim: &Sim, i: usize) -> Vec<Spoken> {
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

fn duration_of(samples: usize) -> Duration {
    Duration::from_secs_f64(samples as f64 / f64::from(OUTPUT_RATE))
}

fn interrupted(sim: &Sim) -> bool {
    sim.log.iter().any(|(_, _, o)| {
        msg(o)
            .and_then(|m| m.server_content.as_ref())
            .is_some_and(|c| c.interrupted.is_some())
    })
}

fn closed_with(sim: &Sim, i: usize) -> Option<(u16, String)> {
    sim.log.iter().find_map(|(_, s, o)| match o {
        Outgoing::Close { code, reason } if *s == i => Some((*code, reason.clone())),
        _ => None,
    })
}

fn text_of(s: &Scenario, turn: usize) -> String {
    s.turns[turn].reply.text.clone()
}
fn handoff_text(s: &Scenario, turn: usize) -> String {
    s.turns[turn].handoff.as_ref().unwrap().reply.text.clone()
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Strategy {
    ContextUpdate,
    ToolResponse,
    InjectTurn,
    Recreate,
    RecreateCold,
    /// Baton decided nothing on the wire but still sent the trigger.
    NotPerformed,
}

/// What happened around the seed000 advisor → schemes handoff (caller turn 2).
struct Outcome {
    sim: Sim,
    /// The session that speaks after the handoff.
    after: usize,
    announcement: Spoken,
    /// When the announcing turn's generation completed.
    gc: Duration,
    /// When baton sent the trigger / injected turn / tool response that should make the new
    /// agent speak (for WHEN_IDLE: the generation end it waits for).
    trigger: Duration,
}

/// Plays caller turns 1 and 2 of seed000 and the handoff the way `strategy` does it.
fn advisor_to_schemes(profile: Profile, strategy: Strategy) -> Outcome {
    let mut sim = Sim::new("seed000", profile);
    // Only the model-driven strategy declares the handoff tools.
    let tools = match strategy {
        Strategy::ToolResponse => transfer_tools(&sim.scenario),
        _ => json!([]),
    };
    let a = sim.open("advisor", json!({ "tools": tools }));
    sim.caller_turn(a);
    let from = sim.log.len();
    sim.run_until(a, from, turn_complete);
    let from = sim.log.len();
    sim.caller_turn(a);
    let first = sim.run_until(a, from, audio);
    let s = sim.scenario.clone();
    let ravi = instruction(&s, "schemes");
    let mut trigger = Duration::ZERO;
    let mut after = a;
    match strategy {
        Strategy::ContextUpdate => {
            // As soon as baton decides: while the announcement is being generated.
            sim.send(
                a,
                json!({"contextUpdate": {"systemInstruction": {"parts": [{"text": ravi}]},
                                                 "tools": {"tools": []}}}),
            );
        }
        Strategy::ToolResponse => {
            let k = sim.run_until(a, first, tool_call);
            let call = msg(&sim.log[k].2)
                .unwrap()
                .tool_call
                .clone()
                .unwrap()
                .function_calls[0]
                .clone();
            assert_eq!(call.name.as_deref(), Some("transfer_to_schemes"));
            sim.send(
                a,
                json!({"toolResponse": {"functionResponses": [{
                "id": call.id, "name": call.name, "scheduling": "WHEN_IDLE",
                "response": {"output": {"status": "transferred", "instruction": ravi}}}]}}),
            );
        }
        Strategy::Recreate => {
            // Warm standby while the first session is still speaking.
            let b = sim.open(
                "schemes",
                json!({"historyConfig": {"initialHistoryInClientContent": true}}),
            );
            let history = json!([
                {"role": "user", "parts": [{"text": s.turns[0].input_text}]},
                {"role": "model", "parts": [{"text": text_of(&s, 0)}]},
                {"role": "user", "parts": [{"text": s.turns[1].input_text}]},
                {"role": "model", "parts": [{"text": text_of(&s, 1)}]}]);
            sim.send(
                b,
                json!({"clientContent": {"turns": history, "turnComplete": true}}),
            );
            after = b;
        }
        _ => {}
    }
    if sim.sessions[a].is_closed() {
        let announcement = spoken(&sim, a).remove(1);
        return Outcome {
            sim,
            after,
            announcement,
            gc: Duration::ZERO,
            trigger,
        };
    }
    let gck = sim.run_until(a, first, generation_complete);
    let gc = sim.log[gck].0;
    match strategy {
        Strategy::ContextUpdate | Strategy::NotPerformed => {
            trigger = sim.t();
            sim.send(a, json!({"realtimeInput": {"text": TRIGGER}}));
        }
        Strategy::ToolResponse => trigger = gc,
        Strategy::InjectTurn => {
            trigger = sim.t();
            sim.send(a, json!({"clientContent": {"turns": [{"role": "user", "parts": [{"text":
                format!("{ravi} The caller asked about government savings schemes. Greet them.")}]}],
                "turnComplete": true}}));
        }
        Strategy::Recreate => {
            trigger = sim.t();
            sim.send(after, json!({"realtimeInput": {"text": TRIGGER}}));
        }
        Strategy::RecreateCold => {
            // Close the first session once its last audio has played, then open the second.
            sim.run_until(a, gck, turn_complete);
            let b = sim.open(
                "schemes",
                json!({"historyConfig": {"initialHistoryInClientContent": true}}),
            );
            let history = json!([{"role": "user", "parts": [{"text": s.turns[1].input_text}]},
                                 {"role": "model", "parts": [{"text": text_of(&s, 1)}]}]);
            sim.send(
                b,
                json!({"clientContent": {"turns": history, "turnComplete": true}}),
            );
            trigger = sim.t();
            sim.send(b, json!({"realtimeInput": {"text": TRIGGER}}));
            after = b;
        }
    }
    sim.run_to(sim.t() + 8000 * MS);
    let announcement = spoken(&sim, a).remove(1);
    Outcome {
        sim,
        after,
        announcement,
        gc,
        trigger,
    }
}

/// The new agent's first reply after the announcement.
fn follow_up(o: &Outcome) -> Option<Spoken> {
    let mut turns = spoken(&o.sim, o.after);
    if o.after == 0 {
        turns.drain(..2);
    }
    turns.into_iter().next()
}

#[test]
fn every_supported_strategy_hands_over_without_a_cut_or_a_gap() {
    let first_audio = 300 * MS;
    let cases = [
        (Profile::Gemini38, Strategy::ContextUpdate),
        (Profile::Gemini38, Strategy::ToolResponse),
        (Profile::Gemini38, Strategy::InjectTurn),
        (Profile::Gemini38, Strategy::Recreate),
        (Profile::Gemini25, Strategy::ToolResponse),
        (Profile::Gemini25, Strategy::InjectTurn),
        (Profile::Gemini25, Strategy::Recreate),
        (Profile::Gemini31, Strategy::Recreate),
    ];
    for (profile, strategy) in cases {
        let o = advisor_to_schemes(profile, strategy);
        let why = format!("{profile} {strategy:?}");
        assert!(!interrupted(&o.sim), "{why}: {:#?}", o.sim.log);
        assert!(o.sim.sessions.iter().all(|s| !s.is_closed()), "{why}");
        let s = &o.sim.scenario;
        assert_eq!(o.announcement.text, text_of(s, 1), "{why}");
        let f = follow_up(&o).unwrap_or_else(|| panic!("{why}: no follow-up"));
        assert_eq!(f.text, handoff_text(s, 1), "{why}: the new agent greets");
        assert_eq!(
            f.samples,
            s.turns[1].handoff.as_ref().unwrap().reply.audio.len(),
            "{why}"
        );
        assert_eq!(o.sim.sessions[o.after].persona(), Some("schemes"), "{why}");
        // Its first audio comes first_audio_ms after the trigger (WHEN_IDLE: after the
        // announcement's generation completed), never before that.
        assert_eq!(f.first_audio, o.trigger + first_audio, "{why}");
        assert!(f.first_audio > o.gc, "{why}");
        // Generation runs ahead of playback: the announcement is still playing, so no gap.
        let announcement_end = o.announcement.first_audio + duration_of(o.announcement.samples);
        assert!(f.first_audio < announcement_end, "{why}: gap");
        if o.after == 0 {
            // One session: the follow-up's turnComplete comes after both have been played.
            assert_eq!(
                f.turn_complete,
                announcement_end + duration_of(f.samples),
                "{why}"
            );
            assert!(o.announcement.turn_complete <= f.first_audio, "{why}");
        }
    }
}

#[test]
fn cold_recreation_leaves_a_gap_of_first_audio_latency() {
    for profile in [Profile::Gemini38, Profile::Gemini25, Profile::Gemini31] {
        let o = advisor_to_schemes(profile, Strategy::RecreateCold);
        assert!(!interrupted(&o.sim));
        let f = follow_up(&o).unwrap();
        assert_eq!(f.text, handoff_text(&o.sim.scenario, 1));
        let announcement_end = o.announcement.first_audio + duration_of(o.announcement.samples);
        assert_eq!(o.trigger, announcement_end, "{profile}");
        assert_eq!(
            f.first_audio - announcement_end,
            300 * MS,
            "{profile}: the handoff gap"
        );
    }
}

#[test]
fn profiles_without_a_strategy_refuse_it_like_the_real_models() {
    for profile in [Profile::Gemini25, Profile::Gemini31] {
        let o = advisor_to_schemes(profile, Strategy::ContextUpdate);
        let (code, reason) = closed_with(&o.sim, 0).expect("closed");
        assert_eq!(code, 1007, "{profile}");
        assert!(
            reason.starts_with("Request contains an invalid argument"),
            "{reason}"
        );
        assert!(reason.contains("contextUpdate"), "{reason}");
        assert!(!o.sim.sessions[0].capabilities().update_instructions);
    }
    let o = advisor_to_schemes(Profile::Gemini31, Strategy::InjectTurn);
    let (code, reason) = closed_with(&o.sim, 0).expect("closed");
    assert_eq!(code, 1007);
    assert!(reason.contains("clientContent"), "{reason}");

    // gemini-3.1 ignores NON_BLOCKING: the handoff call stops the announcement mid-sentence until
    // its response, WHEN_IDLE is meaningless, and nobody greets the caller.
    let o = advisor_to_schemes(Profile::Gemini31, Strategy::ToolResponse);
    assert!(!interrupted(&o.sim));
    assert_eq!(o.announcement.text, text_of(&o.sim.scenario, 1));
    assert!(follow_up(&o).is_none(), "no greeting on 3.1");
    let audio_times: Vec<Duration> = o
        .sim
        .log
        .iter()
        .filter(|(t, _, m)| *t >= o.announcement.first_audio && msg(m).is_some_and(audio))
        .map(|(t, _, _)| *t)
        .collect();
    let longest_pause = audio_times.windows(2).map(|w| w[1] - w[0]).max().unwrap();
    assert_eq!(
        longest_pause,
        300 * MS,
        "generation waited for the tool response"
    );
}

#[test]
fn a_handoff_not_performed_is_heard_in_the_old_voice() {
    let o = advisor_to_schemes(Profile::Gemini38, Strategy::NotPerformed);
    assert_eq!(o.sim.sessions[0].persona(), Some("advisor"));
    // The trigger is just another caller turn: Asha answers it, in her own voice.
    let f = follow_up(&o).unwrap();
    let asha_default = o.sim.scenario.personas[0].default_reply.clone().unwrap();
    assert_eq!(f.text, asha_default.text);
    assert_eq!(f.samples, asha_default.audio.len());
    assert_ne!(f.text, handoff_text(&o.sim.scenario, 1));
}

#[test]
fn silent_tool_response_switches_the_persona_without_speaking() {
    let mut sim = Sim::new("seed000", Profile::Gemini38);
    let a = sim.open("advisor", json!({"tools": transfer_tools(&sim.scenario)}));
    sim.caller_turn(a);
    let k = sim.run_until(a, 0, turn_complete);
    sim.caller_turn(a);
    let k = sim.run_until(a, k + 1, tool_call);
    let call = msg(&sim.log[k].2)
        .unwrap()
        .tool_call
        .clone()
        .unwrap()
        .function_calls[0]
        .clone();
    let ravi = instruction(&sim.scenario, "schemes");
    sim.send(
        a,
        json!({"toolResponse": {"functionResponses": [{"id": call.id, "name": call.name,
        "scheduling": "SILENT", "response": {"output": ravi}}]}}),
    );
    let tc = sim.run_until(a, k, turn_complete);
    sim.run_to(sim.t() + 5000 * MS);
    assert!(
        sim.log[tc + 1..]
            .iter()
            .all(|(_, _, o)| !msg(o).is_some_and(audio)),
        "silent"
    );
    // The next caller turn is Ravi's.
    sim.caller_turn(a);
    sim.run_to(sim.t() + 8000 * MS);
    let turns = spoken(&sim, a);
    assert_eq!(turns.len(), 3);
    assert_eq!(turns[2].text, text_of(&sim.scenario, 2));
}

#[test]
fn a_recreated_session_continues_the_script_as_the_new_agent() {
    for profile in [Profile::Gemini38, Profile::Gemini31] {
        let mut o = advisor_to_schemes(profile, Strategy::Recreate);
        let b = o.after;
        assert_eq!(
            o.sim.sessions[b].script_position(),
            2,
            "history had two caller turns"
        );
        // Baton closes the old session after its last audio; the caller goes on with the new one.
        o.sim.caller_turn(b);
        let from = o.sim.log.len();
        o.sim.run_until(b, from, turn_complete);
        let turns = spoken(&o.sim, b);
        assert_eq!(turns.len(), 2, "{profile}");
        assert_eq!(
            turns[1].text,
            text_of(&o.sim.scenario, 2),
            "{profile}: turn 3, by Ravi"
        );
    }
}

/// Runs a whole agent-set conversation with `context_update` handoffs (3.8): every caller turn by
/// voice, every scripted handoff performed as baton does, and checks who says what.
fn whole_conversation(name: &str) {
    let mut sim = Sim::new(name, Profile::Gemini38);
    let s = sim.scenario.clone();
    let a = sim.open(&s.personas[0].id, json!({}));
    let mut expected = Vec::new();
    for (n, turn) in s.turns.iter().enumerate() {
        sim.caller_turn(a);
        let from = sim.log.len();
        sim.run_until(a, from, audio);
        expected.push(turn.reply.text.clone());
        if let Some(h) = &turn.handoff {
            sim.send(a, json!({"contextUpdate": {"systemInstruction": {"parts": [{"text": instruction(&s, &h.to)}]}}}));
            sim.run_until(a, from, generation_complete);
            sim.send(a, json!({"realtimeInput": {"text": TRIGGER}}));
            expected.push(h.reply.text.clone());
            assert_eq!(
                sim.sessions[a].persona(),
                Some(h.to.as_str()),
                "{name} turn {n}"
            );
        }
        let from = sim.log.len();
        sim.run_until(a, from, turn_complete);
        sim.run_to(sim.t() + 200 * MS);
    }
    assert!(!interrupted(&sim));
    let said: Vec<String> = spoken(&sim, a).into_iter().map(|t| t.text).collect();
    assert_eq!(said, expected, "{name}");
}

#[test]
fn the_agent_set_scenarios_play_through() {
    for name in ["seed000", "seed002", "seed003"] {
        whole_conversation(name);
    }
}

#[test]
fn the_agent_set_scenarios_are_well_formed() {
    let sets = [
        ("seed000", vec![("advisor", "Asha"), ("schemes", "Ravi")]),
        (
            "seed002",
            vec![
                ("crm_billing", "Bill"),
                ("product_promotions", "Priya"),
                ("security_authentication", "Sam"),
            ],
        ),
        (
            "seed003",
            vec![
                ("qualifier", "Quinn"),
                ("scheduler", "Sofia"),
                ("follow_up", "Felix"),
            ],
        ),
    ];
    for (name, agents) in sets {
        let s = scenario(name);
        let got: Vec<(&str, &str)> = s
            .personas
            .iter()
            .map(|p| (p.id.as_str(), p.marker.as_str()))
            .collect();
        assert_eq!(got, agents, "{name}");
        assert!(
            s.caller.as_ref().unwrap().exists(),
            "{name}: caller conversation"
        );
        assert_eq!(s.profile, Profile::Gemini38);
        for (i, t) in s.turns.iter().enumerate() {
            if let Some(h) = &t.handoff {
                // Announcements are long enough to cover a handoff.
                assert!(
                    duration_of(t.reply.audio.len()) >= 1000 * MS,
                    "{name} turn {i}"
                );
                let call = h.tool_call.as_ref().unwrap();
                assert_eq!(
                    call.name,
                    format!("transfer_to_{}", h.to),
                    "{name} turn {i}"
                );
            }
        }
    }
}
