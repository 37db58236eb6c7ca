//! The burn engine: per-example gradients of any [`Classifier`] built from [`crate::nn`]'s
//! layers, on a burn device chosen at run time (tested on the CPU backends flex and ndarray), from
//! ONE batched backward per micro-batch (see [`crate::nn`]).
//!
//! Each micro-batch: load θ into the worker's copy of the model (only when θ changed), run the
//! forward with a tape open, back-propagate the summed per-example cross-entropies with the
//! parameters frozen (only activation gradients are computed: about half of a normal
//! backward), let each recorded layer turn its probe's gradient into per-example parameter
//! gradients. They stay on the device: only each row's squared norm (bounded above for the
//! device's f32 arithmetic) goes to the host, where the ledger turns it into a clip factor; the
//! device scales each row by its factor, rounds it onto the sum's grid and adds the micro-batch
//! in integers, and only that P-integer sum comes back ([`crate::clip::kept`] states why the
//! sensitivity holds in the device's arithmetic). On the CPU backends (flex, ndarray) the
//! device's memory is the host's, and dpgd's host kernels run those steps over the rows there
//! ([`DeviceRows`]). [`BurnEngine::with_rows_on_host`] instead writes every row in θ's layout
//! for the host clip, as the fast engine's are. The ledger, the exact 64-bit sum, the noise and
//! the releases are the trainer's, shared with the fast engine.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use burn::module::{ModuleMapper, ModuleVisitor, Param, ParamId};
use burn::tensor::activation::log_softmax;
use burn::tensor::{DType, Device, Int, Tensor, TensorData};

use super::device_rows::write_parts;
use super::{DeviceRows, Held, PerExample};
use crate::error::{Error, Result};
use crate::nn::{Classifier, record};

/// One trainable parameter: where it sits in the user's struct and in θ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrainableParam {
    /// Its path in the model struct, e.g. `block.conv1.weight`.
    pub path: String,
    /// burn's id of the parameter.
    pub id: ParamId,
    /// Its shape.
    pub shape: Vec<usize>,
    /// Its offset in θ (values in row-major order).
    pub offset: usize,
}

impl TrainableParam {
    fn len(&self) -> usize {
        self.shape.iter().product()
    }
}

/// A burn model prepared for private training: its trainable parameters (each one checked to
/// be reached by a recorded [`crate::nn`] layer), its input shape and classes, its device.
pub struct BurnEngine<M: Classifier> {
    template: Mutex<M>,
    device: Device,
    params: Vec<TrainableParam>,
    input: [usize; 3],
    classes: usize,
    num_params: usize,
    /// Values a micro-batch holds per example besides θ-sized rows (recorded inputs, probes),
    /// measured on a dry run.
    values_per_example: usize,
    /// The most values per example of one recorded call (its share of `values_per_example`):
    /// a bound on each buffer a thread keeps for reuse after the call ([`crate::nn::SPARE`]).
    largest_call: usize,
    /// Every float parameter's number of values, by id (the shape its rows must have).
    sizes: HashMap<ParamId, usize>,
    /// Each trainable parameter's position in `params`, by id.
    index: HashMap<ParamId, usize>,
    /// How the per-example gradients are computed.
    backprop: Backprop,
    /// Whether a clipped sum keeps the rows on the device ([`BurnEngine::rows_on_device`]).
    keep_rows: bool,
    /// Whether it can: batched rows in f32 or f64.
    can_keep_rows: bool,
}

/// How the burn engine computes per-example gradients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Backprop {
    /// One batched backward per micro-batch, each [`crate::nn`] layer forming its per-example
    /// gradients from its probe ([`BurnEngine::new`]): every trainable parameter must belong to
    /// a `dpgd::nn` layer.
    #[default]
    Batched,
    /// One forward and one backward per example through burn's autodiff
    /// ([`BurnEngine::with_fallback`]): any burn model — burn's own layers, custom operations —
    /// exactly as autodiff computes it, but with none of a batch's parallelism: on the Opacus
    /// CNN, flex, 2 cores, 2,200–2,500 examples/s against the batched rule's 6,000–6,200
    /// (`dpgd bench-step --engine burn-fallback --examples 4096`, then `--engine burn`).
    OneBackwardPerExample,
}

impl<M: Classifier> std::fmt::Debug for BurnEngine<M> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BurnEngine")
            .field("params", &self.params.len())
            .field("num_params", &self.num_params)
            .field("input", &self.input)
            .field("classes", &self.classes)
            .finish_non_exhaustive()
    }
}

/// A float parameter as the inventory found it.
struct Found {
    path: String,
    id: ParamId,
    shape: Vec<usize>,
    trainable: bool,
    /// The container types enclosing it, outermost first (`Struct:BatchNorm`, …).
    types: Vec<String>,
}

/// Reads every float parameter with its path, and notes what cannot be trained privately.
#[derive(Default)]
struct Inventory {
    stack: Vec<(String, String)>,
    params: Vec<Found>,
    reparameterized: Vec<String>,
}

impl ModuleVisitor for Inventory {
    fn enter_module(&mut self, name: &str, container: &str) {
        if container == "Reparameterization" {
            self.reparameterized.push(self.path());
        }
        self.stack.push((name.to_string(), container.to_string()));
    }
    fn exit_module(&mut self, _name: &str, _container: &str) {
        self.stack.pop();
    }
    fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
        let value = param.val();
        let types = self.stack.iter().map(|(_, t)| t.clone()).collect();
        let (path, id, shape, trainable) = (self.path(), param.id, value.dims().to_vec(), value.is_require_grad());
        self.params.push(Found { path, id, shape, trainable, types });
    }
}

impl Inventory {
    fn path(&self) -> String {
        let names: Vec<&str> = self.stack.iter().map(|(n, _)| n.as_str()).collect();
        names.join(".")
    }
}

/// Replaces the trainable parameters' values by θ's (frozen: no gradient is computed for them).
struct Load<'a, M: Classifier> {
    theta: &'a [f32],
    engine: &'a BurnEngine<M>,
}

impl<M: Classifier> ModuleMapper for Load<'_, M> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        match self.engine.param(param.id) {
            Some(p) => {
                let data = TensorData::new(self.theta[p.offset..p.offset + p.len()].to_vec(), p.shape.clone());
                Param::initialized(param.id, Tensor::from_data(data, &self.engine.device))
            }
            None => param,
        }
    }
}

/// Makes the trained parameters trainable again (the ones the user froze stay frozen).
struct Unfreeze<'a, M: Classifier>(&'a BurnEngine<M>);

impl<M: Classifier> ModuleMapper for Unfreeze<'_, M> {
    fn map_float<const D: usize>(&mut self, param: Param<Tensor<D>>) -> Param<Tensor<D>> {
        if self.0.param(param.id).is_some() { param.set_require_grad(true) } else { param }
    }
}

/// Per-thread buffers of the burn engine: the thread's copy of the model and the θ it holds.
#[derive(Debug)]
pub struct BurnScratch<M> {
    model: M,
    loaded: Vec<f32>,
    logits: Vec<f32>,
    kept: DeviceRows,
}

impl<M: Classifier> BurnEngine<M> {
    /// Prepares `model` for private training on `device` (made an autodiff device if it is not
    /// one), for inputs of shape `input` (`[channels, height, width]`) and `classes` classes.
    ///
    /// Runs the model on zero batches of 2 and 3 examples, with a tape open and one backward
    /// each, to check that every trainable parameter belongs to a [`crate::nn`] layer the
    /// forward reached and that every layer call's gradients are per example; then checks, in
    /// training mode on the engine's own path, that each example's gradient row in a batch of 4
    /// does not depend on the other examples of its batch
    /// ([`check_rows_are_own`](super::check_rows_are_own)). The check reseeds the device's
    /// random generator (dropout); seed it again after this call for a stream of your own.
    ///
    /// # Errors
    /// [`Error::Config`] naming, by its path in the struct, a parameter no recorded dpgd layer
    /// used (burn's own layers, a raw `Param`), a BatchNorm (frozen or not), a reparameterized
    /// (LoRA) parameter, a layer called on a tensor whose first axis is not the batch; a forward
    /// that fails on the data's shape, gives logits of the wrong shape or mixes the examples of
    /// a batch (in the forward or only in the backward); a model with no trainable parameters.
    pub fn new(model: M, device: &Device, input: [usize; 3], classes: usize) -> Result<Self> {
        Self::build(model, device, input, classes, Backprop::Batched)
    }

    /// Like [`new`](Self::new), but for any burn model: each example's gradient is computed by
    /// its own forward and backward through burn's autodiff ([`Backprop::OneBackwardPerExample`]),
    /// so trainable parameters need not belong to [`crate::nn`] layers (burn's own `Linear` in
    /// its attention block, a raw `Param`, a custom operation). Correct for any per-example
    /// model, and slow: no batch is shared. Use it for models [`new`](Self::new) refuses.
    ///
    /// The same checks as [`new`](Self::new) apply except that one: BatchNorm and
    /// reparameterized parameters are still refused. (Each row comes from a batch of one, so
    /// the rows are the examples' own whatever the forward does to a batch; the row check runs
    /// all the same.)
    ///
    /// # Errors
    /// As [`new`](Self::new), except for parameters outside `dpgd::nn` layers.
    pub fn with_fallback(model: M, device: &Device, input: [usize; 3], classes: usize) -> Result<Self> {
        Self::build(model, device, input, classes, Backprop::OneBackwardPerExample)
    }

    /// How this engine computes per-example gradients.
    #[must_use]
    pub fn backprop(&self) -> Backprop {
        self.backprop
    }

    /// This engine with its clipped sums computed by the host clip ([`crate::clip::clip_block`]):
    /// every row is copied to the host in θ's layout for the exact norms, the clip and the exact
    /// sum (what the engine did before it kept its rows; for comparisons, with the same privacy
    /// guarantee).
    #[must_use]
    pub fn with_rows_on_host(mut self) -> Self {
        self.keep_rows = false;
        self
    }

    /// This engine with its clipped sums computed where its rows are (the default; undoes
    /// [`with_rows_on_host`](Self::with_rows_on_host)). No change for the
    /// one-backward-per-example fallback or rows of another float type, which stay on the host.
    #[must_use]
    pub fn with_rows_on_device(mut self) -> Self {
        self.keep_rows = self.can_keep_rows;
        self
    }

    /// Whether a clipped sum keeps the rows on the device ([`PerExample::keeps_rows`]): by
    /// default on every device, for the batched rule with f32 or f64 rows; see
    /// [`with_rows_on_host`](Self::with_rows_on_host) and
    /// [`with_rows_on_device`](Self::with_rows_on_device).
    #[must_use]
    pub fn rows_on_device(&self) -> bool {
        self.keep_rows
    }

    fn build(model: M, device: &Device, input: [usize; 3], classes: usize, backprop: Backprop) -> Result<Self> {
        let batched = backprop == Backprop::Batched;
        let refuse = Error::Model;
        let device = if device.is_autodiff() { device.clone() } else { device.clone().autodiff() };
        // `valid` first detaches every parameter from any graph it came out of (a model a run
        // returned, weights loaded on an autodiff device: burn panics on making such a
        // parameter trainable), keeping which ones are frozen; `train` then applies each
        // parameter's configured gradient requirement on the autodiff device (frozen parameters
        // stay frozen and are not trained).
        let model = caught(|| model.valid().to_device(&device).train())
            .map_err(|why| refuse(format!("burn could not prepare the model for training ({why})")))?;
        let mut inv = Inventory::default();
        model.visit(&mut inv);
        check_inventory(&inv)?;
        let sizes: HashMap<ParamId, usize> = inv.params.iter().map(|f| (f.id, f.shape.iter().product())).collect();
        let DryRuns { recorded, values_per_example, largest_call, float_rows } =
            dry_runs(&model, &device, (input, classes), batched, (&inv, &sizes))?;
        let (params, offset) = trainable_params(inv.params, batched, &recorded)?;
        let engine = Self {
            template: Mutex::new(model.no_grad()),
            device,
            input,
            classes,
            num_params: offset,
            values_per_example,
            largest_call,
            sizes,
            index: params.iter().enumerate().map(|(i, p)| (p.id, i)).collect(),
            params,
            backprop,
            keep_rows: batched && float_rows,
            can_keep_rows: batched && float_rows,
        };
        let theta = engine.current_params()?;
        caught(|| super::check_rows_are_own(&engine, &theta, MIXING_CHECK_BATCH))
            .map_err(|why| refuse(format!("the model's forward or backward fails on a batch of examples ({why})")))?
            .map_err(|m| refuse(m.explained()))?;
        Ok(engine)
    }

    /// The trainable parameters in θ's order.
    #[must_use]
    pub fn params(&self) -> &[TrainableParam] {
        &self.params
    }

    /// The autodiff device the engine computes on.
    #[must_use]
    pub fn device(&self) -> &Device {
        &self.device
    }

    /// θ: the model's current trainable parameter values, in [`params`](Self::params) order.
    ///
    /// # Errors
    /// [`Error::Parameters`] if a value cannot be read back from the device.
    pub fn current_params(&self) -> Result<Vec<f32>> {
        struct Read<'a, M: Classifier>(&'a BurnEngine<M>, Vec<(usize, Result<Vec<f32>>)>);
        impl<M: Classifier> ModuleVisitor for Read<'_, M> {
            fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
                if let Some(p) = self.0.param(param.id) {
                    let v = param
                        .val()
                        .into_data()
                        .try_into_vec::<f32>()
                        .map_err(|e| Error::Parameters(format!("a value the device cannot give back: {e:?}")));
                    self.1.push((p.offset, v));
                }
            }
        }
        let mut read = Read(self, Vec::new());
        self.template.lock().unwrap_or_else(PoisonError::into_inner).visit(&mut read);
        let mut theta = vec![0.0f32; self.num_params];
        for (offset, values) in read.1 {
            let values = values?;
            theta[offset..offset + values.len()].copy_from_slice(&values);
        }
        Ok(theta)
    }

    /// The model holding θ (e.g. the trained parameters a run returns), trainable again.
    ///
    /// # Errors
    /// [`Error::State`] if θ does not have [`PerExample::num_params`] values.
    pub fn model_with(&self, theta: &[f32]) -> Result<M> {
        if theta.len() != self.num_params {
            return Err(Error::State(format!(
                "θ has {} values; the model has {} parameters",
                theta.len(),
                self.num_params
            )));
        }
        let model = self.template.lock().unwrap_or_else(PoisonError::into_inner).clone();
        Ok(self.load(model, theta).map(&mut Unfreeze(self)))
    }

    /// The trainable parameter with burn's id `id`, if it is one.
    fn param(&self, id: ParamId) -> Option<&TrainableParam> {
        self.index.get(&id).map(|&i| &self.params[i])
    }

    fn load(&self, model: M, theta: &[f32]) -> M {
        model.map(&mut Load { theta, engine: self })
    }

    /// The thread's model holding θ (reloaded only when θ changed).
    fn loaded<'s>(&self, theta: &[f32], s: &'s mut BurnScratch<M>) -> &'s M {
        if s.loaded != theta {
            let model = self.load(s.model.clone(), theta);
            // One backward per example needs the parameters' own gradients.
            s.model = match self.backprop {
                Backprop::Batched => model,
                Backprop::OneBackwardPerExample => model.map(&mut Unfreeze(self)),
            };
            s.loaded.clear();
            s.loaded.extend_from_slice(theta);
        }
        &s.model
    }

    /// The batched rule on the micro-batch `x` (`labels.len()` examples) at θ: one recorded
    /// forward and backward ([`rows_of`]), on the thread's model.
    /// Each trainable parameter's rows taken out of `sums`, in θ's order, with its number of
    /// values (`None`: the loss does not reach it; its values are zeros).
    fn parts(&self, sums: &mut HashMap<ParamId, Tensor<2>>) -> Vec<(Option<Tensor<2>>, usize)> {
        self.params.iter().map(|p| (sums.remove(&p.id).filter(|_| p.len() > 0), p.len())).collect()
    }

    fn batched_rows(&self, theta: &[f32], x: &[f32], labels: &[u8], s: &mut BurnScratch<M>) -> Dry {
        let b = labels.len();
        let x = self.batch(x, b);
        let y = Tensor::<1, Int>::from_data(
            TensorData::new(labels.iter().map(|&l| i64::from(l)).collect(), [b]),
            &self.device,
        );
        rows_of(self.loaded(theta, s), x, y, b, &self.sizes)
    }

    fn batch(&self, x: &[f32], b: usize) -> Tensor<4> {
        let [c, h, w] = self.input;
        Tensor::from_data(TensorData::new(x[..b * c * h * w].to_vec(), [b, c, h, w]), &self.device)
    }

    /// One example's gradient, by its own forward and backward through autodiff, into `row`
    /// (θ's layout; a parameter the loss does not reach gets zeros); returns its loss. A value
    /// that cannot be read reads as NaN (non-finite: charged, never summed).
    fn one_example(&self, model: &M, x: &[f32], label: u8, row: &mut [f32]) -> f32 {
        /// Copies each trainable parameter's gradient into its place in the row.
        struct ReadGrads<'a, M: Classifier> {
            engine: &'a BurnEngine<M>,
            grads: &'a burn::tensor::Gradients,
            row: &'a mut [f32],
        }
        impl<M: Classifier> ModuleVisitor for ReadGrads<'_, M> {
            fn visit_float<const D: usize>(&mut self, param: &Param<Tensor<D>>) {
                let Some(p) = self.engine.param(param.id) else { return };
                if let Some(g) = param.val().grad(self.grads) {
                    self.row[p.offset..p.offset + p.len()].copy_from_slice(&to_host(g, p.len()));
                }
            }
        }
        let y = Tensor::<1, Int>::from_data(TensorData::new(vec![i64::from(label)], [1]), &self.device);
        let logits = model.forward(self.batch(x, 1));
        let loss = -log_softmax(logits, 1).gather(1, y.reshape([1, 1])).reshape([1]);
        let value = to_host(loss.clone().without_autodiff(), 1)[0];
        let grads = loss.sum().backward();
        row.fill(0.0);
        model.visit(&mut ReadGrads { engine: self, grads: &grads, row });
        value
    }
}

/// Refuses parameters whose per-example gradient is not their layer's: a reparameterization
/// (a LoRA adapter), a BatchNorm (batch statistics while training).
fn check_inventory(inv: &Inventory) -> Result<()> {
    let refuse = Error::Model;
    if let Some(path) = inv.reparameterized.first() {
        return Err(refuse(format!(
            "the parameter {path} has a reparameterization (e.g. a LoRA adapter): its per-example gradient is not \
             the layer's; merge the adapter into the weights (Module::materialize)"
        )));
    }
    if let Some(bn) = inv.params.iter().find(|f| f.types.iter().any(|t| t == "Struct:BatchNorm")) {
        return Err(refuse(format!(
            "{} belongs to a BatchNorm, which normalises with statistics of the whole batch while training \
             (frozen or not): no example has a gradient of its own, so none can be clipped, and its running \
             statistics would publish the training data unaccounted; use dpgd::nn::GroupNorm (or LayerNorm) instead",
            bn.path
        )));
    }
    Ok(())
}

/// What two dry runs of a model show.
struct DryRuns {
    /// The parameters a recorded layer call used.
    recorded: std::collections::HashSet<ParamId>,
    /// Values per example the recorded calls hold, all together and the most of one call.
    values_per_example: usize,
    largest_call: usize,
    /// Whether every row is f32 or f64.
    float_rows: bool,
}

/// Two dry runs on zero batches of 2 and 3 examples (see the comment inside), refusing a
/// forward that fails or gives other logits, and (`batched`) a layer called on a tensor whose
/// first axis is not the batch.
fn dry_runs<M: Classifier>(
    model: &M,
    device: &Device,
    (input, classes): ([usize; 3], usize),
    batched: bool,
    (inv, sizes): (&Inventory, &HashMap<ParamId, usize>),
) -> Result<DryRuns> {
    let refuse = Error::Model;
    // Two dry runs on zero batches of 2 and 3 examples: the forward must accept the data's
    // shape and give [b, classes] logits, and every layer call's per-example gradients must be
    // [b, n] — a layer on a tensor whose first axis is not the batch (a sequence-first input,
    // a constant broadcast over the batch) would give rows that are not per example.
    let mut recorded = std::collections::HashSet::new();
    let (mut values_per_example, mut largest_call) = (0, 0);
    // Rows in f32 or f64 can be kept on the device: the norm's bound covers their rounding.
    let mut float_rows = true;
    for b in [2, 3] {
        let dry = caught(|| {
            let x = Tensor::<4>::zeros([b, input[0], input[1], input[2]], device);
            let y = Tensor::<1, Int>::zeros([b], device);
            rows_of(model, x, y, b, sizes)
        })
        .map_err(|why| {
            refuse(format!(
                "the model's forward fails on examples of the data's shape {input:?} = [channels, height, width] \
                 ({why}): build the model for that shape"
            ))
        })?;
        let Dry { logits, rows, tape_params, values, largest, .. } = dry;
        if logits != [b, classes] {
            return Err(refuse(format!(
                "the model's forward returns logits of shape {logits:?} for {b} examples of shape {input:?}; the data \
                 have {classes} classes, so it must be [{b}, {classes}]"
            )));
        }
        if let Ok(rows) = &rows {
            float_rows &= rows.values().all(|r| matches!(r.dtype(), DType::F32 | DType::F64));
        }
        if let (true, Err((id, dims))) = (batched, rows) {
            let path = inv.params.iter().find(|f| f.id == id).map_or("a parameter", |f| f.path.as_str());
            return Err(refuse(format!(
                "the layer holding {path} was called on a tensor whose first axis is not the batch: its gradients for \
                 {b} examples have shape {dims:?}, not [{b}, {}]; call dpgd::nn layers on batch-first tensors \
                 (examples along axis 0), never on a tensor shared by the batch",
                sizes.get(&id).copied().unwrap_or(0)
            )));
        }
        recorded.extend(tape_params);
        (values_per_example, largest_call) = (values, largest);
    }
    Ok(DryRuns { recorded, values_per_example, largest_call, float_rows })
}

/// The trainable parameters in θ's order (a tied parameter once), each with its offset, and
/// θ's length; refuses (`batched`) a parameter no dry run recorded, and a model without any.
fn trainable_params(
    found: Vec<Found>,
    batched: bool,
    recorded: &std::collections::HashSet<ParamId>,
) -> Result<(Vec<TrainableParam>, usize)> {
    let refuse = Error::Model;
    let (mut params, mut offset) = (Vec::new(), 0usize);
    let mut seen = std::collections::HashSet::new();
    for Found { path, id, shape, trainable, types } in found {
        // A parameter held in two fields (tied) is one parameter, trained once.
        if !trainable || !seen.insert(id) {
            continue;
        }
        if batched && !recorded.contains(&id) {
            return Err(refuse(uncovered(&path, &types)));
        }
        let p = TrainableParam { path, id, shape, offset };
        offset = offset
            .checked_add(p.len())
            .filter(|&n| n <= super::MAX_VALUES)
            .ok_or_else(|| refuse("the model has more than 2^40 parameters".into()))?;
        params.push(p);
    }
    if offset == 0 {
        return Err(refuse("the model has no trainable parameters (are they all frozen?)".into()));
    }
    Ok((params, offset))
}

/// What one recorded forward and backward of a batch gives.
struct Dry {
    /// The logits' shape.
    logits: Vec<usize>,
    /// The per-example losses.
    losses: Tensor<1>,
    /// Per parameter, the per-example gradients `[b, n]` summed over the layer calls that used
    /// it; or the first parameter whose rows are not `[b, n]`, with their shape.
    rows: std::result::Result<HashMap<ParamId, Tensor<2>>, (ParamId, Vec<usize>)>,
    /// The parameters the recorded layer calls used.
    tape_params: Vec<ParamId>,
    /// Values per example the recorded calls hold (for memory estimates), and the most of one.
    values: usize,
    largest: usize,
}

/// Runs `model` on the batch `x` (`b` examples, labels `y`) with a tape open, back-propagates
/// the summed per-example cross-entropies once, and collects each layer call's per-example
/// gradients, checking each is `[b, size of its parameter]`.
fn rows_of<M: Classifier>(
    model: &M,
    x: Tensor<4>,
    y: Tensor<1, Int>,
    b: usize,
    sizes: &HashMap<ParamId, usize>,
) -> Dry {
    let (logits, mut tape) = record(|| model.forward(x));
    let dims = logits.dims().to_vec();
    let per_example_loss = -log_softmax(logits, 1).gather(1, y.reshape([b, 1])).reshape([b]);
    let mut g = per_example_loss.clone().sum().backward();
    let mut sums: HashMap<ParamId, Tensor<2>> = HashMap::new();
    let mut bad = None;
    for rec in &mut tape.records {
        for (id, row) in rec.per_example(&mut g) {
            if row.dims() != [b, sizes.get(&id).copied().unwrap_or(usize::MAX)] {
                bad.get_or_insert((id, row.dims().to_vec()));
                continue;
            }
            let row = match sums.remove(&id) {
                Some(prev) => prev + row,
                None => row,
            };
            sums.insert(id, row);
        }
    }
    Dry {
        logits: dims,
        losses: per_example_loss.without_autodiff(),
        rows: bad.map_or(Ok(sums), Err),
        tape_params: tape.records.iter().flat_map(|r| r.params()).collect(),
        values: tape.records.iter().map(|r| r.values_per_example()).sum(),
        largest: tape.records.iter().map(|r| r.values_per_example()).max().unwrap_or(0),
    }
}

/// Runs `f`, turning a panic (inside burn, or in a user's forward) into the message it carried.
fn caught<T>(f: impl FnOnce() -> T) -> std::result::Result<T, String> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).map_err(|panic| {
        let why = panic.downcast_ref::<String>().map(String::as_str).or_else(|| panic.downcast_ref::<&str>().copied());
        why.unwrap_or("a panic").to_string()
    })
}

/// The burn engine's micro-batch size on a GPU for a run that sets no `train.chunk`: the Opacus
/// CNN's full private step over 60,000 MNIST examples on an H200 (wgpu, 4 threads) took
/// 0.122 s at 2,048 and 0.155 s at 8,192; an earlier build, 0.178 s at 2,048, 0.182 s at 4,096,
/// 0.184 s at 1,024 and 0.199 s at 8,192
/// (`dpgd bench-step --engine burn --device wgpu --chunk C --threads T`).
pub const GPU_CHUNK: usize = 2048;

/// The burn engine's worker threads on a GPU for a run that sets no `train.threads`: each
/// thread submits its own micro-batches, so a few overlap the host's dispatch with the GPU's
/// work, while more contend for the one device. The Opacus CNN's step at chunk 2,048 on an H200:
/// 0.315 s on 1 thread, 0.219 s on 2, 0.178 s on 4, 0.171 s on 8 (another H200), 0.265 s on 16.
pub const GPU_THREADS: usize = 4;

/// The micro-batch size [`BurnEngine::new`] checks the rows at (the trainer checks again at
/// the run's own size).
const MIXING_CHECK_BATCH: usize = 4;

/// Why a trainable parameter cannot be trained privately.
fn uncovered(path: &str, types: &[String]) -> String {
    let owner = types.iter().rev().find_map(|t| t.strip_prefix("Struct:")).unwrap_or("module");
    let fix = if crate::nn::TRAINABLE.contains(&owner) {
        format!("use dpgd::nn::{owner} instead of burn::nn::{owner}")
    } else {
        "build it from dpgd::nn layers".to_string()
    };
    let layers = crate::nn::TRAINABLE.join(", ");
    format!(
        "{path} (in a {owner}) is trainable but no dpgd layer used it in the forward: per-example gradients exist \
         only for dpgd::nn layers ({layers}); {fix}, or freeze the parameter \
         (set_require_grad(false)), or train with BurnEngine::with_fallback (one backward per example: any layer, \
         much slower)"
    )
}

/// A tensor's `n` values on the host as f32 (converted from the model's float type). A tensor
/// that cannot be read, or has another size, reads as NaN: the trainer then treats the
/// examples' gradients as non-finite (`privacy.on_nonfinite`), charged and never summed.
/// (`n = 0`: whatever size it has, empty if it cannot be read.)
fn to_host<const D: usize>(t: Tensor<D>, n: usize) -> Vec<f32> {
    match t.into_data().convert::<f32>().try_into_vec::<f32>() {
        Ok(v) if v.len() == n || n == 0 => v,
        _ => vec![f32::NAN; n],
    }
}

impl<M: Classifier> PerExample for BurnEngine<M> {
    type Scratch = BurnScratch<M>;

    fn num_params(&self) -> usize {
        self.num_params
    }
    fn input_shape(&self) -> [usize; 3] {
        self.input
    }
    fn classes(&self) -> usize {
        self.classes
    }
    fn scratch(&self, _batch: usize) -> BurnScratch<M> {
        let model = self.template.lock().unwrap_or_else(PoisonError::into_inner).clone();
        BurnScratch { model, loaded: Vec::new(), logits: Vec::new(), kept: DeviceRows::default() }
    }
    fn preferred_chunk(&self) -> usize {
        if crate::device::is_host(&self.device) { super::DEFAULT_CHUNK } else { GPU_CHUNK }
    }
    fn preferred_threads(&self) -> Option<usize> {
        (!crate::device::is_host(&self.device)).then_some(GPU_THREADS)
    }
    fn scratch_bytes(&self, batch: usize) -> Option<u64> {
        // The model copy and θ, then per example: the rows and two temporaries of their size
        // (the rows on the host, or the clip's squares and scaled rows on the device: 3P), and
        // the recorded activations with their gradients (twice each). On a GPU keeping its rows,
        // only the model copy and θ are in host memory. On the CPU, the buffers the thread keeps
        // for its next calls (`nn::SPARE`, each at most one call's values for the micro-batch).
        let p = self.num_params as u64;
        let activations = (self.values_per_example as u64).checked_mul(2)?;
        let host = crate::device::is_host(&self.device);
        let kept = |examples: usize| {
            let spare = if host { crate::nn::SPARE as u64 } else { 0 };
            spare.checked_mul(self.largest_call as u64)?.checked_mul(examples as u64)
        };
        match self.backprop {
            Backprop::Batched if self.keep_rows && !host => p.checked_mul(8),
            Backprop::Batched => {
                let per_example = p.checked_mul(3)?.checked_add(activations)?;
                let values = per_example.checked_mul(batch as u64)?.checked_add(p.checked_mul(2)?)?;
                values.checked_add(kept(batch)?)?.checked_mul(4)
            }
            // One example at a time: its parameters' gradients on the device and on the host,
            // beside the model copy and θ (activations of burn's own layers are not measured).
            Backprop::OneBackwardPerExample => {
                p.checked_mul(4)?.checked_add(activations)?.checked_add(kept(1)?)?.checked_mul(4)
            }
        }
    }

    fn gradients(
        &self,
        theta: &[f32],
        x: &[f32],
        labels: &[u8],
        s: &mut BurnScratch<M>,
        grads: &mut [f32],
        losses: &mut [f32],
    ) {
        let b = labels.len();
        if self.backprop == Backprop::OneBackwardPerExample {
            let model = self.loaded(theta, s);
            for (i, (row, loss)) in grads.chunks_exact_mut(self.num_params).zip(losses.iter_mut()).take(b).enumerate() {
                let n = self.input_len();
                *loss = self.one_example(model, &x[i * n..(i + 1) * n], labels[i], row);
            }
            return;
        }
        let Dry { losses: loss, rows, .. } = self.batched_rows(theta, x, labels, s);
        losses[..b].copy_from_slice(&to_host(loss, b));
        // Rows that are not [b, n] (checked at construction, so only a model whose forward changes
        // with the batch) read as NaN: non-finite, charged and never summed.
        let Ok(mut sums) = rows else {
            grads[..b * self.num_params].fill(f32::NAN);
            return;
        };
        // Each parameter's rows straight into their columns of θ's layout (no concatenation on
        // the device: one copy of the [b, P] rows fewer).
        write_parts(self.parts(&mut sums), b, self.num_params, &mut grads[..b * self.num_params]);
    }

    /// On the device ([`rows_on_device`](Self::rows_on_device)): the rows stay there
    /// ([`DeviceRows`], one `[b, P']` tensor, P padded to whole norm blocks), and each row's
    /// squared norm is bounded from its blocked sum of squares, read back with the losses in one
    /// copy.
    fn gradients_with_norms<'s>(
        &self,
        theta: &[f32],
        x: &[f32],
        labels: &[u8],
        s: &'s mut BurnScratch<M>,
        grads: &mut [f32],
        losses: &mut [f32],
        norms: &mut [f64],
    ) -> Held<'s> {
        let b = labels.len();
        if !self.keep_rows {
            self.gradients(theta, x, labels, s, grads, losses);
            for (n, row) in norms.iter_mut().zip(grads.chunks_exact(self.num_params)).take(b) {
                *n = crate::clip::squared_norm(row);
            }
            return Held::Host(Vec::new());
        }
        let Dry { losses: loss, rows, .. } = self.batched_rows(theta, x, labels, s);
        // Rows that are not [b, n] (a model whose forward changes with the batch) have no bound:
        // non-finite, charged and never summed.
        let Ok(mut sums) = rows else {
            s.kept = DeviceRows::default();
            losses[..b].copy_from_slice(&to_host(loss, b));
            norms[..b].fill(f64::NAN);
            return Held::Device(&mut s.kept);
        };
        s.kept.set(self.parts(&mut sums));
        let (bounds, loss) = s.kept.squared_norm_bounds(b, loss);
        norms[..b].copy_from_slice(&bounds);
        losses[..b].iter_mut().zip(loss).for_each(|(l, v)| *l = v as f32);
        Held::Device(&mut s.kept)
    }

    fn keeps_rows(&self) -> bool {
        self.keep_rows
    }

    fn logits<'s>(&self, theta: &[f32], x: &[f32], b: usize, s: &'s mut BurnScratch<M>) -> &'s [f32] {
        // In validation mode (dropout off, no autodiff): these logits evaluate the model.
        let [c, h, w] = self.input;
        let inner = self.device.clone().without_autodiff();
        let x = Tensor::<4>::from_data(TensorData::new(x[..b * c * h * w].to_vec(), [b, c, h, w]), &inner);
        let logits = self.loaded(theta, s).valid().forward(x);
        s.logits = to_host(logits, b * self.classes);
        &s.logits
    }

    fn largest_part(&self) -> Option<(String, usize)> {
        self.params.iter().map(|p| (p.path.clone(), p.len())).max_by_key(|&(_, n)| n)
    }
    /// Seeds the device's random generator (a user model's dropout).
    fn reseed(&self, seed: u64) {
        self.device.seed(seed);
    }
}

#[cfg(all(test, feature = "flex"))]
mod tests {
    use burn::module::Module;
    use burn::tensor::activation::relu;
    use burn::tensor::{Device, Tensor};

    use super::{BurnEngine, PerExample};
    use crate::nn::{Classifier, Conv2d, Conv2dConfig, Linear, LinearConfig};

    #[derive(Module, Debug)]
    struct Net {
        conv1: Conv2d,
        conv2: Conv2d,
        fc: Linear,
    }

    impl Classifier for Net {
        fn forward(&self, x: Tensor<4>) -> Tensor<2> {
            let h = relu(self.conv2.forward(relu(self.conv1.forward(x))));
            self.fc.forward(h.flatten(1, 3))
        }
    }

    /// The memory estimate covers the buffers the CPU kernels keep on the thread after a
    /// micro-batch (what the largest convolution kept for its weight gradients), beside
    /// everything else it counted before them.
    #[test]
    fn the_memory_estimate_counts_the_buffers_kept_for_reuse() {
        let d = Device::flex();
        let net = Net {
            conv1: Conv2dConfig::new([1, 8], [3, 3]).init(&d),
            conv2: Conv2dConfig::new([8, 8], [3, 3]).init(&d),
            fc: LinearConfig::new(8 * 8 * 8, 3).init(&d),
        };
        let engine = BurnEngine::new(net, &d, [1, 12, 12], 3).expect("a conv net of dpgd layers");
        let (b, p) = (16, engine.num_params());
        let x: Vec<f32> = (0..b * 144).map(|i| (i as f32 * 0.37).sin()).collect();
        let y: Vec<u8> = (0..b).map(|i| (i % 3) as u8).collect();
        let theta = engine.current_params().expect("θ");
        let (mut rows, mut losses) = (vec![0.0f32; b * p], vec![0.0f32; b]);
        engine.gradients(&theta, &x, &y, &mut engine.scratch(b), &mut rows, &mut losses);
        let kept = crate::nn::kept_values();
        // conv2's input planes (8 × 10 × 10 per example: stride 1 without im2col on AVX-512), or
        // its im2col matrices (72 values for each of 64 positions)
        assert!(kept >= b * 8 * 100, "the kernels kept {kept} values; the test needs conv2's buffers kept");
        let estimate = engine.scratch_bytes(b).expect("fits");
        let (p, b, kept) = (p as u64, b as u64, kept as u64);
        let per_example = 3 * p + 2 * engine.values_per_example as u64;
        let without_kept = 4 * (per_example * b + 2 * p);
        assert!(estimate >= without_kept + 4 * kept, "estimate {estimate} B, kept {kept} values");
    }
}
