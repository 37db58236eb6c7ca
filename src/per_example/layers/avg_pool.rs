//! Average pooling over square windows without padding: each output is the mean of its
//! window; the input gradient spreads each output gradient evenly over its window (adding up
//! where windows overlap).

use super::Alloc;
use super::windows::Windows;
use super::{Backward, Forward, Rule};
use crate::arch::kinds;
use crate::arch::{Shape, ShapeError};

/// A compiled average pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AvgPool2d(pub Windows);

impl AvgPool2d {
    pub(crate) fn compile(
        spec: kinds::AvgPool2d,
        input: Shape,
        output: Shape,
        at: usize,
        _: &mut Alloc,
    ) -> Result<Self, ShapeError> {
        Windows::compile("avg_pool2d", (spec.kernel, spec.stride), (input, output), at).map(Self)
    }
}

impl Rule for AvgPool2d {
    fn out_len(&self) -> usize {
        self.0.out_len()
    }

    fn forward(&self, f: Forward<'_>) {
        let p = &self.0;
        pool_batch(p, &f.input[..f.b * p.in_len()], &mut f.output[..f.b * p.out_len()]);
    }

    fn backward(&self, g: Backward<'_>) {
        let Some(dx) = g.dx else { return };
        let p = &self.0;
        spread_batch(p, &g.dy[..g.b * p.out_len()], &mut dx[..g.b * p.in_len()]);
    }
}

crate::simd::kernel! {
/// Each plane's window means: every output row adds its `k` input rows' windows, then scales.
fn pool_batch(p: &Windows, x: &[f32], y: &mut [f32]) {
    let Windows { k, stride, hin, win, hout, wout, .. } = *p;
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
fn spread_batch(p: &Windows, dy: &[f32], dx: &mut [f32]) {
    let Windows { k, stride, hin, win, hout, wout, .. } = *p;
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
