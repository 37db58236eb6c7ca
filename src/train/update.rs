//! What a step does with its exact clipped sum: the sum's two forms, the noise added to it once,
//! and the update of θ that follows (post-processing of the noisy sum, no privacy cost).

use crate::accounting::sampling::DiscreteGaussian;
use crate::clip::axpy;
use crate::error::Result;
use crate::noise::{NoiseSampler, add_gaussian, gaussian};

/// A gradient sum: clipped, on the grid of step `gamma` (exact integers in units of γ), or
/// unclipped in floating point (non-private runs only).
#[derive(Debug, Clone, PartialEq)]
pub enum ClippedSum {
    /// Σᵢ gᵢ in f32, unclipped: NOT PRIVATE.
    Float(Vec<f32>),
    /// Σᵢ round(ḡᵢ/γ), exact.
    Grid {
        /// The sum in units of `gamma`.
        values: Vec<i64>,
        /// The grid step γ.
        gamma: f64,
    },
}

impl ClippedSum {
    /// The sum as f32 values.
    #[must_use]
    pub fn to_f32(&self) -> Vec<f32> {
        match self {
            ClippedSum::Float(v) => v.clone(),
            ClippedSum::Grid { values, gamma } => values.iter().map(|&v| (v as f64 * gamma) as f32).collect(),
        }
    }
}

/// The released noisy sum, `noise_std` = σC (0: no noise, for non-private runs):
/// - for a [`ClippedSum::Grid`] and the Gaussian sampler, N(0, σ²C²) added in f64 to the exact
///   sum (its grid units convert to f64 exactly, see [`SumGrid::fixed_point`](crate::clip::SumGrid::fixed_point)), then rounded
///   to f32 — post-processing of the noisy value;
/// - for a [`ClippedSum::Grid`] and the discrete Gaussian, N_Z(0, (σC/γ)²) per coordinate on
///   the grid, exactly;
/// - for an unclipped [`ClippedSum::Float`] (non-private), Gaussian noise in f32.
///
/// # Errors
/// A noise scale the discrete sampler does not support (σC/γ outside its range).
pub fn add_noise(
    sum: ClippedSum,
    sampler: NoiseSampler,
    noise_std: f64,
    rng: &mut rand_chacha::ChaCha20Rng,
) -> Result<Vec<f32>> {
    Ok(match (sum, sampler) {
        (ClippedSum::Float(mut v), _) => {
            if noise_std > 0.0 {
                add_gaussian(&mut v, noise_std, rng);
            }
            v
        }
        (ClippedSum::Grid { values, gamma }, NoiseSampler::Gaussian) => values
            .iter()
            .map(|&v| {
                let exact = v as f64 * gamma;
                (if noise_std > 0.0 { exact + gaussian(noise_std, rng) } else { exact }) as f32
            })
            .collect(),
        (ClippedSum::Grid { mut values, gamma }, NoiseSampler::DiscreteGaussian) => {
            if noise_std > 0.0 {
                DiscreteGaussian::new(noise_std / gamma)?.add_noise(&mut values, rng);
            }
            ClippedSum::Grid { values, gamma }.to_f32()
        }
    })
}

/// How one noisy sum moves θ.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UpdateRule {
    /// Learning rate η.
    pub lr: f64,
    /// What the noisy sum is divided by: n for full-batch GD, the expected batch size q·n for
    /// DP-SGD (never the realised one).
    pub divisor: f64,
    /// Heavy-ball momentum μ in [0, 1).
    pub momentum: f64,
}

impl UpdateRule {
    /// Plain gradient steps: η and the divisor, no momentum.
    #[must_use]
    pub fn plain(lr: f64, divisor: f64) -> Self {
        Self { lr, divisor, momentum: 0.0 }
    }
}

/// ĝ = (sum + noise) / divisor, the noise as in [`add_noise`]; then θ ← θ − η·ĝ, or with
/// momentum μ > 0, v ← μ·v + ĝ and θ ← θ − η·v (`velocity` is v: empty means zeros, and it is
/// left untouched when μ = 0). Only post-processing of the noisy sum: no privacy cost.
///
/// # Errors
/// As [`add_noise`].
pub fn apply_update(
    theta: &mut [f32],
    velocity: &mut Vec<f32>,
    sum: ClippedSum,
    (sampler, noise_std): (NoiseSampler, f64),
    rule: UpdateRule,
    rng: &mut rand_chacha::ChaCha20Rng,
) -> Result<()> {
    let noisy = add_noise(sum, sampler, noise_std, rng)?;
    update_theta(theta, velocity, &noisy, rule);
    Ok(())
}

/// θ moved by the released `noisy` sum: ĝ = noisy / divisor, then θ ← θ − η·ĝ, or with
/// momentum μ > 0, v ← μ·v + ĝ and θ ← θ − η·v (`velocity` is v: empty means zeros, and it is
/// left untouched when μ = 0). Post-processing of the noisy sum: no privacy cost.
pub fn update_theta(theta: &mut [f32], velocity: &mut Vec<f32>, noisy: &[f32], rule: UpdateRule) {
    let scale = 1.0 / rule.divisor.max(f64::MIN_POSITIVE);
    if rule.momentum == 0.0 {
        axpy(-rule.lr * scale, noisy, theta);
        return;
    }
    velocity.resize(theta.len(), 0.0);
    let (mu, scale) = (rule.momentum as f32, scale as f32);
    velocity.iter_mut().zip(noisy).for_each(|(v, g)| *v = mu * *v + g * scale);
    axpy(-rule.lr, velocity.as_slice(), theta);
}

#[cfg(test)]
mod tests {
    use rand::SeedableRng;

    use super::*;

    /// Heavy-ball steps as PyTorch's SGD takes them: v₁ = ĝ₁, v₂ = μv₁ + ĝ₂, θ −= η·vₜ; μ = 0
    /// leaves the buffer alone.
    #[test]
    fn momentum_is_heavy_ball() {
        let mut rng = rand_chacha::ChaCha20Rng::seed_from_u64(1);
        let (mut theta, mut v) = (vec![1.0f32, 2.0], Vec::new());
        let rule = UpdateRule { lr: 0.5, divisor: 2.0, momentum: 0.9 };
        let noise = (NoiseSampler::Gaussian, 0.0);
        apply_update(&mut theta, &mut v, ClippedSum::Float(vec![2.0, -4.0]), noise, rule, &mut rng).unwrap();
        assert_eq!((theta.clone(), v.clone()), (vec![0.5, 3.0], vec![1.0, -2.0]));
        apply_update(&mut theta, &mut v, ClippedSum::Float(vec![0.0, 2.0]), noise, rule, &mut rng).unwrap();
        let v2 = [0.9f32, 0.9 * -2.0 + 1.0];
        assert_eq!(v, v2);
        assert_eq!(theta, vec![0.5 - 0.5 * v2[0], 3.0 - 0.5 * v2[1]]);
        let mut untouched = Vec::new();
        apply_update(
            &mut theta,
            &mut untouched,
            ClippedSum::Float(vec![1.0, 1.0]),
            noise,
            UpdateRule::plain(1.0, 1.0),
            &mut rng,
        )
        .unwrap();
        assert!(untouched.is_empty());
    }
}
