//! Your sequential model at the fast engine's speed ([`FastModel`]): a [`BurnModel`] — the burn
//! module of a [`ModelSpec`] you build in code ([`ModelSpec::sequential`], [`ModelSpec::then`])
//! or load from a record — trained by the fast CPU engine from the module's own values, and the
//! trained parameters turned back into the module.
//!
//! The fast engine computes a layer of each kind by its own per-example rule
//! ([`crate::per_example::layers`]), the burn engine by burn's autodiff and [`crate::nn`]'s
//! probes; both give the same clipped sums and charges from the same model (the engine contract
//! test). Any burn composition — a residual add, a layer used twice, a kind without a fast rule —
//! trains on the burn engine ([`BurnEngine`](crate::per_example::BurnEngine)); a model that is a
//! sequence of the kinds marked `fast` in [`crate::arch::kinds`] can take this path instead.

use burn::tensor::Device;

use super::BurnModel;
use crate::arch::ModelSpec;
use crate::error::{Error, Result};
use crate::per_example::{Held, Layer, Network, PerExample, Workspace};

/// A sequential burn model of the fast engine's kinds, on the fast CPU engine (θ in its layout:
/// PyTorch's, [`Network`]), starting from the module's own values.
#[derive(Debug)]
pub struct FastModel {
    net: Network,
    start: Vec<f32>,
    device: Device,
}

impl FastModel {
    /// `model`, the burn module of `spec`, on the fast engine, starting from its values (as the
    /// burn engine starts a user's model: the caller initialised it, or loaded weights to
    /// fine-tune). Its modules live on `device`, where [`model_with`](Self::model_with) puts the
    /// trained ones.
    ///
    /// # Errors
    /// [`Error::Model`] naming the first layer of a kind the fast engine has no rule for (train
    /// such a model on the burn engine); [`Error::Config`] naming `model` for a spec whose shapes
    /// do not fit; [`Error::Parameters`] for a module that is not `spec`'s.
    pub fn new(spec: &ModelSpec, model: &BurnModel, device: &Device) -> Result<Self> {
        if let Some((i, layer)) = spec.layers.iter().enumerate().find(|(_, l)| !Layer::supports(l)) {
            return Err(Error::Model(format!(
                "layer {i} ({}) has no rule in the fast engine: train this model on the burn engine \
                 (dpgd::per_example::BurnEngine::new), which takes every kind",
                layer.name()
            )));
        }
        let net = Network::new(spec).map_err(|e| Error::config("model", e.to_string()))?;
        let start = model.to_params(&net)?;
        Ok(Self { net, start, device: device.clone() })
    }

    /// The architecture.
    #[must_use]
    pub fn spec(&self) -> &ModelSpec {
        self.net.spec()
    }

    /// The module's values when this engine was built, in θ's layout: where training starts.
    #[must_use]
    pub fn start(&self) -> &[f32] {
        &self.start
    }

    /// The compiled network, whose layout θ has.
    #[must_use]
    pub fn network(&self) -> &Network {
        &self.net
    }

    /// The burn module holding `theta` (in this engine's layout), on the device given to
    /// [`new`](Self::new): the trained model, from [`Trained::params`](crate::train::Trained).
    ///
    /// # Errors
    /// [`Error::Parameters`] if `theta` is not this model's length.
    pub fn model_with(&self, theta: &[f32]) -> Result<BurnModel> {
        BurnModel::from_params(&self.net, theta, &self.device)
    }
}

/// Every method is the fast engine's ([`Network`]'s).
impl PerExample for FastModel {
    type Scratch = Workspace;

    fn num_params(&self) -> usize {
        PerExample::num_params(&self.net)
    }
    fn preferred_chunk(&self) -> usize {
        self.net.preferred_chunk()
    }
    fn input_shape(&self) -> [usize; 3] {
        self.net.input_shape()
    }
    fn classes(&self) -> usize {
        PerExample::classes(&self.net)
    }
    fn scratch(&self, batch: usize) -> Workspace {
        self.net.scratch(batch)
    }
    fn scratch_bytes(&self, batch: usize) -> Option<u64> {
        self.net.scratch_bytes(batch)
    }
    fn gradients(
        &self,
        theta: &[f32],
        x: &[f32],
        labels: &[u8],
        ws: &mut Workspace,
        grads: &mut [f32],
        losses: &mut [f32],
    ) {
        self.net.gradients(theta, x, labels, ws, grads, losses);
    }
    fn gradients_with_norms<'s>(
        &self,
        theta: &[f32],
        x: &[f32],
        labels: &[u8],
        ws: &'s mut Workspace,
        grads: &mut [f32],
        losses: &mut [f32],
        norms: &mut [f64],
    ) -> Held<'s> {
        self.net.gradients_with_norms(theta, x, labels, ws, grads, losses, norms)
    }
    fn logits<'s>(&self, theta: &[f32], x: &[f32], b: usize, ws: &'s mut Workspace) -> &'s [f32] {
        self.net.logits(theta, x, b, ws)
    }
    fn largest_part(&self) -> Option<(String, usize)> {
        self.net.largest_part()
    }
}
