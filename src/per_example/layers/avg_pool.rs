//! Average pooling over square windows without padding: each output is the mean of its
//! window; the input gradient spreads each output gradient evenly over its window (adding up
//! where windows overlap).

use super::Alloc;
use super::{Backward, Forward, Rule};
use crate::arch::kinds;
use crate::arch::{Shape, ShapeError};

/// A compiled average pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AvgPool2d {
    /// Channels.
    pub c: usize,
    /// Window.
    pub k: usize,
    /// Stride.
    pub stride: usize,
    /// Input height.
    pub hin: usize,
    /// Input width.
    pub win: usize,
    /// Output height.
    pub hout: usize,
    /// Output width.
    pub wout: usize,
}

impl AvgPool2d {
    pub(crate) fn compile(
        spec: kinds::AvgPool2d,
        input: Shape,
        output: Shape,
        at: usize,
        _: &mut Alloc,
    ) -> Result<Self, ShapeError> {
        let kinds::AvgPool2d { kernel: k, stride } = spec;
        let (Shape::Spatial { c, h, w }, Shape::Spatial { h: hout, w: wout, .. }) = (input, output) else {
            return Err(ShapeError { layer: Some(at), reason: "avg_pool2d: needs a spatial input".into() });
        };
        Ok(Self { c, k, stride, hin: h, win: w, hout, wout })
    }

    /// Values per example at the input.
    fn in_len(&self) -> usize {
        self.c * self.hin * self.win
    }
}

impl Rule for AvgPool2d {
    fn out_len(&self) -> usize {
        self.c * self.hout * self.wout
    }

    fn forward(&self, f: Forward<'_>) {
        pool_batch(self, &f.input[..f.b * self.in_len()], &mut f.output[..f.b * self.out_len()]);
    }

    fn backward(&self, g: Backward<'_>) {
        let Some(dx) = g.dx else { return };
        spread_batch(self, &g.dy[..g.b * self.out_len()], &mut dx[..g.b * self.in_len()]);
    }
}

crate::simd::kernel! {
/// Each plane's window means: every output row adds its `k` input rows' windows, then scales.
fn pool_batch(p: &AvgPool2d, x: &[f32], y: &mut [f32]) {
    let AvgPool2d { k, stride, hin, win, hout, wout, .. } = *p;
    let scale = 1.0 / (k * k) as f32;
    for (x, y) in x.chunks_exact(hin * win).zip(y.chunks_exact_mut(hout * wout)) {
        for (oh, out) in y.chunks_exact_mut(wout).enumerate() {
            if k == 2 && stride == 2 {
                // 2 x 2 windows side by side: the same sums, in the same order, without the
                // general loop's window slices.
                let (r0, r1) = (&x[2 * oh * win..][..2 * wout], &x[(2 * oh + 1) * win..][..2 * wout]);
                for ((o, a), b) in out.iter_mut().zip(r0.chunks_exact(2)).zip(r1.chunks_exact(2)) {
                    *o = ((a[0] + a[1]) + (b[0] + b[1])) * scale;
                }
                continue;
            }
            out.fill(0.0);
            for i in 0..k {
                let row = &x[(oh * stride + i) * win..][..win];
                for (ow, o) in out.iter_mut().enumerate() {
                    *o += row[ow * stride..][..k].iter().sum::<f32>();
                }
            }
            out.iter_mut().for_each(|o| *o *= scale);
        }
    }
}
}

crate::simd::kernel! {
/// The input gradient: each output gradient, scaled, added over its window (windows overlap
/// when the stride is below the window).
fn spread_batch(p: &AvgPool2d, dy: &[f32], dx: &mut [f32]) {
    let AvgPool2d { k, stride, hin, win, hout, wout, .. } = *p;
    let scale = 1.0 / (k * k) as f32;
    dx.fill(0.0);
    for (dx, dy) in dx.chunks_exact_mut(hin * win).zip(dy.chunks_exact(hout * wout)) {
        for (oh, d) in dy.chunks_exact(wout).enumerate() {
            if k == 2 && stride == 2 {
                let (r0, r1) = dx[2 * oh * win..][..2 * win].split_at_mut(win);
                let pairs = r0[..2 * wout].chunks_exact_mut(2).zip(r1[..2 * wout].chunks_exact_mut(2));
                for ((a, b), &d) in pairs.zip(d) {
                    let v = d * scale;
                    (a[0], a[1], b[0], b[1]) = (v, v, v, v);
                }
                continue;
            }
            for i in 0..k {
                let row = &mut dx[(oh * stride + i) * win..][..win];
                for (ow, &d) in d.iter().enumerate() {
                    row[ow * stride..][..k].iter_mut().for_each(|v| *v += d * scale);
                }
            }
        }
    }
}
}
