//! The library's typed error: every variant names what is wrong and how to fix it.

use std::path::PathBuf;

use thiserror::Error;

use crate::accounting::AccountingError;

/// Errors of the training library (accounting has its own [`AccountingError`], wrapped here).
#[derive(Debug, Error)]
pub enum Error {
    /// A privacy-accounting error (bad parameter, unsupported conversion, budget exceeded).
    #[error(transparent)]
    Accounting(#[from] AccountingError),
    /// A configuration field is missing, unknown or out of range.
    #[error("config field `{field}`: {message}")]
    Config {
        /// The field's dotted path, e.g. `privacy.epsilon`.
        field: String,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// A dataset file is missing, truncated or malformed.
    #[error("dataset file {}: {message}", path.display())]
    Data {
        /// The offending file.
        path: PathBuf,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// An I/O error on a named file.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A per-example gradient was NaN or infinite and the policy is to stop.
    #[error(
        "non-finite gradient for training example {example} at step {step}: nothing from this step was released; \
         lower the learning rate, or set privacy.on_nonfinite = \"skip\" to drop such examples (charged the worst case)"
    )]
    NonFiniteGradient {
        /// Index of the example in the training set.
        example: usize,
        /// The step (1-based).
        step: usize,
    },
    /// A checkpoint cannot be used to resume.
    #[error("checkpoint {}: {message}", path.display())]
    Checkpoint {
        /// The run directory or checkpoint file.
        path: PathBuf,
        /// Why it cannot be used.
        message: String,
    },
    /// A sweep's run folder holds a run made with other settings than the sweep file now gives
    /// that run (the file was edited after the run).
    #[error(
        "sweep run {}: made with other settings than the sweep file now gives it ({differences}); nothing was run. \
         Delete that folder to redo the run with the new settings, or give them their own case name or grid value",
        path.display()
    )]
    StaleRun {
        /// The run folder.
        path: PathBuf,
        /// The differing fields, e.g. `privacy.steps: 200 -> 300`.
        differences: String,
    },
    /// A burn record could not be written or read.
    #[error("model record: {0}")]
    Record(String),
}

/// Result type of the library.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An [`Error::Io`] for `path`.
    pub fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io { path, source }
    }
}
