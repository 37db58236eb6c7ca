//! Model architectures as plain data — the input language of the per-example engine
//! ([`crate::per_example`]) and of the burn form ([`crate::model`]), below both.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// One layer of a sequential model. Every variant has an exact per-example gradient rule: in
/// the fast engine ([`crate::per_example::Network`]) for the kinds it registers, else through
/// the burn engine's [`crate::nn`] layers (a model with any such kind trains there).
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
    /// Group normalisation over `groups` groups of channels, within each example (Wu & He
    /// 2018), with a per-channel scale and shift: the private alternative to batch norm.
    /// Trained on the burn engine.
    GroupNorm {
        /// Groups (the channel count must be divisible by it).
        groups: usize,
    },
    /// Average pooling over square windows (no padding). Trained on the burn engine.
    AvgPool2d {
        /// Window size.
        kernel: usize,
        /// Stride.
        stride: usize,
    },
}

impl LayerSpec {
    /// Every kind's name as configs write it (`kind = "…"`), in declaration order (a test checks
    /// it against the enum).
    pub const KINDS: [&'static str; 8] =
        ["conv2d", "linear", "relu", "tanh", "max_pool2d", "flatten", "group_norm", "avg_pool2d"];
}

fn one() -> usize {
    1
}
fn yes() -> bool {
    true
}

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
        Self::opacus_cnn_for([1, 28, 28], 10)
    }

    /// The Opacus CNN's layers for examples of `input` and `classes` classes (the linear
    /// layers take whatever the convolutions leave; too small an image fails to compile).
    #[must_use]
    pub fn opacus_cnn_for(input: [usize; 3], classes: usize) -> Self {
        use LayerSpec::*;
        Self {
            input,
            classes,
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
                Linear { out_features: classes, bias: true },
            ],
        }
    }

    /// A one-hidden-layer MLP on MNIST: flatten, linear 784→`hidden`, ReLU, linear →10.
    #[must_use]
    pub fn mlp(hidden: usize) -> Self {
        Self::mlp_for([1, 28, 28], 10, hidden)
    }

    /// A one-hidden-layer MLP for examples of `input` and `classes` classes.
    #[must_use]
    pub fn mlp_for(input: [usize; 3], classes: usize, hidden: usize) -> Self {
        use LayerSpec::*;
        Self {
            input,
            classes,
            layers: vec![
                Flatten,
                Linear { out_features: hidden, bias: true },
                Relu,
                Linear { out_features: classes, bias: true },
            ],
        }
    }

    /// Multinomial logistic regression on MNIST: flatten, linear 784→10.
    #[must_use]
    pub fn logistic() -> Self {
        Self::logistic_for([1, 28, 28], 10)
    }

    /// Multinomial logistic regression for examples of `input` and `classes` classes.
    #[must_use]
    pub fn logistic_for(input: [usize; 3], classes: usize) -> Self {
        Self {
            input,
            classes,
            layers: vec![LayerSpec::Flatten, LayerSpec::Linear { out_features: classes, bias: true }],
        }
    }
}

/// A built-in architecture, by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Preset {
    /// The Opacus MNIST example CNN (26,010 parameters on 28 × 28 inputs).
    #[serde(alias = "cnn")]
    OpacusCnn,
    /// A one-hidden-layer MLP with 128 hidden units.
    Mlp,
    /// Multinomial logistic regression.
    Logistic,
}

impl Preset {
    /// Every preset.
    pub const ALL: [Preset; 3] = [Preset::OpacusCnn, Preset::Mlp, Preset::Logistic];

    /// The name used in configs and on the command line.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Preset::OpacusCnn => "opacus-cnn",
            Preset::Mlp => "mlp",
            Preset::Logistic => "logistic",
        }
    }

    /// The architecture for 28 × 28 single-channel inputs and 10 classes.
    #[must_use]
    pub fn spec(self) -> ModelSpec {
        self.spec_for([1, 28, 28], 10)
    }

    /// The architecture for examples of `input` (`[channels, height, width]`) and `classes`
    /// classes.
    #[must_use]
    pub fn spec_for(self, input: [usize; 3], classes: usize) -> ModelSpec {
        match self {
            Preset::OpacusCnn => ModelSpec::opacus_cnn_for(input, classes),
            Preset::Mlp => ModelSpec::mlp_for(input, classes, 128),
            Preset::Logistic => ModelSpec::logistic_for(input, classes),
        }
    }
}

impl fmt::Display for Preset {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Preset {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        Preset::ALL
            .into_iter()
            .find(|p| p.name() == s || (s == "cnn" && *p == Preset::OpacusCnn))
            .ok_or_else(|| format!("unknown model preset `{s}`; expected opacus-cnn, mlp or logistic"))
    }
}

#[cfg(test)]
mod tests {
    use super::LayerSpec;

    #[test]
    fn the_list_of_kinds_is_the_enums() {
        // serde names every variant when a kind is unknown: exactly the list, in order.
        let e = serde_json::from_str::<LayerSpec>(r#"{"kind": "nope"}"#).unwrap_err().to_string();
        let listed: Vec<&str> = e.split('`').skip(3).step_by(2).collect();
        assert_eq!(listed, LayerSpec::KINDS, "{e}");
    }
}
