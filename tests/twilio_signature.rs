//! X-Twilio-Signature against vectors computed by the official `twilio` Python library
//! (tests/python/twilio_signature_vectors.py → tests/data/twilio/signature_vectors.json), plus the
//! upgrade-header check the stream route uses.

use axum::http::{HeaderMap, HeaderValue};
use baton::leg::twilio::signature::{
    AuthToken, SIGNATURE_HEADER, SignatureError, sign, validate, verify_upgrade,
};
use serde_json::Value;

fn vectors() -> Value {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/twilio/signature_vectors.json"
    );
    let text = std::fs::read_to_string(path).expect("signature vectors are committed");
    serde_json::from_str(&text).expect("signature vectors are JSON")
}

fn params(v: &Value) -> Vec<(String, String)> {
    v["params"]
        .as_array()
        .expect("params array")
        .iter()
        .map(|p| {
            (
                p[0].as_str().expect("name").to_owned(),
                p[1].as_str().expect("value").to_owned(),
            )
        })
        .collect()
}

fn as_refs(p: &[(String, String)]) -> Vec<(&str, &str)> {
    p.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect()
}

#[test]
fn signing_matches_the_official_library() {
    let v = vectors();
    let cases = v["sign"].as_array().expect("sign vectors");
    assert!(cases.len() >= 8);
    for c in cases {
        let url = c["url"].as_str().expect("url");
        let p = params(c);
        let token = AuthToken::new(c["token"].as_str().expect("token"));
        assert_eq!(
            sign(url, &as_refs(&p), &token),
            c["signature"].as_str().expect("signature"),
            "signature of {url} with {p:?}"
        );
    }
}

#[test]
fn validation_matches_the_official_library() {
    let v = vectors();
    let cases = v["validate"].as_array().expect("validate vectors");
    let (mut valid, mut invalid) = (0, 0);
    for c in cases {
        let name = c["name"].as_str().expect("name");
        let url = c["url"].as_str().expect("url");
        let p = params(c);
        let token = AuthToken::new(c["token"].as_str().expect("token"));
        let sig = c["signature"].as_str().expect("signature");
        let want = c["valid"].as_bool().expect("valid");
        let got = validate(url, &as_refs(&p), sig, &token);
        assert_eq!(got.is_ok(), want, "{name}: {got:?}");
        if want { valid += 1 } else { invalid += 1 }
    }
    // The vectors cover both outcomes, tampered URLs, params and tokens.
    assert!(
        valid >= 6 && invalid >= 8,
        "{valid} valid, {invalid} invalid"
    );
}

#[test]
fn upgrade_headers_are_checked_against_the_configured_url() {
    let token = AuthToken::new("12345678901234567890123456789012");
    let public = "wss://baton.example.com/twilio/media";
    let mut headers = HeaderMap::new();
    assert_eq!(
        verify_upgrade(&headers, public, &token),
        Err(SignatureError::Missing)
    );

    let sig = sign("wss://baton.example.com:443/twilio/media", &[], &token);
    headers.insert(SIGNATURE_HEADER, HeaderValue::from_str(&sig).unwrap());
    assert_eq!(verify_upgrade(&headers, public, &token), Ok(()));
    // The header name is case-insensitive on the wire.
    let mut upper = HeaderMap::new();
    upper.insert("X-Twilio-Signature", HeaderValue::from_str(&sig).unwrap());
    assert_eq!(verify_upgrade(&upper, public, &token), Ok(()));

    let err = verify_upgrade(&headers, "wss://baton.example.com/other", &token).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("wss://baton.example.com/other"), "{text}");
    assert!(text.contains(":443"), "{text}");
    // Neither the token nor the expected signature leaks into the error.
    assert!(!text.contains("1234567890123"), "{text}");
    let expected = sign("wss://baton.example.com/other", &[], &token);
    assert!(!text.contains(&expected), "{text}");
    assert!(!format!("{err:?}").contains("1234567890123"));

    let wrong = AuthToken::new("00000000000000000000000000000000");
    assert!(matches!(
        verify_upgrade(&headers, public, &wrong),
        Err(SignatureError::Mismatch { .. })
    ));
}
