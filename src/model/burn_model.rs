//! The burn form of a config's model: its layers' burn modules
//! ([`crate::arch::BurnLayer`], one per [`crate::arch::kinds`] kind), for records (burnpack
//! files), evaluation on any burn device, autodiff reference gradients, and the burn engine
//! (it is a [`Classifier`]). Its parameters convert to and from the fast engine's flat θ
//! ([`crate::per_example::Network`]) through each kind's PyTorch layout.

use std::path::Path;

use burn::module::Module;
use burn::tensor::{Device, Int, Tensor, TensorData};

use crate::arch::kinds::Read;
use crate::arch::{Activation, BurnLayer, ModelSpec, Shape, ShapeError};
use crate::error::{Error, Result};
use crate::nn::Classifier;
use crate::per_example::{BurnEngine, Held, Layer, Network, PerExample};

/// A sequential burn model: one [`BurnLayer`] per layer of a [`ModelSpec`].
#[derive(Module, Debug)]
pub struct BurnModel {
    layers: Vec<BurnLayer>,
}

impl BurnModel {
    /// Builds the burn modules of `net` on `device` holding the parameters `theta` (in `net`'s
    /// layout).
    ///
    /// # Errors
    /// [`Error::Parameters`] if `theta` is not `net`'s length.
    pub fn from_params(net: &Network, theta: &[f32], device: &Device) -> Result<Self> {
        if theta.len() != net.num_params() {
            return Err(Error::Parameters(format!("{} parameters for a model of {}", theta.len(), net.num_params())));
        }
        let mut model = Self::build(net.spec(), net.inputs(), device);
        for (layer, compiled) in model.layers.iter_mut().zip(net.layers()) {
            if let Some(p) = compiled.params() {
                let weight = &theta[p.weight..p.weight + p.weight_len];
                match p.bias {
                    Some(b) => layer.write(&[weight, &theta[b..b + p.bias_len]], device)?,
                    None => layer.write(&[weight], device)?,
                }
            }
        }
        Ok(model)
    }

    /// A freshly initialised model of `spec` on `device` (burn's initialisers, drawn from the
    /// device's generator: seed it with `device.seed(..)` for a reproducible start); the spec's
    /// shapes are checked first.
    ///
    /// # Errors
    /// [`ShapeError`] naming the first layer that does not fit.
    pub fn from_spec(spec: &ModelSpec, device: &Device) -> std::result::Result<Self, ShapeError> {
        let outputs = crate::arch::shapes(spec)?;
        let inputs: Vec<Shape> = std::iter::once(input_shape(spec)).chain(outputs).take(spec.layers.len()).collect();
        Ok(Self::build(spec, &inputs, device))
    }

    /// The modules of `spec`'s layers, each for its (checked) input shape.
    fn build(spec: &ModelSpec, inputs: &[Shape], device: &Device) -> Self {
        Self { layers: spec.layers.iter().zip(inputs).map(|(l, &input)| l.init(input, device)).collect() }
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
        let device = self.devices().into_iter().next().ok_or_else(|| Error::Parameters("the model has none".into()))?;
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
        let mismatch = || Error::Parameters("the record's layers do not match the model architecture".into());
        if self.layers.len() != net.layers().len() {
            return Err(mismatch());
        }
        for (compiled, layer) in net.layers().iter().zip(&self.layers) {
            let values = layer.read(read)?;
            let Some(p) = compiled.params() else {
                if values.is_empty() {
                    continue;
                }
                return Err(mismatch());
            };
            let slots = [Some((p.weight, p.weight_len)), p.bias.map(|b| (b, p.bias_len))];
            let slots: Vec<(usize, usize)> = slots.into_iter().flatten().collect();
            if slots.len() != values.len() || slots.iter().zip(&values).any(|(&(_, n), v)| v.len() != n) {
                return Err(mismatch());
            }
            for ((at, n), v) in slots.into_iter().zip(values) {
                theta[at..at + n].copy_from_slice(&v);
            }
        }
        Ok(theta)
    }

    /// Logits `[batch, classes]` for inputs `[batch, c, h, w]`.
    #[must_use]
    pub fn forward(&self, x: Tensor<4>) -> Tensor<2> {
        // The outputs a later layer adds (residual connections), kept as they are computed.
        let sources: Vec<usize> = self.layers.iter().filter_map(BurnLayer::joins).collect();
        let mut kept: Vec<Option<Activation>> = vec![None; self.layers.len()];
        let mut act = Activation::Spatial(x);
        for (i, layer) in self.layers.iter().enumerate() {
            act = layer.forward(act);
            // The model's walk checked that `j` is an earlier layer of the same shape.
            if let Some(earlier) = layer.joins().and_then(|j| kept.get(j).cloned().flatten()) {
                act = act + earlier;
            }
            if sources.contains(&i) {
                kept[i] = Some(act.clone());
            }
        }
        act.flat()
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
        let record = burn::store::ModuleRecord::load(path).map_err(|e| Error::file(path, e.to_string()))?;
        Self::build(net.spec(), net.inputs(), device)
            .try_load_record(record)
            .map_err(|e| Error::file(path, e.to_string()))
    }
}

impl Classifier for BurnModel {
    fn forward(&self, x: Tensor<4>) -> Tensor<2> {
        BurnModel::forward(self, x)
    }
}

/// `spec`'s input as a shape.
fn input_shape(spec: &ModelSpec) -> Shape {
    Shape::Spatial { c: spec.input[0], h: spec.input[1], w: spec.input[2] }
}

/// The number of trainable parameters [`BurnModel::from_spec`] would create for `spec`, checked
/// before anything is allocated (`None` past [`crate::per_example::MAX_VALUES`]).
///
/// # Errors
/// [`ShapeError`] naming the first layer that does not fit.
pub(crate) fn spec_params(spec: &ModelSpec) -> std::result::Result<Option<usize>, ShapeError> {
    let outputs = crate::arch::shapes(spec)?;
    let inputs = std::iter::once(input_shape(spec)).chain(outputs);
    let mut total = Some(0usize);
    for (layer, input) in spec.layers.iter().zip(inputs) {
        for dims in layer.param_shapes(input) {
            let n = dims.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
            total = total.and_then(|t| t.checked_add(n?));
        }
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
    module.save_file(&tmp).map_err(|e| Error::file(path, e.to_string()))?;
    std::fs::File::open(&tmp).and_then(|f| f.sync_all()).map_err(Error::io(&tmp))?;
    std::fs::rename(&tmp, path).map_err(Error::io(path))
}

/// A config's model (`model.layers` or a preset) on the burn engine (`train.engine = "burn"`, or
/// a layer kind only the burn engine trains): the burn engine around its [`BurnModel`], and the
/// spec it was built from (which, not the
/// burn module, identifies the run's model and is published as `model.json`).
#[derive(Debug)]
pub struct ConfigModel {
    /// The engine.
    pub engine: BurnEngine<BurnModel>,
    /// The architecture.
    pub spec: ModelSpec,
}

impl ConfigModel {
    /// `spec` freshly initialised on `device` from `seed` in a burn engine: as the fast engine
    /// initialises it ([`Network::init_params`] from a ChaCha8 generator seeded with `seed`, so
    /// both engines start from the same model) where every kind has a fast rule, else by
    /// burn's initialisers from the device's generator seeded with `seed` (see
    /// [`BurnModel::from_spec`]).
    ///
    /// # Errors
    /// [`Error::Config`] naming `model` for a spec that does not fit; as [`BurnEngine::new`].
    pub fn new(spec: &ModelSpec, device: &Device, seed: u64) -> Result<Self> {
        let model = if spec.layers.iter().all(Layer::supports) {
            let net = Network::new(spec).map_err(|e| Error::config("model", e.to_string()))?;
            let theta = net.init_params(&mut <rand_chacha::ChaCha8Rng as rand::SeedableRng>::seed_from_u64(seed));
            BurnModel::from_params(&net, &theta, device)?
        } else {
            device.seed(seed);
            BurnModel::from_spec(spec, device).map_err(|e| Error::config("model", e.to_string()))?
        };
        let engine = BurnEngine::new(model, device, spec.input, spec.classes)?;
        Ok(Self { engine, spec: spec.clone() })
    }
}

/// Every method forwards to the burn engine, the ones with defaults included (its rows kept on
/// the device, its row tolerance and its reseeding are the engine's).
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
    fn gradients_with_norms<'s>(
        &self,
        theta: &[f32],
        x: &[f32],
        labels: &[u8],
        scratch: &'s mut Self::Scratch,
        grads: &mut [f32],
        losses: &mut [f32],
        norms: &mut [f64],
    ) -> Held<'s> {
        self.engine.gradients_with_norms(theta, x, labels, scratch, grads, losses, norms)
    }
    fn keeps_rows(&self) -> bool {
        self.engine.keeps_rows()
    }
    fn preferred_chunk(&self) -> usize {
        self.engine.preferred_chunk()
    }
    fn preferred_threads(&self) -> Option<usize> {
        self.engine.preferred_threads()
    }
    fn logits<'s>(&self, theta: &[f32], x: &[f32], b: usize, scratch: &'s mut Self::Scratch) -> &'s [f32] {
        self.engine.logits(theta, x, b, scratch)
    }
    fn largest_part(&self) -> Option<(String, usize)> {
        self.engine.largest_part()
    }
    fn reseed(&self, seed: u64) {
        self.engine.reseed(seed);
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::arch::{LayerSpec, kinds};

    /// A random small sequential model of the fast engine's kinds (it may not fit its input).
    fn spec() -> impl Strategy<Value = ModelSpec> {
        let conv = (1usize..4, 1usize..4, 1usize..3, 0usize..2, any::<bool>()).prop_map(|(o, k, s, p, b)| {
            LayerSpec::Conv2d(kinds::Conv2d { out_channels: o, kernel: k, stride: s, padding: p, bias: b })
        });
        let pool =
            (1usize..3, 1usize..3).prop_map(|(k, s)| LayerSpec::MaxPool2d(kinds::MaxPool2d { kernel: k, stride: s }));
        let act = prop_oneof![Just(LayerSpec::Relu(kinds::Relu)), Just(LayerSpec::Tanh(kinds::Tanh))];
        let spatial = prop::collection::vec(prop_oneof![conv, pool, act.clone()], 0..4);
        let head = (1usize..5, any::<bool>(), any::<bool>());
        ((1usize..3, 3usize..8, 3usize..8), spatial, head, 2usize..4).prop_map(
            |((c, h, w), mut layers, (hidden, b1, b2), classes)| {
                layers.push(LayerSpec::Flatten(kinds::Flatten));
                layers.push(LayerSpec::Linear(kinds::Linear { out_features: hidden, bias: b1 }));
                layers.push(LayerSpec::Relu(kinds::Relu));
                layers.push(LayerSpec::Linear(kinds::Linear { out_features: classes, bias: b2 }));
                ModelSpec { input: [c, h, w], classes, layers }
            },
        )
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

        /// One fact, one place: for any model the fast engine compiles, the kinds' shape rules
        /// agree with it on every layer (or refuse the same models), their parameter shapes
        /// count its θ, and θ goes into the burn modules and back unchanged.
        #[test]
        fn the_kinds_and_the_fast_engine_agree(spec in spec()) {
            let device = Device::default();
            match Network::new(&spec) {
                Ok(net) => {
                    prop_assert_eq!(spec_params(&spec).unwrap(), Some(net.num_params()));
                    let outputs = crate::arch::shapes(&spec).unwrap();
                    for (layer, out) in net.layers().iter().zip(&outputs) {
                        prop_assert_eq!(layer.out_len(), out.len());
                    }
                    let theta: Vec<f32> = (0..net.num_params()).map(|i| (i as f32 * 0.731).sin()).collect();
                    let model = BurnModel::from_params(&net, &theta, &device).unwrap();
                    prop_assert_eq!(model.to_params(&net).unwrap(), theta);
                }
                Err(e) => prop_assert!(crate::arch::shapes(&spec).is_err() || e.reason.contains("no trainable"), "{e}"),
            }
        }
    }
}
