//! A run's folder: what is safe to publish and what is confidential to the operator, apart.
//!
//! ```text
//! runs/<name>/
//!   publishable/    model.safetensors model.bpk model.json config.toml privacy.json result.json
//!                   metrics.csv metrics.jsonl accuracy.png
//!   confidential/   state.bin steps.jsonl diagnostics.json budget.json budget.png
//!                   resumes.jsonl run.lock audit.json audit.png audit-inputs.json
//!                   audit-inputs.png input-canaries.json
//! ```
//!
//! `publishable/` holds only the model, the configuration, the privacy report, and numbers that
//! are noisy and accounted or measured on the held-out test set — safe to publish when
//! `privacy.json` says `"private": true`. `confidential/` holds the training state (θ and
//! every example's spent budget), exact counts, losses and timings on the training data: for
//! the operator only.
//!
//! Every file is written whole and atomically (write a temporary file, fsync, rename): a kill
//! at any instant leaves the previous version or the new one, never a torn or truncated file.

use std::path::{Path, PathBuf};

use super::outputs::{ConfidentialRow, METRICS_COLUMNS, MetricsRow};
use super::state::atomic_write;
use crate::error::{Error, Result};

/// The paths of one run's folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunFolder {
    root: PathBuf,
    /// The name of the half a run would publish: `publishable`, or `outputs` for a run whose
    /// whole folder is confidential ([`candidate`](Self::candidate)).
    released: &'static str,
}

const PUBLISHABLE_README: &str = "\
PUBLISHABLE outputs of a dpgd run: the model, its configuration, the privacy report, and numbers that
are either noisy and accounted in the run's guarantee or measured on the held-out test set.

Safe to publish exactly when privacy.json says \"private\": true (it then states the guarantee and the
neighbouring relation it holds under). A run with a fixed noise seed, an exact count or method =
non-private says \"private\": false and why.
";

const CONFIDENTIAL_README: &str = "\
CONFIDENTIAL to the operator of a dpgd run. Do not publish anything in this folder.

It holds the training state (parameters and every training example's spent privacy budget), exact
counts, losses and per-step timings on the training data, and run.lock (the process training the run). None of it is covered by the run's privacy
guarantee: step times, for example, track how many examples are still training.
";

impl RunFolder {
    /// The folder at `root`.
    #[must_use]
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into(), released: "publishable" }
    }
    /// The folder at `root` of one candidate of a private search: it lies inside the search's
    /// `confidential/` half, so the half a run would publish is named `outputs/` — nothing under
    /// `confidential/` is called publishable (the search publishes the chosen one's itself).
    #[must_use]
    pub fn candidate(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into(), released: "outputs" }
    }
    /// The folder at `root` of a run, a private search's `candidate` or not
    /// ([`RunOptions::candidate`](crate::train::RunOptions::candidate)).
    #[must_use]
    pub fn of_run(root: impl Into<PathBuf>, candidate: bool) -> Self {
        if candidate { Self::candidate(root) } else { Self::new(root) }
    }
    /// The run folder.
    #[must_use]
    pub fn root(&self) -> &Path {
        &self.root
    }
    /// `publishable/`.
    #[must_use]
    pub fn publishable(&self) -> PathBuf {
        self.root.join(self.released)
    }
    /// `confidential/`.
    #[must_use]
    pub fn confidential(&self) -> PathBuf {
        self.root.join("confidential")
    }
    /// The resolved configuration (publishable).
    #[must_use]
    pub fn config(&self) -> PathBuf {
        self.publishable().join("config.toml")
    }
    /// The privacy report; its presence marks the run finished (publishable).
    #[must_use]
    pub fn privacy(&self) -> PathBuf {
        self.publishable().join("privacy.json")
    }
    /// The result (publishable).
    #[must_use]
    pub fn result(&self) -> PathBuf {
        self.publishable().join("result.json")
    }
    /// The released metrics as CSV (publishable).
    #[must_use]
    pub fn metrics_csv(&self) -> PathBuf {
        self.publishable().join("metrics.csv")
    }
    /// The released metrics as JSON lines (publishable; the record read back on resume).
    #[must_use]
    pub fn metrics_jsonl(&self) -> PathBuf {
        self.publishable().join("metrics.jsonl")
    }
    /// The plot of the released metrics (publishable).
    #[must_use]
    pub fn plot(&self) -> PathBuf {
        self.publishable().join("accuracy.png")
    }
    /// The model as a burn record (publishable).
    #[must_use]
    pub fn model(&self) -> PathBuf {
        self.publishable().join("model.bpk")
    }
    /// The model in safetensors format, with its architecture and normalisation (publishable).
    #[must_use]
    pub fn model_safetensors(&self) -> PathBuf {
        self.publishable().join("model.safetensors")
    }
    /// The model's architecture, so the record loads without the config (publishable).
    #[must_use]
    pub fn model_spec(&self) -> PathBuf {
        self.publishable().join("model.json")
    }
    /// The training state, written every step (confidential).
    #[must_use]
    pub fn state(&self) -> PathBuf {
        self.confidential().join("state.bin")
    }
    /// Per-step exact diagnostics (confidential).
    #[must_use]
    pub fn steps(&self) -> PathBuf {
        self.confidential().join("steps.jsonl")
    }
    /// The finished run's diagnostics (confidential).
    #[must_use]
    pub fn diagnostics(&self) -> PathBuf {
        self.confidential().join("diagnostics.json")
    }
    /// One line per resume: the step it continued from and the settings a resume may change
    /// ([`super::config::RESUMABLE_FIELDS`]), so the record says what ran where (confidential).
    #[must_use]
    pub fn resumes(&self) -> PathBuf {
        self.confidential().join("resumes.jsonl")
    }
    /// A one-run audit's report (`[audit]`; confidential: it holds the coins).
    #[must_use]
    pub fn audit(&self) -> PathBuf {
        self.confidential().join("audit.json")
    }
    /// A one-run audit's plot of the canaries' scores (confidential).
    #[must_use]
    pub fn audit_plot(&self) -> PathBuf {
        self.confidential().join("audit.png")
    }
    /// A one-run audit's report on its input canaries (`audit.input_canaries`; confidential:
    /// it holds the coins).
    #[must_use]
    pub fn input_audit(&self) -> PathBuf {
        self.confidential().join("audit-inputs.json")
    }
    /// The plot of the input canaries' scores (confidential).
    #[must_use]
    pub fn input_audit_plot(&self) -> PathBuf {
        self.confidential().join("audit-inputs.png")
    }
    /// The input canaries' seed, drawn once before the first step and read on every resume
    /// (confidential: with it, the canaries and their coins are known).
    #[must_use]
    pub fn input_canaries(&self) -> PathBuf {
        self.confidential().join("input-canaries.json")
    }
    /// The per-example budget report (confidential).
    #[must_use]
    pub fn budget(&self) -> PathBuf {
        self.confidential().join("budget.json")
    }
    /// The per-example budget histogram (confidential).
    #[must_use]
    pub fn budget_plot(&self) -> PathBuf {
        self.confidential().join("budget.png")
    }
    /// Whether the run finished (its `privacy.json` exists).
    #[must_use]
    pub fn is_finished(&self) -> bool {
        self.privacy().is_file()
    }
    /// Whether the folder holds a run, finished or not.
    #[must_use]
    pub fn holds_run(&self) -> bool {
        self.config().is_file() || self.state().is_file()
    }

    /// `confidential/run.lock`: held by the process training the run.
    #[must_use]
    pub fn lock_file(&self) -> PathBuf {
        self.confidential().join("run.lock")
    }

    /// Takes the folder's exclusive lock for this process, for as long as the returned guard
    /// lives: two processes training one run would continue it with independent noise and
    /// leave two noisy versions of a step. The lock is the operating system's (`flock`), so a
    /// process that dies, however it dies, releases it.
    ///
    /// # Errors
    /// [`Error::RunState`] naming the holder (its process id and start time) when another
    /// process holds the lock; an I/O error naming the lock file.
    pub fn lock(&self) -> Result<RunLock> {
        let path = self.lock_file();
        let dir = self.confidential();
        std::fs::create_dir_all(&dir).map_err(Error::io(&dir))?;
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(Error::io(&path))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                let mut holder = String::new();
                let _ = std::io::Read::read_to_string(&mut file, &mut holder);
                let holder = holder.trim();
                return Err(Error::RunState {
                    path: self.root.clone(),
                    message: format!(
                        "another process is training this run ({}); wait for it to end or stop it, then resume",
                        if holder.is_empty() { "holder unknown" } else { holder }
                    ),
                });
            }
            Err(std::fs::TryLockError::Error(e)) => return Err(Error::io(&path)(e)),
        }
        let since = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let holder = format!("process {} since unix time {since}\n", std::process::id());
        file.set_len(0).map_err(Error::io(&path))?;
        std::io::Write::write_all(&mut file, holder.as_bytes()).map_err(Error::io(&path))?;
        self.remove_orphaned_temporaries();
        Ok(RunLock { _file: file })
    }

    /// Removes the temporary files (`NAME.PID.K.tmp`, see `atomic_write`) that processes which
    /// no longer run left behind when they were killed mid-write. Linux only (it asks `/proc`
    /// whether a process runs); elsewhere they stay, harmless.
    fn remove_orphaned_temporaries(&self) {
        if !cfg!(target_os = "linux") {
            return;
        }
        for dir in [self.publishable(), self.confidential()] {
            let Ok(entries) = std::fs::read_dir(&dir) else { continue };
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let Some(stem) = name.strip_suffix(".tmp") else { continue };
                let pid = stem.rsplit('.').nth(1).and_then(|p| p.parse::<u32>().ok());
                if pid.is_some_and(|p| p != std::process::id() && !Path::new(&format!("/proc/{p}")).exists()) {
                    let _ = std::fs::remove_file(e.path());
                }
            }
        }
    }

    /// Creates both halves, each with a README saying what it is.
    ///
    /// # Errors
    /// If a folder or README cannot be written.
    pub fn create(&self) -> Result<()> {
        for (dir, text) in [(self.publishable(), PUBLISHABLE_README), (self.confidential(), CONFIDENTIAL_README)] {
            std::fs::create_dir_all(&dir).map_err(Error::io(&dir))?;
            atomic_write(&dir.join("README.txt"), text.as_bytes())?;
        }
        Ok(())
    }
}

/// The exclusive lock on a run folder ([`RunFolder::lock`]), released when dropped.
#[derive(Debug)]
pub struct RunLock {
    _file: std::fs::File,
}

/// The released and confidential per-step records of a run, kept in memory and written whole
/// about once a second (the rows in between are kept in the training state).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Record {
    /// Released rows, steps 1, 2, … in order.
    pub metrics: Vec<MetricsRow>,
    /// Confidential rows, steps 1, 2, … in order.
    pub confidential: Vec<ConfidentialRow>,
}

impl Record {
    /// Reads a run's records (empty if there are none yet).
    ///
    /// # Errors
    /// A record file that does not parse, or whose rows are not the steps 1, 2, … in order,
    /// named.
    pub fn load(folder: &RunFolder) -> Result<Self> {
        Ok(Self {
            metrics: read_rows(&folder.metrics_jsonl(), |r: &MetricsRow| r.step)?,
            confidential: read_rows(&folder.steps(), |r: &ConfidentialRow| r.step)?,
        })
    }

    /// The rows after the first `flushed` (those not in the files yet), for the state.
    #[must_use]
    pub fn unflushed(&self, flushed: usize) -> super::state::Unflushed {
        super::state::Unflushed {
            metrics: self.metrics.get(flushed..).unwrap_or_default().to_vec(),
            confidential: self.confidential.get(flushed..).unwrap_or_default().to_vec(),
        }
    }

    /// Appends the rows a state kept that the files do not have yet (rows the files already
    /// hold are skipped: the files may have been written after the state).
    ///
    /// # Errors
    /// Rows that do not continue the record (a gap, or steps out of order), described.
    pub fn append_unflushed(&mut self, rows: super::state::Unflushed) -> std::result::Result<(), String> {
        if rows.metrics.len() != rows.confidential.len() {
            return Err("its unflushed released and confidential rows differ in number".into());
        }
        for (m, c) in rows.metrics.into_iter().zip(rows.confidential) {
            let next = self.metrics.len() + 1;
            if m.step < next {
                continue;
            }
            if m.step != next || c.step != next {
                return Err(format!("it keeps step {} but the record files end at step {}", m.step, next - 1));
            }
            self.metrics.push(m);
            self.confidential.push(c);
        }
        Ok(())
    }

    /// The last released step, if any.
    #[must_use]
    pub fn last_step(&self) -> Option<usize> {
        self.metrics.last().map(|r| r.step)
    }

    /// Writes every record file atomically: `metrics.csv` with `columns` (a subset of
    /// [`METRICS_COLUMNS`], in that order), `metrics.jsonl` and `confidential/steps.jsonl`.
    ///
    /// # Errors
    /// If a file cannot be written.
    pub fn save(&self, folder: &RunFolder, columns: &[&str]) -> Result<()> {
        // metrics.jsonl last: a resume reads it, and the files written before it are never behind it.
        atomic_write(&folder.steps(), jsonl(&self.confidential)?.as_bytes())?;
        atomic_write(&folder.metrics_csv(), metrics_csv(&self.metrics, columns).as_bytes())?;
        atomic_write(&folder.metrics_jsonl(), jsonl(&self.metrics)?.as_bytes())
    }
}

/// `metrics.csv` of `rows` with `columns` (a subset of [`METRICS_COLUMNS`], written in that
/// order).
#[must_use]
pub fn metrics_csv(rows: &[MetricsRow], columns: &[&str]) -> String {
    let keep: Vec<usize> =
        METRICS_COLUMNS.iter().enumerate().filter(|(_, c)| columns.contains(c)).map(|(i, _)| i).collect();
    let mut csv = keep.iter().map(|&i| METRICS_COLUMNS[i]).collect::<Vec<_>>().join(",") + "\n";
    for r in rows {
        let cells = r.cells();
        csv += &(keep.iter().map(|&i| cells[i].as_str()).collect::<Vec<_>>().join(",") + "\n");
    }
    csv
}

/// `rows` as JSON lines (`metrics.jsonl`, `steps.jsonl`).
///
/// # Errors
/// A row that does not serialise.
pub fn jsonl<T: serde::Serialize>(rows: &[T]) -> Result<String> {
    let mut out = String::new();
    for r in rows {
        out += &serde_json::to_string(r).map_err(Error::serialise("a record row"))?;
        out.push('\n');
    }
    Ok(out)
}

fn read_rows<T: serde::de::DeserializeOwned>(path: &Path, step: impl Fn(&T) -> usize) -> Result<Vec<T>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(Error::io(path)(e)),
    };
    let bad = |message: String| Error::RunState { path: path.into(), message };
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let row: T = serde_json::from_str(line).map_err(|e| bad(format!("line {}: {e}", i + 1)))?;
        if step(&row) != rows.len() + 1 {
            return Err(bad(format!(
                "line {} is step {}, expected step {}: the record is not this run's",
                i + 1,
                step(&row),
                rows.len() + 1
            )));
        }
        rows.push(row);
    }
    Ok(rows)
}

/// Reads a JSON file into `T`, naming the file in errors.
///
/// # Errors
/// If the file is missing or does not parse as `T`.
pub fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    let text = std::fs::read_to_string(path).map_err(Error::io(path))?;
    serde_json::from_str(&text).map_err(|e| Error::file(path, e.to_string()))
}

pub(crate) fn write_json<T: serde::Serialize>(path: &Path, value: &T) -> Result<()> {
    let text = serde_json::to_string_pretty(value).map_err(|e| Error::file(path, e.to_string()))?;
    atomic_write(path, text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::state::Unflushed;

    fn rows(steps: std::ops::RangeInclusive<usize>) -> Unflushed {
        Unflushed {
            metrics: steps.clone().map(|step| MetricsRow { step, ..MetricsRow::default() }).collect(),
            confidential: steps.map(|step| ConfidentialRow { step, ..ConfidentialRow::default() }).collect(),
        }
    }

    /// A state's unflushed rows continue the files' record: rows the files already hold (written
    /// after the state) are skipped, and a gap or a mismatch is refused.
    #[test]
    fn unflushed_rows_continue_the_record_and_a_gap_is_refused() {
        let mut record = Record::default();
        record.append_unflushed(rows(1..=3)).unwrap();
        assert_eq!(record.unflushed(1), rows(2..=3));
        record.append_unflushed(rows(2..=5)).unwrap();
        assert_eq!(record.metrics.iter().map(|r| r.step).collect::<Vec<_>>(), [1, 2, 3, 4, 5]);
        assert_eq!(record.confidential.len(), 5);
        assert_eq!(record.unflushed(5), Unflushed::default());
        let err = record.clone().append_unflushed(rows(7..=8)).unwrap_err();
        assert!(err.contains("step 7") && err.contains("end at step 5"), "{err}");
        let mut uneven = rows(6..=7);
        uneven.confidential.pop();
        assert!(record.append_unflushed(uneven).is_err());
    }
}
