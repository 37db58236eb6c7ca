//! What a search is and says: its guarantee (each tier's too), the search ready to run, its
//! confidential state and what it publishes.

use serde::{Deserialize, Serialize};

use crate::accounting::Conversion;
use crate::accounting::sampling::DiscreteGaussian;
use crate::accounting::selection::Repetitions;
use crate::data::{Dataset, HoldOut, Split};
use crate::noise::NoiseSeed;
use crate::sweep::plan::PlannedRun;
use crate::train::Observer;

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
    pub(super) score: DiscreteGaussian,
    pub(super) seed: NoiseSeed,
    pub(super) data: Dataset,
    pub(super) validation: Split,
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
