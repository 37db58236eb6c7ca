//! The checked configuration the trainer accepts — its facts ([`Resolved`]) and its accounting —
//! and what its privacy rests on.

use std::ops::Deref;
use std::sync::Arc;

use super::Resolved;
use crate::accounting::event::DpEvent;
use crate::clip::NonFinitePolicy;
use crate::train::method::RunAccounting;
use crate::train::tiers::Tier;

/// A checked configuration: the only thing the trainer accepts. Read-only. Its facts that do
/// not depend on the accounting are a [`Resolved`] (reached through `Deref`); its accounting is
/// its method's ([`RunAccounting`]).
#[derive(Debug, Clone)]
pub struct ValidConfig {
    pub(super) resolved: Resolved,
    pub(super) privacy: Option<Arc<dyn RunAccounting>>,
}

impl Deref for ValidConfig {
    type Target = Resolved;
    fn deref(&self) -> &Resolved {
        &self.resolved
    }
}

impl ValidConfig {
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
    pub fn tiers(&self) -> &[Tier] {
        self.privacy.as_ref().map_or(&[], |p| p.tiers())
    }

    /// The audit's input canaries (`audit.input_canaries`; 0 without): rows of the training set
    /// after the run's own examples ([`crate::train::input_canaries`]).
    #[must_use]
    pub fn input_canaries(&self) -> usize {
        self.config().audit.as_ref().map_or(0, |a| a.input_canaries)
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
        self.privacy.as_ref()?.headline_epsilon(self)
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
        let c = self.config();
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
        if self.exact_counts() {
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
