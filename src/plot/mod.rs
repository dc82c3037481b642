//! Figures drawn with plotters and written as both SVG and PNG with the bundled font (no system
//! fonts): the `Figure` trait and `save`; latency CDFs (`cdf`) and call timelines (`timeline`),
//! shared by `baton demo` and `baton bench`.

pub mod cdf;
pub mod timeline;

use std::path::{Path, PathBuf};
use std::sync::Once;

use plotters::coord::Shift;
use plotters::prelude::*;

/// DejaVu Sans (Bitstream Vera licence, see assets/fonts/LICENSE), embedded so PNG text renders on
/// a machine with no fonts installed.
const FONT: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans.ttf");

static FONTS: Once = Once::new();

/// Registers the bundled font under the family names plotters asks for.
pub fn ensure_fonts() {
    FONTS.call_once(|| {
        for family in ["sans-serif", "serif", "monospace"] {
            for style in [
                FontStyle::Normal,
                FontStyle::Bold,
                FontStyle::Italic,
                FontStyle::Oblique,
            ] {
                // The bytes are a valid TrueType font; a failure here would only lose PNG labels.
                let _ = plotters::style::register_font(family, style, FONT);
            }
        }
    });
}

/// Why a figure could not be written.
#[derive(Debug, thiserror::Error)]
#[error("cannot draw {path}: {reason}")]
pub struct PlotError {
    pub path: PathBuf,
    pub reason: String,
}

/// Something drawable on any plotters backend. Implement `draw` once; [`save`] renders it twice.
pub trait Figure {
    /// Pixel size of the figure (SVG user units = PNG pixels).
    fn size(&self) -> (u32, u32) {
        (960, 540)
    }
    /// Draws onto `area`; errors are reported as text because backend error types differ.
    fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Result<(), String>;
}

/// Writes `<stem>.svg` and `<stem>.png`; returns both paths.
pub fn save(figure: &impl Figure, stem: &Path) -> Result<(PathBuf, PathBuf), PlotError> {
    ensure_fonts();
    let svg = stem.with_extension("svg");
    let png = stem.with_extension("png");
    let size = figure.size();
    let fail = |path: &Path, reason: String| PlotError {
        path: path.to_path_buf(),
        reason,
    };
    {
        let area = SVGBackend::new(&svg, size).into_drawing_area();
        figure.draw(&area).map_err(|e| fail(&svg, e))?;
        area.present().map_err(|e| fail(&svg, e.to_string()))?;
    }
    {
        let area = BitMapBackend::new(&png, size).into_drawing_area();
        figure.draw(&area).map_err(|e| fail(&png, e))?;
        area.present().map_err(|e| fail(&png, e.to_string()))?;
    }
    Ok((svg, png))
}

/// Shorthand for turning a plotters error into the string [`Figure::draw`] returns.
pub fn text<E: std::fmt::Display>(e: E) -> String {
    e.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Line;
    impl Figure for Line {
        fn draw<DB: DrawingBackend>(&self, area: &DrawingArea<DB, Shift>) -> Result<(), String> {
            area.fill(&WHITE).map_err(text)?;
            let mut chart = ChartBuilder::on(area)
                .caption("test", ("sans-serif", 20))
                .margin(10)
                .x_label_area_size(30)
                .y_label_area_size(40)
                .build_cartesian_2d(0f64..10f64, 0f64..10f64)
                .map_err(text)?;
            chart.configure_mesh().x_desc("x").draw().map_err(text)?;
            chart
                .draw_series(LineSeries::new((0..10).map(|i| (i as f64, i as f64)), &RED))
                .map_err(text)?;
            Ok(())
        }
    }

    #[test]
    fn writes_svg_and_png_with_text() {
        let dir = tempfile::tempdir().unwrap();
        let (svg, png) = save(&Line, &dir.path().join("line")).unwrap();
        let svg_text = std::fs::read_to_string(svg).unwrap();
        assert!(svg_text.contains("<svg") && svg_text.contains("\ntest\n"));
        let png_bytes = std::fs::read(png).unwrap();
        assert_eq!(&png_bytes[1..4], b"PNG");
        assert!(png_bytes.len() > 2_000);
    }
}
