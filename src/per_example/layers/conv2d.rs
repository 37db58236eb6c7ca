//! 2-d convolution (square kernel, stride, zero padding) via im2col + GEMM: the fast engine's
//! rule over [`crate::kernels::conv`]'s kernels (shared with the burn engine's `Conv2d` on
//! flex). Weights `[cout, cin, k, k]` then the bias in θ.

use super::Alloc;
use super::{Backward, Forward, Init, Needs, Params, Rule};
use crate::arch::kinds;
use crate::arch::{Shape, ShapeError, checked};
use crate::kernels::conv::{Geometry, forward_batch, forward_scratch, input_grad_batch, weight_rows};

/// A compiled convolution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conv2d {
    /// The window geometry.
    pub geometry: Geometry,
    /// Output channels.
    pub cout: usize,
    /// Offset of the weights in θ.
    pub w: usize,
    /// Offset of the bias in θ, if any.
    pub b: Option<usize>,
}

impl Conv2d {
    pub(crate) fn compile(
        spec: kinds::Conv2d,
        input: Shape,
        output: Shape,
        at: usize,
        alloc: &mut Alloc,
    ) -> Result<Self, ShapeError> {
        let kinds::Conv2d { out_channels, kernel, stride, padding, bias } = spec;
        let (Shape::Spatial { c, h, w }, Shape::Spatial { h: hout, w: wout, .. }) = (input, output) else {
            return Err(ShapeError { layer: Some(at), reason: "conv2d: needs a spatial input".into() });
        };
        checked(&[hout, wout, c, kernel, kernel], at, "the conv2d im2col matrix")?;
        let wo = alloc.take(checked(&[out_channels, c, kernel, kernel], at, "the conv2d weight")?, at)?;
        let b = if bias { Some(alloc.take(out_channels, at)?) } else { None };
        let geometry = Geometry { cin: c, hin: h, win: w, k: kernel, stride, pad: padding, hout, wout };
        Ok(Self { geometry, cout: out_channels, w: wo, b })
    }
}

impl Rule for Conv2d {
    fn out_len(&self) -> usize {
        self.cout * self.geometry.positions()
    }

    fn params(&self) -> Option<Params> {
        let kk = self.geometry.patch();
        Some(Params {
            weight: self.w,
            weight_len: self.cout * kk,
            bias: self.b,
            bias_len: self.cout,
            init: Init::Uniform { fan_in: kk },
        })
    }

    /// Forward T·K·cout multiply-adds, the weight gradient Δᵢ·colsᵢ as many, the column
    /// gradients Δᵢᵀ·W as many again.
    fn flops(&self, input_grad: bool) -> u64 {
        let one = 2 * (self.geometry.positions() * self.geometry.patch() * self.cout) as u64;
        one * if input_grad { 3 } else { 2 }
    }

    fn needs(&self) -> Needs {
        let (t, kk) = (self.geometry.positions(), self.geometry.patch());
        // hwc: the channel-last outputs or output gradients, or the wide rows of one example.
        let hwc = self.out_len().max(forward_scratch(&self.geometry, 1, self.cout).1);
        Needs { cols: self.geometry.cols_len(), argmax: 0, hwc, dcols: t * kk }
    }

    fn forward(&self, f: Forward<'_>) {
        let kk = self.geometry.patch();
        let weights = &f.theta[self.w..self.w + self.cout * kk];
        let bias = self.b.map(|bo| &f.theta[bo..bo + self.cout]);
        forward_batch(&self.geometry, (weights, bias), (f.b, f.input), (&mut f.own.cols, &mut f.shared.hwc), f.output);
    }

    /// Each example's weight and bias gradients are added up right after they are written,
    /// while they are in L1 (a pass over the micro-batch's rows afterwards reads them from L2).
    fn adds_norms(&self) -> bool {
        true
    }

    fn backward(&self, mut g: Backward<'_>) {
        let geo = &self.geometry;
        let (t, kk, cout, b, p) = (geo.positions(), geo.patch(), self.cout, g.b, g.p);
        let weights = &g.theta[self.w..self.w + cout * kk];
        for e in 0..b {
            let row = &mut g.grads[e * p..(e + 1) * p];
            let dye = &g.dy[e * t * cout..(e + 1) * t * cout];
            let n = geo.cols_len();
            let cols = &g.own.cols[e * n..(e + 1) * n];
            let (weight, rest) = row[self.w..].split_at_mut(cout * kk);
            // `compile` takes the bias's offsets right after the weights'.
            let bias = self.b.map(|bo| &mut rest[bo - self.w - cout * kk..][..cout]);
            weight_rows(geo, dye, cols, weight, bias);
            if let Some(norms) = g.norms.as_deref_mut() {
                norms[e] += self.squared_norm(row);
            }
        }
        if let Some(dx) = g.dx {
            input_grad_batch(geo, weights, (b, g.dy), (&mut g.shared.hwc, &mut g.shared.dcols), dx);
        }
    }
}
