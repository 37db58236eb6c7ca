//! Input normalisation: `(x/255 − mean)/std` per channel, its values checked.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// Normalisation `x ↦ (x/255 − mean)/std` per channel, as in the Opacus MNIST example
/// (real-valued features: `(x − mean)/std`).
///
/// In a config, `mean` and `std` are each one number for every channel or a list with one
/// number per channel (`[data.normalize] mean = [0.4914, 0.4822, 0.4465]`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Normalize {
    /// Mean of the pixel values in [0, 1] (default: MNIST's).
    #[serde(default = "mnist_mean")]
    pub mean: Channels,
    /// Standard deviation of the pixel values in [0, 1] (default: MNIST's).
    #[serde(default = "mnist_std")]
    pub std: Channels,
}

/// The smallest standard deviation a normalisation may divide by (1/std must stay far from
/// f32's overflow for any input).
pub const MIN_STD: f32 = 1e-30;

/// One value for every channel, or one per channel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Channels {
    /// The same value for every channel.
    All(f32),
    /// One value per channel, in channel order.
    Each(Vec<f32>),
}

impl Channels {
    /// The value for channel `c`: `None` for a per-channel list without it.
    #[must_use]
    pub fn get(&self, c: usize) -> Option<f32> {
        match self {
            Channels::All(v) => Some(*v),
            Channels::Each(v) => v.get(c).copied(),
        }
    }

    fn values(&self) -> &[f32] {
        match self {
            Channels::All(v) => std::slice::from_ref(v),
            Channels::Each(v) => v,
        }
    }
}

impl std::fmt::Display for Channels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Channels::All(v) => write!(f, "{v}"),
            Channels::Each(v) => write!(f, "{v:?}"),
        }
    }
}

fn mnist_mean() -> Channels {
    Normalize::MNIST.mean
}
fn mnist_std() -> Channels {
    Normalize::MNIST.std
}

impl Normalize {
    /// MNIST's (0.1307, 0.3081): the pixel mean and std of MNIST's *training* split
    /// (0.13066, 0.30811), as published with the Opacus and PyTorch MNIST examples — a public
    /// constant of the literature, never recomputed from the data a run trains on.
    pub const MNIST: Normalize = Normalize::all(0.1307, 0.3081);

    /// The same mean and std for every channel.
    #[must_use]
    pub const fn all(mean: f32, std: f32) -> Self {
        Normalize { mean: Channels::All(mean), std: Channels::All(std) }
    }

    /// Checks it against data with `channels` channels: every mean finite, every std finite
    /// and at least [`MIN_STD`], and a per-channel list exactly one value per channel.
    ///
    /// # Errors
    /// [`Error::Config`] naming `data.normalize.mean` or `data.normalize.std` and the fix.
    pub fn check(&self, channels: usize) -> Result<()> {
        for (field, values, positive) in [("mean", &self.mean, false), ("std", &self.std, true)] {
            let field = format!("data.normalize.{field}");
            if let Channels::Each(v) = values
                && v.len() != channels
            {
                return Err(Error::config(
                    &field,
                    format!(
                        "{} values for data with {channels} channels (a CSV file's feature columns are its \
                         channels): give one per channel, or one number for all",
                        v.len()
                    ),
                ));
            }
            // A std so small that 1/std overflows an f32 would scale inputs to infinity.
            let unusable = |x: f32| !x.is_finite() || (positive && x < MIN_STD);
            if let Some(bad) = values.values().iter().find(|x| unusable(**x)) {
                let need = if positive { "a finite number of at least 1e-30" } else { "a finite number" };
                return Err(Error::config(&field, format!("{bad} is not {need}")));
            }
        }
        Ok(())
    }

    /// `(scale, shift)` for channel `c` such that the normalised value is `raw · scale − shift`,
    /// with `raw` the byte (`bytes`) or the feature value.
    pub(super) fn affine(&self, c: usize, bytes: bool) -> (f32, f32) {
        let (mean, std) = (self.mean.get(c).unwrap_or(0.0), self.std.get(c).unwrap_or(1.0));
        let unit = if bytes { 255.0 } else { 1.0 };
        (1.0 / (unit * std), mean / std)
    }
}
