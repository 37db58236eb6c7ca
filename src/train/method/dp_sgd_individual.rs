//! DP-SGD with individual accounting ([`super::Method::SgdFiltered`]): DP-SGD's steps, and every
//! step charges every active example, sampled or not, the Rényi DP of the step for its own
//! clipped norm, capping or dropping it so that its charges never exceed what k full steps
//! cost (Feldman & Zrnic 2021's individual Rényi filter); up to `train.max_steps` steps.

use std::sync::Arc;

use super::{RunAccounting, TrainingMethod, poisson};
use crate::accounting::Conversion;
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
