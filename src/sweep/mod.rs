//! Config-driven sweeps: a grid of config overrides (and seeds) expanded into runs that
//! execute one after another and resume where they stopped.
//!
//! ```toml
//! name = "tiny"
//! base = "configs/mnist-plain.toml"      # every run starts from this config
//! [set]                                  # overrides shared by every run
//! "data.train_subset" = 2000
//! [grid]                                 # the cartesian product of these lists
//! "privacy.epsilon" = [0.5, 1.0]
//! "privacy.method" = ["plain", "filtered"]
//! seeds = [1, 2]                         # noise seeds (train.seed)
//! ```
//!
//! Every expanded config is validated before the first run starts. Runs live in
//! `<sweep dir>/runs/<id>/`; a run with a `privacy.json` is finished and never redone, one with
//! a checkpoint is resumed, and adding grid points later runs only the new ones. Each finished
//! run is a row of `<sweep dir>/results.csv` and `results.jsonl`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::{Value, json};

use crate::data::Dataset;
use crate::error::{Error, Result};
use crate::train::{RunOptions, TrainConfig, ValidConfig, run};

/// A sweep file as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepFile {
    /// Sweep name (the results folder defaults to `experiments/<name>`).
    pub name: String,
    /// Base training config, relative to the working directory.
    pub base: PathBuf,
    /// Overrides applied to every run.
    #[serde(default)]
    pub set: BTreeMap<String, toml::Value>,
    /// Grid: each key is a config field, each value a non-empty list.
    #[serde(default)]
    pub grid: BTreeMap<String, toml::Value>,
}

/// One expanded run.
#[derive(Debug, Clone)]
pub struct PlannedRun {
    /// Folder-safe identifier built from the grid values.
    pub id: String,
    /// The grid values of this run (field → value as TOML text).
    pub point: BTreeMap<String, String>,
    /// The validated config.
    pub config: ValidConfig,
}

/// Reads a sweep file, expands its grid and validates every run's config.
pub fn plan(path: &Path) -> Result<(SweepFile, Vec<PlannedRun>)> {
    let text = std::fs::read_to_string(path).map_err(Error::io(path))?;
    let sweep: SweepFile = toml::from_str(&text).map_err(|e: toml::de::Error| Error::Config {
        field: format!("sweep {}", path.display()),
        message: e.message().to_string(),
    })?;
    let mut axes: Vec<(String, Vec<String>)> = Vec::new();
    for (key, values) in &sweep.grid {
        let list = values.as_array().filter(|a| !a.is_empty()).ok_or_else(|| Error::Config {
            field: format!("grid.{key}"),
            message: "every grid entry must be a non-empty list of values".into(),
        })?;
        let field = if key == "seeds" { "train.seed".to_string() } else { key.clone() };
        axes.push((field, list.iter().map(toml_text).collect()));
    }
    let fixed: Vec<String> = sweep.set.iter().map(|(k, v)| format!("{k}={}", toml_text(v))).collect();
    let mut points: Vec<BTreeMap<String, String>> = vec![BTreeMap::new()];
    for (field, values) in &axes {
        points = points
            .into_iter()
            .flat_map(|p| {
                values.iter().map(move |v| {
                    let mut q = p.clone();
                    q.insert(field.clone(), v.clone());
                    q
                })
            })
            .collect();
    }
    let mut runs = Vec::with_capacity(points.len());
    for point in points {
        let mut overrides = fixed.clone();
        overrides.extend(point.iter().map(|(k, v)| format!("{k}={v}")));
        let id = run_id(&point);
        let config = TrainConfig::from_file(&sweep.base, &overrides)
            .and_then(|c| c.validate())
            .map_err(|e| Error::Config { field: format!("sweep run {id}"), message: e.to_string() })?;
        runs.push(PlannedRun { id, point, config });
    }
    Ok((sweep, runs))
}

/// Executes every planned run that is not finished yet (resuming interrupted ones), then
/// rewrites the results table. Returns the number of runs executed now.
pub fn execute(dir: &Path, runs: &[PlannedRun], progress: bool) -> Result<usize> {
    let mut executed = 0;
    let mut datasets: BTreeMap<PathBuf, Dataset> = BTreeMap::new();
    let multi = indicatif::MultiProgress::new();
    let overall = if progress {
        multi.add(indicatif::ProgressBar::new(runs.len() as u64))
    } else {
        indicatif::ProgressBar::hidden()
    };
    overall.set_style(
        indicatif::ProgressStyle::with_template("sweep: {pos}/{len} runs [{bar:30}] {msg} | ETA {eta}")
            .expect("template")
            .progress_chars("=> "),
    );
    for r in runs {
        let run_dir = dir.join("runs").join(&r.id);
        overall.set_message(r.id.clone());
        if run_dir.join("privacy.json").exists() {
            overall.inc(1);
            continue;
        }
        let data_dir = r.config.config.data.dir.clone();
        if !datasets.contains_key(&data_dir) {
            datasets.insert(data_dir.clone(), Dataset::load(&data_dir, 10)?);
        }
        run(
            &r.config,
            &datasets[&data_dir],
            &run_dir,
            &RunOptions { progress, stop_after: None, multi: Some(multi.clone()) },
        )?;
        executed += 1;
        overall.inc(1);
    }
    overall.finish_and_clear();
    write_results(dir, runs)?;
    Ok(executed)
}

/// Writes `results.jsonl` and `results.csv`: one row per finished run (grid values, final
/// test accuracy, ε and the privacy report).
pub fn write_results(dir: &Path, runs: &[PlannedRun]) -> Result<Vec<Value>> {
    let mut rows = Vec::new();
    for r in runs {
        let run_dir = dir.join("runs").join(&r.id);
        let Ok(text) = std::fs::read_to_string(run_dir.join("privacy.json")) else { continue };
        let privacy: Value = serde_json::from_str(&text).map_err(|e| Error::Record(e.to_string()))?;
        let metrics =
            std::fs::read_to_string(run_dir.join("metrics.csv")).map_err(Error::io(run_dir.join("metrics.csv")))?;
        let acc = metrics.lines().skip(1).filter_map(|l| l.split(',').nth(3)?.parse::<f64>().ok()).last();
        rows.push(json!({ "id": r.id, "point": r.point, "test_accuracy": acc, "epsilon": privacy["epsilon"], "privacy": privacy }));
    }
    let jsonl: String = rows.iter().map(|r| format!("{r}\n")).collect();
    std::fs::write(dir.join("results.jsonl"), jsonl).map_err(Error::io(dir.join("results.jsonl")))?;
    let fields: Vec<String> = runs.first().map(|r| r.point.keys().cloned().collect()).unwrap_or_default();
    let mut csv = format!("id,{},test_accuracy,epsilon\n", fields.join(","));
    for r in &rows {
        let vals: Vec<String> = fields.iter().map(|f| r["point"][f].as_str().unwrap_or("").replace(',', ";")).collect();
        csv +=
            &format!("{},{},{},{}\n", r["id"].as_str().unwrap_or(""), vals.join(","), r["test_accuracy"], r["epsilon"]);
    }
    std::fs::write(dir.join("results.csv"), csv).map_err(Error::io(dir.join("results.csv")))?;
    Ok(rows)
}

fn toml_text(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => format!("\"{s}\""),
        other => other.to_string(),
    }
}

/// `privacy.epsilon=0.5,train.seed=1` → `epsilon-0.5_seed-1` (last key segment, folder-safe).
fn run_id(point: &BTreeMap<String, String>) -> String {
    if point.is_empty() {
        return "base".into();
    }
    point
        .iter()
        .map(|(k, v)| {
            let key = k.rsplit('.').next().unwrap_or(k);
            let val: String = v.chars().filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-')).collect();
            format!("{key}-{val}")
        })
        .collect::<Vec<_>>()
        .join("_")
}

/// Markdown summary of a sweep's `results.jsonl`: mean ± std of test accuracy and ε over seeds,
/// grouped by every non-seed grid field.
pub fn report(dir: &Path) -> Result<String> {
    let path = dir.join("results.jsonl");
    let text = std::fs::read_to_string(&path).map_err(Error::io(&path))?;
    let rows: Vec<Value> = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(serde_json::from_str)
        .collect::<std::result::Result<_, _>>()
        .map_err(|e| Error::Record(format!("{}: {e}", path.display())))?;
    let mut groups: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for r in &rows {
        let key: Vec<String> = r["point"]
            .as_object()
            .map(|o| {
                o.iter()
                    .filter(|(k, _)| *k != "train.seed")
                    .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or("")))
                    .collect()
            })
            .unwrap_or_default();
        let acc = r["test_accuracy"].as_f64().unwrap_or(f64::NAN);
        let eps = r["epsilon"].as_f64().unwrap_or(f64::NAN);
        groups.entry(key.join(", ")).or_default().push((acc, eps));
    }
    let mut out = String::from("| configuration | runs | test accuracy (%) | epsilon |\n|---|---|---|---|\n");
    for (k, v) in groups {
        let (ma, sa) = mean_std(v.iter().map(|x| 100.0 * x.0));
        let (me, _) = mean_std(v.iter().map(|x| x.1));
        out +=
            &format!("| {} | {} | {ma:.2} ± {sa:.2} | {me:.3} |\n", if k.is_empty() { "(base)" } else { &k }, v.len());
    }
    Ok(out)
}

fn mean_std(xs: impl Iterator<Item = f64> + Clone) -> (f64, f64) {
    let n = xs.clone().count().max(1) as f64;
    let mean = xs.clone().sum::<f64>() / n;
    let var = if n > 1.0 { xs.map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0) } else { 0.0 };
    (mean, var.sqrt())
}
