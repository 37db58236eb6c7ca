//! What a run is given beyond its config (its options) and what it reports (its summary).

use std::path::Path;

use crate::error::Result;
use crate::train::folder::{RunFolder, read_json};
use crate::train::outputs::RunResult;
use crate::train::privacy::PrivacyReport;

/// Options that are not part of the run's identity.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Worker threads, overriding `train.threads` (e.g. when a sweep trains runs side by side).
    pub threads: Option<usize>,
    /// Stop after this many steps in this invocation (the run can be resumed later).
    pub stop_after: Option<usize>,
    /// The run is one candidate of a private search, its folder inside the search's
    /// confidential half ([`RunFolder::candidate`]).
    pub candidate: bool,
}

/// What a finished (or stopped) run reports.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSummary {
    /// The run folder.
    pub dir: std::path::PathBuf,
    /// Steps completed.
    pub steps: usize,
    /// Whether the run finished (its files are written); false if it stopped on `stop_after`.
    pub finished: bool,
    /// `result.json` (None while unfinished).
    pub result: Option<RunResult>,
    /// `privacy.json` (None while unfinished).
    pub privacy: Option<PrivacyReport>,
}

impl RunSummary {
    /// The summary of a finished run, read from its folder.
    ///
    /// # Errors
    /// A missing or malformed `result.json` or `privacy.json`, named.
    pub fn read(dir: &Path) -> Result<Self> {
        Self::read_folder(&RunFolder::new(dir))
    }

    /// As [`read`](Self::read), from `folder`.
    ///
    /// # Errors
    /// As [`read`](Self::read).
    pub fn read_folder(folder: &RunFolder) -> Result<Self> {
        let dir = folder.root();
        let result: RunResult = read_json(&folder.result())?;
        let privacy: PrivacyReport = read_json(&folder.privacy())?;
        Ok(Self {
            dir: dir.into(),
            steps: result.steps_run,
            finished: true,
            result: Some(result),
            privacy: Some(privacy),
        })
    }
}
