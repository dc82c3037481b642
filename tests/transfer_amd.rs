//! The answering-machine heuristic (`baton::transfer::amd`) on the labelled answered-leg openings
//! in `audio-fixtures/answering/`: each verdict is asserted, the known misses by name, and the
//! error rate the README quotes is the one measured here.

use std::path::{Path, PathBuf};
use std::time::Duration;

use baton::transfer::amd::{Rule, Screen, Settings, Verdict};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("audio-fixtures/answering")
}

fn label(s: &str) -> Verdict {
    match s {
        "human" => Verdict::Human,
        "machine" => Verdict::Machine,
        "unknown" => Verdict::Unknown,
        other => panic!("labels.tsv: unknown label {other:?}"),
    }
}

/// Fixtures where the heuristic is wrong, with what it says instead. A change here is a change
/// to the README's figures.
const KNOWN_MISSES: &[(&str, Verdict)] = &[
    // A person greeting at length talks past the longest greeting.
    ("h_long", Verdict::Machine),
];

#[test]
fn verdicts_on_the_labelled_fixtures() {
    let labels = std::fs::read_to_string(fixtures().join("labels.tsv")).unwrap();
    let (mut total, mut wrong) = (0, 0);
    let mut table = String::new();
    for line in labels
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        let cols: Vec<&str> = line.split('\t').collect();
        let (id, truth) = (cols[0], label(cols[1]));
        let pcm = baton::audio::wav::read(&fixtures().join(format!("{id}.wav"))).unwrap();
        assert_eq!(pcm.rate, 8000, "{id}: the phone leg's rate");
        let mut screen = Screen::new(pcm.rate, Settings::default());
        let decision = pcm
            .samples
            .chunks(160)
            .find_map(|f| screen.push(f))
            .unwrap_or_else(|| panic!("{id}: no decision in {:?}", pcm.duration()));
        assert!(decision.at <= Duration::from_secs(5), "{id}: {decision:?}");
        let expected = KNOWN_MISSES
            .iter()
            .find(|(m, _)| *m == id)
            .map(|(_, v)| *v)
            .unwrap_or(truth);
        table.push_str(&format!(
            "{id:14} {truth:?} -> {:?} by {:?} at {} ms\n",
            decision.verdict,
            decision.rule,
            decision.at.as_millis()
        ));
        assert_eq!(decision.verdict, expected, "{id}: {decision:?}\n{table}");
        total += 1;
        if decision.verdict != truth {
            wrong += 1;
        }
    }
    println!("{table}{wrong} of {total} wrong");
    assert_eq!((wrong, total), (KNOWN_MISSES.len(), 13));
}

#[test]
fn the_short_voicemail_is_caught_by_its_beep() {
    let pcm = baton::audio::wav::read(&fixtures().join("m_short.wav")).unwrap();
    let mut screen = Screen::new(pcm.rate, Settings::default());
    let d = pcm
        .samples
        .chunks(160)
        .find_map(|f| screen.push(f))
        .unwrap();
    assert!(matches!(d.rule, Rule::Beep { hz: 975..=1025 }), "{d:?}");
}

/// The screen's verdict drives a warm transfer: a voicemail is hung up and the caller is back
/// with the agent; a person is briefed.
#[test]
fn verdicts_drive_the_transfer() {
    use baton::transfer::{Action, Input, Outcome, PersonAudio, Plan, Transfer};
    use std::time::Instant;

    for (id, briefed) in [
        ("m_voicemail", false),
        ("h_priya", true),
        ("u_silence", true),
    ] {
        let pcm = baton::audio::wav::read(&fixtures().join(format!("{id}.wav"))).unwrap();
        let t0 = Instant::now();
        let settings = baton::transfer::Settings {
            screen: Some(Duration::from_secs(6)),
            ..Default::default()
        };
        let target = baton::transfer::Destination::Sip("sip:priya@pbx".into());
        let mut t = Transfer::new(Plan::Warm, target, settings, t0);
        let answered = t0 + Duration::from_secs(3);
        t.handle(Input::Answered, answered);
        let mut screen = Screen::new(pcm.rate, Settings::default());
        let mut decided = None;
        for (i, frame) in pcm.samples.chunks(160).enumerate() {
            assert_eq!(t.person_audio(), PersonAudio::Screen, "{id}");
            if let Some(d) = screen.push(frame) {
                let now = answered + Duration::from_millis(20 * (i as u64 + 1));
                t.handle(Input::Screened(d.verdict), now);
                decided = Some(d);
                break;
            }
        }
        assert!(decided.is_some(), "{id}");
        let actions: Vec<Action> = std::iter::from_fn(|| t.poll_action()).collect();
        assert_eq!(
            actions.contains(&Action::StartBrief),
            briefed,
            "{id}: {actions:?}"
        );
        if !briefed {
            assert!(actions.contains(&Action::HangUpPerson), "{id}");
            assert_eq!(t.outcome(), Some(&Outcome::Machine));
        }
    }
}
