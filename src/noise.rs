//! Noise from a cryptographically secure generator (ChaCha20), in independent streams.
//!
//! By default every stream is keyed from the operating system. A fixed seed — for experiments
//! and tests only — derives every stream from the seed, so a resumed run draws the same noise
//! as an uninterrupted one; but the noise is then a public function of the seed, so **a run
//! with a fixed seed is not private** and says so in its `privacy.json`.
//!
//! Two samplers: the floating-point Gaussian (the default) and the discrete Gaussian of
//! [CKS20], which avoids the floating-point attacks on Gaussian sampling ([Mir12], [JMRO22]).
//!
//! [CKS20]: https://arxiv.org/abs/2004.00010
//! [Mir12]: https://doi.org/10.1145/2382196.2382264
//! [JMRO22]: https://arxiv.org/abs/2112.05307

use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use rand_distr::{Distribution, StandardNormal};
use serde::{Deserialize, Serialize};

use crate::accounting::{AccountingError, Conversion, GaussianDp, ToApproxDp};
use crate::error::{Error, Result};

/// Where the noise comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NoiseSeed {
    /// A fresh ChaCha20 key from the operating system for every stream (the default).
    Os,
    /// A fixed seed: reproducible, for experiments and tests only — NOT private.
    Fixed(u64),
}

/// Which noise distribution is added.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NoiseSampler {
    /// Gaussian noise sampled in floating point (Box–Muller-free ziggurat of `rand_distr`).
    #[default]
    Gaussian,
    /// The discrete Gaussian of Canonne, Kamath & Steinke 2020 on a fixed grid, sampled
    /// exactly with integer arithmetic; accounted through zCDP.
    DiscreteGaussian,
}

impl NoiseSampler {
    /// The ε at δ of a Gaussian-DP guarantee `g` of a run with this noise, under `conversion`,
    /// rounded up: the continuous Gaussian's through any conversion (its exact GDP curve
    /// included), the discrete Gaussian's through zCDP only, the guarantee it has (Canonne,
    /// Kamath & Steinke 2020, Thm. 14). The one place that pairs a noise with its accounting.
    ///
    /// # Errors
    /// An invalid δ, or `gaussian-exact` for the discrete Gaussian (refused at validation).
    pub fn epsilon(self, g: GaussianDp, delta: f64, conversion: Conversion) -> Result<f64, AccountingError> {
        match self {
            NoiseSampler::Gaussian => g.epsilon(delta, conversion),
            NoiseSampler::DiscreteGaussian => g.to_zcdp().epsilon(delta, conversion),
        }
    }

    /// A short description for reports.
    #[must_use]
    pub fn describe(self) -> &'static str {
        match self {
            NoiseSampler::Gaussian => "Gaussian, sampled in floating point",
            NoiseSampler::DiscreteGaussian => {
                "discrete Gaussian on a fixed grid, sampled exactly (Canonne, Kamath & Steinke 2020)"
            }
        }
    }
}

/// One independent noise stream: each step's update and each release have their own, so a
/// resumed run with a fixed seed draws exactly the noise of an uninterrupted one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stream(u64);

impl Stream {
    /// The stream of step `step`'s update (1-based).
    #[must_use]
    pub fn update(step: usize) -> Self {
        Stream(step as u64)
    }
    /// The stream of step `step`'s Poisson sample (DP-SGD): counting down from 2⁶²,
    /// below the release streams and far above any update stream.
    #[must_use]
    pub fn sample(step: usize) -> Self {
        Stream((1u64 << 62) - step as u64)
    }
    /// The stream of a one-run audit's coins (which canaries are included): between the
    /// search's streams (below 2⁶¹ + 2⁶⁰) and the samples' (above 2⁶² − 2⁶⁰).
    #[must_use]
    pub fn canaries() -> Self {
        Stream(3 << 60)
    }
    /// The stream of the seed of a one-run audit's input canaries: just above the gradient
    /// canaries' coins (their samples count down from those).
    #[must_use]
    pub fn input_canaries() -> Self {
        Stream((3 << 60) + 1)
    }
    /// The stream of step `step`'s Poisson sample of a one-run audit's canaries: counting down
    /// from the coins' stream.
    #[must_use]
    pub fn canary_sample(step: usize) -> Self {
        Stream((3 << 60) - step as u64)
    }
    /// The stream of a release made after step `step`, for a mechanism whose streams count
    /// down from `base` (far above any step number).
    #[must_use]
    pub fn release(base: u64, step: usize) -> Self {
        Stream(base - step as u64)
    }
}

impl NoiseSeed {
    /// The generator of `stream`.
    ///
    /// # Errors
    /// If the operating system's random source fails (training cannot continue safely).
    pub fn rng(self, stream: Stream) -> Result<ChaCha20Rng> {
        match self {
            NoiseSeed::Os => ChaCha20Rng::try_from_rng(&mut rand::rngs::SysRng)
                .map_err(|e| Error::Environment(format!("the operating system's random source failed: {e}"))),
            NoiseSeed::Fixed(seed) => {
                let mut rng = ChaCha20Rng::seed_from_u64(seed);
                rng.set_stream(stream.0);
                Ok(rng)
            }
        }
    }

    /// Whether the noise is a public function of a seed (and so not private).
    #[must_use]
    pub fn is_fixed(self) -> bool {
        matches!(self, NoiseSeed::Fixed(_))
    }

    /// A one-line description for run output.
    #[must_use]
    pub fn describe(self) -> String {
        match self {
            NoiseSeed::Os => "ChaCha20 CSPRNG keyed from the operating system".to_string(),
            NoiseSeed::Fixed(s) => {
                format!(
                    "ChaCha20 with FIXED seed {s}: reproducible, NOT private (the noise can be regenerated from the seed)"
                )
            }
        }
    }
}

/// One draw of N(0, std²), in f64. Added to an exact value in f64 it is the floating-point
/// Gaussian mechanism, with its caveat: the low-order bits of a floating-point sample are not
/// exactly Gaussian (Mironov 2012, see the module docs); `privacy.noise = "discrete-gaussian"` avoids that.
#[must_use]
pub fn gaussian(std: f64, rng: &mut ChaCha20Rng) -> f64 {
    let z: f64 = StandardNormal.sample(rng);
    std * z
}

/// Adds N(0, std²) independently to every coordinate of `v` in f32 (the unclipped sums of
/// non-private runs; private values get [`gaussian`] added in f64 to their exact value).
pub fn add_gaussian(v: &mut [f32], std: f64, rng: &mut ChaCha20Rng) {
    for x in v {
        *x += gaussian(std, rng) as f32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaussian_noise_has_the_requested_moments() {
        let mut v = vec![0.0f32; 200_000];
        add_gaussian(&mut v, 3.0, &mut NoiseSeed::Fixed(1).rng(Stream::update(1)).unwrap());
        let n = v.len() as f64;
        let mean = v.iter().map(|&x| f64::from(x)).sum::<f64>() / n;
        let var = v.iter().map(|&x| (f64::from(x) - mean).powi(2)).sum::<f64>() / n;
        // 5 standard errors
        assert!(mean.abs() < 5.0 * 3.0 / n.sqrt(), "mean {mean}");
        assert!((var - 9.0).abs() < 5.0 * 9.0 * (2.0 / n).sqrt(), "variance {var}");
    }

    #[test]
    fn fixed_seeds_reproduce_per_stream_and_os_seeds_differ() {
        let draw = |s: NoiseSeed, stream| {
            let mut v = vec![0.0f32; 4];
            add_gaussian(&mut v, 1.0, &mut s.rng(stream).unwrap());
            v
        };
        assert_eq!(draw(NoiseSeed::Fixed(5), Stream::update(3)), draw(NoiseSeed::Fixed(5), Stream::update(3)));
        assert_ne!(draw(NoiseSeed::Fixed(5), Stream::update(3)), draw(NoiseSeed::Fixed(5), Stream::update(4)));
        assert_ne!(
            draw(NoiseSeed::Fixed(5), Stream::update(3)),
            draw(NoiseSeed::Fixed(5), Stream::release(u64::MAX, 3))
        );
        assert_ne!(draw(NoiseSeed::Os, Stream::update(1)), draw(NoiseSeed::Os, Stream::update(1)));
    }
}
