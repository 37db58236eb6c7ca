//! The individual Rényi filter ([FZ21, Algorithm 2, Thm 4.5]): a per-example ledger.

use std::ops::Range;

use rayon::prelude::*;

use super::super::error::{AccountingError, Result, non_negative, positive};
use super::super::numeric::{add_up, sub_down};
use super::{Decision, PrivacyFilter};

/// The individual privacy filter of [FZ21, Algorithm 2 / Thm 4.5]: one Rényi filter per
/// example. Example i stays active while its individual losses sum to at most the budget;
/// the composition over all examples is then (α, B)-RDP ([FZ21, Thm 4.5]), and for Gaussian
/// steps κ-zCDP ([FZ21, Cor. 4.7]).
///
/// The ledger is kept in the units of the mechanism's individual loss. In private gradient
/// descent ([FZ21, Algorithm 3]) the unit is the *squared clipped gradient norm*: example i's
/// individual RDP at step t is α‖ḡₜ(xᵢ)‖²/(2σ²C²), so a squared-norm budget B_norm is an RDP
/// budget αB_norm/(2σ²C²) at every order α.
///
/// Arithmetic rounds towards overstating what was spent: the remaining budget rounds down and
/// every charge rounds up, so Σ charged ≤ budget holds exactly in floating point. The caller
/// is responsible for releasing no more than what was granted (the clipping kernel scales a
/// gradient to a norm slightly *below* the granted √amount for this reason).
///
/// Memory: one `f64` per example, no per-step history.
///
/// ```
/// use dpgd_accounting::filter::IndividualFilter;
/// let mut ledger = IndividualFilter::new(3, 2.0).unwrap(); // B_norm = 2
/// ledger.charge(0, 1.5).unwrap();
/// assert!(ledger.charge(0, 1.0).is_err()); // would exceed 2: refused, nothing changes
/// assert_eq!(ledger.grant(0, 1.0), 0.5); // Algorithm 3's clip: min(request, remaining)
/// assert!(!ledger.is_active(0) && ledger.is_active(1));
/// ```
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct IndividualFilter {
    budgets: Budgets,
    spent: Vec<f64>,
}

/// Each example's budget: one for all, or one of up to [`Budgets::MAX_TIERS`] tiers per
/// example (personalized privacy, Jorgensen, Yu & Cormode 2015: example i is protected at its own
/// budget Bᵢ). The
/// individual filter's guarantee is per example ([FZ21, Thm 4.5]: example i's privacy loss
/// is bounded by what its own ledger lets it spend), so a budget per example needs no new
/// theorem; the budgets must not depend on the data the filter protects (they are fixed
/// before training, and the same in neighbouring datasets).
///
/// Memory: one byte per example (its tier), none for a single budget.
///
/// [FZ21]: https://arxiv.org/abs/2008.11193
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Budgets {
    tiers: Vec<f64>,
    /// Each example's tier; empty when every example has `tiers[0]`.
    of: Vec<u8>,
}

impl Budgets {
    /// The most tiers a ledger distinguishes.
    pub const MAX_TIERS: usize = 256;

    /// One `budget` for every example.
    ///
    /// # Errors
    /// [`AccountingError::InvalidParameter`] naming `budget` (not a finite number > 0).
    pub fn uniform(budget: f64) -> Result<Self> {
        Ok(Self { tiers: vec![positive("budget", budget)?], of: Vec::new() })
    }

    /// Example i's budget is `tiers[of[i]]`.
    ///
    /// # Errors
    /// [`AccountingError::InvalidParameter`] naming `budget` (a tier not a finite number > 0),
    /// `tiers` (none, or more than [`Self::MAX_TIERS`]) or `tier` (an example's tier out of range).
    pub fn tiered(tiers: Vec<f64>, of: Vec<u8>) -> Result<Self> {
        if tiers.is_empty() || tiers.len() > Self::MAX_TIERS {
            return Err(AccountingError::InvalidParameter {
                name: "tiers",
                value: tiers.len() as f64,
                expected: "between 1 and 256 budgets",
            });
        }
        for &b in &tiers {
            positive("budget", b)?;
        }
        if let Some(&t) = of.iter().find(|&&t| usize::from(t) >= tiers.len()) {
            return Err(AccountingError::InvalidParameter {
                name: "tier",
                value: f64::from(t),
                expected: "an example's tier must index one of the budgets",
            });
        }
        Ok(Self { tiers, of })
    }

    /// Example `i`'s budget (for a single budget, whatever `i`).
    #[must_use]
    pub fn get(&self, i: usize) -> f64 {
        self.tiers[self.tier(i)]
    }

    /// Example `i`'s tier (0 for a single budget, or an index out of range).
    #[must_use]
    pub fn tier(&self, i: usize) -> usize {
        self.of.get(i).map_or(0, |&t| usize::from(t))
    }

    /// The budgets of the tiers.
    #[must_use]
    pub fn tiers(&self) -> &[f64] {
        &self.tiers
    }

    /// Whether every example has the same budget.
    #[must_use]
    pub fn is_uniform(&self) -> bool {
        self.of.is_empty()
    }

    /// The largest budget.
    #[must_use]
    pub fn max(&self) -> f64 {
        self.tiers.iter().copied().fold(0.0, f64::max)
    }

    /// The budgets of the examples in `range` (renumbered from 0).
    ///
    /// # Panics
    /// If `range` is out of bounds of a tiered assignment, like slice indexing.
    #[must_use]
    pub fn slice(&self, range: Range<usize>) -> Self {
        let of = if self.of.is_empty() { Vec::new() } else { self.of[range].to_vec() };
        Self { tiers: self.tiers.clone(), of }
    }

    /// Checks that the budgets cover exactly `n` examples.
    fn fits(&self, n: usize) -> Result<()> {
        if self.of.is_empty() || self.of.len() == n {
            Ok(())
        } else {
            Err(AccountingError::InvalidParameter {
                name: "n",
                value: n as f64,
                expected: "a budget for every example: as many tiers as examples",
            })
        }
    }
}

/// One per-example charge, the [`PrivacyFilter::Cost`] of an [`IndividualFilter`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IndividualCharge {
    /// The example's index in the dataset.
    pub index: usize,
    /// Its individual loss in the ledger's units (≥ 0).
    pub amount: f64,
}

impl IndividualFilter {
    /// A fresh ledger for `n` examples, each with `budget` to spend.
    ///
    /// # Errors
    /// [`AccountingError::InvalidParameter`] naming `budget` (not a finite number > 0) or `n`
    /// (a ledger of `n` examples, 8 bytes each, cannot be allocated).
    pub fn new(n: usize, budget: f64) -> Result<Self> {
        Self::with_budgets(n, Budgets::uniform(budget)?)
    }

    /// A fresh ledger for `n` examples, each with its own budget.
    ///
    /// # Errors
    /// [`AccountingError::InvalidParameter`] naming `n`: budgets for another number of
    /// examples, or a ledger that cannot be allocated.
    pub fn with_budgets(n: usize, budgets: Budgets) -> Result<Self> {
        budgets.fits(n)?;
        let mut spent = Vec::new();
        spent.try_reserve_exact(n).map_err(|_| AccountingError::InvalidParameter {
            name: "n",
            value: n as f64,
            expected: "a ledger for this many examples (8 bytes each) cannot be allocated",
        })?;
        spent.resize(n, 0.0);
        Ok(Self { budgets, spent })
    }

    /// Restores a ledger from a checkpoint's per-example spent amounts, checking that each
    /// is finite, non-negative and within the budget.
    ///
    /// # Errors
    /// [`AccountingError::InvalidParameter`] naming `budget` or `spent` (NaN, infinite or
    /// negative), or [`AccountingError::BudgetExceeded`] for an example that spent more than
    /// the budget.
    pub fn from_spent(budget: f64, spent: Vec<f64>) -> Result<Self> {
        Self::from_spent_with(Budgets::uniform(budget)?, spent)
    }

    /// [`from_spent`](Self::from_spent) with each example's own budget.
    ///
    /// # Errors
    /// As [`from_spent`](Self::from_spent), each example against its own budget; budgets for
    /// another number of examples (naming `n`).
    pub fn from_spent_with(budgets: Budgets, spent: Vec<f64>) -> Result<Self> {
        budgets.fits(spent.len())?;
        for (i, &s) in spent.iter().enumerate() {
            non_negative("spent", s)?;
            let budget = budgets.get(i);
            if s > budget {
                return Err(AccountingError::BudgetExceeded { amount: s, remaining: 0.0, budget });
            }
        }
        Ok(Self { budgets, spent })
    }

    /// The largest per-example budget (with one budget for all, that budget).
    #[must_use]
    pub fn budget(&self) -> f64 {
        self.budgets.max()
    }

    /// Every example's budget.
    #[must_use]
    pub fn budgets(&self) -> &Budgets {
        &self.budgets
    }

    /// The number of examples.
    #[must_use]
    pub fn len(&self) -> usize {
        self.spent.len()
    }

    /// Whether the ledger tracks no example.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.spent.is_empty()
    }

    /// What example `i` has spent (rounded up).
    ///
    /// # Panics
    /// If `i ≥ self.len()`, like slice indexing; [`get_spent`](Self::get_spent) does not panic.
    #[must_use]
    pub fn spent(&self, i: usize) -> f64 {
        self.spent[i]
    }

    /// What example `i` has spent (rounded up), or `None` if `i` is out of range.
    #[must_use]
    pub fn get_spent(&self, i: usize) -> Option<f64> {
        self.spent.get(i).copied()
    }

    /// Every example's spent amount, in index order (for checkpoints).
    #[must_use]
    pub fn spent_all(&self) -> &[f64] {
        &self.spent
    }

    /// What example `i` may still spend (rounded down).
    ///
    /// # Panics
    /// If `i ≥ self.len()`, like slice indexing.
    #[must_use]
    pub fn remaining_budget(&self, i: usize) -> f64 {
        remaining(self.budgets.get(i), self.spent[i])
    }

    /// Whether example `i` has budget left ([FZ21, Alg. 2]: i ∈ Sₜ).
    ///
    /// # Panics
    /// If `i ≥ self.len()`, like slice indexing.
    #[must_use]
    pub fn is_active(&self, i: usize) -> bool {
        self.spent[i] < self.budgets.get(i)
    }

    /// The number of active examples. **Not private**: release it only through an accounted
    /// mechanism (e.g. a noisy count).
    #[must_use]
    pub fn active_count_non_private(&self) -> usize {
        (0..self.spent.len()).filter(|&i| self.is_active(i)).count()
    }

    /// Charges example `i` exactly `amount`, or refuses (changing nothing) when that would
    /// exceed its budget or `amount` is negative or not finite.
    ///
    /// # Errors
    /// [`AccountingError::IndexOutOfRange`], [`AccountingError::InvalidParameter`] naming
    /// `amount`, or [`AccountingError::BudgetExceeded`]; the ledger is unchanged.
    pub fn charge(&mut self, i: usize, amount: f64) -> Result<()> {
        let len = self.spent.len();
        let budget = self.budgets.get(i);
        let spent = self.spent.get_mut(i).ok_or(AccountingError::IndexOutOfRange { index: i, len })?;
        non_negative("amount", amount)?;
        let new = add_up(*spent, amount);
        if new > budget {
            return Err(AccountingError::BudgetExceeded { amount, remaining: remaining(budget, *spent), budget });
        }
        *spent = new;
        Ok(())
    }

    /// Algorithm 3's clip rule on the ledger: charges example `i` with
    /// min(`requested`, remaining budget) and returns what was granted. A non-finite or
    /// negative request is treated as a request for everything that remains.
    ///
    /// # Panics
    /// If `i ≥ self.len()`, like slice indexing; [`try_grant`](Self::try_grant) does not panic.
    pub fn grant(&mut self, i: usize, requested: f64) -> f64 {
        self.slot_mut(i).grant(requested)
    }

    /// [`grant`](Self::grant) without the panic.
    ///
    /// # Errors
    /// [`AccountingError::IndexOutOfRange`] if `i ≥ self.len()`; nothing is charged.
    pub fn try_grant(&mut self, i: usize, requested: f64) -> Result<f64> {
        let len = self.spent.len();
        let budget = self.budgets.get(i);
        let spent = self.spent.get_mut(i).ok_or(AccountingError::IndexOutOfRange { index: i, len })?;
        Ok(LedgerSlot { budget, spent }.grant(requested))
    }

    /// Example `i`'s ledger entry.
    ///
    /// # Panics
    /// If `i ≥ self.len()`, like slice indexing.
    pub fn slot_mut(&mut self, i: usize) -> LedgerSlot<'_> {
        LedgerSlot { budget: self.budgets.get(i), spent: &mut self.spent[i] }
    }

    /// The ledger entries of the examples in `range`, as a parallel iterator of slots the
    /// clipping kernel can grant from concurrently.
    ///
    /// # Panics
    /// If `range` is out of bounds, like slice indexing.
    pub fn slots_mut(&mut self, range: Range<usize>) -> impl IndexedParallelIterator<Item = LedgerSlot<'_>> {
        let budgets = &self.budgets;
        let first = range.start;
        self.spent[range]
            .par_iter_mut()
            .enumerate()
            .map(move |(k, spent)| LedgerSlot { budget: budgets.get(first + k), spent })
    }
}

/// Mutable access to one example's ledger entry that can only spend within the budget.
#[derive(Debug)]
pub struct LedgerSlot<'a> {
    budget: f64,
    spent: &'a mut f64,
}

impl<'a> LedgerSlot<'a> {
    /// A slot outside any ledger that may spend up to `budget` into `spent`: a per-step cap
    /// (e.g. the squared norm a DP-SGD step with individual accounting may add for an example
    /// whose Rényi charge is already in its own ledger).
    pub fn with_budget(budget: f64, spent: &'a mut f64) -> Self {
        LedgerSlot { budget, spent }
    }

    /// What this example may still spend (rounded down).
    #[must_use]
    pub fn remaining(&self) -> f64 {
        remaining(self.budget, *self.spent)
    }

    /// Charges min(`requested`, remaining) and returns it; see [`IndividualFilter::grant`].
    pub fn grant(&mut self, requested: f64) -> f64 {
        let rem = self.remaining();
        let amount = if requested >= 0.0 && requested < rem { requested } else { rem };
        // spent + amount ≤ spent + (budget − spent) = budget exactly, and rounding the sum up
        // cannot pass the representable `budget`; the `min` only guards against misuse.
        *self.spent = add_up(*self.spent, amount).min(self.budget);
        amount
    }
}

fn remaining(budget: f64, spent: f64) -> f64 {
    sub_down(budget, spent).max(0.0)
}

impl PrivacyFilter for IndividualFilter {
    type Cost = IndividualCharge;
    fn decide(&self, next: &IndividualCharge) -> Decision {
        match self.spent.get(next.index) {
            Some(&s) if next.amount >= 0.0 && add_up(s, next.amount) <= self.budgets.get(next.index) => {
                Decision::Continue
            }
            _ => Decision::Halt,
        }
    }
    fn try_charge(&mut self, next: IndividualCharge) -> Result<()> {
        self.charge(next.index, next.amount)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn charges_are_refused_without_side_effects() {
        let mut f = IndividualFilter::new(2, 1.0).unwrap();
        f.charge(1, 0.6).unwrap();
        let before = f.clone();
        assert!(matches!(f.charge(1, 0.5), Err(AccountingError::BudgetExceeded { .. })));
        assert!(matches!(f.charge(5, 0.1), Err(AccountingError::IndexOutOfRange { index: 5, len: 2 })));
        assert!(f.charge(0, f64::NAN).is_err());
        assert!(f.charge(0, -1.0).is_err());
        assert_eq!(f, before);
        assert_eq!(f.decide(&IndividualCharge { index: 1, amount: 0.4 }), Decision::Continue);
        assert_eq!(f.decide(&IndividualCharge { index: 1, amount: 0.41 }), Decision::Halt);
        assert_eq!(f.active_count_non_private(), 2);
    }

    #[test]
    fn grant_clips_to_the_remaining_budget_and_exhausts_it() {
        let mut f = IndividualFilter::new(1, 3.0).unwrap();
        assert_eq!(f.grant(0, 2.0), 2.0);
        assert_eq!(f.grant(0, 2.0), 1.0);
        assert!(!f.is_active(0));
        assert_eq!(f.grant(0, 2.0), 0.0);
        assert_eq!(f.remaining_budget(0), 0.0);
        let mut g = IndividualFilter::new(1, 3.0).unwrap();
        assert_eq!(g.grant(0, f64::INFINITY), 3.0, "a non-finite request takes the worst case");
    }

    #[test]
    fn restore_validates_the_checkpointed_ledger() {
        assert!(IndividualFilter::from_spent(1.0, vec![0.5, 1.0]).is_ok());
        assert!(IndividualFilter::from_spent(1.0, vec![1.5]).is_err());
        assert!(IndividualFilter::from_spent(1.0, vec![f64::NAN]).is_err());
        assert!(IndividualFilter::from_spent(1.0, vec![-0.1]).is_err());
    }

    #[test]
    fn parallel_slots_grant_like_the_serial_api() {
        let mut a = IndividualFilter::new(1000, 2.5).unwrap();
        let mut b = a.clone();
        let req: Vec<f64> = (0..1000).map(|i| (i % 7) as f64 * 0.45).collect();
        let granted: Vec<f64> = a.slots_mut(0..1000).zip(&req).map(|(mut s, &r)| s.grant(r)).collect();
        for (i, &r) in req.iter().enumerate() {
            assert_eq!(b.grant(i, r), granted[i]);
        }
        assert_eq!(a, b);
    }

    /// Each example spends against its own tier's budget, restores against it, and a slice
    /// keeps each example's tier.
    #[test]
    fn each_example_has_its_own_budget() {
        let budgets = Budgets::tiered(vec![1.0, 3.0], vec![0, 1, 1, 0]).unwrap();
        let mut f = IndividualFilter::with_budgets(4, budgets.clone()).unwrap();
        assert_eq!([f.grant(0, 5.0), f.grant(1, 5.0), f.grant(2, 2.0)], [1.0, 3.0, 2.0]);
        assert!(!f.is_active(0) && !f.is_active(1) && f.is_active(2) && f.is_active(3));
        assert_eq!(f.active_count_non_private(), 2);
        assert!(f.charge(3, 1.5).is_err() && f.charge(2, 1.0).is_ok());
        let granted: Vec<f64> = f.slots_mut(2..4).map(|mut s| s.grant(9.0)).collect();
        assert_eq!(granted, [0.0, 1.0], "the slots of a range keep their examples' budgets");
        assert_eq!(f.budget(), 3.0);
        assert!(IndividualFilter::from_spent_with(budgets.clone(), vec![1.0, 3.0, 0.0, 0.5]).is_ok());
        assert!(IndividualFilter::from_spent_with(budgets.clone(), vec![1.5, 0.0, 0.0, 0.0]).is_err());
        assert!(IndividualFilter::from_spent_with(budgets.clone(), vec![0.0; 3]).is_err(), "wrong length");
        assert!(IndividualFilter::with_budgets(5, budgets.clone()).is_err());
        let tail = budgets.slice(1..3);
        assert_eq!((tail.get(0), tail.get(1), tail.tier(1)), (3.0, 3.0, 1));
        assert!(Budgets::tiered(vec![1.0], vec![0, 1]).is_err(), "a tier out of range");
        assert!(Budgets::tiered(vec![1.0, 0.0], vec![0]).is_err(), "a zero budget");
        assert!(Budgets::tiered(vec![], vec![]).is_err());
        assert!(Budgets::tiered(vec![1.0; 257], vec![]).is_err());
    }

    proptest! {
        /// With a budget per example, no example ever spends more than its own, whatever
        /// the requests, and the others' budgets do not change what it is granted.
        #[test]
        fn no_example_exceeds_its_own_budget(
            tiers in proptest::collection::vec(1e-3f64..1e3, 1..5),
            of in proptest::collection::vec(0u8..5, 1..40),
            reqs in proptest::collection::vec(0f64..50.0, 1..200),
        ) {
            let of: Vec<u8> = of.iter().map(|&t| t % tiers.len() as u8).collect();
            let n = of.len();
            let budgets = Budgets::tiered(tiers.clone(), of.clone()).unwrap();
            let mut f = IndividualFilter::with_budgets(n, budgets).unwrap();
            for (k, &r) in reqs.iter().enumerate() {
                let i = k % n;
                let own = tiers[usize::from(of[i])];
                let mut alone = IndividualFilter::from_spent(own, vec![f.spent(i)]).unwrap();
                prop_assert_eq!(f.grant(i, r), alone.grant(0, r));
                prop_assert!(f.spent(i) <= own);
            }
        }

        /// The ledger never lets Σ charged exceed the budget, whatever the sequence.
        #[test]
        fn never_exceeds_budget(budget in 1e-6f64..1e6, reqs in proptest::collection::vec(0f64..2.0, 1..200)) {
            let mut f = IndividualFilter::new(1, budget).unwrap();
            let mut granted_sum = 0.0f64;
            for (k, r) in reqs.iter().enumerate() {
                let r = r * budget / 3.0;
                if k % 2 == 0 {
                    granted_sum += f.grant(0, r);
                } else if f.charge(0, r).is_ok() {
                    granted_sum += r;
                }
                prop_assert!(f.spent(0) <= budget);
                prop_assert!(f.remaining_budget(0) >= 0.0);
            }
            // The ledger overstates: what it records is at least what was handed out.
            prop_assert!(f.spent(0) >= granted_sum * (1.0 - 1e-12));
        }
    }
}
