//! Training: configuration (validated before use), the private step, the durable run state,
//! the privacy session, and the [`Trainer`] that runs them.

pub mod budget;
pub mod canaries;
mod config;
pub(crate) mod distributed;
pub mod folder;
pub mod input_canaries;
pub mod method;
pub mod observer;
pub mod outputs;
mod plot;
pub mod privacy;
pub mod releases;
pub mod report;
pub mod sgd;
pub mod shards;
pub mod state;
pub mod step;
pub mod stopping;
pub mod tiers;
mod trainer;
pub mod update;

pub(crate) use config::field_differences;
pub use config::{
    AUTO_RELEASE_SHARE, ActiveRelease, AuditConfig, BudgetsConfig, DataConfig, Engine, Factorization, MAX_CANARIES,
    MAX_STEPS, MAX_THREADS, Method, ModelConfig, Override, PrivacyConfig, RENAMED, RESUMABLE_FIELDS, ReleaseConfig,
    Resolved, StopRule, StoppingConfig, TrainConfig, TrainSettings, ValidConfig, resumable_fields,
};
pub use folder::RunFolder;
pub use observer::{FinishInfo, Observer, Silent, StartInfo, StepReport, Warning};
pub use privacy::significant;
pub use trainer::{Run, RunOptions, RunSummary, TrainModel, Trained, Trainer, read_json, run};
