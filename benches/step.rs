//! The training hot path: the per-example gradient engine (every row written, and as training
//! runs it, with the linear layers' weight blocks left to the clip), the clipping kernel on
//! written rows alone, and a full private step (on a 6,000-example slice;
//! `experiments/speed/run.sh` times all 60,000 against Opacus). Run with `cargo bench --bench
//! step`.

use std::hint::black_box;
use std::path::Path;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use dpgd::accounting::filter::IndividualFilter;
use dpgd::arch::ModelSpec;
use dpgd::clip::{BlockStats, NonFinitePolicy, SumGrid, clip_block};
use dpgd::data::{Dataset, Normalize};
use dpgd::per_example::Network;
use dpgd::train::step::{Aggregation, GradientPlan};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;
use rayon::prelude::*;

/// The allocator the `dpgd` binary uses (gemm allocates its packing buffers per product: with
/// the system allocator each would be fresh pages).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Real MNIST when it is at hand (`$DPGD_DATASETS/mnist` or `datasets/mnist` of the repository), else a
/// synthetic dataset of the same shape (the timings do not depend on the pixel values).
fn mnist() -> Dataset {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf();
    let local = std::env::var_os("DPGD_DATASETS").map(|d| Path::new(&d).join("mnist"));
    for dir in local.into_iter().chain([root.join("datasets/mnist")]) {
        if let Ok(d) = Dataset::load(&dir, Some(10)) {
            return d;
        }
    }
    let dir = std::env::temp_dir().join("dpgd-bench-synthetic");
    dpgd::data::synthetic::Synthetic { train: 6000, test: 100, side: 28, seed: 1 }.write(&dir).unwrap();
    Dataset::load(&dir, Some(10)).unwrap()
}

fn engine(c: &mut Criterion) {
    let data = mnist();
    let mut g = c.benchmark_group("per_example_engine");
    for (name, spec) in
        [("opacus_cnn", ModelSpec::opacus_cnn()), ("mlp", ModelSpec::mlp(128)), ("logistic", ModelSpec::logistic())]
    {
        let net = Network::new(&spec).unwrap();
        let theta = net.init_params(&mut ChaCha8Rng::seed_from_u64(0));
        let b = 16;
        let mut ws = net.workspace(b);
        let mut x = vec![0.0f32; b * net.input_len()];
        data.train.normalised_into(0..b, &Normalize::MNIST, &mut x);
        let labels = &data.train.labels[..b];
        let mut grads = vec![0.0f32; b * net.num_params()];
        let mut losses = vec![0.0f32; b];
        g.throughput(Throughput::Elements(b as u64));
        g.bench_function(format!("{name}_forward_backward_16"), |bch| {
            bch.iter(|| {
                net.forward(&theta, &mut ws, &x, b);
                net.backward(&theta, &mut ws, labels, &mut grads, &mut losses);
                black_box(&grads);
            })
        });
        // What training runs: the rows' norms too, the linear weight blocks left to the clip.
        let mut norms = vec![0.0f64; b];
        g.bench_function(format!("{name}_forward_backward_for_clip_16"), |bch| {
            bch.iter(|| {
                net.forward(&theta, &mut ws, &x, b);
                black_box(net.backward_for_clip(&theta, &mut ws, labels, &mut grads, &mut losses, &mut norms).len());
            })
        });
    }
    g.finish();
}

fn clip_kernel(c: &mut Criterion) {
    let p = 26_010;
    let mut g = c.benchmark_group("clip_kernel");
    for n in [16, 256] {
        let mut rng = ChaCha8Rng::seed_from_u64(1);
        let grads: Vec<f32> = (0..n * p).map(|_| rng.random_range(-0.01f32..0.01)).collect();
        let mut ledger = IndividualFilter::new(n, 1e12).unwrap();
        // bytes the kernel must touch: the gradient buffer (read), the sum (read + write)
        g.throughput(Throughput::Bytes((n * p * 4 + 2 * p * 4) as u64));
        let grid = SumGrid::fixed_point(1.0, 60_000).unwrap();
        // Accumulators are reused, as the training step reuses its scratch buffers.
        let mut acc = vec![0i64; p];
        g.bench_function(format!("norms_factors_ledger_sum_{n}x26010"), |bch| {
            bch.iter(|| {
                let mut slots: Vec<_> = ledger.slots_mut(0..n).collect();
                let mut refs: Vec<_> = slots.iter_mut().collect();
                acc.fill(0);
                let stats = &mut BlockStats::default();
                clip_block(&grads, p, &mut refs, 1.0, NonFinitePolicy::Skip, grid, &mut acc, stats).unwrap();
                black_box(acc[0])
            })
        });
        // What the exact sum costs: the f32 weighted sum it replaced (whose sensitivity does not
        // hold in floating point), same norms, in the same run.
        let mut acc32 = vec![0.0f32; p];
        g.bench_function(format!("baseline_f32_sum_not_private_{n}x26010"), |bch| {
            bch.iter(|| {
                acc32.fill(0.0);
                f32_clipped_sum(&grads, p, &mut acc32);
                black_box(acc32[0])
            })
        });
        // The machine's bound for the same bytes, measured in the same run: a parallel
        // read-and-sum of the buffer (what any kernel must at least do).
        g.bench_function(format!("bandwidth_baseline_read_sum_{n}x26010"), |bch| {
            bch.iter(|| black_box(grads.par_chunks(p).map(read_sum).sum::<f32>()))
        });
    }
    g.finish();
}

/// The float kernel the fixed-point one replaced: norms, factors, then `acc += f·row` in f32,
/// in column blocks of 512 over groups of eight rows (a baseline only).
fn f32_clipped_sum(grads: &[f32], p: usize, acc: &mut [f32]) {
    for rows in grads.chunks(8 * p) {
        let w: Vec<f32> =
            rows.chunks_exact(p).map(|r| (1.0 / dpgd::clip::squared_norm(r).sqrt().max(1.0)) as f32).collect();
        for start in (0..p).step_by(512) {
            let end = (start + 512).min(p);
            for (r, &wr) in w.iter().enumerate() {
                for (y, &v) in acc[start..end].iter_mut().zip(&rows[r * p + start..r * p + end]) {
                    *y += wr * v;
                }
            }
        }
    }
}

/// Reads every value once with 16 independent lanes (vectorises, so it runs at memory speed).
fn read_sum(row: &[f32]) -> f32 {
    let mut lanes = [0.0f32; 16];
    for c in row.chunks_exact(16) {
        for (l, v) in lanes.iter_mut().zip(c) {
            *l += v;
        }
    }
    lanes.iter().sum()
}

fn full_step(c: &mut Criterion) {
    let data = mnist();
    let train = data.train.truncated(6000);
    let net = Network::new(&ModelSpec::opacus_cnn()).unwrap();
    let theta = net.init_params(&mut ChaCha8Rng::seed_from_u64(0));
    let mut ledger = IndividualFilter::new(train.len(), 1e12).unwrap();
    let grid = SumGrid::fixed_point(1.0, train.len()).unwrap();
    let aggregation = Aggregation::Clip { clip: 1.0, on_nonfinite: NonFinitePolicy::Skip, grid };
    let plan = GradientPlan::new(net, train.head(0), Normalize::MNIST, aggregation, 16);
    let mut g = c.benchmark_group("full_step");
    g.sample_size(10);
    g.throughput(Throughput::Elements(train.len() as u64));
    g.bench_function("opacus_cnn_6000_examples", |bch| {
        bch.iter(|| black_box(plan.gradient_sum(&theta, &mut ledger, 1).unwrap()))
    });
    g.finish();
}

criterion_group!(benches, engine, clip_kernel, full_step);
criterion_main!(benches);
