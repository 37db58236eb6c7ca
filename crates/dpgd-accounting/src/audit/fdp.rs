//! One-run audits of an f-DP claim: the analysis of Mahloujifar, Melis & Chaudhuri 2025
//! ([MMC25]), which tests the mechanism's claimed trade-off curve rather than an (ε, δ) pair, and
//! so bounds ε far tighter than [`one_run`](super::one_run) from the same guesses.
//!
//! **The game** is [`one_run`](super::one_run)'s: m canaries, each included by a fair coin; the
//! auditor makes exactly c′ guesses and is right c times ([`Guesses`]). The claim under test:
//! the mechanism is f-DP with respect to each canary's inclusion ([DRS19]: for neighbours D, D′
//! and every event A, D′(A) ≥ f(1 − D(A))). Write g(x) = f(1 − x): it is nondecreasing and
//! convex, as f is nonincreasing and convex.
//!
//! **The statement** (after [MMC25]'s analysis of guesses with abstention; the proof is below,
//! written out for this code). Let W be the number of correct guesses, w_i = i/(c′ − i), and run
//! the recursion from (r_c, h_c) = (p·c/m, p·(c′ − c)/m) down to i = 0:
//!
//! h_i = max(h_{i+1}, g(r_{i+1})),  r_i = r_{i+1} + w_i·(h_i − h_{i+1}).
//!
//! If the mechanism is f-DP and P[W ≥ c] ≥ p, then r_0 + h_0 ≤ c′/m. So when the recursion
//! ends above c′/m, P[W ≥ c] < p: the claim is refuted at level p ([`refutes`]). The rejection
//! region {c : refuted} has its least element c*, and P[W in it] ≤ P[W ≥ c*] < p, so the test
//! has level p whatever c is observed.
//!
//! **Proof.** Let J be a canary drawn uniformly, independent of the game, R_i = P[the guess on J
//! is made and right, W ≥ i] and H_i = P[the guess on J is made and wrong, W ≥ i].
//!
//! 1. *The ledger of guesses.* Given W = i, i of the m canaries are guessed right and c′ − i
//!    wrong, so R_i − R_{i+1} = P[W = i]·i/m and H_i − H_{i+1} = P[W = i]·(c′ − i)/m: H is
//!    nonincreasing in i, R_i − R_{i+1} = w_i·(H_i − H_{i+1}) for i < c′, and R_0 + H_0 = c′/m
//!    (exactly c′ guesses).
//! 2. *Privacy.* Fix J, the other coins and J's coin b, and let A be the outputs on which the
//!    guess on J is b and at least i − 1 other guesses are right. On A, under coin b the guess on
//!    J is right with W ≥ i; under −b it is wrong with W ≥ i − 1. f-DP between the output laws
//!    D_b and D_{−b} gives D_{−b}(A) ≥ g(D_b(A)). Averaging over J, the coins and b (Jensen, g
//!    convex): H_{i−1} ≥ g(R_i). With 1., H_{i−1} ≥ max(H_i, g(R_i)).
//! 3. *The recursion is the least the truth can be.* Let S_i(r, h) = (r + w_i(h* − h), h*),
//!    h* = max(h, g(r)), and F_i the recursion's end r_0 + h_0 from (r_i, h_i) = (r, h), so
//!    F_0(r, h) = r + h and F_{i+1} = F_i ∘ S_i. Claim: F_i is nondecreasing along every move in
//!    the cone D_i spanned by (1, −1) and {Δh ≥ 0, Δr ≥ w_{i−1}Δh} (w_{−1} = 0). For i = 0,
//!    r + h does not decrease along either. For F_{i+1}: a move (Δr, Δh) with Δh ≥ 0,
//!    Δr ≥ w_iΔh raises h* by some Δh* ≥ 0 and r by Δr + w_i(Δh* − Δh) ≥ w_iΔh* ≥ w_{i−1}Δh*
//!    (w is increasing): a move in D_i. A move d·(1, −1) changes h* by Δh* ≥ −d: if Δh* ≥ 0 it
//!    moves r by (1 + w_i)d + w_iΔh* ≥ w_iΔh*, in D_i; if Δh* = −e with 0 < e ≤ d it moves by
//!    e·(1, −1) + ((1 + w_i)(d − e), 0), in D_i. By 1. and 2., the truth is
//!    (R_i, H_i) = S_i(R_{i+1}, H_{i+1}) + e_i·(w_i, 1) with e_i ≥ 0, a move in D_i, so
//!    c′/m = F_0(R_0, H_0) ≥ F_1(R_1, H_1) ≥ … ≥ F_c(R_c, H_c). Finally, with P = P[W ≥ c] ≥ p,
//!    R_c ≥ P·c/m and R_c + H_c = P·c′/m, so (R_c, H_c) − (p·c/m, p·(c′ − c)/m) =
//!    (P − p)·(c, c′ − c)/m + t·(1, −1) with t ≥ 0: a move in D_c (c/(c′ − c) = w_c ≥ w_{c−1}),
//!    so F_c(R_c, H_c) ≥ F_c(p·c/m, p·(c′ − c)/m). ∎
//!
//! **A family of claims.** A claim's curve comes from a family f_θ that is pointwise
//! nonincreasing in θ (θ measures leakage: μ of Gaussian DP, or one over the factor on a run's
//! noise multipliers). A smaller g ends the recursion lower (every step moves in D_i), so the
//! claims refuted are those with θ below a threshold; [`lower_bound`] finds it by bisection and
//! reports its lower end. Several pre-registered tests share the level by a union bound.
//!
//! **Rounding contract.** A claim is refuted only when the recursion's end exceeds c′/m by a
//! relative 10⁻⁹ (its float error is about c′ ulps); a curve built from a privacy profile uses δ's
//! rounded up (a smaller f: a weaker claim, so refuting it refutes the exact one); the bound is the
//! lower end of its bisection.
//!
//! ```
//! use dpgd_accounting::audit::fdp::{GaussianCurve, refutes};
//! use dpgd_accounting::audit::one_run::Guesses;
//! // 1,000 canaries, 100 guesses, 95 right: refutes 0.5-GDP at level 5 %, not 1-GDP.
//! let g = Guesses { canaries: 1000, guesses: 100, correct: 95 };
//! assert!(refutes(&GaussianCurve { mu: 0.5 }, g, 0.05).unwrap());
//! assert!(!refutes(&GaussianCurve { mu: 1.0 }, g, 0.05).unwrap());
//! ```
//!
//! [MMC25]: https://arxiv.org/abs/2410.22235
//! [DRS19]: https://arxiv.org/abs/1905.02383

use super::normal_quantile;
use super::one_run::Guesses;
use crate::error::{AccountingError, Result};
use crate::event::{DpEvent, PldAccountant};
use crate::numeric::normal_cdf;
use crate::pld::{Direction, Pld, Rounding};

/// The recursion must end above c′/m by this relative margin to refute.
const END_MARGIN: f64 = 1e-9;

/// A trade-off curve f ([DRS19]): the least type II error of a test of the neighbours at type I
/// error α.
///
/// [DRS19]: https://arxiv.org/abs/1905.02383
pub trait TradeOff {
    /// f(α) for α ∈ [0, 1]. **Contract**: convex, nonincreasing, in [0, 1 − α]; an
    /// implementation may return less than its exact curve (a weaker claim), never more.
    fn beta(&self, alpha: f64) -> f64;
}

/// μ-Gaussian DP: f(α) = Φ(Φ⁻¹(1 − α) − μ), testing N(0, 1) against N(μ, 1) ([DRS19]).
///
/// [DRS19]: https://arxiv.org/abs/1905.02383
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GaussianCurve {
    /// μ ≥ 0.
    pub mu: f64,
}

impl TradeOff for GaussianCurve {
    fn beta(&self, alpha: f64) -> f64 {
        if alpha <= 0.0 {
            return 1.0;
        }
        if alpha >= 1.0 {
            return 0.0;
        }
        // 1 − α rounds; Φ⁻¹(1 − α) = −Φ⁻¹(α) keeps small α exact.
        normal_quantile(alpha).map_or(0.0, |z| normal_cdf(-z - self.mu))
    }
}

/// The curve of a privacy profile: the mechanism is (ε, δ(ε))-DP at each of its points, so
/// f(α) = max over them of max(0, 1 − δ − e^ε·α, e^{−ε}(1 − δ − α)) ([DRS19], Prop. 2.12's
/// envelope at finitely many points: below the exact curve, as the contract allows).
///
/// [DRS19]: https://arxiv.org/abs/1905.02383
#[derive(Debug, Clone, PartialEq)]
pub struct ProfileCurve {
    points: Vec<(f64, f64)>,
}

/// The values of δ of a profile curve built from an event.
const PROFILE_POINTS: usize = 192;

impl ProfileCurve {
    /// The curve of the (ε, δ) pairs `points`, each a guarantee the mechanism holds.
    ///
    /// # Errors
    /// [`AccountingError::InvalidParameter`] naming `points` if there is none, or an ε is negative
    /// or NaN, or a δ not in [0, 1].
    pub fn new(points: Vec<(f64, f64)>) -> Result<Self> {
        if points.is_empty() || points.iter().any(|&(e, d)| e.is_nan() || e < 0.0 || !(0.0..=1.0).contains(&d)) {
            return Err(AccountingError::InvalidParameter {
                name: "points",
                value: points.len() as f64,
                expected: "at least one (epsilon >= 0, delta in [0, 1]) pair",
            });
        }
        Ok(Self { points })
    }

    /// The curve of `event` (add-or-remove-one neighbours): its privacy profile by the PLD
    /// accountant, rounded up ([`crate::pld`]), in both directions, on the grid of
    /// [`event_plds`]: the points (ε(δ), δ) at 192 values of δ from 10^{−1/16} down to 10⁻¹²,
    /// sixteen a decade (where ε(δ) is finite), and (0, δ(0)).
    ///
    /// # Errors
    /// As [`event_plds`].
    pub fn of_event(event: &DpEvent) -> Result<Self> {
        let plds = event_plds(event)?;
        let mut points = vec![(0.0, plds.iter().map(|p| p.delta(0.0)).fold(0.0f64, f64::max).min(1.0))];
        for j in 1..=PROFILE_POINTS {
            let delta = 10f64.powf(-(j as f64) / 16.0);
            let eps = plds.iter().map(|p| p.epsilon(delta)).try_fold(0.0f64, |m, e| e.map(|e| m.max(e)))?;
            if eps.is_finite() {
                points.push((eps, delta));
            }
        }
        Self::new(points)
    }
}

/// The ε at `delta` of `event` by [`event_plds`], never understated.
///
/// # Errors
/// As [`event_plds`]; `delta` not in (0, 1).
pub fn event_epsilon(event: &DpEvent, delta: f64) -> Result<f64> {
    let [add, remove] = event_plds(event)?;
    Ok(add.epsilon(delta)?.max(remove.epsilon(delta)?))
}

/// `event`'s privacy loss distributions (add, remove), rounded up, on a grid scaled to its
/// privacy: interval ε/2,000 (ε its RDP bound at δ = 10⁻⁶), within [10⁻⁷, 10⁻³]. A fixed grid
/// would not do: each step's losses are rounded up to the grid, so a grid far coarser than a
/// very private step's losses (σ = 16 at q = 0.004: about 10⁻⁵) overstates thousands of them
/// into an ε several times the exact one.
///
/// # Errors
/// As [`PldAccountant`] and [`RdpAccountant`](crate::event::RdpAccountant) for `event`.
pub fn event_plds(event: &DpEvent) -> Result<[Pld; 2]> {
    use crate::event::{Accountant, RdpAccountant};
    let mut rdp = RdpAccountant::new(crate::subsampled::dp_accounting_orders(), crate::Conversion::Cks)?;
    rdp.compose(event)?;
    let interval = (rdp.epsilon(1e-6)? / 2000.0).clamp(1e-7, 1e-3);
    let acc = PldAccountant::new(interval)?;
    Ok([
        acc.pld_of(event, Direction::Add, Rounding::Pessimistic)?,
        acc.pld_of(event, Direction::Remove, Rounding::Pessimistic)?,
    ])
}

impl TradeOff for ProfileCurve {
    fn beta(&self, alpha: f64) -> f64 {
        let alpha = alpha.clamp(0.0, 1.0);
        let line = |&(e, d): &(f64, f64)| f64::max(1.0 - d - e.exp() * alpha, (-e).exp() * (1.0 - d - alpha));
        self.points.iter().map(line).fold(0.0, f64::max).min(1.0 - alpha)
    }
}

/// The shares of the canaries the pre-registered guesses take ([`guesses`]): down to 0.5 %, as
/// a claim of little privacy is refuted only by a few guesses nearly all right.
pub const GUESS_SHARES: [f64; 8] = [0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0];

/// One guess of [`one_run::guess`](super::one_run::guess) per share of [`GUESS_SHARES`] (at
/// least 2 guesses each, the same number once).
///
/// # Errors
/// As [`one_run::guess`](super::one_run::guess); fewer than 2 canaries.
pub fn guesses(scores: &[f64], included: &[bool]) -> Result<Vec<Guesses>> {
    let m = scores.len();
    if m < 2 {
        return Err(AccountingError::InvalidParameter {
            name: "canaries",
            value: m as f64,
            expected: "at least 2 canaries",
        });
    }
    let mut rs: Vec<usize> = GUESS_SHARES.iter().map(|s| ((s * m as f64).round() as usize).clamp(2, m)).collect();
    rs.dedup();
    rs.into_iter().map(|r| super::one_run::guess(scores, included, r)).collect()
}

/// Whether `g` refutes the claim "`curve`-DP with respect to each canary" at `level`: the
/// recursion of the [module](self) ends above c′/m (by its margin).
///
/// # Errors
/// [`AccountingError::InvalidParameter`] naming `canaries`, `guesses` or `correct` (out of
/// range) or `level` (not strictly between 0 and 1).
pub fn refutes(curve: &dyn TradeOff, g: Guesses, level: f64) -> Result<bool> {
    let Guesses { canaries: m, guesses: cap, correct: c } = g.check()?;
    if !(level > 0.0 && level < 1.0) {
        return Err(AccountingError::InvalidParameter {
            name: "level",
            value: level,
            expected: "a level strictly between 0 and 1, e.g. 0.05",
        });
    }
    if c == 0 {
        return Ok(false);
    }
    let (m, capf) = (m as f64, cap as f64);
    let lift = |x: f64| curve.beta(1.0 - x.min(1.0));
    let (mut r, mut h) = (level * c as f64 / m, level * (cap - c) as f64 / m);
    for i in (0..c).rev() {
        let h_next = h.max(lift(r));
        r += i as f64 / (capf - i as f64) * (h_next - h);
        h = h_next;
        if r + h > capf / m * (1.0 + END_MARGIN) {
            return Ok(true); // the recursion only grows from here
        }
    }
    Ok(r + h > capf / m * (1.0 + END_MARGIN))
}

/// The largest θ (to a relative 10⁻³, the lower end) such that every claim "f_θ′-DP" with
/// θ′ < θ is refuted by one of `tests`, each at `level` ([`refutes`]); 0 if none is, at most
/// `start`·2⁶. `curve(θ)` gives f_θ, pointwise nonincreasing in θ > 0; the search brackets from
/// `start` (the claim's θ, say) by doubling or halving, at most 6 times each way, then bisects.
///
/// # Errors
/// As [`refutes`]; `start` not finite and > 0; an error of `curve`.
pub fn lower_bound<C: TradeOff>(
    tests: &[Guesses],
    level: f64,
    start: f64,
    mut curve: impl FnMut(f64) -> Result<C>,
) -> Result<f64> {
    let start = crate::error::positive("start", start)?;
    let mut refuted = |theta: f64| -> Result<bool> {
        let f = curve(theta)?;
        for &g in tests {
            if refutes(&f, g, level)? {
                return Ok(true);
            }
        }
        Ok(false)
    };
    let (mut lo, mut hi) = (start, start);
    if refuted(start)? {
        for _ in 0..6 {
            hi *= 2.0;
            if !refuted(hi)? {
                break;
            }
            lo = hi;
        }
        if lo == hi {
            return Ok(lo);
        }
    } else {
        for _ in 0..6 {
            lo *= 0.5;
            if refuted(lo)? {
                break;
            }
            hi = lo;
        }
        if lo == hi {
            return Ok(0.0);
        }
    }
    while hi / lo > 1.0 + 1e-3 {
        let mid = (lo * hi).sqrt();
        if refuted(mid)? {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(lo)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audit::binomial_sf;

    fn g(canaries: u64, guesses: u64, correct: u64) -> Guesses {
        Guesses { canaries, guesses, correct }
    }

    /// ε-DP's curve, from its one profile point (ε, 0).
    fn pure(eps: f64) -> ProfileCurve {
        ProfileCurve::new(vec![(eps, 0.0)]).unwrap()
    }

    /// Soundness against an exact distribution: ε-randomized response on each of m canaries,
    /// guessed by its output, is ε-DP and right with probability q = e^ε/(1 + e^ε) on each, so W
    /// is Binomial(m, q). Wherever P[W ≥ c] ≥ level the test must not refute; and it refutes where
    /// that tail is far below the level (it is tight, not only sound).
    #[test]
    fn randomized_response_is_refuted_exactly_where_its_binomial_tail_is_small() {
        for (m, eps) in [(100u64, 1.0f64), (1000, 0.5), (1000, 2.0), (1000, 3.0)] {
            let q = 1.0 / (1.0 + (-eps).exp());
            let curve = pure(eps);
            let (mut sound, mut tight) = (0, 0);
            for c in 0..=m {
                let tail = binomial_sf(c, m, q);
                let refuted = refutes(&curve, g(m, m, c), 0.05).unwrap();
                if tail >= 0.05 {
                    assert!(!refuted, "m = {m}, ε = {eps}, c = {c}: tail {tail} refuted");
                    sound += 1;
                }
                if tail < 0.005 && c < m {
                    assert!(refuted, "m = {m}, ε = {eps}, c = {c}: tail {tail} not refuted");
                    tight += 1;
                }
            }
            assert!(sound > 0 && tight > 0, "m = {m}: {sound} {tight}");
        }
    }

    /// The same for μ-GDP by simulation: each of 1,000 canaries outputs μ·[included] + N(0, 1),
    /// exactly μ-GDP; the auditor guesses on the 100 most extreme. Over 400 runs the claim of the
    /// true μ is refuted in at most 5 % (plus three standard errors), and a claim of half of it
    /// in most runs.
    #[test]
    fn gaussian_outputs_are_refuted_at_the_level_and_half_their_mu_usually() {
        use rand::SeedableRng;
        use rand_distr::{Bernoulli, Distribution, Normal};
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(11);
        let (z, coin) = (Normal::new(0.0, 1.0).unwrap(), Bernoulli::new(0.5).unwrap());
        for mu in [0.5, 1.0, 2.0] {
            let (mut at_mu, mut at_half) = (0, 0);
            for _ in 0..400 {
                let included: Vec<bool> = (0..1000).map(|_| coin.sample(&mut rng)).collect();
                let scores: Vec<f64> =
                    included.iter().map(|&b| if b { mu } else { 0.0 } + z.sample(&mut rng)).collect();
                let t = crate::audit::one_run::guess(&scores, &included, 100).unwrap();
                at_mu += usize::from(refutes(&GaussianCurve { mu }, t, 0.05).unwrap());
                at_half += usize::from(refutes(&GaussianCurve { mu: mu / 2.0 }, t, 0.05).unwrap());
            }
            assert!(at_mu <= 20 + 33, "μ = {mu}: the true claim refuted in {at_mu} of 400");
            assert!(at_half > 200, "μ = {mu}: half the claim refuted in only {at_half} of 400");
        }
    }

    /// Against an independent implementation (`experiments/audit/one_run_reference.py`: the
    /// recursion with scipy's normal, plain bisection on μ).
    #[test]
    fn gaussian_bounds_match_an_independent_implementation() {
        let want = [
            ((1000, 100, 95, 0.05), 0.786_811_814_684_121_2),
            ((1000, 1000, 700, 0.05), 0.357_210_786_597_129_85),
            ((5000, 250, 240, 0.05 / 12.0), 0.699_421_772_408_106_7),
            ((100, 100, 60, 0.05), 0.026_231_534_661_658_784),
        ];
        for ((m, r, v, level), mu) in want {
            let got = lower_bound(&[g(m, r, v)], level, 1.0, |mu| Ok(GaussianCurve { mu })).unwrap();
            assert!(got <= mu * (1.0 + 1e-9) && got >= mu * (1.0 - 2e-3), "{m} {r} {v}: {got} vs {mu}");
        }
    }

    /// The f-DP analysis is tighter than the (ε, δ) analysis on the same guesses: for a
    /// Gaussian-DP claim, the ε of its μ bound is above [SNJ23]'s bound at the same δ.
    ///
    /// [SNJ23]: https://arxiv.org/abs/2305.08846
    #[test]
    fn the_gaussian_analysis_is_tighter_than_the_epsilon_delta_one() {
        for (m, r, v) in [(1000u64, 100u64, 95u64), (5000, 1000, 800), (1000, 1000, 700)] {
            let mu = lower_bound(&[g(m, r, v)], 0.05, 1.0, |mu| Ok(GaussianCurve { mu })).unwrap();
            let fdp = crate::convert::gaussian_epsilon(mu, 1e-5);
            let snj = crate::audit::one_run::epsilon_lower_bound(g(m, r, v), 1e-5, 0.95).unwrap();
            assert!(fdp > snj, "{m} {r} {v}: f-DP {fdp} vs (ε, δ) {snj}");
        }
    }

    /// A profile curve never exceeds the exact one: the Gaussian mechanism's profile (σ = 2)
    /// lies below its μ = 1/2 curve, and close to it.
    #[test]
    fn a_profile_curve_is_below_the_exact_curve_and_close() {
        let profile = ProfileCurve::of_event(&DpEvent::gaussian(2.0)).unwrap();
        let exact = GaussianCurve { mu: 0.5 };
        for k in 0..=100 {
            let a = f64::from(k) / 100.0;
            let (p, e) = (profile.beta(a), exact.beta(a));
            assert!(p <= e + 1e-12 && e - p < 1e-3, "α = {a}: {p} vs {e}");
        }
    }

    #[test]
    fn more_leakage_is_refuted_less_and_bad_inputs_are_named() {
        let t = g(1000, 200, 180);
        let refuted: Vec<bool> =
            [0.35, 0.69, 0.71, 1.4].iter().map(|&mu| refutes(&GaussianCurve { mu }, t, 0.05).unwrap()).collect();
        assert_eq!(refuted, [true, true, false, false]); // its bound is 0.698
        assert!(!refutes(&GaussianCurve { mu: 0.0 }, g(10, 4, 0), 0.05).unwrap());
        for (bad, level) in [(g(0, 0, 0), 0.05), (g(10, 11, 0), 0.05), (g(10, 5, 6), 0.05), (g(10, 5, 5), 1.0)] {
            assert!(refutes(&GaussianCurve { mu: 1.0 }, bad, level).is_err());
        }
        assert!(ProfileCurve::new(vec![]).is_err());
        assert!(ProfileCurve::new(vec![(f64::NAN, 0.0)]).is_err());
        assert!(lower_bound(&[t], 0.05, 0.0, |mu| Ok(GaussianCurve { mu })).is_err());
    }
}
