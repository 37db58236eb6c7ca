//! Privacy guarantees as types: pure DP ε, zCDP ρ, Rényi DP as a curve over orders α,
//! Gaussian DP μ, and approximate DP (ε, δ). Constructors validate their parameters, so a
//! value of one of these types is always a meaningful guarantee.

use super::error::AccountingError;
use super::error::{Result, non_negative, positive, probability_or_zero};
use super::numeric::{add_up, half_up, mul_up, sqrt_up, u64_up};

/// Pure ε-differential privacy ([FZ21, Def. 2.1] with δ = 0).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct PureDp {
    epsilon: f64,
}

impl PureDp {
    /// ε-DP with finite ε ≥ 0.
    ///
    /// # Errors
    /// [`AccountingError::InvalidParameter`] naming `epsilon` if it is NaN, infinite or < 0.
    pub fn new(epsilon: f64) -> Result<Self> {
        Ok(Self { epsilon: non_negative("epsilon", epsilon)? })
    }
    /// The ε.
    #[must_use]
    pub fn epsilon(self) -> f64 {
        self.epsilon
    }
    /// An ε-DP mechanism is (ε²/2)-zCDP ([BS16, Prop. 1.4]), rounded up.
    ///
    /// ε = 0 gives the smallest positive ρ (a 0-zCDP mechanism is ρ-zCDP for every ρ > 0);
    /// ε above about 1.9e154 gives ρ = +∞, a vacuous guarantee (see [`Zcdp`]).
    #[must_use]
    pub fn to_zcdp(self) -> Zcdp {
        Zcdp { rho: half_up(mul_up(self.epsilon, self.epsilon)).max(f64::from_bits(1)) }
    }
}

/// ρ-zero-concentrated DP: (α, αρ)-RDP for every α ≥ 1 ([FZ21, Def. 2.3]; [BS16]).
///
/// ρ is always > 0. [`Zcdp::new`] takes a finite ρ; arithmetic that overflows `f64`
/// (a composition, [`PureDp::to_zcdp`] of a huge ε) rounds up to ρ = +∞, the vacuous
/// guarantee, which every conversion reports as ε = ∞ — never as a finite value.
///
/// [BS16]: https://arxiv.org/abs/1605.02065
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct Zcdp {
    rho: f64,
}

impl Zcdp {
    /// ρ-zCDP with finite ρ > 0.
    ///
    /// # Errors
    /// [`AccountingError::InvalidParameter`] naming `rho` if it is NaN, infinite or ≤ 0.
    pub fn new(rho: f64) -> Result<Self> {
        Ok(Self { rho: positive("rho", rho)? })
    }
    /// The ρ.
    #[must_use]
    pub fn rho(self) -> f64 {
        self.rho
    }
    /// Composition: ρ₁-zCDP then ρ₂-zCDP is (ρ₁+ρ₂)-zCDP, also fully adaptively
    /// ([FZ21, Remark 4.4]). Rounded up; a sum that overflows is ρ = +∞ (vacuous).
    #[must_use]
    pub fn compose(self, other: Zcdp) -> Zcdp {
        Zcdp { rho: add_up(self.rho, other.rho) }
    }
    /// The `n`-fold composition of this guarantee with itself: (n·ρ)-zCDP, rounded up
    /// (with [`mul_up`](super::numeric::mul_up), and `n` itself rounded up to an `f64`).
    ///
    /// ```
    /// use dpgd_accounting::Zcdp;
    /// let step = Zcdp::new(0.125).unwrap();
    /// assert_eq!(step.repeated(8).unwrap().rho(), 1.0);
    /// assert!(step.repeated(0).is_err());
    /// ```
    ///
    /// # Errors
    /// [`AccountingError::InvalidParameter`] naming `n` if `n = 0` (no mechanism: not a
    /// zCDP guarantee with ρ > 0) or if n·ρ overflows `f64`.
    pub fn repeated(self, n: u64) -> Result<Zcdp> {
        if n == 0 {
            return Err(AccountingError::InvalidParameter {
                name: "n",
                value: 0.0,
                expected: "must be at least 1: the 0-fold composition runs nothing",
            });
        }
        let rho = mul_up(u64_up(n), self.rho);
        if rho.is_finite() {
            Ok(Zcdp { rho })
        } else {
            Err(AccountingError::InvalidParameter {
                name: "n",
                value: n as f64,
                expected: "n * rho must be a finite number: repeat fewer times (or this guarantee is already vacuous)",
            })
        }
    }
    /// The RDP curve α ↦ αρ at the given orders, each value rounded up.
    ///
    /// # Errors
    /// As [`Rdp::new`]: no orders, an order that is not a finite number > 1, or a value αρ
    /// that is not finite.
    pub fn to_rdp(self, orders: &[f64]) -> Result<Rdp> {
        Rdp::new(orders.to_vec(), orders.iter().map(|&a| mul_up(a, self.rho)).collect())
    }
}

/// μ-Gaussian differential privacy ([DRS19]): distinguishing the outputs on
/// neighbouring datasets is no easier than telling N(0,1) from N(μ,1).
///
/// μ is always > 0; it is finite when constructed with [`GaussianDp::new`] and +∞ (vacuous)
/// only when a composition overflows `f64`.
///
/// This is the guarantee of any (fully adaptive, see [`crate::convert`])
/// composition of Gaussian mechanisms whose squared individual sensitivities over σ² sum
/// to at most μ²; it implies (μ²/2)-zCDP, and its exact (ε, δ) curve is
/// [`gaussian_delta`](crate::convert::gaussian_delta) ([BW18, Thm 8]).
///
/// [DRS19]: https://arxiv.org/abs/1905.02383
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct GaussianDp {
    mu: f64,
}

impl GaussianDp {
    /// μ-GDP with finite μ > 0.
    ///
    /// # Errors
    /// [`AccountingError::InvalidParameter`] naming `mu` if it is NaN, infinite or ≤ 0.
    pub fn new(mu: f64) -> Result<Self> {
        Ok(Self { mu: positive("mu", mu)? })
    }
    /// The μ.
    #[must_use]
    pub fn mu(self) -> f64 {
        self.mu
    }
    /// A μ the caller has already validated (finite and > 0; every caller constructs it from
    /// a validated `PrivateGd`, whose constructor checks exactly this).
    pub(crate) fn validated(mu: f64) -> Self {
        Self { mu }
    }
    /// The μ-GDP of a ρ-zCDP guarantee **that comes from Gaussian mechanisms**: μ = √(2ρ),
    /// rounded up (+∞ for ρ = +∞). Not valid for an arbitrary ρ-zCDP mechanism.
    #[must_use]
    pub fn from_gaussian_zcdp(zcdp: Zcdp) -> Self {
        Self { mu: sqrt_up(2.0 * zcdp.rho) }
    }
    /// μ-GDP implies (μ²/2)-zCDP, rounded up (ρ = +∞, vacuous, only if μ > 1.3e154).
    #[must_use]
    pub fn to_zcdp(self) -> Zcdp {
        Zcdp { rho: half_up(mul_up(self.mu, self.mu)) }
    }
    /// Composition: μ₁-GDP then μ₂-GDP is √(μ₁²+μ₂²)-GDP ([DRS19, Cor. 3.3]),
    /// rounded up; a result that overflows is μ = +∞ (vacuous).
    #[must_use]
    pub fn compose(self, other: GaussianDp) -> GaussianDp {
        GaussianDp { mu: sqrt_up(add_up(mul_up(self.mu, self.mu), mul_up(other.mu, other.mu))) }
    }
}

/// Rényi DP as a curve: (αⱼ, εⱼ)-RDP at each listed order αⱼ > 1 ([Mir17]; [FZ21, Def. 2.2]).
///
/// [Mir17]: https://arxiv.org/abs/1702.07476
#[derive(Debug, Clone, PartialEq)]
pub struct Rdp {
    orders: Vec<f64>,
    epsilons: Vec<f64>,
}

impl Rdp {
    /// An RDP curve from matching lists of orders (each finite and > 1) and RDP values
    /// (each finite and ≥ 0). Points are sorted by order.
    ///
    /// # Errors
    /// [`AccountingError::InvalidParameter`] naming `orders` (empty, or a length mismatch),
    /// `order` (not a finite number > 1) or `rdp epsilon` (not a finite number ≥ 0).
    pub fn new(orders: Vec<f64>, epsilons: Vec<f64>) -> Result<Self> {
        if orders.is_empty() || orders.len() != epsilons.len() {
            return Err(AccountingError::InvalidParameter {
                name: "orders",
                value: orders.len() as f64,
                expected: "need at least one order and exactly one RDP value per order",
            });
        }
        for &a in &orders {
            if !(a.is_finite() && a > 1.0) {
                return Err(AccountingError::InvalidParameter {
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
    /// Composition at matching orders: ε(α) adds up ([Mir17, Prop. 1]; fully adaptively
    /// by [FZ21, Thm 4.3 and Remark 4.4]), rounded up.
    ///
    /// # Errors
    /// [`AccountingError::InvalidParameter`] naming `orders` if the orders differ, or
    /// `rdp epsilon` if a sum overflows.
    pub fn compose(&self, other: &Rdp) -> Result<Rdp> {
        if self.orders != other.orders {
            return Err(AccountingError::InvalidParameter {
                name: "orders",
                value: other.orders.len() as f64,
                expected: "RDP curves compose only at identical orders",
            });
        }
        let mut epsilons = Vec::with_capacity(self.epsilons.len());
        for (a, b) in self.epsilons.iter().zip(&other.epsilons) {
            epsilons.push(non_negative("rdp epsilon", add_up(*a, *b))?);
        }
        Ok(Rdp { orders: self.orders.clone(), epsilons })
    }
}

/// Approximate (ε, δ)-differential privacy ([FZ21, Def. 2.1]); δ = 0 is pure ε-DP. Also the cost
/// of one mechanism charged to an (ε, δ) filter ([`super::filter::DpFilter`]).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct ApproxDp {
    epsilon: f64,
    delta: f64,
}

impl ApproxDp {
    /// (ε, δ)-DP with finite ε ≥ 0 and δ ∈ [0, 1).
    ///
    /// # Errors
    /// [`AccountingError::InvalidParameter`] naming `epsilon` or `delta`.
    pub fn new(epsilon: f64, delta: f64) -> Result<Self> {
        Ok(Self { epsilon: non_negative("epsilon", epsilon)?, delta: probability_or_zero("delta", delta)? })
    }
    /// Pure ε-DP, i.e. (ε, 0)-DP.
    ///
    /// # Errors
    /// [`AccountingError::InvalidParameter`] naming `epsilon`.
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

/// (ε, δ)-probabilistic differential privacy, pDP ([WRRW23] §4.1, after [KS14]'s point-wise indistinguishability): for every pair of neighbours, the privacy
/// loss exceeds ε in absolute value with probability at most δ over the mechanism's output.
///
/// pDP implies (ε, δ)-DP ([WRRW23] Lemma 2), but not conversely: an (ε, δ)-DP mechanism is in
/// general only (2ε, 2δ/(εe^ε))-pDP by that lemma's printed conversion. For δ = 0 the two
/// coincide with pure ε-DP. The privacy odometers of [WRRW23] Thm 3 (and its Lemma 3) are
/// valid only for pDP mechanisms, which is why [`crate::odometer::Odometer`] takes this type
/// for mechanisms with δ > 0 and refuses a plain [`ApproxDp`] with δ > 0.
///
/// [WRRW23]: https://arxiv.org/abs/2203.05481
/// [KS14]: https://arxiv.org/abs/0803.3946
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd)]
pub struct ProbabilisticDp {
    epsilon: f64,
    delta: f64,
}

impl ProbabilisticDp {
    /// (ε, δ)-pDP with finite ε ≥ 0 and δ ∈ [0, 1).
    ///
    /// ```
    /// use dpgd_accounting::ProbabilisticDp;
    /// let p = ProbabilisticDp::new(0.1, 1e-9).unwrap();
    /// assert_eq!(p.to_approx_dp().delta(), 1e-9);
    /// assert!(ProbabilisticDp::new(0.1, 1.0).is_err());
    /// ```
    ///
    /// # Errors
    /// [`AccountingError::InvalidParameter`] naming `epsilon` or `delta`.
    pub fn new(epsilon: f64, delta: f64) -> Result<Self> {
        Ok(Self { epsilon: non_negative("epsilon", epsilon)?, delta: probability_or_zero("delta", delta)? })
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
    /// The (ε, δ)-DP guarantee it implies ([WRRW23] Lemma 2).
    ///
    /// [WRRW23]: https://arxiv.org/abs/2203.05481
    #[must_use]
    pub fn to_approx_dp(self) -> ApproxDp {
        ApproxDp { epsilon: self.epsilon, delta: self.delta }
    }
    /// Pure ε-DP, which is exactly (ε, 0)-pDP; `None` for an [`ApproxDp`] with δ > 0, which is
    /// not pDP in general.
    #[must_use]
    pub fn from_pure(dp: ApproxDp) -> Option<Self> {
        (dp.delta == 0.0).then_some(Self { epsilon: dp.epsilon, delta: 0.0 })
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
