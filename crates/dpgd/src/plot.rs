//! Line charts as PNG (plotters, with an embedded DejaVu font so no system fonts are needed).

use std::path::Path;
use std::sync::Once;

pub use plotters::prelude::SeriesLabelPosition;
use plotters::prelude::*;

use crate::error::{Error, Result};

/// One named series of (x, y) points.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend label.
    pub label: String,
    /// Points, in x order.
    pub points: Vec<(f64, f64)>,
}

/// One panel: a title, axis labels and its series.
#[derive(Debug, Clone)]
pub struct Panel {
    /// Title.
    pub title: String,
    /// X-axis label.
    pub x_label: String,
    /// Y-axis label.
    pub y_label: String,
    /// Series drawn in this panel.
    pub series: Vec<Series>,
    /// Vertical marker lines (x positions), e.g. step B_norm/C².
    pub markers: Vec<f64>,
    /// Start the y axis at zero (for counts) instead of at the smallest value.
    pub y_from_zero: bool,
    /// Where the legend goes: the corner the curves leave empty (rising accuracy curves leave
    /// the lower right free, falling counts the lower left).
    pub legend: SeriesLabelPosition,
}

fn register_font() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, dejavu::sans::regular());
    });
}

/// Draws `panels` stacked vertically into a PNG at `path`.
pub fn line_charts(path: &Path, panels: &[Panel]) -> Result<()> {
    register_font();
    let err = |e: &dyn std::fmt::Display| Error::Record(format!("plot {}: {e}", path.display()));
    let height = 360 * panels.len().max(1) as u32;
    let root = BitMapBackend::new(path, (900, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let areas = root.split_evenly((panels.len().max(1), 1));
    for (panel, area) in panels.iter().zip(areas) {
        let pts = panel.series.iter().flat_map(|s| s.points.iter());
        let (mut x0, mut x1, mut y0, mut y1) = (f64::MAX, f64::MIN, f64::MAX, f64::MIN);
        for &(x, y) in pts.filter(|(x, y)| x.is_finite() && y.is_finite()) {
            (x0, x1, y0, y1) = (x0.min(x), x1.max(x), y0.min(y), y1.max(y));
        }
        if x0 > x1 {
            (x0, x1, y0, y1) = (0.0, 1.0, 0.0, 1.0);
        }
        if panel.y_from_zero {
            y0 = y0.min(0.0);
        }
        let pad = ((y1 - y0) * 0.05).max(1e-9);
        let mut chart = ChartBuilder::on(&area)
            .caption(&panel.title, ("sans-serif", 22))
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(x0..x1.max(x0 + 1e-9), (y0 - pad)..(y1 + pad))
            .map_err(|e| err(&e))?;
        chart.configure_mesh().x_desc(&panel.x_label).y_desc(&panel.y_label).draw().map_err(|e| err(&e))?;
        for &m in &panel.markers {
            chart
                .draw_series(LineSeries::new([(m, y0 - pad), (m, y1 + pad)], BLACK.stroke_width(1)))
                .map_err(|e| err(&e))?;
        }
        for (i, s) in panel.series.iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            chart
                .draw_series(LineSeries::new(s.points.iter().copied(), color.stroke_width(2)))
                .map_err(|e| err(&e))?
                .label(&s.label)
                .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2)));
        }
        if panel.series.len() > 1 || panel.series.iter().any(|s| !s.label.is_empty()) {
            chart
                .configure_series_labels()
                .position(panel.legend.clone())
                .background_style(WHITE.mix(0.8))
                .border_style(BLACK)
                .draw()
                .map_err(|e| err(&e))?;
        }
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}
