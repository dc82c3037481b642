//! `baton serve` answering SIP from SIPp (Debian package `sip-tester`), a real SIP peer, on
//! loopback: a plain `sipp -sn uac` gets an agent (UDP and TCP, and with the shipped config);
//! SIPp streams the caller's turn over RTP in PCMU and PCMA and the agent's reply is in the
//! call's recording; a trunk that loses 2 % of its packets and reorders others is heard,
//! counted and concealed, and the agent's audio reaches it; 486 when baton is full, 503 while
//! it drains, 488 when no codec matches, CANCEL before the answer ends with 487, re-INVITE
//! holds and unholds and moves the call onto Opus and back, OPTIONS is answered; calls are routed by the called user to an agent
//! set (`[sip.routes]`); an answer never acknowledged ends the call as a failed leg.

use crate::sip_support;
use crate::support;

use std::time::Duration;

use baton::leg::sip::config::Transport;
use baton::server::sip::SipCallRecord;
use sip_support::{
    Impairment, MediaPeer, Scenario, caller_turn_8k, daemon, follow, g711, in_dialog, invite,
    next_record, recv, scenario, scratch, sdp_body, sipp,
};
use support::voiced_segments;

fn records(d: &support::Daemon) -> tokio::sync::broadcast::Receiver<SipCallRecord> {
    d.app.sip.get().expect("SIP is on").subscribe_finished()
}

const ACK_FOR_ERROR: &str = r#"  <send>
    <![CDATA[
      ACK sip:[service]@[remote_ip]:[remote_port] SIP/2.0
      [last_Via:]
      [last_From:]
      [last_To:]
      [last_Call-ID:]
      CSeq: 1 ACK
      Contact: sip:sipp@[local_ip]:[local_port]
      Max-Forwards: 70
      Content-Length: 0

    ]]>
  </send>
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_sipp_caller_gets_an_agent_over_udp_and_tcp() {
    if !sip_support::require("sipp", "sip-tester") {
        return;
    }
    let dir = scratch("plain");
    let (d, udp) = daemon("audio-fixtures/scenarios/demo.toml", "", "").await;
    let tcp = d.app.sip.get().unwrap().addr(Transport::Tcp).unwrap();
    let mut rx = records(&d);
    let (a, b) = tokio::join!(
        sipp(
            &dir,
            Scenario::Builtin("uac"),
            udp,
            &["-m", "1", "-d", "2000"]
        ),
        sipp(
            &dir,
            Scenario::Builtin("uac"),
            tcp,
            &["-m", "1", "-d", "2000", "-t", "t1"]
        ),
    );
    a.assert_ok();
    b.assert_ok();
    for _ in 0..2 {
        let r = next_record(&mut rx).await;
        assert!(r.call_id.is_some(), "{r:?}");
        assert_eq!(r.end_reason.as_deref(), Some("caller hung up"), "{r:?}");
        assert_eq!(r.hung_up_by, Some(baton::leg::sip::call::HungUpBy::Peer));
        let m = r.media.as_ref().unwrap();
        // baton sends from the answer on (2 s of 20 ms packets), to the port in SIPp's SDP.
        assert!(m.packets_out >= 80, "{m:?}");
        assert_eq!(m.codec, "PCMU");
    }
    // The 200 carried baton's SDP answer.
    assert!(a.messages.contains("m=audio "), "{}", a.messages);
    assert!(b.messages.contains("SIP/2.0/TCP"), "{}", b.messages);
    assert_eq!(d.calls_ended().await, 0);
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_shipped_config_answers_a_plain_sipp_caller_with_an_agent() {
    if !sip_support::require("sipp", "sip-tester") {
        return;
    }
    let dir = scratch("shipped");
    // config/baton.toml as shipped, only its ports made ephemeral (5060 and 8080 may be taken
    // on a shared machine): the embedded mock answers SIP over UDP.
    let shipped = std::fs::read_to_string(format!("{}/config/baton.toml", support::ROOT)).unwrap();
    assert!(shipped.contains("listen = [\"udp:127.0.0.1:5060\"]"));
    let config = shipped
        .replace(
            "listen = [\"udp:127.0.0.1:5060\"]",
            "listen = [\"udp:127.0.0.1:0\"]",
        )
        .replace("listen = \"127.0.0.1:8080\"", "listen = \"127.0.0.1:0\"");
    let d = support::Daemon::start(&config).await;
    let addr = d
        .bound("the shipped config's SIP listener", |app| {
            app.sip.get().cloned()
        })
        .await
        .addr(Transport::Udp)
        .expect("the shipped config answers SIP over UDP");
    let mut rx = records(&d);
    let run = sipp(
        &dir,
        Scenario::Builtin("uac"),
        addr,
        &["-m", "1", "-d", "1500"],
    )
    .await;
    run.assert_ok();
    let r = next_record(&mut rx).await;
    assert!(r.call_id.is_some(), "an agent took the call: {r:?}");
    assert_eq!(r.end_reason.as_deref(), Some("caller hung up"), "{r:?}");
    assert!(r.media.as_ref().unwrap().packets_out >= 60, "{r:?}");
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_are_routed_by_the_called_user_to_an_agent_set() {
    if !sip_support::require("sipp", "sip-tester") {
        return;
    }
    let dir = scratch("routes");
    let routes = "[sip.routes]\n\"ivr\" = \"../tests/data/keypad/agents.toml\"\n";
    let (d, addr) = daemon("tests/data/keypad/scenario.toml", routes, "").await;
    let mut rx = records(&d);
    let mut agents_of = Vec::new();
    for user in ["ivr", "100"] {
        let args = ["-m", "1", "-d", "1500", "-s", user];
        let (run, events) =
            tokio::join!(sipp(&dir, Scenario::Builtin("uac"), addr, &args), async {
                follow(&d).await.await.unwrap()
            },);
        run.assert_ok();
        let r = next_record(&mut rx).await;
        assert_eq!(r.parties.to, user, "{r:?}");
        let agents: Vec<String> = events
            .iter()
            .filter(|e| e["type"] == "agent_start")
            .filter_map(|e| e["agent_id"].as_str().map(str::to_owned))
            .collect();
        agents_of.push((user, agents));
        assert_eq!(d.calls_ended().await, 0);
    }
    // "ivr" ran the keypad agent set; any other called user the daemon's default (none here).
    assert_eq!(
        agents_of,
        [("ivr", vec!["ivr".to_owned()]), ("100", vec![])],
        "{agents_of:?}"
    );
    d.stop().await;
}

/// SIPp's scenario: INVITE with one codec, stream `file` over RTP after the ACK, hang up after
/// `hold_ms`.
fn streaming_caller(pt: u8, codec: &str, file: &str, hold_ms: u64) -> String {
    scenario(
        "caller over RTP",
        &[
            invite(
                "[media_port]",
                &pt.to_string(),
                &format!("a=rtpmap:{pt} {codec}/8000\n"),
            ),
            recv(100, true),
            recv(180, true),
            recv(200, false),
            in_dialog("ACK", 1, None),
            format!("  <nop><action><exec rtp_stream=\"{file},1,{pt}\"/></action></nop>\n"),
            format!("  <pause milliseconds=\"{hold_ms}\"/>\n"),
            in_dialog("BYE", 2, None),
            recv(200, false),
        ],
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sipp_speaks_over_rtp_in_pcmu_and_pcma_and_the_agent_answers() {
    if !sip_support::require("sipp", "sip-tester") {
        return;
    }
    let dir = scratch("stream");
    let pcm = caller_turn_8k();
    std::fs::write(dir.join("caller.ulaw"), g711(&pcm, 0)).unwrap();
    std::fs::write(dir.join("caller.alaw"), g711(&pcm, 8)).unwrap();
    let store = format!(
        "[store]\nurl = \"sqlite://{}/baton.db\"\nrecordings = \"{}/rec\"\n",
        dir.display(),
        dir.display()
    );
    let (d, addr) = daemon("audio-fixtures/scenarios/demo.toml", "", &store).await;
    let mut rx = records(&d);
    let (a, b) = tokio::join!(
        sipp(
            &dir,
            Scenario::Xml(streaming_caller(0, "PCMU", "caller.ulaw", 8000)),
            addr,
            &["-m", "1"]
        ),
        sipp(
            &dir,
            Scenario::Xml(streaming_caller(8, "PCMA", "caller.alaw", 8000)),
            addr,
            &["-m", "1"]
        ),
    );
    a.assert_ok();
    b.assert_ok();
    let mut codecs = Vec::new();
    for _ in 0..2 {
        let r = next_record(&mut rx).await;
        let m = r.media.clone().unwrap();
        eprintln!("SIPp over RTP: {m:?}");
        codecs.push(m.codec.clone());
        // 3.14 s of caller audio in 20 ms packets, none lost on loopback.
        assert!(m.packets_in >= 150, "{m:?}");
        assert_eq!(m.lost, 0, "{m:?}");
        // A late packet needs SIPp or baton held up past the buffer's 40 ms on a loaded
        // machine (the ordering itself is the jitter buffer's unit tests').
        assert!(m.buffer.late <= 2, "{m:?}");
        assert!(m.latched, "symmetric RTP latched onto SIPp's port: {m:?}");
        assert!(r.turns >= 1, "the agent answered: {r:?}");
        // The recording: the caller's turn on the left, the agent's reply on the right.
        let id = r.call_id.clone().unwrap();
        let path = dir.join("rec").join(format!("{id}.wav"));
        let mut wav = None;
        for _ in 0..100 {
            if let Ok(w) = hound::WavReader::open(&path) {
                wav = Some(w);
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut wav = wav.unwrap_or_else(|| panic!("no recording at {}", path.display()));
        let spec = wav.spec();
        let samples: Vec<i16> = wav.samples::<i16>().map(Result::unwrap).collect();
        let left: Vec<i16> = samples.iter().step_by(2).copied().collect();
        let right: Vec<i16> = samples.iter().skip(1).step_by(2).copied().collect();
        let caller = voiced_segments(&left, spec.sample_rate);
        let agent = voiced_segments(&right, spec.sample_rate);
        assert!(
            caller.iter().any(|(s, e)| *s < 1.5 && *e > 2.5),
            "the caller's turn was not heard over RTP ({}): {caller:?}",
            m.codec
        );
        // advisor_01.wav (2.6 s) after the caller's turn ends at 3.1 s.
        assert!(
            agent.iter().any(|(s, e)| *s > 3.0 && e - s > 1.5),
            "no reply in the recording ({}): {agent:?}",
            m.codec
        );
    }
    codecs.sort();
    assert_eq!(codecs, ["PCMA", "PCMU"]);
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lossy_reordering_trunk_is_heard_counted_and_answered() {
    if !sip_support::require("sipp", "sip-tester") {
        return;
    }
    let dir = scratch("lossy");
    let (d, addr) = daemon("audio-fixtures/scenarios/demo.toml", "", "").await;
    let mut rx = records(&d);
    // SIPp signals; the trunk's media is the test's own peer, whose port the SDP names.
    let peer = MediaPeer::bind().await;
    let xml = scenario(
        "signalling only",
        &[
            invite(&peer.port().to_string(), "0", "a=rtpmap:0 PCMU/8000\n"),
            recv(100, true),
            recv(200, false),
            in_dialog("ACK", 1, None),
            "  <pause milliseconds=\"9000\"/>\n".into(),
            in_dialog("BYE", 2, None),
            recv(200, false),
        ],
    );
    let mut pcm = caller_turn_8k();
    pcm.extend(std::iter::repeat_n(0, 8000 * 5));
    let imp = Impairment {
        loss: 0.02,
        reorder_every: 12,
    };
    let (run, heard) = tokio::join!(
        sipp(&dir, Scenario::Xml(xml), addr, &["-m", "1"]),
        peer.converse(&pcm, 0, imp, Duration::from_millis(8500)),
    );
    run.assert_ok();
    let r = next_record(&mut rx).await;
    let m = r.media.clone().unwrap();
    eprintln!("lossy trunk: {m:?}");
    // ~410 packets sent, 2 % dropped on the way, every 12th swapped with the next.
    assert!((3..=20).contains(&m.lost), "{m:?}");
    assert!(m.buffer.reordered >= 20, "{m:?}");
    // A one-packet swap is within the buffer (proved on a virtual clock by the jitter buffer's
    // own test); here the peer and baton share a loaded machine's scheduler, and a send held up
    // by more than the buffer's slack makes a packet late. A buffer that did not put swaps
    // right would drop ~30.
    assert!(
        m.buffer.late <= 2,
        "a one-packet swap is within the buffer: {m:?}"
    );
    assert!(m.concealed_ms >= 60.0, "lost packets are concealed: {m:?}");
    assert!(
        r.turns >= 1,
        "the agent heard the caller through the loss: {r:?}"
    );
    // What the trunk heard from baton: the agent's reply after the caller's turn.
    let agent = voiced_segments(&heard.pcm, 8000);
    assert!(
        agent.iter().any(|(s, e)| *s > 3.0 && e - s > 1.5),
        "no reply reached the trunk: {agent:?}"
    );
    assert_eq!(heard.ssrcs.len(), 1, "one stream from baton");
    // baton paces one packet per 20 ms.
    let median = heard.median_interval_us();
    assert!(
        (15_000..=25_000).contains(&median),
        "median interval {median} µs"
    );
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_baton_answers_486_and_an_unusable_offer_488() {
    if !sip_support::require("sipp", "sip-tester") {
        return;
    }
    let dir = scratch("refusals");
    let (d, addr) = sip_support::daemon_with("audio-fixtures/scenarios/demo.toml", "", "", 1).await;
    let mut rx = records(&d);
    // One call holds the only slot.
    let first = {
        let dir = dir.to_path_buf();
        tokio::spawn(async move {
            sipp(
                &dir,
                Scenario::Builtin("uac"),
                addr,
                &["-m", "1", "-d", "5000"],
            )
            .await
        })
    };
    for _ in 0..200 {
        if d.active_calls().await == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(d.active_calls().await, 1);
    let busy = scenario(
        "expects 486",
        &[
            invite("[media_port]", "0", "a=rtpmap:0 PCMU/8000\n"),
            recv(100, true),
            recv(486, false),
            ACK_FOR_ERROR.into(),
        ],
    );
    let run = sipp(&dir, Scenario::Xml(busy), addr, &["-m", "1"]).await;
    run.assert_ok();
    assert!(run.messages.contains("Retry-After: 5"), "{}", run.messages);
    assert!(
        run.messages.contains("call limit"),
        "the reason is said: {}",
        run.messages
    );
    let r = next_record(&mut rx).await;
    assert!(r.refused.as_deref().unwrap_or("").contains("486"), "{r:?}");
    first.await.unwrap().assert_ok();
    let _ = next_record(&mut rx).await;

    // G.729 only: nothing baton speaks.
    let g729 = scenario(
        "expects 488",
        &[
            invite("[media_port]", "18", "a=rtpmap:18 G729/8000\n"),
            recv(100, true),
            recv(488, false),
            ACK_FOR_ERROR.into(),
        ],
    );
    let run = sipp(&dir, Scenario::Xml(g729), addr, &["-m", "1"]).await;
    run.assert_ok();
    assert!(
        run.messages
            .contains("no codec in common: the peer offers G729/8000"),
        "{}",
        run.messages
    );
    let r = next_record(&mut rx).await;
    assert!(r.refused.as_deref().unwrap_or("").contains("488"), "{r:?}");
    assert_eq!(d.calls_ended().await, 0);
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_baton_answers_503_and_hangs_up_at_the_drain_timeout() {
    if !sip_support::require("sipp", "sip-tester") {
        return;
    }
    let dir = scratch("draining");
    let (d, addr) = daemon("audio-fixtures/scenarios/demo.toml", "", "").await;
    let mut rx = records(&d);
    let first = {
        let dir = dir.to_path_buf();
        tokio::spawn(async move {
            sipp(
                &dir,
                Scenario::Builtin("uac"),
                addr,
                &["-m", "1", "-d", "5000"],
            )
            .await
        })
    };
    for _ in 0..200 {
        if d.active_calls().await == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(d.active_calls().await, 1);
    let drain = support::http(
        &d.addr,
        "POST /admin/drain HTTP/1.1\r\nHost: baton\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
    )
    .await;
    assert!(drain.starts_with("HTTP/1.1 202"), "{drain}");
    let unavailable = scenario(
        "expects 503",
        &[
            invite("[media_port]", "0", "a=rtpmap:0 PCMU/8000\n"),
            recv(100, true),
            recv(503, false),
            ACK_FOR_ERROR.into(),
        ],
    );
    let run = sipp(&dir, Scenario::Xml(unavailable), addr, &["-m", "1"]).await;
    run.assert_ok();
    assert!(run.messages.contains("Retry-After: 5"), "{}", run.messages);
    // The call in progress runs on until the drain timeout (1 s in these tests), then baton
    // hangs it up with a BYE of its own.
    let first = first.await.unwrap();
    assert!(first.messages.contains("BYE sip:"), "{}", first.messages);
    let mut ran = None;
    for _ in 0..2 {
        let r = next_record(&mut rx).await;
        if r.call_id.is_some() {
            ran = Some(r);
        }
    }
    let r = ran.expect("the first call ran");
    assert_eq!(
        r.hung_up_by,
        Some(baton::leg::sip::call::HungUpBy::Baton),
        "{r:?}"
    );
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_before_the_answer_ends_the_invite_with_487() {
    if !sip_support::require("sipp", "sip-tester") {
        return;
    }
    let dir = scratch("cancel");
    let (d, addr) = daemon("audio-fixtures/scenarios/demo.toml", "ring_ms = 3000", "").await;
    let mut rx = records(&d);
    let cancel = r#"  <send>
    <![CDATA[
      CANCEL sip:[service]@[remote_ip]:[remote_port] SIP/2.0
      [last_Via:]
      From: sipp <sip:sipp@[local_ip]:[local_port]>;tag=[pid]SIPpTag00[call_number]
      To: [service] <sip:[service]@[remote_ip]:[remote_port]>
      Call-ID: [call_id]
      CSeq: 1 CANCEL
      Max-Forwards: 70
      Content-Length: 0

    ]]>
  </send>
"#;
    let xml = scenario(
        "cancels while ringing",
        &[
            invite("[media_port]", "0", "a=rtpmap:0 PCMU/8000\n"),
            recv(100, true),
            recv(180, false),
            "  <pause milliseconds=\"300\"/>\n".into(),
            cancel.into(),
            recv(200, false),
            recv(487, false),
            ACK_FOR_ERROR.into(),
        ],
    );
    let run = sipp(&dir, Scenario::Xml(xml), addr, &["-m", "1"]).await;
    run.assert_ok();
    let r = next_record(&mut rx).await;
    assert_eq!(r.call_id, None, "no call ran: {r:?}");
    assert!(
        r.refused.as_deref().unwrap_or("").contains("cancelled"),
        "{r:?}"
    );
    assert_eq!(d.calls_ended().await, 0);
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_re_invite_holds_and_unholds_the_call_changes_its_codec_and_options_are_answered() {
    if !sip_support::require("sipp", "sip-tester") {
        return;
    }
    let dir = scratch("hold");
    let (d, addr) = daemon("audio-fixtures/scenarios/demo.toml", "", "").await;
    let mut rx = records(&d);
    let check = |re: &str| {
        format!(
            "  <recv response=\"200\"><action><ereg regexp=\"{re}\" search_in=\"body\" check_it=\"true\" assign_to=\"seen\"/></action></recv>\n"
        )
    };
    let xml = scenario(
        "hold and unhold",
        &[
            "  <Global variables=\"seen\"/>\n".into(),
            invite("[media_port]", "0", "a=rtpmap:0 PCMU/8000\n"),
            recv(100, true),
            check("a=sendrecv"),
            in_dialog("ACK", 1, None),
            "  <pause milliseconds=\"800\"/>\n".into(),
            in_dialog("INVITE", 2, Some(&sdp_body("[media_port]", "sendonly"))),
            recv(100, true),
            check("a=recvonly"),
            in_dialog("ACK", 2, None),
            "  <pause milliseconds=\"800\"/>\n".into(),
            in_dialog("INVITE", 3, Some(&sdp_body("[media_port]", "sendrecv"))),
            recv(100, true),
            check("a=sendrecv"),
            in_dialog("ACK", 3, None),
            "  <pause milliseconds=\"500\"/>\n".into(),
            in_dialog("BYE", 4, None),
            recv(200, false),
        ],
    );
    let run = sipp(&dir, Scenario::Xml(xml), addr, &["-m", "1"]).await;
    run.assert_ok();
    let r = next_record(&mut rx).await;
    assert_eq!((r.re_invites, r.holds), (2, 1), "{r:?}");
    // About 1.3 s of the 2.1 s call was not on hold: no packets while held.
    let m = r.media.unwrap();
    assert!(m.packets_out < 95, "{m:?}");
    assert!(m.packets_out > 40, "{m:?}");

    // A re-INVITE offering only Opus (with an 8 kHz event) moves the call onto Opus; the next,
    // offering PCMU again, moves it back. baton's answers say so, and its media follows.
    let opus = sdp_body("[media_port]", "sendrecv")
        .replace("2353687638", "2353687639")
        .replace(
            "RTP/AVP 0\na=rtpmap:0 PCMU/8000\n",
            "RTP/AVP 96 101\na=rtpmap:96 opus/48000/2\na=rtpmap:101 telephone-event/8000\n",
        );
    let pcmu = sdp_body("[media_port]", "sendrecv").replace("2353687638", "2353687640");
    let xml = scenario(
        "codec change",
        &[
            "  <Global variables=\"seen\"/>\n".into(),
            invite("[media_port]", "0", "a=rtpmap:0 PCMU/8000\n"),
            recv(100, true),
            check("m=audio [0-9]+ RTP/AVP 0[^0-9]"),
            in_dialog("ACK", 1, None),
            "  <pause milliseconds=\"600\"/>\n".into(),
            in_dialog("INVITE", 2, Some(&opus)),
            recv(100, true),
            check("m=audio [0-9]+ RTP/AVP 96 101[^0-9]"),
            in_dialog("ACK", 2, None),
            "  <pause milliseconds=\"600\"/>\n".into(),
            in_dialog("INVITE", 3, Some(&pcmu)),
            recv(100, true),
            check("m=audio [0-9]+ RTP/AVP 0[^0-9]"),
            in_dialog("ACK", 3, None),
            "  <pause milliseconds=\"400\"/>\n".into(),
            in_dialog("BYE", 4, None),
            recv(200, false),
        ],
    );
    let run = sipp(&dir, Scenario::Xml(xml), addr, &["-m", "1"]).await;
    run.assert_ok();
    let r = next_record(&mut rx).await;
    let m = r.media.unwrap();
    assert_eq!((r.re_invites, m.codec.as_str()), (2, "PCMU"), "{m:?}");
    assert!(
        m.packets_out > 60,
        "baton kept sending through both changes: {m:?}"
    );
    assert!(
        run.messages.contains("a=rtpmap:96 opus/48000/2")
            && run.messages.contains("a=rtpmap:101 telephone-event/8000"),
        "{}",
        run.messages
    );

    let options = scenario(
        "options",
        &[
            r#"  <send retrans="500">
    <![CDATA[
      OPTIONS sip:[service]@[remote_ip]:[remote_port] SIP/2.0
      Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
      From: sipp <sip:sipp@[local_ip]:[local_port]>;tag=[pid]SIPpTag00[call_number]
      To: <sip:[service]@[remote_ip]:[remote_port]>
      Call-ID: [call_id]
      CSeq: 1 OPTIONS
      Max-Forwards: 70
      Content-Length: 0

    ]]>
  </send>
"#
            .into(),
            recv(200, false),
        ],
    );
    let run = sipp(&dir, Scenario::Xml(options), addr, &["-m", "1"]).await;
    run.assert_ok();
    assert!(run.messages.contains("Allow: INVITE"), "{}", run.messages);
    d.stop().await;
}

/// A caller that never acknowledges baton's 200 (64·T1 = 32 s, RFC 3261 §13.3.1.4): the call is dropped
/// as the caller's side failing ("no ACK for baton's answer"), not as the caller hanging up —
/// in the call's record and in `/metrics`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answer_never_acknowledged_ends_the_call_as_a_failed_leg() {
    if !sip_support::require("sipp", "sip-tester") {
        return;
    }
    let dir = scratch("no-ack");
    // No RTP comes either: its own timeout is put past the ACK's.
    let (d, addr) = daemon(
        "audio-fixtures/scenarios/demo.toml",
        "rtp_timeout_s = 120",
        "",
    )
    .await;
    let mut rx = records(&d);
    let xml = scenario(
        "no ACK",
        &[
            invite("6000", "0", "a=rtpmap:0 PCMU/8000\n"),
            recv(100, true),
            recv(200, false),
            // baton resends its 200 (timer G) until it gives up; SIPp takes those as
            // retransmissions of what it already has.
            "  <pause milliseconds=\"36000\"/>\n".into(),
        ],
    );
    // SIPp's own verdict is not the point (baton may end the dialog during the pause).
    let _ = sipp(&dir, Scenario::Xml(xml), addr, &["-m", "1"]).await;
    let r = tokio::time::timeout(Duration::from_secs(30), next_record(&mut rx))
        .await
        .expect("the call ended");
    assert_eq!(
        r.end_reason.as_deref(),
        Some("caller's leg failed: no ACK for baton's answer"),
        "{r:?}"
    );
    let metrics = d.app.metrics.render(0);
    assert!(
        metrics.contains("baton_calls_total{leg=\"sip\",end=\"leg_failed\"} 1"),
        "{metrics}"
    );
    d.stop().await;
}
