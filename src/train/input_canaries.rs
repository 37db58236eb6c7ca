//! A black-box one-run audit of a training run (`[audit] input_canaries = M`; Steinke, Nasr &
//! Jagielski 2023, "Privacy auditing with one (1) training run", §7's black-box setting): M
//! input canaries join the training set, each by a fair coin, and at the end the published
//! model alone tells the auditor which of them were in.
//!
//! **The canaries.** Canary j is an input no real example resembles, with a label drawn
//! uniformly from the classes: each value one of two by a fair coin, symmetric about the value
//! the run's normalisation maps to 0 (bytes 0 or 67 for MNIST's; numbers at mean ± std), so
//! that no two canaries share a direction; for data transformed into features, the features of
//! an image of uniformly random bytes. Canary j is in tier j mod the number of tiers. The
//! canaries, their coins and (under replace-one) their replacements come from a seed of their
//! own, drawn once before the first step from the run's noise seed and kept in
//! `confidential/input-canaries.json`, so that a resumed run trains on the same ones.
//!
//! **Where they are.** Their rows follow the run's own examples (after `data.train_subset` and
//! any hold-out), so no real example's row, tier or ledger changes: the examples' budgets are
//! read by their rows as without canaries ([`crate::train::budget::ledger_budgets`]). An
//! included canary is a training example like any other — computed by the run's engine on its
//! device, clipped by its kernel, charged to its ledger at its tier's budget, sampled, summed,
//! counted. An excluded canary is its neighbour under the run's relation:
//! - *zero-out*: the null example. Its row stays (n counts it, as n is public under zero-out),
//!   but its ledger entry is spent before the first step, so it is never computed, charged or
//!   summed, and the active count counts it as active, as a null example, which spends
//!   nothing, always is. The stopping rule's count of correct training examples reads its
//!   row's prediction; a count moves by at most 1 between neighbours whatever the null example
//!   counts as, which is the sensitivity the accountant charges, so the run's guarantee covers
//!   this pair of training sets as it covers any other.
//! - *replace-one*: a second canary drawn as the first (input and label), in its place.
//!
//! **The guess.** A canary's score is the published model's log-likelihood of its label, less
//! the initial model's (θ₀ is public), and the published model's log-likelihood alone: two
//! statistics fixed before the run. The guesses and both analyses are the gradient canaries'
//! ([`group_audits`]): each tier's canaries against that tier's ε. There is no Gaussian bound:
//! these scores are not the Gaussian mechanism's.
//!
//! **What it sees that gradient canaries cannot.** The canaries' gradients are the engine's,
//! on the run's device and kernels, so a wrong per-example gradient or norm, a clip that lets
//! more than C through, or a sum that is not the clipped rows' shows in their scores; so do the
//! run's real data path (features, normalisation) and its stopping rule's returned model.
//! **What it cannot.** The adversary sees the published model only, not the updates, and a
//! canary is one of n examples; so the bounds are far below the claim, and only a break that
//! lifts the true ε far above it is caught (see `docs/audit.md`). The canaries' tiers are
//! dealt, not read from a file, and they are rows of one process: a run on several ranks with
//! input canaries is refused.

use rand::{RngExt as _, SeedableRng as _};
use rand_chacha::ChaCha20Rng;
use serde::{Deserialize, Serialize};

use super::canaries::{OneRunReport, Scores, group_audits, tier_groups};
use super::config::ValidConfig;
use super::folder::RunFolder;
use crate::accounting::Neighbours;
use crate::accounting::filter::IndividualFilter;
use crate::data::{Dataset, Fingerprint, Normalize, Split};
use crate::error::{Error, Result};
use crate::noise::Stream;
use crate::per_example::PerExample;

/// `confidential/input-canaries.json`: the seed the canaries were drawn from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct SavedSeed {
    /// M.
    canaries: usize,
    /// The seed of the canaries, their coins and their replacements.
    seed: u64,
}

/// The input canaries of a run.
#[derive(Debug)]
pub struct InputCanaries {
    included: Vec<bool>,
    tier_of: Vec<u8>,
    /// The canaries, in the training rows' form (bytes or numbers, features if the run has them).
    examples: Split,
    /// The training rows of the null examples (the canaries excluded under zero-out).
    nulls: Vec<usize>,
}

/// Canary j's tier of `tiers` (at least 1): j mod `tiers`, for `m` canaries.
#[must_use]
pub fn tiers_of(m: usize, tiers: usize) -> Vec<u8> {
    (0..m).map(|j| (j % tiers.max(1)) as u8).collect()
}

impl InputCanaries {
    /// The input canaries of the run of `cfg` in `folder` on `data` and the training set with
    /// them; `None` without `audit.input_canaries` or for a finished run (which is not trained
    /// again). The seed is read from the folder, or drawn and made durable there before
    /// anything trains.
    ///
    /// # Errors
    /// A dataset holding one rank's shard (input canaries are rows of one process); a seed file
    /// that is unreadable or drawn for another M; a run started without input canaries; a
    /// failing random source; a folder that cannot be written.
    pub fn prepare(cfg: &ValidConfig, data: &Dataset, folder: &RunFolder) -> Result<Option<(Self, Dataset)>> {
        let m = cfg.input_canaries();
        if m == 0 || folder.is_finished() {
            return Ok(None);
        }
        if data.held_shard().is_some() {
            return Err(Error::config(
                "audit.input_canaries",
                "input canaries are rows of the training set in one process, and this dataset holds one rank's \
                 shard: run the audit with input canaries on one process (gradient canaries, audit.canaries, audit \
                 runs on several ranks)",
            ));
        }
        let seed = seed(cfg, folder, m)?;
        // The run's normalisation, as the trainer chooses it (public: the config's or the test split's).
        let norm = cfg.config().data.normalize.clone().unwrap_or_else(|| data.default_normalize());
        let canaries = Self::draw(cfg, (data, &norm), m, seed)?;
        let rows = canaries.rows(cfg, (data, &norm), seed)?;
        let hash = <sha2::Sha256 as sha2::Digest>::digest(seed.to_le_bytes());
        let fingerprint = Fingerprint {
            file: format!("audit.input_canaries: {m} input canaries"),
            sha256: crate::data::idx::hex(&hash),
        };
        let with = data.appended_copy(cfg.config().data.train_subset, &rows, fingerprint)?;
        Ok(Some((canaries, with)))
    }

    /// The `m` canaries of `seed` for `data`: their coins, tiers and examples, and the rows
    /// of the null examples among the training rows that follow the run's own.
    fn draw(cfg: &ValidConfig, (data, norm): (&Dataset, &Normalize), m: usize, seed: u64) -> Result<Self> {
        let mut coins = stream(seed, 0);
        let included: Vec<bool> = (0..m).map(|_| coins.random_bool(0.5)).collect();
        let examples = draw_examples(data, norm, m, &mut stream(seed, 1))?;
        let first = data.train.head(cfg.config().data.train_subset).len();
        let nulls = match cfg.config().privacy.neighbours {
            Neighbours::ZeroOut => (0..m).filter(|&j| !included[j]).map(|j| first + j).collect(),
            Neighbours::ReplaceOne => Vec::new(),
        };
        Ok(Self { included, tier_of: tiers_of(m, cfg.tiers().len()), examples, nulls })
    }

    /// The training rows that follow the run's own: each canary where it is included or the
    /// null example's row (zero-out: the canary's, never read), else its replacement.
    fn rows(&self, cfg: &ValidConfig, (data, norm): (&Dataset, &Normalize), seed: u64) -> Result<Split> {
        if cfg.config().privacy.neighbours == Neighbours::ZeroOut {
            return Ok(self.examples.clone());
        }
        let replacements = draw_examples(data, norm, self.len(), &mut stream(seed, 2))?;
        let px = self.examples.pixels();
        let mut rows = self.examples.clone();
        for j in (0..self.len()).filter(|&j| !self.included[j]) {
            let at = j * px..(j + 1) * px;
            if rows.features.is_empty() {
                rows.images[at.clone()].copy_from_slice(&replacements.images[at]);
            } else {
                rows.features[at.clone()].copy_from_slice(&replacements.features[at]);
            }
            rows.labels[j] = replacements.labels[j];
        }
        Ok(rows)
    }

    /// M.
    #[must_use]
    pub fn len(&self) -> usize {
        self.included.len()
    }

    /// Whether there are none (never: an audit has at least 2).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.included.is_empty()
    }

    /// The null examples' count, counted active in every active count.
    #[must_use]
    pub fn null_count(&self) -> usize {
        self.nulls.len()
    }

    /// Spends the null examples' whole budgets in a fresh `ledger` of the rows `range` (one
    /// rank's shard, the whole training set on one process): they are never computed.
    ///
    /// # Errors
    /// [`Error::State`]: a ledger that is not one entry per row of `range`.
    pub fn exhaust_nulls(&self, ledger: &mut IndividualFilter, range: std::ops::Range<usize>) -> Result<()> {
        if ledger.len() != range.len() {
            return Err(Error::State(format!("a ledger of {} for the rows {range:?}", ledger.len())));
        }
        for &row in self.nulls.iter().filter(|r| range.contains(r)) {
            let i = row - range.start;
            ledger.grant(i, ledger.remaining_budget(i));
        }
        Ok(())
    }

    /// The audit of the published model θ (θ₀ the initial one) on `net` with the run's
    /// normalisation `norm`, after `steps` steps: each tier's canaries against its tier's ε, at
    /// `confidence`.
    ///
    /// # Errors
    /// As [`group_audits`].
    pub fn report<E: PerExample>(
        &self,
        cfg: &ValidConfig,
        (net, theta, theta0): (&E, &[f32], &[f32]),
        norm: &Normalize,
        (steps, confidence): (usize, f64),
    ) -> Result<OneRunReport> {
        let end = self.log_likelihoods(net, theta, norm);
        let start = self.log_likelihoods(net, theta0, norm);
        let gain: Vec<f64> = end.iter().zip(&start).map(|(a, b)| a - b).collect();
        let scores = Scores::black_box(&gain, &end);
        let groups = group_audits(cfg, &scores, &self.included, &tier_groups(cfg, &self.tier_of), confidence)?;
        Ok(OneRunReport {
            threat_model: "black-box, the published model only, input canaries trained as examples".into(),
            method: cfg.method().describe().into(),
            canaries: self.len(),
            steps,
            worst_case_steps: cfg.worst_case_steps(),
            neighbours: cfg.config().privacy.neighbours,
            consistent: groups.iter().all(|g| g.consistent),
            groups,
            scores: gain.into_iter().zip(self.included.iter().copied()).collect(),
            included: self.included.clone(),
        })
    }

    /// Each canary's log-likelihood of its label under θ, in micro-batches.
    fn log_likelihoods<E: PerExample>(&self, net: &E, theta: &[f32], norm: &Normalize) -> Vec<f64> {
        const B: usize = 256;
        let (px, classes) = (net.input_len(), net.classes());
        let data = self.examples.head(0);
        let (mut ws, mut x) = (net.scratch(B), vec![0.0f32; B * px]);
        let mut out = Vec::with_capacity(self.len());
        for lo in (0..self.len()).step_by(B) {
            let hi = (lo + B).min(self.len());
            data.normalised_into(lo..hi, norm, &mut x[..(hi - lo) * px]);
            let logits = net.logits(theta, &x[..(hi - lo) * px], hi - lo, &mut ws);
            for (z, &y) in logits.chunks_exact(classes).zip(&data.labels()[lo..hi]) {
                out.push(log_softmax_at(z, usize::from(y)));
            }
        }
        out
    }
}

/// log softmax(z)_y, in f64 (−∞ for a non-finite logit, which the guesses rank last).
fn log_softmax_at(z: &[f32], y: usize) -> f64 {
    let top = z.iter().map(|&v| f64::from(v)).fold(f64::NEG_INFINITY, f64::max);
    let sum: f64 = z.iter().map(|&v| (f64::from(v) - top).exp()).sum();
    let value = z.get(y).map_or(f64::NEG_INFINITY, |&v| f64::from(v) - top - sum.ln());
    if value.is_nan() { f64::NEG_INFINITY } else { value }
}

/// The generator of the canaries' part `part` (0: coins, 1: canaries, 2: replacements).
fn stream(seed: u64, part: u64) -> ChaCha20Rng {
    let mut rng = ChaCha20Rng::seed_from_u64(seed);
    rng.set_stream(part);
    rng
}

/// `m` inputs no real example resembles, in the training rows' form, each with a uniform label:
/// each value one of two, by a fair coin, placed symmetrically about the value the run's
/// normalisation `norm` maps to 0 (so that the canaries share no direction with each other,
/// and each is nearly orthogonal to every other example) — bytes about 255·mean (0 or 67 for
/// MNIST's), numbers at mean ± std; for data transformed into features, the features of images
/// of uniformly random bytes.
fn draw_examples(data: &Dataset, norm: &Normalize, m: usize, rng: &mut ChaCha20Rng) -> Result<Split> {
    let classes = data.classes();
    let labels: Vec<u8> = (0..m).map(|_| u8::try_from(rng.random_range(0..classes)).unwrap_or(0)).collect();
    if let Some(input) = data.feature_input() {
        let [channels, rows, cols] = input.images;
        let images = (0..m * channels * rows * cols).map(|_| rng.random::<u8>()).collect();
        return input.apply(&Split { images, features: Vec::new(), labels, rows, cols, channels });
    }
    let train = &data.train;
    let (plane, px) = (train.rows * train.cols, train.pixels());
    let (mut images, mut features) = (Vec::new(), Vec::new());
    for v in 0..m * px {
        let c = (v % px) / plane.max(1);
        let (mean, std) = (norm.mean.get(c).unwrap_or(0.0), norm.std.get(c).unwrap_or(1.0));
        let high = rng.random_bool(0.5);
        if train.images.is_empty() {
            features.push(if high { mean + std } else { mean - std });
        } else {
            let centre = (255.0 * f64::from(mean)).clamp(0.0, 255.0);
            let half = centre.min(255.0 - centre);
            // A mean at an end of the range leaves no room about it: the two ends, then.
            let (lo, hi) = if half < 16.0 { (0.0, 255.0) } else { (centre - half, centre + half) };
            images.push((if high { hi } else { lo }).round() as u8);
        }
    }
    Ok(Split { images, features, labels, rows: train.rows, cols: train.cols, channels: train.channels })
}

/// The canaries' seed for the run in `folder`: read from it, or drawn from the run's noise seed
/// and made durable there, under the folder's lock, before the first step.
fn seed(cfg: &ValidConfig, folder: &RunFolder, m: usize) -> Result<u64> {
    let _lock = folder.lock()?;
    let path = folder.input_canaries();
    if path.is_file() {
        let saved: SavedSeed = super::read_json(&path)?;
        if saved.canaries != m {
            return Err(Error::file(
                &path,
                format!(
                    "it holds the seed of {} input canaries and the config asks for {m} (audit.input_canaries): a \
                     run keeps its canaries; start a new run in another folder",
                    saved.canaries
                ),
            ));
        }
        return Ok(saved.seed);
    }
    if folder.state().is_file() {
        return Err(Error::RunState {
            path: folder.root().into(),
            message: "the run was started without audit.input_canaries (its folder has no input-canaries.json): a \
                      run keeps the audit it started with; start a new run in another folder"
                .into(),
        });
    }
    let seed = cfg.noise_seed().rng(Stream::input_canaries())?.random::<u64>();
    super::folder::write_json(&path, &SavedSeed { canaries: m, seed })?;
    Ok(seed)
}

#[cfg(test)]
pub(crate) mod tests {
    use std::cell::Cell;

    use super::*;
    use crate::train::step::ClippedSum;
    use crate::train::{RunOptions, Silent, TrainConfig, read_json, run};

    thread_local! {
        /// A deliberate bug (test builds only): the examples' clipped sum multiplied by this
        /// after the clip — a kernel that clips to 10C, as a slip of units would. Gradient
        /// canaries, appended after it, cannot see it; input canaries, whose rows it scales, can.
        static SCALE: Cell<i64> = const { Cell::new(1) };
    }

    /// The examples' clipped sum, scaled by the bug where it is switched on.
    pub(crate) fn scale_sum(sum: ClippedSum) -> ClippedSum {
        match (sum, SCALE.with(Cell::get)) {
            (ClippedSum::Grid { values, gamma }, k) if k != 1 => {
                ClippedSum::Grid { values: values.into_iter().map(|v| v * k).collect(), gamma }
            }
            (sum, _) => sum,
        }
    }

    /// Filtered GD on 300 synthetic examples at ε = 1, with `audit` and `extra` config lines.
    fn config(data: &std::path::Path, privacy: &str, audit: &str) -> ValidConfig {
        let text = format!(
            "[data]\ndir = \"{}\"\ntrain_subset = 300\ntest_subset = 100\n[model]\npreset = \"logistic\"\n\
             [privacy]\nmethod = \"filtered\"\nepsilon = 1.0\ndelta = 1e-5\nclip = 1.0\nworst_case_steps = 20\n\
             {privacy}[train]\nlr = 2.0\nmax_steps = 30\nseed = 5\n[stopping]\nrule = \"max-steps\"\n[audit]\n{audit}",
            data.display()
        );
        TrainConfig::from_toml(&text, &[]).unwrap().validate().unwrap()
    }

    fn synthetic() -> tempfile::TempDir {
        let data = tempfile::tempdir().unwrap();
        crate::data::synthetic::Synthetic::default().write(data.path()).unwrap();
        data
    }

    /// A correct run's input canaries are consistent with its claim, while a clip that lets 10C
    /// through — invisible to the gradient canaries beside them, which the bug does not touch —
    /// is caught by them.
    #[test]
    fn a_clip_that_lets_ten_times_the_clip_through_is_caught_by_input_canaries_only() {
        let data = synthetic();
        let cfg = config(data.path(), "", "canaries = 2000\ninput_canaries = 2000\n");
        let set = cfg.config().data.load().unwrap();
        let mut reports = Vec::new();
        for scale in [1, 10] {
            SCALE.with(|s| s.set(scale));
            let dir = tempfile::tempdir().unwrap();
            let ran = run(&cfg, &set, dir.path(), &RunOptions::default(), &mut Silent);
            SCALE.with(|s| s.set(1));
            ran.unwrap();
            let folder = RunFolder::new(dir.path());
            let inputs: OneRunReport = read_json(&folder.input_audit()).unwrap();
            let gradients: OneRunReport = read_json(&folder.audit()).unwrap();
            assert!(inputs.threat_model.starts_with("black-box") && inputs.canaries == 2000, "{inputs:?}");
            assert!(folder.input_audit_plot().is_file());
            reports.push((inputs, gradients));
        }
        let (inputs, gradients) = &reports[0];
        assert!(inputs.consistent && gradients.consistent, "{:?} {:?}", inputs.groups, gradients.groups);
        let (inputs, gradients) = &reports[1];
        assert!(gradients.consistent, "the gradient canaries do not see the examples' sum: {:?}", gradients.groups);
        assert!(!inputs.consistent, "{:?}", inputs.groups);
    }

    /// The null examples (zero-out's excluded canaries) are rows that never spend and are
    /// always active; the included canaries are charged as examples; every real example's
    /// budget is its own, canaries or not; and a run killed and resumed keeps its canaries (the
    /// seed file) and ends with the uninterrupted run's audit, byte for byte.
    #[test]
    fn input_canaries_are_examples_their_excluded_ones_null_and_a_resume_keeps_them() {
        let data = synthetic();
        let audit = "input_canaries = 40\n[release]\nactive_count = \"exact-non-private\"\nactive_count_every = 1\n";
        let cfg = config(data.path(), "", audit);
        let set = cfg.config().data.load().unwrap();
        let straight = tempfile::tempdir().unwrap();
        run(&cfg, &set, straight.path(), &RunOptions::default(), &mut Silent).unwrap();
        let folder = RunFolder::new(straight.path());
        let report: OneRunReport = read_json(&folder.input_audit()).unwrap();
        let nulls = report.included.iter().filter(|&&inc| !inc).count();
        assert!(nulls > 5 && nulls < 35, "{nulls} of 40 excluded");
        // 300 examples and 40 canary rows; at step 1 no one has spent a budget of 20 steps.
        let metrics = std::fs::read_to_string(folder.metrics_jsonl()).unwrap();
        let first: serde_json::Value = serde_json::from_str(metrics.lines().next().unwrap()).unwrap();
        assert_eq!(first["active_count_NON_PRIVATE"], 340.0, "{first}");
        let spent = crate::train::budget::spent(&folder, 7850, cfg.max_steps()).unwrap();
        assert_eq!(spent.spent.len(), 340);
        let budget = cfg.ledger_budget().unwrap();
        for (j, &inc) in report.included.iter().enumerate() {
            let s = spent.spent[300 + j];
            if inc {
                assert!(s > 0.0 && s <= budget * (1.0 + 1e-12), "canary {j} spent {s}");
            } else {
                assert_eq!(s, budget, "null example {j} is spent before the first step, never computed");
            }
        }
        // The examples' ledger is the run's own 300: their spending is reported without the canaries.
        let ledger = IndividualFilter::from_spent(budget, spent.spent.clone()).unwrap();
        assert_eq!(crate::train::budget::examples_only(&cfg, &ledger).unwrap().len(), 300);
        // Killed after 7 steps and resumed: the same canaries, the same audit.
        let resumed = tempfile::tempdir().unwrap();
        let first_part = RunOptions { stop_after: Some(7), ..Default::default() };
        let summary = run(&cfg, &set, resumed.path(), &first_part, &mut Silent).unwrap();
        assert!(!summary.finished);
        assert!(RunFolder::new(resumed.path()).input_canaries().is_file());
        run(&cfg, &set, resumed.path(), &RunOptions::default(), &mut Silent).unwrap();
        let read = |d: &std::path::Path| std::fs::read(RunFolder::new(d).input_audit()).unwrap();
        assert_eq!(read(resumed.path()), read(straight.path()));
    }

    /// Under replace-one neighbours every canary row holds a canary or its replacement (no null
    /// examples), the audit is consistent, and a folder whose seed is of another M is refused,
    /// naming the file.
    #[test]
    fn replace_one_canaries_have_replacements_and_a_seed_of_another_m_is_refused() {
        let data = synthetic();
        let cfg = config(data.path(), "neighbours = \"replace-one\"\n", "input_canaries = 400\n");
        let set = cfg.config().data.load().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let folder = RunFolder::new(dir.path());
        let (canaries, with) = InputCanaries::prepare(&cfg, &set, &folder).unwrap().unwrap();
        assert_eq!((canaries.null_count(), with.train.len(), with.appended()), (0, 700, Some((300, 400))));
        let excluded = (0..400).find(|&j| !canaries.included[j]).unwrap();
        let px = with.train.pixels();
        let row = &with.train.images[(300 + excluded) * px..(301 + excluded) * px];
        assert_ne!(row, &canaries.examples.images[excluded * px..(excluded + 1) * px], "its replacement");
        run(&cfg, &set, dir.path(), &RunOptions::default(), &mut Silent).unwrap();
        let report: OneRunReport = read_json(&folder.input_audit()).unwrap();
        assert!(report.consistent, "{:?}", report.groups);
        let other = tempfile::tempdir().unwrap();
        let twice = RunFolder::new(other.path());
        InputCanaries::prepare(&cfg, &set, &twice).unwrap();
        let more = config(data.path(), "neighbours = \"replace-one\"\n", "input_canaries = 500\n");
        let e = InputCanaries::prepare(&more, &set, &twice).unwrap_err().to_string();
        assert!(e.contains("input-canaries.json") && e.contains("400"), "{e}");
    }
}
