//! Commands into a running call's orchestrator from outside the call loop (an operator
//! activating an agent, a sidecar's result): a bounded channel whose sender never waits, so a
//! full queue refuses the command (the sender is told), never stalls the frame clock. Commands
//! travel boxed: they are rare, and the channel's first block of slots is made with every call.

use std::sync::Arc;

use tokio::sync::{mpsc, oneshot};

use super::{CommandError, Input};

/// Something for the call loop to do, from outside it.
#[derive(Debug)]
pub enum CallCommand {
    /// Feed the orchestrator an input (an operator's activation or deactivation, a sidecar's
    /// result) and say whether it was accepted.
    Agents {
        input: Input,
        reply: Option<oneshot::Sender<Result<(), CommandError>>>,
    },
}

/// The receiving side of a call's command channel, handed to the call in
/// `CallOptions::commands` (which the call takes once, at its start).
#[derive(Clone, Default)]
pub struct Inbox(Arc<std::sync::Mutex<Option<mpsc::Receiver<Box<CallCommand>>>>>);

impl std::fmt::Debug for Inbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Inbox")
    }
}

impl Inbox {
    /// The receiver, once.
    pub fn take(&self) -> Option<mpsc::Receiver<Box<CallCommand>>> {
        self.0.lock().ok().and_then(|mut g| g.take())
    }
}

/// The sending side of a call's command channel (cheap to clone).
#[derive(Clone, Debug)]
pub struct Commands {
    tx: mpsc::Sender<Box<CallCommand>>,
}

/// A command could not be delivered: the call ended, or its queue is full.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum CommandSendError {
    #[error("the call has ended")]
    Ended,
    #[error("the call is busy; try again")]
    Busy,
    #[error(transparent)]
    Refused(#[from] CommandError),
}

impl Commands {
    /// A command channel of `capacity` and its receiving end (for `CallOptions::commands`).
    pub fn channel(capacity: usize) -> (Commands, Inbox) {
        let (tx, rx) = mpsc::channel(capacity.max(1));
        (
            Commands { tx },
            Inbox(Arc::new(std::sync::Mutex::new(Some(rx)))),
        )
    }

    /// Offers an input without waiting for the call (a sidecar's result).
    pub fn offer(&self, input: Input) -> Result<(), CommandSendError> {
        self.tx
            .try_send(Box::new(CallCommand::Agents { input, reply: None }))
            .map_err(|e| match e {
                mpsc::error::TrySendError::Full(_) => CommandSendError::Busy,
                mpsc::error::TrySendError::Closed(_) => CommandSendError::Ended,
            })
    }

    /// Sends an input and waits for the orchestrator's verdict (an operator's command).
    pub async fn request(&self, input: Input) -> Result<(), CommandSendError> {
        let (reply, rx) = oneshot::channel();
        self.tx
            .try_send(Box::new(CallCommand::Agents {
                input,
                reply: Some(reply),
            }))
            .map_err(|e| match e {
                mpsc::error::TrySendError::Full(_) => CommandSendError::Busy,
                mpsc::error::TrySendError::Closed(_) => CommandSendError::Ended,
            })?;
        match rx.await {
            Ok(r) => r.map_err(CommandSendError::Refused),
            Err(_) => Err(CommandSendError::Ended),
        }
    }

    pub fn is_closed(&self) -> bool {
        self.tx.is_closed()
    }
}
