//! Privacy filters: stopping rules for fully adaptive composition.
//!
//! A filter is asked, before each next mechanism runs, whether it may run given every
//! realised privacy parameter so far plus the next one ([RRUV16, Def. 3.1];
//! [FZ21, Def. 4.1]). It answers [`Decision::Continue`] or [`Decision::Halt`]; a refused
//! mechanism is not run and changes no state, and the analyst may then ask again with a
//! cheaper one ([FZ21, §4], after Lemma 4.2).
//!
//! | filter | guarantee | source |
//! |---|---|---|
//! | [`RenyiFilter`] | (α, B)-RDP | [FZ21, Thm 4.3] |
//! | [`ZcdpFilter`] | κ-zCDP | [FZ21, Remark 4.4] |
//! | [`MultiOrderRdpFilter`] | (αⱼ, Bⱼ)-RDP at every listed order | [FZ21, Remark 4.4] |
//! | [`IndividualFilter`] | (α, B)-RDP via per-example budgets | [FZ21, Alg. 2, Thm 4.5] |
//! | [`BasicFilter`] | (Σε, Σδ) basic composition | [RRUV16, Thm 2.9] |
//! | [`RogersFilter`] | (ε_g, δ_g)-DP | [RRUV16, Thm 5.1] |
//! | [`FzFilter`] | (ε_g, δ_g)-DP for pure mechanisms via zCDP | [FZ21, Thm 4.8] |
//! | [`WhitehouseFilter`] | (ε, δ′ + δ″)-DP | [WRRW23, Thm 2] |
//! | [`ApproxZcdpFilter`] | δ-approximate ρ-zCDP | [WRRW23, Thm 1] |

mod dp;
mod individual;
mod renyi;

pub use dp::{
    ApproxZcdp, ApproxZcdpFilter, BasicFilter, DpFilter, DpSums, ExactSums, FzFilter, RogersFilter, SumsFilter,
    WhitehouseFilter, rounds_allowed, rounds_allowed_typed,
};
pub use individual::{Budgets, IndividualCharge, IndividualFilter, LedgerSlot};
pub use renyi::{MultiOrderRdpFilter, RenyiFilter, ZcdpFilter};

use super::error::Result;

/// A filter's answer for the next mechanism.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Decision {
    /// The composition stays within budget if the mechanism runs (CONT).
    Continue,
    /// Running the mechanism could exceed the budget: do not run it (HALT).
    Halt,
}

/// A privacy filter over mechanisms whose privacy parameter is a `Self::Cost`.
pub trait PrivacyFilter {
    /// The realised privacy parameter of one mechanism (ρ, ε, a per-example charge, ...).
    type Cost;

    /// Whether a mechanism with cost `next` may run now. Changes nothing.
    fn decide(&self, next: &Self::Cost) -> Decision;

    /// Records `next` as spent if [`decide`](Self::decide) says CONT; otherwise returns
    /// [`AccountingError::BudgetExceeded`](super::AccountingError::BudgetExceeded) and
    /// changes nothing. Call it *before* the mechanism's output is released.
    ///
    /// # Errors
    /// [`AccountingError::BudgetExceeded`](super::AccountingError::BudgetExceeded) when the
    /// charge does not fit; [`AccountingError::InvalidParameter`](super::AccountingError::InvalidParameter)
    /// or another variant for a cost the filter cannot take (a NaN amount, an index out of range,
    /// mismatched orders, a δ > 0 for an odometer). Nothing is charged then.
    fn try_charge(&mut self, next: Self::Cost) -> Result<()>;
}
