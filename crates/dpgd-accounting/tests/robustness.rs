//! No panic, no hang, on any `f64`: every public constructor and function of the crate is
//! called with arbitrary bit patterns (NaN, ±∞, subnormals, ±0, ±1e-300, ±1e300 and
//! ordinary values). Each call must return (`Ok`, `Err`, or a number) within
//! [`LIMIT`], measured, and never panic; where it returns `Ok`, the value must be meaningful
//! (no NaN guarantee, no ε below 0, a calibrated σ that meets its target).

use std::time::{Duration, Instant};

use dpgd_accounting::audit::{
    AuditOptions, MAX_TRIALS, approx_dp_epsilon_lower_bound, audit_scores, clopper_pearson, gdp_mu_lower_bound,
    normal_quantile,
};
use dpgd_accounting::convert::{
    bun_steinke_epsilon, bun_steinke_max_rho, cks_epsilon, gaussian_delta, gaussian_epsilon,
};
use dpgd_accounting::filter::{
    ApproxZcdp, ApproxZcdpFilter, BasicFilter, DpFilter, DpSums, FzFilter, IndividualCharge, IndividualFilter,
    MultiOrderRdpFilter, PrivacyFilter, RenyiFilter, RogersFilter, SumsFilter, WhitehouseFilter, ZcdpFilter,
    rounds_allowed,
};
use dpgd_accounting::mechanism::{FilteredLinearQueries, GaussianMechanism};
use dpgd_accounting::numeric::{
    add_up, div_up, increasing_root, largest_where, mul_up, normal_cdf, smallest_where, sqrt_up, sub_down,
};
use dpgd_accounting::odometer::{
    FilterOdometer, MixtureOdometer, Odometer, PrivacyOdometer, RogersOdometer, StitchedOdometer,
};
use dpgd_accounting::sampling::{DiscreteGaussian, DiscreteLaplace, bernoulli_exp};
use dpgd_accounting::session::PrivacySession;
use dpgd_accounting::{
    ApproxDp, Conversion, GaussianDp, GaussianRelease, GdPlan, Neighbours, PrivateGd, PureDp, Rdp, ToApproxDp, Zcdp,
    calibrate_sigma, non_negative, positive, probability,
};
use proptest::prelude::*;
use rand::SeedableRng;

/// The longest any single call may take.
const LIMIT: Duration = Duration::from_millis(200);

/// Runs `f`, failing the test if it takes longer than [`LIMIT`].
fn timed<T>(what: &str, f: impl FnOnce() -> T) -> T {
    let start = Instant::now();
    let out = f();
    let took = start.elapsed();
    assert!(took < LIMIT, "{what} took {took:?} (limit {LIMIT:?})");
    out
}

/// Arbitrary doubles, with the awkward ones over-represented.
fn any_f64() -> impl Strategy<Value = f64> {
    let special = vec![
        f64::NAN,
        -f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        0.0,
        -0.0,
        f64::from_bits(1),
        -f64::from_bits(1),
        1e-320,
        f64::MIN_POSITIVE,
        1e-300,
        -1e-300,
        1e-200,
        1e-150,
        1e150,
        1e200,
        1e300,
        -1e300,
        f64::MAX,
        -f64::MAX,
        f64::EPSILON,
        1.0,
        -1.0,
        1.0 - f64::EPSILON / 2.0,
        1.0 + f64::EPSILON,
        0.5,
        2.0,
        (-1.0f64).exp(),
        1e-5,
        1e-12,
    ];
    prop_oneof![
        2 => any::<u64>().prop_map(f64::from_bits),
        3 => proptest::sample::select(special),
        // Positive numbers across the whole exponent range, and probabilities: these reach
        // the solvers, which random bit patterns (half negative, many huge) rarely do.
        4 => (-325.0f64..309.0).prop_map(|e| 10f64.powf(e)),
        1 => (-325.0f64..309.0).prop_map(|e| -(10f64.powf(e))),
        2 => 0.0f64..10.0,
        2 => 0.0f64..1.0,
    ]
}

fn assert_meaningful(what: &str, x: f64) {
    assert!(x >= 0.0, "{what} returned {x} as a success");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn numeric_building_blocks(a in any_f64(), b in any_f64(), t in any_f64()) {
        timed("normal_cdf", || normal_cdf(a));
        timed("add_up", || add_up(a, b));
        timed("sub_down", || sub_down(a, b));
        timed("mul_up", || mul_up(a, b));
        timed("div_up", || div_up(a, b));
        timed("sqrt_up", || sqrt_up(a));
        let r = timed("largest_where", || largest_where(a, b, |x| x <= t));
        if let Some(x) = r {
            prop_assert!(x <= t, "largest_where answered {x} > {t}");
        }
        let r = timed("smallest_where", || smallest_where(a, b, |x| x >= t));
        prop_assert!(r.is_nan() || r >= t, "smallest_where answered {r} < {t}");
        timed("increasing_root", || increasing_root(a, b, |x| x - t));
        for check in [positive, non_negative, probability] {
            if let Ok(x) = timed("validators", || check("x", a)) {
                prop_assert_eq!(x.to_bits(), a.to_bits());
            }
        }
    }

    #[test]
    fn measures_and_their_arithmetic(a in any_f64(), b in any_f64(), n in any::<u64>()) {
        if let Ok(p) = timed("PureDp::new", || PureDp::new(a)) {
            let z = p.to_zcdp();
            prop_assert!(z.rho() > 0.0, "{:?}", z);
            prop_assert!(p.epsilon() >= 0.0);
        }
        let z = timed("Zcdp::new", || Zcdp::new(a));
        let g = timed("GaussianDp::new", || GaussianDp::new(a));
        if let (Ok(z), Ok(other)) = (z, Zcdp::new(b)) {
            prop_assert!(z.compose(other).rho() >= z.rho().max(other.rho()));
            if let Ok(r) = timed("Zcdp::repeated", || z.repeated(n)) {
                prop_assert!(r.rho().is_finite() && r.rho() >= z.rho());
            }
            let _ = timed("Zcdp::to_rdp", || z.to_rdp(&[a, b, 2.0]));
            let gz = GaussianDp::from_gaussian_zcdp(z);
            prop_assert!(gz.mu() > 0.0);
        }
        if let (Ok(g), Ok(other)) = (g, GaussianDp::new(b)) {
            prop_assert!(g.compose(other).mu() >= g.mu().max(other.mu()));
            prop_assert!(g.to_zcdp().rho() > 0.0);
        }
        if let Ok(r) = timed("Rdp::new", || Rdp::new(vec![a, 2.0], vec![b, 0.5])) {
            let _ = timed("Rdp::compose", || r.compose(&r));
        }
        let _ = timed("ApproxDp::new", || ApproxDp::new(a, b));
        let _ = timed("ApproxDp::pure", || ApproxDp::pure(a));
    }

    #[test]
    fn conversions_both_ways(a in any_f64(), d in any_f64(), rho in any_f64()) {
        timed("bun_steinke_epsilon", || bun_steinke_epsilon(rho, d));
        timed("bun_steinke_max_rho", || bun_steinke_max_rho(a, d));
        timed("cks_epsilon", || cks_epsilon(rho, d));
        timed("gaussian_delta", || gaussian_delta(rho, a));
        timed("gaussian_epsilon", || gaussian_epsilon(rho, d));
        for m in Conversion::ALL {
            if let Ok(z) = timed("max_rho", || m.max_rho(a, d)) {
                prop_assert!(z.rho().is_finite() && z.rho() > 0.0);
            }
            if let Ok(z) = Zcdp::new(rho) {
                if let Ok(e) = timed("Zcdp::epsilon", || z.epsilon(d, m)) {
                    assert_meaningful("Zcdp::epsilon", e);
                }
                let g = GaussianDp::from_gaussian_zcdp(z);
                if let Ok(e) = timed("GaussianDp::epsilon", || g.epsilon(d, m)) {
                    assert_meaningful("GaussianDp::epsilon", e);
                }
            }
            if let Ok(g) = GaussianDp::new(rho)
                && let Ok(e) = timed("GaussianDp::epsilon", || g.epsilon(d, m)) {
                    assert_meaningful("GaussianDp::epsilon", e);
                }
            if let Ok(r) = Rdp::new(vec![1.5, 32.0], vec![rho.abs(), a.abs()])
                && let Ok(e) = timed("Rdp::epsilon", || r.epsilon(d, m)) {
                    assert_meaningful("Rdp::epsilon", e);
                }
        }
    }

    #[test]
    fn calibration(e in any_f64(), d in any_f64(), k in any_f64(), sigma in any_f64(), c in any_f64(), n in 0u64..1_000_000) {
        for m in Conversion::ALL {
            if let Ok(target) = ApproxDp::new(e, d) {
                if let Ok(s) = timed("calibrate_sigma", || calibrate_sigma(target, k, m)) {
                    prop_assert!(s.is_finite() && s > 0.0);
                    let spent = PrivateGd::new(s, 1.0, k).unwrap().epsilon(d, m).unwrap();
                    prop_assert!(spent <= e, "{m}: calibrated sigma {s} spends {spent} > {e}");
                }
                if let (Ok(plan), Ok(release)) = (GdPlan::new(k), GaussianRelease::new(sigma, c, n)) {
                    let plan = plan.with_release(release).with_neighbours(Neighbours::ReplaceOne);
                    if let Ok(s) = timed("GdPlan::calibrate", || plan.calibrate(target, m)) {
                        let spent = plan.guarantee(s).unwrap().epsilon(d, m).unwrap();
                        prop_assert!(spent <= e, "{m}: plan sigma {s} spends {spent} > {e}");
                    }
                    let _ = timed("GdPlan::guarantee", || plan.guarantee(sigma));
                }
            }
        }
        if let Ok(run) = timed("PrivateGd::new", || PrivateGd::new(sigma, c, k)) {
            for m in Conversion::ALL {
                if let Ok(eps) = timed("PrivateGd::epsilon", || run.epsilon(d, m)) {
                    assert_meaningful("PrivateGd::epsilon", eps);
                }
            }
            let _ = timed("PrivateGd::with_neighbours", || run.with_neighbours(Neighbours::ReplaceOne));
        }
        if let Ok(r) = timed("GaussianRelease::new", || GaussianRelease::new(sigma, c, n)) {
            prop_assert!(!r.mu_squared().is_nan());
            let _ = r.cost_of_one();
        }
    }

    #[test]
    fn filters_decide_and_charge(a in any_f64(), b in any_f64(), x in any_f64(), y in any_f64(), i in 0usize..4) {
        if let Ok(mut f) = timed("RenyiFilter::new", || RenyiFilter::new(a, b)) {
            let d = f.decide(&x);
            prop_assert_eq!(d == dpgd_accounting::filter::Decision::Continue, timed("try_charge", || f.try_charge(x)).is_ok());
        }
        if let Ok(z) = Zcdp::new(a) {
            let mut f = ZcdpFilter::new(z);
            if let Ok(c) = Zcdp::new(x) {
                let _ = timed("ZcdpFilter::try_charge", || f.try_charge(c));
            }
        }
        if let Ok(budget) = Rdp::new(vec![2.0, 8.0], vec![a.abs(), b.abs()])
            && let Ok(mut f) = timed("MultiOrderRdpFilter::new", || MultiOrderRdpFilter::new(budget))
                && let Ok(c) = Rdp::new(vec![2.0, 8.0], vec![x.abs(), y.abs()]) {
                    let _ = timed("MultiOrderRdpFilter::try_charge", || f.try_charge(c));
                }
        if let Ok(mut f) = timed("IndividualFilter::new", || IndividualFilter::new(3, a)) {
            let _ = timed("IndividualFilter::charge", || f.charge(i, x));
            if i < 3 {
                let g = timed("IndividualFilter::grant", || f.grant(i, y));
                prop_assert!(g >= 0.0 && g.is_finite());
            }
            let _ = timed("IndividualFilter::try_grant", || f.try_grant(i, y));
            let _ = timed("IndividualFilter::try_charge", || f.try_charge(IndividualCharge { index: i, amount: x }));
            prop_assert!(f.spent_all().iter().all(|&s| s <= f.budget()));
        }
        if let Ok(f) = timed("IndividualFilter::from_spent", || IndividualFilter::from_spent(a, vec![x, y])) {
            prop_assert!(f.spent_all().iter().all(|&s| (0.0..=f.budget()).contains(&s)));
        }
        if let Ok(mut f) = timed("ApproxZcdpFilter::new", || ApproxZcdpFilter::new(a, b)) {
            let _ = timed("ApproxZcdpFilter::try_charge", || f.try_charge(ApproxZcdp { rho: x, delta: y }));
        }
        if let Ok(c) = ApproxDp::new(x.abs(), y.abs()) {
            let rules: Vec<(&str, Result<Box<dyn SumsFilter>, _>)> = vec![
                ("basic", BasicFilter::new(a, b).map(|f| Box::new(f) as Box<dyn SumsFilter>)),
                ("rogers", RogersFilter::new(a, b).map(|f| Box::new(f) as Box<dyn SumsFilter>)),
                ("fz", FzFilter::printed(a, b).map(|f| Box::new(f) as Box<dyn SumsFilter>)),
                ("fz-cks", FzFilter::cks(a, b).map(|f| Box::new(f) as Box<dyn SumsFilter>)),
                ("whitehouse", WhitehouseFilter::new(a, b, y).map(|f| Box::new(f) as Box<dyn SumsFilter>)),
            ];
            for (name, rule) in rules {
                if let Ok(rule) = rule {
                    let _ = timed(name, || rule.admits(&DpSums::default().with(c)));
                    let _ = timed("rounds_allowed", || rounds_allowed(rule.as_ref(), x));
                }
            }
        }
        if let Ok(rule) = WhitehouseFilter::new(a, b, 0.0) {
            let mut f = DpFilter::new(rule);
            if let Ok(c) = ApproxDp::new(x, y) {
                let _ = timed("DpFilter::try_charge", || f.try_charge(c));
            }
        }
    }

    #[test]
    fn odometers_bounds(e in any_f64(), d1 in any_f64(), d2 in any_f64(), v in any_f64(), w in any_f64(), n in any::<u64>(), r in any::<u64>()) {
        let sums = DpSums { eps: v, eps2: v, eps_expm1: w, delta: w, rounds: n, exact: None };
        let odos: Vec<Box<dyn PrivacyOdometer>> = [
            timed("FilterOdometer::new", || FilterOdometer::new(e, d1, d2)).map(|o| Box::new(o) as Box<dyn PrivacyOdometer>),
            timed("MixtureOdometer::new", || MixtureOdometer::new(e, d1, d2)).map(|o| Box::new(o) as Box<dyn PrivacyOdometer>),
            timed("MixtureOdometer::tight_at", || MixtureOdometer::tight_at(e, d1, d2)).map(|o| Box::new(o) as Box<dyn PrivacyOdometer>),
            timed("StitchedOdometer::new", || StitchedOdometer::new(e, d1, d2)).map(|o| Box::new(o) as Box<dyn PrivacyOdometer>),
            timed("RogersOdometer::new", || RogersOdometer::new(n, d1, d2)).map(|o| Box::new(o) as Box<dyn PrivacyOdometer>),
        ]
        .into_iter()
        .flatten()
        .collect();
        for o in &odos {
            for s in [sums, DpSums::default(), DpSums::default().repeated(ApproxDp::pure(v.abs()).unwrap_or(ApproxDp::pure(0.0).unwrap()), r)] {
                if let Some(b) = timed("bound", || o.bound(&s)) {
                    prop_assert!(!b.is_nan(), "a NaN bound must be reported as trivial");
                }
            }
        }
        if let Ok(rule) = MixtureOdometer::new(0.1, 1e-6, 0.0) {
            let mut o = Odometer::new(rule);
            if let Ok(c) = ApproxDp::new(v, w) {
                let _ = timed("Odometer::record", || o.record(c));
                let _ = o.bound();
            }
        }
        if let Ok(c) = ApproxDp::new(v, 0.0) {
            let s = timed("DpSums::repeated", || DpSums::default().repeated(c, r));
            prop_assert!(s.rounds == r);
        }
    }

    #[test]
    fn samplers(sigma in any_f64(), delta in any_f64(), num in any::<u128>(), den in any::<u128>(), scale in any::<u64>()) {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(9);
        if let Ok(g) = timed("DiscreteGaussian::new", || DiscreteGaussian::new(sigma)) {
            for _ in 0..4 {
                timed("DiscreteGaussian::sample", || g.sample(&mut rng));
            }
            if let Ok(z) = timed("DiscreteGaussian::zcdp", || g.zcdp(delta)) {
                prop_assert!(z.rho() > 0.0 && z.rho().is_finite());
            }
        }
        let _ = timed("bernoulli_exp", || bernoulli_exp(num, den, &mut rng));
        if let Ok(lap) = timed("DiscreteLaplace::new", || DiscreteLaplace::new(scale)) {
            timed("DiscreteLaplace::sample", || lap.sample(&mut rng));
        }
    }

    #[test]
    fn audit_statistics(p in any_f64(), q in any_f64(), d in any_f64(), k in any::<u64>(), n in any::<u64>(), small in 0u64..2000, scores in proptest::collection::vec(any_f64(), 0..40)) {
        if let Ok(x) = timed("normal_quantile", || normal_quantile(p)) {
            prop_assert!(x.is_finite());
        }
        let n_any = n % (MAX_TRIALS + 10);
        for (k, n) in [(k % (n_any + 2), n_any), (small / 2, small), (k, n)] {
            if let Ok(ci) = timed("clopper_pearson", || clopper_pearson(k, n, p)) {
                prop_assert!(0.0 <= ci.lower && ci.lower <= ci.upper && ci.upper <= 1.0, "{ci:?}");
            }
        }
        if let Ok(m) = timed("gdp_mu_lower_bound", || gdp_mu_lower_bound(p, q)) {
            prop_assert!(m >= 0.0);
        }
        if let Ok(e) = timed("approx_dp_epsilon_lower_bound", || approx_dp_epsilon_lower_bound(p, q, d)) {
            prop_assert!(e >= 0.0);
        }
        let half = scores.len() / 2;
        let options = AuditOptions { delta: d.abs().min(0.5), ..AuditOptions::default() };
        if let Ok(b) = timed("audit_scores", || audit_scores(&scores[..half], &scores[half..], &options)) {
            prop_assert!(b.mu_lower >= 0.0 && b.epsilon_lower >= 0.0 && b.epsilon_lower_gdp >= 0.0, "{b:?}");
        }
    }

    #[test]
    fn mechanisms_and_sessions(sigma in any_f64(), delta in any_f64(), x in any_f64(), users in 0usize..5, dim in 0usize..4) {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        if let Ok(m) = timed("GaussianMechanism::new", || GaussianMechanism::new(sigma, delta)) {
            prop_assert!(m.cost().rho() > 0.0 && m.cost().rho().is_finite());
            let mut v = [x, 0.0];
            timed("GaussianMechanism::release", || m.release(&mut v, &mut rng));
        }
        if let Ok(mut q) = timed("FilteredLinearQueries::new", || FilteredLinearQueries::new(users, sigma, delta)) {
            let a = timed("FilteredLinearQueries::answer", || q.answer(dim, |i| vec![x * i as f64; dim + 1], &mut rng));
            prop_assert_eq!(a.map(|v| v.len()).ok(), Some(dim));
            prop_assert!(q.guarantee().rho() > 0.0);
        }
        if let Ok(z) = Zcdp::new(sigma) {
            let session = PrivacySession::new(ZcdpFilter::new(z));
            let m = session.mechanism("m");
            if let Ok(c) = Zcdp::new(x) {
                let _ = timed("Mechanism::query", || m.query(c, || ()));
            }
        }
    }
}

/// The defects this file was written for, as fixed examples.
#[test]
fn known_hangs_and_panics_are_errors_now() {
    // ε = 1e-300 used to hang the cks inverse (a bracket stuck at 0); a subnormal δ made
    // ln(1/δ) infinite.
    for m in Conversion::ALL {
        let e = timed("tiny epsilon", || m.max_rho(1e-300, 1e-5)).unwrap_err().to_string();
        assert!(e.contains("epsilon") && e.contains("below what can be calibrated"), "{e}");
        let z = timed("subnormal delta", || m.max_rho(1.0, 1e-320)).unwrap();
        assert!(z.rho() > 0.0 && z.rho() < 1.0);
    }
    // The bracket of the exact Gaussian curve grew without bound for a huge μ.
    assert_eq!(timed("huge mu", || gaussian_epsilon(1e200, 1e-5)), f64::INFINITY);
    assert_eq!(GaussianDp::new(1e200).unwrap().epsilon(1e-5, Conversion::GaussianExact).unwrap(), f64::INFINITY);
    // Costs that underflow or overflow used to hit an `expect`.
    assert!(GaussianMechanism::new(1e-200, 1e200).is_err());
    assert!(GaussianMechanism::new(1e200, 1e-200).unwrap().cost().rho() > 0.0);
    // Calibration that cannot be met names epsilon.
    let e = calibrate_sigma(ApproxDp::new(1e-200, 1e-5).unwrap(), 100.0, Conversion::Cks).unwrap_err().to_string();
    assert!(e.contains("epsilon = 1e-200") && e.contains("sigma would exceed"), "{e}");
    // The round count saturates instead of overflowing.
    let s =
        DpSums::default().repeated(ApproxDp::pure(0.1).unwrap(), u64::MAX).repeated(ApproxDp::pure(0.1).unwrap(), 5);
    assert_eq!(s.rounds, u64::MAX);
    // n-fold composition.
    let z = Zcdp::new(0.1).unwrap();
    assert!(z.repeated(10).unwrap().rho() >= 1.0);
    assert!(z.repeated(u64::MAX).unwrap().rho() >= 1.8e18);
    assert!(Zcdp::new(1e300).unwrap().repeated(1 << 40).is_err());
    // A huge ledger is an error, not an abort.
    assert!(IndividualFilter::new(usize::MAX, 1.0).is_err());
}
