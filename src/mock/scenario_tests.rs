//! Scenario loading tests: schema, errors naming file and key, personas and handoffs.
use super::*;

fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn loads_clips_relative_to_the_file() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("clips")).unwrap();
    crate::audio::wav::write_mono(&dir.path().join("clips/a.wav"), 16000, &[100; 16000]).unwrap();
    let p = write(
        dir.path(),
        "s.toml",
        r#"
name = "t"
caller = "clips/a.wav"
[model]
speed = 2.0
jitter_ms = 7
[[turn]]
input_text = "hello"
reply = "clips/a.wav"
output_text = "hi there"
[turn.tool_call]
name = "get_balance"
args = { account = "checking" }
[[turn]]
"#,
    );
    let s = Scenario::load(&p).unwrap();
    assert_eq!(s.name, "t");
    assert_eq!(s.caller, Some(dir.path().join("clips/a.wav")));
    assert_eq!(s.timing.speed, 2.0);
    assert_eq!(s.timing.jitter, Duration::from_millis(7));
    assert_eq!(s.timing.chunk, Duration::from_millis(40));
    assert_eq!(s.turns.len(), 2);
    assert_eq!(s.turns[0].reply.audio.len(), 24000);
    assert_eq!(s.turns[0].reply.text, "hi there");
    assert_eq!(
        s.turns[0].tool_call,
        Some(ScriptedToolCall {
            name: "get_balance".into(),
            args: serde_json::json!({"account": "checking"})
        })
    );
    assert_eq!(s.turns[1].reply, s.default_reply);
    assert_eq!(s.turn(5).reply, s.default_reply);
}

#[test]
fn errors_name_file_and_key() {
    let dir = tempfile::tempdir().unwrap();
    let cases = [
        ("[model]\nspeeed = 2.0\n", "speeed"),
        ("[model]\nspeed = -1.0\n", "model.speed"),
        ("[model]\nburst = 0\n", "model.burst"),
        ("[[turn]]\nreply = \"missing.wav\"\n", "turn[0].reply"),
        (
            "[[turn]]\n[turn.tool_call]\nname = \"f\"\nargs = 3\n",
            "turn[0].tool_call.args",
        ),
        ("name = ", "line 1"),
    ];
    for (text, key) in cases {
        let p = write(dir.path(), "bad.toml", text);
        let err = Scenario::load(&p).unwrap_err().to_string();
        assert!(err.contains("bad.toml"), "{err}");
        assert!(err.contains(key), "{key}: {err}");
    }
    let err = Scenario::load(&dir.path().join("none.toml"))
        .unwrap_err()
        .to_string();
    assert!(err.contains("none.toml"), "{err}");
}

#[test]
fn builtin_needs_no_files() {
    let s = Scenario::builtin();
    assert!(s.turns.is_empty());
    assert!(!s.default_reply.audio.is_empty());
    assert_eq!(s.turn(0).reply.text, BUILTIN_DEFAULT_TEXT);
}

/// A directory with 0.1 s clips `a.wav`, `b.wav`, `c.wav`.
fn clips_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, n) in [("a.wav", 1600), ("b.wav", 3200), ("c.wav", 4800)] {
        crate::audio::wav::write_mono(&dir.path().join(name), 16000, &vec![100; n]).unwrap();
    }
    dir
}

const PERSONAS: &str = r#"
[model]
profile = "gemini-3.1"
partial_content_wedges_vad = true
[[persona]]
id = "advisor"
marker = "Asha"
default_reply = "a.wav"
default_reply_text = "asha default"
[[persona]]
id = "schemes"
marker = "Ravi"
"#;

#[test]
fn personas_handoffs_and_profile() {
    let dir = clips_dir();
    let text = format!(
        "{PERSONAS}{}",
        r#"
[[turn]]
input_text = "scheme?"
reply = "b.wav"
output_text = "let me bring in Ravi"
by = "advisor"
[turn.by_persona]
schemes = { reply = "c.wav", output_text = "ravi answers" }
[turn.handoff]
to = "schemes"
reply = "c.wav"
output_text = "ravi greets"
tool_call = { name = "transfer_to_schemes", args = { summary = "s" } }
[turn.after_tool]
reply = "a.wav"
[[turn]]
reply = "b.wav"
by = "schemes"
"#
    );
    let s = Scenario::load(&write(dir.path(), "p.toml", &text)).unwrap();
    assert_eq!(s.profile, crate::mock::Profile::Gemini31);
    assert!(s.quirks.partial_content_wedges_vad && !s.quirks.partial_content_interrupts);
    assert_eq!(s.markers(), ["Asha", "Ravi"]);
    assert_eq!(s.persona_index("schemes"), Some(1));
    let h = s.turns[0].handoff.as_ref().unwrap();
    assert_eq!(
        (h.to.as_str(), h.reply.text.as_str()),
        ("schemes", "ravi greets")
    );
    assert_eq!(h.tool_call.as_ref().unwrap().name, "transfer_to_schemes");
    assert_eq!(s.turns[0].after_tool.as_ref().unwrap().text, "");
    // Who says what.
    assert_eq!(s.reply_for(0, Some(0)).text, "let me bring in Ravi");
    assert_eq!(s.reply_for(0, Some(1)).text, "ravi answers");
    assert_eq!(s.reply_for(0, None).text, "let me bring in Ravi");
    // Turn 1 is Ravi's: Asha says her own default instead; past the script, the defaults.
    assert_eq!(s.reply_for(1, Some(0)).text, "asha default");
    assert_eq!(s.reply_for(1, Some(1)).audio.len(), 4800);
    assert_eq!(s.reply_for(9, Some(0)).text, "asha default");
    assert_eq!(
        s.reply_for(9, Some(1)),
        &s.default_reply,
        "Ravi has no default of his own"
    );
}

#[test]
fn persona_errors_name_file_and_key() {
    let dir = clips_dir();
    let cases = [
        ("[model]\nprofile = \"gemini-4\"\n", "model.profile"),
        ("[[persona]]\nid = \"\"\nmarker = \"A\"\n", "persona[0].id"),
        (
            "[[persona]]\nid = \"a\"\nmarker = \"A\"\n[[persona]]\nid = \"b\"\nmarker = \"A\"\n",
            "persona[1].marker",
        ),
        (
            "[[persona]]\nid = \"a\"\nmarker = \" A\"\n",
            "persona[0].marker",
        ),
        (
            "[[persona]]\nid = \"a\"\nmarker = \"A\"\ndefault_reply = \"none.wav\"\n",
            "persona[0].default_reply",
        ),
        ("[[turn]]\nby = \"ghost\"\n", "turn[0].by"),
        (
            "[[turn]]\n[turn.by_persona]\nghost = { reply = \"a.wav\" }\n",
            "turn[0].by_persona.ghost",
        ),
        (
            "[[persona]]\nid = \"a\"\nmarker = \"A\"\n[[turn]]\n[turn.handoff]\nto = \"b\"\nreply = \"a.wav\"\n",
            "turn[0].handoff.to",
        ),
        (
            "[[persona]]\nid = \"a\"\nmarker = \"A\"\n[[turn]]\n[turn.handoff]\nto = \"a\"\nreply = \"x.wav\"\n",
            "turn[0].handoff.reply",
        ),
        (
            "[[persona]]\nid = \"a\"\nmarker = \"A\"\n[[turn]]\n[turn.handoff]\nto = \"a\"\nreply = \"a.wav\"\ntool_call = { name = \"\" }\n",
            "turn[0].handoff.tool_call.name",
        ),
        (
            "[[turn]]\n[turn.after_tool]\nreply = \"x.wav\"\n",
            "turn[0].after_tool.reply",
        ),
        ("[[persona]]\nid = \"a\"\n", "marker"),
    ];
    for (text, key) in cases {
        let p = write(dir.path(), "bad.toml", text);
        let err = Scenario::load(&p).unwrap_err().to_string();
        assert!(err.contains("bad.toml"), "{err}");
        assert!(err.contains(key), "{key}: {err}");
    }
}

#[test]
fn the_demo_scenario_keeps_its_defaults() {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("audio-fixtures/scenarios/demo.toml");
    let s = Scenario::load(&p).unwrap();
    assert_eq!(s.profile, crate::mock::Profile::Gemini38);
    assert_eq!(s.quirks, crate::mock::Quirks::default());
    assert!(s.personas.is_empty());
    assert!(
        s.turns
            .iter()
            .all(|t| t.handoff.is_none() && t.by.is_none())
    );
    assert_eq!(s.reply_for(2, None), &s.turns[2].reply);
}

#[test]
fn the_warm_transfer_scenarios_brief_accept_decline_and_drop() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/transfer");
    let warm = Scenario::load(&dir.join("human_warm.toml")).unwrap();
    let b = warm.brief.as_ref().expect("[brief]");
    assert_eq!(b.marker, "You are briefing");
    assert_eq!(b.answer, Answer::Accept);
    assert!(!b.reply.audio.is_empty() && b.reply.text.starts_with("Hi Ravi"));
    assert!(b.answer_reply.as_ref().is_some_and(|r| !r.audio.is_empty()));
    // A copy of the blind transfer's scenario, plus the brief.
    let blind = Scenario::load(&dir.join("human_blind.toml")).unwrap();
    assert_eq!((warm.turns.clone(), blind.brief), (blind.turns, None));
    let decline = Scenario::load(&dir.join("human_warm_decline.toml")).unwrap();
    assert_eq!(
        decline.brief.map(|b| b.answer),
        Some(Answer::Decline {
            reason: "Ravi cannot take the call now.".into()
        })
    );
    assert!(!warm.brief.unwrap().drop_mid_brief);
    let drops = Scenario::load(&dir.join("human_warm_brief_drops.toml")).unwrap();
    let b = drops.brief.expect("[brief]");
    assert!(b.drop_mid_brief);
    assert_eq!((b.answer, drops.turns), (Answer::None, warm.turns));
}

#[test]
fn brief_errors_name_file_and_key() {
    let dir = clips_dir();
    let cases = [
        (
            "[brief]\nreply = \"a.wav\"\nanswer = \"maybe\"\n",
            "brief.answer: must be \"accept\", \"decline\" or \"none\", not \"maybe\"",
        ),
        (
            "[brief]\nreply = \"a.wav\"\nanswer = \"accept\"\nreason = \"x\"\n",
            "brief.reason",
        ),
        (
            "[brief]\nreply = \"a.wav\"\nanswer = \"none\"\nanswer_reply = \"a.wav\"\n",
            "brief.answer_reply",
        ),
        (
            "[brief]\nreply = \"a.wav\"\nanswer = \"accept\"\nanswer_text = \"x\"\n",
            "brief.answer_text: needs answer_reply",
        ),
        (
            "[brief]\nreply = \"a.wav\"\nanswer = \"accept\"\nmarker = \" \"\n",
            "brief.marker",
        ),
        (
            "[brief]\nreply = \"none.wav\"\nanswer = \"accept\"\n",
            "brief.reply",
        ),
        ("[brief]\nanswer = \"accept\"\n", "missing field `reply`"),
        (
            "[brief]\nreply = \"a.wav\"\nanswer = \"none\"\ndrop_mid_brief = \"yes\"\n",
            "drop_mid_brief",
        ),
    ];
    for (text, want) in cases {
        let p = write(dir.path(), "b.toml", text);
        let err = Scenario::load(&p).unwrap_err().to_string();
        assert!(err.contains("b.toml") && err.contains(want), "{err}");
    }
    let p = write(
        dir.path(),
        "ok.toml",
        "[brief]\nreply = \"a.wav\"\nanswer = \"none\"\n",
    );
    let b = Scenario::load(&p).unwrap().brief.unwrap();
    assert_eq!((b.answer, b.answer_reply), (Answer::None, None));
}
