//! Scenario files: the script the mock model follows. A scenario is TOML; clip paths are relative
//! to the scenario file; every error names the file and the key.
//!
//! ```toml
//! name = "demo"
//! description = "A caller checks a balance, then asks about a savings scheme."
//! caller = "../clips/caller_conversation.wav"  # optional: what a fixture caller replays (not used by the mock itself)
//! agents = "../../config/agents/financial.toml" # optional: the agent set baton runs for this call (not used by the mock)
//! [model]
//! profile = "gemini-3.8"   # model behaviour: gemini-3.8 | gemini-2.5 | gemini-3.1 (see profile.rs); `baton mock-model --profile` overrides
//! first_audio_ms = 300     # end of the caller's turn (after the VAD silence window) → first audio chunk sent
//! connect_ms = 0           # a new connection's WebSocket upgrade is answered this late (the TCP, TLS and HTTP round trips to a distant service)
//! speed = 4.0              # generation speed, × real time
//! chunk_ms = 40            # audio per modelTurn message
//! burst = 3                # chunks sent back to back before pausing to hold the average `speed`
//! jitter_ms = 0            # extra random delay per burst, uniform 0..=jitter_ms, seeded
//! seed = 1
//! silence_ms = 500         # VAD silence window when setup sets no silenceDurationMs
//! default_reply = "../clips/advisor_default.wav"   # optional
//! default_reply_text = "Sorry, could you say that again?"
//! partial_content_wedges_vad = false   # gemini-2.5 quirk: after clientContent without turnComplete, VAD turns get no reply
//! partial_content_interrupts = false   # clientContent with turnComplete:false interrupts a reply being generated
//! greeting = "../clips/advisor_default.wav"  # optional: said unprompted when a fresh conversation starts
//! greeting_text = "..."                      # (never by a session resumed or given initial history)
//!
//! [faults]                             # optional: goAway, drops, late pongs … (see faults.rs)
//! [brief]                              # optional: the script of a warm transfer's brief session
//! marker = "You are briefing"          # optional (this default): a session whose instructions contain it is a brief
//! reply = "../clips/brief_ravi.wav"    # said to the person on baton's starting text turn
//! output_text = "Hi Ravi, I have a caller ..."
//! answer = "accept"                    # after the person's first turn: accept | decline | none
//! reason = "..."                       # optional, decline only: decline_transfer's `reason`
//! answer_reply = "../clips/thanks.wav" # optional: said with the answer (after its function call)
//! answer_text = "..."                  # optional (needs answer_reply)
//! drop_mid_brief = false               # optional: true closes the brief's connection (1011) after the burst completing half the brief
//! [[persona]]                          # optional, any number: the agents the model can speak as
//! id = "advisor"                       # agent id
//! marker = "Asha"                      # the persona is named on the wire by this text
//! default_reply = "../clips/advisor_default.wav"   # optional: its own default reply
//! default_reply_text = "Sorry, could you say that again?"
//!
//! [[turn]]
//! input_text = "Hi, what's my balance?"     # inputTranscription when the caller's turn ends
//! reply = "../clips/advisor_01.wav"
//! output_text = "Your balance is ..."        # outputTranscription of the reply
//! by = "advisor"                             # optional: whose voice `reply` is
//! [turn.tool_call]                           # optional: emitted before the reply audio
//! name = "get_balance"
//! args = { account = "checking" }
//! [turn.by_persona]                          # optional: the same turn answered by another persona
//! schemes = { reply = "../clips/schemes_01.wav", output_text = "..." }
//! [turn.handoff]                             # optional: the handoff announced in this turn
//! to = "schemes"                             # the persona that takes over
//! reply = "../clips/schemes_greet.wav"       # what it says right after the handoff
//! output_text = "..."
//! tool_call = { name = "transfer_to_schemes", args = { summary = "..." } }  # optional, see below
//! [turn.after_tool]                          # optional: what the model says about a NON_BLOCKING
//! reply = "../clips/advisor_found.wav"       # call's result answered with WHEN_IDLE or INTERRUPT
//! output_text = "..."
//! ```
//!
//! Each caller turn (however it ends: VAD, `activityEnd`, `clientContent` with `turnComplete`,
//! `realtimeInput.text`) consumes the next `[[turn]]`; once they are used up every turn gets the
//! default reply. All `[model]` keys are optional with the defaults shown. A `[[turn]]` without
//! `reply` speaks the default reply clip; without `output_text` it has no output transcription
//! (unless it also has no `reply`, then the default reply text is used). Unknown keys are errors.
//!
//! **Personas** (all optional; a scenario without them behaves as before). The *active* persona
//! is the one most recently named on the wire (see [`super::persona`] for the matching rule): by
//! the system instruction of `setup` or of a `contextUpdate`, by an injected `clientContent` user
//! turn, or by the content of a `toolResponse`; texts naming no persona leave it unchanged, and
//! initial history (`historyConfig.initialHistoryInClientContent`) never changes it. A caller turn
//! is answered with the active persona's `by_persona` entry; without one, with `reply`, unless
//! `by` names another persona, in which case the active persona says its own default reply (a
//! persona never speaks in another's voice). Past the last `[[turn]]` the active persona's
//! `default_reply` is used, else the scenario's.
//!
//! **Handoffs**. A handoff *follow-up* is what makes the new persona speak right after the
//! announcing turn without a caller turn: a `realtimeInput.text` (unless it equals the next turn's
//! `input_text`), a `clientContent` with `turnComplete:true`, a NON_BLOCKING call's response with
//! `scheduling` `WHEN_IDLE` (the default) or `INTERRUPT`, or the first trigger on a session set up
//! with initial history. It takes effect only if the active persona changed since the model last
//! spoke (on a session with initial history: if the current turn's `handoff.to` is active); then
//! the model says the current turn's `[turn.handoff]` reply when `to` is the active persona (else
//! that persona's default reply) and consumes no `[[turn]]`. Otherwise the input is an ordinary
//! caller turn (or, for a tool response, the `after_tool` reply if scripted, else nothing). A
//! `handoff.tool_call` is emitted after the first burst of the announcing reply, only if the
//! function is declared in the session's tools and `to` is not already active.
//!
//! **Brief sessions** (`[brief]`, see [`super::brief`]): a session whose system instruction
//! contains `marker` briefs the person a warm transfer is reaching. Its first turn (baton's
//! starting text) is answered with `reply`; the person's first turn with `accept_transfer` `{}` or
//! `decline_transfer` `{"reason": …}` (only if the session declares it), then `answer_reply`;
//! `answer = "none"` gives the default reply and no call; later turns get the default reply. The
//! `[[turn]]`s, personas and greeting are not used in it; the response to the call is accepted
//! and says nothing more.
//!
//! **Initial history** (`historyConfig.initialHistoryInClientContent`): `clientContent` is history,
//! ingested without calling the model, until the first `turnComplete:true` or the model's first
//! reply, whichever comes first. A session whose `setup` asks for it resumes the script after the last
//! `[[turn]]` whose `input_text` equals (trimmed) a user turn of the ingested history, in order;
//! if none matches, after as many turns as the history has non-empty user turns.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;

use self::raw::{RawBrief, RawReply, RawScenario, RawToolCall};
use super::brief::{self, Answer, Brief};
use super::clip::{self, BUILTIN_DEFAULT_TEXT, Clip, ClipError};
use super::faults::{self, Faults};
use super::profile::{Profile, Quirks};

/// A scenario could not be loaded; the message names the file and, where it applies, the key.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    #[error("{path}: cannot read scenario: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Parse { path: PathBuf, message: String },
    #[error("{path}: {key}: {what}")]
    Invalid {
        path: PathBuf,
        key: String,
        what: String,
    },
    #[error("{path}: {key}: {source}")]
    Clip {
        path: PathBuf,
        key: String,
        source: ClipError,
    },
}

/// How the mock model paces itself.
#[derive(Clone, Debug, PartialEq)]
pub struct Timing {
    /// End of the caller's turn → first audio chunk sent.
    pub first_audio: Duration,
    /// Generation speed as a multiple of real time.
    pub speed: f64,
    /// Audio per `modelTurn` message.
    pub chunk: Duration,
    /// Chunks sent back to back before pausing.
    pub burst: u32,
    /// Extra random delay per burst, uniform in `0..=jitter`.
    pub jitter: Duration,
    /// Seed for the jitter.
    pub seed: u64,
    /// VAD silence window when `setup` sets no `silenceDurationMs`.
    pub silence: Duration,
    /// A new connection's WebSocket upgrade is answered this late: the round trips of TCP, TLS
    /// and the upgrade to a service far away (0 on loopback or in memory).
    pub connect: Duration,
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            first_audio: Duration::from_millis(300),
            speed: 4.0,
            chunk: Duration::from_millis(40),
            burst: 3,
            jitter: Duration::ZERO,
            seed: 1,
            silence: Duration::from_millis(500),
            connect: Duration::ZERO,
        }
    }
}

pub use super::reply::{Reply, ScriptedToolCall};

/// An agent the model can speak as.
#[derive(Clone, Debug, PartialEq)]
pub struct Persona {
    /// The agent id (`advisor`, `crm_billing`, …).
    pub id: String,
    /// The text that names this persona on the wire (the agent's name).
    pub marker: String,
    /// Its own default reply, if any.
    pub default_reply: Option<Reply>,
}

/// The handoff announced in a turn: who takes over and what they say right after it.
#[derive(Clone, Debug, PartialEq)]
pub struct Handoff {
    /// The persona id that takes over.
    pub to: String,
    pub reply: Reply,
    /// Emitted during the announcing reply (a model-driven handoff).
    pub tool_call: Option<ScriptedToolCall>,
}

/// One scripted exchange: what the caller is heard to say and what the model answers.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Turn {
    /// The `inputTranscription` text, if any.
    pub input_text: Option<String>,
    pub reply: Reply,
    pub tool_call: Option<ScriptedToolCall>,
    /// Whose voice `reply` is (a persona id), if said.
    pub by: Option<String>,
    /// The reply when the persona with this id is active.
    pub by_persona: BTreeMap<String, Reply>,
    pub handoff: Option<Handoff>,
    /// Said about a NON_BLOCKING call's result (`WHEN_IDLE` / `INTERRUPT`).
    pub after_tool: Option<Reply>,
}

impl Turn {
    /// A turn with just a caller text and a reply.
    pub fn new(input_text: Option<String>, reply: Reply) -> Self {
        Turn {
            input_text,
            reply,
            ..Turn::default()
        }
    }
}

/// A loaded scenario: all clips are in memory at 24 kHz.
#[derive(Clone, Debug, PartialEq)]
pub struct Scenario {
    pub name: String,
    pub description: String,
    /// What a fixture caller replays and the agent set baton runs (absolute; unused by the mock).
    pub caller: Option<PathBuf>,
    pub agents: Option<PathBuf>,
    pub timing: Timing,
    pub default_reply: Reply,
    pub turns: Vec<Turn>,
    /// The model behaviour this scenario is written for (a server may override it).
    pub profile: Profile,
    pub quirks: Quirks,
    pub personas: Vec<Persona>,
    /// Said unprompted at the start of a fresh conversation (`[model] greeting`).
    pub greeting: Option<Reply>,
    /// Fault modes (`[faults]`, see [`super::faults`]).
    pub faults: Faults,
    /// How a warm transfer's brief session goes (`[brief]`, see [`super::brief`]).
    pub brief: Option<Brief>,
}

impl Scenario {
    /// The scenario used when none is given: default timing, no scripted turns, every turn answered
    /// with the built-in default reply. Needs no files.
    pub fn builtin() -> Self {
        Scenario {
            name: "builtin".into(),
            description: "Answers every caller turn with the default reply.".into(),
            caller: None,
            agents: None,
            timing: Timing::default(),
            default_reply: Reply {
                audio: clip::builtin_default(),
                text: BUILTIN_DEFAULT_TEXT.into(),
            },
            turns: Vec::new(),
            profile: Profile::default(),
            quirks: Quirks::default(),
            personas: Vec::new(),
            greeting: None,
            faults: Faults::default(),
            brief: None,
        }
    }

    /// The scripted turn for the `index`-th caller turn (0-based), or the default reply.
    pub fn turn(&self, index: usize) -> Turn {
        self.turns
            .get(index)
            .cloned()
            .unwrap_or_else(|| Turn::new(None, self.default_reply.clone()))
    }

    /// The index of the persona with this id.
    pub fn persona_index(&self, id: &str) -> Option<usize> {
        self.personas.iter().position(|p| p.id == id)
    }

    /// Every persona's marker, in persona order.
    pub fn markers(&self) -> Vec<&str> {
        self.personas.iter().map(|p| p.marker.as_str()).collect()
    }

    /// The default reply of `persona` (an index), or the scenario's.
    pub fn default_for(&self, persona: Option<usize>) -> &Reply {
        persona
            .and_then(|i| self.personas.get(i)?.default_reply.as_ref())
            .unwrap_or(&self.default_reply)
    }

    /// What `persona` answers to the `index`-th caller turn (see the module doc).
    pub fn reply_for(&self, index: usize, persona: Option<usize>) -> &Reply {
        let Some(turn) = self.turns.get(index) else {
            return self.default_for(persona);
        };
        let Some(p) = persona.and_then(|i| self.personas.get(i)) else {
            return &turn.reply;
        };
        if let Some(r) = turn.by_persona.get(&p.id) {
            return r;
        }
        match &turn.by {
            Some(by) if *by != p.id => self.default_for(persona),
            _ => &turn.reply,
        }
    }

    /// Loads a scenario file and every clip it names.
    pub fn load(path: &Path) -> Result<Self, ScenarioError> {
        let text = std::fs::read_to_string(path).map_err(|source| ScenarioError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::parse(&text, path)
    }

    /// Parses scenario text; `path` names the file in errors and anchors relative clip paths.
    pub fn parse(text: &str, path: &Path) -> Result<Self, ScenarioError> {
        let raw: RawScenario = toml::from_str(text).map_err(|e| ScenarioError::Parse {
            path: path.to_path_buf(),
            message: e.to_string().trim_end().to_owned(),
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        let invalid = |key: &str, what: &str| ScenarioError::Invalid {
            path: path.to_path_buf(),
            key: key.to_owned(),
            what: what.to_owned(),
        };
        let load_clip = |key: String, rel: &str| {
            clip::load(&base.join(rel)).map_err(|source| ScenarioError::Clip {
                path: path.to_path_buf(),
                key,
                source,
            })
        };

        let m = raw.model;
        let defaults = Timing::default();
        let speed = m.speed.unwrap_or(defaults.speed);
        if !(speed.is_finite() && speed > 0.0) {
            return Err(invalid("model.speed", "must be a positive number"));
        }
        let chunk_ms = m.chunk_ms.unwrap_or(40);
        if !(1..=10_000).contains(&chunk_ms) {
            return Err(invalid("model.chunk_ms", "must be between 1 and 10000"));
        }
        let burst = m.burst.unwrap_or(defaults.burst);
        if burst == 0 {
            return Err(invalid("model.burst", "must be at least 1"));
        }
        let profile = match &m.profile {
            None => Profile::default(),
            Some(name) => name.parse().map_err(|e: super::profile::UnknownProfile| {
                invalid("model.profile", &e.to_string())
            })?,
        };
        let ms = |v: Option<u64>, d: Duration| v.map(Duration::from_millis).unwrap_or(d);
        let timing = Timing {
            first_audio: ms(m.first_audio_ms, defaults.first_audio),
            speed,
            chunk: Duration::from_millis(chunk_ms),
            burst,
            jitter: ms(m.jitter_ms, defaults.jitter),
            seed: m.seed.unwrap_or(defaults.seed),
            silence: ms(m.silence_ms, defaults.silence),
            connect: ms(m.connect_ms, defaults.connect),
        };
        let quirks = Quirks {
            partial_content_wedges_vad: m.partial_content_wedges_vad.unwrap_or(false),
            partial_content_interrupts: m.partial_content_interrupts.unwrap_or(false),
        };

        let default_audio = match &m.default_reply {
            Some(rel) => load_clip("model.default_reply".into(), rel)?,
            None => clip::builtin_default(),
        };
        let default_reply = Reply {
            audio: default_audio,
            text: m
                .default_reply_text
                .unwrap_or_else(|| BUILTIN_DEFAULT_TEXT.into()),
        };

        let mut personas: Vec<Persona> = Vec::with_capacity(raw.persona.len());
        for (i, p) in raw.persona.into_iter().enumerate() {
            let key = format!("persona[{i}]");
            if p.id.trim().is_empty() {
                return Err(invalid(&format!("{key}.id"), "must not be empty"));
            }
            if personas.iter().any(|q| q.id == p.id) {
                return Err(invalid(
                    &format!("{key}.id"),
                    "is used by an earlier persona",
                ));
            }
            if p.marker.trim().is_empty() || p.marker.trim() != p.marker {
                return Err(invalid(
                    &format!("{key}.marker"),
                    "must be a non-empty name without surrounding spaces",
                ));
            }
            if personas.iter().any(|q| q.marker == p.marker) {
                return Err(invalid(
                    &format!("{key}.marker"),
                    "is used by an earlier persona",
                ));
            }
            let default_reply = match &p.default_reply {
                Some(rel) => Some(Reply {
                    audio: load_clip(format!("{key}.default_reply"), rel)?,
                    text: p
                        .default_reply_text
                        .unwrap_or_else(|| default_reply.text.clone()),
                }),
                None if p.default_reply_text.is_some() => {
                    return Err(invalid(
                        &format!("{key}.default_reply_text"),
                        "needs default_reply",
                    ));
                }
                None => None,
            };
            personas.push(Persona {
                id: p.id,
                marker: p.marker,
                default_reply,
            });
        }
        let known = |key: &str, id: &str| {
            if personas.iter().any(|p| p.id == id) {
                Ok(())
            } else {
                Err(invalid(key, &format!("no [[persona]] has id {id:?}")))
            }
        };
        let tool_call = |key: String, tc: RawToolCall| {
            if tc.name.trim().is_empty() {
                return Err(invalid(&format!("{key}.name"), "must not be empty"));
            }
            let args = match tc.args {
                None => Value::Object(Default::default()),
                Some(v @ Value::Object(_)) => v,
                Some(_) => return Err(invalid(&format!("{key}.args"), "must be a table")),
            };
            Ok(ScriptedToolCall {
                name: tc.name,
                args,
            })
        };
        let reply = |key: String, r: RawReply| {
            Ok::<_, ScenarioError>(Reply {
                audio: load_clip(format!("{key}.reply"), &r.reply)?,
                text: r.output_text.unwrap_or_default(),
            })
        };

        let mut turns = Vec::with_capacity(raw.turn.len());
        for (i, t) in raw.turn.into_iter().enumerate() {
            let key = format!("turn[{i}]");
            let main = match &t.reply {
                Some(rel) => Reply {
                    audio: load_clip(format!("{key}.reply"), rel)?,
                    text: t.output_text.unwrap_or_default(),
                },
                None => Reply {
                    audio: default_reply.audio.clone(),
                    text: t.output_text.unwrap_or_else(|| default_reply.text.clone()),
                },
            };
            if let Some(by) = &t.by {
                known(&format!("{key}.by"), by)?;
            }
            let mut by_persona = BTreeMap::new();
            for (id, r) in t.by_persona.unwrap_or_default() {
                let k = format!("{key}.by_persona.{id}");
                known(&k, &id)?;
                by_persona.insert(id, reply(k, r)?);
            }
            let handoff = match t.handoff {
                None => None,
                Some(h) => {
                    let k = format!("{key}.handoff");
                    known(&format!("{k}.to"), &h.to)?;
                    Some(Handoff {
                        to: h.to,
                        reply: reply(
                            k.clone(),
                            RawReply {
                                reply: h.reply,
                                output_text: h.output_text,
                            },
                        )?,
                        tool_call: h
                            .tool_call
                            .map(|tc| tool_call(format!("{k}.tool_call"), tc))
                            .transpose()?,
                    })
                }
            };
            turns.push(Turn {
                input_text: t.input_text,
                reply: main,
                tool_call: t
                    .tool_call
                    .map(|tc| tool_call(format!("{key}.tool_call"), tc))
                    .transpose()?,
                by: t.by,
                by_persona,
                handoff,
                after_tool: t
                    .after_tool
                    .map(|r| reply(format!("{key}.after_tool"), r))
                    .transpose()?,
            });
        }

        let greeting = match &m.greeting {
            Some(rel) => Some(Reply {
                audio: load_clip("model.greeting".into(), rel)?,
                text: m.greeting_text.clone().unwrap_or_default(),
            }),
            None => None,
        };
        let faults = match raw.faults {
            Some(f) => faults::parse(f).map_err(|(key, what)| ScenarioError::Invalid {
                path: path.to_path_buf(),
                key,
                what,
            })?,
            None => Faults::default(),
        };
        let brief = raw
            .brief
            .map(|b| parse_brief(b, &invalid, &load_clip))
            .transpose()?;
        Ok(Scenario {
            name: raw.name.unwrap_or_else(|| {
                path.file_stem()
                    .map(|s| s.to_string_lossy().into_owned())
                    .unwrap_or_default()
            }),
            description: raw.description.unwrap_or_default(),
            caller: raw.caller.map(|c| base.join(c)),
            agents: raw.agents.map(|a| base.join(a)),
            timing,
            default_reply,
            turns,
            profile,
            quirks,
            personas,
            greeting,
            faults,
            brief,
        })
    }
}

/// Checks a `[brief]` table and loads its clips.
fn parse_brief(
    b: RawBrief,
    invalid: &impl Fn(&str, &str) -> ScenarioError,
    load_clip: &impl Fn(String, &str) -> Result<Clip, ScenarioError>,
) -> Result<Brief, ScenarioError> {
    let marker = b.marker.unwrap_or_else(|| brief::DEFAULT_MARKER.into());
    if marker.trim().is_empty() {
        return Err(invalid("brief.marker", "must not be empty"));
    }
    let answer = match (b.answer.as_str(), b.reason) {
        ("accept", None) => Answer::Accept,
        ("decline", reason) => Answer::Decline {
            reason: reason.unwrap_or_else(|| "The person cannot take the call now.".into()),
        },
        ("none", None) => Answer::None,
        ("accept" | "none", Some(_)) => {
            return Err(invalid("brief.reason", "is for answer = \"decline\" only"));
        }
        (other, _) => {
            return Err(invalid(
                "brief.answer",
                &format!("must be \"accept\", \"decline\" or \"none\", not {other:?}"),
            ));
        }
    };
    let answer_reply = match (b.answer_reply, b.answer_text) {
        (Some(_), _) if answer == Answer::None => {
            return Err(invalid(
                "brief.answer_reply",
                "needs answer = \"accept\" or \"decline\" (with \"none\" the default reply is said)",
            ));
        }
        (Some(rel), text) => Some(Reply {
            audio: load_clip("brief.answer_reply".into(), &rel)?,
            text: text.unwrap_or_default(),
        }),
        (None, Some(_)) => return Err(invalid("brief.answer_text", "needs answer_reply")),
        (None, None) => None,
    };
    Ok(Brief {
        marker,
        reply: Reply {
            audio: load_clip("brief.reply".into(), &b.reply)?,
            text: b.output_text.unwrap_or_default(),
        },
        answer,
        answer_reply,
        drop_mid_brief: b.drop_mid_brief.unwrap_or(false),
    })
}

#[path = "scenario_raw.rs"]
mod raw;

#[cfg(test)]
#[path = "scenario_tests.rs"]
mod tests;
