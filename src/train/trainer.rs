//! The training loop of [FZ21] Algorithm 3, as a [`Trainer`]: resume or start, step, finish.
//!
//! ```no_run
//! # use dpgd::train::{Trainer, RunOptions, Silent, TrainConfig};
//! # fn main() -> dpgd::Result<()> {
//! # let cfg = TrainConfig::from_file("configs/mnist-filtered.toml".as_ref(), &[])?.validate()?;
//! # let data = dpgd::data::Dataset::load(&cfg.config().data.dir, cfg.config().data.classes)?;
//! let mut observer = Silent;
//! let mut trainer = Trainer::resume_or_init(&cfg, &data, "runs/demo".as_ref(), &RunOptions::default(), &mut observer)?;
//! while !trainer.is_done() {
//!     trainer.step()?;
//! }
//! let summary = trainer.finish()?;
//! # Ok(()) }
//! ```
//!
//! **Crash safety.** A step charges the ledger, computes the noisy update and then the step's
//! noisy releases (counts, training accuracy for the stopping rule, the test accuracy) — all in
//! memory — and writes the whole training state (θ, every example's spent budget, the stopping
//! rule, and every released row the record files do not hold yet, this step's included) to
//! `confidential/state.bin` atomically. Only then does anything leave the process: the record
//! files, the observer's progress line. A kill at any instant therefore leaves a state whose
//! charges include every step whose update was used and which holds every value ever shown; a
//! resume writes those values out as they were and never draws a released value again (with
//! OS noise a redraw would be a second, uncharged release of the same count). A kill before the
//! state is written loses the step whole — nothing of it was shown — and the resumed run
//! computes it afresh; with a fixed seed, exactly as the uninterrupted run did, because every
//! draw has its own noise stream. So a killed and resumed run ends bit for bit where an
//! uninterrupted one does, and no step is ever lost, shown twice or charged twice.
//!
//! [FZ21]: https://arxiv.org/abs/2008.11193

use std::path::Path;
use std::time::Instant;

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;

use super::config::{ActiveRelease, Engine, ValidConfig};
use super::distributed::{self, Message};
use super::folder::{Record, RunFolder, RunLock};
use super::observer::{FinishInfo, Observer, StartInfo, StepReport, Warning};
use super::outputs::{ActiveAfterK, ConfidentialRow, Diagnostics, METRICS_COLUMNS, MetricsRow, RunResult};
use super::privacy::{self, PrivacyReport, RunSession};
use super::releases::ReleaseKind;
use super::shards::{self, Shard};
use super::state::{self, Expect, Meta, RunIdentity, StepCost};
use super::step::{Aggregation, GradientPlan, UpdateRule, apply_update};
use super::stopping::StoppingRule;
use crate::accounting::filter::{Budgets, IndividualFilter};
use crate::collective::{Collective, Solo};
use crate::data::{Dataset, Examples, Normalize};
use crate::error::{Error, Result};
use crate::model::export::ModelInput;
use crate::model::{BurnModel, ConfigModel};
use crate::nn::Classifier;
use crate::noise::Stream;
use crate::per_example::{BurnEngine, Network, PerExample, count_correct};

/// Options that are not part of the run's identity.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Worker threads, overriding `train.threads` (e.g. when a sweep trains runs side by side).
    pub threads: Option<usize>,
    /// Stop after this many steps in this invocation (the run can be resumed later).
    pub stop_after: Option<usize>,
    /// The run is one candidate of a private search, its folder inside the search's
    /// confidential half ([`RunFolder::candidate`]).
    pub candidate: bool,
}

/// What a finished (or stopped) run reports.
#[derive(Debug, Clone, PartialEq)]
pub struct RunSummary {
    /// The run folder.
    pub dir: std::path::PathBuf,
    /// Steps completed.
    pub steps: usize,
    /// Whether the run finished (its files are written); false if it stopped on `stop_after`.
    pub finished: bool,
    /// `result.json` (None while unfinished).
    pub result: Option<RunResult>,
    /// `privacy.json` (None while unfinished).
    pub privacy: Option<PrivacyReport>,
}

impl RunSummary {
    /// The summary of a finished run, read from its folder.
    ///
    /// # Errors
    /// A missing or malformed `result.json` or `privacy.json`, named.
    pub fn read(dir: &Path) -> Result<Self> {
        Self::read_folder(&RunFolder::new(dir))
    }

    /// As [`read`](Self::read), from `folder`.
    ///
    /// # Errors
    /// As [`read`](Self::read).
    pub fn read_folder(folder: &RunFolder) -> Result<Self> {
        let dir = folder.root();
        let result: RunResult = read_json(&folder.result())?;
        let privacy: PrivacyReport = read_json(&folder.privacy())?;
        Ok(Self {
            dir: dir.into(),
            steps: result.steps_run,
            finished: true,
            result: Some(result),
            privacy: Some(privacy),
        })
    }
}

/// Reads a JSON file into `T`, naming the file in errors.
///
/// # Errors
/// If the file is missing or does not parse as `T`.
pub fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    let text = std::fs::read_to_string(path).map_err(Error::io(path))?;
    serde_json::from_str(&text).map_err(|e| Error::file(path, e.to_string()))
}

fn write_json<T: Serialize>(path: &Path, value: &T) -> Result<()> {
    let text = serde_json::to_string_pretty(value).map_err(|e| Error::file(path, e.to_string()))?;
    state::atomic_write(path, text.as_bytes())
}

/// What the trainer needs of a model beyond its per-example gradients: its initial
/// parameters, how its files are written, and what identifies it in a run's state. One
/// implementation per engine: the fast engine's [`Network`] (built from the config's
/// `model`) and the burn engine's [`BurnEngine`] (any burn model of [`crate::nn`] layers).
pub trait TrainModel: PerExample {
    /// θ before the first step (from `model.init_seed` where the engine initialises).
    ///
    /// # Errors
    /// If the parameters cannot be read.
    fn initial_params(&self, seed: u64) -> Result<Vec<f32>>;
    /// Writes the model holding θ into the run folder.
    ///
    /// # Errors
    /// A file that cannot be written.
    fn write_model(&self, theta: &[f32], input: &ModelInput, folder: &RunFolder, cfg: &ValidConfig) -> Result<()>;
    /// What identifies the model in the run's state, in place of the config's `model` section
    /// (`None`: the config's section is the model).
    fn identity(&self) -> Option<serde_json::Value>;
    /// The engine that computes its per-example gradients, in words, for run output.
    fn engine_name(&self) -> &'static str {
        "the burn engine"
    }
    /// The device it computes on, in words (the adapter, for a GPU backend), for run output
    /// and the confidential record (`None`: the fast engine, on the CPU).
    fn device_name(&self) -> Option<String> {
        None
    }
    /// Where θ₀, the weights training starts from, came from, for `privacy.json`: the
    /// guarantee assumes them public (independent of the training data).
    fn initial_weights(&self, _cfg: &ValidConfig) -> String {
        "the model's values when its engine was built (initialised by the caller's code, or weights it loaded to \
         fine-tune): assumed public, that is, not computed from this training data (weights trained elsewhere \
         count only if that training did not see these examples)"
            .into()
    }
}

/// θ₀ of a config's model: drawn from `model.init_seed`.
fn drawn_from_seed(cfg: &ValidConfig) -> String {
    format!(
        "drawn at random from model.init_seed = {}, independent of the training data (public)",
        cfg.config().model.init_seed
    )
}

impl TrainModel for Network {
    fn initial_params(&self, seed: u64) -> Result<Vec<f32>> {
        Ok(self.init_params(&mut ChaCha8Rng::seed_from_u64(seed)))
    }
    fn write_model(&self, theta: &[f32], input: &ModelInput, folder: &RunFolder, cfg: &ValidConfig) -> Result<()> {
        BurnModel::from_params(self, theta, &cfg.config().train.device.device()?)?.save(&folder.model())?;
        write_json(&folder.model_spec(), self.spec())?;
        crate::model::export::save(self, theta, input, &folder.model_safetensors())
    }
    fn identity(&self) -> Option<serde_json::Value> {
        None
    }
    fn engine_name(&self) -> &'static str {
        "the fast CPU engine"
    }
    fn initial_weights(&self, cfg: &ValidConfig) -> String {
        drawn_from_seed(cfg)
    }
}

impl<M: Classifier> TrainModel for BurnEngine<M> {
    fn device_name(&self) -> Option<String> {
        Some(crate::device::describe(self.device()))
    }
    /// The model's own initial values (the user initialised it); `seed` is not used.
    fn initial_params(&self, _seed: u64) -> Result<Vec<f32>> {
        self.current_params()
    }
    fn write_model(&self, theta: &[f32], input: &ModelInput, folder: &RunFolder, _cfg: &ValidConfig) -> Result<()> {
        crate::model::save_module(self.model_with(theta)?, &folder.model())?;
        crate::model::export::save_burn(self.params(), theta, input, None, &folder.model_safetensors())
    }
    fn identity(&self) -> Option<serde_json::Value> {
        let params: Vec<_> =
            self.params().iter().map(|p| serde_json::json!({"path": p.path, "shape": p.shape})).collect();
        Some(serde_json::json!({ "burn_module": params }))
    }
}

impl TrainModel for ConfigModel {
    fn device_name(&self) -> Option<String> {
        self.engine.device_name()
    }
    /// The model's initial values, drawn when it was built from the config's `model.init_seed`.
    fn initial_params(&self, _seed: u64) -> Result<Vec<f32>> {
        self.engine.current_params()
    }
    fn write_model(&self, theta: &[f32], input: &ModelInput, folder: &RunFolder, _cfg: &ValidConfig) -> Result<()> {
        crate::model::save_module(self.engine.model_with(theta)?, &folder.model())?;
        write_json(&folder.model_spec(), &self.spec)?;
        let safetensors = folder.model_safetensors();
        crate::model::export::save_burn(self.engine.params(), theta, input, Some(&self.spec), &safetensors)
    }
    /// The config's `model` section is the model.
    fn identity(&self) -> Option<serde_json::Value> {
        None
    }
    fn initial_weights(&self, cfg: &ValidConfig) -> String {
        drawn_from_seed(cfg)
    }
}

/// A finished run of a user's model: its summary, the returned parameters θ and the engine
/// that turns them back into the model ([`BurnEngine::model_with`]).
#[derive(Debug)]
pub struct Trained<E> {
    /// The run's summary (`result.json`, `privacy.json`).
    pub summary: RunSummary,
    /// The returned model's parameters (the selected step's, under a stopping rule).
    pub params: Vec<f32>,
    /// The engine the run trained with.
    pub engine: E,
}

/// The longest the record files lag behind the released rows (which are durable in the state
/// meanwhile), in time and in rows.
const FLUSH_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);
const MAX_UNFLUSHED: usize = 256;

/// A training run in progress.
pub struct Trainer<'a, E: TrainModel = Network> {
    cfg: &'a ValidConfig,
    folder: RunFolder,
    _lock: RunLock,
    identity: RunIdentity,
    /// The plan over this rank's training examples (all of them on one process).
    plan: GradientPlan<'a, E>,
    /// The run's training examples, n (public).
    n: usize,
    /// Which examples this rank holds; rank 0 of 1 holds all.
    shard: Shard,
    /// The other ranks of a data-parallel run ([`Solo`] on one process).
    comm: Box<dyn Collective + 'a>,
    /// Examples still active after the last step, over all ranks (confidential).
    active: usize,
    /// Where the ledger on disk is (`Meta::ledger_ranks`) as of the last state written.
    ledger_on_disk: Option<usize>,
    test: Examples<'a>,
    norm: Normalize,
    /// The feature transform the data went through (written with the model).
    features: Option<crate::data::features::FeatureInput>,
    /// What the examples are made from (written with the model).
    form: crate::data::InputForm,
    pool: rayon::ThreadPool,
    step: usize,
    theta: Vec<f32>,
    /// Momentum buffer (`train.momentum`; empty without momentum).
    velocity: Vec<f32>,
    ledger: IndividualFilter,
    /// Every training example's budget (the whole run's; the ledger holds this rank's shard).
    budgets: Budgets,
    stopping: StoppingRule,
    session: Option<RunSession>,
    record: Record,
    /// Rows of `record` already in its files, and when they were written.
    flushed: (usize, Instant),
    last_test: Option<f64>,
    stop_at: usize,
    warned_collapse: bool,
    observer: &'a mut dyn Observer,
}

impl<'a> Trainer<'a> {
    /// Opens the run folder `dir` for `cfg` on `data`: continues the run it holds (which must
    /// be this run: same configuration, same data), or starts one. The model is the config's,
    /// built for the data's shape and classes, on the fast engine.
    ///
    /// # Errors
    /// A finished run; a folder holding another run (the differing fields, data files or
    /// engine named); data that do not fit the model; a config whose model trains on the burn
    /// engine (`train.engine`: use [`run`]); a damaged state; more memory than the machine has;
    /// an unavailable device.
    pub fn resume_or_init(
        cfg: &'a ValidConfig,
        data: &'a Dataset,
        dir: &Path,
        opts: &RunOptions,
        observer: &'a mut dyn Observer,
    ) -> Result<Self> {
        // The model for the data's own shape and classes (a preset adapts; explicit layers are checked).
        let spec = cfg.model_for(data.shape(), data.classes())?;
        if cfg.engine_for(&spec) == Engine::Burn {
            return Err(Error::config(
                "train.engine",
                "this config's model trains on the burn engine: use dpgd::train::run, or Trainer::with_engine \
                 with dpgd::model::ConfigModel::new",
            ));
        }
        let net = Network::new(&spec).map_err(|e| Error::config("model", e.to_string()))?;
        Trainer::with_engine(cfg, net, data, dir, opts, observer)
    }
}

impl<'a, E: TrainModel> Trainer<'a, E> {
    /// As [`Trainer::resume_or_init`], training the model of the engine `net` (e.g. a [`BurnEngine`] around
    /// a burn model of [`crate::nn`] layers); the config's `model` section is not used.
    ///
    /// # Errors
    /// As [`Trainer::resume_or_init`]; a model whose input shape or classes are not the data's.
    pub fn with_engine(
        cfg: &'a ValidConfig,
        net: E,
        data: &'a Dataset,
        dir: &Path,
        opts: &RunOptions,
        observer: &'a mut dyn Observer,
    ) -> Result<Self> {
        Self::open(cfg, net, data, dir, opts, observer, Box::new(Solo))
    }

    /// As [`Trainer::with_engine`], on rank 0 of the data-parallel run `comm`: this process
    /// holds the run (its folder, session and noise) and its shard of the examples; every other
    /// rank runs [`run_with_on`] on the same config, data and folder. On one rank it is
    /// [`Trainer::with_engine`].
    ///
    /// # Errors
    /// As [`Trainer::with_engine`]; `comm` not rank 0; another rank failed.
    pub fn with_engine_on(
        cfg: &'a ValidConfig,
        net: E,
        data: &'a Dataset,
        dir: &Path,
        opts: &RunOptions,
        observer: &'a mut dyn Observer,
        comm: &'a mut dyn Collective,
    ) -> Result<Self> {
        if comm.rank() != 0 {
            return Err(Error::Collective(format!(
                "the trainer runs on rank 0; rank {} runs dpgd::train::run_with_on",
                comm.rank()
            )));
        }
        Self::open(cfg, net, data, dir, opts, observer, Box::new(comm))
    }

    /// Opens the run on rank 0 of `comm`; any failure aborts the other ranks.
    fn open(
        cfg: &'a ValidConfig,
        net: E,
        data: &'a Dataset,
        dir: &Path,
        opts: &RunOptions,
        observer: &'a mut dyn Observer,
        mut comm: Box<dyn Collective + 'a>,
    ) -> Result<Self> {
        let ranks = comm.size();
        let mut t = match Self::build(cfg, net, data, dir, opts, observer, ranks) {
            Ok(t) => t,
            Err(e) => {
                comm.abort(&e.to_string());
                return Err(e);
            }
        };
        t.comm = comm;
        if let Err(e) = t.resume().and_then(|()| t.greet()) {
            t.comm.abort(&e.to_string());
            return Err(e);
        }
        t.stop_at = t.step.saturating_add(opts.stop_after.unwrap_or(usize::MAX));
        t.observer.started(&t.start_info());
        t.advise();
        Ok(t)
    }

    /// The trainer of rank 0 of `ranks`, before it resumes (its collective still [`Solo`]).
    fn build(
        cfg: &'a ValidConfig,
        net: E,
        data: &'a Dataset,
        dir: &Path,
        opts: &RunOptions,
        observer: &'a mut dyn Observer,
        ranks: usize,
    ) -> Result<Self> {
        let folder = RunFolder::of_run(dir, opts);
        if folder.is_finished() {
            return Err(Error::RunState { path: dir.into(), message: "the run is finished already".into() });
        }
        // Before anything is read: one process at a time continues a run.
        let lock = folder.lock()?;
        if folder.is_finished() {
            return Err(Error::RunState { path: dir.into(), message: "the run is finished already".into() });
        }
        let s = Setup::new(cfg, net, data, opts, (0, ranks))?;
        let c = cfg.config();
        Ok(Self {
            cfg,
            folder,
            _lock: lock,
            identity: s.identity,
            ledger: IndividualFilter::with_budgets(s.shard.range.len(), s.budgets.slice(s.shard.range.clone()))?,
            budgets: s.budgets,
            active: s.shard.range.len(),
            plan: s.plan,
            n: s.n,
            shard: s.shard,
            comm: Box::new(Solo),
            ledger_on_disk: None,
            test: s.test,
            norm: s.norm,
            features: data.feature_input().cloned(),
            form: data.input_form(),
            pool: s.pool,
            step: 0,
            theta: s.theta,
            velocity: Vec::new(),
            stopping: StoppingRule::new(c.stop_rule(), c.stopping.patience),
            session: None,
            record: Record::default(),
            flushed: (0, Instant::now()),
            last_test: None,
            stop_at: usize::MAX,
            warned_collapse: false,
            observer,
        })
    }

    /// Tells the other ranks where the run stands (the identity they must share, the step,
    /// where the ledger is), so each loads its shard of the ledger.
    fn greet(&mut self) -> Result<()> {
        if self.comm.size() == 1 {
            return Ok(());
        }
        let hello = Hello {
            identity: Hello::digest(&self.identity)?,
            step: self.step,
            ledger_ranks: if self.step == 0 { None } else { self.ledger_on_disk },
        };
        let mut bytes = serde_json::to_vec(&hello).map_err(Error::serialise("rank 0's greeting"))?;
        self.comm.broadcast(&mut bytes)
    }

    /// Warnings about the configuration: not private, and why; settings that defeat their
    /// purpose.
    fn advise(&mut self) {
        let c = self.cfg.config();
        let why = self.cfg.non_private_reasons();
        if !why.is_empty() {
            self.observer.warning(&Warning::NotPrivate(why));
        }
        if let Some(adapter) = self.plan.net().device_name().filter(|d| crate::device::is_software_adapter(d)) {
            self.observer.warning(&Warning::SoftwareAdapter(adapter));
        }
        let n = self.n as f64;
        let stop_sigma = c.stopping.sigma.unwrap_or(0.0);
        if c.stop_rule() == super::config::StopRule::BestTrainAccuracy && stop_sigma > 0.05 * n {
            let share = 100.0 * stop_sigma / n;
            let what_to_do = if self.cfg.given().stopping.sigma.is_some() {
                "the config gives it: delete stopping.sigma (and release.active_count_sigma) from the config, so \
                 that their noise follows the privacy budget (and the steps after k take a quarter of train.lr)"
                    .to_string()
            } else {
                format!(
                    "it is what the privacy budget allows on so few examples: set stopping.rule = \"max-steps\" and \
                     train.max_steps = {} (privacy.worst_case_steps), or give a larger privacy.epsilon",
                    c.privacy.worst_case_steps
                )
            };
            self.observer.warning(&Warning::Advice(format!(
                "the stopping rule's noise (stopping.sigma = {stop_sigma}) is {share:.0} % of the {n} training \
                 examples: its noisy accuracies are mostly noise and cannot tell models apart; {what_to_do}"
            )));
        }
        if c.data.classes.is_none() {
            let classes = self.plan.net().classes();
            let mut seen = vec![false; classes.max(1)];
            self.test.labels().iter().for_each(|&y| seen[usize::from(y).min(classes.saturating_sub(1))] = true);
            let absent: Vec<String> = (0..classes).filter(|&k| !seen[k]).map(|k| k.to_string()).collect();
            if !absent.is_empty() {
                self.observer.warning(&Warning::Advice(format!(
                    "the model has {classes} classes (1 + the largest test label, in {}), but {} of them occur in \
                     none of the run's {} test examples ({}): if the labels are not 0, 1, 2, … or one is wrong, fix \
                     them, or set data.classes",
                    c.data.dir.display(),
                    absent.len(),
                    self.test.len(),
                    absent.join(", ")
                )));
            }
        }
        for note in self.cfg.notes() {
            self.observer.warning(&Warning::Advice(note.clone()));
        }
        if c.train.checkpoint_every.is_some() {
            self.observer.warning(&Warning::Advice(
                "train.checkpoint_every is ignored: the training state is written after every step".into(),
            ));
        }
    }

    /// Loads the saved state if there is one (checking it is this run's and that the record
    /// files hold every row it says they do), else writes the fresh run's configuration.
    fn resume(&mut self) -> Result<()> {
        let expect = Expect { params: self.plan.net().num_params(), examples: self.n, max_steps: self.cfg.max_steps() };
        // A state of another run fails `read`'s shape checks; say why in the run's own terms.
        if let Some(meta) = state::peek_meta(&self.folder.state()) {
            self.check_identity(&meta)?;
        }
        let Some(snap) = state::read(&self.folder.state(), expect)? else {
            if self.folder.metrics_jsonl().exists() {
                return Err(Error::RunState {
                    path: self.folder.root().into(),
                    message: "the folder holds released records but no training state: it is not a run that can be \
                              resumed; start the run in a new folder"
                        .into(),
                });
            }
            self.folder.create()?;
            state::atomic_write(
                &self.folder.config(),
                resolved_config(self.cfg, &self.norm, self.plan.net().identity())?.as_bytes(),
            )?;
            self.session = open_session(self.cfg, 0)?;
            return Ok(());
        };
        self.check_identity(&snap.meta)?;
        self.log_resume(snap.meta.step)?;
        let c = self.cfg.config();
        // This rank's examples' spent budgets, from the state or from the shards it points at.
        let (step, budget) = (snap.meta.step, self.ledger.budget());
        let ledger_ranks = snap.meta.ledger_ranks;
        let spent =
            shards::assemble(&self.folder, self.n, &self.shard.range, (&snap.spent, ledger_ranks), step, budget)?;
        let own = self.budgets.slice(self.shard.range.clone());
        self.ledger = IndividualFilter::from_spent_with(own, spent).map_err(|e| Error::RunState {
            path: self.folder.state(),
            message: format!("its ledger is invalid ({e}): the file is corrupt"),
        })?;
        self.ledger_on_disk = ledger_ranks;
        self.stopping = StoppingRule::restore(c.stop_rule(), c.stopping.patience, snap.meta.stopping, snap.best_theta);
        self.theta = snap.theta;
        self.velocity = snap.velocity;
        self.step = snap.meta.step;
        if !snap.meta.releases_in_state {
            return Err(Error::RunState {
                path: self.folder.state(),
                message:
                    "written by an earlier dpgd, which showed a step's noisy releases before making them durable: \
                          resuming could draw a value it already showed again; finish the run with that version, or \
                          start it again in a new folder"
                        .into(),
            });
        }
        self.record = Record::load(&self.folder)?;
        self.record.confidential.truncate(self.record.metrics.len());
        self.check_record_continues(&snap.meta.unflushed)?;
        self.record.append_unflushed(snap.meta.unflushed).map_err(|message| Error::RunState {
            path: self.folder.state(),
            message: format!("{message}: the folder was edited; start the run in a new folder"),
        })?;
        self.last_test = self.record.metrics.iter().rev().find_map(|r| r.test_accuracy);
        if self.record.last_step() != Some(self.step) {
            return Err(Error::RunState {
                path: self.folder.state(),
                message: format!(
                    "it is at step {} but holds released rows only through step {}: the folder was edited; start the \
                     run in a new folder",
                    self.step,
                    self.record.last_step().unwrap_or(0)
                ),
            });
        }
        self.session = open_session(self.cfg, self.step)?;
        self.flush()
    }

    /// Refuses a record file that lost rows the state says it held: the state keeps only the
    /// rows written after the files were last written, so rows missing between the two would
    /// leave a hole in the published record.
    fn check_record_continues(&self, unflushed: &super::state::Unflushed) -> Result<()> {
        let in_files = self.record.last_step().unwrap_or(0);
        let kept_from = unflushed.metrics.first().map_or(self.step + 1, |r| r.step);
        if in_files + 1 >= kept_from {
            return Ok(());
        }
        let missing = if in_files + 2 == kept_from {
            format!("step {}", in_files + 1)
        } else {
            format!("steps {}-{}", in_files + 1, kept_from - 1)
        };
        Err(Error::RunState {
            path: self.folder.metrics_jsonl(),
            message: format!(
                "it holds the released rows through step {in_files}, but the training state (at step {}) says rows \
                 through step {} were written to it: {missing} of the published record are missing. The file was \
                 emptied or replaced; restore it from a copy, or start the run in a new folder",
                self.step,
                kept_from - 1,
            ),
        })
    }

    /// Appends this resume to `confidential/resumes.jsonl` (rewritten whole and atomically,
    /// as every file of the run): the fields a resume may change are not in the run's
    /// identity, so this is where the record keeps them.
    fn log_resume(&self, step: usize) -> Result<()> {
        const MAX_BYTES: u64 = 1 << 20; // ~10,000 resumes: more means the file is not ours.
        let path = self.folder.resumes();
        if std::fs::metadata(&path).is_ok_and(|m| m.len() > MAX_BYTES) {
            return Err(Error::RunState {
                path,
                message: format!("larger than {MAX_BYTES} bytes: not a record of resumes; move it away to resume"),
            });
        }
        let mut text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(Error::io(&path)(e)),
        };
        let mut line = serde_json::json!({ "resumed_after_step": step, "device": self.plan.net().device_name() });
        for field in super::config::RESUMABLE_FIELDS {
            line[field] = self.cfg.config().field_value(field).unwrap_or_default();
        }
        // The threads that ran it, where the config leaves the number to the machine.
        line["train.threads"] = self.pool.current_num_threads().into();
        text += &format!("{line}\n");
        state::atomic_write(&path, text.as_bytes())
    }

    fn check_identity(&self, saved: &Meta) -> Result<()> {
        let bad = |message: String| Error::RunState { path: self.folder.root().into(), message };
        let diffs = super::config::field_differences(&saved.identity.config, &self.identity.config);
        if !diffs.is_empty() {
            return Err(bad(format!(
                "it holds a run made with other settings ({}); a run can only be resumed as it was started \
                 (only {} may change): undo the change, or start a new run folder with --out",
                diffs.join(", "),
                super::config::resumable_fields()
            )));
        }
        if let (Some(then), Some(now)) = (&saved.identity.engine, &self.identity.engine)
            && then != now
        {
            return Err(bad(format!(
                "the run was trained on {then}, and would now go on on {now}, whose parameters are laid out \
                 differently: resume it as it was started (train.engine, and the same entry point: dpgd::train::run \
                 or run_with), or start a new run folder with --out"
            )));
        }
        if saved.identity.examples != self.identity.examples {
            return Err(bad(format!(
                "the run trained on {} examples but the data now give {}: the training data changed",
                saved.identity.examples, self.identity.examples
            )));
        }
        for (old, new) in saved.identity.data.iter().zip(&self.identity.data) {
            if old.sha256 != new.sha256 {
                return Err(bad(format!(
                    "the data file {} differs from the one the run was trained on (SHA-256 {} then, {} now): resuming \
                     would attach spent budgets to the wrong examples; restore the original file or start a new run",
                    new.file, old.sha256, new.sha256
                )));
            }
        }
        Ok(())
    }

    /// Whether the run is over (its last step, or its stopping rule), or this invocation's
    /// `stop_after` is reached.
    #[must_use]
    pub fn is_done(&self) -> bool {
        self.step >= self.cfg.max_steps() || self.stopping.should_stop() || self.step >= self.stop_at
    }

    /// Steps completed.
    #[must_use]
    pub fn steps(&self) -> usize {
        self.step
    }

    /// One step: charge and clip, add noise and update, make the state durable, release.
    ///
    /// # Errors
    /// A non-finite gradient under `on_nonfinite = "error"`, a failing random source, or a
    /// file that cannot be written.
    pub fn step(&mut self) -> Result<()> {
        let t = self.step + 1;
        let start = Instant::now();
        let n = self.n;
        // The method's examples of this step (a Poisson sample, or all) and its divisor, drawn
        // here (on rank 0) and sent to the other ranks with θ.
        let accounting = self.cfg.accounting();
        let (sample, divisor) = match accounting {
            Some(a) => a.sample(t, n, self.cfg.noise_seed())?,
            None => (None, n as f64),
        };
        if self.comm.size() > 1 {
            let message = Message::Step { step: t, theta: self.theta.clone(), sample: sample.clone() };
            self.comm.broadcast(&mut message.encode())?;
        }
        // On several ranks, this rank's budgets before the step go into its shard beside those after.
        let before = (self.comm.size() > 1).then(|| self.ledger.spent_all().to_vec());
        let part = (&self.plan, &mut self.ledger);
        let range = &self.shard.range;
        let (sum, stats) =
            distributed::shard_sum(self.cfg, part, &self.pool, (&self.theta, t), sample.as_deref(), range)?;
        // A rank's charges are durable before its partial sum leaves it.
        if let Some(before) = &before {
            shards::write(&self.folder, &self.shard, t, self.ledger.budget(), (before, self.ledger.spent_all()))?;
        }
        let active = self.ledger.active_count_non_private();
        let (sum, stats, active) = distributed::combine(&mut *self.comm, sum, stats, active)?;
        self.active = active;
        let c = self.cfg.config();
        let noise_std = self.cfg.sigma().map_or(0.0, |s| s * c.privacy.clip);
        let mut rng = self.cfg.noise_seed().rng(Stream::update(t))?;
        let noise = (c.privacy.noise, noise_std);
        let rule = UpdateRule { lr: self.cfg.lr_at(t), divisor, momentum: c.train.momentum };
        apply_update(&mut self.theta, &mut self.velocity, sum, noise, rule, &mut rng)?;
        self.step = t;
        let cost = StepCost {
            seconds: start.elapsed().as_secs_f64(),
            computed: stats.computed,
            skipped: stats.skipped_nonfinite,
            loss_sum: stats.loss_sum,
        };
        // This step's releases, drawn in memory, are made durable with the state that charges
        // them before anything derived from the update, the charges or the releases leaves.
        let row = self.draw_releases(cost)?;
        self.save_state(cost)?;
        self.publish(&row, cost)
    }

    /// Ends a data-parallel run on every rank because this one failed with `error` (nothing
    /// on one process).
    pub fn abort(&mut self, error: &Error) {
        if !matches!(error, Error::Collective(_)) {
            self.comm.abort(&error.to_string());
        }
    }

    /// The training examples θ classifies correctly, over every rank's shard.
    fn count_train_correct(&mut self) -> Result<usize> {
        if self.comm.size() > 1 {
            self.comm.broadcast(&mut Message::Count { theta: self.theta.clone() }.encode())?;
        }
        let (net, theta, train, norm) = (self.plan.net(), &self.theta, self.plan.data(), &self.norm);
        let mut correct = [self.pool.install(|| count_correct(net, theta, train, norm)) as i64];
        self.comm.sum_to_root(&mut correct)?;
        Ok(correct[0] as usize)
    }

    fn save_state(&mut self, cost: StepCost) -> Result<()> {
        let (stopping, best_theta) = self.stopping.saved();
        // On several ranks the ledger is in their shard files, each durable by now.
        let ledger_ranks = (self.comm.size() > 1).then_some(self.comm.size());
        let meta = Meta {
            step: self.step,
            identity: self.identity.clone(),
            budget: self.ledger.budget(),
            stopping: stopping.clone(),
            cost,
            unflushed: self.record.unflushed(self.flushed.0),
            releases_in_state: true,
            ledger_ranks,
        };
        let spent = if ledger_ranks.is_some() { &[][..] } else { self.ledger.spent_all() };
        state::write(&self.folder.state(), &meta, &self.theta, best_theta, spent, &self.velocity)?;
        if self.ledger_on_disk != ledger_ranks {
            // The state no longer points at the shards of the ranks this run was resumed from.
            shards::remove_others(&self.folder, ledger_ranks);
            self.ledger_on_disk = ledger_ranks;
        }
        Ok(())
    }

    /// Computes the releases of the current step in memory — each noisy value drawn once, the
    /// stopping rule told — and appends them to the record. Nothing leaves the process here:
    /// the state that holds them is written next ([`publish`](Self::publish) comes after).
    fn draw_releases(&mut self, cost: StepCost) -> Result<MetricsRow> {
        let t = self.step;
        let c = self.cfg.config();
        // The exact counts the releases due now answer (over every rank's examples).
        let due = |k: ReleaseKind| self.cfg.releases().iter().any(|r| r.kind == k && r.due(t));
        let correct = if self.session.is_some() && due(ReleaseKind::TrainAccuracy) {
            self.count_train_correct()? as f64
        } else {
            0.0
        };
        let active = self.active as f64;
        let released = match &self.session {
            Some(s) => s.release(t, self.cfg.noise_seed(), c.privacy.noise, |kind| match kind {
                ReleaseKind::ActiveCount => active,
                ReleaseKind::TrainAccuracy => correct,
            })?,
            None => Vec::new(),
        };
        let n = self.n;
        // Counts of training examples lie in [0, n] (n is public): a noisy one outside is shown
        // clamped, as post-processing, which costs no privacy.
        let value = |k: ReleaseKind| released.iter().find(|(m, _)| *m == k).map(|r| r.1.clamp(0.0, n as f64));
        let train_accuracy = value(ReleaseKind::TrainAccuracy).map(|count| count / n as f64);
        if let Some(a) = train_accuracy {
            self.stopping.observe(t, a, &self.theta);
        }
        let exact_due = c.release.active_count == ActiveRelease::ExactNonPrivate
            && t.is_multiple_of(c.release.active_count_every.max(1));
        let eval = t == self.cfg.max_steps()
            || t == self.cfg.worst_case_steps()
            || self.stopping.should_stop()
            || (c.train.eval_every > 0 && t.is_multiple_of(c.train.eval_every));
        if eval {
            let correct = self.pool.install(|| count_correct(self.plan.net(), &self.theta, self.test, &self.norm));
            self.last_test = Some(correct as f64 / self.test.len() as f64);
        }
        let row = MetricsRow {
            step: t,
            epsilon_so_far: self.cfg.epsilon_through(t),
            test_accuracy: if eval { self.last_test } else { None },
            active_count_noisy: value(ReleaseKind::ActiveCount),
            train_accuracy_noisy: train_accuracy,
            active_count_non_private: exact_due.then_some(self.active as f64),
        };
        let mean_loss = (cost.computed > cost.skipped).then(|| cost.loss_sum / (cost.computed - cost.skipped) as f64);
        let crow = ConfidentialRow {
            step: t,
            seconds: cost.seconds,
            active_exact: cost.computed,
            nonfinite_skipped: cost.skipped,
            train_loss_mean: mean_loss,
        };
        self.record.metrics.push(row.clone());
        self.record.confidential.push(crow);
        Ok(row)
    }

    /// Shows the current step's released row, once the state holding it is durable: writes the
    /// record files when due and tells the observer. Until the files catch up, the row is in
    /// the state. The files are rewritten whole, so not every step: the writes would grow with
    /// the square of the steps.
    fn publish(&mut self, row: &MetricsRow, cost: StepCost) -> Result<()> {
        let pending = self.record.metrics.len() - self.flushed.0;
        let eval = row.test_accuracy.is_some();
        if eval || self.is_done() || pending >= MAX_UNFLUSHED || self.flushed.1.elapsed() >= FLUSH_INTERVAL {
            self.flush()?;
        }
        self.report(row, cost);
        Ok(())
    }

    /// Writes the record files whole, with every row released so far.
    fn flush(&mut self) -> Result<()> {
        self.record.save(&self.folder, &self.columns())?;
        self.flushed = (self.record.metrics.len(), Instant::now());
        Ok(())
    }

    fn report(&mut self, row: &MetricsRow, cost: StepCost) {
        if cost.skipped > 0 {
            self.observer.warning(&Warning::NonFiniteSkipped { step: row.step, count: cost.skipped });
        }
        let n = self.n;
        if let Some(a) = row.active_count_noisy
            && !self.warned_collapse
            && row.step >= self.cfg.worst_case_steps()
            && a < 0.05 * n as f64
        {
            self.warned_collapse = true;
            let returns_best = self.cfg.config().stop_rule() == super::config::StopRule::BestTrainAccuracy;
            self.observer.warning(&Warning::ActiveCollapsed { step: row.step, count: a, examples: n, returns_best });
        }
        self.observer.step(&StepReport {
            step: row.step,
            max_steps: self.cfg.max_steps(),
            epsilon_so_far: row.epsilon_so_far,
            test_accuracy: self.last_test,
            active_count_noisy: row.active_count_noisy,
            train_accuracy_noisy: row.train_accuracy_noisy,
            best_step: self.stopping.best_step(),
        });
    }

    /// The metrics columns this run fills.
    fn columns(&self) -> Vec<&'static str> {
        let c = self.cfg.config();
        let used = [
            true,
            self.cfg.is_private_method(),
            true,
            self.cfg.release(ReleaseKind::ActiveCount).is_some(),
            self.cfg.release(ReleaseKind::TrainAccuracy).is_some(),
            c.release.active_count == ActiveRelease::ExactNonPrivate,
        ];
        METRICS_COLUMNS.iter().zip(used).filter(|(_, u)| *u).map(|(c, _)| *c).collect()
    }

    fn start_info(&self) -> StartInfo {
        let c = self.cfg.config();
        StartInfo {
            name: c.name.clone(),
            method: c.privacy.method,
            examples: self.n,
            engine: self.plan.net().engine_name(),
            device: self.plan.net().device_name(),
            max_steps: self.cfg.max_steps(),
            worst_case_steps: self.cfg.worst_case_steps(),
            resumed_after: self.step,
            sigma: self.cfg.sigma(),
            sample_rate: self.cfg.accounting().and_then(|a| a.sample_rate()),
            guarantee: privacy::summary(self.cfg),
            not_private_because: self.cfg.non_private_reasons(),
            noise: self.cfg.noise_seed().describe(),
        }
    }

    /// Ends the run: evaluates the returned model and writes the model, `result.json`, the
    /// plot, the confidential diagnostics and, last, `privacy.json` (which marks the run
    /// finished). If this invocation stopped before the end (`stop_after`), writes nothing.
    ///
    /// # Errors
    /// A file that cannot be written.
    pub fn finish(self) -> Result<RunSummary> {
        self.finish_returning().map(|t| t.summary)
    }

    /// As [`finish`](Self::finish), also returning the model's parameters θ (the selected
    /// step's; the current ones if the run stopped before its end) and the engine.
    ///
    /// # Errors
    /// As [`finish`](Self::finish).
    pub fn finish_returning(mut self) -> Result<Trained<E>> {
        let over = self.step >= self.cfg.max_steps() || self.stopping.should_stop();
        // The other ranks leave: nothing below needs them.
        if self.comm.size() > 1 {
            self.comm.broadcast(&mut Message::End { finished: over }.encode())?;
        }
        if !over {
            let summary = RunSummary {
                dir: self.folder.root().into(),
                steps: self.step,
                finished: false,
                result: None,
                privacy: None,
            };
            return Ok(Trained { summary, params: self.theta, engine: self.plan.into_net() });
        }
        let c = self.cfg.config();
        let (selected_step, model) = self.stopping.selected(self.step, &self.theta);
        let correct = self.pool.install(|| count_correct(self.plan.net(), model, self.test, &self.norm));
        let test_accuracy = correct as f64 / self.test.len() as f64;
        let k = self.cfg.worst_case_steps();
        // The model at step k is plain private GD's only if no example can be dropped before k: a
        // tier stricter than the run's budget may be.
        let budget = self.cfg.ledger_budget().unwrap_or(f64::MAX);
        let drops_before_k = self.cfg.tiers().iter().any(|t| t.budget < budget);
        let test_accuracy_at_k =
            self.record.metrics.get(k.wrapping_sub(1)).and_then(|r| r.test_accuracy).filter(|_| !drops_before_k);
        let active_after_k = self
            .record
            .metrics
            .iter()
            .rev()
            .filter(|r| r.step > k)
            .find_map(|r| r.active_count_noisy.map(|count| ActiveAfterK { step: r.step, count }));
        let input =
            ModelInput { normalize: self.norm.clone(), features: self.features.clone(), form: self.form.clone() };
        self.plan.net().write_model(model, &input, &self.folder, self.cfg)?;
        let model = model.to_vec();
        let mut privacy = privacy::report(self.cfg, self.session.as_ref(), self.n, self.step)?;
        if let Some(a) = privacy.accounting.as_mut() {
            a.rests_on.insert("initial_weights".into(), self.plan.net().initial_weights(self.cfg));
        }
        let result = RunResult {
            private: privacy.private,
            epsilon: privacy.epsilon,
            epsilon_of_configuration: self.cfg.epsilon(),
            delta: c.privacy.delta,
            steps_run: self.step,
            stopped_early: self.step < self.cfg.max_steps(),
            selected_step,
            test_accuracy,
            test_accuracy_at_k,
            k,
            active_after_k_noisy: active_after_k,
        };
        write_json(&self.folder.result(), &result)?;
        self.write_confidential()?;
        super::plot::plot_run(&self.folder, self.cfg, &self.record.metrics, selected_step)?;
        write_json(&self.folder.privacy(), &privacy)?;
        let info = FinishInfo {
            method: c.privacy.method,
            steps: self.step,
            selected_step,
            test_accuracy,
            test_accuracy_at_k,
            active_after_k: active_after_k.map(|a| (a.step, a.count)),
            examples: self.n,
            worst_case_steps: k,
            guarantee: privacy.summary.clone(),
            chance: super::observer::majority_share(self.test.labels()),
        };
        self.observer.finished(&info);
        let summary = RunSummary {
            dir: self.folder.root().into(),
            steps: self.step,
            finished: true,
            result: Some(result),
            privacy: Some(privacy),
        };
        Ok(Trained { summary, params: model, engine: self.plan.into_net() })
    }

    /// The operator's files: `diagnostics.json` (exact values) and, for a run with per-example
    /// budgets, the budget report.
    fn write_confidential(&self) -> Result<()> {
        // The whole ledger: this process's, or every rank's shard (durable at the last step).
        let whole;
        let ledger = if self.shard.range.len() == self.n {
            &self.ledger
        } else {
            let at = (&[][..], self.ledger_on_disk);
            let spent = shards::assemble(&self.folder, self.n, &(0..self.n), at, self.step, self.ledger.budget())?;
            whole = IndividualFilter::from_spent_with(self.budgets.clone(), spent)?;
            &whole
        };
        let diagnostics = Diagnostics {
            notice: "CONFIDENTIAL to the operator: exact values on the training data; do not publish".into(),
            seconds: self.record.confidential.iter().map(|r| r.seconds).sum(),
            nonfinite_skipped: self.record.confidential.iter().map(|r| r.nonfinite_skipped).sum(),
            active_at_end: ledger.active_count_non_private(),
            examples: self.n,
            device: self.plan.net().device_name(),
        };
        write_json(&self.folder.diagnostics(), &diagnostics)?;
        if self.cfg.ledger_budget().is_some() {
            let b = super::budget::summarise(ledger, self.cfg.tiers(), self.step, &self.record.confidential);
            super::budget::write(&self.folder, &b)?;
        }
        Ok(())
    }
}

/// What every rank of a run builds alike before it trains: its shard of the training examples
/// (all of them on one process), the plan that computes them, the model's θ₀, and the run's
/// identity — after the checks that refuse a run before any training example is read.
struct Setup<'a, E: PerExample> {
    plan: GradientPlan<'a, E>,
    n: usize,
    shard: Shard,
    test: Examples<'a>,
    norm: Normalize,
    pool: rayon::ThreadPool,
    identity: RunIdentity,
    theta: Vec<f32>,
    /// Every one of the run's n training examples' ledger budget.
    budgets: Budgets,
}

impl<'a, E: TrainModel> Setup<'a, E> {
    /// Rank `rank` of `ranks`'s part of the run of `cfg` on `data` with the engine `net`.
    fn new(
        cfg: &'a ValidConfig,
        net: E,
        data: &'a Dataset,
        opts: &RunOptions,
        (rank, ranks): (usize, usize),
    ) -> Result<Self> {
        let c = cfg.config();
        if net.input_shape() != data.shape() || net.classes() != data.classes() {
            return Err(Error::Model(format!(
                "the model takes examples of shape {:?} and gives {} logits; the data in {} have shape {:?} \
                     ([channels, height, width]) and {} classes",
                net.input_shape(),
                net.classes(),
                data.dir.display(),
                data.shape(),
                data.classes()
            )));
        }
        let test = data.test.head(c.data.test_subset);
        let (n, shard, train) = match data.held_shard() {
            // The dataset holds this rank's shard alone (`Dataset::keep_shard`).
            Some((first, n, subset)) => {
                let shard = Shard::of(n, ranks, rank);
                if shard.range.start != first || shard.range.len() != data.train.len() || subset != c.data.train_subset
                {
                    return Err(Error::Data {
                        path: data.dir.clone(),
                        message: format!(
                            "the dataset holds training examples {first}..{} of {n} (of data.train_subset = {subset}), \
                             but rank {rank} of {ranks} trains on {}..{}: call keep_shard with this run's \
                             data.train_subset, rank and number of ranks",
                            first + data.train.len(),
                            shard.range.start,
                            shard.range.end
                        ),
                    });
                }
                (n, shard, data.train.head(0))
            }
            None => {
                let all = data.train.head(c.data.train_subset);
                let shard = Shard::of(all.len(), ranks, rank);
                let train = all.range(shard.range.clone());
                (all.len(), shard, train)
            }
        };
        check_data(n, &test, &data.dir)?;
        check_delta(cfg, n)?;
        let threads = match opts.threads.unwrap_or(c.train.threads) {
            0 => net.preferred_threads().unwrap_or(0),
            n => n,
        };
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .map_err(|e| Error::Environment(format!("cannot start {threads} worker threads: {e}")))?;
        let chunk = c.train.chunk.unwrap_or_else(|| net.preferred_chunk());
        let host_rows = !(net.keeps_rows() && cfg.method().training().is_private());
        check_memory(&net, (chunk, host_rows), pool.current_num_threads(), train.len())?;
        let mut config = serde_json::to_value(c.identity()?).map_err(Error::serialise("the run's identity"))?;
        if let (Some(model), Some(section)) = (net.identity(), config.get_mut("model")) {
            *section = model;
        }
        // Each example's budget: one for all, or its tier's (whose assignment the run is).
        let (budgets, assignment) = super::tiers::ledger_budgets(cfg, n)?;
        let identity = RunIdentity {
            config,
            data: data.fingerprints().iter().cloned().chain(assignment).collect(),
            examples: n,
            params: net.num_params(),
            engine: Some(net.engine_name().to_string()),
        };
        // The grid is the whole run's (its n), on every rank alike.
        let aggregation = Aggregation::for_run(cfg, &net, n)?;
        let theta = net.initial_params(c.model.init_seed)?;
        // What the sum's sensitivity rests on, checked on this engine, device and kernels at
        // this run's micro-batch size, before any training example is read.
        crate::per_example::check_rows_are_own(&net, &theta, chunk).map_err(|m| Error::Model(m.explained()))?;
        let norm = match &c.data.normalize {
            Some(n) => n.clone(),
            None => data.default_normalize(),
        };
        norm.check(data.shape()[0])?;
        let plan = GradientPlan::new(net, train, norm.clone(), aggregation, chunk);
        Ok(Self { plan, n, shard, test, norm, pool, identity, theta, budgets })
    }
}

/// What rank 0 tells the other ranks before the first step: the run they must all be part
/// of, and where it stands.
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct Hello {
    /// SHA-256 of the run's identity (config, data files, examples, model, engine).
    identity: String,
    /// Steps completed.
    step: usize,
    /// Where the ledger is (`Meta::ledger_ranks`; `None` at step 0 or in the state file).
    ledger_ranks: Option<usize>,
}

impl Hello {
    fn digest(identity: &RunIdentity) -> Result<String> {
        use sha2::Digest;
        let bytes = serde_json::to_vec(identity).map_err(Error::serialise("the run's identity"))?;
        Ok(sha2::Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect())
    }
}

/// The privacy session of a run whose accounting has one (full-batch GD; DP-SGD releases
/// nothing but its model, and its guarantee is its accounting's alone).
fn open_session(cfg: &ValidConfig, released_through: usize) -> Result<Option<RunSession>> {
    if cfg.accounting().is_some_and(|a| a.has_session()) {
        RunSession::open(cfg, released_through).map(Some)
    } else {
        Ok(None)
    }
}

/// The model is built for the data's own shape; this refuses an empty split (`n` training
/// examples in the whole run).
fn check_data(n: usize, test: &Examples<'_>, dir: &Path) -> Result<()> {
    if n == 0 || test.is_empty() {
        return Err(Error::Data {
            path: dir.into(),
            message: format!("{n} training and {} test examples: both must be at least 1", test.len()),
        });
    }
    Ok(())
}

/// Refuses δ ≥ 1/n for a private run: releasing one random training example whole is
/// (0, 1/n)-DP, so such a guarantee promises nothing (n is public under both relations).
fn check_delta(cfg: &ValidConfig, n: usize) -> Result<()> {
    let delta = cfg.config().privacy.delta;
    if cfg.is_private_method() && delta * n as f64 >= 1.0 {
        return Err(Error::config(
            "privacy.delta",
            format!(
                "{delta} is at least 1/n for n = {n} training examples: a run that published one random example \
                 whole would meet it; use delta well below 1/n, e.g. {:e}",
                10f64.powf((0.1 / n.max(1) as f64).log10().floor())
            ),
        ));
    }
    Ok(())
}

/// Refuses a run whose buffers would not fit in memory, before allocating them: micro-batches of
/// `chunk`, their rows on the host unless the engine keeps them on its device (`host_rows`).
fn check_memory(
    net: &impl PerExample,
    (chunk, host_rows): (usize, bool),
    threads: usize,
    examples: usize,
) -> Result<()> {
    let p = net.num_params() as u64;
    let needed = |chunk: usize, threads: usize| {
        let per_thread = net.scratch_bytes(chunk).and_then(|ws| {
            let grads = if host_rows { (chunk as u64).checked_mul(p)?.checked_mul(4)? } else { 0 };
            let x = (chunk as u64).checked_mul(net.input_len() as u64)?.checked_mul(4)?;
            ws.checked_add(grads)?.checked_add(x)?.checked_add(p.checked_mul(8)?)
        });
        // At least two sets: the check of the rows before training holds two micro-batches.
        per_thread
            .and_then(|b| b.checked_mul(threads.max(2) as u64))
            .and_then(|b| b.checked_add((examples as u64).checked_mul(8)?))
            .and_then(|b| b.checked_add(p.checked_mul(16)?))
    };
    let fits = |b: Option<u64>| b.is_some_and(|b| b <= crate::memory::limit());
    // The largest chunk below `chunk` that fits on `t` threads (needs grow with the chunk).
    let largest = |t: usize| {
        let (mut lo, mut hi) = (0usize, chunk);
        while lo < hi {
            let mid = lo + (hi - lo).div_ceil(2);
            if fits(needed(mid, t)) { lo = mid } else { hi = mid - 1 }
        }
        lo
    };
    let fix = if fits(needed(1, 1)) {
        match largest(threads) {
            0 => format!("lower train.threads: train.chunk = {} fits on 1 thread", largest(1)),
            c => format!("lower train.chunk to at most {c} (on {threads} threads), or train.threads"),
        }
    } else {
        // Even one example at a time does not fit: the model is too large, and the advice says where.
        match net.largest_part() {
            Some((part, n)) => format!(
                "the model is too large even at train.chunk = 1 on 1 thread: it has {p} parameters, {n} of them in \
                 {part}; use a smaller model"
            ),
            None => format!("the model is too large even at train.chunk = 1 on 1 thread ({p} parameters)"),
        }
    };
    crate::memory::check(
        &format!("training with train.chunk = {chunk} on {threads} threads"),
        needed(chunk, threads),
        &fix,
    )
}

fn resolved_config(cfg: &ValidConfig, norm: &Normalize, model: Option<serde_json::Value>) -> Result<String> {
    let text = toml::to_string_pretty(cfg.config())
        .map_err(|e| Error::Serialise { what: "the run's config", message: e.to_string() })?;
    let mut head = match cfg.sigma() {
        Some(s) => format!("# resolved noise multiplier: sigma = {s}\n"),
        None => String::new(),
    };
    if cfg.config().data.normalize.is_none() {
        head += &format!(
            "# resolved normalisation (public: the dataset's published constants, its test split's, or none for \
             [data.features]): mean = {}, std = {}\n",
            norm.mean, norm.std
        );
    }
    if let Some(model) = model {
        head += &format!("# model: not the [model] section but a burn module on the burn engine: {model}\n");
    }
    Ok(head + &text)
}

/// Trains per `cfg` on `data` in `dir` to the end (or `opts.stop_after` steps), resuming the
/// run the folder holds. A finished run is not redone: its summary is read back.
///
/// # Errors
/// As [`Trainer::resume_or_init`], [`Trainer::step`] and [`Trainer::finish`].
pub fn run(
    cfg: &ValidConfig,
    data: &Dataset,
    dir: &Path,
    opts: &RunOptions,
    observer: &mut dyn Observer,
) -> Result<RunSummary> {
    run_on(cfg, data, dir, opts, observer, &mut Solo)
}

/// As [`run`], as one rank of the data-parallel run `comm` (every rank calls it with the same
/// config, data and folder, which must be on a file system every rank sees): the same steps,
/// model and `privacy.json` as one process, bit for bit. Rank 0 writes the run folder and tells
/// `observer`; on the other ranks the summary has no result (rank 0 writes it).
///
/// # Errors
/// As [`run`]; another rank failed (every rank stops, naming it).
pub fn run_on(
    cfg: &ValidConfig,
    data: &Dataset,
    dir: &Path,
    opts: &RunOptions,
    observer: &mut dyn Observer,
    comm: &mut dyn Collective,
) -> Result<RunSummary> {
    if comm.rank() == 0 && RunFolder::of_run(dir, opts).is_finished() {
        return RunSummary::read_folder(&RunFolder::of_run(dir, opts));
    }
    let built = (|| -> Result<std::result::Result<ConfigModel, Network>> {
        let spec = cfg.model_for(data.shape(), data.classes())?;
        if cfg.engine_for(&spec) != Engine::Burn {
            let net = Network::new(&spec).map_err(|e| Error::config("model", e.to_string()))?;
            return Ok(Err(net));
        }
        // `train.engine = "burn"`, or a kind the fast engine lacks (group norm, …).
        let c = cfg.config();
        // θ, the modules holding it and their initial values: checked before any is allocated.
        let params = crate::model::spec_params(&spec).map_err(|e| Error::config("model", e.to_string()))?;
        let bytes = params.and_then(|p| u64::try_from(p).ok()?.checked_mul(12));
        crate::memory::check("the model's parameters", bytes, "use a smaller model")?;
        Ok(Ok(ConfigModel::new(&spec, &c.train.device.device()?, c.model.init_seed)?))
    })();
    match built {
        Ok(Ok(model)) => Ok(run_with_on(cfg, model, data, dir, opts, observer, comm)?.summary),
        Ok(Err(net)) => Ok(run_with_on(cfg, net, data, dir, opts, observer, comm)?.summary),
        Err(e) => {
            comm.abort(&e.to_string());
            Err(e)
        }
    }
}

/// Trains `engine`'s model (e.g. a [`BurnEngine`] around your burn model) per `cfg` on `data`
/// in `dir`, as [`run`] does the config's model, and returns the trained parameters with the
/// summary. `cfg`'s `model` section is not used.
///
/// # Errors
/// As [`Trainer::with_engine`], [`Trainer::step`] and [`Trainer::finish`]; a finished run
/// (its parameters are in its folder's model file).
pub fn run_with<E: TrainModel>(
    cfg: &ValidConfig,
    engine: E,
    data: &Dataset,
    dir: &Path,
    opts: &RunOptions,
    observer: &mut dyn Observer,
) -> Result<Trained<E>> {
    run_with_on(cfg, engine, data, dir, opts, observer, &mut Solo)
}

/// As [`run_with`], as one rank of the data-parallel run `comm` (see [`run_on`]). On ranks
/// other than 0 the returned parameters are the θ of the last step this rank computed (not
/// the model rank 0 returns, which a stopping rule may pick from an earlier step), and the
/// summary has no result.
///
/// # Errors
/// As [`run_with`] and [`run_on`].
pub fn run_with_on<E: TrainModel>(
    cfg: &ValidConfig,
    engine: E,
    data: &Dataset,
    dir: &Path,
    opts: &RunOptions,
    observer: &mut dyn Observer,
    comm: &mut dyn Collective,
) -> Result<Trained<E>> {
    if comm.rank() != 0 {
        return serve_rank(cfg, engine, data, dir, opts, comm);
    }
    let mut trainer = Trainer::with_engine_on(cfg, engine, data, dir, opts, observer, comm)?;
    while !trainer.is_done() {
        if let Err(e) = trainer.step() {
            trainer.abort(&e);
            return Err(e);
        }
    }
    trainer.finish_returning()
}

/// A rank other than 0: builds its part of the run, loads its shard of the ledger from where
/// rank 0 says the run stands, and answers rank 0 until the end. Any failure aborts the run.
fn serve_rank<E: TrainModel>(
    cfg: &ValidConfig,
    engine: E,
    data: &Dataset,
    dir: &Path,
    opts: &RunOptions,
    comm: &mut dyn Collective,
) -> Result<Trained<E>> {
    let (rank, ranks) = (comm.rank(), comm.size());
    let folder = RunFolder::of_run(dir, opts);
    let setup = Setup::new(cfg, engine, data, opts, (rank, ranks));
    let answered = setup.and_then(|s| {
        let mut bytes = Vec::new();
        comm.broadcast(&mut bytes)?;
        let hello: Hello = serde_json::from_slice(&bytes)
            .map_err(|e| Error::Collective(format!("rank 0 sent a greeting this rank cannot read: {e}")))?;
        if hello.identity != Hello::digest(&s.identity)? {
            return Err(Error::Collective(format!(
                "rank {rank}'s run differs from rank 0's: every rank must run the same config (and model) on the \
                 same data files; check the files on rank {rank}'s machine"
            )));
        }
        if !folder.config().is_file() {
            return Err(Error::RunState {
                path: dir.into(),
                message: format!(
                    "rank {rank} does not see the run folder rank 0 wrote: put it on a file system every rank shares"
                ),
            });
        }
        let own = s.budgets.slice(s.shard.range.clone());
        let budget = own.max();
        let ledger = if hello.step == 0 {
            IndividualFilter::with_budgets(s.shard.range.len(), own)?
        } else {
            let in_state = match hello.ledger_ranks {
                Some(_) => Vec::new(),
                None => {
                    let expect = Expect { params: s.theta.len(), examples: s.n, max_steps: cfg.max_steps() };
                    state::read(&folder.state(), expect)?.map(|snap| snap.spent).unwrap_or_default()
                }
            };
            let at = (&in_state[..], hello.ledger_ranks);
            IndividualFilter::from_spent_with(
                own,
                shards::assemble(&folder, s.n, &s.shard.range, at, hello.step, budget)?,
            )?
        };
        let mut ledger = ledger;
        let part = (&s.plan, &mut ledger);
        let served = distributed::serve(cfg, part, (&folder, &s.shard), (&s.pool, s.n), comm, s.theta)?;
        let steps = hello.step + served.steps;
        let summary = RunSummary { dir: dir.into(), steps, finished: served.finished, result: None, privacy: None };
        Ok(Trained { summary, params: served.theta, engine: s.plan.into_net() })
    });
    if let Err(e) = &answered
        && !matches!(e, Error::Collective(_))
    {
        comm.abort(&e.to_string());
    }
    answered
}
