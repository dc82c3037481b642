//! baresip (Debian package `baresip-core`), a real softphone, and baton on loopback, both ways:
//! baresip calls baton, presses a key (RFC 4733), the agent hears it and presses keys back with
//! its `send_dtmf` tool, which baresip receives as RFC 4733 events, and baresip hears the
//! agent; baton calls baresip (`POST /calls`), which answers at once and plays a WAV, the agent
//! answers it, and keys go both ways again (`POST /calls/{id}/dtmf` out, baresip's key in);
//! and baresip calls baton over TLS (a `tls:` listen address with a self-signed certificate
//! baresip trusts).

mod sip_support;
mod support;

use std::time::Duration;

use sip_support::{Baresip, caller_turn_8k, daemon, follow, next_record, post, scratch};
use support::voiced_segments;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn baresip_calls_baton_and_keys_go_both_ways() {
    if !sip_support::require("baresip", "baresip-core") {
        return;
    }
    let dir = scratch("baresip-in");
    let (d, addr) = daemon(
        "tests/data/keypad/scenario.toml",
        "",
        "[agents]\nset = \"../tests/data/keypad/agents.toml\"\n",
    )
    .await;
    let mut rx = d.app.sip.get().unwrap().subscribe_finished();
    // Seven seconds of a quiet line; baresip hangs up when its WAV ends.
    let mut phone = Baresip::start(&dir, &vec![0i16; 8000 * 7], 16).await;
    phone
        .command("dial", &format!("sip:100@127.0.0.1:{}", addr.port()))
        .await;
    let events = follow(&d).await;
    assert!(
        phone
            .wait_event("CALL_ESTABLISHED", Duration::from_secs(10))
            .await
            .is_some(),
        "baresip's call was not answered:\n{}",
        phone.log()
    );
    tokio::time::sleep(Duration::from_millis(800)).await;
    phone.command("sndcode", "5").await;
    let r = next_record(&mut rx).await;
    let events = events.await.unwrap();
    phone.wait(Duration::from_secs(10)).await;
    eprintln!("baresip → baton: {r:?}");
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "keypad" && e["direction"] == "in" && e["key"] == "5"),
        "baresip's key reached the call: {events:#?}"
    );
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "tool_called" && e["tool_name"] == "send_dtmf"),
        "the agent pressed keys: {events:#?}"
    );
    assert_eq!(
        phone.keys_received(),
        ['4', '2', '#'],
        "baresip received the agent's keys as RFC 4733 events:\n{}",
        phone.log()
    );
    let m = r.media.clone().unwrap();
    assert_eq!((m.dtmf_in, m.dtmf_out), (1, 3), "{m:?}");
    assert_eq!(r.hung_up_by, Some(baton::leg::sip::call::HungUpBy::Peer));
    // The agent's spoken reply (advisor_01, 2.6 s) reached baresip's ear.
    let heard = voiced_segments(&phone.heard(), 8000);
    assert!(
        heard.iter().any(|(s, e)| e - s > 1.5),
        "baresip heard no reply: {heard:?}\n{}",
        phone.log()
    );
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn baton_calls_baresip_which_answers_with_a_wav_and_keys_go_both_ways() {
    if !sip_support::require("baresip", "baresip-core") {
        return;
    }
    let dir = scratch("baresip-out");
    // The caller's question, then quiet while the agent answers; then the WAV ends.
    let mut mic = caller_turn_8k();
    mic.extend(std::iter::repeat_n(0, 8000 * 6));
    let mut phone = Baresip::start(&dir, &mic, 20).await;
    let trunk = format!(
        "[sip.trunks.phone]\nuri = \"sip:127.0.0.1:{}\"\nring_timeout_s = 10\n",
        phone.port
    );
    let (d, _) = daemon("audio-fixtures/scenarios/demo.toml", &trunk, "").await;
    let mut rx = d.app.sip.get().unwrap().subscribe_finished();
    let (status, placed) = post(d.addr, "/calls", r#"{"to": "phone"}"#).await;
    assert_eq!(status, 201, "{placed}\n{}", phone.log());
    assert_eq!(placed["outcome"], "answered", "{placed}");
    let id = placed["call_id"].as_str().unwrap().to_owned();
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let (status, sent) = post(d.addr, &format!("/calls/{id}/dtmf"), r#"{"digits": "123"}"#).await;
    assert_eq!((status, sent["keys"].as_u64()), (202, Some(3)), "{sent}");
    // After the agent's reply (the question ends at 3.1 s, the reply takes 2.6 s).
    tokio::time::sleep(Duration::from_millis(6500)).await;
    phone.command("sndcode", "7").await;
    let r = next_record(&mut rx).await;
    phone.wait(Duration::from_secs(15)).await;
    eprintln!("baton → baresip: {r:?}");
    assert!(!r.inbound);
    assert_eq!(
        r.hung_up_by,
        Some(baton::leg::sip::call::HungUpBy::Peer),
        "baresip hung up when its WAV ended: {r:?}"
    );
    assert!(r.turns >= 1, "the agent answered baresip's question: {r:?}");
    assert_eq!(
        phone.keys_received(),
        ['1', '2', '3'],
        "baresip received the keys as RFC 4733 events:\n{}",
        phone.log()
    );
    let m = r.media.clone().unwrap();
    assert_eq!(
        (m.dtmf_in, m.dtmf_out),
        (1, 3),
        "baresip's key reached baton: {m:?}"
    );
    let heard = voiced_segments(&phone.heard(), 8000);
    assert!(
        heard.iter().any(|(s, e)| *s > 3.0 && e - s > 1.5),
        "baresip heard no reply after its question: {heard:?}\n{}",
        phone.log()
    );
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn baresip_calls_baton_over_tls() {
    if !sip_support::require("baresip", "baresip-core") {
        return;
    }
    let dir = scratch("baresip-tls");
    let ck = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
    std::fs::write(dir.join("cert.pem"), ck.cert.pem()).unwrap();
    std::fs::write(dir.join("key.pem"), ck.signing_key.serialize_pem()).unwrap();
    let files = format!(
        "tls_cert = \"{}\"\ntls_key = \"{}\"\n",
        dir.join("cert.pem").display(),
        dir.join("key.pem").display()
    );
    let d = sip_support::daemon_on(
        "audio-fixtures/scenarios/demo.toml",
        r#"["tls:127.0.0.1:0"]"#,
        &files,
        "",
        50,
    )
    .await;
    let addr = d
        .app
        .sip
        .get()
        .unwrap()
        .addr(baton::leg::sip::config::Transport::Tls)
        .unwrap();
    let mut rx = d.app.sip.get().unwrap().subscribe_finished();
    // baresip trusts baton's certificate as its CA.
    let cafile = format!("sip_cafile\t{}\n", dir.join("cert.pem").display());
    let mut phone = Baresip::start_with(&dir, &vec![0i16; 8000 * 3], 10, &cafile).await;
    phone
        .command(
            "dial",
            &format!("sip:100@127.0.0.1:{};transport=tls", addr.port()),
        )
        .await;
    assert!(
        phone
            .wait_event("CALL_ESTABLISHED", Duration::from_secs(10))
            .await
            .is_some(),
        "baresip's call over TLS was not answered:\n{}",
        phone.log()
    );
    let r = next_record(&mut rx).await;
    phone.wait(Duration::from_secs(10)).await;
    assert!(r.call_id.is_some(), "{r:?}");
    assert_eq!(r.parties.transport, "tls", "{r:?}");
    assert_eq!(r.end_reason.as_deref(), Some("caller hung up"), "{r:?}");
    assert!(r.media.as_ref().unwrap().packets_in >= 100, "{r:?}");
    d.stop().await;
}
