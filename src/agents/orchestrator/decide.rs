//! Handoff decisions from what is said and known: the caller's words (keywords and intent
//! patterns, with stickiness and the minimum turns), the agent's own words (seed 002 phrases and
//! the configured handback phrase), a routing tool's arguments (seed 000), and call data (seed
//! 003). Each decision becomes a [`Request`]; the guards live in `handoff`.

use std::time::Instant;

use serde_json::Value;

use super::handoff::{CallCtx, Request, Target};
use super::{Orchestrator, Timer};
use crate::agents::events::{CallEvent, TriggerKind};
use crate::agents::matching::{Keyword, TextMatch, normalize};
use crate::agents::phrases::PhraseRule;
use crate::agents::registry::{Role, Route};
use crate::agents::tools;

/// An agent said it is handing off but named nobody: the caller's next words pick the agent.
pub(super) struct Reroute {
    rule: PhraseRule,
    said: String,
}

impl Orchestrator {
    /// Agents the active ones may hand to, not active themselves.
    fn candidates(&self) -> Vec<u32> {
        tools::reachable(&self.reg, &self.members)
            .into_iter()
            .filter(|t| !self.members.contains(t))
            .collect()
    }

    /// The best of `(agent, matches)`: highest priority, then most matches, then set order.
    fn pick(&self, mut c: Vec<(u32, usize)>) -> Option<u32> {
        c.sort_by_key(|&(a, n)| {
            (
                std::cmp::Reverse(self.reg.agent(a).priority),
                std::cmp::Reverse(n),
                a,
            )
        });
        c.first().map(|&(a, _)| a)
    }

    /// Candidates whose activation words match `text`, with what matched.
    fn word_matches(&self, text: &str) -> Vec<(u32, Vec<TextMatch>)> {
        let norm = normalize(text);
        self.candidates()
            .into_iter()
            .map(|a| (a, self.reg.agent(a).activation.text.matches(text, &norm)))
            .filter(|(_, m)| !m.is_empty())
            .collect()
    }

    fn best_by_words(&self, text: &str) -> Option<(u32, Vec<TextMatch>)> {
        let m = self.word_matches(text);
        let best = self.pick(m.iter().map(|(a, v)| (*a, v.len())).collect())?;
        m.into_iter().find(|(a, _)| *a == best)
    }

    pub(super) fn check_caller_words(&mut self, now: Instant) {
        if self.caller_fired {
            return;
        }
        let text = self.caller_line.clone();
        let norm = normalize(&text);
        if let Some(r) = self.reroute.take() {
            match self.best_by_words(&text) {
                Some((t, m)) => {
                    self.caller_fired = true;
                    self.timers.stop(Timer::Reroute);
                    let reason = format!(
                        "the agent said {:?}; the caller then said {}",
                        r.said,
                        describe(&m)
                    );
                    self.request(
                        Target::Agent(t),
                        TriggerKind::AgentPhrase,
                        Some(r.rule),
                        reason,
                        now,
                    );
                    return;
                }
                None => self.reroute = Some(r),
            }
        }
        let lead = self.reg.agent(self.lead());
        if self.members.len() == 1 && lead.role == Role::Specialist {
            let back = lead.handback.text.matches(&text, &norm);
            let own = lead.activation.text.matches(&text, &norm);
            if !back.is_empty() && own.is_empty() {
                self.caller_fired = true;
                let reason = format!("the caller said {}", describe(&back));
                self.request(Target::Back, TriggerKind::CallerHandback, None, reason, now);
                return;
            }
        }
        let Some((target, m)) = self.best_by_words(&text) else {
            return;
        };
        let g = &self.reg.guards;
        if !self.handoffs.is_empty() && self.caller_turns_since_handoff < g.min_turns {
            return;
        }
        if g.sticky
            && self.members.iter().any(|&a| {
                !self
                    .reg
                    .agent(a)
                    .activation
                    .text
                    .matches(&text, &norm)
                    .is_empty()
            })
        {
            return;
        }
        self.caller_fired = true;
        let reason = format!("the caller said {}", describe(&m));
        self.request(
            Target::Agent(target),
            TriggerKind::CallerWords,
            None,
            reason,
            now,
        );
    }

    pub(super) fn check_agent_words(&mut self, now: Instant) {
        if self.agent_fired {
            return;
        }
        let text = self.agent_line.clone();
        let norm = normalize(&text);
        let lead = self.reg.agent(self.lead());
        if lead.role == Role::Specialist
            && Keyword::new(&lead.handback_phrase).is_some_and(|k| k.found_in(&norm))
        {
            self.agent_fired = true;
            let reason = format!("{} said its handback phrase", lead.name);
            self.request(Target::Back, TriggerKind::HandbackPhrase, None, reason, now);
            return;
        }
        let builtin = !self.reg.phrases.enabled && tools::handoffs_by_words(&self.caps);
        let m = if builtin {
            crate::agents::phrases::announcement(&text)
        } else {
            self.reg.phrases.detect(&text)
        };
        let Some(m) = m else {
            return;
        };
        let candidates = self.candidates();
        let named: Vec<(u32, usize)> = candidates
            .iter()
            .filter(|&&a| {
                let ag = self.reg.agent(a);
                std::iter::once(&ag.name)
                    .chain(ag.aliases.iter())
                    .filter_map(|n| Keyword::new(n))
                    .any(|k| k.found_in(&norm))
            })
            .map(|&a| (a, 1))
            .collect();
        if named.is_empty()
            && let Some(person) = self.person_named_in(&norm)
        {
            // Handoff language naming a person: the transfer rides on the announcing words.
            self.agent_fired = true;
            // A refusal is told by its `handoff_blocked` event.
            let _ = self.begin_person(person, TriggerKind::AgentPhrase, None, now);
            return;
        }
        if builtin && named.is_empty() {
            // Handoff language without an agent's name (yet): the name may follow.
            return;
        }
        self.agent_fired = true;
        let said = m.matched.clone();
        let (target, why) = if let Some(t) = self.pick(named) {
            (Some(t), "named by the agent".to_owned())
        } else if let Some((t, cm)) = self.best_by_words(&self.last_caller.clone()) {
            (Some(t), format!("the caller had said {}", describe(&cm)))
        } else if let [only] = candidates.as_slice() {
            (Some(*only), "the only agent to hand to".to_owned())
        } else {
            (None, String::new())
        };
        match target {
            Some(t) => {
                let reason = format!(
                    "the agent said {said:?}; {} is {why}",
                    self.reg.agent(t).name
                );
                self.request(
                    Target::Agent(t),
                    TriggerKind::AgentPhrase,
                    Some(m.rule),
                    reason,
                    now,
                );
            }
            None => {
                self.reroute = Some(Reroute { rule: m.rule, said });
                let at = now + self.reg.timing.reroute_window;
                self.timers.set(Timer::Reroute, at);
            }
        }
    }

    /// Seed 000: `requires_handback`, handback topics, `requires_specialist` + `specialist_type`,
    /// then activation topics and intents.
    pub(super) fn check_route_args(
        &mut self,
        route: &Route,
        call: &CallCtx,
        args: &Value,
        now: Instant,
    ) {
        let Some(obj) = args.as_object() else {
            self.notice(
                format!(
                    "{}: arguments are not an object; no routing from them",
                    call.name
                ),
                now,
            );
            return;
        };
        let mut bad = Vec::new();
        let mut text = |field: &str| match obj.get(field) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.trim().to_owned()),
            Some(_) => {
                bad.push(format!("{field} (expected a string)"));
                None
            }
        };
        let topic = text(&route.topic);
        let intent = text(&route.intent);
        let specialist = text(&route.specialist);
        let mut flag = |field: &str| match obj.get(field) {
            None | Some(Value::Null) => None,
            Some(Value::Bool(b)) => Some(*b),
            Some(_) => {
                bad.push(format!("{field} (expected true or false)"));
                None
            }
        };
        let requires = flag(&route.requires_specialist);
        let handback = flag(&route.handback);
        if !bad.is_empty() {
            self.notice(
                format!("{}: ignored argument(s) {}", call.name, bad.join(", ")),
                now,
            );
        }
        let lead = self.reg.agent(self.lead());
        // In a joint call the other agents answer those topics themselves: only an explicit
        // request ends the specialist's part.
        let topic_back = self.members.len() == 1
            && topic
                .as_ref()
                .is_some_and(|t| lead.handback.topics.contains(t));
        if lead.role == Role::Specialist && (handback == Some(true) || topic_back) {
            let reason = if handback == Some(true) {
                format!("{} = true", route.handback)
            } else {
                format!(
                    "{} = {:?} is outside {}",
                    route.topic,
                    topic.unwrap_or_default(),
                    lead.name
                )
            };
            self.request_from(Target::Back, call, reason, now);
            return;
        }
        if requires == Some(true)
            && let Some(s) = &specialist
        {
            match self.reg.find(s).map(|a| a.index) {
                Some(t) if self.candidates().contains(&t) => {
                    let reason = format!(
                        "{} = true, {} = {s:?}",
                        route.requires_specialist, route.specialist
                    );
                    self.request_from(Target::Agent(t), call, reason, now);
                    return;
                }
                Some(_) => {}
                None => self.notice(
                    format!(
                        "{}: {} = {s:?} names no agent of this set",
                        call.name, route.specialist
                    ),
                    now,
                ),
            }
        }
        let matched: Vec<(u32, usize)> = self
            .candidates()
            .into_iter()
            .filter_map(|a| {
                let act = &self.reg.agent(a).activation;
                let n = usize::from(topic.as_ref().is_some_and(|t| act.topics.contains(t)))
                    + usize::from(intent.as_ref().is_some_and(|i| act.intents.contains(i)));
                (n > 0).then_some((a, n))
            })
            .collect();
        if let Some(t) = self.pick(matched) {
            let reason = format!(
                "{} = {:?}, {} = {:?}",
                route.topic,
                topic.unwrap_or_default(),
                route.intent,
                intent.unwrap_or_default()
            );
            self.request_from(Target::Agent(t), call, reason, now);
        }
    }

    /// Seed 003: an agent whose activation conditions all hold takes the caller.
    pub(super) fn check_call_data(&mut self, now: Instant) {
        let ready: Vec<(u32, usize)> = self
            .candidates()
            .into_iter()
            .filter(|&a| {
                let w = &self.reg.agent(a).activation.when;
                !w.is_empty() && w.iter().all(|c| c.holds(&self.data))
            })
            .map(|a| (a, 1))
            .collect();
        if let Some(t) = self.pick(ready) {
            let keys: Vec<&str> = self
                .reg
                .agent(t)
                .activation
                .when
                .iter()
                .map(|c| c.key.as_str())
                .collect();
            let reason = format!("call data ready: {}", keys.join(", "));
            self.request(Target::Agent(t), TriggerKind::CallData, None, reason, now);
        }
    }

    /// Who answers the turn that is starting: a new agent greets; in a joint call the active agent
    /// whose words the caller used last, else the lead.
    pub(super) fn pick_speaker(&self) -> u32 {
        let lead = self.lead();
        if self.announced.is_some() || self.members.len() == 1 {
            return lead;
        }
        let text = &self.last_caller;
        let norm = normalize(text);
        let score = |a: u32| {
            let ag = self.reg.agent(a);
            ag.activation.text.matches(text, &norm).len()
                + ag.expertise
                    .iter()
                    .filter_map(|e| Keyword::new(e))
                    .filter(|k| k.found_in(&norm))
                    .count()
        };
        let mut best = (0, lead);
        for &m in &self.members {
            let s = score(m);
            if s > best.0 {
                best = (s, m);
            }
        }
        best.1
    }

    fn request(
        &mut self,
        target: Target,
        trigger: TriggerKind,
        rule: Option<PhraseRule>,
        reason: String,
        now: Instant,
    ) {
        // A refusal is told by its `handoff_blocked` event.
        let _ = self.begin_handoff(
            Request {
                target,
                trigger,
                phrase_rule: rule,
                reason,
                summary: None,
                call: None,
                manual: false,
            },
            now,
        );
    }

    fn request_from(&mut self, target: Target, call: &CallCtx, reason: String, now: Instant) {
        // A refusal is told by its `handoff_blocked` event (and to a calling tool).
        let _ = self.begin_handoff(
            Request {
                target,
                trigger: TriggerKind::FunctionArgs,
                phrase_rule: None,
                reason: format!("{}: {reason}", call.name),
                summary: None,
                call: Some(call.clone()),
                manual: false,
            },
            now,
        );
    }

    fn notice(&mut self, message: String, now: Instant) {
        let at_ms = self.ms(now);
        self.event(CallEvent::Notice { message, at_ms });
    }
}

fn describe(m: &[TextMatch]) -> String {
    m.iter()
        .map(TextMatch::describe)
        .collect::<Vec<_>>()
        .join(", ")
}
