//! Train YOUR burn model privately, with individual privacy accounting.
//!
//! The model below — a residual CNN with GroupNorm — is ordinary burn code except that its
//! trainable layers come from `dpgd::nn` instead of `burn::nn`: the general path, for any
//! composition of burn operations. (This network happens to be a sequence of the fast engine's
//! kinds with an `add`: `configs/mnist-residual.toml` writes it as a layer list, which trains on
//! the fast CPU engine several times faster; see docs/custom-models.md.) It is trained by
//! private gradient descent with individual filtering (Feldman & Zrnic 2021, Algorithm 3) on the
//! burn engine, and the run folder is the same as `dpgd train`'s: `publishable/privacy.json`
//! states the guarantee.
//!
//!     cargo run --release --example custom_model -- --help
//!     cargo run --release --example custom_model                      # MNIST at (1, 1e-5)-DP
//!     cargo run --release --example custom_model -- --data my/idx-or-csv-folder --epsilon 2

use std::path::PathBuf;

use anyhow::Context;
use burn::module::Module;
use burn::nn::PaddingConfig2d;
use burn::tensor::activation::relu;
use burn::tensor::{Device, Tensor};
use clap::Parser;
use dpgd::nn::{
    AvgPool2d, AvgPool2dConfig, Classifier, Conv2d, Conv2dConfig, GroupNorm, GroupNormConfig, Linear, LinearConfig,
};
use dpgd::per_example::BurnEngine;
use dpgd::train::{FinishInfo, Observer, StepReport, TrainConfig, Warning};

/// A private step allocates and frees buffers of megabytes per micro-batch; mimalloc reuses them
/// where glibc's malloc returns them to the kernel and faults them in again (the `dpgd` binary
/// does the same; on the Opacus CNN it cut the burn engine's step by about a quarter).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Trains a residual CNN with GroupNorm (a user-defined burn model) privately with individual
/// filtering and prints its privacy guarantee.
#[derive(Parser, Debug)]
#[command(version)]
struct Args {
    /// Dataset folder: the four MNIST IDX files (images (n,H,W) or (n,H,W,C)), or train.csv and
    /// test.csv. `datasets/mnist` is fetched first if missing (as `dpgd train` does).
    #[arg(long, default_value = "datasets/mnist")]
    data: PathBuf,
    /// ε of the (ε, δ)-DP guarantee.
    #[arg(long, default_value_t = 1.0)]
    epsilon: f64,
    /// δ of the guarantee.
    #[arg(long, default_value_t = 1e-5)]
    delta: f64,
    /// k: plain private GD's step count; each example's budget is k·clip².
    #[arg(long, default_value_t = 60)]
    worst_case_steps: usize,
    /// Steps individual filtering may take (examples drop out as their budgets run out).
    #[arg(long, default_value_t = 100)]
    max_steps: usize,
    /// The clip norm C.
    #[arg(long, default_value_t = 1.0)]
    clip: f64,
    /// The learning rate.
    #[arg(long, default_value_t = 4.0)]
    lr: f64,
    /// Use only the first N training examples (0: all).
    #[arg(long, default_value_t = 0)]
    train_subset: usize,
    /// Use only the first N test examples (0: all).
    #[arg(long, default_value_t = 0)]
    test_subset: usize,
    /// The run folder (an interrupted run continues when started again with the same arguments).
    #[arg(long, default_value = "runs/custom-model")]
    out: PathBuf,
    /// Channels of the convolutions.
    #[arg(long, default_value_t = 16)]
    width: usize,
    /// The burn device: flex (CPU), ndarray (CPU, built with `--features ndarray`), or wgpu (built
    /// with `--features wgpu`).
    #[arg(long, default_value = "flex")]
    device: String,
    /// Examples per micro-batch (16 suits the CPU; a GPU wants 1024 or more).
    #[arg(long, default_value_t = 16)]
    chunk: usize,
}

/// The user's model: stem conv (stride 2) → GroupNorm → ReLU, a residual block of conv →
/// GroupNorm → ReLU, average pooling, a linear head.
#[derive(Module, Debug)]
struct ResidualNet {
    stem: Conv2d,
    norm1: GroupNorm,
    conv: Conv2d,
    norm2: GroupNorm,
    pool: AvgPool2d,
    head: Linear,
}

impl ResidualNet {
    fn new([c, h, w]: [usize; 3], classes: usize, width: usize, device: &Device) -> Self {
        let same = || PaddingConfig2d::Same;
        let (h2, w2) = (h.div_ceil(2) / 2, w.div_ceil(2) / 2);
        Self {
            stem: Conv2dConfig::new([c, width], [3, 3]).with_stride([2, 2]).with_padding(same()).init(device),
            norm1: GroupNormConfig::new(4, width).init(device),
            conv: Conv2dConfig::new([width, width], [3, 3]).with_padding(same()).init(device),
            norm2: GroupNormConfig::new(4, width).init(device),
            pool: AvgPool2dConfig::new([2, 2]).with_strides([2, 2]).init(),
            head: LinearConfig::new(width * h2 * w2, classes).init(device),
        }
    }
}

impl Classifier for ResidualNet {
    fn forward(&self, x: Tensor<4>) -> Tensor<2> {
        let h = relu(self.norm1.forward(self.stem.forward(x)));
        let h = h.clone() + relu(self.norm2.forward(self.conv.forward(h)));
        self.head.forward(self.pool.forward(h).flatten(1, 3))
    }
}

/// Prints one line per step and the warnings (the library never prints; this program does).
struct Print;
impl Observer for Print {
    fn step(&mut self, r: &StepReport) {
        let eps = r.epsilon_so_far.map_or(String::new(), |e| format!("  ε spent (worst case) {e:.3}"));
        let acc = r.test_accuracy.map_or(String::new(), |a| format!("  test accuracy {:.2}%", 100.0 * a));
        let active = r.active_count_noisy.map_or(String::new(), |a| format!("  ~{a:.0} examples active (noisy)"));
        eprintln!("step {}/{}{eps}{acc}{active}", r.step, r.max_steps);
    }
    fn warning(&mut self, w: &Warning) {
        eprintln!("{w}");
    }
    fn finished(&mut self, f: &FinishInfo) {
        eprintln!("done: {} steps; returned model of step {}", f.steps, f.selected_step);
    }
}

fn main() -> anyhow::Result<()> {
    let a = Args::parse();
    if a.data == std::path::Path::new("datasets/mnist") && !a.data.join("train-images-idx3-ubyte.gz").exists() {
        dpgd::data::fetch::fetch("mnist", &a.data, None).context("fetching MNIST into datasets/mnist")?;
    }
    let config = format!(
        "name = \"custom-model\"\n[data]\ndir = {dir:?}\ntrain_subset = {}\ntest_subset = {}\n\
         [privacy]\nmethod = \"filtered\"\nepsilon = {}\ndelta = {}\nclip = {}\nworst_case_steps = {}\n\
         [train]\nlr = {}\nmax_steps = {}\neval_every = 4\nchunk = {}\ndevice = {:?}\n\
         [release]\nactive_count = \"noisy\"\nactive_count_sigma = 1000.0\nactive_count_every = 4\n\
         [stopping]\nrule = \"best-train-accuracy\"\nevery = 4\nsigma = 500.0\npatience = 3\n",
        a.train_subset,
        a.test_subset,
        a.epsilon,
        a.delta,
        a.clip,
        a.worst_case_steps,
        a.lr,
        a.max_steps,
        a.chunk,
        a.device,
        dir = a.data.display().to_string(),
    );
    let cfg = TrainConfig::from_toml(&config, &[])?.validate()?;
    let data = cfg.config().data.load()?;
    let device = cfg.config().train.device.device()?; // flex unless --device says otherwise
    let model = ResidualNet::new(data.shape(), data.classes(), a.width, &device);
    let engine = BurnEngine::new(model, &device, data.shape(), data.classes())?;
    eprintln!(
        "training {} parameters on {} examples of shape {:?} ({} classes)",
        engine.params().iter().map(|p| p.shape.iter().product::<usize>()).sum::<usize>(),
        data.train.head(a.train_subset).len(),
        data.shape(),
        data.classes()
    );
    let trained = dpgd::train::Run::new(&cfg, &data, &a.out).observer(&mut Print).train_model(engine)?;
    let model: ResidualNet = trained.engine.model_with(&trained.params)?; // your model, trained
    eprintln!("the trained model has {} parameters", model.num_params());
    let result = trained.summary.result.context("the run stopped before its end")?;
    let privacy = trained.summary.privacy.context("the run stopped before its end")?;
    println!("test accuracy of the returned model: {:.2}%", 100.0 * result.test_accuracy);
    if let Some(at_k) = result.test_accuracy_at_k {
        println!("plain private GD at step k = {} (same noise): {:.2}%", result.k, 100.0 * at_k);
    }
    println!("{}", privacy.summary);
    println!("run folder: {} (publishable/privacy.json says what the guarantee rests on)", a.out.display());
    Ok(())
}
