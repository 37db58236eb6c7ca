//! Privacy odometers: at every time, a bound on the privacy loss so far that holds
//! simultaneously over all times with probability ≥ 1 − δ ([RRUV16, §3];
//! [WRRW23, §4]).
//!
//! All bounds are functions of the *intrinsic time* Vₙ = Σ_{m≤n} ε_m² ([WRRW23, Thm 3]) and are
//! trivial (`None`, i.e. ∞) once the mechanisms' own δₘ exceed δ″: with δ = δ′ + δ″, the bound
//! at time n is finite only while Σ_{m≤n} δₘ ≤ δ″ (this is n ≤ N in [WRRW23, Thm 3]).
//!
//! | odometer | tight | source |
//! |---|---|---|
//! | [`FilterOdometer`] | at one preselected intrinsic time y* | [WRRW23, Thm 3.1] |
//! | [`MixtureOdometer`] | overall, best near a chosen time (γ) | [WRRW23, Thm 3.2] |
//! | [`StitchedOdometer`] | at all times up to log log factors, after V ≥ v₀ | [WRRW23, Thm 3.3] |
//! | [`RogersOdometer`] | the original; depends on the dataset size | [RRUV16, Thm 6.2] / [WRRW23, Lemma 3] |
//!
//! # Mechanisms with δₘ > 0 need probabilistic DP
//!
//! [WRRW23, Thm 3] (and Lemma 3, stated in its setup) assumes every mechanism is (εₘ, δₘ)-pDP
//! conditioned on the earlier outputs ([`ProbabilisticDp`]): its privacy loss exceeds εₘ
//! with probability at most δₘ. For δₘ = 0 that is pure εₘ-DP, but for δₘ > 0 it is strictly
//! stronger than (εₘ, δₘ)-DP, and the paper conjectures (§4.1) that the odometers fail for
//! approximate-DP mechanisms. So [`Odometer`] refuses an [`ApproxDp`] cost with δ > 0
//! ([`Odometer::record`] errs, and as a [`PrivacyFilter`](crate::filter::PrivacyFilter) it
//! answers HALT), and takes such
//! mechanisms only as [`ProbabilisticDp`] through [`Odometer::record_pdp`]. A bare
//! [`PrivacyOdometer::bound`] cannot tell where its sums came from: sums of δₘ > 0 must come
//! from pDP parameters ([`DpSums::with_pdp`]). To account for approximate-DP mechanisms
//! with a budget fixed in advance, use the filter of [WRRW23, Thm 2]
//! ([`WhitehouseFilter`](crate::filter::WhitehouseFilter)), which takes them directly.

use super::error::{AccountingError, Result, non_negative, positive, probability};
use super::filter::DpSums;
use super::{ApproxDp, ProbabilisticDp};

/// An odometer's bound as a function of the running sums of realised (εₘ, δₘ).
///
/// The sums must come from pure-DP or (εₘ, δₘ)-pDP mechanisms (see the
/// [module docs](self#mechanisms-with-δₘ--0-need-probabilistic-dp)): a bound computed from
/// the δₘ > 0 of merely approximate-DP mechanisms is not valid.
pub trait PrivacyOdometer {
    /// The bound on the privacy loss of everything run so far, or `None` while trivial (∞).
    fn bound(&self, sums: &DpSums) -> Option<f64>;
}

/// An odometer with its running sums.
#[derive(Debug, Clone, PartialEq)]
pub struct Odometer<O> {
    rule: O,
    sums: DpSums,
}

impl<O: PrivacyOdometer> Odometer<O> {
    /// A fresh odometer.
    #[must_use]
    pub fn new(rule: O) -> Self {
        Self { rule, sums: DpSums::default() }
    }
    /// Records a mechanism that ran with parameters `c`, which must be pure DP (δ = 0).
    ///
    /// # Errors
    /// [`AccountingError::Unsupported`] for δ > 0: the odometers of [WRRW23, Thm 3] are not valid
    /// for (ε, δ)-DP mechanisms with δ > 0 (see the
    /// [module docs](self#mechanisms-with-δₘ--0-need-probabilistic-dp)); state the mechanism's
    /// probabilistic-DP parameters and use [`record_pdp`](Self::record_pdp). Nothing is
    /// recorded then.
    pub fn record(&mut self, c: ApproxDp) -> Result<()> {
        let pdp = ProbabilisticDp::from_pure(c).ok_or(AccountingError::Unsupported {
            method: "a privacy odometer",
            guarantee: "an (epsilon, delta)-DP mechanism with delta > 0",
            why: "the odometers of Whitehouse et al. 2023 (Thm 3) need (epsilon, delta)-probabilistic DP \
                  when delta > 0; record the mechanism's pDP parameters with Odometer::record_pdp, or use \
                  WhitehouseFilter, which takes approximate DP",
        })?;
        self.record_pdp(pdp);
        Ok(())
    }
    /// Records an (ε, δ)-pDP mechanism (for δ = 0, any pure ε-DP mechanism).
    pub fn record_pdp(&mut self, c: ProbabilisticDp) {
        self.sums = self.sums.with_pdp(c);
    }
    /// The current bound (`None` while trivial).
    pub fn bound(&self) -> Option<f64> {
        self.rule.bound(&self.sums)
    }
    /// The sums so far.
    pub fn sums(&self) -> DpSums {
        self.sums
    }
}

/// The split δ = δ′ + δ″ every odometer of [WRRW23, Thm 3] uses.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Split {
    /// ln(1/δ′).
    log_inv: f64,
    delta_prime: f64,
    delta_second: f64,
}

impl Split {
    fn new(delta_prime: f64, delta_second: f64) -> Result<Self> {
        probability("delta'", delta_prime)?;
        non_negative("delta''", delta_second)?;
        // −ln δ′ rather than ln(1/δ′): finite even for a subnormal δ′.
        Ok(Self { log_inv: -delta_prime.ln(), delta_prime, delta_second })
    }
    fn live(&self, s: &DpSums) -> bool {
        s.is_valid() && s.delta <= self.delta_second
    }
}

/// The filter odometer of [WRRW23, Thm 3.1]: with L = ln(1/δ′),
/// uₙ = √(y* L/2) + √(L/(2y*))·Vₙ + ½Vₙ — the line a + bV with ab = L/2 (the linear-boundary
/// bound, [WRRW23, Thm 4]) that touches the advanced-composition curve √(2LV) + V/2 at V = y*.
///
/// **Reading of y\*.** [WRRW23] prints y* = (−√(2L) + √(2L + ε))² and says it solves f(y) = ε for
/// f(y) = √(2Ly) + y/2; but f of that value is ε/2. The root of f(y) = ε is
/// y* = (√(2L + 2ε) − √(2L))², used here: the odometer then equals ε exactly at Vₙ = y*, the
/// stopping point of the (ε, δ) filter of [WRRW23, Thm 2]. Any y* > 0 gives a valid odometer (only
/// ab = L/2 matters for validity), so both readings are valid; ours is tight where intended.
///
/// [WRRW23]: https://arxiv.org/abs/2203.05481
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FilterOdometer {
    y_star: f64,
    split: Split,
}

impl FilterOdometer {
    /// Tight at the intrinsic time where the bound equals `target_epsilon`.
    ///
    /// # Errors
    /// [`AccountingError::InvalidParameter`] naming `target epsilon` (not a finite positive
    /// number, or so small or large that y* is not a finite positive number), `delta'` (not
    /// in (0, 1)) or `delta''` (not a finite number ≥ 0).
    pub fn new(target_epsilon: f64, delta_prime: f64, delta_second: f64) -> Result<Self> {
        positive("target epsilon", target_epsilon)?;
        let split = Split::new(delta_prime, delta_second)?;
        let l = split.log_inv;
        // √y* = √(2L + 2ε) − √(2L) = √2·ε/(√(L + ε) + √L): no cancellation, no overflow of 2ε.
        let root = std::f64::consts::SQRT_2 * (target_epsilon / ((l + target_epsilon).sqrt() + l.sqrt()));
        let y_star = root * root;
        if !(y_star.is_finite() && y_star > 0.0) {
            return Err(AccountingError::InvalidParameter {
                name: "target epsilon",
                value: target_epsilon,
                expected: "the intrinsic time y* where the odometer is tight must be a finite number > 0: \
                           choose a target epsilon between about 1e-150 and 1e300",
            });
        }
        Ok(Self { y_star, split })
    }
    /// The intrinsic time y* where the odometer is tight.
    #[must_use]
    pub fn y_star(&self) -> f64 {
        self.y_star
    }
}

impl PrivacyOdometer for FilterOdometer {
    fn bound(&self, s: &DpSums) -> Option<f64> {
        let l = self.split.log_inv;
        self.split
            .live(s)
            .then(|| (self.y_star * l / 2.0).sqrt() + (l / (2.0 * self.y_star)).sqrt() * s.eps2 + 0.5 * s.eps2)
            .filter(|b| !b.is_nan())
    }
}

/// The mixture odometer of [WRRW23, Thm 3.2] (method of mixtures, [HRMS21]):
/// uₙ = √(2(γ + Vₙ) ln((1/δ′)·√((Vₙ + γ)/γ))) + ½Vₙ.
///
/// [HRMS21]: https://arxiv.org/abs/1810.08240
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MixtureOdometer {
    gamma: f64,
    split: Split,
}

impl MixtureOdometer {
    /// With mixture parameter γ > 0.
    ///
    /// # Errors
    /// [`AccountingError::InvalidParameter`] naming `gamma` (not a finite number > 0),
    /// `delta'` (not in (0, 1)) or `delta''` (not a finite number ≥ 0).
    pub fn new(gamma: f64, delta_prime: f64, delta_second: f64) -> Result<Self> {
        Ok(Self { gamma: positive("gamma", gamma)?, split: Split::new(delta_prime, delta_second)? })
    }
    /// With γ chosen to minimise the bound at intrinsic time `v_target` (golden-section search
    /// over ln γ, which the bound is unimodal in; 200 steps, a fixed amount of work).
    ///
    /// # Errors
    /// [`AccountingError::InvalidParameter`] naming `target intrinsic time` (not a finite
    /// number > 0, or one so extreme that the best γ is not a finite positive number),
    /// `delta'` or `delta''`.
    pub fn tight_at(v_target: f64, delta_prime: f64, delta_second: f64) -> Result<Self> {
        positive("target intrinsic time", v_target)?;
        let split = Split::new(delta_prime, delta_second)?;
        let at = |ln_g: f64| mixture(ln_g.exp(), v_target, split.log_inv);
        // The search stays within the exponents of normal positive doubles.
        let (lowest, highest) = (f64::MIN_POSITIVE.ln(), f64::MAX.ln());
        let (mut a, mut b) = ((v_target.ln() - 30.0).max(lowest), (v_target.ln() + 30.0).min(highest));
        let g = (5f64.sqrt() - 1.0) / 2.0;
        for _ in 0..200 {
            let (c, d) = (b - g * (b - a), a + g * (b - a));
            if at(c) < at(d) { b = d } else { a = c }
        }
        let gamma = (0.5 * (a + b)).exp();
        if !(gamma.is_finite() && gamma > 0.0) {
            return Err(AccountingError::InvalidParameter {
                name: "target intrinsic time",
                value: v_target,
                expected: "no finite positive mixture parameter gamma is tight there: choose a target between \
                           about 1e-300 and 1e300",
            });
        }
        Ok(Self { gamma, split })
    }
    /// The mixture parameter γ.
    #[must_use]
    pub fn gamma(&self) -> f64 {
        self.gamma
    }
}

fn mixture(gamma: f64, v: f64, log_inv: f64) -> f64 {
    (2.0 * (gamma + v) * (log_inv + 0.5 * ((v + gamma) / gamma).ln())).sqrt() + 0.5 * v
}

impl PrivacyOdometer for MixtureOdometer {
    fn bound(&self, s: &DpSums) -> Option<f64> {
        self.split.live(s).then(|| mixture(self.gamma, s.eps2, self.split.log_inv)).filter(|b| !b.is_nan())
    }
}

/// The stitched odometer of [WRRW23, Thm 3.3] (stitching, [HRMS21]): for Vₙ ≥ v₀,
/// uₙ = 1.7·√(Vₙ (ln ln(2Vₙ/v₀) + 0.72 ln(5.2/δ′))) + ½Vₙ, and trivial before.
///
/// [HRMS21]: https://arxiv.org/abs/1810.08240
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StitchedOdometer {
    v0: f64,
    split: Split,
}

impl StitchedOdometer {
    /// Nontrivial from intrinsic time v₀ > 0 on.
    ///
    /// # Errors
    /// [`AccountingError::InvalidParameter`] naming `v0` (not a finite number > 0),
    /// `delta'` or `delta''`.
    pub fn new(v0: f64, delta_prime: f64, delta_second: f64) -> Result<Self> {
        Ok(Self { v0: positive("v0", v0)?, split: Split::new(delta_prime, delta_second)? })
    }
}

impl PrivacyOdometer for StitchedOdometer {
    fn bound(&self, s: &DpSums) -> Option<f64> {
        let v = s.eps2;
        (self.split.live(s) && v >= self.v0)
            .then(|| {
                // ln(5.2/δ′) = ln 5.2 + ln(1/δ′): finite for a subnormal δ′.
                let tail = 5.2f64.ln() + self.split.log_inv;
                1.7 * (v * ((2.0 * v / self.v0).ln().ln() + 0.72 * tail)).sqrt() + 0.5 * v
            })
            .filter(|b| !b.is_nan())
    }
}

/// The odometer of [RRUV16, Thm 6.2] (restated as [WRRW23, Lemma 3]),
/// for a dataset of n examples and δ′ ≤ 1/e. With M = Σεₘ(e^εₘ − 1)/2:
///
/// * for Vₙ ∈ [1/n², 1]: M + √(2Vₙ · K), K = max(ln(110e) + 2 ln(ln(n)/δ′), (1 + ln√3)·ln(4 log₂(n)/δ′));
/// * otherwise: M + √(2(1/n² + Vₙ)(1 + ½ ln(1 + n²Vₙ)) ln(4 log₂(n)/δ′)).
///
/// **Reading.** The two extractions disagree in the constant K of the first case ([WRRW23, Lemma 3]
/// prints ln(110e) + 2 ln(ln|x|/δ′), [RRUV16, Thm 6.2] (1 + ln√3) ln(4 log₂ n/δ′)) and in the mean
/// term (½Vₙ for pDP mechanisms in [WRRW23], M ≥ ½Vₙ in [RRUV16]). We take the larger of each, which is
/// valid whichever printing is the correct one.
///
/// [WRRW23]: https://arxiv.org/abs/2203.05481
/// [RRUV16]: https://arxiv.org/abs/1605.08294
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RogersOdometer {
    n: f64,
    split: Split,
}

impl RogersOdometer {
    /// For a dataset of `n ≥ 3` examples, δ′ ≤ 1/e.
    ///
    /// # Errors
    /// [`AccountingError::InvalidParameter`] naming `dataset size` (below 3), `delta'` (not
    /// in (0, 1/e]) or `delta''` (not a finite number ≥ 0).
    pub fn new(dataset_size: u64, delta_prime: f64, delta_second: f64) -> Result<Self> {
        if dataset_size < 3 {
            return Err(AccountingError::InvalidParameter {
                name: "dataset size",
                value: dataset_size as f64,
                expected: "the Rogers et al. odometer needs a dataset of at least 3 examples",
            });
        }
        if delta_prime > (-1.0f64).exp() {
            return Err(AccountingError::InvalidParameter {
                name: "delta'",
                value: delta_prime,
                expected: "must be <= 1/e",
            });
        }
        Ok(Self { n: dataset_size as f64, split: Split::new(delta_prime, delta_second)? })
    }
}

impl PrivacyOdometer for RogersOdometer {
    fn bound(&self, s: &DpSums) -> Option<f64> {
        if !self.split.live(s) {
            return None;
        }
        let (n, v) = (self.n, s.eps2);
        // ln(4 log₂ n/δ′) = ln(4 log₂ n) + ln(1/δ′): finite for a subnormal δ′.
        let tail = (4.0 * n.log2()).ln() + self.split.log_inv;
        let mean = s.eps_expm1.max(0.5 * v);
        let b = if (1.0 / (n * n)..=1.0).contains(&v) {
            let k = ((110.0 * std::f64::consts::E).ln() + 2.0 * (n.ln().ln() + self.split.log_inv))
                .max((1.0 + 3f64.sqrt().ln()) * tail);
            mean + (2.0 * v * k).sqrt()
        } else {
            mean + (2.0 * (1.0 / (n * n) + v) * (1.0 + 0.5 * (n * n * v).ln_1p()) * tail).sqrt()
        };
        (!b.is_nan()).then_some(b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::filter::{Decision, PrivacyFilter};

    fn after(rounds: u64, eps0: f64) -> DpSums {
        DpSums::default().repeated(ApproxDp::pure(eps0).unwrap(), rounds)
    }

    #[test]
    fn filter_odometer_equals_target_at_y_star() {
        let (eps, delta) = (1.0, 1e-6);
        let o = FilterOdometer::new(eps, delta, 0.0).unwrap();
        let l = (1.0f64 / delta).ln();
        let y = ((2.0 * l + 2.0 * eps).sqrt() - (2.0 * l).sqrt()).powi(2);
        assert!((o.y_star() - y).abs() < 1e-15);
        let s = DpSums { eps2: y, ..DpSums::default() };
        assert!((o.bound(&s).unwrap() - eps).abs() < 1e-12, "tight at y*: {}", o.bound(&s).unwrap());
        // Elsewhere it is above the advanced-composition curve √(2LV) + V/2.
        for v in [y / 10.0, y * 10.0] {
            let s = DpSums { eps2: v, ..DpSums::default() };
            assert!(o.bound(&s).unwrap() > (2.0 * l * v).sqrt() + v / 2.0);
        }
    }

    #[test]
    fn mixture_and_stitched_match_hand_values() {
        let (v, d, g) = (0.25f64, 1e-5f64, 0.1f64);
        let s = DpSums { eps2: v, ..DpSums::default() };
        let want = (2.0 * (g + v) * ((1.0 / d).ln() + 0.5 * ((v + g) / g).ln())).sqrt() + v / 2.0;
        assert!((MixtureOdometer::new(g, d, 0.0).unwrap().bound(&s).unwrap() - want).abs() < 1e-12);
        let st = StitchedOdometer::new(0.1, d, 0.0).unwrap();
        let want = 1.7 * (v * ((2.0 * v / 0.1).ln().ln() + 0.72 * (5.2 / d).ln())).sqrt() + v / 2.0;
        assert!((st.bound(&s).unwrap() - want).abs() < 1e-12);
        assert_eq!(st.bound(&DpSums { eps2: 0.05, ..DpSums::default() }), None, "trivial before v0");
        // γ chosen for tightness at v beats γ far off.
        let best = MixtureOdometer::tight_at(v, d, 0.0).unwrap();
        for other in [best.gamma() / 50.0, best.gamma() * 50.0] {
            assert!(best.bound(&s).unwrap() < MixtureOdometer::new(other, d, 0.0).unwrap().bound(&s).unwrap());
        }
    }

    #[test]
    fn odometers_become_trivial_when_mechanism_deltas_exceed_delta_second() {
        let o = MixtureOdometer::new(0.1, 1e-6, 1e-6).unwrap();
        let p = ProbabilisticDp::new(0.1, 4e-7).unwrap();
        let s = DpSums::default().with_pdp(p).with_pdp(p);
        assert!(o.bound(&s).is_some());
        assert!(o.bound(&s.with_pdp(p)).is_none());
    }

    #[test]
    fn approximate_dp_with_positive_delta_is_refused_and_pdp_is_accepted() {
        // [WRRW23] Thm 3 needs pDP: an (ε, δ)-DP mechanism with δ > 0 must not be recorded.
        let mut o = Odometer::new(MixtureOdometer::new(0.1, 1e-6, 1e-6).unwrap());
        o.record(ApproxDp::pure(0.1).unwrap()).unwrap();
        let before = o.clone();
        let approx = ApproxDp::new(0.1, 1e-9).unwrap();
        let e = o.record(approx).unwrap_err();
        assert!(matches!(e, AccountingError::Unsupported { .. }), "{e}");
        assert!(e.to_string().contains("record_pdp"), "the error names the fix: {e}");
        assert_eq!(o, before, "a refused mechanism is not recorded");
        assert_eq!(o.decide(&approx), Decision::Halt);
        assert!(o.try_charge(approx).is_err());
        assert_eq!(o, before);
        assert_eq!(o.decide(&ApproxDp::pure(0.1).unwrap()), Decision::Continue);
        // The same parameters stated as pDP are recorded, and their δ counts against δ″.
        o.record_pdp(ProbabilisticDp::new(0.1, 1e-9).unwrap());
        assert_eq!(o.sums().delta, 1e-9);
        assert_eq!(o.sums().rounds, 2);
        assert!(o.bound().is_some());
    }

    /// 10,000 rounds of 0.01 have intrinsic time Σε₀² = 1 exactly; summed in floats
    /// upwards it was 1.0000000000000002, past the case boundary of the Rogers odometer, whose
    /// bound jumped from 9.19 to 19.56.
    #[test]
    fn rogers_odometer_at_the_case_boundary_uses_the_exact_sum() {
        let r = RogersOdometer::new(60_000, 1e-5, 0.0).unwrap();
        let tenth_of_tenth: crate::decimal::Decimal = "0.01".parse().unwrap();
        let exact = DpSums::default().repeated_typed(tenth_of_tenth, crate::decimal::Decimal::ZERO, 10_000).unwrap();
        assert_eq!(exact.eps2, 1.0);
        let floats = DpSums::default().repeated(ApproxDp::pure(0.01).unwrap(), 10_000);
        assert!(floats.eps2 > 1.0);
        let (b_exact, b_floats) = (r.bound(&exact).unwrap(), r.bound(&floats).unwrap());
        assert!(b_exact < 10.0 && b_floats > 19.0, "{b_exact} {b_floats}");
    }

    #[test]
    fn new_odometers_beat_rogers_on_the_papers_setting() {
        // 000 Fig. 1b: ε₀ = 0.01 rounds, δ = 1e-6, n = 10⁶ examples.
        let (d, eps0) = (1e-6, 0.01);
        let r = RogersOdometer::new(1_000_000, d, 0.0).unwrap();
        let m = MixtureOdometer::tight_at(1.0, d, 0.0).unwrap();
        let s = StitchedOdometer::new(0.01, d, 0.0).unwrap();
        for rounds in [1_000u64, 10_000, 100_000] {
            let sums = after(rounds, eps0);
            let rb = r.bound(&sums).unwrap();
            assert!(m.bound(&sums).unwrap() < rb && s.bound(&sums).unwrap() < rb, "at {rounds} rounds");
        }
    }
}
