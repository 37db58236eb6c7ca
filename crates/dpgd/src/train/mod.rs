//! Training: configuration (validated before use), the private step, checkpoints and the
//! run loop.

pub mod checkpoint;
mod config;
mod privacy;
mod run;
pub mod step;

pub use config::{
    ACTIVE_COUNT, ActiveRelease, DataConfig, Method, ModelConfig, PrivacyConfig, ReleaseConfig, ScheduledRelease,
    StopRule, StoppingConfig, TRAIN_ACCURACY, TrainConfig, TrainSettings, ValidConfig,
};
pub use run::{RunOptions, RunSummary, run};
