//! [`GroupNorm`] and [`LayerNorm`]: burn's normalisations with per-example rules.
//!
//! Both normalise within one example (never across the batch, unlike BatchNorm, which mixes
//! examples and has no per-example gradient), then scale by γ and shift by β per channel
//! (GroupNorm) or feature (LayerNorm). With x̂ the normalised input, recorded in the forward,
//! and δ the output gradient: `g_γ,i = Σ δᵢ ⊙ x̂ᵢ` and `g_β,i = Σ δᵢ`, summed over positions.
//! GroupNorm on flex (dpgd's operation) records its input and statistics instead, and its
//! backward kernel, which forms these rows beside the input gradient, leaves them for the rule.

use burn::config::Config;
use burn::module::{Module, Param, ParamId};
use burn::nn::Initializer;
use burn::tensor::{Device, Gradients, Tensor};

use super::tape::{Recorded, attach, is_open as tape_is_open, per_example};

/// The configuration of a [`GroupNorm`] layer: burn's `GroupNormConfig`, same fields and
/// defaults.
#[derive(Config, Debug)]
pub struct GroupNormConfig {
    /// Groups the channels are split into.
    pub num_groups: usize,
    /// Channels (divisible by `num_groups`).
    pub num_channels: usize,
    /// Added to the variance.
    #[config(default = 1e-5)]
    pub epsilon: f64,
    /// Whether the layer has γ and β.
    #[config(default = true)]
    pub affine: bool,
}

impl GroupNormConfig {
    /// The layer, γ = 1 and β = 0 as in burn.
    ///
    /// # Panics
    /// As burn's: if `num_channels` is not divisible by `num_groups`.
    #[must_use]
    pub fn init(&self, device: &Device) -> GroupNorm {
        assert!(
            self.num_groups > 0 && self.num_channels.is_multiple_of(self.num_groups),
            "The number of channels must be divisible by the number of groups"
        );
        let (gamma, beta) = if self.affine {
            (
                Some(Initializer::Ones.init([self.num_channels], device)),
                Some(Initializer::Zeros.init([self.num_channels], device)),
            )
        } else {
            (None, None)
        };
        GroupNorm {
            gamma,
            beta,
            num_groups: self.num_groups,
            num_channels: self.num_channels,
            epsilon: self.epsilon,
            affine: self.affine,
        }
    }
}

/// burn's `GroupNorm` (same fields), whose calls inside [`super::record`] are recorded.
#[derive(Module, Debug)]
pub struct GroupNorm {
    /// Scale, `[num_channels]`.
    pub gamma: Option<Param<Tensor<1>>>,
    /// Shift, `[num_channels]`.
    pub beta: Option<Param<Tensor<1>>>,
    /// Groups.
    pub num_groups: usize,
    /// Channels.
    pub num_channels: usize,
    /// Added to the variance.
    pub epsilon: f64,
    /// Whether γ and β are used.
    pub affine: bool,
}

impl From<burn::nn::GroupNorm> for GroupNorm {
    fn from(g: burn::nn::GroupNorm) -> Self {
        Self {
            gamma: g.gamma,
            beta: g.beta,
            num_groups: g.num_groups,
            num_channels: g.num_channels,
            epsilon: g.epsilon,
            affine: g.affine,
        }
    }
}

impl GroupNorm {
    /// Normalises each group of channels of each example of `input` (`[batch, channels, …]`),
    /// as burn's `GroupNorm::forward` does for f32 models (burn widens f16/bf16 statistics; this
    /// does not). Without γ and β (`affine = false`) the output is the normalised input.
    pub fn forward<const D: usize>(&self, input: Tensor<D>) -> Tensor<D> {
        if let Some(out) = self.forward_host(&input) {
            return out;
        }
        let shape = input.shape();
        let dims = input.dims();
        let (b, c) = (dims[0], dims[1]);
        let per_group = dims[2..].iter().product::<usize>() * c / self.num_groups.max(1);
        let x = input.reshape([b, self.num_groups, per_group]);
        let centred = x.clone() - x.mean_dim(2);
        let var = centred.clone().square().mean_dim(2);
        let normalised = (centred / var.add_scalar(self.epsilon).sqrt()).reshape(shape);
        let (Some(gamma), Some(beta), true) = (&self.gamma, &self.beta, self.affine) else { return normalised };
        let mut affine = [1; D];
        affine[1] = c;
        let out = normalised.clone() * gamma.val().reshape(affine) + beta.val().reshape(affine);
        attach(out, |probe| NormCall {
            gamma: gamma.id,
            beta: Some(beta.id),
            saved: Saved::Normalised(normalised.without_autodiff()),
            probe,
            channels: c,
            channel_axis: true,
        })
    }
}

impl GroupNorm {
    /// On flex, in a recorded forward with γ and β frozen (a private step) and burn's default ε:
    /// the normalisation by dpgd's own operation with its own backward ([`super::host`]: the
    /// fast engine's kernels), x̂ recorded from it; `None` elsewhere (burn's operations then).
    #[cfg(feature = "flex")]
    fn forward_host<const D: usize>(&self, input: &Tensor<D>) -> Option<Tensor<D>> {
        let (Some(gamma), Some(beta), true) = (&self.gamma, &self.beta, self.affine) else { return None };
        let frozen = !gamma.val().is_tracked() && !beta.val().is_tracked();
        if !tape_is_open() || !frozen || self.epsilon != crate::kernels::norm::EPSILON || D < 2 {
            return None;
        }
        let dims = input.dims();
        let (c, hw) = (dims[1], dims[2..].iter().product::<usize>());
        let mut params = super::host::param_values(gamma.val())?;
        params.extend(super::host::param_values(beta.val())?);
        let layout = crate::kernels::norm::GroupNorm { c, hw, groups: self.num_groups, gamma: 0, beta: c };
        let norm = super::host::HostGroupNorm { layout, params, rows: Default::default() };
        let (out, saved) = super::host::group_norm(input.clone(), norm)?;
        Some(attach(out, |probe| NormCall {
            gamma: gamma.id,
            beta: Some(beta.id),
            saved: Saved::Host(saved),
            probe,
            channels: c,
            channel_axis: true,
        }))
    }

    /// Off flex builds: none.
    #[cfg(not(feature = "flex"))]
    fn forward_host<const D: usize>(&self, _: &Tensor<D>) -> Option<Tensor<D>> {
        None
    }
}

/// The configuration of a [`LayerNorm`] layer: burn's `LayerNormConfig`, same fields and
/// defaults.
#[derive(Config, Debug)]
pub struct LayerNormConfig {
    /// Features of the last axis.
    pub d_model: usize,
    /// Added to the variance.
    #[config(default = 1e-5)]
    pub epsilon: f64,
    /// Whether the layer has β.
    #[config(default = true)]
    pub bias: bool,
}

impl LayerNormConfig {
    /// The layer, γ = 1 and β = 0 as in burn.
    #[must_use]
    pub fn init(&self, device: &Device) -> LayerNorm {
        LayerNorm {
            gamma: Initializer::Ones.init([self.d_model], device),
            beta: self.bias.then(|| Initializer::Zeros.init([self.d_model], device)),
            epsilon: self.epsilon,
        }
    }
}

/// burn's `LayerNorm` (same fields), whose calls inside [`super::record`] are recorded.
#[derive(Module, Debug)]
pub struct LayerNorm {
    /// Scale, `[d_model]`.
    pub gamma: Param<Tensor<1>>,
    /// Shift, `[d_model]`.
    pub beta: Option<Param<Tensor<1>>>,
    epsilon: f64,
}

impl LayerNorm {
    /// Normalises the last axis of `input`, as burn's `LayerNorm::forward` does for f32 models
    /// (burn widens f16/bf16 statistics; this does not).
    pub fn forward<const D: usize>(&self, input: Tensor<D>) -> Tensor<D> {
        let centred = input.clone() - input.mean_dim(D - 1);
        let var = centred.clone().square().mean_dim(D - 1);
        let normalised = centred / var.add_scalar(self.epsilon).sqrt();
        let d = self.gamma.dims()[0];
        let mut affine = [1; D];
        affine[D - 1] = d;
        let mut out = normalised.clone() * self.gamma.val().reshape(affine);
        if let Some(beta) = &self.beta {
            out = out + beta.val().reshape(affine);
        }
        attach(out, |probe| NormCall {
            gamma: self.gamma.id,
            beta: self.beta.as_ref().map(|b| b.id),
            saved: Saved::Normalised(normalised.without_autodiff()),
            probe,
            channels: d,
            channel_axis: false,
        })
    }
}

/// What a normalisation call keeps for its per-example rule (one per call, held until its rule
/// has run: the variants' sizes do not matter).
#[allow(clippy::large_enum_variant)]
enum Saved<const D: usize> {
    /// x̂ (burn's operations).
    Normalised(Tensor<D>),
    /// The input, its statistics and the rows the backward forms (dpgd's operation on flex).
    #[cfg(feature = "flex")]
    Host(super::host::SavedNorm<D>),
}

/// A normalisation call: γ and β per channel (axis 1) or per feature (last axis).
struct NormCall<const D: usize> {
    gamma: ParamId,
    beta: Option<ParamId>,
    saved: Saved<D>,
    probe: Tensor<D>,
    channels: usize,
    channel_axis: bool,
}

impl<const D: usize> NormCall<D> {
    /// `t` as `[batch, channels, positions]`.
    fn by_channel(&self, t: Tensor<D>) -> Tensor<3> {
        let b = t.dims()[0];
        let c = self.channels;
        let n = t.shape().num_elements() / (b * c).max(1);
        if self.channel_axis { t.reshape([b, c, n]) } else { t.reshape([b, n, c]).swap_dims(1, 2) }
    }
}

impl<const D: usize> Recorded for NormCall<D> {
    fn params(&self) -> Vec<ParamId> {
        std::iter::once(self.gamma).chain(self.beta).collect()
    }

    fn values_per_example(&self) -> usize {
        let kept = match &self.saved {
            Saved::Normalised(t) => t.dims(),
            #[cfg(feature = "flex")]
            Saved::Host(saved) => saved.dims(),
        };
        per_example(&kept) + 2 * per_example(&self.probe.dims())
    }

    fn per_example(&mut self, grads: &mut Gradients) -> Vec<(ParamId, Tensor<2>)> {
        let Some(delta) = self.probe.grad_remove(grads) else { return Vec::new() };
        let b = delta.dims()[0];
        let xhat = match &self.saved {
            Saved::Normalised(xhat) => xhat.clone(),
            #[cfg(feature = "flex")]
            Saved::Host(saved) => {
                let (gamma, beta) = super::host::norm_rows(saved, delta);
                return std::iter::once((self.gamma, gamma)).chain(self.beta.map(|id| (id, beta))).collect();
            }
        };
        let delta = self.by_channel(delta);
        let xhat = self.by_channel(xhat);
        let mut out = vec![(self.gamma, (delta.clone() * xhat).sum_dim(2).reshape([b, self.channels]))];
        if let Some(beta) = self.beta {
            out.push((beta, delta.sum_dim(2).reshape([b, self.channels])));
        }
        out
    }
}

/// GroupNorm in a recorded forward on flex (dpgd's operation: the fast engine's kernels, with its
/// own backward) against burn's operations of the same layer, in values and input gradients, with
/// γ and β drawn (not 1 and 0), one group and several. Its per-example rows are checked against
/// burn's autodiff in `tests/per_example_vs_autodiff.rs` and `tests/burn_engine.rs`.
#[cfg(test)]
#[cfg(feature = "flex")]
mod host_tests {
    use burn::module::{Module, Param};
    use burn::tensor::{Device, Tensor, TensorData};

    use super::GroupNormConfig;
    use crate::nn::host::testing::{recorded_equals_burns, values};

    #[test]
    fn the_host_group_norm_equals_burns_in_values_and_input_gradients() {
        let device = Device::flex().autodiff();
        for (dims, groups) in [([3, 4, 5, 5], 2), ([2, 6, 3, 4], 1), ([2, 8, 7, 7], 8)] {
            let mut norm = GroupNormConfig::new(groups, dims[1]).init(&device);
            let drawn = |seed| {
                Param::from_tensor(Tensor::<1>::from_data(TensorData::new(values(dims[1], seed), [dims[1]]), &device))
            };
            (norm.gamma, norm.beta) = (Some(drawn(5)), Some(drawn(9)));
            let norm = norm.no_grad();
            recorded_equals_burns(dims, |x| norm.forward(x), &format!("{dims:?}, {groups} groups"));
        }
    }
}
