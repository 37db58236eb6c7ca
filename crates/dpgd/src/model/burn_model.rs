//! The burn form of a model: parameters as burn modules (`dpgd::nn`'s `Conv2d` and `Linear`,
//! `dpgd::nn`'s max pool, burn's average pool and activations), for records (burnpack files), evaluation on any burn device,
//! autodiff reference gradients, and the burn engine (it is a [`Classifier`]: the test that
//! both engines agree trains it there). The config's runs train on the flat θ of
//! [`crate::per_example::Network`].

use std::path::Path;

use burn::module::{Module, Param};
use burn::nn::pool::{AvgPool2d, AvgPool2dConfig};
use burn::nn::{PaddingConfig2d, Relu, Tanh};
use burn::tensor::{Device, Int, Tensor, TensorData};

use crate::arch::{LayerSpec, ModelSpec};
use crate::error::{Error, Result};
use crate::nn::{
    Classifier, Conv2d, Conv2dConfig, GroupNorm, GroupNormConfig, Linear, LinearConfig, MaxPool2d, MaxPool2dConfig,
};
use crate::per_example::layers::{Conv2d as ConvRule, Linear as LinearRule};
use crate::per_example::{BurnEngine, Layer, Network, PerExample, Shape, ShapeError, shapes};

/// A sequential burn model built from a [`Network`] and its flat parameters θ.
#[derive(Module, Debug)]
pub struct BurnModel {
    layers: Vec<BurnLayer>,
}

/// One burn layer.
#[derive(Module, Debug)]
pub enum BurnLayer {
    /// Convolution.
    Conv2d(Conv2d),
    /// Fully connected.
    Linear(Linear),
    /// ReLU.
    Relu(Relu),
    /// Tanh.
    Tanh(Tanh),
    /// Max pooling.
    MaxPool2d(MaxPool2d),
    /// Flatten to `[batch, features]`.
    Flatten(Flatten),
    /// Group normalisation.
    GroupNorm(GroupNorm),
    /// Average pooling.
    AvgPool2d(AvgPool2d),
}

/// Flattens `[batch, c, h, w]` to `[batch, c·h·w]`.
#[derive(Module, Debug, Default)]
pub struct Flatten;

enum Activation {
    Spatial(Tensor<4>),
    Flat(Tensor<2>),
}

impl BurnModel {
    /// Builds the burn modules of `net` on `device` holding the parameters `theta`.
    #[must_use]
    pub fn from_params(net: &Network, theta: &[f32], device: &Device) -> Self {
        // Internal: θ always comes from `net` (its init, a training state checked against it, or
        // a record loaded into a model of its shape).
        assert_eq!(theta.len(), net.num_params());
        let tensor1 =
            |off: usize, n: usize| Tensor::<1>::from_data(TensorData::new(theta[off..off + n].to_vec(), [n]), device);
        let layers = net
            .layers()
            .iter()
            .map(|layer| match *layer {
                Layer::Conv2d(ConvRule { geometry: g, cout, w, b }) => {
                    let (cin, k, pad) = (g.cin, g.k, g.pad);
                    let mut conv = Conv2dConfig::new([cin, cout], [k, k])
                        .with_stride([g.stride, g.stride])
                        .with_padding(PaddingConfig2d::Explicit(pad, pad, pad, pad))
                        .with_bias(b.is_some())
                        .init(device);
                    let wt = TensorData::new(theta[w..w + cout * cin * k * k].to_vec(), [cout, cin, k, k]);
                    conv.weight = Param::from_tensor(Tensor::from_data(wt, device));
                    conv.bias = b.map(|b| Param::from_tensor(tensor1(b, cout)));
                    BurnLayer::Conv2d(conv)
                }
                Layer::Linear(LinearRule { din, dout, w, b }) => {
                    let mut lin = LinearConfig::new(din, dout).with_bias(b.is_some()).init(device);
                    // burn stores [in, out]; θ holds [out, in].
                    let mut wt = vec![0.0f32; din * dout];
                    for o in 0..dout {
                        for i in 0..din {
                            wt[i * dout + o] = theta[w + o * din + i];
                        }
                    }
                    lin.weight = Param::from_tensor(Tensor::from_data(TensorData::new(wt, [din, dout]), device));
                    lin.bias = b.map(|b| Param::from_tensor(tensor1(b, dout)));
                    BurnLayer::Linear(lin)
                }
                Layer::Relu(_) => BurnLayer::Relu(Relu),
                Layer::Tanh(_) => BurnLayer::Tanh(Tanh),
                Layer::MaxPool2d(p) => {
                    BurnLayer::MaxPool2d(MaxPool2dConfig::new([p.k, p.k]).with_strides([p.stride, p.stride]).init())
                }
                Layer::Flatten(_) => BurnLayer::Flatten(Flatten),
            })
            .collect();
        Self { layers }
    }

    /// A freshly initialised model of `spec` on `device` (burn's initialisers, drawn from the
    /// device's generator: seed it with `device.seed(..)` for a reproducible start), for the
    /// layer kinds the fast engine lacks; the spec's shapes are checked first.
    ///
    /// # Errors
    /// [`ShapeError`] naming the first layer that does not fit.
    pub fn from_spec(spec: &ModelSpec, device: &Device) -> std::result::Result<Self, ShapeError> {
        let outputs = spec_shapes(spec)?;
        let inputs = std::iter::once(Shape::Spatial { c: spec.input[0], h: spec.input[1], w: spec.input[2] })
            .chain(outputs.iter().copied());
        let mut layers = Vec::with_capacity(spec.layers.len());
        for (at, (layer, input)) in spec.layers.iter().zip(inputs).enumerate() {
            // Channels of a spatial input (spec_shapes refused the kinds that need one otherwise).
            let c = match input {
                Shape::Spatial { c, .. } => c,
                Shape::Flat(n) => n,
            };
            layers.push(match *layer {
                LayerSpec::Conv2d { out_channels, kernel, stride, padding, bias } => BurnLayer::Conv2d(
                    Conv2dConfig::new([c, out_channels], [kernel, kernel])
                        .with_stride([stride, stride])
                        .with_padding(PaddingConfig2d::Explicit(padding, padding, padding, padding))
                        .with_bias(bias)
                        .init(device),
                ),
                LayerSpec::Linear { out_features, bias } => {
                    BurnLayer::Linear(LinearConfig::new(input.len(), out_features).with_bias(bias).init(device))
                }
                LayerSpec::Relu => BurnLayer::Relu(Relu),
                LayerSpec::Tanh => BurnLayer::Tanh(Tanh),
                LayerSpec::MaxPool2d { kernel, stride } => {
                    BurnLayer::MaxPool2d(MaxPool2dConfig::new([kernel, kernel]).with_strides([stride, stride]).init())
                }
                LayerSpec::AvgPool2d { kernel, stride } => {
                    BurnLayer::AvgPool2d(AvgPool2dConfig::new([kernel, kernel]).with_strides([stride, stride]).init())
                }
                LayerSpec::GroupNorm { groups } if groups > 0 && c % groups == 0 => {
                    BurnLayer::GroupNorm(GroupNormConfig::new(groups, c).init(device))
                }
                LayerSpec::GroupNorm { .. } => {
                    return Err(ShapeError { layer: Some(at), reason: "group_norm: channels and groups".into() });
                }
                LayerSpec::Flatten => BurnLayer::Flatten(Flatten),
            });
        }
        Ok(Self { layers })
    }

    /// The flat parameters θ of this model, in `net`'s layout.
    pub fn to_params(&self, net: &Network) -> Result<Vec<f32>> {
        self.flatten_params(net, Read::Value)
    }

    /// Exact per-example gradients through burn's autodiff, one backward pass per example:
    /// the slow, generic reference the fast engine is tested against. The model must live
    /// on an autodiff device. Returns `n × P` values in `net`'s parameter layout.
    pub fn per_example_gradients_autodiff(&self, net: &Network, x: &[f32], labels: &[u8]) -> Result<Vec<f32>> {
        let [c, h, w] = net.spec().input;
        let device =
            self.devices().into_iter().next().ok_or_else(|| Error::Record("model has no parameters".into()))?;
        let mut out = Vec::with_capacity(labels.len() * net.num_params());
        for (i, &y) in labels.iter().enumerate() {
            let xi = Tensor::<4>::from_data(
                TensorData::new(x[i * c * h * w..(i + 1) * c * h * w].to_vec(), [1, c, h, w]),
                &device,
            );
            let yi = Tensor::<1, Int>::from_data(TensorData::new(vec![i64::from(y)], [1]), &device);
            let grads = self.loss(xi, yi).backward();
            out.extend(self.flatten_params(net, Read::Grad(&grads))?);
        }
        Ok(out)
    }

    /// Reads every parameter (through `read`, e.g. its value or its gradient) into θ's layout.
    fn flatten_params(&self, net: &Network, read: Read<'_>) -> Result<Vec<f32>> {
        let mut theta = vec![0.0f32; net.num_params()];
        for (compiled, layer) in net.layers().iter().zip(&self.layers) {
            match (*compiled, layer) {
                (Layer::Conv2d(ConvRule { cout, w, b, .. }), BurnLayer::Conv2d(conv)) => {
                    let wt = read.flat(&conv.weight)?;
                    theta[w..w + wt.len()].copy_from_slice(&wt);
                    if let (Some(b), Some(bias)) = (b, &conv.bias) {
                        theta[b..b + cout].copy_from_slice(&read.flat(bias)?);
                    }
                }
                (Layer::Linear(LinearRule { din, dout, w, b }), BurnLayer::Linear(lin)) => {
                    let wt = read.flat(&lin.weight)?;
                    for o in 0..dout {
                        for i in 0..din {
                            theta[w + o * din + i] = wt[i * dout + o];
                        }
                    }
                    if let (Some(b), Some(bias)) = (b, &lin.bias) {
                        theta[b..b + dout].copy_from_slice(&read.flat(bias)?);
                    }
                }
                (Layer::Conv2d(_) | Layer::Linear(_), _) => {
                    return Err(Error::Record("the record's layers do not match the model architecture".into()));
                }
                _ => {}
            }
        }
        Ok(theta)
    }

    /// Logits `[batch, classes]` for inputs `[batch, c, h, w]`.
    #[must_use]
    pub fn forward(&self, x: Tensor<4>) -> Tensor<2> {
        let mut act = Activation::Spatial(x);
        for layer in &self.layers {
            act = match (layer, act) {
                (BurnLayer::Conv2d(c), Activation::Spatial(x)) => Activation::Spatial(c.forward(x)),
                (BurnLayer::MaxPool2d(p), Activation::Spatial(x)) => Activation::Spatial(p.forward(x)),
                (BurnLayer::Relu(r), Activation::Spatial(x)) => Activation::Spatial(r.forward(x)),
                (BurnLayer::Relu(r), Activation::Flat(x)) => Activation::Flat(r.forward(x)),
                (BurnLayer::Tanh(t), Activation::Spatial(x)) => Activation::Spatial(t.forward(x)),
                (BurnLayer::Tanh(t), Activation::Flat(x)) => Activation::Flat(t.forward(x)),
                (BurnLayer::Flatten(_), Activation::Spatial(x)) => Activation::Flat(x.flatten(1, 3)),
                (BurnLayer::Flatten(_), a @ Activation::Flat(_)) => a,
                (BurnLayer::Linear(l), Activation::Flat(x)) => Activation::Flat(l.forward(x)),
                (BurnLayer::GroupNorm(n), Activation::Spatial(x)) => Activation::Spatial(n.forward(x)),
                (BurnLayer::AvgPool2d(p), Activation::Spatial(x)) => Activation::Spatial(p.forward(x)),
                _ => unreachable!("Network::new or spec_shapes validated the layer shapes"),
            };
        }
        match act {
            Activation::Flat(x) => x,
            Activation::Spatial(_) => unreachable!("Network::new requires flat logits"),
        }
    }

    /// Summed cross-entropy of `labels` under this model's logits for `x`.
    #[must_use]
    pub fn loss(&self, x: Tensor<4>, labels: Tensor<1, Int>) -> Tensor<1> {
        let logp = burn::tensor::activation::log_softmax(self.forward(x), 1);
        let n = labels.dims()[0];
        -logp.gather(1, labels.reshape([n, 1])).sum()
    }

    /// Writes the model as a burnpack record to `path`, atomically (a temporary file renamed
    /// over `path`, so a crash never leaves a half-written model).
    ///
    /// # Errors
    /// If the record cannot be written.
    pub fn save(self, path: &Path) -> Result<()> {
        save_module(self, path)
    }

    /// Reads a burnpack record written by [`save`](Self::save) into a model of `net`'s shape.
    pub fn load(net: &Network, path: &Path, device: &Device) -> Result<Self> {
        let record =
            burn::store::ModuleRecord::load(path).map_err(|e| Error::Record(format!("{}: {e}", path.display())))?;
        let zeros = vec![0.0; net.num_params()];
        Self::from_params(net, &zeros, device)
            .try_load_record(record)
            .map_err(|e| Error::Record(format!("{}: {e}", path.display())))
    }
}

impl Classifier for BurnModel {
    fn forward(&self, x: Tensor<4>) -> Tensor<2> {
        BurnModel::forward(self, x)
    }
}

/// The output shape of each layer of `spec`, with the rules of the kinds only the burn engine
/// trains (group norm, average pooling) beside the fast engine's.
///
/// # Errors
/// [`ShapeError`] naming the first layer that does not fit.
pub(crate) fn spec_shapes(spec: &ModelSpec) -> std::result::Result<Vec<Shape>, ShapeError> {
    shapes(spec, |layer, input, at| {
        let err = |reason: String| ShapeError { layer: Some(at), reason };
        let Shape::Spatial { c, h, w } = input else {
            return Err(err(format!("{layer:?} needs a spatial input [c, h, w]: put it before flatten")));
        };
        match *layer {
            LayerSpec::GroupNorm { groups } if groups > 0 && c % groups == 0 => Ok(input),
            LayerSpec::GroupNorm { groups } => {
                Err(err(format!("group_norm: {c} channels do not split into {groups} groups")))
            }
            LayerSpec::AvgPool2d { kernel: k, stride } if k > 0 && stride > 0 && k <= h && k <= w => {
                Ok(Shape::Spatial { c, h: (h - k) / stride + 1, w: (w - k) / stride + 1 })
            }
            LayerSpec::AvgPool2d { kernel, stride } => {
                Err(err(format!("avg_pool2d kernel {kernel} / stride {stride} do not fit {h}x{w}")))
            }
            other => Err(err(format!("{other:?} has no shape rule"))),
        }
    })
}

/// The number of trainable parameters [`BurnModel::from_spec`] would create for `spec`, checked
/// before anything is allocated (`None` past [`crate::per_example::MAX_VALUES`]).
///
/// # Errors
/// [`ShapeError`] naming the first layer that does not fit.
pub(crate) fn spec_params(spec: &ModelSpec) -> std::result::Result<Option<usize>, ShapeError> {
    let outputs = spec_shapes(spec)?;
    let inputs = std::iter::once(Shape::Spatial { c: spec.input[0], h: spec.input[1], w: spec.input[2] })
        .chain(outputs.iter().copied());
    let mut total = Some(0usize);
    for (layer, input) in spec.layers.iter().zip(inputs) {
        let c = match input {
            Shape::Spatial { c, .. } => c,
            Shape::Flat(n) => n,
        };
        let (weights, biases) = match *layer {
            LayerSpec::Conv2d { out_channels, kernel, bias, .. } => (
                out_channels.checked_mul(c).and_then(|v| v.checked_mul(kernel)?.checked_mul(kernel)),
                bias.then_some(out_channels),
            ),
            LayerSpec::Linear { out_features, bias } => {
                (input.len().checked_mul(out_features), bias.then_some(out_features))
            }
            LayerSpec::GroupNorm { .. } => (Some(c), Some(c)),
            // Every kind named: a new kind with parameters must say how many here.
            LayerSpec::Relu
            | LayerSpec::Tanh
            | LayerSpec::MaxPool2d { .. }
            | LayerSpec::AvgPool2d { .. }
            | LayerSpec::Flatten => (Some(0), None),
        };
        total = total.and_then(|t| t.checked_add(weights?)?.checked_add(biases.unwrap_or(0)));
    }
    Ok(total.filter(|&t| t <= crate::per_example::MAX_VALUES))
}

/// Writes any burn module as a burnpack record to `path`, atomically (a temporary file renamed
/// over `path`, so a crash never leaves a half-written model).
///
/// # Errors
/// If the record cannot be written.
pub fn save_module<M: Module>(module: M, path: &Path) -> Result<()> {
    let mut tmp = path.as_os_str().to_os_string();
    tmp.push(".tmp");
    let tmp = std::path::PathBuf::from(tmp);
    module.save_file(&tmp).map_err(|e| Error::Record(format!("{}: {e}", path.display())))?;
    std::fs::File::open(&tmp).and_then(|f| f.sync_all()).map_err(Error::io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(Error::io(path))
}

/// What to read from each parameter.
enum Read<'g> {
    Value,
    Grad(&'g burn::tensor::Gradients),
}

impl Read<'_> {
    /// The parameter's value or gradient, flattened row-major.
    fn flat<const D: usize>(&self, p: &Param<Tensor<D>>) -> Result<Vec<f32>> {
        let t = match self {
            Read::Value => p.val(),
            Read::Grad(g) => p.val().grad(g).ok_or_else(|| {
                Error::Record("a parameter has no gradient (is the model on an autodiff device?)".into())
            })?,
        };
        t.into_data().try_into_vec::<f32>().map_err(|e| Error::Record(format!("{e:?}")))
    }
}

/// A config's model (`model.layers` or a preset) with a layer kind only the burn engine trains:
/// the burn engine around its [`BurnModel`], and the spec it was built from (which, not the
/// burn module, identifies the run's model and is published as `model.json`).
#[derive(Debug)]
pub struct ConfigModel {
    /// The engine.
    pub engine: BurnEngine<BurnModel>,
    /// The architecture.
    pub spec: ModelSpec,
}

impl ConfigModel {
    /// `spec` freshly initialised on `device` from `seed` (burn's initialisers; see
    /// [`BurnModel::from_spec`]) in a burn engine.
    ///
    /// # Errors
    /// [`Error::Config`] naming `model` for a spec that does not fit; as [`BurnEngine::new`].
    pub fn new(spec: &ModelSpec, device: &Device, seed: u64) -> Result<Self> {
        device.seed(seed);
        let model = BurnModel::from_spec(spec, device).map_err(|e| Error::config("model", e.to_string()))?;
        let engine = BurnEngine::new(model, device, spec.input, spec.classes)?;
        Ok(Self { engine, spec: spec.clone() })
    }
}

impl PerExample for ConfigModel {
    type Scratch = <BurnEngine<BurnModel> as PerExample>::Scratch;

    fn num_params(&self) -> usize {
        self.engine.num_params()
    }
    fn input_shape(&self) -> [usize; 3] {
        self.engine.input_shape()
    }
    fn classes(&self) -> usize {
        PerExample::classes(&self.engine)
    }
    fn scratch(&self, batch: usize) -> Self::Scratch {
        self.engine.scratch(batch)
    }
    fn scratch_bytes(&self, batch: usize) -> Option<u64> {
        self.engine.scratch_bytes(batch)
    }
    fn gradients(
        &self,
        theta: &[f32],
        x: &[f32],
        labels: &[u8],
        scratch: &mut Self::Scratch,
        grads: &mut [f32],
        losses: &mut [f32],
    ) {
        self.engine.gradients(theta, x, labels, scratch, grads, losses);
    }
    fn logits<'s>(&self, theta: &[f32], x: &[f32], b: usize, scratch: &'s mut Self::Scratch) -> &'s [f32] {
        self.engine.logits(theta, x, b, scratch)
    }
    fn largest_part(&self) -> Option<(String, usize)> {
        self.engine.largest_part()
    }
}
