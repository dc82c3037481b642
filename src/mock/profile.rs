//! Model-behaviour profiles: where the real Live model generations differ on the wire (reference
//! §7, §12.1 items 7–9), and the [`Capabilities`] each one offers, so tests and baton can ask the
//! mock what it supports before planning a handoff.
//!
//! | profile      | `contextUpdate` | NON_BLOCKING tools      | mid-session `clientContent`            | BLOCKING call + new input |
//! |--------------|-----------------|-------------------------|----------------------------------------|---------------------------|
//! | `gemini-3.8` | applied in order, no turn | honoured, with `scheduling` | accepted, roles all session  | call cancelled            |
//! | `gemini-2.5` | close 1007      | honoured, with `scheduling` | accepted (optional quirk: VAD replies wedge after `turnComplete:false`) | input waits for the response |
//! | `gemini-3.1` | close 1007      | ignored: behave BLOCKING | close 1007, except initial history under `historyConfig.initialHistoryInClientContent` before the first `turnComplete:true` | input waits for the response |
//!
//! Every profile accepts initial history (`historyConfig`) and `realtimeInput.text`, and offers
//! session resumption (handles when idle, resumes restoring the conversation; see
//! [`super::engine`]'s `resume` part).

use std::fmt;
use std::str::FromStr;

use crate::model::Capabilities;

/// Model-generation behaviours where the real models differ.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Profile {
    /// gemini-3.8-live: `contextUpdate`, NON_BLOCKING tools with `scheduling`, `clientContent`
    /// with roles all session long (`turnComplete:true` interrupts, `turnComplete:false` only
    /// appends), BLOCKING calls cancelled by new input.
    #[default]
    Gemini38,
    /// gemini-2.5-flash-native-audio: no `contextUpdate`; NON_BLOCKING tools honoured;
    /// `clientContent` accepted mid-session.
    Gemini25,
    /// gemini-3.1-flash-live-preview as launched: no `contextUpdate`; synchronous tools only;
    /// mid-session `clientContent` refused (initial history, before the first `turnComplete:true`
    /// and the model's first reply, excepted).
    Gemini31,
}

/// Every profile, in the order the CLI lists them.
pub const PROFILES: [Profile; 3] = [Profile::Gemini38, Profile::Gemini25, Profile::Gemini31];

impl Profile {
    /// The name used in scenario files and on the command line.
    pub const fn name(self) -> &'static str {
        match self {
            Profile::Gemini38 => "gemini-3.8",
            Profile::Gemini25 => "gemini-2.5",
            Profile::Gemini31 => "gemini-3.1",
        }
    }

    /// What a client can do in place, inside one session of this profile.
    pub const fn capabilities(self) -> Capabilities {
        match self {
            Profile::Gemini38 => Capabilities {
                update_instructions: true,
                update_tools: true,
                non_blocking_tools: true,
                mid_session_client_content: true,
                resumption: true,
                history_config: true,
                calls_pause_speech: false,
            },
            Profile::Gemini25 => Capabilities {
                update_instructions: false,
                update_tools: false,
                non_blocking_tools: true,
                mid_session_client_content: true,
                resumption: true,
                history_config: true,
                calls_pause_speech: false,
            },
            Profile::Gemini31 => Capabilities {
                update_instructions: false,
                update_tools: false,
                non_blocking_tools: false,
                mid_session_client_content: false,
                resumption: true,
                history_config: true,
                calls_pause_speech: true,
            },
        }
    }

    /// The real model this profile imitates, as a client names it in `setup`.
    pub const fn model_id(self) -> &'static str {
        match self {
            Profile::Gemini38 => "models/gemini-3.8-live",
            Profile::Gemini25 => "models/gemini-2.5-flash-native-audio-preview-12-2025",
            Profile::Gemini31 => "models/gemini-3.1-flash-live-preview",
        }
    }

    /// `contextUpdate` is applied (otherwise the session closes with 1007).
    pub const fn context_update(self) -> bool {
        self.capabilities().update_instructions
    }

    /// A BLOCKING call still outstanding is cancelled when the caller starts a new turn (3.8);
    /// older models keep waiting for the response and answer the new turn afterwards.
    pub const fn cancels_blocking_on_input(self) -> bool {
        matches!(self, Profile::Gemini38)
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An unknown profile name.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown model profile {given:?}; expected one of gemini-3.8, gemini-2.5, gemini-3.1")]
pub struct UnknownProfile {
    pub given: String,
}

impl FromStr for Profile {
    type Err = UnknownProfile;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        PROFILES
            .into_iter()
            .find(|p| p.name() == s.trim())
            .ok_or_else(|| UnknownProfile {
                given: s.to_owned(),
            })
    }
}

/// What `baton mock-model --profile` names: a Gemini Live generation, or the OpenAI Realtime
/// protocol (a different wire protocol over the same scenarios, see [`super::openai`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProfileArg {
    Gemini(Profile),
    OpenAi,
}

impl FromStr for ProfileArg {
    type Err = UnknownProfile;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.trim() == "openai" {
            return Ok(ProfileArg::OpenAi);
        }
        s.parse()
            .map(ProfileArg::Gemini)
            .map_err(|_| UnknownProfile {
                given: s.to_owned(),
            })
    }
}

/// Optional imitations of reported model bugs; all off unless a scenario turns them on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Quirks {
    /// gemini-2.5 only: after a `clientContent` without `turnComplete:true`, turns that end by
    /// voice activity get no reply until a `clientContent` with `turnComplete:true` arrives
    /// (live-api-web-console#60).
    pub partial_content_wedges_vad: bool,
    /// A `clientContent` with `turnComplete:false` interrupts a reply being generated (the
    /// proto's wording; the 3.x model pages say it only appends).
    pub partial_content_interrupts: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        for p in PROFILES {
            assert_eq!(p.name().parse::<Profile>(), Ok(p));
            assert_eq!(p.to_string(), p.name());
        }
        let e = "gemini-4".parse::<Profile>().unwrap_err();
        assert!(e.to_string().contains("gemini-4"), "{e}");
        assert_eq!(Profile::default(), Profile::Gemini38);
    }

    #[test]
    fn capabilities_follow_the_model_matrix() {
        let c38 = Profile::Gemini38.capabilities();
        assert!(c38.update_instructions && c38.update_tools && c38.non_blocking_tools);
        assert!(c38.mid_session_client_content);
        let c25 = Profile::Gemini25.capabilities();
        assert!(!c25.update_instructions && c25.non_blocking_tools);
        assert!(c25.mid_session_client_content);
        let c31 = Profile::Gemini31.capabilities();
        assert!(!c31.update_instructions && !c31.non_blocking_tools);
        assert!(!c31.mid_session_client_content);
        assert!(PROFILES.iter().all(|p| p.capabilities().resumption));
    }

    /// What the mock enforces per profile and what baton's model table expects of the model
    /// each profile imitates are written down separately; they must agree.
    #[test]
    fn baton_knows_each_profile_by_its_model_id() {
        use crate::model::catalog::{Source, lookup};
        use crate::model::handle::Protocol;
        for p in PROFILES {
            let info = lookup(Protocol::Gemini, p.model_id());
            assert_eq!(info.source, Source::Known, "{p}");
            assert_eq!(info.capabilities, p.capabilities(), "{p}");
        }
    }
}
