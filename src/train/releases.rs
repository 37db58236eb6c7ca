//! The statistics of the training data a run releases besides its model: each a Gaussian
//! noisy count (sensitivity 1 under both neighbouring relations) on a fixed schedule, charged
//! to the run's privacy session before it is computed.

use serde::{Deserialize, Serialize};

use crate::accounting::GaussianRelease;
use crate::error::Result;

/// What a scheduled release counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ReleaseKind {
    /// The number of examples with budget left (the active set of [FZ21] Algorithm 2).
    ///
    /// [FZ21]: https://arxiv.org/abs/2008.11193
    ActiveCount,
    /// The number of correctly classified training examples (the stopping rule's query).
    TrainAccuracy,
}

impl ReleaseKind {
    /// The name of its mechanism in the privacy session and in `privacy.json`.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            ReleaseKind::ActiveCount => "active-count",
            ReleaseKind::TrainAccuracy => "train-accuracy",
        }
    }

    /// Where its noise streams start (counting down by step, far above any update stream).
    #[must_use]
    pub fn stream_base(self) -> u64 {
        match self {
            ReleaseKind::ActiveCount => u64::MAX,
            ReleaseKind::TrainAccuracy => u64::MAX / 2,
        }
    }
}

/// A statistic released after steps `first, first + every, … ≤ last` as a Gaussian noisy count
/// (sensitivity 1, noise std `sigma`): each release is 1/(2σ²)-zCDP.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScheduledRelease {
    /// What is counted.
    pub kind: ReleaseKind,
    /// Noise std of each count.
    pub sigma: f64,
    /// First step with a release (≥ 1).
    pub first: usize,
    /// Steps between releases (≥ 1).
    pub every: usize,
    /// No release after this step.
    pub last: usize,
}

impl ScheduledRelease {
    /// Whether a release is due after `step`.
    #[must_use]
    pub fn due(&self, step: usize) -> bool {
        (self.first..=self.last).contains(&step) && (step - self.first).is_multiple_of(self.every.max(1))
    }

    /// Releases made in steps 1..=`step`.
    #[must_use]
    pub fn count_through(&self, step: usize) -> u64 {
        if step < self.first || self.first > self.last {
            0
        } else {
            ((step.min(self.last) - self.first) / self.every.max(1) + 1) as u64
        }
    }

    /// The Gaussian mechanism of the releases made in steps 1..=`step`, for accounting.
    ///
    /// # Errors
    /// If `sigma` gives no finite guarantee (validated configs never do).
    pub fn through(&self, step: usize) -> Result<GaussianRelease> {
        Ok(GaussianRelease::new(self.sigma, 1.0, self.count_through(step))?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedules_count_in_closed_form() {
        let r = ScheduledRelease { kind: ReleaseKind::ActiveCount, sigma: 1.0, first: 10, every: 5, last: 30 };
        let due: Vec<usize> = (1..=40).filter(|&s| r.due(s)).collect();
        assert_eq!(due, [10, 15, 20, 25, 30]);
        for step in 0..=40 {
            assert_eq!(r.count_through(step), due.iter().filter(|&&s| s <= step).count() as u64);
        }
        assert_eq!(r.count_through(usize::MAX), 5, "no loop over steps: any step is O(1)");
    }
}
