//! Client messages into the session: `setup`, `realtimeInput`, `clientContent`, `toolResponse`,
//! `contextUpdate`. Each handler validates what the real service validates (per profile), keeps
//! the history and token count, notes which persona the message names, and hands turn taking to
//! `turns.rs`.

use std::time::Instant;

use super::super::faults::When;
use super::super::inbound::Rejection;
use super::super::listen::{self, Heard, Listener};
use super::super::persona;
use super::super::setup::{self, Backend, Behavior, Profile};
use super::super::speak;
use super::{MockSession, Stage};
use crate::model::gemini::wire::{
    ClientContent, Content, ContextUpdate, FunctionResponseScheduling, RealtimeInput,
    ServerMessage, Setup, SetupComplete, ToolResponse,
};

impl MockSession {
    pub(super) fn on_setup(&mut self, s: &Setup, now: Instant) -> Result<(), Rejection> {
        let config = setup::validate(s, &self.endpoint)?;
        self.resume_setup(s, now)?;
        let silence = config.silence.unwrap_or(self.scenario.timing.silence);
        // A resumed session keeps the VAD's state (the caller may be mid-utterance).
        let listener = self
            .listener
            .take()
            .unwrap_or_else(|| Listener::new(config.auto_vad, silence));
        self.listener = Some(listener);
        if let Some(si) = &config.system_instruction {
            self.prompt_tokens += speak::text_tokens(si);
            self.brief = self
                .scenario
                .brief
                .as_ref()
                .is_some_and(|b| b.names(&joined_text(si)));
            if let Some(p) = persona::named_in_contents(&self.markers(), [si]) {
                self.active = Some(p);
            }
        }
        self.history_open = config.initial_history;
        self.config = Some(config);
        self.send(ServerMessage {
            setup_complete: Some(SetupComplete::default()),
            ..Default::default()
        });
        self.after_setup(now);
        self.arm_faults(now);
        Ok(())
    }

    pub(super) fn on_realtime_input(
        &mut self,
        ri: RealtimeInput,
        now: Instant,
    ) -> Result<(), Rejection> {
        let n = ri.fields_set();
        if n != 1 {
            return Err(Rejection::invalid(format!(
                "realtimeInput must set exactly one of audio, audioStreamEnd, video, text, \
                 activityStart, activityEnd, mediaChunks; got {n}"
            )));
        }
        let mut heard = Vec::new();
        let blob = match (&ri.audio, &ri.media_chunks) {
            (Some(b), _) => Some((b, "realtimeInput.audio")),
            // Deprecated: only the first blob counts; non-audio chunks are video frames.
            (None, Some(chunks)) => chunks
                .first()
                .filter(|b| {
                    b.mime_type
                        .as_deref()
                        .is_some_and(|m| m.trim_start().starts_with("audio/"))
                })
                .map(|b| (b, "realtimeInput.mediaChunks[0]")),
            _ => None,
        };
        if let Some((blob, at)) = blob {
            let audio = listen::decode_audio(blob, at)?;
            self.prompt_tokens += speak::audio_tokens(audio.duration());
            self.store.capture(self.conn, &audio.samples, audio.rate);
            if let Some(l) = self.listener.as_mut() {
                l.audio(&audio, &mut heard);
            }
            if self.listener.as_ref().is_some_and(Listener::caller_active)
                && self.fault_point(When::MidCallerUtterance, now)
            {
                return Ok(());
            }
        } else if ri.audio_stream_end == Some(true) {
            heard.extend(self.listener.as_mut().and_then(Listener::audio_stream_end));
        } else if ri.activity_start.is_some() {
            if let Some(l) = self.listener.as_mut() {
                heard.extend(l.activity_start()?);
            }
        } else if ri.activity_end.is_some() {
            if let Some(l) = self.listener.as_mut() {
                heard.extend(l.activity_end()?);
            }
        } else if let Some(text) = &ri.text {
            self.prompt_tokens += (text.len() as u64).div_ceil(4);
            // The caller's own next line is never mistaken for a handoff trigger.
            let next_line = self
                .scenario
                .turns
                .get(self.caller_turns)
                .and_then(|t| t.input_text.as_deref())
                .is_some_and(|line| line.trim() == text.trim());
            match self.handoff_plan().filter(|_| !next_line) {
                Some(plan) => self.respond(plan, now, false),
                None => self.caller_turn_ended(now, false),
            }
        }
        for h in heard {
            match h {
                Heard::SpeechStart => self.caller_started(now),
                Heard::TurnEnd { audio } => self.caller_turn_ended(now, audio),
            }
        }
        Ok(())
    }

    pub(super) fn on_client_content(
        &mut self,
        cc: ClientContent,
        now: Instant,
    ) -> Result<(), Rejection> {
        let turns = cc.turns.unwrap_or_default();
        for (i, t) in turns.iter().enumerate() {
            match t.role.as_deref() {
                None | Some("user" | "model") => {}
                Some("system") if self.endpoint.backend == Backend::Vertex => {}
                Some(other) => {
                    return Err(Rejection::invalid(format!(
                        "clientContent.turns[{i}].role {other:?}: Please use a valid role: user, model."
                    )));
                }
            }
        }
        let history = self.history_open;
        if !history && !self.profile.capabilities().mid_session_client_content {
            return Err(Rejection::invalid(format!(
                "clientContent is not supported mid-session by {}; send realtimeInput, or initial \
                 history with historyConfig",
                self.model_name()
            )));
        }
        let complete = cc.turn_complete == Some(true);
        if history {
            let n = turns.len();
            self.store.note(self.conn, |c| c.history_turns += n);
            for t in &turns {
                if matches!(t.role.as_deref(), None | Some("user")) {
                    self.history_users.push(joined_text(t));
                }
            }
        } else {
            // An injected instruction names the persona; the model's own lines do not.
            let instructions = turns.iter().filter(|t| t.role.as_deref() != Some("model"));
            if let Some(p) = persona::named_in_contents(&self.markers(), instructions) {
                self.active = Some(p);
            }
        }
        for t in turns {
            self.prompt_tokens += speak::text_tokens(&t);
            self.history.push(t);
        }
        if history {
            if complete {
                // Ingested without calling the model.
                self.history_open = false;
                self.resume_from_history();
                self.maybe_issue_handle();
            }
            return Ok(());
        }
        let quirks = self.scenario.quirks;
        if complete {
            self.wedged = false;
            // Proto: a client turn interrupts any current generation.
            match self.handoff_plan() {
                Some(plan) => self.respond(plan, now, false),
                None => self.caller_turn_ended(now, false),
            }
        } else {
            if quirks.partial_content_wedges_vad && self.profile == Profile::Gemini25 {
                self.wedged = true;
            }
            if quirks.partial_content_interrupts && self.generating() {
                self.interrupt(now);
            }
        }
        Ok(())
    }

    /// The initial history is in: continue the script after the last scripted caller line found
    /// in it (in order), else after as many turns as it has user turns.
    fn resume_from_history(&mut self) {
        let users: Vec<String> = std::mem::take(&mut self.history_users)
            .into_iter()
            .map(|u| u.trim().to_owned())
            .filter(|u| !u.is_empty())
            .collect();
        let turns = &self.scenario.turns;
        let mut pos = None;
        for u in &users {
            let from = pos.unwrap_or(0);
            if let Some(j) = (from..turns.len())
                .find(|&j| turns[j].input_text.as_deref().map(str::trim) == Some(u.as_str()))
            {
                pos = Some(j + 1);
            }
        }
        self.caller_turns = pos.unwrap_or(users.len());
        self.resumed = self.caller_turns > 0;
    }

    pub(super) fn on_tool_response(
        &mut self,
        tr: ToolResponse,
        now: Instant,
    ) -> Result<(), Rejection> {
        for (i, fr) in tr
            .function_responses
            .unwrap_or_default()
            .into_iter()
            .enumerate()
        {
            let id = match (&fr.id, self.endpoint.backend) {
                (Some(id), _) => id.clone(),
                // Vertex tolerates a missing id: match the oldest call of that name.
                (None, Backend::Vertex) => match self.call_by_name(fr.name.as_deref()) {
                    Some(id) => id,
                    None => continue,
                },
                (None, Backend::DevApi) => {
                    return Err(Rejection::invalid(format!(
                        "toolResponse.functionResponses[{i}].id is required"
                    )));
                }
            };
            if self.cancelled_calls.contains(&id) {
                continue;
            }
            let Some(pos) = self.pending_calls.iter().position(|c| c.id == id) else {
                return Err(Rejection::invalid(format!(
                    "function response id {id:?} not found among the outstanding function calls"
                )));
            };
            let behavior = self.pending_calls[pos].behavior;
            let script = self.pending_calls[pos].script;
            // A NON_BLOCKING function may answer in several parts (`willContinue`).
            let more = behavior == Behavior::NonBlocking && fr.will_continue == Some(true);
            if !more {
                self.pending_calls.remove(pos);
            }
            if let Some(v) = &fr.response {
                self.prompt_tokens += (v.to_string().len() as u64).div_ceil(4);
                if let Some(p) = persona::named_in_json(&self.markers(), v) {
                    self.active = Some(p);
                }
            }
            if behavior == Behavior::Blocking {
                // `scheduling` means nothing here: generation resumes with the result.
                let first_audio = self.scenario.timing.first_audio;
                if let Some(turn) = self.turn.as_mut()
                    && turn.stage == Stage::AwaitingTool(id)
                {
                    turn.stage = Stage::Thinking;
                    self.timers.set(super::Timer::Reply, now + first_audio);
                }
                continue;
            }
            match fr.scheduling {
                Some(FunctionResponseScheduling::Silent) => {}
                Some(FunctionResponseScheduling::Interrupt) => self.follow_up_now(script, now),
                // The SDK's default is WHEN_IDLE.
                _ => self.follow_up_when_idle(script, now),
            }
        }
        Ok(())
    }

    pub(super) fn on_context_update(&mut self, cu: ContextUpdate) -> Result<(), Rejection> {
        if !self.profile.context_update() {
            return Err(Rejection::invalid(format!(
                "contextUpdate is not supported by {}",
                self.model_name()
            )));
        }
        let functions = match &cu.tools {
            Some(w) => Some(setup::functions(&w.tools, "contextUpdate.tools.tools")?),
            None => None,
        };
        if let Some(si) = &cu.system_instruction {
            self.prompt_tokens += speak::text_tokens(si);
            if let Some(p) = persona::named_in_contents(&self.markers(), [si]) {
                self.active = Some(p);
            }
        }
        let Some(config) = self.config.as_mut() else {
            return Ok(());
        };
        if let Some(si) = cu.system_instruction {
            config.system_instruction = Some(si);
        }
        if let Some(f) = functions {
            config.functions = f;
        }
        Ok(())
    }

    /// The oldest outstanding call of the function `name`.
    fn call_by_name(&self, name: Option<&str>) -> Option<String> {
        let name = name?;
        self.pending_calls
            .iter()
            .find(|c| c.name == name)
            .map(|c| c.id.clone())
    }

    /// The model named in `setup`, for close reasons.
    fn model_name(&self) -> &str {
        self.config
            .as_ref()
            .map_or("this model", |c| c.model.as_str())
    }
}

/// The text parts of a turn, joined.
fn joined_text(c: &Content) -> String {
    c.parts
        .iter()
        .filter_map(|p| p.text.as_deref())
        .collect::<Vec<_>>()
        .join(" ")
}
