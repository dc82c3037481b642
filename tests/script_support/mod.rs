//! What a call must sound like to play to its script, and the check against what it did: the
//! agents' lines the scenario scripts (from the call's transcript), the scripted reply clips
//! found in the caller's recording by cross-correlation (not from baton's own events), each
//! handoff once in the scripted order, no unscripted audio, no underrun, and the silence a
//! handoff inserted, measured on the recording and compared with the reported `gap_ms`.
#![allow(dead_code)]

use std::path::Path;

use baton::agents::CallEvent;
use baton::agents::events::Speaker;
use baton::audio::resample::resample_all;
use baton::call::metrics::CallReport;
use baton::mock::Scenario;

/// The mock's clips are 24 kHz; what the caller heard is at the leg's rate.
const CLIP_RATE: u32 = 24_000;
/// Frames of 20 ms at 16 kHz.
pub const FRAME: usize = 320;

/// One scripted reply: its words and its audio at the recording's rate.
pub struct Line {
    pub text: String,
    pub audio: Vec<i16>,
    /// This reply is the one a handoff's new agent says right after the announcement.
    pub after_handoff: bool,
}

/// What the caller of one scenario must hear.
pub struct Script {
    pub lines: Vec<Line>,
    /// Scripted handoffs, (announcing persona, persona taking over), in order.
    pub handoffs: Vec<(String, String)>,
    /// The scenario has an agent set.
    pub agents: bool,
}

impl Script {
    /// The happy path of `s` heard at `rate`: each caller turn answered with its `reply`,
    /// followed by its `[turn.handoff]` reply when it hands off.
    pub fn of(s: &Scenario, rate: u32) -> Script {
        let mut lines = Vec::new();
        let mut handoffs = Vec::new();
        let audio = |clip: &[i16]| resample_all(clip, CLIP_RATE, rate).expect("resample");
        let mut speaking: Option<String> = s.personas.first().map(|p| p.id.clone());
        for t in &s.turns {
            if let Some(by) = &t.by {
                speaking = Some(by.clone());
            }
            lines.push(Line {
                text: t.reply.text.trim().to_owned(),
                audio: audio(&t.reply.audio),
                after_handoff: false,
            });
            if let Some(h) = &t.handoff {
                handoffs.push((speaking.clone().unwrap_or_default(), h.to.clone()));
                speaking = Some(h.to.clone());
                lines.push(Line {
                    text: h.reply.text.trim().to_owned(),
                    audio: audio(&h.reply.audio),
                    after_handoff: true,
                });
            }
        }
        Script {
            lines,
            handoffs,
            agents: s.agents.is_some(),
        }
    }
}

/// A scripted clip found in the recording (sample positions at the recording's rate).
#[derive(Clone, Copy, Debug)]
pub struct Found {
    pub start: usize,
    pub end: usize,
    pub corr: f64,
}

/// The right channel (what the caller heard) of a stereo recording, and its rate.
pub fn heard(path: &Path) -> (Vec<i16>, u32) {
    let wav = baton::audio::wav::read_interleaved(path).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(wav.channels, 2, "{}: not stereo", path.display());
    (wav.channel(1), wav.rate)
}

fn energy(x: &[i16]) -> f64 {
    x.iter().map(|&v| f64::from(v) * f64::from(v)).sum()
}

/// Normalised correlation of `clip[..n]` with `track[at..]`.
fn corr(track: &[i16], clip: &[i16], at: usize, n: usize) -> f64 {
    let n = n.min(clip.len()).min(track.len().saturating_sub(at));
    if n == 0 {
        return 0.0;
    }
    let (mut xy, mut xx, mut yy) = (0.0f64, 0.0f64, 0.0f64);
    for i in 0..n {
        let (x, y) = (f64::from(track[at + i]), f64::from(clip[i]));
        xy += x * y;
        xx += x * x;
        yy += y * y;
    }
    if xx > 0.0 && yy > 0.0 {
        xy / (xx * yy).sqrt()
    } else {
        0.0
    }
}

/// Frames (index) whose level is above -50 dBFS.
fn voiced(track: &[i16]) -> Vec<bool> {
    track
        .chunks(FRAME)
        .map(|f| baton::audio::vad::rms_dbfs(f) > -50.0)
        .collect()
}

/// Where a clip's own audio starts (its leading silence skipped), in samples.
fn onset(clip: &[i16]) -> usize {
    clip.chunks(FRAME / 4)
        .position(|c| baton::audio::vad::rms_dbfs(c) > -50.0)
        .map_or(0, |i| i * FRAME / 4)
}

/// Finds the scripted clips in order. Each is looked for from the end of the one before: at
/// that point (a gapless follow-on) and at every voice onset up to 2 s later, ±20 ms, by the
/// correlation of its first 200 ms; the whole clip must then correlate ≥ 0.9.
pub fn find_clips(track: &[i16], lines: &[Line]) -> Result<Vec<Found>, String> {
    let v = voiced(track);
    let mut found = Vec::new();
    let mut from = 0usize;
    for (k, line) in lines.iter().enumerate() {
        let lead = onset(&line.audio);
        let clip = &line.audio[lead..];
        let probe = clip.len().min(3200);
        let mut candidates = vec![from];
        let first_frame = from / FRAME;
        for f in first_frame..v.len().min(first_frame + 100 + track.len() / FRAME) {
            let onset_here = v[f] && (f == 0 || !v[f - 1]);
            if onset_here && f * FRAME >= from {
                candidates.push(f * FRAME);
            }
        }
        let mut best = (0.0f64, 0usize);
        for c in candidates {
            // Every sample by the first 50 ms (a talkspurt starts wherever its audio arrived,
            // not on the 20 ms grid, and speech decorrelates within a fraction of a
            // millisecond), then the whole probe around the best.
            let short = probe.min(800);
            let mut coarse = (f64::MIN, c);
            for at in c.saturating_sub(FRAME)..=(c + FRAME).min(track.len()) {
                let r = corr(track, clip, at, short);
                if r > coarse.0 {
                    coarse = (r, at);
                }
            }
            let mut local = (0.0f64, coarse.1);
            for at in coarse.1.saturating_sub(8)..=(coarse.1 + 8).min(track.len()) {
                let r = corr(track, clip, at, probe);
                if r > local.0 {
                    local = (r, at);
                }
            }
            if local.0 > best.0 {
                best = local;
            }
            if best.0 > 0.95 {
                break;
            }
        }
        let whole = corr(track, clip, best.1, clip.len());
        if whole < 0.9 {
            return Err(format!(
                "line {} {:?} not heard where expected (after {:.2} s): best correlation {whole:.2}",
                k + 1,
                line.text,
                from as f64 / 16_000.0
            ));
        }
        // Positions of the clip file as a whole (its own leading silence included), so that
        // the distance between two clips is the silence the call inserted.
        let start = best.1.saturating_sub(lead);
        let end = start + line.audio.len();
        found.push(Found {
            start,
            end,
            corr: whole,
        });
        from = end.saturating_sub(FRAME);
    }
    Ok(found)
}

/// Voiced stretches (ms) of the recording that no found clip covers (unscripted speech), longer
/// than one frame.
pub fn unscripted(track: &[i16], found: &[Found], rate: u32) -> Vec<(f64, f64)> {
    let v = voiced(track);
    let covered = |f: usize| {
        let (a, b) = (f * FRAME, (f + 1) * FRAME);
        found
            .iter()
            .any(|c| a + FRAME / 2 >= c.start && b <= c.end + FRAME / 2)
    };
    let mut out = Vec::new();
    let mut run: Option<usize> = None;
    for f in 0..=v.len() {
        let bad = f < v.len()
            && v[f]
            && !covered(f)
            && energy(&track[f * FRAME..((f + 1) * FRAME).min(track.len())]) > 0.0;
        match (bad, run) {
            (true, None) => run = Some(f),
            (false, Some(s)) => {
                if f - s > 1 {
                    let ms = |i: usize| (i * FRAME) as f64 * 1000.0 / f64::from(rate);
                    out.push((ms(s), ms(f)));
                }
                run = None;
            }
            _ => {}
        }
    }
    out
}

/// The agents' lines in the call's transcript, in order (agent set), else each turn's words.
pub fn agent_lines(report: &CallReport) -> Vec<String> {
    let from_events: Vec<String> = report
        .events
        .iter()
        .filter_map(|e| match e {
            CallEvent::Transcript {
                role: Speaker::Agent,
                text,
                ..
            } => Some(text.trim().to_owned()),
            _ => None,
        })
        .collect();
    if !from_events.is_empty() {
        return from_events;
    }
    report
        .turns
        .iter()
        .map(|t| t.agent_text.trim().to_owned())
        .filter(|t| !t.is_empty())
        .collect()
}

/// Everything that differs from the script, one line each (empty: the call played to it).
/// `gapless`: no handoff may insert any silence by the recording (the next agent's first sample
/// follows the announcement's last). Every handoff's reported `gap_ms` must agree with the
/// recording within 1 ms.
pub fn check(script: &Script, report: &CallReport, recording: &Path, gapless: bool) -> Vec<String> {
    let mut bad = Vec::new();
    let said = agent_lines(report);
    let want: Vec<&str> = script.lines.iter().map(|l| l.text.as_str()).collect();
    if said != want {
        bad.push(format!("said {said:?}, scripted {want:?}"));
    }
    if report.underruns != 0 {
        bad.push(format!("{} underruns", report.underruns));
    }
    if script.agents {
        let done: Vec<(String, String)> = report
            .handoffs
            .iter()
            .map(|h| (h.from.clone(), h.to.clone()))
            .collect();
        if done != script.handoffs {
            bad.push(format!("handoffs {done:?}, scripted {:?}", script.handoffs));
        }
    }
    let (track, rate) = heard(recording);
    match find_clips(&track, &script.lines) {
        Err(e) => bad.push(e),
        Ok(found) => {
            let mut reported = report.handoffs.iter();
            for (i, pair) in found.windows(2).enumerate() {
                let line = &script.lines[i + 1];
                if !line.after_handoff {
                    continue;
                }
                let gap = pair[1].start as i64 - pair[0].end as i64;
                let gap_ms = gap as f64 * 1000.0 / f64::from(rate);
                if gapless && gap > 0 {
                    bad.push(format!(
                        "handoff before {:?} inserted {gap_ms:.2} ms of silence (recording)",
                        line.text
                    ));
                }
                match reported.next().and_then(|h| h.gap_ms) {
                    Some(r) if (r - gap_ms.max(0.0)).abs() <= 1.0 => {}
                    other => bad.push(format!(
                        "handoff before {:?}: gap_ms {other:?}, the recording says {gap_ms:.2}",
                        line.text
                    )),
                }
            }
            let extra = unscripted(&track, &found, rate);
            if !extra.is_empty() {
                bad.push(format!("unscripted audio at {extra:?} ms"));
            }
        }
    }
    bad
}

/// The silence (ms) inserted before each handoff's new agent, by the recording.
pub fn handoff_gaps_ms(script: &Script, recording: &Path) -> Result<Vec<f64>, String> {
    let (track, rate) = heard(recording);
    let found = find_clips(&track, &script.lines)?;
    Ok(found
        .windows(2)
        .zip(&script.lines[1..])
        .filter(|(_, l)| l.after_handoff)
        .map(|(p, _)| (p[1].start as f64 - p[0].end as f64) * 1000.0 / f64::from(rate))
        .collect())
}
