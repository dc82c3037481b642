//! baresip (Debian package `baresip-core`), a real softphone, and baton on loopback, both ways:
//! baresip calls baton, presses a key (RFC 4733), the agent hears it and presses keys back with
//! its `send_dtmf` tool, which baresip receives as RFC 4733 events, and baresip hears the
//! agent; baton calls baresip (`POST /calls`), which answers at once and plays a WAV, the agent
//! answers it, and keys go both ways again (`POST /calls/{id}/dtmf` out, baresip's key in);
//! baresip calls baton over TLS (a `tls:` listen address with a self-signed certificate
//! baresip trusts); baresip calls baton offering Opus (with `telephone-event/8000` only): the
//! call runs on Opus, keys still arrive both ways and baresip hears the agent; and baton calls
//! baresip over TLS (baresip's certificate signed by a private CA named in `tls_ca_file`), while
//! a baton trusting only the system's roots refuses that certificate with the reason.

use crate::sip_support;
use crate::support;

use std::time::Duration;

use sip_support::{Baresip, caller_turn_8k, daemon, follow, next_record, post, scratch};
use support::Daemon;
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn baresip_calls_baton_with_opus_and_keys_still_go_both_ways() {
    if !sip_support::require("baresip", "baresip-core") {
        return;
    }
    let dir = scratch("baresip-opus");
    let (d, addr) = daemon(
        "tests/data/keypad/scenario.toml",
        "",
        "[agents]\nset = \"../tests/data/keypad/agents.toml\"\n",
    )
    .await;
    let mut rx = d.app.sip.get().unwrap().subscribe_finished();
    // baresip offers Opus first, then PCMU, with telephone-event/8000 only.
    let mut phone =
        Baresip::start_opts(&dir, &vec![0i16; 8000 * 7], 16, "", "opus/48000/2,PCMU").await;
    phone
        .command("dial", &format!("sip:100@127.0.0.1:{}", addr.port()))
        .await;
    assert!(
        phone
            .wait_event("CALL_ESTABLISHED", Duration::from_secs(10))
            .await
            .is_some(),
        "baresip's call was not answered:\n{}",
        phone.log()
    );
    let events = follow(&d).await;
    tokio::time::sleep(Duration::from_millis(800)).await;
    phone.command("sndcode", "5").await;
    let r = next_record(&mut rx).await;
    let events = events.await.unwrap();
    phone.wait(Duration::from_secs(10)).await;
    eprintln!("baresip (Opus) → baton: {r:?}");
    let m = r.media.clone().unwrap();
    assert_eq!(m.codec, "opus", "Opus was negotiated: {m:?}");
    assert!(m.packets_in >= 200, "{m:?}");
    assert_eq!(m.lost, 0, "{m:?}");
    assert!(
        events
            .iter()
            .any(|e| e["type"] == "keypad" && e["direction"] == "in" && e["key"] == "5"),
        "baresip's key reached the call over Opus's 8 kHz events: {events:#?}"
    );
    assert_eq!(
        phone.keys_received(),
        ['4', '2', '#'],
        "baresip received the agent's keys as RFC 4733 events:\n{}",
        phone.log()
    );
    assert_eq!((m.dtmf_in, m.dtmf_out), (1, 3), "{m:?}");
    // The agent's spoken reply (advisor_01, 2.6 s) reached baresip's ear, decoded from Opus.
    let (heard, rate) = phone.heard_at();
    let heard = voiced_segments(&heard, rate);
    assert!(
        heard.iter().any(|(s, e)| e - s > 1.5),
        "baresip heard no reply: {heard:?}\n{}",
        phone.log()
    );
    d.stop().await;
}

/// A private CA, and a certificate for 127.0.0.1 it signed (PEM, with its key).
fn private_ca(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "baton test PBX CA");
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .signed_by(&leaf_key, &ca)
        .unwrap();
    let ca_file = dir.join("pbx-ca.pem");
    std::fs::write(&ca_file, ca.pem()).unwrap();
    let both = dir.join("pbx-cert-and-key.pem");
    std::fs::write(&both, format!("{}{}", leaf.pem(), leaf_key.serialize_pem())).unwrap();
    (ca_file, both)
}

/// A daemon with UDP and TLS listeners (its own self-signed certificate) and `sip_extra`.
async fn tls_daemon(dir: &std::path::Path, sip_extra: &str) -> Daemon {
    let ck = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
    std::fs::write(dir.join("cert.pem"), ck.cert.pem()).unwrap();
    std::fs::write(dir.join("key.pem"), ck.signing_key.serialize_pem()).unwrap();
    let files = format!(
        "tls_cert = \"{}\"\ntls_key = \"{}\"\n{sip_extra}",
        dir.join("cert.pem").display(),
        dir.join("key.pem").display()
    );
    sip_support::daemon_on(
        "audio-fixtures/scenarios/demo.toml",
        r#"["udp:127.0.0.1:0", "tls:127.0.0.1:0"]"#,
        &files,
        "",
        50,
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn baton_calls_baresip_over_tls_verifying_its_certificate() {
    if !sip_support::require("baresip", "baresip-core") {
        return;
    }
    let dir = scratch("baresip-tls-out");
    let (ca_file, both) = private_ca(&dir);
    let mut mic = caller_turn_8k();
    mic.extend(std::iter::repeat_n(0, 8000 * 5));
    let cert = format!("sip_certificate\t{}\n", both.display());
    let mut phone = Baresip::start_opts(&dir, &mic, 20, &cert, "PCMU").await;
    let tls_port = phone.port + 1;
    let trunk = format!(
        "[sip.trunks.phone]\nuri = \"sip:127.0.0.1:{tls_port};transport=tls\"\nring_timeout_s = 10\n"
    );
    // A baton trusting only the system's roots: the private CA's certificate is refused.
    let strict = tls_daemon(
        &dir,
        &trunk.replace("ring_timeout_s = 10", "ring_timeout_s = 3"),
    )
    .await;
    let (status, placed) = post(strict.addr, "/calls", r#"{"to": "phone"}"#).await;
    assert_eq!(status, 200, "{placed}");
    assert_eq!(placed["outcome"], "failed", "{placed}");
    let reason = placed["reason"].as_str().unwrap_or_default();
    assert!(
        reason.contains("TLS certificate was not accepted") && reason.contains("tls_ca_file"),
        "the refusal says why and what to do: {placed}"
    );
    strict.stop().await;
    // Trusting the PBX's CA, the call goes through over TLS.
    let ca = format!(
        "tls_ca_file = \"{}\"\n[sip.trunks.phone]\nuri = \"sip:127.0.0.1:{tls_port};transport=tls\"\nring_timeout_s = 10\n",
        ca_file.display()
    );
    let d = tls_daemon(&dir, &ca).await;
    let mut rx = d.app.sip.get().unwrap().subscribe_finished();
    let (status, placed) = post(d.addr, "/calls", r#"{"to": "phone"}"#).await;
    assert_eq!(status, 201, "{placed}\n{}", phone.log());
    assert_eq!(placed["outcome"], "answered", "{placed}\n{}", phone.log());
    let r = next_record(&mut rx).await;
    phone.wait(Duration::from_secs(15)).await;
    eprintln!("baton → baresip over TLS: {r:?}");
    assert_eq!(r.parties.transport, "tls", "{r:?}");
    assert_eq!(
        r.hung_up_by,
        Some(baton::leg::sip::call::HungUpBy::Peer),
        "baresip's BYE came back over TLS: {r:?}"
    );
    assert!(r.turns >= 1, "the agent answered baresip's question: {r:?}");
    assert!(r.media.as_ref().unwrap().packets_in >= 100, "{r:?}");
    d.stop().await;
}
