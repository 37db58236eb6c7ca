//! Privacy loss distributions (PLDs) on a grid, composed by FFT convolution: the tightest
//! accounting of DP-SGD's Poisson-subsampled Gaussian ([KJPH21]; [MM18]; [DGKKM22]; as
//! dp_accounting's PLD accountant).
//!
//! For a pair of output distributions (P, Q) of neighbouring datasets, the privacy loss
//! L = ln(P(o)/Q(o)) with o ∼ P has distribution ω, and the mechanism is (ε, δ(ε))-DP with
//! δ(ε) = ω(∞) + Σₗ ω(l)(1 − e^{ε−l})₊ ([MM18]; [KJPH21, Sec. 2]). Composition convolves the
//! PLDs. Under add-or-remove-one neighbours both directions are kept, each composed on its
//! own, and ε is the larger of the two.
//!
//! One step of the Poisson-subsampled Gaussian (rate q, multiplier σ, sensitivity 1):
//! * *add*: P = (1 − q)N(0, σ²) + qN(1, σ²), Q = N(0, σ²), L(x) = ln(1 − q + q e^{(2x−1)/(2σ²)});
//! * *remove*: P = N(0, σ²), Q = (1 − q)N(0, σ²) + qN(1, σ²), L(x) = −ln(1 − q + q e^{(2x−1)/(2σ²)}).
//!
//! Both are monotone in x, so L's distribution function is Φ of the inverse, in closed form.
//!
//! # Why the ε reported is never understated
//!
//! * **Discretisation.** On each grid interval (kh, (k+1)h], P's and Q's masses of the
//!   outcomes whose loss falls there are split between the two grid points so that both masses
//!   are kept ("connecting the dots", [DGKKM22, Sec. 3]): the result is a pair of distributions
//!   that *dominates* the mechanism's (its δ(ε), linear in e^ε between grid points, lies above
//!   the exact convex curve), and composing dominating pairs bounds the composition.
//! * **Tails.** Mass of the upper tail beyond the grid goes to ω(∞) (counted in full in δ);
//!   mass of the lower tail is moved up onto the lowest grid point kept. Only tails of mass
//!   ≤ [`TAIL_MASS`] are cut.
//! * **Rounding.** Every interval's P-mass is computed with a bound on its error (erfc's, its
//!   argument's, and its end points', which `x_of` bounds), and the split uses an upper bound
//!   on p and a lower bound on q: the computed `a` is never above the exact split's and
//!   `b = p − a` never below, so every mass can only move to a higher loss (the PLD's survival
//!   function is pointwise at least the exact one's; convolution keeps that order, and δ(ε) is
//!   the expectation of a function increasing in the loss). The masses' excess over 1 is at
//!   most their error bounds. An FFT convolution of N entries errs by at most
//!   √N·25·u·log₂N·(‖a‖₁‖b‖₂ + ‖a‖₂‖b‖₁) in ℓ₁; that is added to ω(∞) after each convolution
//!   (δ moves by at most the ℓ₁ error), and negative entries are set to 0. A composed loss
//!   sits at the rounded grid value of a sum of rounded grid values: the drift is tracked and
//!   added to ε, as is the rounding of the sums δ(ε) is solved with.
//! * **The lower estimate.** Merging each interval's outcomes into one is a post-processing,
//!   so that pair is *dominated* by the mechanism's; with its losses rounded down to the grid
//!   (the *optimistic* PLD, upper tail kept at the top) its ε is below the exact one up to the
//!   floating-point error of its own computation, which is not bounded: it is an estimate of
//!   how tight the reported ε is, not a guarantee. Rounding down shifts each step's loss by up
//!   to h, so it is computed on a 10 times finer grid ([`crate::event::PldAccountant`]).
//!
//! [KJPH21]: https://arxiv.org/abs/2006.07134
//! [MM18]: https://eprint.iacr.org/2017/1034
//! [DGKKM22]: https://arxiv.org/abs/2207.04380

use rustfft::FftPlanner;
use rustfft::num_complex::Complex;

use crate::error::{AccountingError, Result, positive, probability};
use crate::numeric::{normal_cdf, with_margin};

/// Tails of at most this mass are cut (into ω(∞), or onto the lowest loss kept).
pub const TAIL_MASS: f64 = 1e-15;

/// The most grid points a PLD may hold (2²¹: 64 MiB per FFT buffer); beyond it the grid
/// interval is too fine for the losses' range, and the computation is refused.
pub const MAX_POINTS: usize = 1 << 21;

/// Which way the losses are rounded to the grid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rounding {
    /// Up (and upper tails to ∞): an upper bound on δ(ε), hence on ε.
    Pessimistic,
    /// Down (tails dropped): a lower estimate, for the error bound.
    Optimistic,
}

/// Which neighbour the pair (P, Q) compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// The dataset with the example against the one without.
    Add,
    /// The dataset without the example against the one with.
    Remove,
}

/// A privacy loss distribution on the grid {k·h}: `pmf[i]` is the mass of loss (lo + i)·h;
/// `infinity` the mass of an infinite loss.
#[derive(Debug, Clone, PartialEq)]
pub struct Pld {
    h: f64,
    lo: i64,
    pmf: Vec<f64>,
    infinity: f64,
    rounding: Rounding,
    /// A bound on how far below the composed losses' exact sums their grid values may lie
    /// (each composition places a sum of rounded grid values at a rounded grid value).
    drift: f64,
}

impl Pld {
    /// The PLD of a mechanism that reveals nothing (loss 0 with probability 1).
    #[must_use]
    pub fn identity(h: f64, rounding: Rounding) -> Self {
        Pld { h, lo: 0, pmf: vec![1.0], infinity: 0.0, rounding, drift: 0.0 }
    }

    /// The PLD of one step of the Poisson-subsampled Gaussian mechanism with rate `q` ∈ (0, 1]
    /// and noise multiplier `sigma`, in `direction`, on the grid of interval `h`.
    ///
    /// # Errors
    /// [`AccountingError::InvalidParameter`] naming `sample rate`, `sigma` or `grid interval`
    /// (not finite and > 0, or so fine that the grid exceeds [`MAX_POINTS`]).
    pub fn subsampled_gaussian(q: f64, sigma: f64, h: f64, direction: Direction, rounding: Rounding) -> Result<Self> {
        if !(q > 0.0 && q <= 1.0) {
            return Err(AccountingError::InvalidParameter {
                name: "sample rate",
                value: q,
                expected: "the Poisson sampling probability must be in (0, 1]",
            });
        }
        let sigma = positive("sigma", sigma)?;
        let h = positive("grid interval", h)?;
        let law = LossLaw { q, sigma, direction };
        // The grid spans the losses outside tails of mass TAIL_MASS/2 each.
        let (l_lo, l_hi) = (law.quantile(TAIL_MASS / 2.0, false), law.quantile(TAIL_MASS / 2.0, true));
        let (k_lo, k_hi) = ((l_lo / h).floor(), (l_hi / h).ceil());
        if !(k_lo.is_finite() && k_hi.is_finite()) || k_hi - k_lo + 1.0 > MAX_POINTS as f64 {
            return Err(AccountingError::InvalidParameter {
                name: "grid interval",
                value: h,
                expected: "too fine for this mechanism's range of losses: use a coarser grid",
            });
        }
        let (k_lo, k_hi) = (k_lo as i64, (k_hi as i64).max(k_lo as i64 + 1));
        let at = |k: i64| k as f64 * h;
        let mut pmf = vec![0.0; (k_hi - k_lo + 1) as usize];
        // Below the grid: P-mass of losses ≤ k_lo·h; above it: of losses > k_hi·h.
        let (below, above) = (law.p_cdf(at(k_lo)), law.p_sf(at(k_hi)));
        let (lo, infinity) = match rounding {
            Rounding::Pessimistic => {
                // Connect the dots ([DGKKM22, Sec. 3]): each interval's P-mass p and Q-mass q are
                // split between its two ends so that both are kept (a e^{−kh} + b e^{−(k+1)h} = q,
                // a + b = p). Computed from upper bounds on p and lower bounds on q, so that a is
                // never above the exact split and b = p − a never below: every mass can only
                // move up (module docs, "Rounding").
                pmf[0] += below.upper();
                let grow = 1.0 + 4.0 * f64::EPSILON;
                for k in k_lo..k_hi {
                    let (p, q) = (law.p_mass(at(k), at(k + 1)), law.q_mass(at(k), at(k + 1)));
                    let (p_hi, q_lo) = (p.upper(), p_lower(q));
                    let eb = (-at(k + 1)).exp() * grow;
                    let numerator = q_lo - p_hi * eb;
                    let numerator = numerator - f64::EPSILON * (q_lo + p_hi * eb);
                    // e^{−l₁} − e^{−l₂} = e^{−l₁}(1 − e^{−(l₂ − l₁)}), without cancellation; the
                    // grid points' difference is exact (Sterbenz). An upper bound on it (and a
                    // lower bound on the numerator, and the quotient rounded down) keeps a below
                    // the exact split.
                    let width = at(k + 1) - at(k);
                    let gap = (-at(k)).exp() * -(-width).exp_m1() * grow;
                    // Where e^{−l} underflows, nothing is moved down: all of p stays at the top.
                    let normal = eb.is_normal() && gap.is_normal();
                    let shrink = 1.0 - 2.0 * f64::EPSILON;
                    let a = if normal && numerator > 0.0 { (numerator / gap * shrink).min(p_hi) } else { 0.0 };
                    pmf[(k - k_lo) as usize] += a;
                    pmf[(k - k_lo + 1) as usize] += p_hi - a;
                }
                (k_lo, above.upper())
            }
            Rounding::Optimistic => {
                // Each loss rounded down: the pair with every interval's outcomes merged (a
                // post-processing, hence dominated) and its loss rounded down.
                for k in k_lo..k_hi {
                    pmf[(k - k_lo) as usize] += law.p_mass(at(k), at(k + 1)).value;
                }
                let last = pmf.len() - 1;
                pmf[last] += above.value;
                (k_lo, 0.0)
            }
        };
        Ok(Pld { h, lo, pmf, infinity, rounding, drift: 0.0 })
    }

    /// The loss grid's interval h.
    #[must_use]
    pub fn interval(&self) -> f64 {
        self.h
    }

    /// The composition of `self` and `other` (same grid and rounding): the convolution.
    ///
    /// # Errors
    /// [`AccountingError::InvalidParameter`] naming `grid interval` if the grids or roundings
    /// differ, or the result would exceed [`MAX_POINTS`].
    pub fn compose(&self, other: &Pld) -> Result<Pld> {
        if self.h != other.h || self.rounding != other.rounding {
            return Err(AccountingError::InvalidParameter {
                name: "grid interval",
                value: other.h,
                expected: "PLDs compose only on the same grid with the same rounding",
            });
        }
        let n = self.pmf.len() + other.pmf.len() - 1;
        if n > MAX_POINTS {
            return Err(AccountingError::InvalidParameter {
                name: "grid interval",
                value: self.h,
                expected: "the composed losses span too many grid points: use a coarser grid",
            });
        }
        // The finite masses convolve (they sum to (1 − ω₁(∞))(1 − ω₂(∞))); the rest is ∞.
        let (pmf, error) = convolve(&self.pmf, &other.pmf);
        let infinity = self.infinity + other.infinity - self.infinity * other.infinity;
        // fl(k₁h) + fl(k₂h) and fl((k₁+k₂)h) differ by at most 2u(|k₁h| + |k₂h|).
        let drift = self.drift + other.drift + 2.0 * f64::EPSILON * (self.max_abs_loss() + other.max_abs_loss());
        let mut out = Pld { h: self.h, lo: self.lo + other.lo, pmf, infinity, rounding: self.rounding, drift };
        if out.rounding == Rounding::Pessimistic {
            out.infinity += error;
        }
        out.truncate();
        Ok(out)
    }

    /// `self` composed `count` times (by repeated squaring).
    ///
    /// # Errors
    /// As [`compose`](Self::compose).
    pub fn self_compose(&self, count: u64) -> Result<Pld> {
        let mut result = Pld::identity(self.h, self.rounding);
        let (mut base, mut n) = (self.clone(), count);
        while n > 0 {
            if n & 1 == 1 {
                result = result.compose(&base)?;
            }
            n >>= 1;
            if n > 0 {
                base = base.compose(&base)?;
            }
        }
        Ok(result)
    }

    /// δ(ε) = ω(∞) + Σₗ ω(l)(1 − e^{ε−l})₊.
    #[must_use]
    pub fn delta(&self, epsilon: f64) -> f64 {
        let tail: f64 = self.losses().filter(|&(l, _)| l > epsilon).map(|(l, m)| m * -(epsilon - l).exp_m1()).sum();
        self.infinity + tail
    }

    /// The smallest ε ≥ 0 with δ(ε) ≤ `delta` (+∞ if ω(∞) ≥ δ), solved exactly between grid
    /// points (δ(ε) = ω(∞) + S₁ − e^ε S₂ there), with a rounding margin on top for the
    /// pessimistic PLD.
    ///
    /// # Errors
    /// [`AccountingError::InvalidParameter`] naming `delta` if it is not in (0, 1).
    pub fn epsilon(&self, delta: f64) -> Result<f64> {
        let delta = probability("delta", delta)?;
        if self.infinity >= delta {
            return Ok(f64::INFINITY);
        }
        // From the largest loss l down: S₁ = Σ_{l' > l} ω(l'), S₂ = Σ_{l' > l} ω(l')e^{l − l'}
        // (every exponent ≤ 0), so that δ(ε) = ω(∞) + S₁ − e^{ε − l}S₂ on [l, the next loss).
        let (mut s1, mut s2) = (0.0f64, 0.0f64);
        let mut above: Option<(f64, f64)> = None;
        let mut eps = f64::NEG_INFINITY;
        let (u, mut n) = (f64::EPSILON, 0.0f64);
        for (l, m) in self.losses().collect::<Vec<_>>().into_iter().rev() {
            if let Some((la, ma)) = above {
                s1 += ma;
                s2 = (s2 + ma) * (l - la).exp();
            }
            // Rounding of the sums (n terms, chained exponentials): s1 up, s2 down.
            n += 1.0;
            let (s1u, s2d) = (s1 * (1.0 + (n + 2.0) * u), s2 * (1.0 - (2.0 * n + 2.0) * u));
            if self.infinity + s1u - s2d > delta {
                let upper = above.map_or(f64::INFINITY, |a| a.0);
                eps = (l + ((self.infinity + s1u - delta) / s2d).ln()).clamp(l, upper);
                break;
            }
            above = Some((l, m));
        }
        if eps == f64::NEG_INFINITY {
            // δ(ε) ≤ target at the lowest loss l₀ already: below it δ = ω(∞) + S₁ − e^{ε−l₀}S₂
            // with l₀ included.
            if let Some((l0, m0)) = above {
                let (s1, s2) = ((s1 + m0) * (1.0 + (n + 3.0) * u), (s2 + m0) * (1.0 - (2.0 * n + 4.0) * u));
                let gap = self.infinity + s1 - delta;
                eps = if gap > 0.0 { (l0 + (gap / s2).ln()).min(l0) } else { f64::NEG_INFINITY };
            }
        }
        let eps = eps.max(0.0);
        Ok(match self.rounding {
            // Every loss may lie up to `drift` above its grid value: ε moves up by as much.
            Rounding::Pessimistic => with_margin(eps + self.drift, eps.abs() + self.drift),
            Rounding::Optimistic => eps,
        })
    }

    /// The largest |loss| on the grid.
    fn max_abs_loss(&self) -> f64 {
        let hi = self.lo + self.pmf.len() as i64 - 1;
        (self.lo.unsigned_abs().max(hi.unsigned_abs()) as f64) * self.h
    }

    /// (loss, mass) of every grid point with mass.
    fn losses(&self) -> impl Iterator<Item = (f64, f64)> + '_ {
        self.pmf.iter().enumerate().filter(|&(_, &m)| m > 0.0).map(|(i, &m)| ((self.lo + i as i64) as f64 * self.h, m))
    }

    /// Cuts tails of mass ≤ TAIL_MASS/2 each: the lower onto the lowest point kept
    /// (pessimistic) or dropped (optimistic), the upper to ∞ (pessimistic) or onto the
    /// highest point kept (optimistic).
    fn truncate(&mut self) {
        let half = TAIL_MASS / 2.0;
        let (mut low, mut cut_lo) = (0.0, 0);
        while cut_lo + 1 < self.pmf.len() && low + self.pmf[cut_lo] <= half {
            low += self.pmf[cut_lo];
            cut_lo += 1;
        }
        let (mut high, mut cut_hi) = (0.0, self.pmf.len());
        while cut_hi > cut_lo + 1 && high + self.pmf[cut_hi - 1] <= half {
            high += self.pmf[cut_hi - 1];
            cut_hi -= 1;
        }
        let mut kept = self.pmf[cut_lo..cut_hi].to_vec();
        match self.rounding {
            Rounding::Pessimistic => {
                kept[0] += low;
                self.infinity += high;
            }
            Rounding::Optimistic => {
                let last = kept.len() - 1;
                kept[last] += high;
            }
        }
        self.lo += cut_lo as i64;
        self.pmf = kept;
    }
}

/// The law of one step's privacy loss: the Poisson-subsampled Gaussian in one direction.
struct LossLaw {
    q: f64,
    sigma: f64,
    direction: Direction,
}

/// A probability mass and a bound on its computation's error.
#[derive(Debug, Clone, Copy)]
struct Mass {
    value: f64,
    error: f64,
}

impl Mass {
    fn upper(self) -> f64 {
        self.value + self.error
    }
}

fn p_lower(m: Mass) -> f64 {
    (m.value - m.error).max(0.0)
}

/// Relative error bound of `normal_cdf(z)` for an argument z computed with relative error u
/// (z itself: (x − μ)/σ, two roundings):
/// erfc's own (a few ulps) plus the argument's, amplified by |d ln Φ/d ln z| ≤ z² + 1.
fn cdf_error(z: f64) -> f64 {
    // At ±∞, Φ is exactly 0 or 1.
    if z.is_finite() { (8.0 + 4.0 * z * z) * f64::EPSILON } else { 0.0 }
}

/// N(μ, σ²)'s mass of (a, b], from the tail the interval lies in (no cancellation), with a
/// bound on its error that also covers errors `ea`, `eb` in the end points.
fn normal_mass(a: f64, b: f64, mu: f64, sigma: f64, (ea, eb): (f64, f64)) -> Mass {
    let (za, zb) = ((a - mu) / sigma, (b - mu) / sigma);
    let (ta, tb) = if za >= 0.0 { (normal_cdf(-za), normal_cdf(-zb)) } else { (normal_cdf(za), normal_cdf(zb)) };
    let value = if za >= 0.0 { ta - tb } else { tb - ta }.max(0.0);
    // The ends' errors move at most density × distance of mass: the density is ≤ 1/(σ√2π).
    let ends = (ea + eb) / (sigma * (2.0 * std::f64::consts::PI).sqrt());
    let error = ta * cdf_error(za) + tb * cdf_error(zb) + 2.0 * f64::EPSILON * value + ends;
    Mass { value, error: if error.is_finite() { error } else { 1.0 } }
}

impl LossLaw {
    /// The x at which ln(1 − q + q e^{(2x−1)/(2σ²)}) = m (−∞ below its range), and a bound
    /// on its rounding error.
    fn x_of(&self, m: f64) -> (f64, f64) {
        let u = f64::EPSILON;
        let (log_q, s2) = (self.q.ln(), self.sigma * self.sigma);
        // ln(e^m − (1 − q)) in log space (no overflow for large m, no underflow for q = 1), and
        // a bound on its absolute error.
        let (ln_inner, err) = if self.q == 1.0 {
            (m, u * m.abs())
        } else if m >= 0.0 {
            // m + ln(1 − (1 − q)e^{−m}); ln_1p near −1 amplifies by y/(1 − y).
            let y = (1.0 - self.q) * (-m).exp();
            (m + (-y).ln_1p(), u * (m.abs() + 2.0 + 3.0 * y / (1.0 - y)))
        } else {
            let inner = m.exp() - (1.0 - self.q);
            if inner <= 0.0 {
                return (f64::NEG_INFINITY, 0.0);
            }
            // e^m ≤ 1 here: the difference errs by 2u(e^m + 1), relative to inner.
            (inner.ln(), u * (1.0 + 2.0 * (m.exp() + 1.0) / inner))
        };
        let log = ln_inner - log_q;
        let x = s2 * log + 0.5;
        let error = 2.0 * (s2 * (err + 2.0 * u * (log.abs() + log_q.abs())) + u * x.abs());
        // An infinite end is exact (the loss ±∞); a finite one without a finite bound is useless.
        let error = if x.is_infinite() {
            0.0
        } else if error.is_finite() {
            error
        } else {
            f64::INFINITY
        };
        (x, error)
    }
    /// The x-interval of losses (l1, l2] and its ends' errors: the loss is increasing in x
    /// when adding, decreasing when removing.
    fn xs(&self, l1: f64, l2: f64) -> (f64, f64, (f64, f64)) {
        let ((a, ea), (b, eb)) = match self.direction {
            Direction::Add => (self.x_of(l1), self.x_of(l2)),
            Direction::Remove => (self.x_of(-l2), self.x_of(-l1)),
        };
        (a, b, (ea, eb))
    }
    /// The mixture (1 − q)N(0, σ²) + qN(1, σ²)'s mass of (a, b].
    fn mixture(&self, a: f64, b: f64, ends: (f64, f64)) -> Mass {
        let (m0, m1) = (normal_mass(a, b, 0.0, self.sigma, ends), normal_mass(a, b, 1.0, self.sigma, ends));
        let value = (1.0 - self.q) * m0.value + self.q * m1.value;
        Mass { value, error: (1.0 - self.q) * m0.error + self.q * m1.error + 3.0 * f64::EPSILON * value }
    }
    /// P(l1 < L ≤ l2) with L's law under P.
    fn p_mass(&self, l1: f64, l2: f64) -> Mass {
        let (a, b, ends) = self.xs(l1, l2);
        match self.direction {
            Direction::Add => self.mixture(a, b, ends),
            Direction::Remove => normal_mass(a, b, 0.0, self.sigma, ends),
        }
    }
    /// Q(l1 < L ≤ l2): the same outcomes under the other distribution.
    fn q_mass(&self, l1: f64, l2: f64) -> Mass {
        let (a, b, ends) = self.xs(l1, l2);
        match self.direction {
            Direction::Add => normal_mass(a, b, 0.0, self.sigma, ends),
            Direction::Remove => self.mixture(a, b, ends),
        }
    }
    /// P(L ≤ l).
    fn p_cdf(&self, l: f64) -> Mass {
        self.p_mass(f64::NEG_INFINITY, l)
    }
    /// P(L > l).
    fn p_sf(&self, l: f64) -> Mass {
        self.p_mass(l, f64::INFINITY)
    }
    /// The loss with lower (or, if `upper`, upper) tail P-mass `p`, by bisection on the loss.
    fn quantile(&self, p: f64, upper: bool) -> f64 {
        // Bracket: losses of a Gaussian with these parameters lie within ±(50 + 50/σ²).
        let span = 50.0 + 50.0 / (self.sigma * self.sigma);
        let (mut lo, mut hi) = (-span, span);
        for _ in 0..200 {
            let mid = 0.5 * (lo + hi);
            let beyond = if upper { self.p_sf(mid).value <= p } else { self.p_cdf(mid).value > p };
            if beyond { hi = mid } else { lo = mid }
        }
        if upper { hi } else { lo }
    }
}

/// The linear convolution of `a` and `b` by FFT, with negatives set to 0, and N times the
/// bound 10·u·log₂N on each entry's rounding error (N the FFT length).
fn convolve(a: &[f64], b: &[f64]) -> (Vec<f64>, f64) {
    let n = a.len() + b.len() - 1;
    if a.len().min(b.len()) <= 64 {
        // Small: exactly as written; each entry sums at most min(|a|, |b|) products, so the
        // errors total at most min(|a|, |b|)·u·Σ(a∗b) ≤ min(|a|, |b|)·u.
        let mut out = vec![0.0; n];
        for (i, x) in a.iter().enumerate() {
            for (j, y) in b.iter().enumerate() {
                out[i + j] += x * y;
            }
        }
        return (out, a.len().min(b.len()) as f64 * f64::EPSILON);
    }
    let size = n.next_power_of_two();
    let mut planner = FftPlanner::<f64>::new();
    let (fft, ifft) = (planner.plan_fft_forward(size), planner.plan_fft_inverse(size));
    let pad = |v: &[f64]| {
        let mut c: Vec<Complex<f64>> = v.iter().map(|&x| Complex::new(x, 0.0)).collect();
        c.resize(size, Complex::new(0.0, 0.0));
        c
    };
    let (mut fa, mut fb) = (pad(a), pad(b));
    fft.process(&mut fa);
    fft.process(&mut fb);
    for (x, y) in fa.iter_mut().zip(&fb) {
        *x *= y;
    }
    ifft.process(&mut fa);
    let scale = 1.0 / size as f64;
    let out = fa[..n].iter().map(|c| (c.re * scale).max(0.0)).collect();
    // The ℓ₂ error of an FFT convolution is at most 25·u·log₂N·(‖a‖₁‖b‖₂ + ‖a‖₂‖b‖₁) (three
    // transforms of about 6.7·u·log₂N each), so its ℓ₁ error at most √N times that.
    let l2 = |v: &[f64]| v.iter().map(|x| x * x).sum::<f64>().sqrt();
    let l1 = |v: &[f64]| v.iter().map(|x| x.abs()).sum::<f64>();
    let n = size as f64;
    let error = n.sqrt() * 25.0 * f64::EPSILON * n.log2() * (l1(a) * l2(b) + l2(a) * l1(b));
    (out, error)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_step_is_a_distribution_and_its_losses_are_rounded_the_stated_way() {
        for dir in [Direction::Add, Direction::Remove] {
            let p = Pld::subsampled_gaussian(0.01, 1.0, 1e-3, dir, Rounding::Pessimistic).unwrap();
            let o = Pld::subsampled_gaussian(0.01, 1.0, 1e-3, dir, Rounding::Optimistic).unwrap();
            let total = |x: &Pld| x.pmf.iter().sum::<f64>() + x.infinity;
            // The pessimistic masses are upper bounds: their excess over 1 is their error bound.
            let (tp, to) = (total(&p), total(&o));
            assert!((1.0 - 1e-15..1.0 + 1e-9).contains(&tp) && (to - 1.0).abs() < 1e-12, "{dir:?}: {tp} {to}");
            for eps in [0.0, 0.01, 0.05] {
                assert!(o.delta(eps) <= p.delta(eps), "{dir:?} at ε {eps}");
            }
        }
    }

    #[test]
    fn the_gaussian_mechanism_matches_its_exact_curve() {
        // q = 1: the Gaussian mechanism, δ(ε) = Φ(−εσ + 1/(2σ)) − e^ε Φ(−εσ − 1/(2σ)).
        let sigma = 2.0;
        let exact = |e: f64| normal_cdf(-e * sigma + 0.5 / sigma) - e.exp() * normal_cdf(-e * sigma - 0.5 / sigma);
        let p = Pld::subsampled_gaussian(1.0, sigma, 1e-4, Direction::Add, Rounding::Pessimistic).unwrap();
        let o = Pld::subsampled_gaussian(1.0, sigma, 1e-4, Direction::Add, Rounding::Optimistic).unwrap();
        for e in [0.1, 0.5, 1.0] {
            assert!(
                o.delta(e) <= exact(e) && exact(e) <= p.delta(e),
                "ε {e}: {} {} {}",
                o.delta(e),
                exact(e),
                p.delta(e)
            );
            // Connecting the dots is exact at grid points, up to the rounding bound added.
            assert!(p.delta(e) - exact(e) < 1e-9, "ε {e}: {} against {}", p.delta(e), exact(e));
            assert!((p.delta(e) - exact(e)).abs() < 1e-3 * exact(e));
        }
    }

    /// Review: losses above 709 overflowed e^m and collapsed onto one grid point (ε ≈ 710 for a
    /// mechanism whose exact ε is about 5,400).
    #[test]
    fn very_large_losses_are_not_cut_at_the_exponentials_range() {
        // q = 1, σ = 0.01: the loss is N(1/(2σ²), 1/σ²) = N(5000, 100²) when adding.
        let sigma: f64 = 0.01;
        let p = Pld::subsampled_gaussian(1.0, sigma, 0.1, Direction::Add, Rounding::Pessimistic).unwrap();
        let eps = p.epsilon(1e-5).unwrap();
        // The exact δ(ε), its second term in log space (e^ε overflows here).
        let exact = |e: f64| {
            let ln_second = e + crate::numeric::log_normal_cdf(-e * sigma - 0.5 / sigma);
            normal_cdf(-e * sigma + 0.5 / sigma) - ln_second.exp()
        };
        assert!(eps > 5000.0 && exact(eps) <= 1e-5 && exact(eps - 10.0) > 1e-5, "ε {eps}: δ {}", exact(eps));
        for q in [0.5, 1.0] {
            let r = Pld::subsampled_gaussian(q, sigma, 0.1, Direction::Remove, Rounding::Pessimistic).unwrap();
            assert!(r.epsilon(1e-5).unwrap().is_finite(), "q {q}");
        }
    }

    #[test]
    fn composing_by_squaring_equals_composing_one_by_one() {
        let p = Pld::subsampled_gaussian(0.05, 1.5, 1e-3, Direction::Remove, Rounding::Pessimistic).unwrap();
        let mut one = Pld::identity(1e-3, Rounding::Pessimistic);
        for _ in 0..5 {
            one = one.compose(&p).unwrap();
        }
        let sq = p.self_compose(5).unwrap();
        let (a, b) = (one.epsilon(1e-5).unwrap(), sq.epsilon(1e-5).unwrap());
        // Squaring takes fewer convolutions, so it adds fewer error bounds.
        assert!((a - b).abs() < 1e-8 * a, "{a} vs {b}");
    }
}
