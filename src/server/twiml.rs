//! The answer documents' bodies. TwiML that points a Twilio number at baton:
//! `<Connect><Stream url="wss://…/twilio">` with `<Parameter>`s (Media Stream URLs carry no query
//! string, so per-call data travels as parameters and arrives in `start.customParameters`);
//! Telnyx's TeXML (the same verbs, a bidirectional RTP-mode stream of PCMU), Plivo's XML
//! (`<Stream bidirectional keepCallAlive>` with μ-law 8 kHz) and Vonage's NCCO (a `connect` to a
//! `websocket` endpoint, L16 16 kHz).

/// Escapes text for an XML attribute value.
pub fn xml_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            c if (c as u32) < 0x20 && c != '\t' && c != '\n' && c != '\r' => {}
            c => out.push(c),
        }
    }
    out
}

/// The TwiML document for a bidirectional stream to `stream_url`.
pub fn connect_stream(stream_url: &str, parameters: &[(String, String)]) -> String {
    let mut xml =
        String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response>\n  <Connect>\n");
    xml.push_str(&format!(
        "    <Stream url=\"{}\">\n",
        xml_escape(stream_url)
    ));
    for (name, value) in parameters {
        xml.push_str(&format!(
            "      <Parameter name=\"{}\" value=\"{}\"/>\n",
            xml_escape(name),
            xml_escape(value)
        ));
    }
    xml.push_str("    </Stream>\n  </Connect>\n</Response>\n");
    xml
}

/// TeXML for Telnyx: a bidirectional stream (RTP mode, PCMU both ways) to `stream_url`.
pub fn texml_stream(stream_url: &str) -> String {
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response>\n  <Connect>\n    \
         <Stream url=\"{}\" bidirectionalMode=\"rtp\" bidirectionalCodec=\"PCMU\"/>\n  \
         </Connect>\n</Response>\n",
        xml_escape(stream_url)
    )
}

/// Plivo XML: a bidirectional μ-law 8 kHz stream to `stream_url` that keeps the call up.
pub fn plivo_stream(stream_url: &str) -> String {
    format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Response>\n  <Stream bidirectional=\"true\" \
         keepCallAlive=\"true\" contentType=\"audio/x-mulaw;rate=8000\">{}</Stream>\n</Response>\n",
        xml_escape(stream_url)
    )
}

/// A Vonage NCCO connecting the call to `stream_url` as L16 16 kHz; `from` becomes a header
/// (Vonage repeats headers in its first message).
pub fn vonage_ncco(stream_url: &str, from: Option<&str>) -> serde_json::Value {
    let mut endpoint = serde_json::json!({
        "type": "websocket",
        "uri": stream_url,
        "content-type": "audio/l16;rate=16000",
    });
    if let Some(f) = from {
        endpoint["headers"] = serde_json::json!({ "from": f });
    }
    serde_json::json!([{ "action": "connect", "endpoint": [endpoint] }])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn document_shape_and_escaping() {
        let x = connect_stream(
            "wss://b.example.com/twilio",
            &[
                ("From".into(), "+1555<&>".into()),
                ("q".into(), "\"x\"".into()),
            ],
        );
        assert!(x.contains("<Stream url=\"wss://b.example.com/twilio\">"));
        assert!(x.contains("<Parameter name=\"From\" value=\"+1555&lt;&amp;&gt;\"/>"));
        assert!(x.contains("value=\"&quot;x&quot;\""));
        assert!(x.trim_end().ends_with("</Response>"));
    }

    #[test]
    fn every_dialect_document_parses_and_names_the_stream() {
        let url = "wss://b.example.com/i/b2/telnyx?a=1&b=2";
        for doc in [texml_stream(url), plivo_stream(url)] {
            let parsed = roxmltree::Document::parse(&doc).expect("well-formed XML");
            let stream = parsed
                .descendants()
                .find(|n| n.has_tag_name("Stream"))
                .expect("a Stream element");
            let named = stream.attribute("url").or(stream.text()).unwrap();
            assert_eq!(named, url);
        }
        let n = vonage_ncco("wss://b/vonage", Some("+4520"));
        assert_eq!(n[0]["action"], "connect");
        assert_eq!(n[0]["endpoint"][0]["uri"], "wss://b/vonage");
        assert_eq!(n[0]["endpoint"][0]["headers"]["from"], "+4520");
    }
}
