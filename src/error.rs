//! The library's typed error: every variant names what is wrong and how to fix it.

use std::path::PathBuf;

use thiserror::Error;

use crate::accounting::AccountingError;

/// Errors of the training library (accounting has its own [`AccountingError`], wrapped here).
/// Non-exhaustive: later versions may say more precisely what failed.
#[derive(Debug, Error)]
#[non_exhaustive]
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
    /// Several configuration problems, each an [`Error::Config`] (all of them, so that one
    /// round of edits fixes the config).
    #[error("{} problems in the configuration:\n{}", .0.len(), listed(.0))]
    ConfigProblems(Vec<Error>),
    /// A model cannot be trained privately as it is (a layer without per-example gradients, a
    /// forward that mixes the examples of a batch, a model that fails on the data's shape).
    #[error("model: {0}")]
    Model(String),
    /// A dataset file is missing, truncated or malformed.
    #[error("dataset file {}: {message}", path.display())]
    Data {
        /// The offending file.
        path: PathBuf,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// An I/O error on a named file.
    #[error("{}: {error}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error (shown in the message, not repeated as a cause).
        error: std::io::Error,
    },
    /// A per-example gradient was NaN or infinite and the policy is to stop.
    #[error(
        "non-finite gradient for training example {example} at step {step}: nothing from this step was released. \
         Lower the learning rate, or remove privacy.on_nonfinite = \"error\" (the default, \"skip\", drops such \
         examples from the step and charges them the worst case)"
    )]
    NonFiniteGradient {
        /// Index of the example in the training set.
        example: usize,
        /// The step (1-based).
        step: usize,
    },
    /// A run folder's saved state cannot be used (damaged, inconsistent, or from another run).
    #[error("run state {}: {message}", path.display())]
    RunState {
        /// The run folder or state file.
        path: PathBuf,
        /// Why it cannot be used, and what to do.
        message: String,
    },
    /// Training state that should be consistent is not (a bug or a damaged checkpoint).
    #[error("inconsistent training state: {0}")]
    State(String),
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
        /// The differing fields, e.g. `privacy.worst_case_steps: 200 -> 300`.
        differences: String,
    },
    /// Something would need more memory than the limit allows; nothing was allocated.
    #[error(
        "{what} would need {:.1} GiB, more than the limit of {:.1} GiB; nothing was allocated. {fix}",
        *needed as f64 / GIB, *limit as f64 / GIB
    )]
    TooLarge {
        /// What would be allocated.
        what: String,
        /// Bytes it would need.
        needed: u64,
        /// The limit in bytes.
        limit: u64,
        /// How to make it fit.
        fix: String,
    },
    /// A file dpgd writes or reads back — a model (`model.safetensors`, `model.bpk`), a result
    /// or record file, a plot — could not be written, or does not hold what it should.
    #[error("{}: {message}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// What is wrong with it, and what to do.
        message: String,
    },
    /// A model's parameters do not match what they are read from or written to: a count or
    /// shape that differs, a parameter without a gradient (not on an autodiff device), a value
    /// the device cannot give back.
    #[error("model parameters: {0}")]
    Parameters(String),
    /// A value dpgd writes (a state's metadata, a config, a record row, a report) does not
    /// serialise: a bug, not bad input.
    #[error("{what} does not serialise: {message}")]
    Serialise {
        /// What was being written.
        what: &'static str,
        /// The serialiser's message.
        message: String,
    },
    /// The environment failed (e.g. the operating system's random source).
    #[error("{0}")]
    Environment(String),
    /// Another process of a data-parallel run failed or left it ([`crate::collective`]): this
    /// one stops too, naming that rank.
    #[error("{0}")]
    Collective(String),
}

const GIB: f64 = (1u64 << 30) as f64;

/// Result type of the library.
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// An [`Error::Io`] for `path`.
    pub fn io(path: impl Into<PathBuf>) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |error| Error::Io { path, error }
    }

    /// An [`Error::Config`] for `field`.
    pub fn config(field: impl Into<String>, message: impl Into<String>) -> Error {
        Error::Config { field: field.into(), message: message.into() }
    }

    /// An [`Error::File`] for `path`.
    pub fn file(path: impl Into<PathBuf>, message: impl Into<String>) -> Error {
        Error::File { path: path.into(), message: message.into() }
    }

    /// An [`Error::Serialise`] of `what`.
    pub fn serialise(what: &'static str) -> impl FnOnce(serde_json::Error) -> Error {
        move |e| Error::Serialise { what, message: e.to_string() }
    }
}

/// Errors one per line, indented.
fn listed(errors: &[Error]) -> String {
    errors.iter().map(|e| format!("  - {e}")).collect::<Vec<_>>().join("\n")
}
