//! Private selection: run a private algorithm a *random* number K of times and release only
//! the best outcome ([PS22]). The guarantee of the whole search, the selection included,
//! follows from the Rényi DP of one run:
//!
//! | K | the search is (λ, ε′)-RDP with ε′ = | theorem |
//! |---|---|---|
//! | truncated negative binomial (η, γ) | ε(λ) + (1+η)(1 − 1/λ̂)ε(λ̂) + (1+η)·ln(1/γ)/λ̂ + ln E\[K\]/(λ − 1), any λ̂ ≥ 1 | [PS22, Thm 2] |
//! | Poisson (μ), K = 0 releasing nothing | ε(λ) + μ·δ̂ + ln μ/(λ − 1), where one run is (ε̂, δ̂)-DP with e^ε̂ ≤ 1 + 1/(λ − 1) | [PS22, Thm 6] |
//!
//! Here one run Q is (λ, ε(λ))-RDP at every order λ of its curve. Both theorems hold for any
//! total order on Q's outputs ("best" = highest score, ties broken by a fixed rule), for
//! outputs that include the score and the run's own settings, and for a Q that draws its
//! settings at random: a mixture of mechanisms with the same mixing weights on both
//! neighbours is no less private than its least private component (the Rényi divergence is
//! jointly quasi-convex, [vEH14, Thm 13]), so a grid's curve is the pointwise maximum of its
//! points' curves ([`Rdp::pointwise_max`]).
//!
//! K itself is secret: revealing how many runs were made (or which won, or any other run's
//! score) is outside the guarantee.
//!
//! **Rounding.** Every ε′ is computed in `f64` and reported with the crate's
//! [`ROUNDING_MARGIN`](crate::numeric::ROUNDING_MARGIN) over the magnitude of its terms (each
//! logarithm counted with an extra unit for its own rounding), so it is never below the exact
//! value; ε̂ is rounded *down* (δ̂ then only grows); δ̂ uses the conversion of [CKS20, Prop. 12]
//! rounded up. The minimum over λ̂ takes the bound at one λ̂, which is a valid bound by itself.
//!
//! [PS22]: https://arxiv.org/abs/2110.03620
//! [vEH14]: https://arxiv.org/abs/1206.2459
//! [CKS20]: https://arxiv.org/abs/2004.00010

use crate::error::{AccountingError, Result};
use crate::measure::Rdp;
use crate::numeric::{largest_where, mul_up, with_margin};

/// The largest mean number of runs a search may ask for: a bound on the work a search file
/// can request, and the range in which every distribution here is sampled without underflow.
pub const MAX_MEAN: f64 = 100.0;

/// The most runs [`Repetitions::sample`] draws: a bound on its walk.
pub const MAX_DRAW: u64 = 1_000_000;

/// How many times the search runs its candidate: K's distribution ([PS22, §3]).
///
/// [PS22]: https://arxiv.org/abs/2110.03620
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "distribution", rename_all = "kebab-case", deny_unknown_fields)]
pub enum Repetitions {
    /// P\[K = k\] ∝ (1 − γ)^k · ∏_{ℓ<k} (ℓ + η)/(ℓ + 1) for k ≥ 1 ([PS22, Def. 1]): η = 1 is
    /// the geometric distribution, η = 0 the logarithmic one.
    ///
    /// [PS22]: https://arxiv.org/abs/2110.03620
    TruncatedNegativeBinomial {
        /// η > −1.
        eta: f64,
        /// γ ∈ (0, 1).
        gamma: f64,
    },
    /// K ~ Poisson(μ); K = 0 releases nothing.
    Poisson {
        /// μ > 0.
        mu: f64,
    },
}

impl Repetitions {
    /// The truncated negative binomial with shape `eta` and mean `mean` (γ solved for).
    ///
    /// # Errors
    /// `eta` not in (−1, ∞), or `mean` not in (1, [`MAX_MEAN`]].
    pub fn negative_binomial_with_mean(eta: f64, mean: f64) -> Result<Self> {
        if !(eta.is_finite() && eta > -1.0) {
            return Err(invalid("eta", eta, "the negative binomial's shape eta must be a finite number > -1"));
        }
        if !(mean > 1.0 && mean <= MAX_MEAN) {
            return Err(invalid("mean", mean, "the mean number of runs must be in (1, 100]: K is at least 1"));
        }
        // E[K] falls from ∞ to 1 as γ goes from 0 to 1: the largest γ with E[K] ≥ mean.
        let mean_at = |gamma: f64| negative_binomial_mean(eta, gamma);
        let gamma = largest_where(1e-300, 0.5, |g| g < 1.0 && mean_at(g) >= mean)
            .filter(|&g| g > 0.0 && g < 1.0)
            .ok_or_else(|| invalid("mean", mean, "no gamma in (0, 1) gives this mean"))?;
        Ok(Self::TruncatedNegativeBinomial { eta, gamma })
    }

    /// K ~ Poisson(`mean`).
    ///
    /// # Errors
    /// `mean` not in (0, [`MAX_MEAN`]].
    pub fn poisson(mean: f64) -> Result<Self> {
        if !(mean > 0.0 && mean <= MAX_MEAN) {
            return Err(invalid("mean", mean, "the Poisson mean number of runs must be in (0, 100]"));
        }
        Ok(Self::Poisson { mu: mean })
    }

    /// Checks the parameters (as the constructors do, for a deserialised value).
    ///
    /// # Errors
    /// As the constructors.
    pub fn check(&self) -> Result<()> {
        match *self {
            Self::TruncatedNegativeBinomial { eta, gamma } => {
                if !(eta.is_finite() && eta > -1.0) {
                    return Err(invalid("eta", eta, "must be a finite number > -1"));
                }
                if !(gamma > 0.0 && gamma < 1.0) || self.mean() > MAX_MEAN * (1.0 + 1e-9) {
                    return Err(invalid("gamma", gamma, "must lie in (0, 1) with a mean of at most 100"));
                }
                Ok(())
            }
            Self::Poisson { mu } => Self::poisson(mu).map(|_| ()),
        }
    }

    /// E\[K\].
    #[must_use]
    pub fn mean(&self) -> f64 {
        match *self {
            Self::TruncatedNegativeBinomial { eta, gamma } => negative_binomial_mean(eta, gamma),
            Self::Poisson { mu } => mu,
        }
    }

    /// K drawn by inversion from `u` uniform in [0, 1): the smallest k whose cumulative
    /// probability exceeds `u`. The walk stops at the first k past the mean whose probability
    /// is below 2⁻⁷⁰, and at [`MAX_DRAW`] at the latest, so it ends for every `u`; that cut and
    /// the rounding of the cumulative sum move the drawn distribution from the theorem's by
    /// about 10⁻¹⁵ in total variation for the distributions a search file can ask for (η ≥ 0;
    /// heavier tails, η < 0, are cut at [`MAX_DRAW`]).
    #[must_use]
    pub fn sample(&self, u: f64) -> u64 {
        self.walk(u).0
    }

    /// The walk of [`sample`](Self::sample): the k it stops at for `u`, and its cumulative
    /// probability there (for `u` ≥ 1, where the walk ends whatever the draw).
    fn walk(&self, u: f64) -> (u64, f64) {
        let (mut k, mut p) = match *self {
            Self::TruncatedNegativeBinomial { eta, gamma } => {
                // P[K = 1] = (1 − γ)·η / (γ^−η − 1), or (1 − γ)/ln(1/γ) for η = 0.
                let p1 = if eta == 0.0 {
                    (1.0 - gamma) / (-gamma.ln())
                } else {
                    (1.0 - gamma) * eta / (-eta * gamma.ln()).exp_m1()
                };
                (1u64, p1)
            }
            Self::Poisson { mu } => (0u64, (-mu).exp()),
        };
        let mean = self.mean();
        let mut cdf = p;
        while cdf <= u && k < MAX_DRAW && !(p < f64::from_bits(0x3B90_0000_0000_0000) && k as f64 > mean) {
            p *= match *self {
                Self::TruncatedNegativeBinomial { eta, gamma } => (1.0 - gamma) * (k as f64 + eta) / (k as f64 + 1.0),
                Self::Poisson { mu } => mu / (k as f64 + 1.0),
            };
            k += 1;
            cdf += p;
        }
        (k, cdf)
    }

    /// An upper bound on the total variation distance between the distribution of
    /// [`sample`](Self::sample)`(u)`, for `u` uniform over the multiples of 2⁻⁵³ in [0, 1) (what
    /// a uniform `f64` draw gives), and K's distribution in the theorems: the mass the walk's
    /// cut leaves out (it lumps every K past its last step there: 4.2·10⁻⁷ for η = −0.9 and a
    /// mean of 10, cut at [`MAX_DRAW`]) plus the rounding of its probabilities, its cumulative
    /// sum and `u`. A search whose K is drawn this way is (ε, δ + (1 + e^ε)·gap)-DP where the
    /// theorem gives (ε, δ) (for any event S, P̂(S) ≤ P(S) + gap ≤ e^ε·P′(S) + δ + gap ≤
    /// e^ε·(P̂′(S) + gap) + δ + gap).
    ///
    /// **The bound.** The walk stops at k* (the last k it can reach); with ĉ its cumulative
    /// sum there, the true tail P\[K > k*\] = 1 − c\_{k*} ≤ (1 − ĉ) + E, where E bounds
    /// |ĉ − c|: each of k* additions rounds by at most 2⁻⁵³, each probability p̂ₖ carries the
    /// relative error of its k ratios (4 roundings each) and of the first probability
    /// (2|x| + 8 units for the exponential of x = −η ln γ, or μ + 2 for e^(−μ)), so
    /// Σₖ |p̂ₖ − pₖ| ≤ (4·E\[K\] + first)·2⁻⁵³. Half the sum of |P̂(k) − P(k)| over k is then
    /// at most the tail plus E plus the grid of `u` (2⁻⁵³ at each of the k* + 1 bounds).
    /// Rounded up by a factor 1 + 10⁻⁶.
    #[must_use]
    pub fn sampling_gap(&self) -> f64 {
        let unit = f64::EPSILON / 2.0;
        let (k_stop, cdf) = self.walk(1.0);
        let first = match *self {
            Self::TruncatedNegativeBinomial { eta, gamma } => 2.0 * (eta * gamma.ln()).abs() + 8.0,
            Self::Poisson { mu } => mu + 2.0,
        };
        let e = (k_stop as f64 + 1.0) * unit + (4.0 * self.mean() + first) * unit;
        let tail = (1.0 - cdf).max(0.0) + e;
        let grid = (k_stop as f64 + 1.0) * unit;
        (tail + e + grid) * (1.0 + 1e-6)
    }

    /// The Rényi DP of the search at each order λ of `one_run` (one run's curve), rounded up:
    /// [PS22, Thm 2] (minimised over λ̂ ∈ {1} ∪ the curve's orders) or [PS22, Thm 6]
    /// (see the [module docs](self)).
    ///
    /// # Errors
    /// Invalid parameters, or a bound that is not a finite number.
    pub fn rdp(&self, one_run: &Rdp) -> Result<Rdp> {
        self.check()?;
        let orders = one_run.orders().to_vec();
        let mut out = Vec::with_capacity(orders.len());
        match *self {
            Self::TruncatedNegativeBinomial { eta, gamma } => {
                let c = selection_cost(eta, gamma, one_run);
                let log_mean = negative_binomial_log_mean(eta, gamma);
                for (&lambda, &eps) in orders.iter().zip(one_run.epsilons()) {
                    let tail = log_mean / (lambda - 1.0);
                    out.push(with_margin(eps + c + tail, eps + c + tail.abs() + 1.0));
                }
            }
            Self::Poisson { mu } => {
                for (&lambda, &eps) in orders.iter().zip(one_run.epsilons()) {
                    let delta_hat = delta_of(one_run, epsilon_hat(lambda));
                    let (a, b) = (mul_up(mu, delta_hat), mu.ln() / (lambda - 1.0));
                    out.push(with_margin(eps + a + b, eps + a + b.abs() + 1.0));
                }
            }
        }
        if let Some(bad) = out.iter().find(|e| !e.is_finite()) {
            return Err(invalid("search rdp", *bad, "the search's Renyi DP is not a finite number"));
        }
        Rdp::new(orders, out.into_iter().map(|e| e.max(0.0)).collect())
    }
}

/// E\[K\] of the truncated negative binomial: η(1 − γ)/(γ(1 − γ^η)), or (1/γ − 1)/ln(1/γ) for
/// η = 0 ([PS22, Thm 2]).
fn negative_binomial_mean(eta: f64, gamma: f64) -> f64 {
    negative_binomial_log_mean(eta, gamma).exp()
}

/// ln E\[K\], formed from logarithms (1 − γ^η as −expm1(η ln γ)) so that it keeps its relative
/// precision for η near 0 and γ near 0 or 1.
fn negative_binomial_log_mean(eta: f64, gamma: f64) -> f64 {
    let ln_gamma = gamma.ln();
    if eta == 0.0 {
        return (-gamma).ln_1p() - ln_gamma - (-ln_gamma).ln();
    }
    // η/(1 − γ^η) > 0 for every η > −1, η ≠ 0: both signs flip together.
    let ratio = (eta / -(eta * ln_gamma).exp_m1()).ln();
    ratio + (-gamma).ln_1p() - ln_gamma
}

/// min over λ̂ ∈ {1} ∪ orders of (1+η)(1 − 1/λ̂)ε(λ̂) + (1+η)·ln(1/γ)/λ̂, each term rounded up.
fn selection_cost(eta: f64, gamma: f64, one_run: &Rdp) -> f64 {
    let scale = 1.0 + eta;
    let log_inv_gamma = -gamma.ln();
    let at = |lambda_hat: f64, eps_hat: f64| {
        let (a, b) = (scale * (1.0 - 1.0 / lambda_hat) * eps_hat, scale * log_inv_gamma / lambda_hat);
        with_margin(a + b, a + b + 1.0)
    };
    one_run.orders().iter().zip(one_run.epsilons()).map(|(&l, &e)| at(l, e)).fold(at(1.0, 0.0), f64::min)
}

/// ln(1 + 1/(λ − 1)) rounded down, so that e^ε̂ ≤ 1 + 1/(λ − 1) as [PS22, Thm 6] requires.
fn epsilon_hat(lambda: f64) -> f64 {
    let e = (1.0 / (lambda - 1.0)).ln_1p();
    (e - 4.0 * f64::EPSILON * e).max(0.0)
}

/// The smallest δ with which a run of curve `rdp` is (ε, δ)-DP, over its orders by the
/// conversion of [CKS20, Prop. 12], δ = e^{(α−1)(ε(α)−ε)}·(1 − 1/α)^{α−1}/α, rounded up and at
/// most 1.
pub fn delta_of(rdp: &Rdp, epsilon: f64) -> f64 {
    let at = |(&alpha, &tau): (&f64, &f64)| {
        let x = alpha - 1.0;
        let terms = [x * tau, -x * epsilon, x * (-1.0 / alpha).ln_1p(), -alpha.ln()];
        let log_delta = with_margin(terms.iter().sum(), terms.iter().map(|t| t.abs()).sum::<f64>() + 2.0);
        let d = log_delta.exp();
        with_margin(d, d)
    };
    rdp.orders().iter().zip(rdp.epsilons()).map(at).fold(1.0, f64::min)
}

impl Rdp {
    /// The pointwise maximum of `curves` at the orders all of them list: the curve of a
    /// mechanism that runs one of them chosen with weights that do not depend on the data
    /// ([vEH14, Thm 13]: the Rényi divergence is jointly quasi-convex).
    ///
    /// # Errors
    /// No curve, or no order common to every curve.
    ///
    /// [vEH14]: https://arxiv.org/abs/1206.2459
    pub fn pointwise_max(curves: &[Rdp]) -> Result<Rdp> {
        let Some(first) = curves.first() else {
            return Err(invalid("curves", 0.0, "need at least one RDP curve"));
        };
        let mut orders = Vec::new();
        let mut epsilons = Vec::new();
        for (i, &alpha) in first.orders().iter().enumerate() {
            let mut worst = first.epsilons()[i];
            let mut everywhere = true;
            for c in &curves[1..] {
                match c.orders().iter().position(|&a| a == alpha) {
                    Some(j) => worst = worst.max(c.epsilons()[j]),
                    None => everywhere = false,
                }
            }
            if everywhere {
                orders.push(alpha);
                epsilons.push(worst);
            }
        }
        if orders.is_empty() {
            return Err(invalid(
                "orders",
                curves.len() as f64,
                "the curves share no Renyi order: their maximum has none (mix methods accounted at the same orders)",
            ));
        }
        Rdp::new(orders, epsilons)
    }
}

fn invalid(name: &'static str, value: f64, expected: &'static str) -> AccountingError {
    AccountingError::InvalidParameter { name, value, expected }
}
