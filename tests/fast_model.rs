//! A user's sequential model on the fast engine ([`FastModel`]): built in code, trained from its
//! own values exactly as the config's model of the same architecture is, turned back into its
//! burn module, resumed only as itself, and refused where the fast engine has no rule.

mod common;

use burn::tensor::{Device, Tensor, TensorData};
use dpgd::arch::{LayerSpec, ModelSpec, kinds};
use dpgd::model::{BurnModel, FastModel};
use dpgd::per_example::{Network, PerExample};
use dpgd::train::{Run, RunFolder, RunOptions, TrainConfig, ValidConfig};
use rand::SeedableRng;

/// The Opacus CNN written layer by layer, as a user writes it.
fn opacus_cnn() -> ModelSpec {
    ModelSpec::sequential([1, 28, 28], 10)
        .then(kinds::Conv2d { out_channels: 16, kernel: 8, stride: 2, padding: 3, bias: true })
        .then(kinds::Relu)
        .then(kinds::MaxPool2d { kernel: 2, stride: 1 })
        .then(kinds::Conv2d { out_channels: 32, kernel: 4, stride: 2, padding: 0, bias: true })
        .then(kinds::Relu)
        .then(kinds::MaxPool2d { kernel: 2, stride: 1 })
        .then(kinds::Flatten)
        .then(kinds::Linear { out_features: 32, bias: true })
        .then(kinds::Relu)
        .then(kinds::Linear { out_features: 10, bias: true })
}

/// Filtered GD on 200 fixture examples with a fixed seed, 4 steps, the config's model the
/// Opacus CNN from `model.init_seed = 3`.
fn config() -> ValidConfig {
    let text = common::fixture_config(
        "fast-model",
        "opacus-cnn",
        (200, 50),
        "method = \"filtered\"\nepsilon = 2.0\ndelta = 1e-5\nclip = 1.0\nworst_case_steps = 2",
        "lr = 0.5\nmax_steps = 4\nseed = 5",
    );
    let text = text.replace("preset = \"opacus-cnn\"", "preset = \"opacus-cnn\"\ninit_seed = 3");
    TrainConfig::from_toml(&text, &[]).unwrap().validate().unwrap()
}

/// The module a user would build, holding the config's θ₀ (drawn as the fast engine draws it).
fn module(spec: &ModelSpec, device: &Device) -> BurnModel {
    let net = Network::new(spec).unwrap();
    let theta = net.init_params(&mut rand_chacha::ChaCha8Rng::seed_from_u64(3));
    BurnModel::from_params(&net, &theta, device).unwrap()
}

fn bytes(p: &std::path::Path) -> Vec<u8> {
    std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

#[test]
fn the_builder_writes_the_presets() {
    assert_eq!(opacus_cnn(), ModelSpec::opacus_cnn());
    assert_eq!(ModelSpec::sequential([1, 4, 4], 3).then(LayerSpec::Flatten(kinds::Flatten)).layers.len(), 1);
}

/// From the same θ₀, the user's module trains on the fast engine exactly as the config's model
/// does: the same published model and metrics, bit for bit; and the trained module computes the
/// fast engine's logits.
#[test]
fn a_sequential_module_trains_as_the_configs_model_and_comes_back_as_a_module() {
    let cfg = config();
    let data = cfg.config().data.load().unwrap();
    let device = Device::flex();
    let (by_config, by_module) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    Run::new(&cfg, &data, by_config.path()).train().unwrap();
    let engine = FastModel::new(&opacus_cnn(), &module(&opacus_cnn(), &device), &device).unwrap();
    let trained = Run::new(&cfg, &data, by_module.path()).train_model(engine).unwrap();
    let (a, b) = (RunFolder::new(by_config.path()), RunFolder::new(by_module.path()));
    for (x, y) in [(a.model_safetensors(), b.model_safetensors()), (a.metrics_jsonl(), b.metrics_jsonl())] {
        assert!(bytes(&x) == bytes(&y), "{} differs between the config's model and the module", y.display());
    }
    // The trained module: the fast engine's logits, through burn's own forward.
    let model = trained.engine.model_with(&trained.params).unwrap();
    let test = data.test.head(8);
    let mut x = vec![0.0f32; 8 * 784];
    test.normalised_into(0..8, &dpgd::data::Normalize::MNIST, &mut x);
    let mut ws = trained.engine.scratch(8);
    let fast = trained.engine.logits(&trained.params, &x, 8, &mut ws).to_vec();
    let burn = model.forward(Tensor::<4>::from_data(TensorData::new(x, [8, 1, 28, 28]), &device));
    let burn = burn.into_data().convert::<f32>().try_into_vec::<f32>().unwrap();
    for (f, g) in fast.iter().zip(&burn) {
        assert!((f - g).abs() <= 1e-4 * f.abs().max(1.0), "fast {f} against the module's {g}");
    }
}

/// A run of one architecture resumes only with it: the folder's identity is the module's spec.
#[test]
fn a_run_resumes_only_with_its_own_architecture() {
    let cfg = config();
    let data = cfg.config().data.load().unwrap();
    let device = Device::flex();
    let dir = tempfile::tempdir().unwrap();
    let stop = RunOptions { stop_after: Some(1), ..Default::default() };
    let engine = FastModel::new(&opacus_cnn(), &module(&opacus_cnn(), &device), &device).unwrap();
    Run::new(&cfg, &data, dir.path()).options(stop).train_model(engine).unwrap();
    let mlp = ModelSpec::mlp(32);
    let other = FastModel::new(&mlp, &module(&mlp, &device), &device).unwrap();
    let refused = Run::new(&cfg, &data, dir.path()).train_model(other).map(|t| t.summary.steps);
    let message = format!("{refused:?}");
    assert!(message.contains("model.sequential.layers"), "a folder of the Opacus CNN resumed with an MLP: {message}");
    let engine = FastModel::new(&opacus_cnn(), &module(&opacus_cnn(), &device), &device).unwrap();
    let done = Run::new(&cfg, &data, dir.path()).train_model(engine).unwrap();
    assert_eq!(done.summary.steps, 4);
}

#[test]
fn foreign_modules_are_refused() {
    let device = Device::flex();
    let mlp = ModelSpec::mlp(32);
    match FastModel::new(&ModelSpec::opacus_cnn(), &module(&mlp, &device), &device) {
        Err(dpgd::Error::Parameters(_)) => {}
        other => panic!("an MLP's module taken for the Opacus CNN: {other:?}"),
    }
}
