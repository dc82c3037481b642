//! The words the orchestrator gives the model: the system instruction of the active agents (one
//! agent, or one instruction carrying several personas and saying who answers what), the
//! in-band brief of a handoff (for `tool_response` and `inject_turn`, which cannot replace the
//! instruction), and the short prompt that makes a new agent greet. Kept short and explicit:
//! live models follow short instructions and drop long ones.

use super::events::TranscriptLine;
use super::registry::{Registry, Role};
use super::tools;

/// The system instruction while `members` are active (`members[0]` leads). `summary` is why
/// the lead was brought in (seed 001's activation summary).
pub fn system_instruction(reg: &Registry, members: &[u32], summary: Option<&str>) -> String {
    system_instruction_for(reg, members, summary, false)
}

/// [`system_instruction`] for a model that hands off by words (`by_words`: no transfer tools,
/// see [`tools::handoffs_by_words`]): the handoff line tells it to announce the agent by name.
pub fn system_instruction_for(
    reg: &Registry,
    members: &[u32],
    summary: Option<&str>,
    by_words: bool,
) -> String {
    let lead = reg.agent(members.first().copied().unwrap_or(reg.primary));
    let mut s = String::new();
    if members.len() <= 1 {
        s.push_str(&lead.instruction);
    } else {
        let names: Vec<&str> = members
            .iter()
            .map(|&m| reg.agent(m).name.as_str())
            .collect();
        s.push_str(&format!(
            "{} agents share this call: {}.\n",
            members.len(),
            names.join(", ")
        ));
        for &m in members {
            let a = reg.agent(m);
            if !a.expertise.is_empty() {
                s.push_str(&format!(
                    "{} answers about: {}.\n",
                    a.name,
                    a.expertise.join(", ")
                ));
            }
        }
        let others: Vec<&str> = names.iter().skip(1).copied().collect();
        s.push_str(&format!(
            "Answer each question as the agent whose area it is. When a question needs several, \
             {} answers first, then {} add their part. Say the agent's name when the speaker changes.\n",
            lead.name,
            others.join(" and ")
        ));
        for &m in members {
            let a = reg.agent(m);
            s.push_str(&format!("\n{}: {}\n", a.name, a.instruction));
        }
    }
    let targets: Vec<String> = tools::reachable(reg, members)
        .into_iter()
        .map(|t| reg.agent(t))
        .filter(|a| a.policy.transfer_tool)
        .map(|a| {
            let about = if a.expertise.is_empty() {
                String::new()
            } else {
                format!(" for {}", a.expertise.join(", "))
            };
            format!("{}{about}", tools::transfer_name(a))
        })
        .collect();
    let people: Vec<String> = tools::reachable_people(reg, members)
        .into_iter()
        .filter_map(|i| reg.people.get(i as usize))
        .filter(|p| p.transfer_tool)
        .map(|p| {
            let about = if p.expertise.is_empty() {
                String::new()
            } else {
                format!(" for {}", p.expertise.join(", "))
            };
            format!("{} ({}{about})", tools::person_transfer_name(p), p.name)
        })
        .collect();
    if by_words {
        let names: Vec<String> = tools::reachable_people(reg, members)
            .into_iter()
            .filter_map(|i| reg.people.get(i as usize))
            .map(|p| p.name.clone())
            .collect();
        if !names.is_empty() {
            s.push_str(&format!(
                "\n\nPEOPLE: to put the caller through to a person, say so with their name, e.g. \
                 \"Let me put you through to {}.\" ({}), then stop talking.",
                names[0],
                names.join(", ")
            ));
        }
    } else if !people.is_empty() {
        s.push_str(&format!(
            "\n\nPEOPLE: to put the caller through to a person, call {} with a short summary; \
             say one sentence announcing it first, then stop talking.",
            people.join("; ")
        ));
    }
    if by_words {
        let names: Vec<String> = tools::reachable(reg, members)
            .into_iter()
            .map(|t| reg.agent(t))
            .filter(|a| a.policy.transfer_tool)
            .map(|a| a.name.clone())
            .collect();
        if !names.is_empty() {
            s.push_str(&format!(
                "\n\nHANDOFFS: hand the caller over by saying so with the agent's name, e.g. \
                 \"Let me bring in {}.\" ({}); that sentence moves the call. There are no transfer \
                 tools.",
                names[0],
                names.join(", ")
            ));
        }
    } else if !targets.is_empty() {
        s.push_str(&format!(
            "\n\nHANDOFFS: call {} with a short summary; say one sentence announcing it first.",
            targets.join("; ")
        ));
    }
    if lead.role == Role::Specialist && !lead.handback_phrase.is_empty() {
        s.push_str(&format!(
            "\nWhen the caller needs something outside your area, say: \"{}\"",
            lead.handback_phrase
        ));
    }
    if let Some(sum) = summary.filter(|s| !s.trim().is_empty()) {
        s.push_str(&format!("\n\nCONTEXT: {}", sum.trim()));
    }
    s
}

/// The handoff as one in-band message (the instruction cannot be replaced): who speaks now and
/// how, then the cue to continue as that agent.
pub fn brief(reg: &Registry, members: &[u32], summary: Option<&str>) -> String {
    let lead = reg.agent(members.first().copied().unwrap_or(reg.primary));
    let mut s = format!(
        "[AGENT SWITCH] {} now speaks with the caller.\n\n{}\n\nNow continue as {}",
        lead.name,
        system_instruction(reg, members, summary),
        lead.name
    );
    if lead.greeting.is_empty() {
        s.push('.');
    } else {
        s.push_str(&format!(", starting with: \"{}\"", lead.greeting));
    }
    s
}

/// The prompt that makes the new lead speak first after its instruction changed (or in its new
/// session): greet, with what the caller said since the handoff was decided.
pub fn greeting_prompt(
    reg: &Registry,
    lead: u32,
    summary: Option<&str>,
    missed: &[TranscriptLine],
) -> String {
    let a = reg.agent(lead);
    let mut s = format!("[AGENT SWITCH] You are now {}.", a.name);
    if let Some(sum) = summary.filter(|s| !s.trim().is_empty()) {
        s.push_str(&format!(" Context: {}", sentence(sum)));
    }
    for l in missed {
        s.push_str(&format!(" The caller also said: \"{}\"", l.text));
    }
    if a.greeting.is_empty() {
        s.push_str(" Greet the caller briefly and continue.");
    } else {
        s.push_str(&format!(
            " Greet the caller with \"{}\" and continue.",
            a.greeting
        ));
    }
    s
}

/// `s` trimmed, ending like a sentence.
fn sentence(s: &str) -> String {
    let s = s.trim();
    if s.ends_with(['.', '!', '?', '"']) {
        s.to_owned()
    } else {
        format!("{s}.")
    }
}
