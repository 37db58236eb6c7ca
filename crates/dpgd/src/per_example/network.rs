//! A [`ModelSpec`] compiled for the per-example engine: shapes, and each layer's offset into
//! one flat parameter vector θ (conv weights `[out, in, k, k]` then bias; linear weights
//! `[out, in]` then bias).

use rand::RngExt;

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

fn mul(values: &[usize], layer: Option<usize>, what: &str) -> Result<usize, ShapeError> {
    values
        .iter()
        .try_fold(1usize, |acc, &v| acc.checked_mul(v))
        .filter(|&n| n <= MAX_VALUES)
        .ok_or_else(|| ShapeError { layer, reason: format!("{what} {values:?} is too large (more than 2^40 values)") })
}

/// A compiled layer. Spatial activations are channel-major (`[c, h, w]`, as in PyTorch and
/// burn), so [`Op::Flatten`] is a plain copy.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Op {
    /// Convolution via im2col + GEMM.
    Conv {
        /// Input channels, output channels, kernel, stride, padding.
        cin: usize,
        /// Output channels.
        cout: usize,
        /// Kernel size.
        k: usize,
        /// Stride.
        stride: usize,
        /// Zero padding.
        pad: usize,
        /// Input height and width.
        hin: usize,
        /// Input width.
        win: usize,
        /// Output height.
        hout: usize,
        /// Output width.
        wout: usize,
        /// Offset of the weights in θ.
        w: usize,
        /// Offset of the bias in θ, if any.
        b: Option<usize>,
    },
    /// Fully connected layer.
    Linear {
        /// Input features.
        din: usize,
        /// Output features.
        dout: usize,
        /// Offset of the `[dout, din]` weights in θ.
        w: usize,
        /// Offset of the bias in θ, if any.
        b: Option<usize>,
    },
    /// max(x, 0) over `len` values.
    Relu {
        /// Activation length.
        len: usize,
    },
    /// tanh over `len` values.
    Tanh {
        /// Activation length.
        len: usize,
    },
    /// Max pooling.
    MaxPool {
        /// Channels.
        c: usize,
        /// Window.
        k: usize,
        /// Stride.
        stride: usize,
        /// Input height.
        hin: usize,
        /// Input width.
        win: usize,
        /// Output height.
        hout: usize,
        /// Output width.
        wout: usize,
    },
    /// `[c, h, w]` → `[c·h·w]`.
    Flatten {
        /// Channels.
        c: usize,
        /// Height.
        h: usize,
        /// Width.
        w: usize,
    },
}

impl Op {
    /// Values per example at this layer's output.
    #[must_use]
    pub fn out_len(&self) -> usize {
        match *self {
            Op::Conv { cout, hout, wout, .. } => cout * hout * wout,
            Op::Linear { dout, .. } => dout,
            Op::Relu { len } | Op::Tanh { len } => len,
            Op::MaxPool { c, hout, wout, .. } => c * hout * wout,
            Op::Flatten { c, h, w } => c * h * w,
        }
    }
}

#[derive(Clone, Copy)]
enum Shape {
    Spatial { c: usize, h: usize, w: usize },
    Flat(usize),
}

impl Shape {
    /// Values per example; `Network::new` checks every shape it creates against
    /// [`MAX_VALUES`] first, so the product cannot overflow.
    fn len(self) -> usize {
        match self {
            Shape::Spatial { c, h, w } => c * h * w,
            Shape::Flat(n) => n,
        }
    }
}

/// A compiled sequential model.
#[derive(Debug, Clone, PartialEq)]
pub struct Network {
    spec: ModelSpec,
    ops: Vec<Op>,
    num_params: usize,
}

impl Network {
    /// Compiles `spec`, checking that every layer fits the shape it receives and that every
    /// size is representable (checked arithmetic: a width of 2⁶² is an error, not a wrap).
    ///
    /// # Errors
    /// A [`ShapeError`] naming the layer.
    pub fn new(spec: &ModelSpec) -> Result<Self, ShapeError> {
        let [c, h, w] = spec.input;
        if c == 0 || h == 0 || w == 0 {
            return Err(ShapeError { layer: None, reason: "every input dimension must be > 0".into() });
        }
        mul(&spec.input, None, "the input shape")?;
        let mut shape = Shape::Spatial { c, h, w };
        let mut ops = Vec::with_capacity(spec.layers.len());
        let mut p = 0usize;
        for (i, layer) in spec.layers.iter().enumerate() {
            let (op, out) = compile(i, *layer, shape, &mut p)?;
            shape = out;
            ops.push(op);
        }
        match shape {
            Shape::Flat(n) if n == spec.classes && n > 1 => {}
            _ => {
                return Err(ShapeError {
                    layer: spec.layers.len().checked_sub(1),
                    reason: format!(
                        "the last layer must output {} logits (a flat vector), got {} values",
                        spec.classes,
                        shape.len()
                    ),
                });
            }
        }
        if p == 0 {
            return Err(ShapeError { layer: None, reason: "the model has no trainable parameters".into() });
        }
        Ok(Self { spec: spec.clone(), ops, num_params: p })
    }

    /// The architecture this network was compiled from.
    #[must_use]
    pub fn spec(&self) -> &ModelSpec {
        &self.spec
    }
    /// The compiled layers.
    #[must_use]
    pub fn ops(&self) -> &[Op] {
        &self.ops
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
        for op in &self.ops {
            let (fan_in, ranges) = match *op {
                Op::Conv { cin, cout, k, w, b, .. } => {
                    (cin * k * k, [Some((w, cout * cin * k * k)), b.map(|b| (b, cout))])
                }
                Op::Linear { din, dout, w, b } => (din, [Some((w, dout * din)), b.map(|b| (b, dout))]),
                _ => continue,
            };
            let bound = 1.0 / (fan_in as f32).sqrt();
            for (start, len) in ranges.into_iter().flatten() {
                for t in &mut theta[start..start + len] {
                    *t = rng.random_range(-bound..bound);
                }
            }
        }
        theta
    }
}

/// Compiles layer `i` for input `shape`, advancing the parameter offset `p`.
fn compile(i: usize, layer: LayerSpec, shape: Shape, p: &mut usize) -> Result<(Op, Shape), ShapeError> {
    let at = Some(i);
    let err = |reason: String| ShapeError { layer: at, reason };
    let mut params = |n: usize| -> Result<usize, ShapeError> {
        let start = *p;
        *p = p
            .checked_add(n)
            .filter(|&t| t <= MAX_VALUES)
            .ok_or_else(|| err("the model has more than 2^40 parameters".into()))?;
        Ok(start)
    };
    Ok(match (layer, shape) {
        (LayerSpec::Conv2d { out_channels, kernel, stride, padding, bias }, Shape::Spatial { c, h, w }) => {
            if out_channels == 0 || kernel == 0 || stride == 0 {
                return Err(err("conv2d needs out_channels, kernel and stride > 0".into()));
            }
            let (hp, wp) = (h.checked_add(padding.saturating_mul(2)), w.checked_add(padding.saturating_mul(2)));
            let (Some(hp), Some(wp)) = (hp, wp) else { return Err(err(format!("padding {padding} is too large"))) };
            if hp < kernel || wp < kernel {
                return Err(err(format!("kernel {kernel} is larger than the padded {h}x{w} input")));
            }
            let (hout, wout) = ((hp - kernel) / stride + 1, (wp - kernel) / stride + 1);
            mul(&[out_channels, hout, wout], at, "the conv2d output")?;
            mul(&[hout, wout, c, kernel, kernel], at, "the conv2d im2col matrix")?;
            let wo = params(mul(&[out_channels, c, kernel, kernel], at, "the conv2d weight")?)?;
            let b = if bias { Some(params(out_channels)?) } else { None };
            let op = Op::Conv {
                cin: c,
                cout: out_channels,
                k: kernel,
                stride,
                pad: padding,
                hin: h,
                win: w,
                hout,
                wout,
                w: wo,
                b,
            };
            (op, Shape::Spatial { c: out_channels, h: hout, w: wout })
        }
        (LayerSpec::Conv2d { .. }, Shape::Flat(_)) => {
            return Err(err("conv2d needs a spatial input, but it follows a flatten/linear".into()));
        }
        (LayerSpec::Linear { out_features, bias }, Shape::Flat(din)) => {
            if out_features == 0 {
                return Err(err("linear needs out_features > 0".into()));
            }
            let wo = params(mul(&[out_features, din], at, "the linear weight")?)?;
            let b = if bias { Some(params(out_features)?) } else { None };
            (Op::Linear { din, dout: out_features, w: wo, b }, Shape::Flat(out_features))
        }
        (LayerSpec::Linear { .. }, Shape::Spatial { .. }) => {
            return Err(err("linear needs a flat input: insert { kind = \"flatten\" } before it".into()));
        }
        (LayerSpec::Relu, s) => (Op::Relu { len: s.len() }, s),
        (LayerSpec::Tanh, s) => (Op::Tanh { len: s.len() }, s),
        (LayerSpec::MaxPool2d { kernel, stride }, Shape::Spatial { c, h, w }) => {
            if kernel == 0 || stride == 0 || kernel > h || kernel > w {
                return Err(err(format!("max_pool2d kernel {kernel} / stride {stride} do not fit {h}x{w}")));
            }
            let (hout, wout) = ((h - kernel) / stride + 1, (w - kernel) / stride + 1);
            (Op::MaxPool { c, k: kernel, stride, hin: h, win: w, hout, wout }, Shape::Spatial { c, h: hout, w: wout })
        }
        (LayerSpec::MaxPool2d { .. }, Shape::Flat(_)) => return Err(err("max_pool2d needs a spatial input".into())),
        (LayerSpec::Flatten, Shape::Spatial { c, h, w }) => (Op::Flatten { c, h, w }, Shape::Flat(c * h * w)),
        (LayerSpec::Flatten, Shape::Flat(n)) => (Op::Flatten { c: n, h: 1, w: 1 }, Shape::Flat(n)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opacus_cnn_has_26010_parameters() {
        let net = Network::new(&ModelSpec::opacus_cnn()).unwrap();
        assert_eq!(net.num_params(), 26_010);
        assert_eq!(net.ops()[0].out_len(), 16 * 14 * 14);
        assert_eq!(net.ops()[6].out_len(), 512);
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
