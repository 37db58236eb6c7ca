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

use super::canaries::Canaries;
use super::config::{ActiveRelease, Engine, ValidConfig};
use super::distributed::{self, Message};
use super::folder::{Record, RunFolder};
use super::input_canaries::InputCanaries;
use super::observer::{Observer, StepReport, Warning};
use super::outputs::{ConfidentialRow, METRICS_COLUMNS, MetricsRow};
use super::releases::ReleaseKind;
use super::shards::{self};
use super::state::{self, Meta, StepCost};
use super::step::UpdateRule;
use super::stopping::StoppingRule;
use crate::accounting::filter::IndividualFilter;
use crate::collective::{Collective, Solo};
use crate::data::Dataset;
use crate::error::{Error, Result};
use crate::per_example::{Network, count_correct};

mod finish;
mod model;
mod options;
mod parts;
mod ranks;
mod resume;
mod run;
mod setup;

pub use super::folder::read_json;
pub use model::{TrainModel, Trained};
pub use options::{RunOptions, RunSummary};
pub use parts::Trainer;
use parts::{FLUSH_INTERVAL, MAX_UNFLUSHED};
pub use run::{Run, run};
use setup::Setup;

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
    /// As [`Trainer::resume_or_init`], training the model of the engine `net` (e.g. a [`BurnEngine`](crate::per_example::BurnEngine) around
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
        Self::open(cfg, net, data, dir, opts, observer, (Box::new(Solo), None))
    }

    /// As [`Trainer::with_engine`], on rank 0 of the data-parallel run `comm`: this process
    /// holds the run (its folder, session and noise) and its shard of the examples; every other
    /// rank runs [`Run::train_model`] with [`Run::ranks`] on the same config, data and folder. On one rank it is
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
                "the trainer runs on rank 0; rank {} runs dpgd::train::Run with .ranks(…)",
                comm.rank()
            )));
        }
        Self::open(cfg, net, data, dir, opts, observer, (Box::new(comm), None))
    }

    /// Opens the run on rank 0 of `comm`, with the audit's input canaries `inputs` (their rows
    /// in `data`: [`InputCanaries::prepare`]); any failure aborts the other ranks.
    fn open(
        cfg: &'a ValidConfig,
        net: E,
        data: &'a Dataset,
        dir: &Path,
        opts: &RunOptions,
        observer: &'a mut dyn Observer,
        (mut comm, inputs): (Box<dyn Collective + 'a>, Option<InputCanaries>),
    ) -> Result<Self> {
        let ranks = comm.size();
        let mut t = match Self::build(cfg, net, data, dir, opts, observer, (ranks, inputs)) {
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

    /// As [`Trainer::with_engine_on`], with the audit's input canaries `inputs`, whose rows
    /// `data` holds ([`InputCanaries::prepare`]).
    pub(super) fn with_inputs_on(
        cfg: &'a ValidConfig,
        (net, data): (E, &'a Dataset),
        dir: &Path,
        opts: &RunOptions,
        observer: &'a mut dyn Observer,
        comm: &'a mut dyn Collective,
        inputs: Option<InputCanaries>,
    ) -> Result<Self> {
        Self::open(cfg, net, data, dir, opts, observer, (Box::new(comm), inputs))
    }

    /// The trainer of rank 0 of `ranks`, before it resumes (its collective still [`Solo`]).
    fn build(
        cfg: &'a ValidConfig,
        net: E,
        data: &'a Dataset,
        dir: &Path,
        opts: &RunOptions,
        observer: &'a mut dyn Observer,
        (ranks, inputs): (usize, Option<InputCanaries>),
    ) -> Result<Self> {
        let folder = RunFolder::of_run(dir, opts.candidate);
        if folder.is_finished() {
            return Err(Error::RunState { path: dir.into(), message: "the run is finished already".into() });
        }
        // Before anything is read: one process at a time continues a run.
        let lock = folder.lock()?;
        if folder.is_finished() {
            return Err(Error::RunState { path: dir.into(), message: "the run is finished already".into() });
        }
        check_inputs(cfg, data, inputs.as_ref(), ranks)?;
        let s = Setup::new(cfg, net, data, opts, (0, ranks))?;
        let c = cfg.config();
        let mut ledger = IndividualFilter::with_budgets(s.shard.range.len(), s.budgets.slice(s.shard.range.clone()))?;
        if let Some(inputs) = &inputs {
            // The null examples are never computed (a resumed ledger has them spent already).
            inputs.exhaust_nulls(&mut ledger, s.shard.range.clone())?;
        }
        Ok(Self {
            cfg,
            folder,
            _lock: lock,
            identity: s.identity,
            ledger,
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
            rule: cfg.method().training().step_rule(cfg, cfg.sigma()),
            stopping: StoppingRule::new(c.stop_rule(), c.stopping.patience),
            session: None,
            record: Record::default(),
            flushed: (0, Instant::now()),
            last_test: None,
            stop_at: usize::MAX,
            warned_collapse: false,
            // The canaries live on rank 0, beside the noise and the state: the other ranks
            // never see them.
            canaries: match &c.audit {
                Some(a) if a.canaries > 0 => Some(Canaries::new(cfg, a.canaries)?),
                _ => None,
            },
            inputs,
            observer,
        })
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
        #[cfg(test)]
        let sum = crate::train::input_canaries::tests::scale_sum(sum);
        // The null examples of an audit's excluded input canaries spend nothing: always active.
        self.active = active + self.inputs.as_ref().map_or(0, InputCanaries::null_count);
        // The method's noise and update (independent Gaussian noise and heavy-ball by default).
        let update = UpdateRule { lr: self.cfg.lr_at(t), divisor, momentum: self.cfg.config().train.momentum };
        match &mut self.canaries {
            // A one-run audit's canaries: their sum appended, their coordinates updated with θ's.
            Some(c) => {
                let sum = c.add_to(self.cfg, self.plan.aggregation(), t, sum)?;
                let mut extended = c.extend(&self.theta);
                let p = self.theta.len();
                // The method's state over the canaries before the step, to read their noisy sums back.
                let before = self.rule.state().get(p..).unwrap_or_default().to_vec();
                self.rule.apply(t, &mut extended, sum, update)?;
                let released = self.rule.noise_is_independent().then_some((update, &before[..], self.rule.state()));
                c.absorb(&mut extended, (p, t, self.cfg.worst_case_steps()), self.cfg, released);
                self.theta = extended;
            }
            None => self.rule.apply(t, &mut self.theta, sum, update)?,
        }
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
        // With canaries the method's state covers their coordinates too: it goes with them.
        let (canaries, velocity) = match &self.canaries {
            Some(c) => (Some(c.state(self.rule.state())), &[][..]),
            None => (None, self.rule.state()),
        };
        let meta = Meta {
            step: self.step,
            identity: self.identity.clone(),
            budget: self.ledger.budget(),
            stopping: stopping.clone(),
            cost,
            unflushed: self.record.unflushed(self.flushed.0),
            releases_in_state: true,
            ledger_ranks,
            canaries,
        };
        let spent = if ledger_ranks.is_some() { &[][..] } else { self.ledger.spent_all() };
        let noise = self.rule.noise_state();
        state::write(&self.folder.state(), &meta, &self.theta, best_theta, spent, (velocity, &noise))?;
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
}

/// Refuses a run whose audit's input canaries (`audit.input_canaries`) are not the rows `data`
/// appended ([`InputCanaries::prepare`], which [`Run`] calls), or that runs on several ranks.
fn check_inputs(cfg: &ValidConfig, data: &Dataset, inputs: Option<&InputCanaries>, ranks: usize) -> Result<()> {
    let m = cfg.input_canaries();
    let rows = data.appended().map(|(_, count)| count);
    if m > 0 && ranks > 1 {
        return Err(Error::config(
            "audit.input_canaries",
            format!(
                "input canaries are rows of one process's training set, and this run is on {ranks} ranks: audit it \
                 on one process, or with gradient canaries (audit.canaries), which run on several ranks"
            ),
        ));
    }
    if (m > 0) != inputs.is_some() || rows != inputs.map(InputCanaries::len) || inputs.is_some_and(|i| i.len() != m) {
        return Err(Error::config(
            "audit.input_canaries",
            format!(
                "the config asks for {m} input canaries and the data hold {} appended rows: train through \
                 dpgd::train::Run, which adds them",
                rows.unwrap_or(0)
            ),
        ));
    }
    Ok(())
}
