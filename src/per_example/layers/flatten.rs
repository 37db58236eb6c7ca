//! `[c, h, w]` → `[c·h·w]`: activations are already channel-major, so a plain copy.

use super::Alloc;
use super::{Backward, Forward, Rule};
use crate::arch::kinds;
use crate::arch::{Shape, ShapeError};

/// Flattens a spatial activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Flatten {
    /// Values per example.
    pub len: usize,
}

impl Flatten {
    pub(crate) fn compile(
        _: kinds::Flatten,
        input: Shape,
        _: Shape,
        _: usize,
        _: &mut Alloc,
    ) -> Result<Self, ShapeError> {
        Ok(Self { len: input.len() })
    }
}

impl Rule for Flatten {
    fn out_len(&self) -> usize {
        self.len
    }
    fn forward(&self, f: Forward<'_>) {
        let n = f.output.len();
        f.output.copy_from_slice(&f.input[..n]);
    }
    fn backward(&self, g: Backward<'_>) {
        if let Some(dx) = g.dx {
            dx.copy_from_slice(g.dy);
        }
    }
}
