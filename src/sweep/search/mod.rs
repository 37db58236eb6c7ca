//! A private hyperparameter search (`dpgd sweep FILE --select private --epsilon ε --delta δ`):
//! the sweep's grid becomes the candidates of one private algorithm whose guarantee covers the
//! whole search, the choice of the best included ([PS22]).
//!
//! **What runs.** The search draws K from the distribution its file names ([`Repetitions`](crate::accounting::selection::Repetitions)),
//! then K candidates, each a grid point chosen uniformly at random. Each candidate is an
//! ordinary private run trained on the training examples minus a held-out validation split
//! ([`HoldOut`](crate::data::HoldOut): its size and seed are public), followed by one release: its count of correct
//! validation predictions plus discrete Gaussian noise ([CKS20]). The search publishes only the
//! candidate with the highest noisy count (ties: the earliest): its model, configuration, noisy
//! validation accuracy and test accuracy. K, the other candidates and their scores stay in
//! `confidential/`.
//!
//! **The guarantee** (neighbouring datasets of the run's relation on the whole training set, n
//! public). One candidate Q, at grid point j, is (λ, max(ε_j(λ), λρ_v))-RDP: the neighbours
//! differ in one position, fixed by the public hold-out either in the training part (then
//! only the run differs, and the count is computed from the same validation examples by a
//! model it post-processes) or in the validation part (then only the count differs, by at most
//! 1, and the discrete Gaussian of variance σ_v² is ρ_v = 1/(2σ_v²)-zCDP, [CKS20, Thm 14]).
//! ε_j is the run's own curve ([`RunAccounting::rdp`](crate::train::method::RunAccounting::rdp)).
//! Drawing j uniformly makes Q's curve the pointwise maximum over the grid
//! ([`Rdp::pointwise_max`](crate::accounting::Rdp::pointwise_max)). The search is then [PS22, Thm 2] (truncated negative binomial)
//! or [PS22, Thm 6] (Poisson) of Q ([`Repetitions::rdp`](crate::accounting::selection::Repetitions::rdp)), converted to (ε, δ) by [CKS20,
//! Prop. 12]'s conversion at the best order, rounded up.
//!
//! **Calibration.** Every candidate's `privacy.epsilon` is set to one ε_c (at the search's δ),
//! the largest (by bisection, to 10⁻⁴ relative) whose search guarantee is within the target;
//! each method then calibrates σ for ε_c as in a single run. The search's ε is recomputed from
//! the calibrated runs and checked against the target before anything trains.
//!
//! **Crash safety.** K, every candidate's grid point and the search's identity are written to
//! `confidential/search.json` before the first candidate trains; each noisy count is written
//! there before anything uses it. A resumed search neither redraws nor re-releases: it resumes
//! the candidate it stopped in, and publishes the same choice.
//!
//! [PS22]: https://arxiv.org/abs/2110.03620
//! [CKS20]: https://arxiv.org/abs/2004.00010

mod audit;
mod prepare;
mod publish;
mod run;
mod section;
mod types;

pub use audit::{
    SEARCH_AUDIT, SEARCH_AUDIT_INPUTS, SearchAudit, SearchAuditGroup, audit_search, audit_search_by, search_audit_path,
    search_input_audit_path,
};
pub use prepare::{prepare, prepare_with};
pub use run::run_search;
pub use section::{CandidatesSection, Distribution, SearchSection};
pub use types::{Chosen, GridPoint, Search, SearchGuarantee, SearchObserver, SearchResult, SearchState, SearchTier};
