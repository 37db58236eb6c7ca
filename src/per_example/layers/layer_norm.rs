//! Layer normalisation of a flat activation within each example (Ba, Kiros & Hinton 2016),
//! then a per-feature scale γ and (optional) shift β: `y = γ_j·x̂_j + β_j`, with
//! `x̂ = (x − μ)/√(σ² + ε)` over the example's n features (μ and the biased σ², ε = 10⁻⁵, as
//! burn and PyTorch).
//!
//! Per example: ∂ℓᵢ/∂γ_j = δ_j·x̂_j and ∂ℓᵢ/∂β_j = δ_j. Input gradient, with d = γ ⊙ δ:
//! `∂ℓᵢ/∂x = (d − mean(d) − x̂·mean(d ⊙ x̂)) / √(σ² + ε)`. The means run in 16 f32 lanes added
//! in a fixed tree (the same values on every instruction set); the forward keeps each example's
//! μ and 1/√(σ² + ε) for the backward.

use super::{Alloc, Backward, Forward, Init, Needs, Params, Rule};
use crate::arch::kinds;
use crate::arch::{Shape, ShapeError};
use crate::simd::{lane_sum, lane_sum2};

/// burn's and PyTorch's default ε.
const EPSILON: f64 = 1e-5;

/// A compiled layer normalisation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LayerNorm {
    /// Features.
    pub n: usize,
    /// Offset of γ (`n` values) in θ.
    pub gamma: usize,
    /// Offset of β (`n` values) in θ, if the layer has it.
    pub beta: Option<usize>,
}

impl LayerNorm {
    pub(crate) fn compile(
        spec: kinds::LayerNorm,
        input: Shape,
        _: Shape,
        at: usize,
        alloc: &mut Alloc,
    ) -> Result<Self, ShapeError> {
        let Shape::Flat(n) = input else {
            return Err(ShapeError { layer: Some(at), reason: "layer_norm: needs a flat input".into() });
        };
        let gamma = alloc.take(n, at)?;
        let beta = if spec.bias { Some(alloc.take(n, at)?) } else { None };
        Ok(Self { n, gamma, beta })
    }
}

impl Rule for LayerNorm {
    fn out_len(&self) -> usize {
        self.n
    }

    fn params(&self) -> Option<Params> {
        Some(Params {
            weight: self.gamma,
            weight_len: self.n,
            bias: self.beta,
            bias_len: if self.beta.is_some() { self.n } else { 0 },
            init: Init::ScaleOneShiftZero,
        })
    }

    /// Each example's μ and 1/√(σ² + ε), kept from the forward to the backward.
    fn needs(&self) -> Needs {
        Needs { cols: 2, ..Needs::default() }
    }

    fn forward(&self, f: Forward<'_>) {
        let n = f.b * self.n;
        forward_batch(self, f.theta, &f.input[..n], &mut f.output[..n], &mut f.own.cols[..2 * f.b]);
    }

    fn backward(&self, g: Backward<'_>) {
        let n = g.b * self.n;
        backward_batch(self, g.theta, (&g.input[..n], &g.dy[..n], &g.own.cols[..2 * g.b]), g.dx, (g.grads, g.p));
    }
}

crate::simd::kernel! {
/// The forward pass of the examples of `x` (each `n` values): each example's μ and
/// 1/√(σ² + ε) into `stats`, then `y = γ·x̂ + β`.
fn forward_batch(l: &LayerNorm, theta: &[f32], x: &[f32], y: &mut [f32], stats: &mut [f32]) {
    let n = l.n;
    let gamma = &theta[l.gamma..l.gamma + n];
    let beta = l.beta.map(|b| &theta[b..b + n]);
    for ((x, y), stats) in x.chunks_exact(n).zip(y.chunks_exact_mut(n)).zip(stats.chunks_exact_mut(2)) {
        let mean = lane_sum(x, |v| v) / n as f32;
        let var = lane_sum(x, |v| (v - mean) * (v - mean)) / n as f32;
        let inv = (f64::from(var) + EPSILON).sqrt().recip() as f32;
        (stats[0], stats[1]) = (mean, inv);
        for ((o, &v), &g) in y.iter_mut().zip(x).zip(gamma) {
            *o = (v - mean) * inv * g;
        }
        if let Some(beta) = beta {
            y.iter_mut().zip(beta).for_each(|(o, &b)| *o += b);
        }
    }
}
}

crate::simd::kernel! {
/// The backward pass: each example's γ and β rows, and with `dx` its input gradient
/// `(d − mean(d) − x̂·mean(d ⊙ x̂))/√(σ² + ε)` with d = γ ⊙ δ.
fn backward_batch(
    l: &LayerNorm,
    theta: &[f32],
    (x, dy, stats): (&[f32], &[f32], &[f32]),
    mut dx: Option<&mut [f32]>,
    (grads, p): (&mut [f32], usize),
) {
    let n = l.n;
    let gamma = &theta[l.gamma..l.gamma + n];
    let examples = x.chunks_exact(n).zip(dy.chunks_exact(n)).zip(stats.chunks_exact(2));
    for (e, ((x, dy), stats)) in examples.enumerate() {
        let (mean, inv) = (stats[0], stats[1]);
        let row = &mut grads[e * p..(e + 1) * p];
        // γ's row is δ ⊙ x̂; β's is δ.
        for ((t, &v), &d) in row[l.gamma..l.gamma + n].iter_mut().zip(x).zip(dy) {
            *t = (v - mean) * inv * d;
        }
        if let Some(b) = l.beta {
            row[b..b + n].copy_from_slice(dy);
        }
        let Some(dx) = dx.as_deref_mut() else { continue };
        let mean_d = lane_sum2(gamma, dy, |g, d| g * d) / n as f32;
        let mean_dx = lane_sum2(gamma, &row[l.gamma..l.gamma + n], |g, t| g * t) / n as f32;
        let out = &mut dx[e * n..(e + 1) * n];
        for (((o, &v), &d), &g) in out.iter_mut().zip(x).zip(dy).zip(gamma) {
            *o = (g * d - mean_d - (v - mean) * inv * mean_dx) * inv;
        }
    }
}
}
