//! Latency CDF figures: one line per series (scenario, strategy), the fraction of samples at or
//! below each value, with n / p50 / p95 in the legend.

use plotters::coord::Shift;
use plotters::prelude::*;

use super::{Figure, text};
use crate::call::metrics::percentile;

/// Line colours, distinguishable in colour-blind vision (Okabe–Ito).
pub const PALETTE: [RGBColor; 7] = [
    RGBColor(0, 114, 178),
    RGBColor(230, 159, 0),
    RGBColor(0, 158, 115),
    RGBColor(213, 94, 0),
    RGBColor(204, 121, 167),
    RGBColor(86, 180, 233),
    RGBColor(120, 120, 120),
];

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

impl Cdf {
    fn drawn(&self) -> impl Iterator<Item = (usize, &(String, Vec<f64>))> {
        self.series
            .iter()
            .filter(|(_, v)| !v.is_empty())
            .enumerate()
    }

    /// The x range: all samples, padded so single values and ties are visible.
    fn x_range(&self) -> (f64, f64) {
        let all = self.series.iter().flat_map(|(_, v)| v.iter().copied());
        let (lo, hi) = all.fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), x| {
            (lo.min(x), hi.max(x))
        });
        if !lo.is_finite() {
            return (0.0, 1.0);
        }
        let pad = ((hi - lo) * 0.05).max(5.0);
        (lo - pad, hi + pad)
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

impl Figure for Cdf {
    fn size(&self) -> (u32, u32) {
        (960, 540)
    }

    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Result<(), String> {
        area.fill(&WHITE).map_err(text)?;
        let (lo, hi) = self.x_range();
        let mut chart = ChartBuilder::on(area)
            .caption(&self.title, ("sans-serif", 22))
            .margin(16)
            .x_label_area_size(46)
            .y_label_area_size(64)
            .build_cartesian_2d(lo..hi, 0f64..1.02f64)
            .map_err(text)?;
        chart
            .configure_mesh()
            .x_desc(&self.x_desc)
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
                    (lo + (hi - lo) * 0.35, 0.5),
                    ("sans-serif", 20),
                )))
                .map_err(text)?;
            return Ok(());
        }
        for (i, (label, values)) in self.drawn() {
            let colour = PALETTE[i % PALETTE.len()];
            // Earlier series are drawn wider, so identical distributions stay visible underneath.
            let width = 2 + 2 * (count - 1 - i) as u32;
            let style = colour.stroke_width(width);
            let p50 = percentile(values, 50.0).unwrap_or_default();
            let p95 = percentile(values, 95.0).unwrap_or_default();
            let legend = format!(
                "{label}  (n={}, p50 {}, p95 {})",
                values.len(),
                short(p50),
                short(p95)
            );
            chart
                .draw_series(LineSeries::new(steps(values), style))
                .map_err(text)?
                .label(legend)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 22, y)], colour.stroke_width(4))
                });
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::LowerRight)
            .background_style(WHITE.mix(0.9))
            .border_style(RGBColor(180, 180, 180))
            .label_font(("sans-serif", 15))
            .draw()
            .map_err(text)?;
        Ok(())
    }
}

/// A value for a legend: whole ms from 10 up, two decimals below.
pub fn short(x: f64) -> String {
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

    #[test]
    fn ranges_are_padded() {
        let cdf = Cdf {
            title: String::new(),
            x_desc: String::new(),
            series: vec![("a".into(), vec![0.0, 0.0])],
        };
        let (lo, hi) = cdf.x_range();
        assert!(lo < 0.0 && hi > 0.0);
    }
}
