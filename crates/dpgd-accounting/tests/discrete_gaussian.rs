//! The exact samplers against their exact distributions: chi-square goodness of fit with a
//! fixed seed (and a check that the same test rejects a 3% error in the scale, so it has
//! power), mean, variance, symmetry, and the Bernoulli(exp(−γ)) frequencies.

use dpgd_accounting::sampling::{DiscreteGaussian, DiscreteLaplace, bernoulli_exp};
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;

/// A pmf on the integers [lo, lo + p.len()).
struct Pmf {
    lo: i64,
    p: Vec<f64>,
}

/// The normalised pmf ∝ weight(x) on [−m, m].
fn pmf(m: i64, weight: impl Fn(f64) -> f64) -> Pmf {
    let w: Vec<f64> = (-m..=m).map(|x| weight(x as f64)).collect();
    let z: f64 = w.iter().sum();
    Pmf { lo: -m, p: w.into_iter().map(|x| x / z).collect() }
}

fn gaussian_pmf(sigma2: f64) -> Pmf {
    pmf((14.0 * sigma2.sqrt()).ceil() as i64 + 3, |x| (-x * x / (2.0 * sigma2)).exp())
}

fn laplace_pmf(t: f64) -> Pmf {
    pmf((60.0 * t).ceil() as i64 + 3, |x| (-x.abs() / t).exp())
}

/// Pearson's χ² of `samples` against `pmf`, bins merged until each expects ≥ 20; returns
/// (statistic, degrees of freedom).
fn chi_square(samples: &[i64], pmf: &Pmf) -> (f64, usize) {
    let n = samples.len() as f64;
    let mut counts = vec![0usize; pmf.p.len()];
    for &s in samples {
        let i = (s - pmf.lo).clamp(0, pmf.p.len() as i64 - 1) as usize;
        counts[i] += 1;
    }
    let (mut bins, mut exp_acc, mut obs_acc) = (Vec::new(), 0.0, 0usize);
    for (c, p) in counts.iter().zip(&pmf.p) {
        exp_acc += p * n;
        obs_acc += c;
        if exp_acc >= 20.0 {
            bins.push((obs_acc as f64, exp_acc));
            (exp_acc, obs_acc) = (0.0, 0);
        }
    }
    if let Some(last) = bins.last_mut() {
        last.0 += obs_acc as f64;
        last.1 += exp_acc;
    }
    let stat = bins.iter().map(|(o, e)| (o - e) * (o - e) / e).sum();
    (stat, bins.len() - 1)
}

/// The upper 1e-4 quantile of χ²_df (Wilson–Hilferty; z = 3.719).
fn chi_square_critical(df: usize) -> f64 {
    let k = df as f64;
    let z = 3.719;
    k * (1.0 - 2.0 / (9.0 * k) + z * (2.0 / (9.0 * k)).sqrt()).powi(3)
}

fn moments(p: &Pmf) -> (f64, f64) {
    let var: f64 = p.p.iter().enumerate().map(|(i, q)| ((p.lo + i as i64) as f64).powi(2) * q).sum();
    let m4: f64 = p.p.iter().enumerate().map(|(i, q)| ((p.lo + i as i64) as f64).powi(4) * q).sum();
    (var, m4)
}

fn check_gaussian(sigma: f64, n: usize, seed: u64) {
    let g = DiscreteGaussian::new(sigma).unwrap();
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    let xs: Vec<i64> = (0..n).map(|_| g.sample(&mut rng)).collect();
    let s2 = g.sigma_squared_f64();
    assert!(s2 >= sigma * sigma && s2 <= sigma * sigma * (1.0 + 1e-13), "σ² rounded up, barely: {s2}");

    // Goodness of fit, and power: the same samples must reject a 3% larger σ.
    let exact = gaussian_pmf(s2);
    let (stat, df) = chi_square(&xs, &exact);
    assert!(stat < chi_square_critical(df), "σ = {sigma}: χ² = {stat:.1} on {df} df");
    let (wrong, wdf) = chi_square(&xs, &gaussian_pmf(s2 * 1.03 * 1.03));
    assert!(wrong > chi_square_critical(wdf), "σ = {sigma}: the test cannot tell σ from 1.03σ ({wrong:.1})");

    // Mean 0, variance below σ² and equal to the pmf's, symmetric.
    let nf = n as f64;
    let (var_exact, m4) = moments(&exact);
    // The discrete Gaussian's variance is below σ² ([CKS20]); for σ ≥ 3 the gap is below
    // e^{-2π²σ²}, invisible in f64 (the sum then carries a few ulps of rounding).
    assert!(var_exact <= s2 * (1.0 + 1e-12), "variance {var_exact} above σ² = {s2}");
    if sigma < 1.0 {
        assert!(var_exact < 0.999 * s2, "for σ = {sigma} the variance {var_exact} is visibly below σ² = {s2}");
    }
    let mean = xs.iter().map(|&x| x as f64).sum::<f64>() / nf;
    assert!(mean.abs() < 5.0 * (var_exact / nf).sqrt(), "σ = {sigma}: mean {mean}");
    let var = xs.iter().map(|&x| (x as f64).powi(2)).sum::<f64>() / nf;
    let se = ((m4 - var_exact * var_exact) / nf).sqrt();
    assert!((var - var_exact).abs() < 5.0 * se, "σ = {sigma}: variance {var} vs {var_exact} (se {se})");
    assert!(var <= s2 + 5.0 * se);
    let (pos, neg) = (xs.iter().filter(|&&x| x > 0).count(), xs.iter().filter(|&&x| x < 0).count());
    let m = (pos + neg) as f64;
    assert!(((pos as f64) - m / 2.0).abs() < 5.0 * (m / 4.0).sqrt(), "σ = {sigma}: {pos} positive, {neg} negative");
}

#[test]
fn discrete_gaussian_small_sigma() {
    check_gaussian(0.7, 200_000, 11);
}

#[test]
fn discrete_gaussian_moderate_sigma() {
    check_gaussian(3.0, 200_000, 12);
}

#[test]
fn discrete_gaussian_large_sigma() {
    check_gaussian(50.0, 300_000, 13);
}

#[test]
fn discrete_gaussian_at_training_scales() {
    // σ as used for noisy counts and quantised gradients: variance and symmetry only (the
    // pmf has too many points for a cheap χ²), with a looser 5-se bound.
    for (sigma, seed) in [(1e2, 21), (1e5, 22), (1e7, 23), (1e12, 24)] {
        let g = DiscreteGaussian::new(sigma).unwrap();
        let mut rng = ChaCha20Rng::seed_from_u64(seed);
        let n = 40_000;
        let xs: Vec<f64> = (0..n).map(|_| g.sample(&mut rng) as f64).collect();
        let nf = n as f64;
        let mean = xs.iter().sum::<f64>() / nf;
        let var = xs.iter().map(|x| x * x).sum::<f64>() / nf;
        assert!(mean.abs() < 5.0 * sigma / nf.sqrt(), "σ = {sigma}: mean {mean}");
        // For σ ≥ 100 the variance is σ² to within 1e-300 relative; its se is σ²√(2/n).
        assert!((var / (sigma * sigma) - 1.0).abs() < 5.0 * (2.0 / nf).sqrt(), "σ = {sigma}: var {var}");
    }
}

#[test]
fn tiny_sigma_is_a_point_mass_at_zero() {
    let g = DiscreteGaussian::new(1e-3).unwrap();
    let mut rng = ChaCha20Rng::seed_from_u64(5);
    assert!((0..10_000).all(|_| g.sample(&mut rng) == 0));
}

#[test]
fn add_noise_saturates_instead_of_overflowing() {
    let g = DiscreteGaussian::new(1e12).unwrap();
    let mut rng = ChaCha20Rng::seed_from_u64(6);
    let mut v = [i64::MAX, i64::MIN, 0];
    g.add_noise(&mut v, &mut rng);
    assert!(v[0] > i64::MAX - 10_000_000_000_000 && v[1] < i64::MIN + 10_000_000_000_000);
}

#[test]
fn discrete_laplace_matches_its_pmf() {
    for (t, seed) in [(1u64, 31), (3, 32), (40, 33)] {
        let lap = DiscreteLaplace::new(t).unwrap();
        let mut rng = ChaCha20Rng::seed_from_u64(seed);
        let xs: Vec<i64> = (0..200_000).map(|_| lap.sample(&mut rng)).collect();
        let (stat, df) = chi_square(&xs, &laplace_pmf(t as f64));
        assert!(stat < chi_square_critical(df), "t = {t}: χ² = {stat:.1} on {df} df");
        let (wrong, wdf) = chi_square(&xs, &laplace_pmf(t as f64 * 1.03));
        assert!(wrong > chi_square_critical(wdf), "t = {t}: no power ({wrong:.1})");
    }
}

#[test]
fn bernoulli_exp_matches_exp_minus_gamma() {
    let n = 200_000;
    let big = u128::MAX / 4;
    let cases: [(u128, u128); 7] = [(0, 1), (1, 3), (1, 1), (5, 2), (7, 1), (big / 3 * 2, big), (3 * big, big)];
    let mut rng = ChaCha20Rng::seed_from_u64(41);
    for (num, den) in cases {
        let p = (-(num as f64 / den as f64)).exp();
        let hits = (0..n).filter(|_| bernoulli_exp(num, den, &mut rng).unwrap()).count() as f64;
        let se = (p * (1.0 - p) / n as f64).sqrt().max(1e-9);
        assert!((hits / n as f64 - p).abs() <= 5.0 * se, "γ = {num}/{den}: {} vs {p}", hits / n as f64);
    }
    // A huge γ: essentially never, and quickly.
    assert!(!(0..1000).any(|_| bernoulli_exp(u128::MAX, 1, &mut rng).unwrap()));
}
