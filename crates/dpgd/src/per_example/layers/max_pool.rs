//! Max pooling over square windows: the forward pass records each output's arg-max, the input
//! gradient routes each output gradient there.

use super::super::network::{Alloc, Shape, ShapeError};
use super::{Backward, Forward, Needs, Rule};
use crate::arch::kinds;

/// A compiled max pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MaxPool2d {
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

impl MaxPool2d {
    pub(crate) fn compile(
        spec: kinds::MaxPool2d,
        input: Shape,
        output: Shape,
        at: usize,
        _: &mut Alloc,
    ) -> Result<Self, ShapeError> {
        let kinds::MaxPool2d { kernel: k, stride } = spec;
        let (Shape::Spatial { c, h, w }, Shape::Spatial { h: hout, w: wout, .. }) = (input, output) else {
            return Err(ShapeError { layer: Some(at), reason: "max_pool2d: needs a spatial input".into() });
        };
        Ok(Self { c, k, stride, hin: h, win: w, hout, wout })
    }

    /// One example's pool, recording the arg-max input index of each output.
    fn pool(&self, x: &[f32], out: &mut [f32], argmax: &mut [u32]) {
        let MaxPool2d { c, k, stride: s, hin, win, hout, wout } = *self;
        for ch in 0..c {
            let plane = &x[ch * hin * win..(ch + 1) * hin * win];
            for oh in 0..hout {
                for ow in 0..wout {
                    let o = (ch * hout + oh) * wout + ow;
                    let first = (oh * s) * win + ow * s;
                    let (mut best, mut best_v) = (first, plane[first]);
                    for i in 0..k {
                        let r = (oh * s + i) * win + ow * s;
                        for (j, &v) in plane[r..r + k].iter().enumerate() {
                            if v > best_v {
                                (best, best_v) = (r + j, v);
                            }
                        }
                    }
                    out[o] = best_v;
                    // Fits: Network::new keeps every activation below 2^40 values per example
                    // and the arg-max indexes one example's input plane.
                    argmax[o] = (ch * hin * win + best) as u32;
                }
            }
        }
    }
}

impl Rule for MaxPool2d {
    fn out_len(&self) -> usize {
        self.c * self.hout * self.wout
    }

    fn needs(&self) -> Needs {
        Needs { argmax: self.out_len(), ..Needs::default() }
    }

    fn forward(&self, f: Forward<'_>) {
        let (n_in, n_out) = (self.c * self.hin * self.win, self.out_len());
        let argmax = &mut f.own.argmax[..f.b * n_out];
        for e in 0..f.b {
            self.pool(
                &f.input[e * n_in..(e + 1) * n_in],
                &mut f.output[e * n_out..(e + 1) * n_out],
                &mut argmax[e * n_out..(e + 1) * n_out],
            );
        }
    }

    fn backward(&self, g: Backward<'_>) {
        let Some(dx) = g.dx else { return };
        let (n_in, n_out) = (self.c * self.hin * self.win, self.out_len());
        dx.iter_mut().for_each(|v| *v = 0.0);
        for e in 0..g.b {
            let dxe = &mut dx[e * n_in..(e + 1) * n_in];
            for (&i, &d) in g.own.argmax[e * n_out..(e + 1) * n_out].iter().zip(&g.dy[e * n_out..(e + 1) * n_out]) {
                dxe[i as usize] += d;
            }
        }
    }
}
