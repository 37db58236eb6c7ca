//! [`MaxPool2d`]: burn's 2-D max pooling (same fields, same values, same gradients), faster on
//! the CPU backends. It has no parameters, so burn's own `MaxPool2d` trains privately as well;
//! this one only saves time.
//!
//! On flex, with valid padding and floor mode, it is dpgd's own operation
//! ([`super::host`]): the window maxima found on the host, row by row (flex's own max pool walks
//! every window through generic index arithmetic with one parallel task per (example, channel)
//! plane — 19 % of the Opacus CNN's private step on the burn engine, profiled with `perf`, 2
//! cores), and a backward that adds each output's gradient at its window's arg-max, exactly max
//! pooling's. Ties and NaN are resolved as flex resolves them (the first maximum; a NaN wins, the
//! last NaN of a window). Other geometries, other devices (ndarray resolves NaN otherwise: a NaN
//! never wins there) and values other than f32 take burn's `max_pool2d`.

use burn::config::Config;
use burn::module::Module;
use burn::nn::PaddingConfig2d;
use burn::tensor::Tensor;

/// The configuration of a [`MaxPool2d`]: burn's `MaxPool2dConfig`, same fields and defaults.
#[derive(Config, Debug)]
pub struct MaxPool2dConfig {
    /// `[kh, kw]`.
    pub kernel_size: [usize; 2],
    /// The strides (default: the kernel size).
    #[config(default = "kernel_size")]
    pub strides: [usize; 2],
    /// Padding.
    #[config(default = "PaddingConfig2d::Valid")]
    pub padding: PaddingConfig2d,
    /// Dilation.
    #[config(default = "[1, 1]")]
    pub dilation: [usize; 2],
    /// Ceiling instead of floor for the output size.
    #[config(default = "false")]
    pub ceil_mode: bool,
}

impl MaxPool2dConfig {
    /// The pooling layer.
    #[must_use]
    pub fn init(&self) -> MaxPool2d {
        MaxPool2d {
            stride: self.strides,
            kernel_size: self.kernel_size,
            padding: self.padding.clone(),
            dilation: self.dilation,
            ceil_mode: self.ceil_mode,
        }
    }
}

/// burn's `MaxPool2d` (same fields), with a faster path on the CPU backends.
#[derive(Module, Debug)]
pub struct MaxPool2d {
    /// The strides.
    pub stride: [usize; 2],
    /// The kernel size.
    pub kernel_size: [usize; 2],
    /// Padding.
    #[module(skip)]
    pub padding: PaddingConfig2d,
    /// Dilation.
    pub dilation: [usize; 2],
    /// Ceiling instead of floor for the output size.
    pub ceil_mode: bool,
}

impl From<burn::nn::pool::MaxPool2d> for MaxPool2d {
    fn from(p: burn::nn::pool::MaxPool2d) -> Self {
        Self {
            stride: p.stride,
            kernel_size: p.kernel_size,
            padding: p.padding,
            dilation: p.dilation,
            ceil_mode: p.ceil_mode,
        }
    }
}

impl MaxPool2d {
    /// The max pooling of `input` (`[batch, channels, h, w]`), as burn's `MaxPool2d::forward`.
    pub fn forward(&self, input: Tensor<4>) -> Tensor<4> {
        #[cfg(feature = "flex")]
        {
            let [_, _, h, w] = input.dims();
            let fits = matches!(self.padding, PaddingConfig2d::Valid)
                && !self.ceil_mode
                && (0..2).all(|i| {
                    let (k, s, d) = (self.kernel_size[i], self.stride[i], self.dilation[i]);
                    k > 0 && s > 0 && d > 0 && d * (k - 1) < [h, w][i]
                });
            let windows =
                super::host::PoolWindows { kernel: self.kernel_size, stride: self.stride, dilation: self.dilation };
            if let Some(out) = fits.then(|| super::host::max_pool2d(input.clone(), windows)).flatten() {
                return out;
            }
        }
        burn::nn::pool::MaxPool2d {
            stride: self.stride,
            kernel_size: self.kernel_size,
            padding: self.padding.clone(),
            dilation: self.dilation,
            ceil_mode: self.ceil_mode,
        }
        .forward(input)
    }
}

#[cfg(test)]
mod tests {
    use burn::tensor::{Tensor, TensorData};

    use super::*;

    fn pools() -> Vec<MaxPool2dConfig> {
        vec![
            MaxPool2dConfig::new([2, 2]).with_strides([1, 1]),
            MaxPool2dConfig::new([2, 2]),
            MaxPool2dConfig::new([3, 2]).with_strides([2, 1]).with_dilation([1, 2]),
            MaxPool2dConfig::new([1, 1]),
            MaxPool2dConfig::new([2, 3]).with_strides([1, 1]).with_dilation([2, 1]),
            MaxPool2dConfig::new([3, 3]).with_strides([1, 1]),
        ]
    }

    /// Values and input gradients equal burn's own max pool's, with ties, NaN and −∞, on each
    /// CPU backend the build has (bit for bit).
    #[test]
    fn values_and_gradients_equal_burns() {
        for device in crate::device::cpu_devices() {
            let device = device.autodiff();
            for config in pools() {
                let dims = [2, 3, 7, 9];
                let n: usize = dims.iter().product();
                // Three values scattered by a hash, so windows tie in every pair of positions
                // (which one wins is the scan order); some NaN and −∞.
                let values: Vec<f32> = (0..n)
                    .map(|i| match i % 23 {
                        0 => f32::NAN,
                        7 | 8 => f32::NEG_INFINITY,
                        _ => ((i.wrapping_mul(2_654_435_761) >> 7) % 3) as f32,
                    })
                    .collect();
                let run = |ours: bool| {
                    let x = Tensor::<4>::from_data(TensorData::new(values.clone(), dims), &device).require_grad();
                    let y = if ours { config.init().forward(x.clone()) } else { burn_pool(&config).forward(x.clone()) };
                    let weights = Tensor::<4>::from_data(
                        TensorData::new((0..y.dims().iter().product::<usize>()).map(|i| i as f32).collect(), y.dims()),
                        &device,
                    );
                    let grads = (y.clone() * weights).sum().backward();
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

    fn burn_pool(c: &MaxPool2dConfig) -> burn::nn::pool::MaxPool2d {
        burn::nn::pool::MaxPool2dConfig::new(c.kernel_size).with_strides(c.strides).with_dilation(c.dilation).init()
    }
}
