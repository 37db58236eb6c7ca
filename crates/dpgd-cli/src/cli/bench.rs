//! `dpgd bench-step`: times full private steps (per-example gradients, clipping kernel with
//! ledger, noise, update) and reports the peak memory of the process. Used by
//! `experiments/speed/run.sh` next to the Opacus peers.

use std::path::PathBuf;
use std::time::Instant;

use anyhow::Result;
use clap::Args;
use dpgd::arch::Preset;
use dpgd::clip::{NonFinitePolicy, SumGrid};
use dpgd::cube::Kernel;
use dpgd::data::{Dataset, Normalize};
use dpgd::device::DeviceKind;
use dpgd::model::{BurnModel, FastModel};
use dpgd::noise::Stream;
use dpgd::noise::{NoiseSampler, NoiseSeed};
use dpgd::per_example::{BurnEngine, Network, PerExample};
use dpgd::train::step::{Aggregation, GradientPlan, UpdateRule, apply_update};
use dpgd_accounting::filter::IndividualFilter;
use rand::SeedableRng;
use serde_json::json;

#[derive(Debug, Args)]
pub(crate) struct BenchArgs {
    /// Training examples per step (the first N of MNIST).
    #[arg(long, default_value_t = 60_000)]
    examples: usize,
    /// Timed steps (after one warm-up step).
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    reps: u32,
    /// Examples per micro-batch.
    #[arg(long, default_value_t = dpgd::per_example::FAST_ENGINE_CHUNK as u32, value_parser = clap::value_parser!(u32).range(1..=65_536))]
    chunk: u32,
    /// Worker threads (0 = all cores).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=1024))]
    threads: u32,
    /// Model preset: opacus-cnn, mlp or logistic.
    #[arg(long, default_value = "opacus-cnn")]
    model: Preset,
    /// The model of this training config (its `model` section, e.g.
    /// configs/mnist-residual.toml's residual GroupNorm network) instead of `--model`.
    #[arg(long, conflicts_with = "model")]
    model_config: Option<PathBuf>,
    /// Folder with the MNIST IDX files.
    #[arg(long, default_value = "datasets/mnist")]
    data: PathBuf,
    /// The per-example engine: `fast` (dpgd's CPU engine), `burn` (the same model as burn
    /// modules of dpgd::nn layers, on `--device`, its rows clipped and summed there),
    /// `burn-host-rows` (the same with every row written to the host for the host clip) or
    /// `burn-fallback` (the burn engine's one backward per example, for models of any burn
    /// layers: slow, time it on few examples).
    #[arg(long, default_value = "fast")]
    engine: Engine,
    /// The burn device of the burn engine.
    #[arg(long, default_value = "flex")]
    device: DeviceKind,
    /// Also time each layer of the fast engine on one thread (forward and backward per example,
    /// over the first 2,000 examples) and print where the model's time goes (µs; seconds in the
    /// JSON).
    #[arg(long)]
    layers: bool,
    /// With a burn engine that keeps its rows on its device: time one micro-batch of `--chunk`
    /// examples phase by phase on one thread (`--reps` micro-batches after 3 warm-ups), instead
    /// of full steps.
    #[arg(long)]
    phases: bool,
    /// dpgd's own kernels to leave to burn's operations, comma-separated: on a GPU `clip-sum`,
    /// `block-square-sums`, `conv-weight-rows`; on the CPU `host-clip` (each computes what
    /// burn's operations do), to compare the two in one build.
    #[arg(long, value_delimiter = ',', value_parser = kernel)]
    without_kernels: Vec<Kernel>,
}

/// A kernel of [`dpgd::cube`] by its name.
fn kernel(name: &str) -> Result<Kernel, String> {
    Kernel::ALL.into_iter().find(|k| k.name() == name).ok_or_else(|| {
        let names: Vec<&str> = Kernel::ALL.iter().map(|k| k.name()).collect();
        format!("no kernel {name:?}: use one of {}", names.join(", "))
    })
}

/// Which engine `bench-step` times.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Engine {
    /// dpgd's fast CPU engine.
    Fast,
    /// The burn engine.
    Burn,
    /// The burn engine's generic fallback (`BurnEngine::with_fallback`).
    BurnFallback,
    /// The burn engine with every gradient row copied to the host for the host clip and the
    /// exact sum (`BurnEngine::with_rows_on_host`: what it did before it kept its rows), for
    /// comparisons.
    BurnHostRows,
    /// The model as a user's sequential burn module (`ModelSpec::sequential` and `then`, its
    /// `BurnModel` on `--device`) trained on the fast engine (`dpgd::model::FastModel`).
    Sequential,
}

/// How many examples `--layers` times.
const PROFILE_EXAMPLES: usize = 2000;

pub(crate) fn run(a: BenchArgs) -> Result<()> {
    dpgd::cube::disable(&a.without_kernels);
    if a.phases && matches!(a.engine, Engine::Fast | Engine::BurnFallback | Engine::BurnHostRows | Engine::Sequential) {
        anyhow::bail!("--phases times a burn engine that keeps its rows on its device: use --engine burn");
    }
    if a.layers && a.engine != Engine::Fast {
        anyhow::bail!("--layers times the fast engine's layers: drop it or use --engine fast");
    }
    let (spec, name) = match &a.model_config {
        Some(path) => {
            let cfg = dpgd::train::TrainConfig::from_file(path, &[])?;
            (cfg.model_spec_for([1, 28, 28], 10)?, cfg.name.clone())
        }
        None => (a.model.spec(), a.model.name().to_string()),
    };
    let net = Network::new(&spec)?;
    let data = Dataset::load(&a.data, Some(net.classes()))?;
    let train = data.train.head(a.examples);
    if train.pixels() != net.input_len() {
        anyhow::bail!(
            "the images in {} have {} pixels but the {} model expects {} input values",
            a.data.display(),
            train.pixels(),
            name,
            net.input_len()
        );
    }
    let theta = net.init_params(&mut rand_chacha::ChaCha8Rng::seed_from_u64(0));
    let n = train.len();
    let grid = SumGrid::fixed_point(1.0, n)?;
    let aggregation = Aggregation::Clip { clip: 1.0, on_nonfinite: NonFinitePolicy::Skip, grid };
    let name = name.as_str();
    let flops = net.flops_per_example();
    let layers = a.layers.then(|| layer_profile(&net, &train, &theta, a.chunk as usize));
    if let Some(rows) = &layers {
        print_layers(rows);
    }
    let chunk = micro_batch(&a, train.len());
    match a.engine {
        Engine::Fast => {
            time(&a, GradientPlan::new(net, train, Normalize::MNIST, aggregation, chunk), theta, (name, flops, layers))
        }
        Engine::Sequential => {
            // The model's burn module, trained from its own values through FastModel: the path
            // of a user's sequential model.
            let device = a.device.device()?;
            let module = BurnModel::from_params(&net, &theta, &device)?;
            let engine = FastModel::new(net.spec(), &module, &device)?;
            let theta = engine.start().to_vec();
            time(&a, GradientPlan::new(engine, train, Normalize::MNIST, aggregation, chunk), theta, (name, flops, None))
        }
        Engine::Burn | Engine::BurnFallback | Engine::BurnHostRows => {
            let device = a.device.device()?;
            let model = BurnModel::from_params(&net, &theta, &device)?;
            let (input, classes) = (net.spec().input, net.classes());
            let engine = match a.engine {
                Engine::BurnFallback => BurnEngine::with_fallback(model, &device, input, classes)?,
                Engine::BurnHostRows => BurnEngine::new(model, &device, input, classes)?.with_rows_on_host(),
                _ => BurnEngine::new(model, &device, input, classes)?,
            };
            if a.phases {
                return super::phases::run(&engine, train, chunk, a.reps as usize);
            }
            let theta = engine.current_params()?;
            time(&a, GradientPlan::new(engine, train, Normalize::MNIST, aggregation, chunk), theta, (name, flops, None))
        }
    }
}

/// Times `a.reps` full steps of `plan` (after one warm-up) and prints the JSON summary, with
/// the rate of the model's `flops` per example against the machine's GEMM peak.
fn time<E: PerExample>(
    a: &BenchArgs,
    plan: GradientPlan<'_, E>,
    mut theta: Vec<f32>,
    (model, flops, layers): (&str, u64, Option<Vec<LayerRow>>),
) -> Result<()> {
    let (reps, n) = (a.reps as usize, plan.examples());
    let chunk = micro_batch(a, n);
    // A budget no example exhausts, so every step does the full work.
    let mut ledger = IndividualFilter::new(n, 1e12)?;
    let pool = rayon::ThreadPoolBuilder::new().num_threads(a.threads as usize).build()?;
    let mut times = Vec::new();
    for rep in 0..=reps {
        let t0 = Instant::now();
        let (sum, _) = pool.install(|| plan.gradient_sum(&theta, &mut ledger, rep + 1))?;
        let noise = (NoiseSampler::Gaussian, 1.0);
        let rule = UpdateRule::plain(0.1, n as f64);
        apply_update(
            &mut theta,
            &mut Vec::new(),
            sum,
            noise,
            rule,
            &mut NoiseSeed::Fixed(1).rng(Stream::update(rep + 1))?,
        )?;
        let dt = t0.elapsed().as_secs_f64();
        eprintln!("step {rep}{}: {dt:.3} s", if rep == 0 { " (warm-up)" } else { "" });
        if rep > 0 {
            times.push(dt);
        }
    }
    times.sort_by(f64::total_cmp);
    // The step's memory, read before the peak measurement allocates its matrices.
    let rss = peak_rss_mib();
    let peak = gemm_gflops(&pool);
    // `--reps` is at least 1 (its parser refuses 0), so `times` is not empty.
    let (min, median, max) = (times[0], times[times.len() / 2], times[times.len() - 1]);
    println!(
        "{}",
        json!({
            "model": model, "engine": clap::ValueEnum::to_possible_value(&a.engine).map(|v| v.get_name().to_string()), "device": a.device.name(),
            "params": plan.net().num_params(), "examples": n, "chunk": chunk,
            "threads": pool.current_num_threads(), "reps": reps,
            "step_s": { "median": median, "min": min, "max": max },
            "examples_per_s": n as f64 / median,
            "flop_per_example": flops, "gflops": flops as f64 * n as f64 / median / 1e9,
            "gemm_peak_gflops": peak,
            "peak_rss_mib": rss,
            "layers": layers.map(|rows| rows.iter().map(|r| json!({
                "index": r.index, "kind": r.kind, "forward_s": r.forward_s, "backward_s": r.backward_s,
            })).collect::<Vec<_>>()),
        })
    );
    Ok(())
}

/// `--chunk`, but never more than the `n` examples: each thread allocates chunk × P values.
fn micro_batch(a: &BenchArgs, n: usize) -> usize {
    (a.chunk as usize).min(n.max(1))
}

/// One layer's time per example in [`layer_profile`].
#[derive(Debug)]
struct LayerRow {
    index: usize,
    kind: &'static str,
    forward_s: f64,
    backward_s: f64,
}

/// Each layer's forward and backward time per example on this thread, over the first (up to)
/// [`PROFILE_EXAMPLES`] of `train` in micro-batches of `chunk`.
fn layer_profile(net: &Network, train: &dpgd::data::Examples<'_>, theta: &[f32], chunk: usize) -> Vec<LayerRow> {
    let n = train.len().min(PROFILE_EXAMPLES);
    let chunk = chunk.clamp(1, n.max(1));
    let mut ws = net.workspace(chunk);
    let (mut x, mut grads) = (vec![0.0f32; chunk * net.input_len()], vec![0.0f32; chunk * net.num_params()]);
    let mut losses = vec![0.0f32; chunk];
    let mut total = vec![dpgd::per_example::LayerTimes::default(); net.layers().len()];
    // One untimed pass first: a process's first products pay one-time set-up (gemm's cache
    // queries and buffers, page faults), which would be charged to whichever layer first
    // triggers each.
    let b0 = chunk.min(n);
    if b0 > 0 {
        train.normalised_into(0..b0, &Normalize::MNIST, &mut x[..b0 * net.input_len()]);
        let labels = &train.labels()[..b0];
        let _ = net.profile(theta, &mut ws, &x[..b0 * net.input_len()], labels, &mut grads, &mut losses);
    }
    for start in (0..n).step_by(chunk) {
        let b = chunk.min(n - start);
        train.normalised_into(start..start + b, &Normalize::MNIST, &mut x[..b * net.input_len()]);
        let labels = &train.labels()[start..start + b];
        let times = net.profile(theta, &mut ws, &x[..b * net.input_len()], labels, &mut grads, &mut losses);
        for (t, l) in total.iter_mut().zip(times) {
            t.forward += l.forward;
            t.backward += l.backward;
        }
    }
    let per = |d: std::time::Duration| d.as_secs_f64() / n.max(1) as f64;
    net.spec()
        .layers
        .iter()
        .zip(total)
        .enumerate()
        .map(|(index, (spec, t))| LayerRow {
            index,
            kind: spec.name(),
            forward_s: per(t.forward),
            backward_s: per(t.backward),
        })
        .collect()
}

/// The per-layer table on stderr (the JSON on stdout carries the same rows).
fn print_layers(rows: &[LayerRow]) {
    let total: f64 = rows.iter().map(|r| r.forward_s + r.backward_s).sum();
    eprintln!("layer                 forward µs/ex  backward µs/ex  share");
    for r in rows {
        let share = if total > 0.0 { 100.0 * (r.forward_s + r.backward_s) / total } else { 0.0 };
        let name = format!("{} {}", r.index, r.kind);
        eprintln!("{name:<22}{:>14.2}{:>16.2}{share:>6.1} %", 1e6 * r.forward_s, 1e6 * r.backward_s);
    }
}

/// The FP32 rate this machine reaches on large matrix products, one per thread of `pool` at
/// once (1024³ each, the `gemm` crate's kernels for this instruction set, which the fast engine
/// uses for its large products; its small ones run in its own tiled AVX-512 kernel; best of
/// three): the practical peak the engine's rate is compared with.
fn gemm_gflops(pool: &rayon::ThreadPool) -> f64 {
    const N: usize = 1024;
    let threads = pool.current_num_threads();
    // Each thread's matrices, allocated and written before the timing.
    let buffers: Vec<std::sync::Mutex<[Vec<f32>; 3]>> = (0..threads)
        .map(|_| std::sync::Mutex::new([vec![0.5f32; N * N], vec![0.25; N * N], vec![0.0; N * N]]))
        .collect();
    let mut best = f64::INFINITY;
    for _ in 0..3 {
        let t0 = Instant::now();
        pool.broadcast(|ctx| {
            let mut guard = buffers[ctx.index()].lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            let [a, b, c] = &mut *guard;
            // SAFETY: three distinct N×N column-major buffers of exactly N·N values, unit
            // row stride and column stride N, as gemm's contract requires.
            unsafe {
                gemm::gemm(
                    N,
                    N,
                    N,
                    c.as_mut_ptr(),
                    N as isize,
                    1,
                    false,
                    a.as_ptr(),
                    N as isize,
                    1,
                    b.as_ptr(),
                    N as isize,
                    1,
                    0.0,
                    1.0,
                    false,
                    false,
                    false,
                    gemm::Parallelism::None,
                );
            }
        });
        best = best.min(t0.elapsed().as_secs_f64());
    }
    2.0 * (N * N * N * threads) as f64 / best / 1e9
}

/// The process's peak resident set (VmHWM), in MiB.
fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}
