//! 2-d convolution (square kernel, stride, zero padding) via im2col + GEMM. Weights
//! `[cout, cin, k, k]` then the bias in θ.
//!
//! Per example i with im2col matrix colsᵢ (`T × K`, T = output positions, K = cin·k²):
//! forward `yᵢ = W colsᵢᵀ + b`; parameter gradient ∂ℓᵢ/∂W = Δᵢ colsᵢ (one small GEMM per
//! example), ∂ℓᵢ/∂b = Σ_positions Δᵢ; input gradient col2im(Δᵢᵀ W). im2col and its adjoint
//! col2im walk the same [`Geometry::segments`], so they cannot drift apart.

use super::super::matrix::{MatMut, MatRef, matmul};
use super::super::network::{Alloc, Shape, ShapeError, checked};
use super::{Backward, Forward, Needs, Params, Rule};
use crate::arch::kinds;

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

/// Where each k-wide window row of an im2col matrix reads its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    /// Input channels.
    pub cin: usize,
    /// Input height.
    pub hin: usize,
    /// Input width.
    pub win: usize,
    /// Kernel size.
    pub k: usize,
    /// Stride.
    pub stride: usize,
    /// Zero padding on every side.
    pub pad: usize,
    /// Output height.
    pub hout: usize,
    /// Output width.
    pub wout: usize,
}

impl Geometry {
    /// Output positions T.
    pub fn positions(&self) -> usize {
        self.hout * self.wout
    }
    /// Columns K = cin·k² of the im2col matrix.
    pub fn patch(&self) -> usize {
        self.cin * self.k * self.k
    }
    /// Calls `f(segment, j_lo, j_hi, source)` for every k-wide segment of one example's im2col
    /// matrix (row = output position, columns in the weights' (channel, i, j) order): columns
    /// `segment + j_lo .. segment + j_hi` read input values `source ..` of the channel-major
    /// input; the rest of the segment (or all of it when `source` is `None`) is padding.
    #[inline]
    fn segments(&self, mut f: impl FnMut(usize, usize, usize, Option<usize>)) {
        let Geometry { cin, hin, win, k, stride: s, pad, hout, wout } = *self;
        let kk = self.patch();
        for oh in 0..hout {
            for ow in 0..wout {
                let row = (oh * wout + ow) * kk;
                let w0 = (ow * s) as isize - pad as isize;
                // columns j in [j_lo, j_hi) fall inside the input
                let j_lo = (-w0).clamp(0, k as isize) as usize;
                let j_hi = (win as isize - w0).clamp(0, k as isize) as usize;
                for ch in 0..cin {
                    for i in 0..k {
                        let ih = (oh * s + i) as isize - pad as isize;
                        let inside = ih >= 0 && (ih as usize) < hin && j_lo < j_hi;
                        let source = inside.then(|| (ch * hin + ih as usize) * win + (w0 + j_lo as isize) as usize);
                        f(row + (ch * k + i) * k, j_lo, j_hi, source);
                    }
                }
            }
        }
    }

    /// One example's im2col matrix from its channel-major input.
    fn im2col(&self, x: &[f32], cols: &mut [f32]) {
        let k = self.k;
        self.segments(|seg, lo, hi, source| {
            let s = &mut cols[seg..seg + k];
            match source {
                None => s.fill(0.0),
                Some(src) => {
                    s[..lo].fill(0.0);
                    s[lo..hi].copy_from_slice(&x[src..src + (hi - lo)]);
                    s[hi..].fill(0.0);
                }
            }
        });
    }

    /// The adjoint of [`im2col`](Self::im2col): scatter-adds column gradients onto the input
    /// gradient.
    fn col2im(&self, dcols: &[f32], dx: &mut [f32]) {
        self.segments(|seg, lo, hi, source| {
            if let Some(src) = source {
                for (d, v) in dx[src..src + (hi - lo)].iter_mut().zip(&dcols[seg + lo..seg + hi]) {
                    *d += v;
                }
            }
        });
    }
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
        Some(Params { weight: self.w, weight_len: self.cout * kk, bias: self.b, bias_len: self.cout, fan_in: kk })
    }

    fn needs(&self) -> Needs {
        let (t, kk) = (self.geometry.positions(), self.geometry.patch());
        Needs { cols: t * kk, argmax: 0, hwc: self.out_len(), dcols: t * kk }
    }

    fn forward(&self, f: Forward<'_>) {
        let g = &self.geometry;
        let (t, kk, cout, b) = (g.positions(), g.patch(), self.cout, f.b);
        let n_in = g.cin * g.hin * g.win;
        let cols = &mut f.own.cols[..b * t * kk];
        for e in 0..b {
            g.im2col(&f.input[e * n_in..(e + 1) * n_in], &mut cols[e * t * kk..(e + 1) * t * kk]);
        }
        // hwc[b·T × cout] = cols[b·T × K] · Wᵀ, then to channel-major
        let hwc = &mut f.shared.hwc[..b * t * cout];
        let weights = MatRef::row_major(&f.theta[self.w..self.w + cout * kk], cout, kk);
        matmul(MatMut::row_major(hwc, b * t, cout), MatRef::row_major(cols, b * t, kk), weights.t(), false);
        transpose_planes(hwc, f.output, t, cout);
        if let Some(bo) = self.b {
            for (plane, bv) in f.output.chunks_exact_mut(t).zip(f.theta[bo..bo + cout].iter().cycle()) {
                plane.iter_mut().for_each(|v| *v += bv);
            }
        }
    }

    fn backward(&self, g: Backward<'_>) {
        let geo = &self.geometry;
        let (t, kk, cout, b, p) = (geo.positions(), geo.patch(), self.cout, g.b, g.p);
        let cols = &g.own.cols;
        for e in 0..b {
            let row = &mut g.grads[e * p..(e + 1) * p];
            let dye = &g.dy[e * t * cout..(e + 1) * t * cout];
            // ∂W[cout × K] = Δ[cout × T] · cols[T × K]
            matmul(
                MatMut::row_major(&mut row[self.w..self.w + cout * kk], cout, kk),
                MatRef::row_major(dye, cout, t),
                MatRef::row_major(&cols[e * t * kk..(e + 1) * t * kk], t, kk),
                false,
            );
            if let Some(bo) = self.b {
                for (gb, plane) in row[bo..bo + cout].iter_mut().zip(dye.chunks_exact(t)) {
                    *gb = plane.iter().sum();
                }
            }
        }
        if let Some(dx) = g.dx {
            // dcols[b·T × K] = Δᵀ[b·T × cout] · W[cout × K], then scatter back
            let hwc = &mut g.shared.hwc[..b * t * cout];
            transpose_planes(&g.dy[..b * cout * t], hwc, cout, t);
            let dcols = &mut g.shared.dcols[..b * t * kk];
            let weights = MatRef::row_major(&g.theta[self.w..self.w + cout * kk], cout, kk);
            matmul(MatMut::row_major(dcols, b * t, kk), MatRef::row_major(hwc, b * t, cout), weights, false);
            let n_in = geo.cin * geo.hin * geo.win;
            dx.iter_mut().for_each(|v| *v = 0.0);
            for e in 0..b {
                geo.col2im(&dcols[e * t * kk..(e + 1) * t * kk], &mut dx[e * n_in..(e + 1) * n_in]);
            }
        }
    }
}

/// Per example, `[rows, cols]` → `[cols, rows]` (channel-last ⇄ channel-major).
fn transpose_planes(src: &[f32], dst: &mut [f32], rows: usize, cols: usize) {
    if rows == 1 || cols == 1 {
        dst[..src.len()].copy_from_slice(src);
        return;
    }
    for (s, d) in src.chunks_exact(rows * cols).zip(dst.chunks_exact_mut(rows * cols)) {
        for r in 0..rows {
            for c in 0..cols {
                d[c * rows + r] = s[r * cols + c];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// ⟨im2col(x), c⟩ = ⟨x, col2im(c)⟩ for every geometry: the two stay adjoint.
    #[test]
    fn im2col_and_col2im_are_adjoint() {
        for (cin, hin, win, k, stride, pad) in
            [(1, 5, 4, 3, 1, 1), (2, 7, 7, 2, 2, 0), (3, 6, 5, 4, 2, 3), (1, 2, 2, 5, 1, 2)]
        {
            let (hout, wout) = ((hin + 2 * pad - k) / stride + 1, (win + 2 * pad - k) / stride + 1);
            let g = Geometry { cin, hin, win, k, stride, pad, hout, wout };
            let x: Vec<f32> = (0..cin * hin * win).map(|i| ((i * 7) % 11) as f32 - 5.0).collect();
            let c: Vec<f32> = (0..g.positions() * g.patch()).map(|i| ((i * 5) % 13) as f32 - 6.0).collect();
            let mut cols = vec![0.0; c.len()];
            g.im2col(&x, &mut cols);
            let mut dx = vec![0.0; x.len()];
            g.col2im(&c, &mut dx);
            let lhs: f32 = cols.iter().zip(&c).map(|(a, b)| a * b).sum();
            let rhs: f32 = x.iter().zip(&dx).map(|(a, b)| a * b).sum();
            assert_eq!(lhs, rhs, "geometry {g:?}");
        }
    }
}
