//! Conversions from zCDP, Gaussian DP and RDP curves to approximate (ε, δ)-DP, and their
//! inverses (the largest ρ that still gives a target (ε, δ)).
//!
//! Three conversions, each selectable by name ([`Conversion`]):
//!
//! | name | formula | applies to |
//! |---|---|---|
//! | `bun-steinke` | ε = ρ + 2√(ρ ln(1/δ)) (Bun & Steinke 2016, Prop. 1.3; the B* of 001 Thm 4.8); for an RDP curve Mironov's ε = min_α ε(α) + ln(1/δ)/(α−1) (001 Fact 2.4) | zCDP, GDP, RDP |
//! | `cks` | ε = min_{α>1} ε(α) + ln(1 − 1/α) − (ln δ + ln α)/(α − 1) (Canonne, Kamath & Steinke 2020, Prop. 12; = Balle et al. 2020, Thm 21, as in Opacus) | zCDP, GDP, RDP |
//! | `gaussian-exact` | δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2) (Balle & Wang 2018, Thm 8; Dong, Roth & Su 2022, Cor. 2.13) | GDP only |
//!
//! For every guarantee `gaussian-exact ≤ cks ≤ bun-steinke`.
//!
//! # Why `gaussian-exact` is valid for private GD with filtering (001 Algorithm 3)
//!
//! Fix an example xᵢ. Step t releases Σⱼ ḡₜ(xⱼ) + N(0, σ²C²I): with respect to adding or
//! removing xᵢ this is a Gaussian mechanism with sensitivity ‖ḡₜ(xᵢ)‖, i.e. μₜ-GDP with
//! μₜ = ‖ḡₜ(xᵢ)‖/(σC). μₜ is *predictable*: it depends on the data only through the
//! released θₜ. Algorithm 3 clips so that Σₜ‖ḡₜ(xᵢ)‖² ≤ B_norm on every run, hence
//! Σₜ μₜ² ≤ B_norm/(σ²C²) almost surely. The fully adaptive composition theorem for Gaussian
//! DP — the Gaussian-DP filter of Smith & Thakurta (2022, "Fully adaptive composition for
//! Gaussian differential privacy") and its individual form in Koskela, Tobaben & Honkela
//! (2023, "Individual privacy accounting with Gaussian differential privacy", Thm 4.3) —
//! states that such a composition is μ-GDP with μ² = B_norm/(σ²C²), whatever the number of
//! steps. Its exact (ε, δ) curve is the one above. Note μ²/2 = B_norm/(2σ²C²) is exactly the
//! ρ of 001 Prop. 5.1, so this conversion reports the same run with a smaller ε than the
//! paper's conversion. It is *not* valid for an arbitrary ρ-zCDP mechanism, which is why
//! [`Zcdp`] refuses it and only [`GaussianDp`] accepts it.
//!
//! # Exactness
//!
//! * `cks` on zCDP: the objective f(α) = ρα + ln(1−1/α) − (ln δ + ln α)/(α−1) has derivative
//!   f'(α) = ρ + ln(αδ)/(α−1)² (the other terms cancel), which is increasing on (1, 1/δ), so
//!   the minimiser is the unique root of ρ(α−1)² + ln α + ln δ = 0 — solved by bisection to
//!   relative tolerance [`SOLVE_REL_TOL`](super::numeric::SOLVE_REL_TOL), not on a grid.
//! * `cks` on an RDP curve known at finitely many orders: RDP is non-decreasing in α, so
//!   between two listed orders ε(α) ≤ ε(α_{j+1}); and g(α) = ln(1−1/α) − ln(αδ)/(α−1) is
//!   decreasing for α < 1/δ. Hence the bound at any unlisted α is no better than at the next
//!   listed order, and the minimum over the listed orders *is* the exact optimum.
//! * Inverses are solved by bracketing bisection and return the conservative end: the ρ
//!   returned never gives more than the target ε.

use std::fmt;
use std::str::FromStr;

use super::error::{AccountingError, Result, positive, probability};
use super::measure::{GaussianDp, Rdp, Zcdp};
use super::numeric::{confirm, half_up, increasing_root, largest_where, mul_up, normal_cdf, smallest_where, sqrt_up};

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
    /// ε = ρ + 2√(ρ ln(1/δ)) (Bun & Steinke 2016, Prop. 1.3).
    BunSteinke,
    /// Canonne, Kamath & Steinke 2020, Prop. 12, optimised exactly over α.
    Cks,
    /// The exact (ε, δ) curve of μ-Gaussian DP (Balle & Wang 2018). GDP guarantees only.
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
    /// The smallest ε such that the guarantee implies (ε, δ)-DP under `method`.
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
            // 001 Fact 2.4 (Mironov 2017, Prop. 3).
            Conversion::BunSteinke => Ok(e + log_inv(delta) / (a - 1.0)),
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

/// `bun-steinke`: ε = ρ + 2√(ρ ln(1/δ)) (Bun & Steinke 2016, Prop. 1.3).
#[must_use]
pub fn bun_steinke_epsilon(rho: f64, delta: f64) -> f64 {
    rho + 2.0 * (rho * log_inv(delta)).sqrt()
}

/// Inverse of [`bun_steinke_epsilon`] in closed form: ρ = (√(ln(1/δ)+ε) − √ln(1/δ))², the B*
/// printed in 001 Thm 4.8. Written as (ε/(√(L+ε)+√L))² to avoid cancellation when ε ≪ L.
#[must_use]
pub fn bun_steinke_max_rho(epsilon: f64, delta: f64) -> f64 {
    let l = log_inv(delta);
    (epsilon / ((l + epsilon).sqrt() + l.sqrt())).powi(2)
}

/// The `cks` bound at a single order: ε(α) + ln(1 − 1/α) − (ln δ + ln α)/(α − 1).
fn cks_at_order(alpha: f64, rdp: f64, delta: f64) -> f64 {
    let x = alpha - 1.0;
    rdp + (x.ln() - alpha.ln()) - (delta.ln() + alpha.ln()) / x
}

/// `cks` for ρ-zCDP, minimised exactly over α (see the [module docs](self#exactness)).
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
    let alpha = 1.0 + x;
    let eps = rho * alpha + (x.ln() - x.ln_1p()) - (delta.ln() + x.ln_1p()) / x;
    eps.max(0.0)
}

/// Inverse of [`cks_epsilon`]: the largest ρ whose `cks` ε is at most `epsilon`.
fn cks_max_rho(epsilon: f64, delta: f64) -> f64 {
    // `cks` ≤ `bun-steinke`, so the bun-steinke ρ already satisfies the target; it is the
    // fallback when the bracket cannot be grown (ρ near f64::MAX).
    let lo = bun_steinke_max_rho(epsilon, delta);
    largest_where(lo, (2.0 * lo).min(f64::MAX), |rho| cks_epsilon(rho, delta) <= epsilon).unwrap_or(lo)
}

/// The exact privacy profile of μ-GDP: δ(ε) = Φ(−ε/μ + μ/2) − e^ε Φ(−ε/μ − μ/2)
/// (Balle & Wang 2018, Thm 8; Dong, Roth & Su 2022, Cor. 2.13). The second term is
/// formed in log space so that e^ε never overflows before the tail underflows.
///
/// NaN for NaN inputs or μ ≤ 0; 0 when ε = +∞.
#[must_use]
pub fn gaussian_delta(mu: f64, epsilon: f64) -> f64 {
    if mu.is_nan() || mu <= 0.0 || epsilon.is_nan() {
        return f64::NAN;
    }
    let a = normal_cdf(-epsilon / mu + 0.5 * mu);
    let tail = normal_cdf(-epsilon / mu - 0.5 * mu);
    let b = if tail > 0.0 { (epsilon + tail.ln()).exp() } else { 0.0 };
    let d = a - b;
    if d.is_nan() { d } else { d.max(0.0) }
}

/// The smallest ε with `gaussian_delta(mu, ε) ≤ delta` (0 if already true at ε = 0).
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
    // The exact curve is below `cks`, so the cks ε is a valid upper bracket; grow it (a
    // bounded number of times) if rounding makes the two touch.
    let mut hi = cks_epsilon(half_up(mul_up(mu, mu)), delta).max(f64::MIN_POSITIVE);
    for _ in 0..MAX_NUDGES {
        if !hi.is_finite() || holds(hi) {
            break;
        }
        hi *= 2.0;
    }
    if !hi.is_finite() {
        return f64::INFINITY;
    }
    let e = smallest_where(0.5 * hi, hi, holds);
    // NaN: the bracket never satisfied the predicate; the cks value is still a valid bound.
    if e.is_nan() { cks_epsilon(half_up(mul_up(mu, mu)), delta) } else { e }
}

/// The largest μ with `gaussian_delta(μ, epsilon) ≤ delta` (at least the μ of the `cks`
/// inverse, which is valid for Gaussian DP too).
fn gaussian_max_mu(epsilon: f64, delta: f64) -> f64 {
    let lo = (2.0 * cks_max_rho(epsilon, delta)).sqrt();
    largest_where(lo, (2.0 * lo).min(f64::MAX), |mu| gaussian_delta(mu, epsilon) <= delta).unwrap_or(lo)
}
