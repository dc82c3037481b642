//! Turn taking: what the model says (a [`Plan`]: the scripted reply in the active persona's voice,
//! a handoff follow-up, or a tool-result follow-up), when it starts, how it streams in bursts,
//! how it ends (`generationComplete`, then `turnComplete` after playback, or a barge-in), and
//! which function calls it makes on the way.

use std::time::{Duration, Instant};

use super::super::faults::When;
use super::super::inbound::Rejection;
use super::super::scenario::ScriptedToolCall;
use super::super::setup::Behavior;
use super::super::speak::{self, ReplyStream, content};
use super::{MockSession, ModelTurn, PendingCall, Plan, Stage, Timer};
use crate::model::gemini::wire::{
    Content, FunctionCall, ServerContent, ServerMessage, ToolCall, ToolCallCancellation,
    Transcription, UsageMetadata,
};

impl MockSession {
    // -- what to say ----------------------------------------------------------------------------

    /// The reply to the `index`-th caller turn, in the active persona's voice.
    fn caller_plan(&self, index: usize) -> Plan {
        if self.brief
            && let Some(brief) = &self.scenario.brief
        {
            // A brief session follows the brief's script, in no persona's voice.
            let config = self.config.as_ref();
            let step = brief.step(
                index,
                |name| config.is_some_and(|c| c.declares(name)),
                &self.scenario.default_reply,
            );
            return Plan {
                reply: step.reply.unwrap_or_default(),
                persona: None,
                tool_call: step.call,
                handoff_call: None,
                script: None,
            };
        }
        let script = self.scenario.turns.get(index);
        let persona = self.active;
        let handoff_call = script
            .and_then(|t| t.handoff.as_ref())
            .filter(|h| self.scenario.persona_index(&h.to) != persona)
            .and_then(|h| h.tool_call.clone());
        Plan {
            reply: self.scenario.reply_for(index, persona).clone(),
            persona,
            tool_call: script.and_then(|t| t.tool_call.clone()),
            handoff_call,
            script: Some(index),
        }
    }

    /// The handoff follow-up due now, if any: the active persona changed since the model last
    /// spoke (on a session resumed from history: the current turn hands off to it).
    pub(super) fn handoff_plan(&self) -> Option<Plan> {
        let active = self.active?;
        let current = self.caller_turns.checked_sub(1)?;
        let handoff = self
            .scenario
            .turns
            .get(current)
            .and_then(|t| t.handoff.as_ref())
            .filter(|h| self.scenario.persona_index(&h.to) == Some(active));
        let pending = match self.voice {
            Some(voice) => voice != Some(active),
            None => self.resumed && handoff.is_some(),
        };
        if !pending {
            return None;
        }
        let reply = handoff.map_or_else(
            || self.scenario.default_for(Some(active)).clone(),
            |h| h.reply.clone(),
        );
        Some(Plan {
            reply,
            persona: Some(active),
            tool_call: None,
            handoff_call: None,
            script: Some(current),
        })
    }

    /// What the model says about a NON_BLOCKING result: a handoff follow-up if the result named
    /// a new persona, else the turn's scripted `after_tool` reply, else nothing.
    fn tool_follow_up(&self, script: Option<usize>) -> Option<Plan> {
        self.handoff_plan().or_else(|| {
            let index = script?;
            let reply = self.scenario.turns.get(index)?.after_tool.clone()?;
            Some(Plan {
                reply,
                persona: self.active,
                tool_call: None,
                handoff_call: None,
                script: Some(index),
            })
        })
    }

    // -- when to say it -------------------------------------------------------------------------

    /// A reply is being generated (not yet complete).
    pub(super) fn generating(&self) -> bool {
        self.turn
            .as_ref()
            .is_some_and(|t| t.stage != Stage::Playing)
    }

    /// The caller started speaking (VAD or `activityStart`).
    pub(super) fn caller_started(&mut self, now: Instant) {
        if self.turn.is_some() && self.interrupts() && !self.holds_for_tool() {
            self.interrupt(now);
            self.maybe_issue_handle();
        }
    }

    /// A BLOCKING call is outstanding on a profile that does not cancel it on new input.
    fn holds_for_tool(&self) -> bool {
        !self.profile.cancels_blocking_on_input()
            && self
                .turn
                .as_ref()
                .is_some_and(|t| matches!(t.stage, Stage::AwaitingTool(_)))
    }

    /// The caller's turn is over (`audio`: it had audio, so it is transcribed): it consumes the
    /// next scripted turn.
    pub(super) fn caller_turn_ended(&mut self, now: Instant, audio: bool) {
        let index = self.caller_turns;
        self.caller_turns += 1;
        if audio
            && !self.brief
            && self.config.as_ref().is_some_and(|c| c.input_transcription)
            && let Some(t) = self
                .scenario
                .turns
                .get(index)
                .and_then(|t| t.input_text.clone())
        {
            self.history.push(Content::text(Some("user"), t.clone()));
            self.send(content(ServerContent {
                input_transcription: Some(Transcription {
                    text: Some(t),
                    finished: Some(true),
                }),
                ..Default::default()
            }));
        }
        if audio && self.wedged {
            // gemini-2.5 quirk: heard, never answered.
            return;
        }
        let plan = self.caller_plan(index);
        self.respond(plan, now, audio);
    }

    /// Says `plan` `first_audio` from now. A turn whose generation is complete ends without a
    /// cut (unless `by_voice`: the caller's speech already barged in); one still being generated
    /// is interrupted, or the new turn waits for it (`NO_INTERRUPTION`, or a BLOCKING call that
    /// this profile does not cancel).
    pub(super) fn respond(&mut self, plan: Plan, now: Instant, by_voice: bool) {
        if let Some(turn) = &self.turn {
            if turn.stage == Stage::Playing && !by_voice {
                self.end_without_cut(now);
            } else if !self.interrupts() || self.holds_for_tool() {
                self.queued.push_back((plan, now));
                return;
            } else {
                self.interrupt(now);
            }
        }
        self.begin_turn(plan, now + self.scenario.timing.first_audio);
    }

    /// A NON_BLOCKING response with `WHEN_IDLE`: follow up once the current generation is
    /// complete (at once if it is).
    pub(super) fn follow_up_when_idle(&mut self, script: Option<usize>, now: Instant) {
        if self.generating() {
            if let Some(turn) = self.turn.as_mut() {
                turn.when_idle = Some(script);
            }
        } else if let Some(plan) = self.tool_follow_up(script) {
            self.respond(plan, now, false);
        }
    }

    /// A NON_BLOCKING response with `INTERRUPT`: cut the current turn and follow up now.
    pub(super) fn follow_up_now(&mut self, script: Option<usize>, now: Instant) {
        let plan = self.tool_follow_up(script);
        self.interrupt(now);
        if let Some(plan) = plan {
            self.begin_turn(plan, now + self.scenario.timing.first_audio);
        }
    }

    pub(super) fn begin_turn(&mut self, plan: Plan, reply_at: Instant) {
        self.voice = Some(plan.persona);
        self.resumed = false;
        // Initial history is over once the conversation has started.
        self.history_open = false;
        self.turn = Some(ModelTurn {
            plan,
            stage: Stage::Thinking,
            tool_called: false,
            handoff_called: false,
            stream: None,
            calls: Vec::new(),
            when_idle: None,
        });
        self.timers.set(Timer::Reply, reply_at);
    }

    // -- saying it ------------------------------------------------------------------------------

    /// Sends a function call for the current turn; true if generation must wait for it.
    fn issue_call(&mut self, call: ScriptedToolCall) -> bool {
        let id = format!("call-{}", self.next_call_id);
        self.next_call_id += 1;
        let declared = self
            .config
            .as_ref()
            .map_or(Behavior::Blocking, |c| c.behavior(&call.name));
        let behavior = if self.capabilities().non_blocking_tools {
            declared
        } else {
            Behavior::Blocking
        };
        let blocking = behavior == Behavior::Blocking;
        let mut script = None;
        if let Some(turn) = self.turn.as_mut() {
            turn.calls.push(id.clone());
            script = turn.plan.script;
            if blocking {
                turn.stage = Stage::AwaitingTool(id.clone());
            }
        }
        self.pending_calls.push(PendingCall {
            id: id.clone(),
            name: call.name.clone(),
            behavior,
            script,
        });
        self.send(ServerMessage {
            tool_call: Some(ToolCall {
                function_calls: vec![FunctionCall {
                    id: Some(id),
                    name: Some(call.name),
                    args: Some(call.args),
                }],
            }),
            ..Default::default()
        });
        let now = self.now.unwrap_or_else(Instant::now);
        self.fault_point(When::MidToolCall, now);
        blocking
    }

    /// [`Timer::Reply`]: the scripted tool call, or the first audio (or, after a BLOCKING call
    /// made mid-reply, the rest of it).
    pub(super) fn start_reply(&mut self, now: Instant) {
        let Some(turn) = self.turn.as_mut() else {
            return;
        };
        if !turn.tool_called {
            turn.tool_called = true;
            let call = turn.plan.tool_call.clone();
            self.not_resumable();
            if let Some(call) = call
                && self.issue_call(call)
            {
                return;
            }
        }
        if self.closed {
            return;
        }
        let transcribe = self.config.as_ref().is_some_and(|c| c.output_transcription);
        let chunk = self.scenario.timing.chunk;
        let playing_until = self.playing_until.take().filter(|&t| t > now);
        if let Some(turn) = self.turn.as_mut() {
            if turn.stream.is_none() {
                turn.stream = Some(
                    ReplyStream::new(&turn.plan.reply, chunk, transcribe).after(playing_until),
                );
            }
            turn.stage = Stage::Streaming;
        }
        self.send_burst(now);
    }

    /// [`Timer::Burst`]: `burst` chunks back to back, then a pause that holds the average speed.
    /// A model-driven handoff call goes out after the first burst.
    pub(super) fn send_burst(&mut self, now: Instant) {
        let scenario = self.scenario.clone();
        let timing = &scenario.timing;
        let Some(turn) = self.turn.as_mut() else {
            return;
        };
        let Some(stream) = turn.stream.as_mut() else {
            return;
        };
        let before = stream.sent_audio();
        let messages = stream.burst(timing.burst, now);
        let drop = self.brief
            && scenario
                .brief
                .as_ref()
                .and_then(|b| b.drop_after(&turn.plan.reply))
                .is_some_and(|at| stream.sent_audio() >= at);
        let produced = stream.sent_audio().saturating_sub(before);
        let done = stream.done();
        let play_end = stream.play_end().unwrap_or(now);
        let handoff_call = if turn.handoff_called {
            None
        } else {
            turn.handoff_called = true;
            turn.plan.handoff_call.clone()
        };
        for m in messages {
            self.send(m);
        }
        if drop {
            self.close(Rejection::new(1011, "Internal error occurred."));
            return;
        }
        if !done && self.fault_point(When::MidModelTurn, now) {
            return;
        }
        if let Some(call) = handoff_call
            && self.config.as_ref().is_some_and(|c| c.declares(&call.name))
            && self.issue_call(call)
        {
            return;
        }
        if !done {
            let pause = produced.div_f64(timing.speed) + self.rng.duration_up_to(timing.jitter);
            self.timers.set(Timer::Burst, now + pause);
            return;
        }
        self.send(content(ServerContent {
            generation_complete: Some(true),
            ..Default::default()
        }));
        let mut when_idle = None;
        if let Some(turn) = self.turn.as_mut() {
            turn.stage = Stage::Playing;
            when_idle = turn.when_idle.take();
        }
        // The client plays from the first chunk on; the turn is over when it has played all.
        self.timers.set(Timer::TurnComplete, play_end.max(now));
        if let Some(script) = when_idle
            && let Some(plan) = self.tool_follow_up(script)
        {
            self.respond(plan, now, false);
        }
    }

    /// [`Timer::TurnComplete`]: the reply has been played.
    pub(super) fn complete_turn(&mut self, now: Instant) {
        let Some(turn) = self.turn.take() else {
            return;
        };
        self.playing_until = None;
        self.finish(turn, false);
        if let Some((plan, ended)) = self.queued.pop_front() {
            let at = (ended + self.scenario.timing.first_audio).max(now);
            self.begin_turn(plan, at);
        }
        self.maybe_issue_handle();
    }

    /// A turn whose generation is complete gives way to the next one: `turnComplete` now, no
    /// `interrupted`; the client keeps playing what it has queued.
    fn end_without_cut(&mut self, now: Instant) {
        let Some(turn) = self.turn.take() else {
            return;
        };
        self.timers.stop(Timer::TurnComplete);
        self.playing_until = turn
            .stream
            .as_ref()
            .and_then(ReplyStream::play_end)
            .filter(|&t| t > now);
        self.finish(turn, false);
    }

    /// Barge-in or a new client turn: stop talking, `interrupted`, cancel the turn's calls,
    /// `turnComplete`.
    pub(super) fn interrupt(&mut self, _now: Instant) {
        let Some(turn) = self.turn.take() else {
            return;
        };
        self.timers.stop(Timer::Reply);
        self.timers.stop(Timer::Burst);
        self.timers.stop(Timer::TurnComplete);
        // The client flushes what it had queued.
        self.playing_until = None;
        self.finish(turn, true);
    }

    /// Sends the end of `turn` and records what was said in the history.
    fn finish(&mut self, turn: ModelTurn, interrupted: bool) {
        if interrupted {
            self.send(content(ServerContent {
                interrupted: Some(true),
                ..Default::default()
            }));
            let ids: Vec<String> = turn
                .calls
                .iter()
                .filter(|id| self.pending_calls.iter().any(|c| &c.id == *id))
                .cloned()
                .collect();
            self.pending_calls.retain(|c| !ids.contains(&c.id));
            if !ids.is_empty() {
                self.cancelled_calls.extend(ids.iter().cloned());
                self.send(ServerMessage {
                    tool_call_cancellation: Some(ToolCallCancellation { ids }),
                    ..Default::default()
                });
            }
        }
        let (spoken, text) = turn
            .stream
            .as_ref()
            .map_or((Duration::ZERO, String::new()), |s| {
                (s.sent_audio(), s.sent_text().to_owned())
            });
        // Only what was actually sent stays in the history.
        if !text.is_empty() {
            let said = text.clone();
            self.store.note(self.conn, |c| c.said.push(said));
            self.history.push(Content::text(Some("model"), text));
        }
        let response = speak::audio_tokens(spoken);
        let prompt = self.prompt_tokens;
        self.prompt_tokens += response;
        let (response_token_count, candidates_token_count) = match self.endpoint.backend {
            super::super::setup::Backend::DevApi => (Some(response), None),
            super::super::setup::Backend::Vertex => (None, Some(response)),
        };
        self.send(ServerMessage {
            server_content: Some(ServerContent {
                turn_complete: Some(true),
                ..Default::default()
            }),
            usage_metadata: Some(UsageMetadata {
                prompt_token_count: Some(prompt),
                response_token_count,
                candidates_token_count,
                total_token_count: Some(prompt + response),
            }),
            ..Default::default()
        });
    }
}
