//! A search made ready: its file checked, its validation split held out, every candidate
//! calibrated so that the whole search meets its target (each tier its own ε), and its
//! guarantee recomputed before anything trains.

use std::path::Path;

use super::section::SearchSection;
use super::types::{Search, SearchGuarantee, SearchTier};
use crate::accounting::numeric::mul_up;
use crate::accounting::sampling::DiscreteGaussian;
use crate::accounting::selection::Repetitions;
use crate::accounting::{Conversion, Rdp, ToApproxDp};
use crate::data::HoldOut;
use crate::error::{Error, Result};
use crate::noise::NoiseSeed;
use crate::sweep::plan::{PlannedRun, SweepFile, plan_with};
use crate::train::{TrainConfig, ValidConfig};

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
/// As [`plan_with`]; a `seeds` list, a `reuse` list or a grid of one point; a grid field that the
/// search sets (`privacy.epsilon`, `privacy.sigma`, `privacy.delta`, `privacy.budgets`,
/// `train.seed`, `data.*`); a method without a Rényi DP curve; points with different data
/// sections; a validation split that leaves nothing to train on; a K whose sampling costs
/// more than half of δ; or a target (or a tier) that no candidate ε meets.
pub fn prepare(path: &Path, target: (f64, f64)) -> Result<Search> {
    prepare_with(path, target, &[])
}

/// As [`prepare`], with `extra` overrides (the command line's, e.g. `--audit`) applied to every
/// candidate after the sweep file's own.
///
/// # Errors
/// As [`prepare`].
pub fn prepare_with(path: &Path, target: (f64, f64), extra: &[crate::train::Override]) -> Result<Search> {
    let (sweep, planned) = plan_with(path, extra)?;
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
    let candidate_epsilon =
        calibrate(epsilon, base_epsilon, "--epsilon", "raise --epsilon, or lower search.candidates.mean")?;
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
        // σ is --epsilon's: a tier too strict for one of its steps needs more noise, not less.
        let remedy = "lower --epsilon (more noise, so that a step costs each example less: as in a run with tiers, \
                      calibrate the noise for the strictest tier), lower search.candidates.mean, or raise the tier's \
                      epsilon";
        done[j] = Some(calibrate(targets[j], tier_epsilon, &field, remedy)?);
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
        let j_curve = if base_tier_only() { 0 } else { j };
        let curve = grid.search_curve(valid, score, |v| v.accounting()?.tier_rdp(j_curve))?;
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

#[cfg(test)]
thread_local! {
    /// A deliberate bug (test builds only): every tier's search guarantee computed from the base
    /// tier's curve, as the search once did.
    pub(super) static BASE_TIER_ONLY: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

#[cfg(test)]
fn base_tier_only() -> bool {
    BASE_TIER_ONLY.with(std::cell::Cell::get)
}

#[cfg(not(test))]
fn base_tier_only() -> bool {
    false
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
    // Rounded down: a larger δ would understate ε.
    Ok((crate::accounting::numeric::sub_down(delta, sampling), sampling))
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
/// by `field`, with `remedy` as what to do), then bisection to 10⁻⁴ relative.
fn calibrate(target: f64, search_epsilon: impl Fn(f64) -> Result<f64>, field: &str, remedy: &str) -> Result<f64> {
    let mut hi = target;
    let out_of_reach = |lo: f64, why: String| {
        Error::config(
            field,
            format!(
                "a search within epsilon = {target} is out of reach: candidates at epsilon = {lo:.3e} {why} (the choice \
                 among a random number of runs costs this much on its own): {remedy}"
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
