//! Rényi, zCDP and multi-order RDP filters ([FZ21, Thm 4.3, Remark 4.4]).

use super::super::error::{AccountingError, Result, non_negative, positive};
use super::super::measure::{Rdp, Zcdp};
use super::super::numeric::add_up;
use super::{Decision, PrivacyFilter};

/// The Rényi filter F_{α,B} of [FZ21, Thm 4.3]: CONT while Σₜ ρₜ ≤ B, where ρₜ is the
/// (possibly adaptively chosen) RDP parameter of order α of mechanism t. The composition
/// of the mechanisms it lets run is (α, B)-RDP.
///
/// ```
/// use dpgd_accounting::filter::{Decision, PrivacyFilter, RenyiFilter};
/// let mut f = RenyiFilter::new(8.0, 1.0).unwrap();
/// f.try_charge(0.75).unwrap();
/// assert_eq!(f.decide(&0.5), Decision::Halt); // 1.25 > 1
/// assert_eq!(f.decide(&0.25), Decision::Continue); // a cheaper one still fits
/// ```
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct RenyiFilter {
    order: f64,
    budget: f64,
    spent: f64,
}

impl RenyiFilter {
    /// A filter at order α > 1 with budget B > 0.
    ///
    /// # Errors
    /// [`AccountingError::InvalidParameter`] naming `order` (not a finite number > 1) or
    /// `budget` (not a finite number > 0).
    pub fn new(order: f64, budget: f64) -> Result<Self> {
        if !(order.is_finite() && order > 1.0) {
            return Err(AccountingError::InvalidParameter {
                name: "order",
                value: order,
                expected: "a Rényi order must be a finite number > 1",
            });
        }
        Ok(Self { order, budget: positive("budget", budget)?, spent: 0.0 })
    }
    /// The order α.
    #[must_use]
    pub fn order(&self) -> f64 {
        self.order
    }
    /// The budget B.
    #[must_use]
    pub fn budget(&self) -> f64 {
        self.budget
    }
    /// Σρₜ so far, rounded up.
    #[must_use]
    pub fn spent(&self) -> f64 {
        self.spent
    }
}

impl PrivacyFilter for RenyiFilter {
    type Cost = f64;
    fn decide(&self, next: &f64) -> Decision {
        within(self.spent, *next, self.budget)
    }
    fn try_charge(&mut self, next: f64) -> Result<()> {
        self.spent = charge(self.spent, next, self.budget)?;
        Ok(())
    }
}

/// The zCDP filter of [FZ21, Remark 4.4]: CONT while Σₜ κₜ ≤ κ for κₜ-zCDP mechanisms; the
/// composition is κ-zCDP (the Rényi filter's rule is the same at every order).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ZcdpFilter {
    budget: f64,
    spent: f64,
}

impl ZcdpFilter {
    /// A filter with zCDP budget κ.
    #[must_use]
    pub fn new(budget: Zcdp) -> Self {
        Self { budget: budget.rho(), spent: 0.0 }
    }
    /// The budget κ.
    #[must_use]
    pub fn budget(&self) -> f64 {
        self.budget
    }
    /// Σκₜ so far, rounded up.
    #[must_use]
    pub fn spent(&self) -> f64 {
        self.spent
    }
}

impl PrivacyFilter for ZcdpFilter {
    type Cost = Zcdp;
    fn decide(&self, next: &Zcdp) -> Decision {
        within(self.spent, next.rho(), self.budget)
    }
    fn try_charge(&mut self, next: Zcdp) -> Result<()> {
        self.spent = charge(self.spent, next.rho(), self.budget)?;
        Ok(())
    }
}

/// Rényi filters at several orders at once ([FZ21, Remark 4.4]): CONT while *every* order stays
/// within its budget, so the composition is (αⱼ, Bⱼ)-RDP at every listed order.
#[derive(Debug, Clone, PartialEq)]
pub struct MultiOrderRdpFilter {
    budget: Rdp,
    spent: Vec<f64>,
}

impl MultiOrderRdpFilter {
    /// A filter whose budget at each order αⱼ is the curve's value Bⱼ (each must be > 0).
    ///
    /// # Errors
    /// [`AccountingError::InvalidParameter`] naming `budget` if a value is 0.
    pub fn new(budget: Rdp) -> Result<Self> {
        for &b in budget.epsilons() {
            positive("budget", b)?;
        }
        let spent = vec![0.0; budget.orders().len()];
        Ok(Self { budget, spent })
    }
    /// The budget curve.
    #[must_use]
    pub fn budget(&self) -> &Rdp {
        &self.budget
    }
    /// Σ ε(αⱼ) so far at each order, rounded up.
    #[must_use]
    pub fn spent(&self) -> &[f64] {
        &self.spent
    }
    fn check_orders(&self, next: &Rdp) -> Result<()> {
        if next.orders() == self.budget.orders() {
            Ok(())
        } else {
            Err(AccountingError::InvalidParameter {
                name: "orders",
                value: next.orders().len() as f64,
                expected: "a mechanism's RDP curve must list the filter's orders",
            })
        }
    }
}

impl PrivacyFilter for MultiOrderRdpFilter {
    type Cost = Rdp;
    fn decide(&self, next: &Rdp) -> Decision {
        if self.check_orders(next).is_err() {
            return Decision::Halt;
        }
        let all = self.spent.iter().zip(next.epsilons()).zip(self.budget.epsilons());
        if all.map(|((s, e), b)| within(*s, *e, *b)).all(|d| d == Decision::Continue) {
            Decision::Continue
        } else {
            Decision::Halt
        }
    }
    fn try_charge(&mut self, next: Rdp) -> Result<()> {
        self.check_orders(&next)?;
        if self.decide(&next) == Decision::Halt {
            let j = (0..self.spent.len())
                .find(|&j| add_up(self.spent[j], next.epsilons()[j]) > self.budget.epsilons()[j])
                .unwrap_or(0);
            return Err(exceeded(next.epsilons()[j], self.spent[j], self.budget.epsilons()[j]));
        }
        for (s, e) in self.spent.iter_mut().zip(next.epsilons()) {
            *s = add_up(*s, *e);
        }
        Ok(())
    }
}

/// CONT iff `spent + next ≤ budget` with the sum rounded up.
fn within(spent: f64, next: f64, budget: f64) -> Decision {
    if non_negative("cost", next).is_ok() && add_up(spent, next) <= budget {
        Decision::Continue
    } else {
        Decision::Halt
    }
}

/// The new spent total, or the error that refuses the charge (state untouched by the caller).
fn charge(spent: f64, next: f64, budget: f64) -> Result<f64> {
    non_negative("cost", next)?;
    let new = add_up(spent, next);
    if new <= budget { Ok(new) } else { Err(exceeded(next, spent, budget)) }
}

fn exceeded(amount: f64, spent: f64, budget: f64) -> AccountingError {
    AccountingError::BudgetExceeded { amount, remaining: (budget - spent).max(0.0), budget }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renyi_filter_refuses_exactly_the_first_overspending_charge() {
        let mut f = RenyiFilter::new(2.0, 1.0).unwrap();
        for _ in 0..8 {
            f.try_charge(0.125).unwrap(); // exact in binary: 8 × 0.125 = 1 fits exactly
        }
        assert_eq!(f.spent(), 1.0);
        // Inexact costs round up: ten charges of 0.1 may not all fit, and never overspend.
        let mut g = RenyiFilter::new(2.0, 1.0).unwrap();
        let n = (0..20).take_while(|_| g.try_charge(0.1).is_ok()).count();
        assert!((9..=10).contains(&n) && g.spent() <= 1.0, "{n} charges, spent {}", g.spent());
        let before = f.clone();
        assert!(f.try_charge(1e-300).is_err());
        assert_eq!(f, before, "a refused charge changes nothing");
        assert!(f.try_charge(f64::NAN).is_err());
        assert!(f.try_charge(-0.1).is_err());
    }

    #[test]
    fn zcdp_filter_guarantees_its_budget() {
        let mut f = ZcdpFilter::new(Zcdp::new(0.5).unwrap());
        let mut n = 0;
        while f.try_charge(Zcdp::new(0.07).unwrap()).is_ok() {
            n += 1;
        }
        assert_eq!(n, 7); // 7 × 0.07 = 0.49 ≤ 0.5 < 0.56
        assert!(f.spent() <= 0.5);
    }

    #[test]
    fn multi_order_filter_halts_when_any_order_would_exceed() {
        let budget = Rdp::new(vec![2.0, 8.0], vec![1.0, 2.0]).unwrap();
        let mut f = MultiOrderRdpFilter::new(budget).unwrap();
        let step = Rdp::new(vec![2.0, 8.0], vec![0.1, 0.5]).unwrap();
        let mut n = 0;
        while f.try_charge(step.clone()).is_ok() {
            n += 1;
        }
        assert_eq!(n, 4); // order 8 binds: 4 × 0.5 = 2
        let other = Rdp::new(vec![3.0, 8.0], vec![0.0, 0.0]).unwrap();
        assert_eq!(f.decide(&other), Decision::Halt);
        assert!(f.try_charge(other).is_err());
    }
}
