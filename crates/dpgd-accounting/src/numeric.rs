//! Numerical building blocks for exact accounting: the standard normal CDF computed from
//! `erfc` (accurate in the far tails that small δ lives in), IEEE rounding in a chosen
//! direction, and a bracketing root finder with a stated tolerance.
//!
//! Everything here is `f64`. Privacy arithmetic rounds so that the privacy loss it
//! reports is over-, never under-stated: callers pick [`add_up`] / [`sub_down`] and the
//! conservative end of a bracket.

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

/// `a · b` rounded towards +∞ (never below the exact product), via the exact FMA residual.
#[must_use]
pub fn mul_up(a: f64, b: f64) -> f64 {
    let p = a * b;
    if !p.is_finite() {
        return p;
    }
    if a.mul_add(b, -p) > 0.0 { p.next_up() } else { p }
}

/// `a / b` rounded towards +∞ for `b > 0` (never below the exact quotient).
#[must_use]
pub fn div_up(a: f64, b: f64) -> f64 {
    let q = a / b;
    if !q.is_finite() || b <= 0.0 {
        return q;
    }
    // a − q·b exactly: positive means q is below the exact quotient.
    if (-q).mul_add(b, a) > 0.0 { q.next_up() } else { q }
}

/// `√x` rounded towards +∞ (never below the exact root).
#[must_use]
pub fn sqrt_up(x: f64) -> f64 {
    let r = x.sqrt();
    if !r.is_finite() {
        return r;
    }
    if r.mul_add(r, -x) < 0.0 { r.next_up() } else { r }
}

/// The largest `x` in `[lo, ∞)` with `holds(x)`, for a predicate that is true on `[lo, x*]`
/// and false above `x*` (a monotone threshold). `holds(lo)` must be true.
///
/// The bracket is grown geometrically from `hi` until `holds(hi)` fails, then bisected until
/// `hi − lo ≤ SOLVE_REL_TOL · hi`. The *lower* end is returned, so the answer always
/// satisfies the predicate: when the predicate is "this ρ gives at most the target ε", the
/// answer never overstates the budget. Returns `None` if no failing point is found below
/// `f64::MAX` (the threshold is infinite).
pub fn largest_where(mut lo: f64, mut hi: f64, holds: impl Fn(f64) -> bool) -> Option<f64> {
    debug_assert!(hi > lo && holds(lo));
    while holds(hi) {
        lo = hi;
        hi *= 2.0;
        if !hi.is_finite() {
            return None;
        }
    }
    Some(bisect(lo, hi, holds).0)
}

/// The smallest `x` in `(0, hi]` with `holds(x)`, for a predicate false on `(0, x*)` and true
/// on `[x*, ∞)`. `holds(hi)` must be true. The bracket is shrunk geometrically from `lo`
/// until `holds(lo)` fails (or `lo` reaches the smallest positive normal number, which is
/// then returned), then bisected; the *upper* end is returned, so the answer satisfies the
/// predicate.
pub fn smallest_where(mut lo: f64, mut hi: f64, holds: impl Fn(f64) -> bool) -> f64 {
    debug_assert!(hi > lo && lo > 0.0 && holds(hi));
    while holds(lo) {
        hi = lo;
        lo *= 0.5;
        if lo < f64::MIN_POSITIVE {
            return hi;
        }
    }
    bisect(lo, hi, |x| !holds(x)).1
}

/// Bisects a bracket where `holds(lo)` and `!holds(hi)`, returning the final `(lo, hi)`.
fn bisect(mut lo: f64, mut hi: f64, holds: impl Fn(f64) -> bool) -> (f64, f64) {
    // 2000 halvings cover any bracket of finite doubles; the tolerance stops far sooner.
    for _ in 0..2000 {
        if hi - lo <= SOLVE_REL_TOL * hi.abs().max(lo.abs()) {
            break;
        }
        let mid = lo + 0.5 * (hi - lo);
        if mid <= lo || mid >= hi {
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
/// to relative tolerance [`SOLVE_REL_TOL`] (the midpoint of the final bracket).
pub fn increasing_root(lo: f64, hi: f64, f: impl Fn(f64) -> f64) -> f64 {
    let (a, b) = bisect(lo, hi, |x| f(x) < 0.0);
    0.5 * (a + b)
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
        }
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
    }

    #[test]
    fn largest_where_returns_the_safe_side_of_the_threshold() {
        let t = std::f64::consts::PI;
        let x = largest_where(0.0, 1.0, |x| x * x <= t).unwrap();
        assert!(x * x <= t);
        assert!((x - t.sqrt()).abs() <= 1e-12 * t.sqrt());
        assert!(largest_where(0.0, 1.0, |_| true).is_none());
    }

    #[test]
    fn smallest_where_returns_the_safe_side_of_the_threshold() {
        let x = smallest_where(1.0, 2.0, |x| x >= 1e-3);
        assert!((1e-3..=1e-3 * (1.0 + 1e-12)).contains(&x));
        let r = increasing_root(0.0, 10.0, |x| x * x - 2.0);
        assert!((r - 2f64.sqrt()).abs() < 1e-12);
    }
}
