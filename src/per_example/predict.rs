//! Counting correct predictions with a per-example engine: evaluation on test data, and the
//! confidential count behind the stopping rule's noisy training accuracy.

use rayon::prelude::*;

use super::PerExample;
use crate::data::{Examples, Normalize};

/// The number of examples of `data` that the model θ classifies correctly (parallel forward
/// passes). On training data this is confidential: release it only through an accounted
/// mechanism.
#[must_use]
pub fn count_correct<E: PerExample>(net: &E, theta: &[f32], data: Examples<'_>, norm: &Normalize) -> usize {
    const B: usize = 256;
    let (px, classes) = (net.input_len(), net.classes());
    (0..data.len().div_ceil(B))
        .into_par_iter()
        .map_init(
            || (net.scratch(B), vec![0.0f32; B * px]),
            |(ws, x), mb| {
                let (lo, hi) = (mb * B, ((mb + 1) * B).min(data.len()));
                data.normalised_into(lo..hi, norm, &mut x[..(hi - lo) * px]);
                let logits = net.logits(theta, &x[..(hi - lo) * px], hi - lo, ws);
                logits
                    .chunks_exact(classes)
                    .zip(&data.labels()[lo..hi])
                    .filter(|(z, y)| argmax(z) == usize::from(**y))
                    .count()
            },
        )
        .sum()
}

fn argmax(z: &[f32]) -> usize {
    z.iter().enumerate().fold((0, f32::NEG_INFINITY), |best, (i, &v)| if v > best.1 { (i, v) } else { best }).0
}
