//! Sweep files and their expansion into validated runs.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::train::{Override, TrainConfig, ValidConfig};

/// The most runs one sweep file may expand to; the count is computed before anything is
/// expanded.
pub const MAX_RUNS: usize = 100_000;

/// A sweep file as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SweepFile {
    /// Sweep name (its results go to `results/` beside the sweep file unless `--out` says
    /// otherwise).
    pub name: String,
    /// Base training config: relative to the sweep file's folder, or else to the working
    /// directory.
    pub base: PathBuf,
    /// Fields of the base removed from every run before `set` applies (as `dpgd train
    /// --unset`), e.g. a DP-SGD base's `privacy.sample_rate` under a method that does not sample.
    #[serde(default)]
    pub unset: Vec<String>,
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
    /// Other sweeps' results folders (relative to this file's folder, or to the working
    /// directory): a run finished there with exactly this run's configuration is copied
    /// instead of being trained again.
    #[serde(default)]
    pub reuse: Vec<PathBuf>,
    /// The `[search]` section as written: how `--select private` searches (read by the search
    /// as its `SearchSection`, so that a plain sweep neither needs nor checks it).
    #[serde(default)]
    pub search: Option<toml::Table>,
}

/// One expanded run.
#[derive(Debug, Clone)]
pub struct PlannedRun {
    /// Folder-safe identifier built from the case and grid values (distinct for distinct runs).
    pub id: String,
    /// The case and grid values of this run (field → value; the case is `case`, the seed
    /// `train.seed`).
    pub point: BTreeMap<String, toml::Value>,
    /// The validated config.
    pub config: ValidConfig,
}

impl PlannedRun {
    /// Whether the run's value of `field` reads as `value` (strings without their quotes).
    #[must_use]
    pub fn has(&self, field: &str, value: &str) -> bool {
        self.point.get(field).is_some_and(|v| value_text(v) == value.trim().trim_matches('"'))
    }
    /// The case and grid values as JSON (numbers as numbers, strings as strings).
    #[must_use]
    pub fn json_point(&self) -> BTreeMap<String, serde_json::Value> {
        self.point
            .iter()
            .map(|(k, v)| (k.clone(), serde_json::to_value(v).unwrap_or(serde_json::Value::Null)))
            .collect()
    }
}

/// A value as plain text: strings without their TOML quotes, everything else as TOML.
#[must_use]
pub fn value_text(v: &toml::Value) -> String {
    match v {
        toml::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Reads a sweep file, expands its cases and grid and validates every run's config. Runs are
/// ordered seed by seed (all configurations at the first seed, then at the second, …); a case
/// with its own `seeds` list runs at those seeds instead of the grid's.
///
/// # Errors
/// The file cannot be read or parsed; an empty name, an empty or non-list grid entry; more than
/// [`MAX_RUNS`] runs; two runs whose folder names would coincide; or an invalid run config
/// (the run named).
pub fn plan(path: &Path) -> Result<(SweepFile, Vec<PlannedRun>)> {
    plan_with(path, &[])
}

/// As [`plan`], with `extra` overrides (the command line's, e.g. `--audit`) applied to every run
/// after the sweep file's own.
///
/// # Errors
/// As [`plan`].
pub fn plan_with(path: &Path, extra: &[Override]) -> Result<(SweepFile, Vec<PlannedRun>)> {
    let text = std::fs::read_to_string(path).map_err(Error::io(path))?;
    let mut sweep: SweepFile = toml::from_str(&text)
        .map_err(|e: toml::de::Error| Error::config(format!("sweep {}", path.display()), e.message().to_string()))?;
    if sweep.name.trim().is_empty() || sweep.name.contains(['/', '\\']) || sweep.name.starts_with('.') {
        return Err(Error::config(
            format!("sweep {}: name", path.display()),
            format!("`{}` is not a folder name: give the sweep a name such as \"tiny\"", sweep.name),
        ));
    }
    sweep.base = resolve(path, &sweep.base);
    sweep.reuse = sweep.reuse.iter().map(|r| resolve(path, r)).collect();
    let points = expand(&sweep)?;
    let mut runs = Vec::with_capacity(points.len());
    let mut ids: BTreeMap<String, BTreeMap<String, toml::Value>> = BTreeMap::new();
    for point in points {
        let id = run_id(&point);
        if let Some(other) = ids.get(&id) {
            return Err(Error::config(
                format!("sweep {}", path.display()),
                format!(
                    "two runs would share the folder `{id}`: {} and {}; make their values differ in more than punctuation",
                    show(other),
                    show(&point)
                ),
            ));
        }
        let mut overrides = overrides(&sweep, &point);
        overrides.extend(extra.iter().cloned());
        // The overrides are the sweep file's [set], cases and grid, not the command line's.
        let origin = format!("in {}", path.display());
        let config = TrainConfig::from_file_set(&sweep.base, &overrides, &origin)
            .and_then(|c| c.validate())
            .map_err(|e| Error::config(format!("sweep run {id}"), e.to_string()))?;
        ids.insert(id.clone(), point.clone());
        runs.push(PlannedRun { id, point, config });
    }
    Ok((sweep, runs))
}

/// A path of the sweep file: relative to the sweep file's folder if it exists there, else as
/// given (relative to the working directory).
fn resolve(sweep: &Path, path: &Path) -> PathBuf {
    if path.is_absolute() {
        return path.into();
    }
    match sweep.parent().map(|d| d.join(path)) {
        Some(p) if p.exists() => p,
        _ => path.into(),
    }
}

/// Where a sweep's results go by default: `results/` beside its sweep file.
#[must_use]
pub fn default_results(sweep_file: &Path) -> PathBuf {
    sweep_file.parent().unwrap_or(Path::new(".")).join("results")
}

/// The sweep's points: cases × grid, each at its seeds, seeds varying slowest.
fn expand(sweep: &SweepFile) -> Result<Vec<BTreeMap<String, toml::Value>>> {
    let mut axes: Vec<(String, Vec<toml::Value>)> = Vec::new();
    if !sweep.cases.is_empty() {
        axes.push(("case".into(), sweep.cases.keys().map(|k| toml::Value::String(k.clone())).collect()));
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
            case_seeds.insert(name.clone(), list_of(values, &format!("cases.{name}.seeds"))?);
        }
    }
    // Count before expanding: a grid of 10⁹ runs is refused, not materialised.
    let most_seeds = case_seeds.values().chain(grid_seeds.iter()).map(Vec::len).max().unwrap_or(1);
    let count = axes.iter().try_fold(most_seeds, |acc, (_, v)| acc.checked_mul(v.len()));
    if count.is_none_or(|c| c > MAX_RUNS) {
        return Err(Error::config(
            "grid",
            format!("the sweep expands to more than {MAX_RUNS} runs; split it into several sweep files"),
        ));
    }
    let mut points: Vec<BTreeMap<String, toml::Value>> = vec![BTreeMap::new()];
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
    let mut seeded: Vec<(usize, BTreeMap<String, toml::Value>)> = Vec::new();
    for point in points {
        let case = point.get("case").map(value_text);
        let seeds = case.and_then(|c| case_seeds.get(&c)).or(grid_seeds.as_ref());
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
    Ok(seeded.into_iter().map(|(_, point)| point).collect())
}

/// The overrides of one point: the sweep's `unset`, its `[set]`, then its case's settings, then
/// its grid values.
fn overrides(sweep: &SweepFile, point: &BTreeMap<String, toml::Value>) -> Vec<Override> {
    let mut out: Vec<Override> = sweep.unset.iter().map(|k| Override::Unset(k.clone())).collect();
    out.extend(sweep.set.iter().map(|(k, v)| Override::Set(k.clone(), v.clone())));
    for (field, value) in point {
        if field == "case" {
            if let Some(case) = sweep.cases.get(&value_text(value)) {
                let settings = case.iter().filter(|(k, _)| k.as_str() != "seeds");
                out.extend(settings.map(|(k, v)| Override::Set(k.clone(), v.clone())));
            }
        } else {
            out.push(Override::Set(field.clone(), value.clone()));
        }
    }
    out
}

/// A grid entry (or a case's `seeds`): it must be a non-empty list.
fn list_of(values: &toml::Value, field: &str) -> Result<Vec<toml::Value>> {
    values
        .as_array()
        .filter(|a| !a.is_empty())
        .cloned()
        .ok_or_else(|| Error::config(field, "must be a non-empty list of values"))
}

fn show(point: &BTreeMap<String, toml::Value>) -> String {
    point.iter().map(|(k, v)| format!("{k}={}", value_text(v))).collect::<Vec<_>>().join(", ")
}

/// `privacy.epsilon=0.5, train.seed=1` → `epsilon-0.5_seed-1`: each field's last key segment
/// and its value, with every character outside `[A-Za-z0-9.-]` written as `~XX` (its byte in
/// hex), so distinct values of a field give distinct names (`a/b_c` and `a/bc` differ).
fn run_id(point: &BTreeMap<String, toml::Value>) -> String {
    if point.is_empty() {
        return "base".into();
    }
    let mut used = BTreeSet::new();
    point
        .iter()
        .map(|(k, v)| {
            let key = k.rsplit('.').next().unwrap_or(k);
            // Two fields with the same last segment keep their whole names apart.
            let key = if used.insert(key) { key.to_string() } else { k.replace('.', "-") };
            format!("{key}-{}", escape(&value_text(v)))
        })
        .collect::<Vec<_>>()
        .join("_")
}

fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        if b.is_ascii_alphanumeric() || b == b'.' || b == b'-' {
            out.push(char::from(b));
        } else {
            out += &format!("~{b:02x}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(pairs: &[(&str, toml::Value)]) -> BTreeMap<String, toml::Value> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect()
    }

    #[test]
    fn run_ids_keep_the_old_names_and_never_collide() {
        let s = |x: &str| toml::Value::String(x.into());
        assert_eq!(
            run_id(&point(&[
                ("case", s("tuned-eps0.3")),
                ("privacy.conversion", s("bun-steinke")),
                ("train.seed", toml::Value::Integer(1))
            ])),
            "case-tuned-eps0.3_conversion-bun-steinke_seed-1"
        );
        let a = run_id(&point(&[("data.dir", s("a/b_c"))]));
        let b = run_id(&point(&[("data.dir", s("a/bc"))]));
        assert_ne!(a, b);
        assert_eq!(run_id(&point(&[("privacy.epsilon", toml::Value::Float(0.5))])), "epsilon-0.5");
    }
}
