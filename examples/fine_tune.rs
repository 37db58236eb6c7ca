//! Fine-tune a pretrained burn model privately: start from weights trained without privacy on
//! PUBLIC data, freeze what should not change, and train the rest with individual privacy
//! accounting on the private data.
//!
//! The guarantee covers the private data only if the starting weights never saw it: here the
//! first `--public` MNIST training images stand for a public dataset, and the private run trains
//! on the others (disjoint). Pretraining is non-private GD on the public slice (`--pretrained`
//! skips it and loads a `model.safetensors` of this model, e.g. from an earlier run), the stem
//! convolution is frozen (`--train-all` trains it too), and the private run is private GD with
//! individual filtering. Its `publishable/privacy.json` says the starting weights are assumed
//! public (`accounting.rests_on.initial_weights`).
//!
//!     cargo run --release --example fine_tune -- --help
//!     cargo run --release --example fine_tune                    # MNIST: 10,000 public, 50,000 private

use std::path::{Path, PathBuf};

use anyhow::Context;
use burn::module::Module;
use burn::tensor::activation::relu;
use burn::tensor::{Device, Tensor};
use clap::Parser;
use dpgd::data::Dataset;
use dpgd::nn::{Classifier, Conv2d, Conv2dConfig, Linear, LinearConfig};
use dpgd::per_example::BurnEngine;
use dpgd::train::{Observer, RunFolder, StepReport, TrainConfig, Warning};

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Pretrains a small CNN on a public slice of MNIST, then fine-tunes it privately on the rest.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// The four MNIST IDX files (fetched into datasets/mnist if missing).
    #[arg(long, default_value = "datasets/mnist")]
    data: PathBuf,
    /// How many of the first training images stand for public data (the private run trains on
    /// the others).
    #[arg(long, default_value_t = 10_000)]
    public: usize,
    /// Of the remaining images, how many the private run trains on (0: all).
    #[arg(long, default_value_t = 0)]
    private: usize,
    /// Use only the first N test images (0: all).
    #[arg(long, default_value_t = 0)]
    test_subset: usize,
    /// Start from this model.safetensors (a run of this model) instead of pretraining.
    #[arg(long)]
    pretrained: Option<PathBuf>,
    /// Non-private GD steps on the public slice.
    #[arg(long, default_value_t = 40)]
    pretrain_steps: usize,
    /// Train the stem convolution too (by default it is frozen).
    #[arg(long)]
    train_all: bool,
    /// ε of the private run's (ε, δ)-DP guarantee.
    #[arg(long, default_value_t = 1.0)]
    epsilon: f64,
    /// k: plain private GD's step count (each example's budget is k·clip²).
    #[arg(long, default_value_t = 30)]
    worst_case_steps: usize,
    /// Steps individual filtering may take.
    #[arg(long, default_value_t = 60)]
    max_steps: usize,
    /// Where both runs go (`pretrain/` and `private/`).
    #[arg(long, default_value = "runs/fine-tune")]
    out: PathBuf,
}

/// Conv (stride 2) → ReLU → conv (stride 2) → ReLU → linear.
#[derive(Module, Debug)]
struct SmallCnn {
    stem: Conv2d,
    conv: Conv2d,
    head: Linear,
}

impl SmallCnn {
    fn new(device: &Device) -> Self {
        Self {
            stem: Conv2dConfig::new([1, 8], [4, 4]).with_stride([2, 2]).init(device),
            conv: Conv2dConfig::new([8, 16], [4, 4]).with_stride([2, 2]).init(device),
            head: LinearConfig::new(16 * 5 * 5, 10).init(device),
        }
    }
}

impl Classifier for SmallCnn {
    fn forward(&self, x: Tensor<4>) -> Tensor<2> {
        let h = relu(self.conv.forward(relu(self.stem.forward(x))));
        self.head.forward(h.flatten(1, 3))
    }
}

/// A run's config: `method` and its privacy settings, the shared rest.
fn config(name: &str, privacy: &str, train: &str) -> anyhow::Result<dpgd::train::ValidConfig> {
    let text = format!("name = \"{name}\"\n[privacy]\n{privacy}\n[train]\nchunk = 64\n{train}\n");
    Ok(TrainConfig::from_toml(&text, &[])?.validate()?)
}

/// A line every twentieth of the run's steps (and each warning): pretraining and the private
/// run each take minutes on a CPU (the library never prints; this program does).
struct Progress(&'static str);

impl Observer for Progress {
    fn step(&mut self, r: &StepReport) {
        if r.step == 1 || r.step.is_multiple_of((r.max_steps / 20).max(1)) || r.step == r.max_steps {
            let acc = r.test_accuracy.map_or(String::new(), |a| format!(", test accuracy {:.2}%", 100.0 * a));
            eprintln!("{}: step {}/{}{acc}", self.0, r.step, r.max_steps);
        }
    }
    fn warning(&mut self, w: &Warning) {
        eprintln!("{w}");
    }
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    if a.data == Path::new("datasets/mnist") && !a.data.join("train-images-idx3-ubyte.gz").exists() {
        dpgd::data::fetch::fetch("mnist", &a.data, None).context("fetching MNIST into datasets/mnist")?;
    }
    let mnist = Dataset::load(&a.data, Some(10))?;
    let test = mnist.test.clone().truncated(a.test_subset);
    let end = if a.private == 0 { mnist.train.len() } else { a.public + a.private };
    let public = Dataset::in_memory(mnist.train.slice(0..a.public), test.clone(), Some(10), "public".as_ref())?;
    let private = Dataset::in_memory(mnist.train.slice(a.public..end), test, Some(10), "private".as_ref())?;
    let device = Device::flex();

    // 1. Weights trained without privacy on the public slice (or given).
    let weights = match &a.pretrained {
        Some(path) => path.clone(),
        None => {
            let pretrain = config(
                "pretrain",
                &format!(
                    "method = \"non-private\"\ndelta = 1e-5\nclip = 1.0\nepsilon = 1.0\nworst_case_steps = {}",
                    a.pretrain_steps
                ),
                "lr = 0.1\nmomentum = 0.9\neval_every = 10",
            )?;
            let engine = BurnEngine::new(SmallCnn::new(&device), &device, public.shape(), public.classes())?;
            let dir = a.out.join("pretrain");
            let done = dpgd::train::Run::new(&pretrain, &public, &dir)
                .observer(&mut Progress("pretraining"))
                .train_model(engine)?;
            let accuracy = done.summary.result.context("pretraining stopped")?.test_accuracy;
            eprintln!("pretrained without privacy on {} public images: {:.2}%", public.train.len(), 100.0 * accuracy);
            RunFolder::new(&dir).model_safetensors()
        }
    };

    // 2. Into a fresh model, by parameter path; freeze the stem.
    let loaded = dpgd::model::export::load_into(SmallCnn::new(&device), &weights)?;
    let mut model = loaded.model;
    if !a.train_all {
        model.stem = model.stem.no_grad();
    }

    // 3. Private fine-tuning on the private rest (the frozen stem is not trained, nor charged).
    let cfg = config(
        "private",
        &format!(
            "method = \"filtered\"\nepsilon = {}\ndelta = 1e-5\nclip = 1.0\nworst_case_steps = {}",
            a.epsilon, a.worst_case_steps
        ),
        &format!("lr = 2.0\nmax_steps = {}\neval_every = 5", a.max_steps),
    )?;
    let engine = BurnEngine::new(model, &device, private.shape(), private.classes())?;
    let trainable: usize = engine.params().iter().map(|p| p.shape.iter().product::<usize>()).sum();
    eprintln!("fine-tuning {trainable} parameters privately on {} images", private.train.len());
    let dir = a.out.join("private");
    let trained =
        dpgd::train::Run::new(&cfg, &private, &dir).observer(&mut Progress("private run")).train_model(engine)?;
    let result = trained.summary.result.context("the private run stopped before its end")?;
    let privacy = trained.summary.privacy.context("the private run stopped before its end")?;
    println!("fine-tuned privately: test accuracy {:.2}%", 100.0 * result.test_accuracy);
    println!("{}", privacy.summary);
    if let Some(w) = privacy.accounting.as_ref().and_then(|acc| acc.rests_on.get("initial_weights")) {
        println!("starting weights: {w}");
    }
    Ok(())
}
