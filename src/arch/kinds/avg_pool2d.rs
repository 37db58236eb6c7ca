//! `avg_pool2d`: average pooling over square windows (no padding), by [`crate::nn::AvgPool2d`]
//! (burn's values and gradients). Trained on both engines (the fast one by
//! [`crate::per_example::layers::AvgPool2d`]'s rule).

use burn::tensor::Device;
use serde::{Deserialize, Serialize};

use super::{Activation, Kind, pooled};
use crate::arch::Shape;
use crate::nn;

/// Average pooling.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AvgPool2d {
    /// Window size.
    pub kernel: usize,
    /// Stride.
    pub stride: usize,
}

impl Kind for AvgPool2d {
    type Module = nn::AvgPool2d;

    fn out_shape(&self, input: Shape) -> std::result::Result<Shape, String> {
        pooled(input, self.kernel, self.stride)
    }
    fn init(&self, _: Shape, _: &Device) -> nn::AvgPool2d {
        nn::AvgPool2dConfig::new([self.kernel, self.kernel]).with_strides([self.stride, self.stride]).init()
    }
    fn forward(module: &nn::AvgPool2d, x: Activation) -> Activation {
        Activation::Spatial(module.forward(x.spatial()))
    }
}
