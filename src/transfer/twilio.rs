//! Blind transfer of a Twilio call: the live call is redirected to `<Dial>` through Twilio's REST
//! API, `POST {base}/2010-04-01/Accounts/{AccountSid}/Calls/{CallSid}.json` with a form body
//! `Twiml=<Response><Dial>…</Dial></Response>`, HTTP basic auth with the account SID and the
//! auth token (as Twilio's "Update a Call resource" documents and its SDKs send). The base URL is
//! configurable so tests answer on loopback. The token is a [`Secret`]: it goes into the
//! Authorization header and nowhere else — not into errors, `Debug`, logs or events.

use std::fmt;
use std::time::Duration;

use serde::Deserialize;

use super::destination::Destination;
use super::machine::Failure;
use crate::secret::Secret;

/// Twilio's API host.
pub const DEFAULT_BASE_URL: &str = "https://api.twilio.com";
/// The largest answer read; a call resource is about 2 KB.
pub const MAX_ANSWER_BYTES: usize = 64 * 1024;

/// Where and as whom to call the REST API.
#[derive(Clone, Debug)]
pub struct RestSettings {
    /// `https://api.twilio.com`, or a local endpoint in tests.
    pub base_url: String,
    /// `AC` and 32 hex digits.
    pub account_sid: String,
    pub auth_token: Secret,
    /// The whole request, connect to last byte.
    pub timeout: Duration,
}

/// A REST client for redirecting calls.
#[derive(Clone)]
pub struct TwilioRest {
    base: url::Url,
    account_sid: String,
    auth_token: Secret,
    client: reqwest::Client,
}

impl fmt::Debug for TwilioRest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TwilioRest")
            .field("base", &self.base.as_str())
            .field("account_sid", &self.account_sid)
            .field("auth_token", &self.auth_token)
            .finish()
    }
}

/// `<Dial>`'s attributes.
#[derive(Clone, Debug, Default)]
pub struct DialOptions {
    /// `timeout`: seconds the person's phone rings (Twilio's default is 30).
    pub ring_timeout: Option<Duration>,
    /// `callerId`: the number (or SIP identity) the person sees.
    pub caller_id: Option<String>,
}

/// The call as Twilio answered the redirect.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct CallUpdated {
    pub sid: String,
    /// `queued`, `ringing`, `in-progress`, `completed`, …
    pub status: String,
}

/// Why a redirect did not happen. Never carries the auth token.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TwilioError {
    #[error("account SID {0:?} is not AC followed by 32 hex digits")]
    BadAccountSid(String),
    #[error("call SID {0:?} is not CA followed by 32 hex digits")]
    BadCallSid(String),
    #[error("the Twilio API base URL {url:?} is not usable: {why}")]
    BadBaseUrl { url: String, why: String },
    #[error("the Twilio API at {base} did not answer: {reason}")]
    Unreachable { base: String, reason: String },
    #[error("Twilio refused the redirect (HTTP {http_status}, error {code}): {message}{}", more_info.as_deref().map(|u| format!(" (see {u})")).unwrap_or_default())]
    Refused {
        http_status: u16,
        code: u32,
        message: String,
        more_info: Option<String>,
    },
    #[error("Twilio answered HTTP {http_status} without its JSON error body: {body:?}")]
    HttpStatus { http_status: u16, body: String },
    #[error("Twilio's answer (HTTP {http_status}) is not a call resource: {why}")]
    BadAnswer { http_status: u16, why: String },
    #[error("Twilio's answer is over {MAX_ANSWER_BYTES} bytes")]
    TooLarge,
}

impl TwilioError {
    /// The failure a transfer reports for it.
    pub fn failure(&self) -> Failure {
        let (http_status, code) = match self {
            TwilioError::Refused {
                http_status, code, ..
            } => (Some(*http_status), Some(*code)),
            TwilioError::HttpStatus { http_status, .. }
            | TwilioError::BadAnswer { http_status, .. } => (Some(*http_status), None),
            _ => (None, None),
        };
        Failure::Rest {
            http_status,
            code,
            message: self.to_string(),
        }
    }
}

fn check_sid(sid: &str, prefix: &str) -> bool {
    sid.len() == 34 && sid.starts_with(prefix) && sid[2..].bytes().all(|b| b.is_ascii_hexdigit())
}

impl TwilioRest {
    pub fn new(settings: RestSettings) -> Result<TwilioRest, TwilioError> {
        if !check_sid(&settings.account_sid, "AC") {
            return Err(TwilioError::BadAccountSid(
                settings.account_sid.chars().take(64).collect(),
            ));
        }
        let bad = |why: &str| TwilioError::BadBaseUrl {
            url: settings.base_url.clone(),
            why: why.to_owned(),
        };
        let base = url::Url::parse(&settings.base_url).map_err(|e| bad(&e.to_string()))?;
        if !matches!(base.scheme(), "http" | "https") {
            return Err(bad("the scheme must be http or https"));
        }
        if !base.username().is_empty() || base.password().is_some() {
            return Err(bad(
                "credentials do not belong in the URL; the auth token is configured on its own",
            ));
        }
        if base.query().is_some() || base.fragment().is_some() {
            return Err(bad("it must not have a query or a fragment"));
        }
        let tls = crate::model::tls::default_client_config().map_err(|e| bad(&e.to_string()))?;
        let client = reqwest::Client::builder()
            .tls_backend_preconfigured((*tls).clone())
            .timeout(settings.timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| bad(&e.to_string()))?;
        Ok(TwilioRest {
            base,
            account_sid: settings.account_sid,
            auth_token: settings.auth_token,
            client,
        })
    }

    /// The URL of a call resource.
    pub fn call_url(&self, call_sid: &str) -> String {
        format!(
            "{}/2010-04-01/Accounts/{}/Calls/{}.json",
            self.base.as_str().trim_end_matches('/'),
            self.account_sid,
            call_sid
        )
    }

    /// Redirects the live call `call_sid` to `<Dial>` `target`: the caller leaves baton's
    /// stream and Twilio rings the person.
    pub async fn redirect_to_dial(
        &self,
        call_sid: &str,
        target: &Destination,
        options: &DialOptions,
    ) -> Result<CallUpdated, TwilioError> {
        if !check_sid(call_sid, "CA") {
            return Err(TwilioError::BadCallSid(call_sid.chars().take(64).collect()));
        }
        let body = url::form_urlencoded::Serializer::new(String::new())
            .append_pair("Twiml", &dial_twiml(target, options))
            .finish();
        let unreachable = |e: reqwest::Error| TwilioError::Unreachable {
            base: self.base.as_str().trim_end_matches('/').to_owned(),
            reason: error_chain(&e.without_url()),
        };
        let mut resp = self
            .client
            .post(self.call_url(call_sid))
            .basic_auth(&self.account_sid, Some(self.auth_token.expose()))
            .header(
                http::header::CONTENT_TYPE,
                "application/x-www-form-urlencoded",
            )
            .header(http::header::ACCEPT, "application/json")
            .body(body)
            .send()
            .await
            .map_err(unreachable)?;
        let status = resp.status().as_u16();
        let mut answer = Vec::new();
        while let Some(chunk) = resp.chunk().await.map_err(unreachable)? {
            if answer.len() + chunk.len() > MAX_ANSWER_BYTES {
                return Err(TwilioError::TooLarge);
            }
            answer.extend_from_slice(&chunk);
        }
        parse_answer(status, &answer)
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(": ");
        out.push_str(&s.to_string());
        source = s.source();
    }
    out
}

/// Twilio's error body (`{"code":20404,"message":"…","more_info":"…","status":404}`).
#[derive(Deserialize)]
struct ErrorBody {
    code: u32,
    message: String,
    more_info: Option<String>,
}

/// Reads Twilio's answer to a call update: the call on 2xx, its typed error otherwise.
pub fn parse_answer(http_status: u16, body: &[u8]) -> Result<CallUpdated, TwilioError> {
    if body.len() > MAX_ANSWER_BYTES {
        return Err(TwilioError::TooLarge);
    }
    if (200..300).contains(&http_status) {
        let call: CallUpdated =
            serde_json::from_slice(body).map_err(|e| TwilioError::BadAnswer {
                http_status,
                why: e.to_string(),
            })?;
        if !check_sid(&call.sid, "CA") {
            return Err(TwilioError::BadAnswer {
                http_status,
                why: format!(
                    "its sid {:?} is not a call SID",
                    excerpt(call.sid.as_bytes())
                ),
            });
        }
        return Ok(call);
    }
    match serde_json::from_slice::<ErrorBody>(body) {
        Ok(e) => Err(TwilioError::Refused {
            http_status,
            code: e.code,
            message: e.message.chars().take(500).collect(),
            more_info: e.more_info.map(|u| u.chars().take(200).collect()),
        }),
        Err(_) => Err(TwilioError::HttpStatus {
            http_status,
            body: excerpt(body),
        }),
    }
}

fn excerpt(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(&body[..body.len().min(200)]);
    let mut s: String = text.chars().filter(|c| !c.is_control()).collect();
    if body.len() > 200 {
        s.push('…');
    }
    s
}

/// The TwiML that dials `target`: `<Response><Dial …><Number>` or `<Sip>` `</Dial></Response>`.
pub fn dial_twiml(target: &Destination, options: &DialOptions) -> String {
    let mut attrs = String::new();
    if let Some(t) = options.ring_timeout {
        attrs.push_str(&format!(" timeout=\"{}\"", t.as_secs().clamp(5, 600)));
    }
    if let Some(id) = &options.caller_id {
        attrs.push_str(&format!(" callerId=\"{}\"", xml_escape(id)));
    }
    let noun = match target {
        Destination::Number(n) => format!("<Number>{}</Number>", xml_escape(n)),
        Destination::Sip(uri) => format!("<Sip>{}</Sip>", xml_escape(uri)),
    };
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Response><Dial{attrs}>{noun}</Dial></Response>"
    )
}

fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dial_twiml_escapes() {
        let t = dial_twiml(
            &Destination::Sip("sip:priya@pbx.example.com;x-a=1&b=<2>".into()),
            &DialOptions {
                ring_timeout: Some(Duration::from_secs(20)),
                caller_id: Some("+15550100\"".into()),
            },
        );
        assert_eq!(
            t,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Response><Dial timeout=\"20\" \
             callerId=\"+15550100&quot;\"><Sip>sip:priya@pbx.example.com;x-a=1&amp;b=&lt;2&gt;\
             </Sip></Dial></Response>"
        );
        let doc = roxmltree::Document::parse(&t).unwrap();
        assert_eq!(doc.root_element().tag_name().name(), "Response");
    }

    #[test]
    fn answers() {
        let ok =
            br#"{"sid":"CA0123456789abcdef0123456789abcdef","status":"in-progress","to":"+1"}"#;
        assert_eq!(parse_answer(200, ok).unwrap().status, "in-progress");
        let e = parse_answer(
            404,
            br#"{"code":20404,"message":"The requested resource was not found","more_info":"https://www.twilio.com/docs/errors/20404","status":404}"#,
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            "Twilio refused the redirect (HTTP 404, error 20404): The requested resource was not \
             found (see https://www.twilio.com/docs/errors/20404)"
        );
        assert_eq!(
            e.failure(),
            Failure::Rest {
                http_status: Some(404),
                code: Some(20404),
                message: e.to_string()
            }
        );
        let e = parse_answer(502, b"<html>Bad gateway</html>").unwrap_err();
        assert!(
            matches!(
                e,
                TwilioError::HttpStatus {
                    http_status: 502,
                    ..
                }
            ),
            "{e}"
        );
        let e = parse_answer(200, b"<html>").unwrap_err().to_string();
        assert!(e.contains("not a call resource"), "{e}");
        let e = parse_answer(200, br#"{"sid":"XX","status":"queued"}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a call SID"), "{e}");
    }

    #[test]
    fn sids_and_base_urls_are_checked_and_the_token_never_shows() {
        let settings = |base: &str, sid: &str| RestSettings {
            base_url: base.into(),
            account_sid: sid.into(),
            auth_token: Secret::new("tok-SENTINEL-1234"),
            timeout: Duration::from_secs(5),
        };
        let good = "AC0123456789abcdef0123456789abcdef";
        assert!(matches!(
            TwilioRest::new(settings("https://api.twilio.com", "AC123")),
            Err(TwilioError::BadAccountSid(_))
        ));
        let e = TwilioRest::new(settings("ftp://x", good))
            .unwrap_err()
            .to_string();
        assert!(e.contains("http or https"), "{e}");
        let e = TwilioRest::new(settings("https://AC1:tok@api.twilio.com", good))
            .unwrap_err()
            .to_string();
        assert!(e.contains("credentials do not belong"), "{e}");
        let rest = TwilioRest::new(settings("http://127.0.0.1:1/", good)).unwrap();
        assert_eq!(
            rest.call_url("CA0123456789abcdef0123456789abcdef"),
            "http://127.0.0.1:1/2010-04-01/Accounts/AC0123456789abcdef0123456789abcdef/Calls/\
             CA0123456789abcdef0123456789abcdef.json"
        );
        assert!(!format!("{rest:?}").contains("SENTINEL"));
    }
}
