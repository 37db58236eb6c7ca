//! The clip on a device ([`dpgd::clip::kept`]) against adversarial rows, on every backend the
//! path runs on (flex, ndarray; wgpu with `--features wgpu`, as `.ci/wgpu-smoke` runs it):
//! the bound on each row's squared norm is never below the exact value, a row adds at most
//! what its example was charged, a non-finite row adds nothing, and the device's integer sum
//! of a batch is the sum of its rows' own contributions (exact, in any order).

mod common;

use burn::tensor::{Device, Tensor, TensorData};
use common::devices;
use dpgd::accounting::filter::{IndividualFilter, LedgerSlot};
use dpgd::clip::{BlockStats, DeviceGrid, KeptRows, NonFinitePolicy, SumGrid, clip_kept_block};
use dpgd::per_example::DeviceRows;
use rand::{RngExt, SeedableRng};
use rayon::iter::ParallelIterator;

const CLIP: f64 = 1.0;

/// Adversarial rows of `p` values, one per case: a sequential f32 sum of squares loses the small
/// values behind a large one; equal values (the most roundings in one direction); values near
/// half-integers of the grid after scaling; subnormal values; values whose squares leave f32's
/// range; NaN; zeros; random values of mixed magnitudes.
fn adversarial(p: usize, seed: u64) -> Vec<Vec<f32>> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut rows = Vec::new();
    let mut big_first = vec![1.0f32; p];
    big_first[0] = (p as f32).sqrt() * 64.0;
    rows.push(big_first);
    rows.push(vec![0.37f32; p]);
    rows.push((0..p).map(|j| (j % 7) as f32 + 0.5).collect());
    rows.push(vec![1e-40f32; p]);
    rows.push((0..p).map(|j| if j == p / 2 { 3e19 } else { 0.1 }).collect());
    rows.push((0..p).map(|j| if j == 1 { f32::NAN } else { 1.0 }).collect());
    rows.push(vec![0.0f32; p]);
    for _ in 0..5 {
        let scale = 10f32.powi(rng.random_range(-6..6));
        rows.push(
            (0..p).map(|_| rng.random_range(-1.0f32..1.0) * scale * 10f32.powi(rng.random_range(-3..3))).collect(),
        );
    }
    rows
}

/// The rows as one part of a device batch, split in two parts (as a model's parameters are):
/// where the device holds them by default (host memory on the CPU backends), or as one tensor
/// on the device whatever it is (`tensors`: burn's operations, as on a GPU without dpgd's
/// kernels).
fn on_device(rows: &[Vec<f32>], d: &Device, tensors: bool) -> DeviceRows {
    let (b, p) = (rows.len(), rows[0].len());
    let cut = p / 3;
    let part = |cols: std::ops::Range<usize>| {
        let values: Vec<f32> = rows.iter().flat_map(|r| r[cols.clone()].iter().copied()).collect();
        Tensor::<2>::from_data(TensorData::new(values, [b, cols.len()]), d)
    };
    let parts = vec![(Some(part(0..cut)), cut), (None, 3), (Some(part(cut..p)), p - cut)];
    if tensors { DeviceRows::in_tensors(parts) } else { DeviceRows::new(parts) }
}

/// Every device, and on the CPU backends also with the rows as tensors (both paths CI runs).
fn paths() -> Vec<(Device, bool)> {
    devices()
        .into_iter()
        .flat_map(|d| {
            let both = dpgd::device::is_host(&d);
            [(d.clone(), false)].into_iter().chain(both.then_some((d, true)))
        })
        .collect()
}

/// The device clip of `norms.len()` kept rows with fresh budgets 4C² in micro-batches of
/// `batch`, with only the rows `live` finite (the others read as non-finite: charged, adding
/// nothing); the sum in grid units and what each example was charged.
fn clip_rows(kept: &mut DeviceRows, norms: &[f64], live: &[usize], batch: usize) -> (Vec<i64>, Vec<f64>) {
    let grid = SumGrid::fixed_point(CLIP, 1000).unwrap();
    let b = norms.len();
    let masked: Vec<f64> = (0..b).map(|r| if live.contains(&r) { norms[r] } else { f64::NAN }).collect();
    let mut ledger = IndividualFilter::new(b, 4.0 * CLIP * CLIP).unwrap();
    let mut slots: Vec<LedgerSlot<'_>> = ledger.slots_mut(0..b).collect();
    let mut refs: Vec<&mut LedgerSlot<'_>> = slots.iter_mut().collect();
    let mut acc = vec![0i64; kept.p()];
    let stats = &mut BlockStats::default();
    clip_kept_block(kept, &masked, &mut refs, CLIP, NonFinitePolicy::Skip, (grid, batch), &mut acc, stats).unwrap();
    drop(slots);
    (acc, ledger.spent_all().to_vec())
}

#[test]
fn adversarial_rows_add_at_most_their_charge_on_every_backend() {
    for (d, tensors) in paths() {
        for (p, batch) in [(10, 16), (1000, 16), (70_000, 1024)] {
            let rows = adversarial(p, p as u64);
            let b = rows.len();
            let mut kept = on_device(&rows, &d, tensors);
            let (norms, _) = kept.squared_norm_bounds(b, Tensor::<1>::zeros([b], &d));
            for (r, row) in rows.iter().enumerate() {
                let exact: f64 = row.iter().map(|&v| f64::from(v) * f64::from(v)).sum();
                if exact.is_finite() && row.iter().all(|v| (v * v).is_finite()) {
                    assert!(
                        norms[r] >= exact,
                        "{d:?} (tensors: {tensors}), p {p}, row {r}: bound {} below the exact {exact}",
                        norms[r]
                    );
                    assert!(
                        norms[r] <= exact * 1.01 + 1e-30,
                        "{d:?} (tensors: {tensors}), p {p}, row {r}: bound {} far above {exact}",
                        norms[r]
                    );
                } else {
                    assert!(
                        !norms[r].is_finite(),
                        "{d:?} (tensors: {tensors}), p {p}, row {r}: a non-finite row has a finite bound"
                    );
                }
            }
            let gamma = SumGrid::fixed_point(CLIP, 1000).unwrap().gamma();
            let mut total = vec![0i64; kept.p()];
            let mut first = 0.0;
            for r in 0..b {
                let (sum, spent) = clip_rows(&mut kept, &norms, &[r], batch);
                let added = sum.iter().map(|&v| (v as f64 * gamma).powi(2)).sum::<f64>();
                assert!(
                    added <= spent[r],
                    "{d:?} (tensors: {tensors}), p {p}, row {r}: adds {added} but was charged {}",
                    spent[r]
                );
                if !norms[r].is_finite() || norms[r] == 0.0 {
                    assert!(
                        sum.iter().all(|&v| v == 0),
                        "{d:?} (tensors: {tensors}), p {p}, row {r}: a non-finite or zero row adds something"
                    );
                }
                if r == 0 {
                    first = added / spent[0];
                }
                total.iter_mut().zip(&sum).for_each(|(t, v)| *t += v);
            }
            let (all, _) = clip_rows(&mut kept, &norms, &(0..b).collect::<Vec<_>>(), batch);
            assert_eq!(
                all, total,
                "{d:?} (tensors: {tensors}), p {p}: the batch's device sum is not the sum of its rows' own"
            );
            // Not vacuous: the first row (clipped to C) adds close to its full charge.
            assert!(first > 0.99, "{d:?} (tensors: {tensors}), p {p}: the first row adds {first} of its charge");
            // The layout: the part without rows adds zeros in its place.
            let cut = p / 3;
            assert!(all[cut..cut + 3].iter().all(|&v| v == 0));
        }
    }
}

#[test]
fn the_device_grid_is_coarse_enough_for_the_largest_batch() {
    let grid = SumGrid::fixed_point(CLIP, 60_000).unwrap();
    let d = DeviceGrid::new(grid, CLIP, 1024);
    assert!(1024.0 * CLIP / d.grid().gamma() <= dpgd::clip::kept::DEVICE_SUM_LIMIT);
}

/// On the CPU backends the host kernels (the default) and burn's tensor operations give the
/// same clip up to their stated roundings: each row's bound within both bounds' margin of the
/// other (both lie above the exact squared norm, within R·2⁻²⁴ of it), and each coordinate of
/// the sum within one grid unit per live row (the host rounds the exact product, burn the
/// product rounded to f32 first; every other coordinate is equal).
#[test]
fn the_cpu_backends_host_kernels_agree_with_burns_operations() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
    let (b, p) = (24, 3001);
    let rows: Vec<Vec<f32>> = (0..b)
        .map(|_| (0..p).map(|_| rng.random_range(-1.0f32..1.0) * rng.random_range(0.0f32..300.0)).collect())
        .collect();
    let live: Vec<(usize, f32)> = (0..b).filter(|r| r % 5 != 2).map(|r| (r, rng.random_range(0.0f32..8.0))).collect();
    for d in devices().into_iter().filter(dpgd::device::is_host) {
        let (mut host, mut tensors) = (on_device(&rows, &d, false), on_device(&rows, &d, true));
        let (h, _) = host.squared_norm_bounds(b, Tensor::<1>::zeros([b], &d));
        let (t, _) = tensors.squared_norm_bounds(b, Tensor::<1>::zeros([b], &d));
        for r in 0..b {
            assert!((h[r] - t[r]).abs() <= 1e-4 * t[r], "{d:?}, row {r}: bounds {} and {}", h[r], t[r]);
        }
        let (mut hs, mut ts) = (vec![0i64; p + 3], vec![0i64; p + 3]);
        host.sum_rounded(&live, &mut hs);
        tensors.sum_rounded(&live, &mut ts);
        let most = hs.iter().zip(&ts).map(|(a, b)| (a - b).unsigned_abs()).max().unwrap_or(0);
        assert!(most <= live.len() as u64, "{d:?}: sums differ by {most} units in a coordinate");
        let equal = hs.iter().zip(&ts).filter(|(a, b)| a == b).count();
        assert!(equal * 10 >= 9 * hs.len(), "{d:?}: only {equal} of {} coordinates equal", hs.len());
        // Not vacuous: the sums are far from zero.
        assert!(hs.iter().map(|v| v.unsigned_abs()).max().unwrap_or(0) > 1000);
    }
}
