//! One call: wires a caller leg, a model session and playout together, and measures it.
//!
//! A single task per call selects over the leg's frames, the session's events and one playout
//! deadline. Uplink: leg frame → energy VAD (for voice-to-voice timing) → resample to the model's
//! input rate → JSON → writer channel. Downlink: model audio → resample to the leg's rate →
//! playout queue; every 20 ms tick playout releases exactly one frame to the leg.
//! The clock is tokio's, so the same code runs in real time or on a paused (accelerated) clock.

pub mod backend;
pub mod metrics;

use std::time::Duration;

use tokio::time::{Instant, sleep_until};

use crate::audio::playout::{PlayedKind, Playout, TurnTag};
use crate::audio::resample::StreamResampler;
use crate::audio::vad::{TurnDetector, VadEvent};
use crate::leg::{LegCommand, LegEvent, LegHandle};
use crate::model::gemini::session::{Outbound, Session, SessionEvent};
use crate::model::gemini::wire::{ClientMessage, FunctionResponse, ToolResponse};
use crate::model::gemini::{INPUT_RATE, OUTPUT_RATE, codec};
use crate::model::{ModelEvent, ToolCallRequest};
use metrics::ms;
pub use metrics::{CallReport, TurnRecord};

/// Knobs of the call's own measurement.
#[derive(Clone, Debug)]
pub struct CallOptions {
    /// Silence that ends a caller turn for `first_audio_ms` bookkeeping (not sent to the model).
    pub caller_silence: Duration,
    /// Agent id tagged on model audio (the orchestrator sets it once handoffs exist).
    pub agent: u32,
    /// When this turns true the call hangs up (server drain deadline).
    pub hangup: Option<tokio::sync::watch::Receiver<bool>>,
}

impl Default for CallOptions {
    fn default() -> Self {
        CallOptions {
            caller_silence: Duration::from_millis(500),
            agent: 0,
            hangup: None,
        }
    }
}

/// A failure that prevented the call from running at all.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    #[error("unsupported rate pair {from} Hz -> {to} Hz: {reason}")]
    Resampler { from: u32, to: u32, reason: String },
}

struct Downlink {
    resampler: StreamResampler,
    buf: Vec<i16>,
}

/// Runs the call until the leg stops or the model session ends.
pub async fn run(
    mut leg: LegHandle,
    mut session: Session,
    mut opts: CallOptions,
) -> Result<CallReport, CallError> {
    let leg_rate = leg.rate;
    let resampler = |from, to| {
        StreamResampler::new(from, to).map_err(|e| CallError::Resampler {
            from,
            to,
            reason: e.to_string(),
        })
    };
    let mut up = resampler(leg_rate, INPUT_RATE)?;
    let mut down = Downlink {
        resampler: resampler(OUTPUT_RATE, leg_rate)?,
        buf: Vec::new(),
    };
    let mut report = CallReport {
        uplink_resampler_delay_ms: ms(up.delay()),
        downlink_resampler_delay_ms: ms(down.resampler.delay()),
        ..Default::default()
    };
    let mut playout = Playout::new(leg_rate, leg.started_at.into_std());
    let mut vad = TurnDetector::new(opts.caller_silence);
    let mut up_buf: Vec<i16> = Vec::with_capacity(1024);
    let mut scratch: Vec<u8> = Vec::with_capacity(2048);

    let mut turn_no: u64 = 0;
    let mut turn_open = false;
    // Voice-to-voice bookkeeping.
    let mut last_voiced_at: Option<Instant> = None;
    let mut awaiting_first_audio: Option<(usize, Instant)> = None;
    let mut current: Option<usize> = None; // index in report.turns of the turn being answered
    let mut leg_open = true;

    let mut hangup = opts.hangup.take();
    let end_reason = loop {
        let deadline = Instant::from_std(playout.poll_timeout());
        tokio::select! {
            biased;
            _ = wait_true(&mut hangup) => {
                let _ = leg.commands.send(LegCommand::Hangup);
                session.send(Outbound::Close);
                break "server is shutting down".to_owned();
            }
            ev = leg.events.recv(), if leg_open => match ev {
                Some(LegEvent::Frame { frame, received_at }) => {
                    let before = vad.last_voiced_end();
                    let vad_event = vad.push(&frame.samples, frame.ts, frame.duration());
                    if vad.last_voiced_end() != before {
                        last_voiced_at = Some(received_at);
                    }
                    match vad_event {
                        Some(VadEvent::SpeechStart(ts)) => {
                            awaiting_first_audio = None;
                            report.turns.push(TurnRecord {
                                index: report.turns.len(),
                                caller_start_ms: ms(ts),
                                ..Default::default()
                            });
                        }
                        Some(VadEvent::SpeechEnd(ts)) => {
                            if let Some(t) = report.turns.last_mut() {
                                t.caller_end_ms = ms(ts);
                                awaiting_first_audio = last_voiced_at.map(|at| (t.index, at));
                            }
                        }
                        None => {}
                    }
                    up_buf.clear();
                    up.process(&frame.samples, &mut up_buf);
                    if !up_buf.is_empty() {
                        let mut json = String::with_capacity(up_buf.len() * 3 + 96);
                        codec::encode_audio(&up_buf, INPUT_RATE, &mut scratch, &mut json);
                        session.send(Outbound::Text { json, received_at: Some(received_at) });
                    }
                }
                Some(LegEvent::Dtmf { digit }) => tracing::debug!(%digit, "caller pressed a key"),
                Some(LegEvent::Heard { .. }) => {}
                Some(LegEvent::Stop) | None => {
                    let _ = leg.commands.send(LegCommand::Hangup);
                    session.send(Outbound::Close);
                    break "caller hung up".to_owned();
                }
            },
            ev = session.events.recv() => match ev {
                Some(SessionEvent::Model(e, at)) => {
                    let tag = TurnTag { agent: opts.agent, turn: turn_no };
                    match e {
                        ModelEvent::Audio { rate, samples } => {
                            if rate != down.resampler.from_hz() {
                                match resampler(rate, leg_rate) {
                                    Ok(r) => down.resampler = r,
                                    Err(e) => { report.protocol_errors.push(e.to_string()); continue; }
                                }
                            }
                            if !turn_open {
                                turn_open = true;
                                turn_no += 1;
                            }
                            let tag = TurnTag { agent: opts.agent, turn: turn_no };
                            down.buf.clear();
                            down.resampler.process(&samples, &mut down.buf);
                            playout.push(&down.buf, tag, at.into_std());
                        }
                        ModelEvent::GenerationComplete => {
                            down.buf.clear();
                            down.resampler.flush(&mut down.buf);
                            playout.push(&down.buf, tag, at.into_std());
                            playout.end_turn(tag);
                            turn_open = false;
                        }
                        ModelEvent::TurnComplete => {
                            if turn_open {
                                playout.end_turn(tag);
                                turn_open = false;
                            }
                        }
                        ModelEvent::Interrupted => {
                            playout.flush();
                            report.interruptions += 1;
                            if let Some(t) = current.and_then(|i| report.turns.get_mut(i)) {
                                t.interrupted = true;
                            }
                            turn_open = false;
                            let _ = leg.commands.send(LegCommand::Clear);
                        }
                        ModelEvent::InputTranscript { text, .. } => {
                            if let Some(t) = report.turns.last_mut() {
                                t.caller_text.push_str(&text);
                            }
                        }
                        ModelEvent::OutputTranscript { text, .. } => {
                            let idx = awaiting_first_audio.map(|(i, _)| i).or(current);
                            if let Some(t) = idx.and_then(|i| report.turns.get_mut(i)) {
                                if !t.agent_text.is_empty() && !text.starts_with(' ') {
                                    t.agent_text.push(' ');
                                }
                                t.agent_text.push_str(&text);
                            }
                        }
                        ModelEvent::ToolCall(calls) => {
                            report.tool_calls += calls.len() as u64;
                            session.send_message(&no_backend_response(&calls));
                        }
                        ModelEvent::ProtocolError(msg) => {
                            tracing::warn!(error = %msg, "model sent something baton cannot use; carrying on");
                            report.protocol_errors.push(msg);
                        }
                        ModelEvent::SetupComplete
                        | ModelEvent::ToolCallCancellation(_)
                        | ModelEvent::GoAway { .. }
                        | ModelEvent::ResumptionUpdate { .. }
                        | ModelEvent::Usage { .. } => {}
                    }
                }
                Some(SessionEvent::Written { received_at, written_at }) => {
                    report.uplink_added_ms.push(ms(written_at.saturating_duration_since(received_at)));
                }
                Some(SessionEvent::Closed { code, reason }) => {
                    let _ = leg.commands.send(LegCommand::Hangup);
                    break match code {
                        Some(c) => format!("model closed the session (code {c}): {reason}"),
                        None => format!("model connection lost: {reason}"),
                    };
                }
                None => {
                    let _ = leg.commands.send(LegCommand::Hangup);
                    break "model session ended".to_owned();
                }
            },
            _ = sleep_until(deadline) => {
                let now = Instant::now();
                while let Some(played) = playout.poll_frame(now.into_std()) {
                    if let Some(cs) = played.chunk_start {
                        let waited = now.into_std().saturating_duration_since(cs.received_at);
                        report.downlink_added_ms.push(ms(waited.saturating_sub(cs.ahead)));
                    }
                    if played.kind == PlayedKind::Voice {
                        let ts_ms = ms(played.frame.ts);
                        if let Some((idx, end)) = awaiting_first_audio.take() {
                            let v2v = ms(now.saturating_duration_since(end));
                            report.first_audio_ms.push(v2v);
                            if let Some(t) = report.turns.get_mut(idx) {
                                t.first_audio_ms = Some(v2v);
                                t.agent_start_ms = Some(ts_ms);
                            }
                            current = Some(idx);
                        }
                        if let Some(t) = current.and_then(|i| report.turns.get_mut(i)) {
                            t.agent_end_ms = Some(ts_ms + ms(played.frame.duration()));
                        }
                    }
                    if leg_open && leg.commands.send(LegCommand::Play { frame: played.frame, kind: played.kind }).is_err() {
                        leg_open = false;
                    }
                }
            }
        }
    };
    // Late `Written` reports for frames sent just before the end.
    while let Ok(ev) = session.events.try_recv() {
        if let SessionEvent::Written {
            received_at,
            written_at,
        } = ev
        {
            report
                .uplink_added_ms
                .push(ms(written_at.saturating_duration_since(received_at)));
        }
    }
    let stats = playout.stats();
    report.underruns = stats.underruns;
    report.late_ticks = stats.late_ticks;
    report.frames_played = stats.frames;
    report.voice_frames = stats.voice_frames;
    report.end_reason = end_reason;
    Ok(report)
}

/// Resolves when the watched flag is (or becomes) true; never without a watch.
async fn wait_true(w: &mut Option<tokio::sync::watch::Receiver<bool>>) {
    match w {
        Some(rx) => {
            if rx.wait_for(|v| *v).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
        None => std::future::pending::<()>().await,
    }
}

/// Until tool backends are configured, every call is answered with an error result so a BLOCKING
/// call never stalls the session.
fn no_backend_response(calls: &[ToolCallRequest]) -> ClientMessage {
    ClientMessage::ToolResponse(ToolResponse {
        function_responses: Some(
            calls
                .iter()
                .map(|c| FunctionResponse {
                    id: Some(c.id.clone()),
                    name: Some(c.name.clone()),
                    response: Some(serde_json::json!({
                        "error": format!("no backend is configured for tool '{}'", c.name)
                    })),
                    ..Default::default()
                })
                .collect(),
        ),
    })
}
