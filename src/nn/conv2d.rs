//! [`Conv2d`]: burn's 2-D convolution (stride, padding, dilation, groups) with a per-example
//! rule.
//!
//! Example i's weight gradient is `δᵢ · Pᵢ` per group, where `Pᵢ` is the patch (im2col) matrix
//! of its (explicitly padded) input (`[L, c_in·kh·kw]`: one row per output position, columns
//! ordered as burn's `unfold4d` orders its rows) and δᵢ its output gradient (`[c_out, L]`); its
//! bias gradient is δᵢ summed over positions. On a GPU (wgpu) dpgd's own kernel forms the
//! weight gradients from the input and δᵢ without the patch matrices
//! ([`crate::cube::conv_weight_rows`]). Materialising costs
//! B·c_out·(c_in·kh·kw)·L multiply-adds, the same as the batch weight gradient; the Gram
//! ("ghost norm") form would cost B·L²·(c_in·kh·kw + c_out) and is cheaper only when
//! L < c_in·kh·kw·c_out/(c_in·kh·kw + c_out) — deep layers on small maps, not MNIST-sized
//! ones — and the exact clipped sum needs the rows anyway (see `crate::clip`).

use burn::config::Config;
use burn::module::{Module, Param, ParamId};
use burn::nn::{Initializer, PaddingConfig2d};
use burn::tensor::module::{conv2d, unfold4d};
use burn::tensor::ops::{ConvOptions, PadMode, UnfoldOptions};
use burn::tensor::{Device, Gradients, Tensor, TensorData};

use super::tape::{Recorded, attach, is_open as tape_is_open, per_example};
use crate::cube::{ConvGeometry, Kernel};
use crate::kernels::conv::Geometry;

/// The configuration of a [`Conv2d`] layer: burn's `Conv2dConfig`, same fields and defaults.
#[derive(Config, Debug)]
pub struct Conv2dConfig {
    /// `[c_in, c_out]`.
    pub channels: [usize; 2],
    /// `[kh, kw]`.
    pub kernel_size: [usize; 2],
    /// Stride.
    #[config(default = "[1, 1]")]
    pub stride: [usize; 2],
    /// Dilation.
    #[config(default = "[1, 1]")]
    pub dilation: [usize; 2],
    /// Groups (both channel counts divisible by it).
    #[config(default = "1")]
    pub groups: usize,
    /// Padding.
    #[config(default = "PaddingConfig2d::Valid")]
    pub padding: PaddingConfig2d,
    /// Whether the layer has a bias.
    #[config(default = true)]
    pub bias: bool,
    /// The initializer (burn's default: Kaiming uniform with gain 1/√3).
    #[config(default = "Initializer::KaimingUniform{gain:0.5773502691896258, fan_out_only:false}")]
    pub initializer: Initializer,
}

impl Conv2dConfig {
    /// A layer initialised exactly as burn's `Conv2dConfig::init` initialises it.
    ///
    /// # Panics
    /// As burn's: if a channel count is not divisible by `groups`.
    #[must_use]
    pub fn init(&self, device: &Device) -> Conv2d {
        burn::nn::conv::Conv2dConfig::new(self.channels, self.kernel_size)
            .with_stride(self.stride)
            .with_dilation(self.dilation)
            .with_groups(self.groups)
            .with_padding(self.padding.clone())
            .with_bias(self.bias)
            .with_initializer(self.initializer.clone())
            .init(device)
            .into()
    }
}

/// burn's `Conv2d` (same fields), whose calls inside [`super::record`] are recorded.
#[derive(Module, Debug)]
pub struct Conv2d {
    /// `[c_out, c_in / groups, kh, kw]`.
    pub weight: Param<Tensor<4>>,
    /// `[c_out]`.
    pub bias: Option<Param<Tensor<1>>>,
    /// Stride.
    pub stride: [usize; 2],
    /// Kernel size.
    pub kernel_size: [usize; 2],
    /// Dilation.
    pub dilation: [usize; 2],
    /// Groups.
    pub groups: usize,
    /// Padding.
    #[module(skip)]
    pub padding: PaddingConfig2d,
}

impl From<burn::nn::conv::Conv2d> for Conv2d {
    fn from(c: burn::nn::conv::Conv2d) -> Self {
        Self {
            weight: c.weight,
            bias: c.bias,
            stride: c.stride,
            kernel_size: c.kernel_size,
            dilation: c.dilation,
            groups: c.groups,
            padding: c.padding,
        }
    }
}

/// burn's padding pairs `((top, bottom), (left, right))` (a copy of its crate-private
/// `calculate_padding_2d_pairs`: "same" padding may be asymmetric).
fn padding_pairs(p: &PaddingConfig2d, h: usize, w: usize, k: [usize; 2], s: [usize; 2]) -> [(usize, usize); 2] {
    let same = |k: usize, s: usize, size: usize| {
        let out = size.div_ceil(s.max(1));
        let total = if out > 0 { ((out - 1) * s + k).saturating_sub(size) } else { 0 };
        (total / 2, total - total / 2)
    };
    match *p {
        PaddingConfig2d::Valid => [(0, 0), (0, 0)],
        PaddingConfig2d::Same => [same(k[0], s[0], h), same(k[1], s[1], w)],
        PaddingConfig2d::Explicit(top, left, bottom, right) => [(top, bottom), (left, right)],
    }
}

impl Conv2d {
    /// The convolution of `input` (`[batch, c_in, h, w]`), as burn's `Conv2d::forward`.
    pub fn forward(&self, input: Tensor<4>) -> Tensor<4> {
        let [_, _, h, w] = input.dims();
        let pad = padding_pairs(&self.padding, h, w, self.kernel_size, self.stride);
        let params_frozen = !self.weight.val().is_tracked() && self.bias.as_ref().is_none_or(|b| !b.val().is_tracked());
        let frozen = !input.is_tracked() && params_frozen;
        let (host, unfolded) = match (tape_is_open() && params_frozen).then(|| self.forward_host(&input, pad)) {
            Some(Some((out, patches, geometry))) => (Some(geometry), Some((out, patches))),
            Some(None) if frozen && self.groups <= 1 => (None, self.forward_unfolded(input.clone(), pad)),
            _ => (None, None),
        };
        let (out, patches) = match unfolded {
            // Kept for the per-example rule, except where dpgd's kernel forms those gradients
            // from the input itself (a CubeCL device: `crate::cube::conv_weight_rows`).
            Some((out, patches)) => {
                (out, (!crate::cube::runs(Kernel::ConvWeightRows, &input.device())).then_some(patches))
            }
            None => {
                let options = ConvOptions::new_with_padding(self.stride, pad, self.dilation, self.groups);
                (conv2d(input.clone(), self.weight.val(), self.bias.as_ref().map(Param::val), options), None)
            }
        };
        attach(out, |probe| ConvCall {
            weight: self.weight.id,
            bias: self.bias.as_ref().map(|b| b.id),
            input: input.without_autodiff(),
            patches,
            host,
            pad,
            kernel: self.kernel_size,
            stride: self.stride,
            dilation: self.dilation,
            groups: self.groups.max(1),
            probe,
        })
    }
}

impl Conv2d {
    /// On flex, for the geometries the shared kernels take (square kernel, one stride, the same
    /// padding on every side, no dilation, one group): the convolution by dpgd's own operation
    /// with its own backward ([`super::host`]: the fast engine's im2col, product and col2im),
    /// for any input, tracked or not (the parameters are frozen: no gradient flows to them).
    /// Returns the output, what the weight gradients need (the im2col matrices, or at stride 1
    /// the zero-bordered input) and the geometry, with which the per-example rule
    /// forms the gradients by the same kernels.
    #[cfg(feature = "flex")]
    fn forward_host(&self, input: &Tensor<4>, pad: [(usize, usize); 2]) -> Option<(Tensor<4>, Tensor<3>, Geometry)> {
        let [_, cin, hin, win] = input.dims();
        let [k, kw] = self.kernel_size;
        let [(top, bottom), (left, right)] = pad;
        let square = k == kw && self.stride[0] == self.stride[1] && [bottom, left, right] == [top; 3];
        if !square || self.dilation != [1, 1] || self.groups > 1 {
            return None;
        }
        let (stride, pad) = (self.stride[0], top);
        let (hout, wout) = (out_len(hin, 2 * pad, k, stride, 1)?, out_len(win, 2 * pad, k, stride, 1)?);
        let geometry = Geometry { cin, hin, win, k, stride, pad, hout, wout };
        let weights = super::host::param_values(self.weight.val().flatten(0, 3))?;
        let bias = match &self.bias {
            Some(b) => Some(super::host::param_values(b.val())?),
            None => None,
        };
        let (out, cols) = super::host::conv2d(input.clone(), super::host::HostConv { geometry, weights, bias })?;
        Some((out, cols, geometry))
    }

    /// Off flex builds: none.
    #[cfg(not(feature = "flex"))]
    fn forward_host(&self, _: &Tensor<4>, _: [(usize, usize); 2]) -> Option<(Tensor<4>, Tensor<3>, Geometry)> {
        None
    }

    /// The convolution as one matrix product of the padded input's patches with the weights
    /// (`[b·L, c_in·kh·kw] · [c_in·kh·kw, c_out]`: one tall product for the whole micro-batch), for
    /// the first layer of a recorded private step where [`forward_host`](Self::forward_host)
    /// declines (another device, or a geometry the shared kernels do not take): its input is data
    /// (no gradient flows into it) and the parameters are frozen, so nothing is differentiated
    /// through it, and on few input channels one GEMM beats flex's direct kernel (the Opacus
    /// CNN's full step on 2 cores: 17.2 s to 14.2 s). Returns the output and the patches, which
    /// the per-example rule reuses; `None` where the dilated kernel does not fit the padded input
    /// (burn's convolution then says why).
    fn forward_unfolded(&self, input: Tensor<4>, pad: [(usize, usize); 2]) -> Option<(Tensor<4>, Tensor<3>)> {
        let [b, c_in, h, w] = input.dims();
        let [c_out, ..] = self.weight.dims();
        let [kh, kw] = self.kernel_size;
        let ho = out_len(h, pad[0].0 + pad[0].1, kh, self.stride[0], self.dilation[0])?;
        let wo = out_len(w, pad[1].0 + pad[1].1, kw, self.stride[1], self.dilation[1])?;
        // On the inner backend: nothing here is tracked, and burn's autodiff has no unfold of
        // its own (its generic one permutes through strided copies).
        let autodiff = input.is_autodiff();
        let patches = patches(input.without_autodiff(), pad, self.kernel_size, self.stride, self.dilation);
        let (k, l) = (c_in * kh * kw, ho * wo);
        let weight = self.weight.val().without_autodiff().reshape([c_out, k]).transpose();
        let mut out = patches.clone().reshape([b * l, k]).matmul(weight);
        if let Some(bias) = &self.bias {
            out = out + bias.val().without_autodiff().reshape([1, c_out]);
        }
        let out = out.reshape([b, l, c_out]).swap_dims(1, 2).reshape([b, c_out, ho, wo]);
        Some((if autodiff { out.autodiff() } else { out }, patches))
    }
}

/// Output positions along an axis of `n` values padded by `pad` in all, under a kernel of `k`
/// with stride `s` and dilation `d`; `None` where the dilated kernel does not fit (or a size
/// is 0).
fn out_len(n: usize, pad: usize, k: usize, s: usize, d: usize) -> Option<usize> {
    let span = d.checked_mul(k.checked_sub(1)?)?.checked_add(1)?;
    Some(n.checked_add(pad)?.checked_sub(span)?.checked_div(s)? + 1)
}

/// The patch (im2col) matrices `[b, ho·wo, c·kh·kw]` of `x` (`[b, c, h, w]`, not tracked) under
/// zero padding `pad` (`((top, bottom), (left, right))`): one row per output position, its
/// columns ordered (channel, kernel row, kernel column) as burn's `unfold4d` orders its rows.
///
/// On a CPU backend (flex, ndarray) the patches are gathered on the host: burn's generic
/// `unfold4d` reshapes a permuted 6-D view, which flex copies value by value through its generic
/// strided iterator whenever the stride is above 1 — 24 % of the Opacus CNN's private step on the
/// burn engine (profiled with `perf`, 2 cores). Elsewhere, or if the values cannot be read as
/// f32, [`patches_of_tensor`].
fn patches(
    x: Tensor<4>,
    pad: [(usize, usize); 2],
    kernel: [usize; 2],
    stride: [usize; 2],
    dilation: [usize; 2],
) -> Tensor<3> {
    let (device, dtype, dims) = (x.device(), x.dtype(), x.dims());
    let nonempty = dims.iter().chain(&kernel).chain(&stride).chain(&dilation).all(|&n| n > 0);
    if nonempty && crate::device::is_host(&device) {
        let host = x.clone().into_data().convert::<f32>().try_into_vec::<f32>().ok();
        if let Some((values, shape)) = host.and_then(|v| patches_host(&v, dims, pad, kernel, stride, dilation)) {
            return Tensor::from_data(TensorData::new(values, shape).convert_dtype(dtype), &device);
        }
    }
    patches_of_tensor(x, pad, kernel, stride, dilation)
}

/// [`patches`] by tensor operations, on any device: the explicitly padded input (padding first,
/// so asymmetric "same" padding is exact) unfolded into windows along both spatial axes (views)
/// and copied once into patch order; a dilated kernel through burn's `unfold4d`.
fn patches_of_tensor(
    x: Tensor<4>,
    pad: [(usize, usize); 2],
    [kh, kw]: [usize; 2],
    [sh, sw]: [usize; 2],
    dilation: [usize; 2],
) -> Tensor<3> {
    // No padding, no copy (burn's `pad` writes a new tensor even when every side is 0).
    let x = if pad == [(0, 0); 2] { x } else { x.pad(pad, PadMode::Constant(0.0)) };
    let [b, c, ..] = x.dims();
    if dilation != [1, 1] {
        return unfold4d(x, [kh, kw], UnfoldOptions::new([sh, sw], [0, 0], dilation)).swap_dims(1, 2);
    }
    // [b, c, ho, wo, kh, kw]: window (oy, ox) of channel ch holds x[ch, oy·sh + i, ox·sw + j].
    let windows: Tensor<6> = x.unfold::<5, _>(2, kh, sh).unfold(3, kw, sw);
    let [_, _, ho, wo, _, _] = windows.dims();
    windows.permute([0, 2, 3, 1, 4, 5]).reshape([b, ho * wo, c * kh * kw])
}

/// [`patches`] on host values `x` of shape `[b, c, h, w]` (every size, kernel, stride and
/// dilation at least 1): the patches and their shape; `None` where the padded input is smaller
/// than the dilated kernel (burn's path then says why).
fn patches_host(
    x: &[f32],
    [b, c, h, w]: [usize; 4],
    [(top, bottom), (left, right)]: [(usize, usize); 2],
    [kh, kw]: [usize; 2],
    [sh, sw]: [usize; 2],
    [dh, dw]: [usize; 2],
) -> Option<(Vec<f32>, [usize; 3])> {
    let (ho, wo) = (out_len(h, top + bottom, kh, sh, dh)?, out_len(w, left + right, kw, sw, dw)?);
    let (k, l) = (c * kh * kw, ho * wo);
    let mut out = vec![0.0f32; b * l * k];
    for (patches, x) in out.chunks_exact_mut(l * k).zip(x.chunks_exact(c * h * w)) {
        for (position, patch) in patches.chunks_exact_mut(k).enumerate() {
            let (oy, ox) = (position / wo, position % wo);
            for (plane, patch) in x.chunks_exact(h * w).zip(patch.chunks_exact_mut(kh * kw)) {
                for (i, row) in patch.chunks_exact_mut(kw).enumerate() {
                    // The input row this kernel row reads, if it is not padding.
                    let Some(y) = (oy * sh + i * dh).checked_sub(top).filter(|&y| y < h) else { continue };
                    let line = &plane[y * w..(y + 1) * w];
                    let x0 = ox * sw; // column j reads padded column x0 + j·dw
                    if dw == 1 {
                        // One contiguous run of the line: the columns that are not padding.
                        let (j0, j1) = (left.saturating_sub(x0).min(kw), (left + w).saturating_sub(x0).min(kw));
                        if j0 < j1 {
                            row[j0..j1].copy_from_slice(&line[x0 + j0 - left..x0 + j1 - left]);
                        }
                        continue;
                    }
                    for (j, v) in row.iter_mut().enumerate() {
                        if let Some(&value) = (x0 + j * dw).checked_sub(left).and_then(|x| line.get(x)) {
                            *v = value;
                        }
                    }
                }
            }
        }
    }
    Some((out, [b, l, k]))
}

struct ConvCall {
    weight: ParamId,
    bias: Option<ParamId>,
    input: Tensor<4>,
    /// The input's patches (`[b, L, c_in·kh·kw]`), where the forward already formed them.
    patches: Option<Tensor<3>>,
    /// The shared kernels' geometry, where they formed the patches (flex: [`super::host`]),
    /// which then form the per-example gradients as well.
    #[cfg_attr(not(feature = "flex"), allow(dead_code))]
    host: Option<Geometry>,
    pad: [(usize, usize); 2],
    kernel: [usize; 2],
    stride: [usize; 2],
    dilation: [usize; 2],
    groups: usize,
    probe: Tensor<4>,
}

impl Recorded for ConvCall {
    fn params(&self) -> Vec<ParamId> {
        std::iter::once(self.weight).chain(self.bias).collect()
    }

    fn values_per_example(&self) -> usize {
        // the input, its patches (c_in·kh·kw per output position), the probe and δ
        let [_, c_out, ho, wo] = self.probe.dims();
        let cols = self.input.dims()[1] * self.kernel[0] * self.kernel[1] * ho * wo;
        per_example(&self.input.dims()) + cols + 2 * c_out * ho * wo
    }

    fn per_example(&mut self, grads: &mut Gradients) -> Vec<(ParamId, Tensor<2>)> {
        let Some(delta) = self.probe.grad_remove(grads) else { return Vec::new() };
        let [b, c_out, ho, wo] = delta.dims();
        let c_in = self.input.dims()[1];
        let (g, ci) = (self.groups, c_in / self.groups);
        let kk = self.kernel[0] * self.kernel[1];
        let geometry = ConvGeometry {
            kernel: self.kernel,
            stride: self.stride,
            dilation: self.dilation,
            pad_before: [self.pad[0].0, self.pad[1].0],
            groups: g,
        };
        #[cfg(feature = "flex")]
        if let Some(g) = self.host
            && let Some(patches) = self.patches.take()
            && let Some((weight, bias_rows)) = super::host::conv_rows(delta.clone(), patches, g)
        {
            return std::iter::once((self.weight, weight)).chain(self.bias.map(|id| (id, bias_rows))).collect();
        }
        let weight = match crate::cube::conv_weight_rows(&self.input, &delta, geometry) {
            Some(weight) => weight,
            None => self.weight_by_patches(delta.clone()),
        };
        let mut out = vec![(self.weight, weight.reshape([b, c_out * ci * kk]))];
        if let Some(bias) = self.bias {
            out.push((bias, delta.reshape([b, c_out, ho * wo]).sum_dim(2).reshape([b, c_out])));
        }
        out
    }
}

impl ConvCall {
    /// The per-example weight gradients `[b, c_out, (c_in/groups)·kh·kw]` as one batched product
    /// of δ (`[b, c_out, L]` per group) with the input's patches (`[b, L, (c_in/groups)·kh·kw]`).
    fn weight_by_patches(&self, delta: Tensor<4>) -> Tensor<3> {
        let [b, c_out, ho, wo] = delta.dims();
        let c_in = self.input.dims()[1];
        let patches = match &self.patches {
            Some(patches) => patches.clone(),
            None => patches(self.input.clone(), self.pad, self.kernel, self.stride, self.dilation),
        };
        let l = ho * wo;
        let delta = delta.reshape([b, c_out, l]);
        let kk = self.kernel[0] * self.kernel[1];
        let (g, co, ci) = (self.groups, c_out / self.groups, c_in / self.groups);
        if g == 1 {
            delta.matmul(patches)
        } else {
            let per_group: Vec<Tensor<3>> = (0..g)
                .map(|j| {
                    let d = delta.clone().slice([0..b, j * co..(j + 1) * co, 0..l]);
                    let c = patches.clone().slice([0..b, 0..l, j * ci * kk..(j + 1) * ci * kk]);
                    d.matmul(c)
                })
                .collect();
            Tensor::cat(per_group, 1)
        }
    }
}

#[cfg(test)]
mod tests {
    use burn::tensor::{Tensor, TensorData};

    use super::*;

    type Case = ([usize; 4], [(usize, usize); 2], [usize; 2], [usize; 2], [usize; 2]);

    /// Odd and rectangular kernels, strides, dilations and asymmetric padding.
    const CASES: [Case; 6] = [
        ([2, 1, 28, 28], [(3, 3), (3, 3)], [8, 8], [2, 2], [1, 1]),
        ([3, 16, 13, 13], [(0, 0), (0, 0)], [4, 4], [2, 2], [1, 1]),
        ([1, 3, 7, 9], [(1, 2), (0, 1)], [3, 2], [1, 2], [1, 1]),
        ([2, 2, 9, 8], [(2, 2), (1, 1)], [3, 3], [2, 1], [2, 3]),
        ([1, 4, 5, 5], [(0, 1), (1, 0)], [1, 1], [3, 3], [1, 1]),
        ([2, 1, 6, 6], [(2, 2), (2, 2)], [5, 5], [1, 1], [1, 1]),
    ];

    fn values(dims: [usize; 4]) -> Vec<f32> {
        let n: usize = dims.iter().product();
        (0..n).map(|i| ((i * 7919) % 1009) as f32 / 1009.0 - 0.5).collect()
    }

    /// An input smaller than the dilated kernel has no patches: the host path declines (burn's
    /// path reports it) instead of wrapping around.
    #[test]
    fn host_patches_decline_inputs_smaller_than_the_kernel() {
        assert!(patches_host(&[0.0; 2], [1, 1, 2, 1], [(0, 0), (0, 0)], [3, 1], [1, 1], [1, 1]).is_none());
        assert!(patches_host(&[0.0; 9], [1, 1, 3, 3], [(0, 0), (0, 0)], [2, 2], [1, 1], [3, 1]).is_none());
    }

    /// The host gather equals burn's `unfold4d` of the padded input, transposed to one row per
    /// output position, and the tensor path (a GPU's) equals the host gather, value for value, on
    /// both of its branches (windows of views; `unfold4d` for a dilated kernel).
    #[test]
    fn host_and_tensor_patches_equal_burns_unfold() {
        let device = crate::device::cpu_devices().into_iter().next().unwrap_or_default();
        let host = |t: Tensor<3>| t.into_data().try_into_vec::<f32>().unwrap_or_default();
        for (dims, pad, kernel, stride, dilation) in CASES {
            let case = format!("{dims:?} {pad:?} {kernel:?} {stride:?} {dilation:?}");
            let x = Tensor::<4>::from_data(TensorData::new(values(dims), dims), &device);
            let padded = x.clone().pad(pad, PadMode::Constant(0.0));
            let unfolded = unfold4d(padded, kernel, UnfoldOptions::new(stride, [0, 0], dilation)).swap_dims(1, 2);
            let tensor = patches_of_tensor(x, pad, kernel, stride, dilation);
            let (gathered, shape) =
                patches_host(&values(dims), dims, pad, kernel, stride, dilation).unwrap_or_default();
            assert_eq!((unfolded.dims(), tensor.dims()), (shape, shape), "{case}");
            assert_eq!(host(unfolded), gathered, "host gather, {case}");
            assert_eq!(host(tensor), gathered, "tensor path, {case}");
        }
    }
}

/// The convolution of a recorded forward on flex (dpgd's operation: the shared kernels, with its
/// own backward) against burn's `conv2d` of the same layer, value by value and in its input
/// gradient, for the geometries it takes (padding valid, "same" and explicit; kernels of 1 to 8
/// with and without padding; strides 1 to 3). Its per-example rows are checked against burn's
/// autodiff in `tests/per_example_vs_autodiff.rs` and `tests/burn_engine.rs`.
#[cfg(test)]
#[cfg(feature = "flex")]
mod host_tests {
    use burn::module::Module;
    use burn::nn::PaddingConfig2d;
    use burn::tensor::Device;

    use super::Conv2dConfig;
    use crate::nn::host::testing::recorded_equals_burns;

    #[test]
    fn the_host_convolution_equals_burns_in_values_and_input_gradients() {
        let device = Device::flex().autodiff();
        let cases = [
            ([3, 1, 28, 28], 16, 8, 2, PaddingConfig2d::Explicit(3, 3, 3, 3)),
            ([2, 16, 13, 13], 32, 4, 2, PaddingConfig2d::Valid),
            ([2, 3, 14, 14], 4, 3, 1, PaddingConfig2d::Same),
            ([1, 2, 9, 7], 3, 5, 3, PaddingConfig2d::Explicit(2, 2, 2, 2)),
            ([2, 4, 6, 6], 2, 1, 1, PaddingConfig2d::Valid),
            ([1, 2, 10, 11], 3, 2, 2, PaddingConfig2d::Explicit(1, 1, 1, 1)),
        ];
        for (dims, c_out, k, s, padding) in cases {
            let case = format!("{dims:?} c_out {c_out} k {k} s {s} {padding:?}");
            let conv = Conv2dConfig::new([dims[1], c_out], [k, k])
                .with_stride([s, s])
                .with_padding(padding)
                .init(&device)
                .no_grad();
            recorded_equals_burns(dims, |x| conv.forward(x), &case);
        }
    }
}
