//! How a transfer's events are counted: `baton_transfers_total{plan, kind}` per outcome,
//! `baton_transfer_setup_ms` (request to the person's answer, minus ring time) and
//! `baton_transfer_dead_air_ms` (a switch of what the caller hears to its first audible frame),
//! written to whichever `metrics` recorder is in scope. Labels are fixed vocabularies: no
//! destination, number or call id.

use super::machine::{BlindVia, Event, Plan};

pub const OUTCOMES: &str = "baton_transfers_total";
pub const SETUP_MS: &str = "baton_transfer_setup_ms";
pub const DEAD_AIR_MS: &str = "baton_transfer_dead_air_ms";

/// The `plan` label.
pub fn plan_label(plan: Plan) -> &'static str {
    match plan {
        Plan::Warm => "warm",
        Plan::Blind(BlindVia::SipRefer) => "blind_refer",
        Plan::Blind(BlindVia::TwilioRedirect) => "blind_twilio",
    }
}

/// Counts one event of a transfer of `plan`. Stage and bad-NOTIFY events are not figures.
pub fn record(plan: Plan, event: &Event) {
    let plan = plan_label(plan);
    match event {
        Event::Finished(report) => {
            metrics::counter!(OUTCOMES, "plan" => plan, "kind" => report.outcome.kind())
                .increment(1);
            if let Some(ms) = report.setup_ms {
                metrics::histogram!(SETUP_MS, "plan" => plan).record(ms as f64);
            }
        }
        Event::DeadAir { ms, .. } => {
            metrics::histogram!(DEAD_AIR_MS, "plan" => plan).record(*ms as f64);
        }
        Event::Stage { .. } | Event::BadNotify { .. } | Event::MoreBadNotifies { .. } => {}
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use metrics_exporter_prometheus::PrometheusBuilder;

    use super::*;
    use crate::transfer::{Destination, Input, Settings, Transfer};

    #[test]
    fn outcomes_and_timings_reach_the_recorder() {
        let recorder = PrometheusBuilder::new().build_recorder();
        let handle = recorder.handle();
        let t0 = Instant::now();
        let target = Destination::Number("+442079460018".into());
        let mut warm = Transfer::new(Plan::Warm, target.clone(), Settings::default(), t0);
        warm.handle(Input::Ringing, t0 + Duration::from_millis(300));
        warm.handle(Input::Answered, t0 + Duration::from_millis(4_300));
        warm.handle(Input::Accepted, t0 + Duration::from_millis(6_000));
        warm.handle_caller_frame(true, t0 + Duration::from_millis(6_020));
        let mut busy = Transfer::new(Plan::Warm, target, Settings::default(), t0);
        busy.handle(
            Input::Rejected {
                status: 486,
                reason: "Busy Here",
            },
            t0 + Duration::from_millis(900),
        );
        metrics::with_local_recorder(&recorder, || {
            for t in [&mut warm, &mut busy] {
                while let Some(e) = t.poll_event() {
                    record(Plan::Warm, &e);
                }
            }
        });
        let text = handle.render();
        for line in [
            "baton_transfers_total{plan=\"warm\",kind=\"connected\"} 1",
            "baton_transfers_total{plan=\"warm\",kind=\"busy\"} 1",
            "baton_transfer_setup_ms_sum{plan=\"warm\"} 300",
            "baton_transfer_setup_ms_count{plan=\"warm\"} 1",
            "baton_transfer_dead_air_ms_sum{plan=\"warm\"} 20",
        ] {
            assert!(text.contains(line), "{line} missing from:\n{text}");
        }
        assert!(!text.contains("442079460018"));
    }
}
