//! A model session's setup for a set of active agents: the instruction, the tools, the voice and
//! (for a recreated session) the transferred history as `clientContent` turns, plus how it goes on
//! the Gemini wire (`setup` with `historyConfig.initialHistoryInClientContent`, then one
//! `clientContent` with the history and `turnComplete: true`).

use serde_json::Value;

use super::events::{Speaker, TranscriptLine};
use super::registry::HistoryTransfer;
use crate::model::gemini::session::SessionConfig;
use crate::model::gemini::wire::{ClientContent, ClientMessage, Content, HistoryConfig};

/// Everything a new session needs to speak as the active agents.
#[derive(Clone, Debug, PartialEq)]
pub struct SessionSetup {
    /// The lead agent's id.
    pub agent: String,
    /// Every active agent's id, lead first.
    pub agents: Vec<String>,
    pub system_instruction: String,
    /// The setup's `tools` list (see [`super::tools::declarations`]).
    pub tools: Vec<Value>,
    /// Prebuilt voice; `None`: the session's configured voice.
    pub voice: Option<String>,
    /// Earlier conversation for the new session; empty for the first session.
    pub history: Vec<Content>,
}

impl SessionSetup {
    /// Puts the instruction, tools and voice into a session config (model, transcription and
    /// VAD settings stay the caller's).
    pub fn apply(&self, cfg: &mut SessionConfig) {
        cfg.system_instruction = Some(self.system_instruction.clone());
        cfg.tools = self.tools.clone();
        if let Some(v) = &self.voice {
            cfg.voice = Some(v.clone());
        }
    }

    /// The `setup` message for `base` with this setup applied; asks the server to take the
    /// history as client content first when there is any.
    pub fn setup_message(&self, base: &SessionConfig) -> ClientMessage {
        let mut cfg = base.clone();
        self.apply(&mut cfg);
        let mut msg = cfg.setup_message();
        if let ClientMessage::Setup(s) = &mut msg
            && !self.history.is_empty()
        {
            s.history_config = Some(HistoryConfig {
                initial_history_in_client_content: Some(true),
            });
        }
        msg
    }

    /// The history, to send right after `setupComplete` (none for an empty history).
    pub fn history_message(&self) -> Option<ClientMessage> {
        (!self.history.is_empty()).then(|| {
            ClientMessage::ClientContent(ClientContent {
                turns: Some(self.history.clone()),
                turn_complete: Some(true),
            })
        })
    }
}

/// The transcript as alternating `user`/`model` turns (consecutive lines of one side merged),
/// cut to what `transfer` allows: the last N turns start at the N-th caller line from the end.
pub fn history_turns(lines: &[TranscriptLine], transfer: HistoryTransfer) -> Vec<Content> {
    let mut turns: Vec<Content> = Vec::new();
    let mut last_role: Option<Speaker> = None;
    for l in lines.iter().filter(|l| !l.text.trim().is_empty()) {
        match turns.last_mut() {
            Some(t) if last_role == Some(l.role) => {
                if let Some(p) = t.parts.first_mut()
                    && let Some(text) = p.text.as_mut()
                {
                    text.push(' ');
                    text.push_str(l.text.trim());
                }
            }
            _ => {
                let role = match l.role {
                    Speaker::Caller => "user",
                    Speaker::Agent => "model",
                };
                turns.push(Content::text(Some(role), l.text.trim()));
            }
        }
        last_role = Some(l.role);
    }
    match transfer {
        HistoryTransfer::All => turns,
        HistoryTransfer::None => Vec::new(),
        HistoryTransfer::LastTurns(n) => {
            let user_positions: Vec<usize> = turns
                .iter()
                .enumerate()
                .filter(|(_, t)| t.role.as_deref() == Some("user"))
                .map(|(i, _)| i)
                .collect();
            let from = user_positions
                .len()
                .checked_sub(n)
                .and_then(|k| user_positions.get(k).copied())
                .unwrap_or(0);
            turns.split_off(from)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(role: Speaker, text: &str) -> TranscriptLine {
        TranscriptLine {
            role,
            agent: "a".into(),
            text: text.into(),
            at_ms: 0,
        }
    }

    fn texts(c: &[Content]) -> Vec<(String, String)> {
        c.iter()
            .map(|t| {
                (
                    t.role.clone().unwrap_or_default(),
                    t.parts[0].text.clone().unwrap_or_default(),
                )
            })
            .collect()
    }

    #[test]
    fn history_all_none_and_last_n_turns() {
        use Speaker::*;
        let lines = vec![
            line(Agent, "Hello, billing."),
            line(Caller, "My id is 251."),
            line(Agent, "Your bill is $150."),
            line(Caller, "Any promotions?"),
            line(Caller, "For my plan."),
            line(Agent, "Let me transfer you."),
        ];
        let all = history_turns(&lines, HistoryTransfer::All);
        assert_eq!(
            all.len(),
            5,
            "the two caller lines merge: {:?}",
            texts(&all)
        );
        assert_eq!(
            texts(&all)[3],
            ("user".into(), "Any promotions? For my plan.".into())
        );
        assert!(history_turns(&lines, HistoryTransfer::None).is_empty());
        let last1 = history_turns(&lines, HistoryTransfer::LastTurns(1));
        assert_eq!(
            texts(&last1),
            vec![
                ("user".into(), "Any promotions? For my plan.".into()),
                ("model".into(), "Let me transfer you.".into())
            ]
        );
        assert_eq!(
            history_turns(&lines, HistoryTransfer::LastTurns(9)).len(),
            5
        );
    }

    #[test]
    fn setup_message_asks_for_history_only_when_there_is_some() {
        let mut s = SessionSetup {
            agent: "b".into(),
            agents: vec!["b".into()],
            system_instruction: "You are B.".into(),
            tools: vec![],
            voice: Some("Puck".into()),
            history: vec![],
        };
        let base = SessionConfig::default();
        let v = serde_json::to_value(s.setup_message(&base)).unwrap();
        assert!(v["setup"].get("historyConfig").is_none());
        assert_eq!(
            v["setup"]["generationConfig"]["speechConfig"]["voiceConfig"]["prebuiltVoiceConfig"]["voiceName"],
            "Puck"
        );
        assert!(s.history_message().is_none());
        s.history = vec![Content::text(Some("user"), "hi")];
        let v = serde_json::to_value(s.setup_message(&base)).unwrap();
        assert_eq!(
            v["setup"]["historyConfig"]["initialHistoryInClientContent"],
            true
        );
        let h = serde_json::to_value(s.history_message().unwrap()).unwrap();
        assert_eq!(h["clientContent"]["turnComplete"], true);
    }
}
