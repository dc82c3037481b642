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
