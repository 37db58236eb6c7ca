//! Per-example-aware drop-ins for burn's layers: write your model as for any burn model, with
//! `use dpgd::nn::{…}` in place of `use burn::nn::{…}` for its trainable layers, and train it
//! privately with [`crate::per_example::BurnEngine`].
//!
//! ```
//! use burn::module::Module;
//! use burn::tensor::{Device, Tensor, activation::relu};
//! use dpgd::nn::{Classifier, Conv2d, Conv2dConfig, GroupNorm, GroupNormConfig, Linear, LinearConfig};
//!
//! #[derive(Module, Debug)]
//! struct Net { conv: Conv2d, norm: GroupNorm, fc: Linear }
//!
//! impl Classifier for Net {
//!     fn forward(&self, x: Tensor<4>) -> Tensor<2> {
//!         let h = relu(self.norm.forward(self.conv.forward(x.clone()))) + x; // a residual add
//!         self.fc.forward(h.flatten(1, 3))
//!     }
//! }
//!
//! let device = Device::default();
//! let net = Net {
//!     conv: Conv2dConfig::new([1, 1], [3, 3]).with_padding(burn::nn::PaddingConfig2d::Same).init(&device),
//!     norm: GroupNormConfig::new(1, 1).init(&device),
//!     fc: LinearConfig::new(16, 2).init(&device),
//! };
//! assert_eq!(net.forward(Tensor::zeros([3, 1, 4, 4], &device)).dims(), [3, 2]);
//! ```
//!
//! **Layers** ([`TRAINABLE`]): [`Linear`], [`Conv2d`] (stride, padding, dilation, groups),
//! [`Embedding`], [`LayerNorm`], [`GroupNorm`] — burn's field names, so records and safetensors files are
//! interchangeable with burn's, and `From<burn::nn::X>` converts (all but LayerNorm, whose
//! epsilon burn keeps private: build it from [`LayerNormConfig`]). Parameter-free operations
//! (activations, pooling, dropout, flatten, residual adds) stay plain burn code; [`MaxPool2d`]
//! and [`AvgPool2d`] are burn's pools with the same values and gradients, faster on flex.
//!
//! **How.** burn has no forward hooks, so the layers record themselves: inside [`record`], each
//! call adds a zero leaf ("probe") to its output and keeps its input. One batched backward of
//! the summed per-example losses gives each probe's gradient δ, the layer's per-example output
//! gradient, and each layer turns (input, δ) into per-example parameter gradients by one
//! batched contraction (the book-keeping of [Bu et al. 2023](https://arxiv.org/abs/2210.00038); its
//! per-layer cost is in each file).
//! On flex (burn's recommended CPU backend, the default device), the convolutions and
//! GroupNorms of a recorded forward, and pooling everywhere, are dpgd's own operations with
//! their own backward, and the convolutions' per-example gradients come from the same kernels
//! as the fast engine's (`crate::kernels`): the kernels are written once for both engines.
//! Outside [`record`], or on a device without autodiff, every layer computes what burn's does
//! (pooling bit for bit). A layer called twice in one forward gets two records whose per-example
//! gradients add up.
//!
//! **What is refused** (by [`crate::per_example::BurnEngine::new`], naming the parameter's path
//! in your struct): a trainable parameter that no recorded dpgd layer used — burn's own layers
//! (including those inside burn's attention and transformer blocks), raw `Param`s used in your
//! forward, LoRA adapters —; burn's `BatchNorm`, frozen or not, which mixes the examples of a
//! batch so that no example has a gradient of its own (use [`GroupNorm`]); a layer called on a
//! tensor whose first axis is not the batch; and a forward whose logits for one example change
//! with the other examples of its batch. Not detectable, so not refused: a parameter used both
//! by a dpgd layer and directly in your forward (its direct use would be trained without a
//! per-example gradient) — use each parameter only through its layer.

mod avg_pool;
mod conv2d;
mod embedding;
#[cfg(feature = "flex")]
mod host;
/// The most buffers a thread keeps for reuse between calls of the CPU kernels (what a
/// convolution keeps for its weight gradients, and scratch: each of one call's size at most),
/// for memory estimates.
#[cfg(feature = "flex")]
pub(crate) const SPARE: usize = host::SPARE;
#[cfg(not(feature = "flex"))]
pub(crate) const SPARE: usize = 0;
#[cfg(all(test, feature = "flex"))]
pub(crate) use host::kept_values;
mod linear;
mod norm;
mod pool;
mod tape;

/// Registers the trainable layers, once each: the type and its config are exported, and the
/// layer's name joins [`TRAINABLE`], from which every list of them is derived.
macro_rules! trainable_layers {
    ($($file:ident::{$layer:ident, $config:ident}),* $(,)?) => {
        $(pub use $file::{$layer, $config};)*
        /// dpgd's trainable layers (each with its per-example rule), in registration order:
        /// what the burn engine's refusals offer in place of burn's.
        pub const TRAINABLE: &[&str] = &[$(stringify!($layer)),*];
    };
}

trainable_layers! {
    linear::{Linear, LinearConfig},
    conv2d::{Conv2d, Conv2dConfig},
    embedding::{Embedding, EmbeddingConfig},
    norm::{LayerNorm, LayerNormConfig},
    norm::{GroupNorm, GroupNormConfig},
}
pub use avg_pool::{AvgPool2d, AvgPool2dConfig};
pub use pool::{MaxPool2d, MaxPool2dConfig};
pub use tape::{Tape, record};

use burn::module::Module;
use burn::tensor::Tensor;

/// A classifier dpgd can train: logits `[batch, classes]` for images `[batch, c, h, w]` (a
/// dataset of feature vectors arrives as `[batch, 1, 1, features]`). The loss is the
/// cross-entropy of each example, summed — never a mean or anything else that couples examples.
pub trait Classifier: Module {
    /// The logits of a batch.
    fn forward(&self, x: Tensor<4>) -> Tensor<2>;
}
