//! The accounting of full-batch private GD (plain or filtered): every step adds N(0, σ²C²) to
//! a sum in which each example moves by at most what its ledger was charged, the ledger stops
//! it at B_norm = k·C², and the run's noisy counts are composed with training in one
//! Gaussian-DP guarantee (μ) and one zCDP session (ρ) — [FZ21] Prop. 5.1 and Remark 4.4.
//!
//! [FZ21]: https://arxiv.org/abs/2008.11193

use std::collections::BTreeMap;

use super::{RunAccounting, Target};
use crate::accounting::event::DpEvent;
use crate::accounting::sampling::DiscreteGaussian;
use crate::accounting::{AccountingError, ApproxDp, Conversion, GaussianDp, GdPlan, PrivateGd, Rdp};
use crate::error::{Error, Result};
use crate::noise::NoiseSampler;
use crate::train::config::{Resolved, TrainConfig, attribute, field, typed_down};
use crate::train::privacy::{Accounting, ReleaseReport, RunSession, SessionReport, TrainingReport, private_gd};
use crate::train::releases::{ReleaseKind, ScheduledRelease};
use crate::train::tiers::Tier;

/// What a full-batch run's ledger measures (and what a run without a ledger reports).
pub(crate) const CLIPPED_NORM_UNIT: &str = "squared norm of the clipped per-example gradient";

/// σ, the run's Gaussian-DP guarantee and its event (training and every scheduled release).
#[derive(Debug, Clone, PartialEq)]
pub struct FullBatch {
    sigma: f64,
    guarantee: GaussianDp,
    event: DpEvent,
    b_norm: f64,
    tiers: Vec<Tier>,
    /// Each tier's whole-run Rényi DP curve (training at its budget and every release).
    tier_curves: Vec<Rdp>,
}

impl FullBatch {
    /// σ for the config's target ε (or its σ, checked) with the releases composed in.
    ///
    /// # Errors
    /// Counts that alone exceed the budget, or an invalid ε, σ, k or clip (named).
    pub fn calibrate(config: &TrainConfig, releases: &[ScheduledRelease]) -> Result<Self> {
        let p = &config.privacy;
        if p.noise == NoiseSampler::DiscreteGaussian {
            if p.conversion == Conversion::GaussianExact {
                return Err(Error::config(
                    "privacy.conversion",
                    "gaussian-exact is the (epsilon, delta) curve of the continuous Gaussian; discrete-Gaussian \
                     noise is accounted through zCDP: use conversion = \"cks\" (or \"bun-steinke\")",
                ));
            }
            for r in releases {
                let f =
                    if r.kind == ReleaseKind::ActiveCount { "release.active_count_sigma" } else { "stopping.sigma" };
                DiscreteGaussian::new(r.sigma).map_err(|e| field(f, e))?;
            }
        }
        let mut plan = GdPlan::new(p.worst_case_steps as f64).map_err(|e| field("privacy.worst_case_steps", e))?;
        plan = plan.with_neighbours(p.neighbours);
        for r in releases {
            plan = plan.with_release(r.through(r.last)?);
        }
        let sigma = match Target::of(p)? {
            Target::Sigma(s) => {
                plan.guarantee(s).map_err(|e| field("privacy.sigma", e))?;
                s
            }
            Target::Epsilon { epsilon, delta } => {
                let target = ApproxDp::new(epsilon, delta).map_err(|e| field("privacy.epsilon", e))?;
                plan.calibrate(target, p.conversion).map_err(|e| match e {
                    AccountingError::BudgetExceeded { .. } => Error::config(
                        "release",
                        "the scheduled noisy counts (active count, training accuracy) alone exceed the privacy \
                         budget; raise their sigma or release less often",
                    ),
                    other => field("privacy.epsilon", other),
                })?
            }
        };
        let run = PrivateGd::new(sigma, p.clip, p.worst_case_steps as f64)
            .map_err(|e| attribute(e.into(), "privacy.clip"))?;
        let (tiers, tier_curves) = tiers(config, releases, sigma)?.into_iter().unzip();
        Ok(Self {
            sigma,
            guarantee: plan.guarantee(sigma)?,
            event: plan.event(sigma),
            b_norm: run.b_norm(),
            tiers,
            tier_curves,
        })
    }
}

/// The most worst-case steps a tier's budget may hold (k·C² stays exact in f64).
const MAX_TIER_STEPS: u64 = 1 << 52;

/// Each tier of `privacy.budgets` at noise multiplier `sigma`: the largest whole number of
/// worst-case steps k_j whose guarantee — training at B_norm = k_j·C² composed with every
/// scheduled release, exactly as the run's own — converts to at most the tier's ε
/// ([`crate::train::tiers`]): at least the run's own k for a tier at least as loose as its ε,
/// fewer for a stricter one. With each tier, its whole-run Rényi DP curve (what a private
/// search composes for its examples).
fn tiers(config: &TrainConfig, releases: &[ScheduledRelease], sigma: f64) -> Result<Vec<(Tier, Rdp)>> {
    let p = &config.privacy;
    let Some(b) = &p.budgets else { return Ok(Vec::new()) };
    let delta = typed_down(p.delta);
    let plan_at = |steps: u64| -> Option<GdPlan> {
        let mut plan = GdPlan::new(steps as f64).ok()?.with_neighbours(p.neighbours);
        for r in releases {
            plan = plan.with_release(r.through(r.last).ok()?);
        }
        Some(plan)
    };
    let epsilon_at = |steps: u64| -> Option<f64> {
        p.noise.epsilon(plan_at(steps)?.guarantee(sigma).ok()?, delta, p.conversion).ok()
    };
    let k = p.worst_case_steps as u64;
    let mut out = Vec::new();
    for (typed, target) in b.epsilons.iter().zip(b.targets()) {
        let fits = |steps: u64| epsilon_at(steps).is_some_and(|e| e <= target);
        // A tier at least as loose as the run's ε gets k steps or more; a stricter one fewer.
        let steps = match (fits(k), fits(1)) {
            (true, _) => largest_fitting(k, MAX_TIER_STEPS, fits),
            (false, true) => largest_fitting(1, k, fits),
            (false, false) => {
                return Err(Error::config(
                    "privacy.budgets.epsilons",
                    format!(
                        "{typed} is below what one step at this sigma costs with the noisy counts the run \
                         releases (each charged to every example): raise it, lower privacy.epsilon (more noise), or \
                         release fewer counts"
                    ),
                ));
            }
        };
        let vanished = || Error::State("a tier's guarantee vanished".into());
        let guaranteed = epsilon_at(steps).ok_or_else(vanished)?;
        let curve = plan_at(steps).and_then(|plan| super::rdp_of(&plan.event(sigma))).ok_or_else(vanished)?;
        let b_norm =
            PrivateGd::new(sigma, p.clip, steps as f64).map_err(|e| attribute(e.into(), "privacy.clip"))?.b_norm();
        let tier =
            Tier { epsilon: target, guaranteed_epsilon: guaranteed, budget: b_norm, worst_case_steps: Some(steps) };
        out.push((tier, curve));
    }
    Ok(out)
}

/// The largest s in [lo, cap] with `fits(s)`, given `fits(lo)` and `fits` monotone: doubling,
/// then bisection (at most 2·log₂ cap calls).
fn largest_fitting(lo: u64, cap: u64, fits: impl Fn(u64) -> bool) -> u64 {
    let (mut lo, mut hi) = (lo, lo);
    while hi < cap {
        let next = hi.saturating_mul(2).clamp(hi + 1, cap);
        hi = next;
        if !fits(next) {
            break;
        }
        lo = next;
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    lo
}

impl RunAccounting for FullBatch {
    fn sigma(&self) -> f64 {
        self.sigma
    }
    fn epsilon(&self, cfg: &Resolved) -> Option<f64> {
        let p = &cfg.config().privacy;
        p.noise.epsilon(self.guarantee, cfg.delta(), p.conversion).ok()
    }
    /// min(step, k)·C² per example (a public quantity) plus the releases made so far; with
    /// personalized budgets, k of the loosest tier (every example holds one).
    fn epsilon_through(&self, cfg: &Resolved, step: usize) -> Option<f64> {
        let p = &cfg.config().privacy;
        let k = self.tiers.iter().filter_map(|t| t.worst_case_steps).max().unwrap_or(p.worst_case_steps as u64);
        let mut plan = GdPlan::new((step as u64).clamp(1, k) as f64).ok()?.with_neighbours(p.neighbours);
        for r in cfg.releases() {
            if r.count_through(step) > 0 {
                plan = plan.with_release(r.through(step).ok()?);
            }
        }
        p.noise.epsilon(plan.guarantee(self.sigma).ok()?, cfg.delta(), p.conversion).ok()
    }
    fn event(&self) -> Option<DpEvent> {
        Some(self.event.clone())
    }
    fn guarantee(&self) -> Option<GaussianDp> {
        Some(self.guarantee)
    }
    fn b_norm(&self) -> Option<f64> {
        Some(self.b_norm)
    }
    fn ledger_budget(&self) -> Option<f64> {
        Some(self.b_norm)
    }
    fn ledger_unit(&self) -> String {
        CLIPPED_NORM_UNIT.into()
    }
    /// s = `spent`/C² full steps' worth (rounded up) with every release the run makes. The
    /// training part is the Gaussian mechanism of sensitivity √s·C at noise σC — s steps of
    /// sensitivity C compose to it exactly ([DRS19] Cor. 3.3: μ² adds up), fractional or not —
    /// so it is one step at multiplier σ/√s (rounded down).
    ///
    /// [DRS19]: https://arxiv.org/abs/1905.02383
    fn spent_epsilon(&self, cfg: &Resolved, spent: f64) -> Option<f64> {
        use crate::accounting::numeric::{div_down, div_up, mul_down, sqrt_up};
        let p = &cfg.config().privacy;
        let steps = div_up(spent, mul_down(p.clip, p.clip));
        let mut plan = GdPlan::new(1.0).ok()?.with_neighbours(p.neighbours);
        for r in cfg.releases() {
            plan = plan.with_release(r.through(r.last).ok()?);
        }
        let sigma = div_down(self.sigma, sqrt_up(steps));
        p.noise.epsilon(plan.guarantee(sigma).ok()?, cfg.delta(), p.conversion).ok()
    }
    fn tiers(&self) -> &[Tier] {
        &self.tiers
    }
    fn tier_rdp(&self, tier: usize) -> Option<Rdp> {
        self.tier_curves.get(tier).cloned()
    }
    fn has_session(&self) -> bool {
        true
    }
    fn report(
        &self,
        cfg: &Resolved,
        session: Option<&RunSession>,
        _examples: usize,
        steps_run: usize,
    ) -> Result<Option<Accounting>> {
        session.map(|s| report(cfg, self, s, steps_run)).transpose()
    }
}

/// The full-batch part of `privacy.json`: the guarantee `g`, each conversion, the first k
/// steps alone, the releases and the session.
fn report(cfg: &Resolved, fb: &FullBatch, session: &RunSession, steps_run: usize) -> Result<Accounting> {
    let g = fb.guarantee;
    let p = &cfg.config().privacy;
    let gaussian = p.noise == NoiseSampler::Gaussian;
    let mut by_conversion = BTreeMap::new();
    for m in Conversion::ALL {
        let eps = p.noise.epsilon(g, cfg.delta(), m).ok();
        by_conversion.insert(m.name().to_string(), eps);
    }
    let run = private_gd(p, fb.sigma)?;
    let first_k = p.noise.epsilon(run.gaussian_dp(), cfg.delta(), p.conversion).ok();
    let releases = cfg
        .releases()
        .iter()
        .map(|r| ReleaseReport {
            mechanism: r.kind,
            sigma: r.sigma,
            first_step: r.first,
            every: r.every,
            last_step: r.last,
            scheduled: r.count_through(r.last),
            made: r.count_through(steps_run),
        })
        .collect();
    let sensitivity = p.neighbours.sum_sensitivity();
    Ok(Accounting {
        event: Some(fb.event.clone()),
        epsilon: fb.headline_epsilon(cfg),
        epsilon_by_conversion: by_conversion,
        target_epsilon: p.epsilon,
        rho: Some(g.to_zcdp().rho()),
        mu: gaussian.then_some(g.mu()),
        guarantee: guarantee_text(gaussian, sensitivity, p.conversion),
        rests_on: rests_on(cfg, gaussian, sensitivity),
        training: TrainingReport {
            sigma: run.sigma(),
            clip: p.clip,
            noise_std: run.sigma() * p.clip,
            b_norm: Some(run.b_norm()),
            worst_case_steps: p.worst_case_steps,
            max_steps: cfg.max_steps(),
            rho: Some(run.zcdp().rho()),
            epsilon_of_first_k_steps_alone: first_k,
        },
        sampling: None,
        releases,
        session: Some(SessionReport {
            accountant: "zCDP filter (Feldman & Zrnic 2021, Remark 4.4) over a concurrent session (Haney et al. 2023)"
                .into(),
            budget_rho: session.budget(),
            charged_rho: session.charged_by_mechanism(),
            note: "the guarantee is the budget: a data-dependent early stop does not lower it".into(),
        }),
        correlated: None,
    })
}

/// The guarantee in one paragraph: which filter over which sequence.
fn guarantee_text(gaussian: bool, sensitivity: f64, conversion: Conversion) -> String {
    let s = if sensitivity == 1.0 { String::new() } else { "2 ".into() };
    let converted = if conversion == Conversion::GaussianExact {
        "converted to (epsilon, delta) by the exact GDP curve (Dong, Roth & Su 2019, Cor. 2.13)".to_string()
    } else {
        format!("its rho = mu^2/2 converted to (epsilon, delta) by the {conversion} conversion of zCDP")
    };
    if gaussian {
        format!(
            "the run — its training steps and its noisy count releases, interleaved — is mu-GDP: each step adds \
             N(0, sigma^2 C^2) to a sum in which example i moves by at most what its ledger was charged, and the \
             ledger stops each example at {s}sqrt(B_norm)/(sigma C) in total (an individual Gaussian-DP filter: \
             Koskela, Tobaben & Honkela 2023, on the fully adaptive composition of Gaussian DP of Smith & Thakurta \
             2022); each count of noise std s is 1/s-GDP; so mu = sqrt(mu_training^2 + sum of (1/s)^2), \
             {converted}. The same run is rho-zCDP (Feldman & Zrnic 2021, Prop. 5.1 and Remark 4.4), under \
             concurrent composition of its mechanisms (Haney et al. 2023)"
        )
    } else {
        format!(
            "the run — its training steps and its noisy count releases, interleaved — is rho-zCDP: training is \
             {}B_norm/(2 sigma^2 C^2)-zCDP whatever the number of steps (Feldman & Zrnic 2021, Prop. 5.1, with the \
             discrete Gaussian's zCDP bound of Canonne, Kamath & Steinke 2020), each count of noise std s is \
             1/(2 s^2)-zCDP, all composed in one zCDP filter (Feldman & Zrnic 2021, Remark 4.4) under concurrent \
             composition (Haney et al. 2023); converted to (epsilon, delta) by the chosen zCDP conversion",
            if sensitivity == 1.0 { "" } else { "4 " }
        )
    }
}

/// What each number in [`Accounting`] rests on.
fn rests_on(cfg: &Resolved, gaussian: bool, sensitivity: f64) -> BTreeMap<String, String> {
    let p = &cfg.config().privacy;
    let mut m = BTreeMap::new();
    m.insert(
        "sensitivity".into(),
        format!(
            "{}C per step in the arithmetic the computer does: each clipped row is rounded onto an integer grid and \
             summed exactly, so a neighbour moves the sum by exactly its own rounded row, whose norm is at most \
             sqrt(charged) — given that the engine computes an example's gradient from that example and theta \
             alone at its fixed micro-batch size, whatever its companions and position (checked before training, \
             on this run's engine, device and kernels at its micro-batch size, on public synthetic examples: a check \
             on inputs, not a proof; dpgd::per_example::check_rows_are_own); under {} neighbours; n is public",
            if sensitivity == 1.0 { "" } else { "2" },
            p.neighbours
        ),
    );
    let counts = if gaussian {
        "Bun & Steinke 2016 for each Gaussian count"
    } else {
        "Canonne, Kamath & Steinke 2020 for each discrete-Gaussian count"
    };
    m.insert(
        "rho".into(),
        format!(
            "Feldman & Zrnic 2021, Prop. 5.1 (training) and Remark 4.4 (the zCDP filter over training and counts); \
             {counts}"
        ),
    );
    if gaussian {
        m.insert(
            "mu".into(),
            "an individual Gaussian-DP filter over the interleaved steps and counts (Koskela, Tobaben & Honkela \
             2023; Smith & Thakurta 2022): sum of squared per-release mu at most the budget"
                .into(),
        );
    }
    let epsilon = match (gaussian, p.conversion) {
        (true, Conversion::GaussianExact) => {
            "mu through the exact (epsilon, delta) curve of Gaussian DP (Dong, Roth & \
                                              Su 2019, Cor. 2.13), rounded up"
                .to_string()
        }
        (_, c) => format!("rho through the {c} conversion of zCDP to (epsilon, delta), rounded up"),
    };
    m.insert("epsilon".into(), epsilon);
    m
}
