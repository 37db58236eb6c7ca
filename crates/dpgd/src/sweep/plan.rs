//! Sweep files and their expansion into validated runs.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::train::{TrainConfig, ValidConfig};

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
    /// Named override sets for settings that vary together (each case is crossed with the grid);
    /// a case's own `seeds = [..]` replaces the grid's seeds for that case.
    #[serde(default)]
    pub cases: BTreeMap<String, BTreeMap<String, toml::Value>>,
    /// Grid: each key is a config field, each value a non-empty list.
    #[serde(default)]
    pub grid: BTreeMap<String, toml::Value>,
    /// Other sweeps' results folders: a run finished there with exactly this run's
    /// configuration is copied instead of being trained again.
    #[serde(default)]
    pub reuse: Vec<PathBuf>,
}

/// One expanded run.
#[derive(Debug, Clone)]
pub struct PlannedRun {
    /// Folder-safe identifier built from the case and grid values.
    pub id: String,
    /// The case and grid values of this run (field → value as TOML text; the case is `case`).
    pub point: BTreeMap<String, String>,
    /// The validated config.
    pub config: ValidConfig,
}

/// Reads a sweep file, expands its cases and grid and validates every run's config. Runs are
/// ordered seed by seed (all configurations at the first seed, then at the second, …); a case
/// with its own `seeds` list runs at those seeds instead of the grid's.
pub fn plan(path: &Path) -> Result<(SweepFile, Vec<PlannedRun>)> {
    let text = std::fs::read_to_string(path).map_err(Error::io(path))?;
    let sweep: SweepFile = toml::from_str(&text).map_err(|e: toml::de::Error| Error::Config {
        field: format!("sweep {}", path.display()),
        message: e.message().to_string(),
    })?;
    let mut axes: Vec<(String, Vec<String>)> = Vec::new();
    if !sweep.cases.is_empty() {
        axes.push(("case".into(), sweep.cases.keys().map(|k| format!("\"{k}\"")).collect()));
    }
    let mut grid_seeds = None;
    for (key, values) in &sweep.grid {
        let values = list_of(values, &format!("grid.{key}"))?;
        if key == "seeds" {
            grid_seeds = Some(values);
        } else {
            axes.push((key.clone(), values));
        }
    }
    let mut case_seeds = BTreeMap::new();
    for (name, case) in &sweep.cases {
        if let Some(values) = case.get("seeds") {
            case_seeds.insert(name.as_str(), list_of(values, &format!("cases.{name}.seeds"))?);
        }
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
    // Each point at its case's seeds, else the grid's; seeds vary slowest, so a sweep cut short
    // has every configuration at the first seeds.
    let mut seeded: Vec<(usize, BTreeMap<String, String>)> = Vec::new();
    for point in points {
        let seeds = point.get("case").and_then(|c| case_seeds.get(c.trim_matches('"'))).or(grid_seeds.as_ref());
        match seeds {
            None => seeded.push((0, point)),
            Some(seeds) => seeded.extend(seeds.iter().enumerate().map(|(i, seed)| {
                let mut q = point.clone();
                q.insert("train.seed".to_string(), seed.clone());
                (i, q)
            })),
        }
    }
    seeded.sort_by_key(|(i, _)| *i);
    let points: Vec<_> = seeded.into_iter().map(|(_, point)| point).collect();
    let mut runs = Vec::with_capacity(points.len());
    for point in points {
        let mut overrides = fixed.clone();
        for (field, value) in &point {
            match field.as_str() {
                "case" => {
                    let case = &sweep.cases[value.trim_matches('"')];
                    let settings = case.iter().filter(|(k, _)| k.as_str() != "seeds");
                    overrides.extend(settings.map(|(k, v)| format!("{k}={}", toml_text(v))));
                }
                _ => overrides.push(format!("{field}={value}")),
            }
        }
        let id = run_id(&point);
        let config = TrainConfig::from_file(&sweep.base, &overrides)
            .and_then(|c| c.validate())
            .map_err(|e| Error::Config { field: format!("sweep run {id}"), message: e.to_string() })?;
        runs.push(PlannedRun { id, point, config });
    }
    Ok((sweep, runs))
}

/// A grid entry (or a case's `seeds`) as TOML texts: it must be a non-empty list.
fn list_of(values: &toml::Value, field: &str) -> Result<Vec<String>> {
    let list = values.as_array().filter(|a| !a.is_empty()).ok_or_else(|| Error::Config {
        field: field.to_string(),
        message: "must be a non-empty list of values".into(),
    })?;
    Ok(list.iter().map(toml_text).collect())
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
