//! The exact discrete Gaussian sampler at the sizes private training needs: 26,000 samples
//! (one step's worth of noise for a small model) at σ = 1e2, 1e4 and 1e7 grid units, from
//! ChaCha20. Run: `cargo bench -p dpgd-accounting --bench discrete_gaussian`.

use criterion::{Criterion, criterion_group, criterion_main};
use dpgd_accounting::sampling::DiscreteGaussian;
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use std::hint::black_box;

const N: usize = 26_000;

fn discrete_gaussian(c: &mut Criterion) {
    let mut g = c.benchmark_group("discrete_gaussian_26k");
    for sigma in [1e2, 1e4, 1e7] {
        let noise = DiscreteGaussian::new(sigma).unwrap();
        let mut rng = ChaCha20Rng::seed_from_u64(1);
        let mut out = vec![0i64; N];
        g.bench_function(format!("sigma_{sigma:e}"), |b| {
            b.iter(|| {
                for v in out.iter_mut() {
                    *v = noise.sample(&mut rng);
                }
                black_box(&out);
            })
        });
    }
}

criterion_group!(benches, discrete_gaussian);
criterion_main!(benches);
