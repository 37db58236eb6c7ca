//! Plain private GD ([`super::Method::Plain`]): exactly k = `privacy.worst_case_steps` full
//! steps, each clipped to C with N(0, σ²C²) added once; accounted as full-batch GD.

use std::sync::Arc;

use super::{RunAccounting, TrainingMethod, full_batch};
use crate::error::Result;
use crate::train::config::TrainConfig;
use crate::train::releases::ScheduledRelease;

/// Plain private GD.
pub(super) struct PlainGd;

impl TrainingMethod for PlainGd {
    fn describe(&self) -> &'static str {
        "plain private GD"
    }
    fn calibrate(&self, config: &TrainConfig, releases: &[ScheduledRelease]) -> Result<Option<Arc<dyn RunAccounting>>> {
        Ok(Some(Arc::new(full_batch::FullBatch::calibrate(config, releases)?)))
    }
}
