//! Training configuration: a TOML file (+ `--set key=value` overrides) deserialised with
//! unknown fields rejected, then validated into a [`ValidConfig`] before anything runs.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::accounting::{ApproxDp, Conversion, GaussianRelease, GdPlan, Zcdp, positive, probability};
use crate::clip::NonFinitePolicy;
use crate::data::Normalize;
use crate::error::{Error, Result};
use crate::model::{LayerSpec, ModelSpec};

/// Which algorithm to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Method {
    /// Private GD: exactly `privacy.steps` steps, clip C, noise σC (the baseline).
    Plain,
    /// Private GD with individual filtering (001 Algorithm 3): up to `train.max_steps` steps.
    Filtered,
    /// No clipping and no noise. NOT PRIVATE: for reference only.
    NonPrivate,
}

/// How the per-step number of active examples is released.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ActiveRelease {
    /// Not computed or written (default: the count is private data).
    #[default]
    None,
    /// A Gaussian noisy count (sensitivity 1), accounted in the run's total privacy.
    Noisy,
    /// The exact count, labelled NON-PRIVATE: for debugging only, never publish it.
    ExactNonPrivate,
}

/// When a filtered run stops.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum StopRule {
    /// Run `train.max_steps` steps and keep the last model (default).
    #[default]
    MaxSteps,
    /// The adaptive rule of 001 §5.1: from step B_norm/C² on, release the training accuracy
    /// every `stopping.every` steps as an accounted noisy count, and keep the model whose
    /// released accuracy was highest.
    BestTrainAccuracy,
}

/// The `[stopping]` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StoppingConfig {
    /// The rule.
    #[serde(default)]
    pub rule: StopRule,
    /// Steps between two training-accuracy queries.
    #[serde(default = "default_stop_every")]
    pub every: usize,
    /// Noise std of each noisy count of correctly classified training examples (sensitivity 1).
    #[serde(default = "default_stop_sigma")]
    pub sigma: f64,
    /// Stop early after this many queries without a new best (0 = query until `max_steps`).
    /// The privacy cost is that of every scheduled query either way.
    #[serde(default)]
    pub patience: usize,
}

impl Default for StoppingConfig {
    fn default() -> Self {
        Self { rule: StopRule::MaxSteps, every: default_stop_every(), sigma: default_stop_sigma(), patience: 0 }
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
    /// Pixel normalisation.
    #[serde(default = "default_norm")]
    pub normalize: Normalize,
}

/// The `[model]` section: a preset or explicit layers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    /// `opacus-cnn`, `mlp` or `logistic`.
    #[serde(default)]
    pub preset: Option<String>,
    /// Explicit layers (instead of a preset); the input is the dataset's image.
    #[serde(default)]
    pub layers: Option<Vec<LayerSpec>>,
    /// Seed of the parameter initialisation.
    #[serde(default)]
    pub init_seed: u64,
}

/// The `[privacy]` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrivacyConfig {
    /// `plain`, `filtered` or `non-private`.
    pub method: Method,
    /// Target ε (calibrates σ); give this or `sigma`.
    #[serde(default)]
    pub epsilon: Option<f64>,
    /// Target δ.
    pub delta: f64,
    /// Noise multiplier σ given directly (the ε is then reported).
    #[serde(default)]
    pub sigma: Option<f64>,
    /// Clip value C.
    pub clip: f64,
    /// Worst-case steps k: B_norm = k·C² (plain GD runs exactly k steps).
    pub steps: usize,
    /// Conversion used to calibrate and report ε.
    #[serde(default = "default_conversion")]
    pub conversion: Conversion,
    /// What to do with a NaN/Inf per-example gradient.
    #[serde(default)]
    pub on_nonfinite: NonFinitePolicy,
}

/// The `[train]` section.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainSettings {
    /// Learning rate η.
    pub lr: f64,
    /// k_max: steps of filtered GD (default: `privacy.steps`; plain GD always runs `privacy.steps`).
    #[serde(default)]
    pub max_steps: Option<usize>,
    /// Learning rate of the steps after `privacy.steps` (filtered GD's extra steps, paid for by the
    /// examples' leftover budgets); absent: `lr` throughout. The first `privacy.steps` steps, which
    /// are plain private GD, are unchanged by it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lr_after_k: Option<f64>,
    /// Examples per micro-batch whose per-example gradients are held at once
    /// (memory ≈ threads × chunk × parameters × 4 bytes).
    #[serde(default = "default_chunk")]
    pub chunk: usize,
    /// Fixed noise seed (reproducible; experiments and tests only). Absent: seeded from the OS.
    #[serde(default)]
    pub seed: Option<u64>,
    /// burn device for evaluation and records: `ndarray` (default) or `flex`.
    #[serde(default = "default_device")]
    pub device: String,
    /// Evaluate test accuracy every N steps (and at the end); 0 = only at the end.
    #[serde(default = "default_eval")]
    pub eval_every: usize,
    /// Write a checkpoint every N steps (the ledger is journaled every step regardless).
    #[serde(default = "default_ckpt")]
    pub checkpoint_every: usize,
    /// Worker threads (0 = all cores).
    #[serde(default)]
    pub threads: usize,
}

/// The `[release]` section: what else the run releases about the training data.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReleaseConfig {
    /// How the number of active examples is released.
    #[serde(default)]
    pub active_count: ActiveRelease,
    /// Noise std of the noisy active count (sensitivity 1).
    #[serde(default = "default_count_sigma")]
    pub active_count_sigma: f64,
    /// Release the active count every N steps.
    #[serde(default = "default_eval")]
    pub active_count_every: usize,
}

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
    /// Model.
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
}

fn default_dir() -> PathBuf {
    PathBuf::from("datasets/mnist")
}
fn default_norm() -> Normalize {
    Normalize::MNIST
}
fn default_conversion() -> Conversion {
    Conversion::GaussianExact
}
fn default_chunk() -> usize {
    16
}
fn default_device() -> String {
    "ndarray".into()
}
fn default_eval() -> usize {
    5
}
fn default_ckpt() -> usize {
    10
}
fn default_count_sigma() -> f64 {
    100.0
}
fn default_stop_every() -> usize {
    5
}
fn default_stop_sigma() -> f64 {
    500.0
}
fn default_name() -> String {
    "run".into()
}
fn default_data() -> DataConfig {
    DataConfig { dir: default_dir(), train_subset: 0, test_subset: 0, normalize: default_norm() }
}

impl TrainConfig {
    /// Reads a TOML file and applies `key=value` overrides (dotted keys; values parsed as TOML,
    /// or taken as strings).
    pub fn from_file(path: &Path, overrides: &[String]) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(Error::io(path))?;
        Self::from_toml(&text, overrides).map_err(|e| match e {
            Error::Config { field, message } => {
                Error::Config { field, message: format!("{message} (in {})", path.display()) }
            }
            other => other,
        })
    }

    /// Parses TOML text and applies overrides.
    pub fn from_toml(text: &str, overrides: &[String]) -> Result<Self> {
        let mut value: toml::Table = text
            .parse()
            .map_err(|e: toml::de::Error| Error::Config { field: "(file)".into(), message: e.to_string() })?;
        for o in overrides {
            set(&mut value, o)?;
        }
        if let Some(layers) = value.get("model").and_then(|m| m.get("layers")).and_then(|l| l.as_array()) {
            ModelSpec::check_layer_kinds(layers)?;
        }
        // Re-serialise so that deserialisation errors point at the offending key and line.
        let text =
            toml::to_string(&value).map_err(|e| Error::Config { field: "(file)".into(), message: e.to_string() })?;
        toml::from_str(&text).map_err(|e: toml::de::Error| {
            let line = e.span().map(|s| text[..s.start].lines().count().max(1)).unwrap_or(0);
            let key = text.lines().nth(line.saturating_sub(1)).unwrap_or("").trim().to_string();
            Error::Config {
                field: if key.is_empty() { "(file)".into() } else { key },
                message: e.message().to_string(),
            }
        })
    }

    /// Checks every field and resolves σ, the model and the step counts.
    pub fn validate(&self) -> Result<ValidConfig> {
        let p = &self.privacy;
        probability("delta", p.delta).map_err(|e| field("privacy.delta", e))?;
        positive("clip", p.clip).map_err(|e| field("privacy.clip", e))?;
        positive("lr", self.train.lr).map_err(|e| field("train.lr", e))?;
        if let Some(lr) = self.train.lr_after_k {
            positive("lr_after_k", lr).map_err(|e| field("train.lr_after_k", e))?;
        }
        if p.steps == 0 {
            return Err(cfg("privacy.steps", "must be >= 1 (B_norm = steps * clip^2)"));
        }
        if self.train.chunk == 0 {
            return Err(cfg("train.chunk", "must be >= 1"));
        }
        let max_steps = match (p.method, self.train.max_steps) {
            (Method::Plain, Some(m)) if m != p.steps => {
                return Err(cfg(
                    "train.max_steps",
                    "plain private GD runs exactly privacy.steps steps; remove max_steps or use method = \"filtered\"",
                ));
            }
            (Method::Filtered, Some(m)) if m < p.steps => {
                return Err(cfg(
                    "train.max_steps",
                    "must be >= privacy.steps, or no example ever uses its whole budget",
                ));
            }
            (_, Some(0)) => return Err(cfg("train.max_steps", "must be >= 1")),
            (_, m) => m.unwrap_or(p.steps),
        };
        if self.train.lr_after_k.is_some() && max_steps == p.steps {
            return Err(cfg(
                "train.lr_after_k",
                "this run has no steps after privacy.steps; remove lr_after_k or use method = \"filtered\" with a \
                 larger train.max_steps",
            ));
        }
        let releases = self.scheduled_releases(max_steps)?;
        let sigma = match (p.method, p.epsilon, p.sigma) {
            (Method::NonPrivate, _, _) => None,
            (_, Some(_), Some(_)) => {
                return Err(cfg("privacy.sigma", "give either privacy.epsilon or privacy.sigma, not both"));
            }
            (_, None, None) => return Err(cfg("privacy.epsilon", "give a target privacy.epsilon (or privacy.sigma)")),
            (_, None, Some(s)) => Some(positive("sigma", s).map_err(|e| field("privacy.sigma", e))?),
            (_, Some(eps), None) => {
                positive("epsilon", eps).map_err(|e| field("privacy.epsilon", e))?;
                Some(self.calibrate(eps, &releases)?)
            }
        };
        let model = match (&self.model.preset, &self.model.layers) {
            (Some(name), None) => ModelSpec::preset(name)?,
            (None, Some(layers)) => ModelSpec { input: [1, 28, 28], classes: 10, layers: layers.clone() },
            _ => return Err(cfg("model", "give exactly one of model.preset or model.layers")),
        };
        let device = crate::device::parse(&self.train.device)?;
        Ok(ValidConfig { config: self.clone(), sigma, max_steps, releases, model, device })
    }

    /// The noisy statistics this run releases about its training data, checked.
    fn scheduled_releases(&self, max_steps: usize) -> Result<Vec<ScheduledRelease>> {
        let mut out = Vec::new();
        let r = &self.release;
        if r.active_count == ActiveRelease::Noisy {
            positive("active_count_sigma", r.active_count_sigma).map_err(|e| field("release.active_count_sigma", e))?;
            if r.active_count_every == 0 {
                return Err(cfg("release.active_count_every", "must be >= 1"));
            }
            let first = r.active_count_every;
            out.push(ScheduledRelease {
                mechanism: ACTIVE_COUNT,
                sigma: r.active_count_sigma,
                first,
                every: first,
                last: max_steps,
            });
        }
        let s = &self.stopping;
        if s.rule == StopRule::BestTrainAccuracy {
            if self.privacy.method != Method::Filtered {
                return Err(cfg(
                    "stopping.rule",
                    "best-train-accuracy chooses among the steps after B_norm/C^2, so it needs method = \"filtered\" \
                     with train.max_steps > privacy.steps",
                ));
            }
            positive("sigma", s.sigma).map_err(|e| field("stopping.sigma", e))?;
            if s.every == 0 {
                return Err(cfg("stopping.every", "must be >= 1"));
            }
            out.push(ScheduledRelease {
                mechanism: TRAIN_ACCURACY,
                sigma: s.sigma,
                first: self.privacy.steps,
                every: s.every,
                last: max_steps,
            });
        }
        Ok(out)
    }

    /// σ for the whole run: training (k worst-case steps) plus every scheduled noisy count
    /// (std sⱼ, sensitivity 1) fit the target. Every piece is a Gaussian mechanism, so in
    /// Gaussian DP μ² = k/σ² + Σⱼ 1/sⱼ² (and ρ = μ²/2 for the zCDP conversions).
    fn calibrate(&self, eps: f64, releases: &[ScheduledRelease]) -> Result<f64> {
        let p = &self.privacy;
        let mut plan = GdPlan::new(p.steps as f64)?;
        for r in releases {
            plan = plan.with_release(GaussianRelease::new(r.sigma, 1.0, r.count_through(r.last) as u64)?);
        }
        plan.calibrate(ApproxDp::new(eps, p.delta)?, p.conversion).map_err(|e| match e {
            crate::accounting::AccountingError::BudgetExceeded { .. } => cfg(
                "release",
                "the scheduled noisy counts (active count, training accuracy) alone exceed the privacy budget; \
                 raise their sigma or release less often",
            ),
            other => other.into(),
        })
    }

    /// SHA-256 of everything that affects the privacy guarantee or the data it protects: a
    /// resumed run must match it.
    #[must_use]
    pub fn privacy_hash(&self) -> String {
        let relevant = (
            (&self.data.dir, self.data.train_subset, &self.privacy, &self.release, &self.train.max_steps, &self.model),
            &self.stopping,
        );
        let bytes = serde_json::to_vec(&relevant).expect("config serialises");
        Sha256::digest(&bytes).iter().map(|b| format!("{b:02x}")).collect()
    }
}

/// A checked configuration: the only thing the trainer accepts.
#[derive(Debug, Clone)]
pub struct ValidConfig {
    /// The configuration as given (with overrides applied).
    pub config: TrainConfig,
    /// The noise multiplier (None for non-private runs).
    pub sigma: Option<f64>,
    /// Steps to run.
    pub max_steps: usize,
    /// The noisy statistics released on a schedule (each accounted in the run's guarantee).
    pub releases: Vec<ScheduledRelease>,
    /// The architecture.
    pub model: ModelSpec,
    device: burn::tensor::Device,
}

impl ValidConfig {
    /// The learning rate of `step` (1-based): `train.lr` up to `privacy.steps`, then
    /// `train.lr_after_k` if given.
    #[must_use]
    pub fn lr_at(&self, step: usize) -> f64 {
        let t = &self.config.train;
        match t.lr_after_k {
            Some(lr) if step > self.config.privacy.steps => lr,
            _ => t.lr,
        }
    }

    /// The burn device chosen in the config.
    #[must_use]
    pub fn device(&self) -> burn::tensor::Device {
        self.device.clone()
    }
}

/// Mechanism name of the noisy active-set size.
pub const ACTIVE_COUNT: &str = "active-count";
/// Mechanism name of the noisy training accuracy (the stopping rule's query).
pub const TRAIN_ACCURACY: &str = "train-accuracy";

/// A statistic of the training data released at steps `first, first + every, … ≤ last` as a
/// Gaussian noisy count (sensitivity 1, noise std `sigma`): each release is 1/(2σ²)-zCDP.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ScheduledRelease {
    /// The session mechanism that answers it ([`ACTIVE_COUNT`] or [`TRAIN_ACCURACY`]).
    pub mechanism: &'static str,
    /// Noise std of each count.
    pub sigma: f64,
    /// First step with a release.
    pub first: usize,
    /// Steps between releases.
    pub every: usize,
    /// No release after this step.
    pub last: usize,
}

impl ScheduledRelease {
    /// Whether a release is due after `step`.
    #[must_use]
    pub fn due(&self, step: usize) -> bool {
        (self.first..=self.last).contains(&step) && (step - self.first).is_multiple_of(self.every)
    }

    /// Releases made in steps 1..=`step`.
    #[must_use]
    pub fn count_through(&self, step: usize) -> usize {
        if step < self.first || self.first > self.last {
            0
        } else {
            (step.min(self.last) - self.first) / self.every + 1
        }
    }

    /// The zCDP cost of one release, 1/(2σ²) (a Gaussian mechanism of sensitivity 1).
    #[must_use]
    pub fn cost(&self) -> Zcdp {
        Zcdp::new(0.5 / (self.sigma * self.sigma)).expect("validated sigma")
    }

    /// The zCDP ρ of every scheduled release together.
    #[must_use]
    pub fn total_rho(&self) -> f64 {
        self.count_through(self.last) as f64 * self.cost().rho()
    }
}

/// A validation error of an accounting parameter, attributed to config field `f`.
fn field(f: &str, e: crate::accounting::AccountingError) -> Error {
    Error::Config { field: f.into(), message: e.to_string() }
}

fn cfg(field: &str, message: &str) -> Error {
    Error::Config { field: field.into(), message: message.into() }
}

/// Applies one `a.b.c=value` override to a TOML table.
fn set(root: &mut toml::Table, assignment: &str) -> Result<()> {
    let (key, raw) = assignment
        .split_once('=')
        .ok_or_else(|| cfg("--set", "overrides look like key=value, e.g. privacy.epsilon=0.5"))?;
    let parts: Vec<&str> = key.trim().split('.').collect();
    let value: toml::Value = format!("v = {raw}")
        .parse::<toml::Table>()
        .ok()
        .and_then(|mut t| t.remove("v"))
        .unwrap_or_else(|| toml::Value::String(raw.trim().to_string()));
    let mut table = root;
    for part in &parts[..parts.len() - 1] {
        table = table
            .entry(part.to_string())
            .or_insert_with(|| toml::Value::Table(toml::Table::new()))
            .as_table_mut()
            .ok_or_else(|| cfg(key, "cannot set a field inside a non-table value"))?;
    }
    table.insert(parts[parts.len() - 1].to_string(), value);
    Ok(())
}
