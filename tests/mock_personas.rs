//! Multi-agent handoffs against the mock model, on a virtual clock: for each model profile, each
//! handoff strategy's wire sequence (as baton sends it) is played against the shipped agent-set
//! scenarios, and what comes back is checked: whose voice speaks, when the new agent's first audio
//! arrives, that nothing is interrupted, and that what a profile does not support fails the way the
//! real model does. Sessions are driven directly through the sans-IO `MockSession`; time only moves
//! from one deadline to the next.

#[path = "mock_personas/sim.rs"]
mod sim;

use std::time::Duration;

use serde_json::json;

use baton::mock::Profile;
use sim::*;

const TRIGGER: &str = "(You are now speaking with the caller. Greet them and continue.)";

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
        if let Some(call) = &turn.tool_call {
            // A blocking call (seed 002's MCP tools): the reply waits for its response.
            let k = sim.run_until(a, from, tool_call);
            let id = msg(&sim.log[k].2)
                .and_then(|m| m.tool_call.as_ref())
                .and_then(|t| t.function_calls.first())
                .and_then(|f| f.id.clone())
                .unwrap();
            sim.send(
                a,
                json!({"toolResponse": {"functionResponses": [
                    {"id": id, "name": call.name, "response": {"output": {"ok": true}}}
                ]}}),
            );
        }
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
