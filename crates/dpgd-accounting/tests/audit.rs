//! Audit statistics against independent values (mpmath, `tests/reference/audit_refs.py`)
//! and on exactly Gaussian scores, where the true μ is known.

mod reference;

use std::time::Instant;

use dpgd_accounting::audit::{
    AuditOptions, Direction, approx_dp_epsilon_lower_bound, audit_scores, clopper_pearson, clopper_pearson_lower,
    clopper_pearson_upper, gdp_mu_lower_bound, normal_quantile,
};
use dpgd_accounting::convert::gaussian_epsilon;
use rand::SeedableRng;
use rand_chacha::ChaCha20Rng;
use rand_distr::{Distribution, Normal};

const REFS: &str = include_str!("reference/audit_refs.txt");

fn rows(kind: &str) -> Vec<Vec<f64>> {
    reference::rows(REFS, kind)
}

#[test]
fn normal_quantile_matches_reference_to_1e_14() {
    for r in rows("quantile") {
        let (p, want) = (r[0], r[1]);
        let got = normal_quantile(p).unwrap();
        let err = if want == 0.0 { got.abs() } else { ((got - want) / want).abs() };
        assert!(err <= 1e-14, "Φ⁻¹({p:e}) = {got:e}, want {want:e} (relative error {err:e})");
    }
    // Down to the smallest subnormal, and symmetric.
    let x = normal_quantile(f64::from_bits(1)).unwrap();
    assert!((-38.5..-38.4).contains(&x), "{x}");
    assert_eq!(normal_quantile(0.25).unwrap(), -normal_quantile(0.75).unwrap());
    for bad in [0.0, 1.0, -0.1, f64::NAN, f64::INFINITY] {
        assert!(normal_quantile(bad).is_err());
    }
}

#[test]
fn clopper_pearson_matches_reference() {
    for r in rows("cp") {
        let (k, n, c) = (r[0] as u64, r[1] as u64, r[2]);
        let start = Instant::now();
        let ci = clopper_pearson(k, n, c).unwrap();
        let took = start.elapsed();
        for (got, want, side) in [(ci.lower, r[3], "lower"), (ci.upper, r[4], "upper")] {
            let err = if want == 0.0 { got.abs() } else { ((got - want) / want).abs() };
            assert!(err <= 1e-8, "CP {side} ({k}/{n}, {c}): {got:e}, want {want:e} (relative error {err:e})");
        }
        // Conservative: never narrower than the exact interval by more than rounding.
        assert!(ci.lower <= r[3] * (1.0 + 1e-13) && ci.upper >= r[4] * (1.0 - 1e-13), "{k}/{n}: {ci:?}");
        assert!(took.as_secs_f64() < 0.5, "CP for n = {n} took {took:?}");
    }
    // The one-sided bounds are the two-sided ones at twice the tail.
    let two = clopper_pearson(17, 2500, 0.95).unwrap();
    assert!((clopper_pearson_upper(17, 2500, 0.975).unwrap() - two.upper).abs() < 1e-15);
    assert!((clopper_pearson_lower(17, 2500, 0.975).unwrap() - two.lower).abs() < 1e-15);
}

#[test]
fn clopper_pearson_is_fast_at_ten_million_trials() {
    let start = Instant::now();
    for k in [0, 1, 1000, 5_000_000, 9_999_999, 10_000_000] {
        let ci = clopper_pearson(k, 10_000_000, 0.95).unwrap();
        assert!(ci.lower <= k as f64 / 1e7 && ci.upper >= k as f64 / 1e7, "{k}: {ci:?}");
    }
    assert!(start.elapsed().as_secs_f64() < 2.0, "{:?}", start.elapsed());
}

#[test]
fn rate_bounds_in_closed_form() {
    // μ-GDP with threshold t: α = 1 − Φ(t), β = Φ(t − μ), so the bound is exactly μ.
    for (mu, t) in [(0.5f64, 0.1f64), (2.0, 1.0), (6.0, 3.0)] {
        let a = 1.0 - dpgd_accounting::numeric::normal_cdf(t);
        let b = dpgd_accounting::numeric::normal_cdf(t - mu);
        let got = gdp_mu_lower_bound(a, b).unwrap();
        assert!((got - mu).abs() < 1e-9 * mu.max(1.0), "μ = {mu}: {got}");
    }
    // (ε, δ): α = 0.1, β = 0.2, δ = 0: max(ln(0.8/0.1), ln(0.9/0.2)) = ln 8.
    let e = approx_dp_epsilon_lower_bound(0.1, 0.2, 0.0).unwrap();
    assert!((e - 8f64.ln()).abs() < 1e-13 && e <= 8f64.ln());
    assert_eq!(approx_dp_epsilon_lower_bound(0.5, 0.6, 1e-5).unwrap(), 0.0);
}

fn gaussian_scores(mu: f64, n: usize, seed: u64) -> (Vec<f64>, Vec<f64>) {
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    let out = Normal::new(0.0, 1.0).unwrap();
    let inn = Normal::new(mu, 1.0).unwrap();
    let a: Vec<f64> = (0..n).map(|_| inn.sample(&mut rng)).collect();
    let b: Vec<f64> = (0..n).map(|_| out.sample(&mut rng)).collect();
    (a, b)
}

#[test]
fn gaussian_scores_give_a_valid_and_tight_mu_bound() {
    // Exactly μ-GDP scores, 5,000 trials per world, 95% confidence: the bound is below the
    // true μ (valid) and above μ/2 (tight). Measured over seeds 0..400 (a throwaway sweep of
    // this function): the bound is above μ in 0.25% (μ = 0.25, 3) to 0.5% (μ = 1) of the
    // seeds — within the 5% the confidence level allows — and below μ/2 in none for μ = 1
    // and 3, but in 5% for μ = 0.25, where 5,000 trials are near the limit of what a 95%
    // bound can resolve (median 0.173; 0.178 at the ideal threshold). Seed 7 is one of the
    // other 95%.
    for (mu, seed) in [(0.25, 7), (1.0, 7), (3.0, 7)] {
        let (inn, out) = gaussian_scores(mu, 5000, seed);
        let b = audit_scores(&inn, &out, &AuditOptions::default()).unwrap();
        assert!(b.mu_lower <= mu, "μ = {mu}: bound {} above the truth ({b:?})", b.mu_lower);
        assert!(b.mu_lower >= mu / 2.0, "μ = {mu}: bound {} not tight ({b:?})", b.mu_lower);
        assert_eq!(b.direction, Direction::HigherIsIn);
        assert_eq!((b.trials_in, b.selection_in), (4500, 500));
        assert!(b.fpr <= b.fpr_upper && b.fnr <= b.fnr_upper);
        // The GDP ε is that of μ_lower; the distribution-free ε is weaker but still a bound.
        assert_eq!(b.epsilon_lower_gdp, gaussian_epsilon(b.mu_lower, 1e-5));
        assert!(b.epsilon_lower <= gaussian_epsilon(mu, 1e-5));
    }
    // The canary lowers the score instead: the direction is found on the selection trials.
    let (inn, out) = gaussian_scores(1.0, 5000, 4);
    let flipped: Vec<f64> = inn.iter().map(|x| -x).collect();
    let neg_out: Vec<f64> = out.iter().map(|x| -x).collect();
    let b = audit_scores(&flipped, &neg_out, &AuditOptions::default()).unwrap();
    assert_eq!(b.direction, Direction::LowerIsIn);
    assert!(b.mu_lower <= 1.0 && b.mu_lower >= 0.5, "{b:?}");
}

#[test]
fn no_canary_effect_gives_no_evidence() {
    let (inn, out) = gaussian_scores(0.0, 5000, 5);
    let b = audit_scores(&inn, &out, &AuditOptions::default()).unwrap();
    assert!(b.mu_lower <= 0.05, "{b:?}");
    assert!(b.epsilon_lower <= 0.05, "{b:?}");
}

#[test]
fn audits_refuse_bad_inputs_by_name() {
    let ok = vec![0.0; 20];
    let opts = AuditOptions::default();
    let e = audit_scores(&[0.0, f64::NAN, 1.0, 2.0, 3.0], &ok, &opts).unwrap_err().to_string();
    assert!(e.contains("scores_in") && e.contains("NaN"), "{e}");
    let e = audit_scores(&ok, &[1.0; 9], &opts).unwrap_err().to_string();
    assert!(e.contains("scores_out") && e.contains("too few"), "{e}");
    let e = audit_scores(&ok, &ok, &AuditOptions { confidence: 1.0, ..opts }).unwrap_err().to_string();
    assert!(e.contains("confidence"), "{e}");
    let e = audit_scores(&ok, &ok, &AuditOptions { delta: 0.0, ..opts }).unwrap_err().to_string();
    assert!(e.contains("delta"), "{e}");
    let e = audit_scores(&ok, &ok, &AuditOptions { selection_fraction: 0.0, ..opts }).unwrap_err().to_string();
    assert!(e.contains("selection_fraction"), "{e}");
    // Identical constant scores: no evidence, no panic.
    let b = audit_scores(&ok, &ok, &opts).unwrap();
    assert_eq!(b.mu_lower, 0.0);
}
