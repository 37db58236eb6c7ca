//! The privacy session of one training run (concurrent composition, [HSTVVXZ23]): the training
//! mechanism ([FZ21] Algorithm 3) and every scheduled noisy count answer through one
//! [`PrivacySession`] whose zCDP filter holds exactly the run's schedule. A release is charged
//! before it is computed, and a release the budget cannot pay for is refused.
//!
//! And `privacy.json`, typed ([`PrivacyReport`]): whether the run is private and why not, the
//! neighbouring relation, the noise, and the guarantee with everything it rests on.
//!
//! [HSTVVXZ23]: https://arxiv.org/abs/2309.05901
//! [FZ21]: https://arxiv.org/abs/2008.11193

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::config::{ActiveRelease, Method, PrivacyConfig, Resolved};
use super::releases::{ReleaseKind, ScheduledRelease};
use crate::accounting::event::DpEvent;
use crate::accounting::filter::ZcdpFilter;
use crate::accounting::sampling::DiscreteGaussian;
use crate::accounting::session::{Mechanism, PrivacySession};
use crate::accounting::{Conversion, Neighbours, PrivateGd, Zcdp};
use crate::clip::NonFinitePolicy;
use crate::error::{Error, Result};
use crate::noise::{NoiseSampler, NoiseSeed, Stream, gaussian};
use crate::train::tiers::Tier;

/// The run's session: its filter, the training mechanism and the scheduled releases.
pub struct RunSession {
    session: Arc<PrivacySession<ZcdpFilter>>,
    releases: Vec<(ScheduledRelease, Zcdp, Mechanism<ZcdpFilter>)>,
}

impl RunSession {
    /// Opens the session of a private run and charges the training mechanism its whole
    /// guarantee ([FZ21] Prop. 5.1: it does not depend on the number of steps). For a run
    /// resumed with releases made through step `released_through`, those are charged again.
    ///
    /// [FZ21]: https://arxiv.org/abs/2008.11193
    ///
    /// # Errors
    /// For a non-private method, or a schedule the budget cannot hold (a bug: the budget is
    /// the schedule).
    pub fn open(cfg: &Resolved, sigma: f64, released_through: usize) -> Result<Self> {
        // The training mechanism's zCDP cost: s²·B_norm/(2σ²C²), s = 1 zero-out, 2 replace-one.
        let training = private_gd(&cfg.config().privacy, sigma)?.zcdp();
        let mut costs = Vec::new();
        for r in cfg.releases() {
            let cost = r
                .through(1)
                .ok()
                .and_then(|g| g.cost_of_one())
                .ok_or_else(|| Error::State(format!("the {} release has no finite cost", r.kind.name())))?;
            costs.push((*r, cost));
        }
        // The budget is the sum of every scheduled charge, rounded up in the order the charges
        // are made, so that the filter accepts exactly the schedule (bounded: max_steps is
        // capped by validation).
        let mut budget = training;
        for step in 1..=cfg.max_steps() {
            for (r, c) in costs.iter().filter(|(r, _)| r.due(step)) {
                let _ = r;
                budget = budget.compose(*c);
            }
        }
        let session = PrivacySession::new(ZcdpFilter::new(budget));
        session.mechanism("training").query(training, || ())?;
        let releases = costs.into_iter().map(|(r, c)| (r, c, session.mechanism(r.kind.name()))).collect();
        let run = Self { session, releases };
        for step in 1..=released_through.min(cfg.max_steps()) {
            for (r, c, m) in run.releases.iter().filter(|(r, _, _)| r.due(step)) {
                let _ = r;
                m.query(*c, || ())?;
            }
        }
        Ok(run)
    }

    /// Answers every release due after `step`, in schedule order: each is charged, then
    /// `exact(kind)` is computed and returned with Gaussian noise added (the noise stream is
    /// the release's own, so a resumed run with a fixed seed draws the same noise).
    ///
    /// # Errors
    /// A refused charge, or a failing random source.
    pub fn release(
        &self,
        step: usize,
        seed: NoiseSeed,
        sampler: NoiseSampler,
        mut exact: impl FnMut(ReleaseKind) -> f64,
    ) -> Result<Vec<(ReleaseKind, f64)>> {
        let mut out = Vec::new();
        for (r, cost, m) in self.releases.iter().filter(|(r, _, _)| r.due(step)) {
            let mut rng = seed.rng(Stream::release(r.kind.stream_base(), step))?;
            let discrete = match sampler {
                NoiseSampler::DiscreteGaussian => Some(DiscreteGaussian::new(r.sigma)?),
                NoiseSampler::Gaussian => None,
            };
            let noisy = m.query(*cost, || noisy_count(exact(r.kind), r.sigma, discrete.as_ref(), &mut rng))?;
            out.push((r.kind, noisy));
        }
        Ok(out)
    }

    /// The session's budget (its filter's): every scheduled charge, rounded up.
    #[must_use]
    pub fn budget(&self) -> f64 {
        self.session.inspect(ZcdpFilter::budget)
    }

    /// ρ charged so far, per mechanism.
    #[must_use]
    pub fn charged_by_mechanism(&self) -> BTreeMap<String, f64> {
        let mut out = BTreeMap::new();
        for c in self.session.log() {
            let e = out.entry(c.mechanism).or_insert(0.0);
            *e = crate::accounting::numeric::add_up(*e, c.cost.rho());
        }
        out
    }
}

/// A count with noise of std `sigma` added: exact discrete-Gaussian noise on the integers, or
/// Gaussian noise added in f64 to the exact count. (Counts are below 2⁵³, so exact in f64; an
/// f32 count would round neighbouring counts above 2²⁴ up to 2 apart and double the
/// sensitivity.)
#[must_use]
pub fn noisy_count(
    exact: f64,
    sigma: f64,
    discrete: Option<&DiscreteGaussian>,
    rng: &mut rand_chacha::ChaCha20Rng,
) -> f64 {
    match discrete {
        Some(d) => (exact.round() as i64).saturating_add(d.sample(rng)) as f64,
        None => exact + gaussian(sigma, rng),
    }
}

/// The full-batch run of privacy settings `p` at noise multiplier `sigma`, as the accounting
/// crate accounts it (σ, C, k, neighbours).
pub(crate) fn private_gd(p: &PrivacyConfig, sigma: f64) -> Result<PrivateGd> {
    Ok(PrivateGd::new(sigma, p.clip, p.worst_case_steps as f64)?.with_neighbours(p.neighbours)?)
}

/// `privacy.json`: what a run's released files are worth.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PrivacyReport {
    /// Whether every number in `publishable/` is covered by the guarantee.
    pub private: bool,
    /// Why not (empty when private).
    pub not_private_because: Vec<String>,
    /// One line: the guarantee with δ, conversion and neighbouring relation, or NOT PRIVATE.
    pub summary: String,
    /// The algorithm.
    pub method: Method,
    /// The guarantee's ε at `delta` (None when not private).
    pub epsilon: Option<f64>,
    /// δ.
    pub delta: f64,
    /// The conversion of the guarantee to (ε, δ).
    pub conversion: Conversion,
    /// The neighbouring relation the guarantee is stated for.
    pub neighbours: NeighboursReport,
    /// Where the noise comes from.
    pub noise: NoiseReport,
    /// What the configuration is accounted for (None for method = non-private): the guarantee
    /// if the run is private, what it would be with OS-keyed noise otherwise.
    pub accounting: Option<Accounting>,
    /// The per-example ledger.
    pub ledger: LedgerReport,
    /// What happens to examples with non-finite gradients.
    pub on_nonfinite: NonFinitePolicy,
    /// How the active count is released.
    pub active_count: ActiveRelease,
    /// Steps run.
    pub steps_run: usize,
    /// A note on the test accuracies.
    pub test_accuracy_note: String,
    /// Personalized budgets (`privacy.budgets`): each tier's guarantee, and what it assumes (as
    /// `accounting`: what the run is worth if it is private).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub personalized: Option<PersonalizedReport>,
}

/// The guarantee of each tier of personalized budgets. No count of the training data is here:
/// how many examples hold a tier, and which, stay with the data owner.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PersonalizedReport {
    /// Each tier: the ε asked for, the ε reached (rounded up) at the run's δ, and its ledger
    /// budget.
    pub tiers: Vec<Tier>,
    /// What the per-tier guarantees rest on.
    pub rests_on: String,
}

/// The neighbouring relation, named and explained.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NeighboursReport {
    /// `zero-out` or `replace-one`.
    pub relation: Neighbours,
    /// What it means.
    pub meaning: String,
}

/// The noise of a run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NoiseReport {
    /// The distribution.
    pub sampler: NoiseSampler,
    /// Whether it comes from a fixed seed (then it is not private).
    pub seeded: bool,
    /// The seed, if fixed.
    pub seed: Option<u64>,
    /// The generator, in words.
    pub source: String,
    /// What floating point does to the noise and the sum it is added to (absent in runs written
    /// before it was recorded).
    #[serde(default)]
    pub floating_point: String,
}

/// The accounting of a run's configuration.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Accounting {
    /// ε at δ under the run's conversion.
    pub epsilon: Option<f64>,
    /// ε under every conversion valid for the noise (null where invalid).
    pub epsilon_by_conversion: BTreeMap<String, Option<f64>>,
    /// The target ε σ was calibrated for, if given.
    pub target_epsilon: Option<f64>,
    /// The whole run's zCDP ρ (training plus releases), rounded up (full-batch GD; None for
    /// DP-SGD, accounted in Rényi DP).
    pub rho: Option<f64>,
    /// The whole run's Gaussian-DP μ (the continuous Gaussian only).
    pub mu: Option<f64>,
    /// What the guarantee rests on, with citations, in one paragraph.
    pub guarantee: String,
    /// What each printed number rests on (theorem and assumptions), by field: `epsilon`, `mu`,
    /// `rho`, `sensitivity` (absent in runs written before it was recorded).
    #[serde(default)]
    pub rests_on: BTreeMap<String, String>,
    /// The training mechanism.
    pub training: TrainingReport,
    /// DP-SGD's sampling and Rényi accounting (absent for full-batch GD).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampling: Option<SamplingReport>,
    /// The run's composition as data (dp_accounting's `DpEvent` form: Gaussian mechanisms,
    /// Poisson sampling, repetitions, compositions), for any other accountant to check the
    /// guarantee with; absent where the guarantee is not a fixed composition's (individual
    /// accounting of DP-SGD).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<DpEvent>,
    /// Every scheduled release.
    pub releases: Vec<ReleaseReport>,
    /// The session's filter (full-batch GD; None for DP-SGD, which releases only its model).
    pub session: Option<SessionReport>,
    /// Noise correlated across steps (`bandmf`, `bandmf-filtered`): its matrix and partitions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlated: Option<CorrelatedReport>,
}

/// DP-SGD's sampling and the Rényi accounting of its steps.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SamplingReport {
    /// Poisson sampling rate q.
    pub rate: f64,
    /// The divisor of each noisy sum: q·n.
    pub expected_batch_size: f64,
    /// Steps T.
    pub steps: usize,
    /// The Rényi order at which `epsilon` is attained.
    pub rdp_order: f64,
    /// The orders searched.
    pub orders: String,
    /// How the sample is drawn.
    pub how: String,
    /// Individual accounting (`method = "sgd-filtered"`): the filter's order and budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub individual: Option<IndividualReport>,
}

/// BandMF's correlation of the noise across steps and the partitions that make it private.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CorrelatedReport {
    /// b: the bands of C and the number of partitions.
    pub bands: usize,
    /// C's Toeplitz coefficients c₀ … c_{b−1} (unit ℓ2 norm): row t of C holds c_{t−s} at
    /// column s for 0 ≤ t − s < b.
    pub coefficients: Vec<f64>,
    /// ⌈T/b⌉: the rounds of DP-SGD the run is as private as.
    pub rounds: usize,
    /// How examples are partitioned and which partition each step samples.
    pub partitions: String,
    /// The noise each step adds, in words.
    pub noise: String,
}

/// The individual Rényi filter of DP-SGD with individual accounting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IndividualReport {
    /// The Rényi order α, fixed before training (from q, σ, T, δ and the conversion).
    pub order: u32,
    /// Each example's budget at α: T full steps' Rényi DP, rounded up.
    pub budget: f64,
    /// What each example is charged.
    pub charge: String,
}

/// The training mechanism's parameters.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TrainingReport {
    /// Noise multiplier σ.
    pub sigma: f64,
    /// Clip C.
    pub clip: f64,
    /// Noise std σC (for replace-one the sum's sensitivity is 2C).
    pub noise_std: f64,
    /// Per-example budget B_norm = k·C² (None for DP-SGD, which clips to C alone).
    pub b_norm: Option<f64>,
    /// k.
    pub worst_case_steps: usize,
    /// Steps the run may take.
    pub max_steps: usize,
    /// The training mechanism's ρ (None for DP-SGD).
    pub rho: Option<f64>,
    /// ε of the first k steps alone (plain private GD with this σ releases only those).
    pub epsilon_of_first_k_steps_alone: Option<f64>,
}

/// One scheduled release.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReleaseReport {
    /// Its mechanism.
    pub mechanism: ReleaseKind,
    /// Noise std (sensitivity 1).
    pub sigma: f64,
    /// First step.
    pub first_step: usize,
    /// Steps between releases.
    pub every: usize,
    /// Last step.
    pub last_step: usize,
    /// Releases scheduled (all paid for).
    pub scheduled: u64,
    /// Releases made.
    pub made: u64,
}

/// The session's filter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SessionReport {
    /// The accountant.
    pub accountant: String,
    /// Its budget ρ (every scheduled charge).
    pub budget_rho: f64,
    /// ρ charged per mechanism.
    pub charged_rho: BTreeMap<String, f64>,
    /// A note on early stopping.
    pub note: String,
}

/// The per-example ledger.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LedgerReport {
    /// Training examples n (public under both relations).
    pub examples: usize,
    /// B_norm (None for non-private runs).
    pub budget_per_example: Option<f64>,
    /// The ledger's unit.
    pub unit: String,
}

/// `x` to four significant digits, for display (never "0.0000" for a small ε): `0.3`, `6.094`,
/// `1.000e-6`. Rounded up, as every privacy quantity is, except within 10⁻¹² relative of a
/// four-digit value (so a calibrated ε = 1.0000000000000002 shows as 1); the files carry the
/// exact value.
#[must_use]
pub fn significant(x: f64) -> String {
    if x <= 0.0 || !x.is_finite() {
        return x.to_string();
    }
    let magnitude = x.log10().floor() as i32;
    let scale = 10f64.powi(3 - magnitude);
    let up = (x * scale * (1.0 - 1e-12)).ceil() / scale;
    if (-4..4).contains(&magnitude) {
        let decimals = usize::try_from(3 - magnitude).unwrap_or(0);
        let s = format!("{up:.decimals$}");
        if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.').to_string() } else { s }
    } else {
        format!("{up:.3e}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A count released with noise must move by exactly what
    /// its neighbour's count moves, however large. Counts became f32 before the noise was added:
    /// above 2²⁴, neighbouring counts rounded up to 2 apart (4× the accounted ρ).
    #[test]
    fn neighbouring_counts_above_2_pow_24_stay_1_apart_with_the_same_noise() {
        for c in (0..8).map(|k| 2f64.powi(24) + f64::from(k)).chain([2f64.powi(40) + 1.0]) {
            let draw = |x: f64| noisy_count(x, 3.0, None, &mut NoiseSeed::Fixed(1).rng(Stream::update(1)).unwrap());
            let moved = draw(c + 1.0) - draw(c);
            assert!((moved - 1.0).abs() < 1e-6, "count {c}: neighbours released {moved} apart");
        }
    }

    #[test]
    fn epsilons_are_shown_to_four_significant_digits_rounded_up() {
        for (x, want) in
            [(0.3, "0.3"), (1.0000000000000002, "1"), (6.0931, "6.094"), (1e-6, "1.000e-6"), (0.00012341, "0.0001235")]
        {
            assert_eq!(significant(x), want, "{x}");
        }
        assert_eq!(significant(1.00049), "1.001", "rounded up");
        assert_eq!(significant(123_456.0), "1.235e5");
    }
}
