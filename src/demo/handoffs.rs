//! Each handoff as the demo and the bench report it: the strategy asked for (`--strategy`, else
//! the receiving agent's configured policy), the strategy that carried it, and why they differ.

use serde::Serialize;

use crate::call::HandoffRecord;

/// One agent of the call's set as the reports name it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct AgentMeta {
    pub id: String,
    pub name: String,
    /// The handoff strategy its policy asks for (after `--strategy`).
    pub strategy: String,
}

/// A handoff with what was asked of it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct HandoffLine {
    #[serde(flatten)]
    pub record: HandoffRecord,
    /// The strategy asked for (`auto`: the model's capabilities decide).
    pub asked: String,
    /// Why the strategy that carried it (`strategy`) is not the one asked for; absent when they
    /// agree.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
}

impl HandoffLine {
    /// `record` explained with the set's policies: the receiving agent's policy is what the
    /// orchestrator asks for.
    pub fn explain(agents: &[AgentMeta], record: &HandoffRecord) -> HandoffLine {
        let asked = agents
            .iter()
            .find(|a| a.id == record.to)
            .map_or("auto", |a| a.strategy.as_str())
            .to_owned();
        let why = why(&asked, record);
        HandoffLine {
            record: record.clone(),
            asked,
            why,
        }
    }

    /// The strategy asked for and, when another carried it, `→ carried`.
    pub fn strategies(&self) -> String {
        if self.asked == self.record.strategy {
            self.asked.clone()
        } else {
            format!("{} → {}", self.asked, self.record.strategy)
        }
    }
}

/// Why `carried` differs from `asked`, in words; `None` when they are the same.
fn why(asked: &str, h: &HandoffRecord) -> Option<String> {
    if asked == h.strategy {
        return h.note.clone();
    }
    if let Some(note) = &h.note {
        return Some(note.clone());
    }
    if asked == "auto" {
        return Some(format!(
            "auto chose {}: the first strategy this model and this handoff allow",
            h.strategy
        ));
    }
    Some(format!("carried by {} instead", h.strategy))
}

/// An agent's name, else its id (a call without an agent set speaks as `agent`).
pub fn name_of<'a>(agents: &'a [AgentMeta], id: &'a str) -> &'a str {
    if id.is_empty() {
        return "agent";
    }
    agents
        .iter()
        .find(|a| a.id == id)
        .map_or(id, |a| a.name.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agents(strategy: &str) -> Vec<AgentMeta> {
        ["advisor", "schemes"]
            .iter()
            .zip(["Asha", "Ravi"])
            .map(|(id, name)| AgentMeta {
                id: (*id).into(),
                name: name.into(),
                strategy: strategy.into(),
            })
            .collect()
    }

    fn record(strategy: &str, note: Option<&str>) -> HandoffRecord {
        HandoffRecord {
            from: "advisor".into(),
            to: "schemes".into(),
            strategy: strategy.into(),
            note: note.map(str::to_owned),
            ..Default::default()
        }
    }

    #[test]
    fn the_same_strategy_needs_no_reason() {
        let h = HandoffLine::explain(&agents("context_update"), &record("context_update", None));
        assert_eq!(
            (h.asked.as_str(), h.why.as_deref()),
            ("context_update", None)
        );
        assert_eq!(h.strategies(), "context_update");
    }

    #[test]
    fn a_fallback_says_why() {
        let note = "inject_turn cannot carry this handoff (the tools change and the model cannot update them in place); using context_update";
        let h = HandoffLine::explain(
            &agents("inject_turn"),
            &record("context_update", Some(note)),
        );
        assert_eq!(h.asked, "inject_turn");
        assert_eq!(h.why.as_deref(), Some(note));
        assert_eq!(h.strategies(), "inject_turn → context_update");
        let json = serde_json::to_value(&h).unwrap();
        assert_eq!(json["asked"], "inject_turn");
        assert_eq!(json["strategy"], "context_update");
        assert_eq!(json["why"], note);
    }

    #[test]
    fn auto_says_it_chose() {
        let h = HandoffLine::explain(&agents("auto"), &record("recreate", None));
        assert!(h.why.unwrap().starts_with("auto chose recreate"));
        assert_eq!(name_of(&agents("auto"), "schemes"), "Ravi");
        assert_eq!(name_of(&agents("auto"), "other"), "other");
        assert_eq!(name_of(&[], ""), "agent");
    }
}
