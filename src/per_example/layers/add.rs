//! A residual connection's layer: the identity (forward copies, backward passes the gradient
//! through). The network adds the earlier layer's output after it and sends its output
//! gradient back to that layer as well ([`crate::arch::Kind::joins`]).

use super::Alloc;
use super::{Backward, Forward, Rule};
use crate::arch::kinds;
use crate::arch::{Shape, ShapeError};

/// A compiled residual connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Add {
    /// Values per example.
    pub len: usize,
    /// The earlier layer whose output the network adds.
    pub from: usize,
}

impl Add {
    pub(crate) fn compile(
        spec: kinds::Add,
        input: Shape,
        _: Shape,
        _: usize,
        _: &mut Alloc,
    ) -> Result<Self, ShapeError> {
        Ok(Self { len: input.len(), from: spec.from })
    }
}

impl Rule for Add {
    fn out_len(&self) -> usize {
        self.len
    }
    fn forward(&self, f: Forward<'_>) {
        let n = f.b * self.len;
        f.output[..n].copy_from_slice(&f.input[..n]);
    }
    fn backward(&self, g: Backward<'_>) {
        if let Some(dx) = g.dx {
            dx.copy_from_slice(g.dy);
        }
    }
}
