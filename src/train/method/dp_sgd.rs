//! DP-SGD ([`super::Method::Sgd`]; Abadi et al. 2016): k steps, each on a Poisson sample of rate
//! q, clipped to C, N(0, σ²C²) added once, divided by the expected batch size; accounted by the
//! Rényi DP of the subsampled Gaussian ([`super::poisson`]).

use std::sync::Arc;

use super::{RunAccounting, TrainingMethod, poisson};
use crate::accounting::Conversion;
use crate::error::Result;
use crate::train::config::TrainConfig;
use crate::train::releases::ScheduledRelease;

/// DP-SGD.
pub(super) struct DpSgd;

impl TrainingMethod for DpSgd {
    fn describe(&self) -> &'static str {
        "DP-SGD (Poisson sampling)"
    }
    fn samples(&self) -> bool {
        true
    }
    /// An RDP curve has no exact Gaussian-DP curve.
    fn default_conversion(&self) -> Option<Conversion> {
        Some(Conversion::Cks)
    }
    fn calibrate(&self, config: &TrainConfig, releases: &[ScheduledRelease]) -> Result<Option<Arc<dyn RunAccounting>>> {
        Ok(Some(Arc::new(poisson::calibrate(config, releases, false)?)))
    }
}
