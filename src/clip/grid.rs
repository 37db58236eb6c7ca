//! The grid clipped rows are summed on: exact integers in units of a power of two γ, chosen
//! from public quantities only (the clip, n, the parameter count and the noise's kind).

use crate::noise::NoiseSampler;

/// The grid clipped rows are summed on: a power of two γ; the sum is held in integer units of γ.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SumGrid {
    pub(super) gamma: f64,
}

/// A clip for which no exact sum grid exists in f64 (absurdly small or large).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ClipOutOfRange;

impl std::fmt::Display for ClipOutOfRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("clip times the number of examples is outside [2^-900, 2^900]: no exact sum grid; use a clip between 1e-100 and 1e100")
    }
}

impl std::error::Error for ClipOutOfRange {}

impl SumGrid {
    /// The grid for floating-point Gaussian noise over `n` examples of clip `clip`:
    /// γ = 2^⌈log₂(C·n)⌉⁻⁵⁰, so that each rounded coordinate of a row is below 2⁵⁰/n grid units,
    /// every coordinate of the sum below 2⁵³ (exact in f64), and γ·(sum) exact in f64. n is
    /// public under both neighbouring relations, so the grid depends on no private data.
    ///
    /// # Errors
    /// [`ClipOutOfRange`] when C·n is outside [2⁻⁹⁰⁰, 2⁹⁰⁰], where γ or γ·2⁵³ would leave the
    /// normal range of f64.
    pub fn fixed_point(clip: f64, n: usize) -> Result<Self, ClipOutOfRange> {
        let scale = clip * n.max(1) as f64;
        if !(scale.is_finite() && (2f64.powi(-900)..=2f64.powi(900)).contains(&scale)) {
            return Err(ClipOutOfRange);
        }
        Ok(Self { gamma: 2f64.powi(scale.log2().ceil() as i32 - 50) })
    }

    /// The grid of discrete-Gaussian noise with clip `clip` and `p` parameters: a power of two
    /// at most 2·10⁻³·C/√p, so that rounding a clipped gradient onto the grid moves it by at most
    /// √p·γ/2 ≤ 10⁻³·C.
    #[must_use]
    pub fn discrete(clip: f64, p: usize) -> Self {
        let target = 2e-3 * clip / (p.max(1) as f64).sqrt();
        Self { gamma: 2f64.powi(target.log2().floor() as i32) }
    }

    /// The grid for `sampler`'s noise: [`discrete`](Self::discrete) for the discrete Gaussian,
    /// [`fixed_point`](Self::fixed_point) for the floating-point one.
    ///
    /// # Errors
    /// As [`fixed_point`](Self::fixed_point).
    pub fn for_noise(sampler: NoiseSampler, clip: f64, n: usize, p: usize) -> Result<Self, ClipOutOfRange> {
        match sampler {
            NoiseSampler::DiscreteGaussian => Ok(Self::discrete(clip, p)),
            NoiseSampler::Gaussian => Self::fixed_point(clip, n),
        }
    }

    /// The step γ.
    #[must_use]
    pub fn gamma(self) -> f64 {
        self.gamma
    }
}
