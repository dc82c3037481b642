//! TwiML that points a Twilio number at baton: `<Connect><Stream url="wss://…/twilio">` with
//! `<Parameter>`s (Media Stream URLs carry no query string, so per-call data travels as
//! parameters and arrives in `start.customParameters`).

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
}
