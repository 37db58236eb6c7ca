//! Group normalisation within each example (Wu & He 2018), then a per-channel scale γ and
//! shift β: the fast engine's rule over [`crate::kernels::norm`]'s kernels (shared with the
//! burn engine's `GroupNorm` on flex).

use super::Alloc;
use super::{Backward, Forward, Init, Needs, Params, Rule};
use crate::arch::kinds;
use crate::arch::{Shape, ShapeError};
pub use crate::kernels::norm::GroupNorm;
use crate::kernels::norm::{backward_batch, forward_batch};

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
        let stats = &mut f.own.cols[..f.b * 2 * self.groups];
        forward_batch(self, f.theta, &f.input[..f.b * self.out_len()], &mut f.output[..f.b * self.out_len()], stats);
    }

    fn backward(&self, g: Backward<'_>) {
        let n = g.b * self.out_len();
        let (input, dy, stats) = (&g.input[..n], &g.dy[..n], &g.own.cols[..g.b * 2 * self.groups]);
        backward_batch(self, g.theta, (input, dy, stats), g.dx, (g.grads, g.p));
    }
}
