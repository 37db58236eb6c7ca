//! The contract of a per-example engine ([`PerExample`]), one test every engine passes: the
//! fast engine (also as a user's sequential module runs on it), the burn engine (batched
//! backward) and its fallback (one backward per example),
//! on a model with convolutions, outer-product blocks and every parameter kind they share.
//! The clauses, each what the clip's guarantee rests on:
//!
//! 1. a row is its example's own: other examples in the batch, the example's position, and the
//!    zero padding of a short last micro-batch do not change it, bit for bit on every device
//!    (the trainer calls an engine at one batch size);
//! 2. the squared norm an engine reports is its row's, the factored (outer-product) blocks
//!    included, within the rounding of an f64 sum in any order; for an engine that keeps its
//!    rows on its device, at least the row's exact squared norm and within 10⁻⁴ of it;
//! 3. `gradients` and `gradients_with_norms` give the same rows;
//! 4. with the exact clipped sum, a neighbour (the batch without one example, padded) moves the sum by
//!    exactly that example's own clipped row: the sensitivity the noise is calibrated to, in the
//!    integers the computer adds; for an engine that keeps its rows, by exactly the example's own
//!    row as the device rounds and sums it, and within the device grid's rounding of the host's
//!    exact sum.

mod common;

use common::devices;
use dpgd::accounting::filter::{IndividualFilter, LedgerSlot};
use dpgd::arch::{LayerSpec as L, ModelSpec, kinds};
use dpgd::clip::{BlockStats, DeviceGrid, NonFinitePolicy, Rows, SumGrid, clip_block, clip_kept_block};
use dpgd::model::{BurnModel, FastModel};
use dpgd::per_example::{BurnEngine, Held, Network, PerExample, check_rows_are_own};
use rand::{RngExt, SeedableRng};
use rayon::iter::ParallelIterator;

const CLIP: f64 = 0.05;

/// Conv → ReLU → max-pool → flatten → linear → tanh → linear: convolution rows written, the
/// linear layers' weight blocks left as outer products by the engines that factor them.
fn spec() -> ModelSpec {
    ModelSpec {
        input: [1, 8, 8],
        classes: 3,
        layers: vec![
            L::Conv2d(kinds::Conv2d { out_channels: 3, kernel: 3, stride: 1, padding: 1, bias: true }),
            L::Relu(kinds::Relu),
            L::MaxPool2d(kinds::MaxPool2d { kernel: 2, stride: 2 }),
            L::Flatten(kinds::Flatten),
            L::Linear(kinds::Linear { out_features: 5, bias: true }),
            L::Tanh(kinds::Tanh),
            L::Linear(kinds::Linear { out_features: 3, bias: true }),
        ],
    }
}

fn examples(n: usize, len: usize, seed: u64) -> (Vec<f32>, Vec<u8>) {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let x = (0..n * len).map(|_| rng.random_range(-1.0f32..1.0)).collect();
    let y = (0..n).map(|_| rng.random_range(0..3u8)).collect();
    (x, y)
}

/// The rows and norms of the examples `x` (as the clip reads them: written values and exact
/// outer products), and the rows `gradients` writes. For an engine that keeps its rows on its
/// device, the norms are its bounds, and `kept` the device's exact clipped sum of the first
/// `sum_rows` rows ([`kept_sum`]).
struct Computed {
    rows: Vec<Vec<f64>>,
    norms: Vec<f64>,
    dense: Vec<f32>,
    kept: Option<Vec<i64>>,
}

fn compute<E: PerExample>(engine: &E, theta: &[f32], x: &[f32], y: &[u8], sum_rows: usize) -> Computed {
    let (b, p) = (y.len(), engine.num_params());
    let mut scratch = engine.scratch(b);
    let (mut grads, mut losses, mut norms) = (vec![0.0f32; b * p], vec![0.0f32; b], vec![0.0f64; b]);
    let (outer, kept) =
        match engine.gradients_with_norms(theta, x, y, &mut scratch, &mut grads, &mut losses, &mut norms) {
            Held::Host(outer) => (Some(outer), None),
            Held::Device(rows) => (None, Some(kept_sum(rows, &norms[..sum_rows], p, b))),
        };
    let mut scratch2 = engine.scratch(b);
    let mut dense = vec![0.0f32; b * p];
    engine.gradients(theta, x, y, &mut scratch2, &mut dense, &mut losses);
    let view = match outer {
        Some(outer) => Rows::with_outer(&grads, p, outer),
        None => Rows::dense(&dense, p),
    };
    let rows = (0..b)
        .map(|r| {
            let mut row = vec![0.0; p];
            view.read_row(r, &mut row);
            row
        })
        .collect();
    Computed { rows, norms, dense, kept }
}

/// The device's exact clipped sum of the rows kept on it whose norms are given (the first
/// `norms.len()` of a micro-batch of `batch`), every example with a fresh budget, as the trainer
/// adds them ([`clip_kept_block`]).
fn kept_sum(rows: &mut dyn dpgd::clip::KeptRows, norms: &[f64], p: usize, batch: usize) -> Vec<i64> {
    let b = norms.len();
    let mut ledger = IndividualFilter::new(b, 4.0 * CLIP * CLIP).unwrap();
    let mut slots: Vec<LedgerSlot<'_>> = ledger.slots_mut(0..b).collect();
    let mut refs: Vec<_> = slots.iter_mut().collect();
    let mut acc = vec![0i64; p];
    let grid = (SumGrid::fixed_point(CLIP, 64).unwrap(), batch);
    clip_kept_block(rows, norms, &mut refs, CLIP, NonFinitePolicy::Skip, grid, &mut acc, &mut BlockStats::default())
        .unwrap();
    acc
}

/// `x` (examples of `len` values) zero-padded to `batch` examples, as the trainer pads a short
/// micro-batch.
fn padded(x: &[f32], len: usize, batch: usize) -> Vec<f32> {
    let mut out = x.to_vec();
    out.resize(batch * len, 0.0);
    out
}

fn padded_labels(y: &[u8], batch: usize) -> Vec<u8> {
    let mut out = y.to_vec();
    out.resize(batch, 0);
    out
}

/// Equal within `tolerance`, relative to the row's largest value.
fn same_row(a: &[f64], b: &[f64], tolerance: f64) -> bool {
    let scale = a.iter().chain(b).fold(0.0f64, |m, v| m.max(v.abs()));
    a.iter().zip(b).all(|(u, v)| u == v || (u - v).abs() <= tolerance * scale)
}

/// The exact clipped sum of the dense rows `rows` (b × p), every example with a fresh budget.
fn clipped_sum(rows: &[f32], p: usize) -> Vec<i64> {
    let b = rows.len() / p;
    let mut ledger = IndividualFilter::new(b, 4.0 * CLIP * CLIP).unwrap();
    let mut slots: Vec<LedgerSlot<'_>> = ledger.slots_mut(0..b).collect();
    let mut refs: Vec<_> = slots.iter_mut().collect();
    let grid = SumGrid::fixed_point(CLIP, 64).unwrap();
    let mut acc = vec![0i64; p];
    clip_block(rows, p, &mut refs, CLIP, NonFinitePolicy::Skip, grid, &mut acc, &mut BlockStats::default()).unwrap();
    acc
}

/// Every clause, on `engine` at θ.
fn contract<E: PerExample>(name: &str, engine: &E, theta: &[f32]) {
    let (p, len) = (engine.num_params(), engine.input_len());
    // 1. Companions and position, at two micro-batch sizes.
    for batch in [5, 8] {
        check_rows_are_own(engine, theta, batch).unwrap_or_else(|e| panic!("{name}: {}", e.explained()));
    }
    let (x, y) = examples(7, len, 3);
    let all = compute(engine, theta, &x, &y, 7);
    // 1. Padding: a short last micro-batch, zero-padded to the batch size as the trainer pads
    //    it, gives its examples the rows they have among real companions.
    let short = compute(engine, theta, &padded(&x[..3 * len], len, 7), &padded_labels(&y[..3], 7), 3);
    for r in 0..3 {
        assert!(same_row(&short.rows[r], &all.rows[r], 0.0), "{name}: example {r}'s row changes with padding");
    }
    for (r, row) in all.rows.iter().enumerate() {
        // 2. The norm is the row's, factored blocks included.
        let exact: f64 = row.iter().map(|v| v * v).sum();
        assert!(exact > 0.0, "{name}: example {r} has a zero row: the test would not test");
        if engine.keeps_rows() {
            // A bound: never below the row's exact squared norm, and tight.
            assert!(
                all.norms[r] >= exact && all.norms[r] <= exact * (1.0 + 1e-4),
                "{name}: example {r}: bound {} for a row of {exact}",
                all.norms[r]
            );
        } else {
            let slack = p as f64 * f64::EPSILON * exact;
            assert!(
                (all.norms[r] - exact).abs() <= slack,
                "{name}: example {r}: norm {} for a row of {exact}",
                all.norms[r]
            );
        }
        // 3. Both entry points give the row.
        let dense: Vec<f64> = all.dense[r * p..(r + 1) * p].iter().map(|&v| f64::from(v)).collect();
        assert!(same_row(&dense, row, 1e-6), "{name}: gradients and gradients_with_norms differ on example {r}");
    }
    // 4. Without example j (the others shift into its place), the exact sum moves by exactly
    //    j's clipped row. Every engine gives bit-identical rows: exact equality.
    {
        let whole = clipped_sum(&all.dense, p);
        for j in [0, 3, 6] {
            let keep: Vec<usize> = (0..7).filter(|&i| i != j).collect();
            let xs: Vec<f32> = keep.iter().flat_map(|&i| x[i * len..(i + 1) * len].iter().copied()).collect();
            let ys: Vec<u8> = keep.iter().map(|&i| y[i]).collect();
            let without = compute(engine, theta, &padded(&xs, len, 7), &padded_labels(&ys, 7), 6);
            if let (Some(whole), Some(without)) = (&all.kept, &without.kept) {
                // On the device: the example's own row, alone at the head of a padded batch.
                let alone = compute(
                    engine,
                    theta,
                    &padded(&x[j * len..(j + 1) * len], len, 7),
                    &padded_labels(&y[j..=j], 7),
                    1,
                );
                let own = alone.kept.unwrap();
                let moved: Vec<i64> = whole.iter().zip(without).map(|(a, b)| a - b).collect();
                assert_eq!(moved, own, "{name}: removing example {j} moves the device's sum by more than its own row");
                assert!(own.iter().any(|&v| v != 0), "{name}: example {j} adds nothing on the device");
            }
            let without = clipped_sum(&without.dense[..6 * p], p);
            let own = clipped_sum(&all.dense[j * p..(j + 1) * p], p);
            let moved: Vec<i64> = whole.iter().zip(&without).map(|(a, b)| a - b).collect();
            assert_eq!(moved, own, "{name}: removing example {j} moves the exact sum by more than its own row");
            assert!(own.iter().any(|&v| v != 0), "{name}: example {j} adds nothing: the test would not test");
        }
    }
    // 4. The device's sum is the host's within the device grid's rounding and the bound's
    //    margin on the factors, and a repeat gives the same integers (a run repeats bit for bit).
    if let Some(kept) = &all.kept {
        let again = compute(engine, theta, &x, &y, 7);
        assert_eq!(again.kept.as_ref(), Some(kept), "{name}: the device's sum changes between two identical calls");
        let grid = SumGrid::fixed_point(CLIP, 64).unwrap();
        let device = DeviceGrid::new(grid, CLIP, 7).grid().gamma();
        let host = clipped_sum(&all.dense, p);
        for (j, (k, h)) in kept.iter().zip(&host).enumerate() {
            let gap = (k - h) as f64 * grid.gamma();
            assert!(
                gap.abs() <= 7.0 * (device + 1e-4 * CLIP),
                "{name}: coordinate {j}: device and host sums differ by {gap}"
            );
        }
    }
}

#[test]
fn the_fast_engine_keeps_the_contract() {
    let net = Network::new(&spec()).unwrap();
    let theta = net.init_params(&mut rand_chacha::ChaCha8Rng::seed_from_u64(1));
    contract("fast engine", &net, &theta);
}

/// A user's sequential module on the fast engine ([`FastModel`]): the fast engine's rows, from
/// the module's own values.
#[test]
fn a_sequential_module_on_the_fast_engine_keeps_the_contract() {
    let d = burn::tensor::Device::flex();
    let module = BurnModel::from_spec(&spec(), &d).unwrap();
    let engine = FastModel::new(&spec(), &module, &d).unwrap();
    let theta = engine.start().to_vec();
    assert_eq!(theta, module.to_params(engine.network()).unwrap());
    contract("a sequential module on the fast engine", &engine, &theta);
}

#[test]
fn the_burn_engine_keeps_the_contract() {
    for d in devices() {
        let engine = BurnEngine::new(BurnModel::from_spec(&spec(), &d).unwrap(), &d, [1, 8, 8], 3).unwrap();
        assert!(engine.rows_on_device(), "the batched burn engine clips where its rows are, on every device");
        let theta = engine.current_params().unwrap();
        contract(&format!("burn engine on {d:?}"), &engine, &theta);
        // The other path: every row written to the host for the host clip.
        let other = engine.with_rows_on_host();
        assert!(!other.rows_on_device());
        contract(&format!("burn engine on {d:?}, rows on the host"), &other, &theta);
        assert!(other.with_rows_on_device().rows_on_device());
    }
}

#[test]
fn the_burn_engines_fallback_keeps_the_contract() {
    for d in devices() {
        let engine = BurnEngine::with_fallback(BurnModel::from_spec(&spec(), &d).unwrap(), &d, [1, 8, 8], 3).unwrap();
        let theta = engine.current_params().unwrap();
        contract(&format!("burn engine's fallback on {d:?}"), &engine, &theta);
    }
}
