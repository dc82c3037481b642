//! Fault injection (see [`super::super::faults`] for the `[faults]` table): the scripted `goAway`
//! and the close when its time is up, silence after it, drops at a moment or at the first point
//! of a kind (caller mid-utterance, a tool call out, a reply mid-stream), garbage frames. Every
//! goAway and drop takes one from the server's fault budget.

use std::time::{Duration, Instant};

use super::super::faults::{Ending, Faults, When};
use super::super::inbound::Rejection;
use super::{MockSession, Outgoing, Timer};
use crate::model::gemini::wire::{GoAway, ServerMessage};

/// `timeLeft` as proto `Duration` JSON: `"50s"`, `"0.5s"`.
fn proto_duration(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{:.3}s", d.as_secs_f64())
    }
}

impl MockSession {
    /// After `setupComplete`: arm this connection's faults.
    pub(super) fn arm_faults(&mut self, now: Instant) {
        let faults = self.faults.clone();
        if let Some(r) = faults.go_away_after {
            let at = now + Faults::pick(r, &mut self.fault_rng);
            self.timers.set(Timer::GoAway, at);
        }
        if let Some(every) = faults.garbage_every {
            self.timers.set(Timer::Garbage, now + every);
        }
        let origin = self.store.origin(now);
        self.armed = Vec::new();
        for (i, d) in faults.drops.iter().enumerate() {
            let at = if d.every_connection {
                now + Faults::pick(d.after, &mut self.fault_rng)
            } else if self.store.drop_fired(i, false) {
                continue;
            } else {
                // The same moment on every connection of the server.
                let mut rng = super::super::rng::Rng::new(faults.seed ^ (i as u64 + 1));
                origin + Faults::pick(d.after, &mut rng)
            };
            self.armed.push((i, *d, at));
        }
        self.arm_timed_drop();
    }

    fn arm_timed_drop(&mut self) {
        match self
            .armed
            .iter()
            .filter(|(_, d, _)| d.when == When::After)
            .map(|&(_, _, at)| at)
            .min()
        {
            Some(at) => self.timers.set(Timer::Drop, at),
            None => self.timers.stop(Timer::Drop),
        }
    }

    pub(super) fn on_fault_timer(&mut self, t: Timer, now: Instant) {
        match t {
            Timer::GoAway => {
                if !self.store.take_fault(self.faults.max_faults) {
                    return;
                }
                let left = self.faults.go_away_time_left;
                self.store
                    .note(self.conn, |c| c.fault = Some("go_away".into()));
                self.send(ServerMessage {
                    go_away: Some(GoAway {
                        time_left: Some(proto_duration(left)),
                    }),
                    ..Default::default()
                });
                self.silent = self.faults.silent_after_go_away;
                self.timers.set(Timer::GoAwayClose, now + left);
            }
            Timer::GoAwayClose => self.close(Rejection::new(
                1011,
                "Deadline expired before operation could complete.",
            )),
            Timer::Drop => {
                self.fault_point(When::After, now);
                self.arm_timed_drop();
            }
            Timer::Garbage => {
                if !self.silent {
                    self.out
                        .push_back(Outgoing::Raw(b"\x00\xffnot json {{".to_vec()));
                }
                if let Some(every) = self.faults.garbage_every {
                    self.timers.set(Timer::Garbage, now + every);
                }
            }
            Timer::Reply | Timer::Burst | Timer::TurnComplete => {}
        }
    }

    /// A moment of kind `when`: fires the first armed rule of that kind that is due. True if the
    /// session ended.
    pub(super) fn fault_point(&mut self, when: When, now: Instant) -> bool {
        if self.closed {
            return true;
        }
        let Some(pos) = self
            .armed
            .iter()
            .position(|(_, d, at)| d.when == when && *at <= now)
        else {
            return false;
        };
        let (i, rule, _) = self.armed.remove(pos);
        if !rule.every_connection && self.store.drop_fired(i, true) {
            return false;
        }
        if !self.store.take_fault(self.faults.max_faults) {
            return false;
        }
        let label = match rule.ending {
            Ending::Close(code) => format!("drop:{code}"),
            Ending::Abrupt => "drop:1006".into(),
            Ending::Silent => "drop:silent".into(),
        };
        self.store.note(self.conn, |c| c.fault = Some(label));
        match rule.ending {
            Ending::Close(code) => {
                let reason = match code {
                    1008 => "Operation is not implemented, or supported, or enabled.",
                    1011 => "Internal error occurred.",
                    _ => "The service is currently unavailable.",
                };
                self.close(Rejection::new(code, reason));
            }
            Ending::Abrupt | Ending::Silent => {
                self.closed = true;
                self.timers.stop_all();
                self.out.push_back(if rule.ending == Ending::Abrupt {
                    Outgoing::Drop
                } else {
                    Outgoing::Hang
                });
            }
        }
        true
    }
}
