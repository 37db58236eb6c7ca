//! `model.safetensors`: the returned model in a format others read (Hugging Face safetensors),
//! carrying its input normalisation, and where dpgd can rebuild it its architecture, in the
//! file's metadata, so it loads without the run's config. Two layouts, named by the metadata
//! key `dpgd.layout`:
//!
//! - **`pytorch`** (the fast engine's models; files without the key are this one): tensors
//!   `layers.{i}.weight` (`[out, in, k, k]` for a convolution, `[out, in]` for a linear layer,
//!   as PyTorch's `Conv2d` / `Linear`) and `layers.{i}.bias`, `i` the layer's index in the
//!   architecture; `dpgd.architecture` is the [`ModelSpec`] as JSON.
//! - **`burn`** (models trained on the burn engine): every trainable parameter under its path in
//!   the burn module (`conv1.weight`, `layers.0.Conv2d.weight`, …) in burn's own layout (a
//!   `Linear`'s weight is `[in, out]`), read back by [`load_params`] (the names and layout
//!   burn-store's `SafetensorsStore` uses by default, from its source; untested here). A config's
//!   model also carries `dpgd.architecture`; a model of your own struct does not (dpgd cannot
//!   rebuild your code), so `dpgd eval` refuses it and you load it into your struct.
//!
//! Both carry `dpgd.normalize`, the normalisation of the model's input, and `dpgd.input`, what
//! an example is made from ([`InputForm`]: pixels, or the named columns of a CSV file; files
//! without it are of pixels); a model trained on `[data.features]` carries `dpgd.features`: the
//! transform and the shape of the images it takes ([`FeatureInput`]). So the file alone turns
//! new examples into the model's input exactly as training did.

use std::collections::HashMap;
use std::path::Path;

use safetensors::tensor::{Dtype, TensorView};

use super::ConfigModel;
use crate::arch::ModelSpec;
use crate::data::features::FeatureInput;
use crate::data::{Examples, InputForm, Normalize};
use crate::device::DeviceKind;
use crate::error::{Error, Result};
use crate::per_example::{Network, PerExample, TrainableParam};

/// The model of a file dpgd can rebuild: the fast engine's network, or a config's model trained
/// on the burn engine (evaluated on the default CPU device).
#[derive(Debug)]
pub enum ExportedNet {
    /// A fast-engine network (layout `pytorch`).
    Fast(Network),
    /// A config's model on the burn engine (layout `burn`, with its architecture).
    Burn(Box<ConfigModel>),
}

/// How a model's input is made from an example: its feature transform if it has one, then the
/// normalisation (of the features, or of the pixels).
#[derive(Debug, Clone, PartialEq)]
pub struct ModelInput {
    /// The normalisation of the model's input.
    pub normalize: Normalize,
    /// The feature transform, and the shape of the images it takes.
    pub features: Option<FeatureInput>,
    /// What an example is made from (pixels, or named CSV columns).
    pub form: InputForm,
}

/// A model read back from a `model.safetensors` file.
#[derive(Debug)]
pub struct ExportedModel {
    /// The compiled architecture.
    pub net: ExportedNet,
    /// Its flat parameters θ (in the engine's order).
    pub theta: Vec<f32>,
    /// The input normalisation it was trained with.
    pub normalize: Normalize,
    /// The feature transform its input is made with, and the shape of the images it takes
    /// (`None`: it reads the examples themselves).
    pub features: Option<FeatureInput>,
    /// What its examples are made from (pixels, or named CSV columns).
    pub form: InputForm,
}

/// Runs `$body` with `$e` bound to the engine of an [`ExportedNet`], whichever it is.
macro_rules! with_engine {
    ($net:expr, $e:ident => $body:expr) => {
        match $net {
            ExportedNet::Fast($e) => $body,
            ExportedNet::Burn(m) => {
                let $e = m.as_ref();
                $body
            }
        }
    };
}

impl ExportedModel {
    /// Number of classes.
    #[must_use]
    pub fn classes(&self) -> usize {
        with_engine!(&self.net, e => e.classes())
    }

    /// The shape of one input, `[channels, height, width]`.
    #[must_use]
    pub fn input_shape(&self) -> [usize; 3] {
        with_engine!(&self.net, e => e.input_shape())
    }

    /// Values per input (`c·h·w`).
    #[must_use]
    pub fn input_len(&self) -> usize {
        self.input_shape().iter().product()
    }

    /// How many of `data` the model classifies correctly.
    #[must_use]
    pub fn count_correct(&self, data: Examples<'_>) -> usize {
        with_engine!(&self.net, e => crate::per_example::count_correct(e, &self.theta, data, &self.normalize))
    }

    /// The logits (`n × classes`) of `data`, normalised as in training, in batches of 256.
    #[must_use]
    pub fn logits(&self, data: Examples<'_>) -> Vec<f32> {
        with_engine!(&self.net, e => logits_of(e, &self.theta, data, &self.normalize))
    }
}

fn logits_of<E: PerExample>(net: &E, theta: &[f32], data: Examples<'_>, norm: &Normalize) -> Vec<f32> {
    let (px, batch) = (net.input_len(), 256);
    let mut scratch = net.scratch(batch);
    let mut buf = vec![0.0f32; batch * px];
    let mut out = Vec::with_capacity(data.len() * net.classes());
    for lo in (0..data.len()).step_by(batch) {
        let hi = (lo + batch).min(data.len());
        data.normalised_into(lo..hi, norm, &mut buf[..(hi - lo) * px]);
        out.extend_from_slice(net.logits(theta, &buf[..(hi - lo) * px], hi - lo, &mut scratch));
    }
    out
}

fn bytes_of(values: &[f32]) -> Vec<u8> {
    values.iter().flat_map(|v| v.to_le_bytes()).collect()
}

/// One tensor of a file: its name, shape, and where its values sit in θ (offset, length).
struct Slot {
    name: String,
    shape: Vec<usize>,
    offset: usize,
    len: usize,
}

/// The named tensors of a fast-engine θ (layout `pytorch`).
fn fast_slots(net: &Network) -> Vec<Slot> {
    let mut out = Vec::new();
    // Each kind's parameter shapes (PyTorch's layout, weight then bias) at the offsets the
    // fast engine gave them.
    let layers = net.spec().layers.iter().zip(net.inputs()).zip(net.layers());
    for (i, ((spec, &input), layer)) in layers.enumerate() {
        let Some(p) = layer.params() else { continue };
        let at = [Some((p.weight, p.weight_len)), p.bias.map(|b| (b, p.bias_len))].into_iter().flatten();
        for ((offset, len), (shape, name)) in at.zip(spec.param_shapes(input).into_iter().zip(["weight", "bias"])) {
            out.push(Slot { name: format!("layers.{i}.{name}"), shape, offset, len });
        }
    }
    out
}

/// The named tensors of a burn-engine θ (layout `burn`): each parameter under its path.
fn burn_slots(params: &[TrainableParam]) -> Vec<Slot> {
    params
        .iter()
        .map(|p| Slot { name: p.path.clone(), shape: p.shape.clone(), offset: p.offset, len: p.shape.iter().product() })
        .collect()
}

/// Writes `theta` of `net` (trained on `input`) to `path`, atomically.
///
/// # Errors
/// If the file cannot be written.
pub fn save(net: &Network, theta: &[f32], input: &ModelInput, path: &Path) -> Result<()> {
    write(path, &fast_slots(net), theta, input, "pytorch", Some(net.spec()))
}

/// Writes θ of a burn-engine model to `path`, atomically, in layout `burn`: each trainable
/// parameter (`params`, [`crate::per_example::BurnEngine::params`]) under its path in the
/// module; `architecture` where the model is a config's (so `dpgd eval` can rebuild it).
///
/// # Errors
/// If the file cannot be written.
pub fn save_burn(
    params: &[TrainableParam],
    theta: &[f32],
    input: &ModelInput,
    architecture: Option<&ModelSpec>,
    path: &Path,
) -> Result<()> {
    write(path, &burn_slots(params), theta, input, "burn", architecture)
}

fn write(
    path: &Path,
    slots: &[Slot],
    theta: &[f32],
    input: &ModelInput,
    layout: &str,
    architecture: Option<&ModelSpec>,
) -> Result<()> {
    let bad = |e: &dyn std::fmt::Display| Error::file(path, e.to_string());
    let data: Vec<(&str, &[usize], Vec<u8>)> = slots
        .iter()
        .map(|s| {
            let values = theta.get(s.offset..s.offset + s.len).ok_or_else(|| bad(&"θ is shorter than the model"))?;
            Ok((s.name.as_str(), s.shape.as_slice(), bytes_of(values)))
        })
        .collect::<Result<_>>()?;
    let views = data
        .iter()
        .map(|(n, s, b)| TensorView::new(Dtype::F32, s.to_vec(), b).map(|v| (n.to_string(), v)))
        .collect::<std::result::Result<Vec<_>, _>>()
        .map_err(|e| bad(&e))?;
    let mut meta = HashMap::new();
    meta.insert("format".to_string(), "pt".to_string());
    meta.insert("dpgd.layout".to_string(), layout.to_string());
    if let Some(spec) = architecture {
        meta.insert("dpgd.architecture".to_string(), serde_json::to_string(spec).map_err(|e| bad(&e))?);
    }
    meta.insert("dpgd.normalize".to_string(), serde_json::to_string(&input.normalize).map_err(|e| bad(&e))?);
    if let Some(f) = &input.features {
        meta.insert("dpgd.features".to_string(), serde_json::to_string(f).map_err(|e| bad(&e))?);
    }
    meta.insert("dpgd.input".to_string(), serde_json::to_string(&input.form).map_err(|e| bad(&e))?);
    let mut bytes = safetensors::serialize(views, Some(meta)).map_err(|e| bad(&e))?;
    canonical_header(&mut bytes).map_err(|e| bad(&e))?;
    crate::files::atomic_write(path, &bytes)
}

/// Rewrites a safetensors file's JSON header with its keys sorted, in place, so that the same
/// model always gives the same bytes (and published checksums agree): `safetensors` writes its
/// metadata from a `HashMap`, in a random order. The header keeps its length (the same JSON,
/// reordered, padded with spaces as the format allows), so no offset changes.
fn canonical_header(bytes: &mut [u8]) -> std::result::Result<(), String> {
    let len_bytes: [u8; 8] = bytes.get(..8).and_then(|b| b.try_into().ok()).ok_or("no header length")?;
    let len = usize::try_from(u64::from_le_bytes(len_bytes)).map_err(|e| e.to_string())?;
    let header = bytes.get_mut(8..8 + len).ok_or("header longer than the file")?;
    // serde_json's default map is a BTreeMap: parsing and printing sorts every object's keys.
    let value: serde_json::Value = serde_json::from_slice(header).map_err(|e| e.to_string())?;
    let sorted = serde_json::to_vec(&value).map_err(|e| e.to_string())?;
    if sorted.len() > len {
        return Err(format!("the sorted header ({} bytes) is longer than the original ({len})", sorted.len()));
    }
    header[..sorted.len()].copy_from_slice(&sorted);
    header[sorted.len()..].fill(b' ');
    Ok(())
}

/// A file's bytes, with its metadata parsed (after the memory check on its size).
struct File {
    bytes: Vec<u8>,
    info: HashMap<String, String>,
    normalize: Normalize,
    features: Option<FeatureInput>,
    form: InputForm,
}

impl File {
    fn read(path: &Path) -> Result<Self> {
        let bad = |m: String| Error::file(path, m);
        let len = std::fs::metadata(path).map_err(Error::io(path))?.len();
        crate::memory::check(&format!("reading {}", path.display()), Some(len), "this is not a dpgd model file")?;
        let bytes = std::fs::read(path).map_err(Error::io(path))?;
        let (_, meta) = safetensors::SafeTensors::read_metadata(&bytes)
            .map_err(|e| bad(format!("not a safetensors file ({e})")))?;
        let info = meta.metadata().clone().unwrap_or_default();
        let normalize: Normalize = match info.get("dpgd.normalize") {
            Some(n) => serde_json::from_str(n).map_err(|e| bad(format!("its normalisation does not parse ({e})")))?,
            None => Normalize::MNIST,
        };
        let features = match info.get("dpgd.features") {
            Some(f) => {
                Some(serde_json::from_str(f).map_err(|e| bad(format!("its feature transform does not parse ({e})")))?)
            }
            None => None,
        };
        let form = match info.get("dpgd.input") {
            Some(f) => serde_json::from_str(f).map_err(|e| bad(format!("its input form does not parse ({e})")))?,
            None => InputForm::Pixels,
        };
        Ok(Self { bytes, info, normalize, features, form })
    }

    fn layout(&self) -> &str {
        self.info.get("dpgd.layout").map_or("pytorch", String::as_str)
    }

    /// θ of `len` values from the file's tensors, each checked against its slot's name and shape.
    fn theta(&self, slots: &[Slot], len: usize, path: &Path) -> Result<Vec<f32>> {
        let bad = |m: String| Error::file(path, m);
        let file = safetensors::SafeTensors::deserialize(&self.bytes)
            .map_err(|e| bad(format!("not a safetensors file ({e})")))?;
        let mut theta = vec![0.0f32; len];
        for s in slots {
            let t = file.tensor(&s.name).map_err(|_| bad(format!("tensor {} is missing", s.name)))?;
            if t.dtype() != Dtype::F32 || t.shape() != s.shape.as_slice() {
                return Err(bad(format!(
                    "tensor {} is {:?} {:?}, expected F32 {:?}",
                    s.name,
                    t.dtype(),
                    t.shape(),
                    s.shape
                )));
            }
            let dst =
                theta.get_mut(s.offset..s.offset + s.len).ok_or_else(|| bad("θ is shorter than the model".into()))?;
            for (d, c) in dst.iter_mut().zip(t.data().chunks_exact(4)) {
                *d = f32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            }
        }
        Ok(theta)
    }
}

/// Reads a model written by [`save`] or, for a config's model, [`save_burn`], checking its
/// architecture and every tensor's name and shape.
///
/// # Errors
/// [`Error::File`] naming the file: not safetensors, no dpgd architecture (a model of your
/// own burn struct: use [`load_params`]), a missing or mis-shaped tensor, or a file larger
/// than the memory limit.
pub fn load(path: &Path) -> Result<ExportedModel> {
    let bad = |m: String| Error::file(path, m);
    let file = File::read(path)?;
    let spec: ModelSpec = match file.info.get("dpgd.architecture") {
        Some(a) => serde_json::from_str(a).map_err(|e| bad(format!("its architecture does not parse ({e})")))?,
        None if file.layout() == "burn" => {
            return Err(bad("a model of your own burn struct (no dpgd architecture): load it into your struct with \
                 dpgd::model::export::load_into(YourModel::new(&device), path)?.model"
                .into()));
        }
        None => return Err(bad("no dpgd.architecture in its metadata: not written by dpgd".into())),
    };
    file.normalize.check(spec.input[0]).map_err(|e| bad(format!("its normalisation does not fit its model: {e}")))?;
    // The file holds every parameter in 4 bytes: a larger architecture is refused before its
    // parameters are allocated.
    let fits = |params: Option<usize>| params.is_some_and(|p| p.saturating_mul(4) <= file.bytes.len());
    let too_large = || bad("its architecture has more parameters than the file holds".into());
    let (net, theta) = match file.layout() {
        "pytorch" => {
            let net = Network::new(&spec).map_err(|e| bad(format!("its architecture does not compile: {e}")))?;
            if !fits(Some(net.num_params())) {
                return Err(too_large());
            }
            let theta = file.theta(&fast_slots(&net), net.num_params(), path)?;
            (ExportedNet::Fast(net), theta)
        }
        "burn" => {
            let params = super::spec_params(&spec).map_err(|e| bad(format!("its architecture does not fit: {e}")))?;
            if !fits(params) {
                return Err(too_large());
            }
            let model = ConfigModel::new(&spec, &DeviceKind::default().device()?, 0)
                .map_err(|e| bad(format!("its architecture does not build: {e}")))?;
            let theta = file.theta(&burn_slots(model.engine.params()), model.num_params(), path)?;
            (ExportedNet::Burn(Box::new(model)), theta)
        }
        other => return Err(bad(format!("unknown dpgd.layout {other:?} (written by a newer dpgd?)"))),
    };
    Ok(ExportedModel { net, theta, normalize: file.normalize, features: file.features, form: file.form })
}

/// θ for a burn-engine model of your own struct from a `model.safetensors` a run of it wrote
/// (layout `burn`), with the normalisation it was trained with: every one of `params`
/// ([`crate::per_example::BurnEngine::params`]) must be in the file under its path, with its
/// shape. `engine.model_with(&theta)` then gives the trained model.
///
/// # Errors
/// [`Error::File`] naming the file: not safetensors, not layout `burn`, or a parameter
/// missing or of another shape (the file is of another model).
pub fn load_params(params: &[TrainableParam], path: &Path) -> Result<(Vec<f32>, Normalize)> {
    let file = File::read(path)?;
    if file.layout() != "burn" {
        return Err(Error::file(path, "a fast-engine model (layout pytorch): read it with dpgd::model::export::load"));
    }
    let slots = burn_slots(params);
    let len = slots.iter().map(|s| s.offset + s.len).max().unwrap_or(0);
    Ok((file.theta(&slots, len, path)?, file.normalize))
}

/// A module with weights loaded from a file ([`load_into`]).
#[derive(Debug)]
pub struct Loaded<M> {
    /// The module, holding the file's values where the file had them.
    pub model: M,
    /// The normalisation the file's model was trained with.
    pub normalize: Normalize,
    /// The paths of the float parameters the file did not hold (they keep their values: a new
    /// head, say), in the module's order.
    pub kept: Vec<String>,
}

/// Loads the weights of a `model.safetensors` of layout `burn` — what a dpgd run on the burn
/// engine writes — into `model`, any burn module (your own struct), matching each float
/// parameter by its path in the struct (`conv1.weight`, `blocks.0.norm.gamma`): to evaluate it,
/// or to fine-tune it (hand the result to [`crate::per_example::BurnEngine::new`]). Parameters
/// the file does not hold keep their values and are listed in [`Loaded::kept`]; tensors of the
/// file no parameter has are ignored; frozen parameters stay frozen.
///
/// # Errors
/// [`Error::File`] naming the file: not safetensors, the fast engine's layout (`pytorch`), a
/// tensor whose shape or type is not the parameter's at its path, or none of the module's
/// parameters in the file (another model).
pub fn load_into<M: burn::module::Module>(model: M, path: &Path) -> Result<Loaded<M>> {
    let bad = |m: String| Error::file(path, m);
    let file = File::read(path)?;
    if file.layout() != "burn" {
        return Err(bad("a fast-engine model (layout pytorch, PyTorch's parameter names): read it with \
             dpgd::model::export::load (the command line does not fine-tune: a burn model is fine-tuned through the \
             library, as examples/fine_tune.rs does)"
            .into()));
    }
    let tensors =
        safetensors::SafeTensors::deserialize(&file.bytes).map_err(|e| bad(format!("not a safetensors file ({e})")))?;
    let mut load = LoadByPath { tensors: &tensors, stack: Vec::new(), kept: Vec::new(), loaded: 0, problem: None };
    let model = model.map(&mut load);
    if let Some(p) = load.problem {
        return Err(bad(p));
    }
    if load.loaded == 0 {
        return Err(bad(format!(
            "none of the model's parameters ({}) is in the file: it holds another model",
            load.kept.join(", ")
        )));
    }
    Ok(Loaded { model, normalize: file.normalize, kept: load.kept })
}

/// Replaces each float parameter by the file's tensor at its path.
struct LoadByPath<'a> {
    tensors: &'a safetensors::SafeTensors<'a>,
    stack: Vec<String>,
    kept: Vec<String>,
    loaded: usize,
    problem: Option<String>,
}

impl burn::module::ModuleMapper for LoadByPath<'_> {
    fn enter_module(&mut self, name: &str, _container: &str) {
        self.stack.push(name.to_string());
    }
    fn exit_module(&mut self, _name: &str, _container: &str) {
        self.stack.pop();
    }
    fn map_float<const D: usize>(
        &mut self,
        param: burn::module::Param<burn::tensor::Tensor<D>>,
    ) -> burn::module::Param<burn::tensor::Tensor<D>> {
        let path = self.stack.join(".");
        let Ok(t) = self.tensors.tensor(&path) else {
            self.kept.push(path);
            return param;
        };
        let shape = param.val().dims().to_vec();
        if t.dtype() != Dtype::F32 || t.shape() != shape.as_slice() {
            self.problem.get_or_insert(format!(
                "tensor {path} is {:?} {:?}; the model's parameter there is F32 {shape:?}",
                t.dtype(),
                t.shape()
            ));
            return param;
        }
        self.loaded += 1;
        let values: Vec<f32> = t.data().chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        param.map(|old| {
            let device = old.device();
            burn::tensor::Tensor::from_data(burn::tensor::TensorData::new(values, shape.clone()), &device)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    fn input(norm: &Normalize) -> ModelInput {
        ModelInput { normalize: norm.clone(), features: None, form: InputForm::Pixels }
    }

    /// The feature transform and its image shape travel in the file: a model of features reads
    /// back with them.
    #[test]
    fn a_model_of_features_carries_its_transform() {
        use crate::data::features::{FeatureKind, Features};
        let spec = ModelSpec::logistic_for([25, 2, 2], 2);
        let net = Network::new(&spec).unwrap();
        let theta = net.init_params(&mut rand_chacha::ChaCha8Rng::seed_from_u64(2));
        let features = FeatureInput {
            transform: Features { kind: FeatureKind::Scattering, j: 2, angles: 4, groups: 5 },
            images: [1, 8, 8],
        };
        let path = tempfile::tempdir().unwrap().keep().join("model.safetensors");
        let with = ModelInput {
            normalize: Normalize::all(0.0, 1.0),
            features: Some(features.clone()),
            form: InputForm::Pixels,
        };
        save(&net, &theta, &with, &path).unwrap();
        let m = load(&path).unwrap();
        assert_eq!((m.theta, m.features), (theta, Some(features)));
    }

    #[test]
    fn round_trips_with_its_architecture() {
        let net = Network::new(&ModelSpec::opacus_cnn()).unwrap();
        let theta = net.init_params(&mut rand_chacha::ChaCha8Rng::seed_from_u64(1));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.safetensors");
        let norm = Normalize::all(0.5, 0.25);
        save(&net, &theta, &input(&norm), &path).unwrap();
        let m = load(&path).unwrap();
        assert_eq!((m.theta, m.normalize), (theta, norm));
        assert!(matches!(m.net, ExportedNet::Fast(n) if n == net));
        std::fs::write(&path, b"not a model").unwrap();
        assert!(load(&path).unwrap_err().to_string().contains("model.safetensors"));
    }

    /// Two saves of one model are byte-identical (the
    /// metadata came from a `HashMap` in random order, so published checksums differed).
    #[test]
    fn the_same_model_gives_the_same_bytes() {
        let net = Network::new(&ModelSpec::opacus_cnn()).unwrap();
        let theta = net.init_params(&mut rand_chacha::ChaCha8Rng::seed_from_u64(2));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.safetensors");
        let mut first = None;
        for _ in 0..12 {
            save(&net, &theta, &input(&Normalize::MNIST), &path).unwrap();
            let bytes = std::fs::read(&path).unwrap();
            assert_eq!(first.get_or_insert_with(|| bytes.clone()), &bytes, "two saves of one model differ");
        }
        assert_eq!(load(&path).unwrap().theta, theta);
    }

    /// A config's model with a kind only the burn engine trains (group norm) round-trips in
    /// layout `burn`: under its module paths, rebuilt from its architecture, the same logits.
    #[test]
    fn a_burn_engine_config_model_round_trips_and_evaluates() {
        use crate::arch::{LayerSpec, kinds};
        let spec = ModelSpec {
            input: [1, 6, 6],
            classes: 3,
            layers: vec![
                LayerSpec::Conv2d(kinds::Conv2d { out_channels: 4, kernel: 3, stride: 1, padding: 1, bias: true }),
                LayerSpec::GroupNorm(kinds::GroupNorm { groups: 2 }),
                LayerSpec::Relu(kinds::Relu),
                LayerSpec::Flatten(kinds::Flatten),
                LayerSpec::Linear(kinds::Linear { out_features: 3, bias: true }),
            ],
        };
        let device = DeviceKind::default().device().unwrap();
        let model = ConfigModel::new(&spec, &device, 7).unwrap();
        let theta: Vec<f32> = (0..model.num_params()).map(|i| (i as f32 * 0.37).sin()).collect();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.safetensors");
        let norm = Normalize::all(0.25, 0.5);
        save_burn(model.engine.params(), &theta, &input(&norm), Some(&spec), &path).unwrap();
        let m = load(&path).unwrap();
        assert_eq!((&m.theta, &m.normalize), (&theta, &norm));
        assert!(matches!(m.net, ExportedNet::Burn(_)));
        assert_eq!((m.classes(), m.input_shape()), (3, [1, 6, 6]));
        let names: Vec<String> = safetensors::SafeTensors::deserialize(&std::fs::read(&path).unwrap())
            .unwrap()
            .names()
            .into_iter()
            .map(str::to_string)
            .collect();
        assert!(names.iter().any(|n| n.starts_with("layers.1.") && n.ends_with("gamma")), "{names:?}");
        // the same logits as the engine at θ
        let split = crate::data::Split {
            images: (0..2 * 36).map(|i| (i * 7 % 256) as u8).collect(),
            features: Vec::new(),
            labels: vec![0, 2],
            rows: 6,
            cols: 6,
            channels: 1,
        };
        let x = split.head(0);
        assert_eq!(m.logits(x), logits_of(&model, &theta, x, &norm));
        // θ for the engine's own parameters, as a user of their own struct reads it
        assert_eq!(load_params(model.engine.params(), &path).unwrap(), (theta.clone(), norm.clone()));
        // without its architecture (a user's struct), `load` says how to load it instead
        save_burn(model.engine.params(), &theta, &input(&norm), None, &path).unwrap();
        let err = load(&path).unwrap_err().to_string();
        assert!(err.contains("load_into") && err.contains("model.safetensors"), "{err}");
        assert_eq!(load_params(model.engine.params(), &path).unwrap().0, theta);
        // Into a fresh module of the struct (another initialisation), by path, the README's
        // way: a model a run returned (`model_with`) goes back into an engine without a panic
        // and holds the file's θ.
        let fresh = ConfigModel::new(&spec, &device, 99).unwrap();
        let start = fresh.engine.model_with(&fresh.engine.current_params().unwrap()).unwrap();
        let loaded = load_into(start, &path).unwrap();
        assert_eq!((loaded.normalize, loaded.kept.len()), (norm.clone(), 0));
        let engine = crate::per_example::BurnEngine::new(loaded.model, &device, [1, 6, 6], 3).unwrap();
        assert_eq!(engine.current_params().unwrap(), theta);
        // A file of another model is refused; one missing a parameter keeps it and says so.
        let other = ConfigModel::new(&ModelSpec::logistic_for([1, 6, 6], 3), &device, 1).unwrap();
        let other_model = other.engine.model_with(&other.engine.current_params().unwrap()).unwrap();
        let err = load_into(other_model, &path).unwrap_err().to_string();
        assert!(err.contains("none of the model's parameters") || err.contains("the model's parameter there"), "{err}");
        let partial: Vec<TrainableParam> = model.engine.params()[1..].to_vec();
        save_burn(&partial, &theta, &input(&norm), None, &path).unwrap();
        let again = ConfigModel::new(&spec, &device, 99).unwrap();
        let loaded =
            load_into(again.engine.model_with(&again.engine.current_params().unwrap()).unwrap(), &path).unwrap();
        assert_eq!(loaded.kept, [model.engine.params()[0].path.clone()]);
    }

    /// An architecture with more parameters than the file holds is refused before anything
    /// is allocated (a hostile file cannot make `load` allocate terabytes).
    #[test]
    fn an_architecture_larger_than_its_file_is_refused() {
        // 784·2³⁰ weights: about 3 TB if allocated
        let huge = ModelSpec::mlp_for([1, 28, 28], 10, 1 << 30);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.safetensors");
        for layout in ["pytorch", "burn"] {
            write(&path, &[], &[], &input(&Normalize::MNIST), layout, Some(&huge)).unwrap();
            let err = load(&path).unwrap_err().to_string();
            assert!(err.contains("more parameters than the file holds"), "{layout}: {err}");
        }
    }
}
