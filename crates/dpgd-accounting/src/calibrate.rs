//! Noise calibration for private gradient descent with individual filtering
//! (001 Algorithm 3, Proposition 5.1).
//!
//! Algorithm 3 with noise N(0, σ²C²I), clip C and squared-norm budget B_norm is
//! B_norm/(2σ²C²)-zCDP whatever the number of steps (Prop. 5.1), and — because every
//! step is a Gaussian mechanism — μ-GDP with μ = √B_norm/(σC) (see
//! [`convert`](super::convert#why-gaussian-exact-is-valid-for-private-gd-with-filtering-001-algorithm-3)).
//! With B_norm = k·C² (k = the worst-case number of steps, the steps plain private GD
//! would take) ρ = k/(2σ²): the clip cancels, so σ depends only on (ε, δ, k).

use super::convert::{Conversion, ToApproxDp};
use super::error::{Result, positive, probability};
use super::measure::{GaussianDp, Zcdp};

/// The privacy parameters of one run of 001 Algorithm 3.
///
/// ```
/// use dpgd_accounting::{Conversion, PrivateGd};
/// // 100 worst-case steps, clip 1, σ = 8: ρ = 100/128.
/// let run = PrivateGd::new(8.0, 1.0, 100.0).unwrap();
/// assert!((run.zcdp().rho() - 0.78125).abs() < 1e-15);
/// let tight = run.epsilon(1e-5, Conversion::GaussianExact).unwrap();
/// let paper = run.epsilon(1e-5, Conversion::BunSteinke).unwrap();
/// assert!(tight < paper);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PrivateGd {
    sigma: f64,
    clip: f64,
    steps: f64,
}

impl PrivateGd {
    /// Noise multiplier σ, clip C and worst-case steps k (so B_norm = k·C²).
    pub fn new(sigma: f64, clip: f64, steps: f64) -> Result<Self> {
        let clip = positive("clip", clip)?;
        Ok(Self { sigma: positive("sigma", sigma)?, clip, steps: positive("steps", steps)? })
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
    /// The per-example squared-norm budget B_norm.
    #[must_use]
    pub fn b_norm(&self) -> f64 {
        self.steps * self.clip * self.clip
    }
    /// B_norm/C²: the steps after which plain private GD stops and filtering begins to drop points.
    #[must_use]
    pub fn worst_case_steps(&self) -> f64 {
        self.steps
    }
    /// B_norm/(2σ²C²)-zCDP (001 Prop. 5.1), computed as k/(2σ²) so the clip cancels exactly.
    #[must_use]
    pub fn zcdp(&self) -> Zcdp {
        Zcdp::new(self.steps / (2.0 * self.sigma * self.sigma)).expect("validated parameters give a positive rho")
    }
    /// √B_norm/(σC)-GDP, i.e. √k/σ (fully adaptive Gaussian composition; see the module docs).
    #[must_use]
    pub fn gaussian_dp(&self) -> GaussianDp {
        GaussianDp::new(self.steps.sqrt() / self.sigma).expect("validated parameters give a positive mu")
    }
    /// The ε of the run at `delta` under `method` (every conversion is valid here).
    pub fn epsilon(&self, delta: f64, method: Conversion) -> Result<f64> {
        match method {
            Conversion::GaussianExact => self.gaussian_dp().epsilon(delta, method),
            _ => self.zcdp().epsilon(delta, method),
        }
    }
}

/// The smallest noise multiplier σ such that Algorithm 3 with `steps` worst-case steps
/// (B_norm = steps·C²) is (ε, δ)-DP under `method`: σ = √(steps/(2ρ*)) with ρ* the
/// largest ρ that `method` converts to (ε, δ). The result is nudged up until
/// [`PrivateGd::epsilon`] confirms it meets the target, so rounding never undershoots.
///
/// ```
/// use dpgd_accounting::{calibrate_sigma, Conversion, PrivateGd};
/// let sigma = calibrate_sigma(0.5, 1e-5, 100.0, Conversion::Cks).unwrap();
/// let eps = PrivateGd::new(sigma, 1.0, 100.0).unwrap().epsilon(1e-5, Conversion::Cks).unwrap();
/// assert!(eps <= 0.5 && eps > 0.5 * (1.0 - 1e-9));
/// ```
pub fn calibrate_sigma(epsilon: f64, delta: f64, steps: f64, method: Conversion) -> Result<f64> {
    let steps = positive("steps", steps)?;
    let delta = probability("delta", delta)?;
    let rho = method.max_rho(epsilon, delta)?.rho();
    let mut sigma = (steps / (2.0 * rho)).sqrt();
    while PrivateGd::new(sigma, 1.0, steps)?.epsilon(delta, method)? > epsilon {
        sigma *= 1.0 + 4.0 * f64::EPSILON;
    }
    Ok(sigma)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clip_cancels_out_of_the_guarantee() {
        let a = PrivateGd::new(4.0, 1.0, 50.0).unwrap();
        let b = PrivateGd::new(4.0, 7.5, 50.0).unwrap();
        assert_eq!(a.zcdp(), b.zcdp());
        assert!((a.zcdp().rho() - 50.0 / 32.0).abs() < 1e-15);
        assert!((b.worst_case_steps() - 50.0).abs() < 1e-12);
        assert_eq!(b.b_norm(), 50.0 * 7.5 * 7.5);
    }

    #[test]
    fn calibration_rejects_bad_inputs_by_name() {
        let e = calibrate_sigma(0.5, 1.0, 100.0, Conversion::Cks).unwrap_err().to_string();
        assert!(e.contains("delta"));
        let e = calibrate_sigma(0.5, 1e-5, 0.0, Conversion::Cks).unwrap_err().to_string();
        assert!(e.contains("steps"));
        let e = calibrate_sigma(-1.0, 1e-5, 10.0, Conversion::Cks).unwrap_err().to_string();
        assert!(e.contains("epsilon"));
        assert!(PrivateGd::new(0.0, 1.0, 1.0).unwrap_err().to_string().contains("sigma"));
    }
}
