//! Conversions from zCDP, Gaussian DP and RDP curves to approximate (ε, δ)-DP, and their
//! inverses (the largest ρ that still gives a target (ε, δ)).
//!
//! Three conversions, each selectable by name ([`Conversion`]):
//!
//! | name | formula | applies to |
//! |---|---|---|
//! | `bun-steinke` | ε = ρ + 2√(ρ ln(1/δ)) ([BS16, Prop. 1.3]; the B* of [FZ21, Thm 4.8]); for an RDP curve Mironov's ε = min_α ε(α) + ln(1/δ)/(α−1) ([FZ21, Fact 2.4]) | zCDP, GDP, RDP |
//! | `cks` | ε = min_{α>1} ε(α) + ln(1 − 1/α) − (ln δ + ln α)/(α − 1) ([CKS20, Prop. 12]; = [BBGHS20, Thm 21], as in Opacus) | zCDP, GDP, RDP |
//! | `gaussian-exact` | δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) ([BW18, Thm 8]; [DRS19, Cor. 2.13]) | GDP only |
//!
//! For every guarantee `gaussian-exact ≤ cks ≤ bun-steinke`.
//!
//! # Why `gaussian-exact` is valid for private GD with filtering ([FZ21, Algorithm 3])
//!
//! Fix an example xᵢ. Step t releases Σⱼ ḡₜ(xⱼ) + N(0, σ²C²I): with respect to adding or
//! removing xᵢ this is a Gaussian mechanism with sensitivity ‖ḡₜ(xᵢ)‖, i.e. μₜ-GDP with
//! μₜ = ‖ḡₜ(xᵢ)‖/(σC). μₜ is *predictable*: it depends on the data only through the
//! released θₜ. Algorithm 3 clips so that Σₜ‖ḡₜ(xᵢ)‖² ≤ B_norm on every run, hence
//! Σₜ μₜ² ≤ B_norm/(σ²C²) almost surely. The fully adaptive composition theorem for Gaussian
//! DP — the Gaussian-DP filter of [ST22] and its individual form in [KTH23, Thm 4.3] —
//! states that such a composition is μ-GDP with μ² = B_norm/(σ²C²), whatever the number of
//! steps. Its exact (ε, δ) curve is the one above. Note μ²/2 = B_norm/(2σ²C²) is exactly the
//! ρ of [FZ21, Prop. 5.1], so this conversion reports the same run with a smaller ε than the
//! paper's conversion. It is *not* valid for an arbitrary ρ-zCDP mechanism, which is why
//! [`Zcdp`] refuses it and only [`GaussianDp`] accepts it.
//!
//! # Exactness, and why a reported ε is never too small
//!
//! * `cks` on zCDP: the objective f(α) = ρα + ln(1−1/α) − (ln δ + ln α)/(α−1) has derivative
//!   f'(α) = ρ + ln(αδ)/(α−1)² (the other terms cancel), which is increasing on (1, 1/δ), so
//!   the minimiser is the unique root of ρ(α−1)² + ln α + ln δ = 0 — solved by bisection to
//!   relative tolerance [`SOLVE_REL_TOL`](super::numeric::SOLVE_REL_TOL), not on a grid.
//!   The bound holds at *every* α > 1, so the approximate minimiser can only overstate.
//! * `cks` on an RDP curve known at finitely many orders: RDP is non-decreasing in α, so
//!   between two listed orders ε(α) ≤ ε(α_{j+1}); and g(α) = ln(1−1/α) − ln(αδ)/(α−1) is
//!   decreasing for α < 1/δ. Hence the bound at any unlisted α is no better than at the next
//!   listed order, and the minimum over the listed orders *is* the exact optimum.
//! * **Rounding.** Every forward conversion (ρ, μ or an RDP curve → ε; μ, ε → δ) adds an
//!   explicit bound on its own floating-point error: [`ROUNDING_MARGIN`](super::numeric::ROUNDING_MARGIN) = 2⁻⁴⁶ ≈ 1.4e-14
//!   (128 ulps) times the magnitude of the terms it sums, weighted by their condition numbers
//!   (each function's doc gives its error analysis; the actual error is at most about 8 ulps
//!   of that magnitude). So the ε reported for a guarantee is never below the exact ε at
//!   the exact input doubles. Measured against 60-digit mpmath values at exact input doubles
//!   (`tests/reference/accounting_refs.py`, the `strict_*` rows: ρ from 1e-8 to 100, δ from
//!   1e-300 to 0.9): `bun-steinke` is overstated by 1.4e-14 relative, `cks` by 1.4e-14 to
//!   1.3e-9 (the larger where its terms nearly cancel, δ near 1), `gaussian-exact` by 2e-13
//!   to 1.2e-8 (the larger for tiny μ, where the two terms of δ(ε) nearly cancel), and δ(ε)
//!   itself by at most 5e-9; none is ever below the exact value.
//! * **Inverses** ([`Conversion::max_rho`], and through it every calibration) are solved
//!   by bracketing bisection on the forward conversion *with its margin*, and then confirmed
//!   with that forward conversion exactly as users call it: the ρ returned never gives more
//!   than the target ε, and is never above the exact inverse (measured: below it by 3e-14
//!   to 1.2e-8 relative).
//!
//! [ST22]: https://arxiv.org/abs/2210.17520

use std::fmt;
use std::str::FromStr;

use super::error::{AccountingError, Result, positive, probability};
use super::measure::{GaussianDp, Rdp, Zcdp};
use super::numeric::{
    add_up, confirm, half_up, increasing_root, largest_where, log_normal_cdf, mul_up, normal_cdf, smallest_where,
    sqrt_up, with_margin,
};

/// The smallest ρ an inverse conversion returns (and so the smallest budget that
/// [`Conversion::max_rho`] and the calibrations accept): below it ρ, σ = √(k/2ρ) and the
/// conversions lose their relative precision to underflow.
pub const MIN_RHO: f64 = 1e-300;

/// At most this many final confirmation steps in an inverse (each a few ulps).
const MAX_NUDGES: usize = 64;

/// ln(1/δ), computed as −ln δ so that a subnormal δ (where 1/δ overflows) stays finite.
fn log_inv(delta: f64) -> f64 {
    -delta.ln()
}

/// A named conversion from a Rényi-type guarantee to (ε, δ)-DP. See the [module docs](self).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Conversion {
    /// ε = ρ + 2√(ρ ln(1/δ)) ([BS16, Prop. 1.3]).
    BunSteinke,
    /// [CKS20, Prop. 12], optimised exactly over α.
    Cks,
    /// The exact (ε, δ) curve of μ-Gaussian DP ([BW18]). GDP guarantees only.
    ///
    /// [BW18]: https://arxiv.org/abs/1805.06530
    GaussianExact,
}

impl Conversion {
    /// All conversions, loosest first.
    pub const ALL: [Conversion; 3] = [Conversion::BunSteinke, Conversion::Cks, Conversion::GaussianExact];

    /// The conversion's name as used in configs and on the command line.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Conversion::BunSteinke => "bun-steinke",
            Conversion::Cks => "cks",
            Conversion::GaussianExact => "gaussian-exact",
        }
    }

    /// The largest ρ such that a ρ-zCDP guarantee converts to at most (ε, δ) under this
    /// conversion. For `gaussian-exact` this is μ²/2 for the largest μ-GDP with
    /// δ_μ(ε) ≤ δ, so it only applies to compositions of Gaussian mechanisms.
    ///
    /// ```
    /// use dpgd_accounting::Conversion;
    /// let rho = Conversion::Cks.max_rho(1.0, 1e-5).unwrap().rho();
    /// assert!(rho > Conversion::BunSteinke.max_rho(1.0, 1e-5).unwrap().rho());
    /// ```
    ///
    /// # Errors
    /// [`AccountingError::InvalidParameter`] naming `epsilon` (not a finite number > 0, or so
    /// small that ρ would be below [`MIN_RHO`] — e.g. ε = 1e-200 — or so large that ρ
    /// would not be finite) or `delta` (not in (0, 1)); [`AccountingError::NoSolution`] if the
    /// inverse cannot be confirmed by the forward conversion.
    pub fn max_rho(self, epsilon: f64, delta: f64) -> Result<Zcdp> {
        let epsilon = positive("epsilon", epsilon)?;
        let delta = probability("delta", delta)?;
        // Every conversion's ρ is at least bun-steinke's closed form, which is below MIN_RHO
        // only for tiny ε: refuse those before any solver runs.
        let floor = bun_steinke_max_rho(epsilon, delta);
        if floor.is_nan() || floor < MIN_RHO {
            return Err(AccountingError::InvalidParameter {
                name: "epsilon",
                value: epsilon,
                expected: "is below what can be calibrated at this delta: the largest rho reaching it \
                           would be below 1e-300 (sigma would exceed about 1e150 per unit of sensitivity)",
            });
        }
        let rho = match self {
            Conversion::BunSteinke => bun_steinke_max_rho(epsilon, delta),
            Conversion::Cks => cks_max_rho(epsilon, delta),
            Conversion::GaussianExact => {
                let mu = gaussian_max_mu(epsilon, delta);
                half_up(mul_up(mu, mu))
            }
        };
        if !rho.is_finite() {
            return Err(AccountingError::InvalidParameter {
                name: "epsilon",
                value: epsilon,
                expected: "is above what can be inverted: the largest rho reaching it is not a finite number",
            });
        }
        // Final rounding: the closest ρ below where the forward conversion, exactly as users
        // call it, confirms the target (closed forms and solves each carry rounding error).
        let rho = confirm(rho, false, |r| self.zcdp_epsilon(r, delta) <= epsilon).ok_or(
            AccountingError::NoSolution("the inverse conversion could not be confirmed by the forward conversion"),
        )?;
        Zcdp::new(rho).map_err(|_| AccountingError::NoSolution("no positive rho reaches this (epsilon, delta)"))
    }

    /// The forward conversion of ρ (for `gaussian-exact`: of the Gaussian composition with μ = √(2ρ)).
    fn zcdp_epsilon(self, rho: f64, delta: f64) -> f64 {
        match self {
            Conversion::BunSteinke => bun_steinke_epsilon(rho, delta),
            Conversion::Cks => cks_epsilon(rho, delta),
            Conversion::GaussianExact => gaussian_epsilon(sqrt_up(2.0 * rho), delta),
        }
    }
}

impl fmt::Display for Conversion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Conversion {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        Conversion::ALL.into_iter().find(|c| c.name() == s).ok_or_else(|| {
            format!("unknown conversion method `{s}`; expected one of: bun-steinke, cks, gaussian-exact")
        })
    }
}

/// A guarantee that converts to approximate DP.
pub trait ToApproxDp {
    /// The smallest ε such that the guarantee implies (ε, δ)-DP under `method`, never below
    /// the exact value (see the [module docs](self#exactness-and-why-a-reported-ε-is-never-too-small));
    /// +∞ for a vacuous guarantee.
    ///
    /// # Errors
    /// [`AccountingError::InvalidParameter`] naming `delta` if it is not in (0, 1);
    /// [`AccountingError::Unsupported`] for `gaussian-exact` on anything but [`GaussianDp`].
    fn epsilon(&self, delta: f64, method: Conversion) -> Result<f64>;
}

impl ToApproxDp for Zcdp {
    fn epsilon(&self, delta: f64, method: Conversion) -> Result<f64> {
        let delta = probability("delta", delta)?;
        match method {
            Conversion::BunSteinke | Conversion::Cks => Ok(method.zcdp_epsilon(self.rho(), delta)),
            Conversion::GaussianExact => Err(AccountingError::Unsupported {
                method: "gaussian-exact",
                guarantee: "a general zCDP guarantee",
                why: "it is exact only for compositions of Gaussian mechanisms; wrap such a guarantee \
                      as GaussianDp::from_gaussian_zcdp, or use `cks`",
            }),
        }
    }
}

impl ToApproxDp for GaussianDp {
    fn epsilon(&self, delta: f64, method: Conversion) -> Result<f64> {
        let delta = probability("delta", delta)?;
        match method {
            Conversion::GaussianExact => Ok(gaussian_epsilon(self.mu(), delta)),
            _ => Ok(method.zcdp_epsilon(self.to_zcdp().rho(), delta)),
        }
    }
}

impl ToApproxDp for Rdp {
    fn epsilon(&self, delta: f64, method: Conversion) -> Result<f64> {
        let delta = probability("delta", delta)?;
        let at = |(a, e): (&f64, &f64)| match method {
            // [FZ21, Fact 2.4] ([Mir17, Prop. 3]). Two positive terms, each within 2 ulps.
            Conversion::BunSteinke => {
                let tail = log_inv(delta) / (a - 1.0);
                Ok(with_margin(e + tail, e + tail))
            }
            Conversion::Cks => Ok(cks_at_order(*a, *e, delta)),
            Conversion::GaussianExact => Err(AccountingError::Unsupported {
                method: "gaussian-exact",
                guarantee: "an RDP curve",
                why: "an RDP curve does not determine the (epsilon, delta) curve; use `cks`",
            }),
        };
        let mut best = f64::INFINITY;
        for p in self.orders().iter().zip(self.epsilons()) {
            best = best.min(at(p)?);
        }
        Ok(best.max(0.0))
    }
}

/// `bun-steinke`: ε = ρ + 2√(ρ ln(1/δ)) ([BS16, Prop. 1.3]), never below the
/// exact value.
///
/// Error analysis: ln is within 1 ulp, the product, root and sum add 1.5 ulps, so the
/// computed sum is within 3 ulps of ρ + 2√(ρL); the [`ROUNDING_MARGIN`](super::numeric::ROUNDING_MARGIN) of 128 ulps of
/// that sum is added.
#[must_use]
pub fn bun_steinke_epsilon(rho: f64, delta: f64) -> f64 {
    let eps = rho + 2.0 * (rho * log_inv(delta)).sqrt();
    with_margin(eps, eps)
}

/// Inverse of [`bun_steinke_epsilon`]: the largest ρ with `bun_steinke_epsilon(ρ, δ) ≤ ε`,
/// i.e. ρ = (√(ln(1/δ)+ε) − √ln(1/δ))², the B* printed in [FZ21, Thm 4.8]. Evaluated as
/// (ε/(√(L+ε)+√L))² to avoid cancellation when ε ≪ L, then lowered until the forward
/// conversion (with its margin) confirms it, so it never overstates the budget. NaN if no
/// positive ρ is confirmed (invalid inputs).
#[must_use]
pub fn bun_steinke_max_rho(epsilon: f64, delta: f64) -> f64 {
    let l = log_inv(delta);
    let closed = (epsilon / ((l + epsilon).sqrt() + l.sqrt())).powi(2);
    if closed.is_nan() || closed <= 0.0 {
        return closed;
    }
    confirm(closed, false, |r| bun_steinke_epsilon(r, delta) <= epsilon).unwrap_or(f64::NAN)
}

/// The `cks` bound at a single order, ε(α) + ln(1 − 1/α) − (ln δ + ln α)/(α − 1), never
/// below the exact value: each of the four terms is within 3 ulps, the sums add 3 ulps of
/// the magnitude T = Σ|terms|, and [`ROUNDING_MARGIN`](super::numeric::ROUNDING_MARGIN)·T is added.
fn cks_at_order(alpha: f64, rdp: f64, delta: f64) -> f64 {
    let x = alpha - 1.0;
    let (log_x, log_a, l) = (x.ln(), alpha.ln(), log_inv(delta));
    let tail = (l - log_a) / x;
    let eps = rdp + (log_x - log_a) + tail;
    let magnitude = rdp + log_x.abs() + log_a.abs() + (l + log_a.abs()) / x;
    with_margin(eps, magnitude)
}

/// `cks` for ρ-zCDP, minimised over α (see the [module docs](self#exactness)), never below
/// the exact optimum.
///
/// The bound of CKS20 holds at *every* order α > 1, so evaluating it at the solver's α —
/// within [`SOLVE_REL_TOL`](super::numeric::SOLVE_REL_TOL) of the optimum — can only
/// overstate; the evaluation's rounding (at most 8 ulps of T = Σ|terms|) is covered by
/// adding [`ROUNDING_MARGIN`](super::numeric::ROUNDING_MARGIN)·T.
///
/// Defined for every input: ρ = 0 gives 0, ρ = +∞ gives +∞, and NaN, a negative ρ or a δ
/// outside (0, 1) give NaN.
#[must_use]
pub fn cks_epsilon(rho: f64, delta: f64) -> f64 {
    if !(rho >= 0.0 && delta > 0.0 && delta < 1.0) {
        return f64::NAN;
    }
    if rho == 0.0 || rho == f64::INFINITY {
        return rho;
    }
    let l = log_inv(delta);
    // Optimality: ρx² + ln(1+x) − ln(1/δ) = 0 in x = α − 1, increasing in x; the root lies in
    // (0, min(√(L/ρ), e^L − 1)] because ρx² = L at the first bound and ln(1+x) = L at the
    // second; f64::MAX caps a bound that overflows (ρx² is then far above L).
    let hi = (l / rho).sqrt().min(l.exp_m1()).min(f64::MAX);
    let x = increasing_root(0.0, hi, |x| rho * x * x + x.ln_1p() - l);
    // The bound at α = 1 + x (the real number, whatever x is): ρ(1 + x) + ln x − ln(1 + x)
    // + (L − ln(1 + x))/x.
    let (log_x, log_1p) = (x.ln(), x.ln_1p());
    let terms = [rho, rho * x, log_x, -log_1p, (l - log_1p) / x];
    let eps: f64 = terms.iter().sum();
    let magnitude = rho + rho * x + log_x.abs() + log_1p + (l + log_1p) / x;
    with_margin(eps, magnitude).max(0.0)
}

/// Inverse of [`cks_epsilon`]: the largest ρ whose `cks` ε is at most `epsilon`.
fn cks_max_rho(epsilon: f64, delta: f64) -> f64 {
    // `cks` ≤ `bun-steinke`, so the bun-steinke ρ already satisfies the target; it is the
    // fallback when the bracket cannot be grown (ρ near f64::MAX).
    let lo = bun_steinke_max_rho(epsilon, delta);
    largest_where(lo, (2.0 * lo).min(f64::MAX), |rho| cks_epsilon(rho, delta) <= epsilon).unwrap_or(lo)
}

/// The exact privacy profile of μ-GDP, δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2)
/// ([BW18, Thm 8]; [DRS19, Cor. 2.13]), never below the exact value.
/// The second term is formed in log space so that e^ε never overflows before the tail
/// underflows.
///
/// Error analysis, with S = ε/μ + μ/2 (so both arguments x of Φ have |x| ≤ S): each argument
/// is within 2 ulps of S; since φ(x)/Φ(x) ≤ |x| + 1, that moves each Φ by at most
/// 2(S + 1)² ulps relatively, and `erfc` adds a few more; the log-space product adds
/// (ε + 2|ln Φ|) ulps to the second term, whose ln Φ comes from
/// [`log_normal_cdf`] so that it never goes through a
/// subnormal Φ. The [`ROUNDING_MARGIN`](super::numeric::ROUNDING_MARGIN) of 128 ulps of (S + 1)²·(a + b) + b·(ε + 2|ln Φ|) is
/// added (a, b the two terms), plus 64 subnormal ulps for a result below the normal range.
/// The margin is below 1e-13 of δ unless
/// the two terms nearly cancel (small μ): it stays below 1e-8 of δ for the δ ≥ 1e-300 and
/// μ ≥ 0.01 that the tests cover.
///
/// NaN for NaN inputs or μ ≤ 0; only the tiny absolute margin when ε = +∞.
#[must_use]
pub fn gaussian_delta(mu: f64, epsilon: f64) -> f64 {
    if mu.is_nan() || mu <= 0.0 || epsilon.is_nan() {
        return f64::NAN;
    }
    let q = epsilon / mu;
    let (xa, xb) = (-q + 0.5 * mu, -q - 0.5 * mu);
    let a = normal_cdf(xa);
    // ln Φ(x_b) directly, so that the second term keeps its relative precision even where
    // Φ(x_b) itself would underflow (ε large, δ near 1e-300).
    let log_tail = log_normal_cdf(xb);
    let b = if log_tail > f64::NEG_INFINITY { (epsilon + log_tail).exp() } else { 0.0 };
    let d = a - b;
    if d.is_nan() {
        return d;
    }
    let s1 = q.abs() + 0.5 * mu + 1.0;
    let magnitude = s1 * s1 * (a + b) + b * (epsilon.abs() + 2.0 * log_tail.abs());
    // A term below the normal range keeps only an absolute precision of a few subnormal ulps.
    add_up(with_margin(d.max(0.0), magnitude), 64.0 * f64::from_bits(1))
}

/// The smallest ε with `gaussian_delta(mu, ε) ≤ delta` (0 if already true at ε = 0): since
/// [`gaussian_delta`] never understates δ, this ε never understates the exact one. It is
/// also never above the `cks` ε of (μ²/2)-zCDP, a valid bound for μ-GDP that is returned when
/// the exact curve cannot resolve `delta` (δ below about 1e-322).
///
/// Defined for every input: μ = +∞ (or a μ whose ρ = μ²/2 overflows) gives +∞; NaN, μ ≤ 0 or
/// δ outside (0, 1) give NaN.
#[must_use]
pub fn gaussian_epsilon(mu: f64, delta: f64) -> f64 {
    if !(mu > 0.0 && delta > 0.0 && delta < 1.0) {
        return f64::NAN;
    }
    let holds = |e: f64| gaussian_delta(mu, e) <= delta;
    if holds(0.0) {
        return 0.0;
    }
    // The exact curve is below `cks`, so the cks ε is an upper bracket unless the margins
    // make the two touch: then grow it a bounded number of times.
    let cks = cks_epsilon(half_up(mul_up(mu, mu)), delta);
    if !cks.is_finite() {
        return f64::INFINITY;
    }
    let mut hi = cks.max(f64::MIN_POSITIVE);
    for _ in 0..MAX_NUDGES {
        if !hi.is_finite() || holds(hi) {
            break;
        }
        hi *= 2.0;
    }
    // NaN: no bracket satisfies the predicate (δ too small for the exact curve).
    let e = smallest_where(0.5 * hi, hi, holds);
    if e.is_nan() { cks } else { e.min(cks) }
}

/// The largest μ with `gaussian_delta(μ, epsilon) ≤ delta` (at least the μ of the `cks`
/// inverse, which is valid for Gaussian DP too).
fn gaussian_max_mu(epsilon: f64, delta: f64) -> f64 {
    let lo = (2.0 * cks_max_rho(epsilon, delta)).sqrt();
    largest_where(lo, (2.0 * lo).min(f64::MAX), |mu| gaussian_delta(mu, epsilon) <= delta).unwrap_or(lo)
}
