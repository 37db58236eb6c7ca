//! BandMF ([`super::Method::BandMf`]): DP-SGD whose noise is correlated across steps by a
//! b-banded matrix, so that it partly cancels in the running sum the model follows
//! (matrix-factorization DP-FTRL: Denisov, McMahan, Rush, Smith & Thakurta 2022; banded and
//! amplified: Choquette-Choo, Ganesh, Steinke & Thakurta 2023, "(Amplified) banded matrix
//! factorization", arXiv:2306.08153 — CGST23 below).
//!
//! **The mechanism.** C is the T × T lower-triangular Toeplitz matrix with b bands whose
//! coefficients are the first b of the square root of the workload the iterates follow — the
//! prefix sums, cₖ = ∏ⱼ₌₁ᵏ (2j − 1)/(2j) (Fichtenberger, Henzinger & Upadhyay 2023, Alg. 1), or
//! with momentum β their momentum-weighted form ([`super::factorization::coefficients_for`]) — truncated to b bands (the
//! banded square root of Kalinin & Lampert 2024) and scaled to unit ℓ2 norm, so that every column
//! of C has norm at most 1. Step t releases its clipped sum plus wₜ, where w = C⁻¹z and z is the independent
//! noise DP-SGD would add, N(0, σ²C²) per coordinate: by forward substitution,
//! wₜ = (zₜ − Σⱼ₌₁^{min(t,b)−1} cⱼ·wₜ₋ⱼ)/c₀. The noisy sums are C⁻¹(C·G + Z): a post-processing
//! of the matrix mechanism that releases C·G + Z.
//!
//! **The privacy.** Example i belongs to partition i mod b; step t samples partition
//! (t − 1) mod b, each of its examples independently with probability p (`privacy.sample_rate`).
//! An example's steps are then at least b apart, so its contributions fall in C's columns
//! whose b-row supports do not overlap, each of norm at most 1: by CGST23's reduction for
//! b-banded C under this cyclic Poisson sampling, the run is as private as ⌈T/b⌉ rounds of
//! DP-SGD at rate p and noise multiplier σ (their amplification analysis; JAX Privacy's
//! accountant composes the same events). Those rounds are accounted by [`SgdAccounting`]
//! (Rényi DP of the subsampled Gaussian, Mironov, Talwar & Zhang 2019), zero-out neighbours,
//! n public. The noise is the continuous Gaussian sampled in floating point, correlated in f64
//! arithmetic; the discrete Gaussian is refused.
//!
//! **Memory.** The last b − 1 noise vectors (P f64 each), saved with the run's state every step
//! (`confidential/state.bin`: with them the state could denoise the released iterates), so a
//! resumed run continues its correlation bit for bit, with a fixed seed or the operating
//! system's noise alike. A state without them (written before they were saved) is resumed as
//! before: a fixed seed recomputes them from z₁ … zₜ, the operating system's noise restarts the
//! correlation, which keeps the guarantee (see `replay`).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use super::factorization::coefficients_of;
use super::{RunAccounting, StepRule, TrainingMethod, poisson};
use crate::accounting::event::DpEvent;
use crate::accounting::{Conversion, Rdp};
use crate::error::{Error, Result};
use crate::noise::{NoiseSeed, Stream, gaussian};
use crate::train::config::{Resolved, TrainConfig};
use crate::train::privacy::{Accounting, CorrelatedReport, RunSession, SamplingReport, TrainingReport};
use crate::train::releases::ScheduledRelease;
use crate::train::sgd::{SgdAccounting, poisson_sample};
use crate::train::update::{ClippedSum, UpdateRule, update_theta};

/// The most bands (each is P floats of memory).
pub const MAX_BANDS: usize = 256;

/// BandMF.
pub(super) struct BandMf;

impl TrainingMethod for BandMf {
    fn describe(&self) -> &'static str {
        "BandMF (DP-SGD with banded correlated noise, cyclic Poisson sampling)"
    }
    fn samples(&self) -> bool {
        true
    }
    /// An RDP curve has no exact Gaussian-DP curve.
    fn default_conversion(&self) -> Option<Conversion> {
        Some(Conversion::Cks)
    }
    fn calibrate(&self, config: &TrainConfig, releases: &[ScheduledRelease]) -> Result<Option<Arc<dyn RunAccounting>>> {
        Ok(Some(Arc::new(BandAccounting::calibrate(config, releases)?)))
    }
    fn step_rule(&self, cfg: &Resolved, sigma: Option<f64>) -> Box<dyn StepRule> {
        banded_rule(cfg, sigma)
    }
}

/// The banded noise of `cfg`'s run at noise multiplier `sigma` (std σC).
pub(super) fn banded_rule(cfg: &Resolved, sigma: Option<f64>) -> Box<dyn StepRule> {
    let p = &cfg.config().privacy;
    let bands = p.bands.unwrap_or(1).clamp(1, MAX_BANDS);
    let coefs = coefficients_of(cfg, bands);
    Box::new(BandedNoise::new(coefs, sigma.map_or(0.0, |s| s * p.clip), cfg.noise_seed()))
}

/// `privacy.bands`, checked: 1 to [`MAX_BANDS`], at most `steps`.
///
/// # Errors
/// Missing or out of range (named).
pub(super) fn bands_of(config: &TrainConfig, steps: usize) -> Result<usize> {
    let name = config.privacy.method.name();
    match config.privacy.bands {
        Some(b) if (1..=MAX_BANDS.min(steps.max(1))).contains(&b) => Ok(b),
        Some(b) => Err(Error::config(
            "privacy.bands",
            format!(
                "{b}: give 1 to {} bands, at most privacy.worst_case_steps = {steps} (each example takes part once \
                 every b steps)",
                MAX_BANDS.min(steps.max(1))
            ),
        )),
        None => Err(Error::config(
            "privacy.bands",
            format!(
                "method = \"{name}\" needs the bands of its noise's correlation, e.g. bands = 8 (the examples are \
                 split into 8 partitions taken in turn)"
            ),
        )),
    }
}

/// The flags of step `step`'s partition among `n` examples.
pub(super) fn partition_flags(n: usize, step: usize, bands: usize) -> Vec<bool> {
    (0..n).map(|i| in_partition_of(i, step, bands)).collect()
}

/// BandMF's part of `privacy.json` that says how the noise is correlated.
pub(super) fn correlated_report(cfg: &Resolved, bands: usize, rounds: usize, partitions: String) -> CorrelatedReport {
    CorrelatedReport {
        bands,
        coefficients: coefficients_of(cfg, bands),
        rounds,
        partitions,
        noise: "step t adds w_t = (z_t - sum_{j=1}^{b-1} c_j w_{t-j}) / c_0, z_t ~ N(0, sigma^2 C^2) per coordinate \
                drawn as DP-SGD draws it: the noise C^{-1} z, in f64"
            .into(),
    }
}

/// The partition of example `i` of `bands`, and whether step `step` (1-based) samples it.
pub(super) fn in_partition_of(i: usize, step: usize, bands: usize) -> bool {
    i % bands == (step - 1) % bands
}

/// The examples among `n` in step `step`'s partition.
pub(super) fn partition_size(n: usize, step: usize, bands: usize) -> usize {
    let r = (step - 1) % bands;
    if r < n { (n - 1 - r) / bands + 1 } else { 0 }
}

/// BandMF's accounting: ⌈T/b⌉ rounds of DP-SGD at the partition's rate p and σ.
#[derive(Debug, Clone)]
pub struct BandAccounting {
    bands: usize,
    /// T.
    steps: usize,
    sgd: SgdAccounting,
}

impl BandAccounting {
    /// σ (calibrated to the config's ε over ⌈T/b⌉ rounds, or given) and the accounting, after
    /// refusing what it does not account for (as DP-SGD does, and bands out of range).
    ///
    /// # Errors
    /// `privacy.bands` missing or out of range, and DP-SGD's refusals (named).
    pub fn calibrate(config: &TrainConfig, releases: &[ScheduledRelease]) -> Result<Self> {
        let p = &config.privacy;
        let steps = p.worst_case_steps;
        let bands = bands_of(config, steps)?;
        if p.sample_rate.is_none() {
            return Err(Error::config(
                "privacy.sample_rate",
                format!(
                    "method = \"bandmf\" needs the Poisson sampling rate within a step's partition, e.g. sample_rate \
                     = {:.3} ({} examples per step on average from 60,000 in {bands} partitions)",
                    (0.004 * bands as f64).min(1.0),
                    240
                ),
            ));
        }
        let sgd = poisson::calibrate_rounds(config, releases, steps.div_ceil(bands), false)?;
        Ok(Self { bands, steps, sgd })
    }

    /// The rounds of DP-SGD the first `step` steps are as private as.
    fn rounds(&self, step: usize) -> usize {
        step.div_ceil(self.bands)
    }
}

impl RunAccounting for BandAccounting {
    fn sigma(&self) -> f64 {
        self.sgd.sigma()
    }
    fn epsilon(&self, cfg: &Resolved) -> Option<f64> {
        RunAccounting::epsilon_through(self, cfg, cfg.max_steps())
    }
    fn epsilon_through(&self, cfg: &Resolved, step: usize) -> Option<f64> {
        self.sgd.epsilon_through(self.rounds(step), cfg.delta()).ok().map(|(e, _)| e)
    }
    /// ⌈T/b⌉ Poisson-subsampled Gaussian rounds at rate p.
    fn event(&self) -> Option<DpEvent> {
        Some(self.sgd.event())
    }
    fn rdp(&self) -> Option<Rdp> {
        super::rdp_of(&self.sgd.event())
    }
    fn ledger_budget(&self) -> Option<f64> {
        None
    }
    fn ledger_unit(&self) -> String {
        "none: BandMF keeps no per-example ledger".into()
    }
    fn sample_rate(&self) -> Option<f64> {
        Some(self.sgd.sample_rate())
    }
    /// Step `step`'s partition, each of its examples with probability p; divided by the
    /// partition's expected batch p·|partition|.
    fn sample(&self, step: usize, n: usize, seed: NoiseSeed) -> Result<(Option<Vec<bool>>, f64)> {
        let flags = self.sample_with(step, n, &mut seed.rng(Stream::sample(step))?);
        Ok((flags, self.sgd.sample_rate() * partition_size(n, step, self.bands) as f64))
    }
    fn sample_with(&self, step: usize, n: usize, rng: &mut rand_chacha::ChaCha20Rng) -> Option<Vec<bool>> {
        let mut flags = poisson_sample(n, self.sgd.sample_rate(), rng);
        flags.iter_mut().enumerate().for_each(|(i, f)| *f &= in_partition_of(i, step, self.bands));
        Some(flags)
    }
    fn via(&self, conversion: Conversion) -> String {
        let rounds = self.rounds(self.steps);
        format!("{rounds} rounds of the subsampled Gaussian's Renyi DP (banded reduction) and {conversion}")
    }
    fn neighbours(&self, cfg: &Resolved) -> String {
        poisson::neighbours(cfg)
    }
    fn report(
        &self,
        cfg: &Resolved,
        _session: Option<&RunSession>,
        examples: usize,
        _steps_run: usize,
    ) -> Result<Option<Accounting>> {
        report(cfg, self, examples).map(Some)
    }
}

/// BandMF's part of `privacy.json` for a run on `examples` training examples.
fn report(cfg: &Resolved, band: &BandAccounting, examples: usize) -> Result<Accounting> {
    let p = &cfg.config().privacy;
    let (steps, bands) = (cfg.worst_case_steps(), band.bands);
    let rounds = band.rounds(steps);
    let (q, sigma) = (band.sgd.sample_rate(), band.sgd.sigma());
    let (epsilon, order) = band.sgd.epsilon_through(rounds, cfg.delta())?;
    let by_conversion = Conversion::ALL
        .into_iter()
        .map(|m| (m.name().to_string(), poisson::rounds_epsilon(q, sigma, rounds, cfg.delta(), m)))
        .collect();
    let correlated = correlated_report(
        cfg,
        bands,
        rounds,
        format!(
            "example i (its row in the training split) is in partition i mod {bands}; step t samples partition \
             (t - 1) mod {bands}, each of its examples independently with probability {q}"
        ),
    );
    Ok(Accounting {
        event: Some(band.sgd.event()),
        epsilon: Some(epsilon),
        epsilon_by_conversion: by_conversion,
        target_epsilon: p.epsilon,
        rho: None,
        mu: None,
        guarantee: guarantee(cfg, band, q),
        rests_on: rests_on(cfg, band),
        training: TrainingReport {
            sigma,
            clip: p.clip,
            noise_std: sigma * p.clip,
            b_norm: None,
            worst_case_steps: steps,
            max_steps: cfg.max_steps(),
            rho: None,
            epsilon_of_first_k_steps_alone: Some(epsilon),
        },
        sampling: Some(SamplingReport {
            rate: q,
            expected_batch_size: q * examples.div_ceil(bands) as f64,
            steps,
            rdp_order: order,
            orders: "dp_accounting's default orders: 1.1 to 10.9 by 0.1, 11 to 63, 128, 256, 512, 1024".into(),
            how: "cyclic Poisson: the step's partition, each of its examples independently, from the run's CSPRNG \
                  on a stream of its own per step"
                .into(),
            individual: None,
        }),
        releases: Vec::new(),
        session: None,
        correlated: Some(correlated),
    })
}

/// BandMF's guarantee in one paragraph.
fn guarantee(cfg: &Resolved, band: &BandAccounting, q: f64) -> String {
    let (steps, b) = (cfg.worst_case_steps(), band.bands);
    format!(
        "the run's {steps} steps are BandMF (Choquette-Choo, Ganesh, Steinke & Thakurta 2023): the examples are split \
         into {b} partitions taken in turn, each step includes each example of its partition independently with \
         probability {q}, clips each included gradient to C and adds to their sum the step's row of C^-1 z, where z \
         is N(0, sigma^2 C^2) per coordinate and step and C is lower-triangular with {b} bands of unit norm. An \
         example's steps are at least {b} apart, so by their reduction for banded C under cyclic Poisson sampling \
         the run is as private as {} rounds of DP-SGD at rate {q} and noise multiplier sigma, under zero-out \
         neighbours (n public), whose Renyi DP (Mironov, Talwar & Zhang 2019) is composed and converted to (epsilon, \
         delta) by {}",
        band.rounds(steps),
        cfg.config().privacy.conversion
    )
}

/// What each number of BandMF's `privacy.json` rests on.
fn rests_on(cfg: &Resolved, band: &BandAccounting) -> BTreeMap<String, String> {
    let (steps, b) = (cfg.worst_case_steps(), band.bands);
    let mut rests_on = BTreeMap::new();
    rests_on.insert(
        "sensitivity".into(),
        "C per participation, as DP-SGD's: each sampled example's clipped row is rounded onto an integer grid and \
         summed exactly; C's columns have norm at most 1 and an example's participations fall in columns whose \
         supports do not overlap"
            .into(),
    );
    rests_on.insert(
        "epsilon".into(),
        format!(
            "Choquette-Choo, Ganesh, Steinke & Thakurta 2023's reduction of {b}-banded matrix factorization under \
             cyclic Poisson sampling to DP-SGD: {} rounds (ceil({steps}/{b})) of the Poisson-subsampled Gaussian, \
             whose Renyi DP (Mironov, Talwar & Zhang 2019) is composed (Mironov 2017, Prop. 1) and converted by {}, \
             minimised over the orders; every value rounded up",
            band.rounds(steps),
            cfg.config().privacy.conversion
        ),
    );
    rests_on.insert(
        "noise".into(),
        "the continuous Gaussian sampled in floating point (as DP-SGD's), correlated by forward substitution in f64: \
         its rounding errors, about 1e-16 of the noise, depend on the noise alone. The last b - 1 noise vectors \
         are saved with the run's confidential state every step, so a resume continues the correlation"
            .into(),
    );
    rests_on.insert(
        "sampling".into(),
        "partitions by row index, fixed before training and independent of the data; within a partition each example \
         with probability floor(q 2^64)/2^64 <= q, from the run's ChaCha20 stream. The realised batch sizes stay \
         confidential"
            .into(),
    );
    rests_on
}

/// BandMF's noise: wₜ = (zₜ − Σⱼ cⱼ·wₜ₋ⱼ)/c₀ added to step t's exact sum in f64, then the
/// update (heavy-ball momentum's buffer is the rule's state). The last b − 1 noise vectors are
/// kept in memory and recomputed from the noise seed's streams after a resume.
#[derive(Debug, Clone)]
pub struct BandedNoise {
    coefs: Vec<f64>,
    std: f64,
    seed: NoiseSeed,
    /// wₜ₋₁, wₜ₋₂, … (at most b − 1).
    history: VecDeque<Vec<f64>>,
    /// The step whose noise comes next (history holds the ones before it).
    next: usize,
    velocity: Vec<f32>,
    /// Saved noise for step `next`, placed at that step (when θ's length is known).
    saved: Option<Vec<f64>>,
}

impl BandedNoise {
    /// The rule for coefficients `coefs` (c₀ > 0) at noise std `std` = σC from `seed`.
    #[must_use]
    pub fn new(coefs: Vec<f64>, std: f64, seed: NoiseSeed) -> Self {
        Self { coefs, std, seed, history: VecDeque::new(), next: 1, velocity: Vec::new(), saved: None }
    }

    /// Step `step`'s noise wₜ over `p` coordinates, from zₜ (its update stream) and the history,
    /// which it joins.
    fn noise(&mut self, step: usize, p: usize) -> Result<Vec<f64>> {
        let mut rng = self.seed.rng(Stream::update(step))?;
        let mut w: Vec<f64> = (0..p).map(|_| gaussian(self.std, &mut rng)).collect();
        for (j, past) in self.history.iter().enumerate() {
            let c = self.coefs[j + 1];
            w.iter_mut().zip(past).for_each(|(x, &y)| *x -= c * y);
        }
        let c0 = self.coefs[0];
        w.iter_mut().for_each(|x| *x /= c0);
        if self.coefs.len() > 1 {
            self.history.push_front(w.clone());
            self.history.truncate(self.coefs.len() - 1);
        }
        self.next = step + 1;
        Ok(w)
    }

    /// Saved noise `saved` as the history of `p` coordinates.
    fn place(&mut self, saved: &[f64], p: usize) -> Result<()> {
        let most = self.coefs.len() - 1;
        if p == 0 || !saved.len().is_multiple_of(p) || saved.len() / p > most {
            return Err(Error::State(format!(
                "its noise has {} values, not at most {most} vectors of {p} (bands - 1 of theta's length)",
                saved.len()
            )));
        }
        self.history = saved.chunks(p).map(<[f64]>::to_vec).collect();
        Ok(())
    }

    /// The history before step `step` (the first step, or a resumed run without saved noise).
    /// With a fixed seed it is recomputed from the streams of steps 1 … `step` − 1 (w depends on
    /// every earlier z), so the run continues bit for bit. With the operating system's noise (a private run) those
    /// draws cannot be had again, and drawing others would be new noise nobody needs: the
    /// correlation restarts at `step`. The steps before and after then follow the blocks of a
    /// block-diagonal C — still b-banded, lower-triangular, every column of norm at most 1 — so
    /// the guarantee is the same; only the cancellation across the resume is lost.
    fn replay(&mut self, step: usize, p: usize) -> Result<()> {
        self.history.clear();
        self.next = step;
        if let NoiseSeed::Fixed(_) = self.seed {
            self.next = 1;
            for t in 1..step {
                self.noise(t, p)?;
            }
        }
        Ok(())
    }
}

impl StepRule for BandedNoise {
    fn noise_is_independent(&self) -> bool {
        false
    }
    fn apply(&mut self, step: usize, theta: &mut [f32], sum: ClippedSum, update: UpdateRule) -> Result<()> {
        let p = theta.len();
        if let Some(saved) = self.saved.take() {
            self.place(&saved, p)?;
        }
        if step != self.next || self.history.front().is_some_and(|h| h.len() != p) {
            self.replay(step, p)?;
        }
        let w = self.noise(step, p)?;
        let ClippedSum::Grid { values, gamma } = sum else {
            return Err(Error::State("BandMF's noise needs an exact clipped sum".into()));
        };
        if values.len() != p {
            return Err(Error::State(format!("a sum of {} values for {p} parameters", values.len())));
        }
        let noisy: Vec<f32> = values.iter().zip(&w).map(|(&v, &n)| (v as f64 * gamma + n) as f32).collect();
        update_theta(theta, &mut self.velocity, &noisy, update);
        Ok(())
    }
    fn state(&self) -> &[f32] {
        &self.velocity
    }
    fn restore(&mut self, state: Vec<f32>) {
        self.velocity = state;
        // The noise history is restored by `restore_noise`, or recomputed at the next step.
        self.history.clear();
        self.next = 0;
        self.saved = None;
    }
    fn noise_state(&self) -> Vec<f64> {
        self.history.iter().flatten().copied().collect()
    }
    /// Saved noise for step `next`; none (a state written before the noise was saved) leaves
    /// the history to [`replay`](Self::replay).
    fn restore_noise(&mut self, next: usize, noise: Vec<f64>) -> Result<()> {
        if !noise.is_empty() {
            self.next = next;
            self.saved = Some(noise);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::method::factorization::coefficients_for;

    /// C's coefficients without momentum: cₖ = ∏ⱼ₌₁ᵏ (2j − 1)/(2j), scaled.
    fn coefficients(bands: usize) -> Vec<f64> {
        coefficients_for(bands, 0.0)
    }

    /// c = (1, 1/2, 3/8, 5/16, …)/‖·‖: the square root of the prefix-sum matrix's first row.
    #[test]
    fn the_coefficients_are_the_prefix_sums_square_root_at_unit_norm() {
        let c = coefficients(4);
        let raw = [1.0, 0.5, 0.375, 0.3125];
        let norm = raw.iter().map(|x: &f64| x * x).sum::<f64>().sqrt();
        for (a, b) in c.iter().zip(raw) {
            assert!((a - b / norm).abs() < 1e-11, "{c:?}");
        }
        assert_eq!(coefficients(1), vec![1.0]);
        // Every column's squared norm at most 1, with room for the rounding of this very sum.
        for bands in 1..=MAX_BANDS {
            let sq: f64 = coefficients(bands).iter().map(|x| x * x).sum();
            assert!(sq <= 1.0 - bands as f64 * f64::EPSILON || bands == 1, "{bands} bands: {sq}");
        }
        // The untruncated square root squares to the prefix-sum matrix: Σ_{j≤k} c_j c_{k−j} = 1.
        let full = coefficients(12);
        let scale = 1.0 / full[0];
        for k in 0..12 {
            let s: f64 = (0..=k).map(|j| full[j] * full[k - j] * scale * scale).sum();
            assert!((s - 1.0).abs() < 1e-12, "k = {k}: {s}");
        }
    }

    /// With momentum β the untruncated root squares to the workload aₖ = Σⱼ≤ₖ βʲ; at β = 0 it is
    /// the prefix sums' root; every column stays within unit norm.
    #[test]
    fn with_momentum_the_coefficients_are_the_workloads_square_root() {
        for beta in [0.0, 0.5, 0.9] {
            let c = coefficients_for(16, beta);
            let scale = 1.0 / c[0];
            for k in 0..16 {
                let square: f64 = (0..=k).map(|j| c[j] * c[k - j] * scale * scale).sum();
                let a: f64 = (0..=k).map(|j| f64::powi(beta, j as i32)).sum();
                assert!((square - a).abs() < 1e-10 * a, "beta {beta}, k = {k}: {square} against {a}");
            }
            assert!(c.iter().map(|x| x * x).sum::<f64>() <= 1.0 - 16.0 * f64::EPSILON, "beta {beta}");
        }
        assert_eq!(coefficients_for(8, 0.0), coefficients(8));
        assert_eq!(coefficients_for(1, 0.9), vec![1.0]);
    }

    /// The noise is C⁻¹z: C times the noise of steps 1 … T is the independent noise z drawn
    /// from the same streams, recomputed here by hand.
    #[test]
    fn the_noise_is_c_inverse_z() {
        let (bands, steps, p, std) = (4, 11, 3, 2.5);
        let seed = NoiseSeed::Fixed(7);
        let c = coefficients(bands);
        let mut rule = BandedNoise::new(c.clone(), std, seed);
        let w: Vec<Vec<f64>> = (1..=steps).map(|t| rule.noise(t, p).unwrap()).collect();
        for t in 0..steps {
            let mut rng = seed.rng(Stream::update(t + 1)).unwrap();
            let z: Vec<f64> = (0..p).map(|_| gaussian(std, &mut rng)).collect();
            for i in 0..p {
                let cw: f64 = (0..bands.min(t + 1)).map(|j| c[j] * w[t - j][i]).sum();
                assert!((cw - z[i]).abs() < 1e-12 * std, "step {}, coordinate {i}: {cw} against {}", t + 1, z[i]);
            }
        }
    }

    /// A rule restored at step t recomputes the history: its noise is the uninterrupted one's.
    #[test]
    fn a_restored_rule_continues_its_noise_bit_for_bit() {
        let seed = NoiseSeed::Fixed(3);
        let mut whole = BandedNoise::new(coefficients(3), 1.0, seed);
        let all: Vec<Vec<f64>> = (1..=9).map(|t| whole.noise(t, 5).unwrap()).collect();
        let mut resumed = BandedNoise::new(coefficients(3), 1.0, seed);
        resumed.restore(Vec::new());
        let mut theta = vec![0.0f32; 5];
        let sum = ClippedSum::Grid { values: vec![0; 5], gamma: 1.0 };
        resumed.apply(6, &mut theta, sum, UpdateRule::plain(1.0, 1.0)).unwrap();
        let expected: Vec<f32> = all[5].iter().map(|&n| (-n) as f32).collect();
        assert_eq!(theta, expected);
        assert_eq!(resumed.noise(7, 5).unwrap(), all[6]);
    }

    /// With the operating system's noise a restored rule starts a new band: its first noise is
    /// z/c₀ alone (C's block after the resume), not a continuation of draws it cannot have again.
    #[test]
    fn a_restored_rule_with_os_noise_restarts_the_band() {
        let c = coefficients(3);
        let mut rule = BandedNoise::new(c.clone(), 1.0, NoiseSeed::Os);
        rule.restore(Vec::new());
        let mut theta = vec![0.0f32; 4];
        let sum = ClippedSum::Grid { values: vec![0; 4], gamma: 1.0 };
        rule.apply(50, &mut theta, sum, UpdateRule::plain(1.0, 1.0)).unwrap();
        assert_eq!((rule.history.len(), rule.next), (1, 51));
        let w = rule.history[0].clone();
        // The next step subtracts c₁·w from its own z: what the band after the resume does.
        assert!(w.iter().zip(&theta).all(|(&n, &t)| (-n) as f32 == t));
    }

    /// A rule restored with its saved noise continues its band with the operating system's
    /// noise (no restart), and with a fixed seed gives the uninterrupted noise without replaying
    /// the steps before; saved noise of another length is refused.
    #[test]
    fn a_rule_restored_with_its_saved_noise_continues_its_band() {
        let c = coefficients(3);
        let sum = || ClippedSum::Grid { values: vec![0; 4], gamma: 1.0 };
        let mut whole = BandedNoise::new(c.clone(), 1.0, NoiseSeed::Os);
        let mut theta = vec![0.0f32; 4];
        for t in 1..=5 {
            whole.apply(t, &mut theta, sum(), UpdateRule::plain(1.0, 1.0)).unwrap();
        }
        let saved = whole.noise_state();
        assert_eq!(saved.len(), 2 * 4);
        let mut resumed = BandedNoise::new(c.clone(), 1.0, NoiseSeed::Os);
        resumed.restore(Vec::new());
        resumed.restore_noise(6, saved.clone()).unwrap();
        resumed.apply(6, &mut theta, sum(), UpdateRule::plain(1.0, 1.0)).unwrap();
        // Step 6's noise joined the saved two: the newest saved one is now second.
        assert_eq!((resumed.history.len(), resumed.next), (2, 7));
        assert_eq!(resumed.history[1], saved[..4]);
        // A fixed seed: the saved noise gives the uninterrupted step 6.
        let mut fixed = BandedNoise::new(c.clone(), 1.0, NoiseSeed::Fixed(3));
        let all: Vec<Vec<f64>> = (1..=6).map(|t| fixed.noise(t, 4).unwrap()).collect();
        let mut again = BandedNoise::new(c.clone(), 1.0, NoiseSeed::Fixed(3));
        again.restore(Vec::new());
        let history: Vec<f64> = all[4].iter().chain(&all[3]).copied().collect();
        again.restore_noise(6, history.clone()).unwrap();
        let mut theta = vec![0.0f32; 4];
        again.apply(6, &mut theta, sum(), UpdateRule::plain(1.0, 1.0)).unwrap();
        assert_eq!(theta, all[5].iter().map(|&n| (-n) as f32).collect::<Vec<_>>());
        // It is the saved noise that step 6 used, not a replay: other saved noise, another step.
        let mut other = BandedNoise::new(c.clone(), 1.0, NoiseSeed::Fixed(3));
        other.restore(Vec::new());
        other.restore_noise(6, history.iter().map(|x| 2.0 * x).collect()).unwrap();
        let mut moved = vec![0.0f32; 4];
        other.apply(6, &mut moved, sum(), UpdateRule::plain(1.0, 1.0)).unwrap();
        assert_ne!(moved, theta);
        let mut bad = BandedNoise::new(c, 1.0, NoiseSeed::Os);
        bad.restore_noise(6, vec![0.0; 12]).unwrap();
        assert!(bad.apply(6, &mut theta, sum(), UpdateRule::plain(1.0, 1.0)).is_err());
    }

    /// Each example is sampled only at the steps of its partition, at rate p there.
    #[test]
    fn examples_take_part_only_in_their_partitions_steps() {
        let (n, bands) = (10_001, 4);
        for step in 1..=8 {
            assert_eq!(partition_size(n, step, bands), (0..n).filter(|&i| in_partition_of(i, step, bands)).count());
        }
        let mut counts = vec![0usize; n];
        let steps = 400;
        let mut rng = NoiseSeed::Fixed(1).rng(Stream::sample(1)).unwrap();
        let (q, sgd) = (0.5, SgdAccounting::new(0.5, 1.0, 100, Conversion::Cks).unwrap());
        let band = BandAccounting { bands, steps: 400, sgd };
        for step in 1..=steps {
            let flags = band.sample_with(step, n, &mut rng).unwrap();
            for (i, f) in flags.iter().enumerate() {
                assert!(!f || in_partition_of(i, step, bands), "example {i} at step {step}");
                counts[i] += usize::from(*f);
            }
        }
        let mean = counts.iter().sum::<usize>() as f64 / n as f64;
        let expected = q * (steps / bands) as f64;
        assert!((mean - expected).abs() < 0.5, "{mean} against {expected}");
    }
}
