//! The two SIPp processes of the transfer benchmark: the callers (a UAC placing `-m N` calls,
//! `-l C` at a time, each playing the caller's question and staying on the line) and the person's
//! phone (a UAS that rings, answers, presses 1 over RFC 4733 and then speaks); their scenario
//! files, and what SIPp's statistics file says of them.

use std::collections::BTreeMap;
use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde::Serialize;

use super::TransfersError;

/// The caller's side of one call: after the answer it plays `pcap` (speech, then silence while
/// the transfer happens), then hangs up.
pub fn caller_scenario(pcap: &Path, stay: Duration) -> String {
    let ms = stay.as_millis();
    let pcap = pcap.display();
    format!(
        r#"<?xml version="1.0" encoding="ISO-8859-1" ?>
<scenario name="baton bench transfers: the caller">
  <send retrans="500">
    <![CDATA[
      INVITE sip:[service]@[remote_ip]:[remote_port] SIP/2.0
      Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
      From: caller <sip:caller@[local_ip]:[local_port]>;tag=[pid]SIPpTag00[call_number]
      To: [service] <sip:[service]@[remote_ip]:[remote_port]>
      Call-ID: [call_id]
      CSeq: 1 INVITE
      Contact: sip:caller@[local_ip]:[local_port]
      Max-Forwards: 70
      Content-Type: application/sdp
      Content-Length: [len]

v=0
o=caller 1 1 IN IP[local_ip_type] [local_ip]
s=-
c=IN IP[media_ip_type] [media_ip]
t=0 0
m=audio [media_port] RTP/AVP 0
a=rtpmap:0 PCMU/8000

    ]]>
  </send>
  <recv response="100" optional="true"/>
  <recv response="180" optional="true"/>
  <recv response="183" optional="true"/>
  <recv response="200" rtd="true"/>
{ack}
  <nop><action><exec play_pcap_audio="{pcap}"/></action></nop>
  <pause milliseconds="{ms}"/>
{bye}
  <recv response="200"/>
</scenario>
"#,
        ack = in_dialog("ACK", 1),
        bye = in_dialog("BYE", 2),
    )
}

fn in_dialog(method: &str, cseq: u32) -> String {
    let retrans = if method == "ACK" {
        ""
    } else {
        r#" retrans="500""#
    };
    format!(
        r#"  <send{retrans}>
    <![CDATA[
      {method} sip:[service]@[remote_ip]:[remote_port] SIP/2.0
      Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
      From: caller <sip:caller@[local_ip]:[local_port]>;tag=[pid]SIPpTag00[call_number]
      To: [service] <sip:[service]@[remote_ip]:[remote_port]>[peer_tag_param]
      Call-ID: [call_id]
      CSeq: {cseq} {method}
      Contact: sip:caller@[local_ip]:[local_port]
      Max-Forwards: 70
      Content-Length: 0

    ]]>
  </send>"#
    )
}

/// How the person's phone behaves on each call.
#[derive(Clone, Debug, Serialize)]
pub struct Person {
    /// From the INVITE to the answer, while it sends 180 Ringing.
    pub ring_ms: u64,
    /// From the answer to pressing the key (the brief plays meanwhile).
    pub key_after_ms: u64,
    /// From the key's first packet to the person's first word.
    pub speaks_after_ms: u64,
    /// The key: RFC 4733 events, payload type 101.
    pub key_pcap: PathBuf,
    /// What the person says once they accepted, PCMU.
    pub voice_pcap: PathBuf,
}

/// The person's phone: rings, answers offering PCMU and telephone-event/101, presses the key,
/// speaks, and waits for baton's BYE.
pub fn person_scenario(p: &Person) -> String {
    let respond = |status: &str, sdp: bool| {
        let (ct, body) = if sdp {
            (
                "Content-Type: application/sdp\n      ",
                "v=0\no=person 1 1 IN IP[local_ip_type] [local_ip]\ns=-\nc=IN IP[media_ip_type] [media_ip]\nt=0 0\nm=audio [media_port] RTP/AVP 0 101\na=rtpmap:0 PCMU/8000\na=rtpmap:101 telephone-event/8000\na=fmtp:101 0-15\n",
            )
        } else {
            ("", "")
        };
        let retrans = if sdp { r#" retrans="500""# } else { "" };
        format!(
            r#"  <send{retrans}>
    <![CDATA[
      SIP/2.0 {status}
      [last_Via:]
      [last_From:]
      [last_To:];tag=[pid]SIPpTag01[call_number]
      [last_Call-ID:]
      [last_CSeq:]
      Contact: <sip:person@[local_ip]:[local_port]>
      {ct}Content-Length: [len]

{body}
    ]]>
  </send>
"#
        )
    };
    format!(
        r#"<?xml version="1.0" encoding="ISO-8859-1" ?>
<scenario name="baton bench transfers: the person's phone">
  <recv request="INVITE" crlf="true"/>
{ringing}  <pause milliseconds="{ring}"/>
{ok}  <recv request="ACK" timeout="10000"/>
  <pause milliseconds="{key_after}"/>
  <nop><action><exec play_pcap_audio="{key}"/></action></nop>
  <pause milliseconds="{speaks_after}"/>
  <nop><action><exec play_pcap_audio="{voice}"/></action></nop>
  <recv request="BYE" timeout="120000"/>
{bye_ok}</scenario>
"#,
        ringing = respond("180 Ringing", false),
        ring = p.ring_ms,
        ok = respond("200 OK", true),
        key_after = p.key_after_ms,
        key = p.key_pcap.display(),
        speaks_after = p.speaks_after_ms,
        voice = p.voice_pcap.display(),
        bye_ok = respond("200 OK", false),
    )
}

/// A free UDP port on loopback.
pub fn free_udp() -> Result<u16, TransfersError> {
    UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .map(|a| a.port())
        .map_err(|e| TransfersError::Io(format!("no free UDP port on loopback: {e}")))
}

/// A free even port `p` with `p + 1` to `p + 3` free too (SIPp's media and echo ports).
fn free_media_ports() -> Result<u16, TransfersError> {
    for _ in 0..200 {
        let p = free_udp()?;
        if p % 2 != 0 || p > 65_000 {
            continue;
        }
        let all: Result<Vec<_>, _> = (p..p + 4)
            .map(|q| UdpSocket::bind(("127.0.0.1", q)))
            .collect();
        if all.is_ok() {
            return Ok(p);
        }
    }
    Err(TransfersError::Io(
        "no four consecutive free UDP ports on loopback for SIPp's media".into(),
    ))
}

/// A running SIPp (killed when dropped).
pub struct Sipp {
    pub who: &'static str,
    child: tokio::process::Child,
    stats: PathBuf,
    errors: PathBuf,
}

impl Sipp {
    /// Starts SIPp on SIP port `port` running `scenario` (written to `dir/<who>.xml`); a caller
    /// calls `target`, a callee waits. Its logs go to `dir`.
    pub fn start(
        who: &'static str,
        dir: &Path,
        scenario: &str,
        port: u16,
        target: Option<SocketAddr>,
        extra: &[String],
    ) -> Result<Sipp, TransfersError> {
        let io = |p: &Path, e: std::io::Error| {
            TransfersError::Io(format!("cannot write {}: {e}", p.display()))
        };
        let xml = dir.join(format!("{who}.xml"));
        std::fs::write(&xml, scenario).map_err(|e| io(&xml, e))?;
        let stats = dir.join(format!("{who}-stats.csv"));
        let errors = dir.join(format!("{who}-errors.log"));
        let out = dir.join(format!("{who}-screen.log"));
        let screen = std::fs::File::create(&out).map_err(|e| io(&out, e))?;
        let mut cmd = tokio::process::Command::new("sipp");
        cmd.arg("-sf")
            .arg(&xml)
            .args(["-i", "127.0.0.1", "-mi", "127.0.0.1", "-nostdin"])
            .args(["-p", &port.to_string()])
            .args(["-mp", &free_media_ports()?.to_string()])
            .args(["-cp", &free_udp()?.to_string()])
            .args(["-trace_stat", "-fd", "1", "-stf"])
            .arg(&stats)
            .args(["-trace_err", "-error_file"])
            .arg(&errors)
            .args(extra)
            .args(target.map(|t| t.to_string()))
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(screen)
            .stderr(Stdio::null())
            .kill_on_drop(true);
        let child = cmd.spawn().map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => TransfersError::NoSipp,
            _ => TransfersError::Io(format!("cannot start SIPp: {e}")),
        })?;
        Ok(Sipp {
            who,
            child,
            stats,
            errors,
        })
    }

    /// Waits for SIPp to exit (at most `limit`; then stops it) and reads its statistics.
    pub async fn finish(mut self, limit: Duration) -> SippFigures {
        let code = match tokio::time::timeout(limit, self.child.wait()).await {
            Ok(Ok(status)) => status.code(),
            _ => {
                // SIPp writes its statistics once a second; the last line holds until then.
                let _ = self.child.start_kill();
                let _ = self.child.wait().await;
                None
            }
        };
        let stats = std::fs::read_to_string(&self.stats).unwrap_or_default();
        let errors = std::fs::read_to_string(&self.errors).unwrap_or_default();
        SippFigures::read(self.who, code, &stats, &errors)
    }
}

/// What one SIPp process reports of its calls (from its `-trace_stat` file).
#[derive(Clone, Debug, Default, Serialize)]
pub struct SippFigures {
    pub who: String,
    /// Its exit code: 0 when every call followed the scenario; `None` when it was stopped.
    pub exit_code: Option<i32>,
    pub calls: Option<u64>,
    pub successful: Option<u64>,
    pub failed: Option<u64>,
    /// Its non-zero `Failed…` counters (SIPp's own names) and retransmissions.
    pub failures: BTreeMap<String, u64>,
    /// The first lines of its error log.
    pub errors: Vec<String>,
}

impl SippFigures {
    /// Reads the last row of SIPp's `;`-separated statistics; figures it lacks stay `None`.
    pub fn read(who: &str, exit_code: Option<i32>, stats: &str, errors: &str) -> SippFigures {
        let mut lines = stats.lines().filter(|l| !l.trim().is_empty());
        let header: Vec<&str> = lines
            .next()
            .map(|h| h.split(';').collect())
            .unwrap_or_default();
        let last: Vec<&str> = lines
            .next_back()
            .map(|l| l.split(';').collect())
            .unwrap_or_default();
        let field = |name: &str| -> Option<u64> {
            let i = header.iter().position(|h| h.trim() == name)?;
            last.get(i)?.trim().parse().ok()
        };
        let mut failures = BTreeMap::new();
        for (i, h) in header.iter().enumerate() {
            let h = h.trim();
            let counted = (h.starts_with("Failed") && h != "FailedCall(C)")
                || h == "Retransmissions(C)"
                || h == "OutOfCallMsgs(C)"
                || h == "DeadCallMsgs(C)";
            if !(counted && h.ends_with("(C)")) {
                continue;
            }
            if let Some(v) = last.get(i).and_then(|v| v.trim().parse::<u64>().ok())
                && v > 0
            {
                failures.insert(h.trim_end_matches("(C)").to_owned(), v);
            }
        }
        let calls = field("OutgoingCall(C)")
            .zip(field("IncomingCall(C)"))
            .map(|(o, i)| o + i);
        SippFigures {
            who: who.to_owned(),
            exit_code,
            calls,
            successful: field("SuccessfulCall(C)"),
            failed: field("FailedCall(C)"),
            failures,
            errors: errors
                .lines()
                .filter(|l| !l.trim().is_empty())
                .take(20)
                .map(str::to_owned)
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statistics_are_read_by_column_name() {
        let stats = "StartTime;OutgoingCall(C);IncomingCall(C);SuccessfulCall(C);FailedCall(C);FailedTimeoutOnRecv(C);FailedTimeoutOnRecv(P);Retransmissions(C);\n\
                     x;1;0;1;0;0;0;0;\n\
                     y;5;0;4;1;1;1;3;\n";
        let f = SippFigures::read("callers", Some(1), stats, "one\n\ntwo\n");
        assert_eq!(f.calls, Some(5));
        assert_eq!(f.successful, Some(4));
        assert_eq!(f.failed, Some(1));
        assert_eq!(f.failures.get("FailedTimeoutOnRecv"), Some(&1));
        assert_eq!(f.failures.get("Retransmissions"), Some(&3));
        assert_eq!(f.failures.len(), 2);
        assert_eq!(f.errors, vec!["one", "two"]);
        // Garbage or nothing: no figures, no panic.
        let g = SippFigures::read("person", None, "no;columns\n;;;\n", "");
        assert_eq!((g.calls, g.successful, g.failed), (None, None, None));
        assert!(
            SippFigures::read("person", None, "", "")
                .failures
                .is_empty()
        );
    }

    #[test]
    fn scenarios_name_their_audio() {
        let c = caller_scenario(Path::new("/tmp/c.pcap"), Duration::from_millis(15_140));
        assert!(c.contains(r#"play_pcap_audio="/tmp/c.pcap""#));
        assert!(c.contains(r#"<pause milliseconds="15140"/>"#));
        let p = person_scenario(&Person {
            ring_ms: 1000,
            key_after_ms: 2000,
            speaks_after_ms: 200,
            key_pcap: "/k.pcap".into(),
            voice_pcap: "/v.pcap".into(),
        });
        assert!(p.contains("a=rtpmap:101 telephone-event/8000"));
        let key = p.find("/k.pcap").unwrap();
        let voice = p.find("/v.pcap").unwrap();
        assert!(key < voice && p.find("180 Ringing").unwrap() < p.find("200 OK").unwrap());
    }
}
