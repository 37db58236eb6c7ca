//! When a run stops and which model it returns: a [`StoppingRule`] that owns its state and is
//! fed only released (noisy, accounted) values, so its choice is post-processing.

use serde::{Deserialize, Serialize};

use super::config::StopRule;

/// The best model so far under [`StopRule::BestTrainAccuracy`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Best {
    /// The step whose model had the highest released (noisy) training accuracy.
    pub step: usize,
    /// That released accuracy.
    pub noisy_train_accuracy: f64,
    /// Queries answered since, without a new best.
    pub stale: usize,
}

/// The stopping rule's state, as saved with the training state.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct StoppingState {
    /// The best released model so far (None before the first query).
    pub best: Option<Best>,
}

/// A stopping rule with its state: it observes each released training accuracy, remembers the
/// best model, and says when to stop.
#[derive(Debug, Clone, PartialEq)]
pub struct StoppingRule {
    rule: StopRule,
    patience: usize,
    state: StoppingState,
    best_theta: Vec<f32>,
}

impl StoppingRule {
    /// A fresh rule; `patience` 0 means "never stop early".
    #[must_use]
    pub fn new(rule: StopRule, patience: usize) -> Self {
        Self { rule, patience, state: StoppingState::default(), best_theta: Vec::new() }
    }

    /// A rule restored from saved state and the parameters of its best model.
    #[must_use]
    pub fn restore(rule: StopRule, patience: usize, state: StoppingState, best_theta: Vec<f32>) -> Self {
        Self { rule, patience, state, best_theta }
    }

    /// Observes the training accuracy released after `step` (θ is that step's model).
    pub fn observe(&mut self, step: usize, noisy_train_accuracy: f64, theta: &[f32]) {
        match &mut self.state.best {
            Some(b) if noisy_train_accuracy <= b.noisy_train_accuracy => b.stale += 1,
            _ => {
                self.state.best = Some(Best { step, noisy_train_accuracy, stale: 0 });
                self.best_theta = theta.to_vec();
            }
        }
    }

    /// Whether patience ran out.
    #[must_use]
    pub fn should_stop(&self) -> bool {
        self.patience > 0 && self.state.best.as_ref().is_some_and(|b| b.stale >= self.patience)
    }

    /// The step and parameters of the model to return, given the last step's.
    #[must_use]
    pub fn selected<'a>(&'a self, last_step: usize, last_theta: &'a [f32]) -> (usize, &'a [f32]) {
        match (self.rule, &self.state.best) {
            (StopRule::BestTrainAccuracy, Some(b)) => (b.step, &self.best_theta),
            _ => (last_step, last_theta),
        }
    }

    /// The state to save, and the best model's parameters (empty if none).
    #[must_use]
    pub fn saved(&self) -> (&StoppingState, &[f32]) {
        (&self.state, &self.best_theta)
    }

    /// The best model's step, if any.
    #[must_use]
    pub fn best_step(&self) -> Option<usize> {
        self.state.best.as_ref().map(|b| b.step)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keeps_the_first_highest_and_stops_after_patience() {
        let mut r = StoppingRule::new(StopRule::BestTrainAccuracy, 2);
        r.observe(10, 0.5, &[1.0]);
        r.observe(12, 0.7, &[2.0]);
        r.observe(14, 0.7, &[3.0]);
        assert!(!r.should_stop());
        r.observe(16, 0.6, &[4.0]);
        assert!(r.should_stop());
        assert_eq!(r.selected(16, &[4.0]), (12, &[2.0][..]));
        let plain = StoppingRule::new(StopRule::MaxSteps, 0);
        assert_eq!(plain.selected(16, &[4.0]), (16, &[4.0][..]));
    }
}
