//! A [`ModelSpec`] compiled for the per-example engine: every layer checked against the shape
//! it receives (with overflow-checked sizes) and given its offset into one flat parameter
//! vector θ.

use rand::RngExt;

use super::layers::Layer;
use crate::arch::{LayerSpec, ModelSpec};

/// Why an architecture does not compile: the layer (index into `ModelSpec::layers`, or `None`
/// for the model as a whole) and the reason. The config layer maps it to field names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}: {reason}", layer.map_or("the model".to_string(), |i| format!("layer {i}")))]
pub struct ShapeError {
    /// The offending layer, or `None` for the model's input or output.
    pub layer: Option<usize>,
    /// What is wrong.
    pub reason: String,
}

/// Values one layer may hold per example, and parameters a model may have: larger shapes are
/// refused before anything is allocated (their buffers would not fit in memory anyway).
pub const MAX_VALUES: usize = 1 << 40;

/// The product of `values`, or an error naming `what` if it exceeds [`MAX_VALUES`].
pub(crate) fn checked(values: &[usize], at: usize, what: &str) -> Result<usize, ShapeError> {
    values.iter().try_fold(1usize, |acc, &v| acc.checked_mul(v)).filter(|&n| n <= MAX_VALUES).ok_or_else(|| {
        ShapeError { layer: Some(at), reason: format!("{what} {values:?} is too large (more than 2^40 values)") }
    })
}

/// An activation's shape per example.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Shape {
    Spatial { c: usize, h: usize, w: usize },
    Flat(usize),
}

impl Shape {
    /// Values per example; every shape `Network::new` creates is checked against
    /// [`MAX_VALUES`] first, so the product cannot overflow.
    pub(crate) fn len(self) -> usize {
        match self {
            Shape::Spatial { c, h, w } => c * h * w,
            Shape::Flat(n) => n,
        }
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
    for (i, l) in spec.layers.iter().enumerate() {
        shape = layer(l, shape, i)?;
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

/// The output shape of each of `spec`'s layers, by the fast engine's rules for its kinds and
/// `other` for the rest (the burn engine's); `spec`'s input is checked, and its end.
///
/// # Errors
/// The first layer that does not fit, as [`Network::new`].
pub(crate) fn shapes(
    spec: &ModelSpec,
    other: impl Fn(&LayerSpec, Shape, usize) -> Result<Shape, ShapeError>,
) -> Result<Vec<Shape>, ShapeError> {
    let mut out = Vec::with_capacity(spec.layers.len());
    let mut alloc = Alloc::default();
    walk(spec, |l, shape, i| {
        let next = if Layer::supports(l) { Layer::compile(*l, shape, i, &mut alloc)?.1 } else { other(l, shape, i)? };
        out.push(next);
        Ok(next)
    })?;
    Ok(out)
}

/// Hands out consecutive ranges of θ to the layers being compiled.
#[derive(Debug, Default)]
pub(crate) struct Alloc {
    next: usize,
}

impl Alloc {
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

/// A compiled sequential model.
#[derive(Debug, Clone, PartialEq)]
pub struct Network {
    spec: ModelSpec,
    layers: Vec<Layer>,
    num_params: usize,
}

impl Network {
    /// Compiles `spec`, checking that every layer fits the shape it receives and that every
    /// size is representable (checked arithmetic: a width of 2⁶² is an error, not a wrap).
    ///
    /// # Errors
    /// A [`ShapeError`] naming the layer.
    pub fn new(spec: &ModelSpec) -> Result<Self, ShapeError> {
        let mut layers = Vec::with_capacity(spec.layers.len());
        let mut alloc = Alloc::default();
        walk(spec, |layer, shape, i| {
            let (compiled, out) = Layer::compile(*layer, shape, i, &mut alloc)?;
            layers.push(compiled);
            Ok(out)
        })?;
        if alloc.next == 0 {
            return Err(ShapeError { layer: None, reason: "the model has no trainable parameters".into() });
        }
        Ok(Self { spec: spec.clone(), layers, num_params: alloc.next })
    }

    /// The architecture this network was compiled from.
    #[must_use]
    pub fn spec(&self) -> &ModelSpec {
        &self.spec
    }
    /// The compiled layers.
    #[must_use]
    pub fn layers(&self) -> &[Layer] {
        &self.layers
    }
    /// The number of trainable parameters P (the length of θ and of a per-example gradient).
    #[must_use]
    pub fn num_params(&self) -> usize {
        self.num_params
    }
    /// Values per input example (`c·h·w`).
    #[must_use]
    pub fn input_len(&self) -> usize {
        self.spec.input.iter().product()
    }
    /// Number of classes.
    #[must_use]
    pub fn classes(&self) -> usize {
        self.spec.classes
    }

    /// PyTorch's default initialisation (U(−1/√fan_in, 1/√fan_in) for weights and biases),
    /// from a seeded generator.
    #[must_use]
    pub fn init_params(&self, rng: &mut impl rand::Rng) -> Vec<f32> {
        let mut theta = vec![0.0f32; self.num_params];
        for p in self.layers.iter().filter_map(Layer::params) {
            let bound = 1.0 / (p.fan_in as f32).sqrt();
            let ranges = [Some((p.weight, p.weight_len)), p.bias.map(|b| (b, p.bias_len))];
            for (start, len) in ranges.into_iter().flatten() {
                for t in &mut theta[start..start + len] {
                    *t = rng.random_range(-bound..bound);
                }
            }
        }
        theta
    }

    /// The per-example squared gradient norm of each layer with parameters, from one
    /// example's gradient row (for layer-wise clipping and diagnostics).
    #[must_use]
    pub fn layer_squared_norms(&self, grad_row: &[f32]) -> Vec<f64> {
        self.layers.iter().filter(|l| l.params().is_some()).map(|l| l.squared_norm(grad_row)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::arch::LayerSpec;

    #[test]
    fn opacus_cnn_has_26010_parameters() {
        let net = Network::new(&ModelSpec::opacus_cnn()).unwrap();
        assert_eq!(net.num_params(), 26_010);
        assert_eq!(net.layers()[0].out_len(), 16 * 14 * 14);
        assert_eq!(net.layers()[6].out_len(), 512);
        assert_eq!(Network::new(&ModelSpec::logistic()).unwrap().num_params(), 7850);
    }

    #[test]
    fn shape_errors_name_the_layer() {
        let mut spec = ModelSpec::logistic();
        spec.layers.remove(0);
        let e = Network::new(&spec).unwrap_err();
        assert_eq!(e.layer, Some(0));
        assert!(e.reason.contains("flatten"), "{e}");
        let mut spec = ModelSpec::logistic();
        spec.classes = 7;
        assert!(Network::new(&spec).unwrap_err().reason.contains("7 logits"));
    }

    #[test]
    fn huge_widths_are_errors_not_wraps() {
        let mut spec = ModelSpec::logistic();
        spec.layers[1] = LayerSpec::Linear { out_features: 1 << 62, bias: true };
        spec.classes = 1 << 62;
        let e = Network::new(&spec).unwrap_err();
        assert_eq!(e.layer, Some(1));
        assert!(e.reason.contains("too large"), "{e}");
        let spec = ModelSpec { input: [usize::MAX, 2, 2], classes: 2, layers: vec![LayerSpec::Flatten] };
        assert!(Network::new(&spec).is_err());
    }
}
