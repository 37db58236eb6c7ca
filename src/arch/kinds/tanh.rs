//! `tanh`: tanh(x), burn's.

use burn::tensor::Device;
use serde::{Deserialize, Serialize};

use super::{Activation, Kind};
use crate::arch::Shape;

/// tanh(x).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tanh;

impl Kind for Tanh {
    type Module = burn::nn::Tanh;

    fn out_shape(&self, input: Shape) -> std::result::Result<Shape, String> {
        Ok(input)
    }
    fn init(&self, _: Shape, _: &Device) -> burn::nn::Tanh {
        burn::nn::Tanh
    }
    fn forward(module: &burn::nn::Tanh, x: Activation) -> Activation {
        x.map(|x| module.forward(x), |x| module.forward(x))
    }
}
