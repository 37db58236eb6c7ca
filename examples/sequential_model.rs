//! Train YOUR sequential model at the fast engine's speed.
//!
//! The model below — the Opacus MNIST CNN, written layer by layer — is a sequence of the kinds the
//! fast CPU engine has a rule for, so it trains there (`dpgd::model::FastModel`): 7.0–8.8× faster
//! than Opacus 1.6 on a 2-core Xeon, where the burn engine that trains any burn model is 3.1–3.8×
//! (`dpgd bench-step --engine sequential` and `--engine burn`; experiments/speed/results). Its burn module is yours before
//! and after: initialise it, or load weights to fine-tune, and get the trained module back. A
//! residual connection is the kind `add` (`configs/mnist-residual.toml`; docs/custom-models.md);
//! a layer used twice or a branch other than an addition trains on the burn engine instead
//! (`examples/custom_model.rs`).
//!
//!     cargo run --release --example sequential_model -- --help
//!     cargo run --release --example sequential_model        # MNIST at (1, 1e-5)-DP, DP-SGD

use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use dpgd::arch::{ModelSpec, kinds};
use dpgd::model::{BurnModel, FastModel};
use dpgd::train::TrainConfig;

/// Trains the Opacus CNN, written as a sequential model, by DP-SGD on the fast engine and prints
/// its guarantee.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Dataset folder with the four MNIST IDX files (fetched first if missing, as `dpgd train`
    /// does).
    #[arg(long, default_value = "datasets/mnist")]
    data: PathBuf,
    /// ε of the (ε, δ)-DP guarantee.
    #[arg(long, default_value_t = 1.0)]
    epsilon: f64,
    /// DP-SGD's steps (Poisson rate 240/60,000: 3,750 steps are 15 epochs).
    #[arg(long, default_value_t = 3750)]
    steps: usize,
    /// Use only the first N training examples (0: all).
    #[arg(long, default_value_t = 0)]
    train_subset: usize,
    /// Use only the first N test examples (0: all).
    #[arg(long, default_value_t = 0)]
    test_subset: usize,
    /// The run folder.
    #[arg(long, default_value = "runs/sequential-model")]
    out: PathBuf,
    /// Train the residual GroupNorm network (a residual block added by `add`) instead of the
    /// Opacus CNN.
    #[arg(long)]
    residual: bool,
}

/// The Opacus MNIST CNN for examples of `input` and `classes` classes, layer by layer.
fn model(input: [usize; 3], classes: usize) -> ModelSpec {
    ModelSpec::sequential(input, classes)
        .then(kinds::Conv2d { out_channels: 16, kernel: 8, stride: 2, padding: 3, bias: true })
        .then(kinds::Relu)
        .then(kinds::MaxPool2d { kernel: 2, stride: 1 })
        .then(kinds::Conv2d { out_channels: 32, kernel: 4, stride: 2, padding: 0, bias: true })
        .then(kinds::Relu)
        .then(kinds::MaxPool2d { kernel: 2, stride: 1 })
        .then(kinds::Flatten)
        .then(kinds::Linear { out_features: 32, bias: true })
        .then(kinds::Relu)
        .then(kinds::Linear { out_features: classes, bias: true })
}

/// examples/custom_model.rs's residual network with GroupNorm, as a sequence: the block's input
/// (layer 2's output) is added back by `add`.
fn residual(input: [usize; 3], classes: usize) -> ModelSpec {
    ModelSpec::sequential(input, classes)
        .then(kinds::Conv2d { out_channels: 16, kernel: 3, stride: 2, padding: 1, bias: true }) // 0
        .then(kinds::GroupNorm { groups: 4 })
        .then(kinds::Relu) // 2: the block's input
        .then(kinds::Conv2d { out_channels: 16, kernel: 3, stride: 1, padding: 1, bias: true })
        .then(kinds::GroupNorm { groups: 4 })
        .then(kinds::Relu)
        .then(kinds::Add { from: 2 }) // h + relu(norm(conv(h)))
        .then(kinds::AvgPool2d { kernel: 2, stride: 2 })
        .then(kinds::Flatten)
        .then(kinds::Linear { out_features: classes, bias: true })
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    if a.data == std::path::Path::new("datasets/mnist") && !a.data.join("train-images-idx3-ubyte.gz").exists() {
        dpgd::data::fetch::fetch("mnist", &a.data, None).context("fetching MNIST into datasets/mnist")?;
    }
    let config = format!(
        "name = \"sequential-model\"\n[data]\ndir = {dir:?}\ntrain_subset = {}\ntest_subset = {}\n\
         [privacy]\nmethod = \"sgd\"\nsample_rate = 0.004\nepsilon = {}\ndelta = 1e-5\nclip = 1.5\n\
         worst_case_steps = {}\n[train]\nlr = 0.25\neval_every = 0\n",
        a.train_subset,
        a.test_subset,
        a.epsilon,
        a.steps,
        dir = a.data.display().to_string(),
    );
    let cfg = TrainConfig::from_toml(&config, &[])?.validate()?;
    let data = cfg.config().data.load()?;
    let device = cfg.config().train.device.device()?;
    let spec = if a.residual { residual(data.shape(), data.classes()) } else { model(data.shape(), data.classes()) };
    device.seed(7);
    let module = BurnModel::from_spec(&spec, &device)?; // burn's initialisers: yours to replace
    let engine = FastModel::new(&spec, &module, &device)?;
    let trained = dpgd::train::Run::new(&cfg, &data, &a.out).train_model(engine)?;
    let module: BurnModel = trained.engine.model_with(&trained.params)?; // your module, trained
    eprintln!("the trained module holds {} parameters", burn::module::Module::num_params(&module));
    let result = trained.summary.result.context("the run stopped before its end")?;
    let privacy = trained.summary.privacy.context("the run stopped before its end")?;
    println!("test accuracy: {:.2}%", 100.0 * result.test_accuracy);
    println!("{}", privacy.summary);
    println!("run folder: {} (publishable/privacy.json says what the guarantee rests on)", a.out.display());
    Ok(())
}
