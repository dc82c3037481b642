//! The status line of a REFER's NOTIFY body (`message/sipfrag`, RFC 3420 and RFC 3515 §2.4.5):
//! `SIP/2.0 180 Ringing`, the progress of the call the transferee placed. Only the first line
//! matters; headers after it are ignored.

/// One progress report of a referred call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusLine {
    pub status: u16,
    pub reason: String,
}

impl StatusLine {
    /// 2xx and above end the subscription; 1xx are progress.
    pub fn is_final(&self) -> bool {
        self.status >= 200
    }
}

/// Why a NOTIFY body is not a sipfrag status line.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SipfragError {
    #[error(
        "the NOTIFY body is empty; a sipfrag starts with a status line such as \"SIP/2.0 200 OK\""
    )]
    Empty,
    #[error("the NOTIFY body is not UTF-8 text")]
    NotText,
    #[error("the NOTIFY body's first line is over {0} bytes")]
    TooLong(usize),
    #[error("{line:?} is not a SIP status line: {why} (expected e.g. \"SIP/2.0 180 Ringing\")")]
    BadStatusLine { line: String, why: &'static str },
}

const MAX_LINE: usize = 1024;

/// Reads the status line from a NOTIFY body.
pub fn parse(body: &[u8]) -> Result<StatusLine, SipfragError> {
    let text = std::str::from_utf8(body).map_err(|_| SipfragError::NotText)?;
    let line = text
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .ok_or(SipfragError::Empty)?;
    if line.len() > MAX_LINE {
        return Err(SipfragError::TooLong(MAX_LINE));
    }
    let bad = |why| SipfragError::BadStatusLine {
        line: line.chars().take(80).collect(),
        why,
    };
    let mut parts = line.splitn(3, ' ');
    let version = parts.next().unwrap_or_default();
    if !version.eq_ignore_ascii_case("SIP/2.0") {
        return Err(bad("it does not start with SIP/2.0"));
    }
    let code = parts.next().ok_or_else(|| bad("no status code"))?;
    if code.len() != 3 || !code.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad("the status code is not three digits"));
    }
    let status: u16 = code
        .parse()
        .map_err(|_| bad("the status code is not a number"))?;
    if !(100..=699).contains(&status) {
        return Err(bad("the status code is not between 100 and 699"));
    }
    Ok(StatusLine {
        status,
        reason: parts.next().unwrap_or_default().trim().to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_lines() {
        let s = parse(b"SIP/2.0 180 Ringing\r\n").unwrap();
        assert_eq!(
            (s.status, s.reason.as_str(), s.is_final()),
            (180, "Ringing", false)
        );
        let s = parse(b"\r\nSIP/2.0 200 OK\r\nContact: <sip:p@h>\r\n").unwrap();
        assert_eq!((s.status, s.is_final()), (200, true));
        assert_eq!(parse(b"SIP/2.0 486").unwrap().reason, "");
    }

    #[test]
    fn garbage_is_named() {
        let e = |b: &[u8]| parse(b).unwrap_err().to_string();
        assert!(e(b"").contains("empty"));
        assert!(e(b" \r\n ").contains("empty"));
        assert!(e(b"\xff\xfe").contains("not UTF-8"));
        assert!(e(b"HTTP/1.1 200 OK").contains("does not start with SIP/2.0"));
        assert!(e(b"SIP/2.0").contains("no status code"));
        assert!(e(b"SIP/2.0 2000 OK").contains("three digits"));
        assert!(e(b"SIP/2.0 099 Hm").contains("between 100 and 699"));
        assert!(e("SIP/2.0 200 ".repeat(200).as_bytes()).contains("over 1024 bytes"));
    }
}
