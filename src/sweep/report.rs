//! A sweep's results: one typed row per finished run (`results.jsonl`, `results.csv`), a
//! Markdown summary grouped over seeds, and plots.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::plan::{PlannedRun, value_text};
use crate::error::{Error, Result};
use crate::plot::{Marker, Panel, Series, SeriesLabelPosition, YRange, line_charts};
use crate::train::outputs::MetricsRow;
use crate::train::privacy::PrivacyReport;
use crate::train::{RunFolder, read_json};

/// One finished run of a sweep: a row of `results.jsonl`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultRow {
    /// The run's folder name under `runs/`.
    pub id: String,
    /// Its case and grid values (numbers as numbers, strings as strings).
    pub point: BTreeMap<String, serde_json::Value>,
    /// Whether the run is private (see its `privacy.json`).
    pub private: bool,
    /// The guarantee's ε (None when not private).
    pub epsilon: Option<f64>,
    /// The ε the configuration is accounted for (None for method = non-private).
    pub epsilon_of_configuration: Option<f64>,
    /// σ (None for non-private runs).
    pub sigma: Option<f64>,
    /// Test accuracy of the returned model.
    pub test_accuracy: f64,
    /// Test accuracy after k steps (plain private GD with the same σ).
    pub test_accuracy_at_k: Option<f64>,
    /// k.
    pub k: usize,
    /// Steps run.
    pub steps_run: usize,
    /// The returned model's step.
    pub selected_step: usize,
    /// The run's whole privacy report.
    pub privacy: PrivacyReport,
}

const STATS: [&str; 9] = [
    "private",
    "epsilon",
    "epsilon_of_configuration",
    "sigma",
    "test_accuracy",
    "test_accuracy_at_k",
    "k",
    "steps_run",
    "selected_step",
];

impl ResultRow {
    fn stats(&self) -> [String; 9] {
        let f = |v: Option<f64>| v.map_or(String::new(), |v| v.to_string());
        [
            self.private.to_string(),
            f(self.epsilon),
            f(self.epsilon_of_configuration),
            f(self.sigma),
            self.test_accuracy.to_string(),
            f(self.test_accuracy_at_k),
            self.k.to_string(),
            self.steps_run.to_string(),
            self.selected_step.to_string(),
        ]
    }
}

/// Writes `results.jsonl` and `results.csv`: one row per finished run.
///
/// # Errors
/// A finished run whose `result.json` or `privacy.json` is unreadable (named), or a results
/// file that cannot be written.
pub fn write_results(dir: &Path, runs: &[PlannedRun]) -> Result<Vec<ResultRow>> {
    let mut rows = Vec::new();
    for r in runs {
        let folder = RunFolder::new(dir.join("runs").join(&r.id));
        if !folder.is_finished() {
            continue;
        }
        let result: crate::train::outputs::RunResult = read_json(&folder.result())?;
        let privacy: PrivacyReport = read_json(&folder.privacy())?;
        let point = r.json_point();
        rows.push(ResultRow {
            id: r.id.clone(),
            point,
            private: privacy.private,
            epsilon: privacy.epsilon,
            epsilon_of_configuration: result.epsilon_of_configuration,
            sigma: privacy.accounting.as_ref().map(|a| a.training.sigma),
            test_accuracy: result.test_accuracy,
            test_accuracy_at_k: result.test_accuracy_at_k,
            k: result.k,
            steps_run: result.steps_run,
            selected_step: result.selected_step,
            privacy,
        });
    }
    std::fs::create_dir_all(dir).map_err(Error::io(dir))?;
    let mut jsonl = String::new();
    for r in &rows {
        jsonl += &serde_json::to_string(r).map_err(Error::serialise("a results row"))?;
        jsonl.push('\n');
    }
    crate::files::atomic_write(&dir.join("results.jsonl"), jsonl.as_bytes())?;
    let fields: Vec<String> = runs.first().map(|r| r.point.keys().cloned().collect()).unwrap_or_default();
    let mut csv = csv_line(
        std::iter::once("id".to_string()).chain(fields.iter().cloned()).chain(STATS.iter().map(|s| s.to_string())),
    );
    for (r, planned) in rows.iter().zip(runs.iter().filter(|p| rows.iter().any(|row| row.id == p.id))) {
        let vals = fields.iter().map(|f| planned.point.get(f).map(value_text).unwrap_or_default());
        csv += &csv_line(std::iter::once(r.id.clone()).chain(vals).chain(r.stats()));
    }
    crate::files::atomic_write(&dir.join("results.csv"), csv.as_bytes())?;
    Ok(rows)
}

/// One CSV line; a cell with a comma, quote or newline is quoted (RFC 4180).
fn csv_line(cells: impl Iterator<Item = String>) -> String {
    let cells: Vec<String> = cells
        .map(|c| if c.contains([',', '"', '\n']) { format!("\"{}\"", c.replace('"', "\"\"")) } else { c })
        .collect();
    cells.join(",") + "\n"
}

/// Mean ± std of `f(row)` over the rows that have it.
fn stat(rows: &[ResultRow], f: impl Fn(&ResultRow) -> Option<f64>) -> Option<(f64, f64, usize)> {
    let xs: Vec<f64> = rows.iter().filter_map(f).collect();
    (!xs.is_empty()).then(|| {
        let (m, s) = mean_std(&xs);
        (m, s, xs.len())
    })
}

/// Markdown summary of a sweep's `results.jsonl`: mean ± std over seeds of the returned
/// model's test accuracy, of the accuracy after k = B_norm/C² steps (for a filtered run,
/// plain private GD of the same σ) and of ε, grouped by every non-seed field. Also draws
/// `report.png` and, if the runs released noisy active counts, `active.png` (kept as they are
/// when none of the runs' folders is here).
///
/// # Errors
/// No `results.jsonl` yet (run the sweep first), a row that does not parse, or a plot that
/// cannot be written.
pub fn report(dir: &Path) -> Result<String> {
    let path = dir.join("results.jsonl");
    if !path.exists() {
        return Err(Error::Data {
            path,
            message: "no results yet: run `dpgd sweep SWEEP_FILE` first (it writes results.jsonl here)".into(),
        });
    }
    let text = std::fs::read_to_string(&path).map_err(Error::io(&path))?;
    let mut groups: BTreeMap<Vec<(String, String)>, Vec<ResultRow>> = BTreeMap::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let row: ResultRow =
            serde_json::from_str(line).map_err(|e| Error::file(&path, format!("line {}: {e}", i + 1)))?;
        groups.entry(group_fields(&row)).or_default().push(row);
    }
    let mut out = String::from(
        "| configuration | runs | test accuracy (%) | at step k = B_norm/C²: plain private GD, same σ (%) | steps run | epsilon |\n\
         |---|---|---|---|---|---|\n",
    );
    for (key, g) in &groups {
        let private = g.iter().all(|r| r.private);
        let eps = stat(g, |r| r.epsilon_of_configuration)
            .map_or("–".into(), |(m, _, _)| if private { format!("{m:.3}") } else { format!("{m:.3} (not private)") });
        out += &format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            if key.is_empty() { "(base)".to_string() } else { join(key) },
            g.len(),
            pm(stat(g, |r| Some(100.0 * r.test_accuracy)), 2),
            pm(stat(g, |r| r.test_accuracy_at_k.map(|a| 100.0 * a)), 2),
            pm(stat(g, |r| Some(r.steps_run as f64)), 0),
            eps,
        );
    }
    out += POOLED_NOTE;
    plot(dir, &groups)?;
    Ok(out)
}

/// What the table's pooled numbers cost, printed under it.
const POOLED_NOTE: &str = "\n_epsilon_ is each run's own guarantee. A row pooled over r runs on the same training data \
    uses r models, each (epsilon, delta)-DP: the row as a whole is covered only by their composition (basic \
    composition: (r·epsilon, r·delta); for Gaussian noise sqrt(r)·mu in Gaussian DP). Choosing hyperparameters by \
    comparing rows measured on the training data, or on a test set you then report, is a release no run accounts \
    for (Papernot & Steinke 2022): the guarantee covers a run whose settings were fixed in advance.\n";

/// `mean ± std`, or just the value for a single run.
fn pm(s: Option<(f64, f64, usize)>, digits: usize) -> String {
    match s {
        None => "–".into(),
        Some((m, _, 1)) => format!("{m:.digits$}"),
        Some((m, sd, _)) => format!("{m:.digits$} ± {sd:.digits$}"),
    }
}

/// A run's grid fields other than the seed, as (field, value) pairs in field order.
fn group_fields(r: &ResultRow) -> Vec<(String, String)> {
    r.point
        .iter()
        .filter(|(k, _)| *k != "train.seed")
        .map(|(k, v)| (k.clone(), v.as_str().map_or_else(|| v.to_string(), str::to_string)))
        .collect()
}

fn join(fields: &[(String, String)]) -> String {
    fields.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", ")
}

/// A run's released metrics.
fn metrics(dir: &Path, id: &str) -> Vec<MetricsRow> {
    let path = RunFolder::new(dir.join("runs").join(id)).metrics_jsonl();
    std::fs::read_to_string(path)
        .map(|t| t.lines().filter_map(|l| serde_json::from_str(l).ok()).collect())
        .unwrap_or_default()
}

/// `report.png`: mean test accuracy against the step, one panel per value of the first grid
/// field when there are two or more, one series per group, a vertical line at each
/// k = B_norm/C²; `active.png`: the noisy active counts, one panel per group, every seed.
fn plot(dir: &Path, groups: &BTreeMap<Vec<(String, String)>, Vec<ResultRow>>) -> Result<()> {
    // A committed study keeps its table and plots but not its per-run folders (`runs/<id>/`,
    // regenerated by its sweep): with no run's metrics here, the plots already drawn are kept,
    // not replaced by empty axes.
    if !groups.values().flatten().any(|r| RunFolder::new(dir.join("runs").join(&r.id)).metrics_jsonl().exists()) {
        return Ok(());
    }
    let mut accuracy: BTreeMap<String, (Vec<Series>, Vec<Marker>)> = BTreeMap::new();
    let mut active = Vec::new();
    for (fields, g) in groups {
        let key = join(fields);
        let (panel, label) = match fields.split_first() {
            Some((first, rest)) if !rest.is_empty() => (join(std::slice::from_ref(first)), join(rest)),
            _ => (String::new(), key.clone()),
        };
        let runs: Vec<(&ResultRow, Vec<MetricsRow>)> = g.iter().map(|r| (r, metrics(dir, &r.id))).collect();
        // Mean over seeds of the test accuracy at the steps every seed evaluated.
        let mut by_step: BTreeMap<usize, Vec<f64>> = BTreeMap::new();
        for (_, rows) in &runs {
            for row in rows {
                if let Some(a) = row.test_accuracy {
                    by_step.entry(row.step).or_default().push(100.0 * a);
                }
            }
        }
        let points =
            by_step.iter().filter(|(_, v)| v.len() == runs.len()).map(|(s, v)| (*s as f64, mean_std(v).0)).collect();
        let k = g.first().map(|r| Marker::new(r.k as f64, format!("k = {}", r.k)));
        let (series, markers) = accuracy.entry(panel).or_default();
        series.push(Series { label, points });
        markers.extend(k.clone().filter(|k| !markers.contains(k)));
        let counts: Vec<Series> = runs
            .iter()
            .map(|(r, rows)| Series {
                label: format!("seed {}", r.point.get("train.seed").map_or(String::new(), ToString::to_string)),
                points: rows.iter().filter_map(|m| m.active_count_noisy.map(|a| (m.step as f64, a))).collect(),
            })
            .filter(|s| !s.points.is_empty())
            .collect();
        if !counts.is_empty() {
            active.push(Panel {
                title: format!("active points (noisy count): {key}"),
                x_label: "step".into(),
                y_label: "active points".into(),
                series: counts,
                markers: k.into_iter().collect(),
                y_range: YRange::FromZero,
                legend: SeriesLabelPosition::LowerLeft,
            });
        }
    }
    let accuracy: Vec<Panel> = accuracy
        .into_iter()
        .map(|(panel, (series, markers))| Panel {
            title: if panel.is_empty() {
                "test accuracy (mean over seeds)".into()
            } else {
                format!("test accuracy (mean over seeds): {panel}")
            },
            x_label: "step".into(),
            y_label: "test accuracy (%)".into(),
            series,
            markers,
            y_range: YRange::Settled,
            legend: SeriesLabelPosition::LowerRight,
        })
        .collect();
    line_charts(&dir.join("report.png"), &accuracy)?;
    if !active.is_empty() {
        line_charts(&dir.join("active.png"), &active)?;
    }
    Ok(())
}

fn mean_std(xs: &[f64]) -> (f64, f64) {
    let n = xs.len().max(1) as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let var = if xs.len() > 1 { xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0) } else { 0.0 };
    (mean, var.sqrt())
}
