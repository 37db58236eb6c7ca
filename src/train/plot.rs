//! `publishable/accuracy.png`: the released metrics of a run against the step.

use super::config::{ActiveRelease, ValidConfig};
use super::folder::RunFolder;
use super::outputs::MetricsRow;
use crate::error::Result;
use crate::plot::{Marker, Panel, Series, SeriesLabelPosition, YRange, line_charts};

/// Draws test accuracy (and the released training accuracy and active count) against the
/// step, with k = B_norm/C² and the returned model's step marked.
///
/// # Errors
/// If the image cannot be written.
pub fn plot_run(folder: &RunFolder, cfg: &ValidConfig, rows: &[MetricsRow], selected_step: usize) -> Result<()> {
    let pts = |f: &dyn Fn(&MetricsRow) -> Option<f64>| -> Vec<(f64, f64)> {
        rows.iter().filter_map(|r| f(r).map(|v| (r.step as f64, v))).collect()
    };
    let mut series =
        vec![Series { label: "test accuracy".into(), points: pts(&|r| r.test_accuracy.map(|a| 100.0 * a)) }];
    let train = pts(&|r| r.train_accuracy_noisy.map(|a| 100.0 * a));
    if !train.is_empty() {
        series.push(Series { label: "training accuracy (noisy count)".into(), points: train });
    }
    let k = cfg.worst_case_steps();
    let k_marker = Marker::new(k as f64, format!("k = {k}"));
    let mut markers = vec![k_marker.clone()];
    if selected_step != rows.last().map_or(0, |r| r.step) || selected_step == k {
        markers.push(Marker::new(selected_step as f64, format!("returned model (step {selected_step})")));
    }
    let mut panels = vec![Panel {
        title: format!("{} — test accuracy", cfg.config().name),
        x_label: "step".into(),
        y_label: "accuracy (%)".into(),
        series,
        markers,
        y_range: YRange::Settled,
        legend: SeriesLabelPosition::LowerRight,
    }];
    let exact = cfg.config().release.active_count == ActiveRelease::ExactNonPrivate;
    let active = pts(&|r| if exact { r.active_count_non_private } else { r.active_count_noisy });
    if !active.is_empty() {
        let label = if exact { "active points (exact, NON-PRIVATE)" } else { "active points (noisy count)" };
        panels.push(Panel {
            title: "active points".into(),
            x_label: "step".into(),
            y_label: "active points".into(),
            series: vec![Series { label: label.into(), points: active }],
            markers: vec![k_marker],
            y_range: YRange::FromZero,
            legend: SeriesLabelPosition::LowerLeft,
        });
    }
    line_charts(&folder.plot(), &panels)
}
