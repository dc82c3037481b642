//! Checking one human agent of a set (`kind = "human"`): its destination table through
//! [`crate::transfer::destination::validate`] (every problem named by its full key), the keys a
//! person cannot have (an instruction, tools, a voice: the model never speaks as one), and the
//! transfer plans calls carry out.

use super::Problems;
use crate::agents::config::{AgentSection, RoleName};
use crate::agents::registry::Person;
use crate::transfer::destination::{self, OnNoAnswer};

/// The checked person at `index`, or `None` (with the problems added) when it cannot be used.
pub(super) fn person(
    index: u32,
    id: &str,
    a: &AgentSection,
    index_of: &dyn Fn(&str) -> Option<u32>,
    base: &std::path::Path,
    p: &mut Problems,
) -> Option<Person> {
    let k = format!("agents.{id}");
    let before = p.len();
    let id_ok = id.len() <= 50
        && id.starts_with(|ch: char| ch.is_ascii_lowercase())
        && id
            .chars()
            .all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || ch == '_');
    if !id_ok {
        p.add(
            k.clone(),
            format!("{id:?} cannot be an agent id (it names the transfer_to_<id> tool)"),
            "use lowercase letters, digits and _ (at most 50), starting with a letter",
        );
    }
    if a.name.trim().is_empty() {
        p.add(
            format!("{k}.name"),
            "is empty",
            "give the person's name as the agent says it, e.g. \"Priya at the front desk\"",
        );
    }
    if a.role == Some(RoleName::Primary) {
        p.add(
            format!("{k}.role"),
            "a human agent cannot start the call: the model answers it and hands the caller on",
            "remove role (a person is always brought in), or make a model agent the primary",
        );
    }
    let not_for_people: [(&str, bool); 8] = [
        ("instruction", !a.instruction.trim().is_empty()),
        ("greeting", !a.greeting.trim().is_empty()),
        ("handback_phrase", !a.handback_phrase.trim().is_empty()),
        ("summary_template", !a.summary_template.trim().is_empty()),
        ("voice", !a.voice.trim().is_empty()),
        ("tools", !a.tools.is_empty()),
        ("mcp", !a.mcp.is_empty()),
        ("handoffs", a.handoffs.is_some()),
    ];
    for (key, set) in not_for_people {
        if set {
            p.add(
                format!("{k}.{key}"),
                "does not apply to a human agent: the model never speaks as a person",
                "remove it (the person's own phone is what the caller reaches)",
            );
        }
    }
    let Some(raw) = &a.destination else {
        p.add(
            format!("{k}.destination"),
            "is missing: a human agent needs to be reached somewhere",
            format!(
                "add [{k}.destination] with to = \"sip:priya@pbx.example.com\" (or an E.164 number) and transfer = \"blind\""
            ),
        );
        return None;
    };
    let validated = destination::validate(raw, &format!("{k}.destination"));
    // Keys already found wrong: their checks below would say the same again.
    let mut wrong: Vec<String> = Vec::new();
    if let Err(errors) = &validated {
        for e in &errors.0 {
            wrong.push(e.key.clone());
            p.add(
                e.key.clone(),
                e.message.clone(),
                "see \"Handing the caller to a person\" in the README for the accepted forms",
            );
        }
    }
    // The agent it falls back to and its hold audio are read from the table as written, so a
    // mistake elsewhere in it does not hide theirs.
    let no_answer = raw
        .on_no_answer
        .as_deref()
        .and_then(|t| OnNoAnswer::parse(t).ok());
    if let Some(OnNoAnswer::Agent(name)) = &no_answer
        && index_of(name).is_none()
        && !p.doubts(&format!("agents.{name}"))
    {
        p.add(
            format!("{k}.destination.on_no_answer"),
            format!("names {name:?}, which is not a model agent of this set"),
            "name a model agent by its id (\"agent:front_desk\"), or use \"return\"",
        );
    }
    let hold_key = format!("{k}.destination.hold_audio");
    let mut hold = None;
    if let Some(file) = &raw.hold_audio
        && !wrong.contains(&hold_key)
    {
        let path = base.join(file);
        match crate::audio::wav::read(&path) {
            Ok(pcm) if !pcm.samples.is_empty() => {
                hold = Some(destination::HoldAudio {
                    rate: pcm.rate,
                    samples: pcm.samples.into(),
                });
            }
            Ok(_) => p.add(
                hold_key.clone(),
                format!("{} holds no audio", path.display()),
                "give a WAV with sound in it, or remove hold_audio",
            ),
            Err(e) => p.add(
                hold_key.clone(),
                format!("cannot be used: {e}"),
                "give a mono or stereo 16-bit WAV, relative to the agent set's file",
            ),
        }
    }
    let Ok(mut human) = validated else {
        return None;
    };
    if p.len() != before {
        return None;
    }
    human.hold = hold;
    Some(Person {
        index,
        id: id.to_owned(),
        name: a.name.trim().to_owned(),
        expertise: a.expertise.iter().map(|s| s.trim().to_owned()).collect(),
        aliases: a.aliases.iter().map(|s| s.trim().to_owned()).collect(),
        human,
        transfer_tool: a.policy.transfer_tool,
    })
}
