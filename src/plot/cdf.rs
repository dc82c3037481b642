//! Latency CDF figures: one line per series (scenario, strategy), the fraction of samples at or
//! below each value, with n / p50 / p95 in the legend. The x axis is chosen from the data: from
//! 0 for figures that cannot be negative, logarithmic when the body spans two decades or more,
//! and cut at the largest series' p99 when a few outliers would squash the body — those are
//! marked at the edge and counted, not drawn at scale. Every series has its own colour and
//! marker shape.

use plotters::coord::Shift;
use plotters::coord::ranged1d::{AsRangedCoord, ValueFormatter};
use plotters::prelude::*;

use super::{Figure, text};
use crate::call::metrics::percentile;

/// Line colours, distinguishable in colour-blind vision: Okabe–Ito, then Paul Tol's muted
/// scheme (dark blue, sand, olive, wine), grey last.
pub const PALETTE: [RGBColor; 12] = [
    RGBColor(0, 114, 178),
    RGBColor(230, 159, 0),
    RGBColor(0, 158, 115),
    RGBColor(213, 94, 0),
    RGBColor(204, 121, 167),
    RGBColor(86, 180, 233),
    RGBColor(0, 0, 0),
    RGBColor(51, 34, 136),
    RGBColor(221, 204, 119),
    RGBColor(153, 153, 51),
    RGBColor(136, 34, 85),
    RGBColor(120, 120, 120),
];

/// Marker shapes, cycled independently of the colours.
const SHAPES: usize = 5;

/// At most this many points are drawn per series (quantiles of larger sets).
const MAX_POINTS: usize = 1_000;

/// One CDF figure.
pub struct Cdf {
    pub title: String,
    /// The x axis: the figure's name and unit.
    pub x_desc: String,
    /// `(label, samples)`; empty series are left out.
    pub series: Vec<(String, Vec<f64>)>,
}

/// The x axis a figure's data asks for.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Axis {
    pub lo: f64,
    pub hi: f64,
    pub log: bool,
    /// Samples above this are off the axis (marked at its right edge); `None`: all shown.
    pub cut: Option<f64>,
}

impl Axis {
    /// The axis for these samples.
    pub fn of<'a>(series: impl Iterator<Item = &'a [f64]> + Clone) -> Axis {
        let all = || series.clone().flat_map(|v| v.iter().copied());
        let (min, max) = all().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| {
            (lo.min(x), hi.max(x))
        });
        if !min.is_finite() {
            return Axis {
                lo: 0.0,
                hi: 1.0,
                log: false,
                cut: None,
            };
        }
        // The body: every series up to its p99. A tail far beyond it is cut.
        let body = series
            .clone()
            .filter_map(|v| percentile(v, 99.0))
            .fold(f64::NEG_INFINITY, f64::max);
        let span = |a: f64, b: f64| (b - a).abs();
        let cut = (max > body && span(min, max) > 2.0 * span(min, body) && span(body, max) > 1.0)
            .then_some(body);
        let top = cut.unwrap_or(max);
        let smallest_positive = all().filter(|&x| x > 0.0).fold(f64::INFINITY, f64::min);
        let log = min > 0.0 && top / smallest_positive >= 100.0;
        if log {
            return Axis {
                lo: 10f64.powf(smallest_positive.log10().floor()),
                hi: 10f64.powf(top.log10().ceil()),
                log,
                cut,
            };
        }
        // From 0 when the data starts near it (or at it); else from just below the smallest.
        let from_zero = min >= 0.0 && min <= 0.25 * top;
        let lo = if from_zero { 0.0 } else { min };
        let pad = (span(lo, top) * 0.05).max(if top == lo { 1.0 } else { 0.0 });
        Axis {
            lo: if from_zero {
                0.0
            } else {
                (lo - pad).max(if min >= 0.0 { 0.0 } else { f64::NEG_INFINITY })
            },
            hi: top + pad,
            log,
            cut,
        }
    }
}

/// The steps of the empirical CDF: `(x, fraction ≤ x)`, before and after each sample.
pub fn steps(values: &[f64]) -> Vec<(f64, f64)> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return Vec::new();
    }
    let picks: Vec<(f64, usize)> = if n <= MAX_POINTS {
        v.iter().enumerate().map(|(i, &x)| (x, i)).collect()
    } else {
        (0..MAX_POINTS)
            .map(|k| {
                let i = k * (n - 1) / (MAX_POINTS - 1);
                (v[i], i)
            })
            .collect()
    };
    let mut out = Vec::with_capacity(picks.len() * 2);
    for (x, i) in picks {
        out.push((x, i as f64 / n as f64));
        out.push((x, (i + 1) as f64 / n as f64));
    }
    out
}

/// Series `i`'s marker at `at` (backend pixels): an octagon, a triangle, a square, a diamond or
/// a triangle pointing down.
pub fn glyph(at: (i32, i32), i: usize, colour: RGBColor) -> Polygon<(i32, i32)> {
    let (x, y) = at;
    let points = match i % SHAPES {
        0 => vec![
            (x - 2, y - 5),
            (x + 2, y - 5),
            (x + 5, y - 2),
            (x + 5, y + 2),
            (x + 2, y + 5),
            (x - 2, y + 5),
            (x - 5, y + 2),
            (x - 5, y - 2),
        ],
        1 => vec![(x, y - 6), (x + 6, y + 5), (x - 6, y + 5)],
        2 => vec![
            (x - 4, y - 4),
            (x + 4, y - 4),
            (x + 4, y + 4),
            (x - 4, y + 4),
        ],
        3 => vec![(x, y - 6), (x + 6, y), (x, y + 6), (x - 6, y)],
        _ => vec![(x - 6, y - 5), (x + 6, y - 5), (x, y + 6)],
    };
    Polygon::new(points, colour.filled())
}

impl Cdf {
    fn drawn(&self) -> impl Iterator<Item = (usize, &(String, Vec<f64>))> {
        self.series
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .enumerate()
    }

    /// The x axis for this figure's samples.
    pub fn axis(&self) -> Axis {
        Axis::of(self.series.iter().map(|(_, v)| v.as_slice()))
    }

    fn draw_with<DB, X>(
        &self,
        area: &DrawingArea<DB, Shift>,
        axis: Axis,
        x: X,
    ) -> Result<(), String>
    where
        DB: DrawingBackend,
        X: AsRangedCoord<Value = f64>,
        X::CoordDescType: ValueFormatter<f64>,
    {
        let mut chart = ChartBuilder::on(area)
            .caption(&self.title, ("sans-serif", 22))
            .margin(16)
            .margin_right(28)
            .x_label_area_size(46)
            .y_label_area_size(64)
            .build_cartesian_2d(x, 0f64..1.02f64)
            .map_err(text)?;
        let x_desc = if axis.log {
            format!("{} — log scale", self.x_desc)
        } else {
            self.x_desc.clone()
        };
        chart
            .configure_mesh()
            .x_desc(x_desc)
            .y_desc("fraction of samples ≤ x")
            .label_style(("sans-serif", 15))
            .axis_desc_style(("sans-serif", 17))
            .light_line_style(RGBColor(235, 235, 235))
            .draw()
            .map_err(text)?;
        let count = self.drawn().count();
        if count == 0 {
            chart
                .draw_series(std::iter::once(Text::new(
                    "no samples in this run",
                    (axis.lo + (axis.hi - axis.lo) * 0.35, 0.5),
                    ("sans-serif", 20),
                )))
                .map_err(text)?;
            return Ok(());
        }
        let edge = axis.hi;
        let mut beyond = 0usize;
        for (i, (label, values)) in self.drawn() {
            let colour = PALETTE[i % PALETTE.len()];
            // Earlier series are drawn wider, so identical distributions stay visible underneath.
            let width = 2 + (count - 1 - i).min(3) as u32;
            let shown: Vec<(f64, f64)> = steps(values)
                .into_iter()
                .filter(|(x, _)| axis.cut.is_none_or(|c| *x <= c))
                .map(|(x, y)| (x.max(axis.lo), y))
                .collect();
            let p50 = percentile(values, 50.0).unwrap_or_default();
            let p95 = percentile(values, 95.0).unwrap_or_default();
            let legend = format!(
                "{label}  (n={}, p50 {}, p95 {})",
                values.len(),
                short(p50),
                short(p95)
            );
            chart
                .draw_series(LineSeries::new(shown.clone(), colour.stroke_width(width)))
                .map_err(text)?
                .label(legend)
                .legend(move |(x, y)| {
                    EmptyElement::at((x, y))
                        + PathElement::new(vec![(0, 0), (22, 0)], colour.stroke_width(3))
                        + glyph((11, 0), i, colour)
                });
            // Markers at the deciles the axis shows, offset per series so coinciding lines
            // keep every marker visible.
            let marks: Vec<(f64, f64)> = (1..=9)
                .filter_map(|d| {
                    let q = f64::from(d) * 10.0;
                    let x = percentile(values, q)?;
                    axis.cut
                        .is_none_or(|c| x <= c)
                        .then_some((x.max(axis.lo), q / 100.0 + 0.012 * (i % 3) as f64))
                })
                .collect();
            chart
                .draw_series(
                    marks
                        .into_iter()
                        .map(|p| EmptyElement::at(p) + glyph((0, 0), i, colour)),
                )
                .map_err(text)?;
            // Samples off the axis: one marker at the right edge per sample (at most 20).
            let off: Vec<(f64, f64)> = steps(values)
                .chunks(2)
                .filter_map(|s| {
                    let (x, y) = s.last()?;
                    axis.cut.is_some_and(|c| *x > c).then_some((edge, *y))
                })
                .collect();
            beyond += off.len();
            chart
                .draw_series(off.into_iter().take(20).map(|p| {
                    EmptyElement::at(p)
                        + Polygon::new(vec![(-2, -6), (8, 0), (-2, 6)], colour.filled())
                }))
                .map_err(text)?;
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.9))
            .border_style(RGBColor(180, 180, 180))
            .label_font(("sans-serif", 15))
            .draw()
            .map_err(text)?;
        if let Some(cut) = axis.cut {
            let max = self
                .series
                .iter()
                .flat_map(|(_, v)| v.iter().copied())
                .fold(f64::NEG_INFINITY, f64::max);
            let note = format!(
                "▸ {beyond} sample(s) above {} are off the axis (max {})",
                short(cut),
                short(max)
            );
            let (w, _) = area.dim_in_pixel();
            area.draw(&Text::new(
                note,
                (w as i32 - 16, 46),
                TextStyle::from(("sans-serif", 15).into_font()).pos(
                    plotters::style::text_anchor::Pos::new(
                        plotters::style::text_anchor::HPos::Right,
                        plotters::style::text_anchor::VPos::Center,
                    ),
                ),
            ))
            .map_err(text)?;
        }
        Ok(())
    }
}

impl Figure for Cdf {
    fn size(&self) -> (u32, u32) {
        (960, 540)
    }

    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Result<(), String> {
        area.fill(&WHITE).map_err(text)?;
        let axis = self.axis();
        if axis.log {
            self.draw_with(area, axis, (axis.lo..axis.hi).log_scale())
        } else {
            self.draw_with(area, axis, axis.lo..axis.hi)
        }
    }
}

/// A value for a legend: whole ms from 10 up, two decimals below; never `-0`.
pub fn short(x: f64) -> String {
    let x = x + 0.0;
    if x.abs() >= 10.0 {
        format!("{x:.0}")
    } else {
        format!("{x:.2}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_rise_to_one() {
        let s = steps(&[3.0, 1.0, 2.0]);
        assert_eq!(s.first(), Some(&(1.0, 0.0)));
        assert_eq!(s.last(), Some(&(3.0, 1.0)));
        assert!(s.windows(2).all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1));
        let big: Vec<f64> = (0..10_000).map(f64::from).collect();
        let s = steps(&big);
        assert_eq!(s.len(), 2 * MAX_POINTS);
        assert_eq!(s.last(), Some(&(9_999.0, 1.0)));
        assert!(steps(&[]).is_empty());
    }

    fn axis(series: &[&[f64]]) -> Axis {
        Axis::of(series.iter().copied())
    }

    #[test]
    fn non_negative_figures_start_at_zero() {
        let a = axis(&[&[0.0, 0.0]]);
        assert_eq!((a.lo, a.log, a.cut), (0.0, false, None));
        assert!(a.hi >= 1.0, "{a:?}");
        let a = axis(&[&[560.0, 560.0], &[0.0, 0.0]]);
        assert_eq!(a.lo, 0.0);
        assert!(a.hi > 560.0 && a.hi < 600.0, "{a:?}");
        // Data far from 0 is not squashed against it.
        let a = axis(&[&[820.0, 820.0, 1420.0]]);
        assert!(a.lo > 700.0 && a.lo < 820.0, "{a:?}");
    }

    #[test]
    fn one_outlier_is_cut_not_squashing_the_body() {
        let mut v: Vec<f64> = (0..1000).map(|i| 0.05 + f64::from(i % 50) * 0.01).collect();
        v.push(28.0);
        let a = axis(&[&v]);
        let cut = a.cut.expect("cut");
        assert!(cut < 1.0, "{a:?}");
        assert!(a.hi < 1.0, "{a:?}");
    }

    #[test]
    fn decades_get_a_log_axis() {
        let v: Vec<f64> = (0..100).map(|i| 0.1 * 1.1f64.powi(i)).collect();
        let a = axis(&[&v]);
        assert!(a.log, "{a:?}");
        assert!(a.lo <= 0.1 && a.hi >= v[98]);
        assert_eq!(short(-0.0), "0.00");
    }
}
