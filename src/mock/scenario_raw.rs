//! The TOML shape of a scenario file, as read (checked and turned into a
//! [`Scenario`](super::Scenario) by `Scenario::parse`).

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_json::Value;

use super::super::faults::RawFaults;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawScenario {
    pub(super) name: Option<String>,
    pub(super) description: Option<String>,
    pub(super) caller: Option<String>,
    pub(super) agents: Option<String>,
    #[serde(default)]
    pub(super) model: RawModel,
    #[serde(default)]
    pub(super) persona: Vec<RawPersona>,
    #[serde(default)]
    pub(super) turn: Vec<RawTurn>,
    pub(super) faults: Option<RawFaults>,
    pub(super) brief: Option<RawBrief>,
}

#[derive(Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawModel {
    pub(super) profile: Option<String>,
    pub(super) first_audio_ms: Option<u64>,
    pub(super) speed: Option<f64>,
    pub(super) chunk_ms: Option<u64>,
    pub(super) burst: Option<u32>,
    pub(super) jitter_ms: Option<u64>,
    pub(super) seed: Option<u64>,
    pub(super) silence_ms: Option<u64>,
    pub(super) connect_ms: Option<u64>,
    pub(super) default_reply: Option<String>,
    pub(super) default_reply_text: Option<String>,
    pub(super) greeting: Option<String>,
    pub(super) greeting_text: Option<String>,
    pub(super) partial_content_wedges_vad: Option<bool>,
    pub(super) partial_content_interrupts: Option<bool>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawPersona {
    pub(super) id: String,
    pub(super) marker: String,
    pub(super) default_reply: Option<String>,
    pub(super) default_reply_text: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawTurn {
    pub(super) input_text: Option<String>,
    pub(super) reply: Option<String>,
    pub(super) output_text: Option<String>,
    pub(super) tool_call: Option<RawToolCall>,
    pub(super) by: Option<String>,
    pub(super) by_persona: Option<BTreeMap<String, RawReply>>,
    pub(super) handoff: Option<RawHandoff>,
    pub(super) after_tool: Option<RawReply>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawReply {
    pub(super) reply: String,
    pub(super) output_text: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawHandoff {
    pub(super) to: String,
    pub(super) reply: String,
    pub(super) output_text: Option<String>,
    pub(super) tool_call: Option<RawToolCall>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawToolCall {
    pub(super) name: String,
    pub(super) args: Option<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawBrief {
    pub(super) marker: Option<String>,
    pub(super) reply: String,
    pub(super) output_text: Option<String>,
    pub(super) answer: String,
    pub(super) reason: Option<String>,
    pub(super) answer_reply: Option<String>,
    pub(super) answer_text: Option<String>,
    pub(super) drop_mid_brief: Option<bool>,
}
