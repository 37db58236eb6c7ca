//! The end of a run: what its start reports, its publishable results and `privacy.json`, and
//! the operator's confidential summary.

use super::model::{TrainModel, Trained};
use super::options::RunSummary;
use super::parts::Trainer;
use crate::accounting::filter::IndividualFilter;
use crate::error::Result;
use crate::model::export::ModelInput;
use crate::per_example::count_correct;
use crate::train::distributed::Message;
use crate::train::folder::write_json;
use crate::train::observer::{FinishInfo, StartInfo};
use crate::train::outputs::{ActiveAfterK, Diagnostics, RunResult};
use crate::train::shards;

impl<'a, E: TrainModel> Trainer<'a, E> {
    pub(super) fn start_info(&self) -> StartInfo {
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
            guarantee: crate::train::report::summary(self.cfg),
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

    /// What the run released about plain private GD's end, step k: its test accuracy (`None`
    /// where some example could be dropped before k — a tier stricter than the run's budget —
    /// so that the model at k is not plain GD's), and the last noisy active count after k.
    fn at_step_k(&self) -> (Option<f64>, Option<ActiveAfterK>) {
        let k = self.cfg.worst_case_steps();
        let budget = self.cfg.ledger_budget().unwrap_or(f64::MAX);
        let drops_before_k = self.cfg.tiers().iter().any(|t| t.budget < budget);
        let metrics = &self.record.metrics;
        let test_accuracy_at_k =
            metrics.get(k.wrapping_sub(1)).and_then(|r| r.test_accuracy).filter(|_| !drops_before_k);
        let active_after_k = metrics
            .iter()
            .rev()
            .filter(|r| r.step > k)
            .find_map(|r| r.active_count_noisy.map(|count| ActiveAfterK { step: r.step, count }));
        (test_accuracy_at_k, active_after_k)
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
        let (test_accuracy_at_k, active_after_k) = self.at_step_k();
        let input =
            ModelInput { normalize: self.norm.clone(), features: self.features.clone(), form: self.form.clone() };
        self.plan.net().write_model(model, &input, &self.folder, self.cfg)?;
        self.audit_inputs(model)?;
        let model = model.to_vec();
        let mut privacy = crate::train::report::report(self.cfg, self.session.as_ref(), self.n, self.step)?;
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
        crate::train::plot::plot_run(&self.folder, self.cfg, &self.record.metrics, selected_step)?;
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
            chance: crate::train::observer::majority_share(self.test.labels()),
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

    /// The black-box audit of the published `model` by the input canaries, if the run has them
    /// (`confidential/audit-inputs.json` and its plot).
    fn audit_inputs(&self, model: &[f32]) -> Result<()> {
        let Some(inputs) = &self.inputs else { return Ok(()) };
        let c = self.cfg.config();
        let confidence = c.audit.as_ref().map_or(super::super::config::AUDIT_CONFIDENCE, |a| a.confidence);
        let theta0 = self.plan.net().initial_params(c.model.init_seed)?;
        let net = self.plan.net();
        let report = inputs.report(self.cfg, (net, model, &theta0), &self.norm, (self.step, confidence))?;
        write_json(&self.folder.input_audit(), &report)?;
        crate::train::canaries::plot_scores(
            &report,
            &self.folder.input_audit_plot(),
            "score: the published model's log-likelihood of the canary's label, less the initial model's (higher: \
             more likely in)",
        )
    }

    /// The operator's files: `diagnostics.json` (exact values) and, for a run with per-example
    /// budgets, the budget report.
    pub(super) fn write_confidential(&self) -> Result<()> {
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
            let examples = crate::train::budget::examples_only(self.cfg, ledger)?;
            let b = crate::train::budget::summarise(&examples, self.cfg.tiers(), self.step, &self.record.confidential);
            crate::train::budget::write(&self.folder, &b)?;
        }
        if let Some(c) = &self.canaries {
            let confidence =
                self.cfg.config().audit.as_ref().map_or(super::super::config::AUDIT_CONFIDENCE, |a| a.confidence);
            let report = c.report(self.cfg, self.step, confidence)?;
            write_json(&self.folder.audit(), &report)?;
            crate::train::canaries::plot(&report, &self.folder.audit_plot())?;
        }
        Ok(())
    }
}
