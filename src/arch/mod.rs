//! Model architectures as data — the input language of the per-example engine
//! ([`crate::per_example`]) and of the burn form ([`crate::model`]), below both: a
//! [`ModelSpec`] is an input shape, a class count and a list of [`LayerSpec`]s, each of a layer
//! kind defined in one file of [`kinds`] (its config form, shape rule, parameters and burn
//! module).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

pub mod kinds;
mod shape;

pub use kinds::{Activation, BurnLayer, Kind, LayerSpec};
pub(crate) use shape::checked;
pub use shape::{MAX_VALUES, Shape, ShapeError};

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
    /// A sequential model for examples of `input` (`[channels, height, width]`) and `classes`
    /// classes, with no layers yet: add them in order with [`then`](Self::then).
    ///
    /// ```
    /// use dpgd::arch::ModelSpec;
    /// use dpgd::arch::kinds::{Flatten, Linear, Relu};
    /// let mlp = ModelSpec::sequential([1, 28, 28], 10)
    ///     .then(Flatten)
    ///     .then(Linear { out_features: 128, bias: true })
    ///     .then(Relu)
    ///     .then(Linear { out_features: 10, bias: true });
    /// assert_eq!(mlp, ModelSpec::mlp(128));
    /// ```
    #[must_use]
    pub fn sequential(input: [usize; 3], classes: usize) -> Self {
        Self { input, classes, layers: Vec::new() }
    }

    /// This model with `layer` (any kind of [`kinds`], or a [`LayerSpec`]) appended.
    #[must_use]
    pub fn then(mut self, layer: impl Into<LayerSpec>) -> Self {
        self.layers.push(layer.into());
        self
    }

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
        use kinds::{Conv2d, Flatten, Linear, MaxPool2d, Relu};
        Self {
            input,
            classes,
            layers: vec![
                LayerSpec::Conv2d(Conv2d { out_channels: 16, kernel: 8, stride: 2, padding: 3, bias: true }),
                LayerSpec::Relu(Relu),
                LayerSpec::MaxPool2d(MaxPool2d { kernel: 2, stride: 1 }),
                LayerSpec::Conv2d(Conv2d { out_channels: 32, kernel: 4, stride: 2, padding: 0, bias: true }),
                LayerSpec::Relu(Relu),
                LayerSpec::MaxPool2d(MaxPool2d { kernel: 2, stride: 1 }),
                LayerSpec::Flatten(Flatten),
                LayerSpec::Linear(Linear { out_features: 32, bias: true }),
                LayerSpec::Relu(Relu),
                LayerSpec::Linear(Linear { out_features: classes, bias: true }),
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
        use kinds::{Flatten, Linear, Relu};
        Self {
            input,
            classes,
            layers: vec![
                LayerSpec::Flatten(Flatten),
                LayerSpec::Linear(Linear { out_features: hidden, bias: true }),
                LayerSpec::Relu(Relu),
                LayerSpec::Linear(Linear { out_features: classes, bias: true }),
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
            layers: vec![
                LayerSpec::Flatten(kinds::Flatten),
                LayerSpec::Linear(kinds::Linear { out_features: classes, bias: true }),
            ],
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

/// Checks `spec`'s input shape, runs `layer` on each layer (index, input shape) for its output
/// shape, and checks that the last one gives `classes` logits: the walk both engines' models
/// are checked by.
pub(crate) fn walk(
    spec: &ModelSpec,
    mut layer: impl FnMut(&LayerSpec, Shape, usize) -> Result<Shape, ShapeError>,
) -> Result<Shape, ShapeError> {
    let [c, h, w] = spec.input;
    let whole = |reason: String| ShapeError { layer: None, reason };
    if c == 0 || h == 0 || w == 0 {
        return Err(whole("every input dimension must be > 0".into()));
    }
    checked(&spec.input, 0, "the input shape").map_err(|e| whole(e.reason))?;
    let mut shape = Shape::Spatial { c, h, w };
    let mut outputs = Vec::with_capacity(spec.layers.len());
    for (i, l) in spec.layers.iter().enumerate() {
        shape = layer(l, shape, i)?;
        if let Some(j) = l.joins() {
            let at = |reason: String| ShapeError { layer: Some(i), reason: format!("{}: {reason}", l.name()) };
            let Some(&joined) = outputs.get(j) else {
                let earlier = if i == 0 { "there is none".to_string() } else { format!("0 to {}", i - 1) };
                return Err(at(format!("`from` = {j} must name an earlier layer ({earlier})")));
            };
            if joined != shape {
                return Err(at(format!("layer {j}'s output {joined:?} is not this layer's {shape:?}")));
            }
        }
        outputs.push(shape);
        let dims = match shape {
            Shape::Spatial { c, h, w } => vec![c, h, w],
            Shape::Flat(n) => vec![n],
        };
        checked(&dims, i, &format!("the {} output", l.name()))?;
    }
    match shape {
        Shape::Flat(n) if n == spec.classes && n > 1 => Ok(shape),
        _ => Err(ShapeError {
            layer: spec.layers.len().checked_sub(1),
            reason: format!(
                "the last layer must output {} logits (a flat vector), got {} values",
                spec.classes,
                shape.len()
            ),
        }),
    }
}

/// The output shape of each of `spec`'s layers (each kind's [`Kind::out_shape`]); `spec`'s
/// input is checked, and its end.
///
/// # Errors
/// The first layer that does not fit, as [`crate::per_example::Network::new`].
pub(crate) fn shapes(spec: &ModelSpec) -> Result<Vec<Shape>, ShapeError> {
    let mut out = Vec::with_capacity(spec.layers.len());
    walk(spec, |l, shape, i| {
        let next = l.out_shape(shape, i)?;
        out.push(next);
        Ok(next)
    })?;
    Ok(out)
}
