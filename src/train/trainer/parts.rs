//! The trainer's parts: the struct that the trainer's files (its loop, resume, rank protocol,
//! finish) each implement a part of.

use std::time::Instant;

use super::model::TrainModel;
use crate::accounting::filter::{Budgets, IndividualFilter};
use crate::collective::Collective;
use crate::data::{Examples, Normalize};
use crate::per_example::Network;
use crate::train::canaries::Canaries;
use crate::train::config::ValidConfig;
use crate::train::folder::{Record, RunFolder, RunLock};
use crate::train::input_canaries::InputCanaries;
use crate::train::method::StepRule;
use crate::train::observer::Observer;
use crate::train::privacy::RunSession;
use crate::train::shards::Shard;
use crate::train::state::RunIdentity;
use crate::train::step::GradientPlan;
use crate::train::stopping::StoppingRule;

/// The longest the record files lag behind the released rows (which are durable in the state
/// meanwhile), in time and in rows.
pub(super) const FLUSH_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);
pub(super) const MAX_UNFLUSHED: usize = 256;

/// A training run in progress.
pub struct Trainer<'a, E: TrainModel = Network> {
    pub(super) cfg: &'a ValidConfig,
    pub(super) folder: RunFolder,
    pub(super) _lock: RunLock,
    pub(super) identity: RunIdentity,
    /// The plan over this rank's training examples (all of them on one process).
    pub(super) plan: GradientPlan<'a, E>,
    /// The run's training examples, n (public).
    pub(super) n: usize,
    /// Which examples this rank holds; rank 0 of 1 holds all.
    pub(super) shard: Shard,
    /// The other ranks of a data-parallel run ([`Solo`] on one process).
    pub(super) comm: Box<dyn Collective + 'a>,
    /// Examples still active after the last step, over all ranks (confidential).
    pub(super) active: usize,
    /// Where the ledger on disk is (`Meta::ledger_ranks`) as of the last state written.
    pub(super) ledger_on_disk: Option<usize>,
    pub(super) test: Examples<'a>,
    pub(super) norm: Normalize,
    /// The feature transform the data went through (written with the model).
    pub(super) features: Option<crate::data::features::FeatureInput>,
    /// What the examples are made from (written with the model).
    pub(super) form: crate::data::InputForm,
    pub(super) pool: rayon::ThreadPool,
    pub(super) step: usize,
    pub(super) theta: Vec<f32>,
    /// The method's noise and update, and their state (the momentum buffer, a correlated
    /// noise's), saved with θ.
    pub(super) rule: Box<dyn StepRule>,
    pub(super) ledger: IndividualFilter,
    /// Every training example's budget (the whole run's; the ledger holds this rank's shard).
    pub(super) budgets: Budgets,
    pub(super) stopping: StoppingRule,
    pub(super) session: Option<RunSession>,
    pub(super) record: Record,
    /// Rows of `record` already in its files, and when they were written.
    pub(super) flushed: (usize, Instant),
    pub(super) last_test: Option<f64>,
    pub(super) stop_at: usize,
    pub(super) warned_collapse: bool,
    /// A one-run audit's canaries (`[audit]`), trained beside the examples.
    pub(super) canaries: Option<Canaries>,
    /// A one-run audit's input canaries (`audit.input_canaries`), rows of the training set.
    pub(super) inputs: Option<InputCanaries>,
    pub(super) observer: &'a mut dyn Observer,
}
