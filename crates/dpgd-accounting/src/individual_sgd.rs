//! Individual accounting for DP-SGD: each example is charged, every step, the Rényi DP of the
//! step *for its own clipped gradient*, and is dropped when its own budget is spent.
//!
//! # The guarantee
//!
//! A DP-SGD step includes each example independently with probability q and adds
//! N(0, σ²C²I) to the sum of the included examples' gradients, each clipped to norm at most
//! C. Fix an example i and let sᵢ = ‖ḡᵢ‖/C ∈ [0, 1] be its clipped gradient's norm relative
//! to C at this step's θ. Under add-or-remove-one (equivalently zero-out) neighbours, the
//! pair of output distributions with and without i is the Poisson-subsampled Gaussian of
//! [MTZ19] with sensitivity sᵢC, i.e. with noise multiplier σ/sᵢ: its Rényi divergence at
//! order α, in both directions, is at most ε_α(q, σ/sᵢ) ([MTZ19, Thm 4 and Sec. 3.3];
//! [`crate::subsampled::rdp`]), 0 for sᵢ = 0. This is the individual privacy loss of the step
//! ([YKCZL23]; [KTH23] for its Gaussian-DP form), and it is *predictable*: it depends only on
//! θ (a function of the earlier outputs) and on xᵢ.
//!
//! The individual Rényi filter ([FZ21, Alg. 2, Thm 4.5], built on their Rényi filter, Thm
//! 3.1) then states: if every example's charges at a fixed order α, chosen before training,
//! add up to at most B whatever happens, the whole run is (α, B)-RDP for every example. The
//! trainer charges each example ε_α(q, σ/sᵢ) every step — sampled or not, so it computes
//! every example's gradient norm every step — and when the charge would exceed what is left,
//! lowers sᵢ to the largest ratio whose charge fits ([`IndividualSgd::largest_ratio_within`])
//! and clips the gradient to that norm instead; an example with nothing left is dropped.
//!
//! With B = T·ε_α(q, σ) (T steps at full sensitivity: [`IndividualSgd::budget`]) an example
//! whose gradient is always at least C is charged what plain DP-SGD charges in T steps (up to
//! the ledger's rounding, which can cap its last step a few ulps below C), so the run's (ε, δ)
//! is plain DP-SGD's at that order; examples with smaller
//! gradients keep training after step T. α is the integer order that minimises plain DP-SGD's
//! ε for T steps ([`IndividualSgd::for_steps`]): it depends only on q, σ, T, δ and the
//! conversion, never on the data.
//!
//! Every charge is rounded up and every budget comparison is the ledger's round-down
//! arithmetic, so an example's true loss never exceeds what is recorded.
//!
//! [MTZ19]: https://arxiv.org/abs/1908.10530
//! [FZ21]: https://arxiv.org/abs/2008.11193
//! [YKCZL23]: https://arxiv.org/abs/2206.02617
//! [KTH23]: https://arxiv.org/abs/2209.15596

use crate::convert::{Conversion, ToApproxDp};
use crate::error::{AccountingError, Result, positive, probability};
use crate::event::{Accountant, DpEvent, RdpAccountant};
use crate::measure::Rdp;
use crate::numeric::{div_up, mul_up};
use crate::subsampled;

/// The integer orders searched for the filter's order (every integer from 2 to 256).
pub const ORDERS: std::ops::RangeInclusive<u32> = 2..=256;

/// Bisection steps of [`IndividualSgd::largest_ratio_within`] (the ratio is found to 2⁻⁶⁰).
const BISECTION_STEPS: u32 = 60;

/// The individual Rényi accounting of a DP-SGD run: its rate q, noise multiplier σ, the
/// filter's order α and each example's budget B at that order (a validated value).
///
/// ```
/// use dpgd_accounting::individual_sgd::IndividualSgd;
/// use dpgd_accounting::Conversion;
/// // Opacus's MNIST setting: q = 0.004, σ = 1.3, 3750 steps.
/// let acc = IndividualSgd::for_steps(0.004, 1.3, 3750, 1e-5, Conversion::Cks).unwrap();
/// // An example at full sensitivity pays T steps' worth, so the run's epsilon is plain DP-SGD's.
/// assert!(acc.epsilon(1e-5).unwrap() < 0.93);
/// // A smaller gradient costs less, and a charge never exceeds the full one.
/// assert!(acc.charge(0.5) < acc.charge(1.0) && acc.charge(0.0) == 0.0);
/// // The largest ratio that fits what is left fits it.
/// let r = acc.largest_ratio_within(acc.charge(1.0) / 3.0);
/// assert!(r < 1.0 && acc.charge(r) <= acc.charge(1.0) / 3.0);
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IndividualSgd {
    sample_rate: f64,
    sigma: f64,
    order: u32,
    budget: f64,
    conversion: Conversion,
}

impl IndividualSgd {
    /// The accounting of `steps` steps at rate `sample_rate` and noise multiplier `sigma`: the
    /// integer order in [`ORDERS`] that gives plain DP-SGD the smallest ε at `delta` under
    /// `conversion`, and the budget B = T·ε_α(q, σ) at it.
    ///
    /// # Errors
    /// A rate outside (0, 1], σ not finite and > 0, zero steps, δ outside (0, 1), the
    /// `gaussian-exact` conversion (not valid for an RDP curve), or a budget that overflows.
    pub fn for_steps(sample_rate: f64, sigma: f64, steps: u64, delta: f64, conversion: Conversion) -> Result<Self> {
        if !(sample_rate > 0.0 && sample_rate <= 1.0) {
            return Err(AccountingError::InvalidParameter {
                name: "sample rate",
                value: sample_rate,
                expected: "the Poisson sampling probability must be in (0, 1]",
            });
        }
        positive("sigma", sigma)?;
        probability("delta", delta)?;
        if steps == 0 {
            return Err(AccountingError::InvalidParameter { name: "steps", value: 0.0, expected: "at least one step" });
        }
        let orders: Vec<f64> = ORDERS.map(f64::from).collect();
        let mut rdp = RdpAccountant::new(orders.clone(), conversion)?;
        rdp.compose(&DpEvent::poisson_sampled(sample_rate, DpEvent::gaussian(sigma)).repeated(steps))?;
        let (_, alpha) = rdp.epsilon_and_order(delta)?;
        // `alpha` is one of ORDERS (integers up to 256), the order the accountant returned.
        let at = orders.iter().position(|&a| a == alpha).ok_or(AccountingError::InvalidParameter {
            name: "order",
            value: alpha,
            expected: "one of the integer orders searched",
        })?;
        let budget = rdp.rdp()[at];
        Ok(Self { sample_rate, sigma, order: alpha as u32, budget, conversion })
    }

    /// The filter's Rényi order α.
    #[must_use]
    pub fn order(&self) -> u32 {
        self.order
    }

    /// Each example's budget B at order α (T full-sensitivity steps), rounded up.
    #[must_use]
    pub fn budget(&self) -> f64 {
        self.budget
    }

    /// The step's Rényi DP at order α for an example whose clipped gradient has norm `ratio`·C
    /// (`ratio` in [0, 1]; larger values count as 1, NaN as 1), rounded up: ε_α(q, σ/ratio), and
    /// never more than the unsampled Gaussian's α·ratio²/(2σ²).
    #[must_use]
    pub fn charge(&self, ratio: f64) -> f64 {
        let r = if ratio.is_nan() { 1.0 } else { ratio.min(1.0) };
        if r <= 0.0 {
            return 0.0;
        }
        let alpha = f64::from(self.order);
        // α·r²/(2σ²) rounded up: the unsampled Gaussian with sensitivity r bounds the step.
        let gaussian = div_up(mul_up(alpha, mul_up(r, r)), 2.0 * self.sigma * self.sigma * (1.0 - f64::EPSILON));
        // σ/r rounded down (a smaller noise multiplier only overstates the loss); exact at r = 1,
        // where the charge is plain DP-SGD's step.
        // Never below σ (σ/r ≥ σ for r ≤ 1): so the charge stays monotone up to r = 1.
        let noise = if r == 1.0 { self.sigma } else { (self.sigma / r * (1.0 - f64::EPSILON)).max(self.sigma) };
        match subsampled::rdp(self.sample_rate, noise, alpha) {
            Ok(e) if e.is_finite() => e.min(gaussian),
            _ => gaussian,
        }
    }

    /// The largest ratio in [0, 1] whose [`charge`](Self::charge) is at most `remaining` (0 if
    /// only 0 fits), by bisection; the answer's charge is checked to fit.
    #[must_use]
    pub fn largest_ratio_within(&self, remaining: f64) -> f64 {
        if remaining.is_nan() || remaining <= 0.0 {
            return 0.0;
        }
        if self.charge(1.0) <= remaining {
            return 1.0;
        }
        let (mut lo, mut hi) = (0.0f64, 1.0f64);
        for _ in 0..BISECTION_STEPS {
            let mid = 0.5 * (lo + hi);
            if self.charge(mid) <= remaining {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        lo
    }

    /// The same filter with the largest budget B′ at the same order whose (α, B′)-RDP guarantee
    /// converts to at most `epsilon` at `delta`: a tier of personalized budgets (σ, q and the
    /// charges unchanged; only where an example stops). The answer is confirmed with
    /// [`epsilon`](Self::epsilon), the conversion every report uses.
    ///
    /// # Errors
    /// An `epsilon` that even a budget of (almost) nothing exceeds at this order and δ (naming
    /// `epsilon`), or an invalid δ.
    pub fn with_epsilon(&self, epsilon: f64, delta: f64) -> Result<Self> {
        let at = |budget: f64| Self { budget, ..*self };
        let fits = |budget: f64| at(budget).epsilon(delta).is_ok_and(|e| e <= epsilon);
        // The conversions are increasing in B: from a budget that fits, double until one does
        // not, then bisect.
        let start = if fits(self.budget) {
            self.budget
        } else {
            let mut b = self.budget;
            for _ in 0..2100 {
                b /= 2.0;
                if b < f64::MIN_POSITIVE || fits(b) {
                    break;
                }
            }
            if !(b >= f64::MIN_POSITIVE && fits(b)) {
                return Err(AccountingError::InvalidParameter {
                    name: "epsilon",
                    value: epsilon,
                    expected: "above what the filter's order and delta cost with no budget at all: raise it",
                });
            }
            b
        };
        let (mut lo, mut hi) = (start, start.max(epsilon.abs()).max(f64::MIN_POSITIVE) * 2.0);
        for _ in 0..2100 {
            if !hi.is_finite() || !fits(hi) {
                break;
            }
            lo = hi;
            hi *= 2.0;
        }
        let hi = hi.min(f64::MAX);
        let (mut lo, mut hi) = (lo, hi);
        for _ in 0..200 {
            let mid = lo + 0.5 * (hi - lo);
            if mid <= lo || mid >= hi {
                break;
            }
            if fits(mid) {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        Ok(at(lo))
    }

    /// The run's ε at `delta`: every example's loss is at most (α, B)-RDP, converted.
    ///
    /// # Errors
    /// An invalid δ.
    pub fn epsilon(&self, delta: f64) -> Result<f64> {
        self.epsilon_by(delta, self.conversion)
    }

    /// The run's ε at `delta` under another conversion of the same (α, B)-RDP guarantee (the
    /// ledger bounds nothing at other orders).
    ///
    /// # Errors
    /// An invalid δ, or `gaussian-exact` (not valid for an RDP guarantee).
    pub fn epsilon_by(&self, delta: f64, conversion: Conversion) -> Result<f64> {
        Rdp::new(vec![f64::from(self.order)], vec![self.budget])?.epsilon(delta, conversion)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opacus() -> IndividualSgd {
        IndividualSgd::for_steps(0.004, 1.3, 3750, 1e-5, Conversion::Cks).unwrap()
    }

    /// A looser tier keeps the order and the charges, raises the budget to the largest whose
    /// guarantee meets its ε (checked independently: α·… of the CKS conversion by hand), and a
    /// stricter one is refused.
    #[test]
    fn a_looser_tier_gets_the_largest_budget_within_its_epsilon() {
        let acc = opacus();
        let run = acc.epsilon(1e-5).unwrap();
        let tier = acc.with_epsilon(3.0, 1e-5).unwrap();
        assert_eq!((tier.order(), tier.charge(0.7)), (acc.order(), acc.charge(0.7)));
        assert!(tier.budget() > acc.budget());
        // Canonne, Kamath & Steinke 2020, Prop. 12, recomputed here in plain f64.
        let cks = |b: f64| {
            let a = f64::from(acc.order());
            b + ((a - 1.0) / a).ln() - (1e-5f64.ln() + a.ln()) / (a - 1.0)
        };
        assert!(cks(tier.budget()) <= 3.0 + 1e-12 && cks(tier.budget()) > 3.0 - 1e-9, "{}", cks(tier.budget()));
        assert!(tier.epsilon(1e-5).unwrap() <= 3.0);
        assert_eq!(acc.with_epsilon(run, 1e-5).unwrap().budget(), acc.budget());
        // A stricter tier gets a smaller budget at the same σ (it stops sooner).
        let strict = acc.with_epsilon(run * 0.7, 1e-5).unwrap();
        assert!(strict.budget() < acc.budget() && strict.epsilon(1e-5).unwrap() <= run * 0.7);
        assert!(cks(strict.budget()) > run * 0.7 - 1e-9);
        // Below what the conversion costs with no budget at all: refused.
        assert!(acc.with_epsilon(cks(0.0) * 0.5, 1e-5).is_err());
    }

    /// At full sensitivity a step costs plain DP-SGD's step, B is T of them, and the run's ε
    /// is plain DP-SGD's best ε over the same integer orders.
    #[test]
    fn full_sensitivity_is_plain_dp_sgd() {
        let acc = opacus();
        let alpha = f64::from(acc.order());
        let step = subsampled::rdp(0.004, 1.3, alpha).unwrap();
        assert!(acc.charge(1.0) >= step && acc.charge(1.0) <= step * (1.0 + 1e-12), "{} vs {step}", acc.charge(1.0));
        assert!(acc.budget() >= 3750.0 * step && acc.budget() <= 3750.0 * step * (1.0 + 1e-12));
        let mut rdp = RdpAccountant::new(ORDERS.map(f64::from).collect(), Conversion::Cks).unwrap();
        rdp.compose(&DpEvent::poisson_sampled(0.004, DpEvent::gaussian(1.3)).repeated(3750)).unwrap();
        let (eps, order) = rdp.epsilon_and_order(1e-5).unwrap();
        assert_eq!((acc.epsilon(1e-5).unwrap(), f64::from(acc.order())), (eps, order));
        // Opacus 1.6 reports 0.92 over its (partly fractional) orders; integers lose little.
        assert!(eps > 0.9 && eps < 0.94, "{eps}");
    }

    /// Without sampling the step is the Gaussian mechanism with sensitivity r: α·r²/(2σ²).
    #[test]
    fn without_sampling_a_charge_is_the_gaussians() {
        let acc = IndividualSgd::for_steps(1.0, 4.0, 100, 1e-5, Conversion::Cks).unwrap();
        let alpha = f64::from(acc.order());
        for r in [0.1, 0.5, 0.9, 1.0] {
            let want = alpha * r * r / 32.0;
            assert!((acc.charge(r) - want).abs() <= 1e-12 * want, "{r}: {} vs {want}", acc.charge(r));
        }
    }

    /// Charges grow with the ratio, are 0 at 0 and capped at 1; the largest ratio within a
    /// remainder fits it and is tight to the bisection's resolution.
    #[test]
    fn charges_are_monotone_and_the_largest_fitting_ratio_is_tight() {
        for acc in [opacus(), IndividualSgd::for_steps(0.1, 0.8, 50, 1e-5, Conversion::BunSteinke).unwrap()] {
            let mut last = 0.0;
            for i in 0..=200 {
                let c = acc.charge(f64::from(i) / 200.0);
                assert!(c >= last, "not monotone at {i}");
                last = c;
            }
            assert_eq!((acc.charge(0.0), acc.charge(-1.0)), (0.0, 0.0));
            assert_eq!((acc.charge(2.0), acc.charge(f64::NAN)), (acc.charge(1.0), acc.charge(1.0)));
            for frac in [1e-9, 0.01, 0.3, 0.999] {
                let rem = acc.charge(1.0) * frac;
                let r = acc.largest_ratio_within(rem);
                assert!(acc.charge(r) <= rem, "{frac}: charge {} > {rem}", acc.charge(r));
                assert!(acc.charge(r + 1e-9) > rem, "{frac}: {r} is not the largest");
            }
            assert_eq!(acc.largest_ratio_within(acc.charge(1.0)), 1.0);
            assert_eq!((acc.largest_ratio_within(0.0), acc.largest_ratio_within(f64::NAN)), (0.0, 0.0));
        }
    }

    #[test]
    fn invalid_parameters_are_named() {
        for (q, s, t, d) in
            [(0.0, 1.0, 10, 1e-5), (1.5, 1.0, 10, 1e-5), (0.1, 0.0, 10, 1e-5), (0.1, 1.0, 0, 1e-5), (0.1, 1.0, 10, 1.0)]
        {
            assert!(IndividualSgd::for_steps(q, s, t, d, Conversion::Cks).is_err(), "{q} {s} {t} {d}");
        }
        assert!(IndividualSgd::for_steps(0.1, 1.0, 10, 1e-5, Conversion::GaussianExact).is_err());
    }
}
