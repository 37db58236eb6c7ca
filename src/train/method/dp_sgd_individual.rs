//! DP-SGD with individual accounting ([`super::Method::SgdFiltered`]): DP-SGD's steps, and every
//! step charges every active example, sampled or not, the Rényi DP of the step for its own
//! clipped norm, capping or dropping it so that its charges never exceed what k full steps
//! cost (Feldman & Zrnic 2021's individual Rényi filter); up to `train.max_steps` steps.

use std::sync::Arc;

use super::{ChargeRule, RunAccounting, TrainingMethod, poisson};
use crate::accounting::Conversion;
use crate::accounting::filter::LedgerSlot;
use crate::accounting::individual_sgd::IndividualSgd;
use crate::error::Result;
use crate::train::config::TrainConfig;
use crate::train::releases::ScheduledRelease;

/// DP-SGD with individual accounting.
pub(super) struct DpSgdIndividual;

impl TrainingMethod for DpSgdIndividual {
    fn describe(&self) -> &'static str {
        "DP-SGD with individual accounting"
    }
    fn samples(&self) -> bool {
        true
    }
    fn drops_exhausted_examples(&self) -> bool {
        true
    }
    fn beyond_k(&self) -> Option<(&'static str, &'static str)> {
        Some(("DP-SGD", "with individual accounting"))
    }
    /// An RDP curve has no exact Gaussian-DP curve.
    fn default_conversion(&self) -> Option<Conversion> {
        Some(Conversion::Cks)
    }
    fn calibrate(&self, config: &TrainConfig, releases: &[ScheduledRelease]) -> Result<Option<Arc<dyn RunAccounting>>> {
        Ok(Some(Arc::new(poisson::calibrate(config, releases, true)?)))
    }
}

/// The charge of DP-SGD with individual accounting: the step's Rényi DP at the filter's order for
/// the example's clipped gradient ([`IndividualSgd::charge`] of min(‖row‖, C)/C; a non-finite row
/// pays as a full one); where that does not fit, all the example has left, for the largest ratio
/// whose charge fits.
impl ChargeRule for IndividualSgd {
    fn charge(&self, squared_norm: f64, slot: &mut LedgerSlot<'_>, clip: f64) -> f64 {
        let norm = squared_norm.sqrt();
        let ratio = if norm.is_finite() { (norm / clip).min(1.0) } else { 1.0 };
        let remaining = slot.remaining();
        // Where the charge does not fit, the example pays all it has left (at least the charge
        // of the ratio it is capped to) and is dropped from the next step on.
        let (ratio, cost) = match IndividualSgd::charge(self, ratio) {
            c if c <= remaining => (ratio, c),
            _ => (self.largest_ratio_within(remaining), remaining),
        };
        slot.grant(cost);
        if !norm.is_finite() {
            return 0.0;
        }
        // (ratio·C)², lowered by a few ulps so that rounding never lets a row exceed what was paid.
        let r = ratio * clip;
        r * r * (1.0 - 4.0 * f64::EPSILON)
    }
}
