//! Model architectures as data: a list of layers, each with a per-example gradient rule.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// One layer of a sequential model. Every variant has an exact per-example gradient rule
/// in [`crate::per_example`]; parameter-free variants need none.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case", deny_unknown_fields)]
pub enum LayerSpec {
    /// 2-d convolution (square kernel, stride and zero padding), weights `[out, in, k, k]`.
    Conv2d {
        /// Output channels.
        out_channels: usize,
        /// Kernel size.
        kernel: usize,
        /// Stride.
        #[serde(default = "one")]
        stride: usize,
        /// Zero padding on every side.
        #[serde(default)]
        padding: usize,
        /// Whether the layer has a bias.
        #[serde(default = "yes")]
        bias: bool,
    },
    /// Fully connected layer, weights `[out, in]` (stored `[in, out]` in the burn record).
    Linear {
        /// Output features.
        out_features: usize,
        /// Whether the layer has a bias.
        #[serde(default = "yes")]
        bias: bool,
    },
    /// max(x, 0).
    Relu,
    /// tanh(x).
    Tanh,
    /// Max pooling over square windows.
    MaxPool2d {
        /// Window size.
        kernel: usize,
        /// Stride.
        stride: usize,
    },
    /// Flattens `[c, h, w]` to `[c·h·w]` in channel-major order (as PyTorch and burn do).
    Flatten,
}

fn one() -> usize {
    1
}
fn yes() -> bool {
    true
}

/// Layers that hold trainable parameters but have no exact per-example rule: a model that uses
/// one is rejected before training rather than trained with wrong per-example gradients.
const PARAMETERISED_WITHOUT_RULE: &[(&str, &str)] = &[
    ("batch_norm", "batch statistics mix examples, so per-example gradients are undefined; use group-free layers"),
    ("layer_norm", "its affine parameters have no per-example rule here yet"),
    ("group_norm", "its affine parameters have no per-example rule here yet"),
    ("embedding", "it has no per-example rule here yet"),
    ("lstm", "recurrent layers have no per-example rule here yet"),
    ("gru", "recurrent layers have no per-example rule here yet"),
    ("conv1d", "it has no per-example rule here yet; use conv2d with a height-1 input"),
    ("multi_head_attention", "it has no per-example rule here yet"),
];

/// A sequential model: an input shape `[channels, height, width]`, layers, and classes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSpec {
    /// Input shape `[channels, height, width]`.
    pub input: [usize; 3],
    /// Number of classes (the last layer's output size).
    pub classes: usize,
    /// The layers, in order; the last must output `classes` values (logits).
    pub layers: Vec<LayerSpec>,
}

impl ModelSpec {
    /// The Opacus MNIST example CNN: conv 1→16 k8 s2 p3, ReLU, maxpool 2 s1, conv 16→32 k4 s2,
    /// ReLU, maxpool 2 s1, linear 512→32, ReLU, linear 32→10 (26,010 parameters).
    #[must_use]
    pub fn opacus_cnn() -> Self {
        use LayerSpec::*;
        Self {
            input: [1, 28, 28],
            classes: 10,
            layers: vec![
                Conv2d { out_channels: 16, kernel: 8, stride: 2, padding: 3, bias: true },
                Relu,
                MaxPool2d { kernel: 2, stride: 1 },
                Conv2d { out_channels: 32, kernel: 4, stride: 2, padding: 0, bias: true },
                Relu,
                MaxPool2d { kernel: 2, stride: 1 },
                Flatten,
                Linear { out_features: 32, bias: true },
                Relu,
                Linear { out_features: 10, bias: true },
            ],
        }
    }

    /// A one-hidden-layer MLP: flatten, linear 784→`hidden`, ReLU, linear →10.
    #[must_use]
    pub fn mlp(hidden: usize) -> Self {
        use LayerSpec::*;
        Self {
            input: [1, 28, 28],
            classes: 10,
            layers: vec![
                Flatten,
                Linear { out_features: hidden, bias: true },
                Relu,
                Linear { out_features: 10, bias: true },
            ],
        }
    }

    /// Multinomial logistic regression: flatten, linear 784→10.
    #[must_use]
    pub fn logistic() -> Self {
        Self {
            input: [1, 28, 28],
            classes: 10,
            layers: vec![LayerSpec::Flatten, LayerSpec::Linear { out_features: 10, bias: true }],
        }
    }

    /// A preset by name: `opacus-cnn`, `mlp` (hidden 128) or `logistic`.
    pub fn preset(name: &str) -> Result<Self> {
        match name {
            "opacus-cnn" | "cnn" => Ok(Self::opacus_cnn()),
            "mlp" => Ok(Self::mlp(128)),
            "logistic" => Ok(Self::logistic()),
            other => Err(Error::Config {
                field: "model.preset".into(),
                message: format!(
                    "unknown preset `{other}`; expected opacus-cnn, mlp or logistic, or give model.layers"
                ),
            }),
        }
    }

    /// Rejects layer kinds that have parameters but no per-example rule, naming the layer;
    /// call on raw config before deserialising into [`LayerSpec`].
    pub fn check_layer_kinds(layers: &[toml::Value]) -> Result<()> {
        for (i, l) in layers.iter().enumerate() {
            let kind = l.get("kind").and_then(|k| k.as_str()).unwrap_or("");
            if let Some((_, why)) = PARAMETERISED_WITHOUT_RULE.iter().find(|(k, _)| *k == kind) {
                return Err(Error::Config {
                    field: format!("model.layers[{i}]"),
                    message: format!(
                        "layer `{kind}` has trainable parameters but no per-example gradient rule ({why}); \
                         supported layers: conv2d, linear, relu, tanh, max_pool2d, flatten"
                    ),
                });
            }
        }
        Ok(())
    }
}
