//! Training configuration: a TOML file (plus overrides) deserialised with unknown fields
//! rejected ([`TrainConfig`], this file: the schema and a run's identity), then validated into a
//! [`ValidConfig`] — read-only, with σ calibrated and every release scheduled — before anything
//! runs. Reading and overrides (renamed fields, did-you-mean) are in `parse`, the checks and the
//! calibration in `validate`, the checked config in `valid`.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::accounting::{AccountingError, Conversion, Neighbours};
use crate::arch::{LayerSpec, Preset};
use crate::clip::NonFinitePolicy;
use crate::data::features::Features;
use crate::data::{Dataset, HoldOut, Normalize, Split};
use crate::device::DeviceKind;
use crate::error::{Error, Result};
use crate::noise::NoiseSampler;
pub use parse::{Override, RENAMED};
pub use resolved::Resolved;
pub use valid::ValidConfig;

mod parse;
mod resolved;
mod valid;
mod validate;

/// How the per-step number of active examples is released.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ActiveRelease {
    /// Not computed or written (the count is private data).
    #[default]
    None,
    /// A Gaussian noisy count (sensitivity 1), accounted in the run's total privacy.
    Noisy,
    /// The exact count: for debugging only. The run is then NOT private, and every file says so.
    ExactNonPrivate,
}

/// When a run stops and which model it returns. Absent from a config, it is
/// `best-train-accuracy` for a filtered run (the steps after k can only help then) and
/// `max-steps` otherwise; it is written out in the run's recorded config.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StopRule {
    /// Run `train.max_steps` steps and keep the last model.
    MaxSteps,
    /// The adaptive rule of [FZ21] §5.1: from step k on, release the training accuracy every
    /// `stopping.every` steps as an accounted noisy count, and keep the model whose released
    /// accuracy was highest.
    ///
    /// [FZ21]: https://arxiv.org/abs/2008.11193
    BestTrainAccuracy,
}

/// The `[stopping]` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoppingConfig {
    /// The rule (absent: see [`StopRule`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<StopRule>,
    /// Steps between two training-accuracy queries.
    #[serde(default = "default_stop_every")]
    pub every: usize,
    /// Noise std of each noisy count of correctly classified training examples (sensitivity 1).
    /// Absent: chosen so that these counts take [`AUTO_RELEASE_SHARE`] of the run's privacy
    /// budget (split with an absent `release.active_count_sigma`), from the privacy settings
    /// alone; the validated config holds the value.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sigma: Option<f64>,
    /// Stop early after this many queries without a new best (0 = query until `max_steps`).
    /// The privacy cost is that of every scheduled query either way.
    #[serde(default)]
    pub patience: usize,
}

impl Default for StoppingConfig {
    fn default() -> Self {
        Self { rule: None, every: default_stop_every(), sigma: None, patience: 0 }
    }
}

/// The `[data]` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataConfig {
    /// Folder with the four MNIST-format IDX files (gzip or raw).
    #[serde(default = "default_dir")]
    pub dir: PathBuf,
    /// Use only the first N training examples (0 = all).
    #[serde(default)]
    pub train_subset: usize,
    /// Use only the first N test examples (0 = all).
    #[serde(default)]
    pub test_subset: usize,
    /// Pixel normalisation; absent: the dataset's own (MNIST's, Fashion-MNIST's, or computed
    /// from the public test split of another dataset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub normalize: Option<Normalize>,
    /// Number of classes; absent: 1 + the largest label of the (public) test split.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub classes: Option<usize>,
    /// For CSV data (`train.csv`, `test.csv` in `dir`): the label column; absent: `label`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_column: Option<String>,
    /// For CSV data: columns that are neither features nor the label (an id, or the per-example
    /// budgets of `privacy.budgets.column`), skipped in both files wherever present.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ignore_columns: Vec<String>,
    /// A fixed, data-independent transform of every example before training (scattering
    /// features); absent: the examples as they are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub features: Option<Features>,
    /// Training examples held out of training (validation for a private hyperparameter
    /// search, [`crate::sweep::search`]); absent: the run trains on all of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hold_out: Option<HoldOut>,
}

impl Default for DataConfig {
    fn default() -> Self {
        default_data()
    }
}

impl DataConfig {
    /// Reads the dataset this section names: IDX files or CSV in `dir`, with its class count
    /// and label column, transformed into its features if the section names a transform (from
    /// the cache when it holds them, [`crate::data::features`]), without the training examples
    /// `hold_out` holds out.
    ///
    /// # Errors
    /// As [`Dataset::load_with_label`] and [`Dataset::with_features`].
    pub fn load(&self) -> Result<Dataset> {
        self.load_with_held_out().map(|(data, _)| data)
    }

    /// As [`load`](Self::load), with the examples held out of training by `hold_out` (`None`
    /// without it).
    ///
    /// # Errors
    /// As [`load`](Self::load) and [`Dataset::hold_out`].
    pub fn load_with_held_out(&self) -> Result<(Dataset, Option<Split>)> {
        let data = self.load_whole()?;
        match &self.hold_out {
            Some(h) => data.hold_out(self.train_subset, h).map(|(d, v)| (d, Some(v))),
            None => Ok((data, None)),
        }
    }

    /// Every training example, none held out.
    fn load_whole(&self) -> Result<Dataset> {
        let label = self.label_column.as_deref().unwrap_or(crate::data::csv::DEFAULT_LABEL_COLUMN);
        let data = Dataset::load_csv_skipping(&self.dir, self.classes, label, &self.ignore_columns)?;
        match &self.features {
            Some(f) => data.with_features(f, crate::data::features::default_cache_dir().as_deref()),
            None => Ok(data),
        }
    }
}

/// The `[model]` section: a preset or explicit layers. A library run of your own burn model
/// ([`crate::train::Run::train_model`]) needs neither, and may leave the section out.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// `opacus-cnn`, `mlp` or `logistic`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<Preset>,
    /// Explicit layers (instead of a preset); the input is the dataset's image.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layers: Option<Vec<LayerSpec>>,
    /// Seed of the parameter initialisation (public: θ₀ does not depend on the data).
    #[serde(default)]
    pub init_seed: u64,
}

/// How BandMF's banded correlation matrix is chosen (`privacy.factorization`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Factorization {
    /// The banded square root of the workload (Kalinin & Lampert 2024).
    #[default]
    Root,
    /// The unit-norm banded Toeplitz matrix of least error for the run's workload and steps
    /// ([`crate::train::method::factorization`]).
    Optimized,
    /// C = I: independent noise on the same partitions taken in turn, accounted as the other
    /// choices (a 1-banded C is b-banded, its columns of norm 1) — the control that tells what
    /// the correlation adds to the partitions' schedule.
    Identity,
}

impl Factorization {
    fn is_root(&self) -> bool {
        *self == Factorization::Root
    }
}

/// The `[privacy]` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrivacyConfig {
    /// `plain`, `filtered`, `sgd`, `sgd-filtered`, `bandmf`, `bandmf-filtered` or `non-private`.
    pub method: Method,
    /// DP-SGD's Poisson sampling rate q (each step includes each example with probability q;
    /// with `bandmf`, each example of the step's partition); the sampling methods only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sample_rate: Option<f64>,
    /// b, the bands of `bandmf`'s (or `bandmf-filtered`'s) correlation matrix and the number of
    /// partitions its examples are split into (each example takes part at most once in any b
    /// consecutive steps); those methods only. 1 with `bandmf` is DP-SGD.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bands: Option<usize>,
    /// How BandMF's banded matrix C is chosen: `root` (the default: the banded square root of the
    /// workload) or `optimized` (the unit-norm banded Toeplitz C of least error for the run's
    /// workload and steps); those methods only.
    #[serde(default, skip_serializing_if = "Factorization::is_root")]
    pub factorization: Factorization,
    /// Target ε (calibrates σ); give this or `sigma`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub epsilon: Option<f64>,
    /// Target δ.
    pub delta: f64,
    /// Noise multiplier σ given directly (the ε is then reported).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sigma: Option<f64>,
    /// Clip value C.
    pub clip: f64,
    /// k, the worst-case number of steps: B_norm = k·C² (plain GD runs exactly k steps; DP-SGD
    /// runs exactly k steps, each of which may include any example).
    /// Called `steps` before; the old name is still read (see [`RENAMED`]).
    pub worst_case_steps: usize,
    /// Conversion used to calibrate and report ε.
    #[serde(default = "default_conversion")]
    pub conversion: Conversion,
    /// The neighbouring relation the guarantee is stated for.
    #[serde(default)]
    pub neighbours: Neighbours,
    /// The noise distribution.
    #[serde(default)]
    pub noise: NoiseSampler,
    /// What to do with a NaN/Inf per-example gradient.
    #[serde(default)]
    pub on_nonfinite: NonFinitePolicy,
    /// Personalized privacy: a budget per training example, one of a few public tiers
    /// (`[privacy.budgets]`); absent: every example has the run's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub budgets: Option<BudgetsConfig>,
}

/// The `[privacy.budgets]` section: each training example's own privacy budget, as a target ε
/// at the run's δ, one of the tiers `epsilons` (public: `privacy.json` states each tier's
/// guarantee). Which example holds which tier comes from `file` (one ε per line, in the order
/// of the training examples), from a `column` of a CSV dataset, or is drawn at random in the
/// proportions `shares` from `seed`;
/// the assignment is input, treated as public by the guarantee and never published
/// ([`crate::train::tiers`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BudgetsConfig {
    /// The tiers' ε (at most 256). σ is calibrated for `privacy.epsilon` at
    /// `privacy.worst_case_steps`, as without tiers: usually the strictest tier's; a tier
    /// stricter than that gets a smaller budget, and its examples stop sooner.
    pub epsilons: Vec<f64>,
    /// A file with one ε per training example, one per line, each one of `epsilons` (an
    /// optional first line `epsilon` is a header).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<PathBuf>,
    /// Instead of a file, for CSV data: the column of `train.csv` holding each example's ε
    /// (it must be one of `data.ignore_columns`, so that it is not trained on as a feature).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub column: Option<String>,
    /// Instead of a file: each tier's share of the examples, assigned at random from `seed`
    /// (for experiments).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub shares: Option<Vec<f64>>,
    /// The seed of a random assignment (public: it does not depend on the data).
    #[serde(default)]
    pub seed: u64,
    /// Set by a private search (`dpgd sweep --select private`), not by hand: the ε each tier's
    /// budget is calibrated for in one candidate run, one per tier, each at most the tier's
    /// own, chosen so that the whole search keeps every tier's examples within their
    /// `epsilons` ([`crate::sweep::search`]); absent: each tier's own ε. The assignment is
    /// still read by `epsilons`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search_epsilons: Option<Vec<f64>>,
}

/// Which algorithm to run (`privacy.method`): the name; what each one does is its
/// [`TrainingMethod`](crate::train::method::TrainingMethod), registered in
/// [`Method::training`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    /// Private GD: exactly `privacy.worst_case_steps` steps, clip C, noise σC (the baseline).
    Plain,
    /// Private GD with individual filtering ([FZ21] Algorithm 3): up to `train.max_steps` steps.
    ///
    /// [FZ21]: https://arxiv.org/abs/2008.11193
    Filtered,
    /// DP-SGD ([`crate::train::sgd`]): `privacy.worst_case_steps` steps, each on a Poisson sample of
    /// rate `privacy.sample_rate`, clip C, noise σC, divided by the expected batch size;
    /// accounted by Rényi DP of the subsampled Gaussian.
    Sgd,
    /// DP-SGD with individual accounting ([`crate::accounting::individual_sgd`]): every step
    /// charges every example the Rényi DP of the step for its own clipped gradient (so every
    /// example's gradient is computed every step), and drops it when its budget — what
    /// `privacy.worst_case_steps` full steps cost — is spent; up to `train.max_steps` steps.
    SgdFiltered,
    /// BandMF ([`crate::train::method`]'s `band_mf`; Choquette-Choo, Ganesh, Steinke &
    /// Thakurta 2023): DP-SGD whose noise is correlated across steps by a b-banded matrix
    /// (`privacy.bands`), so that it partly cancels in the running sum the model follows; the
    /// examples in b fixed partitions taken in turn, each step a Poisson sample of rate
    /// `privacy.sample_rate` of its partition; `privacy.worst_case_steps` steps.
    #[serde(rename = "bandmf")]
    BandMf,
    /// BandMF with individual filtering (`band_mf_filtered`): `privacy.bands` partitions taken
    /// in turn, every active example of the step's partition computed (no sampling), each charged
    /// its own clipped gradient's squared norm and dropped when its budget — what
    /// `privacy.worst_case_steps` full participations cost — is spent; the noise correlated as
    /// BandMF's; up to `train.max_steps` steps.
    #[serde(rename = "bandmf-filtered")]
    BandMfFiltered,
    /// No clipping and no noise. NOT PRIVATE: for reference only.
    NonPrivate,
}

impl Method {
    /// Every method, in the order of its declaration (exhaustive on purpose: a new method must
    /// be placed in every test matrix, which match on it).
    pub const ALL: [Method; 7] = [
        Method::Plain,
        Method::Filtered,
        Method::Sgd,
        Method::SgdFiltered,
        Method::BandMf,
        Method::BandMfFiltered,
        Method::NonPrivate,
    ];

    /// The method's name in configs (`privacy.method`).
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            Method::Plain => "plain",
            Method::Filtered => "filtered",
            Method::Sgd => "sgd",
            Method::SgdFiltered => "sgd-filtered",
            Method::BandMf => "bandmf",
            Method::BandMfFiltered => "bandmf-filtered",
            Method::NonPrivate => "non-private",
        }
    }
}

/// Which per-example engine trains a config's model (`train.engine`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Engine {
    /// The fast CPU engine when every layer kind has a rule there, else the burn engine (the
    /// choice depends on the model only, never on the device or the data).
    #[default]
    Auto,
    /// The fast CPU engine ([`crate::per_example::Network`]); refused for a kind it lacks.
    Fast,
    /// The burn engine on `train.device` ([`crate::model::ConfigModel`]): any kind, any burn
    /// backend (a GPU through wgpu).
    Burn,
}

impl Engine {
    fn is_auto(&self) -> bool {
        *self == Engine::Auto
    }
}

/// The `[train]` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainSettings {
    /// Learning rate η.
    pub lr: f64,
    /// k_max: steps of filtered GD (default: `privacy.worst_case_steps`; plain GD always runs k).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_steps: Option<usize>,
    /// Learning rate of the steps after k (filtered GD's extra steps, paid for by the examples'
    /// leftover budgets); absent: `lr`, or, where `stopping.sigma` is absent too (the regime
    /// after k left to the tool), the method's default share of `lr` (a quarter for filtered
    /// GD), written into the validated config.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lr_after_k: Option<f64>,
    /// Heavy-ball momentum μ in [0, 1): the update is v ← μ·v + ĝ, θ ← θ − η·v with ĝ the noisy
    /// mean gradient (as PyTorch's SGD). Post-processing of the released noisy sums: it costs no
    /// privacy. 0 (the default): plain gradient steps.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub momentum: f64,
    /// Examples per micro-batch whose per-example gradients are held at once
    /// (memory ≈ threads × chunk × parameters × 4 bytes). Absent: the engine's own
    /// ([`crate::per_example::PerExample::preferred_chunk`]: 4 on the fast engine, 16 on the burn
    /// engine on the CPU, 2,048 on a GPU).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk: Option<usize>,
    /// Fixed noise seed (reproducible; experiments and tests only — the run is then NOT
    /// private). Absent: keyed from the OS.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// burn device of the burn engine, and of evaluation and records.
    #[serde(default)]
    pub device: DeviceKind,
    /// Which per-example engine trains the config's model (part of the run: a resume keeps it).
    #[serde(default, skip_serializing_if = "Engine::is_auto")]
    pub engine: Engine,
    /// Evaluate test accuracy every N steps (and at k and the end); 0 = only then.
    #[serde(default = "default_eval")]
    pub eval_every: usize,
    /// No longer used: the training state is written every step. Still read from old configs.
    #[serde(default, skip_serializing)]
    pub checkpoint_every: Option<usize>,
    /// Worker threads. 0 (the default): the engine's own
    /// ([`crate::per_example::PerExample::preferred_threads`]: 4 for the burn engine on a GPU),
    /// else one per core.
    #[serde(default)]
    pub threads: usize,
}

/// The `[release]` section: what else the run releases about the training data.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReleaseConfig {
    /// How the number of active examples is released.
    #[serde(default)]
    pub active_count: ActiveRelease,
    /// Noise std of the noisy active count (sensitivity 1). Absent: chosen as
    /// `stopping.sigma` is (see [`StoppingConfig::sigma`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_count_sigma: Option<f64>,
    /// Release the active count every N steps.
    #[serde(default = "default_eval")]
    pub active_count_every: usize,
}

impl Default for ReleaseConfig {
    fn default() -> Self {
        Self { active_count: ActiveRelease::None, active_count_sigma: None, active_count_every: default_eval() }
    }
}

/// The `[audit]` section: a one-run audit of the run itself ([`crate::train::canaries`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditConfig {
    /// M, the gradient canaries trained beside the examples, each included with probability ½
    /// (white-box: every noisy update; [`crate::train::canaries`]). 0: none.
    #[serde(default, skip_serializing_if = "is_none")]
    pub canaries: usize,
    /// M', the input canaries added to the training examples, each included with probability ½
    /// (black-box: the published model only; [`crate::train::input_canaries`]): inputs no real
    /// example resembles, with random labels, trained and charged as examples. 0: none.
    #[serde(default, skip_serializing_if = "is_none")]
    pub input_canaries: usize,
    /// The canaries' gradient norms, as fractions of the clip C, dealt in turn within each tier
    /// (default `[1.0]`: every canary's gradient is 2C, which the clip cuts to C). A group below
    /// 1 spends less than a full step's C² each step and is audited against the ε of what it
    /// spent — an empirical check of individual accounting (full-batch methods only).
    #[serde(default = "full_norm", skip_serializing_if = "is_full_norm")]
    pub gradient_norms: Vec<f64>,
    /// The confidence of every bound and of `consistent` (default 0.95): a run that leaks no
    /// more than it claims is found inconsistent with probability at most 1 − confidence. Raise
    /// it to audit many runs at once (a union bound).
    #[serde(default = "audit_confidence", skip_serializing_if = "is_audit_confidence")]
    pub confidence: f64,
}

fn is_none(m: &usize) -> bool {
    *m == 0
}

/// The default confidence of a run's own audit.
pub const AUDIT_CONFIDENCE: f64 = 0.95;

fn audit_confidence() -> f64 {
    AUDIT_CONFIDENCE
}

fn is_audit_confidence(c: &f64) -> bool {
    *c == AUDIT_CONFIDENCE
}

/// The most canary gradient norms an audit takes (each a group of its own in every tier).
pub const MAX_CANARY_NORMS: usize = 8;

/// serde's default for `audit.gradient_norms`: one group, gradients beyond the clip.
fn full_norm() -> Vec<f64> {
    vec![1.0]
}

fn is_full_norm(norms: &[f64]) -> bool {
    norms == [1.0]
}

/// The most canaries a run's audit takes (each is one coordinate of the noisy sum and a few
/// values of state).
pub const MAX_CANARIES: usize = 100_000;

/// A whole training configuration as written in TOML.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainConfig {
    /// Run name (the run folder is named after it).
    #[serde(default = "default_name")]
    pub name: String,
    /// Data.
    #[serde(default = "default_data")]
    pub data: DataConfig,
    /// Model (absent: no config model; see [`ModelConfig`]).
    #[serde(default)]
    pub model: ModelConfig,
    /// Privacy.
    pub privacy: PrivacyConfig,
    /// Optimisation and execution.
    pub train: TrainSettings,
    /// Extra releases.
    #[serde(default)]
    pub release: ReleaseConfig,
    /// Stopping rule.
    #[serde(default)]
    pub stopping: StoppingConfig,
    /// A one-run audit of this run (absent: none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audit: Option<AuditConfig>,
}

fn default_dir() -> PathBuf {
    PathBuf::from("datasets/mnist")
}
fn default_conversion() -> Conversion {
    Conversion::GaussianExact
}
fn is_zero(x: &f64) -> bool {
    *x == 0.0
}
fn default_eval() -> usize {
    5
}
fn default_stop_every() -> usize {
    5
}
/// The share of a run's privacy budget its noisy counts take when their noise is not given
/// (`stopping.sigma`, `release.active_count_sigma`): 10 %, split between the kinds that are
/// released. The rest is training's. A budget, not a precision: the counts' noise follows the
/// run's ε and schedule, never the data.
pub const AUTO_RELEASE_SHARE: f64 = 0.1;

/// The noise of counts when the run has no privacy budget to share (a non-private run, or
/// DP-SGD, whose accountant does not take counts).
const FALLBACK_COUNT_SIGMA: f64 = 100.0;
const FALLBACK_STOP_SIGMA: f64 = 500.0;

/// `x` > 0 rounded up to three significant digits (a count's noise, readable in the record).
fn round_up_3(x: f64) -> f64 {
    if !(x.is_finite() && x > 0.0) {
        return x;
    }
    let scale = 10f64.powi(2 - x.log10().floor() as i32);
    let up = (x * scale).ceil() / scale;
    if up >= x { up } else { up + 1.0 / scale }
}
fn default_name() -> String {
    "run".into()
}
fn default_data() -> DataConfig {
    DataConfig {
        dir: default_dir(),
        train_subset: 0,
        test_subset: 0,
        normalize: None,
        classes: None,
        label_column: None,
        ignore_columns: Vec::new(),
        features: None,
        hold_out: None,
    }
}

/// Worker threads a config may ask for: more is a typo, not a machine.
pub const MAX_THREADS: usize = 1024;

/// Steps a run may take: full-batch gradient descent for more than ten million steps is a typo.
pub const MAX_STEPS: usize = 10_000_000;

/// The fields a resumed run may change, dotted: they do not change what it computes (how many
/// threads and which device compute it, where its data lie — their contents are checked). Not
/// part of a run's identity; each resume records their values.
pub const RESUMABLE_FIELDS: &[&str] = &["train.threads", "train.device", "data.dir"];

/// [`RESUMABLE_FIELDS`] in words, for messages.
#[must_use]
pub fn resumable_fields() -> String {
    RESUMABLE_FIELDS.join(", ")
}

impl TrainConfig {
    /// The value of a dotted field (`"train.device"`) as JSON, `None` when absent.
    #[must_use]
    pub fn field_value(&self, dotted: &str) -> Option<serde_json::Value> {
        let (section, key) = dotted.split_once('.')?;
        serde_json::to_value(self).ok()?.get(section)?.get(key).cloned()
    }
}

impl TrainConfig {
    /// The stopping rule, its default resolved (see [`StopRule`]).
    #[must_use]
    pub fn stop_rule(&self) -> StopRule {
        self.stopping.rule.unwrap_or_else(|| self.privacy.method.training().default_stop_rule())
    }

    /// The config as a TOML value (every field explicit), for comparisons and records.
    ///
    /// # Errors
    /// Never for a deserialised config (every field serialises).
    pub fn to_value(&self) -> Result<toml::Value> {
        toml::Value::try_from(self).map_err(|e| Error::Serialise { what: "a config", message: e.to_string() })
    }

    /// What identifies a run: everything but where the data lie (their contents are checked
    /// separately) and how many threads and which burn device compute it. A resumed run must
    /// match it exactly.
    ///
    /// # Errors
    /// As [`to_value`](Self::to_value).
    pub fn identity(&self) -> Result<toml::Value> {
        let mut v = self.to_value()?;
        if let Some(t) = v.as_table_mut() {
            for (section, key) in RESUMABLE_FIELDS.iter().filter_map(|f| f.split_once('.')) {
                if let Some(s) = t.get_mut(section).and_then(toml::Value::as_table_mut) {
                    s.remove(key);
                }
            }
        }
        Ok(v)
    }
}

/// The largest f64 not above the decimal a config gave as `x`: the ε or δ a user types is a decimal
/// (TOML's `0.1` means 1/10, and the nearest f64 lies above it), and the shortest decimal that
/// reads back as `x` — Rust's `Display` — is the one typed (up to 17 significant digits).
/// Calibrating to it makes the run's ε at most the typed value exactly, not only at most its
/// nearest float. A value that is not such a decimal is kept.
pub(in crate::train) fn typed_down(x: f64) -> f64 {
    x.to_string().parse::<crate::accounting::decimal::Decimal>().map_or(x, |d| d.to_f64_down().min(x))
}

/// `field: old -> new` for every leaf where two serialised configs differ, by dotted field
/// name (`(unset)` for a field only one of them has): how a refused resume or a stale sweep
/// run says what changed.
pub(crate) fn field_differences(a: &serde_json::Value, b: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    differences_into("", a, b, &mut out);
    out
}

fn differences_into(prefix: &str, a: &serde_json::Value, b: &serde_json::Value, out: &mut Vec<String>) {
    use serde_json::Value;
    let shown = |v: Option<&Value>| v.map_or_else(|| "(unset)".to_string(), ToString::to_string);
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let f = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                match (x.get(k), y.get(k)) {
                    (Some(p), Some(q)) => differences_into(&f, p, q, out),
                    (p, q) => out.push(format!("{f}: {} -> {}", shown(p), shown(q))),
                }
            }
        }
        _ if a != b => out.push(format!("{prefix}: {a} -> {b}")),
        _ => {}
    }
}

/// A validation error of an accounting parameter, attributed to config field `f`.
pub(in crate::train) fn field(f: &str, e: AccountingError) -> Error {
    Error::config(f, e.to_string())
}

/// An error attributed to config field `f` (accounting errors lose their own parameter name).
pub(in crate::train) fn attribute(e: Error, f: &str) -> Error {
    match e {
        Error::Accounting(a) => field(f, a),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::{TrainConfig, typed_down};
    use crate::accounting::decimal::Decimal;
    use crate::error::Error;

    /// Each method's rule for `train.max_steps` against k = `privacy.worst_case_steps` (4):
    /// exactly k without a ledger that stops examples, at least k with one, anything for the
    /// non-private reference (as before the methods became an interface).
    #[test]
    fn max_steps_follow_the_method() {
        let check = |method: &str, max_steps: usize| {
            let rate = if method.starts_with("sgd") { "sample_rate = 0.1\n" } else { "" };
            let text = format!(
                "name = \"t\"\n[data]\ndir = \"d\"\n[model]\npreset = \"logistic\"\n[privacy]\nmethod = \"{method}\"\n\
                 {rate}epsilon = 1.0\ndelta = 1e-5\nclip = 1.0\nworst_case_steps = 4\n[train]\nlr = 1.0\nmax_steps = {max_steps}\n"
            );
            match TrainConfig::from_toml(&text, &[]).and_then(|c| c.validate()) {
                Ok(_) => Ok(()),
                Err(Error::Config { field, .. }) => Err(field),
                Err(e) => Err(e.to_string()),
            }
        };
        let refused = Err("train.max_steps".to_string());
        for (method, steps, want) in [
            ("plain", 4, Ok(())),
            ("plain", 6, refused.clone()),
            ("sgd", 6, refused.clone()),
            ("filtered", 6, Ok(())),
            ("filtered", 3, refused.clone()),
            ("sgd-filtered", 3, refused.clone()),
            ("non-private", 6, Ok(())),
            ("non-private", 2, Ok(())),
        ] {
            assert_eq!(check(method, steps), want, "{method}, max_steps = {steps}");
        }
    }

    fn filtered(rest: &str) -> TrainConfig {
        with_method("filtered", 100, rest)
    }

    fn with_method(method: &str, max_steps: usize, rest: &str) -> TrainConfig {
        let text = format!(
            "name = \"t\"\n[data]\ndir = \"d\"\n[model]\npreset = \"logistic\"\n[privacy]\nmethod = \"{method}\"\n\
             delta = 1e-5\nclip = 1.0\nworst_case_steps = 50\n{rest}\n[train]\nlr = 2.0\nmax_steps = {max_steps}\n\
             [release]\nactive_count = \"noisy\"\nactive_count_every = 5\n"
        );
        TrainConfig::from_toml(&text, &[]).unwrap()
    }

    /// The counts' noise, when not given, follows the run's budget rather than a constant sized
    /// for 60,000 examples: at ε = 1 the stopping rule's σ is a few dozen (it was 500, a third of
    /// a 1,400-example set), the counts together take a tenth of the budget (μ² shares), and
    /// the validated σ still meets ε.
    #[test]
    fn absent_count_noise_takes_a_tenth_of_the_budget() {
        let valid = filtered("epsilon = 1.0").validate().unwrap();
        let c = valid.config();
        let (stop, count) = (c.stopping.sigma.unwrap(), c.release.active_count_sigma.unwrap());
        assert!(stop < 100.0 && count < 100.0, "stopping.sigma {stop}, active_count_sigma {count}");
        let sigma = valid.sigma().unwrap();
        let counts = 11.0 / (stop * stop) + 20.0 / (count * count);
        let share = counts / (50.0 / (sigma * sigma) + counts);
        assert!((0.09..=0.1).contains(&share), "the counts take {share} of the budget");
        let eps = valid.epsilon().unwrap();
        assert!(eps <= 1.0 && eps > 0.999, "epsilon {eps}");
        // Both kinds get half the counts' share each, and a larger ε means less noise.
        assert!((11.0 / (stop * stop) / counts - 0.5).abs() < 0.01);
        let looser = filtered("epsilon = 4.0").validate().unwrap();
        assert!(looser.config().stopping.sigma.unwrap() < stop / 3.0);
    }

    /// A given noise is kept, a given σ is the start (no recalibration), and the learning rate
    /// after k defaults to a quarter for filtered GD only.
    #[test]
    fn given_settings_are_kept_and_the_rest_resolved() {
        let mut given = filtered("epsilon = 1.0");
        given.stopping.sigma = Some(321.0);
        given.train.lr_after_k = Some(0.7);
        let valid = given.validate().unwrap();
        assert_eq!(valid.config().stopping.sigma, Some(321.0));
        assert_eq!(valid.config().train.lr_after_k, Some(0.7));
        let auto = filtered("epsilon = 1.0").validate().unwrap();
        assert_eq!(auto.config().train.lr_after_k, Some(0.5));
        let by_sigma = filtered("sigma = 3.0").validate().unwrap();
        assert_eq!(by_sigma.sigma(), Some(3.0));
        let stop = by_sigma.config().stopping.sigma.unwrap();
        // σ_r = σ·√(m·0.9/(0.05·k)) with m = 11 stopping queries, k = 50, rounded up.
        let want = 3.0 * (11.0 * 0.9 / (0.05 * 50.0f64)).sqrt();
        assert!(stop >= want && stop < want * 1.01, "{stop} against {want}");
        let plain = with_method("plain", 50, "epsilon = 1.0").validate().unwrap();
        assert_eq!(plain.config().train.lr_after_k, None);
        // A config that gives the stopping noise keeps train.lr throughout (as configs made
        // before this default did).
        let mut pinned = filtered("epsilon = 1.0");
        pinned.stopping.sigma = Some(500.0);
        assert_eq!(pinned.validate().unwrap().config().train.lr_after_k, None);
    }

    #[test]
    fn noise_is_rounded_up_to_three_digits() {
        for (x, want) in [(57.71, 57.8), (57.8, 57.8), (0.012341, 0.0124), (1234.5, 1240.0), (100.0, 100.0)] {
            let got = super::round_up_3(x);
            assert!(got >= x && (got - want).abs() < want * 1e-9, "{x} -> {got}, want {want}");
        }
    }

    /// A typed ε of 0.1 is calibrated to at most 1/10 exactly. TOML gives the f64
    /// nearest 0.1, which lies above 1/10; the target is the float just below it. The same for
    /// δ = 1e-5, whose nearest float is above 10⁻⁵.
    #[test]
    fn typed_budgets_are_read_down_to_the_decimal() {
        let tenth: Decimal = "0.1".parse().unwrap();
        assert!(0.1f64 > tenth.to_f64_down(), "the float TOML gives for 0.1 is above 1/10");
        assert_eq!(typed_down(0.1), tenth.to_f64_down());
        assert_eq!(typed_down(0.3), "0.3".parse::<Decimal>().unwrap().to_f64_down());
        for exact in [1.0, 0.5, 2.0, 0.25] {
            assert_eq!(typed_down(exact), exact, "a decimal a float holds exactly is kept");
        }
        assert!(typed_down(1e300) <= 1e300 && typed_down(1e300) > 0.0);
        let delta: Decimal = "0.00001".parse().unwrap();
        assert!(1e-5 > delta.to_f64_down(), "the float TOML gives for 1e-5 is above 10⁻⁵");
        assert_eq!(typed_down(1e-5), delta.to_f64_down());
    }
}
