//! `conv2d`: 2-d convolution (square kernel, stride, zero padding), weights `[out, in, k, k]`,
//! computed by [`crate::nn::Conv2d`].

use burn::nn::PaddingConfig2d;
use burn::tensor::Device;
use serde::{Deserialize, Serialize};

use super::{Activation, Kind, Read, channels, fits, one, param, yes};
use crate::arch::Shape;
use crate::error::Result;
use crate::nn;

/// A 2-d convolution.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Conv2d {
    /// Output channels.
    pub out_channels: usize,
    /// Kernel size.
    pub kernel: usize,
    /// Stride.
    #[serde(default = "one")]
    pub stride: usize,
    /// Zero padding on every side.
    #[serde(default)]
    pub padding: usize,
    /// Whether the layer has a bias.
    #[serde(default = "yes")]
    pub bias: bool,
}

impl Kind for Conv2d {
    type Module = nn::Conv2d;

    fn out_shape(&self, input: Shape) -> std::result::Result<Shape, String> {
        let Conv2d { out_channels, kernel, stride, padding, .. } = *self;
        let Shape::Spatial { c, h, w } = input else {
            return Err("needs a spatial input, but it follows a flatten/linear".into());
        };
        if out_channels == 0 || kernel == 0 || stride == 0 {
            return Err("needs out_channels, kernel and stride > 0".into());
        }
        let (Some(hp), Some(wp)) = (h.checked_add(padding.saturating_mul(2)), w.checked_add(padding.saturating_mul(2)))
        else {
            return Err(format!("padding {padding} is too large"));
        };
        if hp < kernel || wp < kernel {
            return Err(format!("kernel {kernel} is larger than the padded {h}x{w} input"));
        }
        let (hout, wout) = ((hp - kernel) / stride + 1, (wp - kernel) / stride + 1);
        fits(&[out_channels, c, kernel, kernel], "the weight")?;
        Ok(Shape::Spatial { c: out_channels, h: hout, w: wout })
    }

    fn param_shapes(&self, input: Shape) -> Vec<Vec<usize>> {
        let weight = vec![self.out_channels, channels(input), self.kernel, self.kernel];
        if self.bias { vec![weight, vec![self.out_channels]] } else { vec![weight] }
    }

    fn init(&self, input: Shape, device: &Device) -> nn::Conv2d {
        let (k, p) = (self.kernel, self.padding);
        nn::Conv2dConfig::new([channels(input), self.out_channels], [k, k])
            .with_stride([self.stride, self.stride])
            .with_padding(PaddingConfig2d::Explicit(p, p, p, p))
            .with_bias(self.bias)
            .init(device)
    }

    fn forward(module: &nn::Conv2d, x: Activation) -> Activation {
        Activation::Spatial(module.forward(x.spatial()))
    }

    fn read(module: &nn::Conv2d, read: Read<'_>) -> Result<Vec<Vec<f32>>> {
        let mut out = vec![read.flat(&module.weight)?];
        if let Some(b) = &module.bias {
            out.push(read.flat(b)?);
        }
        Ok(out)
    }

    fn write(module: &mut nn::Conv2d, values: &[&[f32]], device: &Device) -> Result<()> {
        let [weight, bias @ ..] = values else { return Err(super::mismatch(values.len())) };
        module.weight = param(weight, module.weight.dims(), device)?;
        module.bias = match (bias, &module.bias) {
            ([], None) => None,
            ([b], Some(old)) => Some(param(b, old.dims(), device)?),
            _ => return Err(super::mismatch(values.len())),
        };
        Ok(())
    }
}
