//! Concurrent composition: interleaved queries from several threads are all accounted, and
//! the filter refuses exactly the queries that would exceed the budget.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};

use dpgd_accounting::ApproxDp;
use dpgd_accounting::Zcdp;
use dpgd_accounting::filter::ZcdpFilter;
use dpgd_accounting::odometer::{MixtureOdometer, Odometer};
use dpgd_accounting::session::PrivacySession;

#[test]
fn interleaved_threads_are_all_accounted_and_never_overspend() {
    // 1/16 is exact in binary: exactly 16 queries fit a budget of 1.
    let session = PrivacySession::new(ZcdpFilter::new(Zcdp::new(1.0).unwrap()));
    let released = Arc::new(AtomicUsize::new(0));
    let barrier = Arc::new(Barrier::new(4));
    let handles: Vec<_> = ["training", "accuracy", "active-count", "analyst"]
        .into_iter()
        .map(|name| {
            let m = session.mechanism(name);
            let (released, barrier) = (Arc::clone(&released), Arc::clone(&barrier));
            std::thread::spawn(move || {
                barrier.wait();
                let mut refused = 0;
                for _ in 0..10 {
                    match m.query(Zcdp::new(0.0625).unwrap(), || released.fetch_add(1, Ordering::SeqCst)) {
                        Ok(_) => {}
                        Err(_) => refused += 1,
                    }
                }
                refused
            })
        })
        .collect();
    let refused: usize = handles.into_iter().map(|h| h.join().unwrap()).sum();
    assert_eq!(released.load(Ordering::SeqCst), 16, "exactly the queries that fit ran");
    assert_eq!(refused, 40 - 16);
    let log = session.log();
    assert_eq!(log.len(), 16);
    assert!(log.iter().enumerate().all(|(i, c)| c.seq == i));
    assert!(
        log.iter().map(|c| c.mechanism.as_str()).collect::<std::collections::HashSet<_>>().len() > 1,
        "interleaved"
    );
    assert_eq!(session.inspect(|f| f.spent()), 1.0);
}

#[test]
fn the_first_overspending_query_is_refused_and_cheaper_ones_still_fit() {
    let session = PrivacySession::new(ZcdpFilter::new(Zcdp::new(1.0).unwrap()));
    let (a, b) = (session.mechanism("a"), session.mechanism("b"));
    let mut ran = Vec::new();
    for (m, cost, tag) in [(&a, 0.25, 1), (&b, 0.5, 2), (&a, 0.5, 3), (&b, 0.125, 4), (&a, 0.25, 5), (&b, 0.125, 6)] {
        if let Ok(t) = m.query(Zcdp::new(cost).unwrap(), || tag) {
            ran.push(t);
        }
    }
    // 0.25 + 0.5 = 0.75; 0.5 refused; 0.125 → 0.875; 0.25 refused; 0.125 → 1.0
    assert_eq!(ran, vec![1, 2, 4, 6]);
    assert_eq!(session.inspect(|f| f.spent()), 1.0);
}

#[test]
fn an_odometer_session_records_every_query() {
    let session = PrivacySession::new(Odometer::new(MixtureOdometer::new(0.1, 1e-6, 0.0).unwrap()));
    let m = session.mechanism("queries");
    let before = session.inspect(|o| o.bound().unwrap());
    for _ in 0..100 {
        m.query(ApproxDp::pure(0.05).unwrap(), || ()).unwrap();
    }
    assert_eq!(session.log().len(), 100);
    assert!(session.inspect(|o| o.bound().unwrap()) > before);
}

#[test]
fn an_odometer_session_refuses_approximate_dp_with_positive_delta() {
    // Whitehouse et al. 2023, Thm 3 needs probabilistic DP for delta > 0: such a query is
    // refused, releases nothing and is not logged.
    let session = PrivacySession::new(Odometer::new(MixtureOdometer::new(0.1, 1e-6, 1e-6).unwrap()));
    let m = session.mechanism("gaussian count");
    let mut released = false;
    let e = m.query(ApproxDp::new(0.5, 1e-9).unwrap(), || released = true).unwrap_err();
    assert!(e.to_string().contains("probabilistic DP"), "{e}");
    assert!(!released);
    assert!(session.log().is_empty());
    assert_eq!(session.inspect(|o| o.sums().rounds), 0);
    m.query(ApproxDp::pure(0.5).unwrap(), || ()).unwrap();
    assert_eq!(session.log().len(), 1);
}
