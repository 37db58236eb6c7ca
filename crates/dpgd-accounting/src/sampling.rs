//! Exact samplers for integer-valued noise: the discrete Gaussian N_Z(0, σ²), the discrete
//! Laplace, and Bernoulli(exp(−γ)) for rational γ ([CKS20], Algorithms 1–3).
//!
//! Floating-point noise samplers leak through the low-order bits of their outputs ([Mir12]);
//! these samplers use only integer arithmetic (`u64`, `u128`, and a small private 256-bit
//! type with checked bounds) and uniform integers drawn from a caller-supplied
//! [`rand::Rng`], so every output has exactly the probability the algorithm specifies.
//! Uniform integers below a bound are drawn by rejection from the generator's raw 64-bit
//! words — unbiased by construction. (rand's own `random_range` is unbiased only with its
//! `unbiased` feature, which this crate does not turn on because cargo would turn it on for
//! every crate in a build that shares `rand`, changing their random streams.)
//!
//! # How the discrete Gaussian is accounted
//!
//! For an integer-valued query q (a count, a sum of integers, a gradient quantised to a
//! grid) with ℓ₂-sensitivity Δ, releasing q(x) + Y with independent Yⱼ ~ N_Z(0, σ²) in each
//! coordinate is Δ²/(2σ²)-zCDP ([CKS20], Thm 14; the one-dimensional case is its d = 1
//! instance) — the same ρ as continuous Gaussian noise. [`DiscreteGaussian::zcdp`] returns it.
//!
//! Its exact (ε, δ) curve is *not* the continuous Gaussian's ([CKS20] derives it
//! separately), so the `gaussian-exact` conversion must not be used: only the zCDP
//! conversions (`bun-steinke`, `cks`) apply. The type system enforces this: the guarantee is
//! a [`Zcdp`], whose [`epsilon`](crate::ToApproxDp::epsilon) refuses `gaussian-exact`.
//!
//! ```
//! use dpgd_accounting::sampling::DiscreteGaussian;
//! use dpgd_accounting::{Conversion, ToApproxDp};
//! use rand::SeedableRng;
//!
//! let noise = DiscreteGaussian::new(40.0).unwrap();
//! let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(7);
//! let count: i64 = 1234;
//! let released = count + noise.sample(&mut rng);
//! # let _ = released;
//! // A count has sensitivity 1: the release is 1/(2·40²)-zCDP.
//! let rho = noise.zcdp(1.0).unwrap();
//! assert!(rho.rho() >= 1.0 / 3200.0);
//! assert!(rho.epsilon(1e-6, Conversion::Cks).is_ok());
//! assert!(rho.epsilon(1e-6, Conversion::GaussianExact).is_err()); // not the continuous curve
//! ```
//!
//! # Rounding of σ²
//!
//! [`DiscreteGaussian::new`] takes σ as an `f64` and represents σ² exactly as a rational
//! n/2ᵏ rounded **up** from the exact square of that double: n has 45 bits (or, for
//! σ² ≥ 2⁴⁴, k = 0 and n = ⌈σ²⌉), so the sampler's variance parameter exceeds the requested
//! σ² by less than 2⁻⁴⁴ ≈ 6e-14 relative — never less noise than requested.
//!
//! # Truncation
//!
//! Outputs are `i64`. The samplers reject (and redraw) a candidate of magnitude ≥ 2⁶²,
//! so they sample *exactly* the distribution conditioned on |x| < 2⁶², which differs from
//! the untruncated one by less than exp(−2⁴³) in total variation for every supported σ
//! (and by less than exp(−2⁶²/t) for the discrete Laplace with scale t).
//!
//! # Speed
//!
//! Measured with `cargo bench -p dpgd-accounting --bench discrete_gaussian` (release build,
//! ChaCha20, one core of the 2-core development machine): 26,000 samples — one training
//! step's worth — take 6.6 ms at σ = 1e2, 6.8 ms at σ = 1e4 and 7.5 ms at σ = 1e7 (about
//! 0.26–0.29 µs per sample), far under the 100 ms budget of a step.
//!
//! [CKS20]: https://arxiv.org/abs/2004.00010
//! [Mir12]: https://doi.org/10.1145/2382196.2382264

use std::cmp::Ordering;

use rand::Rng;

use super::error::{AccountingError, Result};
use super::measure::Zcdp;
use super::numeric::{div_up, half_up, mul_up};

/// Candidates of magnitude at or above this are rejected (see the module's *Truncation*).
const MAGNITUDE_LIMIT: u128 = 1 << 62;

/// Bits of the numerator of σ² = n/2ᵏ (when σ² < 2⁴⁴; n is in [2⁴⁴, 2⁴⁵)).
const SIGMA2_BITS: i32 = 44;

/// An unsigned 256-bit integer: just the operations the samplers need.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct U256 {
    hi: u128,
    lo: u128,
}

impl U256 {
    const ZERO: U256 = U256 { hi: 0, lo: 0 };
    const ONE: U256 = U256 { hi: 0, lo: 1 };

    fn from_u128(lo: u128) -> Self {
        U256 { hi: 0, lo }
    }

    /// The exact product of two `u128`s.
    fn mul(a: u128, b: u128) -> Self {
        let (a1, a0) = (a >> 64, a & u128::from(u64::MAX));
        let (b1, b0) = (b >> 64, b & u128::from(u64::MAX));
        let (p00, p01, p10, p11) = (a0 * b0, a0 * b1, a1 * b0, a1 * b1);
        // Middle terms, each < 2¹²⁸; their sum may carry into bit 128 of `mid`.
        let (mid, carry_mid) = p01.overflowing_add(p10);
        let (lo, carry_lo) = p00.overflowing_add(mid << 64);
        let hi = p11 + (mid >> 64) + (u128::from(carry_mid) << 64) + u128::from(carry_lo);
        U256 { hi, lo }
    }

    fn bits(self) -> u32 {
        if self.hi != 0 { 256 - self.hi.leading_zeros() } else { 128 - self.lo.leading_zeros() }
    }

    /// `self − other`; callers guarantee `self ≥ other`.
    fn sub(self, other: U256) -> U256 {
        let (lo, borrow) = self.lo.overflowing_sub(other.lo);
        U256 { hi: self.hi.wrapping_sub(other.hi).wrapping_sub(u128::from(borrow)), lo }
    }

    fn add_one(self) -> U256 {
        let (lo, carry) = self.lo.overflowing_add(1);
        U256 { hi: self.hi.wrapping_add(u128::from(carry)), lo }
    }

    fn shl(self, n: u32) -> U256 {
        match n {
            0 => self,
            1..=127 => U256 { hi: (self.hi << n) | (self.lo >> (128 - n)), lo: self.lo << n },
            128..=255 => U256 { hi: self.lo << (n - 128), lo: 0 },
            _ => U256::ZERO,
        }
    }

    fn shr1(self) -> U256 {
        U256 { hi: self.hi >> 1, lo: (self.lo >> 1) | (self.hi << 127) }
    }

    fn set_bit(self, i: u32) -> U256 {
        if i < 128 { U256 { lo: self.lo | (1 << i), ..self } } else { U256 { hi: self.hi | (1 << (i - 128)), ..self } }
    }

    /// (⌊self/q⌋, self mod q) for q > 0, by shift-and-subtract over the quotient's bits.
    fn div_rem(self, q: U256) -> (U256, U256) {
        if self < q {
            return (U256::ZERO, self);
        }
        let shift = self.bits() - q.bits();
        let (mut d, mut r, mut quotient) = (q.shl(shift), self, U256::ZERO);
        for i in (0..=shift).rev() {
            if r >= d {
                r = r.sub(d);
                quotient = quotient.set_bit(i);
            }
            d = d.shr1();
        }
        (quotient, r)
    }
}

/// A uniform integer in `[0, n)` for `n ≥ 1`, by Lemire's multiply-and-reject method on raw
/// 64-bit words (exactly unbiased).
fn uniform_u64<R: Rng + ?Sized>(rng: &mut R, n: u64) -> u64 {
    if n <= 1 {
        return 0;
    }
    let threshold = n.wrapping_neg() % n; // 2⁶⁴ mod n: the words to reject
    loop {
        let m = u128::from(rng.next_u64()) * u128::from(n);
        if (m as u64) >= threshold {
            return (m >> 64) as u64;
        }
    }
}

/// A uniform integer in `[0, n)` for `n ≥ 1`: random words masked to `n`'s bit length,
/// rejected until below `n` (exactly unbiased; fewer than 2 tries on average).
fn uniform_u256<R: Rng + ?Sized>(rng: &mut R, n: U256) -> U256 {
    let bits = n.bits();
    loop {
        let mut words = [0u64; 4];
        for w in words.iter_mut().take(bits.div_ceil(64) as usize) {
            *w = rng.next_u64();
        }
        let lo = u128::from(words[0]) | (u128::from(words[1]) << 64);
        let hi = u128::from(words[2]) | (u128::from(words[3]) << 64);
        let x = mask(U256 { hi, lo }, bits);
        if x < n {
            return x;
        }
    }
}

/// The low `bits` bits of `x`.
fn mask(x: U256, bits: u32) -> U256 {
    match bits {
        0 => U256::ZERO,
        1..=127 => U256 { hi: 0, lo: x.lo & ((1u128 << bits) - 1) },
        128 => U256 { hi: 0, lo: x.lo },
        129..=255 => U256 { hi: x.hi & ((1u128 << (bits - 128)) - 1), lo: x.lo },
        _ => x,
    }
}

/// Bernoulli(p/q) for 0 ≤ p ≤ q, q ≥ 1: a uniform integer below q compared with p.
fn bernoulli_ratio<R: Rng + ?Sized>(rng: &mut R, p: U256, q: U256) -> bool {
    if p >= q {
        return true;
    }
    if p == U256::ZERO {
        return false;
    }
    if q.hi == 0 && q.lo <= u128::from(u64::MAX) {
        // Small bounds (every call from the Laplace sampler): one 64-bit draw.
        return u128::from(uniform_u64(rng, q.lo as u64)) < p.lo;
    }
    uniform_u256(rng, q) < p
}

/// Bernoulli(exp(−p/q)) for p/q ∈ [0, 1] ([CKS20] Algorithm 1, first case): K counts the
/// successes of Bernoulli(γ/K) draws, and the answer is whether K ends odd. Bernoulli(γ/K) is
/// drawn as Bernoulli(1/K) ∧ Bernoulli(p/q), independent draws whose product of
/// probabilities is p/(qK).
///
/// [CKS20]: https://arxiv.org/abs/2004.00010
fn bernoulli_exp_at_most_one<R: Rng + ?Sized>(rng: &mut R, p: U256, q: U256) -> bool {
    let mut k: u64 = 1;
    loop {
        let success = uniform_u64(rng, k) == 0 && bernoulli_ratio(rng, p, q);
        if !success {
            break;
        }
        // P(K > k) = γᵏ/k! ≤ 1/k!: overflow of a u64 count is not a practical concern, and
        // saturating keeps the loop finite whatever happens.
        k = k.saturating_add(1);
    }
    k % 2 == 1
}

/// Bernoulli(exp(−p/q)) for any p ≥ 0, q ≥ 1 ([CKS20] Algorithm 1): ⌊γ⌋ independent
/// Bernoulli(e⁻¹) draws must all succeed (stopping at the first failure), then one
/// Bernoulli(exp(−(γ − ⌊γ⌋))).
///
/// [CKS20]: https://arxiv.org/abs/2004.00010
fn bernoulli_exp_u256<R: Rng + ?Sized>(rng: &mut R, p: U256, q: U256) -> bool {
    if p <= q {
        return bernoulli_exp_at_most_one(rng, p, q);
    }
    let (whole, rest) = p.div_rem(q);
    // The loop stops at the first failure, which each draw has probability 1 − e⁻¹ ≈ 0.63
    // of being: the number of iterations is random (about 1.6 on average), not the size of
    // ⌊γ⌋.
    let mut i = U256::ZERO;
    while i < whole {
        if !bernoulli_exp_at_most_one(rng, U256::ONE, U256::ONE) {
            return false;
        }
        i = i.add_one();
    }
    bernoulli_exp_at_most_one(rng, rest, q)
}

/// An exact Bernoulli(exp(−γ)) sample for the rational γ = `numerator`/`denominator`
/// ([CKS20] Algorithm 1), using only integer arithmetic and uniform integers from `rng`.
///
/// ```
/// use dpgd_accounting::sampling::bernoulli_exp;
/// use rand::SeedableRng;
/// let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
/// let hits = (0..10_000).filter(|_| bernoulli_exp(1, 1, &mut rng).unwrap()).count();
/// assert!((hits as f64 / 10_000.0 - (-1.0f64).exp()).abs() < 0.02);
/// assert!(bernoulli_exp(0, 5, &mut rng).unwrap()); // exp(0) = 1
/// ```
///
/// # Errors
/// [`AccountingError::InvalidParameter`] naming `denominator` if it is 0.
///
/// [CKS20]: https://arxiv.org/abs/2004.00010
pub fn bernoulli_exp<R: Rng + ?Sized>(numerator: u128, denominator: u128, rng: &mut R) -> Result<bool> {
    if denominator == 0 {
        return Err(AccountingError::InvalidParameter {
            name: "denominator",
            value: 0.0,
            expected: "gamma = numerator / denominator needs a denominator of at least 1",
        });
    }
    Ok(bernoulli_exp_u256(rng, U256::from_u128(numerator), U256::from_u128(denominator)))
}

/// The discrete Laplace distribution on the integers with scale t: P(x) ∝ exp(−|x|/t)
/// ([CKS20] Algorithm 2 with s = 1), truncated to |x| < 2⁶² (see the module docs).
///
/// ```
/// use dpgd_accounting::sampling::DiscreteLaplace;
/// use rand::SeedableRng;
/// let lap = DiscreteLaplace::new(3).unwrap();
/// let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(2);
/// let mean_abs = (0..20_000).map(|_| lap.sample(&mut rng).abs() as f64).sum::<f64>() / 20_000.0;
/// // E|X| = 2e^{-1/t}/(1 - e^{-2/t}) for the discrete Laplace with scale t.
/// let t = 3.0f64;
/// let want = 2.0 * (-1.0 / t).exp() / (1.0 - (-2.0 / t).exp());
/// assert!((mean_abs - want).abs() < 0.1);
/// ```
///
/// [CKS20]: https://arxiv.org/abs/2004.00010
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiscreteLaplace {
    scale: u64,
}

impl DiscreteLaplace {
    /// The largest supported scale, 2⁴⁰ (about 1.1e12).
    pub const MAX_SCALE: u64 = 1 << 40;

    /// The discrete Laplace distribution with integer scale `scale` = t.
    ///
    /// # Errors
    /// [`AccountingError::InvalidParameter`] naming `scale` if it is 0 or above
    /// [`MAX_SCALE`](Self::MAX_SCALE).
    pub fn new(scale: u64) -> Result<Self> {
        if scale == 0 || scale > Self::MAX_SCALE {
            return Err(AccountingError::InvalidParameter {
                name: "scale",
                value: scale as f64,
                expected: "the discrete Laplace sampler supports integer scales from 1 to 2^40",
            });
        }
        Ok(Self { scale })
    }

    /// The scale t.
    #[must_use]
    pub fn scale(&self) -> u64 {
        self.scale
    }

    /// One sample.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> i64 {
        laplace(rng, self.scale)
    }
}

/// [CKS20] Algorithm 2 with s = 1: X = U + t·V with U uniform on {0, …, t−1} accepted with
/// probability exp(−U/t) and V geometric (the number of Bernoulli(e⁻¹) successes before the
/// first failure); a random sign, rejecting "−0".
///
/// [CKS20]: https://arxiv.org/abs/2004.00010
fn laplace<R: Rng + ?Sized>(rng: &mut R, t: u64) -> i64 {
    let big_t = U256::from_u128(u128::from(t));
    loop {
        let u = uniform_u64(rng, t);
        if !bernoulli_exp_at_most_one(rng, U256::from_u128(u128::from(u)), big_t) {
            continue;
        }
        // V stops at the first failure (probability 1 − e⁻¹ each); a V that makes X reach
        // the magnitude limit is rejected like any other candidate, which also bounds the loop.
        let max_v = (MAGNITUDE_LIMIT / u128::from(t)) as u64;
        let mut v: u64 = 0;
        while v <= max_v && bernoulli_exp_at_most_one(rng, U256::ONE, U256::ONE) {
            v += 1;
        }
        let x = u128::from(u) + u128::from(t) * u128::from(v);
        if x >= MAGNITUDE_LIMIT {
            continue;
        }
        let negative = rng.next_u64() & 1 == 1;
        if negative && x == 0 {
            continue;
        }
        // x < 2⁶², so it fits an i64 with either sign.
        let x = x as i64;
        return if negative { -x } else { x };
    }
}

/// The discrete Gaussian N_Z(0, σ²) on the integers, P(x) ∝ exp(−x²/(2σ²)), sampled exactly
/// ([CKS20] Algorithm 3): a discrete Laplace candidate Y with scale t = ⌊σ⌋ + 1 is accepted
/// with probability exp(−(|Y| − σ²/t)²/(2σ²)).
///
/// σ is in units of the integer grid (to add noise to a quantity measured in multiples of
/// 1/s, scale it by s first). See the [module docs](self) for the accounting, the rounding
/// of σ² (up, by less than 6e-14 relative) and the truncation at |x| < 2⁶².
///
/// ```
/// use dpgd_accounting::sampling::DiscreteGaussian;
/// use rand::SeedableRng;
/// let g = DiscreteGaussian::new(3.0).unwrap();
/// let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
/// let xs: Vec<i64> = (0..20_000).map(|_| g.sample(&mut rng)).collect();
/// let var = xs.iter().map(|&x| (x * x) as f64).sum::<f64>() / xs.len() as f64;
/// assert!((var - 9.0).abs() < 0.4);
/// ```
///
/// [CKS20]: https://arxiv.org/abs/2004.00010
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct DiscreteGaussian {
    sigma: f64,
    /// σ² = num / 2^den_log2 exactly (rounded up from `sigma²`).
    num: u128,
    den_log2: u32,
    /// The Laplace scale t = ⌊σ⌋ + 1 (of the rounded σ²).
    t: u64,
    /// 2·n·d·t², the denominator of the acceptance exponent.
    gamma_den: U256,
    /// t·d, the factor of |Y| in the exponent's numerator.
    td: u128,
}

impl DiscreteGaussian {
    /// The smallest supported σ (in grid units).
    pub const MIN_SIGMA: f64 = 1e-3;
    /// The largest supported σ (in grid units).
    pub const MAX_SIGMA: f64 = 1e12;

    /// N_Z(0, σ²) with σ in [`MIN_SIGMA`](Self::MIN_SIGMA) ..= [`MAX_SIGMA`](Self::MAX_SIGMA)
    /// grid units; σ² is represented exactly as a rational rounded up from `sigma * sigma`.
    ///
    /// # Errors
    /// [`AccountingError::InvalidParameter`] naming `sigma` if it is NaN or outside
    /// 1e-3 ..= 1e12 (below, the distribution is a point mass at 0 to within 1e-200000; above,
    /// the exact arithmetic would need more than 256 bits).
    pub fn new(sigma: f64) -> Result<Self> {
        if !(Self::MIN_SIGMA..=Self::MAX_SIGMA).contains(&sigma) {
            return Err(AccountingError::InvalidParameter {
                name: "sigma",
                value: sigma,
                expected: "the discrete Gaussian sampler supports sigma from 1e-3 to 1e12 grid units \
                           (rescale the query's grid to bring sigma into that range)",
            });
        }
        let (num, den_log2) = sigma_squared_up(sigma);
        // ⌊√(n/d)⌋ = ⌊√⌊n/d⌋⌋; σ ≤ 1e12 so t ≤ 1e12 + 1 < 2⁴⁰.
        let t = ((num >> den_log2).isqrt() + 1) as u64;
        let d = 1u128 << den_log2;
        // Bounds (see sigma_squared_up): n < 2⁸⁰, n·d < 2¹⁰⁹, t·d ≤ 2⁶⁴, t² < 2⁸¹, so every
        // product below fits its type.
        let gamma_den = U256::mul(2 * num * d, u128::from(t) * u128::from(t));
        Ok(Self { sigma, num, den_log2, t, gamma_den, td: u128::from(t) * d })
    }

    /// The requested σ.
    #[must_use]
    pub fn sigma(&self) -> f64 {
        self.sigma
    }

    /// The exact variance parameter the sampler uses, σ² = `numerator / 2^log2_denominator`,
    /// as `(numerator, log2_denominator)`; it is at least `sigma()²` (exactly), and exceeds
    /// it by less than 2⁻⁴⁴ relative.
    #[must_use]
    pub fn sigma_squared(&self) -> (u128, u32) {
        (self.num, self.den_log2)
    }

    /// The variance parameter as an `f64` (for statistics and tests; rounded to nearest).
    #[must_use]
    pub fn sigma_squared_f64(&self) -> f64 {
        self.num as f64 / (self.den_log2 as f64).exp2()
    }

    /// The zCDP guarantee of adding this noise independently to each coordinate of an
    /// integer-valued query with ℓ₂-sensitivity `l2_sensitivity`: Δ²/(2σ²) ([CKS20] Thm 14),
    /// rounded up and computed with the requested σ (the sampler's σ² is never smaller).
    ///
    /// # Errors
    /// [`AccountingError::InvalidParameter`] naming `sensitivity` if it is not a finite
    /// number > 0 or the cost overflows.
    ///
    /// [CKS20]: https://arxiv.org/abs/2004.00010
    pub fn zcdp(&self, l2_sensitivity: f64) -> Result<Zcdp> {
        let sensitivity = super::error::positive("sensitivity", l2_sensitivity)?;
        let ratio = div_up(sensitivity, self.sigma);
        Zcdp::new(half_up(mul_up(ratio, ratio))).map_err(|_| AccountingError::InvalidParameter {
            name: "sensitivity",
            value: l2_sensitivity,
            expected: "sensitivity^2 / (2 sigma^2) must be a finite number: the sensitivity is too large for this sigma",
        })
    }

    /// One sample from N_Z(0, σ²) (truncated to |x| < 2⁶², see the module docs).
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> i64 {
        loop {
            let y = laplace(rng, self.t);
            // γ = (|y| − σ²/t)²/(2σ²) = (|y|·t·d − n)² / (2·n·d·t²) with σ² = n/d.
            // |y| < 2⁶² and t·d ≤ 2⁶⁴, so |y|·t·d < 2¹²⁶ and its square < 2²⁵².
            let w = (u128::from(y.unsigned_abs()) * self.td).abs_diff(self.num);
            if bernoulli_exp_u256(rng, U256::mul(w, w), self.gamma_den) {
                return y;
            }
        }
    }

    /// Adds independent N_Z(0, σ²) noise to each value, saturating at the `i64` range.
    pub fn add_noise<R: Rng + ?Sized>(&self, values: &mut [i64], rng: &mut R) {
        for v in values {
            *v = v.saturating_add(self.sample(rng));
        }
    }
}

/// σ² for σ in [1e-3, 1e12], exactly, as (n, k) with σ² ≤ n/2ᵏ < σ²(1 + 2⁻⁴⁴): n ∈ [2⁴⁴, 2⁴⁵]
/// when σ² < 2⁴⁴ (so k ≤ 64, as σ² > 2⁻²⁰), else k = 0 and n = ⌈σ²⌉ < 2⁸⁰.
fn sigma_squared_up(sigma: f64) -> (u128, u32) {
    // σ = m·2^e exactly, with m a 53-bit integer (σ is a normal double in the range).
    let bits = sigma.to_bits();
    let m = u128::from((bits & ((1u64 << 52) - 1)) | (1u64 << 52));
    let e = ((bits >> 52) & 0x7ff) as i32 - 1075;
    let m2 = m * m; // < 2¹⁰⁶
    // ⌊log₂ σ²⌋ = bit length of m² − 1 + 2e.
    let log2 = (128 - m2.leading_zeros()) as i32 - 1 + 2 * e;
    let k = (SIGMA2_BITS - log2).max(0);
    // n = ⌈m²·2^(2e + k)⌉.
    let shift = 2 * e + k;
    let n = match shift.cmp(&0) {
        Ordering::Less => {
            let s = (-shift) as u32; // ≤ 106 − 44, since n ≥ 2⁴⁴
            (m2 >> s) + u128::from(m2 & ((1u128 << s) - 1) != 0)
        }
        _ => m2 << shift, // σ² < 2⁸⁰: no overflow
    };
    (n, k as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn u256_arithmetic_matches_u128_where_it_fits_and_checks_beyond() {
        let a = U256::mul(u128::MAX, u128::MAX);
        // (2¹²⁸ − 1)² = 2²⁵⁶ − 2¹²⁹ + 1.
        assert_eq!(a, U256 { hi: u128::MAX - 1, lo: 1 });
        let b = U256::mul(123_456_789_012_345, 987_654_321);
        assert_eq!(b, U256::from_u128(123_456_789_012_345 * 987_654_321));
        let (q, r) = a.div_rem(U256::from_u128(u128::MAX));
        assert_eq!((q, r), (U256::from_u128(u128::MAX), U256::ZERO));
        let (q, r) = U256::from_u128(1000).div_rem(U256::from_u128(7));
        assert_eq!((q, r), (U256::from_u128(142), U256::from_u128(6)));
        assert_eq!(U256::from_u128(u128::MAX).add_one(), U256 { hi: 1, lo: 0 });
        assert_eq!(U256 { hi: 1, lo: 0 }.sub(U256::ONE), U256::from_u128(u128::MAX));
        assert_eq!(U256::ONE.shl(200).bits(), 201);
        assert_eq!(mask(a, 129), U256 { hi: 0, lo: 1 });
    }

    #[test]
    fn sigma_squared_is_rounded_up_by_less_than_the_stated_bound() {
        for sigma in [1e-3, 0.7, 1.0, 3.0, 50.0, 1e2 + 0.1, 4.2e6, 1e7, 12345.678, 1e12] {
            let (n, k) = sigma_squared_up(sigma);
            // Compare n/2^k with sigma² exactly: n·2^-k ≥ m²·2^(2e) ⇔ n ≥ ⌈…⌉, checked in
            // floating point with a relative slack far below the bound.
            let approx = n as f64 / (k as f64).exp2();
            assert!(approx >= sigma * sigma * (1.0 - 1e-15), "{sigma}: {approx}");
            assert!(approx <= sigma * sigma * (1.0 + 2f64.powi(-44) + 1e-15), "{sigma}: {approx}");
            assert!(k <= 64 && n < 1 << 80);
        }
        // An exactly representable square is exact.
        assert_eq!(sigma_squared_up(3.0), (9u128 << 41, 41));
        assert_eq!(sigma_squared_up(1e12), (1_000_000_000_000_000_000_000_000, 0));
    }

    #[test]
    fn constructor_refuses_unsupported_sigmas_by_name() {
        for bad in [f64::NAN, 0.0, -1.0, 9e-4, 1.1e12, f64::INFINITY] {
            let e = DiscreteGaussian::new(bad).unwrap_err().to_string();
            assert!(e.contains("sigma") && e.contains("1e-3 to 1e12"), "{e}");
        }
        assert!(DiscreteLaplace::new(0).is_err());
        assert!(DiscreteLaplace::new(DiscreteLaplace::MAX_SCALE + 1).is_err());
        let mut rng = rand::rngs::SmallRng::seed_from_u64(0);
        assert!(bernoulli_exp(1, 0, &mut rng).is_err());
    }

    use rand::SeedableRng;
}
