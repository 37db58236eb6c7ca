//! The white-box audit of a Poisson-sampled Gaussian mechanism (DP-SGD) from every canary's
//! per-step noisy sums, after the distributional view of Agrawal, Wei, Singh, Magdon-Ismail &
//! Zikas 2026 ("Let's Ask Gauss: improved one-run privacy auditing"): a canary's signal summed
//! over many steps is close to Gaussian, so the included and excluded canaries' scores can be
//! compared by their means and spreads rather than only through guesses.
//!
//! **One step.** A canary's noisy sum at a step, in units of the noise's claimed standard
//! deviation σC, is o = b·μ + z: b ~ Bernoulli(q) whether the step sampled it, μ = 1/σ its
//! clipped gradient C in those units, z ~ N(0, 1). An excluded canary's is z (zero-out
//! neighbours: DP-SGD's). The log-likelihood ratio of the two,
//!
//! ℓ(o) = ln((1 − q) + q·e^{μo − μ²/2}),
//!
//! is the Neyman–Pearson statistic of one step ([`StepLikelihood`]), and a canary's score is
//! its sum over the T steps of the run.
//!
//! **The family.** The claim is one member of a family: every step's noise N(0, (σ/θ)²C²),
//! θ = 1 as claimed, θ > 1 less noise than claimed. Under member θ, o = b·μ + z/θ, and the
//! scores' *standardised difference*
//!
//! d(θ) = √T·(E_in ℓ − E_out ℓ)/sd_out(ℓ)
//!
//! (one step's mean under the included and excluded laws of o, and its standard deviation
//! under the excluded one; steps are independent, so T steps multiply the difference by T and
//! the variance by T) is computed by numerical integration ([`SampledCanaries::difference`]).
//! It rises with θ (tested on a grid): less noise, canaries easier to tell apart.
//!
//! **The bound.** The m canaries' coins are independent fair coins and every canary's
//! coordinate gets its own noise, so the scores are independent. The sample standardised
//! difference d̂ = (mean_in − mean_out)/sd_out is asymptotically normal about d(θ) — the central
//! limit theorem over the canaries, whatever the scores' own law — with the delta method's
//! standard error ([`standardized_difference_lower`]). d̂ − z·SE is a lower confidence bound on
//! d(θ), and θ_lower = d⁻¹(d̂ − z·SE) one on θ ([`SampledCanaries::noise_scale_lower`]): the
//! run behaves as if its noise were at most σ/θ_lower. θ_lower above 1 refutes the claim. Its
//! ε is that of the T steps of the Poisson-sampled Gaussian at noise σ/θ_lower
//! ([`SampledCanaries::epsilon`]: what the canaries saw, not the run's releases).
//!
//! **What it rests on.** The normal approximation over m canaries (asymptotic, not exact at
//! finite m; its coverage is tested on simulated DP-SGD canaries) and the family: a break that
//! changes the noise's law but not its scale, or the sampling's rate, shows only through d̂, and
//! is measured as the noise scale that would explain it. So it is a tighter but weaker audit
//! than [`one_run`](super::one_run)'s and [`fdp`](super::fdp)'s analyses, which hold for any
//! mechanism; dpgd reports it beside them and lets only those decide whether a run is
//! consistent with its claim.
//!
//! ```
//! use dpgd_accounting::audit::likelihood::SampledCanaries;
//! // DP-SGD's canaries at q = 0.004, σ = 0.9, over 3,750 steps: as claimed, d(1) ≈ 0.382 —
//! // a bound of 0.382 on d is a bound of 1 on θ.
//! let c = SampledCanaries::new(0.004, 0.9, 3750).unwrap();
//! let d = c.difference(1.0);
//! assert!((d - 0.382).abs() < 0.001, "{d}");
//! assert!((c.noise_scale_lower(d) - 1.0).abs() < 1e-6);
//! ```

use super::normal_quantile;
use crate::error::{AccountingError, Result};
use crate::event::DpEvent;

/// One step's log-likelihood ratio of a canary's noisy sum o (in units of σC) when it is
/// included against excluded: included, o ~ (1 − q)·N(0, 1) + q·N(μ, 1); excluded, N(0, 1)
/// (zero-out) or (1 − q)·N(0, 1) + q·N(−μ, 1) (replace-one: the opposite canary).
#[derive(Debug, Clone, Copy)]
pub struct StepLikelihood {
    ln_q: f64,
    ln_rest: f64,
    mu: f64,
    replace: bool,
}

impl StepLikelihood {
    /// The ratio at sampling rate `q` ∈ (0, 1] and shift `mu` ≥ 0 (the canary's clipped
    /// gradient over the noise's standard deviation), under replace-one neighbours when
    /// `replace`.
    ///
    /// # Errors
    /// [`AccountingError::InvalidParameter`] naming `q` or `mu`.
    pub fn new(q: f64, mu: f64, replace: bool) -> Result<Self> {
        if !(q > 0.0 && q <= 1.0) {
            return Err(AccountingError::InvalidParameter { name: "q", value: q, expected: "a rate in (0, 1]" });
        }
        if !(mu.is_finite() && mu >= 0.0) {
            return Err(AccountingError::InvalidParameter { name: "mu", value: mu, expected: "a finite shift ≥ 0" });
        }
        Ok(Self { ln_q: q.ln(), ln_rest: (-q).ln_1p(), mu, replace })
    }

    /// ln((1 − q) + q·e^{s·μo − μ²/2}) for the sign `s`, without overflow (at q = 1, the
    /// first term is ln 0 = −∞ and the sum the second's).
    fn mixture(&self, s: f64, o: f64) -> f64 {
        let (a, b) = (self.ln_rest, self.ln_q + s * self.mu * o - self.mu * self.mu / 2.0);
        if a == f64::NEG_INFINITY {
            return b;
        }
        a.max(b) + (-(a - b).abs()).exp().ln_1p()
    }

    /// ℓ(o), finite for every finite o.
    #[must_use]
    pub fn at(&self, o: f64) -> f64 {
        let out = if self.replace { self.mixture(-1.0, o) } else { 0.0 };
        self.mixture(1.0, o) - out
    }
}

/// The audit's model of DP-SGD's canaries under zero-out neighbours: each step samples a canary
/// with probability q and adds N(0, σ²C²) noise to its coordinate, over T steps ([module](self)).
#[derive(Debug, Clone, Copy)]
pub struct SampledCanaries {
    q: f64,
    sigma: f64,
    steps: u64,
    step: StepLikelihood,
}

/// Half-width of the integration interval in standard deviations: φ(13) ≈ 10⁻³⁷.
const REACH: f64 = 13.0;
/// Points per unit of ℓ's own scale (θ/μ in the standard normal's units), and at least per
/// standard deviation.
const PER_SCALE: f64 = 8.0;
/// The bisection's range of θ and its relative tolerance.
const THETA_RANGE: (f64, f64) = (1e-3, 1e3);

impl SampledCanaries {
    /// Canaries sampled at rate `q` ∈ (0, 1], noise multiplier `sigma`, over `steps` ≥ 1 steps.
    ///
    /// # Errors
    /// [`AccountingError::InvalidParameter`] naming `q`, `sigma` (not finite and positive, or
    /// below 0.05: a shift beyond 20 noise deviations, where the integration's grid would be
    /// needlessly fine) or `steps`.
    pub fn new(q: f64, sigma: f64, steps: u64) -> Result<Self> {
        if !(sigma.is_finite() && sigma >= 0.05) {
            return Err(AccountingError::InvalidParameter {
                name: "sigma",
                value: sigma,
                expected: "a noise multiplier of at least 0.05",
            });
        }
        if steps == 0 {
            return Err(AccountingError::InvalidParameter { name: "steps", value: 0.0, expected: "at least 1 step" });
        }
        Ok(Self { q, sigma, steps, step: StepLikelihood::new(q, 1.0 / sigma, false)? })
    }

    /// The step's statistic, ℓ.
    #[must_use]
    pub fn step(&self) -> StepLikelihood {
        self.step
    }

    /// d(θ): the standardised difference of T-step scores between an included and an excluded
    /// canary when every step's noise is σ/θ ([module](self)); θ > 0.
    ///
    /// One step's moments by the trapezoid rule in x = θ·(o − shift) on [−13, 13], whose
    /// spacing resolves ℓ's own scale θ/μ 8 times over (the integrands are smooth and decay as
    /// e^{−x²/2}: the rule converges geometrically; tested against scipy's adaptive quadrature).
    /// E_in ℓ − E_out ℓ = q·(E ℓ(x/θ + μ) − E ℓ(x/θ)) is formed as that difference, so that
    /// a small q does not cancel it away.
    #[must_use]
    pub fn difference(&self, theta: f64) -> f64 {
        let mu = self.step.mu;
        let h = (1.0 / PER_SCALE).min(theta / (PER_SCALE * mu.max(1e-12)));
        let points = (2.0 * REACH / h).ceil() as usize;
        let h = 2.0 * REACH / points as f64;
        let weight = |i: usize| {
            let x = -REACH + i as f64 * h;
            let end = if i == 0 || i == points { 0.5 } else { 1.0 };
            (x, end * h * (-x * x / 2.0).exp() / (2.0 * std::f64::consts::PI).sqrt())
        };
        let (mut out_mean, mut shift_mean) = (0.0, 0.0);
        for i in 0..=points {
            let (x, w) = weight(i);
            let (l0, l1) = (self.step.at(x / theta), self.step.at(x / theta + mu));
            out_mean += w * l0;
            shift_mean += w * (l1 - l0);
        }
        let mut out_var = 0.0;
        for i in 0..=points {
            let (x, w) = weight(i);
            out_var += w * (self.step.at(x / theta) - out_mean).powi(2);
        }
        if out_var <= 0.0 {
            return 0.0;
        }
        (self.steps as f64).sqrt() * self.q * shift_mean / out_var.sqrt()
    }

    /// The lower confidence bound on θ that a lower confidence bound `d_lower` on the
    /// standardised difference gives: the θ with d(θ) = `d_lower` (0 for `d_lower` ≤ 0 or below
    /// d(10⁻³); 1,000 above d(1,000)). The lower end of a bisection in ln θ to a relative 10⁻⁹,
    /// so never above the exact solution (d rises with θ).
    #[must_use]
    pub fn noise_scale_lower(&self, d_lower: f64) -> f64 {
        let (mut lo, mut hi) = (THETA_RANGE.0.ln(), THETA_RANGE.1.ln());
        if d_lower.is_nan() || d_lower <= 0.0 || self.difference(lo.exp()) >= d_lower {
            return 0.0;
        }
        if self.difference(hi.exp()) < d_lower {
            return hi.exp();
        }
        while hi - lo > 1e-9 {
            let mid = 0.5 * (lo + hi);
            if self.difference(mid.exp()) < d_lower {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        lo.exp()
    }

    /// The T steps' composition at noise σ/θ: what the canaries saw under member θ.
    ///
    /// # Errors
    /// θ not finite and positive.
    pub fn event(&self, theta: f64) -> Result<DpEvent> {
        if !(theta.is_finite() && theta > 0.0) {
            return Err(AccountingError::InvalidParameter {
                name: "theta",
                value: theta,
                expected: "a finite positive noise scale",
            });
        }
        Ok(DpEvent::poisson_sampled(self.q, DpEvent::gaussian(self.sigma / theta)).repeated(self.steps))
    }

    /// The ε at `delta` of [`event`](Self::event)`(theta)` by the PLD accountant
    /// ([`super::fdp::event_epsilon`], which rounds up within its grid); 0 for θ = 0.
    ///
    /// # Errors
    /// As [`event`](Self::event) and [`super::fdp::event_epsilon`].
    pub fn epsilon(&self, theta: f64, delta: f64) -> Result<f64> {
        if theta == 0.0 {
            return Ok(0.0);
        }
        super::fdp::event_epsilon(&self.event(theta)?, delta)
    }
}

/// A lower confidence bound on the standardised difference of two independent samples of
/// scores, d = (E_in − E_out)/sd_out: the sample's d̂ = (mean_in − mean_out)/sd_out less z·SE,
/// z the one-sided normal quantile at `confidence`, with the delta method's standard error
///
/// SE² = r²/n_in + 1/n_out + d̂²·(κ − 1)/(4·n_out) + d̂·γ/n_out,
///
/// r = sd_in/sd_out, γ and κ the excluded scores' sample skewness and kurtosis (the variance of
/// sd_out and its covariance with mean_out); for Gaussian scores of one variance (r = 1, γ = 0,
/// κ = 3) the familiar 1/n_in + 1/n_out + d̂²/(2n_out). 0 where the bound is negative.
///
/// **Not distribution-free**: d̂'s normality is the central limit theorem's over the samples
/// (asymptotic; tested for coverage on Gaussian and on DP-SGD-like scores), not a bound for
/// every sample size.
///
/// # Errors
/// [`AccountingError::InvalidParameter`] naming `scores` (fewer than 3 on a side, a value not
/// finite, or the excluded ones all equal) or `confidence`.
pub fn standardized_difference_lower(scores_in: &[f64], scores_out: &[f64], confidence: f64) -> Result<f64> {
    let bad = || AccountingError::InvalidParameter {
        name: "scores",
        value: scores_in.len().min(scores_out.len()) as f64,
        expected: "at least 3 finite scores on each side, the excluded ones not all equal",
    };
    if scores_in.len() < 3 || scores_out.len() < 3 || scores_in.iter().chain(scores_out).any(|x| !x.is_finite()) {
        return Err(bad());
    }
    let (n_in, n_out) = (scores_in.len() as f64, scores_out.len() as f64);
    let mean = |x: &[f64]| x.iter().sum::<f64>() / x.len() as f64;
    let (m_in, m_out) = (mean(scores_in), mean(scores_out));
    let central = |x: &[f64], m: f64, k: i32| x.iter().map(|v| (v - m).powi(k)).sum::<f64>() / x.len() as f64;
    let var_out = central(scores_out, m_out, 2) * n_out / (n_out - 1.0);
    let sd = var_out.sqrt();
    if sd.is_nan() || sd <= 0.0 {
        return Err(bad());
    }
    let r2 = central(scores_in, m_in, 2) * n_in / (n_in - 1.0) / var_out;
    let m2 = central(scores_out, m_out, 2);
    let (skew, kurt) = (central(scores_out, m_out, 3) / m2.powf(1.5), central(scores_out, m_out, 4) / (m2 * m2));
    let d = (m_in - m_out) / sd;
    let se2 = r2 / n_in + 1.0 / n_out + d * d * (kurt - 1.0) / (4.0 * n_out) + d * skew / n_out;
    let z = normal_quantile(confidence)?;
    Ok((d - z * se2.max(0.0).sqrt()).max(0.0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{RngExt as _, SeedableRng};
    use rand_distr::{Distribution, Normal};

    /// d(θ) against scipy's adaptive quadrature of the same moments (the script and its output:
    /// `experiments/audit/likelihood_reference.py`).
    #[test]
    fn the_difference_matches_an_independent_quadrature() {
        for ((q, sigma, steps, theta), want) in REFERENCE {
            let got = SampledCanaries::new(q, sigma, steps).unwrap().difference(theta);
            assert!(
                (got - want).abs() <= 1e-7 * want.abs().max(1e-3),
                "d({q}, {sigma}, {steps}, {theta}) = {got}, want {want}"
            );
        }
    }

    /// From experiments/audit/likelihood_reference.py.
    const REFERENCE: [((f64, f64, u64, f64), f64); 7] = [
        ((0.004, 0.9, 3750, 1.0), 0.382_180_274_188_806_1),
        ((0.004, 0.568, 3750, 0.8), 0.590_828_508_348_276_4),
        ((0.05, 1.0, 300, 1.3), 1.609_993_526_137_004_6),
        ((0.2, 0.75, 50, 0.5), 1.021_109_934_736_768_3),
        ((0.01, 2.0, 1000, 2.0), 0.353_292_474_707_512_2),
        ((0.5, 1.5, 20, 1.0), 1.613_042_102_984_155),
        ((0.001, 0.4, 20000, 1.0), 2.359_362_064_660_498_7),
    ];

    /// Less noise, canaries easier to tell apart: d rises with θ, over a grid of rates and noise.
    #[test]
    fn the_difference_rises_with_theta() {
        for (q, sigma, steps) in
            [(0.004, 0.6, 3750), (0.05, 1.0, 300), (0.5, 2.0, 20), (1.0, 1.0, 10), (1e-4, 0.3, 100_000)]
        {
            let c = SampledCanaries::new(q, sigma, steps).unwrap();
            let ds: Vec<f64> = (-40..=40).map(|i| c.difference((f64::from(i) / 10.0).exp())).collect();
            assert!(ds.windows(2).all(|w| w[1] > w[0]), "q = {q}, σ = {sigma}: {ds:?}");
        }
    }

    /// Full batch (q = 1): every step shifts the canary by μ, ℓ is linear in o, and d(θ) is
    /// √T·θ·μ — the Gaussian mechanism's μ-GDP parameter at noise σ/θ.
    #[test]
    fn at_full_batch_the_difference_is_gaussian_dps_mu() {
        let c = SampledCanaries::new(1.0, 2.0, 16).unwrap();
        for theta in [0.5, 1.0, 3.0] {
            let want = 4.0 * theta * 0.5;
            assert!((c.difference(theta) - want).abs() < 1e-9, "{theta}: {}", c.difference(theta));
        }
    }

    /// Simulated DP-SGD canaries as the trainer scores them: as claimed, θ's bound stays at or
    /// below 1 in at least 90 % of 200 runs at 95 % (the normal approximation's coverage, with
    /// its sampling error), and sits within 25 % of 1 at the median; with half the noise, the
    /// bound is above 1 in every run.
    #[test]
    fn simulated_canaries_are_covered_and_half_the_noise_is_refuted() {
        let (q, sigma, steps, m) = (0.02, 0.8, 400u64, 1000);
        let c = SampledCanaries::new(q, sigma, steps).unwrap();
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(11);
        let z = Normal::new(0.0, 1.0).unwrap();
        let mut run = |noise: f64| {
            let (mut inn, mut out) = (Vec::new(), Vec::new());
            for _ in 0..m {
                let included = rng.random_bool(0.5);
                let score: f64 = (0..steps)
                    .map(|_| {
                        let shift = if included && rng.random_bool(q) { 1.0 / sigma } else { 0.0 };
                        c.step().at(shift + noise * z.sample(&mut rng))
                    })
                    .sum();
                if included { inn.push(score) } else { out.push(score) }
            }
            c.noise_scale_lower(standardized_difference_lower(&inn, &out, 0.95).unwrap())
        };
        let mut thetas: Vec<f64> = (0..200).map(|_| run(1.0)).collect();
        let covered = thetas.iter().filter(|&&t| t <= 1.0).count();
        assert!(covered >= 180, "covered {covered} of 200");
        thetas.sort_by(f64::total_cmp);
        assert!(thetas[100] > 0.75 && thetas[100] < 1.0, "median {}", thetas[100]);
        for _ in 0..10 {
            let t = run(0.5);
            assert!(t > 1.0, "half the noise: θ ≥ {t}");
        }
    }

    /// Gaussian scores of one variance: the bound covers d in at least 93 % of 400 seeds at
    /// 95 %, its median within 10 % of d; right-skewed scores widen it (γ > 0).
    #[test]
    fn the_standardized_bound_covers_gaussian_scores() {
        for d in [0.3, 1.0, 2.5] {
            let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(7);
            let z = Normal::new(0.0, 1.0).unwrap();
            let mut bounds: Vec<f64> = (0..400)
                .map(|_| {
                    let out: Vec<f64> = (0..1000).map(|_| 2.0 * z.sample(&mut rng) + 3.0).collect();
                    let inn: Vec<f64> = (0..1000).map(|_| 2.0 * (z.sample(&mut rng) + d) + 3.0).collect();
                    standardized_difference_lower(&inn, &out, 0.95).unwrap()
                })
                .collect();
            let covered = bounds.iter().filter(|&&b| b <= d).count();
            assert!(covered >= 372, "d = {d}: covered {covered} of 400");
            bounds.sort_by(f64::total_cmp);
            assert!((bounds[200] - d).abs() < 0.1 * d + 0.05, "d = {d}: median {}", bounds[200]);
        }
        assert!(standardized_difference_lower(&[1.0, 2.0, 3.0], &[3.0, 3.0, 3.0], 0.95).is_err());
        assert!(standardized_difference_lower(&[1.0, 2.0], &[0.0, 1.0, 2.0], 0.95).is_err());
        assert!(standardized_difference_lower(&[1.0, 2.0, f64::NAN], &[0.0, 1.0, 2.0], 0.95).is_err());
    }

    /// The step's ratio, against the densities written out, and finite far in the tails; at
    /// q = 1 (every step samples the canary), μo − μ²/2.
    #[test]
    fn the_step_ratio_is_the_mixtures_and_never_overflows() {
        let pdf = |x: f64| (-x * x / 2.0).exp();
        let (q, mu) = (0.1, 0.8);
        for (replace, o) in [(false, 0.3), (true, -1.2), (false, 2.5)] {
            let r = StepLikelihood::new(q, mu, replace).unwrap();
            let inn = (1.0 - q) * pdf(o) + q * pdf(o - mu);
            let out = if replace { (1.0 - q) * pdf(o) + q * pdf(o + mu) } else { pdf(o) };
            assert!((r.at(o) - (inn / out).ln()).abs() < 1e-12, "replace {replace}, {o}");
        }
        let r = StepLikelihood::new(0.01, 2.0, true).unwrap();
        assert!(r.at(1e6).is_finite() && r.at(-1e6).is_finite() && r.at(1e6) > 0.0);
        let full = StepLikelihood::new(1.0, 0.5, false).unwrap();
        assert!((full.at(2.0) - (0.5 * 2.0 - 0.125)).abs() < 1e-15);
    }

    #[test]
    fn bad_parameters_are_named() {
        for (q, sigma, steps, name) in
            [(0.0, 1.0, 1, "q"), (1.5, 1.0, 1, "q"), (0.1, 0.01, 1, "sigma"), (0.1, 1.0, 0, "steps")]
        {
            match SampledCanaries::new(q, sigma, steps) {
                Err(AccountingError::InvalidParameter { name: n, .. }) => assert_eq!(n, name),
                other => panic!("{other:?}"),
            }
        }
        let c = SampledCanaries::new(0.1, 1.0, 10).unwrap();
        assert_eq!(c.noise_scale_lower(0.0), 0.0);
        assert_eq!(c.noise_scale_lower(f64::NAN), 0.0);
        assert!(c.event(0.0).is_err() && c.event(f64::INFINITY).is_err());
        assert_eq!(c.epsilon(0.0, 1e-5).unwrap(), 0.0);
    }
}
