//! `max_pool2d`: max pooling over square windows (no padding), by [`crate::nn::MaxPool2d`]
//! (burn's values and gradients).

use burn::tensor::Device;
use serde::{Deserialize, Serialize};

use super::{Activation, Kind, pooled};
use crate::arch::Shape;
use crate::nn;

/// Max pooling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MaxPool2d {
    /// Window size.
    pub kernel: usize,
    /// Stride.
    pub stride: usize,
}

impl Kind for MaxPool2d {
    type Module = nn::MaxPool2d;

    fn out_shape(&self, input: Shape) -> std::result::Result<Shape, String> {
        pooled(input, self.kernel, self.stride)
    }
    fn init(&self, _: Shape, _: &Device) -> nn::MaxPool2d {
        nn::MaxPool2dConfig::new([self.kernel, self.kernel]).with_strides([self.stride, self.stride]).init()
    }
    fn forward(module: &nn::MaxPool2d, x: Activation) -> Activation {
        Activation::Spatial(module.forward(x.spatial()))
    }
}
