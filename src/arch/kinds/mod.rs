//! The layer kinds of a config's model (`model.layers`), one file each: its config form, its
//! shape rule, its parameters' shapes and its burn module (how it is built, run, read and
//! written).
//!
//! **Adding a layer kind** is one file here — a `Copy` struct of the kind's fields (its config
//! form, with serde) implementing [`Kind`] — and its one registration line in `with_kinds!` at
//! the end of this file, from which every list of kinds is derived. The kind then appears in
//! configs as `kind = "<name>"`, and a model using it trains on the burn engine (a kind with
//! parameters computes with a [`crate::nn`] layer, which gives the per-example rule), saves,
//! exports and evaluates. For it to train on the fast CPU engine too, add its rule as one file
//! of [`crate::per_example::layers`] and mark its line `fast`; until then a model with it
//! trains on the burn engine.

mod add;
mod avg_pool2d;
mod conv2d;
mod flatten;
mod group_norm;
mod layer_norm;
mod linear;
mod max_pool2d;
mod relu;
mod tanh;

pub use add::{Add, AddModule};
pub use avg_pool2d::AvgPool2d;
pub use conv2d::Conv2d;
pub use flatten::{Flatten, FlattenModule};
pub use group_norm::GroupNorm;
pub use layer_norm::LayerNorm;
pub use linear::Linear;
pub use max_pool2d::MaxPool2d;
pub use relu::Relu;
pub use tanh::Tanh;

use burn::module::{Module, Param};
use burn::tensor::{Device, Gradients, Tensor, TensorData};
use serde::{Deserialize, Serialize};

use super::shape::{Shape, ShapeError};
use crate::error::{Error, Result};

/// A batch of activations between two layers of a sequential model.
#[derive(Debug, Clone)]
pub enum Activation {
    /// `[batch, channels, height, width]`.
    Spatial(Tensor<4>),
    /// `[batch, features]`.
    Flat(Tensor<2>),
}

impl Activation {
    /// As `[batch, c, h, w]` (a flat activation as `[batch, n, 1, 1]`).
    #[must_use]
    pub fn spatial(self) -> Tensor<4> {
        match self {
            Activation::Spatial(x) => x,
            Activation::Flat(x) => x.unsqueeze_dims(&[2, 3]),
        }
    }

    /// As `[batch, n]` (a spatial activation flattened channel-major, as PyTorch and burn do).
    #[must_use]
    pub fn flat(self) -> Tensor<2> {
        match self {
            Activation::Spatial(x) => x.flatten(1, 3),
            Activation::Flat(x) => x,
        }
    }

    /// `f` applied to the tensor, whichever its rank (for element-wise operations).
    #[must_use]
    pub fn map(self, f4: impl FnOnce(Tensor<4>) -> Tensor<4>, f2: impl FnOnce(Tensor<2>) -> Tensor<2>) -> Self {
        match self {
            Activation::Spatial(x) => Activation::Spatial(f4(x)),
            Activation::Flat(x) => Activation::Flat(f2(x)),
        }
    }
}

/// The element-wise sum of two activations of the same shape (a residual connection; a spatial
/// and a flat activation are added flat).
impl std::ops::Add for Activation {
    type Output = Activation;
    fn add(self, other: Activation) -> Activation {
        match (self, other) {
            (Activation::Spatial(a), Activation::Spatial(b)) => Activation::Spatial(a + b),
            (a, b) => Activation::Flat(a.flat() + b.flat()),
        }
    }
}

/// What to read from a parameter: its value, or its gradient.
#[derive(Clone, Copy)]
#[allow(missing_debug_implementations)] // burn's `Gradients` has no `Debug`
pub enum Read<'g> {
    /// The parameter's value.
    Value,
    /// Its gradient in these gradients (the model on an autodiff device).
    Grad(&'g Gradients),
}

impl Read<'_> {
    /// The parameter's value or gradient, flattened row-major.
    ///
    /// # Errors
    /// [`Error::Parameters`] if the parameter has no gradient (not on an autodiff device) or is
    /// not `f32`.
    pub fn flat<const D: usize>(&self, p: &Param<Tensor<D>>) -> Result<Vec<f32>> {
        let t = match self {
            Read::Value => p.val(),
            Read::Grad(g) => p.val().grad(g).ok_or_else(|| {
                Error::Parameters("a parameter has no gradient (is the model on an autodiff device?)".into())
            })?,
        };
        t.into_data()
            .try_into_vec::<f32>()
            .map_err(|e| Error::Parameters(format!("a value the device cannot give back: {e:?}")))
    }
}

/// A parameter of `dims` holding `values` (row-major) on `device`.
///
/// # Errors
/// [`Error::Parameters`] if `values` does not have `dims`' number of elements.
pub fn param<const D: usize>(values: &[f32], dims: [usize; D], device: &Device) -> Result<Param<Tensor<D>>> {
    if dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d)) != Some(values.len()) {
        return Err(Error::Parameters(format!("{} values do not fill a parameter of shape {dims:?}", values.len())));
    }
    Ok(Param::from_tensor(Tensor::from_data(TensorData::new(values.to_vec(), dims), device)))
}

/// One layer kind: its shape rule, its parameters and its burn module. The parameters'
/// layout — each parameter row-major in the shape [`param_shapes`](Kind::param_shapes) gives,
/// weight before bias — is PyTorch's, the fast engine's θ and the `pytorch` safetensors layout.
pub trait Kind: Copy {
    /// The burn module that computes the layer.
    type Module: Module + core::fmt::Debug;

    /// The output shape for `input`, or why the layer does not fit it.
    ///
    /// # Errors
    /// A reason (the caller adds the layer's index and kind).
    fn out_shape(&self, input: Shape) -> std::result::Result<Shape, String>;

    /// The shapes of its trainable parameters for `input` (none by default), in PyTorch's
    /// layout: weight, then bias.
    fn param_shapes(&self, input: Shape) -> Vec<Vec<usize>> {
        let _ = input;
        Vec::new()
    }

    /// A freshly initialised module for `input` (burn's initialisers, from the device's
    /// generator), `input` having passed [`out_shape`](Kind::out_shape).
    fn init(&self, input: Shape, device: &Device) -> Self::Module;

    /// The layer on a batch.
    fn forward(module: &Self::Module, x: Activation) -> Activation;

    /// The earlier layer (its index in the model's layers) whose output the model adds to this
    /// layer's output — a residual connection — or `None` (every kind but `add`). Both
    /// engines add it after the layer's own forward, and send the output gradient back to
    /// that layer as well; the model's walk checks that the index is earlier and the shapes
    /// equal.
    fn joins(&self) -> Option<usize> {
        None
    }

    /// [`joins`](Kind::joins), read from the built module (the burn form keeps no spec).
    fn module_joins(module: &Self::Module) -> Option<usize> {
        let _ = module;
        None
    }

    /// Its parameters' values or gradients, flattened in [`param_shapes`](Kind::param_shapes)'
    /// layout.
    ///
    /// # Errors
    /// As [`Read::flat`].
    fn read(module: &Self::Module, read: Read<'_>) -> Result<Vec<Vec<f32>>> {
        let _ = (module, read);
        Ok(Vec::new())
    }

    /// Sets its parameters from `values` in [`param_shapes`](Kind::param_shapes)' layout.
    ///
    /// # Errors
    /// [`Error::Parameters`] if `values` do not match its parameters.
    fn write(module: &mut Self::Module, values: &[&[f32]], device: &Device) -> Result<()> {
        let _ = (module, device);
        if values.is_empty() { Ok(()) } else { Err(Error::Parameters("this layer kind has no parameters".into())) }
    }
}

/// The error of [`Kind::write`] given `n` parameters that do not match the layer's.
pub(crate) fn mismatch(n: usize) -> Error {
    Error::Parameters(format!("{n} parameter values do not match the layer's parameters"))
}

/// `Ok` if the product of `dims` is at most [`super::MAX_VALUES`], else a reason naming `what`
/// ([`super::checked`] without a layer index: the kind's caller adds it).
pub(crate) fn fits(dims: &[usize], what: &str) -> std::result::Result<(), String> {
    super::shape::checked(dims, 0, what).map(|_| ()).map_err(|e| e.reason)
}

/// The channels of a spatial input (the features of a flat one).
pub(crate) fn channels(input: Shape) -> usize {
    match input {
        Shape::Spatial { c, .. } => c,
        Shape::Flat(n) => n,
    }
}

/// The window of a pooling layer: the output shape, or why it does not fit.
pub(crate) fn pooled(input: Shape, k: usize, stride: usize) -> std::result::Result<Shape, String> {
    let Shape::Spatial { c, h, w } = input else {
        return Err("needs a spatial input [c, h, w]: put it before flatten".into());
    };
    if k == 0 || stride == 0 || k > h || k > w {
        return Err(format!("kernel {k} / stride {stride} do not fit {h}x{w}"));
    }
    Ok(Shape::Spatial { c, h: (h - k) / stride + 1, w: (w - k) / stride + 1 })
}

/// Declares the config's layer kinds and their burn modules from [`with_kinds!`]'s list.
macro_rules! kinds {
    ($($variant:ident($ty:ty) = $name:literal $($fast:ident)?),* $(,)?) => {
        /// One layer of a sequential model (configs write `kind = "…"` and the kind's fields).
        #[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
        #[serde(tag = "kind")]
        pub enum LayerSpec {
            $(
                #[doc = concat!("`kind = \"", $name, "\"`.")]
                #[serde(rename = $name)]
                $variant($ty),
            )*
        }

        $(
            impl From<$ty> for LayerSpec {
                fn from(kind: $ty) -> Self {
                    LayerSpec::$variant(kind)
                }
            }
        )*

        impl LayerSpec {
            /// Every kind's name as configs write it, in registration order.
            pub const KINDS: &'static [&'static str] = &[$($name),*];

            /// This layer's kind as configs write it.
            #[must_use]
            pub fn name(&self) -> &'static str {
                match self { $( LayerSpec::$variant(_) => $name, )* }
            }

            /// Its output shape for `input`, as the layer at index `at`.
            ///
            /// # Errors
            /// [`ShapeError`] naming the layer and why it does not fit.
            pub fn out_shape(&self, input: Shape, at: usize) -> std::result::Result<Shape, ShapeError> {
                match self { $( LayerSpec::$variant(k) => k.out_shape(input), )* }
                    .map_err(|why| ShapeError { layer: Some(at), reason: format!("{}: {why}", self.name()) })
            }

            /// The earlier layer whose output the model adds to this one's (see [`Kind::joins`]).
            #[must_use]
            pub fn joins(&self) -> Option<usize> {
                match self { $( LayerSpec::$variant(k) => k.joins(), )* }
            }

            /// Its trainable parameters' shapes for `input` (PyTorch's layout, weight first).
            #[must_use]
            pub fn param_shapes(&self, input: Shape) -> Vec<Vec<usize>> {
                match self { $( LayerSpec::$variant(k) => k.param_shapes(input), )* }
            }

            /// Its burn module for `input` (which passed [`out_shape`](Self::out_shape)),
            /// freshly initialised on `device`.
            #[must_use]
            pub fn init(&self, input: Shape, device: &Device) -> BurnLayer {
                match self { $( LayerSpec::$variant(k) => BurnLayer::$variant(k.init(input, device)), )* }
            }
        }

        /// One layer's burn module (the variant names are the record's keys).
        #[derive(Module, Debug)]
        pub enum BurnLayer {
            $(
                #[doc = concat!("A `", $name, "` layer.")]
                $variant(<$ty as Kind>::Module),
            )*
        }

        impl BurnLayer {
            /// The layer on a batch.
            #[must_use]
            pub fn forward(&self, x: Activation) -> Activation {
                match self { $( BurnLayer::$variant(m) => <$ty as Kind>::forward(m, x), )* }
            }

            /// The earlier layer whose output the model adds to this one's (see
            /// [`Kind::module_joins`]).
            #[must_use]
            pub fn joins(&self) -> Option<usize> {
                match self { $( BurnLayer::$variant(m) => <$ty as Kind>::module_joins(m), )* }
            }

            /// Its parameters' values or gradients in PyTorch's layout (see [`Kind::read`]).
            ///
            /// # Errors
            /// As [`Read::flat`].
            pub fn read(&self, read: Read<'_>) -> Result<Vec<Vec<f32>>> {
                match self { $( BurnLayer::$variant(m) => <$ty as Kind>::read(m, read), )* }
            }

            /// Sets its parameters from PyTorch's layout (see [`Kind::write`]).
            ///
            /// # Errors
            /// [`Error::Parameters`] if `values` do not match its parameters.
            pub fn write(&mut self, values: &[&[f32]], device: &Device) -> Result<()> {
                match self { $( BurnLayer::$variant(m) => <$ty as Kind>::write(m, values, device), )* }
            }
        }
    };
}

/// **The layer kinds, registered once**: `Variant(kind type) = "config name"`, followed by
/// `fast` when the fast CPU engine has the kind's rule (a type of that variant's name in
/// [`crate::per_example::layers`]). Every list of kinds is derived from this one: the config
/// enum [`LayerSpec`] and its [`LayerSpec::KINDS`], the burn modules [`BurnLayer`], and the fast
/// engine's `Layer`, its `KINDS` and its `supports` (`with_kinds!(layers)` there). A kind with
/// parameters computes with a [`crate::nn`] layer, whose per-example rule serves the burn
/// engine and user models alike.
macro_rules! with_kinds {
    ($then:ident) => {
        $then! {
            Conv2d(Conv2d) = "conv2d" fast,
            Linear(Linear) = "linear" fast,
            Relu(Relu) = "relu" fast,
            Tanh(Tanh) = "tanh" fast,
            MaxPool2d(MaxPool2d) = "max_pool2d" fast,
            Flatten(Flatten) = "flatten" fast,
            GroupNorm(GroupNorm) = "group_norm" fast,
            AvgPool2d(AvgPool2d) = "avg_pool2d" fast,
            Add(Add) = "add" fast,
            LayerNorm(LayerNorm) = "layer_norm" fast,
        }
    };
}
pub(crate) use with_kinds;

with_kinds!(kinds);

/// serde's default for `stride`.
pub(crate) fn one() -> usize {
    1
}

/// serde's default for `bias`.
pub(crate) fn yes() -> bool {
    true
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

    #[test]
    fn kinds_read_back_as_written() {
        for text in [
            r#"{"kind":"conv2d","out_channels":4,"kernel":3,"stride":1,"padding":1,"bias":true}"#,
            r#"{"kind":"linear","out_features":3,"bias":false}"#,
            r#"{"kind":"relu"}"#,
            r#"{"kind":"tanh"}"#,
            r#"{"kind":"max_pool2d","kernel":2,"stride":1}"#,
            r#"{"kind":"layer_norm","bias":false}"#,
            r#"{"kind":"flatten"}"#,
            r#"{"kind":"group_norm","groups":2}"#,
            r#"{"kind":"avg_pool2d","kernel":2,"stride":2}"#,
        ] {
            let spec: LayerSpec = serde_json::from_str(text).unwrap();
            assert_eq!(serde_json::to_string(&spec).unwrap(), text);
        }
        // Defaults, and unknown fields refused.
        let conv: LayerSpec = serde_json::from_str(r#"{"kind":"conv2d","out_channels":4,"kernel":3}"#).unwrap();
        assert_eq!(
            conv,
            LayerSpec::Conv2d(super::Conv2d { out_channels: 4, kernel: 3, stride: 1, padding: 0, bias: true })
        );
        let norm: LayerSpec = serde_json::from_str(r#"{"kind":"layer_norm"}"#).unwrap();
        assert_eq!(norm, LayerSpec::LayerNorm(super::LayerNorm { bias: true }));
        assert!(serde_json::from_str::<LayerSpec>(r#"{"kind":"linear","out_features":3,"bais":true}"#).is_err());
        assert!(serde_json::from_str::<LayerSpec>(r#"{"kind":"relu","inplace":true}"#).is_err());
    }
}
