//! Neighbouring datasets: which pairs of datasets a guarantee compares. See [`Neighbours`].

use std::fmt;
use std::str::FromStr;

/// A neighbouring relation under which a guarantee holds.
///
/// A differential-privacy guarantee is only meaningful together with its neighbouring relation.
/// Private gradient descent with individual filtering ([FZ21], Algorithm 3) divides the noisy
/// sum of clipped gradients by the dataset size n and may publish n, so it is stated for
/// relations that keep n fixed:
///
/// * **zero-out** (replace one example by a null example that contributes nothing; [FZ21] §2,
///   the paper's relation): one example changes the clipped sum by at most its own clipped
///   gradient, norm ≤ C. This is the default.
/// * **replace-one** (replace one example by any other example): the clipped sum changes by
///   the difference of two clipped gradients, norm ≤ 2C, so the Gaussian noise is calibrated
///   for sensitivity 2C. Counts (the number of active examples, of correctly classified
///   examples) still change by at most 1.
///
/// Under add-or-remove-one (the relation of much of the DP-SGD literature) n itself differs
/// between neighbours, so releasing n — or dividing by it — is not private; dpgd does not
/// claim it.
///
/// [FZ21]: https://arxiv.org/abs/2008.11193
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Neighbours {
    /// Datasets that differ by replacing one example with a null example ([FZ21] §2).
    ///
    /// [FZ21]: https://arxiv.org/abs/2008.11193
    #[default]
    ZeroOut,
    /// Datasets that differ by replacing one example with another.
    ReplaceOne,
}

impl Neighbours {
    /// Both relations, the default first.
    pub const ALL: [Neighbours; 2] = [Neighbours::ZeroOut, Neighbours::ReplaceOne];

    /// The name used in configs and on the command line.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Neighbours::ZeroOut => "zero-out",
            Neighbours::ReplaceOne => "replace-one",
        }
    }

    /// The ℓ₂-sensitivity of a sum of vectors, each of norm at most 1, under this relation:
    /// 1 for zero-out, 2 for replace-one (a sum of vectors of norm ≤ c has sensitivity
    /// `factor · c`).
    #[must_use]
    pub fn sum_sensitivity(self) -> f64 {
        match self {
            Neighbours::ZeroOut => 1.0,
            Neighbours::ReplaceOne => 2.0,
        }
    }

    /// One sentence saying which datasets are neighbours, for reports.
    #[must_use]
    pub fn describe(self) -> &'static str {
        match self {
            Neighbours::ZeroOut => {
                "zero-out: neighbouring datasets differ in one example, replaced by a null example that \
                 contributes nothing (Feldman & Zrnic 2021, Sec. 2); the dataset size n is public"
            }
            Neighbours::ReplaceOne => {
                "replace-one: neighbouring datasets differ in one example, replaced by any other example; \
                 the dataset size n is public"
            }
        }
    }
}

impl fmt::Display for Neighbours {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Neighbours {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Neighbours::ALL
            .into_iter()
            .find(|n| n.name() == s)
            .ok_or_else(|| format!("unknown neighbouring relation `{s}`; expected zero-out or replace-one"))
    }
}
