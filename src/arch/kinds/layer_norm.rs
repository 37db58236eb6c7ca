//! `layer_norm`: layer normalisation of a flat activation over its features (Ba, Kiros &
//! Hinton 2016), with a per-feature scale γ and (optional) shift β, by
//! [`crate::nn::LayerNorm`]. Within each example, so private. Both engines train it (the fast
//! engine's rule: [`crate::per_example::layers::LayerNorm`]).

use burn::tensor::Device;
use serde::{Deserialize, Serialize};

use super::{Activation, Kind, Read, mismatch, param, yes};
use crate::arch::Shape;
use crate::error::Result;
use crate::nn;

/// Layer normalisation over the features of a flat activation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LayerNorm {
    /// Whether the layer has the shift β (it always has the scale γ).
    #[serde(default = "yes")]
    pub bias: bool,
}

impl Kind for LayerNorm {
    type Module = nn::LayerNorm;

    fn out_shape(&self, input: Shape) -> std::result::Result<Shape, String> {
        match input {
            Shape::Flat(n) if n > 1 => Ok(input),
            Shape::Flat(_) => Err("needs more than one feature to normalise".into()),
            Shape::Spatial { .. } => Err("needs a flat input: insert { kind = \"flatten\" } before it".into()),
        }
    }

    fn param_shapes(&self, input: Shape) -> Vec<Vec<usize>> {
        vec![vec![input.len()]; 1 + usize::from(self.bias)]
    }

    fn init(&self, input: Shape, device: &Device) -> nn::LayerNorm {
        nn::LayerNormConfig::new(input.len()).with_bias(self.bias).init(device)
    }

    fn forward(module: &nn::LayerNorm, x: Activation) -> Activation {
        Activation::Flat(module.forward(x.flat()))
    }

    fn read(module: &nn::LayerNorm, read: Read<'_>) -> Result<Vec<Vec<f32>>> {
        std::iter::once(&module.gamma).chain(&module.beta).map(|p| read.flat(p)).collect()
    }

    fn write(module: &mut nn::LayerNorm, values: &[&[f32]], device: &Device) -> Result<()> {
        let [gamma, beta @ ..] = values else { return Err(mismatch(values.len())) };
        module.gamma = param(gamma, module.gamma.dims(), device)?;
        module.beta = match (beta, &module.beta) {
            ([], None) => None,
            ([b], Some(old)) => Some(param(b, old.dims(), device)?),
            _ => return Err(mismatch(values.len())),
        };
        Ok(())
    }
}
