//! The accounting library's typed error.

use thiserror::Error;

/// Everything that can go wrong in accounting: a bad parameter (named, with the fix),
/// a conversion that does not apply to a guarantee, or a budget that a charge would exceed.
/// Non-exhaustive: later versions may add failures of their own.
#[derive(Debug, Clone, PartialEq, Error)]
#[non_exhaustive]
pub enum AccountingError {
    /// A parameter is out of its domain (NaN, infinite, negative, δ ∉ (0, 1), ...).
    #[error("invalid {name} = {value:?}: {expected}")]
    InvalidParameter {
        /// The parameter's name as the user wrote it (`rho`, `delta`, `sigma`, ...).
        name: &'static str,
        /// The rejected value.
        value: f64,
        /// What a valid value looks like.
        expected: &'static str,
    },
    /// The requested conversion is not valid for this kind of guarantee.
    #[error("conversion `{method}` does not apply to {guarantee}: {why}")]
    Unsupported {
        /// The conversion's name.
        method: &'static str,
        /// The kind of guarantee it was applied to.
        guarantee: &'static str,
        /// Why, and what to use instead.
        why: &'static str,
    },
    /// A charge would take an individual or a filter past its budget; nothing was charged.
    #[error("charging {amount} would exceed the budget: only {remaining} of {budget} remains")]
    BudgetExceeded {
        /// The refused charge.
        amount: f64,
        /// What was left before the charge.
        remaining: f64,
        /// The total budget.
        budget: f64,
    },
    /// An index past the end of a per-example ledger.
    #[error("example index {index} is out of range for a ledger of {len} examples")]
    IndexOutOfRange {
        /// The index asked for.
        index: usize,
        /// The ledger's length.
        len: usize,
    },
    /// An accountant was handed an event it cannot account for; its state is unchanged.
    #[error("the {accountant} accountant does not support {event}: {why}")]
    UnsupportedEvent {
        /// The accountant's name.
        accountant: &'static str,
        /// The event (its kind).
        event: &'static str,
        /// Why, and which accountant does.
        why: &'static str,
    },
    /// The conversion has no finite answer (e.g. an ε so small no positive ρ reaches it).
    #[error("no finite solution: {0}")]
    NoSolution(&'static str),
}

/// Result type of the accounting library.
pub type Result<T, E = AccountingError> = std::result::Result<T, E>;

/// Checks `value` is finite and `> 0`.
///
/// ```
/// use dpgd_accounting::positive;
/// assert_eq!(positive("sigma", 2.0), Ok(2.0));
/// let e = positive("sigma", f64::NAN).unwrap_err().to_string();
/// assert_eq!(e, "invalid sigma = NaN: must be a finite number > 0");
/// ```
///
/// # Errors
/// [`AccountingError::InvalidParameter`] named `name` otherwise.
pub fn positive(name: &'static str, value: f64) -> Result<f64> {
    if value.is_finite() && value > 0.0 {
        Ok(value)
    } else {
        Err(AccountingError::InvalidParameter { name, value, expected: "must be a finite number > 0" })
    }
}

/// Checks `value` is finite and `≥ 0`.
///
/// # Errors
/// [`AccountingError::InvalidParameter`] named `name` otherwise.
pub fn non_negative(name: &'static str, value: f64) -> Result<f64> {
    if value.is_finite() && value >= 0.0 {
        Ok(value)
    } else {
        Err(AccountingError::InvalidParameter { name, value, expected: "must be a finite number >= 0" })
    }
}

/// Checks `0 <= value < 1` (a failure probability δ that may be zero, as for pure DP).
///
/// # Errors
/// [`AccountingError::InvalidParameter`] named `name` otherwise.
pub fn probability_or_zero(name: &'static str, value: f64) -> Result<f64> {
    if (0.0..1.0).contains(&value) {
        Ok(value)
    } else {
        Err(AccountingError::InvalidParameter { name, value, expected: "must lie in [0, 1)" })
    }
}

/// Checks `0 < value < 1` (a failure probability δ).
///
/// # Errors
/// [`AccountingError::InvalidParameter`] named `name` otherwise.
pub fn probability(name: &'static str, value: f64) -> Result<f64> {
    if value > 0.0 && value < 1.0 {
        Ok(value)
    } else {
        Err(AccountingError::InvalidParameter { name, value, expected: "must lie strictly between 0 and 1" })
    }
}
