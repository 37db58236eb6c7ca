//! Gaussian noise from a cryptographically secure generator (ChaCha20).
//!
//! By default every draw is seeded from the operating system. A fixed seed — for experiments
//! and tests only — derives one ChaCha20 stream per step, so a resumed run draws the same
//! noise as an uninterrupted one; runs with a fixed seed say so in their output.

use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use rand_distr::{Distribution, StandardNormal};
use serde::{Deserialize, Serialize};

/// Where the noise comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum NoiseSeed {
    /// A fresh ChaCha20 key from the operating system for every step (the default).
    Os,
    /// A fixed seed: reproducible, for experiments and tests only — not for published runs.
    Fixed(u64),
}

impl NoiseSeed {
    /// The generator for step `step` (1-based).
    ///
    /// # Panics
    /// If the operating system's random source fails (training cannot continue safely).
    #[must_use]
    pub fn rng_for_step(self, step: u64) -> ChaCha20Rng {
        match self {
            NoiseSeed::Os => ChaCha20Rng::try_from_rng(&mut rand::rngs::SysRng).expect("the OS random source failed"),
            NoiseSeed::Fixed(seed) => {
                let mut rng = ChaCha20Rng::seed_from_u64(seed);
                rng.set_stream(step);
                rng
            }
        }
    }

    /// A one-line description for run output.
    #[must_use]
    pub fn describe(self) -> String {
        match self {
            NoiseSeed::Os => "ChaCha20 CSPRNG seeded from the OS".to_string(),
            NoiseSeed::Fixed(s) => {
                format!("ChaCha20 with FIXED seed {s} (reproducible; for experiments only, not for release)")
            }
        }
    }
}

/// Adds N(0, std²) independently to every coordinate of `v`.
pub fn add_gaussian(v: &mut [f32], std: f64, rng: &mut ChaCha20Rng) {
    for x in v {
        let z: f64 = StandardNormal.sample(rng);
        *x += (std * z) as f32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gaussian_noise_has_the_requested_moments() {
        let mut v = vec![0.0f32; 200_000];
        add_gaussian(&mut v, 3.0, &mut NoiseSeed::Fixed(1).rng_for_step(1));
        let n = v.len() as f64;
        let mean = v.iter().map(|&x| f64::from(x)).sum::<f64>() / n;
        let var = v.iter().map(|&x| (f64::from(x) - mean).powi(2)).sum::<f64>() / n;
        // 5 standard errors
        assert!(mean.abs() < 5.0 * 3.0 / n.sqrt(), "mean {mean}");
        assert!((var - 9.0).abs() < 5.0 * 9.0 * (2.0 / n).sqrt(), "variance {var}");
    }

    #[test]
    fn fixed_seeds_reproduce_per_step_and_os_seeds_differ() {
        let draw = |s: NoiseSeed, step| {
            let mut v = vec![0.0f32; 4];
            add_gaussian(&mut v, 1.0, &mut s.rng_for_step(step));
            v
        };
        assert_eq!(draw(NoiseSeed::Fixed(5), 3), draw(NoiseSeed::Fixed(5), 3));
        assert_ne!(draw(NoiseSeed::Fixed(5), 3), draw(NoiseSeed::Fixed(5), 4));
        assert_ne!(draw(NoiseSeed::Os, 1), draw(NoiseSeed::Os, 1));
    }
}
