//! Privacy guarantees as types: pure DP ε, zCDP ρ, Rényi DP as a curve over orders α,
//! Gaussian DP μ, and approximate DP (ε, δ). Constructors validate their parameters, so a
//! value of one of these types is always a meaningful guarantee.

use super::error::{Result, non_negative, positive, probability_or_zero};
use super::numeric::{add_up, mul_up, sqrt_up};

/// Pure ε-differential privacy (001 Def. 2.1 with δ = 0).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct PureDp {
    epsilon: f64,
}

impl PureDp {
    /// ε-DP with finite ε ≥ 0.
    pub fn new(epsilon: f64) -> Result<Self> {
        Ok(Self { epsilon: non_negative("epsilon", epsilon)? })
    }
    /// The ε.
    #[must_use]
    pub fn epsilon(self) -> f64 {
        self.epsilon
    }
    /// An ε-DP mechanism is (ε²/2)-zCDP (Bun & Steinke 2016, Prop. 1.4).
    #[must_use]
    pub fn to_zcdp(self) -> Zcdp {
        Zcdp { rho: 0.5 * self.epsilon * self.epsilon }
    }
}

/// ρ-zero-concentrated DP: (α, αρ)-RDP for every α ≥ 1 (001 Def. 2.3; Bun & Steinke 2016).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct Zcdp {
    rho: f64,
}

impl Zcdp {
    /// ρ-zCDP with finite ρ > 0.
    pub fn new(rho: f64) -> Result<Self> {
        Ok(Self { rho: positive("rho", rho)? })
    }
    /// The ρ.
    #[must_use]
    pub fn rho(self) -> f64 {
        self.rho
    }
    /// Composition: ρ₁-zCDP then ρ₂-zCDP is (ρ₁+ρ₂)-zCDP, also fully adaptively
    /// (001 Remark 4.4). Rounded up.
    #[must_use]
    pub fn compose(self, other: Zcdp) -> Zcdp {
        Zcdp { rho: super::numeric::add_up(self.rho, other.rho) }
    }
    /// The RDP curve α ↦ αρ at the given orders.
    pub fn to_rdp(self, orders: &[f64]) -> Result<Rdp> {
        Rdp::new(orders.to_vec(), orders.iter().map(|a| a * self.rho).collect())
    }
}

/// μ-Gaussian differential privacy (Dong, Roth & Su 2022): distinguishing the outputs on
/// neighbouring datasets is no easier than telling N(0,1) from N(μ,1).
///
/// This is the guarantee of any (fully adaptive, see [`crate::convert`])
/// composition of Gaussian mechanisms whose squared individual sensitivities over σ² sum
/// to at most μ²; it implies (μ²/2)-zCDP, and its exact (ε, δ) curve is
/// [`gaussian_delta`](crate::convert::gaussian_delta) (Balle & Wang 2018, Thm 8).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct GaussianDp {
    mu: f64,
}

impl GaussianDp {
    /// μ-GDP with finite μ > 0.
    pub fn new(mu: f64) -> Result<Self> {
        Ok(Self { mu: positive("mu", mu)? })
    }
    /// The μ.
    #[must_use]
    pub fn mu(self) -> f64 {
        self.mu
    }
    /// A μ the caller has already validated (finite and > 0).
    pub(crate) fn validated(mu: f64) -> Self {
        debug_assert!(mu.is_finite() && mu > 0.0);
        Self { mu }
    }
    /// The μ-GDP of a ρ-zCDP guarantee **that comes from Gaussian mechanisms**: μ = √(2ρ),
    /// rounded up. Not valid for an arbitrary ρ-zCDP mechanism.
    #[must_use]
    pub fn from_gaussian_zcdp(zcdp: Zcdp) -> Self {
        Self { mu: sqrt_up(2.0 * zcdp.rho) }
    }
    /// μ-GDP implies (μ²/2)-zCDP (rounded up; infinite only if μ > 1.8e154).
    #[must_use]
    pub fn to_zcdp(self) -> Zcdp {
        Zcdp { rho: 0.5 * mul_up(self.mu, self.mu) }
    }
    /// Composition: μ₁-GDP then μ₂-GDP is √(μ₁²+μ₂²)-GDP (Dong, Roth & Su 2022, Cor. 3.3),
    /// rounded up.
    #[must_use]
    pub fn compose(self, other: GaussianDp) -> GaussianDp {
        GaussianDp { mu: sqrt_up(add_up(mul_up(self.mu, self.mu), mul_up(other.mu, other.mu))) }
    }
}

/// Rényi DP as a curve: (αⱼ, εⱼ)-RDP at each listed order αⱼ > 1 (Mironov 2017; 001 Def. 2.2).
#[derive(Debug, Clone, PartialEq)]
pub struct Rdp {
    orders: Vec<f64>,
    epsilons: Vec<f64>,
}

impl Rdp {
    /// An RDP curve from matching lists of orders (each finite and > 1) and RDP values
    /// (each finite and ≥ 0). Points are sorted by order.
    pub fn new(orders: Vec<f64>, epsilons: Vec<f64>) -> Result<Self> {
        if orders.is_empty() || orders.len() != epsilons.len() {
            return Err(super::AccountingError::InvalidParameter {
                name: "orders",
                value: orders.len() as f64,
                expected: "need at least one order and exactly one RDP value per order",
            });
        }
        for &a in &orders {
            if !(a.is_finite() && a > 1.0) {
                return Err(super::AccountingError::InvalidParameter {
                    name: "order",
                    value: a,
                    expected: "every Rényi order must be a finite number > 1",
                });
            }
        }
        for &e in &epsilons {
            non_negative("rdp epsilon", e)?;
        }
        let mut pts: Vec<(f64, f64)> = orders.into_iter().zip(epsilons).collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let (orders, epsilons) = pts.into_iter().unzip();
        Ok(Self { orders, epsilons })
    }
    /// The orders α, ascending.
    #[must_use]
    pub fn orders(&self) -> &[f64] {
        &self.orders
    }
    /// The RDP values ε(α), one per order.
    #[must_use]
    pub fn epsilons(&self) -> &[f64] {
        &self.epsilons
    }
    /// Composition at matching orders: ε(α) adds up (Mironov 2017, Prop. 1; fully adaptively
    /// by 001 Thm 4.3 and Remark 4.4). Errors if the orders differ.
    pub fn compose(&self, other: &Rdp) -> Result<Rdp> {
        if self.orders != other.orders {
            return Err(super::AccountingError::InvalidParameter {
                name: "orders",
                value: other.orders.len() as f64,
                expected: "RDP curves compose only at identical orders",
            });
        }
        let eps = self.epsilons.iter().zip(&other.epsilons).map(|(a, b)| super::numeric::add_up(*a, *b));
        Ok(Rdp { orders: self.orders.clone(), epsilons: eps.collect() })
    }
}

/// Approximate (ε, δ)-differential privacy (001 Def. 2.1); δ = 0 is pure ε-DP. Also the cost
/// of one mechanism charged to an (ε, δ) filter ([`super::filter::DpFilter`]).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct ApproxDp {
    epsilon: f64,
    delta: f64,
}

impl ApproxDp {
    /// (ε, δ)-DP with finite ε ≥ 0 and δ ∈ [0, 1).
    pub fn new(epsilon: f64, delta: f64) -> Result<Self> {
        Ok(Self { epsilon: non_negative("epsilon", epsilon)?, delta: probability_or_zero("delta", delta)? })
    }
    /// Pure ε-DP, i.e. (ε, 0)-DP.
    pub fn pure(epsilon: f64) -> Result<Self> {
        Self::new(epsilon, 0.0)
    }
    /// The ε.
    #[must_use]
    pub fn epsilon(self) -> f64 {
        self.epsilon
    }
    /// The δ.
    #[must_use]
    pub fn delta(self) -> f64 {
        self.delta
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn constructors_reject_out_of_domain_values_by_name() {
        for bad in [0.0, -1.0, f64::NAN, f64::INFINITY] {
            let e = Zcdp::new(bad).unwrap_err().to_string();
            assert!(e.contains("rho"), "{e}");
        }
        for bad in [1.0, -0.1, 1.5, f64::NAN] {
            let e = ApproxDp::new(1.0, bad).unwrap_err().to_string();
            assert!(e.contains("delta"), "{e}");
        }
        assert_eq!(ApproxDp::new(0.5, 0.0).unwrap(), ApproxDp::pure(0.5).unwrap());
        assert!(Rdp::new(vec![1.0], vec![0.5]).is_err());
        assert!(Rdp::new(vec![2.0, 3.0], vec![0.5]).is_err());
    }

    #[test]
    fn compositions_add_in_their_own_units() {
        let z = Zcdp::new(0.1).unwrap().compose(Zcdp::new(0.2).unwrap());
        assert!((z.rho() - 0.3).abs() < 1e-15 && z.rho() >= 0.3);
        let g = GaussianDp::new(3.0).unwrap().compose(GaussianDp::new(4.0).unwrap());
        assert_eq!(g.mu(), 5.0);
        assert_eq!(GaussianDp::from_gaussian_zcdp(g.to_zcdp()).mu(), 5.0);
        assert_eq!(PureDp::new(2.0).unwrap().to_zcdp().rho(), 2.0);
        let r = Zcdp::new(0.5).unwrap().to_rdp(&[4.0, 2.0]).unwrap();
        assert_eq!(r.orders(), &[2.0, 4.0]);
        assert_eq!(r.compose(&r).unwrap().epsilons(), &[2.0, 4.0]);
    }
}
