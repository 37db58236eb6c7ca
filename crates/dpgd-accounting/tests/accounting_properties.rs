//! Property tests of the conversions: monotonicity, ordering between methods, round trips.

use dpgd_accounting::{ApproxDp, Conversion, GaussianDp, PrivateGd, ToApproxDp, Zcdp, calibrate_sigma};
use proptest::prelude::*;

fn eps(rho: f64, delta: f64, m: Conversion) -> f64 {
    let z = Zcdp::new(rho).unwrap();
    match m {
        Conversion::GaussianExact => GaussianDp::from_gaussian_zcdp(z).epsilon(delta, m).unwrap(),
        _ => z.epsilon(delta, m).unwrap(),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn conversions_are_monotone_in_rho(rho in 1e-6f64..20.0, f in 1.0001f64..3.0, ld in -12f64..-1.0) {
        let delta = 10f64.powf(ld);
        for m in Conversion::ALL {
            prop_assert!(eps(rho, delta, m) <= eps(rho * f, delta, m) * (1.0 + 1e-12), "{m}");
        }
    }

    #[test]
    fn conversions_are_monotone_in_delta(rho in 1e-6f64..20.0, ld in -12f64..-1.0, step in 0.01f64..2.0) {
        let (d1, d2) = (10f64.powf(ld - step), 10f64.powf(ld));
        for m in Conversion::ALL {
            // a larger δ never needs a larger ε
            prop_assert!(eps(rho, d2, m) <= eps(rho, d1, m) * (1.0 + 1e-12), "{m}");
        }
    }

    #[test]
    fn tighter_conversions_are_never_looser(rho in 1e-6f64..20.0, ld in -12f64..-1.0) {
        let delta = 10f64.powf(ld);
        let bs = eps(rho, delta, Conversion::BunSteinke);
        let cks = eps(rho, delta, Conversion::Cks);
        let gx = eps(rho, delta, Conversion::GaussianExact);
        prop_assert!(cks <= bs * (1.0 + 1e-12), "cks {cks} > bun-steinke {bs}");
        prop_assert!(gx <= cks * (1.0 + 1e-9) + 1e-12, "gaussian-exact {gx} > cks {cks}");
    }

    #[test]
    fn calibrate_then_budget_round_trips(e in 0.05f64..8.0, ld in -12f64..-2.0, k in 1f64..2000.0, clip in 0.01f64..10.0) {
        let delta = 10f64.powf(ld);
        for m in Conversion::ALL {
            let sigma = calibrate_sigma(ApproxDp::new(e, delta).unwrap(), k, m).unwrap();
            let back = PrivateGd::new(sigma, clip, k).unwrap().epsilon(delta, m).unwrap();
            prop_assert!(back <= e, "{m}: {back} > {e}");
            prop_assert!(back >= e * (1.0 - 1e-9), "{m}: {back} far below {e}");
        }
    }

    #[test]
    fn max_rho_inverts_the_conversion(e in 0.01f64..10.0, ld in -12f64..-2.0) {
        let delta = 10f64.powf(ld);
        for m in Conversion::ALL {
            let rho = m.max_rho(e, delta).unwrap().rho();
            let back = eps(rho, delta, m);
            prop_assert!(back <= e && back >= e * (1.0 - 1e-9), "{m}: {back} vs {e}");
        }
    }
}
