//! A one-run audit of a training run (`[audit] canaries = M`; Steinke, Nasr & Jagielski 2023,
//! "Privacy auditing with one (1) training run"): M gradient canaries train beside the examples,
//! and at the end the run bounds its own ε from what its noisy updates show about them.
//!
//! **The canaries.** Canary i is a gradient of norm 2C on a coordinate of its own, appended to θ
//! after the model's P parameters (the model never reads them, and no example's gradient touches
//! them); with `audit.gradient_norms`, the canaries of each tier are dealt in turn to groups of
//! gradient norm s·C, a group below the clip audited against the ε of what it spent. A coin of
//! probability ½ (from the run's noise seed, its own stream) includes it; an excluded canary is
//! its neighbour: a zero gradient (zero-out) or the opposite one (replace-one). Every step, each
//! canary goes through the step's own rules as an example does — the method's sampling (at its
//! rate, in its partitions; the canaries' flags from their own stream), its charge rule, the clip
//! kernel on the run's sum grid, a ledger at its tier's budget (tiers dealt in turn) that stops
//! it — and the method's noise and update act on θ and the canaries' coordinates together
//! ([`crate::train::method::StepRule`]).
//!
//! **What it leaves alone.** The examples' ledger, sample, divisor and counts are the run's
//! without canaries, and the noise of the model's coordinates is drawn first from the same
//! stream: with a fixed seed an audited run trains the same model, bit for bit, and its
//! publishable files are the unaudited run's (tested). The canaries' coordinates depend on no
//! example, so releasing them costs the examples nothing.
//!
//! **The guess.** A canary's score is minus its coordinate of θ — after step k (the steps every
//! example can afford) and at the end —, a positive combination of its noisy sums under any
//! learning-rate schedule and momentum; [`group_audits`] turns each tier's scores into lower
//! bounds on ε against that tier's guaranteed ε: two statistics, several numbers of guesses and
//! two analyses (Steinke et al.'s (ε, δ) one and the f-DP one of Mahloujifar, Melis & Chaudhuri
//! 2025), a union bound over all. The report holds the coins, so it is confidential.
//!
//! **What it cannot see.** The canaries' gradients are not computed by the engine (an engine
//! that computes a wrong gradient or norm is the engine contract test's to catch), and their
//! tiers are the audit's, not read from the data (the examples' tiers are the composition test's
//! to check). On several ranks the canaries live on rank 0, beside the noise and the state, and
//! the audit is the one-process run's, bit for bit (tested). One-run bounds are loose at small
//! ε: a correct ε = 2 run is bounded at 0.58–0.85 with 2,000–5,000 canaries.

use rand::RngExt as _;
use serde::{Deserialize, Serialize};

use super::config::ValidConfig;
use super::step::{Aggregation, ClippedSum, UpdateRule};
use crate::accounting::Neighbours;
use crate::accounting::audit::fdp::{self, GaussianCurve, ProfileCurve};
use crate::accounting::audit::likelihood::{SampledCanaries, StepLikelihood, standardized_difference_lower};
use crate::accounting::audit::one_run::{Guesses, OneRunBound, audit_guesses};
use crate::accounting::convert::gaussian_epsilon;
use crate::accounting::filter::{Budgets, IndividualFilter};
use crate::error::{Error, Result};
use crate::noise::NoiseSampler;
use crate::noise::Stream;

/// The canaries' part of the durable state (in the state file's metadata).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CanaryState {
    /// The seed of the coins.
    pub coin_seed: u64,
    /// The canaries' coordinates of θ.
    pub theta: Vec<f32>,
    /// Those coordinates after step k (empty before it).
    pub at_k: Vec<f32>,
    /// Each canary's spent budget.
    pub spent: Vec<f64>,
    /// The method's whole state over θ and the canaries' coordinates (a momentum buffer; empty
    /// without): in an audited run it is kept here, not in the state's own field.
    pub velocity: Vec<f32>,
    /// A sampled method's per-step log-likelihood ratios so far, one per canary
    /// ([`Canaries::absorb`]; absent: not kept, as in states of earlier versions).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub likelihood: Option<Vec<f64>>,
}

/// The canaries of a run.
#[derive(Debug)]
pub struct Canaries {
    coin_seed: u64,
    included: Vec<bool>,
    tier_of: Vec<u8>,
    /// Each canary's gradient norm, an index of `norms`.
    norm_of: Vec<u8>,
    /// `audit.gradient_norms`: fractions of the clip.
    norms: Vec<f64>,
    ledger: IndividualFilter,
    theta: Vec<f32>,
    at_k: Vec<f32>,
    /// Each canary's Σₜ of the log-likelihood ratio of its step-t noisy sum, for a sampled
    /// method with independent noise (`None`: not kept).
    likelihood: Option<Vec<f64>>,
}

impl Canaries {
    /// The `m` canaries of `cfg`'s run at its start: coins drawn, nothing spent.
    ///
    /// # Errors
    /// A failing random source; a ledger the tiers cannot build.
    pub fn new(cfg: &ValidConfig, m: usize) -> Result<Self> {
        let coin_seed = cfg.noise_seed().rng(Stream::canaries())?.random::<u64>();
        let likelihood = cfg.accounting().and_then(|a| a.sample_rate()).map(|_| vec![0.0; m]);
        Self::build(cfg, m, coin_seed, (vec![0.0; m], vec![0.0; m], Vec::new()), likelihood)
    }

    /// The canaries of a resumed run, from its saved `state` (input: every length is checked).
    ///
    /// # Errors
    /// [`Error::State`] naming what does not fit `m` canaries.
    pub fn restore(cfg: &ValidConfig, m: usize, state: CanaryState) -> Result<Self> {
        // The method's state (`velocity`) is the trainer's to check and restore.
        let CanaryState { coin_seed, theta, at_k, spent, velocity: _, likelihood } = state;
        if theta.len() != m
            || spent.len() != m
            || !(at_k.is_empty() || at_k.len() == m)
            || likelihood.as_ref().is_some_and(|l| l.len() != m || l.iter().any(|x| !x.is_finite()))
        {
            return Err(Error::State(format!(
                "the audit's state holds {} coordinates, {} budgets and {} values after step k for {m} canaries",
                theta.len(),
                spent.len(),
                at_k.len()
            )));
        }
        Self::build(cfg, m, coin_seed, (theta, spent, at_k), likelihood)
    }

    fn build(
        cfg: &ValidConfig,
        m: usize,
        coin_seed: u64,
        (theta, spent, at_k): (Vec<f32>, Vec<f64>, Vec<f32>),
        likelihood: Option<Vec<f64>>,
    ) -> Result<Self> {
        let mut coins = <rand_chacha::ChaCha20Rng as rand::SeedableRng>::seed_from_u64(coin_seed);
        let included: Vec<bool> = (0..m).map(|_| coins.random_bool(0.5)).collect();
        let tiers = cfg.tiers();
        let n_tiers = tiers.len().max(1);
        let tier_of: Vec<u8> = (0..m).map(|i| (i % n_tiers) as u8).collect();
        let norms = cfg.config().audit.as_ref().map_or_else(|| vec![1.0], |a| a.gradient_norms.clone());
        let norm_of: Vec<u8> = (0..m).map(|i| ((i / n_tiers) % norms.len().max(1)) as u8).collect();
        let budgets = if tiers.is_empty() {
            Budgets::uniform(cfg.ledger_budget().unwrap_or(f64::MAX))?
        } else {
            Budgets::tiered(tiers.iter().map(|t| t.budget).collect(), tier_of.clone())?
        };
        let ledger = IndividualFilter::from_spent_with(budgets, spent)
            .map_err(|e| Error::State(format!("the audit's ledger: {e}")))?;
        Ok(Self { coin_seed, included, tier_of, norm_of, norms, ledger, theta, at_k, likelihood })
    }

    /// M.
    #[must_use]
    pub fn len(&self) -> usize {
        self.included.len()
    }

    /// Whether there are none (never: an audit has at least 2).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.included.is_empty()
    }

    /// What a resume needs, with the method's whole state `velocity`.
    #[must_use]
    pub fn state(&self, velocity: &[f32]) -> CanaryState {
        CanaryState {
            coin_seed: self.coin_seed,
            theta: self.theta.clone(),
            at_k: self.at_k.clone(),
            spent: self.ledger.spent_all().to_vec(),
            velocity: velocity.to_vec(),
            likelihood: self.likelihood.clone(),
        }
    }

    /// Step `step`'s clipped sum `sum` of the examples with the canaries' part appended: each
    /// canary sampled as the method samples, charged by its rule to its own ledger and clipped by
    /// the step's kernel onto the same grid.
    ///
    /// # Errors
    /// A failing random source; a sum that is not on a grid (a non-private run).
    pub fn add_to(
        &mut self,
        cfg: &ValidConfig,
        aggregation: Aggregation,
        step: usize,
        sum: ClippedSum,
    ) -> Result<ClippedSum> {
        let ClippedSum::Grid { mut values, gamma } = sum else {
            return Err(Error::State("canaries in a run without a clip".into()));
        };
        let accounting = cfg.accounting().ok_or_else(|| Error::State("canaries in a non-private run".into()))?;
        // Sampled as the method samples its examples (at its rate, in its partitions; or all).
        let mut rng = cfg.noise_seed().rng(Stream::canary_sample(step))?;
        let flags = accounting.sample_with(step, self.len(), &mut rng);
        let selection = accounting.selection(flags.as_deref());
        #[cfg(test)]
        if tests::FORGET_SPENT.with(std::cell::Cell::get) {
            self.ledger = IndividualFilter::from_spent_with(self.ledger.budgets().clone(), vec![0.0; self.len()])?;
        }
        let clip = cfg.config().privacy.clip;
        let gradients: Vec<f32> = (0..self.len())
            .map(|i| {
                let sign = match (self.included[i], cfg.config().privacy.neighbours) {
                    (true, _) => 1.0,
                    (false, Neighbours::ZeroOut) => 0.0,
                    (false, Neighbours::ReplaceOne) => -1.0,
                };
                // A full-norm canary's gradient is beyond the clip (2C), a smaller one inside it.
                let norm = self.norms[usize::from(self.norm_of[i])];
                sign * if norm >= 1.0 { (2.0 * clip) as f32 } else { (norm * clip) as f32 }
            })
            .collect();
        #[cfg(test)]
        let before = self.ledger.spent_all().to_vec();
        values.extend(super::step::canary_sum(aggregation, &mut self.ledger, selection, &gradients)?);
        #[cfg(test)]
        if tests::CHARGE_SQUARED.with(std::cell::Cell::get) {
            // The bug: a canary of norm s·C charged s⁴C² a step instead of s²C².
            let spent: Vec<f64> = (0..self.len())
                .map(|i| {
                    let s = self.norms[usize::from(self.norm_of[i])].min(1.0);
                    before[i] + (self.ledger.spent_all()[i] - before[i]) * s * s
                })
                .collect();
            self.ledger = IndividualFilter::from_spent_with(self.ledger.budgets().clone(), spent)?;
        }
        Ok(ClippedSum::Grid { values, gamma })
    }

    /// θ with the canaries' coordinates appended, for the method's update.
    #[must_use]
    pub fn extend(&self, theta: &[f32]) -> Vec<f32> {
        [theta, &self.theta].concat()
    }

    /// Takes the canaries' coordinates back from the updated `extended` θ after step `step`
    /// (keeping them at step `k`), leaving the model's P. With `released` — the step's update
    /// rule and the method's state over the canaries before it and over everything after it,
    /// where the method's noise is drawn for each step alone — each canary's noisy sum of this
    /// step is read back from its coordinate's move and its log-likelihood ratio added.
    pub fn absorb(
        &mut self,
        extended: &mut Vec<f32>,
        (p, step, k): (usize, usize, usize),
        cfg: &ValidConfig,
        released: Option<(UpdateRule, &[f32], &[f32])>,
    ) {
        let moved = extended.split_off(p);
        match (released, &mut self.likelihood, cfg.accounting()) {
            (Some((update, before, after)), Some(sums), Some(a)) if update.lr > 0.0 => {
                let (q, sigma) = (a.sample_rate().unwrap_or(1.0), a.sigma());
                let replace = cfg.config().privacy.neighbours == Neighbours::ReplaceOne;
                let unit = sigma * cfg.config().privacy.clip;
                match StepLikelihood::new(q, 1.0 / sigma, replace) {
                    Ok(ratio) => {
                        for (j, total) in sums.iter_mut().enumerate() {
                            let noisy =
                                released_sum(update, (self.theta[j], moved[j]), (before.get(j), after.get(p + j)));
                            *total += ratio.at(noisy / unit);
                        }
                    }
                    Err(_) => self.likelihood = None,
                }
            }
            // A step whose noisy sums cannot be read back: the statistic is not kept.
            _ => self.likelihood = None,
        }
        self.theta = moved;
        if step == k {
            self.at_k.clone_from(&self.theta);
        }
    }

    /// The canaries' groups: each tier's (the run's without tiers) at its guaranteed ε, or with
    /// several gradient norms, each tier's canaries of each norm — a group below the clip at the
    /// ε of the most any of them spent ([`RunAccounting::spent_epsilon`], never above its
    /// tier's).
    ///
    /// [`RunAccounting::spent_epsilon`]: crate::train::method::RunAccounting::spent_epsilon
    fn groups(&self, cfg: &ValidConfig) -> Vec<CanaryGroup> {
        let tiers = tier_groups(cfg, &self.tier_of);
        if self.norms.len() == 1 {
            return tiers;
        }
        let spent = self.ledger.spent_all();
        let mut out = Vec::new();
        for tier in tiers {
            for (j, &norm) in self.norms.iter().enumerate() {
                let members: Vec<usize> =
                    tier.members.iter().copied().filter(|&i| usize::from(self.norm_of[i]) == j).collect();
                let most = members.iter().map(|&i| spent[i]).fold(0.0, f64::max);
                let own = (norm < 1.0)
                    .then(|| cfg.accounting().and_then(|a| a.spent_epsilon(cfg, most)))
                    .flatten()
                    .map_or(tier.claimed, |e| e.min(tier.claimed));
                let name = format!("{}, gradients of {norm} C", tier.name);
                out.push(CanaryGroup { name, claimed: own, gradient_norm: Some(norm), tier: tier.tier, members });
            }
        }
        out
    }

    /// The audit after the run's `steps` steps: each group's bound at `confidence` against its
    /// claim.
    ///
    /// # Errors
    /// As [`group_audits`].
    pub fn report(&self, cfg: &ValidConfig, steps: usize, confidence: f64) -> Result<OneRunReport> {
        let end: Vec<f64> = self.theta.iter().map(|&x| -f64::from(x)).collect();
        let first_k =
            if self.at_k.is_empty() { end.clone() } else { self.at_k.iter().map(|&x| -f64::from(x)).collect() };
        let likelihood = self.likelihood.as_deref().filter(|_| steps > 0).map(|l| (l, steps));
        let scores = Scores::white_box(&first_k, &end, likelihood);
        let groups = group_audits(cfg, &scores, &self.included, &self.groups(cfg), confidence)?;
        Ok(OneRunReport {
            threat_model: "white-box, every noisy update, gradient canaries on coordinates of their own".into(),
            method: cfg.method().describe().into(),
            canaries: self.len(),
            steps,
            worst_case_steps: cfg.worst_case_steps(),
            neighbours: cfg.config().privacy.neighbours,
            consistent: groups.iter().all(|g| g.consistent),
            groups,
            scores: end.into_iter().zip(self.included.iter().copied()).collect(),
            included: self.included.clone(),
        })
    }
}

/// `audit.png` of a one-run audit: the canaries' all-steps scores, included and excluded, and
/// each group's claim and bound in the title.
///
/// # Errors
/// If the image cannot be written.
pub fn plot(report: &OneRunReport, path: &std::path::Path) -> Result<()> {
    plot_scores(report, path, "end-of-run score (the noisy updates on the canary's coordinate; higher: more likely in)")
}

/// [`plot`] with the scores described by `x_label`.
///
/// # Errors
/// If the image cannot be written.
pub fn plot_scores(report: &OneRunReport, path: &std::path::Path, x_label: &str) -> Result<()> {
    use crate::plot::{Panel, Series, SeriesLabelPosition, YRange, line_charts};
    let pick = |inc: bool| -> Vec<f64> { report.scores.iter().filter(|s| s.1 == inc).map(|s| s.0).collect() };
    let [a, b] = crate::plot::densities(&pick(true), &pick(false));
    let claims: Vec<String> = report
        .groups
        .iter()
        .map(|g| {
            let fdp = g.fdp.as_ref().map_or(String::new(), |f| format!(" (f-DP >= {:.3})", f.epsilon_lower));
            format!("{}: claimed {:.3}, audited >= {:.3}{fdp}", g.group, g.claimed_epsilon, g.bound.epsilon_lower)
        })
        .collect();
    let panel = Panel {
        title: format!(
            "one-run audit, {} canaries ({}% confidence): {}",
            report.canaries,
            confidence_percent(report),
            claims.join("; ")
        ),
        x_label: x_label.into(),
        y_label: "density".into(),
        series: vec![
            Series { label: "included canaries".into(), points: a },
            Series { label: format!("excluded ({})", report.neighbours), points: b },
        ],
        markers: vec![],
        y_range: YRange::FromZero,
        legend: SeriesLabelPosition::UpperLeft,
    };
    line_charts(path, &[panel])
}

fn confidence_percent(report: &OneRunReport) -> f64 {
    report.groups.first().map_or(95.0, |g| 100.0 * g.bound.confidence)
}

/// `audit.json` of a one-run audit: what was claimed, what the canaries showed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OneRunReport {
    /// The threat model, in words.
    pub threat_model: String,
    /// The method audited, in words.
    pub method: String,
    /// M.
    pub canaries: usize,
    /// The steps run.
    pub steps: usize,
    /// k.
    pub worst_case_steps: usize,
    /// The neighbouring relation (an excluded canary is this neighbour of an included one).
    pub neighbours: Neighbours,
    /// One audit per tier (or one for the run).
    pub groups: Vec<GroupAudit>,
    /// Whether every group's bound stays at or below its claim (as it must for a correct run,
    /// but for probability 1 − confidence).
    pub consistent: bool,
    /// The coins: which canaries were included (confidential: with them, the scores say how
    /// each canary was guessed).
    pub included: Vec<bool>,
    /// Each canary's end-of-run score and whether it was included, for the plot.
    #[serde(skip)]
    pub scores: Vec<(f64, bool)>,
}

/// The audit of one group's canaries: a tier's (or the run's), or a tier's of one gradient norm.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GroupAudit {
    /// "the run" or "tier epsilon = …".
    pub group: String,
    /// The ε the accountant claims for these canaries at the run's δ.
    pub claimed_epsilon: f64,
    /// Their gradient norm as a fraction of the clip, where the audit has several
    /// (`audit.gradient_norms`): below 1, the claim is the ε of what they spent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gradient_norm: Option<f64>,
    /// Their tier's index in `privacy.budgets` (none without tiers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<usize>,
    /// The canaries of the group.
    pub canaries: usize,
    /// How many of them the coin included.
    pub included: usize,
    /// The best statistic's bound: `first-k`, `all-steps` or `likelihood`.
    pub statistic: String,
    /// The lower bound and every test behind it.
    pub bound: OneRunBound,
    /// Whether the bound is at most the claim, and the f-DP analysis's claim stands.
    pub consistent: bool,
    /// The tighter bound that reads the canaries' scores by their means and spreads (not
    /// distribution-free: [`GaussianAudit`]). For a method without sampling, the first-k scores
    /// of canaries at the clip (all spent by step k) or the all-steps scores of a group below it
    /// (which goes on spending after k), against μ-Gaussian DP; for DP-SGD, the likelihood
    /// scores against the run's steps with their noise scaled. `None` where neither applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gaussian: Option<GaussianAudit>,
    /// The f-DP analysis of the same guesses (Mahloujifar, Melis & Chaudhuri 2025;
    /// [`fdp`]): distribution-free, it tests the claim's whole trade-off curve, not one (ε, δ).
    /// `None` for the discrete Gaussian (whose curve is not the family's), for a sampled
    /// method's tier or gradient-norm group (whose curve the run's composition is not), for
    /// DP-SGD with individual accounting (a Rényi filter's guarantee at one order has no curve),
    /// and where the family's curves cannot be computed (the PLD accountant refuses a member).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fdp: Option<FdpAudit>,
}

/// A bound from the f-DP analysis ([`fdp`]): the guesses of every statistic at every share of
/// [`fdp::GUESS_SHARES`] (eight tests a statistic), each at its share of the analysis's
/// 1 − confidence, against a family of claims.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FdpAudit {
    /// `gaussian-dp` (a method without sampling: the claim is μ-Gaussian DP) or `composition` (a
    /// sampled method: the claim is the run's composition — its training and releases — with
    /// every noise multiplier divided by θ, its privacy profile by the PLD accountant).
    pub family: String,
    /// The lower bound on the family's parameter: μ, or θ (the run leaks more than its claim
    /// with every noise multiplier divided by any θ below this; above 1, the claim is refuted).
    pub parameter: f64,
    /// The ε at the run's δ of the family's member at that bound (`composition`: by the PLD
    /// accountant, [`fdp::event_epsilon`]).
    pub epsilon_lower: f64,
    /// Whether the claim stands: the bound's ε at most the group's claimed ε (`gaussian-dp`), θ
    /// at most 1 (`composition`).
    pub consistent: bool,
}

/// A bound from the canaries' scores read by their means and spreads: a lower confidence bound
/// on their standardised difference ([`standardized_difference_lower`]: the central limit
/// theorem over the canaries, asymptotic, not distribution-free), turned into a bound on the
/// family of the claim.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GaussianAudit {
    /// `gaussian-dp`: a method without sampling, whose first-k (or all-steps) scores are
    /// Gaussian with one variance and standardised difference μ, the claim's Gaussian-DP
    /// parameter. `composition`: DP-SGD, whose likelihood scores have the standardised
    /// difference of [`SampledCanaries::difference`] at the run's noise scaled by 1/θ (Agrawal et
    /// al. 2026's Gaussian view of a sampled run's canary signals).
    #[serde(default)]
    pub family: GaussianFamily,
    /// The lower bound on the family's parameter: μ, or θ (the run behaves as if its noise were
    /// at most σ/θ; above 1, less noise than claimed).
    #[serde(alias = "mu_lower")]
    pub parameter: f64,
    /// Its ε at the run's δ: the exact Gaussian-DP curve's at μ, or the PLD accountant's of the
    /// canaries' steps at noise σ/θ.
    pub epsilon_lower: f64,
    /// `composition`: the PLD accountant's ε of the canaries' steps as claimed (θ = 1), the most
    /// an audit of them can show. The run's claim is larger where its conversion is looser (the
    /// Rényi DP one) or its releases add to it, and that gap is the accounting's, not the audit's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epsilon_as_claimed: Option<f64>,
}

/// The family a [`GaussianAudit`] bounds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum GaussianFamily {
    /// μ-Gaussian DP.
    #[default]
    GaussianDp,
    /// The canaries' steps of Poisson-sampled Gaussian noise, the noise divided by θ.
    Composition,
}

impl GaussianFamily {
    /// Its parameter's name, as the reports print it.
    #[must_use]
    pub fn parameter(self) -> &'static str {
        match self {
            Self::GaussianDp => "mu",
            Self::Composition => "noise divided by theta, theta",
        }
    }
}

/// Canaries audited together against one claim.
#[derive(Debug, Clone, PartialEq)]
pub struct CanaryGroup {
    /// "the run", "tier epsilon = …", with the gradient norm where there are several.
    pub name: String,
    /// The ε the accountant claims for each of them at the run's δ.
    pub claimed: f64,
    /// Their gradient norm as a fraction of the clip, where the audit has several.
    pub gradient_norm: Option<f64>,
    /// Their tier's index (none without tiers).
    pub tier: Option<usize>,
    /// Their indices.
    pub members: Vec<usize>,
}

/// One group per tier (one for a run without tiers), canary i in tier `tier_of[i]`, each at its
/// tier's guaranteed ε (the run's headline ε without tiers).
#[must_use]
pub fn tier_groups(cfg: &ValidConfig, tier_of: &[u8]) -> Vec<CanaryGroup> {
    let tiers = cfg.tiers();
    let claims: Vec<(String, f64)> = if tiers.is_empty() {
        vec![("the run".into(), cfg.epsilon().unwrap_or(f64::INFINITY))]
    } else {
        tiers.iter().map(|t| (format!("tier epsilon = {}", t.epsilon), t.guaranteed_epsilon)).collect()
    };
    claims
        .into_iter()
        .enumerate()
        .map(|(j, (name, claimed))| CanaryGroup {
            name,
            claimed,
            gradient_norm: None,
            tier: (!tiers.is_empty()).then_some(j),
            members: (0..tier_of.len()).filter(|&i| usize::from(tier_of[i]) == j).collect(),
        })
        .collect()
}

/// Every canary's scores, higher: more likely included — each statistic fixed before the run.
#[derive(Debug, Clone)]
pub struct Scores<'a> {
    /// Each statistic with its name, in a fixed order.
    statistics: Vec<(&'static str, &'a [f64])>,
    /// For the Gaussian bound of a method without sampling, white-box scores over the first k
    /// steps and over all (`None`: scores the bound does not describe).
    gaussian: Option<(&'a [f64], &'a [f64])>,
    /// A sampled method's likelihood scores and the steps they sum ([`GaussianFamily::Composition`]).
    likelihood: Option<(&'a [f64], usize)>,
}

impl<'a> Scores<'a> {
    /// White-box scores: a canary's noisy sums over the first k steps (the steps every example
    /// can afford) and over every step; where a sampled method's per-step sums are at hand,
    /// their log-likelihood ratio of "in" against "out" summed over its steps (the
    /// Neyman–Pearson statistic for Poisson-sampled Gaussian steps, [`StepLikelihood`]) with
    /// the number of steps.
    #[must_use]
    pub fn white_box(first_k: &'a [f64], all: &'a [f64], likelihood: Option<(&'a [f64], usize)>) -> Self {
        let mut statistics = vec![("first-k", first_k), ("all-steps", all)];
        statistics.extend(likelihood.map(|l| ("likelihood", l.0)));
        Self { statistics, gaussian: Some((first_k, all)), likelihood }
    }

    /// Black-box scores of input canaries: the published model's log-likelihood of each
    /// canary's label less the initial model's, and the published model's alone.
    #[must_use]
    pub fn black_box(gain: &'a [f64], end: &'a [f64]) -> Self {
        Self { statistics: vec![("likelihood-gain", gain), ("likelihood", end)], gaussian: None, likelihood: None }
    }
}

/// Each group's audit from every canary's `scores` and its coin, by two analyses of the same
/// guesses, each at half of 1 − `confidence` (a union bound, so that `consistent` errs with
/// probability at most 1 − `confidence`): [SNJ23]'s, each statistic at its share
/// ([`audit_guesses`], the best bound kept), and the f-DP one ([`FdpAudit`]). A group is
/// consistent when both stand.
///
/// # Errors
/// A group with fewer than 2 canaries, or scores that are not one per canary.
///
/// [SNJ23]: https://arxiv.org/abs/2305.08846
pub fn group_audits(
    cfg: &ValidConfig,
    scores: &Scores<'_>,
    included: &[bool],
    groups: &[CanaryGroup],
    confidence: f64,
) -> Result<Vec<GroupAudit>> {
    let statistics = &scores.statistics;
    let each = 1.0 - (1.0 - confidence) / (2 * statistics.len()) as f64;
    let mut out = Vec::new();
    for g in groups {
        let of = &g.members;
        let inc: Vec<bool> = of.iter().map(|&i| included[i]).collect();
        let mut best: Option<(OneRunBound, &str)> = None;
        let mut tests = Vec::new();
        for &(name, scores) in statistics {
            let s: Vec<f64> = of.iter().map(|&i| scores[i]).collect();
            let b = audit_guesses(&s, &inc, cfg.delta(), each)?;
            tests.extend(fdp::guesses(&s, &inc)?);
            if best.as_ref().is_none_or(|(x, _)| b.epsilon_lower > x.epsilon_lower) {
                best = Some((b, name));
            }
        }
        let Some((mut bound, statistic)) = best else { continue };
        bound.confidence = confidence;
        let gaussian = gaussian_audit(cfg, scores, (g, included), confidence);
        let fdp = fdp_audit(cfg, g, &tests, 1.0 - (1.0 - confidence) / 2.0);
        out.push(GroupAudit {
            group: g.name.clone(),
            claimed_epsilon: g.claimed,
            gradient_norm: g.gradient_norm,
            tier: g.tier,
            canaries: of.len(),
            included: inc.iter().filter(|&&b| b).count(),
            statistic: statistic.into(),
            consistent: bound.epsilon_lower <= g.claimed && fdp.as_ref().is_none_or(|f| f.consistent),
            bound,
            gaussian,
            fdp,
        });
    }
    Ok(out)
}

/// The f-DP analysis of a group's `tests` ([`FdpAudit`]), each at its share of 1 − `confidence`.
fn fdp_audit(cfg: &ValidConfig, group: &CanaryGroup, tests: &[Guesses], confidence: f64) -> Option<FdpAudit> {
    let accounting = cfg.accounting()?;
    if cfg.config().privacy.noise != NoiseSampler::Gaussian || tests.is_empty() {
        return None;
    }
    let (level, delta) = ((1.0 - confidence) / tests.len() as f64, cfg.delta());
    if let Some(claim) = accounting.guarantee() {
        let mu = fdp::lower_bound(tests, level, claim.mu(), |mu| Ok(GaussianCurve { mu })).ok()?;
        let epsilon_lower = if mu > 0.0 { gaussian_epsilon(mu * (1.0 - 1e-12), delta) } else { 0.0 };
        let consistent = epsilon_lower <= group.claimed;
        return Some(FdpAudit { family: "gaussian-dp".into(), parameter: mu, epsilon_lower, consistent });
    }
    let event = accounting.event().filter(|_| cfg.tiers().is_empty() && group.gradient_norm.is_none())?;
    let curve = |theta: f64| ProfileCurve::of_event(&event.with_noise_scaled(1.0 / theta));
    let theta = fdp::lower_bound(tests, level, 1.0, curve).ok()?;
    let epsilon_lower =
        if theta > 0.0 { fdp::event_epsilon(&event.with_noise_scaled(1.0 / theta), delta).ok()? } else { 0.0 };
    Some(FdpAudit { family: "composition".into(), parameter: theta, epsilon_lower, consistent: theta <= 1.0 })
}

/// A coordinate's noisy sum of one step, read back from its move `(before, after)` under
/// `update`: θ ← θ − η·ĝ with ĝ = sum/divisor, or with momentum μ, v ← μ·v + ĝ and θ ← θ − η·v
/// (`velocity`: v before and after; before the first step, 0).
fn released_sum(update: UpdateRule, (before, after): (f32, f32), velocity: (Option<&f32>, Option<&f32>)) -> f64 {
    let mean = if update.momentum == 0.0 {
        (f64::from(before) - f64::from(after)) / update.lr
    } else {
        let (v0, v1) = (velocity.0.copied().unwrap_or(0.0), velocity.1.copied().unwrap_or(0.0));
        f64::from(v1) - update.momentum * f64::from(v0)
    };
    mean * update.divisor
}

/// A group's [`GaussianAudit`], where its scores' means and spreads describe its claim: a
/// method without sampling (Gaussian DP), or DP-SGD's likelihood scores with its composition
/// (no tiers, canaries at the clip, Gaussian noise: the family [`fdp_audit`]'s composition takes).
fn gaussian_audit(
    cfg: &ValidConfig,
    scores: &Scores<'_>,
    (g, included): (&CanaryGroup, &[bool]),
    confidence: f64,
) -> Option<GaussianAudit> {
    let accounting = cfg.accounting()?;
    let side = |scores: &[f64], want: bool| -> Vec<f64> {
        g.members.iter().filter(|&&i| included[i] == want).map(|&i| scores[i]).collect()
    };
    let delta = cfg.delta();
    let Some(q) = accounting.sample_rate() else {
        let (first_k, all) = scores.gaussian?;
        let scores = if g.gradient_norm.is_some_and(|n| n < 1.0) { all } else { first_k };
        let mu = standardized_difference_lower(&side(scores, true), &side(scores, false), confidence).ok()?;
        // μ lowered by 10⁻¹² of itself first, so the curve's upward rounding cannot lift the bound.
        let epsilon_lower = if mu > 0.0 { gaussian_epsilon(mu * (1.0 - 1e-12), delta) } else { 0.0 };
        let family = GaussianFamily::GaussianDp;
        let audit = GaussianAudit { family, parameter: mu, epsilon_lower, epsilon_as_claimed: None };
        return epsilon_lower.is_finite().then_some(audit);
    };
    let (likelihood, steps) = scores.likelihood?;
    let plain = accounting.event().is_some() && cfg.tiers().is_empty() && g.gradient_norm.is_none();
    let p = &cfg.config().privacy;
    if !plain || p.noise != NoiseSampler::Gaussian || p.neighbours != Neighbours::ZeroOut {
        return None;
    }
    let canaries = SampledCanaries::new(q, accounting.sigma(), u64::try_from(steps).ok()?).ok()?;
    let d = standardized_difference_lower(&side(likelihood, true), &side(likelihood, false), confidence).ok()?;
    let theta = canaries.noise_scale_lower(d);
    let epsilon_lower = canaries.epsilon(theta, delta).ok()?;
    let epsilon_as_claimed = canaries.epsilon(1.0, delta).ok();
    Some(GaussianAudit { family: GaussianFamily::Composition, parameter: theta, epsilon_lower, epsilon_as_claimed })
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use crate::train::{RunFolder, RunOptions, Silent, TrainConfig, read_json, run};

    thread_local! {
        /// A deliberate bug (test builds only): the canaries' ledger forgets every charge.
        pub(super) static FORGET_SPENT: Cell<bool> = const { Cell::new(false) };
        /// Another: a gradient of norm s·C below the clip charged s⁴C², not s²C² (exact at the
        /// clip, so invisible to canaries whose gradients reach it).
        pub(super) static CHARGE_SQUARED: Cell<bool> = const { Cell::new(false) };
    }

    /// Filtered GD at ε = 4, k = 2, run to 96 steps (no noisy accuracies, which the canaries' claims
    /// would include though they take no part in them), with 4,000 canaries: half at the clip, half
    /// at C/8. Correctly charged, the small ones spend 96·C²/64 = 1.5 C² of the 2 C² budget and
    /// are audited against that spent ε (lower than the run's): consistent. A ledger that charges
    /// them s⁴C² claims 64 times less spent: the small group's audit catches it, while the full
    /// group, charged exactly C² either way, does not.
    #[test]
    fn a_ledger_that_undercharges_small_gradients_is_caught_by_the_small_canaries() {
        let data = tempfile::tempdir().unwrap();
        crate::data::synthetic::Synthetic::default().write(data.path()).unwrap();
        let text = format!(
            "[data]\ndir = \"{}\"\ntrain_subset = 200\ntest_subset = 50\n[model]\npreset = \"logistic\"\n\
             [privacy]\nmethod = \"filtered\"\nepsilon = 4.0\ndelta = 1e-5\nclip = 1.0\nworst_case_steps = 2\n\
             [train]\nlr = 0.5\nmax_steps = 96\nlr_after_k = 0.5\nseed = 9\n[stopping]\nrule = \"max-steps\"\n\
             [audit]\ncanaries = 4000\ngradient_norms = [1.0, 0.125]\n",
            data.path().display()
        );
        let cfg = TrainConfig::from_toml(&text, &[]).unwrap().validate().unwrap();
        let set = cfg.config().data.load().unwrap();
        let mut reports = Vec::new();
        for bug in [false, true] {
            CHARGE_SQUARED.with(|f| f.set(bug));
            let dir = tempfile::tempdir().unwrap();
            let ran = run(&cfg, &set, dir.path(), &RunOptions::default(), &mut Silent);
            CHARGE_SQUARED.with(|f| f.set(false));
            ran.unwrap();
            let report: super::OneRunReport = read_json(&RunFolder::new(dir.path()).audit()).unwrap();
            reports.push(report);
        }
        let run_epsilon = cfg.epsilon().unwrap();
        let [full, small] = &reports[0].groups[..] else { panic!("{:?}", reports[0].groups) };
        assert_eq!((full.gradient_norm, small.gradient_norm), (Some(1.0), Some(0.125)));
        assert_eq!(full.claimed_epsilon, run_epsilon);
        // 96·(C/8)² = 1.5 C² spent: the Gaussian mechanism of sensitivity √1.5·C at noise σC, by hand.
        let by_hand = crate::accounting::convert::gaussian_epsilon(1.5f64.sqrt() / cfg.sigma().unwrap(), 1e-5);
        assert!(small.claimed_epsilon >= by_hand && small.claimed_epsilon < by_hand * (1.0 + 1e-9), "{small:?}");
        assert!(small.claimed_epsilon < run_epsilon, "{small:?}");
        assert!(reports[0].consistent, "{:?}", reports[0].groups);
        let [full, small] = &reports[1].groups[..] else { panic!("{:?}", reports[1].groups) };
        assert!(full.consistent, "{full:?}");
        assert!(!small.consistent && small.claimed_epsilon < 1.0, "{small:?}");
    }

    /// A step's noisy sum comes back from a coordinate's move, with and without momentum.
    #[test]
    fn a_steps_noisy_sum_is_read_back_from_the_move() {
        use crate::train::step::UpdateRule;
        use crate::train::update::update_theta;
        for momentum in [0.0, 0.9] {
            let rule = UpdateRule { lr: 0.25, divisor: 240.0, momentum };
            let (mut theta, mut velocity) = (vec![0.3f32], vec![0.01f32]);
            let (before, v0) = (theta[0], velocity.clone());
            update_theta(&mut theta, &mut velocity, &[1.7], rule);
            let v = if momentum == 0.0 { (None, None) } else { (v0.first(), velocity.first()) };
            let got = super::released_sum(rule, (before, theta[0]), v);
            assert!((got - 1.7).abs() < 1e-3, "momentum {momentum}: {got}");
        }
    }

    /// DP-SGD at q = 0.05 over 300 steps (ε = 8), 2,000 canaries: each is in about 15 steps, and
    /// the likelihood ratio of its per-step sums, read back from its coordinate's moves, is the
    /// statistic that bounds the run best; the audit is consistent.
    #[test]
    fn a_sampled_runs_own_audit_weighs_each_step_by_its_likelihood() {
        let data = tempfile::tempdir().unwrap();
        crate::data::synthetic::Synthetic::default().write(data.path()).unwrap();
        let text = format!(
            "[data]\ndir = \"{}\"\ntrain_subset = 200\ntest_subset = 50\n[model]\npreset = \"logistic\"\n\
             [privacy]\nmethod = \"sgd\"\nsample_rate = 0.05\nepsilon = 8.0\ndelta = 1e-5\nclip = 1.0\n\
             worst_case_steps = 300\nconversion = \"cks\"\n[train]\nlr = 0.5\nmomentum = 0.5\nseed = 9\n\
             [audit]\ncanaries = 2000\n",
            data.path().display()
        );
        let cfg = TrainConfig::from_toml(&text, &[]).unwrap().validate().unwrap();
        let set = cfg.config().data.load().unwrap();
        let dir = tempfile::tempdir().unwrap();
        run(&cfg, &set, dir.path(), &RunOptions::default(), &mut Silent).unwrap();
        let report: super::OneRunReport = read_json(&RunFolder::new(dir.path()).audit()).unwrap();
        let g = &report.groups[0];
        assert_eq!(g.statistic, "likelihood", "{g:?}");
        assert!(report.consistent && g.bound.epsilon_lower > 0.5, "{g:?}");
    }

    /// Filtered GD at ε = 4 with k = 2 run to 40 steps, 2,000 canaries: the run's own audit is
    /// consistent, and a ledger that never stops a canary (38 steps more than it can afford) is
    /// caught.
    #[test]
    fn a_run_whose_ledger_forgets_is_caught_by_its_own_audit() {
        let data = tempfile::tempdir().unwrap();
        crate::data::synthetic::Synthetic::default().write(data.path()).unwrap();
        let text = format!(
            "[data]\ndir = \"{}\"\ntrain_subset = 200\ntest_subset = 50\n[model]\npreset = \"logistic\"\n\
             [privacy]\nmethod = \"filtered\"\nepsilon = 4.0\ndelta = 1e-5\nclip = 1.0\nworst_case_steps = 2\n\
             [train]\nlr = 0.5\nmax_steps = 40\nlr_after_k = 0.5\nseed = 9\n[audit]\ncanaries = 2000\n",
            data.path().display()
        );
        let cfg = TrainConfig::from_toml(&text, &[]).unwrap().validate().unwrap();
        let set = cfg.config().data.load().unwrap();
        let mut bounds = Vec::new();
        for forget in [false, true] {
            FORGET_SPENT.with(|f| f.set(forget));
            let dir = tempfile::tempdir().unwrap();
            run(&cfg, &set, dir.path(), &RunOptions::default(), &mut Silent).unwrap();
            let report: super::OneRunReport = read_json(&RunFolder::new(dir.path()).audit()).unwrap();
            bounds.push((report.consistent, report.groups[0].bound.epsilon_lower, report.groups[0].statistic.clone()));
        }
        FORGET_SPENT.with(|f| f.set(false));
        assert!(bounds[0].0 && !bounds[1].0, "correct, forgetting: {bounds:?}");
        assert_eq!(bounds[1].2, "all-steps", "{bounds:?}");
    }
}
