//! The group normalisation kernels both engines run: normalisation within each example (Wu &
//! He 2018), then a per-channel scale γ and shift β: `y = γ_c·x̂ + β_c`, with `x̂ = (x − μ)/√(σ² + ε)` over each group of `c/G`
//! channels (μ and the biased σ² of the group's values, ε = 10⁻⁵, as burn and PyTorch).
//!
//! Per example: ∂ℓᵢ/∂γ_c = Σ δ ⊙ x̂ and ∂ℓᵢ/∂β_c = Σ δ over the channel's positions. Input
//! gradient, with d = γ ⊙ δ and means over the group:
//! `∂ℓᵢ/∂x = (d − mean(d) − x̂·mean(d ⊙ x̂)) / √(σ² + ε)`. The sums run in 16 f32 lanes added
//! in a fixed tree (the same values on every instruction set); the forward keeps each group's
//! μ and 1/√(σ² + ε) for the backward.
//!
//! The fast engine's group_norm rule ([`crate::per_example::layers`]) and the burn engine's
//! `dpgd::nn::GroupNorm` on flex call the same functions.

use crate::simd::{lane_sum, lane_sum2};

/// burn's and PyTorch's default ε.
pub(crate) const EPSILON: f64 = 1e-5;

/// A compiled group normalisation: its sizes, and where γ and β sit in the parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GroupNorm {
    /// Channels.
    pub c: usize,
    /// Positions per channel (h·w).
    pub hw: usize,
    /// Groups.
    pub groups: usize,
    /// Offset of γ (`c` values) in θ; β follows.
    pub gamma: usize,
    /// Offset of β in θ.
    pub beta: usize,
}

impl GroupNorm {
    /// Values per group.
    fn per_group(&self) -> usize {
        self.c / self.groups * self.hw
    }

    /// Values per example.
    pub(crate) fn values(&self) -> usize {
        self.c * self.hw
    }
}

crate::simd::kernel! {
/// The forward pass of the examples of `x` (each `c·hw` values): each group's μ and
/// 1/√(σ² + ε) into `stats`, then `y = a·x + c` per channel with `a = γ/√(σ² + ε)` and
/// `c = β − μ·a`.
pub(crate) fn forward_batch(l: &GroupNorm, theta: &[f32], x: &[f32], y: &mut [f32], stats: &mut [f32]) {
    let (n, len, m) = (l.values(), l.per_group(), l.hw);
    let (gamma, beta) = (&theta[l.gamma..l.gamma + l.c], &theta[l.beta..l.beta + l.c]);
    for ((x, y), stats) in x.chunks_exact(n).zip(y.chunks_exact_mut(n)).zip(stats.chunks_exact_mut(2 * l.groups)) {
        for g in 0..l.groups {
            let group = &x[g * len..(g + 1) * len];
            let mean = lane_sum(group, |v| v) / len as f32;
            let var = lane_sum(group, |v| (v - mean) * (v - mean)) / len as f32;
            let inv = (f64::from(var) + EPSILON).sqrt().recip() as f32;
            (stats[2 * g], stats[2 * g + 1]) = (mean, inv);
            for ch in g * len / m..(g + 1) * len / m {
                let a = gamma[ch] * inv;
                let c = beta[ch] - mean * a;
                for (o, &v) in y[ch * m..(ch + 1) * m].iter_mut().zip(&x[ch * m..(ch + 1) * m]) {
                    *o = v * a + c;
                }
            }
        }
    }
}
}

crate::simd::kernel! {
/// The backward pass: each example's γ and β rows, and with `dx` its input gradient
/// `(γ·δ − mean(γ·δ) − x̂·mean(γ·δ·x̂))/√(σ² + ε)`, written as `p·δ − q·x + r` per channel.
pub(crate) fn backward_batch(
    l: &GroupNorm,
    theta: &[f32],
    (x, dy, stats): (&[f32], &[f32], &[f32]),
    mut dx: Option<&mut [f32]>,
    (grads, p): (&mut [f32], usize),
) {
    let (n, len, m) = (l.values(), l.per_group(), l.hw);
    let gamma = &theta[l.gamma..l.gamma + l.c];
    let examples = x.chunks_exact(n).zip(dy.chunks_exact(n)).zip(stats.chunks_exact(2 * l.groups));
    for (e, ((x, dy), stats)) in examples.enumerate() {
        let row = &mut grads[e * p..(e + 1) * p];
        for grp in 0..l.groups {
            let (mean, inv) = (stats[2 * grp], stats[2 * grp + 1]);
            let channels = grp * len / m..(grp + 1) * len / m;
            // Each channel's Σ δ·x̂ and Σ δ (its γ and β gradients), and their γ-weighted sums.
            let (mut sum_d, mut sum_dx) = (0.0f32, 0.0f32);
            for ch in channels.clone() {
                let span = ch * m..(ch + 1) * m;
                let dgamma = lane_sum2(&x[span.clone()], &dy[span.clone()], |v, d| (v - mean) * d) * inv;
                let dbeta = lane_sum(&dy[span], |d| d);
                (row[l.gamma + ch], row[l.beta + ch]) = (dgamma, dbeta);
                sum_d += gamma[ch] * dbeta;
                sum_dx += gamma[ch] * dgamma;
            }
            let Some(dx) = dx.as_deref_mut() else { continue };
            let (mean_d, mean_dx) = (sum_d / len as f32, sum_dx / len as f32);
            let q = inv * inv * mean_dx;
            let r = mean * q - inv * mean_d;
            for ch in channels {
                let pc = gamma[ch] * inv;
                let span = ch * m..(ch + 1) * m;
                let out = &mut dx[e * n..(e + 1) * n][span.clone()];
                for ((o, &v), &d) in out.iter_mut().zip(&x[span.clone()]).zip(&dy[span]) {
                    *o = pc * d - q * v + r;
                }
            }
        }
    }
}
}
