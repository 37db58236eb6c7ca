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
    /// ε of the whole search at `delta`, rounded up.
    pub epsilon: f64,
    /// δ.
    pub delta: f64,
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

/// Reads a sweep file for `--select private`, loads its data, holds out the validation split
/// and calibrates every candidate so that the whole search is within `target` = (ε, δ).
///
/// # Errors
/// As [`plan`]; a `seeds` list, a `reuse` list or a grid of one point; a grid field that the
/// search sets (`privacy.epsilon`, `privacy.sigma`, `privacy.delta`, `train.seed`, `data.*`); a
/// method without a Rényi DP curve; points with different data sections; a validation split
/// that leaves nothing to train on; or a target that no candidate ε meets.
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
    let configs: Vec<TrainConfig> = planned
        .iter()
        .map(|p| {
            let mut c = p.config.config().clone();
            c.data.hold_out = Some(hold_out);
            c.privacy.delta = delta;
            c
        })
        .collect();
    let search_epsilon = |eps_c: f64| -> Result<(Vec<ValidConfig>, Rdp, DiscreteGaussian)> {
        let score = score_noise(section.score_noise, eps_c, delta)?;
        let score_rho = score.zcdp(1.0).map_err(|e| Error::config("search.score_noise", e.to_string()))?.rho();
        let mut valid = Vec::with_capacity(configs.len());
        let mut curves = Vec::with_capacity(configs.len());
        for (c, p) in configs.iter().zip(&planned) {
            let (v, curve) = candidate_curve(c, &p.id, eps_c, score_rho)?;
            curves.push(curve);
            valid.push(v);
        }
        let one = Rdp::pointwise_max(&curves).map_err(|e| Error::config("sweep grid", e.to_string()))?;
        let search = repetitions.rdp(&one).map_err(|e| Error::config("search.candidates", e.to_string()))?;
        Ok((valid, search, score))
    };
    let eps_of = |rdp: &Rdp| rdp.epsilon(delta, Conversion::Cks).unwrap_or(f64::INFINITY);
    let candidate_epsilon = calibrate(epsilon, |e| search_epsilon(e).map(|(_, r, _)| eps_of(&r)))?;
    let (valid, curve, score) = search_epsilon(candidate_epsilon)?;
    let score_rho = score.zcdp(1.0).map_err(|e| Error::config("search.score_noise", e.to_string()))?.rho();
    let (final_epsilon, order) = best_order(&curve, delta);
    if final_epsilon > epsilon {
        return Err(Error::State(format!("the calibrated search costs {final_epsilon} > the target {epsilon}")));
    }
    let points = planned.into_iter().zip(valid).map(|(p, config)| PlannedRun { config, ..p }).collect();
    let guarantee = SearchGuarantee {
        epsilon: final_epsilon,
        delta,
        order,
        conversion: Conversion::Cks,
        repetitions,
        mean_candidates: repetitions.mean(),
        candidate_epsilon,
        score_sigma: score.sigma(),
        score_rho,
        validation: hold_out,
    };
    let seed = section.seed.map_or(NoiseSeed::Os, NoiseSeed::Fixed);
    Ok(Search { name: sweep.name, points, guarantee, score, seed, data, validation })
}

/// Grid point `id`'s run (`config` at candidate ε `eps_c`) and its curve as one candidate:
/// the pointwise maximum of the run's own Rényi curve and the score's, λρ_v (see the
/// [module docs](self)).
fn candidate_curve(config: &TrainConfig, id: &str, eps_c: f64, score_rho: f64) -> Result<(ValidConfig, Rdp)> {
    let mut c = config.clone();
    (c.privacy.epsilon, c.privacy.sigma) = (Some(eps_c), None);
    let v = c.validate().map_err(|e| Error::config(format!("sweep run {id}"), e.to_string()))?;
    let Some(train) = v.accounting().and_then(|a| a.rdp()) else {
        return Err(Error::config(
            format!("sweep run {id}: privacy.method"),
            "a private search needs every candidate's Renyi DP curve: use a private method",
        ));
    };
    let score = train.orders().iter().map(|&a| mul_up(a, score_rho)).collect();
    let score =
        Rdp::new(train.orders().to_vec(), score).map_err(|e| Error::config("search.score_noise", e.to_string()))?;
    let curve = Rdp::pointwise_max(&[train, score]).map_err(|e| Error::config("search", e.to_string()))?;
    Ok((v, curve))
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
/// or candidates whose own configs refuse so small an ε, put the target out of reach), then
/// bisection to 10⁻⁴ relative.
fn calibrate(target: f64, search_epsilon: impl Fn(f64) -> Result<f64>) -> Result<f64> {
    let mut hi = target;
    let out_of_reach = |lo: f64, why: String| {
        Error::config(
            "--epsilon",
            format!(
                "a search within epsilon = {target} is out of reach: candidates at epsilon = {lo:.3e} {why} (the choice \
                 among a random number of runs costs this much on its own): raise --epsilon, or lower \
                 search.candidates.mean"
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
            if reserved.contains(&field.as_str()) || field.starts_with("data.") {
                return Err(Error::config(
                    at(&format!("grid.{field}")),
                    "the search sets this itself (epsilon and delta from --epsilon/--delta, the noise seeds, one data \
                     section): remove it from the grid (and `seeds`)",
                ));
            }
        }
        if p.config.config().data != planned[0].config.config().data {
            return Err(Error::config(at("cases"), "every candidate must train on the same data section"));
        }
    }
    if planned[0].config.config().data.hold_out.is_some() {
        return Err(Error::config(at("base"), "the search holds out its own validation split: remove data.hold_out"));
    }
    Ok(sweep.search.clone().unwrap_or_default())
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
    /// Whether the guarantee holds (false with a fixed seed).
    pub private: bool,
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
        let opts = RunOptions { stop_after: stop_after.filter(|&(c, _)| c == i).map(|(_, s)| s), ..Default::default() };
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
            return Err(Error::Record(format!(
                "{}: the draws and scores do not belong together (the file is damaged): delete the search folder \
                 to start over",
                path.display()
            )));
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
    let text = serde_json::to_string_pretty(state).map_err(|e| Error::Record(e.to_string()))?;
    crate::files::atomic_write(&state_path(dir), text.as_bytes())
}

/// A hash of everything the draws and scores belong to.
fn identity(search: &Search) -> Result<String> {
    let mut text = serde_json::to_string(&search.guarantee).map_err(|e| Error::Record(e.to_string()))?;
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
    let folder = RunFolder::new(dir.join("confidential").join("candidates").join(format!("{i}-{}", point.id)));
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

/// Writes `publishable/`: the chosen candidate's publishable files (its own `privacy.json` as
/// `candidate-privacy.json`) and `search.json`, beside the folder then renamed into place.
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
    let chosen = match best {
        None => None,
        Some(i) => {
            let (_, folder) = candidate(search, state, i, dir)?;
            for entry in std::fs::read_dir(folder.publishable()).map_err(Error::io(folder.publishable()))? {
                let entry = entry.map_err(Error::io(folder.publishable()))?;
                let name = entry.file_name();
                let to =
                    if name == "privacy.json" { partial.join("candidate-privacy.json") } else { partial.join(&name) };
                std::fs::copy(entry.path(), &to).map_err(Error::io(entry.path()))?;
            }
            let result: crate::train::outputs::RunResult = read_json(&folder.result())?;
            let noisy = state.scores[i].unwrap_or(0) as f64 / search.guarantee.validation.examples as f64;
            Some(Chosen {
                point: search.points[state.draws[i]].json_point(),
                noisy_validation_accuracy: noisy,
                test_accuracy: result.test_accuracy,
            })
        }
    };
    let result = search_result(search, chosen);
    let text = serde_json::to_string_pretty(&result).map_err(|e| Error::Record(e.to_string()))?;
    crate::files::atomic_write(&partial.join("search.json"), text.as_bytes())?;
    let out = dir.join("publishable");
    if out.exists() {
        std::fs::remove_dir_all(&out).map_err(Error::io(&out))?;
    }
    std::fs::rename(&partial, &out).map_err(Error::io(&out))?;
    Ok(result)
}

fn search_result(search: &Search, chosen: Option<Chosen>) -> SearchResult {
    let g = &search.guarantee;
    let private = !search.seed.is_fixed();
    let k = match g.repetitions {
        Repetitions::TruncatedNegativeBinomial { eta, .. } => format!("a truncated negative binomial (eta {eta})"),
        Repetitions::Poisson { .. } => "a Poisson".to_string(),
    };
    let guarantee = format!(
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
    let summary = if private {
        guarantee
    } else {
        format!("NOT PRIVATE: the search has a fixed seed (search.seed); with OS noise it would be {guarantee}")
    };
    let neighbours =
        search.points[0].config.accounting().map_or_else(String::new, |a| a.neighbours(&search.points[0].config));
    SearchResult {
        private,
        summary,
        guarantee: g.clone(),
        neighbours,
        rests_on: "Papernot & Steinke 2022 (Thm 2: truncated negative binomial; Thm 6: Poisson) applied to one \
                   candidate's Renyi DP curve: the largest over the grid of max(the run's own curve, the noisy \
                   score's), the score being a count with sensitivity 1 over examples the run never trains on. \
                   Published: the chosen model, its configuration, its noisy validation accuracy and its test \
                   accuracy. Confidential: how many candidates ran, which won, and every other candidate."
            .into(),
        grid: search.points.iter().map(|p| GridPoint { point: p.json_point(), sigma: p.config.sigma() }).collect(),
        chosen,
    }
}
