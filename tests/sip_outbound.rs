//! Outbound SIP calls (`POST /calls`, `baton call`) on a trunk played by SIPp (Debian package
//! `sip-tester`) on loopback, with each typed outcome: answered (the callee speaks over RTP and
//! the agent set answers it, exactly as on an inbound call; baton hangs up when told), busy
//! (486), rejected (404, with its status), no answer (the ring timeout ends it with CANCEL) and
//! failed (the callee answers with no codec in common, or nothing answers at the trunk's
//! address).

mod sip_support;
mod support;

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
    let (status, e) = post_call(
        &d,
        r#"{"to": "100", "trunk": "callee", "ring_timeout_s": 0}"#,
    )
    .await;
    assert_eq!(status, 400, "{e}");
    assert!(
        e["error"].as_str().unwrap().contains("ring_timeout_s is 0"),
        "{e}"
    );
    assert_eq!(d.calls_ended().await, 0, "every slot was given back");
    d.stop().await;
}
