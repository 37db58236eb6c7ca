//! [`Linear`]: burn's fully connected layer with a per-example rule.
//!
//! For input rows aᵢ,ₜ (`t` over any middle axes) and output gradients δᵢ,ₜ, example i's
//! gradients are `g_W,i = Σₜ aᵢ,ₜ δᵢ,ₜᵀ` (`[d_in, d_out]`, burn's weight layout) and
//! `g_b,i = Σₜ δᵢ,ₜ`: one batched matrix product over the micro-batch, or for one position (a
//! plain `[batch, d_in]` input) the outer product aᵢδᵢᵀ as one broadcast multiplication.

use burn::config::Config;
use burn::module::{Module, Param, ParamId};
use burn::nn::Initializer;
use burn::tensor::module::linear;
use burn::tensor::{Device, Gradients, Tensor};

use super::tape::{Recorded, attach, per_example};

/// The configuration of a [`Linear`] layer: burn's `LinearConfig` (row layout), same fields
/// and defaults.
#[derive(Config, Debug)]
pub struct LinearConfig {
    /// Input features.
    pub d_input: usize,
    /// Output features.
    pub d_output: usize,
    /// Whether the layer has a bias.
    #[config(default = true)]
    pub bias: bool,
    /// The initializer (burn's default: Kaiming uniform with gain 1/√3).
    #[config(default = "Initializer::KaimingUniform{gain:0.5773502691896258, fan_out_only:false}")]
    pub initializer: Initializer,
}

impl LinearConfig {
    /// A layer initialised exactly as burn's `LinearConfig::init` initialises it.
    #[must_use]
    pub fn init(&self, device: &Device) -> Linear {
        burn::nn::LinearConfig::new(self.d_input, self.d_output)
            .with_bias(self.bias)
            .with_initializer(self.initializer.clone())
            .init(device)
            .into()
    }
}

/// burn's `Linear` (same fields, so records and safetensors files are interchangeable), whose
/// calls inside [`super::record`] are recorded for per-example gradients.
#[derive(Module, Debug)]
pub struct Linear {
    /// `[d_input, d_output]`.
    pub weight: Param<Tensor<2>>,
    /// `[d_output]`.
    pub bias: Option<Param<Tensor<1>>>,
}

impl From<burn::nn::Linear> for Linear {
    fn from(l: burn::nn::Linear) -> Self {
        Self { weight: l.weight, bias: l.bias }
    }
}

impl Linear {
    /// `input · W + b` over the last axis, as burn's `Linear::forward`.
    pub fn forward<const D: usize>(&self, input: Tensor<D>) -> Tensor<D> {
        let out = linear(input.clone(), self.weight.val(), self.bias.as_ref().map(Param::val));
        if D < 2 {
            // An unbatched vector: no per-example rule (the engine refuses the uncovered weight).
            return out;
        }
        attach(out, |probe| LinearCall {
            weight: self.weight.id,
            bias: self.bias.as_ref().map(|b| b.id),
            input: input.without_autodiff(),
            probe,
        })
    }
}

struct LinearCall<const D: usize> {
    weight: ParamId,
    bias: Option<ParamId>,
    input: Tensor<D>,
    probe: Tensor<D>,
}

impl<const D: usize> Recorded for LinearCall<D> {
    fn params(&self) -> Vec<ParamId> {
        std::iter::once(self.weight).chain(self.bias).collect()
    }

    fn values_per_example(&self) -> usize {
        per_example(&self.input.dims()) + 2 * per_example(&self.probe.dims())
    }

    fn per_example(&mut self, grads: &mut Gradients) -> Vec<(ParamId, Tensor<2>)> {
        let Some(delta) = self.probe.grad_remove(grads) else { return Vec::new() };
        let dims = self.input.dims();
        let (b, d_in, d_out) = (dims[0], dims[D - 1], delta.dims()[D - 1]);
        let t = dims[1..D - 1].iter().product::<usize>();
        let a = self.input.clone().reshape([b, t, d_in]);
        let delta = delta.reshape([b, t, d_out]);
        #[cfg(feature = "flex")]
        let host = (t == 1)
            .then(|| super::host::outer_rows(a.clone().reshape([b, d_in]), delta.clone().reshape([b, d_out])))
            .flatten();
        #[cfg(not(feature = "flex"))]
        let host: Option<Tensor<2>> = None;
        let weight = if let Some(rows) = host {
            // On flex, the outer products on the host (one pass, no broadcast iteration).
            rows.reshape([b, d_in, d_out])
        } else if t == 1 {
            // One position: the outer product aᵢδᵢᵀ, one element-wise product (each entry one
            // multiplication, as the product's single term is), where a product of inner
            // dimension 1 would run a matrix-product kernel for it.
            a.reshape([b, d_in, 1]) * delta.clone().reshape([b, 1, d_out])
        } else {
            a.swap_dims(1, 2).matmul(delta.clone())
        };
        let mut out = vec![(self.weight, weight.reshape([b, d_in * d_out]))];
        if let Some(bias) = self.bias {
            out.push((bias, delta.sum_dim(1).reshape([b, d_out])));
        }
        out
    }
}
