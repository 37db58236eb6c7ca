//! A private hyperparameter search (`dpgd sweep FILE --select private --epsilon ε --delta δ`):
//! the sweep's grid becomes the candidates of one private algorithm whose guarantee covers the
//! whole search, the choice of the best included ([PS22]).
//!
//! **What runs.** The search draws K from the distribution its file names ([`Repetitions`]),
//! then K candidates, each a grid point chosen uniformly at random. Each candidate is an
//! ordinary private run trained on the training examples minus a held-out validation split
//! ([`HoldOut`]: its size and seed are public), followed by one release: its count of correct
//! validation predictions plus discrete Gaussian noise ([CKS20]). The search publishes only the
//! candidate with the highest noisy count (ties: the earliest): its model, configuration, noisy
//! validation accuracy and test accuracy. K, the other candidates and their scores stay in
//! `confidential/`.
//!
//! **The guarantee** (neighbouring datasets of the run's relation on the whole training set, n
//! public). One candidate Q, at grid point j, is (λ, max(ε_j(λ), λρ_v))-RDP: the neighbours
//! differ in one position, fixed by the public hold-out either in the training part (then
//! only the run differs, and the count is computed from the same validation examples by a
//! model it post-processes) or in the validation part (then only the count differs, by at most
//! 1, and the discrete Gaussian of variance σ_v² is ρ_v = 1/(2σ_v²)-zCDP, [CKS20, Thm 14]).
//! ε_j is the run's own curve ([`RunAccounting::rdp`](crate::train::method::RunAccounting::rdp)).
//! Drawing j uniformly makes Q's curve the pointwise maximum over the grid
//! ([`Rdp::pointwise_max`]). The search is then [PS22, Thm 2] (truncated negative binomial)
//! or [PS22, Thm 6] (Poisson) of Q ([`Repetitions::rdp`]), converted to (ε, δ) by [CKS20,
//! Prop. 12]'s conversion at the best order, rounded up.
//!
//! **Calibration.** Every candidate's `privacy.epsilon` is set to one ε_c (at the search's δ),
//! the largest (by bisection, to 10⁻⁴ relative) whose search guarantee is within the target;
//! each method then calibrates σ for ε_c as in a single run. The search's ε is recomputed from
//! the calibrated runs and checked against the target before anything trains.
//!
//! **Crash safety.** K, every candidate's grid point and the search's identity are written to
//! `confidential/search.json` before the first candidate trains; each noisy count is written
//! there before anything uses it. A resumed search neither redraws nor re-releases: it resumes
//! the candidate it stopped in, and publishes the same choice.
//!
//! [PS22]: https://arxiv.org/abs/2110.03620
//! [CKS20]: https://arxiv.org/abs/2004.00010

use std::path::{Path, PathBuf};

use rand::RngExt;
use serde::{Deserialize, Serialize};

use super::plan::{PlannedRun, SweepFile, plan};
use crate::accounting::numeric::mul_up;
use crate::accounting::sampling::DiscreteGaussian;
use crate::accounting::selection::Repetitions;
use crate::accounting::{Conversion, Rdp, ToApproxDp};
use crate::data::{Dataset, HoldOut, Split};
use crate::error::{Error, Result};
use crate::noise::{NoiseSeed, Stream};
use crate::train::folder::{jsonl, metrics_csv};
use crate::train::outputs::MetricsRow;
use crate::train::{Observer, RunFolder, RunOptions, TrainConfig, ValidConfig, read_json, run};

/// The `[search]` section of a sweep file: how `--select private` searches. Everything here is
/// public.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SearchSection {
    /// Training examples held out for the candidates' scores; absent: a tenth of the run's
    /// training examples.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub validation: Option<usize>,
    /// The seed of the permutation that chooses them.
    #[serde(default)]
    pub validation_seed: u64,
    /// σ of the discrete Gaussian noise on each candidate's count of correct validation
    /// predictions; absent: the σ whose score alone is (ε_c, δ)-DP, as private as one
    /// candidate's training (so the score costs nearly nothing beside it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score_noise: Option<f64>,
    /// How many candidates run: K's distribution.
    #[serde(default)]
    pub candidates: CandidatesSection,
    /// A fixed seed for K, the draws, the scores' noise and every candidate's noise:
    /// reproducible, for experiments and tests only — the search is then NOT private.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
}

/// `[search.candidates]`: K's distribution by its mean.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CandidatesSection {
    /// `negative-binomial` (truncated: K ≥ 1) or `poisson` (K = 0 publishes no model).
    #[serde(default)]
    pub distribution: Distribution,
    /// E\[K\].
    #[serde(default = "default_mean")]
    pub mean: f64,
    /// The negative binomial's shape η (1: geometric; 0: logarithmic).
    #[serde(default = "default_eta")]
    pub eta: f64,
}

impl Default for CandidatesSection {
    fn default() -> Self {
        Self { distribution: Distribution::default(), mean: default_mean(), eta: default_eta() }
    }
}

fn default_mean() -> f64 {
    10.0
}

fn default_eta() -> f64 {
    1.0
}

/// K's family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Distribution {
    /// The truncated negative binomial ([PS22, Thm 2]).
    ///
    /// [PS22]: https://arxiv.org/abs/2110.03620
    #[default]
    NegativeBinomial,
    /// Poisson ([PS22, Thm 6]).
    ///
    /// [PS22]: https://arxiv.org/abs/2110.03620
    Poisson,
}

impl CandidatesSection {
    /// K's distribution.
    ///
    /// # Errors
    /// A mean or η out of range, named by its field.
    pub fn repetitions(&self) -> Result<Repetitions> {
        match self.distribution {
            Distribution::NegativeBinomial => Repetitions::negative_binomial_with_mean(self.eta, self.mean),
            Distribution::Poisson => Repetitions::poisson(self.mean),
        }
        .map_err(|e| Error::config("search.candidates", e.to_string()))
    }
}

/// The search's guarantee and the event it rests on: publishable.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchGuarantee {
    /// ε of the whole search at `delta`, rounded up: with personalized budgets, the loosest
    /// tier's (what holds for every example; each tier's is in `tiers`).
    pub epsilon: f64,
    /// δ, all of it: the Rényi conversion's share and `sampling_delta`.
    pub delta: f64,
    /// The share of δ that covers how K is drawn: (1 + e^ε) times the gap between the
    /// sampler's distribution of K and the theorem's ([`Repetitions::sampling_gap`]); ε is
    /// converted from Rényi DP at δ minus this.
    #[serde(default)]
    pub sampling_delta: f64,
    /// The Rényi order that gives ε.
    pub order: f64,
    /// The conversion from Rényi DP.
    pub conversion: Conversion,
    /// K's distribution.
    pub repetitions: Repetitions,
    /// E\[K\].
    pub mean_candidates: f64,
    /// The `privacy.epsilon` every candidate is calibrated for (at δ).
    pub candidate_epsilon: f64,
    /// The noisy score: σ of the discrete Gaussian on the count of correct validation
    /// predictions, and its zCDP ρ.
    pub score_sigma: f64,
    /// ρ of one score.
    pub score_rho: f64,
    /// The held-out validation split.
    pub validation: HoldOut,
    /// With personalized budgets (`privacy.budgets`), each tier's guarantee for the whole
    /// search, in the tiers' order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tiers: Vec<SearchTier>,
}

/// One tier of personalized budgets in a private search: its examples' guarantee for the whole
/// search, from that tier's own curve in every candidate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchTier {
    /// The ε its examples asked for (`privacy.budgets.epsilons`).
    pub epsilon: f64,
    /// The ε its budget is calibrated for in each candidate run
    /// (`privacy.budgets.search_epsilons`).
    pub candidate_epsilon: f64,
    /// The search's ε for its examples at `delta`, rounded up: at most `epsilon`.
    pub guaranteed_epsilon: f64,
    /// The share of δ that covers how K is drawn, at this tier's ε.
    pub sampling_delta: f64,
    /// The Rényi order that gives it.
    pub order: f64,
}

/// A search ready to run: its calibrated grid, its data and its guarantee.
pub struct Search {
    /// The sweep's name.
    pub name: String,
    /// Each grid point, calibrated at the candidates' ε and holding out the validation split.
    pub points: Vec<PlannedRun>,
    /// The guarantee the search will have.
    pub guarantee: SearchGuarantee,
    score: DiscreteGaussian,
    seed: NoiseSeed,
    data: Dataset,
    validation: Split,
}

impl std::fmt::Debug for Search {
    /// The name, points and guarantee (not the data).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let points: Vec<&str> = self.points.iter().map(|p| p.id.as_str()).collect();
        f.debug_struct("Search")
            .field("name", &self.name)
            .field("points", &points)
            .field("guarantee", &self.guarantee)
            .finish()
    }
}

/// What every candidate shares: the grid's configurations (holding out the validation split),
/// K's distribution, δ and the score's noise (fixed by `--epsilon` or the file).
struct Grid<'a> {
    configs: Vec<TrainConfig>,
    planned: &'a [PlannedRun],
    repetitions: Repetitions,
    delta: f64,
    score_noise: Option<f64>,
}

impl Grid<'_> {
    /// Every grid point validated with candidate ε `eps_c` (and, with tiers, the tiers'
    /// candidate ε `tiers`; `None`: without tiers), with the score's noise for `eps_c`.
    fn validate(&self, eps_c: f64, tiers: Option<&[f64]>) -> Result<(Vec<ValidConfig>, DiscreteGaussian)> {
        let score = score_noise(self.score_noise, eps_c, self.delta)?;
        let mut valid = Vec::with_capacity(self.configs.len());
        for (c, p) in self.configs.iter().zip(self.planned) {
            let mut c = c.clone();
            (c.privacy.epsilon, c.privacy.sigma) = (Some(eps_c), None);
            match tiers {
                Some(t) => c.privacy.budgets.iter_mut().for_each(|b| b.search_epsilons = Some(t.to_vec())),
                None => c.privacy.budgets = None,
            }
            valid.push(c.validate().map_err(|e| Error::config(format!("sweep run {}", p.id), e.to_string()))?);
        }
        Ok((valid, score))
    }

    /// The search's Rényi DP curve for the examples whose candidate curve is `curve` (at every
    /// grid point), with each candidate's score.
    fn search_curve(
        &self,
        valid: &[ValidConfig],
        score: &DiscreteGaussian,
        curve: impl Fn(&ValidConfig) -> Option<Rdp>,
    ) -> Result<Rdp> {
        let score_rho = score.zcdp(1.0).map_err(|e| Error::config("search.score_noise", e.to_string()))?.rho();
        let mut curves = Vec::with_capacity(valid.len());
        for (v, p) in valid.iter().zip(self.planned) {
            let Some(train) = v.accounting().and_then(|_| curve(v)) else {
                return Err(Error::config(
                    format!("sweep run {}: privacy.method", p.id),
                    "a private search needs every candidate's Renyi DP curve: use a private method",
                ));
            };
            curves.push(candidate_curve(train, score_rho)?);
        }
        let one = Rdp::pointwise_max(&curves).map_err(|e| Error::config("sweep grid", e.to_string()))?;
        self.repetitions.rdp(&one).map_err(|e| Error::config("search.candidates", e.to_string()))
    }

    /// The search's ε and order for `curve` at the part of δ that the Rényi conversion may
    /// use at ε about `epsilon` ([`conversion_delta`]).
    fn epsilon_of(&self, curve: &Rdp, epsilon: f64) -> Result<(f64, f64, f64)> {
        let (delta, sampling) = conversion_delta(self.delta, epsilon, self.repetitions)?;
        let (e, order) = best_order(curve, delta);
        Ok((e, order, sampling))
    }
}

/// Reads a sweep file for `--select private`, loads its data, holds out the validation split
/// and calibrates every candidate so that the whole search is within `target` = (ε, δ). With
/// personalized budgets, `target`'s ε calibrates the noise (as `privacy.epsilon` does in a
/// run), and each tier's budget in the candidates is calibrated so that the whole search keeps
/// that tier's examples within their own ε; the search's ε is then the loosest tier's.
///
/// # Errors
/// As [`plan`]; a `seeds` list, a `reuse` list or a grid of one point; a grid field that the
/// search sets (`privacy.epsilon`, `privacy.sigma`, `privacy.delta`, `privacy.budgets`,
/// `train.seed`, `data.*`); a method without a Rényi DP curve; points with different data
/// sections; a validation split that leaves nothing to train on; a K whose sampling costs
/// more than half of δ; or a target (or a tier) that no candidate ε meets.
pub fn prepare(path: &Path, target: (f64, f64)) -> Result<Search> {
    let (sweep, planned) = plan(path)?;
    let section = check_file(&sweep, &planned, path)?;
    let repetitions = section.candidates.repetitions()?;
    let (epsilon, delta) = target;
    if !(epsilon.is_finite() && epsilon > 0.0 && delta > 0.0 && delta < 1.0) {
        return Err(Error::config(
            "--epsilon/--delta",
            format!("({epsilon}, {delta}): need epsilon > 0 and 0 < delta < 1"),
        ));
    }
    let base = planned[0].config.config();
    let whole = base.data.load()?;
    let n = whole.train.head(base.data.train_subset).len();
    let hold_out = HoldOut { examples: section.validation.unwrap_or(n / 10), seed: section.validation_seed };
    let (data, validation) = whole.hold_out(base.data.train_subset, &hold_out)?;
    let configs = planned
        .iter()
        .map(|p| {
            // As given: the noise of counts left to the tool follows each candidate's own ε.
            let mut c = p.config.given().clone();
            c.data.hold_out = Some(hold_out);
            c.privacy.delta = delta;
            c
        })
        .collect();
    let grid = Grid { configs, planned: &planned, repetitions, delta, score_noise: section.score_noise };
    // The noise: candidates at ε_c, each example's curve the run's own (no tiers).
    let base_epsilon = |e: f64| -> Result<f64> {
        let (valid, score) = grid.validate(e, None)?;
        let curve = grid.search_curve(&valid, &score, |v| v.accounting()?.rdp())?;
        Ok(grid.epsilon_of(&curve, epsilon)?.0)
    };
    let candidate_epsilon = calibrate(epsilon, base_epsilon, "--epsilon", "")?;
    let tiers = match base.privacy.budgets.as_ref() {
        Some(b) => Some(calibrate_tiers(&grid, candidate_epsilon, &b.targets())?),
        None => None,
    };
    let (valid, score) = grid.validate(candidate_epsilon, tiers.as_deref())?;
    let curve = grid.search_curve(&valid, &score, |v| v.accounting()?.rdp())?;
    let (mut final_epsilon, mut order, mut sampling_delta) = grid.epsilon_of(&curve, epsilon)?;
    let mut search_tiers = Vec::new();
    if let (Some(candidate), Some(b)) = (&tiers, &base.privacy.budgets) {
        search_tiers = tier_guarantees(&grid, &valid, &score, &b.targets(), candidate)?;
        let loosest = search_tiers.iter().max_by(|a, b| a.guaranteed_epsilon.total_cmp(&b.guaranteed_epsilon));
        if let Some(t) = loosest {
            (final_epsilon, order, sampling_delta) = (t.guaranteed_epsilon, t.order, t.sampling_delta);
        }
    } else if final_epsilon > epsilon {
        return Err(Error::State(format!("the calibrated search costs {final_epsilon} > the target {epsilon}")));
    }
    let score_rho = score.zcdp(1.0).map_err(|e| Error::config("search.score_noise", e.to_string()))?.rho();
    let points = planned.into_iter().zip(valid).map(|(p, config)| PlannedRun { config, ..p }).collect();
    let guarantee = SearchGuarantee {
        epsilon: final_epsilon,
        delta,
        sampling_delta,
        order,
        conversion: Conversion::Cks,
        repetitions,
        mean_candidates: repetitions.mean(),
        candidate_epsilon,
        score_sigma: score.sigma(),
        score_rho,
        validation: hold_out,
        tiers: search_tiers,
    };
    let seed = section.seed.map_or(NoiseSeed::Os, NoiseSeed::Fixed);
    Ok(Search { name: sweep.name, points, guarantee, score, seed, data, validation })
}

/// Each tier's ε in the candidates (`privacy.budgets.search_epsilons`): the largest whose
/// search, on that tier's own curve at every grid point, is within the tier's ε `targets[j]`.
/// Strictest first: while tier j is calibrated, the stricter tiers keep their calibrated
/// values and the looser ones sit at tier j's (each at most its own ε).
fn calibrate_tiers(grid: &Grid<'_>, candidate_epsilon: f64, targets: &[f64]) -> Result<Vec<f64>> {
    let mut order: Vec<usize> = (0..targets.len()).collect();
    order.sort_by(|&a, &b| targets[a].total_cmp(&targets[b]));
    let mut done: Vec<Option<f64>> = vec![None; targets.len()];
    for &j in &order {
        let with = |e: f64| -> Vec<f64> { (0..targets.len()).map(|i| done[i].unwrap_or(e.min(targets[i]))).collect() };
        let tier_epsilon = |e: f64| -> Result<f64> {
            let (valid, score) = grid.validate(candidate_epsilon, Some(&with(e)))?;
            let curve = grid.search_curve(&valid, &score, |v| v.accounting()?.tier_rdp(j))?;
            Ok(grid.epsilon_of(&curve, targets[j])?.0)
        };
        let field = format!("privacy.budgets.epsilons (the tier {})", targets[j]);
        done[j] = Some(calibrate(targets[j], tier_epsilon, &field, " or raise the tier's epsilon")?);
    }
    Ok(done.into_iter().map(|e| e.unwrap_or(0.0)).collect())
}

/// Each tier's guarantee for the whole search, recomputed from the final candidates `valid`
/// and checked against the tier's ε.
fn tier_guarantees(
    grid: &Grid<'_>,
    valid: &[ValidConfig],
    score: &DiscreteGaussian,
    targets: &[f64],
    candidate: &[f64],
) -> Result<Vec<SearchTier>> {
    let mut out = Vec::with_capacity(targets.len());
    for (j, (&epsilon, &candidate_epsilon)) in targets.iter().zip(candidate).enumerate() {
        let curve = grid.search_curve(valid, score, |v| v.accounting()?.tier_rdp(j))?;
        let (guaranteed, order, sampling_delta) = grid.epsilon_of(&curve, epsilon)?;
        if guaranteed > epsilon {
            return Err(Error::State(format!(
                "the calibrated search costs the tier {epsilon} {guaranteed}: more than its epsilon"
            )));
        }
        out.push(SearchTier { epsilon, candidate_epsilon, guaranteed_epsilon: guaranteed, sampling_delta, order });
    }
    Ok(out)
}

/// One candidate's curve: the pointwise maximum of its run's Rényi curve `train` and the
/// score's, λρ_v (see the [module docs](self)).
fn candidate_curve(train: Rdp, score_rho: f64) -> Result<Rdp> {
    let score = train.orders().iter().map(|&a| mul_up(a, score_rho)).collect();
    let score =
        Rdp::new(train.orders().to_vec(), score).map_err(|e| Error::config("search.score_noise", e.to_string()))?;
    Rdp::pointwise_max(&[train, score]).map_err(|e| Error::config("search", e.to_string()))
}

/// The δ the Rényi conversion may use for a search whose ε is about `epsilon` (at most it):
/// `delta` less what drawing K costs, (1 + e^ε)·[`Repetitions::sampling_gap`], rounded up; and
/// that cost.
///
/// # Errors
/// A cost above half of `delta` (a heavy-tailed K), naming `search.candidates`.
fn conversion_delta(delta: f64, epsilon: f64, repetitions: Repetitions) -> Result<(f64, f64)> {
    let sampling = crate::accounting::numeric::mul_up(1.0 + epsilon.exp(), repetitions.sampling_gap());
    if sampling.is_nan() || sampling > delta / 2.0 {
        return Err(Error::config(
            "search.candidates",
            format!(
                "K as drawn differs from its distribution in the theorem by up to {:.3e} (the mass of its tail past \
                 {} candidates), which costs {sampling:.3e} of delta = {delta}: more than half of it; raise \
                 search.candidates.eta to 0 or more, or lower the mean",
                repetitions.sampling_gap(),
                crate::accounting::selection::MAX_DRAW
            ),
        ));
    }
    Ok((delta - sampling, sampling))
}

/// The score's noise: `sigma` as given, or the σ whose ρ = 1/(2σ²) converts to the
/// candidates' (ε_c, δ) by the CKS conversion.
fn score_noise(sigma: Option<f64>, candidate_epsilon: f64, delta: f64) -> Result<DiscreteGaussian> {
    let sigma = match sigma {
        Some(s) => s,
        None => {
            let rho = Conversion::Cks
                .max_rho(candidate_epsilon, delta)
                .map_err(|e| Error::config("--epsilon", e.to_string()))?;
            // Rounded up: a larger σ only costs less.
            (1.0 / (2.0 * rho.rho())).sqrt() * (1.0 + 1e-12)
        }
    };
    DiscreteGaussian::new(sigma)
        .map_err(|e| Error::config("search.score_noise", format!("{e}: give a noise std such as 20")))
}

/// The largest candidate ε in (0, target] whose search ε (`search_epsilon`, increasing) is at
/// most `target`: halving from the target until one fits (candidates below about 10⁻⁴ of it,
/// or candidates whose own configs refuse so small an ε, put the target out of reach, named
/// by `field`, with `also` as a further remedy), then bisection to 10⁻⁴ relative.
fn calibrate(target: f64, search_epsilon: impl Fn(f64) -> Result<f64>, field: &str, also: &str) -> Result<f64> {
    let mut hi = target;
    let out_of_reach = |lo: f64, why: String| {
        Error::config(
            field,
            format!(
                "a search within epsilon = {target} is out of reach: candidates at epsilon = {lo:.3e} {why} (the choice \
                 among a random number of runs costs this much on its own): raise --epsilon, or lower \
                 search.candidates.mean{also}"
            ),
        )
    };
    match search_epsilon(hi) {
        Ok(e) if e <= target => return Ok(hi),
        Ok(_) => {}
        Err(err) => return Err(out_of_reach(hi, format!("are refused ({err})"))),
    }
    let mut lo = hi;
    loop {
        lo /= 2.0;
        match search_epsilon(lo) {
            Ok(e) if e <= target => break,
            Ok(e) if lo < target * 1e-4 => return Err(out_of_reach(lo, format!("make it {e:.4}"))),
            Ok(_) => hi = lo,
            Err(err) => return Err(out_of_reach(lo, format!("are refused ({err})"))),
        }
    }
    while hi - lo > 1e-4 * lo {
        let mid = 0.5 * (lo + hi);
        if search_epsilon(mid)? <= target { lo = mid } else { hi = mid }
    }
    Ok(lo)
}

/// ε at `delta` and the order that gives it.
fn best_order(curve: &Rdp, delta: f64) -> (f64, f64) {
    let mut best = (f64::INFINITY, f64::NAN);
    for (&a, &e) in curve.orders().iter().zip(curve.epsilons()) {
        let one = Rdp::new(vec![a], vec![e]).ok().and_then(|r| r.epsilon(delta, Conversion::Cks).ok());
        if let Some(eps) = one.filter(|&x| x < best.0) {
            best = (eps, a);
        }
    }
    best
}

/// The file's `[search]` section after refusing what a private search cannot take.
fn check_file(sweep: &SweepFile, planned: &[PlannedRun], path: &Path) -> Result<SearchSection> {
    let at = |f: &str| format!("sweep {}: {f}", path.display());
    if !sweep.reuse.is_empty() {
        return Err(Error::config(at("reuse"), "a private search trains its own candidates: remove reuse"));
    }
    if planned.len() < 2 {
        return Err(Error::config(
            at("grid"),
            "a grid of one point has nothing to choose: train it with `dpgd train`, or give the grid more values",
        ));
    }
    for p in planned {
        for field in p.point.keys() {
            let reserved = ["privacy.epsilon", "privacy.sigma", "privacy.delta", "train.seed"];
            if reserved.contains(&field.as_str()) || field.starts_with("data.") || field.starts_with("privacy.budgets")
            {
                return Err(Error::config(
                    at(&format!("grid.{field}")),
                    "the search sets this itself (epsilon and delta from --epsilon/--delta, the noise seeds, one data \
                     section, one assignment of personalized budgets): remove it from the grid (and `seeds`)",
                ));
            }
        }
        if p.config.config().data != planned[0].config.config().data {
            return Err(Error::config(at("cases"), "every candidate must train on the same data section"));
        }
    }
    if planned[0].config.config().privacy.budgets.as_ref().is_some_and(|b| b.search_epsilons.is_some()) {
        return Err(Error::config(
            at("base: privacy.budgets.search_epsilons"),
            "the search calibrates each tier's candidate epsilon itself: remove it",
        ));
    }
    if planned[0].config.config().data.hold_out.is_some() {
        return Err(Error::config(at("base"), "the search holds out its own validation split: remove data.hold_out"));
    }
    match &sweep.search {
        None => Ok(SearchSection::default()),
        Some(table) => toml::Value::Table(table.clone())
            .try_into()
            .map_err(|e: toml::de::Error| Error::config(at("search"), e.to_string())),
    }
}

/// The confidential state of a search: drawn before the first candidate trains.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchState {
    /// The search's identity: its guarantee and every grid point's configuration.
    pub identity: String,
    /// The grid point of each candidate, in order (K of them).
    pub draws: Vec<usize>,
    /// Each finished candidate's noisy count of correct validation predictions.
    pub scores: Vec<Option<i64>>,
}

/// What a finished search publishes (`publishable/search.json`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SearchResult {
    /// Whether the guarantee holds: false with a fixed search seed, or where any candidate run
    /// is not private.
    pub private: bool,
    /// Why not (empty when private).
    #[serde(default)]
    pub not_private_because: Vec<String>,
    /// One line: the guarantee, or why the search is NOT private.
    pub summary: String,
    /// The guarantee and the event it rests on.
    pub guarantee: SearchGuarantee,
    /// The neighbouring relation, as the candidates' runs state it.
    pub neighbours: String,
    /// What the figures rest on.
    pub rests_on: String,
    /// Every grid point a candidate may be: its values and σ (the grid is public; which
    /// points ran is not).
    pub grid: Vec<GridPoint>,
    /// The chosen candidate (`None`: a Poisson search drew no candidate).
    pub chosen: Option<Chosen>,
}

/// One grid point of a search's candidate mechanism.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GridPoint {
    /// Its grid values.
    pub point: std::collections::BTreeMap<String, serde_json::Value>,
    /// The noise multiplier its run is calibrated to at the candidates' ε.
    pub sigma: Option<f64>,
}

/// The published candidate.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Chosen {
    /// Its grid values.
    pub point: std::collections::BTreeMap<String, serde_json::Value>,
    /// Its noisy validation accuracy (the noisy count over the validation examples).
    pub noisy_validation_accuracy: f64,
    /// Its test accuracy (the held-out test set chose nothing).
    pub test_accuracy: f64,
}

/// How a search reports progress without printing.
pub trait SearchObserver {
    /// An observer for candidate `i`'s run (0-based), called when it starts or resumes.
    fn candidate(&mut self, i: usize) -> Box<dyn Observer + '_>;
}

/// Runs `search` in `dir` (resuming it), and returns what it publishes. `stop_after` =
/// (candidate, steps) stops inside that candidate's run, as a kill would.
///
/// # Errors
/// A folder holding another search; a failing candidate; unreadable or unwritable files.
/// `Ok(None)` when stopped by `stop_after`.
pub fn run_search(
    search: &Search,
    dir: &Path,
    observer: &mut dyn SearchObserver,
    stop_after: Option<(usize, usize)>,
) -> Result<Option<SearchResult>> {
    let mut state = start(search, dir)?;
    let published = dir.join("publishable").join("search.json");
    if published.exists() {
        return read_json(&published).map(Some);
    }
    for i in 0..state.draws.len() {
        if state.scores[i].is_some() {
            continue;
        }
        let (cfg, folder) = candidate(search, &state, i, dir)?;
        let opts = RunOptions {
            stop_after: stop_after.filter(|&(c, _)| c == i).map(|(_, s)| s),
            candidate: true,
            ..Default::default()
        };
        let summary = run(&cfg, &search.data, folder.root(), &opts, observer.candidate(i).as_mut())?;
        if !summary.finished {
            return Ok(None);
        }
        let model = crate::model::export::load(&folder.model_safetensors())?;
        let correct = model.count_correct(search.validation.head(0)) as i64;
        let mut rng = search.seed.rng(Stream::release(SCORE_STREAMS, i))?;
        state.scores[i] = Some(correct.saturating_add(search.score.sample(&mut rng)));
        write_state(dir, &state)?;
    }
    publish(search, &state, dir).map(Some)
}

/// The noise streams of the scores count down from here (far from the runs' and the draws').
const SCORE_STREAMS: u64 = 1 << 61;

/// The state of the search in `dir`: read, or drawn and written before anything trains.
fn start(search: &Search, dir: &Path) -> Result<SearchState> {
    let identity = identity(search)?;
    let path = state_path(dir);
    if path.exists() {
        let state: SearchState = read_json(&path)?;
        if state.scores.len() != state.draws.len() || state.draws.iter().any(|&j| j >= search.points.len()) {
            return Err(Error::file(
                &path,
                "the draws and scores do not belong together (the file is damaged): delete the search folder to \
                 start over",
            ));
        }
        if state.identity != identity {
            return Err(Error::config(
                format!("{}", dir.display()),
                "this folder holds a search made with other settings (grid, target, data or candidates): give \
                 another --out, or delete the folder to start over",
            ));
        }
        return Ok(state);
    }
    let mut rng = search.seed.rng(Stream::release(SCORE_STREAMS + 1, 0))?;
    let k = search.guarantee.repetitions.sample(rng.random::<f64>());
    let k = usize::try_from(k).map_err(|_| Error::State("K does not fit in memory".into()))?;
    let draws = (0..k).map(|_| rng.random_range(0..search.points.len())).collect();
    let state = SearchState { identity, draws, scores: vec![None; k] };
    write_state(dir, &state)?;
    Ok(state)
}

fn state_path(dir: &Path) -> PathBuf {
    dir.join("confidential").join("search.json")
}

fn write_state(dir: &Path, state: &SearchState) -> Result<()> {
    let text = serde_json::to_string_pretty(state).map_err(Error::serialise("a search's state"))?;
    crate::files::atomic_write(&state_path(dir), text.as_bytes())
}

/// A hash of everything the draws and scores belong to.
fn identity(search: &Search) -> Result<String> {
    let mut text = serde_json::to_string(&search.guarantee).map_err(Error::serialise("a search's guarantee"))?;
    text += &format!("{:?}", search.seed);
    for p in &search.points {
        text += &p.config.config().to_value()?.to_string();
    }
    for f in search.data.fingerprints() {
        text += &f.sha256;
    }
    Ok(crate::data::idx::hex(&<sha2::Sha256 as sha2::Digest>::digest(text.as_bytes())))
}

/// Candidate `i`'s configuration (its grid point's, with a derived noise seed when the search
/// has a fixed one) and run folder.
fn candidate(search: &Search, state: &SearchState, i: usize, dir: &Path) -> Result<(ValidConfig, RunFolder)> {
    let point = &search.points[state.draws[i]];
    let folder = RunFolder::candidate(dir.join("confidential").join("candidates").join(format!("{i}-{}", point.id)));
    let cfg = match search.seed {
        NoiseSeed::Os => point.config.clone(),
        NoiseSeed::Fixed(s) => {
            let mut c = point.config.config().clone();
            c.train.seed = Some(s.wrapping_add(i as u64 + 1));
            c.validate()?
        }
    };
    Ok((cfg, folder))
}

/// Writes `publishable/`: the chosen candidate's model and configuration, its other
/// publishable files restated under the search's guarantee ([`publish_candidate`]), a README
/// and `search.json`, beside the folder then renamed into place.
fn publish(search: &Search, state: &SearchState, dir: &Path) -> Result<SearchResult> {
    let best = (0..state.draws.len()).fold(None, |b: Option<usize>, i| match (b, state.scores[i]) {
        (Some(j), Some(s)) if state.scores[j].is_some_and(|t| t >= s) => Some(j),
        (_, Some(_)) => Some(i),
        (b, None) => b,
    });
    let partial = dir.join("publishable.partial");
    if partial.exists() {
        std::fs::remove_dir_all(&partial).map_err(Error::io(&partial))?;
    }
    std::fs::create_dir_all(&partial).map_err(Error::io(&partial))?;
    let mut result = search_result(search, None);
    if let Some(i) = best {
        let (_, folder) = candidate(search, state, i, dir)?;
        let test_accuracy = publish_candidate(&folder, &partial, &result)?;
        let noisy = state.scores[i].unwrap_or(0) as f64 / search.guarantee.validation.examples as f64;
        result.chosen = Some(Chosen {
            point: search.points[state.draws[i]].json_point(),
            noisy_validation_accuracy: noisy,
            test_accuracy,
        });
    }
    let text = serde_json::to_string_pretty(&result).map_err(Error::serialise("search.json"))?;
    crate::files::atomic_write(&partial.join("search.json"), text.as_bytes())?;
    crate::files::atomic_write(&partial.join("README.txt"), search_readme(&result).as_bytes())?;
    let out = dir.join("publishable");
    if out.exists() {
        std::fs::remove_dir_all(&out).map_err(Error::io(&out))?;
    }
    std::fs::rename(&partial, &out).map_err(Error::io(&out))?;
    Ok(result)
}

/// The files of the chosen candidate's run `folder` that the search publishes, into `to`: the
/// model and its configuration as they are; its `result.json` with the search's guarantee in
/// place of the candidate's (`private`, `epsilon`); its `privacy.json` as
/// `candidate-privacy.json` (one candidate of the search: what the search composes), stating
/// the search's guarantee beside it; its metrics without the candidate's running ε. Nothing
/// else of the candidate's folder. Returns its test accuracy.
fn publish_candidate(folder: &RunFolder, to: &Path, search: &SearchResult) -> Result<f64> {
    for name in ["model.safetensors", "model.bpk", "model.json", "config.toml", "accuracy.png"] {
        let from = folder.publishable().join(name);
        if from.exists() {
            std::fs::copy(&from, to.join(name)).map_err(Error::io(&from))?;
        }
    }
    let published = serde_json::Value::String(search.summary.clone());
    let mut result: crate::train::outputs::RunResult = read_json(&folder.result())?;
    let test_accuracy = result.test_accuracy;
    result.private = search.private;
    result.epsilon = search.private.then_some(search.guarantee.epsilon);
    result.epsilon_of_configuration = Some(search.guarantee.epsilon);
    let mut result = serde_json::to_value(result).map_err(Error::serialise("result.json"))?;
    result["delta"] = serde_json::json!(search.guarantee.delta);
    result["guarantee"] = published.clone();
    write_json(&to.join("result.json"), &result)?;
    let mut privacy: serde_json::Value = read_json(&folder.privacy())?;
    privacy["published_model_guarantee"] = serde_json::json!(format!(
        "this file describes one candidate run of a private search, the mechanism the search repeats; the \
         published model's guarantee is the search's (search.json): {}",
        search.summary
    ));
    write_json(&to.join("candidate-privacy.json"), &privacy)?;
    let rows: Vec<MetricsRow> = std::fs::read_to_string(folder.metrics_jsonl())
        .map_err(Error::io(folder.metrics_jsonl()))?
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| serde_json::from_str(l).map_err(|e| Error::file(folder.metrics_jsonl(), e.to_string())))
        .collect::<Result<_>>()?;
    let rows: Vec<MetricsRow> = rows.into_iter().map(|r| MetricsRow { epsilon_so_far: None, ..r }).collect();
    let header = std::fs::read_to_string(folder.metrics_csv()).map_err(Error::io(folder.metrics_csv()))?;
    let columns: Vec<&str> =
        header.lines().next().unwrap_or("").split(',').filter(|c| *c != "epsilon_so_far").collect();
    crate::files::atomic_write(&to.join("metrics.csv"), metrics_csv(&rows, &columns).as_bytes())?;
    crate::files::atomic_write(&to.join("metrics.jsonl"), jsonl(&rows)?.as_bytes())?;
    Ok(test_accuracy)
}

fn write_json(path: &Path, value: &serde_json::Value) -> Result<()> {
    let text = serde_json::to_string_pretty(value).map_err(Error::serialise("a published JSON file"))?;
    crate::files::atomic_write(path, text.as_bytes())
}

/// `publishable/README.txt` of a search.
fn search_readme(result: &SearchResult) -> String {
    format!(
        "PUBLISHABLE outputs of a dpgd private hyperparameter search: the chosen candidate's model and \
         configuration, its test accuracy and noisy validation accuracy, and the search's guarantee.\n\n\
         Safe to publish exactly when search.json says \"private\": true. Every file here is covered by the \
         search's guarantee, not by one candidate's: {}\n\n\
         candidate-privacy.json describes one candidate run (the mechanism the search repeats a random number \
         of times); result.json and metrics.* are the chosen candidate's, restated under the search's guarantee \
         (metrics without the candidate's running epsilon). How many candidates ran, which won and every other \
         candidate's score stay in ../confidential/.\n",
        result.summary
    )
}

/// Why the search is not private (empty when it is): a fixed search seed, and every reason any
/// candidate run is not private (a fixed `train.seed`, exact counts, a non-private method, …).
fn not_private_reasons(search: &Search) -> Vec<String> {
    let mut why = Vec::new();
    if let NoiseSeed::Fixed(s) = search.seed {
        why.push(format!(
            "search.seed = {s} is fixed: K, the draws, the scores' noise and every candidate's noise are a public \
             function of it"
        ));
    }
    for p in &search.points {
        for reason in p.config.non_private_reasons() {
            let reason = format!("a candidate's {reason}");
            if !why.contains(&reason) {
                why.push(reason);
            }
        }
    }
    why
}

fn search_result(search: &Search, chosen: Option<Chosen>) -> SearchResult {
    let g = &search.guarantee;
    let not_private_because = not_private_reasons(search);
    let private = not_private_because.is_empty();
    let k = match g.repetitions {
        Repetitions::TruncatedNegativeBinomial { eta, .. } => format!("a truncated negative binomial (eta {eta})"),
        Repetitions::Poisson { .. } => "a Poisson".to_string(),
    };
    let mut guarantee = format!(
        "({}, {:e})-DP for the whole search, the choice included: {k} number of candidates (mean {:.3}), each a \
         grid point of {} chosen at random, calibrated for epsilon = {} and scored on {} held-out examples with \
         discrete Gaussian noise of std {:.3}; via Renyi DP at order {} and the CKS conversion",
        crate::train::significant(g.epsilon),
        g.delta,
        g.mean_candidates,
        search.points.len(),
        crate::train::significant(g.candidate_epsilon),
        g.validation.examples,
        g.score_sigma,
        g.order
    );
    if !g.tiers.is_empty() {
        let tiers: Vec<String> = g
            .tiers
            .iter()
            .map(|t| {
                format!(
                    "epsilon {}: ({}, {:e})-DP",
                    t.epsilon,
                    crate::train::significant(t.guaranteed_epsilon),
                    g.delta
                )
            })
            .collect();
        guarantee += &format!(
            "; with personalized budgets, each example within its own tier's epsilon for the whole search: {}",
            tiers.join(", ")
        );
    }
    let summary = if private {
        guarantee
    } else {
        format!(
            "NOT PRIVATE: {}; with OS noise and private candidates it would be {guarantee}",
            not_private_because.join("; ")
        )
    };
    let neighbours =
        search.points[0].config.accounting().map_or_else(String::new, |a| a.neighbours(&search.points[0].config));
    SearchResult {
        private,
        not_private_because,
        summary,
        guarantee: g.clone(),
        neighbours,
        rests_on: "Papernot & Steinke 2022 (Thm 2: truncated negative binomial; Thm 6: Poisson) applied to one \
                   candidate's Renyi DP curve: the largest over the grid of max(the run's own curve, the noisy \
                   score's), the score being a count with sensitivity 1 over examples the run never trains on; \
                   with personalized budgets, each tier's from that tier's own curve in every candidate. delta \
                   includes (1 + e^epsilon) times the gap between K as drawn and K's distribution in the theorem \
                   (sampling_delta). Published: the chosen model, its configuration, its noisy validation accuracy \
                   and its test accuracy. Confidential: how many candidates ran, which won, and every other \
                   candidate."
            .into(),
        grid: search.points.iter().map(|p| GridPoint { point: p.json_point(), sigma: p.config.sigma() }).collect(),
        chosen,
    }
}
