//! What the model does in one scripted turn: a reply (audio and its transcription) and the
//! function call it makes before speaking. Scenarios hold them; the brief's script and the
//! engines play them.

use serde_json::Value;

use super::clip::Clip;

/// Something the model says: 24 kHz audio and its transcription.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Reply {
    pub audio: Clip,
    /// The `outputTranscription` text; empty for none.
    pub text: String,
}

/// A function call the model makes before it speaks.
#[derive(Clone, Debug, PartialEq)]
pub struct ScriptedToolCall {
    pub name: String,
    /// A JSON object.
    pub args: Value,
}
