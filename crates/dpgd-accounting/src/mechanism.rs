//! Mechanisms to run inside a session: the Gaussian mechanism for counts and sums, and the
//! individually filtered Gaussian mechanism for adaptively chosen linear queries
//! ([FZ21, §4.2, Cor. 4.7, Thm 1.2]) — of which private GD with filtering is one instance.

use rand::Rng;
use rand_distr::{Distribution, StandardNormal};

use super::error::{AccountingError, Result, positive};
use super::filter::IndividualFilter;
use super::measure::Zcdp;
use super::numeric::{div_up, half_up, mul_up, sqrt_up};

/// The Gaussian mechanism: a statistic with ℓ₂-sensitivity Δ plus N(0, σ²) per coordinate,
/// Δ²/(2σ²)-zCDP ([BS16, Prop. 1.6]).
///
/// ```
/// use dpgd_accounting::mechanism::GaussianMechanism;
/// let count = GaussianMechanism::new(2.0, 1.0).unwrap();
/// assert_eq!(count.cost().rho(), 0.125);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GaussianMechanism {
    sigma: f64,
    sensitivity: f64,
    cost: Zcdp,
}

impl GaussianMechanism {
    /// Noise std σ for a statistic of sensitivity Δ (1 for a count).
    ///
    /// # Errors
    /// [`AccountingError::InvalidParameter`] naming `sigma` or `sensitivity` if either is
    /// not a finite number > 0, or naming `sigma` if the cost Δ²/(2σ²) overflows (σ far too
    /// small for Δ).
    pub fn new(sigma: f64, sensitivity: f64) -> Result<Self> {
        let sigma = positive("sigma", sigma)?;
        let sensitivity = positive("sensitivity", sensitivity)?;
        // Rounded up: a cost that underflows becomes the smallest positive ρ, never 0.
        let ratio = div_up(sensitivity, sigma);
        let cost = Zcdp::new(half_up(mul_up(ratio, ratio))).map_err(|_| AccountingError::InvalidParameter {
            name: "sigma",
            value: sigma,
            expected: "the cost sensitivity^2 / (2 sigma^2) must be a finite number: sigma is too small \
                       for this sensitivity",
        })?;
        Ok(Self { sigma, sensitivity, cost })
    }
    /// Its zCDP cost Δ²/(2σ²), rounded up (validated finite and > 0 by [`new`](Self::new)).
    #[must_use]
    pub fn cost(&self) -> Zcdp {
        self.cost
    }
    /// The noise standard deviation σ.
    #[must_use]
    pub fn sigma(&self) -> f64 {
        self.sigma
    }
    /// The ℓ₂-sensitivity Δ the cost is computed for.
    #[must_use]
    pub fn sensitivity(&self) -> f64 {
        self.sensitivity
    }
    /// Releases `values` with noise added in place.
    pub fn release(&self, values: &mut [f64], rng: &mut impl Rng) {
        for v in values {
            let z: f64 = StandardNormal.sample(rng);
            *v += self.sigma * z;
        }
    }
}

/// Adaptively chosen d-dimensional linear queries answered under an individual filter
/// ([FZ21, Cor. 4.7]): each user's contribution qₜ(xᵢ) is scaled to norm
/// min(‖qₜ(xᵢ)‖, √(B_norm − spentᵢ)), users whose budget is spent contribute nothing, and the
/// sum gets N(0, σ²I) with σ² = B_norm/(2κ) (σ rounded up). The whole sequence is κ-zCDP
/// however many queries are asked ([FZ21, Thm 4.5]), and answers are accurate on the still-active
/// users.
///
/// ```
/// use dpgd_accounting::mechanism::FilteredLinearQueries;
/// use rand::SeedableRng;
/// // Daily counts over 1,000 rarely active users: each user may appear in ~25 days' counts
/// // (B_norm = 25), the whole unbounded sequence is 0.5-zCDP.
/// let mut q = FilteredLinearQueries::new(1000, 25.0, 0.5).unwrap();
/// let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(1);
/// for day in 0..100 {
///     let active_today = |user: usize| if (user + day) % 20 == 0 { vec![1.0] } else { vec![0.0] };
///     let count = q.answer(1, active_today, &mut rng).unwrap();
///     assert_eq!(count.len(), 1);
/// }
/// assert_eq!(q.guarantee().rho(), 0.5);
/// ```
#[derive(Debug, Clone)]
pub struct FilteredLinearQueries {
    ledger: IndividualFilter,
    kappa: Zcdp,
    noise: GaussianMechanism,
}

impl FilteredLinearQueries {
    /// `users` users with squared-norm budget `b_norm` each; the sequence is `kappa`-zCDP.
    ///
    /// # Errors
    /// [`AccountingError::InvalidParameter`] naming `b_norm` or `kappa` (either not a
    /// finite positive number), `sigma` (σ = √(b_norm/(2κ)) not a finite positive number:
    /// the ratio is too extreme) or `n` (a ledger for `users` examples cannot be allocated).
    pub fn new(users: usize, b_norm: f64, kappa: f64) -> Result<Self> {
        let b_norm = positive("b_norm", b_norm)?;
        let kappa = Zcdp::new(positive("kappa", kappa)?)?;
        let sigma = sqrt_up(div_up(b_norm, mul_up(2.0, kappa.rho())));
        Ok(Self { ledger: IndividualFilter::new(users, b_norm)?, kappa, noise: GaussianMechanism::new(sigma, 1.0)? })
    }

    /// Answers the `dim`-dimensional linear query `q` (user index → contribution) with noise;
    /// each user's ledger is charged the squared norm of what it contributes. A contribution
    /// longer than `dim` is charged its full norm but only its first `dim` coordinates are
    /// summed; a non-finite contribution is dropped and its user charged the whole remaining
    /// budget.
    ///
    /// # Errors
    /// [`AccountingError::InvalidParameter`] naming `dim` if a vector of `dim` numbers cannot
    /// be allocated (nothing is charged then).
    pub fn answer(&mut self, dim: usize, q: impl Fn(usize) -> Vec<f64>, rng: &mut impl Rng) -> Result<Vec<f64>> {
        let mut sum = Vec::new();
        sum.try_reserve_exact(dim).map_err(|_| AccountingError::InvalidParameter {
            name: "dim",
            value: dim as f64,
            expected: "a query answer of this many coordinates cannot be allocated",
        })?;
        sum.resize(dim, 0.0);
        for i in 0..self.ledger.len() {
            let v = q(i);
            let sq: f64 = v.iter().map(|x| x * x).sum();
            if sq == 0.0 || !self.ledger.is_active(i) {
                continue;
            }
            if !sq.is_finite() {
                // a NaN/Inf contribution is dropped and charged the worst case
                self.ledger.grant(i, f64::INFINITY);
                continue;
            }
            let scale = (self.ledger.grant(i, sq) / sq).sqrt() * (1.0 - 1e-12);
            sum.iter_mut().zip(&v).for_each(|(s, x)| *s += scale * x);
        }
        self.noise.release(&mut sum, rng);
        Ok(sum)
    }

    /// The guarantee of the whole sequence: κ-zCDP.
    #[must_use]
    pub fn guarantee(&self) -> Zcdp {
        self.kappa
    }

    /// The noise std σ = √(B_norm/(2κ)), rounded up.
    #[must_use]
    pub fn sigma(&self) -> f64 {
        self.noise.sigma
    }

    /// The per-user ledger (its active count is private: do not release it without noise).
    #[must_use]
    pub fn ledger(&self) -> &IndividualFilter {
        &self.ledger
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn gaussian_cost_and_filtered_queries_respect_budgets() {
        assert_eq!(GaussianMechanism::new(2.0, 1.0).unwrap().cost().rho(), 0.125);
        // A cost that underflows rounds up to the smallest positive rho; one that overflows is refused.
        assert_eq!(GaussianMechanism::new(1e200, 1e-200).unwrap().cost().rho(), f64::from_bits(1));
        let e = GaussianMechanism::new(1e-200, 1e200).unwrap_err().to_string();
        assert!(e.contains("sigma") && e.contains("too small"), "{e}");
        assert!(FilteredLinearQueries::new(3, 1e300, 1e-300).is_err());
        assert!(FilteredLinearQueries::new(3, 1e-300, 1e300).is_err());
        let mut q = FilteredLinearQueries::new(10, 2.0, 1.0).unwrap();
        assert_eq!(q.sigma(), 1.0);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        for _ in 0..5 {
            q.answer(2, |_| vec![1.0, 0.0], &mut rng).unwrap();
        }
        // every user contributed norm 1 per query until the budget of 2 was spent
        for i in 0..10 {
            assert!(!q.ledger().is_active(i));
            assert!(q.ledger().spent(i) <= 2.0);
        }
    }
}
