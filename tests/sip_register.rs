//! Digest authentication both ways, against SIPp (Debian package `sip-tester`) on loopback.
//! Registration with a trunk or PBX, SIPp playing the registrar: it challenges the first
//! REGISTER (401), checks the answer's credentials (`verifyauth`) before accepting with a short
//! expiry, takes the refresh baton sends before that expiry, and the withdrawal (expires 0) when
//! baton stops; the state is on `/healthz`. Then callers challenged by baton (`[sip] auth_user`):
//! an INVITE without credentials gets 401 with a digest challenge, an answer with the wrong
//! password 403 with the reason, the right one the call.

mod sip_support;
mod support;

use std::time::Duration;

use sip_support::{
    Scenario, daemon, free_udp, in_dialog, invite, recv, scenario, scratch, sipp, sipp_on,
};

fn reply(status: &str, extra: &str) -> String {
    format!(
        r#"  <send>
    <![CDATA[
      SIP/2.0 {status}
      [last_Via:]
      [last_From:]
      [last_To:];tag=[pid]SIPpTag01[call_number]
      [last_Call-ID:]
      [last_CSeq:]
      {extra}Content-Length: 0

    ]]>
  </send>
"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn baton_registers_with_digest_and_challenges_its_callers() {
    if !sip_support::require("sipp", "sip-tester") {
        return;
    }
    let dir = scratch("register");
    let port = free_udp();
    let registrar = scenario(
        "registrar",
        &[
            "  <recv request=\"REGISTER\" crlf=\"true\"/>\n".into(),
            reply(
                "401 Unauthorized",
                "WWW-Authenticate: Digest realm=\"sipp.test\", nonce=\"[pid]n[call_number]\", algorithm=MD5\n      ",
            ),
            // The second REGISTER must carry the right digest for baton:s3cret-pw in sipp.test.
            "  <recv request=\"REGISTER\" crlf=\"true\"><action><verifyauth assign_to=\"ok\" username=\"baton\" password=\"s3cret-pw\"/></action></recv>\n".into(),
            "  <nop test=\"ok\" next=\"accept\"/>\n".into(),
            reply("403 Forbidden", ""),
            "  <nop next=\"done\"/>\n".into(),
            "  <label id=\"accept\"/>\n".into(),
            reply("200 OK", "Contact: [$contact];expires=4\n      Expires: 4\n      "),
            // The refresh, at three quarters of the 4 s granted.
            "  <recv request=\"REGISTER\" crlf=\"true\"/>\n".into(),
            reply("200 OK", "Expires: 4\n      "),
            // The withdrawal when baton stops.
            "  <recv request=\"REGISTER\" crlf=\"true\"><action><ereg regexp=\"[Ee]xpires[:=] *0\" search_in=\"msg\" check_it=\"true\" assign_to=\"zero\"/></action></recv>\n".into(),
            reply("200 OK", "Expires: 0\n      "),
            "  <label id=\"done\"/>\n".into(),
            "  <Reference variables=\"zero,contact\"/>\n".into(),
        ],
    )
    // The Contact baton asked to register, echoed back.
    .replace(
        "<recv request=\"REGISTER\" crlf=\"true\"><action><verifyauth",
        "<recv request=\"REGISTER\" crlf=\"true\"><action><ereg regexp=\"Contact: *([^\\r\\n]*)\" search_in=\"msg\" assign_to=\"junk,contact\"/><verifyauth",
    )
    .replace("zero,contact", "zero,contact,junk");
    let registrar_run = {
        let dir = dir.to_path_buf();
        tokio::spawn(async move {
            sipp_on(&dir, Scenario::Xml(registrar), port, None, &["-m", "1"]).await
        })
    };
    for _ in 0..100 {
        if std::net::UdpSocket::bind(("127.0.0.1", port)).is_err() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let var = format!("BATON_TEST_SIP_PW_{}", std::process::id());
    let callers_var = format!("BATON_TEST_SIP_CALLERS_PW_{}", std::process::id());
    // SAFETY: the only test in this binary; set before any daemon (and its threads) reads them.
    unsafe {
        std::env::set_var(&var, "s3cret-pw");
        std::env::set_var(&callers_var, "callers-pw");
    }
    let trunk = format!(
        "[sip.trunks.pbx]\nuri = \"sip:127.0.0.1:{port}\"\nusername = \"baton\"\npassword_env = \"{var}\"\nregister = true\nexpires_s = 120\n"
    );
    let (d, _) = daemon("audio-fixtures/scenarios/demo.toml", &trunk, "").await;
    let svc = d.app.sip.get().unwrap().clone();
    let mut state = None;
    for _ in 0..250 {
        state = svc.registrations().get("pbx").cloned();
        if matches!(
            state,
            Some(baton::leg::sip::register::RegState::Registered { .. })
        ) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        state,
        Some(baton::leg::sip::register::RegState::Registered { expires_s: 4 }),
        "registered with the expiry the registrar granted"
    );
    let health = support::http(
        &d.addr,
        "GET /healthz HTTP/1.1\r\nHost: baton\r\nConnection: close\r\n\r\n",
    )
    .await;
    let body: serde_json::Value =
        serde_json::from_str(health.split("\r\n\r\n").nth(1).unwrap_or_default()).unwrap();
    assert_eq!(
        body["sip_registrations"],
        serde_json::json!({"pbx": {"state": "registered", "expires_s": 4}}),
        "{health}"
    );
    // The refresh at 3 s; stop before the next one (6 s).
    tokio::time::sleep(Duration::from_millis(4000)).await;
    d.stop().await;
    let run = registrar_run.await.unwrap();
    run.assert_ok();
    assert!(
        run.messages.contains("Authorization: Digest"),
        "{}",
        run.messages
    );
    assert!(
        !run.messages.contains("s3cret-pw"),
        "the password never travels"
    );
    assert!(!run.messages.contains("403 Forbidden"), "{}", run.messages);

    // Callers challenged by baton.
    let auth = format!("auth_user = \"caller\"\nauth_password_env = \"{callers_var}\"\n");
    let (d, addr) = daemon("audio-fixtures/scenarios/demo.toml", &auth, "").await;
    let mut rx = d.app.sip.get().unwrap().subscribe_finished();
    let offer = invite("[media_port]", "0", "a=rtpmap:0 PCMU/8000\n");
    let ack = in_dialog("ACK", 1, None);
    let challenged = |password: &str, then: &[String]| {
        let mut steps = vec![
            offer.clone(),
            recv(100, true),
            "  <recv response=\"401\" auth=\"true\"/>\n".into(),
            ack.clone(),
            offer.replace("CSeq: 1 INVITE", "CSeq: 2 INVITE").replace(
                "Max-Forwards: 70",
                &format!(
                    "[authentication username=caller password={password}]\n      Max-Forwards: 70"
                ),
            ),
            recv(100, true),
        ];
        steps.extend_from_slice(then);
        scenario("challenged caller", &steps)
    };
    let wrong = challenged(
        "not-the-password",
        &[recv(403, false), in_dialog("ACK", 2, None)],
    );
    let run = sipp(&dir, Scenario::Xml(wrong), addr, &["-m", "1"]).await;
    run.assert_ok();
    assert!(
        run.messages
            .contains("WWW-Authenticate: Digest realm=\"baton\""),
        "{}",
        run.messages
    );
    assert!(
        run.messages.contains("wrong credentials"),
        "the refusal says why: {}",
        run.messages
    );
    let r = tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .unwrap()
        .unwrap();
    assert!(
        r.refused.is_some(),
        "the first INVITE was challenged: {r:?}"
    );
    let right = challenged(
        "callers-pw",
        &[
            recv(200, false),
            in_dialog("ACK", 2, None),
            "  <pause milliseconds=\"1000\"/>\n".into(),
            in_dialog("BYE", 3, None),
            recv(200, false),
        ],
    );
    let run = sipp(&dir, Scenario::Xml(right), addr, &["-m", "1"]).await;
    run.assert_ok();
    let mut answered = None;
    for _ in 0..4 {
        let r = tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .unwrap()
            .unwrap();
        if r.call_id.is_some() {
            answered = Some(r);
            break;
        }
    }
    let r = answered.expect("the call with the right password ran");
    assert_eq!(r.end_reason.as_deref(), Some("caller hung up"), "{r:?}");
    assert!(
        !run.messages.contains("callers-pw"),
        "the password never travels"
    );
    d.stop().await;
}
