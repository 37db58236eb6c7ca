//! Numerical building blocks for exact accounting: the standard normal CDF computed from
//! `erfc` (accurate in the far tails that small δ lives in), IEEE rounding in a chosen
//! direction, and a bracketing root finder with a stated tolerance.
//!
//! Everything here is `f64`. Privacy arithmetic rounds so that the privacy loss it
//! reports is over-, never under-stated: callers pick [`add_up`] / [`sub_down`] and the
//! conservative end of a bracket.

/// The safety margin of every forward computation of a privacy loss (ε, δ, a filter's or an
/// odometer's bound): 2⁻⁴⁶ ≈ 1.4e-14, i.e. 128 units in the last place. A result is
/// reported as `computed + ROUNDING_MARGIN × magnitude` (see [`with_margin`]), where the
/// magnitude bounds the sum of the absolute values of the terms the computation adds up,
/// each weighted by its condition number; the error analyses in [`crate::convert`] show that
/// the actual rounding error is at most about 8 units in the last place of that magnitude, so
/// the margin covers it 16 times over, and the reported value is never below the exact one.
pub const ROUNDING_MARGIN: f64 = 1.0 / (1u64 << 46) as f64;

/// `value + ROUNDING_MARGIN · magnitude`, rounded up (NaN stays NaN, +∞ stays +∞).
#[must_use]
pub fn with_margin(value: f64, magnitude: f64) -> f64 {
    add_up(value, mul_up(ROUNDING_MARGIN, magnitude.abs()))
}

/// Relative tolerance of every inverse solved by [`largest_where`]/[`smallest_where`]:
/// the returned point is within this relative distance of the exact threshold.
pub const SOLVE_REL_TOL: f64 = 1e-13;

/// Standard normal CDF Φ(x) = erfc(−x/√2)/2.
///
/// Computed from the complementary error function so that Φ(x) for very negative x
/// (δ down to 1e-300) keeps full relative precision instead of cancelling as `1 − Φ(−x)`.
#[must_use]
pub fn normal_cdf(x: f64) -> f64 {
    0.5 * libm::erfc(-x / std::f64::consts::SQRT_2)
}

/// ln Φ(x), accurate where Φ(x) itself underflows: for x ≥ −30 it is `ln(normal_cdf(x))`
/// (Φ(−30) ≈ 5e-198 is far from underflow); below, Φ(x) = φ(x)·R(−x) with the Mills ratio R
/// from its continued fraction R(t) = 1/(t + 1/(t + 2/(t + 3/(t + …)))), evaluated to depth
/// 40 (for t ≥ 30 the truncation error is far below an ulp). Relative error about |x|²/2
/// ulps, the condition number of ln Φ at x; −∞ for x = −∞, NaN for NaN.
#[must_use]
pub fn log_normal_cdf(x: f64) -> f64 {
    if x.is_nan() || x >= -30.0 {
        return normal_cdf(x).ln();
    }
    if x == f64::NEG_INFINITY {
        return x;
    }
    let t = -x;
    let mut level = t;
    for k in (1..=40).rev() {
        level = t + f64::from(k) / level;
    }
    // ln φ(x) − ln(level) with φ(x) = exp(−x²/2)/√(2π).
    -0.5 * x * x - 0.5 * (2.0 * std::f64::consts::PI).ln() - level.ln()
}

/// `a + b` rounded towards +∞ (never below the exact sum), via the TwoSum error term.
#[must_use]
pub fn add_up(a: f64, b: f64) -> f64 {
    let s = a + b;
    if !s.is_finite() {
        return s;
    }
    let bb = s - a;
    let err = (a - (s - bb)) + (b - bb);
    if err > 0.0 { s.next_up() } else { s }
}

/// `a − b` rounded towards −∞ (never above the exact difference).
#[must_use]
pub fn sub_down(a: f64, b: f64) -> f64 {
    let d = a - b;
    if !d.is_finite() {
        return d;
    }
    let bb = d - a; // ≈ −b
    let err = (a - (d - bb)) + (-b - bb);
    if err < 0.0 { d.next_down() } else { d }
}

/// Below this magnitude an FMA residual can underflow to 0 and lose its sign, so the
/// directed operations round up unconditionally (by one ulp of a tiny number).
const TINY: f64 = f64::MIN_POSITIVE * (1u64 << 54) as f64;

/// `a · b` rounded towards +∞ (never below the exact product), via the exact FMA residual.
/// A nonzero product below about 4e-292 (where the residual may underflow) is rounded up by
/// one ulp unconditionally.
#[must_use]
pub fn mul_up(a: f64, b: f64) -> f64 {
    let p = a * b;
    if !p.is_finite() || a == 0.0 || b == 0.0 {
        return p;
    }
    if p.abs() < TINY {
        return p.next_up();
    }
    if a.mul_add(b, -p) > 0.0 { p.next_up() } else { p }
}

/// `a / b` rounded towards +∞ for `b > 0` (never below the exact quotient). A nonzero
/// quotient below about 4e-292 is rounded up by one ulp unconditionally.
#[must_use]
pub fn div_up(a: f64, b: f64) -> f64 {
    let q = a / b;
    if !q.is_finite() || b <= 0.0 || a == 0.0 {
        return q;
    }
    if q.abs() < TINY {
        return q.next_up();
    }
    // a − q·b exactly: positive means q is below the exact quotient.
    if (-q).mul_add(b, a) > 0.0 { q.next_up() } else { q }
}

/// `a·b` rounded towards −∞ for a, b ≥ 0 (never above the exact product; below about 4e-292
/// it is rounded down by one ulp unconditionally).
#[must_use]
pub fn mul_down(a: f64, b: f64) -> f64 {
    let p = a * b;
    if !p.is_finite() || p == 0.0 {
        return p;
    }
    if p < TINY {
        return p.next_down().max(0.0);
    }
    if a.mul_add(b, -p) < 0.0 { p.next_down() } else { p }
}

/// `a/b` rounded towards −∞ for a ≥ 0, b > 0 (never above the exact quotient).
#[must_use]
pub fn div_down(a: f64, b: f64) -> f64 {
    let q = a / b;
    if !q.is_finite() || b <= 0.0 || a == 0.0 {
        return q;
    }
    if q < TINY {
        return q.next_down().max(0.0);
    }
    // a − q·b exactly: negative means q is above the exact quotient.
    if (-q).mul_add(b, a) < 0.0 { q.next_down() } else { q }
}

/// `√x` rounded towards +∞ (never below the exact root). For x below about 4e-292 the root
/// is rounded up by one ulp unconditionally.
#[must_use]
pub fn sqrt_up(x: f64) -> f64 {
    let r = x.sqrt();
    if !r.is_finite() || x == 0.0 {
        return r;
    }
    if x < TINY {
        return r.next_up();
    }
    if r.mul_add(r, -x) < 0.0 { r.next_up() } else { r }
}

/// At most this many bracket expansions (or contractions) before [`largest_where`] /
/// [`smallest_where`] give up: enough to walk a bracket across the whole range of finite
/// doubles (about 2 × 1075 doublings), so that only a threshold that is not a finite number
/// exhausts it.
pub const MAX_BRACKET_STEPS: usize = 2200;

/// At most this many bisection steps: halving any bracket of finite doubles down to adjacent
/// doubles takes fewer; [`SOLVE_REL_TOL`] stops far sooner (about 45 steps).
pub const MAX_BISECTION_STEPS: usize = 2200;

/// The largest `x` in `[lo, ∞)` with `holds(x)`, for a predicate that is true on `[lo, x*]`
/// and false above `x*` (a monotone threshold).
///
/// The bracket `[lo, hi]` is grown (its width doubling each time) until `holds(hi)` fails,
/// then bisected until `hi − lo ≤ SOLVE_REL_TOL · max(|lo|, |hi|)`. The *lower* end is
/// returned, so the answer always satisfies the predicate: when the predicate is "this ρ
/// gives at most the target ε", the answer never overstates the budget.
///
/// Returns `None` when the bracket is not usable (`lo`, `hi` not finite, `hi ≤ lo`, or
/// `holds(lo)` false) or when no failing point is found below `f64::MAX` within
/// [`MAX_BRACKET_STEPS`] expansions (the threshold is not a finite number). Never loops more
/// than `MAX_BRACKET_STEPS + MAX_BISECTION_STEPS` times.
pub fn largest_where(mut lo: f64, mut hi: f64, holds: impl Fn(f64) -> bool) -> Option<f64> {
    if !(lo.is_finite() && hi.is_finite() && hi > lo && holds(lo)) {
        return None;
    }
    let mut width = hi - lo;
    for _ in 0..MAX_BRACKET_STEPS {
        if !holds(hi) {
            return Some(bisect(lo, hi, holds).0);
        }
        lo = hi;
        width *= 2.0;
        // Grow at least geometrically in magnitude, so that a tiny first bracket far from 0
        // still reaches f64::MAX within the step budget.
        hi = (lo + width).max(if lo > 0.0 { 2.0 * lo } else { lo + width });
        if !hi.is_finite() {
            return None;
        }
    }
    None
}

/// The smallest `x` in `(0, hi]` with `holds(x)`, for a predicate false on `(0, x*)` and true
/// on `[x*, ∞)`. The bracket is shrunk geometrically from `lo` until `holds(lo)` fails (or
/// `lo` reaches the smallest positive normal number, which is then returned), then bisected;
/// the *upper* end is returned, so the answer satisfies the predicate.
///
/// Returns NaN — no answer — when the bracket is not usable: `lo`, `hi` not finite,
/// `lo ≤ 0`, `hi ≤ lo`, or `holds(hi)` false. Never loops more than
/// `MAX_BRACKET_STEPS + MAX_BISECTION_STEPS` times.
pub fn smallest_where(mut lo: f64, mut hi: f64, holds: impl Fn(f64) -> bool) -> f64 {
    if !(lo.is_finite() && hi.is_finite() && lo > 0.0 && hi > lo && holds(hi)) {
        return f64::NAN;
    }
    for _ in 0..MAX_BRACKET_STEPS {
        if !holds(lo) {
            return bisect(lo, hi, |x| !holds(x)).1;
        }
        hi = lo;
        lo *= 0.5;
        if lo < f64::MIN_POSITIVE {
            return hi;
        }
    }
    // Unreachable in practice: halving a finite positive number reaches MIN_POSITIVE within
    // about 2100 steps. `hi` satisfies the predicate, so it is still a safe answer.
    hi
}

/// Bisects a bracket where `holds(lo)` and `!holds(hi)`, returning the final `(lo, hi)`.
fn bisect(mut lo: f64, mut hi: f64, holds: impl Fn(f64) -> bool) -> (f64, f64) {
    for _ in 0..MAX_BISECTION_STEPS {
        if hi - lo <= SOLVE_REL_TOL * hi.abs().max(lo.abs()) {
            break;
        }
        let mid = lo + 0.5 * (hi - lo);
        // Also stops on adjacent doubles and on a NaN bracket (every comparison is false).
        if !(mid > lo && mid < hi) {
            break;
        }
        if holds(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    (lo, hi)
}

/// The root of a strictly increasing continuous `f` on `(lo, hi)` with `f(lo) < 0 < f(hi)`,
/// to relative tolerance [`SOLVE_REL_TOL`] (the midpoint of the final bracket). Returns NaN
/// if `lo`, `hi` are not finite with `lo < hi`.
pub fn increasing_root(lo: f64, hi: f64, f: impl Fn(f64) -> f64) -> f64 {
    if !(lo.is_finite() && hi.is_finite() && lo < hi) {
        return f64::NAN;
    }
    let (a, b) = bisect(lo, hi, |x| f(x) < 0.0);
    0.5 * (a + b)
}

/// The point closest to `x0` on the side `up` (larger if `true`, smaller if `false`) where
/// `ok` holds, for a predicate that holds from some point near `x0` onwards in that direction.
///
/// Used to confirm an inverse computed in closed form or by a solver with the forward
/// computation exactly as users call it: `x0` is tried first, then steps of 4, 8, 16, …
/// ulps-relative away from it (at most 60 of them, up to a relative distance of about 1e3),
/// and the last bracket is bisected so the answer is as close to the threshold as
/// [`SOLVE_REL_TOL`] allows. The answer always satisfies `ok`; `None` if no tried point does.
pub fn confirm(x0: f64, up: bool, ok: impl Fn(f64) -> bool) -> Option<f64> {
    if !x0.is_finite() {
        return None;
    }
    if ok(x0) {
        return Some(x0);
    }
    let mut failing = x0;
    let mut step = 4.0 * f64::EPSILON;
    for _ in 0..60 {
        let x = if up { x0 * (1.0 + step) } else { x0 * (1.0 - step).max(0.0) };
        if !x.is_finite() {
            return None;
        }
        if ok(x) {
            let (a, b) = if up { (failing, x) } else { (x, failing) };
            // Bisect the bracket keeping the end where `ok` holds.
            let (lo, hi) = bisect(a, b, |t| if up { !ok(t) } else { ok(t) });
            return Some(if up { hi } else { lo });
        }
        failing = x;
        step *= 2.0;
    }
    None
}

/// `x / 2` rounded towards +∞: exact unless `x` is subnormal, where halving can round down.
#[must_use]
pub fn half_up(x: f64) -> f64 {
    div_up(x, 2.0)
}

/// `n` as an `f64`, rounded towards +∞ (`u64` values above 2⁵³ are not all representable).
#[must_use]
pub fn u64_up(n: u64) -> f64 {
    let f = n as f64;
    // `f as u64` saturates at u64::MAX, which is ≥ n, so the comparison is exact.
    if (f as u64) < n { f.next_up() } else { f }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normal_cdf_matches_reference_values() {
        // Φ at special points; tails from mpmath (50 digits), see tests/reference/accounting_refs.py.
        assert_eq!(normal_cdf(0.0), 0.5);
        let cases = [
            (1.0, 0.841_344_746_068_542_9),
            (-1.0, 0.158_655_253_931_457_05),
            (-5.0, 2.866_515_718_791_939e-7),
            (-10.0, 7.619_853_024_160_527e-24),
            (-20.0, 2.753_624_118_606_233_6e-89),
        ];
        for (x, want) in cases {
            let got = normal_cdf(x);
            assert!(((got - want) / want).abs() < 1e-13, "Φ({x}) = {got}, want {want}");
            let got = log_normal_cdf(x);
            assert!(((got - want.ln()) / want.ln()).abs() < 1e-14, "ln Φ({x}) = {got}, want {}", want.ln());
        }
        // Beyond underflow (mpmath, 50 digits): ln Φ(−38.37), ln Φ(−100), ln Φ(−1e5).
        for (x, want) in
            [(-38.37, -740.695_342_517_212_5), (-100.0, -5_005.524_208_694_205), (-1e5, -5_000_000_012.431_864)]
        {
            let got = log_normal_cdf(x);
            assert!(((got - want) / want).abs() < 1e-15, "ln Φ({x}) = {got}, want {want}");
        }
        assert_eq!(log_normal_cdf(f64::NEG_INFINITY), f64::NEG_INFINITY);
        assert!(log_normal_cdf(f64::NAN).is_nan());
    }

    #[test]
    fn directed_rounding_brackets_the_exact_result() {
        let (a, b) = (0.1, 0.2); // 0.1 + 0.2 rounds up to 0.30000000000000004 already
        assert!(add_up(a, b) >= a + b);
        let (a, b) = (1.0, 1e-17); // exact sum is above 1.0: must round up
        assert_eq!(add_up(a, b), 1.0f64.next_up());
        assert_eq!(sub_down(1.0, 1e-17), 1.0f64.next_down());
        assert_eq!(add_up(2.0, 3.0), 5.0);
        assert_eq!(sub_down(5.0, 3.0), 2.0);
    }

    #[test]
    fn downward_products_and_quotients_never_overshoot() {
        for (a, b) in [(0.1, 0.3), (1.0 / 3.0, 3.0), (7.0, 1e-17), (2.0, 8.0), (1.3, 1.3)] {
            let p = mul_down(a, b);
            assert!(p <= a * b && p.next_up() >= a * b);
            assert!(a.mul_add(b, -p) >= 0.0, "{a}·{b} rounded above the exact product");
            let q = div_down(a, b);
            assert!((-q).mul_add(b, a) >= 0.0, "{a}/{b} rounded above the exact quotient");
        }
        assert_eq!((mul_down(8.0, 8.0), div_down(3.0, 2.0)), (64.0, 1.5));
        assert_eq!(mul_down(1e-200, 1e-200), 0.0);
    }

    #[test]
    fn upward_products_quotients_and_roots_never_undershoot() {
        for (a, b) in [(0.1, 0.3), (1.0 / 3.0, 3.0), (7.0, 1e-17), (2.0, 8.0)] {
            let p = mul_up(a, b);
            assert!(p >= a * b && p.next_down() <= a * b);
            assert!(a.mul_add(b, -p) <= 0.0, "{a}·{b} rounded below the exact product");
            let q = div_up(a, b);
            assert!((-q).mul_add(b, a) <= 0.0, "{a}/{b} rounded below the exact quotient");
        }
        for x in [2.0, 0.1, 1e-300, 3.0, 1e300] {
            let r = sqrt_up(x);
            assert!(r.mul_add(r, -x) >= 0.0, "√{x} rounded below the exact root");
            assert!(r.next_down().mul_add(r.next_down(), -x) < 0.0 || r == x.sqrt());
        }
        assert_eq!(sqrt_up(4.0), 2.0);
        assert_eq!(mul_up(2.0, 3.0), 6.0);
        assert_eq!(half_up(f64::from_bits(1)), f64::from_bits(1), "half the smallest subnormal rounds up");
        assert_eq!(half_up(3.0), 1.5);
        assert_eq!(with_margin(1.0, 1.0), 1.0 + ROUNDING_MARGIN);
        assert!(with_margin(0.0, 1e-300) > 0.0);
        assert!(with_margin(f64::NAN, 1.0).is_nan());
        // Products and quotients that underflow still round up (the FMA residual underflows too).
        let tiny = f64::from_bits(1);
        assert_eq!(mul_up(tiny, tiny), tiny);
        assert_eq!(mul_up(1e-200, 1e-200), tiny);
        assert_eq!(div_up(1e-200, 1e200), tiny);
        assert_eq!(mul_up(0.0, 1e-300), 0.0);
        assert!(sqrt_up(tiny) >= tiny.sqrt());
        assert_eq!(u64_up(u64::MAX), 2f64.powi(64));
        assert_eq!(u64_up((1 << 53) + 1), ((1u64 << 53) as f64).next_up());
        assert_eq!(u64_up(7), 7.0);
    }

    #[test]
    fn largest_where_returns_the_safe_side_of_the_threshold() {
        let t = std::f64::consts::PI;
        let x = largest_where(0.0, 1.0, |x| x * x <= t).unwrap();
        assert!(x * x <= t);
        assert!((x - t.sqrt()).abs() <= 1e-12 * t.sqrt());
        assert!(largest_where(0.0, 1.0, |_| true).is_none());
        // Unusable brackets are refused instead of looping.
        assert!(largest_where(-1.0, 0.0, |_| true).is_none(), "a bracket ending at 0 used to loop forever");
        assert!(largest_where(0.0, 0.0, |_| true).is_none());
        assert!(largest_where(f64::NAN, 1.0, |_| true).is_none());
        assert!(largest_where(0.0, 1.0, |_| false).is_none());
        let x = largest_where(-3.0, -2.0, |x| x <= 5.0).unwrap();
        assert!((x - 5.0).abs() < 1e-12);
    }

    #[test]
    fn smallest_where_returns_the_safe_side_of_the_threshold() {
        let x = smallest_where(1.0, 2.0, |x| x >= 1e-3);
        assert!((1e-3..=1e-3 * (1.0 + 1e-12)).contains(&x));
        assert!(smallest_where(f64::NAN, 1.0, |_| true).is_nan(), "a NaN bracket used to loop forever");
        assert!(smallest_where(1.0, 2.0, |_| false).is_nan());
        assert_eq!(smallest_where(1.0, 2.0, |_| true), f64::MIN_POSITIVE);
        assert!(increasing_root(f64::NAN, 1.0, |x| x).is_nan());
        // confirm: the closest point on the requested side, always satisfying the predicate.
        let up = confirm(1.0, true, |x| x >= 1.0 + 1e-9).unwrap();
        assert!((1.0 + 1e-9..=1.0 + 1.1e-9).contains(&up), "{up}");
        let down = confirm(1.0, false, |x| x <= 1.0 - 1e-9).unwrap();
        assert!((1.0 - 1.1e-9..=1.0 - 1e-9).contains(&down), "{down}");
        assert_eq!(confirm(2.0, true, |_| true), Some(2.0));
        assert_eq!(confirm(2.0, true, |_| false), None);
        assert_eq!(confirm(f64::NAN, true, |_| true), None);
        let r = increasing_root(0.0, 10.0, |x| x * x - 2.0);
        assert!((r - 2f64.sqrt()).abs() < 1e-12);
    }
}
