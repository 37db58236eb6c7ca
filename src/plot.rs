//! Line charts as PNG (plotters, with an embedded DejaVu font so no system fonts are needed).

use std::path::Path;
use std::sync::Once;

use plotters::coord::types::RangedCoordf64;
pub use plotters::prelude::SeriesLabelPosition;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};

use crate::error::{Error, Result};

/// One named series of (x, y) points.
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend label.
    pub label: String,
    /// Points, in x order.
    pub points: Vec<(f64, f64)>,
}

/// A labelled vertical line, e.g. "k = 44" at step B_norm/C².
#[derive(Debug, Clone, PartialEq)]
pub struct Marker {
    /// Where the line is drawn.
    pub x: f64,
    /// Its label, written beside it at the top of the panel.
    pub label: String,
}

impl Marker {
    /// A marker at `x` labelled `label`.
    pub fn new(x: f64, label: impl Into<String>) -> Self {
        Self { x, label: label.into() }
    }
}

/// Which y values the axis spans.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum YRange {
    /// Zero to the largest value (counts).
    FromZero,
    /// The smallest to the largest value.
    All,
    /// Zoomed on the second half of the x axis: its range, widened below by its own height
    /// (accuracy curves: the first, low evaluations leave the frame instead of squashing the
    /// part where runs differ).
    Settled,
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
    /// Series drawn in this panel (each with its own colour, point shape and dash, so
    /// overlapping lines stay distinguishable).
    pub series: Vec<Series>,
    /// Labelled vertical lines.
    pub markers: Vec<Marker>,
    /// The y axis's span.
    pub y_range: YRange,
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
///
/// # Errors
/// If the image cannot be drawn or written.
pub fn line_charts(path: &Path, panels: &[Panel]) -> Result<()> {
    register_font();
    let err = |e: &dyn std::fmt::Display| Error::file(path, format!("the plot: {e}"));
    let height = 360 * panels.len().max(1) as u32;
    let root = BitMapBackend::new(path, (900, height)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| err(&e))?;
    let areas = root.split_evenly((panels.len().max(1), 1));
    for (panel, area) in panels.iter().zip(areas) {
        draw_panel(panel, &area).map_err(|e| err(&e))?;
    }
    root.present().map_err(|e| err(&e))?;
    Ok(())
}

/// The axes' spans: (x0, x1, y0, y1), never empty.
fn bounds(panel: &Panel) -> (f64, f64, f64, f64) {
    let finite = || panel.series.iter().flat_map(|s| s.points.iter()).filter(|(x, y)| x.is_finite() && y.is_finite());
    let (mut x0, mut x1) = (f64::MAX, f64::MIN);
    for &(x, _) in finite() {
        (x0, x1) = (x0.min(x), x1.max(x));
    }
    for m in panel.markers.iter().filter(|m| m.x.is_finite()) {
        (x0, x1) = (x0.min(m.x), x1.max(m.x));
    }
    if x0 > x1 {
        return (0.0, 1.0, 0.0, 1.0);
    }
    let span = |from: f64| {
        let (mut lo, mut hi) = (f64::MAX, f64::MIN);
        for &(_, y) in finite().filter(|(x, _)| *x >= from) {
            (lo, hi) = (lo.min(y), hi.max(y));
        }
        (lo, hi)
    };
    let (mut y0, mut y1) = span(f64::MIN);
    if panel.y_range == YRange::Settled {
        // The second half's range, widened below by its own height (so the approach shows).
        let (lo, hi) = span(x0 + 0.5 * (x1 - x0));
        if lo <= hi {
            y0 = y0.max(lo - (hi - lo).max(1.0));
        }
    }
    if y0 > y1 {
        (y0, y1) = (0.0, 1.0);
    }
    if panel.y_range == YRange::FromZero {
        y0 = y0.min(0.0);
    }
    let pad = ((y1 - y0) * 0.05).max(1e-9);
    (x0, x1.max(x0 + 1e-9), y0 - pad, y1 + pad)
}

/// A tick label: whole numbers without decimals, fractional ticks of a whole-number axis
/// (steps, counts) left blank.
fn tick(v: f64, whole: bool) -> String {
    if whole { if v.fract() == 0.0 { format!("{v:.0}") } else { String::new() } } else { format!("{v}") }
}

type Chart<'a, DB> = ChartContext<'a, DB, Cartesian2d<RangedCoordf64, RangedCoordf64>>;
type DrawResult<DB> = std::result::Result<(), DrawingAreaErrorKind<<DB as DrawingBackend>::ErrorType>>;

fn draw_panel(panel: &Panel, area: &DrawingArea<BitMapBackend<'_>, plotters::coord::Shift>) -> Result<(), String> {
    let e = |e: &dyn std::fmt::Display| e.to_string();
    let (x0, x1, y0, y1) = bounds(panel);
    let whole_x = panel.series.iter().flat_map(|s| &s.points).all(|(x, _)| x.fract() == 0.0);
    let whole_y = y1 - y0 > 20.0;
    let mut chart = ChartBuilder::on(area)
        .caption(&panel.title, ("sans-serif", 22))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(x0..x1, y0..y1)
        .map_err(|x| e(&x))?;
    chart
        .configure_mesh()
        .x_desc(&panel.x_label)
        .y_desc(&panel.y_label)
        .x_label_formatter(&|v| tick(*v, whole_x))
        .y_label_formatter(&|v| if whole_y { tick(v.round(), true) } else { format!("{v:.1}") })
        .draw()
        .map_err(|x| e(&x))?;
    draw_markers(&mut chart, &panel.markers, (y0, y1)).map_err(|x| e(&x))?;
    let several = panel.series.len() > 1;
    for (i, s) in panel.series.iter().enumerate() {
        draw_series(&mut chart, i, s, several).map_err(|x| e(&x))?;
    }
    if panel.series.len() > 1 || panel.series.iter().any(|s| !s.label.is_empty()) {
        chart
            .configure_series_labels()
            .position(panel.legend.clone())
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|x| e(&x))?;
    }
    Ok(())
}

/// Dashed vertical lines with their labels at the top, staggered so close markers stay legible.
fn draw_markers<DB: DrawingBackend>(
    chart: &mut Chart<'_, DB>,
    markers: &[Marker],
    (y0, y1): (f64, f64),
) -> DrawResult<DB> {
    let style = BLACK.mix(0.7).stroke_width(1);
    for (i, m) in markers.iter().enumerate() {
        chart.draw_series(DashedLineSeries::new([(m.x, y0), (m.x, y1)], 6, 4, style))?;
        let y = 4 + 18 * i as i32;
        let width = 7 * m.label.chars().count() as i32 + 6;
        let label = EmptyElement::at((m.x, y1))
            + Rectangle::new([(2, y - 1), (2 + width, y + 15)], WHITE.mix(0.85).filled())
            + Text::new(m.label.clone(), (5, y), ("sans-serif", 14).into_font().color(&BLACK));
        chart.draw_series(std::iter::once(label))?;
    }
    Ok(())
}

/// Series `i`: colour from the palette, solid or dashed line by parity and, among `several`,
/// a point glyph (circle, triangle, cross) at each point, so lines that overlap can still be
/// told apart.
fn draw_series<'a, DB: DrawingBackend + 'a>(
    chart: &mut Chart<'a, DB>,
    i: usize,
    s: &Series,
    several: bool,
) -> DrawResult<DB> {
    const GLYPHS: [&str; 3] = ["\u{25CF}", "\u{25B2}", "\u{2716}"];
    let color = Palette99::pick(i).to_rgba();
    let line = color.stroke_width(2);
    let glyph = if several { GLYPHS[i % GLYPHS.len()] } else { "" };
    let dashed = i % 2 == 1;
    let floor = chart.y_range().start;
    for part in above(&s.points, floor) {
        if dashed {
            chart.draw_series(DashedLineSeries::new(part, 8, 5, line))?;
        } else {
            chart.draw_series(LineSeries::new(part, line))?;
        }
    }
    let font = ("sans-serif", 11).into_font().color(&color).pos(Pos::new(HPos::Center, VPos::Center));
    // Glyphs only where the points are few enough to be seen one by one.
    let shown = if several && s.points.len() <= 60 { s.points.as_slice() } else { &[] };
    let anno = chart.draw_series(
        shown.iter().filter(|p| p.1 >= floor).map(|&p| EmptyElement::at(p) + Text::new(glyph, (0, 0), font.clone())),
    )?;
    // The legend's sample: a line (with a gap when dashed) and the glyph.
    let gap = if dashed { 5 } else { 0 };
    anno.label(&s.label).legend(move |(x, y)| {
        EmptyElement::at((x, y))
            + PathElement::new(vec![(0, 0), (11 - gap, 0)], line)
            + PathElement::new(vec![(11 + gap, 0), (22, 0)], line)
            + Text::new(glyph, (11, 0), font.clone())
    });
    Ok(())
}

/// The parts of a polyline at or above `floor`, cut where it crosses it (plotters would
/// flatten the hidden points onto the axis instead, which reads as data).
fn above(points: &[(f64, f64)], floor: f64) -> Vec<Vec<(f64, f64)>> {
    let mut parts = vec![Vec::new()];
    for (i, &(x, y)) in points.iter().enumerate() {
        let cross = |(xa, ya): (f64, f64)| (xa + (x - xa) * (floor - ya) / (y - ya), floor);
        let prev = i.checked_sub(1).map(|j| points[j]);
        match prev {
            Some(p) if (p.1 < floor) != (y < floor) => {
                let c = cross(p);
                if let Some(last) = parts.last_mut() {
                    last.push(c);
                }
                if y < floor {
                    parts.push(Vec::new());
                }
            }
            _ => {}
        }
        if y >= floor
            && let Some(last) = parts.last_mut()
        {
            last.push((x, y));
        }
    }
    parts.retain(|p| !p.is_empty());
    parts
}

/// The densities of two samples over one grid of 60 bins spanning both: (bin centre, density).
pub fn densities(a: &[f64], b: &[f64]) -> [Vec<(f64, f64)>; 2] {
    let (lo, hi) = a.iter().chain(b).fold((f64::MAX, f64::MIN), |(l, h), &x| (l.min(x), h.max(x)));
    let bins = 60usize;
    let width = ((hi - lo) / bins as f64).max(1e-12);
    let hist = |xs: &[f64]| -> Vec<(f64, f64)> {
        let mut counts = vec![0usize; bins];
        for &x in xs {
            counts[(((x - lo) / width) as usize).min(bins - 1)] += 1;
        }
        counts
            .iter()
            .enumerate()
            .map(|(i, &c)| (lo + (i as f64 + 0.5) * width, c as f64 / (xs.len().max(1) as f64 * width)))
            .collect()
    };
    [hist(a), hist(b)]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn panel(points: Vec<(f64, f64)>, y_range: YRange) -> Panel {
        Panel {
            title: String::new(),
            x_label: String::new(),
            y_label: String::new(),
            series: vec![Series { label: String::new(), points }],
            markers: vec![Marker::new(40.0, "k = 40")],
            y_range,
            legend: SeriesLabelPosition::LowerRight,
        }
    }

    #[test]
    fn lines_are_cut_where_they_leave_the_frame() {
        let pts = [(0.0, 0.0), (1.0, 10.0), (2.0, 0.0), (3.0, 0.0), (4.0, 10.0)];
        let parts = above(&pts, 5.0);
        assert_eq!(parts, vec![vec![(0.5, 5.0), (1.0, 10.0), (1.5, 5.0)], vec![(3.5, 5.0), (4.0, 10.0)]]);
        assert_eq!(above(&pts, -1.0), vec![pts.to_vec()]);
        assert!(above(&pts, 11.0).is_empty());
    }

    #[test]
    fn step_axes_have_whole_ticks_only() {
        assert_eq!(tick(10.0, true), "10");
        assert_eq!(tick(2.5, true), "");
        assert_eq!(tick(2.5, false), "2.5");
    }

    #[test]
    fn settled_range_leaves_the_first_low_evaluations_out() {
        let pts = vec![(0.0, 10.0), (8.0, 60.0), (16.0, 80.0), (24.0, 88.0), (32.0, 90.0)];
        let (x0, x1, y0, y1) = bounds(&panel(pts.clone(), YRange::Settled));
        assert_eq!((x0, x1), (0.0, 40.0), "the marker widens the x axis");
        // Second half (x >= 20): 88..90, widened below by 2 → 86..90, padded by 5 %.
        assert!(y0 > 85.0 && y0 < 86.0 && y1 > 90.0 && y1 < 90.5, "{y0}..{y1}");
        let (_, _, y0, _) = bounds(&panel(pts.clone(), YRange::All));
        assert!(y0 < 10.0);
        let (_, _, y0, _) = bounds(&panel(pts, YRange::FromZero));
        assert!(y0 < 0.0);
    }

    #[test]
    fn every_panel_kind_draws() {
        let dir = std::env::temp_dir().join(format!("dpgd-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut p = panel((0..80).map(|i| (f64::from(i), f64::from(i).sqrt())).collect(), YRange::Settled);
        p.series.push(Series { label: "b".into(), points: vec![(1.0, 2.0), (5.0, 3.0)] });
        p.series.push(Series { label: "c".into(), points: vec![] });
        let path = dir.join("p.png");
        line_charts(&path, &[p, panel(vec![], YRange::FromZero)]).unwrap();
        assert!(std::fs::metadata(&path).unwrap().len() > 1000);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
