//! A blind transfer of one SIP call: the shell that carries out a [`Transfer`] (plan
//! `Blind(SipRefer)`) on the call's own dialog. The REFER goes out (Refer-To the destination),
//! its final answer and every NOTIFY sipfrag of the implicit `refer` subscription are fed to the
//! machine, and its actions come back to [`super::call::CallDialog::run`]: leave the call (BYE)
//! once the destination answered, or keep it (the caller stays with the agent) with the typed
//! outcome. Every event of the machine goes to the requester on a bounded channel the dialog
//! never waits on ([`crate::transfer::events`]: the report always arrives, a flood of bad
//! NOTIFYs arrives counted), and the requester counts the outcome ([`crate::transfer::figures`],
//! in the daemon's own recorder).
//!
//! rsipstack sends the REFER (`InviteDialog::refer`) and hands the NOTIFYs of the dialog to
//! the call as `DialogState::Notify`; nothing of the SIP exchange is written by hand here.

use std::time::{Duration, Instant};

use rsipstack::dialog::invite_dialog::InviteDialog;
use rsipstack::sip::ReferTo;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::transfer::{
    Action, BlindVia, Destination, Event, EventSender, Failure, Input, Plan, Settings, Transfer,
};

/// A request to hand the call's peer to `target` by REFER. Send it once the agent's
/// announcement has played to its end: the REFER goes out at once.
#[derive(Debug)]
pub struct BlindTransfer {
    pub target: Destination,
    pub settings: Settings,
    /// Every event of the transfer in order (stages, then the [`Event::Finished`] report),
    /// from [`crate::transfer::events::channel`].
    pub events: EventSender,
}

/// Where a call's blind transfers are asked ([`super::call::CallDialog::transfers`]). It holds
/// [`REQUESTS`] waiting while one is under way: a call's own request is refused when it is full
/// (`try_send`), an operator's waits for room.
pub type TransferPort = mpsc::Sender<BlindTransfer>;

/// Transfer requests that may wait for a call while one is under way.
pub const REQUESTS: usize = 2;

/// What the dialog does after a step of the transfer.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Step {
    /// Keep going: the call stays as it is.
    Continue,
    /// The peer now talks to the destination: baton leaves the call (BYE).
    Leave,
}

/// One transfer under way on a dialog.
pub(super) struct Running {
    machine: Transfer,
    events: EventSender,
    finished: bool,
    /// The REFER in flight: its final status, or why none came. It runs beside the dialog so
    /// a BYE or the end of the media is taken while the peer decides.
    refer: Option<JoinHandle<Result<u16, String>>>,
}

/// The Refer-To of a destination: a SIP URI as written (validated by
/// [`Destination::parse`]), a number as a `tel:` URI (RFC 3966; the peer, a trunk or PBX,
/// routes it).
pub fn refer_to(target: &Destination) -> String {
    match target {
        Destination::Sip(uri) => format!("<{uri}>"),
        Destination::Number(n) => format!("<tel:{n}>"),
    }
}

impl Running {
    /// Starts `req` at `now`: the announcement has played, so the REFER is the first action.
    pub(super) fn start(req: BlindTransfer, now: Instant) -> Running {
        let mut machine = Transfer::new(
            Plan::Blind(BlindVia::SipRefer),
            req.target,
            req.settings,
            now,
        );
        machine.handle(Input::AnnouncementPlayed, now);
        Running {
            machine,
            events: req.events,
            finished: false,
            refer: None,
        }
    }

    /// True once the outcome is reported: the dialog drops the transfer.
    pub(super) fn finished(&self) -> bool {
        self.finished
    }

    /// When the machine wants waking.
    pub(super) fn deadline(&self) -> Option<Instant> {
        self.machine.poll_timeout().map(|(at, _)| at)
    }

    /// Carries out the first action (the REFER).
    pub(super) async fn begin(&mut self, dialog: &InviteDialog) -> Step {
        self.drive(dialog).await
    }

    pub(super) async fn timeout(&mut self, dialog: &InviteDialog) -> Step {
        self.machine.handle_timeout(Instant::now());
        self.drive(dialog).await
    }

    /// A NOTIFY of the `refer` event package: its sipfrag body.
    pub(super) async fn notify(&mut self, dialog: &InviteDialog, sipfrag: &[u8]) -> Step {
        self.machine
            .handle(Input::Notify { sipfrag }, Instant::now());
        self.drive(dialog).await
    }

    /// Waits for the REFER's final answer (pending forever when none is in flight).
    pub(super) async fn refer_answer(&mut self) -> Result<u16, String> {
        let Some(task) = self.refer.as_mut() else {
            return std::future::pending().await;
        };
        let answer = task
            .await
            .unwrap_or_else(|e| Err(format!("the REFER was not sent: {e}")));
        self.refer = None;
        answer
    }

    /// Feeds the REFER's final answer.
    pub(super) async fn refer_answered(
        &mut self,
        dialog: &InviteDialog,
        answer: Result<u16, String>,
    ) -> Step {
        match answer {
            Ok(status) => self
                .machine
                .handle(Input::ReferAnswered { status }, Instant::now()),
            Err(message) => self
                .machine
                .handle(Input::Failed(Failure::Sip { message }), Instant::now()),
        }
        self.drive(dialog).await
    }

    /// The peer hung up while the transfer was under way.
    pub(super) fn caller_hung_up(&mut self) {
        if let Some(task) = self.refer.take() {
            task.abort();
        }
        self.machine.handle(Input::CallerHungUp, Instant::now());
        self.report();
    }

    /// Carries out the machine's actions until it has none, feeding back what they did.
    async fn drive(&mut self, dialog: &InviteDialog) -> Step {
        let mut step = Step::Continue;
        while let Some(action) = self.machine.poll_action() {
            match action {
                Action::Refer { target } => {
                    self.refer = Some(tokio::spawn(refer(dialog.clone(), target)));
                }
                Action::LeaveCall => step = Step::Leave,
                // The outcome is in the report; the caller stays on this dialog with the agent.
                Action::ReturnToAgent { .. }
                | Action::HandTo { .. }
                | Action::EndCall { .. }
                | Action::RoutePersonAudio(_) => {}
                other => tracing::warn!(action = ?other, "not a blind REFER transfer's action"),
            }
        }
        self.report();
        step
    }

    fn report(&mut self) {
        while let Some(event) = self.machine.poll_event() {
            if let Event::Finished(report) = &event {
                self.finished = true;
                tracing::info!(
                    outcome = report.outcome.kind(),
                    status = ?report.status,
                    total_ms = report.total_ms,
                    "blind transfer finished"
                );
            }
            self.events.send(event);
        }
    }
}

/// Sends the REFER and waits for its final answer; `Err` says why none came.
async fn refer(dialog: InviteDialog, target: Destination) -> Result<u16, String> {
    let to = ReferTo::new(refer_to(&target));
    // The subscription's NOTIFYs come in the dialog; a REFER without a final answer within
    // the transaction's own timeout (64·T1) has failed.
    let wait = Duration::from_secs(32);
    match tokio::time::timeout(wait, dialog.refer(to, None, None)).await {
        Ok(Ok(Some(resp))) => Ok(u16::from(resp.status_code.clone())),
        Ok(Ok(None)) => Err("the call's dialog is not confirmed; no REFER was sent".into()),
        Ok(Err(e)) => Err(format!("the REFER failed: {e}")),
        Err(_) => Err(format!(
            "the REFER got no final answer in {} s",
            wait.as_secs()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refer_to_carries_the_destination() {
        let sip = Destination::parse("sip:priya@pbx.example.com;transport=tcp").unwrap();
        assert_eq!(refer_to(&sip), "<sip:priya@pbx.example.com;transport=tcp>");
        let number = Destination::parse("+44 20 7946 0018").unwrap();
        assert_eq!(refer_to(&number), "<tel:+442079460018>");
    }
}
