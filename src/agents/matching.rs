//! Text and data matching for triggers: keywords as whole words with case and punctuation
//! ignored ("PM-KISAN" matches "pm kisan"), intent patterns as case-insensitive regexes, and
//! call-data conditions (`dicom_status == "dirty"`).

use std::collections::BTreeMap;

use regex::Regex;

/// Lowercases, turns every non-alphanumeric character into a space and pads with one space at
/// each end, so a whole-word match is a substring test for `" word "`.
pub fn normalize(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push(' ');
    let mut space = true;
    for ch in text.chars() {
        if ch.is_alphanumeric() {
            out.extend(ch.to_lowercase());
            space = false;
        } else if !space {
            out.push(' ');
            space = true;
        }
    }
    if !space {
        out.push(' ');
    }
    out
}

/// A keyword or phrase as configured, and its normalized, padded form.
#[derive(Clone, Debug)]
pub struct Keyword {
    pub raw: String,
    padded: String,
}

impl Keyword {
    /// `None` when the keyword has no letters or digits.
    pub fn new(raw: &str) -> Option<Keyword> {
        let padded = normalize(raw);
        (padded.trim() != "").then(|| Keyword {
            raw: raw.to_owned(),
            padded,
        })
    }

    /// Whether the keyword occurs as whole words in `normalized` (from [`normalize`]).
    pub fn found_in(&self, normalized: &str) -> bool {
        normalized.contains(&self.padded)
    }
}

/// Words and patterns that match a piece of transcript.
#[derive(Clone, Debug, Default)]
pub struct TextTriggers {
    pub keywords: Vec<Keyword>,
    pub patterns: Vec<Regex>,
}

/// What matched, for the handoff's reason.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TextMatch {
    Keyword(String),
    Pattern(String),
}

impl TextMatch {
    pub fn describe(&self) -> String {
        match self {
            TextMatch::Keyword(k) => format!("keyword {k:?}"),
            TextMatch::Pattern(p) => format!("pattern /{p}/"),
        }
    }
}

impl TextTriggers {
    pub fn is_empty(&self) -> bool {
        self.keywords.is_empty() && self.patterns.is_empty()
    }

    /// Every keyword and pattern that matches. `raw` is the text as heard, `normalized` its
    /// [`normalize`]d form.
    pub fn matches(&self, raw: &str, normalized: &str) -> Vec<TextMatch> {
        let mut out: Vec<TextMatch> = self
            .keywords
            .iter()
            .filter(|k| k.found_in(normalized))
            .map(|k| TextMatch::Keyword(k.raw.clone()))
            .collect();
        out.extend(
            self.patterns
                .iter()
                .filter(|p| p.is_match(raw))
                .map(|p| TextMatch::Pattern(p.as_str().trim_start_matches("(?is)").to_owned())),
        );
        out
    }
}

/// Compiles a configured pattern case-insensitively, `.` matching newlines too.
pub fn compile(pattern: &str) -> Result<Regex, regex::Error> {
    Regex::new(&format!("(?is){pattern}"))
}

/// A test on one call-data key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Test {
    Equals(String),
    NotEquals(String),
    Present(bool),
}

/// A call-data condition with the sentence said when it refuses a handoff.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Condition {
    pub key: String,
    pub test: Test,
    pub reason: String,
}

impl Condition {
    pub fn holds(&self, data: &BTreeMap<String, String>) -> bool {
        let v = data.get(&self.key);
        match &self.test {
            Test::Equals(x) => v == Some(x),
            Test::NotEquals(x) => v != Some(x),
            Test::Present(p) => v.is_some_and(|v| !v.is_empty()) == *p,
        }
    }

    /// The reason as configured, or one made from the test.
    pub fn describe(&self) -> String {
        if !self.reason.is_empty() {
            return self.reason.clone();
        }
        match &self.test {
            Test::Equals(x) => format!("{} is {x:?}", self.key),
            Test::NotEquals(x) => format!("{} is not {x:?}", self.key),
            Test::Present(true) => format!("{} is known", self.key),
            Test::Present(false) => format!("{} is not known yet", self.key),
        }
    }
}

/// Appends a transcript fragment, adding a space only where neither side has one.
pub fn append_fragment(line: &mut String, fragment: &str) {
    if !line.is_empty()
        && !line.ends_with(char::is_whitespace)
        && !fragment.starts_with(char::is_whitespace)
        && !fragment.starts_with(['.', ',', '!', '?', ';', ':'])
    {
        line.push(' ');
    }
    line.push_str(fragment);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keywords_match_whole_words_ignoring_case_and_punctuation() {
        let k = Keyword::new("PM-KISAN").unwrap();
        assert!(k.found_in(&normalize("Tell me about pm kisan please")));
        assert!(k.found_in(&normalize("PM-Kisan?")));
        assert!(!k.found_in(&normalize("pmkisan")));
        let loan = Keyword::new("loan").unwrap();
        assert!(
            !loan.found_in(&normalize("loans and more")),
            "whole words only"
        );
        assert!(Keyword::new(" - ").is_none());
    }

    #[test]
    fn patterns_are_case_insensitive() {
        let t = TextTriggers {
            keywords: vec![],
            patterns: vec![compile("(book|schedule) a (visit|viewing)").unwrap()],
        };
        let raw = "Can I Schedule a Visit on Friday?";
        assert_eq!(
            t.matches(raw, &normalize(raw)),
            vec![TextMatch::Pattern(
                "(book|schedule) a (visit|viewing)".into()
            )]
        );
        assert!(compile("(unclosed").is_err());
    }

    #[test]
    fn conditions() {
        let mut d = BTreeMap::new();
        let dirty = Condition {
            key: "dicom_status".into(),
            test: Test::Equals("dirty".into()),
            reason: String::new(),
        };
        assert!(!dirty.holds(&d));
        d.insert("dicom_status".into(), "dirty".into());
        assert!(dirty.holds(&d));
        assert_eq!(dirty.describe(), "dicom_status is \"dirty\"");
        let known = Condition {
            key: "name".into(),
            test: Test::Present(true),
            reason: String::new(),
        };
        assert!(!known.holds(&d));
        d.insert("name".into(), "Ana".into());
        assert!(known.holds(&d));
    }

    #[test]
    fn fragments_join_with_single_spaces() {
        let mut s = String::new();
        append_fragment(&mut s, "Hello");
        append_fragment(&mut s, "there");
        append_fragment(&mut s, ".");
        append_fragment(&mut s, " Bye");
        assert_eq!(s, "Hello there. Bye");
    }
}
