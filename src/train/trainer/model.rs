//! What the trainer needs of a model beyond its per-example gradients ([`TrainModel`]), one
//! implementation per engine.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;

use super::options::RunSummary;
use crate::error::Result;
use crate::model::export::ModelInput;
use crate::model::{BurnModel, ConfigModel, FastModel};
use crate::nn::Classifier;
use crate::per_example::{BurnEngine, Network, PerExample};
use crate::train::config::ValidConfig;
use crate::train::folder::RunFolder;
use crate::train::folder::write_json;

/// What the trainer needs of a model beyond its per-example gradients: its initial
/// parameters, how its files are written, and what identifies it in a run's state. One
/// implementation per engine: the fast engine's [`Network`] (built from the config's
/// `model`) and the burn engine's [`BurnEngine`] (any burn model of [`crate::nn`] layers).
pub trait TrainModel: PerExample {
    /// θ before the first step (from `model.init_seed` where the engine initialises).
    ///
    /// # Errors
    /// If the parameters cannot be read.
    fn initial_params(&self, seed: u64) -> Result<Vec<f32>>;
    /// Writes the model holding θ into the run folder.
    ///
    /// # Errors
    /// A file that cannot be written.
    fn write_model(&self, theta: &[f32], input: &ModelInput, folder: &RunFolder, cfg: &ValidConfig) -> Result<()>;
    /// What identifies the model in the run's state, in place of the config's `model` section
    /// (`None`: the config's section is the model).
    fn identity(&self) -> Option<serde_json::Value>;
    /// The engine that computes its per-example gradients, in words, for run output.
    fn engine_name(&self) -> &'static str {
        "the burn engine"
    }
    /// The device it computes on, in words (the adapter, for a GPU backend), for run output
    /// and the confidential record (`None`: the fast engine, on the CPU).
    fn device_name(&self) -> Option<String> {
        None
    }
    /// Where θ₀, the weights training starts from, came from, for `privacy.json`: the
    /// guarantee assumes them public (independent of the training data).
    fn initial_weights(&self, _cfg: &ValidConfig) -> String {
        "the model's values when its engine was built (initialised by the caller's code, or weights it loaded to \
         fine-tune): assumed public, that is, not computed from this training data (weights trained elsewhere \
         count only if that training did not see these examples)"
            .into()
    }
}

/// θ₀ of a config's model: drawn from `model.init_seed`.
fn drawn_from_seed(cfg: &ValidConfig) -> String {
    format!(
        "drawn at random from model.init_seed = {}, independent of the training data (public)",
        cfg.config().model.init_seed
    )
}

impl TrainModel for Network {
    fn initial_params(&self, seed: u64) -> Result<Vec<f32>> {
        Ok(self.init_params(&mut ChaCha8Rng::seed_from_u64(seed)))
    }
    fn write_model(&self, theta: &[f32], input: &ModelInput, folder: &RunFolder, cfg: &ValidConfig) -> Result<()> {
        BurnModel::from_params(self, theta, &cfg.config().train.device.device()?)?.save(&folder.model())?;
        write_json(&folder.model_spec(), self.spec())?;
        crate::model::export::save(self, theta, input, &folder.model_safetensors())
    }
    fn identity(&self) -> Option<serde_json::Value> {
        None
    }
    fn engine_name(&self) -> &'static str {
        "the fast CPU engine"
    }
    fn initial_weights(&self, cfg: &ValidConfig) -> String {
        drawn_from_seed(cfg)
    }
}

impl<M: Classifier> TrainModel for BurnEngine<M> {
    fn device_name(&self) -> Option<String> {
        Some(crate::device::describe(self.device()))
    }
    /// The model's own initial values (the user initialised it); `seed` is not used.
    fn initial_params(&self, _seed: u64) -> Result<Vec<f32>> {
        self.current_params()
    }
    fn write_model(&self, theta: &[f32], input: &ModelInput, folder: &RunFolder, _cfg: &ValidConfig) -> Result<()> {
        crate::model::save_module(self.model_with(theta)?, &folder.model())?;
        crate::model::export::save_burn(self.params(), theta, input, None, &folder.model_safetensors())
    }
    fn identity(&self) -> Option<serde_json::Value> {
        let params: Vec<_> =
            self.params().iter().map(|p| serde_json::json!({"path": p.path, "shape": p.shape})).collect();
        Some(serde_json::json!({ "burn_module": params }))
    }
}

impl TrainModel for ConfigModel {
    fn device_name(&self) -> Option<String> {
        self.engine.device_name()
    }
    /// The model's initial values, drawn when it was built from the config's `model.init_seed`.
    fn initial_params(&self, _seed: u64) -> Result<Vec<f32>> {
        self.engine.current_params()
    }
    fn write_model(&self, theta: &[f32], input: &ModelInput, folder: &RunFolder, _cfg: &ValidConfig) -> Result<()> {
        crate::model::save_module(self.engine.model_with(theta)?, &folder.model())?;
        write_json(&folder.model_spec(), &self.spec)?;
        let safetensors = folder.model_safetensors();
        crate::model::export::save_burn(self.engine.params(), theta, input, Some(&self.spec), &safetensors)
    }
    /// The config's `model` section is the model.
    fn identity(&self) -> Option<serde_json::Value> {
        None
    }
    fn initial_weights(&self, cfg: &ValidConfig) -> String {
        drawn_from_seed(cfg)
    }
}

impl TrainModel for FastModel {
    /// The module's own values (the caller initialised or loaded them); `seed` is not used.
    fn initial_params(&self, _seed: u64) -> Result<Vec<f32>> {
        Ok(self.start().to_vec())
    }
    fn write_model(&self, theta: &[f32], input: &ModelInput, folder: &RunFolder, cfg: &ValidConfig) -> Result<()> {
        self.network().write_model(theta, input, folder, cfg)
    }
    /// The architecture, in place of the config's `model` section (which a run of your model
    /// does not use).
    fn identity(&self) -> Option<serde_json::Value> {
        Some(serde_json::json!({ "sequential": self.spec() }))
    }
    fn engine_name(&self) -> &'static str {
        "the fast CPU engine"
    }
}

/// A finished run of a user's model: its summary, the returned parameters θ and the engine
/// that turns them back into the model ([`BurnEngine::model_with`]).
#[derive(Debug)]
pub struct Trained<E> {
    /// The run's summary (`result.json`, `privacy.json`).
    pub summary: RunSummary,
    /// The returned model's parameters (the selected step's, under a stopping rule).
    pub params: Vec<f32>,
    /// The engine the run trained with.
    pub engine: E,
}
