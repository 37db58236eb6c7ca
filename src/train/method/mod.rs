//! The training methods. `privacy.method` names one ([`Method`]); each is one file here
//! implementing [`TrainingMethod`], registered on one line of [`Method::training`]. A method
//! owns what it does: its rules for steps and stopping, its calibration, and the accounting its
//! guarantee rests on ([`RunAccounting`]: σ, which examples a step computes and sums, the
//! divisor, the ledger's budget, the DP event, ε, and its part of `privacy.json`), and what each
//! step does with its exact clipped sum ([`StepRule`]: the noise it adds — its distribution, its
//! stream, any state such as a correlated-noise buffer — and the update of θ). The config's
//! checks, the trainer and the reports ask the method; nothing else matches on which one runs.
//!
//! **Adding a method** is one file implementing [`TrainingMethod`] (its accounting is one of the
//! two families here, [`full_batch`] and [`poisson`], or a [`RunAccounting`] of its own; its
//! noise and update [`IndependentNoise`] or a [`StepRule`] of its own) plus one [`Method`] name
//! and its line in [`Method::training`].

mod band_mf;
mod band_mf_filtered;
mod dp_sgd;
mod dp_sgd_individual;
pub mod factorization;
mod filtered_gd;
pub mod full_batch;
mod non_private;
mod plain_gd;
pub mod poisson;
mod registry;

use std::fmt::Debug;
use std::sync::Arc;

pub use super::config::Method;
use super::config::{PrivacyConfig, Resolved, StopRule, TrainConfig, field, typed_down};
use super::privacy::{Accounting, RunSession};
use super::releases::ScheduledRelease;
use super::tiers::Tier;
use crate::accounting::event::{DpEvent, RdpAccountant};
use crate::accounting::filter::LedgerSlot;
use crate::accounting::{Conversion, GaussianDp, Rdp, positive};
use crate::error::{Error, Result};
use crate::noise::{NoiseSampler, NoiseSeed, Stream};
use crate::train::update::{ClippedSum, UpdateRule, apply_update};
pub(crate) use band_mf::MAX_BANDS;

/// What a training method does, as the rest of the crate asks it.
pub trait TrainingMethod: Sync {
    /// The method in words, for run output.
    fn describe(&self) -> &'static str;
    /// Whether it clips and adds noise (everything but the non-private reference).
    fn is_private(&self) -> bool {
        true
    }
    /// Whether each step works on a Poisson sample of rate `privacy.sample_rate` (which the
    /// config must then give, and may not give otherwise).
    fn samples(&self) -> bool {
        false
    }
    /// Whether a per-example ledger drops examples whose budgets are spent, so that the run
    /// may go on past `privacy.worst_case_steps` (up to `train.max_steps`); otherwise a private
    /// run takes exactly `privacy.worst_case_steps` steps.
    fn drops_exhausted_examples(&self) -> bool {
        false
    }
    /// Whether the adaptive stopping rule (noisy training accuracy from step k on, [FZ21] §5.1)
    /// applies, and is the default.
    ///
    /// [FZ21]: https://arxiv.org/abs/2008.11193
    fn chooses_best_step(&self) -> bool {
        false
    }
    /// For a method that may run past `privacy.worst_case_steps` = k: what its first k steps
    /// are on their own, and what it adds after them, in words — the end summary compares the
    /// model at step k with the one returned (`None`: the run ends at k).
    fn beyond_k(&self) -> Option<(&'static str, &'static str)> {
        None
    }
    /// The learning rate of the steps after k, as a share of `train.lr`, when
    /// `train.lr_after_k` and `stopping.sigma` are absent (`None`: `train.lr` throughout).
    fn default_lr_after_k(&self) -> Option<f64> {
        None
    }
    /// The stopping rule when `stopping.rule` is absent.
    fn default_stop_rule(&self) -> StopRule {
        if self.chooses_best_step() { StopRule::BestTrainAccuracy } else { StopRule::MaxSteps }
    }
    /// The conversion to (ε, δ) when `privacy.conversion` is absent (`None`: the config's
    /// default, the exact curve of Gaussian DP).
    fn default_conversion(&self) -> Option<Conversion> {
        None
    }
    /// σ calibrated to the config's target (or its σ, checked) and everything the run's
    /// guarantee rests on, for a config whose fields each passed their checks and whose noisy
    /// counts are scheduled as `releases`; `None` for a method without a guarantee.
    ///
    /// # Errors
    /// What the method cannot account for, named by the config field to change.
    fn calibrate(&self, config: &TrainConfig, releases: &[ScheduledRelease]) -> Result<Option<Arc<dyn RunAccounting>>>;
    /// What each step does with its exact clipped sum — the noise it adds and the update of θ —
    /// for the run of `cfg` at noise multiplier `sigma` (`None`: no noise). By default
    /// [`IndependentNoise`]: N(0, σ²C²) per coordinate, independent across steps. A method with
    /// another noise (correlated across steps) or another update returns its own rule here; its
    /// state is saved with the run's after every step.
    fn step_rule(&self, cfg: &Resolved, sigma: Option<f64>) -> Box<dyn StepRule> {
        Box::new(IndependentNoise::for_run(cfg, sigma))
    }
}

/// What a step does with its exact clipped sum: adds the method's noise (its distribution, its
/// stream, any state such as a correlated-noise buffer) and updates θ. One per run
/// ([`TrainingMethod::step_rule`]); the trainer saves its [`state`](Self::state) with θ after
/// every step and [`restore`](Self::restore)s it on a resume, so a resumed run continues it
/// bit for bit.
pub trait StepRule: Send + Sync {
    /// Step `step`'s noise added to `sum` once, and θ updated by `update` (learning rate,
    /// divisor, momentum).
    ///
    /// # Errors
    /// A failing random source, or a noise the sampler does not support.
    fn apply(&mut self, step: usize, theta: &mut [f32], sum: ClippedSum, update: UpdateRule) -> Result<()>;
    /// The state a resume needs (empty: none).
    fn state(&self) -> &[f32];
    /// A saved state back.
    fn restore(&mut self, state: Vec<f32>);
    /// Whether each step's noise is drawn for that step alone, so that a step's noisy sum is its
    /// clipped sum plus one independent draw (a one-run audit reads it back per step); false for
    /// noise correlated across steps.
    fn noise_is_independent(&self) -> bool {
        true
    }
    /// The noise the next step's needs from earlier steps (correlated noise: BandMF's last
    /// b − 1 noise vectors, newest first, concatenated; empty: none), saved with the state.
    fn noise_state(&self) -> Vec<f64> {
        Vec::new()
    }
    /// Saved noise back, for step `next` (checked against θ's length at that step).
    ///
    /// # Errors
    /// Noise for a rule that keeps none.
    fn restore_noise(&mut self, _next: usize, noise: Vec<f64>) -> Result<()> {
        if noise.is_empty() {
            Ok(())
        } else {
            Err(Error::State(format!("{} values of noise for a method whose noise is independent", noise.len())))
        }
    }
}

/// Independent noise: step t adds N(0, σ²C²) per coordinate (or the discrete Gaussian) drawn
/// from its own stream of the run's noise seed, then θ ← θ − η·ĝ (heavy-ball momentum with
/// `train.momentum`, whose buffer is the rule's state): [`apply_update`].
#[derive(Debug, Clone)]
pub struct IndependentNoise {
    sampler: NoiseSampler,
    std: f64,
    seed: NoiseSeed,
    velocity: Vec<f32>,
}

impl IndependentNoise {
    /// The rule of `cfg`'s run at noise multiplier `sigma` (std σC; none without σ).
    #[must_use]
    pub fn for_run(cfg: &Resolved, sigma: Option<f64>) -> Self {
        let p = &cfg.config().privacy;
        Self { sampler: p.noise, std: sigma.map_or(0.0, |s| s * p.clip), seed: cfg.noise_seed(), velocity: Vec::new() }
    }
}

impl StepRule for IndependentNoise {
    fn apply(&mut self, step: usize, theta: &mut [f32], sum: ClippedSum, update: UpdateRule) -> Result<()> {
        let mut rng = self.seed.rng(Stream::update(step))?;
        apply_update(theta, &mut self.velocity, sum, (self.sampler, self.std), update, &mut rng)
    }
    fn state(&self) -> &[f32] {
        &self.velocity
    }
    fn restore(&mut self, state: Vec<f32>) {
        self.velocity = state;
    }
}

/// `event`'s Rényi DP at the orders of
/// [`dp_accounting_orders`](crate::accounting::subsampled::dp_accounting_orders), rounded up
/// (`None` if the RDP accountant does not take it).
pub(crate) fn rdp_of(event: &DpEvent) -> Option<Rdp> {
    let orders = crate::accounting::subsampled::dp_accounting_orders();
    let rdp = RdpAccountant::new(orders.clone(), Conversion::Cks).ok()?.rdp_of(event).ok()?;
    Rdp::new(orders, rdp).ok()
}

/// The accounting of one private run, fixed at validation: what its guarantee rests on, and
/// the rules of its steps that the guarantee depends on.
pub trait RunAccounting: Debug + Send + Sync {
    /// The noise multiplier σ (the noise of the summed gradients is N(0, σ²C²) per coordinate).
    fn sigma(&self) -> f64;
    /// The whole run's ε at `cfg`'s δ under its conversion, rounded up.
    fn epsilon(&self, cfg: &Resolved) -> Option<f64>;
    /// The ε that holds for every example: [`epsilon`](Self::epsilon), or with personalized
    /// budgets the loosest tier's (each example holds a tier).
    fn headline_epsilon(&self, cfg: &Resolved) -> Option<f64> {
        let own = self.epsilon(cfg)?;
        Some(self.tiers().iter().map(|t| t.guaranteed_epsilon).reduce(f64::max).unwrap_or(own))
    }
    /// The ε at `cfg`'s δ of the run's first `step` steps with the releases made by then,
    /// rounded up.
    fn epsilon_through(&self, cfg: &Resolved, step: usize) -> Option<f64>;
    /// The run's composition as data — training and every release — for any accountant that
    /// takes it; `None` where the guarantee is not a fixed composition's (a filter's at one
    /// order).
    fn event(&self) -> Option<DpEvent>;
    /// The whole run's Rényi DP curve, training and every release, at the orders of
    /// [`dp_accounting_orders`](crate::accounting::subsampled::dp_accounting_orders), rounded
    /// up: what a private hyperparameter search composes ([`crate::sweep::search`]). By default
    /// [`event`](Self::event)'s curve; `None` where the run has no guarantee.
    fn rdp(&self) -> Option<Rdp> {
        rdp_of(&self.event()?)
    }
    /// The whole run's Gaussian-DP guarantee, where it has one.
    fn guarantee(&self) -> Option<GaussianDp> {
        None
    }
    /// The per-example budget B_norm = k·C² of full-batch GD, where the run has one.
    fn b_norm(&self) -> Option<f64> {
        None
    }
    /// Each example's budget in the ledger that clips and drops it (`None`: the clip is C
    /// alone and no ledger stops examples).
    fn ledger_budget(&self) -> Option<f64>;
    /// The ε at `cfg`'s δ, rounded up, of an example whose gradients are fixed — not chosen by
    /// the data, as an audit's canary's are — and that spent `spent` of its ledger over the whole
    /// run (with every release charged to it). For such an example the ledger's charge is the
    /// exact sensitivity of each step it took part in, so what it spent is its guarantee; an
    /// example whose gradients depend on the data holds its budget's ([FZ21] Thm 4.5), not its
    /// spent's. `None` where the method has no such conversion.
    ///
    /// [FZ21]: https://arxiv.org/abs/2008.11193
    fn spent_epsilon(&self, _cfg: &Resolved, _spent: f64) -> Option<f64> {
        None
    }
    /// What the ledger's budget and charges measure, in words.
    fn ledger_unit(&self) -> String;
    /// The budget and guarantee of each tier of `privacy.budgets`, in its order (empty without
    /// personalized budgets): σ stays the run's, each tier's budget is the largest whose
    /// guarantee, composed with everything else the run releases, is within the tier's ε
    /// ([`crate::train::tiers`]).
    fn tiers(&self) -> &[Tier] {
        &[]
    }
    /// Tier `tier`'s whole-run Rényi DP curve — training at the tier's budget and every
    /// release — at the orders [`rdp`](Self::rdp) uses, rounded up: what a private search
    /// composes for that tier's examples. `None` without that tier.
    fn tier_rdp(&self, _tier: usize) -> Option<Rdp> {
        None
    }
    /// Whether training and the noisy counts answer through one privacy session
    /// ([`RunSession`]) that the trainer opens.
    fn has_session(&self) -> bool {
        false
    }
    /// The sampling rate of a run whose steps sample.
    fn sample_rate(&self) -> Option<f64> {
        None
    }
    /// Step `step`'s Poisson sample of the `n` examples (`None`: every active example) from the
    /// run's noise `seed`, and the divisor of its noisy sum.
    ///
    /// # Errors
    /// A failing random source.
    fn sample(&self, _step: usize, n: usize, _seed: NoiseSeed) -> Result<(Option<Vec<bool>>, f64)> {
        Ok((None, n as f64))
    }
    /// Which of `n` others (an audit's canaries) a step of this method's sampling includes,
    /// drawn from `rng` (`None`: every one). By default a Poisson sample at
    /// [`sample_rate`](Self::sample_rate); a method that samples otherwise says how here, so
    /// that its canaries take part as its examples do.
    fn sample_with(&self, _step: usize, n: usize, rng: &mut rand_chacha::ChaCha20Rng) -> Option<Vec<bool>> {
        self.sample_rate().map(|q| crate::train::sgd::poisson_sample(n, q, rng))
    }
    /// Which examples a step computes, charges and sums, given its `sample`.
    fn selection<'s>(&'s self, sample: Option<&'s [bool]>) -> Selection<'s> {
        sample.map_or(Selection::All, Selection::Sample)
    }
    /// How the guarantee is reached, for the one-line summary ("via …").
    fn via(&self, conversion: Conversion) -> String {
        conversion.to_string()
    }
    /// The neighbouring relation as the guarantee states it, for the one-line summary.
    fn neighbours(&self, cfg: &Resolved) -> String {
        cfg.config().privacy.neighbours.to_string()
    }
    /// The accounting part of `privacy.json` after `steps_run` steps on `examples` examples
    /// (`None` without the session a method with one needs).
    ///
    /// # Errors
    /// If the guarantee cannot be recomputed (never for a validated config).
    fn report(
        &self,
        cfg: &Resolved,
        session: Option<&RunSession>,
        examples: usize,
        steps_run: usize,
    ) -> Result<Option<Accounting>>;
}

/// What a private config asks for: a noise multiplier σ, or σ calibrated to a target ε at δ
/// (each the largest float not above the decimal typed, so the run's ε is at most the typed
/// value exactly).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Target {
    /// `privacy.sigma`, positive.
    Sigma(f64),
    /// `privacy.epsilon` and `privacy.delta`, read down.
    Epsilon {
        /// ε, positive.
        epsilon: f64,
        /// δ.
        delta: f64,
    },
}

impl Target {
    /// The target `p` gives: exactly one of ε and σ.
    ///
    /// # Errors
    /// Both or neither given, or a value that is not positive (named).
    pub fn of(p: &PrivacyConfig) -> Result<Self> {
        match (p.epsilon, p.sigma) {
            (Some(_), Some(_)) => Err(Error::config(
                "privacy.sigma",
                "give either privacy.epsilon or privacy.sigma, not both (on the command line, --unset one of them)",
            )),
            (None, None) => Err(Error::config("privacy.epsilon", "give a target privacy.epsilon (or privacy.sigma)")),
            (None, Some(s)) => Ok(Target::Sigma(positive("sigma", s).map_err(|e| field("privacy.sigma", e))?)),
            (Some(eps), None) => {
                positive("epsilon", eps).map_err(|e| field("privacy.epsilon", e))?;
                Ok(Target::Epsilon { epsilon: typed_down(eps), delta: typed_down(p.delta) })
            }
        }
    }
}

/// Which examples a step computes and sums.
#[derive(Debug, Clone, Copy)]
pub enum Selection<'s> {
    /// Every active example (full-batch GD).
    All,
    /// DP-SGD: the examples a Poisson sample includes (one flag per example), clipped to C.
    Sample(&'s [bool]),
    /// DP-SGD with individual accounting: every active example is computed and charged by the
    /// method's rule for its own clipped norm (sampled or not); the sampled ones are summed.
    ChargedSample(&'s [bool], &'s dyn ChargeRule),
}

/// How a method that charges every example at every step ([`Selection::ChargedSample`]) charges
/// one: the step's kernel hands it each example's squared gradient norm and ledger slot, and
/// sums the sampled rows within the squared norm the rule returns.
pub trait ChargeRule: std::fmt::Debug + Sync {
    /// Charges the example whose row has squared norm `squared_norm` (non-finite: the row is
    /// charged in full and never summed) from its ledger `slot`, at clip `clip`; returns the
    /// squared norm its row may add, never above what the charge paid for (0 for a non-finite
    /// row). Where the charge does not fit what the slot has left, the example pays all of it
    /// and is dropped from the next step on.
    fn charge(&self, squared_norm: f64, slot: &mut LedgerSlot<'_>, clip: f64) -> f64;
}

impl Selection<'_> {
    /// The sample's flags, one per example (`None`: every active example).
    #[must_use]
    pub fn sample(&self) -> Option<&[bool]> {
        match *self {
            Selection::All => None,
            Selection::Sample(m) | Selection::ChargedSample(m, _) => Some(m),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What each method is, in one table: a method whose answers change shows up here.
    #[test]
    fn each_method_says_what_it_does() {
        let all = Method::ALL;
        for m in all {
            let named: Method = serde_json::from_value(serde_json::json!(m.name())).unwrap();
            assert_eq!(named, m, "{} is the config's name", m.name());
        }
        let table: Vec<(bool, bool, bool, StopRule)> = all
            .iter()
            .map(|m| {
                let t = m.training();
                (t.is_private(), t.samples(), t.drops_exhausted_examples(), t.default_stop_rule())
            })
            .collect();
        use StopRule::{BestTrainAccuracy as Best, MaxSteps as Max};
        assert_eq!(
            table,
            [
                (true, false, false, Max),
                (true, false, true, Best),
                (true, true, false, Max),
                (true, true, true, Max),
                (true, true, false, Max),
                (true, false, true, Max),
                (false, false, false, Max)
            ]
        );
    }
}
