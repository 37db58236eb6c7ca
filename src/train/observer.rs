//! How a run reports progress without printing: the library calls an [`Observer`], the CLI
//! implements it (a progress bar, or plain lines when stderr is not a terminal), tests and
//! other programs pass [`Silent`] or their own.
//!
//! Observers see only what the run releases (noisy, accounted values and test accuracies),
//! plus operator warnings such as a count of skipped non-finite gradients: the console is the
//! operator's, but it can end up in logs, so nothing exact about the training data goes there.

use super::config::Method;

/// What a run is about to do.
#[derive(Debug, Clone, PartialEq)]
pub struct StartInfo {
    /// The run's name.
    pub name: String,
    /// The algorithm.
    pub method: Method,
    /// Training examples.
    pub examples: usize,
    /// The engine computing the per-example gradients, in words (`the fast CPU engine`, `the
    /// burn engine`).
    pub engine: &'static str,
    /// The device it computes on, in words (the adapter, for a GPU backend; `None`: the fast
    /// engine, on the CPU).
    pub device: Option<String>,
    /// Steps the run may take.
    pub max_steps: usize,
    /// k = B_norm/C².
    pub worst_case_steps: usize,
    /// The step it resumes after (0 for a fresh run).
    pub resumed_after: usize,
    /// The noise multiplier σ (None for non-private runs).
    pub sigma: Option<f64>,
    /// DP-SGD's Poisson sampling rate (None for full-batch methods).
    pub sample_rate: Option<f64>,
    /// One line stating the guarantee with its δ, conversion and neighbouring relation — or
    /// why the run is not private.
    pub guarantee: String,
    /// Why the run is not private (empty when it is).
    pub not_private_because: Vec<String>,
    /// Where the noise comes from.
    pub noise: String,
}

/// What one step released.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StepReport {
    /// The step (1-based).
    pub step: usize,
    /// Steps the run may take.
    pub max_steps: usize,
    /// ε of the worst case spent so far (None for non-private runs).
    pub epsilon_so_far: Option<f64>,
    /// The latest test accuracy (None before the first evaluation).
    pub test_accuracy: Option<f64>,
    /// The noisy active count released at this step, if any.
    pub active_count_noisy: Option<f64>,
    /// The noisy training accuracy released at this step, if any.
    pub train_accuracy_noisy: Option<f64>,
    /// The stopping rule's best step so far.
    pub best_step: Option<usize>,
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq)]
pub struct FinishInfo {
    /// The algorithm.
    pub method: Method,
    /// Steps run.
    pub steps: usize,
    /// The returned model's step.
    pub selected_step: usize,
    /// Its test accuracy.
    pub test_accuracy: f64,
    /// Test accuracy after k steps (the method's first k steps alone, with the same σ:
    /// [`super::method::TrainingMethod::beyond_k`]).
    pub test_accuracy_at_k: Option<f64>,
    /// The last noisy active count released after k, as (step, count).
    pub active_after_k: Option<(usize, f64)>,
    /// Training examples.
    pub examples: usize,
    /// k.
    pub worst_case_steps: usize,
    /// The guarantee line, as in [`StartInfo::guarantee`].
    pub guarantee: String,
    /// Chance level for the test split: the accuracy of always answering its most common class
    /// (public, as the test split is).
    pub chance: f64,
}

impl FinishInfo {
    /// Whether `accuracy` on the test split is near chance level: within a tenth of the way
    /// from [`chance`](Self::chance) to 100 % (a run that did not learn; two such models
    /// differ by noise).
    #[must_use]
    pub fn near_chance(&self, accuracy: f64) -> bool {
        accuracy <= self.chance + 0.1 * (1.0 - self.chance)
    }
}

/// The share of `labels` held by the most common one (0 for none).
#[must_use]
pub fn majority_share(labels: &[u8]) -> f64 {
    let mut counts = [0usize; 256];
    labels.iter().for_each(|&y| counts[usize::from(y)] += 1);
    counts.iter().max().map_or(0.0, |&m| m as f64 / labels.len().max(1) as f64)
}

/// Something the operator should know.
#[derive(Debug, Clone, PartialEq)]
pub enum Warning {
    /// The run is not private, and why.
    NotPrivate(Vec<String>),
    /// Examples had non-finite gradients and were skipped (charged, contributing nothing).
    NonFiniteSkipped {
        /// The step.
        step: usize,
        /// How many examples.
        count: usize,
    },
    /// The released noisy active count fell to a small fraction of the training set: the
    /// remaining steps are mostly noise.
    ActiveCollapsed {
        /// The step.
        step: usize,
        /// The noisy count.
        count: f64,
        /// Training examples.
        examples: usize,
        /// Whether the stopping rule already returns the best released model
        /// (`best-train-accuracy`) rather than the last one.
        returns_best: bool,
    },
    /// Advice on the configuration (a deprecated field, a noise level that defeats its purpose).
    Advice(String),
    /// The GPU backend runs on a software rasteriser (no GPU adapter was found): the adapter.
    SoftwareAdapter(String),
}

/// The warning as the operator reads it (the CLI prints this line).
impl std::fmt::Display for Warning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Warning::NotPrivate(why) => write!(f, "WARNING: this run is NOT PRIVATE: {}", why.join("; ")),
            Warning::NonFiniteSkipped { step, count } => write!(
                f,
                "warning (confidential: an exact count on training data): step {step}: {count} example(s) had a \
                 non-finite gradient and were skipped (charged, contributing nothing); further skips are counted in \
                 confidential/steps.jsonl"
            ),
            Warning::ActiveCollapsed { step, count, examples, returns_best } => write!(
                f,
                "warning: at step {step} the noisy active count is ~{count:.0} of {examples} examples: the remaining \
                 steps add mostly noise ({})",
                if *returns_best {
                    "the best released model is returned; fewer train.max_steps would save time"
                } else {
                    "use stopping.rule = \"best-train-accuracy\" to return the best model, or fewer train.max_steps"
                }
            ),
            Warning::Advice(what) => write!(f, "note: {what}"),
            Warning::SoftwareAdapter(adapter) => write!(
                f,
                "WARNING: the GPU backend runs on {adapter}: no GPU adapter was found, and this is many times slower \
                 than train.device = \"flex\" on the same CPU"
            ),
        }
    }
}

/// A run's events, in order: `started`, then `step` per step (with `warning`s in between),
/// then `finished` (unless the run was stopped before its end).
pub trait Observer {
    /// The run starts (or resumes).
    fn started(&mut self, _info: &StartInfo) {}
    /// A step's releases are durable.
    fn step(&mut self, _report: &StepReport) {}
    /// Something the operator should know.
    fn warning(&mut self, _warning: &Warning) {}
    /// The run finished; its files are written.
    fn finished(&mut self, _info: &FinishInfo) {}
}

/// An observer that ignores everything.
#[derive(Debug, Clone, Copy, Default)]
pub struct Silent;

impl Observer for Silent {}

#[cfg(test)]
mod tests {
    use super::*;

    /// Chance is the test split's majority class, not one over the classes: 81.5 % on a two-class
    /// set whose majority is 63 % is learning, 65 % is not; on ten balanced classes, 19 % is
    /// chance and 25 % is not.
    #[test]
    fn chance_is_the_test_splits_most_common_class() {
        let labels: Vec<u8> = (0..100).map(|i| u8::from(i >= 63)).collect();
        let info = |chance| FinishInfo {
            method: Method::Filtered,
            steps: 1,
            selected_step: 1,
            test_accuracy: 0.0,
            test_accuracy_at_k: None,
            active_after_k: None,
            examples: 1,
            worst_case_steps: 1,
            guarantee: String::new(),
            chance,
        };
        let two = info(majority_share(&labels));
        assert!((two.chance - 0.63).abs() < 1e-12);
        assert!(!two.near_chance(0.815) && two.near_chance(0.65));
        let ten = info(majority_share(&(0..1000).map(|i| (i % 10) as u8).collect::<Vec<_>>()));
        assert!(ten.near_chance(0.19) && !ten.near_chance(0.25));
        assert_eq!(majority_share(&[]), 0.0);
    }
}
