//! [`Embedding`]: burn's lookup table with a per-example rule: example i's gradient is
//! `onehot(idxᵢ)ᵀ · δᵢ` (`[n_embedding, d_model]`; a token repeated in one example adds up).

use burn::config::Config;
use burn::module::{Module, Param, ParamId};
use burn::nn::Initializer;
use burn::tensor::module::embedding;
use burn::tensor::{Device, Gradients, Int, Tensor};

use super::tape::{Recorded, attach, per_example};

/// The configuration of an [`Embedding`]: burn's `EmbeddingConfig`, same fields and defaults.
#[derive(Config, Debug)]
pub struct EmbeddingConfig {
    /// Rows of the table (the vocabulary).
    pub n_embedding: usize,
    /// Columns (the embedding width).
    pub d_model: usize,
    /// The initializer (burn's default: N(0, 1)).
    #[config(default = "Initializer::Normal{mean:0.0, std:1.0}")]
    pub initializer: Initializer,
}

impl EmbeddingConfig {
    /// A table initialised as burn's `EmbeddingConfig::init` initialises it.
    #[must_use]
    pub fn init(&self, device: &Device) -> Embedding {
        Embedding { weight: self.initializer.init([self.n_embedding, self.d_model], device) }
    }
}

/// burn's `Embedding` (same fields), whose calls inside [`super::record`] are recorded.
#[derive(Module, Debug)]
pub struct Embedding {
    /// `[n_embedding, d_model]`.
    pub weight: Param<Tensor<2>>,
}

impl From<burn::nn::Embedding> for Embedding {
    fn from(e: burn::nn::Embedding) -> Self {
        Self { weight: e.weight }
    }
}

impl Embedding {
    /// The rows of `input` (`[batch, tokens]` indices): `[batch, tokens, d_model]`.
    pub fn forward(&self, input: Tensor<2, Int>) -> Tensor<3> {
        let out = embedding(self.weight.val(), input.clone());
        attach(out, |probe| EmbeddingCall {
            weight: self.weight.id,
            rows: self.weight.dims()[0],
            input: input.without_autodiff(),
            probe,
        })
    }
}

struct EmbeddingCall {
    weight: ParamId,
    rows: usize,
    input: Tensor<2, Int>,
    probe: Tensor<3>,
}

impl Recorded for EmbeddingCall {
    fn params(&self) -> Vec<ParamId> {
        vec![self.weight]
    }

    fn values_per_example(&self) -> usize {
        // the one-hot matrix (tokens × rows), the probe and δ
        per_example(&self.input.dims()) * self.rows + 2 * per_example(&self.probe.dims())
    }

    fn per_example(&mut self, grads: &mut Gradients) -> Vec<(ParamId, Tensor<2>)> {
        let Some(delta) = self.probe.grad_remove(grads) else { return Vec::new() };
        let [b, _, d] = delta.dims();
        let onehot: Tensor<3> = self.input.clone().one_hot::<3>(self.rows).float(); // [b, tokens, rows]
        vec![(self.weight, onehot.swap_dims(1, 2).matmul(delta).reshape([b, self.rows * d]))]
    }
}
