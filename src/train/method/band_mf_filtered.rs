//! BandMF with individual filtering ([`super::Method::BandMfFiltered`]): BandMF's correlated
//! noise ([`super::band_mf`]) with the individual Rényi filter of Feldman & Zrnic 2021 in place
//! of sampling — a per-example filter for correlated noise.
//!
//! **The mechanism.** Example i is in partition i mod b; step t computes every active example
//! of partition (t − 1) mod b, clips each to min(‖g‖, C, √(B − spentᵢ)), charges it the squared
//! norm of its clipped gradient and drops it once its budget B = k·C² (k full participations,
//! `privacy.worst_case_steps`) is spent; the exact sum gets BandMF's noise wₜ, the step's row of
//! C⁻¹z, and is divided by the partition's size.
//!
//! **The guarantee.** The noisy sums are a streaming post-processing of C·G + Z, one row per
//! step (C⁻¹ is lower-triangular, so sums 1 … t are a function of rows 1 … t, and back). An
//! example takes part at steps at least b apart, so row t holds at most one of its
//! participations, s, and moves between neighbours by C_{t,s}·ḡᵢ,ₛ: each row is a Gaussian
//! mechanism whose sensitivity for example i is fixed by step s ≤ t. Its Rényi costs over the
//! rows s … s + b − 1 add up to ‖C_{:,s}‖²·‖ḡᵢ,ₛ‖²/(σ²C²)·α/2 ≤ ‖ḡᵢ,ₛ‖²/(σ²C²)·α/2, because
//! every column of C has norm at most 1 — which is what step s charges, in full, before any of
//! those rows is released. The individual filter (Feldman & Zrnic 2021, Thm 4.5) then keeps
//! every example within k full Gaussian steps of sensitivity C: the guarantee of full-batch GD
//! with k steps ([`super::full_batch`]), releases composed in, tiers as its. No amplification
//! by sampling is claimed (whether it combines with the filter per example is open).

use std::sync::Arc;

use super::band_mf::{banded_rule, bands_of, correlated_report, partition_flags, partition_size};
use super::full_batch::FullBatch;
use super::{RunAccounting, StepRule, TrainingMethod};
use crate::accounting::event::DpEvent;
use crate::accounting::{Conversion, GaussianDp, Rdp};
use crate::error::{Error, Result};
use crate::noise::{NoiseSampler, NoiseSeed};
use crate::train::config::{Resolved, TrainConfig};
use crate::train::privacy::{Accounting, RunSession};
use crate::train::releases::ScheduledRelease;
use crate::train::tiers::Tier;

/// BandMF with individual filtering.
pub(super) struct BandMfFiltered;

impl TrainingMethod for BandMfFiltered {
    fn describe(&self) -> &'static str {
        "BandMF with individual filtering (banded correlated noise, partitions in turn, no sampling)"
    }
    fn drops_exhausted_examples(&self) -> bool {
        true
    }
    fn calibrate(&self, config: &TrainConfig, releases: &[ScheduledRelease]) -> Result<Option<Arc<dyn RunAccounting>>> {
        Ok(Some(Arc::new(FilteredBands::calibrate(config, releases)?)))
    }
    fn step_rule(&self, cfg: &Resolved, sigma: Option<f64>) -> Box<dyn StepRule> {
        banded_rule(cfg, sigma)
    }
}

/// Full-batch GD's accounting over k participations, on b partitions taken in turn.
#[derive(Debug, Clone)]
pub struct FilteredBands {
    bands: usize,
    inner: FullBatch,
}

impl FilteredBands {
    /// σ and the accounting, after refusing the discrete Gaussian (the banded noise is the
    /// continuous one) and bands out of range.
    ///
    /// # Errors
    /// As [`FullBatch::calibrate`], and those refusals (named).
    pub fn calibrate(config: &TrainConfig, releases: &[ScheduledRelease]) -> Result<Self> {
        let p = &config.privacy;
        let bands = bands_of(config, config.train.max_steps.unwrap_or(0).max(p.worst_case_steps))?;
        if p.noise != NoiseSampler::Gaussian {
            return Err(Error::config(
                "privacy.noise",
                "the banded noise is the continuous Gaussian, correlated across steps; use noise = \"gaussian\" with \
                 method = \"bandmf-filtered\"",
            ));
        }
        Ok(Self { bands, inner: FullBatch::calibrate(config, releases)? })
    }

    /// The most participations of any example in the first `step` steps.
    fn participations(&self, step: usize) -> usize {
        step.div_ceil(self.bands)
    }
}

impl RunAccounting for FilteredBands {
    fn sigma(&self) -> f64 {
        self.inner.sigma()
    }
    fn epsilon(&self, cfg: &Resolved) -> Option<f64> {
        self.inner.epsilon(cfg)
    }
    fn headline_epsilon(&self, cfg: &Resolved) -> Option<f64> {
        self.inner.headline_epsilon(cfg)
    }
    /// At most ⌈step/b⌉ participations (never more than the budget's k).
    fn epsilon_through(&self, cfg: &Resolved, step: usize) -> Option<f64> {
        self.inner.epsilon_through(cfg, self.participations(step))
    }
    fn event(&self) -> Option<DpEvent> {
        self.inner.event()
    }
    fn rdp(&self) -> Option<Rdp> {
        self.inner.rdp()
    }
    fn guarantee(&self) -> Option<GaussianDp> {
        self.inner.guarantee()
    }
    fn b_norm(&self) -> Option<f64> {
        self.inner.b_norm()
    }
    fn ledger_budget(&self) -> Option<f64> {
        self.inner.ledger_budget()
    }
    fn ledger_unit(&self) -> String {
        self.inner.ledger_unit()
    }
    fn spent_epsilon(&self, cfg: &Resolved, spent: f64) -> Option<f64> {
        self.inner.spent_epsilon(cfg, spent)
    }
    fn tiers(&self) -> &[Tier] {
        self.inner.tiers()
    }
    fn tier_rdp(&self, tier: usize) -> Option<Rdp> {
        self.inner.tier_rdp(tier)
    }
    fn has_session(&self) -> bool {
        self.inner.has_session()
    }
    /// Every example of the step's partition; divided by the partition's size.
    fn sample(&self, step: usize, n: usize, _seed: NoiseSeed) -> Result<(Option<Vec<bool>>, f64)> {
        Ok((Some(partition_flags(n, step, self.bands)), partition_size(n, step, self.bands) as f64))
    }
    fn sample_with(&self, step: usize, n: usize, _rng: &mut rand_chacha::ChaCha20Rng) -> Option<Vec<bool>> {
        Some(partition_flags(n, step, self.bands))
    }
    fn via(&self, conversion: Conversion) -> String {
        format!("the individual filter over banded correlated noise and {conversion}")
    }
    fn report(
        &self,
        cfg: &Resolved,
        session: Option<&RunSession>,
        examples: usize,
        steps_run: usize,
    ) -> Result<Option<Accounting>> {
        let Some(mut a) = self.inner.report(cfg, session, examples, steps_run)? else { return Ok(None) };
        let (b, k) = (self.bands, cfg.worst_case_steps());
        a.guarantee = format!(
            "BandMF with individual filtering: the examples are split into {b} partitions taken in turn (example i in \
             partition i mod {b}); each step clips every active example of its partition to min(norm, C, sqrt(budget \
             left)), charges it its clipped squared norm, and adds to the exact sum the step's row of C^-1 z, C \
             lower-triangular with {b} bands and columns of norm at most 1. The sums are a streaming post-processing of \
             C G + Z; each row moves by at most one participation of an example, and a participation's Renyi costs \
             over its {b} rows add up to at most what it is charged, so the individual filter (Feldman & Zrnic 2021, \
             Thm 4.5) keeps every example within {k} full Gaussian steps of sensitivity C: {}",
            a.guarantee
        );
        a.rests_on.insert(
            "correlation".into(),
            "C's Toeplitz coefficients scaled below unit norm (every column's squared norm at most 1 in the floats \
             used); an example's participations b steps apart, so no row holds two of them; the charge of a \
             participation made in full at its step, before any of its rows is released"
                .into(),
        );
        a.correlated = Some(correlated_report(
            cfg,
            b,
            k,
            format!(
                "example i (its row in the training split) is in partition i mod {b}; step t computes every active \
                 example of partition (t - 1) mod {b}, no sampling; `rounds` is the budget's full participations"
            ),
        ));
        Ok(Some(a))
    }
}
