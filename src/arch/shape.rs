//! Activation shapes and the walk that checks a model's layers against them, with
//! overflow-checked sizes.

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
