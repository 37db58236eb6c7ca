//! `dpgd audit --canaries M`: a one-run audit of a config's training mechanism ([SNJ23]), as the
//! method, its noise, its sampling, its ledger and its tiers are configured — white-box, all
//! iterates, gradient canaries.
//!
//! **The run.** M canaries, each included by a coin of probability ½ drawn from the run's noise
//! seed (its own stream). Canary i is an image lighting pixel i alone, under a linear model
//! without bias, so that its gradient lies on the two parameters W[·, i], which no other canary
//! touches, with a norm far above C: every included canary is clipped to min(C, what its ledger
//! has left) and charged by the method's own path (the trainer's step: its sample, its selection and
//! charge rule, the clip kernel, the ledger with each canary in a tier, tiers taken in turn). An
//! excluded canary is its neighbour: a blank image (zero-out) or the same image with the other
//! label (replace-one, the opposite gradient). Each step's sum goes through the method's own
//! noise and update ([`step_rule`](crate::train::method::TrainingMethod::step_rule)) at learning rate 1 from θ = 0, and the
//! auditor reads the noisy sum back from the update. θ stays at zero, so the canaries'
//! directions never move.
//!
//! **The guess.** Each canary's score is its noisy sums projected on its direction, over the
//! first k steps and over all steps (pre-registered statistics, for a run that may go on past
//! k), and for a sampled method the log-likelihood ratio of its per-step projections (which
//! weighs each step by how likely it holds the canary); [`group_audits`] turns each into lower
//! bounds on ε from the canaries of each tier, each test at its share of 1 − confidence, and
//! the audit compares the best with that tier's guaranteed ε (or the run's).
//!
//! **What it sees and what it cannot.** It audits what the method does to gradients — the
//! clip, the ledger and its tiers, the sampling, the noise as drawn — against the accountant's
//! claim for them: a noise below what σ says, a ledger that does not stop an example, a tier's
//! budget given to another tier's examples. It does not see the real data, model or engine (the
//! canaries' gradients are computed by the fast engine on its own model), the releases (noisy
//! counts), a search's composition or several ranks. One-run bounds are loose at small ε
//! (measured: a correct ε = 2 run is bounded at 0.58–0.85 with 2,000–5,000 canaries): a bug is
//! caught when it lifts the true ε well above the claim.
//!
//! [SNJ23]: https://arxiv.org/abs/2305.08846

use rand::RngExt as _;

use crate::accounting::Neighbours;
use crate::accounting::audit::likelihood::StepLikelihood;
use crate::accounting::filter::{Budgets, IndividualFilter};
use crate::arch::{LayerSpec, ModelSpec};
use crate::data::{Normalize, Split};
use crate::error::{Error, Result};
use crate::noise::Stream;
use crate::per_example::Network;
use crate::train::ValidConfig;
pub use crate::train::canaries::{CanaryGroup, GroupAudit, OneRunReport, Scores, group_audits, plot, tier_groups};
use crate::train::distributed::shard_sum;
use crate::train::step::{Aggregation, GradientPlan, UpdateRule};

/// The most canaries an audit takes (each canary is a pixel of every canary's image).
pub const MAX_CANARIES: usize = 10_000;

/// How a one-run audit runs: [`OneRunSettings::default`] (1,000 canaries, 95 % confidence), then
/// set the fields to change.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub struct OneRunSettings {
    /// M, the canaries.
    pub canaries: usize,
    /// The confidence of every reported bound.
    pub confidence: f64,
    #[cfg(test)]
    pub(crate) fault: Fault,
}

impl Default for OneRunSettings {
    fn default() -> Self {
        Self {
            canaries: 1000,
            confidence: 0.95,
            #[cfg(test)]
            fault: Fault::None,
        }
    }
}

/// Deliberate bugs, to check that the audit catches them (set in test builds only).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) enum Fault {
    None,
    /// A quarter of the noise the accountant assumes.
    QuarterNoise,
    /// Half the noise the accountant assumes.
    HalfNoise,
    /// A fresh ledger every step: no canary is ever stopped.
    IgnoreLedger,
    /// Each tier's canaries get the budget of the tier after it.
    ShiftTiers,
}

/// Audits `cfg`'s training mechanism with `settings.canaries` canaries in one run.
///
/// # Errors
/// A non-private config (nothing to audit), a number of canaries out of range (`--canaries`),
/// or a failing random source.
pub fn audit_one_run(cfg: &ValidConfig, settings: &OneRunSettings) -> Result<OneRunReport> {
    let accounting = cfg
        .accounting()
        .ok_or_else(|| Error::config("privacy.method", "a non-private run has no guarantee to audit"))?;
    let m = settings.canaries;
    let least = 2 * accounting.tiers().len().max(1);
    if !(least..=MAX_CANARIES).contains(&m) {
        return Err(Error::config(
            "--canaries",
            format!("give between {least} (two per tier) and {MAX_CANARIES} canaries"),
        ));
    }
    let mut coins = cfg.noise_seed().rng(Stream::canaries())?;
    let included: Vec<bool> = (0..m).map(|_| coins.random_bool(0.5)).collect();
    let tiers = accounting.tiers();
    let tier_of: Vec<u8> = (0..m).map(|i| (i % tiers.len().max(1)) as u8).collect();
    let [first_k, all, likelihood] = run_canaries(cfg, settings, &included, &tier_of)?;
    let likelihood = accounting.sample_rate().map(|_| (&likelihood[..], cfg.max_steps()));
    let scores = Scores::white_box(&first_k, &all, likelihood);
    let groups = group_audits(cfg, &scores, &included, &tier_groups(cfg, &tier_of), settings.confidence)?;
    Ok(OneRunReport {
        threat_model: "white-box, every noisy update, gradient canaries (a Dirac-like gradient on parameters no other \
                       canary touches)"
            .into(),
        method: cfg.method().describe().into(),
        canaries: m,
        steps: cfg.max_steps(),
        worst_case_steps: cfg.worst_case_steps(),
        neighbours: cfg.config().privacy.neighbours,
        consistent: groups.iter().all(|g| g.consistent),
        groups,
        scores: all.iter().copied().zip(included.iter().copied()).collect(),
        included,
    })
}

/// The canaries' images: canary i lights pixel i (included), or is its neighbour.
fn canaries(included: &[bool], neighbours: Neighbours) -> Split {
    let m = included.len();
    let mut images = vec![0u8; m * m];
    let mut labels = vec![0u8; m];
    for (i, &inc) in included.iter().enumerate() {
        match (inc, neighbours) {
            (true, _) => images[i * m + i] = 255,
            // Zero-out: a blank image contributes a zero gradient.
            (false, Neighbours::ZeroOut) => {}
            // Replace-one: the same image with the other label, the opposite gradient.
            (false, Neighbours::ReplaceOne) => {
                images[i * m + i] = 255;
                labels[i] = 1;
            }
        }
    }
    Split { images, features: Vec::new(), labels, rows: 1, cols: m, channels: 1 }
}

/// Runs the schedule once over the canaries; returns each canary's `[first-k, all-steps,
/// likelihood]` scores: its projected noisy sums over those steps, divided by σC·√steps, and for
/// a sampled method at rate q the log-likelihood ratio Σₜ ln(pᵢₙ(oₜ)/pₒᵤₜ(oₜ)) of its per-step
/// sums oₜ (in units of σC: N(0, 1) plus 1/σ with probability q when in, plus 0 (zero-out) or
/// −1/σ with probability q (replace-one) when out) — Neyman–Pearson's statistic for a canary
/// at the clip in DP-SGD (all zeros without sampling).
fn run_canaries(
    cfg: &ValidConfig,
    settings: &OneRunSettings,
    included: &[bool],
    tier_of: &[u8],
) -> Result<[Vec<f64>; 3]> {
    let m = included.len();
    let accounting = cfg.accounting().ok_or_else(|| Error::State("no accounting to audit".into()))?;
    let p = &cfg.config().privacy;
    let spec = ModelSpec {
        input: [1, 1, m],
        classes: 2,
        layers: vec![
            LayerSpec::Flatten(crate::arch::kinds::Flatten),
            LayerSpec::Linear(crate::arch::kinds::Linear { out_features: 2, bias: false }),
        ],
    };
    let net = Network::new(&spec).map_err(|e| Error::State(e.to_string()))?;
    let data = canaries(included, p.neighbours);
    let aggregation = Aggregation::for_run(cfg, &net, m)?;
    // Normalised, a lit pixel is 100: a gradient norm of 50√2 at θ = 0, far above any clip the
    // audit is meant for.
    let plan = GradientPlan::new(net.clone(), data.head(0), Normalize::all(0.0, 0.01), aggregation, 64);
    let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build().map_err(|e| Error::Environment(e.to_string()))?;
    let budgets = ledger_budgets(cfg, settings, tier_of)?;
    let mut ledger = IndividualFilter::with_budgets(m, budgets.clone())?;
    let sigma = accounting.sigma();
    let mut rule = cfg.method().training().step_rule(
        cfg,
        Some(match fault(settings) {
            Fault::QuarterNoise => sigma / 4.0,
            Fault::HalfNoise => sigma / 2.0,
            _ => sigma,
        }),
    );
    let theta = vec![0.0f32; net.num_params()];
    let (k, steps) = (cfg.worst_case_steps(), cfg.max_steps());
    let unit = sigma * p.clip * std::f64::consts::SQRT_2;
    let mut scores = [vec![0.0; m], vec![0.0; m]];
    let mut likelihood = vec![0.0; m];
    let replace = p.neighbours == Neighbours::ReplaceOne;
    let step_ratio = accounting.sample_rate().map(|q| StepLikelihood::new(q, 1.0 / sigma, replace)).transpose()?;
    for t in 1..=steps {
        if fault(settings) == Fault::IgnoreLedger {
            ledger = IndividualFilter::with_budgets(m, budgets.clone())?;
        }
        let (sample, _) = accounting.sample(t, m, cfg.noise_seed())?;
        let (sum, _) = shard_sum(cfg, (&plan, &mut ledger), &pool, (&theta, t), sample.as_deref(), &(0..m))?;
        // From θ = 0 at learning rate 1, divisor 1 and no momentum, θ is minus the noisy sum.
        let mut moved = theta.clone();
        rule.apply(t, &mut moved, sum, UpdateRule { lr: 1.0, divisor: 1.0, momentum: 0.0 })?;
        for i in 0..m {
            // The canary's direction (−1, +1)/√2 on (W[0, i], W[1, i]), of the noisy sum −θ.
            let o = (f64::from(moved[i]) - f64::from(moved[m + i])) / unit;
            scores[1][i] += o;
            if t <= k {
                scores[0][i] += o;
            }
            if let Some(r) = &step_ratio {
                likelihood[i] += r.at(o);
            }
        }
    }
    // In units of one step's noise: a statistic of s steps has standard deviation 1 without the canary.
    for (stat, counted) in scores.iter_mut().zip([k.min(steps), steps]) {
        stat.iter_mut().for_each(|x| *x /= (counted.max(1) as f64).sqrt());
    }
    let [first_k, all] = scores;
    Ok([first_k, all, likelihood])
}

/// The canaries' ledger: the run's budget for all, or tier `tier_of[i]`'s for canary i.
fn ledger_budgets(cfg: &ValidConfig, settings: &OneRunSettings, tier_of: &[u8]) -> Result<Budgets> {
    let tiers = cfg.tiers();
    if tiers.is_empty() {
        return Ok(Budgets::uniform(cfg.ledger_budget().unwrap_or(f64::MAX))?);
    }
    let mut budgets: Vec<f64> = tiers.iter().map(|t| t.budget).collect();
    if fault(settings) == Fault::ShiftTiers {
        budgets.rotate_left(1);
    }
    Ok(Budgets::tiered(budgets, tier_of.to_vec())?)
}

/// The deliberate bug of a test build (none otherwise).
#[cfg(test)]
fn fault(settings: &OneRunSettings) -> Fault {
    settings.fault
}
#[cfg(not(test))]
fn fault(_: &OneRunSettings) -> Fault {
    Fault::None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::TrainConfig;

    /// `method` at ε = 2, δ = 1e-5, k = 10, run to `max_steps`, with `extra` privacy fields.
    fn config(method: &str, max_steps: usize, extra: &str) -> ValidConfig {
        config_at(2.0, method, max_steps, extra)
    }

    fn config_at(epsilon: f64, method: &str, max_steps: usize, extra: &str) -> ValidConfig {
        let text = format!(
            "[model]\npreset = \"logistic\"\n[privacy]\nmethod = \"{method}\"\nepsilon = {epsilon}\ndelta = 1e-5\n\
             clip = 1.0\nworst_case_steps = 10\n{extra}\n[train]\nlr = 1.0\nmax_steps = {max_steps}\nseed = 1\n"
        );
        TrainConfig::from_toml(&text, &[]).unwrap().validate().unwrap()
    }

    fn audit(cfg: &ValidConfig, fault: Fault) -> OneRunReport {
        audit_one_run(cfg, &OneRunSettings { canaries: 2000, confidence: 0.95, fault }).unwrap()
    }

    fn bounds(r: &OneRunReport) -> Vec<(f64, f64)> {
        r.groups.iter().map(|g| (g.bound.epsilon_lower, g.claimed_epsilon)).collect()
    }

    /// Filtered GD, DP-SGD and DP-SGD with individual accounting, each as configured: the
    /// bound stays below the claim, and sees something (above 0).
    #[test]
    fn correct_runs_are_audited_below_their_claims() {
        for (method, steps, extra) in [
            ("filtered", 160, ""),
            ("filtered", 160, "neighbours = \"replace-one\""),
            ("sgd", 10, "sample_rate = 0.5"),
            ("sgd-filtered", 20, "sample_rate = 0.5"),
        ] {
            let r = audit(&config(method, steps, extra), Fault::None);
            // The Gaussian model's bound: below the claim, and within a factor of 2 of it.
            if let Some(g) = r.groups[0].gaussian {
                assert!(g.epsilon_lower <= 2.0 && g.epsilon_lower > 1.0, "{method} {extra}: {g:?}");
            }
            // Every method but the Rényi filter's (no composition to scale) has one.
            assert_eq!(r.groups[0].gaussian.is_some(), method != "sgd-filtered", "{method}");
            assert!(r.consistent, "{method} {extra}: {:?}", bounds(&r));
            assert!(r.groups[0].bound.epsilon_lower > 0.0, "{method} {extra}: sees nothing: {:?}", bounds(&r));
            // The f-DP analysis: the family of the method's claim, below the claim, above 0; none
            // for a Rényi filter's guarantee at one order (no curve).
            let family = match method {
                "sgd" => Some("composition"),
                "sgd-filtered" => None,
                _ => Some("gaussian-dp"),
            };
            let f = r.groups[0].fdp.as_ref();
            assert_eq!(f.map(|f| f.family.as_str()), family, "{method}");
            assert!(f.is_none_or(|f| f.consistent && f.epsilon_lower > 0.0 && f.epsilon_lower <= 2.0), "{f:?}");
        }
    }

    /// DP-SGD at q = 0.05 over 200 steps: each canary is in about 10 steps, which the sums
    /// drown in the noise of the other 190; the likelihood ratio weighs each step by how likely
    /// it holds the canary, and gives the best bound, below the claim (measured: 0.45, and 0.59
    /// by the f-DP analysis, against 2).
    #[test]
    fn the_likelihood_ratio_audits_sampled_steps_best() {
        let text = "[model]\npreset = \"logistic\"\n[privacy]\nmethod = \"sgd\"\nepsilon = 2.0\ndelta = 1e-5\n\
                    clip = 1.0\nworst_case_steps = 200\nsample_rate = 0.05\n[train]\nlr = 1.0\nseed = 1\n";
        let r = audit(&TrainConfig::from_toml(text, &[]).unwrap().validate().unwrap(), Fault::None);
        let g = &r.groups[0];
        assert_eq!(g.statistic, "likelihood", "{:?}", bounds(&r));
        assert!(r.consistent && g.bound.epsilon_lower > 0.3, "{:?}", bounds(&r));
        let filtered = audit(&config("filtered", 10, ""), Fault::None);
        assert_ne!(filtered.groups[0].statistic, "likelihood");
    }

    #[test]
    fn a_quarter_of_the_noise_is_caught() {
        for (method, steps, extra) in [("filtered", 10, ""), ("sgd", 10, "sample_rate = 0.5")] {
            let r = audit(&config(method, steps, extra), Fault::QuarterNoise);
            assert!(!r.consistent, "{method}: {:?}", bounds(&r));
        }
    }

    /// Half the noise at ε = 2 (true ε about 5): below what the distribution-free analyses see
    /// at 2,000 canaries (measured: 1.4 and 1.8), caught by the bound that reads the scores by
    /// their means and spreads — full-batch GD's against Gaussian DP, DP-SGD's likelihood scores
    /// against its composition (θ above 1: less noise than claimed).
    #[test]
    fn half_the_noise_is_caught_by_the_gaussian_bound() {
        for (method, steps, extra) in [("filtered", 10, ""), ("sgd", 10, "sample_rate = 0.5")] {
            let r = audit(&config(method, steps, extra), Fault::HalfNoise);
            let g = r.groups[0].gaussian.unwrap();
            assert!(g.epsilon_lower > r.groups[0].claimed_epsilon, "{method}: {g:?}");
            if method == "sgd" {
                assert!(g.parameter > 1.0, "{g:?}");
            }
        }
    }

    #[test]
    fn an_unenforced_ledger_is_caught() {
        let r = audit(&config("filtered", 160, ""), Fault::IgnoreLedger);
        assert!(!r.consistent, "{:?}", bounds(&r));
        assert_eq!(r.groups[0].statistic, "all-steps");
    }

    /// Each tier's canaries against that tier's ε; the strict tier's canaries given the loose
    /// tier's budget (a hold-out that shifts rows, say) are caught.
    #[test]
    fn each_tier_is_audited_and_a_shifted_tier_is_caught() {
        let tiers = "[privacy.budgets]\nepsilons = [0.5, 8.0]\nshares = [0.5, 0.5]";
        let cfg = config_at(0.5, "filtered", 400, tiers);
        let r = audit(&cfg, Fault::None);
        assert_eq!(r.groups.len(), 2);
        assert!(r.consistent, "{:?}", bounds(&r));
        let r = audit(&cfg, Fault::ShiftTiers);
        assert!(!r.groups[0].consistent, "{:?}", bounds(&r));
    }

    #[test]
    fn non_private_runs_and_bad_counts_are_refused() {
        let cfg = config("filtered", 10, "");
        for m in [1, MAX_CANARIES + 1] {
            let e = audit_one_run(&cfg, &OneRunSettings { canaries: m, ..OneRunSettings::default() }).unwrap_err();
            assert!(e.to_string().contains("--canaries"), "{e}");
        }
        let text = "[model]\npreset = \"logistic\"\n[privacy]\nmethod = \"non-private\"\ndelta = 1e-5\nclip = 1.0\nworst_case_steps = 10\n[train]\nlr = 1.0\n";
        let cfg = TrainConfig::from_toml(text, &[]).unwrap().validate().unwrap();
        assert!(audit_one_run(&cfg, &OneRunSettings::default()).unwrap_err().to_string().contains("privacy.method"));
    }
}
