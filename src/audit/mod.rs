//! `dpgd audit`: an empirical lower bound on a run's ε from canaries, in the white-box threat
//! model of private GD (the adversary sees every noisy update), as in Nasr et al. 2023, "Tight
//! auditing of differentially private machine learning" ([NHSBTJCT23]).
//!
//! **The canary.** A training example whose gradient is a Dirac-like spike: an image with one
//! bright pixel that no other example lights, under a model whose parameters on that pixel
//! receive gradient from it alone. Its per-example gradient — computed by the real engine —
//! has a norm far above C, so the real clipping kernel clips it to min(C, √remaining) and the
//! real ledger charges it; the real noise is added to the sum. The auditor projects each noisy
//! sum on the canary's direction, exactly as a white-box adversary who knows every other
//! example would (they contribute exactly nothing there), and runs the whole training schedule
//! many times with the canary (world 1) and with its neighbour (world 0: the canary zeroed
//! out, or replaced by its opposite under `replace-one`).
//!
//! **The bound.** Two pre-registered statistics, the sum of the first k projections (the steps
//! the canary can afford) and the sum of all of them (which an unenforced ledger would inflate),
//! each turned into a lower bound on the Gaussian-DP μ and on ε by
//! [`dpgd_accounting::audit::audit_scores`] (threshold chosen on held-out trials, Clopper–Pearson
//! bounds on the rest) at half the failure probability each (Bonferroni). On a correct run the
//! bound is below the claimed ε and, with enough trials, within a factor of 2 of the training
//! mechanism's ε; a mechanism that adds half the noise, or lets the canary spend past its
//! budget, is caught.
//!
//! Each trial runs [`GradientPlan::gradient_sum`](crate::train::step::GradientPlan) and
//! [`add_noise`] — the trainer's own clip, charge and noise path —
//! on a dataset of eight 2 × 2 images, so thousands of trials of a 300-step schedule take
//! seconds. The model's parameters stay at zero (the learning rate plays no role in what one
//! step releases about the canary).
//!
//! [NHSBTJCT23]: https://arxiv.org/abs/2302.07956

pub mod one_run;

use serde::{Deserialize, Serialize};

use crate::accounting::audit::{AuditBound, AuditOptions, audit_scores};
use crate::accounting::filter::IndividualFilter;
use crate::accounting::{Neighbours, PrivateGd};
use crate::arch::{LayerSpec, ModelSpec};
use crate::data::{Normalize, Split};
use crate::error::{Error, Result};
use crate::noise::{NoiseSampler, Stream};
use crate::per_example::Network;
use crate::train::ValidConfig;
use crate::train::step::{Aggregation, GradientPlan, add_noise};

/// How an audit runs.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditSettings {
    /// Training schedules run per world (with and without the canary).
    pub trials: usize,
    /// Confidence of every reported lower bound.
    pub confidence: f64,
    #[cfg(test)]
    fault: Fault,
}

impl Default for AuditSettings {
    fn default() -> Self {
        Self {
            trials: 10_000,
            confidence: 0.95,
            #[cfg(test)]
            fault: Fault::None,
        }
    }
}

/// Deliberate bugs, to check that the audit catches them (test builds only).
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fault {
    None,
    /// Half the noise the accounting assumes.
    HalveNoise,
    /// A fresh ledger every step: the canary is never stopped.
    IgnoreLedger,
}

/// `audit.json`: what was claimed and what the audit found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AuditReport {
    /// The run's claimed ε (training and every scheduled release) at `delta`.
    pub claimed_epsilon: f64,
    /// The training mechanism's own ε at `delta` (what the canary can reveal).
    pub training_epsilon: f64,
    /// δ.
    pub delta: f64,
    /// The conversion of the claims.
    pub conversion: String,
    /// The neighbouring relation audited.
    pub neighbours: Neighbours,
    /// The noise sampler.
    pub noise: NoiseSampler,
    /// The best lower bound on ε (of the two statistics), under the Gaussian-DP model of the
    /// mechanism, holding with probability `confidence`.
    pub epsilon_lower_bound: f64,
    /// The distribution-free lower bound on ε (any (ε, δ)-DP mechanism).
    pub epsilon_lower_bound_distribution_free: f64,
    /// The lower bound on μ behind `epsilon_lower_bound`.
    pub mu_lower_bound: f64,
    /// The training mechanism's μ.
    pub training_mu: f64,
    /// Confidence of the bounds.
    pub confidence: f64,
    /// Trials per world.
    pub trials: usize,
    /// Steps per trial (the run's `max_steps`) and the canary's affordable steps k.
    pub steps: usize,
    /// k.
    pub worst_case_steps: usize,
    /// Which statistic gave the bound: `first-k` or `all-steps`.
    pub statistic: String,
    /// Each statistic's bound.
    pub bounds: Vec<StatisticBound>,
    /// Whether the lower bound stays at or below the claim (as it must for a correct run).
    pub consistent: bool,
    /// The scores of both worlds under the chosen statistic (for the plot).
    #[serde(skip)]
    pub scores: (Vec<f64>, Vec<f64>),
}

/// One statistic's audit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StatisticBound {
    /// `first-k` or `all-steps`.
    pub statistic: String,
    /// What [`audit_scores`] found.
    pub bound: AuditBound,
}

/// The canary's pixel and the parameters it alone moves: W[0, 3] and W[1, 3].
const CANARY_PIXEL: usize = 3;
const EXAMPLES: usize = 8;

/// The audit's dataset: example 0 is the canary (or its neighbour); examples 1.. light only
/// pixels 0–2, so their gradients on the canary's parameters are exactly zero.
fn dataset(world_in: bool, neighbours: Neighbours) -> Split {
    let mut images = vec![0u8; EXAMPLES * 4];
    let mut labels = vec![0u8; EXAMPLES];
    for i in 1..EXAMPLES {
        images[i * 4 + (i % 3)] = 60 + 20 * i as u8;
        images[i * 4 + ((i + 1) % 3)] = 30;
        labels[i] = (i % 2) as u8;
    }
    match (world_in, neighbours) {
        (true, _) => images[CANARY_PIXEL] = 255,
        // Zero-out: a null example (a blank image contributes a zero gradient).
        (false, Neighbours::ZeroOut) => {}
        // Replace-one: the canary's opposite, the same image with the other label.
        (false, Neighbours::ReplaceOne) => {
            images[CANARY_PIXEL] = 255;
            labels[0] = 1;
        }
    }
    Split { images, features: Vec::new(), labels, rows: 2, cols: 2, channels: 1 }
}

/// Audits the privacy of `cfg`'s training mechanism.
///
/// # Errors
/// A non-private configuration (nothing to audit), or invalid settings.
pub fn audit(cfg: &ValidConfig, settings: &AuditSettings) -> Result<AuditReport> {
    let c = cfg.config();
    let p = &c.privacy;
    let sigma =
        cfg.sigma().ok_or_else(|| Error::config("privacy.method", "a non-private run has no guarantee to audit"))?;
    if cfg.b_norm().is_none() {
        return Err(Error::config(
            "privacy.method",
            "the audit replays full-batch GD's ledger; it does not audit DP-SGD (method = \"sgd\")",
        ));
    }
    if p.budgets.is_some() {
        return Err(Error::config(
            "privacy.budgets",
            "the audit replays one budget for all; audit each tier on its own (--unset privacy.budgets --set \
             privacy.epsilon=<the tier's epsilon>)",
        ));
    }
    if settings.trials < 100 || settings.trials > 10_000_000 {
        return Err(Error::config("--trials", "give between 100 and 10,000,000 trials"));
    }
    let k = cfg.worst_case_steps();
    let scores = run_worlds(cfg, settings, sigma * p.clip)?;
    let each = 1.0 - (1.0 - settings.confidence) / 2.0;
    let options = AuditOptions { confidence: each, delta: cfg.delta(), selection_fraction: 0.1 };
    let mut bounds = Vec::new();
    for (i, name) in ["first-k", "all-steps"].into_iter().enumerate() {
        let bound = audit_scores(&scores[0][i], &scores[1][i], &options)?;
        bounds.push(StatisticBound { statistic: name.into(), bound });
    }
    let best = bounds
        .iter()
        .enumerate()
        .max_by(|a, b| a.1.bound.epsilon_lower_gdp.total_cmp(&b.1.bound.epsilon_lower_gdp))
        .map_or(0, |(i, _)| i);
    let run = PrivateGd::new(sigma, p.clip, k as f64)?.with_neighbours(p.neighbours)?;
    let training_epsilon = p.noise.epsilon(run.gaussian_dp(), cfg.delta(), p.conversion)?;
    let claimed = cfg.epsilon().unwrap_or(f64::INFINITY);
    let b = bounds[best].bound;
    let [s_in, s_out] = scores;
    Ok(AuditReport {
        claimed_epsilon: claimed,
        training_epsilon,
        delta: p.delta,
        conversion: p.conversion.to_string(),
        neighbours: p.neighbours,
        noise: p.noise,
        epsilon_lower_bound: b.epsilon_lower_gdp,
        epsilon_lower_bound_distribution_free: bounds.iter().map(|s| s.bound.epsilon_lower).fold(0.0, f64::max),
        mu_lower_bound: b.mu_lower,
        training_mu: run.gaussian_dp().mu(),
        confidence: settings.confidence,
        trials: settings.trials,
        steps: cfg.max_steps(),
        worst_case_steps: k,
        statistic: bounds[best].statistic.clone(),
        consistent: b.epsilon_lower_gdp <= claimed,
        scores: (s_in[best].clone(), s_out[best].clone()),
        bounds,
    })
}

/// Every trial of both worlds: `[world][statistic]` scores (world 0 with the canary).
fn run_worlds(cfg: &ValidConfig, settings: &AuditSettings, noise_std: f64) -> Result<[[Vec<f64>; 2]; 2]> {
    let p = &cfg.config().privacy;
    let steps = cfg.max_steps();
    let spec = ModelSpec {
        input: [1, 2, 2],
        classes: 2,
        layers: vec![
            LayerSpec::Flatten(crate::arch::kinds::Flatten),
            LayerSpec::Linear(crate::arch::kinds::Linear { out_features: 2, bias: false }),
        ],
    };
    let net = Network::new(&spec).map_err(|e| Error::State(e.to_string()))?;
    // The canary's gradient direction (θ = 0: softmax (½, ½), label 0): (−1, +1)/√2 on W[·, 3].
    let direction =
        [(CANARY_PIXEL, -std::f64::consts::FRAC_1_SQRT_2), (4 + CANARY_PIXEL, std::f64::consts::FRAC_1_SQRT_2)];
    let aggregation = Aggregation::for_run(cfg, &net, EXAMPLES)?;
    let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build().map_err(|e| Error::Environment(e.to_string()))?;
    let mut scores: [[Vec<f64>; 2]; 2] = Default::default(); // [world][statistic]
    for (w, world_in) in [true, false].into_iter().enumerate() {
        let data = dataset(world_in, p.neighbours);
        // Normalised, the canary's pixel is 100: its gradient norm is 50√2, far above any clip
        // the audit is meant for.
        let plan = GradientPlan::new(net.clone(), data.head(0), Normalize::all(0.0, 0.01), aggregation, EXAMPLES);
        let theta = vec![0.0f32; net.num_params()];
        for i in 0..settings.trials {
            // Every trial draws its own noise: with a fixed `train.seed` (reproducible audits, for
            // tests) each trial and step has its own stream; otherwise each is keyed from the OS.
            let first_stream = ((w * settings.trials + i) * steps) as u64;
            let (first_k, all) =
                pool.install(|| trial(&plan, &theta, cfg, settings, noise_std, &direction, first_stream))?;
            scores[w][0].push(first_k);
            scores[w][1].push(all);
        }
    }
    Ok(scores)
}

/// `audit.png`: the distribution of the chosen statistic with and without the canary, and the
/// claimed and audited ε in the title.
///
/// # Errors
/// If the image cannot be written.
pub fn plot(report: &AuditReport, path: &std::path::Path) -> Result<()> {
    use crate::plot::{Panel, Series, SeriesLabelPosition, YRange, line_charts};
    let (a, b) = &report.scores;
    let hist = crate::plot::densities(a, b);
    let panel = Panel {
        title: format!(
            "audit: claimed eps {:.3} (training {:.3}), audited lower bound {:.3} at {:.0}% confidence",
            report.claimed_epsilon,
            report.training_epsilon,
            report.epsilon_lower_bound,
            100.0 * report.confidence
        ),
        x_label: format!("statistic `{}` (projection of the noisy updates on the canary, / σC)", report.statistic),
        y_label: "density".into(),
        series: vec![
            Series { label: "with the canary".into(), points: hist[0].clone() },
            Series { label: format!("without ({})", report.neighbours), points: hist[1].clone() },
        ],
        markers: vec![],
        y_range: YRange::FromZero,
        legend: SeriesLabelPosition::UpperLeft,
    };
    line_charts(path, &[panel])
}

/// One training schedule: returns the two statistics, each normalised to unit variance.
fn trial(
    plan: &GradientPlan<'_>,
    theta: &[f32],
    cfg: &ValidConfig,
    settings: &AuditSettings,
    noise_std: f64,
    direction: &[(usize, f64); 2],
    first_stream: u64,
) -> Result<(f64, f64)> {
    let (k, steps) = (cfg.worst_case_steps(), cfg.max_steps());
    let b_norm = cfg.b_norm().unwrap_or(f64::MAX);
    let mut ledger = IndividualFilter::new(EXAMPLES, b_norm)?;
    let std = fault_noise(settings, noise_std);
    let (mut first_k, mut all) = (0.0, 0.0);
    for t in 1..=steps {
        if fault_resets_ledger(settings) {
            ledger = IndividualFilter::new(EXAMPLES, b_norm)?;
        }
        let (sum, _) = plan.gradient_sum(theta, &mut ledger, t)?;
        let mut rng = cfg.noise_seed().rng(Stream::update(first_stream as usize + t))?;
        let noisy = add_noise(sum, cfg.config().privacy.noise, std, &mut rng)?;
        let o: f64 = direction.iter().map(|&(j, u)| f64::from(noisy[j]) * u).sum::<f64>() / noise_std;
        all += o;
        if t <= k {
            first_k += o;
        }
    }
    Ok((first_k / (k.min(steps) as f64).sqrt(), all / (steps as f64).sqrt()))
}

#[cfg(test)]
fn fault_noise(settings: &AuditSettings, std: f64) -> f64 {
    if settings.fault == Fault::HalveNoise { std / 2.0 } else { std }
}
#[cfg(not(test))]
fn fault_noise(_: &AuditSettings, std: f64) -> f64 {
    std
}
#[cfg(test)]
fn fault_resets_ledger(settings: &AuditSettings) -> bool {
    settings.fault == Fault::IgnoreLedger
}
#[cfg(not(test))]
fn fault_resets_ledger(_: &AuditSettings) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::TrainConfig;

    /// ε = 1 at δ = 1e-5, k = 10 steps, run to 4k: the canary is stopped after k steps.
    fn config(extra: &str) -> ValidConfig {
        let text = format!(
            "[model]\npreset = \"logistic\"\n[privacy]\nmethod = \"filtered\"\nepsilon = 1.0\ndelta = 1e-5\nclip = 1.0\n\
             worst_case_steps = 10\n{extra}\n[train]\nlr = 1.0\nmax_steps = 40\nseed = 1\n"
        );
        TrainConfig::from_toml(&text, &[]).unwrap().validate().unwrap()
    }

    fn settings(fault: Fault) -> AuditSettings {
        AuditSettings { trials: 10_000, confidence: 0.95, fault }
    }

    #[test]
    fn dp_sgd_is_refused_not_audited_as_full_batch_gd() {
        let text = "[model]\npreset = \"logistic\"\n[privacy]\nmethod = \"sgd\"\nsample_rate = 0.1\nsigma = 1.0\n\
                    delta = 1e-5\nclip = 1.0\nworst_case_steps = 10\n[train]\nlr = 1.0\nseed = 1\n";
        let cfg = TrainConfig::from_toml(text, &[]).unwrap().validate().unwrap();
        let e = audit(&cfg, &settings(Fault::None)).unwrap_err().to_string();
        assert!(e.contains("privacy.method") && e.contains("DP-SGD"), "{e}");
    }

    /// The audit replays one budget: with tiers its claim (the loosest tier's ε) would not be
    /// the canary's, so it is refused, naming how to audit each tier.
    #[test]
    fn personalized_budgets_are_refused_not_audited_at_one_budget() {
        let cfg = config("[privacy.budgets]\nepsilons = [1.0, 3.0]\nshares = [0.5, 0.5]");
        let e = audit(&cfg, &settings(Fault::None)).unwrap_err().to_string();
        assert!(e.contains("privacy.budgets") && e.contains("each tier"), "{e}");
    }

    #[test]
    fn a_correct_run_is_audited_below_its_claim_and_within_a_factor_of_two() {
        for extra in ["", "neighbours = \"replace-one\"", "noise = \"discrete-gaussian\"\nconversion = \"cks\""] {
            let r = audit(&config(extra), &settings(Fault::None)).unwrap();
            assert!(r.consistent && r.epsilon_lower_bound <= r.claimed_epsilon, "{extra}: {r:?}");
            assert!(
                r.epsilon_lower_bound >= 0.5 * r.training_epsilon,
                "{extra}: not tight: {} vs {}",
                r.epsilon_lower_bound,
                r.training_epsilon
            );
        }
    }

    #[test]
    fn half_the_noise_is_caught() {
        let r = audit(&config(""), &settings(Fault::HalveNoise)).unwrap();
        assert!(r.epsilon_lower_bound > r.claimed_epsilon, "{} vs {}", r.epsilon_lower_bound, r.claimed_epsilon);
        assert!(!r.consistent);
    }

    #[test]
    fn an_unenforced_ledger_is_caught() {
        let r = audit(&config(""), &settings(Fault::IgnoreLedger)).unwrap();
        assert!(r.epsilon_lower_bound > r.claimed_epsilon, "{} vs {}", r.epsilon_lower_bound, r.claimed_epsilon);
        assert_eq!(r.statistic, "all-steps");
    }
}
