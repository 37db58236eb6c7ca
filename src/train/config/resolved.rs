//! The checked configuration minus its accounting: the config as validated (its defaults
//! resolved), the steps it takes and the releases it schedules — what a method's accounting is
//! computed from ([`crate::train::method::RunAccounting`]), below the accounting itself.

use super::{ActiveRelease, Engine, Method, StopRule, TrainConfig, typed_down};
use crate::arch::ModelSpec;
use crate::error::{Error, Result};
use crate::noise::NoiseSeed;
use crate::train::releases::{ReleaseKind, ScheduledRelease};

/// A validated configuration's facts that do not depend on its accounting (read-only; made by
/// [`TrainConfig::validate`], reached through [`crate::train::ValidConfig`]).
#[derive(Debug, Clone)]
pub struct Resolved {
    pub(super) config: TrainConfig,
    pub(super) given: TrainConfig,
    pub(super) notes: Vec<String>,
    pub(super) max_steps: usize,
    pub(super) stop_rule: StopRule,
    pub(super) releases: Vec<ScheduledRelease>,
    pub(super) model: Option<ModelSpec>,
}

impl Resolved {
    /// The configuration as given, with overrides applied and the defaults that follow the
    /// privacy settings resolved (count noise, the learning rate after k): what the run's
    /// `config.toml` records.
    #[must_use]
    pub fn config(&self) -> &TrainConfig {
        &self.config
    }

    /// The configuration as given, before the defaults that follow the privacy settings were
    /// resolved: what a run of it at another ε starts from (a private search's candidates
    /// resolve their counts' noise for their own ε, not the base's).
    #[must_use]
    pub fn given(&self) -> &TrainConfig {
        &self.given
    }

    /// What validation resolved otherwise than the config's documentation says it usually does
    /// (count noise that could not follow the budget), for the operator.
    #[must_use]
    pub fn notes(&self) -> &[String] {
        &self.notes
    }

    /// The algorithm.
    #[must_use]
    pub fn method(&self) -> Method {
        self.config.privacy.method
    }

    /// The δ every ε of the run is computed at: the largest float not above the decimal the
    /// config gave (TOML's `1e-5` is a float a little above 10⁻⁵; at a larger δ an ε would be
    /// understated).
    #[must_use]
    pub fn delta(&self) -> f64 {
        typed_down(self.config.privacy.delta)
    }

    /// k = B_norm/C², the worst-case number of steps.
    #[must_use]
    pub fn worst_case_steps(&self) -> usize {
        self.config.privacy.worst_case_steps
    }

    /// Steps to run.
    #[must_use]
    pub fn max_steps(&self) -> usize {
        self.max_steps
    }

    /// The noisy statistics released on a schedule (each accounted in the run's guarantee).
    #[must_use]
    pub fn releases(&self) -> &[ScheduledRelease] {
        &self.releases
    }

    /// The release of `kind`, if scheduled.
    #[must_use]
    pub fn release(&self, kind: ReleaseKind) -> Option<&ScheduledRelease> {
        self.releases.iter().find(|r| r.kind == kind)
    }

    /// The architecture (for MNIST-shaped data; see [`model_for`](Self::model_for)).
    ///
    /// # Errors
    /// [`Error::Config`] naming `model` if the config names no model (a library run of your
    /// own burn model).
    pub fn model(&self) -> Result<&ModelSpec> {
        self.model.as_ref().ok_or_else(|| {
            Error::config(
                "model",
                "the config names no model (give model.preset or model.layers), or its model.layers do not fit \
                     28 × 28 single-channel images and need the data's shape: use model_for",
            )
        })
    }

    /// The model for a dataset's examples (`shape`, `classes`): [`model`](Self::model) adapted
    /// to them ([`TrainConfig::model_spec_for`]).
    ///
    /// # Errors
    /// A model that does not fit that shape, naming the field.
    pub fn model_for(&self, shape: [usize; 3], classes: usize) -> Result<ModelSpec> {
        self.config.model_spec_for(shape, classes)
    }

    /// The engine that trains `spec` ([`TrainConfig::engine_for`]).
    #[must_use]
    pub fn engine_for(&self, spec: &ModelSpec) -> Engine {
        self.config.engine_for(spec)
    }

    /// Where the noise comes from.
    #[must_use]
    pub fn noise_seed(&self) -> NoiseSeed {
        self.config.train.seed.map_or(NoiseSeed::Os, NoiseSeed::Fixed)
    }

    /// The learning rate of `step` (1-based): `train.lr` up to k, then `train.lr_after_k` if given.
    #[must_use]
    pub fn lr_at(&self, step: usize) -> f64 {
        let t = &self.config.train;
        match t.lr_after_k {
            Some(lr) if step > self.worst_case_steps() => lr,
            _ => t.lr,
        }
    }
    /// The stopping rule, its default (the method's) resolved.
    #[must_use]
    pub fn stop_rule(&self) -> StopRule {
        self.stop_rule
    }
    /// Whether the released active count is the exact one (the run is then not private).
    #[must_use]
    pub fn exact_counts(&self) -> bool {
        self.config.release.active_count == ActiveRelease::ExactNonPrivate
    }
}
