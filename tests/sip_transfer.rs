//! A blind transfer of a SIP call by REFER against SIPp (Debian package `sip-tester`), a real
//! SIP peer on loopback playing the far end of the call: baton places the call, asks for the
//! transfer on its dialog, and SIPp answers the REFER. Accepted (202, NOTIFY 100 then 200): the
//! outcome is `transferred` with status 200 and baton leaves the call with BYE. Refused (603 to
//! the REFER, or 202 then NOTIFY 486): the outcome is typed with the status, and the call stays
//! up with baton until baton hangs up. The callee hanging up instead of answering the REFER
//! ends the transfer as `caller_hung_up`. A flood of NOTIFYs that are not sipfrags, unread,
//! arrives as a few one by one and one count, ahead of the report. And through `baton serve`:
//! `POST /calls/{id}/transfer` on a call placed to SIPp answers with the typed report, the call's
//! event feed carries the transfer's steps, and the finished call says baton left it because it
//! was transferred.

use crate::sip_support;
use crate::support;

use std::sync::Arc;
use std::time::Duration;

use baton::leg::sip::call::{self, CallSettings, Connected, Dial, HungUpBy};
use baton::leg::sip::config::{SipConfig, Transport};
use baton::leg::sip::media::MediaConfig;
use baton::leg::sip::sdp::Codec;
use baton::leg::sip::transfer::BlindTransfer;
use baton::leg::sip::ua::{self, UserAgent};
use baton::transfer::{Destination, Event, EventReceiver, Outcome, Report, Settings};
use rsipstack::transaction::transaction::Transaction;
use sip_support::{Scenario, free_udp, scenario, scratch, sipp_on};

const TARGET: &str = "sip:priya@127.0.0.1:5999";

struct NoCalls;

impl ua::Handler for NoCalls {
    fn invite(&self, _tx: Transaction) {}
    fn taking_calls(&self) -> bool {
        false
    }
}

/// The callee's side up to the REFER: answer the INVITE, take the ACK, take the REFER and check
/// its Refer-To, remembering the dialog's addresses for the NOTIFYs.
fn answer_then_refer() -> Vec<String> {
    vec![
        r#"  <recv request="INVITE"/>
  <send>
    <![CDATA[
      SIP/2.0 200 OK
      [last_Via:]
      [last_From:]
      [last_To:];tag=[pid]SIPpTag01[call_number]
      [last_Call-ID:]
      [last_CSeq:]
      Contact: <sip:person@[local_ip]:[local_port]>
      Content-Type: application/sdp
      Content-Length: [len]

v=0
o=user1 53655765 2353687637 IN IP[local_ip_type] [local_ip]
s=-
c=IN IP[media_ip_type] [media_ip]
t=0 0
m=audio [media_port] RTP/AVP 0
a=rtpmap:0 PCMU/8000
    ]]>
  </send>
  <recv request="ACK"/>
  <recv request="REFER">
    <action>
      <ereg regexp="sip:priya@127\.0\.0\.1:5999" search_in="hdr" header="Refer-To:" check_it="true" assign_to="target"/>
      <ereg regexp=".*" search_in="hdr" header="From:" assign_to="rfrom"/>
      <ereg regexp=".*" search_in="hdr" header="To:" assign_to="rto"/>
      <ereg regexp="sip:[^&gt;;]*" search_in="hdr" header="Contact:" assign_to="rcontact"/>
    </action>
  </recv>
"#
        .into(),
    ]
}

/// SIPp's answer to the REFER.
fn refer_answer(status: &str) -> String {
    format!(
        r#"  <send>
    <![CDATA[
      SIP/2.0 {status}
      [last_Via:]
      [last_From:]
      [last_To:]
      [last_Call-ID:]
      [last_CSeq:]
      X-Refer: [$target] from[$rfrom] to[$rto] at [$rcontact]
      Content-Length: 0

    ]]>
  </send>
"#
    )
}

/// A NOTIFY of the REFER's subscription carrying `frag`, then its 200.
fn notify(cseq: u32, frag: &str, state: &str) -> String {
    format!(
        r#"  <send retrans="500">
    <![CDATA[
      NOTIFY [$rcontact] SIP/2.0
      Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
      From:[$rto]
      To:[$rfrom]
      [last_Call-ID:]
      CSeq: {cseq} NOTIFY
      Contact: <sip:person@[local_ip]:[local_port]>
      Max-Forwards: 70
      Event: refer
      Subscription-State: {state}
      Content-Type: message/sipfrag
      Content-Length: [len]

{frag}
    ]]>
  </send>
  <recv response="200"/>
"#
    )
}

/// baton's BYE, answered.
fn bye_answered() -> String {
    r#"  <recv request="BYE"/>
  <send>
    <![CDATA[
      SIP/2.0 200 OK
      [last_Via:]
      [last_From:]
      [last_To:]
      [last_Call-ID:]
      [last_CSeq:]
      Content-Length: 0

    ]]>
  </send>
"#
    .into()
}

struct Call {
    ua: Arc<UserAgent>,
    c: Connected,
}

/// A user agent on loopback that places a call to SIPp on `sipp_port` once SIPp listens.
async fn place(sipp_port: u16) -> Call {
    let port = free_udp();
    let cfg = SipConfig {
        listen: vec![format!("udp:127.0.0.1:{port}")],
        ..Default::default()
    };
    let (ua, incoming) = UserAgent::start(&cfg, None, None).await.unwrap();
    tokio::spawn(ua.clone().serve());
    tokio::spawn(ua::dispatch(ua.clone(), incoming, Arc::new(NoCalls)));
    let settings = CallSettings {
        ring: Duration::ZERO,
        media: MediaConfig::default(),
        codecs: vec![Codec::Pcmu],
        rtp_ports: (30000, 40000),
    };
    let dial = Dial {
        target: format!("sip:person@127.0.0.1:{sipp_port}")
            .as_str()
            .try_into()
            .unwrap(),
        from: format!("sip:baton@127.0.0.1:{port}")
            .as_str()
            .try_into()
            .unwrap(),
        credential: None,
        ring_timeout: Duration::from_secs(10),
        transport: Transport::Udp,
    };
    // SIPp takes a moment to bind; the INVITE is retransmitted meanwhile.
    let c = call::place(ua.clone(), dial, &settings)
        .await
        .expect("SIPp answers the call");
    Call { ua, c }
}

/// The report of the transfer whose events arrive on `events`, and the stages it went through.
async fn finished(events: &mut EventReceiver) -> (Report, Vec<String>) {
    let mut stages = Vec::new();
    loop {
        let e = tokio::time::timeout(Duration::from_secs(20), events.recv())
            .await
            .expect("the transfer finishes")
            .expect("events until the report");
        match e {
            Event::Stage { stage } => stages.push(format!("{stage:?}")),
            Event::Finished(r) => return (r, stages),
            Event::BadNotify { error } => panic!("a NOTIFY was not understood: {error}"),
            Event::MoreBadNotifies { count, last_error } => {
                panic!("{count} NOTIFYs were not understood: {last_error}")
            }
            Event::DeadAir { .. } => {}
        }
    }
}

/// A call placed to SIPp playing `steps`, with a blind transfer asked on it at once.
struct Referred {
    ua: Arc<UserAgent>,
    run: tokio::task::JoinHandle<call::Ended>,
    /// What a call does with its leg: reads it (a SIP leg runs when its call polls it) until
    /// the leg's `Stop`, then hangs up. Aborting it drops the leg, which ends the call.
    caller: tokio::task::JoinHandle<()>,
    events: EventReceiver,
    peer: tokio::task::JoinHandle<sip_support::SippRun>,
    /// SIPp's files, removed when dropped.
    _dir: sip_support::Scratch,
}

async fn refer(name: &str, steps: &[String]) -> Referred {
    let dir = scratch(name);
    let sipp_port = free_udp();
    let xml = scenario(name, steps);
    let mut peer = tokio::spawn({
        let dir = dir.to_path_buf();
        async move { sipp_on(&dir, Scenario::Xml(xml), sipp_port, None, &["-m", "1"]).await }
    });
    sip_support::until_listening(&mut peer, sipp_port).await;
    let Call { ua, c } = place(sipp_port).await;
    let Connected { leg, dialog, .. } = c;
    let requests = dialog.transfers();
    let run = tokio::spawn(dialog.run(leg.control.clone(), leg.task));
    let (tx, events) = baton::transfer::events::channel();
    requests
        .send(BlindTransfer {
            target: Destination::parse(TARGET).unwrap(),
            settings: Settings::default(),
            events: tx,
        })
        .await
        .unwrap();
    Referred {
        ua,
        run,
        caller: tokio::spawn(read_until_stop(leg.handle)),
        events,
        peer,
        _dir: dir,
    }
}

/// Reads the leg as a call would, and hangs up after its `Stop`.
async fn read_until_stop(mut leg: baton::leg::LegHandle) {
    while let Some(ev) = leg.recv().await {
        if matches!(ev, baton::leg::LegEvent::Stop(_)) {
            let _ = leg.send(baton::leg::LegCommand::Hangup);
            return;
        }
    }
}

/// Runs one transfer against SIPp playing `steps`; `hang_up` ends the call from baton's side
/// once the outcome is in. Returns the report, the stages, how the call ended, and SIPp's run.
async fn transfer(
    name: &str,
    steps: Vec<String>,
    hang_up: bool,
) -> Option<(Report, Vec<String>, HungUpBy, sip_support::SippRun)> {
    if !sip_support::require("sipp", "sip-tester") {
        return None;
    }
    let Referred {
        ua,
        run,
        caller,
        mut events,
        peer,
        _dir,
    } = refer(name, &steps).await;
    let (report, stages) = finished(&mut events).await;
    if hang_up {
        // The caller is still with baton: the call runs on until baton ends it.
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            !run.is_finished(),
            "the call ended after a refused transfer"
        );
        caller.abort();
    }
    let ended = tokio::time::timeout(Duration::from_secs(10), run)
        .await
        .expect("the call ends")
        .unwrap();
    let sipp = peer.await.unwrap();
    ua.shutdown();
    Some((report, stages, ended.by, sipp))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_accepted_refer_transfers_the_call_and_baton_leaves() {
    let mut steps = answer_then_refer();
    steps.push(refer_answer("202 Accepted"));
    steps.push(notify(1, "SIP/2.0 100 Trying", "active;expires=60"));
    steps.push(notify(2, "SIP/2.0 200 OK", "terminated;reason=noresource"));
    steps.push(bye_answered());
    let Some((report, stages, by, sipp)) = transfer("refer-accepted", steps, false).await else {
        return;
    };
    sipp.assert_ok();
    assert_eq!(report.outcome, Outcome::Transferred, "{report:?}");
    assert_eq!(report.status, Some(200));
    assert_eq!(report.target, Destination::parse(TARGET).unwrap());
    assert!(stages.contains(&"Following".to_owned()), "{stages:?}");
    assert_eq!(by, HungUpBy::Transferred);
    assert!(
        sipp.messages
            .contains("Refer-To: <sip:priya@127.0.0.1:5999>"),
        "{}",
        sipp.messages
    );
}

/// A peer flooding the REFER's subscription with NOTIFYs that are not sipfrags while nobody
/// reads the transfer's events: the dialog never waits on its reader, the first few bad NOTIFYs
/// arrive one by one and the rest as one count, and the report still arrives, last.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_bad_notifies_arrives_counted_ahead_of_the_report() {
    if !sip_support::require("sipp", "sip-tester") {
        return;
    }
    const BAD: u32 = 40;
    let mut steps = answer_then_refer();
    steps.push(refer_answer("202 Accepted"));
    for n in 1..=BAD {
        steps.push(notify(n, "this is no sipfrag", "active;expires=60"));
    }
    steps.push(notify(
        BAD + 1,
        "SIP/2.0 200 OK",
        "terminated;reason=noresource",
    ));
    steps.push(bye_answered());
    let Referred {
        ua,
        run,
        caller: _caller,
        mut events,
        peer,
        _dir,
    } = refer("refer-bad-notifies", &steps).await;
    // Nothing is read until the call is over: baton left it once the 200 came.
    let ended = tokio::time::timeout(Duration::from_secs(20), run)
        .await
        .expect("the call ends")
        .unwrap();
    assert_eq!(ended.by, HungUpBy::Transferred);
    let sipp = peer.await.unwrap();
    ua.shutdown();
    sipp.assert_ok();
    let mut got = Vec::new();
    while let Some(e) = tokio::time::timeout(Duration::from_secs(1), events.recv())
        .await
        .expect("the events end after the report")
    {
        got.push(e);
    }
    let alone = got
        .iter()
        .filter(|e| matches!(e, Event::BadNotify { .. }))
        .count() as u32;
    assert_eq!(
        alone,
        baton::transfer::events::BAD_NOTIFIES_PASSED,
        "{got:?}"
    );
    let reported: u32 = got.iter().map(Event::bad_notifies).sum();
    assert_eq!(reported, BAD, "{got:?}");
    for error in got.iter().filter_map(Event::bad_notify_error) {
        assert!(error.contains("not a SIP status line"), "{error}");
    }
    assert!(
        got.len() <= baton::transfer::events::QUEUE + 1,
        "{} events",
        got.len()
    );
    assert!(got.contains(&Event::Stage {
        stage: baton::transfer::Stage::Following
    }));
    let Some(Event::Finished(report)) = got.last() else {
        panic!("the report comes last: {got:?}");
    };
    assert_eq!(report.outcome, Outcome::Transferred, "{report:?}");
    assert_eq!(report.status, Some(200));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_refer_keeps_the_caller_with_baton() {
    let mut steps = answer_then_refer();
    steps.push(refer_answer("603 Declined"));
    steps.push(bye_answered());
    let Some((report, _, by, sipp)) = transfer("refer-603", steps, true).await else {
        return;
    };
    sipp.assert_ok();
    assert_eq!(
        report.outcome,
        Outcome::Rejected {
            status: 603,
            reason: "the REFER was refused".into()
        }
    );
    assert_eq!(report.status, Some(603));
    assert_eq!(by, HungUpBy::Baton);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_destination_in_the_notify_keeps_the_caller_with_baton() {
    let mut steps = answer_then_refer();
    steps.push(refer_answer("202 Accepted"));
    steps.push(notify(
        1,
        "SIP/2.0 486 Busy Here",
        "terminated;reason=noresource",
    ));
    steps.push(bye_answered());
    let Some((report, _, by, sipp)) = transfer("refer-notify-486", steps, true).await else {
        return;
    };
    sipp.assert_ok();
    assert_eq!(report.outcome, Outcome::Busy { status: 486 });
    assert_eq!(report.status, Some(486));
    assert_eq!(by, HungUpBy::Baton);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_caller_hanging_up_before_answering_the_refer_ends_the_transfer() {
    let mut steps = answer_then_refer();
    // The REFER is left unanswered; the callee hangs up instead.
    steps.push(
        r#"  <send retrans="500">
    <![CDATA[
      BYE [$rcontact] SIP/2.0
      Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
      From:[$rto]
      To:[$rfrom]
      [last_Call-ID:]
      CSeq: 1 BYE
      Max-Forwards: 70
      X-Refer: [$target]
      Content-Length: 0

    ]]>
  </send>
  <recv response="200"/>
"#
        .into(),
    );
    let Some((report, _, by, sipp)) = transfer("refer-caller-gone", steps, false).await else {
        return;
    };
    sipp.assert_ok();
    assert_eq!(
        report.outcome,
        Outcome::CallerHungUp {
            stage: baton::transfer::Stage::Referring
        },
        "{report:?}"
    );
    assert_eq!(by, HungUpBy::Peer);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_api_transfers_a_running_call_and_reports_it() {
    if !sip_support::require("sipp", "sip-tester") {
        return;
    }
    let dir = scratch("refer-admin");
    let sipp_port = free_udp();
    let trunk = format!(
        "[sip.trunks.callee]\nuri = \"sip:127.0.0.1:{sipp_port}\"\nfrom = \"sip:+15550100@baton.test\"\nring_timeout_s = 10\n"
    );
    let (d, _) = sip_support::daemon("audio-fixtures/scenarios/demo.toml", &trunk, "").await;
    let mut finished = d.app.sip.get().unwrap().subscribe_finished();
    let mut steps = answer_then_refer();
    steps.push(refer_answer("202 Accepted"));
    steps.push(notify(1, "SIP/2.0 180 Ringing", "active;expires=60"));
    steps.push(notify(2, "SIP/2.0 200 OK", "terminated;reason=noresource"));
    steps.push(bye_answered());
    let xml = scenario("refer-admin", &steps);
    let mut peer = tokio::spawn({
        let dir = dir.to_path_buf();
        async move { sipp_on(&dir, Scenario::Xml(xml), sipp_port, None, &["-m", "1"]).await }
    });
    sip_support::until_listening(&mut peer, sipp_port).await;
    let (status, placed) =
        sip_support::post(d.addr, "/calls", r#"{"to": "100", "trunk": "callee"}"#).await;
    assert_eq!(status, 201, "{placed}");
    let id = placed["call_id"].as_str().unwrap().to_owned();
    let feed = sip_support::follow(&d).await;

    // A destination that is not one is refused with the form that would be.
    let (status, bad) = sip_support::post(
        d.addr,
        &format!("/calls/{id}/transfer"),
        r#"{"to": "priya"}"#,
    )
    .await;
    assert_eq!(status, 400, "{bad}");
    // No such call.
    let (status, _) = sip_support::post(
        d.addr,
        "/calls/nope/transfer",
        &format!(r#"{{"to": "{TARGET}"}}"#),
    )
    .await;
    assert_eq!(status, 404);

    let (status, report) = sip_support::post(
        d.addr,
        &format!("/calls/{id}/transfer"),
        &format!(r#"{{"to": "{TARGET}"}}"#),
    )
    .await;
    assert_eq!(status, 200, "{report}");
    assert_eq!(report["outcome"]["kind"], "transferred", "{report}");
    assert_eq!(report["status"], 200, "{report}");
    assert_eq!(report["target"]["sip"], TARGET, "{report}");

    peer.await.unwrap().assert_ok();
    let record = sip_support::next_record(&mut finished).await;
    assert_eq!(record.call_id.as_deref(), Some(id.as_str()));
    assert_eq!(record.hung_up_by, Some(HungUpBy::Transferred), "{record:?}");
    let events = feed.await.unwrap();
    let steps: Vec<&serde_json::Value> =
        events.iter().filter(|e| e["type"] == "transfer").collect();
    assert!(
        steps
            .iter()
            .any(|e| e["event"] == "stage" && e["stage"] == "following"),
        "{steps:?}"
    );
    let last = steps.last().expect("transfer events on the call's feed");
    assert_eq!(last["event"], "finished", "{steps:?}");
    assert_eq!(last["outcome"]["kind"], "transferred", "{steps:?}");
    assert!(events.iter().any(|e| e["type"] == "call_end"), "{events:?}");
    let metrics = support::http(
        &d.addr,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    let counted = "baton_transfers_total{plan=\"blind_refer\",kind=\"transferred\"} 1";
    assert!(metrics.contains(counted), "{counted} in\n{metrics}");
}
