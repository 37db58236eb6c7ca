//! Running a sweep's runs: one or several at a time, resuming interrupted ones, skipping
//! finished ones and copying identical runs finished in other sweeps.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use indicatif::{MultiProgress, ProgressBar, ProgressStyle};

use super::plan::PlannedRun;
use super::report::write_results;
use crate::data::Dataset;
use crate::error::{Error, Result};
use crate::train::{RunOptions, TrainConfig, run};

/// How a sweep executes.
#[derive(Debug, Clone)]
pub struct ExecuteOptions {
    /// Show the overall bar and each run's bar.
    pub progress: bool,
    /// Runs trained at the same time. Each gets `cores / jobs` threads unless its config sets
    /// `train.threads`.
    pub jobs: usize,
    /// Other sweeps' results folders whose identical finished runs are copied, not retrained.
    pub reuse: Vec<PathBuf>,
    /// Train only the runs whose case or grid values match all of these (field, value) pairs,
    /// e.g. `("train.seed", "1")`: a table can be filled in over several invocations. The
    /// results table still lists every finished run of the sweep.
    pub only: Vec<(String, String)>,
}

impl Default for ExecuteOptions {
    fn default() -> Self {
        Self { progress: false, jobs: 1, reuse: Vec::new(), only: Vec::new() }
    }
}

impl ExecuteOptions {
    fn selects(&self, r: &PlannedRun) -> bool {
        self.only.iter().all(|(k, v)| r.point.get(k).is_some_and(|p| p.trim_matches('"') == v.trim_matches('"')))
    }
}

/// Executes every planned run that is not finished yet (resuming interrupted ones), then
/// rewrites the results table. Returns the number of runs trained now (copies not counted).
///
/// Fails before training anything if a run folder holds a run made with other settings than
/// the sweep now gives it ([`Error::StaleRun`]): its results would otherwise be reported
/// under the new settings.
pub fn execute(dir: &Path, runs: &[PlannedRun], opts: &ExecuteOptions) -> Result<usize> {
    for r in runs {
        refuse_stale(&dir.join("runs").join(&r.id), &r.config.config)?;
    }
    let mut datasets: BTreeMap<PathBuf, Dataset> = BTreeMap::new();
    let mut todo = VecDeque::new();
    let selected: Vec<&PlannedRun> = runs.iter().filter(|r| opts.selects(r)).collect();
    for &r in &selected {
        let run_dir = dir.join("runs").join(&r.id);
        if run_dir.join("privacy.json").exists() {
            continue;
        }
        if let Some(source) = finished_elsewhere(r, &opts.reuse)? {
            // Copied beside the run folder, then renamed: a crash never leaves a folder that
            // looks finished but is incomplete.
            let partial = run_dir.with_extension("copying");
            if partial.exists() {
                std::fs::remove_dir_all(&partial).map_err(Error::io(&partial))?;
            }
            copy_dir(&source, &partial)?;
            if run_dir.exists() {
                std::fs::remove_dir_all(&run_dir).map_err(Error::io(&run_dir))?;
            }
            std::fs::rename(&partial, &run_dir).map_err(Error::io(&run_dir))?;
            continue;
        }
        let data_dir = r.config.config.data.dir.clone();
        if !datasets.contains_key(&data_dir) {
            datasets.insert(data_dir.clone(), Dataset::load(&data_dir, 10)?);
        }
        todo.push_back(r);
    }
    let multi = MultiProgress::new();
    let overall =
        if opts.progress { multi.add(ProgressBar::new(selected.len() as u64)) } else { ProgressBar::hidden() };
    overall.set_style(
        ProgressStyle::with_template("sweep: {pos}/{len} runs [{bar:30}] {msg} | ETA {eta}")
            .expect("template")
            .progress_chars("=> "),
    );
    overall.set_position((selected.len() - todo.len()) as u64);
    let to_run = todo.len();
    let jobs = opts.jobs.clamp(1, to_run.max(1));
    let threads = (std::thread::available_parallelism().map_or(1, |n| n.get()) / jobs).max(1);
    let queue = Mutex::new(todo);
    let failure: Mutex<Option<Error>> = Mutex::new(None);
    let tables = Mutex::new(());
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| {
                loop {
                    if failure.lock().expect("lock").is_some() {
                        return;
                    }
                    let Some(r) = queue.lock().expect("lock").pop_front() else { return };
                    overall.set_message(r.id.clone());
                    let options = RunOptions {
                        progress: opts.progress,
                        multi: Some(multi.clone()),
                        threads: (jobs > 1).then_some(threads),
                        stop_after: None,
                    };
                    let data = &datasets[&r.config.config.data.dir];
                    match run(&r.config, data, &dir.join("runs").join(&r.id), &options) {
                        Ok(_) => {
                            overall.inc(1);
                            // The tables follow every finished run, not only the whole sweep.
                            let _guard = tables.lock().expect("lock");
                            if let Err(e) = write_results(dir, runs) {
                                failure.lock().expect("lock").get_or_insert(e);
                            }
                        }
                        Err(e) => {
                            failure.lock().expect("lock").get_or_insert(e);
                            return;
                        }
                    }
                }
            });
        }
    });
    overall.finish_and_clear();
    write_results(dir, runs)?;
    match failure.into_inner().expect("lock") {
        Some(e) => Err(e),
        None => Ok(to_run),
    }
}

/// [`Error::StaleRun`] if `run_dir` holds a run (finished or not) whose settings differ from
/// `planned`.
fn refuse_stale(run_dir: &Path, planned: &TrainConfig) -> Result<()> {
    let Some(made) = config_made(run_dir)? else { return Ok(()) };
    if &made == planned {
        return Ok(());
    }
    let as_value = |c: &TrainConfig| toml::Value::try_from(c).expect("a config serialises");
    let mut differences = Vec::new();
    differing_fields("", &as_value(&made), &as_value(planned), &mut differences);
    Err(Error::StaleRun { path: run_dir.to_path_buf(), differences: differences.join(", ") })
}

/// Appends `field: old -> new` for every leaf where `a` and `b` differ.
fn differing_fields(prefix: &str, a: &toml::Value, b: &toml::Value, out: &mut Vec<String>) {
    match (a, b) {
        (toml::Value::Table(ta), toml::Value::Table(tb)) => {
            let keys: std::collections::BTreeSet<&String> = ta.keys().chain(tb.keys()).collect();
            for k in keys {
                let field = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                match (ta.get(k), tb.get(k)) {
                    (Some(x), Some(y)) => differing_fields(&field, x, y, out),
                    (x, y) => out.push(format!("{field}: {} -> {}", shown(x), shown(y))),
                }
            }
        }
        _ if a != b => out.push(format!("{prefix}: {a} -> {b}")),
        _ => {}
    }
}

fn shown(v: Option<&toml::Value>) -> String {
    v.map_or_else(|| "(unset)".to_string(), ToString::to_string)
}

/// The configuration a run folder's run was made with (its `config.toml`), if it has one.
fn config_made(run_dir: &Path) -> Result<Option<TrainConfig>> {
    let path = run_dir.join("config.toml");
    if path.exists() { TrainConfig::from_file(&path, &[]).map(Some) } else { Ok(None) }
}

/// A finished run folder in one of `sweeps` whose configuration equals `r`'s.
fn finished_elsewhere(r: &PlannedRun, sweeps: &[PathBuf]) -> Result<Option<PathBuf>> {
    for sweep in sweeps {
        let Ok(entries) = std::fs::read_dir(sweep.join("runs")) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            if !path.join("privacy.json").exists() {
                continue;
            }
            if config_made(&path)?.as_ref() == Some(&r.config.config) {
                return Ok(Some(path));
            }
        }
    }
    Ok(None)
}

fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to).map_err(Error::io(to))?;
    for entry in std::fs::read_dir(from).map_err(Error::io(from))? {
        let entry = entry.map_err(Error::io(from))?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        if src.is_dir() {
            copy_dir(&src, &dst)?;
        } else {
            std::fs::copy(&src, &dst).map_err(Error::io(&src))?;
        }
    }
    Ok(())
}
