//! Digest authentication both ways, against SIPp (Debian package `sip-tester`) on loopback.
//! Registration with a trunk or PBX, SIPp playing the registrar: it challenges the first
//! REGISTER (401), checks the answer's credentials (`verifyauth`) before accepting with a short
//! expiry, takes the refresh baton sends before that expiry, and the withdrawal (expires 0) when
//! baton stops; the state is on `/healthz`. Then callers challenged by baton (`[sip] auth_user`):
//! an INVITE without credentials gets 401 with a digest challenge, an answer with the wrong
//! password 403 with the reason, the right one the call. And registration over TLS with
//! Kamailio (Debian packages `kamailio`, `kamailio-tls-modules`) as the registrar: its
//! certificate signed by a private CA: refused with the reason by a baton trusting only the
//! system's roots, taken by one told to trust the CA (`tls_ca_file`), a digest challenge
//! answered, a Contact over TLS registered, and a call sent back to baton over it.

use crate::sip_support;
use crate::support;

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

/// The variables holding the test passwords (the trunk's, the callers'), set once for every
/// test of this file before any of them starts a daemon.
fn passwords() -> (String, String) {
    static SET: std::sync::Once = std::sync::Once::new();
    let var = format!("BATON_TEST_SIP_PW_{}", std::process::id());
    let callers_var = format!("BATON_TEST_SIP_CALLERS_PW_{}", std::process::id());
    SET.call_once(|| {
        // SAFETY: each test calls this first, before it starts a daemon (whose threads read
        // the environment); the Once makes the others wait until it is done.
        unsafe {
            std::env::set_var(&var, "s3cret-pw");
            std::env::set_var(&callers_var, "callers-pw");
        }
    });
    (var, callers_var)
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
    let mut registrar_run = {
        let dir = dir.to_path_buf();
        tokio::spawn(async move {
            sipp_on(&dir, Scenario::Xml(registrar), port, None, &["-m", "1"]).await
        })
    };
    sip_support::until_listening(&mut registrar_run, port).await;
    let (var, callers_var) = passwords();
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

/// Ends a process and the children it forked (Kamailio's workers), its own process group, with
/// SIGTERM when dropped: at the end of the test, or when it fails half way.
struct ProcessGroup(u32);

impl Drop for ProcessGroup {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", "--", &format!("-{}", self.0)])
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// Kamailio as a registrar on a TLS port: it challenges REGISTER, checks the answer against
/// `s3cret-pw` for user `baton`, and logs what it saved; and as a proxy on a UDP port, sending
/// requests for user `baton` to the registered contact (SIPp's built-in caller sends its ACK and
/// BYE to the proxy too, so those are looked up the same way).
const KAMAILIO_CFG: &str = r#"#!KAMAILIO
debug=2
log_stderror=yes
children=1
tcp_children=1
enable_tls=yes
auto_aliases=no
listen=tls:127.0.0.1:PORT
listen=udp:127.0.0.1:UDP_PORT
loadmodule "tm.so"
loadmodule "sl.so"
loadmodule "pv.so"
loadmodule "textops.so"
loadmodule "siputils.so"
loadmodule "xlog.so"
loadmodule "usrloc.so"
loadmodule "registrar.so"
loadmodule "auth.so"
loadmodule "tls.so"
modparam("tls", "config", "DIR/tls.cfg")
request_route {
    if (has_totag()) {
        if (lookup("location")) {
            t_relay();
        }
        exit;
    }
    if (is_method("CANCEL")) {
        if (t_check_trans()) {
            t_relay();
        }
        exit;
    }
    if (is_method("INVITE")) {
        if (!lookup("location")) {
            sl_send_reply("404", "Not Found");
            exit;
        }
        xlog("L_NOTICE", "RELAYING to $ru\n");
        t_relay();
        exit;
    }
    if (is_method("REGISTER")) {
        if (!pv_www_authenticate("$td", "s3cret-pw", "0")) {
            xlog("L_NOTICE", "CHALLENGED proto=$proto\n");
            www_challenge("$td", "0");
            exit;
        }
        if ($au != "baton") {
            sl_send_reply("403", "Forbidden");
            exit;
        }
        if (!save("location")) {
            sl_reply_error();
        }
        xlog("L_NOTICE", "REGISTERED user=$au proto=$proto contact=$ct expires=$hdr(Expires)\n");
        exit;
    }
    sl_send_reply("405", "Method Not Allowed");
}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn baton_registers_over_tls_with_kamailio() {
    if !sip_support::require("kamailio", "kamailio kamailio-tls-modules") {
        return;
    }
    if !sip_support::require("sipp", "sip-tester") {
        return;
    }
    let (var, _) = passwords();
    let scratch_dir = scratch("register-tls");
    let dir = scratch_dir.to_path_buf();
    // Kamailio's certificate, for 127.0.0.1, signed by a private CA.
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca_params, KeyPair::generate().unwrap()).unwrap();
    let leaf_key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .signed_by(&leaf_key, &ca)
        .unwrap();
    std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
    std::fs::write(dir.join("kam-cert.pem"), leaf.pem()).unwrap();
    std::fs::write(dir.join("kam-key.pem"), leaf_key.serialize_pem()).unwrap();
    std::fs::write(
        dir.join("tls.cfg"),
        format!(
            "[server:default]\nmethod = TLSv1.2+\ncertificate = {d}/kam-cert.pem\n\
             private_key = {d}/kam-key.pem\nverify_certificate = no\nrequire_certificate = no\n\n\
             [client:default]\nverify_certificate = no\nrequire_certificate = no\n",
            d = dir.display()
        ),
    )
    .unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let udp_port = free_udp();
    std::fs::write(
        dir.join("kamailio.cfg"),
        KAMAILIO_CFG
            .replace("UDP_PORT", &udp_port.to_string())
            .replace("PORT", &port.to_string())
            .replace("DIR", &dir.display().to_string()),
    )
    .unwrap();
    let log = dir.join("kamailio.log");
    let mut kamailio = tokio::process::Command::new("kamailio")
        .args(["-DD", "-E", "-m", "32", "-M", "8", "-f"])
        .arg(dir.join("kamailio.cfg"))
        .arg("-w")
        .arg(&dir)
        .arg("-P")
        .arg(dir.join("kamailio.pid"))
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .process_group(0)
        .kill_on_drop(true)
        .spawn()
        .expect("kamailio did not start");
    let group = ProcessGroup(kamailio.id().expect("kamailio's pid"));
    let mut up = false;
    for _ in 0..250 {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            up = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let read_log = || std::fs::read_to_string(&log).unwrap_or_default();
    assert!(up, "kamailio never listened:\n{}", read_log());
    let ck = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
    std::fs::write(dir.join("cert.pem"), ck.cert.pem()).unwrap();
    std::fs::write(dir.join("key.pem"), ck.signing_key.serialize_pem()).unwrap();
    let sip = format!(
        "tls_cert = \"{d}/cert.pem\"\ntls_key = \"{d}/key.pem\"\ntls_ca_file = \"{d}/ca.pem\"\n\
         [sip.trunks.pbx]\nuri = \"sip:127.0.0.1:{port};transport=tls\"\nusername = \"baton\"\n\
         password_env = \"{var}\"\nregister = true\nexpires_s = 120\n",
        d = dir.display()
    );
    // Trusting only the system's roots, the registration fails and says why.
    let strict = sip_support::daemon_on(
        "audio-fixtures/scenarios/demo.toml",
        r#"["udp:127.0.0.1:0", "tls:127.0.0.1:0"]"#,
        &sip.replace(&format!("tls_ca_file = \"{}/ca.pem\"\n", dir.display()), ""),
        "",
        50,
    )
    .await;
    let strict_svc = strict.app.sip.get().unwrap().clone();
    let mut refused = None;
    for _ in 0..2500 {
        if let Some(baton::leg::sip::register::RegState::Failed { reason }) =
            strict_svc.registrations().get("pbx").cloned()
        {
            refused = Some(reason);
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let refused = refused.expect("the registration never failed");
    assert!(
        refused.contains("TLS certificate was not accepted") && refused.contains("tls_ca_file"),
        "{refused}"
    );
    strict.stop().await;
    let d = sip_support::daemon_on(
        "audio-fixtures/scenarios/demo.toml",
        r#"["udp:127.0.0.1:0", "tls:127.0.0.1:0"]"#,
        &sip,
        "",
        50,
    )
    .await;
    let svc = d.app.sip.get().unwrap().clone();
    let tls_addr = svc.addr(baton::leg::sip::config::Transport::Tls).unwrap();
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
        Some(baton::leg::sip::register::RegState::Registered { expires_s: 120 }),
        "registered over TLS:\n{}",
        read_log()
    );
    // A caller (SIPp, plain UDP) calls user baton at Kamailio, which sends the call to the
    // registered contact over TLS; the agent answers and the BYE goes the same way.
    let mut rx = svc.subscribe_finished();
    let kamailio_udp: std::net::SocketAddr = format!("127.0.0.1:{udp_port}").parse().unwrap();
    let run = sipp(
        &dir,
        Scenario::Builtin("uac"),
        kamailio_udp,
        &["-s", "baton", "-m", "1", "-d", "1500"],
    )
    .await;
    run.assert_ok();
    let r = tokio::time::timeout(Duration::from_secs(10), rx.recv())
        .await
        .expect("no SIP call finished")
        .unwrap();
    assert!(r.inbound, "{r:?}");
    assert_eq!(r.parties.transport, "tls", "the call came over TLS: {r:?}");
    assert!(r.call_id.is_some(), "an agent took the call: {r:?}");
    d.stop().await;
    drop(group);
    let _ = tokio::time::timeout(Duration::from_secs(5), kamailio.wait()).await;
    let log = read_log();
    assert!(log.contains("CHALLENGED proto=tls"), "{log}");
    let saved = log
        .lines()
        .find(|l| l.contains("REGISTERED user=baton proto=tls"))
        .unwrap_or_else(|| panic!("kamailio saved no registration over TLS:\n{log}"));
    // After the challenge the stack registers the address the registrar saw the REGISTER come
    // from (its Via's received/rport): baton's end of the TLS connection, which the registrar
    // reuses for the calls it sends (RFC 5923); the transport stays TLS.
    assert!(
        saved.to_ascii_lowercase().contains(";transport=tls>"),
        "the Contact asks for TLS: {saved}"
    );
    let _ = tls_addr;
    assert!(!log.contains("s3cret-pw"), "the password never travels");
}
