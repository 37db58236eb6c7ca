//! Fully connected layer `y = W a + b`, weights `[dout, din]` then the bias in θ.
//!
//! Per example: ∂ℓᵢ/∂W = δᵢ aᵢᵀ (an outer product), ∂ℓᵢ/∂b = δᵢ. For the clip the outer product
//! is never written: it keeps δᵢ (aᵢ is its input, kept by the engine) and the clip multiplies
//! the exact products out as it adds them to the sum ([`crate::clip::Outer`]); their squared
//! norm is ‖δᵢ‖²‖aᵢ‖², from the factors ([`crate::clip::outer_squared_norm`]), so the layer's
//! part of the row costs O(din + dout) instead of writing and reading din·dout values. Rows
//! asked for in full ([`super::super::Network::backward`]) get the f32 products written.
//! Input gradient: Wᵀ δᵢ, batched.

use super::Alloc;
use super::{Backward, Forward, Init, OuterBlock, Params, Rule};
use crate::arch::kinds;
use crate::arch::{Shape, ShapeError, checked};
use crate::kernels::matrix::{MatMut, MatRef, matmul};

/// A compiled fully connected layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Linear {
    /// Input features.
    pub din: usize,
    /// Output features.
    pub dout: usize,
    /// Offset of the `[dout, din]` weights in θ.
    pub w: usize,
    /// Offset of the bias in θ, if any.
    pub b: Option<usize>,
}

impl Linear {
    pub(crate) fn compile(
        spec: kinds::Linear,
        input: Shape,
        _: Shape,
        at: usize,
        alloc: &mut Alloc,
    ) -> Result<Self, ShapeError> {
        let kinds::Linear { out_features, bias } = spec;
        let din = input.len();
        let w = alloc.take(checked(&[out_features, din], at, "the linear weight")?, at)?;
        let b = if bias { Some(alloc.take(out_features, at)?) } else { None };
        Ok(Self { din, dout: out_features, w, b })
    }
}

impl Rule for Linear {
    fn out_len(&self) -> usize {
        self.dout
    }

    fn params(&self) -> Option<Params> {
        Some(Params {
            weight: self.w,
            weight_len: self.dout * self.din,
            bias: self.b,
            bias_len: self.dout,
            init: Init::Uniform { fan_in: self.din },
        })
    }

    /// Forward din·dout multiply-adds, the weight gradient δᵢ aᵢᵀ din·dout multiplies, the input
    /// gradient Wᵀδᵢ din·dout multiply-adds.
    fn flops(&self, input_grad: bool) -> u64 {
        let macs = (self.din * self.dout) as u64;
        2 * macs + macs + if input_grad { 2 * macs } else { 0 }
    }

    fn forward(&self, f: Forward<'_>) {
        let (b, din, dout) = (f.b, self.din, self.dout);
        let weights = MatRef::row_major(&f.theta[self.w..self.w + dout * din], dout, din);
        matmul(
            MatMut::row_major(f.output, b, dout),
            MatRef::row_major(&f.input[..b * din], b, din),
            weights.t(),
            false,
        );
        if let Some(bo) = self.b {
            let bias = &f.theta[bo..bo + dout];
            for row in f.output.chunks_exact_mut(dout) {
                row.iter_mut().zip(bias).for_each(|(o, b)| *o += b);
            }
        }
    }

    fn adds_norms(&self) -> bool {
        true
    }

    fn outer(&self) -> Option<OuterBlock> {
        Some(OuterBlock { at: self.w, dout: self.dout, din: self.din })
    }

    fn backward(&self, mut g: Backward<'_>) {
        let (b, din, dout, p) = (g.b, self.din, self.dout, g.p);
        for e in 0..b {
            let row = &mut g.grads[e * p..(e + 1) * p];
            let (a, d) = (&g.input[e * din..(e + 1) * din], &g.dy[e * dout..(e + 1) * dout]);
            let mut sq = if g.factored {
                g.own.delta[e * dout..(e + 1) * dout].copy_from_slice(d);
                crate::clip::outer_squared_norm(d, a)
            } else {
                outer(&mut row[self.w..self.w + dout * din], d, a)
            };
            if let Some(bo) = self.b {
                row[bo..bo + dout].copy_from_slice(d);
                sq += crate::clip::squared_norm(&row[bo..bo + dout]);
            }
            if let Some(norms) = g.norms.as_deref_mut() {
                norms[e] += sq;
            }
        }
        if let Some(dx) = g.dx {
            let weights = MatRef::row_major(&g.theta[self.w..self.w + dout * din], dout, din);
            matmul(MatMut::row_major(dx, b, din), MatRef::row_major(g.dy, b, dout), weights, false);
        }
    }
}

crate::simd::kernel! {
/// `w[o, i] = d[o] · a[i]` (row-major `w`): one example's weight gradient. Returns the f64 sum
/// of the squares of the values written, added up while they are in registers (in 32 lanes, as
/// [`crate::clip::squared_norm`] does), for the row's squared norm.
fn outer(w: &mut [f32], d: &[f32], a: &[f32]) -> f64 {
    const LANES: usize = 32;
    if a.is_empty() {
        return 0.0;
    }
    let mut lanes = [0.0f64; LANES];
    for (wo, &dov) in w.chunks_exact_mut(a.len()).zip(d) {
        let (mut wc, mut ac) = (wo.chunks_exact_mut(LANES), a.chunks_exact(LANES));
        for (cw, ca) in (&mut wc).zip(&mut ac) {
            for ((l, gw), &av) in lanes.iter_mut().zip(cw).zip(ca) {
                let v = dov * av;
                *gw = v;
                *l += f64::from(v) * f64::from(v);
            }
        }
        for ((l, gw), &av) in lanes.iter_mut().zip(wc.into_remainder()).zip(ac.remainder()) {
            let v = dov * av;
            *gw = v;
            *l += f64::from(v) * f64::from(v);
        }
    }
    crate::clip::sum_lanes(lanes)
}
}
