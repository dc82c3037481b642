//! Each handoff measured on the caller's timeline, as played out: `handoff_gap_ms` (the silence
//! between the announcing agent's last voiced frame and the next agent's first), how much
//! announcement audio was queued at the switch, and the records left in the call's report.

use super::*;

impl AgentsDriver {
    /// Model audio of `agent` is about to be queued behind `queued` of earlier audio.
    pub fn on_audio_queued(&mut self, agent: u32, queued: Duration) {
        if self.last_pushed_agent.is_some_and(|a| a != agent) {
            self.queued_at_switch.insert(agent, ms(queued));
        }
        self.last_pushed_agent = Some(agent);
    }

    /// A voiced frame of `agent` at media time `ts` was handed to the leg. `caller_voice_end` is
    /// where the caller's last voiced audio ends on the same timeline: the silence the caller
    /// hears starts after both.
    pub fn on_voice_played(
        &mut self,
        agent: u32,
        ts: Duration,
        len: Duration,
        caller_voice_end: Duration,
        report: &mut CallReport,
    ) {
        if let Some((prev, end)) = self.last_voice
            && prev != agent
        {
            let silence_from = end.max(caller_voice_end);
            let gap = ms(ts.saturating_sub(silence_from));
            let to = self.names.get(&agent).cloned().unwrap_or_default();
            let pending = match self.completing.iter().position(|p| p.to == to) {
                Some(i) => Some(self.completing.remove(i)),
                None => self.take_announced(&to),
            };
            // Only a voice change that carries out a handoff is a handoff gap (joint mode
            // alternates speakers without one).
            if let Some(p) = pending {
                self.record(p, Some(gap), agent, ms(ts));
                report.handoff_gap_ms.push(gap);
            }
        }
        if self.last_voice.is_none_or(|(prev, _)| prev != agent)
            && let Some(name) = self.names.get(&agent)
        {
            report.voices_heard.push((ms(ts), name.clone()));
        }
        self.last_voice = Some((agent, ts + len));
    }

    /// The latest announced handoff to `to`, taken for completion. The orchestrator carries out
    /// one handoff at a time and completes only the latest (an operator's command may follow a
    /// handoff carried in place before its agent was heard): the ones announced before it will
    /// never be heard and are recorded so, rather than matched by a later handoff to the same
    /// agent, which would give them that one's gap.
    pub(super) fn take_announced(&mut self, to: &str) -> Option<Pending> {
        let i = self.announced.iter().rposition(|p| p.to == to)?;
        let mut earlier: Vec<Pending> = self.announced.drain(..=i).collect();
        let taken = earlier.pop();
        for mut p in earlier {
            p.add_note(format!(
                "superseded by the handoff to {to} before it was heard"
            ));
            self.handoffs.push(unheard(p));
        }
        taken
    }

    fn record(&mut self, p: Pending, gap: Option<f64>, agent: u32, heard_at_ms: f64) {
        for e in &mut self.events {
            if let CallEvent::HandoffComplete { to, gap_ms, .. } = e
                && *to == p.to
                && gap_ms.is_none()
            {
                *gap_ms = gap.map(|g| g.round() as u64);
                if self.listened {
                    self.to_listeners.push_back(e.clone());
                }
                break;
            }
        }
        self.handoffs.push(HandoffRecord {
            from: p.from,
            to: p.to,
            strategy: p.strategy,
            trigger: p.trigger,
            gap_ms: gap.map(round2),
            announcement_queued_ms: self.queued_at_switch.get(&agent).copied().map(round2),
            trigger_to_wire_ms: p.trigger_to_wire_ms.map(round2),
            heard_at_ms: Some(round2(heard_at_ms)),
            queued_at_trigger_ms: p.queued_at_trigger_ms.map(round2),
            note: p.note,
            at_ms: p.at_ms,
        });
    }

    /// Tags a turn record with the agent that spoke it.
    pub fn note_speaker(&self, t: &mut TurnRecord, agent: u32) {
        if t.agent.is_empty()
            && let Some(id) = self.names.get(&agent)
        {
            t.agent = id.clone();
        }
    }

    pub fn finish(mut self, report: &mut CallReport) {
        // Handoffs whose new agent was never heard.
        for p in std::mem::take(&mut self.completing)
            .into_iter()
            .chain(std::mem::take(&mut self.announced))
        {
            self.handoffs.push(unheard(p));
        }
        self.handoffs.sort_by_key(|h| h.at_ms);
        report.handoffs = self.handoffs;
        report.events = self.events;
        report.uplink_dropped += self.uplink_dropped;
        report.agent_history = serde_json::to_value(self.orch.history()).unwrap_or_default();
    }
}

/// The record of a handoff whose new agent was never heard.
pub(super) fn unheard(p: Pending) -> HandoffRecord {
    HandoffRecord {
        from: p.from,
        to: p.to,
        strategy: p.strategy,
        trigger: p.trigger,
        gap_ms: None,
        announcement_queued_ms: None,
        trigger_to_wire_ms: p.trigger_to_wire_ms.map(round2),
        heard_at_ms: None,
        queued_at_trigger_ms: p.queued_at_trigger_ms.map(round2),
        note: p.note,
        at_ms: p.at_ms,
    }
}
