//! The contract every [`Accountant`] passes: nothing composed is ε = 0; an unsupported event
//! is refused whole with the state unchanged (`check` says so first); composing in parts,
//! as one `Composed` event, or as a `SelfComposed` repetition gives the same ε up to
//! rounding (1e-8 relative: a PLD adds each convolution's error bound);
//! ε only grows with more events and shrinks with δ.

use dpgd_accounting::event::{Accountant, DpEvent, PldAccountant, RdpAccountant, ZcdpAccountant};
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
