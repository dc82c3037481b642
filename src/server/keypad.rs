//! Keypad tones between a running call and its leg: a tap on the leg's two channels that the
//! call never sees. Keys the caller presses (Twilio `dtmf`, AudioSocket DTMF, SIP RFC 4733 and
//! INFO) become `keypad` events in the call's event stream and reach the agent as `[keypad]`
//! configures — each key as a text turn, or collected and told at once (or handed to a tool of
//! the agent set first) — through the call's command channel, as a prompt at a quiet moment.
//! Keys the agent presses (its `send_tool` calls, seen in the call's event stream) go out as
//! the leg's own events where it has them (SIP: RFC 4733) and as tones in its outgoing frames
//! elsewhere. Frames pass through untouched otherwise.
//!
//! When keys are marked sensitive no log line carries them.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use serde_json::json;
use tokio::sync::broadcast::{self, error::RecvError};
use tokio::time::{Instant, Sleep, sleep_until};
use tokio_util::sync::ReusableBoxFuture;

use super::AppState;
use super::live::LiveCall;
use crate::agents::orchestrator::{Input, ToolRun};
use crate::agents::registry::Delivery;
use crate::leg::keypad::{Collected, Collector, KeypadConfig, Tones, send_args};
use crate::leg::sip::dtmf::Timing;
use crate::leg::{LegCommand, LegEvent, LegHandle, LegIo, Refused};

/// Presses keys on a leg that has its own event channel.
pub type NativeKeys = Arc<dyn Fn(String, Timing) + Send + Sync>;

/// What the tap works with besides the leg.
#[derive(Clone, Default)]
pub struct Hooks {
    /// The listed call: its event stream and, once running, its command channel.
    pub live: Option<Arc<LiveCall>>,
    /// The call's agent set (a tool that takes collected keys is looked up there).
    pub agents: Option<Arc<crate::agents::Registry>>,
    /// The leg's own way to press keys; `None`: tones.
    pub native: Option<NativeKeys>,
}

/// Puts the keypad tap between `leg` and its call (when the call is listed: the stream and
/// the commands are its). The tap runs in the call's own task, inside the leg's polls: frames
/// pass through without a task or channel of their own.
pub fn tap(app: &AppState, leg: LegHandle, hooks: Hooks) -> LegHandle {
    let Some(live) = hooks.live.clone() else {
        return leg;
    };
    let cfg = app.loaded.config.keypad.clone();
    let (rate, media_zero) = (leg.rate, leg.started_at);
    leg.wrap(move |inner| {
        // The agent's key presses are its `send_tool` calls in the event stream; when its agents
        // cannot make one the tap has nothing to read there.
        let feed = agents_can_press(&cfg, hooks.agents.as_deref())
            .then(|| ReusableBoxFuture::new(next_line(live.subscribe().1)));
        let now = Instant::now();
        Box::new(Tap {
            collector: Collector::new(&cfg),
            tones: Tones::new(rate),
            cfg,
            live,
            hooks,
            media_zero,
            deliveries: 0,
            inner,
            feed,
            timer: Box::pin(sleep_until(now)),
        })
    })
}

type Line = (Result<Arc<str>, RecvError>, broadcast::Receiver<Arc<str>>);

/// Whether a call's agents can press keys: its set declares the send tool, or takes tools from
/// MCP servers (whose lists change while it runs). Without an agent set nothing calls tools.
fn agents_can_press(cfg: &KeypadConfig, agents: Option<&crate::agents::Registry>) -> bool {
    !cfg.send_tool.is_empty()
        && agents.is_some_and(|r| r.tool(&cfg.send_tool).is_some() || !r.mcp_servers().is_empty())
}

async fn next_line(mut feed: broadcast::Receiver<Arc<str>>) -> Line {
    let r = feed.recv().await;
    (r, feed)
}

struct Tap {
    cfg: KeypadConfig,
    collector: Collector,
    tones: Tones,
    live: Arc<LiveCall>,
    hooks: Hooks,
    /// The leg's media start: key times count from there, as the call's events do.
    media_zero: Instant,
    deliveries: u64,
    inner: Box<dyn LegIo>,
    /// The call's event stream (the agent's key presses); `None` once it closed.
    feed: Option<ReusableBoxFuture<'static, Line>>,
    /// The collector's deadline.
    timer: Pin<Box<Sleep>>,
}

impl LegIo for Tap {
    fn poll_event(&mut self, cx: &mut Context<'_>) -> Poll<Option<LegEvent>> {
        loop {
            while let Some(feed) = self.feed.as_mut() {
                let Poll::Ready((line, rx)) = feed.poll(cx) else {
                    break;
                };
                match line {
                    Ok(line) => {
                        feed.set(next_line(rx));
                        self.maybe_press(&line);
                    }
                    Err(RecvError::Lagged(_)) => feed.set(next_line(rx)),
                    Err(RecvError::Closed) => self.feed = None,
                }
            }
            if let Some(deadline) = self.collector.poll_timeout() {
                if self.timer.deadline() != deadline {
                    self.timer.as_mut().reset(deadline);
                }
                if self.timer.as_mut().poll(cx).is_ready() {
                    if let Some(c) = self.collector.handle_timeout(Instant::now()) {
                        self.deliver(c);
                    }
                    continue;
                }
            }
            return match self.inner.poll_event(cx) {
                Poll::Ready(Some(LegEvent::Dtmf { digit })) => {
                    self.key_in(digit);
                    continue;
                }
                other => other,
            };
        }
    }

    /// Key tones go out in idle frames: on time while any are queued.
    fn idle_ticks(&self) -> bool {
        self.tones.busy() || self.inner.idle_ticks()
    }

    fn command(&mut self, cmd: LegCommand) -> Result<Option<crate::audio::Frame>, Refused> {
        match cmd {
            LegCommand::Play {
                mut frame,
                mut kind,
            } => {
                if self.tones.apply(&mut frame.samples) {
                    kind = crate::leg::PlayedKind::Voice;
                }
                self.inner.command(LegCommand::Play { frame, kind })
            }
            other => self.inner.command(other),
        }
    }

    fn poll_flush(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        self.inner.poll_flush(cx)
    }
}

impl Tap {
    fn at_ms(&self) -> u64 {
        Instant::now()
            .saturating_duration_since(self.media_zero)
            .as_millis() as u64
    }

    /// A key from the caller.
    fn key_in(&mut self, key: char) {
        if !self.cfg.sensitive {
            tracing::debug!(%key, "caller pressed a key");
        }
        self.live.publish(&json!({
            "type": "keypad", "direction": "in", "key": key.to_string(), "at_ms": self.at_ms(),
        }));
        if let Some(c) = self.collector.on_key(key, Instant::now()) {
            self.deliver(c);
        }
    }

    /// Tells the agent (through the call's command channel), or hands the keys to the tool.
    fn deliver(&mut self, c: Collected) {
        let Some(commands) = self.live.steering().map(|s| s.commands.clone()) else {
            tracing::debug!("keys pressed before the call runs are not delivered");
            return;
        };
        self.deliveries += 1;
        let tool = (!self.cfg.tool.is_empty())
            .then(|| {
                self.hooks
                    .agents
                    .as_ref()
                    .and_then(|a| a.tool(&self.cfg.tool).cloned())
            })
            .flatten();
        let Some(tool) = tool else {
            if !self.cfg.tool.is_empty() {
                tracing::warn!(tool = %self.cfg.tool, "keypad.tool is not a tool of this call's agent set; the agent is told the keys");
            }
            offer(&commands, c.text());
            return;
        };
        let run = ToolRun {
            call_id: format!("keypad-{}", self.deliveries),
            agent: "keypad".into(),
            tool: tool.clone(),
            args: json!({ "digits": c.digits }),
        };
        let sensitive = self.cfg.sensitive;
        tokio::spawn(async move {
            let text = match crate::agents::runner::run(&run).await {
                Ok(v) => format!(
                    "[keypad] The caller entered keys; the {} tool answered: {v}",
                    run.tool.name
                ),
                Err(e) => {
                    tracing::warn!(tool = %run.tool.name, error = %e, "keypad tool failed");
                    format!(
                        "[keypad] The caller entered keys, but the {} tool failed: {e}",
                        run.tool.name
                    )
                }
            };
            if !sensitive {
                tracing::debug!(%text, "keypad tool answered");
            }
            offer(&commands, text);
        });
    }

    /// A line of the call's event stream: a `send_tool` call the agents' filter allowed
    /// presses its keys.
    fn maybe_press(&mut self, line: &str) {
        if self.cfg.send_tool.is_empty() || !line.contains("\"tool_called\"") {
            return;
        }
        let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
            return;
        };
        if v["type"] != "tool_called"
            || v["tool_name"] != self.cfg.send_tool.as_str()
            || v["allowed"] != true
        {
            return;
        }
        let (digits, pause) = match send_args(&v["args"]) {
            Ok(x) => x,
            Err(e) => {
                tracing::warn!(error = %e, "the agent's key presses are not usable");
                return;
            }
        };
        let mut timing = self.cfg.timing();
        if let Some(p) = pause {
            timing.gap_ms = p;
        }
        let queued = match &self.hooks.native {
            Some(press) => {
                press(digits.clone(), timing);
                Ok(digits.chars().count())
            }
            None => self.tones.queue(&digits, timing),
        };
        match queued {
            Ok(n) => {
                if !self.cfg.sensitive {
                    tracing::debug!(%digits, "agent presses keys");
                }
                self.live.publish(&json!({
                    "type": "keypad", "direction": "out", "keys": digits, "count": n,
                    "as": if self.hooks.native.is_some() { "leg" } else { "tones" },
                    "at_ms": self.at_ms(),
                }));
            }
            Err(c) => tracing::warn!(key = ?c, "the agent pressed a key that does not exist"),
        }
    }
}

fn offer(commands: &crate::call::tap::Commands, text: String) {
    let input = Input::SidecarResult {
        sidecar: "keypad".into(),
        text,
        deliver: Delivery::Prompt,
    };
    if let Err(e) = commands.offer(input) {
        tracing::debug!(error = %e, "keys not delivered to the agent");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(path: &str) -> crate::agents::Registry {
        crate::agents::load(&std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap()
    }

    #[test]
    fn the_tap_reads_the_event_stream_only_when_the_agents_can_press_keys() {
        let cfg = KeypadConfig::default();
        assert_eq!(cfg.send_tool, "send_dtmf");
        let keypad = set("tests/data/keypad/agents.toml");
        assert!(agents_can_press(&cfg, Some(&keypad)));
        assert!(!agents_can_press(&cfg, None), "no agents, no tool calls");
        let front_desk = set("config/agents/front_desk.toml");
        assert!(!agents_can_press(&cfg, Some(&front_desk)));
        let mcp = set("config/agents/support_mcp.toml");
        assert!(
            agents_can_press(&cfg, Some(&mcp)),
            "an MCP server's tools may include it"
        );
        let off = KeypadConfig {
            send_tool: String::new(),
            ..KeypadConfig::default()
        };
        assert!(!agents_can_press(&off, Some(&keypad)));
    }
}
