//! Handoff phrases in the agent's own transcript (seed 002), checked from the most confident
//! rule down: the exact template, domain-boundary phrases, explicit handoff language, then
//! keyword proximity (one word of every group within a window of characters).

use regex::Regex;
use serde::Serialize;

/// Which rule recognised a handoff phrase (most confident first).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PhraseRule {
    ExactTemplate,
    BoundaryPhrase,
    ExplicitHandoff,
    KeywordProximity,
}

/// A recognised handoff phrase.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PhraseMatch {
    pub rule: PhraseRule,
    /// The words that matched.
    pub matched: String,
}

/// The compiled rules of a set.
#[derive(Clone, Debug, Default)]
pub struct PhraseRules {
    pub enabled: bool,
    pub exact: Vec<Regex>,
    pub boundary: Vec<Regex>,
    pub explicit: Vec<Regex>,
    /// One regex per group: `\b(word|word)\b`.
    pub groups: Vec<Regex>,
    pub window: usize,
}

impl PhraseRules {
    /// The most confident rule that matches `text`, if any (and if detection is enabled).
    pub fn detect(&self, text: &str) -> Option<PhraseMatch> {
        if !self.enabled {
            return None;
        }
        let lists = [
            (PhraseRule::ExactTemplate, &self.exact),
            (PhraseRule::BoundaryPhrase, &self.boundary),
            (PhraseRule::ExplicitHandoff, &self.explicit),
        ];
        for (rule, list) in lists {
            if let Some(m) = list.iter().find_map(|r| r.find(text)) {
                return Some(PhraseMatch {
                    rule,
                    matched: m.as_str().to_owned(),
                });
            }
        }
        self.proximity(text).map(|matched| PhraseMatch {
            rule: PhraseRule::KeywordProximity,
            matched,
        })
    }

    /// One word of every group within `window` characters (from the first character of the
    /// earliest word to the last character of the latest).
    fn proximity(&self, text: &str) -> Option<String> {
        if self.groups.is_empty() {
            return None;
        }
        // (start, end) in characters, per group.
        let occurrences: Vec<Vec<(usize, usize)>> = self
            .groups
            .iter()
            .map(|g| {
                g.find_iter(text)
                    .map(|m| (char_pos(text, m.start()), char_pos(text, m.end())))
                    .collect()
            })
            .collect();
        let starts = occurrences.iter().flatten().map(|&(s, _)| s);
        for from in starts {
            let limit = from + self.window;
            let ends: Option<Vec<usize>> = occurrences
                .iter()
                .map(|occ| {
                    occ.iter()
                        .filter(|&&(s, e)| s >= from && e <= limit)
                        .map(|&(_, e)| e)
                        .min()
                })
                .collect();
            if let Some(ends) = ends {
                let to = ends.into_iter().max().unwrap_or(from);
                return Some(text.chars().skip(from).take(to - from).collect());
            }
        }
        None
    }
}

/// Handoff language every agent set understands, for sets without `[phrases]` on a model whose
/// calls pause its speech (the handoff then rides on the announcing words, see
/// [`super::tools::handoffs_by_words`]): only a sentence that also names an agent counts.
pub fn announcement(text: &str) -> Option<PhraseMatch> {
    static RE: std::sync::OnceLock<Option<Regex>> = std::sync::OnceLock::new();
    let re = RE.get_or_init(|| {
        Regex::new(
            r"(?i)\b(let me (bring in|get)|bring(ing)? in|connect(ing)? you (with|to)|pass(ing)? you (over )?to|hand(ing)? you (back |over )?to|transfer(ring)? you to|put(ting)? you through to)\b",
        )
        .ok()
    });
    let m = re.as_ref()?.find(text)?;
    Some(PhraseMatch {
        rule: PhraseRule::ExplicitHandoff,
        matched: m.as_str().to_owned(),
    })
}

fn char_pos(text: &str, byte: usize) -> usize {
    text.get(..byte).map_or(0, |s| s.chars().count())
}

/// The regex of one proximity group.
pub fn group_regex(words: &[String]) -> Result<Regex, regex::Error> {
    let alts: Vec<String> = words.iter().map(|w| regex::escape(w.trim())).collect();
    Regex::new(&format!(r"(?i)\b({})\b", alts.join("|")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agents::config::PhrasesSection;
    use crate::agents::matching::compile;

    fn seed_rules() -> PhraseRules {
        let s = PhrasesSection::default();
        let c = |v: &[String]| v.iter().map(|p| compile(p).unwrap()).collect();
        PhraseRules {
            enabled: true,
            exact: c(&s.exact),
            boundary: c(&s.boundary),
            explicit: c(&s.explicit),
            groups: s
                .proximity_groups
                .iter()
                .map(|g| group_regex(g).unwrap())
                .collect(),
            window: s.proximity_window,
        }
    }

    fn rule(text: &str) -> Option<PhraseRule> {
        seed_rules().detect(text).map(|m| m.rule)
    }

    #[test]
    fn each_seed_rule_in_order_of_confidence() {
        assert_eq!(
            rule("This is outside my area. Let me connect you with the right specialist."),
            Some(PhraseRule::ExactTemplate)
        );
        assert_eq!(
            rule("Hmm, that's outside my expertise, sorry."),
            Some(PhraseRule::BoundaryPhrase)
        );
        assert_eq!(
            rule("Invoices are not my specialty."),
            Some(PhraseRule::BoundaryPhrase)
        );
        assert_eq!(
            rule("Let me transfer you now."),
            Some(PhraseRule::ExplicitHandoff)
        );
        assert_eq!(
            rule("A colleague is better suited to help with that."),
            Some(PhraseRule::ExplicitHandoff)
        );
        assert_eq!(
            rule("That question is outside what my area covers, so I will transfer you."),
            Some(PhraseRule::KeywordProximity)
        );
        assert_eq!(rule("Your bill is 45 dollars and 99 cents."), None);
    }

    #[test]
    fn proximity_needs_every_group_within_100_characters() {
        let filler = "x".repeat(120);
        // The three words spread over more than 100 characters: no handoff.
        assert_eq!(
            rule(&format!(
                "That is outside {filler} of the area we cover; I will transfer you."
            )),
            None
        );
        // Exactly at the limit: "outside" … "transfer" spans 100 characters.
        let pad = "y".repeat(100 - "outside ".len() - " area transfer".len());
        let text = format!("outside {pad} area transfer");
        assert_eq!(text.chars().count(), 100);
        assert_eq!(rule(&text), Some(PhraseRule::KeywordProximity));
        let text = format!("outside {pad}z area transfer");
        assert_eq!(rule(&text), None, "101 characters is too far");
        // Whole words only: "outsider" and "areas" do not count.
        assert_eq!(rule("The outsider areas transfer well."), None);
    }

    #[test]
    fn disabled_rules_detect_nothing() {
        let mut r = seed_rules();
        r.enabled = false;
        assert_eq!(r.detect("Let me transfer you now."), None);
    }
}
