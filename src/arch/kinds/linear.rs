//! `linear`: fully connected, weights `[out, in]` in PyTorch's layout (burn's module stores
//! them `[in, out]`), computed by [`crate::nn::Linear`].

use burn::tensor::Device;
use serde::{Deserialize, Serialize};

use super::{Activation, Kind, Read, fits, param, yes};
use crate::arch::Shape;
use crate::error::Result;
use crate::nn;

/// A fully connected layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Linear {
    /// Output features.
    pub out_features: usize,
    /// Whether the layer has a bias.
    #[serde(default = "yes")]
    pub bias: bool,
}

/// `values` (`rows × cols`, row-major) transposed.
fn transpose(values: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    let mut out = vec![0.0f32; values.len()];
    for r in 0..rows {
        for c in 0..cols {
            out[c * rows + r] = values[r * cols + c];
        }
    }
    out
}

impl Kind for Linear {
    type Module = nn::Linear;

    fn out_shape(&self, input: Shape) -> std::result::Result<Shape, String> {
        let Shape::Flat(din) = input else {
            return Err("needs a flat input: insert { kind = \"flatten\" } before it".into());
        };
        if self.out_features == 0 {
            return Err("needs out_features > 0".into());
        }
        fits(&[self.out_features, din], "the weight")?;
        Ok(Shape::Flat(self.out_features))
    }

    fn param_shapes(&self, input: Shape) -> Vec<Vec<usize>> {
        let weight = vec![self.out_features, input.len()];
        if self.bias { vec![weight, vec![self.out_features]] } else { vec![weight] }
    }

    fn init(&self, input: Shape, device: &Device) -> nn::Linear {
        nn::LinearConfig::new(input.len(), self.out_features).with_bias(self.bias).init(device)
    }

    fn forward(module: &nn::Linear, x: Activation) -> Activation {
        Activation::Flat(module.forward(x.flat()))
    }

    fn read(module: &nn::Linear, read: Read<'_>) -> Result<Vec<Vec<f32>>> {
        let [din, dout] = module.weight.dims();
        let mut out = vec![transpose(&read.flat(&module.weight)?, din, dout)];
        if let Some(b) = &module.bias {
            out.push(read.flat(b)?);
        }
        Ok(out)
    }

    fn write(module: &mut nn::Linear, values: &[&[f32]], device: &Device) -> Result<()> {
        let [weight, bias @ ..] = values else { return Err(super::mismatch(values.len())) };
        let [din, dout] = module.weight.dims();
        if weight.len() != din * dout {
            return Err(super::mismatch(values.len()));
        }
        module.weight = param(&transpose(weight, dout, din), [din, dout], device)?;
        module.bias = match (bias, &module.bias) {
            ([], None) => None,
            ([b], Some(old)) => Some(param(b, old.dims(), device)?),
            _ => return Err(super::mismatch(values.len())),
        };
        Ok(())
    }
}
