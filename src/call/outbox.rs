//! What the call's core asks of its shell, queued until the shell carries it out: commands for
//! the leg, commands for each model session (named by [`SessionId`]), and asynchronous work
//! (opening a session, running a tool) whose outcome comes back as an event. The core's parts
//! (playout and uplink, reconnects, the orchestrator's glue) all write here; none of them needs
//! the others to do it.

use std::collections::VecDeque;

use crate::agents::ToolRun;
use crate::backend::ModelBackend;
use crate::leg::LegCommand;
use crate::model::Capabilities;
use crate::model::gemini::session::SessionConfig;
use crate::model::gemini::wire::ClientMessage;
use crate::model::session::Outbound;

/// One model session of the call, as the shell names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SessionId(pub u64);

/// A session the core sends to: its id and what its model can do.
#[derive(Clone, Copy, Debug)]
pub struct Live {
    pub id: SessionId,
    pub caps: Capabilities,
}

/// Something for one of the call's model sessions.
#[derive(Debug)]
pub enum ModelCommand {
    /// Ready text (encoded caller audio) or a ping.
    Send { to: SessionId, out: Outbound },
    /// One of baton's messages, carried on the session's own wire.
    Message {
        to: SessionId,
        msg: Box<ClientMessage>,
    },
    /// The caller barged in having heard `heard_ms` of the model's current audio item.
    BargeIn { to: SessionId, heard_ms: u64 },
    /// Close the session. With `watch` its events are still read until it ends (reported with
    /// `handle_model(to, None, ..)`); without, the shell forgets it.
    Close { to: SessionId, watch: bool },
    /// Let the session go without a word (it died or ended): its socket is dropped.
    Drop { to: SessionId },
}

/// What a session to be opened is opened with.
#[derive(Debug)]
pub struct OpenRequest {
    pub backend: ModelBackend,
    pub config: SessionConfig,
    /// Take the call's standby socket if one is ready (only the setup goes out).
    pub standby_socket: bool,
}

/// Asynchronous work the shell runs for the core.
#[derive(Debug)]
pub enum Task {
    /// Open a session; report with `CallCore::handle_opened` under `id`.
    Open {
        id: SessionId,
        request: Box<OpenRequest>,
    },
    /// Run a tool; its result comes back through `CallCore::handle_tool_result`.
    RunTool(ToolRun),
    /// Stop these running tools.
    CancelTools { ids: Vec<String>, reason: String },
    /// Hand the caller's leg to a person (the announcement has played to its end); every event
    /// of the transfer comes back through `CallCore::handle_transfer`.
    Transfer(Box<TransferRequest>),
}

/// A transfer to a person for the shell to carry out: asked of the caller's leg (blind), or
/// dialled and briefed by the call itself (warm).
#[derive(Debug)]
pub struct TransferRequest {
    /// The person's agent id.
    pub to: String,
    pub target: crate::transfer::Destination,
    /// The trunk a number is dialled on (warm).
    pub trunk: Option<String>,
    pub settings: crate::transfer::Settings,
    pub plan: crate::transfer::Handover,
    /// Warm: the session that briefs the person once they answer.
    pub brief: Option<Box<BriefRequest>>,
    /// Warm: what the caller hears while they wait and the agent is silent (none: silence).
    pub hold: Option<crate::transfer::destination::HoldAudio>,
}

/// The brief session of a warm transfer: opened when the person answers, it speaks to them
/// only, and its `accept_transfer` / `decline_transfer` calls are their answer.
#[derive(Debug)]
pub struct BriefRequest {
    /// The person's name, as the brief addresses them.
    pub name: String,
    pub backend: crate::backend::ModelBackend,
    pub config: crate::model::gemini::session::SessionConfig,
    /// The text turn that starts the brief, sent right after setup.
    pub start: String,
}

/// A session could not be opened.
#[derive(Debug)]
pub struct OpenFailed {
    pub reason: String,
    /// The service refused the setup as invalid (for a resumption: the handle was refused).
    pub handle_refused: bool,
}

/// Everything the core has decided and the shell has not carried out yet.
#[derive(Default)]
pub struct Outbox {
    pub(super) leg: VecDeque<LegCommand>,
    pub(super) model: VecDeque<ModelCommand>,
    pub(super) tasks: VecDeque<Task>,
    next_id: u64,
}

impl Outbox {
    /// A fresh session id (the first session of the call is 0).
    pub(super) fn new_id(&mut self) -> SessionId {
        self.next_id += 1;
        SessionId(self.next_id)
    }

    pub(super) fn message(&mut self, to: SessionId, msg: ClientMessage) {
        self.model.push_back(ModelCommand::Message {
            to,
            msg: Box::new(msg),
        });
    }

    pub(super) fn send(&mut self, to: SessionId, out: Outbound) {
        self.model.push_back(ModelCommand::Send { to, out });
    }

    pub(super) fn close(&mut self, to: SessionId, watch: bool) {
        self.model.push_back(ModelCommand::Close { to, watch });
    }

    pub(super) fn drop_session(&mut self, to: SessionId) {
        self.model.push_back(ModelCommand::Drop { to });
    }

    pub(super) fn open(&mut self, request: OpenRequest) -> SessionId {
        let id = self.new_id();
        self.tasks.push_back(Task::Open {
            id,
            request: Box::new(request),
        });
        id
    }
}
