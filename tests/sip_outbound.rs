//! Outbound SIP calls (`POST /calls`, `baton call`) on a trunk played by SIPp (Debian package
//! `sip-tester`) on loopback, with each typed outcome: answered (the callee speaks over RTP and
//! the agent set answers it, exactly as on an inbound call; baton hangs up when told), busy
//! (486), rejected (404, with its status), no answer (the ring timeout ends it with CANCEL) and
//! failed (the callee answers with no codec in common, or nothing answers at the trunk's
//! address). Then the CANCEL itself, on a trunk the test scripts message by message over UDP:
//! sent for the INVITE at the ring timeout (its 487 acknowledged), and a 200 that crosses it
//! acknowledged and hung up with BYE, even when the SIP side stops meanwhile (and so are both
//! 200s of a forked INVITE, the stop waiting for each one's BYE to be answered).

use crate::sip_support;
use crate::support;

use std::net::SocketAddr;
use std::time::Duration;

use baton::leg::sip::call::{HungUpBy, Outcome};
use serde_json::Value;
use sip_support::{
    Scenario, caller_turn_8k, daemon, free_udp, g711, next_record, scenario, scratch, sipp_on,
};

/// A response of SIPp's callee to the last request, with a To tag.
fn reply(status: &str, body: Option<&str>) -> String {
    let (ct, body) = match body {
        Some(b) => ("Content-Type: application/sdp\n      ", b),
        None => ("", ""),
    };
    let retrans = if status.starts_with("200") && body.is_empty() {
        ""
    } else if status.starts_with('2') {
        r#" retrans="500""#
    } else {
        ""
    };
    format!(
        r#"  <send{retrans}>
    <![CDATA[
      SIP/2.0 {status}
      [last_Via:]
      [last_From:]
      [last_To:];tag=[pid]SIPpTag01[call_number]
      [last_Call-ID:]
      [last_CSeq:]
      Contact: <sip:[local_ip]:[local_port];transport=[transport]>
      {ct}Content-Length: [len]

{body}
    ]]>
  </send>
"#
    )
}

fn recv_request(method: &str) -> String {
    format!("  <recv request=\"{method}\" crlf=\"true\"/>\n")
}

const CALLEE_SDP: &str = "v=0\no=callee 1 1 IN IP[local_ip_type] [local_ip]\ns=-\nc=IN IP[media_ip_type] [media_ip]\nt=0 0\nm=audio [media_port] RTP/AVP 0\na=rtpmap:0 PCMU/8000\n";

/// A callee that answers with a final `status` (and takes the ACK).
fn refuses(status: &str) -> String {
    scenario(
        "callee refuses",
        &[
            recv_request("INVITE"),
            reply(status, None),
            recv_request("ACK"),
        ],
    )
}

/// `POST /calls` with this JSON body: the status and the JSON answer.
async fn post_call(d: &support::Daemon, body: &str) -> (u16, Value) {
    sip_support::post(d.addr, "/calls", body).await
}

/// `baton call` against the daemon: exit code and stdout.
async fn baton_call(d: &support::Daemon, args: &[&str]) -> (i32, String, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_baton"))
        .arg("call")
        .args(args)
        .args(["--server", &format!("http://{}", d.addr), "--json"])
        .output()
        .await
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn trunks(callee: u16, closed_tcp: u16) -> String {
    format!(
        "[sip.trunks.callee]\nuri = \"sip:127.0.0.1:{callee}\"\nfrom = \"sip:+15550100@baton.test\"\nring_timeout_s = 10\n\
         [sip.trunks.gone]\nuri = \"sip:127.0.0.1:{closed_tcp};transport=tcp\"\n"
    )
}

/// Starts SIPp as the callee on `port` and waits for it to bind.
async fn callee(
    dir: &std::path::Path,
    port: u16,
    xml: String,
) -> tokio::task::JoinHandle<sip_support::SippRun> {
    let dir = dir.to_path_buf();
    let mut h =
        tokio::spawn(
            async move { sipp_on(&dir, Scenario::Xml(xml), port, None, &["-m", "1"]).await },
        );
    sip_support::until_listening(&mut h, port).await;
    h
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answered_outbound_call_runs_the_agents_and_the_other_outcomes_are_typed() {
    if !sip_support::require("sipp", "sip-tester") {
        return;
    }
    let dir = scratch("outbound");
    std::fs::write(dir.join("callee.ulaw"), g711(&caller_turn_8k(), 0)).unwrap();
    let port = free_udp();
    let closed: SocketAddr = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let (d, _) = daemon(
        "audio-fixtures/scenarios/demo.toml",
        &trunks(port, closed.port()),
        "",
    )
    .await;
    let mut rx = d.app.sip.get().unwrap().subscribe_finished();

    // Answered, by `baton call`: the callee says the caller's turn over RTP; the agent answers.
    let answers = scenario(
        "callee answers and speaks",
        &[
            recv_request("INVITE"),
            reply("180 Ringing", None),
            reply("200 OK", Some(CALLEE_SDP)),
            recv_request("ACK"),
            "  <nop><action><exec rtp_stream=\"callee.ulaw,1,0\"/></action></nop>\n".into(),
            recv_request("BYE"),
            reply("200 OK", None),
        ],
    );
    let sipp = callee(&dir, port, answers).await;
    let (code, out, err) = baton_call(&d, &["100", "--trunk", "callee"]).await;
    assert_eq!(code, 0, "baton call: {out}\n{err}");
    let placed: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(placed["outcome"], "answered", "{placed}");
    let id = placed["call_id"].as_str().unwrap().to_owned();
    // The callee's turn ends at 3.1 s and the reply takes 2.6 s; then baton hangs up.
    tokio::time::sleep(Duration::from_millis(7500)).await;
    let hangup = support::http(
        &d.addr,
        &format!(
            "POST /admin/calls/{id}/hangup HTTP/1.1\r\nHost: baton\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        ),
    )
    .await;
    assert!(hangup.starts_with("HTTP/1.1 2"), "{hangup}");
    let run = sipp.await.unwrap();
    run.assert_ok();
    // The INVITE went to the dialled user at the trunk, from the trunk's caller ID.
    assert!(
        run.messages.contains("INVITE sip:100@127.0.0.1"),
        "{}",
        run.messages
    );
    assert!(run.messages.contains("+15550100"), "{}", run.messages);
    let r = next_record(&mut rx).await;
    eprintln!("answered: {r:?}");
    assert!(!r.inbound);
    assert_eq!(r.outcome, Some(Outcome::Answered));
    assert_eq!(r.call_id.as_deref(), Some(id.as_str()));
    assert_eq!(r.hung_up_by, Some(HungUpBy::Baton), "{r:?}");
    let m = r.media.clone().unwrap();
    assert!(m.packets_in >= 150, "the callee's speech arrived: {m:?}");
    assert!(r.turns >= 1, "the agent answered the callee: {r:?}");

    // Busy, by `baton call`: exit 1 and the typed outcome.
    let sipp = callee(&dir, port, refuses("486 Busy Here")).await;
    let uri = format!("sip:200@127.0.0.1:{port}");
    let (code, out, _) = baton_call(&d, &[&uri, "--trunk", "callee"]).await;
    assert_eq!(code, 1, "{out}");
    let placed: Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(
        placed,
        serde_json::json!({"outcome": "busy", "status": 486})
    );
    sipp.await.unwrap().assert_ok();
    assert_eq!(
        next_record(&mut rx).await.outcome,
        Some(Outcome::Busy { status: 486 })
    );

    // Rejected with its status, by POST /calls.
    let sipp = callee(&dir, port, refuses("404 Not Found")).await;
    let (status, placed) = post_call(&d, r#"{"to": "300", "trunk": "callee"}"#).await;
    assert_eq!(status, 200, "{placed}");
    assert_eq!(
        placed,
        serde_json::json!({"outcome": "rejected", "status": 404, "reason": "Not Found"})
    );
    sipp.await.unwrap().assert_ok();
    let _ = next_record(&mut rx).await;

    // No answer: it rings past the ring timeout; baton cancels.
    let rings = scenario(
        "callee rings",
        &[
            "  <recv request=\"INVITE\" crlf=\"true\"><action><ereg regexp=\"([0-9]+) INVITE\" search_in=\"hdr\" header=\"CSeq:\" assign_to=\"cseq,n\"/></action></recv>\n".into(),
            reply("180 Ringing", None),
            recv_request("CANCEL"),
            reply("200 OK", None),
            reply("487 Request Terminated", None).replace("[last_CSeq:]", "CSeq: [$n] INVITE"),
            recv_request("ACK"),
            "  <Reference variables=\"cseq\"/>\n".into(),
        ],
    );
    let sipp = callee(&dir, port, rings).await;
    let (status, placed) = post_call(
        &d,
        r#"{"to": "400", "trunk": "callee", "ring_timeout_s": 1}"#,
    )
    .await;
    assert_eq!(status, 200, "{placed}");
    assert_eq!(
        placed,
        serde_json::json!({"outcome": "no_answer", "status": null})
    );
    sipp.await.unwrap().assert_ok();
    let _ = next_record(&mut rx).await;

    // Failed: the callee answers with no codec baton speaks; baton hangs up at once.
    let g729 = CALLEE_SDP
        .replace("RTP/AVP 0", "RTP/AVP 18")
        .replace("0 PCMU/8000", "18 G729/8000");
    let unusable = scenario(
        "callee answers G.729",
        &[
            recv_request("INVITE"),
            reply("200 OK", Some(&g729)),
            recv_request("ACK"),
            recv_request("BYE"),
            reply("200 OK", None),
        ],
    );
    let sipp = callee(&dir, port, unusable).await;
    let (status, placed) = post_call(&d, r#"{"to": "500", "trunk": "callee"}"#).await;
    assert_eq!(status, 200, "{placed}");
    assert_eq!(placed["outcome"], "failed", "{placed}");
    assert!(
        placed["reason"].as_str().unwrap().contains("G729"),
        "the reason names the problem: {placed}"
    );
    sipp.await.unwrap().assert_ok();
    let _ = next_record(&mut rx).await;

    // Failed: nothing answers at the trunk's TCP address, not even 100 Trying.
    let (status, placed) =
        post_call(&d, r#"{"to": "600", "trunk": "gone", "ring_timeout_s": 2}"#).await;
    assert_eq!(status, 200, "{placed}");
    assert_eq!(placed["outcome"], "failed", "{placed}");
    assert!(
        placed["reason"]
            .as_str()
            .unwrap()
            .contains("no response from the trunk"),
        "{placed}"
    );
    let _ = next_record(&mut rx).await;

    // Requests that cannot be placed say why.
    let (status, e) = post_call(&d, r#"{"to": "100"}"#).await;
    assert_eq!(status, 404, "two trunks, none named: {e}");
    assert!(e["error"].as_str().unwrap().contains("callee, gone"), "{e}");
    let (status, e) = post_call(&d, r#"{"to": "1 2 3", "trunk": "callee"}"#).await;
    assert_eq!(status, 400, "{e}");
    let (status, e) = post_call(&d, r#"{"number": "100"}"#).await;
    assert_eq!(status, 400, "{e}");
    let (status, e) = post_call(
        &d,
        r#"{"to": "100", "trunk": "callee", "from": "not a uri"}"#,
    )
    .await;
    assert_eq!(status, 400, "{e}");
    assert!(
        e["error"]
            .as_str()
            .unwrap()
            .contains("from \"not a uri\" is not a SIP URI"),
        "{e}"
    );
    for (ring, says) in [
        ("0", "ring_timeout_s 0 is outside 1-3600"),
        // No overflow of the ring's deadline: refused with the range.
        (
            "18446744073709551615",
            "ring_timeout_s 18446744073709551615 is outside 1-3600",
        ),
    ] {
        let body = format!(r#"{{"to": "100", "trunk": "callee", "ring_timeout_s": {ring}}}"#);
        let (status, e) = post_call(&d, &body).await;
        assert_eq!(status, 400, "{e}");
        assert!(e["error"].as_str().unwrap().contains(says), "{e}");
    }
    assert_eq!(d.calls_ended().await, 0, "every slot was given back");
    d.stop().await;
}

/// A SIP message the scripted trunk took, and where it came from.
#[derive(Clone, Debug)]
struct Sip {
    text: String,
    from: SocketAddr,
}

impl Sip {
    /// The request's method (`None` for a response).
    fn method(&self) -> Option<&str> {
        let first = self.text.lines().next()?;
        (!first.starts_with("SIP/")).then(|| first.split(' ').next().unwrap_or_default())
    }

    /// Every value of header `name` (or its compact form), in order.
    fn headers(&self, name: &str) -> Vec<&str> {
        let compact = match name.to_ascii_lowercase().as_str() {
            "via" => "v",
            "from" => "f",
            "to" => "t",
            "call-id" => "i",
            _ => "",
        };
        self.text
            .split("\r\n\r\n")
            .next()
            .unwrap_or_default()
            .lines()
            .skip(1)
            .filter_map(|l| l.split_once(':'))
            .filter(|(n, _)| {
                let n = n.trim();
                n.eq_ignore_ascii_case(name) || n.eq_ignore_ascii_case(compact)
            })
            .map(|(_, v)| v.trim())
            .collect()
    }

    fn header(&self, name: &str) -> &str {
        self.headers(name)
            .first()
            .copied()
            .unwrap_or_else(|| panic!("no {name} in\n{}", self.text))
    }

    fn call_id(&self) -> &str {
        self.header("Call-ID")
    }

    /// The CSeq's number and method.
    fn cseq(&self) -> (u32, &str) {
        let (n, m) = self.header("CSeq").split_once(' ').unwrap();
        (n.trim().parse().unwrap(), m.trim())
    }

    /// A parameter of a header's value (`branch` of the top Via, `tag` of To).
    fn param(&self, header: &str, name: &str) -> Option<String> {
        self.header(header)
            .split(';')
            .skip(1)
            .filter_map(|p| p.split_once('='))
            .find(|(n, _)| n.trim().eq_ignore_ascii_case(name))
            .map(|(_, v)| v.trim().to_owned())
    }

    fn branch(&self) -> String {
        self.param("Via", "branch").unwrap()
    }

    fn to_tag(&self) -> Option<String> {
        self.param("To", "tag")
    }
}

/// A trunk on a loopback UDP port of its own, scripted by the test step by step: it answers
/// only what the test tells it to.
struct ScriptedTrunk {
    socket: tokio::net::UdpSocket,
    /// Requests taken but not yet asked for (retransmissions among them).
    unread: Vec<Sip>,
}

/// The To tag the scripted trunk answers with.
const TRUNK_TAG: &str = "scripted-callee";

impl ScriptedTrunk {
    async fn bind() -> ScriptedTrunk {
        ScriptedTrunk {
            socket: tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap(),
            unread: Vec::new(),
        }
    }

    fn addr(&self) -> SocketAddr {
        self.socket.local_addr().unwrap()
    }

    /// The next request with this method (responses and other requests are kept or passed
    /// over); panics if none comes within 20 s.
    async fn request(&mut self, method: &str) -> Sip {
        self.request_to(method, None).await
    }

    /// The next request with this method and, when `to_tag` is given, that To tag (responses
    /// and other requests are kept or passed over); panics if none comes within 20 s.
    async fn request_to(&mut self, method: &str, to_tag: Option<&str>) -> Sip {
        let wanted = |m: &Sip| {
            m.method() == Some(method) && to_tag.is_none_or(|t| m.to_tag().as_deref() == Some(t))
        };
        if let Some(i) = self.unread.iter().position(wanted) {
            return self.unread.remove(i);
        }
        let mut buf = vec![0u8; 65536];
        let wait = async {
            loop {
                let (n, from) = self.socket.recv_from(&mut buf).await.unwrap();
                let m = Sip {
                    text: String::from_utf8_lossy(&buf[..n]).into_owned(),
                    from,
                };
                if wanted(&m) {
                    return m;
                }
                if m.method().is_some() {
                    self.unread.push(m);
                }
            }
        };
        tokio::time::timeout(Duration::from_secs(20), wait)
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "no {method} (To tag {to_tag:?}) reached the trunk within 20 s; it had: {:#?}",
                    self.unread
                )
            })
    }

    /// Answers `req` with `status`, its To tagged with [`TRUNK_TAG`] unless it is already, and
    /// an SDP `body` when given.
    async fn answer(&self, req: &Sip, status: &str, sdp: Option<&str>) {
        self.answer_as(req, status, sdp, TRUNK_TAG).await;
    }

    /// [`ScriptedTrunk::answer`], tagging an untagged To with `tag` (another phone of a forked
    /// INVITE answering).
    async fn answer_as(&self, req: &Sip, status: &str, sdp: Option<&str>, tag: &str) {
        let mut head = format!("SIP/2.0 {status}\r\n");
        for via in req.headers("Via") {
            head.push_str(&format!("Via: {via}\r\n"));
        }
        let to = req.header("To");
        let to = if req.to_tag().is_some() || status.starts_with("100") {
            to.to_owned()
        } else {
            format!("{to};tag={tag}")
        };
        head.push_str(&format!(
            "From: {}\r\nTo: {to}\r\nCall-ID: {}\r\nCSeq: {}\r\nContact: <sip:callee@{}>\r\n",
            req.header("From"),
            req.call_id(),
            req.header("CSeq"),
            self.addr()
        ));
        let body = sdp.unwrap_or_default();
        if !body.is_empty() {
            head.push_str("Content-Type: application/sdp\r\n");
        }
        head.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
        self.socket
            .send_to(head.as_bytes(), req.from)
            .await
            .unwrap();
    }
}

/// The scripted callee's SDP: PCMU, which baton speaks.
fn scripted_sdp() -> String {
    format!(
        "v=0\r\no=callee 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n\
         m=audio {} RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\n",
        free_udp()
    )
}

/// A daemon whose one trunk is `trunk`, ringing for 1 s before it gives up.
async fn daemon_on_scripted(trunk: &ScriptedTrunk) -> support::Daemon {
    let cfg = format!(
        "[sip.trunks.scripted]\nuri = \"sip:{}\"\nring_timeout_s = 1\n",
        trunk.addr()
    );
    daemon("audio-fixtures/scenarios/demo.toml", &cfg, "")
        .await
        .0
}

/// `POST /calls` to "100" with this ring timeout, in a task: its status and answer.
fn place(d: &support::Daemon, ring_timeout_s: u32) -> tokio::task::JoinHandle<(u16, Value)> {
    let addr = d.addr;
    let body = format!(r#"{{"to": "100", "ring_timeout_s": {ring_timeout_s}}}"#);
    tokio::spawn(async move { sip_support::post(addr, "/calls", &body).await })
}

/// The placing ended with no answer, and no status from the trunk.
async fn answered_no_answer(placing: tokio::task::JoinHandle<(u16, Value)>) {
    let (status, placed) = placing.await.unwrap();
    assert_eq!(status, 200, "{placed}");
    assert_eq!(
        placed,
        serde_json::json!({"outcome": "no_answer", "status": null})
    );
}

/// Places a call on the scripted trunk, which rings (100, 180) and says nothing more until the
/// CANCEL that the ring timeout sends: the INVITE, the CANCEL, and the placing (`POST /calls`).
/// The CANCEL is checked to be that INVITE's (RFC 3261 §9.1: its Call-ID, CSeq number and top
/// Via branch), sent once the callee had rung for the ring timeout.
async fn rings_until_cancelled(
    d: &support::Daemon,
    trunk: &mut ScriptedTrunk,
) -> (Sip, Sip, tokio::task::JoinHandle<(u16, Value)>) {
    let placing = place(d, 1);
    let invite = trunk.request("INVITE").await;
    let invited = tokio::time::Instant::now();
    trunk.answer(&invite, "100 Trying", None).await;
    trunk.answer(&invite, "180 Ringing", None).await;
    let cancel = trunk.request("CANCEL").await;
    let rang = invited.elapsed();
    assert_eq!(cancel.call_id(), invite.call_id(), "{cancel:?}");
    assert_eq!(cancel.cseq(), (invite.cseq().0, "CANCEL"), "{cancel:?}");
    assert_eq!(cancel.branch(), invite.branch(), "{cancel:?}");
    assert_eq!(
        cancel.to_tag(),
        None,
        "a CANCEL's To is the INVITE's: {cancel:?}"
    );
    // Not at once: the callee rang for the ring timeout (the timer starts as the INVITE goes,
    // so a little of it may pass before the INVITE arrives).
    assert!(
        rang >= Duration::from_millis(500),
        "the CANCEL came {rang:?} after the INVITE, for a ring timeout of 1 s"
    );
    (invite, cancel, placing)
}

/// The ACK and the BYE with which baton ends a 200 that crossed its CANCEL: both of the
/// answered dialog (the INVITE's Call-ID, the callee's To tag), the ACK of the INVITE's CSeq.
async fn ack_and_bye(trunk: &mut ScriptedTrunk, invite: &Sip) -> (Sip, Sip) {
    let ack = trunk.request("ACK").await;
    assert_eq!(ack.call_id(), invite.call_id(), "{ack:?}");
    assert_eq!(ack.cseq(), (invite.cseq().0, "ACK"), "{ack:?}");
    assert_eq!(ack.to_tag().as_deref(), Some(TRUNK_TAG), "{ack:?}");
    let bye = trunk.request("BYE").await;
    assert_eq!(bye.call_id(), invite.call_id(), "{bye:?}");
    assert_eq!(bye.cseq().1, "BYE", "{bye:?}");
    assert!(bye.cseq().0 > invite.cseq().0, "{bye:?}");
    assert_eq!(bye.to_tag().as_deref(), Some(TRUNK_TAG), "{bye:?}");
    (ack, bye)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_ring_timeout_cancels_the_invite_and_acks_its_487() {
    let mut trunk = ScriptedTrunk::bind().await;
    let d = daemon_on_scripted(&trunk).await;
    let (invite, cancel, placing) = rings_until_cancelled(&d, &mut trunk).await;
    trunk.answer(&cancel, "200 OK", None).await;
    trunk.answer(&invite, "487 Request Terminated", None).await;
    // The 487 is acknowledged in the INVITE's own transaction.
    let ack = trunk.request("ACK").await;
    assert_eq!(ack.call_id(), invite.call_id(), "{ack:?}");
    assert_eq!(ack.cseq(), (invite.cseq().0, "ACK"), "{ack:?}");
    assert_eq!(ack.branch(), invite.branch(), "{ack:?}");
    answered_no_answer(placing).await;
    assert_eq!(d.calls_ended().await, 0, "the slot was given back");
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_200_that_crosses_the_cancel_is_acked_and_hung_up() {
    let mut trunk = ScriptedTrunk::bind().await;
    let d = daemon_on_scripted(&trunk).await;
    let (invite, cancel, placing) = rings_until_cancelled(&d, &mut trunk).await;
    // The callee picked up as the CANCEL was on its way: the INVITE is answered 200, and the
    // CANCEL, finding it answered, changes nothing.
    trunk.answer(&invite, "200 OK", Some(&scripted_sdp())).await;
    trunk.answer(&cancel, "200 OK", None).await;
    let (_, bye) = ack_and_bye(&mut trunk, &invite).await;
    trunk.answer(&bye, "200 OK", None).await;
    // The outcome was the ring timeout's, told as it came.
    answered_no_answer(placing).await;
    assert_eq!(d.calls_ended().await, 0, "the slot was given back");
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_lets_the_bye_of_a_200_that_crossed_the_cancel_go_out_first() {
    let mut trunk = ScriptedTrunk::bind().await;
    let d = daemon_on_scripted(&trunk).await;
    let (invite, cancel, placing) = rings_until_cancelled(&d, &mut trunk).await;
    let (status, placed) = placing.await.unwrap();
    assert_eq!(status, 200, "{placed}");
    assert_eq!(placed["outcome"], "no_answer", "{placed}");
    // The SIP side stops while the CANCEL is unanswered...
    let svc = d.app.sip.get().unwrap().clone();
    let mut stop = tokio::spawn(async move { svc.stop().await });
    // (given a moment to get under way: a stop that does not wait is over by then)
    let _ = tokio::time::timeout(Duration::from_millis(500), &mut stop).await;
    // ...and the 200 crosses the CANCEL: it is still acknowledged and hung up, the BYE seen
    // through to its answer before the stop is over.
    trunk.answer(&invite, "200 OK", Some(&scripted_sdp())).await;
    trunk.answer(&cancel, "200 OK", None).await;
    let (_, bye) = ack_and_bye(&mut trunk, &invite).await;
    // The first BYE goes unanswered, as if lost on the way: it is sent again (RFC 3261
    // §17.1.2.2, timer E), the stop still waiting for its answer.
    let again = trunk.request("BYE").await;
    assert_eq!(again.branch(), bye.branch(), "{again:?}");
    assert_eq!(again.cseq(), bye.cseq(), "{again:?}");
    assert!(
        !stop.is_finished(),
        "the stop waits for the BYE to be answered"
    );
    trunk.answer(&again, "200 OK", None).await;
    tokio::time::timeout(Duration::from_secs(20), stop)
        .await
        .expect("the stop ends once the BYE is answered")
        .unwrap();
    d.stop().await;
}

/// The To tag of the second 200 a forking trunk answers with: another phone picking up.
const FORK_TAG: &str = "scripted-fork";

/// A forked INVITE answered by two phones as its CANCEL crosses: two 200s with To tags of their
/// own (two dialogs, one Call-ID), each acknowledged and hung up with a BYE of its own, while
/// the SIP side stops. The BYE to the phone tagged `lost` goes unanswered the first time, the
/// other is answered at once: the stop still waits for the lost BYE's resend and its answer, one
/// dialog's answer never standing for the other's.
async fn a_stop_waits_for_the_bye_of_each_phone_of_a_fork(lost: &str) {
    let mut trunk = ScriptedTrunk::bind().await;
    let d = daemon_on_scripted(&trunk).await;
    let (invite, cancel, placing) = rings_until_cancelled(&d, &mut trunk).await;
    answered_no_answer(placing).await;
    let svc = d.app.sip.get().unwrap().clone();
    let mut stop = tokio::spawn(async move { svc.stop().await });
    // (given a moment to get under way: a stop that does not wait is over by then)
    let _ = tokio::time::timeout(Duration::from_millis(500), &mut stop).await;
    trunk.answer(&invite, "200 OK", Some(&scripted_sdp())).await;
    trunk
        .answer_as(&invite, "200 OK", Some(&scripted_sdp()), FORK_TAG)
        .await;
    trunk.answer(&cancel, "200 OK", None).await;
    // Each phone's dialog is ended with a BYE of its own: the INVITE's Call-ID, that phone's
    // To tag, a transaction of its own.
    let mut byes = Vec::new();
    for tag in [TRUNK_TAG, FORK_TAG] {
        let bye = trunk.request_to("BYE", Some(tag)).await;
        assert_eq!(bye.call_id(), invite.call_id(), "{bye:?}");
        assert_eq!(bye.cseq().1, "BYE", "{bye:?}");
        byes.push(bye);
    }
    assert_ne!(byes[0].branch(), byes[1].branch(), "{byes:#?}");
    let (bye, answered): (Vec<_>, Vec<_>) = byes
        .into_iter()
        .partition(|b| b.to_tag().as_deref() == Some(lost));
    trunk.answer(&answered[0], "200 OK", None).await;
    // The lost BYE is sent again (RFC 3261 §17.1.2.2, timer E), the stop still waiting for its
    // answer although the other phone's came.
    let again = trunk.request_to("BYE", Some(lost)).await;
    assert_eq!(again.branch(), bye[0].branch(), "{again:?}");
    assert_eq!(again.cseq(), bye[0].cseq(), "{again:?}");
    assert!(
        !stop.is_finished(),
        "the stop waits for the BYE to {lost} to be answered"
    );
    trunk.answer(&again, "200 OK", None).await;
    tokio::time::timeout(Duration::from_secs(20), stop)
        .await
        .expect("the stop ends once both BYEs are answered")
        .unwrap();
    d.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_waits_for_the_lost_bye_of_the_first_200_of_a_fork() {
    a_stop_waits_for_the_bye_of_each_phone_of_a_fork(TRUNK_TAG).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_waits_for_the_lost_bye_of_the_second_200_of_a_fork() {
    a_stop_waits_for_the_bye_of_each_phone_of_a_fork(FORK_TAG).await;
}

/// A call still ringing when the server ends every call (the drain's deadline) is cancelled
/// then: the callee's phone does not ring on for its whole ring timeout after baton is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ending_every_call_cancels_an_invite_still_ringing() {
    let mut trunk = ScriptedTrunk::bind().await;
    let d = daemon_on_scripted(&trunk).await;
    let placing = place(&d, 120);
    let invite = trunk.request("INVITE").await;
    trunk.answer(&invite, "100 Trying", None).await;
    trunk.answer(&invite, "180 Ringing", None).await;
    d.app.calls.hang_up_all();
    // Within the trunk's 20 s wait, not the 120 s ring timeout.
    let cancel = trunk.request("CANCEL").await;
    assert_eq!(cancel.call_id(), invite.call_id(), "{cancel:?}");
    assert_eq!(cancel.branch(), invite.branch(), "{cancel:?}");
    trunk.answer(&cancel, "200 OK", None).await;
    trunk.answer(&invite, "487 Request Terminated", None).await;
    let (status, placed) = placing.await.unwrap();
    assert_eq!(status, 200, "{placed}");
    assert_eq!(placed["outcome"], "no_answer", "{placed}");
    assert_eq!(d.calls_ended().await, 0, "the slot was given back");
    d.stop().await;
}

/// Called off before the trunk said anything: the outcome is no answer (not "no response
/// from the trunk within 120 s", a ring timeout that never ran out), and the CANCEL goes out
/// once the trunk's first answer makes it possible (RFC 3261 §9.1).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_called_off_before_any_answer_reports_no_answer() {
    let mut trunk = ScriptedTrunk::bind().await;
    let d = daemon_on_scripted(&trunk).await;
    let placing = place(&d, 120);
    let invite = trunk.request("INVITE").await;
    d.app.calls.hang_up_all();
    // No CANCEL before the trunk's first answer (RFC 3261 §9.1); meanwhile the hang-up is
    // taken (a moment for it to be, not a figure under test).
    let early = tokio::time::timeout(Duration::from_millis(500), trunk.request("CANCEL")).await;
    assert!(early.is_err(), "a CANCEL before any answer: {early:?}");
    trunk.answer(&invite, "100 Trying", None).await;
    let cancel = trunk.request("CANCEL").await;
    assert_eq!(cancel.call_id(), invite.call_id(), "{cancel:?}");
    trunk.answer(&cancel, "200 OK", None).await;
    trunk.answer(&invite, "487 Request Terminated", None).await;
    answered_no_answer(placing).await;
    d.stop().await;
}
