//! The compiled windows of a 2-D pooling over square windows without padding, which max and
//! average pooling share.

use crate::arch::{Shape, ShapeError};

/// A pooling's windows over one input shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Windows {
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

impl Windows {
    /// The windows of layer `at` of kind `kind` (named in the error), from the shapes the
    /// kind's shape rule gave.
    ///
    /// # Errors
    /// [`ShapeError`] naming the layer when its input is not spatial.
    pub(crate) fn compile(
        kind: &str,
        (k, stride): (usize, usize),
        (input, output): (Shape, Shape),
        at: usize,
    ) -> Result<Self, ShapeError> {
        let (Shape::Spatial { c, h, w }, Shape::Spatial { h: hout, w: wout, .. }) = (input, output) else {
            return Err(ShapeError { layer: Some(at), reason: format!("{kind}: needs a spatial input") });
        };
        Ok(Self { c, k, stride, hin: h, win: w, hout, wout })
    }

    /// Values per example at the input.
    pub fn in_len(&self) -> usize {
        self.c * self.hin * self.win
    }

    /// Values per example at the output.
    pub fn out_len(&self) -> usize {
        self.c * self.hout * self.wout
    }
}
