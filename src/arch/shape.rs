//! Activation shapes and the walk that checks a model's layers against them, with
//! overflow-checked sizes.

use super::{LayerSpec, ModelSpec};

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

/// An activation's shape per example (every layer kind's shape rule maps one to the next).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// `[channels, height, width]`.
    Spatial {
        /// Channels.
        c: usize,
        /// Height.
        h: usize,
        /// Width.
        w: usize,
    },
    /// A vector of this many values.
    Flat(usize),
}

impl Shape {
    /// Values per example (saturating; every shape a model's walk creates is checked against
    /// [`MAX_VALUES`] first, so there the product is exact).
    #[must_use]
    pub fn len(self) -> usize {
        match self {
            Shape::Spatial { c, h, w } => c.saturating_mul(h).saturating_mul(w),
            Shape::Flat(n) => n,
        }
    }

    /// Whether it holds no values.
    #[must_use]
    pub fn is_empty(self) -> bool {
        self.len() == 0
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

/// The output shape of each of `spec`'s layers (each kind's [`super::Kind::out_shape`]); `spec`'s
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
