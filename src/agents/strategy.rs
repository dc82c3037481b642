//! How a handoff reaches the model (design §4), and the `auto` choice from the model adapter's
//! [`Capabilities`] and the agents' policies.
//!
//! When each strategy's wire message is sent, relative to the turn being generated (the
//! invariant: a handoff never flushes playout and never cuts a turn being generated):
//!
//! | strategy | wire | sent |
//! |---|---|---|
//! | `context_update` | `contextUpdate{systemInstruction, tools}` | at once: processed in order, adds no turn; a greeting prompt (`clientContent`, `turnComplete:true`), when one is needed, waits for the turn boundary |
//! | `tool_response` | `toolResponse` answering the model's (NON_BLOCKING) call, `scheduling: WHEN_IDLE`, the new agent's brief as output | at once: WHEN_IDLE speaks after the current utterance |
//! | `inject_turn` | `clientContent{turns:[brief], turnComplete:true}` | held until the turn boundary: the announcing turn's `generationComplete` |
//! | `recreate` | a standby session set up with the new agent's instruction, tools, voice and history | prepared at once; switched at the turn boundary once ready |
//! | `recreate_cold` | close the session, open the new agent's | at the turn boundary (kept as the measured baseline) |
//!
//! The *turn boundary*: no model turn is being generated (its `generationComplete` has arrived,
//! or no turn started), no BLOCKING call the model waits on is unanswered, and the caller is not
//! owed a reply (or the model has not started one within the set's `held_timeout_ms`).

use serde::Serialize;

use crate::model::Capabilities;

/// How a handoff is carried to the model.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Strategy {
    Auto,
    ContextUpdate,
    ToolResponse,
    InjectTurn,
    Recreate,
    RecreateCold,
}

impl Strategy {
    pub fn as_str(self) -> &'static str {
        match self {
            Strategy::Auto => "auto",
            Strategy::ContextUpdate => "context_update",
            Strategy::ToolResponse => "tool_response",
            Strategy::InjectTurn => "inject_turn",
            Strategy::Recreate => "recreate",
            Strategy::RecreateCold => "recreate_cold",
        }
    }
}

/// What the choice depends on for one handoff.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Situation {
    pub caps: Capabilities,
    /// The target's (or, leaving an isolated agent, the source's) policy asks for its own session.
    pub isolated: bool,
    /// The new speaker has another voice than the session's.
    pub voice_changes: bool,
    /// The model-visible tools (other than transfers) change.
    pub tools_change: bool,
    /// The decision came from the model's own function call, answered as NON_BLOCKING.
    pub from_non_blocking_call: bool,
}

impl Situation {
    /// Whether `s` can carry this handoff at all.
    pub fn allows(&self, s: Strategy) -> bool {
        let c = &self.caps;
        let in_place = !self.isolated && !self.voice_changes;
        match s {
            Strategy::Auto => false,
            Strategy::ContextUpdate => {
                in_place && c.update_instructions && (c.update_tools || !self.tools_change)
            }
            Strategy::ToolResponse => {
                in_place
                    && c.non_blocking_tools
                    && self.from_non_blocking_call
                    && !self.tools_change
            }
            Strategy::InjectTurn => in_place && c.mid_session_client_content && !self.tools_change,
            Strategy::Recreate | Strategy::RecreateCold => true,
        }
    }
}

/// What a model lacks to carry `s` at all (whatever the handoff), in words; `None` when it can
/// carry it at least sometimes. A strategy asked for explicitly on such a model is refused
/// before the call starts rather than silently replaced.
pub fn unplayable(s: Strategy, caps: &Capabilities) -> Option<&'static str> {
    match s {
        Strategy::ContextUpdate if !caps.update_instructions => {
            Some("no contextUpdate (instruction and tool update in place)")
        }
        Strategy::ToolResponse if !caps.non_blocking_tools => Some("no non-blocking tools"),
        Strategy::InjectTurn if !caps.mid_session_client_content => {
            Some("no mid-session client content")
        }
        _ => None,
    }
}

/// The strategy used for a handoff, and why it differs from the configured one if it does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Choice {
    pub strategy: Strategy,
    pub note: Option<String>,
}

/// `auto`: in place when the adapter can (instruction+tools update, then the non-blocking tool
/// answer when the model itself asked, then an injected turn); otherwise a warm standby session.
/// A configured strategy is used when it can carry the handoff, else `auto` decides and says why.
pub fn choose(configured: Strategy, s: &Situation) -> Choice {
    if configured != Strategy::Auto {
        if s.allows(configured) {
            return Choice {
                strategy: configured,
                note: None,
            };
        }
        let strategy = auto(s);
        return Choice {
            strategy,
            note: Some(format!(
                "{} cannot carry this handoff ({}); using {}",
                configured.as_str(),
                why_not(configured, s),
                strategy.as_str()
            )),
        };
    }
    Choice {
        strategy: auto(s),
        note: None,
    }
}

fn auto(s: &Situation) -> Strategy {
    [
        Strategy::ContextUpdate,
        Strategy::ToolResponse,
        Strategy::InjectTurn,
    ]
    .into_iter()
    .find(|&x| s.allows(x))
    .unwrap_or(Strategy::Recreate)
}

fn why_not(x: Strategy, s: &Situation) -> &'static str {
    let c = &s.caps;
    if matches!(
        x,
        Strategy::ContextUpdate | Strategy::ToolResponse | Strategy::InjectTurn
    ) {
        if s.isolated {
            return "the agent needs its own session";
        }
        if s.voice_changes {
            return "the voice changes";
        }
    }
    match x {
        Strategy::ContextUpdate if !c.update_instructions => {
            "the model cannot update its instruction in place"
        }
        Strategy::ContextUpdate => "the model cannot update its tools in place",
        Strategy::ToolResponse if !c.non_blocking_tools => "the model has no non-blocking tools",
        Strategy::ToolResponse if !s.from_non_blocking_call => {
            "the decision did not come from the model's non-blocking call"
        }
        Strategy::ToolResponse | Strategy::InjectTurn if s.tools_change => {
            "the tools change and the model cannot update them in place"
        }
        Strategy::InjectTurn => "the model refuses client content mid-session",
        _ => "not applicable",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: Capabilities = Capabilities {
        update_instructions: true,
        update_tools: true,
        non_blocking_tools: true,
        mid_session_client_content: true,
        resumption: true,
        history_config: true,
        calls_pause_speech: false,
    };
    /// A 2.5-native-audio-like profile: no contextUpdate.
    const NO_UPDATE: Capabilities = Capabilities {
        update_instructions: false,
        update_tools: false,
        non_blocking_tools: true,
        mid_session_client_content: true,
        resumption: true,
        history_config: true,
        calls_pause_speech: false,
    };
    /// An early-3.1-like profile: synchronous tools, no mid-session content.
    const BARE: Capabilities = Capabilities {
        update_instructions: false,
        update_tools: false,
        non_blocking_tools: false,
        mid_session_client_content: false,
        resumption: true,
        history_config: true,
        calls_pause_speech: false,
    };

    fn sit(caps: Capabilities) -> Situation {
        Situation {
            caps,
            isolated: false,
            voice_changes: false,
            tools_change: false,
            from_non_blocking_call: false,
        }
    }

    #[test]
    fn auto_follows_the_capabilities() {
        let pick = |s: Situation| choose(Strategy::Auto, &s).strategy;
        assert_eq!(pick(sit(ALL)), Strategy::ContextUpdate);
        assert_eq!(
            pick(Situation {
                from_non_blocking_call: true,
                ..sit(NO_UPDATE)
            }),
            Strategy::ToolResponse
        );
        assert_eq!(pick(sit(NO_UPDATE)), Strategy::InjectTurn);
        assert_eq!(pick(sit(BARE)), Strategy::Recreate);
        assert_eq!(
            pick(Situation {
                tools_change: true,
                ..sit(NO_UPDATE)
            }),
            Strategy::Recreate,
            "a tool change the model cannot apply in place"
        );
        assert_eq!(
            pick(Situation {
                tools_change: true,
                ..sit(ALL)
            }),
            Strategy::ContextUpdate
        );
        for s in [
            Situation {
                isolated: true,
                ..sit(ALL)
            },
            Situation {
                voice_changes: true,
                ..sit(ALL)
            },
        ] {
            assert_eq!(pick(s), Strategy::Recreate);
        }
    }

    #[test]
    fn a_configured_strategy_is_kept_when_possible_and_explained_when_not() {
        let c = choose(Strategy::InjectTurn, &sit(ALL));
        assert_eq!(c.strategy, Strategy::InjectTurn);
        assert_eq!(c.note, None);
        let c = choose(Strategy::ToolResponse, &sit(ALL));
        assert_eq!(c.strategy, Strategy::ContextUpdate);
        assert!(
            c.note.as_deref().unwrap().contains("non-blocking call"),
            "{c:?}"
        );
        let c = choose(Strategy::RecreateCold, &sit(BARE));
        assert_eq!(c.strategy, Strategy::RecreateCold);
    }
}
