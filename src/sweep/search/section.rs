//! The `[search]` section of a sweep file: how `--select private` searches.

use serde::{Deserialize, Serialize};

use crate::accounting::selection::Repetitions;
use crate::error::{Error, Result};

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
