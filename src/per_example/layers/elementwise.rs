//! Element-wise activations: their input gradient is the output gradient times the
//! activation's derivative, written from the output.

use super::Alloc;
use super::{Backward, Forward, Rule};
use crate::arch::kinds;
use crate::arch::{Shape, ShapeError};

/// max(x, 0) over `len` values per example.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Relu {
    /// Values per example.
    pub len: usize,
}

/// tanh(x) over `len` values per example.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tanh {
    /// Values per example.
    pub len: usize,
}

impl Relu {
    pub(crate) fn compile(_: kinds::Relu, input: Shape, _: Shape, _: usize, _: &mut Alloc) -> Result<Self, ShapeError> {
        Ok(Self { len: input.len() })
    }
}

impl Tanh {
    pub(crate) fn compile(_: kinds::Tanh, input: Shape, _: Shape, _: usize, _: &mut Alloc) -> Result<Self, ShapeError> {
        Ok(Self { len: input.len() })
    }
}

impl Rule for Relu {
    fn out_len(&self) -> usize {
        self.len
    }
    fn forward(&self, f: Forward<'_>) {
        relu(f.output, &f.input[..f.b * self.len]);
    }
    fn backward(&self, g: Backward<'_>) {
        if let Some(dx) = g.dx {
            relu_grad(dx, g.dy, &g.output[..g.b * self.len]);
        }
    }
}

crate::simd::kernel! {
/// `y = max(x, 0)` (compiled for AVX-512 and AVX2 as well: [`crate::simd`]).
fn relu(y: &mut [f32], x: &[f32]) {
    for (o, i) in y.iter_mut().zip(x) {
        *o = i.max(0.0);
    }
}
}

crate::simd::kernel! {
/// `dx = dy` where the output `y` is positive, else 0.
fn relu_grad(dx: &mut [f32], dy: &[f32], y: &[f32]) {
    for ((x, &d), &y) in dx.iter_mut().zip(dy).zip(y) {
        *x = if y > 0.0 { d } else { 0.0 };
    }
}
}

impl Rule for Tanh {
    fn out_len(&self) -> usize {
        self.len
    }
    fn forward(&self, f: Forward<'_>) {
        for (o, i) in f.output.iter_mut().zip(&f.input[..f.b * self.len]) {
            *o = i.tanh();
        }
    }
    fn backward(&self, g: Backward<'_>) {
        if let Some(dx) = g.dx {
            for ((x, &d), &y) in dx.iter_mut().zip(g.dy).zip(&g.output[..g.b * self.len]) {
                *x = d * (1.0 - y * y);
            }
        }
    }
}
