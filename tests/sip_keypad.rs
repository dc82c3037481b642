//! Keypad tones both ways on SIP calls (SIPp signalling, the trunk's media played by the test):
//! a key the caller presses as an RFC 4733 event reaches the agent as a text turn, the agent
//! answers by calling its `send_dtmf` tool and its keys go out as RFC 4733 events; without an
//! event payload the caller's key comes by SIP INFO and the agent's keys go out as dual tones.
//! Every key is an event in the call's stream.

use crate::sip_support;
use crate::support;

use std::time::Duration;

use serde_json::Value;
use sip_support::{
    MediaPeer, Scenario, daemon, follow, in_dialog, invite, keys_heard, recv, scenario, scratch,
    sipp,
};

fn config() -> (&'static str, &'static str) {
    (
        "tests/data/keypad/scenario.toml",
        "[agents]\nset = \"../tests/data/keypad/agents.toml\"\n",
    )
}

fn has(events: &[Value], pred: impl Fn(&Value) -> bool) -> bool {
    events.iter().any(pred)
}

/// SIPp: INVITE naming the test's media port, optional INFO with a key at 1 s, hang up at 7 s.
fn signalling(port: u16, events: bool, info_key: Option<char>) -> String {
    let (pts, attrs) = if events {
        (
            "0 101",
            "a=rtpmap:0 PCMU/8000\na=rtpmap:101 telephone-event/8000\na=fmtp:101 0-16\n",
        )
    } else {
        ("0", "a=rtpmap:0 PCMU/8000\n")
    };
    let mut steps = vec![
        invite(&port.to_string(), pts, attrs),
        recv(100, true),
        recv(200, false),
        in_dialog("ACK", 1, None),
    ];
    let mut cseq = 2;
    if let Some(k) = info_key {
        steps.push("  <pause milliseconds=\"1000\"/>\n".into());
        steps.push(
            in_dialog("INFO", cseq, Some(&format!("Signal={k}\nDuration=160\n")))
                .replace("application/sdp", "application/dtmf-relay"),
        );
        steps.push(recv(200, false));
        cseq += 1;
        steps.push("  <pause milliseconds=\"6000\"/>\n".into());
    } else {
        steps.push("  <pause milliseconds=\"7000\"/>\n".into());
    }
    steps.push(in_dialog("BYE", cseq, None));
    steps.push(recv(200, false));
    scenario("keypad", &steps)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_reaches_the_agent_and_its_keys_go_out_as_rfc_4733_events() {
    if !sip_support::require("sipp", "sip-tester") {
        return;
    }
    let dir = scratch("keypad-events");
    let (scn, agents) = config();
    let (d, addr) = daemon(scn, "", agents).await;
    let mut rx = d.app.sip.get().unwrap().subscribe_finished();
    let peer = MediaPeer::bind().await;
    let xml = signalling(peer.port(), true, None);
    let silence = vec![0i16; 8000 * 8];
    let keys = [(Duration::from_millis(1000), '5')];
    let (run, heard, events) = tokio::join!(
        sipp(&dir, Scenario::Xml(xml), addr, &["-m", "1"]),
        peer.converse_keys(
            &silence,
            0,
            Default::default(),
            Duration::from_millis(6800),
            &keys
        ),
        async { follow(&d).await.await.unwrap() },
    );
    run.assert_ok();
    assert!(
        has(&events, |e| e["type"] == "keypad"
            && e["direction"] == "in"
            && e["key"] == "5"),
        "{events:#?}"
    );
    assert!(
        has(&events, |e| e["type"] == "sidecar_delivered"
            && e["sidecar"] == "keypad"),
        "the key was told to the agent: {events:#?}"
    );
    assert!(
        has(&events, |e| e["type"] == "tool_called"
            && e["tool_name"] == "send_dtmf"),
        "{events:#?}"
    );
    assert!(
        has(&events, |e| e["type"] == "keypad"
            && e["direction"] == "out"
            && e["keys"] == "42#"
            && e["as"] == "leg"),
        "{events:#?}"
    );
    assert_eq!(
        heard.digits,
        ['4', '2', '#'],
        "the trunk heard the agent's keys"
    );
    let r = tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .unwrap()
        .unwrap();
    let m = r.media.unwrap();
    assert_eq!((m.dtmf_in, m.dtmf_out), (1, 3), "{m:?}");
    assert_eq!(m.lost, 0, "key events are not counted as lost audio: {m:?}");
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_event_payload_keys_come_by_info_and_go_out_as_tones() {
    if !sip_support::require("sipp", "sip-tester") {
        return;
    }
    let dir = scratch("keypad-tones");
    let (scn, agents) = config();
    let (d, addr) = daemon(scn, "", agents).await;
    let peer = MediaPeer::bind().await;
    let xml = signalling(peer.port(), false, Some('7'));
    let silence = vec![0i16; 8000 * 8];
    let (run, heard, events) = tokio::join!(
        sipp(&dir, Scenario::Xml(xml), addr, &["-m", "1"]),
        peer.converse(&silence, 0, Default::default(), Duration::from_millis(6800)),
        async { follow(&d).await.await.unwrap() },
    );
    run.assert_ok();
    assert!(
        has(&events, |e| e["type"] == "keypad"
            && e["direction"] == "in"
            && e["key"] == "7"),
        "{events:#?}"
    );
    assert!(
        has(&events, |e| e["type"] == "keypad"
            && e["keys"] == "42#"
            && e["as"] == "leg"),
        "the leg chose: SIP presses keys itself, as tones without an event payload: {events:#?}"
    );
    assert!(heard.digits.is_empty(), "no events were negotiated");
    assert_eq!(
        keys_heard(&heard.pcm, 8000),
        ['4', '2', '#'],
        "the trunk heard the tones"
    );
    d.stop().await;
}

#[test]
fn the_tone_detector_hears_what_the_generator_makes() {
    let mut pcm = vec![0i16; 800];
    for code in [4u8, 2, 11] {
        let mut tone = vec![0i16; 800];
        baton::leg::sip::dtmf::tone(code, 8000, 0, &mut tone);
        pcm.extend(tone);
        pcm.extend(vec![0i16; 800]);
    }
    assert_eq!(keys_heard(&pcm, 8000), ['4', '2', '#']);
}

/// The same agent on an AudioSocket call: Asterisk's DTMF reaches it, and its keys come back
/// as tones (the protocol has no way to send a key).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_audiosocket_caller_presses_a_key_and_hears_the_agents_tones() {
    let (scn, agents) = config();
    let text = format!(
        "{}{agents}[audiosocket]\nlisten = \"127.0.0.1:0\"\n",
        support::mock_config(scn, "")
    );
    let d = support::Daemon::start(&text).await;
    let addr = d
        .bound("the AudioSocket listener", |app| {
            app.audiosocket_addr.get().copied()
        })
        .await
        .to_string();
    let mut opts = baton::leg::audiosocket::CallerOptions::new(vec![0i16; 8000 * 6], 8000);
    opts.dtmf = vec![(Duration::from_millis(800), '5')];
    opts.max_tail = Duration::from_secs(1);
    let (report, events) = tokio::join!(baton::leg::audiosocket::dial(&addr, opts), async {
        follow(&d).await.await.unwrap()
    },);
    let report = report.unwrap();
    assert!(
        has(&events, |e| e["type"] == "keypad"
            && e["direction"] == "in"
            && e["key"] == "5"),
        "{events:#?}"
    );
    assert!(
        has(&events, |e| e["type"] == "sidecar_delivered"
            && e["sidecar"] == "keypad"),
        "{events:#?}"
    );
    assert!(
        has(&events, |e| e["type"] == "keypad"
            && e["keys"] == "42#"
            && e["as"] == "tones"),
        "{events:#?}"
    );
    let heard = keys_heard(&report.recording.agent, 8000);
    // If a key is lost, say when each of the agent's frames came: one later than the caller's
    // jitter buffer allows puts silence into a tone, and a tone cut that way is not a key.
    let arrivals = || {
        let a = &report.arrivals_ms;
        a.windows(2)
            .map(|w| format!("+{:.0}@{:.0}", w[1] - w[0], w[1]))
            .collect::<Vec<_>>()
            .join(" ")
    };
    assert_eq!(
        heard,
        ['4', '2', '#'],
        "the agent's frames arrived (ms since the previous @ ms into the call): {}",
        arrivals()
    );
    d.stop().await;
}
