//! SVG charts of a scenario with plotters' SVG backend (no system libraries, no fonts needed):
//! one file, stacked panels sharing the x axis (time, unless a panel says otherwise), each a set
//! of named lines.

use std::path::Path;

use plotters::coord::Shift;
use plotters::prelude::*;

/// One named line: `(seconds, value)` points.
#[derive(Debug, Clone)]
pub struct Line {
    /// Legend text.
    pub name: String,
    /// The points.
    pub points: Vec<(f64, f64)>,
}

impl Line {
    /// A line.
    pub fn new(name: impl Into<String>, points: Vec<(f64, f64)>) -> Self {
        Self {
            name: name.into(),
            points,
        }
    }
}

/// One panel of a chart.
#[derive(Debug, Clone)]
pub struct Panel {
    /// Panel caption.
    pub title: String,
    /// Y axis description.
    pub y_label: String,
    /// Logarithmic y axis (latencies spanning decades).
    pub log_y: bool,
    /// X axis description.
    pub x_label: String,
    /// The lines.
    pub lines: Vec<Line>,
}

impl Panel {
    /// A linear panel.
    pub fn linear(title: &str, y_label: &str, lines: Vec<Line>) -> Self {
        Self {
            title: title.to_owned(),
            y_label: y_label.to_owned(),
            log_y: false,
            x_label: "seconds since the load started".to_owned(),
            lines,
        }
    }

    /// The same panel over another x axis than time.
    pub fn over(self, x_label: &str) -> Self {
        Self {
            x_label: x_label.to_owned(),
            ..self
        }
    }

    /// A logarithmic panel.
    pub fn log(title: &str, y_label: &str, lines: Vec<Line>) -> Self {
        Self {
            log_y: true,
            ..Self::linear(title, y_label, lines)
        }
    }
}

const WIDTH: u32 = 960;
/// Distinct, readable line colours (the usual tab10 set).
const PALETTE: [RGBColor; 6] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
];
const PANEL_HEIGHT: u32 = 330;

/// Draw `panels` under `title` into the SVG file `path`.
pub(crate) fn draw(path: &Path, title: &str, panels: &[Panel]) -> anyhow::Result<()> {
    let height = PANEL_HEIGHT * panels.len().max(1) as u32 + 40;
    let root = SVGBackend::new(path, (WIDTH, height)).into_drawing_area();
    root.fill(&WHITE).map_err(err)?;
    let root = root.titled(title, ("sans-serif", 22)).map_err(err)?;
    let areas = root.split_evenly((panels.len().max(1), 1));
    // One time axis for every panel, so they line up.
    let x_max = panels.iter().map(|p| bounds(p).0).fold(1.0, f64::max);
    for (area, panel) in areas.iter().zip(panels) {
        draw_panel(area, panel, x_max)?;
    }
    root.present().map_err(err)?;
    Ok(())
}

fn err(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("chart: {e}")
}

/// Bounds of every point, `(x_max, y_min_positive, y_max)`.
fn bounds(panel: &Panel) -> (f64, f64, f64) {
    let points = panel.lines.iter().flat_map(|l| l.points.iter());
    let mut x_max: f64 = 1.0;
    let mut y_min_pos = f64::INFINITY;
    let mut y_max: f64 = 0.0;
    for &(x, y) in points {
        x_max = x_max.max(x);
        y_max = y_max.max(y);
        if y > 0.0 {
            y_min_pos = y_min_pos.min(y);
        }
    }
    if !y_min_pos.is_finite() {
        y_min_pos = 0.1;
    }
    if y_max <= 0.0 {
        y_max = 1.0;
    }
    (x_max, y_min_pos, y_max)
}

macro_rules! plot {
    ($area:expr, $panel:expr, $x:expr, $y:expr) => {{
        let mut chart = ChartBuilder::on($area)
            .caption(&$panel.title, ("sans-serif", 16))
            .margin(8)
            .x_label_area_size(32)
            .y_label_area_size(64)
            .build_cartesian_2d($x, $y)
            .map_err(err)?;
        chart
            .configure_mesh()
            .x_desc($panel.x_label.as_str())
            .y_desc($panel.y_label.as_str())
            .light_line_style(WHITE.mix(0.0))
            .draw()
            .map_err(err)?;
        for (i, line) in $panel.lines.iter().enumerate() {
            let color = PALETTE[i % PALETTE.len()];
            let points = line
                .points
                .iter()
                .copied()
                .filter(|&(_, y)| !$panel.log_y || y > 0.0);
            chart
                .draw_series(LineSeries::new(points, color.stroke_width(2)))
                .map_err(err)?
                .label(line.name.as_str())
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color));
        }
        chart
            .configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(err)?;
    }};
}

fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    panel: &Panel,
    x_max: f64,
) -> anyhow::Result<()>
where
    DB::ErrorType: 'static,
{
    let (_, y_min_pos, y_max) = bounds(panel);
    if panel.log_y {
        plot!(
            area,
            panel,
            0f64..x_max,
            ((y_min_pos / 1.5)..(y_max * 1.5)).log_scale()
        );
    } else {
        plot!(area, panel, 0f64..x_max, 0f64..(y_max * 1.1));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_an_svg() {
        let dir = std::env::temp_dir().join(format!("sluice-chart-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("t.svg");
        let lat = Line::new("p99", vec![(0.0, 3.0), (1.0, 30.0), (2.0, 0.0)]);
        let gov = Line::new("limit", vec![(0.0, 8.0), (1.0, 4.0)]);
        draw(
            &path,
            "test",
            &[
                Panel::log("latency", "ms", vec![lat]),
                Panel::linear("governor", "limit", vec![gov, Line::new("empty", vec![])]),
            ],
        )
        .unwrap();
        let svg = std::fs::read_to_string(&path).unwrap();
        assert!(svg.starts_with("<svg") && svg.contains("p99") && svg.contains("governor"));
        let _ = std::fs::remove_dir_all(dir);
    }
}
