//! Mechanisms to run inside a session: the Gaussian mechanism for counts and sums, and the
//! individually filtered Gaussian mechanism for adaptively chosen linear queries
//! (001 §4.2, Cor. 4.7, Thm 1.2) — of which private GD with filtering is one instance.

use rand::Rng;
use rand_distr::{Distribution, StandardNormal};

use super::error::{Result, positive};
use super::filter::IndividualFilter;
use super::measure::Zcdp;

/// The Gaussian mechanism: a statistic with ℓ₂-sensitivity Δ plus N(0, σ²) per coordinate,
/// Δ²/(2σ²)-zCDP (Bun & Steinke 2016, Prop. 1.6).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GaussianMechanism {
    sigma: f64,
    sensitivity: f64,
}

impl GaussianMechanism {
    /// Noise std σ for a statistic of sensitivity Δ (1 for a count).
    pub fn new(sigma: f64, sensitivity: f64) -> Result<Self> {
        Ok(Self { sigma: positive("sigma", sigma)?, sensitivity: positive("sensitivity", sensitivity)? })
    }
    /// Its zCDP cost Δ²/(2σ²).
    pub fn cost(&self) -> Zcdp {
        Zcdp::new(self.sensitivity * self.sensitivity / (2.0 * self.sigma * self.sigma)).expect("positive")
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
/// (001 Cor. 4.7): each user's contribution qₜ(xᵢ) is scaled to norm
/// min(‖qₜ(xᵢ)‖, √(B_norm − spentᵢ)), users whose budget is spent contribute nothing, and the
/// sum gets N(0, σ²I) with σ² = B_norm/(2κ). The whole sequence is κ-zCDP however many
/// queries are asked (001 Thm 4.5), and answers are accurate on the still-active users.
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
///     let count = q.answer(1, active_today, &mut rng);
///     assert_eq!(count.len(), 1);
/// }
/// assert_eq!(q.guarantee().rho(), 0.5);
/// ```
#[derive(Debug, Clone)]
pub struct FilteredLinearQueries {
    ledger: IndividualFilter,
    kappa: f64,
    noise: GaussianMechanism,
}

impl FilteredLinearQueries {
    /// `users` users with squared-norm budget `b_norm` each; the sequence is `kappa`-zCDP.
    pub fn new(users: usize, b_norm: f64, kappa: f64) -> Result<Self> {
        let sigma = (positive("b_norm", b_norm)? / (2.0 * positive("kappa", kappa)?)).sqrt();
        Ok(Self { ledger: IndividualFilter::new(users, b_norm)?, kappa, noise: GaussianMechanism::new(sigma, 1.0)? })
    }

    /// Answers the `dim`-dimensional linear query `q` (user index → contribution) with noise;
    /// each user's ledger is charged the squared norm of what it contributes.
    pub fn answer(&mut self, dim: usize, q: impl Fn(usize) -> Vec<f64>, rng: &mut impl Rng) -> Vec<f64> {
        let mut sum = vec![0.0; dim];
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
        sum
    }

    /// The guarantee of the whole sequence: κ-zCDP.
    pub fn guarantee(&self) -> Zcdp {
        Zcdp::new(self.kappa).expect("positive")
    }

    /// The noise std σ = √(B_norm/(2κ)).
    pub fn sigma(&self) -> f64 {
        self.noise.sigma
    }

    /// The per-user ledger (its active count is private: do not release it without noise).
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
        let mut q = FilteredLinearQueries::new(10, 2.0, 1.0).unwrap();
        assert_eq!(q.sigma(), 1.0);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        for _ in 0..5 {
            q.answer(2, |_| vec![1.0, 0.0], &mut rng);
        }
        // every user contributed norm 1 per query until the budget of 2 was spent
        for i in 0..10 {
            assert!(!q.ledger().is_active(i));
            assert!(q.ledger().spent(i) <= 2.0);
        }
    }
}
