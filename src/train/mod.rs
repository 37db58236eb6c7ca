//! Training: configuration (validated before use), the private step, checkpoints and the
//! run loop.

pub mod checkpoint;
mod config;
mod run;
pub mod step;

pub use config::{
    ActiveRelease, DataConfig, Method, ModelConfig, PrivacyConfig, ReleaseConfig, TrainConfig, TrainSettings,
    ValidConfig,
};
pub use run::{RunOptions, RunSummary, run};
