//! The checked configuration the trainer accepts, and what its privacy rests on.

use std::sync::Arc;

#[allow(clippy::wildcard_imports)]
use super::*;
use crate::train::method::RunAccounting;

/// A checked configuration: the only thing the trainer accepts. Read-only.
#[derive(Debug, Clone)]
pub struct ValidConfig {
    pub(super) config: TrainConfig,
    pub(super) given: TrainConfig,
    pub(super) notes: Vec<String>,
    pub(super) privacy: Option<Arc<dyn RunAccounting>>,
    pub(super) max_steps: usize,
    pub(super) releases: Vec<ScheduledRelease>,
    pub(super) model: Option<ModelSpec>,
}

impl ValidConfig {
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
    /// Whether the run clips and adds noise (everything but `non-private`).
    #[must_use]
    pub fn is_private_method(&self) -> bool {
        self.privacy.is_some()
    }
    /// What the run's guarantee rests on, as its method accounts it (None for non-private
    /// runs).
    #[must_use]
    pub fn accounting(&self) -> Option<&dyn RunAccounting> {
        self.privacy.as_deref()
    }
    /// The noise multiplier σ (None for non-private runs).
    #[must_use]
    pub fn sigma(&self) -> Option<f64> {
        self.privacy.as_ref().map(|p| p.sigma())
    }
    /// The per-example budget B_norm = k·C² of full-batch private GD (the accounting crate's
    /// [`PrivateGd::b_norm`](crate::accounting::PrivateGd::b_norm)); None for other methods.
    #[must_use]
    pub fn b_norm(&self) -> Option<f64> {
        self.privacy.as_ref()?.b_norm()
    }
    /// Each example's budget in the ledger that clips and drops it: B_norm for private GD
    /// ([`b_norm`](Self::b_norm)), the Rényi budget at the filter's order for DP-SGD with
    /// individual accounting; None where no ledger stops examples (plain DP-SGD, non-private).
    #[must_use]
    pub fn ledger_budget(&self) -> Option<f64> {
        self.privacy.as_ref()?.ledger_budget()
    }
    /// Each tier of personalized budgets (`privacy.budgets`) with its ledger budget and
    /// guarantee; empty without them.
    #[must_use]
    pub fn tiers(&self) -> &[crate::train::tiers::Tier] {
        self.privacy.as_ref().map_or(&[], |p| p.tiers())
    }
    /// What the ledger's budget and charges measure.
    #[must_use]
    pub fn ledger_unit(&self) -> String {
        match &self.privacy {
            Some(p) => p.ledger_unit(),
            None => crate::train::method::full_batch::CLIPPED_NORM_UNIT.into(),
        }
    }
    /// The run's privacy-relevant composition as data — training and every release — for any
    /// accountant that takes it (full-batch GD, plain DP-SGD); None for non-private runs and
    /// for DP-SGD with individual accounting, whose guarantee is its filter's at one order,
    /// not a fixed composition's.
    #[must_use]
    pub fn event(&self) -> Option<DpEvent> {
        self.privacy.as_ref()?.event()
    }
    /// The ε of the whole run under `privacy.conversion` (None for non-private runs): with
    /// personalized budgets, the loosest tier's — what holds for every example, each of which
    /// holds a tier.
    #[must_use]
    pub fn epsilon(&self) -> Option<f64> {
        let own = self.privacy.as_ref()?.epsilon(self)?;
        Some(self.tiers().iter().map(|t| t.guaranteed_epsilon).reduce(f64::max).unwrap_or(own))
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
    /// The worst-case ε spent after `step` steps: for full-batch GD min(step, k)·C² per example
    /// (a public quantity) plus the releases made so far. None for non-private runs.
    #[must_use]
    pub fn epsilon_through(&self, step: usize) -> Option<f64> {
        self.privacy.as_ref()?.epsilon_through(self, step)
    }
    /// Why this run's outputs are not private (empty when they are): a non-private method, a
    /// fixed noise seed, an exact count, or a non-finite policy that aborts.
    #[must_use]
    pub fn non_private_reasons(&self) -> Vec<String> {
        let c = &self.config;
        let mut why = Vec::new();
        if !c.privacy.method.training().is_private() {
            why.push("privacy.method = \"non-private\": no clipping and no noise".to_string());
        }
        if let Some(seed) = c.train.seed {
            why.push(format!(
                "train.seed = {seed} is fixed: the noise is a public function of the seed, so it can be regenerated \
                 and subtracted from every released value (and two runs with one seed cancel each other's noise)"
            ));
        }
        if c.release.active_count == ActiveRelease::ExactNonPrivate {
            why.push(
                "release.active_count = \"exact-non-private\": the exact number of active examples is released".into(),
            );
        }
        if c.privacy.method.training().is_private() && c.privacy.on_nonfinite == NonFinitePolicy::Error {
            why.push(
                "privacy.on_nonfinite = \"error\": whether a model is released at all depends on single examples"
                    .into(),
            );
        }
        why
    }
}
