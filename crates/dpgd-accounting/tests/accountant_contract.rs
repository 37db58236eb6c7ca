//! The contract every [`Accountant`] passes: nothing composed is ε = 0; an unsupported event
//! is refused whole with the state unchanged (`check` says so first); composing in parts,
//! as one `Composed` event, or as a `SelfComposed` repetition gives the same ε up to
//! rounding (1e-8 relative: a PLD adds each convolution's error bound);
//! ε only grows with more events and shrinks with δ.

use dpgd_accounting::event::{Accountant, DpEvent, GdpAccountant, PldAccountant, RdpAccountant, ZcdpAccountant};
use dpgd_accounting::subsampled::{dp_accounting_orders, opacus_orders};
use dpgd_accounting::{AccountingError, Conversion};

/// Makes a fresh accountant.
type Make = Box<dyn Fn() -> Box<dyn Accountant>>;

/// Every accountant, fresh, with a name for messages.
fn accountants() -> Vec<(String, Make)> {
    vec![
        (
            "rdp (opacus orders, cks)".into(),
            Box::new(|| Box::new(RdpAccountant::new(opacus_orders(), Conversion::Cks).unwrap())),
        ),
        (
            "rdp (dp_accounting orders, classic)".into(),
            Box::new(|| Box::new(RdpAccountant::new(dp_accounting_orders(), Conversion::BunSteinke).unwrap())),
        ),
        ("zcdp".into(), Box::new(|| Box::new(ZcdpAccountant::new()))),
        ("gdp (exact curve)".into(), Box::new(|| Box::new(GdpAccountant::new(Conversion::GaussianExact)))),
        ("gdp (cks)".into(), Box::new(|| Box::new(GdpAccountant::new(Conversion::Cks)))),
        ("pld (interval 1e-3)".into(), Box::new(|| Box::new(PldAccountant::new(1e-3).unwrap()))),
    ]
}

/// Events every accountant here supports, and one that each might not.
fn gaussian(s: f64) -> DpEvent {
    DpEvent::gaussian(s)
}

#[test]
fn nothing_composed_is_epsilon_zero() {
    for (name, make) in accountants() {
        assert_eq!(make().epsilon(1e-5).unwrap(), 0.0, "{name}");
        assert!(make().epsilon(0.0).is_err(), "{name}: δ = 0 is refused");
    }
}

#[test]
fn an_unsupported_or_invalid_event_is_refused_whole_and_changes_nothing() {
    let sampled = DpEvent::poisson_sampled(0.01, gaussian(1.0));
    let nested = DpEvent::poisson_sampled(0.5, DpEvent::poisson_sampled(0.5, gaussian(1.0)));
    for (name, make) in accountants() {
        let mut acc = make();
        acc.compose(&gaussian(3.0)).unwrap();
        let before = acc.epsilon(1e-5).unwrap();
        for bad in [
            DpEvent::Composed { events: vec![gaussian(2.0), nested.clone()] },
            DpEvent::Composed { events: vec![gaussian(2.0), gaussian(-1.0)] },
            gaussian(f64::NAN).repeated(3),
            // Valid parameters whose composition overflows: check says so too.
            gaussian(1e-150).repeated(u64::MAX),
        ] {
            assert!(acc.check(&bad).is_err(), "{name}: check accepts {bad:?}");
            assert!(acc.compose(&bad).is_err(), "{name}: compose accepts {bad:?}");
            assert_eq!(acc.epsilon(1e-5).unwrap(), before, "{name}: state changed by a refused {bad:?}");
        }
        // Sampling: supported or refused by kind, never half-applied.
        match acc.check(&sampled) {
            Ok(()) => acc.compose(&sampled).unwrap(),
            Err(e) => {
                assert!(matches!(e, AccountingError::UnsupportedEvent { .. }), "{name}: {e}");
                assert!(acc.compose(&sampled).is_err());
                assert_eq!(acc.epsilon(1e-5).unwrap(), before, "{name}");
            }
        }
    }
}

#[test]
fn parts_composed_and_repeated_events_agree_and_epsilon_is_monotone() {
    for (name, make) in accountants() {
        let step = gaussian(8.0);
        let (mut parts, mut whole, mut repeated) = (make(), make(), make());
        let mut last = 0.0;
        for _ in 0..5 {
            parts.compose(&step).unwrap();
            let e = parts.epsilon(1e-5).unwrap();
            assert!(e > last, "{name}: ε did not grow");
            last = e;
        }
        whole.compose(&DpEvent::Composed { events: vec![step.clone(); 5] }).unwrap();
        repeated.compose(&step.clone().repeated(5)).unwrap();
        for other in [whole.epsilon(1e-5).unwrap(), repeated.epsilon(1e-5).unwrap()] {
            assert!(((other - last) / last).abs() < 1e-8, "{name}: {other} against {last}");
        }
        assert!(parts.epsilon(1e-3).unwrap() < parts.epsilon(1e-7).unwrap(), "{name}: larger δ, smaller ε");
    }
}

/// Full-batch private GD's accounting as events: the GDP accountant over a plan's event (k
/// Gaussian steps of multiplier σ/s, and every release) gives the plan's own μ, to rounding;
/// the zCDP and RDP accountants over the same event give no smaller ε than the exact curve.
#[test]
fn private_gd_as_events_matches_its_guarantee() {
    use dpgd_accounting::{GaussianRelease, GdPlan, Neighbours};
    let plans = [
        GdPlan::new(100.0).unwrap(),
        GdPlan::new(400.0).unwrap().with_neighbours(Neighbours::ReplaceOne),
        GdPlan::new(60.0).unwrap().with_release(GaussianRelease::new(200.0, 1.0, 30).unwrap()),
    ];
    for (i, plan) in plans.iter().enumerate() {
        let sigma = 8.0 + i as f64;
        let event = plan.event(sigma);
        let mut gdp = GdpAccountant::new(Conversion::GaussianExact);
        gdp.compose(&event).unwrap();
        let want = plan.guarantee(sigma).unwrap().mu();
        assert!((gdp.mu() - want).abs() <= 1e-12 * want, "plan {i}: events give mu {} vs {want}", gdp.mu());
        let exact = gdp.epsilon(1e-5).unwrap();
        let mut zcdp = ZcdpAccountant::new();
        zcdp.compose(&event).unwrap();
        assert!(zcdp.epsilon(1e-5).unwrap() >= exact * (1.0 - 1e-12), "plan {i}");
        let mut rdp = RdpAccountant::new(dp_accounting_orders(), Conversion::Cks).unwrap();
        rdp.compose(&event).unwrap();
        assert!(rdp.epsilon(1e-5).unwrap() >= exact * (1.0 - 1e-12), "plan {i}");
    }
}
