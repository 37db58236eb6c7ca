//! [`AvgPool2d`]: burn's 2-D average pooling (same fields, same values, same gradients), faster
//! on flex. It has no parameters, so burn's own `AvgPool2d` trains privately as well; this one
//! only saves time.
//!
//! On flex, with valid padding and floor mode, it is dpgd's own operation ([`super::host`]):
//! each window summed row by row on the host and a backward that spreads each output's gradient
//! over its window, the same additions in the same order as flex's (whose average pooling goes
//! through its generic 3-D kernel: 12 % of the residual GroupNorm model's private step on the
//! burn engine, forward and backward, profiled with `perf`, 2 cores). Other geometries, other
//! devices and values other than f32 take burn's `avg_pool2d`.

use burn::config::Config;
use burn::module::Module;
use burn::nn::PaddingConfig2d;
use burn::tensor::Tensor;

/// The configuration of an [`AvgPool2d`]: burn's `AvgPool2dConfig`, same fields and defaults.
#[derive(Config, Debug)]
pub struct AvgPool2dConfig {
    /// `[kh, kw]`.
    pub kernel_size: [usize; 2],
    /// The strides (default: the kernel size).
    #[config(default = "kernel_size")]
    pub strides: [usize; 2],
    /// Padding.
    #[config(default = "PaddingConfig2d::Valid")]
    pub padding: PaddingConfig2d,
    /// Whether padded positions count in a window's size.
    #[config(default = "true")]
    pub count_include_pad: bool,
    /// Ceiling instead of floor for the output size.
    #[config(default = "false")]
    pub ceil_mode: bool,
}

impl AvgPool2dConfig {
    /// The pooling layer.
    #[must_use]
    pub fn init(&self) -> AvgPool2d {
        AvgPool2d {
            stride: self.strides,
            kernel_size: self.kernel_size,
            padding: self.padding.clone(),
            count_include_pad: self.count_include_pad,
            ceil_mode: self.ceil_mode,
        }
    }
}

/// burn's `AvgPool2d` (same fields), with a faster path on flex.
#[derive(Module, Debug)]
pub struct AvgPool2d {
    /// The strides.
    pub stride: [usize; 2],
    /// The kernel size.
    pub kernel_size: [usize; 2],
    /// Padding.
    #[module(skip)]
    pub padding: PaddingConfig2d,
    /// Whether padded positions count in a window's size.
    pub count_include_pad: bool,
    /// Ceiling instead of floor for the output size.
    pub ceil_mode: bool,
}

impl From<burn::nn::pool::AvgPool2d> for AvgPool2d {
    fn from(p: burn::nn::pool::AvgPool2d) -> Self {
        Self {
            stride: p.stride,
            kernel_size: p.kernel_size,
            padding: p.padding,
            count_include_pad: p.count_include_pad,
            ceil_mode: p.ceil_mode,
        }
    }
}

impl AvgPool2d {
    /// The average pooling of `input` (`[batch, channels, h, w]`), as burn's
    /// `AvgPool2d::forward`.
    pub fn forward(&self, input: Tensor<4>) -> Tensor<4> {
        #[cfg(feature = "flex")]
        {
            let [_, _, h, w] = input.dims();
            let fits = matches!(self.padding, PaddingConfig2d::Valid)
                && !self.ceil_mode
                && (0..2).all(|i| self.kernel_size[i] > 0 && self.stride[i] > 0 && self.kernel_size[i] <= [h, w][i]);
            let windows = super::host::PoolWindows { kernel: self.kernel_size, stride: self.stride, dilation: [1, 1] };
            if let Some(out) = fits.then(|| super::host::avg_pool2d(input.clone(), windows)).flatten() {
                return out;
            }
        }
        burn::nn::pool::AvgPool2d {
            stride: self.stride,
            kernel_size: self.kernel_size,
            padding: self.padding.clone(),
            count_include_pad: self.count_include_pad,
            ceil_mode: self.ceil_mode,
        }
        .forward(input)
    }
}

#[cfg(test)]
mod tests {
    use burn::tensor::{Tensor, TensorData};

    use super::*;

    /// Values and input gradients equal burn's own average pool's, bit for bit, on each CPU
    /// backend the build has: windows that overlap, that leave inputs out (floor mode), and
    /// values of every size (so that the order of the additions shows).
    #[test]
    fn values_and_gradients_equal_burns() {
        let configs = [
            AvgPool2dConfig::new([2, 2]),
            AvgPool2dConfig::new([2, 2]).with_strides([1, 1]),
            AvgPool2dConfig::new([3, 2]).with_strides([2, 1]),
            AvgPool2dConfig::new([3, 3]).with_strides([2, 2]),
            AvgPool2dConfig::new([1, 1]),
        ];
        for device in crate::device::cpu_devices() {
            let device = device.autodiff();
            for config in &configs {
                let dims = [2, 3, 7, 9];
                let n: usize = dims.iter().product();
                let values: Vec<f32> = (0..n)
                    .map(|i| ((i.wrapping_mul(2_654_435_761) >> 5) % 1000) as f32 * 10f32.powi(i as i32 % 7 - 3))
                    .collect();
                let run = |ours: bool| {
                    let x = Tensor::<4>::from_data(TensorData::new(values.clone(), dims), &device).require_grad();
                    let burns = burn::nn::pool::AvgPool2dConfig::new(config.kernel_size).with_strides(config.strides);
                    let y = if ours { config.init().forward(x.clone()) } else { burns.init().forward(x.clone()) };
                    let w: Vec<f32> =
                        (0..y.dims().iter().product::<usize>()).map(|i| (i % 13) as f32 * 0.37 - 2.0).collect();
                    let grads =
                        (y.clone() * Tensor::<4>::from_data(TensorData::new(w, y.dims()), &device)).sum().backward();
                    let bits = |t: Tensor<4>| {
                        t.into_data()
                            .try_to_vec::<f32>()
                            .unwrap_or_default()
                            .iter()
                            .map(|v| v.to_bits())
                            .collect::<Vec<_>>()
                    };
                    let g = x.grad(&grads).map(bits);
                    (y.dims(), bits(y), g)
                };
                assert_eq!(run(true), run(false), "{config:?} on {device:?}");
            }
        }
    }
}
