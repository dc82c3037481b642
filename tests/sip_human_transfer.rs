//! An agent hands a SIP caller to a person (a `kind = "human"` agent of
//! `config/agents/front_desk.toml`) by a blind transfer, end to end: SIPp (Debian package
//! `sip-tester`) is the caller, the test streams the caller's words over RTP, and the embedded
//! mock model (`tests/data/transfer/human_blind.toml`) announces Ravi while calling
//! `transfer_to_ravi`. baton sends the REFER only once the announcement has played to its end.
//! Accepted (202, NOTIFY 200): baton leaves the call with BYE, and the caller heard the whole
//! announcement first. Refused (603): the caller stays with the agent with no break in the
//! media, the model is told why and speaks again, and the outcome is typed on the call's feed.

use crate::sip_support;
use crate::support;

use std::path::Path;
use std::time::Duration;

use baton::leg::sip::call::HungUpBy;
use serde_json::Value;
use sip_support::{
    MediaPeer, Scenario, clip_blocks, daemon, in_dialog, invite, recv, scenario, scratch, sipp,
    voiced_blocks,
};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const SCENARIO: &str = "tests/data/transfer/human_blind.toml";
const SET: &str = "[agents]\nset = \"agents/front_desk.toml\"\n";

/// SIPp's side up to the REFER: call baton, then take the REFER and check its Refer-To.
fn call_until_refer(peer_port: u16) -> Vec<String> {
    vec![
        invite(&peer_port.to_string(), "0", "a=rtpmap:0 PCMU/8000\n"),
        recv(100, true),
        recv(200, false),
        in_dialog("ACK", 1, None),
        r#"  <recv request="REFER" timeout="20000">
    <action>
      <ereg regexp="sip:ravi@127\.0\.0\.1:5999" search_in="hdr" header="Refer-To:" check_it="true" assign_to="target"/>
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
      X-Refer-To: [$target]
      Content-Length: 0

    ]]>
  </send>
"#
    )
}

/// The final NOTIFY of the REFER's subscription (the referred call answered), then its 200.
fn notify_answered() -> String {
    r#"  <send retrans="500">
    <![CDATA[
      NOTIFY sip:[service]@[remote_ip]:[remote_port] SIP/2.0
      Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
      From: sipp <sip:sipp@[local_ip]:[local_port]>;tag=[pid]SIPpTag00[call_number]
      To: [service] <sip:[service]@[remote_ip]:[remote_port]>[peer_tag_param]
      Call-ID: [call_id]
      CSeq: 2 NOTIFY
      Contact: sip:sipp@[local_ip]:[local_port]
      Max-Forwards: 70
      Event: refer
      Subscription-State: terminated;reason=noresource
      Content-Type: message/sipfrag
      Content-Length: [len]

SIP/2.0 200 OK
    ]]>
  </send>
  <recv response="200"/>
"#
    .into()
}

/// A NOTIFY whose sipfrag says the referred call was not answered (480), then its 200.
fn notify_unanswered() -> String {
    notify_answered().replace(
        "SIP/2.0 200 OK\n    ]]>",
        "SIP/2.0 480 Temporarily Unavailable\n    ]]>",
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

struct Run {
    /// The daemon's `/metrics` once the call had ended.
    metrics: String,
    sipp: sip_support::SippRun,
    heard: sip_support::Heard,
    events: Vec<Value>,
    record: baton::server::sip::SipCallRecord,
}

/// One call from SIPp through `steps`, the caller's first question streamed over RTP.
async fn run(name: &str, steps: impl FnOnce(u16) -> Vec<String>, listen_s: u64) -> Option<Run> {
    run_with(name, steps, listen_s, "").await
}

/// [`run`] with `dest_extra` added to Ravi's destination (a set written to the scratch folder).
async fn run_with(
    name: &str,
    steps: impl FnOnce(u16) -> Vec<String>,
    listen_s: u64,
    dest_extra: &str,
) -> Option<Run> {
    if !sip_support::require("sipp", "sip-tester") {
        return None;
    }
    let dir = scratch(name);
    let set = if dest_extra.is_empty() {
        SET.to_owned()
    } else {
        let text = std::fs::read_to_string(Path::new(ROOT).join("config/agents/front_desk.toml"))
            .unwrap()
            .replace(
                "ring_timeout_s = 25",
                &format!("ring_timeout_s = 25\n{dest_extra}"),
            );
        let path = dir.join("front_desk.toml");
        std::fs::write(&path, text).unwrap();
        format!("[agents]\nset = \"{}\"\n", path.display())
    };
    let (d, addr) = daemon(SCENARIO, "", &set).await;
    let mut finished = d.app.sip.get().unwrap().subscribe_finished();
    let peer = MediaPeer::bind().await;
    let xml = scenario(name, &steps(peer.port()));
    let pcm = sip_support::caller_turn_8k();
    let events = async { sip_support::follow(&d).await.await.unwrap() };
    let (sipp, heard, events) = tokio::join!(
        sipp(&dir, Scenario::Xml(xml), addr, &["-m", "1"]),
        peer.converse(&pcm, 0, Default::default(), Duration::from_secs(listen_s)),
        events,
    );
    let record = sip_support::next_record(&mut finished).await;
    let metrics = support::http(
        &d.addr,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    Some(Run {
        metrics,
        sipp,
        heard,
        events,
        record,
    })
}

fn of_type<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == kind).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_hands_the_caller_to_a_person_after_its_announcement() {
    let steps = |port: u16| {
        let mut s = call_until_refer(port);
        s.push(refer_answer("202 Accepted"));
        s.push(notify_answered());
        s.push(bye_answered());
        s
    };
    let Some(r) = run("human-blind-accepted", steps, 12).await else {
        return;
    };
    r.sipp.assert_ok();
    let calls = of_type(&r.events, "tool_called");
    assert!(
        calls.iter().any(|e| e["tool_name"] == "transfer_to_ravi"),
        "the model called the person's transfer tool: {calls:?}"
    );
    let asked = of_type(&r.events, "transfer_requested");
    assert_eq!(asked.len(), 1, "{:#?}", r.events);
    assert_eq!(asked[0]["to"], "ravi");
    assert_eq!(asked[0]["from"], "advisor");
    assert_eq!(asked[0]["plan"], "blind");
    assert_eq!(asked[0]["trigger"], "transfer_tool");
    assert_eq!(asked[0]["destination"], "sip:ravi@127.0.0.1:5999");
    let steps = of_type(&r.events, "transfer");
    let last = steps.last().expect("transfer steps on the call's feed");
    assert_eq!(last["event"], "finished", "{steps:#?}");
    assert_eq!(last["to"], "ravi");
    assert_eq!(last["outcome"]["kind"], "transferred", "{steps:#?}");
    assert_eq!(last["status"], 200, "{steps:#?}");
    eprintln!(
        "blind transfer over loopback: total_ms {} (REFER to the final NOTIFY), setup_ms {}",
        last["total_ms"], last["setup_ms"]
    );
    assert_eq!(
        r.record.hung_up_by,
        Some(HungUpBy::Transferred),
        "{:?}",
        r.record
    );
    // The BYE follows the REFER at once: had the REFER gone with the tool call (as the
    // announcement began), the caller would have heard a fraction of it.
    let announcement = clip_blocks("asha_02.wav");
    let heard = voiced_blocks(&r.heard.pcm);
    eprintln!("announcement: {announcement} voiced blocks; the caller heard {heard}");
    assert!(
        heard + 2 >= announcement,
        "the caller heard {heard} voiced 20 ms blocks of the {announcement}-block announcement before the transfer"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_transfer_leaves_the_caller_with_the_agent_who_says_why() {
    let steps = |port: u16| {
        let mut s = call_until_refer(port);
        s.push(refer_answer("603 Decline"));
        // The agent tells the caller; then the caller hangs up.
        s.push("  <pause milliseconds=\"7000\"/>\n".into());
        s.push(in_dialog("BYE", 3, None));
        s.push(recv(200, false));
        s
    };
    let Some(r) = run("human-blind-refused", steps, 16).await else {
        return;
    };
    r.sipp.assert_ok();
    let steps = of_type(&r.events, "transfer");
    let last = steps.last().expect("transfer steps on the call's feed");
    assert_eq!(last["event"], "finished", "{steps:#?}");
    assert_eq!(last["outcome"]["kind"], "rejected", "{steps:#?}");
    assert_eq!(last["status"], 603, "{steps:#?}");
    assert_eq!(r.record.hung_up_by, Some(HungUpBy::Peer), "{:?}", r.record);
    let counted = "baton_transfers_total{plan=\"blind_refer\",kind=\"rejected\"} 1";
    assert!(r.metrics.contains(counted), "{counted} in\n{}", r.metrics);
    // The model was told and spoke again, after the outcome.
    let done = r
        .events
        .iter()
        .position(|e| e["type"] == "transfer" && e["event"] == "finished")
        .unwrap();
    let said_after: Vec<&Value> = r.events[done..]
        .iter()
        .filter(|e| e["type"] == "transcript" && e["role"] == "agent")
        .collect();
    assert!(
        said_after
            .iter()
            .any(|e| e["text"] == "Hello, I'm Asha. Start with an emergency fund."),
        "the agent carried on after the refusal: {:#?}",
        r.events
    );
    // The caller heard the announcement and then the agent again: nothing was cut.
    let both = clip_blocks("asha_02.wav") + clip_blocks("asha_01.wav");
    let heard = voiced_blocks(&r.heard.pcm);
    eprintln!("announcement + reply: {both} voiced blocks; the caller heard {heard}");
    assert!(heard + 4 >= both, "heard {heard} of {both} voiced blocks");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_hands_the_caller_to_a_person_through_the_admin_api() {
    // The operator's activation of a human agent is the same transfer (no announcement needed).
    let steps = |port: u16| {
        let mut s = call_until_refer(port);
        s.push(refer_answer("202 Accepted"));
        s.push(notify_answered());
        s.push(bye_answered());
        s
    };
    if !sip_support::require("sipp", "sip-tester") {
        return;
    }
    let dir = scratch("human-blind-operator");
    // The model's socket opens late (a distant service): the call is listed as soon as SIPp's
    // call is answered, and the operator's command lands while its model session still opens.
    // The command waits for the call to run; it is not lost.
    let slow = dir.join("human_blind_slow_start.toml");
    let text = std::fs::read_to_string(Path::new(ROOT).join(SCENARIO))
        .unwrap()
        .replace("../../../", &format!("{ROOT}/"))
        .replace("[model]\n", "[model]\nconnect_ms = 400\n");
    std::fs::write(&slow, text).unwrap();
    let slow = slow
        .strip_prefix(ROOT)
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    let (d, addr) = daemon(&slow, "", SET).await;
    let mut finished = d.app.sip.get().unwrap().subscribe_finished();
    let peer = MediaPeer::bind().await;
    let xml = scenario("human-blind-operator", &steps(peer.port()));
    let operator = async {
        let feed = sip_support::follow(&d).await;
        let call = d.app.calls.list().first().unwrap().clone();
        let (id, starting) = (call.id.clone(), call.steering().is_none());
        eprintln!("the operator's command for call {id}: the call still starting: {starting}");
        let (status, body) = sip_support::post(
            d.addr,
            &format!("/admin/calls/{id}/agents/ravi/activate"),
            "",
        )
        .await;
        (status, body, feed.await.unwrap())
    };
    // The caller says nothing: only the operator moves the call.
    let (run, _, (status, body, events)) = tokio::join!(
        sipp(&dir, Scenario::Xml(xml), addr, &["-m", "1"]),
        peer.converse(&[], 0, Default::default(), Duration::from_secs(5)),
        operator,
    );
    // A refused command leaves SIPp waiting for a REFER that never comes: say why first.
    assert!(status < 300, "{status} {body}");
    run.assert_ok();
    let asked = of_type(&events, "transfer_requested");
    assert_eq!(asked.len(), 1, "{events:#?}");
    assert_eq!(asked[0]["trigger"], "manual");
    let last = *of_type(&events, "transfer").last().unwrap();
    assert_eq!(last["outcome"]["kind"], "transferred", "{events:#?}");
    let record = sip_support::next_record(&mut finished).await;
    assert_eq!(record.hung_up_by, Some(HungUpBy::Transferred));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leg_that_cannot_hand_the_caller_on_refuses_with_a_typed_outcome() {
    // The same call on the fixture leg (`baton demo`): no REFER, no redirect. The transfer ends
    // `unavailable` without anything attempted, and the agent is told and carries on.
    let dir = scratch("human-blind-fixture");
    let args = baton::demo::DemoArgs {
        scenario: Some(format!("{ROOT}/{SCENARIO}")),
        out: dir.join("demo"),
        api_key_env: "BATON_TEST_NO_KEY".into(),
        ..Default::default()
    };
    let out = tokio::task::spawn_blocking(move || baton::demo::run(&args))
        .await
        .unwrap()
        .unwrap();
    let events: Vec<Value> = out
        .report
        .events
        .iter()
        .map(|e| serde_json::to_value(e).unwrap())
        .collect();
    let asked = of_type(&events, "transfer_requested");
    assert_eq!(asked.len(), 1, "{events:#?}");
    let steps = of_type(&events, "transfer");
    assert_eq!(steps.len(), 1, "{steps:#?}");
    assert_eq!(steps[0]["event"], "finished");
    assert_eq!(steps[0]["outcome"]["kind"], "unavailable", "{steps:#?}");
    assert!(
        steps[0]["outcome"]["reason"]
            .as_str()
            .unwrap()
            .contains("need a SIP call (REFER)"),
        "{steps:#?}"
    );
    let done = events.iter().position(|e| e["type"] == "transfer").unwrap();
    assert!(
        events[done..].iter().any(|e| e["type"] == "transcript"
            && e["role"] == "agent"
            && e["text"] == "Hello, I'm Asha. Start with an emergency fund."),
        "the agent carried on: {events:#?}"
    );
    assert_eq!(out.report.end_reason, "caller hung up");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_blind_transfer_ends_the_call_after_the_agent_says_why_when_so_configured() {
    let steps = |port: u16| {
        let mut s = call_until_refer(port);
        s.push(refer_answer("202 Accepted"));
        s.push(notify_unanswered());
        // on_no_answer = "hang_up": the agent says why, then baton hangs up.
        s.push(bye_answered());
        s
    };
    // The call is over 10 s in (the question, the announcement, the REFER, the reply); the
    // caller listens 2 s longer.
    let Some(r) = run_with(
        "human-blind-no-answer",
        steps,
        12,
        "on_no_answer = \"hang_up\"",
    )
    .await
    else {
        return;
    };
    r.sipp.assert_ok();
    let steps = of_type(&r.events, "transfer");
    let last = steps.last().expect("transfer steps on the call's feed");
    assert_eq!(last["outcome"]["kind"], "no_answer", "{steps:#?}");
    let both = clip_blocks("asha_02.wav") + clip_blocks("asha_01.wav");
    let heard = voiced_blocks(&r.heard.pcm);
    assert!(
        heard + 4 >= both,
        "the agent said why before the call ended: {heard} of {both}"
    );
    // baton ended it, as configured, once the reply had played: not the RTP timeout after the
    // caller went quiet, nor the 30 s guard.
    assert_eq!(r.record.hung_up_by, Some(HungUpBy::Baton), "{:?}", r.record);
    assert!(
        r.record
            .end_reason
            .as_deref()
            .is_some_and(|e| e.contains("did not answer")),
        "{:?}",
        r.record
    );
    let end = of_type(&r.events, "call_end");
    let at = |e: &Value| e["at_ms"].as_u64().unwrap_or(u64::MAX);
    let (outcome_at, end_at) = (at(last), end.first().map_or(u64::MAX, |e| at(e)));
    let reply_ms = clip_blocks("asha_01.wav") as u64 * 20;
    assert!(
        end_at <= outcome_at + reply_ms + 2000,
        "the call ended {} ms after the outcome; the reply is {reply_ms} ms",
        end_at.saturating_sub(outcome_at)
    );
}
