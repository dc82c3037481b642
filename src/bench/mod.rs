//! `baton bench`: measured runs whose figures go into `report.md`, `report.json` and plots.
//!
//! `fixtures` replays fixture scenarios; `load` sweeps concurrent Twilio-protocol calls against a
//! `baton serve` in another process; both write to `--report DIR`. `transfers` runs warm
//! transfers to a person against SIPp and writes to `--out DIR`.

pub mod capture;
pub mod figures;
pub mod fixtures;
pub mod host;
pub mod load;
pub mod markdown;
pub mod report;
pub mod samples;
pub mod transfers;
