//! Running a sweep's runs: one or several at a time, resuming interrupted ones, skipping
//! finished ones and copying identical runs finished in other sweeps.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, PoisonError};

use super::plan::PlannedRun;
use super::report::write_results;
use crate::data::Dataset;
use crate::error::{Error, Result};
use crate::train::{Observer, RunFolder, RunOptions, Silent, TrainConfig, run};

/// How a sweep executes.
#[derive(Debug, Clone)]
pub struct ExecuteOptions {
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
        Self { jobs: 1, reuse: Vec::new(), only: Vec::new() }
    }
}

impl ExecuteOptions {
    fn selects(&self, r: &PlannedRun) -> bool {
        self.only.iter().all(|(k, v)| r.has(k, v))
    }
}

/// How a sweep reports progress without printing (the CLI draws bars from it).
pub trait SweepObserver: Sync {
    /// The runs selected, and how many of them will be trained now.
    fn planned(&self, _selected: usize, _to_train: usize) {}
    /// An observer for one run's training, called when the run starts.
    fn run_observer(&self, _run: &PlannedRun) -> Box<dyn Observer + Send + '_> {
        Box::new(Silent)
    }
    /// A run finished (trained now or copied from another sweep).
    fn run_done(&self, _run: &PlannedRun) {}
}

/// A sweep observer that ignores everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct QuietSweep;

impl SweepObserver for QuietSweep {}

/// Executes every planned run that is not finished yet (resuming interrupted ones), then
/// rewrites the results table. Returns the number of runs trained now (copies not counted).
///
/// # Errors
/// Before training anything: a run folder holding a run made with other settings than the
/// sweep now gives it ([`Error::StaleRun`]; its results would otherwise be reported under the
/// new settings), or unreadable data. Afterwards: the first run that failed.
pub fn execute(dir: &Path, runs: &[PlannedRun], opts: &ExecuteOptions, observer: &dyn SweepObserver) -> Result<usize> {
    for r in runs {
        refuse_stale(&dir.join("runs").join(&r.id), r.config.config())?;
    }
    // Keyed by the whole data section: runs that hold out other examples train on other data.
    let mut datasets: BTreeMap<String, Dataset> = BTreeMap::new();
    let mut todo = VecDeque::new();
    let selected: Vec<&PlannedRun> = runs.iter().filter(|r| opts.selects(r)).collect();
    for &r in &selected {
        let run_dir = dir.join("runs").join(&r.id);
        if RunFolder::new(&run_dir).is_finished() {
            continue;
        }
        if let Some(source) = finished_elsewhere(r, &opts.reuse)? {
            copy_run(&source, &run_dir)?;
            observer.run_done(r);
            continue;
        }
        if let std::collections::btree_map::Entry::Vacant(slot) = datasets.entry(data_key(r)) {
            slot.insert(r.config.config().data.load()?);
        }
        todo.push_back(r);
    }
    observer.planned(selected.len(), todo.len());
    let to_run = todo.len();
    let jobs = opts.jobs.clamp(1, to_run.max(1));
    let threads = (std::thread::available_parallelism().map_or(1, |n| n.get()) / jobs).max(1);
    let queue = Mutex::new(todo);
    let failure: Mutex<Option<Error>> = Mutex::new(None);
    let tables = Mutex::new(());
    // A panicking worker cannot leave these half-updated: each holds a plain value.
    let lock = |m: &Mutex<Option<Error>>| m.lock().unwrap_or_else(PoisonError::into_inner).is_some();
    std::thread::scope(|scope| {
        for _ in 0..jobs {
            scope.spawn(|| {
                loop {
                    if lock(&failure) {
                        return;
                    }
                    let Some(r) = queue.lock().unwrap_or_else(PoisonError::into_inner).pop_front() else { return };
                    let options = RunOptions { threads: (jobs > 1).then_some(threads), ..Default::default() };
                    let data = &datasets[&data_key(r)];
                    let mut run_observer = observer.run_observer(r);
                    let outcome = run(&r.config, data, &dir.join("runs").join(&r.id), &options, run_observer.as_mut());
                    drop(run_observer);
                    let outcome = outcome.and_then(|_| {
                        observer.run_done(r);
                        // The tables follow every finished run, not only the whole sweep.
                        let _guard = tables.lock().unwrap_or_else(PoisonError::into_inner);
                        write_results(dir, runs).map(|_| ())
                    });
                    if let Err(e) = outcome {
                        failure.lock().unwrap_or_else(PoisonError::into_inner).get_or_insert(e);
                        return;
                    }
                }
            });
        }
    });
    write_results(dir, runs)?;
    match failure.into_inner().unwrap_or_else(PoisonError::into_inner) {
        Some(e) => Err(e),
        None => Ok(to_run),
    }
}

/// The key of a run's dataset: its data section as written.
fn data_key(r: &PlannedRun) -> String {
    format!("{:?}", r.config.config().data)
}

/// Copies a finished run beside its destination, then renames it into place: a crash never
/// leaves a folder that looks finished but is incomplete.
fn copy_run(source: &Path, run_dir: &Path) -> Result<()> {
    let mut partial = run_dir.as_os_str().to_os_string();
    partial.push(".copying");
    let partial = PathBuf::from(partial);
    if partial.exists() {
        std::fs::remove_dir_all(&partial).map_err(Error::io(&partial))?;
    }
    copy_dir(source, &partial)?;
    if run_dir.exists() {
        std::fs::remove_dir_all(run_dir).map_err(Error::io(run_dir))?;
    }
    std::fs::rename(&partial, run_dir).map_err(Error::io(run_dir))
}

/// [`Error::StaleRun`] if `run_dir` holds a run (finished or not) whose settings differ from
/// `planned`.
fn refuse_stale(run_dir: &Path, planned: &TrainConfig) -> Result<()> {
    let Some(made) = config_made(run_dir)? else { return Ok(()) };
    let (made, planned) = (made.to_value()?, planned.to_value()?);
    if made == planned {
        return Ok(());
    }
    let as_json = |v: &toml::Value| serde_json::to_value(v).map_err(Error::serialise("a run's config"));
    let differences = crate::train::field_differences(&as_json(&made)?, &as_json(&planned)?);
    Err(Error::StaleRun { path: run_dir.to_path_buf(), differences: differences.join(", ") })
}

/// The configuration a run folder's run was made with, if it has one.
fn config_made(run_dir: &Path) -> Result<Option<TrainConfig>> {
    let path = RunFolder::new(run_dir).config();
    if path.exists() { TrainConfig::from_file(&path, &[]).map(Some) } else { Ok(None) }
}

/// A finished run folder in one of `sweeps` whose configuration equals `r`'s.
fn finished_elsewhere(r: &PlannedRun, sweeps: &[PathBuf]) -> Result<Option<PathBuf>> {
    let planned = r.config.config().to_value()?;
    for sweep in sweeps {
        let Ok(entries) = std::fs::read_dir(sweep.join("runs")) else { continue };
        for entry in entries.flatten() {
            let path = entry.path();
            if !RunFolder::new(&path).is_finished() {
                continue;
            }
            if let Some(made) = config_made(&path)?
                && made.to_value()? == planned
            {
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
