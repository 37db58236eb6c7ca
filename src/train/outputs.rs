//! The files a run writes, as typed records: what goes in `publishable/` (noisy, accounted or
//! about the public test set) and what stays in `confidential/` (exact counts, losses and
//! timings on the training data).

use serde::{Deserialize, Serialize};

/// One released row of `publishable/metrics.csv` / `metrics.jsonl`: everything in it is a
/// public function of the configuration, a measurement on the held-out test set, or a noisy
/// count charged to the run's privacy session — except a column named NON_PRIVATE, which only
/// a run marked not private has.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct MetricsRow {
    /// The step (1-based).
    pub step: usize,
    /// ε of the worst case spent so far (a function of the step and the config), when private.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epsilon_so_far: Option<f64>,
    /// Test accuracy of this step's model (held-out test set), when evaluated.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub test_accuracy: Option<f64>,
    /// The released noisy number of active examples (clamped to [0, n], post-processing).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_count_noisy: Option<f64>,
    /// The released noisy training accuracy (the stopping rule's query).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub train_accuracy_noisy: Option<f64>,
    /// The EXACT number of active examples, under `release.active_count = "exact-non-private"`
    /// only: such a run is marked not private in every file.
    #[serde(default, rename = "active_count_NON_PRIVATE", skip_serializing_if = "Option::is_none")]
    pub active_count_non_private: Option<f64>,
}

/// The columns of `metrics.csv`, in order.
pub const METRICS_COLUMNS: [&str; 6] = [
    "step",
    "epsilon_so_far",
    "test_accuracy",
    "active_count_noisy",
    "train_accuracy_noisy",
    "active_count_NON_PRIVATE",
];

impl MetricsRow {
    /// The row's cells in [`METRICS_COLUMNS`] order (empty where absent).
    #[must_use]
    pub fn cells(&self) -> [String; 6] {
        let f = |v: Option<f64>, d: usize| v.map_or(String::new(), |v| format!("{v:.d$}"));
        [
            self.step.to_string(),
            f(self.epsilon_so_far, 6),
            f(self.test_accuracy, 6),
            f(self.active_count_noisy, 1),
            f(self.train_accuracy_noisy, 6),
            f(self.active_count_non_private, 0),
        ]
    }
}

/// One row of `confidential/steps.jsonl`: exact, data-dependent diagnostics for the operator.
/// Never publish it.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ConfidentialRow {
    /// The step (1-based).
    pub step: usize,
    /// Wall-clock seconds of the step (tracks the number of active examples).
    pub seconds: f64,
    /// Examples whose gradient was computed (the exact active count before the step).
    pub active_exact: usize,
    /// Examples with a non-finite gradient, skipped (charged, contributing nothing).
    pub nonfinite_skipped: usize,
    /// Mean training loss over the examples computed in this step.
    pub train_loss_mean: Option<f64>,
}

/// `publishable/result.json`: what a finished run returns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    /// Whether every released number is covered by the guarantee (see `privacy.json`).
    pub private: bool,
    /// The guarantee's ε at `delta` (None when not private).
    pub epsilon: Option<f64>,
    /// The ε this configuration is accounted for, whether or not the run is private (None for
    /// method = non-private).
    pub epsilon_of_configuration: Option<f64>,
    /// δ.
    pub delta: f64,
    /// Steps run.
    pub steps_run: usize,
    /// Whether the stopping rule ended the run before `max_steps`.
    pub stopped_early: bool,
    /// The step whose model is returned.
    pub selected_step: usize,
    /// Test accuracy of the returned model (held-out test set).
    pub test_accuracy: f64,
    /// Test accuracy after k = B_norm/C² steps: up to that step a filtered run is exactly plain
    /// private GD with the same σ, so this is plain GD's result.
    pub test_accuracy_at_k: Option<f64>,
    /// k.
    pub k: usize,
    /// The last released noisy count of active examples after step k, if any: how many
    /// examples kept training after plain GD would have stopped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_after_k_noisy: Option<ActiveAfterK>,
}

/// A released noisy active count after step k.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ActiveAfterK {
    /// The step it was released at.
    pub step: usize,
    /// The noisy count.
    pub count: f64,
}

/// `confidential/diagnostics.json`: the operator's summary of a finished run. Never publish it.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Diagnostics {
    /// What this file is.
    pub notice: String,
    /// Wall-clock seconds of every step together.
    pub seconds: f64,
    /// Non-finite gradients skipped over the run (example-steps).
    pub nonfinite_skipped: usize,
    /// Examples with budget left at the end.
    pub active_at_end: usize,
    /// Training examples.
    pub examples: usize,
    /// The device the last invocation computed on (the adapter, for a GPU backend; absent for
    /// the fast engine, on the CPU).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<String>,
}
