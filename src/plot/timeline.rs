//! Call timeline figures: per call (row), the caller's speech above and each agent's speech in
//! its own colour below, handoffs and reconnects as vertical lines labelled with their gaps, and
//! each turn's `first_audio_ms` after the caller stops.

use plotters::coord::Shift;
use plotters::coord::types::RangedCoordf64;
use plotters::element::DashedPathElement;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use super::cdf::PALETTE;
use super::{Figure, text};
use crate::call::CallReport;

const WIDTH: u32 = 1400;
const HEADER_H: u32 = 96;
const ROW_H: u32 = 118;
const AXIS_H: u32 = 56;
const LABEL_W: u32 = 340;
/// Between the lines of a row's label.
const LINE_H: i32 = 18;
const CALLER: RGBColor = RGBColor(150, 150, 150);
const RECONNECT: RGBColor = RGBColor(200, 0, 0);

/// Speech by one agent on the caller's timeline (ms from call start).
#[derive(Clone, Debug, PartialEq)]
pub struct Speech {
    pub agent: String,
    pub start_ms: f64,
    pub end_ms: f64,
}

/// A labelled instant (handoff heard, reconnect).
#[derive(Clone, Debug, PartialEq)]
pub struct Marker {
    pub at_ms: f64,
    pub label: String,
}

/// One call's lanes.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Row {
    /// One or more lines.
    pub label: String,
    pub end_ms: f64,
    pub caller: Vec<(f64, f64)>,
    pub speech: Vec<Speech>,
    /// `(caller speech end, first agent audio, first_audio_ms)` per answered turn.
    pub responses: Vec<(f64, f64, f64)>,
    pub handoffs: Vec<Marker>,
    pub reconnects: Vec<Marker>,
}

/// The agent id a turn without an agent set is drawn as.
pub const SINGLE_AGENT: &str = "agent";

impl Row {
    /// The lanes of `report`. A turn's agent audio is split where a handoff was heard inside it:
    /// the announcing agent up to its last voiced frame, the new agent from its first.
    pub fn from_report(label: impl Into<String>, report: &CallReport) -> Row {
        let mut heard: Vec<_> = report
            .handoffs
            .iter()
            .filter_map(|h| Some((h.heard_at_ms?, h)))
            .collect();
        heard.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut speech = Vec::new();
        let mut responses = Vec::new();
        for t in &report.turns {
            let (Some(start), Some(end)) = (t.agent_start_ms, t.agent_end_ms) else {
                continue;
            };
            if let Some(v2v) = t.first_audio_ms {
                responses.push((t.caller_end_ms, start, v2v));
            }
            let mut agent = if t.agent.is_empty() {
                SINGLE_AGENT.to_owned()
            } else {
                t.agent.clone()
            };
            let mut from = start;
            for (at, h) in heard.iter().filter(|(at, _)| *at > start && *at <= end) {
                let last_voiced = (at - h.gap_ms.unwrap_or(0.0)).max(from);
                if last_voiced > from {
                    speech.push(Speech {
                        agent: agent.clone(),
                        start_ms: from,
                        end_ms: last_voiced,
                    });
                }
                agent.clone_from(&h.to);
                from = *at;
            }
            if end > from {
                speech.push(Speech {
                    agent,
                    start_ms: from,
                    end_ms: end,
                });
            }
        }
        let handoffs = report
            .handoffs
            .iter()
            .map(|h| match (h.heard_at_ms, h.gap_ms) {
                (Some(at), Some(gap)) => Marker {
                    at_ms: at,
                    label: format!("gap {gap:.0} ms"),
                },
                _ => Marker {
                    at_ms: h.at_ms as f64,
                    label: format!("{} not heard", h.to),
                },
            })
            .collect();
        let reconnects = report
            .reconnects
            .iter()
            .map(|r| Marker {
                at_ms: r.at_ms,
                label: match r.gap_ms {
                    Some(g) => format!("reconnect gap {g:.0} ms"),
                    None => format!("reconnect ({})", r.outcome),
                },
            })
            .collect();
        let caller: Vec<(f64, f64)> = report
            .turns
            .iter()
            .map(|t| (t.caller_start_ms, t.caller_end_ms))
            .collect();
        let end_ms = (report.frames_played as f64 * 20.0)
            .max(speech.iter().map(|s| s.end_ms).fold(0.0, f64::max))
            .max(caller.iter().map(|c| c.1).fold(0.0, f64::max));
        Row {
            label: label.into(),
            end_ms,
            caller,
            speech,
            responses,
            handoffs,
            reconnects,
        }
    }
}

/// The legend of the agents heard in `rows`: `(id, "id (name)")`, in the order `names` lists
/// them (`(id, name)`), then any other agent in the order heard.
pub fn agents_heard(names: &[(String, String)], rows: &[Row]) -> Vec<(String, String)> {
    let mut ids: Vec<&str> = names.iter().map(|p| p.0.as_str()).collect();
    for sp in rows.iter().flat_map(|r| &r.speech) {
        if !ids.contains(&sp.agent.as_str()) {
            ids.push(&sp.agent);
        }
    }
    let used = |id: &str| rows.iter().flat_map(|r| &r.speech).any(|s| s.agent == id);
    ids.into_iter()
        .filter(|id| used(id))
        .map(|id| {
            let label = match names.iter().find(|n| n.0 == id) {
                Some((_, name)) => format!("{id} ({name})"),
                None if id == SINGLE_AGENT => "agent speech".to_owned(),
                None => id.to_owned(),
            };
            (id.to_owned(), label)
        })
        .collect()
}

/// A timeline figure: one scenario, one row per call shown.
pub struct Timeline {
    pub title: String,
    /// `(agent id, legend text)` in colour order.
    pub agents: Vec<(String, String)>,
    pub rows: Vec<Row>,
}

impl Timeline {
    fn colour(&self, agent: &str) -> RGBColor {
        let i = self.agents.iter().position(|(id, _)| id == agent);
        i.map_or(PALETTE[PALETTE.len() - 1], |i| {
            PALETTE[i % (PALETTE.len() - 1)]
        })
    }
}

fn style<'a>(size: u32, colour: RGBColor, pos: Pos) -> TextStyle<'a> {
    TextStyle {
        font: ("sans-serif", size).into_font(),
        color: colour.to_backend_color(),
        pos,
    }
}

impl Figure for Timeline {
    fn size(&self) -> (u32, u32) {
        (
            WIDTH,
            HEADER_H + ROW_H * self.rows.len().max(1) as u32 + AXIS_H,
        )
    }

    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Result<(), String> {
        area.fill(&WHITE).map_err(text)?;
        let (header, body) = area.split_vertically(HEADER_H);
        self.draw_header(&header)?;

        let rows = self.rows.len().max(1) as f64;
        let end_s = self.rows.iter().map(|r| r.end_ms).fold(1000.0, f64::max) / 1000.0;
        let end_s = end_s.ceil() + 0.5;
        let mut chart = ChartBuilder::on(&body)
            .margin_right(28)
            .margin_top(4)
            .x_label_area_size(AXIS_H - 8)
            .y_label_area_size(LABEL_W)
            .build_cartesian_2d(0f64..end_s, 0f64..rows)
            .map_err(text)?;
        chart
            .configure_mesh()
            .disable_y_mesh()
            .y_labels(2)
            .y_label_formatter(&|_| String::new())
            .x_labels(((end_s / 2.0) as usize).clamp(5, 40))
            .x_label_formatter(&|x| format!("{x:.0}"))
            .x_desc("seconds from call start")
            .label_style(("sans-serif", 14))
            .axis_desc_style(("sans-serif", 15))
            .light_line_style(RGBColor(246, 246, 246))
            .bold_line_style(RGBColor(215, 215, 215))
            .draw()
            .map_err(text)?;
        let px_per_s = f64::from(chart.plotting_area().dim_in_pixel().0) / end_s;
        let base = area.get_base_pixel();
        for (r, row) in self.rows.iter().enumerate() {
            let y0 = rows - 1.0 - r as f64;
            if r + 1 < self.rows.len() {
                chart
                    .draw_series(std::iter::once(PathElement::new(
                        vec![(0.0, y0), (end_s, y0)],
                        RGBColor(190, 190, 190).stroke_width(1),
                    )))
                    .map_err(text)?;
            }
            // Row and lane names in the label area, left of the plot.
            let (px, py) = chart.backend_coord(&(0.0, y0 + 0.5));
            let (_, caller_y) =
                chart.backend_coord(&(0.0, y0 + (CALLER_LANE.0 + CALLER_LANE.1) / 2.0));
            let (_, agent_y) =
                chart.backend_coord(&(0.0, y0 + (AGENT_LANE.0 + AGENT_LANE.1) / 2.0));
            // The label's lines, centred on the row: the first (the profile) larger.
            let lines: Vec<&str> = row.label.lines().collect();
            let top = py - base.1 - (lines.len() as i32 - 1) * LINE_H / 2;
            for (i, line) in lines.iter().enumerate() {
                let (size, colour) = if i == 0 {
                    (15, BLACK)
                } else {
                    (13, RGBColor(60, 60, 60))
                };
                area.draw(&Text::new(
                    (*line).to_owned(),
                    (12, top + i as i32 * LINE_H),
                    style(size, colour, Pos::new(HPos::Left, VPos::Center)),
                ))
                .map_err(text)?;
            }
            for (lane, y) in [("caller", caller_y), ("agents", agent_y)] {
                area.draw(&Text::new(
                    lane,
                    (px - base.0 - 8, y - base.1),
                    style(
                        13,
                        RGBColor(90, 90, 90),
                        Pos::new(HPos::Right, VPos::Center),
                    ),
                ))
                .map_err(text)?;
            }
            self.draw_row(&mut chart, row, y0, px_per_s)?;
        }
        Ok(())
    }
}

type Chart<'a, DB> = ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

impl Timeline {
    fn draw_header<DB: DrawingBackend>(
        &self,
        header: &DrawingArea<DB, Shift>,
    ) -> Result<(), String> {
        let left = Pos::new(HPos::Left, VPos::Center);
        header
            .draw(&Text::new(
                self.title.clone(),
                (16, 22),
                style(22, BLACK, left),
            ))
            .map_err(text)?;
        let mut x = 16;
        let mut y = 62;
        let mut item = |label: &str, glyph: &dyn Fn(i32, i32) -> Result<(), String>| {
            let font = style(15, BLACK, left);
            let w = header
                .estimate_text_size(label, &font)
                .map_or(label.len() as u32 * 8, |s| s.0) as i32;
            if x + 30 + w > WIDTH as i32 - 16 {
                x = 16;
                y += 24;
            }
            glyph(x, y)?;
            header
                .draw(&Text::new(label.to_owned(), (x + 26, y), font))
                .map_err(text)?;
            x += 26 + w + 28;
            Ok::<(), String>(())
        };
        let boxed = |colour: RGBColor| {
            move |x: i32, y: i32| {
                header
                    .draw(&Rectangle::new(
                        [(x, y - 8), (x + 18, y + 8)],
                        colour.filled(),
                    ))
                    .map_err(text)
            }
        };
        item("caller speech", &boxed(CALLER))?;
        for (id, label) in &self.agents {
            item(label, &boxed(self.colour(id)))?;
        }
        let any = |f: fn(&Row) -> bool| self.rows.iter().any(f);
        if any(|r| !r.handoffs.is_empty()) {
            item("handoff (gap heard)", &|x, y| {
                header
                    .draw(&PathElement::new(
                        vec![(x + 9, y - 10), (x + 9, y + 10)],
                        BLACK.stroke_width(2),
                    ))
                    .map_err(text)
            })?;
        }
        if any(|r| !r.reconnects.is_empty()) {
            item("model reconnect (gap heard)", &|x, y| {
                header
                    .draw(&DashedPathElement::new(
                        vec![(x + 9, y - 10), (x + 9, y + 10)],
                        4,
                        3,
                        RECONNECT.stroke_width(2),
                    ))
                    .map_err(text)
            })?;
        }
        item("→ first_audio_ms", &|_, _| Ok(()))?;
        Ok(())
    }

    fn draw_row<DB: DrawingBackend>(
        &self,
        chart: &mut Chart<'_, DB>,
        row: &Row,
        y0: f64,
        px_per_s: f64,
    ) -> Result<(), String> {
        let s = |ms: f64| ms / 1000.0;
        chart
            .draw_series(row.caller.iter().map(|&(a, b)| {
                Rectangle::new(
                    [(s(a), y0 + CALLER_LANE.0), (s(b), y0 + CALLER_LANE.1)],
                    CALLER.filled(),
                )
            }))
            .map_err(text)?;
        chart
            .draw_series(row.speech.iter().map(|sp| {
                Rectangle::new(
                    [
                        (s(sp.start_ms), y0 + AGENT_LANE.0),
                        (s(sp.end_ms), y0 + AGENT_LANE.1),
                    ],
                    self.colour(&sp.agent).filled(),
                )
            }))
            .map_err(text)?;
        // The agent's id inside its bar where it fits.
        let inside = style(12, WHITE, Pos::new(HPos::Left, VPos::Center));
        chart
            .draw_series(
                row.speech
                    .iter()
                    .filter(|sp| {
                        s(sp.end_ms - sp.start_ms) * px_per_s > sp.agent.len() as f64 * 7.5 + 8.0
                    })
                    .map(|sp| {
                        Text::new(
                            sp.agent.clone(),
                            (
                                s(sp.start_ms) + 4.0 / px_per_s,
                                y0 + (AGENT_LANE.0 + AGENT_LANE.1) / 2.0,
                            ),
                            inside.clone(),
                        )
                    }),
            )
            .map_err(text)?;
        // Handoffs and reconnects: lines across both lanes, stopping below the labels.
        for (m, colour, dashed) in row
            .handoffs
            .iter()
            .map(|m| (m, BLACK, false))
            .chain(row.reconnects.iter().map(|m| (m, RECONNECT, true)))
        {
            let x = s(m.at_ms);
            let path = vec![(x, y0 + 0.03), (x, y0 + CALLER_LANE.1 + 0.04)];
            if dashed {
                chart
                    .draw_series([DashedPathElement::new(path, 5, 4, colour.stroke_width(2))])
                    .map_err(text)?;
            } else {
                chart
                    .draw_series([PathElement::new(path, colour.stroke_width(2))])
                    .map_err(text)?;
            }
        }
        // Every label above the lanes, in the first band where it overlaps no other.
        let mut labels: Vec<(f64, String, RGBColor, u32)> = row
            .responses
            .iter()
            .map(|&(end, _, v2v)| {
                (
                    s(end),
                    format!("→ {:.0} ms", v2v + 0.0),
                    RGBColor(80, 80, 80),
                    12,
                )
            })
            .chain(
                row.handoffs
                    .iter()
                    .map(|m| (s(m.at_ms), m.label.clone(), BLACK, 13)),
            )
            .chain(
                row.reconnects
                    .iter()
                    .map(|m| (s(m.at_ms), m.label.clone(), RECONNECT, 13)),
            )
            .collect();
        labels.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (plot_w, _) = chart.plotting_area().dim_in_pixel();
        let spans: Vec<(f64, f64)> = labels
            .iter()
            .map(|(x, t, _, size)| {
                let w = t.chars().count() as f64 * f64::from(*size) * 0.56 + 4.0;
                let left = (x * px_per_s + 3.0).min(f64::from(plot_w) - w).max(0.0);
                (left, left + w)
            })
            .collect();
        let bands = place(&spans, LABEL_BANDS.len());
        for ((_, t, colour, size), ((left, _), band)) in
            labels.into_iter().zip(spans.into_iter().zip(bands))
        {
            chart
                .draw_series([Text::new(
                    t,
                    (left / px_per_s, y0 + LABEL_BANDS[band]),
                    style(size, colour, Pos::new(HPos::Left, VPos::Center)),
                )])
                .map_err(text)?;
        }
        Ok(())
    }
}

/// Where in a row (0 at its bottom, 1 at its top) the agents' and the caller's bars are.
const AGENT_LANE: (f64, f64) = (0.06, 0.34);
const CALLER_LANE: (f64, f64) = (0.40, 0.58);
/// The heights labels are written at, above the lanes.
const LABEL_BANDS: [f64; 3] = [0.69, 0.81, 0.93];

/// A band for each label (`(left, right)` in pixels, sorted by `left`): the lowest one where it
/// overlaps no label already placed there; with every band taken, the one whose last label ends
/// first.
pub fn place(spans: &[(f64, f64)], bands: usize) -> Vec<usize> {
    const GAP: f64 = 6.0;
    let mut ends = vec![f64::NEG_INFINITY; bands.max(1)];
    spans
        .iter()
        .map(|&(left, right)| {
            let band = (0..ends.len())
                .find(|&b| ends[b] + GAP <= left)
                .unwrap_or_else(|| {
                    (0..ends.len())
                        .min_by(|&a, &b| ends[a].total_cmp(&ends[b]))
                        .unwrap_or(0)
                });
            ends[band] = right;
            band
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::call::{HandoffRecord, TurnRecord};

    fn turn(agent: &str, caller: (f64, f64), speech: (f64, f64)) -> TurnRecord {
        TurnRecord {
            caller_start_ms: caller.0,
            caller_end_ms: caller.1,
            agent_start_ms: Some(speech.0),
            agent_end_ms: Some(speech.1),
            first_audio_ms: Some(speech.0 - caller.1),
            agent: agent.into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_handoff_inside_a_turn_splits_its_speech() {
        let report = CallReport {
            turns: vec![
                turn("advisor", (0.0, 1000.0), (1800.0, 6000.0)),
                turn("schemes", (7000.0, 8000.0), (8800.0, 9000.0)),
            ],
            handoffs: vec![HandoffRecord {
                from: "advisor".into(),
                to: "schemes".into(),
                gap_ms: Some(500.0),
                heard_at_ms: Some(4000.0),
                ..Default::default()
            }],
            frames_played: 500,
            ..Default::default()
        };
        let row = Row::from_report("x", &report);
        let spans: Vec<_> = row
            .speech
            .iter()
            .map(|s| (s.agent.as_str(), s.start_ms, s.end_ms))
            .collect();
        assert_eq!(
            spans,
            [
                ("advisor", 1800.0, 3500.0),
                ("schemes", 4000.0, 6000.0),
                ("schemes", 8800.0, 9000.0)
            ]
        );
        assert_eq!(row.handoffs[0].label, "gap 500 ms");
        assert_eq!(row.responses[0], (1000.0, 1800.0, 800.0));
        assert_eq!(row.end_ms, 10_000.0);
    }

    #[test]
    fn labels_that_would_overlap_go_to_other_bands() {
        let spans = [
            (0.0, 80.0),
            (40.0, 120.0),
            (60.0, 100.0),
            (130.0, 200.0),
            (300.0, 350.0),
        ];
        assert_eq!(place(&spans, 3), [0, 1, 2, 0, 0]);
        // No two labels in one band overlap.
        let b = place(&spans, 3);
        for i in 0..spans.len() {
            for j in i + 1..spans.len() {
                if b[i] == b[j] {
                    assert!(spans[i].1 <= spans[j].0 || spans[j].1 <= spans[i].0);
                }
            }
        }
    }

    #[test]
    fn a_call_without_agents_speaks_as_one_agent() {
        let report = CallReport {
            turns: vec![turn("", (0.0, 1000.0), (1800.0, 3000.0))],
            ..Default::default()
        };
        let row = Row::from_report("x", &report);
        assert_eq!(row.speech[0].agent, SINGLE_AGENT);
        assert!(row.handoffs.is_empty() && row.reconnects.is_empty());
    }
}
