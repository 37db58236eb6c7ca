//! The guarantee and the noise calibration of private gradient descent with individual
//! filtering ([FZ21] Algorithm 3), alone or together with other Gaussian releases.
//!
//! Algorithm 3 with noise N(0, σ²C²I), clip C and squared-norm budget B_norm is
//! B_norm/(2σ²C²)-zCDP whatever the number of steps ([FZ21] Prop. 5.1) under the zero-out
//! relation, and — because every step is a Gaussian mechanism whose individual sensitivities
//! satisfy Σₜ‖ḡₜ(xᵢ)‖² ≤ B_norm — √B_norm/(σC)-Gaussian DP by the fully adaptive composition of
//! Gaussian DP ([ST22]; [KTH23] Thm 4.3; see
//! [`convert`](super::convert#why-gaussian-exact-is-valid-for-private-gd-with-filtering)).
//! With B_norm = k·C² (k = the worst-case number of steps, the steps plain private GD would
//! take) the clip cancels: μ = √k/σ. Under the replace-one relation the clipped sum's
//! sensitivity doubles ([`Neighbours::sum_sensitivity`]), so μ = 2√k/σ. The guarantee is
//! computed from the run's events ([`GdPlan::event`]: k Gaussian steps; a fractional k counts as
//! ⌈k⌉, which only overstates it).
//!
//! Everything here rounds towards overstating privacy loss: μ and ρ are rounded up, a
//! calibrated σ is rounded up and then confirmed with the forward conversion.
//!
//! [FZ21]: https://arxiv.org/abs/2008.11193
//! [ST22]: https://arxiv.org/abs/2210.17520
//! [KTH23]: https://arxiv.org/abs/2209.15596

use super::convert::{Conversion, ToApproxDp};
use super::error::{AccountingError, Result, positive, probability};
use super::event::{Accountant, DpEvent, GdpAccountant};
use super::measure::{ApproxDp, GaussianDp, Zcdp};
use super::neighbours::Neighbours;
use super::numeric::{add_up, confirm, div_down, div_up, half_up, mul_up, sqrt_up, sub_down, u64_up};

/// The privacy parameters of one run of [FZ21] Algorithm 3 (a validated value: its ρ and μ
/// are finite and positive).
///
/// ```
/// use dpgd_accounting::{Conversion, Neighbours, PrivateGd};
/// // 100 worst-case steps, clip 1, σ = 8: ρ = 100/128.
/// let run = PrivateGd::new(8.0, 1.0, 100.0).unwrap();
/// let rho = run.zcdp().rho(); // rounded up, never below
/// assert!(rho >= 0.78125 && rho - 0.78125 < 1e-14);
/// let tight = run.epsilon(1e-5, Conversion::GaussianExact).unwrap();
/// let paper = run.epsilon(1e-5, Conversion::BunSteinke).unwrap();
/// assert!(tight < paper);
/// // Replacing an example (rather than zeroing it out) doubles the sensitivity.
/// let replace = run.with_neighbours(Neighbours::ReplaceOne).unwrap();
/// assert_eq!(replace.gaussian_dp().mu(), 2.0 * run.gaussian_dp().mu());
/// ```
///
/// [FZ21]: https://arxiv.org/abs/2008.11193
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PrivateGd {
    sigma: f64,
    clip: f64,
    steps: f64,
    neighbours: Neighbours,
    mu: f64,
}

impl PrivateGd {
    /// Noise multiplier σ, clip C and worst-case steps k (so B_norm = k·C²), under the zero-out
    /// relation.
    ///
    /// # Errors
    /// A parameter that is not a finite number > 0, or a combination whose budget B_norm or
    /// guarantee μ = √k/σ is not a finite positive number (e.g. σ = 1e-200), named.
    pub fn new(sigma: f64, clip: f64, steps: f64) -> Result<Self> {
        let sigma = positive("sigma", sigma)?;
        let clip = positive("clip", clip)?;
        let steps = positive("steps", steps)?;
        let b_norm = steps * clip * clip;
        if !(b_norm.is_finite() && b_norm > 0.0) {
            return Err(AccountingError::InvalidParameter {
                name: "clip",
                value: clip,
                expected: "steps * clip^2 (the per-example budget B_norm) must be a finite number > 0: \
                           choose a clip between about 1e-100 and 1e100",
            });
        }
        let run = Self { sigma, clip, steps, neighbours: Neighbours::ZeroOut, mu: 0.0 };
        run.with_neighbours(Neighbours::ZeroOut)
    }

    /// The same run under another neighbouring relation.
    ///
    /// # Errors
    /// If the guarantee is not finite under `neighbours` (σ too small).
    pub fn with_neighbours(self, neighbours: Neighbours) -> Result<Self> {
        let mu = GdPlan::new(self.steps)?.with_neighbours(neighbours).guarantee(self.sigma)?.mu();
        Ok(Self { neighbours, mu, ..self })
    }

    /// The noise multiplier σ (the noise standard deviation is σ·C).
    #[must_use]
    pub fn sigma(&self) -> f64 {
        self.sigma
    }
    /// The clip value C.
    #[must_use]
    pub fn clip(&self) -> f64 {
        self.clip
    }
    /// The neighbouring relation of the guarantee.
    #[must_use]
    pub fn neighbours(&self) -> Neighbours {
        self.neighbours
    }
    /// The per-example squared-norm budget B_norm = k·C².
    #[must_use]
    pub fn b_norm(&self) -> f64 {
        self.steps * self.clip * self.clip
    }
    /// k = B_norm/C²: the steps after which plain private GD stops and filtering begins to drop
    /// points.
    #[must_use]
    pub fn worst_case_steps(&self) -> f64 {
        self.steps
    }
    /// The run's Gaussian-DP guarantee μ = s·√k/σ (s = 1 zero-out, 2 replace-one), rounded up.
    #[must_use]
    pub fn gaussian_dp(&self) -> GaussianDp {
        GaussianDp::validated(self.mu)
    }
    /// The run's zCDP guarantee ρ = μ²/2 = s²·B_norm/(2σ²C²) ([FZ21] Prop. 5.1), rounded up.
    ///
    /// [FZ21]: https://arxiv.org/abs/2008.11193
    #[must_use]
    pub fn zcdp(&self) -> Zcdp {
        self.gaussian_dp().to_zcdp()
    }
    /// The ε of the run at `delta` under `method` (every conversion is valid here).
    ///
    /// # Errors
    /// If `delta` is not in (0, 1).
    pub fn epsilon(&self, delta: f64, method: Conversion) -> Result<f64> {
        self.gaussian_dp().epsilon(delta, method)
    }
}

/// The error for a σ so small that the guarantee overflows.
fn sigma_too_small(sigma: f64) -> AccountingError {
    AccountingError::InvalidParameter {
        name: "sigma",
        value: sigma,
        expected: "the guarantee sqrt(steps)/sigma and its square must be finite numbers > 0: sigma is too small \
                   (or steps too large) to give any guarantee",
    }
}

/// A Gaussian mechanism released alongside training, e.g. a noisy count of active examples:
/// noise std `sigma`, ℓ₂-sensitivity `sensitivity`, released `count` times. Each release is
/// (Δ/σ)-GDP, i.e. Δ²/(2σ²)-zCDP ([BS16] Prop. 1.6).
///
/// [BS16]: https://arxiv.org/abs/1605.02065
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GaussianRelease {
    sigma: f64,
    sensitivity: f64,
    count: u64,
}

impl GaussianRelease {
    /// `count` releases with noise std `sigma` of a statistic with sensitivity `sensitivity`.
    ///
    /// # Errors
    /// `sigma` or `sensitivity` not a finite number > 0, or a total guarantee that overflows.
    pub fn new(sigma: f64, sensitivity: f64, count: u64) -> Result<Self> {
        let r = Self { sigma: positive("sigma", sigma)?, sensitivity: positive("sensitivity", sensitivity)?, count };
        if !r.mu_squared().is_finite() {
            return Err(AccountingError::InvalidParameter {
                name: "sigma",
                value: sigma,
                expected: "the releases' guarantee count * (sensitivity/sigma)^2 must be finite: sigma is too small",
            });
        }
        Ok(r)
    }
    /// Σ μⱼ² of all `count` releases, count·(Δ/σ)², rounded up.
    #[must_use]
    pub fn mu_squared(&self) -> f64 {
        let one = div_up(self.sensitivity, self.sigma);
        mul_up(u64_up(self.count), mul_up(one, one))
    }
    /// These releases as an event: `count` Gaussian mechanisms of multiplier σ/Δ.
    #[must_use]
    pub fn event(&self) -> DpEvent {
        // The multiplier rounded down: the event never claims more noise than there is.
        DpEvent::gaussian(div_down(self.sigma, self.sensitivity)).repeated(self.count)
    }
    /// The zCDP cost of one release, Δ²/(2σ²), rounded up (`None` if it underflows to 0).
    #[must_use]
    pub fn cost_of_one(&self) -> Option<Zcdp> {
        let one = div_up(self.sensitivity, self.sigma);
        Zcdp::new(half_up(mul_up(one, one))).ok()
    }
}

/// A run of [FZ21] Algorithm 3 together with every other Gaussian release it makes: the unit
/// of calibration. All pieces are Gaussian mechanisms, so their Gaussian-DP guarantees compose
/// as μ² = μ_training² + Σⱼ μⱼ² ([DRS19] Cor. 3.3), fully adaptively.
///
/// ```
/// use dpgd_accounting::{ApproxDp, Conversion, GaussianRelease, GdPlan};
/// let target = ApproxDp::new(1.0, 1e-5).unwrap();
/// let alone = GdPlan::new(300.0).unwrap();
/// let sigma = alone.calibrate(target, Conversion::GaussianExact).unwrap();
/// // Twenty noisy counts (std 200) released beside training need a little more noise.
/// let counts = GaussianRelease::new(200.0, 1.0, 20).unwrap();
/// let with_counts = alone.clone().with_release(counts);
/// let sigma2 = with_counts.calibrate(target, Conversion::GaussianExact).unwrap();
/// assert!(sigma2 > sigma);
/// let eps = with_counts.guarantee(sigma2).unwrap().epsilon(1e-5, Conversion::GaussianExact).unwrap();
/// # use dpgd_accounting::ToApproxDp;
/// assert!(eps <= 1.0);
/// ```
///
/// [FZ21]: https://arxiv.org/abs/2008.11193
/// [DRS19]: https://arxiv.org/abs/1905.02383
#[derive(Debug, Clone, PartialEq)]
pub struct GdPlan {
    steps: f64,
    neighbours: Neighbours,
    releases: Vec<GaussianRelease>,
}

impl GdPlan {
    /// Training with `steps` worst-case steps (B_norm = steps·C²), zero-out relation, no releases.
    ///
    /// # Errors
    /// `steps` not a finite number > 0.
    pub fn new(steps: f64) -> Result<Self> {
        Ok(Self { steps: positive("steps", steps)?, neighbours: Neighbours::ZeroOut, releases: Vec::new() })
    }
    /// Under another neighbouring relation.
    #[must_use]
    pub fn with_neighbours(mut self, neighbours: Neighbours) -> Self {
        self.neighbours = neighbours;
        self
    }
    /// With one more set of Gaussian releases.
    #[must_use]
    pub fn with_release(mut self, release: GaussianRelease) -> Self {
        self.releases.push(release);
        self
    }
    /// Σⱼ μⱼ² of the releases, rounded up.
    #[must_use]
    pub fn releases_mu_squared(&self) -> f64 {
        self.releases.iter().fold(0.0, |acc, r| add_up(acc, r.mu_squared()))
    }
    /// The plan at noise multiplier `sigma` as an event, for any accountant that takes Gaussian
    /// events ([`crate::event::GdpAccountant`], [`crate::event::ZcdpAccountant`], RDP, PLD):
    /// training as ⌈k⌉ Gaussian steps of multiplier σ/s (s the clipped sum's sensitivity in
    /// units of C: the most an example can be charged under its budget B_norm = k·C², [FZ21]
    /// Alg. 3), composed with every release. [`guarantee`](Self::guarantee) is this event's μ
    /// ([DRS19] Cor. 3.3; a test checks they agree).
    ///
    /// [FZ21]: https://arxiv.org/abs/2008.11193
    /// [DRS19]: https://arxiv.org/abs/1905.02383
    #[must_use]
    pub fn event(&self, sigma: f64) -> DpEvent {
        let multiplier = div_down(sigma, self.neighbours.sum_sensitivity());
        let training = DpEvent::gaussian(multiplier).repeated(self.whole_steps());
        let mut events = vec![training];
        events.extend(self.releases.iter().map(GaussianRelease::event));
        DpEvent::Composed { events }
    }
    /// ⌈k⌉: the training steps of [`event`](Self::event) (a fractional k is accounted as the
    /// next whole number of steps, which only overstates the loss).
    fn whole_steps(&self) -> u64 {
        self.steps.ceil() as u64 // a finite number > 0 (validated)
    }
    /// The whole plan's Gaussian-DP guarantee at noise multiplier `sigma`, rounded up: its
    /// [`event`](Self::event) composed by the [`GdpAccountant`] — the one place full-batch GD's
    /// guarantee is computed ([`PrivateGd`] and calibration use it too).
    ///
    /// # Errors
    /// If `sigma` gives no finite guarantee.
    pub fn guarantee(&self, sigma: f64) -> Result<GaussianDp> {
        let sigma = positive("sigma", sigma)?;
        let mut gdp = GdpAccountant::new(Conversion::GaussianExact);
        gdp.compose(&self.event(sigma)).map_err(|_| sigma_too_small(sigma))?;
        let mu = gdp.mu();
        // ρ = μ²/2 must be finite too, so that every conversion has an answer.
        if !(mu > 0.0 && mul_up(mu, mu).is_finite()) {
            return Err(sigma_too_small(sigma));
        }
        GaussianDp::new(mu)
    }
    /// The smallest noise multiplier σ for which the whole plan is `target`-DP under `method`
    /// (every conversion is valid: all pieces are Gaussian). σ is rounded up and confirmed
    /// with [`guarantee`](Self::guarantee) and the forward conversion.
    ///
    /// # Errors
    /// A target with δ ∉ (0, 1) or ε ≤ 0; releases that alone exceed the target (raise their
    /// noise or release less often); or a target so small that σ would not be a finite number.
    pub fn calibrate(&self, target: ApproxDp, method: Conversion) -> Result<f64> {
        let (epsilon, delta) = (positive("epsilon", target.epsilon())?, probability("delta", target.delta())?);
        // 2ρ is exact unless it overflows; f64::MAX is then below it, which only leaves less
        // budget (more noise): the conservative side.
        let mu_max_sq = (2.0 * method.max_rho(epsilon, delta)?.rho()).min(f64::MAX);
        let releases = self.releases_mu_squared();
        let left = sub_down(mu_max_sq, releases);
        if left.is_nan() || left <= 0.0 {
            return Err(AccountingError::BudgetExceeded {
                amount: releases / 2.0,
                remaining: mu_max_sq / 2.0,
                budget: mu_max_sq / 2.0,
            });
        }
        // The closed form σ = s·√(⌈k⌉/μ²), a starting point confirmed below with the accountant.
        let s = self.neighbours.sum_sensitivity();
        let sigma = mul_up(s, sqrt_up(div_up(u64_up(self.whole_steps()), left)));
        if !sigma.is_finite() {
            return Err(AccountingError::InvalidParameter {
                name: "epsilon",
                value: epsilon,
                expected: "is below what can be calibrated for this many steps: sigma would not be a finite \
                           number (raise epsilon or delta, or lower the steps)",
            });
        }
        if self.guarantee(sigma).is_err() {
            return Err(AccountingError::InvalidParameter {
                name: "epsilon",
                value: epsilon,
                expected: "is above what can be calibrated: sigma would be so small that the guarantee \
                           sqrt(steps)/sigma overflows (lower epsilon)",
            });
        }
        // Confirm with the forward conversion, exactly as users call it: the closest σ above
        // the closed form that meets the target (rounding moves it by a few ulps at most).
        let meets =
            |sigma: f64| self.guarantee(sigma).and_then(|g| g.epsilon(delta, method)).is_ok_and(|e| e <= epsilon);
        confirm(sigma, true, meets).ok_or(AccountingError::NoSolution(
            "no finite noise multiplier meets this (epsilon, delta): the target is too small",
        ))
    }
}

/// The smallest noise multiplier σ such that [FZ21] Algorithm 3 with `steps` worst-case steps
/// (B_norm = steps·C²), zero-out relation and nothing else released is `target`-DP under
/// `method`; see [`GdPlan::calibrate`] for runs that release more or use another relation.
///
/// ```
/// use dpgd_accounting::{calibrate_sigma, ApproxDp, Conversion, PrivateGd};
/// let target = ApproxDp::new(0.5, 1e-5).unwrap();
/// let sigma = calibrate_sigma(target, 100.0, Conversion::Cks).unwrap();
/// let eps = PrivateGd::new(sigma, 1.0, 100.0).unwrap().epsilon(1e-5, Conversion::Cks).unwrap();
/// assert!(eps <= 0.5 && eps > 0.5 * (1.0 - 1e-9));
/// ```
///
/// # Errors
/// As [`GdPlan::calibrate`].
///
/// [FZ21]: https://arxiv.org/abs/2008.11193
pub fn calibrate_sigma(target: ApproxDp, steps: f64, method: Conversion) -> Result<f64> {
    GdPlan::new(steps)?.calibrate(target, method)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(eps: f64, delta: f64) -> ApproxDp {
        ApproxDp::new(eps, delta).unwrap()
    }

    #[test]
    fn clip_cancels_out_of_the_guarantee() {
        let a = PrivateGd::new(4.0, 1.0, 50.0).unwrap();
        let b = PrivateGd::new(4.0, 7.5, 50.0).unwrap();
        assert_eq!(a.zcdp(), b.zcdp());
        let rho = a.zcdp().rho();
        assert!(rho >= 50.0 / 32.0 && rho - 50.0 / 32.0 < 1e-14, "{rho}");
        assert!((b.worst_case_steps() - 50.0).abs() < 1e-12);
        assert_eq!(b.b_norm(), 50.0 * 7.5 * 7.5);
    }

    #[test]
    fn calibration_rejects_bad_inputs_by_name() {
        let e = calibrate_sigma(target(0.5, 0.0), 100.0, Conversion::Cks).unwrap_err().to_string();
        assert!(e.contains("delta"), "{e}");
        let e = calibrate_sigma(target(0.5, 1e-5), 0.0, Conversion::Cks).unwrap_err().to_string();
        assert!(e.contains("steps"));
        let e = calibrate_sigma(target(0.0, 1e-5), 10.0, Conversion::Cks).unwrap_err().to_string();
        assert!(e.contains("epsilon"));
        assert!(PrivateGd::new(0.0, 1.0, 1.0).unwrap_err().to_string().contains("sigma"));
    }

    #[test]
    fn extreme_parameters_are_errors_not_infinities() {
        let e = PrivateGd::new(1e-200, 1.0, 100.0).unwrap_err().to_string();
        assert!(e.contains("sigma") && e.contains("too small"), "{e}");
        // One step at a σ whose square underflows: the guarantee (μ = 1e200) is not finite as
        // ρ; it must be refused, not capped at a smaller μ (it once came out as 9.5e153).
        for neighbours in [Neighbours::ZeroOut, Neighbours::ReplaceOne] {
            for sigma in [1e-200, 1e-160, 1e-155] {
                let run = PrivateGd::new(sigma, 1.0, 1.0).and_then(|r| r.with_neighbours(neighbours));
                let plan = GdPlan::new(1.0).unwrap().with_neighbours(neighbours).guarantee(sigma);
                assert!(run.is_err() && plan.is_err(), "sigma {sigma}: {run:?} {plan:?}");
            }
        }
        assert!(PrivateGd::new(1.0, 1e300, 100.0).unwrap_err().to_string().contains("clip"));
        assert!(PrivateGd::new(1.0, 1e-300, 100.0).unwrap_err().to_string().contains("clip"));
        assert!(GaussianRelease::new(1e-200, 1.0, 3).is_err());
    }

    #[test]
    fn replace_one_needs_twice_the_noise() {
        let t = target(1.0, 1e-5);
        for method in Conversion::ALL {
            let zero = GdPlan::new(100.0).unwrap().calibrate(t, method).unwrap();
            let plan = GdPlan::new(100.0).unwrap().with_neighbours(Neighbours::ReplaceOne);
            let replace = plan.calibrate(t, method).unwrap();
            assert!((replace / zero - 2.0).abs() < 1e-12, "{method}: {replace} vs 2 × {zero}");
            assert!(plan.guarantee(replace).unwrap().epsilon(1e-5, method).unwrap() <= 1.0);
        }
    }

    #[test]
    fn releases_take_their_share_of_the_budget_and_can_exhaust_it() {
        let t = target(1.0, 1e-5);
        let m = Conversion::GaussianExact;
        let plan = GdPlan::new(100.0).unwrap().with_release(GaussianRelease::new(50.0, 1.0, 10).unwrap());
        let sigma = plan.calibrate(t, m).unwrap();
        let mu = plan.guarantee(sigma).unwrap().mu();
        let mu_max = (2.0 * m.max_rho(1.0, 1e-5).unwrap().rho()).sqrt();
        assert!(mu <= mu_max * (1.0 + 1e-12) && mu > mu_max * (1.0 - 1e-9));
        let greedy = GdPlan::new(100.0).unwrap().with_release(GaussianRelease::new(1.0, 1.0, 1000).unwrap());
        assert!(matches!(greedy.calibrate(t, m), Err(AccountingError::BudgetExceeded { .. })));
    }
}
