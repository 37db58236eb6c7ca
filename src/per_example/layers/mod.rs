//! The layer kinds of the per-example engine, one file each: its compiled geometry, forward
//! pass, input gradient, per-example parameter gradient and per-example squared gradient norm
//! (the shape rule is the kind's, in [`crate::arch::kinds`]).
//!
//! **Adding a layer kind to this engine** is one new file here implementing the `Rule` trait
//! (with a `compile` from its spec), named as the kind's variant, and the word `fast` on the
//! kind's one registration line (`with_kinds!` in [`crate::arch::kinds`]); the kind itself (config
//! form, shape rule, burn form) is one file of [`crate::arch::kinds`] and trains on the burn
//! engine until it has a rule here.
//!
//! Activations are channel-major per example (`[c, h, w]`, as in PyTorch and burn), batched
//! example after example.

mod add;
mod avg_pool;
mod conv2d;
mod elementwise;
mod flatten;
mod group_norm;
mod layer_norm;
mod linear;
mod max_pool;
mod windows;

pub use add::Add;
pub use avg_pool::AvgPool2d;
pub use conv2d::Conv2d;
pub use elementwise::{Relu, Tanh};
pub use flatten::Flatten;
pub use group_norm::GroupNorm;
pub use layer_norm::LayerNorm;
pub use linear::Linear;
pub use max_pool::MaxPool2d;
pub use windows::Windows;

use crate::arch::{LayerSpec, MAX_VALUES, Shape, ShapeError};

/// Hands out consecutive ranges of θ to the layers being compiled.
#[derive(Debug, Default)]
pub(crate) struct Alloc {
    next: usize,
}

impl Alloc {
    /// The parameters handed out so far.
    pub(crate) fn used(&self) -> usize {
        self.next
    }
    /// The offset of `n` more parameters.
    pub(crate) fn take(&mut self, n: usize, at: usize) -> Result<usize, ShapeError> {
        let start = self.next;
        self.next = start
            .checked_add(n)
            .filter(|&t| t <= MAX_VALUES)
            .ok_or_else(|| ShapeError { layer: Some(at), reason: "the model has more than 2^40 parameters".into() })?;
        Ok(start)
    }
}

/// Where a layer's parameters sit in the flat θ.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Params {
    /// Offset of the weights.
    pub weight: usize,
    /// Number of weights.
    pub weight_len: usize,
    /// Offset of the bias, if any.
    pub bias: Option<usize>,
    /// Number of bias values.
    pub bias_len: usize,
    /// How they start.
    pub init: Init,
}

/// How a layer's parameters are initialised ([`super::Network::init_params`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Init {
    /// PyTorch's default for weights and biases: U(−1/√fan_in, 1/√fan_in).
    Uniform {
        /// The fan-in.
        fan_in: usize,
    },
    /// A normalisation's scale γ = 1 and shift β = 0 (PyTorch's and burn's), no draw.
    ScaleOneShiftZero,
}

/// Scratch a layer needs per example of a micro-batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Needs {
    /// Its own im2col matrix (kept from forward to backward).
    pub cols: usize,
    /// Its own arg-max indices (kept from forward to backward).
    pub argmax: usize,
    /// Shared staging for channel-last outputs and output gradients.
    pub hwc: usize,
    /// Shared column gradients.
    pub dcols: usize,
}

/// A layer's own scratch in a workspace.
#[derive(Debug, Clone, Default)]
pub(crate) struct LayerScratch {
    pub cols: Vec<f32>,
    pub argmax: Vec<u32>,
    /// The output gradient δᵢ of a layer with an [`OuterBlock`], kept for the clip (`dout` per
    /// example, sized from the block).
    pub delta: Vec<f32>,
}

/// Scratch shared by the layers of a workspace.
#[derive(Debug, Clone, Default)]
pub(crate) struct Shared {
    pub hwc: Vec<f32>,
    pub dcols: Vec<f32>,
}

/// The forward pass of one layer over `b` examples.
pub(crate) struct Forward<'a> {
    pub theta: &'a [f32],
    pub input: &'a [f32],
    pub output: &'a mut [f32],
    pub b: usize,
    pub own: &'a mut LayerScratch,
    pub shared: &'a mut Shared,
}

/// The backward pass of one layer over `b` examples.
pub(crate) struct Backward<'a> {
    pub theta: &'a [f32],
    pub input: &'a [f32],
    pub output: &'a [f32],
    /// ∂ℓᵢ/∂(output), `b × out_len`.
    pub dy: &'a [f32],
    /// ∂ℓᵢ/∂(input), `b × in_len`, when an earlier layer needs it.
    pub dx: Option<&'a mut [f32]>,
    /// Per-example parameter gradients, `b` rows of `p`.
    pub grads: &'a mut [f32],
    /// Given only to a layer whose [`Rule::adds_norms`] is true, when the engine is asked for
    /// the rows' squared norms: the layer adds to `norms[e]` the f64 sum of the squares of
    /// exactly the parameter-gradient values it wrote for example `e`, while they are in cache
    /// (and, with [`factored`](Self::factored), its outer block's norm from the factors).
    pub norms: Option<&'a mut [f64]>,
    /// Set only for a layer with an [`Rule::outer`] block when the clip reads the rows (norms
    /// given): the layer does not write that block, keeps each example's δᵢ in `own.delta` and
    /// adds the block's squared norm from its factors ([`crate::clip::outer_squared_norm`]).
    pub factored: bool,
    pub p: usize,
    pub b: usize,
    pub own: &'a mut LayerScratch,
    pub shared: &'a mut Shared,
}

/// A block of the parameter gradient that is an outer product δᵢ aᵢᵀ of the layer's output
/// gradient and its input (a fully connected layer's weights), which the clip can read from the
/// two factors instead of the written values ([`crate::clip::Outer`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OuterBlock {
    /// Where the row-major `[dout, din]` block starts in θ.
    pub at: usize,
    /// Output values (δ's length).
    pub dout: usize,
    /// Input values (a's length, all of the layer's input).
    pub din: usize,
}

/// One layer kind's exact per-example rules.
pub(crate) trait Rule {
    /// Values per example at the output.
    fn out_len(&self) -> usize;
    /// Its parameters, if it has any.
    fn params(&self) -> Option<Params> {
        None
    }
    /// The scratch it needs per example.
    fn needs(&self) -> Needs {
        Needs::default()
    }
    /// Forward pass.
    fn forward(&self, f: Forward<'_>);
    /// Input gradient (if `dx` is given) and per-example parameter gradients.
    fn backward(&self, g: Backward<'_>);
    /// Whether [`backward`](Self::backward) adds up its rows' squared norms itself (see
    /// [`Backward::norms`]); otherwise the engine computes them from the rows afterwards
    /// ([`squared_norm`](Self::squared_norm)).
    fn adds_norms(&self) -> bool {
        false
    }
    /// Its weight gradient as an outer product, if it is one; such a layer
    /// [`adds_norms`](Self::adds_norms) and keeps δᵢ (`LayerScratch::delta`, which the engine
    /// sizes from the block) when asked to ([`Backward::factored`]).
    fn outer(&self) -> Option<OuterBlock> {
        None
    }
    /// Floating-point operations of its products for one example: forward, per-example
    /// parameter gradient and (when `input_grad`) input gradient; a multiply-add counts two.
    /// Element-wise work (activations, pooling, bias, clipping) is not counted: the figure is
    /// the work a dense-math peak is measured on.
    fn flops(&self, _input_grad: bool) -> u64 {
        0
    }
    /// ‖∂ℓ/∂(its parameters)‖² of one example, from that example's gradient row.
    fn squared_norm(&self, grad_row: &[f32]) -> f64 {
        self.params().map_or(0.0, |p| {
            let w = crate::clip::squared_norm(&grad_row[p.weight..p.weight + p.weight_len]);
            w + p.bias.map_or(0.0, |b| crate::clip::squared_norm(&grad_row[b..b + p.bias_len]))
        })
    }
}

/// The engine's layer kinds: the kinds marked `fast` in the one registration
/// ([`crate::arch::kinds::with_kinds`]), each with the rule of its variant's name here (which
/// implements [`Rule`] and has a `compile(spec, input shape, output shape, layer index,
/// parameter allocator)`; the shapes passed the kind's [`crate::arch::Kind::out_shape`]).
macro_rules! layers {
    // Keeps the `fast` kinds of the registration, then declares them.
    (@keep [$($kept:ident = $named:literal)*]) => { layers!(@declare $($kept($kept) = $named),*); };
    (@keep [$($kept:tt)*] $variant:ident($ty:ty) = $name:literal fast $(, $($rest:tt)*)?) => {
        layers!(@keep [$($kept)* $variant = $name] $($($rest)*)?);
    };
    (@keep [$($kept:tt)*] $variant:ident($ty:ty) = $name:literal $(, $($rest:tt)*)?) => {
        layers!(@keep [$($kept)*] $($($rest)*)?);
    };
    (@declare $($variant:ident($ty:ident) = $name:literal),*) => {
        /// A compiled layer (static dispatch over its kinds).
        #[derive(Debug, Clone, Copy, PartialEq)]
        pub enum Layer {
            $(
                #[allow(missing_docs)]
                $variant($ty),
            )*
        }

        impl Layer {
            /// The engine's layer kinds as configs write them (the [`LayerSpec`] kinds it has a
            /// rule for), in registration order.
            pub const KINDS: &'static [&'static str] = &[$($name),*];

            /// Compiles `spec` for `input` (the layer at index `at`), allocating its parameters.
            pub(crate) fn compile(spec: LayerSpec, input: Shape, output: Shape, at: usize, alloc: &mut Alloc) -> Result<Layer, ShapeError> {
                match spec {
                    $( LayerSpec::$variant(s) => Ok(Layer::$variant($ty::compile(s, input, output, at, alloc)?)), )*
                    #[allow(unreachable_patterns)]
                    _ => Err(ShapeError { layer: Some(at), reason: format!("{} is not a layer kind of the fast engine (it trains on the burn engine)", spec.name()) }),
                }
            }

            /// Whether the fast engine has this layer kind (a model of such kinds only trains on
            /// it; any other kind trains on the burn engine).
            #[must_use]
            pub fn supports(spec: &LayerSpec) -> bool {
                matches!(spec, $( LayerSpec::$variant(_) )|*)
            }

            fn rule(&self) -> &dyn Rule {
                match self { $( Layer::$variant(l) => l, )* }
            }

            /// Values per example at this layer's output.
            #[must_use]
            pub fn out_len(&self) -> usize {
                match self { $( Layer::$variant(l) => l.out_len(), )* }
            }

            /// Where its parameters sit in θ, if it has any.
            #[must_use]
            pub fn params(&self) -> Option<Params> {
                match self { $( Layer::$variant(l) => l.params(), )* }
            }

            pub(crate) fn needs(&self) -> Needs {
                match self { $( Layer::$variant(l) => l.needs(), )* }
            }

            pub(crate) fn forward(&self, f: Forward<'_>) {
                match self { $( Layer::$variant(l) => l.forward(f), )* }
            }

            pub(crate) fn backward(&self, g: Backward<'_>) {
                match self { $( Layer::$variant(l) => l.backward(g), )* }
            }

            pub(crate) fn adds_norms(&self) -> bool {
                self.rule().adds_norms()
            }

            pub(crate) fn outer(&self) -> Option<OuterBlock> {
                self.rule().outer()
            }

            /// Floating-point operations of its products for one example (see `Rule::flops`).
            #[must_use]
            pub fn flops(&self, input_grad: bool) -> u64 {
                self.rule().flops(input_grad)
            }

            /// ‖∂ℓ/∂(its parameters)‖² of one example, from that example's gradient row.
            #[must_use]
            pub fn squared_norm(&self, grad_row: &[f32]) -> f64 {
                self.rule().squared_norm(grad_row)
            }
        }
    };
}

// Entry from the registration's list (its last comma and all).
macro_rules! fast_kinds {
    ($($all:tt)*) => { layers!(@keep [] $($all)*); };
}

crate::arch::kinds::with_kinds!(fast_kinds);

#[cfg(test)]
mod tests {
    use super::Layer;
    use crate::arch::LayerSpec;

    /// The fast engine's kinds, the config's kinds and the configuration page's list all come
    /// from the one registration: each fast kind is a config kind, `supports` says the same as
    /// `KINDS` for every kind, and the page names every kind and says which are the fast
    /// engine's (today all of them).
    #[test]
    fn every_list_of_kinds_is_the_registrations() {
        assert!(Layer::KINDS.iter().all(|k| LayerSpec::KINDS.contains(k)), "{:?}", Layer::KINDS);
        let page = include_str!("../../../docs/configuration.md").replace(['\n', ' '], "");
        let fast: Vec<String> = Layer::KINDS.iter().map(|k| format!("`{k}`")).collect();
        let says = if Layer::KINDS.len() == LayerSpec::KINDS.len() {
            "—everyoneakindofthefastCPUengine—".to_string()
        } else {
            format!("{}(thefastCPUengine'skinds)", fast.join(","))
        };
        assert!(page.contains(&says), "docs/configuration.md should say which kinds are fast: {fast:?}");
        for kind in LayerSpec::KINDS {
            assert!(page.contains(&format!("`{kind}`")), "docs/configuration.md does not name `{kind}`");
        }
        // `supports` is `KINDS`, for a spec of each kind (from its config form with defaults).
        for (kind, fields) in [
            ("conv2d", r#","out_channels":2,"kernel":1"#),
            ("linear", r#","out_features":2"#),
            ("max_pool2d", r#","kernel":2,"stride":2"#),
            ("avg_pool2d", r#","kernel":2,"stride":2"#),
            ("group_norm", r#","groups":1"#),
            ("add", r#","from":0"#),
            ("relu", ""),
            ("tanh", ""),
            ("flatten", ""),
            ("layer_norm", ""),
        ] {
            let spec: LayerSpec = serde_json::from_str(&format!(r#"{{"kind":"{kind}"{fields}}}"#)).unwrap();
            assert_eq!(Layer::supports(&spec), Layer::KINDS.contains(&kind), "{kind}");
        }
    }
}
