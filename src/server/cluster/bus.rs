//! The control bus between instances: PostgreSQL `LISTEN/NOTIFY`, nothing else. Each instance
//! listens on its own channel (`baton_ctl_<instance>`); a request names its sender, and the
//! answer comes back on the sender's channel, cut into parts that fit a notification (PostgreSQL
//! refuses payloads of 8000 bytes or more). Notifications are not stored: one sent while the
//! receiver is disconnected is lost, so every request has a timeout and says so.
//!
//! Payloads come from other instances through the database, still outside data: a message
//! that does not parse is logged and dropped, answers to unknown requests are ignored, and a
//! reassembly is bounded.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use base64::Engine;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::oneshot;

use crate::store::{Store, StoreError};

/// The largest notification payload sent (PostgreSQL's limit is 8000 bytes).
const PAYLOAD_MAX: usize = 7000;
/// Raw bytes of an answer per part (base64 grows them by a third, the envelope adds ~100).
const PART_BYTES: usize = 5000;
/// Most parts one answer may have (about 320 KB).
const PARTS_MAX: u32 = 64;

/// What one instance asks another about a call it holds (or about all its calls).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Op {
    /// `GET /admin/calls/{call}`.
    Call {
        call: String,
    },
    Transcript {
        call: String,
    },
    History {
        call: String,
    },
    Figures {
        call: String,
    },
    /// The call's events so far.
    Events {
        call: String,
    },
    Activate {
        call: String,
        agent: String,
    },
    Deactivate {
        call: String,
        agent: String,
    },
    Hangup {
        call: String,
    },
    /// `DELETE /whip/{session}` for a browser call held elsewhere (the secret is never logged).
    WhipHangup {
        session: String,
    },
    /// Every live call of the instance (`admin`: as the admin API lists them, else as
    /// `GET /calls` does).
    List {
        admin: bool,
    },
}

impl Op {
    /// The call the request is about, if one.
    pub fn call(&self) -> Option<&str> {
        match self {
            Op::Call { call }
            | Op::Transcript { call }
            | Op::History { call }
            | Op::Figures { call }
            | Op::Events { call }
            | Op::Activate { call, .. }
            | Op::Deactivate { call, .. }
            | Op::Hangup { call } => Some(call),
            Op::List { .. } | Op::WhipHangup { .. } => None,
        }
    }
}

/// An instance's answer: what its admin API would have answered, or that the call is not
/// (any more) live there.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "answer", rename_all = "snake_case", deny_unknown_fields)]
pub enum Answer {
    Here { status: u16, body: Value },
    NotHere,
}

/// One notification.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "t", rename_all = "snake_case")]
enum Message {
    Request {
        id: String,
        from: String,
        #[serde(flatten)]
        op: Op,
    },
    Part {
        re: String,
        part: u32,
        parts: u32,
        data: String,
    },
}

/// A request that got no answer.
#[derive(Debug, thiserror::Error)]
pub enum BusError {
    #[error("instance {instance} did not answer within {ms} ms")]
    Timeout { instance: String, ms: u64 },
    #[error("cannot send to instance {instance}: {source}")]
    Send {
        instance: String,
        #[source]
        source: StoreError,
    },
}

/// The channel an instance listens on.
pub fn channel(instance: &str) -> String {
    format!("baton_ctl_{instance}")
}

struct Pending {
    parts: Vec<Option<Vec<u8>>>,
    tx: oneshot::Sender<Answer>,
}

/// This instance's end of the bus: requests it waits on, and the sending side.
pub struct Bus {
    me: String,
    store: Store,
    next: AtomicU64,
    pending: Mutex<HashMap<String, Pending>>,
}

/// A request for this instance to serve.
#[derive(Debug, PartialEq, Eq)]
pub struct Incoming {
    pub id: String,
    pub from: String,
    pub op: Op,
}

impl Bus {
    pub fn new(me: &str, store: Store) -> Bus {
        Bus {
            me: me.to_owned(),
            store,
            next: AtomicU64::new(1),
            pending: Mutex::new(HashMap::new()),
        }
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, HashMap<String, Pending>> {
        self.pending.lock().unwrap_or_else(|e| e.into_inner())
    }

    async fn notify(&self, to: &str, payload: &str) -> Result<(), StoreError> {
        sqlx::query("SELECT pg_notify($1, $2)")
            .bind(channel(to))
            .bind(payload)
            .execute(self.store.pool())
            .await?;
        Ok(())
    }

    /// Sends `op` to `instance` and waits at most `limit` for its whole answer.
    pub async fn request(
        &self,
        instance: &str,
        op: Op,
        limit: Duration,
    ) -> Result<Answer, BusError> {
        let id = format!("{}-{}", self.me, self.next.fetch_add(1, Ordering::Relaxed));
        let (tx, rx) = oneshot::channel();
        self.pending().insert(
            id.clone(),
            Pending {
                parts: Vec::new(),
                tx,
            },
        );
        let msg = Message::Request {
            id: id.clone(),
            from: self.me.clone(),
            op,
        };
        let text = serde_json::to_string(&msg).unwrap_or_default();
        let sent = async {
            if text.len() > PAYLOAD_MAX {
                return Err(BusError::Send {
                    instance: instance.to_owned(),
                    source: StoreError::Invalid(format!(
                        "a request of {} bytes does not fit a notification",
                        text.len()
                    )),
                });
            }
            self.notify(instance, &text)
                .await
                .map_err(|source| BusError::Send {
                    instance: instance.to_owned(),
                    source,
                })?;
            rx.await.map_err(|_| BusError::Timeout {
                instance: instance.to_owned(),
                ms: limit.as_millis() as u64,
            })
        };
        let r = match tokio::time::timeout(limit, sent).await {
            Ok(r) => r,
            Err(_) => Err(BusError::Timeout {
                instance: instance.to_owned(),
                ms: limit.as_millis() as u64,
            }),
        };
        self.pending().remove(&id);
        r
    }

    /// Sends `answer` to the instance that asked, in parts. An answer too large for the bus is
    /// replaced by an error saying so, so the asker is not left to time out.
    pub async fn answer(&self, to: &Incoming, answer: &Answer) -> Result<(), StoreError> {
        let payloads = match parts(&to.id, answer) {
            Ok(p) => p,
            Err(e) => {
                let refusal = Answer::Here {
                    status: 507,
                    body: serde_json::json!({ "error": format!(
                        "{e}; ask instance {} itself (its own admin API)", self.me
                    ) }),
                };
                parts(&to.id, &refusal)?
            }
        };
        for payload in payloads {
            self.notify(&to.from, &payload).await?;
        }
        Ok(())
    }

    /// Takes one notification off this instance's channel: a request to serve, or a part of
    /// an answer (completing a waiting request when it is the last).
    pub fn receive(&self, payload: &str) -> Option<Incoming> {
        let msg: Message = match serde_json::from_str(payload) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(error = %e, bytes = payload.len(), "control bus: unreadable message dropped");
                return None;
            }
        };
        match msg {
            Message::Request { id, from, op } => Some(Incoming { id, from, op }),
            Message::Part {
                re,
                part,
                parts,
                data,
            } => {
                self.take_part(&re, part, parts, &data);
                None
            }
        }
    }

    fn take_part(&self, re: &str, part: u32, parts: u32, data: &str) {
        if parts == 0 || parts > PARTS_MAX || part >= parts {
            tracing::warn!(
                part,
                parts,
                "control bus: an answer part out of range dropped"
            );
            return;
        }
        let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(data) else {
            tracing::warn!("control bus: an answer part that is not base64 dropped");
            return;
        };
        let mut pending = self.pending();
        let Some(p) = pending.get_mut(re) else {
            // Its request timed out, or it was never ours.
            return;
        };
        if p.parts.len() != parts as usize {
            p.parts = vec![None; parts as usize];
        }
        p.parts[part as usize] = Some(bytes);
        if p.parts.iter().all(Option::is_some) {
            let Some(p) = pending.remove(re) else { return };
            let whole: Vec<u8> = p.parts.into_iter().flatten().flatten().collect();
            match serde_json::from_slice::<Answer>(&whole) {
                Ok(a) => {
                    let _ = p.tx.send(a);
                }
                Err(e) => tracing::warn!(error = %e, "control bus: an unreadable answer dropped"),
            }
        }
    }
}

/// An answer as notification payloads.
fn parts(re: &str, answer: &Answer) -> Result<Vec<String>, StoreError> {
    let bytes = serde_json::to_vec(answer).map_err(|e| StoreError::Invalid(e.to_string()))?;
    let chunks: Vec<&[u8]> = if bytes.is_empty() {
        vec![&[][..]]
    } else {
        bytes.chunks(PART_BYTES).collect()
    };
    if chunks.len() > PARTS_MAX as usize {
        return Err(StoreError::Invalid(format!(
            "an answer of {} bytes is too large for the control bus",
            bytes.len()
        )));
    }
    let n = chunks.len() as u32;
    chunks
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let msg = Message::Part {
                re: re.to_owned(),
                part: i as u32,
                parts: n,
                data: base64::engine::general_purpose::STANDARD.encode(c),
            };
            serde_json::to_string(&msg).map_err(|e| StoreError::Invalid(e.to_string()))
        })
        .collect()
}

/// Checks one bus payload the way [`Bus::receive`] reads it (the bad-input corpus and fuzzing).
pub fn parse_message(payload: &str) -> Result<(), String> {
    serde_json::from_str::<Message>(payload)
        .map(|_| ())
        .map_err(|e| format!("control bus message: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ops_round_trip_and_name_their_call() {
        let op = Op::Activate {
            call: "c1".into(),
            agent: "billing".into(),
        };
        let msg = Message::Request {
            id: "a-1".into(),
            from: "a".into(),
            op: op.clone(),
        };
        let text = serde_json::to_string(&msg).unwrap();
        assert_eq!(
            text,
            r#"{"t":"request","id":"a-1","from":"a","op":"activate","call":"c1","agent":"billing"}"#
        );
        assert!(parse_message(&text).is_ok());
        assert_eq!(op.call(), Some("c1"));
        assert_eq!(Op::List { admin: true }.call(), None);
        assert!(parse_message(r#"{"t":"request","id":"x","from":"y","op":"explode"}"#).is_err());
        assert!(parse_message("not json").is_err());
    }

    #[test]
    fn a_large_answer_is_cut_into_parts_that_fit() {
        let body = Value::String("x".repeat(40_000));
        let answer = Answer::Here { status: 200, body };
        let payloads = parts("a-7", &answer).unwrap();
        assert!(payloads.len() > 1);
        assert!(
            payloads.iter().all(|p| p.len() <= PAYLOAD_MAX),
            "every part fits"
        );
        // Reassembled in any order.
        let mut whole = vec![Vec::new(); payloads.len()];
        for p in payloads.iter().rev() {
            let Message::Part { part, data, .. } = serde_json::from_str(p).unwrap() else {
                panic!("a part")
            };
            whole[part as usize] = base64::engine::general_purpose::STANDARD
                .decode(data)
                .unwrap();
        }
        let back: Answer = serde_json::from_slice(&whole.concat()).unwrap();
        assert_eq!(back, answer);
    }
}
