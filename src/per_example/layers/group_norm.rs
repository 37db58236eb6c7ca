//! Group normalisation within each example (Wu & He 2018), then a per-channel scale γ and
//! shift β: `y = γ_c·x̂ + β_c`, with `x̂ = (x − μ)/√(σ² + ε)` over each group of `c/G`
//! channels (μ and the biased σ² of the group's values, ε = 10⁻⁵, as burn and PyTorch).
//!
//! Per example: ∂ℓᵢ/∂γ_c = Σ δ ⊙ x̂ and ∂ℓᵢ/∂β_c = Σ δ over the channel's positions. Input
//! gradient, with d = γ ⊙ δ and means over the group:
//! `∂ℓᵢ/∂x = (d − mean(d) − x̂·mean(d ⊙ x̂)) / √(σ² + ε)`. The statistics are summed in f64;
//! the forward keeps each group's μ and 1/√(σ² + ε) for the backward.

use super::Alloc;
use super::{Backward, Forward, Init, Needs, Params, Rule};
use crate::arch::kinds;
use crate::arch::{Shape, ShapeError};

/// burn's and PyTorch's default ε.
const EPSILON: f64 = 1e-5;

/// A compiled group normalisation.
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
    pub(crate) fn compile(
        spec: kinds::GroupNorm,
        input: Shape,
        _: Shape,
        at: usize,
        alloc: &mut Alloc,
    ) -> Result<Self, ShapeError> {
        let Shape::Spatial { c, h, w } = input else {
            return Err(ShapeError { layer: Some(at), reason: "group_norm: needs a spatial input".into() });
        };
        let (gamma, beta) = (alloc.take(c, at)?, alloc.take(c, at)?);
        Ok(Self { c, hw: h * w, groups: spec.groups, gamma, beta })
    }

    /// Values per group.
    fn per_group(&self) -> usize {
        self.c / self.groups * self.hw
    }
}

impl Rule for GroupNorm {
    fn out_len(&self) -> usize {
        self.c * self.hw
    }

    fn params(&self) -> Option<Params> {
        Some(Params {
            weight: self.gamma,
            weight_len: self.c,
            bias: Some(self.beta),
            bias_len: self.c,
            init: Init::ScaleOneShiftZero,
        })
    }

    /// Each group's μ and 1/√(σ² + ε), kept from the forward to the backward.
    fn needs(&self) -> Needs {
        Needs { cols: 2 * self.groups, ..Needs::default() }
    }

    fn forward(&self, f: Forward<'_>) {
        let (n, len, m) = (self.out_len(), self.per_group(), self.hw);
        let (gamma, beta) = (&f.theta[self.gamma..self.gamma + self.c], &f.theta[self.beta..self.beta + self.c]);
        for e in 0..f.b {
            let (x, y) = (&f.input[e * n..(e + 1) * n], &mut f.output[e * n..(e + 1) * n]);
            let stats = &mut f.own.cols[e * 2 * self.groups..(e + 1) * 2 * self.groups];
            for g in 0..self.groups {
                let group = &x[g * len..(g + 1) * len];
                let mean = group.iter().map(|&v| f64::from(v)).sum::<f64>() / len as f64;
                let var = group.iter().map(|&v| (f64::from(v) - mean).powi(2)).sum::<f64>() / len as f64;
                let inv = 1.0 / (var + EPSILON).sqrt();
                (stats[2 * g], stats[2 * g + 1]) = (mean as f32, inv as f32);
                for ch in g * len / m..(g + 1) * len / m {
                    let (scale, shift) = (gamma[ch], beta[ch]);
                    for (o, &v) in y[ch * m..(ch + 1) * m].iter_mut().zip(&x[ch * m..(ch + 1) * m]) {
                        *o = ((f64::from(v) - mean) * inv) as f32 * scale + shift;
                    }
                }
            }
        }
    }

    fn backward(&self, mut g: Backward<'_>) {
        let (n, len, m, p) = (self.out_len(), self.per_group(), self.hw, g.p);
        let gamma = &g.theta[self.gamma..self.gamma + self.c];
        for e in 0..g.b {
            let (x, dy) = (&g.input[e * n..(e + 1) * n], &g.dy[e * n..(e + 1) * n]);
            let stats = &g.own.cols[e * 2 * self.groups..(e + 1) * 2 * self.groups];
            let row = &mut g.grads[e * p..(e + 1) * p];
            for grp in 0..self.groups {
                let (mean, inv) = (f64::from(stats[2 * grp]), f64::from(stats[2 * grp + 1]));
                let channels = grp * len / m..(grp + 1) * len / m;
                // Σ d and Σ d·x̂ over the group, and each channel's parameter gradients.
                let (mut sum_d, mut sum_dx) = (0.0f64, 0.0f64);
                for ch in channels.clone() {
                    let (mut dgamma, mut dbeta) = (0.0f64, 0.0f64);
                    for (&v, &d) in x[ch * m..(ch + 1) * m].iter().zip(&dy[ch * m..(ch + 1) * m]) {
                        let xhat = (f64::from(v) - mean) * inv;
                        dgamma += f64::from(d) * xhat;
                        dbeta += f64::from(d);
                    }
                    row[self.gamma + ch] = dgamma as f32;
                    row[self.beta + ch] = dbeta as f32;
                    let scale = f64::from(gamma[ch]);
                    sum_d += scale * dbeta;
                    sum_dx += scale * dgamma;
                }
                let Some(dx) = g.dx.as_deref_mut() else { continue };
                let (mean_d, mean_dx) = (sum_d / len as f64, sum_dx / len as f64);
                for ch in channels {
                    let scale = f64::from(gamma[ch]);
                    let span = ch * m..(ch + 1) * m;
                    let out = &mut dx[e * n..(e + 1) * n][span.clone()];
                    for ((o, &v), &d) in out.iter_mut().zip(&x[span.clone()]).zip(&dy[span]) {
                        let xhat = (f64::from(v) - mean) * inv;
                        *o = ((scale * f64::from(d) - mean_d - xhat * mean_dx) * inv) as f32;
                    }
                }
            }
        }
    }
}
