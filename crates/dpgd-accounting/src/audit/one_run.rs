//! One-run audits: a lower bound on ε from a single run of a mechanism with m canaries, each
//! included independently with probability ½ ([SNJ23]).
//!
//! **The game.** The auditor knows which canaries were included only through a public coin it
//! keeps to itself; after the run it scores every canary from the output, guesses "in" for the
//! highest scores and "out" for the lowest (abstaining on the rest), and counts its correct
//! guesses. [SNJ23, Theorem 3.1]: if the mechanism is (ε, δ)-DP with respect to each canary's
//! inclusion, the number W of correct guesses among r guesses satisfies, for every v,
//!
//! P[W ≥ v] ≤ f(v) + 2mδ · max_{1 ≤ i ≤ v} (f(v − i) − f(v))/i,  f(x) = P[Binomial(r, e^ε/(1 + e^ε)) ≥ x],
//!
//! the p-value ([`p_value`]) of the claim "(ε, δ)-DP" after v correct guesses. The audit's
//! lower bound ([`epsilon_lower_bound`]) is the largest ε whose claim that p-value rejects at
//! level 1 − confidence: a mechanism claimed (ε', δ)-DP with ε' below it is refuted with that
//! confidence. A mechanism's claim is tested once per pre-registered number of guesses
//! ([`audit_guesses`]), each at its share of 1 − confidence (a union bound), so the best of them
//! holds at the stated confidence.
//!
//! Everything here is plain `f64` arithmetic; the binomial tails are the exact sums of
//! [`super`]'s saddle-point terms. **Rounding contract**: every p-value is rounded *up* (by a
//! relative 10⁻⁹, far above the tails' relative error of about 10⁻¹³), and every lower bound is
//! the lower end of its bisection, so it is never above the exact one.
//!
//! ```
//! use dpgd_accounting::audit::one_run::{Guesses, epsilon_lower_bound};
//! // 1,000 canaries; 100 guesses, all correct: no mechanism at ε below the bound admits that
//! // with probability 5% (δ = 0 ⇒ P[W = r] ≤ (e^ε/(1 + e^ε))^r).
//! let bound = epsilon_lower_bound(Guesses { canaries: 1000, guesses: 100, correct: 100 }, 0.0, 0.95).unwrap();
//! let x = 0.05f64.powf(0.01); // (e^ε/(1 + e^ε))^100 = 0.05
//! let exact = (x / (1.0 - x)).ln();
//! assert!(bound <= exact && exact - bound < 1e-6, "{bound} vs {exact}");
//! ```
//!
//! [SNJ23]: https://arxiv.org/abs/2305.08846

use super::{binomial_sf, ln_binomial_pmf};
use crate::error::{AccountingError, Result};

/// At most this many canaries (the p-value's sums are linear in the number of guesses).
pub const MAX_CANARIES: u64 = 100_000_000;

/// The p-value is raised by this relative margin (the tails are accurate to about 1e-13).
const P_MARGIN: f64 = 1e-9;

/// What an auditor guessed: `correct` right out of `guesses` (the rest abstained), among
/// `canaries` each included with probability ½.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Guesses {
    /// m, the canaries in the game.
    pub canaries: u64,
    /// r ≤ m, the guesses made.
    pub guesses: u64,
    /// v ≤ r, the correct ones.
    pub correct: u64,
}

impl Guesses {
    pub(crate) fn check(self) -> Result<Self> {
        let bad =
            |name, value: u64, expected| Err(AccountingError::InvalidParameter { name, value: value as f64, expected });
        if self.canaries == 0 || self.canaries > MAX_CANARIES {
            return bad("canaries", self.canaries, "between 1 and 1e8 canaries");
        }
        if self.guesses > self.canaries {
            return bad("guesses", self.guesses, "at most one guess per canary");
        }
        if self.correct > self.guesses {
            return bad("correct", self.correct, "at most the number of guesses");
        }
        Ok(self)
    }
}

fn check_delta(delta: f64) -> Result<f64> {
    if (0.0..1.0).contains(&delta) {
        Ok(delta)
    } else {
        Err(AccountingError::InvalidParameter { name: "delta", value: delta, expected: "a δ in [0, 1)" })
    }
}

/// The p-value of `g` under the claim "(ε, δ)-DP with respect to each canary" ([SNJ23,
/// Theorem 3.1], see the [module](self)), rounded up and at most 1.
///
/// # Errors
/// [`AccountingError::InvalidParameter`] naming `canaries`, `guesses` or `correct` (out of
/// range), `epsilon` (negative or NaN) or `delta` (not in [0, 1)).
///
/// [SNJ23]: https://arxiv.org/abs/2305.08846
pub fn p_value(g: Guesses, epsilon: f64, delta: f64) -> Result<f64> {
    let Guesses { canaries: m, guesses: r, correct: v } = g.check()?;
    check_delta(delta)?;
    if epsilon.is_nan() || epsilon < 0.0 {
        return Err(AccountingError::InvalidParameter {
            name: "epsilon",
            value: epsilon,
            expected: "a non-negative ε",
        });
    }
    if v == 0 {
        return Ok(1.0);
    }
    // q = e^ε/(1 + e^ε), the accuracy of ε-DP randomized response.
    let q = 1.0 / (1.0 + (-epsilon).exp());
    let tail = binomial_sf(v, r, q);
    let delta_term = if delta > 0.0 { 2.0 * m as f64 * delta * largest_slope(v, r, q) } else { 0.0 };
    Ok(((tail + delta_term) * (1.0 + P_MARGIN)).min(1.0))
}

/// max over 1 ≤ i ≤ v of P[v − i ≤ Binomial(r, q) < v]/i: the partial sums grow by the pmf at
/// v − i; once the terms are negligible (past the mode) the ratio only falls, so the loop stops.
fn largest_slope(v: u64, r: u64, q: f64) -> f64 {
    let (mut sum, mut best, mut previous) = (0.0f64, 0.0f64, 0.0f64);
    for i in 1..=v {
        let term = ln_binomial_pmf(v - i, r, q).exp();
        sum += term;
        best = best.max(sum / i as f64);
        // Past the mode (terms falling) and negligible: sum/i only decreases from here.
        if term < previous && term < 1e-18 * sum {
            break;
        }
        previous = term;
    }
    best
}

/// The largest ε that `g` refutes at `confidence` (0 if none): every claim "(ε', δ)-DP" with ε'
/// below it has a p-value below 1 − confidence ([`p_value`]). The lower end of a bisection to
/// 1e-9, so never above the exact bound.
///
/// # Errors
/// As [`p_value`]; `confidence` not strictly between 0 and 1.
pub fn epsilon_lower_bound(g: Guesses, delta: f64, confidence: f64) -> Result<f64> {
    if !(confidence > 0.0 && confidence < 1.0) {
        return Err(AccountingError::InvalidParameter {
            name: "confidence",
            value: confidence,
            expected: "a level strictly between 0 and 1, e.g. 0.95",
        });
    }
    let level = 1.0 - confidence;
    let rejects = |eps: f64| p_value(g, eps, delta).map(|p| p < level);
    if !rejects(0.0)? {
        return Ok(0.0);
    }
    // P[W ≥ v] ≤ 1 bounds ε: at ε = 60, q = 1 − 9e-27 and f(v) rounds to 1 for r ≤ 1e8.
    let (mut lo, mut hi) = (0.0, 1.0);
    while rejects(hi)? {
        lo = hi;
        hi *= 2.0;
        if hi > 64.0 {
            return Ok(lo);
        }
    }
    while hi - lo > 1e-9 {
        let mid = 0.5 * (lo + hi);
        if rejects(mid)? {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(lo)
}

/// The guesses of an auditor who says "in" for the `guesses / 2` highest of `scores` and "out"
/// for the `guesses − guesses / 2` lowest (ties broken by index, a choice made before the scores
/// are seen), scored against `included` (one flag per canary).
///
/// # Errors
/// [`AccountingError::InvalidParameter`] naming `scores` (a NaN, or not one per flag) or
/// `guesses` (more than the canaries).
pub fn guess(scores: &[f64], included: &[bool], guesses: usize) -> Result<Guesses> {
    if scores.len() != included.len() || scores.iter().any(|s| s.is_nan()) {
        return Err(AccountingError::InvalidParameter {
            name: "scores",
            value: scores.len() as f64,
            expected: "one score per canary, none NaN",
        });
    }
    if guesses > scores.len() {
        return Err(AccountingError::InvalidParameter {
            name: "guesses",
            value: guesses as f64,
            expected: "at most one guess per canary",
        });
    }
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[a].total_cmp(&scores[b]).then(a.cmp(&b)));
    let out = guesses - guesses / 2;
    let correct_out = order[..out].iter().filter(|&&i| !included[i]).count();
    let correct_in = order[order.len() - guesses / 2..].iter().filter(|&&i| included[i]).count();
    Ok(Guesses { canaries: scores.len() as u64, guesses: guesses as u64, correct: (correct_out + correct_in) as u64 })
}

/// One audit of a run's canaries: the best of the pre-registered tests.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct OneRunBound {
    /// The lower bound on ε at `delta`, holding with probability `confidence` (the best test's).
    pub epsilon_lower: f64,
    /// The δ of the bound.
    pub delta: f64,
    /// The joint confidence.
    pub confidence: f64,
    /// Every test: its guesses and the bound it gives at its share of 1 − confidence.
    pub tests: Vec<(Guesses, f64)>,
}

/// The share of the canaries each pre-registered test guesses on (at least 2 guesses each).
pub const GUESS_SHARES: [f64; 6] = [0.02, 0.05, 0.1, 0.2, 0.5, 1.0];

/// Audits one run from each canary's `scores` (higher: more likely included) and the coin
/// `included`: one test per share of [`GUESS_SHARES`], each at level (1 − confidence)/6, and
/// the best bound (a union bound keeps the stated confidence).
///
/// # Errors
/// As [`guess`] and [`epsilon_lower_bound`]; fewer than 2 canaries.
pub fn audit_guesses(scores: &[f64], included: &[bool], delta: f64, confidence: f64) -> Result<OneRunBound> {
    if scores.len() < 2 {
        return Err(AccountingError::InvalidParameter {
            name: "canaries",
            value: scores.len() as f64,
            expected: "at least 2 canaries",
        });
    }
    let each = 1.0 - (1.0 - confidence) / GUESS_SHARES.len() as f64;
    let mut tests = Vec::new();
    let mut rs: Vec<usize> =
        GUESS_SHARES.iter().map(|s| ((s * scores.len() as f64).round() as usize).clamp(2, scores.len())).collect();
    rs.dedup();
    for r in rs {
        let g = guess(scores, included, r)?;
        tests.push((g, epsilon_lower_bound(g, delta, each)?));
    }
    let epsilon_lower = tests.iter().map(|t| t.1).fold(0.0, f64::max);
    Ok(OneRunBound { epsilon_lower, delta, confidence, tests })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(canaries: u64, guesses: u64, correct: u64) -> Guesses {
        Guesses { canaries, guesses, correct }
    }

    /// At δ = 0 and all r guesses right, the p-value is q^r exactly: the bound solves
    /// (e^ε/(1 + e^ε))^r = β, i.e. ε = ln(β^{1/r}/(1 − β^{1/r})).
    #[test]
    fn all_correct_without_delta_is_randomized_response() {
        for r in [10u64, 100, 1000] {
            let b = epsilon_lower_bound(g(1000, r, r), 0.0, 0.95).unwrap();
            let x = 0.05f64.powf(1.0 / r as f64);
            let exact = (x / (1.0 - x)).ln();
            assert!(b <= exact && exact - b < 1e-6, "r = {r}: {b} vs {exact}");
        }
    }

    /// Against an independent implementation of [SNJ23]'s p-value with scipy's binomial (the
    /// script and its output: `experiments/audit/one_run_reference.py`).
    #[test]
    fn p_values_and_bounds_match_an_independent_implementation() {
        let p = [
            ((1000, 100, 90, 1.0, 1e-5), 0.000_841_288_561_438_530_5),
            ((1000, 1000, 700, 0.5, 1e-5), 0.000_186_755_586_798_042_92),
            ((10000, 200, 190, 2.0, 1e-6), 0.001_627_331_621_556_926_7),
            ((500, 50, 45, 3.0, 1e-3), 0.991_024_868_029_385_3),
        ];
        for ((m, r, v, eps, d), want) in p {
            let got = p_value(g(m, r, v), eps, d).unwrap();
            assert!(got >= want && (got - want) / want < 1e-8, "p({m}, {r}, {v}, {eps}, {d}) = {got}, want {want}");
        }
        let b = [
            ((1000, 100, 90, 1e-5, 0.05), 1.626_143_480_695_726_2),
            ((1000, 1000, 700, 1e-5, 0.05), 0.731_740_449_418_691_9),
            ((10000, 200, 190, 1e-6, 0.01), 2.205_046_059_214_146_3),
            ((500, 50, 45, 1e-3, 0.05), 0.482_689_913_004_928_8),
            ((1000, 20, 20, 1e-5, 0.05 / 6.0), 1.214_692_657_574_992_8),
        ];
        for ((m, r, v, d, level), want) in b {
            let got = epsilon_lower_bound(g(m, r, v), d, 1.0 - level).unwrap();
            assert!(got <= want && want - got < 1e-6, "bound({m}, {r}, {v}, {d}, {level}) = {got}, want {want}");
        }
    }

    #[test]
    fn half_right_refutes_nothing_and_bad_inputs_are_named() {
        assert_eq!(epsilon_lower_bound(g(1000, 100, 50), 1e-5, 0.95).unwrap(), 0.0);
        for (bad, name) in [(g(0, 0, 0), "canaries"), (g(10, 11, 0), "guesses"), (g(10, 5, 6), "correct")] {
            match p_value(bad, 1.0, 0.0) {
                Err(AccountingError::InvalidParameter { name: n, .. }) => assert_eq!(n, name),
                other => panic!("{other:?}"),
            }
        }
        assert!(p_value(g(10, 5, 5), f64::NAN, 0.0).is_err());
        assert!(p_value(g(10, 5, 5), 1.0, 1.0).is_err());
        assert!(epsilon_lower_bound(g(10, 5, 5), 0.0, 1.0).is_err());
        assert!(guess(&[1.0, f64::NAN], &[true, false], 2).is_err());
    }

    #[test]
    fn guesses_take_the_extremes() {
        let scores = [0.1, 5.0, -3.0, 2.0, 0.0, -1.0];
        let included = [false, true, false, true, true, false];
        // "in" for 5.0 and 2.0 (both right), "out" for −3.0 and −1.0 (both right).
        assert_eq!(guess(&scores, &included, 4).unwrap(), g(6, 4, 4));
        // Three guesses: one "in" (5.0), two "out" (−3.0, −1.0).
        assert_eq!(guess(&scores, &included, 3).unwrap(), g(6, 3, 3));
        assert_eq!(guess(&scores, &included, 6).unwrap().correct, 4);
    }
}
