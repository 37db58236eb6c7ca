//! GD without clipping or noise ([`super::Method::NonPrivate`]): NOT PRIVATE, a reference.

use std::sync::Arc;

use super::{RunAccounting, TrainingMethod};
use crate::error::Result;
use crate::train::config::TrainConfig;
use crate::train::releases::ScheduledRelease;

/// GD without clipping or noise.
pub(super) struct NonPrivateGd;

impl TrainingMethod for NonPrivateGd {
    fn describe(&self) -> &'static str {
        "NON-PRIVATE GD"
    }
    fn is_private(&self) -> bool {
        false
    }
    fn calibrate(&self, _: &TrainConfig, _: &[ScheduledRelease]) -> Result<Option<Arc<dyn RunAccounting>>> {
        Ok(None)
    }
}
