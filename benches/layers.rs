//! Each layer rule of the fast per-example engine, timed inside a real network: forward and
//! backward (input gradient and per-example parameter gradients, a linear layer's weight block
//! left to the clip as its factors, as in training) of every layer of the Opacus
//! CNN, and of a tanh MLP for the one rule the CNN lacks, over micro-batches of the default
//! `train.chunk` ([`dpgd::per_example::FAST_ENGINE_CHUNK`]). Run with `cargo bench --bench layers`; a benchmark's name is
//! `<model>/<layer index>_<kind>_<forward|backward>`.
//!
//! Each measurement runs the whole network ([`Network::profile`]) and counts only one layer's
//! pass, so a rule is timed on the shapes, caches and neighbours it has in training. Layers
//! before the first with parameters have no backward pass and no backward benchmark.

use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use dpgd::arch::{LayerSpec, ModelSpec, kinds};
use dpgd::per_example::{Layer, LayerTimes, Network};
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The allocator the `dpgd` binary uses (gemm allocates its packing buffers per product: with
/// the system allocator each would be fresh pages).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

const BATCH: usize = dpgd::per_example::FAST_ENGINE_CHUNK;

/// Reads one pass's time of a layer.
type Pass = fn(&LayerTimes) -> Duration;

/// Every layer kind the fast engine has appears in one of these (`layers!` in
/// `per_example/layers/mod.rs`); `covers_every_rule` below fails when a new one is missing.
fn models() -> Vec<(&'static str, ModelSpec)> {
    let mut tanh_mlp = ModelSpec::mlp(128);
    tanh_mlp.layers[2] = LayerSpec::Tanh(kinds::Tanh);
    vec![("opacus_cnn", ModelSpec::opacus_cnn()), ("tanh_mlp", tanh_mlp)]
}

fn layers(c: &mut Criterion) {
    covers_every_rule();
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    for (name, spec) in models() {
        let net = Network::new(&spec).expect("the benchmark models compile");
        let theta = net.init_params(&mut rng);
        let mut ws = net.workspace(BATCH);
        let x: Vec<f32> = (0..BATCH * net.input_len()).map(|_| rng.random_range(-1.0f32..2.0)).collect();
        let labels: Vec<u8> = (0..BATCH).map(|i| (i % net.classes()) as u8).collect();
        let mut grads = vec![0.0f32; BATCH * net.num_params()];
        let mut losses = vec![0.0f32; BATCH];
        let mut g = c.benchmark_group(name);
        g.throughput(Throughput::Elements(BATCH as u64));
        // Layers before the first with parameters run no backward pass.
        let first = net.layers().iter().position(|l| l.params().is_some()).unwrap_or(0);
        for (l, layer) in spec.layers.iter().enumerate() {
            let pick: [(&str, Pass); 2] = [("forward", |t| t.forward), ("backward", |t| t.backward)];
            for (pass, read) in pick {
                if pass == "backward" && l < first {
                    continue;
                }
                g.bench_function(format!("{l}_{}_{pass}", layer.name()), |bch| {
                    bch.iter_custom(|iters| {
                        (0..iters)
                            .map(|_| read(&net.profile(&theta, &mut ws, &x, &labels, &mut grads, &mut losses)[l]))
                            .sum()
                    })
                });
            }
        }
        g.finish();
    }
}

/// Fails (at the start of `cargo bench --bench layers`) when the fast engine has a layer kind
/// none of the models above uses.
fn covers_every_rule() {
    let mut kinds: Vec<std::mem::Discriminant<Layer>> = Vec::new();
    for (_, spec) in models() {
        let net = Network::new(&spec).expect("the benchmark models compile");
        kinds.extend(net.layers().iter().map(std::mem::discriminant));
    }
    kinds.sort_by_key(|d| format!("{d:?}"));
    kinds.dedup();
    assert_eq!(kinds.len(), Layer::KINDS.len(), "a rule of {:?} has no benchmark: add it to models()", Layer::KINDS);
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(20).warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2));
    targets = layers
}
criterion_main!(benches);
