//! The privacy session of one training run (concurrent composition, paper 004): the training
//! mechanism (001 Algorithm 3) and every scheduled noisy statistic — the active-set size, the
//! stopping rule's training accuracy — answer through one [`PrivacySession`] whose zCDP filter
//! holds exactly the run's budget. Nothing about the training data leaves the run except
//! through it: a release is charged before it is computed, and a release the budget cannot
//! pay for is refused (which the calibration makes impossible for the scheduled ones).
//!
//! Every piece is a Gaussian mechanism, so the budget ρ (additive, 001 Remark 4.4) is also a
//! √(2ρ)-GDP guarantee, which is what `gaussian-exact` converts.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{Value, json};

use super::config::{Method, ScheduledRelease, ValidConfig};
use crate::accounting::filter::ZcdpFilter;
use crate::accounting::session::{Mechanism, PrivacySession};
use crate::accounting::{Conversion, GaussianDp, ToApproxDp, Zcdp};
use crate::error::Result;
use crate::noise::{NoiseSeed, add_gaussian};

/// The run's session: its budget, the training mechanism and the scheduled releases.
pub struct RunSession {
    session: Arc<PrivacySession<ZcdpFilter>>,
    releases: Vec<(ScheduledRelease, Mechanism<ZcdpFilter>)>,
    budget: Zcdp,
}

impl RunSession {
    /// Opens the session of a private run and charges the training mechanism its whole
    /// guarantee, B_norm/(2σ²C²)-zCDP whatever the number of steps (001 Prop. 5.1). For a run
    /// resumed after `done` steps, the releases of steps 1..=`done` are charged again (they
    /// were made before the interruption).
    pub fn open(cfg: &ValidConfig, done: usize) -> Result<Self> {
        let training_cost = training_rho(cfg, cfg.config.privacy.steps);
        // The budget is the sum of every scheduled charge, rounded up in the order the
        // charges are made, so that the filter accepts exactly the schedule.
        let mut budget = training_cost;
        for step in 1..=cfg.max_steps {
            for r in cfg.releases.iter().filter(|r| r.due(step)) {
                budget = budget.compose(r.cost());
            }
        }
        let session = PrivacySession::new(ZcdpFilter::new(budget));
        session.mechanism("training").query(training_cost, || ())?;
        let releases = cfg.releases.iter().map(|r| (*r, session.mechanism(r.mechanism))).collect();
        let run = Self { session, releases, budget };
        for step in 1..=done {
            for (r, m) in run.releases.iter().filter(|(r, _)| r.due(step)) {
                m.query(r.cost(), || ())?;
            }
        }
        Ok(run)
    }

    /// Answers every release due after `step`, in schedule order: each is charged, then
    /// `exact(mechanism)` is computed and returned with Gaussian noise added.
    pub fn release(
        &self,
        step: usize,
        seed: NoiseSeed,
        mut exact: impl FnMut(&str) -> f64,
    ) -> Result<Vec<(&'static str, f64)>> {
        let mut out = Vec::new();
        for (r, m) in self.releases.iter().filter(|(r, _)| r.due(step)) {
            let noisy = m.query(r.cost(), || {
                let mut v = [exact(r.mechanism) as f32];
                add_gaussian(&mut v, r.sigma, &mut seed.rng_for_step(stream(r.mechanism, step)));
                f64::from(v[0])
            })?;
            out.push((r.mechanism, noisy));
        }
        Ok(out)
    }

    /// The whole run's guarantee as Gaussian DP (μ = √(2ρ), rounded up).
    #[must_use]
    pub fn guarantee(&self) -> GaussianDp {
        gdp_of(self.budget.rho())
    }

    /// ρ charged so far, per mechanism.
    #[must_use]
    pub fn spent_by_mechanism(&self) -> BTreeMap<String, f64> {
        let mut out = BTreeMap::new();
        for c in self.session.log() {
            *out.entry(c.mechanism).or_insert(0.0) += c.cost.rho();
        }
        out
    }
}

/// Noise streams of the releases, apart from the training steps' streams (1, 2, …).
fn stream(mechanism: &str, step: usize) -> u64 {
    let base = if mechanism == super::config::ACTIVE_COUNT { u64::MAX } else { u64::MAX / 2 };
    base - step as u64
}

fn training_rho(cfg: &ValidConfig, steps: usize) -> Zcdp {
    let sigma = cfg.sigma.expect("private runs have sigma");
    Zcdp::new(steps as f64 / (2.0 * sigma * sigma)).expect("validated")
}

fn gdp_of(rho: f64) -> GaussianDp {
    let mut mu = (2.0 * rho).sqrt();
    if mu * mu / 2.0 < rho {
        mu = mu.next_up();
    }
    GaussianDp::new(mu).expect("positive budget")
}

/// ε of the worst case spent after `step` steps: min(step, k)·C² per example (a public
/// quantity) plus the releases made so far. None for non-private runs.
#[must_use]
pub fn epsilon_so_far(cfg: &ValidConfig, step: usize) -> Option<f64> {
    let c = &cfg.config;
    cfg.sigma?;
    let mut rho = training_rho(cfg, step.clamp(1, c.privacy.steps)).rho();
    for r in &cfg.releases {
        rho += r.count_through(step) as f64 * r.cost().rho();
    }
    gdp_of(rho).epsilon(c.privacy.delta, c.privacy.conversion).ok()
}

/// `privacy.json`: the guarantee, its inputs, the session's charges and ε under every valid
/// conversion.
#[must_use]
pub fn report(cfg: &ValidConfig, session: Option<&RunSession>, n: usize, steps: usize, seed: NoiseSeed) -> Value {
    let c = &cfg.config;
    let p = &c.privacy;
    let Some(session) = session.filter(|_| p.method != Method::NonPrivate) else {
        return json!({
            "method": "non-private", "private": false, "epsilon": null, "steps_run": steps,
            "summary": "NOT PRIVATE (no clipping, no noise)",
        });
    };
    let total = session.guarantee();
    let mut eps = serde_json::Map::new();
    for m in Conversion::ALL {
        eps.insert(m.name().into(), json!(total.epsilon(p.delta, m).ok()));
    }
    let epsilon = total.epsilon(p.delta, p.conversion).ok();
    let sigma = cfg.sigma.expect("private");
    let training = training_rho(cfg, p.steps);
    let releases: Vec<Value> = cfg
        .releases
        .iter()
        .map(|r| {
            json!({ "mechanism": r.mechanism, "sigma": r.sigma, "first_step": r.first, "every": r.every,
                    "last_step": r.last, "scheduled": r.count_through(r.last), "made": r.count_through(steps),
                    "rho_scheduled": r.total_rho() })
        })
        .collect();
    // Plain private GD of the same σ is the first k steps of this run; on its own it spends
    // only the training mechanism's ρ.
    let prefix_eps = gdp_of(training.rho()).epsilon(p.delta, p.conversion).ok();
    json!({
        "method": p.method, "private": true,
        "delta": p.delta, "conversion": p.conversion, "epsilon": epsilon, "epsilon_by_conversion": eps,
        "target_epsilon": p.epsilon,
        "rho": session.budget.rho(), "mu": total.mu(),
        "training": {
            "sigma": sigma, "clip": p.clip, "noise_std": sigma * p.clip,
            "b_norm": p.steps as f64 * p.clip * p.clip, "worst_case_steps": p.steps,
            "max_steps": cfg.max_steps, "steps_run": steps,
            "rho": training.rho(),
            "epsilon_of_first_k_steps_alone": prefix_eps,
            "guarantee": "B_norm/(2 sigma^2 C^2)-zCDP and sqrt(B_norm)/(sigma C)-GDP whatever the number of steps (001 Prop. 5.1)",
        },
        "releases": releases,
        "active_count_mode": c.release.active_count,
        "session": {
            "accountant": "zCDP filter (001 Remark 4.4) over the concurrent session of 004",
            "budget_rho": session.budget.rho(),
            "charged_rho": session.spent_by_mechanism(),
            "note": "the guarantee is the budget: a data-dependent early stop does not lower it",
        },
        "ledger": { "examples": n, "budget_per_example": p.steps as f64 * p.clip * p.clip, "unit": "squared clipped gradient norm" },
        "noise": seed.describe(), "fixed_seed": matches!(seed, NoiseSeed::Fixed(_)),
        "test_accuracy_note": "test accuracy is measured on the held-out test set, not on the training data the guarantee protects",
        "summary": format!("({}, {})-DP via {} ({})", epsilon.map_or("?".into(), |e| format!("{e:.4}")), p.delta, p.conversion,
            if matches!(seed, NoiseSeed::Fixed(_)) { "FIXED noise seed: for experiments only" } else { "OS-seeded CSPRNG noise" }),
    })
}
