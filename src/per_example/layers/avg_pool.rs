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
        let Self { k, stride, hin, win, hout, wout, .. } = *self;
        let scale = 1.0 / (k * k) as f32;
        let planes = f.input[..f.b * self.in_len()].chunks_exact(hin * win);
        for (x, y) in planes.zip(f.output.chunks_exact_mut(hout * wout)) {
            for oh in 0..hout {
                for ow in 0..wout {
                    let (r, c) = (oh * stride, ow * stride);
                    let sum: f32 = (0..k).map(|i| x[(r + i) * win + c..][..k].iter().sum::<f32>()).sum();
                    y[oh * wout + ow] = sum * scale;
                }
            }
        }
    }

    fn backward(&self, g: Backward<'_>) {
        let Some(dx) = g.dx else { return };
        let Self { k, stride, hin, win, hout, wout, .. } = *self;
        let scale = 1.0 / (k * k) as f32;
        dx.fill(0.0);
        for (dx, dy) in dx.chunks_exact_mut(hin * win).zip(g.dy.chunks_exact(hout * wout)) {
            for oh in 0..hout {
                for ow in 0..wout {
                    let (r, c, d) = (oh * stride, ow * stride, dy[oh * wout + ow] * scale);
                    for i in 0..k {
                        dx[(r + i) * win + c..][..k].iter_mut().for_each(|v| *v += d);
                    }
                }
            }
        }
    }
}
