//! Handing the caller to a person: a human agent's destination and settings
//! ([`destination`]), one transfer's sans-IO state machine, blind or warm ([`machine`]), the
//! answering-machine heuristic for the answered leg ([`amd`]), the REFER NOTIFY progress lines
//! ([`sipfrag`]), Twilio's REST redirect to `<Dial>` ([`twilio`]), the bounded channel a
//! transfer's events reach its requester on ([`events`]) and how outcomes and timings are counted
//! ([`figures`]). The call, the SIP leg and the orchestrator drive these; nothing
//! here opens a socket except the REST client.

pub mod amd;
pub mod destination;
pub mod events;
pub mod figures;
pub mod machine;
pub mod sipfrag;
mod timers;
pub mod twilio;

#[cfg(test)]
mod machine_tests;

pub use self::amd::{Screen, Verdict};
pub use self::destination::{Destination, Handover, HumanAgent, OnNoAnswer};
pub use self::events::{EventReceiver, EventSender};
pub use self::machine::{
    Action, BlindVia, Event, Failure, Input, Outcome, PersonAudio, Plan, Report, Settings, Stage,
    Transfer,
};
pub use self::timers::Timer;
