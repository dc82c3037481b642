//! Who the mock model is speaking as. A scenario's personas are named on the wire by their
//! *marker* (an agent's name, e.g. "Asha"): the mock looks for markers in the texts a client sends
//! (system instructions, injected turns, tool responses) and switches voice when one names another
//! persona. This module only finds markers in text; the engine decides which texts count.
//!
//! Matching rule: a marker counts as a whole word, case-sensitively ("Bill" is not found in
//! "Billing" nor in "my bill"). If a marker follows "You are" / "You're" (any case), the first
//! such marker names the persona ("The caller spoke with Asha. You are Ravi, …" names Ravi);
//! otherwise the marker that occurs first does.

use serde_json::Value;

use crate::model::gemini::wire::Content;

/// The index (into `markers`) of the persona that `text` names, if any.
pub fn named_in(markers: &[&str], text: &str) -> Option<usize> {
    let mut first: Option<(usize, usize)> = None;
    let mut addressed: Option<(usize, usize)> = None;
    for (i, marker) in markers.iter().enumerate() {
        for pos in word_positions(text, marker) {
            if first.is_none_or(|(p, _)| pos < p) {
                first = Some((pos, i));
            }
            if is_addressed(&text[..pos]) && addressed.is_none_or(|(p, _)| pos < p) {
                addressed = Some((pos, i));
            }
        }
    }
    addressed.or(first).map(|(_, i)| i)
}

/// The persona named by the text parts of `contents`, read as one text in order.
pub fn named_in_contents<'a>(
    markers: &[&str],
    contents: impl IntoIterator<Item = &'a Content>,
) -> Option<usize> {
    let text: Vec<&str> = contents
        .into_iter()
        .flat_map(|c| c.parts.iter().filter_map(|p| p.text.as_deref()))
        .collect();
    named_in(markers, &text.join("\n"))
}

/// The persona named by the strings inside a JSON value (a tool response's content).
pub fn named_in_json(markers: &[&str], value: &Value) -> Option<usize> {
    let mut texts = Vec::new();
    collect_strings(value, &mut texts);
    named_in(markers, &texts.join("\n"))
}

fn collect_strings<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
    match v {
        Value::String(s) => out.push(s),
        Value::Array(items) => items.iter().for_each(|i| collect_strings(i, out)),
        Value::Object(map) => map.values().for_each(|i| collect_strings(i, out)),
        _ => {}
    }
}

/// Byte positions where `marker` occurs as a whole word.
fn word_positions<'a>(text: &'a str, marker: &'a str) -> impl Iterator<Item = usize> + 'a {
    let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
    text.match_indices(marker).filter_map(move |(pos, m)| {
        let before = text[..pos].chars().next_back();
        let after = text[pos + m.len()..].chars().next();
        (!marker.is_empty() && !word(before) && !word(after)).then_some(pos)
    })
}

/// The text before a marker ends with "you are" / "you're" (the persona being addressed).
fn is_addressed(before: &str) -> bool {
    let lower = before.trim_end().to_lowercase();
    ["you are", "you're", "you\u{2019}re"]
        .iter()
        .any(|p| lower.ends_with(p))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const M: [&str; 3] = ["Asha", "Ravi", "Bill"];

    #[test]
    fn first_whole_word_marker_wins() {
        assert_eq!(named_in(&M, "Asha here, with Ravi."), Some(0));
        assert_eq!(named_in(&M, "Hand over to Ravi; Asha stays."), Some(1));
        assert_eq!(named_in(&M, "Billing questions and my bill."), None);
        assert_eq!(named_in(&M, "Ashanti"), None);
        assert_eq!(named_in(&M, "(Bill)"), Some(2));
        assert_eq!(named_in(&M, ""), None);
    }

    #[test]
    fn the_addressed_persona_wins() {
        assert_eq!(
            named_in(
                &M,
                "The caller spoke with Asha.\nYou are Ravi, the schemes specialist."
            ),
            Some(1)
        );
        assert_eq!(named_in(&M, "you're Bill now; Asha is away"), Some(2));
        assert_eq!(named_in(&M, "You are Asha, hand off to Ravi."), Some(0));
    }

    #[test]
    fn json_and_contents() {
        let v = json!({"output": {"brief": "The caller talked to Asha.",
                                  "instruction": "You are Ravi, …", "n": 3}});
        assert_eq!(named_in_json(&M, &v), Some(1));
        assert_eq!(named_in_json(&M, &json!({"status": "ok"})), None);
        let c = [
            Content::text(Some("user"), "Speak as Bill."),
            Content::text(Some("user"), "Then Asha."),
        ];
        assert_eq!(named_in_contents(&M, &c), Some(2));
    }
}
