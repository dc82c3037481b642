//! Conversation items of the OpenAI mock: `conversation.item.create` (system, user and
//! assistant text messages, function calls and their outputs; `previous_item_id` of `root`, an
//! existing item, or an error; no assistant audio), deletion, and `conversation.item.truncate`
//! bounded by the audio the item carried. Creating an item never starts or cancels a response;
//! a user message is a caller turn (it takes the next scripted turn) unless it is a scripted
//! caller line (the script moves there) or names a persona (an instruction: it takes none); an
//! assistant message answers the caller turn before it.

use serde_json::{Value, json};

use super::config::Refusal;
use super::engine::{ItemRecord, RealtimeSession};
use crate::model::openai::wire::{Api, Item};

impl RealtimeSession {
    pub(super) fn on_item_create(
        &mut self,
        previous: Option<String>,
        item: Item,
    ) -> Result<(), Refusal> {
        let previous = match previous.as_deref() {
            None => self.items.last().map(|i| i.id.clone()),
            Some("root") => None,
            Some(id) if self.items.iter().any(|i| i.id == id) => Some(id.to_owned()),
            Some(id) => {
                return Err(Refusal::invalid(
                    "previous_item_id",
                    format!("Previous item with id '{id}' not found."),
                ));
            }
        };
        let id = self.new_id("item");
        let json_item = match item {
            Item::Message { role, content, .. } => {
                let allowed: &[&str] = match role.as_str() {
                    "system" => &["input_text"],
                    "user" => &["input_text", "input_audio", "input_image"],
                    "assistant" => &["output_text", "text"],
                    other => {
                        return Err(Refusal::invalid(
                            "item.role",
                            format!(
                                "Invalid value: '{other}'. Supported values are: 'system', 'user', and 'assistant'."
                            ),
                        ));
                    }
                };
                if let Some((i, c)) = content
                    .iter()
                    .enumerate()
                    .find(|(_, c)| !allowed.contains(&c.kind.as_str()))
                {
                    return Err(Refusal::invalid(
                        &format!("item.content[{i}].type"),
                        format!("Invalid value: '{}' for a {role} message.", c.kind),
                    ));
                }
                let text: Vec<&str> = content.iter().filter_map(|c| c.text.as_deref()).collect();
                let text = text.join("\n");
                match role.as_str() {
                    "user" => {
                        if let Some(j) = self.scripted_line(&text) {
                            self.caller_turns = j + 1;
                            self.unanswered = Some(j);
                            self.resumed |= self.voice.is_none();
                        } else if !self.note_persona(&text) {
                            self.unanswered = Some(self.caller_turns);
                            self.caller_turns += 1;
                        }
                    }
                    "system" => {
                        self.note_persona(&text);
                    }
                    _ => self.unanswered = None,
                }
                json!({"id": id, "type": "message", "role": role, "status": "completed",
                       "object": "realtime.item", "content": content})
            }
            Item::FunctionCallOutput {
                call_id, output, ..
            } => {
                // A refusal (an `error` output) moves nobody, whoever it names.
                let named = match serde_json::from_str::<Value>(&output) {
                    Ok(v) if v.get("error").is_some() => None,
                    Ok(v) => {
                        let markers = self.scenario.markers();
                        crate::mock::persona::named_in_json(&markers, &v)
                    }
                    Err(_) => None,
                };
                let named = named.or_else(|| {
                    serde_json::from_str::<Value>(&output)
                        .is_err()
                        .then(|| crate::mock::persona::named_in(&self.scenario.markers(), &output))
                        .flatten()
                });
                match self.pending_call.take() {
                    Some((pending, turn)) if pending == call_id => {
                        if self.handoff_call == Some(turn) {
                            self.handoff_call = None;
                            self.acked = true;
                        } else {
                            self.answered = Some(turn);
                        }
                        if let Some(p) = named {
                            self.active = Some(p);
                        }
                    }
                    other => {
                        self.pending_call = other;
                        return Err(Refusal::invalid(
                            "item.call_id",
                            format!(
                                "No function call with call_id '{call_id}' is awaiting output."
                            ),
                        ));
                    }
                }
                json!({"id": id, "type": "function_call_output", "call_id": call_id,
                       "output": output, "status": "completed", "object": "realtime.item"})
            }
            Item::FunctionCall {
                call_id,
                name,
                arguments,
                ..
            } => json!({"id": id, "type": "function_call", "call_id": call_id, "name": name,
                        "arguments": arguments, "status": "completed", "object": "realtime.item"}),
            Item::Other => {
                return Err(Refusal::invalid(
                    "item.type",
                    "Supported item types are 'message', 'function_call' and 'function_call_output'.",
                ));
            }
        };
        self.add_item(json_item, previous, None, true);
        Ok(())
    }

    /// Records an item and announces it (`conversation.item.added` + `.done`; beta `.created`).
    /// `done`: the item is complete (a response's own item gets its `.done` when it ends).
    pub(super) fn add_item(
        &mut self,
        item: Value,
        previous: Option<String>,
        audio_ms: Option<u64>,
        done: bool,
    ) {
        let id = item
            .get("id")
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned();
        let at = match &previous {
            Some(p) => self
                .items
                .iter()
                .position(|i| i.id == *p)
                .map_or(self.items.len(), |i| i + 1),
            None => 0,
        };
        self.items
            .insert(at.min(self.items.len()), ItemRecord { id, audio_ms });
        let body = json!({"previous_item_id": previous, "item": item});
        match self.api {
            Api::Ga => {
                self.emit_plain("conversation.item.added", body.clone());
                if done {
                    self.emit_plain("conversation.item.done", body);
                }
            }
            Api::Beta => self.emit_plain("conversation.item.created", body),
        }
    }

    pub(super) fn on_item_delete(&mut self, v: &Value) -> Result<(), Refusal> {
        let id = v.get("item_id").and_then(Value::as_str).unwrap_or("");
        let Some(i) = self.items.iter().position(|r| r.id == id) else {
            return Err(Refusal::invalid(
                "item_id",
                format!("Item with item_id '{id}' not found."),
            ));
        };
        self.items.remove(i);
        self.emit_plain("conversation.item.deleted", json!({"item_id": id}));
        Ok(())
    }

    pub(super) fn on_truncate(
        &mut self,
        item_id: &str,
        content_index: u32,
        end_ms: u64,
    ) -> Result<(), Refusal> {
        let Some(rec) = self.items.iter_mut().find(|r| r.id == item_id) else {
            return Err(Refusal::invalid(
                "item_id",
                format!("Item with item_id '{item_id}' not found."),
            ));
        };
        let Some(produced) = rec.audio_ms else {
            return Err(Refusal::invalid(
                "item_id",
                format!("Item '{item_id}' is not an assistant message with audio."),
            ));
        };
        if content_index != 0 {
            return Err(Refusal::invalid(
                "content_index",
                format!("Invalid content_index {content_index}: the item has one audio part (0)."),
            ));
        }
        if end_ms > produced {
            return Err(Refusal::invalid(
                "audio_end_ms",
                format!("Audio content of {produced}ms is already shorter than {end_ms}ms"),
            ));
        }
        rec.audio_ms = Some(end_ms);
        self.emit_plain(
            "conversation.item.truncated",
            json!({"item_id": item_id, "content_index": 0, "audio_end_ms": end_ms}),
        );
        Ok(())
    }
}
