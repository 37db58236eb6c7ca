//! Concurrent composition ([HSTVVXZ23]): several interactive mechanisms — a
//! training run, periodic noisy accuracy queries, an active-set counter — queried in any
//! interleaving from any threads, all charged against one filter (or recorded by one
//! odometer).
//!
//! [HSTVVXZ23] shows that filters and odometers stay valid when the interactive mechanisms they
//! account for are interleaved, provided every query is charged before its answer is
//! released and a refused query releases nothing. A [`PrivacySession`] enforces exactly that:
//! [`Mechanism::query`] charges under one lock (so two threads can never both pass a check
//! that only one of them fits) and runs the release only after a successful charge.
//!
//! ```
//! use std::sync::Arc;
//! use dpgd_accounting::filter::ZcdpFilter;
//! use dpgd_accounting::session::PrivacySession;
//! use dpgd_accounting::Zcdp;
//!
//! let session = PrivacySession::new(ZcdpFilter::new(Zcdp::new(0.5).unwrap()));
//! let training = session.mechanism("training");
//! let counts = session.mechanism("active-count");
//! let step = training.query(Zcdp::new(0.375).unwrap(), || "model update").unwrap();
//! assert_eq!(step, "model update");
//! assert!(counts.query(Zcdp::new(0.25).unwrap(), || 123).is_err()); // would exceed 0.5: nothing released
//! assert_eq!(counts.query(Zcdp::new(0.125).unwrap(), || 124).unwrap(), 124); // a cheaper one fits
//! assert_eq!(session.log().len(), 2);
//! ```
//!
//! [HSTVVXZ23]: https://arxiv.org/abs/2309.05901

use std::sync::{Arc, Mutex};

use super::ApproxDp;
use super::error::Result;
use super::filter::{Decision, PrivacyFilter};
use super::odometer::{Odometer, PrivacyOdometer};

/// One accepted query: which mechanism, what it cost, in what order.
#[derive(Debug, Clone, PartialEq)]
pub struct Charge<C> {
    /// Position in the session's global order (0-based).
    pub seq: usize,
    /// The mechanism's name.
    pub mechanism: String,
    /// Its privacy cost.
    pub cost: C,
}

struct State<F: PrivacyFilter> {
    accountant: F,
    log: Vec<Charge<F::Cost>>,
}

/// A thread-safe privacy session over one accountant (a filter, or an [`Odometer`], which is
/// a filter that never halts).
pub struct PrivacySession<F: PrivacyFilter> {
    state: Mutex<State<F>>,
}

impl<F: PrivacyFilter> PrivacySession<F>
where
    F::Cost: Clone,
{
    /// A session charging everything against `accountant`.
    pub fn new(accountant: F) -> Arc<Self> {
        Arc::new(Self { state: Mutex::new(State { accountant, log: Vec::new() }) })
    }

    /// A handle through which one interactive mechanism queries the session.
    pub fn mechanism(self: &Arc<Self>, name: impl Into<String>) -> Mechanism<F> {
        Mechanism { session: Arc::clone(self), name: name.into() }
    }

    /// Every accepted charge, in order.
    pub fn log(&self) -> Vec<Charge<F::Cost>> {
        self.lock().log.clone()
    }

    /// Reads the accountant (e.g. an odometer's bound, a filter's spent budget).
    pub fn inspect<R>(&self, read: impl FnOnce(&F) -> R) -> R {
        read(&self.lock().accountant)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State<F>> {
        // A panic in another thread cannot leave the accountant half-charged (charging is a
        // single call), so a poisoned lock is still safe to use.
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// One interactive mechanism's handle on a [`PrivacySession`].
pub struct Mechanism<F: PrivacyFilter> {
    session: Arc<PrivacySession<F>>,
    name: String,
}

impl<F: PrivacyFilter> Mechanism<F>
where
    F::Cost: Clone,
{
    /// Charges `cost`; if the accountant accepts, runs `release` and returns its answer. A
    /// refused query runs nothing, releases nothing and changes no state.
    ///
    /// # Errors
    /// The accountant's refusal ([`PrivacyFilter::try_charge`]), typically
    /// [`AccountingError::BudgetExceeded`](super::AccountingError::BudgetExceeded).
    pub fn query<T>(&self, cost: F::Cost, release: impl FnOnce() -> T) -> Result<T> {
        {
            let mut st = self.session.lock();
            st.accountant.try_charge(cost.clone())?;
            let seq = st.log.len();
            st.log.push(Charge { seq, mechanism: self.name.clone(), cost });
        }
        Ok(release())
    }

    /// The mechanism's name.
    #[must_use]
    pub fn name(&self) -> &str {
        &self.name
    }
}

/// An odometer accepts every pure-DP query and records it; read its bound with
/// [`PrivacySession::inspect`]. A query with δ > 0 is refused (HALT, and
/// [`AccountingError::Unsupported`](super::AccountingError::Unsupported) from `try_charge`):
/// the odometers need probabilistic DP for it (see
/// [`odometer`](super::odometer#mechanisms-with-δₘ--0-need-probabilistic-dp)).
impl<O: PrivacyOdometer> PrivacyFilter for Odometer<O> {
    type Cost = ApproxDp;
    fn decide(&self, next: &ApproxDp) -> Decision {
        if next.delta() == 0.0 { Decision::Continue } else { Decision::Halt }
    }
    fn try_charge(&mut self, next: ApproxDp) -> Result<()> {
        self.record(next)
    }
}
