//! The script of a warm transfer's *brief session*: the second model session that briefs the
//! person a caller is being put through to, and hears whether they take the call. A scenario's
//! `[brief]` table (see [`super::scenario`]) says what the model says and how the person answers;
//! this module decides, for the n-th turn of a brief session, the reply and the function call.
//! Both engines (Gemini and OpenAI) follow it; they decide only when a session is a brief (its
//! instructions contain the marker) and when its turns end.
//!
//! Turns of a brief session: the first (baton's starting text) is answered with the brief; the
//! person's first turn with `accept_transfer` `{}` or `decline_transfer` `{"reason": …}` (then the
//! `answer_reply`, if any), or, when the answer is `none`, the default reply; every later turn
//! with the default reply. Scripted `[[turn]]`s, personas and the greeting play no part.
//! With `drop_mid_brief` the session's connection closes with 1011 after the burst that completes
//! half of the brief, so only the brief's session ends, part-way (the caller's stays up).

use std::time::Duration;

use serde_json::json;

use super::clip::OUTPUT_RATE;
use super::reply::{Reply, ScriptedToolCall};

/// The function the person's acceptance is reported with.
pub const ACCEPT: &str = "accept_transfer";
/// The function the person's refusal is reported with.
pub const DECLINE: &str = "decline_transfer";
/// The marker when the scenario names none.
pub const DEFAULT_MARKER: &str = "You are briefing";

/// How the person answers the brief.
#[derive(Clone, Debug, PartialEq)]
pub enum Answer {
    /// `accept_transfer` `{}`.
    Accept,
    /// `decline_transfer` `{"reason": …}`.
    Decline { reason: String },
    /// Nothing useful was said: the default reply, no call.
    None,
}

/// A scenario's `[brief]`: how its brief sessions go.
#[derive(Clone, Debug, PartialEq)]
pub struct Brief {
    /// A session whose instructions contain this text is a brief.
    pub marker: String,
    /// Said to the person on the starting text turn.
    pub reply: Reply,
    pub answer: Answer,
    /// Said with the answer, after its function call.
    pub answer_reply: Option<Reply>,
    /// The brief session's connection closes (1011, as a service fault would) after the burst
    /// that completes half of the brief (`drop_mid_brief`): the person hears its first words, not
    /// the rest (unless the brief is that burst's length or shorter).
    pub drop_mid_brief: bool,
}

/// What the model does in one turn of a brief session.
#[derive(Clone, Debug, PartialEq)]
pub struct Step {
    /// Made before anything is said.
    pub call: Option<ScriptedToolCall>,
    /// Said (after the call's response, where the protocol waits for it); `None`: nothing.
    pub reply: Option<Reply>,
}

impl Brief {
    /// The session with these instructions is a brief.
    pub fn names(&self, instructions: &str) -> bool {
        instructions.contains(&self.marker)
    }

    /// The function call that answers the brief, if the person gives an answer.
    pub fn call(&self) -> Option<ScriptedToolCall> {
        let (name, args) = match &self.answer {
            Answer::Accept => (ACCEPT, json!({})),
            Answer::Decline { reason } => (DECLINE, json!({ "reason": reason })),
            Answer::None => return None,
        };
        Some(ScriptedToolCall {
            name: name.to_owned(),
            args,
        })
    }

    /// With `drop_mid_brief`, how much of `reply` must have been sent for the session's connection
    /// to close (the engines check at the end of each burst): half, when `reply` is the brief;
    /// `None` for any other reply (or without the option).
    pub fn drop_after(&self, reply: &Reply) -> Option<Duration> {
        (self.drop_mid_brief && *reply == self.reply).then(|| {
            Duration::from_secs_f64(reply.audio.len() as f64 / f64::from(OUTPUT_RATE) / 2.0)
        })
    }

    /// What the model does in the `index`-th turn (0: baton's starting text) of a brief session
    /// whose declared functions `declared` says; `default` is the scenario's default reply.
    pub fn step(&self, index: usize, declared: impl Fn(&str) -> bool, default: &Reply) -> Step {
        let speak = |r: &Reply| Step {
            call: None,
            reply: Some(r.clone()),
        };
        match index {
            0 => speak(&self.reply),
            1 => match self.call().filter(|c| declared(&c.name)) {
                Some(call) => Step {
                    call: Some(call),
                    reply: self.answer_reply.clone(),
                },
                None => speak(default),
            },
            _ => speak(default),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(text: &str) -> Reply {
        Reply {
            audio: std::sync::Arc::from(vec![0i16; 240]),
            text: text.into(),
        }
    }

    fn brief(answer: Answer, answer_reply: Option<Reply>) -> Brief {
        Brief {
            marker: DEFAULT_MARKER.into(),
            reply: reply("Hi Ravi"),
            answer,
            answer_reply,
            drop_mid_brief: false,
        }
    }

    #[test]
    fn drop_mid_brief_cuts_the_brief_at_its_half_and_nothing_else() {
        let mut b = brief(Answer::Accept, Some(reply("Thanks")));
        b.reply.audio = vec![1i16; 24_000].into();
        assert_eq!(b.drop_after(&b.reply.clone()), None, "off unless asked for");
        b.drop_mid_brief = true;
        assert_eq!(
            b.drop_after(&b.reply.clone()),
            Some(Duration::from_millis(500))
        );
        assert_eq!(b.drop_after(&reply("Thanks")), None);
        assert_eq!(
            b.drop_after(&reply("Hi Ravi")),
            None,
            "same text, other audio"
        );
    }

    #[test]
    fn the_brief_then_the_answer_then_default_replies() {
        let b = brief(Answer::Accept, Some(reply("Thanks")));
        let default = reply("Sorry?");
        let all = |_: &str| true;
        assert_eq!(b.step(0, all, &default).reply, Some(reply("Hi Ravi")));
        assert_eq!(b.step(0, all, &default).call, None);
        let answer = b.step(1, all, &default);
        assert_eq!(answer.call.as_ref().map(|c| c.name.as_str()), Some(ACCEPT));
        assert_eq!(answer.call.map(|c| c.args), Some(json!({})));
        assert_eq!(answer.reply, Some(reply("Thanks")));
        assert_eq!(b.step(2, all, &default).reply, Some(default.clone()));
        assert_eq!(b.step(2, all, &default).call, None);
    }

    #[test]
    fn a_decline_gives_its_reason_and_an_undeclared_function_is_never_called() {
        let b = brief(
            Answer::Decline {
                reason: "busy".into(),
            },
            None,
        );
        let default = reply("Sorry?");
        let answer = b.step(1, |n| n == DECLINE, &default);
        let call = answer.call.expect("a decline call");
        assert_eq!(
            (call.name.as_str(), call.args),
            (DECLINE, json!({"reason": "busy"}))
        );
        assert_eq!(answer.reply, None);
        let undeclared = b.step(1, |_| false, &default);
        assert_eq!((undeclared.call, undeclared.reply), (None, Some(default)));
    }

    #[test]
    fn no_answer_is_the_default_reply_and_the_marker_is_found_anywhere() {
        let b = brief(Answer::None, None);
        let default = reply("Sorry?");
        let step = b.step(1, |_| true, &default);
        assert_eq!((step.call, step.reply), (None, Some(default)));
        assert!(b.names("Context. You are briefing Ravi, who ..."));
        assert!(!b.names("You are Asha, the front desk."));
    }
}
