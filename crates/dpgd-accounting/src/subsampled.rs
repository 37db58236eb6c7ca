//! Rényi DP of the Poisson-subsampled Gaussian mechanism ([MTZ19]), the accounting of DP-SGD.
//!
//! Each step includes every example independently with probability q and adds
//! N(0, σ²C²I) to the sum of the sampled examples' gradients, each clipped to norm C. Under
//! **add-or-remove-one** neighbours its RDP at order α is ε(α) = ln A_α / (α − 1) with
//!
//! A_α = E_{z∼μ₀}[(μ(z)/μ₀(z))^α],  μ₀ = N(0, σ²),  μ = (1 − q)μ₀ + qN(1, σ²)
//!
//! ([MTZ19, Sec. 3]; Theorem 4 and Sec. 3.3 show that this direction — adding the example —
//! dominates the other one, so it is the mechanism's RDP). This is the quantity Opacus,
//! TensorFlow Privacy and dp_accounting compute.
//!
//! * **Integer α** ([MTZ19, Sec. 3.3], the binomial expansion): A_α = Σ_{i=0}^{α}
//!   C(α, i)(1 − q)^{α−i} qⁱ exp((i² − i)/(2σ²)), a finite sum of positive terms, so
//!   exact up to rounding.
//! * **Fractional α** ([MTZ19, Sec. 3.3], the series of the two half-lines split at
//!   z₀ = σ² ln(1/q − 1) + ½): A_α = Σᵢ C(α, i)[(1−q)^{α−i}qⁱ e^{(i²−i)/(2σ²)} ½erfc((i − z₀)/(√2σ)) +
//!   (1−q)ⁱq^{α−i} e^{(j²−j)/(2σ²)} ½erfc((z₀ − j)/(√2σ))], j = α − i, an infinite series
//!   whose terms change sign once i > α. It is summed until the bound on its remainder falls
//!   below 2⁻³⁰ of A − 1 (or of 2⁻⁶⁰A, where A − 1 is lost in A's rounding), or for
//!   [`MAX_TERMS`] terms.
//!
//! # Why ε(α) is never understated
//!
//! All terms are summed in log space relative to the largest. Every term's logarithm is
//! within a few ulps of the magnitude Mᵢ = |ln C(α,i)| + i|ln q| + (α−i)|ln(1−q)| +
//! (i² + i)/(2σ²) (+ the ln erfc term's own error, (2x² + 1) ulps of its size), so term tᵢ
//! is within that many ulps relative, so the terms' errors move A by at most Σᵢ|tᵢ|Mᵢ/A ulps
//! relative; that, times the 16-fold safety of [`ROUNDING_MARGIN`], is added to ln A, and
//! so is twice the error bound of the compensated summation (2u + 2n·u²·Σ|tᵢ|/A). For
//! fractional α the truncated remainder is added as well: past i > α + 1 the factor
//! (α − i + 1)/i of C(α, i) is negative, so the terms alternate in sign, and their magnitudes
//! decrease (like i^{−α−2}: the exponentials cancel against erfc's Gaussian tail, since
//! φ(x + h)/φ(x) ≤ e^{−hx−h²/2}); the remainder of an alternating series with decreasing
//! magnitudes is at most its first omitted term, hence at most the last term summed, which is
//! added. A series cut before its terms alternate and decrease has no such bound: the order
//! then gets the unsampled Gaussian's α/(2σ²), as do orders above [`MAX_ORDER`].
//!
//! [MTZ19]: https://arxiv.org/abs/1908.10530

use crate::error::{AccountingError, Result, positive};
use crate::numeric::{ROUNDING_MARGIN, add_up, div_up, log_normal_cdf, mul_up};

/// Orders above this get the unsampled Gaussian's RDP α/(2σ²), an upper bound (the series
/// would need more than this many terms; dp_accounting's largest default order is 1024).
pub const MAX_ORDER: f64 = 10_000.0;

/// The most series terms summed at a fractional order; a series cut there still has its tail
/// bound added, so the value is only looser. Usual settings stop within 6,000 terms (q = 0.5,
/// σ = 5: 5,392; q = 0.004, σ = 0.6: 763); orders near 1 with σ ≫ 1 and q near ½ converge
/// like i^(−α−1) and are cut here (at q = 0.5, σ = 1000, α = 1.1 the bound is a few % looser).
pub const MAX_TERMS: usize = 20_000;

/// The Rényi orders Opacus 1.6's `RDPAccountant` uses by default: 1.1, 1.2, …, 10.9, then
/// 12, 13, …, 63.
#[must_use]
pub fn opacus_orders() -> Vec<f64> {
    let mut orders: Vec<f64> = (1..100).map(|x| 1.0 + f64::from(x) / 10.0).collect();
    orders.extend((12..64).map(f64::from));
    orders
}

/// The Rényi orders dp_accounting's `RdpAccountant` uses by default (`DEFAULT_RDP_ORDERS`):
/// 1.1, 1.2, …, 10.9, then 11, 12, …, 63, then 128, 256, 512, 1024.
#[must_use]
pub fn dp_accounting_orders() -> Vec<f64> {
    let mut orders: Vec<f64> = (1..100).map(|x| 1.0 + f64::from(x) / 10.0).collect();
    orders.extend((11..64).map(f64::from));
    orders.extend([128.0, 256.0, 512.0, 1024.0]);
    orders
}

/// The RDP ε(α) of one step of the Poisson-subsampled Gaussian mechanism with sampling rate
/// `q` ∈ [0, 1] and noise multiplier `sigma` > 0 (noise std σ times the sensitivity), under
/// add-or-remove-one neighbours ([MTZ19]; see the [module docs](self)), never below the exact
/// value. q = 0 gives 0; q = 1 the Gaussian mechanism's α/(2σ²).
///
/// # Errors
/// [`AccountingError::InvalidParameter`] naming `sample rate` (not in [0, 1]), `sigma` (not
/// finite and > 0) or `order` (not finite and > 1, or a fractional order whose series is not
/// finite).
///
/// # Examples
/// ```
/// use dpgd_accounting::subsampled::rdp;
/// // Opacus's MNIST example: q = 240/60000, σ = 1.3, one step at α = 2.
/// let e = rdp(0.004, 1.3, 2.0).unwrap();
/// assert!(e > 0.0 && e < 2.0 / (2.0 * 1.3 * 1.3)); // far below the unsampled Gaussian's
/// ```
///
/// [MTZ19]: https://arxiv.org/abs/1908.10530
pub fn rdp(q: f64, sigma: f64, alpha: f64) -> Result<f64> {
    if !(0.0..=1.0).contains(&q) {
        return Err(AccountingError::InvalidParameter {
            name: "sample rate",
            value: q,
            expected: "the Poisson sampling probability must be in [0, 1]",
        });
    }
    let sigma = positive("sigma", sigma)?;
    if !(alpha.is_finite() && alpha > 1.0) {
        return Err(AccountingError::InvalidParameter {
            name: "order",
            value: alpha,
            expected: "every Rényi order must be a finite number > 1",
        });
    }
    if q == 0.0 {
        return Ok(0.0);
    }
    // α/(2σ²) rounded up: σ·σ is within half an ulp, so lowering 2σ² by one ulp bounds it below.
    let two_s2_down = (2.0 * sigma * sigma * (1.0 - f64::EPSILON)).max(f64::MIN_POSITIVE);
    let gaussian = div_up(alpha, two_s2_down);
    if q == 1.0 {
        return Ok(gaussian);
    }
    if alpha > MAX_ORDER {
        return Ok(gaussian);
    }
    let log_a = if alpha.fract() == 0.0 { log_a_int(q, sigma, alpha) } else { log_a_frac(q, sigma, alpha)?.0 };
    if log_a.is_nan() {
        return Ok(gaussian); // no bound computed: the unsampled Gaussian's still holds
    }
    // RDP is at most the unsampled Gaussian's (joint quasi-convexity of the Rényi divergence).
    Ok(div_up(log_a.max(0.0), alpha - 1.0).min(gaussian))
}

/// Terms summed in log space: (ln |t|, sign, magnitude of ln |t|'s computation), and a
/// running signed sum `sum · e^m` for the stopping rule.
struct Terms {
    terms: Vec<(f64, f64, f64)>,
    m: f64,
    sum: f64,
    /// A term was NaN: no bound (the sum reports +∞).
    poisoned: bool,
}

impl Terms {
    fn new() -> Self {
        Terms { terms: Vec::new(), m: f64::NEG_INFINITY, sum: 0.0, poisoned: false }
    }

    fn push(&mut self, log_abs: f64, sign: f64, magnitude: f64) {
        if log_abs.is_nan() || magnitude.is_nan() {
            self.poisoned = true;
        } else if log_abs > f64::NEG_INFINITY {
            self.terms.push((log_abs, sign, magnitude));
            if log_abs > self.m {
                self.sum *= (self.m - log_abs).exp();
                self.m = log_abs;
            }
            self.sum += sign * (log_abs - self.m).exp();
        }
    }

    /// ln |Σ − 1|, the part of the sum ln A is made of (−∞ while it is 0).
    fn log_excess(&self) -> f64 {
        (self.sum - (-self.m).exp()).abs().ln() + self.m
    }

    /// ln Σ, plus the bound on its rounding error (module docs), plus `ln(1 + tail)` for a
    /// tail of at most `tail_bound` (in linear units relative to e^max).
    fn log_sum_up(&self, log_tail: f64) -> f64 {
        let m = self.m;
        if self.poisoned {
            return f64::INFINITY;
        }
        if m == f64::NEG_INFINITY {
            return 0.0;
        }
        // Each term is within (its magnitude) ulps relative. The sum is compensated
        // (Neumaier): its error is at most 2u|S| + 2n·u²·Σ|t| (Higham, *Accuracy and Stability
        // of Numerical Algorithms*, 2002, §4.3).
        let (mut sum, mut carry, mut abs, mut weighted) = (0.0f64, 0.0f64, 0.0f64, 0.0f64);
        for &(l, s, g) in &self.terms {
            let t = s * (l - m).exp();
            let next = sum + t;
            carry += if sum.abs() >= t.abs() { (sum - next) + t } else { (t - next) + sum };
            sum = next;
            abs += t.abs();
            weighted += t.abs() * g;
        }
        let sum = sum + carry;
        let tail = (log_tail - m).exp();
        if sum.is_nan() || sum <= 0.0 {
            return f64::INFINITY; // cancelled beyond use: no bound rather than a wrong one
        }
        let u = f64::EPSILON / 2.0;
        let summation = 2.0 * u * sum + 2.0 * self.terms.len() as f64 * u * u * abs;
        // Twice the summation bound; ROUNDING_MARGIN (128 ulps) on the terms' own errors.
        let error = mul_up(ROUNDING_MARGIN, weighted / sum + m.abs()) + 2.0 * summation / sum;
        add_up(add_up(m, (sum + tail).ln()), error)
    }
}

/// ln C(α, i) for real α ≥ 0 and integer i, with its sign and the magnitude of its
/// computation (the lgamma terms' sizes).
fn log_binomial(alpha: f64, i: f64) -> (f64, f64, f64) {
    let (la, sa) = libm::lgamma_r(alpha + 1.0);
    let (li, _) = libm::lgamma_r(i + 1.0);
    let (lj, sj) = libm::lgamma_r(alpha - i + 1.0);
    // Γ(α − i + 1) has sign sj (negative between poles); 1/Γ is 0 at the poles (integer
    // α − i + 1 ≤ 0), where C(α, i) = 0.
    if (alpha - i + 1.0) <= 0.0 && (alpha - i + 1.0).fract() == 0.0 {
        return (f64::NEG_INFINITY, 1.0, 0.0);
    }
    (la - li - lj, f64::from(sa * sj), la.abs() + li.abs() + lj.abs())
}

fn log_a_int(q: f64, sigma: f64, alpha: f64) -> f64 {
    let (lq, l1q) = (q.ln(), (-q).ln_1p());
    let two_s2 = 2.0 * sigma * sigma;
    let mut terms = Terms::new();
    let mut i = 0.0;
    while i <= alpha {
        let (lc, _, mc) = log_binomial(alpha, i);
        let quad = (i * i - i) / two_s2;
        let l = lc + i * lq + (alpha - i) * l1q + quad;
        terms.push(l, 1.0, mc + i * lq.abs() + (alpha - i) * l1q.abs() + (i * i + i) / two_s2);
        i += 1.0;
    }
    terms.log_sum_up(f64::NEG_INFINITY)
}

/// ln(½ erfc(x)) = ln Φ(−√2·x), and the magnitude of its error.
fn log_half_erfc(x: f64) -> (f64, f64) {
    let v = log_normal_cdf(-std::f64::consts::SQRT_2 * x);
    (v, v.abs() * (2.0 * x * x + 1.0))
}

/// ln A at a fractional order, and the number of series terms (pairs) it summed.
fn log_a_frac(q: f64, sigma: f64, alpha: f64) -> Result<(f64, usize)> {
    let (lq, l1q) = (q.ln(), (-q).ln_1p());
    let two_s2 = 2.0 * sigma * sigma;
    let z0 = sigma * sigma * ((1.0 / q) - 1.0).ln() + 0.5;
    let root2s = std::f64::consts::SQRT_2 * sigma;
    let mut terms = Terms::new();
    // ln|C(α, i)| and its sign, updated by the factor (α − i + 1)/i (one rounding each).
    // `lc_error` bounds lc's accumulated rounding in ulps: the sizes of all terms added so far.
    let (mut lc, mut sign, mut lc_error) = (0.0f64, 1.0f64, 0.0f64);
    let mut alternating = false;
    // ln of the last pair's magnitude |s₀ + s₁| (both carry C(α, i)'s sign).
    let mut last = f64::NEG_INFINITY;
    let mut summed = 0;
    for n in 0..MAX_TERMS {
        summed = n + 1;
        let i = n as f64;
        if n > 0 {
            let f = (alpha - i + 1.0) / i;
            lc += f.abs().ln();
            lc_error += lc.abs() + f.abs().ln().abs();
            sign *= f.signum();
        }
        let j = alpha - i;
        let (le0, me0) = log_half_erfc((i - z0) / root2s);
        let (le1, me1) = log_half_erfc((z0 - j) / root2s);
        let base = lc_error + lc.abs() + i * lq.abs() + j.abs() * l1q.abs();
        let s0 = lc + i * lq + j * l1q + (i * i - i) / two_s2 + le0;
        let s1 = lc + j * lq + i * l1q + (j * j - j) / two_s2 + le1;
        terms.push(s0, sign, base + (i * i + i.abs()) / two_s2 + me0);
        terms.push(s1, sign, base + (j * j + j.abs()) / two_s2 + me1);
        if terms.poisoned || terms.m == f64::INFINITY {
            return Ok((f64::NAN, summed)); // no finite bound will come: the Gaussian's applies
        }
        let before = std::mem::replace(&mut last, log_add(s0, s1));
        // Past i > α + 1 the pairs alternate in sign; once their magnitudes decrease, the
        // remainder of the series is at most the last pair's magnitude (module docs). Stop
        // when that is below 2⁻³⁰ of A − 1, the part ln A is made of, or below 2⁻⁹⁰ of A itself
        // (where A − 1 is lost in A's rounding, e.g. q = 1e-320, a finer remainder changes
        // nothing). The remainder is added wherever the series stops, so either rule is sound.
        alternating = i > alpha + 1.0 && last < before;
        let scale = terms.log_excess().max(terms.m - 60.0 * std::f64::consts::LN_2);
        if alternating && last < scale - 30.0 * std::f64::consts::LN_2 {
            break;
        }
    }
    if !alternating {
        // Cut before the terms alternate and decrease: no bound on the rest of the series.
        return Ok((f64::NAN, summed));
    }
    if last.is_nan() || last == f64::INFINITY {
        return Err(AccountingError::InvalidParameter {
            name: "order",
            value: alpha,
            expected: "the subsampled Gaussian's series at this fractional order is not finite; use integer orders",
        });
    }
    // The remainder's bound is added (also where the series was cut at MAX_TERMS: looser).
    Ok((terms.log_sum_up(last), summed))
}

/// ln(eᵃ + eᵇ).
fn log_add(a: f64, b: f64) -> f64 {
    let (hi, lo) = if a >= b { (a, b) } else { (b, a) };
    if lo == f64::NEG_INFINITY { hi } else { hi + (lo - hi).exp().ln_1p() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_extremes_are_the_unsampled_gaussian_and_nothing() {
        assert_eq!(rdp(0.0, 1.0, 2.0).unwrap(), 0.0);
        let g = rdp(1.0, 2.0, 3.0).unwrap();
        assert!((3.0 / 8.0..3.0 / 8.0 * (1.0 + 1e-12)).contains(&g));
        // Near q = 1 the subsampled value approaches the Gaussian's from below.
        let near = rdp(0.999_999, 2.0, 3.0).unwrap();
        assert!(near <= g && near > 0.99 * g, "{near} vs {g}");
    }

    #[test]
    fn fractional_orders_lie_between_their_integer_neighbours() {
        for &(q, sigma) in &[(0.004, 1.3), (0.01, 0.8), (0.1, 2.0), (0.5, 5.0)] {
            for a in [2.0, 3.0, 7.0, 20.0] {
                let (lo, mid, hi) =
                    (rdp(q, sigma, a).unwrap(), rdp(q, sigma, a + 0.5).unwrap(), rdp(q, sigma, a + 1.0).unwrap());
                assert!(lo <= mid * (1.0 + 1e-9) && mid <= hi * (1.0 + 1e-9), "q {q} σ {sigma} α {a}: {lo} {mid} {hi}");
            }
        }
    }

    #[test]
    fn orders_without_a_computed_bound_get_the_gaussians_never_less_or_nan() {
        // Above MAX_ORDER, or where the series cannot be bounded, the unsampled Gaussian's.
        assert_eq!(rdp(0.01, 2.0, 20_000.5).unwrap(), rdp(1.0, 2.0, 20_000.5).unwrap());
        assert_eq!(rdp(0.01, 2.0, 1e7).unwrap(), rdp(1.0, 2.0, 1e7).unwrap());
        // The smallest sample rate: z₀ is infinite; a value, not NaN, and not below 0.
        for a in [2.0, 2.5, 40.5] {
            let e = rdp(5e-324, 1.0, a).unwrap();
            assert!(e >= 0.0 && e <= rdp(1.0, 1.0, a).unwrap(), "α {a}: {e}");
        }
    }

    #[test]
    fn series_stop_where_a_minus_one_is_below_a_s_rounding() {
        // q = 1e-320: A − 1 underflows, so the relative rule alone never stopped (MAX_TERMS
        // pairs per order: seconds per call). The value is still an upper bound.
        for (q, sigma, a) in [(1e-320, 1e-320, 1.5), (1e-300, 1.0, 2.5), (1e-20, 0.5, 10.5)] {
            let (log_a, summed) = log_a_frac(q, sigma, a).unwrap();
            assert!(summed < 1_000, "q {q} σ {sigma} α {a}: {summed} pairs");
            assert!(log_a.is_nan() || log_a >= 0.0, "q {q}: {log_a}");
            assert!(rdp(q, sigma, a).unwrap() >= 0.0);
        }
        // The usual regime still stops on the relative rule, far before MAX_TERMS.
        assert!(log_a_frac(0.004, 1.3, 1.5).unwrap().1 < 10_000);
    }

    #[test]
    fn bad_parameters_are_named() {
        assert!(rdp(1.5, 1.0, 2.0).unwrap_err().to_string().contains("sample rate"));
        assert!(rdp(0.1, 0.0, 2.0).unwrap_err().to_string().contains("sigma"));
        assert!(rdp(0.1, 1.0, 1.0).unwrap_err().to_string().contains("order"));
        assert!(rdp(f64::NAN, 1.0, 2.0).is_err());
    }
}
