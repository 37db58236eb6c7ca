//! Checking a config: every field on its own, then what depends on several (the steps, the
//! releases' schedule, σ calibrated to ε, the model and its engine), every problem at once.

use std::sync::Arc;

use super::{
    AUTO_RELEASE_SHARE, ActiveRelease, Engine, FALLBACK_COUNT_SIGMA, FALLBACK_STOP_SIGMA, MAX_STEPS, MAX_THREADS,
    Method, Resolved, StopRule, TrainConfig, ValidConfig, attribute, field, round_up_3,
};
use crate::accounting::{Neighbours, positive, probability};
use crate::arch::{LayerSpec, ModelSpec};
use crate::data::Channels;
use crate::device::DeviceKind;
use crate::error::{Error, Result};
use crate::per_example::{Layer, Network, ShapeError};
use crate::train::method::RunAccounting;
use crate::train::releases::{ReleaseKind, ScheduledRelease};

impl TrainConfig {
    /// Checks every field and resolves σ, the model and the schedule.
    ///
    /// # Errors
    /// The first invalid field, named, with what a valid value looks like.
    pub fn validate(&self) -> Result<ValidConfig> {
        // Every problem at once: the independent checks, then those that build on them with a
        // stand-in for what failed (so a config edited for another method lists all it needs).
        let mut problems: Vec<Error> = self.field_checks().into_iter().filter_map(Result::err).collect();
        let k = self.privacy.worst_case_steps;
        let max_steps = self.max_steps().unwrap_or_else(|e| {
            problems.push(e);
            k.clamp(1, MAX_STEPS)
        });
        let (resolved, notes) =
            if problems.is_empty() { self.with_resolved_defaults(max_steps) } else { (self.clone(), Vec::new()) };
        let releases = resolved.scheduled_releases(max_steps).unwrap_or_else(|e| {
            problems.push(e);
            Vec::new()
        });
        let privacy = resolved.calibrate(&releases).unwrap_or_else(|e| {
            problems.push(e);
            None
        });
        // A preset fits any data large enough (checked here on MNIST's shape); explicit layers
        // may depend on the data's shape (channels for group_norm, a pooling window the size of
        // the image), so a shape that does not fit MNIST's is only an error once the data are
        // loaded and their shape is known (`model_for`).
        if let Some(Err(e)) = self.model.layers.as_ref().map(|layers| self.check_engine(layers)) {
            problems.push(e);
        }
        let model = match (&self.model.preset, &self.model.layers) {
            (None, None) => None,
            (Some(_), _) => self.model_spec().map_err(|e| problems.push(e)).ok(),
            (None, Some(_)) => self.model_spec().ok(),
        };
        match problems.len() {
            0 => {
                let stop_rule = resolved.stop_rule();
                let given = self.clone();
                let facts = Resolved { config: resolved, given, notes, max_steps, stop_rule, releases, model };
                Ok(ValidConfig { resolved: facts, privacy })
            }
            1 => Err(problems.remove(0)),
            _ => Err(Error::ConfigProblems(problems)),
        }
    }

    /// This config with its defaults that follow the privacy settings resolved: the method's
    /// learning rate after k ([`super::method::TrainingMethod::default_lr_after_k`]), and the
    /// noise of its noisy counts where it is not given: the auto
    /// kinds together take [`AUTO_RELEASE_SHARE`] of the budget, split evenly, training the
    /// rest. Count r (m_r releases of std σ_r, sensitivity 1) costs m_r/σ_r² against training's
    /// k·s²/σ² (s = 2 under replace-one) in μ² (Gaussian DP) and in 2ρ (zCDP) alike, so
    /// σ_r = σ·√(m_r·(1 − share)/(share_r·k·s²)). With a target ε, σ depends on the counts'
    /// cost: a few rounds of calibration settle it, and the counts' σ_r are then fixed (rounded
    /// up to three significant digits), so the validated config's σ meets ε exactly. Where the
    /// privacy settings cannot be planned, the counts keep their fallback noise and planning
    /// the run reports the problem; where the counts' noise could not follow the budget for
    /// another reason (a tier of personalized budgets too strict for it), they keep their
    /// fallback noise, and the note returned says so (the trainer shows it).
    fn with_resolved_defaults(&self, max_steps: usize) -> (TrainConfig, Vec<String>) {
        let mut out = self.clone();
        let k = self.privacy.worst_case_steps;
        // The stopping rule left to the tool: its noise follows the budget (below).
        let stop = self.stop_rule() == StopRule::BestTrainAccuracy && self.stopping.sigma.is_none();
        // The method's learning rate after k, where it has one, there are steps after k, and
        // the config leaves the regime after k to the tool (the stopping rule's noise not
        // given): the two were measured together. A config that gives stopping.sigma keeps
        // train.lr throughout, as before (the committed studies and configs/ were made so).
        if let (None, Some(share), true, true) =
            (self.train.lr_after_k, self.privacy.method.training().default_lr_after_k(), max_steps > k, stop)
        {
            out.train.lr_after_k = Some(self.train.lr * share);
        }
        let count = self.release.active_count == ActiveRelease::Noisy && self.release.active_count_sigma.is_none();
        let method = self.privacy.method.training();
        let mut notes = Vec::new();
        if (stop || count) && method.is_private() && !method.samples() {
            let unresolved = out.clone();
            out = match out.resolve_count_noise(max_steps, stop, count) {
                Ok(()) => out,
                Err(e) => {
                    notes.push(format!(
                        "the noise of the counts left to the tool (release.active_count_sigma, stopping.sigma) could \
                         not follow the privacy budget ({e}), so they keep the fixed fallback noise \
                         (active count std {FALLBACK_COUNT_SIGMA}, stopping std {FALLBACK_STOP_SIGMA}), accounted as \
                         any given noise: give them in the config to choose"
                    ));
                    unresolved
                }
            };
        }
        // Noise the run does not resolve (counts it does not release, or no budget to share)
        // is recorded as the fixed values configs of earlier versions recorded, so that a run
        // made then and its config today are still the same run.
        out.stopping.sigma.get_or_insert(FALLBACK_STOP_SIGMA);
        out.release.active_count_sigma.get_or_insert(FALLBACK_COUNT_SIGMA);
        (out, notes)
    }

    /// Sets the noise of the auto counts (`stop`: the stopping rule's, `count`: the active
    /// count's) as [`Self::with_resolved_defaults`] describes.
    fn resolve_count_noise(&mut self, max_steps: usize, stop: bool, count: bool) -> Result<()> {
        let k = self.privacy.worst_case_steps;
        let every = self.release.active_count_every.max(1);
        let s2 = if self.privacy.neighbours == Neighbours::ReplaceOne { 4.0 } else { 1.0 };
        let share = AUTO_RELEASE_SHARE / f64::from(u8::from(stop) + u8::from(count));
        let stops = if max_steps >= k { (max_steps - k) / self.stopping.every.max(1) + 1 } else { 0 };
        let ratio = |m: usize| (m as f64 * (1.0 - AUTO_RELEASE_SHARE) / (share * k as f64 * s2)).sqrt();
        let set = |out: &mut TrainConfig, sigma: f64| {
            if stop {
                out.stopping.sigma = Some(round_up_3(sigma * ratio(stops)));
            }
            if count {
                out.release.active_count_sigma = Some(round_up_3(sigma * ratio(max_steps / every)));
            }
        };
        let mut sigma = match self.privacy.sigma {
            Some(given) => given,
            // Training's σ with counts that cost next to nothing, to start from.
            None => {
                set(self, 1e12);
                self.calibrated_sigma(&self.scheduled_releases(max_steps)?)?
            }
        };
        for round in 0..4 {
            set(self, sigma);
            if self.privacy.sigma.is_some() || round == 3 {
                break;
            }
            sigma = self.calibrated_sigma(&self.scheduled_releases(max_steps)?)?;
        }
        Ok(())
    }

    /// `[audit]`: a private method, and a number of canaries the audit can bound anything with.
    fn check_audit(&self, a: &super::AuditConfig) -> Result<()> {
        if !self.privacy.method.training().is_private() {
            return Err(Error::config(
                "audit.canaries",
                "privacy.method = \"non-private\": a non-private run has no guarantee to audit; remove [audit] or \
                 choose a private method",
            ));
        }
        if !(1e-30..=1e30).contains(&self.privacy.clip) {
            return Err(Error::config(
                "audit.canaries",
                format!(
                    "privacy.clip = {}: an audit's canary gradients (2C in f32) need a clip in 1e-30 to 1e30",
                    self.privacy.clip
                ),
            ));
        }
        self.check_canary_norms(&a.gradient_norms)?;
        if !(0.5..=1.0 - 1e-12).contains(&a.confidence) {
            return Err(Error::config(
                "audit.confidence",
                format!("{}: give a confidence in [0.5, 1), e.g. 0.95 (or 0.999 to audit many runs)", a.confidence),
            ));
        }
        let tiers = self.privacy.budgets.as_ref().map_or(1, |b| b.epsilons.len().max(1));
        if a.canaries == 0 && a.input_canaries == 0 {
            return Err(Error::config(
                "audit.canaries",
                "no canaries: give canaries = M (gradient canaries, white-box) or input_canaries = M (input canaries, \
                 black-box), or both; 1,000 is a good start",
            ));
        }
        if a.input_canaries > 0 && !(2 * tiers..=super::MAX_CANARIES).contains(&a.input_canaries) {
            return Err(Error::config(
                "audit.input_canaries",
                format!(
                    "{} input canaries: give between {} (two per tier) and {} (1,000 is a good start), or 0 for none",
                    a.input_canaries,
                    2 * tiers,
                    super::MAX_CANARIES
                ),
            ));
        }
        if a.canaries == 0 {
            return Ok(());
        }
        // At least two canaries in each group (the audit guesses within a tier and norm).
        let groups = tiers * a.gradient_norms.len();
        let least = 2 * groups;
        if !(least..=super::MAX_CANARIES).contains(&a.canaries) {
            return Err(Error::config(
                "audit.canaries",
                format!(
                    "{} canaries: give between {least} (two per tier and gradient norm) and {} (1,000 is a good \
                     start), or 0 for none",
                    a.canaries,
                    super::MAX_CANARIES
                ),
            ));
        }
        Ok(())
    }

    /// `audit.gradient_norms`: 1 to [`super::MAX_CANARY_NORMS`] distinct fractions of the clip
    /// in (0, 1]; below 1 only where the ledger charges a full step's gradient as such.
    fn check_canary_norms(&self, norms: &[f64]) -> Result<()> {
        let bad = |why: String| Error::config("audit.gradient_norms", why);
        if norms.is_empty() || norms.len() > super::MAX_CANARY_NORMS {
            return Err(bad(format!(
                "{} norms: give 1 to {} fractions of the clip, e.g. [1.0, 0.5, 0.25]",
                norms.len(),
                super::MAX_CANARY_NORMS
            )));
        }
        if let Some(x) = norms.iter().find(|x| !(**x > 0.0 && **x <= 1.0)) {
            return Err(bad(format!("{x}: each norm is a fraction of the clip in (0, 1], e.g. [1.0, 0.5, 0.25]")));
        }
        if (1..norms.len()).any(|i| norms[..i].contains(&norms[i])) {
            return Err(bad(format!("{norms:?} names a norm twice: give each once")));
        }
        let full_batch = matches!(
            self.privacy.method,
            super::Method::Plain | super::Method::Filtered | super::Method::BandMfFiltered
        );
        if norms.iter().any(|&x| x < 1.0) && !full_batch {
            return Err(bad(format!(
                "privacy.method = \"{}\": a canary group below the clip is audited against the epsilon of what it \
                 spent, which is built for the methods accounted as full-batch GD (plain, filtered, bandmf-filtered) only; \
                 use [1.0] with this method",
                self.privacy.method.name()
            )));
        }
        Ok(())
    }

    /// The checks of single fields, each on its own.
    fn field_checks(&self) -> Vec<Result<()>> {
        let (p, t) = (&self.privacy, &self.train);
        vec![
            probability("delta", p.delta).map(|_| ()).map_err(|e| field("privacy.delta", e)),
            positive("clip", p.clip).map_err(|e| field("privacy.clip", e)).and_then(|_| {
                // Far inside f64's range: C² and k·C² stay normal, and the exact sum grid exists.
                if (1e-100..=1e100).contains(&p.clip) {
                    Ok(())
                } else {
                    Err(Error::config("privacy.clip", format!("{} is outside 1e-100 to 1e100", p.clip)))
                }
            }),
            positive("lr", t.lr).map(|_| ()).map_err(|e| field("train.lr", e)),
            self.validate_data(),
            if (0.0..1.0).contains(&t.momentum) {
                Ok(())
            } else {
                Err(Error::config("train.momentum", format!("{} is not in [0, 1): use 0.9, or 0 for none", t.momentum)))
            },
            t.lr_after_k
                .map_or(Ok(()), |lr| positive("lr_after_k", lr).map(|_| ()).map_err(|e| field("train.lr_after_k", e))),
            if p.worst_case_steps == 0 {
                Err(Error::config("privacy.worst_case_steps", "must be >= 1 (B_norm = worst_case_steps * clip^2)"))
            } else {
                Ok(())
            },
            if t.chunk == Some(0) { Err(Error::config("train.chunk", "must be >= 1")) } else { Ok(()) },
            if t.threads > MAX_THREADS {
                Err(Error::config(
                    "train.threads",
                    format!("{} threads is more than {MAX_THREADS}; use 0 for all cores", t.threads),
                ))
            } else {
                Ok(())
            },
            // Its backend must be compiled in: found now, not when the finished run is saved.
            t.device.device().map(|_| ()),
            p.budgets.as_ref().map_or(Ok(()), |b| b.check(p.method, &self.data)),
            self.audit.as_ref().map_or(Ok(()), |a| self.check_audit(a)),
            match p.bands {
                Some(b) if !matches!(p.method, Method::BandMf | Method::BandMfFiltered) => Err(Error::config(
                    "privacy.bands",
                    format!(
                        "{b}: only method = \"bandmf\" or \"bandmf-filtered\" correlates its noise in bands; remove \
                         bands or use one of them"
                    ),
                )),
                _ => Ok(()),
            },
            match p.factorization {
                f @ (super::Factorization::Optimized | super::Factorization::Identity)
                    if !matches!(p.method, Method::BandMf | Method::BandMfFiltered) =>
                {
                    Err(Error::config(
                        "privacy.factorization",
                        format!(
                            "{}: only method = \"bandmf\" or \"bandmf-filtered\" has a correlation matrix to \
                             choose; remove factorization or use one of them",
                            serde_json::to_string(&f).unwrap_or_default()
                        ),
                    ))
                }
                _ => Ok(()),
            },
            match (p.sample_rate, p.method.training().samples()) {
                (Some(q), false) => Err(Error::config(
                    "privacy.sample_rate",
                    format!(
                        "{q}: only method = {} samples; remove sample_rate or use one of them",
                        Method::those_that(|m| m.samples())
                    ),
                )),
                _ => Ok(()),
            },
        ]
    }

    fn validate_data(&self) -> Result<()> {
        if let Some(c) = self.data.classes.filter(|c| !(2..=256).contains(c)) {
            return Err(Error::config("data.classes", format!("{c}: labels are bytes, so 2 to 256 classes")));
        }
        // The channel count is the data's, checked when it is loaded; here every value.
        let Some(n) = &self.data.normalize else { return Ok(()) };
        let channels = match (&n.mean, &n.std) {
            (Channels::Each(v), _) | (_, Channels::Each(v)) => v.len(),
            _ => 1,
        };
        n.check(channels)
    }

    fn max_steps(&self) -> Result<usize> {
        let k = self.privacy.worst_case_steps;
        let method = self.privacy.method.training();
        // Private methods without a ledger that stops examples run exactly k steps; with one,
        // at least k; the non-private reference, any number.
        let m = match (method.is_private(), method.drops_exhausted_examples(), self.train.max_steps) {
            (_, _, Some(0)) => return Err(Error::config("train.max_steps", "must be >= 1")),
            (true, false, Some(m)) if m != k => {
                return Err(Error::config(
                    "train.max_steps",
                    format!(
                        "method = \"{}\" runs exactly privacy.worst_case_steps steps; remove max_steps (or use method \
                         = {})",
                        self.privacy.method.name(),
                        Method::those_that(|m| m.is_private() && m.drops_exhausted_examples())
                    ),
                ));
            }
            (_, true, Some(m)) if m < k => {
                return Err(Error::config(
                    "train.max_steps",
                    "must be >= privacy.worst_case_steps, or no example ever uses its whole budget",
                ));
            }
            (_, _, m) => m.unwrap_or(k),
        };
        if m > MAX_STEPS {
            let field = if self.train.max_steps.is_some() { "train.max_steps" } else { "privacy.worst_case_steps" };
            return Err(Error::config(field, format!("{m} steps is more than {MAX_STEPS}")));
        }
        if self.train.lr_after_k.is_some() && m == k {
            return Err(Error::config(
                "train.lr_after_k",
                format!(
                    "this run has no steps after privacy.worst_case_steps; remove lr_after_k or use method = {} with a \
                     larger train.max_steps",
                    Method::those_that(|m| m.is_private() && m.drops_exhausted_examples())
                ),
            ));
        }
        Ok(m)
    }

    /// The noisy statistics this run releases about its training data, checked.
    fn scheduled_releases(&self, max_steps: usize) -> Result<Vec<ScheduledRelease>> {
        let mut out = Vec::new();
        let r = &self.release;
        if r.active_count != ActiveRelease::None && r.active_count_every == 0 {
            return Err(Error::config("release.active_count_every", "must be >= 1"));
        }
        if r.active_count == ActiveRelease::Noisy {
            let every = r.active_count_every;
            let release = ScheduledRelease {
                kind: ReleaseKind::ActiveCount,
                sigma: r.active_count_sigma.unwrap_or(FALLBACK_COUNT_SIGMA),
                first: every,
                every,
                last: max_steps,
            };
            release.through(max_steps).map_err(|e| attribute(e, "release.active_count_sigma"))?;
            out.push(release);
        }
        let s = &self.stopping;
        if self.stop_rule() == StopRule::BestTrainAccuracy {
            if !self.privacy.method.training().chooses_best_step() {
                return Err(Error::config(
                    "stopping.rule",
                    format!(
                        "best-train-accuracy chooses among the steps from B_norm/C^2 on, so it needs method = {}",
                        Method::those_that(|m| m.chooses_best_step())
                    ),
                ));
            }
            if s.every == 0 {
                return Err(Error::config("stopping.every", "must be >= 1"));
            }
            let k = self.privacy.worst_case_steps;
            let release = ScheduledRelease {
                kind: ReleaseKind::TrainAccuracy,
                sigma: s.sigma.unwrap_or(FALLBACK_STOP_SIGMA),
                first: k,
                every: s.every,
                last: max_steps,
            };
            release.through(max_steps).map_err(|e| attribute(e, "stopping.sigma"))?;
            out.push(release);
        }
        Ok(out)
    }

    /// σ and everything the guarantee rests on, as the method calibrates it (`None` for a
    /// method without a guarantee).
    fn calibrate(&self, releases: &[ScheduledRelease]) -> Result<Option<Arc<dyn RunAccounting>>> {
        self.privacy.method.training().calibrate(self, releases)
    }

    /// σ of a private method, calibrated with `releases`.
    fn calibrated_sigma(&self, releases: &[ScheduledRelease]) -> Result<f64> {
        let accounting = self.calibrate(releases)?;
        accounting.map(|a| a.sigma()).ok_or_else(|| Error::State("a private method without accounting".into()))
    }

    /// The model checked before the data are read: for MNIST-shaped examples and
    /// `data.classes` (10 if absent); the trainer resolves it again for the data's own shape
    /// ([`ValidConfig::model_for`]).
    fn model_spec(&self) -> Result<ModelSpec> {
        // Before the data are read, explicit layers say their own class count.
        let last_width = self.model.layers.as_ref().and_then(|l| match l.last() {
            Some(LayerSpec::Linear(l)) => Some(l.out_features),
            _ => None,
        });
        self.model_spec_for(MNIST_SHAPE, self.data.classes.or(last_width).unwrap_or(10))
    }

    /// The engine that trains `spec` under this config ([`Engine::Fast`] or [`Engine::Burn`]):
    /// `train.engine`, with `auto` resolved by the model's layer kinds alone.
    #[must_use]
    pub fn engine_for(&self, spec: &ModelSpec) -> Engine {
        self.engine_of(&spec.layers)
    }

    fn engine_of(&self, layers: &[LayerSpec]) -> Engine {
        match self.train.engine {
            Engine::Auto if layers.iter().all(Layer::supports) => Engine::Fast,
            Engine::Auto => Engine::Burn,
            chosen => chosen,
        }
    }

    /// `train.engine` and `train.device` against a model's `layers` (their kinds alone, not
    /// the data's shape): the fast engine has every layer's kind, and computes on the CPU.
    fn check_engine(&self, layers: &[LayerSpec]) -> Result<()> {
        if self.train.engine == Engine::Fast
            && let Some((i, l)) = layers.iter().enumerate().find(|(_, l)| !Layer::supports(l))
        {
            return Err(Error::config(
                "train.engine",
                format!(
                    "\"fast\": layer {i} (`{}`) has no rule in the fast engine; use \"auto\" or \"burn\"",
                    l.name()
                ),
            ));
        }
        if self.engine_of(layers) == Engine::Fast && self.train.device == DeviceKind::Wgpu {
            return Err(Error::config(
                "train.device",
                "\"wgpu\": this model trains on the fast engine, which computes on the CPU; set train.engine = \"burn\" \
                 to train it on wgpu, or use device = \"flex\"",
            ));
        }
        Ok(())
    }

    /// The model for examples of `shape` (`[channels, height, width]`) and `classes` classes:
    /// a preset adapted to them, or `model.layers` on that input, compiled and checked.
    ///
    /// # Errors
    /// [`Error::Config`] naming `model.preset` or the layer of `model.layers` that does not fit.
    pub fn model_spec_for(&self, shape: [usize; 3], classes: usize) -> Result<ModelSpec> {
        let spec = match (&self.model.preset, &self.model.layers) {
            (Some(preset), None) => preset.spec_for(shape, classes),
            (None, Some(layers)) => ModelSpec { input: shape, classes, layers: layers.clone() },
            _ => return Err(Error::config("model", "give exactly one of model.preset or model.layers")),
        };
        let checked = match self.engine_for(&spec) {
            Engine::Fast => Network::new(&spec).map(|_| ()),
            _ => crate::arch::shapes(&spec).map(|_| ()),
        };
        checked.map_err(|e| {
            let Error::Config { field, message } = shape_error(&e, self.model.layers.is_some()) else {
                return shape_error(&e, self.model.layers.is_some());
            };
            Error::Config {
                field,
                message: format!(
                    "{message} (for examples of shape {shape:?} = [channels, height, width], {classes} classes)"
                ),
            }
        })?;
        self.check_engine(&spec.layers)?;
        Ok(spec)
    }
}

/// The example shape a config is checked against before its data are read.
const MNIST_SHAPE: [usize; 3] = [1, 28, 28];

/// A compile error of the architecture, attributed to config fields.
fn shape_error(e: &ShapeError, explicit_layers: bool) -> Error {
    let field = match (e.layer, explicit_layers) {
        (Some(i), true) => format!("model.layers[{i}]"),
        (None, true) => "model.layers".to_string(),
        (_, false) => "model.preset".to_string(),
    };
    Error::config(field, e.reason.clone())
}
