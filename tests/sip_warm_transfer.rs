//! A warm transfer to a person, end to end on loopback: SIPp (Debian package `sip-tester`) is
//! the caller and, as a second instance, the person's phone; the test plays both parties' media
//! (their RTP). Asha (the embedded mock, `tests/data/transfer/human_blind.toml`) announces Ravi
//! and calls `transfer_to_ravi`; Ravi is a `kind = "human"` agent with `transfer = "warm"`
//! (`config/agents/front_desk.toml` with its destination pointed at the person's SIPp). baton
//! dials Ravi while the caller stays with Asha, briefs him on his leg only, and:
//! - accepted (key 1): caller and person are bridged — each hears the other through baton;
//! - declined (603 on the phone, or key 2 after the brief), busy (486): the caller is back with
//!   Asha, told why, and the person's leg is released;
//! - the caller hangs up while the person's phone rings: the INVITE is cancelled;
//! - the person hangs up during the brief: the caller is back with Asha.
//!
//! Every outcome is one typed `transfer` event on the call's feed and counted on `/metrics`.

use crate::sip_support;
use crate::support;

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::Value;
use sip_support::{
    MediaPeer, Scenario, clip_blocks, daemon, in_dialog, invite, recv, scenario, scratch,
    voiced_blocks,
};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const SCENARIO: &str = "tests/data/transfer/human_blind.toml";

/// The front-desk set with Ravi reached warm at the person's SIPp on `port`.
fn warm_set(dir: &Path, port: u16, ring_s: u64, screen: bool) -> PathBuf {
    warm_set_with(dir, port, ring_s, screen, "", "")
}

/// [`warm_set`] with `dest_extra` lines in Ravi's destination and `set_extra` (more agents)
/// at the end.
fn warm_set_with(
    dir: &Path,
    port: u16,
    ring_s: u64,
    screen: bool,
    dest_extra: &str,
    set_extra: &str,
) -> PathBuf {
    let text = std::fs::read_to_string(Path::new(ROOT).join("config/agents/front_desk.toml"))
        .unwrap()
        .replace(
            "to = \"sip:ravi@127.0.0.1:5999\"",
            &format!("to = \"sip:ravi@127.0.0.1:{port}\""),
        )
        .replace("transfer = \"blind\"", "transfer = \"warm\"")
        .replace(
            "ring_timeout_s = 25",
            &format!(
                "ring_timeout_s = {ring_s}{}\n{dest_extra}",
                if screen { "\nscreen = true" } else { "" }
            ),
        );
    let text = format!("{text}\n{set_extra}\n");
    assert!(text.contains("transfer = \"warm\""), "{text}");
    let path = dir.join("front_desk_warm.toml");
    std::fs::write(&path, text).unwrap();
    path
}

/// The caller: calls baton, stays `stay_ms` after the answer, then hangs up.
fn caller_steps(media_port: u16, stay_ms: u64) -> Vec<String> {
    vec![
        invite(&media_port.to_string(), "0", "a=rtpmap:0 PCMU/8000\n"),
        recv(100, true),
        recv(200, false),
        in_dialog("ACK", 1, None),
        format!("  <pause milliseconds=\"{stay_ms}\"/>\n"),
        in_dialog("BYE", 2, None),
        recv(200, false),
    ]
}

/// The caller: calls baton and stays until baton hangs up (BYE), within `wait_ms`.
fn caller_hung_up_by_baton(media_port: u16, wait_ms: u64) -> Vec<String> {
    vec![
        invite(&media_port.to_string(), "0", "a=rtpmap:0 PCMU/8000\n"),
        recv(100, true),
        recv(200, false),
        in_dialog("ACK", 1, None),
        recv_request("BYE", wait_ms),
        r#"  <send>
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
        .into(),
    ]
}

/// A response of the person's phone to the INVITE (or another request) just received.
fn respond(status: &str, sdp_port: Option<u16>) -> String {
    let (ct, body) = match sdp_port {
        Some(p) => (
            "Content-Type: application/sdp\n      ",
            format!(
                "v=0\no=ravi 1 1 IN IP[local_ip_type] [local_ip]\ns=-\nc=IN IP[media_ip_type] [media_ip]\nt=0 0\nm=audio {p} RTP/AVP 0 101\na=rtpmap:0 PCMU/8000\na=rtpmap:101 telephone-event/8000\na=fmtp:101 0-15\n"
            ),
        ),
        None => ("", String::new()),
    };
    let retrans = if status.starts_with("200") && sdp_port.is_some() {
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
      Contact: <sip:ravi@[local_ip]:[local_port]>
      {ct}Content-Length: [len]

{body}
    ]]>
  </send>
"#
    )
}

fn recv_request(method: &str, timeout_ms: u64) -> String {
    format!("  <recv request=\"{method}\" timeout=\"{timeout_ms}\"/>\n")
}

/// The person's phone: rings `ring_ms`, then answers with media at `media_port`; baton ends it.
fn person_answers(media_port: u16, ring_ms: u64) -> Vec<String> {
    vec![
        recv_request("INVITE", 30000),
        respond("180 Ringing", None),
        format!("  <pause milliseconds=\"{ring_ms}\"/>\n"),
        respond("200 OK", Some(media_port)),
        recv_request("ACK", 5000),
        recv_request("BYE", 30000),
        respond("200 OK", None),
    ]
}

/// The person's phone: rings, then refuses with `status`.
fn person_refuses(status: &str) -> Vec<String> {
    vec![
        recv_request("INVITE", 30000),
        respond("180 Ringing", None),
        "  <pause milliseconds=\"600\"/>\n".into(),
        respond(status, None),
        recv_request("ACK", 5000),
    ]
}

/// The person's phone rings until the INVITE is cancelled.
fn person_rings_until_cancelled() -> Vec<String> {
    vec![
        recv_request("INVITE", 30000),
        respond("180 Ringing", None),
        recv_request("CANCEL", 30000),
        respond("200 OK", None),
        r#"  <send>
    <![CDATA[
      SIP/2.0 487 Request Terminated
      [last_Via:]
      [last_From:]
      [last_To:];tag=[pid]SIPpTag01[call_number]
      [last_Call-ID:]
      CSeq: [last_cseq_number] INVITE
      Content-Length: 0

    ]]>
  </send>
"#
        .into(),
        recv_request("ACK", 5000),
    ]
}

/// The person's phone answers, then hangs up after `after_ms` (during the brief).
fn person_hangs_up(media_port: u16, after_ms: u64) -> Vec<String> {
    vec![
        r#"  <recv request="INVITE" timeout="30000">
    <action>
      <ereg regexp=".*" search_in="hdr" header="From:" check_it="true" assign_to="baton"/>
      <ereg regexp="sip:[^>;]*" search_in="hdr" header="Contact:" check_it="true" assign_to="contact"/>
    </action>
  </recv>
"#
        .into(),
        respond("180 Ringing", None),
        "  <pause milliseconds=\"300\"/>\n".into(),
        respond("200 OK", Some(media_port)),
        recv_request("ACK", 5000),
        format!("  <pause milliseconds=\"{after_ms}\"/>\n"),
        r#"  <send retrans="500">
    <![CDATA[
      BYE [$contact] SIP/2.0
      Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
      From: <sip:ravi@[local_ip]:[local_port]>;tag=[pid]SIPpTag01[call_number]
      To: [$baton]
      [last_Call-ID:]
      CSeq: 2 BYE
      Contact: <sip:ravi@[local_ip]:[local_port]>
      Max-Forwards: 70
      Content-Length: 0

    ]]>
  </send>
"#
        .into(),
        recv(200, false),
    ]
}

/// The caller heard Asha's announcement and, once the transfer failed, her reply saying so.
fn told_why(heard: &sip_support::Heard) {
    let both = clip_blocks("asha_02.wav") + clip_blocks("asha_01.wav");
    let got = voiced_blocks(&heard.pcm);
    assert!(
        got + 4 >= both,
        "the caller heard the announcement and the agent's reply: {got} of {both} voiced blocks"
    );
}

/// The person's words at 8 kHz: four seconds of silence (they listen to the brief and press 1 at
/// three), then a bundled person's greeting for the caller.
fn person_words() -> Vec<i16> {
    let clip =
        baton::audio::wav::read(&Path::new(ROOT).join("audio-fixtures/answering/h_priya.wav"))
            .unwrap();
    let mut pcm = vec![0i16; 8000 * 4];
    pcm.extend(baton::audio::resample::resample_all(&clip.samples, clip.rate, 8000).unwrap());
    pcm.extend(vec![0i16; 8000 * 3]);
    pcm
}

/// A stereo recording's channels (left, right) at its rate.
struct Stereo {
    left: Vec<i16>,
    right: Vec<i16>,
    rate: u32,
}

/// The call's recording `name` in `dir`, once its writer has finished it.
async fn recording(dir: &Path, name: &str) -> Option<Stereo> {
    let path = dir.join("rec").join(name);
    for _ in 0..100 {
        if let Ok(w) = hound::WavReader::open(&path)
            && w.len() > 0
        {
            let rate = w.spec().sample_rate;
            let samples: Vec<i16> = w.into_samples::<i16>().map_while(Result::ok).collect();
            return Some(Stereo {
                left: samples.iter().step_by(2).copied().collect(),
                right: samples.iter().skip(1).step_by(2).copied().collect(),
                rate,
            });
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    None
}

/// baton's RTP address in the first INVITE of a SIPp message log, once it is there.
async fn rtp_address_in(log: &Path) -> std::net::SocketAddr {
    for _ in 0..600 {
        let text = std::fs::read_to_string(log).unwrap_or_default();
        if let Some(port) = text
            .lines()
            .find_map(|l| l.strip_prefix("m=audio "))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|p| p.parse::<u16>().ok())
        {
            return std::net::SocketAddr::from(([127, 0, 0, 1], port));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no INVITE with an SDP offer in {}", log.display());
}

/// A bundled answered-leg opening (`audio-fixtures/answering/<id>.wav`) at 8 kHz.
fn answering(id: &str) -> Vec<i16> {
    let clip = baton::audio::wav::read(
        &Path::new(ROOT).join(format!("audio-fixtures/answering/{id}.wav")),
    )
    .unwrap();
    let mut pcm = baton::audio::resample::resample_all(&clip.samples, clip.rate, 8000).unwrap();
    pcm.extend(vec![0i16; 8000 * 2]);
    pcm
}

struct Run {
    /// The caller's recording (left: caller, right: what they heard) and the person's (left:
    /// the person, right: what they heard).
    caller_rec: Option<Stereo>,
    person_rec: Option<Stereo>,
    events: Vec<Value>,
    caller_heard: sip_support::Heard,
    person_heard: Option<sip_support::Heard>,
    caller_sipp: sip_support::SippRun,
    person_sipp: sip_support::SippRun,
    metrics: String,
}

/// How the person's side behaves.
enum Person {
    /// Answers after `ring_ms`; their media peer presses these keys (after baton's first packet).
    Answers {
        ring_ms: u64,
        keys: Vec<(Duration, char)>,
    },
    Refuses(&'static str),
    RingsOut,
    HangsUp {
        after_ms: u64,
    },
    /// Answers (screened) and plays an answering machine's greeting from the answer on.
    Machine {
        fixture: &'static str,
    },
    /// Answers after 300 ms and says `words` from baton's first packet on (no keys).
    Speaks {
        words: Vec<i16>,
    },
}

async fn run(name: &str, person: Person, caller_stay_ms: u64, ring_s: u64) -> Option<Run> {
    run_on("", name, person, caller_stay_ms, ring_s).await
}

/// [`run`] on the embedded mock's `profile` ("": the scenario's, gemini-3.8).
async fn run_on(
    profile: &str,
    name: &str,
    person: Person,
    caller_stay_ms: u64,
    ring_s: u64,
) -> Option<Run> {
    let model = if profile.is_empty() {
        String::new()
    } else {
        format!("profile = \"{profile}\"")
    };
    run_with_model(&model, name, person, caller_stay_ms, ring_s).await
}

/// [`run`] with `model` in the daemon's `[model]` ("": the embedded mock on its scenario).
async fn run_with_model(
    model: &str,
    name: &str,
    person: Person,
    caller_stay_ms: u64,
    ring_s: u64,
) -> Option<Run> {
    run_full(
        SCENARIO,
        model,
        name,
        person,
        caller_stay_ms,
        ring_s,
        ("", ""),
    )
    .await
}

/// [`run_full`] on `scenario_path` with a 20 s ring timeout and the set as shipped.
async fn run_scenario(
    scenario_path: &str,
    model: &str,
    name: &str,
    person: Person,
    caller_stay_ms: u64,
) -> Option<Run> {
    run_full(
        scenario_path,
        model,
        name,
        person,
        caller_stay_ms,
        20,
        ("", ""),
    )
    .await
}

/// The whole harness: `set` is (lines for Ravi's destination, more of the set).
#[allow(clippy::too_many_arguments)]
async fn run_full(
    scenario_path: &str,
    model: &str,
    name: &str,
    person: Person,
    caller_stay_ms: u64,
    ring_s: u64,
    set: (&str, &str),
) -> Option<Run> {
    let (dest_extra, set_extra) = set;
    let profile = model;
    if std::env::var_os("WARM_TRACE").is_some() {
        let _ = tracing_subscriber::fmt()
            .with_env_filter("baton=debug")
            .with_test_writer()
            .try_init();
    }
    if !sip_support::require("sipp", "sip-tester") {
        return None;
    }
    let dir = scratch(name);
    let person_port = sip_support::free_udp();
    let screened = matches!(person, Person::Machine { .. });
    let set = warm_set_with(&dir, person_port, ring_s, screened, dest_extra, set_extra);
    let extra = format!(
        "[agents]\nset = \"{}\"\n[store]\nurl = \"sqlite://{}/baton.db\"\nrecordings = \"{}/rec\"\n",
        set.display(),
        dir.display(),
        dir.display()
    );
    let (d, addr) = if profile.is_empty() {
        daemon(scenario_path, "", &extra).await
    } else {
        // The profile goes into [model], which the daemon's config opens first.
        // A separate mock plays the scenario it was started with.
        let scenario = if profile.contains("url =") {
            ""
        } else {
            scenario_path
        };
        let d = sip_support::daemon_on_model(scenario, profile, &extra).await;
        let addr = d
            .app
            .sip
            .get()
            .and_then(|s| s.addr(baton::leg::sip::config::Transport::Udp));
        (d, addr.expect("the SIP listener has a UDP transport"))
    };
    let caller_peer = MediaPeer::bind().await;
    let person_peer = MediaPeer::bind().await;
    let person_xml = match &person {
        Person::Answers { ring_ms, .. } => person_answers(person_peer.port(), *ring_ms),
        Person::Refuses(status) => person_refuses(status),
        Person::RingsOut => person_rings_until_cancelled(),
        Person::HangsUp { after_ms } => person_hangs_up(person_peer.port(), *after_ms),
        Person::Machine { .. } | Person::Speaks { .. } => person_answers(person_peer.port(), 300),
    };
    let person_xml = scenario(&format!("{name}-person"), &person_xml);
    let caller_xml = if dest_extra.contains("hang_up") {
        scenario(
            name,
            &caller_hung_up_by_baton(caller_peer.port(), caller_stay_ms),
        )
    } else {
        scenario(name, &caller_steps(caller_peer.port(), caller_stay_ms))
    };
    let listen = Duration::from_millis(caller_stay_ms + 500);
    let person_listens = matches!(
        person,
        Person::Answers { .. }
            | Person::HangsUp { .. }
            | Person::Machine { .. }
            | Person::Speaks { .. }
    );
    let machine = match &person {
        Person::Machine { fixture } => Some(*fixture),
        _ => None,
    };
    let keys = match &person {
        Person::Answers { keys, .. } => keys.clone(),
        _ => Vec::new(),
    };
    let events = async { sip_support::follow(&d).await.await.unwrap() };
    let caller_words = sip_support::caller_turn_8k();
    let sipp_log = dir.join(format!("msg-{person_port}.log"));
    let words = match &person {
        Person::Speaks { words } => words.clone(),
        _ => person_words(),
    };
    let person_media = async {
        if let Some(fixture) = machine {
            // A machine speaks from the answer on, whether or not anything is sent to it:
            // baton's media address comes from the INVITE SIPp logged.
            let to = rtp_address_in(&sipp_log).await;
            Some(
                person_peer
                    .converse_with(
                        Some(to),
                        &answering(fixture),
                        0,
                        Default::default(),
                        listen,
                        &[],
                    )
                    .await,
            )
        } else if person_listens {
            Some(
                person_peer
                    .converse_keys(&words, 0, Default::default(), listen, &keys)
                    .await,
            )
        } else {
            None
        }
    };
    let person_run = person_phone(&dir, person_xml, person_port).await;
    let (caller_sipp, person_sipp, caller_heard, person_heard, events) = tokio::join!(
        sip_support::sipp(&dir, Scenario::Xml(caller_xml), addr, &["-m", "1"]),
        person_run,
        caller_peer.converse(&caller_words, 0, Default::default(), listen),
        person_media,
        events,
    );
    let metrics = support::http(
        &d.addr,
        "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
    )
    .await;
    let id = events
        .iter()
        .find_map(|e| e["call_id"].as_str().map(str::to_owned))
        .unwrap_or_default();
    let caller_rec = recording(&dir, &format!("{id}.wav")).await;
    let person_rec = if person_listens {
        recording(&dir, &format!("{id}.person.wav")).await
    } else {
        None
    };
    Some(Run {
        caller_rec,
        person_rec,
        events,
        caller_heard,
        person_heard,
        caller_sipp,
        person_sipp,
        metrics,
    })
}

/// The person's phone: SIPp playing `xml` on `port`, listening before this returns (baton may
/// dial it at any moment once the caller has called). The future it gives is SIPp's run.
async fn person_phone(
    dir: &Path,
    xml: String,
    port: u16,
) -> impl std::future::Future<Output = sip_support::SippRun> {
    let mut run = tokio::spawn({
        let dir = dir.to_path_buf();
        async move { sip_support::sipp_on(&dir, Scenario::Xml(xml), port, None, &["-m", "1"]).await }
    });
    sip_support::until_listening(&mut run, port).await;
    async move {
        run.await
            .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
    }
}

fn of_type<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == kind).collect()
}

/// The transfer's stages in order, and its one finished report.
fn transfer_of(events: &[Value]) -> (Vec<String>, Value) {
    let steps = of_type(events, "transfer");
    let stages = steps
        .iter()
        .filter(|e| e["event"] == "stage")
        .map(|e| e["stage"].as_str().unwrap_or_default().to_owned())
        .collect();
    let finished: Vec<_> = steps.iter().filter(|e| e["event"] == "finished").collect();
    assert_eq!(finished.len(), 1, "one typed outcome: {steps:#?}");
    (stages, (*finished[0]).clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_person_is_briefed_accepts_with_a_key_and_both_hear_each_other() {
    accepted_on("").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_transfer_connects_on_gemini_2_5() {
    accepted_on("gemini-2.5").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_transfer_connects_on_gemini_3_1() {
    accepted_on("gemini-3.1").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_transfer_connects_on_openai_realtime() {
    accepted_on("openai").await;
}

/// The accepted warm transfer on `profile`: briefed on the person's leg, connected by key 1,
/// each party hearing the other through the bridge.
async fn accepted_on(profile: &str) {
    let person = Person::Answers {
        ring_ms: 800,
        keys: vec![(Duration::from_millis(3000), '1')],
    };
    let name = format!("warm-accepted{}", if profile.is_empty() { "" } else { "-" });
    let Some(r) = run_on(profile, &format!("{name}{profile}"), person, 14_000, 20).await else {
        return;
    };
    r.caller_sipp.assert_ok();
    r.person_sipp.assert_ok();
    let asked = of_type(&r.events, "transfer_requested");
    assert_eq!(asked.len(), 1, "{:#?}", r.events);
    assert_eq!(asked[0]["plan"], "warm");
    let (stages, finished) = transfer_of(&r.events);
    for s in ["dialing", "ringing", "briefing", "bridged"] {
        assert!(stages.iter().any(|x| x == s), "{s} in {stages:?}");
    }
    assert_eq!(finished["outcome"]["kind"], "connected", "{finished:#}");
    assert!(finished["setup_ms"].is_u64(), "{finished:#}");
    assert!(
        finished["ring_ms"].as_u64().unwrap_or(0) >= 500,
        "{finished:#}"
    );
    // Dead air at the switch: from the bridge to the first frame of the person's audio played
    // to the caller (their packets arrive every 20 ms; what the person leaves silent is theirs).
    let dead_air: Vec<_> = of_type(&r.events, "transfer")
        .into_iter()
        .filter(|e| e["event"] == "dead_air")
        .collect();
    assert_eq!(dead_air.len(), 1, "{dead_air:#?}");
    assert_eq!(dead_air[0]["capped"], false, "{dead_air:#?}");
    assert!(
        // Typically 20–40 ms; the bound leaves room for a loaded machine's scheduling, while
        // waiting on the brief or a refilling buffer would cost hundreds of ms or the cap.
        dead_air[0]["ms"].as_u64().is_some_and(|ms| ms <= 200),
        "no more than a few frames between the bridge and the person's audio: {dead_air:#?}"
    );
    // The recordings: the person's leg has the brief (what they heard before the bridge) and
    // their own words; the caller's has the person's words after the bridge.
    let at = |stage: &str| {
        of_type(&r.events, "transfer")
            .into_iter()
            .find(|e| e["event"] == "stage" && e["stage"] == stage)
            .and_then(|e| e["at_ms"].as_u64())
            .unwrap_or_else(|| panic!("no {stage} stage: {:#?}", r.events))
    };
    let (briefing, bridged) = (at("briefing"), at("bridged"));
    let p = r.person_rec.as_ref().expect("the person's leg is recorded");
    let cut = |pcm: &[i16], rate: u32, from_ms: u64, to_ms: u64| -> Vec<i16> {
        let at =
            |ms: u64| (ms.saturating_mul(u64::from(rate)) / 1000).min(pcm.len() as u64) as usize;
        pcm[at(from_ms)..at(to_ms)].to_vec()
    };
    let brief_heard = voiced_blocks(&cut(&p.right, p.rate, 0, bridged - briefing));
    assert!(
        brief_heard >= 10,
        "the brief is on the person's leg of the recording: {brief_heard} voiced blocks before \
         the bridge"
    );
    assert!(
        voiced_blocks(&p.left) >= 10,
        "the person's own words are on their leg of the recording"
    );
    let c = r.caller_rec.as_ref().expect("the caller's leg is recorded");
    let after = voiced_blocks(&cut(&c.right, c.rate, bridged, u64::MAX));
    assert!(
        after >= 10,
        "the caller's recording has the person's words after the bridge: {after} voiced blocks"
    );
    // The person heard the brief (baton's audio on their leg before they pressed 1).
    let person = r.person_heard.expect("the person's media");
    assert!(
        voiced_blocks(&person.pcm) >= 10,
        "the person heard the brief: {} voiced blocks",
        voiced_blocks(&person.pcm)
    );
    // The caller heard the person's words through the bridge: the person's clip starts a
    // second after their first packet, well after the answer.
    let words = voiced_blocks(&person_words());
    let heard = voiced_blocks(&r.caller_heard.pcm);
    assert!(
        heard >= words,
        "the caller heard Asha and then the person ({heard} voiced blocks, the person's words \
         alone are {words})"
    );
    // And the person heard the caller? The caller's question was over before the bridge; the
    // bridge carries every caller frame to the person's leg from the accept on.
    assert!(
        person.packets > 100,
        "the person's leg carried audio after the bridge: {} packets",
        person.packets
    );
    assert!(
        r.metrics
            .contains("baton_transfer_dead_air_ms_count{plan=\"warm\"} 1"),
        "the bridge's dead air is on /metrics:\n{}",
        r.metrics
            .lines()
            .filter(|l| l.contains("dead_air"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(
        r.metrics
            .contains("baton_transfers_total{plan=\"warm\",kind=\"connected\"} 1"),
        "counted: {}",
        r.metrics
            .lines()
            .filter(|l| l.contains("transfer"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declining_phone_returns_the_caller_to_the_agent() {
    let Some(r) = run("warm-declined", Person::Refuses("603 Decline"), 12_000, 20).await else {
        return;
    };
    r.caller_sipp.assert_ok();
    r.person_sipp.assert_ok();
    let (_, finished) = transfer_of(&r.events);
    assert_eq!(finished["outcome"]["kind"], "declined", "{finished:#}");
    assert_eq!(finished["status"], 603);
    told_why(&r.caller_heard);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_phone_returns_the_caller_to_the_agent() {
    let Some(r) = run("warm-busy", Person::Refuses("486 Busy Here"), 12_000, 20).await else {
        return;
    };
    r.caller_sipp.assert_ok();
    r.person_sipp.assert_ok();
    let (_, finished) = transfer_of(&r.events);
    assert_eq!(finished["outcome"]["kind"], "busy", "{finished:#}");
    assert_eq!(finished["status"], 486);
    told_why(&r.caller_heard);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_caller_hanging_up_while_the_phone_rings_cancels_it() {
    let Some(r) = run("warm-caller-gone", Person::RingsOut, 5_000, 20).await else {
        return;
    };
    r.caller_sipp.assert_ok();
    // SIPp's scenario passes only if baton sent CANCEL (and ACKed the 487).
    r.person_sipp.assert_ok();
    let (_, finished) = transfer_of(&r.events);
    assert_eq!(
        finished["outcome"]["kind"], "caller_hung_up",
        "{finished:#}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nobody_answering_returns_the_caller_after_the_ring_timeout() {
    let Some(r) = run("warm-no-answer", Person::RingsOut, 14_000, 5).await else {
        return;
    };
    r.caller_sipp.assert_ok();
    r.person_sipp.assert_ok();
    let (_, finished) = transfer_of(&r.events);
    assert_eq!(finished["outcome"]["kind"], "no_answer", "{finished:#}");
    told_why(&r.caller_heard);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_person_hanging_up_during_the_brief_returns_the_caller() {
    let Some(r) = run(
        "warm-person-gone",
        Person::HangsUp { after_ms: 700 },
        9_000,
        20,
    )
    .await
    else {
        return;
    };
    r.caller_sipp.assert_ok();
    r.person_sipp.assert_ok();
    let (_, finished) = transfer_of(&r.events);
    assert_eq!(
        finished["outcome"]["kind"], "person_hung_up",
        "{finished:#}"
    );
}

/// Profiles of a separate `baton mock-model` and the real model ids a user would configure.
const REMOTE: [(&str, &str); 4] = [
    ("gemini-3.8", "models/gemini-3.8-live"),
    (
        "gemini-2.5",
        "models/gemini-2.5-flash-native-audio-preview-09-2025",
    ),
    ("gemini-3.1", "models/gemini-3.1-flash-live-preview"),
    ("openai", "gpt-realtime"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_transfer_connects_on_a_separate_model_addressed_by_a_real_model_id() {
    // All four at once: each call has its own daemon, mock, SIPp pair and ports.
    futures_util::future::join_all(REMOTE.map(|(profile, id)| remote(profile, id))).await;
}

async fn remote(profile: &'static str, id: &'static str) {
    let (_mock, url) = support::start_mock_model(profile, &Path::new(ROOT).join(SCENARIO));
    let openai = if profile == "openai" {
        "profile = \"openai\"\n"
    } else {
        ""
    };
    let model = format!("{openai}url = \"{url}\"\nmodel = \"{id}\"");
    let person = Person::Answers {
        ring_ms: 800,
        keys: vec![(Duration::from_millis(3000), '1')],
    };
    let name = format!("warm-remote-{profile}");
    let Some(r) = run_with_model(&model, &name, person, 12_000, 20).await else {
        return;
    };
    r.caller_sipp.assert_ok();
    r.person_sipp.assert_ok();
    let (stages, finished) = transfer_of(&r.events);
    assert!(
        stages.iter().any(|s| s == "briefing"),
        "{profile}: {stages:?}"
    );
    assert_eq!(
        finished["outcome"]["kind"], "connected",
        "{profile} ({id}): {finished:#}"
    );
    let person = r.person_heard.expect("the person's media");
    assert!(
        voiced_blocks(&person.pcm) >= 10,
        "{profile}: the person heard the brief"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_answering_machine_is_hung_up_and_never_briefed() {
    let person = Person::Machine {
        fixture: "m_voicemail",
    };
    let Some(r) = run("warm-machine", person, 14_000, 20).await else {
        return;
    };
    r.caller_sipp.assert_ok();
    r.person_sipp.assert_ok();
    let (stages, finished) = transfer_of(&r.events);
    assert_eq!(finished["outcome"]["kind"], "machine", "{finished:#}");
    assert!(stages.iter().any(|s| s == "screening"), "{stages:?}");
    assert!(
        !stages.iter().any(|s| s == "briefing"),
        "a machine is never briefed: {stages:?}"
    );
    // Nothing was played to the machine: no brief, no caller.
    let heard = r.person_heard.expect("the machine's side");
    assert_eq!(
        voiced_blocks(&heard.pcm),
        0,
        "the answering machine heard nothing from baton"
    );
    // But its leg carried media from the answer on (silence, paced at 20 ms), as a phone or
    // gateway that takes a call without RTP for dead expects.
    eprintln!("the machine's side: {} packets", heard.packets);
    assert!(
        heard.packets >= 50,
        "silence went to the machine while it was screened: {} packets",
        heard.packets
    );
    let median = heard.median_interval_us();
    assert!(
        (15_000..=25_000).contains(&median),
        "one packet per 20 ms: median interval {median} µs"
    );
    told_why(&r.caller_heard);
}

/// A Twilio Media Streams caller (no SIP on the caller's side) is put through to a person
/// dialled over the daemon's SIP: the warm transfer is the call's, whatever its leg.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_twilio_caller_is_bridged_to_a_person_dialled_over_sip() {
    use baton::leg::twilio::caller::{self, CallerEnd, CallerOptions};
    if !sip_support::require("sipp", "sip-tester") {
        return;
    }
    let dir = scratch("warm-twilio");
    let person_port = sip_support::free_udp();
    let set = warm_set(&dir, person_port, 20, false);
    let extra = format!("[agents]\nset = \"{}\"\n", set.display());
    let (d, _) = daemon(SCENARIO, "", &extra).await;
    let person_peer = MediaPeer::bind().await;
    let person_xml = scenario(
        "warm-twilio-person",
        &person_answers(person_peer.port(), 800),
    );
    // The caller's question, then silence while the transfer runs and the person speaks.
    let mut words = sip_support::caller_turn_8k();
    words.extend(vec![0i16; 8000 * 11]);
    let keys = [(Duration::from_millis(3000), '1')];
    let url = d.twilio_url();
    let greeting_pcm = person_words();
    let events = async { sip_support::follow(&d).await.await.unwrap() };
    let person_run = person_phone(&dir, person_xml, person_port).await;
    let (report, person_sipp, person_heard, events) = tokio::join!(
        caller::dial(&url, CallerOptions::new(words)),
        person_run,
        person_peer.converse_keys(
            &greeting_pcm,
            0,
            Default::default(),
            Duration::from_secs(14),
            &keys
        ),
        events,
    );
    let report = report.expect("the Twilio stream started");
    let (stages, finished) = transfer_of(&events);
    assert_eq!(finished["outcome"]["kind"], "connected", "{finished:#}");
    assert!(stages.iter().any(|s| s == "bridged"), "{stages:?}");
    assert_eq!(report.end, CallerEnd::HungUp, "{report:?}");
    person_sipp.assert_ok();
    assert!(
        voiced_blocks(&person_heard.pcm) >= 10,
        "the person heard the brief"
    );
    // The person's words reached the Twilio caller: their greeting is heard after Asha's
    // announcement, at least as many voiced blocks as the greeting has.
    let heard = voiced_blocks(&report.recording.agent);
    let announcement = clip_blocks("asha_02.wav");
    let greeting = voiced_blocks(&person_words());
    assert!(
        heard + 4 >= announcement + greeting,
        "the Twilio caller heard Asha ({announcement} voiced blocks) and then the person \
         ({greeting}): {heard} in all"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_caller_hanging_up_during_the_brief_hangs_up_the_person() {
    let person = Person::Answers {
        ring_ms: 300,
        keys: Vec::new(),
    };
    let Some(r) = run("warm-caller-gone-briefing", person, 6_500, 20).await else {
        return;
    };
    r.caller_sipp.assert_ok();
    // SIPp's scenario passes only if baton hung the person up (BYE) after answering.
    r.person_sipp.assert_ok();
    let (_, finished) = transfer_of(&r.events);
    assert_eq!(
        finished["outcome"]["kind"], "caller_hung_up",
        "{finished:#}"
    );
    assert_eq!(finished["outcome"]["stage"], "briefing", "{finished:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_person_declines_after_the_brief_with_a_key() {
    let person = Person::Answers {
        ring_ms: 300,
        keys: vec![(Duration::from_millis(2500), '2')],
    };
    let Some(r) = run("warm-declined-key", person, 12_000, 20).await else {
        return;
    };
    r.caller_sipp.assert_ok();
    // Declined: baton hangs the person up (the scenario waits for its BYE).
    r.person_sipp.assert_ok();
    let (stages, finished) = transfer_of(&r.events);
    assert!(stages.iter().any(|s| s == "briefing"), "{stages:?}");
    assert!(!stages.iter().any(|s| s == "bridged"), "{stages:?}");
    assert_eq!(finished["outcome"]["kind"], "declined", "{finished:#}");
    told_why(&r.caller_heard);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nobody_answering_hands_the_caller_to_the_agent_on_no_answer_names() {
    let desk = "[agents.desk]\nname = \"Sam\"\nrole = \"specialist\"\ninstruction = \"You are Sam at the front desk.\"\n";
    let set = ("on_no_answer = \"agent:desk\"", desk);
    let Some(r) = run_full(
        SCENARIO,
        "",
        "warm-no-answer-desk",
        Person::RingsOut,
        14_000,
        5,
        set,
    )
    .await
    else {
        return;
    };
    r.caller_sipp.assert_ok();
    r.person_sipp.assert_ok();
    let (_, finished) = transfer_of(&r.events);
    assert_eq!(finished["outcome"]["kind"], "no_answer", "{finished:#}");
    let to_desk: Vec<_> = r
        .events
        .iter()
        .filter(|e| e["type"] == "handoff_announcement" && e["to"] == "desk")
        .collect();
    assert_eq!(
        to_desk.len(),
        1,
        "the caller is handed to Sam: {:#?}",
        r.events
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nobody_answering_ends_the_call_after_the_agent_says_why_when_so_configured() {
    let set = ("on_no_answer = \"hang_up\"", "");
    let Some(r) = run_full(
        SCENARIO,
        "",
        "warm-no-answer-hang-up",
        Person::RingsOut,
        20_000,
        5,
        set,
    )
    .await
    else {
        return;
    };
    // The caller's scenario passes only if baton hung up (BYE) within 20 s.
    r.caller_sipp.assert_ok();
    r.person_sipp.assert_ok();
    let (_, finished) = transfer_of(&r.events);
    assert_eq!(finished["outcome"]["kind"], "no_answer", "{finished:#}");
    // The agent said why before the call ended.
    told_why(&r.caller_heard);
}

/// A clip of `audio-fixtures/clips/transfer/` at 8 kHz.
fn transfer_clip(name: &str) -> Vec<i16> {
    let clip = baton::audio::wav::read(
        &Path::new(ROOT)
            .join("audio-fixtures/clips/transfer")
            .join(name),
    )
    .unwrap();
    baton::audio::resample::resample_all(&clip.samples, clip.rate, 8000).unwrap()
}

/// The person listens to the brief (about 5 s), says `answer`, then greets the caller.
fn spoken_answer(answer: &str) -> Vec<i16> {
    let mut pcm = vec![0i16; 8000 * 6];
    pcm.extend(transfer_clip(answer));
    pcm.extend(vec![0i16; 8000 * 2]);
    pcm.extend(person_words());
    pcm
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_person_accepts_by_saying_so_to_the_brief() {
    let person = Person::Speaks {
        words: spoken_answer("ravi_accept.wav"),
    };
    let Some(r) = run_scenario(
        "tests/data/transfer/human_warm.toml",
        "",
        "warm-spoken-accept",
        person,
        22_000,
    )
    .await
    else {
        return;
    };
    r.caller_sipp.assert_ok();
    r.person_sipp.assert_ok();
    let (stages, finished) = transfer_of(&r.events);
    assert!(
        stages.iter().any(|s| s == "deciding"),
        "the brief played to its end: {stages:?}"
    );
    assert_eq!(finished["outcome"]["kind"], "connected", "{finished:#}");
    // The brief (Asha's 4.96 s clip) is on the person's leg; the caller heard Asha's
    // announcement, then the person's greeting after the bridge.
    let person = r.person_heard.expect("the person's media");
    assert!(
        voiced_blocks(&person.pcm) >= voiced_blocks(&transfer_clip("asha_brief_ravi.wav")) / 2,
        "the person heard the brief"
    );
    let c = r.caller_rec.as_ref().expect("the caller's leg is recorded");
    let greeting = voiced_blocks(&person_words());
    assert!(
        voiced_blocks(&c.right) + 4 >= clip_blocks("asha_02.wav") + greeting,
        "the caller heard Asha, then the person's greeting"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_person_declines_by_saying_so_to_the_brief() {
    let person = Person::Speaks {
        words: spoken_answer("ravi_decline.wav"),
    };
    let Some(r) = run_scenario(
        "tests/data/transfer/human_warm_decline.toml",
        "",
        "warm-spoken-decline",
        person,
        20_000,
    )
    .await
    else {
        return;
    };
    r.caller_sipp.assert_ok();
    r.person_sipp.assert_ok();
    let (_, finished) = transfer_of(&r.events);
    assert_eq!(finished["outcome"]["kind"], "declined", "{finished:#}");
    told_why(&r.caller_heard);
}

/// baresip, a real softphone, is the person's phone: it answers at once, hears the brief,
/// accepts with key 1 (RFC 4733) and says its lines, which the caller hears through the bridge.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn baresip_as_the_persons_phone_is_briefed_accepts_and_is_heard_by_the_caller() {
    if !sip_support::require("sipp", "sip-tester")
        || !sip_support::require("baresip", "baresip-core")
    {
        return;
    }
    let dir = scratch("warm-baresip");
    // baresip's microphone: quiet while it is briefed, then the person's greeting.
    // The greeting starts 4 s after the answer (past the key at about 3 s); the WAV outlasts
    // the caller's call, so baresip does not hang up first.
    let mut mic = person_words();
    mic.extend(vec![0i16; 8000 * 10]);
    let mut phone = sip_support::Baresip::start(&dir, &mic, 24).await;
    let text = std::fs::read_to_string(Path::new(ROOT).join("config/agents/front_desk.toml"))
        .unwrap()
        .replace(
            "to = \"sip:ravi@127.0.0.1:5999\"",
            &format!("to = \"sip:phone@127.0.0.1:{}\"", phone.port),
        )
        .replace("transfer = \"blind\"", "transfer = \"warm\"");
    let set = dir.join("front_desk_warm.toml");
    std::fs::write(&set, text).unwrap();
    let (d, addr) = daemon(
        SCENARIO,
        "",
        &format!("[agents]\nset = \"{}\"\n", set.display()),
    )
    .await;
    let caller_peer = MediaPeer::bind().await;
    let caller_xml = scenario("warm-baresip", &caller_steps(caller_peer.port(), 16_000));
    let words = sip_support::caller_turn_8k();
    let events = async { sip_support::follow(&d).await.await.unwrap() };
    let press = async {
        // The transfer starts about 4 s in; the brief plays from about 4.5 s.
        tokio::time::sleep(Duration::from_secs(7)).await;
        phone.command("sndcode", "1").await;
    };
    let (caller_sipp, heard, events, ()) = tokio::join!(
        sip_support::sipp(&dir, Scenario::Xml(caller_xml), addr, &["-m", "1"]),
        caller_peer.converse(&words, 0, Default::default(), Duration::from_millis(16_500)),
        events,
        press,
    );
    caller_sipp.assert_ok();
    let (stages, finished) = transfer_of(&events);
    assert!(stages.iter().any(|s| s == "briefing"), "{stages:?}");
    assert_eq!(
        finished["outcome"]["kind"],
        "connected",
        "{finished:#}\n{}",
        phone.log()
    );
    phone.wait(Duration::from_secs(10)).await;
    assert!(
        voiced_blocks(&phone.heard()) >= 10,
        "baresip heard the brief:\n{}",
        phone.log()
    );
    let greeting = voiced_blocks(&person_words());
    assert!(
        voiced_blocks(&heard.pcm) + 4 >= clip_blocks("asha_02.wav") + greeting,
        "the caller heard Asha ({}), then baresip's greeting ({greeting}): {} voiced blocks; \
         voiced seconds {:?}",
        clip_blocks("asha_02.wav"),
        voiced_blocks(&heard.pcm),
        support::voiced_segments(&heard.pcm, 8000)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hold_audio_fills_the_callers_wait_while_the_agent_is_silent() {
    let music = format!(
        "hold_audio = \"{}\"",
        Path::new(ROOT)
            .join("audio-fixtures/answering/m_music.wav")
            .display()
    );
    // The person takes 6 s to accept: the announcement (2.96 s) ends well before the bridge.
    let person = Person::Answers {
        ring_ms: 800,
        keys: vec![(Duration::from_millis(6000), '1')],
    };
    let Some(r) = run_full(
        SCENARIO,
        "",
        "warm-hold-audio",
        person,
        16_000,
        20,
        (&music, ""),
    )
    .await
    else {
        return;
    };
    r.caller_sipp.assert_ok();
    r.person_sipp.assert_ok();
    let (_, finished) = transfer_of(&r.events);
    assert_eq!(finished["outcome"]["kind"], "connected", "{finished:#}");
    let at = |stage: &str| {
        of_type(&r.events, "transfer")
            .into_iter()
            .find(|e| e["event"] == "stage" && e["stage"] == stage)
            .and_then(|e| e["at_ms"].as_u64())
            .unwrap_or_else(|| panic!("no {stage} stage"))
    };
    let (dialing, bridged) = (at("dialing"), at("bridged"));
    let c = r.caller_rec.as_ref().expect("the caller's leg is recorded");
    // From the announcement's end (it started as the transfer was asked) to the bridge.
    let from = dialing + 3200;
    assert!(
        bridged > from + 2000,
        "a wait to fill: {dialing}..{bridged}"
    );
    let rate = u64::from(c.rate);
    let window = &c.right[(from * rate / 1000) as usize..(bridged * rate / 1000) as usize];
    let voiced = voiced_blocks(window);
    let blocks = window.len() / 160;
    assert!(
        voiced * 10 >= blocks * 8,
        "the caller heard the hold audio while waiting: {voiced} of {blocks} blocks voiced"
    );
}

/// The brief's session drops part-way (the mock closes it with 1011 once half of the brief has
/// been sent; the caller's session stays up). The person's leg goes on carrying media on the
/// 20 ms clock — silence from the transfer once the brief's core has ended — so the person, who
/// hears the brief's first words and then nothing, can still press 1, and the caller is put
/// through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_brief_whose_session_drops_leaves_the_person_a_live_leg_to_accept_on() {
    brief_drops_on("").await;
}

/// [`a_brief_whose_session_drops_leaves_the_person_a_live_leg_to_accept_on`] on OpenAI Realtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_brief_whose_session_drops_on_openai_realtime_leaves_a_live_leg_too() {
    brief_drops_on("profile = \"openai\"").await;
}

async fn brief_drops_on(model: &str) {
    let tag = if model.is_empty() { "gemini" } else { "openai" };
    let person = Person::Answers {
        ring_ms: 800,
        keys: vec![(Duration::from_millis(3000), '1')],
    };
    let Some(r) = run_scenario(
        "tests/data/transfer/human_warm_brief_drops.toml",
        model,
        &format!("warm-brief-drops-{tag}"),
        person,
        14_000,
    )
    .await
    else {
        return;
    };
    r.caller_sipp.assert_ok();
    r.person_sipp.assert_ok();
    let (stages, finished) = transfer_of(&r.events);
    for s in ["briefing", "deciding", "bridged"] {
        assert!(stages.iter().any(|x| x == s), "{tag}: {s} in {stages:?}");
    }
    assert_eq!(
        finished["outcome"]["kind"], "connected",
        "{tag}: {finished:#}"
    );
    let person = r.person_heard.expect("the person's media");
    // The brief's first words, not all of it: its session did end part-way (half of it was
    // sent at four times real time, so the person hears the part played before the close).
    let brief = voiced_blocks(&transfer_clip("asha_brief_ravi.wav"));
    let heard = voiced_blocks(&person.pcm);
    eprintln!("{tag}: {heard} voiced blocks of the brief's {brief} heard");
    assert!(
        heard >= 5 && heard < brief / 2,
        "{tag}: the brief was cut part-way ({heard} voiced blocks heard, the whole brief is \
         {brief})"
    );
    // One packet every 20 ms from the first to the last: no hole where the brief ended (the
    // key came 3 s after the first packet, so a leg left without media shows a gap of seconds).
    let median = person.median_interval_us();
    let longest = person.intervals_us.iter().copied().max().unwrap_or(0);
    eprintln!(
        "{tag}: {} packets, median interval {median} µs, longest {longest} µs",
        person.packets
    );
    assert!(
        person.packets >= 150,
        "{tag}: the person's leg carried media from the answer to the bridge and after: {} \
         packets",
        person.packets
    );
    assert!(
        (15_000..=25_000).contains(&median),
        "{tag}: one packet per 20 ms: median interval {median} µs"
    );
    assert!(
        longest < 1_000_000,
        "{tag}: the person's leg carried media throughout: a {longest} µs gap"
    );
    // Through the bridge the caller heard the person.
    let words = voiced_blocks(&person_words());
    let caller = voiced_blocks(&r.caller_heard.pcm);
    assert!(
        caller >= words,
        "{tag}: the caller heard Asha and then the person ({caller} voiced blocks)"
    );
}
