//! Filters for (ε, δ)-DP mechanisms with adaptively chosen parameters: basic composition,
//! [RRUV16, Thm 5.1], [FZ21, Thm 4.8] and [WRRW23, Thm 2]. Each decides from sufficient
//! statistics of the realised parameters ([`DpSums`]), so the number of rounds a filter allows for a fixed ε₀ is found by
//! bisection ([`rounds_allowed`]) rather than by charging one round at a time.

use super::super::convert::{Conversion, bun_steinke_max_rho};
use super::super::decimal::Decimal;
use super::super::error::{AccountingError, Result, non_negative, positive, probability, probability_or_zero};
use super::super::numeric::{add_up, half_up, mul_up, u64_up, with_margin};
use super::super::{ApproxDp, ProbabilisticDp};
use super::{Decision, PrivacyFilter};

/// Sufficient statistics of a sequence of (εₜ, δₜ): Σε, Σε², Σε(e^ε − 1)/2, Σδ (all
/// rounded up).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct DpSums {
    /// Σεₜ.
    pub eps: f64,
    /// Σεₜ².
    pub eps2: f64,
    /// Σεₜ(e^εₜ − 1)/2, the mean privacy loss term of [RRUV16].
    ///
    /// [RRUV16]: https://arxiv.org/abs/1605.08294
    pub eps_expm1: f64,
    /// Σδₜ.
    pub delta: f64,
    /// Number of mechanisms.
    pub rounds: u64,
    /// The exact decimal sums while every mechanism's parameters were typed decimals
    /// ([`repeated_typed`](Self::repeated_typed)); the float fields are then these, rounded up.
    /// `None` once a float parameter entered, or in a hand-made value.
    pub exact: Option<ExactSums>,
}

/// Exact decimal sums Σεₜ, Σεₜ², Σδₜ of typed parameters ([`crate::decimal`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ExactSums {
    /// Σεₜ.
    pub eps: Decimal,
    /// Σεₜ².
    pub eps2: Decimal,
    /// Σδₜ.
    pub delta: Decimal,
}

impl DpSums {
    /// The sums after one more mechanism.
    #[must_use]
    pub fn with(self, c: ApproxDp) -> Self {
        self.repeated(c, 1)
    }
    /// The sums after one more (ε, δ)-pDP mechanism (for odometers, which need pDP when
    /// δ > 0; see [`crate::odometer`]).
    #[must_use]
    pub fn with_pdp(self, c: ProbabilisticDp) -> Self {
        self.repeated(c.to_approx_dp(), 1)
    }
    /// The sums after `r` more mechanisms with parameters `c`, every product and sum rounded
    /// up (a sum that overflows is +∞, which no filter admits); the round count saturates at
    /// `u64::MAX`.
    #[must_use]
    pub fn repeated(self, c: ApproxDp, r: u64) -> Self {
        let r_f = u64_up(r);
        let e = c.epsilon();
        // libm's expm1 is within 1 ulp: one step up covers it.
        let mean = half_up(mul_up(e, e.exp_m1().next_up()));
        Self {
            eps: add_up(self.eps, mul_up(r_f, e)),
            eps2: add_up(self.eps2, mul_up(r_f, mul_up(e, e))),
            eps_expm1: add_up(self.eps_expm1, mul_up(r_f, mean)),
            delta: add_up(self.delta, mul_up(r_f, c.delta())),
            rounds: self.rounds.saturating_add(r),
            exact: None,
        }
    }

    /// The sums after `r` more mechanisms that are (`eps`, `delta`)-DP for decimals a user
    /// typed: Σε, Σε² and Σδ are kept exactly while they fit ([`ExactSums`]), and the float
    /// fields are those exact sums rounded up once — so ten rounds of 0.1 sum to exactly 1,
    /// where ten floats 0.1 (each above 1/10) summed upwards exceed it. The mean term (an
    /// exponential) is rounded up from the rounded-up ε. Where an exact sum would not fit, the
    /// result is [`repeated`](Self::repeated)'s, from the decimals rounded up.
    ///
    /// # Errors
    /// [`AccountingError::InvalidParameter`] for a δ of 1 or more.
    pub fn repeated_typed(self, eps: Decimal, delta: Decimal, r: u64) -> Result<Self> {
        let c = ApproxDp::new(eps.to_f64_up(), delta.to_f64_up())?;
        let mut out = self.repeated(c, r);
        let so_far = match self.exact {
            Some(x) => Some(x),
            None if self == DpSums::default() => Some(ExactSums::default()),
            None => None,
        };
        let exact = so_far.and_then(|x| {
            Some(ExactSums {
                eps: x.eps.checked_add(eps.checked_mul_u64(r)?)?,
                eps2: x.eps2.checked_add(eps.checked_mul(eps)?.checked_mul_u64(r)?)?,
                delta: x.delta.checked_add(delta.checked_mul_u64(r)?)?,
            })
        });
        if let Some(x) = exact {
            (out.eps, out.eps2, out.delta) = (x.eps.to_f64_up(), x.eps2.to_f64_up(), x.delta.to_f64_up());
            out.exact = Some(x);
        }
        Ok(out)
    }

    /// Whether every sum is a number ≥ 0 (possibly +∞). The fields are public, so a hand-made
    /// `DpSums` may hold NaN or negative values; filters admit none of those and odometers
    /// report them as trivial.
    #[must_use]
    pub fn is_valid(&self) -> bool {
        [self.eps, self.eps2, self.eps_expm1, self.delta].iter().all(|&x| x >= 0.0)
    }
}

/// A filter that decides from [`DpSums`]; every such filter is a [`PrivacyFilter`] over
/// [`ApproxDp`] costs, and monotone (smaller parameters never turn CONT into HALT).
pub trait SumsFilter {
    /// Whether a composition whose realised parameters have these sums stays in budget.
    fn admits(&self, sums: &DpSums) -> bool;
    /// The target ε_g of the composition, if the rule has one (for error messages).
    fn target_epsilon(&self) -> Option<f64> {
        None
    }
}

/// A [`SumsFilter`] with its running sums.
#[derive(Debug, Clone, PartialEq)]
pub struct DpFilter<F> {
    rule: F,
    sums: DpSums,
}

impl<F: SumsFilter> DpFilter<F> {
    /// A fresh filter with stopping rule `rule`.
    pub fn new(rule: F) -> Self {
        Self { rule, sums: DpSums::default() }
    }
    /// The rule.
    pub fn rule(&self) -> &F {
        &self.rule
    }
    /// The sums of what ran so far.
    pub fn sums(&self) -> DpSums {
        self.sums
    }
}

impl<F: SumsFilter> PrivacyFilter for DpFilter<F> {
    type Cost = ApproxDp;
    fn decide(&self, next: &ApproxDp) -> Decision {
        if self.rule.admits(&self.sums.with(*next)) { Decision::Continue } else { Decision::Halt }
    }
    fn try_charge(&mut self, next: ApproxDp) -> Result<()> {
        let after = self.sums.with(next);
        if !self.rule.admits(&after) {
            // What is left, in the units of the refused charge: the largest ε of a pure
            // mechanism the rule would still admit (0 if none).
            let fits = |e: f64| ApproxDp::pure(e).is_ok_and(|c| self.rule.admits(&self.sums.with(c)));
            let remaining = if fits(0.0) {
                super::super::numeric::largest_where(0.0, next.epsilon().max(f64::MIN_POSITIVE), fits).unwrap_or(0.0)
            } else {
                0.0
            };
            return Err(AccountingError::BudgetExceeded {
                amount: next.epsilon(),
                remaining,
                budget: self.rule.target_epsilon().unwrap_or(f64::NAN),
            });
        }
        self.sums = after;
        Ok(())
    }
}

/// The number of ε₀-DP (pure) mechanisms `rule` lets run, by bisection on the round count;
/// `None` if it allows more than 2⁵³ (effectively unbounded). At most about 110 evaluations
/// of the rule.
///
/// # Errors
/// [`AccountingError::InvalidParameter`] naming `per-round epsilon` if `eps0` is not a finite
/// number > 0.
pub fn rounds_allowed(rule: &(impl SumsFilter + ?Sized), eps0: f64) -> Result<Option<u64>> {
    let c = ApproxDp::pure(positive("per-round epsilon", eps0)?)?;
    Ok(most_rounds(|r| rule.admits(&DpSums::default().repeated(c, r))))
}

/// As [`rounds_allowed`], for a typed per-round ε₀ summed exactly ([`DpSums::repeated_typed`]).
///
/// # Errors
/// [`AccountingError::InvalidParameter`] naming `per-round epsilon` if `eps0` is 0.
pub fn rounds_allowed_typed(rule: &(impl SumsFilter + ?Sized), eps0: Decimal) -> Result<Option<u64>> {
    positive("per-round epsilon", eps0.to_f64_up())?;
    Ok(most_rounds(|r| DpSums::default().repeated_typed(eps0, Decimal::ZERO, r).is_ok_and(|s| rule.admits(&s))))
}

/// The largest r with `ok(r)` (monotone), by doubling then bisection; `None` above 2⁵³.
fn most_rounds(ok: impl Fn(u64) -> bool) -> Option<u64> {
    if !ok(1) {
        return Some(0);
    }
    let (mut lo, mut hi) = (1u64, 2u64);
    while ok(hi) {
        lo = hi;
        hi *= 2;
        if hi > 1 << 53 {
            return None;
        }
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if ok(mid) { lo = mid } else { hi = mid }
    }
    Some(lo)
}

/// Basic composition ([RRUV16, Thm 2.9], after Dwork et al. 2006): CONT while Σεₜ ≤ ε_g and Σδₜ ≤ δ_g.
/// With a typed target ([`BasicFilter::typed`]) and exact sums ([`DpSums::repeated_typed`]) the
/// comparison is exact: 1 in rounds of 0.1 allows 10.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BasicFilter {
    epsilon: f64,
    delta: f64,
    typed: Option<(Decimal, Decimal)>,
}

impl BasicFilter {
    /// Target (ε_g, δ_g), δ_g ∈ [0, 1).
    ///
    /// # Errors
    /// [`AccountingError::InvalidParameter`] naming `epsilon` (not a finite number > 0) or
    /// `delta` (not in [0, 1)).
    pub fn new(epsilon: f64, delta: f64) -> Result<Self> {
        Ok(Self { epsilon: positive("epsilon", epsilon)?, delta: probability_or_zero("delta", delta)?, typed: None })
    }

    /// Target (ε_g, δ_g) as typed decimals: exact sums are compared with them exactly, float
    /// sums with the floats below them.
    ///
    /// # Errors
    /// As [`new`](Self::new).
    pub fn typed(epsilon: Decimal, delta: Decimal) -> Result<Self> {
        let f = Self::new(epsilon.to_f64_down(), delta.to_f64_down())?;
        Ok(Self { typed: Some((epsilon, delta)), ..f })
    }
}

impl SumsFilter for BasicFilter {
    fn admits(&self, s: &DpSums) -> bool {
        if let (Some((e, d)), Some(x)) = (self.typed, s.exact) {
            return s.is_valid() && x.eps <= e && x.delta <= d;
        }
        s.is_valid() && s.eps <= self.epsilon && s.delta <= self.delta
    }
    fn target_epsilon(&self) -> Option<f64> {
        Some(self.epsilon)
    }
}

/// The filter of [RRUV16, Thm 5.1] (quoted in [FZ21, §4.3]): HALT if
/// Σδₜ > δ_g/2, or if
///
/// Σεₜ(e^εₜ − 1)/2 + √(2 (Σεₜ² + H) (1 + ½ ln(Σεₜ²/H + 1)) ln(2/δ_g)) > ε_g,
///
/// with H = ε_g²/(28.04 ln(1/δ_g)); valid for δ_g ∈ (0, 1/e). [FZ21, §4.3] quotes the rule with
/// ln(1/δ_g) for pure mechanisms; we keep the original's ln(2/δ_g), which is the larger (safe)
/// reading.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RogersFilter {
    epsilon: f64,
    delta: f64,
}

impl RogersFilter {
    /// Target (ε_g, δ_g) with δ_g ∈ (0, 1/e).
    ///
    /// # Errors
    /// [`AccountingError::InvalidParameter`] naming `epsilon` (not a finite number > 0) or
    /// `delta` (not in (0, 1/e)).
    pub fn new(epsilon: f64, delta: f64) -> Result<Self> {
        positive("epsilon", epsilon)?;
        probability("delta", delta)?;
        if delta >= (-1.0f64).exp() {
            return Err(AccountingError::InvalidParameter {
                name: "delta",
                value: delta,
                expected: "the Rogers et al. filter needs delta < 1/e",
            });
        }
        Ok(Self { epsilon, delta })
    }
}

impl SumsFilter for RogersFilter {
    fn admits(&self, s: &DpSums) -> bool {
        let l = -self.delta.ln(); // ln(1/δ_g), finite even for a subnormal δ_g
        let h = self.epsilon * self.epsilon / (28.04 * l);
        let bound = s.eps_expm1
            + (2.0 * (s.eps2 + h) * (1.0 + 0.5 * (s.eps2 / h).ln_1p()) * (std::f64::consts::LN_2 + l)).sqrt();
        // All terms are positive and each is within a few ulps: the margin covers the rounding.
        s.is_valid() && s.delta <= self.delta / 2.0 && with_margin(bound, bound) <= self.epsilon
    }
    fn target_epsilon(&self) -> Option<f64> {
        Some(self.epsilon)
    }
}

/// The filter of [FZ21, Thm 4.8]: for ε-DP mechanisms (pure, in the pDP sense), CONT
/// while ½Σεₜ² ≤ B*, where B*-zCDP implies (ε_g, δ_g)-DP. The theorem allows any such B*:
/// [`FzFilter::printed`] uses the B* printed there ((√(ln(1/δ)+ε) − √ln(1/δ))², the
/// `bun-steinke` inverse); [`FzFilter::cks`] the larger B* of the `cks` conversion.
/// Mechanisms with δₜ > 0 are not covered by the theorem and are refused.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FzFilter {
    b_star: f64,
    epsilon: f64,
}

impl FzFilter {
    /// B* from the formula printed in [FZ21, Thm 4.8].
    ///
    /// # Errors
    /// [`AccountingError::InvalidParameter`] naming `epsilon` (not a finite number > 0, or so
    /// small that B* would be below 1e-300) or `delta` (not in (0, 1)).
    pub fn printed(epsilon: f64, delta: f64) -> Result<Self> {
        let (epsilon, delta) = (positive("epsilon", epsilon)?, probability("delta", delta)?);
        let b_star = bun_steinke_max_rho(epsilon, delta);
        // bun_steinke_max_rho is NaN only for invalid inputs (checked above) or a B* that
        // underflows: refuse that like the `cks` inverse does.
        if b_star.is_nan() || b_star < super::super::convert::MIN_RHO {
            return Err(AccountingError::InvalidParameter {
                name: "epsilon",
                value: epsilon,
                expected: "is too small for this delta: B* would be below 1e-300",
            });
        }
        Ok(Self { b_star, epsilon })
    }
    /// B* from the tighter `cks` conversion.
    ///
    /// # Errors
    /// As [`Conversion::max_rho`]: `epsilon` or `delta` out of range, or an ε so small that B*
    /// would be below 1e-300.
    pub fn cks(epsilon: f64, delta: f64) -> Result<Self> {
        Ok(Self { b_star: Conversion::Cks.max_rho(epsilon, delta)?.rho(), epsilon })
    }
    /// The zCDP budget B*.
    #[must_use]
    pub fn b_star(&self) -> f64 {
        self.b_star
    }
}

impl SumsFilter for FzFilter {
    fn admits(&self, s: &DpSums) -> bool {
        s.is_valid() && s.delta == 0.0 && half_up(s.eps2) <= self.b_star
    }
    fn target_epsilon(&self) -> Option<f64> {
        Some(self.epsilon)
    }
}

/// The filter of [WRRW23, Thm 2]: with δ = δ′ + δ″, CONT while
///
/// √(2 ln(1/δ′) Σεₜ²) + ½Σεₜ² ≤ ε  and  Σδₜ ≤ δ″.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WhitehouseFilter {
    epsilon: f64,
    delta_prime: f64,
    delta_second: f64,
}

impl WhitehouseFilter {
    /// Target ε and the split δ = δ′ + δ″ (δ′ > 0 for the concentration bound, δ″ ≥ 0 for the
    /// mechanisms' own δₜ).
    ///
    /// # Errors
    /// [`AccountingError::InvalidParameter`] naming `epsilon` (not a finite number > 0),
    /// `delta'` (not in (0, 1)) or `delta''` (not a finite number ≥ 0).
    pub fn new(epsilon: f64, delta_prime: f64, delta_second: f64) -> Result<Self> {
        positive("epsilon", epsilon)?;
        probability("delta'", delta_prime)?;
        non_negative("delta''", delta_second)?;
        Ok(Self { epsilon, delta_prime, delta_second })
    }
}

impl SumsFilter for WhitehouseFilter {
    fn admits(&self, s: &DpSums) -> bool {
        let bound = (2.0 * -self.delta_prime.ln() * s.eps2).sqrt() + 0.5 * s.eps2;
        // Two positive terms, each within 2 ulps: the margin covers the rounding.
        s.is_valid() && with_margin(bound, bound) <= self.epsilon && s.delta <= self.delta_second
    }
    fn target_epsilon(&self) -> Option<f64> {
        Some(self.epsilon)
    }
}

/// The approximate-zCDP filter of [WRRW23, Thm 1]. For δₜ-approximate
/// ρₜ-zCDP mechanisms, CONT while Σρₜ ≤ ρ and Σδₜ ≤ δ; the composition is δ-approximate ρ-zCDP.
#[derive(Debug, Clone, PartialEq)]
pub struct ApproxZcdpFilter {
    rho: f64,
    delta: f64,
    spent_rho: f64,
    spent_delta: f64,
}

/// The cost of one δ-approximate ρ-zCDP mechanism.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ApproxZcdp {
    /// ρ ≥ 0.
    pub rho: f64,
    /// δ ∈ [0, 1).
    pub delta: f64,
}

impl ApproxZcdpFilter {
    /// Budget: δ-approximate ρ-zCDP.
    ///
    /// # Errors
    /// [`AccountingError::InvalidParameter`] naming `rho` (not a finite number > 0) or `delta`
    /// (not in [0, 1)).
    pub fn new(rho: f64, delta: f64) -> Result<Self> {
        Ok(Self {
            rho: positive("rho", rho)?,
            delta: probability_or_zero("delta", delta)?,
            spent_rho: 0.0,
            spent_delta: 0.0,
        })
    }
}

impl PrivacyFilter for ApproxZcdpFilter {
    type Cost = ApproxZcdp;
    fn decide(&self, next: &ApproxZcdp) -> Decision {
        let ok = next.rho >= 0.0
            && next.delta >= 0.0
            && add_up(self.spent_rho, next.rho) <= self.rho
            && add_up(self.spent_delta, next.delta) <= self.delta;
        if ok { Decision::Continue } else { Decision::Halt }
    }
    fn try_charge(&mut self, next: ApproxZcdp) -> Result<()> {
        if self.decide(&next) == Decision::Halt {
            return Err(AccountingError::BudgetExceeded {
                amount: next.rho,
                remaining: (self.rho - self.spent_rho).max(0.0),
                budget: self.rho,
            });
        }
        self.spent_rho = add_up(self.spent_rho, next.rho);
        self.spent_delta = add_up(self.spent_delta, next.delta);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_charge_says_what_remains() {
        let mut f = DpFilter::new(BasicFilter::new(1.0, 1e-6).unwrap());
        f.try_charge(ApproxDp::pure(0.75).unwrap()).unwrap();
        match f.try_charge(ApproxDp::pure(0.5).unwrap()) {
            Err(AccountingError::BudgetExceeded { amount, remaining, budget }) => {
                assert_eq!((amount, budget), (0.5, 1.0));
                assert!(remaining <= 0.25 && remaining > 0.25 * (1.0 - 1e-12), "{remaining}");
            }
            other => panic!("{other:?}"),
        }
        let mut w = DpFilter::new(WhitehouseFilter::new(1.0, 1e-6, 0.0).unwrap());
        let e = w.try_charge(ApproxDp::pure(2.0).unwrap()).unwrap_err().to_string();
        assert!(e.contains("of 1 remains"), "{e}");
    }

    #[test]
    fn basic_filter_allows_floor_of_budget_over_epsilon() {
        let f = BasicFilter::new(1.0, 1e-5).unwrap();
        assert_eq!(rounds_allowed(&f, 0.25).unwrap(), Some(4));
        assert_eq!(rounds_allowed(&f, 0.3).unwrap(), Some(3));
        assert_eq!(rounds_allowed(&f, 2.0).unwrap(), Some(0));
    }

    /// "1 in rounds of 0.1" once answered 9 — the float 0.1 is above 1/10, and ten of
    /// them summed upwards exceed 1. Typed decimals are summed and compared exactly.
    #[test]
    fn typed_budgets_are_exact_decimals() {
        let d = |s: &str| s.parse::<Decimal>().unwrap();
        assert_eq!(rounds_allowed(&BasicFilter::new(1.0, 1e-5).unwrap(), 0.1).unwrap(), Some(9), "the float path");
        let exact = BasicFilter::typed(d("1"), d("1e-5")).unwrap();
        assert_eq!(rounds_allowed_typed(&exact, d("0.1")).unwrap(), Some(10));
        assert_eq!(rounds_allowed_typed(&BasicFilter::typed(d("0.3"), d("1e-5")).unwrap(), d("0.1")).unwrap(), Some(3));
        assert_eq!(rounds_allowed_typed(&exact, d("0.3")).unwrap(), Some(3));
        // One round at a time, too.
        let mut s = DpSums::default();
        for _ in 0..10 {
            s = s.repeated_typed(d("0.1"), Decimal::ZERO, 1).unwrap();
            assert!(exact.admits(&s));
        }
        assert_eq!((s.eps, s.exact.unwrap().eps), (1.0, d("1")));
        assert!(!exact.admits(&s.repeated_typed(d("1e-30"), Decimal::ZERO, 1).unwrap()), "exact: not even 1e-30 more");
        // A float enters: no exact sums any more, and the float fields never fell below them.
        let mixed = s.with(ApproxDp::pure(0.1).unwrap());
        assert!(mixed.exact.is_none() && mixed.eps >= 1.1);
        assert!(!exact.admits(&mixed));
        // Sums too long for 128 bits fall back to the rounded-up floats.
        let long = d("0.12345678901234567890123456789");
        let big = DpSums::default().repeated_typed(long, Decimal::ZERO, 3).unwrap();
        assert!(big.exact.is_none() && big.eps >= 3.0 * 0.123_456_789_012_345_67);
    }

    #[test]
    fn fz_filter_matches_its_closed_form() {
        // ½ k ε₀² ≤ B*  ⇔  k ≤ 2B*/ε₀²
        let (eps, delta, e0) = (1.0, 1e-5, 0.01);
        let f = FzFilter::printed(eps, delta).unwrap();
        let l = (1.0f64 / delta).ln();
        let b = ((l + eps).sqrt() - l.sqrt()).powi(2);
        assert!((f.b_star() - b).abs() < 1e-12);
        assert_eq!(rounds_allowed(&f, e0).unwrap(), Some((2.0 * b / (e0 * e0)).floor() as u64));
        let tighter = FzFilter::cks(eps, delta).unwrap();
        assert!(rounds_allowed(&tighter, e0).unwrap() > rounds_allowed(&f, e0).unwrap());
    }

    #[test]
    fn whitehouse_filter_matches_its_closed_form_and_beats_rogers() {
        // √(2L k ε₀²) + k ε₀²/2 ≤ ε  ⇔  k ε₀² ≤ y* = (√(2L+2ε) − √(2L))²
        let (eps, delta, e0) = (1.0, 1e-6, 0.01);
        let l = (1.0f64 / delta).ln();
        let y = ((2.0 * l + 2.0 * eps).sqrt() - (2.0 * l).sqrt()).powi(2);
        let w = WhitehouseFilter::new(eps, delta, 0.0).unwrap();
        assert_eq!(rounds_allowed(&w, e0).unwrap(), Some((y / (e0 * e0) * (1.0 + 1e-12)).floor() as u64));
        let r = RogersFilter::new(eps, delta).unwrap();
        assert!(rounds_allowed(&w, e0).unwrap() > rounds_allowed(&r, e0).unwrap());
    }

    #[test]
    fn rogers_filter_at_a_hand_computed_point() {
        // One round of ε₀ = 0.1 at (1, 1e-6): 0.1(e^0.1−1)/2 + √(2(0.01 + H)(1 + ½ln(0.01/H + 1)) ln(2e6))
        let (eps, delta) = (1.0f64, 1e-6f64);
        let h = eps * eps / (28.04 * (1.0 / delta).ln());
        let v = 0.01;
        let bound = 0.1 * 0.1f64.exp_m1() / 2.0
            + (2.0 * (v + h) * (1.0 + 0.5 * (v / h + 1.0).ln()) * (2.0 / delta).ln()).sqrt();
        let f = RogersFilter::new(eps, delta).unwrap();
        let s = DpSums::default().with(ApproxDp::pure(0.1).unwrap());
        assert_eq!(f.admits(&s), bound <= eps);
        assert!(RogersFilter::new(1.0, 0.5).is_err(), "delta must be below 1/e");
    }

    #[test]
    fn approximate_mechanisms_spend_delta() {
        let mut f = DpFilter::new(WhitehouseFilter::new(10.0, 1e-6, 1e-6).unwrap());
        f.try_charge(ApproxDp::new(0.1, 6e-7).unwrap()).unwrap();
        assert_eq!(f.decide(&ApproxDp::new(0.1, 6e-7).unwrap()), Decision::Halt, "delta'' exhausted");
        assert_eq!(f.decide(&ApproxDp::pure(0.1).unwrap()), Decision::Continue, "a pure mechanism still fits");
        let mut z = ApproxZcdpFilter::new(0.5, 1e-6).unwrap();
        z.try_charge(ApproxZcdp { rho: 0.3, delta: 5e-7 }).unwrap();
        assert!(z.try_charge(ApproxZcdp { rho: 0.3, delta: 0.0 }).is_err());
        z.try_charge(ApproxZcdp { rho: 0.2, delta: 5e-7 }).unwrap();
        let fz = FzFilter::printed(1.0, 1e-5).unwrap();
        assert!(
            !fz.admits(&DpSums::default().with(ApproxDp::new(0.01, 1e-9).unwrap())),
            "FZ covers pure mechanisms only"
        );
    }
}
