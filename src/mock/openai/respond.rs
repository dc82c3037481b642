//! Responses of the OpenAI mock: `response.created` at once, the first output after the
//! scenario's `first_audio_ms`, then either a function call (`output_item.added` →
//! `function_call_arguments.delta/.done` → `output_item.done` → `response.done`) or speech:
//! `output_item.added` → `content_part.added` → interleaved `output_audio.delta` and
//! `output_audio_transcript.delta` in bursts faster than real time → the `.done` events →
//! `response.done` → `rate_limits.updated`. A scripted handoff's transfer call follows the
//! announcement in the same response (a second output item). A response with nothing to say
//! (a transfer acknowledged) ends at once with no output. A cancel (`response.cancel`, or server VAD with
//! `interrupt_response`) stops the audio and ends the response `cancelled`; the item keeps the
//! audio produced so far, which bounds `conversation.item.truncate`.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use super::config::Refusal;
use super::engine::{RealtimeSession, Timer};
use super::response::{Plan, Response, Speech, Stage};
use crate::audio::resample::resample_all;
use crate::mock::clip::OUTPUT_RATE;
use crate::mock::speak::{self, split_words};
use crate::model::openai::wire::{Api, AudioFormat, EventKind};

impl RealtimeSession {
    pub(super) fn on_response_create(&mut self, oob: bool, now: Instant) -> Result<(), Refusal> {
        if let Some(r) = &self.response {
            return Err(Refusal {
                code: "conversation_already_has_active_response",
                message: format!(
                    "Conversation already has an active response in progress: {}. Wait until the response is finished before creating a new one.",
                    r.id
                ),
                param: None,
            });
        }
        self.start_response(oob, now);
        Ok(())
    }

    pub(super) fn on_response_cancel(&mut self) -> Result<(), Refusal> {
        if self.response.is_none() {
            return Err(Refusal {
                code: "response_cancel_not_active",
                message: "Cancellation failed: no active response found".into(),
                param: None,
            });
        }
        self.cancel_response("client_cancelled");
        Ok(())
    }

    /// The handoff reply due now, if any: the active persona changed since the model last spoke
    /// (in a session continuing a call: the current turn hands off to it).
    fn handoff_plan(&self) -> Option<Plan> {
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
        let reply = handoff.map_or_else(|| self.scenario.default_for(Some(active)), |h| &h.reply);
        Some(Plan::speak(reply, Some(active)))
    }

    /// What the reply to caller turn `turn` is: a function call first, or the scripted reply in
    /// the active voice (followed by the transfer call when the turn hands off elsewhere).
    fn caller_plan(&self, turn: usize) -> Plan {
        let tools = &self.state.view().tools;
        if self.brief
            && let Some(brief) = &self.scenario.brief
        {
            let declared = |n: &str| tools.iter().any(|t| t == n);
            let step = brief.step(turn, declared, &self.scenario.default_reply);
            return match (step.call, step.reply) {
                (Some(c), _) => Plan::Call {
                    name: c.name,
                    args: c.args,
                    turn,
                },
                (None, Some(reply)) => Plan::speak(&reply, None),
                (None, None) => Plan::Nothing,
            };
        }
        let script = self.scenario.turns.get(turn);
        if let Some(c) = script
            .and_then(|t| t.tool_call.as_ref())
            .filter(|c| tools.contains(&c.name))
        {
            return Plan::Call {
                name: c.name.clone(),
                args: c.args.clone(),
                turn,
            };
        }
        let then = script
            .and_then(|t| t.handoff.as_ref())
            .filter(|h| self.scenario.persona_index(&h.to) != self.active)
            .and_then(|h| h.tool_call.as_ref())
            .filter(|c| tools.contains(&c.name))
            .map(|c| (c.name.clone(), c.args.clone(), turn));
        Plan::Speak {
            reply: self.scenario.reply_for(turn, self.active).clone(),
            persona: self.active,
            then,
        }
    }

    /// What the model says once the call made for caller turn `turn` has its output: the turn's
    /// reply (in a brief session: the `answer_reply`, or nothing).
    fn after_call(&self, turn: usize) -> Plan {
        match self.scenario.brief.as_ref().filter(|_| self.brief) {
            Some(brief) => brief
                .answer_reply
                .as_ref()
                .map_or(Plan::Nothing, |r| Plan::speak(r, None)),
            None => Plan::speak(self.scenario.reply_for(turn, self.active), self.active),
        }
    }

    /// Starts a response: what it says is decided now (see the engine's module doc).
    pub(super) fn start_response(&mut self, oob: bool, now: Instant) {
        let plan = if oob {
            Plan::speak(&self.scenario.default_reply, None)
        } else if let Some(plan) = self.handoff_plan() {
            self.answered = None;
            self.unanswered = None;
            self.acked = false;
            plan
        } else if let Some(turn) = self.answered.take() {
            self.after_call(turn)
        } else if let Some(turn) = self.unanswered.take() {
            self.caller_plan(turn)
        } else if std::mem::take(&mut self.acked) {
            Plan::Nothing
        } else {
            Plan::speak(self.scenario.default_for(self.active), self.active)
        };
        let id = self.new_id("resp");
        let body = self.response_json(&id, "in_progress", Value::Null, vec![], None);
        self.emit(EventKind::ResponseCreated, json!({"response": body}));
        self.response = Some(Response {
            id,
            stage: Stage::Pending(plan),
            oob,
        });
        self.set_timer(Timer::Reply, now + self.scenario.timing.first_audio);
    }

    /// [`Timer::Reply`]: the function call, or the first burst of speech.
    pub(super) fn first_output(&mut self, now: Instant) {
        let Some(r) = self.response.take() else {
            return;
        };
        let (id, oob, plan) = match r.stage {
            Stage::Pending(plan) => (r.id, r.oob, plan),
            stage @ Stage::Speaking(_) => {
                self.response = Some(Response { stage, ..r });
                return;
            }
        };
        match plan {
            Plan::Call { name, args, turn } => self.function_call(&id, oob, name, &args, turn),
            Plan::Nothing => {
                let body = self.response_json(&id, "completed", Value::Null, vec![], Some(0));
                self.emit(EventKind::ResponseDone, json!({"response": body}));
                self.rate_limits();
            }
            Plan::Speak {
                reply,
                persona,
                then,
            } => {
                self.voice = Some(persona);
                let item_id = self.new_id("item");
                let format = self.state.view().output.clone();
                let (audio, rate) = match format {
                    AudioFormat::Pcmu | AudioFormat::Pcma => (
                        resample_all(&reply.audio, OUTPUT_RATE, 8_000).unwrap_or_default(),
                        8_000,
                    ),
                    _ => (reply.audio.to_vec(), OUTPUT_RATE),
                };
                let chunk = ((self.scenario.timing.chunk.as_secs_f64() * f64::from(rate)).round()
                    as usize)
                    .max(1);
                let n = audio.len().div_ceil(chunk).max(1);
                let close_after = self
                    .scenario
                    .brief
                    .as_ref()
                    .filter(|_| self.brief)
                    .and_then(|b| b.drop_after(&reply))
                    .map(|d| (d.as_secs_f64() * f64::from(rate)) as usize);
                let speech = Speech {
                    item_id: item_id.clone(),
                    audio,
                    rate,
                    format,
                    chunk,
                    next: 0,
                    fragments: split_words(&reply.text, n),
                    sent_samples: 0,
                    sent_text: String::new(),
                    then,
                    close_after,
                };
                let item = json!({"id": item_id, "type": "message", "role": "assistant",
                                  "status": "in_progress", "object": "realtime.item", "content": []});
                self.emit_plain(
                    "response.output_item.added",
                    json!({"response_id": id, "output_index": 0, "item": item}),
                );
                if !oob {
                    let previous = self.items.last().map(|i| i.id.clone());
                    self.add_item(item, previous, Some(0), false);
                }
                self.emit_plain(
                    "response.content_part.added",
                    json!({"response_id": id, "item_id": item_id, "output_index": 0,
                           "content_index": 0, "part": {"type": "audio", "transcript": ""}}),
                );
                self.spoke = true;
                self.response = Some(Response {
                    id,
                    stage: Stage::Speaking(speech),
                    oob,
                });
                self.burst(now);
            }
        }
    }

    fn function_call(&mut self, id: &str, oob: bool, name: String, args: &Value, turn: usize) {
        let item = self.call_item(id, oob, 0, name, args, turn);
        let body = self.response_json(id, "completed", Value::Null, vec![item], Some(20));
        self.emit(EventKind::ResponseDone, json!({"response": body}));
        self.rate_limits();
    }

    /// A function call as output item `index` of response `id`: its events, the item (returned
    /// for `response.done`), and the call awaiting its output.
    fn call_item(
        &mut self,
        id: &str,
        oob: bool,
        index: usize,
        name: String,
        args: &Value,
        turn: usize,
    ) -> Value {
        let item_id = self.new_id("item");
        let call_id = self.new_id("call");
        let arguments = args.to_string();
        let mut item = json!({"id": item_id, "type": "function_call", "status": "in_progress",
                              "object": "realtime.item", "call_id": call_id, "name": name,
                              "arguments": ""});
        self.emit_plain(
            "response.output_item.added",
            json!({"response_id": id, "output_index": index, "item": item}),
        );
        if !oob {
            let previous = self.items.last().map(|i| i.id.clone());
            self.add_item(item.clone(), previous, None, false);
        }
        let at = json!({"response_id": id, "item_id": item_id, "output_index": index,
                        "call_id": call_id});
        let mut delta = at.clone();
        delta["delta"] = Value::String(arguments.clone());
        self.emit_plain("response.function_call_arguments.delta", delta);
        let mut done = at;
        done["name"] = Value::String(name);
        done["arguments"] = Value::String(arguments.clone());
        self.emit(EventKind::FunctionCallArgumentsDone, done);
        item["status"] = json!("completed");
        item["arguments"] = Value::String(arguments);
        self.emit_plain(
            "response.output_item.done",
            json!({"response_id": id, "output_index": index, "item": item}),
        );
        if !oob && self.api == Api::Ga {
            self.emit_plain("conversation.item.done", json!({"item": item}));
        }
        self.pending_call = Some((call_id, turn));
        item
    }

    /// [`Timer::Burst`]: up to `burst` chunks, then the next burst at the generation speed.
    pub(super) fn burst(&mut self, now: Instant) {
        let Some(Response {
            id,
            stage: Stage::Speaking(mut s),
            oob,
        }) = self.response.take()
        else {
            return;
        };
        let mut sent = Duration::ZERO;
        for _ in 0..self.scenario.timing.burst.max(1) {
            let Some(delta) = s.next_delta() else {
                break;
            };
            let at = json!({"response_id": id, "item_id": s.item_id, "output_index": 0, "content_index": 0});
            if let Some(audio) = delta.audio {
                let mut ev = at.clone();
                ev["delta"] = Value::String(audio);
                self.emit(EventKind::AudioDelta, ev);
                sent += Duration::from_secs_f64(delta.samples as f64 / f64::from(s.rate));
            }
            if let Some(text) = delta.text {
                let mut ev = at;
                ev["delta"] = Value::String(text);
                self.emit(EventKind::TranscriptDelta, ev);
            }
        }
        let produced = s.produced_ms();
        if let Some(rec) = self.items.iter_mut().find(|r| r.id == s.item_id) {
            rec.audio_ms = Some(produced);
        }
        let done = s.done();
        let drop = s.close_after.is_some_and(|n| s.sent_samples >= n);
        self.response = Some(Response {
            id,
            stage: Stage::Speaking(s),
            oob,
        });
        if drop {
            self.close(1011, "Internal error occurred.");
            return;
        }
        if done {
            self.finish("completed", None);
        } else {
            let speed = self.scenario.timing.speed.max(0.01);
            self.set_timer(Timer::Burst, now + sent.div_f64(speed));
        }
    }

    /// Cancels the response in progress (`reason`: `turn_detected` or `client_cancelled`).
    pub(super) fn cancel_response(&mut self, reason: &str) {
        self.finish("cancelled", Some(reason));
    }

    /// Ends the response in progress with `status`: the `.done` events, `response.done`,
    /// `rate_limits.updated`.
    fn finish(&mut self, status: &str, reason: Option<&str>) {
        self.stop_timer(Timer::Reply);
        self.stop_timer(Timer::Burst);
        let Some(r) = self.response.take() else {
            return;
        };
        let details = match reason {
            Some(reason) => json!({"type": status, "reason": reason}),
            None => Value::Null,
        };
        let mut output = Vec::new();
        let mut tokens = None;
        if let Stage::Speaking(s) = &r.stage {
            let at = json!({"response_id": r.id, "item_id": s.item_id, "output_index": 0, "content_index": 0});
            self.emit(EventKind::AudioDone, at.clone());
            let mut t = at.clone();
            t["transcript"] = Value::String(s.sent_text.clone());
            self.emit(EventKind::TranscriptDone, t);
            let mut part = at;
            part["part"] = json!({"type": "audio", "transcript": s.sent_text});
            self.emit_plain("response.content_part.done", part);
            let content_type = match self.api {
                Api::Ga => "output_audio",
                Api::Beta => "audio",
            };
            let item_status = if status == "completed" {
                "completed"
            } else {
                "incomplete"
            };
            let item = json!({"id": s.item_id, "type": "message", "role": "assistant",
                              "status": item_status, "object": "realtime.item",
                              "content": [{"type": content_type, "transcript": s.sent_text}]});
            self.emit_plain(
                "response.output_item.done",
                json!({"response_id": r.id, "output_index": 0, "item": item}),
            );
            if !r.oob && self.api == Api::Ga {
                self.emit_plain("conversation.item.done", json!({"item": item}));
            }
            tokens = Some(speak::audio_tokens(Duration::from_millis(s.produced_ms())));
            output.push(item);
            if status == "completed"
                && let Some((name, args, turn)) = s.then.clone()
            {
                let call = self.call_item(&r.id, r.oob, 1, name, &args, turn);
                self.handoff_call = Some(turn);
                output.push(call);
            }
        }
        let body = self.response_json(&r.id, status, details, output, tokens);
        self.emit(EventKind::ResponseDone, json!({"response": body}));
        self.rate_limits();
    }

    fn response_json(
        &self,
        id: &str,
        status: &str,
        details: Value,
        output: Vec<Value>,
        output_tokens: Option<u64>,
    ) -> Value {
        let view = self.state.view();
        let format = serde_json::to_value(&view.output).unwrap_or(Value::Null);
        let usage = output_tokens.map(|out| {
            let input = 40 * self.items.len() as u64;
            json!({"total_tokens": input + out, "input_tokens": input, "output_tokens": out})
        });
        let mut body = json!({"id": id, "object": "realtime.response", "status": status,
            "status_details": details, "output": output, "conversation_id": "conv_mock",
            "max_output_tokens": "inf", "metadata": null, "usage": usage});
        match self.api {
            Api::Ga => {
                body["output_modalities"] = json!(["audio"]);
                body["audio"] = json!({"output": {"format": format, "voice": view.voice}});
            }
            Api::Beta => {
                body["modalities"] = json!(["text", "audio"]);
                body["voice"] = view.voice.clone().unwrap_or(Value::Null);
                body["output_audio_format"] = json!(view.output.beta_name());
            }
        }
        body
    }

    fn rate_limits(&mut self) {
        self.emit(
            EventKind::RateLimitsUpdated,
            json!({"rate_limits": [
                {"name": "requests", "limit": 5000, "remaining": 4999, "reset_seconds": 0.012},
                {"name": "tokens", "limit": 400000, "remaining": 399000, "reset_seconds": 0.15}
            ]}),
        );
    }
}
