//! Opening a run folder: resuming the run it holds (its identity checked, its ledger read
//! wherever the state says it is, its records checked to continue) or starting one, and the
//! warnings the configuration deserves.

use super::model::TrainModel;
use super::parts::Trainer;
use super::setup::{open_session, resolved_config};
use crate::accounting::filter::IndividualFilter;
use crate::error::{Error, Result};
use crate::train::canaries::Canaries;
use crate::train::folder::Record;
use crate::train::observer::Warning;
use crate::train::shards;
use crate::train::state::{self, Expect, Meta};
use crate::train::stopping::StoppingRule;

impl<'a, E: TrainModel> Trainer<'a, E> {
    /// Loads the saved state if there is one (checking it is this run's and that the record
    /// files hold every row it says they do), else writes the fresh run's configuration.
    pub(super) fn resume(&mut self) -> Result<()> {
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
        let velocity = self.restore_canaries(snap.velocity, snap.meta.canaries)?;
        self.rule.restore(velocity);
        self.rule
            .restore_noise(snap.meta.step + 1, snap.noise)
            .map_err(|e| Error::RunState { path: self.folder.state(), message: format!("{e}: the file is corrupt") })?;
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
        self.restore_record(snap.meta.unflushed)?;
        self.session = open_session(self.cfg, self.step)?;
        self.flush()
    }

    /// The audit's canaries from the state (`saved`), checked against the config's `[audit]`;
    /// gives back the method's state to restore (the canaries keep it over θ and their own
    /// coordinates when the run is audited).
    fn restore_canaries(
        &mut self,
        velocity: Vec<f32>,
        saved: Option<crate::train::canaries::CanaryState>,
    ) -> Result<Vec<f32>> {
        let audit = self.cfg.config().audit.as_ref().map(|a| a.canaries).filter(|&m| m > 0);
        let corrupt =
            |why: String| Error::RunState { path: self.folder.state(), message: format!("{why}: the file is corrupt") };
        match (audit, saved) {
            (None, None) => Ok(velocity),
            (Some(canaries), Some(saved)) => {
                if !(saved.velocity.is_empty() || saved.velocity.len() == self.theta.len() + canaries)
                    || !velocity.is_empty()
                {
                    return Err(corrupt(format!("the audit's momentum buffer has {} values", saved.velocity.len())));
                }
                let velocity = saved.velocity.clone();
                self.canaries = Some(Canaries::restore(self.cfg, canaries, saved).map_err(|e| corrupt(e.to_string()))?);
                Ok(velocity)
            }
            _ => Err(corrupt("its audit canaries do not match the config's [audit]".into())),
        }
    }

    /// The released records, continued from the state's unflushed rows: they must end at the
    /// state's step.
    fn restore_record(&mut self, unflushed: crate::train::state::Unflushed) -> Result<()> {
        self.record = Record::load(&self.folder)?;
        self.record.confidential.truncate(self.record.metrics.len());
        self.check_record_continues(&unflushed)?;
        self.record.append_unflushed(unflushed).map_err(|message| Error::RunState {
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
        Ok(())
    }

    /// Refuses a record file that lost rows the state says it held: the state keeps only the
    /// rows written after the files were last written, so rows missing between the two would
    /// leave a hole in the published record.
    pub(super) fn check_record_continues(&self, unflushed: &crate::train::state::Unflushed) -> Result<()> {
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
    pub(super) fn log_resume(&self, step: usize) -> Result<()> {
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
        for field in crate::train::config::RESUMABLE_FIELDS {
            line[field] = self.cfg.config().field_value(field).unwrap_or_default();
        }
        // The threads that ran it, where the config leaves the number to the machine.
        line["train.threads"] = self.pool.current_num_threads().into();
        text += &format!("{line}\n");
        state::atomic_write(&path, text.as_bytes())
    }

    pub(super) fn check_identity(&self, saved: &Meta) -> Result<()> {
        let bad = |message: String| Error::RunState { path: self.folder.root().into(), message };
        let diffs = crate::train::config::field_differences(&saved.identity.config, &self.identity.config);
        if !diffs.is_empty() {
            return Err(bad(format!(
                "it holds a run made with other settings ({}); a run can only be resumed as it was started \
                 (only {} may change): undo the change, or start a new run folder with --out",
                diffs.join(", "),
                crate::train::config::resumable_fields()
            )));
        }
        if let (Some(then), Some(now)) = (&saved.identity.engine, &self.identity.engine)
            && then != now
        {
            return Err(bad(format!(
                "the run was trained on {then}, and would now go on on {now}, whose parameters are laid out \
                 differently: resume it as it was started (train.engine, and the same entry point: Run::train or \
                 Run::train_model), or start a new run folder with --out"
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

    /// Warnings about the configuration: not private, and why; settings that defeat their
    /// purpose.
    pub(super) fn advise(&mut self) {
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
        if c.stop_rule() == crate::train::config::StopRule::BestTrainAccuracy && stop_sigma > 0.05 * n {
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
}
