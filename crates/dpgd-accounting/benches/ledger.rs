//! The individual filter's per-step cost: one `grant` per example over 60,000 examples,
//! serially and through the parallel slots the clipping kernel uses. Compare with a full
//! private step (benches/step.rs, seconds): this must stay well under 1% of it.

use criterion::{Criterion, criterion_group, criterion_main};
use dpgd_accounting::filter::IndividualFilter;
use rayon::prelude::*;
use std::hint::black_box;

const N: usize = 60_000;

fn ledger(c: &mut Criterion) {
    // Requests around the clip so that some examples run out during the benchmark; the
    // ledger is reset each batch so every iteration does the same work.
    let requests: Vec<f64> = (0..N).map(|i| 0.2 + 0.8 * ((i * 7919) % 1000) as f64 / 1000.0).collect();
    let fresh = IndividualFilter::new(N, 50.0).unwrap();
    let mut g = c.benchmark_group("individual_filter_60k");
    g.bench_function("grant_serial", |b| {
        b.iter_batched_ref(
            || fresh.clone(),
            |f| {
                for (i, &r) in requests.iter().enumerate() {
                    black_box(f.grant(i, r));
                }
            },
            criterion::BatchSize::LargeInput,
        )
    });
    g.bench_function("grant_parallel_slots", |b| {
        b.iter_batched_ref(
            || fresh.clone(),
            |f| {
                let s: f64 = f.slots_mut(0..N).zip(requests.par_iter()).map(|(mut s, &r)| s.grant(r)).sum();
                black_box(s)
            },
            criterion::BatchSize::LargeInput,
        )
    });
    g.bench_function("charge_serial", |b| {
        b.iter_batched_ref(
            || fresh.clone(),
            |f| {
                for (i, &r) in requests.iter().enumerate() {
                    black_box(f.charge(i, r).is_ok());
                }
            },
            criterion::BatchSize::LargeInput,
        )
    });
    g.finish();
}

criterion_group!(benches, ledger);
criterion_main!(benches);
