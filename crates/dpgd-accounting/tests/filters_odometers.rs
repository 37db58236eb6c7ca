//! Filters and odometers: monotonicity, ordering, and an empirical check of odometer
//! validity on simulated adaptive compositions of randomized response.

use dpgd_accounting::ApproxDp;
use dpgd_accounting::filter::{
    BasicFilter, DpSums, FzFilter, RogersFilter, SumsFilter, WhitehouseFilter, rounds_allowed,
};
use dpgd_accounting::odometer::{FilterOdometer, MixtureOdometer, PrivacyOdometer, RogersOdometer, StitchedOdometer};
use proptest::prelude::*;
use rand::{RngExt, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn sums(eps: &[f64]) -> DpSums {
    eps.iter().fold(DpSums::default(), |s, &e| s.with(ApproxDp::pure(e).unwrap()))
}

fn filters(eps: f64, delta: f64) -> Vec<(&'static str, Box<dyn SumsFilter>)> {
    vec![
        ("basic", Box::new(BasicFilter::new(eps, delta).unwrap())),
        ("rogers", Box::new(RogersFilter::new(eps, delta).unwrap())),
        ("fz", Box::new(FzFilter::printed(eps, delta).unwrap())),
        ("fz-cks", Box::new(FzFilter::cks(eps, delta).unwrap())),
        ("whitehouse", Box::new(WhitehouseFilter::new(eps, delta, 0.0).unwrap())),
    ]
}

proptest! {
    /// Lower parameters never turn CONT into HALT.
    #[test]
    fn filters_are_monotone(eps in proptest::collection::vec(0.0f64..0.3, 1..40), shrink in proptest::collection::vec(0.0f64..1.0, 40)) {
        let smaller: Vec<f64> = eps.iter().zip(&shrink).map(|(e, s)| e * s).collect();
        for (name, f) in filters(1.0, 1e-6) {
            if f.admits(&sums(&eps)) {
                prop_assert!(f.admits(&sums(&smaller)), "{name}");
            }
        }
    }

    /// An odometer's bound never decreases as Σε² grows.
    #[test]
    fn odometer_bounds_are_non_decreasing(v in 1e-6f64..50.0, dv in 0.0f64..10.0) {
        let a = DpSums { eps2: v, eps_expm1: v / 2.0, ..DpSums::default() };
        let b = DpSums { eps2: v + dv, eps_expm1: (v + dv) / 2.0, ..DpSums::default() };
        let d = 1e-6;
        let odos: Vec<Box<dyn PrivacyOdometer>> = vec![
            Box::new(FilterOdometer::new(1.0, d, 0.0).unwrap()),
            Box::new(MixtureOdometer::new(0.1, d, 0.0).unwrap()),
            Box::new(StitchedOdometer::new(1e-6, d, 0.0).unwrap()),
            Box::new(RogersOdometer::new(60_000, d, 0.0).unwrap()),
        ];
        for o in odos {
            let (x, y) = (o.bound(&a).unwrap(), o.bound(&b).unwrap());
            prop_assert!(y >= x * (1.0 - 1e-12), "{x} > {y}");
        }
    }

    /// [WRRW23]'s filter allows at least as many rounds as Rogers et al.'s on the paper's settings.
    #[test]
    fn whitehouse_allows_at_least_as_many_rounds_as_rogers(eps0 in 1e-3f64..0.5, eps in 0.1f64..5.0, ld in -10f64..-2.0) {
        let delta = 10f64.powf(ld);
        let w = rounds_allowed(&WhitehouseFilter::new(eps, delta, 0.0).unwrap(), eps0).unwrap().unwrap();
        let r = rounds_allowed(&RogersFilter::new(eps, delta).unwrap(), eps0).unwrap().unwrap();
        prop_assert!(w >= r, "whitehouse {w} < rogers {r}");
    }
}

/// Adaptive randomized response: each round's ε depends on the previous outputs; the
/// realised privacy loss is a sum of ±εₘ. An odometer valid at level δ is exceeded (at any
/// time) in at most about δ of the runs.
#[test]
fn odometers_hold_on_simulated_adaptive_randomized_response() {
    let (delta, runs, rounds) = (0.05, 4000, 400);
    let odos: Vec<(&str, Box<dyn PrivacyOdometer>)> = vec![
        ("filter", Box::new(FilterOdometer::new(1.0, delta, 0.0).unwrap())),
        ("mixture", Box::new(MixtureOdometer::tight_at(1.0, delta, 0.0).unwrap())),
        ("stitched", Box::new(StitchedOdometer::new(0.05, delta, 0.0).unwrap())),
        ("rogers", Box::new(RogersOdometer::new(1000, delta, 0.0).unwrap())),
    ];
    let mut rng = ChaCha8Rng::seed_from_u64(2024);
    let mut exceed = vec![0usize; odos.len()];
    let mut mean_exceeded = 0usize; // an invalid "odometer": the expected loss ½V alone
    for _ in 0..runs {
        let (mut loss, mut s) = (0.0f64, DpSums::default());
        let mut last = true;
        let mut hit = vec![false; odos.len()];
        let mut hit_mean = false;
        for _ in 0..rounds {
            let eps: f64 = if last { 0.02 } else { 0.08 }; // adaptively chosen from the last output
            let p_truth = eps.exp() / (1.0 + eps.exp());
            last = rng.random_bool(p_truth);
            loss += if last { eps } else { -eps };
            s = s.with(ApproxDp::pure(eps).unwrap());
            for (k, (_, o)) in odos.iter().enumerate() {
                if o.bound(&s).is_some_and(|b| loss > b) {
                    hit[k] = true;
                }
            }
            hit_mean |= loss > 0.5 * s.eps2;
        }
        for (k, h) in hit.iter().enumerate() {
            exceed[k] += usize::from(*h);
        }
        mean_exceeded += usize::from(hit_mean);
    }
    let tolerance = delta * runs as f64 + 3.0 * (delta * (1.0 - delta) * runs as f64).sqrt();
    for (k, (name, _)) in odos.iter().enumerate() {
        assert!((exceed[k] as f64) <= tolerance, "{name} odometer exceeded in {} of {runs} runs", exceed[k]);
    }
    assert!(mean_exceeded as f64 > tolerance, "the simulation must be able to catch an invalid bound");
}

#[test]
fn rounds_allowed_matches_stepwise_charging() {
    use dpgd_accounting::filter::{DpFilter, PrivacyFilter};
    let rule = WhitehouseFilter::new(1.0, 1e-6, 0.0).unwrap();
    let mut stepwise = DpFilter::new(rule);
    let mut n = 0u64;
    while stepwise.try_charge(ApproxDp::pure(0.05).unwrap()).is_ok() {
        n += 1;
    }
    assert_eq!(Some(n), rounds_allowed(&rule, 0.05).unwrap());
}
