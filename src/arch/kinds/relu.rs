//! `relu`: max(x, 0), burn's.

use burn::tensor::Device;
use serde::{Deserialize, Serialize};

use super::{Activation, Kind};
use crate::arch::Shape;

/// max(x, 0).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Relu;

impl Kind for Relu {
    type Module = burn::nn::Relu;

    fn out_shape(&self, input: Shape) -> std::result::Result<Shape, String> {
        Ok(input)
    }
    fn init(&self, _: Shape, _: &Device) -> burn::nn::Relu {
        burn::nn::Relu
    }
    fn forward(module: &burn::nn::Relu, x: Activation) -> Activation {
        x.map(|x| module.forward(x), |x| module.forward(x))
    }
}
