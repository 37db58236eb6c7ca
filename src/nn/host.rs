//! dpgd's host kernels as burn operations on flex, each with its own backward: the layers of
//! [`crate::nn`] call them on flex (burn's recommended CPU backend, the default device) where
//! burn's generic kernels are slow, and burn's autodiff runs the backward given here. Registered
//! through burn's extension API (`#[backend_extension]`: the operation is dispatched to flex, or
//! to flex under autodiff, by the device of its input); every other device keeps burn's
//! operations.
//!
//! Max pooling's values and gradients equal burn's bit for bit; the convolution's and GroupNorm's
//! equal burn's up to rounding (their sums run in another order), and the layers use them only in
//! a recorded forward with frozen parameters (a private step), whose per-example gradients are
//! tested against burn's autodiff. The tests of each layer compare the operations with burn's.

use burn::backend::autodiff::Autodiff;
use burn::backend::autodiff::checkpoint::base::Checkpointer;
use burn::backend::autodiff::checkpoint::strategy::CheckpointStrategy;
use burn::backend::autodiff::grads::Gradients;
use burn::backend::autodiff::ops::{Backward, Ops, OpsKind};
use burn::backend::flex::FlexTensor;
use burn::backend::tensor::FloatTensor;
use burn::backend::{AutodiffBackend, Backend, Dispatch, Flex, backend_extension};
use burn::tensor::{DType, Tensor, TensorData};

use crate::kernels::conv::{
    Geometry, forward_batch, forward_scratch, input_grad_batch, input_grad_scratch, weight_rows,
};
use crate::kernels::norm::{GroupNorm, backward_batch as norm_backward, forward_batch as norm_forward};

/// A max pooling's windows (valid padding, floor mode): `[kh, kw]`, strides, dilations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PoolWindows {
    pub kernel: [usize; 2],
    pub stride: [usize; 2],
    pub dilation: [usize; 2],
}

/// A convolution the shared kernels compute ([`crate::kernels::conv`]: square kernel, one
/// stride, the same zero padding on every side, no dilation, one group), with its parameters'
/// values: constants of the operation (the burn engine freezes them in a private step).
#[derive(Debug, Clone)]
pub(crate) struct HostConv {
    pub geometry: Geometry,
    /// `[c_out, c_in·k·k]`, row-major.
    pub weights: Vec<f32>,
    /// `[c_out]`.
    pub bias: Option<Vec<f32>>,
}

impl HostConv {
    fn c_out(&self) -> usize {
        self.weights.len() / self.geometry.patch().max(1)
    }
}

/// A group normalisation the shared kernels compute ([`crate::kernels::norm`]: ε = 10⁻⁵), with
/// γ and β: constants of the operation, as [`HostConv`]'s parameters.
#[derive(Debug, Clone)]
pub(crate) struct HostGroupNorm {
    /// Its sizes, γ at 0 and β at `c` in `params`.
    pub layout: GroupNorm,
    /// γ, then β.
    pub params: Vec<f32>,
    /// Each example's γ and β rows (`[b, 2c]`), which the backward forms beside the input
    /// gradient ([`crate::kernels::norm::backward_batch`]) and leaves here for the per-example
    /// rule, so that the rule does not form them again. Empty until the backward has run (or
    /// if it does not: an input that needs no gradient); the rule then forms them itself.
    pub rows: std::sync::Arc<std::sync::Mutex<Option<Vec<f32>>>>,
}

/// What a GroupNorm call on flex keeps for its per-example rule ([`norm_rows`]): its input, each
/// group's μ and 1/√(σ² + ε) (`[b, 2·groups]`), and the operation (with the rows its backward
/// forms).
pub(crate) struct SavedNorm<const D: usize> {
    x: Tensor<D>,
    stats: Tensor<2>,
    norm: HostGroupNorm,
}

impl<const D: usize> SavedNorm<D> {
    /// The input's shape.
    pub fn dims(&self) -> [usize; D] {
        self.x.dims()
    }
}

/// dpgd's operations on flex.
#[backend_extension(Autodiff, Flex)]
pub(crate) trait HostOps: Backend {
    /// Max pooling of `[b, c, h, w]` f32 values ([`crate::kernels::pool`]'s arg-max kernel); its
    /// backward adds each output's gradient at its window's arg-max, as burn's does.
    fn host_max_pool2d(x: FloatTensor<Self>, windows: PoolWindows) -> FloatTensor<Self>;

    /// Average pooling of `[b, c, h, w]` f32 values ([`crate::kernels::pool::average`], no
    /// dilation); its backward spreads each output's gradient evenly over its window, as burn's
    /// does (both bit for bit).
    fn host_avg_pool2d(x: FloatTensor<Self>, windows: PoolWindows) -> FloatTensor<Self>;

    /// The convolution of `[b, c_in, h, w]` f32 values by [`crate::kernels::conv::forward_batch`],
    /// with what its weight gradients need (`[b, 1, n]`, n = [`Geometry::cols_len`]: the im2col
    /// matrices or the zero-bordered input; not differentiable), which the per-example
    /// rule reuses; its backward is the input gradient of
    /// [`crate::kernels::conv::input_grad_batch`] (the parameters are constants).
    fn host_conv2d(x: FloatTensor<Self>, conv: HostConv) -> (FloatTensor<Self>, FloatTensor<Self>);

    /// Each example's weight gradient (`[b, c_out·K]`) and bias gradient (`[b, c_out]`) from
    /// the output gradients δ (`[b, c_out, hout, wout]`) and what [`host_conv2d`](Self::host_conv2d)
    /// kept for them (`[b, 1, n]`) of
    /// [`host_conv2d`](Self::host_conv2d), by [`crate::kernels::conv::weight_rows`]: the fast
    /// engine's per-example rule. Not differentiable.
    fn host_conv_rows(
        delta: FloatTensor<Self>,
        cols: FloatTensor<Self>,
        geometry: Geometry,
    ) -> (FloatTensor<Self>, FloatTensor<Self>);

    /// The group normalisation of `[b, c, …]` f32 values by [`crate::kernels::norm::forward_batch`],
    /// with each group's μ and 1/√(σ² + ε) (`[b, 2·groups]`, not differentiable); its backward
    /// is the input gradient of [`crate::kernels::norm::backward_batch`] (γ and β are
    /// constants), which also leaves the per-example rows in `norm.rows`.
    fn host_group_norm(x: FloatTensor<Self>, norm: HostGroupNorm) -> (FloatTensor<Self>, FloatTensor<Self>);

    /// `x` itself, its gradient also given to `probe` (a leaf of `x`'s shape): what `x + probe`
    /// is for a probe of zeros — a layer's output with the probe that reads its gradient δ —
    /// without forming the sum (a pass over the output and a new buffer per layer).
    fn host_tap(x: FloatTensor<Self>, probe: FloatTensor<Self>) -> FloatTensor<Self>;

    /// Each example's outer product `aᵢ δᵢᵀ` (`[b, d_in·d_out]`, row-major as the weight
    /// `[d_in, d_out]`) from the inputs `a` (`[b, d_in]`) and the output gradients δ (`[b, d_out]`):
    /// a linear layer's per-example weight gradients at one position. Not differentiable.
    fn host_outer_rows(a: FloatTensor<Self>, delta: FloatTensor<Self>) -> FloatTensor<Self>;

    /// Each example's γ rows (`Σ x̂·δ` per channel) and β rows (`Σ δ`), `[b, c]` each, of
    /// [`host_group_norm`](Self::host_group_norm)'s call on `x` with statistics `stats`, for
    /// the output gradients δ (`[b, c, …]`): the rows its backward left in `norm.rows`, or else
    /// formed by [`crate::kernels::norm::backward_batch`]. Not differentiable.
    fn host_norm_rows(
        x: FloatTensor<Self>,
        stats: FloatTensor<Self>,
        delta: FloatTensor<Self>,
        norm: HostGroupNorm,
    ) -> (FloatTensor<Self>, FloatTensor<Self>);
}

/// A parameter's values on the host as f32, to pass to an operation as constants; `None` if the
/// device cannot give them back.
pub(crate) fn param_values(t: Tensor<1>) -> Option<Vec<f32>> {
    t.into_data().convert::<f32>().try_into_vec::<f32>().ok()
}

/// [`HostOps::host_group_norm`] of `x` where it runs (flex, f32 values, `norm`'s sizes are
/// `x`'s): the output and what the per-example rule needs; `None` elsewhere.
pub(crate) fn group_norm<const D: usize>(x: Tensor<D>, norm: HostGroupNorm) -> Option<(Tensor<D>, SavedNorm<D>)> {
    let l = norm.layout;
    let dims = x.dims();
    let fits = crate::device::is_flex(&x.device())
        && x.dtype() == DType::F32
        && D >= 2
        && dims[1] == l.c
        && dims[2..].iter().product::<usize>() == l.hw
        && l.groups > 0
        && l.c.is_multiple_of(l.groups)
        && (l.gamma, l.beta, norm.params.len()) == (0, l.c, 2 * l.c);
    if !fits {
        return None;
    }
    let saved = x.clone().without_autodiff();
    let (out, stats) = <Dispatch as HostOps>::host_group_norm(x.into_dispatch(), norm.clone());
    let stats = Tensor::<2>::from_dispatch(stats).without_autodiff();
    Some((Tensor::from_dispatch(out), SavedNorm { x: saved, stats, norm }))
}

/// [`HostOps::host_norm_rows`] of a call [`group_norm`] ran, for its output gradients δ (of its
/// output's shape, so of its input's): the γ rows and the β rows.
pub(crate) fn norm_rows<const D: usize>(saved: &SavedNorm<D>, delta: Tensor<D>) -> (Tensor<2>, Tensor<2>) {
    let (x, stats) = (saved.x.clone().into_dispatch(), saved.stats.clone().into_dispatch());
    let (gamma, beta) = <Dispatch as HostOps>::host_norm_rows(x, stats, delta.into_dispatch(), saved.norm.clone());
    (Tensor::from_dispatch(gamma), Tensor::from_dispatch(beta))
}

/// [`HostOps::host_outer_rows`] where it runs (flex, f32, `a` `[b, d_in]` and δ `[b, d_out]`);
/// `None` elsewhere.
pub(crate) fn outer_rows(a: Tensor<2>, delta: Tensor<2>) -> Option<Tensor<2>> {
    let fits = crate::device::is_flex(&delta.device())
        && [a.dtype(), delta.dtype()] == [DType::F32; 2]
        && a.dims()[0] == delta.dims()[0];
    fits.then(|| {
        Tensor::from_dispatch(<Dispatch as HostOps>::host_outer_rows(a.into_dispatch(), delta.into_dispatch()))
    })
}

/// [`HostOps::host_tap`] of `x` and `probe` where it runs (flex, f32, one shape); `None`
/// elsewhere.
pub(crate) fn tap<const D: usize>(x: &Tensor<D>, probe: &Tensor<D>) -> Option<Tensor<D>> {
    let fits = crate::device::is_flex(&x.device())
        && [x.dtype(), probe.dtype()] == [DType::F32; 2]
        && x.dims() == probe.dims();
    fits.then(|| {
        Tensor::from_dispatch(<Dispatch as HostOps>::host_tap(x.clone().into_dispatch(), probe.clone().into_dispatch()))
    })
}

/// [`HostOps::host_max_pool2d`] of `x` where it runs (flex, f32 values, windows that fit);
/// `None` elsewhere.
pub(crate) fn max_pool2d(x: Tensor<4>, windows: PoolWindows) -> Option<Tensor<4>> {
    // The arg-maxes are indices in a plane, kept as u32.
    let plane_fits = x.dims()[2].checked_mul(x.dims()[3]).is_some_and(|p| u32::try_from(p).is_ok());
    let fits = crate::device::is_flex(&x.device()) && x.dtype() == DType::F32 && plane_fits;
    fits.then(|| Tensor::from_dispatch(<Dispatch as HostOps>::host_max_pool2d(x.into_dispatch(), windows)))
}

/// [`HostOps::host_avg_pool2d`] of `x` where it runs (flex, f32 values, windows that fit, no
/// dilation); `None` elsewhere.
pub(crate) fn avg_pool2d(x: Tensor<4>, windows: PoolWindows) -> Option<Tensor<4>> {
    let fits = crate::device::is_flex(&x.device()) && x.dtype() == DType::F32 && windows.dilation == [1, 1];
    fits.then(|| Tensor::from_dispatch(<Dispatch as HostOps>::host_avg_pool2d(x.into_dispatch(), windows)))
}

/// [`HostOps::host_conv2d`] of `x` where it runs (flex, f32 values, `conv`'s geometry is `x`'s):
/// the output and what the weight gradients need (without autodiff); `None` elsewhere.
pub(crate) fn conv2d(x: Tensor<4>, conv: HostConv) -> Option<(Tensor<4>, Tensor<3>)> {
    let g = conv.geometry;
    let fits = crate::device::is_flex(&x.device())
        && x.dtype() == DType::F32
        && x.dims()[1..] == [g.cin, g.hin, g.win]
        && conv.weights.len().is_multiple_of(g.patch().max(1))
        && conv.bias.as_ref().is_none_or(|b| b.len() == conv.c_out());
    if !fits {
        return None;
    }
    let (out, cols) = <Dispatch as HostOps>::host_conv2d(x.into_dispatch(), conv);
    Some((Tensor::from_dispatch(out), Tensor::<3>::from_dispatch(cols).without_autodiff()))
}

/// [`HostOps::host_conv_rows`] where it runs (flex, f32, shapes of `geometry`): the weight rows and
/// the bias rows; `None` elsewhere.
pub(crate) fn conv_rows(delta: Tensor<4>, cols: Tensor<3>, g: Geometry) -> Option<(Tensor<2>, Tensor<2>)> {
    let [b, c_out, hout, wout] = delta.dims();
    let fits = crate::device::is_flex(&delta.device())
        && [delta.dtype(), cols.dtype()] == [DType::F32; 2]
        && [hout, wout] == [g.hout, g.wout]
        && cols.dims() == [b, 1, g.cols_len()]
        && c_out > 0;
    if !fits {
        return None;
    }
    let (weight, bias) = <Dispatch as HostOps>::host_conv_rows(delta.into_dispatch(), cols.into_dispatch(), g);
    Some((Tensor::from_dispatch(weight), Tensor::from_dispatch(bias)))
}

impl HostOps for Flex {
    fn host_max_pool2d(x: FloatTensor<Self>, windows: PoolWindows) -> FloatTensor<Self> {
        max_pool(&x, windows).0
    }

    fn host_avg_pool2d(x: FloatTensor<Self>, windows: PoolWindows) -> FloatTensor<Self> {
        avg_pool(&x, windows).0
    }

    fn host_conv2d(x: FloatTensor<Self>, conv: HostConv) -> (FloatTensor<Self>, FloatTensor<Self>) {
        convolve(&x, &conv)
    }

    fn host_group_norm(x: FloatTensor<Self>, norm: HostGroupNorm) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let (out, stats) = normalise(&x, &norm);
        let b = stats.len() / (2 * norm.layout.groups).max(1);
        (out, FlexTensor::from_data(TensorData::new(stats, [b, 2 * norm.layout.groups])))
    }

    fn host_conv_rows(
        delta: FloatTensor<Self>,
        cols: FloatTensor<Self>,
        g: Geometry,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let (b, t, kk, n) = (delta.layout().shape()[0], g.positions(), g.patch(), g.cols_len());
        let c_out = delta.layout().num_elements() / (b * t).max(1);
        let (mut weight, mut bias) = (vec![0.0f32; b * c_out * kk], vec![0.0f32; b * c_out]);
        {
            let (dy, cols) = (values(&delta), values(&cols));
            let examples = weight.chunks_exact_mut((c_out * kk).max(1)).zip(bias.chunks_exact_mut(c_out.max(1)));
            for (e, (weight, bias)) in examples.enumerate() {
                let (dy, cols) = (&dy[e * c_out * t..(e + 1) * c_out * t], &cols[e * n..(e + 1) * n]);
                weight_rows(&g, dy, cols, weight, Some(bias));
            }
        }
        give_back(cols);
        (
            FlexTensor::from_data(TensorData::new(weight, [b, c_out * kk])),
            FlexTensor::from_data(TensorData::new(bias, [b, c_out])),
        )
    }

    fn host_tap(x: FloatTensor<Self>, _: FloatTensor<Self>) -> FloatTensor<Self> {
        x
    }

    fn host_outer_rows(a: FloatTensor<Self>, delta: FloatTensor<Self>) -> FloatTensor<Self> {
        let (b, d_in) = (a.layout().shape()[0], a.layout().shape()[1]);
        let d_out = delta.layout().shape()[1];
        let (a, delta) = (values(&a), values(&delta));
        // Written in order as it is formed: no zeroing pass first.
        let mut rows = Vec::with_capacity(b * d_in * d_out);
        for (a, delta) in a.chunks_exact(d_in.max(1)).zip(delta.chunks_exact(d_out.max(1))).take(b) {
            for &x in a {
                rows.extend(delta.iter().map(|&d| x * d));
            }
        }
        rows.resize(b * d_in * d_out, 0.0);
        FlexTensor::from_data(TensorData::new(rows, [b, d_in * d_out]))
    }

    fn host_norm_rows(
        x: FloatTensor<Self>,
        stats: FloatTensor<Self>,
        delta: FloatTensor<Self>,
        norm: HostGroupNorm,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let (b, c) = (delta.layout().shape()[0], norm.layout.c);
        let left = norm.rows.lock().unwrap_or_else(std::sync::PoisonError::into_inner).take();
        let rows = left.filter(|r| r.len() == b * 2 * c).unwrap_or_else(|| {
            let mut rows = vec![0.0f32; b * 2 * c];
            let (x, dy, stats) = (values(&x), values(&delta), values(&stats));
            norm_backward(&norm.layout, &norm.params, (&x, &dy, &stats), None, (&mut rows, 2 * c));
            rows
        });
        // Each example's row is γ's c values, then β's.
        let (gamma, beta): (Vec<f32>, Vec<f32>) = (
            rows.chunks_exact(2 * c.max(1)).flat_map(|r| &r[..c]).copied().collect(),
            rows.chunks_exact(2 * c.max(1)).flat_map(|r| &r[c..]).copied().collect(),
        );
        (FlexTensor::from_data(TensorData::new(gamma, [b, c])), FlexTensor::from_data(TensorData::new(beta, [b, c])))
    }
}

impl<C: CheckpointStrategy> HostOps for Autodiff<Flex, C> {
    fn host_max_pool2d(x: FloatTensor<Self>, windows: PoolWindows) -> FloatTensor<Self> {
        match MaxPoolBackward.prepare::<C>([x.node()]).compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let (out, argmax, dims) = max_pool(x.primitive(), windows);
                prep.finish((argmax, dims), out)
            }
            OpsKind::UnTracked(prep) => prep.finish(max_pool(x.primitive(), windows).0),
        }
    }

    fn host_avg_pool2d(x: FloatTensor<Self>, windows: PoolWindows) -> FloatTensor<Self> {
        let (out, dims) = avg_pool(x.primitive(), windows);
        match AvgPoolBackward.prepare::<C>([x.node()]).compute_bound().stateful() {
            OpsKind::Tracked(prep) => prep.finish((windows, dims), out),
            OpsKind::UnTracked(prep) => prep.finish(out),
        }
    }

    fn host_conv2d(x: FloatTensor<Self>, conv: HostConv) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let (out, cols) = convolve(x.primitive(), &conv);
        let out = match ConvBackward.prepare::<C>([x.node()]).compute_bound().stateful() {
            OpsKind::Tracked(prep) => prep.finish(std::sync::Arc::new(conv), out),
            OpsKind::UnTracked(prep) => prep.finish(out),
        };
        (out, <Self as AutodiffBackend>::from_inner(cols))
    }

    fn host_group_norm(x: FloatTensor<Self>, norm: HostGroupNorm) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let (out, stats) = Flex::host_group_norm(x.primitive().clone(), norm.clone());
        let out = match NormBackward.prepare::<C>([x.node()]).compute_bound().stateful() {
            OpsKind::Tracked(prep) => {
                let kept = values(&stats).into_owned();
                prep.finish((std::sync::Arc::new(norm), x.primitive().clone(), kept), out)
            }
            OpsKind::UnTracked(prep) => prep.finish(out),
        };
        (out, <Self as AutodiffBackend>::from_inner(stats))
    }

    fn host_conv_rows(
        delta: FloatTensor<Self>,
        cols: FloatTensor<Self>,
        g: Geometry,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let (weight, bias) = Flex::host_conv_rows(Self::inner(delta), Self::inner(cols), g);
        (Self::from_inner(weight), Self::from_inner(bias))
    }

    fn host_outer_rows(a: FloatTensor<Self>, delta: FloatTensor<Self>) -> FloatTensor<Self> {
        Self::from_inner(Flex::host_outer_rows(Self::inner(a), Self::inner(delta)))
    }

    fn host_tap(x: FloatTensor<Self>, probe: FloatTensor<Self>) -> FloatTensor<Self> {
        TapBackward.prepare::<C>([x.node(), probe.node()]).compute_bound().stateless(x.primitive().clone())
    }

    fn host_norm_rows(
        x: FloatTensor<Self>,
        stats: FloatTensor<Self>,
        delta: FloatTensor<Self>,
        norm: HostGroupNorm,
    ) -> (FloatTensor<Self>, FloatTensor<Self>) {
        let (gamma, beta) = Flex::host_norm_rows(Self::inner(x), Self::inner(stats), Self::inner(delta), norm);
        (Self::from_inner(gamma), Self::from_inner(beta))
    }
}

thread_local! {
    /// `cols` buffers (im2col matrices or zero-bordered planes) given back once a convolution's
    /// per-example rows are formed ([`give_back`]), and the forward's scratch, for this thread's
    /// next convolution of the same sizes: every stale value is overwritten (the im2col, the
    /// padding and the product write each one; a test fills them with NaN), so no zeroing pass
    /// over them — im2col matrices took 7 MB per micro-batch of 64 for 16 channels of 3 × 3
    /// windows on 14 × 14, 6 % of the residual GroupNorm model's step on the burn engine
    /// (`perf`, 2 cores). At most [`SPARE`] are kept (counted in the
    /// burn engine's memory estimate).
    static SPARE_COLS: std::cell::RefCell<Vec<Vec<f32>>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The most buffers (`cols` and scratch) a thread keeps for reuse.
pub(super) const SPARE: usize = 4;

/// A buffer of `n` values whose every value the caller overwrites: a given-back one of that
/// size if this thread has one, zeros otherwise.
fn overwritten_buffer(n: usize) -> Vec<f32> {
    SPARE_COLS.with_borrow_mut(|spare| match spare.iter().position(|v| v.len() == n) {
        Some(i) => spare.swap_remove(i),
        None => vec![0.0; n],
    })
}

/// Keeps `cols`' buffer for [`overwritten_buffer`] when nothing else holds it.
fn give_back(cols: FlexTensor) {
    if !cols.is_unique() || cols.dtype() != DType::F32 {
        return;
    }
    if let Ok(v) = cols.into_data().try_into_vec::<f32>() {
        keep(v);
    }
}

/// The values in the buffers this thread keeps for reuse (for tests of memory estimates).
#[cfg(test)]
pub(crate) fn kept_values() -> usize {
    SPARE_COLS.with_borrow(|spare| spare.iter().map(Vec::len).sum())
}

/// Keeps `buffer` for [`overwritten_buffer`] (the oldest kept one dropped past [`SPARE`]).
fn keep(buffer: Vec<f32>) {
    SPARE_COLS.with_borrow_mut(|spare| {
        if spare.len() >= SPARE {
            spare.remove(0);
        }
        spare.push(buffer);
    });
}

/// The convolution of `x` and what its weight gradients need ([`forward_batch`]'s `cols`).
fn convolve(x: &FlexTensor, conv: &HostConv) -> (FlexTensor, FlexTensor) {
    let g = &conv.geometry;
    let (b, t, c_out) = (x.layout().shape()[0], g.positions(), conv.c_out());
    let x = values(x);
    let (cols, hwc) = forward_scratch(g, b, c_out);
    let (mut cols, mut hwc, mut out) = (overwritten_buffer(cols), overwritten_buffer(hwc), vec![0.0f32; b * c_out * t]);
    forward_batch(g, (&conv.weights, conv.bias.as_deref()), (b, &x), (&mut cols, &mut hwc), &mut out);
    keep(hwc);
    (
        FlexTensor::from_data(TensorData::new(out, [b, c_out, g.hout, g.wout])),
        FlexTensor::from_data(TensorData::new(cols, [b, 1, g.cols_len()])),
    )
}

/// The group normalisation of `x` and each group's μ and 1/√(σ² + ε) (per example, group by
/// group).
fn normalise(x: &FlexTensor, norm: &HostGroupNorm) -> (FlexTensor, Vec<f32>) {
    let (l, shape) = (&norm.layout, x.layout().shape().clone());
    let b = shape.num_elements() / l.values().max(1);
    let x = values(x);
    let (mut out, mut stats) = (vec![0.0f32; b * l.values()], vec![0.0f32; b * 2 * l.groups]);
    norm_forward(l, &norm.params, &x, &mut out, &mut stats);
    (FlexTensor::from_data(TensorData::new(out, shape)), stats)
}

/// The backward of [`HostOps::host_group_norm`]: the input gradient, and the per-example rows the
/// kernel forms beside it, left in the operation's `rows` for the recorded rule.
#[derive(Debug)]
struct NormBackward;

impl Backward<Flex, 1> for NormBackward {
    type State = (std::sync::Arc<HostGroupNorm>, FlexTensor, Vec<f32>);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad = grads.consume::<Flex>(&ops.node);
        let [Some(parent)] = ops.parents else { return };
        let (norm, x, stats) = ops.state;
        let l = &norm.layout;
        let shape = x.layout().shape().clone();
        let (x, dy) = (values(&x), values(&grad));
        let b = x.len() / l.values().max(1);
        let (mut dx, mut rows) = (vec![0.0f32; x.len()], vec![0.0f32; b * 2 * l.c]);
        norm_backward(l, &norm.params, (&x, &dy, &stats), Some(&mut dx), (&mut rows, 2 * l.c));
        *norm.rows.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = Some(rows);
        grads.register::<Flex>(parent.id, FlexTensor::from_data(TensorData::new(dx, shape)));
    }
}

/// The backward of [`HostOps::host_tap`]: the output's gradient to both parents, as an
/// addition's backward gives it (the same tensor, shared).
#[derive(Debug)]
struct TapBackward;

impl Backward<Flex, 2> for TapBackward {
    type State = ();

    fn backward(self, ops: Ops<Self::State, 2>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad = grads.consume::<Flex>(&ops.node);
        let [x, probe] = ops.parents;
        if let Some(x) = x {
            grads.register::<Flex>(x.id, grad.clone());
        }
        if let Some(probe) = probe {
            grads.register::<Flex>(probe.id, grad);
        }
    }
}

/// The backward of [`HostOps::host_conv2d`]: the input gradient.
#[derive(Debug)]
struct ConvBackward;

impl Backward<Flex, 1> for ConvBackward {
    type State = std::sync::Arc<HostConv>;

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad = grads.consume::<Flex>(&ops.node);
        let [Some(parent)] = ops.parents else { return };
        let conv = ops.state;
        let g = &conv.geometry;
        let (b, c_out) = (grad.layout().shape()[0], conv.c_out());
        let dy = values(&grad);
        let (hwc, dcols) = input_grad_scratch(g, b, c_out);
        let (mut hwc, mut dcols) = (vec![0.0f32; hwc], vec![0.0f32; dcols]);
        let mut dx = vec![0.0f32; b * g.cin * g.hin * g.win];
        input_grad_batch(g, &conv.weights, (b, &dy), (&mut hwc, &mut dcols), &mut dx);
        grads.register::<Flex>(parent.id, FlexTensor::from_data(TensorData::new(dx, [b, g.cin, g.hin, g.win])));
    }
}

/// A tensor's values as f32 on the host: borrowed where they are contiguous f32, converted
/// otherwise.
fn values(x: &FlexTensor) -> std::borrow::Cow<'_, [f32]> {
    match x.as_slice::<f32>() {
        Some(v) if x.is_contiguous() => std::borrow::Cow::Borrowed(v),
        _ => std::borrow::Cow::Owned(x.clone().into_data().convert::<f32>().try_into_vec::<f32>().unwrap_or_default()),
    }
}

/// The max pooling of `x` (`[b, c, h, w]`: planes of fewer than 2³² values), each output's
/// arg-max in its plane, and `x`'s shape.
fn max_pool(x: &FlexTensor, w: PoolWindows) -> (FlexTensor, Vec<u32>, [usize; 4]) {
    let dims: [usize; 4] = std::array::from_fn(|i| x.layout().shape()[i]);
    let [b, c, h, width] = dims;
    let x = values(x);
    let (out, argmax, [ho, wo]) =
        crate::kernels::pool::max_with_argmax(&x, [b * c, h, width], w.kernel, w.stride, w.dilation);
    (FlexTensor::from_data(TensorData::new(out, [b, c, ho, wo])), argmax, dims)
}

/// The backward of [`HostOps::host_max_pool2d`]: the output gradient added at each window's
/// arg-max, outputs in order (as burn's scatter-add of max pooling's gradient).
#[derive(Debug)]
struct MaxPoolBackward;

impl Backward<Flex, 1> for MaxPoolBackward {
    type State = (Vec<u32>, [usize; 4]);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad = grads.consume::<Flex>(&ops.node);
        let [Some(parent)] = ops.parents else { return };
        let (argmax, dims) = ops.state;
        let [b, c, h, w] = dims;
        let grad = values(&grad);
        let (plane, outputs) = (h * w, (argmax.len() / (b * c).max(1)).max(1));
        let mut dx = vec![0.0f32; b * c * plane];
        for ((dx, at), g) in
            dx.chunks_exact_mut(plane).zip(argmax.chunks_exact(outputs)).zip(grad.chunks_exact(outputs))
        {
            for (&i, &g) in at.iter().zip(g) {
                dx[i as usize] += g;
            }
        }
        grads.register::<Flex>(parent.id, FlexTensor::from_data(TensorData::new(dx, dims)));
    }
}

/// The average pooling of `x` (`[b, c, h, w]`) and `x`'s shape.
fn avg_pool(x: &FlexTensor, w: PoolWindows) -> (FlexTensor, [usize; 4]) {
    let dims: [usize; 4] = std::array::from_fn(|i| x.layout().shape()[i]);
    let [b, c, h, width] = dims;
    let [ho, wo] = [(h - w.kernel[0]) / w.stride[0] + 1, (width - w.kernel[1]) / w.stride[1] + 1];
    let mut out = vec![0.0f32; b * c * ho * wo];
    crate::kernels::pool::average(&values(x), &mut out, [b * c, h, width], w.kernel, w.stride);
    (FlexTensor::from_data(TensorData::new(out, [b, c, ho, wo])), dims)
}

/// The backward of [`HostOps::host_avg_pool2d`].
#[derive(Debug)]
struct AvgPoolBackward;

impl Backward<Flex, 1> for AvgPoolBackward {
    type State = (PoolWindows, [usize; 4]);

    fn backward(self, ops: Ops<Self::State, 1>, grads: &mut Gradients, _: &mut Checkpointer) {
        let grad = grads.consume::<Flex>(&ops.node);
        let [Some(parent)] = ops.parents else { return };
        let (w, dims) = ops.state;
        let [b, c, h, width] = dims;
        let mut dx = vec![0.0f32; b * c * h * width];
        crate::kernels::pool::average_backward(&values(&grad), &mut dx, [b * c, h, width], w.kernel, w.stride);
        grads.register::<Flex>(parent.id, FlexTensor::from_data(TensorData::new(dx, dims)));
    }
}

/// For the layers' tests: `values` drawn in [−0.5, 0.5), and a check that a layer's outputs and
/// input gradients (of Σ y ⊙ w, w drawn) in a recorded forward (dpgd's operations) equal those
/// outside one (burn's operations) within 10⁻⁵, on flex under autodiff.
#[cfg(test)]
pub(crate) mod testing {
    use burn::tensor::{Device, Tensor, TensorData};

    use crate::nn::record;

    pub(crate) fn values(n: usize, seed: usize) -> Vec<f32> {
        (0..n).map(|i| (((i + seed) * 7919) % 1009) as f32 / 1009.0 - 0.5).collect()
    }

    pub(crate) fn recorded_equals_burns(dims: [usize; 4], layer: impl Fn(Tensor<4>) -> Tensor<4>, case: &str) {
        let device = Device::flex().autodiff();
        let run = |recorded: bool| {
            let x = Tensor::<4>::from_data(TensorData::new(values(dims.iter().product(), 3), dims), &device);
            let x = x.require_grad();
            let y = if recorded { record(|| layer(x.clone())).0 } else { layer(x.clone()) };
            let w = Tensor::<4>::from_data(TensorData::new(values(y.dims().iter().product(), 11), y.dims()), &device);
            let grads = (y.clone() * w).sum().backward();
            let read = |t: Tensor<4>| t.into_data().try_into_vec::<f32>().unwrap_or_default();
            (y.dims(), read(y.clone()), x.grad(&grads).map(read).unwrap_or_default())
        };
        let (ours, burns) = (run(true), run(false));
        assert_eq!(ours.0, burns.0, "{case}: shape");
        for (what, a, b) in [("values", &ours.1, &burns.1), ("input gradient", &ours.2, &burns.2)] {
            assert_eq!(a.len(), b.len(), "{case}: {what}");
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                assert!((x - y).abs() <= 1e-5 * (1.0 + y.abs()), "{case}: {what}[{i}]: {x} against burn's {y}");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A kept buffer's stale values never reach an output: with NaN-filled buffers of the
    /// convolution's `cols` and scratch sizes kept on this thread, its output and `cols` equal
    /// those of a run on fresh zeroed buffers, bit for bit, and both NaN buffers were taken
    /// (only the scratch is kept again); at stride 1 (without im2col on AVX-512: the
    /// zero-bordered plane) and at stride 2 (the im2col matrices).
    #[test]
    fn stale_kept_buffers_are_overwritten() {
        let (b, c_out) = (3, 4);
        for (stride, hout, wout) in [(1, 6, 5), (2, 3, 3)] {
            let g = Geometry { cin: 2, hin: 6, win: 5, k: 3, stride, pad: 1, hout, wout };
            let weights = testing::values(c_out * g.patch(), 1);
            let conv = HostConv { geometry: g, weights, bias: Some(testing::values(c_out, 2)) };
            let x = FlexTensor::from_data(TensorData::new(testing::values(b * 60, 3), [b, 2, 6, 5]));
            let bits = |t: &FlexTensor| values(t).iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            SPARE_COLS.with_borrow_mut(Vec::clear);
            let fresh = convolve(&x, &conv);
            SPARE_COLS.with_borrow_mut(Vec::clear);
            let (cols, hwc) = forward_scratch(&g, b, c_out);
            keep(vec![f32::NAN; cols]);
            keep(vec![f32::NAN; hwc]);
            let reused = convolve(&x, &conv);
            assert_eq!((bits(&reused.0), bits(&reused.1)), (bits(&fresh.0), bits(&fresh.1)), "{g:?}");
            let kept =
                SPARE_COLS.with_borrow(|spare| spare.iter().map(|v| v.iter().any(|v| v.is_nan())).collect::<Vec<_>>());
            assert_eq!(kept, [false], "{g:?}");
        }
    }
}
