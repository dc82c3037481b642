//! What baton answers to a new INVITE, decided without I/O: the source (an allow-list), the
//! caller's credentials (a digest challenge, RFC 7616 with MD5), the room left (486 when full,
//! 503 while draining), and the offer (415 for a body that is not SDP, 488 for an offer baton
//! cannot use). The answer a PBX expects, always with a reason — never a silent drop.

use std::collections::VecDeque;
use std::net::IpAddr;
use std::time::Duration;

use subtle::ConstantTimeEq;
use tokio::time::Instant;

use super::config::IpNet;
use super::sdp::{self, Codec, Negotiated, RemoteMedia};
use crate::secret::Secret;

/// What an INVITE brings that the decision needs.
#[derive(Clone, Copy, Debug)]
pub struct InviteFacts<'a> {
    /// Where it came from (the top Via's `received`, else its host).
    pub source: Option<IpAddr>,
    /// The `Authorization` header, if any.
    pub authorization: Option<&'a str>,
    /// The Request-URI as sent (what the digest covers).
    pub request_uri: &'a str,
    pub content_type: Option<&'a str>,
    pub body: &'a [u8],
}

/// A digest challenge on INVITEs from sources no allow-list names.
#[derive(Clone, Debug)]
pub struct DigestPolicy {
    pub user: String,
    pub password: Secret,
    pub realm: String,
}

/// Who may call, and what baton speaks.
#[derive(Clone, Debug, Default)]
pub struct Policy {
    /// Sources taken without a challenge. Empty with no digest: anyone.
    pub allow: Vec<IpNet>,
    pub digest: Option<DigestPolicy>,
    pub codecs: Vec<Codec>,
}

/// Whether this instance takes a new call now.
#[derive(Clone, Debug)]
pub enum Capacity {
    Open,
    Full(String),
    Draining(String),
}

/// Seconds a refused caller is told to wait (`Retry-After`).
pub const RETRY_AFTER_S: u64 = 5;

/// What to answer.
#[derive(Clone, Debug)]
pub enum Decision {
    /// A final error response.
    Reject {
        status: u16,
        /// Said in a `Warning` header (399, RFC 3261 §20.43) so a person reading a trace sees it.
        reason: String,
        retry_after: Option<u64>,
    },
    /// 401 with this `WWW-Authenticate` value.
    Challenge(String),
    /// Take the call with this media.
    Answer {
        offer: RemoteMedia,
        negotiated: Negotiated,
    },
}

/// The nonces baton has issued (each good for a few minutes), so a challenge answered with a
/// nonce baton never gave out, or an old one, is challenged again.
#[derive(Debug, Default)]
pub struct Nonces {
    issued: VecDeque<(String, Instant)>,
}

const NONCE_LIFE: Duration = Duration::from_secs(300);
const MAX_NONCES: usize = 4096;

impl Nonces {
    /// A fresh nonce, remembered.
    pub fn issue(&mut self, now: Instant) -> String {
        let mut b = [0u8; 16];
        let _ = getrandom::fill(&mut b);
        let n: String = b.iter().map(|x| format!("{x:02x}")).collect();
        self.prune(now);
        if self.issued.len() >= MAX_NONCES {
            self.issued.pop_front();
        }
        self.issued.push_back((n.clone(), now));
        n
    }

    fn prune(&mut self, now: Instant) {
        while let Some((_, at)) = self.issued.front() {
            if now.saturating_duration_since(*at) > NONCE_LIFE {
                self.issued.pop_front();
            } else {
                break;
            }
        }
    }

    fn valid(&mut self, nonce: &str, now: Instant) -> bool {
        self.prune(now);
        self.issued.iter().any(|(n, _)| n == nonce)
    }
}

/// Decides on a new INVITE.
pub fn decide(
    f: &InviteFacts<'_>,
    policy: &Policy,
    capacity: &Capacity,
    nonces: &mut Nonces,
    now: Instant,
) -> Decision {
    let allowed = f
        .source
        .is_some_and(|ip| policy.allow.iter().any(|n| n.contains(ip)));
    if !allowed {
        match &policy.digest {
            Some(d) => match check_digest(f, d, nonces, now) {
                DigestCheck::Ok => {}
                DigestCheck::Challenge { stale } => {
                    let nonce = nonces.issue(now);
                    return Decision::Challenge(format!(
                        "Digest realm=\"{}\", nonce=\"{nonce}\", algorithm=MD5, qop=\"auth\"{}",
                        d.realm,
                        if stale { ", stale=true" } else { "" }
                    ));
                }
                DigestCheck::Wrong => {
                    return Decision::Reject {
                        status: 403,
                        reason: "wrong credentials for this SIP account".into(),
                        retry_after: None,
                    };
                }
            },
            None if !policy.allow.is_empty() => {
                return Decision::Reject {
                    status: 403,
                    reason: format!(
                        "{} is not an address baton takes calls from (sip.allow_from)",
                        f.source
                            .map_or_else(|| "this source".into(), |ip| ip.to_string())
                    ),
                    retry_after: None,
                };
            }
            None => {}
        }
    }
    match capacity {
        Capacity::Open => {}
        Capacity::Full(why) => {
            return Decision::Reject {
                status: 486,
                reason: why.clone(),
                retry_after: Some(RETRY_AFTER_S),
            };
        }
        Capacity::Draining(why) => {
            return Decision::Reject {
                status: 503,
                reason: why.clone(),
                retry_after: Some(RETRY_AFTER_S),
            };
        }
    }
    if f.body.is_empty() {
        return Decision::Reject {
            status: 488,
            reason: "the INVITE has no SDP offer; baton needs the offer in the INVITE".into(),
            retry_after: None,
        };
    }
    let ct = f
        .content_type
        .and_then(|c| c.split(';').next())
        .map(|c| c.trim().to_ascii_lowercase());
    if ct.as_deref() != Some("application/sdp") {
        return Decision::Reject {
            status: 415,
            reason: format!(
                "the body is {}, not application/sdp",
                f.content_type.unwrap_or("untyped")
            ),
            retry_after: None,
        };
    }
    let offer = match sdp::parse(f.body) {
        Ok(o) => o,
        Err(e) => {
            return Decision::Reject {
                status: 488,
                reason: e.to_string(),
                retry_after: None,
            };
        }
    };
    match sdp::negotiate(&offer, &policy.codecs) {
        Ok(negotiated) => Decision::Answer { offer, negotiated },
        Err(e) => Decision::Reject {
            status: 488,
            reason: e.to_string(),
            retry_after: None,
        },
    }
}

enum DigestCheck {
    Ok,
    Challenge { stale: bool },
    Wrong,
}

fn check_digest(
    f: &InviteFacts<'_>,
    d: &DigestPolicy,
    nonces: &mut Nonces,
    now: Instant,
) -> DigestCheck {
    let Some(header) = f.authorization else {
        return DigestCheck::Challenge { stale: false };
    };
    let Some(p) = DigestParams::parse(header) else {
        return DigestCheck::Challenge { stale: false };
    };
    if !p.realm.eq_ignore_ascii_case(&d.realm) {
        return DigestCheck::Challenge { stale: false };
    }
    if !nonces.valid(p.nonce, now) {
        return DigestCheck::Challenge { stale: true };
    }
    // The response covers the `uri` as the caller wrote it, which need not be the Request-URI
    // character for character (SIPp, for one, leaves out the user part): it must name the same
    // host and port.
    if p.username != d.user || !same_host(p.uri, f.request_uri) {
        return DigestCheck::Wrong;
    }
    let expected = digest_response(&d.user, &d.realm, d.password.expose(), "INVITE", &p);
    if expected
        .as_bytes()
        .ct_eq(p.response.to_ascii_lowercase().as_bytes())
        .into()
    {
        DigestCheck::Ok
    } else {
        DigestCheck::Wrong
    }
}

/// Whether two SIP URIs name the same host and port (scheme, user, parameters and headers
/// aside; case-insensitive).
fn same_host(a: &str, b: &str) -> bool {
    fn host(u: &str) -> String {
        let rest = u
            .strip_prefix("sips:")
            .or_else(|| u.strip_prefix("sip:"))
            .unwrap_or(u);
        let rest = rest.split([';', '?']).next().unwrap_or(rest);
        let host = rest.rsplit_once('@').map_or(rest, |(_, h)| h);
        host.to_ascii_lowercase()
    }
    let (a, b) = (host(a), host(b));
    !a.is_empty() && a == b
}

/// The parameters of a `Digest` credential.
#[derive(Debug, PartialEq, Eq)]
pub struct DigestParams<'a> {
    pub username: &'a str,
    pub realm: &'a str,
    pub nonce: &'a str,
    pub uri: &'a str,
    pub response: &'a str,
    pub qop: Option<&'a str>,
    pub nc: Option<&'a str>,
    pub cnonce: Option<&'a str>,
}

impl<'a> DigestParams<'a> {
    /// Reads `Digest username="…", realm="…", …`; `None` when it is not a usable MD5 digest.
    pub fn parse(header: &'a str) -> Option<DigestParams<'a>> {
        if header.len() > 4096 {
            return None;
        }
        let tok = rsipstack::sip::typed::tokenizers::AuthTokenizer::parse(header).ok()?;
        if !tok.scheme.eq_ignore_ascii_case("digest") {
            return None;
        }
        let get = |k: &str| {
            tok.params
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(k))
                .map(|(_, v)| v.trim_matches('"'))
        };
        if let Some(alg) = get("algorithm")
            && !alg.eq_ignore_ascii_case("md5")
        {
            return None;
        }
        Some(DigestParams {
            username: get("username")?,
            realm: get("realm")?,
            nonce: get("nonce")?,
            uri: get("uri")?,
            response: get("response")?,
            qop: get("qop"),
            nc: get("nc"),
            cnonce: get("cnonce"),
        })
    }
}

fn md5_hex(s: &str) -> String {
    use md5::{Digest, Md5};
    Md5::digest(s.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The response a client with this password computes (RFC 2617 §3.2.2, MD5, qop `auth` or
/// none).
pub fn digest_response(
    user: &str,
    realm: &str,
    password: &str,
    method: &str,
    p: &DigestParams<'_>,
) -> String {
    let ha1 = md5_hex(&format!("{user}:{realm}:{password}"));
    let ha2 = md5_hex(&format!("{method}:{}", p.uri));
    match (p.qop, p.nc, p.cnonce) {
        (Some(qop), Some(nc), Some(cnonce)) => {
            md5_hex(&format!("{ha1}:{}:{nc}:{cnonce}:{qop}:{ha2}", p.nonce))
        }
        _ => md5_hex(&format!("{ha1}:{}:{ha2}", p.nonce)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const OFFER: &[u8] =
        b"v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n\
        m=audio 6000 RTP/AVP 0\r\n";

    fn facts(source: &str) -> InviteFacts<'static> {
        InviteFacts {
            source: source.parse().ok(),
            authorization: None,
            request_uri: "sip:agent@127.0.0.1:5060",
            content_type: Some("application/sdp"),
            body: OFFER,
        }
    }

    fn policy() -> Policy {
        Policy {
            allow: vec![IpNet::parse("10.0.0.0/8").unwrap()],
            digest: None,
            codecs: Codec::ALL.to_vec(),
        }
    }

    fn status(d: &Decision) -> u16 {
        match d {
            Decision::Reject { status, .. } => *status,
            Decision::Challenge(_) => 401,
            Decision::Answer { .. } => 200,
        }
    }

    #[test]
    fn sources_capacity_and_offers_in_that_order() {
        let mut n = Nonces::default();
        let now = Instant::now();
        let p = policy();
        let d = |f: &InviteFacts<'_>, c: &Capacity, n: &mut Nonces| decide(f, &p, c, n, now);
        assert_eq!(status(&d(&facts("10.1.2.3"), &Capacity::Open, &mut n)), 200);
        let refused = d(&facts("192.0.2.1"), &Capacity::Open, &mut n);
        assert_eq!(status(&refused), 403);
        assert!(format!("{refused:?}").contains("192.0.2.1 is not an address"));
        assert_eq!(
            status(&d(
                &facts("10.1.2.3"),
                &Capacity::Full("full".into()),
                &mut n
            )),
            486
        );
        assert_eq!(
            status(&d(
                &facts("10.1.2.3"),
                &Capacity::Draining("d".into()),
                &mut n
            )),
            503
        );
        let mut f = facts("10.1.2.3");
        f.content_type = Some("text/plain");
        assert_eq!(status(&d(&f, &Capacity::Open, &mut n)), 415);
        f.body = b"";
        assert_eq!(status(&d(&f, &Capacity::Open, &mut n)), 488);
        let g729 = b"v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\n\
            m=audio 6000 RTP/AVP 18\r\n";
        let mut f = facts("10.1.2.3");
        f.body = g729;
        let r = d(&f, &Capacity::Open, &mut n);
        assert_eq!(status(&r), 488);
        assert!(format!("{r:?}").contains("no codec in common"));
        // With no allow-list and no digest, anyone.
        let open = Policy {
            allow: vec![],
            ..policy()
        };
        assert_eq!(
            status(&decide(
                &facts("192.0.2.1"),
                &open,
                &Capacity::Open,
                &mut n,
                now
            )),
            200
        );
    }

    #[test]
    fn the_digest_uri_names_the_request_uris_host() {
        assert!(same_host("sip:127.0.0.1:5060", "sip:agent@127.0.0.1:5060"));
        assert!(same_host(
            "sip:Agent@PBX.example.com;transport=tcp",
            "sip:agent@pbx.example.com"
        ));
        assert!(!same_host("sip:127.0.0.1:5061", "sip:agent@127.0.0.1:5060"));
        assert!(!same_host("sip:evil.example", "sip:agent@127.0.0.1:5060"));
        assert!(!same_host("", "sip:"));
    }

    #[test]
    fn a_digest_challenge_then_the_right_answer_is_taken() {
        let mut nonces = Nonces::default();
        let now = Instant::now();
        let p = Policy {
            digest: Some(DigestPolicy {
                user: "trunk".into(),
                password: Secret::new("s3cret"),
                realm: "baton".into(),
            }),
            ..policy()
        };
        let Decision::Challenge(www) =
            decide(&facts("192.0.2.1"), &p, &Capacity::Open, &mut nonces, now)
        else {
            panic!("expected a challenge")
        };
        let nonce = www
            .split("nonce=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap();
        let answer = |password: &str, nonce: &str| {
            let params = DigestParams {
                username: "trunk",
                realm: "baton",
                nonce,
                uri: "sip:agent@127.0.0.1:5060",
                response: "",
                qop: Some("auth"),
                nc: Some("00000001"),
                cnonce: Some("abc"),
            };
            let r = digest_response("trunk", "baton", password, "INVITE", &params);
            format!(
                "Digest username=\"trunk\", realm=\"baton\", nonce=\"{nonce}\", \
                 uri=\"sip:agent@127.0.0.1:5060\", response=\"{r}\", qop=auth, nc=00000001, \
                 cnonce=\"abc\", algorithm=MD5"
            )
        };
        let good = answer("s3cret", nonce);
        let mut f = facts("192.0.2.1");
        f.authorization = Some(&good);
        assert_eq!(
            status(&decide(&f, &p, &Capacity::Open, &mut nonces, now)),
            200
        );
        let bad = answer("guess", nonce);
        f.authorization = Some(&bad);
        assert_eq!(
            status(&decide(&f, &p, &Capacity::Open, &mut nonces, now)),
            403
        );
        // A nonce baton never issued is challenged again, as stale.
        let forged = answer("s3cret", "00ff");
        f.authorization = Some(&forged);
        let Decision::Challenge(again) = decide(&f, &p, &Capacity::Open, &mut nonces, now) else {
            panic!()
        };
        assert!(again.contains("stale=true"));
        // An old one too.
        f.authorization = Some(&good);
        let later = now + Duration::from_secs(301);
        assert_eq!(
            status(&decide(&f, &p, &Capacity::Open, &mut nonces, later)),
            401
        );
        // The allow-list still needs no credentials.
        assert_eq!(
            status(&decide(
                &facts("10.0.0.1"),
                &p,
                &Capacity::Open,
                &mut nonces,
                now
            )),
            200
        );
    }

    #[test]
    fn digest_params_are_read_or_refused() {
        let p = DigestParams::parse(
            "Digest username=\"a\",realm=\"r\",nonce=\"n\",uri=\"sip:x@y\",response=\"00\"",
        )
        .unwrap();
        assert_eq!((p.username, p.uri, p.qop), ("a", "sip:x@y", None));
        assert!(DigestParams::parse("Basic dXNlcg==").is_none());
        assert!(DigestParams::parse("Digest username=\"a\"").is_none());
        assert!(
            DigestParams::parse(
                "Digest username=\"a\",realm=\"r\",nonce=\"n\",uri=\"u\",response=\"0\",algorithm=SHA-256"
            )
            .is_none()
        );
    }
}
